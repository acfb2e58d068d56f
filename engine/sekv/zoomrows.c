/* zoomrows.c - SeKV zooms of single rows (issue 19; sekv_params.zoom_scan).
 * The landmark router ranks blocks of lm_len rows; inside a block that
 * holds the answer only a few rows carry the attention (37 bench-qa
 * questions: the best rows the zoom budget holds catch 0.89 of the mass,
 * the best whole blocks 0.82, the landmark router's windows 0.71). So
 * the best blocks holding zoom_scan times the rows the budget allows are
 * scanned: their keys scored against the query through the host-tier
 * factors (no row rebuilt), and only the rows with the largest estimated
 * share of their head's attention are rebuilt into the device tier; a
 * row held at the step before keeps its place. Invariant: a layer's rows
 * lie in (KV head, position) order, zkey their keys. The window zooms,
 * the region and the mixed attention live in attend.c.
 */
#include "engine/sekv/ctx_int.h"
#include "engine/base/err.h"
#include "engine/quant/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Every landmark block of every KV head whose span a query head of the
 * KV head wants (alpha_S above tau, as for windows) with its log share
 * estimate (the best over those query heads of the block's landmark
 * score less the head's estimated log-mass; the trained router scales
 * and shifts it by its a and b; its W term acts through alpha_S and tau
 * alone), into c->bcand in KV head, span and row order; then the best
 * want / lm_len of them (all when they hold at most want rows; ties in
 * that order), so at most `want` rows, left
 * at the front in the same order. Returns how many were taken. */
static int take_blocks(struct sekv_ctx *c, int l, int want)
{
	const struct sekv_mem *m = c->m;
	const float *tau = c->router == SEKV_ROUTER_TRAINED ? c->trained->tau : m->tau;
	int n = 0, taken = 0;

	for (int kv = 0; kv < m->n_head_kv; kv++)
		for (int s = 0; s < m->n_comp; s++) {
			int len = m->span[m->comp_span[s]].len;
			for (int b = m->lm_first[s]; b < m->lm_first[s + 1]; b++) {
				int r0 = (b - m->lm_first[s]) * m->lm_len;
				struct cand cd = { kv, s, kv * c->group, -INFINITY, r0,
						   len - r0 < m->lm_len ? len - r0 : m->lm_len };
				for (int h = kv * c->group; h < (kv + 1) * c->group; h++) {
					size_t lh = (size_t)l * m->n_head + h;
					float a = c->lm_sc[(size_t)h * m->n_lm + b] - c->lse_est[h];
					if (!sekv_above_tau(c->alpha[(size_t)h * m->n_comp + s], tau[lh]))
						continue;
					if (c->router == SEKV_ROUTER_TRAINED)
						a = c->trained->a[lh] * a + c->trained->b[lh];
					if (a > cd.alpha) {
						cd.alpha = a;
						cd.head = h;
					}
				}
				if (cd.alpha > -INFINITY)
					c->bcand[n++] = cd;
			}
		}
	/* the best k blocks (k: want rows at lm_len a block; a span's last
	 * block may be shorter), kept in place order: no sort */
	int all = 0, k, ties;
	for (int i = 0; i < n; i++)
		all += c->bcand[i].n;
	k = all <= want ? n : want / m->lm_len < n ? want / m->lm_len : n;
	float thr = -INFINITY;
	if (k < n) {
		for (int i = 0; i < n; i++)
			c->balpha[i] = c->bcand[i].alpha;
		thr = k > 0 ? sekv_kth_largest(c->balpha, n, k - 1) : INFINITY;
	}
	ties = k;
	for (int i = 0; i < n; i++)
		ties -= c->bcand[i].alpha > thr;
	for (int i = 0; i < n; i++)
		if (c->bcand[i].alpha > thr || (c->bcand[i].alpha == thr && ties-- > 0))
			c->bcand[taken++] = c->bcand[i];
	return taken;
}

/* Scores the rows of the n_blk blocks taken against q through their key
 * factors (backend score_lowrank: no row is rebuilt); fills c->scan and
 * c->scan_p (the estimated share: the sum over the KV head's query heads
 * of the row's share of the head's estimated mass). Returns the rows
 * scanned, or a negative backend code. */
static int scan_blocks(struct sekv_ctx *c, int l, const float *q, int n_blk)
{
	const struct sekv_mem *m = c->m;
	int d = m->d_h, n = 0, n_job = 0, rc;

	for (int i = 0; i < n_blk; i++) {
		const struct cand *cd = &c->bcand[i], *pv = i ? &c->bcand[i - 1] : NULL;
		const struct sekv_factor *f =
			&m->fac[(((size_t)l * m->n_comp + cd->comp) * m->n_head_kv + cd->kv) * 2];
		int rows_form = sekv_rank_is_rows(f->rank), r = rows_form ? 0 : f->rank;
		size_t u_row = f->rank == SEKV_RANK_RAW8 ? (size_t)d :
			       (size_t)(rows_form ? d : f->rank) *
			       (m->factor_f16 ? sizeof(uint16_t) : sizeof(float));
		if (c->r_use > 0 && c->r_use < r)
			r = c->r_use;
		for (int k = 0; k < cd->n; k++)
			c->scan[n + k] = (struct srow){ cd->kv, cd->comp, cd->r0 + k, cd->head };
		/* neighbouring blocks of a span are one job: the query is
		 * projected on the factor once */
		if (pv && pv->kv == cd->kv && pv->comp == cd->comp && pv->r0 + pv->n == cd->r0)
			c->lrj[n_job - 1].len += cd->n;
		else
			c->lrj[n_job++] = (struct backend_lr_job){ cd->n, f->rank, r, m->factor_f16,
				(const char *)f->u + (size_t)cd->r0 * u_row,
				f->rank == SEKV_RANK_RAW8 ? f->s + cd->r0 : f->s, f->v,
				q + (size_t)cd->kv * c->group * d, (size_t)n };
		n += cd->n;
	}
	for (int i = 0; i < n_job; i++) {
		const struct backend_lr_job *j = &c->lrj[i];
		size_t sb, ub, vb;
		sekv_factor_bytes(j->rank < 0 ? j->rank : j->r, j->len, d, m->factor_f16, &sb, &ub, &vb);
		c->st.factor_read_bytes += sb + ub + vb;
	}
	struct backend_score_lr sa = { c->group, d, c->q_scale, c->lrj, n_job, c->scan_sc,
				       (size_t)c->scan_cap };
	if (n_job > 0 && (rc = c->be->ops->score_lowrank(c->be, c->ws, &sa)))
		return rc;
	/* each head's whole mass: its estimate exp(lse_est) with the scanned
	 * blocks' landmark terms replaced by their rows' scores (a mean key
	 * underestimates a block that holds one strong row); all relative to
	 * exp(lse_est + mx), mx >= 0 the head's largest scanned excess, so no
	 * exponential overflows */
	double *corr = c->scan_corr, *mx = c->scan_corr + m->n_head;
	for (int h = 0; h < m->n_head; h++) {
		corr[h] = 1.0;
		mx[h] = 0.0;
	}
	for (int i = 0; i < n_blk; i++) {
		const struct cand *cd = &c->bcand[i];
		int b = m->lm_first[cd->comp] + cd->r0 / m->lm_len;
		for (int h = cd->kv * c->group; h < (cd->kv + 1) * c->group; h++)
			corr[h] -= exp((double)c->lm_sc[(size_t)h * m->n_lm + b] - c->lse_est[h]);
	}
	for (int i = 0; i < n; i++) {
		int h0 = c->scan[i].kv * c->group;
		for (int g = 0; g < c->group; g++) {
			double x = (double)c->scan_sc[(size_t)g * c->scan_cap + i] - c->lse_est[h0 + g];
			mx[h0 + g] = x > mx[h0 + g] ? x : mx[h0 + g];
		}
	}
	for (int h = 0; h < m->n_head; h++)
		corr[h] = (corr[h] > 0 ? corr[h] : 0.0) * exp(-mx[h]);
	/* scores become exp(score - lse_est - mx) in place (<= 1) */
	for (int i = 0; i < n; i++) {
		int h0 = c->scan[i].kv * c->group;
		for (int g = 0; g < c->group; g++) {
			float *x = &c->scan_sc[(size_t)g * c->scan_cap + i];
			*x = expf((float)((double)*x - c->lse_est[h0 + g] - mx[h0 + g]));
			corr[h0 + g] += *x;
		}
	}
	for (int h = 0; h < m->n_head; h++)
		corr[h] = corr[h] > 0 && isfinite(corr[h]) ? 1.0 / corr[h] : 0.0;
	/* a damaged factor (NaN) must not take the budget: its rows get 0 */
	for (int i = 0; i < n; i++) {
		int h0 = c->scan[i].kv * c->group;
		double p = 0;
		for (int g = 0; g < c->group; g++)
			p += c->scan_sc[(size_t)g * c->scan_cap + i] * corr[h0 + g];
		c->scan_p[i] = isfinite(p) && p > 0 ? (float)p : 0.0f;
	}
	return n;
}

/* Bytes of one reconstructed row of each recon buffer: K rows, their
 * scales, V rows, theirs (0: no such buffer). */
static void row_parts(const struct sekv_ctx *c, size_t b[4])
{
	size_t d = (size_t)c->m->d_h;
	size_t ke = c->recon_type == BACKEND_ROW_F32 ? sizeof(float) :
		    c->recon_type == BACKEND_ROW_I8 ? 1 : sizeof(uint16_t);

	b[0] = d * ke;
	b[1] = c->recon_type == BACKEND_ROW_I8 ? sizeof(float) : 0;
	b[2] = c->v4 && c->recon_type == BACKEND_ROW_I8 ? d / 2 : d * ke;
	b[3] = c->recon_type != BACKEND_ROW_I8 ? 0 :
	       c->v4 ? d / QUANT_I4_GROUP * sizeof(float) : sizeof(float);
}

/* Moves n region rows from row `from` to row `to` of layer base `base`
 * (overlap allowed). 0 or the backend's code. */
static int move_rows(struct sekv_ctx *c, size_t base, int from, int to, int n)
{
	struct backend_buf *buf[4] = { c->recon_k, c->recon_ks, c->recon_v, c->recon_vs };
	size_t b[4];
	int rc;

	row_parts(c, b);
	for (int k = 0; k < 4; k++)
		if (b[k] && (rc = c->be->ops->buf_copy(c->be, buf[k], (base + (size_t)to) * b[k], buf[k],
							(base + (size_t)from) * b[k], (size_t)n * b[k])))
			return rc;
	return SEKV_OK;
}

/* Keeps the rows layer l held at the step before that this step keeps
 * again: the kept rows (c->scan[0 .. n)) and the held ones (zkey) are both
 * in (KV head, position) order, so a held row's move to its new place
 * keeps the order of the others: moves down are made first, lowest
 * first, then moves up, highest first, none overwriting a row still to
 * move. Fills c->zmap[j]: 1 for a row kept in place, 0 for one to
 * rebuild. 0 or the backend's code. */
static int keep_held(struct sekv_ctx *c, int l, int n)
{
	const struct sekv_mem *m = c->m;
	size_t base = (size_t)c->rec_base[l];
	const int64_t *old = c->zkey + base;
	int n_old = c->n_zrows[l], o = 0, rc;

	for (int j = 0; j < n; j++) {
		const struct srow *r = &c->scan[j];
		int64_t key = (int64_t)r->kv * m->n_tok + m->span[m->comp_span[r->comp]].start + r->off;
		while (o < n_old && old[o] < key)
			o++;
		c->zmap[j] = o < n_old && old[o] == key ? o : -1;
	}
	for (int pass = 0; pass < 2; pass++)
		for (int k = 0; k < n; k++) {
			int j = pass ? n - 1 - k : k, o0 = c->zmap[j], len = 1;
			if (o0 < 0 || (pass == 0 ? o0 <= j : o0 >= j))
				continue;
			/* a stretch moving by the same distance: one copy */
			if (pass == 0)
				while (j + len < n && c->zmap[j + len] == o0 + len)
					len++;
			else
				while (j - len >= 0 && o0 - len >= 0 && c->zmap[j - len] == o0 - len)
					len++;
			if ((rc = pass == 0 ? move_rows(c, base, o0, j, len)
					    : move_rows(c, base, o0 - len + 1, j - len + 1, len)))
				return rc;
			k += len - 1;
		}
	for (int j = 0; j < n; j++)
		c->zmap[j] = c->zmap[j] >= 0;
	return SEKV_OK;
}

int sekv_zoom_rows(struct sekv_ctx *c, int l, const float *q, size_t allow, size_t *bytes)
{
	const struct sekv_mem *m = c->m;
	struct sekv_stats *st = &c->st;
	size_t base = (size_t)c->rec_base[l], z_cap = allow / c->recon_row_bytes;
	int n_scan, n_keep = 0, n_job = 0, distinct = 0, ties, rc;
	float thr = -INFINITY;

	sekv_zoom_clear(c, l);
	c->n_zlist[l] = 0;   /* the windows' record: the region is laid out here */
	*bytes = 0;
	if (z_cap > (size_t)c->rec_cap[l])
		z_cap = (size_t)c->rec_cap[l];
	size_t want = z_cap * (size_t)c->zoom_scan;
	if (want < (size_t)m->lm_len)
		want = (size_t)m->lm_len;   /* at least one block */
	n_scan = z_cap == 0 ? 0 :
		 scan_blocks(c, l, q, take_blocks(c, l, want < (size_t)c->scan_cap ? (int)want : c->scan_cap));
	if (n_scan < 0)
		return n_scan;
	if ((size_t)n_scan > z_cap) {
		memcpy(c->scan_p + c->scan_cap, c->scan_p, (size_t)n_scan * sizeof *c->scan_p);
		thr = sekv_kth_largest(c->scan_p + c->scan_cap, n_scan, (int)z_cap - 1);
	}
	/* the kept rows to the front, in scan order (KV head, span, row) */
	ties = (int)z_cap;
	for (int i = 0; i < n_scan; i++)
		ties -= c->scan_p[i] > thr;
	for (int i = 0; i < n_scan && (size_t)n_keep < z_cap; i++)
		if (c->scan_p[i] > thr || (c->scan_p[i] == thr && ties-- > 0)) {
			c->scan[n_keep] = c->scan[i];
			c->scan_p[n_keep++] = c->scan_p[i];
		}
	if ((rc = keep_held(c, l, n_keep))) {
		c->n_zrows[l] = 0;
		return rc;
	}
	/* per span its rows side by side; a stretch of neighbouring rows not
	 * held before is one rebuild */
	for (int i = 0; i < n_keep;) {
		const struct srow *r = &c->scan[i];
		int id = r->kv * m->n_comp + r->comp, s = m->comp_span[r->comp], i0 = i;
		double share = 0;
		size_t fi = (((size_t)l * m->n_comp + r->comp) * m->n_head_kv + r->kv) * 2;
		for (; i < n_keep && c->scan[i].kv == r->kv && c->scan[i].comp == r->comp; i++) {
			c->recon_pos[base + (size_t)i] = m->span[s].start + c->scan[i].off;
			c->zkey[base + (size_t)i] = (int64_t)r->kv * m->n_tok + c->recon_pos[base + (size_t)i];
			share += c->scan_p[i];
		}
		for (int j = i0; j < i;) {
			int e = j + 1;
			if (c->zmap[j]) {
				j++;
				continue;
			}
			while (e < i && !c->zmap[e] && c->scan[e].off == c->scan[e - 1].off + 1)
				e++;
			if (n_job + 2 > c->n_rj) {
				if ((rc = c->be->ops->reconstruct(c->be, c->ws, c->rj, n_job))) {
					c->n_zrows[l] = 0;
					return rc;
				}
				n_job = 0;
			}
			for (int k = 0; k < 2; k++) {
				c->rj[n_job] = sekv_recon_job(c, &m->fac[fi + k], m->span[s].start, c->scan[j].off,
							      e - j, l, r->kv, k == 0, base, (size_t)j);
				sekv_count_read(c, &c->rj[n_job++], e - j);
			}
			j = e;
		}
		c->zoom_row[id] = i0;
		c->zoom_win[2 * id] = c->scan[i0].off;
		c->zoom_win[2 * id + 1] = i - i0;
		distinct += !c->mark[r->comp];
		c->mark[r->comp] = 1;
		st->zoom[st->n_zoom++] = (struct sekv_zoom){ s, l, r->head, 1, (float)(share / c->group),
			c->scan[i0].off, c->scan[i - 1].off - c->scan[i0].off + 1 };
		for (int h = r->kv * c->group; h < (r->kv + 1) * c->group; h++)
			st->zoom_count[(size_t)l * m->n_head + h]++;
	}
	c->n_zrows[l] = n_keep;
	c->distinct_layer[l] = distinct;
	st->zoom_total += distinct;
	*bytes = (size_t)n_keep * c->recon_row_bytes;
	if (n_job > 0 && (rc = c->be->ops->reconstruct(c->be, c->ws, c->rj, n_job))) {
		c->n_zrows[l] = 0;   /* the rows are unknown now */
		return rc;
	}
	return SEKV_OK;
}
