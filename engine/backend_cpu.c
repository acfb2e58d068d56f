/* backend_cpu.c - the reference backend: the CPU.
 *
 * Everything runs on one pthread pool (the calling thread is worker 0;
 * workers spin briefly between jobs, since a decode step is ~130 short
 * ones). Batches: each thread dequantises its slice of weight rows and
 * multiplies it by the batch with gemm.c; attention runs (head, query
 * block) items tiled over keys with an online softmax (flash-attention
 * order), so scratch does not grow with context. One token: the input is
 * quantised to int8 blocks and each thread runs quant_act dot products
 * over its rows; attention splits the keys over threads and merges the
 * partial softmaxes. BLAS stays single-threaded (gemm.c's fallback).
 * Invariant: nothing here allocates after backend_cpu_open / ws_new.
 * Quantised formats live in quant*.c; the forward pass in model.c.
 */
#include "engine/backend.h"

#include "engine/err.h"
#include "engine/gemm.h"
#include "engine/quant.h"

#include <cblas.h>
#if defined(__F16C__)
#include <immintrin.h>
#endif
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ATTN_TILE 256 /* keys per attention tile */
#define ATTN_QBLK 64  /* queries per batch-attention work item */
#define LANES 16      /* inner loops of fixed width so -O2 vectorises them */

/* exp(x) for x in [-87, 88] (clamped outside), relative error < 1e-7
 * (measured 8e-8 against exp in double): Cephes expf's range reduction
 * x = n ln2 + r and degree-6 polynomial, written branch-free so loops
 * over it vectorise; libm's expf does not, and the vocabulary
 * log-sum-exp takes n_vocab of them per token. */
static inline float exp_fast(float x)
{
	float n, r, p, sc;
	uint32_t u;

	x = x < -87.0f ? -87.0f : x;
	x = x > 88.0f ? 88.0f : x;
	n = rintf(x * 1.44269504088896341f);
	r = fmaf(n, -0.693359375f, x);
	r = fmaf(n, 2.12194440e-4f, r);
	p = 1.9875691500e-4f;
	p = fmaf(p, r, 1.3981999507e-3f);
	p = fmaf(p, r, 8.3334519073e-3f);
	p = fmaf(p, r, 4.1665795894e-2f);
	p = fmaf(p, r, 1.6666665459e-1f);
	p = fmaf(p, r, 5.0000001201e-1f);
	p = fmaf(p, r * r, r) + 1.0f;
	u = (uint32_t)((int32_t)n + 127) << 23;
	memcpy(&sc, &u, sizeof sc);
	return p * sc;
}

/* ---- thread pool ---------------------------------------------------- */

/* A decode step runs ~130 short parallel matvecs; waking a sleeping thread
 * costs tens of microseconds each, as much as the matvec. So workers
 * spin on the job counter for POOL_SPIN_NS after their last job (a decode
 * step's gaps are far shorter) and only then sleep on the condition
 * variable. The caller spins for the workers to finish. */
#define POOL_SPIN_NS 2000000LL

/* Runs items [i0, i1) on worker tid (0 = the calling thread). */
typedef void (*pool_fn)(void *ctx, int i0, int i1, int tid);

struct cpu {
	int n_threads;
	pthread_t *th;          /* [n_threads - 1] */
	int n_started;
	pthread_mutex_t mu;     /* guards sleeping workers' hand-over */
	pthread_cond_t cv_go;
	atomic_ulong gen;       /* bumped once per parallel_for */
	atomic_int pending;     /* workers still running this generation */
	atomic_int sleepers;    /* workers waiting on cv_go */
	atomic_int quit;
	pool_fn fn;             /* job of the current generation; written */
	void *ctx;              /* before gen is bumped (release) */
	int n_items;
};

struct worker_arg {
	struct cpu *c;
	int id;
};

static void chunk(int n_items, int n_parts, int part, int *i0, int *i1)
{
	int base = n_items / n_parts, rem = n_items % n_parts;
	*i0 = part * base + (part < rem ? part : rem);
	*i1 = *i0 + base + (part < rem);
}

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/* One step of a busy wait: pause first, then give the core away, so a
 * waiting thread does not starve the one it waits for when the machine
 * has fewer free cores than threads. */
static inline void cpu_backoff(unsigned spins)
{
	if (spins < 256)
		cpu_relax();
	else
		sched_yield();
}

/* Waits until gen moves past seen (or quit): spins, then sleeps. The
 * sleepers count and gen are both seq_cst, so a caller that bumps gen
 * either sees this worker counted and broadcasts, or this worker sees
 * the new gen under the mutex. */
static unsigned long worker_wait(struct cpu *c, unsigned long seen)
{
	long long t0 = now_ns();
	unsigned long g;

	for (unsigned spins = 0;; spins++) {
		g = atomic_load(&c->gen);
		if (g != seen || atomic_load(&c->quit))
			return g;
		cpu_backoff(spins);
		if ((spins & 63) == 63 && now_ns() - t0 > POOL_SPIN_NS)
			break;
	}
	pthread_mutex_lock(&c->mu);
	atomic_fetch_add(&c->sleepers, 1);
	while ((g = atomic_load(&c->gen)) == seen && !atomic_load(&c->quit))
		pthread_cond_wait(&c->cv_go, &c->mu);
	atomic_fetch_sub(&c->sleepers, 1);
	pthread_mutex_unlock(&c->mu);
	return g;
}

static void *worker_main(void *arg)
{
	struct cpu *c = ((struct worker_arg *)arg)->c;
	int id = ((struct worker_arg *)arg)->id;
	unsigned long seen = 0;

	free(arg);
	for (;;) {
		int i0, i1;
		seen = worker_wait(c, seen);
		if (atomic_load(&c->quit))
			return NULL;
		chunk(c->n_items, c->n_threads, id, &i0, &i1);
		if (i0 < i1)
			c->fn(c->ctx, i0, i1, id);
		atomic_fetch_sub_explicit(&c->pending, 1, memory_order_release);
	}
}

/* Runs fn over [0, n_items) split into n_threads contiguous chunks. Small
 * jobs run on the calling thread alone. One caller at a time. */
static void parallel_for(struct cpu *c, int n_items, int min_per_thread,
			 pool_fn fn, void *ctx)
{
	int i0, i1;

	if (c->n_threads <= 1 || n_items < 2 * min_per_thread) {
		if (n_items > 0)
			fn(ctx, 0, n_items, 0);
		return;
	}
	c->fn = fn;
	c->ctx = ctx;
	c->n_items = n_items;
	atomic_store(&c->pending, c->n_threads - 1);
	atomic_fetch_add(&c->gen, 1);
	if (atomic_load(&c->sleepers) > 0) {
		pthread_mutex_lock(&c->mu);
		pthread_cond_broadcast(&c->cv_go);
		pthread_mutex_unlock(&c->mu);
	}

	chunk(n_items, c->n_threads, 0, &i0, &i1);
	if (i0 < i1)
		fn(ctx, i0, i1, 0);

	for (unsigned spins = 0; atomic_load_explicit(&c->pending, memory_order_acquire) > 0; spins++)
		cpu_backoff(spins);
}

/* ---- workspace ------------------------------------------------------ */

struct backend_ws {
	struct backend_ws_size sz;
	float *wbuf;   /* [max_w_elems] dequantised weight rows */
	float *kt;     /* [ATTN_TILE][d_head] keys of one tile, fp32 */
	float *vt;     /* [ATTN_TILE][d_head] */
	float *s;      /* [n_batch][ATTN_TILE] scores */
	float *mx;     /* [n_head][n_batch] running maxima */
	float *sm;     /* [n_head][n_batch] running sums */
	struct quant_act act; /* one token's input as int8 blocks: q [max_cols],
	                         d, s [max_cols / 32] */
	int n_part;    /* decode attention: key ranges run in parallel (threads) */
	float *pk;     /* [n_part][ATTN_TILE][d_head] keys of a part's tile */
	float *pv;     /* [n_part][ATTN_TILE][d_head] */
	int ps_rows;   /* max(n_head, ATTN_QBLK): score rows of one part */
	float *ps;     /* [n_part][ps_rows][ATTN_TILE] scores */
	float *po;     /* [n_part][n_head][d_head] unnormalised outputs */
	float *pm;     /* [n_part][ps_rows] running maxima */
	float *pl;     /* [n_part][ps_rows] running sums */
	size_t gs_stride; /* floats of gemm scratch per thread */
	float *gs;     /* [n_threads][gs_stride] gemm packing scratch, 64-byte aligned */
};

static void cpu_ws_free(struct backend_ws *ws)
{
	if (!ws)
		return;
	free(ws->wbuf);
	free(ws->kt);
	free(ws->vt);
	free(ws->s);
	free(ws->mx);
	free(ws->sm);
	free(ws->act.q);
	free(ws->act.d);
	free(ws->act.s);
	free(ws->pk);
	free(ws->pv);
	free(ws->ps);
	free(ws->po);
	free(ws->pm);
	free(ws->pl);
	free(ws->gs);
	free(ws);
}

static int cpu_ws_new(struct backend *b, const struct backend_ws_size *sz,
		      struct backend_ws **out)
{
	struct backend_ws *ws = calloc(1, sizeof *ws);
	size_t nb = (size_t)sz->n_batch, d = (size_t)sz->d_head;
	size_t np = (size_t)b->n_threads, nh = (size_t)sz->n_head;

	*out = NULL;
	if (!ws)
		return SEKV_ENOMEM;
	ws->sz = *sz;
	ws->wbuf = malloc(sizeof(float) * (sz->max_w_elems ? sz->max_w_elems : 1));
	ws->kt = malloc(sizeof(float) * ATTN_TILE * d);
	ws->vt = malloc(sizeof(float) * ATTN_TILE * d);
	ws->s = malloc(sizeof(float) * nb * ATTN_TILE);
	ws->mx = malloc(sizeof(float) * nb * (size_t)sz->n_head);
	ws->sm = malloc(sizeof(float) * nb * (size_t)sz->n_head);
	ws->act.q = malloc(sz->max_cols > 0 ? (size_t)sz->max_cols : 1);
	ws->act.d = malloc(sizeof(float) * (sz->max_cols / QUANT_ACT_BLOCK + 1));
	ws->act.s = malloc(sizeof(float) * (sz->max_cols / QUANT_ACT_BLOCK + 1));
	ws->n_part = (int)np;
	ws->pk = malloc(sizeof(float) * np * ATTN_TILE * d);
	ws->pv = malloc(sizeof(float) * np * ATTN_TILE * d);
	ws->ps_rows = nh > ATTN_QBLK ? (int)nh : ATTN_QBLK;
	ws->ps = malloc(sizeof(float) * np * (size_t)ws->ps_rows * ATTN_TILE);
	ws->po = malloc(sizeof(float) * np * nh * d);
	ws->pm = malloc(sizeof(float) * np * (size_t)ws->ps_rows);
	ws->pl = malloc(sizeof(float) * np * (size_t)ws->ps_rows);
	{
		int kmax = sz->max_cols > (int)d ? sz->max_cols : (int)d;
		size_t bytes;
		kmax = kmax > ATTN_TILE ? kmax : ATTN_TILE;
		ws->gs_stride = (gemm_scratch_bytes(kmax) + 63) / 64 * 64 / sizeof(float);
		bytes = np * ws->gs_stride * sizeof(float);
		ws->gs = aligned_alloc(64, bytes);
	}
	if (!ws->gs || !ws->wbuf || !ws->kt || !ws->vt || !ws->s || !ws->mx || !ws->sm ||
	    !ws->act.q || !ws->act.d || !ws->act.s || !ws->pk || !ws->pv || !ws->ps ||
	    !ws->po || !ws->pm || !ws->pl) {
		cpu_ws_free(ws);
		return SEKV_ENOMEM;
	}
	*out = ws;
	return 0;
}

/* ---- matmul --------------------------------------------------------- */

struct mm_job {
	const struct backend_weight *w;
	int r0;
	const float *x;
	float *y;
	float *wbuf;
	const struct quant_act *act;
	int n;        /* batch rows of x and y */
	int ldy;
	float *gs;    /* [n_threads][gs_stride] gemm packing scratch */
	size_t gs_stride;
};

/* Batch: this thread's slice of weight rows [i0, i1), dequantised into
 * its own part of wbuf (F32 weights are used in place), times the whole
 * batch with a single-threaded sgemm into columns [i0, i1) of y. The rows
 * are still in cache when sgemm reads them. */
static void mm_gemm_rows(void *ctx, int i0, int i1, int tid)
{
	struct mm_job *j = ctx;
	const uint8_t *base = (const uint8_t *)j->w->data;
	size_t cols = (size_t)j->w->cols;
	const float *wf;

	if (j->w->type == QT_F32) {
		wf = (const float *)(base + (size_t)(j->r0 + i0) * j->w->row_bytes);
	} else {
		for (int r = i0; r < i1; r++)
			quant_dequant_row(j->w->type, base + (size_t)(j->r0 + r) * j->w->row_bytes,
					  j->wbuf + (size_t)r * cols, cols);
		wf = j->wbuf + (size_t)i0 * cols;
	}
	gemm_nt(j->n, i1 - i0, (int)cols, 1.0f, j->x, (int)cols, wf, (int)cols, j->y + i0,
		j->ldy, 0, j->gs + (size_t)tid * j->gs_stride);
}

static void mm_dot_rows(void *ctx, int i0, int i1, int tid)
{
	struct mm_job *j = ctx;
	const uint8_t *base = (const uint8_t *)j->w->data;
	size_t cols = (size_t)j->w->cols;

	(void)tid;
	for (int r = i0; r < i1; r++)
		j->y[r] = quant_dot_row(j->w->type, base + (size_t)(j->r0 + r) * j->w->row_bytes,
					j->x, cols);
}

static void mm_act_rows(void *ctx, int i0, int i1, int tid)
{
	struct mm_job *j = ctx;
	const uint8_t *base = (const uint8_t *)j->w->data;

	(void)tid;
	quant_act_matvec(j->w->type, base + (size_t)(j->r0 + i0) * j->w->row_bytes,
			 j->w->row_bytes, i1 - i0, j->act, j->y + i0);
}

static void cpu_matmul(struct backend *b, struct backend_ws *ws,
		       const struct backend_weight *w, int r0, int rows,
		       const float *x, int n, float *y, int ldy)
{
	struct cpu *c = b->impl;
	struct mm_job j = { w, r0, x, y, ws ? ws->wbuf : NULL, NULL, n, ldy,
			    ws ? ws->gs : NULL, ws ? ws->gs_stride : 0 };

	if (n == 1) {
		if (b->act_q8 && ws && w->cols <= ws->sz.max_cols && quant_act_supported(w->type, (size_t)w->cols)) {
			quant_act_quantize(x, (size_t)w->cols, &ws->act);
			j.act = &ws->act;
			parallel_for(c, rows, 64, mm_act_rows, &j);
		} else {
			parallel_for(c, rows, 64, mm_dot_rows, &j);
		}
		return;
	}
	parallel_for(c, rows, 16, mm_gemm_rows, &j);
}

static void cpu_get_rows(struct backend *b, const struct backend_weight *w,
			 const int32_t *ids, int n, float scale, float *y)
{
	size_t cols = (size_t)w->cols;

	(void)b;
	for (int i = 0; i < n; i++) {
		float *yi = y + (size_t)i * cols;
		quant_dequant_row(w->type, (const uint8_t *)w->data + (size_t)ids[i] * w->row_bytes,
				  yi, cols);
		for (size_t e = 0; e < cols; e++)
			yi[e] *= scale;
	}
}

/* ---- element-wise --------------------------------------------------- */

static void cpu_rmsnorm(struct backend *b, const float *x, const float *w,
			int n_rows, int dim, float eps, float *y)
{
	(void)b;
	for (int r = 0; r < n_rows; r++) {
		const float *xr = x + (size_t)r * dim;
		float *yr = y + (size_t)r * dim;
		double ss = 0.0;
		float inv;
		for (int e = 0; e < dim; e++)
			ss += (double)xr[e] * xr[e];
		inv = (float)(1.0 / sqrt(ss / dim + eps));
		for (int e = 0; e < dim; e++)
			yr[e] = xr[e] * inv * w[e];
	}
}

static void cpu_rope(struct backend *b, float *x, int n, int n_head, int d_head,
		     int n_rot, const float *cs, const float *sn)
{
	int half = n_rot / 2;

	(void)b;
	for (int i = 0; i < n; i++) {
		const float *ci = cs + (size_t)i * half, *si = sn + (size_t)i * half;
		for (int h = 0; h < n_head; h++) {
			float *xh = x + ((size_t)i * n_head + h) * d_head;
			for (int j = 0; j < half; j++) {
				float x0 = xh[j], x1 = xh[j + half];
				xh[j] = x0 * ci[j] - x1 * si[j];
				xh[j + half] = x0 * si[j] + x1 * ci[j];
			}
		}
	}
}

/* gelu_tanh(x) = 0.5 x (1 + tanh(z)), z = sqrt(2/pi) (x + 0.044715 x^3),
 * written as x / (1 + exp(-2z)) (the same function, stable at both ends). */
static inline float gelu_tanh(float x)
{
	const float k0 = 0.7978845608028654f; /* sqrt(2/pi) */
	float z = k0 * (x + 0.044715f * x * x * x);

	return x / (1.0f + exp_fast(-2.0f * z));
}

static void cpu_gelu_mul(struct backend *b, float *restrict g, const float *restrict u, size_t n)
{
	size_t i = 0;

	(void)b;
	for (; i + LANES <= n; i += LANES)
		for (int k = 0; k < LANES; k++)
			g[i + k] = gelu_tanh(g[i + k]) * u[i + k];
	for (; i < n; i++)
		g[i] = gelu_tanh(g[i]) * u[i];
}

static void cpu_add(struct backend *b, float *y, const float *x, size_t n)
{
	(void)b;
	for (size_t i = 0; i < n; i++)
		y[i] += x[i];
}

static void cpu_kv_store(struct backend *b, uint16_t *kc, uint16_t *vc, int cap,
			 int width, const float *k, const float *v, int pos0, int n)
{
	(void)b;
	for (int i = 0; i < n; i++) {
		size_t row = (size_t)((pos0 + i) % cap) * width;
		quant_f32_to_f16_row(k + (size_t)i * width, kc + row, width);
		quant_f32_to_f16_row(v + (size_t)i * width, vc + row, width);
	}
}

/* ---- attention ------------------------------------------------------ */

/* fp16 -> fp32 of cached rows. Half to single is exact, so the F16C
 * instruction gives the same bits as quant_f16_to_f32_row, only faster:
 * attention converts every visible row at every step. */
static void rows_f16_to_f32(const uint16_t *x, float *y, size_t n)
{
	size_t i = 0;

#if defined(__AVX512F__)
	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i))));
#elif defined(__F16C__)
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
#endif
	quant_f16_to_f32_row(x + i, y + i, n - i);
}

/* sum_e x[e] y[e] in 2 x LANES partial sums (vectorised without
 * -ffast-math; two independent chains so FMA latency does not bound it) */
static float dot_lanes(const float *restrict x, const float *restrict y, int n)
{
	float acc[LANES] = { 0 }, acc2[LANES] = { 0 }, s = 0.0f;
	int e = 0;

	for (; e + 2 * LANES <= n; e += 2 * LANES)
		for (int k = 0; k < LANES; k++) {
			acc[k] += x[e + k] * y[e + k];
			acc2[k] += x[e + LANES + k] * y[e + LANES + k];
		}
	for (; e + LANES <= n; e += LANES)
		for (int k = 0; k < LANES; k++)
			acc[k] += x[e + k] * y[e + k];
	for (int k = 0; k < LANES; k++)
		s += acc[k] + acc2[k];
	for (; e < n; e++)
		s += x[e] * y[e];
	return s;
}

/* y[e] += a x[e] */
static void axpy_lanes(float *restrict y, float a, const float *restrict x, int n)
{
	int e = 0;

	for (; e + LANES <= n; e += LANES)
		for (int k = 0; k < LANES; k++)
			y[e + k] += a * x[e + k];
	for (; e < n; e++)
		y[e] += a * x[e];
}

/* Softmax step for one tile and one query head over score rows [0, nr)
 * (query i = i_a + r): masks keys outside [lo_i, p_i], updates the running
 * max/sum (mx[i - i_base], sm[i - i_base]) and rescales the output row by
 * the change of max. */
static void attn_softmax_tile(const struct backend_attn *a, float *s, int nr,
			      int T, int i_a, int t0, int h, float *mx, float *sm, int i_base)
{
	int ld = a->n_head * a->d_head;

	for (int r = 0; r < nr; r++) {
		int i = i_a + r, p = a->pos0 + i;
		int lo = a->window > 0 ? p - a->window + 1 : 0;
		int j0 = lo > t0 ? lo - t0 : 0;
		int j1 = p - t0 + 1 < T ? p - t0 + 1 : T; /* exclusive */
		float *sr = s + (size_t)r * T, m_old = mx[i - i_base], m_new = m_old, f;
		double sum = 0.0;

		for (int j = j0; j < j1; j++)
			if (sr[j] > m_new)
				m_new = sr[j];
		for (int j = 0; j < j0; j++)
			sr[j] = 0.0f;
		for (int j = j1; j < T; j++)
			sr[j] = 0.0f;
		for (int j = j0; j < j1; j++) {
			sr[j] = exp_fast(sr[j] - m_new);
			sum += sr[j];
		}
		f = m_old == -INFINITY ? 0.0f : exp_fast(m_old - m_new);
		if (f != 1.0f) {
			float *o = a->out + (size_t)i * ld + (size_t)h * a->d_head;
			for (int e = 0; e < a->d_head; e++)
				o[e] *= f;
		}
		sm[i - i_base] = sm[i - i_base] * f + (float)sum;
		mx[i - i_base] = m_new;
	}
}

/* ---- decode attention: one query, key ranges in parallel ------------- */

/* Scores of one fp16 key row against the G query heads of its group:
 * s[h * lds] = scale * q[h] . k for h < G (q rows d apart). The key is
 * converted once and feeds G accumulators. */
static inline __attribute__((always_inline)) void
attn1_scores(const float *q, int G, int d, const uint16_t *k, float scale,
	     float *s, size_t lds, float *kbuf)
{
#if defined(__AVX512F__)
	if (d % 16 == 0 && G <= 8) {
		__m512 acc[8];
		for (int h = 0; h < G; h++)
			acc[h] = _mm512_setzero_ps();
		for (int e = 0; e < d; e += 16) {
			__m512 kv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(k + e)));
			for (int h = 0; h < G; h++)
				acc[h] = _mm512_fmadd_ps(_mm512_loadu_ps(q + (size_t)h * d + e), kv, acc[h]);
		}
		for (int h = 0; h < G; h++)
			s[(size_t)h * lds] = scale * _mm512_reduce_add_ps(acc[h]);
		return;
	}
#endif
	rows_f16_to_f32(k, kbuf, (size_t)d);
	for (int h = 0; h < G; h++)
		s[(size_t)h * lds] = scale * dot_lanes(q + (size_t)h * d, kbuf, d);
}

/* o[h] += p[h * ldp] * v for h < G (o rows d apart): the fp16 value row is
 * converted once for the G heads. */
static inline __attribute__((always_inline)) void
attn1_values(float *o, int G, int d, const uint16_t *v, const float *p, size_t ldp,
	     float *vbuf)
{
#if defined(__AVX512F__)
	if (d % 16 == 0 && G <= 8) {
		__m512 pv[8];
		for (int h = 0; h < G; h++)
			pv[h] = _mm512_set1_ps(p[(size_t)h * ldp]);
		for (int e = 0; e < d; e += 16) {
			__m512 vv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(v + e)));
			for (int h = 0; h < G; h++) {
				float *oh = o + (size_t)h * d + e;
				_mm512_storeu_ps(oh, _mm512_fmadd_ps(pv[h], vv, _mm512_loadu_ps(oh)));
			}
		}
		return;
	}
#endif
	rows_f16_to_f32(v, vbuf, (size_t)d);
	for (int h = 0; h < G; h++)
		axpy_lanes(o + (size_t)h * d, p[(size_t)h * ldp], vbuf, d);
}

struct attn1_job {
	const struct backend_attn *a;
	struct backend_ws *ws;
	int lo;        /* first visible position */
	int n_key;     /* visible positions: lo .. lo + n_key - 1 */
	int n_part;    /* parts the keys are cut into (one per chunk of work) */
};

/* Part `part` of the keys: for every KV head, each key and value row is
 * turned to fp32 once and serves all query heads of the group (scores of
 * a key for every head, then every head's output row gets that key's
 * value), with a running max and sum per head per tile of ATTN_TILE keys
 * (flash-decoding: the parts merge later). */
static void attn1_part(struct attn1_job *j, int part)
{
	const struct backend_attn *a = j->a;
	struct backend_ws *ws = j->ws;
	int d = a->d_head, kvw = a->n_head_kv * d, group = a->n_head / a->n_head_kv;
	int k0, k1;
	float *kt = ws->pk + (size_t)part * ATTN_TILE * d; /* one row used */
	float *ps = ws->ps + (size_t)part * ws->ps_rows * ATTN_TILE;
	float *po = ws->po + (size_t)part * a->n_head * d;
	float *pm = ws->pm + (size_t)part * ws->ps_rows, *pl = ws->pl + (size_t)part * ws->ps_rows;

	chunk(j->n_key, j->n_part, part, &k0, &k1);
	for (int h = 0; h < a->n_head; h++) {
		pm[h] = -INFINITY;
		pl[h] = 0.0f;
	}
	memset(po, 0, sizeof(float) * (size_t)a->n_head * d);
	for (int g = 0; g < a->n_head_kv; g++) {
		for (int t0 = k0; t0 < k1; t0 += ATTN_TILE) {
			int T = k1 - t0 < ATTN_TILE ? k1 - t0 : ATTN_TILE;
			/* each key row is converted once into an L1-sized row
			 * and scored for every head of the group */
			for (int t = 0; t < T; t++) {
				size_t row = (size_t)((j->lo + t0 + t) % a->cap) * kvw + (size_t)g * d;
				const float *qg = a->q + (size_t)g * group * d;
				float *sg = ps + (size_t)g * group * ATTN_TILE + t;
				/* constant group sizes keep the accumulators in registers */
				if (group == 4)
					attn1_scores(qg, 4, d, a->k + row, a->scale, sg, ATTN_TILE, kt);
				else if (group == 2)
					attn1_scores(qg, 2, d, a->k + row, a->scale, sg, ATTN_TILE, kt);
				else
					attn1_scores(qg, group, d, a->k + row, a->scale, sg, ATTN_TILE, kt);
			}
			for (int hh = 0; hh < group; hh++) {
				int h = g * group + hh;
				float *s = ps + (size_t)h * ATTN_TILE, m = pm[h], f;
				double sum = 0.0;
				for (int t = 0; t < T; t++)
					m = s[t] > m ? s[t] : m;
				f = pm[h] == -INFINITY ? 0.0f : exp_fast(pm[h] - m);
				for (int t = 0; t < T; t++) {
					s[t] = exp_fast(s[t] - m);
					sum += s[t];
				}
				if (f != 1.0f)
					for (int e = 0; e < d; e++)
						po[(size_t)h * d + e] *= f;
				pl[h] = pl[h] * f + (float)sum;
				pm[h] = m;
			}
			/* and each value row once for every head */
			for (int t = 0; t < T; t++) {
				size_t row = (size_t)((j->lo + t0 + t) % a->cap) * kvw + (size_t)g * d;
				float *og = po + (size_t)g * group * d;
				const float *pg = ps + (size_t)g * group * ATTN_TILE + t;
				if (group == 4)
					attn1_values(og, 4, d, a->v + row, pg, ATTN_TILE, kt);
				else if (group == 2)
					attn1_values(og, 2, d, a->v + row, pg, ATTN_TILE, kt);
				else
					attn1_values(og, group, d, a->v + row, pg, ATTN_TILE, kt);
			}
		}
	}
}

static void attn1_rows(void *ctx, int i0, int i1, int tid)
{
	(void)tid;

	for (int p = i0; p < i1; p++)
		attn1_part(ctx, p);
}

/* out[h] = sum_p exp(m_p - M) o_p / sum_p exp(m_p - M) l_p over the parts. */
static void attn1_merge(const struct attn1_job *j)
{
	const struct backend_attn *a = j->a;
	const struct backend_ws *ws = j->ws;
	int d = a->d_head;

	for (int h = 0; h < a->n_head; h++) {
		float M = -INFINITY, L = 0.0f, *out = a->out + (size_t)h * d;
		for (int p = 0; p < j->n_part; p++) {
			float m = ws->pm[(size_t)p * ws->ps_rows + h];
			M = m > M ? m : M;
		}
		memset(out, 0, sizeof(float) * (size_t)d);
		for (int p = 0; p < j->n_part; p++) {
			float m = ws->pm[(size_t)p * ws->ps_rows + h], f;
			if (m == -INFINITY)
				continue;
			f = exp_fast(m - M);
			L += f * ws->pl[(size_t)p * ws->ps_rows + h];
			axpy_lanes(out, f, ws->po + ((size_t)p * a->n_head + h) * d, d);
		}
		if (L > 0.0f)
			for (int e = 0; e < d; e++)
				out[e] /= L;
	}
}

/* One query at position pos0: cuts the visible keys into one part per
 * thread (parts of at least ATTN_TILE keys) and merges them. */
static void attention_one(struct backend *b, struct backend_ws *ws,
			  const struct backend_attn *a)
{
	int lo = a->window > 0 ? a->pos0 - a->window + 1 : 0;
	struct attn1_job j;

	if (lo < 0)
		lo = 0;
	j.a = a;
	j.ws = ws;
	j.lo = lo;
	j.n_key = a->pos0 - lo + 1;
	j.n_part = (j.n_key + ATTN_TILE - 1) / ATTN_TILE;
	if (j.n_part > ws->n_part)
		j.n_part = ws->n_part;
	parallel_for(b->impl, j.n_part, 1, attn1_rows, &j);
	attn1_merge(&j);
}

/* ---- batch attention: (head, block of queries) items in parallel ------ */

struct attnb_job {
	const struct backend_attn *a;
	struct backend_ws *ws;
	int n_qb;      /* query blocks of ATTN_QBLK */
};

/* Queries [i0, i1) of head h, on thread tid's scratch: key tiles from the
 * first key any of them sees to the last, each turned to fp32, scored by
 * sgemm, folded by the online softmax and accumulated by sgemm. */
static void attnb_block(const struct attnb_job *j, int h, int i0, int i1, int tid)
{
	const struct backend_attn *a = j->a;
	struct backend_ws *ws = j->ws;
	int d = a->d_head, ld = a->n_head * d, kvw = a->n_head_kv * d;
	int g = h / (a->n_head / a->n_head_kv);
	int p_last = a->pos0 + i1 - 1;
	int lo = a->window > 0 ? a->pos0 + i0 - a->window + 1 : 0;
	float *kt = ws->pk + (size_t)tid * ATTN_TILE * d;
	float *vt = ws->pv + (size_t)tid * ATTN_TILE * d;
	float *s = ws->ps + (size_t)tid * ws->ps_rows * ATTN_TILE;
	float *mx = ws->pm + (size_t)tid * ws->ps_rows, *sm = ws->pl + (size_t)tid * ws->ps_rows;
	float *gs = ws->gs + (size_t)tid * ws->gs_stride;

	if (lo < 0)
		lo = 0;
	for (int i = i0; i < i1; i++) {
		memset(a->out + (size_t)i * ld + (size_t)h * d, 0, sizeof(float) * (size_t)d);
		mx[i - i0] = -INFINITY;
		sm[i - i0] = 0.0f;
	}
	for (int t0 = lo; t0 <= p_last; t0 += ATTN_TILE) {
		int t1 = t0 + ATTN_TILE <= p_last + 1 ? t0 + ATTN_TILE : p_last + 1;
		int T = t1 - t0;
		int i_a = t0 - a->pos0 > i0 ? t0 - a->pos0 : i0;
		int i_b = a->window > 0 ? t1 + a->window - 1 - a->pos0 : i1;
		int nr;

		if (i_b > i1)
			i_b = i1;
		nr = i_b - i_a;
		if (nr <= 0)
			continue;
		for (int t = 0; t < T; t++) {
			size_t row = (size_t)((t0 + t) % a->cap) * kvw + (size_t)g * d;
			rows_f16_to_f32(a->k + row, kt + (size_t)t * d, (size_t)d);
			rows_f16_to_f32(a->v + row, vt + (size_t)t * d, (size_t)d);
		}
		gemm_nt(nr, T, d, a->scale, a->q + (size_t)i_a * ld + (size_t)h * d, ld, kt, d,
			s, T, 0, gs);
		attn_softmax_tile(a, s, nr, T, i_a, t0, h, mx, sm, i0);
		gemm_nn(nr, d, T, 1.0f, s, T, vt, d, a->out + (size_t)i_a * ld + (size_t)h * d,
			ld, 1, gs);
	}
	for (int i = i0; i < i1; i++) {
		float *o = a->out + (size_t)i * ld + (size_t)h * d;
		float inv = sm[i - i0] > 0.0f ? 1.0f / sm[i - i0] : 0.0f;
		for (int e = 0; e < d; e++)
			o[e] *= inv;
	}
}

/* Items are head-major (item = h * n_qb + block), so with as many heads
 * per thread each thread gets every block of its heads (causal blocks
 * grow in cost along the sequence). */
static void attnb_rows(void *ctx, int i0, int i1, int tid)
{
	const struct attnb_job *j = ctx;

	for (int it = i0; it < i1; it++) {
		int h = it / j->n_qb, qb = it % j->n_qb;
		int q1 = (qb + 1) * ATTN_QBLK < j->a->n ? (qb + 1) * ATTN_QBLK : j->a->n;
		attnb_block(j, h, qb * ATTN_QBLK, q1, tid);
	}
}

static int cpu_attention(struct backend *b, struct backend_ws *ws,
			 const struct backend_attn *a)
{
	int group = a->n_head_kv > 0 ? a->n_head / a->n_head_kv : 0;

	if (a->n < 1 || a->n > ws->sz.n_batch || a->n_head > ws->sz.n_head ||
	    a->d_head > ws->sz.d_head || group < 1 || a->n_head % a->n_head_kv)
		return SEKV_EINVAL;
	if (a->n == 1) {
		attention_one(b, ws, a);
		return 0;
	}
	{
		struct attnb_job j = { a, ws, (a->n + ATTN_QBLK - 1) / ATTN_QBLK };
		parallel_for(b->impl, a->n_head * j.n_qb, 1, attnb_rows, &j);
	}
	return 0;
}

/* ---- streaming log-sum-exp ------------------------------------------ */

struct lse_job {
	const float *s;
	int cols, lds;
	float *mx;
	double *sm;
};

static float row_max(const float *r, int n)
{
	float lane[LANES], mt;
	int c = 0;

	for (int k = 0; k < LANES; k++)
		lane[k] = -INFINITY;
	for (; c + LANES <= n; c += LANES)
		for (int k = 0; k < LANES; k++)
			lane[k] = r[c + k] > lane[k] ? r[c + k] : lane[k];
	mt = -INFINITY;
	for (int k = 0; k < LANES; k++)
		mt = lane[k] > mt ? lane[k] : mt;
	for (; c < n; c++)
		mt = r[c] > mt ? r[c] : mt;
	return mt;
}

/* sum_c exp(r[c] - m) */
static double row_sum_exp(const float *r, int n, float m)
{
	float lane[LANES] = { 0 };
	double sum = 0.0;
	int c = 0;

	for (; c + LANES <= n; c += LANES)
		for (int k = 0; k < LANES; k++)
			lane[k] += exp_fast(r[c + k] - m);
	for (int k = 0; k < LANES; k++)
		sum += lane[k];
	for (; c < n; c++)
		sum += exp_fast(r[c] - m);
	return sum;
}

static void lse_rows(void *ctx, int i0, int i1, int tid)
{
	struct lse_job *j = ctx;

	(void)tid;
	for (int i = i0; i < i1; i++) {
		const float *r = j->s + (size_t)i * j->lds;
		float mt = row_max(r, j->cols);
		if (mt == -INFINITY)
			continue;
		if (mt > j->mx[i]) {
			if (j->mx[i] != -INFINITY)
				j->sm[i] *= exp((double)j->mx[i] - mt);
			j->mx[i] = mt;
		}
		j->sm[i] += row_sum_exp(r, j->cols, j->mx[i]);
	}
}

static void cpu_lse_fold(struct backend *b, const float *s, int n, int cols,
			 int lds, float *mx, double *sm)
{
	struct lse_job j = { s, cols, lds, mx, sm };

	parallel_for(b->impl, n, 4, lse_rows, &j);
}

/* ---- open / close --------------------------------------------------- */

static void cpu_close(struct backend *b)
{
	struct cpu *c;

	if (!b)
		return;
	c = b->impl;
	if (c) {
		pthread_mutex_lock(&c->mu);
		atomic_store(&c->quit, 1);
		pthread_cond_broadcast(&c->cv_go);
		pthread_mutex_unlock(&c->mu);
		for (int i = 0; i < c->n_started; i++)
			pthread_join(c->th[i], NULL);
		pthread_mutex_destroy(&c->mu);
		pthread_cond_destroy(&c->cv_go);
		free(c->th);
		free(c);
	}
	free(b);
}

static const struct backend_ops cpu_ops = {
	.name = "cpu",
	.close = cpu_close,
	.ws_new = cpu_ws_new,
	.ws_free = cpu_ws_free,
	.matmul = cpu_matmul,
	.get_rows = cpu_get_rows,
	.rmsnorm = cpu_rmsnorm,
	.rope = cpu_rope,
	.gelu_mul = cpu_gelu_mul,
	.add = cpu_add,
	.kv_store = cpu_kv_store,
	.attention = cpu_attention,
	.lse_fold = cpu_lse_fold,
};

int backend_cpu_open(struct backend **out, int n_threads, char *err, size_t errlen)
{
	struct backend *b = calloc(1, sizeof *b);
	struct cpu *c = calloc(1, sizeof *c);

	*out = NULL;
	if (!b || !c) {
		free(b);
		free(c);
		return sekv_errf(err, errlen, SEKV_ENOMEM, "backend: cpu: out of memory");
	}
	if (n_threads <= 0) {
		long nc = sysconf(_SC_NPROCESSORS_ONLN);
		n_threads = nc > 0 ? (int)nc : 1;
	}
	if (n_threads > 256)
		n_threads = 256;
	b->ops = &cpu_ops;
	b->impl = c;
	b->n_threads = n_threads;
	b->act_q8 = 1;
	c->n_threads = n_threads;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv_go, NULL);
	c->th = calloc((size_t)n_threads, sizeof *c->th);
	if (!c->th) {
		cpu_close(b);
		return sekv_errf(err, errlen, SEKV_ENOMEM, "backend: cpu: out of memory");
	}
	for (int i = 1; i < n_threads; i++) {
		struct worker_arg *wa = malloc(sizeof *wa);
		if (wa) {
			wa->c = c;
			wa->id = i;
		}
		if (!wa || pthread_create(&c->th[c->n_started], NULL, worker_main, wa) != 0) {
			free(wa);
			cpu_close(b);
			return sekv_errf(err, errlen, SEKV_EIO, "backend: cpu: cannot start thread %d", i);
		}
		c->n_started++;
	}
	/* BLAS runs inside our workers, one call per thread's slice: its own
	 * threads would compete with ours for the same cores */
	openblas_set_num_threads(1);
	*out = b;
	return 0;
}

void backend_close(struct backend *b)
{
	if (b)
		b->ops->close(b);
}
