/* build.c - builds a document's SeKV memory from its global-layer KV cache
 * (DESIGN.md section 2 steps 4-5): segmentation under the budget, exact
 * rows, surprisal-weighted summaries, truncated-SVD factors of every
 * compressed span (LAPACK sgesdd, pthreads over spans) and the untrained
 * router (top principal directions of each layer's keys, ssyevd).
 * Invariant: the memory holds copies only; the raw KV is never kept.
 * Storage layout lives in mem.c, segmentation in segment.c.
 */
#include "engine/sekv/sekv_int.h"
#include "engine/err.h"
#include "engine/quant.h"

#include <lapacke.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define COV_BLOCK 32  /* key rows per covariance update (router) */

/* Work shared by the build threads: router jobs first (the largest), then
 * one job per (compressed span, layer, KV head, K/V), longest spans first. */
struct build_job {
	struct sekv_mem *m;
	const uint16_t *const *k, *const *v;
	const int32_t *order;    /* [n_comp] compressed spans, longest first */
	int max_len;             /* longest compressed span */
	int n_route;             /* router jobs: n_layer * n_head_kv */
	int n_svd;               /* n_comp * n_layer * n_head_kv * 2 */
	float q_scale;           /* model attention scale, for the router */
	atomic_int next;
	atomic_int fail;         /* first failure: job index + 1 */
	int fail_info;           /* LAPACK info of the failure */
};

struct build_ws {
	float *a, *s, *u, *vt, *work;
	lapack_int *iwork;
	size_t lwork;
};

static void ws_free(struct build_ws *w)
{
	free(w->a);
	free(w->s);
	free(w->u);
	free(w->vt);
	free(w->work);
	free(w->iwork);
}

static int ws_alloc(struct build_ws *w, int max_len, int d_h)
{
	size_t k = (size_t)(max_len < d_h ? max_len : d_h);
	size_t big = (size_t)d_h * (d_h > max_len ? d_h : max_len);

	memset(w, 0, sizeof *w);
	w->a = malloc(big * sizeof(float));
	w->s = malloc((size_t)d_h * sizeof(float));
	w->u = malloc(big * sizeof(float));
	w->vt = malloc((k * (size_t)(max_len > d_h ? max_len : d_h) + COV_BLOCK * (size_t)d_h) *
		       sizeof(float));
	w->iwork = malloc(8 * (size_t)d_h * sizeof(lapack_int));
	if (!w->a || !w->s || !w->u || !w->vt || !w->iwork) {
		ws_free(w);
		return SEKV_ENOMEM;
	}
	return SEKV_OK;
}

/* Ensures w->work holds lwork floats (build time only). */
static int ws_work(struct build_ws *w, size_t lwork)
{
	if (lwork > w->lwork) {
		float *p = realloc(w->work, lwork * sizeof(float));
		if (!p)
			return SEKV_ENOMEM;
		w->work = p;
		w->lwork = lwork;
	}
	return SEKV_OK;
}

/* Stores u and v of f (rank f->rank) at the memory's type from LAPACK's
 * column-major outputs: our u[i][t] = vt[i*mn + t] (a row of u is a
 * column of VT), our v[j][t] = lu[t*d + j]. The singular vectors have
 * entries in [-1, 1], so fp16 rounds but never overflows. */
static void put_factor(struct sekv_factor *f, int f16, int len, int d,
		       const float *vt, int mn, const float *lu)
{
	size_t r = (size_t)f->rank;

	for (int i = 0; i < len; i++) {
		if (f16)
			quant_f32_to_f16_row(vt + (size_t)i * mn, (uint16_t *)f->u + i * r, r);
		else
			memcpy((float *)f->u + i * r, vt + (size_t)i * mn, r * sizeof(float));
	}
	for (int j = 0; j < d; j++)
		for (size_t t = 0; t < r; t++) {
			float x = lu[t * d + j];
			if (f16)
				((uint16_t *)f->v)[j * r + t] = quant_f32_to_f16(x);
			else
				((float *)f->v)[j * r + t] = x;
		}
}

/* Truncated SVD of one span's K or V rows. The row-major |S| x d_h matrix
 * is the column-major d_h x |S| matrix X^T = V S U^T, so LAPACK's left
 * vectors are our v and its right vectors our u. Returns 0 or LAPACK info. */
static int svd_job(struct build_job *b, struct build_ws *w, int j)
{
	struct sekv_mem *m = b->m;
	int per = m->n_layer * m->n_head_kv * 2;
	int c = b->order[j / per], r = j % per;
	int l = r / (m->n_head_kv * 2), kv = r / 2 % m->n_head_kv, which = r % 2;
	const struct sekv_span *sp = &m->span[m->comp_span[c]];
	struct sekv_factor *f = &m->fac[(((size_t)l * m->n_comp + c) *
					  m->n_head_kv + kv) * 2 + which];
	const uint16_t *x = (which ? b->v : b->k)[l];
	int d = m->d_h, len = sp->len, mn = len < d ? len : d;
	float q;
	lapack_int info;

	for (int i = 0; i < len; i++)
		quant_f16_to_f32_row(x + ((size_t)(sp->start + i) * m->n_head_kv + kv) * d,
				     w->a + (size_t)i * d, (size_t)d);
	info = LAPACKE_sgesdd_work(LAPACK_COL_MAJOR, 'S', d, len, w->a, d, w->s,
				   w->u, d, w->vt, mn, &q, -1, w->iwork);
	if (info)
		return (int)info;
	if (ws_work(w, (size_t)q + 1))
		return -1000;
	info = LAPACKE_sgesdd_work(LAPACK_COL_MAJOR, 'S', d, len, w->a, d, w->s,
				   w->u, d, w->vt, mn, w->work, (lapack_int)w->lwork,
				   w->iwork);
	if (info)
		return (int)info;
	for (int i = 0; i < f->rank; i++)
		f->s[i] = w->s[i];
	put_factor(f, m->factor_f16, len, d, w->vt, mn, w->u);
	return 0;
}

/* Router of (global layer l, KV head kv): rows of W are the top-d'
 * eigenvectors of the covariance of the document's keys; every query head
 * of the KV head gets the same W. */
static int route_job(struct build_job *b, struct build_ws *w, int j)
{
	struct sekv_mem *m = b->m;
	int l = j / m->n_head_kv, kv = j % m->n_head_kv, d = m->d_h, n = m->n_tok;
	int group = m->n_head / m->n_head_kv, n_w = d < SEKV_D_ROUTE ? d : SEKV_D_ROUTE;
	float *cov = w->u, *mean = w->s, *row = w->vt, *blk = w->vt, *ev = w->a, q;
	const uint16_t *b_k = b->k ? b->k[l] : NULL;
	lapack_int info, iq;

	memset(cov, 0, (size_t)d * d * sizeof(float));
	memset(mean, 0, (size_t)d * sizeof(float));
	for (int t = 0; t < n; t++) {
		quant_f16_to_f32_row(b_k + ((size_t)t * m->n_head_kv + kv) * d, row, (size_t)d);
		for (int i = 0; i < d; i++)
			mean[i] += row[i];
	}
	for (int i = 0; i < d; i++)
		mean[i] /= n > 0 ? (float)n : 1.0f;
	/* blocks of rows keep one row of cov in L1 while it is updated */
	for (int t0 = 0; t0 < n; t0 += COV_BLOCK) {
		int nb = n - t0 < COV_BLOCK ? n - t0 : COV_BLOCK;
		for (int b = 0; b < nb; b++) {
			float *x = blk + (size_t)b * d;
			quant_f16_to_f32_row(b_k + ((size_t)(t0 + b) * m->n_head_kv + kv) * d,
					     x, (size_t)d);
			for (int i = 0; i < d; i++)
				x[i] -= mean[i];
		}
		for (int i = 0; i < d; i++) {
			float *ci = cov + (size_t)i * d;
			for (int b = 0; b < nb; b++) {
				const float *x = blk + (size_t)b * d;
				float xi = x[i];
				for (int jj = i; jj < d; jj++)
					ci[jj] += xi * x[jj];
			}
		}
	}
	/* upper triangle in row-major = lower triangle in column-major */
	info = LAPACKE_ssyevd_work(LAPACK_COL_MAJOR, 'V', 'L', d, cov, d, ev,
				   &q, -1, &iq, -1);
	if (info)
		return (int)info;
	if (ws_work(w, (size_t)q + 1))
		return -1000;
	if ((size_t)iq > 8 * (size_t)d) {
		lapack_int *p = realloc(w->iwork, (size_t)iq * sizeof *p);
		if (!p)
			return -1000;
		w->iwork = p;
	}
	info = LAPACKE_ssyevd_work(LAPACK_COL_MAJOR, 'V', 'L', d, cov, d, ev,
				   w->work, (lapack_int)w->lwork, w->iwork,
				   iq > 8 * d ? iq : 8 * d);
	if (info)
		return (int)info;
	/* Scale c: with W = c P (P orthonormal), the router logit is
	 * c/sqrt(d') <Pq, unit(P k_bar)>, while the coarse row's attention logit
	 * is q_scale <q, k_bar>. Matching them at the mean |P k_bar| of this
	 * layer's spans keeps the +log|S| term in proportion (untrained init;
	 * without it the span-length term dominates the ranking). */
	double norm_sum = 0;
	for (int c = 0; c < m->n_comp; c++) {
		const float *kb = m->k_bar + (((size_t)l * m->n_comp + c) * m->n_head_kv + kv) * d;
		double nrm = 0;
		for (int i = 0; i < n_w; i++) {
			const float *e = cov + (size_t)(d - 1 - i) * d;
			double x = 0;
			for (int jj = 0; jj < d; jj++)
				x += (double)e[jj] * kb[jj];
			nrm += x * x;
		}
		norm_sum += sqrt(nrm);
	}
	float scale = m->n_comp > 0 && norm_sum > 0
		? (float)(b->q_scale * (norm_sum / m->n_comp) * sqrt((double)SEKV_D_ROUTE)) : 1.0f;
	for (int h = kv * group; h < (kv + 1) * group; h++) {
		float *wh = m->route_w + ((size_t)l * m->n_head + h) * SEKV_D_ROUTE * d;
		memset(wh, 0, (size_t)SEKV_D_ROUTE * d * sizeof(float));
		for (int i = 0; i < n_w; i++)
			for (int jj = 0; jj < d; jj++)
				wh[(size_t)i * d + jj] = scale * cov[(size_t)(d - 1 - i) * d + jj];
	}
	return 0;
}

static void *build_thread(void *arg)
{
	struct build_job *b = arg;
	struct build_ws w;
	int d = b->m->d_h;

	if (ws_alloc(&w, b->max_len > d ? b->max_len : d, d)) {
		int z = 0;
		atomic_compare_exchange_strong(&b->fail, &z, -1);
		return NULL;
	}
	for (;;) {
		int j = atomic_fetch_add(&b->next, 1), rc;
		if (j >= b->n_route + b->n_svd || atomic_load(&b->fail))
			break;
		rc = j < b->n_route ? route_job(b, &w, j) : svd_job(b, &w, j - b->n_route);
		if (rc) {
			int z = 0;
			if (atomic_compare_exchange_strong(&b->fail, &z, j + 1))
				b->fail_info = rc;
			break;
		}
	}
	ws_free(&w);
	return NULL;
}

static int by_len_desc(const void *a, const void *b, void *arg)
{
	const struct sekv_mem *m = arg;
	int la = m->span[m->comp_span[*(const int32_t *)a]].len;
	int lb = m->span[m->comp_span[*(const int32_t *)b]].len;
	return la != lb ? (la < lb) - (la > lb) :
		(*(const int32_t *)a > *(const int32_t *)b) -
		(*(const int32_t *)a < *(const int32_t *)b);
}

/* Runs the router and SVD jobs on n_threads threads (the caller's included). */
static int run_jobs(struct sekv_mem *m, const struct sekv_params *p,
		    const uint16_t *const *k, const uint16_t *const *v,
		    char *err, size_t errlen)
{
	struct build_job b = {0};
	pthread_t th[64];
	int n_th = p->n_threads > 0 ? p->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
	int started = 0, rc = SEKV_OK;
	int32_t *order = malloc(((size_t)m->n_comp + 1) * sizeof *order);

	if (!order)
		return sekv_errf(err, errlen, SEKV_ENOMEM, "sekv_build: factors: out of memory");
	for (int c = 0; c < m->n_comp; c++) {
		order[c] = c;
		if (m->span[m->comp_span[c]].len > b.max_len)
			b.max_len = m->span[m->comp_span[c]].len;
	}
	qsort_r(order, (size_t)m->n_comp, sizeof *order, by_len_desc, m);
	b.m = m;
	b.k = k;
	b.v = v;
	b.order = order;
	b.n_route = m->n_layer * m->n_head_kv;
	b.q_scale = p->q_scale > 0 ? p->q_scale : 1.0f / sqrtf((float)m->d_h);
	b.n_svd = m->n_comp * m->n_layer * m->n_head_kv * 2;
	atomic_init(&b.next, 0);
	atomic_init(&b.fail, 0);
	if (n_th < 1)
		n_th = 1;
	if (n_th > 64)
		n_th = 64;
	if (n_th > b.n_route + b.n_svd)
		n_th = b.n_route + b.n_svd;
	for (int i = 1; i < n_th; i++)
		if (!pthread_create(&th[started], NULL, build_thread, &b))
			started++;
	build_thread(&b);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	if (atomic_load(&b.fail) == -1 || b.fail_info == -1000)
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "sekv_build: factors: out of memory");
	else if (atomic_load(&b.fail) > 0) {
		int j = atomic_load(&b.fail) - 1;
		rc = sekv_errf(err, errlen, SEKV_EINVAL, "sekv_build: %s: job %d: LAPACK info %d",
			       j < b.n_route ? "router ssyevd" : "factor sgesdd", j, b.fail_info);
	}
	free(order);
	return rc;
}

/* Copies exact rows and computes the summaries k_bar, v_bar of every
 * compressed span: weights H_t / sum H over the span (uniform if the sum is
 * not positive; negative surprisal counts as 0). */
static void fill_rows(struct sekv_mem *m, const uint16_t *const *k,
		      const uint16_t *const *v)
{
	size_t row = (size_t)m->n_head_kv * m->d_h;
	int e = 0, c = 0, t = 0;

	for (int i = 0; i <= m->n_span && t < m->n_tok; i++) {
		int end = i < m->n_span ? m->span[i].start : m->n_tok;
		int keep = i < m->n_span && m->span[i].full;
		if (keep)
			end += m->span[i].len;
		for (; t < end; t++)
			m->exact_pos[e++] = t;
		if (i < m->n_span && !keep)
			t += m->span[i].len;
	}
	for (int l = 0; l < m->n_layer; l++)
		for (int i = 0; i < m->n_exact; i++) {
			memcpy(m->exact_k + ((size_t)l * m->n_exact + i) * row,
			       k[l] + (size_t)m->exact_pos[i] * row, row * 2);
			memcpy(m->exact_v + ((size_t)l * m->n_exact + i) * row,
			       v[l] + (size_t)m->exact_pos[i] * row, row * 2);
		}
	for (c = 0; c < m->n_comp; c++) {
		const struct sekv_span *sp = &m->span[m->comp_span[c]];
		double sum = 0;
		for (int i = 0; i < sp->len; i++)
			sum += m->surprisal[sp->start + i] > 0 ? m->surprisal[sp->start + i] : 0;
		for (int l = 0; l < m->n_layer; l++) {
			float *kb = m->k_bar + ((size_t)l * m->n_comp + c) * row;
			float *vb = m->v_bar + ((size_t)l * m->n_comp + c) * row;
			for (int i = 0; i < sp->len; i++) {
				float h = m->surprisal[sp->start + i];
				float wt = sum > 0 ? (float)((h > 0 ? h : 0) / sum) : 1.0f / sp->len;
				const uint16_t *kr = k[l] + (size_t)(sp->start + i) * row;
				const uint16_t *vr = v[l] + (size_t)(sp->start + i) * row;
				for (size_t j = 0; j < row; j++) {
					kb[j] += wt * quant_f16_to_f32(kr[j]);
					vb[j] += wt * quant_f16_to_f32(vr[j]);
				}
			}
		}
	}
}

static int check_input(const struct sekv_params *p, int n_tok,
		       const float *surprisal, int n_layer, int n_head,
		       int n_head_kv, int d_h, const uint16_t *const *k,
		       const uint16_t *const *v, char *err, size_t errlen)
{
	size_t row = (size_t)n_head_kv * d_h;

	if (!p || n_tok < 0 || n_layer < 1 || n_head < 1 || n_head_kv < 1 ||
	    n_head % n_head_kv || d_h < 1 || p->r_max < 1 ||
	    (p->factor_f16 != 0 && p->factor_f16 != 1) ||
	    (n_tok > 0 && (!surprisal || !k || !v)))
		return sekv_errf(err, errlen, SEKV_EINVAL, "sekv_build: shape: "
				 "n_tok %d n_layer %d n_head %d n_head_kv %d d_h %d r_max %d"
				 " factor_f16 %d", n_tok, n_layer, n_head, n_head_kv, d_h,
				 p ? p->r_max : 0, p ? p->factor_f16 : 0);
	if (!isfinite(p->alpha) || !isfinite(p->budget) || !isfinite(p->static_share))
		return sekv_errf(err, errlen, SEKV_EINVAL, "sekv_build: params: not finite");
	for (int t = 0; t < n_tok; t++)
		if (!isfinite(surprisal[t]))
			return sekv_errf(err, errlen, SEKV_EINVAL,
					 "sekv_build: surprisal: position %d: not finite", t);
	for (int l = 0; l < n_layer && n_tok > 0; l++) {
		if (!k[l] || !v[l])
			return sekv_errf(err, errlen, SEKV_EINVAL, "sekv_build: kv: layer %d: NULL", l);
		for (size_t i = 0; i < (size_t)n_tok * row; i++)
			if ((k[l][i] & 0x7c00u) == 0x7c00u || (v[l][i] & 0x7c00u) == 0x7c00u)
				return sekv_errf(err, errlen, SEKV_EINVAL,
						 "sekv_build: kv: layer %d position %zu: inf or NaN",
						 l, i / row);
	}
	return SEKV_OK;
}

int sekv_build(struct sekv_mem **out, const struct sekv_params *p,
	       int n_tok, const int32_t *tokens, const float *surprisal,
	       int n_layer, const int32_t *layer_id, int n_head, int n_head_kv,
	       int d_h, const uint16_t *const *k, const uint16_t *const *v,
	       char *err, size_t errlen)
{
	struct sekv_mem *m = NULL;
	struct sekv_span *span = NULL;
	uint8_t *anchor = NULL;
	int32_t *ranks = NULL;
	char note[256];
	float alpha;
	int rc, n_span = 0, n_exact, n_comp;
	size_t row = (size_t)n_layer * n_head_kv * d_h;

	*out = NULL;
	rc = check_input(p, n_tok, surprisal, n_layer, n_head, n_head_kv, d_h,
			 k, v, err, errlen);
	if (rc)
		return rc;
	anchor = malloc((size_t)n_tok + 1);
	span = malloc(((size_t)n_tok / 2 + 1) * sizeof *span);
	if (!anchor || !span) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "sekv_build: segments: out of memory");
		goto out;
	}
	sekv_seg_fit(surprisal, n_tok, p, row, anchor, span, &n_span, &alpha,
		     note, sizeof note);
	sekv_seg_static_bytes(n_tok, span, n_span, row, &n_exact, &n_comp);
	ranks = malloc(((size_t)n_layer * n_comp * n_head_kv * 2 + 1) * sizeof *ranks);
	if (!ranks) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "sekv_build: ranks: out of memory");
		goto out;
	}
	for (int l = 0, f = 0; l < n_layer; l++)
		for (int i = 0; i < n_span; i++)
			for (int j = 0; !span[i].full && j < n_head_kv * 2; j++) {
				int r = span[i].len < d_h ? span[i].len : d_h;
				ranks[f++] = r < p->r_max ? r : p->r_max;
			}
	rc = sekv_mem_alloc(&m, n_tok, n_layer, n_head, n_head_kv, d_h, n_span,
			    span, n_exact, ranks, p->factor_f16);
	if (rc) {
		rc = sekv_errf(err, errlen, rc, "sekv_build: memory: %s (%d tokens, %d spans)",
			       sekv_strerror(rc), n_tok, n_span);
		goto out;
	}
	m->r_max = p->r_max;
	m->alpha_used = alpha;
	memcpy(m->note, note, sizeof note);
	for (int l = 0; l < n_layer; l++)
		m->layer_id[l] = layer_id ? layer_id[l] : l;
	if (n_tok > 0) {
		if (tokens)
			memcpy(m->tokens, tokens, (size_t)n_tok * sizeof *tokens);
		memcpy(m->surprisal, surprisal, (size_t)n_tok * sizeof *surprisal);
		memcpy(m->is_anchor, anchor, (size_t)n_tok);
	}
	for (int i = 0; i < n_layer * n_head; i++)
		m->tau[i] = p->tau;
	fill_rows(m, k, v);
	rc = run_jobs(m, p, k, v, err, errlen);
	if (rc)
		goto out;
	sekv_mem_update_counts(m);
	*out = m;
	m = NULL;
out:
	sekv_mem_free(m);
	free(ranks);
	free(span);
	free(anchor);
	return rc;
}
