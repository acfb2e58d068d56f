/* test_quant_act.c - int8-activation matvec kernels (quant_act.c and its
 * SIMD sets): quantisation bounds, every kernel set against the exact
 * integer sum on the model's real rows and on random bit patterns, the
 * int8 path against plain dequantise-then-multiply in double within the
 * bound the activation rounding allows, and the CPU backend's choice of
 * the int8 kernels for one-token matmuls. (Against gguf-py's goldens:
 * test_quant.c, dequant_<type>_vs_golden.)
 */
#include "tests/test.h"

#include "engine/backend/backend.h"
#include "engine/gguf/gguf.h"
#include "engine/quant/quant.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_N 4096

struct act_buf {
	int8_t q[MAX_N];
	float d[MAX_N / 32], s[MAX_N / 32];
	struct quant_act a;
};

static void act_init(struct act_buf *b, const float *x, size_t n)
{
	b->a.q = b->q;
	b->a.d = b->d;
	b->a.s = b->s;
	quant_act_quantize(x, n, &b->a);
}

static const enum quant_impl k_impls[] = { QUANT_IMPL_SCALAR, QUANT_IMPL_AVX2, QUANT_IMPL_AVX512 };

static uint64_t xs_next(uint64_t *s)
{
	*s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
	return *s;
}

/* Blocks of `type` in w[0..bytes): every byte 0x00 (pat 0), 0xff (pat 1)
 * or random (pat 2: all nibble, high-bit, scale and -128 patterns), then
 * finite fp16 scales of either sign in [1e-3, 0.1) over the block's
 * fp16 fields (d; Q4_1 and Q4_K also m or dmin). */
static void fill_blocks(uint32_t type, uint8_t *w, size_t bytes, int pat, uint64_t *s)
{
	size_t bb = quant_block_bytes(type), at = type == QT_Q6_K ? 208 : 0;

	for (size_t i = 0; i < bytes; i++)
		w[i] = pat == 0 ? 0x00 : pat == 1 ? 0xff : (uint8_t)(xs_next(s) >> 32);
	for (size_t k = 0; k < bytes / bb; k++)
		for (int f = 0; f < (type == QT_Q4_K || type == QT_Q4_1 ? 2 : 1); f++) {
			uint64_t r = xs_next(s);
			uint16_t h = quant_f32_to_f16((float)((r & 1) ? -1 : 1) *
						      (float)(1e-3 + 0.099 * (double)(r >> 40) / 16777216.0));
			w[k * bb + at + 2 * (size_t)f] = (uint8_t)h;
			w[k * bb + at + 2 * (size_t)f + 1] = (uint8_t)(h >> 8);
		}
}

/* |x - q d| <= d / 2 per element (plus fp rounding of x / d), |q| <= 127,
 * a zero block gets d = 0, s = d * sum q. Scales from 1e-6 to 1e4 and a
 * block with one huge outlier. */
static void quant_act_quantize_bounds(struct test_ctx *t)
{
	static float x[1024];
	static struct act_buf b;

	for (int k = 0; k < 6; k++) {
		double scale = pow(10.0, -6 + 2 * k);
		test_fill_random(x, 1024, 99 + k);
		for (int i = 0; i < 1024; i++)
			x[i] = (float)(x[i] * scale);
		memset(x + 64, 0, 32 * sizeof *x);
		x[200] = (float)(1e3 * scale);
		act_init(&b, x, 1024);
		T_CHECK(t, b.a.n == 1024);
		T_CHECKF(t, b.d[2] == 0.0f && b.s[2] == 0.0f, "zero block: d %g s %g", b.d[2], b.s[2]);
		for (int blk = 0; blk < 32; blk++) {
			int sum = 0;
			for (int j = 0; j < 32; j++) {
				int i = blk * 32 + j;
				double err = fabs((double)x[i] - (double)b.q[i] * b.d[blk]);
				T_CHECKF(t, b.q[i] >= -127 && b.q[i] <= 127, "q[%d] = %d", i, b.q[i]);
				T_CHECKF(t, err <= 0.5 * b.d[blk] * (1 + 1e-5) + 1e-30,
					 "scale %g elem %d: |x - qd| = %g > d/2 = %g", scale, i, err,
					 0.5 * b.d[blk]);
				sum += b.q[i];
			}
			T_CHECKF(t, fabsf(b.s[blk] - b.d[blk] * (float)sum) <= 1e-6f * fabsf(b.s[blk]) + 1e-30f,
				 "block %d: s %g, d*sum %g", blk, b.s[blk], b.d[blk] * (float)sum);
		}
	}
}

/* One row against one quantised activation vector:
 *  - each available kernel set within 1e-5 (relative to sum |w_i a_i|) of
 *    the exact sum of dequant(w)[i] * q[i] * d[i/32] in double;
 *  - the active set within the activation-rounding bound of the fp32
 *    dot in double: sum_i |dequant(w)[i]| * |x[i] - q[i] d[i/32]|
 *    (measured, not estimated), plus the same 1e-5 slack. */
static int act_row_ok(struct test_ctx *t, const char *what, uint32_t type, const uint8_t *w,
		      const float *x, const struct quant_act *a)
{
	static float wd[MAX_N];
	size_t n = a->n;
	double exact = 0.0, mag = 0.0, ref = 0.0, bound = 0.0;
	float got;

	quant_dequant_row(type, w, wd, n);
	for (size_t i = 0; i < n; i++) {
		double av = (double)a->q[i] * a->d[i / 32];
		exact += (double)wd[i] * av;
		mag += fabs((double)wd[i] * av);
		ref += (double)wd[i] * x[i];
		bound += fabs((double)wd[i]) * fabs((double)x[i] - av);
	}
	for (size_t k = 0; k < sizeof k_impls / sizeof k_impls[0]; k++) {
		if (!quant_impl_available(k_impls[k]))
			continue;
		got = quant_act_dot_impl(k_impls[k], type, w, a);
		if (!(fabs((double)got - exact) <= 1e-5 * mag + 1e-30)) {
			T_FAIL(t, "%s %s [%s]: %.9g vs exact %.9g (sum|wa| %.6g)", quant_name(type),
			       what, quant_impl_name(k_impls[k]), got, exact, mag);
			return 0;
		}
	}
	got = quant_act_dot(type, w, a);
	if (!(fabs((double)got - ref) <= bound + 1e-5 * mag + 1e-30)) {
		T_FAIL(t, "%s %s: int8 path %.9g vs fp32 dot %.9g, beyond the rounding bound %.3g",
		       quant_name(type), what, got, ref, bound);
		return 0;
	}
	return 1;
}

/* Every tensor of the model the tests run with in a format with int8
 * kernels (default Gemma 3 270M: token_embd Q8_0; attention and FFN
 * weights Q5_0, Q4_K, Q6_K, Q8_0; SEKV_MODEL=SmolLM2 adds Q4_1): 8 rows
 * spread over each, against activations of two magnitudes. */
static void quant_act_kernels_vs_exact_model_rows(struct test_ctx *t)
{
	static const uint32_t types[] = { QT_Q8_0, QT_Q5_0, QT_Q4_1, QT_Q4_K, QT_Q6_K };
	static float x[MAX_N];
	static struct act_buf b;
	int n_tensor = 0;
	char err[512], name[96];
	struct gguf *g = NULL;

	if (gguf_open(&g, test_model_path(), err, sizeof err))
		T_CHECKF(t, 0, "model required (make model): %s", err);
	for (uint64_t ti = 0; ti < g->n_tensor && !t->failed; ti++) {
		const struct gguf_tensor *tn = &g->tensor[ti];
		size_t n = (size_t)tn->ne[0], rb;
		uint64_t rows;
		int k = -1;

		for (int i = 0; i < (int)(sizeof types / sizeof types[0]); i++)
			if (tn->type == types[i])
				k = i;
		if (k < 0 || tn->n_dims != 2 || n > MAX_N || !quant_act_supported(tn->type, n))
			continue;
		rb = quant_row_bytes(tn->type, n);
		rows = tn->ne[1];
		snprintf(name, sizeof name, "%.*s", (int)tn->name.len, tn->name.ptr);
		for (int mag = 0; mag < 2 && !t->failed; mag++) {
			test_fill_random(x, n, ti * 2 + (uint64_t)mag);
			for (size_t i = 0; i < n; i++)
				x[i] *= mag ? 40.0f : 0.5f;
			act_init(&b, x, n);
			for (uint64_t r = 0; r < 8; r++) {
				uint64_t row = r * (rows - 1) / 7;
				if (!act_row_ok(t, name, tn->type,
						(const uint8_t *)tn->data + row * rb, x, &b.a))
					break;
			}
		}
		n_tensor++;
	}
	gguf_close(g);
	T_CHECKF(t, t->failed || n_tensor > 0, "no tensor with int8 kernels in %s", test_model_path());
}

/* Random bytes everywhere (all nibble, high-bit, scale and -128 patterns)
 * with finite fp16 scales of either sign, all-zero and all-0xff payloads,
 * rows of 1 to 16 super-blocks' worth of elements. */
static void quant_act_kernels_vs_exact_random_blocks(struct test_ctx *t)
{
	static const uint32_t types[] = { QT_Q8_0, QT_Q5_0, QT_Q4_1, QT_Q4_K, QT_Q6_K };
	static const size_t lens[] = { 32, 64, 96, 256, 512, 640, 1024, 2048, 4096 };
	static uint8_t w[MAX_N / 32 * 210];
	static float x[MAX_N];
	static struct act_buf b;
	uint64_t s = 0x9e3779b97f4a7c15ull;

	for (size_t ti = 0; ti < sizeof types / sizeof types[0] && !t->failed; ti++) {
		uint32_t type = types[ti];
		size_t be = quant_block_elems(type), bb = quant_block_bytes(type);
		for (size_t li = 0; li < sizeof lens / sizeof lens[0] && !t->failed; li++) {
			size_t n = lens[li], nb = n / be;
			char what[64];
			if (n % be)
				continue;
			T_CHECK(t, quant_act_supported(type, n));
			for (int pat = 0; pat < 4 && !t->failed; pat++) {
				fill_blocks(type, w, nb * bb, pat < 2 ? pat : 2, &s);
				test_fill_random(x, n, li * 4 + (uint64_t)pat);
				act_init(&b, x, n);
				snprintf(what, sizeof what, "n=%zu pattern %d", n, pat);
				act_row_ok(t, what, type, w, x, &b.a);
			}
		}
	}
	T_CHECK(t, !quant_act_supported(QT_Q4_K, 640) && !quant_act_supported(QT_F32, 64) &&
		   !quant_act_supported(QT_Q8_0, 0) && !quant_act_supported(QT_Q8_0, 48) &&
		   !quant_act_supported(QT_Q4_1, 48) && !quant_act_supported(QT_Q5_1, 64) &&
		   !quant_act_supported(QT_Q2_K, 256));
}

/* quant_act_dot and quant_act_matvec run the active set, bit for bit, and
 * quant_act_matvec_impl each set's quant_act_dot_impl. */
static void quant_act_dispatch_uses_active_set(struct test_ctx *t)
{
	static uint8_t w[4 * 8 * 34];
	static float x[256], y[4];
	static struct act_buf b;

	for (size_t i = 0; i < sizeof w; i++)
		w[i] = (uint8_t)(i * 37 + 11);
	for (int k = 0; k < 32; k++)
		w[k * 34 + 1] = 0x1c; /* d finite */
	test_fill_random(x, 256, 5);
	act_init(&b, x, 256);
	quant_act_matvec(QT_Q8_0, w, 8 * 34, 4, &b.a, y);
	for (int r = 0; r < 4; r++) {
		float one = quant_act_dot(QT_Q8_0, w + r * 8 * 34, &b.a);
		float ref = quant_act_dot_impl(quant_impl_active(), QT_Q8_0, w + r * 8 * 34, &b.a);
		T_CHECKF(t, !memcmp(&one, &ref, sizeof one) && !memcmp(&one, &y[r], sizeof one),
			 "row %d: dot %.9g, %s %.9g, matvec %.9g", r, one,
			 quant_impl_name(quant_impl_active()), ref, y[r]);
	}
	for (size_t k = 0; k < sizeof k_impls / sizeof k_impls[0]; k++) {
		if (!quant_impl_available(k_impls[k]))
			continue;
		quant_act_matvec_impl(k_impls[k], QT_Q8_0, w, 8 * 34, 4, &b.a, y);
		for (int r = 0; r < 4; r++) {
			float one = quant_act_dot_impl(k_impls[k], QT_Q8_0, w + r * 8 * 34, &b.a);
			T_CHECKF(t, !memcmp(&one, &y[r], sizeof one), "row %d [%s]: dot %.9g, matvec %.9g",
				 r, quant_impl_name(k_impls[k]), one, y[r]);
		}
	}
}

/* A two-thread CPU backend with a workspace of sz: 0, or -1 with the test
 * failed. */
static int cpu2_open(struct test_ctx *t, const struct backend_ws_size *sz, struct backend **be,
		     struct backend_ws **ws)
{
	char err[256];

	if (backend_open("cpu", 2, be, err, sizeof err)) {
		T_FAIL(t, "backend_open: %s", err);
		return -1;
	}
	if ((*be)->ops->ws_new(*be, sz, ws)) {
		backend_close(*be);
		T_FAIL(t, "ws_new failed");
		return -1;
	}
	return 0;
}

/* The CPU backend's one-token matmul picks its kernels by type: with
 * act_q8 set, every type quant_act_supported accepts (Q4_1 included) runs
 * the int8 kernels, bit for bit quant_act_matvec on the quantised input;
 * with act_q8 clear, quant_matvec's fp32 kernels. Random rows (finite
 * fp16 scales) of 576 columns, the width of SmolLM2, split over two
 * threads; the two paths must also differ, or the test could not tell
 * them apart. */
static void cpu_matmul_one_token_uses_int8_kernels(struct test_ctx *t)
{
	enum { ROWS = 96, COLS = 576, COLS_K = 512 };
	static const uint32_t types[] = { QT_Q8_0, QT_Q5_0, QT_Q4_1, QT_Q4_K, QT_Q6_K };
	static uint8_t w[ROWS * COLS / 32 * 34];
	static float x[COLS], y[ROWS], want[ROWS];
	static struct act_buf b;
	struct backend *be = NULL;
	struct backend_ws *ws = NULL;
	struct backend_ws_size sz = { 2, 1, 64, (size_t)ROWS * COLS, COLS, 0, 0 };
	uint64_t s = 88172645463325252ull;

	if (cpu2_open(t, &sz, &be, &ws))
		return;
	test_fill_random(x, COLS, 77);
	for (size_t ti = 0; ti < sizeof types / sizeof types[0] && !t->failed; ti++) {
		uint32_t type = types[ti];
		int cols = quant_block_elems(type) == 256 ? COLS_K : COLS;
		size_t rb = quant_row_bytes(type, (uint64_t)cols);
		struct backend_weight wt = { type, ROWS, cols, rb, w };
		int differ = 0;

		fill_blocks(type, w, ROWS * rb, 2, &s);
		act_init(&b, x, (size_t)cols);
		quant_act_matvec(type, w, rb, ROWS, &b.a, want);
		be->act_q8 = 1;
		be->ops->matmul(be, ws, &wt, 0, ROWS, x, 1, y, ROWS);
		for (int r = 0; r < ROWS && !t->failed; r++)
			if (memcmp(&y[r], &want[r], sizeof y[r]))
				T_FAIL(t, "%s row %d: int8 path %.9g, quant_act_matvec %.9g",
				       quant_name(type), r, y[r], want[r]);
		quant_matvec(type, w, rb, ROWS, cols, x, want);
		for (int r = 0; r < ROWS; r++)
			differ |= memcmp(&y[r], &want[r], sizeof y[r]) != 0;
		be->act_q8 = 0;
		be->ops->matmul(be, ws, &wt, 0, ROWS, x, 1, y, ROWS);
		be->act_q8 = 1;
		for (int r = 0; r < ROWS && !t->failed; r++)
			if (memcmp(&y[r], &want[r], sizeof y[r]))
				T_FAIL(t, "%s row %d: fp32 path %.9g, quant_matvec %.9g",
				       quant_name(type), r, y[r], want[r]);
		if (!t->failed && !differ)
			T_FAIL(t, "%s: int8 and fp32 results are identical", quant_name(type));
	}
	be->ops->ws_free(ws);
	backend_close(be);
}

/* ---- the batch GEMM (quant_gemm.c, quant_gemm_simd.h) ----------------- */

#define G_MAX_TOK 40
#define G_MAX_ROWS 40
#define G_MAX_COLS 1024

/* A batch's buffers: packed activations, and the same tokens quantised
 * one by one (quant_act_matmul's input). */
struct gemm_buf {
	uint8_t q[G_MAX_TOK + QUANT_GEMM_PAD][G_MAX_COLS];
	float d[G_MAX_TOK + QUANT_GEMM_PAD][G_MAX_COLS / 32], s[G_MAX_TOK + QUANT_GEMM_PAD][G_MAX_COLS / 32];
	struct act_buf tok[G_MAX_TOK];
	struct quant_act a[G_MAX_TOK];
	struct quant_gemm_act ga;
	float x[G_MAX_TOK * G_MAX_COLS];
};

static void gemm_buf_pack(struct gemm_buf *b, enum quant_impl impl, int n, size_t cols)
{
	b->ga = (struct quant_gemm_act){ n, cols, &b->q[0][0], &b->d[0][0], &b->s[0][0] };
	/* two calls: packing is split by group ranges across threads */
	quant_gemm_pack_impl(impl, b->x, cols, 0, 1, &b->ga);
	quant_gemm_pack_impl(impl, b->x, cols, 1, quant_gemm_pad(n) / QUANT_GEMM_TOK, &b->ga);
	for (int t = 0; t < n; t++) {
		act_init(&b->tok[t], b->x + (size_t)t * cols, cols);
		b->a[t] = b->tok[t].a;
	}
}

/* Every set packs exactly quant_act_quantize's codes (+ 128), scales and
 * sums at the documented offsets, and zero tokens after the last: tokens
 * with NaN, inf, a zero block, a huge outlier and scales of 1e-6 to 1e4. */
static void quant_gemm_pack_matches_quantize(struct test_ctx *t)
{
	static struct gemm_buf b;
	const int n = 21;
	const size_t cols = 320, nb = cols / 32;

	for (int tok = 0; tok < n; tok++) {
		float *x = b.x + (size_t)tok * cols;
		test_fill_random(x, cols, 300 + (uint64_t)tok);
		for (size_t i = 0; i < cols; i++)
			x[i] = (float)(x[i] * pow(10.0, -6 + tok % 6 * 2));
	}
	memset(b.x + 64, 0, 32 * sizeof(float));
	b.x[cols + 5] = NAN;
	b.x[2 * cols + 40] = INFINITY;
	b.x[3 * cols + 70] = -INFINITY;
	b.x[4 * cols + 100] = 1e30f;
	for (size_t k = 0; k < sizeof k_impls / sizeof k_impls[0]; k++) {
		memset(&b.q, 0x55, sizeof b.q);
		gemm_buf_pack(&b, k_impls[k], n, cols);
		for (int tok = 0; tok < quant_gemm_pad(n); tok++) {
			size_t g = (size_t)tok / 8, l = (size_t)tok % 8;
			for (size_t i = 0; i < cols; i++) {
				uint8_t got = b.ga.q[((g * cols / 4 + i / 4) * 8 + l) * 4 + i % 4];
				int want = tok < n ? b.tok[tok].q[i] + 128 : 128;
				T_CHECKF(t, got == want, "[%s] token %d elem %zu: packed %d, want %d",
					 quant_impl_name(k_impls[k]), tok, i, got, want);
			}
			for (size_t j = 0; j < nb; j++) {
				float d = b.ga.d[(g * nb + j) * 8 + l], s = b.ga.s[(g * nb + j) * 8 + l];
				float wd = tok < n ? b.tok[tok].d[j] : 0.0f, ws = tok < n ? b.tok[tok].s[j] : 0.0f;
				T_CHECKF(t, !memcmp(&d, &wd, sizeof d) && !memcmp(&s, &ws, sizeof s),
					 "[%s] token %d block %zu: d %g s %g, want %g %g",
					 quant_impl_name(k_impls[k]), tok, j, d, s, wd, ws);
			}
		}
	}
}

/* quant_gemm of every available set against quant_act_matmul, per
 * output within 1e-5 of sum |dequant(w) * q d| (the order of fp32 sums
 * only), writing only its n x n_rows outputs of y (ldy > n_rows). */
static int gemm_vs_reference(struct test_ctx *t, const char *what, uint32_t type,
			     const uint8_t *w, size_t rb, int rows, struct gemm_buf *b, int n,
			     size_t cols)
{
	static float y[G_MAX_TOK][G_MAX_ROWS + 3], ref[G_MAX_TOK][G_MAX_ROWS + 3];
	static float wd[G_MAX_ROWS][G_MAX_COLS];
	static uint8_t scratch[16 * (G_MAX_COLS * 2 + 64)] __attribute__((aligned(64)));
	const size_t ldy = G_MAX_ROWS + 3;

	if (quant_gemm_scratch_bytes(cols) > sizeof scratch) {
		T_FAIL(t, "scratch %zu < %zu", sizeof scratch, quant_gemm_scratch_bytes(cols));
		return 0;
	}
	for (int r = 0; r < rows; r++)
		quant_dequant_row(type, w + (size_t)r * rb, wd[r], cols);
	gemm_buf_pack(b, QUANT_IMPL_SCALAR, n, cols);
	quant_act_matmul(type, w, rb, rows, b->a, n, &ref[0][0], ldy);
	for (size_t k = 0; k < sizeof k_impls / sizeof k_impls[0]; k++) {
		if (!quant_gemm_supported_impl(k_impls[k], type, cols))
			continue;
		gemm_buf_pack(b, k_impls[k], n, cols);
		for (int tok = 0; tok < G_MAX_TOK; tok++)
			for (size_t r = 0; r < ldy; r++)
				y[tok][r] = -7.0f;
		quant_gemm_impl(k_impls[k], type, w, rb, rows, &b->ga, &y[0][0], ldy, scratch);
		for (int tok = 0; tok < G_MAX_TOK; tok++)
			for (int r = 0; r < (int)ldy; r++) {
				double mag = 0.0;
				if (tok >= n || r >= rows) {
					if (y[tok][r] != -7.0f) {
						T_FAIL(t, "%s %s [%s]: wrote y[%d][%d] outside %dx%d",
						       quant_name(type), what, quant_impl_name(k_impls[k]),
						       tok, r, n, rows);
						return 0;
					}
					continue;
				}
				for (size_t i = 0; i < cols; i++)
					mag += fabs((double)wd[r][i] * b->a[tok].q[i] * b->a[tok].d[i / 32]);
				if (!(fabs((double)y[tok][r] - ref[tok][r]) <= 1e-5 * mag + 1e-30)) {
					T_FAIL(t, "%s %s [%s] token %d row %d: %.9g vs reference %.9g (sum|wa| %.6g)",
					       quant_name(type), what, quant_impl_name(k_impls[k]), tok, r,
					       y[tok][r], ref[tok][r], mag);
					return 0;
				}
			}
	}
	return 1;
}

/* Random blocks (as quant_act_kernels_vs_exact_random_blocks: every bit
 * pattern, scales of either sign) of each type, for token counts around
 * the packing's groups and pads, row counts around tiles and panels. */
static void quant_gemm_vs_matmul_random_blocks(struct test_ctx *t)
{
	static const uint32_t types[] = { QT_Q8_0, QT_Q5_0, QT_Q4_1, QT_Q4_K, QT_Q6_K };
	static const int toks[] = { 1, 2, 8, 15, 16, 17, 33, 40 };
	static const int rowss[] = { 1, 3, 4, 16, 21, 40 };
	static uint8_t w[G_MAX_ROWS * G_MAX_COLS / 32 * 34];
	static struct gemm_buf b;
	uint64_t s = 0x2545f4914f6cdd1dull;

	for (size_t ti = 0; ti < sizeof types / sizeof types[0] && !t->failed; ti++) {
		uint32_t type = types[ti];
		size_t be = quant_block_elems(type);
		for (int c = 0; c < 3 && !t->failed; c++) {
			size_t cols = be == 256 ? 256u << c : (size_t)(96 << c), rb = quant_row_bytes(type, cols);
			fill_blocks(type, w, G_MAX_ROWS * rb, 2, &s);
			if (c == 1)
				fill_blocks(type, w, rb, 1, &s); /* all-ones codes in row 0 */
			test_fill_random(b.x, G_MAX_TOK * cols, 500 + ti * 3 + (uint64_t)c);
			for (size_t ni = 0; ni < sizeof toks / sizeof toks[0] && !t->failed; ni++)
				for (size_t ri = 0; ri < sizeof rowss / sizeof rowss[0] && !t->failed; ri++) {
					char what[64];
					snprintf(what, sizeof what, "cols %zu n %d rows %d", cols, toks[ni],
						 rowss[ri]);
					gemm_vs_reference(t, what, type, w, rb, rowss[ri], &b, toks[ni], cols);
				}
		}
	}
	T_CHECK(t, !quant_gemm_supported_impl(QUANT_IMPL_SCALAR, QT_Q4_K, 256) &&
		   !quant_gemm_supported(QT_Q4_K, 640) && !quant_gemm_supported(QT_Q2_K, 256) &&
		   !quant_gemm_supported_impl(QUANT_IMPL_AVX2, QT_Q8_0, 256));
}

/* The model's tensors with GEMM kernels (up to G_MAX_COLS wide): 40 rows
 * spread over each times 19 tokens of two magnitudes. */
static void quant_gemm_vs_matmul_model_rows(struct test_ctx *t)
{
	static uint8_t w[G_MAX_ROWS * G_MAX_COLS / 32 * 34];
	static struct gemm_buf b;
	char err[512], name[96];
	struct gguf *g = NULL;
	int n_tensor = 0;

	if (gguf_open(&g, test_model_path(), err, sizeof err))
		T_CHECKF(t, 0, "model required (make model): %s", err);
	for (uint64_t ti = 0; ti < g->n_tensor && !t->failed; ti++) {
		const struct gguf_tensor *tn = &g->tensor[ti];
		size_t cols = (size_t)tn->ne[0], rb;
		if (tn->n_dims != 2 || cols > G_MAX_COLS || !quant_act_supported(tn->type, cols))
			continue;
		rb = quant_row_bytes(tn->type, cols);
		for (int r = 0; r < G_MAX_ROWS; r++)
			memcpy(w + (size_t)r * rb,
			       (const uint8_t *)tn->data + (uint64_t)r * (tn->ne[1] - 1) / (G_MAX_ROWS - 1) * rb, rb);
		snprintf(name, sizeof name, "%.*s", (int)tn->name.len, tn->name.ptr);
		for (int mag = 0; mag < 2 && !t->failed; mag++) {
			test_fill_random(b.x, 19 * cols, ti * 2 + (uint64_t)mag);
			for (size_t i = 0; i < 19 * cols; i++)
				b.x[i] *= mag ? 40.0f : 0.5f;
			gemm_vs_reference(t, name, tn->type, w, rb, G_MAX_ROWS, &b, 19, cols);
		}
		n_tensor++;
	}
	gguf_close(g);
	T_CHECKF(t, t->failed || n_tensor > 0, "no tensor with GEMM kernels in %s", test_model_path());
}

/* The CPU backend's batch matmul: with act_q8 set and a type with a GEMM
 * kernel, bit for bit quant_gemm on the packed batch (rows split over two
 * threads in whole panels); with act_q8 clear, the fp32 path, which must
 * differ (or the test could not tell them apart). */
static void cpu_matmul_batch_uses_int8_gemm(struct test_ctx *t)
{
	enum { ROWS = 72, COLS = 512, N = 23 };
	static const uint32_t types[] = { QT_Q8_0, QT_Q5_0, QT_Q4_1, QT_Q4_K, QT_Q6_K };
	static uint8_t w[ROWS * COLS / 32 * 34];
	static float y[N][ROWS], want[N][ROWS];
	static uint8_t scratch[16 * (COLS * 2 + 64)] __attribute__((aligned(64)));
	static struct gemm_buf b;
	struct backend *be = NULL;
	struct backend_ws *ws = NULL;
	struct backend_ws_size sz = { N, 1, 64, (size_t)ROWS * COLS, COLS, 0, 0 };
	uint64_t s = 88172645463325252ull;

	if (cpu2_open(t, &sz, &be, &ws))
		return;
	test_fill_random(b.x, N * COLS, 78);
	for (size_t ti = 0; ti < sizeof types / sizeof types[0] && !t->failed; ti++) {
		uint32_t type = types[ti];
		size_t rb = quant_row_bytes(type, COLS);
		struct backend_weight wt = { type, ROWS, COLS, rb, w };
		int differ = 0;

		if (!quant_gemm_supported(type, COLS))
			continue;
		fill_blocks(type, w, ROWS * rb, 2, &s);
		gemm_buf_pack(&b, quant_impl_active(), N, COLS);
		quant_gemm(type, w, rb, ROWS, &b.ga, &want[0][0], ROWS, scratch);
		be->act_q8 = 1;
		be->ops->matmul(be, ws, &wt, 0, ROWS, b.x, N, &y[0][0], ROWS);
		T_CHECKF(t, !memcmp(y, want, sizeof y), "%s: backend batch matmul is not quant_gemm",
			 quant_name(type));
		be->act_q8 = 0;
		be->ops->matmul(be, ws, &wt, 0, ROWS, b.x, N, &y[0][0], ROWS);
		be->act_q8 = 1;
		differ = memcmp(y, want, sizeof y) != 0;
		T_CHECKF(t, differ, "%s: act_q8 clear still gives quant_gemm's result", quant_name(type));
	}
	be->ops->ws_free(ws);
	backend_close(be);
}

const struct test_case test_quant_act[] = {
	{ "quant_act_quantize_bounds", quant_act_quantize_bounds },
	{ "quant_act_kernels_vs_exact_model_rows", quant_act_kernels_vs_exact_model_rows },
	{ "quant_act_kernels_vs_exact_random_blocks", quant_act_kernels_vs_exact_random_blocks },
	{ "quant_act_dispatch_uses_active_set", quant_act_dispatch_uses_active_set },
	{ "cpu_matmul_one_token_uses_int8_kernels", cpu_matmul_one_token_uses_int8_kernels },
	{ "quant_gemm_pack_matches_quantize", quant_gemm_pack_matches_quantize },
	{ "quant_gemm_vs_matmul_random_blocks", quant_gemm_vs_matmul_random_blocks },
	{ "quant_gemm_vs_matmul_model_rows", quant_gemm_vs_matmul_model_rows },
	{ "cpu_matmul_batch_uses_int8_gemm", cpu_matmul_batch_uses_int8_gemm },
	{ NULL, NULL },
};
