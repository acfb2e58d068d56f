/* extract.c - plain text / Markdown loading with UTF-8 repair (extract.h). */
#include "app/extract.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/err.h"
#include "engine/file.h"
#include "engine/utf8.h"

char *extract_clean_dup(const char *s, size_t n, size_t *out_len, size_t *n_replaced)
{
	/* worst case: every byte becomes the 3-byte U+FFFD */
	char *out = malloc(n * 3 + 1);
	size_t len, o = 0;

	if (!out)
		return NULL;
	len = utf8_repair(s, n, out, n_replaced);
	/* CR is ASCII, never part of a sequence: normalise after the repair */
	for (size_t i = 0; i < len; i++) {
		if (out[i] != '\r') {
			out[o++] = out[i];
			continue;
		}
		out[o++] = '\n';
		if (i + 1 < len && out[i + 1] == '\n')
			i++;
	}
	out[o] = 0;
	if (out_len)
		*out_len = o;
	return out;
}

int extract_text_file(const char *path, char **text, size_t *len,
		      size_t *n_replaced, char *err, size_t errlen)
{
	off_t size;
	FILE *f;
	char *raw = NULL;
	int fd, rc;

	*text = NULL;
	if ((rc = file_open_regular(path, "read", &fd, &size, err, errlen)))
		return rc;
	if (!(f = fdopen(fd, "rb"))) {
		rc = sekv_errf(err, errlen, SEKV_EIO, "read: %s: %s", path, strerror(errno));
		close(fd);
		return rc;
	}
	if (size == 0) {
		rc = sekv_errf(err, errlen, SEKV_EINVAL, "read: %s: file is empty", path);
		goto out;
	}
	if ((size_t)size > EXTRACT_MAX_BYTES) {
		rc = sekv_errf(err, errlen, SEKV_EINVAL, "read: %s: %lld bytes, more than the %zu MiB limit",
			       path, (long long)size, EXTRACT_MAX_BYTES >> 20);
		goto out;
	}
	raw = malloc((size_t)size);
	if (!raw) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "read: %s: out of memory", path);
		goto out;
	}
	if (fread(raw, 1, (size_t)size, f) != (size_t)size) {
		rc = sekv_errf(err, errlen, SEKV_EIO, "read: %s: %s", path, strerror(errno));
		goto out;
	}
	if (size >= 5 && !memcmp(raw, "%PDF-", 5)) {
		rc = sekv_errf(err, errlen, SEKV_EUNSUP,
			       "read: %s: PDF documents are not supported yet (plain text and Markdown are)", path);
		goto out;
	}
	if (memchr(raw, 0, (size_t)size)) {
		rc = sekv_errf(err, errlen, SEKV_EFORMAT, "read: %s: contains NUL bytes: not a text file", path);
		goto out;
	}
	*text = extract_clean_dup(raw, (size_t)size, len, n_replaced);
	if (!*text) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "read: %s: out of memory", path);
	} else if (strspn(*text, " \t\n\v\f") == *len) {
		rc = sekv_errf(err, errlen, SEKV_EINVAL, "read: %s: no text (only white space)", path);
		free(*text);
		*text = NULL;
	}
out:
	free(raw);
	fclose(f);
	return rc;
}
