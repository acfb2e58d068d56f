/* cpu_attention.c - the CPU backend's exact attention (struct backend_attn):
 * batches run (head, query block) items tiled over keys with an online
 * softmax (flash-attention order), so scratch does not grow with context;
 * one token splits the keys over threads and merges the partial softmaxes.
 * The attention probe (evidence, H2O's scores) recomputes the probed
 * heads' scores after the outputs are final, so it cannot change them.
 * SeKV's mixed attention lives in cpu_sekv.c.
 */
#include "engine/cpu/backend_cpu_int.h"

#include "engine/base/err.h"
#include "engine/cpu/gemm.h"



/* Softmax step for one tile and one query head over score rows [0, nr)
 * (query i = i_a + r): masks keys outside [lo_i, p_i], updates the running
 * max/sum (mx[i - i_base], sm[i - i_base]) and rescales the output row by
 * the change of max. */
static void attn_softmax_tile(const struct backend_attn *a, float *s, int nr,
			      int T, int i_a, int t0, int h, float *mx, float *sm, int i_base)
{
	int ld = a->n_head * a->d_head;

	for (int r = 0; r < nr; r++) {
		int i = i_a + r, p = a->pos0 + i;
		int lo = a->window > 0 ? p - a->window + 1 : 0;
		int j0 = lo > t0 ? lo - t0 : 0;
		int j1 = p - t0 + 1 < T ? p - t0 + 1 : T; /* exclusive */
		float *sr = s + (size_t)r * T, m_old = mx[i - i_base], m_new = m_old, f;
		double sum = 0.0;

		for (int j = j0; j < j1; j++)
			if (sr[j] > m_new)
				m_new = sr[j];
		for (int j = 0; j < j0; j++)
			sr[j] = 0.0f;
		for (int j = j1; j < T; j++)
			sr[j] = 0.0f;
		for (int j = j0; j < j1; j++) {
			sr[j] = exp_fast(sr[j] - m_new);
			sum += sr[j];
		}
		f = m_old == -INFINITY ? 0.0f : exp_fast(m_old - m_new);
		if (f != 1.0f) {
			float *o = a->out + (size_t)i * ld + (size_t)h * a->d_head;
			for (int e = 0; e < a->d_head; e++)
				o[e] *= f;
		}
		sm[i - i_base] = sm[i - i_base] * f + (float)sum;
		mx[i - i_base] = m_new;
	}
}

/* ---- decode attention: one query, key ranges in parallel ------------- */

struct attn1_job {
	const struct backend_attn *a;
	struct backend_ws *ws;
	int lo;        /* first visible position */
	int n_key;     /* visible positions: lo .. lo + n_key - 1 */
	int n_part;    /* parts the keys are cut into (one per chunk of work) */
};

/* The fp16 row of KV head g at visible key t (0 = position lo) in a ring
 * of a->cap rows of n_head_kv * d_head. */
static inline const uint16_t *attn1_row(const struct attn1_job *j, const void *base, int t, int g)
{
	const struct backend_attn *a = j->a;
	int pos = j->lo + t;

	if (pos >= a->cap)
		pos %= a->cap;
	return (const uint16_t *)base + ((size_t)pos * a->n_head_kv + (size_t)g) * a->d_head;
}

/* Rows are read ATTN_PREFETCH keys ahead: a key row of one KV head is
 * d_head * 2 bytes of a wider ring row, too short a run for the hardware
 * prefetchers, and decode attention waited on memory without it. */
#define ATTN_PREFETCH 8

static inline void attn1_prefetch(const uint16_t *row, int d)
{
	for (int e = 0; e < d; e += 32)
		__builtin_prefetch(row + e);
}

/* Part `part` of the keys: for every KV head, each key and value row is
 * turned to fp32 once and serves all query heads of the group (scores of
 * a key for every head, then every head's output row gets that key's
 * value), with a running max and sum per head per tile of ATTN_TILE keys
 * (flash-decoding: the parts merge later). */
static void attn1_part(struct attn1_job *j, int part)
{
	const struct backend_attn *a = j->a;
	struct backend_ws *ws = j->ws;
	int d = a->d_head, kvw = a->n_head_kv * d, group = a->n_head / a->n_head_kv;
	int k0, k1;
	float *kt = ws->pk + (size_t)part * ATTN_TILE * d; /* one row used */
	float *ps = ws->ps + (size_t)part * ws->ps_rows * ATTN_TILE;
	float *po = ws->po + (size_t)part * a->n_head * d;
	float *pm = ws->pm + (size_t)part * ws->ps_rows, *pl = ws->pl + (size_t)part * ws->ps_rows;

	cpu_chunk(j->n_key, j->n_part, part, &k0, &k1);
	for (int h = 0; h < a->n_head; h++) {
		pm[h] = -INFINITY;
		pl[h] = 0.0f;
	}
	memset(po, 0, sizeof(float) * (size_t)a->n_head * d);
	for (int g = 0; g < a->n_head_kv; g++) {
		for (int t0 = k0; t0 < k1; t0 += ATTN_TILE) {
			int T = k1 - t0 < ATTN_TILE ? k1 - t0 : ATTN_TILE;
			/* each key row is converted once into an L1-sized row
			 * and scored for every head of the group */
			for (int t = 0; t < T; t++) {
				const uint16_t *kr = attn1_row(j, a->k->host, t0 + t, g);
				const float *qg = a->q + (size_t)g * group * d;
				float *sg = ps + (size_t)g * group * ATTN_TILE + t;
				if (t + ATTN_PREFETCH < T)
					attn1_prefetch(attn1_row(j, a->k->host, t0 + t + ATTN_PREFETCH, g), d);
				cpu_scores_row_g(qg, group, d, kr, 0, a->scale, sg, ATTN_TILE, kt);
			}
			for (int hh = 0; hh < group; hh++) {
				int h = g * group + hh;
				float *s = ps + (size_t)h * ATTN_TILE, m = cpu_max_lanes(s, T), f, sum;
				m = m > pm[h] ? m : pm[h];
				f = pm[h] == -INFINITY ? 0.0f : exp_fast(pm[h] - m);
				sum = cpu_exp_lanes(s, T, m);
				if (f != 1.0f)
					for (int e = 0; e < d; e++)
						po[(size_t)h * d + e] *= f;
				pl[h] = pl[h] * f + sum;
				pm[h] = m;
			}
			/* and the value rows for every head, a run of the ring
			 * at a time (two where the tile wraps round) */
			for (int t = 0; t < T;) {
				int pos = (j->lo + t0 + t) % a->cap, n = T - t;
				n = n < a->cap - pos ? n : a->cap - pos;
				cpu_values_tile_g(po + (size_t)g * group * d, group, d,
						  attn1_row(j, a->v->host, t0 + t, g), (size_t)kvw, n,
						  ps + (size_t)g * group * ATTN_TILE + t, ATTN_TILE, kt);
				t += n;
			}
		}
	}
}

static void attn1_rows(void *ctx, int i0, int i1, int tid)
{
	(void)tid;

	for (int p = i0; p < i1; p++)
		attn1_part(ctx, p);
}

/* out[h] = sum_p exp(m_p - M) o_p / sum_p exp(m_p - M) l_p over the parts. */
static void attn1_merge(const struct attn1_job *j)
{
	const struct backend_attn *a = j->a;
	const struct backend_ws *ws = j->ws;
	int d = a->d_head;

	for (int h = 0; h < a->n_head; h++) {
		float M = -INFINITY, L = 0.0f, *out = a->out + (size_t)h * d;
		for (int p = 0; p < j->n_part; p++) {
			float m = ws->pm[(size_t)p * ws->ps_rows + h];
			M = m > M ? m : M;
		}
		memset(out, 0, sizeof(float) * (size_t)d);
		for (int p = 0; p < j->n_part; p++) {
			float m = ws->pm[(size_t)p * ws->ps_rows + h], f;
			if (m == -INFINITY)
				continue;
			f = exp_fast(m - M);
			L += f * ws->pl[(size_t)p * ws->ps_rows + h];
			cpu_axpy_lanes(out, f, ws->po + ((size_t)p * a->n_head + h) * d, d);
		}
		if (L > 0.0f)
			for (int e = 0; e < d; e++)
				out[e] /= L;
	}
}

/* Probe (struct backend_probe) of part `part`: the scores of the probed
 * heads are computed again for the part's keys and turned into softmax
 * weights with the merged max M and sum L of each head (the output is
 * final by then, so it cannot change). Parts own disjoint keys: no races. */
static void attn1_probe_part(struct attn1_job *j, int part)
{
	const struct backend_attn *a = j->a;
	const struct backend_probe *pr = a->probe;
	struct backend_ws *ws = j->ws;
	int d = a->d_head, kvw = a->n_head_kv * d, group = a->n_head / a->n_head_kv;
	float *kt = ws->pk + (size_t)part * ATTN_TILE * d;
	float M[BACKEND_PROBE_MAX], invL[BACKEND_PROBE_MAX];
	int k0, k1;

	for (int i = 0; i < pr->n; i++) {
		int h = pr->head[i];
		float L = 0.0f;
		M[i] = -INFINITY;
		for (int p = 0; p < j->n_part; p++) {
			float m = ws->pm[(size_t)p * ws->ps_rows + h];
			M[i] = m > M[i] ? m : M[i];
		}
		for (int p = 0; p < j->n_part; p++) {
			float m = ws->pm[(size_t)p * ws->ps_rows + h];
			if (m != -INFINITY)
				L += exp_fast(m - M[i]) * ws->pl[(size_t)p * ws->ps_rows + h];
		}
		invL[i] = L > 0.0f ? 1.0f / L : 0.0f;
	}
	cpu_chunk(j->n_key, j->n_part, part, &k0, &k1);
	for (int t = k0; t < k1; t++) {
		int pos = j->lo + t, g_last = -1;
		if (pos >= pr->n_key)
			break;
		for (int i = 0; i < pr->n; i++) {
			int h = pr->head[i], g = h / group;
			if (g != g_last) {
				size_t row = (size_t)(pos % a->cap) * kvw + (size_t)g * d;
				quant_f16_to_f32_row((const uint16_t *)a->k->host + row, kt, (size_t)d);
				g_last = g;
			}
			float sc = a->scale * cpu_dot_lanes(a->q + (size_t)h * d, kt, d);
			pr->mass[i][pos] += exp_fast(sc - M[i]) * invL[i];
		}
	}
}

static void attn1_probe_rows(void *ctx, int i0, int i1, int tid)
{
	(void)tid;

	for (int p = i0; p < i1; p++)
		attn1_probe_part(ctx, p);
}

/* One query at position pos0: cuts the visible keys into one part per
 * thread (parts of at least ATTN_TILE keys) and merges them. */
static void attention_one(struct backend *b, struct backend_ws *ws,
			  const struct backend_attn *a)
{
	int lo = a->window > 0 ? a->pos0 - a->window + 1 : 0;
	struct attn1_job j;

	if (lo < 0)
		lo = 0;
	j.a = a;
	j.ws = ws;
	j.lo = lo;
	j.n_key = a->pos0 - lo + 1;
	j.n_part = (j.n_key + ATTN_TILE - 1) / ATTN_TILE;
	if (j.n_part > ws->n_part)
		j.n_part = ws->n_part;
	cpu_parallel_for(b->impl, j.n_part, 1, attn1_rows, &j);
	attn1_merge(&j);
	if (a->probe && a->probe->n > 0)
		cpu_parallel_for(b->impl, j.n_part, 1, attn1_probe_rows, &j);
}

/* ---- batch attention: (head, block of queries) items in parallel ------ */

struct attnb_job {
	const struct backend_attn *a;
	struct backend_ws *ws;
	int n_qb;      /* query blocks of ATTN_QBLK */
};

/* Queries [i0, i1) of head h, on thread tid's scratch: key tiles from the
 * first key any of them sees to the last, each turned to fp32, scored by
 * sgemm, folded by the online softmax and accumulated by sgemm. */
static void attnb_block(const struct attnb_job *j, int h, int i0, int i1, int tid)
{
	const struct backend_attn *a = j->a;
	struct backend_ws *ws = j->ws;
	int d = a->d_head, ld = a->n_head * d, kvw = a->n_head_kv * d;
	int g = h / (a->n_head / a->n_head_kv);
	int p_last = a->pos0 + i1 - 1;
	int lo = a->window > 0 ? a->pos0 + i0 - a->window + 1 : 0;
	float *kt = ws->pk + (size_t)tid * ATTN_TILE * d;
	float *vt = ws->pv + (size_t)tid * ATTN_TILE * d;
	float *s = ws->ps + (size_t)tid * ws->ps_rows * ATTN_TILE;
	float *mx = ws->pm + (size_t)tid * ws->ps_rows, *sm = ws->pl + (size_t)tid * ws->ps_rows;
	float *gs = ws->gs + (size_t)tid * ws->gs_stride;

	if (lo < 0)
		lo = 0;
	for (int i = i0; i < i1; i++) {
		memset(a->out + (size_t)i * ld + (size_t)h * d, 0, sizeof(float) * (size_t)d);
		mx[i - i0] = -INFINITY;
		sm[i - i0] = 0.0f;
	}
	for (int t0 = lo; t0 <= p_last; t0 += ATTN_TILE) {
		int t1 = t0 + ATTN_TILE <= p_last + 1 ? t0 + ATTN_TILE : p_last + 1;
		int T = t1 - t0;
		int i_a = t0 - a->pos0 > i0 ? t0 - a->pos0 : i0;
		int i_b = a->window > 0 ? t1 + a->window - 1 - a->pos0 : i1;
		int nr;

		if (i_b > i1)
			i_b = i1;
		nr = i_b - i_a;
		if (nr <= 0)
			continue;
		for (int t = 0; t < T; t++) {
			size_t row = (size_t)((t0 + t) % a->cap) * kvw + (size_t)g * d;
			quant_f16_to_f32_row((const uint16_t *)a->k->host + row, kt + (size_t)t * d, (size_t)d);
			quant_f16_to_f32_row((const uint16_t *)a->v->host + row, vt + (size_t)t * d, (size_t)d);
		}
		gemm_nt(nr, T, d, a->scale, a->q + (size_t)i_a * ld + (size_t)h * d, ld, kt, d,
			s, T, 0, gs);
		attn_softmax_tile(a, s, nr, T, i_a, t0, h, mx, sm, i0);
		gemm_nn(nr, d, T, 1.0f, s, T, vt, d, a->out + (size_t)i_a * ld + (size_t)h * d,
			ld, 1, gs);
	}
	for (int i = i0; i < i1; i++) {
		float *o = a->out + (size_t)i * ld + (size_t)h * d;
		float inv = sm[i - i0] > 0.0f ? 1.0f / sm[i - i0] : 0.0f;
		for (int e = 0; e < d; e++)
			o[e] *= inv;
	}
	if (a->probe)
		for (int i = i0; i < i1; i++) {
			ws->mx[(size_t)h * ws->sz.n_batch + i] = mx[i - i0];
			ws->sm[(size_t)h * ws->sz.n_batch + i] = sm[i - i0];
		}
}

/* Items are head-major (item = h * n_qb + block), so with as many heads
 * per thread each thread gets every block of its heads (causal blocks
 * grow in cost along the sequence). */
static void attnb_rows(void *ctx, int i0, int i1, int tid)
{
	const struct attnb_job *j = ctx;

	for (int it = i0; it < i1; it++) {
		int h = it / j->n_qb, qb = it % j->n_qb;
		int q1 = (qb + 1) * ATTN_QBLK < j->a->n ? (qb + 1) * ATTN_QBLK : j->a->n;
		attnb_block(j, h, qb * ATTN_QBLK, q1, tid);
	}
}

/* ---- batch probe: key tiles in parallel ------------------------------ */

struct attnp_job {
	const struct backend_attn *a;
	struct backend_ws *ws;
	int n_key;     /* keys probed: [0, n_key) */
};

/* Probe (struct backend_probe) of a batch, key tile `tile` on thread
 * tid's scratch, once the batch's outputs are final: for each probed head
 * the scores of the queries that see the tile are computed again (sgemm,
 * blocks of ATTN_QBLK queries) and turned into softmax weights with each
 * query's final max and sum (ws->mx, ws->sm, left by attnb_block); each
 * key's weights from every query add to its mass. Tiles own disjoint keys:
 * no races. */
static void attnp_tile(const struct attnp_job *j, int tile, int tid)
{
	const struct backend_attn *a = j->a;
	const struct backend_probe *pr = a->probe;
	struct backend_ws *ws = j->ws;
	int d = a->d_head, ld = a->n_head * d, kvw = a->n_head_kv * d;
	int group = a->n_head / a->n_head_kv, nb = ws->sz.n_batch, g_last = -1;
	int t0 = tile * ATTN_TILE, t1 = t0 + ATTN_TILE < j->n_key ? t0 + ATTN_TILE : j->n_key, T = t1 - t0;
	int i_a = t0 - a->pos0 > 0 ? t0 - a->pos0 : 0;
	int i_b = a->window > 0 && t1 + a->window - 1 - a->pos0 < a->n ? t1 + a->window - 1 - a->pos0 : a->n;
	float *kt = ws->pk + (size_t)tid * ATTN_TILE * d;
	float *s = ws->ps + (size_t)tid * ws->ps_rows * ATTN_TILE;
	float *gs = ws->gs + (size_t)tid * ws->gs_stride;

	for (int e = 0; e < pr->n; e++) {
		int h = pr->head[e], g = h / group;
		float *mass = pr->mass[e];
		if (g != g_last) {
			for (int t = 0; t < T; t++)
				quant_f16_to_f32_row((const uint16_t *)a->k->host +
						    (size_t)((t0 + t) % a->cap) * kvw + (size_t)g * d,
						    kt + (size_t)t * d, (size_t)d);
			g_last = g;
		}
		for (int q0 = i_a; q0 < i_b; q0 += ATTN_QBLK) {
			int nr = i_b - q0 < ATTN_QBLK ? i_b - q0 : ATTN_QBLK;
			gemm_nt(nr, T, d, a->scale, a->q + (size_t)q0 * ld + (size_t)h * d, ld, kt, d,
				s, T, 0, gs);
			for (int r = 0; r < nr; r++) {
				int i = q0 + r, p = a->pos0 + i;
				int lo = a->window > 0 && p - a->window + 1 > t0 ? p - a->window + 1 : t0;
				int hi = p < t1 - 1 ? p : t1 - 1;
				float M = ws->mx[(size_t)h * nb + i], L = ws->sm[(size_t)h * nb + i];
				float inv = L > 0.0f ? 1.0f / L : 0.0f;
				for (int key = lo; key <= hi; key++)
					mass[key] += exp_fast(s[(size_t)r * T + (key - t0)] - M) * inv;
			}
		}
	}
}

static void attnp_rows(void *ctx, int i0, int i1, int tid)
{
	for (int tile = i0; tile < i1; tile++)
		attnp_tile(ctx, tile, tid);
}

int cpu_probe_ok(const struct backend_probe *p, int n_head)
{
	if (!p)
		return 1;
	if (p->n < 0 || p->n > BACKEND_PROBE_MAX)
		return 0;
	for (int i = 0; i < p->n; i++)
		if (p->head[i] < 0 || p->head[i] >= n_head || !p->mass[i])
			return 0;
	return 1;
}

int cpu_attention(struct backend *b, struct backend_ws *ws,
			 const struct backend_attn *a)
{
	int group = a->n_head_kv > 0 ? a->n_head / a->n_head_kv : 0;

	if (a->n < 1 || a->n > ws->sz.n_batch || a->n_head > ws->sz.n_head ||
	    a->d_head > ws->sz.d_head || group < 1 || a->n_head % a->n_head_kv)
		return SEKV_EINVAL;
	if (!cpu_probe_ok(a->probe, a->n_head))
		return SEKV_EINVAL;
	if (a->n == 1) {
		attention_one(b, ws, a);
		return 0;
	}
	{
		struct attnb_job j = { a, ws, (a->n + ATTN_QBLK - 1) / ATTN_QBLK };
		cpu_parallel_for(b->impl, a->n_head * j.n_qb, 1, attnb_rows, &j);
	}
	if (a->probe && a->probe->n > 0) {
		int last = a->pos0 + a->n;
		struct attnp_job j = { a, ws, a->probe->n_key < last ? a->probe->n_key : last };
		if (j.n_key > 0)
			cpu_parallel_for(b->impl, (j.n_key + ATTN_TILE - 1) / ATTN_TILE, 1, attnp_rows, &j);
	}
	return 0;
}
