/* test_clock.c - the process clock (engine/base/clock.h): monotonic seconds
 * that follow a real sleep, and a peak RSS that sees memory being touched. */
#include <stdlib.h>
#include <time.h>

#include "engine/base/clock.h"
#include "tests/test.h"

static void clk_now_follows_sleep(struct test_ctx *t)
{
	struct timespec ts = { 0, 50 * 1000 * 1000 };
	double t0 = clk_now(), t1;

	nanosleep(&ts, NULL);
	t1 = clk_now();
	/* a busy machine may sleep longer, never shorter */
	T_CHECKF(t, t1 - t0 >= 0.049 && t1 - t0 < 10.0, "slept %.4f s", t1 - t0);
	T_CHECK(t, clk_now() >= t1);
}

static void clk_peak_rss_sees_touched_memory(struct test_ctx *t)
{
	size_t before = clk_peak_rss(), n = (size_t)64 << 20;
	volatile char *p = malloc(n); /* volatile: the stores must happen */

	T_CHECK(t, p != NULL);
	for (size_t i = 0; i < n; i += 4096)
		p[i] = 1;
	size_t after = clk_peak_rss();
	free((void *)p);
	T_CHECKF(t, before > 0 && after >= before && after >= n, "before %zu after %zu", before, after);
}

const struct test_case test_clock[] = {
	{ "clk_now_follows_sleep", clk_now_follows_sleep },
	{ "clk_peak_rss_sees_touched_memory", clk_peak_rss_sees_touched_memory },
	{ NULL, NULL },
};
