/* sampler.h - next-token choice: greedy, or temperature/top-k/top-p with a
 * seeded generator (xorshift64*, reproducible across runs). */
#ifndef SEKV_SAMPLER_H
#define SEKV_SAMPLER_H

#include <stdint.h>

struct sampler_params {
	float temperature; /* <= 0: greedy (argmax, lowest id on ties) */
	int top_k;         /* <= 0: off */
	float top_p;       /* >= 1: off */
	uint64_t seed;
};

struct sampler {
	struct sampler_params p;
	uint64_t rng;
	float *prob;       /* [n_vocab] scratch */
	int32_t *idx;      /* [n_vocab] scratch */
	int n_vocab;
};

void sampler_default_params(struct sampler_params *p); /* greedy, seed 42 */
int sampler_init(struct sampler *s, const struct sampler_params *p, int n_vocab);
void sampler_free(struct sampler *s);
/* Picks a token from logits [n_vocab]. Does not modify logits. */
int32_t sampler_sample(struct sampler *s, const float *logits);

#endif
