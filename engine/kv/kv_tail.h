/* kv_tail.h - the conversation's own exact rows (question and answer
 * tokens after a document) of every global layer, as the rival KV methods
 * hold them in the device tier beside what they keep of the document
 * (kv_subset.c, kv_quest.c, kv_shadow.c): appended in order, oldest turns forgotten
 * first, attended as one block per KV head.
 * Invariant: nothing is allocated after kv_tail_init.
 */
#ifndef SEKV_KV_TAIL_H
#define SEKV_KV_TAIL_H

#include <stddef.h>

#include "engine/backend/backend.h"

struct kv_tail {
	struct backend *be;        /* borrowed */
	int n_layer, cap, n_head_kv, d_h;
	size_t row;                /* n_head_kv * d_h */
	struct backend_buf *k, *v; /* [n_layer][cap][row] fp16 */
	int *n;                    /* [n_layer] tail index after the last row */
	int first;                 /* tail index of the first row still held */
};

/* Backend buffers for cap rows of n_layer layers. 0, SEKV_EINVAL (a size
 * < 1), SEKV_ENOMEM. t is zeroed first; kv_tail_free it either way. */
int kv_tail_init(struct kv_tail *t, struct backend *be, int n_layer, int cap, int n_head_kv, int d_h);
void kv_tail_free(struct kv_tail *t); /* a zeroed t is a no-op */
/* Stores k, v [n_head_kv][d_h] (fp32, rounded to fp16) as tail index idx
 * of layer index l: idx is at most the layer's next row (an earlier one
 * is rewritten and the layer's rows after it are forgotten), held and
 * within cap rows of the first held. 0 or SEKV_EINVAL. */
int kv_tail_append(struct kv_tail *t, int l, int idx, const float *k, const float *v);
/* Rows held: the most over layers. */
int kv_tail_rows(const struct kv_tail *t);
/* Bytes held over all layers, fp16 K and V. */
size_t kv_tail_bytes(const struct kv_tail *t);
/* Forgets the rows before tail index first (0 or SEKV_EINVAL: before the
 * first held or past a layer's last row). */
int kv_tail_evict(struct kv_tail *t, int first);
/* The block of layer index l's held rows of KV head g (attention_mix). */
struct backend_mix_block kv_tail_block(const struct kv_tail *t, int l, int g);

#endif
