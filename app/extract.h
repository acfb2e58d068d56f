/* extract.h - document text extraction: plain text and Markdown in UTF-8,
 * UTF-16 (with BOM) or a single-byte Latin encoding (extract.c), and PDF
 * through poppler (extract_pdf.c; page texts cleaned and joined by
 * extract_pages.c); chat histories are read from this text
 * (app/history.h). Output is always valid UTF-8 with LF line ends; a PDF
 * also gives the page of every byte of that text (a page map). */
#ifndef SEKV_APP_EXTRACT_H
#define SEKV_APP_EXTRACT_H

#include <stddef.h>
#include <stdint.h>

#define EXTRACT_MAX_BYTES ((size_t)256 << 20)
#define EXTRACT_PASSWORD_MAX 256 /* bytes of a PDF password, NUL included */

/* How a document is read. Every field may be 0/NULL. */
struct extract_params {
	const char *password;   /* PDF user password (--password), borrowed */
	/* Asked for a PDF's password when none or a wrong one was given
	 * (wrong = 1): writes it NUL-terminated into buf [cap]; returns 0,
	 * or nonzero to give up. NULL: never asks. */
	int (*ask_password)(void *ud, const char *path, int wrong, char *buf, size_t cap);
	/* After each PDF page: page 1..n_page read. */
	void (*on_page)(void *ud, int page, int n_page);
	void *ud;
};

/* A document's text and what was done to it; owned, extract_doc_free. */
struct extract_doc {
	char *text;             /* valid UTF-8, NUL-terminated, LF line ends */
	size_t len;             /* bytes of text */
	const char *encoding;   /* static: "UTF-8", "UTF-16LE", "UTF-16BE",
	                           "ISO-8859-1", "Windows-1252", "PDF" */
	int bom;                /* a byte order mark was found (and dropped) */
	size_t n_replaced;      /* invalid input bytes or code units, each
	                           now U+FFFD */
	/* PDF only (n_page = 0 for text): page p (0-based, page number p + 1)
	 * covers text bytes [page_start[p], page_start[p + 1]); pages without
	 * text have empty ranges. */
	int n_page;
	int64_t *page_start;    /* [n_page + 1], page_start[n_page] = len */
	int n_no_text;          /* pages without a text layer */
	int *no_text;           /* [n_no_text] their page numbers (1-based), ascending */
	int n_image_only;       /* of those, pages that hold an image (a scan) */
	int n_header_lines;     /* repeated header/footer lines removed */
	int n_hyphen_joins;     /* words joined over a hyphenated line end */
	int n_ligatures;        /* U+FB00..U+FB06 written as letters */
};

/* Reads path as a PDF (when "%PDF-" starts within its first 1 KiB) or as
 * text, into *d (cleared first; extract_doc_free it, also after an error).
 * Text: a UTF-8 BOM is dropped; UTF-16 LE/BE with BOM is converted
 * (unpaired surrogates become U+FFFD, counted); bytes that are not UTF-8
 * are read as Windows-1252 (when bytes 0x80..0x9F occur; its five
 * undefined bytes become U+FFFD, counted) or ISO-8859-1 unless valid
 * multi-byte UTF-8 is at least a sixteenth as frequent as invalid bytes
 * (then the invalid bytes become U+FFFD, counted). CRLF/CR become LF.
 * PDF: see extract_pdf. Errors: SEKV_EIO (errno text, or "not a regular
 * file": a FIFO is refused before it could block), SEKV_EFORMAT (NUL
 * characters: not a text file; a malformed PDF; a PDF without any text),
 * SEKV_EINVAL (empty, only white space, larger than EXTRACT_MAX_BYTES),
 * (also: a PDF password was needed and not given, or was wrong),
 * SEKV_ENOMEM. */
int extract_file(const char *path, const struct extract_params *p, struct extract_doc *d,
		 char *err, size_t errlen);

/* Decodes raw[0..n) (a whole text file's bytes) into d as extract_file
 * does for text. raw is borrowed. Same errors, "read: name: why". */
int extract_text_buf(const char *name, const char *raw, size_t n, struct extract_doc *d,
		     char *err, size_t errlen);

/* The PDF at path name into d: the text of every page in
 * poppler's reading order (columns one after the other), ligatures
 * U+FB00..U+FB06 as letters, words hyphenated over a line end joined,
 * header and footer lines that repeat on most pages removed
 * (extract_pages_join), with the page map. A PDF with a user password
 * opens with p->password or, failing that, what p->ask_password gives
 * (three tries); an owner password alone never stops reading. Errors:
 * SEKV_EIO (errno text), SEKV_EINVAL (password missing or wrong: says so
 * and how to give it),
 * SEKV_EFORMAT (malformed or truncated, poppler's reason; no text on any
 * page: "no text layer", scans need OCR), SEKV_ENOMEM. (extract_pdf.c, the
 * one file that includes poppler.) */
int extract_pdf(const char *name, const struct extract_params *p, struct extract_doc *d,
		char *err, size_t errlen);

/* Joins page texts into d->text with its page map (extract_pages.c):
 * page[i] [len[i] bytes] is page i + 1's text as a PDF library gives it
 * (any UTF-8, repaired here), has_image[i] 1 when that page holds an
 * image. Ligatures become letters; a line ending in a letter and '-' (or
 * a soft hyphen) followed by a line starting with a lowercase letter is
 * joined without the hyphen, also across pages; a line among the first
 * or last two non-blank lines of a page is a header/footer and removed
 * when the same line, digits aside, stands there on at least 3 pages and
 * on more than half of the pages with text, or of the odd or of the even
 * ones (books alternate them). Sets every PDF field of d and encoding
 * "PDF". 0, SEKV_EFORMAT (no page has text), SEKV_ENOMEM. */
int extract_pages_join(const char *name, char *const *page, const size_t *len,
		       const int *has_image, int n_page, struct extract_doc *d,
		       char *err, size_t errlen);

/* 0-based page of text byte `at` by a page map start [n_page] (ascending;
 * pages without text share the next page's start): the last page whose
 * range holds it. -1 when n_page <= 0. */
int extract_page_of(const int64_t *start, int n_page, int64_t at);

void extract_doc_free(struct extract_doc *d); /* NULL is a no-op; clears *d */

/* Validates/cleans a buffer: invalid UTF-8 bytes become U+FFFD
 * (*n_replaced counts them, may be NULL), CRLF/CR become LF. Returns a
 * malloc'ed NUL-terminated string (*out_len bytes), NULL when out of
 * memory. Used for questions too. */
char *extract_clean_dup(const char *s, size_t n, size_t *out_len, size_t *n_replaced);

#endif
