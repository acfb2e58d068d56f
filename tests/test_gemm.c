/* test_gemm.c - gemm_nt / gemm_nn (engine/cpu/gemm.c) against a double
 * reference: shapes with every remainder of the register blocks (rows of
 * A not a multiple of 14 or 4, columns not a multiple of 32 or 16),
 * strides wider than the matrices, alpha, and accumulate into C.
 */
#include "tests/test.h"

#include "engine/cpu/gemm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int gemm_case(struct test_ctx *t, int trans, int m, int n, int k, float alpha,
		     int accumulate)
{
	int lda = k + 3, ldb = trans ? k + 5 : n + 7, ldc = n + 2;
	float *a = malloc(sizeof(float) * (size_t)m * lda);
	float *b = malloc(sizeof(float) * (size_t)(trans ? n : k) * ldb);
	float *c = malloc(sizeof(float) * (size_t)m * ldc);
	float *c0 = malloc(sizeof(float) * (size_t)m * ldc);
	float *sc = aligned_alloc(64, (gemm_scratch_bytes(k) + 63) / 64 * 64);
	int ok = 0;

	if (!a || !b || !c || !c0 || !sc) {
		T_FAIL(t, "out of memory");
		goto out;
	}
	test_fill_random(a, (size_t)m * lda, (unsigned long long)(m * 131 + k));
	test_fill_random(b, (size_t)(trans ? n : k) * ldb, (unsigned long long)(n * 71 + k));
	test_fill_random(c0, (size_t)m * ldc, 7);
	memcpy(c, c0, sizeof(float) * (size_t)m * ldc);
	(trans ? gemm_nt : gemm_nn)(m, n, k, alpha, a, lda, b, ldb, c, ldc, accumulate, sc);
	for (int i = 0; i < m; i++) {
		for (int j = 0; j < ldc; j++) {
			double ref = 0.0, mag = 0.0, got = c[(size_t)i * ldc + j];
			if (j >= n) { /* padding columns untouched */
				if (got != c0[(size_t)i * ldc + j]) {
					T_FAIL(t, "%s %dx%dx%d: wrote C[%d][%d] past n", trans ? "nt" : "nn",
					       m, n, k, i, j);
					goto out;
				}
				continue;
			}
			for (int q = 0; q < k; q++) {
				double bv = trans ? b[(size_t)j * ldb + q] : b[(size_t)q * ldb + j];
				ref += (double)a[(size_t)i * lda + q] * bv;
				mag += fabs((double)a[(size_t)i * lda + q] * bv);
			}
			ref *= alpha;
			mag *= fabs(alpha);
			if (accumulate) {
				ref += c0[(size_t)i * ldc + j];
				mag += fabs(c0[(size_t)i * ldc + j]);
			}
			if (!(fabs(got - ref) <= 1e-5 * mag + 1e-30)) {
				T_FAIL(t, "%s %dx%dx%d alpha %g acc %d: C[%d][%d] = %.9g, double %.9g",
				       trans ? "nt" : "nn", m, n, k, alpha, accumulate, i, j, got, ref);
				goto out;
			}
		}
	}
	ok = 1;
out:
	free(a);
	free(b);
	free(c);
	free(c0);
	free(sc);
	return ok;
}

static void gemm_vs_double_reference(struct test_ctx *t)
{
	static const int shapes[][3] = {
		{ 1, 1, 1 }, { 1, 32, 640 }, { 3, 17, 5 }, { 14, 32, 64 }, { 15, 33, 31 },
		{ 29, 48, 256 }, { 64, 256, 256 }, { 70, 96, 100 }, { 5, 1, 9 }, { 2, 40, 0 },
	};
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
		for (int trans = 0; trans < 2; trans++)
			for (int acc = 0; acc < 2; acc++)
				if (!gemm_case(t, trans, shapes[s][0], shapes[s][1], shapes[s][2],
					       acc ? 1.0f : 0.37f, acc))
					return;
}

const struct test_case test_gemm[] = {
	{ "gemm_vs_double_reference", gemm_vs_double_reference },
	{ NULL, NULL },
};
