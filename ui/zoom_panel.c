/* zoom_panel.c - what SeKV zooms into at the current decode step: a global
 * layers x query heads grid of zoom counts with heat shading, a document
 * map of where the evidence lies, and the zoomed spans quoted with their
 * position (percentage and a small bar).
 *
 * The frame is borrowed only during ui_chat_on_token, so ui_snap_set copies
 * it (arrays grow, never shrink: no allocation per token once warm) and
 * groups the engine's zoom records (struct sekv_zoom) by span, ranking the
 * spans by how many zooms they got this step. Span text
 * comes from ops->span_text through a small cache, so a span that stays
 * zoomed across tokens is read once. A grid too big for the panel sums
 * neighbouring heads (and layers) into one cell.
 */
#include "ui/screen.h"

#include <stdlib.h>
#include <string.h>

#include "engine/base/err.h"
#include "engine/base/utf8.h"

#define MAP_MAX 512   /* widest document map, columns */

int ui_heat_bucket(int count, int max, int n_level)
{
	long long b;

	if (count <= 0 || n_level < 2)
		return 0;
	if (max < 1)
		max = 1;
	if (count >= max)
		return n_level - 1;
	b = ((long long)count * (n_level - 1) + max - 1) / max;
	if (b < 1)
		b = 1;
	return b > n_level - 1 ? n_level - 1 : (int)b;
}

void ui_grid_fit(int n_layer, int n_head, int w, int h, struct ui_grid_fit *g)
{
	memset(g, 0, sizeof *g);
	if (n_layer < 1)
		n_layer = 1;
	if (n_head < 1)
		n_head = 1;
	if (w < 1)
		w = 1;
	if (h < 1)
		h = 1;
	g->layer_grp = (n_layer + h - 1) / h;
	g->n_row = (n_layer + g->layer_grp - 1) / g->layer_grp;
	g->head_grp = 1;
	if (n_head * 4 <= w) {
		g->cell_w = 4;
		g->numbers = 1;
	} else if (n_head * 2 <= w) {
		g->cell_w = 2;
	} else {
		g->cell_w = 1;
		g->head_grp = (n_head + w - 1) / w;
	}
	g->n_col = (n_head + g->head_grp - 1) / g->head_grp;
}

void ui_pos_cells(int32_t start, int32_t len, int n_tok, int width, int *lo, int *hi)
{
	int64_t end;

	if (width <= 0) {
		*lo = 0;
		*hi = -1;
		return;
	}
	if (n_tok < 1)
		n_tok = 1;
	if (start < 0)
		start = 0;
	if (start > n_tok - 1)
		start = n_tok - 1;
	end = (int64_t)start + (len > 0 ? len : 1);
	if (end > n_tok)
		end = n_tok;
	*lo = (int)((int64_t)start * width / n_tok);
	*hi = (int)((end - 1) * width / n_tok);
	if (*hi > width - 1)
		*hi = width - 1;
	if (*hi < *lo)
		*hi = *lo;
}

static int grow(void **p, int *cap, int need, size_t size)
{
	void *q;
	int n = *cap ? *cap : 16;

	if (need <= *cap)
		return 0;
	while (n < need)
		n *= 2;
	q = realloc(*p, (size_t)n * size);
	if (!q)
		return SEKV_ENOMEM;
	*p = q;
	*cap = n;
	return 0;
}

/* Groups a span's zooms together, its best (highest alpha) first. */
static int by_span(const void *a, const void *b)
{
	const struct sekv_zoom *x = a, *y = b;

	if (x->span != y->span)
		return x->span < y->span ? -1 : 1;
	if (x->alpha != y->alpha)
		return x->alpha > y->alpha ? -1 : 1;
	return 0;
}

static int by_rank(const void *a, const void *b)
{
	const struct ui_span_row *x = a, *y = b;

	if (x->n_zoom != y->n_zoom)
		return x->n_zoom > y->n_zoom ? -1 : 1;
	if (x->best.alpha != y->best.alpha)
		return x->best.alpha > y->best.alpha ? -1 : 1;
	return x->pos.start < y->pos.start ? -1 : x->pos.start > y->pos.start;
}

int ui_snap_set(struct ui_snap *s, const struct ui_frame *f)
{
	const struct sekv_stats *st = f->stats;
	int n_layer = f->n_layer > 0 && f->n_layer <= 4096 ? f->n_layer : 0;
	int n_head = f->n_head > 0 && f->n_head <= 4096 ? f->n_head : 0;
	int n_span = f->span && f->n_span > 0 ? f->n_span : 0;
	int n_in = st && st->zoom && st->n_zoom > 0 ? st->n_zoom : 0;

	s->n_gen = f->n_gen;
	s->tps = f->tps;
	s->n_tok_doc = f->n_tok_doc;
	s->resident_bytes = f->resident_bytes;
	s->peak_resident_bytes = f->peak_resident_bytes;
	s->budget_bytes = st ? st->budget_bytes : f->budget_bytes;
	s->full_kv_bytes = f->full_kv_bytes;
	s->host_bytes = f->host_bytes;
	snprintf(s->mode, sizeof s->mode, "%s", f->mode && *f->mode ? f->mode : "sekv");
	if (grow((void **)&s->layer_id, &s->cap_layer, n_layer, sizeof *s->layer_id) ||
	    grow((void **)&s->zoom_count, &s->cap_grid, n_layer * n_head, sizeof *s->zoom_count))
		return SEKV_ENOMEM;
	s->n_layer = n_layer;
	s->n_head = n_head;
	for (int l = 0; l < n_layer; l++)
		s->layer_id[l] = f->layer_id ? f->layer_id[l] : l;
	s->has_grid = st && st->zoom_count && n_layer > 0 && n_head > 0;
	if (s->has_grid)
		memcpy(s->zoom_count, st->zoom_count, (size_t)n_layer * n_head * sizeof *s->zoom_count);

	if (grow((void **)&s->zoom, &s->cap_zoom, n_in, sizeof *s->zoom) ||
	    grow((void **)&s->span, &s->cap_span, n_in, sizeof *s->span))
		return SEKV_ENOMEM;
	s->n_zoom = 0;
	for (int i = 0; i < n_in; i++)
		if (st->zoom[i].span >= 0 && st->zoom[i].span < n_span)
			s->zoom[s->n_zoom++] = st->zoom[i];
	qsort(s->zoom, (size_t)s->n_zoom, sizeof *s->zoom, by_span);
	s->n_span = 0;
	for (int i = 0; i < s->n_zoom; i++) {
		const struct sekv_zoom *z = &s->zoom[i];
		struct ui_span_row *r = s->n_span ? &s->span[s->n_span - 1] : NULL;
		if (!r || r->best.span != z->span) {
			r = &s->span[s->n_span++];
			r->best = *z;
			r->n_zoom = 0;
			r->pos = f->span[z->span];
		}
		r->n_zoom++;
	}
	qsort(s->span, (size_t)s->n_span, sizeof *s->span, by_rank);
	s->valid = 1;
	return 0;
}

void ui_snap_free(struct ui_snap *s)
{
	free(s->layer_id);
	free(s->zoom_count);
	free(s->zoom);
	free(s->span);
	memset(s, 0, sizeof *s);
}

/* The text of tokens [start, start+len), squashed to one line, cached. */
static const char *span_text(struct ui_chat *ui, int32_t start, int32_t len)
{
	char raw[UI_SPAN_TEXT];
	struct ui_span_text *slot;
	int n;

	for (int i = 0; i < UI_SPAN_CACHE; i++)
		if (ui->spans[i].len && ui->spans[i].start == start && ui->spans[i].len == len)
			return ui->spans[i].text;
	slot = &ui->spans[ui->span_next];
	ui->span_next = (ui->span_next + 1) % UI_SPAN_CACHE;
	raw[0] = '\0';
	if (ui->ops && ui->ops->span_text)
		ui->ops->span_text(ui->ops->ud, start, len, raw, sizeof raw);
	raw[sizeof raw - 1] = '\0';
	n = (int)utf8_complete(raw, strlen(raw));
	ui_text_squash(raw, n, slot->text, (int)sizeof slot->text);
	slot->start = start;
	slot->len = len > 0 ? len : 1;
	return slot->text;
}

/* Sum of zoom counts in grid cell (row r, column c) under fit g. */
static int cell_sum(const struct ui_snap *s, const struct ui_grid_fit *g, int r, int c)
{
	int sum = 0;

	for (int l = r * g->layer_grp; l < (r + 1) * g->layer_grp && l < s->n_layer; l++)
		for (int h = c * g->head_grp; h < (c + 1) * g->head_grp && h < s->n_head; h++)
			sum += s->zoom_count[l * s->n_head + h];
	return sum;
}

static void row_label(const struct ui_snap *s, const struct ui_grid_fit *g, int r,
		      char *buf, size_t cap)
{
	int a = r * g->layer_grp, b = (r + 1) * g->layer_grp - 1;

	if (b > s->n_layer - 1)
		b = s->n_layer - 1;
	if (a == b)
		snprintf(buf, cap, "L%d", (int)s->layer_id[a]);
	else
		snprintf(buf, cap, "L%d-%d", (int)s->layer_id[a], (int)s->layer_id[b]);
}

static attr_t heat_attr(struct ui_chat *ui, int b)
{
	if (b <= 0)
		return ui_attr(ui, UI_C_DIM, A_DIM);
	return ui_attr(ui, UI_C_HEAT1 + b - 1, b >= 3 ? A_BOLD : A_NORMAL);
}

static void put_glyph(WINDOW *w, int y, int x, const char *g, attr_t a)
{
	ui_put(w, y, x, 1, g, (int)strlen(g), a);
}

/* Columns the grid wants with numbered cells and no grouping. */
static int grid_natural_width(const struct ui_snap *s)
{
	char lab[32];
	int lab_w = 0;

	for (int l = 0; l < s->n_layer; l++) {
		int n = snprintf(lab, sizeof lab, "L%d", (int)s->layer_id[l]);
		lab_w = n > lab_w ? n : lab_w;
	}
	return 1 + lab_w + 1 + 4 * s->n_head + 5;
}

/* Draws the grid (a header row, then one row per layer group) in area a;
 * returns the rows used. */
static int draw_grid(WINDOW *w, struct ui_chat *ui, struct ui_rect a)
{
	const struct ui_snap *s = &ui->snap;
	attr_t dim = ui_attr(ui, UI_C_DIM, A_DIM);
	struct ui_grid_fit g;
	char lab[32];
	int lab_w = 0, max = 0, x0, sum_w = 5, y = a.y;

	/* Row labels are as wide as the widest one. */
	ui_grid_fit(s->n_layer, s->n_head, a.w, a.h - 1, &g);
	for (int r = 0; r < g.n_row; r++) {
		row_label(s, &g, r, lab, sizeof lab);
		if ((int)strlen(lab) > lab_w)
			lab_w = (int)strlen(lab);
	}
	x0 = a.x + 1 + lab_w + 1;
	if (a.x + a.w - x0 - sum_w < 4)
		sum_w = 0;
	ui_grid_fit(s->n_layer, s->n_head, a.x + a.w - x0 - sum_w, a.h - 1, &g);
	for (int r = 0; r < g.n_row; r++)
		for (int c = 0; c < g.n_col; c++) {
			int v = cell_sum(s, &g, r, c);
			if (v > max)
				max = v;
		}
	if (g.numbers)
		for (int c = 0; c < g.n_col; c++)
			ui_putf(w, y, x0 + c * g.cell_w, g.cell_w, dim, "h%d", c);
	else
		ui_putf(w, y, x0, a.x + a.w - x0, dim, "heads 0-%d%s", s->n_head - 1,
			g.head_grp > 1 ? " summed" : "");
	if (sum_w && g.numbers)
		ui_put(w, y, x0 + g.n_col * g.cell_w + 1, sum_w, "sum", 3, dim);
	y++;
	for (int r = 0; r < g.n_row && y < a.y + a.h; r++, y++) {
		int tot = 0;
		row_label(s, &g, r, lab, sizeof lab);
		ui_put(w, y, a.x + 1, lab_w, lab, (int)strlen(lab), A_BOLD);
		for (int c = 0; c < g.n_col; c++) {
			int v = cell_sum(s, &g, r, c), b = ui_heat_bucket(v, max, UI_HEAT_LEVELS);
			int x = x0 + c * g.cell_w;
			attr_t ha = heat_attr(ui, b);
			tot += v;
			put_glyph(w, y, x, b ? ui->g->heat[b] : ui->g->dot, ha);
			if (g.numbers && v > 0)
				ui_putf(w, y, x + 1, 2, ha, "%2d", v > 99 ? 99 : v);
			else if (g.cell_w == 2 && v > 0)
				put_glyph(w, y, x + 1, ui->g->heat[b], ha);
		}
		if (sum_w)
			ui_putf(w, y, x0 + g.n_col * g.cell_w + 1, sum_w, dim, "%3d", tot);
	}
	return y - a.y;
}

/* One bar of width cells marking [lo, hi] over dots. */
static void draw_pos_bar(WINDOW *w, struct ui_chat *ui, int y, int x, int width,
			 int lo, int hi, attr_t on)
{
	const struct ui_glyphs *gl = ui->g;
	attr_t dim = ui_attr(ui, UI_C_DIM, A_DIM);

	put_glyph(w, y, x, gl->bar_l, dim);
	for (int i = 0; i < width; i++) {
		int in = i >= lo && i <= hi;
		put_glyph(w, y, x + 1 + i, in ? gl->mark : gl->tick, in ? on : dim);
	}
	put_glyph(w, y, x + 1 + width, gl->bar_r, dim);
}

/* The whole document as one strip at (y, x), w columns in all; hotter
 * where more heads zoom. */
static void draw_map(WINDOW *w, struct ui_chat *ui, int y, int x, int wd)
{
	const struct ui_snap *s = &ui->snap;
	const struct ui_glyphs *gl = ui->g;
	attr_t dim = ui_attr(ui, UI_C_DIM, A_DIM);
	int cnt[MAP_MAX] = {0};
	int width = wd - 8, max = 0, lo, hi;

	if (width > MAP_MAX)
		width = MAP_MAX;
	if (width < 4)
		return;
	for (int i = 0; i < s->n_span; i++) {
		ui_pos_cells(s->span[i].pos.start, s->span[i].pos.len, s->n_tok_doc, width, &lo, &hi);
		for (int c = lo; c <= hi; c++)
			cnt[c] += s->span[i].n_zoom;
	}
	for (int c = 0; c < width; c++)
		if (cnt[c] > max)
			max = cnt[c];
	ui_put(w, y, x + 1, 4, "doc", 3, A_BOLD);
	put_glyph(w, y, x + 5, gl->bar_l, dim);
	for (int c = 0; c < width; c++) {
		int b = ui_heat_bucket(cnt[c], max, UI_HEAT_LEVELS);
		put_glyph(w, y, x + 6 + c, b ? gl->heat[b] : gl->tick, heat_attr(ui, b));
	}
	put_glyph(w, y, x + 6 + width, gl->bar_r, dim);
}

/* Quotes text in at most q rows from (y, x), w columns, the last row
 * ellipsized when the text goes on. Returns the rows used. */
static int draw_quote(WINDOW *w, struct ui_chat *ui, int y, int x, int wd, int q,
		      const char *text)
{
	struct ui_line lines[8];
	char buf[UI_SPAN_TEXT + 8];
	int len = (int)strlen(text), width = wd - 4, n;
	attr_t a = ui_attr(ui, UI_C_QUOTE, A_NORMAL), dim = ui_attr(ui, UI_C_DIM, A_DIM);

	if (width < 4 || q < 1)
		return 0;
	if (q > 8)
		q = 8;
	if (len == 0) {
		ui_put(w, y, x + 3, width, "(no text)", 9, dim);
		return 1;
	}
	n = ui_text_wrap(text, len, width, lines, 8);
	for (int i = 0; i < q && i < n; i++) {
		int off = lines[i].off, b;
		put_glyph(w, y + i, x + 2, ui->g->vline, dim);
		if (i == q - 1 && n > q) {
			b = ui_text_fit(text + off, len - off, width, ui->g->ell, buf, (int)sizeof buf);
			ui_put(w, y + i, x + 3, width, buf, b, a);
		} else {
			ui_put(w, y + i, x + 3, width, text + off, lines[i].len, a);
		}
	}
	return n < q ? n : q;
}

/* Span heading: id, position %, position bar, heads zooming, best alpha. */
static void draw_span_head(WINDOW *w, struct ui_chat *ui, int y, struct ui_rect a,
			   const struct ui_span_row *r)
{
	const struct ui_snap *s = &ui->snap;
	double pct = s->n_tok_doc > 0 ? 100.0 * r->pos.start / s->n_tok_doc : 0.0;
	int x, bw, lo, hi, end = a.x + a.w;
	char tail[64];

	x = a.x + 1 + ui_putf(w, y, a.x + 1, 7, A_BOLD, "#%d", (int)r->best.span);
	x = x < a.x + 8 ? a.x + 8 : x;
	x += ui_putf(w, y, x, end - x, A_NORMAL, "%5.1f%%", pct) + 1;
	snprintf(tail, sizeof tail, ui->term.utf8 ? " \xc3\x97%d \xce\xb1%.2f" : " x%d a%.2f",
		 r->n_zoom, (double)r->best.alpha);
	bw = end - x - 3 - ui_text_width(tail, (int)strlen(tail));
	if (bw > 24)
		bw = 24;
	if (bw >= 4) {
		ui_pos_cells(r->pos.start, r->pos.len, s->n_tok_doc, bw, &lo, &hi);
		draw_pos_bar(w, ui, y, x, bw, lo, hi, heat_attr(ui, UI_HEAT_LEVELS - 1));
		x += bw + 2;
	}
	ui_put(w, y, x, end - x, tail, (int)strlen(tail), ui_attr(ui, UI_C_DIM, A_DIM));
}

/* The zoomed spans, best first, each quoted, in area a. */
static void draw_spans(WINDOW *w, struct ui_chat *ui, struct ui_rect a)
{
	const struct ui_snap *s = &ui->snap;
	int y = a.y, bottom = a.y + a.h;

	if (a.h < 1)
		return;
	/* The panel title already counts the spans; repeat it when roomy. */
	if (a.h >= 6)
		ui_putf(w, y++, a.x + 1, a.w - 2, A_BOLD, "zoomed spans %d", s->n_span);
	for (int i = 0; i < s->n_span && y < bottom; i++) {
		int left = bottom - y, q;

		if (left < 2) {
			ui_putf(w, y, a.x + 1, a.w - 2, ui_attr(ui, UI_C_DIM, A_DIM), "+%d more",
				s->n_span - i);
			break;
		}
		draw_span_head(w, ui, y++, a, &s->span[i]);
		/* Quote rows share what is left: 1 to 4 each. */
		q = (bottom - y) / (s->n_span - i) - 1;
		q = q < 1 ? 1 : q > 4 ? 4 : q;
		if (q > bottom - y)
			q = bottom - y;
		y += draw_quote(w, ui, y, a.x, a.w, q, span_text(ui, s->span[i].pos.start, s->span[i].pos.len));
	}
}

/* What a mode that never zooms keeps of the document, for the panel. */
static const char *mode_keeps(const char *mode)
{
	static const struct { const char *mode, *keeps; } m[] = {
		{ "full", "every KV row is exact" },
		{ "streaming", "the first and the most recent rows only (the rest is evicted)" },
		{ "snapkv", "the rows the question attended to most (the rest is evicted)" },
		{ "h2o", "the most attended rows of the reading and the most recent (the rest is evicted)" },
		{ "quest", "per step, the pages whose keys can score highest (all rows in the host tier)" },
		{ "shadowkv", "per step, the chunks with the best landmarks, keys rebuilt from low-rank "
			      "factors (values in the host tier)" },
	};

	for (size_t i = 0; i < sizeof m / sizeof *m; i++)
		if (!strcmp(mode, m[i].mode))
			return m[i].keeps;
	return "a subset of the rows (the rest is evicted)";
}

void ui_zoom_panel_draw(WINDOW *w, struct ui_chat *ui)
{
	const struct ui_snap *s = &ui->snap;
	attr_t dim = ui_attr(ui, UI_C_DIM, A_DIM);
	int H = getmaxy(w), W = getmaxx(w), x, used;
	struct ui_rect body = {1, 0, H - 1, W};

	werase(w);
	if (ui->lay.panel == UI_PANEL_BELOW)
		for (int i = 0; i < W; i++)
			put_glyph(w, 0, i, ui->g->hline, dim);
	x = 1 + ui_put(w, 0, 1, W - 2, " zoom ", 6, A_BOLD | A_REVERSE);
	if (s->valid && s->has_grid)
		ui_putf(w, 0, x, W - x - 1, A_NORMAL, " step %d %s %d zooms %s %d spans ",
			s->n_gen, ui->g->dot, s->n_zoom, ui->g->dot, s->n_span);
	if (!s->valid || !s->has_grid) {
		char msg[128];
		struct ui_line l[4];
		int n;
		if (!s->valid)
			snprintf(msg, sizeof msg, "no answer yet");
		else
			snprintf(msg, sizeof msg, "mode %s: %s, nothing to zoom", s->mode, mode_keeps(s->mode));
		n = ui_text_wrap(msg, (int)strlen(msg), W - 2, l, 4);
		for (int i = 0; i < n && i < 4; i++)
			ui_put(w, 2 + i, 1, W - 2, msg + l[i].off, l[i].len, s->valid ? A_NORMAL : dim);
		wnoutrefresh(w);
		return;
	}
	if (W >= 64 && H < 20) {
		/* Short and wide (panel below the transcript): grid and map on
		 * the left, spans on the right. */
		struct ui_rect left = body, right = body;
		left.w = grid_natural_width(s);
		left.w = left.w > W / 2 ? W / 2 : left.w < 20 ? 20 : left.w;
		right.x = left.w + 1;
		right.w = W - right.x;
		used = draw_grid(w, ui, left);
		if (used + 2 <= left.h)
			draw_map(w, ui, left.y + used + 1, left.x, left.w);
		for (int y = body.y; y < body.y + body.h; y++)
			put_glyph(w, y, left.w, ui->g->vline, dim);
		draw_spans(w, ui, right);
	} else {
		/* Stacked: the grid takes at most about a third of the rows. */
		struct ui_rect g = body;
		g.h = s->n_layer + 1;
		if (g.h > (H - 2) / 3 + 1)
			g.h = (H - 2) / 3 + 1;
		if (g.h < 2)
			g.h = 2;
		used = draw_grid(w, ui, g);
		body.y += used;
		body.h -= used;
		if (body.h >= 6) {
			draw_map(w, ui, body.y, 0, W);
			body.y += 2;
			body.h -= 2;
		}
		draw_spans(w, ui, body);
	}
	wnoutrefresh(w);
}
