/* test_kv_shadow.c - ShadowKV's stream (engine/kv/kv_shadow.c): the budget
 * rule on hand-checked shapes; at full rank with every chunk rebuilt it
 * decodes as exact attention (a double-precision softmax over every row
 * and the tail, NEOX RoPE), and keys whose pre-RoPE matrix has rank 3
 * come back exact from a rank-3 factor (GPT-J RoPE: the rotation is
 * undone before the SVD); the chunk whose landmark a query meets is
 * rebuilt and the chunk whose keys stray from their mean is held exact;
 * the device bytes of a plan never pass its budget and the chunks a step
 * takes have the best landmark scores; malformed parameters are refused.
 */
#include "tests/test.h"
#include "tests/sekv_fixture.h"

#include "engine/backend/backend.h"
#include "engine/base/err.h"
#include "engine/kv/kv_shadow.h"
#include "engine/model/model.h"
#include "engine/quant/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define QSCALE 0.125f
#define CH KV_SHADOW_CHUNK

/* The plan of a 2048-token document of 2 KV heads of 64 (128 columns, a
 * layer's factor row of rank r takes ceil(4356 r / 512) rows): the least
 * rows hold rank 1, the ends and one chunk; 1000 rows give rank 88 (749
 * rows <= 750), 3 outliers of the 235 left and 26 rebuilt chunks; a huge
 * budget caps the rank at 128 and keeps one chunk to choose; a document
 * of two chunks (12 tokens, all exact) has nothing to choose, and its
 * least rows (13) leave no room past rank 1. */
static void shadow_plan_follows_budget_rule(struct test_ctx *t)
{
	struct kv_shadow_plan p;

	T_CHECK(t, kv_shadow_rows_min(2048, 2, 64, CH) == 9 + 16 + 8);
	T_CHECK(t, kv_shadow_plan(2048, 2, 64, CH, 32, &p) == SEKV_EINVAL);
	T_CHECK(t, kv_shadow_plan(2048, 2, 64, CH, 33, &p) == 0 && p.rank == 1 && p.n_outlier == 0 &&
		p.n_select == 1);
	T_CHECK(t, kv_shadow_plan(2048, 2, 64, CH, 1000, &p) == 0);
	T_CHECKF(t, p.rank == 88 && p.n_outlier == 3 && p.n_select == 26, "rank %d, %d outliers, %d chunks",
		 p.rank, p.n_outlier, p.n_select);
	T_CHECK(t, kv_shadow_plan(2048, 2, 64, CH, 1000000, &p) == 0 && p.rank == 128 &&
		p.n_outlier == 253 && p.n_select == 1);
	T_CHECK(t, kv_shadow_rows_min(12, 2, 64, CH) == 13);
	T_CHECK(t, kv_shadow_plan(12, 2, 64, CH, 13, &p) == 0 && p.rank == 1 && p.n_select == 0 &&
		p.n_outlier == 0);
	T_CHECK(t, kv_shadow_landmark_rows(2048, CH) == 128 && kv_shadow_landmark_rows(2049, CH) == 129);
	T_CHECK(t, kv_shadow_rows_min(100, 0, 64, CH) == -1 && kv_shadow_rows_min(100, 2, 64, 0) == -1);
	T_CHECK(t, kv_shadow_plan(100, 2, 64, CH, 1000, NULL) == SEKV_EINVAL);
}

/* A stream on d and its pieces: RoPE of base 10000 over n_rot dims. */
struct srig {
	const struct fx_doc *d;
	struct backend *be;
	struct kv_shadow *s;
	struct model_rope rope;
	double freq[64];
	int cap, n_step;
	float *tk, *tv;   /* [n_layer][cap][n_head_kv * d_h] tail rows, fp16-rounded */
};

static void srig_rope(struct srig *r, int n_rot, int neox)
{
	model_rope_inv_freq(10000.0f, n_rot, r->freq);
	r->rope = (struct model_rope){ neox, n_rot, r->freq, 1.0f };
}

static int srig_open(struct srig *r, const struct fx_doc *d, int n_rot, int neox,
		     const struct kv_shadow_plan *pl, int cap)
{
	char err[256];

	memset(r, 0, sizeof *r);
	r->d = d;
	r->cap = cap;
	srig_rope(r, n_rot, neox);
	size_t tail = (size_t)d->n_layer * cap * d->n_head_kv * d->d_h;
	r->tk = malloc(tail * sizeof *r->tk);
	r->tv = malloc(tail * sizeof *r->tv);
	if (!r->tk || !r->tv || backend_open("cpu", 2, &r->be, err, sizeof err))
		return -1;
	struct kv_shadow_params sp = { .n_layer = d->n_layer, .layer_id = d->layer_id,
		.n_head = d->n_head, .n_head_kv = d->n_head_kv, .d_h = d->d_h, .q_scale = QSCALE,
		.tail_cap = cap, .be = r->be, .rope = &r->rope, .chunk = CH, .rank = pl->rank,
		.n_outlier = pl->n_outlier, .n_select = pl->n_select };
	return kv_shadow_new(&r->s, &sp, d->n_tok, (const uint16_t *const *)d->k,
			     (const uint16_t *const *)d->v, err, sizeof err) ? -1 : 0;
}

static void srig_close(struct srig *r)
{
	kv_shadow_free(r->s);
	backend_close(r->be);
	free(r->tk);
	free(r->tv);
	memset(r, 0, sizeof *r);
}

static float key_at(const struct fx_doc *d, int l, int t, int g, int j)
{
	return quant_f16_to_f32(d->k[l][((size_t)t * d->n_head_kv + g) * d->d_h + j]);
}

/* Query head h of layer index l against exact attention in double over
 * every document row and the tail so far: the worst difference of out
 * [d_h], or 1e9 when mass (this head's probe row [n_tok], or NULL) is not
 * the reference weight of every position. */
static double exact_head(const struct srig *r, int l, int h, const float *q, const float *out,
			 const float *mass)
{
	const struct fx_doc *d = r->d;
	int dh = d->d_h, nkv = d->n_head_kv * dh, g = h / (d->n_head / d->n_head_kv), n = d->n_tok;
	double *lg = malloc(((size_t)n + r->cap) * sizeof *lg), mx = -INFINITY, z = 0, acc[64] = { 0 };
	double worst = 0;

	for (int t = 0; t < n; t++) {
		double a = 0;
		for (int j = 0; j < dh; j++)
			a += (double)q[j] * key_at(d, l, t, g, j);
		lg[t] = a * QSCALE;
	}
	for (int i = 0; i <= r->n_step; i++) {
		double a = 0;
		for (int j = 0; j < dh; j++)
			a += (double)q[j] * r->tk[((size_t)l * r->cap + i) * nkv + g * dh + j];
		lg[n + i] = a * QSCALE;
	}
	for (int i = 0; i <= n + r->n_step; i++)
		mx = fmax(mx, lg[i]);
	for (int i = 0; i <= n + r->n_step; i++)
		z += lg[i] = exp(lg[i] - mx);
	for (int t = 0; t < n; t++) {
		for (int j = 0; j < dh; j++)
			acc[j] += lg[t] / z * quant_f16_to_f32(d->v[l][((size_t)t * d->n_head_kv + g) * dh + j]);
		if (mass && fabs(mass[t] - lg[t] / z) > 1e-2 * lg[t] / z + 1e-5)
			worst = 1e9;
	}
	for (int i = 0; i <= r->n_step; i++)
		for (int j = 0; j < dh; j++)
			acc[j] += lg[n + i] / z * r->tv[((size_t)l * r->cap + i) * nkv + g * dh + j];
	for (int j = 0; j < dh; j++)
		worst = fmax(worst, fabs(out[j] - acc[j]));
	free(lg);
	return worst;
}

/* One step of random q, k, v through every layer; with exact set, each
 * query head is checked by exact_head (a probe on query head ph when mass
 * [n_layer][n_tok] is given). qs (NULL: not kept) gets each layer's
 * queries [n_layer][n_head * d_h]. The worst difference, -1 when a call
 * failed. */
static double srig_step(struct srig *r, int exact, float *mass, int ph, float *qs)
{
	const struct fx_doc *d = r->d;
	int dh = d->d_h, nq = d->n_head * dh, nkv = d->n_head_kv * dh;
	float q[8 * 64], k[8 * 64], v[8 * 64], out[8 * 64];
	double worst = 0;

	if (mass)
		memset(mass, 0, (size_t)d->n_layer * d->n_tok * sizeof *mass);
	for (int l = 0; l < d->n_layer && worst >= 0; l++) {
		float *ml = mass ? mass + (size_t)l * d->n_tok : NULL;
		struct model_probe pr = { .n = 1, .layer = { d->layer_id[l] }, .head = { ph },
					  .n_pos = d->n_tok, .mass = ml };
		kv_shadow_set_probe(r->s, mass ? &pr : NULL);
		for (int i = 0; i < nq; i++)
			q[i] = (float)(2 * fx_rng_n());
		for (int i = 0; i < nkv; i++) {
			k[i] = (float)fx_rng_n();
			v[i] = (float)fx_rng_n();
			r->tk[((size_t)l * r->cap + r->n_step) * nkv + i] = fx_f16r(k[i]);
			r->tv[((size_t)l * r->cap + r->n_step) * nkv + i] = fx_f16r(v[i]);
		}
		if (qs)
			memcpy(qs + (size_t)l * nq, q, (size_t)nq * sizeof *q);
		int rc = kv_shadow_attend(r->s, d->layer_id[l], d->n_tok + r->n_step, q, k, v, out);
		kv_shadow_set_probe(r->s, NULL);
		if (rc) {
			worst = -1;
			break;
		}
		for (int h = 0; exact && h < d->n_head; h++)
			worst = fmax(worst, exact_head(r, l, h, q + (size_t)h * dh, out + (size_t)h * dh,
						       h == ph ? ml : NULL));
	}
	r->n_step++;
	return worst;
}

/* Full rank (64 = 2 x 32 columns, wider than a head), no outliers, every
 * chunk rebuilt each step: exact attention within fp16 rounding of the
 * factors, the probe's weights on every position; the oldest tail rows
 * evicted from both views alike. */
static void shadow_full_rank_all_chunks_is_exact(struct test_ctx *t)
{
	struct fx_doc d;
	struct srig r = { 0 };
	struct kv_shadow_plan pl = { 64, 0, 1000 }, got;
	float *mass = calloc(2 * 300, sizeof *mass);

	T_CHECK(t, mass && fx_doc_make(&d, 300, 2, 4, 2, 32, 9) == 0);
	T_CHECK(t, srig_open(&r, &d, 32, 1, &pl, 4) == 0);
	kv_shadow_get_plan(r.s, &got);
	T_CHECKF(t, got.rank == 64 && got.n_outlier == 0 && got.n_select == 36, "rank %d, %d chunks",
		 got.rank, got.n_select);
	fx_rng_seed(2);
	for (int st = 0; st < 3; st++) {
		double e = srig_step(&r, 1, st == 1 ? mass : NULL, 1, NULL);
		T_CHECKF(t, e >= 0 && e < 5e-3, "step %d: max diff %g (1e9: probe wrong)", st, e);
		for (int l = 0; l < 2; l++)
			for (int g = 0; g < 2; g++) {
				const int32_t *c;
				T_CHECK(t, kv_shadow_chosen(r.s, l, g, &c) == 36 && c[0] == 1 && c[35] == 36);
			}
	}
	T_CHECK(t, kv_shadow_evict(r.s, 300 + 4) == SEKV_EINVAL && kv_shadow_evict(r.s, 301) == 0 &&
		kv_shadow_tail_rows(r.s) == 2);
	srig_close(&r);
	fx_doc_free(&d);
	free(mass);
}

/* Pre-RoPE keys of rank 3 (random mixtures of three directions over
 * 2 x 16 columns), rotated by GPT-J RoPE over 12 dims into the document:
 * the post-RoPE matrix is of higher rank, but a rank-3 factor of the keys
 * rotated back rebuilds them (every chunk chosen: exact attention), and
 * rank 2 does not. */
static void shadow_pre_rope_low_rank_keys_rebuilt(struct test_ctx *t)
{
	enum { N = 200, DH = 16, W = 32, ROT = 12 };
	struct fx_doc d;
	struct srig r = { 0 };
	float base[3][W], cs[ROT / 2], sn[ROT / 2], x[W];
	double worst[2];

	T_CHECK(t, fx_doc_make(&d, N, 1, 4, 2, DH, 5) == 0);
	srig_rope(&r, ROT, 0);
	for (int b = 0; b < 3; b++)
		for (int j = 0; j < W; j++)
			base[b][j] = (float)fx_rng_n();
	for (int p = 0; p < N; p++) {
		double a[3] = { fx_rng_n(), fx_rng_n(), fx_rng_n() };
		for (int j = 0; j < W; j++)
			x[j] = (float)(a[0] * base[0][j] + a[1] * base[1][j] + a[2] * base[2][j]);
		model_rope_tables(&r.rope, p, 1, cs, sn);
		for (int g = 0; g < 2; g++)
			for (int j = 0; j < ROT / 2; j++) {
				float *y = x + g * DH + 2 * j, y0 = y[0], y1 = y[1];
				y[0] = y0 * cs[j] - y1 * sn[j];
				y[1] = y0 * sn[j] + y1 * cs[j];
			}
		for (int j = 0; j < W; j++)
			d.k[0][(size_t)p * W + j] = quant_f32_to_f16(x[j]);
	}
	for (int rank = 3; rank >= 2; rank--) {
		struct kv_shadow_plan pl = { rank, 0, 1000 };
		T_CHECK(t, srig_open(&r, &d, ROT, 0, &pl, 2) == 0);
		fx_rng_seed(4);
		worst[3 - rank] = srig_step(&r, 1, NULL, 0, NULL);
		srig_close(&r);
	}
	T_CHECKF(t, worst[0] >= 0 && worst[0] < 5e-3 && worst[1] > 2e-2,
		 "rank 3: max diff %g (want < 5e-3); rank 2: %g (want > 2e-2)", worst[0], worst[1]);
	fx_doc_free(&d);
}

/* 64 tokens, one KV head of 16: small noise but a strong key along e0 at
 * position 37 (chunk 4), and chunk 2 of seven keys along e1 and one
 * against it. One outlier: chunk 2 (its lowest cosine to its mean is
 * about -1) is held exact beside the first and last chunks; one chunk a
 * step: query head 0 along e0 takes chunk 4. */
static void shadow_chooses_landmark_chunk_and_outlier(struct test_ctx *t)
{
	struct fx_doc d;
	struct srig r = { 0 };
	struct kv_shadow_plan pl = { 16, 1, 1 };
	float q[2 * 16] = { 0 }, k[16] = { 0 }, v[16] = { 0 }, out[32];
	const int32_t *c, *pos;

	T_CHECK(t, fx_doc_make(&d, 64, 1, 2, 1, 16, 4) == 0);
	for (int p = 0; p < 64; p++)
		for (int j = 0; j < 16; j++)
			d.k[0][p * 16 + j] = quant_f32_to_f16((float)(0.1 * fx_rng_n()));
	d.k[0][37 * 16 + 0] = quant_f32_to_f16(5);
	for (int p = 16; p < 24; p++)
		d.k[0][p * 16 + 1] = quant_f32_to_f16(p == 20 ? -3.0f : 3.0f);
	q[0] = 3;
	T_CHECK(t, srig_open(&r, &d, 16, 1, &pl, 2) == 0);
	int rc = kv_shadow_attend(r.s, d.layer_id[0], 64, q, k, v, out);
	int n = kv_shadow_chosen(r.s, 0, 0, &c), n_x = kv_shadow_exact(r.s, 0, 0, &pos);
	T_CHECKF(t, rc == 0 && n == 1 && c[0] == 4, "rc %d, %d chosen, first %d", rc, n, n ? c[0] : -1);
	T_CHECKF(t, n_x == 24 && pos[0] == 0 && pos[7] == 7 && pos[8] == 16 && pos[15] == 23 &&
		 pos[16] == 56 && pos[23] == 63, "%d exact rows, pos[8] %d", n_x, n_x > 8 ? pos[8] : -1);
	srig_close(&r);
	fx_doc_free(&d);
}

/* Landmark score of chunk c for the group of KV head g: the softmax
 * weights of its query heads over the chunks not held, summed (double). */
static double ref_score(const struct srig *r, int l, int g, const float *q, const uint8_t *held, int c)
{
	const struct fx_doc *d = r->d;
	int group = d->n_head / d->n_head_kv, n_chunk = (d->n_tok + CH - 1) / CH, dh = d->d_h;
	double sum = 0;

	for (int h = g * group; h < (g + 1) * group; h++) {
		double z = 0, mine = 0, mx = -INFINITY, *lg = malloc(sizeof(double) * n_chunk);
		for (int cc = 0; cc < n_chunk; cc++) {
			double a = 0;
			for (int j = 0; j < dh; j++) {
				double m = 0;
				for (int t2 = cc * CH; t2 < (cc + 1) * CH && t2 < d->n_tok; t2++)
					m += key_at(d, l, t2, g, j);
				a += q[(size_t)h * dh + j] * m / CH;
			}
			lg[cc] = a * QSCALE;
			if (!held[cc])
				mx = fmax(mx, lg[cc]);
		}
		for (int cc = 0; cc < n_chunk; cc++)
			if (!held[cc])
				z += exp(lg[cc] - mx);
		mine = exp(lg[c] - mx) / z;
		sum += mine;
		free(lg);
	}
	return sum;
}

/* 1 when the chunks (l, g) chose have the largest reference scores. */
static int chunks_are_best(const struct srig *r, int l, int g, const float *q)
{
	const struct fx_doc *d = r->d;
	int n_chunk = (d->n_tok + CH - 1) / CH;
	const int32_t *c, *pos;
	int n = kv_shadow_chosen(r->s, l, g, &c), n_x = kv_shadow_exact(r->s, l, g, &pos);
	uint8_t held[512] = { 0 }, in[512] = { 0 };
	double lo = INFINITY, hi = -INFINITY;

	for (int i = 0; i < n_x; i++)
		held[pos[i] / CH] = 1;
	for (int i = 0; i < n; i++)
		in[c[i]] = 1;
	for (int cc = 0; cc < n_chunk; cc++) {
		if (held[cc])
			continue;
		double s = ref_score(r, l, g, q, held, cc);
		if (in[cc])
			lo = fmin(lo, s);
		else
			hi = fmax(hi, s);
	}
	return n > 0 && lo >= hi - 1e-4;
}

/* Budgets from 8% to 60% of two documents (517 and 300 tokens, 2 KV
 * heads of 32: ranks up to 64 pass d_h), each planned as a session does
 * (landmarks, then a reserve for 6 tail rows): through 6 steps the
 * resident bytes never pass the budget and are what the counters say
 * (factors, landmarks, exact chunks, the rows rebuilt, the tail); the
 * chunks chosen have the best landmark scores; the host tier holds half
 * the full KV. */
static void shadow_device_bytes_within_budget(struct test_ctx *t)
{
	static const int n_tok[2] = { 517, 300 };
	static const double share[4] = { 0.08, 0.15, 0.3, 0.6 };
	int plans = 0;

	for (int di = 0; di < 2; di++) {
		struct fx_doc d;
		T_CHECK(t, fx_doc_make(&d, n_tok[di], 2, 4, 2, 32, 17 + di) == 0);
		for (int bi = 0; bi < 4; bi++) {
			long long rows = (long long)(share[bi] * d.n_tok), tail = 6;
			long long keep = rows - kv_shadow_landmark_rows(d.n_tok, CH) - tail;
			size_t budget = model_kv_bytes((int)rows, 2, 2, 32);
			struct kv_shadow_plan pl;
			struct srig r = { 0 };
			if (keep < kv_shadow_rows_min(d.n_tok, 2, 32, CH)) {
				T_CHECK(t, kv_shadow_plan(d.n_tok, 2, 32, CH, keep, &pl) == SEKV_EINVAL);
				continue;
			}
			T_CHECK(t, kv_shadow_plan(d.n_tok, 2, 32, CH, keep, &pl) == 0);
			T_CHECK(t, srig_open(&r, &d, 32, 1, &pl, (int)tail) == 0);
			plans++;
			size_t fixed = kv_shadow_fixed_bytes(r.s), meta = kv_shadow_meta_bytes(r.s);
			size_t lm = (size_t)2 * ((d.n_tok + CH - 1) / CH) * 64 * 2;
			size_t fac = (size_t)2 * ((size_t)(d.n_tok + 64) * pl.rank * 2 + (size_t)pl.rank * 4);
			int n_exact = 2 * CH - (CH - d.n_tok % CH) % CH + pl.n_outlier * CH;
			T_CHECKF(t, meta == lm + fac, "meta %zu, want %zu", meta, lm + fac);
			T_CHECK(t, fixed == meta + model_kv_bytes(n_exact + pl.n_select * CH, 2, 2, 32));
			T_CHECKF(t, fixed + model_kv_bytes((int)tail, 2, 2, 32) <= budget,
				 "%d tokens at %g: fixed %zu + tail over budget %zu (rank %d, %d + %d chunks)",
				 d.n_tok, share[bi], fixed, budget, pl.rank, pl.n_outlier, pl.n_select);
			T_CHECK(t, kv_shadow_host_bytes(r.s) == model_kv_bytes(d.n_tok, 2, 2, 32) / 2);
			fx_rng_seed(31 + bi);
			for (int st = 0; st < (int)tail; st++) {
				float qs[2 * 4 * 32];
				T_CHECK(t, srig_step(&r, 0, NULL, 0, qs) >= 0);
				size_t res = kv_shadow_resident_bytes(r.s);
				size_t want = meta + model_kv_bytes(n_exact, 2, 2, 32) + model_kv_bytes(st + 1, 2, 2, 32);
				for (int l = 0; l < 2; l++)
					for (int g = 0; g < 2; g++) {
						const int32_t *c;
						want += model_kv_bytes(kv_shadow_chosen(r.s, l, g, &c) * CH, 1, 1, 32);
						T_CHECKF(t, st > 1 || chunks_are_best(&r, l, g, qs + (size_t)l * 4 * 32),
							 "%d tokens at %g, step %d: layer %d head %d: chunks not the best",
							 d.n_tok, share[bi], st, l, g);
					}
				T_CHECKF(t, res == want && res <= budget, "step %d: resident %zu (want %zu), budget %zu",
					 st, res, want, budget);
			}
			srig_close(&r);
		}
		fx_doc_free(&d);
	}
	T_CHECK(t, plans >= 5);
}

/* Bad shapes and parameters are refused; a step on a layer the stream
 * lacks or past the tail is refused. */
static void shadow_refuses_bad_params(struct test_ctx *t)
{
	struct fx_doc d;
	struct backend *be = NULL;
	struct kv_shadow *s = NULL;
	struct model_rope rope;
	double freq[8];
	char err[256];

	T_CHECK(t, fx_doc_make(&d, 40, 1, 2, 1, 16, 3) == 0);
	T_CHECK(t, backend_open("cpu", 1, &be, err, sizeof err) == 0);
	model_rope_inv_freq(10000.0f, 16, freq);
	rope = (struct model_rope){ 1, 16, freq, 1.0f };
	struct kv_shadow_params ok = { .n_layer = 1, .layer_id = d.layer_id, .n_head = 2, .n_head_kv = 1,
		.d_h = 16, .q_scale = 0.25f, .tail_cap = 4, .be = be, .rope = &rope, .chunk = CH,
		.rank = 4, .n_outlier = 1, .n_select = 1 }, p;
	const uint16_t *const *k = (const uint16_t *const *)d.k, *const *v = (const uint16_t *const *)d.v;
	struct model_rope odd = rope, wide = rope;
	odd.n_rot = 15;
	wide.n_rot = 18;
	for (int i = 0; i < 11; i++) {
		p = ok;
		switch (i) {
		case 0: p.rank = 0; break;
		case 1: p.rank = 17; break;  /* more than n_head_kv * d_h columns */
		case 2: p.chunk = 0; break;
		case 3: p.n_outlier = -1; break;
		case 4: p.n_select = -1; break;
		case 5: p.rope = NULL; break;
		case 6: p.rope = &odd; break;
		case 7: p.rope = &wide; break;
		case 8: p.n_head = 3; p.n_head_kv = 2; break;
		case 9: p.tail_cap = 0; break;
		default: p.be = NULL; break;
		}
		T_CHECKF(t, kv_shadow_new(&s, &p, 40, k, v, err, sizeof err) == SEKV_EINVAL && !s, "case %d", i);
	}
	T_CHECK(t, kv_shadow_new(&s, &ok, 40, NULL, v, err, sizeof err) == SEKV_EINVAL && !s);
	T_CHECKF(t, kv_shadow_new(&s, &ok, 40, k, v, err, sizeof err) == 0, "%s", err);
	float q[32] = { 0 }, kk[16] = { 0 }, vv[16] = { 0 }, out[32];
	T_CHECK(t, kv_shadow_attend(s, d.layer_id[0] + 1, 40, q, kk, vv, out) == SEKV_EINVAL);
	T_CHECK(t, kv_shadow_attend(s, d.layer_id[0], 41, q, kk, vv, out) == SEKV_EINVAL);
	T_CHECK(t, kv_shadow_attend(s, d.layer_id[0], 40, q, kk, vv, out) == 0);
	kv_shadow_free(s);
	kv_shadow_free(NULL);
	backend_close(be);
	fx_doc_free(&d);
}

const struct test_case test_kv_shadow[] = {
	{ "kv_shadow_plan_follows_budget_rule", shadow_plan_follows_budget_rule },
	{ "kv_shadow_full_rank_all_chunks_is_exact", shadow_full_rank_all_chunks_is_exact },
	{ "kv_shadow_pre_rope_low_rank_keys_rebuilt", shadow_pre_rope_low_rank_keys_rebuilt },
	{ "kv_shadow_chooses_landmark_chunk_and_outlier", shadow_chooses_landmark_chunk_and_outlier },
	{ "kv_shadow_device_bytes_within_budget", shadow_device_bytes_within_budget },
	{ "kv_shadow_refuses_bad_params", shadow_refuses_bad_params },
	{ NULL, NULL },
};
