/* extract_pages.c - the page texts of a PDF joined into one document text
 * with its page map (extract_pages_join in extract.h): ligatures written
 * as letters, repeated headers and footers dropped, hyphenated line ends
 * joined. Pure text work over what the PDF library gave; no PDF parsing
 * here (extract_pdf.c). Invariant: page_start ascends and tiles [0, len).
 */
#include "app/extract.h"

#include <stdlib.h>
#include <string.h>

#include "engine/base/err.h"

#define EDGE_LINES 2 /* lines at the top and at the bottom of a page that may be a header/footer */
#define KEY_MAX 160  /* bytes of a line compared for repetition */

struct line {
	size_t at, len;  /* bytes of the page's text, no '\n' */
	int drop;        /* 1: a repeated header/footer */
};

struct page {
	char *text;      /* cleaned page text (owned) */
	size_t len;
	struct line *line; /* [n_line] */
	int n_line;
	int has_text;    /* holds a character other than white space */
};

/* Cleans s[0..n) into pg: valid UTF-8, LF ends, ligatures as letters
 * (counted in *n_lig), C0 controls but LF dropped (tabs become spaces),
 * trailing white space of every line gone, and the lines indexed. */
static int page_clean(const char *s, size_t n, struct page *pg, int *n_lig)
{
	static const char *const lig[7] = { "ff", "fi", "fl", "ffi", "ffl", "st", "st" };
	size_t len, o = 0;
	char *t = extract_clean_dup(s, n, &len, NULL);

	/* a 3-byte ligature becomes at most 3 letters: the text never grows */
	if (!t)
		return SEKV_ENOMEM;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)t[i];
		if (c == 0xef && i + 2 < len && (unsigned char)t[i + 1] == 0xac &&
		    (unsigned char)t[i + 2] <= 0x86) {
			const char *l = lig[(unsigned char)t[i + 2] - 0x80];
			memcpy(t + o, l, strlen(l));
			o += strlen(l);
			i += 2;
			(*n_lig)++;
		} else if (c == '\n') {
			while (o > 0 && t[o - 1] == ' ')
				o--;
			t[o++] = '\n';
		} else if (c >= 0x20 || c == '\t') {
			t[o++] = c == '\t' ? ' ' : (char)c;
			pg->has_text |= c != ' ' && c != '\t';
		}
	}
	while (o > 0 && t[o - 1] == ' ')
		o--;
	t[o] = 0;
	pg->text = t;
	pg->len = o;
	for (size_t i = 0; i <= o; i++)
		pg->n_line += i == o || t[i] == '\n';
	if (!(pg->line = calloc((size_t)pg->n_line, sizeof *pg->line)))
		return SEKV_ENOMEM;
	for (size_t i = 0, a = 0, k = 0; i <= o; i++)
		if (i == o || t[i] == '\n') {
			pg->line[k].at = a;
			pg->line[k++].len = i - a;
			a = i + 1;
		}
	return 0;
}

/* A line compared for repetition: trimmed, white space runs as one space,
 * every run of digits as one '#' (page numbers), at most KEY_MAX - 1 bytes. */
static void line_key(const char *s, size_t n, char key[KEY_MAX])
{
	size_t k = 0;
	int sp = 0;

	for (size_t i = 0; i < n && k + 1 < KEY_MAX; i++) {
		char c = s[i];
		if (c == ' ') {
			sp = k > 0;
			continue;
		}
		if (sp && k + 2 < KEY_MAX)
			key[k++] = ' ';
		sp = 0;
		if (c >= '0' && c <= '9' && k > 0 && key[k - 1] == '#')
			continue;
		key[k++] = c >= '0' && c <= '9' ? '#' : c;
	}
	key[k] = 0;
}

/* Up to 2 * EDGE_LINES non-blank lines at a page's top and bottom, each
 * once, into idx; returns how many. */
static int edge_lines(const struct page *pg, int idx[2 * EDGE_LINES])
{
	int n = 0, top = 0;

	for (int i = 0; i < pg->n_line && top < EDGE_LINES; i++)
		if (pg->line[i].len) {
			idx[n++] = i;
			top++;
		}
	for (int i = pg->n_line - 1, bot = 0; i >= 0 && bot < EDGE_LINES; i--) {
		if (!pg->line[i].len)
			continue;
		int seen = 0;
		for (int j = 0; j < top; j++)
			seen |= idx[j] == i;
		if (!seen)
			idx[n++] = i;
		bot++;
	}
	return n;
}

struct cand {
	char key[KEY_MAX];
	int page, line;
};

static int cand_cmp(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	int c = strcmp(x->key, y->key);
	return c ? c : x->page - y->page;
}

/* 1 when pages counts[3] (all, odd, even) of n_text[3] pages with text
 * make a line a repeated header/footer. */
static int repeats(const int count[3], const int n_text[3])
{
	for (int g = 0; g < 3; g++)
		if (count[g] >= 3 && 2 * count[g] > n_text[g])
			return 1;
	return 0;
}

/* Marks the header/footer lines (struct line.drop) that repeat on most
 * pages; their number into *n_drop. */
static int mark_headers(struct page *pg, int n_page, int *n_drop)
{
	struct cand *c = calloc((size_t)n_page * 2 * EDGE_LINES + 1, sizeof *c);
	int n = 0, n_text[3] = { 0 }, idx[2 * EDGE_LINES];

	if (!c)
		return SEKV_ENOMEM;
	for (int p = 0; p < n_page; p++) {
		if (!pg[p].has_text)
			continue;
		n_text[0]++;
		n_text[1 + p % 2]++;
		int k = edge_lines(&pg[p], idx);
		for (int j = 0; j < k; j++, n++) {
			const struct line *l = &pg[p].line[idx[j]];
			line_key(pg[p].text + l->at, l->len, c[n].key);
			c[n].page = p;
			c[n].line = idx[j];
		}
	}
	qsort(c, (size_t)n, sizeof *c, cand_cmp);
	for (int a = 0, b; a < n; a = b) {
		int count[3] = { 0 }, last = -1;
		for (b = a; b < n && !strcmp(c[b].key, c[a].key); b++)
			if (c[b].page != last) {
				last = c[b].page;
				count[0]++;
				count[1 + last % 2]++;
			}
		for (int j = a; c[a].key[0] && j < b && repeats(count, n_text); j++) {
			pg[c[j].page].line[c[j].line].drop = 1;
			(*n_drop)++;
		}
	}
	free(c);
	return 0;
}

static int is_lower_start(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;

	if (n >= 1 && u[0] >= 'a' && u[0] <= 'z')
		return 1;
	/* U+00DF..U+00FF but U+00F7 (division sign): Latin-1 lowercase */
	return n >= 2 && u[0] == 0xc3 && u[1] >= 0x9f && u[1] <= 0xbf && u[1] != 0xb7;
}

/* The bytes to cut when out [o] ends with a hyphenated line end ("x-\n"
 * after a letter, or a soft hyphen "\xc2\xad\n"), else 0. */
static size_t hyphen_end(const char *out, size_t o)
{
	const unsigned char *u = (const unsigned char *)out;

	if (o >= 3 && u[o - 1] == '\n' && u[o - 2] == 0xad && u[o - 3] == 0xc2)
		return 3;
	if (o < 3 || u[o - 1] != '\n' || u[o - 2] != '-')
		return 0;
	unsigned char x = u[o - 3];
	int letter = (x >= 'a' && x <= 'z') || (x >= 'A' && x <= 'Z') || x >= 0x80;
	return letter ? 2 : 0;
}

/* Appends page p's kept lines to out [*o] (room checked by the caller),
 * joining hyphenated line ends, one blank line at most in a row; sets
 * start (-1 for a page without text). */
static void append_page(const struct page *pg, char *out, size_t *o, int64_t *start, int *n_join)
{
	int first = 1, blank = 0;

	*start = -1;
	for (int i = 0; pg->has_text && i < pg->n_line; i++) {
		const struct line *l = &pg->line[i];
		if (l->drop)
			continue;
		if (!l->len) {
			blank = !first;
			continue;
		}
		size_t cut = blank ? 0 : hyphen_end(out, *o);
		if (cut && is_lower_start(pg->text + l->at, l->len)) {
			*o -= cut;
			(*n_join)++;
		} else {
			if ((first || blank) && *o > 0 && out[*o - 1] == '\n' && !(*o >= 2 && out[*o - 2] == '\n'))
				out[(*o)++] = '\n'; /* a blank line between paragraphs and pages */
		}
		if (first)
			*start = (int64_t)*o;
		memcpy(out + *o, pg->text + l->at, l->len);
		*o += l->len;
		out[(*o)++] = '\n';
		first = blank = 0;
	}
}

static void pages_free(struct page *pg, int n)
{
	for (int p = 0; pg && p < n; p++) {
		free(pg[p].text);
		free(pg[p].line);
	}
	free(pg);
}

/* The page map and the list of pages without text from the starts
 * append_page gave (-1: none). */
static int page_map(struct extract_doc *d, const struct page *pg, const int *has_image, int n_page)
{
	d->page_start[n_page] = (int64_t)d->len;
	for (int p = n_page - 1; p >= 0; p--) {
		if (d->page_start[p] < 0 || d->page_start[p] > d->page_start[p + 1])
			d->page_start[p] = d->page_start[p + 1];
		if (!pg[p].has_text)
			d->n_no_text++;
	}
	if (d->n_no_text && !(d->no_text = malloc((size_t)d->n_no_text * sizeof *d->no_text)))
		return SEKV_ENOMEM;
	for (int p = 0, k = 0; p < n_page; p++)
		if (!pg[p].has_text) {
			d->no_text[k++] = p + 1;
			d->n_image_only += has_image && has_image[p];
		}
	return 0;
}

int extract_pages_join(const char *name, char *const *page, const size_t *len,
		       const int *has_image, int n_page, struct extract_doc *d,
		       char *err, size_t errlen)
{
	struct page *pg = calloc((size_t)n_page + 1, sizeof *pg);
	size_t total = 0, o = 0;
	int rc = 0, any = 0;

	d->encoding = "PDF";
	d->n_page = n_page;
	for (int p = 0; pg && !rc && p < n_page; p++) {
		rc = page_clean(page[p], len[p], &pg[p], &d->n_ligatures);
		total += 2 * pg[p].len + 2; /* a line gains at most its LF and a blank line */
		any |= pg[p].has_text;
	}
	if (!pg || rc || mark_headers(pg, n_page, &d->n_header_lines) ||
	    !(d->text = malloc(total + 1)) ||
	    !(d->page_start = malloc(((size_t)n_page + 1) * sizeof *d->page_start))) {
		pages_free(pg, n_page);
		return sekv_errf(err, errlen, SEKV_ENOMEM, "read: %s: out of memory", name);
	}
	for (int p = 0; any && p < n_page; p++)
		append_page(&pg[p], d->text, &o, &d->page_start[p], &d->n_hyphen_joins);
	d->text[o] = 0;
	d->len = o;
	if (page_map(d, pg, has_image, n_page))
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "read: %s: out of memory", name);
	else if (!any)
		rc = sekv_errf(err, errlen, SEKV_EFORMAT,
			       "read: %s: no text layer on any of its %d page%s (a scan or images only: "
			       "sekv does not do OCR)", name, n_page, n_page == 1 ? "" : "s");
	pages_free(pg, n_page);
	return rc;
}
