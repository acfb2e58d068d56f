/* cpu_sekv.c - the CPU backend's SeKV decode operations: the mixed
 * attention (one softmax over blocks of exact, tail, coarse and
 * reconstructed rows, each block with its score bias and mask) and the
 * low-rank reconstruction of zoomed spans from their factors.
 * Invariant: the arithmetic of one query head (mixed attention) or one
 * span (reconstruction) is fixed and runs on one thread, so results are
 * the same at any thread count; the pool only spreads heads and spans.
 * Routing and zoom decisions live in engine/sekv/attend.c.
 */
#include "engine/backend_cpu_int.h"

#include "engine/err.h"
#include "engine/sekv/sekv.h"
#include "engine/vec.h"

struct mix_job {
	const struct backend_mix *a;
	struct backend_ws *ws;
};

/* Row i of block bk in buf as fp32: in place for fp32 rows, else converted
 * into row [d]. */
static const float *mix_row(const struct backend_mix_block *bk,
			    const struct backend_buf *buf, int i, int d, float *row)
{
	size_t e = bk->off + (size_t)i * bk->ld;

	if (bk->f32)
		return (const float *)buf->host + e;
	quant_f16_to_f32_row((const uint16_t *)buf->host + e, row, (size_t)d);
	return row;
}

/* Scores of query heads [h0, h1) (all of KV head g) against every unmasked
 * row of g's blocks, in block order: lg[h][n] = q[h] . k_n * scale + bias. */
static void mix_scores(const struct mix_job *j, int g, int h0, int h1, float *row)
{
	const struct backend_mix *a = j->a;
	const struct backend_mix_block *blk = a->blk + (size_t)g * a->n_blk;
	size_t ldl = (size_t)j->ws->sz.mix_rows;
	int d = a->d_head, n = 0;

	for (int b = 0; b < a->n_blk; b++) {
		const struct backend_mix_block *bk = &blk[b];
		if (bk->masked)
			continue;
		for (int i = 0; i < bk->n; i++, n++) {
			const float *kr = mix_row(bk, bk->k, i, d, row);
			for (int h = h0; h < h1; h++)
				j->ws->mix_logit[(size_t)h * ldl + n] =
					vec_dot8(a->q + (size_t)h * d, kr, d) * a->scale + bk->bias;
		}
	}
}

/* out[h] = sum_n p[h][n] v_n over the same rows, after the softmax. */
static void mix_values(const struct mix_job *j, int g, int h0, int h1, float *row)
{
	const struct backend_mix *a = j->a;
	const struct backend_mix_block *blk = a->blk + (size_t)g * a->n_blk;
	size_t ldl = (size_t)j->ws->sz.mix_rows;
	int d = a->d_head, n = 0;

	for (int b = 0; b < a->n_blk; b++) {
		const struct backend_mix_block *bk = &blk[b];
		if (bk->masked)
			continue;
		for (int i = 0; i < bk->n; i++, n++) {
			const float *vr = mix_row(bk, bk->v, i, d, row);
			for (int h = h0; h < h1; h++) {
				float p = j->ws->mix_logit[(size_t)h * ldl + n];
				float *o = a->out + (size_t)h * d;
				for (int e = 0; e < d; e++)
					o[e] += p * vr[e];
			}
		}
	}
}

/* Softmax in place over the n scores of head h (exp in fp32, sum in double). */
static void mix_softmax(float *x, int n)
{
	float mx = -INFINITY;
	double sum = 0;

	for (int i = 0; i < n; i++)
		mx = x[i] > mx ? x[i] : mx;
	for (int i = 0; i < n; i++) {
		x[i] = expf(x[i] - mx);
		sum += x[i];
	}
	for (int i = 0; i < n; i++)
		x[i] = (float)(x[i] / sum);
}

static int mix_rows_of(const struct backend_mix *a, int g)
{
	int n = 0;

	for (int b = 0; b < a->n_blk; b++)
		if (!a->blk[(size_t)g * a->n_blk + b].masked)
			n += a->blk[(size_t)g * a->n_blk + b].n;
	return n;
}

/* Probe: adds the softmax weights of the probed heads among [h0, h1)
 * (n rows) to their mass rows; each head is on one thread, so no races. */
static void mix_probe(const struct mix_job *j, int h0, int h1, int n)
{
	const struct backend_probe *pr = j->a->probe;
	int nk = n < pr->n_key ? n : pr->n_key;

	for (int i = 0; i < pr->n; i++) {
		const float *p;
		if (pr->head[i] < h0 || pr->head[i] >= h1)
			continue;
		p = j->ws->mix_logit + (size_t)pr->head[i] * j->ws->sz.mix_rows;
		for (int r = 0; r < nk; r++)
			pr->mass[i][r] += p[r];
	}
}

/* Query heads [i0, i1): each KV head's rows are converted once per thread
 * for the heads of the group this thread holds. */
static void mix_heads(void *ctx, int i0, int i1, int tid)
{
	const struct mix_job *j = ctx;
	const struct backend_mix *a = j->a;
	int group = a->n_head / a->n_head_kv, d = a->d_head;
	float *row = j->ws->mix_row + (size_t)tid * d;

	for (int h0 = i0; h0 < i1;) {
		int g = h0 / group, h1 = (g + 1) * group < i1 ? (g + 1) * group : i1;
		int n = mix_rows_of(a, g);
		mix_scores(j, g, h0, h1, row);
		for (int h = h0; h < h1; h++) {
			mix_softmax(j->ws->mix_logit + (size_t)h * j->ws->sz.mix_rows, n);
			memset(a->out + (size_t)h * d, 0, (size_t)d * sizeof(float));
		}
		mix_values(j, g, h0, h1, row);
		if (a->probe)
			mix_probe(j, h0, h1, n);
		h0 = h1;
	}
}

int cpu_attention_mix(struct backend *b, struct backend_ws *ws, const struct backend_mix *a)
{
	struct mix_job j = { a, ws };

	if (!ws || ws->sz.mix_rows < 1 || a->n_head_kv < 1 || a->n_head % a->n_head_kv ||
	    a->n_head > ws->sz.n_head || a->d_head > ws->sz.d_head || a->n_blk < 0)
		return SEKV_EINVAL;
	for (int g = 0; g < a->n_head_kv; g++)
		if (mix_rows_of(a, g) > ws->sz.mix_rows)
			return SEKV_EINVAL;
	if (!cpu_probe_ok(a->probe, a->n_head))
		return SEKV_EINVAL;
	cpu_parallel_for(b->impl, a->n_head, 1, mix_heads, &j);
	return 0;
}

/* ---- low-rank reconstruction --------------------------------------- */

struct recon_job {
	const struct backend_recon *r;
	struct backend_ws *ws;
};

/* X = sum_t s_t u_t v_t^T for the first r components. fp16 factors: the
 * kept columns of v are converted once into vf (stride r), u one row at
 * a time into us; the sums are fp32 either way. */
static void recon_one(const struct backend_recon *rc, float *vf, float *us, float *row)
{
	int d = rc->d, r = rc->r, f16 = rc->f16;
	const float *v = f16 ? vf : (const float *)rc->v;
	size_t ld = f16 ? (size_t)r : (size_t)rc->rank;

	if (rc->rank == SEKV_RANK_RAW) {
		for (int i = 0; i < rc->len; i++) {
			size_t at = rc->off + (size_t)i * d, from = (size_t)i * d;
			if (f16 && rc->dst_f32)
				quant_f16_to_f32_row((const uint16_t *)rc->u + from,
						     (float *)rc->dst->host + at, (size_t)d);
			else if (f16)
				memcpy((uint16_t *)rc->dst->host + at,
				       (const uint16_t *)rc->u + from, (size_t)d * 2);
			else if (rc->dst_f32)
				memcpy((float *)rc->dst->host + at,
				       (const float *)rc->u + from, (size_t)d * 4);
			else
				quant_f32_to_f16_row((const float *)rc->u + from,
						     (uint16_t *)rc->dst->host + at, (size_t)d);
		}
		return;
	}

	for (int j = 0; f16 && r && j < d; j++)
		quant_f16_to_f32_row((const uint16_t *)rc->v + j * (size_t)rc->rank, vf + j * ld, ld);
	for (int i = 0; i < rc->len; i++) {
		size_t at = rc->off + (size_t)i * d;
		if (f16 && r)
			quant_f16_to_f32_row((const uint16_t *)rc->u + i * (size_t)rc->rank, us,
					     (size_t)r);
		for (int t = 0; t < r; t++)
			us[t] = (f16 ? us[t] : ((const float *)rc->u)[i * (size_t)rc->rank + t]) *
				rc->s[t];
		for (int j = 0; j < d; j++)
			row[j] = r ? vec_dot8(us, v + (size_t)j * ld, r) : 0.0f;
		if (rc->cs)
			cpu_rope_row(row, rc->n_rot / 2, rc->cs + (size_t)i * (rc->n_rot / 2),
				     rc->sn + (size_t)i * (rc->n_rot / 2));
		if (rc->dst_f32)
			memcpy((float *)rc->dst->host + at, row, (size_t)d * sizeof(float));
		else
			quant_f32_to_f16_row(row, (uint16_t *)rc->dst->host + at, (size_t)d);
	}
}

static void recon_items(void *ctx, int i0, int i1, int tid)
{
	const struct recon_job *j = ctx;
	size_t d = (size_t)j->ws->sz.d_head;

	for (int i = i0; i < i1; i++)
		recon_one(&j->r[i], j->ws->rc_vf + (size_t)tid * d * d,
			  j->ws->rc_us + (size_t)tid * (d + 1), j->ws->rc_row + (size_t)tid * d);
}

int cpu_reconstruct(struct backend *b, struct backend_ws *ws,
		    const struct backend_recon *r, int n)
{
	struct recon_job j = { r, ws };

	if (!ws || ws->sz.mix_rows < 1 || n < 0)
		return SEKV_EINVAL;
	for (int i = 0; i < n; i++) {
		const struct backend_recon *x = &r[i];
		size_t es = x->dst_f32 ? sizeof(float) : sizeof(uint16_t), need;
		if (x->d < 1 || x->d > ws->sz.d_head || x->len < 0 || x->rank < SEKV_RANK_RAW ||
		    x->rank > x->d || (x->rank >= 0 && (x->r < 0 || x->r > x->rank)) || !x->dst ||
		    (x->cs && (!x->sn || x->n_rot < 2 || x->n_rot % 2 || x->n_rot > x->d)) ||
		    x->off > x->dst->bytes / es)
			return SEKV_EINVAL;
		need = (size_t)x->len * x->d;
		if (need > x->dst->bytes / es - x->off)
			return SEKV_EINVAL;
	}
	cpu_parallel_for(b->impl, n, 1, recon_items, &j);
	return 0;
}
