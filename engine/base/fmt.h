/* fmt.h - human-readable numbers shared by the command line (sekv ls) and
 * the UI (memory gauge): one byte formatter, so a size reads the same
 * everywhere. Pure functions over caller buffers, thread-safe. Counts and
 * percentages of the UI stay in ui/text.c.
 */
#ifndef SEKV_FMT_H
#define SEKV_FMT_H

#include <stddef.h>

/* n bytes in binary units into buf[cap] (NUL-terminated, truncated to
 * cap-1; nothing written when buf is NULL or cap is 0): "0 B", "1023 B",
 * "1.0 KiB", "24.6 MiB", "310 MiB" (no decimal from 100 up), "1.9 GiB",
 * up to EiB. */
void fmt_bytes(size_t n, char *buf, size_t cap);

#endif
