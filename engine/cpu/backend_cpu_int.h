/* backend_cpu_int.h - internals shared by the CPU backend's files (not for
 * other modules): the thread pool (cpu_pool.c), the workspace, the fast
 * exponential, and the operations each file implements for the table in
 * backend_cpu.c (attention in cpu_attention.c, SeKV decode operations in
 * cpu_sekv.c, LAPACK ones in cpu_lapack.c).
 */
#ifndef SEKV_BACKEND_CPU_INT_H
#define SEKV_BACKEND_CPU_INT_H

#include "engine/backend/backend.h"
#include "engine/quant/quant.h"

#include <math.h>
#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#define ATTN_TILE 256 /* keys per attention tile */
#define ATTN_QBLK 64  /* queries per batch-attention work item */
#define MIX_PART 256 /* rows per part of a SeKV mixed attention */
#define LANES 16      /* inner loops of fixed width so -O2 vectorises them */

/* RoPE of one head's row x [>= n_rot]: the pair (x[j], x[j + half])
 * (neox) or (x[2j], x[2j + 1]) rotated by the angle of cosine c[j], sine
 * s[j], j < half = n_rot / 2 (the one rotation of the CPU backend:
 * forward pass and SeKV rebuild; see backend_ops.rope). */
static inline void cpu_rope_row(float *x, int half, int neox, const float *c, const float *s)
{
	int step = neox ? 1 : 2, off = neox ? half : 1;

	for (int j = 0; j < half; j++) {
		float *a = x + j * step, *b = a + off;
		float x0 = *a, x1 = *b;
		*a = x0 * c[j] - x1 * s[j];
		*b = x0 * s[j] + x1 * c[j];
	}
}

/* exp(x) for x in [-87, 88] (clamped outside), relative error < 1e-7
 * (measured 8e-8 against exp in double): Cephes expf's range reduction
 * x = n ln2 + r and degree-6 polynomial, written branch-free so loops
 * over it vectorise; libm's expf does not, and the vocabulary
 * log-sum-exp takes n_vocab of them per token. */
static inline float exp_fast(float x)
{
	float n, r, p, sc;
	uint32_t u;

	x = x < -87.0f ? -87.0f : x;
	x = x > 88.0f ? 88.0f : x;
	n = rintf(x * 1.44269504088896341f);
	r = fmaf(n, -0.693359375f, x);
	r = fmaf(n, 2.12194440e-4f, r);
	p = 1.9875691500e-4f;
	p = fmaf(p, r, 1.3981999507e-3f);
	p = fmaf(p, r, 8.3334519073e-3f);
	p = fmaf(p, r, 4.1665795894e-2f);
	p = fmaf(p, r, 1.6666665459e-1f);
	p = fmaf(p, r, 5.0000001201e-1f);
	p = fmaf(p, r * r, r) + 1.0f;
	u = (uint32_t)((int32_t)n + 127) << 23;
	memcpy(&sc, &u, sizeof sc);
	return p * sc;
}

/* ---- decode attention kernels: exact attention (cpu_attention.c) and
 * SeKV's mixed attention (cpu_sekv.c) score and sum rows with these ---- */

/* sum_e x[e] y[e] in 2 x LANES partial sums (vectorised without
 * -ffast-math; two independent chains so FMA latency does not bound it) */
static inline float cpu_dot_lanes(const float *restrict x, const float *restrict y, int n)
{
	float acc[LANES] = { 0 }, acc2[LANES] = { 0 }, s = 0.0f;
	int e = 0;

	for (; e + 2 * LANES <= n; e += 2 * LANES)
		for (int k = 0; k < LANES; k++) {
			acc[k] += x[e + k] * y[e + k];
			acc2[k] += x[e + LANES + k] * y[e + LANES + k];
		}
	for (; e + LANES <= n; e += LANES)
		for (int k = 0; k < LANES; k++)
			acc[k] += x[e + k] * y[e + k];
	for (int k = 0; k < LANES; k++)
		s += acc[k] + acc2[k];
	for (; e < n; e++)
		s += x[e] * y[e];
	return s;
}

/* The largest of x[0..n) (-inf when n is 0), in LANES partial maxima. */
static inline float cpu_max_lanes(const float *restrict x, int n)
{
	float lane[LANES], m = -INFINITY;
	int e = 0;

	for (int k = 0; k < LANES; k++)
		lane[k] = -INFINITY;
	for (; e + LANES <= n; e += LANES)
		for (int k = 0; k < LANES; k++)
			lane[k] = x[e + k] > lane[k] ? x[e + k] : lane[k];
	for (int k = 0; k < LANES; k++)
		m = lane[k] > m ? lane[k] : m;
	for (; e < n; e++)
		m = x[e] > m ? x[e] : m;
	return m;
}

/* x[e] = exp(x[e] - m) for e < n, in place; returns their sum (LANES
 * partial sums in fp32: softmax tiles hold at most a few thousand terms,
 * each <= 1 when m is their max). */
static inline float cpu_exp_lanes(float *restrict x, int n, float m)
{
	float lane[LANES] = { 0 }, sum = 0.0f;
	int e = 0;

	for (; e + LANES <= n; e += LANES)
		for (int k = 0; k < LANES; k++) {
			x[e + k] = exp_fast(x[e + k] - m);
			lane[k] += x[e + k];
		}
	for (int k = 0; k < LANES; k++)
		sum += lane[k];
	for (; e < n; e++) {
		x[e] = exp_fast(x[e] - m);
		sum += x[e];
	}
	return sum;
}

/* y[e] += a x[e] */
static inline void cpu_axpy_lanes(float *restrict y, float a, const float *restrict x, int n)
{
	int e = 0;

	for (; e + LANES <= n; e += LANES)
		for (int k = 0; k < LANES; k++)
			y[e + k] += a * x[e + k];
	for (; e < n; e++)
		y[e] += a * x[e];
}

#if defined(__AVX512F__)
/* The sums of the 16 lanes of each of a[0..8), in lanes 0..7 (the rest
 * zero): one tree of 128-bit shuffles for all eight, about a third of the
 * work of eight separate reductions. */
static inline __attribute__((always_inline)) __m512 cpu_hsum8(const __m512 a[8])
{
	__m512 b[4], c[2], u, w;

	/* b[i]: a[2i]'s quarters 0+2, 1+3 then a[2i+1]'s */
#pragma GCC unroll 4
	for (int i = 0; i < 4; i++)
		b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x44),
				     _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xee));
	/* c[i]: 128-bit lane k holds four partial sums of a[4i + k] */
#pragma GCC unroll 2
	for (int i = 0; i < 2; i++)
		c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0x88),
				     _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0xdd));
	/* lane 4k: sum of a[k]; lane 4k + 1: sum of a[4 + k] */
	u = _mm512_add_ps(_mm512_unpacklo_ps(c[0], c[1]), _mm512_unpackhi_ps(c[0], c[1]));
	w = _mm512_add_ps(u, _mm512_permute_ps(u, 0x4e));
	return _mm512_maskz_permutexvar_ps(0x00ff, _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13,
								     0, 0, 0, 0, 0, 0, 0, 0), w);
}
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
/* The sums of the 8 lanes of each of a[0..8), in lanes 0..7: two levels
 * of hadd leave each 128-bit half with a partial sum of every a[k], one
 * add of the swapped halves finishes all eight. */
static inline __attribute__((always_inline)) __m256 cpu_hsum8(const __m256 a[8])
{
	__m256 b[4], c[2];

#pragma GCC unroll 4
	for (int i = 0; i < 4; i++)
		b[i] = _mm256_hadd_ps(a[2 * i], a[2 * i + 1]);
	/* c[i]: lane k of each half holds a half's sum of a[4i + k] */
#pragma GCC unroll 2
	for (int i = 0; i < 2; i++)
		c[i] = _mm256_hadd_ps(b[2 * i], b[2 * i + 1]);
	return _mm256_add_ps(_mm256_permute2f128_ps(c[0], c[1], 0x20),
			     _mm256_permute2f128_ps(c[0], c[1], 0x31));
}

/* Elements [e, e + 8) of a row of int8 codes (i8) or fp16 values, as fp32
 * (exact either way). */
static inline __attribute__((always_inline)) __m256 cpu_row8_ps(const void *r, int i8, int e)
{
	if (i8)
		return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
			_mm_loadl_epi64((const __m128i *)((const int8_t *)r + e))));
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)r + e)));
}

/* o[h] += p[h * ldp] * scale * v for h < G <= 8 (o rows d apart, d % 8 ==
 * 0): cpu_values_f16's and cpu_values_i8's AVX2 path, v an fp16 row or
 * int8 codes (i8). The G weights stay in registers; each output vector is
 * loaded and stored once per row. */
static inline __attribute__((always_inline)) void
cpu_values_row8(float *o, int G, int d, const void *v, int i8, float scale, const float *p,
		size_t ldp)
{
	__m256 pv[8];

#pragma GCC unroll 8
	for (int h = 0; h < G; h++)
		pv[h] = _mm256_set1_ps(p[(size_t)h * ldp] * scale);
	for (int e = 0; e < d; e += 8) {
		__m256 vv = cpu_row8_ps(v, i8, e);
#pragma GCC unroll 8
		for (int h = 0; h < G; h++) {
			float *oh = o + (size_t)h * d + e;
			_mm256_storeu_ps(oh, _mm256_fmadd_ps(pv[h], vv, _mm256_loadu_ps(oh)));
		}
	}
}
#endif

/* Scores of one key row (fp16, or int8 when i8) against the G query heads
 * of its group: s[h * lds] = scale * q[h] . k for h < G (q rows d apart).
 * The key is widened to fp32 once and feeds G accumulators. */
static inline __attribute__((always_inline)) void
cpu_scores_row(const float *q, int G, int d, const void *k, int i8, float scale,
	       float *s, size_t lds, float *kbuf)
{
#if defined(__AVX512F__)
	if (d % 16 == 0 && G <= 8) {
		__m512 acc[8];
#pragma GCC unroll 8
		for (int h = 0; h < G; h++)
			acc[h] = _mm512_setzero_ps();
		for (int e = 0; e < d; e += 16) {
			__m512 kv = i8 ? _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
						_mm_loadu_si128((const __m128i *)((const int8_t *)k + e))))
				       : _mm512_cvtph_ps(_mm256_loadu_si256(
						(const __m256i *)((const uint16_t *)k + e)));
#pragma GCC unroll 8
			for (int h = 0; h < G; h++)
				acc[h] = _mm512_fmadd_ps(_mm512_loadu_ps(q + (size_t)h * d + e), kv, acc[h]);
		}
		if (G <= 2) {
#pragma GCC unroll 2
			for (int h = 0; h < G; h++)
				s[(size_t)h * lds] = scale * _mm512_reduce_add_ps(acc[h]);
			return;
		}
#pragma GCC unroll 8
		for (int h = G; h < 8; h++)
			acc[h] = _mm512_setzero_ps();
		float sum[16];
		_mm512_storeu_ps(sum, _mm512_mul_ps(cpu_hsum8(acc), _mm512_set1_ps(scale)));
#pragma GCC unroll 8
		for (int h = 0; h < G; h++)
			s[(size_t)h * lds] = sum[h];
		return;
	}
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
	/* G accumulators, the key and a query vector: at most 10 of the 16
	 * registers; heads past G stay zero for the one reduction of 8 */
	if (d % 8 == 0 && G <= 8) {
		__m256 acc[8];
		float sum[8];
#pragma GCC unroll 8
		for (int h = 0; h < 8; h++)
			acc[h] = _mm256_setzero_ps();
		for (int e = 0; e < d; e += 8) {
			__m256 kv = cpu_row8_ps(k, i8, e);
#pragma GCC unroll 8
			for (int h = 0; h < G; h++)
				acc[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + (size_t)h * d + e), kv, acc[h]);
		}
		_mm256_storeu_ps(sum, _mm256_mul_ps(cpu_hsum8(acc), _mm256_set1_ps(scale)));
#pragma GCC unroll 8
		for (int h = 0; h < G; h++)
			s[(size_t)h * lds] = sum[h];
		return;
	}
#endif
	if (i8)
		for (int e = 0; e < d; e++)
			kbuf[e] = (float)((const int8_t *)k)[e];
	else
		quant_f16_to_f32_row(k, kbuf, (size_t)d);
	for (int h = 0; h < G; h++)
		s[(size_t)h * lds] = scale * cpu_dot_lanes(q + (size_t)h * d, kbuf, d);
}

/* o[h] += p[h * ldp] * v for h < G (o rows d apart): the fp16 value row is
 * converted once for the G heads. */
static inline __attribute__((always_inline)) void
cpu_values_f16(float *o, int G, int d, const uint16_t *v, const float *p, size_t ldp,
	     float *vbuf)
{
#if defined(__AVX512F__)
	if (d % 16 == 0 && G <= 8) {
		__m512 pv[8];
#pragma GCC unroll 8
		for (int h = 0; h < G; h++)
			pv[h] = _mm512_set1_ps(p[(size_t)h * ldp]);
		for (int e = 0; e < d; e += 16) {
			__m512 vv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(v + e)));
#pragma GCC unroll 8
			for (int h = 0; h < G; h++) {
				float *oh = o + (size_t)h * d + e;
				_mm512_storeu_ps(oh, _mm512_fmadd_ps(pv[h], vv, _mm512_loadu_ps(oh)));
			}
		}
		return;
	}
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
	if (d % 8 == 0 && G <= 8) {
		cpu_values_row8(o, G, d, v, 0, 1.0f, p, ldp);
		return;
	}
#endif
	quant_f16_to_f32_row(v, vbuf, (size_t)d);
	for (int h = 0; h < G; h++)
		cpu_axpy_lanes(o + (size_t)h * d, p[(size_t)h * ldp], vbuf, d);
}

/* o[h] += p[h * ldp] * scale * v for h < G: an int8 value row of one
 * scale (backend_row_type BACKEND_ROW_I8), widened once for the G heads. */
static inline __attribute__((always_inline)) void
cpu_values_i8(float *o, int G, int d, const int8_t *v, float scale, const float *p,
	      size_t ldp, float *vbuf)
{
#if defined(__AVX512F__)
	if (d % 16 == 0 && G <= 8) {
		__m512 pv[8];
#pragma GCC unroll 8
		for (int h = 0; h < G; h++)
			pv[h] = _mm512_set1_ps(p[(size_t)h * ldp] * scale);
		for (int e = 0; e < d; e += 16) {
			__m512 vv = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
				_mm_loadu_si128((const __m128i *)(v + e))));
#pragma GCC unroll 8
			for (int h = 0; h < G; h++) {
				float *oh = o + (size_t)h * d + e;
				_mm512_storeu_ps(oh, _mm512_fmadd_ps(pv[h], vv, _mm512_loadu_ps(oh)));
			}
		}
		return;
	}
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
	if (d % 8 == 0 && G <= 8) {
		cpu_values_row8(o, G, d, v, 1, scale, p, ldp);
		return;
	}
#endif
	for (int e = 0; e < d; e++)
		vbuf[e] = (float)v[e];
	for (int h = 0; h < G; h++)
		cpu_axpy_lanes(o + (size_t)h * d, p[(size_t)h * ldp] * scale, vbuf, d);
}

/* o[h] += p[h * ldp] * v for h < G: an int4 value row (BACKEND_ROW_K8V4's
 * values; quant_f32_to_i4_row's packing, sc its d / 32 group scales),
 * widened once for the G heads. */
static inline __attribute__((always_inline)) void
cpu_values_i4(float *o, int G, int d, const uint8_t *v, const float *sc, const float *p,
	      size_t ldp, float *vbuf)
{
#if defined(__AVX512F__)
	if (d % QUANT_I4_GROUP == 0 && G <= 8) {
		const __m128i lo4 = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
		for (int e = 0; e < d; e += 16) {
			__m512 pv[8];
			/* 8 bytes -> 16 nibbles in element order, sign-extended */
			__m128i b = _mm_loadl_epi64((const __m128i *)(v + e / 2));
			__m128i n = _mm_unpacklo_epi8(_mm_and_si128(b, lo4),
						      _mm_and_si128(_mm_srli_epi16(b, 4), lo4));
			n = _mm_sub_epi8(_mm_xor_si128(n, eight), eight);
			__m512 vv = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(n));
#pragma GCC unroll 8
			for (int h = 0; h < G; h++) {
				float *oh = o + (size_t)h * d + e;
				pv[h] = _mm512_set1_ps(p[(size_t)h * ldp] * sc[e / QUANT_I4_GROUP]);
				_mm512_storeu_ps(oh, _mm512_fmadd_ps(pv[h], vv, _mm512_loadu_ps(oh)));
			}
		}
		return;
	}
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
	/* 16 values (8 bytes, one scale) per step, as two vectors of 8 */
	if (d % QUANT_I4_GROUP == 0 && G <= 8) {
		const __m128i lo4 = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
		for (int e = 0; e < d; e += 16) {
			__m128i b = _mm_loadl_epi64((const __m128i *)(v + e / 2));
			__m128i n = _mm_unpacklo_epi8(_mm_and_si128(b, lo4),
						      _mm_and_si128(_mm_srli_epi16(b, 4), lo4));
			n = _mm_sub_epi8(_mm_xor_si128(n, eight), eight);
			__m256 v0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(n));
			__m256 v1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(n, 8)));
#pragma GCC unroll 8
			for (int h = 0; h < G; h++) {
				float *oh = o + (size_t)h * d + e;
				__m256 ph = _mm256_set1_ps(p[(size_t)h * ldp] * sc[e / QUANT_I4_GROUP]);
				_mm256_storeu_ps(oh, _mm256_fmadd_ps(ph, v0, _mm256_loadu_ps(oh)));
				_mm256_storeu_ps(oh + 8, _mm256_fmadd_ps(ph, v1, _mm256_loadu_ps(oh + 8)));
			}
		}
		return;
	}
#endif
	quant_i4_to_f32_row(v, sc, vbuf, (size_t)d);
	for (int h = 0; h < G; h++)
		cpu_axpy_lanes(o + (size_t)h * d, p[(size_t)h * ldp], vbuf, d);
}

/* cpu_scores_row and cpu_values_f16 with G as a constant for every group
 * size up to 8 (GQA groups of 2, 3, 4, 6, 7, 8 are common: Qwen2.5 0.5B 7,
 * 1.5B 6, SmolLM2 3), so the accumulators stay in registers. */
#define CPU_GROUP_CASES(CALL) \
	switch (G) { \
	case 1: CALL(1); break; case 2: CALL(2); break; case 3: CALL(3); break; \
	case 4: CALL(4); break; case 5: CALL(5); break; case 6: CALL(6); break; \
	case 7: CALL(7); break; case 8: CALL(8); break; default: CALL(G); break; \
	}

static inline void cpu_scores_row_g(const float *q, int G, int d, const void *k, int i8,
				    float scale, float *s, size_t lds, float *kbuf)
{
#define CPU_SCORES(g) cpu_scores_row(q, g, d, k, i8, scale, s, lds, kbuf)
	CPU_GROUP_CASES(CPU_SCORES)
#undef CPU_SCORES
}

static inline void cpu_values_f16_g(float *o, int G, int d, const uint16_t *v, const float *p,
				    size_t ldp, float *vbuf)
{
#define CPU_VALUES(g) cpu_values_f16(o, g, d, v, p, ldp, vbuf)
	CPU_GROUP_CASES(CPU_VALUES)
#undef CPU_VALUES
}

static inline void cpu_values_i4_g(float *o, int G, int d, const uint8_t *v, const float *sc,
				   const float *p, size_t ldp, float *vbuf)
{
#define CPU_VALUES(g) cpu_values_i4(o, g, d, v, sc, p, ldp, vbuf)
	CPU_GROUP_CASES(CPU_VALUES)
#undef CPU_VALUES
}

static inline void cpu_values_i8_g(float *o, int G, int d, const int8_t *v, float scale,
				   const float *p, size_t ldp, float *vbuf)
{
#define CPU_VALUES(g) cpu_values_i8(o, g, d, v, scale, p, ldp, vbuf)
	CPU_GROUP_CASES(CPU_VALUES)
#undef CPU_VALUES
}

#if defined(__AVX512F__)
/* cpu_values_tile's blocks of W vectors of 16 dimensions (d % (16 W) == 0) */
static inline __attribute__((always_inline)) void
cpu_values_tile_w(float *o, int G, int W, int d, const uint16_t *v, size_t ldv, int T,
		  const float *p, size_t ldp)
{
	for (int e0 = 0; e0 < d; e0 += 16 * W) {
		__m512 acc[8][4];
#pragma GCC unroll 8
		for (int h = 0; h < G; h++)
#pragma GCC unroll 4
			for (int w = 0; w < W; w++)
				acc[h][w] = _mm512_loadu_ps(o + (size_t)h * d + e0 + 16 * w);
		for (int t = 0; t < T; t++) {
			const uint16_t *vt = v + (size_t)t * ldv + e0;
			__m512 vv[4];
			if (e0 == 0 && t + 8 < T)
				for (int e = 0; e < d; e += 32)
					__builtin_prefetch(vt + 8 * ldv + e);
#pragma GCC unroll 4
			for (int w = 0; w < W; w++)
				vv[w] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vt + 16 * w)));
#pragma GCC unroll 8
			for (int h = 0; h < G; h++) {
				__m512 ph = _mm512_set1_ps(p[(size_t)h * ldp + t]);
#pragma GCC unroll 4
				for (int w = 0; w < W; w++)
					acc[h][w] = _mm512_fmadd_ps(ph, vv[w], acc[h][w]);
			}
		}
#pragma GCC unroll 8
		for (int h = 0; h < G; h++)
#pragma GCC unroll 4
			for (int w = 0; w < W; w++)
				_mm512_storeu_ps(o + (size_t)h * d + e0 + 16 * w, acc[h][w]);
	}
}
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
/* cpu_values_tile's blocks of W vectors of 8 dimensions (d % (8 W) == 0,
 * G W + W + 1 <= 16 registers) */
static inline __attribute__((always_inline)) void
cpu_values_tile_w(float *o, int G, int W, int d, const uint16_t *v, size_t ldv, int T,
		  const float *p, size_t ldp)
{
	for (int e0 = 0; e0 < d; e0 += 8 * W) {
		__m256 acc[8][4];
#pragma GCC unroll 8
		for (int h = 0; h < G; h++)
#pragma GCC unroll 4
			for (int w = 0; w < W; w++)
				acc[h][w] = _mm256_loadu_ps(o + (size_t)h * d + e0 + 8 * w);
		for (int t = 0; t < T; t++) {
			__m256 vv[4];
			if (e0 == 0 && t + 8 < T)
				for (int e = 0; e < d; e += 32)
					__builtin_prefetch(v + (size_t)(t + 8) * ldv + e);
#pragma GCC unroll 4
			for (int w = 0; w < W; w++)
				vv[w] = cpu_row8_ps(v + (size_t)t * ldv, 0, e0 + 8 * w);
#pragma GCC unroll 8
			for (int h = 0; h < G; h++) {
				__m256 ph = _mm256_set1_ps(p[(size_t)h * ldp + t]);
#pragma GCC unroll 4
				for (int w = 0; w < W; w++)
					acc[h][w] = _mm256_fmadd_ps(ph, vv[w], acc[h][w]);
			}
		}
#pragma GCC unroll 8
		for (int h = 0; h < G; h++)
#pragma GCC unroll 4
			for (int w = 0; w < W; w++)
				_mm256_storeu_ps(o + (size_t)h * d + e0 + 8 * w, acc[h][w]);
	}
}
#endif

/* o[h] += sum_t p[h * ldp + t] v_t for h < G, t < T: v_t = v + t * ldv is
 * an fp16 row of d. The outputs of a block of dimensions stay in registers
 * over all T rows (a row at a time, as cpu_values_f16 does, loads and
 * stores every output once per row); rows are prefetched ahead on the
 * first block, later blocks find them in cache. AVX-512's blocks are 4
 * vectors per head for up to 6 heads (24 accumulators), 2 for 7-8 heads:
 * both leave registers for the row and the weight; AVX2's, with half the
 * registers, are chosen below. */
static inline __attribute__((always_inline)) void
cpu_values_tile(float *o, int G, int d, const uint16_t *v, size_t ldv, int T, const float *p,
		size_t ldp, float *vbuf)
{
#if defined(__AVX512F__)
	if (G <= 6 && d % 64 == 0) {
		cpu_values_tile_w(o, G, 4, d, v, ldv, T, p, ldp);
		return;
	}
	if (G <= 8 && d % 32 == 0) {
		cpu_values_tile_w(o, G, 2, d, v, ldv, T, p, ldp);
		return;
	}
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
	/* 16 registers: 4 vectors per head for up to 2 heads, 2 for up to
	 * 6, 1 for 7-8 (13, 15 and 10 registers with the rows and weight) */
	if (G <= 2 && d % 32 == 0) {
		cpu_values_tile_w(o, G, 4, d, v, ldv, T, p, ldp);
		return;
	}
	if (G <= 6 && d % 16 == 0) {
		cpu_values_tile_w(o, G, 2, d, v, ldv, T, p, ldp);
		return;
	}
	if (G <= 8 && d % 8 == 0) {
		cpu_values_tile_w(o, G, 1, d, v, ldv, T, p, ldp);
		return;
	}
#endif
	for (int t = 0; t < T; t++)
		cpu_values_f16(o, G, d, v + (size_t)t * ldv, p + t, ldp, vbuf);
}

static inline void cpu_values_tile_g(float *o, int G, int d, const uint16_t *v, size_t ldv,
				     int T, const float *p, size_t ldp, float *vbuf)
{
#define CPU_VTILE(g) cpu_values_tile(o, g, d, v, ldv, T, p, ldp, vbuf)
	CPU_GROUP_CASES(CPU_VTILE)
#undef CPU_VTILE
}

/* A decode step runs ~130 short parallel matvecs; waking a sleeping thread
 * costs tens of microseconds each, as much as the matvec. So workers
 * spin on the job counter for POOL_SPIN_NS after their last job (a decode
 * step's gaps are far shorter) and only then sleep on the condition
 * variable. The caller spins for the workers to finish. */
#define POOL_SPIN_NS 2000000LL

/* Runs items [i0, i1) on worker tid (0 = the calling thread). */
typedef void (*pool_fn)(void *ctx, int i0, int i1, int tid);

struct cpu {
	int n_threads;
	pthread_t *th;          /* [n_threads - 1] */
	int n_started;
	pthread_mutex_t mu;     /* guards sleeping workers' hand-over */
	pthread_cond_t cv_go;
	atomic_ulong gen;       /* bumped once per parallel_for */
	atomic_int pending;     /* workers still running this generation */
	atomic_int sleepers;    /* workers waiting on cv_go */
	atomic_int quit;
	pool_fn fn;             /* job of the current generation; written */
	void *ctx;              /* before gen is bumped (release) */
	int n_items;
};

/* Items [i0, i1) of n_items split into n_parts contiguous chunks: part's. */
void cpu_chunk(int n_items, int n_parts, int part, int *i0, int *i1);
/* Starts n_threads - 1 workers (c->n_threads set); 0 or SEKV_EIO. */
int cpu_pool_start(struct cpu *c, char *err, size_t errlen);
/* Stops and joins the workers; frees the pool's own memory. */
void cpu_pool_stop(struct cpu *c);
/* Runs fn over [0, n_items) split into n_threads contiguous chunks. Small
 * jobs run on the calling thread alone. One caller at a time. */
void cpu_parallel_for(struct cpu *c, int n_items, int min_per_thread,
		      pool_fn fn, void *ctx);

/* A part of a SeKV mixed attention (cpu_sekv.c): up to MIX_PART
 * consecutive unmasked rows of KV head g, from row i of block b on; row is
 * the index of its first row among g's rows. */
struct mix_part {
	int g, b, i, n, row;
};

struct backend_ws {
	struct backend_ws_size sz;
	float *wbuf;   /* [max_w_elems] dequantised weight rows */
	float *kt;     /* [ATTN_TILE][d_head] keys of one tile, fp32 */
	float *vt;     /* [ATTN_TILE][d_head] */
	float *s;      /* [n_batch][ATTN_TILE] scores */
	float *mx;     /* [n_head][n_batch] running maxima */
	float *sm;     /* [n_head][n_batch] running sums */
	struct quant_act act; /* one token's input as int8 blocks: q [max_cols],
	                         d, s [max_cols / 32] */
	struct quant_gemm_act gact; /* a batch's input packed for quant_gemm: q
	                         [pad(n_batch)][max_cols], d, s [pad(n_batch)][max_cols / 32] */
	size_t gq_stride;     /* bytes of quant_gemm scratch per thread */
	uint8_t *gq;          /* [n_threads][gq_stride] quant_gemm scratch, 64-byte aligned */
	int n_part;    /* decode attention: key ranges run in parallel (threads) */
	float *pk;     /* [n_part][ATTN_TILE][d_head] keys of a part's tile */
	float *pv;     /* [n_part][ATTN_TILE][d_head] */
	int ps_rows;   /* max(n_head, ATTN_QBLK): score rows of one part */
	float *ps;     /* [n_part][ps_rows][ATTN_TILE] scores */
	float *po;     /* [n_part][n_head][d_head] unnormalised outputs */
	float *pm;     /* [n_part][ps_rows] running maxima */
	float *pl;     /* [n_part][ps_rows] running sums */
	size_t gs_stride; /* floats of gemm scratch per thread */
	float *gs;     /* [n_threads][gs_stride] gemm packing scratch, 64-byte aligned */
	/* SeKV (mix_rows > 0, else NULL) */
	float *mix_logit; /* [n_head][mix_rows] scores, then exp(score - part max) */
	struct mix_part *mix_part; /* [mix_parts] parts of a mixed attention */
	int mix_parts;    /* n_head * (mix_rows / MIX_PART + 1) */
	float *mix_pm;    /* [mix_parts][n_head] a part's maximum per head of its group */
	float *mix_pl;    /* [mix_parts][n_head] its sum of exponentials */
	float *mix_po;    /* [mix_parts][n_head][d_head] its unnormalised output */
	float *mix_row;   /* [n_threads][d_head] a converted row per thread */
	float *rc_vf;     /* [n_threads][cpu_recon_rank][d_head] factor v's kept
	                     columns as fp32 rows [r][d_head] */
	float *rc_us;     /* [n_threads][cpu_recon_rank + 1] u_i * s */
	float *rc_row;    /* [n_threads][d_head] a reconstructed row */
};

/* The most components a reconstruct job of ws may use: the larger of
 * d_head and the workspace's recon_rank. */
static inline size_t cpu_recon_rank(const struct backend_ws *ws)
{
	return (size_t)(ws->sz.recon_rank > ws->sz.d_head ? ws->sz.recon_rank : ws->sz.d_head);
}

/* 1 when probe p (NULL: none) names at most BACKEND_PROBE_MAX heads, each
 * < n_head with a mass row; 0 otherwise (the op returns SEKV_EINVAL). */
int cpu_probe_ok(const struct backend_probe *p, int n_head);
int cpu_attention(struct backend *b, struct backend_ws *ws, const struct backend_attn *a);
int cpu_attention_mix(struct backend *b, struct backend_ws *ws, const struct backend_mix *a);
int cpu_score_i8(struct backend *b, struct backend_ws *ws, const struct backend_score *a);
int cpu_score_lowrank(struct backend *b, struct backend_ws *ws, const struct backend_score_lr *a);
int cpu_reconstruct(struct backend *b, struct backend_ws *ws,
		    const struct backend_recon *r, int n);
int cpu_svd(struct backend *b, const struct backend_svd *job, int n, int *bad, int *info);
int cpu_pca(struct backend *b, const struct backend_pca *job, int n, int *bad, int *info);

#endif
