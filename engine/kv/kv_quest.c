/* kv_quest.c - Quest's decode stream (kv_quest.h): the document's rows in
 * host memory, grouped per (layer, KV head) so a page is contiguous; per
 * step and layer, page bounds from the metadata, the best pages per KV
 * head (kv_select_top), their rows written to a device buffer, and one
 * attention_mix over them and the tail (kv_tail.c).
 * Invariant: nothing is allocated after kv_quest_new.
 */
#include "engine/kv/kv_quest.h"

#include "engine/backend/backend.h"
#include "engine/base/err.h"
#include "engine/kv/kv_select.h"
#include "engine/kv/kv_tail.h"
#include "engine/model/model.h"
#include "engine/quant/quant.h"

#include <stdlib.h>
#include <string.h>

#define KV_QUEST_MAX_LAYER 64

struct kv_quest {
	struct kv_quest_params p;
	int32_t layer_id[KV_QUEST_MAX_LAYER];
	int n_tok, n_page;
	int n_sel;                  /* pages chosen per (layer, KV head) and step */
	int slot;                   /* device rows per (layer, KV head): n_sel * page */
	uint16_t *hk, *hv;          /* host tier [n_layer][n_head_kv][n_tok][d_h] fp16 */
	float *kmin, *kmax;         /* [n_layer][n_head_kv][n_page][d_h] page extremes */
	struct backend_buf *dk, *dv; /* device [n_layer][n_head_kv][slot][d_h] fp16 */
	struct kv_tail tail;
	struct backend_ws *ws;
	struct backend_mix_block *blk; /* [n_head_kv][2] */
	float *bound;               /* [n_page] scratch */
	int32_t *chosen;            /* [n_layer][n_head_kv][n_sel] pages of the last step */
	int *n_chosen;              /* [n_layer][n_head_kv] */
	int *n_rows;                /* [n_layer][n_head_kv] rows of those pages */
	int32_t *rowpos;            /* [n_layer][n_head_kv][slot] their positions */
	const struct model_probe *probe;
	float *probe_row;           /* [n_head][slot + tail_cap] */
};

float kv_quest_bound(const float *q, const float *kmin, const float *kmax, int d)
{
	float s = 0.0f;

	for (int i = 0; i < d; i++) {
		float a = q[i] * kmin[i], b = q[i] * kmax[i];
		s += a > b ? a : b;
	}
	return s;
}

void kv_quest_free(struct kv_quest *s)
{
	if (!s)
		return;
	if (s->p.be) {
		s->p.be->ops->buf_free(s->p.be, s->dk);
		s->p.be->ops->buf_free(s->p.be, s->dv);
		if (s->ws)
			s->p.be->ops->ws_free(s->ws);
	}
	kv_tail_free(&s->tail);
	free(s->hk);
	free(s->hv);
	free(s->kmin);
	free(s->kmax);
	free(s->blk);
	free(s->bound);
	free(s->chosen);
	free(s->n_chosen);
	free(s->n_rows);
	free(s->rowpos);
	free(s->probe_row);
	free(s);
}

/* (layer index l, KV head g)'s slot index. */
static size_t slot_of(const struct kv_quest *s, int l, int g)
{
	return (size_t)l * s->p.n_head_kv + g;
}

/* The host tier, per (layer, KV head), and each page's extremes. */
static void fill_host(struct kv_quest *s, const uint16_t *const *k, const uint16_t *const *v)
{
	int d = s->p.d_h, nkv = s->p.n_head_kv;

	for (int l = 0; l < s->p.n_layer; l++)
		for (int g = 0; g < nkv; g++) {
			size_t sl = slot_of(s, l, g);
			for (int t = 0; t < s->n_tok; t++) {
				size_t src = ((size_t)t * nkv + g) * d, dst = (sl * s->n_tok + t) * d;
				memcpy(s->hk + dst, k[l] + src, (size_t)d * sizeof *s->hk);
				memcpy(s->hv + dst, v[l] + src, (size_t)d * sizeof *s->hv);
			}
			for (int pg = 0; pg < s->n_page; pg++) {
				float *mn = s->kmin + (sl * s->n_page + pg) * d, *mx = s->kmax + (sl * s->n_page + pg) * d;
				int t1 = (pg + 1) * s->p.page < s->n_tok ? (pg + 1) * s->p.page : s->n_tok;
				for (int i = 0; i < d; i++)
					mn[i] = mx[i] = quant_f16_to_f32(s->hk[(sl * s->n_tok + (size_t)pg * s->p.page) * d + i]);
				for (int t = pg * s->p.page + 1; t < t1; t++)
					for (int i = 0; i < d; i++) {
						float x = quant_f16_to_f32(s->hk[(sl * s->n_tok + t) * d + i]);
						mn[i] = x < mn[i] ? x : mn[i];
						mx[i] = x > mx[i] ? x : mx[i];
					}
			}
		}
}

int kv_quest_new(struct kv_quest **out, const struct kv_quest_params *p, int n_tok,
		 const uint16_t *const *k, const uint16_t *const *v, char *err, size_t errlen)
{
	struct kv_quest *s;
	int rc;

	*out = NULL;
	if (!p || !p->be || !p->layer_id || p->n_layer < 1 || p->n_layer > KV_QUEST_MAX_LAYER ||
	    p->n_head_kv < 1 || p->n_head % p->n_head_kv || p->d_h < 1 || p->tail_cap < 1 ||
	    p->page < 1 || p->page_rows < p->page || n_tok < 0 || (n_tok && (!k || !v)))
		return sekv_errf(err, errlen, SEKV_EINVAL, "kv_quest_new: bad shape or arguments");
	if (!(s = calloc(1, sizeof *s)))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "kv_quest_new: out of memory");
	s->p = *p;
	memcpy(s->layer_id, p->layer_id, (size_t)p->n_layer * sizeof *s->layer_id);
	s->p.layer_id = s->layer_id;
	s->n_tok = n_tok;
	s->n_page = (n_tok + p->page - 1) / p->page;
	s->n_sel = p->page_rows / p->page < s->n_page ? p->page_rows / p->page : s->n_page;
	s->slot = s->n_sel * p->page;
	size_t n_slot = (size_t)p->n_layer * p->n_head_kv, d = (size_t)p->d_h;
	size_t host = n_slot * n_tok * d, meta = n_slot * s->n_page * d, dev = n_slot * s->slot * d;
	struct backend_ws_size wsz = { .n_batch = 1, .n_head = p->n_head, .d_head = p->d_h,
				       .mix_rows = s->slot + p->tail_cap };
	const struct backend_ops *op = p->be->ops;
	if (!(s->hk = malloc((host + 1) * sizeof *s->hk)) || !(s->hv = malloc((host + 1) * sizeof *s->hv)) ||
	    !(s->kmin = malloc((meta + 1) * sizeof *s->kmin)) ||
	    !(s->kmax = malloc((meta + 1) * sizeof *s->kmax)) ||
	    !(s->blk = calloc((size_t)p->n_head_kv * 2, sizeof *s->blk)) ||
	    !(s->bound = malloc(((size_t)s->n_page + 1) * sizeof *s->bound)) ||
	    !(s->chosen = calloc(n_slot * s->n_sel + 1, sizeof *s->chosen)) ||
	    !(s->n_chosen = calloc(n_slot, sizeof *s->n_chosen)) ||
	    !(s->n_rows = calloc(n_slot, sizeof *s->n_rows)) ||
	    !(s->rowpos = calloc(n_slot * s->slot + 1, sizeof *s->rowpos)) ||
	    !(s->probe_row = calloc((size_t)p->n_head * (s->slot + p->tail_cap), sizeof *s->probe_row))) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "kv_quest_new: out of memory (%zu host rows)",
			       n_slot * n_tok);
		goto fail;
	}
	if ((rc = op->ws_new(p->be, &wsz, &s->ws)) ||
	    (rc = op->buf_new(p->be, (dev + 1) * sizeof(uint16_t), &s->dk)) ||
	    (rc = op->buf_new(p->be, (dev + 1) * sizeof(uint16_t), &s->dv)) ||
	    (rc = kv_tail_init(&s->tail, p->be, p->n_layer, p->tail_cap, p->n_head_kv, p->d_h))) {
		rc = sekv_errf(err, errlen, rc, "kv_quest_new: backend buffers: %zu bytes",
			       2 * dev * sizeof(uint16_t));
		goto fail;
	}
	fill_host(s, k, v);
	*out = s;
	return 0;
fail:
	kv_quest_free(s);
	return rc;
}

size_t kv_quest_meta_bytes(const struct kv_quest *s)
{
	return model_kv_bytes(s->n_page, s->p.n_layer, s->p.n_head_kv, s->p.d_h);
}

size_t kv_quest_fixed_bytes(const struct kv_quest *s)
{
	int rows = s->slot < s->n_tok ? s->slot : s->n_tok;

	return kv_quest_meta_bytes(s) + model_kv_bytes(rows, s->p.n_layer, s->p.n_head_kv, s->p.d_h);
}

size_t kv_quest_resident_bytes(const void *ctx)
{
	const struct kv_quest *s = ctx;
	size_t b = kv_quest_meta_bytes(s) + kv_tail_bytes(&s->tail);

	for (size_t i = 0; i < (size_t)s->p.n_layer * s->p.n_head_kv; i++)
		b += model_kv_bytes(s->n_rows[i], 1, 1, s->p.d_h);
	return b;
}

int kv_quest_tail_rows(const void *ctx)
{
	return kv_tail_rows(&((const struct kv_quest *)ctx)->tail);
}

int kv_quest_evict(void *ctx, int pos)
{
	struct kv_quest *s = ctx;

	return kv_tail_evict(&s->tail, pos - s->n_tok);
}

void kv_quest_set_probe(void *ctx, const struct model_probe *p)
{
	((struct kv_quest *)ctx)->probe = p;
}

int kv_quest_chosen(const struct kv_quest *s, int l, int g, const int32_t **page)
{
	*page = s->chosen + slot_of(s, l, g) * s->n_sel;
	return s->n_chosen[slot_of(s, l, g)];
}

/* Chooses (layer index l, KV head g)'s pages for queries q [n_head][d_h]
 * and writes their rows to its device slot. 0 or a backend code. */
static int choose_pages(struct kv_quest *s, int l, int g, const float *q)
{
	struct backend *be = s->p.be;
	int d = s->p.d_h, group = s->p.n_head / s->p.n_head_kv, r = 0, rc = 0;
	size_t sl = slot_of(s, l, g);
	int32_t *chosen = s->chosen + sl * s->n_sel, *rowpos = s->rowpos + sl * s->slot;

	for (int pg = 0; pg < s->n_page; pg++) {
		const float *mn = s->kmin + (sl * s->n_page + pg) * d, *mx = s->kmax + (sl * s->n_page + pg) * d;
		float best = kv_quest_bound(q + (size_t)g * group * d, mn, mx, d);
		for (int h = 1; h < group; h++) {
			float b = kv_quest_bound(q + ((size_t)g * group + h) * d, mn, mx, d);
			best = b > best ? b : best;
		}
		s->bound[pg] = best;
	}
	s->n_chosen[sl] = kv_select_top(s->bound, NULL, s->n_page, s->n_sel, chosen);
	for (int c = 0; c < s->n_chosen[sl] && !rc; c++) {
		int t0 = chosen[c] * s->p.page;
		int n = t0 + s->p.page < s->n_tok ? s->p.page : s->n_tok - t0;
		size_t src = (sl * s->n_tok + t0) * d, dst = (sl * s->slot + r) * d * sizeof(uint16_t);
		size_t bytes = (size_t)n * d * sizeof(uint16_t);
		if (!(rc = be->ops->buf_write(be, s->dk, dst, s->hk + src, bytes)))
			rc = be->ops->buf_write(be, s->dv, dst, s->hv + src, bytes);
		for (int i = 0; i < n; i++)
			rowpos[r++] = t0 + i;
	}
	s->n_rows[sl] = r;
	return rc;
}

/* Chosen rows' probe mass back to their positions (tail rows hold no
 * document). */
static void probe_end(struct kv_quest *s, int l, int layer)
{
	const struct model_probe *p = s->probe;
	int group = s->p.n_head / s->p.n_head_kv;

	for (int i = 0; i < p->n && i < MODEL_PROBE_MAX; i++) {
		int h = p->head[i];
		if (p->layer[i] != layer || h < 0 || h >= s->p.n_head)
			continue;
		size_t sl = slot_of(s, l, h / group);
		const float *rm = s->probe_row + (size_t)h * (s->slot + s->p.tail_cap);
		const int32_t *rowpos = s->rowpos + sl * s->slot;
		float *m = p->mass + (size_t)i * p->n_pos;
		for (int r = 0; r < s->n_rows[sl]; r++)
			if (rowpos[r] < p->n_pos)
				m[rowpos[r]] += rm[r];
	}
}

int kv_quest_attend(void *ctx, int layer, int pos, const float *q,
		    const float *k, const float *v, float *out)
{
	struct kv_quest *s = ctx;
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
	for (int g = 0; g < s->p.n_head_kv; g++) {
		if ((rc = choose_pages(s, l, g, q)))
			return rc;
		s->blk[2 * g] = (struct backend_mix_block){ s->dk, s->dv, slot_of(s, l, g) * s->slot * s->p.d_h,
			(size_t)s->p.d_h, s->n_rows[slot_of(s, l, g)], BACKEND_ROW_F16, 0.0f, 0, NULL, NULL, 0, 0 };
		s->blk[2 * g + 1] = kv_tail_block(&s->tail, l, g);
	}
	mx = (struct backend_mix){ .q = q, .out = out, .n_head = s->p.n_head,
		.n_head_kv = s->p.n_head_kv, .d_head = s->p.d_h, .scale = s->p.q_scale,
		.blk = s->blk, .n_blk = 2 };
	if (s->probe && model_probe_backend(s->probe, layer, s->p.n_head, s->probe_row,
					    (size_t)s->slot + s->p.tail_cap, s->slot + s->blk[1].n, &pr))
		mx.probe = &pr;
	if ((rc = s->p.be->ops->attention_mix(s->p.be, s->ws, &mx)))
		return rc;
	if (mx.probe)
		probe_end(s, l, layer);
	return 0;
}
