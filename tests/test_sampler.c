/* test_sampler.c - greedy choice, seeded reproducibility, top-k/top-p cuts
 * and the sampled distribution against the softmax it should follow. */
#include "tests/test.h"

#include "engine/base/err.h"
#include "engine/conv/sampler.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static void t_greedy(struct test_ctx *t)
{
	float lg[6] = { 0.5f, 3.0f, -1.0f, 3.0f, 2.9f, -INFINITY };
	struct sampler_params p;
	struct sampler s;

	sampler_default_params(&p);
	T_CHECK(t, p.temperature <= 0.0f && p.seed == 42);
	T_CHECK(t, sampler_init(&s, &p, 6) == 0);
	/* tie between 1 and 3: the lower id wins */
	T_CHECK(t, sampler_sample(&s, lg) == 1);
	lg[4] = 3.5f;
	T_CHECK(t, sampler_sample(&s, lg) == 4);
	lg[0] = 7.0f;
	T_CHECK(t, sampler_sample(&s, lg) == 0);
	sampler_free(&s);
	sampler_free(&s);
	T_CHECK(t, sampler_init(&s, &p, 0) == SEKV_EINVAL);
}

/* Logits with a broad distribution over n ids. */
static void fill_logits(float *lg, int n)
{
	for (int i = 0; i < n; i++)
		lg[i] = (float)sin(i * 0.37) * 2.0f + (float)(i % 7) * 0.1f;
}

static void t_seed_reproducible(struct test_ctx *t)
{
	enum { N = 1000, DRAWS = 200 };
	static float lg[N];
	struct sampler_params p = { .temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .seed = 1234 };
	struct sampler a, b, c;
	int32_t sa[DRAWS], sb[DRAWS], sc[DRAWS];
	int differ = 0, distinct = 0;

	fill_logits(lg, N);
	T_CHECK(t, sampler_init(&a, &p, N) == 0 && sampler_init(&b, &p, N) == 0);
	p.seed = 1235;
	T_CHECK(t, sampler_init(&c, &p, N) == 0);
	for (int i = 0; i < DRAWS; i++) {
		sa[i] = sampler_sample(&a, lg);
		sb[i] = sampler_sample(&b, lg);
		sc[i] = sampler_sample(&c, lg);
		T_CHECK(t, sa[i] >= 0 && sa[i] < N);
		differ += sa[i] != sc[i];
	}
	T_CHECK(t, memcmp(sa, sb, sizeof sa) == 0);
	T_CHECKF(t, differ > DRAWS / 2, "seeds 1234 and 1235 agree on %d of %d", DRAWS - differ, DRAWS);
	for (int i = 1; i < DRAWS; i++)
		distinct += sa[i] != sa[0];
	T_CHECK(t, distinct > 0);
	sampler_free(&a);
	sampler_free(&b);
	sampler_free(&c);
}

static void t_top_k1_is_greedy(struct test_ctx *t)
{
	enum { N = 5000 };
	static float lg[N];
	struct sampler_params p = { .temperature = 1.5f, .top_k = 1, .top_p = 1.0f, .seed = 7 };
	struct sampler s, g;
	struct sampler_params pg;

	fill_logits(lg, N);
	sampler_default_params(&pg);
	T_CHECK(t, sampler_init(&s, &p, N) == 0 && sampler_init(&g, &pg, N) == 0);
	for (int i = 0; i < 50; i++) {
		lg[(i * 131) % N] += 5.0f; /* move the argmax around */
		T_CHECK(t, sampler_sample(&s, lg) == sampler_sample(&g, lg));
	}
	sampler_free(&s);
	sampler_free(&g);
}

/* probabilities 0.5, 0.3, 0.2 (and a negligible tail) */
static void t_distribution_and_cuts(struct test_ctx *t)
{
	enum { N = 4, DRAWS = 20000 };
	float lg[N] = { logf(0.5f), logf(0.3f), logf(0.2f), -80.0f };
	struct sampler_params p = { .temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .seed = 99 };
	struct sampler s;
	int cnt[N] = { 0 };

	T_CHECK(t, sampler_init(&s, &p, N) == 0);
	for (int i = 0; i < DRAWS; i++)
		cnt[sampler_sample(&s, lg)]++;
	/* binomial sd <= sqrt(0.25/20000) = 0.0035; allow ~4 sd */
	T_CHECKF(t, fabs(cnt[0] / (double)DRAWS - 0.5) < 0.015 &&
		 fabs(cnt[1] / (double)DRAWS - 0.3) < 0.015 &&
		 fabs(cnt[2] / (double)DRAWS - 0.2) < 0.015 && cnt[3] == 0,
		 "counts %d %d %d %d", cnt[0], cnt[1], cnt[2], cnt[3]);
	sampler_free(&s);

	/* top_k = 2: only ids 0 and 1, renormalised to 5/8, 3/8 */
	p.top_k = 2;
	memset(cnt, 0, sizeof cnt);
	T_CHECK(t, sampler_init(&s, &p, N) == 0);
	for (int i = 0; i < DRAWS; i++)
		cnt[sampler_sample(&s, lg)]++;
	T_CHECKF(t, cnt[2] == 0 && cnt[3] == 0 && fabs(cnt[0] / (double)DRAWS - 0.625) < 0.015,
		 "top-k counts %d %d %d", cnt[0], cnt[1], cnt[2]);
	sampler_free(&s);

	/* top_p = 0.75: 0.5 + 0.3 reaches it, id 2 is cut */
	p.top_k = 0;
	p.top_p = 0.75f;
	memset(cnt, 0, sizeof cnt);
	T_CHECK(t, sampler_init(&s, &p, N) == 0);
	for (int i = 0; i < DRAWS; i++)
		cnt[sampler_sample(&s, lg)]++;
	T_CHECKF(t, cnt[2] == 0 && cnt[3] == 0 && cnt[1] > 0, "top-p counts %d %d %d", cnt[0], cnt[1], cnt[2]);
	sampler_free(&s);

	/* top_p = 0.4: the first id alone reaches it */
	p.top_p = 0.4f;
	T_CHECK(t, sampler_init(&s, &p, N) == 0);
	for (int i = 0; i < 100; i++)
		T_CHECK(t, sampler_sample(&s, lg) == 0);
	sampler_free(&s);
}

/* The repetition penalty (CTRL) divides a recent token's positive logit and
 * multiplies a negative one, once per distinct id; 1.0 leaves greedy alone. */
static void sampler_repeat_penalty(struct test_ctx *t)
{
	struct sampler_params p;
	struct sampler s;
	float lg[6] = { 2.0f, 1.9f, -1.0f, -1.05f, 0.5f, 0.0f };

	sampler_default_params(&p);
	p.repeat_penalty = 1.1f;
	p.repeat_last_n = 3;
	T_CHECK(t, sampler_init(&s, &p, 6) == 0);
	int first = sampler_sample(&s, lg);
	sampler_accept(&s, 0);
	sampler_accept(&s, 0);          /* counted once: 2.0/1.1 = 1.82 < 1.9 */
	int second = sampler_sample(&s, lg);
	sampler_accept(&s, 1);
	sampler_accept(&s, 4);          /* window of 3: the first 0 leaves */
	sampler_accept(&s, 4);          /* 0 gone: back to id 0 */
	int third = sampler_sample(&s, lg);
	sampler_reset_recent(&s);
	int fourth = sampler_sample(&s, lg);
	sampler_free(&s);
	T_CHECKF(t, first == 0 && second == 1 && third == 0 && fourth == 0,
		 "%d %d %d %d", first, second, third, fourth);
	/* negative logits move the other way: -1.0*1.1 = -1.1 < -1.05 */
	float neg[2] = { -1.0f, -1.05f };
	p.repeat_last_n = 4;
	T_CHECK(t, sampler_init(&s, &p, 2) == 0);
	sampler_accept(&s, 0);
	int pick = sampler_sample(&s, neg);
	sampler_free(&s);
	T_CHECKF(t, pick == 1, "picked %d", pick);
	/* penalty 1.0: nothing allocated, plain greedy */
	p.repeat_penalty = 1.0f;
	T_CHECK(t, sampler_init(&s, &p, 6) == 0);
	sampler_accept(&s, 0);
	pick = sampler_sample(&s, lg);
	int none = s.adj == NULL;
	sampler_free(&s);
	T_CHECK(t, pick == 0 && none);
}

const struct test_case test_sampler[] = {
	{ "sampler_repeat_penalty", sampler_repeat_penalty },
	{ "sampler_greedy_argmax_lowest_id_on_ties", t_greedy },
	{ "sampler_seed_reproducible", t_seed_reproducible },
	{ "sampler_top_k1_equals_greedy", t_top_k1_is_greedy },
	{ "sampler_distribution_top_k_top_p", t_distribution_and_cuts },
	{ NULL, NULL },
};
