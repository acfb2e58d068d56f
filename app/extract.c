/* extract.c - plain text / Markdown loading with UTF-8 repair (extract.h). */
#include "app/extract.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/err.h"

/* Length of a valid UTF-8 sequence at s[0..n), or 0 if invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	size_t len;
	unsigned min;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) { len = 2; min = 0x80; }
	else if (c >= 0xe0 && c <= 0xef) { len = 3; min = 0x800; }
	else if (c >= 0xf0 && c <= 0xf4) { len = 4; min = 0x10000; }
	else return 0;
	if (len > n)
		return 0;
	unsigned cp = c & (0xff >> (len + 1));
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

char *extract_clean_dup(const char *s, size_t n, size_t *out_len, size_t *n_replaced)
{
	/* worst case: every byte becomes the 3-byte U+FFFD */
	char *out = malloc(n * 3 + 1);
	size_t o = 0, bad = 0;
	const unsigned char *u = (const unsigned char *)s;

	if (!out)
		return NULL;
	for (size_t i = 0; i < n;) {
		if (u[i] == '\r') {
			out[o++] = '\n';
			i += (i + 1 < n && u[i + 1] == '\n') ? 2 : 1;
			continue;
		}
		size_t l = utf8_seq(u + i, n - i);
		if (!l) {
			memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
			bad++;
			i++;
			continue;
		}
		memcpy(out + o, u + i, l);
		o += l;
		i += l;
	}
	out[o] = 0;
	if (out_len)
		*out_len = o;
	if (n_replaced)
		*n_replaced = bad;
	return out;
}

int extract_text_file(const char *path, char **text, size_t *len,
		      size_t *n_replaced, char *err, size_t errlen)
{
	struct stat st;
	FILE *f = fopen(path, "rb");
	char *raw = NULL;
	int rc = 0;

	*text = NULL;
	if (!f)
		return sekv_errf(err, errlen, SEKV_EIO, "open: %s: %s", path, strerror(errno));
	if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
		rc = sekv_errf(err, errlen, SEKV_EIO, "read: %s: not a regular file", path);
		goto out;
	}
	if (st.st_size == 0) {
		rc = sekv_errf(err, errlen, SEKV_EINVAL, "read: %s: file is empty", path);
		goto out;
	}
	if ((size_t)st.st_size > EXTRACT_MAX_BYTES) {
		rc = sekv_errf(err, errlen, SEKV_EINVAL, "read: %s: %lld bytes, more than the %zu MiB limit",
			       path, (long long)st.st_size, EXTRACT_MAX_BYTES >> 20);
		goto out;
	}
	raw = malloc((size_t)st.st_size);
	if (!raw) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "read: %s: out of memory", path);
		goto out;
	}
	if (fread(raw, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
		rc = sekv_errf(err, errlen, SEKV_EIO, "read: %s: %s", path, strerror(errno));
		goto out;
	}
	if (st.st_size >= 5 && !memcmp(raw, "%PDF-", 5)) {
		rc = sekv_errf(err, errlen, SEKV_EUNSUP,
			       "read: %s: PDF documents are not supported yet (plain text and Markdown are)", path);
		goto out;
	}
	if (memchr(raw, 0, (size_t)st.st_size)) {
		rc = sekv_errf(err, errlen, SEKV_EFORMAT, "read: %s: contains NUL bytes: not a text file", path);
		goto out;
	}
	*text = extract_clean_dup(raw, (size_t)st.st_size, len, n_replaced);
	if (!*text)
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "read: %s: out of memory", path);
out:
	free(raw);
	fclose(f);
	return rc;
}
