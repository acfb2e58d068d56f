/* quant_gemm.c - the int8 GEMM of batches (prefill): the choice of kernel
 * set, the scalar packing of activation rows, and the scratch size. The
 * kernels (quant_gemm_simd.h, compiled in quant_act_avx2.c and
 * quant_act_avx512.c) unpack each weight row once per batch and multiply
 * it by every token with integer dot products, where the fp32 path
 * dequantises it and runs sgemm.
 * Invariant: packed activations are quant_act_quantize's codes, scales
 * and sums, bit for bit, whichever set packs them; results are
 * quant_act_matmul's (quant_act.c, the scalar reference) up to the order
 * of the fp32 sums.
 */
#include "engine/quant/quant.h"
#include "engine/quant/quant_int.h"

#include <string.h>

int quant_gemm_pad(int n)
{
	return (n + QUANT_GEMM_PAD - 1) / QUANT_GEMM_PAD * QUANT_GEMM_PAD;
}

/* One block of 32 of one token: codes + 128 as eight 4-byte words 32
 * bytes apart at q (the packed layout), its scale and sum at d and s. */
typedef void (*gemm_block_fn)(const float *x, uint8_t *q, float *d, float *s);

static void gemm_block_scalar(const float *x, uint8_t *q, float *d, float *s)
{
	int8_t code[32];

	quant_act_block(x, code, d, s);
	for (int j = 0; j < 32; j++)
		q[32 * (j / 4) + j % 4] = (uint8_t)(code[j] + 128);
}

void quant_gemm_pack_impl(enum quant_impl impl, const float *x, size_t ldx, int g0, int g1,
			  struct quant_gemm_act *a)
{
	size_t k = a->cols, nb = k / 32;
	gemm_block_fn block = gemm_block_scalar;

#if QUANT_HAVE_AVX2
	if (quant_impl_available(impl) && impl == QUANT_IMPL_AVX512)
		block = quant_act_avx512_gemm_block;
	else if (quant_impl_available(impl) && impl == QUANT_IMPL_AVX2)
		block = quant_act_avx2_gemm_block;
#endif
	(void)impl;
	for (int g = g0; g < g1; g++)
		for (int t = 0; t < QUANT_GEMM_TOK; t++) {
			int tok = g * QUANT_GEMM_TOK + t;
			uint8_t *q = a->q + (size_t)g * k * QUANT_GEMM_TOK + 4 * (size_t)t;
			float *d = a->d + (size_t)g * nb * QUANT_GEMM_TOK + t;
			float *s = a->s + (size_t)g * nb * QUANT_GEMM_TOK + t;
			for (size_t b = 0; b < nb; b++) {
				if (tok < a->n) {
					block(x + (size_t)tok * ldx + 32 * b, q + 256 * b, &d[8 * b], &s[8 * b]);
					continue;
				}
				for (int w = 0; w < 8; w++)
					memset(q + 256 * b + 32 * (size_t)w, 0x80, 4);
				d[8 * b] = s[8 * b] = 0.0f;
			}
		}
}

void quant_gemm_pack(const float *x, size_t ldx, int g0, int g1, struct quant_gemm_act *a)
{
	quant_gemm_pack_impl(quant_impl_active(), x, ldx, g0, g1, a);
}

int quant_gemm_supported_impl(enum quant_impl impl, uint32_t type, size_t cols)
{
	if (impl == QUANT_IMPL_SCALAR || !quant_impl_available(impl) ||
	    !quant_act_supported(type, cols))
		return 0;
	return type != QT_Q8_0 || impl == QUANT_IMPL_AVX512;
}

int quant_gemm_supported(uint32_t type, size_t cols)
{
	return quant_gemm_supported_impl(quant_impl_active(), type, cols);
}

/* codes [PANEL][cols], then scales and corrections [PANEL][cols / 16]
 * each (groups of 16 at most), then offsets [PANEL][cols / 32] */
size_t quant_gemm_scratch_bytes(size_t cols)
{
	return QUANT_GEMM_PANEL * (cols + cols / 16 * 8 + cols / 32 * 4);
}

void quant_gemm_impl(enum quant_impl impl, uint32_t type, const void *w, size_t row_bytes,
		     int n_rows, const struct quant_gemm_act *a, float *y, size_t ldy,
		     void *scratch)
{
#if QUANT_HAVE_AVX2
	if (impl == QUANT_IMPL_AVX512)
		quant_act_avx512_gemm(type, w, row_bytes, n_rows, a, y, ldy, scratch);
	else if (impl == QUANT_IMPL_AVX2)
		quant_act_avx2_gemm(type, w, row_bytes, n_rows, a, y, ldy, scratch);
#else
	(void)impl, (void)type, (void)w, (void)row_bytes, (void)n_rows, (void)a, (void)y;
	(void)ldy, (void)scratch;
#endif
}

void quant_gemm(uint32_t type, const void *w, size_t row_bytes, int n_rows,
		const struct quant_gemm_act *a, float *y, size_t ldy, void *scratch)
{
	quant_gemm_impl(quant_impl_active(), type, w, row_bytes, n_rows, a, y, ldy, scratch);
}
