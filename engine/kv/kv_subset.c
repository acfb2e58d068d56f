/* kv_subset.c - a decode stream over a kept subset of a document's exact
 * rows (kv_subset.h): the rows of each (layer, KV head) are copied once
 * into backend buffers, the conversation's rows are appended as tail rows,
 * and every global layer attends with one attention_mix over two blocks
 * per KV head (its kept rows, the tail).
 * Invariant: nothing is allocated after kv_subset_new; SnapKV's choice
 * moves the kept rows to the front of their (layer, KV head) slot.
 */
#include "engine/kv/kv_subset.h"

#include "engine/backend/backend.h"
#include "engine/base/err.h"
#include "engine/kv/kv_select.h"
#include "engine/kv/kv_tail.h"
#include "engine/model/model.h"

#include <stdlib.h>
#include <string.h>

#define KV_SUBSET_MAX_LAYER 64

struct kv_subset {
	struct kv_subset_params p;
	int32_t layer_id[KV_SUBSET_MAX_LAYER];
	int32_t *pos;               /* [n_layer][n_head_kv][cap] kept positions,
	                               the first n_keep of each slot, ascending */
	int n_keep, cap, n_tok;
	size_t row;                 /* elements of one position's row, all KV heads */
	struct backend_buf *keep_k, *keep_v; /* [n_layer][n_head_kv][cap][d_h] fp16 */
	struct kv_tail tail;        /* the conversation's rows */
	struct backend_ws *ws;
	struct backend_mix_block *blk; /* [n_head_kv][2] */
	const struct model_probe *probe;
	float *probe_row;           /* [n_head][cap + tail_cap] */
	int voting;                 /* SnapKV before its choice */
	float *vote;                /* [n_layer][n_head_kv][n_tok] SnapKV votes, or NULL */
	float *pool;                /* [n_tok] SnapKV pooling scratch */
	int32_t *sel;               /* [n_tok] SnapKV choice scratch */
};

void kv_subset_free(struct kv_subset *s)
{
	if (!s)
		return;
	if (s->p.be) {
		const struct backend_ops *op = s->p.be->ops;
		op->buf_free(s->p.be, s->keep_k);
		op->buf_free(s->p.be, s->keep_v);
		if (s->ws)
			op->ws_free(s->ws);
	}
	kv_tail_free(&s->tail);
	free(s->pos);
	free(s->blk);
	free(s->probe_row);
	free(s->vote);
	free(s->pool);
	free(s->sel);
	free(s);
}

/* Element offset of (layer index l, KV head g)'s kept row r. */
static size_t keep_at(const struct kv_subset *s, int l, int g, int r)
{
	return (((size_t)l * s->p.n_head_kv + g) * s->cap + r) * s->p.d_h;
}

/* The kept rows of every (layer, KV head), gathered on the host and
 * written once. */
static int copy_rows(struct kv_subset *s, const uint16_t *const *k, const uint16_t *const *v)
{
	const struct backend_ops *op = s->p.be->ops;
	int dh = s->p.d_h;
	size_t bytes = (size_t)s->n_keep * dh * sizeof(uint16_t);
	uint16_t *hk = malloc(bytes ? bytes : 1), *hv = malloc(bytes ? bytes : 1);
	int rc = hk && hv ? 0 : SEKV_ENOMEM;

	for (int l = 0; !rc && bytes && l < s->p.n_layer; l++)
		for (int g = 0; !rc && g < s->p.n_head_kv; g++) {
			const int32_t *pos = kv_subset_pos(s, l, g);
			for (int i = 0; i < s->n_keep; i++) {
				size_t src = (size_t)pos[i] * s->row + (size_t)g * dh;
				memcpy(hk + (size_t)i * dh, k[l] + src, (size_t)dh * sizeof(uint16_t));
				memcpy(hv + (size_t)i * dh, v[l] + src, (size_t)dh * sizeof(uint16_t));
			}
			size_t at = keep_at(s, l, g, 0) * sizeof(uint16_t);
			if (!(rc = op->buf_write(s->p.be, s->keep_k, at, hk, bytes)))
				rc = op->buf_write(s->p.be, s->keep_v, at, hv, bytes);
		}
	free(hk);
	free(hv);
	return rc;
}

/* Shapes, positions and the SnapKV conditions; a message when bad. */
static int check_new(const struct kv_subset_params *p, const int32_t *pos, int n_keep, int n_tok,
		     const uint16_t *const *k, const uint16_t *const *v, char *err, size_t errlen)
{
	if (!p || !p->be || !p->layer_id || p->n_layer < 1 || p->n_layer > KV_SUBSET_MAX_LAYER ||
	    p->n_head_kv < 1 || p->n_head % p->n_head_kv || p->d_h < 1 || p->tail_cap < 1 ||
	    n_keep < 0 || n_keep > n_tok || (n_keep && (!pos || !k || !v)) || p->snap_keep < 0)
		return sekv_errf(err, errlen, SEKV_EINVAL, "kv_subset_new: bad shape or arguments");
	for (int s = 0; s < p->n_layer * p->n_head_kv; s++)
		for (int i = 0; i < n_keep; i++) {
			const int32_t *ps = pos + (size_t)s * n_keep;
			if (ps[i] < 0 || ps[i] >= n_tok || (i && ps[i] <= ps[i - 1]))
				return sekv_errf(err, errlen, SEKV_EINVAL,
						 "kv_subset_new: layer %d KV head %d: position %d of %d: %d "
						 "not ascending in [0, %d)", s / p->n_head_kv, s % p->n_head_kv,
						 i, n_keep, ps[i], n_tok);
		}
	if (p->snap_keep && n_keep != n_tok)
		return sekv_errf(err, errlen, SEKV_EINVAL,
				 "kv_subset_new: SnapKV: %d of %d rows given; its question turn sees them all",
				 n_keep, n_tok);
	if (p->snap_keep && (p->snap_kernel < 1 || p->snap_kernel % 2 == 0))
		return sekv_errf(err, errlen, SEKV_EINVAL, "kv_subset_new: SnapKV: kernel %d is not odd",
				 p->snap_kernel);
	if (p->snap_keep && p->n_head > BACKEND_PROBE_MAX)
		return sekv_errf(err, errlen, SEKV_EUNSUP,
				 "kv_subset_new: SnapKV: %d query heads, votes are probed for at most %d",
				 p->n_head, BACKEND_PROBE_MAX);
	return 0;
}

int kv_subset_new(struct kv_subset **out, const struct kv_subset_params *p,
		  const int32_t *pos, int n_keep, int n_tok,
		  const uint16_t *const *k, const uint16_t *const *v,
		  char *err, size_t errlen)
{
	struct kv_subset *s;
	const struct backend_ops *op;
	int rc;

	*out = NULL;
	if ((rc = check_new(p, pos, n_keep, n_tok, k, v, err, errlen)))
		return rc;
	if (!(s = calloc(1, sizeof *s)))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "kv_subset_new: out of memory");
	s->p = *p;
	memcpy(s->layer_id, p->layer_id, (size_t)p->n_layer * sizeof *s->layer_id);
	s->p.layer_id = s->layer_id;
	s->n_keep = s->cap = n_keep;
	s->n_tok = n_tok;
	s->row = (size_t)p->n_head_kv * p->d_h;
	op = p->be->ops;
	struct backend_ws_size wsz = { .n_batch = 1, .n_head = p->n_head, .d_head = p->d_h,
				       .mix_rows = n_keep + p->tail_cap };
	size_t n_pos = (size_t)p->n_layer * p->n_head_kv * n_keep;
	size_t keep = n_pos * p->d_h * sizeof(uint16_t);
	size_t tail = (size_t)p->n_layer * p->tail_cap * s->row * sizeof(uint16_t);
	if (!(s->pos = malloc((n_pos ? n_pos : 1) * sizeof *s->pos)) ||
	    !(s->blk = calloc((size_t)p->n_head_kv * 2, sizeof *s->blk)) ||
	    !(s->probe_row = calloc((size_t)p->n_head * (n_keep + p->tail_cap), sizeof *s->probe_row)) ||
	    (p->snap_keep && (!(s->vote = calloc((size_t)p->n_layer * p->n_head_kv * n_tok, sizeof *s->vote)) ||
			      !(s->pool = malloc((size_t)(n_tok ? n_tok : 1) * sizeof *s->pool)) ||
			      !(s->sel = malloc((size_t)(n_tok ? n_tok : 1) * sizeof *s->sel))))) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "kv_subset_new: out of memory");
		goto fail;
	}
	memcpy(s->pos, pos, n_pos * sizeof *s->pos);
	s->voting = p->snap_keep > 0;
	if ((rc = op->ws_new(p->be, &wsz, &s->ws)) ||
	    (rc = op->buf_new(p->be, keep ? keep : 1, &s->keep_k)) ||
	    (rc = op->buf_new(p->be, keep ? keep : 1, &s->keep_v)) ||
	    (rc = kv_tail_init(&s->tail, p->be, p->n_layer, p->tail_cap, p->n_head_kv, p->d_h)) ||
	    (rc = copy_rows(s, k, v))) {
		rc = sekv_errf(err, errlen, rc, "kv_subset_new: backend buffers: %zu bytes",
			       2 * (keep + tail));
		goto fail;
	}
	*out = s;
	return 0;
fail:
	kv_subset_free(s);
	return rc;
}

int kv_subset_n_keep(const struct kv_subset *s)
{
	return s->n_keep;
}

const int32_t *kv_subset_pos(const struct kv_subset *s, int l, int g)
{
	return s->pos + ((size_t)l * s->p.n_head_kv + g) * s->cap;
}

size_t kv_subset_fixed_bytes(const struct kv_subset *s)
{
	int n = s->voting && s->p.snap_keep < s->n_keep ? s->p.snap_keep : s->n_keep;

	return model_kv_bytes(n, s->p.n_layer, s->p.n_head_kv, s->p.d_h);
}

size_t kv_subset_resident_bytes(const void *ctx)
{
	const struct kv_subset *s = ctx;
	return model_kv_bytes(s->n_keep, s->p.n_layer, s->p.n_head_kv, s->p.d_h) +
	       kv_tail_bytes(&s->tail);
}

int kv_subset_tail_rows(const void *ctx)
{
	return kv_tail_rows(&((const struct kv_subset *)ctx)->tail);
}

int kv_subset_evict(void *ctx, int pos)
{
	struct kv_subset *s = ctx;

	return kv_tail_evict(&s->tail, pos - s->n_tok);
}

void kv_subset_set_probe(void *ctx, const struct model_probe *p)
{
	((struct kv_subset *)ctx)->probe = p;
}

int kv_subset_answer_begin(void *ctx)
{
	struct kv_subset *s = ctx;
	struct backend *be = s->p.be;
	size_t rb = (size_t)s->p.d_h * sizeof(uint16_t);
	int n = s->n_keep;

	if (!s->voting)
		return 0;
	for (int l = 0; l < s->p.n_layer; l++)
		for (int g = 0; g < s->p.n_head_kv; g++) {
			const float *vote = s->vote + ((size_t)l * s->p.n_head_kv + g) * s->n_tok;
			int32_t *pos = s->pos + ((size_t)l * s->p.n_head_kv + g) * s->cap;
			n = kv_select_snapkv(vote, s->n_tok, s->p.snap_keep, s->p.snap_kernel, s->pool, s->sel);
			/* sel ascending and sel[r] >= r: row r is written only after
			 * every row it overwrites has been read */
			for (int r = 0; r < n; r++) {
				size_t dst = keep_at(s, l, g, r) * sizeof(uint16_t);
				size_t src = keep_at(s, l, g, s->sel[r]) * sizeof(uint16_t);
				be->ops->buf_copy(be, s->keep_k, dst, s->keep_k, src, rb);
				be->ops->buf_copy(be, s->keep_v, dst, s->keep_v, src, rb);
				pos[r] = pos[s->sel[r]];
			}
		}
	s->n_keep = n;
	s->voting = 0;
	return 0;
}

/* Probe rows back to positions: the evidence probe's entries get their
 * kept rows' mass (tail rows hold no document); while SnapKV votes, every
 * query head's weight joins its KV head's vote. */
static void probe_end(struct kv_subset *s, int l, int layer)
{
	const struct model_probe *p = s->probe;
	size_t ld = (size_t)s->cap + s->p.tail_cap;
	int group = s->p.n_head / s->p.n_head_kv;

	for (int i = 0; p && i < p->n && i < MODEL_PROBE_MAX; i++) {
		int h = p->head[i];
		if (p->layer[i] != layer || h < 0 || h >= s->p.n_head)
			continue;
		const float *rm = s->probe_row + (size_t)h * ld;
		const int32_t *pos = kv_subset_pos(s, l, h / group);
		float *m = p->mass + (size_t)i * p->n_pos;
		for (int r = 0; r < s->n_keep; r++)
			if (pos[r] < p->n_pos)
				m[pos[r]] += rm[r];
	}
	for (int h = 0; s->voting && h < s->p.n_head; h++) {
		const float *rm = s->probe_row + (size_t)h * ld;
		const int32_t *pos = kv_subset_pos(s, l, h / group);
		float *vote = s->vote + ((size_t)l * s->p.n_head_kv + h / group) * s->n_tok;
		for (int r = 0; r < s->n_keep; r++)
			vote[pos[r]] += rm[r];
	}
}

/* The backend probe of this call: every query head while SnapKV votes,
 * else the evidence probe's heads on this layer. 1 when there is one. */
static int probe_begin(struct kv_subset *s, int layer, int n_key, struct backend_probe *pr)
{
	size_t ld = (size_t)s->cap + s->p.tail_cap;

	if (!s->voting)
		return s->probe && model_probe_backend(s->probe, layer, s->p.n_head, s->probe_row,
						       ld, n_key, pr);
	pr->n = s->p.n_head;
	pr->n_key = n_key;
	for (int h = 0; h < s->p.n_head; h++) {
		pr->head[h] = h;
		pr->mass[h] = s->probe_row + (size_t)h * ld;
		memset(pr->mass[h], 0, (size_t)n_key * sizeof(float));
	}
	return 1;
}

int kv_subset_attend(void *ctx, int layer, int pos, const float *q,
		     const float *k, const float *v, float *out)
{
	struct kv_subset *s = ctx;
	const struct backend_ops *op;
	struct backend_mix mx;
	struct backend_probe pr;
	int l = -1, rc;

	if (!s || !q || !k || !v || !out)
		return SEKV_EINVAL;
	for (int i = 0; i < s->p.n_layer; i++)
		if (s->layer_id[i] == layer)
			l = i;
	if (l < 0 || kv_tail_append(&s->tail, l, pos - s->n_tok, k, v))
		return SEKV_EINVAL;
	op = s->p.be->ops;
	for (int g = 0; g < s->p.n_head_kv; g++) {
		s->blk[2 * g] = (struct backend_mix_block){ s->keep_k, s->keep_v, keep_at(s, l, g, 0),
			(size_t)s->p.d_h, s->n_keep, BACKEND_ROW_F16, 0.0f, 0, NULL, NULL, 0, 0 };
		s->blk[2 * g + 1] = kv_tail_block(&s->tail, l, g);
	}
	mx = (struct backend_mix){ .q = q, .out = out, .n_head = s->p.n_head,
		.n_head_kv = s->p.n_head_kv, .d_head = s->p.d_h, .scale = s->p.q_scale,
		.blk = s->blk, .n_blk = 2 };
	if (probe_begin(s, layer, s->n_keep + s->blk[1].n, &pr))
		mx.probe = &pr;
	if ((rc = op->attention_mix(s->p.be, s->ws, &mx)))
		return rc;
	if (mx.probe)
		probe_end(s, l, layer);
	return 0;
}
