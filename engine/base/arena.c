/* arena.c - planned, overflow-checked layouts of one aligned allocation
 * (arena.h). Invariant: an offset is only returned for a layout whose
 * total still fits in size_t.
 */
#include "engine/base/arena.h"

#include "engine/base/err.h"

#include <stdlib.h>
#include <string.h>

int arena_mul(size_t a, size_t b, size_t *r)
{
	if (a && b > (size_t)-1 / a)
		return 0;
	*r = a * b;
	return 1;
}

size_t arena_reserve(struct arena *a, size_t n, size_t es)
{
	size_t bytes, o;

	if (a->overflow)
		return 0;
	o = a->bytes + (ARENA_ALIGN - 1);
	if (o < a->bytes || !arena_mul(n, es, &bytes)) {
		a->overflow = 1;
		return 0;
	}
	o &= ~(size_t)(ARENA_ALIGN - 1);
	if (o + bytes < o) {
		a->overflow = 1;
		return 0;
	}
	a->bytes = o + bytes;
	return o;
}

int arena_alloc(const struct arena *a, void **out)
{
	size_t n;
	void *p;

	*out = NULL;
	if (a->overflow)
		return SEKV_EINVAL;
	n = a->bytes ? a->bytes : 1;
	if (n > (size_t)-1 - (ARENA_ALIGN - 1))
		return SEKV_EINVAL;
	n = (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
	p = aligned_alloc(ARENA_ALIGN, n);
	if (!p)
		return SEKV_ENOMEM;
	memset(p, 0, n);
	*out = p;
	return 0;
}
