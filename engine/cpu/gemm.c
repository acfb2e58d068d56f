/* gemm.c - fp32 products C = alpha A B^T or alpha A B (+ C) for prefill.
 *
 * The AVX-512 path packs 32 columns of B at a time into a panel
 * Bp[k][32] (a transpose for B^T, a copy for B), then sweeps rows of A
 * in groups of up to GEMM_MR: each group keeps GEMM_MR x 32 outputs in
 * 2 * GEMM_MR zmm accumulators over the whole k loop, with one A element
 * broadcast per row and step of k. Panels are 32 * k floats (80 KiB at
 * k = 640), so they stay in L2 while every row group of A streams by.
 * Invariant: BLAS and this kernel compute the same products (the tests
 * hold the kernel to a double reference); nothing here allocates.
 */
#include "engine/cpu/gemm.h"

#include <cblas.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GEMM_HAVE_AVX512 1
#include <immintrin.h>
#else
#define GEMM_HAVE_AVX512 0
#endif

#define GEMM_NR 32 /* columns of B per panel: two zmm */
#define GEMM_MR 14 /* rows of A per register block */

size_t gemm_scratch_bytes(int k)
{
	return sizeof(float) * GEMM_NR * (size_t)(k > 0 ? k : 1);
}

static pthread_once_t gemm_once = PTHREAD_ONCE_INIT;
static int gemm_avx512;

static void gemm_choose(void)
{
	const char *off = getenv("SEKV_NO_SIMD");

	if (off && *off && strcmp(off, "0"))
		return;
#if GEMM_HAVE_AVX512
	gemm_avx512 = __builtin_cpu_supports("avx512f");
#endif
}

int gemm_uses_avx512(void)
{
	pthread_once(&gemm_once, gemm_choose);
	return gemm_avx512;
}

#if GEMM_HAVE_AVX512

#define AVX512_FN __attribute__((target("avx512f")))

/* Bp[kk][j] = B[n0 + j][kk] (trans) or B[kk][n0 + j], j < nr, zero
 * padded to GEMM_NR. */
static void pack_panel(const float *b, int ldb, int trans, int n0, int nr, int k, float *bp)
{
	if (trans) {
		for (int kk = 0; kk < k; kk++) {
			float *row = bp + (size_t)kk * GEMM_NR;
			for (int j = 0; j < nr; j++)
				row[j] = b[(size_t)(n0 + j) * ldb + kk];
			for (int j = nr; j < GEMM_NR; j++)
				row[j] = 0.0f;
		}
	} else {
		for (int kk = 0; kk < k; kk++) {
			float *row = bp + (size_t)kk * GEMM_NR;
			memcpy(row, b + (size_t)kk * ldb + n0, sizeof(float) * (size_t)nr);
			for (int j = nr; j < GEMM_NR; j++)
				row[j] = 0.0f;
		}
	}
}

/* MR rows of A (MR a compile-time constant after inlining) times one
 * panel: acc[r][0..1] are outputs n0..n0+31 of row r. */
static inline __attribute__((always_inline)) AVX512_FN void
block(int MR, int k, float alpha, const float *a, int lda, const float *bp,
      float *c, int ldc, int nr, int accumulate)
{
	__m512 acc[GEMM_MR][2];
	__mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
	__mmask16 m1 = nr >= 32 ? 0xffff : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : 0;

	/* fully unrolled so the accumulators live in registers */
#pragma GCC unroll 14
	for (int r = 0; r < MR; r++)
		acc[r][0] = acc[r][1] = _mm512_setzero_ps();
	for (int kk = 0; kk < k; kk++) {
		__m512 b0 = _mm512_load_ps(bp + (size_t)kk * GEMM_NR);
		__m512 b1 = _mm512_load_ps(bp + (size_t)kk * GEMM_NR + 16);
#pragma GCC unroll 14
		for (int r = 0; r < MR; r++) {
			__m512 av = _mm512_set1_ps(a[(size_t)r * lda + kk]);
			acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
			acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
		}
	}
#pragma GCC unroll 14
	for (int r = 0; r < MR; r++) {
		float *cr = c + (size_t)r * ldc;
		__m512 v0 = _mm512_mul_ps(acc[r][0], _mm512_set1_ps(alpha));
		__m512 v1 = _mm512_mul_ps(acc[r][1], _mm512_set1_ps(alpha));
		if (accumulate) {
			v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, cr));
			v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, cr + 16));
		}
		_mm512_mask_storeu_ps(cr, m0, v0);
		_mm512_mask_storeu_ps(cr + 16, m1, v1);
	}
}

/* Rows [0, m) of A against one packed panel, GEMM_MR rows at a time. */
static AVX512_FN void panel_rows(int m, int k, float alpha, const float *a, int lda,
				 const float *bp, float *c, int ldc, int nr, int accumulate)
{
	int i = 0;

	for (; i + GEMM_MR <= m; i += GEMM_MR)
		block(GEMM_MR, k, alpha, a + (size_t)i * lda, lda, bp, c + (size_t)i * ldc, ldc,
		      nr, accumulate);
	for (; i + 4 <= m; i += 4)
		block(4, k, alpha, a + (size_t)i * lda, lda, bp, c + (size_t)i * ldc, ldc, nr,
		      accumulate);
	for (; i < m; i++)
		block(1, k, alpha, a + (size_t)i * lda, lda, bp, c + (size_t)i * ldc, ldc, nr,
		      accumulate);
}

static void gemm_avx512_run(int trans, int m, int n, int k, float alpha, const float *a,
			    int lda, const float *b, int ldb, float *c, int ldc, int accumulate,
			    float *scratch)
{
	for (int n0 = 0; n0 < n; n0 += GEMM_NR) {
		int nr = n - n0 < GEMM_NR ? n - n0 : GEMM_NR;
		pack_panel(b, ldb, trans, n0, nr, k, scratch);
		panel_rows(m, k, alpha, a, lda, scratch, c + n0, ldc, nr, accumulate);
	}
}

#endif

void gemm_nt(int m, int n, int k, float alpha, const float *a, int lda,
	     const float *b, int ldb, float *c, int ldc, int accumulate, float *scratch)
{
	if (m <= 0 || n <= 0)
		return;
#if GEMM_HAVE_AVX512
	if (gemm_uses_avx512()) {
		gemm_avx512_run(1, m, n, k, alpha, a, lda, b, ldb, c, ldc, accumulate, scratch);
		return;
	}
#endif
	(void)scratch;
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, alpha, a, lda, b, ldb,
		    accumulate ? 1.0f : 0.0f, c, ldc);
}

void gemm_nn(int m, int n, int k, float alpha, const float *a, int lda,
	     const float *b, int ldb, float *c, int ldc, int accumulate, float *scratch)
{
	if (m <= 0 || n <= 0)
		return;
#if GEMM_HAVE_AVX512
	if (gemm_uses_avx512()) {
		gemm_avx512_run(0, m, n, k, alpha, a, lda, b, ldb, c, ldc, accumulate, scratch);
		return;
	}
#endif
	(void)scratch;
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, alpha, a, lda, b, ldb,
		    accumulate ? 1.0f : 0.0f, c, ldc);
}
