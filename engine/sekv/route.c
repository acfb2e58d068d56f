/* route.c - SeKV's routing at decode (DESIGN.md section 3 steps 1-2):
 * per global layer and query head, each compressed span's alpha_S from
 * the landmarks (or the span summaries, or the exact mass for the oracle
 * router), the zoom windows inside spans, and the candidates per KV head
 * best first; also the exact attention mass that the oracle router and
 * mass_recall measure against. Zooming, rebuilding and the mixed
 * attention live in attend.c.
 */
#include "engine/sekv/ctx_int.h"
#include "engine/base/err.h"
#include "engine/quant/quant.h"
#include "engine/base/vec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cand_cmp(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	if (x->alpha != y->alpha)
		return x->alpha < y->alpha ? 1 : -1;
	if (x->kv != y->kv)
		return x->kv < y->kv ? -1 : 1;
	return (x->comp > y->comp) - (x->comp < y->comp);
}

int sekv_above_tau(float x, float tau)
{
	if (tau <= 0.0f)
		return 1;
	if (tau >= 1.0f)
		return 0;
	return x > logf(tau / (1.0f - tau));
}

/* Exact attention of every query head of layer l over the document:
 * scores into xs, mass per compressed span into xmass and over the
 * document into xtotal (both relative to the head's largest score). */
void sekv_exact_mass(struct sekv_ctx *c, int l, const float *q)
{
	const struct sekv_mem *m = c->m;
	int d = m->d_h, n = m->n_tok;

	for (int j = 0; j < n; j++)
		for (int kv = 0; kv < m->n_head_kv; kv++) {
			quant_f16_to_f32_row(c->xk[l] + ((size_t)j * m->n_head_kv + kv) * d, c->xrow,
					     (size_t)d);
			for (int h = kv * c->group; h < (kv + 1) * c->group; h++)
				c->xs[(size_t)h * n + j] = vec_dot8(q + (size_t)h * d, c->xrow, d) * c->q_scale;
		}
	for (int h = 0; h < m->n_head; h++) {
		float *x = c->xs + (size_t)h * n, mx = -INFINITY;
		double total = 0;
		for (int j = 0; j < n; j++)
			mx = x[j] > mx ? x[j] : mx;
		for (int j = 0; j < n; j++) {
			x[j] = expf(x[j] - mx);
			total += x[j];
		}
		c->xmax[h] = mx;
		for (int s = 0; s < m->n_comp; s++) {
			const struct sekv_span *sp = &m->span[m->comp_span[s]];
			double sum = 0;
			for (int j = sp->start; j < sp->start + sp->len && j < n; j++)
				sum += x[j];
			c->xmass[(size_t)h * m->n_comp + s] = sum;
		}
		c->xtotal[h] = total;
	}
}

float sekv_kth_largest(float *x, int n, int k)
{
	int lo = 0, hi = n - 1;

	while (lo < hi) {
		float piv = x[lo + (hi - lo) / 2], tmp;
		int i = lo, j = hi;
		while (i <= j) {
			while (x[i] > piv)
				i++;
			while (x[j] < piv)
				j--;
			if (i <= j) {
				tmp = x[i];
				x[i++] = x[j];
				x[j--] = tmp;
			}
		}
		if (k <= j)
			hi = j;
		else if (k >= i)
			lo = i;
		else
			return x[k];
	}
	return x[k];
}

/* mass_oracle (sekv_stats) of layer l at this step: per KV head the R
 * rows with the most exact mass summed over its query heads (each head's
 * mass normalised first), R what the budget left by the tail rows holds
 * per layer at the device row type. */
static void add_mass_oracle(struct sekv_ctx *c, int l)
{
	const struct sekv_mem *m = c->m;
	int n = m->n_tok;
	size_t per = (size_t)m->n_layer * c->row_bytes, tail, r;
	float *p = c->xsel, *w = c->xsel + n;

	if (!c->st.budget_bytes || n < 1 || !per)
		return;
	tail = (size_t)m->n_layer * (size_t)(c->n_tail[l] - c->tail_first) * c->row_bytes;
	r = c->st.budget_bytes > tail ? (c->st.budget_bytes - tail) / per : 0;
	int k = r < (size_t)n ? (int)r : n;
	for (int kv = 0; kv < m->n_head_kv; kv++) {
		int h0 = kv * c->group, n_above = 0, ties;
		float thr = 0;
		memset(p, 0, (size_t)n * sizeof *p);
		for (int h = h0; h < h0 + c->group; h++)
			for (int t = 0; c->xtotal[h] > 0 && t < n; t++)
				p[t] += (float)(c->xs[(size_t)h * n + t] / c->xtotal[h]);
		if (k > 0 && k < n) {
			memcpy(w, p, (size_t)n * sizeof *w);
			thr = sekv_kth_largest(w, n, k - 1);
			for (int t = 0; t < n; t++)
				n_above += p[t] > thr;
		}
		for (int h = h0; h < h0 + c->group; h++) {
			const float *x = c->xs + (size_t)h * n;
			double got = 0;
			ties = k - n_above;
			for (int t = 0; k > 0 && t < n; t++)
				if (k == n || p[t] > thr || (p[t] == thr && ties-- > 0))
					got += x[t];
			c->st.mass_oracle_sum += c->xtotal[h] > 0 ? got / c->xtotal[h] : 1.0;
			c->st.mass_oracle_n++;
		}
	}
}

/* mass_recall of this step's zooms of layer l (exact_mass computed), and
 * mass_oracle under a budget. */
void sekv_add_mass_recall(struct sekv_ctx *c, int l)
{
	const struct sekv_mem *m = c->m;

	add_mass_oracle(c, l);

	for (int h = 0; h < m->n_head; h++) {
		const int32_t *zr = c->zoom_row + (size_t)(h / c->group) * m->n_comp;
		const int32_t *zw = c->zoom_win + (size_t)(h / c->group) * m->n_comp * 2;
		const float *x = c->xs + (size_t)h * m->n_tok;
		double lost = 0;
		for (int s = 0; s < m->n_comp; s++) {
			const int32_t *pos = c->recon_pos + c->rec_base[l] + (zr[s] > 0 ? zr[s] : 0);
			double got = 0;
			for (int t = 0; zr[s] >= 0 && t < zw[2 * s + 1]; t++)
				got += x[pos[t]];
			lost += c->xmass[(size_t)h * m->n_comp + s] - got;
		}
		double r = c->xtotal[h] > 0 ? 1.0 - lost / c->xtotal[h] : 1.0;
		c->st.mass_recall_sum += r;
		c->st.mass_recall_lh[(size_t)l * m->n_head + h] += r;
		c->st.mass_recall_n++;
	}
}

/* attn_err (sekv_stats): per query head ||out - ref|| / ||ref||, ref the
 * attention over the document's exact rows (xk, xv: fp16 as prefilled)
 * and the stream's own tail rows (the question and answer as the device
 * tier holds them), so it measures what the memory of the document loses:
 * exact rows at the device type, coarse rows for what is not zoomed,
 * zoomed rows rebuilt from the factors (issue 19). */
void sekv_add_attn_err(struct sekv_ctx *c, int l, const float *q, const float *out)
{
	const struct sekv_mem *m = c->m;
	int d = m->d_h, n = m->n_tok, nt = c->n_tail[l] - c->tail_first;
	size_t row = (size_t)m->n_head_kv * d;
	const uint16_t *tk = c->xtail, *tv = c->xtail + (size_t)c->tail_cap * row;

	if (nt > 0 && sekv_dev_get_tail(c, l, 0, nt, c->xtail, c->xtail + (size_t)c->tail_cap * row))
		return;
	for (int kv = 0; kv < m->n_head_kv; kv++) {
		int h0 = kv * c->group;
		double *f = c->xfd + h0, *den = c->xfd + m->n_head + h0;
		for (int g = 0; g < c->group; g++) {
			int h = h0 + g;
			float mx = (float)c->xmax[h];
			for (int i = 0; i < nt; i++) {
				quant_f16_to_f32_row(tk + (size_t)i * row + (size_t)kv * d, c->xrow, (size_t)d);
				c->xtl[i] = vec_dot8(q + (size_t)h * d, c->xrow, d) * c->q_scale;
			}
			float top = mx;
			for (int i = 0; i < nt; i++)
				top = c->xtl[i] > top ? c->xtl[i] : top;
			f[g] = exp((double)mx - top);
			den[g] = c->xtotal[h] * f[g];
			double *acc = c->xacc + (size_t)h * d;
			memset(acc, 0, (size_t)d * sizeof *acc);
			for (int i = 0; i < nt; i++) {
				double w = exp((double)c->xtl[i] - top);
				quant_f16_to_f32_row(tv + (size_t)i * row + (size_t)kv * d, c->xrow, (size_t)d);
				den[g] += w;
				for (int j = 0; j < d; j++)
					acc[j] += w * c->xrow[j];
			}
		}
		for (int t = 0; t < n; t++) {
			quant_f16_to_f32_row(c->xv[l] + ((size_t)t * m->n_head_kv + kv) * d, c->xrow, (size_t)d);
			for (int g = 0; g < c->group; g++) {
				double w = c->xs[(size_t)(h0 + g) * n + t] * f[g];
				double *acc = c->xacc + (size_t)(h0 + g) * d;
				for (int j = 0; w > 0 && j < d; j++)
					acc[j] += w * c->xrow[j];
			}
		}
		for (int g = 0; g < c->group; g++) {
			const double *acc = c->xacc + (size_t)(h0 + g) * d;
			const float *o = out + (size_t)(h0 + g) * d;
			double e2 = 0, r2 = 0;
			for (int j = 0; j < d; j++) {
				double r = acc[j] / den[g];
				e2 += (o[j] - r) * (o[j] - r);
				r2 += r * r;
			}
			c->st.attn_err_sum += r2 > 0 ? sqrt(e2 / r2) : 0;
			c->st.attn_err_n++;
		}
	}
}

/* Landmark routing of global layer l: per query head, the log-mass estimate
 * of compressed span S is logsumexp over its blocks b of
 * q . lm_b * q_scale + log|b| (each block's rows taken at their mean key),
 * and alpha_S = its estimated share of the head's whole attention: that
 * mass over the exact and tail rows' (exactly: the log-denominator of the
 * step's first softmax call, lse_exact) plus every
 * compressed span's, kept in c->alpha as logit(alpha_S). Unlike the span
 * mean (k_bar), a block that holds the answer keeps its own score instead
 * of being averaged over the whole span; and a head that looks at the
 * question or the recent rows has small alpha_S everywhere, so the zoom
 * budget goes to the heads that retrieve (issue 9: mass_recall and
 * needles measured). */
static int route_landmark(struct sekv_ctx *c, int l, const float *q)
{
	const struct sekv_mem *m = c->m;
	struct backend_score sa = { q, m->n_head, m->n_head_kv, m->d_h, c->lm_kb,
		(size_t)l * m->n_lm * m->n_head_kv * m->d_h, (size_t)m->n_head_kv * m->d_h, c->lm_sb,
		(size_t)l * m->n_lm * m->n_head_kv, m->n_lm, c->q_scale, c->lm_sc, (size_t)m->n_lm };
	int rc;

	if ((rc = c->be->ops->score_i8(c->be, c->ws, &sa)))
		return rc;
	for (int s = 0; s < m->n_comp; s++) {
		const struct sekv_span *sp = &m->span[m->comp_span[s]];
		for (int b = m->lm_first[s]; b < m->lm_first[s + 1]; b++) {
			int off = (b - m->lm_first[s]) * m->lm_len;
			float lb = logf((float)(sp->len - off < m->lm_len ? sp->len - off : m->lm_len));
			for (int h = 0; h < m->n_head; h++)
				c->lm_sc[(size_t)h * m->n_lm + b] += lb;
		}
	}
	for (int h = 0; h < m->n_head; h++) {
		float *a = c->alpha + (size_t)h * m->n_comp, mx = c->lse_exact[h];
		const float *x = c->lm_sc + (size_t)h * m->n_lm;
		double tot;
		for (int s = 0; s < m->n_comp; s++) {
			float bm = -INFINITY;
			double sum = 0;
			for (int b = m->lm_first[s]; b < m->lm_first[s + 1]; b++)
				bm = x[b] > bm ? x[b] : bm;
			for (int b = m->lm_first[s]; b < m->lm_first[s + 1]; b++)
				sum += expf(x[b] - bm);
			a[s] = bm + logf((float)sum);
			mx = a[s] > mx ? a[s] : mx;
		}
		tot = exp(c->lse_exact[h] - mx);
		for (int s = 0; s < m->n_comp; s++)
			tot += exp(a[s] - mx);
		c->lse_est[h] = mx + (float)log(tot);
		for (int s = 0; s < m->n_comp; s++) {
			float ls = a[s] - c->lse_est[h];   /* log alpha_S <= 0 */
			a[s] = ls < -1e-6f ? ls - log1pf(-expf(ls)) : 30.0f;
		}
	}
	return SEKV_OK;
}

/* The trained router (struct sekv_router_w) over the landmark logits
 * route_landmark left in c->alpha: z = a x + b (+ <W q, kappa_S>/sqrt(d')
 * with kappa from the trained W, sekv_ctx_new), in place. */
static void route_trained(struct sekv_ctx *c, int l, const float *q)
{
	const struct sekv_mem *m = c->m;
	const struct sekv_router_w *rw = c->trained;
	int d = m->d_h, D = SEKV_D_ROUTE;
	float inv = 1.0f / sqrtf((float)D);

	for (int h = 0; h < m->n_head; h++) {
		size_t lh = (size_t)l * m->n_head + h;
		float *a = c->alpha + (size_t)h * m->n_comp;
		const float *kp = c->kappa + lh * m->n_comp * D;
		if (rw->w)
			for (int i = 0; i < D; i++)
				c->qr[i] = vec_dot8(rw->w + (lh * D + i) * d, q + (size_t)h * d, d);
		for (int s = 0; s < m->n_comp; s++)
			a[s] = rw->a[lh] * a[s] + rw->b[lh] +
			       (rw->w ? vec_dot8(c->qr, kp + (size_t)s * D, D) * inv : 0.0f);
	}
}

void sekv_ctx_route_view(const struct sekv_ctx *c, struct sekv_route_view *v)
{
	const struct sekv_mem *m = c->m;
	int l = c->routed_layer - 1;

	v->layer = l;
	v->n_head = m->n_head;
	v->n_comp = m->n_comp;
	v->x = l >= 0 && c->router == SEKV_ROUTER_LANDMARK ? c->alpha : NULL;
	v->mass = l >= 0 && c->xk[l] ? c->xmass : NULL;
	v->total = v->mass ? c->xtotal : NULL;
}

/* The rows of candidate cd's span to rebuild: all of them, or with
 * zoom_blocks and landmarks the best block of the routing head and its
 * neighbours, grown one block at a time towards the higher-scoring side
 * while that block holds at least 1/8 of the best block's estimated mass,
 * up to zoom_blocks blocks (issue 9: the zoom budget holds a few spans'
 * worth of rows; the answer lies in a block or two of a span). */
static void zoom_window(const struct sekv_ctx *c, struct cand *cd)
{
	const struct sekv_mem *m = c->m;
	int len = m->span[m->comp_span[cd->comp]].len, b0, b1, bb;
	const float *sc;

	cd->r0 = 0;
	cd->n = len;
	if (!c->zoom_blocks || (c->router != SEKV_ROUTER_LANDMARK && c->router != SEKV_ROUTER_TRAINED) ||
	    m->lm_len < 1)
		return;
	b0 = m->lm_first[cd->comp];
	b1 = m->lm_first[cd->comp + 1];
	if (b1 - b0 <= c->zoom_blocks)
		return;
	sc = c->lm_sc + (size_t)cd->head * m->n_lm;
	bb = b0;
	for (int b = b0 + 1; b < b1; b++)
		bb = sc[b] > sc[bb] ? b : bb;
	int lo = bb, hi = bb + 1;   /* blocks [lo, hi) */
	while (hi - lo < c->zoom_blocks) {
		float l_sc = lo > b0 ? sc[lo - 1] : -INFINITY, r_sc = hi < b1 ? sc[hi] : -INFINITY;
		if (fmaxf(l_sc, r_sc) < sc[bb] - 2.0794415f)   /* ln 8 */
			break;
		if (l_sc > r_sc)
			lo--;
		else
			hi++;
	}
	cd->r0 = (lo - b0) * m->lm_len;
	cd->n = (hi - b0) * m->lm_len < len ? (hi - lo) * m->lm_len : len - cd->r0;
}

/* Routes every query head of global layer l and collects the spans wanted
 * per KV head (alpha_S > tau) into c->cand, best first; *n_out = their
 * count. 0 or the backend's code.
 * The oracle router's alpha_S is log(the span's share of the exact mass). */
int sekv_route(struct sekv_ctx *c, int l, const float *q, int *n_out)
{
	const struct sekv_mem *m = c->m;
	int d = m->d_h, D = SEKV_D_ROUTE, n_cand = 0;
	float inv = 1.0f / sqrtf((float)D);

	c->routed_layer = l + 1;
	if (c->router == SEKV_ROUTER_ORACLE && c->xk[l]) {
		for (int h = 0; h < m->n_head; h++)
			for (int s = 0; s < m->n_comp; s++) {
				double x = c->xmass[(size_t)h * m->n_comp + s];
				c->alpha[(size_t)h * m->n_comp + s] =
					x > 0 && c->xtotal[h] > 0 ? (float)log(x / c->xtotal[h]) : -1e30f;
			}
		for (int kv = 0; kv < m->n_head_kv; kv++)
			for (int s = 0; s < m->n_comp; s++) {
				struct cand best = { kv, s, kv * c->group, -INFINITY, 0,
						     m->span[m->comp_span[s]].len };
				for (int h = kv * c->group; h < (kv + 1) * c->group; h++)
					if (c->alpha[(size_t)h * m->n_comp + s] > best.alpha) {
						best.head = h;
						best.alpha = c->alpha[(size_t)h * m->n_comp + s];
					}
				c->cand[n_cand++] = best;
			}
		qsort(c->cand, (size_t)n_cand, sizeof *c->cand, cand_cmp);
		*n_out = n_cand;
		return SEKV_OK;
	}
	if (c->router == SEKV_ROUTER_LANDMARK || c->router == SEKV_ROUTER_TRAINED) {
		int rc = route_landmark(c, l, q);
		if (rc)
			return rc;
	}
	if (c->router == SEKV_ROUTER_TRAINED)
		route_trained(c, l, q);
	for (int h = 0; c->router == SEKV_ROUTER_SUMMARY && h < m->n_head; h++) {
		const float *w = m->route_w + ((size_t)l * m->n_head + h) * D * d;
		const float *kp = c->kappa + ((size_t)l * m->n_head + h) * m->n_comp * D;
		for (int i = 0; i < D; i++)
			c->qr[i] = vec_dot8(w + (size_t)i * d, q + (size_t)h * d, d);
		for (int s = 0; s < m->n_comp; s++) {
			float x = vec_dot8(c->qr, kp + (size_t)s * D, D) * inv +
				  logf((float)m->span[m->comp_span[s]].len);
			c->alpha[(size_t)h * m->n_comp + s] = x;
		}
	}
	const float *tau = c->router == SEKV_ROUTER_TRAINED ? c->trained->tau : m->tau;
	for (int kv = 0; kv < m->n_head_kv; kv++)
		for (int s = 0; s < m->n_comp; s++) {
			struct cand best = { kv, s, -1, 0, 0, 0 };
			for (int h = kv * c->group; h < (kv + 1) * c->group; h++) {
				float a = c->alpha[(size_t)h * m->n_comp + s];
				if (sekv_above_tau(a, tau[(size_t)l * m->n_head + h]) &&
				    (best.head < 0 || a > best.alpha)) {
					best.head = h;
					best.alpha = a;
				}
			}
			if (best.head >= 0) {
				zoom_window(c, &best);
				c->cand[n_cand++] = best;
			}
		}
	qsort(c->cand, (size_t)n_cand, sizeof *c->cand, cand_cmp);
	*n_out = n_cand;
	return SEKV_OK;
}

/* alpha_S 30 (logit): every span is wanted whole; order does not matter,
 * everything fits. */
void sekv_route_all(struct sekv_ctx *c, int *n_out)
{
	const struct sekv_mem *m = c->m;
	int n = 0;

	for (int kv = 0; kv < m->n_head_kv; kv++)
		for (int s = 0; s < m->n_comp; s++)
			c->cand[n++] = (struct cand){ kv, s, kv * c->group, 30.0f, 0,
						      m->span[m->comp_span[s]].len };
	*n_out = n;
}
