/* clock.c - monotonic seconds and peak RSS (clock.h). */
#include "engine/base/clock.h"

#include <sys/resource.h>
#include <time.h>

double clk_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

size_t clk_peak_rss(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru) != 0)
		return 0;
	return (size_t)ru.ru_maxrss * 1024; /* Linux reports KiB */
}
