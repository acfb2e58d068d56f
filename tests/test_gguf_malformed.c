/* test_gguf_malformed.c - the GGUF reader against malformed files: every
 * truncation, bad header fields, huge lengths and counts, nested arrays past
 * the depth limit, overflowing shapes and offsets, missing and odd files,
 * and random corruption. Each must fail cleanly with a message naming the
 * file; none may read outside the buffer (run under make asan).
 * Files are built with tests/gguf_writer.c.
 */
#include "tests/test.h"
#include "tests/gguf_writer.h"

#include "engine/base/err.h"
#include "engine/gguf/gguf.h"
#include "engine/quant/quant.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Opens a copy of b->p[0..n) in an exactly-sized heap buffer, so that any
 * read past the end is caught by ASan builds. */
static int open_copy(struct gguf **g, const struct gw_buf *b, size_t n,
		     const char *name, char *err, size_t errlen)
{
	void *copy = malloc(n ? n : 1);
	int rc;

	if (!copy)
		return SEKV_ENOMEM;
	memcpy(copy, b->p, n);
	rc = gguf_open_buffer(g, copy, n, name, err, errlen);
	if (rc == 0)
		gguf_close(*g);
	*g = NULL;
	free(copy);
	return rc;
}

/* Every strict prefix of a valid file must fail cleanly. */
static void gguf_every_truncation_fails(struct test_ctx *t)
{
	struct gw_buf b = {0};
	struct gguf *g = NULL;
	char err[512];

	gw_build_full(&b, 3);
	T_CHECK(t, !b.oom);
	for (size_t n = 0; n < b.n; n++) {
		int rc = open_copy(&g, &b, n, "cut.gguf", err, sizeof err);
		if (rc != SEKV_EFORMAT) {
			free(b.p);
			T_CHECKF(t, 0, "prefix of %zu/%zu bytes: rc %d", n, b.n, rc);
		}
	}
	/* sanity: the whole file opens */
	int rc = open_copy(&g, &b, b.n, "whole.gguf", err, sizeof err);
	free(b.p);
	T_CHECKF(t, rc == 0, "%s", err);
}

/* Opens b and requires rc `want` and every string in `needles` (NULL ended)
 * in the message. Frees b. */
static void expect_fail(struct test_ctx *t, struct gw_buf *b, int want, const char *what,
			const char *n1, const char *n2)
{
	struct gguf *g = NULL;
	char err[512] = "";
	int rc;

	if (b->oom) {
		free(b->p);
		T_FAIL(t, "%s: writer out of memory", what);
		return;
	}
	rc = open_copy(&g, b, b->n, "bad.gguf", err, sizeof err);
	free(b->p);
	memset(b, 0, sizeof *b);
	if (rc != want)
		T_FAIL(t, "%s: rc %d (%s), want %d", what, rc, err, want);
	else if (!strstr(err, "gguf: bad.gguf: ") || (n1 && !strstr(err, n1)) || (n2 && !strstr(err, n2)))
		T_FAIL(t, "%s: message \"%s\"", what, err);
}

static void gguf_bad_header_fails(struct test_ctx *t)
{
	struct gw_buf b = {0};

	gw_header(&b, 3, 0, 0);
	memcpy(b.p, "GGUG", 4);
	expect_fail(t, &b, SEKV_EFORMAT, "bad magic", "magic", NULL);
	gw_header(&b, 1, 0, 0);
	expect_fail(t, &b, SEKV_EFORMAT, "version 1", "version", "1");
	gw_header(&b, 4, 0, 0);
	expect_fail(t, &b, SEKV_EFORMAT, "version 4", "version", NULL);
	gw_header(&b, 0x03000000u, 0, 0);
	expect_fail(t, &b, SEKV_EFORMAT, "big-endian", "version", NULL);
	gw_header(&b, 3, 0, UINT64_MAX);
	expect_fail(t, &b, SEKV_EFORMAT, "huge kv count", "metadata count", NULL);
	gw_header(&b, 3, 1ull << 60, 0);
	expect_fail(t, &b, SEKV_EFORMAT, "huge tensor count", "tensor count", NULL);
}

static void gguf_bad_metadata_fails(struct test_ctx *t)
{
	struct gw_buf b = {0};
	uint32_t v = 1;

	/* key length 2^63 */
	gw_header(&b, 3, 0, 1);
	gw_u64(&b, 1ull << 63);
	gw_bytes(&b, "abcdefgh", 8);
	expect_fail(t, &b, SEKV_EFORMAT, "huge key length", "key #0", "string length");
	/* string value length UINT64_MAX */
	gw_header(&b, 3, 0, 1);
	gw_str(&b, "s");
	gw_u32(&b, GGUF_STRING);
	gw_u64(&b, UINT64_MAX);
	gw_bytes(&b, "xyz", 3);
	expect_fail(t, &b, SEKV_EFORMAT, "huge string length", "key 's'", "string length");
	/* array count whose byte size wraps: (2^62 + 1) * 4 == 4 mod 2^64 */
	gw_header(&b, 3, 0, 1);
	gw_arr_head(&b, "arr", GGUF_U32, (1ull << 62) + 1);
	gw_u32(&b, 5);
	expect_fail(t, &b, SEKV_EFORMAT, "wrapping array count", "key 'arr'", "array count");
	/* string array count beyond the file */
	gw_header(&b, 3, 0, 1);
	gw_arr_head(&b, "sarr", GGUF_STRING, 1ull << 40);
	gw_str(&b, "a");
	expect_fail(t, &b, SEKV_EFORMAT, "huge string array", "key 'sarr'", "array count");
	/* string inside an array longer than the file */
	gw_header(&b, 3, 0, 1);
	gw_arr_head(&b, "sarr2", GGUF_STRING, 2);
	gw_str(&b, "ok");
	gw_u64(&b, 1000);
	gw_bytes(&b, "short", 5);
	expect_fail(t, &b, SEKV_EFORMAT, "array string past EOF", "key 'sarr2'", "string length");
	/* unknown value type, unknown element type */
	gw_header(&b, 3, 0, 1);
	gw_kv(&b, "bad", (enum gguf_vtype)13, &v, 4);
	expect_fail(t, &b, SEKV_EFORMAT, "value type 13", "key 'bad'", "type 13");
	gw_header(&b, 3, 0, 1);
	gw_arr_head(&b, "bad2", (enum gguf_vtype)99, 1);
	gw_u32(&b, 0);
	expect_fail(t, &b, SEKV_EFORMAT, "element type 99", "key 'bad2'", "99");
	/* duplicate key */
	gw_header(&b, 3, 0, 2);
	gw_kv_u32(&b, "dup", 1);
	gw_kv_u32(&b, "dup", 2);
	expect_fail(t, &b, SEKV_EFORMAT, "duplicate key", "key 'dup'", "duplicate");
	/* general.alignment: wrong type, zero, not a power of two */
	gw_header(&b, 3, 0, 1);
	gw_kv(&b, "general.alignment", GGUF_U64, "\x20\0\0\0\0\0\0\0", 8);
	expect_fail(t, &b, SEKV_EFORMAT, "alignment u64", "general.alignment", "u32");
	gw_header(&b, 3, 0, 1);
	gw_kv_u32(&b, "general.alignment", 0);
	expect_fail(t, &b, SEKV_EFORMAT, "alignment 0", "general.alignment", NULL);
	gw_header(&b, 3, 0, 1);
	gw_kv_u32(&b, "general.alignment", 48);
	expect_fail(t, &b, SEKV_EFORMAT, "alignment 48", "general.alignment", "power of two");
}

/* Nested arrays are accepted and walked up to a depth limit; deeper
 * nesting, or a nested count beyond the file, is a format error. */
static void gguf_nested_arrays(struct test_ctx *t)
{
	struct gw_buf b = {0};
	struct gguf *g = NULL;
	char err[512];
	int rc;

	/* depth 3: [[["a"]]] */
	gw_header(&b, 3, 0, 1);
	gw_arr_head(&b, "n3", GGUF_ARRAY, 1);
	gw_u32(&b, GGUF_ARRAY), gw_u64(&b, 1);
	gw_u32(&b, GGUF_STRING), gw_u64(&b, 1);
	gw_str(&b, "a");
	T_CHECK(t, !b.oom);
	rc = gguf_open_buffer(&g, b.p, b.n, "nest.gguf", err, sizeof err);
	if (rc == 0) {
		const struct gguf_kv *kv = gguf_find_kv(g, "n3");
		rc = !kv || kv->arr_type != GGUF_ARRAY || kv->arr_n != 1 || kv->nbytes != 12 + 12 + 9;
		gguf_close(g);
	}
	free(b.p);
	memset(&b, 0, sizeof b);
	T_CHECKF(t, rc == 0, "depth 3: %d %s", rc, err);

	/* depth 9 */
	gw_header(&b, 3, 0, 1);
	gw_arr_head(&b, "deep", GGUF_ARRAY, 1);
	for (int i = 0; i < 8; i++)
		gw_u32(&b, GGUF_ARRAY), gw_u64(&b, 1);
	gw_u32(&b, GGUF_U8), gw_u64(&b, 1), gw_u8(&b, 0);
	expect_fail(t, &b, SEKV_EFORMAT, "depth 9", "key 'deep'", "nested");
	/* inner count beyond the file */
	gw_header(&b, 3, 0, 1);
	gw_arr_head(&b, "inner", GGUF_ARRAY, 1);
	gw_u32(&b, GGUF_U64), gw_u64(&b, 1ull << 61);
	gw_u64(&b, 0);
	expect_fail(t, &b, SEKV_EFORMAT, "inner count", "key 'inner'", "array count");
	/* outer count beyond the file */
	gw_header(&b, 3, 0, 1);
	gw_arr_head(&b, "outer", GGUF_ARRAY, 1ull << 50);
	gw_u32(&b, GGUF_U8), gw_u64(&b, 0);
	expect_fail(t, &b, SEKV_EFORMAT, "outer count", "key 'outer'", "array count");
}

/* One tensor with the given shape/type/offset and `data` bytes of data. */
static void build_one_tensor(struct gw_buf *b, const char *name, uint32_t n_dims,
			     const uint64_t *ne, uint32_t type, uint64_t offset, size_t data)
{
	gw_header(b, 3, 1, 0);
	gw_tensor(b, name, n_dims, ne, type, offset);
	gw_pad(b, 32);
	for (size_t i = 0; i < data; i++)
		gw_u8(b, 0);
}

static void gguf_bad_tensors_fail(struct test_ctx *t)
{
	struct gw_buf b = {0};
	const uint64_t ne4[4] = {4, 1, 1, 1}, ne5[5] = {4, 1, 1, 1, 1};
	const uint64_t ne_ok[2] = {4, 2};

	/* the control: fits exactly */
	build_one_tensor(&b, "w", 2, ne_ok, QT_F32, 0, 32);
	{
		struct gguf *g = NULL;
		char err[512];
		int rc = open_copy(&g, &b, b.n, "ok.gguf", err, sizeof err);
		free(b.p);
		memset(&b, 0, sizeof b);
		T_CHECKF(t, rc == 0, "control: %s", err);
	}
	build_one_tensor(&b, "w", 2, ne_ok, QT_F32, 0, 31);
	expect_fail(t, &b, SEKV_EFORMAT, "one byte short", "tensor 'w'", "data extends past end of file");
	build_one_tensor(&b, "w", 2, ne_ok, QT_F32, 64, 32);
	expect_fail(t, &b, SEKV_EFORMAT, "offset past EOF", "tensor 'w'", "past end of file");
	build_one_tensor(&b, "w", 2, ne_ok, QT_F32, UINT64_MAX - 31, 32);
	expect_fail(t, &b, SEKV_EFORMAT, "offset + nbytes wraps", "tensor 'w'", NULL);
	build_one_tensor(&b, "w", 2, ne_ok, QT_F32, 8, 64);
	expect_fail(t, &b, SEKV_EFORMAT, "unaligned offset", "tensor 'w'", "alignment");
	build_one_tensor(&b, "w", 5, ne5, QT_F32, 0, 16);
	expect_fail(t, &b, SEKV_EFORMAT, "n_dims 5", "tensor 'w'", "n_dims 5");
	build_one_tensor(&b, "w", 4, ne4, 4, 0, 16);
	expect_fail(t, &b, SEKV_EUNSUP, "type 4", "tensor 'w'", "type 4");
	build_one_tensor(&b, "w", 4, ne4, 1000, 0, 16);
	expect_fail(t, &b, SEKV_EUNSUP, "type 1000", "tensor 'w'", "type 1000");
	{
		const uint64_t ne[1] = {33};
		build_one_tensor(&b, "w", 1, ne, QT_Q8_0, 0, 64);
		expect_fail(t, &b, SEKV_EFORMAT, "row not a block multiple", "tensor 'w'", "multiple");
	}
	{	/* element count 2^64 wraps to 0 */
		const uint64_t ne[4] = {1ull << 32, 1ull << 32, 1, 1};
		build_one_tensor(&b, "w", 4, ne, QT_F32, 0, 16);
		expect_fail(t, &b, SEKV_EFORMAT, "ne product 2^64", "tensor 'w'", "overflow");
	}
	{	/* ne[0] beyond int64 */
		const uint64_t ne[1] = {1ull << 63};
		build_one_tensor(&b, "w", 1, ne, QT_F32, 0, 16);
		expect_fail(t, &b, SEKV_EFORMAT, "ne[0] 2^63", "tensor 'w'", "overflow");
	}
	{	/* fits int64 as elements, but the byte count wraps (2^62 * 4) */
		const uint64_t ne[2] = {1ull << 31, 1ull << 31};
		build_one_tensor(&b, "w", 2, ne, QT_F32, 0, 16);
		expect_fail(t, &b, SEKV_EFORMAT, "nbytes 2^64", "tensor 'w'", "past end of file");
	}
	{	/* a zero dimension must not hide an overflow in the others */
		const uint64_t ne[4] = {4, 0, 1ull << 62, 1ull << 62};
		build_one_tensor(&b, "w", 4, ne, QT_F32, 0, 16);
		expect_fail(t, &b, SEKV_EFORMAT, "0 * 2^124", "tensor 'w'", "overflow");
	}
	{	/* one row of 2^62 F32 elements: 2^64 bytes wraps to 0 */
		const uint64_t ne[1] = {1ull << 62};
		build_one_tensor(&b, "w", 1, ne, QT_F32, 0, 64);
		expect_fail(t, &b, SEKV_EFORMAT, "row bytes wrap", "tensor 'w'", "past end of file");
	}
	{	/* Q8_0: 2^57 blocks of 34 bytes times 2^3 rows wraps */
		const uint64_t ne[2] = {32ull << 57, 8};
		build_one_tensor(&b, "w", 2, ne, QT_Q8_0, 0, 64);
		expect_fail(t, &b, SEKV_EFORMAT, "q8 bytes wrap", "tensor 'w'", NULL);
	}
	/* tensor name length beyond the file */
	gw_header(&b, 3, 1, 0);
	gw_u64(&b, UINT64_MAX - 3);
	gw_bytes(&b, "w\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 28);
	expect_fail(t, &b, SEKV_EFORMAT, "huge tensor name", "tensor #0", "string length");
	/* duplicate tensor names */
	gw_header(&b, 3, 2, 0);
	gw_tensor(&b, "w", 2, ne_ok, QT_F32, 0);
	gw_tensor(&b, "w", 2, ne_ok, QT_F32, 32);
	gw_pad(&b, 32);
	for (int i = 0; i < 64; i++)
		gw_u8(&b, 0);
	expect_fail(t, &b, SEKV_EFORMAT, "duplicate tensor", "tensor 'w'", "duplicate");
	/* data section start past EOF (header ends mid-padding) */
	gw_header(&b, 3, 1, 0);
	gw_tensor(&b, "w", 1, ne4, QT_F32, 0);
	expect_fail(t, &b, SEKV_EFORMAT, "no data section", "data section: starts at", NULL);
}

static void gguf_open_missing_and_odd_files(struct test_ctx *t)
{
	struct gguf *g = (struct gguf *)&g; /* non-NULL: a failed open must reset it */
	char path[512], err[512];
	FILE *f;

	T_CHECK(t, gguf_open(&g, "/nonexistent/x.gguf", err, sizeof err) == SEKV_EIO);
	T_CHECK(t, g == NULL && strstr(err, "/nonexistent/x.gguf") && strstr(err, "No such file"));
	T_CHECK(t, gguf_open(&g, test_tmpdir(), err, sizeof err) == SEKV_EIO);
	T_CHECK(t, strstr(err, "not a regular file"));
	f = fopen(gw_tmp_path(path, sizeof path, "empty.gguf"), "wb");
	T_CHECK(t, f != NULL);
	fclose(f);
	T_CHECK(t, gguf_open(&g, path, err, sizeof err) == SEKV_EFORMAT);
	T_CHECK(t, strstr(err, "empty.gguf") != NULL);
	f = fopen(gw_tmp_path(path, sizeof path, "junk.gguf"), "wb");
	T_CHECK(t, f != NULL);
	fputs("this is not a gguf file at all, just text\n", f);
	fclose(f);
	T_CHECK(t, gguf_open(&g, path, err, sizeof err) == SEKV_EFORMAT);
	T_CHECK(t, strstr(err, "junk.gguf: magic") != NULL);
	gguf_close(NULL);
	/* a NULL error buffer is allowed */
	T_CHECK(t, gguf_open(&g, path, NULL, 0) == SEKV_EFORMAT);
}

/* Random corruption of a valid file: any outcome but a crash (run under
 * `make asan` to catch reads outside the buffer); successful opens must
 * still keep every tensor inside the buffer. */
static void gguf_random_corruption_never_crashes(struct test_ctx *t)
{
	struct gw_buf b = {0};
	uint64_t s = 0x9e3779b97f4a7c15ull;
	char err[512];
	int n_ok = 0;

	gw_build_full(&b, 3);
	T_CHECK(t, !b.oom);
	uint8_t *copy = malloc(b.n);
	if (!copy) {
		free(b.p);
		T_CHECK(t, 0);
	}
	for (int it = 0; it < 3000 && !t->failed; it++) {
		struct gguf *g = NULL;
		memcpy(copy, b.p, b.n);
		for (int k = 0; k < 1 + it % 4; k++) {
			s ^= s << 13, s ^= s >> 7, s ^= s << 17;
			size_t at = (size_t)(s % b.n);
			/* favour the header and tables, where lengths live */
			if (k & 1)
				at %= 1024;
			copy[at] = (it & 8) ? (uint8_t)(s >> 32) : (uint8_t)(copy[at] ^ (1u << (s >> 61)));
		}
		if (gguf_open_buffer(&g, copy, b.n, "fuzz.gguf", err, sizeof err) == 0) {
			n_ok++;
			for (uint64_t i = 0; i < g->n_tensor; i++) {
				const struct gguf_tensor *tn = &g->tensor[i];
				const uint8_t *p = tn->data;
				if (p < copy || p + tn->nbytes > copy + b.n)
					T_FAIL(t, "iteration %d: tensor %" PRIu64 " outside buffer", it, i);
			}
			for (uint64_t i = 0; i < g->n_kv; i++) {
				struct gguf_str sv;
				const struct gguf_kv *kv = &g->kv[i];
				if (kv->type == GGUF_ARRAY && kv->arr_type == GGUF_STRING && kv->arr_n &&
				    (gguf_arr_str(g, kv, kv->arr_n - 1, &sv) ||
				     (const uint8_t *)sv.ptr + sv.len > copy + b.n))
					T_FAIL(t, "iteration %d: string array outside buffer", it);
			}
			FILE *f = fopen("/dev/null", "w");
			if (f) {
				gguf_print(g, f);
				fclose(f);
			}
			gguf_close(g);
		}
	}
	free(copy);
	free(b.p);
	T_CHECKF(t, n_ok > 0 && n_ok < 3000, "%d of 3000 corrupted files opened", n_ok);
}

const struct test_case test_gguf_malformed[] = {
	{"gguf_every_truncation_fails", gguf_every_truncation_fails},
	{"gguf_bad_header_fails", gguf_bad_header_fails},
	{"gguf_bad_metadata_fails", gguf_bad_metadata_fails},
	{"gguf_nested_arrays", gguf_nested_arrays},
	{"gguf_bad_tensors_fail", gguf_bad_tensors_fail},
	{"gguf_open_missing_and_odd_files", gguf_open_missing_and_odd_files},
	{"gguf_random_corruption_never_crashes", gguf_random_corruption_never_crashes},
	{NULL, NULL},
};
