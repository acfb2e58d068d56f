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
/* Symmetric int8 of one row: q[i] = round(x[i] / scale) (to nearest, ties
 * to even), scale = max|x| / 127, so |q| <= 127 and x ~= scale * q.
 * Returns scale; an all-zero row or one holding an infinity or a NaN gives
 * scale 0 and q all 0. Thread-safe. */
float quant_f32_to_i8_row(const float *x, int8_t *q, size_t n);
/* y[i] = scale * q[i]. */
void quant_i8_to_f32_row(const int8_t *q, float scale, float *y, size_t n);
/* Symmetric int4 of one row in groups of QUANT_I4_GROUP values: per group
 * g, s[g] = max|x| / 7 and codes round(x / s[g]) in [-7, 7] (to nearest,
 * ties to even; a zero, infinite or NaN group gives s[g] = 0, codes 0),
 * two to a byte: element 2j in the low nibble of q[j], 2j + 1 in the high
 * one, two's complement. n a multiple of QUANT_I4_GROUP; q: n / 2 bytes,
 * s: n / QUANT_I4_GROUP floats. SeKV's int4 value rows (issue 19: values
 * lose no answer at int4 where keys do). Thread-safe. */
#define QUANT_I4_GROUP 32
void quant_f32_to_i4_row(const float *x, uint8_t *q, float *s, size_t n);
/* y[i] = s[i / QUANT_I4_GROUP] * code i of q (n even). */
void quant_i4_to_f32_row(const uint8_t *q, const float *s, float *y, size_t n);

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

/* The scalar reference of the batch GEMM below: y[t * ldy + r] = the
 * scalar set's quant_act_dot of row r (w + r * row_bytes) with token t's
 * vector a[t], for t < n, r < n_rows (quant_act_supported must hold for
 * every a[t].n). Tests hold quant_gemm to it. Thread-safe. */
void quant_act_matmul(uint32_t type, const void *w, size_t row_bytes, int n_rows,
		      const struct quant_act *a, int n, float *y, size_t ldy);

/* ---- int8 GEMM for batches (quant_gemm.c) ----------------------------- */

/* A batch of activation rows quantised as struct quant_act does (the same
 * codes, scales and sums, bit for bit), laid out for the GEMM's vector
 * lanes: tokens in groups of QUANT_GEMM_TOK, each group's codes
 * interleaved four at a time, stored unsigned (code + 128) so they can be
 * the unsigned operand of vpdpbusd while the weights are the signed one.
 * The token count is padded to QUANT_GEMM_PAD with zero tokens (code 128,
 * d = s = 0). */
#define QUANT_GEMM_TOK 8
#define QUANT_GEMM_PAD 16
/* Weight rows quant_gemm unpacks at once (one panel of its scratch):
 * callers splitting rows over threads split them in multiples of it. */
#define QUANT_GEMM_PANEL 16
struct quant_gemm_act {
	int n;          /* tokens */
	size_t cols;    /* elements per token, a multiple of 32 */
	uint8_t *q;     /* [n_pad / 8][cols / 4][8][4]: byte j of token 8g + t's
	                   elements 4k..4k+3 at ((g * cols / 4 + k) * 8 + t) * 4 + j */
	float *d;       /* [n_pad / 8][cols / 32][8] block scales */
	float *s;       /* [n_pad / 8][cols / 32][8] d * (sum of the block's codes) */
};

/* n rounded up to QUANT_GEMM_PAD: q holds quant_gemm_pad(n) * cols bytes,
 * d and s quant_gemm_pad(n) * cols / 32 floats. */
int quant_gemm_pad(int n);
/* Quantises token groups [g0, g1) of a (a->n, a->cols and the arrays set
 * by the caller) from the rows x[t * ldx .. + cols); tokens >= a->n of the
 * last groups become zero tokens. Disjoint group ranges may be packed by
 * different threads at once. The active kernel set's code (the scalar
 * rule of quant_act_quantize, bit for bit, in every set). */
void quant_gemm_pack(const float *x, size_t ldx, int g0, int g1, struct quant_gemm_act *a);
/* quant_gemm_pack through the set `impl` (unavailable: scalar). */
void quant_gemm_pack_impl(enum quant_impl impl, const float *x, size_t ldx, int g0, int g1,
			  struct quant_gemm_act *a);
/* 1 when the set `impl` has a GEMM kernel for weights of `type` in rows of
 * cols elements, else 0 (callers take the fp32 path): AVX-512 (VNNI):
 * Q8_0, Q5_0, Q4_1, Q4_K, Q6_K; AVX2: the same but Q8_0 (its codes
 * reach -128, and pmaddubsw's int16 pair sums would saturate); scalar:
 * none (quant_act_matmul is the reference, not a fast path). cols as for
 * quant_act_supported. */
int quant_gemm_supported_impl(enum quant_impl impl, uint32_t type, size_t cols);
/* quant_gemm_supported_impl of the active set. */
int quant_gemm_supported(uint32_t type, size_t cols);
/* Bytes of the scratch quant_gemm needs for rows of cols elements (the
 * weight rows of one panel, unpacked to int8 codes and fp32 scales). */
size_t quant_gemm_scratch_bytes(size_t cols);
/* y[t * ldy + r] = sum_i dequant(w_r)[i] * q_t[i] * d_t[i / 32] for tokens
 * t < a->n and rows r < n_rows of w (row r at w + r * row_bytes, a->cols
 * elements; quant_gemm_supported must hold). Per block of the weight's
 * scale (16 or 32 elements) the integer product of weight codes and
 * activation codes is exact (int32) and is scaled once in fp32, as in
 * quant_act_dot: the result is quant_act_matmul's up to the order of the
 * fp32 sums (~1e-6 relative). A panel of weight rows is unpacked once
 * into `scratch` (quant_gemm_scratch_bytes(a->cols) bytes, 64-byte
 * aligned, owned by the caller) and multiplied by every token.
 * Single-threaded; callers split rows, each thread with its own scratch. */
void quant_gemm(uint32_t type, const void *w, size_t row_bytes, int n_rows,
		const struct quant_gemm_act *a, float *y, size_t ldy, void *scratch);
/* quant_gemm through the set `impl` (quant_gemm_supported_impl must hold). */
void quant_gemm_impl(enum quant_impl impl, uint32_t type, const void *w, size_t row_bytes,
		     int n_rows, const struct quant_gemm_act *a, float *y, size_t ldy,
		     void *scratch);

/* Internal to quant*.c: the SIMD kernels. quant_avx2.c: fp32 activations,
 * same contract as quant_dot_row for their type. quant_act_avx2.c and
 * quant_act_avx512.c: int8 activations, same contract as quant_act_dot
 * (and, from quant_gemm_simd.h, quant_gemm and the block quantiser of
 * quant_gemm_pack: one block of 32 in the packed layout).
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
void quant_act_avx2_gemm_block(const float *x, uint8_t *q, float *d, float *s);
void quant_act_avx512_gemm_block(const float *x, uint8_t *q, float *d, float *s);
void quant_act_avx2_gemm(uint32_t type, const uint8_t *w, size_t row_bytes, int n_rows,
			 const struct quant_gemm_act *a, float *y, size_t ldy, void *scratch);
void quant_act_avx512_gemm(uint32_t type, const uint8_t *w, size_t row_bytes, int n_rows,
			   const struct quant_gemm_act *a, float *y, size_t ldy, void *scratch);
#else
#define QUANT_HAVE_AVX2 0
#endif

#endif
