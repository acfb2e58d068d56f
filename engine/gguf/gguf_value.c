/* gguf_value.c - typed reads of GGUF metadata values (scalars with range
 * checks, numeric array elements) and the human-readable dump behind
 * `sekv inspect`. Everything here reads only extents that gguf.c validated
 * at open; the parser, the string-array index and the lookups live there.
 */
#include "engine/gguf/gguf.h"

#include "engine/base/err.h"
#include "engine/quant/quant.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ---- typed values ----------------------------------------------------- */

/* A scalar integer value: *is_signed tells which of *u / *s holds it. */
static int int_value(enum gguf_vtype t, const uint8_t *p, uint64_t *u,
		     int64_t *s, int *is_signed)
{
	uint8_t u8; int8_t i8; uint16_t u16; int16_t i16;
	uint32_t u32; int32_t i32;

	*is_signed = 0;
	switch (t) {
	case GGUF_U8: memcpy(&u8, p, 1); *u = u8; return 0;
	case GGUF_U16: memcpy(&u16, p, 2); *u = u16; return 0;
	case GGUF_U32: memcpy(&u32, p, 4); *u = u32; return 0;
	case GGUF_U64: memcpy(u, p, 8); return 0;
	case GGUF_I8: memcpy(&i8, p, 1); *s = i8; break;
	case GGUF_I16: memcpy(&i16, p, 2); *s = i16; break;
	case GGUF_I32: memcpy(&i32, p, 4); *s = i32; break;
	case GGUF_I64: memcpy(s, p, 8); break;
	default: return SEKV_EFORMAT;
	}
	*is_signed = 1;
	return 0;
}

static int get_scalar(const struct gguf *g, const char *key,
		      const struct gguf_kv **kv)
{
	*kv = gguf_find_kv(g, key);
	if (!*kv)
		return SEKV_ENOTFOUND;
	return (*kv)->type == GGUF_ARRAY || (*kv)->type == GGUF_STRING ? SEKV_EFORMAT : 0;
}

int gguf_get_u32(const struct gguf *g, const char *key, uint32_t *out)
{
	const struct gguf_kv *kv;
	uint64_t u = 0;
	int64_t s = 0;
	int sg, rc = get_scalar(g, key, &kv);

	if (rc || (rc = int_value(kv->type, kv->data, &u, &s, &sg)))
		return rc;
	if (sg) {
		if (s < 0 || s > UINT32_MAX)
			return SEKV_EFORMAT;
		*out = (uint32_t)s;
	} else {
		if (u > UINT32_MAX)
			return SEKV_EFORMAT;
		*out = (uint32_t)u;
	}
	return 0;
}

int gguf_get_i64(const struct gguf *g, const char *key, int64_t *out)
{
	const struct gguf_kv *kv;
	uint64_t u = 0;
	int64_t s = 0;
	int sg, rc = get_scalar(g, key, &kv);

	if (rc || (rc = int_value(kv->type, kv->data, &u, &s, &sg)))
		return rc;
	if (!sg) {
		if (u > INT64_MAX)
			return SEKV_EFORMAT;
		s = (int64_t)u;
	}
	*out = s;
	return 0;
}

int gguf_get_f32(const struct gguf *g, const char *key, float *out)
{
	const struct gguf_kv *kv;
	int rc = get_scalar(g, key, &kv);
	double d;
	float f;

	if (rc)
		return rc;
	if (kv->type == GGUF_F32) {
		memcpy(&f, kv->data, 4);
		*out = f;
		return 0;
	}
	if (kv->type == GGUF_F64) {
		memcpy(&d, kv->data, 8);
		*out = (float)d;
		return 0;
	}
	return SEKV_EFORMAT;
}

int gguf_get_bool(const struct gguf *g, const char *key, int *out)
{
	const struct gguf_kv *kv;
	int rc = get_scalar(g, key, &kv);

	if (rc)
		return rc;
	if (kv->type != GGUF_BOOL)
		return SEKV_EFORMAT;
	*out = kv->data[0] != 0;
	return 0;
}

int gguf_get_str(const struct gguf *g, const char *key, struct gguf_str *out)
{
	const struct gguf_kv *kv = gguf_find_kv(g, key);

	if (!kv)
		return SEKV_ENOTFOUND;
	if (kv->type != GGUF_STRING)
		return SEKV_EFORMAT;
	memcpy(&out->len, kv->data, 8);
	out->ptr = (const char *)kv->data + 8;
	return 0;
}

static int num_value(enum gguf_vtype t, const uint8_t *p, double *out)
{
	uint64_t u = 0;
	int64_t s = 0;
	int sg;
	float f;

	switch (t) {
	case GGUF_F32: memcpy(&f, p, 4); *out = f; return 0;
	case GGUF_F64: memcpy(out, p, 8); return 0;
	case GGUF_BOOL: *out = p[0] != 0; return 0;
	default: break;
	}
	if (int_value(t, p, &u, &s, &sg))
		return SEKV_EFORMAT;
	*out = sg ? (double)s : (double)u;
	return 0;
}

int gguf_arr_num(const struct gguf_kv *kv, uint64_t i, double *out)
{
	size_t es;

	if (!kv || kv->type != GGUF_ARRAY)
		return SEKV_EINVAL;
	es = gguf_vtype_size(kv->arr_type);
	if (!es)
		return SEKV_EFORMAT;
	if (i >= kv->arr_n)
		return SEKV_EINVAL;
	return num_value(kv->arr_type, kv->data + i * es, out);
}

/* ---- dump ------------------------------------------------------------- */

#define GGUF_PRINT_ELEMS 8    /* array elements shown before "..." */
#define GGUF_PRINT_STR 120    /* bytes of a string shown */

/* Prints s escaped and cut to GGUF_PRINT_STR bytes, in quotes if quote. */
static void print_str(FILE *f, struct gguf_str s, int quote)
{
	uint64_t n = s.len > GGUF_PRINT_STR ? GGUF_PRINT_STR : s.len;

	if (quote)
		fputc('"', f);
	for (uint64_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s.ptr[i];
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", f);
		else if (c < 0x20 || c == 0x7f)
			fprintf(f, "\\x%02x", c);
		else
			fputc(c, f);
	}
	if (quote)
		fputc('"', f);
	if (s.len > n)
		fprintf(f, "...(%" PRIu64 " bytes)", s.len);
}

static void print_num(FILE *f, enum gguf_vtype t, const uint8_t *p)
{
	uint64_t u = 0;
	int64_t s = 0;
	int sg;
	float x;
	double d;

	if (t == GGUF_F32) {
		memcpy(&x, p, 4);
		fprintf(f, "%.9g", x);
	} else if (t == GGUF_F64) {
		memcpy(&d, p, 8);
		fprintf(f, "%.17g", d);
	} else if (t == GGUF_BOOL) {
		fputs(p[0] ? "true" : "false", f);
	} else if (!int_value(t, p, &u, &s, &sg)) {
		if (sg)
			fprintf(f, "%" PRId64, s);
		else
			fprintf(f, "%" PRIu64, u);
	}
}

static void print_kv(const struct gguf *g, const struct gguf_kv *kv, FILE *f)
{
	struct gguf_str s;

	fputs("  ", f);
	print_str(f, kv->key, 0);
	fputs(": ", f);
	if (kv->type == GGUF_STRING) {
		memcpy(&s.len, kv->data, 8);
		s.ptr = (const char *)kv->data + 8;
		fputs("string = ", f);
		print_str(f, s, 1);
	} else if (kv->type == GGUF_ARRAY) {
		uint64_t n = kv->arr_n < GGUF_PRINT_ELEMS ? kv->arr_n : GGUF_PRINT_ELEMS;
		fprintf(f, "%s[%" PRIu64 "] = [", gguf_vtype_name(kv->arr_type), kv->arr_n);
		if (kv->arr_type == GGUF_ARRAY)
			n = 0, fputs("(nested arrays)", f);
		for (uint64_t i = 0; i < n; i++) {
			if (i)
				fputs(", ", f);
			if (kv->arr_type == GGUF_STRING && !gguf_arr_str(g, kv, i, &s))
				print_str(f, s, 1);
			else
				print_num(f, kv->arr_type,
					  kv->data + i * gguf_vtype_size(kv->arr_type));
		}
		if (n < kv->arr_n && kv->arr_type != GGUF_ARRAY)
			fprintf(f, ", ... %" PRIu64 " more", kv->arr_n - n);
		fputc(']', f);
	} else {
		fprintf(f, "%s = ", gguf_vtype_name(kv->type));
		print_num(f, kv->type, kv->data);
	}
	fputc('\n', f);
}

void gguf_print(const struct gguf *g, FILE *f)
{
	uint64_t total = 0;

	fprintf(f, "file: %s\n", g->path);
	fprintf(f, "gguf version %" PRIu32 ", %zu bytes, alignment %" PRIu32
		", data at offset %zu\n", g->version, g->size, g->alignment,
		g->data_offset);
	fprintf(f, "metadata (%" PRIu64 " keys):\n", g->n_kv);
	for (uint64_t i = 0; i < g->n_kv; i++)
		print_kv(g, &g->kv[i], f);
	fprintf(f, "tensors (%" PRIu64 "):\n", g->n_tensor);
	for (uint64_t i = 0; i < g->n_tensor; i++) {
		const struct gguf_tensor *t = &g->tensor[i];
		char shape[128];
		int n = 0;

		n += snprintf(shape + n, sizeof shape - n, "[");
		for (uint32_t d = 0; d < t->n_dims; d++)
			n += snprintf(shape + n, sizeof shape - n, "%s%" PRIu64,
				      d ? ", " : "", t->ne[d]);
		snprintf(shape + n, sizeof shape - n, "]");
		fputs("  ", f);
		print_str(f, t->name, 0);
		fprintf(f, "%*s %-22s %-8s %12" PRIu64 " bytes\n",
			t->name.len < 40 ? (int)(40 - t->name.len) : 0, "", shape,
			quant_name(t->type), t->nbytes);
		total += t->nbytes;
	}
	fprintf(f, "total tensor data: %" PRIu64 " bytes (%.1f MiB)\n", total,
		(double)total / (1024.0 * 1024.0));
}
