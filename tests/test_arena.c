/* test_arena.c - engine/arena: aligned offsets, overflow of every size
 * computation, and the allocation of a planned layout. */
#include "tests/test.h"

#include "engine/base/arena.h"
#include "engine/base/err.h"

#include <stdint.h>
#include <stdlib.h>

static void arena_offsets_aligned_and_disjoint(struct test_ctx *t)
{
	struct arena a = {0};
	size_t o1 = arena_reserve(&a, 3, 1), o2 = arena_reserve(&a, 5, 8);
	size_t o3 = arena_reserve(&a, 0, 4), o4 = arena_reserve(&a, 1, 100);
	void *p = NULL;

	T_CHECK(t, !a.overflow);
	T_CHECK(t, o1 == 0 && o2 == 64 && o2 >= o1 + 3);
	T_CHECK(t, o3 % ARENA_ALIGN == 0 && o3 >= o2 + 40 && o4 >= o3);
	T_CHECK(t, o4 % ARENA_ALIGN == 0 && a.bytes == o4 + 100);
	T_CHECK(t, arena_alloc(&a, &p) == 0 && p);
	T_CHECK(t, (uintptr_t)p % ARENA_ALIGN == 0);
	for (size_t i = 0; i < a.bytes; i++)
		T_CHECKF(t, ((unsigned char *)p)[i] == 0, "byte %zu not zeroed", i);
	free(p);
}

static void arena_overflow_refused(struct test_ctx *t)
{
	struct arena a = {0}, b = {0}, c = {0};
	size_t r = 7;
	void *p = (void *)1;

	T_CHECK(t, arena_mul((size_t)-1 / 2 + 1, 2, &r) == 0 && r == 7);
	T_CHECK(t, arena_mul((size_t)-1 / 3, 3, &r) == 1 && r == (size_t)-1 / 3 * 3);
	T_CHECK(t, arena_mul(0, (size_t)-1, &r) == 1 && r == 0);
	/* n * es overflows */
	arena_reserve(&a, (size_t)-1 / 4 + 1, 4);
	T_CHECK(t, a.overflow);
	T_CHECK(t, arena_alloc(&a, &p) == SEKV_EINVAL && p == NULL);
	/* the sum of two halves overflows */
	arena_reserve(&b, (size_t)-1 / 2, 1);
	T_CHECK(t, !b.overflow);
	arena_reserve(&b, (size_t)-1 / 2 + 2, 1);
	T_CHECK(t, b.overflow);
	/* alignment padding past the end overflows */
	c.bytes = (size_t)-1 - 10;
	arena_reserve(&c, 1, 1);
	T_CHECK(t, c.overflow);
	/* once overflowed, later reservations stay refused */
	T_CHECK(t, arena_reserve(&c, 1, 1) == 0 && c.overflow);
}

const struct test_case test_arena[] = {
	{ "arena_offsets_aligned_and_disjoint", arena_offsets_aligned_and_disjoint },
	{ "arena_overflow_refused", arena_overflow_refused },
	{ NULL, NULL },
};
