/* test_kv_subset.c - the rivals that keep a subset of the exact rows
 * (engine/kv_subset.c): StreamingLLM's selection on hand-made cases, and a
 * decode stream over kept rows checked against a double-precision softmax
 * over exactly those rows plus the tail rows it was given.
 */
#include "tests/test.h"
#include "tests/sekv_fixture.h"

#include "engine/backend.h"
#include "engine/err.h"
#include "engine/kv_subset.h"
#include "engine/model.h"
#include "engine/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void select_streaming_sinks_and_recent(struct test_ctx *t)
{
	int32_t out[16];

	T_CHECK(t, kv_select_streaming(10, 5, 2, out) == 5 && out[0] == 0 && out[1] == 1 &&
		out[2] == 7 && out[3] == 8 && out[4] == 9);
	T_CHECK(t, kv_select_streaming(10, 3, 0, out) == 3 && out[0] == 7 && out[2] == 9);
	/* more than the document: all of it, once */
	T_CHECK(t, kv_select_streaming(4, 9, 2, out) == 4 && out[0] == 0 && out[3] == 3);
	/* more sinks than rows kept: the first rows only */
	T_CHECK(t, kv_select_streaming(10, 2, 4, out) == 2 && out[0] == 0 && out[1] == 1);
	T_CHECK(t, kv_select_streaming(10, 0, 4, out) == 0);
	T_CHECK(t, kv_select_streaming(-1, 2, 0, out) == SEKV_EINVAL);
	T_CHECK(t, kv_select_streaming(10, -2, 0, out) == SEKV_EINVAL);
}

/* Decodes n_step tokens of random q, k, v through a stream keeping pos
 * [n_pos] of d's rows and returns the largest difference from the double
 * reference over those rows and the tail rows so far (-1 on failure). */
static double decode_vs_ref(const struct fx_doc *d, const int32_t *pos, int n_pos, int n_step)
{
	struct backend *be = NULL;
	struct kv_subset *s = NULL;
	struct kv_subset_params kp = { .n_layer = d->n_layer, .layer_id = d->layer_id,
		.n_head = d->n_head, .n_head_kv = d->n_head_kv, .d_h = d->d_h, .q_scale = 0.125f,
		.tail_cap = n_step, .be = NULL };
	int dh = d->d_h, nq = d->n_head * dh, nkv = d->n_head_kv * dh, group = d->n_head / d->n_head_kv;
	float *q = malloc((size_t)nq * 4), *k = malloc((size_t)nkv * 4), *v = malloc((size_t)nkv * 4);
	float *out = malloc((size_t)nq * 4), ref[512];
	float *tk = malloc((size_t)d->n_layer * n_step * nkv * 4), *tv = malloc((size_t)d->n_layer * n_step * nkv * 4);
	struct fx_ref_rows r = { 0 };
	char err[256];
	double worst = -1;

	r.k = malloc((size_t)(n_pos + n_step) * dh * 4);
	r.v = malloc((size_t)(n_pos + n_step) * dh * 4);
	r.bias = malloc((size_t)(n_pos + n_step) * 4);
	if (backend_open("cpu", 1, &be, err, sizeof err))
		goto done;
	kp.be = be;
	if (kv_subset_new(&s, &kp, pos, n_pos, d->n_tok, (const uint16_t *const *)d->k,
			  (const uint16_t *const *)d->v, err, sizeof err))
		goto done;
	worst = 0;
	fx_rng_seed(5);
	for (int st = 0; st < n_step && worst >= 0; st++)
		for (int l = 0; l < d->n_layer; l++) {
			for (int i = 0; i < nq; i++)
				q[i] = (float)(2 * fx_rng_n());
			for (int i = 0; i < nkv; i++) {
				k[i] = (float)fx_rng_n();
				v[i] = (float)fx_rng_n();
				tk[((size_t)l * n_step + st) * nkv + i] = fx_f16r(k[i]);
				tv[((size_t)l * n_step + st) * nkv + i] = fx_f16r(v[i]);
			}
			if (kv_subset_attend(s, d->layer_id[l], d->n_tok + st, q, k, v, out)) {
				worst = -1;
				break;
			}
			for (int h = 0; h < d->n_head; h++) {
				int g = h / group;
				float kr[512], vr[512];
				r.n = 0;
				for (int i = 0; i < n_pos; i++) {
					const uint16_t *kk = d->k[l] + ((size_t)pos[i] * d->n_head_kv + g) * dh;
					const uint16_t *vv = d->v[l] + ((size_t)pos[i] * d->n_head_kv + g) * dh;
					for (int j = 0; j < dh; j++) {
						kr[j] = quant_f16_to_f32(kk[j]);
						vr[j] = quant_f16_to_f32(vv[j]);
					}
					fx_ref_add(&r, kr, vr, 0, dh);
				}
				for (int i = 0; i <= st; i++)
					fx_ref_add(&r, tk + ((size_t)l * n_step + i) * nkv + (size_t)g * dh,
						   tv + ((size_t)l * n_step + i) * nkv + (size_t)g * dh, 0, dh);
				fx_ref_attend(&r, q + (size_t)h * dh, dh, 0.125f, ref);
				for (int j = 0; j < dh; j++)
					worst = fmax(worst, fabs((double)out[(size_t)h * dh + j] - ref[j]));
			}
		}
done:
	kv_subset_free(s);
	backend_close(be);
	free(q); free(k); free(v); free(out); free(tk); free(tv);
	free(r.k); free(r.v); free(r.bias);
	return worst;
}

/* StreamingLLM's rows, and all rows (then it is exact attention), on a
 * grouped-query document: the stream equals the reference over its rows;
 * resident bytes count kept and tail rows. */
static void subset_decode_matches_reference(struct test_ctx *t)
{
	struct fx_doc d;
	int32_t pos[600];
	int n;
	double e;

	T_CHECK(t, fx_doc_make(&d, 600, 2, 4, 2, 32, 41) == 0);
	n = kv_select_streaming(d.n_tok, 60, 4, pos);
	T_CHECK(t, n == 60);
	e = decode_vs_ref(&d, pos, n, 5);
	T_CHECKF(t, e >= 0 && e < 1e-4, "streaming rows: max diff %g", e);
	n = kv_select_streaming(d.n_tok, d.n_tok, 0, pos);
	e = decode_vs_ref(&d, pos, n, 3);
	T_CHECKF(t, e >= 0 && e < 1e-4, "all rows: max diff %g", e);
	fx_doc_free(&d);
}

/* Bad positions and shapes are refused; bytes are what is held. */
static void subset_refuses_bad_positions(struct test_ctx *t)
{
	struct fx_doc d;
	struct backend *be = NULL;
	struct kv_subset *s = NULL;
	char err[256];
	int32_t unsorted[3] = { 5, 2, 9 }, outside[2] = { 0, 100 }, ok[3] = { 0, 1, 99 };

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
	kp.n_head = 2;
	kp.n_head_kv = 1;
	T_CHECKF(t, kv_subset_new(&s, &kp, ok, 3, 100, k, v, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, kv_subset_resident_bytes(s) == 3 * 16 * 2 * 2 && kv_subset_tail_rows(s) == 0);
	float q[32] = { 0 }, kk[16] = { 0 }, vv[16] = { 0 }, out[32];
	T_CHECK(t, kv_subset_attend(s, d.layer_id[0] + 1, 100, q, kk, vv, out) == SEKV_EINVAL);
	T_CHECK(t, kv_subset_attend(s, d.layer_id[0], 101, q, kk, vv, out) == SEKV_EINVAL);
	T_CHECK(t, kv_subset_attend(s, d.layer_id[0], 100, q, kk, vv, out) == 0);
	T_CHECK(t, kv_subset_resident_bytes(s) == 4 * 16 * 2 * 2 && kv_subset_tail_rows(s) == 1);
	kv_subset_free(s);
	backend_close(be);
	fx_doc_free(&d);
}

/* The evidence probe: a kept row's softmax weight lands on its document
 * position (a double reference), an evicted position gets none, and the
 * tail row's weight is what is missing from 1. */
static void subset_probe_weights_to_positions(struct test_ctx *t)
{
	struct fx_doc d;
	struct backend *be = NULL;
	struct kv_subset *s = NULL;
	int32_t pos[40];
	float q[2 * 16], k[16], v[16], out[2 * 16], *mass = NULL;
	char err[256];

	T_CHECK(t, fx_doc_make(&d, 200, 1, 2, 1, 16, 8) == 0);
	T_CHECK(t, backend_open("cpu", 1, &be, err, sizeof err) == 0);
	int n = kv_select_streaming(d.n_tok, 40, 4, pos);
	struct kv_subset_params kp = { .n_layer = 1, .layer_id = d.layer_id, .n_head = 2,
		.n_head_kv = 1, .d_h = 16, .q_scale = 0.25f, .tail_cap = 2, .be = be };
	T_CHECKF(t, kv_subset_new(&s, &kp, pos, n, d.n_tok, (const uint16_t *const *)d.k,
				 (const uint16_t *const *)d.v, err, sizeof err) == 0, "%s", err);
	mass = calloc((size_t)d.n_tok, sizeof *mass);
	struct model_probe pr = { .n = 1, .layer = { d.layer_id[0] }, .head = { 1 }, .n_pos = d.n_tok,
				  .mass = mass };
	kv_subset_set_probe(s, &pr);
	fx_rng_seed(3);
	for (int i = 0; i < 32; i++)
		q[i] = (float)fx_rng_n();
	for (int i = 0; i < 16; i++) {
		k[i] = (float)fx_rng_n();
		v[i] = (float)fx_rng_n();
	}
	T_CHECK(t, kv_subset_attend(s, d.layer_id[0], d.n_tok, q, k, v, out) == 0);
	/* reference: head 1 over the kept rows and the one tail row */
	double lg[41], mx = -1e300, z = 0, worst = 0, sum = 0;
	for (int r = 0; r <= n; r++) {
		double a = 0;
		for (int j = 0; j < 16; j++)
			a += (double)q[16 + j] * (r < n ? quant_f16_to_f32(d.k[0][(size_t)pos[r] * 16 + j])
						       : fx_f16r(k[j]));
		lg[r] = a * 0.25;
		mx = lg[r] > mx ? lg[r] : mx;
	}
	for (int r = 0; r <= n; r++)
		z += exp(lg[r] - mx);
	for (int r = 0; r < n; r++)
		worst = fmax(worst, fabs(mass[pos[r]] - exp(lg[r] - mx) / z));
	for (int j = 0; j < d.n_tok; j++)
		sum += mass[j];
	T_CHECKF(t, worst < 1e-5 && mass[10] == 0 && mass[100] == 0 &&
		 fabs(sum + exp(lg[n] - mx) / z - 1) < 1e-5, "worst %g sum %g", worst, sum);
	free(mass);
	kv_subset_free(s);
	backend_close(be);
	fx_doc_free(&d);
}

const struct test_case test_kv_subset[] = {
	{ "kv_select_streaming_sinks_and_recent", select_streaming_sinks_and_recent },
	{ "kv_subset_decode_matches_reference", subset_decode_matches_reference },
	{ "kv_subset_refuses_bad_positions", subset_refuses_bad_positions },
	{ "kv_subset_probe_weights_to_positions", subset_probe_weights_to_positions },
	{ NULL, NULL },
};
