/* kv_quest.h - Quest (Tang et al., "Quest: Query-Aware Sparsity for
 * Efficient Long-Context LLM Inference", arXiv 2406.10774, section 3):
 * a rival KV method that keeps every exact row of the document in the
 * host tier and, at every decode step and global layer, attends exactly
 * (one softmax) over the pages whose keys could score highest for this
 * query, plus the conversation's rows. The device tier holds each page's
 * elementwise key minimum and maximum (the metadata), the chosen pages'
 * rows of this step and the conversation's rows: an accuracy ceiling for
 * query-aware selection at a budget. Plugging it into a conversation:
 * conv_kv_quest (engine/conv/conv.h).
 */
#ifndef SEKV_KV_QUEST_H
#define SEKV_KV_QUEST_H

#include <stddef.h>
#include <stdint.h>

struct backend;
struct model_probe;

#define KV_QUEST_PAGE 16 /* tokens per page (the paper's) */

/* Quest's criticality of a page for one query head (section 3.2): the
 * upper bound sum_i max(q_i * kmin_i, q_i * kmax_i) of q . k over every
 * key k of a page whose elementwise minimum and maximum are kmin, kmax
 * [d] (unscaled, as q . k). Pure. */
float kv_quest_bound(const float *q, const float *kmin, const float *kmax, int d);

struct kv_quest_params {
	int n_layer;               /* global layers */
	const int32_t *layer_id;   /* [n_layer] model layer of each (borrowed for the call) */
	int n_head, n_head_kv, d_h;
	float q_scale;             /* model attention scale */
	int tail_cap;              /* question + answer rows per layer at most */
	struct backend *be;        /* borrowed; outlives the stream */
	int page;                  /* tokens per page, >= 1 (KV_QUEST_PAGE) */
	int page_rows;             /* rows of chosen pages per (layer, KV head) and
	                              step at most: floor(page_rows / page) pages,
	                              >= 1 page */
};

struct kv_quest; /* one decode stream */

/* Copies every global layer's rows k[l], v[l] -> [n_tok][n_head_kv][d_h]
 * fp16 (borrowed for the call) into the host tier, page by page per KV
 * head, and derives the metadata. Scratch for every step is sized here.
 * 0, SEKV_EINVAL (bad shape), SEKV_ENOMEM, backend codes. */
int kv_quest_new(struct kv_quest **out, const struct kv_quest_params *p, int n_tok,
		 const uint16_t *const *k, const uint16_t *const *v, char *err, size_t errlen);
void kv_quest_free(struct kv_quest *s); /* NULL is a no-op */

/* model_attn callback (engine/model/model.h): `layer` is the MODEL layer; the
 * token's k, v [n_head_kv][d_h] become tail row pos - n_tok. Each KV head
 * chooses the pages with the largest bound, taken as the most over its
 * query heads (one set of rows serves the group, and a page that one head
 * needs is kept), ties to the earlier page; their rows are copied to the
 * device tier and out [n_head][d_h] = one softmax over them and the tail
 * rows. SEKV_EINVAL: not a global layer, pos out of the tail, a skipped
 * row. No allocation. Not thread-safe per stream. */
int kv_quest_attend(void *ctx, int layer, int pos, const float *q,
		    const float *k, const float *v, float *out);
/* Device-tier bytes now: metadata (kmin, kmax at fp16) + the rows of the
 * pages each (layer, KV head) chose at its last step + tail rows. */
size_t kv_quest_resident_bytes(const void *ctx);
/* Bytes held whatever the tail: metadata + page_rows per (layer, KV head)
 * (at most the document). */
size_t kv_quest_fixed_bytes(const struct kv_quest *s);
/* Metadata bytes alone: 2 x pages x n_layer x n_head_kv x d_h x 2 (fp16;
 * the extremes of fp16 keys are fp16 values, held here as fp32 so the
 * bound needs no conversion). */
size_t kv_quest_meta_bytes(const struct kv_quest *s);
/* Tail rows held per global layer. */
int kv_quest_tail_rows(const void *ctx);
/* Forgets tail rows of positions before pos (0 or SEKV_EINVAL). */
int kv_quest_evict(void *ctx, int pos);
/* Probes later calls (p borrowed until replaced; NULL: off): a chosen
 * row's softmax weight goes to its document position, tail rows' is
 * dropped. */
void kv_quest_set_probe(void *ctx, const struct model_probe *p);
/* The pages layer index l's KV head g chose at its last step: their
 * count, and their indices ascending in *page (borrowed, valid until the
 * next call on s). */
int kv_quest_chosen(const struct kv_quest *s, int l, int g, const int32_t **page);

#endif
