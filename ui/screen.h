/* screen.h - what the files of the chat screen share: the state behind
 * struct ui_chat, the layout, and each panel's X_draw / X_key.
 *
 * Internal to ui/ (and tests/test_ui.c). One file per panel: transcript.c,
 * input.c, zoom_panel.c, gauge.c, status.c (status line and header); the
 * loop, layout and ui_chat_on_token are in chat.c; terminal modes, locale
 * and signals in term.c; clipped drawing helpers in draw.c; pure text
 * helpers in text.h. Every panel draws into its own WINDOW with
 * wnoutrefresh; chat.c calls doupdate once per frame.
 */
#ifndef SEKV_UI_SCREEN_H
#define SEKV_UI_SCREEN_H

#ifndef _XOPEN_SOURCE_EXTENDED
#define _XOPEN_SOURCE_EXTENDED 1
#endif
#ifndef NCURSES_WIDECHAR
#define NCURSES_WIDECHAR 1
#endif
#include <ncurses.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/sekv/sekv.h"
#include "ui/text.h"
#include "ui/ui.h"

#define UI_WIDE_COLS 90     /* side panel from this width up */
#define UI_MIN_COLS 30
#define UI_MIN_ROWS 8
#define UI_INPUT_MAX 4096   /* bytes of the input line */
#define UI_HIST_MAX 64      /* questions kept for Up/Down */
#define UI_SPAN_CACHE 32    /* quoted spans remembered (span_text calls) */
#define UI_SPAN_TEXT 512    /* bytes quoted per span */
#define UI_HEAT_LEVELS 5    /* 0 = no zoom, 1..4 hotter */
#define UI_QUIT_WINDOW 2.0  /* seconds between two Ctrl-C that quit */

/* ---- layout (chat.c) ---- */

struct ui_rect {
	int y, x, h, w;     /* rows/columns; h == 0: absent */
};

enum { UI_PANEL_NONE, UI_PANEL_SIDE, UI_PANEL_BELOW };

struct ui_layout {
	int too_small;      /* only the input line and a notice are drawn */
	int panel;          /* UI_PANEL_* */
	struct ui_rect hdr, tr, sep, zoom, gauge, status, input;
};

/* Computes the rectangles for a rows x cols terminal. show_panel asks for
 * the zoom panel: beside the transcript from UI_WIDE_COLS columns up,
 * else below it when there are rows enough. Pure. */
void ui_layout_compute(int rows, int cols, int show_panel, struct ui_layout *l);

/* ---- colours and glyphs ---- */

enum {
	UI_C_HDR = 1, UI_C_STATUS, UI_C_BADGE, UI_C_USER, UI_C_INFO, UI_C_ERR,
	UI_C_DIM, UI_C_BAR, UI_C_OVER, UI_C_QUOTE, UI_C_KEY, UI_C_HINT,
	UI_C_HEAT1, UI_C_HEAT2, UI_C_HEAT3, UI_C_HEAT4,
};

struct ui_glyphs {
	const char *heat[UI_HEAT_LEVELS]; /* one column each, 0 = none */
	const char *eighth[9];            /* bar cell filled 0/8 .. 8/8 */
	const char *ell;                  /* ellipsis */
	const char *vline, *hline, *bar_l, *bar_r, *mark, *dot, *tick;
};

/* ---- panel state ---- */

enum { UI_ROLE_USER, UI_ROLE_ANSWER, UI_ROLE_INFO, UI_ROLE_ERROR };

struct ui_entry {
	int role;           /* UI_ROLE_* */
	char *text;         /* [len] sanitized UTF-8, cap bytes allocated */
	int len, cap;
	int wrap_w;         /* width n_lines was counted at; 0 = stale */
	int n_lines;
};

struct ui_transcript {
	struct ui_entry *ent;   /* [n_ent], cap_ent allocated */
	int n_ent, cap_ent;
	int scroll;             /* lines scrolled up from the bottom; 0 follows */
	int page;               /* rows at the last draw (PgUp/PgDn step) */
	int total;              /* lines at the last draw */
	struct ui_line *wl;     /* [cap_wl] wrap scratch */
	int cap_wl;
	char pend[4];           /* incomplete UTF-8 tail of the last piece */
	int n_pend;
};

struct ui_input {
	char buf[UI_INPUT_MAX]; /* [len] UTF-8, NUL-terminated */
	int len, cur;           /* bytes; cur on a character boundary */
	int off;                /* first visible column */
	char *hist[UI_HIST_MAX];/* [n_hist] oldest first, owned */
	int n_hist;
	int hist_pos;           /* n_hist = editing the draft */
	char draft[UI_INPUT_MAX];
};

/* A panel row: one zoomed span this step, as the engine's highest-alpha
 * zoom of it plus what the panel shows beside it. */
struct ui_span_row {
	struct sekv_zoom best;  /* the zoom of this span with the highest alpha */
	int n_zoom;             /* zooms of this span this step (all layers) */
	struct sekv_span pos;   /* where it lies in the document (start, len) */
};

/* Owned copy of the last frame, so a resize can redraw between tokens. */
struct ui_snap {
	int valid;
	int n_gen;
	double tps;
	int n_layer, n_head;
	int has_grid;               /* 0 for --kv full */
	int32_t *layer_id;          /* [n_layer], cap_layer allocated */
	int *zoom_count;            /* [n_layer][n_head], cap_grid allocated */
	int cap_layer, cap_grid;
	struct sekv_zoom *zoom;     /* [n_zoom] this step's zooms of known spans,
	                               sort scratch, cap_zoom allocated */
	int n_zoom, cap_zoom;
	struct ui_span_row *span;   /* [n_span] best first, cap_span allocated */
	int n_span, cap_span;
	int n_tok_doc;
	size_t resident_bytes, peak_resident_bytes;
	size_t budget_bytes;        /* 0 = no cap (or no stats) */
	size_t full_kv_bytes, host_bytes;
	char mode[16];
};

struct ui_span_text {
	int32_t start, len;         /* key; len 0 = empty slot */
	char text[UI_SPAN_TEXT];    /* squashed to one line */
};

struct ui_term {
	SCREEN *scr;
	char *old_locale;           /* LC_CTYPE to restore, owned */
	int utf8;                   /* the terminal takes UTF-8 */
};

struct ui_chat {
	const struct ui_chat_ops *ops;      /* borrowed for ui_chat_run */
	const struct ui_doc_info *info;     /* borrowed, may be NULL */
	struct ui_term term;
	const struct ui_glyphs *g;
	int color;

	WINDOW *w_hdr, *w_tr, *w_sep, *w_zoom, *w_gauge, *w_status, *w_input;
	struct ui_layout lay;
	int rows, cols;
	int show_wide, show_narrow;         /* panel wanted, per width class */

	struct ui_transcript tr;
	struct ui_input in;
	struct ui_snap snap;
	struct ui_span_text spans[UI_SPAN_CACHE];
	int span_next;                      /* next cache slot to replace */

	int busy;           /* inside ops->ask */
	int stop;           /* user asked to stop the answer */
	int quit;           /* leave ui_chat_run */
	double hint_until;  /* monotonic s: "Ctrl-C again to quit" shown */
	char note[160];     /* transient status note ("" = none) */
	double note_until;
};

/* ---- draw.c: clipped drawing ---- */

/* Writes s[0..len) at (y, x) clipped to maxw columns, with attr. Returns
 * the columns written. */
int ui_put(WINDOW *w, int y, int x, int maxw, const char *s, int len, attr_t attr);
/* printf into a 512-byte buffer, then ui_put. */
int ui_putf(WINDOW *w, int y, int x, int maxw, attr_t attr, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));
/* Colour pair c when colours are on, else fallback. */
attr_t ui_attr(const struct ui_chat *ui, int c, attr_t fallback);

/* ---- term.c: terminal, locale, signals ---- */

/* Checks stdin/stdout are a terminal, picks a UTF-8 LC_CTYPE, installs the
 * SIGINT flag handler and the fatal-signal handlers that restore the
 * terminal, and starts curses (cbreak, noecho, keypad). Returns 0, or
 * SEKV_EINVAL (not a terminal) / SEKV_EIO (curses failed) with err filled;
 * on failure nothing is left changed. */
int ui_term_open(struct ui_term *t, char *err, size_t errlen);
/* Ends curses, restores the previous signal actions and LC_CTYPE. Safe on
 * a term that failed to open. */
void ui_term_close(struct ui_term *t);
/* Number of Ctrl-C presses since the last call (0 when none). */
int ui_term_sigint_take(void);
/* 1 once two Ctrl-C came within UI_QUIT_WINDOW seconds. */
int ui_term_quit_requested(void);

/* ---- transcript.c ---- */

/* Starts a new entry with text[0..len) (sanitized). 0 or SEKV_ENOMEM. */
int ui_transcript_add(struct ui_transcript *t, int role, const char *text, int len);
/* Adds an earlier turn: its question, its answer and each of its notes
 * (as info lines), all sanitized. 0 or SEKV_ENOMEM. */
int ui_transcript_add_turn(struct ui_transcript *t, const struct ui_turn *turn);
/* Appends a streamed piece to the last entry, holding back an incomplete
 * UTF-8 tail until the next piece. 0 or SEKV_ENOMEM. */
int ui_transcript_append(struct ui_transcript *t, const char *piece, int len);
/* Ends streaming: a held-back tail becomes U+FFFD. */
int ui_transcript_flush(struct ui_transcript *t);
/* Removes the last entry when it is still empty (an answer that failed
 * or was stopped before its first piece). */
void ui_transcript_drop_empty(struct ui_transcript *t);
void ui_transcript_clear(struct ui_transcript *t);
void ui_transcript_free(struct ui_transcript *t);
/* Columns of text in a transcript window w columns wide. */
int ui_transcript_text_width(int w);
void ui_transcript_draw(WINDOW *w, struct ui_chat *ui);
/* PgUp/PgDn, Shift-Up/Down (one line), Home/End with Ctrl: scrolls and
 * returns 1, else 0. */
int ui_transcript_key(struct ui_transcript *t, int key);

/* ---- input.c ---- */

enum { UI_IN_NONE, UI_IN_SUBMIT, UI_IN_EOF, UI_IN_IGNORED };
/* Edits the line with one key (fkey: ch is a KEY_* code, else a
 * character). Returns UI_IN_SUBMIT on Enter with the line in in->buf,
 * UI_IN_EOF on Ctrl-D with an empty line, UI_IN_IGNORED for keys it does not
 * use, else UI_IN_NONE. */
int ui_input_key(struct ui_input *in, int fkey, uint32_t ch);
/* Records a submitted line for Up/Down and empties the line. */
void ui_input_commit(struct ui_input *in);
/* Appends q (copied; the newest; not twice in a row) to the Up/Down
 * history, dropping the oldest past UI_HIST_MAX. */
void ui_input_hist_add(struct ui_input *in, const char *q);
void ui_input_clear(struct ui_input *in);
void ui_input_free(struct ui_input *in);
void ui_input_draw(WINDOW *w, struct ui_chat *ui);

/* ---- zoom_panel.c ---- */

/* How the layers x heads grid fits w x h cells. */
struct ui_grid_fit {
	int cell_w;         /* columns per head column: 4 ("▓ 3 "), 2 or 1 */
	int head_grp;       /* heads summed into one column (>= 1) */
	int layer_grp;      /* layers summed into one row (>= 1) */
	int n_col, n_row;   /* columns and rows drawn */
	int numbers;        /* counts printed in the cells */
};

/* Heat level 0..n_level-1 of count against the largest count of the grid:
 * 0 only for count <= 0, n_level-1 for count >= max, levels in between
 * proportional (ceil). Pure. */
int ui_heat_bucket(int count, int max, int n_level);
/* Fits an n_layer x n_head grid into w columns (after the row labels) and
 * h rows. Pure. */
void ui_grid_fit(int n_layer, int n_head, int w, int h, struct ui_grid_fit *g);
/* Cells [*lo, *hi] of a width-cell bar over n_tok document tokens covered
 * by tokens [start, start+len). Pure. */
void ui_pos_cells(int32_t start, int32_t len, int n_tok, int width, int *lo, int *hi);
/* Copies frame f into the snapshot (growing its arrays when needed) and
 * ranks the zoomed spans: by zooms this step, then best alpha, then start.
 * Zooms of a span outside f->span[0..n_span) are left out. 0 or
 * SEKV_ENOMEM. */
int ui_snap_set(struct ui_snap *s, const struct ui_frame *f);
void ui_snap_free(struct ui_snap *s);
void ui_zoom_panel_draw(WINDOW *w, struct ui_chat *ui);

/* ---- gauge.c ---- */

/* Eighths of a width-cell bar filled by value out of total (0..8*width).
 * Pure. */
int ui_bar_eighths(double value, double total, int width);
void ui_gauge_draw(WINDOW *w, struct ui_chat *ui);

/* ---- status.c ---- */

void ui_header_draw(WINDOW *w, struct ui_chat *ui);
void ui_status_draw(WINDOW *w, struct ui_chat *ui);

#endif
