/* utf8.c - the UTF-8 codec declared in utf8.h.
 *
 * Invariant: one scanner (scan) decides well-formedness for every entry
 * point, so decoding, repair and stream hold-back never disagree about
 * where a character ends. No function reads past n.
 */
#include "engine/base/utf8.h"

#include <string.h>

enum { SCAN_BAD = 0, SCAN_OK = 1, SCAN_SHORT = 2 };

/* Scans the sequence at u[0..n), n >= 1. Returns SCAN_OK (*len bytes,
 * code point *cp), SCAN_BAD (*len = maximal valid subpart, >= 1) or
 * SCAN_SHORT (all n bytes are a well-formed start that needs more). */
static int scan(const unsigned char *u, size_t n, uint32_t *cp, int *len)
{
	uint32_t c = u[0];
	unsigned lo = 0x80, hi = 0xbf;
	int need;

	if (c < 0x80) {
		*cp = c;
		*len = 1;
		return SCAN_OK;
	}
	/* The second byte's range excludes overlongs, surrogates and values
	 * above U+10FFFF (Unicode 15, table 3-7). */
	if (c >= 0xc2 && c <= 0xdf) {
		need = 2;
		c &= 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		need = 3;
		c &= 0x0f;
		lo = c == 0 ? 0xa0 : 0x80;
		hi = c == 0x0d ? 0x9f : 0xbf;
	} else if (c >= 0xf0 && c <= 0xf4) {
		need = 4;
		c &= 0x07;
		lo = c == 0 ? 0x90 : 0x80;
		hi = c == 4 ? 0x8f : 0xbf;
	} else {
		*cp = UTF8_REPLACEMENT;
		*len = 1;
		return SCAN_BAD;
	}
	for (int i = 1; i < need; i++) {
		if ((size_t)i >= n) {
			*cp = UTF8_REPLACEMENT;
			*len = i;
			return SCAN_SHORT;
		}
		unsigned b = u[i];
		if (i == 1 ? b < lo || b > hi : (b & 0xc0) != 0x80) {
			*cp = UTF8_REPLACEMENT;
			*len = i;
			return SCAN_BAD;
		}
		c = (c << 6) | (b & 0x3f);
	}
	*cp = c;
	*len = need;
	return SCAN_OK;
}

int utf8_decode(const char *s, size_t n, uint32_t *cp, int *valid)
{
	int len = 0, st;

	if (n == 0) {
		*cp = 0;
		if (valid)
			*valid = 0;
		return 0;
	}
	st = scan((const unsigned char *)s, n, cp, &len);
	if (valid)
		*valid = st == SCAN_OK;
	return len;
}

int utf8_encode(uint32_t cp, char out[4])
{
	if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		cp = UTF8_REPLACEMENT;
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xc0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xe0 | (cp >> 12));
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		out[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | (cp >> 18));
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	out[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

size_t utf8_repair(const char *s, size_t n, char *out, size_t *n_bad)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0, o = 0, bad = 0;
	uint32_t cp;
	int len;

	while (i < n) {
		if (scan(u + i, n - i, &cp, &len) == SCAN_OK) {
			if (out)
				memcpy(out + o, u + i, (size_t)len);
			o += (size_t)len;
		} else {
			/* One U+FFFD per byte: the count is of bytes, and a
			 * document's length in characters stays predictable. */
			for (int k = 0; k < len; k++, o += 3)
				if (out)
					memcpy(out + o, "\xef\xbf\xbd", 3);
			bad += (size_t)len;
		}
		i += (size_t)len;
	}
	if (n_bad)
		*n_bad = bad;
	return o;
}

size_t utf8_complete(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	uint32_t cp;
	int len;

	/* Only a sequence that starts in the last 3 bytes can be cut off. */
	for (size_t back = 1; back <= 3 && back <= n; back++) {
		if ((u[n - back] & 0xc0) == 0x80)
			continue;
		return scan(u + n - back, back, &cp, &len) == SCAN_SHORT ? n - back : n;
	}
	return n;
}
