/* test_kv_subset.c - the stream over a kept subset of a document's exact
 * rows (engine/kv/kv_subset.c): decoding checked against a double-precision
 * softmax over exactly the rows each (layer, KV head) keeps plus the tail
 * rows it was given (the same positions everywhere, positions per layer
 * and KV head, all rows); bad positions refused; the evidence probe per KV
 * head; SnapKV's votes during the question turn against reference
 * softmax weights, and its choice from them when the answer begins.
 */
#include "tests/test.h"
#include "tests/sekv_fixture.h"

#include "engine/backend/backend.h"
#include "engine/base/err.h"
#include "engine/kv/kv_select.h"
#include "engine/kv/kv_subset.h"
#include "engine/model/model.h"
#include "engine/quant/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define RIG_SCALE 0.125f

/* A stream over a synthetic document and the tail rows it was given. */
struct rig {
	const struct fx_doc *d;
	struct backend *be;
	struct kv_subset *s;
	int cap;          /* tail rows at most */
	int n_step;       /* steps decoded */
	float *tk, *tv;   /* [n_layer][cap][n_head_kv * d_h] tail rows, fp16-rounded */
	double *vote;     /* [n_layer][n_head_kv][n_tok] reference votes, or NULL */
};

static void rig_close(struct rig *r)
{
	kv_subset_free(r->s);
	backend_close(r->be);
	free(r->tk);
	free(r->tv);
	free(r->vote);
	memset(r, 0, sizeof *r);
}

/* pos [n_layer][n_head_kv][n_keep]; snap_keep > 0: SnapKV (kernel 7)
 * with reference votes. 0 or -1. */
static int rig_open(struct rig *r, const struct fx_doc *d, const int32_t *pos, int n_keep,
		    int cap, int snap_keep)
{
	struct kv_subset_params kp = { .n_layer = d->n_layer, .layer_id = d->layer_id,
		.n_head = d->n_head, .n_head_kv = d->n_head_kv, .d_h = d->d_h, .q_scale = RIG_SCALE,
		.tail_cap = cap, .snap_keep = snap_keep, .snap_kernel = 7 };
	size_t tail = (size_t)d->n_layer * cap * d->n_head_kv * d->d_h;
	char err[256];

	memset(r, 0, sizeof *r);
	r->d = d;
	r->cap = cap;
	r->tk = malloc(tail * sizeof *r->tk);
	r->tv = malloc(tail * sizeof *r->tv);
	if (snap_keep)
		r->vote = calloc((size_t)d->n_layer * d->n_head_kv * d->n_tok, sizeof *r->vote);
	if (!r->tk || !r->tv || (snap_keep && !r->vote) || backend_open("cpu", 2, &r->be, err, sizeof err))
		return -1;
	kp.be = r->be;
	return kv_subset_new(&r->s, &kp, pos, n_keep, d->n_tok, (const uint16_t *const *)d->k,
			     (const uint16_t *const *)d->v, err, sizeof err) ? -1 : 0;
}

/* Query head h of layer index l in double over the stream's kept rows of
 * its KV head and the tail rows so far: out [d_h]; the kept rows' weights
 * are added to the reference votes when there are some. */
static void rig_ref(struct rig *r, int l, int h, const float *q, double *out)
{
	const struct fx_doc *d = r->d;
	int dh = d->d_h, g = h / (d->n_head / d->n_head_kv), nkv = d->n_head_kv * dh;
	int n_keep = kv_subset_n_keep(r->s), n = n_keep + r->n_step + 1;
	const int32_t *pos = kv_subset_pos(r->s, l, g);
	double *lg = malloc((size_t)n * sizeof *lg), mx = -INFINITY, z = 0;

	for (int i = 0; i < n; i++) {
		double a = 0;
		for (int j = 0; j < dh; j++)
			a += (double)q[j] * (i < n_keep
				? quant_f16_to_f32(d->k[l][((size_t)pos[i] * d->n_head_kv + g) * dh + j])
				: r->tk[((size_t)l * r->cap + (i - n_keep)) * nkv + (size_t)g * dh + j]);
		lg[i] = a * RIG_SCALE;
		mx = lg[i] > mx ? lg[i] : mx;
	}
	for (int i = 0; i < n; i++)
		z += lg[i] = exp(lg[i] - mx);
	memset(out, 0, (size_t)dh * sizeof *out);
	for (int i = 0; i < n; i++)
		for (int j = 0; j < dh; j++)
			out[j] += lg[i] / z * (i < n_keep
				? quant_f16_to_f32(d->v[l][((size_t)pos[i] * d->n_head_kv + g) * dh + j])
				: r->tv[((size_t)l * r->cap + (i - n_keep)) * nkv + (size_t)g * dh + j]);
	for (int i = 0; r->vote && i < n_keep; i++)
		r->vote[((size_t)l * d->n_head_kv + g) * d->n_tok + pos[i]] += lg[i] / z;
	free(lg);
}

/* Decodes n steps of random q, k, v; returns the largest difference from
 * rig_ref over every layer and query head (-1 on failure). */
static double rig_steps(struct rig *r, int n)
{
	const struct fx_doc *d = r->d;
	int dh = d->d_h, nq = d->n_head * dh, nkv = d->n_head_kv * dh;
	float *q = malloc((size_t)nq * 4), *k = malloc((size_t)nkv * 4), *v = malloc((size_t)nkv * 4);
	float *out = malloc((size_t)nq * 4);
	double ref[512], worst = 0;

	for (int st = 0; st < n && worst >= 0; st++, r->n_step++)
		for (int l = 0; l < d->n_layer; l++) {
			for (int i = 0; i < nq; i++)
				q[i] = (float)(2 * fx_rng_n());
			for (int i = 0; i < nkv; i++) {
				k[i] = (float)fx_rng_n();
				v[i] = (float)fx_rng_n();
				r->tk[((size_t)l * r->cap + r->n_step) * nkv + i] = fx_f16r(k[i]);
				r->tv[((size_t)l * r->cap + r->n_step) * nkv + i] = fx_f16r(v[i]);
			}
			if (kv_subset_attend(r->s, d->layer_id[l], d->n_tok + r->n_step, q, k, v, out)) {
				worst = -1;
				break;
			}
			for (int h = 0; h < d->n_head; h++) {
				rig_ref(r, l, h, q + (size_t)h * dh, ref);
				for (int j = 0; j < dh; j++)
					worst = fmax(worst, fabs((double)out[(size_t)h * dh + j] - ref[j]));
			}
		}
	free(q); free(k); free(v); free(out);
	return worst;
}

/* pos [n_layer][n_head_kv][n] with every (layer, KV head) keeping sel [n]. */
static void replicate(int32_t *pos, const int32_t *sel, int n, int n_slot)
{
	for (int s = 0; s < n_slot; s++)
		memcpy(pos + (size_t)s * n, sel, (size_t)n * sizeof *pos);
}

/* StreamingLLM's rows everywhere, different rows per (layer, KV head),
 * and all rows (then it is exact attention), on a grouped-query document:
 * the stream equals the reference over its rows. */
static void subset_decode_matches_reference(struct test_ctx *t)
{
	struct fx_doc d;
	struct rig r = { 0 };
	int32_t sel[600], pos[4 * 600];
	int n, ok;
	double e;

	T_CHECK(t, fx_doc_make(&d, 600, 2, 4, 2, 32, 41) == 0);
	n = kv_select_streaming(d.n_tok, 60, 4, sel);
	replicate(pos, sel, n, 4);
	ok = rig_open(&r, &d, pos, n, 5, 0) == 0;
	e = ok ? rig_steps(&r, 5) : -1;
	rig_close(&r);
	T_CHECKF(t, ok && e >= 0 && e < 1e-4, "streaming rows: max diff %g", e);
	/* slot s keeps 50 positions p with (p + 3 s) % 11 == 0 */
	for (int s = 0; s < 4; s++)
		for (int p = 0, i = 0; i < 50; p++)
			if ((p + 3 * s) % 11 == 0)
				pos[s * 50 + i++] = p;
	ok = rig_open(&r, &d, pos, 50, 4, 0) == 0;
	ok = ok && kv_subset_pos(r.s, 1, 1)[0] == 2 && kv_subset_pos(r.s, 0, 1)[0] == 8 &&
	     kv_subset_n_keep(r.s) == 50;
	e = ok ? rig_steps(&r, 4) : -1;
	rig_close(&r);
	T_CHECKF(t, ok && e >= 0 && e < 1e-4, "rows per layer and KV head: max diff %g", e);
	n = kv_select_streaming(d.n_tok, d.n_tok, 0, sel);
	replicate(pos, sel, n, 4);
	ok = rig_open(&r, &d, pos, n, 3, 0) == 0;
	e = ok ? rig_steps(&r, 3) : -1;
	rig_close(&r);
	T_CHECKF(t, ok && e >= 0 && e < 1e-4, "all rows: max diff %g", e);
	fx_doc_free(&d);
}

/* Bad positions, shapes and SnapKV settings are refused; bytes are what
 * is held. */
static void subset_refuses_bad_positions(struct test_ctx *t)
{
	struct fx_doc d;
	struct backend *be = NULL;
	struct kv_subset *s = NULL;
	char err[256];
	int32_t unsorted[3] = { 5, 2, 9 }, outside[2] = { 0, 100 }, ok[3] = { 0, 1, 99 };
	int32_t second_bad[6] = { 0, 1, 99, 4, 4, 7 }, all[100];

	T_CHECK(t, fx_doc_make(&d, 100, 1, 2, 1, 16, 3) == 0);
	T_CHECK(t, backend_open("cpu", 1, &be, err, sizeof err) == 0);
	struct kv_subset_params kp = { .n_layer = 1, .layer_id = d.layer_id, .n_head = 2,
		.n_head_kv = 1, .d_h = 16, .q_scale = 0.25f, .tail_cap = 4, .be = be };
	const uint16_t *const *k = (const uint16_t *const *)d.k, *const *v = (const uint16_t *const *)d.v;
	T_CHECK(t, kv_subset_new(&s, &kp, unsorted, 3, 100, k, v, err, sizeof err) == SEKV_EINVAL && !s);
	T_CHECK(t, kv_subset_new(&s, &kp, outside, 2, 100, k, v, err, sizeof err) == SEKV_EINVAL && !s);
	kp.n_head_kv = 2;   /* 3 query heads cannot share 2 KV heads */
	kp.n_head = 3;
	T_CHECK(t, kv_subset_new(&s, &kp, ok, 3, 100, k, v, err, sizeof err) == SEKV_EINVAL && !s);
	kp.n_head = 2;      /* the second KV head's positions repeat one */
	T_CHECK(t, kv_subset_new(&s, &kp, second_bad, 3, 100, k, v, err, sizeof err) == SEKV_EINVAL && !s &&
		strstr(err, "KV head 1"));
	kp.n_head_kv = 1;
	kp.snap_keep = 10;  /* SnapKV sees every row first */
	kp.snap_kernel = 7;
	T_CHECK(t, kv_subset_new(&s, &kp, ok, 3, 100, k, v, err, sizeof err) == SEKV_EINVAL && !s);
	for (int i = 0; i < 100; i++)
		all[i] = i;
	kp.snap_kernel = 4;
	T_CHECK(t, kv_subset_new(&s, &kp, all, 100, 100, k, v, err, sizeof err) == SEKV_EINVAL && !s);
	kp.snap_keep = 0;
	T_CHECKF(t, kv_subset_new(&s, &kp, ok, 3, 100, k, v, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, kv_subset_resident_bytes(s) == 3 * 16 * 2 * 2 && kv_subset_tail_rows(s) == 0);
	float q[32] = { 0 }, kk[16] = { 0 }, vv[16] = { 0 }, out[32];
	T_CHECK(t, kv_subset_attend(s, d.layer_id[0] + 1, 100, q, kk, vv, out) == SEKV_EINVAL);
	T_CHECK(t, kv_subset_attend(s, d.layer_id[0], 101, q, kk, vv, out) == SEKV_EINVAL);
	T_CHECK(t, kv_subset_attend(s, d.layer_id[0], 100, q, kk, vv, out) == 0);
	T_CHECK(t, kv_subset_resident_bytes(s) == 4 * 16 * 2 * 2 && kv_subset_tail_rows(s) == 1);
	/* nothing to choose: the rows stay */
	T_CHECK(t, kv_subset_answer_begin(s) == 0 && kv_subset_n_keep(s) == 3);
	kv_subset_free(s);
	backend_close(be);
	fx_doc_free(&d);
}

/* The evidence probe with two KV heads keeping different rows: a query
 * head's softmax weight (a double reference) lands on the positions of
 * its own KV head's rows; a position kept only by the other KV head gets
 * none; the tail row's weight is what is missing from 1. */
static void subset_probe_weights_to_positions(struct test_ctx *t)
{
	struct fx_doc d;
	struct backend *be = NULL;
	struct kv_subset *s = NULL;
	int32_t pos[2][40];
	float q[4 * 16], k[2 * 16], v[2 * 16], out[4 * 16], *mass = NULL;
	char err[256];

	T_CHECK(t, fx_doc_make(&d, 200, 1, 4, 2, 16, 8) == 0);
	T_CHECK(t, backend_open("cpu", 1, &be, err, sizeof err) == 0);
	int n = kv_select_streaming(d.n_tok, 40, 4, pos[0]);
	for (int i = 0; i < 40; i++)
		pos[1][i] = 100 + 2 * i;
	struct kv_subset_params kp = { .n_layer = 1, .layer_id = d.layer_id, .n_head = 4,
		.n_head_kv = 2, .d_h = 16, .q_scale = 0.25f, .tail_cap = 2, .be = be };
	T_CHECKF(t, kv_subset_new(&s, &kp, &pos[0][0], n, d.n_tok, (const uint16_t *const *)d.k,
				 (const uint16_t *const *)d.v, err, sizeof err) == 0, "%s", err);
	mass = calloc((size_t)2 * d.n_tok, sizeof *mass);
	struct model_probe pr = { .n = 2, .layer = { d.layer_id[0], d.layer_id[0] }, .head = { 1, 3 },
				  .n_pos = d.n_tok, .mass = mass };
	kv_subset_set_probe(s, &pr);
	fx_rng_seed(3);
	for (int i = 0; i < 64; i++)
		q[i] = (float)fx_rng_n();
	for (int i = 0; i < 32; i++) {
		k[i] = (float)fx_rng_n();
		v[i] = (float)fx_rng_n();
	}
	T_CHECK(t, kv_subset_attend(s, d.layer_id[0], d.n_tok, q, k, v, out) == 0);
	for (int e = 0; e < 2; e++) {
		int h = pr.head[e], g = h / 2;
		const float *m = mass + (size_t)e * d.n_tok;
		double lg[41], mx = -1e300, z = 0, worst = 0, sum = 0;
		for (int r = 0; r <= n; r++) {
			double a = 0;
			for (int j = 0; j < 16; j++)
				a += (double)q[16 * h + j] *
				     (r < n ? quant_f16_to_f32(d.k[0][((size_t)pos[g][r] * 2 + g) * 16 + j])
					    : fx_f16r(k[16 * g + j]));
			lg[r] = a * 0.25;
			mx = lg[r] > mx ? lg[r] : mx;
		}
		for (int r = 0; r <= n; r++)
			z += exp(lg[r] - mx);
		for (int r = 0; r < n; r++)
			worst = fmax(worst, fabs(m[pos[g][r]] - exp(lg[r] - mx) / z));
		for (int j = 0; j < d.n_tok; j++)
			sum += m[j];
		/* 190 is kept by KV head 0 only, 100 by KV head 1 only */
		int other = g == 0 ? 100 : 190;
		T_CHECKF(t, worst < 1e-5 && m[other] == 0 && m[50] == 0 &&
			 fabs(sum + exp(lg[n] - mx) / z - 1) < 1e-5, "head %d: worst %g sum %g", h, worst, sum);
	}
	free(mass);
	kv_subset_free(s);
	backend_close(be);
	fx_doc_free(&d);
}

/* SnapKV: while the question turn is decoded the stream is exact attention
 * over every row, and each KV head's votes are the summed softmax weights
 * of its query heads (checked through the choice: every kept position's
 * pooled reference vote is at least every dropped one's). When the answer
 * begins each (layer, KV head) keeps its own snap_keep rows, the stream
 * matches the reference over those rows and the tail, and the bytes
 * follow. */
static void subset_snapkv_votes_then_keeps(struct test_ctx *t)
{
	struct fx_doc d;
	struct rig r = { 0 };
	int32_t all[4 * 300];
	double pooled[300];
	int ok;

	T_CHECK(t, fx_doc_make(&d, 300, 2, 4, 2, 32, 17) == 0);
	for (int s = 0; s < 4; s++)
		for (int i = 0; i < 300; i++)
			all[s * 300 + i] = i;
	ok = rig_open(&r, &d, all, 300, 12, 40) == 0;
	T_CHECK(t, ok);
	size_t row = model_kv_bytes(1, 2, 2, 32);
	T_CHECK(t, kv_subset_fixed_bytes(r.s) == 40 * row && kv_subset_resident_bytes(r.s) == 300 * row);
	fx_rng_seed(29);
	double e = rig_steps(&r, 6);
	T_CHECKF(t, e >= 0 && e < 1e-4, "question turn over every row: max diff %g", e);
	T_CHECK(t, kv_subset_resident_bytes(r.s) == 306 * row);
	T_CHECK(t, kv_subset_answer_begin(r.s) == 0 && kv_subset_n_keep(r.s) == 40);
	T_CHECK(t, kv_subset_resident_bytes(r.s) == 46 * row && kv_subset_fixed_bytes(r.s) == 40 * row);
	int differ = 0;
	for (int s = 0; s < 4; s++) {
		const double *vt = r.vote + (size_t)s * 300;
		const int32_t *kept = kv_subset_pos(r.s, s / 2, s % 2);
		char in[300] = { 0 };
		double lo = INFINITY, hi = -INFINITY;
		for (int i = 0; i < 300; i++) {
			pooled[i] = vt[i];
			for (int j = i - 3; j <= i + 3; j++)
				if (j >= 0 && j < 300 && vt[j] > pooled[i])
					pooled[i] = vt[j];
		}
		for (int i = 0; i < 40; i++) {
			T_CHECK(t, i == 0 || kept[i] > kept[i - 1]);
			in[kept[i]] = 1;
		}
		for (int i = 0; i < 300; i++)
			if (in[i])
				lo = fmin(lo, pooled[i]);
			else
				hi = fmax(hi, pooled[i]);
		T_CHECKF(t, lo >= hi - 1e-5, "layer %d KV head %d: kept pooled vote %g < dropped %g",
			 s / 2, s % 2, lo, hi);
		differ |= memcmp(kept, kv_subset_pos(r.s, 0, 0), 40 * sizeof *kept) != 0;
	}
	T_CHECK(t, differ);
	e = rig_steps(&r, 3);
	T_CHECKF(t, e >= 0 && e < 1e-4, "answer over the kept rows: max diff %g", e);
	/* chosen once for the conversation */
	int32_t before = kv_subset_pos(r.s, 1, 1)[7];
	T_CHECK(t, kv_subset_answer_begin(r.s) == 0 && kv_subset_pos(r.s, 1, 1)[7] == before &&
		kv_subset_resident_bytes(r.s) == 49 * row);
	rig_close(&r);
	fx_doc_free(&d);
}

const struct test_case test_kv_subset[] = {
	{ "kv_subset_decode_matches_reference", subset_decode_matches_reference },
	{ "kv_subset_refuses_bad_positions", subset_refuses_bad_positions },
	{ "kv_subset_probe_weights_to_positions", subset_probe_weights_to_positions },
	{ "kv_subset_snapkv_votes_then_keeps", subset_snapkv_votes_then_keeps },
	{ NULL, NULL },
};
