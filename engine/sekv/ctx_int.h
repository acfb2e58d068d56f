/* ctx_int.h - the decode context of a SeKV memory (struct sekv_ctx),
 * shared by attend.c (zoom, rebuild, the mixed attention) and route.c
 * (routing and the exact-mass measurements); not for other modules.
 */
#ifndef SEKV_CTX_INT_H
#define SEKV_CTX_INT_H

#include "engine/sekv/sekv_int.h"
#include "engine/backend/backend.h"
#include "engine/model/model.h"

/* Rows of a layer's region holding span comp's window r0 .. r0 + n - 1
 * rebuilt for KV head kv (id = kv * n_comp + comp), from row `row` on. */
struct zent {
	int32_t id, r0, n, row;
};

/* A row scanned by a row zoom (zoomrows.c): KV head, compressed span,
 * row of the span, query head of the block that brought it in. */
struct srow {
	int32_t kv, comp, off, head;
};

/* A span wanted by a KV head: the best alpha over its query heads. */
struct cand {
	int32_t kv, comp, head;
	float alpha;
	int32_t r0, n;              /* the zoom window: rows r0 .. r0 + n - 1 of the span */
};

struct sekv_ctx {
	const struct sekv_mem *m;   /* borrowed */
	struct backend *be;         /* borrowed (params) or own_be */
	struct backend *own_be;     /* opened here when params had none */
	struct backend_ws *ws;      /* mixed attention and rebuild scratch */
	int tail_cap;               /* question + generated rows per layer */
	float q_scale;
	int r_use;                  /* <= 0: stored rank */
	int recon_f32;              /* reconstructed rows fp32 (1) or the device type */
	int dev_rows;               /* enum sekv_dev_rows of the device rows
	                               (sekv_mem_dev_rows; devrows.c) */
	int v4;                     /* 1: values int4 (SEKV_DEV_K8V4) */
	int row_type;               /* enum backend_row_type of exact, summary and
	                               tail rows */
	int recon_type;             /* of reconstructed key rows (and values but
	                               with v4: int4) */
	int recon_blk_type;         /* the reconstructed rows' mix blocks' type */
	size_t recon_row_bytes;     /* device bytes of one reconstructed K + V row
	                               of one KV head */
	int group;                  /* query heads per KV head */
	int comp_tok;               /* tokens in compressed spans */
	int n_row;                  /* rows per KV head at most: exact + tail +
	                               coarse + comp_tok */
	int n_blk;                  /* blocks per KV head: 2 + 2 * n_comp (two calls) */
	size_t row_bytes;           /* one K+V row of one layer, all KV heads, at
	                               the device type (sekv_dev_rows_bytes) */
	int last_pos;               /* position of the current step, -1 none */
	int question_exact;         /* sekv_params.question_exact */
	int question;               /* 1: inside a question turn read exactly */

	float *kappa;               /* [n_layer][n_head][n_comp][SEKV_D_ROUTE] */
	struct backend_buf *tail_k; /* [n_layer][tail_cap][n_head_kv][d_h] fp16 */
	struct backend_buf *tail_v; /* same */
	struct backend_buf *exact_k, *exact_v; /* mem->exact_k/v, wrapped */
	struct backend_buf *bar_k, *bar_v;     /* mem->k_bar/v_bar, wrapped */
	struct backend_buf *lm_kb, *lm_sb;     /* mem->lm_k/lm_s, wrapped (NULL: no
	                                          landmarks) */
	/* int8 device rows (dev_rows; devrows.c): row scales beside each buffer,
	 * fp32, one per row and KV head in the rows' order; with v4 the value
	 * buffers hold int4 rows (half a byte an element) and their scales
	 * d_h / 32 per row and KV head */
	struct backend_buf *tail_ks, *tail_vs;   /* [n_layer][tail_cap][n_head_kv] */
	struct backend_buf *exact_ks, *exact_vs; /* [n_layer][n_exact][n_head_kv] */
	struct backend_buf *bar_ks, *bar_vs;     /* [n_layer][n_comp][n_head_kv] */
	struct backend_buf *recon_ks, *recon_vs; /* [sum of rec_cap] */
	float *kc;                  /* [n_layer][n_head_kv][d_h] per-channel key
	                               scales (> 0): every int8 key row holds
	                               k / kc, so the mixed attention scores
	                               q * kc against it */
	float *qk;                  /* [n_head][d_h] this layer's q * kc */
	void *dev_host;             /* int8 exact and summary rows and their
	                               scales (wrapped by exact_k .. bar_vs);
	                               NULL with fp16 rows */
	int8_t *tail8;              /* [2][n_head_kv][d_h] one tail row in int8 */
	float *tail8_s;             /* [n_head_kv] key scales, then the values':
	                               [n_head_kv] (int8) or [n_head_kv][d_h / 32]
	                               (int4, v4) */
	float *tail8_f;             /* [n_head_kv][d_h] fp32 scratch */
	int *n_tail;                /* [n_layer] tail index after the last row */
	int tail_first;             /* tail index of the first row still held
	                               (earlier rows were evicted); row of tail
	                               index i sits at slot i - tail_first */
	size_t *recon_layer;        /* [n_layer] reconstructed bytes this step */
	int *distinct_layer;        /* [n_layer] distinct zoomed spans this step */

	float *qr;                  /* [SEKV_D_ROUTE] routed query */
	float *alpha;               /* [n_head][n_comp] logit of alpha_S (ranked
	                               in logit space: the sigmoid saturates in
	                               float for large scores) */
	struct cand *cand;          /* [n_head_kv * n_comp] */
	int32_t *zoom_row;          /* [n_head_kv][n_comp] first recon row, -1 */
	int32_t *zoom_win;          /* [n_head_kv][n_comp][2] the span's first rebuilt
	                               row r0 and the rows held n (n = |S|: all of it);
	                               their positions in recon_pos */
	float *lm_sc;               /* [n_head][n_lm] this layer's landmark block
	                               scores q . lm * q_scale + log|b| */
	int zoom_blocks;            /* most landmark blocks one zoom rebuilds (0:
	                               whole spans) */
	int zoomed_layer;           /* global layer zoom_row .. recon_pos describe (-1) */
	int zoom_scan;              /* sekv_params.zoom_scan: > 0 zooms single rows
	                               (zoomrows.c) */
	float *lse_est;             /* [n_head] the landmark router's log of the
	                               head's whole estimated mass this step */
	int scan_cap;               /* rows a row zoom may scan per layer and step */
	struct cand *bcand;         /* [n_head_kv * n_lm] landmark blocks */
	float *balpha;              /* [n_head_kv * n_lm] their scores, to select in */
	struct srow *scan;          /* [scan_cap] the rows scanned, by KV head */
	float *scan_sc;             /* [group][scan_cap] every scanned row's scores
	                               against its KV head's query heads */
	double *scan_corr;          /* [2][n_head] a scan's correction of each head's
	                               estimated mass, then its shift (zoomrows.c) */
	float *scan_p;              /* [2][scan_cap] estimated share of attention
	                               per row, and a copy to select in */
	struct backend_lr_job *lrj; /* [n_head_kv * n_lm] a scan's score jobs */
	int32_t *recon_pos;         /* [sum of rec_cap] document position of every
	                               reconstructed row (this step's zooms) */
	int64_t *zkey;              /* [sum of rec_cap] a row zoom's rows as
	                               kv * n_tok + position, ascending per layer */
	int *n_zrows;               /* [n_layer] rows a layer's row zooms hold (0:
	                               none kept: windows or nothing) */
	int32_t *zmap;              /* [scan_cap] a row zoom's held row per kept row */
	uint8_t *mark;              /* [n_comp] zoomed for some KV head */
	struct backend_buf *recon_k; /* [sum of rec_cap][d_h] fp16 or fp32: each layer's
	                               reconstructed rows (rows rec_base[l] ..
	                               + rec_cap[l]), kept between steps */
	struct backend_buf *recon_v; /* same */
	struct backend_recon *rj;   /* [n_rj] rebuild jobs */
	int n_rj;                   /* max(2 * n_head_kv * n_comp, 512) */
	double *rope_freq;          /* [n_rot/2] when mem->rope_base > 0 */
	float *lse_exact;           /* [n_head] log-mass of the exact and tail rows
	                               this step (the first softmax call's) */
	float *lse_all;             /* [n_head] log-mass of every row this step */
	float *out_exact;           /* [n_head][d_h] attention over the exact and
	                               tail rows alone, carried into the second call */
	float *rope_cs, *rope_sn;   /* [max rec_cap][n_rot/2] RoPE of the rows being
	                               rebuilt in a layer's region (pre-RoPE keys) */
	float *share;               /* [n_layer] share of the zoom budget per layer */
	int32_t *rec_base;          /* [n_layer] first row of each layer's region */
	int32_t *rec_cap;           /* [n_layer] its rows: n_head_kv * comp_tok, at
	                               most its share of the largest zoom budget */
	struct zent *zlist;         /* [n_layer][n_head_kv * n_comp] the rows each layer
	                               holds: what was rebuilt where (kept between steps) */
	struct zent *znew;          /* [n_head_kv * n_comp] this step's, being placed */
	struct zent *zocc;          /* [n_head_kv * n_comp] rows taken, by row */
	int *n_zlist;               /* [n_layer] entries in zlist */
	struct backend_mix_block *blk; /* [n_head_kv][2] exact and tail rows (the
	                               first softmax call), then [n_head_kv][n_blk - 2]
	                               per compressed span its coarse and rebuilt rows
	                               (the second) */
	int router;                 /* enum sekv_router */
	const struct sekv_router_w *trained; /* SEKV_ROUTER_TRAINED's weights (borrowed) */
	int routed_layer;           /* 1 + the global layer routed last (0: none) */
	const uint16_t **xk;        /* [n_layer] exact keys (sekv_ctx_set_exact_keys), NULL: none */
	const uint16_t **xv;        /* [n_layer] exact values (sekv_ctx_set_exact_values), NULL: none */
	double *xmax;               /* [n_head] the largest exact score of this layer's
	                               heads (xs is relative to it) */
	uint16_t *xtail;            /* [2][tail_cap][n_head_kv][d_h] the tail rows of
	                               one layer in fp16 (attn_err's reference) */
	float *xtl;                 /* [tail_cap] one head's tail scores */
	double *xacc;               /* [n_head][d_h] the reference output's sums */
	double *xfd;                /* [2][n_head] its rescale factors, denominators */
	float *xrow;                /* [d_h] one exact key in fp32 */
	float *lrow;                /* [d_h] one landmark key in fp32 */
	float *xs;                  /* [n_head][n_tok] exact scores of this layer */
	double *xmass;              /* [n_head][n_comp] exact mass per compressed span,
	                               relative to the head's largest score */
	double *xtotal;             /* [n_head] exact mass over the document, same scale */
	float *xsel;                /* [2][n_tok] mass_oracle's scratch: one KV head's
	                               normalised mass per row, and a copy to select in */

	const struct model_probe *probe; /* borrowed, NULL: none */
	float *probe_row;           /* [n_head][n_row] mass per mixed row, one step */
	struct backend_probe pr;    /* this layer's probed heads (pr.n 0: none) */

	struct sekv_stats st;       /* zoom_count [n_layer][n_head], zoom [cap] */
	void *arena;
};

/* Device-tier rows (devrows.c). sekv_dev_open: the channel scales, int8
 * copies of the exact rows and summaries (dev_rows) or the memory's fp16
 * rows, wrapped as c->exact_k .. bar_vs; 0 or the backend's code. */
int sekv_dev_open(struct sekv_ctx *c);
/* Stores this token's K, V [n_head_kv][d_h] fp32 as tail row `slot` of
 * layer l at the device type. */
void sekv_dev_put_tail(struct sekv_ctx *c, int l, int slot, const float *k, const float *v);
/* Copies n tail rows of layer l from slot on into k, v [n][n_head_kv][d_h]
 * fp16 (int8 rows scaled back). 0 or SEKV_EINVAL. */
int sekv_dev_get_tail(const struct sekv_ctx *c, int l, int slot, int n, uint16_t *k, uint16_t *v);
/* The query the mixed attention of layer l scores with: q itself for fp16
 * rows, else c->qk = q * kc per query head (its KV head's scales). */
const float *sekv_dev_query(struct sekv_ctx *c, int l, const float *q);

/* Routes every query head of global layer l (route.c): the spans wanted
 * per KV head, best first, into c->cand; *n_out their count. 0 or the
 * backend's code. */
int sekv_route(struct sekv_ctx *c, int l, const float *q, int *n_out);
/* sigmoid(x) > tau for the logit x of alpha_S, decided in logit space
 * (tau <= 0: always; >= 1: never). */
int sekv_above_tau(float x, float tau);
/* The value of rank k (0: the largest) of x[0..n), 0 <= k < n; reorders x
 * (Hoare's selection, expected O(n)). */
float sekv_kth_largest(float *x, int n, int k);
/* Rebuild job of rows r0 .. r0 + len - 1 of a span's factor f (span start
 * `start`) for KV head kv of layer l into rows base + rows of the
 * reconstructed-row buffers at the device type (attend.c). */
struct backend_recon sekv_recon_job(const struct sekv_ctx *c, const struct sekv_factor *f,
				    int start, int r0, int len, int l, int kv, int is_key,
				    size_t base, size_t rows);
/* Forgets layer l's zooms and their statistics of the step before (a
 * repeated call for the same layer and step replaces them). */
void sekv_zoom_clear(struct sekv_ctx *c, int l);
/* Adds the host-tier bytes job j reads for n rows to factor_read_bytes. */
void sekv_count_read(struct sekv_ctx *c, const struct backend_recon *j, int n);
/* Zooms of single rows of layer l (zoomrows.c; sekv_params.zoom_scan),
 * after the landmark router: the best landmark blocks holding zoom_scan
 * times the rows that `allow` bytes hold are scanned (their keys scored
 * against q [n_head][d_h] through the factors) and the rows with the
 * largest estimated share of their heads' attention, over all KV heads,
 * are placed in the layer's region in (KV head, position) order: rows it
 * held at the step before (zkey, n_zrows) are moved, the others rebuilt;
 * the windows' record (n_zlist) is cleared. Fills zoom_row,
 * zoom_win (first row, rows held), recon_pos and the step's statistics;
 * *bytes = the reconstructed bytes. 0 or the backend's code. */
int sekv_zoom_rows(struct sekv_ctx *c, int l, const float *q, size_t allow, size_t *bytes);
/* Every compressed span of every KV head as a whole-span candidate (an
 * exact question turn), into c->cand; *n_out = their count. */
void sekv_route_all(struct sekv_ctx *c, int *n_out);
/* Exact attention mass of layer l's query heads per compressed span (for
 * the oracle router and mass_recall; needs sekv_ctx_set_exact_keys). */
void sekv_exact_mass(struct sekv_ctx *c, int l, const float *q);
/* Adds this step's mass_recall of layer l (after sekv_exact_mass and the
 * zooms) to the statistics. */
void sekv_add_mass_recall(struct sekv_ctx *c, int l);
/* Adds this step's attention output error of layer l (out [n_head][d_h],
 * after sekv_exact_mass; needs exact values) to the statistics. */
void sekv_add_attn_err(struct sekv_ctx *c, int l, const float *q, const float *out);

#endif
