/* store_fixtures.h - helpers shared by the store tests (tests/test_store_*.c):
 * deterministic random bytes, fresh database paths, synthetic SeKV memories
 * compared bit for bit, whole documents kept in memory (struct fixture) to
 * store into a library file and check against it, and raw SQLite access for
 * tests that reach under store/. Test-only; single-threaded.
 */
#ifndef SEKV_TESTS_STORE_FIXTURES_H
#define SEKV_TESTS_STORE_FIXTURES_H

#include "engine/sekv/sekv.h"
#include "store/store.h"

#include <stddef.h>
#include <stdint.h>

/* Everything one document holds, kept in memory for comparisons. */
struct fixture {
	struct store_doc doc;
	int64_t n_tok;
	int32_t *tokens;     /* [n_tok] */
	float *surprisal;    /* [n_tok] */
	uint16_t **k, **v;   /* [n_layer_global] -> [n_tok][n_head_kv][d_h] fp16 */
	int32_t *swa_id;     /* [n_layer_swa] layer ids, or NULL before fixture_swa */
	uint16_t **swa_k, **swa_v; /* [n_layer_swa] -> [n_row][n_head_kv][d_h] fp16 */
	int n_row;
};

/* xorshift64 step of *s (never 0 for a nonzero seed); returns the new state. */
uint64_t fixture_rnd(uint64_t *s);
/* A pseudo-random integer in [lo, hi], inclusive. */
int fixture_rnd_int(uint64_t *s, int lo, int hi);
/* n pseudo-random bytes into p. */
void fixture_rnd_fill(uint64_t *s, void *p, size_t n);

/* A fresh database path "<tmpdir>/<name>.db" (the file and its -wal,
 * -shm and -reserve removed). Returns one of 4 static buffers, reused in turn. */
const char *fixture_db_path(const char *name);

/* A random memory of the given shape: spans from position 4 to a random
 * recent window, random anchors between them, exact = everything outside
 * compressed spans, ranks in 0..min(len, d_h, r_max), factors' u and v fp16
 * for odd seeds and fp32 for even ones, every array random bytes (NaN
 * payloads included: comparisons are bitwise). NULL when allocation fails;
 * the caller frees with sekv_mem_free. */
struct sekv_mem *fixture_synth_mem(uint64_t seed, int n_tok, int n_layer, int n_head,
				    int n_head_kv, int d_h, int r_max, int max_span);
/* 0 when a and b hold the same bits everywhere, else 1 and why. */
int fixture_mem_cmp(const struct sekv_mem *a, const struct sekv_mem *b, char *why,
		    size_t whylen);

/* Creates a document in s and appends n_tok random tokens (global KV
 * included) in chunks of 1..chunk tokens. Returns 0 or the failing code;
 * f is filled either way and freed with fixture_free. */
int fixture_make(struct store *s, struct fixture *f, uint64_t seed, const char *title,
		 int n_layer_global, int n_layer_swa, int n_head_kv, int d_h,
		 int n_tok, int chunk, char *err, size_t errlen);
/* Stores n_row random SWA rows for every SWA layer of f (replacing f's). */
int fixture_swa(struct store *s, struct fixture *f, uint64_t seed, int n_row,
		char *err, size_t errlen);
/* 0 when s holds exactly f's tokens, full KV and SWA rows, else 1 and why. */
int fixture_check(struct store *s, const struct fixture *f, char *why, size_t whylen);
/* A document sized for m (2 SWA layers, up to 16 rows) and m stored into it
 * with budget. Returns 0 or the failing code. */
int fixture_with_mem(struct store *s, struct fixture *f, const struct sekv_mem *m,
		     uint64_t seed, double budget, char *err, size_t errlen);
/* Frees what f holds and zeroes it. */
void fixture_free(struct fixture *f);

/* Runs sql on the file at path through its own connection; returns the
 * SQLite code. */
int fixture_raw_exec(const char *path, const char *sql);
/* Rewrites every mem_layer k_bar, v_bar blob of the file at path from fp16
 * to fp32, as libraries before schema 6 stored them. SQLite code. */
int fixture_raw_bars_to_f32(const char *path);
/* The first column of the first row of sql on the file at path, or -1. */
int64_t fixture_raw_int(const char *path, const char *sql);

#endif
