/* backend_cpu.c - the reference backend: the CPU. This file holds the
 * operation table, open/close, the workspace, buffers (host memory),
 * matmul, element-wise operations and the streaming log-sum-exp.
 * Batches (act_q8 set, a type quant_gemm supports): the batch is packed
 * as int8 blocks once and each thread runs quant_gemm over its panels of
 * weight rows; otherwise each thread dequantises its slice of weight rows
 * and multiplies it by the batch with gemm.c. One token: the input is
 * quantised to int8 blocks and each thread runs quant_act dot products
 * over its rows. BLAS stays single-threaded (gemm.c's fallback).
 * Invariant: nothing here allocates after backend_cpu_open / ws_new
 * (buffers aside). The pool is cpu_pool.c, attention cpu_attention.c,
 * SeKV operations cpu_sekv.c and cpu_lapack.c; quant formats quant*.c.
 */
#include "engine/cpu/backend_cpu_int.h"

#include "engine/base/err.h"
#include "engine/cpu/gemm.h"

#include <cblas.h>
#include <stdlib.h>
#include <unistd.h>

/* ---- workspace ------------------------------------------------------ */


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
	free(ws->gact.q);
	free(ws->gact.d);
	free(ws->gact.s);
	free(ws->gq);
	free(ws->pk);
	free(ws->pv);
	free(ws->ps);
	free(ws->po);
	free(ws->pm);
	free(ws->pl);
	free(ws->gs);
	free(ws->mix_logit);
	free(ws->mix_part);
	free(ws->mix_pm);
	free(ws->mix_pl);
	free(ws->mix_po);
	free(ws->mix_row);
	free(ws->rc_vf);
	free(ws->rc_us);
	free(ws->rc_row);
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
	{
		size_t npad = (size_t)quant_gemm_pad(sz->n_batch), mc = (size_t)sz->max_cols;
		ws->gact.q = malloc(npad * mc + 1);
		ws->gact.d = malloc(sizeof(float) * (npad * mc / QUANT_ACT_BLOCK + 1));
		ws->gact.s = malloc(sizeof(float) * (npad * mc / QUANT_ACT_BLOCK + 1));
		ws->gq_stride = (quant_gemm_scratch_bytes(mc) + 63) / 64 * 64;
		ws->gq = aligned_alloc(64, np * ws->gq_stride + 64);
	}
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
	if (sz->mix_rows > 0) {
		ws->mix_logit = malloc(sizeof(float) * nh * (size_t)sz->mix_rows);
		ws->mix_parts = (int)nh * (sz->mix_rows / MIX_PART + 1);
		ws->mix_part = malloc(sizeof(struct mix_part) * (size_t)ws->mix_parts);
		ws->mix_pm = malloc(sizeof(float) * (size_t)ws->mix_parts * nh);
		ws->mix_pl = malloc(sizeof(float) * (size_t)ws->mix_parts * nh);
		ws->mix_po = malloc(sizeof(float) * (size_t)ws->mix_parts * nh * d);
		ws->mix_row = malloc(sizeof(float) * np * d);
		ws->rc_vf = malloc(sizeof(float) * np * cpu_recon_rank(ws) * d);
		ws->rc_us = malloc(sizeof(float) * np * (cpu_recon_rank(ws) + 1));
		ws->rc_row = malloc(sizeof(float) * np * d);
		if (!ws->mix_logit || !ws->mix_part || !ws->mix_pm || !ws->mix_pl || !ws->mix_po ||
		    !ws->mix_row || !ws->rc_vf || !ws->rc_us || !ws->rc_row) {
			cpu_ws_free(ws);
			return SEKV_ENOMEM;
		}
	}
	if (!ws->gs || !ws->wbuf || !ws->kt || !ws->vt || !ws->s || !ws->mx || !ws->sm ||
	    !ws->act.q || !ws->act.d || !ws->act.s || !ws->gact.q || !ws->gact.d ||
	    !ws->gact.s || !ws->gq || !ws->pk || !ws->pv || !ws->ps ||
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
	int rows;     /* weight rows of the call */
	struct quant_gemm_act *gact; /* batch, int8: the packed x */
	uint8_t *gq;  /* [n_threads][gq_stride] quant_gemm scratch */
	size_t gq_stride;
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

/* Batch, int8: this thread's token groups of x quantised into ws->gact. */
static void mm_pack_groups(void *ctx, int g0, int g1, int tid)
{
	struct mm_job *j = ctx;

	(void)tid;
	quant_gemm_pack(j->x, (size_t)j->w->cols, g0, g1, j->gact);
}

/* Batch, int8: this thread's panels of weight rows [16 p0, 16 p1) times
 * every packed token, through its own part of the scratch. */
static void mm_qgemm_panels(void *ctx, int p0, int p1, int tid)
{
	struct mm_job *j = ctx;
	int r0 = p0 * QUANT_GEMM_PANEL, r1 = p1 * QUANT_GEMM_PANEL;

	r1 = r1 < j->rows ? r1 : j->rows;
	quant_gemm(j->w->type, (const uint8_t *)j->w->data + (size_t)(j->r0 + r0) * j->w->row_bytes,
		   j->w->row_bytes, r1 - r0, j->gact, j->y + r0, (size_t)j->ldy,
		   j->gq + (size_t)tid * j->gq_stride);
}

static void cpu_matmul(struct backend *b, struct backend_ws *ws,
		       const struct backend_weight *w, int r0, int rows,
		       const float *x, int n, float *y, int ldy)
{
	struct cpu *c = b->impl;
	struct mm_job j = { w, r0, x, y, ws ? ws->wbuf : NULL, NULL, n, ldy,
			    ws ? ws->gs : NULL, ws ? ws->gs_stride : 0, rows,
			    ws ? &ws->gact : NULL, ws ? ws->gq : NULL, ws ? ws->gq_stride : 0 };

	if (n == 1) {
		if (b->act_q8 && ws && w->cols <= ws->sz.max_cols && quant_act_supported(w->type, (size_t)w->cols)) {
			quant_act_quantize(x, (size_t)w->cols, &ws->act);
			j.act = &ws->act;
			cpu_parallel_for(c, rows, 64, mm_act_rows, &j);
		} else {
			cpu_parallel_for(c, rows, 64, mm_dot_rows, &j);
		}
		return;
	}
	if (b->act_q8 && ws && w->cols <= ws->sz.max_cols && n <= ws->sz.n_batch &&
	    quant_gemm_supported(w->type, (size_t)w->cols)) {
		ws->gact.n = n;
		ws->gact.cols = (size_t)w->cols;
		cpu_parallel_for(c, quant_gemm_pad(n) / QUANT_GEMM_TOK, 1, mm_pack_groups, &j);
		cpu_parallel_for(c, (rows + QUANT_GEMM_PANEL - 1) / QUANT_GEMM_PANEL, 1,
				 mm_qgemm_panels, &j);
		return;
	}
	cpu_parallel_for(c, rows, 16, mm_gemm_rows, &j);
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
		     int n_rot, int neox, const float *cs, const float *sn)
{
	int half = n_rot / 2;

	(void)b;
	for (int i = 0; i < n; i++) {
		const float *ci = cs + (size_t)i * half, *si = sn + (size_t)i * half;
		for (int h = 0; h < n_head; h++)
			cpu_rope_row(x + ((size_t)i * n_head + h) * d_head, half, neox, ci, si);
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

/* silu(x) = x / (1 + exp(-x)), with the vectorisable exp_fast. */
static inline float silu(float x)
{
	return x / (1.0f + exp_fast(-x));
}

static void cpu_silu_mul(struct backend *b, float *restrict g, const float *restrict u, size_t n)
{
	size_t i = 0;

	(void)b;
	for (; i + LANES <= n; i += LANES)
		for (int k = 0; k < LANES; k++)
			g[i + k] = silu(g[i + k]) * u[i + k];
	for (; i < n; i++)
		g[i] = silu(g[i]) * u[i];
}

static void cpu_add(struct backend *b, float *y, const float *x, size_t n)
{
	(void)b;
	for (size_t i = 0; i < n; i++)
		y[i] += x[i];
}

static void cpu_add_bias(struct backend *b, float *y, const float *bias, int n_rows, int dim)
{
	(void)b;
	for (int r = 0; r < n_rows; r++)
		for (int j = 0; j < dim; j++)
			y[(size_t)r * dim + j] += bias[j];
}

static void cpu_kv_store(struct backend *b, struct backend_buf *kb, struct backend_buf *vb,
			 int cap, int width, const float *k, const float *v, int pos0, int n)
{
	uint16_t *kc = kb->host, *vc = vb->host;

	(void)b;
	for (int i = 0; i < n; i++) {
		size_t row = (size_t)((pos0 + i) % cap) * width;
		quant_f32_to_f16_row(k + (size_t)i * width, kc + row, width);
		quant_f32_to_f16_row(v + (size_t)i * width, vc + row, width);
	}
}

/* ---- buffers: host memory ------------------------------------------- */

static int cpu_buf_new(struct backend *b, size_t bytes, struct backend_buf **out)
{
	struct backend_buf *buf = calloc(1, sizeof *buf);

	(void)b;
	*out = NULL;
	if (!buf || !(buf->host = calloc(1, bytes ? bytes : 1))) {
		free(buf);
		return SEKV_ENOMEM;
	}
	buf->bytes = bytes;
	*out = buf;
	return 0;
}

static int cpu_buf_wrap(struct backend *b, const void *host, size_t bytes,
			struct backend_buf **out)
{
	struct backend_buf *buf = calloc(1, sizeof *buf);

	(void)b;
	*out = NULL;
	if (!buf)
		return SEKV_ENOMEM;
	buf->bytes = bytes;
	buf->host = (void *)host; /* read-only by contract (backend.h) */
	buf->borrowed = 1;
	*out = buf;
	return 0;
}

static void cpu_buf_free(struct backend *b, struct backend_buf *buf)
{
	(void)b;
	if (!buf)
		return;
	if (!buf->borrowed)
		free(buf->host);
	free(buf);
}

static int range_ok(const struct backend_buf *buf, size_t off, size_t bytes)
{
	return buf && off <= buf->bytes && bytes <= buf->bytes - off;
}

static int cpu_buf_write(struct backend *b, struct backend_buf *buf, size_t off,
			 const void *src, size_t bytes)
{
	(void)b;
	if (!range_ok(buf, off, bytes) || buf->borrowed)
		return SEKV_EINVAL;
	if (bytes)
		memcpy((char *)buf->host + off, src, bytes);
	return 0;
}

static int cpu_buf_read(struct backend *b, const struct backend_buf *buf, size_t off,
			void *dst, size_t bytes)
{
	(void)b;
	if (!range_ok(buf, off, bytes))
		return SEKV_EINVAL;
	if (bytes)
		memcpy(dst, (const char *)buf->host + off, bytes);
	return 0;
}

static int cpu_buf_copy(struct backend *b, struct backend_buf *dst, size_t dst_off,
			const struct backend_buf *src, size_t src_off, size_t bytes)
{
	(void)b;
	if (!range_ok(dst, dst_off, bytes) || !range_ok(src, src_off, bytes) || dst->borrowed)
		return SEKV_EINVAL;
	if (bytes)
		memmove((char *)dst->host + dst_off, (const char *)src->host + src_off, bytes);
	return 0;
}

/* ---- attention ------------------------------------------------------ *//* ---- streaming log-sum-exp ------------------------------------------ */

struct lse_job {
	const float *s;
	int cols, lds;
	float *mx;
	double *sm;
};

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
		float mt = cpu_max_lanes(r, j->cols);
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

	cpu_parallel_for(b->impl, n, 4, lse_rows, &j);
}

/* ---- open / close --------------------------------------------------- */

static void cpu_close(struct backend *b)
{
	struct cpu *c;

	if (!b)
		return;
	c = b->impl;
	if (c) {
		cpu_pool_stop(c);
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
	.silu_mul = cpu_silu_mul,
	.add = cpu_add,
	.add_bias = cpu_add_bias,
	.kv_store = cpu_kv_store,
	.attention = cpu_attention,
	.lse_fold = cpu_lse_fold,
	.buf_new = cpu_buf_new,
	.buf_wrap = cpu_buf_wrap,
	.buf_free = cpu_buf_free,
	.buf_write = cpu_buf_write,
	.buf_read = cpu_buf_read,
	.buf_copy = cpu_buf_copy,
	.attention_mix = cpu_attention_mix,
	.score_i8 = cpu_score_i8,
	.score_lowrank = cpu_score_lowrank,
	.reconstruct = cpu_reconstruct,
	.svd = cpu_svd,
	.pca = cpu_pca,
};

int backend_cpu_open(struct backend **out, int n_threads, char *err, size_t errlen)
{
	struct backend *b = calloc(1, sizeof *b);
	struct cpu *c = calloc(1, sizeof *c);
	int rc;

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
	if ((rc = cpu_pool_start(c, err, errlen))) {
		cpu_close(b);
		return rc;
	}
	/* BLAS runs inside our workers, one call per thread's slice: its own
	 * threads would compete with ours for the same cores */
	openblas_set_num_threads(1);
	*out = b;
	return 0;
}
