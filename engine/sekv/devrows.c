/* devrows.c - the rows a SeKV decode stream keeps on the device tier, at
 * the memory's device type (sekv_mem_dev_rows): fp16 as stored, int8 with
 * one fp32 scale per row and KV head (about 0.53x the bytes, so the same
 * budget holds nearly twice the rows; issue 19), or int8 keys with int4
 * values (an fp32 scale per 32 values; 0.42x fp16 at d_h 64).
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

/* Bytes of one row of all KV heads and scales per row (key: int8, one
 * per head; value: int8 likewise, or int4 with v4). */
static size_t row_codes(const struct sekv_ctx *c, int key)
{
	size_t row = (size_t)c->m->n_head_kv * c->m->d_h;

	return !key && c->v4 ? row / 2 : row;
}

static size_t row_scales(const struct sekv_ctx *c, int key)
{
	return (size_t)c->m->n_head_kv * (!key && c->v4 ? (size_t)c->m->d_h / QUANT_I4_GROUP : 1);
}

/* One row of n_head_kv heads (fp32 x) into codes q and scales s
 * (row_codes, row_scales), keys divided by their layer's kc (kc NULL:
 * values). x is clobbered. */
static void quant_row(const struct sekv_ctx *c, const float *kc, float *x, void *q, float *s)
{
	int d = c->m->d_h;

	for (int g = 0; g < c->m->n_head_kv; g++) {
		float *xg = x + (size_t)g * d;
		for (int j = 0; kc && j < d; j++)
			xg[j] /= kc[(size_t)g * d + j];
		if (!kc && c->v4)
			quant_f32_to_i4_row(xg, (uint8_t *)q + (size_t)g * d / 2,
					    s + (size_t)g * (d / QUANT_I4_GROUP), (size_t)d);
		else
			s[g] = quant_f32_to_i8_row(xg, (int8_t *)q + (size_t)g * d, (size_t)d);
	}
}

/* n fp16 rows (all KV heads) of layer l into device rows and scales. */
static void quant_rows(struct sekv_ctx *c, int l, int key, const uint16_t *x, size_t n,
		       uint8_t *q, float *s)
{
	const struct sekv_mem *m = c->m;
	size_t row = (size_t)m->n_head_kv * m->d_h, rc = row_codes(c, key), rs = row_scales(c, key);
	const float *kc = key ? c->kc + (size_t)l * row : NULL;

	for (size_t i = 0; i < n; i++) {
		quant_f16_to_f32_row(x + i * row, c->tail8_f, row);
		quant_row(c, kc, c->tail8_f, q + i * rc, s + i * rs);
	}
}

int sekv_dev_open(struct sekv_ctx *c)
{
	const struct sekv_mem *m = c->m;
	const struct backend_ops *op = c->be->ops;
	size_t row = (size_t)m->n_head_kv * m->d_h, L = (size_t)m->n_layer;
	size_t ne = L * m->n_exact, nb = L * m->n_comp;
	size_t kr = row_codes(c, 1), vr = row_codes(c, 0), ks = row_scales(c, 1), vs = row_scales(c, 0);
	uint8_t *q;
	float *s;
	int rc;

	if (!c->dev_rows) {
		/* fp16: the memory's own rows */
		if ((rc = op->buf_wrap(c->be, m->exact_k, ne * row * 2, &c->exact_k)) ||
		    (rc = op->buf_wrap(c->be, m->exact_v, ne * row * 2, &c->exact_v)) ||
		    (rc = op->buf_wrap(c->be, m->k_bar, nb * row * 2, &c->bar_k)) ||
		    (rc = op->buf_wrap(c->be, m->v_bar, nb * row * 2, &c->bar_v)))
			return rc;
		return 0;
	}
	channel_scales(c);
	/* codes, then scales, each [exact k, exact v, bar k, bar v] */
	uint8_t *qk_e, *qv_e, *qk_b, *qv_b;
	float *sk_e, *sv_e, *sk_b, *sv_b;
	size_t at = (ne + nb) * (kr + vr);
	at = (at + sizeof(float) - 1) / sizeof(float) * sizeof(float);
	if (!(c->dev_host = malloc(at + (ne + nb) * (ks + vs) * sizeof(float) + 1)))
		return SEKV_ENOMEM;
	q = c->dev_host;
	s = (float *)((char *)c->dev_host + at);
	qk_e = q, qv_e = qk_e + ne * kr, qk_b = qv_e + ne * vr, qv_b = qk_b + nb * kr;
	sk_e = s, sv_e = sk_e + ne * ks, sk_b = sv_e + ne * vs, sv_b = sk_b + nb * ks;
	for (int l = 0; l < m->n_layer; l++) {
		size_t e = (size_t)l * m->n_exact, b = (size_t)l * m->n_comp;
		quant_rows(c, l, 1, m->exact_k + e * row, (size_t)m->n_exact, qk_e + e * kr, sk_e + e * ks);
		quant_rows(c, l, 0, m->exact_v + e * row, (size_t)m->n_exact, qv_e + e * vr, sv_e + e * vs);
		quant_rows(c, l, 1, m->k_bar + b * row, (size_t)m->n_comp, qk_b + b * kr, sk_b + b * ks);
		quant_rows(c, l, 0, m->v_bar + b * row, (size_t)m->n_comp, qv_b + b * vr, sv_b + b * vs);
	}
	size_t f = sizeof(float);
	if ((rc = op->buf_wrap(c->be, qk_e, ne * kr, &c->exact_k)) ||
	    (rc = op->buf_wrap(c->be, qv_e, ne * vr, &c->exact_v)) ||
	    (rc = op->buf_wrap(c->be, qk_b, nb * kr, &c->bar_k)) ||
	    (rc = op->buf_wrap(c->be, qv_b, nb * vr, &c->bar_v)) ||
	    (rc = op->buf_wrap(c->be, sk_e, ne * ks * f, &c->exact_ks)) ||
	    (rc = op->buf_wrap(c->be, sv_e, ne * vs * f, &c->exact_vs)) ||
	    (rc = op->buf_wrap(c->be, sk_b, nb * ks * f, &c->bar_ks)) ||
	    (rc = op->buf_wrap(c->be, sv_b, nb * vs * f, &c->bar_vs)))
		return rc;
	return 0;
}

void sekv_dev_put_tail(struct sekv_ctx *c, int l, int slot, const float *k, const float *v)
{
	const struct sekv_mem *m = c->m;
	const struct backend_ops *op = c->be->ops;
	size_t row = (size_t)m->n_head_kv * m->d_h, at = (size_t)l * c->tail_cap + (size_t)slot;

	if (!c->dev_rows) {
		op->kv_store(c->be, c->tail_k, c->tail_v, m->n_layer * c->tail_cap, (int)row, k, v,
			     (int)at, 1);
		return;
	}
	size_t vr = row_codes(c, 0), vs = row_scales(c, 0) * sizeof(float);
	size_t ks = (size_t)m->n_head_kv * sizeof(float);
	memcpy(c->tail8_f, k, row * sizeof(float));
	quant_row(c, c->kc + (size_t)l * row, c->tail8_f, c->tail8, c->tail8_s);
	memcpy(c->tail8_f, v, row * sizeof(float));
	quant_row(c, NULL, c->tail8_f, c->tail8 + row, c->tail8_s + m->n_head_kv);
	op->buf_write(c->be, c->tail_k, at * row, c->tail8, row);
	op->buf_write(c->be, c->tail_v, at * vr, c->tail8 + row, vr);
	op->buf_write(c->be, c->tail_ks, at * ks, c->tail8_s, ks);
	op->buf_write(c->be, c->tail_vs, at * vs, c->tail8_s + m->n_head_kv, vs);
}

int sekv_dev_get_tail(const struct sekv_ctx *c, int l, int slot, int n, uint16_t *k, uint16_t *v)
{
	const struct sekv_mem *m = c->m;
	const struct backend_ops *op = c->be->ops;
	size_t row = (size_t)m->n_head_kv * m->d_h;
	size_t at = (size_t)l * c->tail_cap + (size_t)slot;

	if (!c->dev_rows)
		return op->buf_read(c->be, c->tail_k, at * row * 2, k, (size_t)n * row * 2) ||
		       op->buf_read(c->be, c->tail_v, at * row * 2, v, (size_t)n * row * 2)
			       ? SEKV_EINVAL : SEKV_OK;
	for (int i = 0; i < n; i++, at++)
		for (int w = 0; w < 2; w++) {
			const float *kc = w ? NULL : c->kc + (size_t)l * row;
			size_t rc = row_codes(c, !w), rs = row_scales(c, !w) * sizeof(float);
			if (op->buf_read(c->be, w ? c->tail_v : c->tail_k, at * rc, c->tail8, rc) ||
			    op->buf_read(c->be, w ? c->tail_vs : c->tail_ks, at * rs, c->tail8_s, rs))
				return SEKV_EINVAL;
			if (w && c->v4) {
				for (int g = 0; g < m->n_head_kv; g++)
					quant_i4_to_f32_row((const uint8_t *)c->tail8 + (size_t)g * m->d_h / 2,
							    c->tail8_s + (size_t)g * (m->d_h / QUANT_I4_GROUP),
							    c->tail8_f + (size_t)g * m->d_h, (size_t)m->d_h);
			} else {
				for (int g = 0; g < m->n_head_kv; g++)
					for (int j = 0; j < m->d_h; j++) {
						size_t e = (size_t)g * m->d_h + j;
						c->tail8_f[e] = c->tail8_s[g] * (float)c->tail8[e] *
								(kc ? kc[e] : 1.0f);
					}
			}
			quant_f32_to_f16_row(c->tail8_f, (w ? v : k) + (size_t)i * row, row);
		}
	return SEKV_OK;
}

const float *sekv_dev_query(struct sekv_ctx *c, int l, const float *q)
{
	const struct sekv_mem *m = c->m;
	int d = m->d_h;

	if (!c->dev_rows)
		return q;
	for (int h = 0; h < m->n_head; h++) {
		const float *kc = c->kc + ((size_t)l * m->n_head_kv + h / c->group) * d;
		for (int j = 0; j < d; j++)
			c->qk[(size_t)h * d + j] = q[(size_t)h * d + j] * kc[j];
	}
	return c->qk;
}
