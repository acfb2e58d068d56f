/* test_sekv.c - SeKV memory: segmentation, SVD factors, the budget policy,
 * and the key equivalences (everything zoomed at full rank == exact
 * attention; nothing zoomed == exact rows + coarse rows computed here).
 * Synthetic data only, fixed seeds; references are computed in double. */
#include "tests/test.h"
#include "engine/sekv/sekv.h"
#include "engine/err.h"
#include "engine/quant.h"

#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- synthetic data ---------------------------------------------------- */

static uint64_t rng_state;

static void rng_seed(uint64_t s)
{
	rng_state = s * 0x9e3779b97f4a7c15ull + 1;
}

static double rng_u(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return ((rng_state >> 11) + 0.5) / 9007199254740992.0;
}

static double rng_n(void)
{
	return sqrt(-2 * log(rng_u())) * cos(6.283185307179586 * rng_u());
}

static float f16r(float x)
{
	return quant_f16_to_f32(quant_f32_to_f16(x));
}

/* A synthetic document: keys/values of n_layer global layers, fp16. */
struct doc {
	int n_tok, n_layer, n_head, n_head_kv, d_h;
	int32_t layer_id[8];
	float *h;              /* [n_tok] surprisal */
	uint16_t *k[8], *v[8]; /* [n_layer] -> [n_tok][n_head_kv][d_h] */
};

static void doc_free(struct doc *d)
{
	free(d->h);
	for (int l = 0; l < d->n_layer; l++) {
		free(d->k[l]);
		free(d->v[l]);
	}
}

/* Keys: a few shared directions plus noise (so spans are low-rank-ish);
 * surprisal: exponential with occasional spikes. */
static int doc_make(struct doc *d, int n_tok, int n_layer, int n_head,
		    int n_head_kv, int d_h, uint64_t seed)
{
	size_t n = (size_t)n_tok * n_head_kv * d_h;

	memset(d, 0, sizeof *d);
	d->n_tok = n_tok;
	d->n_layer = n_layer;
	d->n_head = n_head;
	d->n_head_kv = n_head_kv;
	d->d_h = d_h;
	rng_seed(seed);
	d->h = malloc(((size_t)n_tok + 1) * sizeof *d->h);
	if (!d->h)
		return -1;
	for (int t = 0; t < n_tok; t++)
		d->h[t] = t == 0 ? 0.0f : (float)(-log(rng_u()) * (rng_u() < 0.05 ? 6 : 1));
	for (int l = 0; l < n_layer; l++) {
		float base[4][512];
		d->layer_id[l] = 5 + 6 * l;
		d->k[l] = malloc((n + 1) * 2);
		d->v[l] = malloc((n + 1) * 2);
		if (!d->k[l] || !d->v[l])
			return -1;
		for (int b = 0; b < 4; b++)
			for (int j = 0; j < d_h; j++)
				base[b][j] = (float)rng_n();
		for (size_t i = 0; i < n; i++) {
			int j = (int)(i % d_h);
			double kx = 0.3 * rng_n(), vx = rng_n();
			for (int b = 0; b < 4; b++)
				kx += base[b][j] * sin(0.01 * (double)(i / d_h) * (b + 1) + b);
			d->k[l][i] = quant_f32_to_f16((float)kx);
			d->v[l][i] = quant_f32_to_f16((float)vx);
		}
	}
	return 0;
}

static int doc_build(struct sekv_mem **m, const struct doc *d,
		     const struct sekv_params *p, char *err, size_t errlen)
{
	return sekv_build(m, p, d->n_tok, NULL, d->h, d->n_layer, d->layer_id,
			  d->n_head, d->n_head_kv, d->d_h,
			  (const uint16_t *const *)d->k, (const uint16_t *const *)d->v,
			  err, errlen);
}

/* Element i of a factor's u or v at the memory's type. */
static double fac_at(const struct sekv_mem *m, const void *x, size_t i)
{
	return m->factor_f16 ? quant_f16_to_f32(((const uint16_t *)x)[i]) : ((const float *)x)[i];
}

/* Reference softmax attention in double for query head h over rows
 * (keys kr, values vr, additive bias), out [d_h]. */
struct ref_rows {
	int n;
	float *k, *v, *bias;   /* [cap][d_h], [cap][d_h], [cap] */
};

static void ref_attend(const struct ref_rows *r, const float *q, int d_h,
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

static void ref_add(struct ref_rows *r, const float *k, const float *v, float bias, int d_h)
{
	memcpy(r->k + (size_t)r->n * d_h, k, (size_t)d_h * sizeof(float));
	memcpy(r->v + (size_t)r->n * d_h, v, (size_t)d_h * sizeof(float));
	r->bias[r->n++] = bias;
}

/* ---- segmentation ------------------------------------------------------ */

/* Independent two-pass mean/deviation of H_0..H_{t-1}. */
static int brute_anchor(const float *h, int t, float alpha)
{
	double mean = 0, var = 0;
	if (t < 2)
		return 0;
	for (int i = 0; i < t; i++)
		mean += h[i];
	mean /= t;
	for (int i = 0; i < t; i++)
		var += (h[i] - mean) * (h[i] - mean);
	return h[t] > mean + alpha * sqrt(var / t);
}

static void segment_known_anchors(struct test_ctx *t)
{
	/* anchors: 0 (sink), 7 and 15 (spikes); recent window 18..19 */
	float h[20] = { 0, 1, 1, 1, 1, 1, 1, 10, 1, 1, 1, 1, 1, 1, 1, 10, 1, 1, 1, 1 };
	uint8_t anc[20];
	struct sekv_span *sp;
	int n_span, rc;

	rc = sekv_segment(h, 20, 1.0f, 4, 1, 2, anc, &sp, &n_span);
	T_CHECK(t, rc == 0);
	for (int i = 0; i < 20; i++)
		T_CHECKF(t, anc[i] == (i == 0 || i == 7 || i == 15), "anchor %d = %d", i, anc[i]);
	T_CHECKF(t, n_span == 3, "n_span %d", n_span);
	T_CHECK(t, sp[0].start == 1 && sp[0].len == 6 && sp[0].full == 0);
	T_CHECK(t, sp[1].start == 8 && sp[1].len == 7 && sp[1].full == 0);
	T_CHECK(t, sp[2].start == 16 && sp[2].len == 2 && sp[2].full == 1);
	free(sp);
	/* a higher alpha keeps only the first spike (at 15: 1.53 + 4 * 2.28) */
	rc = sekv_segment(h, 20, 4.0f, 4, 1, 2, anc, &sp, &n_span);
	T_CHECK(t, rc == 0);
	T_CHECK(t, anc[7] == 1 && anc[15] == 0 && n_span == 2);
	T_CHECK(t, sp[1].start == 8 && sp[1].len == 10);
	free(sp);
}

static void segment_matches_bruteforce(struct test_ctx *t)
{
	int n = 3000;
	float *h = malloc((size_t)n * sizeof *h);
	uint8_t *anc = malloc((size_t)n);
	struct sekv_span *sp = NULL;
	int n_span, n_anchor = 0;

	T_CHECK(t, h && anc);
	rng_seed(7);
	for (int i = 0; i < n; i++)
		h[i] = i ? (float)(-log(rng_u()) * (1 + (i / 500) % 3)) : 0.0f;
	T_CHECK(t, sekv_segment(h, n, 1.0f, 4, 4, 64, anc, &sp, &n_span) == 0);
	for (int i = 4; i < n; i++) {
		T_CHECKF(t, anc[i] == brute_anchor(h, i, 1.0f), "anchor %d", i);
		n_anchor += anc[i];
	}
	T_CHECKF(t, n_anchor > n / 20 && n_anchor < n / 4, "%d anchors", n_anchor);
	/* spans tile the non-anchor positions of [n_sink, n - n_recent) */
	for (int i = 0, p = 4; i < n_span; i++) {
		for (; p < sp[i].start; p++)
			T_CHECKF(t, anc[p], "gap %d not an anchor", p);
		for (int j = 0; j < sp[i].len; j++)
			T_CHECK(t, !anc[sp[i].start + j]);
		T_CHECK(t, sp[i].full == (sp[i].len < 4));
		p = sp[i].start + sp[i].len;
		T_CHECK(t, p < n - 64 || (p == n - 64));
		T_CHECK(t, i + 1 == n_span || anc[p]);
	}
	free(sp);
	free(anc);
	free(h);
}

static void segment_causal_prefix(struct test_ctx *t)
{
	int n = 1200, n1 = 700, ns, ns1;
	float *h = malloc((size_t)n * sizeof *h);
	uint8_t *a = malloc((size_t)n), *a1 = malloc((size_t)n);
	struct sekv_span *sp = NULL, *sp1 = NULL;

	T_CHECK(t, h && a && a1);
	rng_seed(11);
	for (int i = 0; i < n; i++)
		h[i] = i ? (float)-log(rng_u()) : 0.0f;
	T_CHECK(t, sekv_segment(h, n, 1.0f, 4, 4, 64, a, &sp, &ns) == 0);
	T_CHECK(t, sekv_segment(h, n1, 1.0f, 4, 4, 64, a1, &sp1, &ns1) == 0);
	T_CHECK(t, memcmp(a, a1, (size_t)n1) == 0);
	/* every prefix span closed by an anchor is final */
	for (int i = 0; i < ns1; i++) {
		int end = sp1[i].start + sp1[i].len;
		if (end >= n1 - 64)
			continue;
		T_CHECKF(t, i < ns && sp[i].start == sp1[i].start &&
			 sp[i].len == sp1[i].len && sp[i].full == sp1[i].full,
			 "span %d changed", i);
	}
	free(sp);
	free(sp1);
	free(a);
	free(a1);
	free(h);
}

static void segment_sinks_recent_lmin(struct test_ctx *t)
{
	/* spikes at 10, 15 and 19: spans 2..9 (8), 11..14 (4 = l_min,
	 * compressed), 16..18 (3, full) ; recent 20..23 */
	float h[24];
	uint8_t anc[24];
	struct sekv_span *sp;
	int n_span;

	for (int i = 0; i < 24; i++)
		h[i] = i ? (i % 2 ? 1.1f : 0.9f) : 0.0f;
	h[10] = h[15] = h[19] = 60.0f;
	T_CHECK(t, sekv_segment(h, 24, 1.0f, 4, 2, 4, anc, &sp, &n_span) == 0);
	T_CHECK(t, anc[0] && anc[1] && anc[10] && anc[15] && anc[19]);
	T_CHECKF(t, n_span == 3, "n_span %d", n_span);
	T_CHECK(t, sp[0].start == 2 && sp[0].len == 8 && !sp[0].full);
	T_CHECK(t, sp[1].start == 11 && sp[1].len == 4 && !sp[1].full);
	T_CHECK(t, sp[2].start == 16 && sp[2].len == 3 && sp[2].full);
	free(sp);
	/* too short for sinks + recent: no spans, no crash */
	T_CHECK(t, sekv_segment(h, 5, 1.0f, 4, 4, 64, anc, &sp, &n_span) == 0);
	T_CHECK(t, n_span == 0 && anc[0] && anc[3] && !anc[4]);
	free(sp);
	T_CHECK(t, sekv_segment(h, 0, 1.0f, 4, 4, 64, anc, &sp, &n_span) == 0 && n_span == 0);
	free(sp);
	h[3] = NAN;
	T_CHECK(t, sekv_segment(h, 24, 1.0f, 4, 2, 4, anc, &sp, &n_span) == SEKV_EINVAL);
	T_CHECK(t, sp == NULL);
}

/* ---- memory layout ----------------------------------------------------- */

static void mem_alloc_shapes_and_counts(struct test_ctx *t)
{
	struct sekv_span sp[3] = { { 4, 10, 0 }, { 15, 2, 1 }, { 18, 40, 0 } };
	int32_t ranks[2 * 2 * 1 * 2] = { 3, 4, 10, 10, 5, 6, 32, 1 };
	struct sekv_mem *m;

	/* u, v fp32 (4 bytes) and fp16 (2 bytes); s fp32 in both */
	for (int f16 = 0; f16 < 2; f16++) {
		size_t host = 0, es = f16 ? 2 : 4;
		T_CHECK(t, sekv_mem_alloc(&m, 100, 2, 4, 1, 64, 3, sp, 60, ranks, f16) == 0);
		T_CHECK(t, m->factor_f16 == f16);
		T_CHECK(t, m->n_comp == 2 && m->comp_span[0] == 0 && m->comp_span[1] == 2);
		T_CHECK(t, m->full_kv_bytes == 100u * 2 * 1 * 64 * 2 * 2);
		T_CHECK(t, m->static_bytes == 60u * 2 * 64 * 4 + 2u * 2 * 64 * 2 * 4);
		T_CHECK(t, m->r_max == 32 && m->layer_id[1] == 1);
		for (int f = 0; f < 8; f++) {
			int len = f % 4 < 2 ? 10 : 40;
			T_CHECK(t, m->fac[f].rank == ranks[f]);
			host += (size_t)ranks[f] * ((len + 64) * es + 4);
			/* every factor array is writable and disjoint from the next */
			memset(m->fac[f].u, 0xff, (size_t)len * ranks[f] * es);
			memset(m->fac[f].s, 0xff, (size_t)ranks[f] * 4);
			memset(m->fac[f].v, 0xff, (size_t)64 * ranks[f] * es);
			T_CHECK(t, (char *)m->fac[f].u + (size_t)len * ranks[f] * es <=
				   (char *)m->fac[f].v);
			if (f + 1 < 8) {
				T_CHECK(t, (char *)m->fac[f].v + (size_t)64 * ranks[f] * es <=
					   (char *)m->fac[f + 1].u);
				T_CHECK(t, m->fac[f].s + ranks[f] <= m->fac[f + 1].s);
			}
		}
		T_CHECKF(t, m->host_bytes == host, "host_bytes %zu, want %zu", m->host_bytes, host);
		T_CHECK(t, isnan(fac_at(m, m->fac[0].u, 0)));  /* all ones = NaN */
		memset(m->exact_k, 0, 60u * 2 * 64 * 2);
		memset(m->route_w, 0, 2u * 4 * SEKV_D_ROUTE * 64 * 4);
		sekv_mem_update_counts(m);
		T_CHECK(t, m->n_comp == 2 && m->host_bytes == host);
		sekv_mem_free(m);
	}
	sekv_mem_free(NULL);

	/* rank larger than its span, overlap, out of range, bad type: refused */
	ranks[4] = 11;
	T_CHECK(t, sekv_mem_alloc(&m, 100, 2, 4, 1, 64, 3, sp, 60, ranks, 1) == SEKV_EINVAL);
	T_CHECK(t, m == NULL);
	ranks[4] = 5;
	sp[1].start = 13;
	T_CHECK(t, sekv_mem_alloc(&m, 100, 2, 4, 1, 64, 3, sp, 60, ranks, 1) == SEKV_EINVAL);
	sp[1].start = 15;
	sp[2].len = 83;
	T_CHECK(t, sekv_mem_alloc(&m, 100, 2, 4, 1, 64, 3, sp, 60, ranks, 1) == SEKV_EINVAL);
	sp[2].len = 40;
	T_CHECK(t, sekv_mem_alloc(&m, 100, 2, 3, 2, 64, 3, sp, 60, ranks, 1) == SEKV_EINVAL);
	T_CHECK(t, sekv_mem_alloc(&m, 100, 2, 4, 1, 64, 3, sp, 101, ranks, 1) == SEKV_EINVAL);
	T_CHECK(t, sekv_mem_alloc(&m, 100, 2, 4, 1, 64, 3, sp, 60, ranks, 2) == SEKV_EINVAL);
	T_CHECK(t, sekv_mem_alloc(&m, 100, 2, 4, 1, 64, 3, sp, 60, NULL, 1) == 0);
	T_CHECK(t, m->fac[7].rank == 0 && m->host_bytes == 0);
	sekv_mem_free(m);
}

/* ---- SVD factors ------------------------------------------------------- */

static void no_budget(struct sekv_params *p)
{
	sekv_default_params(p);
	p->budget = 0;
	p->n_sink = 0;
	p->n_recent = 0;
}

static void svd_error_falls_with_rank(struct test_ctx *t)
{
	struct doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	char err[256];
	int len = 40, dh = 32;
	double prev = INFINITY, norm = 0;

	T_CHECK(t, doc_make(&d, len, 1, 1, 1, dh, 3) == 0);
	for (int i = 0; i < len; i++)
		d.h[i] = 1.0f;           /* no anchors: one span */
	no_budget(&p);
	p.r_max = 64;
	p.factor_f16 = 0;        /* the full-rank bound below is fp32's */
	T_CHECKF(t, doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, m->n_comp == 1 && m->span[0].len == len && m->n_exact == 0);
	for (int which = 0; which < 2; which++) {
		const struct sekv_factor *f = &m->fac[which];
		const uint16_t *x = which ? d.v[0] : d.k[0];
		T_CHECK(t, f->rank == dh);
		prev = INFINITY;
		for (int r = 1; r <= f->rank; r++) {
			double e = 0;
			norm = 0;
			for (int i = 0; i < len; i++)
				for (int j = 0; j < dh; j++) {
					double y = 0, xv = quant_f16_to_f32(x[i * dh + j]);
					for (int c = 0; c < r; c++)
						y += fac_at(m, f->u, (size_t)i * f->rank + c) * f->s[c] *
						     fac_at(m, f->v, (size_t)j * f->rank + c);
					e += (y - xv) * (y - xv);
					norm += xv * xv;
				}
			e = sqrt(e);
			T_CHECKF(t, e < prev, "rank %d error %g not below %g", r, e, prev);
			prev = e;
		}
		T_CHECKF(t, prev < 1e-5 * sqrt(norm), "full-rank error %g", prev);
		for (int c = 1; c < f->rank; c++)
			T_CHECK(t, f->s[c] <= f->s[c - 1]);
	}
	sekv_mem_free(m);
	doc_free(&d);
}

static void svd_singular_values_vs_lapack(struct test_ctx *t)
{
	/* X = P diag(sv) Q with permutations: singular values are known */
	static const float sv[6] = { 5, 3, 2.5f, 1, 0.5f, 0.25f };
	static const int col[6] = { 6, 1, 4, 0, 7, 2 };
	struct doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	float a[50 * 16], s[16], sup[16];
	char err[256];

	T_CHECK(t, doc_make(&d, 6, 1, 2, 1, 8, 1) == 0);
	for (int i = 0; i < 6; i++) {
		d.h[i] = 1.0f;
		for (int j = 0; j < 8; j++)
			d.k[0][i * 8 + j] = quant_f32_to_f16(j == col[i] ? (i % 2 ? -sv[i] : sv[i]) : 0);
	}
	no_budget(&p);
	p.r_max = 4;     /* truncated: keeps the 4 largest */
	T_CHECKF(t, doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, m->n_comp == 1 && m->fac[0].rank == 4);
	for (int c = 0; c < 4; c++)
		T_CHECKF(t, fabsf(m->fac[0].s[c] - sv[c]) < 1e-5f, "s[%d] = %g", c, m->fac[0].s[c]);
	sekv_mem_free(m);
	doc_free(&d);

	/* a random span's factors vs LAPACK sgesvd (another routine) */
	T_CHECK(t, doc_make(&d, 50, 1, 1, 1, 16, 9) == 0);
	for (int i = 0; i < 50; i++)
		d.h[i] = 1.0f;
	p.r_max = 16;
	T_CHECKF(t, doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	for (int i = 0; i < 50 * 16; i++)
		a[i] = quant_f16_to_f32(d.v[0][i]);
	T_CHECK(t, LAPACKE_sgesvd(LAPACK_ROW_MAJOR, 'N', 'N', 50, 16, a, 16, s,
				  NULL, 1, NULL, 1, sup) == 0);
	T_CHECK(t, m->fac[1].rank == 16);
	for (int c = 0; c < 16; c++)
		T_CHECKF(t, fabsf(m->fac[1].s[c] - s[c]) < 1e-4f * s[0], "s[%d] %g vs %g",
			 c, m->fac[1].s[c], s[c]);
	sekv_mem_free(m);
	doc_free(&d);
}

/* Max |X - U S V^T| over every factor of m (full stored rank) against the
 * document rows, relative to the largest |X|. */
static double factors_vs_rows(const struct sekv_mem *m, const struct doc *d)
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
						for (int r = 0; r < fc->rank; r++)
							y += fac_at(m, fc->u, (size_t)i * fc->rank + r) *
							     fc->s[r] * fac_at(m, fc->v, (size_t)j * fc->rank + r);
						worst = fabs(y - xv) > worst ? fabs(y - xv) : worst;
						big = fabs(xv) > big ? fabs(xv) : big;
					}
			}
	return worst / big;
}

static void build_factors_every_span_threads(struct test_ctx *t)
{
	struct doc d;
	struct sekv_params p;
	struct sekv_mem *m1 = NULL, *m4 = NULL;
	char err[256];
	double e1, e4;

	T_CHECK(t, doc_make(&d, 900, 3, 4, 2, 32, 5) == 0);
	sekv_default_params(&p);
	p.budget = 0;
	p.factor_f16 = 0;        /* exact to fp32 rounding */
	p.n_threads = 1;
	T_CHECKF(t, doc_build(&m1, &d, &p, err, sizeof err) == 0, "%s", err);
	p.n_threads = 4;
	T_CHECKF(t, doc_build(&m4, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, m1->n_comp == m4->n_comp && m1->n_comp > 5);
	T_CHECK(t, m1->host_bytes == m4->host_bytes && m1->host_bytes > 0);
	/* every span has rank min(len, d_h, 32) = full rank here */
	e1 = factors_vs_rows(m1, &d);
	e4 = factors_vs_rows(m4, &d);
	T_CHECKF(t, e1 < 1e-5 && e4 < 1e-5, "rebuild error %g (1 thread) %g (4)", e1, e4);
	/* a rank-limited build really truncates (the check above can fail) */
	sekv_mem_free(m4);
	p.r_max = 3;
	T_CHECKF(t, doc_build(&m4, &d, &p, err, sizeof err) == 0, "%s", err);
	e4 = factors_vs_rows(m4, &d);
	T_CHECKF(t, e4 > 1e-2, "rank-3 rebuild error only %g", e4);
	T_CHECK(t, m4->host_bytes < m1->host_bytes);
	/* router rows are orthogonal with one common norm c (W = c P, P
	 * orthonormal) and shared by heads of one KV head */
	double c2 = 0;
	for (int x = 0; x < 32; x++)
		c2 += (double)m1->route_w[x] * m1->route_w[x];
	T_CHECKF(t, c2 > 1e-6, "router scale %g", c2);
	for (int i = 0; i < SEKV_D_ROUTE; i++)
		for (int j = 0; j <= i; j++) {
			double s = 0;
			for (int x = 0; x < 32; x++)
				s += (double)m1->route_w[i * 32 + x] * m1->route_w[j * 32 + x];
			T_CHECKF(t, fabs(s / c2 - (i == j)) < 1e-4, "W rows %d.%d = %g (c^2 %g)", i, j, s, c2);
		}
	T_CHECK(t, !memcmp(m1->route_w, m1->route_w + SEKV_D_ROUTE * 32, SEKV_D_ROUTE * 32 * 4));
	T_CHECK(t, memcmp(m1->route_w + 2 * SEKV_D_ROUTE * 32, m1->route_w, SEKV_D_ROUTE * 32 * 4));
	sekv_mem_free(m1);
	sekv_mem_free(m4);
	doc_free(&d);
}

/* ---- decode equivalences ----------------------------------------------- */

/* Decodes n_step tokens through ctx over every global layer and compares
 * with reference attention over rows chosen by `mode`: 0 = all document
 * rows, 1 = exact rows + coarse rows built here. Returns the max abs diff
 * (or a negative value on a call failure). */
/* Tail eviction in decode_vs_ref: at step g_evict_step (when >= 0) the tail
 * rows of steps before g_evict_to are evicted first. */
static int g_evict_step = -1, g_evict_to;

static double decode_vs_ref(const struct doc *d, const struct sekv_mem *m,
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
	struct ref_rows r = { 0, malloc((size_t)cap * dh * 4), malloc((size_t)cap * dh * 4),
			      malloc((size_t)cap * 4) };
	double worst = 0;

	rng_seed(seed);
	for (int s = 0; s < n_step && worst >= 0; s++)
		for (int l = 0; l < d->n_layer && worst >= 0; l++) {
			for (int i = 0; i < nh * dh; i++)
				q[i] = (float)(2 * rng_n());
			for (int i = 0; i < nkv * dh; i++) {
				k[i] = tk[(((size_t)l * n_step + s) * nkv) * dh + i] = f16r((float)rng_n());
				v[i] = tv[(((size_t)l * n_step + s) * nkv) * dh + i] = f16r((float)rng_n());
			}
			if (l == 0 && s == g_evict_step &&
			    sekv_ctx_evict_tail(c, d->n_tok + g_evict_to)) {
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
				for (int p = 0; p < d->n_tok; p++) {
					int comp = -1;
					for (int i = 0; mode == 1 && i < m->n_comp; i++) {
						const struct sekv_span *sp = &m->span[m->comp_span[i]];
						if (p >= sp->start && p < sp->start + sp->len)
							comp = i;
					}
					if (comp >= 0)
						continue;
					for (int j = 0; j < dh; j++) {
						kr[j] = quant_f16_to_f32(d->k[l][((size_t)p * nkv + kv) * dh + j]);
						vr[j] = quant_f16_to_f32(d->v[l][((size_t)p * nkv + kv) * dh + j]);
					}
					ref_add(&r, kr, vr, 0, dh);
				}
				for (int i = 0; mode == 1 && i < m->n_comp; i++) {
					const struct sekv_span *sp = &m->span[m->comp_span[i]];
					double sum = 0, kb[512] = {0}, vb[512] = {0};
					for (int p = sp->start; p < sp->start + sp->len; p++)
						sum += d->h[p] > 0 ? d->h[p] : 0;
					for (int p = sp->start; p < sp->start + sp->len; p++) {
						double w = sum > 0 ? (d->h[p] > 0 ? d->h[p] : 0) / sum : 1.0 / sp->len;
						for (int j = 0; j < dh; j++) {
							kb[j] += w * quant_f16_to_f32(d->k[l][((size_t)p * nkv + kv) * dh + j]);
							vb[j] += w * quant_f16_to_f32(d->v[l][((size_t)p * nkv + kv) * dh + j]);
						}
					}
					for (int j = 0; j < dh; j++) {
						kr[j] = (float)kb[j];
						vr[j] = (float)vb[j];
					}
					ref_add(&r, kr, vr, logf((float)sp->len), dh);
				}
				for (int s2 = g_evict_step >= 0 && s >= g_evict_step ? g_evict_to : 0; s2 <= s; s2++)
					ref_add(&r, tk + (((size_t)l * n_step + s2) * nkv + kv) * dh,
						tv + (((size_t)l * n_step + s2) * nkv + kv) * dh, 0, dh);
				ref_attend(&r, q + (size_t)h * dh, dh, q_scale, ref);
				for (int j = 0; j < dh; j++) {
					double e = fabs(ref[j] - out[(size_t)h * dh + j]);
					worst = e > worst ? e : worst;
				}
			}
		}
	free(q); free(k); free(v); free(out); free(ref); free(tk); free(tv);
	free(r.k); free(r.v); free(r.bias);
	return worst;
}

static void check_equiv(struct test_ctx *t, int n_head, int n_head_kv)
{
	struct doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	struct sekv_ctx *c = NULL;
	const struct sekv_stats *st;
	char err[256];
	double e;

	T_CHECK(t, doc_make(&d, 400, 3, n_head, n_head_kv, 64, 21) == 0);
	sekv_default_params(&p);
	p.budget = 0;
	p.r_max = 64;
	p.r_use = 64;
	p.recon_f32 = 1;
	p.factor_f16 = 0;         /* fp32 factors: exact up to fp32 rounding */
	p.tau = -1.0f;            /* alpha_S in (0,1): every span zoomed */
	p.n_recent = 16;
	T_CHECKF(t, doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, m->n_comp >= 10, "n_comp %d", m->n_comp);
	T_CHECKF(t, sekv_ctx_new(&c, m, &p, 6, 0.125f, err, sizeof err) == 0, "%s", err);
	e = decode_vs_ref(&d, m, c, 6, 0, 0.125f, 99);
	T_CHECKF(t, e >= 0 && e < 1e-4, "all zoomed vs exact: max diff %g", e);
	st = sekv_ctx_stats(c);
	T_CHECK(t, st->step == 6);
	T_CHECK(t, st->zoom_total == 6LL * 3 * m->n_comp);
	T_CHECK(t, st->n_zoom == 3 * n_head_kv * m->n_comp);
	T_CHECK(t, st->zoom_count[2 * n_head + n_head - 1] == m->n_comp);
	sekv_ctx_free(c);

	/* the same check can fail: truncating to rank 2 moves the output */
	p.r_use = 2;
	T_CHECKF(t, sekv_ctx_new(&c, m, &p, 6, 0.125f, err, sizeof err) == 0, "%s", err);
	e = decode_vs_ref(&d, m, c, 2, 0, 0.125f, 99);
	T_CHECKF(t, e > 1e-3, "rank 2 still matched exact attention (%g)", e);
	sekv_ctx_free(c);

	/* nothing zoomed: exact rows + coarse rows with bias log|S| */
	p.r_use = 64;
	p.recon_f32 = 0;
	for (int i = 0; i < 3 * n_head; i++)
		m->tau[i] = 2.0f;   /* decode reads the memory's thresholds */
	T_CHECKF(t, sekv_ctx_new(&c, m, &p, 6, 0.125f, err, sizeof err) == 0, "%s", err);
	e = decode_vs_ref(&d, m, c, 6, 1, 0.125f, 7);
	T_CHECKF(t, e >= 0 && e < 1e-4, "none zoomed vs exact+coarse: max diff %g", e);
	T_CHECK(t, sekv_ctx_stats(c)->zoom_total == 0 && sekv_ctx_stats(c)->recon_bytes == 0);
	/* and it is not plain exact attention */
	sekv_ctx_reset(c);
	e = decode_vs_ref(&d, m, c, 2, 0, 0.125f, 7);
	T_CHECKF(t, e > 1e-3, "coarse rows equal exact attention (%g)", e);
	sekv_ctx_free(c);
	sekv_mem_free(m);
	doc_free(&d);
}

static void equiv_all_zoomed_full_rank_is_exact(struct test_ctx *t)
{
	check_equiv(t, 4, 1);
}

/* Evicting the oldest tail rows: later steps attend exactly as if those
 * tokens had never been there, and the held rows and bytes shrink. */
static void evict_tail_forgets_oldest_rows(struct test_ctx *t)
{
	struct doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	struct sekv_ctx *c = NULL;
	char err[256];

	T_CHECK(t, doc_make(&d, 300, 2, 4, 1, 64, 5) == 0);
	sekv_default_params(&p);
	p.budget = 0;
	p.r_max = 64;
	p.r_use = 64;
	p.recon_f32 = 1;
	p.factor_f16 = 0;
	p.tau = -1.0f;
	T_CHECKF(t, doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, sekv_ctx_new(&c, m, &p, 8, 0.125f, err, sizeof err) == 0, "%s", err);
	g_evict_step = 5;
	g_evict_to = 3;
	double e = decode_vs_ref(&d, m, c, 8, 0, 0.125f, 3);
	g_evict_step = -1;
	int rows = sekv_ctx_tail_rows(c);
	int bad_back = sekv_ctx_evict_tail(c, d.n_tok + 2);   /* before the held rows */
	int bad_fwd = sekv_ctx_evict_tail(c, d.n_tok + 9);    /* past the last row */
	int ok_all = sekv_ctx_evict_tail(c, d.n_tok + 8);
	int rows0 = sekv_ctx_tail_rows(c);
	sekv_ctx_free(c);
	sekv_mem_free(m);
	doc_free(&d);
	T_CHECKF(t, e >= 0 && e < 1e-4, "after eviction vs exact: max diff %g", e);
	T_CHECKF(t, rows == 5, "held rows %d", rows);
	T_CHECK(t, bad_back == SEKV_EINVAL && bad_fwd == SEKV_EINVAL && ok_all == 0 && rows0 == 0);
}

/* fp16 factors (the default): host_bytes about halves (s stays fp32),
 * spans rebuild with the error of fp16 rounding (not exactly: the check can
 * fail), and decoding with everything zoomed stays close to exact. */
static void factor_f16_halves_host_bytes(struct test_ctx *t)
{
	struct doc d;
	struct sekv_params p;
	struct sekv_mem *m32 = NULL, *m16 = NULL;
	struct sekv_ctx *c = NULL;
	char err[256];
	double ratio, e32, e16;

	T_CHECK(t, doc_make(&d, 400, 3, 4, 1, 64, 21) == 0);
	sekv_default_params(&p);
	T_CHECK(t, p.factor_f16 == 1);
	p.budget = 0;
	p.r_max = 64;
	p.r_use = 64;
	p.recon_f32 = 1;
	p.tau = -1.0f;
	p.n_recent = 16;
	T_CHECKF(t, doc_build(&m16, &d, &p, err, sizeof err) == 0, "%s", err);
	p.factor_f16 = 0;
	T_CHECKF(t, doc_build(&m32, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, m16->factor_f16 == 1 && m32->factor_f16 == 0 && m16->n_comp == m32->n_comp);
	ratio = (double)m16->host_bytes / (double)m32->host_bytes;
	T_CHECKF(t, ratio > 0.5 && ratio < 0.52, "host bytes fp16/fp32 = %g", ratio);
	T_CHECK(t, m16->static_bytes == m32->static_bytes);
	e32 = factors_vs_rows(m32, &d);
	e16 = factors_vs_rows(m16, &d);
	T_CHECKF(t, e16 < 3e-3 && e16 > 1e-5 && e16 > 10 * e32, "rebuild error fp16 %g fp32 %g",
		 e16, e32);
	T_CHECKF(t, sekv_ctx_new(&c, m16, &p, 6, 0.125f, err, sizeof err) == 0, "%s", err);
	e16 = decode_vs_ref(&d, m16, c, 6, 0, 0.125f, 99);
	sekv_ctx_free(c);
	p.r_use = 8;   /* r_use < rank reads a strided slice of the fp16 v */
	T_CHECKF(t, sekv_ctx_new(&c, m16, &p, 2, 0.125f, err, sizeof err) == 0, "%s", err);
	e32 = decode_vs_ref(&d, m16, c, 2, 0, 0.125f, 99);
	sekv_ctx_free(c);
	T_CHECKF(t, e16 >= 0 && e16 < 2e-3, "fp16 factors all zoomed vs exact: max diff %g", e16);
	T_CHECKF(t, e32 > 1e-2, "rank 8 of fp16 factors matched exact attention (%g)", e32);
	p.factor_f16 = 2;
	sekv_mem_free(m16);
	T_CHECK(t, doc_build(&m16, &d, &p, err, sizeof err) == SEKV_EINVAL && m16 == NULL);
	sekv_mem_free(m32);
	doc_free(&d);
}

static void equiv_gqa_two_kv_heads(struct test_ctx *t)
{
	check_equiv(t, 4, 2);
}

/* ---- budget ------------------------------------------------------------ */

/* Decodes n_step steps; returns zoom_total, or -1 when resident bytes ever
 * exceeded the budget; *recon = reconstructed bytes summed over steps. */
static long long run_budget(const struct doc *d, struct sekv_ctx *c, int n_step,
			    double *recon)
{
	const struct sekv_stats *st = sekv_ctx_stats(c);
	int nq = d->n_head * d->d_h, nkv = d->n_head_kv * d->d_h;
	float *q = malloc((size_t)nq * 4), *k = malloc((size_t)nkv * 4);
	float *v = malloc((size_t)nkv * 4), *out = malloc((size_t)nq * 4);
	long long rc = 0;

	rng_seed(1234);
	*recon = 0;
	for (int s = 0; s < n_step && rc >= 0; s++, *recon += (double)st->recon_bytes)
		for (int l = 0; l < d->n_layer; l++) {
			for (int i = 0; i < nq; i++)
				q[i] = (float)(3 * rng_n());
			for (int i = 0; i < nkv; i++) {
				k[i] = (float)rng_n();
				v[i] = (float)rng_n();
			}
			if (sekv_attend(c, d->layer_id[l], d->n_tok + s, q, k, v, out) ||
			    st->resident_bytes > st->budget_bytes ||
			    st->peak_resident_bytes > st->budget_bytes) {
				rc = -1;
				break;
			}
		}
	if (rc == 0)
		rc = st->zoom_total;
	free(q); free(k); free(v); free(out);
	return rc;
}

static void budget_resident_never_exceeds(struct test_ctx *t)
{
	static const double budgets[3] = { 0.06, 0.10, 0.25 };
	struct doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL, *small = NULL;
	long long zooms[3];
	double recon[3];
	float alpha[3];
	char err[256];

	T_CHECK(t, doc_make(&d, 3000, 3, 4, 1, 64, 33) == 0);
	/* the build: alpha rises as the budget shrinks */
	for (int b = 0; b < 3; b++) {
		sekv_default_params(&p);
		p.budget = budgets[b];
		p.n_recent = 32;
		T_CHECKF(t, doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
		T_CHECKF(t, m->static_bytes <= p.static_share * p.budget * m->full_kv_bytes,
			 "static %zu of %zu (%s)", m->static_bytes, m->full_kv_bytes, m->note);
		alpha[b] = m->alpha_used;
		if (b == 0)
			small = m;
		else
			sekv_mem_free(m);
		m = NULL;
	}
	T_CHECKF(t, alpha[0] > alpha[1] && alpha[1] >= alpha[2] && alpha[0] > 1.0f,
		 "alpha_used %g %g %g", alpha[0], alpha[1], alpha[2]);
	/* decode over one memory: never above budget, fewer zooms when smaller */
	for (int b = 0; b < 3; b++) {
		struct sekv_ctx *c = NULL;
		p.budget = budgets[b];
		T_CHECKF(t, sekv_ctx_new(&c, small, &p, 24, 0.125f, err, sizeof err) == 0, "%s", err);
		T_CHECK(t, sekv_ctx_stats(c)->budget_bytes ==
			(size_t)(p.budget * (double)small->full_kv_bytes));
		zooms[b] = run_budget(&d, c, 24, &recon[b]);
		T_CHECKF(t, zooms[b] >= 0, "budget %.2f exceeded: resident %zu > %zu",
			 p.budget, sekv_ctx_stats(c)->resident_bytes,
			 sekv_ctx_stats(c)->budget_bytes);
		T_CHECKF(t, sekv_ctx_stats(c)->peak_resident_bytes >
			 sekv_ctx_stats(c)->budget_bytes * 8 / 10,
			 "budget %.2f barely used", p.budget);
		sekv_ctx_free(c);
	}
	/* zoom counts need not be monotone (a larger budget takes longer spans
	 * first); reconstructed rows are */
	T_CHECKF(t, recon[0] < recon[1] && recon[1] < recon[2] && zooms[0] > 0 &&
		 zooms[0] < zooms[2], "zooms %lld %lld %lld, recon %.0f %.0f %.0f",
		 zooms[0], zooms[1], zooms[2], recon[0], recon[1], recon[2]);
	sekv_mem_free(small);
	doc_free(&d);
}

static void budget_alpha_note_and_merge(struct test_ctx *t)
{
	struct doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	char err[256];

	T_CHECK(t, doc_make(&d, 2000, 1, 4, 1, 32, 44) == 0);
	sekv_default_params(&p);
	p.budget = 0.08;
	T_CHECKF(t, doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, m->alpha_used > 1.0f && strstr(m->note, "alpha raised 1.00 ->"),
		 "note '%s'", m->note);
	sekv_mem_free(m);
	/* the recent window alone exceeds the static share: merged, reported */
	p.n_recent = 150;
	p.budget = 0.05;
	T_CHECKF(t, doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, strstr(m->note, "budget not met") && strstr(m->note, "merged"),
		 "note '%s'", m->note);
	T_CHECK(t, m->n_span == 1 && m->n_comp == 1);
	sekv_mem_free(m);
	doc_free(&d);
}

/* ---- edges and malformed input ----------------------------------------- */

static void edge_short_doc_and_zero_surprisal(struct test_ctx *t)
{
	struct doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	struct sekv_ctx *c = NULL;
	char err[256];
	double e;

	/* shorter than sinks + recent: every row exact */
	T_CHECK(t, doc_make(&d, 50, 3, 4, 1, 32, 2) == 0);
	sekv_default_params(&p);
	T_CHECKF(t, doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, m->n_span == 0 && m->n_comp == 0 && m->n_exact == 50);
	T_CHECK(t, m->host_bytes == 0 && m->exact_pos[49] == 49);
	T_CHECKF(t, sekv_ctx_new(&c, m, &p, 4, 0.2f, err, sizeof err) == 0, "%s", err);
	e = decode_vs_ref(&d, m, c, 4, 0, 0.2f, 5);
	T_CHECKF(t, e >= 0 && e < 1e-4, "max diff %g", e);
	sekv_ctx_free(c);
	sekv_mem_free(m);

	/* zero surprisal: one span, uniform summary weights */
	for (int i = 0; i < 50; i++)
		d.h[i] = 0;
	p.n_sink = 2;
	p.n_recent = 4;
	T_CHECKF(t, doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, m->n_comp == 1 && m->span[0].start == 2 && m->span[0].len == 44);
	for (int j = 0; j < 32; j++) {
		double s = 0;
		for (int i = 2; i < 46; i++)
			s += quant_f16_to_f32(d.k[1][i * 32 + j]);
		T_CHECKF(t, fabs(s / 44 - m->k_bar[32 + j]) < 1e-5, "k_bar[%d]", j);
	}
	p.budget = 0;
	for (int i = 0; i < 3 * 4; i++)
		m->tau[i] = 2.0f;
	T_CHECKF(t, sekv_ctx_new(&c, m, &p, 4, 0.2f, err, sizeof err) == 0, "%s", err);
	e = decode_vs_ref(&d, m, c, 3, 1, 0.2f, 6);
	T_CHECKF(t, e >= 0 && e < 1e-4, "max diff %g", e);
	sekv_ctx_free(c);
	sekv_mem_free(m);

	/* spans of exactly l_min are compressed, with rank l_min */
	for (int i = 0; i < 50; i++)
		d.h[i] = i ? (i % 2 ? 0.9f : 1.1f) : 0.0f;
	for (int i = 10; i < 46; i += 5)
		d.h[i] = 300.0f * i;
	p.l_min = 4;
	T_CHECKF(t, doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, m->n_comp >= 6, "n_comp %d", m->n_comp);
	for (int i = 0; i < m->n_comp; i++) {
		const struct sekv_span *sp = &m->span[m->comp_span[i]];
		T_CHECK(t, sp->len >= 4 && !sp->full);
		if (sp->start > 10)
			T_CHECKF(t, sp->len == 4 && m->fac[i * 2].rank == 4, "span %d len %d", i, sp->len);
	}
	sekv_mem_free(m);
	doc_free(&d);
}

static void malformed_inputs_refused(struct test_ctx *t)
{
	struct doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	struct sekv_ctx *c = NULL;
	char err[256] = "";
	float q[4 * 32] = {0}, kv[32] = {0}, out[4 * 32];
	uint16_t keep;

	T_CHECK(t, doc_make(&d, 300, 3, 4, 1, 32, 8) == 0);
	sekv_default_params(&p);
	T_CHECK(t, sekv_build(&m, &p, 300, NULL, d.h, 3, d.layer_id, 3, 2, 32,
			      (const uint16_t *const *)d.k, (const uint16_t *const *)d.v,
			      err, sizeof err) == SEKV_EINVAL && m == NULL);
	T_CHECK(t, strstr(err, "sekv_build: shape") != NULL);
	d.h[17] = INFINITY;
	T_CHECK(t, doc_build(&m, &d, &p, err, sizeof err) == SEKV_EINVAL);
	T_CHECKF(t, strstr(err, "position 17") != NULL, "%s", err);
	d.h[17] = 1;
	keep = d.v[2][100];
	d.v[2][100] = 0x7e00;   /* NaN */
	T_CHECK(t, doc_build(&m, &d, &p, err, sizeof err) == SEKV_EINVAL);
	T_CHECKF(t, strstr(err, "layer 2 position 3") != NULL, "%s", err);
	d.v[2][100] = keep;
	T_CHECKF(t, doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, sekv_ctx_new(&c, m, &p, 0, 0.2f, err, sizeof err) == SEKV_EINVAL);
	T_CHECK(t, c == NULL && strstr(err, "tail_cap"));
	T_CHECK(t, sekv_ctx_new(&c, m, &p, 2, 0.2f, err, sizeof err) == 0);
	T_CHECK(t, sekv_attend(c, 4, 300, q, kv, kv, out) == SEKV_EINVAL);   /* not global */
	T_CHECK(t, sekv_attend(c, 5, 299, q, kv, kv, out) == SEKV_EINVAL);   /* inside doc */
	T_CHECK(t, sekv_attend(c, 5, 301, q, kv, kv, out) == SEKV_EINVAL);   /* skips a row */
	T_CHECK(t, sekv_attend(c, 5, 300, q, kv, kv, out) == 0);
	T_CHECK(t, sekv_attend(c, 5, 301, q, kv, kv, out) == 0);
	T_CHECK(t, sekv_attend(c, 5, 302, q, kv, kv, out) == SEKV_EINVAL);   /* past tail_cap */
	T_CHECK(t, sekv_ctx_stats(c)->step == 2 && sekv_ctx_stats(c)->tail_bytes == 2u * 32 * 2 * 2);
	sekv_ctx_reset(c);
	T_CHECK(t, sekv_ctx_stats(c)->step == 0 && sekv_ctx_stats(c)->tail_bytes == 0);
	sekv_ctx_free(c);
	sekv_ctx_free(NULL);
	sekv_mem_free(m);
	doc_free(&d);
}

const struct test_case test_sekv[] = {
	{ "sekv_evict_tail_forgets_oldest_rows", evict_tail_forgets_oldest_rows },
	{ "sekv_segment_known_anchors", segment_known_anchors },
	{ "sekv_segment_matches_bruteforce", segment_matches_bruteforce },
	{ "sekv_segment_causal_prefix", segment_causal_prefix },
	{ "sekv_segment_sinks_recent_lmin", segment_sinks_recent_lmin },
	{ "sekv_mem_alloc_shapes_and_counts", mem_alloc_shapes_and_counts },
	{ "sekv_svd_error_falls_with_rank", svd_error_falls_with_rank },
	{ "sekv_svd_singular_values_vs_lapack", svd_singular_values_vs_lapack },
	{ "sekv_build_factors_every_span_threads", build_factors_every_span_threads },
	{ "sekv_factor_f16_halves_host_bytes", factor_f16_halves_host_bytes },
	{ "sekv_equiv_all_zoomed_full_rank_is_exact", equiv_all_zoomed_full_rank_is_exact },
	{ "sekv_equiv_gqa_two_kv_heads", equiv_gqa_two_kv_heads },
	{ "sekv_budget_resident_never_exceeds", budget_resident_never_exceeds },
	{ "sekv_budget_alpha_note_and_merge", budget_alpha_note_and_merge },
	{ "sekv_edge_short_doc_and_zero_surprisal", edge_short_doc_and_zero_surprisal },
	{ "sekv_malformed_inputs_refused", malformed_inputs_refused },
	{ NULL, NULL },
};
