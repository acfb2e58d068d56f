/* sampler.h - next-token choice: greedy, or temperature/top-k/top-p with a
 * seeded generator (xorshift64*, reproducible across runs), after an
 * optional repetition penalty over the last tokens (Keskar et al. 2019,
 * CTRL, section 4.1: a positive logit is divided by the penalty, a negative
 * one multiplied, once per distinct recent token). */
#ifndef SEKV_SAMPLER_H
#define SEKV_SAMPLER_H

#include <stdint.h>

struct sampler_params {
	float temperature; /* <= 0: greedy (argmax, lowest id on ties) */
	int top_k;         /* <= 0: off */
	float top_p;       /* >= 1: off */
	uint64_t seed;
	float repeat_penalty; /* 1: off (default 1.1 for answers, see app) */
	int repeat_last_n;    /* recent tokens penalised (64) */
};

struct sampler {
	struct sampler_params p;
	uint64_t rng;
	float *prob;       /* [n_vocab] scratch */
	int32_t *idx;      /* [n_vocab] scratch */
	float *adj;        /* [n_vocab] penalised logits, scratch */
	int32_t *recent;   /* [repeat_last_n] ring of accepted tokens */
	int n_recent;      /* tokens in the ring (<= repeat_last_n) */
	int recent_head;   /* next slot */
	int n_vocab;
};

void sampler_default_params(struct sampler_params *p); /* greedy, seed 42 */
int sampler_init(struct sampler *s, const struct sampler_params *p, int n_vocab);
void sampler_free(struct sampler *s);
/* Picks a token from logits [n_vocab] (repetition penalty applied to a
 * copy over the accepted tokens). Does not modify logits. */
int32_t sampler_sample(struct sampler *s, const float *logits);
/* Records a token that joined the context (answer tokens; callers decide
 * whether prompt tokens count). */
void sampler_accept(struct sampler *s, int32_t id);
/* Forgets the accepted tokens (new answer). */
void sampler_reset_recent(struct sampler *s);

#endif
