/* attend.c - decoding against a SeKV memory (DESIGN.md section 3): per
 * global layer and query head, route to spans, zoom the best ones under the
 * device budget, rebuild them from their factors only, and attend with ONE
 * softmax over exact rows, tail rows, coarse rows and reconstructed rows.
 * Invariant: no raw document KV is read here (exact rows, summaries and
 * factors only) and nothing is allocated after sekv_ctx_new.
 * Building the memory lives in build.c; its storage in mem.c.
 */
#include "engine/sekv/sekv_int.h"
#include "engine/err.h"
#include "engine/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A span wanted by a KV head: the best alpha over its query heads. */
struct cand {
	int32_t kv, comp, head;
	float alpha;
};

struct sekv_ctx {
	const struct sekv_mem *m;   /* borrowed */
	int tail_cap;               /* question + generated rows per layer */
	float q_scale;
	int r_use;                  /* <= 0: stored rank */
	int recon_f32;              /* reconstructed rows fp32 (1) or fp16 (0) */
	int group;                  /* query heads per KV head */
	int comp_tok;               /* tokens in compressed spans */
	int n_row;                  /* logits per head: exact+tail+coarse+comp_tok */
	size_t row_bytes;           /* one fp16 K+V row of one layer, all KV heads */
	int last_pos;               /* position of the current step, -1 none */

	float *kappa;               /* [n_layer][n_head][n_comp][SEKV_D_ROUTE] */
	uint16_t *tail_k;           /* [n_layer][tail_cap][n_head_kv][d_h] fp16 */
	uint16_t *tail_v;           /* same */
	int *n_tail;                /* [n_layer] tail index after the last row */
	int tail_first;             /* tail index of the first row still held
	                               (earlier rows were evicted); row of tail
	                               index i sits at slot i - tail_first */
	size_t *recon_layer;        /* [n_layer] reconstructed bytes this step */
	int *distinct_layer;        /* [n_layer] distinct zoomed spans this step */

	float *qr;                  /* [SEKV_D_ROUTE] routed query */
	float *alpha;               /* [n_head][n_comp] logit of alpha_S (ranked
	                               in logit space: the sigmoid saturates in
	                               float for large scores) */
	struct cand *cand;          /* [n_head_kv * n_comp] */
	int32_t *zoom_row;          /* [n_head_kv][n_comp] first recon row, -1 */
	uint8_t *mark;              /* [n_comp] zoomed for some KV head */
	void *recon_k;              /* [rows][d_h] fp16 or fp32; rows <= n_head_kv *
	                               comp_tok, and within one layer's budget share */
	void *recon_v;              /* same */
	float *logit;               /* [group][n_row] */
	float *row;                 /* [d_h] a converted row */
	float *us;                  /* [r_max] u_i * s */
	float *vf;                  /* [d_h][d_h] fp16 factor's v as fp32
	                               (rank <= d_h); NULL for fp32 factors */

	struct sekv_stats st;       /* zoom_count [n_layer][n_head], zoom [cap] */
	void *arena;
};

static size_t carve(size_t *off, size_t bytes)
{
	size_t o = (*off + 63) & ~(size_t)63;
	*off = o + bytes;
	return o;
}

/* Eight partial sums so the compiler can vectorise without -ffast-math;
 * the order is fixed, so results are deterministic. */
static float dotf(const float *a, const float *b, int n)
{
	float p[8] = {0}, s = 0;
	int i = 0;

	for (; i + 8 <= n; i += 8)
		for (int j = 0; j < 8; j++)
			p[j] += a[i + j] * b[i + j];
	for (; i < n; i++)
		s += a[i] * b[i];
	return s + ((p[0] + p[4]) + (p[1] + p[5])) + ((p[2] + p[6]) + (p[3] + p[7]));
}

/* kappa_S = normalize(W[l,h] k_bar_S) for every layer, head and span. */
static void init_kappa(struct sekv_ctx *c)
{
	const struct sekv_mem *m = c->m;
	int d = m->d_h, D = SEKV_D_ROUTE;

	for (int l = 0; l < m->n_layer; l++)
		for (int h = 0; h < m->n_head; h++) {
			const float *w = m->route_w + ((size_t)l * m->n_head + h) * D * d;
			for (int s = 0; s < m->n_comp; s++) {
				const float *kb = m->k_bar + (((size_t)l * m->n_comp + s) *
							      m->n_head_kv + h / c->group) * d;
				float *kp = c->kappa + (((size_t)l * m->n_head + h) * m->n_comp + s) * D;
				double nrm = 0;
				for (int i = 0; i < D; i++) {
					kp[i] = dotf(w + (size_t)i * d, kb, d);
					nrm += (double)kp[i] * kp[i];
				}
				for (int i = 0; nrm > 0 && i < D; i++)
					kp[i] = (float)(kp[i] / sqrt(nrm));
			}
		}
}

int sekv_ctx_new(struct sekv_ctx **out, const struct sekv_mem *m,
		 const struct sekv_params *p, int tail_cap, float q_scale,
		 char *err, size_t errlen)
{
	struct sekv_ctx *c;
	size_t off = 0, o_c, o_kap, o_tk, o_tv, o_nt, o_rl, o_dl, o_qr, o_al,
	       o_cand, o_zr, o_mark, o_rk, o_rv, o_lg, o_row, o_us, o_vf, o_zc, o_z,
	       n_tail, n_rec, es, budget;
	int comp_tok = 0, n_zoom_cap;
	char *a;

	*out = NULL;
	if (!m || !p || tail_cap < 1 || !isfinite(q_scale) || m->n_head_kv < 1 ||
	    m->n_head % m->n_head_kv)
		return sekv_errf(err, errlen, SEKV_EINVAL, "sekv_ctx_new: %s",
				 !m || !p ? "memory or params: NULL" :
				 tail_cap < 1 ? "tail_cap: must be >= 1" :
				 "shape: bad q_scale or head counts");
	for (int i = 0; i < m->n_comp; i++)
		comp_tok += m->span[m->comp_span[i]].len;
	es = p->recon_f32 ? sizeof(float) : sizeof(uint16_t);
	n_tail = (size_t)m->n_layer * tail_cap * m->n_head_kv * m->d_h;
	n_rec = (size_t)m->n_head_kv * comp_tok * m->d_h;
	budget = p->budget > 0 && p->budget < 1 ? (size_t)(p->budget * (double)m->full_kv_bytes) : 0;
	if (budget) {
		/* the largest per-layer allowance (one tail row) bounds the rows */
		size_t fixed = m->static_bytes + (size_t)m->n_layer * m->n_head_kv * m->d_h * 4;
		size_t allow = budget > fixed ? (budget - fixed) / m->n_layer : 0;
		if (allow / (2 * es) < n_rec)
			n_rec = allow / (2 * es);
	}
	n_zoom_cap = m->n_layer * m->n_head_kv * m->n_comp;
	o_c = carve(&off, sizeof *c);
	o_kap = carve(&off, (size_t)m->n_layer * m->n_head * m->n_comp * SEKV_D_ROUTE * sizeof(float));
	o_tk = carve(&off, n_tail * sizeof(uint16_t));
	o_tv = carve(&off, n_tail * sizeof(uint16_t));
	o_nt = carve(&off, (size_t)m->n_layer * sizeof(int));
	o_rl = carve(&off, (size_t)m->n_layer * sizeof(size_t));
	o_dl = carve(&off, (size_t)m->n_layer * sizeof(int));
	o_qr = carve(&off, SEKV_D_ROUTE * sizeof(float));
	o_al = carve(&off, (size_t)m->n_head * m->n_comp * sizeof(float));
	o_cand = carve(&off, (size_t)m->n_head_kv * m->n_comp * sizeof(struct cand));
	o_zr = carve(&off, (size_t)m->n_head_kv * m->n_comp * sizeof(int32_t));
	o_mark = carve(&off, (size_t)m->n_comp);
	o_rk = carve(&off, n_rec * es);
	o_rv = carve(&off, n_rec * es);
	o_lg = carve(&off, (size_t)(m->n_head / m->n_head_kv) * ((size_t)m->n_exact +
			tail_cap + m->n_comp + comp_tok) * sizeof(float));
	o_row = carve(&off, (size_t)m->d_h * sizeof(float));
	o_us = carve(&off, (size_t)(m->d_h + 1) * sizeof(float));
	o_vf = carve(&off, m->factor_f16 ? (size_t)m->d_h * m->d_h * sizeof(float) : 0);
	o_zc = carve(&off, (size_t)m->n_layer * m->n_head * sizeof(int));
	o_z = carve(&off, ((size_t)n_zoom_cap + 1) * sizeof(struct sekv_zoom));
	a = calloc(1, off);
	if (!a)
		return sekv_errf(err, errlen, SEKV_ENOMEM, "sekv_ctx_new: scratch: "
				 "out of memory (%zu bytes)", off);
	c = (struct sekv_ctx *)(a + o_c);
	c->arena = a;
	c->m = m;
	c->tail_cap = tail_cap;
	c->q_scale = q_scale;
	c->r_use = p->r_use;
	c->recon_f32 = p->recon_f32 != 0;
	c->group = m->n_head / m->n_head_kv;
	c->comp_tok = comp_tok;
	c->n_row = m->n_exact + tail_cap + m->n_comp + comp_tok;
	c->row_bytes = (size_t)m->n_head_kv * m->d_h * 2 * sizeof(uint16_t);
	c->kappa = (float *)(a + o_kap);
	c->tail_k = (uint16_t *)(a + o_tk);
	c->tail_v = (uint16_t *)(a + o_tv);
	c->n_tail = (int *)(a + o_nt);
	c->recon_layer = (size_t *)(a + o_rl);
	c->distinct_layer = (int *)(a + o_dl);
	c->qr = (float *)(a + o_qr);
	c->alpha = (float *)(a + o_al);
	c->cand = (struct cand *)(a + o_cand);
	c->zoom_row = (int32_t *)(a + o_zr);
	c->mark = (uint8_t *)(a + o_mark);
	c->recon_k = a + o_rk;
	c->recon_v = a + o_rv;
	c->logit = (float *)(a + o_lg);
	c->row = (float *)(a + o_row);
	c->us = (float *)(a + o_us);
	c->vf = m->factor_f16 ? (float *)(a + o_vf) : NULL;
	c->st.zoom_count = (int *)(a + o_zc);
	c->st.zoom = (struct sekv_zoom *)(a + o_z);
	c->st.budget_bytes = budget;
	init_kappa(c);
	sekv_ctx_reset(c);
	*out = c;
	return SEKV_OK;
}

void sekv_ctx_free(struct sekv_ctx *c)
{
	if (c)
		free(c->arena);
}

void sekv_ctx_reset(struct sekv_ctx *c)
{
	const struct sekv_mem *m = c->m;
	size_t budget = c->st.budget_bytes;

	c->last_pos = -1;
	memset(c->n_tail, 0, (size_t)m->n_layer * sizeof *c->n_tail);
	c->tail_first = 0;
	memset(c->recon_layer, 0, (size_t)m->n_layer * sizeof *c->recon_layer);
	memset(c->distinct_layer, 0, (size_t)m->n_layer * sizeof *c->distinct_layer);
	memset(c->st.zoom_count, 0, (size_t)m->n_layer * m->n_head * sizeof(int));
	c->st.step = 0;
	c->st.n_zoom = 0;
	c->st.zoom_total = 0;
	c->st.tail_bytes = 0;
	c->st.recon_bytes = 0;
	c->st.resident_bytes = m->static_bytes;
	c->st.peak_resident_bytes = m->static_bytes;
	c->st.budget_bytes = budget;
}

const struct sekv_stats *sekv_ctx_stats(const struct sekv_ctx *c)
{
	return &c->st;
}

static int cand_cmp(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	if (x->alpha != y->alpha)
		return x->alpha < y->alpha ? 1 : -1;
	if (x->kv != y->kv)
		return x->kv < y->kv ? -1 : 1;
	return (x->comp > y->comp) - (x->comp < y->comp);
}

/* Starts step `pos`: forgets the previous step's zooms and the tail rows
 * at or past the new position (a rewound stream overwrites them). */
static void new_step(struct sekv_ctx *c, int pos, int idx)
{
	const struct sekv_mem *m = c->m;

	c->last_pos = pos;
	c->st.step++;
	c->st.n_zoom = 0;
	memset(c->st.zoom_count, 0, (size_t)m->n_layer * m->n_head * sizeof(int));
	memset(c->recon_layer, 0, (size_t)m->n_layer * sizeof *c->recon_layer);
	memset(c->distinct_layer, 0, (size_t)m->n_layer * sizeof *c->distinct_layer);
	for (int l = 0; l < m->n_layer; l++)
		if (c->n_tail[l] > idx)
			c->n_tail[l] = idx;
}

/* sigmoid(x) > tau, decided in logit space. */
static int above_tau(float x, float tau)
{
	if (tau <= 0.0f)
		return 1;
	if (tau >= 1.0f)
		return 0;
	return x > logf(tau / (1.0f - tau));
}

/* Routes every query head of global layer l and collects the spans wanted
 * per KV head (alpha_S > tau) into c->cand, best first. Returns the count. */
static int route(struct sekv_ctx *c, int l, const float *q)
{
	const struct sekv_mem *m = c->m;
	int d = m->d_h, D = SEKV_D_ROUTE, n_cand = 0;
	float inv = 1.0f / sqrtf((float)D);

	for (int h = 0; h < m->n_head; h++) {
		const float *w = m->route_w + ((size_t)l * m->n_head + h) * D * d;
		const float *kp = c->kappa + ((size_t)l * m->n_head + h) * m->n_comp * D;
		for (int i = 0; i < D; i++)
			c->qr[i] = dotf(w + (size_t)i * d, q + (size_t)h * d, d);
		for (int s = 0; s < m->n_comp; s++) {
			float x = dotf(c->qr, kp + (size_t)s * D, D) * inv +
				  logf((float)m->span[m->comp_span[s]].len);
			c->alpha[(size_t)h * m->n_comp + s] = x;
		}
	}
	for (int kv = 0; kv < m->n_head_kv; kv++)
		for (int s = 0; s < m->n_comp; s++) {
			struct cand best = { kv, s, -1, 0 };
			for (int h = kv * c->group; h < (kv + 1) * c->group; h++) {
				float a = c->alpha[(size_t)h * m->n_comp + s];
				if (above_tau(a, m->tau[(size_t)l * m->n_head + h]) &&
				    (best.head < 0 || a > best.alpha)) {
					best.head = h;
					best.alpha = a;
				}
			}
			if (best.head >= 0)
				c->cand[n_cand++] = best;
		}
	qsort(c->cand, (size_t)n_cand, sizeof *c->cand, cand_cmp);
	return n_cand;
}

/* Rebuilds the rows of span s (KV head kv, layer l) from its factors with
 * gates m_i = 1 for the first r_use components: X = sum_i s_i u_i v_i^T.
 * fp16 factors: the kept columns of v are converted once per call into
 * c->vf (stride r), u one row at a time; the sums are fp32 either way. */
static void rebuild(struct sekv_ctx *c, const struct sekv_factor *f, int len,
		    void *dst)
{
	int d = c->m->d_h, r = f->rank, f16 = c->m->factor_f16;
	const float *v = f16 ? c->vf : (const float *)f->v;
	size_t ld;

	if (c->r_use > 0 && c->r_use < r)
		r = c->r_use;
	ld = f16 ? (size_t)r : (size_t)f->rank;
	for (int j = 0; f16 && r && j < d; j++)
		quant_f16_to_f32_row((const uint16_t *)f->v + j * (size_t)f->rank, c->vf + j * ld, ld);
	for (int i = 0; i < len; i++) {
		if (f16 && r)
			quant_f16_to_f32_row((const uint16_t *)f->u + i * (size_t)f->rank, c->us,
					     (size_t)r);
		for (int t = 0; t < r; t++)
			c->us[t] = (f16 ? c->us[t] : ((const float *)f->u)[i * (size_t)f->rank + t]) *
				   f->s[t];
		for (int j = 0; j < d; j++)
			c->row[j] = r ? dotf(c->us, v + (size_t)j * ld, r) : 0.0f;
		if (c->recon_f32)
			memcpy((float *)dst + (size_t)i * d, c->row, (size_t)d * sizeof(float));
		else
			quant_f32_to_f16_row(c->row, (uint16_t *)dst + (size_t)i * d, (size_t)d);
	}
}

static const float *recon_row(struct sekv_ctx *c, const void *buf, size_t r)
{
	int d = c->m->d_h;
	if (c->recon_f32)
		return (const float *)buf + r * d;
	quant_f16_to_f32_row((const uint16_t *)buf + r * d, c->row, (size_t)d);
	return c->row;
}

/* Chooses the zooms of layer l under its share of the budget, rebuilds
 * them and records statistics. Returns the reconstructed bytes. */
static size_t zoom(struct sekv_ctx *c, int l, int n_cand, int idx)
{
	const struct sekv_mem *m = c->m;
	struct sekv_stats *st = &c->st;
	size_t es = c->recon_f32 ? sizeof(float) : sizeof(uint16_t);
	size_t allow = (size_t)-1, used = 0;
	int rows = 0, distinct = 0;

	if (st->budget_bytes) {
		/* tail rows reserved for this position in every layer */
		size_t fixed = m->static_bytes +
			       (size_t)m->n_layer * (idx + 1 - c->tail_first) * c->row_bytes;
		allow = st->budget_bytes > fixed ? (st->budget_bytes - fixed) / m->n_layer : 0;
	}
	memset(c->mark, 0, (size_t)m->n_comp);
	for (size_t i = 0; i < (size_t)m->n_head_kv * m->n_comp; i++)
		c->zoom_row[i] = -1;
	/* a repeated call for this layer in the same step replaces its zooms */
	for (int i = 0, o = 0, n = st->n_zoom; i < n; i++)
		if (st->zoom[i].layer != l)
			st->zoom[o++] = st->zoom[i];
		else
			st->n_zoom--;
	st->zoom_total -= c->distinct_layer[l];
	memset(st->zoom_count + (size_t)l * m->n_head, 0, (size_t)m->n_head * sizeof(int));
	for (int i = 0; i < n_cand; i++) {
		const struct cand *cd = &c->cand[i];
		int s = m->comp_span[cd->comp], len = m->span[s].len;
		size_t cost = (size_t)len * m->d_h * 2 * es;
		size_t fi = (((size_t)l * m->n_comp + cd->comp) * m->n_head_kv + cd->kv) * 2;
		if (cost > allow - used)
			continue;   /* a long span must not block shorter ones */
		used += cost;
		c->zoom_row[(size_t)cd->kv * m->n_comp + cd->comp] = rows;
		rebuild(c, &m->fac[fi], len, (char *)c->recon_k + (size_t)rows * m->d_h * es);
		rebuild(c, &m->fac[fi + 1], len, (char *)c->recon_v + (size_t)rows * m->d_h * es);
		rows += len;
		distinct += !c->mark[cd->comp];
		c->mark[cd->comp] = 1;
		st->zoom[st->n_zoom++] = (struct sekv_zoom){ s, l, cd->head, 1.0f / (1.0f + expf(-cd->alpha)) };
		for (int h = cd->kv * c->group; h < (cd->kv + 1) * c->group; h++)
			st->zoom_count[(size_t)l * m->n_head + h]++;
	}
	c->distinct_layer[l] = distinct;
	st->zoom_total += distinct;
	return used;
}

/* One softmax per query head of KV head kv over exact, tail, coarse and
 * reconstructed rows; writes out [n_head][d_h] for those heads. */
static void attend_kv(struct sekv_ctx *c, int l, int kv, const float *q, float *out)
{
	const struct sekv_mem *m = c->m;
	int d = m->d_h, g = c->group, h0 = kv * g, nt = c->n_tail[l] - c->tail_first, n = 0;
	size_t row = (size_t)m->n_head_kv * d;
	const uint16_t *ek = m->exact_k + (size_t)l * m->n_exact * row + (size_t)kv * d;
	const uint16_t *ev = m->exact_v + (size_t)l * m->n_exact * row + (size_t)kv * d;
	const uint16_t *tk = c->tail_k + (size_t)l * c->tail_cap * row + (size_t)kv * d;
	const uint16_t *tv = c->tail_v + (size_t)l * c->tail_cap * row + (size_t)kv * d;
	const float *kb = m->k_bar + (size_t)l * m->n_comp * row + (size_t)kv * d;
	const float *vb = m->v_bar + (size_t)l * m->n_comp * row + (size_t)kv * d;
	const int32_t *zr = c->zoom_row + (size_t)kv * m->n_comp;
	float *lg = c->logit;

#define LOGITS(krow, bias) do { \
	const float *kr_ = (krow); \
	for (int hh = 0; hh < g; hh++) \
		lg[(size_t)hh * c->n_row + n] = dotf(q + (size_t)(h0 + hh) * d, kr_, d) * \
			c->q_scale + (bias); \
	n++; } while (0)
	for (int e = 0; e < m->n_exact; e++) {
		quant_f16_to_f32_row(ek + (size_t)e * row, c->row, (size_t)d);
		LOGITS(c->row, 0.0f);
	}
	for (int t = 0; t < nt; t++) {
		quant_f16_to_f32_row(tk + (size_t)t * row, c->row, (size_t)d);
		LOGITS(c->row, 0.0f);
	}
	for (int s = 0; s < m->n_comp; s++) {
		int len = m->span[m->comp_span[s]].len;
		if (zr[s] >= 0) {
			for (int i = 0; i < len; i++)
				LOGITS(recon_row(c, c->recon_k, (size_t)zr[s] + i), 0.0f);
		} else {
			LOGITS(kb + (size_t)s * row, logf((float)len));
		}
	}
#undef LOGITS
	for (int hh = 0; hh < g; hh++) {
		float *x = lg + (size_t)hh * c->n_row, mx = -INFINITY;
		double sum = 0;
		for (int i = 0; i < n; i++)
			mx = x[i] > mx ? x[i] : mx;
		for (int i = 0; i < n; i++) {
			x[i] = expf(x[i] - mx);
			sum += x[i];
		}
		for (int i = 0; i < n; i++)
			x[i] = (float)(x[i] / sum);
		memset(out + (size_t)(h0 + hh) * d, 0, (size_t)d * sizeof(float));
	}
	n = 0;
#define ACC(vrow) do { \
	const float *vr_ = (vrow); \
	for (int hh = 0; hh < g; hh++) { \
		float p_ = lg[(size_t)hh * c->n_row + n], *o_ = out + (size_t)(h0 + hh) * d; \
		for (int j = 0; j < d; j++) \
			o_[j] += p_ * vr_[j]; \
	} \
	n++; } while (0)
	for (int e = 0; e < m->n_exact; e++) {
		quant_f16_to_f32_row(ev + (size_t)e * row, c->row, (size_t)d);
		ACC(c->row);
	}
	for (int t = 0; t < nt; t++) {
		quant_f16_to_f32_row(tv + (size_t)t * row, c->row, (size_t)d);
		ACC(c->row);
	}
	for (int s = 0; s < m->n_comp; s++) {
		int len = m->span[m->comp_span[s]].len;
		if (zr[s] >= 0) {
			for (int i = 0; i < len; i++)
				ACC(recon_row(c, c->recon_v, (size_t)zr[s] + i));
		} else {
			ACC(vb + (size_t)s * row);
		}
	}
#undef ACC
}

int sekv_attend(void *ctx, int layer, int pos, const float *q,
		const float *k, const float *v, float *out)
{
	struct sekv_ctx *c = ctx;
	const struct sekv_mem *m;
	struct sekv_stats *st;
	size_t row, tail = 0, recon = 0;
	int l = -1, idx, n_cand;

	if (!c || !q || !k || !v || !out)
		return SEKV_EINVAL;
	m = c->m;
	st = &c->st;
	for (int i = 0; i < m->n_layer; i++)
		if (m->layer_id[i] == layer)
			l = i;
	idx = pos - m->n_tok;
	if (l < 0 || idx < c->tail_first || idx - c->tail_first >= c->tail_cap)
		return SEKV_EINVAL;
	if (idx > c->n_tail[l])
		return SEKV_EINVAL;   /* rows must be appended in order */
	if (pos != c->last_pos)
		new_step(c, pos, idx);
	row = (size_t)m->n_head_kv * m->d_h;
	size_t slot = (size_t)(idx - c->tail_first);
	quant_f32_to_f16_row(k, c->tail_k + ((size_t)l * c->tail_cap + slot) * row, row);
	quant_f32_to_f16_row(v, c->tail_v + ((size_t)l * c->tail_cap + slot) * row, row);
	c->n_tail[l] = idx + 1;

	n_cand = route(c, l, q);
	c->recon_layer[l] = zoom(c, l, n_cand, idx);
	for (int kv = 0; kv < m->n_head_kv; kv++)
		attend_kv(c, l, kv, q, out);

	for (int i = 0; i < m->n_layer; i++) {
		tail += (size_t)(c->n_tail[i] - c->tail_first) * c->row_bytes;
		recon += c->recon_layer[i];
	}
	st->tail_bytes = tail;
	st->recon_bytes = recon;
	st->resident_bytes = m->static_bytes + tail + recon;
	if (st->resident_bytes > st->peak_resident_bytes)
		st->peak_resident_bytes = st->resident_bytes;
	return SEKV_OK;
}

int sekv_ctx_evict_tail(struct sekv_ctx *c, int pos)
{
	const struct sekv_mem *m = c->m;
	int first = pos - m->n_tok, lo = c->n_tail[0];
	size_t row = (size_t)m->n_head_kv * m->d_h;

	for (int l = 1; l < m->n_layer; l++)
		if (c->n_tail[l] < lo)
			lo = c->n_tail[l];
	if (first < c->tail_first || first > lo)
		return SEKV_EINVAL;
	int drop = first - c->tail_first;
	for (int l = 0; l < m->n_layer && drop > 0; l++) {
		size_t keep = (size_t)(c->n_tail[l] - first);
		uint16_t *tk = c->tail_k + (size_t)l * c->tail_cap * row;
		uint16_t *tv = c->tail_v + (size_t)l * c->tail_cap * row;
		memmove(tk, tk + (size_t)drop * row, keep * row * sizeof *tk);
		memmove(tv, tv + (size_t)drop * row, keep * row * sizeof *tv);
	}
	c->tail_first = first;
	c->st.tail_bytes = 0;
	for (int l = 0; l < m->n_layer; l++)
		c->st.tail_bytes += (size_t)(c->n_tail[l] - first) * c->row_bytes;
	return SEKV_OK;
}

int sekv_ctx_tail_rows(const struct sekv_ctx *c)
{
	int n = 0;
	for (int l = 0; l < c->m->n_layer; l++)
		if (c->n_tail[l] - c->tail_first > n)
			n = c->n_tail[l] - c->tail_first;
	return n;
}
