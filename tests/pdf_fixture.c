/* pdf_fixture.c - drawing the tests' PDFs with cairo's PDF surface
 * (pdf_fixture.h). The only test file that includes cairo (its own CFLAGS
 * rule in the Makefile). Text goes through cairo's toy text API, which
 * embeds a subset of the font with a ToUnicode map, as real PDFs do.
 * Also the tests' independent reading of a PDF: poppler-utils' pdftotext.
 */
#include "tests/pdf_fixture.h"
#include "tests/test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cairo-pdf.h>
#include <cairo.h>

#define PAGE_W 595.0
#define PAGE_H 842.0
#define MARGIN 56.0
#define LINE_H 14.0

/* Lines of text (separated by '\n') from (x, y) down. */
static void draw_lines(cairo_t *cr, const char *text, double x, double y)
{
	char line[512];

	while (text && *text) {
		size_t n = strcspn(text, "\n");
		snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), text);
		cairo_move_to(cr, x, y);
		cairo_show_text(cr, line);
		y += LINE_H;
		text += n + (text[n] == '\n');
	}
}

/* A 64 x 64 checkered image painted at (x, y), 3x its size. */
static void draw_image(cairo_t *cr, double x, double y)
{
	cairo_surface_t *img = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 64, 64);
	unsigned char *px = cairo_image_surface_get_data(img);
	int stride = cairo_image_surface_get_stride(img);

	cairo_surface_flush(img);
	for (int r = 0; r < 64; r++)
		for (int c = 0; c < 64; c++) {
			unsigned v = ((r / 8 + c / 8) % 2) ? 0x30a050u : 0xf0e0c0u;
			memcpy(px + r * stride + c * 4, &v, 4);
		}
	cairo_surface_mark_dirty(img);
	cairo_save(cr);
	cairo_translate(cr, x, y);
	cairo_scale(cr, 3, 3);
	cairo_set_source_surface(cr, img, 0, 0);
	cairo_paint(cr);
	cairo_restore(cr);
	cairo_surface_destroy(img);
}

int fx_pdf_write(const char *path, const struct fx_page *pages, int n, const char *header,
		 int page_numbers, char *err, size_t errlen)
{
	cairo_surface_t *s = cairo_pdf_surface_create(path, PAGE_W, PAGE_H);
	cairo_t *cr = cairo_create(s);
	char foot[64];

	cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
	cairo_set_font_size(cr, 11);
	for (int p = 0; p < n; p++) {
		if (pages[p].image)
			draw_image(cr, MARGIN, 200);
		cairo_set_source_rgb(cr, 0, 0, 0);
		if (header)
			draw_lines(cr, header, MARGIN, 40);
		draw_lines(cr, pages[p].left, MARGIN, 90);
		draw_lines(cr, pages[p].right, PAGE_W / 2 + 10, 90);
		if (page_numbers) {
			snprintf(foot, sizeof foot, "Page %d of %d", p + 1, n);
			draw_lines(cr, foot, PAGE_W / 2 - 30, PAGE_H - 30);
		}
		cairo_show_page(cr);
	}
	cairo_destroy(cr);
	cairo_surface_finish(s);
	cairo_status_t st = cairo_surface_status(s);
	cairo_surface_destroy(s);
	if (st != CAIRO_STATUS_SUCCESS) {
		snprintf(err, errlen, "cairo: %s: %s", path, cairo_status_to_string(st));
		return -1;
	}
	return 0;
}

char *fx_squash(char *s)
{
	size_t o = 0;
	int sp = 0;

	for (size_t i = 0; s[i]; i++) {
		if (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\f' || s[i] == '\r') {
			sp = o > 0;
			continue;
		}
		if (sp)
			s[o++] = ' ';
		sp = 0;
		s[o++] = s[i];
	}
	s[o] = 0;
	return s;
}

char *fx_pdftotext(const char *path, int a, int b)
{
	char cmd[1200];
	int st;

	snprintf(cmd, sizeof cmd, "pdftotext -q -enc UTF-8 -f %d -l %d '%s' - 2>/dev/null", a, b, path);
	char *out = test_run_cmd(cmd, &st);
	if (out && st != 0) {
		free(out);
		return NULL;
	}
	return out ? fx_squash(out) : NULL;
}
