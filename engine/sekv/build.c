/* build.c - builds a document's SeKV memory from its global-layer KV cache
 * (DESIGN.md section 2 steps 4-5): segmentation under the budget, exact
 * rows, surprisal-weighted summaries, landmark keys (block means) and
 * truncated-SVD factors of every compressed span and the untrained router (top principal directions of
 * each layer's keys), both as backend operations (svd, pca) on the
 * backend's pool; LAPACK lives in the CPU backend (cpu_lapack.c).
 * Invariant: the memory holds copies only; the raw KV is never kept.
 * Storage layout lives in mem.c, segmentation in segment.c.
 */
#include "engine/sekv/sekv_int.h"
#include "engine/backend/backend.h"
#include "engine/base/err.h"
#include "engine/model/model.h"
#include "engine/quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int by_len_desc(const void *a, const void *b, void *arg)
{
	const struct sekv_mem *m = arg;
	int la = m->span[m->comp_span[*(const int32_t *)a]].len;
	int lb = m->span[m->comp_span[*(const int32_t *)b]].len;
	return la != lb ? (la < lb) - (la > lb) :
		(*(const int32_t *)a > *(const int32_t *)b) -
		(*(const int32_t *)a < *(const int32_t *)b);
}

/* Truncated SVD of every compressed span's K and V rows per layer and KV
 * head into full (ranks min(|S|, d_h, R_max)), one backend job each,
 * longest spans first (the pool hands them out one at a time, so the long
 * ones do not end up last); share [n_fac] gets each factor's kept share of
 * the span's energy. */
static int run_svd(struct sekv_mem *full, struct backend *be, const uint16_t *const *k,
		   const uint16_t *const *v, float *share, char *err, size_t errlen)
{
	struct sekv_mem *m = full;
	size_t row = (size_t)m->n_head_kv * m->d_h;
	int per = m->n_layer * m->n_head_kv * 2, n = m->n_comp * per, bad, info, rc;
	int32_t *order = malloc(((size_t)m->n_comp + 1) * sizeof *order);
	struct backend_svd *job = malloc(((size_t)n + 1) * sizeof *job);

	if (!order || !job) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "sekv_build: factors: out of memory");
		goto out;
	}
	for (int c = 0; c < m->n_comp; c++)
		order[c] = c;
	qsort_r(order, (size_t)m->n_comp, sizeof *order, by_len_desc, m);
	for (int j = 0; j < n; j++) {
		int c = order[j / per], r = j % per;
		int l = r / (m->n_head_kv * 2), kv = r / 2 % m->n_head_kv, which = r % 2;
		const struct sekv_span *sp = &m->span[m->comp_span[c]];
		size_t fi = (((size_t)l * m->n_comp + c) * m->n_head_kv + kv) * 2 + which;
		struct sekv_factor *f = &m->fac[fi];
		job[j] = (struct backend_svd){
			.x = (which ? v : k)[l] + (size_t)sp->start * row + (size_t)kv * m->d_h,
			.ldx = row, .rows = sp->len, .cols = m->d_h, .rank = f->rank,
			.s = f->s, .u = f->u, .v = f->v, .f16 = m->factor_f16, .share = &share[fi],
		};
	}
	rc = be->ops->svd(be, job, n, &bad, &info);
	if (rc == SEKV_ENOMEM)
		rc = sekv_errf(err, errlen, rc, "sekv_build: factors: out of memory");
	else if (rc)
		rc = sekv_errf(err, errlen, rc, "sekv_build: factor sgesdd: job %d: LAPACK info %d",
			       bad, info);
out:
	free(job);
	free(order);
	return rc;
}

/* Keys of every global layer rotated back to before RoPE: kpre[l]
 * [n_tok][n_head_kv][d_h] fp16 (malloc'ed, caller frees) from the post-
 * RoPE k[l], by the model's own rotation (backend rope) with the angle
 * -pos (sine negated). 0 or SEKV_ENOMEM. */
static int unrope_keys(const struct sekv_params *p, struct backend *be, int n_tok,
		       int n_layer, int n_head_kv, int d_h, const uint16_t *const *k,
		       uint16_t **kpre)
{
	enum { CHUNK = 256 };
	size_t half = (size_t)p->n_rot / 2, row = (size_t)n_head_kv * d_h;
	double *freq = malloc(half * sizeof *freq);
	float *cs = malloc(CHUNK * half * sizeof *cs), *sn = malloc(CHUNK * half * sizeof *sn);
	float *x = malloc(CHUNK * row * sizeof *x);
	int rc = SEKV_OK;

	if (!freq || !cs || !sn || !x) {
		rc = SEKV_ENOMEM;
		goto out;
	}
	model_rope_inv_freq(p->rope_base, p->n_rot, freq);
	for (int l = 0; l < n_layer; l++) {
		if (!(kpre[l] = malloc(((size_t)n_tok * row + 1) * sizeof **kpre))) {
			rc = SEKV_ENOMEM;
			goto out;
		}
		for (int t0 = 0; t0 < n_tok; t0 += CHUNK) {
			int n = n_tok - t0 < CHUNK ? n_tok - t0 : CHUNK;
			model_rope_cos_sin(freq, p->n_rot, t0, n, cs, sn);
			for (size_t i = 0; i < (size_t)n * half; i++)
				sn[i] = -sn[i];
			quant_f16_to_f32_row(k[l] + (size_t)t0 * row, x, (size_t)n * row);
			be->ops->rope(be, x, n, n_head_kv, d_h, p->n_rot, 1, cs, sn);
			quant_f32_to_f16_row(x, kpre[l] + (size_t)t0 * row, (size_t)n * row);
		}
	}
out:
	free(x);
	free(sn);
	free(cs);
	free(freq);
	return rc;
}

/* Relative squared error ||X - X_8||^2 / ||X||^2 of the int8 rows
 * (quant_f32_to_i8_row, one scale per row) of the len rows of d fp16 at
 * x, ldx apart; 0 for a zero matrix. row [d] and q [d] are scratch. */
static double rows_i8_err(const uint16_t *x, size_t ldx, int len, int d, float *row,
			  int8_t *q)
{
	double all = 0, e = 0;

	for (int i = 0; i < len; i++, x += ldx) {
		float sc;
		quant_f16_to_f32_row(x, row, (size_t)d);
		sc = quant_f32_to_i8_row(row, q, (size_t)d);
		for (int j = 0; j < d; j++) {
			double r = (double)row[j] - (double)sc * q[j];
			all += (double)row[j] * row[j];
			e += r * r;
		}
	}
	return all > 0 ? e / all : 0;
}

/* The stored form of every factor of full (whose SVD kept its rank
 * components, share[f] of the energy) into ranks: the rank gate with
 * energy[0] for K, energy[1] for V keeps r leading components; the form
 * of fewest bytes among those r components, the fp16/fp32 rows
 * (SEKV_RANK_RAW) and, with raw_i8, the int8 rows when their error is at
 * most 1 - E (SEKV_RANK_RAW8; rows of the post-RoPE k[l], v[l] [n_tok]
 * [n_head_kv][d_h]). E <= 0: all components, never rows. kept [2] gets
 * the mean share of span energy K and V factors keep. */
static int gate_ranks(const struct sekv_mem *full, const float *share, const float *energy,
		      int raw_i8, const uint16_t *const *k, const uint16_t *const *v,
		      int32_t *ranks, float *kept)
{
	double sum[2] = { 0, 0 };
	size_t row = (size_t)full->n_head_kv * full->d_h, f = 0, d = (size_t)full->d_h;
	float *s_norm = malloc((2 * ((size_t)full->r_max + 1) + d) * sizeof *s_norm);
	float *gate = s_norm + full->r_max + 1, *xrow = gate + full->r_max + 1;
	int8_t *q = malloc(d + 1);

	if (!s_norm || !q) {
		free(s_norm);
		free(q);
		return SEKV_ENOMEM;
	}
	for (int l = 0; l < full->n_layer; l++)
		for (int c = 0; c < full->n_comp; c++)
			for (int j = 0; j < full->n_head_kv * 2; j++, f++) {
				const struct sekv_factor *fc = &full->fac[f];
				const struct sekv_span *sp = &full->span[full->comp_span[c]];
				float e = energy[j % 2];
				int r = fc->rank, n = r, best;
				double all = 0, part = 0, kept_f;
				size_t b_lr, b_raw, b8, sb, ub, vb;
				for (int i = 0; i < n; i++) {
					s_norm[i] = fc->s[0] > 0 ? fc->s[i] / fc->s[0] : 0;
					all += (double)s_norm[i] * s_norm[i];
				}
				if (e > 0)
					r = sekv_rank_gate(e, s_norm, n, n, share[f], NULL,
							   full->d_h, gate);
				for (int i = 0; i < r; i++)
					part += (double)s_norm[i] * s_norm[i];
				best = r;
				kept_f = all <= 0 ? 1.0 : share[f] * part / all;
				sekv_factor_bytes(r, sp->len, full->d_h, full->factor_f16, &sb, &ub, &vb);
				b_lr = sb + ub + vb;
				sekv_factor_bytes(SEKV_RANK_RAW, sp->len, full->d_h, full->factor_f16,
						  &sb, &ub, &vb);
				b_raw = sb + ub + vb;
				if (e > 0 && b_lr >= b_raw) {
					best = SEKV_RANK_RAW;
					kept_f = 1.0;
				}
				sekv_factor_bytes(SEKV_RANK_RAW8, sp->len, full->d_h, full->factor_f16,
						  &sb, &ub, &vb);
				b8 = sb + ub + vb;
				if (e > 0 && raw_i8 && b8 < (best == SEKV_RANK_RAW ? b_raw : b_lr)) {
					const uint16_t *x = (j % 2 ? v : k)[l] + (size_t)sp->start * row +
							    (size_t)(j / 2) * d;
					double err8 = rows_i8_err(x, row, sp->len, full->d_h, xrow, q);
					if (err8 <= 1.0 - e) {
						best = SEKV_RANK_RAW8;
						kept_f = 1.0 - err8;
					}
				}
				ranks[f] = best;
				sum[j % 2] += kept_f;
			}
	for (int w = 0; w < 2; w++)
		kept[w] = f ? (float)(sum[w] / (double)(f / 2)) : 0;
	free(q);
	free(s_norm);
	return SEKV_OK;
}

/* Copies into m the kept components of every factor of full (whose
 * compressed span c is m's span c0 + c; ranks as m's), or the span's rows
 * themselves for a row factor (int8 ones quantised here). 0 or
 * SEKV_ENOMEM. */
static int keep_factors(struct sekv_mem *m, const struct sekv_mem *full, int c0,
			const uint16_t *const *k, const uint16_t *const *v)
{
	size_t es = m->factor_f16 ? sizeof(uint16_t) : sizeof(float);
	size_t row = (size_t)m->n_head_kv * m->d_h, f = 0, d = (size_t)m->d_h;
	size_t per = (size_t)m->n_head_kv * 2;
	float *xrow = malloc(d * sizeof *xrow);

	if (!xrow)
		return SEKV_ENOMEM;

	for (int l = 0; l < full->n_layer; l++)
		for (int c = 0; c < full->n_comp; c++)
			for (size_t j = 0; j < per; j++, f++) {
				const struct sekv_span *sp = &full->span[full->comp_span[c]];
				const struct sekv_factor *a = &full->fac[f];
				struct sekv_factor *b = &m->fac[((size_t)l * m->n_comp + c0 + c) * per + j];
				size_t r = (size_t)b->rank, ra = (size_t)a->rank;
				if (b->rank == SEKV_RANK_RAW8) {
					const uint16_t *x = (j % 2 ? v : k)[l] + (size_t)sp->start * row +
							    (j / 2) * d;
					for (int i = 0; i < sp->len; i++, x += row) {
						quant_f16_to_f32_row(x, xrow, d);
						b->s[i] = quant_f32_to_i8_row(xrow, (int8_t *)b->u + i * d, d);
					}
					continue;
				}
				if (b->rank == SEKV_RANK_RAW) {
					const uint16_t *x = (j % 2 ? v : k)[l] + (size_t)sp->start * row +
							    (j / 2) * d;
					for (int i = 0; i < sp->len; i++, x += row) {
						if (m->factor_f16)
							memcpy((uint16_t *)b->u + i * d, x, d * es);
						else
							quant_f16_to_f32_row(x, (float *)b->u + i * d, d);
					}
					continue;
				}
				memcpy(b->s, a->s, r * sizeof(float));
				for (int i = 0; i < sp->len; i++)
					memcpy((char *)b->u + i * r * es, (const char *)a->u + i * ra * es,
					       r * es);
				for (size_t i = 0; i < d; i++)
					memcpy((char *)b->v + i * r * es, (const char *)a->v + i * ra * es,
					       r * es);
			}
	free(xrow);
	return SEKV_OK;
}

/* Writes W of (global layer l, KV head kv) for its query heads from the
 * principal directions vec [n_w][d]. Scale c: with W = c P (P orthonormal),
 * the router logit is c/sqrt(d') <Pq, unit(P k_bar)>, while the coarse
 * row's attention logit is q_scale <q, k_bar>. Matching them at the mean
 * |P k_bar| of this layer's spans keeps the +log|S| term in proportion
 * (untrained init; without it the span-length term dominates the ranking). */
static void route_scale(struct sekv_mem *m, int l, int kv, const float *vec, int n_w,
			float q_scale)
{
	int d = m->d_h, group = m->n_head / m->n_head_kv;
	double norm_sum = 0;

	for (int c = 0; c < m->n_comp; c++) {
		const uint16_t *kb = m->k_bar + (((size_t)l * m->n_comp + c) * m->n_head_kv + kv) * d;
		double nrm = 0;
		for (int i = 0; i < n_w; i++) {
			const float *e = vec + (size_t)i * d;
			double x = 0;
			for (int jj = 0; jj < d; jj++)
				x += (double)e[jj] * quant_f16_to_f32(kb[jj]);
			nrm += x * x;
		}
		norm_sum += sqrt(nrm);
	}
	float scale = m->n_comp > 0 && norm_sum > 0
		? (float)(q_scale * (norm_sum / m->n_comp) * sqrt((double)SEKV_D_ROUTE)) : 1.0f;
	for (int h = kv * group; h < (kv + 1) * group; h++) {
		float *wh = m->route_w + ((size_t)l * m->n_head + h) * SEKV_D_ROUTE * d;
		memset(wh, 0, (size_t)SEKV_D_ROUTE * d * sizeof(float));
		for (int i = 0; i < n_w; i++)
			for (int jj = 0; jj < d; jj++)
				wh[(size_t)i * d + jj] = scale * vec[(size_t)i * d + jj];
	}
}

/* Router of every (global layer l, KV head kv): rows of W are the top-d'
 * principal directions of the document's keys (backend pca); every query
 * head of the KV head gets the same W, scaled as below. */
static int build_router(struct sekv_mem *m, struct backend *be, const uint16_t *const *k,
			float q_scale, char *err, size_t errlen)
{
	int d = m->d_h, n_w = d < SEKV_D_ROUTE ? d : SEKV_D_ROUTE;
	int n = m->n_layer * m->n_head_kv, bad, info, rc;
	struct backend_pca *job = malloc(((size_t)n + 1) * sizeof *job);
	float *vec = malloc(((size_t)n * n_w * d + 1) * sizeof *vec);

	if (!job || !vec) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "sekv_build: router: out of memory");
		goto out;
	}
	for (int j = 0; j < n; j++)
		job[j] = (struct backend_pca){
			.x = m->n_tok > 0 ? k[j / m->n_head_kv] + (size_t)(j % m->n_head_kv) * d : NULL,
			.ldx = (size_t)m->n_head_kv * d, .rows = m->n_tok, .cols = d,
			.n_vec = n_w, .vec = vec + (size_t)j * n_w * d,
		};
	rc = be->ops->pca(be, job, n, &bad, &info);
	if (rc) {
		rc = sekv_errf(err, errlen, rc, "sekv_build: router ssyevd: job %d: %s (info %d)",
			       bad, sekv_strerror(rc), info);
		goto out;
	}
	for (int j = 0; j < n; j++)
		route_scale(m, j / m->n_head_kv, j % m->n_head_kv, vec + (size_t)j * n_w * d,
			    n_w, q_scale);
out:
	free(vec);
	free(job);
	return rc;
}

/* Lists the exact positions, copies the exact rows of positions >= t0 and
 * computes the summaries k_bar, v_bar of compressed spans c0.. (earlier
 * ones are already there): weights H_t / sum H over the span (uniform if
 * the sum is not positive; negative surprisal counts as 0), summed in fp32
 * and rounded to fp16. Returns 0 or SEKV_ENOMEM. */
static int fill_rows(struct sekv_mem *m, const uint16_t *const *k,
		     const uint16_t *const *v, int c0, int t0)
{
	size_t row = (size_t)m->n_head_kv * m->d_h;
	float *kb = malloc(2 * row * sizeof *kb), *vb = kb + row;
	int e = 0, c = 0, t = 0;

	if (!kb)
		return SEKV_ENOMEM;
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
			if (m->exact_pos[i] < t0)
				continue;
			memcpy(m->exact_k + ((size_t)l * m->n_exact + i) * row,
			       k[l] + (size_t)m->exact_pos[i] * row, row * 2);
			memcpy(m->exact_v + ((size_t)l * m->n_exact + i) * row,
			       v[l] + (size_t)m->exact_pos[i] * row, row * 2);
		}
	for (c = c0; c < m->n_comp; c++) {
		const struct sekv_span *sp = &m->span[m->comp_span[c]];
		double sum = 0;
		for (int i = 0; i < sp->len; i++)
			sum += m->surprisal[sp->start + i] > 0 ? m->surprisal[sp->start + i] : 0;
		for (int l = 0; l < m->n_layer; l++) {
			memset(kb, 0, 2 * row * sizeof *kb);
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
			for (size_t j = 0; j < row; j++) {
				m->k_bar[((size_t)l * m->n_comp + c) * row + j] = quant_f32_to_f16(kb[j]);
				m->v_bar[((size_t)l * m->n_comp + c) * row + j] = quant_f32_to_f16(vb[j]);
			}
		}
	}
	free(kb);
	return SEKV_OK;
}

/* Landmarks: the plain mean key of every lm_len-token block of every
 * compressed span from c0 on (the last block may be shorter), per layer and KV head,
 * as int8 with an absmax/127 scale (round to nearest). Uniform weights: a landmark stands for its block's
 * largest attention scores, which surprisal weighting would blur. */
static int fill_landmarks(struct sekv_mem *m, const uint16_t *const *k, int c0)
{
	size_t row = (size_t)m->n_head_kv * m->d_h;
	float *acc;

	if (m->lm_len < 1 || m->n_lm == 0)
		return SEKV_OK;
	if (!(acc = malloc(row * sizeof *acc)))
		return SEKV_ENOMEM;
	for (int l = 0; l < m->n_layer; l++)
		for (int c = c0; c < m->n_comp; c++) {
			const struct sekv_span *sp = &m->span[m->comp_span[c]];
			for (int b = m->lm_first[c]; b < m->lm_first[c + 1]; b++) {
				int t0 = sp->start + (b - m->lm_first[c]) * m->lm_len;
				int t1 = t0 + m->lm_len < sp->start + sp->len ? t0 + m->lm_len
									 : sp->start + sp->len;
				size_t at = ((size_t)l * m->n_lm + b) * m->n_head_kv;
				memset(acc, 0, row * sizeof *acc);
				for (int t = t0; t < t1; t++)
					for (size_t j = 0; j < row; j++)
						acc[j] += quant_f16_to_f32(k[l][(size_t)t * row + j]);
				for (int kv = 0; kv < m->n_head_kv; kv++)
					m->lm_s[at + kv] = quant_f32_to_i8_row(
						acc + (size_t)kv * m->d_h,
						m->lm_k + (at + kv) * m->d_h, (size_t)m->d_h) /
						(float)(t1 - t0);
			}
		}
	free(acc);
	return SEKV_OK;
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
	if (p->key_pre_rope && (!(p->rope_base > 1) || p->n_rot < 2 || p->n_rot % 2 ||
				p->n_rot > d_h))
		return sekv_errf(err, errlen, SEKV_EINVAL, "sekv_build: pre-RoPE keys: RoPE theta %g"
				 " over %d of %d dims", p->rope_base, p->n_rot, d_h);
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
	struct sekv_mem *m = NULL, *full = NULL;
	struct sekv_span *span = NULL;
	float *share = NULL, kept[2] = { 0, 0 };
	/* no K gate: no gate at all; a V gate <= 0 follows the K gate */
	const float gate_e[2] = { p ? p->rank_energy : 0,
				  !p || p->rank_energy <= 0 ? 0 : p->rank_energy_v > 0 ?
				  p->rank_energy_v : p->rank_energy };
	uint16_t **kpre = NULL;
	size_t nf;
	uint8_t *anchor = NULL;
	int32_t *ranks = NULL;
	struct backend *be = p ? p->be : NULL, *own_be = NULL;
	char note[256];
	float alpha;
	int rc, n_span = 0, n_exact, n_comp, lm_len = 0;
	size_t row = (size_t)n_layer * n_head_kv * d_h;

	*out = NULL;
	rc = check_input(p, n_tok, surprisal, n_layer, n_head, n_head_kv, d_h,
			 k, v, err, errlen);
	if (rc)
		return rc;
	for (int t = 0; p->anchor_score && t < n_tok; t++)
		if (!isfinite(p->anchor_score[t]))
			return sekv_errf(err, errlen, SEKV_EINVAL,
					 "sekv_build: anchor score: position %d: not finite", t);
	anchor = malloc((size_t)n_tok + 1);
	span = malloc(((size_t)n_tok / 2 + 1) * sizeof *span);
	if (!anchor || !span) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "sekv_build: segments: out of memory");
		goto out;
	}
	sekv_seg_fit(p->anchor_score ? p->anchor_score : surprisal, n_tok, p, row, d_h, anchor, span,
		     &n_span, &alpha, &lm_len, note, sizeof note);
	sekv_seg_static_bytes(n_tok, span, n_span, row, d_h, lm_len, p->dev_rows, &n_exact, &n_comp);
	nf = (size_t)n_layer * n_comp * n_head_kv * 2;
	ranks = malloc((nf + 1) * sizeof *ranks);
	share = malloc((nf + 1) * sizeof *share);
	if (!ranks || !share) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "sekv_build: ranks: out of memory");
		goto out;
	}
	for (int l = 0, f = 0; l < n_layer; l++)
		for (int i = 0; i < n_span; i++)
			for (int j = 0; !span[i].full && j < n_head_kv * 2; j++) {
				int r = span[i].len < d_h ? span[i].len : d_h;
				ranks[f++] = r < p->r_max ? r : p->r_max;
			}
	/* the SVD at the largest rank first, then only the gated part is kept */
	if (!be && (rc = backend_open("cpu", p->n_threads, &own_be, err, errlen)))
		goto out;
	if (!be)
		be = own_be;
	rc = sekv_mem_alloc(&full, n_tok, n_layer, n_head, n_head_kv, d_h, n_span,
			    span, 0, ranks, p->factor_f16, 0);
	if (!rc && p->key_pre_rope && n_tok > 0) {
		if (!(kpre = calloc((size_t)n_layer, sizeof *kpre)) ||
		    unrope_keys(p, be, n_tok, n_layer, n_head_kv, d_h, k, kpre)) {
			rc = sekv_errf(err, errlen, SEKV_ENOMEM, "sekv_build: pre-RoPE keys: out of memory");
			goto out;
		}
	}
	if (!rc && (rc = run_svd(full, be, kpre ? (const uint16_t *const *)kpre : k, v, share,
				 err, errlen)))
		goto out;
	if (!rc && !(rc = gate_ranks(full, share, gate_e, p->raw_i8, k, v, ranks, kept))) {
		rc = sekv_mem_alloc(&m, n_tok, n_layer, n_head, n_head_kv, d_h, n_span,
				    span, n_exact, ranks, p->factor_f16, lm_len);
	}
	if (rc) {
		rc = sekv_errf(err, errlen, rc, "sekv_build: memory: %s (%d tokens, %d spans)",
			       sekv_strerror(rc), n_tok, n_span);
		goto out;
	}
	m->r_max = p->r_max < d_h ? p->r_max : d_h;
	m->dev_rows = p->dev_rows;
	m->rank_energy = gate_e[0] > 0 ? gate_e[0] : 0;
	m->rank_energy_v = gate_e[1] > 0 ? gate_e[1] : 0;
	if (p->key_pre_rope) {
		m->rope_base = p->rope_base;
		m->n_rot = p->n_rot;
	}
	memcpy(m->kept_energy, kept, sizeof kept);
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
	if ((rc = fill_rows(m, k, v, 0, 0)) || (rc = fill_landmarks(m, k, 0))) {
		rc = sekv_errf(err, errlen, rc, "sekv_build: summaries: out of memory");
		goto out;
	}
	if ((rc = build_router(m, be, k, p->q_scale > 0 ? p->q_scale : 1.0f / sqrtf((float)d_h),
			       err, errlen)))
		goto out;
	if ((rc = keep_factors(m, full, 0, k, v))) {
		rc = sekv_errf(err, errlen, rc, "sekv_build: factors: out of memory");
		goto out;
	}
	sekv_mem_update_counts(m);
	*out = m;
	m = NULL;
out:
	backend_close(own_be);
	sekv_mem_free(m);
	sekv_mem_free(full);
	for (int l = 0; kpre && l < n_layer; l++)
		free(kpre[l]);
	free(kpre);
	free(share);
	free(ranks);
	free(span);
	free(anchor);
	return rc;
}

/* ---- appending ------------------------------------------------------ */

/* Full-length fp16 rows kx[l], vx[l] [n][row] for append: the old exact
 * rows at positions >= lo (every old position from lo on is exact), then
 * the appended rows; the rest zero (never read). */
static int append_rows(const struct sekv_mem *old, int lo, int n_new,
		       const uint16_t *const *k, const uint16_t *const *v,
		       uint16_t **kx, uint16_t **vx)
{
	size_t row = (size_t)old->n_head_kv * old->d_h, n = (size_t)old->n_tok + n_new;

	for (int l = 0; l < old->n_layer; l++) {
		kx[l] = calloc(n * row + 1, sizeof **kx);
		vx[l] = calloc(n * row + 1, sizeof **vx);
		if (!kx[l] || !vx[l])
			return SEKV_ENOMEM;
		for (int i = 0; i < old->n_exact; i++) {
			size_t pos = (size_t)old->exact_pos[i], at = ((size_t)l * old->n_exact + i) * row;
			if (old->exact_pos[i] < lo)
				continue;
			memcpy(kx[l] + pos * row, old->exact_k + at, row * 2);
			memcpy(vx[l] + pos * row, old->exact_v + at, row * 2);
		}
		if (n_new > 0) {
			memcpy(kx[l] + (size_t)old->n_tok * row, k[l], (size_t)n_new * row * 2);
			memcpy(vx[l] + (size_t)old->n_tok * row, v[l], (size_t)n_new * row * 2);
		}
	}
	return SEKV_OK;
}

/* Copies what append keeps from old into m (the spans of old are m's
 * first ones): router, exact rows before lo, and old's compressed spans. */
static void append_keep(struct sekv_mem *m, const struct sekv_mem *old, int lo)
{
	int n_before = 0;

	while (n_before < old->n_exact && old->exact_pos[n_before] < lo)
		n_before++;
	memcpy(m->layer_id, old->layer_id, (size_t)m->n_layer * sizeof *m->layer_id);
	memcpy(m->route_w, old->route_w,
	       (size_t)m->n_layer * m->n_head * SEKV_D_ROUTE * m->d_h * sizeof(float));
	memcpy(m->tau, old->tau, (size_t)m->n_layer * m->n_head * sizeof(float));
	sekv_mem_copy_exact(m, 0, old, 0, n_before, 0);
	(void)sekv_mem_copy_comps(m, 0, old, 0, old->n_comp); /* same blocks: cannot fail */
}

int sekv_mem_append(struct sekv_mem **out, const struct sekv_mem *old,
		    const struct sekv_params *p, int n_new, const int32_t *tokens,
		    const float *surprisal, const uint16_t *const *k,
		    const uint16_t *const *v, char *err, size_t errlen)
{
	struct sekv_mem *m = NULL, *fresh = NULL;
	struct sekv_span *span = NULL;
	struct backend *be = p ? p->be : NULL, *own_be = NULL;
	uint16_t **kx = NULL, **vx = NULL, **kpre = NULL;
	float *h = NULL, *share = NULL, kept[2] = { 0, 0 };
	/* the memory's own gates (one from before V had its own: both) */
	const float old_e[2] = { old->rank_energy, old->rank_energy_v > 0 ? old->rank_energy_v :
						   old->rank_energy };
	uint8_t *anchor = NULL;
	int32_t *ranks = NULL, *ranks_new = NULL;
	int rc, n, lo, n_add, n_span, n_exact, n_comp, n_comp_new, L;
	size_t per, nf_new;

	*out = NULL;
	if (!old)
		return sekv_errf(err, errlen, SEKV_EINVAL, "sekv_mem_append: no memory");
	L = old->n_layer;
	if ((rc = check_input(p, n_new, surprisal, L, old->n_head, old->n_head_kv, old->d_h, k, v,
			      err, errlen)))
		return rc;
	if (n_new > INT32_MAX / 2 - old->n_tok)
		return sekv_errf(err, errlen, SEKV_EINVAL, "sekv_mem_append: %d + %d tokens",
				 old->n_tok, n_new);
	n = old->n_tok + n_new;
	per = (size_t)old->n_head_kv * 2;
	h = malloc(((size_t)n + 1) * sizeof *h);
	anchor = malloc((size_t)n + 1);
	span = malloc(((size_t)old->n_span + (size_t)n / 2 + 1) * sizeof *span);
	kx = calloc((size_t)L, sizeof *kx);
	vx = calloc((size_t)L, sizeof *vx);
	if (!h || !anchor || !span || !kx || !vx) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "sekv_mem_append: out of memory");
		goto out;
	}
	/* anchors continue with the running statistics of every surprisal
	 * so far; the old ones (merges included) stay as they are */
	memcpy(h, old->surprisal, (size_t)old->n_tok * sizeof *h);
	if (n_new > 0)
		memcpy(h + old->n_tok, surprisal, (size_t)n_new * sizeof *h);
	sekv_seg_anchors(h, n, old->alpha_used, p->n_sink, anchor);
	memcpy(anchor, old->is_anchor, (size_t)old->n_tok);
	lo = old->n_span ? sekv_mem_frontier(old, p->n_sink) : (p->n_sink < n ? p->n_sink : n);
	memcpy(span, old->span, (size_t)old->n_span * sizeof *span);
	/* a memory kept exact for its size stays so while it is short */
	n_add = old->n_span == 0 && n < p->exact_below ? 0 :
		sekv_seg_spans(anchor, n, p->l_min, lo, p->n_recent, span + old->n_span);
	n_span = old->n_span + n_add;
	sekv_seg_static_bytes(n, span, n_span, (size_t)L * per / 2 * old->d_h, old->d_h,
			      old->lm_len, old->dev_rows, &n_exact, &n_comp);
	n_comp_new = n_comp - old->n_comp;
	nf_new = (size_t)L * n_comp_new * per;
	ranks = malloc(((size_t)L * n_comp * per + 1) * sizeof *ranks);
	ranks_new = malloc((nf_new + 1) * sizeof *ranks_new);
	share = malloc((nf_new + 1) * sizeof *share);
	if (!ranks || !ranks_new || !share ||
	    append_rows(old, lo, n_new, k, v, kx, vx)) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "sekv_mem_append: out of memory");
		goto out;
	}
	for (int l = 0, f = 0; l < L; l++)
		for (int i = old->n_span; i < n_span; i++)
			for (size_t j = 0; !span[i].full && j < per; j++) {
				int r = span[i].len < old->d_h ? span[i].len : old->d_h;
				ranks_new[f++] = r < old->r_max ? r : old->r_max;
			}
	if (!be && (rc = backend_open("cpu", p->n_threads, &own_be, err, errlen)))
		goto out;
	if (!be)
		be = own_be;
	/* the new spans' factors, as sekv_build makes them, with the gate
	 * and key form the memory was built with */
	if ((rc = sekv_mem_alloc(&fresh, n, L, old->n_head, old->n_head_kv, old->d_h, n_add,
				 span + old->n_span, 0, ranks_new, old->factor_f16, 0))) {
		rc = sekv_errf(err, errlen, rc, "sekv_mem_append: memory: %s", sekv_strerror(rc));
		goto out;
	}
	if (old->rope_base > 0 && n_comp_new > 0) {
		struct sekv_params rp = *p;
		rp.rope_base = old->rope_base;
		rp.n_rot = old->n_rot;
		if (!(kpre = calloc((size_t)L, sizeof *kpre)) ||
		    unrope_keys(&rp, be, n, L, old->n_head_kv, old->d_h,
				(const uint16_t *const *)kx, kpre)) {
			rc = sekv_errf(err, errlen, SEKV_ENOMEM, "sekv_mem_append: pre-RoPE keys: "
				       "out of memory");
			goto out;
		}
	}
	if ((rc = run_svd(fresh, be, (const uint16_t *const *)(kpre ? kpre : kx),
			  (const uint16_t *const *)vx, share, err, errlen)))
		goto out;
	if ((rc = gate_ranks(fresh, share, old_e, p->raw_i8, (const uint16_t *const *)kx,
			     (const uint16_t *const *)vx, ranks_new, kept))) {
		rc = sekv_errf(err, errlen, rc, "sekv_mem_append: out of memory");
		goto out;
	}
	for (int l = 0, f = 0; l < L; l++) {
		for (size_t j = 0; j < (size_t)old->n_comp * per; j++)
			ranks[f++] = old->fac[(size_t)l * old->n_comp * per + j].rank;
		for (size_t j = 0; j < (size_t)n_comp_new * per; j++)
			ranks[f++] = ranks_new[(size_t)l * n_comp_new * per + j];
	}
	if ((rc = sekv_mem_alloc(&m, n, L, old->n_head, old->n_head_kv, old->d_h, n_span, span,
				 n_exact, ranks, old->factor_f16, old->lm_len))) {
		rc = sekv_errf(err, errlen, rc, "sekv_mem_append: memory: %s (%d tokens, %d spans)",
			       sekv_strerror(rc), n, n_span);
		goto out;
	}
	m->r_max = old->r_max;
	m->dev_rows = old->dev_rows;
	m->rank_energy = old->rank_energy;
	m->rank_energy_v = old->rank_energy_v;
	m->rope_base = old->rope_base;
	m->n_rot = old->n_rot;
	m->alpha_used = old->alpha_used;
	memcpy(m->kept_energy, kept, sizeof kept);
	snprintf(m->note, sizeof m->note, "%.180s%s%d tokens appended", old->note,
		 old->note[0] ? "; " : "", n_new);
	memcpy(m->tokens, old->tokens, (size_t)old->n_tok * sizeof *m->tokens);
	if (tokens && n_new > 0)
		memcpy(m->tokens + old->n_tok, tokens, (size_t)n_new * sizeof *tokens);
	memcpy(m->surprisal, h, (size_t)n * sizeof *h);
	memcpy(m->is_anchor, anchor, (size_t)n);
	if ((rc = fill_rows(m, (const uint16_t *const *)kx, (const uint16_t *const *)vx,
			    old->n_comp, lo)) ||
	    (rc = fill_landmarks(m, (const uint16_t *const *)kx, old->n_comp))) {
		rc = sekv_errf(err, errlen, rc, "sekv_mem_append: summaries: out of memory");
		goto out;
	}
	append_keep(m, old, lo);
	if ((rc = keep_factors(m, fresh, old->n_comp, (const uint16_t *const *)kx,
			       (const uint16_t *const *)vx))) {
		rc = sekv_errf(err, errlen, rc, "sekv_mem_append: factors: out of memory");
		goto out;
	}
	sekv_mem_update_counts(m);
	*out = m;
	m = NULL;
out:
	for (int l = 0; l < L; l++) {
		if (kx)
			free(kx[l]);
		if (vx)
			free(vx[l]);
		if (kpre)
			free(kpre[l]);
	}
	free(kpre);
	free(vx);
	free(kx);
	backend_close(own_be);
	sekv_mem_free(m);
	sekv_mem_free(fresh);
	free(share);
	free(ranks_new);
	free(ranks);
	free(span);
	free(anchor);
	free(h);
	return rc;
}
