/* kv_select.c - the rivals' selection rules (kv_select.h): StreamingLLM's
 * sinks and recent positions, a top-k with a fixed order of merit, and
 * SnapKV's and H2O's rules built on it.
 * Invariant: every rule is a pure function of its inputs (no state, no
 * allocation), so the same scores always keep the same positions.
 */
#include "engine/kv/kv_select.h"

#include "engine/base/err.h"

#include <stdlib.h>

int kv_select_streaming(int n_tok, int n_keep, int n_sink, int32_t *out)
{
	int n = 0;

	if (n_tok < 0 || n_keep < 0 || n_sink < 0)
		return SEKV_EINVAL;
	if (n_keep > n_tok)
		n_keep = n_tok;
	if (n_sink > n_keep)
		n_sink = n_keep;
	for (int i = 0; i < n_sink; i++)
		out[n++] = i;
	for (int i = n_tok - (n_keep - n_sink); i < n_tok; i++)
		out[n++] = i;
	return n;
}

/* x before y in merit (1) or not (0): a number beats NaN; 0 when equal. */
static int num_gt(float x, float y)
{
	int nx = x != x, ny = y != y;

	if (nx || ny)
		return !nx && ny;
	return x > y;
}

static int num_eq(float x, float y)
{
	return (x != x && y != y) || x == y;
}

/* Index a ranks before index b (kv_select_top's order of merit). */
static int better(const float *score, const float *tie, int32_t a, int32_t b)
{
	if (!num_eq(score[a], score[b]))
		return num_gt(score[a], score[b]);
	if (tie && !num_eq(tie[a], tie[b]))
		return num_gt(tie[a], tie[b]);
	return a < b;
}

/* Restores the heap below node i: every parent ranks after its children,
 * so the root is the one to drop first. */
static void sift_down(int32_t *h, int n, int i, const float *score, const float *tie)
{
	for (;;) {
		int w = i, l = 2 * i + 1, r = l + 1;
		if (l < n && better(score, tie, h[w], h[l]))
			w = l;
		if (r < n && better(score, tie, h[w], h[r]))
			w = r;
		if (w == i)
			return;
		int32_t t = h[i];
		h[i] = h[w];
		h[w] = t;
		i = w;
	}
}

static int cmp_i32(const void *a, const void *b)
{
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	return (x > y) - (x < y);
}

int kv_select_top(const float *score, const float *tie, int n, int n_keep, int32_t *out)
{
	if (n < 0 || n_keep < 0)
		return SEKV_EINVAL;
	if (n_keep > n)
		n_keep = n;
	if (n_keep == 0)
		return 0;
	for (int i = 0; i < n_keep; i++)
		out[i] = i;
	for (int i = n_keep / 2 - 1; i >= 0; i--)
		sift_down(out, n_keep, i, score, tie);
	for (int i = n_keep; i < n; i++)
		if (better(score, tie, i, out[0])) {
			out[0] = i;
			sift_down(out, n_keep, 0, score, tie);
		}
	qsort(out, (size_t)n_keep, sizeof *out, cmp_i32);
	return n_keep;
}

int kv_select_snapkv(const float *vote, int n_tok, int n_keep, int kernel, float *pool,
		     int32_t *out)
{
	int half = kernel / 2;

	if (n_tok < 0 || n_keep < 0 || kernel < 1 || kernel % 2 == 0)
		return SEKV_EINVAL;
	for (int i = 0; i < n_tok; i++) {
		int j0 = i - half > 0 ? i - half : 0, j1 = i + half < n_tok - 1 ? i + half : n_tok - 1;
		float m = vote[j0];
		for (int j = j0 + 1; j <= j1; j++)
			m = num_gt(vote[j], m) ? vote[j] : m;
		pool[i] = m;
	}
	return kv_select_top(pool, vote, n_tok, n_keep, out);
}

int kv_select_h2o(const float *score, int n_tok, int n_keep, int n_recent, int32_t *out)
{
	int n;

	if (n_tok < 0 || n_keep < 0 || n_recent < 0)
		return SEKV_EINVAL;
	if (n_keep > n_tok)
		n_keep = n_tok;
	if (n_recent > n_keep)
		n_recent = n_keep;
	n = kv_select_top(score, NULL, n_tok - n_recent, n_keep - n_recent, out);
	for (int i = n_tok - n_recent; i < n_tok; i++)
		out[n++] = i;
	return n;
}
