/* status.c - the two one-line bars: the header on top (document, model,
 * resume time) and the status line above the input (mode sekv/full,
 * decode tokens/s, tokens generated, state, key help).
 *
 * The key help follows the state: while an answer streams it says how to
 * stop; after one Ctrl-C it says how to quit, for UI_QUIT_WINDOW seconds;
 * a transient note (ui->note) replaces it until note_until. Help that does
 * not fit is cut from its end.
 */
#include "ui/screen.h"

#include <string.h>

#include "engine/base/clock.h"

void ui_header_draw(WINDOW *w, struct ui_chat *ui)
{
	const struct ui_doc_info *d = ui->info;
	attr_t a = ui_attr(ui, UI_C_HDR, A_REVERSE);
	char facts[320], toks[32], id[32], model[96];
	int W = getmaxx(w), fw, x;
	const char *dot = ui->g->dot;

	wbkgdset(w, ' ' | a);
	werase(w);
	x = ui_put(w, 0, 0, W, " sekv ", 6, a | A_BOLD);
	if (!d) {
		wnoutrefresh(w);
		return;
	}
	/* The model name comes from GGUF metadata: keep it to one line. */
	ui_text_squash(d->model_name ? d->model_name : "?",
		       d->model_name ? (int)strlen(d->model_name) : 1, model, (int)sizeof model);
	ui_fmt_count(d->n_tok, toks, sizeof toks);
	snprintf(id, sizeof id, "%lld", (long long)d->doc_id);
	/* Fewer facts as the width shrinks; the title keeps 12 columns. */
	for (int v = 0; v < 3; v++) {
		if (v == 0)
			snprintf(facts, sizeof facts, " doc #%s %s %s tokens %s %s %s resumed in %.2f s ",
				 id, dot, toks, dot, model, dot, d->resume_s);
		else if (v == 1)
			snprintf(facts, sizeof facts, " %s tokens %s %s ", toks, dot, model);
		else
			snprintf(facts, sizeof facts, " %s tokens ", toks);
		fw = ui_text_width(facts, (int)strlen(facts));
		if (W - x - fw - 1 >= 12)
			break;
	}
	{
		/* A title from a file may hold newlines or stray bytes. */
		char clean[256], title[256];
		int room = W - x - fw - 1, b;
		const char *t = d->title && *d->title ? d->title : "(untitled)";
		b = ui_text_squash(t, (int)strlen(t), clean, (int)sizeof clean);
		if (room < 12)
			room = 12;
		b = ui_text_fit(clean, b, room, ui->g->ell, title, (int)sizeof title);
		x += ui_put(w, 0, x + 1, room, title, b, a | A_BOLD) + 1;
	}
	if (W - fw >= x)
		ui_put(w, 0, W - fw, fw, facts, (int)strlen(facts), a);
	wnoutrefresh(w);
}

/* Key help for the current state, longest first. */
static const char *const help_busy[] = {
	"^C stop  PgUp/PgDn scroll  F2 panel  ^C^C quit", "^C stop  ^C^C quit", "^C stop", NULL,
};
static const char *const help_idle[] = {
	"Enter ask  PgUp/PgDn scroll  Up/Down history  F2 panel  ^D quit",
	"Enter ask  PgUp/PgDn scroll  F2 panel  ^D quit",
	"Enter ask  PgUp/Dn  F2 panel  ^D quit", "F2 panel  ^D quit", NULL,
};

void ui_status_draw(WINDOW *w, struct ui_chat *ui)
{
	const struct ui_snap *s = &ui->snap;
	attr_t a = ui_attr(ui, UI_C_STATUS, A_REVERSE);
	char mode[24], left[160];
	const char *right;
	attr_t ra = a;
	double now = clk_now();
	int W = getmaxx(w), x, rw;

	wbkgdset(w, ' ' | a);
	werase(w);
	snprintf(mode, sizeof mode, " %s ", s->valid ? s->mode : "sekv");
	for (char *p = mode; *p; p++)
		if (*p >= 'a' && *p <= 'z')
			*p = (char)(*p - 'a' + 'A');
	x = ui_put(w, 0, 0, W, mode, (int)strlen(mode), ui_attr(ui, UI_C_BADGE, A_BOLD) | A_BOLD);
	snprintf(left, sizeof left, " %.1f tok/s %s %d tokens %s %s", s->valid ? s->tps : 0.0,
		 ui->g->dot, s->valid ? s->n_gen : 0, ui->g->dot, ui->busy ? "answering" : "ready");
	x += ui_put(w, 0, x, W - x, left, (int)strlen(left), a);
	if (ui->tr.scroll > 0)
		x += ui_putf(w, 0, x, W - x, a | A_BOLD, " %s scrolled %d lines",
			     ui->g->dot, ui->tr.scroll);
	if (now < ui->hint_until) {
		right = " Ctrl-C again to quit ";
		ra = ui_attr(ui, UI_C_HINT, A_BOLD) | A_BOLD;
	} else if (ui->note[0] && now < ui->note_until) {
		right = ui->note;
		ra = a | A_BOLD;
	} else {
		const char *const *h = ui->busy ? help_busy : help_idle;
		right = ui->busy && ui->stop ? "stopping..." : h[0];
		for (int i = 0; h[i] && !(ui->busy && ui->stop); i++) {
			right = h[i];
			if (x + 2 + (int)strlen(right) + 1 <= W)
				break;
		}
		ra = ui_attr(ui, UI_C_KEY, A_REVERSE);
	}
	rw = ui_text_width(right, (int)strlen(right));
	x += 2;
	if (x + rw + 1 <= W)
		ui_put(w, 0, W - rw - 1, rw, right, (int)strlen(right), ra);
	else if (x < W)
		ui_put(w, 0, x, W - x, right, (int)strlen(right), ra);
	wnoutrefresh(w);
}
