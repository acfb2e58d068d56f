/* test_gguf.c - the GGUF reader against well-formed files written here
 * (every metadata type, arrays, nested arrays, tensors of several types,
 * custom alignment; v2 and v3, from a file and from a buffer), gguf_print's
 * abbreviations, and the real default model, which must be present.
 * The writer is tests/gguf_writer.c; malformed files are in
 * test_gguf_malformed.c.
 */
#include "tests/test.h"
#include "tests/gguf_writer.h"

#include "engine/base/err.h"
#include "engine/gguf/gguf.h"
#include "engine/quant/quant.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check_full(struct test_ctx *t, const struct gguf *g)
{
	uint32_t u; int64_t i; float f; int bo; double d;
	struct gguf_str s;
	const struct gguf_kv *kv;
	const struct gguf_tensor *tn;

	T_CHECK(t, g->n_kv == 20 && g->n_tensor == 3);
	T_CHECK(t, g->alignment == GW_FULL_ALIGN && g->data_offset % GW_FULL_ALIGN == 0);
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
	T_CHECK(t, kv && kv->arr_type == GGUF_STRING && kv->arr_n == GW_FULL_N_STR);
	for (int k = GW_FULL_N_STR - 1; k >= 0; k--) {
		char want[32];
		gw_full_tok_name(want, sizeof want, k);
		T_CHECKF(t, gguf_arr_str(g, kv, (uint64_t)k, &s) == 0 && s.len == strlen(want) &&
			 !memcmp(s.ptr, want, s.len), "a.str[%d]", k);
	}
	T_CHECK(t, gguf_arr_str(g, kv, GW_FULL_N_STR, &s) == SEKV_EINVAL);
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
	struct gw_buf b = {0};
	struct gguf *g = NULL;
	char path[512], err[512];
	int rc;

	gw_build_full(&b, 3);
	T_CHECK(t, !b.oom);
	rc = gw_write_file(gw_tmp_path(path, sizeof path, "full.gguf"), &b);
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
	struct gw_buf b = {0};
	struct gguf *g = NULL;
	char err[512];
	int rc;

	gw_build_full(&b, 2);
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
	struct gw_buf b = {0};
	struct gguf *g = NULL;
	char err[512];
	uint32_t u;
	int rc;

	gw_header(&b, 3, 0, 1);
	gw_kv_u32(&b, "x", 7);
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
	struct gw_buf b = {0};
	struct gguf *g = NULL;
	char err[512], *out = NULL;
	size_t n_out = 0;
	FILE *f;
	int rc;

	gw_build_full(&b, 3);
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
	{"gguf_opens_default_model", gguf_opens_default_model},
	{NULL, NULL},
};
