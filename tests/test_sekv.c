/* test_sekv.c - SeKV memory: segmentation, the memory layout and the SVD
 * factors (vs LAPACK's sgesvd as an independent reference, threads).
 * Decoding, the budget and malformed input are in test_sekv_attend.c.
 * Synthetic data only, fixed seeds; references are computed in double. */
#include "tests/test.h"
#include "tests/sekv_fixture.h"
#include "engine/base/err.h"
#include "engine/quant/quant.h"

#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
	fx_rng_seed(7);
	for (int i = 0; i < n; i++)
		h[i] = i ? (float)(-log(fx_rng_u()) * (1 + (i / 500) % 3)) : 0.0f;
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
	fx_rng_seed(11);
	for (int i = 0; i < n; i++)
		h[i] = i ? (float)-log(fx_rng_u()) : 0.0f;
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
		T_CHECK(t, sekv_mem_alloc(&m, 100, 2, 4, 1, 64, 3, sp, 60, ranks, f16, 0) == 0);
		T_CHECK(t, m->factor_f16 == f16);
		T_CHECK(t, m->n_comp == 2 && m->comp_span[0] == 0 && m->comp_span[1] == 2);
		T_CHECK(t, m->full_kv_bytes == 100u * 2 * 1 * 64 * 2 * 2);
		/* k8v4 device rows by default: 64 int8 key codes and a 4-byte
		 * scale, 32 bytes of int4 value codes and two 4-byte scales per
		 * row, layer, KV head; int8 and fp16 when asked */
		T_CHECK(t, m->dev_rows == SEKV_DEV_K8V4 && m->static_bytes == 62u * 2 * (64 + 4 + 32 + 8));
		m->dev_rows = SEKV_DEV_I8;
		sekv_mem_update_counts(m);
		T_CHECK(t, m->static_bytes == 62u * 2 * 2 * (64 + 4));
		m->dev_rows = SEKV_DEV_F16;
		sekv_mem_update_counts(m);
		T_CHECK(t, m->static_bytes == 60u * 2 * 64 * 4 + 2u * 2 * 64 * 2 * 2);
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
		T_CHECK(t, isnan(fx_fac_at(m, m->fac[0].u, 0)));  /* all ones = NaN */
		memset(m->exact_k, 0, 60u * 2 * 64 * 2);
		memset(m->route_w, 0, 2u * 4 * SEKV_D_ROUTE * 64 * 4);
		sekv_mem_update_counts(m);
		T_CHECK(t, m->n_comp == 2 && m->host_bytes == host);
		sekv_mem_free(m);
	}
	sekv_mem_free(NULL);

	/* rank larger than its span, overlap, out of range, bad type: refused */
	ranks[4] = 11;
	T_CHECK(t, sekv_mem_alloc(&m, 100, 2, 4, 1, 64, 3, sp, 60, ranks, 1, 0) == SEKV_EINVAL);
	T_CHECK(t, m == NULL);
	ranks[4] = 5;
	sp[1].start = 13;
	T_CHECK(t, sekv_mem_alloc(&m, 100, 2, 4, 1, 64, 3, sp, 60, ranks, 1, 0) == SEKV_EINVAL);
	sp[1].start = 15;
	sp[2].len = 83;
	T_CHECK(t, sekv_mem_alloc(&m, 100, 2, 4, 1, 64, 3, sp, 60, ranks, 1, 0) == SEKV_EINVAL);
	sp[2].len = 40;
	T_CHECK(t, sekv_mem_alloc(&m, 100, 2, 3, 2, 64, 3, sp, 60, ranks, 1, 0) == SEKV_EINVAL);
	T_CHECK(t, sekv_mem_alloc(&m, 100, 2, 4, 1, 64, 3, sp, 101, ranks, 1, 0) == SEKV_EINVAL);
	T_CHECK(t, sekv_mem_alloc(&m, 100, 2, 4, 1, 64, 3, sp, 60, ranks, 2, 0) == SEKV_EINVAL);
	T_CHECK(t, sekv_mem_alloc(&m, 100, 2, 4, 1, 64, 3, sp, 60, NULL, 1, 0) == 0);
	T_CHECK(t, m->fac[7].rank == 0 && m->host_bytes == 0);
	sekv_mem_free(m);
}

/* ---- SVD factors ------------------------------------------------------- */

static void svd_error_falls_with_rank(struct test_ctx *t)
{
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	char err[256];
	int len = 40, dh = 32;
	double prev = INFINITY, norm = 0;

	T_CHECK(t, fx_doc_make(&d, len, 1, 1, 1, dh, 3) == 0);
	for (int i = 0; i < len; i++)
		d.h[i] = 1.0f;           /* no anchors: one span */
	fx_no_budget(&p);
	p.r_max = 64;
	p.factor_f16 = 0;        /* the full-rank bound below is fp32's */
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
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
						y += fx_fac_at(m, f->u, (size_t)i * f->rank + c) * f->s[c] *
						     fx_fac_at(m, f->v, (size_t)j * f->rank + c);
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
	fx_doc_free(&d);
}

static void svd_singular_values_vs_lapack(struct test_ctx *t)
{
	/* X = P diag(sv) Q with permutations: singular values are known */
	static const float sv[6] = { 5, 3, 2.5f, 1, 0.5f, 0.25f };
	static const int col[6] = { 6, 1, 4, 0, 7, 2 };
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	float a[50 * 16], s[16], sup[16];
	char err[256];

	T_CHECK(t, fx_doc_make(&d, 6, 1, 2, 1, 8, 1) == 0);
	for (int i = 0; i < 6; i++) {
		d.h[i] = 1.0f;
		for (int j = 0; j < 8; j++)
			d.k[0][i * 8 + j] = quant_f32_to_f16(j == col[i] ? (i % 2 ? -sv[i] : sv[i]) : 0);
	}
	fx_no_budget(&p);
	p.r_max = 4;     /* truncated: keeps the 4 largest */
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, m->n_comp == 1 && m->fac[0].rank == 4);
	for (int c = 0; c < 4; c++)
		T_CHECKF(t, fabsf(m->fac[0].s[c] - sv[c]) < 1e-5f, "s[%d] = %g", c, m->fac[0].s[c]);
	sekv_mem_free(m);
	fx_doc_free(&d);

	/* a random span's factors vs LAPACK sgesvd (another routine) */
	T_CHECK(t, fx_doc_make(&d, 50, 1, 1, 1, 16, 9) == 0);
	for (int i = 0; i < 50; i++)
		d.h[i] = 1.0f;
	p.r_max = 16;
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	for (int i = 0; i < 50 * 16; i++)
		a[i] = quant_f16_to_f32(d.v[0][i]);
	T_CHECK(t, LAPACKE_sgesvd(LAPACK_ROW_MAJOR, 'N', 'N', 50, 16, a, 16, s,
				  NULL, 1, NULL, 1, sup) == 0);
	T_CHECK(t, m->fac[1].rank == 16);
	for (int c = 0; c < 16; c++)
		T_CHECKF(t, fabsf(m->fac[1].s[c] - s[c]) < 1e-4f * s[0], "s[%d] %g vs %g",
			 c, m->fac[1].s[c], s[c]);
	sekv_mem_free(m);
	fx_doc_free(&d);
}

static void build_factors_every_span_threads(struct test_ctx *t)
{
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m1 = NULL, *m4 = NULL;
	char err[256];
	double e1, e4;

	T_CHECK(t, fx_doc_make(&d, 900, 3, 4, 2, 32, 5) == 0);
	fx_default_params(&p);
	p.budget = 0;
	p.rank_energy = 0;       /* every component: the SVD itself is checked */
	p.factor_f16 = 0;        /* exact to fp32 rounding */
	p.n_threads = 1;
	T_CHECKF(t, fx_doc_build(&m1, &d, &p, err, sizeof err) == 0, "%s", err);
	p.n_threads = 4;
	T_CHECKF(t, fx_doc_build(&m4, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, m1->n_comp == m4->n_comp && m1->n_comp > 5);
	T_CHECK(t, m1->host_bytes == m4->host_bytes && m1->host_bytes > 0);
	/* every span has rank min(len, d_h, 32) = full rank here */
	e1 = fx_factors_vs_rows(m1, &d);
	e4 = fx_factors_vs_rows(m4, &d);
	T_CHECKF(t, e1 < 1e-5 && e4 < 1e-5, "rebuild error %g (1 thread) %g (4)", e1, e4);
	/* a rank-limited build really truncates (the check above can fail) */
	sekv_mem_free(m4);
	p.r_max = 3;
	T_CHECKF(t, fx_doc_build(&m4, &d, &p, err, sizeof err) == 0, "%s", err);
	e4 = fx_factors_vs_rows(m4, &d);
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
	fx_doc_free(&d);
}


/* The untrained g_phi rule on hand-made spectra: the fewest leading
 * components holding the energy share, gates a prefix of ones, masked
 * past n_valid, everything when the share is out of reach. */
static void rank_gate_energy_rule(struct test_ctx *t)
{
	const float s[4] = { 1.0f, 0.5f, 0.25f, 0.125f }; /* s^2: 1 .25 .0625 .015625 */
	float g[6];

	/* total 1.328125: 75% = 0.996 -> 1; 95% = 1.2617 -> 3; 100% -> 4 */
	T_CHECK(t, sekv_rank_gate(0.75f, s, 4, 4, 1.0f, NULL, 8, g) == 1 && g[0] == 1 && g[1] == 0);
	T_CHECK(t, sekv_rank_gate(0.95f, s, 4, 4, 1.0f, NULL, 8, g) == 3);
	T_CHECK(t, g[0] == 1 && g[1] == 1 && g[2] == 1 && g[3] == 0);
	T_CHECK(t, sekv_rank_gate(1.0f, s, 4, 4, 1.0f, NULL, 8, g) == 4 && g[3] == 1);
	/* the four hold half the span's energy: 95% of it is out of reach */
	T_CHECK(t, sekv_rank_gate(0.95f, s, 4, 4, 0.5f, NULL, 8, g) == 4);
	/* ... and 35% of it is 0.93 of its 2.656: the first (1) reaches it */
	T_CHECK(t, sekv_rank_gate(0.35f, s, 4, 4, 0.5f, NULL, 8, g) == 1);
	T_CHECK(t, sekv_rank_gate(0.40f, s, 4, 4, 0.5f, NULL, 8, g) == 2);
	/* gates past n_valid are masked */
	T_CHECK(t, sekv_rank_gate(1.0f, s, 4, 2, 1.0f, NULL, 8, g) == 2 && g[2] == 0 && g[3] == 0);
	/* no gate: all valid components; a zero span: none */
	T_CHECK(t, sekv_rank_gate(0.0f, s, 4, 3, 1.0f, NULL, 8, g) == 3 && g[3] == 0);
	T_CHECK(t, sekv_rank_gate(0.9f, (const float[4]){ 0 }, 4, 4, 1.0f, NULL, 8, g) == 0 &&
		   g[0] == 0);
}

/* sekv_build with the rank gate against an independent SVD (LAPACK
 * sgesvd) of every span: near rank-3 keys keep a few components holding
 * the energy share, full-rank values are stored raw, each factor's rank is
 * the one the rule gives, and only kept components are counted. */
static void build_rank_gate_kept_and_raw(struct test_ctx *t)
{
	const int n = 600, dh = 64;
	const float energy = 0.9f;
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	char err[256];
	float *a = malloc(sizeof(float) * n * dh), sv[64], sup[64];
	int n_low = 0, n_raw = 0;
	size_t host = 0;

	T_CHECK(t, a && fx_doc_make(&d, n, 1, 2, 1, dh, 13) == 0);
	for (int i = 0; i < n; i++)
		for (int j = 0; j < dh; j++) {
			/* three fixed directions with per-row weights, small noise */
			double x = 0.02 * quant_f16_to_f32(d.k[0][i * dh + j]);
			for (int c = 0; c < 3; c++)
				x += sin(0.37 * (i + 1) * (c + 1)) * cos(0.11 * (j + 3) * (c + 2)) * (3 - c);
			d.k[0][i * dh + j] = quant_f32_to_f16((float)x);
		}
	fx_no_budget(&p);
	p.rank_energy = energy;
	p.rank_energy_v = 0;  /* V follows the K gate */
	p.raw_i8 = 0;         /* int8 rows: sekv_build_rows_int8_within_gate */
	p.r_max = 64;
	p.factor_f16 = 0;
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, m->n_comp >= 5, "n_comp %d", m->n_comp);
	for (int c = 0; c < m->n_comp; c++)
		for (int w = 0; w < 2; w++) {
			const struct sekv_span *sp = &m->span[m->comp_span[c]];
			const struct sekv_factor *f = &m->fac[c * 2 + w];
			const uint16_t *x = (w ? d.v[0] : d.k[0]) + (size_t)sp->start * dh;
			int mn = sp->len < dh ? sp->len : dh, want = 0, r_cap = mn < 64 ? mn : 64;
			double all = 0, run = 0;
			for (int i = 0; i < sp->len * dh; i++)
				a[i] = quant_f16_to_f32(x[i]);
			T_CHECK(t, LAPACKE_sgesvd(LAPACK_ROW_MAJOR, 'N', 'N', sp->len, dh, a, dh, sv,
						  NULL, 1, NULL, 1, sup) == 0);
			for (int i = 0; i < mn; i++)
				all += (double)sv[i] * sv[i];
			while (want < r_cap && run < energy * all * (1 - 1e-4))
				run += (double)sv[want] * sv[want], want++;
			if ((size_t)want * ((sp->len + dh) * 4 + 4) >= (size_t)sp->len * dh * 4) {
				T_CHECKF(t, f->rank == SEKV_RANK_RAW, "span %d %s: rank %d, want raw",
					 c, w ? "V" : "K", f->rank);
				n_raw++;
				host += (size_t)sp->len * dh * 4;
				continue;
			}
			/* one component either way may tip at the share's edge */
			T_CHECKF(t, abs(f->rank - want) <= 1, "span %d %s: rank %d, rule %d", c,
				 w ? "V" : "K", f->rank, want);
			n_low += !w && f->rank <= 6;
			host += (size_t)f->rank * ((sp->len + dh) * 4 + 4);
		}
	T_CHECKF(t, n_low == m->n_comp, "%d of %d key factors kept <= 6 components", n_low,
		 m->n_comp);
	T_CHECKF(t, n_raw > 0 && n_raw == m->n_raw, "raw %d (mem %d)", n_raw, m->n_raw);
	T_CHECK(t, m->host_bytes == host && m->rank_energy == energy);
	/* raw rows are the rows; kept components rebuild within the share */
	T_CHECKF(t, fx_factors_vs_rows(m, &d) < 0.5, "rebuild error %g", fx_factors_vs_rows(m, &d));
	sekv_mem_free(m);
	fx_doc_free(&d);
	free(a);
}

/* Int8 rows (SEKV_RANK_RAW8): on flat-spectrum random rows, where low
 * rank cannot hold 0.999 of the energy, every factor goes to the form of
 * fewest bytes whose error is within the gate: int8 rows when their
 * relative squared error (computed here from the fp16 rows and the
 * absmax/127 rule) is at most 1 - E, else fp16 rows. The int8 codes
 * rebuild each element within half a step of its row's scale, host bytes
 * count len * (d_h + 4) per int8 factor, and the memory round-trips
 * through a slice and join bit for bit. */
static void build_rows_int8_within_gate(struct test_ctx *t)
{
	const int n = 400, dh = 64;
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL, *lo = NULL, *hi = NULL, *j = NULL;
	char err[256];
	int n8 = 0, n16 = 0, bad = 0, cut;
	size_t host = 0;
	float gate[2] = { 0.999f, 0.999999f };

	T_CHECK(t, fx_doc_make(&d, n, 1, 2, 1, dh, 21) == 0);
	fx_no_budget(&p);
	p.rank_energy = gate[0];
	p.rank_energy_v = gate[1];
	p.raw_i8 = 1;
	p.factor_f16 = 1;
	p.r_max = SEKV_R_MAX_ALL;
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, m->n_comp >= 5, "n_comp %d", m->n_comp);
	for (int c = 0; c < m->n_comp; c++)
		for (int w = 0; w < 2; w++) {
			const struct sekv_span *sp = &m->span[m->comp_span[c]];
			const struct sekv_factor *f = &m->fac[c * 2 + w];
			const uint16_t *x = (w ? d.v[0] : d.k[0]) + (size_t)sp->start * dh;
			double e = 0, all = 0;
			if (f->rank >= 0) {
				bad++;  /* random rows: low rank never holds 0.999 cheaper */
				continue;
			}
			for (int i = 0; i < sp->len; i++) {
				double amax = 0;
				for (int k = 0; k < dh; k++)
					amax = fmax(amax, fabs(quant_f16_to_f32(x[i * dh + k])));
				for (int k = 0; k < dh; k++) {
					double xv = quant_f16_to_f32(x[i * dh + k]);
					double q = amax > 0 ? rint(xv * 127.0 / amax) * amax / 127.0 : 0;
					e += (xv - q) * (xv - q);
					all += xv * xv;
					if (f->rank == SEKV_RANK_RAW8) {
						double y = f->s[i] * ((const int8_t *)f->u)[i * dh + k];
						bad += fabs(y - xv) > amax / 254.0 * (1 + 1e-5) + 1e-7;
					}
				}
			}
			/* (the engine's fp32 sums may tip a factor at the threshold) */
			if (fabs(e / all - (1.0 - gate[w])) > 1e-3 * (1.0 - gate[w]))
				bad += f->rank != (e / all <= 1.0 - gate[w] ? SEKV_RANK_RAW8 : SEKV_RANK_RAW);
			n8 += f->rank == SEKV_RANK_RAW8;
			n16 += f->rank == SEKV_RANK_RAW;
			host += f->rank == SEKV_RANK_RAW8 ? (size_t)sp->len * (dh + 4) :
				(size_t)sp->len * dh * 2;
		}
	T_CHECKF(t, bad == 0, "%d factors off the rule or elements off their step", bad);
	/* keys within 1 - 0.999 as int8, values at 1e-6 not */
	T_CHECKF(t, n8 == m->n_comp && n16 == m->n_comp, "int8 %d, fp16 %d of %d spans", n8, n16,
		 m->n_comp);
	T_CHECKF(t, m->n_raw == n8 + n16 && m->n_raw8 == n8, "mem: rows %d, int8 %d", m->n_raw,
		 m->n_raw8);
	T_CHECKF(t, m->host_bytes == host, "host bytes %zu, want %zu", m->host_bytes, host);
	T_CHECKF(t, fx_factors_vs_rows(m, &d) < 0.005, "rebuild error %g", fx_factors_vs_rows(m, &d));
	cut = m->span[m->comp_span[m->n_comp / 2]].start;
	T_CHECK(t, sekv_mem_slice_dup(&lo, m, 0, cut) == 0 &&
		   sekv_mem_slice_dup(&hi, m, cut, m->n_tok) == 0);
	{
		const struct sekv_mem *part[1] = { hi };
		const int32_t pos0[1] = { cut };
		T_CHECK(t, lo && hi && sekv_mem_join(&j, lo, 1, part, pos0) == 0);
	}
	T_CHECK(t, j && j->host_bytes == m->host_bytes && j->n_raw8 == m->n_raw8);
	for (int f = 0; j && f < m->n_comp * 2; f++) {
		size_t sb, ub, vb;
		int len = m->span[m->comp_span[f / 2]].len;
		sekv_factor_bytes(m->fac[f].rank, len, dh, 1, &sb, &ub, &vb);
		T_CHECKF(t, j->fac[f].rank == m->fac[f].rank && !memcmp(j->fac[f].u, m->fac[f].u, ub) &&
			 (!sb || !memcmp(j->fac[f].s, m->fac[f].s, sb)), "factor %d differs after join", f);
	}
	sekv_mem_free(j);
	sekv_mem_free(hi);
	sekv_mem_free(lo);
	sekv_mem_free(m);
	fx_doc_free(&d);
}

/* A session's slice whose landmark blocks have another size (the
 * document rebuilt with other blocks) joins a memory: its landmarks are
 * rebuilt from its key factors at the base's block size, within the int8
 * and factor rounding of the ones sekv_build makes from the exact keys;
 * the base's own landmarks stay bit for bit; keys factored before RoPE
 * are refused. */
static void join_rebuilds_landmarks_of_other_blocks(struct test_ctx *t)
{
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m16 = NULL, *m32 = NULL, *lo = NULL, *hi = NULL, *j = NULL;
	char err[256];
	double worst = 0;
	int cut, same_bits = 1;

	T_CHECK(t, fx_doc_make(&d, 600, 2, 4, 2, 64, 29) == 0);
	fx_no_budget(&p);
	p.lm_len = 16;
	T_CHECKF(t, fx_doc_build(&m16, &d, &p, err, sizeof err) == 0, "%s", err);
	p.lm_len = 32;
	T_CHECKF(t, fx_doc_build(&m32, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, m16->n_span == m32->n_span && m16->n_comp >= 6 && m16->lm_len == 16 &&
		   m32->lm_len == 32 && m16->n_lm > m32->n_lm);
	for (int i = 0; i < m16->n_span; i++)
		T_CHECK(t, m16->span[i].start == m32->span[i].start && m16->span[i].len == m32->span[i].len);
	cut = m16->span[m16->comp_span[m16->n_comp / 2]].start;
	T_CHECK(t, sekv_mem_slice_dup(&lo, m16, 0, cut) == 0 &&
		   sekv_mem_slice_dup(&hi, m32, cut, m32->n_tok) == 0);
	const struct sekv_mem *part[1] = { hi };
	const int32_t pos0[1] = { cut };
	T_CHECK(t, sekv_mem_join(&j, lo, 1, part, pos0) == 0 && j && j->lm_len == 16 &&
		   j->n_lm == m16->n_lm);
	for (int l = 0; j && l < 2; l++)
		for (int b = 0; b < m16->n_lm; b++)
			for (int kv = 0; kv < 2; kv++) {
				size_t at = ((size_t)l * m16->n_lm + b) * 2 + kv;
				double e = 0, n = 0;
				for (int i = 0; i < 64; i++) {
					double x = j->lm_s[at] * j->lm_k[at * 64 + i];
					double y = m16->lm_s[at] * m16->lm_k[at * 64 + i];
					e += (x - y) * (x - y);
					n += y * y;
				}
				if (b < m16->lm_first[m16->n_comp / 2])
					same_bits &= e == 0;
				else
					worst = fmax(worst, sqrt(e / (n > 0 ? n : 1)));
			}
	T_CHECKF(t, same_bits && worst > 0 && worst < 0.03,
		 "base blocks same bits %d, rebuilt landmarks off by %.4f", same_bits, worst);
	sekv_mem_free(j);
	j = NULL;
	/* a base without landmarks: the joined memory has none */
	{
		struct sekv_mem *m0 = NULL, *lo0 = NULL;
		p.lm_len = 0;
		T_CHECKF(t, fx_doc_build(&m0, &d, &p, err, sizeof err) == 0, "%s", err);
		T_CHECK(t, m0->n_lm == 0 && sekv_mem_slice_dup(&lo0, m0, 0, cut) == 0);
		T_CHECK(t, sekv_mem_join(&j, lo0, 1, part, pos0) == 0 && j && j->lm_len == 0 &&
			   j->n_lm == 0 && j->n_comp == m16->n_comp);
		sekv_mem_free(j);
		j = NULL;
		sekv_mem_free(lo0);
		sekv_mem_free(m0);
	}
	lo->rope_base = 10000.0f;   /* as a memory of keys factored before RoPE */
	T_CHECK(t, sekv_mem_join(&j, lo, 1, part, pos0) == SEKV_EINVAL && !j);
	sekv_mem_free(hi);
	sekv_mem_free(lo);
	sekv_mem_free(m32);
	sekv_mem_free(m16);
	fx_doc_free(&d);
}

/* sekv_mem_tier_parts: on a memory built at a 10% budget with sinks and
 * a recent window, the parts sum to static_bytes, the sinks are n_sink
 * rows, the recent window at least n_recent rows (anchors inside it count
 * as anchors), and short spans and anchors are counted from the spans
 * and anchor flags independently here. */
static void tier_parts_sum_to_static(struct test_ctx *t)
{
	const int n = 1500, dh = 64, L = 2, nkv = 2;
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	struct sekv_tier_parts tp;
	char err[256];
	size_t row = (size_t)L * nkv * dh * 2 * 2, n_short = 0, n_anchor = 0;

	T_CHECK(t, fx_doc_make(&d, n, L, 4, nkv, dh, 5) == 0);
	fx_default_params(&p);
	p.budget = 0.10;
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	sekv_mem_tier_parts(m, p.n_sink, &tp);
	T_CHECKF(t, tp.sink + tp.anchor + tp.short_span + tp.recent + tp.summary + tp.landmark ==
		 m->static_bytes, "parts %zu, static %zu", tp.sink + tp.anchor + tp.short_span +
		 tp.recent + tp.summary + tp.landmark, m->static_bytes);
	T_CHECKF(t, tp.sink == (size_t)p.n_sink * row, "sinks %zu", tp.sink / row);
	for (int i = 0; i < m->n_span; i++)
		n_short += m->span[i].full ? (size_t)m->span[i].len : 0;
	for (int i = 0; i < n; i++) {
		int in_span = 0;
		for (int s = 0; s < m->n_span; s++)
			in_span |= i >= m->span[s].start && i < m->span[s].start + m->span[s].len;
		n_anchor += m->is_anchor[i] && !in_span && i >= p.n_sink;
	}
	T_CHECKF(t, tp.short_span == n_short * row && tp.anchor == n_anchor * row,
		 "short %zu (want %zu), anchors %zu (want %zu)", tp.short_span / row, n_short,
		 tp.anchor / row, n_anchor);
	T_CHECKF(t, tp.recent >= (size_t)(p.n_recent - 16) * row && tp.recent <= (size_t)p.n_recent * row,
		 "recent %zu rows", tp.recent / row);
	T_CHECK(t, tp.summary == (size_t)m->n_comp * row && tp.landmark > 0);
	sekv_mem_free(m);
	fx_doc_free(&d);
}

/* The short-input rule (sekv_params.exact_below): a 600-token text at a
 * 10% budget keeps every row exact (no spans; the note says so); grown
 * by a conversation it stays exact while under the threshold, then its
 * positions after the sinks are segmented as a long text's. */
static void build_short_doc_stays_exact(struct test_ctx *t)
{
	const int n = 2600, n0 = 600, n1 = 1400, dh = 32;
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m0 = NULL, *m1 = NULL, *m2 = NULL;
	const uint16_t *k1[1], *v1[1], *k2[1], *v2[1];
	char err[256];

	T_CHECK(t, fx_doc_make(&d, n, 1, 2, 1, dh, 8) == 0);
	sekv_default_params(&p);
	p.budget = 0.10;
	T_CHECK(t, p.exact_below > n1 && p.exact_below < n);
	T_CHECKF(t, sekv_build(&m0, &p, n0, NULL, d.h, 1, d.layer_id, 2, 1, dh,
			       (const uint16_t *const *)d.k, (const uint16_t *const *)d.v, err,
			       sizeof err) == 0, "%s", err);
	T_CHECKF(t, m0->n_span == 0 && m0->n_exact == n0 && strstr(m0->note, "kept exact"),
		 "%d spans, %d exact: %s", m0->n_span, m0->n_exact, m0->note);
	T_CHECK(t, m0->static_bytes == m0->full_kv_bytes && m0->host_bytes == 0);
	k1[0] = d.k[0] + (size_t)n0 * dh;
	v1[0] = d.v[0] + (size_t)n0 * dh;
	T_CHECKF(t, sekv_mem_append(&m1, m0, &p, n1 - n0, NULL, d.h + n0, k1, v1, err,
				    sizeof err) == 0, "%s", err);
	T_CHECKF(t, m1->n_span == 0 && m1->n_exact == n1, "grown to %d: %d spans", n1, m1->n_span);
	k2[0] = d.k[0] + (size_t)n1 * dh;
	v2[0] = d.v[0] + (size_t)n1 * dh;
	T_CHECKF(t, sekv_mem_append(&m2, m1, &p, n - n1, NULL, d.h + n1, k2, v2, err,
				    sizeof err) == 0, "%s", err);
	T_CHECKF(t, m2->n_tok == n && m2->n_comp > 10 && m2->span[0].start == p.n_sink &&
		 m2->n_exact < n / 2, "grown to %d: %d compressed spans, %d exact", n, m2->n_comp,
		 m2->n_exact);
	sekv_mem_free(m2);
	sekv_mem_free(m1);
	sekv_mem_free(m0);
	fx_doc_free(&d);
}

/* sekv_anchor_score_attention: log of the mean mass per later query,
 * summed over rows; negative and non-finite entries count as 0. Hand
 * values: n = 4, rows {4, 3, 2, 1} and {0, 3, -1, NaN}: sums 4, 6, 2, 1
 * over 4, 3, 2, 1 queries: means 1, 2, 1, 1. */
static void anchor_score_attention_hand_values(struct test_ctx *t)
{
	const float acc[8] = { 4, 3, 2, 1, 0, 3, -1, NAN };
	const double want[4] = { 0, 0.69314718, 0, 0 };
	float out[4];

	sekv_anchor_score_attention(acc, 2, 4, out);
	for (int i = 0; i < 4; i++)
		T_CHECKF(t, fabs(out[i] - want[i]) < 1e-6, "t %d: %g, want %g", i, out[i], want[i]);
}

/* With sekv_params.anchor_score set, sekv_build places the anchors by that
 * score (planted spikes where surprisal has none become anchors, and the
 * surprisal anchors that are not spikes do not) while the memory keeps
 * the surprisal itself (the summaries' weights); a non-finite score is
 * refused. */
static void build_anchors_follow_anchor_score(struct test_ctx *t)
{
	const int n = 1200, dh = 32;
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m0 = NULL, *m1 = NULL;
	float *score = calloc(n, sizeof *score);
	char err[256];
	int planted = 0, hit = 0, kept_h = 0, n_h = 0;

	T_CHECK(t, score && fx_doc_make(&d, n, 1, 2, 1, dh, 23) == 0);
	fx_no_budget(&p);
	p.n_sink = 4;
	p.n_recent = 16;
	T_CHECKF(t, fx_doc_build(&m0, &d, &p, err, sizeof err) == 0, "%s", err);
	/* spikes every 37 tokens, where surprisal has no anchor */
	for (int i = 40; i < n - 40; i += 37)
		if (!m0->is_anchor[i]) {
			score[i] = 10.0f;
			planted++;
		}
	p.anchor_score = score;
	T_CHECKF(t, fx_doc_build(&m1, &d, &p, err, sizeof err) == 0, "%s", err);
	for (int i = 0; i < n; i++) {
		hit += score[i] > 0 && m1->is_anchor[i];
		if (i >= p.n_sink && i < n - p.n_recent && m0->is_anchor[i]) {
			n_h++;
			kept_h += m1->is_anchor[i] && score[i] > 0;
		}
	}
	T_CHECKF(t, planted > 20 && hit == planted && n_h > 20 && kept_h == 0,
		 "%d of %d spikes anchored; %d of %d surprisal anchors kept", hit, planted, kept_h, n_h);
	T_CHECK(t, !memcmp(m1->surprisal, d.h, (size_t)n * sizeof *d.h));
	sekv_mem_free(m1);
	m1 = NULL;
	score[100] = NAN;
	T_CHECK(t, fx_doc_build(&m1, &d, &p, err, sizeof err) == SEKV_EINVAL && m1 == NULL &&
		   strstr(err, "anchor score"));
	sekv_mem_free(m0);
	fx_doc_free(&d);
	free(score);
}

/* sekv_anchor_score_union: the larger of the two causal z-scores (0 for
 * the first two positions and at zero deviation). Hand values: a = {1, 3,
 * 2, 10}, b = {5, 5, 5, 4}: at t = 2, a's mean 2 and deviation 1 give 0,
 * b's deviation 0 gives 0; at t = 3, a's mean 2 and deviation sqrt(2/3)
 * give 8 / 0.8165 = 9.798, b's (mean 5, deviation 0) 0. */
static void anchor_score_union_hand_values(struct test_ctx *t)
{
	const float a[4] = { 1, 3, 2, 10 }, b[4] = { 5, 5, 5, 4 }, c[4] = { 0, 0, 9, 0 };
	const double want[4] = { 0, 0, 0, 9.797959 };
	float out[4];

	sekv_anchor_score_union(a, b, 4, out);
	for (int i = 0; i < 4; i++)
		T_CHECKF(t, fabs(out[i] - want[i]) < 1e-5, "t %d: %g, want %g", i, out[i], want[i]);
	/* b = {5, 5, 5, 4} vs c = {0, 0, 9, 0}: at t = 2 c's deviation is 0 (0);
	 * at t = 3 c's mean 3, deviation sqrt(18) = 4.243: z -0.707; b's 0 */
	sekv_anchor_score_union(c, b, 4, out);
	T_CHECKF(t, fabs(out[3]) < 1e-6 && fabs(out[2]) < 1e-6, "%g %g", out[2], out[3]);
}

const struct test_case test_sekv[] = {
	{ "sekv_segment_known_anchors", segment_known_anchors },
	{ "sekv_segment_matches_bruteforce", segment_matches_bruteforce },
	{ "sekv_segment_causal_prefix", segment_causal_prefix },
	{ "sekv_segment_sinks_recent_lmin", segment_sinks_recent_lmin },
	{ "sekv_mem_alloc_shapes_and_counts", mem_alloc_shapes_and_counts },
	{ "sekv_svd_error_falls_with_rank", svd_error_falls_with_rank },
	{ "sekv_svd_singular_values_vs_lapack", svd_singular_values_vs_lapack },
	{ "sekv_build_factors_every_span_threads", build_factors_every_span_threads },
	{ "sekv_rank_gate_energy_rule", rank_gate_energy_rule },
	{ "sekv_build_rank_gate_kept_and_raw", build_rank_gate_kept_and_raw },
	{ "sekv_build_rows_int8_within_gate", build_rows_int8_within_gate },
	{ "sekv_join_rebuilds_landmarks_of_other_blocks", join_rebuilds_landmarks_of_other_blocks },
	{ "sekv_tier_parts_sum_to_static", tier_parts_sum_to_static },
	{ "sekv_build_short_doc_stays_exact", build_short_doc_stays_exact },
	{ "sekv_anchor_score_attention_hand_values", anchor_score_attention_hand_values },
	{ "sekv_build_anchors_follow_anchor_score", build_anchors_follow_anchor_score },
	{ "sekv_anchor_score_union_hand_values", anchor_score_union_hand_values },
	{ NULL, NULL },
};
