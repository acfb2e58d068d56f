/* sekv_fixture.h - synthetic SeKV documents and double-precision reference
 * attention shared by the SeKV tests (test_sekv.c: segmentation, memory,
 * factors; test_sekv_attend.c: decoding, budget, edges). Fixed seeds. */
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

#endif
