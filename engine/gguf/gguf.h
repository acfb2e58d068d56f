/* gguf.h - read-only, memory-mapped reader for GGUF v2/v3 model files.
 *
 * Format: ggml's GGUF spec (docs/gguf.md in the ggml repository): magic
 * "GGUF", version, tensor count, metadata count (u64 in v2/v3), metadata
 * key/values, tensor infos, padding to general.alignment (default 32), data.
 * Invariant: after gguf_open succeeds every key, string, array and tensor
 * extent has been checked against the file size; accessors never read
 * outside the mapping. Quantised block layouts live in quant.h.
 */
#ifndef SEKV_GGUF_H
#define SEKV_GGUF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum gguf_vtype {
	GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4,
	GGUF_I32 = 5, GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STRING = 8,
	GGUF_ARRAY = 9, GGUF_U64 = 10, GGUF_I64 = 11, GGUF_F64 = 12,
	GGUF_NTYPES
};

/* A string inside the mapping: not NUL-terminated. */
struct gguf_str {
	const char *ptr;
	uint64_t len;
};

/* For a STRING value, data points at its u64 length prefix (use
 * gguf_get_str). For arrays, data points at element 0 (past the element
 * type and count); string elements are length-prefixed (use gguf_arr_str).
 * Arrays of arrays are validated (nesting <= 8) and kept with arr_type ==
 * GGUF_ARRAY; the element accessors refuse them with SEKV_EFORMAT.
 * Scalars are little-endian and unaligned: read them with memcpy. */
struct gguf_kv {
	struct gguf_str key;
	enum gguf_vtype type;      /* GGUF_ARRAY for arrays */
	enum gguf_vtype arr_type;  /* element type when type == GGUF_ARRAY */
	uint64_t arr_n;            /* element count when type == GGUF_ARRAY */
	const uint8_t *data;       /* value (or first element) inside the mapping */
	uint64_t nbytes;           /* bytes of the value/array payload */
};

#define GGUF_MAX_DIMS 4

struct gguf_tensor {
	struct gguf_str name;
	uint32_t n_dims;
	uint64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the contiguous (row) dimension; unused = 1 */
	uint32_t type;              /* ggml type id, see quant.h (enum qtype) */
	uint64_t offset;            /* relative to the data section */
	uint64_t nbytes;            /* checked: fits inside the file */
	const void *data;           /* inside the mapping */
};

struct gguf {
	char *path;                 /* owned copy */
	const uint8_t *map;         /* whole file, PROT_READ */
	size_t size;                /* bytes */
	uint32_t version;           /* 2 or 3 */
	uint32_t alignment;         /* general.alignment or 32 */
	uint64_t n_kv;
	struct gguf_kv *kv;         /* [n_kv], owned */
	uint64_t n_tensor;
	struct gguf_tensor *tensor; /* [n_tensor], owned */
	size_t data_offset;         /* start of the tensor data section */
};

/* Maps and validates `path`. On success *out owns the mapping (gguf_close).
 * Errors: SEKV_EIO (open/mmap, errno text; "not a regular file" for a
 * FIFO, directory or device, refused before it could block), SEKV_EFORMAT (bad magic, version,
 * any count/length/offset beyond the file; message names file and field),
 * SEKV_EUNSUP (unknown tensor type), SEKV_ENOMEM. *out is NULL on error.
 * Also rejected (EFORMAT): duplicate keys or tensor names, general.alignment
 * not a u32 power of two, tensor offsets not multiples of the alignment,
 * rows not a whole number of blocks, element counts beyond int64 (product
 * of the non-zero dims). Tensor types that are known but not decodable
 * (quant_supported() == 0) open fine: callers check before use.
 * Cost: one pass over the metadata (the 262144-entry vocabulary of the
 * default model indexes in a few ms). After open, every accessor below is
 * read-only and safe to call from several threads. */
int gguf_open(struct gguf **out, const char *path, char *err, size_t errlen);

/* Same as gguf_open over a caller-owned buffer (used by tests and fuzzing);
 * buf must outlive the handle. `name` is used in messages. */
int gguf_open_buffer(struct gguf **out, const void *buf, size_t size,
		     const char *name, char *err, size_t errlen);

void gguf_close(struct gguf *g); /* NULL is a no-op */

/* Lookups return NULL when absent. Keys are compared exactly; both are
 * O(1) (hash tables built at open). Only for handles from gguf_open*. */
const struct gguf_kv *gguf_find_kv(const struct gguf *g, const char *key);
const struct gguf_tensor *gguf_find_tensor(const struct gguf *g, const char *name);

/* Typed getters: 0 on success, SEKV_ENOTFOUND if absent, SEKV_EFORMAT if the
 * stored type does not convert (integers convert between widths when the
 * value fits; f32/f64 convert to each other). */
int gguf_get_u32(const struct gguf *g, const char *key, uint32_t *out);
int gguf_get_i64(const struct gguf *g, const char *key, int64_t *out);
int gguf_get_f32(const struct gguf *g, const char *key, float *out);
int gguf_get_bool(const struct gguf *g, const char *key, int *out);
int gguf_get_str(const struct gguf *g, const char *key, struct gguf_str *out);

/* Array access: element i of an array kv. Strings inside arrays are
 * length-prefixed, so gguf_arr_str walks an index built at open (O(1)).
 * Both return SEKV_EINVAL when kv is not an array (or, for gguf_arr_str,
 * not one of g's keys) or i >= arr_n, SEKV_EFORMAT when the element type
 * does not fit the call. */
int gguf_arr_str(const struct gguf *g, const struct gguf_kv *kv, uint64_t i,
		 struct gguf_str *out);
/* Numeric element i converted to double (any numeric or bool element type). */
int gguf_arr_num(const struct gguf_kv *kv, uint64_t i, double *out);

/* Size in bytes of a scalar type (0 for STRING/ARRAY). */
size_t gguf_vtype_size(enum gguf_vtype t);
const char *gguf_vtype_name(enum gguf_vtype t);

/* Writes a human-readable dump (metadata, then tensors with shape, type,
 * bytes) to f; long arrays are abbreviated. Used by `sekv inspect`. */
void gguf_print(const struct gguf *g, FILE *f);

#endif
