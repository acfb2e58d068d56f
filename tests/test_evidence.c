/* test_evidence.c - attention probes (full KV and SeKV) and evidence:
 * probe mass is the softmax (scalar recomputation), sums to 1, leaves the
 * output bit-identical, and a prefill batch sums every query's weights; SeKV with everything zoomed at full rank gives
 * full KV's per-position mass; passages tile the text; head lists parse;
 * calibration is deterministic and picks its highest-scoring heads. */
#include "tests/test.h"
#include "tests/sekv_fixture.h"

#include "engine/backend/backend.h"
#include "engine/base/err.h"
#include "engine/evidence/evidence.h"
#include "engine/model/model.h"
#include "engine/quant/quant.h"
#include "engine/sekv/sekv.h"
#include "engine/tok/tokenizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EH 4
#define ED 64
#define EN 700

/* One token against EN fp16 keys: probe on heads 1 and 3 equals a double
 * softmax, sums to 1, and the output is the same bits as without it. */
static void probe_full_is_softmax_and_neutral(struct test_ctx *t)
{
	struct backend *b = NULL;
	struct backend_ws *ws = NULL;
	struct backend_ws_size sz = { 1, EH, ED, 1, 64, 0, 0 };
	struct backend_buf *kb = NULL, *vb = NULL;
	static float q[EH * ED], kv[2 * EN * ED], o1[EH * ED], o2[EH * ED], mass[2][EN];
	static uint16_t kc[EN * ED];
	struct backend_probe pr = { 2, { 1, 3 }, { mass[0], mass[1] }, EN };
	char err[256];

	T_CHECKF(t, backend_open("cpu", 2, &b, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, b->ops->ws_new(b, &sz, &ws) == 0);
	test_fill_random(q, EH * ED, 3);
	test_fill_random(kv, 2 * EN * ED, 4);
	for (int i = 0; i < EN * ED; i++)
		kv[i] *= 3.0f;
	T_CHECK(t, b->ops->buf_new(b, sizeof(uint16_t) * EN * ED, &kb) == 0);
	T_CHECK(t, b->ops->buf_new(b, sizeof(uint16_t) * EN * ED, &vb) == 0);
	b->ops->kv_store(b, kb, vb, EN, ED, kv, kv + EN * ED, 0, EN);
	b->ops->buf_read(b, kb, 0, kc, sizeof kc);
	struct backend_attn a = { q, o1, 1, EN - 1, EH, 1, ED, kb, vb, EN, 0, 0.125f, NULL };
	T_CHECK(t, b->ops->attention(b, ws, &a) == 0);
	a.out = o2;
	a.probe = &pr;
	T_CHECK(t, b->ops->attention(b, ws, &a) == 0);
	T_CHECK(t, memcmp(o1, o2, sizeof o1) == 0);
	for (int i = 0; i < 2; i++) {
		double s[EN], mx = -INFINITY, z = 0, sum = 0;
		for (int p = 0; p < EN; p++) {
			double d = 0;
			for (int e = 0; e < ED; e++)
				d += (double)q[pr.head[i] * ED + e] * quant_f16_to_f32(kc[p * ED + e]);
			s[p] = d * 0.125;
			mx = s[p] > mx ? s[p] : mx;
		}
		for (int p = 0; p < EN; p++)
			z += exp(s[p] - mx);
		for (int p = 0; p < EN; p++) {
			double ref = exp(s[p] - mx) / z;
			T_CHECKF(t, fabs(mass[i][p] - ref) < 1e-5 + 1e-3 * ref, "head %d key %d: %g vs %g",
				 pr.head[i], p, mass[i][p], ref);
			sum += mass[i][p];
		}
		T_CHECKF(t, fabs(sum - 1) < 1e-4, "head %d: mass sums to %g", pr.head[i], sum);
	}
	/* a bad head is refused */
	pr.head[1] = EH;
	T_CHECK(t, b->ops->attention(b, ws, &a) == SEKV_EINVAL);
	b->ops->buf_free(b, kb);
	b->ops->buf_free(b, vb);
	b->ops->ws_free(ws);
	backend_close(b);
}

/* Reference for the batch probe: query i of a batch at pos0 (head h,
 * GQA group G, window w or 0) in double, its softmax weights on keys
 * < n_key added to ref [n_key]. */
static void prefill_probe_ref(const float *q, const uint16_t *kc, int n, int pos0, int h, int G,
			      int n_kv, int w, int n_key, double *ref)
{
	static double s[512];

	for (int i = 0; i < n; i++) {
		int p = pos0 + i, lo = w > 0 && p - w + 1 > 0 ? p - w + 1 : 0;
		double mx = -INFINITY, z = 0;
		for (int key = lo; key <= p; key++) {
			double dt = 0;
			for (int e = 0; e < ED; e++)
				dt += (double)q[((size_t)i * EH + h) * ED + e] *
				      quant_f16_to_f32(kc[((size_t)key * n_kv + h / G) * ED + e]);
			s[key - lo] = dt * 0.125;
			mx = s[key - lo] > mx ? s[key - lo] : mx;
		}
		for (int key = lo; key <= p; key++)
			z += exp(s[key - lo] - mx);
		for (int key = lo; key <= p && key < n_key; key++)
			ref[key] += exp(s[key - lo] - mx) / z;
	}
}

/* A prefill batch (150 queries after 200 cached positions, grouped
 * heads, full causal and sliding window): each probed head's mass is the
 * sum over the batch's queries of their softmax weights (a double
 * reference), keys past n_key are not counted, all keys together get one
 * unit per query, and the outputs are the same bits as without the probe. */
static void probe_prefill_sums_every_query(struct test_ctx *t)
{
	enum { NB = 150, P0 = 200, NT = P0 + NB, NKV = 2 };
	struct backend *b = NULL;
	struct backend_ws *ws = NULL;
	struct backend_ws_size sz = { 256, EH, ED, 1, 64, 0, 0 };
	struct backend_buf *kb = NULL, *vb = NULL;
	static float q[NB * EH * ED], kv[2 * NT * NKV * ED], o1[NB * EH * ED], o2[NB * EH * ED];
	static float mass[2][NT];
	static uint16_t kc[NT * NKV * ED];
	static double ref[NT];
	char err[256];

	T_CHECKF(t, backend_open("cpu", 2, &b, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, b->ops->ws_new(b, &sz, &ws) == 0);
	test_fill_random(q, NB * EH * ED, 13);
	test_fill_random(kv, 2 * NT * NKV * ED, 14);
	for (int i = 0; i < NT * NKV * ED; i++)
		kv[i] *= 3.0f;
	T_CHECK(t, b->ops->buf_new(b, sizeof kc, &kb) == 0 && b->ops->buf_new(b, sizeof kc, &vb) == 0);
	b->ops->kv_store(b, kb, vb, NT, NKV * ED, kv, kv + NT * NKV * ED, 0, NT);
	b->ops->buf_read(b, kb, 0, kc, sizeof kc);
	for (int w = 0; w <= 100; w += 100)
		for (int n_key = 300; n_key <= NT; n_key += NT - 300) {
			struct backend_probe pr = { 2, { 1, 2 }, { mass[0], mass[1] }, n_key };
			struct backend_attn a = { q, o1, NB, P0, EH, NKV, ED, kb, vb, NT, w, 0.125f, NULL };
			T_CHECK(t, b->ops->attention(b, ws, &a) == 0);
			memset(mass, 0, sizeof mass);
			a.out = o2;
			a.probe = &pr;
			T_CHECK(t, b->ops->attention(b, ws, &a) == 0);
			T_CHECK(t, memcmp(o1, o2, sizeof o1) == 0);
			for (int e = 0; e < 2; e++) {
				double worst = 0, sum = 0;
				memset(ref, 0, sizeof ref);
				prefill_probe_ref(q, kc, NB, P0, pr.head[e], EH / NKV, NKV, w, n_key, ref);
				for (int key = 0; key < NT; key++) {
					double got = key < n_key ? mass[e][key] : 0;
					worst = fmax(worst, fabs(got - ref[key]) / (1e-4 + ref[key]));
					sum += mass[e][key];
					T_CHECKF(t, key < n_key || mass[e][key] == 0, "key %d past n_key %d", key, n_key);
				}
				T_CHECKF(t, worst < 1e-3, "window %d n_key %d head %d: worst relative diff %g",
					 w, n_key, pr.head[e], worst);
				T_CHECKF(t, n_key < NT || fabs(sum - NB) < 1e-3,
					 "window %d head %d: mass sums to %g for %d queries", w, pr.head[e], sum, NB);
			}
		}
	b->ops->buf_free(b, kb);
	b->ops->buf_free(b, vb);
	b->ops->ws_free(ws);
	backend_close(b);
}

/* SeKV with every span zoomed at full rank: per-position mass equals the
 * exact softmax over the document rows and the token's own row. */
static void probe_sekv_all_zoomed_equals_full(struct test_ctx *t)
{
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	struct sekv_ctx *c = NULL;
	struct model_probe pr = { 0 };
	static float q[4 * 64], k[64], v[64], out[4 * 64], out2[4 * 64];
	char err[256];
	int n;

	T_CHECK(t, fx_doc_make(&d, 400, 3, 4, 1, 64, 21) == 0);
	n = d.n_tok;
	fx_exact_params(&p);
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, m->n_comp >= 10);
	pr.n = 2;
	pr.layer[0] = pr.layer[1] = d.layer_id[1];
	pr.head[0] = 0;
	pr.head[1] = 3;
	pr.n_pos = n;
	T_CHECK(t, (pr.mass = calloc(2 * (size_t)n, sizeof(float))) != NULL);
	fx_rng_seed(5);
	for (int i = 0; i < 4 * 64; i++)
		q[i] = (float)(2 * fx_rng_n());
	for (int i = 0; i < 64; i++) {
		k[i] = fx_f16r((float)fx_rng_n());
		v[i] = fx_f16r((float)fx_rng_n());
	}
	/* without the probe, then with it on a fresh stream: same bits */
	T_CHECKF(t, sekv_ctx_new(&c, m, &p, 4, 0.125f, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, sekv_attend(c, d.layer_id[1], n, q, k, v, out) == 0);
	sekv_ctx_reset(c);
	sekv_ctx_set_probe(c, &pr);
	T_CHECK(t, sekv_attend(c, d.layer_id[1], n, q, k, v, out2) == 0);
	T_CHECK(t, memcmp(out, out2, sizeof out) == 0);
	for (int i = 0; i < 2; i++) {
		int h = pr.head[i];
		double s[401], mx = -INFINITY, z = 0, sum = 0;
		for (int p2 = 0; p2 <= n; p2++) {
			double dd = 0;
			for (int e = 0; e < 64; e++)
				dd += (double)q[h * 64 + e] * (p2 < n ? quant_f16_to_f32(d.k[1][p2 * 64 + e]) : k[e]);
			s[p2] = dd * 0.125;
			mx = s[p2] > mx ? s[p2] : mx;
		}
		for (int p2 = 0; p2 <= n; p2++)
			z += exp(s[p2] - mx);
		for (int p2 = 0; p2 < n; p2++) {
			double ref = exp(s[p2] - mx) / z;
			T_CHECKF(t, fabs(pr.mass[(size_t)i * n + p2] - ref) < 1e-5 + 1e-3 * ref,
				 "head %d pos %d: %g vs %g", h, p2, pr.mass[(size_t)i * n + p2], ref);
			sum += pr.mass[(size_t)i * n + p2];
		}
		T_CHECKF(t, fabs(sum + exp(s[n] - mx) / z - 1) < 1e-4, "head %d: sum %g", h, sum);
	}
	sekv_ctx_free(c);
	free(pr.mass);
	sekv_mem_free(m);
	fx_doc_free(&d);
}

/* Passages of 3 document tokens over 11 tokens, two of them template
 * tokens: ranges tile the text, ranks follow the mass, scores sum to 1. */
static void rank_passages_tile_text(struct test_ctx *t)
{
	const int32_t start[11] = { -1, 0, 4, 9, 12, 20, 25, 31, -1, 40, 44 };
	const float mass[2][11] = { { 9, 1, 0, 0, 0, 0, 0, 3, 9, 0, 1 },
				    { 0, 0, 1, 0, 2, 2, 1, 0, 0, 0, 0 } };
	struct evidence_passage pas[5];
	double sum = 0;
	int n = evidence_rank(&mass[0][0], NULL, 2, 11, start, 11, 50, 3, pas, 5);

	T_CHECKF(t, n == 3, "%d passages", n);
	/* passages: {1,2,3} [0,12) mass 2, {4,5,6} [12,31) mass 5, {7,9,10} [31,50) mass 4 */
	T_CHECK(t, pas[0].index == 1 && pas[0].start == 12 && pas[0].end == 31 && pas[0].rank == 1);
	T_CHECK(t, pas[1].index == 2 && pas[1].start == 31 && pas[1].end == 50 && pas[1].n_tok == 3);
	T_CHECK(t, pas[2].index == 0 && pas[2].start == 0 && pas[2].end == 12);
	for (int i = 0; i < n; i++)
		sum += pas[i].score;
	T_CHECKF(t, fabs(sum - 1) < 1e-9 && fabs(pas[0].score - 5.0 / 11) < 1e-9, "sum %g", sum);
	T_CHECK(t, evidence_rank(&mass[0][0], NULL, 2, 11, start, 11, 50, 0, pas, 5) == SEKV_EINVAL);
}

/* With a baseline, a passage scores its share of the question's mass
 * minus its share of the baseline's: the passage every token looks at
 * (an attention sink) drops below the one only the question looks at.
 * Each passage's peak is its best token by that contrast. */
static void rank_subtracts_baseline(struct test_ctx *t)
{
	const int32_t start[7] = { -1, 0, 5, 10, 15, 20, 25 };
	/* passages of 2: {1,2} {3,4} {5,6}; template position 0 ignored */
	const float mass[1][7] = { { 50, 4, 2, 1, 2, 0, 1 } };   /* doc total 10 */
	const float base[1][7] = { { 80, 6, 2, 0, 1, 1, 0 } };   /* doc total 10 */
	struct evidence_passage pas[3];
	int n = evidence_rank(&mass[0][0], &base[0][0], 1, 7, start, 7, 30, 2, pas, 3);

	T_CHECKF(t, n == 3, "%d passages", n);
	/* shares: q 0.6 0.3 0.1, base 0.8 0.1 0.1 -> -0.2 +0.2 0 */
	T_CHECKF(t, pas[0].index == 1 && fabs(pas[0].score - 0.2) < 1e-9, "first %d %g",
		 pas[0].index, pas[0].score);
	T_CHECKF(t, pas[1].index == 2 && fabs(pas[1].score) < 1e-9, "second %d", pas[1].index);
	T_CHECKF(t, pas[2].index == 0 && fabs(pas[2].score + 0.2) < 1e-9, "third %d", pas[2].index);
	/* peak: the best token by the same contrast (ties: the first) */
	T_CHECKF(t, pas[2].peak == 5 && pas[0].peak == 10 && pas[1].peak == 25, "peaks %lld %lld %lld",
		 (long long)pas[2].peak, (long long)pas[0].peak, (long long)pas[1].peak);
	/* without the baseline the sink wins */
	n = evidence_rank(&mass[0][0], NULL, 1, 7, start, 7, 30, 2, pas, 3);
	T_CHECK(t, n == 3 && pas[0].index == 0 && fabs(pas[0].score - 0.6) < 1e-9);
}

static void heads_parse_good_and_bad(struct test_ctx *t)
{
	struct model_hparams hp = { .n_layer = 18, .n_head = 4 };
	struct evidence_head h[4];
	char err[256], buf[64];
	int n;
	const char *bad[] = { "", "5", "5:", ":1", "5:1,", "5:1,,11:2", "a:b", "5:-1", "-5:1",
			      "5:1x", "5:4", "4:1", "18:0", "5:1,5:1", "5:0,5:1,5:2,5:3,11:0", " 5:1" };

	hp.is_global[5] = hp.is_global[11] = hp.is_global[17] = 1;
	T_CHECKF(t, evidence_heads_parse("5:1,5:2,11:2", &hp, h, 4, &n, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, n == 3 && h[0].layer == 5 && h[0].head == 1 && h[2].layer == 11 && h[2].head == 2);
	evidence_heads_format(h, n, buf, sizeof buf);
	T_CHECK(t, !strcmp(buf, "5:1,5:2,11:2"));
	T_CHECK(t, evidence_heads_parse("17:3", &hp, h, 4, &n, err, sizeof err) == 0 && n == 1);
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
		T_CHECKF(t, evidence_heads_parse(bad[i], &hp, h, 4, &n, err, sizeof err) == SEKV_EINVAL,
			 "\"%s\" accepted", bad[i]);
	T_CHECK(t, strstr(err, "L:H") || strstr(err, "evidence heads"));
}

/* Offsets of a document behind template tokens: exact, and each
 * document token's piece sits at its offset in the text. */
static void offsets_exact_behind_template(struct test_ctx *t)
{
	struct model *m = NULL;
	struct tok *tk = NULL;
	const char *text = "Licences: the GPL \"copyleft\"  rule\n\nand\tits   exceptions. End.";
	int32_t ids[128], start[128];
	char err[256], piece[64];
	int n, exact, n_doc = 0;

	if (access(test_model_path(), R_OK) != 0)
		T_SKIP(t, "no model at %s", test_model_path());
	T_CHECKF(t, model_open(&m, test_model_path(), 1, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, tok_open_gguf(&tk, model_gguf(m), err, sizeof err) == 0, "%s", err);
	ids[0] = tok_bos(tk);
	ids[1] = tok_special_id(tk, "<start_of_turn>");
	n = 2 + tok_encode(tk, "user\n", 5, 0, ids + 2, 100, err, sizeof err);
	n += tok_encode(tk, text, strlen(text), 0, ids + n, 100, err, sizeof err);
	ids[n++] = tok_special_id(tk, "<end_of_turn>");
	T_CHECK(t, evidence_offsets(tk, ids, n, text, strlen(text), start, &exact, err, sizeof err) == 0);
	T_CHECK(t, exact == 1 && start[0] == -1 && start[1] == -1 && start[n - 1] == -1);
	for (int i = 0; i < n; i++) {
		int w;
		if (start[i] < 0)
			continue;
		n_doc++;
		w = tok_token_text(tk, ids[i], piece, sizeof piece);
		T_CHECKF(t, w > 0 && !memcmp(text + start[i], piece, (size_t)w), "token %d at %d", i, start[i]);
	}
	T_CHECK(t, n_doc >= 10 && start[n - 2] > 0);
	/* a text the pieces do not hold: approximate, still ascending */
	T_CHECK(t, evidence_offsets(tk, ids, n, "zzz", 3, start, &exact, err, sizeof err) == 0);
	T_CHECK(t, exact == 0 && start[0] == -1);
	tok_close(tk);
	model_close(m);
}

/* Calibration on short needle documents: the best heads are those with
 * the highest scores, in order, and a second run gives the same scores. */
static void calibrate_picks_highest_deterministic(struct test_ctx *t)
{
	struct model *m = NULL;
	struct tok *tk = NULL;
	struct evidence_calib_params cp;
	struct evidence_head best[3];
	float s1[MODEL_PROBE_MAX], s2[MODEL_PROBE_MAX];
	char err[256];
	int n_all;

	if (access(test_model_path(), R_OK) != 0)
		T_SKIP(t, "no model at %s", test_model_path());
	T_CHECKF(t, model_open(&m, test_model_path(), 0, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, tok_open_gguf(&tk, model_gguf(m), err, sizeof err) == 0, "%s", err);
	const struct model_hparams *hp = model_hparams(m);
	n_all = hp->n_global * hp->n_head;
	evidence_calib_default_params(&cp);
	cp.n_doc = 2;
	cp.doc_tok = 300;
	cp.n_answer = 1;
	T_CHECKF(t, evidence_calibrate(m, tk, &cp, s1, best, 3, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, evidence_calibrate(m, tk, &cp, s2, best, 3, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, memcmp(s1, s2, sizeof(float) * n_all) == 0);
	for (int b = 0; b < 3; b++) {
		int i = 0;
		while (hp->global_layer[i / hp->n_head] != best[b].layer || i % hp->n_head != best[b].head)
			i++;
		for (int j = 0; j < n_all; j++) {
			int used = 0;
			for (int e = 0; e < b; e++)
				used |= hp->global_layer[j / hp->n_head] == best[e].layer &&
					j % hp->n_head == best[e].head;
			T_CHECKF(t, used || s1[j] <= s1[i], "head %d scores %g above pick %d (%g)", j, s1[j], b, s1[i]);
		}
	}
	tok_close(tk);
	model_close(m);
}

const struct test_case test_evidence[] = {
	{ "evidence_probe_full_is_softmax_and_neutral", probe_full_is_softmax_and_neutral },
	{ "evidence_probe_prefill_sums_every_query", probe_prefill_sums_every_query },
	{ "evidence_probe_sekv_all_zoomed_equals_full", probe_sekv_all_zoomed_equals_full },
	{ "evidence_rank_passages_tile_text", rank_passages_tile_text },
	{ "evidence_rank_subtracts_baseline", rank_subtracts_baseline },
	{ "evidence_heads_parse_good_and_bad", heads_parse_good_and_bad },
	{ "evidence_offsets_exact_behind_template", offsets_exact_behind_template },
	{ "evidence_calibrate_picks_highest_deterministic", calibrate_picks_highest_deterministic },
	{ NULL, NULL },
};
