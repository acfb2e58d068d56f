/* gauge.c - the memory gauge: device-tier resident bytes against the budget
 * (with the peak marked) and against the full KV cache of this document,
 * plus host-tier bytes, in binary units.
 *
 * Two rows when the terminal has them, one compact row otherwise. Bars
 * fill in eighths of a cell; the bar turns to the "over" colour when the
 * resident bytes pass the budget. The numbers are the engine's live tier
 * counters as the last frame carried them (DESIGN.md section 4, 6).
 */
#include "ui/screen.h"

#include <string.h>

#include "engine/base/fmt.h"

#define LABEL_W 9

int ui_bar_eighths(double value, double total, int width)
{
	double f;
	int e;

	if (width <= 0 || !(total > 0.0) || !(value > 0.0))
		return 0;
	f = value / total;
	if (f > 1.0)
		f = 1.0;
	e = (int)(f * width * 8 + 0.5);
	/* A non-zero amount never looks empty. */
	if (e < 1)
		e = 1;
	return e > width * 8 ? width * 8 : e;
}

/* Bar of width cells at (y, x) with an optional peak tick. */
static void draw_bar(WINDOW *w, struct ui_chat *ui, int y, int x, int width,
		     double value, double peak, double total, attr_t a)
{
	const struct ui_glyphs *g = ui->g;
	int e = ui_bar_eighths(value, total, width), pk = -1;
	attr_t dim = ui_attr(ui, UI_C_DIM, A_DIM);

	if (peak > value && total > 0.0) {
		pk = (int)(peak / total * width);
		if (pk > width - 1)
			pk = width - 1;
	}
	ui_put(w, y, x, 1, g->bar_l, (int)strlen(g->bar_l), dim);
	for (int i = 0; i < width; i++) {
		int f = e - 8 * i;
		const char *c;
		f = f < 0 ? 0 : f > 8 ? 8 : f;
		if (f == 0 && i == pk)
			ui_put(w, y, x + 1 + i, 1, g->vline, (int)strlen(g->vline), dim);
		else if (f == 0)
			ui_put(w, y, x + 1 + i, 1, g->tick, (int)strlen(g->tick), dim);
		else {
			c = g->eighth[f];
			ui_put(w, y, x + 1 + i, 1, c, (int)strlen(c), a);
		}
	}
	ui_put(w, y, x + 1 + width, 1, g->bar_r, (int)strlen(g->bar_r), dim);
}

/* Bar columns left by the longer of two texts (6..40, or 0: no bar). */
static int bar_width(WINDOW *w, const char *t1, const char *t2)
{
	int a = ui_text_width(t1, (int)strlen(t1)), b = ui_text_width(t2, (int)strlen(t2));
	int bw = getmaxx(w) - LABEL_W - (a > b ? a : b) - 4;

	return bw < 6 ? 0 : bw > 40 ? 40 : bw;
}

/* Label, bar of bw cells, text. */
static void gauge_row(WINDOW *w, struct ui_chat *ui, int y, const char *label, int bw,
		      double value, double peak, double total, attr_t a, const char *text)
{
	int W = getmaxx(w), x = LABEL_W;

	ui_put(w, y, 1, LABEL_W - 1, label, (int)strlen(label), A_BOLD);
	if (bw > 0) {
		draw_bar(w, ui, y, x, bw, value, peak, total, a);
		x += bw + 3;
	}
	ui_put(w, y, x, W - x, text, (int)strlen(text), A_NORMAL);
}

void ui_gauge_draw(WINDOW *w, struct ui_chat *ui)
{
	const struct ui_snap *s = &ui->snap;
	char res[32], bud[32], full[32], peak[32], host[32], pf[16], pb[16], ph[16];
	char t1[320], t2[320];
	int bw;
	double r = (double)s->resident_bytes;
	int over = s->budget_bytes > 0 && s->resident_bytes > s->budget_bytes;
	attr_t a = over ? ui_attr(ui, UI_C_OVER, A_BOLD) | A_BOLD : ui_attr(ui, UI_C_BAR, A_NORMAL);
	const char *dot = ui->g->dot;

	werase(w);
	if (!s->valid) {
		ui_put(w, 0, 1, getmaxx(w) - 2, "memory: shown from the first answer token", 41,
		       ui_attr(ui, UI_C_DIM, A_DIM));
		wnoutrefresh(w);
		return;
	}
	fmt_bytes(s->resident_bytes, res, sizeof res);
	fmt_bytes(s->budget_bytes, bud, sizeof bud);
	fmt_bytes(s->full_kv_bytes, full, sizeof full);
	fmt_bytes(s->peak_resident_bytes, peak, sizeof peak);
	fmt_bytes(s->host_bytes, host, sizeof host);
	ui_fmt_pct(s->full_kv_bytes ? r / (double)s->full_kv_bytes : 0.0, pf, sizeof pf);
	ui_fmt_pct(s->budget_bytes ? r / (double)s->budget_bytes : 0.0, pb, sizeof pb);
	ui_fmt_pct(s->full_kv_bytes ? (double)s->host_bytes / (double)s->full_kv_bytes : 0.0,
		   ph, sizeof ph);
	if (getmaxy(w) < 2) {
		snprintf(t1, sizeof t1, "%s%s%s %s %s of full KV %s %s peak %s %s host %s",
			 res, s->budget_bytes ? " / " : "", s->budget_bytes ? bud : "",
			 dot, pf, full, dot, peak, dot, host);
		gauge_row(w, ui, 0, "device", bar_width(w, t1, ""), r, (double)s->peak_resident_bytes,
			  (double)(s->budget_bytes ? s->budget_bytes : s->full_kv_bytes), a, t1);
		wnoutrefresh(w);
		return;
	}
	/* Terse wording when the long one does not fit beside a bar. */
	for (int terse = 0; terse < 2; terse++) {
		if (s->budget_bytes)
			snprintf(t1, sizeof t1, terse ? "%s/%s (%s)%s pk %s" :
				 "%s / %s budget (%s)%s  peak %s", res, bud, pb,
				 over ? " OVER" : "", peak);
		else
			snprintf(t1, sizeof t1, terse ? "%s no cap, pk %s" :
				 "%s (no budget cap)  peak %s", res, peak);
		if (terse)
			snprintf(t2, sizeof t2, "%s of %s %s host %s", pf, full, dot, host);
		else
			snprintf(t2, sizeof t2, "%s of full KV %s  %s host %s (%s)", pf, full, dot,
				 host, ph);
		if (bar_width(w, t1, t2) > 0)
			break;
	}
	bw = bar_width(w, t1, t2);
	gauge_row(w, ui, 0, "device", bw, r, (double)s->peak_resident_bytes,
		  (double)(s->budget_bytes ? s->budget_bytes : s->full_kv_bytes), a, t1);
	gauge_row(w, ui, 1, "vs full", bw, r, 0.0, (double)s->full_kv_bytes,
		  ui_attr(ui, UI_C_BAR, A_NORMAL), t2);
	wnoutrefresh(w);
}
