/* quant_act_simd.h - the int8-activation kernels, written once and compiled
 * per instruction set: quant_act_avx2.c (pmaddubsw + pmaddwd) and
 * quant_act_avx512.c (AVX-512 VNNI vpdpbusd) include this file after
 * defining QA_FN (function attributes), QA_NAME(x) (exported name of
 * kernel x) and QA_VNNI (1: vpdpbusd).
 *
 * Invariant: each kernel is its scalar twin in quant_act.c: per activation
 * block of 32 the integer dot product is exact (int32 lanes, no
 * saturation: weight codes are turned into unsigned bytes <= 128 and
 * activation codes are in [-127, 127]; where two pmaddubsw results are
 * added in int16 first, the bound is stated there) and is scaled once in
 * fp32. Constant offsets of the codes (Q5_0's 16, Q6_K's 32) and Q4_1's
 * and Q4_K's mins come off through the activation's block sums.
 */
#define QSIMD_FN QA_FN
#include "engine/quant/quant_simd.h"

/* The little-endian 32-bit word at p, and the one made of the 16-bit
 * words at lo and hi (low half first). Vectors of block scales are built
 * from these in registers: storing them to a small array and loading it
 * back as one vector would stall on store forwarding. */
QA_FN static inline int qa_i32(const uint8_t *p)
{
	int32_t v;
	memcpy(&v, p, sizeof v);
	return v;
}

QA_FN static inline int qa_i16x2(const uint8_t *lo, const uint8_t *hi)
{
	const uint8_t b[4] = { lo[0], lo[1], hi[0], hi[1] };

	return qa_i32(b);
}

/* acc + sum over each group of four bytes of u (unsigned) times s (signed) */
QA_FN static inline __m256i qa_dpbusd(__m256i acc, __m256i u, __m256i s)
{
#if QA_VNNI
	return _mm256_dpbusd_epi32(acc, u, s);
#else
	return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s),
						       _mm256_set1_epi16(1)));
#endif
}

/* Eight int32 lanes of the dot product of two signed byte vectors: w * x
 * as |w| * (x with w's sign), the unsigned-by-signed form both
 * instructions take. */
QA_FN static inline __m256i qa_dot_s8(__m256i w, __m256i x)
{
	return qa_dpbusd(_mm256_setzero_si256(), _mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
}


/* 0xff in byte j when bit j of bits is set (j < 32): byte j/8 of bits is
 * broadcast to byte j, which then has every bit but bit j%8 forced on. */
QA_FN static inline __m256i qa_bits_to_bytes(uint32_t bits)
{
	const __m256i sel = _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101,
					       0x0202020202020202, 0x0303030303030303);
	__m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), sel);

	v = _mm256_or_si256(v, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
	return _mm256_cmpeq_epi8(v, _mm256_set1_epi64x(-1));
}

/* Q8_0: two accumulators (even and odd blocks) hide the FMA latency.
 * With AVX-512, pairs of blocks share one 512-bit product: the sign of w
 * moves onto x through a byte mask (there is no 512-bit psignb), and the
 * two blocks' scales fill the two halves of the scale vector. */
QA_FN float QA_NAME(q8_0)(const uint8_t *w, const struct quant_act *a)
{
	__m256 acc[2] = { _mm256_setzero_ps(), _mm256_setzero_ps() };
	size_t nb = a->n / 32, k = 0, b = 0;

#if QA_VNNI
	__m512 acc2 = _mm512_setzero_ps();

	for (; b + 2 <= nb; b += 2, w += 68) {
		__m512i wq = _mm512_inserti64x4(
			_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(w + 2))),
			_mm256_loadu_si256((const __m256i *)(w + 36)), 1);
		__m512i xq = _mm512_loadu_si512((const void *)(a->q + 32 * b));
		__m512i xs = _mm512_mask_sub_epi8(xq, _mm512_movepi8_mask(wq),
						  _mm512_setzero_si512(), xq);
		__m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(wq), xs);
		__m512 sc = _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(qsimd_f16(w) * a->d[b]),
						 _mm512_set1_ps(qsimd_f16(w + 34) * a->d[b + 1]));
		acc2 = _mm512_fmadd_ps(sc, _mm512_cvtepi32_ps(p), acc2);
	}
	acc[1] = _mm256_add_ps(_mm512_castps512_ps256(acc2), _mm512_extractf32x8_ps(acc2, 1));
#endif
	for (; b < nb; b++, w += 34, k ^= 1) {
		__m256i wq = _mm256_loadu_si256((const __m256i *)(w + 2));
		__m256i xq = _mm256_loadu_si256((const __m256i *)(a->q + 32 * b));
		__m256 p = _mm256_cvtepi32_ps(qa_dot_s8(wq, xq));
		acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(qsimd_f16(w) * a->d[b]), p, acc[k]);
	}
	return qsimd_hsum(_mm256_add_ps(acc[0], acc[1]));
}

/* Sum of the four lanes of v. */
QA_FN static inline float qa_hsum128(__m128 v)
{
	v = _mm_add_ps(v, _mm_movehl_ps(v, v));
	return _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));
}

/* Multi-block steps of the legacy formats (Q5_0, Q4_1): the blocks' 16
 * nibble bytes go into consecutive 128-bit lanes, so the low nibbles of a
 * register are elements 0..15 of each block and the high nibbles elements
 * 16..31. The activations (32 codes per block) are regrouped to match:
 * first halves in *lo, second halves in *hi; each block's int32 sums then
 * stay in its own 128-bit lane. */
#if QA_VNNI
QA_FN static inline __m512i qa_nibbles_x4(const uint8_t *qs, size_t stride)
{
	__m512i q = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)qs));

	q = _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)(qs + stride)), 1);
	q = _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)(qs + 2 * stride)), 2);
	return _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)(qs + 3 * stride)), 3);
}

QA_FN static inline void qa_halves_x4(const int8_t *x, __m512i *lo, __m512i *hi)
{
	__m512i x0 = _mm512_loadu_si512((const void *)x);
	__m512i x1 = _mm512_loadu_si512((const void *)(x + 64));

	*lo = _mm512_permutex2var_epi64(x0, _mm512_setr_epi64(0, 1, 4, 5, 8, 9, 12, 13), x1);
	*hi = _mm512_permutex2var_epi64(x0, _mm512_setr_epi64(2, 3, 6, 7, 10, 11, 14, 15), x1);
}

/* Q5_0, four blocks: the fifth bits of elements 0..15 are bytes 0 and 1 of
 * each qh, those of 16..31 bytes 2 and 3; one byte shuffle makes them the
 * two 64-bit masks. acc += the blocks' d*dx*sum q*x, off += d*s. */
QA_FN static inline void qa_q5_0_x4(const uint8_t *w, const int8_t *x, const float *dx,
				     const float *sx, __m512 *acc, __m128 *off)
{
	const __m512i m4 = _mm512_set1_epi8(0x0f), b4 = _mm512_set1_epi8(0x10);
	__m512i q = qa_nibbles_x4(w + 6, 22), xl, xh;
	const __m128i split = _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
	__m128i hs = _mm_shuffle_epi8(_mm_setr_epi32(qa_i32(w + 2), qa_i32(w + 24), qa_i32(w + 46),
						     qa_i32(w + 68)), split);
	__m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
	__m128 dw = _mm_cvtph_ps(_mm_setr_epi32(qa_i16x2(w, w + 22), qa_i16x2(w + 44, w + 66), 0, 0));

	lo = _mm512_mask_add_epi8(lo, (__mmask64)_mm_cvtsi128_si64(hs), lo, b4);
	hi = _mm512_mask_add_epi8(hi, (__mmask64)_mm_extract_epi64(hs, 1), hi, b4);
	qa_halves_x4(x, &xl, &xh);
	__m512i p = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xl), hi, xh);
	__m128 dd = _mm_mul_ps(dw, _mm_loadu_ps(dx));
	*off = _mm_fmadd_ps(dw, _mm_loadu_ps(sx), *off);
	*acc = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2,
									2, 2, 3, 3, 3, 3),
						     _mm512_castps128_ps512(dd)),
			       _mm512_cvtepi32_ps(p), *acc);
}

/* Q4_1, four blocks: the d and m of each block (adjacent fp16) convert in
 * one instruction, [d0 m0 d1 m1 ...], times [dx0 sx0 dx1 sx1 ...]: the even
 * lanes scale the sums, the odd ones (m*s) are added to *mins. */
QA_FN static inline void qa_q4_1_x4(const uint8_t *w, const int8_t *x, const float *dx,
				     const float *sx, __m512 *acc, __m256 *mins)
{
	const __m512i m4 = _mm512_set1_epi8(0x0f);
	__m512i q = qa_nibbles_x4(w + 4, 20), xl, xh;
	__m256 f = _mm256_cvtph_ps(_mm_setr_epi32(qa_i32(w), qa_i32(w + 20), qa_i32(w + 40),
						  qa_i32(w + 60)));
	__m128 d = _mm_loadu_ps(dx), s = _mm_loadu_ps(sx);

	qa_halves_x4(x, &xl, &xh);
	__m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(q, m4), xl);
	p = _mm512_dpbusd_epi32(p, _mm512_and_si512(_mm512_srli_epi16(q, 4), m4), xh);
	f = _mm256_mul_ps(f, _mm256_set_m128(_mm_unpackhi_ps(d, s), _mm_unpacklo_ps(d, s)));
	*mins = _mm256_add_ps(*mins, _mm256_blend_ps(_mm256_setzero_ps(), f, 0xaa));
	*acc = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4,
									4, 4, 6, 6, 6, 6),
						     _mm512_castps256_ps512(f)),
			       _mm512_cvtepi32_ps(p), *acc);
}
#else
QA_FN static inline void qa_halves_x2(const int8_t *x, __m256i *lo, __m256i *hi)
{
	__m256i x0 = _mm256_loadu_si256((const __m256i *)x);
	__m256i x1 = _mm256_loadu_si256((const __m256i *)(x + 32));

	*lo = _mm256_permute2x128_si256(x0, x1, 0x20);
	*hi = _mm256_permute2x128_si256(x0, x1, 0x31);
}

/* Two blocks' int32 sums of lo*xl + hi*xh (unsigned codes lo, hi <= 31):
 * the two pmaddubsw results add in int16, |sum| <= 2 * 2 * 31 * 127, so
 * one pmaddwd follows. */
QA_FN static inline __m256i qa_dot_x2(__m256i lo, __m256i xl, __m256i hi, __m256i xh)
{
	return _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo, xl),
						  _mm256_maddubs_epi16(hi, xh)),
				 _mm256_set1_epi16(1));
}

/* The two floats at p in lanes 0 and 1. */
QA_FN static inline __m128 qa_load2(const float *p)
{
	return _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)p));
}

/* Q5_0, two blocks (as qa_q5_0_x4, the fifth bits through
 * qa_bits_to_bytes). */
QA_FN static inline void qa_q5_0_x2(const uint8_t *w, const int8_t *x, const float *dx,
				     const float *sx, __m256 *acc, __m128 *off)
{
	const __m256i m4 = _mm256_set1_epi8(0x0f), b4 = _mm256_set1_epi8(0x10);
	__m256i q = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(w + 28)),
				     _mm_loadu_si128((const __m128i *)(w + 6)));
	uint32_t h0 = (uint32_t)qa_i32(w + 2), h1 = (uint32_t)qa_i32(w + 24);
	/* fifth bits of elements 0..15 of both blocks, then of 16..31 */
	__m256i blo = qa_bits_to_bytes((h0 & 0xffff) | h1 << 16);
	__m256i bhi = qa_bits_to_bytes(h0 >> 16 | (h1 & 0xffff0000u));
	__m256i lo = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_and_si256(blo, b4));
	__m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
				     _mm256_and_si256(bhi, b4));
	__m128 dw = _mm_cvtph_ps(_mm_cvtsi32_si128(qa_i16x2(w, w + 22)));
	__m256i xl, xh;

	__m256 dd = _mm256_castps128_ps256(_mm_mul_ps(dw, qa_load2(dx)));

	qa_halves_x2(x, &xl, &xh);
	*off = _mm_fmadd_ps(dw, qa_load2(sx), *off);
	*acc = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(dd, _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1)),
			       _mm256_cvtepi32_ps(qa_dot_x2(lo, xl, hi, xh)), *acc);
}

/* Q4_1, two blocks (as qa_q4_1_x4). */
QA_FN static inline void qa_q4_1_x2(const uint8_t *w, const int8_t *x, const float *dx,
				     const float *sx, __m256 *acc, __m128 *mins)
{
	const __m256i m4 = _mm256_set1_epi8(0x0f);
	__m256i q = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(w + 24)),
				     _mm_loadu_si128((const __m128i *)(w + 4)));
	__m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
	__m128 f = _mm_cvtph_ps(_mm_setr_epi32(qa_i32(w), qa_i32(w + 20), 0, 0));
	__m256i xl, xh;

	qa_halves_x2(x, &xl, &xh);
	f = _mm_mul_ps(f, _mm_unpacklo_ps(qa_load2(dx), qa_load2(sx)));
	*mins = _mm_add_ps(*mins, _mm_blend_ps(_mm_setzero_ps(), f, 0xa));
	*acc = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(_mm256_castps128_ps256(f),
							_mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2)),
			       _mm256_cvtepi32_ps(qa_dot_x2(lo, xl, hi, xh)), *acc);
}
#endif

/* Q5_0: the codes q in [0, 31] (a nibble plus the fifth bit from qh) go
 * unsigned into the byte products, and the offset of 16 comes off once per
 * block as 16 * d * s (s: the activation's block sum). Four (VNNI) or two
 * blocks at a time, then the last ones one by one: bytes 0..15 the low
 * nibbles, 16..31 the high. */
QA_FN float QA_NAME(q5_0)(const uint8_t *w, const struct quant_act *a)
{
	const __m256i m4 = _mm256_set1_epi8(0x0f);
	__m256 acc[2] = { _mm256_setzero_ps(), _mm256_setzero_ps() };
	__m128 off4 = _mm_setzero_ps();
	size_t nb = a->n / 32, k = 0, b = 0;
	float off = 0.0f;

#if QA_VNNI
	__m512 acc4 = _mm512_setzero_ps();

	for (; b + 4 <= nb; b += 4, w += 88)
		qa_q5_0_x4(w, a->q + 32 * b, a->d + b, a->s + b, &acc4, &off4);
	acc[1] = _mm256_add_ps(_mm512_castps512_ps256(acc4), _mm512_extractf32x8_ps(acc4, 1));
	for (; b < nb; b++, w += 22, k ^= 1) {
		__m128i qs = _mm_loadu_si128((const __m128i *)(w + 6));
		__m256i wq = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(qs, 4), qs), m4);
		wq = _mm256_mask_add_epi8(wq, (__mmask32)qa_i32(w + 2), wq, _mm256_set1_epi8(0x10));
		__m256i xq = _mm256_loadu_si256((const __m256i *)(a->q + 32 * b));
		__m256 p = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), wq, xq));
		float dw = qsimd_f16(w);
		acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(dw * a->d[b]), p, acc[k]);
		off += dw * a->s[b];
	}
#else
	for (; b + 2 <= nb; b += 2, w += 44, k ^= 1)
		qa_q5_0_x2(w, a->q + 32 * b, a->d + b, a->s + b, &acc[k], &off4);
	/* the last block, signed: q - 16 is the nibble when the fifth bit is
	 * set, else the nibble with its top four bits set */
	for (; b < nb; b++, w += 22) {
		__m128i qs = _mm_loadu_si128((const __m128i *)(w + 6));
		__m256i wq = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(qs, 4), qs), m4);
		wq = _mm256_or_si256(wq, _mm256_andnot_si256(qa_bits_to_bytes((uint32_t)qa_i32(w + 2)),
							     _mm256_set1_epi8((char)0xf0)));
		__m256i xq = _mm256_loadu_si256((const __m256i *)(a->q + 32 * b));
		__m256 p = _mm256_cvtepi32_ps(qa_dot_s8(wq, xq));
		acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(qsimd_f16(w) * a->d[b]), p, acc[k]);
	}
#endif
	off += qa_hsum128(off4);
	return qsimd_hsum(_mm256_add_ps(acc[0], acc[1])) - 16.0f * off;
}

/* Q4_1: value q*d + m with q an unsigned nibble, which goes straight into
 * the unsigned operand; the m term is m times the activation's block sum
 * s. Four (VNNI) or two blocks at a time, then the last ones one by one:
 * bytes 0..15 the low nibbles (elements 0..15), 16..31 the high ones. */
QA_FN float QA_NAME(q4_1)(const uint8_t *w, const struct quant_act *a)
{
	const __m256i m4 = _mm256_set1_epi8(0x0f);
	__m256 acc[2] = { _mm256_setzero_ps(), _mm256_setzero_ps() };
	float mins = 0.0f;
	size_t nb = a->n / 32, k = 0, b = 0;

#if QA_VNNI
	__m512 acc4 = _mm512_setzero_ps();
	__m256 mins8 = _mm256_setzero_ps();

	for (; b + 4 <= nb; b += 4, w += 80)
		qa_q4_1_x4(w, a->q + 32 * b, a->d + b, a->s + b, &acc4, &mins8);
	acc[1] = _mm256_add_ps(_mm512_castps512_ps256(acc4), _mm512_extractf32x8_ps(acc4, 1));
	mins = qsimd_hsum(mins8);
#else
	__m128 mins4 = _mm_setzero_ps();

	for (; b + 2 <= nb; b += 2, w += 40, k ^= 1)
		qa_q4_1_x2(w, a->q + 32 * b, a->d + b, a->s + b, &acc[k], &mins4);
	mins = qa_hsum128(mins4);
#endif
	for (; b < nb; b++, w += 20, k ^= 1) {
		__m128i qs = _mm_loadu_si128((const __m128i *)(w + 4));
		__m256i wq = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(qs, 4), qs), m4);
		__m256i xq = _mm256_loadu_si256((const __m256i *)(a->q + 32 * b));
		__m256 p = _mm256_cvtepi32_ps(qa_dpbusd(_mm256_setzero_si256(), wq, xq));
		acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(qsimd_f16(w) * a->d[b]), p, acc[k]);
		mins += qsimd_f16(w + 2) * a->s[b];
	}
	return qsimd_hsum(_mm256_add_ps(acc[0], acc[1])) + mins;
}

/* The eight 6-bit scales (sc) and mins (mn) of a Q4_K super-block as
 * floats, from its 12 scale bytes (the layout of quant_k_scale_min): the
 * low 6 bits of bytes 0..3 (scales 0..3) and 4..7 (mins 0..3); scales
 * 4..7 take the low nibbles of bytes 8..11 and the top two bits of bytes
 * 0..3, mins 4..7 the high nibbles and the top bits of bytes 4..7. Done
 * on 32-bit words, four sub-blocks per word. */
QA_FN static inline void qa_q4_k_scales(const uint8_t *s, __m256 *sc, __m256 *mn)
{
	uint32_t w0 = (uint32_t)qa_i32(s), w1 = (uint32_t)qa_i32(s + 4), w2 = (uint32_t)qa_i32(s + 8);
	uint32_t s_lo = w0 & 0x3f3f3f3fu, s_hi = (w2 & 0x0f0f0f0fu) | ((w0 >> 2) & 0x30303030u);
	uint32_t m_lo = w1 & 0x3f3f3f3fu, m_hi = ((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 2) & 0x30303030u);

	*sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_setr_epi32((int)s_lo, (int)s_hi, 0, 0)));
	*mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_setr_epi32((int)m_lo, (int)m_hi, 0, 0)));
}

/* Q4_K: 32-byte group g holds sub-block 2g in its low nibbles and 2g+1 in
 * its high ones; nibbles are unsigned, so they go straight into the
 * unsigned operand. Per super-block the eight scales d*sc_j*dx_j form one
 * vector, and the mins term dmin * sum_j mn_j * s_j is accumulated as one.
 * With VNNI, two groups (64 bytes) share a register: low nibbles are then
 * sub-blocks 4h and 4h+2, high nibbles 4h+1 and 4h+3, and the activation
 * halves are regrouped to match. */
QA_FN float QA_NAME(q4_k)(const uint8_t *w, const struct quant_act *a)
{
	const __m256i m4 = _mm256_set1_epi8(0x0f);
	__m256 acc[2] = { _mm256_setzero_ps(), _mm256_setzero_ps() };
	__m256 macc = _mm256_setzero_ps();
#if QA_VNNI
	const __m512i m4x = _mm512_set1_epi8(0x0f);
	const __m512i idx_lo[2] = {
		_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2),
		_mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6),
	};
	const __m512i idx_hi[2] = {
		_mm512_setr_epi32(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3),
		_mm512_setr_epi32(5, 5, 5, 5, 5, 5, 5, 5, 7, 7, 7, 7, 7, 7, 7, 7),
	};
	__m512 acc4[2] = { _mm512_setzero_ps(), _mm512_setzero_ps() };

	(void)m4;
#endif

	for (size_t i = 0; i < a->n; i += 256, w += 144) {
		const uint8_t *qs = w + 16;
		const int8_t *xq = a->q + i;
		__m256 sc, mn;

		qa_q4_k_scales(w + 4, &sc, &mn);
		sc = _mm256_mul_ps(_mm256_mul_ps(sc, _mm256_set1_ps(qsimd_f16(w))),
				   _mm256_loadu_ps(a->d + i / 32));
		macc = _mm256_fmadd_ps(_mm256_mul_ps(mn, _mm256_set1_ps(qsimd_f16(w + 2))),
				       _mm256_loadu_ps(a->s + i / 32), macc);
#if QA_VNNI
		for (int h = 0; h < 2; h++, qs += 64, xq += 128) {
			__m512i q = _mm512_loadu_si512((const void *)qs);
			__m512i x01 = _mm512_loadu_si512((const void *)xq);
			__m512i x23 = _mm512_loadu_si512((const void *)(xq + 64));
			__m512i lo = _mm512_and_si512(q, m4x);
			__m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4x);
			__m512i pl = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo,
							 _mm512_shuffle_i64x2(x01, x23, 0x44));
			__m512i ph = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi,
							 _mm512_shuffle_i64x2(x01, x23, 0xee));
			__m512 sc16 = _mm512_castps256_ps512(sc);
			acc4[0] = _mm512_fmadd_ps(_mm512_permutexvar_ps(idx_lo[h], sc16),
						  _mm512_cvtepi32_ps(pl), acc4[0]);
			acc4[1] = _mm512_fmadd_ps(_mm512_permutexvar_ps(idx_hi[h], sc16),
						  _mm512_cvtepi32_ps(ph), acc4[1]);
		}
#else
		for (int g = 0; g < 4; g++, qs += 32, xq += 64) {
			__m256i v = _mm256_loadu_si256((const __m256i *)qs);
			__m256i p0 = qa_dpbusd(_mm256_setzero_si256(), _mm256_and_si256(v, m4),
					       _mm256_loadu_si256((const __m256i *)xq));
			__m256i p1 = qa_dpbusd(_mm256_setzero_si256(),
					       _mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
					       _mm256_loadu_si256((const __m256i *)(xq + 32)));
			__m256 s0 = _mm256_permutevar8x32_ps(sc, _mm256_set1_epi32(2 * g));
			__m256 s1 = _mm256_permutevar8x32_ps(sc, _mm256_set1_epi32(2 * g + 1));
			acc[0] = _mm256_fmadd_ps(s0, _mm256_cvtepi32_ps(p0), acc[0]);
			acc[1] = _mm256_fmadd_ps(s1, _mm256_cvtepi32_ps(p1), acc[1]);
		}
#endif
	}
#if QA_VNNI
	acc4[0] = _mm512_add_ps(acc4[0], acc4[1]);
	acc[0] = _mm256_add_ps(_mm512_castps512_ps256(acc4[0]), _mm512_extractf32x8_ps(acc4[0], 1));
#endif
	return qsimd_hsum(_mm256_add_ps(acc[0], acc[1])) - qsimd_hsum(macc);
}

/* Q6_K: per half of 128 elements, byte l of q[k] is element l + 32k (an
 * unsigned 6-bit code: a nibble of ql, two bits of qh[l]). One chunk of
 * 32 is one activation block and two scales of 16, so int32 lanes 0..3
 * take sc[2k] and lanes 4..7 sc[2k+1]; the code's offset of 32 is taken
 * off as 32 times the activation sums of the same lanes. */
/* The unsigned 6-bit codes of one half (128 elements) of a Q6_K block:
 * byte l of q[k] is element l + 32k, a nibble of ql (low: k = 0, 1;
 * high: k = 2, 3) with two bits of qh[l] (bits 2k, 2k+1) above it. Also
 * the GEMM's unpacking (quant_gemm_simd.h). */
QA_FN static inline void qa_q6_k_codes(const uint8_t *ql, const uint8_t *qh, __m256i q[4])
{
	const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x30);
	__m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
	__m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
	__m256i hb = _mm256_loadu_si256((const __m256i *)qh);

	q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m2));
	q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m2));
	q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m2));
	q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
			       _mm256_and_si256(_mm256_srli_epi16(hb, 2), m2));
}

#if QA_VNNI
/* Q6_K with VNNI, 64 elements per 512-bit register: ql's 64 bytes of a
 * half give chunks 0 and 1 (low nibbles) and 2 and 3 (high nibbles); the
 * two bits of qh for chunks 0, 1 (2, 3) are shifted into bits 4-5 per
 * 256-bit half by one variable 16-bit shift. The int32 lanes of a chunk
 * pair are its four groups of 16 by fours: each is multiplied by its int8
 * scale (exact), then scaled once by d * dx of its chunk. The offset of 32
 * comes off as 32 times the activation sums of the same lanes. */
QA_FN float QA_NAME(q6_k)(const uint8_t *w, const struct quant_act *a)
{
	const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(0x30);
	const __m512i one = _mm512_set1_epi8(1);
	const __m512i sh01 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
	const __m512i sh23 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
	__m512i isc[4], idx[4];
	__m512 acc[2] = { _mm512_setzero_ps(), _mm512_setzero_ps() };

	/* pair c = 2h + j (chunks 2c, 2c+1): lane l has group 4c + l/4 and
	 * chunk 2c + l/8 */
	for (int c = 0; c < 4; c++) {
		isc[c] = _mm512_add_epi32(_mm512_set1_epi32(4 * c),
					  _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9,
									      10, 11, 12, 13, 14, 15), 2));
		idx[c] = _mm512_add_epi32(_mm512_set1_epi32(2 * c),
					  _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9,
									      10, 11, 12, 13, 14, 15), 3));
	}
	for (size_t i = 0; i < a->n; i += 256, w += 210) {
		__m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(w + 192)));
		__m512 dd = _mm512_castps256_ps512(_mm256_mul_ps(_mm256_set1_ps(qsimd_f16(w + 208)),
								 _mm256_loadu_ps(a->d + i / 32)));
		for (int h = 0; h < 2; h++) {
			__m512i l = _mm512_loadu_si512((const void *)(w + 64 * h));
			__m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(w + 128 + 32 * h)));
			__m512i q[2];
			q[0] = _mm512_or_si512(_mm512_and_si512(l, m4),
					       _mm512_and_si512(_mm512_sllv_epi16(hb, sh01), m2));
			q[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
					       _mm512_and_si512(_mm512_srlv_epi16(hb, sh23), m2));
			for (int j = 0; j < 2; j++) {
				int c = 2 * h + j;
				__m512i x = _mm512_loadu_si512((const void *)(a->q + i + 64 * (size_t)c));
				__m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[j], x);
				__m512i xs = _mm512_dpbusd_epi32(_mm512_setzero_si512(), one, x);
				p = _mm512_mullo_epi32(_mm512_sub_epi32(p, _mm512_slli_epi32(xs, 5)),
						       _mm512_permutexvar_epi32(isc[c], sc));
				acc[j] = _mm512_fmadd_ps(_mm512_permutexvar_ps(idx[c], dd),
							 _mm512_cvtepi32_ps(p), acc[j]);
			}
		}
	}
	return _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]));
}
#else
QA_FN float QA_NAME(q6_k)(const uint8_t *w, const struct quant_act *a)
{
	const __m256i one = _mm256_set1_epi8(1);
	__m256 acc[2] = { _mm256_setzero_ps(), _mm256_setzero_ps() };

	for (size_t i = 0; i < a->n; i += 256, w += 210) {
		const uint8_t *ql = w, *qh = w + 128;
		const int8_t *sc = (const int8_t *)(w + 192);
		float d = qsimd_f16(w + 208);
		for (int h = 0; h < 2; h++, ql += 64, qh += 32, sc += 8) {
			__m256i q[4];
			qa_q6_k_codes(ql, qh, q);
			for (int k = 0; k < 4; k++) {
				size_t off = i + 128 * (size_t)h + 32 * (size_t)k;
				__m256i x = _mm256_loadu_si256((const __m256i *)(a->q + off));
				__m256i p = qa_dpbusd(_mm256_setzero_si256(), q[k], x);
				__m256i xs = qa_dpbusd(_mm256_setzero_si256(), one, x);
				__m256i scv = _mm256_set_m128i(_mm_set1_epi32(sc[2 * k + 1]),
							       _mm_set1_epi32(sc[2 * k]));
				p = _mm256_mullo_epi32(_mm256_sub_epi32(p, _mm256_slli_epi32(xs, 5)), scv);
				acc[k & 1] = _mm256_fmadd_ps(_mm256_set1_ps(d * a->d[off / 32]),
							     _mm256_cvtepi32_ps(p), acc[k & 1]);
			}
		}
	}
	return qsimd_hsum(_mm256_add_ps(acc[0], acc[1]));
}
#endif
