/* part.c - a memory cut into position ranges and put back together: the
 * slices a conversation's memory is persisted as (each turn adds the part
 * sekv_mem_append made final), and the join that reopens it.
 * Invariant: a cut never crosses a span, so every span, its summary,
 * landmarks and factors travel whole, and join(slices) reproduces the
 * memory bit for bit; a part whose landmark blocks have another size (a
 * session begun before `ingest --rebuild` chose other blocks) gets its
 * landmarks rebuilt from its key factors. Growing a memory lives in build.c, storage in store/.
 */
#include "engine/sekv/sekv.h"
#include "engine/sekv/sekv_int.h"
#include "engine/base/err.h"
#include "engine/quant/quant.h"

#include <stdlib.h>
#include <string.h>

int sekv_mem_frontier(const struct sekv_mem *m, int n_sink)
{
	if (m->n_span)
		return m->span[m->n_span - 1].start + m->span[m->n_span - 1].len;
	return n_sink < m->n_tok ? (n_sink > 0 ? n_sink : 0) : m->n_tok;
}

/* Element i of a factor's u or v at the memory's type. */
static float fac_at(const struct sekv_mem *m, const void *x, size_t i)
{
	return m->factor_f16 ? quant_f16_to_f32(((const uint16_t *)x)[i]) : ((const float *)x)[i];
}

/* Landmarks of dst's compressed span d (layer l), whose factors came from
 * a memory with landmark blocks of another size: each block's mean key
 * rebuilt from the K factors (post-RoPE keys: the mean of rebuilt rows is
 * the factor's mean u row times s and v), int8 with an absmax / 127 scale
 * as sekv_build makes them. acc is scratch [d_h + rank]. */
static void landmarks_from_factors(struct sekv_mem *dst, int l, int d, float *acc)
{
	const struct sekv_span *sp = &dst->span[dst->comp_span[d]];
	int dh = dst->d_h;

	for (int kv = 0; kv < dst->n_head_kv; kv++) {
		const struct sekv_factor *f = &dst->fac[(((size_t)l * dst->n_comp + d) * dst->n_head_kv + kv) * 2];
		for (int b = dst->lm_first[d]; b < dst->lm_first[d + 1]; b++) {
			int r0 = (b - dst->lm_first[d]) * dst->lm_len;
			int r1 = r0 + dst->lm_len < sp->len ? r0 + dst->lm_len : sp->len;
			size_t at = ((size_t)l * dst->n_lm + b) * dst->n_head_kv + kv;
			float *ubar = acc + dh;
			memset(acc, 0, (size_t)dh * sizeof *acc);
			if (sekv_rank_is_rows(f->rank)) {
				for (int i = r0; i < r1; i++)
					for (int j = 0; j < dh; j++)
						acc[j] += f->rank == SEKV_RANK_RAW8 ?
							  f->s[i] * ((const int8_t *)f->u)[(size_t)i * dh + j] :
							  fac_at(dst, f->u, (size_t)i * dh + j);
			} else {
				memset(ubar, 0, (size_t)f->rank * sizeof *ubar);
				for (int i = r0; i < r1; i++)
					for (int t = 0; t < f->rank; t++)
						ubar[t] += fac_at(dst, f->u, (size_t)i * f->rank + t);
				for (int j = 0; j < dh; j++)
					for (int t = 0; t < f->rank; t++)
						acc[j] += ubar[t] * f->s[t] * fac_at(dst, f->v, (size_t)j * f->rank + t);
			}
			for (int j = 0; j < dh; j++)
				acc[j] /= (float)(r1 - r0);
			dst->lm_s[at] = quant_f32_to_i8_row(acc, dst->lm_k + at * dh, (size_t)dh);
		}
	}
}

int sekv_mem_copy_comps(struct sekv_mem *dst, int d0, const struct sekv_mem *src, int c0, int n)
{
	size_t row = (size_t)dst->n_head_kv * dst->d_h, per = (size_t)dst->n_head_kv * 2;
	int lm_d = dst->lm_first[d0], lm_s = src->lm_first[c0];
	/* landmark blocks of another size are rebuilt from the factors */
	int reblock = dst->lm_len > 0 && src->lm_len != dst->lm_len;
	/* a memory without landmarks (lm_len 0) takes none */
	size_t n_lm = src->lm_len != dst->lm_len ? 0 : (size_t)(src->lm_first[c0 + n] - lm_s);
	float *acc = NULL;

	if (reblock && n > 0 && !(acc = malloc(2 * (size_t)dst->d_h * sizeof *acc)))
		return SEKV_ENOMEM;

	for (int l = 0; l < dst->n_layer && n > 0; l++) {
		size_t at = ((size_t)l * dst->n_comp + d0) * row, from = ((size_t)l * src->n_comp + c0) * row;
		memcpy(dst->k_bar + at, src->k_bar + from, (size_t)n * row * 2);
		memcpy(dst->v_bar + at, src->v_bar + from, (size_t)n * row * 2);
		if (n_lm) {
			memcpy(dst->lm_k + ((size_t)l * dst->n_lm + lm_d) * row,
			       src->lm_k + ((size_t)l * src->n_lm + lm_s) * row, n_lm * row);
			memcpy(dst->lm_s + ((size_t)l * dst->n_lm + lm_d) * dst->n_head_kv,
			       src->lm_s + ((size_t)l * src->n_lm + lm_s) * src->n_head_kv,
			       n_lm * dst->n_head_kv * sizeof(float));
		}
		for (size_t f = 0; f < (size_t)n * per; f++) {
			const struct sekv_factor *a = &src->fac[((size_t)l * src->n_comp + c0) * per + f];
			struct sekv_factor *b = &dst->fac[((size_t)l * dst->n_comp + d0) * per + f];
			size_t sb, ub, vb;
			sekv_factor_bytes(a->rank, src->span[src->comp_span[c0 + f / per]].len, src->d_h,
					  src->factor_f16, &sb, &ub, &vb);
			if (sb)
				memcpy(b->s, a->s, sb);
			memcpy(b->u, a->u, ub + vb); /* u and v are one run per factor */
		}
		for (int c = 0; reblock && c < n; c++)
			landmarks_from_factors(dst, l, d0 + c, acc);
	}
	free(acc);
	return SEKV_OK;
}

void sekv_mem_copy_exact(struct sekv_mem *dst, int d0, const struct sekv_mem *src, int e0, int n,
			 int shift)
{
	size_t row = (size_t)dst->n_head_kv * dst->d_h;

	for (int i = 0; i < n; i++)
		dst->exact_pos[d0 + i] = src->exact_pos[e0 + i] + shift;
	for (int l = 0; l < dst->n_layer && n > 0; l++) {
		size_t at = ((size_t)l * dst->n_exact + d0) * row, from = ((size_t)l * src->n_exact + e0) * row;
		memcpy(dst->exact_k + at, src->exact_k + from, (size_t)n * row * 2);
		memcpy(dst->exact_v + at, src->exact_v + from, (size_t)n * row * 2);
	}
}

/* Positions [t0, t1) of m, placed from position `at` of the result. */
struct piece {
	const struct sekv_mem *m;
	int t0, t1, at;
	int s0, s1;      /* spans inside [t0, t1) */
	int c0, nc;      /* their compressed spans */
	int e0, e1;      /* exact rows inside [t0, t1) */
};

/* Finds the spans and exact rows of pc's range; SEKV_EINVAL when a span
 * crosses an end of it. */
static int piece_find(struct piece *pc)
{
	const struct sekv_mem *m = pc->m;
	int i = 0, c = 0;

	if (pc->t0 < 0 || pc->t1 < pc->t0 || pc->t1 > m->n_tok)
		return SEKV_EINVAL;
	for (; i < m->n_span && m->span[i].start < pc->t0; i++)
		c += !m->span[i].full;
	if (i > 0 && m->span[i - 1].start + m->span[i - 1].len > pc->t0)
		return SEKV_EINVAL;
	pc->s0 = i;
	pc->c0 = c;
	for (; i < m->n_span && m->span[i].start < pc->t1; i++) {
		if (m->span[i].start + m->span[i].len > pc->t1)
			return SEKV_EINVAL;
		c += !m->span[i].full;
	}
	pc->s1 = i;
	pc->nc = c - pc->c0;
	for (pc->e0 = 0; pc->e0 < m->n_exact && m->exact_pos[pc->e0] < pc->t0; pc->e0++)
		;
	for (pc->e1 = pc->e0; pc->e1 < m->n_exact && m->exact_pos[pc->e1] < pc->t1; pc->e1++)
		;
	return SEKV_OK;
}

/* Ranks [n_layer][n_comp][n_head_kv][2] of the pieces in order, and the
 * spans shifted to their places. */
static void pieces_layout(const struct piece *pc, int n_pc, int n_layer, int32_t *ranks,
			  struct sekv_span *span)
{
	int n = 0;

	for (int p = 0; p < n_pc; p++)
		for (int i = pc[p].s0; i < pc[p].s1; i++) {
			span[n] = pc[p].m->span[i];
			span[n++].start += pc[p].at - pc[p].t0;
		}
	for (int l = 0, f = 0; l < n_layer; l++)
		for (int p = 0; p < n_pc; p++) {
			const struct sekv_mem *m = pc[p].m;
			size_t per = (size_t)m->n_head_kv * 2;
			for (size_t j = 0; j < (size_t)pc[p].nc * per; j++)
				ranks[f++] = m->fac[((size_t)l * m->n_comp + pc[p].c0) * per + j].rank;
		}
}

/* The memory made of the pieces (their ranges found), the router and
 * scalars of pc[0]'s memory, the note of the last one's (the newest). */
static int assemble(struct sekv_mem **out, struct piece *pc, int n_pc)
{
	const struct sekv_mem *r = pc[0].m;
	struct sekv_span *span = NULL;
	int32_t *ranks = NULL;
	int n_tok = 0, n_span = 0, n_comp = 0, n_exact = 0, rc;

	for (int p = 0; p < n_pc; p++) {
		const struct sekv_mem *m = pc[p].m;
		if (m->n_layer != r->n_layer || m->n_head != r->n_head || m->n_head_kv != r->n_head_kv ||
		    m->d_h != r->d_h || m->factor_f16 != r->factor_f16 ||
		    (m->lm_len != r->lm_len && (r->rope_base > 0 || m->rope_base > 0)) ||
		    (rc = piece_find(&pc[p])))
			return SEKV_EINVAL;
		pc[p].at = n_tok;
		n_tok += pc[p].t1 - pc[p].t0;
		n_span += pc[p].s1 - pc[p].s0;
		n_comp += pc[p].nc;
		n_exact += pc[p].e1 - pc[p].e0;
	}
	span = malloc(((size_t)n_span + 1) * sizeof *span);
	ranks = malloc(((size_t)r->n_layer * n_comp * r->n_head_kv * 2 + 1) * sizeof *ranks);
	if (!span || !ranks) {
		rc = SEKV_ENOMEM;
		goto out;
	}
	pieces_layout(pc, n_pc, r->n_layer, ranks, span);
	if ((rc = sekv_mem_alloc(out, n_tok, r->n_layer, r->n_head, r->n_head_kv, r->d_h, n_span,
				 span, n_exact, ranks, r->factor_f16, r->lm_len)))
		goto out;
	struct sekv_mem *m = *out;
	m->r_max = r->r_max;
	m->dev_rows = r->dev_rows;
	m->rank_energy = r->rank_energy;
	m->rank_energy_v = r->rank_energy_v;
	m->rope_base = r->rope_base;
	m->n_rot = r->n_rot;
	m->alpha_used = r->alpha_used;
	memcpy(m->note, pc[n_pc - 1].m->note, sizeof m->note);
	memcpy(m->layer_id, r->layer_id, (size_t)r->n_layer * sizeof *m->layer_id);
	memcpy(m->route_w, r->route_w, (size_t)r->n_layer * r->n_head * SEKV_D_ROUTE * r->d_h * sizeof(float));
	memcpy(m->tau, r->tau, (size_t)r->n_layer * r->n_head * sizeof(float));
	for (int p = 0, c = 0, e = 0; p < n_pc; p++) {
		const struct piece *q = &pc[p];
		size_t nt = (size_t)(q->t1 - q->t0);
		memcpy(m->tokens + q->at, q->m->tokens + q->t0, nt * sizeof *m->tokens);
		memcpy(m->surprisal + q->at, q->m->surprisal + q->t0, nt * sizeof *m->surprisal);
		memcpy(m->is_anchor + q->at, q->m->is_anchor + q->t0, nt);
		if ((rc = sekv_mem_copy_comps(m, c, q->m, q->c0, q->nc))) {
			sekv_mem_free(m);
			*out = NULL;
			goto out;
		}
		sekv_mem_copy_exact(m, e, q->m, q->e0, q->e1 - q->e0, q->at - q->t0);
		c += q->nc;
		e += q->e1 - q->e0;
	}
	sekv_mem_update_counts(m);
out:
	free(span);
	free(ranks);
	return rc;
}

int sekv_mem_slice_dup(struct sekv_mem **out, const struct sekv_mem *m, int lo, int hi)
{
	struct piece pc = { .m = m, .t0 = lo, .t1 = hi };

	*out = NULL;
	if (!m)
		return SEKV_EINVAL;
	return assemble(out, &pc, 1);
}

int sekv_mem_join(struct sekv_mem **out, const struct sekv_mem *base, int n_part,
		  const struct sekv_mem *const *part, const int32_t *pos0)
{
	struct piece *pc;
	int rc = SEKV_EINVAL;

	*out = NULL;
	if (!base || n_part < 1 || !part || !pos0)
		return SEKV_EINVAL;
	if (!(pc = calloc((size_t)n_part + 1, sizeof *pc)))
		return SEKV_ENOMEM;
	pc[0] = (struct piece){ .m = base, .t0 = 0, .t1 = pos0[0] };
	for (int i = 0; i < n_part; i++) {
		if (!part[i] || (i > 0 && pos0[i] != pos0[i - 1] + part[i - 1]->n_tok))
			goto out;
		pc[i + 1] = (struct piece){ .m = part[i], .t0 = 0, .t1 = part[i]->n_tok };
	}
	rc = assemble(out, pc, n_part + 1);
out:
	free(pc);
	return rc;
}
