/* quant_int.h - bit-layout helpers shared by the quant*.c kernels only
 * (not part of the engine's API). Layouts: ggml ggml-common.h.
 */
#ifndef SEKV_QUANT_INT_H
#define SEKV_QUANT_INT_H

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

#endif
