/* eval_report.c - results.json and results.md of `sekv eval` (eval.h).
 *
 * Invariant: the Markdown is computed from the records alone (the same
 * records results.json holds), so a report can be rebuilt from the JSON.
 * "Not measured" (-1, NAN) is null in JSON and "-" in tables, and counts
 * in no mean. Plots live in eval_plot.c.
 */
#include "app/eval.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "app/app.h"
#include "engine/base/err.h"
#include "engine/sekv/sekv.h"

#define MAX_GROUPS 64

/* ---- groups ----------------------------------------------------------- */

int eval_in_group(const struct eval_rec *r, const struct eval_group *g)
{
	return !strcmp(r->method, g->method) && !strcmp(r->router, g->router) && r->budget == g->budget;
}

int eval_router_named(const struct eval_group *g)
{
	struct sekv_params p;

	sekv_default_params(&p);
	return g->router[0] && strcmp(g->router, "none") && strcmp(g->router, sekv_router_name(p.router));
}

void eval_group_label(const struct eval_group *g, char *buf, size_t cap)
{
	if (!strcmp(g->method, "full"))
		snprintf(buf, cap, "%s", g->method);
	else if (eval_router_named(g))
		snprintf(buf, cap, "%s(%s)@%g", g->method, g->router, g->budget);
	else
		snprintf(buf, cap, "%s@%g", g->method, g->budget);
}

int eval_groups(const struct eval_recs *v, int task, struct eval_group *g, int cap)
{
	int n = 0, rank[MAX_GROUPS];
	char seen[MAX_GROUPS][16];
	int n_seen = 0;

	for (int i = 0; i < v->n && n < cap && n < MAX_GROUPS; i++) {
		const struct eval_rec *r = &v->r[i];
		int k = 0, m = 0;
		if (task >= 0 && r->task != task)
			continue;
		while (k < n && !eval_in_group(r, &g[k]))
			k++;
		if (k < n)
			continue;
		while (m < n_seen && strcmp(seen[m], r->method))
			m++;
		if (m == n_seen && n_seen < MAX_GROUPS)
			snprintf(seen[n_seen++], sizeof seen[0], "%s", r->method);
		snprintf(g[n].method, sizeof g[n].method, "%s", r->method);
		snprintf(g[n].router, sizeof g[n].router, "%s", r->router);
		g[n].budget = r->budget;
		rank[n++] = m;
	}
	/* by method as first seen, then budget descending (insertion sort: stable) */
	for (int i = 1; i < n; i++) {
		struct eval_group x = g[i];
		int rx = rank[i], j = i - 1;
		while (j >= 0 && (rank[j] > rx || (rank[j] == rx && g[j].budget < x.budget))) {
			g[j + 1] = g[j];
			rank[j + 1] = rank[j];
			j--;
		}
		g[j + 1] = x;
		rank[j + 1] = rx;
	}
	return n;
}

/* ---- JSON ------------------------------------------------------------- */

static void add_num(cJSON *o, const char *k, double v, int measured)
{
	if (measured && isfinite(v))
		cJSON_AddNumberToObject(o, k, v);
	else
		cJSON_AddNullToObject(o, k);
}

static cJSON *rec_json(const struct eval_rec *r)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "method", r->method);
	if (r->router[0])
		cJSON_AddStringToObject(o, "router", r->router);
	cJSON_AddNumberToObject(o, "budget", r->budget);
	cJSON_AddStringToObject(o, "task", eval_task_name(r->task));
	cJSON_AddNumberToObject(o, "length", r->length);
	cJSON_AddNumberToObject(o, "depth", r->depth);
	cJSON_AddNumberToObject(o, "depth_at", r->depth_at);
	cJSON_AddNumberToObject(o, "needle", r->needle);
	if (r->question)
		cJSON_AddStringToObject(o, "question", r->question == 1 ? "first" : "second");
	add_num(o, "correct", r->correct, r->correct >= 0);
	add_num(o, "full_correct", r->full_correct, r->full_correct >= 0);
	add_num(o, "niah", r->niah, r->niah >= 0);
	add_num(o, "score", r->score, 1);
	add_num(o, "same_answer", r->same_answer, r->same_answer >= 0);
	add_num(o, "kl", r->kl, 1);
	add_num(o, "top1", r->top1, 1);
	add_num(o, "mass_recall", r->mass_recall, 1);
	add_num(o, "attn_err", r->attn_err, 1);
	add_num(o, "mass_oracle", r->mass_oracle, 1);
	add_num(o, "alpha_p10", r->alpha_q[0], 1);
	add_num(o, "alpha_p50", r->alpha_q[1], 1);
	add_num(o, "alpha_p90", r->alpha_q[2], 1);
	add_num(o, "resident_bytes", r->resident_bytes, r->resident_bytes > 0);
	add_num(o, "host_bytes", r->host_bytes, r->full_kv_bytes > 0);
	add_num(o, "disk_bytes", r->disk_bytes, 1);
	add_num(o, "swa_bytes", r->swa_bytes, r->full_kv_bytes > 0);
	add_num(o, "full_kv_bytes", r->full_kv_bytes, r->full_kv_bytes > 0);
	add_num(o, "prefill_tps", r->prefill_tps, 1);
	add_num(o, "decode_tps", r->decode_tps, 1);
	cJSON_AddNumberToObject(o, "n_answer", r->n_answer);
	if (isfinite(r->tier[0]))
		app_json_add_device_tier(o, r->budget * r->full_kv_bytes, r->tier);
	if (r->n_lh_layer > 0) {
		cJSON *lay = cJSON_CreateArray(), *lh = cJSON_CreateArray();
		for (int l = 0; l < r->n_lh_layer; l++) {
			cJSON_AddItemToArray(lay, cJSON_CreateNumber(r->lh_layer[l]));
			cJSON_AddItemToArray(lh, cJSON_CreateDoubleArray(r->mass_lh + l * r->n_lh_head, r->n_lh_head));
		}
		cJSON_AddItemToObject(o, "mass_recall_layers", lay);
		cJSON_AddItemToObject(o, "mass_recall_lh", lh);
	}
	app_json_add_text(o, "value", r->value);
	app_json_add_text(o, "answer", r->answer);
	if (r->note[0])
		app_json_add_text(o, "note", r->note);
	return o;
}

int eval_write_json(const struct eval_recs *v, const char *path, char *err, size_t errlen)
{
	cJSON *arr = cJSON_CreateArray();
	char *txt = NULL, *safe = NULL;
	FILE *f = NULL;
	int rc = 0;

	for (int i = 0; arr && i < v->n; i++)
		cJSON_AddItemToArray(arr, rec_json(&v->r[i]));
	if (!arr || !(txt = cJSON_Print(arr)) || !(safe = app_json_inert_dup(txt)))
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "eval: %s: out of memory", path);
	else if (!(f = fopen(path, "wb")) || fputs(safe, f) < 0 || fputc('\n', f) < 0)
		rc = sekv_errf(err, errlen, SEKV_EIO, "eval: %s: %s", path, strerror(errno));
	if (f && fclose(f) && !rc)
		rc = sekv_errf(err, errlen, SEKV_EIO, "eval: %s: %s", path, strerror(errno));
	cJSON_Delete(arr);
	free(txt);
	free(safe);
	return rc;
}

static double get_num(const cJSON *o, const char *k, double absent)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsNumber(x) ? x->valuedouble : absent;
}

static double get_num_item(const cJSON *x)
{
	return cJSON_IsNumber(x) ? x->valuedouble : NAN;
}

static void get_str(const cJSON *o, const char *k, char *buf, size_t cap)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
	snprintf(buf, cap, "%s", cJSON_IsString(x) ? x->valuestring : "");
}

/* mass_recall_layers and mass_recall_lh of o into r (left empty when
 * absent or not a [layers][heads] array within the limits). */
static void get_lh(const cJSON *o, struct eval_rec *r)
{
	const cJSON *lay = cJSON_GetObjectItemCaseSensitive(o, "mass_recall_layers");
	const cJSON *lh = cJSON_GetObjectItemCaseSensitive(o, "mass_recall_lh");
	int n_l = cJSON_GetArraySize(lay), n_h = cJSON_GetArraySize(cJSON_GetArrayItem(lh, 0));

	if (!cJSON_IsArray(lay) || !cJSON_IsArray(lh) || n_l != cJSON_GetArraySize(lh) || n_l < 1 ||
	    n_l > EVAL_LH_LAYERS || n_h < 1 || n_h > EVAL_LH_HEADS)
		return;
	for (int l = 0; l < n_l; l++) {
		const cJSON *row = cJSON_GetArrayItem(lh, l);
		if (cJSON_GetArraySize(row) != n_h)
			return;
		r->lh_layer[l] = (int)get_num_item(cJSON_GetArrayItem(lay, l));
		for (int h = 0; h < n_h; h++)
			r->mass_lh[l * n_h + h] = get_num_item(cJSON_GetArrayItem(row, h));
	}
	r->n_lh_layer = n_l;
	r->n_lh_head = n_h;
}

int eval_read_json(struct eval_recs *v, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL, task[16], q[16];
	long n = -1;
	int rc = 0;

	memset(v, 0, sizeof *v);
	if (!f)
		return sekv_errf(err, errlen, SEKV_EIO, "eval: %s: %s", path, strerror(errno));
	if (!fseek(f, 0, SEEK_END) && (n = ftell(f)) >= 0 && !fseek(f, 0, SEEK_SET) && (buf = malloc((size_t)n + 1)))
		buf[fread(buf, 1, (size_t)n, f)] = 0;
	fclose(f);
	cJSON *arr = buf ? cJSON_Parse(buf) : NULL;
	free(buf);
	if (!cJSON_IsArray(arr)) {
		cJSON_Delete(arr);
		return sekv_errf(err, errlen, SEKV_EFORMAT, "eval: %s: not a JSON array of records", path);
	}
	const cJSON *o;
	cJSON_ArrayForEach(o, arr) {
		struct eval_rec r;
		eval_rec_init(&r);
		get_str(o, "method", r.method, sizeof r.method);
		get_str(o, "router", r.router, sizeof r.router);
		get_str(o, "task", task, sizeof task);
		get_str(o, "question", q, sizeof q);
		get_str(o, "value", r.value, sizeof r.value);
		get_str(o, "answer", r.answer, sizeof r.answer);
		get_str(o, "note", r.note, sizeof r.note);
		if (!cJSON_IsObject(o) || !r.method[0] || (r.task = eval_task_find(task)) < 0) {
			rc = sekv_errf(err, errlen, SEKV_EFORMAT, "eval: %s: record %d: no method or task", path, v->n);
			break;
		}
		r.budget = get_num(o, "budget", 1);
		r.length = (int)get_num(o, "length", 0);
		r.depth = get_num(o, "depth", 0);
		r.depth_at = get_num(o, "depth_at", r.depth);
		r.needle = (int)get_num(o, "needle", 0);
		r.question = !strcmp(q, "first") ? 1 : !strcmp(q, "second") ? 2 : 0;
		r.correct = (int)get_num(o, "correct", -1);
		r.full_correct = (int)get_num(o, "full_correct", -1);
		r.niah = (int)get_num(o, "niah", -1);
		r.score = get_num(o, "score", NAN);
		r.same_answer = (int)get_num(o, "same_answer", -1);
		r.kl = get_num(o, "kl", NAN);
		r.top1 = get_num(o, "top1", NAN);
		r.mass_recall = get_num(o, "mass_recall", NAN);
		r.attn_err = get_num(o, "attn_err", NAN);
		r.mass_oracle = get_num(o, "mass_oracle", NAN);
		r.alpha_q[0] = get_num(o, "alpha_p10", NAN);
		r.alpha_q[1] = get_num(o, "alpha_p50", NAN);
		r.alpha_q[2] = get_num(o, "alpha_p90", NAN);
		r.resident_bytes = get_num(o, "resident_bytes", 0);
		r.host_bytes = get_num(o, "host_bytes", 0);
		r.disk_bytes = get_num(o, "disk_bytes", 0);
		r.swa_bytes = get_num(o, "swa_bytes", 0);
		r.full_kv_bytes = get_num(o, "full_kv_bytes", 0);
		r.prefill_tps = get_num(o, "prefill_tps", 0);
		r.decode_tps = get_num(o, "decode_tps", NAN);
		r.n_answer = (int)get_num(o, "n_answer", 0);
		const cJSON *dt = cJSON_GetObjectItemCaseSensitive(o, "device_tier");
		for (int i = 0; cJSON_IsObject(dt) && i < EVAL_TIER_N; i++)
			r.tier[i] = get_num(dt, app_tier_name[i], NAN);
		get_lh(o, &r);
		if ((rc = eval_recs_push(v, &r))) {
			sekv_errf(err, errlen, rc, "eval: out of memory");
			break;
		}
	}
	cJSON_Delete(arr);
	if (rc)
		eval_recs_free(v);
	return rc;
}

/* ---- Markdown --------------------------------------------------------- */

/* Means over the records of one group (and task). */
struct agg {
	int n;              /* records */
	int n_fail;         /* records that measured nothing (note only) */
	int n_ok, ok;       /* correct measured, right */
	int n_agree, agree; /* full right, this one right too */
	int n_score;
	double score;       /* probes: share of the items */
	int n_same, same;   /* probes: full KV's answer known, the same text */
	int n_kl;
	double kl, top1;
	int n_mr;
	double mr;
	int n_ae;
	double ae;          /* attn_err */
	int n_mo;
	double mo;          /* mass_oracle */
	int n_res;
	double res;         /* resident / full_kv */
	int n_tps;
	double tps;
};

static void agg_add(struct agg *a, const struct eval_rec *r)
{
	a->n++;
	if (r->correct >= 0) {
		a->n_ok++;
		a->ok += r->correct;
		if (r->full_correct == 1) {
			a->n_agree++;
			a->agree += r->correct;
		}
	}
	if (!isnan(r->score)) {
		a->n_score++;
		a->score += r->score;
	}
	if (r->same_answer >= 0) {
		a->n_same++;
		a->same += r->same_answer;
	}
	if (!isnan(r->kl)) {
		a->n_kl++;
		a->kl += r->kl;
		a->top1 += r->top1;
	}
	if (!isnan(r->mass_recall)) {
		a->n_mr++;
		a->mr += r->mass_recall;
	}
	if (!isnan(r->attn_err)) {
		a->n_ae++;
		a->ae += r->attn_err;
	}
	if (!isnan(r->mass_oracle)) {
		a->n_mo++;
		a->mo += r->mass_oracle;
	}
	if (r->resident_bytes > 0 && r->full_kv_bytes > 0) {
		a->n_res++;
		a->res += r->resident_bytes / r->full_kv_bytes;
	}
	if (!isnan(r->decode_tps) && r->decode_tps > 0) {
		a->n_tps++;
		a->tps += r->decode_tps;
	}
	if (r->correct < 0 && isnan(r->kl) && isnan(r->mass_recall) && isnan(r->score) && r->note[0])
		a->n_fail++;
}

/* Mean num/n as text ("-" when n is 0). */
static const char *cell(char *buf, size_t cap, double num, int n, const char *fmt)
{
	if (n <= 0)
		snprintf(buf, cap, "-");
	else
		snprintf(buf, cap, fmt, num / n);
	return buf;
}

/* The records of task in group g, aggregated into a (zeroed first). */
static void agg_group(const struct eval_recs *v, int task, const struct eval_group *g, struct agg *a)
{
	memset(a, 0, sizeof *a);
	for (int i = 0; i < v->n; i++)
		if (v->r[i].task == task && eval_in_group(&v->r[i], g))
			agg_add(a, &v->r[i]);
}

static void table_summary(FILE *f, const struct eval_recs *v, int task)
{
	struct eval_group g[MAX_GROUPS];
	int n_g = eval_groups(v, task, g, MAX_GROUPS);
	char lab[48], c[9][32];

	fprintf(f, "| method | n | accuracy | agreement (full right) | KL (nats) | top-1 | mass_recall | "
		"mass_oracle | attn_err | resident ratio | decode tok/s |\n"
		"|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
	for (int k = 0; k < n_g; k++) {
		struct agg a;
		agg_group(v, task, &g[k], &a);
		eval_group_label(&g[k], lab, sizeof lab);
		fprintf(f, "| %s | %d%s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", lab, a.n,
			a.n_fail ? " (failed: see notes)" : "",
			cell(c[0], 32, a.ok, a.n_ok, "%.3f"), cell(c[1], 32, a.agree, a.n_agree, "%.3f"),
			cell(c[2], 32, a.kl, a.n_kl, "%.4f"), cell(c[3], 32, a.top1, a.n_kl, "%.3f"),
			cell(c[4], 32, a.mr, a.n_mr, "%.3f"), cell(c[8], 32, a.mo, a.n_mo, "%.3f"),
			cell(c[7], 32, a.ae, a.n_ae, "%.4f"),
			cell(c[5], 32, a.res, a.n_res, "%.4f"), cell(c[6], 32, a.tps, a.n_tps, "%.1f"));
	}
	fputc('\n', f);
}

void eval_write_overview(FILE *f, const struct eval_recs *v)
{
	struct eval_group g[MAX_GROUPS];
	char lab[48], c[4][32];
	int shown = 0;

	for (int t = 0; t < EVAL_N_TASK; t++) {
		int n_g = eval_groups(v, t, g, MAX_GROUPS);
		if (t == EVAL_KL || t == EVAL_MASS)
			continue;
		for (int k = 0; k < n_g; k++) {
			struct agg a;
			agg_group(v, t, &g[k], &a);
			if (!shown++)
				fprintf(f, "| task | method | n | accuracy | score | agreement (full right) | same answer "
					"as full |\n|---|---|---:|---:|---:|---:|---:|\n");
			eval_group_label(&g[k], lab, sizeof lab);
			fprintf(f, "| %s | %s | %d | %s | %s | %s | %s |\n", eval_task_name(t), lab, a.n,
				cell(c[0], 32, a.ok, a.n_ok, "%.3f"), cell(c[1], 32, a.score, a.n_score, "%.3f"),
				cell(c[2], 32, a.agree, a.n_agree, "%.3f"), cell(c[3], 32, a.same, a.n_same, "%.3f"));
		}
	}
	if (shown)
		fputc('\n', f);
}

/* A probe task: accuracy (every item), score (share of the items),
 * agreement where full KV is right, the same text as full KV's answer. */
static void table_probe(FILE *f, const struct eval_recs *v, int task)
{
	struct eval_group g[MAX_GROUPS];
	int n_g = eval_groups(v, task, g, MAX_GROUPS);
	char lab[48], c[6][32];

	fprintf(f, "| method | n | accuracy | score | agreement (full right) | same answer as full | "
		"resident ratio | decode tok/s |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
	for (int k = 0; k < n_g; k++) {
		struct agg a;
		agg_group(v, task, &g[k], &a);
		eval_group_label(&g[k], lab, sizeof lab);
		fprintf(f, "| %s | %d%s | %s | %s | %s | %s | %s | %s |\n", lab, a.n,
			a.n_fail ? " (failed: see notes)" : "", cell(c[0], 32, a.ok, a.n_ok, "%.3f"),
			cell(c[1], 32, a.score, a.n_score, "%.3f"), cell(c[2], 32, a.agree, a.n_agree, "%.3f"),
			cell(c[3], 32, a.same, a.n_same, "%.3f"), cell(c[4], 32, a.res, a.n_res, "%.4f"),
			cell(c[5], 32, a.tps, a.n_tps, "%.1f"));
	}
	fputc('\n', f);
}

int eval_axis(const struct eval_recs *v, int task, const struct eval_group *g, int use_depth,
	      double *out)
{
	int n = 0;
	for (int i = 0; i < v->n; i++) {
		const struct eval_rec *r = &v->r[i];
		if (r->task != task || (g && !eval_in_group(r, g)))
			continue;
		double x = use_depth ? r->depth : r->length;
		int k = 0;
		while (k < n && out[k] != x)
			k++;
		if (k == n && n < EVAL_MAX_AXIS)
			out[n++] = x;
	}
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && out[j - 1] > out[j]; j--) {
			double t = out[j];
			out[j] = out[j - 1];
			out[j - 1] = t;
		}
	return n;
}

static void table_grid(FILE *f, const struct eval_recs *v, int task)
{
	struct eval_group g[MAX_GROUPS];
	double len[EVAL_MAX_AXIS], dep[EVAL_MAX_AXIS];
	int n_g = eval_groups(v, task, g, MAX_GROUPS);
	int n_l = eval_axis(v, task, NULL, 0, len), n_d = eval_axis(v, task, NULL, 1, dep);
	char lab[48], c[32];

	fprintf(f, "Accuracy by length (tokens) and depth:\n\n| method | length |");
	for (int d = 0; d < n_d; d++)
		fprintf(f, " depth %g |", dep[d]);
	fprintf(f, " all |\n|---|---:|");
	for (int d = 0; d <= n_d; d++)
		fprintf(f, "---:|");
	fputc('\n', f);
	for (int k = 0; k < n_g; k++) {
		eval_group_label(&g[k], lab, sizeof lab);
		for (int l = 0; l < n_l; l++) {
			struct agg all = { 0 };
			fprintf(f, "| %s | %.0f |", lab, len[l]);
			for (int d = 0; d < n_d; d++) {
				struct agg a = { 0 };
				for (int i = 0; i < v->n; i++) {
					const struct eval_rec *r = &v->r[i];
					if (r->task == task && eval_in_group(r, &g[k]) && r->length == len[l] &&
					    r->depth == dep[d]) {
						agg_add(&a, r);
						agg_add(&all, r);
					}
				}
				fprintf(f, " %s |", cell(c, sizeof c, a.ok, a.n_ok, "%.2f"));
			}
			fprintf(f, " %s |\n", cell(c, sizeof c, all.ok, all.n_ok, "%.2f"));
		}
	}
	fputc('\n', f);
}

static void table_second(FILE *f, const struct eval_recs *v)
{
	struct eval_group g[MAX_GROUPS];
	int n_g = eval_groups(v, EVAL_SECOND, g, MAX_GROUPS);
	char lab[48], c[4][32];

	fprintf(f, "First question against the second (same conversation):\n\n"
		"| method | first accuracy | second accuracy | first agreement | second agreement |\n"
		"|---|---:|---:|---:|---:|\n");
	for (int k = 0; k < n_g; k++) {
		struct agg q[2] = { { 0 }, { 0 } };
		for (int i = 0; i < v->n; i++) {
			const struct eval_rec *r = &v->r[i];
			if (r->task == EVAL_SECOND && eval_in_group(r, &g[k]) && r->question >= 1 && r->question <= 2)
				agg_add(&q[r->question - 1], r);
		}
		eval_group_label(&g[k], lab, sizeof lab);
		fprintf(f, "| %s | %s | %s | %s | %s |\n", lab, cell(c[0], 32, q[0].ok, q[0].n_ok, "%.3f"),
			cell(c[1], 32, q[1].ok, q[1].n_ok, "%.3f"), cell(c[2], 32, q[0].agree, q[0].n_agree, "%.3f"),
			cell(c[3], 32, q[1].agree, q[1].n_agree, "%.3f"));
	}
	fputc('\n', f);
}

/* mass_recall per global layer and query head: means over the mass
 * records of each group that carry the breakdown. */
static void table_mass_lh(FILE *f, const struct eval_recs *v)
{
	struct eval_group g[MAX_GROUPS];
	int n_g = eval_groups(v, EVAL_MASS, g, MAX_GROUPS), n_h = 0, head_shown = 0;
	char lab[48];

	for (int i = 0; i < v->n; i++)
		if (v->r[i].task == EVAL_MASS && v->r[i].n_lh_head > n_h)
			n_h = v->r[i].n_lh_head;
	for (int k = 0; k < n_g; k++) {
		double sum[EVAL_LH_LAYERS * EVAL_LH_HEADS] = { 0 };
		int n = 0, n_l = 0, nh = 0, layer[EVAL_LH_LAYERS];
		for (int i = 0; i < v->n; i++) {
			const struct eval_rec *r = &v->r[i];
			if (r->task != EVAL_MASS || !eval_in_group(r, &g[k]) || !r->n_lh_layer ||
			    (n && (r->n_lh_layer != n_l || r->n_lh_head != nh)))
				continue;
			n_l = r->n_lh_layer;
			nh = r->n_lh_head;
			memcpy(layer, r->lh_layer, sizeof layer);
			for (int j = 0; j < n_l * nh; j++)
				sum[j] += r->mass_lh[j];
			n++;
		}
		if (!n)
			continue;
		if (!head_shown++) {
			fprintf(f, "mass_recall by global layer (model layer) and query head, means over the answers:\n\n"
				"| method | layer |");
			for (int h = 0; h < n_h; h++)
				fprintf(f, " head %d |", h);
			fprintf(f, " all |\n|---|---:|");
			for (int h = 0; h <= n_h; h++)
				fprintf(f, "---:|");
			fputc('\n', f);
		}
		eval_group_label(&g[k], lab, sizeof lab);
		for (int l = 0; l < n_l; l++) {
			double all = 0;
			fprintf(f, "| %s | %d |", lab, layer[l]);
			for (int h = 0; h < n_h; h++) {
				if (h < nh) {
					fprintf(f, " %.3f |", sum[l * nh + h] / n);
					all += sum[l * nh + h] / n;
				} else {
					fprintf(f, " - |");
				}
			}
			fprintf(f, " %.3f |\n", all / nh);
		}
	}
	if (head_shown)
		fputc('\n', f);
}

/* Memory against length: mean resident, host and full KV bytes. */
static void table_memory(FILE *f, const struct eval_recs *v)
{
	struct eval_group g[MAX_GROUPS];
	double len[EVAL_MAX_AXIS];
	int n_g = eval_groups(v, EVAL_NIAH, g, MAX_GROUPS), n_l = eval_axis(v, EVAL_NIAH, NULL, 0, len);
	char lab[48];

	if (!n_g)
		return;
	fprintf(f, "## Memory\n\nMeans over the niah answers, MiB (resident: peak device-tier KV over an "
		"answer; host: SeKV factors; disk: the stored document as `sekv ingest` keeps it, "
		"without the exact KV kept for the references):\n\n"
		"| method | length | resident | full KV | resident ratio | host | disk | prefill tok/s |\n"
		"|---|---:|---:|---:|---:|---:|---:|---:|\n");
	for (int k = 0; k < n_g; k++) {
		eval_group_label(&g[k], lab, sizeof lab);
		for (int l = 0; l < n_l; l++) {
			double res = 0, full = 0, host = 0, disk = 0, tps = 0;
			int n = 0;
			for (int i = 0; i < v->n; i++) {
				const struct eval_rec *r = &v->r[i];
				if (r->task != EVAL_NIAH || !eval_in_group(r, &g[k]) || r->length != len[l] ||
				    r->full_kv_bytes <= 0)
					continue;
				res += r->resident_bytes;
				full += r->full_kv_bytes;
				host += r->host_bytes;
				disk += r->disk_bytes;
				tps += r->prefill_tps;
				n++;
			}
			if (!n)
				continue;
			fprintf(f, "| %s | %.0f | %.2f | %.2f | %.4f | %.2f | %.2f | %.0f |\n", lab, len[l],
				res / n / 1048576.0, full / n / 1048576.0, res / full, host / n / 1048576.0,
				disk / n / 1048576.0, tps / n);
		}
	}
	fputc('\n', f);
}

/* What the device tier held, by kind of row, as shares of the budget:
 * means over every SeKV answer of a method and budget (any task). */
static void table_tier(FILE *f, const struct eval_recs *v)
{
	struct eval_group g[MAX_GROUPS];
	int n_g = eval_groups(v, -1, g, MAX_GROUPS), shown = 0;
	char lab[48];

	for (int k = 0; k < n_g; k++) {
		double sum[EVAL_TIER_N] = { 0 }, bud = 0;
		int n = 0;
		for (int i = 0; i < v->n; i++) {
			const struct eval_rec *r = &v->r[i];
			if (!eval_in_group(r, &g[k]) || !isfinite(r->tier[0]) || r->full_kv_bytes <= 0 ||
			    r->budget <= 0 || r->budget >= 1)
				continue;
			for (int t = 0; t < EVAL_TIER_N; t++)
				sum[t] += isfinite(r->tier[t]) ? r->tier[t] : 0;
			bud += r->budget * r->full_kv_bytes;
			n++;
		}
		if (!n || bud <= 0)
			continue;
		if (!shown++) {
			fprintf(f, "## Device tier\n\nWhat SeKV's device tier held at each answer's peak, "
				"by kind of row, percent of the budget (means over its answers; "
				"over 100: the budget was exceeded):\n\n| method | answers |");
			for (int t = 0; t < EVAL_TIER_N; t++)
				fprintf(f, " %s |", app_tier_name[t]);
			fprintf(f, " total |\n|---|---:|");
			for (int t = 0; t <= EVAL_TIER_N; t++)
				fprintf(f, "---:|");
			fputc('\n', f);
		}
		double tot = 0;
		eval_group_label(&g[k], lab, sizeof lab);
		fprintf(f, "| %s | %d |", lab, n);
		for (int t = 0; t < EVAL_TIER_N; t++) {
			fprintf(f, " %.1f |", 100 * sum[t] / bud);
			tot += sum[t];
		}
		fprintf(f, " %.1f |\n", 100 * tot / bud);
	}
	if (shown)
		fputc('\n', f);
}

/* The kind of a note: its text up to the first digit (notes differ in
 * their numbers only, answer by answer). */
static size_t note_kind(const char *note)
{
	return strcspn(note, "0123456789");
}

/* Records i and k: same method, budget, length and kind of note. */
static int same_note(const struct eval_rec *a, const struct eval_rec *b)
{
	size_t n = note_kind(a->note);
	return !strcmp(a->method, b->method) && !strcmp(a->router, b->router) && a->budget == b->budget &&
	       a->length == b->length && n == note_kind(b->note) && !strncmp(a->note, b->note, n);
}

/* Each kind of note once per method, budget and length, with how many
 * records carry it, and the first one's text. */
static void notes(FILE *f, const struct eval_recs *v)
{
	int shown = 0;
	for (int i = 0; i < v->n; i++) {
		const struct eval_rec *r = &v->r[i];
		char lab[48];
		struct eval_group g = { { 0 }, { 0 }, r->budget };
		int k = i, count = 0;
		if (!r->note[0])
			continue;
		while (--k >= 0 && !(v->r[k].note[0] && same_note(&v->r[k], r)))
			;
		if (k >= 0)
			continue;
		for (int j = i; j < v->n; j++)
			count += v->r[j].note[0] && same_note(&v->r[j], r);
		if (!shown++)
			fprintf(f, "## Notes\n\nOne line per method, length and kind of note (the first record's words; "
				"the count of records with it):\n\n");
		snprintf(g.method, sizeof g.method, "%s", r->method);
		snprintf(g.router, sizeof g.router, "%s", r->router);
		eval_group_label(&g, lab, sizeof lab);
		fprintf(f, "- %s, length %d, %d record%s: ", lab, r->length, count, count == 1 ? "" : "s");
		app_print_inert(f, r->note, strlen(r->note));
		fputc('\n', f);
	}
	if (shown)
		fputc('\n', f);
}

static const char *const ABOUT[EVAL_N_TASK] = {
	"one needle per haystack; accuracy: the answer contains the needle's value",
	"ten facts in one haystack, each asked in a fresh conversation",
	"two needles; the second question follows the first answer in one conversation",
	"the full-KV answer teacher-forced through each method: mean KL(p_full || p_method) in nats "
	"and top-1 agreement over its tokens",
	"share of the exact attention mass on exact and zoomed rows (SeKV memories): overall, over "
	"layers, heads and answer steps, then per global layer and query head; attn_err: the "
	"attention output's relative error against exact attention, over the same; mass_oracle: the "
	"mass the budget's bytes would hold as the rows with the most exact attention (per layer and "
	"KV head, after the question and answer rows): mass_recall's ceiling for any method that keeps rows",
	"one needle whose value is a digit string or a code, asked back: are rows rebuilt from the "
	"memory exact enough to copy every digit",
	"multi-key: four needles of one kind of key, one of them asked; the others are distractors",
	"multi-value: one key with four values, all four to be returned",
	"multi-query: four needles, all four keys asked in one question",
	"variable tracking: a chain of five assignments (VAR B = VAR A, ...) from one number; every "
	"variable that holds it to be named",
	"common words: a numbered list of made-up words; the ten most common to be named",
	"frequent words: coded text whose word counts follow Zipf's law; the three most frequent to be named",
	"questions with known answers over documents of this machine (the document is the haystack)",
};

int eval_write_md(const struct eval_recs *v, const char *path, const char *header,
		  const char *const *png, int n_png, char *err, size_t errlen)
{
	FILE *f = fopen(path, "wb");

	if (!f)
		return sekv_errf(err, errlen, SEKV_EIO, "eval: %s: %s", path, strerror(errno));
	fprintf(f, "# sekv eval\n\n");
	if (header)
		fprintf(f, "%s\n\n", header);
	fprintf(f, "Accuracy: share of answers that contain the expected value (case-sensitive; probes: "
		"every expected item, none inside a longer word or number; cwe and fwe ignore case). "
		"Agreement: accuracy over the questions full KV answers right. Score: share of the expected "
		"items an answer holds. Same answer as full: the answer's text is full KV's to the same "
		"question. Resident ratio: peak device-tier KV bytes over an answer / full KV bytes. "
		"`-`: not measured.\n\n");
	eval_write_overview(f, v);
	for (int t = 0; t < EVAL_N_TASK; t++) {
		int any = 0;
		for (int i = 0; i < v->n && !any; i++)
			any = v->r[i].task == t;
		if (!any)
			continue;
		fprintf(f, "## %s\n\n%s.\n\n", eval_task_name(t), ABOUT[t]);
		if (t >= EVAL_FIRST_PROBE)
			table_probe(f, v, t);
		else
			table_summary(f, v, t);
		if (t == EVAL_NIAH || t == EVAL_COPY || t == EVAL_MK)
			table_grid(f, v, t);
		if (t == EVAL_SECOND)
			table_second(f, v);
		if (t == EVAL_MASS)
			table_mass_lh(f, v);
	}
	table_memory(f, v);
	table_tier(f, v);
	if (n_png > 0) {
		fprintf(f, "## Plots\n\n");
		for (int i = 0; i < n_png; i++)
			fprintf(f, "![%s](%s)\n", png[i], png[i]);
		fputc('\n', f);
	}
	notes(f, v);
	if (ferror(f) | fclose(f))
		return sekv_errf(err, errlen, SEKV_EIO, "eval: %s: write failed", path);
	return 0;
}
