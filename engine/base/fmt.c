/* fmt.c - the byte formatter (fmt.h). */
#include "engine/base/fmt.h"

#include <stdio.h>

void fmt_bytes(size_t n, char *buf, size_t cap)
{
	static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
	double v = (double)n;
	int u = 0;

	if (!buf || cap == 0)
		return;
	if (n < 1024) {
		snprintf(buf, cap, "%zu B", n);
		return;
	}
	while (v >= 1024.0 && u < 6) {
		v /= 1024.0;
		u++;
	}
	/* three significant digits: 24.6 MiB, 310 MiB */
	if (v >= 99.95)
		snprintf(buf, cap, "%.0f %s", v, unit[u]);
	else
		snprintf(buf, cap, "%.1f %s", v, unit[u]);
}
