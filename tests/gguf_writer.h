/* gguf_writer.h - a tiny GGUF writer for the tests (little-endian GGUF
 * v2/v3 as in ggml's docs/gguf.md) and one complete file built with it.
 * It writes exactly what it is told, counts and lengths included, so tests
 * also build malformed files with it. Test-only; single-threaded.
 */
#ifndef SEKV_TESTS_GGUF_WRITER_H
#define SEKV_TESTS_GGUF_WRITER_H

#include "engine/gguf/gguf.h"

#include <stddef.h>
#include <stdint.h>

/* A growing byte buffer; start from {0}, free p when done. After a failed
 * allocation oom is set and further writes are dropped. */
struct gw_buf {
	uint8_t *p;     /* [cap] bytes, the file is p[0..n) */
	size_t n, cap;
	int oom;
};

/* Appends n raw bytes / one little-endian integer. */
void gw_bytes(struct gw_buf *b, const void *src, size_t n);
void gw_u8(struct gw_buf *b, uint8_t v);
void gw_u32(struct gw_buf *b, uint32_t v);
void gw_u64(struct gw_buf *b, uint64_t v);
/* A GGUF string: u64 length, then the bytes (no NUL). */
void gw_str(struct gw_buf *b, const char *s);
/* Magic "GGUF", version, tensor count, key/value count, as given. */
void gw_header(struct gw_buf *b, uint32_t version, uint64_t n_tensor, uint64_t n_kv);
/* A key, its type t, and size bytes of raw scalar payload from v. */
void gw_kv(struct gw_buf *b, const char *key, enum gguf_vtype t, const void *v,
	   size_t size);
void gw_kv_u32(struct gw_buf *b, const char *key, uint32_t v);
void gw_kv_str(struct gw_buf *b, const char *key, const char *s);
/* A key of type array: element type et and count n; the caller appends
 * the elements. */
void gw_arr_head(struct gw_buf *b, const char *key, enum gguf_vtype et, uint64_t n);
/* One tensor info: name, n_dims, ne[0..n_dims), type, offset. */
void gw_tensor(struct gw_buf *b, const char *name, uint32_t n_dims,
	       const uint64_t *ne, uint32_t type, uint64_t offset);
/* Zero bytes up to a multiple of align. */
void gw_pad(struct gw_buf *b, size_t align);
/* Writes b->p[0..n) to path; 0 or -1. */
int gw_write_file(const char *path, const struct gw_buf *b);
/* "<test tmpdir>/name" into buf[0..n); returns buf. */
char *gw_tmp_path(char *buf, size_t n, const char *name);

/* ---- the full file: every metadata type, 20 keys, 3 tensors ---------- */

#define GW_FULL_ALIGN 64
#define GW_FULL_N_STR 1000 /* elements of the long string array "a.str" */

/* Element i of the long string array: "tokI", empty for every tenth. */
void gw_full_tok_name(char *buf, size_t n, int i);
/* Appends the full file of the given version to b. Tensor payloads:
 * a.f32 [4,3] F32 = 0..11; b.q8 [64,2] Q8_0 bytes i*7; c.q4k [256] Q4_K
 * bytes 255-i. Each at an offset aligned to GW_FULL_ALIGN, the last one
 * ending exactly at the end of the file. */
void gw_build_full(struct gw_buf *b, uint32_t version);

#endif
