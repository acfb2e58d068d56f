/* quant_simd.h - small x86 helpers shared by the SIMD kernel files
 * (quant_avx2.c, quant_act_simd.h). The includer defines QSIMD_FN, the
 * target attributes the helpers are compiled with; included once per
 * translation unit.
 */
#include <immintrin.h>
#include <string.h>

/* The IEEE half at p (little-endian) as a float. */
QSIMD_FN static inline float qsimd_f16(const uint8_t *p)
{
	uint16_t h;
	memcpy(&h, p, sizeof h);
	return _cvtsh_ss(h);
}

/* Sum of the eight lanes of v. */
QSIMD_FN static inline float qsimd_hsum(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}
