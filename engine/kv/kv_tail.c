/* kv_tail.c - the conversation's rows of the rival KV methods (kv_tail.h):
 * one backend buffer pair per stream, each layer's rows packed from the
 * first held one, so evicting moves the rows left once per turn.
 */
#include "engine/kv/kv_tail.h"

#include "engine/base/err.h"
#include "engine/model/model.h"

#include <stdlib.h>
#include <string.h>

int kv_tail_init(struct kv_tail *t, struct backend *be, int n_layer, int cap, int n_head_kv, int d_h)
{
	size_t bytes;

	memset(t, 0, sizeof *t);
	if (!be || n_layer < 1 || cap < 1 || n_head_kv < 1 || d_h < 1)
		return SEKV_EINVAL;
	t->be = be;
	t->n_layer = n_layer;
	t->cap = cap;
	t->n_head_kv = n_head_kv;
	t->d_h = d_h;
	t->row = (size_t)n_head_kv * d_h;
	bytes = (size_t)n_layer * cap * t->row * sizeof(uint16_t);
	if (!(t->n = calloc((size_t)n_layer, sizeof *t->n)) ||
	    be->ops->buf_new(be, bytes, &t->k) || be->ops->buf_new(be, bytes, &t->v))
		return SEKV_ENOMEM;
	return 0;
}

void kv_tail_free(struct kv_tail *t)
{
	if (t->be) {
		t->be->ops->buf_free(t->be, t->k);
		t->be->ops->buf_free(t->be, t->v);
	}
	free(t->n);
	memset(t, 0, sizeof *t);
}

int kv_tail_append(struct kv_tail *t, int l, int idx, const float *k, const float *v)
{
	if (l < 0 || l >= t->n_layer || idx < t->first || idx - t->first >= t->cap || idx > t->n[l])
		return SEKV_EINVAL;
	t->be->ops->kv_store(t->be, t->k, t->v, t->n_layer * t->cap, (int)t->row, k, v,
			     l * t->cap + (idx - t->first), 1);
	t->n[l] = idx + 1;
	return 0;
}

int kv_tail_rows(const struct kv_tail *t)
{
	int n = 0;

	for (int l = 0; l < t->n_layer; l++)
		if (t->n[l] - t->first > n)
			n = t->n[l] - t->first;
	return n;
}

size_t kv_tail_bytes(const struct kv_tail *t)
{
	size_t b = 0;

	for (int l = 0; l < t->n_layer; l++)
		b += model_kv_bytes(t->n[l] - t->first, 1, t->n_head_kv, t->d_h);
	return b;
}

int kv_tail_evict(struct kv_tail *t, int first)
{
	size_t rb = t->row * sizeof(uint16_t);
	int lo = t->n[0];

	for (int l = 1; l < t->n_layer; l++)
		lo = t->n[l] < lo ? t->n[l] : lo;
	if (first < t->first || first > lo)
		return SEKV_EINVAL;
	int drop = first - t->first;
	for (int l = 0; l < t->n_layer && drop > 0; l++) {
		size_t at = (size_t)l * t->cap * rb, keep = (size_t)(t->n[l] - first) * rb;
		t->be->ops->buf_copy(t->be, t->k, at, t->k, at + (size_t)drop * rb, keep);
		t->be->ops->buf_copy(t->be, t->v, at, t->v, at + (size_t)drop * rb, keep);
	}
	t->first = first;
	return 0;
}

struct backend_mix_block kv_tail_block(const struct kv_tail *t, int l, int g)
{
	return (struct backend_mix_block){ t->k, t->v,
		(size_t)l * t->cap * t->row + (size_t)g * t->d_h, t->row,
		t->n[l] - t->first, BACKEND_ROW_F16, 0.0f, 0, NULL, NULL, 0, 0 };
}
