/* extract.c - reading a document file: PDF or text by its first bytes,
 * text decoded from UTF-8 (BOM dropped), UTF-16 LE/BE with BOM, or a
 * single-byte Latin encoding when the bytes are not UTF-8 (extract.h).
 * Every decoder writes through engine/base/utf8.c (the one UTF-8 codec); the
 * result is always valid UTF-8 with LF line ends. PDF parsing lives in
 * extract_pdf.c, joining page texts in extract_pages.c.
 */
#include "app/extract.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/err.h"
#include "engine/base/file.h"
#include "engine/base/utf8.h"

/* Windows-1252 bytes 0x80..0x9F; 0 where the code page leaves one undefined. */
static const uint16_t cp1252_c1[32] = {
	0x20ac, 0, 0x201a, 0x0192, 0x201e, 0x2026, 0x2020, 0x2021,
	0x02c6, 0x2030, 0x0160, 0x2039, 0x0152, 0, 0x017d, 0,
	0, 0x2018, 0x2019, 0x201c, 0x201d, 0x2022, 0x2013, 0x2014,
	0x02dc, 0x2122, 0x0161, 0x203a, 0x0153, 0, 0x017e, 0x0178,
};

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

/* UTF-16 code units raw[0..n) (big-endian when be) as UTF-8 into a new
 * buffer *out [*len]; an unpaired surrogate or a trailing odd byte is one
 * U+FFFD, counted in *n_bad. 0, SEKV_EFORMAT (a NUL character: binary),
 * SEKV_ENOMEM. */
static int utf16_to_utf8(const unsigned char *raw, size_t n, int be, char **out, size_t *len,
			 size_t *n_bad)
{
	char *o = malloc(n / 2 * 3 + 4); /* a unit is at most 3 bytes, a pair 4 */
	size_t at = 0;

	if (!o)
		return SEKV_ENOMEM;
	*n_bad = 0;
	for (size_t i = 0; i + 1 < n; i += 2) {
		uint32_t c = be ? (uint32_t)raw[i] << 8 | raw[i + 1] : (uint32_t)raw[i + 1] << 8 | raw[i];
		if (c == 0) {
			free(o);
			return SEKV_EFORMAT;
		}
		if (c >= 0xd800 && c <= 0xdbff && i + 3 < n) {
			uint32_t d = be ? (uint32_t)raw[i + 2] << 8 | raw[i + 3]
					: (uint32_t)raw[i + 3] << 8 | raw[i + 2];
			if (d >= 0xdc00 && d <= 0xdfff) {
				c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
				i += 2;
			}
		}
		if (c >= 0xd800 && c <= 0xdfff)
			(*n_bad)++; /* utf8_encode writes U+FFFD for it */
		at += (size_t)utf8_encode(c, o + at);
	}
	if (n % 2) {
		at += (size_t)utf8_encode(UTF8_REPLACEMENT, o + at);
		(*n_bad)++;
	}
	*out = o;
	*len = at;
	return 0;
}

/* Single-byte text raw[0..n) as UTF-8: Windows-1252 when c1 (its five
 * undefined bytes become U+FFFD, counted), else ISO-8859-1. */
static char *latin_to_utf8(const unsigned char *raw, size_t n, int c1, size_t *len, size_t *n_bad)
{
	char *o = malloc(n * 3 + 1);
	size_t at = 0;

	if (!o)
		return NULL;
	*n_bad = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t c = raw[i];
		if (c1 && c >= 0x80 && c < 0xa0) {
			c = cp1252_c1[c - 0x80];
			if (!c) {
				c = UTF8_REPLACEMENT;
				(*n_bad)++;
			}
		}
		at += (size_t)utf8_encode(c, o + at);
	}
	*len = at;
	return o;
}

/* The 8-bit case: 1 when raw reads better as a single-byte encoding than
 * as UTF-8 with replacements (fewer valid multi-byte characters than a
 * sixteenth of the invalid bytes); *c1 = 1 when bytes 0x80..0x9F occur. */
static int looks_single_byte(const char *raw, size_t n, int *c1)
{
	size_t n_mb = 0, n_bad = 0;
	uint32_t cp;
	int valid;

	*c1 = 0;
	for (size_t i = 0; i < n;) {
		int k = utf8_decode(raw + i, n - i, &cp, &valid);
		if (!valid)
			n_bad += (size_t)k;
		else if (k > 1)
			n_mb++;
		i += (size_t)k;
	}
	for (size_t i = 0; n_bad && i < n && !*c1; i++)
		*c1 = (unsigned char)raw[i] >= 0x80 && (unsigned char)raw[i] < 0xa0;
	return n_bad > 0 && n_mb * 16 < n_bad;
}

/* raw as UTF-8 (valid or not) into *utf8 [*len] (malloc'ed) and the
 * encoding it was read in. */
static int decode_any(const char *name, const char *raw, size_t n, struct extract_doc *d,
		      char **utf8, size_t *len, char *err, size_t errlen)
{
	const unsigned char *u = (const unsigned char *)raw;
	int c1, rc;

	*utf8 = NULL;
	if (n >= 2 && ((u[0] == 0xff && u[1] == 0xfe) || (u[0] == 0xfe && u[1] == 0xff))) {
		int be = u[0] == 0xfe;
		d->encoding = be ? "UTF-16BE" : "UTF-16LE";
		d->bom = 1;
		rc = utf16_to_utf8(u + 2, n - 2, be, utf8, len, &d->n_replaced);
		if (rc == SEKV_EFORMAT)
			return sekv_errf(err, errlen, rc, "read: %s: %s text with NUL characters: not a text file",
					 name, d->encoding);
		return rc ? sekv_errf(err, errlen, rc, "read: %s: out of memory", name) : 0;
	}
	if (memchr(raw, 0, n))
		return sekv_errf(err, errlen, SEKV_EFORMAT, "read: %s: contains NUL bytes: not a text file", name);
	if (n >= 3 && u[0] == 0xef && u[1] == 0xbb && u[2] == 0xbf) {
		d->bom = 1;
		raw += 3;
		n -= 3;
	}
	d->encoding = "UTF-8";
	if (!d->bom && looks_single_byte(raw, n, &c1)) {
		d->encoding = c1 ? "Windows-1252" : "ISO-8859-1";
		*utf8 = latin_to_utf8((const unsigned char *)raw, n, c1, len, &d->n_replaced);
	} else if ((*utf8 = malloc(n + 1))) {
		memcpy(*utf8, raw, n);
		*len = n;
	}
	return *utf8 ? 0 : sekv_errf(err, errlen, SEKV_ENOMEM, "read: %s: out of memory", name);
}

int extract_text_buf(const char *name, const char *raw, size_t n, struct extract_doc *d,
		     char *err, size_t errlen)
{
	char *utf8 = NULL;
	size_t len = 0, n_bad = 0;
	int rc;

	memset(d, 0, sizeof *d);
	if (n == 0)
		return sekv_errf(err, errlen, SEKV_EINVAL, "read: %s: file is empty", name);
	if ((rc = decode_any(name, raw, n, d, &utf8, &len, err, errlen)))
		return rc;
	d->text = extract_clean_dup(utf8, len, &d->len, &n_bad);
	free(utf8);
	d->n_replaced += n_bad;
	if (!d->text)
		return sekv_errf(err, errlen, SEKV_ENOMEM, "read: %s: out of memory", name);
	if (strspn(d->text, " \t\n\v\f") == d->len)
		return sekv_errf(err, errlen, SEKV_EINVAL, "read: %s: no text (only white space)", name);
	return 0;
}

/* The whole regular file at path into a new buffer *raw [*n]. */
static int read_all(const char *path, char **raw, size_t *n, char *err, size_t errlen)
{
	off_t size;
	ssize_t got = 0;
	int fd, rc;

	*raw = NULL;
	if ((rc = file_open_regular(path, "read", &fd, &size, err, errlen)))
		return rc;
	if ((size_t)size > EXTRACT_MAX_BYTES)
		rc = sekv_errf(err, errlen, SEKV_EINVAL, "read: %s: %lld bytes, more than the %zu MiB limit",
			       path, (long long)size, EXTRACT_MAX_BYTES >> 20);
	else if (!(*raw = malloc((size_t)size + 1)))
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "read: %s: out of memory", path);
	for (*n = 0; !rc && *n < (size_t)size; *n += (size_t)got) {
		got = read(fd, *raw + *n, (size_t)size - *n);
		if (got < 0 && errno == EINTR)
			got = 0;
		else if (got <= 0)
			rc = sekv_errf(err, errlen, SEKV_EIO, "read: %s: %s", path,
				       got < 0 ? strerror(errno) : "file shrank while read");
	}
	close(fd);
	return rc;
}

int extract_file(const char *path, const struct extract_params *p, struct extract_doc *d,
		 char *err, size_t errlen)
{
	static const struct extract_params none;
	char *raw = NULL;
	size_t n = 0;
	int rc;

	memset(d, 0, sizeof *d);
	if ((rc = read_all(path, &raw, &n, err, errlen)))
		goto out;
	/* poppler reads the file itself (extract_pdf.c says why) */
	if (memmem(raw, n < 1024 ? n : 1024, "%PDF-", 5)) {
		free(raw);
		raw = NULL;
		rc = extract_pdf(path, p ? p : &none, d, err, errlen);
	} else {
		rc = extract_text_buf(path, raw, n, d, err, errlen);
	}
out:
	free(raw);
	return rc;
}

int extract_page_of(const int64_t *start, int n_page, int64_t at)
{
	int lo = 0, hi = n_page - 1;

	if (n_page <= 0)
		return -1;
	/* the last page whose start is <= at: pages without text share the
	 * next page's start, and the byte belongs to that next page */
	while (lo < hi) {
		int mid = lo + (hi - lo + 1) / 2;
		if (start[mid] <= at)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

void extract_doc_free(struct extract_doc *d)
{
	if (!d)
		return;
	free(d->text);
	free(d->page_start);
	free(d->no_text);
	memset(d, 0, sizeof *d);
}
