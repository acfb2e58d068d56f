/* cpu_sekv.c - the CPU backend's SeKV decode operations: the mixed
 * attention (one softmax over blocks of exact, tail, coarse and
 * reconstructed rows, each block with its score bias and mask) and the
 * low-rank reconstruction of zoomed spans from their factors.
 * Also the int8 landmark scores SeKV routes by, and the scores of key
 * rows read through their factors (zooms of single rows).
 * Invariant: the arithmetic of one part of rows (mixed attention, cut by
 * the rows alone), one score or one span (reconstruction) is fixed and
 * runs on one thread, so results are the same at any thread count; the
 * pool only spreads parts, rows and spans.
 * Routing and zoom decisions live in engine/sekv/attend.c.
 */
#include "engine/cpu/backend_cpu_int.h"

#include "engine/base/err.h"
#include "engine/sekv/sekv.h"
#include "engine/base/vec.h"

struct mix_job {
	const struct backend_mix *a;
	struct backend_ws *ws;
	const struct mix_part *part;
	int n_part;
};

static int mix_rows_of(const struct backend_mix *a, int g)
{
	int n = 0;

	for (int b = 0; b < a->n_blk; b++)
		if (!a->blk[(size_t)g * a->n_blk + b].masked)
			n += a->blk[(size_t)g * a->n_blk + b].n;
	return n;
}

/* Cuts every KV head's unmasked rows into parts of MIX_PART rows (the
 * last one of a head shorter): the cut depends on the rows only, never
 * on the thread count. Returns the number of parts. */
static int mix_cut(const struct backend_mix *a, struct mix_part *part)
{
	int n = 0;

	for (int g = 0; g < a->n_head_kv; g++) {
		int row = 0, open = 0;
		for (int b = 0; b < a->n_blk; b++) {
			const struct backend_mix_block *bk = &a->blk[(size_t)g * a->n_blk + b];
			for (int i = 0; !bk->masked && i < bk->n;) {
				int take;
				if (!open) {
					part[n] = (struct mix_part){ g, b, i, 0, row };
					open = 1;
				}
				take = bk->n - i < MIX_PART - part[n].n ? bk->n - i : MIX_PART - part[n].n;
				part[n].n += take;
				i += take;
				row += take;
				if (part[n].n == MIX_PART) {
					n++;
					open = 0;
				}
			}
		}
		n += open;
	}
	return n;
}

/* Row i of block bk in buf: an fp16, fp32 or int8 row. */
static const void *mix_row(const struct backend_mix_block *bk, const struct backend_buf *buf, int i)
{
	size_t e = bk->off + (size_t)i * bk->ld;

	switch (bk->type) {
	case BACKEND_ROW_F32: return (const float *)buf->host + e;
	case BACKEND_ROW_I8: return (const int8_t *)buf->host + e;
	case BACKEND_ROW_K8V4:
		return buf == bk->k ? (const void *)((const int8_t *)buf->host + e)
				    : (const void *)((const uint8_t *)buf->host + e / 2);
	default: return (const uint16_t *)buf->host + e;
	}
}

/* Scale of an int8 row i of block bk (sc: its ks or vs). */
static float mix_row_scale(const struct backend_mix_block *bk, const struct backend_buf *sc, int i)
{
	return ((const float *)sc->host)[bk->soff + (size_t)i * bk->sld];
}

/* Scores of the G query heads of qg for row i into s[h * lds]. The
 * constant group sizes keep the kernel's accumulators in registers. */
static void mix_score_row(const float *qg, int G, int d, const struct backend_mix_block *bk,
			  int i, float scale, float *s, size_t lds, float *tmp)
{
	const void *k = mix_row(bk, bk->k, i);

	int i8 = bk->type == BACKEND_ROW_I8 || bk->type == BACKEND_ROW_K8V4;

	if (bk->type == BACKEND_ROW_F32) {
		for (int h = 0; h < G; h++)
			s[(size_t)h * lds] = scale * cpu_dot_lanes(qg + (size_t)h * d, k, d);
	} else {
		float sc = i8 ? scale * mix_row_scale(bk, bk->ks, i) : scale;
		cpu_scores_row_g(qg, G, d, k, i8, sc, s, lds, tmp);
	}
	for (int h = 0; bk->bias != 0.0f && h < G; h++)
		s[(size_t)h * lds] += bk->bias;
}

/* og[h] += p[h * ldp] * v for the G heads, v row i of the block. */
static void mix_value_row(float *og, int G, int d, const struct backend_mix_block *bk, int i,
			  const float *p, size_t ldp, float *tmp)
{
	const void *v = mix_row(bk, bk->v, i);

	if (bk->type == BACKEND_ROW_F32) {
		for (int h = 0; h < G; h++)
			cpu_axpy_lanes(og + (size_t)h * d, p[(size_t)h * ldp], v, d);
	} else if (bk->type == BACKEND_ROW_I8) {
		cpu_values_i8_g(og, G, d, v, mix_row_scale(bk, bk->vs, i), p, ldp, tmp);
	} else if (bk->type == BACKEND_ROW_K8V4) {
		const float *sc = (const float *)bk->vs->host +
				  (bk->soff + (size_t)i * bk->sld) * (size_t)(d / QUANT_I4_GROUP);
		cpu_values_i4_g(og, G, d, v, sc, p, ldp, tmp);
	} else {
		cpu_values_f16_g(og, G, d, v, p, ldp, tmp);
	}
}

/* Part p: scores of its rows for the group's heads (kept in mix_logit at
 * the rows' indices), exponentials against the part's maximum, the
 * part's maximum and sum per head (mix_pm, mix_pl) and its unnormalised
 * output (mix_po): flash-decoding, merged by mix_merge. */
static void mix_part_run(const struct mix_job *j, int p, float *tmp)
{
	const struct backend_mix *a = j->a;
	const struct mix_part *pt = &j->part[p];
	const struct backend_mix_block *blk = a->blk + (size_t)pt->g * a->n_blk;
	struct backend_ws *ws = j->ws;
	int G = a->n_head / a->n_head_kv, d = a->d_head, h0 = pt->g * G;
	size_t ldl = (size_t)ws->sz.mix_rows;
	const float *qg = a->q + (size_t)h0 * d;
	float *lg = ws->mix_logit + (size_t)h0 * ldl + pt->row;
	float *po = ws->mix_po + (size_t)p * ws->sz.n_head * d;
	float *pm = ws->mix_pm + (size_t)p * ws->sz.n_head, *pl = ws->mix_pl + (size_t)p * ws->sz.n_head;

	for (int b = pt->b, i = pt->i, t = 0; t < pt->n; b++, i = 0)
		for (; !blk[b].masked && i < blk[b].n && t < pt->n; i++, t++)
			mix_score_row(qg, G, d, &blk[b], i, a->scale, lg + t, ldl, tmp);
	for (int h = 0; h < G; h++) {
		float *x = lg + (size_t)h * ldl, m = cpu_max_lanes(x, pt->n);
		pm[h] = m;
		pl[h] = cpu_exp_lanes(x, pt->n, m);
	}
	memset(po, 0, (size_t)G * d * sizeof(float));
	for (int b = pt->b, i = pt->i, t = 0; t < pt->n; b++, i = 0)
		for (; !blk[b].masked && i < blk[b].n && t < pt->n; i++, t++)
			mix_value_row(po, G, d, &blk[b], i, lg + t, ldl, tmp);
}

static void mix_parts(void *ctx, int i0, int i1, int tid)
{
	const struct mix_job *j = ctx;

	for (int p = i0; p < i1; p++)
		mix_part_run(j, p, j->ws->mix_row + (size_t)tid * j->ws->sz.d_head);
}

/* Per query head, in part order: out = sum_p exp(m_p - M) o_p / L with
 * L = sum_p exp(m_p - M) l_p, the carry joining as one more part of sum 1;
 * lse = M + log L. The probed heads' weights exp(s - m_p) exp(m_p - M) / L
 * are added to their mass rows. */
static void mix_merge(const struct mix_job *j)
{
	const struct backend_mix *a = j->a;
	const struct backend_ws *ws = j->ws;
	int G = a->n_head / a->n_head_kv, d = a->d_head, nh = ws->sz.n_head;

	for (int h = 0; h < a->n_head; h++) {
		float M = a->carry_lse ? a->carry_lse[h] : -INFINITY, L = 0, *out = a->out + (size_t)h * d;
		int g = h / G;
		for (int p = 0; p < j->n_part; p++)
			if (j->part[p].g == g && ws->mix_pm[(size_t)p * nh + h - g * G] > M)
				M = ws->mix_pm[(size_t)p * nh + h - g * G];
		memset(out, 0, (size_t)d * sizeof(float));
		if (M == -INFINITY) {
			if (a->lse)
				a->lse[h] = -INFINITY;
			continue;
		}
		if (a->carry_lse && a->carry_lse[h] > -INFINITY) {
			float f = exp_fast(a->carry_lse[h] - M);
			L += f;
			cpu_axpy_lanes(out, f, a->carry_out + (size_t)h * d, d);
		}
		for (int p = 0; p < j->n_part; p++) {
			size_t e = (size_t)p * nh + h - g * G;
			float f;
			if (j->part[p].g != g || ws->mix_pm[e] == -INFINITY)
				continue;
			f = exp_fast(ws->mix_pm[e] - M);
			L += f * ws->mix_pl[e];
			cpu_axpy_lanes(out, f, ws->mix_po + ((size_t)p * nh + h - g * G) * d, d);
		}
		for (int e = 0; L > 0 && e < d; e++)
			out[e] /= L;
		if (a->lse)
			a->lse[h] = M + logf(L);
		for (int i = 0; a->probe && i < a->probe->n; i++) {
			const float *x = ws->mix_logit + (size_t)h * ws->sz.mix_rows;
			if (a->probe->head[i] != h)
				continue;
			for (int p = 0; p < j->n_part; p++) {
				const struct mix_part *pt = &j->part[p];
				float f;
				if (pt->g != g)
					continue;
				f = exp_fast(ws->mix_pm[(size_t)p * nh + h - g * G] - M) / L;
				for (int t = 0; t < pt->n && pt->row + t < a->probe->n_key; t++)
					a->probe->mass[i][pt->row + t] += x[pt->row + t] * f;
			}
		}
	}
}

int cpu_attention_mix(struct backend *b, struct backend_ws *ws, const struct backend_mix *a)
{
	struct mix_job j = { a, ws, NULL, 0 };

	if (!ws || ws->sz.mix_rows < 1 || a->n_head_kv < 1 || a->n_head % a->n_head_kv ||
	    a->n_head > ws->sz.n_head || a->d_head > ws->sz.d_head || a->n_blk < 0 ||
	    (a->carry_lse && !a->carry_out))
		return SEKV_EINVAL;
	for (int g = 0; g < a->n_head_kv; g++)
		if (mix_rows_of(a, g) > ws->sz.mix_rows)
			return SEKV_EINVAL;
	for (int e = 0; e < a->n_head_kv * a->n_blk; e++) {
		const struct backend_mix_block *bk = &a->blk[e];
		if (bk->n > 0 && !bk->masked &&
		    (bk->type < BACKEND_ROW_F16 || bk->type > BACKEND_ROW_K8V4 ||
		     (bk->type >= BACKEND_ROW_I8 && (!bk->ks || !bk->vs)) ||
		     (bk->type == BACKEND_ROW_K8V4 &&
		      (a->d_head % QUANT_I4_GROUP || bk->off % 2 || bk->ld % 2))))
			return SEKV_EINVAL;
	}
	if (!cpu_probe_ok(a->probe, a->n_head))
		return SEKV_EINVAL;
	j.part = ws->mix_part;
	j.n_part = mix_cut(a, ws->mix_part);
	cpu_parallel_for(b->impl, j.n_part, 1, mix_parts, &j);
	mix_merge(&j);
	return 0;
}

/* ---- landmark scores ------------------------------------------------- */

struct score_job {
	const struct backend_score *a;
	struct backend_ws *ws;
};

/* Rows [j0, j1) of every KV head: the int8 row is widened once and feeds
 * the group's query heads. */
static void score_rows(void *ctx, int j0, int j1, int tid)
{
	const struct score_job *sj = ctx;
	const struct backend_score *a = sj->a;
	int G = a->n_head / a->n_head_kv, d = a->d_head;
	float *row = sj->ws->mix_row + (size_t)tid * sj->ws->sz.d_head;

	for (int j = j0; j < j1; j++)
		for (int g = 0; g < a->n_head_kv; g++) {
			const int8_t *k = (const int8_t *)a->k->host + a->off + (size_t)j * a->ld +
					  (size_t)g * d;
			float sc = ((const float *)a->ks->host)[a->soff + (size_t)j * a->n_head_kv + g] *
				   a->scale;
			float *sg = a->s + (size_t)g * G * a->lds + j;
			const float *qg = a->q + (size_t)g * G * d;
			cpu_scores_row_g(qg, G, d, k, 1, sc, sg, a->lds, row);
		}
}

int cpu_score_i8(struct backend *b, struct backend_ws *ws, const struct backend_score *a)
{
	struct score_job j = { a, ws };
	size_t need_k, need_s;

	if (!ws || ws->sz.mix_rows < 1 || !a->k || !a->ks || !a->q || !a->s || a->n < 0 ||
	    a->n_head_kv < 1 || a->n_head % a->n_head_kv || a->d_head < 1 ||
	    a->d_head > ws->sz.d_head || a->lds < (size_t)a->n ||
	    a->ld < (size_t)a->n_head_kv * a->d_head)
		return SEKV_EINVAL;
	if (a->n == 0)
		return 0;
	need_k = a->off + (size_t)(a->n - 1) * a->ld + (size_t)a->n_head_kv * a->d_head;
	need_s = a->soff + (size_t)a->n * a->n_head_kv;
	if (need_k > a->k->bytes || need_s > a->ks->bytes / sizeof(float))
		return SEKV_EINVAL;
	cpu_parallel_for(b->impl, a->n, 64, score_rows, &j);
	return 0;
}

/* ---- low-rank scores --------------------------------------------------- */

struct lr_ctx {
	const struct backend_score_lr *a;
	struct backend_ws *ws;
};

/* One job: the query heads projected on the factor once (qp [n_q][r],
 * scaled by s and the score scale), then r multiply-adds a row and head;
 * raw and int8 rows are widened to fp32 (row) and dotted whole. */
static void lr_one(const struct backend_score_lr *a, const struct backend_lr_job *x, float *qp,
		   float *us, float *row)
{
	int d = a->d, r = x->r;

	if (x->rank < 0) {
		for (int i = 0; i < x->len; i++) {
			size_t from = (size_t)i * d;
			float *out = a->s + x->col + i;
			if (x->rank == SEKV_RANK_RAW8)
				cpu_scores_row_g(x->q, a->n_q, d, (const int8_t *)x->u + from, 1,
						 a->scale * x->s[i], out, a->lds, row);
			else if (x->f16)
				cpu_scores_row_g(x->q, a->n_q, d, (const uint16_t *)x->u + from, 0,
						 a->scale, out, a->lds, row);
			else
				for (int g = 0; g < a->n_q; g++)
					out[(size_t)g * a->lds] = vec_dot8(x->q + (size_t)g * d,
									  (const float *)x->u + from, d) *
								  a->scale;
		}
		return;
	}
	memset(qp, 0, (size_t)a->n_q * r * sizeof *qp);
	for (int j = 0; j < d && r; j++) {
		if (x->f16)
			quant_f16_to_f32_row((const uint16_t *)x->v + j * (size_t)x->rank, us, (size_t)r);
		else
			memcpy(us, (const float *)x->v + j * (size_t)x->rank, (size_t)r * sizeof(float));
		for (int g = 0; g < a->n_q; g++)
			cpu_axpy_lanes(qp + (size_t)g * r, x->q[(size_t)g * d + j], us, r);
	}
	for (int g = 0; g < a->n_q; g++)
		for (int t = 0; t < r; t++)
			qp[(size_t)g * r + t] *= x->s[t] * a->scale;
	for (int i = 0; i < x->len; i++) {
		float *out = a->s + x->col + i;
		if (r == 0) {
			for (int g = 0; g < a->n_q; g++)
				out[(size_t)g * a->lds] = 0.0f;
		} else if (x->f16) {
			/* the u row (fp16) as a key of length r against qp */
			cpu_scores_row_g(qp, a->n_q, r, (const uint16_t *)x->u + i * (size_t)x->rank, 0,
					 1.0f, out, a->lds, us);
		} else {
			for (int g = 0; g < a->n_q; g++)
				out[(size_t)g * a->lds] = vec_dot8((const float *)x->u + i * (size_t)x->rank,
								  qp + (size_t)g * r, r);
		}
	}
}

static void lr_items(void *ctx, int i0, int i1, int tid)
{
	const struct lr_ctx *j = ctx;
	size_t d = (size_t)j->ws->sz.d_head, rk = cpu_recon_rank(j->ws);

	for (int i = i0; i < i1; i++)
		lr_one(j->a, &j->a->job[i], j->ws->rc_vf + (size_t)tid * rk * d,
		       j->ws->rc_us + (size_t)tid * (rk + 1), j->ws->rc_row + (size_t)tid * d);
}

int cpu_score_lowrank(struct backend *b, struct backend_ws *ws, const struct backend_score_lr *a)
{
	struct lr_ctx j = { a, ws };

	if (!ws || ws->sz.mix_rows < 1 || !a || a->n_job < 0 || a->n_q < 1 || a->d < 1 ||
	    a->d > ws->sz.d_head || (size_t)a->n_q * a->d > cpu_recon_rank(ws) * ws->sz.d_head ||
	    (a->n_job > 0 && (!a->s || !a->job)))
		return SEKV_EINVAL;
	for (int i = 0; i < a->n_job; i++) {
		const struct backend_lr_job *x = &a->job[i];
		if (x->len < 0 || !x->u || !x->q || x->rank < SEKV_RANK_RAW8 || x->rank > a->d ||
		    (x->rank >= 0 && (x->r < 0 || x->r > x->rank || (x->r > 0 && (!x->s || !x->v)))) ||
		    (x->rank == SEKV_RANK_RAW8 && !x->s) || x->col > a->lds ||
		    (size_t)x->len > a->lds - x->col)
			return SEKV_EINVAL;
	}
	cpu_parallel_for(b->impl, a->n_job, 1, lr_items, &j);
	return 0;
}

/* ---- low-rank reconstruction --------------------------------------- */

struct recon_job {
	const struct backend_recon *r;
	struct backend_ws *ws;
};

/* Writes rebuilt row i (fp32 [d], clobbered; divided by kc first) at the
 * job's type: fp16 rounded to nearest, fp32, or int8 with its scale. */
static void recon_store(const struct backend_recon *rc, int i, float *row)
{
	size_t at = rc->off + (size_t)i * rc->d;

	for (int e = 0; rc->kc && e < rc->d; e++)
		row[e] /= rc->kc[e];
	switch (rc->dst_type) {
	case BACKEND_ROW_F32:
		memcpy((float *)rc->dst->host + at, row, (size_t)rc->d * sizeof(float));
		break;
	case BACKEND_ROW_I8:
		((float *)rc->dst_s->host)[rc->soff + (size_t)i] =
			quant_f32_to_i8_row(row, (int8_t *)rc->dst->host + at, (size_t)rc->d);
		break;
	case BACKEND_ROW_I4:
		quant_f32_to_i4_row(row, (uint8_t *)rc->dst->host + at / 2,
				    (float *)rc->dst_s->host + (rc->soff + (size_t)i) *
					    (size_t)(rc->d / QUANT_I4_GROUP), (size_t)rc->d);
		break;
	default:
		quant_f32_to_f16_row(row, (uint16_t *)rc->dst->host + at, (size_t)rc->d);
	}
}

/* Raw factor: the rows are copied (converted where the types differ);
 * int8 rows are scaled back (row is fp32 scratch [d]). */
static void recon_raw(const struct backend_recon *rc, float *row)
{
	int d = rc->d;

	for (int i = 0; i < rc->len; i++) {
		size_t from = (size_t)i * d;
		if (rc->rank == SEKV_RANK_RAW8)
			quant_i8_to_f32_row((const int8_t *)rc->u + from, rc->s[i], row, (size_t)d);
		else if (!rc->f16)
			memcpy(row, (const float *)rc->u + from, (size_t)d * sizeof(float));
		else if (rc->dst_type == BACKEND_ROW_F16 && !rc->kc) {
			/* fp16 to fp16: the bits themselves */
			memcpy((uint16_t *)rc->dst->host + rc->off + from,
			       (const uint16_t *)rc->u + from, (size_t)d * 2);
			continue;
		} else
			quant_f16_to_f32_row((const uint16_t *)rc->u + from, row, (size_t)d);
		recon_store(rc, i, row);
	}
}

/* X = sum_t s_t u_t v_t^T over the first r components: v's kept columns
 * are turned once into fp32 rows vt [r][d], then each row of X is r
 * multiply-adds of whole rows (u_it s_t) vt_t, in order t = 0 .. r-1
 * (fp32 sums, vectorised along d). us holds u's row i times s. */
static void recon_one(const struct backend_recon *rc, float *vt, float *us, float *row)
{
	int d = rc->d, r = rc->r, f16 = rc->f16;

	if (rc->rank == SEKV_RANK_RAW || rc->rank == SEKV_RANK_RAW8) {
		recon_raw(rc, row);
		return;
	}
	for (int j = 0; j < d && r; j++) {
		if (f16)
			quant_f16_to_f32_row((const uint16_t *)rc->v + j * (size_t)rc->rank, us, (size_t)r);
		else
			memcpy(us, (const float *)rc->v + j * (size_t)rc->rank, (size_t)r * sizeof(float));
		for (int t = 0; t < r; t++)
			vt[(size_t)t * d + j] = us[t];
	}
	for (int i = 0; i < rc->len; i++) {
		if (f16)
			quant_f16_to_f32_row((const uint16_t *)rc->u + i * (size_t)rc->rank, us, (size_t)r);
		else
			memcpy(us, (const float *)rc->u + i * (size_t)rc->rank, (size_t)r * sizeof(float));
		memset(row, 0, (size_t)d * sizeof(float));
		for (int t = 0; t < r; t++)
			cpu_axpy_lanes(row, us[t] * rc->s[t], vt + (size_t)t * d, d);
		if (rc->cs)
			cpu_rope_row(row, rc->n_rot / 2, !rc->rope_gptj, rc->cs + (size_t)i * (rc->n_rot / 2),
				     rc->sn + (size_t)i * (rc->n_rot / 2));
		recon_store(rc, i, row);
	}
}

static void recon_items(void *ctx, int i0, int i1, int tid)
{
	const struct recon_job *j = ctx;
	size_t d = (size_t)j->ws->sz.d_head, rk = cpu_recon_rank(j->ws);

	for (int i = i0; i < i1; i++)
		recon_one(&j->r[i], j->ws->rc_vf + (size_t)tid * rk * d,
			  j->ws->rc_us + (size_t)tid * (rk + 1), j->ws->rc_row + (size_t)tid * d);
}

int cpu_reconstruct(struct backend *b, struct backend_ws *ws,
		    const struct backend_recon *r, int n)
{
	struct recon_job j = { r, ws };

	if (!ws || ws->sz.mix_rows < 1 || n < 0)
		return SEKV_EINVAL;
	for (int i = 0; i < n; i++) {
		const struct backend_recon *x = &r[i];
		int i4 = x->dst_type == BACKEND_ROW_I4;
		/* elements per byte of dst, doubled (int4: 4 a byte pair) */
		size_t es2 = x->dst_type == BACKEND_ROW_F32 ? 2 * sizeof(float) :
			     x->dst_type == BACKEND_ROW_I8 ? 2 : i4 ? 1 : 2 * sizeof(uint16_t), need;
		size_t cap = x->dst ? x->dst->bytes * 2 / es2 : 0;
		size_t spr = i4 ? (size_t)(x->d / QUANT_I4_GROUP) : 1; /* scales a row */
		if (x->d < 1 || x->d > ws->sz.d_head || x->len < 0 || x->rank < SEKV_RANK_RAW8 ||
		    (x->rank > x->d && (size_t)x->rank > cpu_recon_rank(ws)) || (x->rank >= 0 && (x->r < 0 || x->r > x->rank)) || !x->dst ||
		    (x->cs && (!x->sn || x->n_rot < 2 || x->n_rot % 2 || x->n_rot > x->d)) ||
		    (x->rank == SEKV_RANK_RAW8 && !x->s) || x->off > cap ||
		    x->dst_type < BACKEND_ROW_F16 || x->dst_type > BACKEND_ROW_I4 ||
		    x->dst_type == BACKEND_ROW_K8V4 || (i4 && (x->d % QUANT_I4_GROUP || x->off % 2)))
			return SEKV_EINVAL;
		need = (size_t)x->len * x->d;
		if (need > cap - x->off)
			return SEKV_EINVAL;
		if ((x->dst_type == BACKEND_ROW_I8 || i4) &&
		    (!x->dst_s || x->soff > x->dst_s->bytes / sizeof(float) / spr ||
		     (size_t)x->len > x->dst_s->bytes / sizeof(float) / spr - x->soff))
			return SEKV_EINVAL;
	}
	cpu_parallel_for(b->impl, n, 1, recon_items, &j);
	return 0;
}
