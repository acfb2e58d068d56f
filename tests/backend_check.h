/* backend_check.h - the backend table's checks (tests/test_backend.c runs
 * them over every backend): the default model's shapes, the helpers they
 * share, and the SeKV operations' checks (tests/backend_check_sekv.c).
 */
#ifndef SEKV_TESTS_BACKEND_CHECK_H
#define SEKV_TESTS_BACKEND_CHECK_H

#include "tests/test.h"
#include "engine/backend/backend.h"
#include "engine/gguf/gguf.h"

#include <stddef.h>

#define E 640      /* n_embd */
#define NH 4       /* n_head */
#define NKV 1      /* n_head_kv */
#define D 256      /* d_head */
#define FF 2048    /* n_ff */
#define WIN 512    /* sliding window */

typedef void (*check_fn)(struct test_ctx *t, struct backend *b, struct gguf *g);

/* A backend by name (NULL and a failure recorded when it cannot open). */
struct backend *bk_open(struct test_ctx *t, const char *name, int n_threads);
/* A workspace for batches of n_batch, max_w weight elements, mix_rows SeKV
 * rows (NULL on failure). */
struct backend_ws *bk_ws_for(struct backend *b, int n_batch, size_t max_w, int mix_rows);
/* n fixed-seed random floats (malloc'ed; NULL when out of memory). */
float *bk_randv(size_t n, unsigned long long seed);
/* Worst |a - b| / (|b| + floor) over n. */
double bk_max_rel(const float *a, const double *b, size_t n, double floor);

/* SeKV operations (backend_check_sekv.c), each against double precision. */
void check_attention_mix(struct test_ctx *t, struct backend *b, struct gguf *g);
void check_score_i8(struct test_ctx *t, struct backend *b, struct gguf *g);
void check_score_lowrank(struct test_ctx *t, struct backend *b, struct gguf *g);
void check_rows_i8(struct test_ctx *t, struct backend *b, struct gguf *g);
void check_rows_k8v4(struct test_ctx *t, struct backend *b, struct gguf *g);
void check_reconstruct(struct test_ctx *t, struct backend *b, struct gguf *g);
void check_reconstruct_wide_rank(struct test_ctx *t, struct backend *b, struct gguf *g);
void check_svd(struct test_ctx *t, struct backend *b, struct gguf *g);
void check_pca(struct test_ctx *t, struct backend *b, struct gguf *g);

#endif
