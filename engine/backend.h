/* backend.h - the coarse operations a forward pass is written over.
 *
 * A backend is a table of operations (ggml style); the model code calls
 * only these, so the same forward runs on every backend. The CPU backend
 * (backend_cpu.c: gemm.c on dequantised rows for batches, int8-activation
 * dot products for one token, one pthread pool) is the reference that any
 * other backend is tested against. Activations are fp32 (quantised to int8
 * inside one-token matmuls), KV rows fp16, weights stay in
 * their GGUF types. Scratch lives in a workspace (struct backend_ws) sized
 * once per model state, so no operation allocates.
 * Thread-safety: one backend runs one operation at a time (its thread pool
 * is shared); callers serialise (model.c holds a lock per model).
 */
#ifndef SEKV_BACKEND_H
#define SEKV_BACKEND_H

#include <stddef.h>
#include <stdint.h>

/* A weight matrix W [rows][cols] as GGUF stores it (ne[0] = cols is the
 * contiguous dimension). data is borrowed (the model's mapping). */
struct backend_weight {
	uint32_t type;        /* enum qtype (quant.h) */
	int rows;
	int cols;
	size_t row_bytes;     /* bytes of one stored row */
	const void *data;     /* [rows] rows of row_bytes */
};

/* Shapes a workspace must serve. */
struct backend_ws_size {
	int n_batch;          /* most tokens per call */
	int n_head;           /* query heads */
	int d_head;           /* head size d_h */
	size_t max_w_elems;   /* largest rows*cols multiplied by a batch at once */
	int max_cols;         /* widest weight (cols) a single token is multiplied
	                         by; wider ones take the fp32-activation path */
};

/* Attention of n queries at positions pos0..pos0+n-1 against fp16 rows
 * kept at row (p % cap): query i at position p sees keys
 * [max(0, p - window + 1), p] (window > 0) or [0, p] (window == 0), causal
 * and sliding window as in llama.cpp's is_masked_swa (masked when
 * p - p_key >= window). The rows of every visible position must be in the
 * cache. GQA: query head h uses KV head h / (n_head / n_head_kv).
 * out[i][h] = sum_j softmax_j(q[i][h] . k[j] * scale) v[j]. */
struct backend_attn {
	const float *q;       /* [n][n_head][d_head] after q-norm and RoPE, unscaled */
	float *out;           /* [n][n_head][d_head] */
	int n;
	int pos0;
	int n_head;
	int n_head_kv;
	int d_head;
	const uint16_t *k;    /* [cap][n_head_kv][d_head] fp16 */
	const uint16_t *v;    /* [cap][n_head_kv][d_head] fp16 */
	int cap;
	int window;           /* 0: full causal */
	float scale;          /* applied to q . k */
};

struct backend;
struct backend_ws;

struct backend_ops {
	const char *name;
	void (*close)(struct backend *b);
	/* Workspace for the shapes in sz; 0 or SEKV_ENOMEM. */
	int (*ws_new)(struct backend *b, const struct backend_ws_size *sz,
		      struct backend_ws **out);
	void (*ws_free)(struct backend_ws *ws);

	/* y[n][rows] = x[n][w->cols] . W[r0 .. r0+rows)^T. y has row stride
	 * ldy (>= rows). Batches (n > 1) need rows*cols <= max_w_elems and
	 * n <= n_batch of the workspace. One token (n == 1) works without a
	 * workspace; with one (and cols <= max_cols, act_q8 set) the CPU backend
	 * quantises x to int8 blocks first, as llama.cpp does (quant.h,
	 * struct quant_act), and uses integer dot products. */
	void (*matmul)(struct backend *b, struct backend_ws *ws,
		       const struct backend_weight *w, int r0, int rows,
		       const float *x, int n, float *y, int ldy);
	/* y[i][0..cols) = dequant(W[ids[i]]) * scale for i < n. */
	void (*get_rows)(struct backend *b, const struct backend_weight *w,
			 const int32_t *ids, int n, float scale, float *y);
	/* y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w over n_rows rows of dim
	 * (RMSNorm; y may equal x). */
	void (*rmsnorm)(struct backend *b, const float *x, const float *w,
			int n_rows, int dim, float eps, float *y);
	/* NEOX RoPE in place on x [n][n_head][d_head]: for j < n_rot/2 the
	 * pair (x[j], x[j + n_rot/2]) is rotated by the angle whose cosine and
	 * sine are cs[i][j], sn[i][j] ([n][n_rot/2], token i). */
	void (*rope)(struct backend *b, float *x, int n, int n_head, int d_head,
		     int n_rot, const float *cs, const float *sn);
	/* g[i] = gelu_tanh(g[i]) * u[i], i < n. */
	void (*gelu_mul)(struct backend *b, float *g, const float *u, size_t n);
	/* y[i] += x[i], i < n. */
	void (*add)(struct backend *b, float *y, const float *x, size_t n);
	/* Stores n rows (k, v [n][width] fp32) as fp16 at rows (pos0+i) % cap. */
	void (*kv_store)(struct backend *b, uint16_t *kc, uint16_t *vc, int cap,
			 int width, const float *k, const float *v, int pos0, int n);
	/* See struct backend_attn. 0 or a negative code. */
	int (*attention)(struct backend *b, struct backend_ws *ws,
			 const struct backend_attn *a);
	/* Streaming log-sum-exp: folds the n rows of s [n][cols] (row stride
	 * lds) into running maxima mx[n] and sums sm[n] (sum of exp(x - mx));
	 * start with mx = -INFINITY, sm = 0. lse = mx + log(sm). */
	void (*lse_fold)(struct backend *b, const float *s, int n, int cols,
			 int lds, float *mx, double *sm);
};

struct backend {
	const struct backend_ops *ops;
	int n_threads;
	int act_q8;           /* 1 (default): one-token matmuls quantise x to
	                         int8 blocks (see matmul); 0: fp32 x */
	void *impl;
};

/* Opens the CPU backend with n_threads workers (<= 0: all cores); sets
 * OpenBLAS to one thread (BLAS calls run inside the workers). *out owned by the caller (backend_close).
 * 0, SEKV_ENOMEM, or SEKV_EIO when a thread cannot start. */
int backend_cpu_open(struct backend **out, int n_threads, char *err, size_t errlen);
/* NULL is a no-op. */
void backend_close(struct backend *b);

#endif
