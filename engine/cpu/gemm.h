/* gemm.h - fp32 matrix products for prefill: the batched weight products
 * and the attention tiles.
 *
 * One register-blocked kernel (AVX-512, chosen at run time when the CPU
 * has it) over panels of 32 columns of B, packed per call; other CPUs use
 * OpenBLAS cblas_sgemm with the same contract. Single-threaded: callers
 * split the work (backend_cpu.c gives each thread a slice of B's rows).
 */
#ifndef SEKV_GEMM_H
#define SEKV_GEMM_H

#include <stddef.h>

/* Bytes of packing scratch gemm_nt / gemm_nn need for inner size k. */
size_t gemm_scratch_bytes(int k);

/* C[m][n] = alpha * A[m][k] . B[n][k]^T (+ C when accumulate): A, B, C
 * row-major with strides lda, ldb, ldc (elements). scratch holds
 * gemm_scratch_bytes(k) bytes, 64-byte aligned, owned by the caller.
 * Summation order differs from a sequential dot (blocks of the k loop
 * run in one accumulator per output), so results match a double
 * reference to ~1e-6 relative, not bit for bit. */
void gemm_nt(int m, int n, int k, float alpha, const float *a, int lda,
	     const float *b, int ldb, float *c, int ldc, int accumulate, float *scratch);

/* C[m][n] = alpha * A[m][k] . B[k][n] (+ C when accumulate); as gemm_nt. */
void gemm_nn(int m, int n, int k, float alpha, const float *a, int lda,
	     const float *b, int ldb, float *c, int ldc, int accumulate, float *scratch);

/* 1 when gemm_nt/gemm_nn run the AVX-512 kernel on this CPU (SEKV_NO_SIMD
 * set to anything but "" or "0" turns it off), 0 when they call BLAS. */
int gemm_uses_avx512(void);

#endif
