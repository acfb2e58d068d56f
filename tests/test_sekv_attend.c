/* test_sekv_attend.c - SeKV decoding: the key equivalences (everything
 * zoomed at full rank == exact attention; nothing zoomed == exact rows +
 * coarse rows computed here), device row types, appends and slices, edges
 * and malformed input. Segmentation and factors are in test_sekv.c; the
 * budget, routing, question turn and tail eviction in test_sekv_budget.c.
 * Synthetic data only, fixed seeds; references are computed in double
 * (fx_decode_vs_ref, sekv_fixture.c). */
#include "tests/test.h"
#include "tests/sekv_fixture.h"
#include "tests/store_fixtures.h"
#include "engine/base/err.h"
#include "engine/quant/quant.h"

#include <math.h>
#include <string.h>

/* ---- decode equivalences ----------------------------------------------- */

static void check_equiv(struct test_ctx *t, int n_head, int n_head_kv)
{
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	struct sekv_ctx *c = NULL;
	const struct sekv_stats *st;
	char err[256];
	double e;

	T_CHECK(t, fx_doc_make(&d, 400, 3, n_head, n_head_kv, 64, 21) == 0);
	fx_exact_params(&p);     /* fp32 full-rank factors, every span zoomed whole */
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, m->n_comp >= 10, "n_comp %d", m->n_comp);
	T_CHECKF(t, sekv_ctx_new(&c, m, &p, 6, 0.125f, err, sizeof err) == 0, "%s", err);
	e = fx_decode_vs_ref(&d, m, c, 6, 0, 0.125f, 99);
	T_CHECKF(t, e >= 0 && e < 1e-4, "all zoomed vs exact: max diff %g", e);
	st = sekv_ctx_stats(c);
	T_CHECK(t, st->step == 6);
	T_CHECK(t, st->zoom_total == 6LL * 3 * m->n_comp);
	T_CHECK(t, st->n_zoom == 3 * n_head_kv * m->n_comp);
	T_CHECK(t, st->zoom_count[2 * n_head + n_head - 1] == m->n_comp);
	sekv_ctx_free(c);

	/* the same check can fail: truncating to rank 2 moves the output */
	p.r_use = 2;
	T_CHECKF(t, sekv_ctx_new(&c, m, &p, 6, 0.125f, err, sizeof err) == 0, "%s", err);
	e = fx_decode_vs_ref(&d, m, c, 2, 0, 0.125f, 99);
	T_CHECKF(t, e > 1e-3, "rank 2 still matched exact attention (%g)", e);
	sekv_ctx_free(c);

	/* the rank gate keeping all the energy: full-rank factors take more
	 * bytes than the rows, so every factor is stored raw and rebuilds
	 * exactly (r_use does not apply to rows) */
	{
		struct sekv_mem *mr = NULL;
		p.rank_energy = 1.0f;
		p.rank_energy_v = 0;  /* V follows: every factor fp16 rows */
		T_CHECKF(t, fx_doc_build(&mr, &d, &p, err, sizeof err) == 0, "%s", err);
		T_CHECKF(t, mr->n_raw == 3 * mr->n_comp * n_head_kv * 2, "raw %d of %d", mr->n_raw,
			 3 * mr->n_comp * n_head_kv * 2);
		T_CHECK(t, mr->host_bytes == (size_t)(mr->n_tok - mr->n_exact) * 3 * n_head_kv * 64 * 2 * 4);
		T_CHECKF(t, sekv_ctx_new(&c, mr, &p, 6, 0.125f, err, sizeof err) == 0, "%s", err);
		e = fx_decode_vs_ref(&d, mr, c, 6, 0, 0.125f, 99);
		T_CHECKF(t, e >= 0 && e < 1e-4, "raw, all zoomed vs exact: max diff %g", e);
		sekv_ctx_free(c);
		sekv_mem_free(mr);
		p.rank_energy = 0;
	}

	/* nothing zoomed: exact rows + coarse rows with bias log|S| */
	p.r_use = 64;
	p.recon_f32 = 0;
	for (int i = 0; i < 3 * n_head; i++)
		m->tau[i] = 2.0f;   /* decode reads the memory's thresholds */
	T_CHECKF(t, sekv_ctx_new(&c, m, &p, 6, 0.125f, err, sizeof err) == 0, "%s", err);
	e = fx_decode_vs_ref(&d, m, c, 6, 1, 0.125f, 7);
	T_CHECKF(t, e >= 0 && e < 1e-4, "none zoomed vs exact+coarse: max diff %g", e);
	T_CHECK(t, sekv_ctx_stats(c)->zoom_total == 0 && sekv_ctx_stats(c)->recon_bytes == 0);
	/* and it is not plain exact attention */
	sekv_ctx_reset(c);
	e = fx_decode_vs_ref(&d, m, c, 2, 0, 0.125f, 7);
	T_CHECKF(t, e > 1e-3, "coarse rows equal exact attention (%g)", e);
	sekv_ctx_free(c);
	sekv_mem_free(m);
	fx_doc_free(&d);
}

static void equiv_all_zoomed_full_rank_is_exact(struct test_ctx *t)
{
	check_equiv(t, 4, 1);
}

static void equiv_gqa_two_kv_heads(struct test_ctx *t)
{
	check_equiv(t, 4, 2);
}

/* The key and value rows (2 KV heads of 64) fx_decode_vs_ref(seed) fed
 * layer 1 at its step `step` (2 layers, 4 query heads: the query first). */
static void fed_tail_row(unsigned seed, int step, float *kk, float *vv)
{
	fx_rng_seed(seed);
	for (int s2 = 0; s2 <= step; s2++)
		for (int l = 0; l < 2; l++) {
			for (int i = 0; i < 4 * 64; i++)
				(void)fx_rng_n();   /* the step's query */
			for (int i = 0; i < 2 * 64; i++) {
				kk[i] = fx_f16r((float)fx_rng_n());
				vv[i] = fx_f16r((float)fx_rng_n());
			}
		}
}

/* int8 device rows (sekv_params.dev_rows): every row zoomed at full rank
 * stays within int8 rounding of exact attention, also with one key
 * channel 40x the others (the per-channel key scales keep the small
 * channels: with one scale per row they round to a few levels, and the
 * output moved by 0.95 here against 0.09);
 * the device tier takes 0.53x the fp16 bytes; tail rows come back and
 * are evicted as int8. */
static void dev_i8_rows_close_to_exact(struct test_ctx *t)
{
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL, *m16 = NULL;
	struct sekv_ctx *c = NULL;
	char err[256];
	double e, e_out;
	uint16_t k16[2 * 64], v16[2 * 64];

	T_CHECK(t, fx_doc_make(&d, 400, 2, 4, 2, 64, 31) == 0);
	fx_exact_params(&p);
	p.recon_f32 = 0;
	p.dev_rows = 1;
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, m->dev_rows == 1 && sekv_mem_dev_rows(m) && m->n_comp >= 10);
	T_CHECKF(t, sekv_ctx_new(&c, m, &p, 6, 0.125f, err, sizeof err) == 0, "%s", err);
	e = fx_decode_vs_ref(&d, m, c, 6, 0, 0.125f, 99);
	T_CHECKF(t, e >= 0 && e < 0.03, "int8 rows, all zoomed vs exact: max diff %g", e);
	/* the stream's rows are int8: 64 codes + a 4-byte scale per head */
	T_CHECKF(t, sekv_ctx_stats(c)->tail_bytes == 6u * 2 * 2 * 2 * (64 + 4),
		 "tail bytes %zu", sekv_ctx_stats(c)->tail_bytes);
	T_CHECK(t, sekv_ctx_tail_get(c, 1, d.n_tok + 2, 1, k16, v16) == 0);
	T_CHECK(t, sekv_ctx_evict_tail(c, d.n_tok + 4) == 0 && sekv_ctx_tail_rows(c) == 2);
	T_CHECKF(t, sekv_ctx_stats(c)->tail_bytes == 2u * 2 * 2 * 2 * (64 + 4),
		 "tail bytes after eviction %zu", sekv_ctx_stats(c)->tail_bytes);
	{
		/* the evicted stream's rows moved with their scales: row 4 of
		 * layer 1 reads back as the 5th token fx_decode_vs_ref fed it */
		uint16_t k4[2 * 64], v4[2 * 64];
		float kk[2 * 64], vv[2 * 64], worst = 0;
		fed_tail_row(99, 4, kk, vv);
		T_CHECK(t, sekv_ctx_tail_get(c, 1, d.n_tok + 4, 1, k4, v4) == 0);
		for (int i = 0; i < 2 * 64; i++) {
			worst = fmaxf(worst, fabsf(quant_f16_to_f32(k4[i]) - kk[i]));
			worst = fmaxf(worst, fabsf(quant_f16_to_f32(v4[i]) - vv[i]));
		}
		T_CHECKF(t, worst > 0 && worst < 0.05f, "tail row back from int8: max diff %g", worst);
	}
	sekv_ctx_free(c);
	c = NULL;
	/* static bytes against the same memory with fp16 rows */
	p.dev_rows = 0;
	T_CHECKF(t, fx_doc_build(&m16, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, m16->n_exact == m->n_exact && m16->n_comp == m->n_comp);
	{
		struct sekv_tier_parts a8, a16;
		sekv_mem_tier_parts(m, p.n_sink, &a8);
		sekv_mem_tier_parts(m16, p.n_sink, &a16);
		T_CHECK(t, a8.landmark == a16.landmark);
		T_CHECKF(t, (m->static_bytes - a8.landmark) * 64 == (m16->static_bytes - a16.landmark) * 34,
			 "static %zu vs fp16 %zu", m->static_bytes, m16->static_bytes);
	}
	sekv_mem_free(m16);
	sekv_mem_free(m);
	m = NULL;

	/* one outlier channel per KV head */
	for (int l = 0; l < d.n_layer; l++)
		for (int i = 0; i < d.n_tok * d.n_head_kv; i++)
			d.k[l][(size_t)i * 64 + 5] = quant_f32_to_f16(40.0f *
				quant_f16_to_f32(d.k[l][(size_t)i * 64 + 5]));
	p.dev_rows = 1;
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, sekv_ctx_new(&c, m, &p, 6, 0.125f, err, sizeof err) == 0, "%s", err);
	e_out = fx_decode_vs_ref(&d, m, c, 6, 0, 0.125f, 98);
	/* the attention is peaked by the outlier (one scale per row: 0.95) */
	T_CHECKF(t, e_out >= 0 && e_out < 0.15, "outlier channel, int8 rows vs exact: max diff %g",
		 e_out);
	sekv_ctx_free(c);
	sekv_mem_free(m);
	fx_doc_free(&d);
}

/* int8 keys with int4 values (SEKV_DEV_K8V4): every row zoomed at full
 * rank stays within int4 rounding of exact attention (rebuilt rows
 * included); a row takes (64 + 4) + (32 + 2 * 4) bytes per head, the tail's
 * too; tail rows come back within half an int4 step and are evicted with
 * their scales; static bytes 108/256 of fp16's, landmarks apart. */
static void dev_k8v4_rows_close_to_exact(struct test_ctx *t)
{
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL, *m16 = NULL;
	struct sekv_ctx *c = NULL;
	char err[256];
	uint16_t k16[2 * 64], v16[2 * 64];

	T_CHECK(t, fx_doc_make(&d, 400, 2, 4, 2, 64, 31) == 0);
	fx_exact_params(&p);
	p.recon_f32 = 0;
	p.dev_rows = SEKV_DEV_K8V4;
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, sekv_mem_dev_rows(m) == SEKV_DEV_K8V4 && m->n_comp >= 10);
	T_CHECKF(t, sekv_ctx_new(&c, m, &p, 6, 0.125f, err, sizeof err) == 0, "%s", err);
	double e = fx_decode_vs_ref(&d, m, c, 6, 0, 0.125f, 99);
	T_CHECKF(t, e >= 0 && e < 0.1, "k8v4 rows, all zoomed vs exact: max diff %g", e);
	T_CHECKF(t, sekv_ctx_stats(c)->tail_bytes == 6u * 2 * 2 * (64 + 4 + 32 + 8),
		 "tail bytes %zu", sekv_ctx_stats(c)->tail_bytes);
	T_CHECK(t, sekv_ctx_evict_tail(c, d.n_tok + 4) == 0 && sekv_ctx_tail_rows(c) == 2);
	{
		/* row 4 of layer 1, moved by the eviction, reads back as fed */
		float kk[2 * 64], vv[2 * 64], wk = 0, wv = 0, vmax = 0;
		fed_tail_row(99, 4, kk, vv);
		T_CHECK(t, sekv_ctx_tail_get(c, 1, d.n_tok + 4, 1, k16, v16) == 0);
		for (int i = 0; i < 2 * 64; i++) {
			wk = fmaxf(wk, fabsf(quant_f16_to_f32(k16[i]) - kk[i]));
			wv = fmaxf(wv, fabsf(quant_f16_to_f32(v16[i]) - vv[i]));
			vmax = fmaxf(vmax, fabsf(vv[i]));
		}
		T_CHECKF(t, wk > 0 && wk < 0.05f && wv > 0 && wv <= 0.5f * vmax / 7 + 0.01f,
			 "tail row back: keys %g, values %g (step %g)", wk, wv, vmax / 7);
	}
	sekv_ctx_free(c);
	p.dev_rows = SEKV_DEV_F16;
	T_CHECKF(t, fx_doc_build(&m16, &d, &p, err, sizeof err) == 0, "%s", err);
	{
		struct sekv_tier_parts a4, a16;
		sekv_mem_tier_parts(m, p.n_sink, &a4);
		sekv_mem_tier_parts(m16, p.n_sink, &a16);
		T_CHECKF(t, m16->n_exact == m->n_exact && m16->n_comp == m->n_comp &&
			 (m->static_bytes - a4.landmark) * 256 == (m16->static_bytes - a16.landmark) * 108,
			 "static %zu vs fp16 %zu", m->static_bytes, m16->static_bytes);
	}
	sekv_mem_free(m16);
	sekv_mem_free(m);
	fx_doc_free(&d);
}

/* ---- edges and malformed input ----------------------------------------- */

static void edge_short_doc_and_zero_surprisal(struct test_ctx *t)
{
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	struct sekv_ctx *c = NULL;
	char err[256];
	double e;

	/* shorter than sinks + recent: every row exact */
	T_CHECK(t, fx_doc_make(&d, 50, 3, 4, 1, 32, 2) == 0);
	fx_default_params(&p);
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, m->n_span == 0 && m->n_comp == 0 && m->n_exact == 50);
	T_CHECK(t, m->host_bytes == 0 && m->exact_pos[49] == 49);
	T_CHECKF(t, sekv_ctx_new(&c, m, &p, 4, 0.2f, err, sizeof err) == 0, "%s", err);
	e = fx_decode_vs_ref(&d, m, c, 4, 0, 0.2f, 5);
	T_CHECKF(t, e >= 0 && e < 1e-4, "max diff %g", e);
	sekv_ctx_free(c);
	sekv_mem_free(m);

	/* zero surprisal: one span, uniform summary weights */
	for (int i = 0; i < 50; i++)
		d.h[i] = 0;
	p.n_sink = 2;
	p.n_recent = 4;
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, m->n_comp == 1 && m->span[0].start == 2 && m->span[0].len == 44);
	for (int j = 0; j < 32; j++) {
		double s = 0;
		for (int i = 2; i < 46; i++)
			s += quant_f16_to_f32(d.k[1][i * 32 + j]);
		T_CHECKF(t, fabs(s / 44 - quant_f16_to_f32(m->k_bar[32 + j])) < 1e-3 * (1 + fabs(s / 44)),
			 "k_bar[%d]", j);
	}
	p.budget = 0;
	for (int i = 0; i < 3 * 4; i++)
		m->tau[i] = 2.0f;
	T_CHECKF(t, sekv_ctx_new(&c, m, &p, 4, 0.2f, err, sizeof err) == 0, "%s", err);
	e = fx_decode_vs_ref(&d, m, c, 3, 1, 0.2f, 6);
	T_CHECKF(t, e >= 0 && e < 1e-4, "max diff %g", e);
	sekv_ctx_free(c);
	sekv_mem_free(m);

	/* spans of exactly l_min are compressed, with rank l_min */
	for (int i = 0; i < 50; i++)
		d.h[i] = i ? (i % 2 ? 0.9f : 1.1f) : 0.0f;
	for (int i = 10; i < 46; i += 5)
		d.h[i] = 300.0f * i;
	p.l_min = 4;
	p.rank_energy = 0;  /* no rank gate: every span keeps full rank */
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, m->n_comp >= 6, "n_comp %d", m->n_comp);
	for (int i = 0; i < m->n_comp; i++) {
		const struct sekv_span *sp = &m->span[m->comp_span[i]];
		T_CHECK(t, sp->len >= 4 && !sp->full);
		if (sp->start > 10)
			T_CHECKF(t, sp->len == 4 && m->fac[i * 2].rank == 4, "span %d len %d", i, sp->len);
	}
	sekv_mem_free(m);
	fx_doc_free(&d);
}

/* Keys factored before RoPE (the rotation undone at build, redone on every
 * rebuilt row): at full rank with every span zoomed, decode equals exact
 * attention; the same memory decoded without the rotation does not. */
static void pre_rope_keys_all_zoomed_is_exact(struct test_ctx *t)
{
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	struct sekv_ctx *c = NULL;
	char err[256];
	double e;

	T_CHECK(t, fx_doc_make(&d, 400, 2, 4, 1, 64, 23) == 0);
	fx_exact_params(&p);
	p.key_pre_rope = 1;
	p.rope_base = 10000.0f;
	p.n_rot = 60;
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, m->rope_base == 10000.0f && m->n_rot == 60 && m->n_comp >= 10);
	/* the K factors are not of the stored keys any more */
	T_CHECKF(t, fx_factors_vs_rows(m, &d) > 1e-2, "pre-RoPE factors match post-RoPE rows (%g)",
		 fx_factors_vs_rows(m, &d));
	T_CHECKF(t, sekv_ctx_new(&c, m, &p, 6, 0.125f, err, sizeof err) == 0, "%s", err);
	e = fx_decode_vs_ref(&d, m, c, 6, 0, 0.125f, 99);
	/* the keys rotated back are rounded to fp16 once before their SVD */
	T_CHECKF(t, e >= 0 && e < 2e-3, "pre-RoPE, all zoomed vs exact: max diff %g", e);
	sekv_ctx_free(c);
	/* without the rotation at rebuild the output moves */
	m->rope_base = 0;
	T_CHECKF(t, sekv_ctx_new(&c, m, &p, 6, 0.125f, err, sizeof err) == 0, "%s", err);
	e = fx_decode_vs_ref(&d, m, c, 2, 0, 0.125f, 99);
	T_CHECKF(t, e > 2e-2, "unrotated pre-RoPE keys matched exact attention (%g)", e);
	sekv_ctx_free(c);
	sekv_mem_free(m);
	/* a RoPE that is not one is refused */
	p.n_rot = 65;
	T_CHECK(t, fx_doc_build(&m, &d, &p, err, sizeof err) == SEKV_EINVAL && m == NULL);
	T_CHECK(t, strstr(err, "pre-RoPE") != NULL);
	fx_doc_free(&d);
}

/* A memory grown by sekv_mem_append (a document read in two parts) keeps
 * the first part's spans and factors bit for bit, has the anchors of a
 * memory built at once (running statistics), compresses the appended
 * text, and at full rank with every span zoomed decodes as exact
 * attention over all the tokens. */
static void append_keeps_old_and_is_exact_at_full_rank(struct test_ctx *t)
{
	struct fx_doc d, d1;
	struct sekv_params p;
	const uint16_t *k2[2], *v2[2];
	char err[256];
	int n1 = 300, n = 500;

	T_CHECK(t, fx_doc_make(&d, n, 2, 4, 1, 64, 31) == 0);
	fx_exact_params(&p);
	p.rope_base = 10000.0f;
	p.n_rot = 64;
	d1 = d;
	d1.n_tok = n1;
	for (int l = 0; l < 2; l++) {
		k2[l] = d.k[l] + (size_t)n1 * 64;
		v2[l] = d.v[l] + (size_t)n1 * 64;
	}
	/* keys factored as stored, then before RoPE */
	for (int pre = 0; pre < 2; pre++) {
		struct sekv_mem *m1 = NULL, *m2 = NULL, *mall = NULL, *bad = NULL;
		struct sekv_ctx *c = NULL;
		double e;
		int same = 1;
		p.key_pre_rope = pre;
		T_CHECKF(t, fx_doc_build(&m1, &d1, &p, err, sizeof err) == 0, "%s", err);
		T_CHECKF(t, fx_doc_build(&mall, &d, &p, err, sizeof err) == 0, "%s", err);
		T_CHECKF(t, sekv_mem_append(&m2, m1, &p, n - n1, NULL, d.h + n1, k2, v2, err,
					    sizeof err) == 0, "%s", err);
		T_CHECK(t, m2->n_tok == n && m2->n_comp > m1->n_comp + 3);
		T_CHECK(t, m2->rope_base == m1->rope_base && m2->n_rot == m1->n_rot);
		T_CHECK(t, !memcmp(m2->span, m1->span, (size_t)m1->n_span * sizeof *m1->span));
		T_CHECK(t, !memcmp(m2->is_anchor, mall->is_anchor, (size_t)n));
		for (int l = 0; l < 2; l++)
			for (int f = 0; f < m1->n_comp * 2; f++) {
				const struct sekv_factor *a = &m1->fac[l * m1->n_comp * 2 + f];
				const struct sekv_factor *b = &m2->fac[l * m2->n_comp * 2 + f];
				int len = m1->span[m1->comp_span[f / 2]].len;
				same &= a->rank == b->rank && !memcmp(a->s, b->s, (size_t)a->rank * 4) &&
					!memcmp(a->u, b->u, (size_t)a->rank * (size_t)(len + 64) * 4);
			}
		T_CHECK(t, same);
		T_CHECKF(t, sekv_ctx_new(&c, m2, &p, 6, 0.125f, err, sizeof err) == 0, "%s", err);
		e = fx_decode_vs_ref(&d, m2, c, 6, 0, 0.125f, 99);
		/* pre-RoPE keys are rounded to fp16 once before their SVD */
		T_CHECKF(t, e >= 0 && e < (pre ? 2e-3 : 1e-4),
			 "appended (keys %s RoPE), all zoomed vs exact: max diff %g",
			 pre ? "before" : "after", e);
		sekv_ctx_free(c);
		/* non-finite appended surprisal is refused */
		T_CHECK(t, sekv_mem_append(&bad, m2, &p, 1, NULL, (const float[]){ NAN }, k2, v2,
					   err, sizeof err) == SEKV_EINVAL && bad == NULL);
		sekv_mem_free(m1);
		sekv_mem_free(m2);
		sekv_mem_free(mall);
	}
	fx_doc_free(&d);
}

/* A memory grown turn by turn is persisted as slices (what each append
 * made final, then the open end): the base memory joined with them is the
 * grown memory bit for bit; a slice may not cut a span. */
static void slices_join_back_bit_for_bit(struct test_ctx *t)
{
	struct fx_doc d, d1;
	struct sekv_params p;
	struct sekv_mem *m[4] = { 0 }, *part[4] = { 0 }, *back = NULL, *bad = NULL;
	int32_t pos0[4];
	int cut[4] = { 300, 360, 440, 500 }, n_part = 0;
	char err[256], why[128];

	T_CHECK(t, fx_doc_make(&d, 500, 2, 4, 1, 64, 37) == 0);
	fx_default_params(&p);
	p.budget = 0; /* no cap: alpha stays */
	d1 = d;
	d1.n_tok = cut[0];
	T_CHECKF(t, fx_doc_build(&m[0], &d1, &p, err, sizeof err) == 0, "%s", err);
	for (int i = 1; i < 4; i++) {
		const uint16_t *k[2], *v[2];
		for (int l = 0; l < 2; l++) {
			k[l] = d.k[l] + (size_t)cut[i - 1] * 64;
			v[l] = d.v[l] + (size_t)cut[i - 1] * 64;
		}
		T_CHECKF(t, sekv_mem_append(&m[i], m[i - 1], &p, cut[i] - cut[i - 1], NULL,
					    d.h + cut[i - 1], k, v, err, sizeof err) == 0, "%s", err);
		int lo = sekv_mem_frontier(m[i - 1], p.n_sink), hi = sekv_mem_frontier(m[i], p.n_sink);
		T_CHECK(t, hi >= lo);
		if (hi == lo)
			continue;
		pos0[n_part] = lo;
		T_CHECK(t, sekv_mem_slice_dup(&part[n_part++], m[i], lo, hi) == 0);
	}
	T_CHECK(t, n_part >= 2 && m[3]->n_comp > m[0]->n_comp);
	pos0[n_part] = sekv_mem_frontier(m[3], p.n_sink);
	T_CHECK(t, sekv_mem_slice_dup(&part[n_part], m[3], pos0[n_part], m[3]->n_tok) == 0);
	n_part++;
	T_CHECKF(t, part[n_part - 1]->n_span == 0 && part[n_part - 1]->n_exact > 0, "open end: %d spans, %d exact, %d tok", part[n_part - 1]->n_span, part[n_part - 1]->n_exact, part[n_part - 1]->n_tok);
	T_CHECK(t, sekv_mem_join(&back, m[0], n_part, (const struct sekv_mem *const *)part, pos0) == 0);
	T_CHECKF(t, fixture_mem_cmp(back, m[3], why, sizeof why) == 0, "join vs grown: %s", why);
	/* ranges that do not follow each other, a cut through a span */
	pos0[1]++;
	T_CHECK(t, sekv_mem_join(&bad, m[0], n_part, (const struct sekv_mem *const *)part, pos0) ==
		   SEKV_EINVAL && !bad);
	const struct sekv_span *sp = &m[3]->span[m[3]->comp_span[0]];
	T_CHECK(t, sekv_mem_slice_dup(&bad, m[3], sp->start + 1, m[3]->n_tok) == SEKV_EINVAL && !bad);
	T_CHECK(t, sekv_mem_slice_dup(&bad, m[3], 0, sp->start + 1) == SEKV_EINVAL && !bad);
	sekv_mem_free(back);
	for (int i = 0; i < 4; i++) {
		sekv_mem_free(m[i]);
		sekv_mem_free(part[i]);
	}
	fx_doc_free(&d);
}

static void malformed_inputs_refused(struct test_ctx *t)
{
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	struct sekv_ctx *c = NULL;
	char err[256] = "";
	float q[4 * 32] = {0}, kv[32] = {0}, out[4 * 32];
	uint16_t keep;

	T_CHECK(t, fx_doc_make(&d, 300, 3, 4, 1, 32, 8) == 0);
	fx_default_params(&p);
	T_CHECK(t, sekv_build(&m, &p, 300, NULL, d.h, 3, d.layer_id, 3, 2, 32,
			      (const uint16_t *const *)d.k, (const uint16_t *const *)d.v,
			      err, sizeof err) == SEKV_EINVAL && m == NULL);
	T_CHECK(t, strstr(err, "sekv_build: shape") != NULL);
	d.h[17] = INFINITY;
	T_CHECK(t, fx_doc_build(&m, &d, &p, err, sizeof err) == SEKV_EINVAL);
	T_CHECKF(t, strstr(err, "position 17") != NULL, "%s", err);
	d.h[17] = 1;
	keep = d.v[2][100];
	d.v[2][100] = 0x7e00;   /* NaN */
	T_CHECK(t, fx_doc_build(&m, &d, &p, err, sizeof err) == SEKV_EINVAL);
	T_CHECKF(t, strstr(err, "layer 2 position 3") != NULL, "%s", err);
	d.v[2][100] = keep;
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, sekv_ctx_new(&c, m, &p, 0, 0.2f, err, sizeof err) == SEKV_EINVAL);
	T_CHECK(t, c == NULL && strstr(err, "tail_cap"));
	T_CHECK(t, sekv_ctx_new(&c, m, &p, 2, 0.2f, err, sizeof err) == 0);
	T_CHECK(t, sekv_attend(c, 4, 300, q, kv, kv, out) == SEKV_EINVAL);   /* not global */
	T_CHECK(t, sekv_attend(c, 5, 299, q, kv, kv, out) == SEKV_EINVAL);   /* inside doc */
	T_CHECK(t, sekv_attend(c, 5, 301, q, kv, kv, out) == SEKV_EINVAL);   /* skips a row */
	T_CHECK(t, sekv_attend(c, 5, 300, q, kv, kv, out) == 0);
	T_CHECK(t, sekv_attend(c, 5, 301, q, kv, kv, out) == 0);
	T_CHECK(t, sekv_attend(c, 5, 302, q, kv, kv, out) == SEKV_EINVAL);   /* past tail_cap */
	T_CHECK(t, sekv_ctx_stats(c)->step == 2 && sekv_ctx_stats(c)->tail_bytes == 2u * 32 * 2 * 2);
	sekv_ctx_reset(c);
	T_CHECK(t, sekv_ctx_stats(c)->step == 0 && sekv_ctx_stats(c)->tail_bytes == 0);
	sekv_ctx_free(c);
	sekv_ctx_free(NULL);
	sekv_mem_free(m);
	fx_doc_free(&d);
}


/* fp16 factors (the default): host_bytes about halves (s stays fp32),
 * spans rebuild with the error of fp16 rounding (not exactly: the check can
 * fail), and decoding with everything zoomed stays close to exact. */
static void factor_f16_halves_host_bytes(struct test_ctx *t)
{
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m32 = NULL, *m16 = NULL;
	struct sekv_ctx *c = NULL;
	char err[256];
	double ratio, e32, e16;

	T_CHECK(t, fx_doc_make(&d, 400, 3, 4, 1, 64, 21) == 0);
	fx_default_params(&p);
	T_CHECK(t, p.factor_f16 == 1);
	p.budget = 0;
	p.r_max = 64;
	p.rank_energy = 0;  /* no rank gate: full-rank factors */
	p.r_use = 64;
	p.recon_f32 = 1;
	p.tau = -1.0f;
	p.n_recent = 16;
	T_CHECKF(t, fx_doc_build(&m16, &d, &p, err, sizeof err) == 0, "%s", err);
	p.factor_f16 = 0;
	T_CHECKF(t, fx_doc_build(&m32, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, m16->factor_f16 == 1 && m32->factor_f16 == 0 && m16->n_comp == m32->n_comp);
	ratio = (double)m16->host_bytes / (double)m32->host_bytes;
	T_CHECKF(t, ratio > 0.5 && ratio < 0.52, "host bytes fp16/fp32 = %g", ratio);
	T_CHECK(t, m16->static_bytes == m32->static_bytes);
	e32 = fx_factors_vs_rows(m32, &d);
	e16 = fx_factors_vs_rows(m16, &d);
	T_CHECKF(t, e16 < 3e-3 && e16 > 1e-5 && e16 > 10 * e32, "rebuild error fp16 %g fp32 %g",
		 e16, e32);
	T_CHECKF(t, sekv_ctx_new(&c, m16, &p, 6, 0.125f, err, sizeof err) == 0, "%s", err);
	e16 = fx_decode_vs_ref(&d, m16, c, 6, 0, 0.125f, 99);
	sekv_ctx_free(c);
	p.r_use = 8;   /* r_use < rank reads a strided slice of the fp16 v */
	T_CHECKF(t, sekv_ctx_new(&c, m16, &p, 2, 0.125f, err, sizeof err) == 0, "%s", err);
	e32 = fx_decode_vs_ref(&d, m16, c, 2, 0, 0.125f, 99);
	sekv_ctx_free(c);
	T_CHECKF(t, e16 >= 0 && e16 < 2e-3, "fp16 factors all zoomed vs exact: max diff %g", e16);
	T_CHECKF(t, e32 > 1e-2, "rank 8 of fp16 factors matched exact attention (%g)", e32);
	p.factor_f16 = 2;
	sekv_mem_free(m16);
	T_CHECK(t, fx_doc_build(&m16, &d, &p, err, sizeof err) == SEKV_EINVAL && m16 == NULL);
	sekv_mem_free(m32);
	fx_doc_free(&d);
}

const struct test_case test_sekv_attend[] = {
	{ "sekv_factor_f16_halves_host_bytes", factor_f16_halves_host_bytes },
	{ "sekv_equiv_all_zoomed_full_rank_is_exact", equiv_all_zoomed_full_rank_is_exact },
	{ "sekv_equiv_gqa_two_kv_heads", equiv_gqa_two_kv_heads },
	{ "sekv_dev_i8_rows_close_to_exact", dev_i8_rows_close_to_exact },
	{ "sekv_dev_k8v4_rows_close_to_exact", dev_k8v4_rows_close_to_exact },
	{ "sekv_edge_short_doc_and_zero_surprisal", edge_short_doc_and_zero_surprisal },
	{ "sekv_malformed_inputs_refused", malformed_inputs_refused },
	{ "sekv_pre_rope_keys_all_zoomed_is_exact", pre_rope_keys_all_zoomed_is_exact },
	{ "sekv_append_keeps_old_and_is_exact_at_full_rank", append_keeps_old_and_is_exact_at_full_rank },
	{ "sekv_slices_join_back_bit_for_bit", slices_join_back_bit_for_bit },
	{ NULL, NULL },
};
