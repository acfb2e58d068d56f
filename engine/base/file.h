/* file.h - opening an input file for reading: only regular files, checked
 * before anything can block. open() of a FIFO waits for a writer and a
 * device may never end, so every input the user names (document, -m,
 * --tokenizer) goes through file_open_regular. Reading and mapping stay
 * with the callers (extract.c, gguf.c, tokenizer_spm.cc).
 */
#ifndef SEKV_FILE_H
#define SEKV_FILE_H

#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Opens path read-only (close-on-exec) without blocking (O_NONBLOCK, then
 * cleared) and checks with fstat that it is a regular file. On success
 * *fd is the open descriptor (the caller closes it) and *size its size in
 * bytes. Errors, with *fd = -1 and err "WHAT: PATH: why": SEKV_EIO for
 * open/stat failures (errno text) and for anything but a regular file
 * ("WHAT: PATH: not a regular file"). Thread-safe. */
int file_open_regular(const char *path, const char *what, int *fd, off_t *size,
		      char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
