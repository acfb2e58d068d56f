/* backend.h - the coarse operations a forward pass is written over.
 *
 * A backend is a table of operations (ggml style); the model code calls
 * only these, so the same forward runs on every backend. The CPU backend
 * (backend_cpu.c: gemm.c on dequantised rows for batches, int8-activation
 * dot products for one token, one pthread pool) is the reference that any
 * other backend is tested against. Activations are fp32 (quantised to int8
 * inside one-token matmuls), KV rows fp16, weights stay in
 * their GGUF types. Scratch lives in a workspace (struct backend_ws) sized
 * once per model state, so no operation allocates (the build-time SVD and
 * PCA operations excepted). Memory that a device backend would keep on the
 * device (KV rows, SeKV tail and reconstructed rows) is a struct backend_buf
 * the backend allocates; callers address it by handle and element offset.
 * SeKV's decode and build steps are operations too (attention_mix,
 * reconstruct, svd, pca), so every thread runs on the backend's one pool.
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

/* Memory owned by a backend. The CPU backend's is host memory and host
 * points at it; a device backend's host is NULL and its contents are
 * reached only through buf_write / buf_read / buf_copy. */
struct backend_buf {
	size_t bytes;         /* size */
	void *host;           /* [bytes] CPU: the memory itself; device: NULL */
	int borrowed;         /* 1: made by buf_wrap (the caller's memory) */
};

/* Shapes a workspace must serve. */
struct backend_ws_size {
	int n_batch;          /* most tokens per call */
	int n_head;           /* query heads */
	int d_head;           /* head size d_h */
	size_t max_w_elems;   /* largest rows*cols multiplied by a batch at once */
	int max_cols;         /* widest weight (cols) a single token is multiplied
	                         by; wider ones take the fp32-activation path */
	int mix_rows;         /* most rows of one attention_mix (per KV head);
	                         0: the workspace serves no SeKV operation */
	int recon_rank;       /* most components of one reconstruct job's factor
	                         when it passes the job's d (a factor over every
	                         KV head's columns, ShadowKV's keys); 0: at most
	                         d, one head's factor */
};

/* Attention probe (evidence, engine/evidence/evidence.h): for each listed query
 * head, the softmax weight every key receives is ADDED to that head's
 * mass row; outputs are not touched (a probe is bit-neutral). What a key
 * index means depends on the operation (see backend_attn, backend_mix). */
#define BACKEND_PROBE_MAX 64 /* query heads of one layer */
struct backend_probe {
	int n;                           /* probed query heads, 0..BACKEND_PROBE_MAX */
	int head[BACKEND_PROBE_MAX];     /* query head of entry i (distinct) */
	float *mass[BACKEND_PROBE_MAX];  /* [n_key] of entry i, accumulated */
	int n_key;                       /* keys counted: index < n_key */
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
	const struct backend_buf *k; /* [cap][n_head_kv][d_head] fp16 */
	const struct backend_buf *v; /* [cap][n_head_kv][d_head] fp16 */
	int cap;
	int window;           /* 0: full causal */
	float scale;          /* applied to q . k */
	const struct backend_probe *probe; /* NULL: none. Key index = key
	                         position (visible positions < n_key); with
	                         n > 1 the weights of every query of the batch
	                         add up (H2O's accumulated attention) */
};

/* Stored types of KV rows in SeKV's buffers (backend_mix_block.type,
 * backend_recon.dst_type). An int8 row i is d int8 codes and one fp32
 * scale: x = scale_i * code (quant_f32_to_i8_row); a key row may also be
 * divided by per-channel scales first (backend_recon.kc), in which case
 * the query must be multiplied by them (SeKV does: engine/sekv/attend.c).
 * An int4 row is d / 2 bytes of packed codes and d / QUANT_I4_GROUP fp32
 * scales (quant_f32_to_i4_row): element e of a buffer of int4 rows is the
 * nibble of byte e / 2, and scale slot t holds the d / 32 group scales at
 * elements t * d / 32 onwards. */
enum backend_row_type {
	BACKEND_ROW_F16 = 0,
	BACKEND_ROW_F32 = 1,
	BACKEND_ROW_I8 = 2,
	BACKEND_ROW_K8V4 = 3, /* mix blocks: int8 keys, int4 values (d % 32 == 0) */
	BACKEND_ROW_I4 = 4,   /* reconstructed rows: int4 (d % 32 == 0) */
};

/* One block of rows of a mixed attention (SeKV paper; DESIGN.md section 3
 * step 4): rows i < n of KV head g start at element off + i * ld of k and
 * v (d_head wide, of the block's type); every score of the block gets
 * bias added; a masked block is left out of the softmax. int8 rows take
 * their scales from element soff + i * sld of ks (keys) and vs (values),
 * fp32 buffers. */
struct backend_mix_block {
	const struct backend_buf *k;
	const struct backend_buf *v;
	size_t off;           /* elements to row 0 */
	size_t ld;            /* elements between rows */
	int n;                /* rows (0: empty block) */
	int type;             /* enum backend_row_type */
	float bias;           /* score bias, e.g. +log|S| of a coarse row */
	int masked;           /* 1: not attended (a zoomed span's coarse row) */
	const struct backend_buf *ks; /* int8, k8v4: row scales of k, else unused */
	const struct backend_buf *vs; /* int8: row scales of v; k8v4: the int4
	                         rows' scale slots (d / 32 scales a slot) */
	size_t soff;          /* int8, k8v4: slots of ks, vs to row 0's scale */
	size_t sld;           /* int8, k8v4: slots between rows' scales */
};

/* ONE softmax per query head over the rows of its KV head's blocks, in
 * block order: out[h] = sum_j softmax_j(q[h] . k[j] * scale + bias_j) v[j].
 * Query head h uses KV head h / (n_head / n_head_kv). */
struct backend_mix {
	const float *q;       /* [n_head][d_head] unscaled */
	float *out;           /* [n_head][d_head] */
	int n_head;
	int n_head_kv;
	int d_head;
	float scale;          /* applied to q . k before the bias */
	const struct backend_mix_block *blk; /* [n_head_kv][n_blk] */
	int n_blk;            /* blocks per KV head */
	const struct backend_probe *probe; /* NULL: none. Key index = row number
	                         among the unmasked rows of the head's KV head,
	                         in block order (as mix_rows counts them) */
	const float *carry_lse; /* NULL, or [n_head]: an earlier call's result
	                         joins this softmax as one more row of logit
	                         carry_lse[h] and value carry_out[h] (a softmax
	                         over two row sets in two calls: SeKV attends
	                         its exact rows before routing) */
	const float *carry_out; /* [n_head][d_head] with carry_lse */
	float *lse;           /* NULL, or out [n_head]: log of the softmax's
	                         denominator, log sum_j exp(score_j) over this
	                         call's rows and the carry (-INFINITY: none) */
};

/* Scores of query heads against int8 key rows with a scale per row (SeKV's
 * landmark keys): s[h][j] = (q[h] . k_j) * ks_j * scale for j < n; query
 * head h reads KV head g = h / (n_head / n_head_kv), whose row j is
 * d_head int8 at byte off + j * ld + g * d_head of k and whose scale is
 * element soff + j * n_head_kv + g of ks (fp32). */
struct backend_score {
	const float *q;       /* [n_head][d_head] unscaled */
	int n_head;
	int n_head_kv;
	int d_head;
	const struct backend_buf *k;  /* int8 rows */
	size_t off;           /* bytes to row 0 */
	size_t ld;            /* bytes between rows (>= n_head_kv * d_head) */
	const struct backend_buf *ks; /* fp32 row scales */
	size_t soff;          /* elements to row 0's scales */
	int n;                /* rows */
	float scale;
	float *s;             /* out [n_head][lds] */
	size_t lds;           /* >= n */
};

/* Scores of query heads against a span's key rows read through their
 * truncated SVD without rebuilding them (SeKV's zooms of single rows):
 * with qp[g][t] = s[t] * sum_j q[g][j] * v[j][t] (the query projected on
 * the factor once), row i scores
 *   out[g][col + i] = scale * sum_{t < r} u[i][t] * qp[g][t],
 * which is scale * (q[g] . X_hat[i]) for the reconstruction of struct
 * backend_recon. A raw factor (rank -1: rows [len][d] in u) scores its
 * rows, an int8 one (rank -2: codes in u, row scales in s) its rows
 * scaled. */
struct backend_lr_job {
	int len;              /* rows */
	int rank;             /* stored rank (row stride of u and v, <= d), or
	                         -1 raw rows, -2 int8 rows */
	int r;                /* components used, 0..rank */
	int f16;              /* 1: u, v (and raw rows) fp16; 0: fp32 */
	const void *u;        /* [len][rank] (raw: [len][d]) host memory */
	const float *s;       /* [rank] (int8 rows: [len]) */
	const void *v;        /* [d][rank] */
	const float *q;       /* [n_q][d] unscaled query heads */
	size_t col;           /* output column of row 0 */
};

struct backend_score_lr {
	int n_q;              /* query heads per job (n_q * d <= the workspace's
	                         recon scratch: n_q <= d_head suffices) */
	int d;                /* d_h (<= the workspace's d_head) */
	float scale;
	const struct backend_lr_job *job;
	int n_job;
	float *s;             /* out [n_q][lds] */
	size_t lds;           /* > every job's col + len - 1 */
};

/* Low-rank reconstruction of a span's rows from its truncated SVD:
 * X[i][j] = sum_{t < r} (u[i][t] * s[t]) * v[j][t] (fp32 sums), written
 * to dst at element off as rows of d (fp16 rounded to nearest, fp32,
 * int8 with a scale per row or int4 with a scale per 32 values), divided
 * by kc first where given.
 * A raw factor (rank SEKV_RANK_RAW, engine/sekv/sekv.h) is copied: u holds
 * the rows [len][d]; r, s and v are unused. An int8 one (SEKV_RANK_RAW8)
 * is dequantised: u holds int8 codes [len][d], s the row scales [len]
 * (row i = s[i] * u[i]); r, f16 and v are unused. */
struct backend_recon {
	int len;              /* rows |S| */
	int d;                /* columns d_h (<= the workspace's d_head) */
	int rank;             /* stored rank: row stride of u and v, at most d
	                         or the workspace's recon_rank; -1: raw,
	                         -2: int8 rows */
	int r;                /* components used, 0..rank */
	int f16;              /* 1: u, v fp16; 0: fp32 */
	const void *u;        /* [len][rank] host memory */
	const float *s;       /* [rank] (int8 rows: [len] row scales) */
	const void *v;        /* [d][rank] host memory */
	struct backend_buf *dst;
	size_t off;           /* elements to dst row 0 */
	int dst_type;         /* enum backend_row_type of the rows written */
	const float *cs;      /* NULL, or [len][n_rot/2] cos and sin of NEOX RoPE */
	const float *sn;      /*   angles applied to each rebuilt row before it is
	                           stored (keys factored before RoPE; not raw) */
	int n_rot;            /* rotated dims (even, <= d) when cs is set */
	int rope_gptj;        /* with cs: 1 rotates the pairs (2j, 2j + 1) (GPT-J,
	                         hparams.rope_neox = 0), 0 the NEOX pairs (j, j + n_rot/2) */
	struct backend_buf *dst_s; /* int8 and int4 rows: their fp32 scales, row
	                         i's in slot soff + i (else unused) */
	size_t soff;
	const float *kc;      /* NULL, or [d] per-channel divisors (> 0) every
	                         rebuilt row is divided by before it is stored
	                         (SeKV's int8 key rows; any dst_type) */
};

/* Truncated SVD of one fp16 matrix X [rows][cols] (host memory):
 * X ~ U diag(s) V^T with the rank leading singular triplets (LAPACK sgesdd
 * on the CPU). u, v are stored fp16 (rounded to nearest; entries lie in
 * [-1, 1]) or fp32. */
struct backend_svd {
	const uint16_t *x;    /* [rows] rows ldx apart, cols used, fp16 */
	size_t ldx;           /* elements between rows (>= cols) */
	int rows;
	int cols;
	int rank;             /* <= min(rows, cols) */
	float *s;             /* [rank] descending */
	void *u;              /* [rows][rank] */
	void *v;              /* [cols][rank] */
	int f16;              /* 1: u, v fp16; 0: fp32 */
	float *share;         /* NULL, or out: the share of ||X||_F^2 (the sum of
	                         all squared singular values) the rank kept
	                         components hold, 0..1 (1 for a zero matrix) */
};

/* Principal directions of fp16 rows X [rows][cols] (host memory): the
 * n_vec leading eigenvectors (largest eigenvalue first) of the covariance
 * sum_t (x_t - mean)(x_t - mean)^T (LAPACK ssyevd on the CPU). */
struct backend_pca {
	const uint16_t *x;    /* [rows] rows ldx apart, cols used, fp16 */
	size_t ldx;
	int rows;
	int cols;
	int n_vec;            /* <= cols */
	float *vec;           /* [n_vec][cols] unit eigenvectors */
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
	 * struct quant_act), and uses integer dot products; so do its batches
	 * for the types quant_gemm supports. */
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
	/* RoPE in place on x [n][n_head][d_head]: for j < n_rot/2 the pair
	 * (x[j], x[j + n_rot/2]) (neox = 1: GPT-NeoX / HF rotate_half, llama.cpp
	 * LLAMA_ROPE_TYPE_NEOX) or (x[2j], x[2j + 1]) (neox = 0: GPT-J style,
	 * LLAMA_ROPE_TYPE_NORM) is multiplied by the matrix [c -s; s c] with
	 * c = cs[i][j], s = sn[i][j] ([n][n_rot/2], token i; a scaled RoPE
	 * such as YaRN folds its magnitude into cs and sn). Dims >= n_rot
	 * are left as they are. */
	void (*rope)(struct backend *b, float *x, int n, int n_head, int d_head,
		     int n_rot, int neox, const float *cs, const float *sn);
	/* g[i] = gelu_tanh(g[i]) * u[i], i < n (Gemma's GeGLU). */
	void (*gelu_mul)(struct backend *b, float *g, const float *u, size_t n);
	/* g[i] = silu(g[i]) * u[i] = g[i] / (1 + exp(-g[i])) * u[i], i < n
	 * (SwiGLU: Llama, Qwen2, Mistral, Phi-3). */
	void (*silu_mul)(struct backend *b, float *g, const float *u, size_t n);
	/* y[i] += x[i], i < n. */
	void (*add)(struct backend *b, float *y, const float *x, size_t n);
	/* y[r][j] += bias[j] for r < n_rows, j < dim (projection biases,
	 * Qwen2's q/k/v). */
	void (*add_bias)(struct backend *b, float *y, const float *bias, int n_rows, int dim);
	/* Stores n rows (k, v [n][width] fp32) as fp16 (rounded to nearest) at
	 * rows (pos0+i) % cap of kc, vc ([cap][width] fp16 buffers). */
	void (*kv_store)(struct backend *b, struct backend_buf *kc, struct backend_buf *vc,
			 int cap, int width, const float *k, const float *v, int pos0, int n);
	/* See struct backend_attn. 0 or a negative code. */
	int (*attention)(struct backend *b, struct backend_ws *ws,
			 const struct backend_attn *a);
	/* Streaming log-sum-exp: folds the n rows of s [n][cols] (row stride
	 * lds) into running maxima mx[n] and sums sm[n] (sum of exp(x - mx));
	 * start with mx = -INFINITY, sm = 0. lse = mx + log(sm). */
	void (*lse_fold)(struct backend *b, const float *s, int n, int cols,
			 int lds, float *mx, double *sm);

	/* Buffers. buf_new: bytes of backend memory, zeroed; 0 or SEKV_ENOMEM.
	 * buf_wrap: a read-only buffer with the contents of host[bytes]; host
	 * must stay alive and unchanged while it lives (the CPU backend
	 * borrows it, a device backend would copy it). buf_free(NULL) is a
	 * no-op. buf_write / buf_read copy bytes at byte offset off;
	 * buf_copy moves bytes inside or between buffers (overlap allowed).
	 * 0, or SEKV_EINVAL when a range lies outside a buffer. */
	int (*buf_new)(struct backend *b, size_t bytes, struct backend_buf **out);
	int (*buf_wrap)(struct backend *b, const void *host, size_t bytes,
			struct backend_buf **out);
	void (*buf_free)(struct backend *b, struct backend_buf *buf);
	int (*buf_write)(struct backend *b, struct backend_buf *buf, size_t off,
			 const void *src, size_t bytes);
	int (*buf_read)(struct backend *b, const struct backend_buf *buf, size_t off,
			void *dst, size_t bytes);
	int (*buf_copy)(struct backend *b, struct backend_buf *dst, size_t dst_off,
			const struct backend_buf *src, size_t src_off, size_t bytes);

	/* SeKV. attention_mix: see struct backend_mix; needs a workspace with
	 * mix_rows >= the unmasked rows of a KV head and d_head >= a->d_head.
	 * The CPU backend cuts each KV head's rows into parts of a fixed
	 * size (flash-decoding), spreads the parts over the pool and merges
	 * them in order, so results do not depend on the thread count.
	 * 0 or SEKV_EINVAL. */
	int (*attention_mix)(struct backend *b, struct backend_ws *ws,
			     const struct backend_mix *a);
	/* score_i8: see struct backend_score; workspace with mix_rows > 0 and
	 * d_head >= a->d_head. Rows spread over the pool; each score's
	 * arithmetic is fixed. 0 or SEKV_EINVAL (a row outside a buffer). */
	int (*score_i8)(struct backend *b, struct backend_ws *ws,
			const struct backend_score *a);
	/* score_lowrank: see struct backend_score_lr; workspace with mix_rows
	 * > 0. Jobs spread over the pool; each score's arithmetic is fixed.
	 * 0 or SEKV_EINVAL. */
	int (*score_lowrank)(struct backend *b, struct backend_ws *ws,
			     const struct backend_score_lr *a);
	/* reconstruct: the n jobs (independent spans), see struct
	 * backend_recon; workspace with mix_rows > 0. 0 or SEKV_EINVAL. */
	int (*reconstruct)(struct backend *b, struct backend_ws *ws,
			   const struct backend_recon *r, int n);
	/* svd / pca: n independent jobs spread over the pool (build time;
	 * these allocate their LAPACK scratch). 0, SEKV_ENOMEM, or SEKV_EINVAL
	 * with *bad = the failing job and *info = LAPACK's info. */
	int (*svd)(struct backend *b, const struct backend_svd *job, int n,
		   int *bad, int *info);
	int (*pca)(struct backend *b, const struct backend_pca *job, int n,
		   int *bad, int *info);
};

struct backend {
	const struct backend_ops *ops;
	int n_threads;
	int act_q8;           /* 1 (default): matmuls quantise x to int8
	                         blocks where a kernel exists (see matmul); 0: fp32 x */
	void *impl;
};

/* Opens the backend called name ("cpu"; NULL or "" = the build's default,
 * the CPU) with n_threads workers (<= 0: all cores). The one place that
 * chooses a backend (backend.c). *out owned by the caller (backend_close).
 * 0, SEKV_EUNSUP (unknown or not built), SEKV_ENOMEM, SEKV_EIO. */
int backend_open(const char *name, int n_threads, struct backend **out,
		 char *err, size_t errlen);
/* Opens the CPU backend with n_threads workers (<= 0: all cores); sets
 * OpenBLAS to one thread (BLAS calls run inside the workers). *out owned by the caller (backend_close).
 * 0, SEKV_ENOMEM, or SEKV_EIO when a thread cannot start. */
int backend_cpu_open(struct backend **out, int n_threads, char *err, size_t errlen);
/* NULL is a no-op. */
void backend_close(struct backend *b);

#endif
