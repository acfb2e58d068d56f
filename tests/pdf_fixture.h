/* pdf_fixture.h - PDFs the tests draw themselves with cairo (pdf_fixture.c):
 * pages of text lines in one or two columns, a header and a page-number
 * footer on every page, pages holding only an image. The text is drawn
 * with DejaVu Sans (fonts-dejavu-core), which has the ligature glyphs
 * U+FB00..U+FB04, so ligature code points reach the PDF as such. */
#ifndef SEKV_TESTS_PDF_FIXTURE_H
#define SEKV_TESTS_PDF_FIXTURE_H

#include <stddef.h>

struct fx_page {
	const char *left;   /* lines separated by '\n' (the whole width), or NULL */
	const char *right;  /* a second column's lines, or NULL */
	int image;          /* 1: an image is drawn on the page (below any text) */
};

/* Writes an A4 PDF of pages [n] to path: each page's columns at 11 pt,
 * 14 pt apart from the top margin; header (may be NULL) at the top of
 * every page and, when page_numbers, "Page N of M" at the bottom.
 * 0, or -1 with the reason in err. */
int fx_pdf_write(const char *path, const struct fx_page *pages, int n, const char *header,
		 int page_numbers, char *err, size_t errlen);

/* s with every run of white space as one space, trimmed; in place,
 * returns s. */
char *fx_squash(char *s);

/* pdftotext's (poppler-utils) text of pages [a, b] of path, squashed,
 * malloc'ed (the caller frees); NULL when it could not run or failed. */
char *fx_pdftotext(const char *path, int a, int b);

#endif
