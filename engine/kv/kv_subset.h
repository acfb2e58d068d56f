/* kv_subset.h - rival KV methods that keep a subset of a document's exact
 * rows in the device tier and evict the rest (issue 9 part 3): each global
 * layer attends with one softmax over its kept rows plus the
 * conversation's own rows (question and answer, the tail). Every (global
 * layer, KV head) keeps its own positions, the same number of them, so
 * StreamingLLM (the same positions everywhere), H2O and SnapKV (positions
 * per layer and head) share one decode path (the backend's attention_mix,
 * as SeKV's). SnapKV chooses its rows late: the question turn runs with
 * the full cache (every exact row, as SnapKV's prefill does) and votes,
 * and the answer begins on the chosen rows; resident bytes count the kept
 * rows from then on.
 * Choosing the rows: engine/kv/kv_select.h; the stream: kv_subset_*;
 * plugging it into a conversation: conv_kv_subset (engine/conv/conv.h).
 */
#ifndef SEKV_KV_SUBSET_H
#define SEKV_KV_SUBSET_H

#include <stddef.h>
#include <stdint.h>

struct backend;
struct model_probe;

struct kv_subset_params {
	int n_layer;               /* global layers */
	const int32_t *layer_id;   /* [n_layer] model layer of each (borrowed for the call) */
	int n_head, n_head_kv, d_h;
	float q_scale;             /* model attention scale */
	int tail_cap;              /* question + answer rows per layer at most */
	struct backend *be;        /* borrowed; outlives the stream */
	/* SnapKV (kv_select_snapkv): > 0 = rows each (layer, KV head) keeps
	 * once the answer begins (kv_subset_answer_begin). Until then the
	 * stream attends over every given row (which must be all n_tok
	 * positions: SnapKV's prefill sees the whole prompt) and every query
	 * head's softmax weight on each document row is added to its KV
	 * head's vote. 0: the given rows stay. */
	int snap_keep;
	int snap_kernel;           /* SnapKV's pooling kernel, odd (paper: 7) */
};

struct kv_subset; /* one decode stream */

/* Copies, for every global layer l and KV head g, the rows of positions
 * pos[l][g][0..n_keep) (ascending, each < n_tok; pos is [n_layer]
 * [n_head_kv][n_keep]) from k[l], v[l] -> [n_tok][n_head_kv][d_h] fp16
 * into the backend's memory (k, v and pos borrowed for the call only).
 * 0, SEKV_EINVAL (bad shape or positions; SnapKV without every position),
 * SEKV_EUNSUP (SnapKV with more than BACKEND_PROBE_MAX query heads),
 * SEKV_ENOMEM, backend codes. */
int kv_subset_new(struct kv_subset **out, const struct kv_subset_params *p,
		  const int32_t *pos, int n_keep, int n_tok,
		  const uint16_t *const *k, const uint16_t *const *v,
		  char *err, size_t errlen);
void kv_subset_free(struct kv_subset *s); /* NULL is a no-op */

/* model_attn callback (engine/model/model.h): `layer` is the MODEL layer; the
 * token's k, v [n_head_kv][d_h] become tail row pos - n_tok (appended in
 * order per layer); out [n_head][d_h] = one softmax over the layer's kept
 * rows of each KV head and the tail rows. SEKV_EINVAL: not a global
 * layer, pos out of the tail, a skipped row. Not thread-safe per stream. */
int kv_subset_attend(void *ctx, int layer, int pos, const float *q,
		     const float *k, const float *v, float *out);
/* conv_kv answer_begin hook: with SnapKV still voting, keeps the
 * snap_keep rows kv_select_snapkv chooses from each (layer, KV head)'s
 * votes (in place: nothing is allocated) and stops voting; otherwise
 * nothing. The choice is made once, for the whole conversation. 0. */
int kv_subset_answer_begin(void *ctx);
/* Device-tier bytes now: kept rows + tail rows, fp16, all global layers
 * and KV heads (SnapKV before its choice: every row). */
size_t kv_subset_resident_bytes(const void *ctx);
/* Kept rows' bytes, held whatever the tail (SnapKV: the rows it will keep). */
size_t kv_subset_fixed_bytes(const struct kv_subset *s);
/* Tail rows held per global layer. */
int kv_subset_tail_rows(const void *ctx);
/* Forgets tail rows of positions before pos (0 or SEKV_EINVAL). */
int kv_subset_evict(void *ctx, int pos);
/* Probes later calls (p borrowed until replaced; NULL: off): a kept row's
 * softmax weight goes to its document position (each query head through
 * its own KV head's rows), tail rows' is dropped. */
void kv_subset_set_probe(void *ctx, const struct model_probe *p);
/* Rows kept per (layer, KV head) now, and their positions: pos of layer
 * index l (0..n_layer) and KV head g, [kv_subset_n_keep] ascending
 * (borrowed, valid until the next call on s). */
int kv_subset_n_keep(const struct kv_subset *s);
const int32_t *kv_subset_pos(const struct kv_subset *s, int l, int g);

#endif
