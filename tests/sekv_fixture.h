/* sekv_fixture.h - synthetic SeKV documents and double-precision reference
 * attention shared by the SeKV tests (test_sekv.c: segmentation, memory,
 * factors; test_sekv_attend.c: decoding, edges; test_sekv_budget.c:
 * budget, routing, question turn). Fixed seeds. */
#ifndef SEKV_TESTS_SEKV_FIXTURE_H
#define SEKV_TESTS_SEKV_FIXTURE_H

#include "engine/sekv/sekv.h"

#include <stddef.h>
#include <stdint.h>

/* A synthetic document: keys/values of n_layer global layers, fp16. */
struct fx_doc {
	int n_tok, n_layer, n_head, n_head_kv, d_h;
	int32_t layer_id[8];
	float *h;              /* [n_tok] surprisal */
	uint16_t *k[8], *v[8]; /* [n_layer] -> [n_tok][n_head_kv][d_h] */
};

/* Reference softmax attention in double for query head h over rows
 * (keys kr, values vr, additive bias), out [d_h]. */
struct fx_ref_rows {
	int n;
	float *k, *v, *bias;   /* [cap][d_h], [cap][d_h], [cap] */
};

void fx_rng_seed(uint64_t s);
double fx_rng_u(void);            /* uniform [0, 1) */
double fx_rng_n(void);            /* standard normal */
float fx_f16r(float x);           /* x rounded through fp16 */
void fx_doc_free(struct fx_doc *d);
/* Fills d (keys: a few shared directions plus noise; surprisal:
 * exponential with spikes); 0 or -1 on allocation failure. */
int fx_doc_make(struct fx_doc *d, int n_tok, int n_layer, int n_head,
		int n_head_kv, int d_h, uint64_t seed);
int fx_doc_build(struct sekv_mem **m, const struct fx_doc *d,
		 const struct sekv_params *p, char *err, size_t errlen);
/* Element i of a factor's u or v at the memory's type. */
double fx_fac_at(const struct sekv_mem *m, const void *x, size_t i);
void fx_ref_attend(const struct fx_ref_rows *r, const float *q, int d_h,
		   float q_scale, float *out);
void fx_ref_add(struct fx_ref_rows *r, const float *k, const float *v, float bias, int d_h);
/* Worst relative error of the factors against the document's rows. */
double fx_factors_vs_rows(const struct sekv_mem *m, const struct fx_doc *d);
/* Default params without budget, sinks or recent window. */
void fx_no_budget(struct sekv_params *p);
/* Parameters under which a fully zoomed memory decodes as exact attention:
 * no budget, full-rank fp32 factors (no rank gate, R_max 64), fp32
 * rebuilt rows, every span a zoom candidate (tau -1) zoomed whole, 16
 * recent rows. */
void fx_exact_params(struct sekv_params *p);
/* sekv_default_params with exact_below 0: the tests' short documents are
 * segmented as long ones are (sekv_build_short_doc_stays_exact checks the
 * rule itself). */
void fx_default_params(struct sekv_params *p);

/* Decodes n_step tokens through c (a context on m, the memory fx_doc_build
 * made of d; tail_cap >= n_step) at positions d->n_tok + s over every
 * global layer of d, and compares each query head's output [d_h] with
 * fx_ref_attend over rows chosen by `mode`: 0 = all document rows, 1 =
 * exact rows + coarse rows (surprisal-weighted means, fp16, bias log of
 * the rows they stand for) built here, 2 = as 1 but the rows this step
 * rebuilt (sekv_ctx_zoomed_rows) at their exact rows (full-rank fp32
 * factors rebuild them exactly) and the coarse rows standing for the
 * rest; then the steps' own rows. Queries [n_head][d_h]
 * are 2 N(0,1), keys and values [n_head_kv][d_h] N(0,1) rounded to fp16,
 * drawn per step and layer (the query first) after fx_rng_seed(seed).
 * q_scale: the softmax scale c was made with. d_h <= 512. Returns the max
 * abs difference, or -1 when sekv_attend or sekv_ctx_evict_tail failed.
 * Not thread-safe (the fixture's generator and eviction setting). */
double fx_decode_vs_ref(const struct fx_doc *d, const struct sekv_mem *m,
			struct sekv_ctx *c, int n_step, int mode, float q_scale,
			uint64_t seed);
/* From now on fx_decode_vs_ref evicts, before step `step` (-1: never) of
 * its first layer, the tail rows of the steps before `to`
 * (sekv_ctx_evict_tail to d->n_tok + to), and leaves them out of the
 * reference from then on. fx_decode_evict_at(-1, 0) turns it off. */
void fx_decode_evict_at(int step, int to);

#endif
