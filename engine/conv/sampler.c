/* sampler.c - next-token choice over a logits row.
 *
 * Greedy is argmax with the lowest id winning ties. Otherwise candidates
 * are ordered by logit (descending, then id ascending, so the order never
 * depends on the sort), cut to top_k, turned into probabilities with the
 * temperature, cut to the smallest prefix whose mass reaches top_p, and
 * drawn with xorshift64* (Vigna 2016) seeded from the parameters: the same
 * seed and logits give the same tokens on every run and machine.
 * Scratch (prob, idx) is sized at sampler_init; sampling never allocates.
 */
#include "engine/conv/sampler.h"

#include "engine/base/err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void sampler_default_params(struct sampler_params *p)
{
	p->temperature = 0.0f;
	p->top_k = 40;    /* llama.cpp's defaults, used once temperature > 0 */
	p->top_p = 0.95f;
	p->seed = 42;
	p->repeat_penalty = 1.0f;
	p->repeat_last_n = 64;
}

int sampler_init(struct sampler *s, const struct sampler_params *p, int n_vocab)
{
	memset(s, 0, sizeof *s);
	if (n_vocab < 1)
		return SEKV_EINVAL;
	s->p = *p;
	/* xorshift64* must not start at 0. */
	s->rng = p->seed ? p->seed : 0x9E3779B97F4A7C15ULL;
	s->n_vocab = n_vocab;
	s->prob = malloc(sizeof(float) * (size_t)n_vocab);
	s->idx = malloc(sizeof(int32_t) * (size_t)n_vocab);
	if (s->p.repeat_last_n < 0)
		s->p.repeat_last_n = 0;
	if (s->p.repeat_penalty != 1.0f && s->p.repeat_last_n > 0) {
		s->adj = malloc(sizeof(float) * (size_t)n_vocab);
		s->recent = malloc(sizeof(int32_t) * (size_t)s->p.repeat_last_n);
		if (!s->adj || !s->recent) {
			sampler_free(s);
			return SEKV_ENOMEM;
		}
	}
	if (!s->prob || !s->idx) {
		sampler_free(s);
		return SEKV_ENOMEM;
	}
	return 0;
}

void sampler_free(struct sampler *s)
{
	if (!s)
		return;
	free(s->prob);
	free(s->idx);
	free(s->adj);
	free(s->recent);
	s->prob = NULL;
	s->idx = NULL;
	s->adj = NULL;
	s->recent = NULL;
}

void sampler_accept(struct sampler *s, int32_t id)
{
	if (!s->recent)
		return;
	s->recent[s->recent_head] = id;
	s->recent_head = (s->recent_head + 1) % s->p.repeat_last_n;
	if (s->n_recent < s->p.repeat_last_n)
		s->n_recent++;
}

void sampler_reset_recent(struct sampler *s)
{
	s->n_recent = 0;
	s->recent_head = 0;
}

/* Copies logits into s->adj with the penalty applied once per distinct
 * recent id; returns the array to sample from. */
static const float *penalise(struct sampler *s, const float *logits)
{
	float pen = s->p.repeat_penalty;

	if (!s->recent || s->n_recent == 0)
		return logits;
	memcpy(s->adj, logits, sizeof(float) * (size_t)s->n_vocab);
	for (int i = 0; i < s->n_recent; i++) {
		int32_t id = s->recent[i];
		int seen = 0;
		if (id < 0 || id >= s->n_vocab)
			continue;
		for (int j = 0; j < i && !seen; j++)
			seen = s->recent[j] == id;
		if (!seen)
			s->adj[id] = logits[id] > 0 ? logits[id] / pen : logits[id] * pen;
	}
	return s->adj;
}

static uint64_t xorshift64s(uint64_t *x)
{
	*x ^= *x >> 12;
	*x ^= *x << 25;
	*x ^= *x >> 27;
	return *x * 0x2545F4914F6CDD1DULL;
}

static int32_t argmax(const float *l, int n)
{
	int32_t best = 0;

	for (int i = 1; i < n; i++)
		if (l[i] > l[best])
			best = i;
	return best;
}

/* a goes before b: higher logit first, then lower id. */
static int before(const float *l, int32_t a, int32_t b)
{
	return l[a] > l[b] || (l[a] == l[b] && a < b);
}

/* Min-heap on "before" order of the k best seen so far (root = worst). */
static void heap_down(const float *l, int32_t *h, int n, int i)
{
	for (;;) {
		int c = 2 * i + 1, w = i;
		if (c < n && before(l, h[w], h[c]))
			w = c;
		if (c + 1 < n && before(l, h[w], h[c + 1]))
			w = c + 1;
		if (w == i)
			return;
		int32_t t = h[i];
		h[i] = h[w];
		h[w] = t;
		i = w;
	}
}

/* Writes the k best ids into idx[0..k), best first. O(n log k). */
static void top_k_ids(const float *l, int n, int k, int32_t *idx)
{
	for (int i = 0; i < k; i++)
		idx[i] = i;
	for (int i = k / 2 - 1; i >= 0; i--)
		heap_down(l, idx, k, i);
	for (int i = k; i < n; i++)
		if (before(l, i, idx[0])) {
			idx[0] = i;
			heap_down(l, idx, k, 0);
		}
	/* heap sort: repeatedly move the worst to the end */
	for (int m = k - 1; m > 0; m--) {
		int32_t t = idx[0];
		idx[0] = idx[m];
		idx[m] = t;
		heap_down(l, idx, m, 0);
	}
}

int32_t sampler_sample(struct sampler *s, const float *logits)
{
	int n = s->n_vocab, k = s->p.top_k;
	float inv_t;
	double sum = 0.0, u, acc = 0.0;

	logits = penalise(s, logits);
	if (s->p.temperature <= 0.0f)
		return argmax(logits, n);
	if (k <= 0 || k > n)
		k = n;
	top_k_ids(logits, n, k, s->idx);
	inv_t = 1.0f / s->p.temperature;
	for (int i = 0; i < k; i++) {
		s->prob[i] = expf((logits[s->idx[i]] - logits[s->idx[0]]) * inv_t);
		sum += s->prob[i];
	}
	if (s->p.top_p < 1.0f) {
		double cut = s->p.top_p * sum, c = 0.0;
		int keep = k;
		for (int i = 0; i < k; i++) {
			c += s->prob[i];
			if (c >= cut) {
				keep = i + 1;
				break;
			}
		}
		k = keep;
		sum = c;
	}
	u = (double)(xorshift64s(&s->rng) >> 11) * (1.0 / 9007199254740992.0) * sum;
	for (int i = 0; i < k; i++) {
		acc += s->prob[i];
		if (u < acc)
			return s->idx[i];
	}
	return s->idx[k - 1];
}
