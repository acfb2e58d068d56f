/* quant_act.c - matvecs against int8-quantised activations: quantisation
 * of the vector, scalar reference kernels and the kernel-set dispatch.
 *
 * Invariant: every kernel computes, per weight block, the exact integer
 * dot product of the weight's integer codes with the activation's int8
 * codes and scales it once in fp32, so kernel sets differ only in the
 * order of the fp32 sums. These scalar kernels are the reference (tests
 * hold the SIMD sets, quant_act_avx2.c and quant_act_avx512.c, to them);
 * bit layouts are those of quant.c's block decoders.
 */
#include "engine/quant/quant.h"
#include "engine/quant/quant_int.h"

#define QA 32

void quant_act_quantize(const float *x, size_t n, struct quant_act *a)
{
	a->n = n;
	for (size_t b = 0; b < n / QA; b++)
		quant_act_block(x + b * QA, a->q + b * QA, &a->d[b], &a->s[b]);
}

int quant_act_supported(uint32_t type, size_t n)
{
	switch (type) {
	case QT_Q8_0:
	case QT_Q5_0:
	case QT_Q4_1:
		return n > 0 && n % QA == 0;
	case QT_Q4_K:
	case QT_Q6_K:
		return n > 0 && n % 256 == 0;
	}
	return 0;
}

/* ---- scalar reference ------------------------------------------------- */

static float act_q8_0(const uint8_t *w, const struct quant_act *a)
{
	float acc = 0.0f;

	for (size_t b = 0; b < a->n / QA; b++, w += 34) {
		const int8_t *qw = (const int8_t *)(w + 2), *qa = a->q + b * QA;
		int32_t isum = 0;
		for (int j = 0; j < QA; j++)
			isum += qw[j] * qa[j];
		acc += quant_f16_to_f32((uint16_t)(w[0] | w[1] << 8)) * a->d[b] * (float)isum;
	}
	return acc;
}

static float act_q5_0(const uint8_t *w, const struct quant_act *a)
{
	float acc = 0.0f;

	for (size_t b = 0; b < a->n / QA; b++, w += 22) {
		uint32_t qh = quant_rd_u32le(w + 2);
		const uint8_t *qs = w + 6;
		const int8_t *qa = a->q + b * QA;
		int32_t isum = 0;
		for (int j = 0; j < QA / 2; j++) {
			int lo = (qs[j] & 0x0f) | (int)(((qh >> j) & 1u) << 4);
			int hi = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
			isum += (lo - 16) * qa[j] + (hi - 16) * qa[j + QA / 2];
		}
		acc += quant_f16_to_f32((uint16_t)(w[0] | w[1] << 8)) * a->d[b] * (float)isum;
	}
	return acc;
}

/* Q4_1: value q*d + m per block of 32, so the block's dot is
 * d*dx * sum q*qa + m*s (s = dx * sum qa, the activation block sum). */
static float act_q4_1(const uint8_t *w, const struct quant_act *a)
{
	float acc = 0.0f, mins = 0.0f;

	for (size_t b = 0; b < a->n / QA; b++, w += 20) {
		const uint8_t *qs = w + 4;
		const int8_t *qa = a->q + b * QA;
		int32_t isum = 0;
		for (int j = 0; j < QA / 2; j++)
			isum += (qs[j] & 0x0f) * qa[j] + (qs[j] >> 4) * qa[j + QA / 2];
		acc += quant_f16_to_f32((uint16_t)(w[0] | w[1] << 8)) * a->d[b] * (float)isum;
		mins += quant_f16_to_f32((uint16_t)(w[2] | w[3] << 8)) * a->s[b];
	}
	return acc + mins;
}

/* Q4_K: value d*sc*q - dmin*m per sub-block of 32, so the dot is
 * sum_j (d*sc_j*dx_j * sum q*qa) - dmin*m_j*s_j. */
static float act_q4_k(const uint8_t *w, const struct quant_act *a)
{
	float acc = 0.0f, mins = 0.0f;

	for (size_t i = 0; i < a->n; i += 256, w += 144) {
		float d = quant_f16_to_f32((uint16_t)(w[0] | w[1] << 8));
		float dmin = quant_f16_to_f32((uint16_t)(w[2] | w[3] << 8));
		const uint8_t *sc = w + 4, *qs = w + 16;
		size_t b0 = i / QA;
		for (int g = 0; g < 4; g++, qs += 32) {
			const int8_t *q0 = a->q + i + 64 * g, *q1 = q0 + 32;
			int s0, m0, s1, m1;
			int32_t i0 = 0, i1 = 0;
			quant_k_scale_min(sc, 2 * g, &s0, &m0);
			quant_k_scale_min(sc, 2 * g + 1, &s1, &m1);
			for (int l = 0; l < 32; l++) {
				i0 += (qs[l] & 0x0f) * q0[l];
				i1 += (qs[l] >> 4) * q1[l];
			}
			acc += d * (float)s0 * a->d[b0 + 2 * g] * (float)i0;
			acc += d * (float)s1 * a->d[b0 + 2 * g + 1] * (float)i1;
			mins += dmin * ((float)m0 * a->s[b0 + 2 * g] + (float)m1 * a->s[b0 + 2 * g + 1]);
		}
	}
	return acc - mins;
}

/* Q6_K: per chunk of 32 elements (one activation block, two scales of 16):
 * d * dx * (sc_lo * sum_lo (q-32)*qa + sc_hi * sum_hi (q-32)*qa). */
static float act_q6_k(const uint8_t *w, const struct quant_act *a)
{
	float acc = 0.0f;

	for (size_t i = 0; i < a->n; i += 256, w += 210) {
		const uint8_t *ql = w, *qh = w + 128;
		const int8_t *sc = (const int8_t *)(w + 192);
		float d = quant_f16_to_f32((uint16_t)(w[208] | w[209] << 8));
		for (int h = 0; h < 2; h++, ql += 64, qh += 32, sc += 8) {
			for (int k = 0; k < 4; k++) {
				const int8_t *qa = a->q + i + 128 * h + 32 * k;
				int32_t is[2] = { 0, 0 };
				for (int l = 0; l < 32; l++) {
					int lo = k & 1 ? ql[l + 32] : ql[l];
					int v = (k < 2 ? lo & 0x0f : lo >> 4) |
						(((qh[l] >> (2 * k)) & 3) << 4);
					is[l >> 4] += (v - 32) * qa[l];
				}
				acc += d * a->d[(i + 128 * h + 32 * k) / QA] *
				       (float)(sc[2 * k] * is[0] + sc[2 * k + 1] * is[1]);
			}
		}
	}
	return acc;
}

/* ---- dispatch ----------------------------------------------------------- */

typedef float (*act_fn)(const uint8_t *w, const struct quant_act *a);

static act_fn act_kernel(enum quant_impl impl, uint32_t type)
{
	static const act_fn scalar[5] = { act_q8_0, act_q5_0, act_q4_1, act_q4_k, act_q6_k };
#if QUANT_HAVE_AVX2
	static const act_fn avx2[5] = { quant_act_avx2_q8_0, quant_act_avx2_q5_0,
					quant_act_avx2_q4_1, quant_act_avx2_q4_k,
					quant_act_avx2_q6_k };
	static const act_fn avx512[5] = { quant_act_avx512_q8_0, quant_act_avx512_q5_0,
					  quant_act_avx512_q4_1, quant_act_avx512_q4_k,
					  quant_act_avx512_q6_k };
#endif
	const act_fn *set = scalar;
	int k;

	switch (type) {
	case QT_Q8_0: k = 0; break;
	case QT_Q5_0: k = 1; break;
	case QT_Q4_1: k = 2; break;
	case QT_Q4_K: k = 3; break;
	case QT_Q6_K: k = 4; break;
	default: return NULL;
	}
#if QUANT_HAVE_AVX2
	if (impl == QUANT_IMPL_AVX512)
		set = avx512;
	else if (impl == QUANT_IMPL_AVX2)
		set = avx2;
#endif
	(void)impl;
	return set[k];
}

float quant_act_dot_impl(enum quant_impl impl, uint32_t type, const void *w,
			 const struct quant_act *a)
{
	act_fn fn;

	if (!quant_act_supported(type, a->n))
		return 0.0f;
	if (!quant_impl_available(impl))
		impl = QUANT_IMPL_SCALAR;
	fn = act_kernel(impl, type);
	return fn(w, a);
}

float quant_act_dot(uint32_t type, const void *w, const struct quant_act *a)
{
	act_fn fn = act_kernel(quant_impl_active(), type);

	return fn && quant_act_supported(type, a->n) ? fn(w, a) : 0.0f;
}

void quant_act_matvec_impl(enum quant_impl impl, uint32_t type, const void *w,
			   size_t row_bytes, int n_rows, const struct quant_act *a, float *y)
{
	const uint8_t *row = w;
	act_fn fn = act_kernel(quant_impl_available(impl) ? impl : QUANT_IMPL_SCALAR, type);

	if (!fn || !quant_act_supported(type, a->n)) {
		for (int r = 0; r < n_rows; r++)
			y[r] = 0.0f;
		return;
	}
	for (int r = 0; r < n_rows; r++, row += row_bytes)
		y[r] = fn(row, a);
}

void quant_act_matvec(uint32_t type, const void *w, size_t row_bytes, int n_rows,
		      const struct quant_act *a, float *y)
{
	quant_act_matvec_impl(quant_impl_active(), type, w, row_bytes, n_rows, a, y);
}

void quant_act_matmul(uint32_t type, const void *w, size_t row_bytes, int n_rows,
		      const struct quant_act *a, int n, float *y, size_t ldy)
{
	for (int t = 0; t < n; t++)
		quant_act_matvec_impl(QUANT_IMPL_SCALAR, type, w, row_bytes, n_rows, &a[t],
				      y + (size_t)t * ldy);
}
