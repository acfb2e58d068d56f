/* backend.c - chooses and opens a backend by name; the one place where the
 * build's backends are listed (a CUDA build adds its entry here, under its
 * #ifdef). The operations themselves live in backend_cpu.c and friends.
 */
#include "engine/backend/backend.h"

#include "engine/base/err.h"

#include <string.h>

int backend_open(const char *name, int n_threads, struct backend **out,
		 char *err, size_t errlen)
{
	*out = NULL;
	if (!name || !*name || !strcmp(name, "cpu"))
		return backend_cpu_open(out, n_threads, err, errlen);
	return sekv_errf(err, errlen, SEKV_EUNSUP, "backend: %s: not built in "
			 "(this build has: cpu)", name);
}

void backend_close(struct backend *b)
{
	if (b)
		b->ops->close(b);
}
