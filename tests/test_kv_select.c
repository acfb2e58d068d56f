/* test_kv_select.c - the rivals' selection rules (engine/kv/kv_select.c) on
 * hand-made scores: the order of merit of the top-k (ties, NaN, sizes),
 * SnapKV's pooled votes keeping a peak's neighbours, H2O's heavy hitters
 * beside the recent window. Quest's page choice is tested with its
 * stream (test_kv_quest.c).
 */
#include "tests/test.h"

#include "engine/base/err.h"
#include "engine/kv/kv_select.h"

#include <math.h>
#include <string.h>

/* 1 when out[0..n) equals want[0..n). */
static int same(const int32_t *out, const int32_t *want, int n)
{
	return !memcmp(out, want, (size_t)n * sizeof *out);
}

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

/* The best scores, ascending by index; equal scores: the tie-breaker,
 * then the earlier index; NaN last; sizes clipped. */
static void select_top_order_of_merit(struct test_ctx *t)
{
	const float s[8] = { 0.1f, 0.9f, 0.3f, 0.9f, NAN, 0.5f, -INFINITY, 0.3f };
	const float tie[8] = { 0, 0, 1, 0, 0, 0, 0, 2 };
	int32_t out[8];

	T_CHECK(t, kv_select_top(s, NULL, 8, 3, out) == 3 && same(out, (int32_t[]){ 1, 3, 5 }, 3));
	/* 0.3 twice: the earlier index without a tie-breaker, the larger tie with one */
	T_CHECK(t, kv_select_top(s, NULL, 8, 4, out) == 4 && same(out, (int32_t[]){ 1, 2, 3, 5 }, 4));
	T_CHECK(t, kv_select_top(s, tie, 8, 4, out) == 4 && same(out, (int32_t[]){ 1, 3, 5, 7 }, 4));
	/* -inf still beats NaN */
	T_CHECK(t, kv_select_top(s, NULL, 8, 7, out) == 7 && same(out, (int32_t[]){ 0, 1, 2, 3, 5, 6, 7 }, 7));
	T_CHECK(t, kv_select_top(s, NULL, 8, 20, out) == 8 && same(out, (int32_t[]){ 0, 1, 2, 3, 4, 5, 6, 7 }, 8));
	T_CHECK(t, kv_select_top(s, NULL, 8, 0, out) == 0);
	T_CHECK(t, kv_select_top(s, NULL, 0, 3, out) == 0);
	T_CHECK(t, kv_select_top(s, NULL, -1, 3, out) == SEKV_EINVAL);
	T_CHECK(t, kv_select_top(s, NULL, 8, -1, out) == SEKV_EINVAL);
}

/* A window that attended to position 10 (and less to 30): max pooling of
 * kernel 7 keeps the peak with its three neighbours on each side before
 * the weaker peak; the peak itself ranks first among its neighbours
 * (their pooled votes are equal); kernel 1 is plain top-k. */
static void select_snapkv_pools_neighbours(struct test_ctx *t)
{
	float vote[40], pool[40];
	int32_t out[40];

	for (int i = 0; i < 40; i++)
		vote[i] = 0.001f * (float)(i % 5);
	vote[10] = 5;
	vote[12] = 1;
	vote[30] = 3;
	T_CHECK(t, kv_select_snapkv(vote, 40, 7, 7, pool, out) == 7 &&
		same(out, (int32_t[]){ 7, 8, 9, 10, 11, 12, 13 }, 7));
	T_CHECK(t, pool[7] == 5 && pool[13] == 5 && pool[6] == 0.004f && pool[14] == 1);
	T_CHECK(t, kv_select_snapkv(vote, 40, 8, 7, pool, out) == 8 &&
		same(out, (int32_t[]){ 7, 8, 9, 10, 11, 12, 13, 30 }, 8));
	/* one row: the peak, not its first neighbour */
	T_CHECK(t, kv_select_snapkv(vote, 40, 1, 7, pool, out) == 1 && out[0] == 10);
	/* two rows from a pooled plateau: the peak and its stronger neighbour */
	T_CHECK(t, kv_select_snapkv(vote, 40, 2, 7, pool, out) == 2 && out[0] == 10 && out[1] == 12);
	T_CHECK(t, kv_select_snapkv(vote, 40, 3, 1, pool, out) == 3 &&
		same(out, (int32_t[]){ 10, 12, 30 }, 3));
	/* a peak at the edge pools inward only */
	memset(vote, 0, sizeof vote);
	vote[1] = 2;
	T_CHECK(t, kv_select_snapkv(vote, 40, 5, 7, pool, out) == 5 &&
		same(out, (int32_t[]){ 0, 1, 2, 3, 4 }, 5) && pool[4] == 2 && pool[5] == 0);
	/* all equal: the first positions */
	for (int i = 0; i < 40; i++)
		vote[i] = 1;
	T_CHECK(t, kv_select_snapkv(vote, 40, 3, 7, pool, out) == 3 && same(out, (int32_t[]){ 0, 1, 2 }, 3));
	T_CHECK(t, kv_select_snapkv(vote, 40, 99, 7, pool, out) == 40 && out[0] == 0 && out[39] == 39);
	T_CHECK(t, kv_select_snapkv(vote, 40, 3, 6, pool, out) == SEKV_EINVAL);
	T_CHECK(t, kv_select_snapkv(vote, 40, 3, 0, pool, out) == SEKV_EINVAL);
	T_CHECK(t, kv_select_snapkv(vote, -1, 3, 7, pool, out) == SEKV_EINVAL);
}

/* Heavy hitters (the largest accumulated scores before the recent
 * window) and the recent window; a large score inside the window does not
 * take a heavy-hitter slot. */
static void select_h2o_heavy_and_recent(struct test_ctx *t)
{
	float score[20] = { 0 };
	int32_t out[20];

	for (int i = 0; i < 20; i++)
		score[i] = 0.01f * (float)(20 - i); /* earlier rows are seen by more queries */
	score[2] = 9;
	score[5] = 8;
	score[11] = 7;
	score[18] = 100;
	T_CHECK(t, kv_select_h2o(score, 20, 6, 3, out) == 6 &&
		same(out, (int32_t[]){ 2, 5, 11, 17, 18, 19 }, 6));
	/* no recent window: heavy hitters only, 18 included */
	T_CHECK(t, kv_select_h2o(score, 20, 3, 0, out) == 3 && same(out, (int32_t[]){ 2, 5, 18 }, 3));
	/* the window is clipped to what is kept */
	T_CHECK(t, kv_select_h2o(score, 20, 2, 5, out) == 2 && same(out, (int32_t[]){ 18, 19 }, 2));
	T_CHECK(t, kv_select_h2o(score, 20, 30, 4, out) == 20 && out[0] == 0 && out[19] == 19);
	/* equal scores: the earlier position */
	for (int i = 0; i < 20; i++)
		score[i] = 1;
	T_CHECK(t, kv_select_h2o(score, 20, 4, 2, out) == 4 && same(out, (int32_t[]){ 0, 1, 18, 19 }, 4));
	T_CHECK(t, kv_select_h2o(score, 20, -1, 2, out) == SEKV_EINVAL);
	T_CHECK(t, kv_select_h2o(score, 20, 4, -2, out) == SEKV_EINVAL);
}

const struct test_case test_kv_select[] = {
	{ "kv_select_streaming_sinks_and_recent", select_streaming_sinks_and_recent },
	{ "kv_select_top_order_of_merit", select_top_order_of_merit },
	{ "kv_select_snapkv_pools_neighbours", select_snapkv_pools_neighbours },
	{ "kv_select_h2o_heavy_and_recent", select_h2o_heavy_and_recent },
	{ NULL, NULL },
};
