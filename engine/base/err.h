/* err.h - error codes and the error-buffer convention shared by every module.
 *
 * A function that can fail returns 0 or a negative SEKV_E* code and, when the
 * caller passed a buffer, writes one line "what: object: why" into it.
 * Nothing here allocates; sekv_errf truncates safely.
 */
#ifndef SEKV_ERR_H
#define SEKV_ERR_H

#include <stddef.h>

enum {
	SEKV_OK = 0,
	SEKV_EIO = -1,      /* open/read/write/mmap failed (errno in message) */
	SEKV_EFORMAT = -2,  /* malformed or truncated file, bad field */
	SEKV_ENOMEM = -3,   /* allocation failed */
	SEKV_EINVAL = -4,   /* bad argument or option */
	SEKV_EUNSUP = -5,   /* valid but unsupported (tensor type, architecture) */
	SEKV_ENOTFOUND = -6,/* key, tensor, document or row absent */
	SEKV_EDB = -7,      /* SQLite error (message included) */
	SEKV_EMISMATCH = -8,/* e.g. document ingested with another model */
	SEKV_EBUDGET = -9,  /* budget cannot be met */
	SEKV_EINTR = -10,   /* interrupted by the user */
	SEKV_EBUSY = -11,   /* held by another process (a document being ingested) */
};

/* Writes a printf-style message into err[errlen] when err is non-NULL and
 * errlen > 0; always NUL-terminates. Returns code unchanged so callers can
 * write `return sekv_errf(err, errlen, SEKV_EIO, "open: %s: %s", ...)`. */
int sekv_errf(char *err, size_t errlen, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Short static name of a code ("io", "format", ...). */
const char *sekv_strerror(int code);

#endif
