/* sekv_fixture.c - synthetic SeKV documents, reference attention and the
 * decode-vs-reference check for the SeKV tests (sekv_fixture.h). */
#include "tests/sekv_fixture.h"
#include "engine/quant/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t fx_rng_state; /* this file only */

void fx_rng_seed(uint64_t s)
{
	fx_rng_state = s * 0x9e3779b97f4a7c15ull + 1;
}

double fx_rng_u(void)
{
	fx_rng_state ^= fx_rng_state << 13;
	fx_rng_state ^= fx_rng_state >> 7;
	fx_rng_state ^= fx_rng_state << 17;
	return ((fx_rng_state >> 11) + 0.5) / 9007199254740992.0;
}

double fx_rng_n(void)
{
	return sqrt(-2 * log(fx_rng_u())) * cos(6.283185307179586 * fx_rng_u());
}

float fx_f16r(float x)
{
	return quant_f16_to_f32(quant_f32_to_f16(x));
}

void fx_doc_free(struct fx_doc *d)
{
	free(d->h);
	for (int l = 0; l < d->n_layer; l++) {
		free(d->k[l]);
		free(d->v[l]);
	}
}

/* Keys: a few shared directions plus noise (so spans are low-rank-ish);
 * surprisal: exponential with occasional spikes. */
int fx_doc_make(struct fx_doc *d, int n_tok, int n_layer, int n_head,
		    int n_head_kv, int d_h, uint64_t seed)
{
	size_t n = (size_t)n_tok * n_head_kv * d_h;

	memset(d, 0, sizeof *d);
	d->n_tok = n_tok;
	d->n_layer = n_layer;
	d->n_head = n_head;
	d->n_head_kv = n_head_kv;
	d->d_h = d_h;
	fx_rng_seed(seed);
	d->h = malloc(((size_t)n_tok + 1) * sizeof *d->h);
	if (!d->h)
		return -1;
	for (int t = 0; t < n_tok; t++)
		d->h[t] = t == 0 ? 0.0f : (float)(-log(fx_rng_u()) * (fx_rng_u() < 0.05 ? 6 : 1));
	for (int l = 0; l < n_layer; l++) {
		float base[4][512];
		d->layer_id[l] = 5 + 6 * l;
		d->k[l] = malloc((n + 1) * 2);
		d->v[l] = malloc((n + 1) * 2);
		if (!d->k[l] || !d->v[l])
			return -1;
		for (int b = 0; b < 4; b++)
			for (int j = 0; j < d_h; j++)
				base[b][j] = (float)fx_rng_n();
		for (size_t i = 0; i < n; i++) {
			int j = (int)(i % d_h);
			double kx = 0.3 * fx_rng_n(), vx = fx_rng_n();
			for (int b = 0; b < 4; b++)
				kx += base[b][j] * sin(0.01 * (double)(i / d_h) * (b + 1) + b);
			d->k[l][i] = quant_f32_to_f16((float)kx);
			d->v[l][i] = quant_f32_to_f16((float)vx);
		}
	}
	return 0;
}

int fx_doc_build(struct sekv_mem **m, const struct fx_doc *d,
		     const struct sekv_params *p, char *err, size_t errlen)
{
	return sekv_build(m, p, d->n_tok, NULL, d->h, d->n_layer, d->layer_id,
			  d->n_head, d->n_head_kv, d->d_h,
			  (const uint16_t *const *)d->k, (const uint16_t *const *)d->v,
			  err, errlen);
}

/* Element i of a factor's u or v at the memory's type. */
double fx_fac_at(const struct sekv_mem *m, const void *x, size_t i)
{
	return m->factor_f16 ? quant_f16_to_f32(((const uint16_t *)x)[i]) : ((const float *)x)[i];
}


void fx_ref_attend(const struct fx_ref_rows *r, const float *q, int d_h,
		       float q_scale, float *out)
{
	double mx = -INFINITY, sum = 0, acc[512] = {0};
	double *lg = malloc((size_t)r->n * sizeof *lg);

	for (int i = 0; i < r->n; i++) {
		double s = 0;
		for (int j = 0; j < d_h; j++)
			s += (double)q[j] * r->k[(size_t)i * d_h + j];
		lg[i] = s * q_scale + r->bias[i];
		mx = lg[i] > mx ? lg[i] : mx;
	}
	for (int i = 0; i < r->n; i++) {
		double p = exp(lg[i] - mx);
		sum += p;
		for (int j = 0; j < d_h; j++)
			acc[j] += p * r->v[(size_t)i * d_h + j];
	}
	for (int j = 0; j < d_h; j++)
		out[j] = (float)(acc[j] / sum);
	free(lg);
}

void fx_ref_add(struct fx_ref_rows *r, const float *k, const float *v, float bias, int d_h)
{
	memcpy(r->k + (size_t)r->n * d_h, k, (size_t)d_h * sizeof(float));
	memcpy(r->v + (size_t)r->n * d_h, v, (size_t)d_h * sizeof(float));
	r->bias[r->n++] = bias;
}


/* The tail eviction fx_decode_vs_ref does (fx_decode_evict_at): at step
 * fx_evict_step (when >= 0) the tail rows of steps before fx_evict_to are
 * evicted first. This file only. */
static int fx_evict_step = -1, fx_evict_to;

void fx_decode_evict_at(int step, int to)
{
	fx_evict_step = step;
	fx_evict_to = to;
}

/* Marks in held [n_tok] the rows of every compressed span that KV head kv
 * holds rebuilt at this step of global layer l (sekv_ctx_zoomed_rows);
 * n_held [n_comp] their count per span. -1 when the ctx refuses. */
static int held_rows(const struct sekv_ctx *c, const struct sekv_mem *m, int l, int kv,
		     uint8_t *held, int *n_held, int32_t *pos)
{
	memset(held, 0, (size_t)m->n_tok);
	for (int i = 0; i < m->n_comp; i++) {
		int n = sekv_ctx_zoomed_rows(c, l, kv, i, pos, m->n_tok);
		if (n < 0 || n > m->span[m->comp_span[i]].len)
			return -1;
		n_held[i] = n;
		for (int j = 0; j < n; j++)
			held[pos[j]] = 1;
	}
	return 0;
}

double fx_decode_vs_ref(const struct fx_doc *d, const struct sekv_mem *m,
			struct sekv_ctx *c, int n_step, int mode, float q_scale,
			uint64_t seed)
{
	int dh = d->d_h, nh = d->n_head, nkv = d->n_head_kv, g = nh / nkv;
	int cap = d->n_tok + n_step + m->n_comp;
	float *q = malloc((size_t)nh * dh * 4), *k = malloc((size_t)nkv * dh * 4);
	float *v = malloc((size_t)nkv * dh * 4), *out = malloc((size_t)nh * dh * 4);
	float *ref = malloc((size_t)dh * 4);
	float *tk = calloc((size_t)d->n_layer * n_step * nkv * dh, 4);
	float *tv = calloc((size_t)d->n_layer * n_step * nkv * dh, 4);
	struct fx_ref_rows r = { 0, malloc((size_t)cap * dh * 4), malloc((size_t)cap * dh * 4),
			      malloc((size_t)cap * 4) };
	uint8_t *held = calloc((size_t)d->n_tok, 1);
	int *n_held = calloc((size_t)m->n_comp + 1, sizeof *n_held);
	int32_t *pos = malloc((size_t)d->n_tok * sizeof *pos);
	double worst = 0;

	fx_rng_seed(seed);
	for (int s = 0; s < n_step && worst >= 0; s++)
		for (int l = 0; l < d->n_layer && worst >= 0; l++) {
			for (int i = 0; i < nh * dh; i++)
				q[i] = (float)(2 * fx_rng_n());
			for (int i = 0; i < nkv * dh; i++) {
				k[i] = tk[(((size_t)l * n_step + s) * nkv) * dh + i] = fx_f16r((float)fx_rng_n());
				v[i] = tv[(((size_t)l * n_step + s) * nkv) * dh + i] = fx_f16r((float)fx_rng_n());
			}
			if (l == 0 && s == fx_evict_step &&
			    sekv_ctx_evict_tail(c, d->n_tok + fx_evict_to)) {
				worst = -1;
				break;
			}
			if (sekv_attend(c, d->layer_id[l], d->n_tok + s, q, k, v, out)) {
				worst = -1;
				break;
			}
			for (int h = 0; h < nh; h++) {
				int kv = h / g;
				float kr[512], vr[512];
				r.n = 0;
				if (mode == 2 && held_rows(c, m, l, kv, held, n_held, pos)) {
					worst = -1;
					break;
				}
				for (int p = 0; p < d->n_tok; p++) {
					int comp = -1;
					for (int i = 0; mode >= 1 && i < m->n_comp; i++) {
						const struct sekv_span *sp = &m->span[m->comp_span[i]];
						/* exact: the rows rebuilt */
						if (p >= sp->start && p < sp->start + sp->len &&
						    !(mode == 2 && held[p]))
							comp = i;
					}
					if (comp >= 0)
						continue;
					for (int j = 0; j < dh; j++) {
						kr[j] = quant_f16_to_f32(d->k[l][((size_t)p * nkv + kv) * dh + j]);
						vr[j] = quant_f16_to_f32(d->v[l][((size_t)p * nkv + kv) * dh + j]);
					}
					fx_ref_add(&r, kr, vr, 0, dh);
				}
				for (int i = 0; mode >= 1 && i < m->n_comp; i++) {
					const struct sekv_span *sp = &m->span[m->comp_span[i]];
					double sum = 0, kb[512] = {0}, vb[512] = {0};
					int rest = sp->len - (mode == 2 ? n_held[i] : 0);
					if (rest == 0)
						continue;   /* zoomed whole: no coarse row */
					for (int p = sp->start; p < sp->start + sp->len; p++)
						sum += d->h[p] > 0 ? d->h[p] : 0;
					for (int p = sp->start; p < sp->start + sp->len; p++) {
						double w = sum > 0 ? (d->h[p] > 0 ? d->h[p] : 0) / sum : 1.0 / sp->len;
						for (int j = 0; j < dh; j++) {
							kb[j] += w * quant_f16_to_f32(d->k[l][((size_t)p * nkv + kv) * dh + j]);
							vb[j] += w * quant_f16_to_f32(d->v[l][((size_t)p * nkv + kv) * dh + j]);
						}
					}
					/* the device tier keeps summaries in fp16 */
					for (int j = 0; j < dh; j++) {
						kr[j] = fx_f16r((float)kb[j]);
						vr[j] = fx_f16r((float)vb[j]);
					}
					/* a window zoomed: the coarse row stands for the rest */
					fx_ref_add(&r, kr, vr, logf((float)rest), dh);
				}
				for (int s2 = fx_evict_step >= 0 && s >= fx_evict_step ? fx_evict_to : 0;
				     s2 <= s; s2++)
					fx_ref_add(&r, tk + (((size_t)l * n_step + s2) * nkv + kv) * dh,
						tv + (((size_t)l * n_step + s2) * nkv + kv) * dh, 0, dh);
				fx_ref_attend(&r, q + (size_t)h * dh, dh, q_scale, ref);
				for (int j = 0; j < dh; j++) {
					double e = fabs(ref[j] - out[(size_t)h * dh + j]);
					worst = e > worst ? e : worst;
				}
			}
		}
	free(q); free(k); free(v); free(out); free(ref); free(tk); free(tv);
	free(r.k); free(r.v); free(r.bias);
	free(held); free(n_held); free(pos);
	return worst;
}

void fx_default_params(struct sekv_params *p)
{
	sekv_default_params(p);
	p->exact_below = 0;
	/* fp16 device rows: the equivalences with exact attention hold to
	 * rounding; the int8 rows have tests of their own */
	p->dev_rows = 0;
}

void fx_no_budget(struct sekv_params *p)
{
	fx_default_params(p);
	p->budget = 0;
	p->rank_energy = 0;  /* no rank gate: tests of the SVD see every component */
	p->n_sink = 0;
	p->n_recent = 0;
}

void fx_exact_params(struct sekv_params *p)
{
	fx_default_params(p);
	p->budget = 0;
	p->r_max = p->r_use = 64;
	p->rank_energy = 0;
	p->recon_f32 = 1;
	p->factor_f16 = 0;
	p->tau = -1.0f;
	p->n_recent = 16;
	p->zoom_blocks = 0;
}

/* Max |X - U S V^T| over every factor of m (full stored rank; a raw
 * factor's rows as they are, an int8 one's scaled back) against the
 * document rows, relative to the largest |X|. */
double fx_factors_vs_rows(const struct sekv_mem *m, const struct fx_doc *d)
{
	int dh = d->d_h, nkv = d->n_head_kv;
	double worst = 0, big = 0;

	for (int l = 0; l < m->n_layer; l++)
		for (int c = 0; c < m->n_comp; c++)
			for (int f = 0; f < nkv * 2; f++) {
				const struct sekv_span *sp = &m->span[m->comp_span[c]];
				const struct sekv_factor *fc = &m->fac[((size_t)l * m->n_comp + c) * nkv * 2 + f];
				const uint16_t *x = (f % 2 ? d->v : d->k)[l];
				for (int i = 0; i < sp->len; i++)
					for (int j = 0; j < dh; j++) {
						double y = 0, xv = quant_f16_to_f32(
							x[((size_t)(sp->start + i) * nkv + f / 2) * dh + j]);
						if (fc->rank == SEKV_RANK_RAW)
							y = fx_fac_at(m, fc->u, (size_t)i * dh + j);
						if (fc->rank == SEKV_RANK_RAW8)
							y = fc->s[i] * ((const int8_t *)fc->u)[(size_t)i * dh + j];
						for (int r = 0; r < fc->rank; r++)
							y += fx_fac_at(m, fc->u, (size_t)i * fc->rank + r) *
							     fc->s[r] * fx_fac_at(m, fc->v, (size_t)j * fc->rank + r);
						worst = fabs(y - xv) > worst ? fabs(y - xv) : worst;
						big = fabs(xv) > big ? fabs(xv) : big;
					}
			}
	return worst / big;
}
