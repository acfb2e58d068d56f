/* gguf.c - the GGUF v2/v3 reader declared in gguf.h.
 *
 * gguf_open maps the file and hands the bytes to one parser that walks the
 * header, key/values and tensor infos through a bounds-checked cursor: every
 * count is checked against the bytes that remain before anything is
 * allocated or read, and every product against overflow. After a successful
 * open all accessors read only validated extents. Private state (string
 * array index, hash tables for keys and tensor names) lives in struct
 * gguf_impl around the public struct gguf. Block sizes come from quant.c;
 * typed value reads and the dump are in gguf_value.c.
 */
#include "engine/gguf/gguf.h"

#include "engine/base/err.h"
#include "engine/base/file.h"
#include "engine/base/hash.h"
#include "engine/quant/quant.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_NEST 8        /* arrays of arrays deeper than this: EFORMAT */
#define GGUF_NAME_SHOWN 64     /* bytes of a key/tensor name quoted in errors */

struct gguf_impl {
	struct gguf pub;
	int mapped;              /* pub.map came from mmap (unmap at close) */
	uint64_t *str_first;     /* [n_kv]: index into str_ptr of element 0, or UINT64_MAX */
	const uint8_t **str_ptr; /* [n_str]: the u64 length prefix of every string-array element */
	uint64_t *kv_hash;       /* [kv_cap]: kv index + 1, 0 = empty */
	uint64_t *t_hash;        /* [t_cap]: tensor index + 1, 0 = empty */
	uint64_t kv_cap, t_cap;  /* slots: powers of two, > 2x the entries */
};

static struct gguf_impl *impl_of(const struct gguf *g)
{
	return (struct gguf_impl *)(uintptr_t)g;
}

/* ---- bounds-checked cursor -------------------------------------------- */

struct gguf_rd {
	const uint8_t *p;
	size_t size;
	size_t off;
	const char *name;  /* file name for messages */
	char *err;
	size_t errlen;
};

static size_t rd_left(const struct gguf_rd *r)
{
	return r->size - r->off;
}

/* what: the field being read, for the message. */
static int rd_need(struct gguf_rd *r, uint64_t n, const char *what)
{
	if (n > rd_left(r))
		return sekv_errf(r->err, r->errlen, SEKV_EFORMAT,
				 "gguf: %s: %s: truncated (needs %" PRIu64
				 " bytes at offset %zu, file has %zu)",
				 r->name, what, n, r->off, r->size);
	return 0;
}

static int rd_u32(struct gguf_rd *r, uint32_t *v, const char *what)
{
	int rc = rd_need(r, 4, what);
	if (rc)
		return rc;
	memcpy(v, r->p + r->off, 4);
	r->off += 4;
	return 0;
}

static int rd_u64(struct gguf_rd *r, uint64_t *v, const char *what)
{
	int rc = rd_need(r, 8, what);
	if (rc)
		return rc;
	memcpy(v, r->p + r->off, 8);
	r->off += 8;
	return 0;
}

static int rd_str(struct gguf_rd *r, struct gguf_str *s, const char *what)
{
	uint64_t len;
	int rc = rd_u64(r, &len, what);
	if (rc)
		return rc;
	if (len > rd_left(r))
		return sekv_errf(r->err, r->errlen, SEKV_EFORMAT,
				 "gguf: %s: %s: string length %" PRIu64
				 " exceeds the %zu bytes left in the file",
				 r->name, what, len, rd_left(r));
	s->ptr = (const char *)r->p + r->off;
	s->len = len;
	r->off += (size_t)len;
	return 0;
}

/* "key 'name'" / "tensor 'name'" with the name cut to GGUF_NAME_SHOWN. */
static void ctx_name(char *buf, size_t n, const char *kind, struct gguf_str s)
{
	int shown = s.len > GGUF_NAME_SHOWN ? GGUF_NAME_SHOWN : (int)s.len;
	snprintf(buf, n, "%s '%.*s%s'", kind, shown, s.ptr,
		 s.len > GGUF_NAME_SHOWN ? "..." : "");
}

/* ---- small helpers ---------------------------------------------------- */

size_t gguf_vtype_size(enum gguf_vtype t)
{
	switch (t) {
	case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
	case GGUF_U16: case GGUF_I16: return 2;
	case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
	case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
	default: return 0;
	}
}

const char *gguf_vtype_name(enum gguf_vtype t)
{
	static const char *names[GGUF_NTYPES] = {
		"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool",
		"string", "array", "u64", "i64", "f64",
	};
	return (unsigned)t < GGUF_NTYPES ? names[t] : "unknown";
}

static int str_eq(struct gguf_str a, const char *b, size_t blen)
{
	return a.len == blen && memcmp(a.ptr, b, blen) == 0;
}

/* Smallest power of two > 2n (n is bounded by the file size, so no overflow
 * for any file that fits in memory). */
static uint64_t hash_cap_for(uint64_t n)
{
	uint64_t cap = 16;
	while (cap <= 2 * n)
		cap <<= 1;
	return cap;
}

/* Slot of `key` in table (whose entries index names via get_name), either
 * the matching slot or the empty one where it would go. */
static uint64_t hash_slot(const uint64_t *table, uint64_t cap,
			  const char *key, size_t len,
			  struct gguf_str (*get_name)(const struct gguf *, uint64_t),
			  const struct gguf *g)
{
	uint64_t i = hash_fnv1a64(HASH_FNV1A64_INIT, key, len) & (cap - 1);
	while (table[i] && !str_eq(get_name(g, table[i] - 1), key, len))
		i = (i + 1) & (cap - 1);
	return i;
}

static struct gguf_str kv_name(const struct gguf *g, uint64_t i)
{
	return g->kv[i].key;
}

static struct gguf_str tensor_name(const struct gguf *g, uint64_t i)
{
	return g->tensor[i].name;
}

/* ---- metadata --------------------------------------------------------- */

/* Skips (validating) one value of `type`; for arrays, *arr_type and *arr_n
 * receive the element type and count. depth counts array nesting. */
static int skip_value(struct gguf_rd *r, uint32_t type, int depth,
		      const char *ctx, uint64_t *arr_type, uint64_t *arr_n);

static int skip_array(struct gguf_rd *r, int depth, const char *ctx,
		      uint64_t *arr_type_out, uint64_t *arr_n_out)
{
	uint32_t et;
	uint64_t n, min_elem;
	size_t es;
	int rc;

	if (depth >= GGUF_MAX_NEST)
		return sekv_errf(r->err, r->errlen, SEKV_EFORMAT,
				 "gguf: %s: %s: arrays nested deeper than %d",
				 r->name, ctx, GGUF_MAX_NEST);
	if ((rc = rd_u32(r, &et, ctx)) || (rc = rd_u64(r, &n, ctx)))
		return rc;
	if (et >= GGUF_NTYPES)
		return sekv_errf(r->err, r->errlen, SEKV_EFORMAT,
				 "gguf: %s: %s: unknown array element type %" PRIu32,
				 r->name, ctx, et);
	*arr_type_out = et;
	*arr_n_out = n;
	es = gguf_vtype_size((enum gguf_vtype)et);
	/* strings take >= 8 bytes (length), nested arrays >= 12 (type+count) */
	min_elem = es ? es : (et == GGUF_STRING ? 8 : 12);
	if (n > rd_left(r) / min_elem)
		return sekv_errf(r->err, r->errlen, SEKV_EFORMAT,
				 "gguf: %s: %s: array count %" PRIu64
				 " exceeds the %zu bytes left in the file",
				 r->name, ctx, n, rd_left(r));
	if (es) {
		r->off += (size_t)(n * es);
		return 0;
	}
	for (uint64_t i = 0; i < n; i++) {
		uint64_t t, c;
		if ((rc = skip_value(r, et, depth + 1, ctx, &t, &c)))
			return rc;
	}
	return 0;
}

static int skip_value(struct gguf_rd *r, uint32_t type, int depth,
		      const char *ctx, uint64_t *arr_type, uint64_t *arr_n)
{
	struct gguf_str s;

	if (type == GGUF_STRING)
		return rd_str(r, &s, ctx);
	if (type == GGUF_ARRAY)
		return skip_array(r, depth, ctx, arr_type, arr_n);
	if (type >= GGUF_NTYPES)
		return sekv_errf(r->err, r->errlen, SEKV_EFORMAT,
				 "gguf: %s: %s: unknown value type %" PRIu32,
				 r->name, ctx, type);
	if (rd_need(r, gguf_vtype_size((enum gguf_vtype)type), ctx))
		return SEKV_EFORMAT;
	r->off += gguf_vtype_size((enum gguf_vtype)type);
	return 0;
}

static int parse_kv(struct gguf_rd *r, struct gguf_kv *kv, uint64_t idx,
		    uint64_t *n_str)
{
	char ctx[128];
	uint32_t type;
	uint64_t at = 0, an = 0;
	size_t start;
	int rc;

	snprintf(ctx, sizeof ctx, "key #%" PRIu64, idx);
	if ((rc = rd_str(r, &kv->key, ctx)))
		return rc;
	ctx_name(ctx, sizeof ctx, "key", kv->key);
	if ((rc = rd_u32(r, &type, ctx)))
		return rc;
	if (type >= GGUF_NTYPES)
		return sekv_errf(r->err, r->errlen, SEKV_EFORMAT,
				 "gguf: %s: %s: unknown value type %" PRIu32,
				 r->name, ctx, type);
	kv->type = (enum gguf_vtype)type;
	start = r->off;
	if ((rc = skip_value(r, type, 0, ctx, &at, &an)))
		return rc;
	kv->data = r->p + start;
	kv->nbytes = r->off - start;
	if (type == GGUF_ARRAY) {
		kv->arr_type = (enum gguf_vtype)at;
		kv->arr_n = an;
		kv->data += 12; /* past element type and count */
		kv->nbytes -= 12;
		if (at == GGUF_STRING)
			*n_str += an;
	}
	return 0;
}

/* Builds the key hash (rejecting duplicates) and the string-array index. */
static int index_kvs(struct gguf_impl *gi, uint64_t n_str, struct gguf_rd *r)
{
	struct gguf *g = &gi->pub;
	uint64_t next = 0;

	gi->kv_cap = hash_cap_for(g->n_kv);
	gi->kv_hash = calloc(gi->kv_cap, sizeof *gi->kv_hash);
	gi->str_first = malloc((g->n_kv ? g->n_kv : 1) * sizeof *gi->str_first);
	gi->str_ptr = malloc((n_str ? n_str : 1) * sizeof *gi->str_ptr);
	if (!gi->kv_hash || !gi->str_first || !gi->str_ptr)
		return sekv_errf(r->err, r->errlen, SEKV_ENOMEM,
				 "gguf: %s: index of %" PRIu64 " keys: out of memory",
				 r->name, g->n_kv);
	for (uint64_t i = 0; i < g->n_kv; i++) {
		const struct gguf_kv *kv = &g->kv[i];
		uint64_t s = hash_slot(gi->kv_hash, gi->kv_cap, kv->key.ptr,
				       (size_t)kv->key.len, kv_name, g);
		if (gi->kv_hash[s]) {
			char ctx[128];
			ctx_name(ctx, sizeof ctx, "key", kv->key);
			return sekv_errf(r->err, r->errlen, SEKV_EFORMAT,
					 "gguf: %s: %s: duplicate key", r->name, ctx);
		}
		gi->kv_hash[s] = i + 1;
		gi->str_first[i] = UINT64_MAX;
		if (kv->type != GGUF_ARRAY || kv->arr_type != GGUF_STRING)
			continue;
		/* lengths were validated by parse_kv */
		gi->str_first[i] = next;
		const uint8_t *p = kv->data;
		for (uint64_t j = 0; j < kv->arr_n; j++) {
			uint64_t len;
			gi->str_ptr[next++] = p;
			memcpy(&len, p, 8);
			p += 8 + len;
		}
	}
	return 0;
}

/* general.alignment: u32, non-zero power of two (as ggml requires). */
static int read_alignment(struct gguf *g, struct gguf_rd *r)
{
	const struct gguf_kv *kv = gguf_find_kv(g, "general.alignment");
	uint32_t a;

	g->alignment = GGUF_DEFAULT_ALIGNMENT;
	if (!kv)
		return 0;
	if (kv->type != GGUF_U32)
		return sekv_errf(r->err, r->errlen, SEKV_EFORMAT,
				 "gguf: %s: key 'general.alignment': type %s, expected u32",
				 r->name, gguf_vtype_name(kv->type));
	memcpy(&a, kv->data, 4);
	if (a == 0 || (a & (a - 1)))
		return sekv_errf(r->err, r->errlen, SEKV_EFORMAT,
				 "gguf: %s: key 'general.alignment': %" PRIu32
				 " is not a power of two", r->name, a);
	g->alignment = a;
	return 0;
}

/* ---- tensors ---------------------------------------------------------- */

static int parse_tensor_info(struct gguf_rd *r, struct gguf_tensor *t,
			     uint64_t idx)
{
	char ctx[128];
	int rc;

	snprintf(ctx, sizeof ctx, "tensor #%" PRIu64 " name", idx);
	if ((rc = rd_str(r, &t->name, ctx)))
		return rc;
	ctx_name(ctx, sizeof ctx, "tensor", t->name);
	if ((rc = rd_u32(r, &t->n_dims, ctx)))
		return rc;
	if (t->n_dims > GGUF_MAX_DIMS)
		return sekv_errf(r->err, r->errlen, SEKV_EFORMAT,
				 "gguf: %s: %s: n_dims %" PRIu32 " > %d",
				 r->name, ctx, t->n_dims, GGUF_MAX_DIMS);
	for (int d = 0; d < GGUF_MAX_DIMS; d++) {
		t->ne[d] = 1;
		if ((uint32_t)d < t->n_dims && (rc = rd_u64(r, &t->ne[d], ctx)))
			return rc;
	}
	if ((rc = rd_u32(r, &t->type, ctx)) || (rc = rd_u64(r, &t->offset, ctx)))
		return rc;
	return 0;
}

/* Shape, size and extent of one tensor; needs data_offset and alignment. */
static int check_tensor(struct gguf *g, struct gguf_tensor *t, struct gguf_rd *r)
{
	char ctx[128];
	uint64_t n_el = 1, row, nbytes, room;
	size_t bs;

	ctx_name(ctx, sizeof ctx, "tensor", t->name);
	bs = quant_block_elems(t->type);
	if (!bs)
		return sekv_errf(r->err, r->errlen, SEKV_EUNSUP,
				 "gguf: %s: %s: unknown tensor type %" PRIu32,
				 r->name, ctx, t->type);
	/* ggml stores ne as int64 and callers multiply dimensions freely: the
	 * product of the non-zero dimensions must fit in int64, so a zero in
	 * one dimension cannot hide an overflow in the others */
	for (int d = 0; d < GGUF_MAX_DIMS; d++) {
		if (t->ne[d] > INT64_MAX ||
		    (t->ne[d] && n_el > (uint64_t)INT64_MAX / t->ne[d]))
			return sekv_errf(r->err, r->errlen, SEKV_EFORMAT,
					 "gguf: %s: %s: element count overflows "
					 "(ne[%d] = %" PRIu64 ")", r->name, ctx, d, t->ne[d]);
		if (t->ne[d])
			n_el *= t->ne[d];
	}
	if (t->ne[0] % bs)
		return sekv_errf(r->err, r->errlen, SEKV_EFORMAT,
				 "gguf: %s: %s: row of %" PRIu64
				 " elements is not a multiple of the %s block (%zu)",
				 r->name, ctx, t->ne[0], quant_name(t->type), bs);
	/* bytes can exceed 2^64 even when n_el fits in int64 (8-byte types,
	 * Q8_0's 34/32): saturate, and let the extent check below reject it */
	row = t->ne[0] / bs;
	nbytes = row > UINT64_MAX / quant_block_bytes(t->type) ? UINT64_MAX :
		 row * quant_block_bytes(t->type);
	for (int d = 1; d < GGUF_MAX_DIMS && nbytes != UINT64_MAX; d++)
		nbytes = t->ne[d] && nbytes > UINT64_MAX / t->ne[d] ? UINT64_MAX :
			 nbytes * t->ne[d];
	if (t->offset % g->alignment)
		return sekv_errf(r->err, r->errlen, SEKV_EFORMAT,
				 "gguf: %s: %s: offset %" PRIu64
				 " is not a multiple of the alignment %" PRIu32,
				 r->name, ctx, t->offset, g->alignment);
	room = g->data_offset <= r->size ? r->size - g->data_offset : 0;
	if (t->offset > room || nbytes > room - t->offset)
		return sekv_errf(r->err, r->errlen, SEKV_EFORMAT,
				 "gguf: %s: %s: data extends past end of file "
				 "(offset %" PRIu64 " + %" PRIu64 " bytes, data section %" PRIu64 ")",
				 r->name, ctx, t->offset, nbytes, room);
	t->nbytes = nbytes;
	t->data = r->p + g->data_offset + t->offset;
	return 0;
}

static int index_tensors(struct gguf_impl *gi, struct gguf_rd *r)
{
	struct gguf *g = &gi->pub;

	gi->t_cap = hash_cap_for(g->n_tensor);
	gi->t_hash = calloc(gi->t_cap, sizeof *gi->t_hash);
	if (!gi->t_hash)
		return sekv_errf(r->err, r->errlen, SEKV_ENOMEM,
				 "gguf: %s: index of %" PRIu64 " tensors: out of memory",
				 r->name, g->n_tensor);
	for (uint64_t i = 0; i < g->n_tensor; i++) {
		const struct gguf_tensor *t = &g->tensor[i];
		uint64_t s = hash_slot(gi->t_hash, gi->t_cap, t->name.ptr,
				       (size_t)t->name.len, tensor_name, g);
		if (gi->t_hash[s]) {
			char ctx[128];
			ctx_name(ctx, sizeof ctx, "tensor", t->name);
			return sekv_errf(r->err, r->errlen, SEKV_EFORMAT,
					 "gguf: %s: %s: duplicate tensor name",
					 r->name, ctx);
		}
		gi->t_hash[s] = i + 1;
	}
	return 0;
}

/* ---- open / close ----------------------------------------------------- */

static int parse_header(struct gguf *g, struct gguf_rd *r)
{
	uint32_t version;
	int rc;

	if ((rc = rd_need(r, 4, "magic")))
		return rc;
	if (memcmp(r->p, GGUF_MAGIC, 4))
		return sekv_errf(r->err, r->errlen, SEKV_EFORMAT,
				 "gguf: %s: magic: not a GGUF file", r->name);
	r->off = 4;
	if ((rc = rd_u32(r, &version, "version")))
		return rc;
	if (version != 2 && version != 3)
		return sekv_errf(r->err, r->errlen, SEKV_EFORMAT,
				 "gguf: %s: version: %" PRIu32
				 " unsupported (need 2 or 3%s)", r->name, version,
				 version == 1 ? "; v1 files predate 64-bit counts" :
				 (version & 0xffff) == 0 ? "; byte-swapped, big-endian file?" : "");
	g->version = version;
	if ((rc = rd_u64(r, &g->n_tensor, "tensor count")) ||
	    (rc = rd_u64(r, &g->n_kv, "metadata count")))
		return rc;
	/* a key/value takes >= 13 bytes (key length, type, 1-byte value), a
	 * tensor info >= 24 (name length, n_dims, type, offset) */
	if (g->n_kv > rd_left(r) / 13)
		return sekv_errf(r->err, r->errlen, SEKV_EFORMAT,
				 "gguf: %s: metadata count: %" PRIu64
				 " does not fit in the %zu bytes left", r->name,
				 g->n_kv, rd_left(r));
	if (g->n_tensor > rd_left(r) / 24)
		return sekv_errf(r->err, r->errlen, SEKV_EFORMAT,
				 "gguf: %s: tensor count: %" PRIu64
				 " does not fit in the %zu bytes left", r->name,
				 g->n_tensor, rd_left(r));
	return 0;
}

static int parse_all(struct gguf_impl *gi, struct gguf_rd *r)
{
	struct gguf *g = &gi->pub;
	uint64_t n_str = 0, a;
	int rc;

	if ((rc = parse_header(g, r)))
		return rc;
	g->kv = calloc(g->n_kv ? g->n_kv : 1, sizeof *g->kv);
	g->tensor = calloc(g->n_tensor ? g->n_tensor : 1, sizeof *g->tensor);
	if (!g->kv || !g->tensor)
		return sekv_errf(r->err, r->errlen, SEKV_ENOMEM,
				 "gguf: %s: tables: out of memory", r->name);
	for (uint64_t i = 0; i < g->n_kv; i++)
		if ((rc = parse_kv(r, &g->kv[i], i, &n_str)))
			return rc;
	if ((rc = index_kvs(gi, n_str, r)) || (rc = read_alignment(g, r)))
		return rc;
	for (uint64_t i = 0; i < g->n_tensor; i++)
		if ((rc = parse_tensor_info(r, &g->tensor[i], i)))
			return rc;
	a = g->alignment;
	/* r->off < SIZE_MAX - 2^32, so this cannot wrap */
	g->data_offset = (size_t)((r->off + a - 1) / a * a);
	if (g->n_tensor && g->data_offset > r->size)
		return sekv_errf(r->err, r->errlen, SEKV_EFORMAT,
				 "gguf: %s: data section: starts at %zu, past end of file (%zu)",
				 r->name, g->data_offset, r->size);
	for (uint64_t i = 0; i < g->n_tensor; i++)
		if ((rc = check_tensor(g, &g->tensor[i], r)))
			return rc;
	return index_tensors(gi, r);
}

static int gguf_open_impl(struct gguf **out, const uint8_t *buf, size_t size,
			  const char *name, int mapped, char *err, size_t errlen)
{
	struct gguf_impl *gi;
	struct gguf_rd r = {buf, size, 0, name, err, errlen};
	int rc;

	*out = NULL;
	gi = calloc(1, sizeof *gi);
	if (!gi || !(gi->pub.path = strdup(name))) {
		free(gi);
		if (mapped)
			munmap((void *)(uintptr_t)buf, size);
		return sekv_errf(err, errlen, SEKV_ENOMEM, "gguf: %s: out of memory", name);
	}
	gi->pub.map = buf;
	gi->pub.size = size;
	gi->mapped = mapped;
	rc = parse_all(gi, &r);
	if (rc) {
		gguf_close(&gi->pub);
		return rc;
	}
	*out = &gi->pub;
	return 0;
}

int gguf_open_buffer(struct gguf **out, const void *buf, size_t size,
		     const char *name, char *err, size_t errlen)
{
	return gguf_open_impl(out, buf, size, name ? name : "(buffer)", 0, err, errlen);
}

int gguf_open(struct gguf **out, const char *path, char *err, size_t errlen)
{
	off_t size;
	void *map;
	int fd, rc;

	*out = NULL;
	if ((rc = file_open_regular(path, "gguf", &fd, &size, err, errlen)))
		return rc;
	if (size < 24) {
		close(fd);
		return sekv_errf(err, errlen, SEKV_EFORMAT,
				 "gguf: %s: header: file too small (%lld bytes)",
				 path, (long long)size);
	}
	if ((uint64_t)size > SIZE_MAX) {
		close(fd);
		return sekv_errf(err, errlen, SEKV_EIO, "gguf: %s: mmap: file too large", path);
	}
	map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED) {
		int e = errno;
		close(fd);
		return sekv_errf(err, errlen, SEKV_EIO, "gguf: %s: mmap: %s", path, strerror(e));
	}
	close(fd); /* the mapping keeps the file */
	return gguf_open_impl(out, map, (size_t)size, path, 1, err, errlen);
}

void gguf_close(struct gguf *g)
{
	struct gguf_impl *gi;

	if (!g)
		return;
	gi = impl_of(g);
	if (gi->mapped && g->map)
		munmap((void *)(uintptr_t)g->map, g->size);
	free(g->path);
	free(g->kv);
	free(g->tensor);
	free(gi->str_first);
	free(gi->str_ptr);
	free(gi->kv_hash);
	free(gi->t_hash);
	free(gi);
}

/* ---- lookups ---------------------------------------------------------- */

const struct gguf_kv *gguf_find_kv(const struct gguf *g, const char *key)
{
	const struct gguf_impl *gi = impl_of(g);
	uint64_t s;

	if (!gi->kv_hash)
		return NULL;
	s = hash_slot(gi->kv_hash, gi->kv_cap, key, strlen(key), kv_name, g);
	return gi->kv_hash[s] ? &g->kv[gi->kv_hash[s] - 1] : NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf *g, const char *name)
{
	const struct gguf_impl *gi = impl_of(g);
	uint64_t s;

	if (!gi->t_hash)
		return NULL;
	s = hash_slot(gi->t_hash, gi->t_cap, name, strlen(name), tensor_name, g);
	return gi->t_hash[s] ? &g->tensor[gi->t_hash[s] - 1] : NULL;
}

int gguf_arr_str(const struct gguf *g, const struct gguf_kv *kv, uint64_t i,
		 struct gguf_str *out)
{
	const struct gguf_impl *gi = impl_of(g);
	uint64_t k;
	const uint8_t *p;

	if (!kv || kv < g->kv || kv >= g->kv + g->n_kv || kv->type != GGUF_ARRAY)
		return SEKV_EINVAL;
	if (kv->arr_type != GGUF_STRING)
		return SEKV_EFORMAT;
	if (i >= kv->arr_n)
		return SEKV_EINVAL;
	k = gi->str_first[kv - g->kv];
	p = gi->str_ptr[k + i];
	memcpy(&out->len, p, 8);
	out->ptr = (const char *)p + 8;
	return 0;
}
