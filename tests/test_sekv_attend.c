/* test_sekv_attend.c - SeKV decoding: the key equivalences (everything
 * zoomed at full rank == exact attention; nothing zoomed == exact rows +
 * coarse rows computed here), tail eviction, the budget policy, edges and
 * malformed input. Segmentation and factors are in test_sekv.c.
 * Synthetic data only, fixed seeds; references are computed in double. */
#include "tests/test.h"
#include "tests/sekv_fixture.h"
#include "tests/store_fixtures.h"
#include "engine/base/err.h"
#include "engine/quant/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- decode equivalences ----------------------------------------------- */

/* Decodes n_step tokens through ctx over every global layer and compares
 * with reference attention over rows chosen by `mode`: 0 = all document
 * rows, 1 = exact rows + coarse rows built here, 2 = as 1 but the spans
 * this step zoomed (sekv_ctx_stats) at their exact rows (full-rank fp32
 * factors rebuild them exactly). Returns the max abs diff (or a negative
 * value on a call failure). */
/* Tail eviction in decode_vs_ref: at step g_evict_step (when >= 0) the tail
 * rows of steps before g_evict_to are evicted first. */
static int g_evict_step = -1, g_evict_to;

/* Span index (mem->span) sp zoomed for KV head kv of global layer l this step. */
/* The zoom of span (layer l, KV head kv) at this step, or NULL. */
static const struct sekv_zoom *step_zoom(const struct sekv_ctx *c, int l, int span, int kv,
					 int group)
{
	const struct sekv_stats *st = sekv_ctx_stats(c);

	for (int z = 0; z < st->n_zoom; z++)
		if (st->zoom[z].layer == l && st->zoom[z].span == span && st->zoom[z].head / group == kv)
			return &st->zoom[z];
	return NULL;
}

static double decode_vs_ref(const struct fx_doc *d, const struct sekv_mem *m,
			    struct sekv_ctx *c, int n_step, int mode, float q_scale,
			    uint64_t seed)
{
	int dh = d->d_h, nh = d->n_head, nkv = d->n_head_kv, g = nh / nkv;
	int cap = d->n_tok + n_step + m->n_comp;
	float *q = malloc((size_t)nh * dh * 4), *k = malloc((size_t)nkv * dh * 4);
	float *v = malloc((size_t)nkv * dh * 4), *out = malloc((size_t)nh * dh * 4);
	float *ref = malloc((size_t)dh * 4);
	float *tk = calloc((size_t)d->n_layer * n_step * nkv * dh, 4);
	float *tv = calloc((size_t)d->n_layer * n_step * nkv * dh, 4);
	struct fx_ref_rows r = { 0, malloc((size_t)cap * dh * 4), malloc((size_t)cap * dh * 4),
			      malloc((size_t)cap * 4) };
	double worst = 0;

	fx_rng_seed(seed);
	for (int s = 0; s < n_step && worst >= 0; s++)
		for (int l = 0; l < d->n_layer && worst >= 0; l++) {
			for (int i = 0; i < nh * dh; i++)
				q[i] = (float)(2 * fx_rng_n());
			for (int i = 0; i < nkv * dh; i++) {
				k[i] = tk[(((size_t)l * n_step + s) * nkv) * dh + i] = fx_f16r((float)fx_rng_n());
				v[i] = tv[(((size_t)l * n_step + s) * nkv) * dh + i] = fx_f16r((float)fx_rng_n());
			}
			if (l == 0 && s == g_evict_step &&
			    sekv_ctx_evict_tail(c, d->n_tok + g_evict_to)) {
				worst = -1;
				break;
			}
			if (sekv_attend(c, d->layer_id[l], d->n_tok + s, q, k, v, out)) {
				worst = -1;
				break;
			}
			for (int h = 0; h < nh; h++) {
				int kv = h / g;
				float kr[512], vr[512];
				r.n = 0;
				for (int p = 0; p < d->n_tok; p++) {
					int comp = -1;
					for (int i = 0; mode >= 1 && i < m->n_comp; i++) {
						const struct sekv_span *sp = &m->span[m->comp_span[i]];
						const struct sekv_zoom *z = mode == 2 ?
							step_zoom(c, l, m->comp_span[i], kv, g) : NULL;
						/* exact: a zoomed window's rows */
						if (p >= sp->start && p < sp->start + sp->len &&
						    !(z && p >= sp->start + z->r0 && p < sp->start + z->r0 + z->n))
							comp = i;
					}
					if (comp >= 0)
						continue;
					for (int j = 0; j < dh; j++) {
						kr[j] = quant_f16_to_f32(d->k[l][((size_t)p * nkv + kv) * dh + j]);
						vr[j] = quant_f16_to_f32(d->v[l][((size_t)p * nkv + kv) * dh + j]);
					}
					fx_ref_add(&r, kr, vr, 0, dh);
				}
				for (int i = 0; mode >= 1 && i < m->n_comp; i++) {
					const struct sekv_span *sp = &m->span[m->comp_span[i]];
					double sum = 0, kb[512] = {0}, vb[512] = {0};
					const struct sekv_zoom *z = mode == 2 ?
						step_zoom(c, l, m->comp_span[i], kv, g) : NULL;
					int rest = sp->len - (z ? z->n : 0);
					if (rest == 0)
						continue;   /* zoomed whole: no coarse row */
					for (int p = sp->start; p < sp->start + sp->len; p++)
						sum += d->h[p] > 0 ? d->h[p] : 0;
					for (int p = sp->start; p < sp->start + sp->len; p++) {
						double w = sum > 0 ? (d->h[p] > 0 ? d->h[p] : 0) / sum : 1.0 / sp->len;
						for (int j = 0; j < dh; j++) {
							kb[j] += w * quant_f16_to_f32(d->k[l][((size_t)p * nkv + kv) * dh + j]);
							vb[j] += w * quant_f16_to_f32(d->v[l][((size_t)p * nkv + kv) * dh + j]);
						}
					}
					/* the device tier keeps summaries in fp16 */
					for (int j = 0; j < dh; j++) {
						kr[j] = fx_f16r((float)kb[j]);
						vr[j] = fx_f16r((float)vb[j]);
					}
					/* a window zoomed: the coarse row stands for the rest */
					fx_ref_add(&r, kr, vr, logf((float)rest), dh);
				}
				for (int s2 = g_evict_step >= 0 && s >= g_evict_step ? g_evict_to : 0; s2 <= s; s2++)
					fx_ref_add(&r, tk + (((size_t)l * n_step + s2) * nkv + kv) * dh,
						tv + (((size_t)l * n_step + s2) * nkv + kv) * dh, 0, dh);
				fx_ref_attend(&r, q + (size_t)h * dh, dh, q_scale, ref);
				for (int j = 0; j < dh; j++) {
					double e = fabs(ref[j] - out[(size_t)h * dh + j]);
					worst = e > worst ? e : worst;
				}
			}
		}
	free(q); free(k); free(v); free(out); free(ref); free(tk); free(tv);
	free(r.k); free(r.v); free(r.bias);
	return worst;
}

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
	e = decode_vs_ref(&d, m, c, 6, 0, 0.125f, 99);
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
	e = decode_vs_ref(&d, m, c, 2, 0, 0.125f, 99);
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
		e = decode_vs_ref(&d, mr, c, 6, 0, 0.125f, 99);
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
	e = decode_vs_ref(&d, m, c, 6, 1, 0.125f, 7);
	T_CHECKF(t, e >= 0 && e < 1e-4, "none zoomed vs exact+coarse: max diff %g", e);
	T_CHECK(t, sekv_ctx_stats(c)->zoom_total == 0 && sekv_ctx_stats(c)->recon_bytes == 0);
	/* and it is not plain exact attention */
	sekv_ctx_reset(c);
	e = decode_vs_ref(&d, m, c, 2, 0, 0.125f, 7);
	T_CHECKF(t, e > 1e-3, "coarse rows equal exact attention (%g)", e);
	sekv_ctx_free(c);
	sekv_mem_free(m);
	fx_doc_free(&d);
}

static void equiv_all_zoomed_full_rank_is_exact(struct test_ctx *t)
{
	check_equiv(t, 4, 1);
}

/* An exact question turn (sekv_params.question_exact): under a small
 * budget the turn's tokens attend exactly over every document row (full-
 * rank fp32 factors rebuild the spans exactly), the rebuilt rows are
 * counted as host-tier scratch and the device tier stays within the
 * budget; once the turn ends the answer zooms under the budget again (a
 * few spans, not all), and with question_exact 0 the turn zooms as the
 * answer does (not exact). */
static void question_turn_exact_within_budget(struct test_ctx *t)
{
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	struct sekv_ctx *c = NULL;
	const struct sekv_stats *st;
	char err[256];

	T_CHECK(t, fx_doc_make(&d, 1200, 2, 4, 1, 64, 41) == 0);
	fx_exact_params(&p);
	p.n_recent = 32;
	p.budget = 0.3;
	p.static_share = 0.5;
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, m && m->n_comp > 4, "%d compressed spans", m ? m->n_comp : -1);
	for (int exact = 1; m && exact >= 0; exact--) {
		p.question_exact = exact;
		T_CHECKF(t, sekv_ctx_new(&c, m, &p, 16, 0.125f, err, sizeof err) == 0, "%s", err);
		st = sekv_ctx_stats(c);
		sekv_ctx_question(c, 1);
		double e = decode_vs_ref(&d, m, c, 4, 0, 0.125f, 9);
		if (exact) {
			T_CHECKF(t, e >= 0 && e < 1e-4, "question turn vs exact attention: %g", e);
			T_CHECKF(t, st->question_host_bytes > 0 && st->recon_bytes == 0 &&
				 st->peak_resident_bytes <= st->budget_bytes,
				 "host %zu, rebuilt on the device %zu, peak %zu of %zu",
				 st->question_host_bytes, st->recon_bytes, st->peak_resident_bytes,
				 st->budget_bytes);
		} else {
			T_CHECKF(t, e > 1e-3, "question turn zoomed under the budget matched exact "
				 "attention (%g)", e);
			T_CHECK(t, st->question_host_bytes == 0);
		}
		sekv_ctx_question(c, 0);
		/* the answer: under the budget, exact no longer */
		double ea = decode_vs_ref(&d, m, c, 2, 0, 0.125f, 10);
		T_CHECKF(t, ea > 1e-3 && st->peak_resident_bytes <= st->budget_bytes &&
			 st->recon_bytes > 0, "answer: diff %g, peak %zu of %zu, rebuilt %zu", ea,
			 st->peak_resident_bytes, st->budget_bytes, st->recon_bytes);
		sekv_ctx_free(c);
		c = NULL;
	}
	sekv_mem_free(m);
	fx_doc_free(&d);
}

/* Evicting the oldest tail rows: later steps attend exactly as if those
 * tokens had never been there, and the held rows and bytes shrink. */
static void evict_tail_forgets_oldest_rows(struct test_ctx *t)
{
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	struct sekv_ctx *c = NULL;
	char err[256];

	T_CHECK(t, fx_doc_make(&d, 300, 2, 4, 1, 64, 5) == 0);
	fx_exact_params(&p);
	p.n_recent = 64;
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, sekv_ctx_new(&c, m, &p, 8, 0.125f, err, sizeof err) == 0, "%s", err);
	g_evict_step = 5;
	g_evict_to = 3;
	double e = decode_vs_ref(&d, m, c, 8, 0, 0.125f, 3);
	g_evict_step = -1;
	int rows = sekv_ctx_tail_rows(c);
	int bad_back = sekv_ctx_evict_tail(c, d.n_tok + 2);   /* before the held rows */
	int bad_fwd = sekv_ctx_evict_tail(c, d.n_tok + 9);    /* past the last row */
	int ok_all = sekv_ctx_evict_tail(c, d.n_tok + 8);
	int rows0 = sekv_ctx_tail_rows(c);
	sekv_ctx_free(c);
	sekv_mem_free(m);
	fx_doc_free(&d);
	T_CHECKF(t, e >= 0 && e < 1e-4, "after eviction vs exact: max diff %g", e);
	T_CHECKF(t, rows == 5, "held rows %d", rows);
	T_CHECK(t, bad_back == SEKV_EINVAL && bad_fwd == SEKV_EINVAL && ok_all == 0 && rows0 == 0);
}

static void equiv_gqa_two_kv_heads(struct test_ctx *t)
{
	check_equiv(t, 4, 2);
}

/* The key and value rows (2 KV heads of 64) decode_vs_ref(seed) fed layer
 * 1 at its step `step` (2 layers, 4 query heads: the query first). */
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
	e = decode_vs_ref(&d, m, c, 6, 0, 0.125f, 99);
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
		 * layer 1 reads back as the 5th token decode_vs_ref fed it */
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
	e_out = decode_vs_ref(&d, m, c, 6, 0, 0.125f, 98);
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
	double e = decode_vs_ref(&d, m, c, 6, 0, 0.125f, 99);
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

/* ---- budget ------------------------------------------------------------ */

/* Decodes n_step steps; returns zoom_total, or -1 when resident bytes ever
 * exceeded the budget; *recon = reconstructed bytes summed over steps. */
static long long run_budget(const struct fx_doc *d, struct sekv_ctx *c, int n_step,
			    double *recon)
{
	const struct sekv_stats *st = sekv_ctx_stats(c);
	int nq = d->n_head * d->d_h, nkv = d->n_head_kv * d->d_h;
	float *q = malloc((size_t)nq * 4), *k = malloc((size_t)nkv * 4);
	float *v = malloc((size_t)nkv * 4), *out = malloc((size_t)nq * 4);
	long long rc = 0;

	fx_rng_seed(1234);
	*recon = 0;
	for (int s = 0; s < n_step && rc >= 0; s++, *recon += (double)st->recon_bytes)
		for (int l = 0; l < d->n_layer; l++) {
			for (int i = 0; i < nq; i++)
				q[i] = (float)(3 * fx_rng_n());
			for (int i = 0; i < nkv; i++) {
				k[i] = (float)fx_rng_n();
				v[i] = (float)fx_rng_n();
			}
			if (sekv_attend(c, d->layer_id[l], d->n_tok + s, q, k, v, out) ||
			    st->resident_bytes > st->budget_bytes ||
			    st->peak_resident_bytes > st->budget_bytes) {
				rc = -1;
				break;
			}
		}
	if (rc == 0)
		rc = st->zoom_total;
	free(q); free(k); free(v); free(out);
	return rc;
}

/* Under a budget the zooms change from step to step (random queries);
 * rows kept from the previous step and rows rebuilt must both be the
 * right spans' rows: every step equals exact rows + zoomed spans exact +
 * the rest coarse (full-rank fp32 factors), for both routers. */
static void zoom_changes_between_steps_match_reference(struct test_ctx *t)
{
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	struct sekv_ctx *c = NULL;
	char err[256];

	T_CHECK(t, fx_doc_make(&d, 600, 2, 4, 1, 64, 41) == 0);
	fx_exact_params(&p);
	p.budget = 0.5;
	p.tau = 0.0f;   /* the budget chooses the zooms */
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, m->n_comp >= 8, "n_comp %d", m->n_comp);
	/* landmark and summary routers, then landmark zooms of at most two
	 * blocks (rows of a span rebuilt, its coarse row for the rest) */
	for (int r = 0; r < 3; r++) {
		int part = 0;
		p.router = r == 1 ? SEKV_ROUTER_SUMMARY : SEKV_ROUTER_LANDMARK;
		p.zoom_blocks = r == 2 ? 2 : 0;
		T_CHECKF(t, sekv_ctx_new(&c, m, &p, 12, 0.125f, err, sizeof err) == 0, "%s", err);
		double e = decode_vs_ref(&d, m, c, 12, 2, 0.125f, 5 + r);
		const struct sekv_stats *st = sekv_ctx_stats(c);
		T_CHECKF(t, e >= 0 && e < 1e-4, "router %d: max diff %g", r, e);
		T_CHECKF(t, st->zoom_total > 0 && st->zoom_total < 12LL * 2 * m->n_comp,
			 "router %d: %lld zooms", r, st->zoom_total);
		for (int z = 0; z < st->n_zoom; z++) {
			const struct sekv_zoom *zz = &st->zoom[z];
			int len = m->span[zz->span].len;
			part += zz->n < len;
			/* a window grows to its span where the budget still allows */
			T_CHECK(t, zz->r0 >= 0 && zz->n > 0 && zz->r0 + zz->n <= len &&
				   (r == 2 ? zz->n <= 2 * m->lm_len || zz->n == len : zz->n == len));
		}
		T_CHECKF(t, r < 2 || part > 0, "no span zoomed in part (%d zooms)", st->n_zoom);
		sekv_ctx_free(c);
		c = NULL;
	}
	sekv_mem_free(m);
	fx_doc_free(&d);
}

static void budget_resident_never_exceeds(struct test_ctx *t)
{
	static const double budgets[3] = { 0.06, 0.10, 0.25 };
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL, *small = NULL;
	long long zooms[3];
	double recon[3];
	float alpha[3];
	char err[256];

	T_CHECK(t, fx_doc_make(&d, 3000, 3, 4, 1, 64, 33) == 0);
	/* the build: alpha rises as the budget shrinks */
	for (int b = 0; b < 3; b++) {
		fx_default_params(&p);
		p.budget = budgets[b];
		p.n_recent = 32;
		T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
		T_CHECKF(t, m->static_bytes <= p.static_share * p.budget * m->full_kv_bytes,
			 "static %zu of %zu (%s)", m->static_bytes, m->full_kv_bytes, m->note);
		alpha[b] = m->alpha_used;
		if (b == 0)
			small = m;
		else
			sekv_mem_free(m);
		m = NULL;
	}
	T_CHECKF(t, alpha[0] > alpha[1] && alpha[1] >= alpha[2] && alpha[0] > 1.0f,
		 "alpha_used %g %g %g", alpha[0], alpha[1], alpha[2]);
	/* decode over one memory: never above budget, fewer zooms when smaller */
	for (int b = 0; b < 3; b++) {
		struct sekv_ctx *c = NULL;
		p.budget = budgets[b];
		T_CHECKF(t, sekv_ctx_new(&c, small, &p, 24, 0.125f, err, sizeof err) == 0, "%s", err);
		T_CHECK(t, sekv_ctx_stats(c)->budget_bytes ==
			(size_t)(p.budget * (double)small->full_kv_bytes));
		zooms[b] = run_budget(&d, c, 24, &recon[b]);
		T_CHECKF(t, zooms[b] >= 0, "budget %.2f exceeded: resident %zu > %zu",
			 p.budget, sekv_ctx_stats(c)->resident_bytes,
			 sekv_ctx_stats(c)->budget_bytes);
		T_CHECKF(t, sekv_ctx_stats(c)->peak_resident_bytes >
			 sekv_ctx_stats(c)->budget_bytes * 8 / 10,
			 "budget %.2f barely used", p.budget);
		sekv_ctx_free(c);
	}
	/* zoom counts need not be monotone (a larger budget takes longer spans
	 * first); reconstructed rows are */
	T_CHECKF(t, recon[0] < recon[1] && recon[1] < recon[2] && zooms[0] > 0 &&
		 zooms[0] < zooms[2], "zooms %lld %lld %lld, recon %.0f %.0f %.0f",
		 zooms[0], zooms[1], zooms[2], recon[0], recon[1], recon[2]);
	sekv_mem_free(small);
	fx_doc_free(&d);
}

/* mass_recall of one step of layer 0 in double: the exact softmax of each
 * query head over the document, minus the mass of compressed spans not
 * zoomed for its KV head in that step, averaged over heads. */
static double ref_mass_recall(const struct fx_doc *d, const struct sekv_mem *m,
			      const struct sekv_stats *st, const float *q, float q_scale)
{
	double sum = 0;

	for (int h = 0; h < d->n_head; h++) {
		int kv = h / (d->n_head / d->n_head_kv);
		double *x = malloc((size_t)d->n_tok * sizeof *x), mx = -1e300, tot = 0, lost = 0;
		for (int j = 0; j < d->n_tok; j++) {
			double a = 0;
			for (int i = 0; i < d->d_h; i++)
				a += (double)q[h * d->d_h + i] *
				     quant_f16_to_f32(d->k[0][((size_t)j * d->n_head_kv + kv) * d->d_h + i]);
			x[j] = a * q_scale;
			mx = x[j] > mx ? x[j] : mx;
		}
		for (int j = 0; j < d->n_tok; j++)
			tot += (x[j] = exp(x[j] - mx));
		for (int c = 0; c < m->n_comp; c++) {
			int sp = m->comp_span[c], zoomed = 0;
			for (int z = 0; z < st->n_zoom; z++)
				zoomed |= st->zoom[z].layer == 0 && st->zoom[z].span == sp &&
					  st->zoom[z].head / (d->n_head / d->n_head_kv) == kv;
			for (int j = m->span[sp].start; !zoomed && j < m->span[sp].start + m->span[sp].len; j++)
				lost += x[j];
		}
		sum += 1 - lost / tot;
		free(x);
	}
	return sum / d->n_head;
}

/* The oracle router zooms the span holding a planted match of the query
 * (the summary router's pick need not), its mass_recall equals a double
 * reference and beats the summary router's; the landmark router zooms it
 * too, within 0.9x of the oracle's mass_recall; with every span zoomed
 * mass_recall is 1. */
static void oracle_router_zooms_most_mass(struct test_ctx *t)
{
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	struct sekv_ctx *c[4] = { NULL, NULL, NULL, NULL };
	const uint16_t *keys[8];
	float q[4 * 32], kk[32], vv[32], out[4 * 32];
	double recall[4] = { -1, -1, -1, -1 };
	float target_alpha = -1, other_alpha = 0;
	char err[256];
	int target = -1;

	T_CHECK(t, fx_doc_make(&d, 1500, 1, 4, 1, 32, 77) == 0);
	fx_default_params(&p);
	p.budget = 0.10;
	p.n_recent = 16;
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, m->n_comp > 8);
	/* the query: a scaled copy of a key in the middle of a short span (one
	 * that fits the zoom allowance) past the middle of the document */
	for (int i = m->n_comp / 2; i < m->n_comp && target < 0; i++)
		if (m->span[m->comp_span[i]].len >= 16 && m->span[m->comp_span[i]].len <= 48)
			target = m->comp_span[i];
	T_CHECK(t, target >= 0);
	int start = m->span[target].start, len = m->span[target].len, j = start + len / 2;
	/* plant a key no other resembles (segmentation reads only surprisal,
	 * so the rebuilt memory has the same spans) and query for it */
	double e[32], nrm = 0;
	fx_rng_seed(99);
	for (int i = 0; i < 32; i++) {
		e[i] = fx_rng_n();
		nrm += e[i] * e[i];
	}
	for (int i = 0; i < 32; i++) {
		e[i] /= sqrt(nrm);
		d.k[0][(size_t)j * 32 + i] = quant_f32_to_f16((float)(40 * e[i]));
		for (int h = 0; h < 4; h++)
			q[h * 32 + i] = (float)(3 * e[i]);
	}
	sekv_mem_free(m);
	m = NULL;
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, target < m->n_span && m->span[target].start == start && m->span[target].len == len &&
		!m->span[target].full);
	for (int i = 0; i < 32; i++)
		kk[i] = vv[i] = 0.1f;
	keys[0] = d.k[0];
	/* 0 oracle, 1 summary, 2 oracle without a cap, 3 landmark */
	for (int r = 0; r < 4; r++) {
		struct sekv_params pr = p;
		pr.router = r == 1 ? SEKV_ROUTER_SUMMARY : r == 3 ? SEKV_ROUTER_LANDMARK
								   : SEKV_ROUTER_ORACLE;
		pr.budget = r == 2 ? 0 : p.budget;   /* 2: no cap, every span zoomed */
		pr.zoom_blocks = 0;  /* routing of whole spans (a mean key dilutes the
		                        planted one 16-fold: its block's window loses
		                        to two others' under this budget) */
		T_CHECKF(t, sekv_ctx_new(&c[r], m, &pr, 8, 0.18f, err, sizeof err) == 0, "%s", err);
		sekv_ctx_set_exact_keys(c[r], keys);
		T_CHECK(t, sekv_attend(c[r], d.layer_id[0], d.n_tok, q, kk, vv, out) == 0);
		const struct sekv_stats *st = sekv_ctx_stats(c[r]);
		T_CHECK(t, st->mass_recall_n == 4);
		for (int h = 0; h < 4; h++)
			T_CHECKF(t, st->mass_recall_lh[h] >= 0 && st->mass_recall_lh[h] <= 1 + 1e-9,
				 "head %d: %g", h, st->mass_recall_lh[h]);
		T_CHECK(t, fabs(st->mass_recall_lh[0] + st->mass_recall_lh[1] + st->mass_recall_lh[2] +
				st->mass_recall_lh[3] - st->mass_recall_sum) < 1e-9);
		recall[r] = st->mass_recall_sum / st->mass_recall_n;
		double ref = ref_mass_recall(&d, m, st, q, 0.18f);
		T_CHECKF(t, fabs(recall[r] - ref) < 1e-4, "router %d: mass_recall %.6f, reference %.6f",
			 r, recall[r], ref);
		if (r == 0 || r == 3) {
			int hit = 0;
			for (int z = 0; z < st->n_zoom; z++) {
				hit |= st->zoom[z].span == target;
				if (r == 3 && st->zoom[z].span == target)
					target_alpha = st->zoom[z].alpha;
				else if (r == 3 && st->zoom[z].alpha > other_alpha)
					other_alpha = st->zoom[z].alpha;
			}
			T_CHECKF(t, hit && st->n_zoom < m->n_comp,
				 "router %d: zooms %d of %d spans, target %d missed", r, st->n_zoom,
				 m->n_comp, target);
		}
	}
	T_CHECKF(t, recall[0] >= recall[1] && recall[0] > 0.5 && fabs(recall[2] - 1) < 1e-9,
		 "mass_recall oracle %.4f summary %.4f all zoomed %.6f", recall[0], recall[1], recall[2]);
	/* landmarks: near the oracle, and alpha_S is the span's estimated share
	 * of the attention, highest for the planted key's span, not a saturated 1 */
	T_CHECKF(t, m->n_lm > m->n_comp && recall[3] >= 0.9 * recall[0] &&
		 target_alpha > other_alpha && target_alpha < 1.0f,
		 "landmark: %d blocks, mass_recall %.4f (oracle %.4f), alpha target %.4f, others <= %.4f",
		 m->n_lm, recall[3], recall[0], target_alpha, other_alpha);
	for (int r = 0; r < 4; r++)
		sekv_ctx_free(c[r]);
	sekv_mem_free(m);
	fx_doc_free(&d);
}

static void budget_alpha_note_and_merge(struct test_ctx *t)
{
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	char err[256];

	T_CHECK(t, fx_doc_make(&d, 2000, 1, 4, 1, 32, 44) == 0);
	fx_default_params(&p);
	p.budget = 0.08;
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, m->alpha_used > 1.0f && strstr(m->note, "alpha raised 1.00 ->"),
		 "note '%s'", m->note);
	sekv_mem_free(m);
	/* the recent window alone exceeds the static share: merged, reported */
	p.n_recent = 150;
	p.budget = 0.05;
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, strstr(m->note, "budget not met") && strstr(m->note, "merged"),
		 "note '%s'", m->note);
	T_CHECK(t, m->n_span == 1 && m->n_comp == 1);
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
	e = decode_vs_ref(&d, m, c, 4, 0, 0.2f, 5);
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
	e = decode_vs_ref(&d, m, c, 3, 1, 0.2f, 6);
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
	e = decode_vs_ref(&d, m, c, 6, 0, 0.125f, 99);
	/* the keys rotated back are rounded to fp16 once before their SVD */
	T_CHECKF(t, e >= 0 && e < 2e-3, "pre-RoPE, all zoomed vs exact: max diff %g", e);
	sekv_ctx_free(c);
	/* without the rotation at rebuild the output moves */
	m->rope_base = 0;
	T_CHECKF(t, sekv_ctx_new(&c, m, &p, 6, 0.125f, err, sizeof err) == 0, "%s", err);
	e = decode_vs_ref(&d, m, c, 2, 0, 0.125f, 99);
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
		e = decode_vs_ref(&d, m2, c, 6, 0, 0.125f, 99);
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
	e16 = decode_vs_ref(&d, m16, c, 6, 0, 0.125f, 99);
	sekv_ctx_free(c);
	p.r_use = 8;   /* r_use < rank reads a strided slice of the fp16 v */
	T_CHECKF(t, sekv_ctx_new(&c, m16, &p, 2, 0.125f, err, sizeof err) == 0, "%s", err);
	e32 = decode_vs_ref(&d, m16, c, 2, 0, 0.125f, 99);
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
	{ "sekv_oracle_and_landmark_routers_zoom_most_mass", oracle_router_zooms_most_mass },
	{ "sekv_factor_f16_halves_host_bytes", factor_f16_halves_host_bytes },
	{ "sekv_evict_tail_forgets_oldest_rows", evict_tail_forgets_oldest_rows },
	{ "sekv_equiv_all_zoomed_full_rank_is_exact", equiv_all_zoomed_full_rank_is_exact },
	{ "sekv_equiv_gqa_two_kv_heads", equiv_gqa_two_kv_heads },
	{ "sekv_dev_i8_rows_close_to_exact", dev_i8_rows_close_to_exact },
	{ "sekv_dev_k8v4_rows_close_to_exact", dev_k8v4_rows_close_to_exact },
	{ "sekv_budget_resident_never_exceeds", budget_resident_never_exceeds },
	{ "sekv_question_turn_exact_within_budget", question_turn_exact_within_budget },
	{ "sekv_zoom_changes_between_steps_match_reference", zoom_changes_between_steps_match_reference },
	{ "sekv_budget_alpha_note_and_merge", budget_alpha_note_and_merge },
	{ "sekv_edge_short_doc_and_zero_surprisal", edge_short_doc_and_zero_surprisal },
	{ "sekv_malformed_inputs_refused", malformed_inputs_refused },
	{ "sekv_pre_rope_keys_all_zoomed_is_exact", pre_rope_keys_all_zoomed_is_exact },
	{ "sekv_append_keeps_old_and_is_exact_at_full_rank", append_keeps_old_and_is_exact_at_full_rank },
	{ "sekv_slices_join_back_bit_for_bit", slices_join_back_bit_for_bit },
	{ NULL, NULL },
};
