/* test_utf8.c - the UTF-8 codec (engine/base/utf8.h): well-formed sequences at
 * every length boundary, each kind of malformed input (overlong, surrogate,
 * above U+10FFFF, truncated, bad continuation), an exhaustive check of
 * validity against encode(decode(x)) == x, repair counts, and the stream
 * hold-back at every cut of a multi-byte character. */
#include <stdint.h>
#include <string.h>

#include "engine/base/utf8.h"
#include "tests/test.h"

/* One decode: bytes consumed, code point, validity. */
static int dec(const char *s, size_t n, int want_len, uint32_t want_cp, int want_valid)
{
	uint32_t cp = 0;
	int valid = -1;
	int len = utf8_decode(s, n, &cp, &valid);
	return len == want_len && cp == want_cp && valid == want_valid;
}

static void utf8_decode_valid_multibyte(struct test_ctx *t)
{
	static const struct {
		const char *s;
		uint32_t cp;
	} v[] = {
		{ "A", 0x41 }, { "\x7f", 0x7f }, { "\xc2\x80", 0x80 }, { "\xc3\xa9", 0xe9 },
		{ "\xdf\xbf", 0x7ff }, { "\xe0\xa0\x80", 0x800 }, { "\xe2\x82\xac", 0x20ac },
		{ "\xed\x9f\xbf", 0xd7ff }, { "\xee\x80\x80", 0xe000 }, { "\xef\xbf\xbd", 0xfffd },
		{ "\xef\xbf\xbf", 0xffff }, { "\xf0\x90\x80\x80", 0x10000 },
		{ "\xf0\x9f\x93\x9c", 0x1f4dc }, { "\xf4\x8f\xbf\xbf", 0x10ffff },
	};
	char enc[4];

	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
		size_t n = strlen(v[i].s);
		/* trailing bytes after the character are not consumed */
		char buf[8];
		memcpy(buf, v[i].s, n);
		buf[n] = 'z';
		T_CHECKF(t, dec(buf, n + 1, (int)n, v[i].cp, 1), "U+%04X", (unsigned)v[i].cp);
		T_CHECKF(t, utf8_encode(v[i].cp, enc) == (int)n && !memcmp(enc, v[i].s, n),
			 "encode U+%04X", (unsigned)v[i].cp);
	}
	T_CHECK(t, utf8_decode("x", 0, &(uint32_t){ 1 }, NULL) == 0);
}

static void utf8_decode_rejects_overlong(struct test_ctx *t)
{
	T_CHECK(t, dec("\xc0\x80", 2, 1, 0xfffd, 0));         /* U+0000 in 2 bytes */
	T_CHECK(t, dec("\xc1\xbf", 2, 1, 0xfffd, 0));         /* U+007F in 2 bytes */
	T_CHECK(t, dec("\xe0\x80\x80", 3, 1, 0xfffd, 0));
	T_CHECK(t, dec("\xe0\x9f\xbf", 3, 1, 0xfffd, 0));     /* U+07FF in 3 bytes */
	T_CHECK(t, dec("\xf0\x80\x80\x80", 4, 1, 0xfffd, 0));
	T_CHECK(t, dec("\xf0\x8f\xbf\xbf", 4, 1, 0xfffd, 0)); /* U+FFFF in 4 bytes */
}

static void utf8_decode_rejects_surrogates(struct test_ctx *t)
{
	char enc[4];

	T_CHECK(t, dec("\xed\xa0\x80", 3, 1, 0xfffd, 0));     /* U+D800 */
	T_CHECK(t, dec("\xed\xbf\xbf", 3, 1, 0xfffd, 0));     /* U+DFFF */
	T_CHECK(t, utf8_encode(0xd800, enc) == 3 && !memcmp(enc, "\xef\xbf\xbd", 3));
}

static void utf8_decode_rejects_above_10ffff(struct test_ctx *t)
{
	char enc[4];

	T_CHECK(t, dec("\xf4\x90\x80\x80", 4, 1, 0xfffd, 0)); /* U+110000 */
	T_CHECK(t, dec("\xf5\x80\x80\x80", 4, 1, 0xfffd, 0));
	T_CHECK(t, dec("\xf8\x88\x80\x80\x80", 5, 1, 0xfffd, 0));
	T_CHECK(t, dec("\xff", 1, 1, 0xfffd, 0));
	T_CHECK(t, utf8_encode(0x110000, enc) == 3 && !memcmp(enc, "\xef\xbf\xbd", 3));
}

static void utf8_decode_rejects_truncated(struct test_ctx *t)
{
	/* the maximal valid subpart is consumed as one malformed character */
	T_CHECK(t, dec("\xc3", 1, 1, 0xfffd, 0));
	T_CHECK(t, dec("\xe4\xb8", 2, 2, 0xfffd, 0));
	T_CHECK(t, dec("\xf0\x9f\x93", 3, 3, 0xfffd, 0));
	T_CHECK(t, dec("\xf0\x9f\x93" "A", 4, 3, 0xfffd, 0));
	T_CHECK(t, dec("\xe4\x41\x41", 3, 1, 0xfffd, 0));     /* bad continuation */
	T_CHECK(t, dec("\x80", 1, 1, 0xfffd, 0));             /* stray continuation */
}

/* Reference validity of a whole n-byte sequence, written differently from
 * utf8.c: decode the bits without range tables, then accept only when the
 * shortest encoding of the result is the input and it is a scalar value. */
static int ref_valid(const unsigned char *u, int n, uint32_t *cp)
{
	static const unsigned mask[5] = { 0, 0x7f, 0x1f, 0x0f, 0x07 };
	uint32_t c = u[0] & mask[n];
	char enc[4];

	if (n == 1 ? u[0] >= 0x80 : (u[0] & (0xff << (7 - n))) != ((0xff << (8 - n)) & 0xff))
		return 0;
	for (int i = 1; i < n; i++) {
		if ((u[i] & 0xc0) != 0x80)
			return 0;
		c = (c << 6) | (u[i] & 0x3f);
	}
	if (c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	*cp = c;
	return utf8_encode(c, enc) == n && !memcmp(enc, u, (size_t)n);
}

static void utf8_decode_matches_reference_exhaustive(struct test_ctx *t)
{
	unsigned char u[4];
	uint32_t cp, rcp;
	int valid, n_valid = 0;

	/* every 1-, 2- and 3-byte input; 4-byte inputs with each lead
	 * f0..f4, every second and third byte, three fourth bytes */
	for (uint32_t x = 0; x < (1u << 24); x++) {
		int n = x < 0x100 ? 1 : x < 0x10000 ? 2 : 3;
		for (int i = 0; i < n; i++)
			u[i] = (unsigned char)(x >> (8 * (n - 1 - i)));
		int len = utf8_decode((const char *)u, (size_t)n, &cp, &valid);
		int want = ref_valid(u, n, &rcp);
		if (want != (valid && len == n) || (want && cp != rcp)) {
			T_FAIL(t, "bytes %06x: len %d valid %d cp %x, reference %d", (unsigned)x, len, valid,
			       (unsigned)cp, want);
			return;
		}
		n_valid += want;
	}
	/* U+0000..U+FFFF less the surrogates */
	T_CHECKF(t, n_valid == 0x10000 - 0x800, "%d valid", n_valid);
	static const unsigned char last[3] = { 0x80, 0xbf, 0x41 };
	for (unsigned lead = 0xf0; lead <= 0xf4; lead++)
		for (unsigned b1 = 0; b1 < 256; b1++)
			for (unsigned b2 = 0; b2 < 256; b2++)
				for (int k = 0; k < 3; k++) {
					u[0] = (unsigned char)lead;
					u[1] = (unsigned char)b1;
					u[2] = (unsigned char)b2;
					u[3] = last[k];
					int len = utf8_decode((const char *)u, 4, &cp, &valid);
					int want = ref_valid(u, 4, &rcp);
					T_CHECKF(t, want == (valid && len == 4) && (!want || cp == rcp),
						 "bytes %02x %02x %02x %02x", lead, b1, b2, last[k]);
				}
}

static void utf8_repair_counts_invalid_bytes(struct test_ctx *t)
{
	const char in[] = "ok \xc3\xa9 \xff \xe2\x82 \xed\xa0\x80 \xf4\x90\x80\x80 end \xf0\x9f\x93";
	const char want[] = "ok \xc3\xa9 \xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd "
			    "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd "
			    "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd end "
			    "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd";
	char out[3 * sizeof in];
	size_t bad = 99, n;

	n = utf8_repair(in, sizeof in - 1, out, &bad);
	T_CHECKF(t, n == sizeof want - 1 && !memcmp(out, want, n), "n %zu", n);
	/* ff: 1, e2 82: 2, surrogate: 3, > U+10FFFF: 4, truncated tail: 3 */
	T_CHECKF(t, bad == 13, "bad %zu", bad);
	T_CHECK(t, utf8_repair(in, sizeof in - 1, NULL, &bad) == n && bad == 13);
	n = utf8_repair(out, n, NULL, &bad);
	T_CHECK(t, n == sizeof want - 1 && bad == 0);
	T_CHECK(t, utf8_repair("", 0, NULL, &bad) == 0 && bad == 0);
}

static void utf8_complete_cases(struct test_ctx *t)
{
	T_CHECK(t, utf8_complete("abc", 3) == 3);
	T_CHECK(t, utf8_complete("", 0) == 0);
	T_CHECK(t, utf8_complete("a\xc3", 2) == 1);             /* é cut */
	T_CHECK(t, utf8_complete("a\xc3\xa9", 3) == 3);
	T_CHECK(t, utf8_complete("a\xe2\x96", 3) == 1);         /* U+2581 cut */
	T_CHECK(t, utf8_complete("\xf0\x9f\x98", 3) == 0);      /* 😀 cut */
	T_CHECK(t, utf8_complete("\xf0\x9f\x98\x80", 4) == 4);
	T_CHECK(t, utf8_complete("x\x80\x80\x80\x80", 5) == 5); /* stray */
	T_CHECK(t, utf8_complete("x\xff", 2) == 2);             /* never valid */
}

static void utf8_complete_every_cut(struct test_ctx *t)
{
	static const char *const seq[] = {
		"\xc3\xa9", "\xe2\x82\xac", "\xef\xbf\xbd", "\xf0\x9f\x93\x9c", "\xf4\x8f\xbf\xbf",
	};
	char buf[16];

	for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) {
		size_t len = strlen(seq[i]);
		memcpy(buf, "ab", 2);
		memcpy(buf + 2, seq[i], len);
		for (size_t cut = 0; cut <= len; cut++) {
			size_t want = cut == 0 || cut == len ? 2 + cut : 2;
			T_CHECKF(t, utf8_complete(buf, 2 + cut) == want, "seq %zu cut %zu: %zu", i, cut,
				 utf8_complete(buf, 2 + cut));
		}
		/* the whole character alone, cut everywhere */
		for (size_t cut = 1; cut < len; cut++)
			T_CHECK(t, utf8_complete(seq[i], cut) == 0);
	}
	/* bytes that can never complete are not held back */
	T_CHECK(t, utf8_complete("ab\x80", 3) == 3);
	T_CHECK(t, utf8_complete("ab\xff", 3) == 3);
	T_CHECK(t, utf8_complete("ab\xe0\x80", 4) == 4);     /* overlong start */
	T_CHECK(t, utf8_complete("ab\xed\xa0", 4) == 4);     /* surrogate start */
	T_CHECK(t, utf8_complete("ab\xf4\x90", 4) == 4);     /* above U+10FFFF */
	T_CHECK(t, utf8_complete("ab\xe4\x41", 4) == 4);
	T_CHECK(t, utf8_complete("\x80\x80\x80", 3) == 3);
	T_CHECK(t, utf8_complete("", 0) == 0);
}

const struct test_case test_utf8[] = {
	{ "utf8_decode_valid_multibyte", utf8_decode_valid_multibyte },
	{ "utf8_decode_rejects_overlong", utf8_decode_rejects_overlong },
	{ "utf8_decode_rejects_surrogates", utf8_decode_rejects_surrogates },
	{ "utf8_decode_rejects_above_10ffff", utf8_decode_rejects_above_10ffff },
	{ "utf8_decode_rejects_truncated", utf8_decode_rejects_truncated },
	{ "utf8_decode_matches_reference_exhaustive", utf8_decode_matches_reference_exhaustive },
	{ "utf8_repair_counts_invalid_bytes", utf8_repair_counts_invalid_bytes },
	{ "utf8_complete_every_cut", utf8_complete_every_cut },
	{ "utf8_complete_cases", utf8_complete_cases },
	{ NULL, NULL },
};
