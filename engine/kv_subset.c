/* kv_subset.c - a decode stream over a kept subset of a document's exact
 * rows (kv_subset.h): the rows are copied once into backend buffers, the
 * conversation's rows are appended as tail rows, and every global layer
 * attends with one attention_mix over two blocks (kept, tail).
 * Invariant: nothing is allocated after kv_subset_new.
 */
#include "engine/kv_subset.h"

#include "engine/backend.h"
#include "engine/err.h"
#include "engine/model.h"

#include <stdlib.h>
#include <string.h>

#define KV_SUBSET_MAX_LAYER 64

struct kv_subset {
	struct kv_subset_params p;
	int32_t layer_id[KV_SUBSET_MAX_LAYER];
	int32_t *pos;               /* [n_pos] kept positions, ascending */
	int n_pos, n_tok;
	size_t row;                 /* elements of one position's row, all KV heads */
	struct backend_buf *keep_k, *keep_v; /* [n_layer][n_pos][row] fp16 */
	struct backend_buf *tail_k, *tail_v; /* [n_layer][tail_cap][row] fp16 */
	struct backend_ws *ws;
	int *n_tail;                /* [n_layer] tail index after the last row */
	int tail_first;             /* tail index of the first row still held */
	struct backend_mix_block *blk; /* [n_head_kv][2] */
	const struct model_probe *probe;
	float *probe_row;           /* [n_head][n_pos + tail_cap] */
};

int kv_select_streaming(int n_tok, int n_keep, int n_sink, int32_t *out)
{
	int n = 0;

	if (n_tok < 0 || n_keep < 0 || n_sink < 0)
		return SEKV_EINVAL;
	if (n_keep > n_tok)
		n_keep = n_tok;
	if (n_sink > n_keep)
		n_sink = n_keep;
	for (int i = 0; i < n_sink; i++)
		out[n++] = i;
	for (int i = n_tok - (n_keep - n_sink); i < n_tok; i++)
		out[n++] = i;
	return n;
}

void kv_subset_free(struct kv_subset *s)
{
	if (!s)
		return;
	if (s->p.be) {
		const struct backend_ops *op = s->p.be->ops;
		struct backend_buf *b[] = { s->keep_k, s->keep_v, s->tail_k, s->tail_v };
		for (size_t i = 0; i < sizeof b / sizeof *b; i++)
			op->buf_free(s->p.be, b[i]);
		if (s->ws)
			op->ws_free(s->ws);
	}
	free(s->pos);
	free(s->n_tail);
	free(s->blk);
	free(s->probe_row);
	free(s);
}

/* The kept rows of every layer, gathered on the host and written once. */
static int copy_rows(struct kv_subset *s, const uint16_t *const *k, const uint16_t *const *v)
{
	const struct backend_ops *op = s->p.be->ops;
	size_t bytes = (size_t)s->n_pos * s->row * sizeof(uint16_t);
	uint16_t *hk = malloc(bytes ? bytes : 1), *hv = malloc(bytes ? bytes : 1);
	int rc = hk && hv ? 0 : SEKV_ENOMEM;

	for (int l = 0; !rc && l < s->p.n_layer; l++) {
		for (int i = 0; i < s->n_pos; i++) {
			memcpy(hk + (size_t)i * s->row, k[l] + (size_t)s->pos[i] * s->row,
			       s->row * sizeof(uint16_t));
			memcpy(hv + (size_t)i * s->row, v[l] + (size_t)s->pos[i] * s->row,
			       s->row * sizeof(uint16_t));
		}
		if (bytes && ((rc = op->buf_write(s->p.be, s->keep_k, (size_t)l * bytes, hk, bytes)) ||
			      (rc = op->buf_write(s->p.be, s->keep_v, (size_t)l * bytes, hv, bytes))))
			break;
	}
	free(hk);
	free(hv);
	return rc;
}

int kv_subset_new(struct kv_subset **out, const struct kv_subset_params *p,
		  const int32_t *pos, int n_pos, int n_tok,
		  const uint16_t *const *k, const uint16_t *const *v,
		  char *err, size_t errlen)
{
	struct kv_subset *s;
	const struct backend_ops *op;
	int rc;

	*out = NULL;
	if (!p || !p->be || !p->layer_id || p->n_layer < 1 || p->n_layer > KV_SUBSET_MAX_LAYER ||
	    p->n_head_kv < 1 || p->n_head % p->n_head_kv || p->d_h < 1 || p->tail_cap < 1 ||
	    n_pos < 0 || n_pos > n_tok || (n_pos && (!pos || !k || !v)))
		return sekv_errf(err, errlen, SEKV_EINVAL, "kv_subset_new: bad shape or arguments");
	for (int i = 0; i < n_pos; i++)
		if (pos[i] < 0 || pos[i] >= n_tok || (i && pos[i] <= pos[i - 1]))
			return sekv_errf(err, errlen, SEKV_EINVAL,
					 "kv_subset_new: position %d of %d: %d not ascending in [0, %d)",
					 i, n_pos, pos[i], n_tok);
	if (!(s = calloc(1, sizeof *s)))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "kv_subset_new: out of memory");
	s->p = *p;
	memcpy(s->layer_id, p->layer_id, (size_t)p->n_layer * sizeof *s->layer_id);
	s->p.layer_id = s->layer_id;
	s->n_pos = n_pos;
	s->n_tok = n_tok;
	s->row = (size_t)p->n_head_kv * p->d_h;
	op = p->be->ops;
	struct backend_ws_size wsz = { .n_batch = 1, .n_head = p->n_head, .d_head = p->d_h,
				       .mix_rows = n_pos + p->tail_cap };
	size_t keep = (size_t)p->n_layer * n_pos * s->row * sizeof(uint16_t);
	size_t tail = (size_t)p->n_layer * p->tail_cap * s->row * sizeof(uint16_t);
	if (!(s->pos = malloc((size_t)(n_pos ? n_pos : 1) * sizeof *s->pos)) ||
	    !(s->n_tail = calloc((size_t)p->n_layer, sizeof *s->n_tail)) ||
	    !(s->blk = calloc((size_t)p->n_head_kv * 2, sizeof *s->blk)) ||
	    !(s->probe_row = calloc((size_t)p->n_head * (n_pos + p->tail_cap), sizeof *s->probe_row))) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "kv_subset_new: out of memory");
		goto fail;
	}
	memcpy(s->pos, pos, (size_t)n_pos * sizeof *s->pos);
	if ((rc = op->ws_new(p->be, &wsz, &s->ws)) ||
	    (rc = op->buf_new(p->be, keep ? keep : 1, &s->keep_k)) ||
	    (rc = op->buf_new(p->be, keep ? keep : 1, &s->keep_v)) ||
	    (rc = op->buf_new(p->be, tail, &s->tail_k)) ||
	    (rc = op->buf_new(p->be, tail, &s->tail_v)) ||
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

size_t kv_subset_fixed_bytes(const struct kv_subset *s)
{
	return model_kv_bytes(s->n_pos, s->p.n_layer, s->p.n_head_kv, s->p.d_h);
}

size_t kv_subset_resident_bytes(const void *ctx)
{
	const struct kv_subset *s = ctx;
	size_t b = kv_subset_fixed_bytes(s);

	for (int l = 0; l < s->p.n_layer; l++)
		b += model_kv_bytes(s->n_tail[l] - s->tail_first, 1, s->p.n_head_kv, s->p.d_h);
	return b;
}

int kv_subset_tail_rows(const void *ctx)
{
	const struct kv_subset *s = ctx;
	int n = 0;

	for (int l = 0; l < s->p.n_layer; l++)
		if (s->n_tail[l] - s->tail_first > n)
			n = s->n_tail[l] - s->tail_first;
	return n;
}

int kv_subset_evict(void *ctx, int pos)
{
	struct kv_subset *s = ctx;
	int first = pos - s->n_tok, lo = s->n_tail[0];
	size_t rb = s->row * sizeof(uint16_t);

	for (int l = 1; l < s->p.n_layer; l++)
		lo = s->n_tail[l] < lo ? s->n_tail[l] : lo;
	if (first < s->tail_first || first > lo)
		return SEKV_EINVAL;
	int drop = first - s->tail_first;
	for (int l = 0; l < s->p.n_layer && drop > 0; l++) {
		size_t at = (size_t)l * s->p.tail_cap * rb, keep = (size_t)(s->n_tail[l] - first) * rb;
		s->p.be->ops->buf_copy(s->p.be, s->tail_k, at, s->tail_k, at + (size_t)drop * rb, keep);
		s->p.be->ops->buf_copy(s->p.be, s->tail_v, at, s->tail_v, at + (size_t)drop * rb, keep);
	}
	s->tail_first = first;
	return 0;
}

void kv_subset_set_probe(void *ctx, const struct model_probe *p)
{
	((struct kv_subset *)ctx)->probe = p;
}

/* Kept rows' mass to their positions (tail rows hold no document). */
static void probe_end(struct kv_subset *s, int layer)
{
	const struct model_probe *p = s->probe;

	for (int i = 0; i < p->n && i < MODEL_PROBE_MAX; i++) {
		int h = p->head[i];
		if (p->layer[i] != layer || h < 0 || h >= s->p.n_head)
			continue;
		const float *rm = s->probe_row + (size_t)h * (s->n_pos + s->p.tail_cap);
		float *m = p->mass + (size_t)i * p->n_pos;
		for (int r = 0; r < s->n_pos; r++)
			if (s->pos[r] < p->n_pos)
				m[s->pos[r]] += rm[r];
	}
}

int kv_subset_attend(void *ctx, int layer, int pos, const float *q,
		     const float *k, const float *v, float *out)
{
	struct kv_subset *s = ctx;
	const struct backend_ops *op;
	struct backend_mix mx;
	struct backend_probe pr;
	int l = -1, idx, rc;

	if (!s || !q || !k || !v || !out)
		return SEKV_EINVAL;
	for (int i = 0; i < s->p.n_layer; i++)
		if (s->layer_id[i] == layer)
			l = i;
	idx = pos - s->n_tok;
	if (l < 0 || idx < s->tail_first || idx - s->tail_first >= s->p.tail_cap || idx > s->n_tail[l])
		return SEKV_EINVAL;
	op = s->p.be->ops;
	op->kv_store(s->p.be, s->tail_k, s->tail_v, s->p.n_layer * s->p.tail_cap, (int)s->row, k, v,
		     l * s->p.tail_cap + (idx - s->tail_first), 1);
	s->n_tail[l] = idx + 1;
	for (int kv = 0; kv < s->p.n_head_kv; kv++) {
		s->blk[2 * kv] = (struct backend_mix_block){ s->keep_k, s->keep_v,
			(size_t)l * s->n_pos * s->row + (size_t)kv * s->p.d_h, s->row, s->n_pos, 0, 0.0f, 0 };
		s->blk[2 * kv + 1] = (struct backend_mix_block){ s->tail_k, s->tail_v,
			(size_t)l * s->p.tail_cap * s->row + (size_t)kv * s->p.d_h, s->row,
			s->n_tail[l] - s->tail_first, 0, 0.0f, 0 };
	}
	mx = (struct backend_mix){ .q = q, .out = out, .n_head = s->p.n_head,
		.n_head_kv = s->p.n_head_kv, .d_head = s->p.d_h, .scale = s->p.q_scale,
		.blk = s->blk, .n_blk = 2 };
	if (s->probe && model_probe_backend(s->probe, layer, s->p.n_head, s->probe_row,
					    (size_t)(s->n_pos + s->p.tail_cap),
					    s->n_pos + s->n_tail[l] - s->tail_first, &pr))
		mx.probe = &pr;
	if ((rc = op->attention_mix(s->p.be, s->ws, &mx)))
		return rc;
	if (mx.probe)
		probe_end(s, layer);
	return 0;
}
