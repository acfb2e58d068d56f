/* arena.h - one allocation carved into aligned sub-buffers.
 *
 * A layout is planned first (arena_reserve returns each sub-buffer's byte
 * offset; every size computation fails on size_t overflow instead of
 * wrapping), then allocated once (arena_alloc), zeroed and ARENA_ALIGN
 * aligned, so every sub-buffer is too. Used where a structure and all its
 * arrays live in one block (sekv_mem, sekv_ctx); freed with free().
 */
#ifndef SEKV_ARENA_H
#define SEKV_ARENA_H

#include <stddef.h>

#define ARENA_ALIGN 64   /* bytes; a cache line */

/* A layout being planned. Start from {0}. */
struct arena {
	size_t bytes;        /* end of the last sub-buffer */
	int overflow;        /* 1: some size did not fit in size_t */
};

/* r = a * b; returns 1, or 0 (r untouched) when it overflows size_t. */
int arena_mul(size_t a, size_t b, size_t *r);
/* Reserves n elements of es bytes at the next ARENA_ALIGN boundary and
 * returns their offset; on overflow sets a->overflow and returns 0 (the
 * layout is then unusable: arena_alloc fails). n or es may be 0. */
size_t arena_reserve(struct arena *a, size_t n, size_t es);
/* Allocates the planned layout, zeroed, ARENA_ALIGN aligned; *out is
 * freed with free(). 0, SEKV_EINVAL (overflow) or SEKV_ENOMEM. */
int arena_alloc(const struct arena *a, void **out);

#endif
