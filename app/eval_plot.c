/* eval_plot.c - the PNG plots of `sekv eval` (eval.h), drawn with cairo:
 * the only file that includes cairo.h.
 *
 * heat_<method>[_oracle]_<budget>.png: niah accuracy as a length x depth
 * heat map with the value in each cell and a colour bar;
 * panels_tasks.png: every method and budget side by side, one panel each,
 * task x length, on one shared scale; mem_<method>.png: resident bytes
 * per budget and full_kv_bytes against haystack length. All are computed
 * from the records alone; the tables live in eval_report.c. Heat colours
 * come from eval_ramp, a ramp computed in CIELAB (no colour table).
 */
#include "app/eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cairo.h>

#include "engine/base/err.h"

#define HEAT_W 560
#define HEAT_H 400
#define MEM_W 640
#define MEM_H 420
#define MAX_G 64
#define PANEL_MAX 16   /* panels of panels_tasks.png: methods x budgets shown */
#define PANEL_MIN_W 360
#define PANEL_BAR_H 120  /* the colour bar's height, at least */

static void text_at(cairo_t *cr, double x, double y, const char *s, double size, int center)
{
	cairo_text_extents_t e;

	cairo_set_font_size(cr, size);
	cairo_text_extents(cr, s, &e);
	cairo_move_to(cr, center ? x - e.width / 2 - e.x_bearing : x, y);
	cairo_show_text(cr, s);
}

static int save(cairo_surface_t *s, const char *dir, const char *name, char ***names, int *n,
		char *err, size_t errlen)
{
	char path[4400];
	char **p;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	if (cairo_surface_write_to_png(s, path) != CAIRO_STATUS_SUCCESS)
		return sekv_errf(err, errlen, SEKV_EIO, "eval: %s: cannot write the PNG", path);
	if (!(p = realloc(*names, ((size_t)*n + 1) * sizeof *p)) || !(p[*n] = strdup(name))) {
		if (p)
			*names = p;
		return sekv_errf(err, errlen, SEKV_ENOMEM, "eval: out of memory");
	}
	*names = p;
	(*n)++;
	return 0;
}

/* ---- the colour ramp --------------------------------------------------- */

/* sRGB's transfer function (IEC 61966-2-1) of a linear value, clamped. */
static double srgb_encode(double x)
{
	x = x < 0 ? 0 : x > 1 ? 1 : x;
	return x <= 0.0031308 ? 12.92 * x : 1.055 * pow(x, 1 / 2.4) - 0.055;
}

/* CIELAB's inverse companding (CIE 15:2004, section 8.2.1). */
static double lab_finv(double t)
{
	return t > 6.0 / 29 ? t * t * t : 3 * (6.0 / 29) * (6.0 / 29) * (t - 4.0 / 29);
}

void eval_ramp(double t, double rgb[3])
{
	/* CIELAB control points: dark blue, neutral grey, light yellow; L*
	 * rises linearly (the value reads as lightness, in grey too) and hue
	 * moves on the blue-yellow axis only, which the common red-green
	 * colour vision deficiencies keep */
	static const double lab[3][3] = { { 15, 6, -38 }, { 55, 0, 0 }, { 93, -6, 82 } };
	double L, a, b;

	t = t < 0 || t != t ? 0 : t > 1 ? 1 : t;
	int k = t < 0.5 ? 0 : 1;
	double u = t < 0.5 ? t * 2 : (t - 0.5) * 2;
	L = lab[0][0] + (lab[2][0] - lab[0][0]) * t;
	a = lab[k][1] + (lab[k + 1][1] - lab[k][1]) * u;
	b = lab[k][2] + (lab[k + 1][2] - lab[k][2]) * u;
	double fy = (L + 16) / 116, fx = fy + a / 500, fz = fy - b / 200;
	/* D65 white point, then XYZ to linear sRGB (IEC 61966-2-1) */
	double X = 0.95047 * lab_finv(fx), Y = lab_finv(fy), Z = 1.08883 * lab_finv(fz);
	rgb[0] = srgb_encode(3.2406 * X - 1.5372 * Y - 0.4986 * Z);
	rgb[1] = srgb_encode(-0.9689 * X + 1.8758 * Y + 0.0415 * Z);
	rgb[2] = srgb_encode(0.0557 * X - 0.2040 * Y + 1.0570 * Z);
}

static void heat_color(cairo_t *cr, double a)
{
	double c[3];
	eval_ramp(a, c);
	cairo_set_source_rgb(cr, c[0], c[1], c[2]);
}

/* Black text on the light half of the ramp, white on the dark one. */
static void text_color_on(cairo_t *cr, double a)
{
	double k = a < 0.45 ? 1 : 0;
	cairo_set_source_rgb(cr, k, k, k);
}

/* A vertical colour bar of the ramp at (x, y), w x h, 0 at the bottom,
 * ticks 0, 0.5, 1 and its name above. */
static void colour_bar(cairo_t *cr, double x, double y, double w, double h, const char *name)
{
	char buf[16];

	for (int i = 0; i < (int)h; i++) {
		heat_color(cr, 1 - (i + 0.5) / h);
		cairo_rectangle(cr, x, y + i, w, 1.5);
		cairo_fill(cr);
	}
	cairo_set_source_rgb(cr, 0, 0, 0);
	cairo_set_line_width(cr, 1);
	cairo_rectangle(cr, x, y, w, h);
	cairo_stroke(cr);
	for (int k = 0; k <= 2; k++) {
		snprintf(buf, sizeof buf, "%g", k / 2.0);
		text_at(cr, x + w + 4, y + h - h * k / 2.0 + 4, buf, 11, 0);
	}
	text_at(cr, x + w / 2, y - 8, name, 11, 1);
}

static int plot_heat(const struct eval_recs *v, const struct eval_group *g, const char *dir,
		     char ***names, int *n_names, char *err, size_t errlen)
{
	double len[EVAL_MAX_AXIS], dep[EVAL_MAX_AXIS];
	int n_l = eval_axis(v, EVAL_NIAH, g, 0, len), n_d = eval_axis(v, EVAL_NIAH, g, 1, dep);
	char label[48], name[96], buf[64];

	if (!n_l || !n_d)
		return 0;
	cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, HEAT_W, HEAT_H);
	cairo_t *cr = cairo_create(s);
	double x0 = 90, y0 = 50, w = HEAT_W - x0 - 90, h = HEAT_H - y0 - 60;
	double cw = w / n_d, ch = h / n_l;

	cairo_set_source_rgb(cr, 1, 1, 1);
	cairo_paint(cr);
	cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
	eval_group_label(g, label, sizeof label);
	cairo_set_source_rgb(cr, 0, 0, 0);
	snprintf(buf, sizeof buf, "niah accuracy: %s", label);
	text_at(cr, HEAT_W / 2.0, 30, buf, 16, 1);
	for (int l = 0; l < n_l; l++) {
		for (int d = 0; d < n_d; d++) {
			int n = 0, ok = 0;
			for (int i = 0; i < v->n; i++) {
				const struct eval_rec *r = &v->r[i];
				if (r->task == EVAL_NIAH && eval_in_group(r, g) && r->length == len[l] &&
				    r->depth == dep[d] && r->correct >= 0) {
					n++;
					ok += r->correct;
				}
			}
			/* longest at the top */
			double cx = x0 + d * cw, cy = y0 + (n_l - 1 - l) * ch;
			if (n)
				heat_color(cr, (double)ok / n);
			else
				cairo_set_source_rgb(cr, 0.85, 0.85, 0.85);
			cairo_rectangle(cr, cx + 1, cy + 1, cw - 2, ch - 2);
			cairo_fill(cr);
			if (n)
				text_color_on(cr, (double)ok / n);
			else
				cairo_set_source_rgb(cr, 0, 0, 0);
			snprintf(buf, sizeof buf, n ? "%.2f (%d)" : "-", n ? (double)ok / n : 0, n);
			text_at(cr, cx + cw / 2, cy + ch / 2 + 5, buf, 14, 1);
		}
		cairo_set_source_rgb(cr, 0, 0, 0);
		snprintf(buf, sizeof buf, "%.0f", len[l]);
		text_at(cr, x0 - 8 - 7 * strlen(buf), y0 + (n_l - 1 - l) * ch + ch / 2 + 5, buf, 13, 0);
	}
	colour_bar(cr, x0 + w + 25, y0 + 10, 18, h - 20, "accuracy");
	for (int d = 0; d < n_d; d++) {
		snprintf(buf, sizeof buf, "%g", dep[d]);
		text_at(cr, x0 + d * cw + cw / 2, y0 + h + 20, buf, 13, 1);
	}
	text_at(cr, x0 + w / 2, HEAT_H - 12, "needle depth", 13, 1);
	cairo_save(cr);
	cairo_translate(cr, 18, y0 + h / 2);
	cairo_rotate(cr, -M_PI / 2);
	text_at(cr, 0, 0, "length (tokens)", 13, 1);
	cairo_restore(cr);
	if (eval_router_named(g))
		snprintf(name, sizeof name, "heat_%.15s_%.11s_%g.png", g->method, g->router, g->budget);
	else
		snprintf(name, sizeof name, "heat_%.15s_%g.png", g->method, g->budget);
	cairo_destroy(cr);
	int rc = save(s, dir, name, names, n_names, err, errlen);
	cairo_surface_destroy(s);
	return rc;
}

/* Mean of field (0 resident, 1 full KV) over niah records of g at length. */
static double mean_bytes(const struct eval_recs *v, const struct eval_group *g, double length, int full)
{
	double sum = 0;
	int n = 0;
	for (int i = 0; i < v->n; i++) {
		const struct eval_rec *r = &v->r[i];
		if (r->task == EVAL_NIAH && eval_in_group(r, g) && r->length == length && r->full_kv_bytes > 0) {
			sum += full ? r->full_kv_bytes : r->resident_bytes;
			n++;
		}
	}
	return n ? sum / n : NAN;
}

static const double PALETTE[][3] = {
	{ 0.12, 0.47, 0.71 }, { 0.84, 0.15, 0.16 }, { 0.17, 0.63, 0.17 }, { 0.58, 0.40, 0.74 },
	{ 1.00, 0.50, 0.05 }, { 0.55, 0.34, 0.29 },
};

/* Background, title, axes and ticks of a memory plot: x linear in
 * tokens up to xmax, y in MiB up to ymax bytes; plot area (x0, y0, w, h). */
static void mem_axes(cairo_t *cr, const char *method, const double *len, int n_l, double xmax,
		     double ymax, double x0, double y0, double w, double h)
{
	char buf[96];

	cairo_set_source_rgb(cr, 1, 1, 1);
	cairo_paint(cr);
	cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
	cairo_set_source_rgb(cr, 0, 0, 0);
	snprintf(buf, sizeof buf, "KV memory against length: %.15s", method);
	text_at(cr, x0 + w / 2, 30, buf, 16, 1);
	cairo_set_line_width(cr, 1);
	cairo_move_to(cr, x0, y0);
	cairo_line_to(cr, x0, y0 + h);
	cairo_line_to(cr, x0 + w, y0 + h);
	cairo_stroke(cr);
	for (int t = 0; t <= 4; t++) {
		double y = y0 + h - h * t / 4.0;
		snprintf(buf, sizeof buf, "%.1f", ymax * t / 4.0 / 1048576.0);
		text_at(cr, x0 - 8 - 7 * strlen(buf), y + 4, buf, 12, 0);
	}
	for (int l = 0; l < n_l; l++) {
		snprintf(buf, sizeof buf, "%.0f", len[l]);
		text_at(cr, x0 + w * len[l] / xmax, y0 + h + 18, buf, 12, 1);
	}
	text_at(cr, x0 + w / 2, y0 + h + 48, "length (tokens)", 13, 1);
	text_at(cr, 8, y0 - 12, "MiB", 13, 0);
}

/* One method: resident bytes of each of its groups (budgets) and full KV
 * bytes against length, linear axes from 0. */
static int plot_mem(const struct eval_recs *v, const char *method, const struct eval_group *g, int n_g,
		    const char *dir, char ***names, int *n_names, char *err, size_t errlen)
{
	double len[EVAL_MAX_AXIS], ymax = 0;
	int n_l = eval_axis(v, EVAL_NIAH, NULL, 0, len), mine[MAX_G], n_m = 0;
	char buf[96];

	for (int k = 0; k < n_g; k++)
		if (!strcmp(g[k].method, method))
			mine[n_m++] = k;
	if (!n_m || !n_l)
		return 0;
	for (int k = 0; k < n_m; k++)
		for (int l = 0; l < n_l; l++)
			for (int full = 0; full < 2; full++) {
				double y = mean_bytes(v, &g[mine[k]], len[l], full);
				if (isfinite(y) && y > ymax)
					ymax = y;
			}
	if (ymax <= 0)
		return 0;
	cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, MEM_W, MEM_H);
	cairo_t *cr = cairo_create(s);
	double x0 = 80, y0 = 50, w = MEM_W - x0 - 170, h = MEM_H - y0 - 60;
	double xmax = len[n_l - 1] > 0 ? len[n_l - 1] : 1;
	ymax *= 1.1;

	mem_axes(cr, method, len, n_l, xmax, ymax, x0, y0, w, h);
	/* series: full KV first (dashed), then each budget's resident bytes */
	for (int k = -1; k < n_m; k++) {
		const struct eval_group *gr = &g[mine[k < 0 ? 0 : k]];
		const double *c = k < 0 ? (const double[3]){ 0.3, 0.3, 0.3 } : PALETTE[k % 6];
		int started = 0;
		cairo_set_source_rgb(cr, c[0], c[1], c[2]);
		cairo_set_line_width(cr, 2);
		cairo_set_dash(cr, (const double[]){ 6, 4 }, k < 0 ? 2 : 0, 0);
		for (int l = 0; l < n_l; l++) {
			double y = mean_bytes(v, gr, len[l], k < 0);
			if (!isfinite(y))
				continue;
			double px = x0 + w * len[l] / xmax, py = y0 + h - h * y / ymax;
			if (started)
				cairo_line_to(cr, px, py);
			else
				cairo_move_to(cr, px, py);
			started = 1;
		}
		cairo_stroke(cr);
		cairo_set_dash(cr, NULL, 0, 0);
		for (int l = 0; l < n_l; l++) {
			double y = mean_bytes(v, gr, len[l], k < 0);
			if (isfinite(y)) {
				cairo_arc(cr, x0 + w * len[l] / xmax, y0 + h - h * y / ymax, 3.5, 0, 2 * M_PI);
				cairo_fill(cr);
			}
		}
		double ly = y0 + 10 + 22 * (k + 1);
		cairo_rectangle(cr, x0 + w + 15, ly - 8, 14, 4);
		cairo_fill(cr);
		if (k < 0)
			snprintf(buf, sizeof buf, "full KV");
		else
			eval_group_label(gr, buf, sizeof buf);
		text_at(cr, x0 + w + 35, ly, buf, 12, 0);
	}
	cairo_destroy(cr);
	snprintf(buf, sizeof buf, "mem_%.15s.png", method);
	int rc = save(s, dir, buf, names, n_names, err, errlen);
	cairo_surface_destroy(s);
	return rc;
}

/* ---- methods side by side ---------------------------------------------- */

/* The tasks of the panels: those with a length axis and an answer scored
 * per question (not kl, mass, qa), present in v; into task [EVAL_N_TASK]. */
static int panel_tasks(const struct eval_recs *v, int *task)
{
	int n = 0;
	for (int t = 0; t < EVAL_N_TASK; t++) {
		int any = 0;
		for (int i = 0; i < v->n && !any; i++)
			any = v->r[i].task == t;
		if (any && t != EVAL_KL && t != EVAL_MASS && t != EVAL_QA)
			task[n++] = t;
	}
	return n;
}

/* Mean score (probes) or accuracy of group g on task at length; NAN when
 * nothing was measured. */
static double panel_value(const struct eval_recs *v, const struct eval_group *g, int task, double length)
{
	double sum = 0;
	int n = 0;
	for (int i = 0; i < v->n; i++) {
		const struct eval_rec *r = &v->r[i];
		if (r->task != task || !eval_in_group(r, g) || r->length != length || r->correct < 0)
			continue;
		sum += isnan(r->score) ? r->correct : r->score;
		n++;
	}
	return n ? sum / n : NAN;
}

static int plot_panels(const struct eval_recs *v, const char *dir, char ***names, int *n_names,
		       char *err, size_t errlen)
{
	struct eval_group g[MAX_G];
	int task[EVAL_N_TASK], n_t = panel_tasks(v, task), n_g = 0, n_l = 0;
	double len[EVAL_MAX_AXIS], tmp[EVAL_MAX_AXIS];
	char buf[64];

	/* groups and lengths over every panel task */
	for (int k = 0; k < n_t; k++) {
		struct eval_group gk[MAX_G];
		int m = eval_groups(v, task[k], gk, MAX_G), nl = eval_axis(v, task[k], NULL, 0, tmp);
		for (int j = 0; j < m; j++) {
			int seen = 0;
			for (int i = 0; i < n_g && !seen; i++)
				seen = !strcmp(g[i].method, gk[j].method) && !strcmp(g[i].router, gk[j].router) &&
				       g[i].budget == gk[j].budget;
			if (!seen && n_g < PANEL_MAX)
				g[n_g++] = gk[j];
		}
		for (int j = 0; j < nl; j++) {
			int i = 0;
			while (i < n_l && len[i] != tmp[j])
				i++;
			if (i == n_l && n_l < EVAL_MAX_AXIS)
				len[n_l++] = tmp[j];
		}
	}
	if (!n_t || !n_g || !n_l)
		return 0;
	for (int i = 1; i < n_l; i++)
		for (int j = i; j > 0 && len[j - 1] > len[j]; j--) {
			double x = len[j];
			len[j] = len[j - 1];
			len[j - 1] = x;
		}
	double cw = 46, ch = 26, pw = cw * n_l, left = 70, gap = 18, top = 60;
	int W = (int)(left + n_g * (pw + gap) + 70), H = (int)(top + ch * n_t + 50);
	double bar_h = ch * n_t > PANEL_BAR_H ? ch * n_t : PANEL_BAR_H;
	W = W < PANEL_MIN_W ? PANEL_MIN_W : W;
	H = H < top + bar_h + 30 ? (int)(top + bar_h + 30) : H;
	cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H);
	cairo_t *cr = cairo_create(s);

	cairo_set_source_rgb(cr, 1, 1, 1);
	cairo_paint(cr);
	cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
	cairo_set_source_rgb(cr, 0, 0, 0);
	text_at(cr, W / 2.0, 22, "score by task and length (tokens)", 14, 1);
	for (int k = 0; k < n_t; k++)
		text_at(cr, 8, top + ch * k + ch / 2 + 4, eval_task_name(task[k]), 12, 0);
	for (int p = 0; p < n_g; p++) {
		double px = left + p * (pw + gap);
		cairo_set_source_rgb(cr, 0, 0, 0);
		eval_group_label(&g[p], buf, sizeof buf);
		text_at(cr, px + pw / 2, top - 22, buf, 12, 1);
		for (int l = 0; l < n_l; l++) {
			snprintf(buf, sizeof buf, "%.0f", len[l]);
			text_at(cr, px + cw * l + cw / 2, top + ch * n_t + 16, buf, 10, 1);
		}
		for (int k = 0; k < n_t; k++)
			for (int l = 0; l < n_l; l++) {
				double x = panel_value(v, &g[p], task[k], len[l]), cx = px + cw * l, cy = top + ch * k;
				if (isnan(x))
					cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
				else
					heat_color(cr, x);
				cairo_rectangle(cr, cx + 1, cy + 1, cw - 2, ch - 2);
				cairo_fill(cr);
				if (isnan(x))
					continue;
				text_color_on(cr, x);
				snprintf(buf, sizeof buf, "%.2f", x);
				text_at(cr, cx + cw / 2, cy + ch / 2 + 4, buf, 10, 1);
			}
	}
	colour_bar(cr, W - 52, top, 16, bar_h, "score");
	cairo_destroy(cr);
	int rc = save(s, dir, "panels_tasks.png", names, n_names, err, errlen);
	cairo_surface_destroy(s);
	return rc;
}

int eval_plot_all(const struct eval_recs *v, const char *dir, char ***names, int *n,
		  char *err, size_t errlen)
{
	struct eval_group g[MAX_G];
	int n_g = eval_groups(v, EVAL_NIAH, g, MAX_G), rc = 0;

	*names = NULL;
	*n = 0;
	for (int k = 0; !rc && k < n_g; k++)
		rc = plot_heat(v, &g[k], dir, names, n, err, errlen);
	for (int k = 0; !rc && k < n_g; k++) {
		int first = 1;
		for (int j = 0; j < k; j++)
			first &= strcmp(g[j].method, g[k].method) != 0;
		if (first)
			rc = plot_mem(v, g[k].method, g, n_g, dir, names, n, err, errlen);
	}
	if (!rc)
		rc = plot_panels(v, dir, names, n, err, errlen);
	return rc;
}

int eval_png_info(const char *path, int *w, int *h, int *n_colors, char *err, size_t errlen)
{
	cairo_surface_t *s = cairo_image_surface_create_from_png(path);
	uint32_t seen[64];
	int n = 0;

	if (cairo_surface_status(s) != CAIRO_STATUS_SUCCESS) {
		cairo_surface_destroy(s);
		return sekv_errf(err, errlen, SEKV_EFORMAT, "eval: %s: not a PNG cairo reads", path);
	}
	cairo_surface_flush(s);
	*w = cairo_image_surface_get_width(s);
	*h = cairo_image_surface_get_height(s);
	const unsigned char *px = cairo_image_surface_get_data(s);
	int stride = cairo_image_surface_get_stride(s);
	for (int k = 0; px && k < 4096 && *w > 0 && *h > 0; k++) {
		int x = (int)((long long)k * 7919 % *w), y = (int)((long long)k * 104729 / 4096 % *h);
		uint32_t p;
		memcpy(&p, px + (size_t)y * stride + (size_t)x * 4, 4);
		int i = 0;
		while (i < n && seen[i] != (p & 0xffffff))
			i++;
		if (i == n && n < 64)
			seen[n++] = p & 0xffffff;
	}
	*n_colors = n;
	cairo_surface_destroy(s);
	return 0;
}

/* ---- curves (sekv train's losses) -------------------------------------- */

int eval_plot_curves(const char *path, const char *title, const char *xlabel, int n_series,
		     const char *const *name, const double *x, const double *const *y, int n,
		     char *err, size_t errlen)
{
	const double W = 820, H = 480, x0 = 70, y0 = 60, w = 560, h = 340;
	double xmax = 0, ymax = 0;
	char buf[96];
	cairo_surface_t *s;
	cairo_t *cr;
	int rc = 0;

	for (int i = 0; i < n; i++) {
		xmax = x[i] > xmax ? x[i] : xmax;
		for (int k = 0; k < n_series; k++)
			ymax = isfinite(y[k][i]) && y[k][i] > ymax ? y[k][i] : ymax;
	}
	xmax = xmax > 0 ? xmax : 1;
	ymax = ymax > 0 ? ymax * 1.05 : 1;
	s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, (int)W, (int)H);
	cr = cairo_create(s);
	cairo_set_source_rgb(cr, 1, 1, 1);
	cairo_paint(cr);
	cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
	cairo_set_source_rgb(cr, 0, 0, 0);
	text_at(cr, x0 + w / 2, 30, title, 16, 1);
	cairo_set_line_width(cr, 1);
	cairo_move_to(cr, x0, y0);
	cairo_line_to(cr, x0, y0 + h);
	cairo_line_to(cr, x0 + w, y0 + h);
	cairo_stroke(cr);
	for (int t = 0; t <= 4; t++) {
		snprintf(buf, sizeof buf, "%.3g", ymax * t / 4.0);
		text_at(cr, x0 - 8 - 7 * strlen(buf), y0 + h - h * t / 4.0 + 4, buf, 12, 0);
		snprintf(buf, sizeof buf, "%.0f", xmax * t / 4.0);
		text_at(cr, x0 + w * t / 4.0, y0 + h + 18, buf, 12, 1);
	}
	text_at(cr, x0 + w / 2, y0 + h + 48, xlabel, 13, 1);
	for (int k = 0; k < n_series; k++) {
		const double *c = PALETTE[k % (int)(sizeof PALETTE / sizeof *PALETTE)];
		int started = 0;
		cairo_set_source_rgb(cr, c[0], c[1], c[2]);
		cairo_set_line_width(cr, 2);
		for (int i = 0; i < n; i++) {
			double px = x0 + w * x[i] / xmax, py = y0 + h - h * y[k][i] / ymax;
			if (!isfinite(y[k][i]))
				continue;
			if (started)
				cairo_line_to(cr, px, py);
			else
				cairo_move_to(cr, px, py);
			started = 1;
		}
		cairo_stroke(cr);
		cairo_rectangle(cr, x0 + w + 15, y0 + 10 + 22 * k - 8, 14, 4);
		cairo_fill(cr);
		cairo_set_source_rgb(cr, 0, 0, 0);
		text_at(cr, x0 + w + 35, y0 + 10 + 22 * k, name[k], 12, 0);
	}
	cairo_destroy(cr);
	if (cairo_surface_write_to_png(s, path) != CAIRO_STATUS_SUCCESS)
		rc = sekv_errf(err, errlen, SEKV_EIO, "plot: %s: cannot write the PNG", path);
	cairo_surface_destroy(s);
	return rc;
}
