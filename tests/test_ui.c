/* test_ui.c - the UI's pure parts: UTF-8 decoding, word wrap, truncation,
 * byte/percentage formatting, heat buckets, grid fitting, bars, layout,
 * streamed-piece assembly, span ranking and line editing; and a resumed
 * session's transcript as the transcript panel draws it (curses over
 * /dev/null, read back from the window), its stored evidence included.
 * No test opens a terminal; the whole screen is checked by hand with
 * tools/ui_demo.c in tmux. */
#include "tests/test.h"
#include "tests/store_fixtures.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "app/app.h"
#include "engine/base/err.h"
#include "engine/base/utf8.h"
#include "store/store.h"
#include "ui/screen.h"
#include "ui/text.h"

/* Every line of a wrap stays within width, starts and ends on character
 * boundaries, and the non-space characters come out in order. */
static int wrap_ok(const char *s, int width, char *why, size_t cap)
{
	struct ui_line l[256];
	char joined[1024], orig[1024];
	int n = ui_text_wrap(s, (int)strlen(s), width, l, 256), o = 0, k = 0;

	if (n < 1 || n > 256) {
		snprintf(why, cap, "width %d: %d lines", width, n);
		return 0;
	}
	for (int i = 0; i < n; i++) {
		uint32_t c;
		int w = ui_text_width(s + l[i].off, l[i].len);
		if (w != l[i].width || (w > width && l[i].len > 4)) {
			snprintf(why, cap, "width %d line %d: %d columns", width, i, w);
			return 0;
		}
		for (int j = 0; j < l[i].len;) {
			int m = utf8_decode(s + l[i].off + j, (size_t)(l[i].len - j), &c, NULL);
			if (c == 0xfffd) {
				snprintf(why, cap, "width %d line %d splits a character", width, i);
				return 0;
			}
			j += m;
		}
		for (int j = 0; j < l[i].len; j++)
			if (s[l[i].off + j] != ' ' && s[l[i].off + j] != '\n')
				joined[o++] = s[l[i].off + j];
	}
	for (const char *p = s; *p; p++)
		if (*p != ' ' && *p != '\n')
			orig[k++] = *p;
	if (o != k || memcmp(joined, orig, (size_t)k)) {
		snprintf(why, cap, "width %d: text lost or reordered", width);
		return 0;
	}
	return 1;
}

static void t_wrap_words_at_spaces(struct test_ctx *t)
{
	const char *s = "The quick brown fox jumps";
	struct ui_line l[8];
	int n = ui_text_wrap(s, (int)strlen(s), 10, l, 8);

	T_CHECKF(t, n == 3, "lines %d", n);
	T_CHECK(t, l[0].len == 9 && !memcmp(s + l[0].off, "The quick", 9));
	T_CHECK(t, l[1].len == 9 && !memcmp(s + l[1].off, "brown fox", 9));
	T_CHECK(t, l[2].len == 5 && !memcmp(s + l[2].off, "jumps", 5));
	T_CHECK(t, l[0].width == 9 && l[2].width == 5);
}

static void t_wrap_utf8_never_split(struct test_ctx *t)
{
	const char *s = "Naïve café — 東京タワー was built in 1958; "
			"supercalifragilistic ünïcödé\n\n  indented 公文書館 end";
	char why[128];

	for (int w = 1; w <= 40; w++)
		T_CHECKF(t, wrap_ok(s, w, why, sizeof why), "%s", why);
}

static void t_wrap_cjk_columns(struct test_ctx *t)
{
	const char *s = "東京タワー";
	struct ui_line l[8];
	int n = ui_text_wrap(s, (int)strlen(s), 4, l, 8);

	T_CHECKF(t, n == 3, "lines %d", n);
	T_CHECK(t, l[0].len == 6 && l[0].width == 4);
	T_CHECK(t, l[1].len == 6 && !memcmp(s + l[1].off, "タワ", 6));
	T_CHECK(t, l[2].len == 3 && l[2].width == 2);
}

static void t_wrap_hard_breaks_long_words(struct test_ctx *t)
{
	struct ui_line l[8];
	const char *w = "abcdefghijklmnopqrst";
	int n;

	T_CHECK(t, ui_text_wrap("", 0, 10, l, 8) == 1 && l[0].len == 0);
	n = ui_text_wrap("a\n\nb", 4, 10, l, 8);
	T_CHECKF(t, n == 3, "lines %d", n);
	T_CHECK(t, l[1].len == 0 && l[2].off == 3);
	n = ui_text_wrap(w, 20, 5, l, 8);
	T_CHECKF(t, n == 4, "lines %d", n);
	T_CHECK(t, l[3].off == 15 && l[3].len == 5);
	/* Counting alone (cap 0) agrees with filling. */
	T_CHECK(t, ui_text_wrap(w, 20, 5, NULL, 0) == 4);
	/* Leading indent of a paragraph is kept. */
	n = ui_text_wrap("  ab cd", 7, 20, l, 8);
	T_CHECK(t, n == 1 && l[0].off == 0 && l[0].len == 7);
}

static void t_width_table(struct test_ctx *t)
{
	T_CHECK(t, ui_char_width('a') == 1);
	T_CHECK(t, ui_char_width(0xe9) == 1);      /* é */
	T_CHECK(t, ui_char_width(0x301) == 0);     /* combining acute */
	T_CHECK(t, ui_char_width(0x6771) == 2);    /* 東 */
	T_CHECK(t, ui_char_width(0xac00) == 2);    /* 가 */
	T_CHECK(t, ui_char_width(0x1f4dc) == 2);   /* 📜 */
	T_CHECK(t, ui_char_width(0x200b) == 0);
	T_CHECK(t, ui_char_width(0x07) == 0);
	T_CHECK(t, ui_text_width("e\xcc\x81t\xc3\xa9", 6) == 3);
}

static void t_trunc_no_split(struct test_ctx *t)
{
	int cols;

	T_CHECK(t, ui_text_trunc("h\xc3\xa9llo", 6, 2, &cols) == 3 && cols == 2);
	/* A wide character that does not fit is left out whole. */
	T_CHECK(t, ui_text_trunc("東京", 6, 3, &cols) == 3 && cols == 2);
	T_CHECK(t, ui_text_trunc("東京", 6, 1, &cols) == 0 && cols == 0);
	/* A combining mark stays with its base. */
	T_CHECK(t, ui_text_trunc("e\xcc\x81x", 4, 1, &cols) == 3 && cols == 1);
	T_CHECK(t, ui_text_trunc("abc", 3, 10, &cols) == 3 && cols == 3);
}

static void t_fit_ellipsis(struct test_ctx *t)
{
	char out[64];
	int n;

	n = ui_text_fit("hello world", 11, 8, "\xe2\x80\xa6", out, sizeof out);
	T_CHECKF(t, !strcmp(out, "hello w\xe2\x80\xa6"), "got '%s'", out);
	T_CHECK(t, n == 10 && ui_text_width(out, n) == 8);
	n = ui_text_fit("hello", 5, 8, "...", out, sizeof out);
	T_CHECK(t, n == 5 && !strcmp(out, "hello"));
	n = ui_text_fit("東京タワー", 15, 5, "\xe2\x80\xa6", out, sizeof out);
	T_CHECKF(t, !strcmp(out, "東京\xe2\x80\xa6"), "got '%s'", out);
	/* No space before the ellipsis, and the byte cap is honoured. */
	n = ui_text_fit("ab cd ef", 8, 4, "...", out, sizeof out);
	T_CHECKF(t, !strcmp(out, "a..."), "got '%s'", out);
	n = ui_text_fit("éééééé", 12, 10, "\xe2\x80\xa6", out, 6);
	T_CHECKF(t, n <= 5 && utf8_complete(out, (size_t)n) == (size_t)n, "n %d", n);
}

static void t_inert_drops_terminal_controls(struct test_ctx *t)
{
	static const char in[] = "title\x1b]0;pwned\x07 clip\x1b]52;c;SGk=\x1b\\ red\x1b[31m"
				 " csi\xc2\x9b" "2J del\x7f bell\x07 cr\r\n\ttab \xc2\x85nel \xc3\xa9 \xff";
	static const char want[] = "title]0;pwned clip]52;c;SGk=\\ red[31m csi2J del bell cr\n\ttab nel "
				   "\xc3\xa9 \xef\xbf\xbd";
	char out[256];
	int n = ui_text_inert(in, (int)sizeof in - 1, out, (int)sizeof out);

	T_CHECKF(t, n == (int)strlen(out) && !strcmp(out, want), "got '%s'", out);
	T_CHECK(t, !test_has_controls(out, (size_t)n) && test_has_controls(in, sizeof in - 1));
	/* the chat's sanitiser drops the same controls, tabs become spaces */
	n = ui_text_sanitize(in, (int)sizeof in - 1, out, (int)sizeof out);
	T_CHECK(t, !test_has_controls(out, (size_t)n) && !strchr(out, '\t'));
}

static void t_sanitize_squash(struct test_ctx *t)
{
	char out[64];
	int n;

	n = ui_text_sanitize("a\tb\r\n\x01" "c\xff", 8, out, sizeof out);
	T_CHECKF(t, !strcmp(out, "a b\nc\xef\xbf\xbd"), "got '%s'", out);
	T_CHECK(t, n == 8);
	n = ui_text_squash("  one\n\n two\t three  ", 20, out, sizeof out);
	T_CHECKF(t, !strcmp(out, "one two three"), "got '%s'", out);
	/* Never a partial character at the cap. */
	n = ui_text_sanitize("ab東", 5, out, 4);
	T_CHECK(t, n == 2 && !strcmp(out, "ab"));
}

static void t_fmt_pct_count(struct test_ctx *t)
{
	char b[32];

	ui_fmt_pct(0.006, b, sizeof b);
	T_CHECKF(t, !strcmp(b, "0.6%"), "got %s", b);
	ui_fmt_pct(0.61, b, sizeof b);
	T_CHECKF(t, !strcmp(b, "61%"), "got %s", b);
	ui_fmt_pct(0.0006, b, sizeof b);
	T_CHECKF(t, !strcmp(b, "0.06%"), "got %s", b);
	ui_fmt_pct(-1.0, b, sizeof b);
	T_CHECKF(t, !strcmp(b, "0%"), "got %s", b);
	ui_fmt_count(1234567, b, sizeof b);
	T_CHECKF(t, !strcmp(b, "1,234,567"), "got %s", b);
	ui_fmt_count(999, b, sizeof b);
	T_CHECKF(t, !strcmp(b, "999"), "got %s", b);
	ui_fmt_count(-120000, b, sizeof b);
	T_CHECKF(t, !strcmp(b, "-120,000"), "got %s", b);
}

static void t_heat_bucket(struct test_ctx *t)
{
	int prev = 0;

	T_CHECK(t, ui_heat_bucket(0, 10, 5) == 0);
	T_CHECK(t, ui_heat_bucket(-3, 10, 5) == 0);
	T_CHECK(t, ui_heat_bucket(1, 10, 5) == 1);
	T_CHECK(t, ui_heat_bucket(5, 10, 5) == 2);
	T_CHECK(t, ui_heat_bucket(6, 10, 5) == 3);
	T_CHECK(t, ui_heat_bucket(10, 10, 5) == 4);
	T_CHECK(t, ui_heat_bucket(25, 10, 5) == 4);
	T_CHECK(t, ui_heat_bucket(1, 0, 5) == 4);
	T_CHECK(t, ui_heat_bucket(1000000, 2000000, 5) == 2);
	for (int c = 0; c <= 37; c++) {
		int b = ui_heat_bucket(c, 37, 5);
		T_CHECKF(t, b >= prev && b <= 4, "count %d bucket %d after %d", c, b, prev);
		prev = b;
	}
}

static void t_grid_fit(struct test_ctx *t)
{
	struct ui_grid_fit g;

	ui_grid_fit(3, 4, 30, 10, &g);        /* Gemma 3 270M: 3 global layers, 4 heads */
	T_CHECK(t, g.cell_w == 4 && g.numbers && g.n_col == 4 && g.n_row == 3);
	T_CHECK(t, g.head_grp == 1 && g.layer_grp == 1);
	ui_grid_fit(32, 32, 40, 10, &g);      /* Llama: every layer global */
	T_CHECKF(t, g.cell_w == 1 && g.head_grp == 1 && g.n_col == 32, "cell %d grp %d",
		 g.cell_w, g.head_grp);
	T_CHECKF(t, g.layer_grp == 4 && g.n_row == 8, "lgrp %d rows %d", g.layer_grp, g.n_row);
	ui_grid_fit(34, 32, 20, 10, &g);
	T_CHECK(t, g.head_grp == 2 && g.n_col == 16 && g.n_row <= 10);
	ui_grid_fit(5, 8, 16, 10, &g);
	T_CHECK(t, g.cell_w == 2 && !g.numbers && g.n_col == 8);
}

static void t_pos_cells(struct test_ctx *t)
{
	int lo, hi;

	ui_pos_cells(0, 1, 100, 10, &lo, &hi);
	T_CHECK(t, lo == 0 && hi == 0);
	ui_pos_cells(99, 1, 100, 10, &lo, &hi);
	T_CHECK(t, lo == 9 && hi == 9);
	ui_pos_cells(50, 20, 100, 10, &lo, &hi);
	T_CHECKF(t, lo == 5 && hi == 6, "%d..%d", lo, hi);
	ui_pos_cells(500, 20, 100, 10, &lo, &hi);
	T_CHECK(t, lo == 9 && hi == 9);
	ui_pos_cells(10, 5, 100, 0, &lo, &hi);
	T_CHECK(t, hi < lo);
	ui_pos_cells(44640, 48, 120000, 20, &lo, &hi);
	T_CHECK(t, lo == 7 && hi == 7);
}

static void t_bar_eighths(struct test_ctx *t)
{
	T_CHECK(t, ui_bar_eighths(0.5, 1.0, 10) == 40);
	T_CHECK(t, ui_bar_eighths(2.0, 1.0, 10) == 80);
	T_CHECK(t, ui_bar_eighths(1e-9, 1.0, 10) == 1);
	T_CHECK(t, ui_bar_eighths(0.0, 1.0, 10) == 0);
	T_CHECK(t, ui_bar_eighths(1.0, 0.0, 10) == 0);
	T_CHECK(t, ui_bar_eighths(15.1, 20.0, 40) == 242);
}

static int inside(struct ui_rect r, int rows, int cols)
{
	return r.h == 0 || (r.y >= 0 && r.x >= 0 && r.y + r.h <= rows && r.x + r.w <= cols);
}

static void t_layout(struct test_ctx *t)
{
	struct ui_layout l;

	ui_layout_compute(40, 120, 1, &l);
	T_CHECK(t, !l.too_small && l.panel == UI_PANEL_SIDE);
	T_CHECKF(t, l.tr.w == 72 && l.sep.x == 72 && l.zoom.x == 73 && l.zoom.w == 47,
		 "tr %d zoom %d+%d", l.tr.w, l.zoom.x, l.zoom.w);
	T_CHECK(t, l.hdr.y == 0 && l.input.y == 39 && l.status.y == 38 && l.gauge.y == 36);
	T_CHECK(t, l.tr.y == 1 && l.tr.y + l.tr.h == l.gauge.y && l.zoom.h == l.tr.h);
	ui_layout_compute(24, 80, 0, &l);
	T_CHECK(t, l.panel == UI_PANEL_NONE && l.tr.w == 80 && l.zoom.h == 0);
	ui_layout_compute(24, 80, 1, &l);
	T_CHECK(t, l.panel == UI_PANEL_BELOW && l.zoom.y == l.tr.y + l.tr.h);
	T_CHECK(t, l.zoom.y + l.zoom.h == l.gauge.y && l.zoom.w == 80);
	T_CHECK(t, inside(l.tr, 24, 80) && inside(l.zoom, 24, 80) && inside(l.gauge, 24, 80));
	ui_layout_compute(12, 89, 1, &l);  /* narrow and short: no room below */
	T_CHECK(t, l.panel == UI_PANEL_NONE && l.gauge.h == 1);
	ui_layout_compute(5, 20, 1, &l);
	T_CHECK(t, l.too_small && l.input.y == 4 && l.hdr.h == 0);
}

static void t_transcript_split_pieces(struct test_ctx *t)
{
	struct ui_transcript tr;
	const char *emoji = "\xf0\x9f\x93\x9c";

	memset(&tr, 0, sizeof tr);
	T_CHECK(t, ui_transcript_add(&tr, UI_ROLE_ANSWER, "", 0) == 0);
	ui_transcript_append(&tr, "caf\xc3", 4);
	T_CHECK(t, tr.ent[0].len == 3);
	ui_transcript_append(&tr, "\xa9 ok ", 5);
	for (int i = 0; i < 4; i++)
		ui_transcript_append(&tr, emoji + i, 1);
	ui_transcript_append(&tr, "\xe4\xb8", 2);
	ui_transcript_flush(&tr);
	T_CHECKF(t, tr.ent[0].len == 16 &&
		 !memcmp(tr.ent[0].text, "caf\xc3\xa9 ok \xf0\x9f\x93\x9c\xef\xbf\xbd", 16),
		 "len %d '%.*s'", tr.ent[0].len, tr.ent[0].len, tr.ent[0].text);
	/* A stopped answer with no text leaves no empty entry behind. */
	T_CHECK(t, ui_transcript_add(&tr, UI_ROLE_ANSWER, "", 0) == 0 && tr.n_ent == 2);
	ui_transcript_drop_empty(&tr);
	T_CHECK(t, tr.n_ent == 1);
	ui_transcript_drop_empty(&tr);
	T_CHECK(t, tr.n_ent == 1);
	ui_transcript_free(&tr);
}

static void t_snap_ranks_spans(struct test_ctx *t)
{
	/* Span 3 zoomed three times, span 7 twice with the higher alpha, and a
	 * zoom of span 9, outside the span list, left out. */
	struct sekv_zoom z[6] = {
		{.span = 7, .layer = 0, .head = 0, .alpha = 0.6f},
		{.span = 3, .layer = 0, .head = 1, .alpha = 0.7f},
		{.span = 7, .layer = 1, .head = 2, .alpha = 0.9f},
		{.span = 9, .layer = 1, .head = 3, .alpha = 0.95f},
		{.span = 3, .layer = 1, .head = 0, .alpha = 0.8f},
		{.span = 3, .layer = 2, .head = 3, .alpha = 0.5f},
	};
	struct sekv_span spans[8] = {[3] = {300, 10, 0}, [7] = {700, 12, 0}};
	int counts[12] = {1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 0, 1};
	int32_t lid[3] = {5, 11, 17};
	struct sekv_stats st = {.zoom_count = counts, .n_zoom = 6, .zoom = z, .budget_bytes = 4096};
	struct ui_frame f = {.n_layer = 3, .n_head = 4, .layer_id = lid, .stats = &st,
			     .n_span = 8, .span = spans, .n_tok_doc = 1000, .mode = "sekv"};
	struct ui_snap s;

	memset(&s, 0, sizeof s);
	T_CHECK(t, ui_snap_set(&s, &f) == 0);
	T_CHECKF(t, s.n_zoom == 5 && s.n_span == 2 && s.span[0].best.span == 3 && s.span[0].n_zoom == 3,
		 "n_zoom %d n_span %d first %d", s.n_zoom, s.n_span, s.n_span ? s.span[0].best.span : -1);
	T_CHECK(t, s.span[0].best.alpha > 0.79f && s.span[0].best.layer == 1 && s.span[0].best.head == 0);
	T_CHECK(t, s.span[1].best.span == 7 && s.span[1].best.alpha > 0.89f);
	T_CHECK(t, s.span[0].pos.start == 300 && s.span[1].pos.start == 700 && s.span[1].pos.len == 12);
	T_CHECK(t, s.has_grid && s.zoom_count[11] == 1 && s.layer_id[2] == 17 && s.budget_bytes == 4096);
	f.stats = NULL;
	T_CHECK(t, ui_snap_set(&s, &f) == 0 && !s.has_grid && s.n_span == 0 && s.budget_bytes == 0);
	ui_snap_free(&s);
}

static void t_input_editing(struct test_ctx *t)
{
	static struct ui_input in;
	const uint32_t word[] = {'h', 0xe9, 'l', 'l', 'o'};

	memset(&in, 0, sizeof in);
	ui_input_clear(&in);
	T_CHECK(t, ui_input_key(&in, 0, 4) == UI_IN_EOF);   /* Ctrl-D, empty */
	for (int i = 0; i < 5; i++)
		ui_input_key(&in, 0, word[i]);
	T_CHECK(t, in.len == 6 && !strcmp(in.buf, "h\xc3\xa9llo"));
	ui_input_key(&in, 1, KEY_LEFT);
	ui_input_key(&in, 1, KEY_BACKSPACE);
	T_CHECKF(t, !strcmp(in.buf, "h\xc3\xa9lo"), "got '%s'", in.buf);
	ui_input_key(&in, 1, KEY_HOME);
	ui_input_key(&in, 1, KEY_RIGHT);
	ui_input_key(&in, 1, KEY_DC);                       /* deletes é whole */
	T_CHECKF(t, !strcmp(in.buf, "hlo") && in.cur == 1, "got '%s' %d", in.buf, in.cur);
	T_CHECK(t, ui_input_key(&in, 0, '\r') == UI_IN_SUBMIT);
	ui_input_commit(&in);
	T_CHECK(t, in.len == 0 && in.n_hist == 1);
	ui_input_key(&in, 0, 'x');
	ui_input_key(&in, 1, KEY_UP);
	T_CHECK(t, !strcmp(in.buf, "hlo"));
	ui_input_key(&in, 1, KEY_DOWN);
	T_CHECK(t, !strcmp(in.buf, "x"));
	ui_input_key(&in, 0, ' ');
	ui_input_key(&in, 0, 'y');
	ui_input_key(&in, 0, 'z');
	ui_input_key(&in, 0, 0x17);                         /* Ctrl-W */
	T_CHECKF(t, !strcmp(in.buf, "x "), "got '%s'", in.buf);
	ui_input_free(&in);
}

/* Draws turns [n] as ui_chat_run shows a resumed session's transcript
 * (ui_transcript_add_turn, then the transcript panel) on a curses screen
 * over /dev/null, 200 columns wide, and reads it back: the non-blank rows,
 * each ended by '\n', into out [cap]. 0, 1 when curses cannot start here
 * (no terminfo entry), or SEKV_ENOMEM. */
static int draw_turns(const struct ui_turn *turns, int n, char *out, size_t cap)
{
	FILE *o = fopen("/dev/null", "w"), *in = fopen("/dev/null", "r");
	SCREEN *scr = o && in ? newterm("vt100", o, in) : NULL;
	struct ui_chat *ui = scr ? calloc(1, sizeof *ui) : NULL;
	WINDOW *w = ui ? newpad(60, 200) : NULL;
	int rc = scr ? (w ? 0 : SEKV_ENOMEM) : 1;
	size_t at = 0;

	for (int i = 0; !rc && i < n; i++)
		rc = ui_transcript_add_turn(&ui->tr, &turns[i]);
	if (!rc)
		ui_transcript_draw(w, ui);
	out[0] = 0;
	for (int y = 0; !rc && y < getmaxy(w); y++) {
		char row[256];
		int k = mvwinnstr(w, y, 0, row, 200);
		while (k > 0 && row[k - 1] == ' ')
			k--;
		if (k > 0 && at + (size_t)k + 2 < cap) {
			memcpy(out + at, row, (size_t)k);
			at += (size_t)k;
			out[at++] = '\n';
			out[at] = 0;
		}
	}
	if (w)
		delwin(w);
	if (ui)
		ui_transcript_free(&ui->tr);
	free(ui);
	if (scr) {
		endwin();
		delscreen(scr);
	}
	if (o)
		fclose(o);
	if (in)
		fclose(in);
	return rc;
}

/* An earlier turn's notes are drawn after its answer, before the next
 * question, as info lines; a note's terminal controls never reach the
 * screen. */
static void t_resumed_turn_notes_drawn(struct test_ctx *t)
{
	const char *notes[2] = { "evidence 1. [0, 9) +1.0%  first", "evidence 2. [9, 20) +0.5%  "
				 "bell\x07 title\x1b]0;x\x1b\\ csi\xc2\x9b" "2J" };
	struct ui_turn turns[2] = { { "Who?", "Mira.", notes, 2 }, { "When?", "Dusk.", NULL, 0 } };
	static char out[8192];
	int rc = draw_turns(turns, 2, out, sizeof out);

	if (rc == 1)
		T_SKIP(t, "curses cannot start on a vt100 over /dev/null here");
	T_CHECK(t, rc == 0);
	const char *q0 = strstr(out, "> Who?\n"), *a0 = strstr(out, "  Mira.\n");
	const char *n1 = strstr(out, "- evidence 1. [0, 9) +1.0%  first\n");
	const char *n2 = strstr(out, "- evidence 2. [9, 20) +0.5%  bell title]0;x\\ csi2J\n");
	const char *q1 = strstr(out, "> When?\n");
	T_CHECKF(t, q0 && a0 && n1 && n2 && q1 && q0 < a0 && a0 < n1 && n1 < n2 && n2 < q1,
		 "drawn:\n%s", out);
	T_CHECKF(t, !test_has_controls(out, strlen(out)) && !strstr(out, "^["), "drawn:\n%s", out);
}

/* Three pages (3-5) of a PDF's text; page 5 carries terminal controls. */
#define PDF_P3 "Chapter one. The harbour master kept the ledger of every ship.\n"
#define PDF_P4 "The lighthouse keeper, Mira Olsen, lit the lamp at dusk each night.\n"
#define PDF_P5 "In winter\x1b]0;pwned\x07 the bay froze and no ship came in.\n"

/* A library named name holding that document, with its page map (starts
 * 0, 63, 131 of 186 bytes) when pdf, and a session of three turns: two
 * evidence rows (page 4; pages 3-4), an imported turn (none), two rows
 * (page 5; one past the text); then the session read back as `chat
 * --session` reads it into tr (app_transcript_free it) and the page map
 * into pg (app_pages_free it). 0 or the failing code, err filled. */
static int stored_session(const char *name, int pdf, struct app_transcript *tr,
			  struct app_pages *pg, char *err, size_t errlen)
{
	static const char text[] = PDF_P3 PDF_P4 PDF_P5;
	const int64_t page_start[3] = { 0, 63, 131 };
	struct store_evidence_row ev0[2] = { { 1, 63, 130, 0.25, 63 }, { 2, 13, 77, -0.05, 13 } };
	struct store_evidence_row ev2[2] = { { 1, 131, 185, 0.125, 131 }, { 2, 150, 200, 0.0, 150 } };
	struct store_turn turn[3] = {
		{ .question = "Who lit the lamp?", .answer = "Mira Olsen.", .stopped = "stop",
		  .heads = "5:1", .n_ev = 2, .ev = ev0 },
		{ .question = "Earlier?", .answer = "Yes.", .stopped = "import" },
		{ .question = "When did the bay freeze?", .answer = "In winter.", .stopped = "stop",
		  .heads = "5:1", .n_ev = 2, .ev = ev2 },
	};
	struct store_doc d = { .n_layer_global = 1, .n_head_kv = 1, .d_h = 8 };
	struct store *s = NULL;
	int64_t ses = 0;
	int rc = store_open(&s, fixture_db_path(name), err, errlen);

	memset(tr, 0, sizeof *tr);
	memset(pg, 0, sizeof *pg);
	if (rc == 0)
		rc = store_doc_create(s, &d, text, sizeof text - 1, err, errlen);
	if (rc == 0 && pdf)
		rc = store_doc_put_pages(s, d.id, 3, 3, page_start, sizeof text - 1, err, errlen);
	if (rc == 0)
		rc = store_session_create(s, d.id, "sekv", &ses, err, errlen);
	for (int i = 0; rc == 0 && i < 3; i++)
		rc = store_session_add_turn(s, ses, &turn[i], err, errlen);
	if (rc == 0)
		rc = app_transcript_load(tr, s, ses, d.id, err, errlen);
	if (rc == 0)
		rc = app_pages_load(pg, s, d.id, err, errlen);
	store_close(s);
	return rc;
}

/* `chat --session` on a PDF's session: each earlier answer is followed on
 * screen by its stored evidence lines (rank, page, range, score, snippet,
 * made inert), the imported turn by none. */
static void t_resumed_transcript_draws_stored_evidence(struct test_ctx *t)
{
	struct app_transcript tr;
	struct app_pages pg;
	static char out[8192];
	char err[512];
	int rc = stored_session("ui_resumed", 1, &tr, &pg, err, sizeof err);
	int drawn = rc ? 0 : draw_turns(tr.ut, tr.n, out, sizeof out);
	int n_turn = tr.n, why = tr.why[0];

	app_transcript_free(&tr);
	app_pages_free(&pg);
	T_CHECKF(t, rc == 0, "%s", err);
	if (drawn == 1)
		T_SKIP(t, "curses cannot start on a vt100 over /dev/null here");
	T_CHECKF(t, drawn == 0 && n_turn == 3 && !why, "drawn %d, %d turns", drawn, n_turn);
	static const char want[] =
		"> Who lit the lamp?\n"
		"  Mira Olsen.\n"
		"- evidence 1. p. 4 [63, 130) +25.0%  The lighthouse keeper, Mira Olsen, lit the lamp at dusk each night.\n"
		"- evidence 2. pp. 3-4 [13, 77) -5.0%  The harbour master kept the ledger of every ship. The lighthouse\n"
		"> Earlier?\n"
		"  Yes.\n"
		"> When did the bay freeze?\n"
		"  In winter.\n"
		"- evidence 1. p. 5 [131, 185) +12.5%  In winter]0;pwned the bay froze and no ship came in.\n"
		"- evidence 2. p. 5 [150, 200) +0.0%  (outside the stored text)\n";
	T_CHECKF(t, !strcmp(out, want), "drawn:\n%s", out);
}

/* t_evidence_stored_line_equals_live over a PDF's session (pdf) or a
 * text document's. */
static void stored_line_equals_live(struct test_ctx *t, int pdf)
{
	static const char text[] = PDF_P3 PDF_P4 PDF_P5;
	const char *page = pdf ? "p. 4 " : "";
	struct app_transcript tr;
	struct app_pages pg;
	char err[512], live[APP_EVIDENCE_NOTE], want[APP_EVIDENCE_NOTE];
	int rc = stored_session(pdf ? "ui_evidence_pdf" : "ui_evidence_text", pdf, &tr, &pg, err,
				sizeof err);

	T_CHECKF(t, rc == 0 && tr.notes.n_note == 4 && pg.n_page == 3 * pdf && !tr.why[0],
		 "%s / %s", err, tr.why);
	for (int i = 0, k = 0; i < tr.n; i++)
		for (int j = 0; j < tr.turns[i].n_ev; j++, k++) {
			const struct store_evidence_row *r = &tr.turns[i].ev[j];
			struct evidence_passage p = { .rank = r->rank, .start = r->start, .end = r->end,
						      .peak = r->peak, .score = r->score };
			app_evidence_note(text, sizeof text - 1, &pg, &p, live, sizeof live);
			T_CHECKF(t, !strcmp(tr.notes.note[k], live), "row %d: stored '%s', live '%s'",
				 k, tr.notes.note[k], live);
		}
	snprintf(want, sizeof want, "evidence 1. %s[63, 130) +25.0%%  The lighthouse keeper, Mira "
		 "Olsen, lit the lamp at dusk each night.", page);
	T_CHECKF(t, !strcmp(tr.notes.note[0], want), "'%s'", tr.notes.note[0]);
	struct evidence_passage p = { .rank = 1, .start = 63, .end = 130, .peak = 110, .score = 0.25 };
	app_evidence_note(text, sizeof text - 1, &pg, &p, live, sizeof live);
	snprintf(want, sizeof want, "evidence 1. %s[63, 130) +25.0%%  ...keeper, Mira Olsen, lit the "
		 "lamp at dusk each night.", page);
	T_CHECKF(t, !strcmp(live, want), "'%s'", live);
	app_pages_free(&pg);
	app_transcript_free(&tr);
}

/* A stored row's line is the live answer's line for the same passage and
 * peak (these rows' peaks are their starts), for a PDF and for a
 * text document (no pages, nothing said missing); a live peak inside the
 * passage moves the snippet there, so the stored line is not a copy of a
 * fixed string. */
static void t_evidence_stored_line_equals_live(struct test_ctx *t)
{
	for (int pdf = 1; pdf >= 0 && !t->failed; pdf--)
		stored_line_equals_live(t, pdf);
}

const struct test_case test_ui[] = {
	{"ui_wrap_words_at_spaces", t_wrap_words_at_spaces},
	{"ui_wrap_utf8_never_split_and_fits", t_wrap_utf8_never_split},
	{"ui_wrap_cjk_two_columns", t_wrap_cjk_columns},
	{"ui_wrap_hard_breaks_and_long_words", t_wrap_hard_breaks_long_words},
	{"ui_char_width_table", t_width_table},
	{"ui_trunc_never_splits_utf8", t_trunc_no_split},
	{"ui_fit_adds_ellipsis_within_width", t_fit_ellipsis},
	{"ui_sanitize_and_squash", t_sanitize_squash},
	{"ui_inert_drops_terminal_controls", t_inert_drops_terminal_controls},
	{"ui_fmt_pct_and_count", t_fmt_pct_count},
	{"ui_heat_bucket_levels", t_heat_bucket},
	{"ui_grid_fit_groups_heads_and_layers", t_grid_fit},
	{"ui_pos_cells_map_document_position", t_pos_cells},
	{"ui_bar_eighths", t_bar_eighths},
	{"ui_layout_side_below_small", t_layout},
	{"ui_transcript_joins_split_utf8_pieces", t_transcript_split_pieces},
	{"ui_snap_ranks_spans_by_heads", t_snap_ranks_spans},
	{"ui_input_line_editing_utf8", t_input_editing},
	{"ui_resumed_turn_notes_drawn_after_answer_inert", t_resumed_turn_notes_drawn},
	{"ui_resumed_transcript_draws_stored_evidence", t_resumed_transcript_draws_stored_evidence},
	{"ui_evidence_stored_line_equals_live_line", t_evidence_stored_line_equals_live},
	{NULL, NULL},
};
