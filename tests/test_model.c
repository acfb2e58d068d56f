/* test_model.c - the Gemma 3 forward pass on the real model file.
 *
 * Checks: hyper-parameters read from the GGUF; bad arguments refused;
 * prefill in one batch == in chunks == token-by-token decode (logits and
 * surprisal); decode through an attention provider written here (plain
 * fp32 softmax over its own rows, global layers only, on a state without
 * exact global rows) == decode with the state's exact rows, which is the
 * contract engine/sekv relies on; prompts longer than the sliding window
 * give the same result whatever the ring size; and top-10 logits against
 * llama.cpp goldens (tests/golden/logits_gemma3.json). The model is
 * required (make test fetches it): its absence is a failure.
 */
#include "tests/test.h"

#include "engine/base/err.h"
#include "engine/model/model.h"
#include "engine/quant/quant.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GOLDEN_PATH "tests/golden/logits_gemma3.json"

/* "The lighthouse keeper climbed the spiral stairs ..." tokenised by
 * llama.cpp's Gemma 3 tokenizer, BOS (2) first. */
static const int32_t k_text[] = {
	2, 818, 63937, 64222, 54264, 506, 32450, 31393, 1418, 9137, 657, 85083,
	236761, 1293, 70741, 506, 97434, 236764, 39372, 506, 1822, 14970, 236764,
	532, 7971, 506, 7606, 528, 496, 23143, 13069, 2212, 3070, 236761, 78368,
	11332, 506, 35016, 1523, 38586, 580, 506, 16932, 13343, 531, 1586, 506,
	53676, 236761, 799, 7208, 506, 48312, 964, 48621, 236764, 532, 11707, 16689,
	1024, 506, 15707, 9459, 236764, 840, 506, 2214, 2752, 8428, 236761, 3026,
	506, 64222, 21136, 236764, 506, 15123, 691, 26267, 236764, 532, 506, 2212,
	3070, 691, 2238, 531, 506, 5148, 14871, 236761,
};
#define N_TEXT ((int)(sizeof k_text / sizeof k_text[0]))

static struct model *open_model(struct test_ctx *t)
{
	struct model *m = NULL;
	char err[256];
	int rc = model_open(&m, test_model_path(), 0, err, sizeof err);

	if (rc)
		T_FAIL(t, "model_open(%s): %s", test_model_path(), err);
	return m;
}

/* Text of n tokens: BOS, then the sentence repeated (without its BOS). */
static void fill_text(int32_t *ids, int n)
{
	ids[0] = 2;
	for (int i = 1; i < n; i++)
		ids[i] = k_text[1 + (i - 1) % (N_TEXT - 1)];
}

static double logsumexp(const float *x, int n)
{
	double mx = -INFINITY, s = 0.0;

	for (int i = 0; i < n; i++)
		if (x[i] > mx)
			mx = x[i];
	for (int i = 0; i < n; i++)
		s += exp(x[i] - mx);
	return mx + log(s);
}

static float max_abs_diff(const float *a, const float *b, int n)
{
	float d = 0.0f;

	for (int i = 0; i < n; i++)
		if (fabsf(a[i] - b[i]) > d || isnan(a[i] - b[i]))
			d = isnan(a[i] - b[i]) ? INFINITY : fabsf(a[i] - b[i]);
	return d;
}

/* Prefills ids[0..n) in chunks of `chunk`; surprisal [n]. */
static int prefill_all(const struct model *m, struct model_state *s, const int32_t *ids,
		       int n, int chunk, float *surprisal, char *err, size_t errlen)
{
	for (int i = 0; i < n; i += chunk) {
		int c = n - i < chunk ? n - i : chunk, rc;
		if ((rc = model_prefill(m, s, ids + i, c, surprisal ? surprisal + i : NULL, err, errlen)))
			return rc;
	}
	return 0;
}

/* ---- hyper-parameters and arguments --------------------------------- */

static void t_hparams(struct test_ctx *t)
{
	struct model *m = open_model(t);
	const struct model_hparams *hp;
	size_t len;

	if (!m)
		return;
	hp = model_hparams(m);
	T_CHECKF(t, !strcmp(hp->arch, "gemma3"), "arch %s", hp->arch);
	T_CHECK(t, hp->n_layer == 18 && hp->n_embd == 640 && hp->n_head == 4 &&
		hp->n_head_kv == 1 && hp->d_head == 256 && hp->n_ff == 2048 &&
		hp->n_vocab == 262144 && hp->n_ctx_train == 32768 && hp->swa_window == 512);
	T_CHECKF(t, hp->rope_base_global == 1e6f && hp->rope_base_local == 1e4f,
		 "rope %g / %g", hp->rope_base_global, hp->rope_base_local);
	T_CHECKF(t, fabsf(hp->norm_eps - 1e-6f) < 1e-12f, "eps %g", hp->norm_eps);
	T_CHECKF(t, hp->q_scale == 0.0625f, "q_scale %g", hp->q_scale);
	T_CHECKF(t, fabsf(hp->embd_scale - 25.298221f) < 1e-5f, "embd_scale %g", hp->embd_scale);
	T_CHECKF(t, hp->n_global == 3 && hp->global_layer[0] == 5 &&
		 hp->global_layer[1] == 11 && hp->global_layer[2] == 17, "n_global %d", hp->n_global);
	for (int il = 0; il < hp->n_layer; il++)
		T_CHECKF(t, hp->is_global[il] == ((il + 1) % 6 == 0), "is_global[%d]", il);
	len = strlen(hp->fingerprint);
	T_CHECKF(t, len == 16 && strspn(hp->fingerprint, "0123456789abcdef") == len,
		 "fingerprint '%s'", hp->fingerprint);
	T_CHECK(t, model_kv_row_bytes(m) == 1024);
	T_CHECK(t, model_gguf(m) != NULL);
	model_close(m);
}

static void t_bad_arguments(struct test_ctx *t)
{
	struct model *m = NULL, *m2 = NULL;
	struct model_state *s = NULL;
	char err[256] = "";
	int32_t bad = 262144, ids[8];
	float lg[4];
	int rc;

	rc = model_open(&m2, "/nonexistent/model.gguf", 1, err, sizeof err);
	T_CHECKF(t, rc < 0 && m2 == NULL && strstr(err, "/nonexistent/model.gguf"),
		 "rc %d err '%s'", rc, err);
	if (!(m = open_model(t)))
		return;
	T_CHECK(t, model_state_new(&s, m, 0, 4, 1, err, sizeof err) == SEKV_EINVAL && !s);
	T_CHECK(t, model_state_new(&s, m, 16, 4, 1, err, sizeof err) == 0);
	fill_text(ids, 8);
	T_CHECK(t, model_prefill(m, s, ids, 5, NULL, err, sizeof err) == SEKV_EINVAL);
	T_CHECK(t, model_prefill(m, s, &bad, 1, NULL, err, sizeof err) == SEKV_EINVAL);
	T_CHECK(t, model_decode(m, s, -1, NULL, lg, err, sizeof err) == SEKV_EINVAL);
	T_CHECK(t, model_state_n_past(s) == 0 && !model_state_logits(s));
	for (int i = 0; i < 4; i++)
		T_CHECK(t, model_prefill(m, s, ids, 4, NULL, err, sizeof err) == 0);
	/* n_ctx is full: no more exact rows */
	T_CHECK(t, model_prefill(m, s, ids, 1, NULL, err, sizeof err) == SEKV_EINVAL);
	T_CHECK(t, model_decode(m, s, 5, NULL, NULL, err, sizeof err) == SEKV_EINVAL);
	model_state_free(s);
	T_CHECK(t, model_state_new(&s, m, 16, 4, 0, err, sizeof err) == 0);
	T_CHECK(t, model_prefill(m, s, ids, 1, NULL, err, sizeof err) == SEKV_EINVAL);
	model_state_free(s);
	model_state_free(NULL);
	model_close(m);
	model_close(NULL);
}

/* ---- consistency ---------------------------------------------------- */

/* Differences come only from summation order (sgemm vs dot products,
 * attention tiles): measured <= ~2e-3 on logits and surprisal; 2e-2 leaves
 * room for other BLAS builds and still catches any real error (a wrong
 * position, mask or cache slot moves logits by >= 0.1). */
#define TOL_ORDER 2e-2f

static void t_chunks_match(struct test_ctx *t)
{
	enum { N = N_TEXT };
	static const int chunks[] = { 7, 1, 30, 13, 40 }; /* sums to 91 */
	static const int ends[] = { 7, 8, 38, 51, 91 };
	struct model *m = open_model(t);
	struct model_state *sa = NULL, *sb = NULL, *sc = NULL;
	float sur_a[N], sur_b[N], sur_c[N], *lg = NULL, *at_b = NULL;
	char err[256];
	int V, p = 0, nb = 0;
	double mean = 0.0;

	_Static_assert(N == 91, "chunks[] must sum to N");

	if (!m)
		return;
	model_set_act_q8(m, 0); /* decode vs prefill: summation order only */
	V = model_hparams(m)->n_vocab;
	lg = malloc(sizeof(float) * (size_t)V);
	at_b = malloc(sizeof(float) * (size_t)V * 5);
	T_CHECK(t, lg && at_b);
	T_CHECK(t, model_state_new(&sa, m, 128, N, 1, err, sizeof err) == 0);
	T_CHECK(t, model_state_new(&sb, m, 128, 40, 1, err, sizeof err) == 0);
	T_CHECK(t, model_state_new(&sc, m, 128, 1, 1, err, sizeof err) == 0);

	T_CHECKF(t, model_prefill(m, sa, k_text, N, sur_a, err, sizeof err) == 0, "%s", err);
	for (int c = 0; c < 5; c++) {
		T_CHECKF(t, model_prefill(m, sb, k_text + p, chunks[c], sur_b + p, err, sizeof err) == 0,
			 "%s", err);
		p += chunks[c];
		memcpy(at_b + (size_t)c * V, model_state_logits(sb), sizeof(float) * V);
	}
	T_CHECK(t, p == N && model_state_n_past(sa) == N && model_state_n_past(sb) == N);

	/* token by token: surprisal from the previous step's logits */
	for (int i = 0; i < N; i++) {
		T_CHECKF(t, model_decode(m, sc, k_text[i], NULL, lg, err, sizeof err) == 0, "%s", err);
		if (i + 1 < N)
			sur_c[i + 1] = (float)(logsumexp(lg, V) - lg[k_text[i + 1]]);
		T_CHECKF(t, fabs(model_state_lse(sc) - logsumexp(lg, V)) < 1e-3, "last_lse at %d", i);
		if (nb < 5 && i + 1 == ends[nb]) {
			float d = max_abs_diff(lg, at_b + (size_t)nb * V, V);
			T_CHECKF(t, d < TOL_ORDER, "decode vs chunk %d logits differ by %g", nb, d);
			nb++;
		}
	}
	sur_c[0] = 0.0f;
	T_CHECK(t, nb == 5);
	T_CHECKF(t, model_n_eval(m) == 3 * N, "n_eval %lld", model_n_eval(m));
	T_CHECKF(t, max_abs_diff(model_state_logits(sa), model_state_logits(sb), V) < TOL_ORDER,
		 "batch vs chunks: last logits differ by %g", max_abs_diff(model_state_logits(sa), model_state_logits(sb), V));
	T_CHECK(t, sur_a[0] == 0.0f && sur_b[0] == 0.0f);
	T_CHECKF(t, max_abs_diff(sur_a, sur_b, N) < TOL_ORDER, "surprisal batch vs chunks %g",
		 max_abs_diff(sur_a, sur_b, N));
	T_CHECKF(t, max_abs_diff(sur_a, sur_c, N) < TOL_ORDER, "surprisal batch vs decode %g",
		 max_abs_diff(sur_a, sur_c, N));
	T_CHECKF(t, fabs(model_state_lse(sa) - logsumexp(model_state_logits(sa), V)) < 1e-3, "prefill last_lse");
	for (int i = 1; i < N; i++) {
		T_CHECKF(t, isfinite(sur_a[i]) && sur_a[i] >= 0.0f, "surprisal[%d] = %g", i, sur_a[i]);
		mean += sur_a[i];
	}
	mean /= N - 1;
	/* English prose: a working model is far below log(V) = 12.5 nats */
	T_CHECKF(t, mean > 0.5 && mean < 5.0, "mean surprisal %g nats", mean);
	model_state_free(sa);
	model_state_free(sb);
	model_state_free(sc);
	free(lg);
	free(at_b);
	model_close(m);
}

/* ---- attention provider --------------------------------------------- */

/* Exact attention over fp32 copies of every global layer's rows: the
 * reference provider. Rows are rounded through fp16 like the state's. */
struct exact_attn {
	const struct model_hparams *hp;
	int cap;
	int gi[MODEL_MAX_LAYER];  /* model layer -> global index, -1 if local */
	int n_rows[MODEL_MAX_LAYER];
	float *k, *v;             /* [n_global][cap][n_head_kv][d_head] */
	float *p;                 /* [cap] */
	int calls, bad;
};

static int exact_attend(void *ctx, int layer, int pos, const float *q,
			const float *k, const float *v, float *out)
{
	struct exact_attn *a = ctx;
	const struct model_hparams *hp = a->hp;
	int w = hp->n_head_kv * hp->d_head, D = hp->d_head, g, group = hp->n_head / hp->n_head_kv;
	float *K, *Vv;

	a->calls++;
	if (layer < 0 || layer >= hp->n_layer || (g = a->gi[layer]) < 0 ||
	    pos != a->n_rows[g] || pos >= a->cap) {
		a->bad = 1;
		return SEKV_EINVAL;
	}
	K = a->k + (size_t)g * a->cap * w;
	Vv = a->v + (size_t)g * a->cap * w;
	for (int e = 0; e < w; e++) {
		K[(size_t)pos * w + e] = quant_f16_to_f32(quant_f32_to_f16(k[e]));
		Vv[(size_t)pos * w + e] = quant_f16_to_f32(quant_f32_to_f16(v[e]));
	}
	a->n_rows[g]++;
	for (int h = 0; h < hp->n_head; h++) {
		int kh = h / group;
		double mx = -INFINITY, sum = 0.0;
		for (int j = 0; j <= pos; j++) {
			double s = 0.0;
			for (int e = 0; e < D; e++)
				s += (double)q[h * D + e] * K[(size_t)j * w + kh * D + e];
			a->p[j] = (float)(s * hp->q_scale);
			if (a->p[j] > mx)
				mx = a->p[j];
		}
		for (int j = 0; j <= pos; j++) {
			a->p[j] = (float)exp(a->p[j] - mx);
			sum += a->p[j];
		}
		for (int e = 0; e < D; e++) {
			double o = 0.0;
			for (int j = 0; j <= pos; j++)
				o += (double)a->p[j] * Vv[(size_t)j * w + kh * D + e];
			out[h * D + e] = (float)(o / sum);
		}
	}
	return 0;
}

static void t_attn_provider(struct test_ctx *t)
{
	enum { P = 600, M = 6, CAP = P + M };
	struct model *m = open_model(t);
	const struct model_hparams *hp;
	struct model_state *sa = NULL, *sb = NULL;
	struct exact_attn ea;
	struct model_attn attn = { &ea, exact_attend };
	int32_t ids[P + M];
	uint16_t *k16 = NULL, *v16 = NULL;
	float *la = NULL, *lb = NULL;
	char err[256];
	int w, rc;

	if (!m)
		return;
	/* int8 activations would turn the providers' last-bit differences
	 * into rounding flips; this test is about the attention rows */
	model_set_act_q8(m, 0);
	hp = model_hparams(m);
	w = hp->n_head_kv * hp->d_head;
	memset(&ea, 0, sizeof ea);
	ea.hp = hp;
	ea.cap = CAP;
	ea.k = malloc(sizeof(float) * (size_t)hp->n_global * CAP * w);
	ea.v = malloc(sizeof(float) * (size_t)hp->n_global * CAP * w);
	ea.p = malloc(sizeof(float) * CAP);
	k16 = malloc(sizeof(uint16_t) * (size_t)P * w);
	v16 = malloc(sizeof(uint16_t) * (size_t)P * w);
	la = malloc(sizeof(float) * (size_t)hp->n_vocab);
	lb = malloc(sizeof(float) * (size_t)hp->n_vocab);
	T_CHECK(t, ea.k && ea.v && ea.p && k16 && v16 && la && lb);
	fill_text(ids, P + M);

	/* a: exact rows everywhere; b: no global rows, rings of another size */
	T_CHECK(t, model_state_new(&sa, m, CAP, 128, 1, err, sizeof err) == 0);
	T_CHECK(t, model_state_new(&sb, m, 8, 3, 0, err, sizeof err) == 0);
	T_CHECKF(t, prefill_all(m, sa, ids, P, 128, NULL, err, sizeof err) == 0, "%s", err);
	for (int il = 0; il < hp->n_layer; il++) {
		int g = -1;
		for (int j = 0; j < hp->n_global; j++)
			if (hp->global_layer[j] == il)
				g = j;
		ea.gi[il] = g;
		if (g >= 0) {
			T_CHECK(t, model_state_get_rows(sa, il, 0, P, k16, v16) == 0);
			quant_f16_to_f32_row(k16, ea.k + (size_t)g * CAP * w, (size_t)P * w);
			quant_f16_to_f32_row(v16, ea.v + (size_t)g * CAP * w, (size_t)P * w);
			ea.n_rows[g] = P;
		} else {
			int p0 = P - hp->swa_window;
			T_CHECK(t, model_state_get_rows(sa, il, p0, hp->swa_window, k16, v16) == 0);
			T_CHECK(t, model_state_set_rows(sb, il, p0, hp->swa_window, k16, v16) == 0);
		}
	}
	T_CHECK(t, model_state_resume(sb, P) == 0);
	/* b's rings hold 512 + 3 rows: older positions are gone */
	T_CHECK(t, model_state_kv_cap(sb, 0) == hp->swa_window + 3);
	T_CHECK(t, model_state_get_rows(sb, 0, P - model_state_kv_cap(sb, 0) - 1, 1, k16, v16) == SEKV_EINVAL);
	T_CHECK(t, model_state_get_rows(sb, 0, P - 1, 2, k16, v16) == SEKV_EINVAL);
	T_CHECK(t, model_state_get_rows(sb, hp->global_layer[0], P - 1, 1, k16, v16) == SEKV_EINVAL);
	for (int i = 0; i < M; i++) {
		T_CHECKF(t, model_decode(m, sa, ids[P + i], NULL, la, err, sizeof err) == 0, "%s", err);
		rc = model_decode(m, sb, ids[P + i], &attn, lb, err, sizeof err);
		T_CHECKF(t, rc == 0 && !ea.bad, "provider decode at %d: %s", P + i, err);
		/* same rows, same math; only the summation order differs */
		T_CHECKF(t, max_abs_diff(la, lb, hp->n_vocab) < 5e-3f, "step %d: logits differ by %g",
			 i, max_abs_diff(la, lb, hp->n_vocab));
	}
	T_CHECKF(t, ea.calls == M * hp->n_global, "%d provider calls", ea.calls);

	/* a provider error fails the forward pass */
	ea.n_rows[0] = 0;
	T_CHECK(t, model_decode(m, sb, ids[0], &attn, lb, err, sizeof err) < 0 && ea.bad);
	model_state_free(sa);
	model_state_free(sb);
	free(ea.k);
	free(ea.v);
	free(ea.p);
	free(k16);
	free(v16);
	free(la);
	free(lb);
	model_close(m);
}

/* ---- sliding window ------------------------------------------------- */

/* 1,100 tokens (over twice the 512 window) through rings of 512+256 and
 * 512+100 rows: ring slots are reused differently, results must agree.
 * The text repeats a 90-token sentence, which a working model (local
 * layers see 512 tokens back) predicts almost perfectly after a few
 * repetitions. */
static void t_sliding_window(struct test_ctx *t)
{
	enum { N = 1100 };
	struct model *m = open_model(t);
	struct model_state *sa = NULL, *sb = NULL;
	static int32_t ids[N];
	static float sa_sur[N], sb_sur[N];
	char err[256];
	double first = 0.0, late = 0.0;
	int V;

	if (!m)
		return;
	/* ring slots only: int8 activations would turn the order differences
	 * of the two rings' attention tiles into flipped roundings, which grow
	 * over 1,100 tokens to the size of the int8 error itself (measured:
	 * last logits 0.88 apart, as far as int8 from fp32 on either ring) */
	model_set_act_q8(m, 0);
	V = model_hparams(m)->n_vocab;
	fill_text(ids, N);
	T_CHECK(t, model_state_new(&sa, m, N, 256, 1, err, sizeof err) == 0);
	T_CHECK(t, model_state_new(&sb, m, N, 100, 1, err, sizeof err) == 0);
	T_CHECKF(t, prefill_all(m, sa, ids, N, 256, sa_sur, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, prefill_all(m, sb, ids, N, 100, sb_sur, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, max_abs_diff(model_state_logits(sa), model_state_logits(sb), V) < TOL_ORDER,
		 "last logits differ by %g", max_abs_diff(model_state_logits(sa), model_state_logits(sb), V));
	T_CHECKF(t, max_abs_diff(sa_sur, sb_sur, N) < TOL_ORDER, "surprisal differs by %g",
		 max_abs_diff(sa_sur, sb_sur, N));
	for (int i = 1; i < 90; i++)
		first += sa_sur[i];
	for (int i = N - 90; i < N; i++) {
		T_CHECKF(t, isfinite(sa_sur[i]), "surprisal[%d] = %g", i, sa_sur[i]);
		late += sa_sur[i];
	}
	first /= 89;
	late /= 90;
	T_CHECKF(t, late < 0.5 && late < first / 4, "mean surprisal first %g, late %g", first, late);
	model_state_free(sa);
	model_state_free(sb);
	model_close(m);
}

/* ---- goldens -------------------------------------------------------- */

static cJSON *golden_load(struct test_ctx *t)
{
	return test_json_load(t, GOLDEN_PATH);
}

/* llama.cpp quantises activations (Q8_0 for Q5_0/Q8_0 weights, Q8_K for
 * Q4_K/Q6_K) and rounds GELU through an fp16 table; we keep fp32. At
 * position 0, simulating exactly those two roundings in numpy reproduces
 * llama.cpp to 1e-4, while our logits match an fp64 numpy forward to
 * 5e-3: the gap is llama.cpp's rounding. Measured over the golden top-10:
 * 0.68 at most, 0.12-0.45 at most positions. A real bug moves them far
 * more: no sliding window 3.5-11, RoPE base 1e6 on local layers 3.3-6.8.
 * So logits must agree to TOL_GOLDEN. tools/make_goldens.py picks
 * positions whose reference top-6 logits are at least ~0.6 apart, so the
 * top-5 must come out as the same ids in the same order. */
#define TOL_GOLDEN 1.0f

/* Our top-5 ids by logit, in order, must equal gid[0..5). */
static int top5_matches(const float *lg, int V, const int *gid, const float *glg, int nt,
			char *why, size_t len)
{
	int ours[5];

	(void)nt;
	for (int r = 0; r < 5; r++) {
		int best = -1;
		for (int i = 0; i < V; i++) {
			int taken = 0;
			for (int q = 0; q < r; q++)
				taken |= ours[q] == i;
			if (!taken && (best < 0 || lg[i] > lg[best]))
				best = i;
		}
		ours[r] = best;
		if (best != gid[r]) {
			snprintf(why, len, "rank %d: id %d (%.3f), golden %d (%.3f)", r, best,
				 lg[best], gid[r], glg[r]);
			return 0;
		}
	}
	return 1;
}

/* decode_last = 0: every position through prefill (fp32 activations);
 * 1: tokens before a golden position through prefill, the position itself
 * through model_decode with int8 activations (the decode path users run,
 * quantised as llama.cpp quantises). */
static void golden_run(struct test_ctx *t, int decode_last)
{
	cJSON *doc = golden_load(t);
	const cJSON *jp, *jpos, *jtop, *e;
	struct model *m = NULL;
	struct model_state *s = NULL;
	int32_t *ids = NULL;
	int n = 0, done = 0, np, V;
	char err[256];
	float worst = 0.0f;

	if (!doc)
		return;
	jp = cJSON_GetObjectItemCaseSensitive(doc, "prompt_ids");
	jpos = cJSON_GetObjectItemCaseSensitive(doc, "positions");
	jtop = cJSON_GetObjectItemCaseSensitive(doc, "top");
	np = cJSON_GetArraySize(jpos);
	if (!cJSON_IsArray(jp) || !cJSON_IsArray(jpos) || !cJSON_IsArray(jtop) ||
	    np < 1 || cJSON_GetArraySize(jtop) != np || !(ids = malloc(sizeof(int32_t) * (size_t)cJSON_GetArraySize(jp)))) {
		cJSON_Delete(doc);
		T_FAIL(t, "%s: missing prompt_ids/positions/top", GOLDEN_PATH);
		return;
	}
	cJSON_ArrayForEach(e, jp)
		ids[n++] = (int32_t)e->valueint;
	if (n < 2 * 512) {
		T_FAIL(t, "golden prompt of %d tokens does not span two windows", n);
		goto out;
	}
	if (!(m = open_model(t)))
		goto out;
	V = model_hparams(m)->n_vocab;
	if (model_state_new(&s, m, n, 512, 1, err, sizeof err)) {
		T_FAIL(t, "state: %s", err);
		goto out;
	}
	for (int k = 0; k < np; k++) {
		int pos = cJSON_GetArrayItem(jpos, k)->valueint;
		const cJSON *top = cJSON_GetArrayItem(jtop, k);
		int gid[10], nt = cJSON_GetArraySize(top);
		float glg[10];

		if (pos < done || pos >= n || nt < 5 || nt > 10) {
			T_FAIL(t, "golden position %d / %d entries out of order or range", pos, nt);
			goto out;
		}
		while (done <= pos - decode_last) {
			int c = pos + 1 - decode_last - done < 512 ? pos + 1 - decode_last - done : 512;
			if (model_prefill(m, s, ids + done, c, NULL, err, sizeof err)) {
				T_FAIL(t, "prefill: %s", err);
				goto out;
			}
			done += c;
		}
		if (decode_last) {
			if (model_decode(m, s, ids[pos], NULL, NULL, err, sizeof err)) {
				T_FAIL(t, "decode: %s", err);
				goto out;
			}
			done++;
		}
		for (int j = 0; j < nt; j++) {
			const cJSON *it = cJSON_GetArrayItem(top, j);
			gid[j] = cJSON_GetObjectItemCaseSensitive(it, "id")->valueint;
			glg[j] = (float)cJSON_GetObjectItemCaseSensitive(it, "logit")->valuedouble;
			if (gid[j] < 0 || gid[j] >= V) {
				T_FAIL(t, "golden id %d", gid[j]);
				goto out;
			}
			if (fabsf(model_state_logits(s)[gid[j]] - glg[j]) > worst)
				worst = fabsf(model_state_logits(s)[gid[j]] - glg[j]);
		}
		if (!top5_matches(model_state_logits(s), V, gid, glg, nt, err, sizeof err)) {
			T_FAIL(t, "position %d: %s", pos, err);
			goto out;
		}
	}
	if (worst > TOL_GOLDEN)
		T_FAIL(t, "max |logit - golden| over top-10 = %.3f > %.1f", worst, TOL_GOLDEN);
out:
	model_state_free(s);
	model_close(m);
	free(ids);
	cJSON_Delete(doc);
}

static void t_golden(struct test_ctx *t)
{
	golden_run(t, 0);
}

static void t_golden_decode(struct test_ctx *t)
{
	golden_run(t, 1);
}

const struct test_case test_model[] = {
	{ "model_hparams_gemma3_270m", t_hparams },
	{ "model_rejects_bad_arguments", t_bad_arguments },
	{ "model_prefill_chunks_match_batch_and_decode", t_chunks_match },
	{ "model_decode_attn_provider_matches_exact", t_attn_provider },
	{ "model_sliding_window_long_prompt", t_sliding_window },
	{ "gemma3_270m_logits_vs_llamacpp_golden", t_golden },
	{ "gemma3_270m_decode_int8_act_logits_vs_llamacpp_golden", t_golden_decode },
	{ NULL, NULL },
};
