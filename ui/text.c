/* text.c - the pure text helpers declared in text.h: column widths (UTF-8
 * from engine/base/utf8.h), word wrap, truncation, count and percentage formatting.
 *
 * Invariant: no function reads past len, writes past cap, or returns a
 * length that ends inside a UTF-8 sequence it produced. Drawing with these
 * results lives in the panel files (transcript.c, zoom_panel.c, ...).
 */
#include "ui/text.h"

#include <stdio.h>
#include <string.h>

#include "engine/base/utf8.h"

struct range {
	uint32_t lo, hi;
};

/* Zero-width: combining marks, zero-width space/joiners, variation
 * selectors (after Markus Kuhn's wcwidth and Unicode 14 Mn/Me/Cf). */
static const struct range zero_tab[] = {
	{0x0300, 0x036f}, {0x0483, 0x0489}, {0x0591, 0x05bd}, {0x05bf, 0x05bf},
	{0x05c1, 0x05c2}, {0x05c4, 0x05c5}, {0x05c7, 0x05c7}, {0x0610, 0x061a},
	{0x064b, 0x065f}, {0x0670, 0x0670}, {0x06d6, 0x06dc}, {0x06df, 0x06e4},
	{0x06e7, 0x06e8}, {0x06ea, 0x06ed}, {0x0711, 0x0711}, {0x0730, 0x074a},
	{0x07a6, 0x07b0}, {0x0901, 0x0902}, {0x093c, 0x093c}, {0x0941, 0x0948},
	{0x094d, 0x094d}, {0x0951, 0x0954}, {0x0962, 0x0963}, {0x0e31, 0x0e31},
	{0x0e34, 0x0e3a}, {0x0e47, 0x0e4e}, {0x1ab0, 0x1aff}, {0x1dc0, 0x1dff},
	{0x200b, 0x200f}, {0x202a, 0x202e}, {0x2060, 0x2064}, {0x20d0, 0x20ff},
	{0x302a, 0x302d}, {0x3099, 0x309a}, {0xfe00, 0xfe0f}, {0xfe20, 0xfe2f},
	{0xfeff, 0xfeff}, {0x1f3fb, 0x1f3ff}, {0xe0000, 0xe0fff},
};

/* Wide: East Asian Wide/Fullwidth and emoji presentation (Unicode 14). */
static const struct range wide_tab[] = {
	{0x1100, 0x115f}, {0x231a, 0x231b}, {0x2329, 0x232a}, {0x23e9, 0x23ec},
	{0x23f0, 0x23f0}, {0x23f3, 0x23f3}, {0x25fd, 0x25fe}, {0x2614, 0x2615},
	{0x2648, 0x2653}, {0x267f, 0x267f}, {0x2693, 0x2693}, {0x26a1, 0x26a1},
	{0x26aa, 0x26ab}, {0x26bd, 0x26be}, {0x26c4, 0x26c5}, {0x26ce, 0x26ce},
	{0x26d4, 0x26d4}, {0x26ea, 0x26ea}, {0x26f2, 0x26f3}, {0x26f5, 0x26f5},
	{0x26fa, 0x26fa}, {0x26fd, 0x26fd}, {0x2705, 0x2705}, {0x270a, 0x270b},
	{0x2728, 0x2728}, {0x274c, 0x274c}, {0x274e, 0x274e}, {0x2753, 0x2755},
	{0x2757, 0x2757}, {0x2795, 0x2797}, {0x27b0, 0x27b0}, {0x27bf, 0x27bf},
	{0x2b1b, 0x2b1c}, {0x2b50, 0x2b50}, {0x2b55, 0x2b55}, {0x2e80, 0x303e},
	{0x3041, 0x33ff}, {0x3400, 0x4dbf}, {0x4e00, 0x9fff}, {0xa000, 0xa4cf},
	{0xa960, 0xa97f}, {0xac00, 0xd7a3}, {0xf900, 0xfaff}, {0xfe10, 0xfe19},
	{0xfe30, 0xfe6f}, {0xff00, 0xff60}, {0xffe0, 0xffe6}, {0x16fe0, 0x16fe4},
	{0x17000, 0x18cff}, {0x1b000, 0x1b2ff}, {0x1f004, 0x1f004},
	{0x1f0cf, 0x1f0cf}, {0x1f18e, 0x1f18e}, {0x1f191, 0x1f19a},
	{0x1f200, 0x1f202}, {0x1f210, 0x1f23b}, {0x1f240, 0x1f248},
	{0x1f250, 0x1f251}, {0x1f260, 0x1f265}, {0x1f300, 0x1f320},
	{0x1f32d, 0x1f335}, {0x1f337, 0x1f37c}, {0x1f37e, 0x1f393},
	{0x1f3a0, 0x1f3ca}, {0x1f3cf, 0x1f3d3}, {0x1f3e0, 0x1f3f0},
	{0x1f3f4, 0x1f3f4}, {0x1f3f8, 0x1f3fa}, {0x1f400, 0x1f43e},
	{0x1f440, 0x1f440}, {0x1f442, 0x1f4fc}, {0x1f4ff, 0x1f53d},
	{0x1f54b, 0x1f54e}, {0x1f550, 0x1f567}, {0x1f57a, 0x1f57a},
	{0x1f595, 0x1f596}, {0x1f5a4, 0x1f5a4}, {0x1f5fb, 0x1f64f},
	{0x1f680, 0x1f6c5}, {0x1f6cc, 0x1f6cc}, {0x1f6d0, 0x1f6d2},
	{0x1f6d5, 0x1f6d7}, {0x1f6eb, 0x1f6ec}, {0x1f6f4, 0x1f6fc},
	{0x1f7e0, 0x1f7eb}, {0x1f90c, 0x1f93a}, {0x1f93c, 0x1f945},
	{0x1f947, 0x1f9ff}, {0x1fa70, 0x1faff}, {0x20000, 0x2fffd},
	{0x30000, 0x3fffd},
};

static int in_tab(uint32_t c, const struct range *t, int n)
{
	int lo = 0, hi = n - 1;

	if (c < t[0].lo || c > t[n - 1].hi)
		return 0;
	while (lo <= hi) {
		int mid = (lo + hi) / 2;
		if (c > t[mid].hi)
			lo = mid + 1;
		else if (c < t[mid].lo)
			hi = mid - 1;
		else
			return 1;
	}
	return 0;
}

int ui_char_width(uint32_t cp)
{
	if (cp < 0x20 || (cp >= 0x7f && cp < 0xa0))
		return 0;
	if (cp < 0x300)
		return 1;
	if (in_tab(cp, zero_tab, (int)(sizeof zero_tab / sizeof zero_tab[0])))
		return 0;
	if (in_tab(cp, wide_tab, (int)(sizeof wide_tab / sizeof wide_tab[0])))
		return 2;
	return 1;
}

int ui_text_width(const char *s, int len)
{
	int w = 0, i = 0, n;
	uint32_t c;

	while (i < len && (n = utf8_decode(s + i, (size_t)(len - i), &c, NULL)) > 0) {
		w += ui_char_width(c);
		i += n;
	}
	return w;
}

enum clean_mode { CLEAN_SANITIZE, CLEAN_SQUASH, CLEAN_INERT };

/* Shared body of sanitize, squash and inert. */
static int clean(const char *s, int len, char *out, int cap, enum clean_mode mode)
{
	int squash = mode == CLEAN_SQUASH;
	int i = 0, o = 0, n, space = 0;
	uint32_t c;
	char enc[4];

	if (cap <= 0)
		return 0;
	while (i < len) {
		n = utf8_decode(s + i, (size_t)(len - i), &c, NULL);
		i += n;
		if (c == '\t' && mode != CLEAN_INERT)
			c = ' ';
		if (squash && (c == ' ' || c == '\n' || c < 0x20 || c == 0x7f ||
			       c == 0xa0 || c == 0x2028 || c == 0x2029)) {
			space = o > 0;
			continue;
		}
		if (c != '\n' && c != ' ' && c != '\t' && ui_char_width(c) == 0 &&
		    (c < 0x300 || (c >= 0x7f && c < 0xa0)))
			continue;
		if (space) {
			if (o + 1 > cap - 1)
				break;
			out[o++] = ' ';
			space = 0;
		}
		n = utf8_encode(c, enc);
		if (o + n > cap - 1)
			break;
		memcpy(out + o, enc, (size_t)n);
		o += n;
	}
	out[o] = '\0';
	return o;
}

int ui_text_sanitize(const char *s, int len, char *out, int cap)
{
	return clean(s, len, out, cap, CLEAN_SANITIZE);
}

int ui_text_squash(const char *s, int len, char *out, int cap)
{
	return clean(s, len, out, cap, CLEAN_SQUASH);
}

int ui_text_inert(const char *s, int len, char *out, int cap)
{
	return clean(s, len, out, cap, CLEAN_INERT);
}

static void put_line(struct ui_line *lines, int cap, int *n, int off, int len, int width)
{
	if (*n < cap) {
		lines[*n].off = off;
		lines[*n].len = len;
		lines[*n].width = width;
	}
	(*n)++;
}

/* Wraps one paragraph s[p, end) (no '\n'); see ui_text_wrap. */
static void wrap_para(const char *s, int p, int end, int width,
		      struct ui_line *lines, int cap, int *n)
{
	int ls = p, le = p, lw = 0;       /* line start, content end, columns */
	int sp_w = 0;                     /* columns of pending spaces */
	int i = p;

	while (i < end) {
		int j = i, ww = 0, k;
		uint32_t c;

		if (s[i] == ' ') {
			while (j < end && s[j] == ' ')
				j++;
			sp_w += j - i;
			i = j;
			continue;
		}
		while (j < end && s[j] != ' ') {
			k = utf8_decode(s + j, (size_t)(end - j), &c, NULL);
			ww += ui_char_width(c);
			j += k;
		}
		if (lw + sp_w + ww <= width && (lw > 0 || ls == p || sp_w == 0)) {
			le = j;
			lw += sp_w + ww;
			sp_w = 0;
			i = j;
			continue;
		}
		if (lw > 0) {
			put_line(lines, cap, n, ls, le - ls, lw);
			ls = le = i;
			lw = 0;
			sp_w = 0;
			continue;
		}
		/* A word wider than an empty line: cut it between characters,
		 * at least one character per line so the loop advances. */
		sp_w = 0;
		ls = i;
		k = i;
		while (k < j) {
			int m = utf8_decode(s + k, (size_t)(j - k), &c, NULL);
			int cw = ui_char_width(c);
			if (lw + cw > width && k > i)
				break;
			lw += cw;
			k += m;
		}
		if (k < j) {
			put_line(lines, cap, n, ls, k - ls, lw);
			ls = le = i = k;
			lw = 0;
		} else {
			le = i = k;
		}
	}
	put_line(lines, cap, n, ls, le - ls, lw);
}

int ui_text_wrap(const char *s, int len, int width, struct ui_line *lines, int cap)
{
	int n = 0, p = 0;

	if (width < 1)
		width = 1;
	for (;;) {
		const char *nl = len > p ? memchr(s + p, '\n', (size_t)(len - p)) : NULL;
		int end = nl ? (int)(nl - s) : len;
		wrap_para(s, p, end, width, lines, cap, &n);
		if (!nl)
			break;
		p = end + 1;
	}
	return n;
}

int ui_text_trunc(const char *s, int len, int width, int *cols)
{
	int i = 0, w = 0, n;
	uint32_t c;

	while (i < len && (n = utf8_decode(s + i, (size_t)(len - i), &c, NULL)) > 0) {
		int cw = ui_char_width(c);
		if (w + cw > width)
			break;
		w += cw;
		i += n;
	}
	if (cols)
		*cols = w;
	return i;
}

int ui_text_fit(const char *s, int len, int width, const char *ell, char *out, int cap)
{
	int el = (int)strlen(ell), ew = ui_text_width(ell, el), b, o;
	uint32_t c;

	if (cap <= 0)
		return 0;
	if (width < 0)
		width = 0;
	b = ui_text_trunc(s, len, width, NULL);
	if (b == len && b <= cap - 1) {
		memcpy(out, s, (size_t)b);
		out[b] = '\0';
		return b;
	}
	if (ew > width || el > cap - 1) {
		/* No room for the ellipsis: plain cut. */
		b = ui_text_trunc(s, len, width, NULL);
		while (b > cap - 1)
			b = ui_text_trunc(s, b, ui_text_width(s, b) - 1, NULL);
		memcpy(out, s, (size_t)b);
		out[b] = '\0';
		return b;
	}
	b = ui_text_trunc(s, len, width - ew, NULL);
	while (b + el > cap - 1) {
		int k = 0, last = 0;
		while (k < b) {
			last = k;
			k += utf8_decode(s + k, (size_t)(b - k), &c, NULL);
		}
		b = last;
	}
	/* Trailing spaces before an ellipsis read badly. */
	while (b > 0 && s[b - 1] == ' ')
		b--;
	memcpy(out, s, (size_t)b);
	memcpy(out + b, ell, (size_t)el);
	o = b + el;
	out[o] = '\0';
	return o;
}

void ui_fmt_count(int64_t n, char *buf, size_t cap)
{
	char tmp[32];
	int len, o = 0, lead;
	uint64_t u = n < 0 ? (uint64_t)0 - (uint64_t)n : (uint64_t)n;

	if (!buf || cap == 0)
		return;
	len = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)u);
	if (n < 0 && (size_t)o + 1 < cap)
		buf[o++] = '-';
	lead = len % 3 ? len % 3 : 3;
	for (int i = 0; i < len && (size_t)o + 1 < cap; i++) {
		if (i > 0 && (i - lead) % 3 == 0) {
			buf[o++] = ',';
			if ((size_t)o + 1 >= cap)
				break;
		}
		buf[o++] = tmp[i];
	}
	buf[o] = '\0';
}

void ui_fmt_pct(double ratio, char *buf, size_t cap)
{
	double p = ratio * 100.0;

	if (!buf || cap == 0)
		return;
	if (!(p > 0.0))
		snprintf(buf, cap, "0%%");
	else if (p >= 9.95)
		snprintf(buf, cap, "%.0f%%", p);
	else if (p >= 0.095)
		snprintf(buf, cap, "%.1f%%", p);
	else if (p >= 0.005)
		snprintf(buf, cap, "%.2f%%", p);
	else
		snprintf(buf, cap, "<0.01%%");
}
