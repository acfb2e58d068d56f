/* zoomrows.c - SeKV zooms of single rows (issue 19; sekv_params.zoom_scan).
 * The landmark router ranks blocks of lm_len rows; inside a block that
 * holds the answer only a few rows carry the attention (measured on
 * bench-qa: the best rows of the zoom budget hold 0.90 of the mass where
 * whole blocks hold 0.85 and the landmark router's blocks 0.74). So the
 * best blocks holding zoom_scan times the rows the budget allows are
 * scanned: their keys scored against the query through the host-tier
 * factors (no row rebuilt), and only the rows with the largest estimated
 * share of their head's attention are rebuilt into the device tier. The
 * window zooms, the region and the mixed attention live in attend.c.
 */
#include "engine/sekv/ctx_int.h"
#include "engine/base/err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int block_cmp(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	if (x->alpha != y->alpha)
		return x->alpha < y->alpha ? 1 : -1;
	if (x->kv != y->kv)
		return x->kv < y->kv ? -1 : 1;
	if (x->comp != y->comp)
		return x->comp < y->comp ? -1 : 1;
	return (x->r0 > y->r0) - (x->r0 < y->r0);
}

static int place_cmp(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	if (x->kv != y->kv)
		return x->kv < y->kv ? -1 : 1;
	if (x->comp != y->comp)
		return x->comp < y->comp ? -1 : 1;
	return (x->r0 > y->r0) - (x->r0 < y->r0);
}

/* Every landmark block of every KV head whose span a query head of the
 * KV head wants (alpha_S above tau, as for windows) with its log share
 * estimate (the best over those query heads of the block's landmark
 * score less the head's estimated log-mass; the trained router scales
 * and shifts it by its a and b; its W term acts through alpha_S and tau
 * alone), best first, into
 * c->bcand; then the
 * best ones holding at most `want` rows (a block that would pass it is
 * skipped for smaller ones), reordered by KV head, span and
 * row. Returns how many were taken. */
static int take_blocks(struct sekv_ctx *c, int l, int want)
{
	const struct sekv_mem *m = c->m;
	const float *tau = c->router == SEKV_ROUTER_TRAINED ? c->trained->tau : m->tau;
	int n = 0, taken = 0, rows = 0;

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
	qsort(c->bcand, (size_t)n, sizeof *c->bcand, block_cmp);
	for (int i = 0; i < n; i++)
		if (rows + c->bcand[i].n <= want) {
			rows += c->bcand[i].n;
			c->bcand[taken++] = c->bcand[i];
		}
	qsort(c->bcand, (size_t)taken, sizeof *c->bcand, place_cmp);
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
	int d = m->d_h, n = 0, rc;

	for (int i = 0; i < n_blk; i++) {
		const struct cand *cd = &c->bcand[i];
		const struct sekv_factor *f =
			&m->fac[(((size_t)l * m->n_comp + cd->comp) * m->n_head_kv + cd->kv) * 2];
		int rows_form = sekv_rank_is_rows(f->rank), r = rows_form ? 0 : f->rank;
		size_t u_row = f->rank == SEKV_RANK_RAW8 ? (size_t)d :
			       (size_t)(rows_form ? d : f->rank) *
			       (m->factor_f16 ? sizeof(uint16_t) : sizeof(float));
		size_t sb, ub, vb;
		if (c->r_use > 0 && c->r_use < r)
			r = c->r_use;
		c->lrj[i] = (struct backend_lr_job){ cd->n, f->rank, r, m->factor_f16,
			(const char *)f->u + (size_t)cd->r0 * u_row,
			f->rank == SEKV_RANK_RAW8 ? f->s + cd->r0 : f->s, f->v,
			q + (size_t)cd->kv * c->group * d, (size_t)n };
		sekv_factor_bytes(rows_form ? f->rank : r, cd->n, d, m->factor_f16, &sb, &ub, &vb);
		c->st.factor_read_bytes += sb + ub + vb;
		for (int k = 0; k < cd->n; k++)
			c->scan[n + k] = (struct srow){ cd->kv, cd->comp, cd->r0 + k, cd->head };
		n += cd->n;
	}
	struct backend_score_lr sa = { c->group, d, c->q_scale, c->lrj, n_blk, c->scan_sc,
				       (size_t)c->scan_cap };
	if (n_blk > 0 && (rc = c->be->ops->score_lowrank(c->be, c->ws, &sa)))
		return rc;
	/* each head's whole mass, exp(lse_est) times corr: the scanned blocks'
	 * landmark estimates replaced by their rows' scores (a mean key
	 * underestimates a block that holds one strong row) */
	for (int h = 0; h < m->n_head; h++)
		c->scan_corr[h] = 1.0;
	for (int i = 0; i < n_blk; i++) {
		const struct cand *cd = &c->bcand[i];
		int b = m->lm_first[cd->comp] + cd->r0 / m->lm_len;
		for (int h = cd->kv * c->group; h < (cd->kv + 1) * c->group; h++)
			c->scan_corr[h] -= exp((double)c->lm_sc[(size_t)h * m->n_lm + b] - c->lse_est[h]);
	}
	for (int i = 0; i < n; i++) {
		int h0 = c->scan[i].kv * c->group;
		for (int g = 0; g < c->group; g++)
			c->scan_corr[h0 + g] +=
				exp((double)c->scan_sc[(size_t)g * c->scan_cap + i] - c->lse_est[h0 + g]);
	}
	for (int i = 0; i < n; i++) {
		int h0 = c->scan[i].kv * c->group;
		double p = 0;
		for (int g = 0; g < c->group; g++)
			p += exp((double)c->scan_sc[(size_t)g * c->scan_cap + i] - c->lse_est[h0 + g]) /
			     (c->scan_corr[h0 + g] > 1e-30 ? c->scan_corr[h0 + g] : 1e-30);
		c->scan_p[i] = (float)p;
	}
	return n;
}

int sekv_zoom_rows(struct sekv_ctx *c, int l, const float *q, size_t allow, size_t *bytes)
{
	const struct sekv_mem *m = c->m;
	struct sekv_stats *st = &c->st;
	size_t base = (size_t)c->rec_base[l], z_cap = allow / c->recon_row_bytes;
	int n_scan, n_keep = 0, n_job = 0, distinct = 0, ties, rc;
	float thr = -INFINITY;

	sekv_zoom_clear(c, l);
	c->n_zlist[l] = 0;   /* the region's rows are rewritten: nothing to keep */
	*bytes = 0;
	if (z_cap > (size_t)c->rec_cap[l])
		z_cap = (size_t)c->rec_cap[l];
	if (z_cap == 0)
		return SEKV_OK;
	size_t want = z_cap * (size_t)c->zoom_scan;
	if (want < (size_t)m->lm_len)
		want = (size_t)m->lm_len;   /* at least one block */
	n_scan = scan_blocks(c, l, q, take_blocks(c, l, want < (size_t)c->scan_cap ? (int)want : c->scan_cap));
	if (n_scan < 0)
		return n_scan;
	if ((size_t)n_scan > z_cap) {
		memcpy(c->scan_p + c->scan_cap, c->scan_p, (size_t)n_scan * sizeof *c->scan_p);
		thr = sekv_kth_largest(c->scan_p + c->scan_cap, n_scan, (int)z_cap - 1);
	}
	ties = (int)z_cap;
	for (int i = 0; i < n_scan; i++)
		ties -= c->scan_p[i] > thr;
	/* kept rows in scan order (KV head, span, row): one run per stretch
	 * of neighbouring rows, a span's runs side by side in the region */
	for (int i = 0; i < n_scan;) {
		const struct srow *r = &c->scan[i];
		int id = r->kv * m->n_comp + r->comp, first = -1, last = 0, held = 0, head = r->head;
		double share = 0;
		int s = m->comp_span[r->comp];
		for (; i < n_scan && c->scan[i].kv == r->kv && c->scan[i].comp == r->comp;) {
			int j = i;
			/* the tie count is spent only on a row that joins the run */
			while (j < n_scan && c->scan[j].kv == r->kv && c->scan[j].comp == r->comp &&
			       (j == i || c->scan[j].off == c->scan[j - 1].off + 1) &&
			       (c->scan_p[j] > thr || (c->scan_p[j] == thr && ties-- > 0)))
				j++;
			if (j == i) {
				i++;
				continue;
			}
			size_t fi = (((size_t)l * m->n_comp + r->comp) * m->n_head_kv + r->kv) * 2;
			for (int k = 0; k < 2; k++) {
				c->rj[n_job] = sekv_recon_job(c, &m->fac[fi + k], m->span[s].start, c->scan[i].off,
							      j - i, l, r->kv, k == 0, base, (size_t)n_keep);
				sekv_count_read(c, &c->rj[n_job++], j - i);
			}
			for (int k = i; k < j; k++) {
				c->recon_pos[base + (size_t)n_keep++] = m->span[s].start + c->scan[k].off;
				share += c->scan_p[k];
			}
			if (first < 0) {
				first = c->scan[i].off;
				c->zoom_row[id] = n_keep - (j - i);
			}
			last = c->scan[j - 1].off;
			held += j - i;
			i = j;
		}
		if (first < 0)
			continue;
		c->zoom_win[2 * id] = first;
		c->zoom_win[2 * id + 1] = held;
		distinct += !c->mark[r->comp];
		c->mark[r->comp] = 1;
		st->zoom[st->n_zoom++] = (struct sekv_zoom){ s, l, head, 1,
			(float)(share / c->group), first, last - first + 1 };
		for (int h = r->kv * c->group; h < (r->kv + 1) * c->group; h++)
			st->zoom_count[(size_t)l * m->n_head + h]++;
	}
	c->distinct_layer[l] = distinct;
	st->zoom_total += distinct;
	*bytes = (size_t)n_keep * c->recon_row_bytes;
	if (n_job > 0 && (rc = c->be->ops->reconstruct(c->be, c->ws, c->rj, n_job)))
		return rc;
	return SEKV_OK;
}
