/* kv_subset.h - rival KV methods that keep a subset of a document's exact
 * rows in the device tier and evict the rest (issue 9 part 3): each global
 * layer attends with one softmax over the kept rows plus the conversation's
 * own rows (question and answer). The selection rule is apart from the
 * stream, so StreamingLLM today and SnapKV, H2O or Quest later share one
 * decode path (the backend's attention_mix, as SeKV's).
 * Choosing the rows: kv_select_*; the stream: kv_subset_*; plugging it
 * into a conversation: conv_kv_subset (engine/conv.h).
 */
#ifndef SEKV_KV_SUBSET_H
#define SEKV_KV_SUBSET_H

#include <stddef.h>
#include <stdint.h>

struct backend;
struct model_probe;

/* StreamingLLM (Xiao et al., "Efficient Streaming Language Models with
 * Attention Sinks", arXiv 2309.17453, section 3.2): the first n_sink
 * positions (attention sinks) and the most recent ones, n_keep in all, of
 * a document of n_tok positions. out [min(n_keep, n_tok)] ascending.
 * Returns that count, or SEKV_EINVAL (n_keep < 0, n_sink < 0, n_tok < 0). */
int kv_select_streaming(int n_tok, int n_keep, int n_sink, int32_t *out);

struct kv_subset_params {
	int n_layer;               /* global layers */
	const int32_t *layer_id;   /* [n_layer] model layer of each (borrowed for the call) */
	int n_head, n_head_kv, d_h;
	float q_scale;             /* model attention scale */
	int tail_cap;              /* question + answer rows per layer at most */
	struct backend *be;        /* borrowed; outlives the stream */
};

struct kv_subset; /* one decode stream */

/* Copies the rows of positions pos [n_pos] (ascending, each < n_tok) of
 * every global layer from k[l], v[l] -> [n_tok][n_head_kv][d_h] fp16 into
 * the backend's memory (k, v and pos borrowed for the call only).
 * 0, SEKV_EINVAL (bad shape or positions), SEKV_ENOMEM, backend codes. */
int kv_subset_new(struct kv_subset **out, const struct kv_subset_params *p,
		  const int32_t *pos, int n_pos, int n_tok,
		  const uint16_t *const *k, const uint16_t *const *v,
		  char *err, size_t errlen);
void kv_subset_free(struct kv_subset *s); /* NULL is a no-op */

/* model_attn callback (engine/model.h): `layer` is the MODEL layer; the
 * token's k, v [n_head_kv][d_h] become tail row pos - n_tok (appended in
 * order per layer); out [n_head][d_h] = one softmax over kept and tail
 * rows. SEKV_EINVAL: not a global layer, pos out of the tail, a skipped
 * row. Not thread-safe per stream. */
int kv_subset_attend(void *ctx, int layer, int pos, const float *q,
		     const float *k, const float *v, float *out);
/* Device-tier bytes now: kept rows + tail rows, fp16, all global layers. */
size_t kv_subset_resident_bytes(const void *ctx);
/* Kept rows' bytes (held whatever the tail). */
size_t kv_subset_fixed_bytes(const struct kv_subset *s);
/* Tail rows held per global layer. */
int kv_subset_tail_rows(const void *ctx);
/* Forgets tail rows of positions before pos (0 or SEKV_EINVAL). */
int kv_subset_evict(void *ctx, int pos);
/* Probes later calls (p borrowed until replaced; NULL: off): kept rows'
 * softmax weight goes to their document positions, tail rows' is dropped. */
void kv_subset_set_probe(void *ctx, const struct model_probe *p);

#endif
