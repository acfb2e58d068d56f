/* quant_int.h - bit-layout helpers shared by the quant*.c kernels only
 * (not part of the engine's API). Layouts: ggml ggml-common.h.
 */
#ifndef SEKV_QUANT_INT_H
#define SEKV_QUANT_INT_H

#include <math.h>
#include <stdint.h>

/* The 12 scale bytes of Q4_K/Q5_K hold eight 6-bit scales and eight 6-bit
 * mins: sub-blocks 0..3 in the low 6 bits of bytes 0..3 (scale) and 4..7
 * (min); sub-blocks 4..7 in the nibbles of bytes 8..11 plus the top two
 * bits of bytes 0..3 (scale) and 4..7 (min). */
static inline void quant_k_scale_min(const uint8_t *s, int i, int *sc, int *m)
{
	if (i < 4) {
		*sc = s[i] & 63;
		*m = s[i + 4] & 63;
	} else {
		*sc = (s[i + 4] & 0x0f) | ((s[i - 4] >> 6) << 4);
		*m = (s[i + 4] >> 4) | ((s[i] >> 6) << 4);
	}
}

static inline uint32_t quant_rd_u32le(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

/* One block of 32 activations x as int8 codes q (struct quant_act's
 * rule): d = max|x| / 127, q = rint(x / d) clamped to [-127, 127] (no
 * code is -128: the SIMD kernels rely on |q| <= 127), NaN (inf or NaN
 * input) as 0; *s = d * sum q. The one definition of the rounding:
 * quant_act_quantize and the scalar GEMM packing use it, and the SIMD
 * packing (quant_gemm_simd.h) reproduces it bit for bit. */
static inline void quant_act_block(const float *x, int8_t *q, float *d_out, float *s_out)
{
	float amax = 0.0f, id, d;
	int sum = 0;

	for (int j = 0; j < 32; j++)
		amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
	d = amax / 127.0f;
	id = d > 0.0f ? 1.0f / d : 0.0f;
	for (int j = 0; j < 32; j++) {
		float v = rintf(x[j] * id);
		/* a cast of NaN would be UB */
		v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : (v == v ? v : 0.0f));
		q[j] = (int8_t)v;
		sum += q[j];
	}
	*d_out = d;
	*s_out = d * (float)sum;
}

#endif
