/* vec.h - the fixed-order dot product shared by SeKV's routing (attend.c)
 * and the CPU backend's SeKV operations (cpu_sekv.c). Its order of float
 * additions is part of the numerics: greedy answers depend on it, so both
 * places use this one copy.
 */
#ifndef SEKV_VEC_H
#define SEKV_VEC_H

/* sum_i a[i] b[i] in eight partial sums, so the compiler can vectorise
 * without -ffast-math; the order is fixed, so results are deterministic. */
static inline float vec_dot8(const float *a, const float *b, int n)
{
	float p[8] = {0}, s = 0;
	int i = 0;

	for (; i + 8 <= n; i += 8)
		for (int j = 0; j < 8; j++)
			p[j] += a[i + j] * b[i + j];
	for (; i < n; i++)
		s += a[i] * b[i];
	return s + ((p[0] + p[4]) + (p[1] + p[5])) + ((p[2] + p[6]) + (p[3] + p[7]));
}

#endif
