/* test_quant.c - quant.c against goldens from an independent implementation
 * (tests/golden/quant_rows.json, written by tools/gen_quant_goldens.py with
 * the PyPI gguf package: dequant_<type>_vs_golden, every type and kernel
 * set), the SIMD kernels against the scalar ones, the matvecs against the
 * dot products, reads bounded by guard pages, and exhaustive fp16 round
 * trips. Real model rows are read through gguf.c from test_model_path();
 * the model is required (make test fetches it), so its absence is a failure.
 */
#include "tests/test.h"

#include "engine/gguf/gguf.h"
#include "engine/quant/quant.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define GOLDEN_PATH "tests/golden/quant_rows.json"

/* ---- helpers ---------------------------------------------------------- */

static uint32_t type_by_name(const char *name)
{
	for (uint32_t ty = 0; ty < 64; ty++)
		if (quant_block_elems(ty) && !strcmp(quant_name(ty), name))
			return ty;
	return UINT32_MAX;
}

static float max_abs(const float *x, size_t n)
{
	float m = 0.0f;
	for (size_t i = 0; i < n; i++)
		m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
	return m;
}

/* Compares quant_dot_row(type, q) with sum(x*y) in double, where x is the
 * dequantised row. Tolerance 1e-4 relative to sum |x_i*y_i|: the kernels
 * sum n fp32 products in 16-32 partial sums (worst-case error about
 * (n/16 + 32) * 2^-24 relative to that sum, < 1e-5 for n <= 2048), and
 * the absolute-product sum stays meaningful when cancellation drives the
 * dot itself near zero. */
static int dot_ok(uint32_t type, const void *q, const float *x, size_t n,
		  uint64_t seed, double *err_out, double *ref_out)
{
	float *y = malloc(n * sizeof *y);
	double ref = 0.0, mag = 0.0, got;

	*err_out = *ref_out = NAN;
	if (!y)
		return 0;
	test_fill_random(y, n, seed);
	for (size_t i = 0; i < n; i++) {
		ref += (double)x[i] * y[i];
		mag += fabs((double)x[i] * y[i]);
	}
	got = quant_dot_row(type, q, y, n);
	free(y);
	*err_out = fabs(got - ref);
	*ref_out = ref;
	return *err_out <= 1e-4 * mag;
}

/* Hex text -> bytes; -1 if not hex or longer than cap. */
static int hex_decode(const char *hex, uint8_t *out, size_t cap, size_t *n)
{
	size_t len = strlen(hex);
	if (len % 2 || len / 2 > cap)
		return -1;
	for (size_t i = 0; i < len / 2; i++) {
		unsigned v;
		if (sscanf(hex + 2 * i, "%2x", &v) != 1)
			return -1;
		out[i] = (uint8_t)v;
	}
	*n = len / 2;
	return 0;
}

/* ---- every type against gguf-py --------------------------------------- */

/* tests/golden/quant_rows.json holds cases of three sources per type
 * (tools/gen_quant_goldens.py): gguf.quants.quantize of seeded random
 * data, rows of real tensors (Gemma 3 270M, SmolLM2-135M, Qwen2.5-Coder
 * 0.5B) and seeded random bytes with finite fp16 scales. */
enum { SRC_QUANTIZE = 1, SRC_MODEL = 2, SRC_RANDOM = 4 };

#define GOLDEN_MAX_N 8192
#define GOLDEN_MAX_BYTES (GOLDEN_MAX_N * 4)

struct golden_case {
	uint32_t type;
	size_t n, n_raw;
	uint8_t raw[GOLDEN_MAX_BYTES];  /* the stored row */
	float want[GOLDEN_MAX_N];       /* gguf.quants.dequantize of raw */
	float got[GOLDEN_MAX_N];
	float y[GOLDEN_MAX_N];          /* test_fill_random(y, n, dot_seed) */
	double dot, dot_abs;            /* numpy float64 sum of want*y, |want*y| */
	int8_t aq[GOLDEN_MAX_N];
	float ad[GOLDEN_MAX_N / 32], as[GOLDEN_MAX_N / 32];
};

static const enum quant_impl k_impls[] = {
	QUANT_IMPL_SCALAR, QUANT_IMPL_AVX2, QUANT_IMPL_AVX512,
};

/* Fills c from one JSON case; 0, or -1 after recording a failure. */
static int golden_case_parse(struct test_ctx *t, const cJSON *e, uint32_t type,
			     struct golden_case *c)
{
	const char *hex = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "hex"));
	const char *vals = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "values"));
	const cJSON *n = cJSON_GetObjectItemCaseSensitive(e, "n");
	const cJSON *seed = cJSON_GetObjectItemCaseSensitive(e, "dot_seed");
	const cJSON *dot = cJSON_GetObjectItemCaseSensitive(e, "dot");
	const cJSON *dot_abs = cJSON_GetObjectItemCaseSensitive(e, "dot_abs");
	size_t n_vals;

	c->type = type;
	if (!hex || !vals || !cJSON_IsNumber(n) || !cJSON_IsNumber(seed) || !cJSON_IsNumber(dot) ||
	    !cJSON_IsNumber(dot_abs) || n->valuedouble < 1 || n->valuedouble > GOLDEN_MAX_N ||
	    hex_decode(hex, c->raw, sizeof c->raw, &c->n_raw) ||
	    hex_decode(vals, (uint8_t *)c->want, sizeof c->want, &n_vals)) {
		T_FAIL(t, "%s: malformed golden case", quant_name(type));
		return -1;
	}
	c->n = (size_t)n->valuedouble;
	if (n_vals != c->n * sizeof(float) || quant_row_bytes(type, c->n) != c->n_raw) {
		T_FAIL(t, "%s: %zu values in %zu bytes (row bytes %zu)", quant_name(type),
		       n_vals / sizeof(float), c->n_raw, quant_row_bytes(type, c->n));
		return -1;
	}
	c->dot = dot->valuedouble;
	c->dot_abs = dot_abs->valuedouble;
	test_fill_random(c->y, c->n, (unsigned long long)seed->valuedouble);
	return 0;
}

/* A model case's bytes are the row gguf.c reads from that model, when the
 * model is the one the tests run with (the default Gemma 3 270M). */
static void golden_case_vs_model(struct test_ctx *t, const cJSON *e, struct golden_case *c,
				 struct gguf *g)
{
	const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "tensor"));
	const cJSON *row = cJSON_GetObjectItemCaseSensitive(e, "row");
	const struct gguf_tensor *tn = name ? gguf_find_tensor(g, name) : NULL;
	size_t rb;

	if (!tn || tn->type != c->type || !cJSON_IsNumber(row) || tn->ne[0] != c->n) {
		T_FAIL(t, "tensor %s missing or not a %s row of %zu", name ? name : "?",
		       quant_name(c->type), c->n);
		return;
	}
	rb = quant_row_bytes(tn->type, tn->ne[0]);
	if (row->valuedouble < 0 || (uint64_t)row->valuedouble >= tn->nbytes / rb) {
		T_FAIL(t, "%s: golden row %g out of range", name, row->valuedouble);
		return;
	}
	if (memcmp((const uint8_t *)tn->data + (size_t)row->valuedouble * rb, c->raw, rb))
		T_FAIL(t, "%s row %g: gguf.c's bytes differ from the golden's", name, row->valuedouble);
}

/* Dequantisation: the float types' conversions are exact, so equal bits
 * (or both NaN) are required. Block types within 1e-6 * max|row|: gguf-py
 * evaluates the same formulas in fp32 (d*sc*q - dmin*m), possibly
 * grouping products differently; each value then differs by at most a
 * few fp32 roundings (2^-24 relative) of terms no larger than ~2*max|row|,
 * i.e. < 3e-7 * max|row|; a wrong bit in any layout gives errors >= one
 * quantisation step, orders of magnitude above this. */
static int golden_case_dequant(struct test_ctx *t, const char *what, struct golden_case *c)
{
	int exact = quant_block_elems(c->type) == 1;
	float tol = exact ? 0.0f : 1e-6f * max_abs(c->want, c->n);

	quant_dequant_row(c->type, c->raw, c->got, c->n);
	for (size_t i = 0; i < c->n; i++) {
		if (exact ? memcmp(&c->got[i], &c->want[i], sizeof(float)) != 0
			  : !(fabsf(c->got[i] - c->want[i]) <= tol)) {
			T_FAIL(t, "%s [%zu]: got %.9g want %.9g (tol %.3g)", what, i, c->got[i],
			       c->want[i], tol);
			return -1;
		}
	}
	return 0;
}

/* Dot products against numpy's float64 dot of the golden row with y:
 * quant_dot_row through every kernel set this CPU has within
 * 1e-5 * sum |x_i y_i|. The fp32 kernels sum products in 8-32 partial
 * sums of at most n/8 terms; with products of random sign the rounding
 * errors add like a random walk, about sqrt(n/8) * 2^-24 ~ 1.5e-6 of
 * sum|x y| for n = 4864 (measured: below 3e-7 on every golden case),
 * while a wrong code costs d|y_i| in every block where it occurs, and a
 * wrong scale or layout ~1e-2 of the sum.
 * Int8 activations (where quant_act_supported): each set within 1e-5
 * (relative to its own absolute sum) of the golden row times the
 * quantised vector in double (the integer products are exact; only the
 * fp32 block sums round), and within the activation rounding of the
 * golden dot: sum_i |x_i| |y_i - q_i d_i| (measured) plus the same slack. */
static int golden_case_dots(struct test_ctx *t, const char *what, struct golden_case *c)
{
	struct quant_act a = { 0, c->aq, c->ad, c->as };
	double exact = 0.0, mag = 0.0, bound = 0.0;

	for (size_t k = 0; k < sizeof k_impls / sizeof k_impls[0]; k++) {
		float got;
		if (!quant_impl_available(k_impls[k]))
			continue;
		got = quant_dot_row_impl(k_impls[k], c->type, c->raw, c->y, c->n);
		if (!(fabs((double)got - c->dot) <= 1e-5 * c->dot_abs)) {
			T_FAIL(t, "%s [%s]: dot %.9g vs golden %.17g (sum|xy| %.6g)", what,
			       quant_impl_name(k_impls[k]), got, c->dot, c->dot_abs);
			return -1;
		}
	}
	if (!quant_act_supported(c->type, c->n))
		return 0;
	quant_act_quantize(c->y, c->n, &a);
	for (size_t i = 0; i < c->n; i++) {
		double av = (double)a.q[i] * a.d[i / 32];
		exact += (double)c->want[i] * av;
		mag += fabs((double)c->want[i] * av);
		bound += fabs((double)c->want[i]) * fabs((double)c->y[i] - av);
	}
	for (size_t k = 0; k < sizeof k_impls / sizeof k_impls[0]; k++) {
		float got;
		if (!quant_impl_available(k_impls[k]))
			continue;
		got = quant_act_dot_impl(k_impls[k], c->type, c->raw, &a);
		if (!(fabs((double)got - exact) <= 1e-5 * mag + 1e-30)) {
			T_FAIL(t, "%s [%s]: int8 dot %.9g vs golden row x int8 vector %.17g (sum %.6g)",
			       what, quant_impl_name(k_impls[k]), got, exact, mag);
			return -1;
		}
		if (!(fabs((double)got - c->dot) <= bound + 1e-5 * c->dot_abs)) {
			T_FAIL(t, "%s [%s]: int8 dot %.9g vs golden %.17g, beyond the rounding bound %.3g",
			       what, quant_impl_name(k_impls[k]), got, c->dot, bound);
			return -1;
		}
	}
	return 0;
}

/* Every golden case of `type_name`: dequantisation, then the dot products;
 * the sources seen must be exactly `want_src` (so no case kind goes
 * missing from the golden file unnoticed). */
static void check_type_golden(struct test_ctx *t, const char *type_name, int want_src)
{
	static struct golden_case c;
	const char *model = test_model_path(), *base = strrchr(model, '/');
	char err[512], what[160];
	cJSON *doc = test_json_load(t, GOLDEN_PATH);
	struct gguf *g = NULL;
	const cJSON *e;
	uint32_t type = type_by_name(type_name);
	int seen = 0;

	if (!doc)
		return;
	base = base ? base + 1 : model;
	T_CHECKF(t, type != UINT32_MAX && quant_supported(type), "%s not supported", type_name);
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(doc, "cases")) {
		const char *ty = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "type"));
		const char *src = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "source"));
		const char *mdl = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "model"));
		const char *tns = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "tensor"));
		int bit;

		if (!ty || strcmp(ty, type_name))
			continue;
		bit = !src ? 0 : !strcmp(src, "quantize") ? SRC_QUANTIZE :
		      !strcmp(src, "model") ? SRC_MODEL : !strcmp(src, "random") ? SRC_RANDOM : 0;
		if (!bit || golden_case_parse(t, e, type, &c)) {
			T_FAIL(t, "%s: bad golden case (source %s)", type_name, src ? src : "?");
			break;
		}
		seen |= bit;
		snprintf(what, sizeof what, "%s %s%s%s%s%s", type_name, src, mdl ? " " : "",
			 mdl ? mdl : "", tns ? " " : "", tns ? tns : "");
		if (bit == SRC_MODEL && mdl && !strcmp(mdl, base)) {
			if (!g && gguf_open(&g, model, err, sizeof err)) {
				T_FAIL(t, "model required (make model): %s", err);
				break;
			}
			golden_case_vs_model(t, e, &c, g);
		}
		if (t->failed || golden_case_dequant(t, what, &c) || golden_case_dots(t, what, &c))
			break;
	}
	gguf_close(g);
	cJSON_Delete(doc);
	if (!t->failed && seen != want_src)
		T_FAIL(t, "%s: golden sources 0x%x, want 0x%x (quantize 1, model 2, random 4)",
		       type_name, seen, want_src);
}

#define SRC_QR (SRC_QUANTIZE | SRC_RANDOM)
#define SRC_ALL (SRC_QUANTIZE | SRC_MODEL | SRC_RANDOM)
static void dequant_f32_vs_golden(struct test_ctx *t) { check_type_golden(t, "F32", SRC_QUANTIZE | SRC_MODEL); }
static void dequant_f16_vs_golden(struct test_ctx *t) { check_type_golden(t, "F16", SRC_QR); }
static void dequant_bf16_vs_golden(struct test_ctx *t) { check_type_golden(t, "BF16", SRC_QR); }
static void dequant_q4_0_vs_golden(struct test_ctx *t) { check_type_golden(t, "Q4_0", SRC_QR); }
static void dequant_q4_1_vs_golden(struct test_ctx *t) { check_type_golden(t, "Q4_1", SRC_ALL); }
static void dequant_q5_0_vs_golden(struct test_ctx *t) { check_type_golden(t, "Q5_0", SRC_ALL); }
static void dequant_q5_1_vs_golden(struct test_ctx *t) { check_type_golden(t, "Q5_1", SRC_QR); }
static void dequant_q8_0_vs_golden(struct test_ctx *t) { check_type_golden(t, "Q8_0", SRC_ALL); }
static void dequant_q2_k_vs_golden(struct test_ctx *t) { check_type_golden(t, "Q2_K", SRC_RANDOM); }
static void dequant_q3_k_vs_golden(struct test_ctx *t) { check_type_golden(t, "Q3_K", SRC_RANDOM); }
static void dequant_q4_k_vs_golden(struct test_ctx *t) { check_type_golden(t, "Q4_K", SRC_MODEL | SRC_RANDOM); }
static void dequant_q5_k_vs_golden(struct test_ctx *t) { check_type_golden(t, "Q5_K", SRC_RANDOM); }
static void dequant_q6_k_vs_golden(struct test_ctx *t) { check_type_golden(t, "Q6_K", SRC_MODEL | SRC_RANDOM); }
static void dequant_iq4_nl_vs_golden(struct test_ctx *t) { check_type_golden(t, "IQ4_NL", SRC_RANDOM); }

/* ---- dot and matvec on whole tensors ---------------------------------- */

/* For one tensor of each model type, quant_dot_row over 64 rows matches the
 * double-precision dot of quant_dequant_row, and quant_matvec over those
 * rows equals quant_dot_row row by row. */
static void matvec_vs_dot_row_model(struct test_ctx *t)
{
	static const char *names[] = {
		"token_embd.weight", "blk.0.attn_k.weight", "blk.0.attn_output.weight",
		"blk.0.ffn_down.weight", "blk.1.attn_q.weight",
	};
	char err[512];
	struct gguf *g = NULL;

	if (gguf_open(&g, test_model_path(), err, sizeof err))
		T_CHECKF(t, 0, "model required (make model): %s", err);
	for (size_t k = 0; k < sizeof names / sizeof names[0] && !t->failed; k++) {
		const struct gguf_tensor *tn = gguf_find_tensor(g, names[k]);
		enum { ROWS = 64 };
		size_t n, rb;
		float *x, *deq, mv[ROWS];
		double derr, dref;

		if (!tn) {
			T_FAIL(t, "tensor %s missing", names[k]);
			break;
		}
		n = (size_t)tn->ne[0];
		rb = quant_row_bytes(tn->type, n);
		x = malloc(n * sizeof *x);
		deq = malloc(n * sizeof *deq);
		if (!x || !deq) {
			free(x), free(deq);
			T_FAIL(t, "out of memory");
			break;
		}
		test_fill_random(x, n, 1234 + k);
		quant_matvec(tn->type, tn->data, rb, ROWS, (int)n, x, mv);
		for (int r = 0; r < ROWS && !t->failed; r++) {
			const uint8_t *q = (const uint8_t *)tn->data + (size_t)r * rb;
			float d = quant_dot_row(tn->type, q, x, n);
			if (!(fabsf(mv[r] - d) <= 1e-5f * (fabsf(d) + 1e-6f)))
				T_FAIL(t, "%s row %d: matvec %.9g vs dot %.9g", names[k], r, mv[r], d);
			quant_dequant_row(tn->type, q, deq, n);
			if (!t->failed && !dot_ok(tn->type, q, deq, n, 1000 + (uint64_t)r, &derr, &dref))
				T_FAIL(t, "%s row %d: dot error %.3g (ref %.9g)", names[k], r, derr, dref);
		}
		free(x), free(deq);
	}
	gguf_close(g);
}

/* F32, F16 and BF16 rows long enough to use the chunked paths (and a
 * ragged tail): dequant is exact and the dot matches the double sum. */
static void dot_float_types_vs_double(struct test_ctx *t)
{
	enum { N = 1000 };
	static float x[N], deq[N];
	static uint16_t h[N], bf[N];
	static const uint32_t types[] = {QT_F32, QT_F16, QT_BF16};
	double derr = 0.0, dref = 0.0;

	test_fill_random(x, N, 42);
	quant_f32_to_f16_row(x, h, N);
	for (int i = 0; i < N; i++) {
		uint32_t u;
		memcpy(&u, &x[i], 4);
		bf[i] = (uint16_t)(u >> 16);
	}
	for (size_t k = 0; k < 3; k++) {
		const void *q = types[k] == QT_F32 ? (const void *)x :
				types[k] == QT_F16 ? (const void *)h : (const void *)bf;
		quant_dequant_row(types[k], q, deq, N);
		for (int i = 0; i < N; i++) {
			float want = types[k] == QT_F32 ? x[i] : types[k] == QT_F16 ?
				     quant_f16_to_f32(h[i]) : 0.0f;
			if (types[k] == QT_BF16) {
				uint32_t u = (uint32_t)bf[i] << 16;
				memcpy(&want, &u, 4);
			}
			T_CHECKF(t, deq[i] == want, "%s [%d]: %.9g vs %.9g",
				 quant_name(types[k]), i, deq[i], want);
		}
		T_CHECKF(t, dot_ok(types[k], q, deq, N, 5, &derr, &dref),
			 "%s: dot error %.3g (ref %.9g)", quant_name(types[k]), derr, dref);
	}
}

/* ---- SIMD kernels against the scalar reference ------------------------ */

/* One row of `type`: the AVX2 dot must equal the scalar dot within
 * 1e-5 * sum|x_i*y_i| (both sum the same fp32 products in different orders;
 * their rounding differences stay near 1e-7 of that sum, and a wrong
 * nibble, bit or scale is a whole quantisation step, ~1e-2 of it), and the
 * double-precision dot of the dequantised row within 1e-4 of that sum.
 * The absolute-product sum keeps the bound meaningful when the dot itself
 * cancels to near zero. Returns 0 after recording a failure. */
static int simd_row_ok(struct test_ctx *t, const char *what, uint32_t type,
		       const uint8_t *q, size_t n, uint64_t seed)
{
	float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
	double ref = 0.0, mag = 0.0;
	float s, v;
	int ok = 0;

	if (!x || !y) {
		T_FAIL(t, "out of memory");
		goto out;
	}
	quant_dequant_row(type, q, x, n);
	test_fill_random(y, n, seed);
	for (size_t i = 0; i < n; i++) {
		ref += (double)x[i] * y[i];
		mag += fabs((double)x[i] * y[i]);
	}
	s = quant_dot_row_impl(QUANT_IMPL_SCALAR, type, q, y, n);
	v = quant_dot_row_impl(QUANT_IMPL_AVX2, type, q, y, n);
	if (!(fabs((double)v - s) <= 1e-5 * mag))
		T_FAIL(t, "%s %s: avx2 %.9g vs scalar %.9g (sum|xy| %.6g)",
		       quant_name(type), what, v, s, mag);
	else if (!(fabs((double)v - ref) <= 1e-4 * mag))
		T_FAIL(t, "%s %s: avx2 %.9g vs double %.9g (sum|xy| %.6g)",
		       quant_name(type), what, v, ref, mag);
	else
		ok = 1;
out:
	free(x);
	free(y);
	return ok;
}

#define SKIP_WITHOUT_AVX2(t) do { if (!quant_impl_available(QUANT_IMPL_AVX2)) \
	T_SKIP(t, "CPU lacks AVX2/FMA/F16C (or not an x86-64 build)"); } while (0)

/* Real rows of the model the tests run with (the default Gemma 3 270M:
 * token_embd Q8_0, attention and FFN weights Q5_0, Q4_K, Q6_K and Q8_0;
 * SEKV_MODEL=SmolLM2 adds Q4_1), every tensor of a format with fused
 * kernels: 16 rows spread over each, so every layer's scales and bit
 * patterns are exercised. */
static void dot_avx2_vs_scalar_model_rows(struct test_ctx *t)
{
	static const uint32_t types[] = {QT_Q8_0, QT_Q5_0, QT_Q4_1, QT_Q4_K, QT_Q6_K};
	int n_tensor = 0;
	char err[512], name[96];
	struct gguf *g = NULL;

	SKIP_WITHOUT_AVX2(t);
	if (gguf_open(&g, test_model_path(), err, sizeof err))
		T_CHECKF(t, 0, "model required (make model): %s", err);
	for (uint64_t ti = 0; ti < g->n_tensor && !t->failed; ti++) {
		const struct gguf_tensor *tn = &g->tensor[ti];
		size_t n = (size_t)tn->ne[0], rb;
		uint64_t rows;
		int fused = 0;

		for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
			fused |= tn->type == types[i];
		if (!fused || tn->n_dims != 2)
			continue;
		snprintf(name, sizeof name, "%.*s", (int)tn->name.len, tn->name.ptr);
		rb = quant_row_bytes(tn->type, n);
		rows = tn->ne[1];
		for (uint64_t r = 0; r < 16 && rows; r++) {
			uint64_t row = r * (rows - 1) / 15;
			if (!simd_row_ok(t, name, tn->type,
					 (const uint8_t *)tn->data + row * rb, n, row + 3))
				break;
		}
		n_tensor++;
	}
	gguf_close(g);
	T_CHECKF(t, t->failed || n_tensor > 0, "no tensor with fused kernels in %s", test_model_path());
}

/* Random bytes in every position (so all nibble, high-bit and scale
 * patterns occur) with fp16 scales replaced by finite values of either
 * sign in [1e-3, 1e-1); rows of 1 to 16 super-blocks' worth of elements,
 * plus all-zero and all-ones payloads. */
static void dot_avx2_vs_scalar_random_blocks(struct test_ctx *t)
{
	static const uint32_t types[] = {QT_Q8_0, QT_Q5_0, QT_Q4_1, QT_Q4_K, QT_Q6_K};
	static const size_t lens[] = {32, 64, 96, 256, 512, 640, 1024, 2048, 4096};
	static uint8_t q[4096 / 32 * 210];
	uint64_t s = 0x9e3779b97f4a7c15ull;

	SKIP_WITHOUT_AVX2(t);
	for (size_t ti = 0; ti < sizeof types / sizeof types[0] && !t->failed; ti++) {
		uint32_t type = types[ti];
		size_t be = quant_block_elems(type), bb = quant_block_bytes(type);
		for (size_t li = 0; li < sizeof lens / sizeof lens[0] && !t->failed; li++) {
			size_t n = lens[li];
			char what[64];
			if (n % be)
				continue;
			for (int pat = 0; pat < 4 && !t->failed; pat++) {
				size_t nb = n / be;
				for (size_t i = 0; i < nb * bb; i++) {
					s ^= s << 13, s ^= s >> 7, s ^= s << 17;
					q[i] = pat == 0 ? 0x00 : pat == 1 ? 0xff : (uint8_t)(s >> 32);
				}
				for (size_t b = 0; b < nb; b++) {
					uint8_t *blk = q + b * bb;
					/* f16 fields: d first (Q8_0, Q5_0), d and m or
					 * dmin (Q4_1, Q4_K), d last (Q6_K) */
					int n_f16 = type == QT_Q4_K || type == QT_Q4_1 ? 2 : 1;
					size_t at = type == QT_Q6_K ? 208 : 0;
					for (int f = 0; f < n_f16; f++) {
						float v;
						uint16_t h;
						s ^= s << 13, s ^= s >> 7, s ^= s << 17;
						v = (float)(1e-3 + 0.099 * (double)(s >> 40) / 16777216.0);
						h = quant_f32_to_f16((s & 1) ? -v : v);
						blk[at + 2 * (size_t)f] = (uint8_t)h;
						blk[at + 2 * (size_t)f + 1] = (uint8_t)(h >> 8);
					}
				}
				snprintf(what, sizeof what, "n=%zu pattern %d", n, pat);
				simd_row_ok(t, what, type, q, n, (uint64_t)(li * 4 + pat));
			}
		}
	}
}

/* quant_dot_row must run the best set the CPU has (AVX-512 VNNI, else
 * AVX2+FMA+F16C; scalar when SEKV_NO_SIMD asks for it), and its result
 * must be bit-identical to that set's, so the dispatch is not bypassed. */
static void quant_dispatch_picks_best_set(struct test_ctx *t)
{
	const char *off = getenv("SEKV_NO_SIMD");
	int forced = off && *off && strcmp(off, "0");
	enum quant_impl want = forced ? QUANT_IMPL_SCALAR
			     : quant_impl_available(QUANT_IMPL_AVX512) ? QUANT_IMPL_AVX512
								    : QUANT_IMPL_AVX2;
	uint8_t q[8 * 210];
	float y[2048], got, ref;

	SKIP_WITHOUT_AVX2(t);
	T_CHECKF(t, quant_impl_active() == want, "active kernels %s, want %s (SEKV_NO_SIMD=%s)",
		 quant_impl_name(quant_impl_active()), quant_impl_name(want), off ? off : "unset");
	test_fill_random(y, 2048, 17);
	for (size_t i = 0; i < sizeof q; i++)
		q[i] = (uint8_t)(i * 131 + 7);
	for (int b = 0; b < 8; b++)
		q[b * 210 + 209] = 0x1c; /* Q6_K d = ~0.0039, finite */
	got = quant_dot_row(QT_Q6_K, q, y, 2048);
	ref = quant_dot_row_impl(want, QT_Q6_K, q, y, 2048);
	T_CHECKF(t, memcmp(&got, &ref, sizeof got) == 0, "quant_dot_row %.9g vs %s %.9g",
		 got, quant_impl_name(want), ref);
}

/* quant_matvec_impl is quant_dot_row_impl row by row, bit for bit, for
 * every available set, on the fused types and one decoded block at a time
 * (Q2_K); rows padded past their data (row_bytes > quant_row_bytes). */
static void matvec_impl_matches_dot_row_impl(struct test_ctx *t)
{
	static const uint32_t types[] = {QT_Q8_0, QT_Q5_0, QT_Q4_1, QT_Q4_K, QT_Q6_K, QT_Q2_K};
	static const enum quant_impl impls[] = {QUANT_IMPL_SCALAR, QUANT_IMPL_AVX2, QUANT_IMPL_AVX512};
	enum { ROWS = 5, COLS = 512, PAD = 6 };
	static uint8_t w[ROWS * (COLS / 32 * 34 + PAD)];
	static float x[COLS], y[ROWS];

	test_fill_random(x, COLS, 31);
	for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
		size_t rb = quant_row_bytes(types[ti], COLS) + PAD, bb = quant_block_bytes(types[ti]);
		for (size_t i = 0; i < sizeof w; i++)
			w[i] = (uint8_t)(i * 97 + ti * 13 + 5);
		/* finite fp16 scales: every block's d, m, dmin fields at 0x1c1c */
		for (int r = 0; r < ROWS; r++)
			for (size_t b = 0; b < COLS / quant_block_elems(types[ti]); b++) {
				uint8_t *blk = w + (size_t)r * rb + b * bb;
				size_t at = types[ti] == QT_Q6_K ? 208 : types[ti] == QT_Q2_K ? 80 : 0;
				memset(blk + at, 0x1c, types[ti] == QT_Q6_K || types[ti] == QT_Q8_0 ||
						       types[ti] == QT_Q5_0 ? 2 : 4);
			}
		for (size_t k = 0; k < sizeof impls / sizeof impls[0]; k++) {
			if (!quant_impl_available(impls[k]))
				continue;
			quant_matvec_impl(impls[k], types[ti], w, rb, ROWS, COLS, x, y);
			for (int r = 0; r < ROWS; r++) {
				float d = quant_dot_row_impl(impls[k], types[ti], w + (size_t)r * rb, x, COLS);
				T_CHECKF(t, !memcmp(&d, &y[r], sizeof d) && isfinite(d),
					 "%s [%s] row %d: matvec %.9g, dot %.9g", quant_name(types[ti]),
					 quant_impl_name(impls[k]), r, y[r], d);
			}
		}
	}
}

/* ---- reads stay inside the row ---------------------------------------- */

/* n bytes between two PROT_NONE pages, flush against the trailing one
 * (at_end) or the leading one, so a kernel reading one byte too many (or
 * too early) faults; 4-byte aligned when n is. */
struct guarded {
	uint8_t *map;
	size_t map_len;
	uint8_t *p;
};

static int guarded_new(struct guarded *g, size_t n, int at_end)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), rw = (n + page - 1) / page * page;

	g->map_len = rw + 2 * page;
	g->map = mmap(NULL, g->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (g->map == MAP_FAILED)
		return -1;
	if (mprotect(g->map, page, PROT_NONE) || mprotect(g->map + page + rw, page, PROT_NONE)) {
		munmap(g->map, g->map_len);
		return -1;
	}
	g->p = at_end ? g->map + page + rw - n : g->map + page;
	return 0;
}

static void guarded_free(struct guarded *g)
{
	munmap(g->map, g->map_len);
}

/* Every supported block type, every kernel set: quant_dequant_row,
 * quant_dot_row_impl and (where supported) quant_act_dot_impl read only
 * the row's quant_row_bytes and the vectors' n elements (n/32 scales):
 * each buffer sits flush against a guard page, at its end and then at its
 * start, with lengths that leave every tail of the multi-block loops (1 to
 * 4 leftover blocks). A stray read faults and ends the run. The results
 * must also be finite (random codes, finite scales). */
static void kernels_read_only_their_row(struct test_ctx *t)
{
	static const uint32_t types[] = {
		QT_F32, QT_F16, QT_BF16, QT_Q4_0, QT_Q4_1, QT_Q5_0, QT_Q5_1, QT_Q8_0,
		QT_Q2_K, QT_Q3_K, QT_Q4_K, QT_Q5_K, QT_Q6_K, QT_IQ4_NL,
	};
	static const size_t lens[] = {32, 64, 96, 128, 160, 256, 288, 512, 768, 1280, 4864};
	static const enum quant_impl impls[] = {QUANT_IMPL_SCALAR, QUANT_IMPL_AVX2, QUANT_IMPL_AVX512};
	uint64_t s = 0x2545f4914f6cdd1dull;

	for (size_t ti = 0; ti < sizeof types / sizeof types[0] && !t->failed; ti++) {
		uint32_t type = types[ti];
		for (size_t li = 0; li < sizeof lens / sizeof lens[0] && !t->failed; li++) {
			size_t n = lens[li], rb = quant_row_bytes(type, n);
			for (int end = 0; end < 2 && rb && !t->failed; end++) {
				struct guarded gw, gy, gq, gd, gs;
				int ok = !guarded_new(&gw, rb, end) + !guarded_new(&gy, n * 4, end) +
					 !guarded_new(&gq, n, end) + !guarded_new(&gd, n / 8, end) +
					 !guarded_new(&gs, n / 8, end);
				T_CHECKF(t, ok == 5, "mmap of guarded buffers failed");
				float *y = (float *)gy.p;
				struct quant_act a = {0, (int8_t *)gq.p, (float *)gd.p, (float *)gs.p};
				for (size_t i = 0; i < rb; i++) {
					s ^= s << 13, s ^= s >> 7, s ^= s << 17;
					/* bit patterns whose fp16/bf16/fp32 reading is finite:
					 * exponent fields kept below all-ones */
					gw.p[i] = (uint8_t)(s >> 32) & 0xbb;
				}
				test_fill_random(y, n, n + (uint64_t)end);
				quant_act_quantize(y, n, &a);
				quant_dequant_row(type, gw.p, y, n);
				for (size_t i = 0; i < n && !t->failed; i++)
					if (!isfinite(y[i]))
						T_FAIL(t, "%s n=%zu: dequant [%zu] = %g", quant_name(type), n, i, y[i]);
				test_fill_random(y, n, n + 7);
				for (size_t k = 0; k < sizeof impls / sizeof impls[0] && !t->failed; k++) {
					float v;
					if (!quant_impl_available(impls[k]))
						continue;
					v = quant_dot_row_impl(impls[k], type, gw.p, y, n);
					if (isfinite(v) && quant_act_supported(type, n))
						v = quant_act_dot_impl(impls[k], type, gw.p, &a);
					if (!isfinite(v))
						T_FAIL(t, "%s n=%zu [%s]: %g", quant_name(type), n,
						       quant_impl_name(impls[k]), v);
				}
				guarded_free(&gw), guarded_free(&gy), guarded_free(&gq);
				guarded_free(&gd), guarded_free(&gs);
			}
		}
	}
}

/* ---- sizes and names -------------------------------------------------- */

static void quant_block_sizes_match_ggml(struct test_ctx *t)
{
	static const struct { uint32_t type; const char *name; size_t elems, bytes; int sup; } want[] = {
		{QT_F32, "F32", 1, 4, 1}, {QT_F16, "F16", 1, 2, 1},
		{QT_Q4_0, "Q4_0", 32, 18, 1}, {QT_Q4_1, "Q4_1", 32, 20, 1},
		{QT_Q5_0, "Q5_0", 32, 22, 1}, {QT_Q5_1, "Q5_1", 32, 24, 1},
		{QT_Q8_0, "Q8_0", 32, 34, 1}, {QT_Q8_1, "Q8_1", 32, 36, 0},
		{QT_Q2_K, "Q2_K", 256, 84, 1}, {QT_Q3_K, "Q3_K", 256, 110, 1},
		{QT_Q4_K, "Q4_K", 256, 144, 1}, {QT_Q5_K, "Q5_K", 256, 176, 1},
		{QT_Q6_K, "Q6_K", 256, 210, 1}, {QT_Q8_K, "Q8_K", 256, 292, 0},
		{QT_IQ4_NL, "IQ4_NL", 32, 18, 1}, {16, "IQ2_XXS", 256, 66, 0},
		{QT_BF16, "BF16", 1, 2, 1},
	};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		T_CHECKF(t, !strcmp(quant_name(want[i].type), want[i].name), "name of %u", want[i].type);
		T_CHECKF(t, quant_block_elems(want[i].type) == want[i].elems, "%s elems", want[i].name);
		T_CHECKF(t, quant_block_bytes(want[i].type) == want[i].bytes, "%s bytes", want[i].name);
		T_CHECKF(t, quant_supported(want[i].type) == want[i].sup, "%s supported", want[i].name);
	}
	T_CHECK(t, quant_row_bytes(QT_Q4_K, 1024) == 4 * 144);
	T_CHECK(t, quant_row_bytes(QT_Q4_K, 1000) == 0);
	T_CHECK(t, quant_row_bytes(QT_Q8_0, 640) == 20 * 34);
	T_CHECK(t, quant_row_bytes(QT_F32, 3) == 12);
	T_CHECK(t, quant_row_bytes(QT_Q8_0, UINT64_MAX - 31) == 0);
	T_CHECK(t, quant_block_elems(4) == 0 && quant_block_bytes(5) == 0);
	T_CHECK(t, quant_block_elems(1000) == 0 && !quant_supported(1000));
	T_CHECK(t, !strcmp(quant_name(4), "unknown"));
	/* an unsupported type must neither crash nor produce a value */
	uint8_t blk[292];
	float y[256];
	memset(blk, 0x11, sizeof blk);
	for (int i = 0; i < 256; i++)
		y[i] = 1.0f;
	T_CHECK(t, quant_dot_row(QT_Q8_K, blk, y, 256) == 0.0f);
	quant_dequant_row(QT_Q8_K, blk, y, 256);
	T_CHECK(t, y[0] == 1.0f && y[255] == 1.0f);
}

/* ---- fp16 ------------------------------------------------------------- */

static int f16_is_nan(uint16_t h)
{
	return (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
}

/* All 65536 halves: f16 -> f32 -> f16 is the identity (NaNs stay NaNs with
 * their sign), and f16 -> f32 is the exact value sign * m * 2^(e-25),
 * computed here independently with ldexp. */
static void f16_roundtrip_all_halves(struct test_ctx *t)
{
	for (uint32_t h = 0; h < 0x10000; h++) {
		float f = quant_f16_to_f32((uint16_t)h);
		uint16_t back = quant_f32_to_f16(f);
		int e = (h >> 10) & 0x1f, m = h & 0x3ff;
		double v;

		if (e == 31) {
			if (m) {
				T_CHECKF(t, isnan(f), "0x%04x should be NaN", h);
				T_CHECKF(t, f16_is_nan(back) && (back & 0x8000) == (h & 0x8000),
					 "NaN 0x%04x came back as 0x%04x", h, back);
			} else {
				T_CHECKF(t, isinf(f) && (f < 0) == !!(h & 0x8000), "0x%04x inf", h);
				T_CHECKF(t, back == h, "inf 0x%04x -> 0x%04x", h, back);
			}
			continue;
		}
		v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
		if (h & 0x8000)
			v = -v;
		T_CHECKF(t, (double)f == v && !!signbit(f) == !!signbit(v),
			 "0x%04x -> %.9g, want %.9g", h, f, v);
		T_CHECKF(t, back == h, "0x%04x -> %.9g -> 0x%04x", h, f, back);
	}
}

/* f32 -> f16 rounds to the nearest half, ties to even; beyond the largest
 * half (65504) by at least half a step it gives inf, below 2^-25 zero. */
static void f32_to_f16_rounding(struct test_ctx *t)
{
	static const struct { float f; uint16_t h; } cases[] = {
		{1.0f, 0x3c00}, {-2.0f, 0xc000}, {0.0f, 0x0000}, {-0.0f, 0x8000},
		{65504.0f, 0x7bff}, {65519.0f, 0x7bff}, {65520.0f, 0x7c00},
		{1e9f, 0x7c00}, {-1e9f, 0xfc00}, {70000.0f, 0x7c00}, {-131000.0f, 0xfc00},
		{1.0f + 0x1p-11f, 0x3c00},          /* tie -> even (down) */
		{1.0f + 3 * 0x1p-11f, 0x3c02},      /* tie -> even (up) */
		{1.0f + 0x1p-11f + 0x1p-20f, 0x3c01},
		{0x1p-24f, 0x0001}, {0x1p-25f, 0x0000}, /* tie -> even 0 */
		{0x1p-25f * 1.0001f, 0x0001}, {3 * 0x1p-25f, 0x0002},
		{0x1p-26f, 0x0000}, {-0x1p-26f, 0x8000}, {1e-30f, 0x0000},
		{0x1p-14f, 0x0400}, {0x1p-14f - 0x1p-25f, 0x0400}, /* rounds up into normal */
		{0x3ffp-24f, 0x03ff}, {1.401298e-45f, 0x0000},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		uint16_t h = quant_f32_to_f16(cases[i].f);
		T_CHECKF(t, h == cases[i].h, "%.9g -> 0x%04x, want 0x%04x", cases[i].f, h, cases[i].h);
	}
	T_CHECK(t, f16_is_nan(quant_f32_to_f16(NAN)));
	T_CHECK(t, quant_f32_to_f16(INFINITY) == 0x7c00);
	T_CHECK(t, quant_f32_to_f16(-INFINITY) == 0xfc00);
}

/* The row converters (SIMD where built) give the scalar functions' bits:
 * all 65536 halves one way (a signalling NaN may come out quiet); the
 * other way, floats around every rounding
 * edge (ties, subnormals, overflow, inf, NaNs with payloads), at offsets
 * that put each element in a vector lane and in the scalar tail. */
static void f16_rows_match_scalar(struct test_ctx *t)
{
	enum { NH = 65536, NF = 4099 };
	static uint16_t h[NH], h2[NF];
	static float f[NH], g[NF];
	uint64_t s = 2463534242ull;

	for (int i = 0; i < NH; i++)
		h[i] = (uint16_t)i;
	quant_f16_to_f32_row(h, f, NH);
	for (int i = 0; i < NH; i++) {
		float want = quant_f16_to_f32(h[i]);
		uint32_t a, b;
		memcpy(&a, &f[i], 4);
		memcpy(&b, &want, 4);
		if (f16_is_nan(h[i]))   /* the instruction quiets a signalling NaN */
			a &= ~0x00400000u, b &= ~0x00400000u;
		T_CHECKF(t, a == b, "half 0x%04x: 0x%08x, want 0x%08x", i, a, b);
	}
	for (int i = 0; i < NF; i++) {
		uint32_t u;
		s ^= s << 13, s ^= s >> 7, s ^= s << 17;
		/* a half's exact value, nudged by -2..2 ulps of the float, or a
		 * random bit pattern (NaNs and infs included) */
		u = (uint32_t)s;
		if (i % 3) {
			float x = quant_f16_to_f32((uint16_t)(s >> 20));
			memcpy(&u, &x, 4);
			u += (uint32_t)((int)(s % 5) - 2);
		}
		memcpy(&g[i], &u, 4);
	}
	for (int off = 0; off < 3; off++) {
		quant_f32_to_f16_row(g + off, h2, NF - off);
		for (int i = 0; i < NF - off; i++)
			T_CHECKF(t, h2[i] == quant_f32_to_f16(g[off + i]), "float %a -> 0x%04x, want 0x%04x",
				 g[off + i], h2[i], quant_f32_to_f16(g[off + i]));
	}
}

/* Nearest-ness on pseudo-random floats across the whole half range: no
 * neighbouring half is strictly closer than the one chosen. */
static void f32_to_f16_is_nearest(struct test_ctx *t)
{
	uint64_t s = 88172645463325252ull;
	for (int i = 0; i < 200000; i++) {
		s ^= s << 13, s ^= s >> 7, s ^= s << 17;
		/* exponents 2^-27 .. 2^16, both signs */
		float f = ldexpf(1.0f + (float)(s >> 40) / 16777216.0f, (int)(s % 44) - 27);
		if (s & 0x100)
			f = -f;
		uint16_t h = quant_f32_to_f16(f);
		if ((h & 0x7fff) >= 0x7c00) {
			T_CHECKF(t, fabsf(f) >= 65520.0f && (h & 0x7fff) == 0x7c00,
				 "%.9g -> 0x%04x", f, h);
			continue;
		}
		double d = fabs((double)quant_f16_to_f32(h) - f);
		uint16_t lo = (h & 0x7fff) ? h - 1 : h, hi = h + 1;
		double dl = fabs((double)quant_f16_to_f32(lo) - f);
		double dh = (hi & 0x7fff) < 0x7c00 ? fabs((double)quant_f16_to_f32(hi) - f) : INFINITY;
		T_CHECKF(t, d <= dl && d <= dh, "%.9g -> 0x%04x not nearest", f, h);
	}
}

static void f16_rows_convert(struct test_ctx *t)
{
	float x[5] = {1.5f, -0.25f, 0x1p-24f, 65504.0f, 3.0f}, y[5];
	uint16_t h[5];

	quant_f32_to_f16_row(x, h, 5);
	quant_f16_to_f32_row(h, y, 5);
	for (int i = 0; i < 5; i++)
		T_CHECKF(t, x[i] == y[i], "[%d] %.9g -> %.9g", i, x[i], y[i]);
	T_CHECK(t, h[0] == 0x3e00 && h[2] == 0x0001);
}

/* int8 rows (SeKV's device tier, landmarks): scale = max|x| / 127 and
 * codes rounded to nearest, ties to even, against the arithmetic written
 * out in double (rows of 16-multiples and odd tails take the vector path
 * and the scalar one); a zero or non-finite row gives scale 0, codes 0. */
static void f32_to_i8_row_rounds_to_nearest(struct test_ctx *t)
{
	static const size_t lens[] = { 1, 16, 37, 64, 256 };
	float x[256], sc;
	int8_t q[256];
	int bad = 0;

	for (size_t k = 0; k < sizeof lens / sizeof *lens; k++) {
		size_t n = lens[k];
		double amax = 0;
		test_fill_random(x, n, 900 + k);
		for (size_t i = 0; i < n; i++)
			amax = fmax(amax, fabs(x[i]));
		sc = quant_f32_to_i8_row(x, q, n);
		bad += fabs(sc - amax / 127) > 1e-7 * amax;
		for (size_t i = 0; i < n; i++) {
			double y = x[i] * (double)(127.0f / (float)amax), r = floor(y + 0.5);
			if (r - y == 0.5 && fmod(r, 2) != 0)
				r -= 1;   /* a tie goes to the even code */
			bad += q[i] != (int8_t)r;
		}
	}
	T_CHECKF(t, bad == 0, "%d scales or codes off", bad);
	/* exact ties: max 127 makes x * 127 / max = x */
	for (int i = 0; i < 32; i++)
		x[i] = i == 0 ? 127.0f : (float)(i % 8) - 3.5f;
	quant_f32_to_i8_row(x, q, 32);
	T_CHECKF(t, q[0] == 127 && q[1] == -2 && q[2] == -2 && q[3] == 0 && q[4] == 0 &&
		 q[5] == 2 && q[6] == 2 && q[7] == 4 && q[9] == -2, "ties: %d %d %d %d %d %d %d", q[1],
		 q[2], q[3], q[4], q[5], q[6], q[7]);
	for (int k = 0; k < 2; k++) {
		for (int i = 0; i < 64; i++)
			x[i] = 1.0f + i;
		x[k ? 63 : 20] = k ? INFINITY : NAN;
		sc = quant_f32_to_i8_row(x, q, 64);
		T_CHECK(t, sc == 0 && q[20] == 0 && q[10] == 0 && q[63] == 0);
	}
}

/* int4 rows: per group of 32, scale max|x| / 7, codes round(x / scale)
 * (ties to even) in [-7, 7], two a byte low nibble first, two's
 * complement; a NaN or infinite group gives scale 0 and codes 0 while the
 * others keep theirs; decoding gives scale * code. */
static void f32_to_i4_row_rounds_to_nearest(struct test_ctx *t)
{
	float x[256], s[8], y[256];
	uint8_t q[128];
	int bad = 0;

	for (int k = 0; k < 4; k++) {
		size_t n = (size_t)32 << (k % 3);
		test_fill_random(x, n, 940 + (unsigned)k);
		quant_f32_to_i4_row(x, q, s, n);
		for (size_t g = 0; g < n / 32; g++) {
			double amax = 0;
			for (size_t i = g * 32; i < g * 32 + 32; i++)
				amax = fmax(amax, fabs(x[i]));
			bad += fabs(s[g] - amax / 7) > 1e-6 * amax;
			for (size_t i = g * 32; i < g * 32 + 32; i++) {
				double v = x[i] * (double)(7.0f / (float)amax), r = floor(v + 0.5);
				if (r - v == 0.5 && fmod(r, 2) != 0)
					r -= 1;
				int nib = (q[i / 2] >> (4 * (i % 2))) & 0x0f;
				int code = nib >= 8 ? nib - 16 : nib;
				bad += code != (int)r || code < -7 || code > 7;
			}
		}
		quant_i4_to_f32_row(q, s, y, n);
		for (size_t i = 0; i < n; i++) {
			int nib = (q[i / 2] >> (4 * (i % 2))) & 0x0f;
			bad += y[i] != s[i / 32] * (float)(nib >= 8 ? nib - 16 : nib);
		}
	}
	T_CHECKF(t, bad == 0, "%d scales or codes off", bad);
	/* exact ties: max 7 makes x * 7 / max = x */
	for (int i = 0; i < 32; i++)
		x[i] = i == 0 ? 7.0f : (float)(i % 4) - 1.5f;
	quant_f32_to_i4_row(x, q, s, 32);
	quant_i4_to_f32_row(q, s, y, 32);
	/* -0.5, 0.5 -> 0; 1.5 -> 2; -1.5 -> -2 */
	T_CHECKF(t, s[0] == 1.0f && y[0] == 7 && y[1] == 0 && y[2] == 0 && y[3] == 2 && y[4] == -2 &&
		 y[7] == 2, "ties: %g %g %g %g %g", y[0], y[1], y[2], y[3], y[4]);
	for (int i = 0; i < 64; i++)
		x[i] = 1.0f + i;
	x[40] = NAN;
	quant_f32_to_i4_row(x, q, s, 64);
	quant_i4_to_f32_row(q, s, y, 64);
	T_CHECKF(t, s[1] == 0 && y[40] == 0 && y[63] == 0 && s[0] == 32.0f / 7 && fabsf(y[31] - 32) < 1e-5f,
		 "NaN group: scales %g %g, y[31] %g", s[0], s[1], y[31]);
}

const struct test_case test_quant[] = {
	{"quant_block_sizes_match_ggml", quant_block_sizes_match_ggml},
	{"f16_roundtrip_all_halves", f16_roundtrip_all_halves},
	{"f32_to_f16_rounding", f32_to_f16_rounding},
	{"f32_to_f16_is_nearest", f32_to_f16_is_nearest},
	{"quant_f32_to_i8_row_rounds_to_nearest", f32_to_i8_row_rounds_to_nearest},
	{"quant_f32_to_i4_row_rounds_to_nearest", f32_to_i4_row_rounds_to_nearest},
	{"f16_rows_match_scalar", f16_rows_match_scalar},
	{"f16_rows_convert", f16_rows_convert},
	{"dequant_f32_vs_golden", dequant_f32_vs_golden},
	{"dequant_f16_vs_golden", dequant_f16_vs_golden},
	{"dequant_bf16_vs_golden", dequant_bf16_vs_golden},
	{"dequant_q4_0_vs_golden", dequant_q4_0_vs_golden},
	{"dequant_q4_1_vs_golden", dequant_q4_1_vs_golden},
	{"dequant_q5_0_vs_golden", dequant_q5_0_vs_golden},
	{"dequant_q5_1_vs_golden", dequant_q5_1_vs_golden},
	{"dequant_q8_0_vs_golden", dequant_q8_0_vs_golden},
	{"dequant_q2_k_vs_golden", dequant_q2_k_vs_golden},
	{"dequant_q3_k_vs_golden", dequant_q3_k_vs_golden},
	{"dequant_q4_k_vs_golden", dequant_q4_k_vs_golden},
	{"dequant_q5_k_vs_golden", dequant_q5_k_vs_golden},
	{"dequant_q6_k_vs_golden", dequant_q6_k_vs_golden},
	{"dequant_iq4_nl_vs_golden", dequant_iq4_nl_vs_golden},
	{"dot_float_types_vs_double", dot_float_types_vs_double},
	{"matvec_vs_dot_row_model", matvec_vs_dot_row_model},
	{"dot_avx2_vs_scalar_model_rows", dot_avx2_vs_scalar_model_rows},
	{"dot_avx2_vs_scalar_random_blocks", dot_avx2_vs_scalar_random_blocks},
	{"quant_dispatch_picks_best_set", quant_dispatch_picks_best_set},
	{"matvec_impl_matches_dot_row_impl", matvec_impl_matches_dot_row_impl},
	{"kernels_read_only_their_row", kernels_read_only_their_row},
	{NULL, NULL},
};
