/* quant.h - ggml tensor types used by GGUF files: block layouts,
 * dequantisation and dot products against fp32 vectors.
 *
 * Layouts follow ggml (ggml-common.h block_q8_0, block_q5_0, block_q4_K,
 * block_q6_K, ...); values are little-endian, fp16 scales are IEEE half.
 * The scalar code here is the reference; faster kernels must match it.
 */
#ifndef SEKV_QUANT_H
#define SEKV_QUANT_H

#include <stddef.h>
#include <stdint.h>

/* ggml type ids as stored in GGUF tensor infos. */
enum qtype {
	QT_F32 = 0, QT_F16 = 1, QT_Q4_0 = 2, QT_Q4_1 = 3, QT_Q5_0 = 6,
	QT_Q5_1 = 7, QT_Q8_0 = 8, QT_Q8_1 = 9, QT_Q2_K = 10, QT_Q3_K = 11,
	QT_Q4_K = 12, QT_Q5_K = 13, QT_Q6_K = 14, QT_Q8_K = 15, QT_IQ4_NL = 20,
	QT_BF16 = 30,
};

/* 1 when this build can dequantise `type`, else 0. */
int quant_supported(uint32_t type);
const char *quant_name(uint32_t type);
/* Elements per block (1 for float types) and bytes per block; 0 if unknown. */
size_t quant_block_elems(uint32_t type);
size_t quant_block_bytes(uint32_t type);
/* Bytes of a row of n elements; 0 if n is not a multiple of the block. */
size_t quant_row_bytes(uint32_t type, uint64_t n);

/* y[0..n) = dequant(x). n must be a multiple of the block size; x holds
 * quant_row_bytes(type, n) bytes. Types with quant_supported() == 0 leave y
 * untouched (callers check support when they open a model).
 * Thread-safe (no state). */
void quant_dequant_row(uint32_t type, const void *x, float *y, size_t n);
/* Returns sum_i dequant(x)[i] * y[i] over n elements (same contract as
 * quant_dequant_row; 0 for unsupported types). Decodes one block at a time,
 * never a whole row; the summation order differs from a sequential sum
 * (independent per-lane partial sums), so results agree with a double
 * precision reference to ~1e-6 relative, not bit for bit. Thread-safe. */
float quant_dot_row(uint32_t type, const void *x, const float *y, size_t n);

/* y[r] = quant_dot_row(type, w + r*row_bytes, x, n_cols) for r in
 * [0, n_rows): w is a row-major [n_rows][row_bytes] matrix (row_bytes >=
 * quant_row_bytes(type, n_cols)), x is [n_cols], y is [n_rows].
 * Single-threaded; callers split rows across threads. */
void quant_matvec(uint32_t type, const void *w, size_t row_bytes, int n_rows,
		  int n_cols, const float *x, float *y);

/* IEEE half <-> float. f32 -> f16 rounds to nearest even, overflows to
 * inf, flushes below half the smallest subnormal to zero and keeps NaN a
 * (quiet) NaN; f16 -> f32 is exact, subnormals included. */
float quant_f16_to_f32(uint16_t h);
uint16_t quant_f32_to_f16(float f);
void quant_f16_to_f32_row(const uint16_t *x, float *y, size_t n);
void quant_f32_to_f16_row(const float *x, uint16_t *y, size_t n);
/* Symmetric int8 of one row: q[i] = round(x[i] / scale) (to nearest), scale
 * = max|x| / 127, so |q| <= 127 and x ~= scale * q. Returns scale; an all-
 * zero or non-finite row gives scale 0 and q all 0. Thread-safe. */
float quant_f32_to_i8_row(const float *x, int8_t *q, size_t n);
/* y[i] = scale * q[i]. */
void quant_i8_to_f32_row(const int8_t *q, float scale, float *y, size_t n);

/* ---- kernel sets ------------------------------------------------------ */

/* quant_dot_row and quant_matvec run Q8_0, Q5_0, Q4_1, Q4_K and Q6_K
 * through the fastest kernel set the CPU supports, chosen once on first
 * use (thread-safe); SEKV_NO_SIMD set to anything but "" or "0" forces the
 * scalar set. Other types always use the scalar code. The fp32-activation
 * kernels of the AVX-512 set are the AVX2 ones; its int8 kernels
 * (quant_act_dot) use AVX-512 VNNI. */
enum quant_impl { QUANT_IMPL_SCALAR = 0, QUANT_IMPL_AVX2 = 1, QUANT_IMPL_AVX512 = 2 };

/* The set quant_dot_row uses (runs the one-time choice). Thread-safe. */
enum quant_impl quant_impl_active(void);
/* 1 when this build and CPU can run `impl` (AVX2: x86 with AVX2, FMA and
 * F16C; AVX512: AVX2's plus AVX-512 F, BW, VL and VNNI), else 0; ignores
 * SEKV_NO_SIMD. Thread-safe. */
int quant_impl_available(enum quant_impl impl);
const char *quant_impl_name(enum quant_impl impl);
/* quant_dot_row through the kernel set `impl`, for tests and benchmarks;
 * an unavailable impl runs the scalar set. Thread-safe. */
float quant_dot_row_impl(enum quant_impl impl, uint32_t type, const void *x,
			 const float *y, size_t n);
/* quant_matvec through the kernel set `impl` (an unavailable impl runs the
 * scalar set); one kernel lookup per call. Benchmarks compare sets with it. */
void quant_matvec_impl(enum quant_impl impl, uint32_t type, const void *w, size_t row_bytes,
		       int n_rows, int n_cols, const float *x, float *y);

/* ---- int8 activations (quant_act.c) ----------------------------------- */

/* An activation vector quantised to int8 in blocks of 32, as llama.cpp
 * quantises the vector of a matvec (ggml block_q8_0, with fp32 scales):
 * x[i] ~= q[i] * d[i / 32], q in [-127, 127], d = max|x| / 127 per block.
 * Decode multiplies quantised weights by it with integer dot products
 * (pmaddubsw / vpdpbusd), which reads each weight byte once and does the
 * multiply-adds in int8 rather than converting every weight to fp32. */
#define QUANT_ACT_BLOCK 32
struct quant_act {
	size_t n;         /* elements, a multiple of QUANT_ACT_BLOCK */
	int8_t *q;        /* [n] */
	float *d;         /* [n / 32] block scales */
	float *s;         /* [n / 32] d * (sum of the block's q): the block's
	                     dequantised sum, for the mins of Q4_1 and Q4_K */
};

/* Fills a (whose arrays hold n and n / 32 entries, caller-owned) from x[n];
 * n must be a multiple of 32. Rounds to nearest even; a block of zeros gets
 * d = 0 and q = 0. Thread-safe. */
void quant_act_quantize(const float *x, size_t n, struct quant_act *a);
/* 1 when quant_act_dot has an int8 kernel for weights of `type` and rows of
 * n elements (Q8_0, Q5_0 and Q4_1: n % 32 == 0; Q4_K and Q6_K:
 * n % 256 == 0), else 0. */
int quant_act_supported(uint32_t type, size_t n);
/* sum_i dequant(w)[i] * a.q[i] * a.d[i/32] over a->n elements of one row w
 * of `type` (quant_act_supported must hold). The integer products are
 * exact; only the fp32 sum of per-block terms differs between kernel sets
 * (~1e-6 relative). Against the fp32 dot quant_dot_row(type, w, x) it
 * differs by the activation rounding, at most 0.5 d per element.
 * Thread-safe. */
float quant_act_dot(uint32_t type, const void *w, const struct quant_act *a);
/* y[r] = quant_act_dot(type, w + r * row_bytes, a) for r < n_rows (all 0
 * when quant_act_supported fails). Single-threaded; callers split rows. */
void quant_act_matvec(uint32_t type, const void *w, size_t row_bytes, int n_rows,
		      const struct quant_act *a, float *y);
/* quant_act_matvec through the set `impl` (unavailable: scalar). */
void quant_act_matvec_impl(enum quant_impl impl, uint32_t type, const void *w,
			   size_t row_bytes, int n_rows, const struct quant_act *a, float *y);
/* quant_act_dot through the set `impl` (tests, benchmarks); an unavailable
 * impl runs the scalar kernels. */
float quant_act_dot_impl(enum quant_impl impl, uint32_t type, const void *w,
			 const struct quant_act *a);

/* Internal to quant*.c: the SIMD kernels. quant_avx2.c: fp32 activations,
 * same contract as quant_dot_row for their type. quant_act_avx2.c and
 * quant_act_avx512.c: int8 activations, same contract as quant_act_dot.
 * Callers check quant_impl_available first. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define QUANT_HAVE_AVX2 1
float quant_avx2_dot_q8_0(const uint8_t *x, const float *y, size_t n);
float quant_avx2_dot_q5_0(const uint8_t *x, const float *y, size_t n);
float quant_avx2_dot_q4_1(const uint8_t *x, const float *y, size_t n);
float quant_avx2_dot_q4_k(const uint8_t *x, const float *y, size_t n);
float quant_avx2_dot_q6_k(const uint8_t *x, const float *y, size_t n);
float quant_act_avx2_q8_0(const uint8_t *w, const struct quant_act *a);
float quant_act_avx2_q5_0(const uint8_t *w, const struct quant_act *a);
float quant_act_avx2_q4_1(const uint8_t *w, const struct quant_act *a);
float quant_act_avx2_q4_k(const uint8_t *w, const struct quant_act *a);
float quant_act_avx2_q6_k(const uint8_t *w, const struct quant_act *a);
float quant_act_avx512_q8_0(const uint8_t *w, const struct quant_act *a);
float quant_act_avx512_q5_0(const uint8_t *w, const struct quant_act *a);
float quant_act_avx512_q4_1(const uint8_t *w, const struct quant_act *a);
float quant_act_avx512_q4_k(const uint8_t *w, const struct quant_act *a);
float quant_act_avx512_q6_k(const uint8_t *w, const struct quant_act *a);
#else
#define QUANT_HAVE_AVX2 0
#endif

#endif
