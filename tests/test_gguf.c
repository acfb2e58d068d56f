/* test_gguf.c - the GGUF reader against files written here (every metadata
 * type, arrays, nested arrays, tensors of several types, custom alignment),
 * against malformed files (every truncation, huge lengths and counts,
 * overflowing shapes and offsets, bad header fields, random corruption) and
 * against the real default model, which must be present.
 * The writer below emits GGUF v2/v3 little-endian as in ggml's docs/gguf.md.
 */
#include "tests/test.h"

#include "engine/err.h"
#include "engine/gguf.h"
#include "engine/quant.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- a tiny GGUF writer ----------------------------------------------- */

struct wbuf {
	uint8_t *p;
	size_t n, cap;
	int oom;
};

static void w_bytes(struct wbuf *b, const void *src, size_t n)
{
	if (b->oom)
		return;
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->n + n)
			cap *= 2;
		uint8_t *p = realloc(b->p, cap);
		if (!p) {
			b->oom = 1;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, src, n);
	b->n += n;
}

static void w_u8(struct wbuf *b, uint8_t v) { w_bytes(b, &v, 1); }
static void w_u32(struct wbuf *b, uint32_t v) { w_bytes(b, &v, 4); }
static void w_u64(struct wbuf *b, uint64_t v) { w_bytes(b, &v, 8); }

static void w_str(struct wbuf *b, const char *s)
{
	w_u64(b, strlen(s));
	w_bytes(b, s, strlen(s));
}

static void w_header(struct wbuf *b, uint32_t version, uint64_t n_tensor, uint64_t n_kv)
{
	w_bytes(b, "GGUF", 4);
	w_u32(b, version);
	w_u64(b, n_tensor);
	w_u64(b, n_kv);
}

/* key + type + raw scalar payload of `size` bytes */
static void w_kv(struct wbuf *b, const char *key, enum gguf_vtype t, const void *v, size_t size)
{
	w_str(b, key);
	w_u32(b, t);
	w_bytes(b, v, size);
}

static void w_kv_u32(struct wbuf *b, const char *key, uint32_t v) { w_kv(b, key, GGUF_U32, &v, 4); }

static void w_kv_str(struct wbuf *b, const char *key, const char *s)
{
	w_str(b, key);
	w_u32(b, GGUF_STRING);
	w_str(b, s);
}

static void w_arr_head(struct wbuf *b, const char *key, enum gguf_vtype et, uint64_t n)
{
	w_str(b, key);
	w_u32(b, GGUF_ARRAY);
	w_u32(b, et);
	w_u64(b, n);
}

static void w_tensor(struct wbuf *b, const char *name, uint32_t n_dims,
		     const uint64_t *ne, uint32_t type, uint64_t offset)
{
	w_str(b, name);
	w_u32(b, n_dims);
	for (uint32_t d = 0; d < n_dims; d++)
		w_u64(b, ne[d]);
	w_u32(b, type);
	w_u64(b, offset);
}

static void w_pad(struct wbuf *b, size_t align)
{
	while (b->n % align)
		w_u8(b, 0);
}

static int write_file(const char *path, const struct wbuf *b)
{
	FILE *f = fopen(path, "wb");
	int ok = f && fwrite(b->p, 1, b->n, f) == b->n;
	if (f && fclose(f))
		ok = 0;
	return ok ? 0 : -1;
}

static char *tmp_path(char *buf, size_t n, const char *name)
{
	snprintf(buf, n, "%s/%s", test_tmpdir(), name);
	return buf;
}

/* Opens a copy of b->p[0..n) in an exactly-sized heap buffer, so that any
 * read past the end is caught by ASan builds. */
static int open_copy(struct gguf **g, const struct wbuf *b, size_t n,
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

/* ---- the full file ---------------------------------------------------- */

/* Element i of the long string array: "tokI", empty for every tenth. */
static void tok_name(char *buf, size_t n, int i)
{
	if (i % 10)
		snprintf(buf, n, "tok%d", i);
	else
		buf[0] = 0;
}

#define FULL_ALIGN 64
#define FULL_N_STR 1000 /* elements of the long string array */

/* Tensor payloads: a.f32 [4,3] F32 = 0..11; b.q8 [64,2] Q8_0 bytes i*7;
 * c.q4k [256] Q4_K bytes 255-i. Each at an offset aligned to FULL_ALIGN,
 * the last one ending exactly at the end of the file. */
static void build_full(struct wbuf *b, uint32_t version)
{
	uint8_t u8 = 200; int8_t i8 = -100; uint16_t u16 = 60000; int16_t i16 = -30000;
	uint32_t u32 = 4000000000u; int32_t i32 = -2000000000; float f32 = 3.25f;
	uint8_t bl = 1; uint64_t u64 = 0xfedcba9876543210ull; int64_t i64 = -5000000000ll;
	double f64 = -1.0 / 3.0;
	const uint64_t ne_a[2] = {4, 3}, ne_b[2] = {64, 2}, ne_c[1] = {256};
	char s[32];

	w_header(b, version, 3, 20);
	w_kv(b, "t.u8", GGUF_U8, &u8, 1);
	w_kv(b, "t.i8", GGUF_I8, &i8, 1);
	w_kv(b, "t.u16", GGUF_U16, &u16, 2);
	w_kv(b, "t.i16", GGUF_I16, &i16, 2);
	w_kv(b, "t.u32", GGUF_U32, &u32, 4);
	w_kv(b, "t.i32", GGUF_I32, &i32, 4);
	w_kv(b, "t.f32", GGUF_F32, &f32, 4);
	w_kv(b, "t.bool", GGUF_BOOL, &bl, 1);
	w_kv_str(b, "t.str", "hello, gguf");
	w_kv(b, "t.u64", GGUF_U64, &u64, 8);
	w_kv(b, "t.i64", GGUF_I64, &i64, 8);
	w_kv(b, "t.f64", GGUF_F64, &f64, 8);
	w_kv_str(b, "t.empty", "");
	w_kv_u32(b, "general.alignment", FULL_ALIGN);
	w_arr_head(b, "a.i32", GGUF_I32, 5);
	for (int32_t i = 0; i < 5; i++)
		w_u32(b, (uint32_t)(i * -3));
	w_arr_head(b, "a.f32", GGUF_F32, 3);
	for (int i = 0; i < 3; i++) {
		float v = 0.5f * (float)i;
		w_bytes(b, &v, 4);
	}
	w_arr_head(b, "a.bool", GGUF_BOOL, 2);
	w_u8(b, 0), w_u8(b, 1);
	w_arr_head(b, "a.str", GGUF_STRING, FULL_N_STR);
	for (int i = 0; i < FULL_N_STR; i++) {
		tok_name(s, sizeof s, i);
		w_str(b, s);
	}
	/* array of 2 arrays of u16 */
	w_arr_head(b, "a.nested", GGUF_ARRAY, 2);
	for (int i = 0; i < 2; i++) {
		w_u32(b, GGUF_U16), w_u64(b, 2);
		w_bytes(b, "\1\0\2\0", 4);
	}
	w_arr_head(b, "a.empty", GGUF_U64, 0);

	w_tensor(b, "a.f32", 2, ne_a, QT_F32, 0);
	w_tensor(b, "b.q8", 2, ne_b, QT_Q8_0, 64);
	w_tensor(b, "c.q4k", 1, ne_c, QT_Q4_K, 64 + 192);
	w_pad(b, FULL_ALIGN);
	for (int i = 0; i < 12; i++) {
		float v = (float)i;
		w_bytes(b, &v, 4);
	}
	w_pad(b, FULL_ALIGN);
	for (int i = 0; i < 136; i++)
		w_u8(b, (uint8_t)(i * 7));
	w_pad(b, FULL_ALIGN);
	for (int i = 0; i < 144; i++)
		w_u8(b, (uint8_t)(255 - i));
}

static void check_full(struct test_ctx *t, const struct gguf *g)
{
	uint32_t u; int64_t i; float f; int bo; double d;
	struct gguf_str s;
	const struct gguf_kv *kv;
	const struct gguf_tensor *tn;

	T_CHECK(t, g->n_kv == 20 && g->n_tensor == 3);
	T_CHECK(t, g->alignment == FULL_ALIGN && g->data_offset % FULL_ALIGN == 0);
	T_CHECK(t, gguf_get_u32(g, "t.u8", &u) == 0 && u == 200);
	T_CHECK(t, gguf_get_i64(g, "t.i8", &i) == 0 && i == -100);
	T_CHECK(t, gguf_get_u32(g, "t.u16", &u) == 0 && u == 60000);
	T_CHECK(t, gguf_get_i64(g, "t.i16", &i) == 0 && i == -30000);
	T_CHECK(t, gguf_get_u32(g, "t.u32", &u) == 0 && u == 4000000000u);
	T_CHECK(t, gguf_get_i64(g, "t.i32", &i) == 0 && i == -2000000000);
	T_CHECK(t, gguf_get_f32(g, "t.f32", &f) == 0 && f == 3.25f);
	T_CHECK(t, gguf_get_bool(g, "t.bool", &bo) == 0 && bo == 1);
	T_CHECK(t, gguf_get_str(g, "t.str", &s) == 0 && s.len == 11 && !memcmp(s.ptr, "hello, gguf", 11));
	T_CHECK(t, gguf_get_str(g, "t.empty", &s) == 0 && s.len == 0);
	T_CHECK(t, gguf_get_i64(g, "t.i64", &i) == 0 && i == -5000000000ll);
	T_CHECK(t, gguf_get_f32(g, "t.f64", &f) == 0 && f == (float)(-1.0 / 3.0));
	kv = gguf_find_kv(g, "t.u64");
	T_CHECK(t, kv && kv->type == GGUF_U64 && kv->nbytes == 8);
	uint64_t u64;
	memcpy(&u64, kv->data, 8);
	T_CHECK(t, u64 == 0xfedcba9876543210ull);
	kv = gguf_find_kv(g, "t.f64");
	memcpy(&d, kv->data, 8);
	T_CHECK(t, d == -1.0 / 3.0);

	/* conversions and refusals */
	T_CHECK(t, gguf_get_u32(g, "t.i32", &u) == SEKV_EFORMAT);   /* negative */
	T_CHECK(t, gguf_get_u32(g, "t.u64", &u) == SEKV_EFORMAT);   /* too big */
	T_CHECK(t, gguf_get_i64(g, "t.u64", &i) == SEKV_EFORMAT);   /* > INT64_MAX */
	T_CHECK(t, gguf_get_i64(g, "t.u32", &i) == 0 && i == 4000000000ll);
	T_CHECK(t, gguf_get_f32(g, "t.str", &f) == SEKV_EFORMAT);
	T_CHECK(t, gguf_get_str(g, "t.u8", &s) == SEKV_EFORMAT);
	T_CHECK(t, gguf_get_bool(g, "t.u8", &bo) == SEKV_EFORMAT);
	T_CHECK(t, gguf_get_u32(g, "a.i32", &u) == SEKV_EFORMAT);
	T_CHECK(t, gguf_get_u32(g, "t.missing", &u) == SEKV_ENOTFOUND);
	T_CHECK(t, gguf_get_str(g, "t.st", &s) == SEKV_ENOTFOUND);
	T_CHECK(t, gguf_find_kv(g, "t.u8x") == NULL && gguf_find_kv(g, "") == NULL);

	/* arrays */
	kv = gguf_find_kv(g, "a.i32");
	T_CHECK(t, kv && kv->type == GGUF_ARRAY && kv->arr_type == GGUF_I32 && kv->arr_n == 5);
	for (uint64_t k = 0; k < 5; k++)
		T_CHECK(t, gguf_arr_num(kv, k, &d) == 0 && d == -3.0 * (double)k);
	T_CHECK(t, gguf_arr_num(kv, 5, &d) == SEKV_EINVAL);
	T_CHECK(t, gguf_arr_str(g, kv, 0, &s) == SEKV_EFORMAT);
	kv = gguf_find_kv(g, "a.f32");
	T_CHECK(t, kv && gguf_arr_num(kv, 2, &d) == 0 && d == 1.0);
	kv = gguf_find_kv(g, "a.bool");
	T_CHECK(t, kv && gguf_arr_num(kv, 0, &d) == 0 && d == 0.0 && gguf_arr_num(kv, 1, &d) == 0 && d == 1.0);
	kv = gguf_find_kv(g, "a.str");
	T_CHECK(t, kv && kv->arr_type == GGUF_STRING && kv->arr_n == FULL_N_STR);
	for (int k = FULL_N_STR - 1; k >= 0; k--) {
		char want[32];
		tok_name(want, sizeof want, k);
		T_CHECKF(t, gguf_arr_str(g, kv, (uint64_t)k, &s) == 0 && s.len == strlen(want) &&
			 !memcmp(s.ptr, want, s.len), "a.str[%d]", k);
	}
	T_CHECK(t, gguf_arr_str(g, kv, FULL_N_STR, &s) == SEKV_EINVAL);
	T_CHECK(t, gguf_arr_num(kv, 0, &d) == SEKV_EFORMAT);
	kv = gguf_find_kv(g, "a.nested");
	T_CHECK(t, kv && kv->type == GGUF_ARRAY && kv->arr_type == GGUF_ARRAY && kv->arr_n == 2);
	T_CHECK(t, kv->nbytes == 2 * (12 + 4));
	T_CHECK(t, gguf_arr_num(kv, 0, &d) == SEKV_EFORMAT && gguf_arr_str(g, kv, 0, &s) == SEKV_EFORMAT);
	kv = gguf_find_kv(g, "a.empty");
	T_CHECK(t, kv && kv->arr_n == 0 && gguf_arr_num(kv, 0, &d) == SEKV_EINVAL);
	T_CHECK(t, gguf_arr_num(gguf_find_kv(g, "t.u8"), 0, &d) == SEKV_EINVAL);

	/* tensors */
	tn = gguf_find_tensor(g, "a.f32");
	T_CHECK(t, tn && tn->n_dims == 2 && tn->ne[0] == 4 && tn->ne[1] == 3 && tn->ne[2] == 1 && tn->ne[3] == 1);
	T_CHECK(t, tn->type == QT_F32 && tn->nbytes == 48 && tn->offset == 0);
	T_CHECK(t, (const uint8_t *)tn->data == g->map + g->data_offset);
	for (int k = 0; k < 12; k++) {
		float v;
		memcpy(&v, (const uint8_t *)tn->data + 4 * k, 4);
		T_CHECK(t, v == (float)k);
	}
	tn = gguf_find_tensor(g, "b.q8");
	T_CHECK(t, tn && tn->type == QT_Q8_0 && tn->nbytes == 136 && tn->offset == 64);
	for (int k = 0; k < 136; k++)
		T_CHECK(t, ((const uint8_t *)tn->data)[k] == (uint8_t)(k * 7));
	tn = gguf_find_tensor(g, "c.q4k");
	T_CHECK(t, tn && tn->type == QT_Q4_K && tn->n_dims == 1 && tn->nbytes == 144);
	T_CHECK(t, ((const uint8_t *)tn->data)[143] == 255 - 143);
	T_CHECK(t, (const uint8_t *)tn->data + tn->nbytes == g->map + g->size);
	T_CHECK(t, gguf_find_tensor(g, "c.q4") == NULL && gguf_find_tensor(g, "") == NULL);
}

static void gguf_roundtrip_all_types_file(struct test_ctx *t)
{
	struct wbuf b = {0};
	struct gguf *g = NULL;
	char path[512], err[512];
	int rc;

	build_full(&b, 3);
	T_CHECK(t, !b.oom);
	rc = write_file(tmp_path(path, sizeof path, "full.gguf"), &b);
	free(b.p);
	T_CHECKF(t, rc == 0, "cannot write %s", path);
	rc = gguf_open(&g, path, err, sizeof err);
	T_CHECKF(t, rc == 0, "gguf_open: %s", err);
	T_CHECK(t, g->version == 3 && !strcmp(g->path, path));
	check_full(t, g);
	gguf_close(g);
}

static void gguf_roundtrip_v2_buffer(struct test_ctx *t)
{
	struct wbuf b = {0};
	struct gguf *g = NULL;
	char err[512];
	int rc;

	build_full(&b, 2);
	T_CHECK(t, !b.oom);
	rc = gguf_open_buffer(&g, b.p, b.n, "v2.gguf", err, sizeof err);
	if (rc) {
		free(b.p);
		T_CHECKF(t, 0, "gguf_open_buffer: %s", err);
	}
	T_CHECK(t, g->version == 2);
	check_full(t, g);
	gguf_close(g);
	free(b.p);
}

/* A file with metadata only: no tensors, no padding after the keys. */
static void gguf_metadata_only_file(struct test_ctx *t)
{
	struct wbuf b = {0};
	struct gguf *g = NULL;
	char err[512];
	uint32_t u;
	int rc;

	w_header(&b, 3, 0, 1);
	w_kv_u32(&b, "x", 7);
	T_CHECK(t, !b.oom);
	rc = gguf_open_buffer(&g, b.p, b.n, "meta.gguf", err, sizeof err);
	if (rc == 0) {
		rc = gguf_get_u32(g, "x", &u) || u != 7 || g->n_tensor != 0 || g->alignment != 32;
		gguf_close(g);
	}
	free(b.p);
	T_CHECKF(t, rc == 0, "%s", err);
}

/* ---- gguf_print ------------------------------------------------------- */

static void gguf_print_abbreviates(struct test_ctx *t)
{
	struct wbuf b = {0};
	struct gguf *g = NULL;
	char err[512], *out = NULL;
	size_t n_out = 0;
	FILE *f;
	int rc;

	build_full(&b, 3);
	rc = gguf_open_buffer(&g, b.p, b.n, "print.gguf", err, sizeof err);
	if (rc) {
		free(b.p);
		T_CHECKF(t, 0, "%s", err);
	}
	f = open_memstream(&out, &n_out);
	if (f) {
		gguf_print(g, f);
		fclose(f);
	}
	gguf_close(g);
	free(b.p);
	T_CHECK(t, out != NULL);
	rc = strstr(out, "t.str: string = \"hello, gguf\"") && strstr(out, "t.u64: u64 = 18364758544493064720") &&
	     strstr(out, "a.str: string[1000]") && strstr(out, "992 more") &&
	     !strstr(out, "tok999") && strstr(out, "t.i8: i8 = -100") &&
	     strstr(out, "b.q8") && strstr(out, "[64, 2]") && strstr(out, "Q8_0") &&
	     strstr(out, "136 bytes") && strstr(out, "Q4_K") && strstr(out, "t.bool: bool = true");
	if (!rc)
		T_FAIL(t, "unexpected dump:\n%s", out);
	free(out);
}

/* ---- malformed files -------------------------------------------------- */

/* Every strict prefix of a valid file must fail cleanly. */
static void gguf_every_truncation_fails(struct test_ctx *t)
{
	struct wbuf b = {0};
	struct gguf *g = NULL;
	char err[512];

	build_full(&b, 3);
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
static void expect_fail(struct test_ctx *t, struct wbuf *b, int want, const char *what,
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
	struct wbuf b = {0};

	w_header(&b, 3, 0, 0);
	memcpy(b.p, "GGUG", 4);
	expect_fail(t, &b, SEKV_EFORMAT, "bad magic", "magic", NULL);
	w_header(&b, 1, 0, 0);
	expect_fail(t, &b, SEKV_EFORMAT, "version 1", "version", "1");
	w_header(&b, 4, 0, 0);
	expect_fail(t, &b, SEKV_EFORMAT, "version 4", "version", NULL);
	w_header(&b, 0x03000000u, 0, 0);
	expect_fail(t, &b, SEKV_EFORMAT, "big-endian", "version", NULL);
	w_header(&b, 3, 0, UINT64_MAX);
	expect_fail(t, &b, SEKV_EFORMAT, "huge kv count", "metadata count", NULL);
	w_header(&b, 3, 1ull << 60, 0);
	expect_fail(t, &b, SEKV_EFORMAT, "huge tensor count", "tensor count", NULL);
}

static void gguf_bad_metadata_fails(struct test_ctx *t)
{
	struct wbuf b = {0};
	uint32_t v = 1;

	/* key length 2^63 */
	w_header(&b, 3, 0, 1);
	w_u64(&b, 1ull << 63);
	w_bytes(&b, "abcdefgh", 8);
	expect_fail(t, &b, SEKV_EFORMAT, "huge key length", "key #0", "string length");
	/* string value length UINT64_MAX */
	w_header(&b, 3, 0, 1);
	w_str(&b, "s");
	w_u32(&b, GGUF_STRING);
	w_u64(&b, UINT64_MAX);
	w_bytes(&b, "xyz", 3);
	expect_fail(t, &b, SEKV_EFORMAT, "huge string length", "key 's'", "string length");
	/* array count whose byte size wraps: (2^62 + 1) * 4 == 4 mod 2^64 */
	w_header(&b, 3, 0, 1);
	w_arr_head(&b, "arr", GGUF_U32, (1ull << 62) + 1);
	w_u32(&b, 5);
	expect_fail(t, &b, SEKV_EFORMAT, "wrapping array count", "key 'arr'", "array count");
	/* string array count beyond the file */
	w_header(&b, 3, 0, 1);
	w_arr_head(&b, "sarr", GGUF_STRING, 1ull << 40);
	w_str(&b, "a");
	expect_fail(t, &b, SEKV_EFORMAT, "huge string array", "key 'sarr'", "array count");
	/* string inside an array longer than the file */
	w_header(&b, 3, 0, 1);
	w_arr_head(&b, "sarr2", GGUF_STRING, 2);
	w_str(&b, "ok");
	w_u64(&b, 1000);
	w_bytes(&b, "short", 5);
	expect_fail(t, &b, SEKV_EFORMAT, "array string past EOF", "key 'sarr2'", "string length");
	/* unknown value type, unknown element type */
	w_header(&b, 3, 0, 1);
	w_kv(&b, "bad", (enum gguf_vtype)13, &v, 4);
	expect_fail(t, &b, SEKV_EFORMAT, "value type 13", "key 'bad'", "type 13");
	w_header(&b, 3, 0, 1);
	w_arr_head(&b, "bad2", (enum gguf_vtype)99, 1);
	w_u32(&b, 0);
	expect_fail(t, &b, SEKV_EFORMAT, "element type 99", "key 'bad2'", "99");
	/* duplicate key */
	w_header(&b, 3, 0, 2);
	w_kv_u32(&b, "dup", 1);
	w_kv_u32(&b, "dup", 2);
	expect_fail(t, &b, SEKV_EFORMAT, "duplicate key", "key 'dup'", "duplicate");
	/* general.alignment: wrong type, zero, not a power of two */
	w_header(&b, 3, 0, 1);
	w_kv(&b, "general.alignment", GGUF_U64, "\x20\0\0\0\0\0\0\0", 8);
	expect_fail(t, &b, SEKV_EFORMAT, "alignment u64", "general.alignment", "u32");
	w_header(&b, 3, 0, 1);
	w_kv_u32(&b, "general.alignment", 0);
	expect_fail(t, &b, SEKV_EFORMAT, "alignment 0", "general.alignment", NULL);
	w_header(&b, 3, 0, 1);
	w_kv_u32(&b, "general.alignment", 48);
	expect_fail(t, &b, SEKV_EFORMAT, "alignment 48", "general.alignment", "power of two");
}

/* Nested arrays are accepted and walked up to a depth limit; deeper
 * nesting, or a nested count beyond the file, is a format error. */
static void gguf_nested_arrays(struct test_ctx *t)
{
	struct wbuf b = {0};
	struct gguf *g = NULL;
	char err[512];
	int rc;

	/* depth 3: [[["a"]]] */
	w_header(&b, 3, 0, 1);
	w_arr_head(&b, "n3", GGUF_ARRAY, 1);
	w_u32(&b, GGUF_ARRAY), w_u64(&b, 1);
	w_u32(&b, GGUF_STRING), w_u64(&b, 1);
	w_str(&b, "a");
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
	w_header(&b, 3, 0, 1);
	w_arr_head(&b, "deep", GGUF_ARRAY, 1);
	for (int i = 0; i < 8; i++)
		w_u32(&b, GGUF_ARRAY), w_u64(&b, 1);
	w_u32(&b, GGUF_U8), w_u64(&b, 1), w_u8(&b, 0);
	expect_fail(t, &b, SEKV_EFORMAT, "depth 9", "key 'deep'", "nested");
	/* inner count beyond the file */
	w_header(&b, 3, 0, 1);
	w_arr_head(&b, "inner", GGUF_ARRAY, 1);
	w_u32(&b, GGUF_U64), w_u64(&b, 1ull << 61);
	w_u64(&b, 0);
	expect_fail(t, &b, SEKV_EFORMAT, "inner count", "key 'inner'", "array count");
	/* outer count beyond the file */
	w_header(&b, 3, 0, 1);
	w_arr_head(&b, "outer", GGUF_ARRAY, 1ull << 50);
	w_u32(&b, GGUF_U8), w_u64(&b, 0);
	expect_fail(t, &b, SEKV_EFORMAT, "outer count", "key 'outer'", "array count");
}

/* One tensor with the given shape/type/offset and `data` bytes of data. */
static void build_one_tensor(struct wbuf *b, const char *name, uint32_t n_dims,
			     const uint64_t *ne, uint32_t type, uint64_t offset, size_t data)
{
	w_header(b, 3, 1, 0);
	w_tensor(b, name, n_dims, ne, type, offset);
	w_pad(b, 32);
	for (size_t i = 0; i < data; i++)
		w_u8(b, 0);
}

static void gguf_bad_tensors_fail(struct test_ctx *t)
{
	struct wbuf b = {0};
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
	w_header(&b, 3, 1, 0);
	w_u64(&b, UINT64_MAX - 3);
	w_bytes(&b, "w\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 28);
	expect_fail(t, &b, SEKV_EFORMAT, "huge tensor name", "tensor #0", "string length");
	/* duplicate tensor names */
	w_header(&b, 3, 2, 0);
	w_tensor(&b, "w", 2, ne_ok, QT_F32, 0);
	w_tensor(&b, "w", 2, ne_ok, QT_F32, 32);
	w_pad(&b, 32);
	for (int i = 0; i < 64; i++)
		w_u8(&b, 0);
	expect_fail(t, &b, SEKV_EFORMAT, "duplicate tensor", "tensor 'w'", "duplicate");
	/* data section start past EOF (header ends mid-padding) */
	w_header(&b, 3, 1, 0);
	w_tensor(&b, "w", 1, ne4, QT_F32, 0);
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
	f = fopen(tmp_path(path, sizeof path, "empty.gguf"), "wb");
	T_CHECK(t, f != NULL);
	fclose(f);
	T_CHECK(t, gguf_open(&g, path, err, sizeof err) == SEKV_EFORMAT);
	T_CHECK(t, strstr(err, "empty.gguf") != NULL);
	f = fopen(tmp_path(path, sizeof path, "junk.gguf"), "wb");
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
	struct wbuf b = {0};
	uint64_t s = 0x9e3779b97f4a7c15ull;
	char err[512];
	int n_ok = 0;

	build_full(&b, 3);
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

/* ---- the real model --------------------------------------------------- */

static void gguf_opens_default_model(struct test_ctx *t)
{
	struct gguf *g = NULL;
	char err[512];
	struct gguf_str s;
	const struct gguf_tensor *tn;
	const struct gguf_kv *kv;
	uint32_t u;
	float f;
	int rc;

	rc = gguf_open(&g, test_model_path(), err, sizeof err);
	T_CHECKF(t, rc == 0, "model required (make model): %s", err);
	rc = gguf_get_str(g, "general.architecture", &s);
	if (rc || s.len != 6 || memcmp(s.ptr, "gemma3", 6)) {
		gguf_close(g);
		T_CHECKF(t, 0, "architecture");
	}
	tn = gguf_find_tensor(g, "token_embd.weight");
	kv = gguf_find_kv(g, "tokenizer.ggml.tokens");
	rc = g->n_tensor == 236 && g->version == 3 && g->data_offset % g->alignment == 0 &&
	     tn && tn->n_dims == 2 && tn->ne[0] == 640 && tn->ne[1] == 262144 &&
	     tn->type == QT_Q8_0 && tn->nbytes == 262144ull * 20 * 34 &&
	     gguf_get_u32(g, "gemma3.block_count", &u) == 0 && u == 18 &&
	     gguf_get_u32(g, "gemma3.embedding_length", &u) == 0 && u == 640 &&
	     gguf_get_f32(g, "gemma3.rope.freq_base", &f) == 0 && f == 1e6f &&
	     kv && kv->arr_type == GGUF_STRING && kv->arr_n == 262144 &&
	     gguf_arr_str(g, kv, 2, &s) == 0 && s.len == 5 && !memcmp(s.ptr, "<bos>", 5);
	for (uint64_t i = 0; rc && i < g->n_tensor; i++)
		rc = quant_supported(g->tensor[i].type) &&
		     quant_row_bytes(g->tensor[i].type, g->tensor[i].ne[0]) != 0;
	gguf_close(g);
	T_CHECKF(t, rc, "default model metadata/tensors differ from expected");
}

const struct test_case test_gguf[] = {
	{"gguf_roundtrip_all_types_file", gguf_roundtrip_all_types_file},
	{"gguf_roundtrip_v2_buffer", gguf_roundtrip_v2_buffer},
	{"gguf_metadata_only_file", gguf_metadata_only_file},
	{"gguf_print_abbreviates", gguf_print_abbreviates},
	{"gguf_every_truncation_fails", gguf_every_truncation_fails},
	{"gguf_bad_header_fails", gguf_bad_header_fails},
	{"gguf_bad_metadata_fails", gguf_bad_metadata_fails},
	{"gguf_nested_arrays", gguf_nested_arrays},
	{"gguf_bad_tensors_fail", gguf_bad_tensors_fail},
	{"gguf_open_missing_and_odd_files", gguf_open_missing_and_odd_files},
	{"gguf_random_corruption_never_crashes", gguf_random_corruption_never_crashes},
	{"gguf_opens_default_model", gguf_opens_default_model},
	{NULL, NULL},
};
