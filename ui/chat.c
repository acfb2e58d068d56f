/* chat.c - the chat screen: layout, the key loop, asking, and the per-token
 * redraw called from inside ops->ask.
 *
 * Layout: header; transcript (about 60%) beside the zoom panel, or the
 * panel below it / hidden under UI_WIDE_COLS columns (F2 or Tab toggles);
 * memory gauge; status line; input line last. Every redraw draws each
 * panel into its window with wnoutrefresh and ends with one doupdate, the
 * input window last so the cursor sits there. While ops->ask runs, the
 * screen lives in ui_chat_on_token: it polls keys without waiting (resize,
 * scroll, typing ahead) and turns a Ctrl-C (a flag from term.c) into "stop".
 * Two Ctrl-C within UI_QUIT_WINDOW seconds, Ctrl-D on an empty line or
 * /quit leave ui_chat_run, which restores the terminal on every path.
 */
#include "ui/screen.h"

#include <stdlib.h>
#include <string.h>

#include "engine/base/clock.h"
#include "engine/base/err.h"

#define IDLE_POLL_MS 200

static const struct ui_glyphs glyphs_utf8 = {
	.heat = {" ", "\xe2\x96\x91", "\xe2\x96\x92", "\xe2\x96\x93", "\xe2\x96\x88"},
	.eighth = {" ", "\xe2\x96\x8f", "\xe2\x96\x8e", "\xe2\x96\x8d", "\xe2\x96\x8c",
		   "\xe2\x96\x8b", "\xe2\x96\x8a", "\xe2\x96\x89", "\xe2\x96\x88"},
	.ell = "\xe2\x80\xa6",
	.vline = "\xe2\x94\x82",
	.hline = "\xe2\x94\x80",
	.bar_l = "\xe2\x96\x95",
	.bar_r = "\xe2\x96\x8f",
	.mark = "\xe2\x96\x88",
	.dot = "\xc2\xb7",
	.tick = "\xc2\xb7",
};

static const struct ui_glyphs glyphs_ascii = {
	.heat = {" ", ".", ":", "*", "#"},
	.eighth = {" ", " ", " ", "-", "-", "-", "-", "=", "="},
	.ell = "...",
	.vline = "|",
	.hline = "-",
	.bar_l = "[",
	.bar_r = "]",
	.mark = "#",
	.dot = ".",
	.tick = ".",
};

static const char help_line[] =
	"Ask a question about the document and press Enter. PgUp/PgDn scroll, "
	"F2 or Tab shows/hides the zoom panel, Up/Down recall questions, F1 "
	"shows this help. Ctrl-C stops an answer; Ctrl-C twice within 2 s, "
	"Ctrl-D on an empty line or /quit leaves. /clear empties the transcript.";

void ui_layout_compute(int rows, int cols, int show_panel, struct ui_layout *l)
{
	int gauge_h, main_h;

	memset(l, 0, sizeof *l);
	if (rows < 1 || cols < 1)
		return;
	l->input = (struct ui_rect){rows - 1, 0, 1, cols};
	if (rows < UI_MIN_ROWS || cols < UI_MIN_COLS) {
		l->too_small = 1;
		if (rows > 1)
			l->tr = (struct ui_rect){0, 0, rows - 1, cols};
		return;
	}
	gauge_h = rows >= 16 ? 2 : 1;
	main_h = rows - 3 - gauge_h;
	l->hdr = (struct ui_rect){0, 0, 1, cols};
	l->status = (struct ui_rect){rows - 2, 0, 1, cols};
	l->gauge = (struct ui_rect){rows - 2 - gauge_h, 0, gauge_h, cols};
	l->tr = (struct ui_rect){1, 0, main_h, cols};
	if (show_panel && cols >= UI_WIDE_COLS) {
		int tr_w = cols * 3 / 5;
		l->panel = UI_PANEL_SIDE;
		l->tr.w = tr_w;
		l->sep = (struct ui_rect){1, tr_w, main_h, 1};
		l->zoom = (struct ui_rect){1, tr_w + 1, main_h, cols - tr_w - 1};
	} else if (show_panel && main_h >= 10) {
		int zoom_h = main_h / 2;
		l->panel = UI_PANEL_BELOW;
		l->tr.h = main_h - zoom_h;
		l->zoom = (struct ui_rect){1 + l->tr.h, 0, zoom_h, cols};
	}
}

static WINDOW *open_win(struct ui_rect r)
{
	return r.h > 0 && r.w > 0 ? newwin(r.h, r.w, r.y, r.x) : NULL;
}

static void close_wins(struct ui_chat *ui)
{
	WINDOW **all[] = {&ui->w_hdr, &ui->w_tr, &ui->w_sep, &ui->w_zoom,
			  &ui->w_gauge, &ui->w_status, &ui->w_input};

	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
		if (*all[i])
			delwin(*all[i]);
		*all[i] = NULL;
	}
}

/* (Re)creates the windows for the current terminal size. 0 or SEKV_ENOMEM. */
static int apply_layout(struct ui_chat *ui)
{
	int show;

	close_wins(ui);
	getmaxyx(stdscr, ui->rows, ui->cols);
	show = ui->cols >= UI_WIDE_COLS ? ui->show_wide : ui->show_narrow;
	ui_layout_compute(ui->rows, ui->cols, show, &ui->lay);
	ui->w_hdr = open_win(ui->lay.hdr);
	ui->w_tr = open_win(ui->lay.tr);
	ui->w_sep = open_win(ui->lay.sep);
	ui->w_zoom = open_win(ui->lay.zoom);
	ui->w_gauge = open_win(ui->lay.gauge);
	ui->w_status = open_win(ui->lay.status);
	ui->w_input = open_win(ui->lay.input);
	if (!ui->w_input)
		return SEKV_ENOMEM;
	keypad(ui->w_input, TRUE);
	wtimeout(ui->w_input, ui->busy ? 0 : IDLE_POLL_MS);
	/* Clear what the old layout left outside the new windows. */
	werase(stdscr);
	wnoutrefresh(stdscr);
	return 0;
}

static void draw_sep(struct ui_chat *ui)
{
	WINDOW *w = ui->w_sep;

	werase(w);
	for (int y = 0; y < getmaxy(w); y++)
		ui_put(w, y, 0, 1, ui->g->vline, (int)strlen(ui->g->vline), ui_attr(ui, UI_C_DIM, A_DIM));
	wnoutrefresh(w);
}

static void draw_small(struct ui_chat *ui)
{
	WINDOW *w = ui->w_tr;

	if (!w)
		return;
	werase(w);
	ui_putf(w, 0, 0, getmaxx(w), A_BOLD, "terminal too small (%dx%d)", ui->cols, ui->rows);
	ui_putf(w, 1, 0, getmaxx(w), A_NORMAL, "need %dx%d", UI_MIN_COLS, UI_MIN_ROWS);
	wnoutrefresh(w);
}

static void draw_all(struct ui_chat *ui)
{
	if (ui->lay.too_small) {
		draw_small(ui);
	} else {
		if (ui->w_hdr)
			ui_header_draw(ui->w_hdr, ui);
		if (ui->w_tr)
			ui_transcript_draw(ui->w_tr, ui);
		if (ui->w_sep)
			draw_sep(ui);
		if (ui->w_zoom)
			ui_zoom_panel_draw(ui->w_zoom, ui);
		if (ui->w_gauge)
			ui_gauge_draw(ui->w_gauge, ui);
		if (ui->w_status)
			ui_status_draw(ui->w_status, ui);
	}
	ui_input_draw(ui->w_input, ui);
	doupdate();
}

static void set_note(struct ui_chat *ui, const char *msg, double secs)
{
	snprintf(ui->note, sizeof ui->note, " %s ", msg);
	ui->note_until = clk_now() + secs;
}

static void toggle_panel(struct ui_chat *ui)
{
	int *show = ui->cols >= UI_WIDE_COLS ? &ui->show_wide : &ui->show_narrow;

	*show = !*show;
	apply_layout(ui);
	if (*show && ui->lay.panel == UI_PANEL_NONE)
		set_note(ui, "no room for the zoom panel", 2.0);
}

static void add_note(struct ui_chat *ui, int role, const char *msg)
{
	ui_transcript_add(&ui->tr, role, msg, (int)strlen(msg));
}

/* One key from wget_wch (r: OK or KEY_CODE_YES). Returns a UI_IN_* action. */
static int on_key(struct ui_chat *ui, int r, wint_t ch)
{
	int fkey = r == KEY_CODE_YES;

	if (fkey && ch == KEY_RESIZE) {
		apply_layout(ui);
		return UI_IN_NONE;
	}
	if ((fkey && ch == KEY_F(2)) || (!fkey && ch == '\t')) {
		toggle_panel(ui);
		return UI_IN_NONE;
	}
	if (fkey && ch == KEY_F(1)) {
		add_note(ui, UI_ROLE_INFO, help_line);
		ui->tr.scroll = 0;
		return UI_IN_NONE;
	}
	if (!fkey && ch == ('L' & 0x1f)) {
		clearok(curscr, TRUE);
		return UI_IN_NONE;
	}
	if (fkey && ui_transcript_key(&ui->tr, (int)ch))
		return UI_IN_NONE;
	return ui_input_key(&ui->in, fkey, (uint32_t)ch);
}

static void ask(struct ui_chat *ui, const char *q)
{
	char err[256] = "";
	int rc;

	ui->tr.scroll = 0;
	if (ui_transcript_add(&ui->tr, UI_ROLE_USER, q, (int)strlen(q)) ||
	    ui_transcript_add(&ui->tr, UI_ROLE_ANSWER, "", 0)) {
		set_note(ui, "out of memory", 3.0);
		return;
	}
	ui->busy = 1;
	ui->stop = 0;
	ui->snap.n_gen = 0;
	ui_term_sigint_take();
	wtimeout(ui->w_input, 0);
	draw_all(ui);
	rc = ui->ops->ask(ui->ops->ud, ui, q, err, sizeof err);
	ui->busy = 0;
	wtimeout(ui->w_input, IDLE_POLL_MS);
	ui_transcript_flush(&ui->tr);
	if (rc < 0 || ui->stop)
		ui_transcript_drop_empty(&ui->tr);
	if (rc == SEKV_EINTR || (rc == 0 && ui->stop)) {
		add_note(ui, UI_ROLE_INFO, "answer stopped");
	} else if (rc < 0) {
		char msg[320];
		snprintf(msg, sizeof msg, "error: %s", err[0] ? err : sekv_strerror(rc));
		add_note(ui, UI_ROLE_ERROR, msg);
	} else if (ui->tr.n_ent > 0 && ui->tr.ent[ui->tr.n_ent - 1].len == 0) {
		add_note(ui, UI_ROLE_INFO, "(empty answer)");
	}
	ui->stop = 0;
	if (ui_term_quit_requested())
		ui->quit = 1;
}

/* Enter on the idle line: a command or a question. */
static void submit(struct ui_chat *ui)
{
	char q[UI_INPUT_MAX];
	int a = 0, b = ui->in.len;

	while (a < b && ui->in.buf[a] == ' ')
		a++;
	while (b > a && ui->in.buf[b - 1] == ' ')
		b--;
	memcpy(q, ui->in.buf + a, (size_t)(b - a));
	q[b - a] = '\0';
	ui_input_commit(&ui->in);
	if (!q[0])
		return;
	if (!strcmp(q, "/quit") || !strcmp(q, "/exit") || !strcmp(q, "/q"))
		ui->quit = 1;
	else if (!strcmp(q, "/clear"))
		ui_transcript_clear(&ui->tr);
	else if (!strcmp(q, "/help"))
		add_note(ui, UI_ROLE_INFO, help_line);
	else if (q[0] == '/' && !strchr(q, ' '))
		set_note(ui, "unknown command (/help, /clear, /quit)", 3.0);
	else
		ask(ui, q);
}

/* Ctrl-C presses noticed since the last look. */
static void take_sigint(struct ui_chat *ui)
{
	int n = ui_term_sigint_take();

	if (ui_term_quit_requested()) {
		ui->quit = ui->stop = 1;
		return;
	}
	if (!n)
		return;
	ui->hint_until = clk_now() + UI_QUIT_WINDOW;
	if (ui->busy)
		ui->stop = 1;
	else
		ui_input_clear(&ui->in);
}

static void init_colors(struct ui_chat *ui)
{
	short bg = -1, fg = -1, grey;

	if (!has_colors() || start_color() == ERR)
		return;
	if (use_default_colors() == ERR) {
		bg = COLOR_BLACK;
		fg = COLOR_WHITE;
	}
	grey = COLORS >= 16 ? 8 : COLOR_WHITE;
	init_pair(UI_C_HDR, COLOR_BLACK, COLOR_CYAN);
	init_pair(UI_C_STATUS, COLOR_WHITE, COLOR_BLUE);
	init_pair(UI_C_BADGE, COLOR_BLACK, COLOR_GREEN);
	init_pair(UI_C_USER, COLOR_CYAN, bg);
	init_pair(UI_C_INFO, grey, bg);
	init_pair(UI_C_ERR, COLOR_RED, bg);
	init_pair(UI_C_DIM, grey, bg);
	init_pair(UI_C_BAR, COLOR_GREEN, bg);
	init_pair(UI_C_OVER, COLOR_RED, bg);
	init_pair(UI_C_QUOTE, fg, bg);
	init_pair(UI_C_KEY, COLOR_YELLOW, COLOR_BLUE);
	init_pair(UI_C_HINT, COLOR_WHITE, COLOR_RED);
	init_pair(UI_C_HEAT1, COLOR_BLUE, bg);
	init_pair(UI_C_HEAT2, COLOR_CYAN, bg);
	init_pair(UI_C_HEAT3, COLOR_YELLOW, bg);
	init_pair(UI_C_HEAT4, COLOR_RED, bg);
	ui->color = 1;
}

static void chat_free(struct ui_chat *ui)
{
	close_wins(ui);
	ui_transcript_free(&ui->tr);
	ui_input_free(&ui->in);
	ui_snap_free(&ui->snap);
	free(ui);
}

int ui_chat_run(const struct ui_chat_ops *ops, const struct ui_doc_info *info,
		char *err, size_t errlen)
{
	struct ui_chat *ui;
	int rc;

	if (!ops || !ops->ask)
		return sekv_errf(err, errlen, SEKV_EINVAL, "chat: ops: ask is required");
	ui = calloc(1, sizeof *ui);
	if (!ui)
		return sekv_errf(err, errlen, SEKV_ENOMEM, "chat: out of memory");
	ui->ops = ops;
	ui->info = info;
	ui->show_wide = 1;
	ui_input_clear(&ui->in);
	rc = ui_term_open(&ui->term, err, errlen);
	if (rc) {
		free(ui);
		return rc;
	}
	ui->g = ui->term.utf8 ? &glyphs_utf8 : &glyphs_ascii;
	init_colors(ui);
	add_note(ui, UI_ROLE_INFO, help_line);
	for (int i = 0; info && i < info->n_turn; i++) {
		if (ui_transcript_add_turn(&ui->tr, &info->turns[i]))
			set_note(ui, "out of memory: transcript incomplete", 3.0);
		ui_input_hist_add(&ui->in, info->turns[i].question);
	}
	if (info && info->resumed)
		add_note(ui, UI_ROLE_INFO, info->resumed);
	rc = apply_layout(ui);
	if (rc) {
		sekv_errf(err, errlen, rc, "chat: cannot create windows");
		goto out;
	}
	draw_all(ui);
	while (!ui->quit) {
		wint_t ch;
		int r, act;

		take_sigint(ui);
		if (ui->quit)
			break;
		r = wget_wch(ui->w_input, &ch);
		if (r != ERR) {
			act = on_key(ui, r, ch);
			if (act == UI_IN_EOF)
				ui->quit = 1;
			else if (act == UI_IN_SUBMIT)
				submit(ui);
		}
		if (!ui->quit)
			draw_all(ui);
	}
out:
	ui_term_close(&ui->term);
	chat_free(ui);
	return rc;
}

int ui_chat_on_token(struct ui_chat *ui, const struct ui_frame *f)
{
	wint_t ch;
	int r;

	if (!ui)
		return 0;
	if (f) {
		int n = f->piece ? (f->piece_len >= 0 ? f->piece_len : (int)strlen(f->piece)) : 0;
		if (ui_transcript_append(&ui->tr, f->piece, n) || ui_snap_set(&ui->snap, f))
			set_note(ui, "out of memory: display incomplete", 3.0);
	}
	while (ui->w_input && (r = wget_wch(ui->w_input, &ch)) != ERR) {
		int act = on_key(ui, r, ch);
		if (act == UI_IN_EOF)
			ui->quit = ui->stop = 1;
		else if (act == UI_IN_SUBMIT)
			set_note(ui, "still answering: Ctrl-C stops it", 2.0);
	}
	take_sigint(ui);
	draw_all(ui);
	return ui->stop || ui->quit;
}

void ui_chat_note(struct ui_chat *ui, const char *msg)
{
	add_note(ui, UI_ROLE_INFO, msg);
}
