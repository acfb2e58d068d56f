/* test_extract.c - reading documents (app/extract.h): text encodings
 * (Latin-1, Windows-1252, UTF-16 with BOM, UTF-8 with BOM), and PDFs drawn
 * here with cairo (tests/pdf_fixture.c): page texts against poppler-utils'
 * pdftotext (an independent reader), image-only pages, two columns,
 * ligatures, hyphenated line ends, repeated headers and footers, the page
 * map, passwords (qpdf), malformed files, and a real 113-page manual from
 * Debian's r-doc-pdf. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/extract.h"
#include "engine/base/err.h"
#include "tests/pdf_fixture.h"
#include "tests/test.h"

#define REAL_PDF "/usr/share/R/doc/manual/R-intro.pdf" /* r-doc-pdf, installed by make deps */

/* Reads text bytes in[0..n) written to a file named name. */
static int read_bytes(const char *name, const char *in, size_t n, struct extract_doc *d, char *err,
		      size_t errlen)
{
	char path[512];

	snprintf(path, sizeof path, "%s/%s", test_tmpdir(), name);
	if (test_write_file(path, in, n))
		return -100;
	return extract_file(path, NULL, d, err, errlen);
}

static void extract_text_latin1_detected(struct test_ctx *t)
{
	struct extract_doc d;
	char err[256];
	const char in[] = "caf\xe9 na\xefve r\xe9sum\xe9\r\n\xa9 2024 \xbd\n";

	T_CHECKF(t, read_bytes("latin1.txt", in, sizeof in - 1, &d, err, sizeof err) == 0, "%s", err);
	int ok = !strcmp(d.text, "caf\xc3\xa9 na\xc3\xafve r\xc3\xa9sum\xc3\xa9\n\xc2\xa9 2024 \xc2\xbd\n") &&
		 !strcmp(d.encoding, "ISO-8859-1") && d.n_replaced == 0;
	char *got = strdup(d.text);
	extract_doc_free(&d);
	T_CHECKF(t, ok, "%s", got);
	free(got);
}

/* Bytes 0x80..0x9F are Windows-1252's punctuation; its undefined 0x81
 * becomes U+FFFD, counted. */
static void extract_text_cp1252_detected(struct test_ctx *t)
{
	struct extract_doc d;
	char err[256];
	const char in[] = "\x93quoted\x94 \x80 5 \x96 dash, caf\xe9 \x81.\n";

	T_CHECKF(t, read_bytes("cp1252.txt", in, sizeof in - 1, &d, err, sizeof err) == 0, "%s", err);
	int ok = !strcmp(d.text, "\xe2\x80\x9cquoted\xe2\x80\x9d \xe2\x82\xac 5 \xe2\x80\x93 dash, caf\xc3\xa9 "
			 "\xef\xbf\xbd.\n") && !strcmp(d.encoding, "Windows-1252") && d.n_replaced == 1;
	extract_doc_free(&d);
	T_CHECK(t, ok);
}

/* UTF-16 with either BOM: a surrogate pair becomes one 4-byte character,
 * an unpaired surrogate and an odd last byte U+FFFD each (counted), CRLF LF. */
static void extract_text_utf16_bom_le_be(struct test_ctx *t)
{
	/* "Grüße 😀\r\n" then a lone high surrogate, "x", and one stray byte */
	const unsigned short u[] = { 0xfeff, 'G', 'r', 0xfc, 0xdf, 'e', ' ', 0xd83d, 0xde00, '\r', '\n',
				     0xd800, 'x' };
	const char want[] = "Gr\xc3\xbc\xc3\x9f" "e \xf0\x9f\x98\x80\n\xef\xbf\xbdx\xef\xbf\xbd";
	char le[64], be[64], err[256];
	size_t n = sizeof u / sizeof *u;
	struct extract_doc d;

	for (size_t i = 0; i < n; i++) {
		le[2 * i] = (char)(u[i] & 0xff);
		le[2 * i + 1] = (char)(u[i] >> 8);
		be[2 * i] = (char)(u[i] >> 8);
		be[2 * i + 1] = (char)(u[i] & 0xff);
	}
	le[2 * n] = be[2 * n] = 'z';
	T_CHECKF(t, read_bytes("le.txt", le, 2 * n + 1, &d, err, sizeof err) == 0, "%s", err);
	int ok = !strcmp(d.text, want) && !strcmp(d.encoding, "UTF-16LE") && d.bom && d.n_replaced == 2;
	extract_doc_free(&d);
	T_CHECK(t, ok);
	T_CHECKF(t, read_bytes("be.txt", be, 2 * n + 1, &d, err, sizeof err) == 0, "%s", err);
	ok = !strcmp(d.text, want) && !strcmp(d.encoding, "UTF-16BE") && d.n_replaced == 2;
	extract_doc_free(&d);
	T_CHECK(t, ok);
	/* a NUL character is binary, as a NUL byte is in 8-bit text */
	const char nul[] = "\xff\xfe" "a\0\0\0b\0";
	T_CHECK(t, read_bytes("nul16.txt", nul, 8, &d, err, sizeof err) == SEKV_EFORMAT);
	extract_doc_free(&d);
}

/* A UTF-8 BOM is dropped; mostly-UTF-8 text with a stray byte stays UTF-8. */
static void extract_text_utf8_bom_dropped(struct test_ctx *t)
{
	struct extract_doc d;
	char err[256];
	const char in[] = "\xef\xbb\xbfna\xc3\xafve \xc3\xa9t\xc3\xa9 \xff end\n";

	T_CHECKF(t, read_bytes("bom8.txt", in, sizeof in - 1, &d, err, sizeof err) == 0, "%s", err);
	int ok = !strcmp(d.text, "na\xc3\xafve \xc3\xa9t\xc3\xa9 \xef\xbf\xbd end\n") && d.bom &&
		 !strcmp(d.encoding, "UTF-8") && d.n_replaced == 1;
	extract_doc_free(&d);
	T_CHECK(t, ok);
}

/* ---- PDFs ----------------------------------------------------------- */

/* Draws pages into tmpdir/name and reads it back with params p. */
static int pdf_read(struct test_ctx *t, const char *name, const struct fx_page *pg, int n,
		    const char *header, int numbers, const struct extract_params *p,
		    struct extract_doc *d, char *path, char *err, size_t errlen)
{
	snprintf(path, 512, "%s/%s", test_tmpdir(), name);
	if (fx_pdf_write(path, pg, n, header, numbers, err, errlen)) {
		T_FAIL(t, "%s", err);
		return -100;
	}
	return extract_file(path, p, d, err, errlen);
}

/* Page p (1-based) of d's text, squashed, malloc'ed. */
static char *page_dup(const struct extract_doc *d, int p)
{
	size_t n = (size_t)(d->page_start[p] - d->page_start[p - 1]);
	char *s = malloc(n + 1);

	if (s) {
		memcpy(s, d->text + d->page_start[p - 1], n);
		s[n] = 0;
		fx_squash(s);
	}
	return s;
}

static const struct fx_page three[] = {
	{ "The first page talks about harbors.\nShips arrive at dawn and leave at dusk.\n"
	  "MARKERONE stands here.", NULL, 0 },
	{ "The second page is about bakeries.\nRye bread is baked before four.\nMARKERTWO.", NULL, 0 },
	{ "The third page lists kettles.\nA copper kettle sings.\nMARKERTHREE ends it.", NULL, 0 },
};

/* Every page's text equals pdftotext's for that page (white space
 * aside), and the page map puts each page's marker on its own page. */
static void extract_pdf_pages_match_pdftotext(struct test_ctx *t)
{
	struct extract_doc d;
	char path[512], err[512];

	T_CHECKF(t, pdf_read(t, "three.pdf", three, 3, NULL, 0, NULL, &d, path, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, d.n_page == 3 && !strcmp(d.encoding, "PDF") && d.n_no_text == 0 &&
		 d.page_start[0] == 0 && d.page_start[3] == (int64_t)d.len, "pages %d", d.n_page);
	for (int p = 1; p <= 3; p++) {
		char *ours = page_dup(&d, p), *gold = fx_pdftotext(path, p, p);
		int same = ours && gold && !strcmp(ours, gold);
		T_CHECKF(t, gold != NULL, "pdftotext failed (poppler-utils: make deps)");
		if (!same)
			T_FAIL(t, "page %d: ours [%s] pdftotext [%s]", p, ours ? ours : "?", gold);
		free(ours);
		free(gold);
		if (!same)
			break;
	}
	const char *mark[3] = { "MARKERONE", "MARKERTWO", "MARKERTHREE" };
	for (int p = 0; p < 3 && !t->failed; p++) {
		const char *at = strstr(d.text, mark[p]);
		T_CHECKF(t, at && extract_page_of(d.page_start, 3, at - d.text) == p, "%s", mark[p]);
	}
	extract_doc_free(&d);
}

/* A page holding only an image is reported by number; its range is empty. */
static void extract_pdf_image_only_page_reported(struct test_ctx *t)
{
	const struct fx_page pg[] = { three[0], { NULL, NULL, 1 }, three[2], { NULL, NULL, 0 } };
	struct extract_doc d;
	char path[512], err[512];

	T_CHECKF(t, pdf_read(t, "image.pdf", pg, 4, NULL, 0, NULL, &d, path, err, sizeof err) == 0, "%s", err);
	int ok = d.n_page == 4 && d.n_no_text == 2 && d.no_text[0] == 2 && d.no_text[1] == 4 &&
		 d.n_image_only == 1 && d.page_start[1] == d.page_start[2] &&
		 strstr(d.text + d.page_start[2], "MARKERTHREE") && d.page_start[3] == d.page_start[4];
	extract_doc_free(&d);
	T_CHECK(t, ok);
}

/* A PDF without any text is refused, saying why. */
static void extract_pdf_without_text_refused(struct test_ctx *t)
{
	const struct fx_page pg[] = { { NULL, NULL, 1 }, { NULL, NULL, 1 } };
	struct extract_doc d;
	char path[512], err[512];

	int rc = pdf_read(t, "scan.pdf", pg, 2, NULL, 0, NULL, &d, path, err, sizeof err);
	extract_doc_free(&d);
	T_CHECKF(t, rc == SEKV_EFORMAT && strstr(err, "no text layer") && strstr(err, "2 pages") &&
		 strstr(err, "scan.pdf"), "rc %d: %s", rc, err);
}

/* Two columns drawn line by line side by side read column after column. */
static void extract_pdf_two_columns_in_reading_order(struct test_ctx *t)
{
	const struct fx_page pg[] = { {
		"Left column starts here and\nkeeps going with more words\nabout the western river\n"
		"and ends at LEFTEND.",
		"Right column begins there and\ntalks about the eastern hills\nwith their many goats\n"
		"and ends at RIGHTEND.", 0 } };
	struct extract_doc d;
	char path[512], err[512];

	T_CHECKF(t, pdf_read(t, "columns.pdf", pg, 1, NULL, 0, NULL, &d, path, err, sizeof err) == 0, "%s", err);
	const char *l0 = strstr(d.text, "Left column"), *l1 = strstr(d.text, "LEFTEND");
	const char *r0 = strstr(d.text, "Right column"), *r1 = strstr(d.text, "RIGHTEND");
	const char *w = strstr(d.text, "about the western river");
	int ok = l0 && l1 && r0 && r1 && w && l0 < w && w < l1 && l1 < r0 && r0 < r1;
	char *got = strdup(d.text);
	extract_doc_free(&d);
	T_CHECKF(t, ok, "order: %s", got);
	free(got);
}

/* Ligature code points (they reach the PDF: pdftotext shows them) are
 * written as letters. */
static void extract_pdf_ligatures_become_letters(struct test_ctx *t)
{
	const struct fx_page pg[] = { {
		"The \xef\xac\x81rst o\xef\xac\x83" "ce \xef\xac\x82ows; an e\xef\xac\x80ort "
		"to ba\xef\xac\x84" "e \xef\xac\x81ve.", NULL, 0 } };
	struct extract_doc d;
	char path[512], err[512];

	T_CHECKF(t, pdf_read(t, "lig.pdf", pg, 1, NULL, 0, NULL, &d, path, err, sizeof err) == 0, "%s", err);
	char *gold = fx_pdftotext(path, 1, 1);
	int in_pdf = gold && strstr(gold, "\xef\xac\x81") && strstr(gold, "\xef\xac\x83");
	int ok = strstr(d.text, "The first office flows; an effort to baffle five.") &&
		 !strstr(d.text, "\xef\xac") && d.n_ligatures == 6;
	char *got = strdup(d.text);
	extract_doc_free(&d);
	T_CHECKF(t, in_pdf, "the PDF has no ligature code points: pdftotext gives %s", gold ? gold : "?");
	free(gold);
	T_CHECKF(t, ok, "%s", got);
	free(got);
}

/* "exam-" + "ple" is one word; "well-known" inside a line and a dash
 * before a capital stay. */
static void extract_pdf_hyphenated_line_ends_joined(struct test_ctx *t)
{
	const struct fx_page pg[] = {
		{ "This is a long exam-\nple of text that was hyphen-\nated by a typesetter, a well-known\n"
		  "habit. A list item -\nContinues here and ends the page with a broken para-", NULL, 0 },
		{ "graph that goes on.", NULL, 0 },
	};
	struct extract_doc d;
	char path[512], err[512];

	T_CHECKF(t, pdf_read(t, "hyph.pdf", pg, 2, NULL, 0, NULL, &d, path, err, sizeof err) == 0, "%s", err);
	int ok = strstr(d.text, "long example of text") && strstr(d.text, "was hyphenated by") &&
		 strstr(d.text, "well-known\n") && strstr(d.text, "item -\nContinues") &&
		 strstr(d.text, "broken paragraph that goes on.") && d.n_hyphen_joins == 3 &&
		 extract_page_of(d.page_start, 2, strstr(d.text, "that goes") - d.text) == 1;
	char *got = strdup(d.text);
	extract_doc_free(&d);
	T_CHECKF(t, ok, "%s", got);
	free(got);
}

/* A header and a "Page N of M" footer on each of 5 pages are removed
 * (10 lines); a body line repeated on every page is kept. */
static void extract_pdf_repeated_header_footer_removed(struct test_ctx *t)
{
	const char *body[5] = { "Harbor news: ships came in.\nRevenue grew.\nMore on harbors.",
				"Bakery news: rye sold out.\nRevenue grew.\nMore on bread.",
				"Kettle news: copper is back.\nRevenue grew.\nMore on tea.",
				"Street news: lamps were lit.\nRevenue grew.\nMore on streets.",
				"River news: the bridge held.\nRevenue grew.\nMore on rivers." };
	struct fx_page pg[5];
	struct extract_doc d;
	char path[512], err[512];

	for (int i = 0; i < 5; i++)
		pg[i] = (struct fx_page){ body[i], NULL, 0 };
	T_CHECKF(t, pdf_read(t, "header.pdf", pg, 5, "ACME Harbor Gazette, annual report", 1, NULL, &d,
			     path, err, sizeof err) == 0, "%s", err);
	int n_rev = 0;
	for (const char *s = d.text; (s = strstr(s, "Revenue grew.")); s++)
		n_rev++;
	int n_removed = d.n_header_lines;
	int ok = n_removed == 10 && !strstr(d.text, "ACME") && !strstr(d.text, "Page 3 of 5") &&
		 n_rev == 5 && strstr(d.text, "River news") && strstr(d.text, "More on rivers.");
	char *got = strdup(d.text);
	extract_doc_free(&d);
	T_CHECKF(t, ok, "%d lines removed: %s", n_removed, got);
	free(got);
}

/* qpdf --encrypt of src with user password user ("" = none) into dst. */
static int qpdf_encrypt(const char *src, const char *dst, const char *user)
{
	char cmd[1400];
	int st;

	snprintf(cmd, sizeof cmd, "qpdf --encrypt '%s' owner-secret 256 -- '%s' '%s' 2>&1", user, src, dst);
	char *out = test_run_cmd(cmd, &st);
	free(out);
	return st;
}

struct asker {
	int calls;
	const char *answers[3];
};

static int ask(void *ud, const char *path, int wrong, char *buf, size_t cap)
{
	struct asker *a = ud;
	(void)path;
	(void)wrong;
	if (a->calls >= 3 || !a->answers[a->calls])
		return -1;
	snprintf(buf, cap, "%s", a->answers[a->calls++]);
	return 0;
}

/* A user password: missing and wrong say so (and how to give it); the
 * right one, given or asked for (after a wrong answer), reads the text. */
static void extract_pdf_user_password(struct test_ctx *t)
{
	struct extract_doc d;
	struct asker a = { 0, { "guess", "open sesame", NULL } };
	struct extract_params p = { 0 };
	char src[512], dst[512], err[512];

	snprintf(dst, sizeof dst, "%s/locked.pdf", test_tmpdir());
	T_CHECKF(t, pdf_read(t, "plain.pdf", three, 3, NULL, 0, NULL, &d, src, err, sizeof err) == 0, "%s", err);
	extract_doc_free(&d);
	T_CHECKF(t, qpdf_encrypt(src, dst, "open sesame") == 0, "qpdf failed (make deps)");
	int rc = extract_file(dst, &p, &d, err, sizeof err);
	T_CHECKF(t, rc == SEKV_EINVAL && strstr(err, "user password") && strstr(err, "--password") &&
		 strstr(err, "locked.pdf"), "missing: rc %d: %s", rc, err);
	p.password = "wrong";
	rc = extract_file(dst, &p, &d, err, sizeof err);
	T_CHECKF(t, rc == SEKV_EINVAL && strstr(err, "wrong password"), "wrong: rc %d: %s", rc, err);
	p.password = "open sesame";
	rc = extract_file(dst, &p, &d, err, sizeof err);
	int ok = rc == 0 && d.n_page == 3 && strstr(d.text, "MARKERTWO");
	extract_doc_free(&d);
	T_CHECKF(t, ok, "right: rc %d: %s", rc, err);
	p = (struct extract_params){ .ask_password = ask, .ud = &a };
	rc = extract_file(dst, &p, &d, err, sizeof err);
	ok = rc == 0 && a.calls == 2 && strstr(d.text, "MARKERTHREE");
	extract_doc_free(&d);
	T_CHECKF(t, ok, "asked %d times: rc %d: %s", a.calls, rc, err);
}

/* An owner password alone (permissions) never stops reading. */
static void extract_pdf_owner_password_only_read(struct test_ctx *t)
{
	struct extract_doc d;
	char src[512], dst[512], err[512];

	snprintf(dst, sizeof dst, "%s/owner.pdf", test_tmpdir());
	T_CHECKF(t, pdf_read(t, "plain2.pdf", three, 3, NULL, 0, NULL, &d, src, err, sizeof err) == 0, "%s", err);
	extract_doc_free(&d);
	T_CHECKF(t, qpdf_encrypt(src, dst, "") == 0, "qpdf failed (make deps)");
	int rc = extract_file(dst, NULL, &d, err, sizeof err);
	int ok = rc == 0 && d.n_page == 3 && strstr(d.text, "MARKERONE");
	extract_doc_free(&d);
	T_CHECKF(t, ok, "rc %d: %s", rc, err);
}

/* A truncated PDF, garbage after "%PDF-" and an empty page tree are a
 * clear error, never a crash. */
static void extract_pdf_malformed_clear_error(struct test_ctx *t)
{
	struct extract_doc d;
	char src[512], path[512], err[512];
	static const char garbage[] = "%PDF-1.7\n\x01\x02 this is not a PDF body \xff\xfe 0 obj << >>\n";

	T_CHECKF(t, pdf_read(t, "whole.pdf", three, 3, NULL, 0, NULL, &d, src, err, sizeof err) == 0, "%s", err);
	extract_doc_free(&d);
	FILE *f = fopen(src, "rb");
	char buf[1 << 16];
	size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
	if (f)
		fclose(f);
	T_CHECK(t, n > 1000 && n < sizeof buf);
	size_t cut[] = { n / 2, n / 5, 40 };
	for (size_t i = 0; i < sizeof cut / sizeof *cut; i++) {
		snprintf(path, sizeof path, "%s/cut%zu.pdf", test_tmpdir(), i);
		T_CHECK(t, test_write_file(path, buf, cut[i]) == 0);
		int rc = extract_file(path, NULL, &d, err, sizeof err);
		extract_doc_free(&d);
		T_CHECKF(t, rc == SEKV_EFORMAT && strstr(err, path) && strstr(err, "PDF"),
			 "cut at %zu of %zu: rc %d: %s", cut[i], n, rc, err);
	}
	snprintf(path, sizeof path, "%s/garbage.pdf", test_tmpdir());
	T_CHECK(t, test_write_file(path, garbage, sizeof garbage - 1) == 0);
	int rc = extract_file(path, NULL, &d, err, sizeof err);
	extract_doc_free(&d);
	T_CHECKF(t, rc == SEKV_EFORMAT && strstr(err, "not a readable PDF"), "rc %d: %s", rc, err);
}

/* extract_pages_join alone: headers alternating on odd and even pages
 * (as books print them) are removed, and page numbers; a line at a
 * page's edge repeated on only 2 pages is not; a page without text
 * shares the next start, and extract_page_of gives the page with text. */
static void extract_pages_join_books_and_empty_pages(struct test_ctx *t)
{
	char *pg[9];
	size_t len[9];
	int img[9] = { 0 };
	char buf[9][160], err[256];
	struct extract_doc d = { 0 };

	for (int i = 0; i < 9; i++) {
		buf[i][0] = 0;
		if (i != 3)
			snprintf(buf[i], sizeof buf[i], "%s\n\nBody %c of the page.\n%s %c\n%d\n",
				 i % 2 ? "The Odd Header" : "Chapter One: Even Header", 'A' + i,
				 i == 2 || i == 6 ? "Twice said." : "Once said", i == 2 || i == 6 ? '!' : 'a' + i,
				 i + 1);
		pg[i] = buf[i];
		len[i] = strlen(buf[i]);
	}
	T_CHECKF(t, extract_pages_join("book", pg, len, img, 9, &d, err, sizeof err) == 0, "%s", err);
	int twice = 0;
	for (const char *s = d.text; (s = strstr(s, "Twice said.")); s++)
		twice++;
	int ok = !strstr(d.text, "Header") && twice == 2 && d.n_no_text == 1 && d.no_text[0] == 4 &&
		 d.page_start[3] == d.page_start[4] && extract_page_of(d.page_start, 9, d.page_start[4]) == 4 &&
		 strstr(d.text, "Body I") && !strstr(d.text, "\n7\n") && d.n_header_lines == 16;
	char *got = strdup(d.text);
	int removed = d.n_header_lines;
	extract_doc_free(&d);
	T_CHECKF(t, ok, "%d removed: %s", removed, got);
	free(got);
	T_CHECK(t, extract_page_of(NULL, 0, 5) == -1);
}

/* A real manual (Debian's r-doc-pdf, 113 pages): every page is there,
 * with text wherever pdftotext finds text, and at least 90% of each
 * page's words as pdftotext reads them (headers, footers and hyphens
 * differ on purpose). */
static void extract_pdf_real_manual_every_page(struct test_ctx *t)
{
	struct extract_doc d;
	char err[512];
	int pages_seen = 0;

	if (access(REAL_PDF, R_OK) != 0)
		T_SKIP(t, "%s missing (r-doc-pdf: make deps)", REAL_PDF);
	T_CHECKF(t, extract_file(REAL_PDF, NULL, &d, err, sizeof err) == 0, "%s", err);
	int n_page = d.n_page, n_no_text = d.n_no_text;
	for (int p = 1; p <= d.n_page && !t->failed; p++) {
		char *gold = fx_pdftotext(REAL_PDF, p, p), *ours = page_dup(&d, p);
		int n_w = 0, n_hit = 0;
		for (char *w = gold ? strtok(gold, " ") : NULL; w; w = strtok(NULL, " ")) {
			n_w++;
			n_hit += strstr(ours, w) != NULL;
		}
		if (!gold || (n_w > 0 && !*ours) || n_hit < 0.9 * n_w)
			T_FAIL(t, "page %d: %d of %d pdftotext words in ours", p, n_hit, n_w);
		pages_seen += n_w > 0;
		free(gold);
		free(ours);
	}
	extract_doc_free(&d);
	T_CHECKF(t, n_page == 113 && n_no_text == 0 && pages_seen == 113, "%d pages, %d without text, %d seen",
		 n_page, n_no_text, pages_seen);
}

const struct test_case test_extract[] = {
	{ "extract_text_latin1_detected", extract_text_latin1_detected },
	{ "extract_text_cp1252_detected", extract_text_cp1252_detected },
	{ "extract_text_utf16_bom_le_be", extract_text_utf16_bom_le_be },
	{ "extract_text_utf8_bom_dropped", extract_text_utf8_bom_dropped },
	{ "extract_pdf_pages_match_pdftotext", extract_pdf_pages_match_pdftotext },
	{ "extract_pdf_image_only_page_reported", extract_pdf_image_only_page_reported },
	{ "extract_pdf_without_text_refused", extract_pdf_without_text_refused },
	{ "extract_pdf_two_columns_in_reading_order", extract_pdf_two_columns_in_reading_order },
	{ "extract_pdf_ligatures_become_letters", extract_pdf_ligatures_become_letters },
	{ "extract_pdf_hyphenated_line_ends_joined", extract_pdf_hyphenated_line_ends_joined },
	{ "extract_pdf_repeated_header_footer_removed", extract_pdf_repeated_header_footer_removed },
	{ "extract_pdf_user_password", extract_pdf_user_password },
	{ "extract_pdf_owner_password_only_read", extract_pdf_owner_password_only_read },
	{ "extract_pdf_malformed_clear_error", extract_pdf_malformed_clear_error },
	{ "extract_pages_join_books_and_empty_pages", extract_pages_join_books_and_empty_pages },
	{ "extract_pdf_real_manual_every_page", extract_pdf_real_manual_every_page },
	{ NULL, NULL },
};
