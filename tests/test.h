/* test.h - the tiny test harness: each tests/test_<module>.c exports a
 * table of {name, fn} ending in {NULL, NULL}; tests/run.c runs them. */
#ifndef SEKV_TEST_H
#define SEKV_TEST_H

#include <stddef.h>
#include <stdio.h>

/* Failure messages are truncated to msg on purpose. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

struct test_ctx {
	int failed;
	int skipped;
	char msg[512];
};

struct test_case {
	const char *name;
	void (*fn)(struct test_ctx *t);
};

#define T_FAIL(t, ...) do { if (!(t)->failed) { \
	int n_ = snprintf((t)->msg, sizeof (t)->msg, "%s:%d ", __FILE__, __LINE__); \
	if (n_ > 0 && n_ < (int)sizeof (t)->msg) snprintf((t)->msg + n_, sizeof (t)->msg - n_, __VA_ARGS__); } \
	(t)->failed = 1; } while (0)

/* Checks cond; on failure records file:line and returns from the test. */
#define T_CHECK(t, cond) do { if (!(cond)) { T_FAIL(t, "%s", #cond); return; } } while (0)
#define T_CHECKF(t, cond, ...) do { if (!(cond)) { T_FAIL(t, __VA_ARGS__); return; } } while (0)
#define T_SKIP(t, ...) do { (t)->skipped = 1; snprintf((t)->msg, sizeof (t)->msg, __VA_ARGS__); return; } while (0)

/* Path of the default model (SEKV_MODEL or assets/models/...). */
const char *test_model_path(void);
/* Parses the JSON file at path (relative to the repository root); on
 * failure records a test failure naming the file and returns NULL. The
 * caller frees the tree with cJSON_Delete. */
struct cJSON;
struct cJSON *test_json_load(struct test_ctx *t, const char *path);
/* Deterministic pseudo-random floats in [-1, 1) (xorshift64 of seed). */
void test_fill_random(float *y, size_t n, unsigned long long seed);
/* bin/sekv beside the test binary (bin/ or bin-asan/). */
const char *test_sekv_bin(void);
/* Runs cmd with sh (popen) and returns its stdout, malloc'ed and
 * NUL-terminated (the caller frees), or NULL when it could not run;
 * *status gets its exit status, -1 when it did not exit normally. */
char *test_run_cmd(const char *cmd, int *status);
/* Writes data[0..n) to path (created or truncated); 0 or -1. */
int test_write_file(const char *path, const void *data, size_t n);
/* 1 when s[0..n) holds a byte that can drive a terminal: ESC, BEL, DEL,
 * CR, or a C1 control (UTF-8 c2 80..c2 9f). */
int test_has_controls(const char *s, size_t n);
/* A fresh temporary directory for this test run (created once). */
const char *test_tmpdir(void);

#endif
