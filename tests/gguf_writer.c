/* gguf_writer.c - a tiny GGUF writer for the tests (v2/v3, little-endian,
 * as in ggml's docs/gguf.md) and the "full" file that exercises every
 * metadata type, arrays, nested arrays and three tensor types. Nothing here
 * checks what it writes: tests build malformed files with it on purpose.
 * Contracts are in gguf_writer.h; the GGUF reader is engine/gguf/gguf.c.
 */
#include "tests/gguf_writer.h"
#include "tests/test.h"

#include "engine/quant/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gw_bytes(struct gw_buf *b, const void *src, size_t n)
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

void gw_u8(struct gw_buf *b, uint8_t v) { gw_bytes(b, &v, 1); }
void gw_u32(struct gw_buf *b, uint32_t v) { gw_bytes(b, &v, 4); }
void gw_u64(struct gw_buf *b, uint64_t v) { gw_bytes(b, &v, 8); }

void gw_str(struct gw_buf *b, const char *s)
{
	gw_u64(b, strlen(s));
	gw_bytes(b, s, strlen(s));
}

void gw_header(struct gw_buf *b, uint32_t version, uint64_t n_tensor, uint64_t n_kv)
{
	gw_bytes(b, "GGUF", 4);
	gw_u32(b, version);
	gw_u64(b, n_tensor);
	gw_u64(b, n_kv);
}

void gw_kv(struct gw_buf *b, const char *key, enum gguf_vtype t, const void *v,
	   size_t size)
{
	gw_str(b, key);
	gw_u32(b, t);
	gw_bytes(b, v, size);
}

void gw_kv_u32(struct gw_buf *b, const char *key, uint32_t v)
{
	gw_kv(b, key, GGUF_U32, &v, 4);
}

void gw_kv_str(struct gw_buf *b, const char *key, const char *s)
{
	gw_str(b, key);
	gw_u32(b, GGUF_STRING);
	gw_str(b, s);
}

void gw_arr_head(struct gw_buf *b, const char *key, enum gguf_vtype et, uint64_t n)
{
	gw_str(b, key);
	gw_u32(b, GGUF_ARRAY);
	gw_u32(b, et);
	gw_u64(b, n);
}

void gw_tensor(struct gw_buf *b, const char *name, uint32_t n_dims,
	       const uint64_t *ne, uint32_t type, uint64_t offset)
{
	gw_str(b, name);
	gw_u32(b, n_dims);
	for (uint32_t d = 0; d < n_dims; d++)
		gw_u64(b, ne[d]);
	gw_u32(b, type);
	gw_u64(b, offset);
}

void gw_pad(struct gw_buf *b, size_t align)
{
	while (b->n % align)
		gw_u8(b, 0);
}

int gw_write_file(const char *path, const struct gw_buf *b)
{
	FILE *f = fopen(path, "wb");
	int ok = f && fwrite(b->p, 1, b->n, f) == b->n;
	if (f && fclose(f))
		ok = 0;
	return ok ? 0 : -1;
}

char *gw_tmp_path(char *buf, size_t n, const char *name)
{
	snprintf(buf, n, "%s/%s", test_tmpdir(), name);
	return buf;
}

/* ---- the full file ---------------------------------------------------- */

void gw_full_tok_name(char *buf, size_t n, int i)
{
	if (i % 10)
		snprintf(buf, n, "tok%d", i);
	else
		buf[0] = 0;
}

void gw_build_full(struct gw_buf *b, uint32_t version)
{
	uint8_t u8 = 200; int8_t i8 = -100; uint16_t u16 = 60000; int16_t i16 = -30000;
	uint32_t u32 = 4000000000u; int32_t i32 = -2000000000; float f32 = 3.25f;
	uint8_t bl = 1; uint64_t u64 = 0xfedcba9876543210ull; int64_t i64 = -5000000000ll;
	double f64 = -1.0 / 3.0;
	const uint64_t ne_a[2] = {4, 3}, ne_b[2] = {64, 2}, ne_c[1] = {256};
	char s[32];

	gw_header(b, version, 3, 20);
	gw_kv(b, "t.u8", GGUF_U8, &u8, 1);
	gw_kv(b, "t.i8", GGUF_I8, &i8, 1);
	gw_kv(b, "t.u16", GGUF_U16, &u16, 2);
	gw_kv(b, "t.i16", GGUF_I16, &i16, 2);
	gw_kv(b, "t.u32", GGUF_U32, &u32, 4);
	gw_kv(b, "t.i32", GGUF_I32, &i32, 4);
	gw_kv(b, "t.f32", GGUF_F32, &f32, 4);
	gw_kv(b, "t.bool", GGUF_BOOL, &bl, 1);
	gw_kv_str(b, "t.str", "hello, gguf");
	gw_kv(b, "t.u64", GGUF_U64, &u64, 8);
	gw_kv(b, "t.i64", GGUF_I64, &i64, 8);
	gw_kv(b, "t.f64", GGUF_F64, &f64, 8);
	gw_kv_str(b, "t.empty", "");
	gw_kv_u32(b, "general.alignment", GW_FULL_ALIGN);
	gw_arr_head(b, "a.i32", GGUF_I32, 5);
	for (int32_t i = 0; i < 5; i++)
		gw_u32(b, (uint32_t)(i * -3));
	gw_arr_head(b, "a.f32", GGUF_F32, 3);
	for (int i = 0; i < 3; i++) {
		float v = 0.5f * (float)i;
		gw_bytes(b, &v, 4);
	}
	gw_arr_head(b, "a.bool", GGUF_BOOL, 2);
	gw_u8(b, 0), gw_u8(b, 1);
	gw_arr_head(b, "a.str", GGUF_STRING, GW_FULL_N_STR);
	for (int i = 0; i < GW_FULL_N_STR; i++) {
		gw_full_tok_name(s, sizeof s, i);
		gw_str(b, s);
	}
	/* array of 2 arrays of u16 */
	gw_arr_head(b, "a.nested", GGUF_ARRAY, 2);
	for (int i = 0; i < 2; i++) {
		gw_u32(b, GGUF_U16), gw_u64(b, 2);
		gw_bytes(b, "\1\0\2\0", 4);
	}
	gw_arr_head(b, "a.empty", GGUF_U64, 0);

	gw_tensor(b, "a.f32", 2, ne_a, QT_F32, 0);
	gw_tensor(b, "b.q8", 2, ne_b, QT_Q8_0, 64);
	gw_tensor(b, "c.q4k", 1, ne_c, QT_Q4_K, 64 + 192);
	gw_pad(b, GW_FULL_ALIGN);
	for (int i = 0; i < 12; i++) {
		float v = (float)i;
		gw_bytes(b, &v, 4);
	}
	gw_pad(b, GW_FULL_ALIGN);
	for (int i = 0; i < 136; i++)
		gw_u8(b, (uint8_t)(i * 7));
	gw_pad(b, GW_FULL_ALIGN);
	for (int i = 0; i < 144; i++)
		gw_u8(b, (uint8_t)(255 - i));
}
