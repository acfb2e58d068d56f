/* ui.h - the ncurses chat screen (`sekv chat`).
 *
 * The UI knows nothing about models or SQLite: the app hands it a table of
 * operations (ask a question, quote a span) and, while an answer streams,
 * calls ui_chat_on_token with a view of the current decode step, whose
 * zooms are the engine's own records (struct sekv_zoom in sekv_stats). Panels:
 * transcript + input line, zoom panel (global layers x heads grid of zoom
 * counts, zoomed spans quoted), memory gauge, status line (tokens/s).
 * Ctrl-C once stops an answer; twice within 2 s quits, terminal restored.
 */
#ifndef SEKV_UI_H
#define SEKV_UI_H

#include <stddef.h>
#include <stdint.h>

struct ui_chat;
struct sekv_span;
struct sekv_stats;

/* What the screen shows about the current decode step (borrowed: valid for
 * the duration of the ui_chat_on_token call). */
struct ui_frame {
	const char *piece;        /* new answer text (UTF-8, may be "") */
	int piece_len;
	int n_gen;                /* tokens generated so far in this answer */
	double tps;               /* decode tokens/s so far */
	int n_layer;              /* global layers */
	int n_head;               /* query heads */
	const int32_t *layer_id;  /* [n_layer] model layer indices */
	/* the engine's live counters (engine/sekv/sekv.h): zoom_count
	 * [n_layer][n_head], this step's zoom[n_zoom] and budget_bytes
	 * (0 = no cap); NULL for --kv full */
	const struct sekv_stats *stats;
	int n_span;
	const struct sekv_span *span; /* [n_span] the document's spans, which
	                                 stats->zoom[].span indexes (start, len) */
	int n_tok_doc;            /* document tokens */
	size_t resident_bytes;    /* device tier now */
	size_t peak_resident_bytes;
	size_t full_kv_bytes;
	size_t host_bytes;
	const char *mode;         /* "sekv", "full" or a rival's name (app_kv_name:
	                             "streaming", "snapkv", "h2o", "quest", "summary",
	                             "shadowkv") */
	size_t budget_bytes;      /* device budget of a method without SeKV stats, 0: none */
};

/* Operations the app provides. */
struct ui_chat_ops {
	void *ud;
	/* Answers question (UTF-8). Must call ui_chat_on_token for every token
	 * and return 0, SEKV_EINTR when stopped by the user, or another
	 * negative code with err filled. */
	int (*ask)(void *ud, struct ui_chat *ui, const char *question,
		   char *err, size_t errlen);
	/* Writes up to cap-1 bytes of the text of tokens [start, start+len) of
	 * the document into buf (NUL-terminated). */
	void (*span_text)(void *ud, int32_t start, int32_t len, char *buf, size_t cap);
};

/* An earlier turn of a resumed session (borrowed). */
struct ui_turn {
	const char *question;     /* UTF-8 */
	const char *answer;
	const char *const *notes; /* [n_note] lines shown after the answer as
	                             ui_chat_note shows them (its evidence),
	                             made inert there; NULL when n_note is 0 */
	int n_note;
};

/* Header facts shown at the top. */
struct ui_doc_info {
	const char *title;
	int64_t doc_id;
	int n_tok;
	const char *model_name;
	double resume_s;
	const struct ui_turn *turns; /* [n_turn] a resumed session's transcript, shown
	                                first, its questions in the Up/Down history;
	                                borrowed for ui_chat_run */
	int n_turn;
	const char *resumed;      /* a line shown after them (e.g. "session 3 resumed", or a
	                             new session's note), or NULL */
};

/* Runs the chat screen until the user quits. Returns 0 or a negative code.
 * Restores the terminal on every exit path (including fatal signals). */
int ui_chat_run(const struct ui_chat_ops *ops, const struct ui_doc_info *info,
		char *err, size_t errlen);

/* Called by ops->ask for every decoded token: appends the piece to the
 * transcript and redraws zoom panel, gauge and status. Returns 1 when the
 * user asked to stop (Ctrl-C), else 0. */
int ui_chat_on_token(struct ui_chat *ui, const struct ui_frame *f);

/* Adds an information line to the transcript (e.g. "earlier turns were
 * dropped"), shown at the next redraw. */
void ui_chat_note(struct ui_chat *ui, const char *msg);

#endif
