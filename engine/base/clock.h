/* clock.h - the one process clock: monotonic seconds for every rate, ETA
 * and timeout, and the peak resident set size reported beside them.
 *
 * Prefix clk_ (clock_ is POSIX's, in <time.h>). Times are seconds as
 * double (DESIGN.md section 5), sizes bytes. Wall-clock dates (store
 * timestamps) use CLOCK_REALTIME in store/, not this clock.
 */
#ifndef SEKV_CLOCK_H
#define SEKV_CLOCK_H

#include <stddef.h>

/* Seconds on CLOCK_MONOTONIC (arbitrary origin, never steps back): only
 * differences mean anything. Thread-safe and async-signal-safe (a signal
 * handler may call it). */
double clk_now(void);

/* Peak resident set size of this process in bytes (getrusage ru_maxrss),
 * or 0 when unavailable. Thread-safe. */
size_t clk_peak_rss(void);

#endif
