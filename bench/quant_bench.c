/* quant_bench.c - `sekv-quant-bench`: how fast the quantised matvec kernels
 * read weights, so decode speed can be set against memory bandwidth.
 *
 * matvec: one thread, every kernel set (scalar, avx2, avx512) with fp32
 * activations (quant_matvec_impl) and int8 ones (quant_act_matvec_impl),
 * on the shapes of SmolLM2-135M (1536x576, 576x1536), Qwen2.5 0.5B
 * (4864x896, 896x4864) and 1.5B (8960x1536, 1536x8960), rows x columns. GB/s = weight bytes / time, "hot"
 * on one matrix (cache resident), "cold" rotating over copies filling
 * 256 MiB (DRAM), beside a plain one-thread read of the same buffer; each
 * figure the best of 5 rounds.
 * decode: the CPU backend's one-token matmul (T threads, cold).
 * prefill: one thread's batch matmul of 512 down to 2 tokens, int8 GEMM
 * against dequantise + sgemm (and quant_dequant_row's share of that). Weights are random bytes with finite fp16 scales.
 * usage: sekv-quant-bench [-t THREADS (2)] [--type NAME (all)]
 */
#include "engine/backend/backend.h"
#include "engine/base/clock.h"
#include "engine/quant/quant.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_COLD_BYTES ((size_t)256 << 20)
/* Each figure is the best of BENCH_ROUNDS rounds of at least BENCH_ROUND_S
 * (cold ones: also a whole pass over the copies): the two cores are shared,
 * and the best round is the one least disturbed by other processes. */
#define BENCH_ROUNDS 5
#define BENCH_ROUND_S 0.03
#define BENCH_BATCH 512

struct bench_shape {
	int rows, cols;
	const char *what;
};

static const struct bench_shape k_shapes[] = {
	{ 1536, 576, "SmolLM2 ffn_up/gate" },
	{ 576, 1536, "SmolLM2 ffn_down" },
	{ 4864, 896, "Qwen2.5-0.5B ffn_up/gate" },
	{ 896, 4864, "Qwen2.5-0.5B ffn_down" },
	{ 8960, 1536, "Qwen2.5-1.5B ffn_up/gate" },
	{ 1536, 8960, "Qwen2.5-1.5B ffn_down" },
};

/* prefill batch sizes: chunks of 512, and the short batches of a question */
static const int k_batches[] = { 512, 64, 16, 4, 2 };

static const uint32_t k_types[] = { QT_Q4_1, QT_Q8_0, QT_Q4_K, QT_Q5_0, QT_Q6_K };

/* One matrix copy after another, each `bytes` long. */
struct bench_mat {
	uint32_t type;
	int rows, cols;
	size_t row_bytes, bytes;
	size_t n_copy;
	uint8_t *data;  /* [n_copy][bytes] */
};

static uint64_t bench_rng = 0x9e3779b97f4a7c15ull;

static uint64_t bench_next(void)
{
	bench_rng ^= bench_rng << 13;
	bench_rng ^= bench_rng >> 7;
	bench_rng ^= bench_rng << 17;
	return bench_rng;
}

/* Byte offsets of the fp16 scale fields of one block. */
static int bench_f16_fields(uint32_t type, size_t at[2])
{
	at[0] = type == QT_Q6_K ? 208 : 0;
	at[1] = 2;
	return type == QT_Q4_1 || type == QT_Q4_K ? 2 : 1;
}

/* Random blocks with scales in [1e-3, 1.1e-2): no inf, NaN or denormal. */
static void bench_fill(struct bench_mat *m, size_t n_copy)
{
	size_t bb = quant_block_bytes(m->type), total = n_copy * m->bytes, at[2];
	int nf = bench_f16_fields(m->type, at);

	for (size_t i = 0; i < total; i++)
		m->data[i] = (uint8_t)(bench_next() >> 32);
	for (size_t b = 0; b < total / bb; b++) {
		for (int f = 0; f < nf; f++) {
			uint16_t h = quant_f32_to_f16((float)(1e-3 + 1e-2 * (double)(bench_next() >> 40) / 16777216.0));
			m->data[b * bb + at[f]] = (uint8_t)h;
			m->data[b * bb + at[f] + 1] = (uint8_t)(h >> 8);
		}
	}
}

static int bench_mat_new(struct bench_mat *m, uint32_t type, int rows, int cols)
{
	m->type = type;
	m->rows = rows;
	m->cols = cols;
	m->row_bytes = quant_row_bytes(type, (uint64_t)cols);
	m->bytes = m->row_bytes * (size_t)rows;
	m->n_copy = (BENCH_COLD_BYTES + m->bytes - 1) / m->bytes;
	if (posix_memalign((void **)&m->data, 64, m->n_copy * m->bytes))
		return -1;
	bench_fill(m, m->n_copy);
	return 0;
}

enum bench_path { PATH_FP32, PATH_INT8 };

struct bench_run {
	const struct bench_mat *m;
	enum bench_path path;
	enum quant_impl impl;
	const float *x;
	const struct quant_act *a;
	float *y;
};

static void bench_once(const struct bench_run *r, size_t copy)
{
	const uint8_t *w = r->m->data + copy * r->m->bytes;

	if (r->path == PATH_FP32)
		quant_matvec_impl(r->impl, r->m->type, w, r->m->row_bytes, r->m->rows, r->m->cols,
				  r->x, r->y);
	else
		quant_act_matvec_impl(r->impl, r->m->type, w, r->m->row_bytes, r->m->rows, r->a,
				      r->y);
}

/* GB/s of weight bytes: hot repeats copy 0, cold walks all copies. */
static double bench_gb_s(const struct bench_run *r, int cold)
{
	size_t copy = 0;
	double best = 0.0;

	bench_once(r, 0);
	for (int round = 0; round < BENCH_ROUNDS; round++) {
		size_t n = 0;
		double t0 = clk_now(), dt;
		do {
			bench_once(r, copy);
			n++;
			if (cold)
				copy = (copy + 1) % r->m->n_copy;
			dt = clk_now() - t0;
		} while (dt < BENCH_ROUND_S || (cold && n < r->m->n_copy));
		if ((double)n * (double)r->m->bytes / dt / 1e9 > best)
			best = (double)n * (double)r->m->bytes / dt / 1e9;
	}
	return best;
}

/* One thread reading the whole cold buffer (eight independent integer
 * sums): the DRAM ceiling for a one-thread matvec. */
static double bench_read_gb_s(const struct bench_mat *m)
{
	const uint64_t *p = (const uint64_t *)m->data;
	size_t n = m->n_copy * m->bytes / 8;
	uint64_t s[8] = { 0 };
	double best = 1e30;

	for (int round = 0; round < BENCH_ROUNDS; round++) {
		double t0 = clk_now();
		for (size_t i = 0; i + 8 <= n; i += 8)
			for (int k = 0; k < 8; k++)
				s[k] += p[i + k];
		if (clk_now() - t0 < best)
			best = clk_now() - t0;
	}
	fprintf(stderr, "read checksum %llu\n",
		(unsigned long long)(s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7]));
	return (double)(n * 8) / best / 1e9;
}

static void bench_matvec(const struct bench_mat *m, const float *x, const struct quant_act *a,
			 float *y)
{
	static const enum quant_impl impls[] = { QUANT_IMPL_SCALAR, QUANT_IMPL_AVX2,
						 QUANT_IMPL_AVX512 };

	for (int path = PATH_FP32; path <= PATH_INT8; path++) {
		if (path == PATH_INT8 && !quant_act_supported(m->type, (size_t)m->cols))
			continue;
		for (size_t k = 0; k < sizeof impls / sizeof impls[0]; k++) {
			struct bench_run r = { m, (enum bench_path)path, impls[k], x, a, y };
			/* the fp32 kernels of the AVX-512 set are AVX2's */
			if (!quant_impl_available(impls[k]) ||
			    (path == PATH_FP32 && impls[k] == QUANT_IMPL_AVX512))
				continue;
			double hot = bench_gb_s(&r, 0), cold = bench_gb_s(&r, 1);
			printf("matvec %4dx%-4d %-5s %-4s %-6s hot_gb_s %6.2f cold_gb_s %6.2f\n",
			       m->rows, m->cols, quant_name(m->type), path == PATH_FP32 ? "fp32" : "int8",
			       quant_impl_name(impls[k]), hot, cold);
		}
	}
}

/* The backend's one-token matmul on cold copies: int8 (act_q8) and fp32. */
static void bench_decode(struct backend *be, struct backend_ws *ws, const struct bench_mat *m,
			 const float *x, float *y, int n_threads)
{
	for (int q8 = 1; q8 >= 0; q8--) {
		size_t copy = 0;
		double best = 1e30;

		if (q8 && !quant_act_supported(m->type, (size_t)m->cols))
			continue;
		be->act_q8 = q8;
		for (int round = 0; round < BENCH_ROUNDS; round++) {
			size_t n = 0;
			double t0 = clk_now(), dt;
			do {
				struct backend_weight w = { m->type, m->rows, m->cols, m->row_bytes,
							    m->data + copy * m->bytes };
				be->ops->matmul(be, ws, &w, 0, m->rows, x, 1, y, m->rows);
				n++;
				copy = (copy + 1) % m->n_copy;
				dt = clk_now() - t0;
			} while (dt < BENCH_ROUND_S || n < m->n_copy);
			best = dt / (double)n < best ? dt / (double)n : best;
		}
		printf("decode %4dx%-4d %-5s %-4s %d threads cold_gb_s %6.2f us_per_matvec %7.1f\n",
		       m->rows, m->cols, quant_name(m->type), q8 ? "int8" : "fp32", n_threads,
		       (double)m->bytes / best / 1e9, best * 1e6);
	}
	be->act_q8 = 1;
}

/* One thread: quant_dequant_row over every row, against the backend's
 * batch matmul of `batch` tokens: the int8 GEMM (act_q8, where the type has
 * one) and dequantise + sgemm (fp32). */
static void bench_prefill(struct backend *be1, struct backend_ws *ws1, const struct bench_mat *m,
			  const float *xb, float *yb, float *wf, int batch)
{
	struct backend_weight w = { m->type, m->rows, m->cols, m->row_bytes, m->data };
	double t_deq = 1e30, t_mm[2] = { 1e30, 1e30 };

	for (int round = 0; round < BENCH_ROUNDS; round++) {
		double t0 = clk_now(), t1;
		for (int r = 0; r < m->rows; r++)
			quant_dequant_row(m->type, m->data + (size_t)r * m->row_bytes,
					  wf + (size_t)r * m->cols, (size_t)m->cols);
		t1 = clk_now();
		t_deq = t1 - t0 < t_deq ? t1 - t0 : t_deq;
		for (int q8 = 0; q8 < 2; q8++) {
			be1->act_q8 = q8;
			t0 = clk_now();
			be1->ops->matmul(be1, ws1, &w, 0, m->rows, xb, batch, yb, m->rows);
			t1 = clk_now();
			t_mm[q8] = t1 - t0 < t_mm[q8] ? t1 - t0 : t_mm[q8];
		}
		be1->act_q8 = 1;
	}
	printf("prefill %4dx%-4d %-5s batch %3d: fp32 matmul_ms %7.2f gflops %6.1f (dequant %.1f%%)"
	       " | int8%s matmul_ms %7.2f gflops %6.1f\n",
	       m->rows, m->cols, quant_name(m->type), batch, t_mm[0] * 1e3,
	       2.0 * batch * m->rows * m->cols / t_mm[0] / 1e9, 100.0 * t_deq / t_mm[0],
	       quant_gemm_supported(m->type, (size_t)m->cols) ? "" : " (none: fp32)", t_mm[1] * 1e3,
	       2.0 * batch * m->rows * m->cols / t_mm[1] / 1e9);
}

#define BENCH_MAX_DIM 8960                 /* most rows, most columns */
#define BENCH_MAX_ELEMS ((size_t)8960 * 1536) /* most rows x columns */

/* Buffers and backends of one run, sized for the largest shape. */
struct bench_ctx {
	int n_threads;
	struct backend *be, *be1;    /* n_threads, and one thread for prefill */
	struct backend_ws *ws, *ws1;
	float *x, *y;                /* [max cols], [max rows] */
	float *xb, *yb;              /* [BENCH_BATCH][max cols], [BENCH_BATCH][max rows] */
	float *wf;                   /* [max elems] dequantised weights */
	int8_t *aq;                  /* quantised x: [max cols] */
	float *ad, *as;              /* [max cols / 32] */
};

static void bench_ctx_close(struct bench_ctx *c)
{
	if (c->ws)
		c->be->ops->ws_free(c->ws);
	if (c->ws1)
		c->be1->ops->ws_free(c->ws1);
	backend_close(c->be);
	backend_close(c->be1);
	free(c->x), free(c->y), free(c->xb), free(c->yb), free(c->wf);
	free(c->aq), free(c->ad), free(c->as);
}

static int bench_ctx_open(struct bench_ctx *c, int n_threads)
{
	size_t r = BENCH_MAX_DIM, k = BENCH_MAX_DIM, e = BENCH_MAX_ELEMS;
	struct backend_ws_size sz = { 1, 1, 64, e, (int)k, 0, 0 };
	struct backend_ws_size sz1 = { BENCH_BATCH, 1, 64, e, (int)k, 0, 0 };
	char err[256];

	*c = (struct bench_ctx){ .n_threads = n_threads };
	c->x = malloc(sizeof(float) * k);
	c->y = malloc(sizeof(float) * r);
	c->xb = malloc(sizeof(float) * BENCH_BATCH * k);
	c->yb = malloc(sizeof(float) * BENCH_BATCH * r);
	c->wf = malloc(sizeof(float) * e);
	c->aq = malloc(k);
	c->ad = malloc(sizeof(float) * k / 32);
	c->as = malloc(sizeof(float) * k / 32);
	if (!c->x || !c->y || !c->xb || !c->yb || !c->wf || !c->aq || !c->ad || !c->as) {
		fprintf(stderr, "sekv-quant-bench: buffers: out of memory\n");
		return -1;
	}
	if (backend_open("cpu", n_threads, &c->be, err, sizeof err) ||
	    backend_open("cpu", 1, &c->be1, err, sizeof err) ||
	    c->be->ops->ws_new(c->be, &sz, &c->ws) || c->be1->ops->ws_new(c->be1, &sz1, &c->ws1)) {
		fprintf(stderr, "sekv-quant-bench: backend: %s\n", err);
		return -1;
	}
	for (size_t i = 0; i < k; i++)
		c->x[i] = (float)((double)(bench_next() >> 11) / 4503599627370496.0 - 1.0);
	for (size_t i = 0; i < BENCH_BATCH * k; i++)
		c->xb[i] = (float)((double)(bench_next() >> 11) / 4503599627370496.0 - 1.0);
	return 0;
}

/* Every figure of one shape and type; -1 when out of memory. */
static int bench_one(struct bench_ctx *c, const struct bench_shape *sh, uint32_t type, int read)
{
	struct bench_mat m;
	struct quant_act a = { 0, c->aq, c->ad, c->as };

	if (bench_mat_new(&m, type, sh->rows, sh->cols)) {
		fprintf(stderr, "sekv-quant-bench: %zu MiB: out of memory\n", BENCH_COLD_BYTES >> 20);
		return -1;
	}
	quant_act_quantize(c->x, (size_t)sh->cols, &a);
	if (read)
		printf("read   one thread, same 256 MiB    cold_gb_s %6.2f\n", bench_read_gb_s(&m));
	bench_matvec(&m, c->x, &a, c->y);
	bench_decode(c->be, c->ws, &m, c->x, c->y, c->n_threads);
	for (size_t b = 0; b < sizeof k_batches / sizeof k_batches[0]; b++)
		bench_prefill(c->be1, c->ws1, &m, c->xb, c->yb, c->wf, k_batches[b]);
	free(m.data);
	return 0;
}

int main(int argc, char **argv)
{
	int n_threads = 2, ret = 1;
	const char *only = NULL;
	struct bench_ctx c;

	for (int i = 1; i < argc; i++) {
		char *end;
		long v;

		if (!strcmp(argv[i], "-t") && i + 1 < argc) {
			errno = 0;
			v = strtol(argv[++i], &end, 10);
			if (errno || *end || end == argv[i] || v < 1 || v > 256) {
				fprintf(stderr, "sekv-quant-bench: option: -t: '%s' is not in [1, 256]\n",
					argv[i]);
				return 1;
			}
			n_threads = (int)v;
		} else if (!strcmp(argv[i], "--type") && i + 1 < argc) {
			only = argv[++i];
		} else {
			fprintf(stderr, "usage: sekv-quant-bench [-t THREADS] [--type NAME]\n");
			return !strcmp(argv[i], "-h") ? 0 : 1;
		}
	}
	if (bench_ctx_open(&c, n_threads))
		goto out;
	printf("kernel sets: active %s (avx2 %d, avx512 %d); GB = 1e9 bytes of weights\n",
	       quant_impl_name(quant_impl_active()), quant_impl_available(QUANT_IMPL_AVX2),
	       quant_impl_available(QUANT_IMPL_AVX512));
	for (size_t s = 0; s < sizeof k_shapes / sizeof k_shapes[0]; s++) {
		const struct bench_shape *sh = &k_shapes[s];
		int first = 1;

		printf("== %dx%d (%s)\n", sh->rows, sh->cols, sh->what);
		for (size_t k = 0; k < sizeof k_types / sizeof k_types[0]; k++) {
			if (sh->cols % (int)quant_block_elems(k_types[k]) ||
			    (only && strcmp(only, quant_name(k_types[k]))))
				continue;
			if (bench_one(&c, sh, k_types[k], first))
				goto out;
			first = 0;
		}
	}
	ret = 0;
out:
	bench_ctx_close(&c);
	return ret;
}
