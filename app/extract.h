/* extract.h - document text extraction: plain text and Markdown (PDF
 * comes later; chat histories read from this text: app/history.h). Output
 * is valid UTF-8 with LF line ends. */
#ifndef SEKV_APP_EXTRACT_H
#define SEKV_APP_EXTRACT_H

#include <stddef.h>

#define EXTRACT_MAX_BYTES ((size_t)256 << 20)

/* Reads path into a malloc'ed NUL-terminated UTF-8 string (*text, caller
 * frees), *len bytes. CRLF/CR become LF; invalid UTF-8 bytes become U+FFFD
 * (*n_replaced counts them). Errors: SEKV_EIO (errno text, or "not a
 * regular file": a FIFO is refused before it could block), SEKV_EFORMAT
 * (NUL bytes: not a text file; PDF given before PDF support), SEKV_EINVAL
 * (empty, or larger than EXTRACT_MAX_BYTES). */
int extract_text_file(const char *path, char **text, size_t *len,
		      size_t *n_replaced, char *err, size_t errlen);

/* Validates/cleans a buffer the same way (used for questions too). Returns
 * a malloc'ed string. */
char *extract_clean_dup(const char *s, size_t n, size_t *out_len, size_t *n_replaced);

#endif
