/* devrows.c - the rows a SeKV decode stream keeps on the device tier, at
 * the memory's device type (sekv_mem.dev_i8): fp16 as stored, or int8 with
 * one fp32 scale per row and KV head (about 0.53x the bytes, so the same
 * budget holds nearly twice the rows; issue 19).
 * Keys are divided by per-channel scales kc before they are quantised (a
 * few channels of a key can be tens of times larger than the rest, and
 * one scale per row would round the others away; KIVI, arXiv 2402.02750,
 * quantises keys per channel for the same reason); the query is multiplied
 * by kc instead, so q . k is unchanged. kc is the channel's largest
 * magnitude over the memory's exact rows and summaries (fixed per stream).
 * Invariant: every key row of one stream's mixed attention (exact, tail,
 * summary, reconstructed) is scaled by the same kc. attend.c owns the
 * rest of the ctx.
 */
#include "engine/sekv/ctx_int.h"
#include "engine/base/err.h"
#include "engine/quant/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* kc of layer l, KV head g over n fp16 key rows at k (row elements apart). */
static void channel_max(const uint16_t *k, size_t n, size_t row, int d, float *tmp, float *kc)
{
	for (size_t i = 0; i < n; i++) {
		quant_f16_to_f32_row(k + i * row, tmp, (size_t)d);
		for (int j = 0; j < d; j++)
			if (fabsf(tmp[j]) > kc[j])
				kc[j] = fabsf(tmp[j]);
	}
}

/* kc of every layer and KV head; a channel never seen large gets 1/100 of
 * the head's largest (a rebuilt row's own scale covers what exceeds it). */
static void channel_scales(struct sekv_ctx *c)
{
	const struct sekv_mem *m = c->m;
	int d = m->d_h;
	size_t row = (size_t)m->n_head_kv * d;

	for (int l = 0; l < m->n_layer; l++)
		for (int g = 0; g < m->n_head_kv; g++) {
			float *kc = c->kc + ((size_t)l * m->n_head_kv + g) * d, top = 0;
			memset(kc, 0, (size_t)d * sizeof *kc);
			channel_max(m->exact_k + (size_t)l * m->n_exact * row + (size_t)g * d,
				    (size_t)m->n_exact, row, d, c->tail8_f, kc);
			channel_max(m->k_bar + (size_t)l * m->n_comp * row + (size_t)g * d,
				    (size_t)m->n_comp, row, d, c->tail8_f, kc);
			for (int j = 0; j < d; j++)
				top = kc[j] > top ? kc[j] : top;
			for (int j = 0; j < d; j++)
				kc[j] = top > 0 ? fmaxf(kc[j], 0.01f * top) : 1.0f;
		}
}

/* One row of n_head_kv heads (fp32 x) into int8 q and scales s, keys
 * divided by their layer's kc (kc NULL: values). x is clobbered. */
static void quant_row(const struct sekv_ctx *c, const float *kc, float *x, int8_t *q, float *s)
{
	int d = c->m->d_h;

	for (int g = 0; g < c->m->n_head_kv; g++) {
		float *xg = x + (size_t)g * d;
		for (int j = 0; kc && j < d; j++)
			xg[j] /= kc[(size_t)g * d + j];
		s[g] = quant_f32_to_i8_row(xg, q + (size_t)g * d, (size_t)d);
	}
}

/* n fp16 rows (all KV heads) of layer l into int8 rows and scales. */
static void quant_rows(struct sekv_ctx *c, int l, int key, const uint16_t *x, size_t n,
		       int8_t *q, float *s)
{
	const struct sekv_mem *m = c->m;
	size_t row = (size_t)m->n_head_kv * m->d_h;
	const float *kc = key ? c->kc + (size_t)l * row : NULL;

	for (size_t i = 0; i < n; i++) {
		quant_f16_to_f32_row(x + i * row, c->tail8_f, row);
		quant_row(c, kc, c->tail8_f, q + i * row, s + i * m->n_head_kv);
	}
}

int sekv_dev_open(struct sekv_ctx *c)
{
	const struct sekv_mem *m = c->m;
	const struct backend_ops *op = c->be->ops;
	size_t row = (size_t)m->n_head_kv * m->d_h, L = (size_t)m->n_layer;
	size_t ne = L * m->n_exact, nb = L * m->n_comp, at;
	int8_t *q;
	float *s;
	int rc;

	if (!c->dev_i8) {
		/* fp16: the memory's own rows */
		if ((rc = op->buf_wrap(c->be, m->exact_k, ne * row * 2, &c->exact_k)) ||
		    (rc = op->buf_wrap(c->be, m->exact_v, ne * row * 2, &c->exact_v)) ||
		    (rc = op->buf_wrap(c->be, m->k_bar, nb * row * 2, &c->bar_k)) ||
		    (rc = op->buf_wrap(c->be, m->v_bar, nb * row * 2, &c->bar_v)))
			return rc;
		return 0;
	}
	channel_scales(c);
	/* codes, then scales: [exact k, exact v, bar k, bar v] */
	at = 2 * (ne + nb) * row;
	at = (at + sizeof(float) - 1) / sizeof(float) * sizeof(float);
	if (!(c->dev_host = malloc(at + 2 * (ne + nb) * m->n_head_kv * sizeof(float) + 1)))
		return SEKV_ENOMEM;
	q = c->dev_host;
	s = (float *)((char *)c->dev_host + at);
	for (int l = 0; l < m->n_layer; l++) {
		size_t e = (size_t)l * m->n_exact, b = (size_t)l * m->n_comp;
		quant_rows(c, l, 1, m->exact_k + e * row, (size_t)m->n_exact, q + e * row,
			   s + e * m->n_head_kv);
		quant_rows(c, l, 0, m->exact_v + e * row, (size_t)m->n_exact, q + (ne + e) * row,
			   s + (ne + e) * m->n_head_kv);
		quant_rows(c, l, 1, m->k_bar + b * row, (size_t)m->n_comp, q + (2 * ne + b) * row,
			   s + (2 * ne + b) * m->n_head_kv);
		quant_rows(c, l, 0, m->v_bar + b * row, (size_t)m->n_comp,
			   q + (2 * ne + nb + b) * row, s + (2 * ne + nb + b) * m->n_head_kv);
	}
	size_t sk = m->n_head_kv * sizeof(float);
	if ((rc = op->buf_wrap(c->be, q, ne * row, &c->exact_k)) ||
	    (rc = op->buf_wrap(c->be, q + ne * row, ne * row, &c->exact_v)) ||
	    (rc = op->buf_wrap(c->be, q + 2 * ne * row, nb * row, &c->bar_k)) ||
	    (rc = op->buf_wrap(c->be, q + (2 * ne + nb) * row, nb * row, &c->bar_v)) ||
	    (rc = op->buf_wrap(c->be, s, ne * sk, &c->exact_ks)) ||
	    (rc = op->buf_wrap(c->be, s + ne * m->n_head_kv, ne * sk, &c->exact_vs)) ||
	    (rc = op->buf_wrap(c->be, s + 2 * ne * m->n_head_kv, nb * sk, &c->bar_ks)) ||
	    (rc = op->buf_wrap(c->be, s + (2 * ne + nb) * m->n_head_kv, nb * sk, &c->bar_vs)))
		return rc;
	return 0;
}

void sekv_dev_put_tail(struct sekv_ctx *c, int l, int slot, const float *k, const float *v)
{
	const struct sekv_mem *m = c->m;
	const struct backend_ops *op = c->be->ops;
	size_t row = (size_t)m->n_head_kv * m->d_h, at = (size_t)l * c->tail_cap + (size_t)slot;

	if (!c->dev_i8) {
		op->kv_store(c->be, c->tail_k, c->tail_v, m->n_layer * c->tail_cap, (int)row, k, v,
			     (int)at, 1);
		return;
	}
	memcpy(c->tail8_f, k, row * sizeof(float));
	quant_row(c, c->kc + (size_t)l * row, c->tail8_f, c->tail8, c->tail8_s);
	memcpy(c->tail8_f, v, row * sizeof(float));
	quant_row(c, NULL, c->tail8_f, c->tail8 + row, c->tail8_s + m->n_head_kv);
	op->buf_write(c->be, c->tail_k, at * row, c->tail8, row);
	op->buf_write(c->be, c->tail_v, at * row, c->tail8 + row, row);
	op->buf_write(c->be, c->tail_ks, at * m->n_head_kv * sizeof(float), c->tail8_s,
		      m->n_head_kv * sizeof(float));
	op->buf_write(c->be, c->tail_vs, at * m->n_head_kv * sizeof(float),
		      c->tail8_s + m->n_head_kv, m->n_head_kv * sizeof(float));
}

int sekv_dev_get_tail(const struct sekv_ctx *c, int l, int slot, int n, uint16_t *k, uint16_t *v)
{
	const struct sekv_mem *m = c->m;
	const struct backend_ops *op = c->be->ops;
	size_t row = (size_t)m->n_head_kv * m->d_h, sk = m->n_head_kv * sizeof(float);
	size_t at = (size_t)l * c->tail_cap + (size_t)slot;

	if (!c->dev_i8)
		return op->buf_read(c->be, c->tail_k, at * row * 2, k, (size_t)n * row * 2) ||
		       op->buf_read(c->be, c->tail_v, at * row * 2, v, (size_t)n * row * 2)
			       ? SEKV_EINVAL : SEKV_OK;
	for (int i = 0; i < n; i++, at++)
		for (int w = 0; w < 2; w++) {
			const float *kc = w ? NULL : c->kc + (size_t)l * row;
			if (op->buf_read(c->be, w ? c->tail_v : c->tail_k, at * row, c->tail8, row) ||
			    op->buf_read(c->be, w ? c->tail_vs : c->tail_ks, at * sk, c->tail8_s, sk))
				return SEKV_EINVAL;
			for (int g = 0; g < m->n_head_kv; g++)
				for (int j = 0; j < m->d_h; j++) {
					size_t e = (size_t)g * m->d_h + j;
					c->tail8_f[e] = c->tail8_s[g] * (float)c->tail8[e] *
							(kc ? kc[e] : 1.0f);
				}
			quant_f32_to_f16_row(c->tail8_f, (w ? v : k) + (size_t)i * row, row);
		}
	return SEKV_OK;
}

const float *sekv_dev_query(struct sekv_ctx *c, int l, const float *q)
{
	const struct sekv_mem *m = c->m;
	int d = m->d_h;

	if (!c->dev_i8)
		return q;
	for (int h = 0; h < m->n_head; h++) {
		const float *kc = c->kc + ((size_t)l * m->n_head_kv + h / c->group) * d;
		for (int j = 0; j < d; j++)
			c->qk[(size_t)h * d + j] = q[(size_t)h * d + j] * kc[j];
	}
	return c->qk;
}
