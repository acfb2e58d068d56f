/* kv_shadow.h - ShadowKV (Sun et al., "ShadowKV: KV Cache in Shadows for
 * High-Throughput Long-Context LLM Inference", arXiv 2410.21465, section 4):
 * a rival KV method that keeps in the device tier, per global layer, a
 * truncated SVD of the document's pre-RoPE keys (every KV head's columns
 * in one matrix) and one landmark per chunk (the mean post-RoPE key of its
 * tokens), the values in the host tier, and exact on the device the
 * chunks whose keys stray most from their landmark (outliers), the first
 * chunk (attention sinks) and the last (local). At every decode step and
 * global layer each KV head scores the landmarks with its query heads,
 * rebuilds the keys of its best chunks from the factors (RoPE at their
 * positions), fetches their values and attends exactly (one softmax) over
 * them, the exact chunks and the conversation's rows. Rank and the chunks
 * a step takes follow the budget (kv_shadow_plan). Plugging it into a
 * conversation: conv_kv_shadow (engine/conv/conv.h).
 */
#ifndef SEKV_KV_SHADOW_H
#define SEKV_KV_SHADOW_H

#include <stddef.h>
#include <stdint.h>

struct backend;
struct model_probe;
struct model_rope;

#define KV_SHADOW_CHUNK 8 /* tokens per chunk (the paper's) */

struct kv_shadow_params {
	int n_layer;               /* global layers */
	const int32_t *layer_id;   /* [n_layer] model layer of each (borrowed for the call) */
	int n_head, n_head_kv, d_h;
	float q_scale;             /* model attention scale */
	int tail_cap;              /* question + answer rows per layer at most */
	struct backend *be;        /* borrowed; outlives the stream */
	const struct model_rope *rope; /* the global layers' RoPE (borrowed; outlives
	                              the stream): keys are rotated back by it before
	                              the SVD and rebuilt keys rotated at their positions */
	int chunk;                 /* tokens per chunk, >= 1 (KV_SHADOW_CHUNK) */
	int rank;                  /* components of each layer's key factor,
	                              1..n_head_kv * d_h (clipped to the document's tokens) */
	int n_outlier;             /* outlier chunks held exact per (layer, KV head), >= 0 */
	int n_select;              /* chunks rebuilt per (layer, KV head) and step, >= 0;
	                              both clipped to the chunks left beside the first
	                              and the last */
};

/* What a budget buys (kv_shadow_plan); the stream's own after clipping
 * (kv_shadow_get_plan). */
struct kv_shadow_plan {
	int rank;
	int n_outlier;
	int n_select;
};

/* The budget rule. rows: the device rows (K and V of one token in every
 * global layer and KV head at fp16, model_kv_bytes of one) the document
 * may take beside its landmarks (kv_shadow_landmark_rows) and the
 * conversation. The first and last chunks are exact; of the rows, the
 * factors (U [n_tok][rank] and V [n_head_kv * d_h][rank] fp16, s fp32
 * per layer) take the largest rank that fits in 3/4 and leaves a chunk
 * to rebuild (at least 1, at most min(n_tok, n_head_kv * d_h)); of what
 * the factors and the two chunks
 * leave, an eighth (in whole chunks) holds outliers and the rest the
 * chunks rebuilt each step, at least one when a chunk lies between the
 * first and the last. 0, or SEKV_EINVAL (bad shape, or rows below
 * kv_shadow_rows_min). Pure. */
int kv_shadow_plan(int n_tok, int n_head_kv, int d_h, int chunk, long long rows,
		   struct kv_shadow_plan *out);
/* The fewest rows kv_shadow_plan accepts: rank 1, the first and last
 * chunks and one chunk rebuilt (none when the document has at most two
 * chunks). -1 on a bad shape. Pure. */
long long kv_shadow_rows_min(int n_tok, int n_head_kv, int d_h, int chunk);
/* Rows the landmarks take: one key row (half a row) per chunk, rounded up. */
long long kv_shadow_landmark_rows(int n_tok, int chunk);

struct kv_shadow; /* one decode stream */

/* Builds the stream over every global layer's rows k[l], v[l] ->
 * [n_tok][n_head_kv][d_h] fp16 (post-RoPE keys; borrowed for the call):
 * keys rotated back to before RoPE and factored (the backend's svd, one
 * job per layer), landmarks and outliers (the chunks whose lowest cosine
 * similarity of a key to their landmark is smallest, per layer and KV
 * head), the exact chunks copied to the device tier, the values to the
 * host tier. Scratch for every step is sized here. 0, SEKV_EINVAL (bad
 * shape), SEKV_ENOMEM, backend codes (a failed SVD). */
int kv_shadow_new(struct kv_shadow **out, const struct kv_shadow_params *p, int n_tok,
		  const uint16_t *const *k, const uint16_t *const *v, char *err, size_t errlen);
void kv_shadow_free(struct kv_shadow *s); /* NULL is a no-op */

/* model_attn callback (engine/model/model.h): `layer` is the MODEL layer; the
 * token's k, v [n_head_kv][d_h] become tail row pos - n_tok. Each KV head
 * scores every chunk not held exact by the softmax weight of its landmark
 * (q . landmark * q_scale over those chunks) summed over the group's query
 * heads, takes the n_select best (ties to the earlier chunk), rebuilds
 * their keys (backend reconstruct, RoPE at their positions) and fetches
 * their values into the device tier; out [n_head][d_h] = one softmax over
 * the exact chunks, the rebuilt ones and the tail rows. SEKV_EINVAL: not a
 * global layer, pos out of the tail, a skipped row. No allocation. Not
 * thread-safe per stream. */
int kv_shadow_attend(void *ctx, int layer, int pos, const float *q,
		     const float *k, const float *v, float *out);
/* Device-tier bytes now: factors and landmarks (kv_shadow_meta_bytes), the
 * exact chunks, the chunks each (layer, KV head) rebuilt at its last step
 * (keys and values at fp16) and the tail rows. */
size_t kv_shadow_resident_bytes(const void *ctx);
/* Bytes held whatever the tail: meta + exact chunks + n_select chunks per
 * (layer, KV head). */
size_t kv_shadow_fixed_bytes(const struct kv_shadow *s);
/* Factors (U, V fp16, s fp32 of every layer) + landmarks (fp16 keys, held
 * here as fp32 so scoring needs no conversion). */
size_t kv_shadow_meta_bytes(const struct kv_shadow *s);
/* Host tier: every document value at fp16 (half the full KV). */
size_t kv_shadow_host_bytes(const struct kv_shadow *s);
/* The rank, outliers and chunks a step takes, after clipping. */
void kv_shadow_get_plan(const struct kv_shadow *s, struct kv_shadow_plan *p);
/* Tail rows held per global layer. */
int kv_shadow_tail_rows(const void *ctx);
/* Forgets tail rows of positions before pos (0 or SEKV_EINVAL). */
int kv_shadow_evict(void *ctx, int pos);
/* Probes later calls (p borrowed until replaced; NULL: off): an exact or
 * rebuilt row's softmax weight goes to its document position, tail rows'
 * is dropped. */
void kv_shadow_set_probe(void *ctx, const struct model_probe *p);
/* The chunks layer index l's KV head g rebuilt at its last step: their
 * count, and their indices ascending in *chunk (borrowed, valid until the
 * next call on s). */
int kv_shadow_chosen(const struct kv_shadow *s, int l, int g, const int32_t **chunk);
/* The positions layer index l's KV head g holds exact (first chunk,
 * outliers, last chunk), ascending: their count and *pos (borrowed, valid
 * while s lives). */
int kv_shadow_exact(const struct kv_shadow *s, int l, int g, const int32_t **pos);

#endif
