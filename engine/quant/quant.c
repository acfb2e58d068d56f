/* quant.c - ggml block formats: dequantisation, dot products against fp32
 * vectors and a single-threaded matvec.
 *
 * Invariant: every format has one block decoder (`*_block`, elements in
 * storage order) that quant_dequant_row uses and that is the reference.
 * Dot products never materialise a row: the models' formats (Q8_0, Q5_0,
 * Q4_1, Q4_K, Q6_K) have fused kernels that repeat their decoder's bit
 * layout and multiply in place; the others decode one block into a stack
 * buffer. Sums are kept per position in QUANT_LANES partial sums, so the
 * compiler vectorises them without -ffast-math. Those five formats
 * dispatch through a kernel set chosen once per process: these scalar
 * kernels (the reference and fallback) or quant_avx2.c. Layouts: ggml
 * ggml-common.h; tensor metadata lives in gguf.c.
 */
#include "engine/quant/quant.h"
#include "engine/quant/quant_int.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#if QUANT_HAVE_AVX2
#include <cpuid.h>
#endif
#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#define QK 32   /* elements per block of the legacy formats */
#define QK_K 256 /* elements per super-block of the k-quants */
#define QUANT_LANES 32

struct quant_traits {
	const char *name;
	uint32_t block_elems;
	uint32_t block_bytes;
	int supported;
};

/* Indexed by ggml type id. Sizes are ggml's type_traits; ids without an
 * entry are unknown (removed Q4_2/Q4_3/Q5_2 and unassigned numbers). */
static const struct quant_traits quant_table[] = {
	[QT_F32] = {"F32", 1, 4, 1},
	[QT_F16] = {"F16", 1, 2, 1},
	[QT_Q4_0] = {"Q4_0", QK, 18, 1},
	[QT_Q4_1] = {"Q4_1", QK, 20, 1},
	[QT_Q5_0] = {"Q5_0", QK, 22, 1},
	[QT_Q5_1] = {"Q5_1", QK, 24, 1},
	[QT_Q8_0] = {"Q8_0", QK, 34, 1},
	[QT_Q8_1] = {"Q8_1", QK, 36, 0},
	[QT_Q2_K] = {"Q2_K", QK_K, 84, 1},
	[QT_Q3_K] = {"Q3_K", QK_K, 110, 1},
	[QT_Q4_K] = {"Q4_K", QK_K, 144, 1},
	[QT_Q5_K] = {"Q5_K", QK_K, 176, 1},
	[QT_Q6_K] = {"Q6_K", QK_K, 210, 1},
	[QT_Q8_K] = {"Q8_K", QK_K, 292, 0},
	[16] = {"IQ2_XXS", QK_K, 66, 0},
	[17] = {"IQ2_XS", QK_K, 74, 0},
	[18] = {"IQ3_XXS", QK_K, 98, 0},
	[19] = {"IQ1_S", QK_K, 50, 0},
	[QT_IQ4_NL] = {"IQ4_NL", QK, 18, 1},
	[21] = {"IQ3_S", QK_K, 110, 0},
	[22] = {"IQ2_S", QK_K, 82, 0},
	[23] = {"IQ4_XS", QK_K, 136, 0},
	[24] = {"I8", 1, 1, 0},
	[25] = {"I16", 1, 2, 0},
	[26] = {"I32", 1, 4, 0},
	[27] = {"I64", 1, 8, 0},
	[28] = {"F64", 1, 8, 0},
	[29] = {"IQ1_M", QK_K, 56, 0},
	[QT_BF16] = {"BF16", 1, 2, 1},
	[34] = {"TQ1_0", QK_K, 54, 0},
	[35] = {"TQ2_0", QK_K, 66, 0},
	[39] = {"MXFP4", QK, 17, 0},
};

#define QUANT_NTYPES (sizeof quant_table / sizeof quant_table[0])

static const struct quant_traits *quant_traits_of(uint32_t type)
{
	if (type >= QUANT_NTYPES || !quant_table[type].name)
		return NULL;
	return &quant_table[type];
}

int quant_supported(uint32_t type)
{
	const struct quant_traits *tr = quant_traits_of(type);
	return tr ? tr->supported : 0;
}

const char *quant_name(uint32_t type)
{
	const struct quant_traits *tr = quant_traits_of(type);
	return tr ? tr->name : "unknown";
}

size_t quant_block_elems(uint32_t type)
{
	const struct quant_traits *tr = quant_traits_of(type);
	return tr ? tr->block_elems : 0;
}

size_t quant_block_bytes(uint32_t type)
{
	const struct quant_traits *tr = quant_traits_of(type);
	return tr ? tr->block_bytes : 0;
}

size_t quant_row_bytes(uint32_t type, uint64_t n)
{
	const struct quant_traits *tr = quant_traits_of(type);
	uint64_t n_block;

	if (!tr || n % tr->block_elems)
		return 0;
	n_block = n / tr->block_elems;
	if (n_block > SIZE_MAX / tr->block_bytes)
		return 0;
	return (size_t)(n_block * tr->block_bytes);
}

/* ---- IEEE binary16 ---------------------------------------------------- */

static uint32_t f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

static float f32_from_bits(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

/* Branch-free so block scales and F16 rows convert without mispredicts
 * (and vectorise): normals and inf/NaN rebias the exponent in place,
 * subnormals go through an exact integer-to-float conversion (never a
 * denormal operand, so DAZ/FTZ modes cannot change the result). */
float quant_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = h & 0x7c00u;
	uint32_t bits = ((uint32_t)(h & 0x7fffu) << 13) + (112u << 23);
	float sub = (float)(h & 0x3ffu) * 0x1p-24f;

	if (exp == 0x7c00u)
		bits += 112u << 23; /* exponent 31 -> 255: inf or NaN, payload kept */
	if (exp == 0)
		bits = f32_bits(sub);
	return f32_from_bits(bits | sign);
}

/* Round to nearest, ties to even; overflow gives inf, NaN stays a quiet NaN
 * keeping the top payload bits. */
uint16_t quant_f32_to_f16(float f)
{
	uint32_t u = f32_bits(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
	uint32_t abs = u & 0x7fffffffu;
	int32_t exp = (int32_t)(abs >> 23) - 127;
	uint32_t mant, shift, half, rem, out;

	if (abs >= 0x7f800000u) {
		if (abs == 0x7f800000u)
			return sign | 0x7c00u;
		return sign | 0x7e00u | (uint16_t)((abs >> 13) & 0x1ffu);
	}
	if (exp > 15)
		return sign | 0x7c00u;
	if (exp >= -14) {
		/* normal half: keep 10 mantissa bits, round on the 13 dropped;
		 * a carry out of the mantissa correctly bumps the exponent
		 * (up to inf). */
		out = ((uint32_t)(exp + 15) << 10) | ((abs >> 13) & 0x3ffu);
		rem = abs & 0x1fffu;
		if (rem > 0x1000u || (rem == 0x1000u && (out & 1u)))
			out++;
		return sign | (uint16_t)out;
	}
	if (exp < -25)
		return sign; /* below half the smallest subnormal: +-0 */
	/* subnormal half: value = mant24 * 2^(exp-23); unit is 2^-24 */
	mant = (abs & 0x7fffffu) | 0x800000u;
	shift = (uint32_t)(-exp - 1); /* 14..24 */
	out = mant >> shift;
	half = 1u << (shift - 1);
	rem = mant & ((1u << shift) - 1u);
	if (rem > half || (rem == half && (out & 1u)))
		out++;
	return sign | (uint16_t)out;
}

/* The row converters use F16C/AVX-512 where the build has them. Half to
 * single is exact (a signalling NaN comes out quiet), and the instruction's single to half with round to
 * nearest even, overflow to inf and quiet NaNs keeping their top payload
 * bits is the scalar function's rule, so both give the same bits
 * (tests: f16_rows_match_scalar); the scalar one does the ragged tail.
 * Decoding converts every KV row it reads. */
void quant_f16_to_f32_row(const uint16_t *x, float *y, size_t n)
{
	size_t i = 0;

#if defined(__AVX512F__)
	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i))));
#elif defined(__F16C__)
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
#endif
	for (; i < n; i++)
		y[i] = quant_f16_to_f32(x[i]);
}

void quant_f32_to_f16_row(const float *x, uint16_t *y, size_t n)
{
	size_t i = 0;

#if defined(__AVX512F__)
	for (; i + 16 <= n; i += 16)
		_mm256_storeu_si256((__m256i *)(y + i),
				    _mm512_cvtps_ph(_mm512_loadu_ps(x + i),
						    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#elif defined(__F16C__)
	for (; i + 8 <= n; i += 8)
		_mm_storeu_si128((__m128i *)(y + i),
				 _mm256_cvtps_ph(_mm256_loadu_ps(x + i),
						 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
	for (; i < n; i++)
		y[i] = quant_f32_to_f16(x[i]);
}

/* Symmetric rounding of n values to codes in [-levels, levels]: the scale
 * (max|x| / levels) or 0 for a zero, infinite or NaN row (codes 0). */
static float quant_levels_row(const float *x, int8_t *q, size_t n, float levels)
{
	float amax = 0.0f, inv;
	size_t i = 0;
	int nan = 0;

#if defined(__AVX512F__)
	/* SeKV rounds every device-tier row it stores (rebuilt windows at each
	 * zoom): the scalar lrintf call took a sixth of a decode step */
	__m512 m = _mm512_setzero_ps();
	__mmask16 un = 0;
	for (; i + 16 <= n; i += 16) {
		__m512 v = _mm512_loadu_ps(x + i);
		un |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
		m = _mm512_max_ps(m, _mm512_abs_ps(v));
	}
	amax = _mm512_reduce_max_ps(m);
	nan = un != 0;
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
	__m256 m = _mm256_setzero_ps(), un = _mm256_setzero_ps();
	__m128 m4;
	for (; i + 8 <= n; i += 8) {
		__m256 v = _mm256_loadu_ps(x + i);
		un = _mm256_or_ps(un, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
		m = _mm256_max_ps(m, _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v));
	}
	m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
	m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
	amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
	nan = _mm256_movemask_ps(un) != 0;
#endif
	for (; i < n; i++) {
		nan |= isnan(x[i]);
		amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
	}
	if (nan || !(amax > 0.0f) || !isfinite(amax)) {
		memset(q, 0, n);
		return 0.0f;
	}
	inv = levels / amax;
	i = 0;
#if defined(__AVX512F__)
	/* cvtps rounds to nearest even, as lrintf in the default mode */
	for (; i + 16 <= n; i += 16)
		_mm_storeu_si128((__m128i *)(q + i), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(
			_mm512_mul_ps(_mm512_loadu_ps(x + i), _mm512_set1_ps(inv)))));
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
	/* the same rounding; the two saturating packs never clip, as codes
	 * are within [-levels, levels] (x * inv <= levels up to an ulp) */
	for (; i + 8 <= n; i += 8) {
		__m256i c = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(inv)));
		__m128i c16 = _mm_packs_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
		_mm_storel_epi64((__m128i *)(q + i), _mm_packs_epi16(c16, c16));
	}
#endif
	for (; i < n; i++)
		q[i] = (int8_t)lrintf(x[i] * inv);
	return amax / levels;
}

float quant_f32_to_i8_row(const float *x, int8_t *q, size_t n)
{
	return quant_levels_row(x, q, n, 127.0f);
}

void quant_f32_to_i4_row(const float *x, uint8_t *q, float *s, size_t n)
{
	int8_t c[QUANT_I4_GROUP];

	for (size_t g = 0; g < n / QUANT_I4_GROUP; g++) {
		s[g] = quant_levels_row(x + g * QUANT_I4_GROUP, c, QUANT_I4_GROUP, 7.0f);
		for (int j = 0; j < QUANT_I4_GROUP; j += 2)
			q[(g * QUANT_I4_GROUP + (size_t)j) / 2] =
				(uint8_t)((c[j] & 0x0f) | ((c[j + 1] & 0x0f) << 4));
	}
}

void quant_i4_to_f32_row(const uint8_t *q, const float *s, float *y, size_t n)
{
	for (size_t i = 0; i < n; i += 2) {
		float sc = s[i / QUANT_I4_GROUP];
		/* sign-extend each nibble: (b ^ 8) - 8 */
		y[i] = sc * (float)(((q[i / 2] & 0x0f) ^ 8) - 8);
		y[i + 1] = sc * (float)(((q[i / 2] >> 4) ^ 8) - 8);
	}
}

void quant_i8_to_f32_row(const int8_t *q, float scale, float *y, size_t n)
{
	for (size_t i = 0; i < n; i++)
		y[i] = scale * (float)q[i];
}

/* ---- block decoders: b points at one block, y receives its elements --- */

static float rd_f16(const uint8_t *p)
{
	return quant_f16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

/* Q4_0 (18 bytes): f16 d, 16 bytes of nibbles; low nibbles are elements
 * 0..15, high nibbles 16..31; value (q - 8) * d. */
static void q4_0_block(const uint8_t *restrict b, float *restrict y)
{
	float d = rd_f16(b);
	const uint8_t *qs = b + 2;

	for (int j = 0; j < QK / 2; j++) {
		y[j] = (float)((qs[j] & 0x0f) - 8) * d;
		y[j + QK / 2] = (float)((qs[j] >> 4) - 8) * d;
	}
}

/* Q4_1 (20 bytes): f16 d, f16 m, nibbles as Q4_0; value q * d + m. */
static void q4_1_block(const uint8_t *restrict b, float *restrict y)
{
	float d = rd_f16(b), m = rd_f16(b + 2);
	const uint8_t *qs = b + 4;

	for (int j = 0; j < QK / 2; j++) {
		y[j] = (float)(qs[j] & 0x0f) * d + m;
		y[j + QK / 2] = (float)(qs[j] >> 4) * d + m;
	}
}

/* Q5_0 (22 bytes): f16 d, u32 qh (bit j = 5th bit of element j), nibbles as
 * Q4_0; value (q - 16) * d. */
static void q5_0_block(const uint8_t *restrict b, float *restrict y)
{
	float d = rd_f16(b);
	uint32_t qh = quant_rd_u32le(b + 2);
	const uint8_t *qs = b + 6;

	for (int j = 0; j < QK / 2; j++) {
		int lo = (qs[j] & 0x0f) | (int)(((qh >> j) & 1u) << 4);
		int hi = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
		y[j] = (float)(lo - 16) * d;
		y[j + QK / 2] = (float)(hi - 16) * d;
	}
}

/* Q5_1 (24 bytes): f16 d, f16 m, u32 qh, nibbles; value q * d + m. */
static void q5_1_block(const uint8_t *restrict b, float *restrict y)
{
	float d = rd_f16(b), m = rd_f16(b + 2);
	uint32_t qh = quant_rd_u32le(b + 4);
	const uint8_t *qs = b + 8;

	for (int j = 0; j < QK / 2; j++) {
		int lo = (qs[j] & 0x0f) | (int)(((qh >> j) & 1u) << 4);
		int hi = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
		y[j] = (float)lo * d + m;
		y[j + QK / 2] = (float)hi * d + m;
	}
}

/* Q8_0 (34 bytes): f16 d, 32 int8; value q * d. */
static void q8_0_block(const uint8_t *restrict b, float *restrict y)
{
	float d = rd_f16(b);
	const int8_t *qs = (const int8_t *)(b + 2);

	for (int j = 0; j < QK; j++)
		y[j] = (float)qs[j] * d;
}

/* Q4_K (144 bytes): f16 d, f16 dmin, 12 scale bytes, 128 nibble bytes.
 * Eight sub-blocks of 32; 32-byte group g holds sub-block 2g in its low
 * nibbles and 2g+1 in its high nibbles; value d*sc*q - dmin*m. */
static void q4_k_block(const uint8_t *restrict b, float *restrict y)
{
	float d = rd_f16(b), dmin = rd_f16(b + 2);
	const uint8_t *sc = b + 4, *qs = b + 16;

	for (int g = 0; g < 4; g++, qs += 32, y += 64) {
		int s0, m0, s1, m1;
		quant_k_scale_min(sc, 2 * g, &s0, &m0);
		quant_k_scale_min(sc, 2 * g + 1, &s1, &m1);
		float d0 = d * (float)s0, o0 = dmin * (float)m0;
		float d1 = d * (float)s1, o1 = dmin * (float)m1;
		for (int l = 0; l < 32; l++) {
			y[l] = d0 * (float)(qs[l] & 0x0f) - o0;
			y[l + 32] = d1 * (float)(qs[l] >> 4) - o1;
		}
	}
}

/* Q5_K (176 bytes): f16 d, f16 dmin, 12 scale bytes, 32 bytes qh, 128
 * nibble bytes; as Q4_K, and bit i of qh[l] adds 16 to element l of
 * sub-block i. */
static void q5_k_block(const uint8_t *restrict b, float *restrict y)
{
	float d = rd_f16(b), dmin = rd_f16(b + 2);
	const uint8_t *sc = b + 4, *qh = b + 16, *qs = b + 48;

	for (int g = 0; g < 4; g++, qs += 32, y += 64) {
		int s0, m0, s1, m1;
		quant_k_scale_min(sc, 2 * g, &s0, &m0);
		quant_k_scale_min(sc, 2 * g + 1, &s1, &m1);
		float d0 = d * (float)s0, o0 = dmin * (float)m0;
		float d1 = d * (float)s1, o1 = dmin * (float)m1;
		for (int l = 0; l < 32; l++) {
			int q0 = (qs[l] & 0x0f) | (((qh[l] >> (2 * g)) & 1) << 4);
			int q1 = (qs[l] >> 4) | (((qh[l] >> (2 * g + 1)) & 1) << 4);
			y[l] = d0 * (float)q0 - o0;
			y[l + 32] = d1 * (float)q1 - o1;
		}
	}
}

/* Q6_K (210 bytes): 128 bytes ql (low 4 bits), 64 bytes qh (high 2 bits),
 * 16 int8 scales (one per 16 elements), f16 d. Each half of 128 elements
 * uses 64 ql and 32 qh bytes: element l+32k takes nibble (k>>1) of
 * ql[l + 32*(k&1)] and bits 2k..2k+1 of qh[l]; value d*sc*(q - 32). */
static void q6_k_block(const uint8_t *restrict b, float *restrict y)
{
	const uint8_t *ql = b, *qh = b + 128;
	const int8_t *sc = (const int8_t *)(b + 192);
	float d = rd_f16(b + 208);

	/* the scale changes every 16 elements: s = 0/1 picks the half of l */
	for (int h = 0; h < 2; h++, ql += 64, qh += 32, sc += 8, y += 128) {
		for (int s = 0; s < 2; s++) {
			float d0 = d * (float)sc[s], d1 = d * (float)sc[s + 2];
			float d2 = d * (float)sc[s + 4], d3 = d * (float)sc[s + 6];
			for (int l = 16 * s; l < 16 * s + 16; l++) {
				int q0 = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) - 32;
				int q1 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
				int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
				int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
				y[l] = d0 * (float)q0;
				y[l + 32] = d1 * (float)q1;
				y[l + 64] = d2 * (float)q2;
				y[l + 96] = d3 * (float)q3;
			}
		}
	}
}

/* Q2_K (84 bytes): 16 scale bytes (one per 16 elements: low nibble the
 * scale, high nibble the min), 64 bytes of 2-bit codes, f16 d, f16 dmin.
 * Each half of 128 elements uses 32 code bytes: element 32j + l of the
 * half is bits 2j..2j+1 of byte l; value d*sc*q - dmin*m. */
static void q2_k_block(const uint8_t *restrict b, float *restrict y)
{
	const uint8_t *sc = b, *qs = b + 16;
	float d = rd_f16(b + 80), dmin = rd_f16(b + 82);

	for (int h = 0; h < 2; h++, qs += 32, sc += 8) {
		for (int j = 0; j < 4; j++, y += 32) {
			for (int s = 0; s < 2; s++) {
				float dl = d * (float)(sc[2 * j + s] & 0x0f);
				float ml = dmin * (float)(sc[2 * j + s] >> 4);
				for (int l = 16 * s; l < 16 * s + 16; l++)
					y[l] = dl * (float)((qs[l] >> (2 * j)) & 3) - ml;
			}
		}
	}
}

/* Scale i (0..15) of Q3_K, from its 12 scale bytes: the low four bits are
 * a nibble of bytes 0..7 (low nibbles for i < 8), the top two bits come
 * from byte 8 + i%4, bits 2*(i/4); stored with an offset of 32. */
static int q3_k_scale(const uint8_t *s, int i)
{
	int lo = i < 8 ? s[i] & 0x0f : s[i - 8] >> 4;
	int hi = (s[8 + (i & 3)] >> (2 * (i >> 2))) & 3;

	return (lo | hi << 4) - 32;
}

/* Q3_K (110 bytes): 32 bytes hmask, 64 bytes of 2-bit codes (laid out as
 * Q2_K's), 12 scale bytes, f16 d. Element 32k + l (k = 0..7) takes its
 * high bit from bit k of hmask[l]; a clear bit subtracts 4, so codes are
 * -4..3; value d*sc*q with one signed 6-bit scale per 16 elements. */
static void q3_k_block(const uint8_t *restrict b, float *restrict y)
{
	const uint8_t *hm = b, *qs = b + 32, *sc = b + 96;
	float d = rd_f16(b + 108);

	for (int k = 0; k < 8; k++, y += 32) {
		const uint8_t *q = qs + 32 * (k >> 2);
		int shift = 2 * (k & 3);
		for (int s = 0; s < 2; s++) {
			float dl = d * (float)q3_k_scale(sc, 2 * k + s);
			for (int l = 16 * s; l < 16 * s + 16; l++) {
				int v = ((q[l] >> shift) & 3) - ((hm[l] >> k) & 1 ? 0 : 4);
				y[l] = dl * (float)v;
			}
		}
	}
}

/* IQ4_NL (18 bytes): f16 d, 16 bytes of nibbles laid out as Q4_0's; each
 * nibble indexes a fixed non-linear table (ggml kvalues_iq4nl); value
 * d * table[q]. */
static const int8_t iq4_nl_values[16] = {
	-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};

static void iq4_nl_block(const uint8_t *restrict b, float *restrict y)
{
	float d = rd_f16(b);
	const uint8_t *qs = b + 2;

	for (int j = 0; j < QK / 2; j++) {
		y[j] = d * (float)iq4_nl_values[qs[j] & 0x0f];
		y[j + QK / 2] = d * (float)iq4_nl_values[qs[j] >> 4];
	}
}

typedef void (*quant_block_fn)(const uint8_t *restrict b, float *restrict y);

static quant_block_fn quant_block_decoder(uint32_t type)
{
	switch (type) {
	case QT_Q4_0: return q4_0_block;
	case QT_Q4_1: return q4_1_block;
	case QT_Q5_0: return q5_0_block;
	case QT_Q5_1: return q5_1_block;
	case QT_Q8_0: return q8_0_block;
	case QT_Q2_K: return q2_k_block;
	case QT_Q3_K: return q3_k_block;
	case QT_Q4_K: return q4_k_block;
	case QT_Q5_K: return q5_k_block;
	case QT_Q6_K: return q6_k_block;
	case QT_IQ4_NL: return iq4_nl_block;
	}
	return NULL;
}

static float bf16_to_f32(const uint8_t *p)
{
	return f32_from_bits((uint32_t)(p[0] | (p[1] << 8)) << 16);
}

void quant_dequant_row(uint32_t type, const void *x, float *y, size_t n)
{
	const uint8_t *b = x;
	quant_block_fn fn;
	size_t bs, bb;

	switch (type) {
	case QT_F32:
		memcpy(y, x, n * sizeof *y);
		return;
	case QT_F16:
		for (size_t i = 0; i < n; i++)
			y[i] = rd_f16(b + 2 * i);
		return;
	case QT_BF16:
		for (size_t i = 0; i < n; i++)
			y[i] = bf16_to_f32(b + 2 * i);
		return;
	}
	fn = quant_block_decoder(type);
	if (!fn)
		return;
	bs = quant_block_elems(type);
	bb = quant_block_bytes(type);
	for (size_t i = 0; i + bs <= n; i += bs, b += bb)
		fn(b, y + i);
}

/* ---- dot products ----------------------------------------------------- */

/* Lane-wise partial sums: acc[k] += a[i+k]*b[i+k]; n % QUANT_LANES == 0. */
static void lanes_fma(float *restrict acc, const float *restrict a,
		      const float *restrict b, size_t n)
{
	for (size_t i = 0; i < n; i += QUANT_LANES)
		for (int k = 0; k < QUANT_LANES; k++)
			acc[k] += a[i + k] * b[i + k];
}

static float lanes_sum(const float *acc)
{
	float s = 0.0f;
	for (int k = 0; k < QUANT_LANES; k++)
		s += acc[k];
	return s;
}

static float dot_f32(const float *x, const float *y, size_t n)
{
	float acc[QUANT_LANES] = {0};
	size_t m = n - n % QUANT_LANES;
	float s;

	lanes_fma(acc, x, y, m);
	s = lanes_sum(acc);
	for (size_t i = m; i < n; i++)
		s += x[i] * y[i];
	return s;
}

/* Converts in chunks through a stack buffer so the half->float work and the
 * products both vectorise. */
static float dot_f16_like(int bf16, const uint8_t *x, const float *y, size_t n)
{
	float buf[256], acc[QUANT_LANES] = {0}, s;
	size_t i = 0;

	for (; i + 256 <= n; i += 256) {
		if (bf16)
			for (int j = 0; j < 256; j++)
				buf[j] = bf16_to_f32(x + 2 * (i + j));
		else
			for (int j = 0; j < 256; j++)
				buf[j] = rd_f16(x + 2 * (i + j));
		lanes_fma(acc, buf, y + i, 256);
	}
	s = lanes_sum(acc);
	for (; i < n; i++)
		s += (bf16 ? bf16_to_f32(x + 2 * i) : rd_f16(x + 2 * i)) * y[i];
	return s;
}

/* Q8_0 skips the block buffer: each of the 32 positions keeps its own
 * partial sum, so the loop vectorises with one register width throughout
 * (mixing widths through a stack buffer stalls store forwarding). */
static float dot_q8_0(const uint8_t *restrict b, const float *restrict y, size_t n)
{
	float acc[QK] = {0}, s = 0.0f;

	for (size_t i = 0; i + QK <= n; i += QK, b += 34) {
		const int8_t *qs = (const int8_t *)(b + 2);
		float d = rd_f16(b);
		for (int j = 0; j < QK; j++)
			acc[j] += d * (float)qs[j] * y[i + j];
	}
	for (int j = 0; j < QK; j++)
		s += acc[j];
	return s;
}

/* The fused kernels below repeat their block decoder's bit layout but
 * multiply by y in place of storing: one register width end to end, no
 * block buffer. The tests hold each to quant_dequant_row. */
static float dot_q5_0(const uint8_t *restrict b, const float *restrict y, size_t n)
{
	float acc[QK] = {0}, s = 0.0f;

	for (size_t i = 0; i + QK <= n; i += QK, b += 22) {
		float d = rd_f16(b);
		uint32_t qh = quant_rd_u32le(b + 2);
		const uint8_t *qs = b + 6;
		for (int j = 0; j < QK / 2; j++) {
			int lo = (qs[j] & 0x0f) | (int)(((qh >> j) & 1u) << 4);
			int hi = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
			acc[j] += d * (float)(lo - 16) * y[i + j];
			acc[j + QK / 2] += d * (float)(hi - 16) * y[i + j + QK / 2];
		}
	}
	for (int j = 0; j < QK; j++)
		s += acc[j];
	return s;
}

static float dot_q4_1(const uint8_t *restrict b, const float *restrict y, size_t n)
{
	float acc[QK] = {0}, s = 0.0f;

	for (size_t i = 0; i + QK <= n; i += QK, b += 20) {
		float d = rd_f16(b), m = rd_f16(b + 2);
		const uint8_t *qs = b + 4;
		for (int j = 0; j < QK / 2; j++) {
			acc[j] += ((float)(qs[j] & 0x0f) * d + m) * y[i + j];
			acc[j + QK / 2] += ((float)(qs[j] >> 4) * d + m) * y[i + j + QK / 2];
		}
	}
	for (int j = 0; j < QK; j++)
		s += acc[j];
	return s;
}

static float dot_q4_k(const uint8_t *restrict b, const float *restrict y, size_t n)
{
	float acc[32] = {0}, s = 0.0f;

	for (size_t i = 0; i + QK_K <= n; i += QK_K, b += 144) {
		float d = rd_f16(b), dmin = rd_f16(b + 2);
		const uint8_t *sc = b + 4, *qs = b + 16;
		const float *yb = y + i;
		for (int g = 0; g < 4; g++, qs += 32, yb += 64) {
			int s0, m0, s1, m1;
			quant_k_scale_min(sc, 2 * g, &s0, &m0);
			quant_k_scale_min(sc, 2 * g + 1, &s1, &m1);
			float d0 = d * (float)s0, o0 = dmin * (float)m0;
			float d1 = d * (float)s1, o1 = dmin * (float)m1;
			for (int l = 0; l < 32; l++)
				acc[l] += (d0 * (float)(qs[l] & 0x0f) - o0) * yb[l] +
					  (d1 * (float)(qs[l] >> 4) - o1) * yb[l + 32];
		}
	}
	for (int l = 0; l < 32; l++)
		s += acc[l];
	return s;
}

static float dot_q6_k(const uint8_t *restrict b, const float *restrict y, size_t n)
{
	float acc[32] = {0}, s = 0.0f;

	for (size_t i = 0; i + QK_K <= n; i += QK_K, b += 210) {
		const uint8_t *ql = b, *qh = b + 128;
		const int8_t *sc = (const int8_t *)(b + 192);
		float d = rd_f16(b + 208);
		const float *yb = y + i;
		for (int h = 0; h < 2; h++, ql += 64, qh += 32, sc += 8, yb += 128) {
			for (int k = 0; k < 2; k++) {
				float d0 = d * (float)sc[k], d1 = d * (float)sc[k + 2];
				float d2 = d * (float)sc[k + 4], d3 = d * (float)sc[k + 6];
				for (int l = 16 * k; l < 16 * k + 16; l++) {
					int q0 = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) - 32;
					int q1 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
					int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
					int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
					acc[l] += d0 * (float)q0 * yb[l] + d1 * (float)q1 * yb[l + 32] +
						  d2 * (float)q2 * yb[l + 64] + d3 * (float)q3 * yb[l + 96];
				}
			}
		}
	}
	for (int l = 0; l < 32; l++)
		s += acc[l];
	return s;
}

/* ---- kernel sets ------------------------------------------------------ */

typedef float (*quant_dot_fn)(const uint8_t *x, const float *y, size_t n);

/* One fused dot product per model format. */
struct quant_kernels {
	quant_dot_fn q8_0, q5_0, q4_1, q4_k, q6_k;
};

static const struct quant_kernels quant_scalar_kernels = {
	dot_q8_0, dot_q5_0, dot_q4_1, dot_q4_k, dot_q6_k,
};

#if QUANT_HAVE_AVX2
static const struct quant_kernels quant_avx2_kernels = {
	quant_avx2_dot_q8_0, quant_avx2_dot_q5_0, quant_avx2_dot_q4_1,
	quant_avx2_dot_q4_k, quant_avx2_dot_q6_k,
};
#endif

/* Written once under quant_once, read-only afterwards. */
static pthread_once_t quant_once = PTHREAD_ONCE_INIT;
static int quant_avail[3] = { 1, 0, 0 }; /* by enum quant_impl */
static enum quant_impl quant_active = QUANT_IMPL_SCALAR;
static const struct quant_kernels *quant_active_kernels = &quant_scalar_kernels;

#if QUANT_HAVE_AVX2
/* CPUID leaf 1, ECX bit 29; clang's __builtin_cpu_supports lacks "f16c". */
static int quant_cpu_has_f16c(void)
{
	unsigned a, b, c, d;

	return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#endif

/* The AVX-512 set keeps AVX2's fp32-activation kernels (quant.h). Only
 * called with an available impl. */
static const struct quant_kernels *quant_kernels_of(enum quant_impl impl)
{
#if QUANT_HAVE_AVX2
	if (impl != QUANT_IMPL_SCALAR)
		return &quant_avx2_kernels;
#endif
	(void)impl;
	return &quant_scalar_kernels;
}

/* Queries the CPU once (CPUID traps to the hypervisor in a VM: far too slow
 * for every matvec), then picks the best set. */
static void quant_choose_impl(void)
{
	const char *off = getenv("SEKV_NO_SIMD");

#if QUANT_HAVE_AVX2
	quant_avail[QUANT_IMPL_AVX2] = __builtin_cpu_supports("avx2") &&
				       __builtin_cpu_supports("fma") && quant_cpu_has_f16c();
	quant_avail[QUANT_IMPL_AVX512] = quant_avail[QUANT_IMPL_AVX2] &&
		__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		__builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#endif
	if (off && *off && strcmp(off, "0"))
		return;
	if (quant_avail[QUANT_IMPL_AVX512])
		quant_active = QUANT_IMPL_AVX512;
	else if (quant_avail[QUANT_IMPL_AVX2])
		quant_active = QUANT_IMPL_AVX2;
	quant_active_kernels = quant_kernels_of(quant_active);
}

int quant_impl_available(enum quant_impl impl)
{
	pthread_once(&quant_once, quant_choose_impl);
	return (unsigned)impl < 3 ? quant_avail[impl] : 0;
}

const char *quant_impl_name(enum quant_impl impl)
{
	switch (impl) {
	case QUANT_IMPL_AVX2: return "avx2";
	case QUANT_IMPL_AVX512: return "avx512";
	default: return "scalar";
	}
}

/* Per row of every decode matvec: one pthread_once check, no CPU query. */
static const struct quant_kernels *quant_kernels_active(void)
{
	pthread_once(&quant_once, quant_choose_impl);
	return quant_active_kernels;
}

enum quant_impl quant_impl_active(void)
{
	pthread_once(&quant_once, quant_choose_impl);
	return quant_active;
}

/* The set `impl` runs: itself when available, else the scalar one. */
static const struct quant_kernels *quant_kernels_for(enum quant_impl impl)
{
	return quant_kernels_of(quant_impl_available(impl) ? impl : QUANT_IMPL_SCALAR);
}

/* The kernel of `type` in set k, NULL for types without a fused kernel. */
static quant_dot_fn quant_kernel(const struct quant_kernels *k, uint32_t type)
{
	switch (type) {
	case QT_Q8_0: return k->q8_0;
	case QT_Q5_0: return k->q5_0;
	case QT_Q4_1: return k->q4_1;
	case QT_Q4_K: return k->q4_k;
	case QT_Q6_K: return k->q6_k;
	}
	return NULL;
}

/* Types without a fused kernel: float rows, or one decoded block at a time. */
static float dot_generic(uint32_t type, const uint8_t *b, const float *y, size_t n)
{
	float buf[QK_K], acc[QUANT_LANES] = {0};
	quant_block_fn fn;
	size_t bs, bb;

	switch (type) {
	case QT_F32: return dot_f32((const float *)b, y, n);
	case QT_F16: return dot_f16_like(0, b, y, n);
	case QT_BF16: return dot_f16_like(1, b, y, n);
	}
	fn = quant_block_decoder(type);
	if (!fn)
		return 0.0f;
	bs = quant_block_elems(type);
	bb = quant_block_bytes(type);
	for (size_t i = 0; i + bs <= n; i += bs, b += bb) {
		fn(b, buf);
		lanes_fma(acc, buf, y + i, bs);
	}
	return lanes_sum(acc);
}

float quant_dot_row_impl(enum quant_impl impl, uint32_t type, const void *x,
			 const float *y, size_t n)
{
	quant_dot_fn fn = quant_kernel(quant_kernels_for(impl), type);

	return fn ? fn(x, y, n) : dot_generic(type, x, y, n);
}

float quant_dot_row(uint32_t type, const void *x, const float *y, size_t n)
{
	quant_dot_fn fn = quant_kernel(quant_kernels_active(), type);

	return fn ? fn(x, y, n) : dot_generic(type, x, y, n);
}

/* One kernel lookup per call, not per row. */
static void matvec_set(const struct quant_kernels *k, uint32_t type, const void *w,
		       size_t row_bytes, int n_rows, int n_cols, const float *x, float *y)
{
	const uint8_t *row = w;
	quant_dot_fn fn = quant_kernel(k, type);

	for (int r = 0; r < n_rows; r++, row += row_bytes)
		y[r] = fn ? fn(row, x, (size_t)n_cols) : dot_generic(type, row, x, (size_t)n_cols);
}

void quant_matvec(uint32_t type, const void *w, size_t row_bytes, int n_rows,
		  int n_cols, const float *x, float *y)
{
	matvec_set(quant_kernels_active(), type, w, row_bytes, n_rows, n_cols, x, y);
}

void quant_matvec_impl(enum quant_impl impl, uint32_t type, const void *w, size_t row_bytes,
		       int n_rows, int n_cols, const float *x, float *y)
{
	matvec_set(quant_kernels_for(impl), type, w, row_bytes, n_rows, n_cols, x, y);
}
