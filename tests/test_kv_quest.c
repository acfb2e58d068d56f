/* test_kv_quest.c - Quest's stream (engine/kv/kv_quest.c): the page bound on
 * hand-made keys and on random pages (never below a true score); the page
 * holding the key most aligned with a query is chosen, a group keeps what
 * any of its heads needs; the budget's rows are never exceeded; decoding
 * equals a double-precision softmax over the chosen pages' rows and the
 * tail (every page: exact attention), the pages chosen are those with the
 * largest bound, and the evidence probe maps rows back to positions.
 */
#include "tests/test.h"
#include "tests/sekv_fixture.h"

#include "engine/backend/backend.h"
#include "engine/base/err.h"
#include "engine/kv/kv_quest.h"
#include "engine/model/model.h"
#include "engine/quant/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define QSCALE 0.125f

/* The bound on a hand-made page (the most aligned key reaches it), and on
 * random pages: at least every key's q . k, equal for a one-key page. */
static void quest_bound_is_upper_bound(struct test_ctx *t)
{
	const float q[2] = { 1, -2 }, mn[2] = { 1, -1 }, mx[2] = { 3, 1 };
	float keys[16][64], kmin[64], kmax[64], qq[64];

	/* keys (1, 1) and (3, -1): scores -1 and 5; bound max(1, 3) + max(2, -2) */
	T_CHECK(t, kv_quest_bound(q, mn, mx, 2) == 5.0f);
	fx_rng_seed(7);
	for (int trial = 0; trial < 50; trial++) {
		int n = 1 + trial % 16;
		for (int i = 0; i < 64; i++) {
			qq[i] = (float)fx_rng_n();
			kmin[i] = INFINITY;
			kmax[i] = -INFINITY;
		}
		for (int r = 0; r < n; r++)
			for (int i = 0; i < 64; i++) {
				keys[r][i] = (float)fx_rng_n();
				kmin[i] = fminf(kmin[i], keys[r][i]);
				kmax[i] = fmaxf(kmax[i], keys[r][i]);
			}
		double b = kv_quest_bound(qq, kmin, kmax, 64), top = -INFINITY;
		for (int r = 0; r < n; r++) {
			double s = 0;
			for (int i = 0; i < 64; i++)
				s += (double)qq[i] * keys[r][i];
			top = fmax(top, s);
			T_CHECKF(t, b >= s - 1e-4, "trial %d key %d: bound %g < score %g", trial, r, b, s);
		}
		T_CHECKF(t, n > 1 || fabs(b - top) < 1e-4, "one key: bound %g, score %g", b, top);
	}
}

/* A stream on d (page 16, page_rows rows a step) and its pieces. */
struct qrig {
	const struct fx_doc *d;
	struct backend *be;
	struct kv_quest *s;
	int cap, n_step;
	float *tk, *tv;   /* [n_layer][cap][n_head_kv * d_h] tail rows, fp16-rounded */
};

static int qrig_open(struct qrig *r, const struct fx_doc *d, int page_rows, int cap)
{
	struct kv_quest_params qp = { .n_layer = d->n_layer, .layer_id = d->layer_id,
		.n_head = d->n_head, .n_head_kv = d->n_head_kv, .d_h = d->d_h, .q_scale = QSCALE,
		.tail_cap = cap, .page = KV_QUEST_PAGE, .page_rows = page_rows };
	size_t tail = (size_t)d->n_layer * cap * d->n_head_kv * d->d_h;
	char err[256];

	memset(r, 0, sizeof *r);
	r->d = d;
	r->cap = cap;
	r->tk = malloc(tail * sizeof *r->tk);
	r->tv = malloc(tail * sizeof *r->tv);
	if (!r->tk || !r->tv || backend_open("cpu", 2, &r->be, err, sizeof err))
		return -1;
	qp.be = r->be;
	return kv_quest_new(&r->s, &qp, d->n_tok, (const uint16_t *const *)d->k,
			    (const uint16_t *const *)d->v, err, sizeof err) ? -1 : 0;
}

static void qrig_close(struct qrig *r)
{
	kv_quest_free(r->s);
	backend_close(r->be);
	free(r->tk);
	free(r->tv);
	memset(r, 0, sizeof *r);
}

static float key_at(const struct fx_doc *d, int l, int t, int g, int j)
{
	return quant_f16_to_f32(d->k[l][((size_t)t * d->n_head_kv + g) * d->d_h + j]);
}

/* Page pg's bound in double for query head h (the page's extremes from
 * the document's fp16 keys). */
static double ref_bound(const struct fx_doc *d, int l, int h, int pg, const float *q)
{
	int g = h / (d->n_head / d->n_head_kv), t1 = (pg + 1) * 16 < d->n_tok ? (pg + 1) * 16 : d->n_tok;
	double b = 0;

	for (int j = 0; j < d->d_h; j++) {
		double mn = INFINITY, mx = -INFINITY;
		for (int t = pg * 16; t < t1; t++) {
			mn = fmin(mn, key_at(d, l, t, g, j));
			mx = fmax(mx, key_at(d, l, t, g, j));
		}
		b += fmax(q[j] * mn, q[j] * mx);
	}
	return b;
}

/* 1 when the pages KV head g of layer index l chose have the largest
 * bounds for queries q [n_head][d_h] (the most over its query heads). */
static int pages_are_best(const struct qrig *r, int l, int g, const float *q)
{
	const struct fx_doc *d = r->d;
	int group = d->n_head / d->n_head_kv, n_page = (d->n_tok + 15) / 16;
	const int32_t *pg;
	int n_pg = kv_quest_chosen(r->s, l, g, &pg);
	char in[4096] = { 0 };
	double lo = INFINITY, hi = -INFINITY;

	for (int c = 0; c < n_pg; c++)
		in[pg[c]] = 1;
	for (int p = 0; p < n_page; p++) {
		double b = -INFINITY;
		for (int hh = 0; hh < group; hh++)
			b = fmax(b, ref_bound(d, l, g * group + hh, p, q + (size_t)(g * group + hh) * d->d_h));
		if (in[p])
			lo = fmin(lo, b);
		else
			hi = fmax(hi, b);
	}
	return lo >= hi - 1e-3 * fabs(hi) - 1e-4;
}

/* Query head h of layer index l against the double reference over the
 * chosen pages' rows and the tail so far: the worst difference of out
 * [d_h], or 1e9 when mass (this head's probe row [n_tok], or NULL) is not
 * the reference weight on every chosen position and 0 elsewhere. */
static double check_head(const struct qrig *r, int l, int h, const float *q, const float *out,
			 const float *mass)
{
	const struct fx_doc *d = r->d;
	int dh = d->d_h, nkv = d->n_head_kv * dh, g = h / (d->n_head / d->n_head_kv), n = 0;
	const int32_t *pg;
	int n_pg = kv_quest_chosen(r->s, l, g, &pg);
	double *lg = malloc(((size_t)d->n_tok + r->cap) * sizeof *lg), mx = -INFINITY, z = 0, acc[64] = { 0 };
	double worst = 0, seen = 0;

	for (int c = 0; c < n_pg; c++)
		for (int t = pg[c] * 16; t < (pg[c] + 1) * 16 && t < d->n_tok; t++, n++) {
			double a = 0;
			for (int j = 0; j < dh; j++)
				a += (double)q[j] * key_at(d, l, t, g, j);
			lg[n] = a * QSCALE;
		}
	for (int i = 0; i <= r->n_step; i++, n++) {
		double a = 0;
		for (int j = 0; j < dh; j++)
			a += (double)q[j] * r->tk[((size_t)l * r->cap + i) * nkv + g * dh + j];
		lg[n] = a * QSCALE;
	}
	for (int i = 0; i < n; i++)
		mx = fmax(mx, lg[i]);
	for (int i = 0; i < n; i++)
		z += lg[i] = exp(lg[i] - mx);
	n = 0;
	for (int c = 0; c < n_pg; c++)
		for (int t = pg[c] * 16; t < (pg[c] + 1) * 16 && t < d->n_tok; t++, n++) {
			for (int j = 0; j < dh; j++)
				acc[j] += lg[n] / z * quant_f16_to_f32(d->v[l][((size_t)t * d->n_head_kv + g) * dh + j]);
			if (mass && fabs(mass[t] - lg[n] / z) > 1e-5)
				worst = 1e9;
			seen += mass ? mass[t] : 0;
		}
	for (int i = 0; i <= r->n_step; i++, n++)
		for (int j = 0; j < dh; j++)
			acc[j] += lg[n] / z * r->tv[((size_t)l * r->cap + i) * nkv + g * dh + j];
	for (int j = 0; j < dh; j++)
		worst = fmax(worst, fabs(out[j] - acc[j]));
	for (int t = 0; mass && t < d->n_tok; t++)
		seen -= mass[t];
	free(lg);
	/* mass outside the chosen pages: what all positions got beyond them */
	return fabs(seen) > 1e-6 ? 1e9 : worst;
}

/* One step of random q, k, v through every layer, each checked by
 * pages_are_best and check_head (with a probe on query head ph when mass
 * [n_layer][n_tok] is given). The worst difference, -1 on failure, 1e9
 * when the pages or the probe are wrong. */
static double qrig_step(struct qrig *r, float *mass, int ph)
{
	const struct fx_doc *d = r->d;
	int dh = d->d_h, nq = d->n_head * dh, nkv = d->n_head_kv * dh;
	float q[8 * 64], k[8 * 64], v[8 * 64], out[8 * 64];
	double worst = 0;

	if (mass)
		memset(mass, 0, (size_t)d->n_layer * d->n_tok * sizeof *mass);
	for (int l = 0; l < d->n_layer && worst >= 0 && worst < 1e9; l++) {
		float *ml = mass ? mass + (size_t)l * d->n_tok : NULL;
		struct model_probe pr = { .n = 1, .layer = { d->layer_id[l] }, .head = { ph },
					  .n_pos = d->n_tok, .mass = ml };
		kv_quest_set_probe(r->s, mass ? &pr : NULL);
		for (int i = 0; i < nq; i++)
			q[i] = (float)(2 * fx_rng_n());
		for (int i = 0; i < nkv; i++) {
			k[i] = (float)fx_rng_n();
			v[i] = (float)fx_rng_n();
			r->tk[((size_t)l * r->cap + r->n_step) * nkv + i] = fx_f16r(k[i]);
			r->tv[((size_t)l * r->cap + r->n_step) * nkv + i] = fx_f16r(v[i]);
		}
		if (kv_quest_attend(r->s, d->layer_id[l], d->n_tok + r->n_step, q, k, v, out)) {
			worst = -1;
			break;
		}
		kv_quest_set_probe(r->s, NULL);
		for (int g = 0; g < d->n_head_kv; g++)
			if (!pages_are_best(r, l, g, q))
				worst = 1e9;
		for (int h = 0; h < d->n_head && worst < 1e9; h++)
			worst = fmax(worst, check_head(r, l, h, q + (size_t)h * dh, out + (size_t)h * dh,
						       h == ph ? ml : NULL));
	}
	r->n_step++;
	return worst;
}

/* Keys of small noise but one at position 37 (page 2) along query head
 * 0's direction, a weaker one at 20 (page 1) along it too, and one at 53
 * (page 3) along head 1's: with one page a step the group takes page 2;
 * with two, page 3 (head 1 needs it more than head 0 needs page 1). */
static void quest_chooses_aligned_page(struct test_ctx *t)
{
	struct fx_doc d;
	struct qrig r = { 0 };
	float q[2 * 16] = { 0 }, k[16] = { 0 }, v[16] = { 0 }, out[32];
	const int32_t *pg;

	T_CHECK(t, fx_doc_make(&d, 64, 1, 2, 1, 16, 4) == 0);
	for (int p = 0; p < 64; p++)
		for (int j = 0; j < 16; j++)
			d.k[0][p * 16 + j] = quant_f32_to_f16((float)(0.1 * fx_rng_n()));
	d.k[0][37 * 16 + 0] = quant_f32_to_f16(5);
	d.k[0][20 * 16 + 0] = quant_f32_to_f16(1);
	d.k[0][53 * 16 + 1] = quant_f32_to_f16(3);
	q[0] = 3;       /* head 0 along e0 */
	q[16 + 1] = 3;  /* head 1 along e1 */
	for (int pages = 1; pages <= 2; pages++) {
		T_CHECK(t, qrig_open(&r, &d, 16 * pages, 2) == 0);
		int rc = kv_quest_attend(r.s, d.layer_id[0], 64, q, k, v, out);
		int n = kv_quest_chosen(r.s, 0, 0, &pg);
		int ok = rc == 0 && n == pages && (pages == 1 ? pg[0] == 2 : pg[0] == 2 && pg[1] == 3);
		int first = n ? pg[0] : -1, last = n ? pg[n - 1] : -1;
		qrig_close(&r);
		T_CHECKF(t, ok, "%d page(s): rc %d, %d chosen, %d..%d", pages, rc, n, first, last);
	}
	fx_doc_free(&d);
}

/* At a budget of 100 rows a step (6 pages of 16) on a 500-token document
 * with grouped heads: the stream equals the reference over the chosen
 * pages, which have the largest bounds; each (layer, KV head) holds at
 * most its budget; resident bytes are metadata + chosen rows + tail, at
 * most the fixed part + tail; the probe lands on chosen positions only. */
static void quest_budget_and_pages_match_reference(struct test_ctx *t)
{
	struct fx_doc d;
	struct qrig r = { 0 };
	float *mass = NULL;

	T_CHECK(t, fx_doc_make(&d, 500, 2, 4, 2, 32, 23) == 0);
	T_CHECK(t, qrig_open(&r, &d, 100, 6) == 0);
	size_t meta = kv_quest_meta_bytes(r.s), row = model_kv_bytes(1, 1, 1, 32);
	T_CHECK(t, meta == model_kv_bytes(32, 2, 2, 32));
	T_CHECK(t, kv_quest_fixed_bytes(r.s) == meta + model_kv_bytes(96, 2, 2, 32));
	mass = calloc((size_t)2 * 500, sizeof *mass);
	fx_rng_seed(31);
	for (int st = 0; st < 5; st++) {
		double e = qrig_step(&r, st % 2 ? mass : NULL, st % 4);
		T_CHECKF(t, e >= 0 && e < 1e-4, "step %d: max diff %g (1e9: pages or probe wrong)", st, e);
		size_t want = meta + model_kv_bytes(st + 1, 2, 2, 32);
		int rows_all = 0;
		for (int l = 0; l < 2; l++)
			for (int g = 0; g < 2; g++) {
				const int32_t *pg;
				int n = kv_quest_chosen(r.s, l, g, &pg), rows = 0;
				T_CHECK(t, n == 6);
				for (int c = 0; c < n; c++)
					rows += pg[c] == 31 ? 500 - 31 * 16 : 16;
				T_CHECK(t, rows <= 100);
				rows_all += rows;
			}
		want += (size_t)rows_all * row;
		T_CHECKF(t, kv_quest_resident_bytes(r.s) == want, "step %d: resident %zu, want %zu", st,
			 kv_quest_resident_bytes(r.s), want);
		T_CHECK(t, kv_quest_resident_bytes(r.s) <= kv_quest_fixed_bytes(r.s) + model_kv_bytes(st + 1, 2, 2, 32));
		T_CHECK(t, kv_quest_tail_rows(r.s) == st + 1);
	}
	free(mass);
	qrig_close(&r);
	fx_doc_free(&d);
}

/* A budget covering every page: exact attention over the whole document
 * and the tail (a double reference), also after the oldest tail rows are
 * evicted from the reference's and the stream's view alike. */
static void quest_all_pages_is_exact(struct test_ctx *t)
{
	struct fx_doc d;
	struct qrig r = { 0 };

	T_CHECK(t, fx_doc_make(&d, 300, 2, 4, 1, 32, 9) == 0);
	T_CHECK(t, qrig_open(&r, &d, 304, 4) == 0);
	fx_rng_seed(2);
	for (int st = 0; st < 3; st++) {
		double e = qrig_step(&r, NULL, 0);
		T_CHECKF(t, e >= 0 && e < 1e-4, "step %d: max diff %g", st, e);
		for (int l = 0; l < 2; l++) {
			const int32_t *pg;
			T_CHECK(t, kv_quest_chosen(r.s, l, 0, &pg) == 19 && pg[0] == 0 && pg[18] == 18);
		}
	}
	T_CHECK(t, kv_quest_evict(r.s, 300 + 4) == SEKV_EINVAL && kv_quest_evict(r.s, 301) == 0 &&
		kv_quest_tail_rows(r.s) == 2);
	qrig_close(&r);
	fx_doc_free(&d);
}

/* Bad shapes and a budget below one page are refused. */
static void quest_refuses_bad_params(struct test_ctx *t)
{
	struct fx_doc d;
	struct backend *be = NULL;
	struct kv_quest *s = NULL;
	char err[256];

	T_CHECK(t, fx_doc_make(&d, 40, 1, 2, 1, 16, 3) == 0);
	T_CHECK(t, backend_open("cpu", 1, &be, err, sizeof err) == 0);
	struct kv_quest_params qp = { .n_layer = 1, .layer_id = d.layer_id, .n_head = 2, .n_head_kv = 1,
		.d_h = 16, .q_scale = 0.25f, .tail_cap = 4, .be = be, .page = 16, .page_rows = 15 };
	const uint16_t *const *k = (const uint16_t *const *)d.k, *const *v = (const uint16_t *const *)d.v;
	T_CHECK(t, kv_quest_new(&s, &qp, 40, k, v, err, sizeof err) == SEKV_EINVAL && !s);
	qp.page_rows = 16;
	qp.n_head = 3;      /* 3 query heads cannot share 2 KV heads */
	qp.n_head_kv = 2;
	T_CHECK(t, kv_quest_new(&s, &qp, 40, k, v, err, sizeof err) == SEKV_EINVAL && !s);
	qp.n_head = 2;
	qp.n_head_kv = 1;
	T_CHECKF(t, kv_quest_new(&s, &qp, 40, k, v, err, sizeof err) == 0, "%s", err);
	float q[32] = { 0 }, kk[16] = { 0 }, vv[16] = { 0 }, out[32];
	T_CHECK(t, kv_quest_attend(s, d.layer_id[0] + 1, 40, q, kk, vv, out) == SEKV_EINVAL);
	T_CHECK(t, kv_quest_attend(s, d.layer_id[0], 41, q, kk, vv, out) == SEKV_EINVAL);
	kv_quest_free(s);
	backend_close(be);
	fx_doc_free(&d);
}

const struct test_case test_kv_quest[] = {
	{ "kv_quest_bound_is_upper_bound", quest_bound_is_upper_bound },
	{ "kv_quest_chooses_aligned_page", quest_chooses_aligned_page },
	{ "kv_quest_budget_and_pages_match_reference", quest_budget_and_pages_match_reference },
	{ "kv_quest_all_pages_is_exact", quest_all_pages_is_exact },
	{ "kv_quest_refuses_bad_params", quest_refuses_bad_params },
	{ NULL, NULL },
};
