/* test_fmt.c - the byte formatter shared by sekv ls and the UI gauge
 * (engine/base/fmt.h): unit steps, rounding to three digits, truncation. */
#include <stdint.h>
#include <string.h>

#include "engine/base/fmt.h"
#include "tests/test.h"

static void fmt_bytes_binary_units(struct test_ctx *t)
{
	char b[32];

	fmt_bytes(0, b, sizeof b);
	T_CHECKF(t, !strcmp(b, "0 B"), "got %s", b);
	fmt_bytes(1023, b, sizeof b);
	T_CHECKF(t, !strcmp(b, "1023 B"), "got %s", b);
	fmt_bytes(1024, b, sizeof b);
	T_CHECKF(t, !strcmp(b, "1.0 KiB"), "got %s", b);
	fmt_bytes(25794969, b, sizeof b);   /* 24.6 MiB */
	T_CHECKF(t, !strcmp(b, "24.6 MiB"), "got %s", b);
	fmt_bytes((size_t)310 * 1048576 + 400000, b, sizeof b);
	T_CHECKF(t, !strcmp(b, "310 MiB"), "got %s", b);
	fmt_bytes((size_t)2040109466, b, sizeof b);
	T_CHECKF(t, !strcmp(b, "1.9 GiB"), "got %s", b);
	fmt_bytes(SIZE_MAX, b, sizeof b);
	T_CHECKF(t, !strcmp(b, "16.0 EiB"), "got %s", b);
	fmt_bytes(25794969, b, 4);
	T_CHECKF(t, !strcmp(b, "24."), "got %s", b);
}

const struct test_case test_fmt[] = {
	{ "fmt_bytes_binary_units", fmt_bytes_binary_units },
	{ NULL, NULL },
};
