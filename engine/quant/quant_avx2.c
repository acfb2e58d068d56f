/* quant_avx2.c - AVX2+FMA dot products of Q8_0, Q5_0, Q4_1, Q4_K and Q6_K
 * rows against fp32 vectors: the kernels decode matvecs spend their time in.
 *
 * Invariant: each kernel computes the sum of its scalar twin in quant.c
 * (dot_q8_0, ...): weights are decoded eight at a time into fp32 registers
 * and multiplied by y in fp32. Activations are never quantised and no row
 * or block is stored; only the summation order differs from the scalar
 * code. Every function carries target("avx2,fma,f16c") so this file builds
 * under any -march; quant.c calls these only after checking the CPU.
 */
#include "engine/quant/quant.h"
#include "engine/quant/quant_int.h"

#if QUANT_HAVE_AVX2

#define AVX2_FN __attribute__((target("avx2,fma,f16c")))
#define QSIMD_FN AVX2_FN
#include "engine/quant/quant_simd.h"

/* Low 8 signed (resp. unsigned) bytes of v as 8 floats. */
AVX2_FN static inline __m256 s8_ps(__m128i v)
{
	return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
}

AVX2_FN static inline __m256 u8_ps(__m128i v)
{
	return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
}

/* sum_j q[j] * y[j] for 32 signed bytes q (lo = q[0..15], hi = q[16..31]). */
AVX2_FN static inline __m256 dot32_s8(__m128i lo, __m128i hi, const float *y)
{
	__m256 t0 = _mm256_mul_ps(s8_ps(lo), _mm256_loadu_ps(y));
	__m256 t1 = _mm256_mul_ps(s8_ps(_mm_srli_si128(lo, 8)), _mm256_loadu_ps(y + 8));

	t0 = _mm256_fmadd_ps(s8_ps(hi), _mm256_loadu_ps(y + 16), t0);
	t1 = _mm256_fmadd_ps(s8_ps(_mm_srli_si128(hi, 8)), _mm256_loadu_ps(y + 24), t1);
	return _mm256_add_ps(t0, t1);
}

/* Q8_0: sum over blocks of d * sum_j q[j] y[j]. Two accumulators (even and
 * odd blocks) so consecutive blocks do not wait on one FMA chain. */
AVX2_FN float quant_avx2_dot_q8_0(const uint8_t *b, const float *y, size_t n)
{
	__m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
	size_t k = 0;

	for (size_t i = 0; i + 32 <= n; i += 32, b += 34, k ^= 1) {
		__m128i lo = _mm_loadu_si128((const __m128i *)(b + 2));
		__m128i hi = _mm_loadu_si128((const __m128i *)(b + 18));
		acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(qsimd_f16(b)), dot32_s8(lo, hi, y + i), acc[k]);
	}
	return qsimd_hsum(_mm256_add_ps(acc[0], acc[1]));
}

/* 0xff in byte j of the result when bit j of bits is set, j in 0..15
 * (half = 0) or 16..31 (half = 1): each byte is broadcast to eight lanes,
 * every lane sets all bits but its own, and only a set own bit gives 0xff
 * (ggml's bytes_from_bits_32, one 128-bit half at a time). */
AVX2_FN static inline __m128i bits_to_bytes(uint32_t bits, int half)
{
	__m128i sel = half ? _mm_set_epi64x(0x0303030303030303, 0x0202020202020202)
			   : _mm_set_epi64x(0x0101010101010101, 0x0000000000000000);
	__m128i v = _mm_shuffle_epi8(_mm_set1_epi32((int)bits), sel);

	v = _mm_or_si128(v, _mm_set1_epi64x(0x7fbfdfeff7fbfdfe));
	return _mm_cmpeq_epi8(v, _mm_set1_epi32(-1));
}

/* Q5_0: q - 16 as a signed byte is the nibble when the fifth bit is set,
 * else the nibble with its top four bits set (nibble - 16). */
AVX2_FN float quant_avx2_dot_q5_0(const uint8_t *b, const float *y, size_t n)
{
	const __m128i m4 = _mm_set1_epi8(0x0f), hi4 = _mm_set1_epi8((char)0xf0);
	__m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
	size_t k = 0;

	for (size_t i = 0; i + 32 <= n; i += 32, b += 22, k ^= 1) {
		uint32_t qh;
		memcpy(&qh, b + 2, sizeof qh);
		__m128i qs = _mm_loadu_si128((const __m128i *)(b + 6));
		__m128i lo = _mm_and_si128(qs, m4);
		__m128i hi = _mm_and_si128(_mm_srli_epi16(qs, 4), m4);
		lo = _mm_or_si128(lo, _mm_andnot_si128(bits_to_bytes(qh, 0), hi4));
		hi = _mm_or_si128(hi, _mm_andnot_si128(bits_to_bytes(qh, 1), hi4));
		acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(qsimd_f16(b)), dot32_s8(lo, hi, y + i), acc[k]);
	}
	return qsimd_hsum(_mm256_add_ps(acc[0], acc[1]));
}

/* acc[c] += (d * q - o) * y for the 32 unsigned bytes q of v, eight per
 * accumulator: the scalar kernel's decoded value, then its product. */
AVX2_FN static inline void fma32_u8(__m256 acc[4], __m256i v, float d, float o,
				    const float *y)
{
	__m256 vd = _mm256_set1_ps(d), vo = _mm256_set1_ps(-o);
	__m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
	__m256 x0 = _mm256_fmadd_ps(u8_ps(lo), vd, vo);
	__m256 x1 = _mm256_fmadd_ps(u8_ps(_mm_srli_si128(lo, 8)), vd, vo);
	__m256 x2 = _mm256_fmadd_ps(u8_ps(hi), vd, vo);
	__m256 x3 = _mm256_fmadd_ps(u8_ps(_mm_srli_si128(hi, 8)), vd, vo);

	acc[0] = _mm256_fmadd_ps(x0, _mm256_loadu_ps(y), acc[0]);
	acc[1] = _mm256_fmadd_ps(x1, _mm256_loadu_ps(y + 8), acc[1]);
	acc[2] = _mm256_fmadd_ps(x2, _mm256_loadu_ps(y + 16), acc[2]);
	acc[3] = _mm256_fmadd_ps(x3, _mm256_loadu_ps(y + 24), acc[3]);
}

/* Q4_1: value q * d + m, q an unsigned nibble (low nibbles are elements
 * 0..15, high nibbles 16..31). Each 32-element block is one fma32_u8:
 * two accumulator sets alternate between blocks. */
AVX2_FN float quant_avx2_dot_q4_1(const uint8_t *b, const float *y, size_t n)
{
	const __m128i m4 = _mm_set1_epi8(0x0f);
	__m256 acc[2][4] = {{_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
			     _mm256_setzero_ps()},
			    {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
			     _mm256_setzero_ps()}};
	size_t k = 0;

	for (size_t i = 0; i + 32 <= n; i += 32, b += 20, k ^= 1) {
		__m128i qs = _mm_loadu_si128((const __m128i *)(b + 4));
		__m256i v = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(qs, 4), m4),
					     _mm_and_si128(qs, m4));
		fma32_u8(acc[k], v, qsimd_f16(b), -qsimd_f16(b + 2), y + i);
	}
	for (int c = 0; c < 4; c++)
		acc[0][c] = _mm256_add_ps(acc[0][c], acc[1][c]);
	return qsimd_hsum(_mm256_add_ps(_mm256_add_ps(acc[0][0], acc[0][1]),
				  _mm256_add_ps(acc[0][2], acc[0][3])));
}

/* Q4_K: 32-byte group g holds sub-block 2g in its low nibbles and 2g+1 in
 * its high nibbles; value d*sc*q - dmin*m. */
AVX2_FN float quant_avx2_dot_q4_k(const uint8_t *b, const float *y, size_t n)
{
	const __m256i m4 = _mm256_set1_epi8(0x0f);
	__m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(),
			 _mm256_setzero_ps(), _mm256_setzero_ps()};

	for (size_t i = 0; i + 256 <= n; i += 256, b += 144) {
		float d = qsimd_f16(b), dmin = qsimd_f16(b + 2);
		const uint8_t *sc = b + 4, *qs = b + 16;
		const float *yb = y + i;
		for (int g = 0; g < 4; g++, qs += 32, yb += 64) {
			int s0, m0, s1, m1;
			quant_k_scale_min(sc, 2 * g, &s0, &m0);
			quant_k_scale_min(sc, 2 * g + 1, &s1, &m1);
			__m256i q = _mm256_loadu_si256((const __m256i *)qs);
			fma32_u8(acc, _mm256_and_si256(q, m4), d * (float)s0,
				 dmin * (float)m0, yb);
			fma32_u8(acc, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
				 d * (float)s1, dmin * (float)m1, yb + 32);
		}
	}
	return qsimd_hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]),
				  _mm256_add_ps(acc[2], acc[3])));
}

/* Q6_K: per half of 128 elements, byte l of q[k] below is element l + 32k
 * (low bits from a nibble of ql, high bits from bits 2k..2k+1 of qh[l]),
 * and elements l + 32k with l < 16 (resp. >= 16) share scale sc[2k]
 * (resp. sc[2k+1]); value d*sc*(q - 32). */
AVX2_FN float quant_avx2_dot_q6_k(const uint8_t *b, const float *y, size_t n)
{
	const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x30);
	const __m256i off = _mm256_set1_epi8(32);
	__m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};

	for (size_t i = 0; i + 256 <= n; i += 256, b += 210) {
		const uint8_t *ql = b, *qh = b + 128;
		const int8_t *sc = (const int8_t *)(b + 192);
		float d = qsimd_f16(b + 208), ds[16];
		const float *yb = y + i;

		for (int j = 0; j < 16; j++)
			ds[j] = d * (float)sc[j];
		for (int h = 0; h < 2; h++, ql += 64, qh += 32, yb += 128) {
			__m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
			__m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
			__m256i hb = _mm256_loadu_si256((const __m256i *)qh);
			__m256i q[4];
			q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
					       _mm256_and_si256(_mm256_slli_epi16(hb, 4), m2));
			q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
					       _mm256_and_si256(_mm256_slli_epi16(hb, 2), m2));
			q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
					       _mm256_and_si256(hb, m2));
			q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
					       _mm256_and_si256(_mm256_srli_epi16(hb, 2), m2));
			for (int k = 0; k < 4; k++) {
				__m256i v = _mm256_sub_epi8(q[k], off);
				__m128i lo = _mm256_castsi256_si128(v);
				__m128i hi = _mm256_extracti128_si256(v, 1);
				const float *yk = yb + 32 * k;
				__m256 t0 = _mm256_mul_ps(s8_ps(lo), _mm256_loadu_ps(yk));
				__m256 t1 = _mm256_mul_ps(s8_ps(hi), _mm256_loadu_ps(yk + 16));
				t0 = _mm256_fmadd_ps(s8_ps(_mm_srli_si128(lo, 8)),
						     _mm256_loadu_ps(yk + 8), t0);
				t1 = _mm256_fmadd_ps(s8_ps(_mm_srli_si128(hi, 8)),
						     _mm256_loadu_ps(yk + 24), t1);
				acc[0] = _mm256_fmadd_ps(_mm256_set1_ps(ds[8 * h + 2 * k]), t0, acc[0]);
				acc[1] = _mm256_fmadd_ps(_mm256_set1_ps(ds[8 * h + 2 * k + 1]), t1, acc[1]);
			}
		}
	}
	return qsimd_hsum(_mm256_add_ps(acc[0], acc[1]));
}

#else

/* Keeps the translation unit non-empty (ISO C) on non-x86 builds. */
typedef int quant_avx2_unused;

#endif
