/* test_integration.c - the whole path with the real model: ingest the
 * bundled sample (~9,200 tokens) into a fresh library, then answer from the
 * stored memory. The ingest runs once (first test) and later tests reuse
 * the document; each test still fails on its own when the ingest failed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <sqlite3.h>

#include "app/app.h"
#include "app/session.h"
#include "engine/conv/conv.h"
#include "engine/base/clock.h"
#include "engine/base/err.h"
#include "engine/model/model.h"
#include "engine/sekv/sekv.h"
#include "engine/tok/tokenizer.h"
#include "store/store.h"
#include "tests/test.h"

#define SAMPLE "assets/samples/gnu-gpl-3-and-lgpl-3.txt"

static int64_t g_doc;      /* ingested document, 0 until done */
static double g_prefill_s; /* as stored */
static char g_db[512];

static void base_opts(struct app_opts *o)
{
	char err[256];
	app_opts_parse(o, 0, NULL, err, sizeof err);
	snprintf(o->model, sizeof o->model, "%s", test_model_path());
	snprintf(o->db, sizeof o->db, "%s", g_db);
	o->quiet = 1;
}

/* Deletes every H2O score row of the library at path (as a library from
 * before they were stored has none); the SQLite code. */
static int raw_delete_scores(const char *path)
{
	sqlite3 *db = NULL;
	int rc = sqlite3_open(path, &db);

	if (rc == SQLITE_OK)
		rc = sqlite3_exec(db, "DELETE FROM h2o_score", NULL, NULL, NULL);
	sqlite3_close(db);
	return rc;
}

static void integration_ingest_sample(struct test_ctx *t)
{
	struct app_opts o;
	struct store *st = NULL;
	struct store_doc d;
	char err[1024];

	T_CHECKF(t, access(test_model_path(), R_OK) == 0, "model %s missing (make model)", test_model_path());
	snprintf(g_db, sizeof g_db, "%s/library.db", test_tmpdir());
	base_opts(&o);
	/* rank 256 >= d_h: the stored factors can rebuild spans exactly, which
	 * the full-budget equivalence test below relies on; other tests use
	 * --rmax 32 at ask time. No rank gate, so every component is stored. */
	o.r_max = 256;
	o.rank_energy = 0;
	/* the methods below are compared on this one prefill, as sekv eval does */
	o.keep_full_kv = 1;
	int rc = app_ingest(&o, SAMPLE, NULL, NULL, &g_doc, err, sizeof err);
	T_CHECKF(t, rc == 0, "ingest: %s", err);
	T_CHECK(t, store_open(&st, g_db, err, sizeof err) == 0);
	rc = store_doc_get(st, g_doc, &d, err, sizeof err);
	store_close(st);
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECK(t, d.state == STORE_DOC_READY);
	T_CHECKF(t, d.n_tok > 9000 && d.n_tok < 9400, "n_tok %lld", (long long)d.n_tok);
	T_CHECKF(t, d.prefill_s > 0, "prefill_s %f", d.prefill_s);
	g_prefill_s = d.prefill_s;
}

/* The sample document, ingested by the first test that needs it, so any
 * one test (bin/sekv-tests PATTERN) runs on its own. 1 when it is there. */
static int sample_doc(struct test_ctx *t)
{
	if (g_doc <= 0)
		integration_ingest_sample(t);
	return g_doc > 0;
}

static int ask(struct test_ctx *t, struct app_opts *o, const char *q, struct conv_answer *a,
	       struct session_info *info, long long *n_eval)
{
	struct model *m = NULL;
	struct tok *tk = NULL;
	struct session *s = NULL;
	char err[1024];
	int rc = app_load(o, &m, &tk, err, sizeof err);
	if (!rc)
		rc = session_open(&s, m, tk, o, g_doc, err, sizeof err);
	if (rc) {
		T_FAIL(t, "session_open: %s", err);
		tok_close(tk);
		model_close(m);
		return rc;
	}
	long long e0 = model_n_eval(m);
	rc = conv_ask(session_conv(s), q, NULL, NULL, a, err, sizeof err);
	if (rc)
		T_FAIL(t, "conv_ask: %s", err);
	if (n_eval)
		*n_eval = model_n_eval(m) - e0;
	if (info) {
		session_get_info(s, info);
		info->mem = NULL;
		info->tokens = NULL;
		info->layer_id = NULL;
		info->title = info->model_name = NULL;
	}
	session_close(s);
	tok_close(tk);
	model_close(m);
	return rc;
}

static void integration_ask_without_document_forward(struct test_ctx *t)
{
	struct app_opts o;
	struct conv_answer a;
	struct session_info in;
	long long n_eval = 0;

	T_CHECK(t, sample_doc(t));
	base_opts(&o);
	o.n_predict = 24;
	o.r_max = 32;
	o.r_max_set = 1;
	if (ask(t, &o, "What is this document about?", &a, &in, &n_eval))
		return;
	int ok_eval = n_eval == a.n_question + a.n_gen;
	int n_gen = a.n_gen;
	double resume = in.resume_s;
	conv_answer_free(&a);
	/* every forward position is a question or answer token: none of the
	 * ~9,200 document tokens went through the model again */
	T_CHECKF(t, ok_eval, "forward positions %lld != question + answer", n_eval);
	T_CHECK(t, n_gen > 0);
	T_CHECKF(t, resume < g_prefill_s / 5, "resume %.3fs vs prefill %.3fs", resume, g_prefill_s);
}

static void integration_sekv_full_budget_equals_full_kv(struct test_ctx *t)
{
	struct app_opts o;
	struct conv_answer full, sk;
	const char *q = "Summarize the conditions for conveying modified source versions.";

	T_CHECK(t, sample_doc(t));
	/* fp32 activations on both sides: int8 rounding flips from last-bit
	 * differences would make greedy paths part for reasons other than
	 * the memory */
	base_opts(&o);
	o.n_predict = 32;
	o.act_f32 = 1;
	o.kv = APP_KV_FULL;
	if (ask(t, &o, q, &full, NULL, NULL))
		return;
	base_opts(&o);
	o.n_predict = 32;
	o.act_f32 = 1;
	o.budget = 1.0;
	o.budget_set = 1;
	o.r_max = 256;
	o.r_max_set = 1;
	if (ask(t, &o, q, &sk, NULL, NULL)) {
		conv_answer_free(&full);
		return;
	}
	int same = full.n_gen == sk.n_gen && !memcmp(full.ids, sk.ids, (size_t)full.n_gen * sizeof *full.ids);
	int first_diff = -1;
	for (int i = 0; i < full.n_gen && i < sk.n_gen && first_diff < 0; i++)
		if (full.ids[i] != sk.ids[i])
			first_diff = i;
	int n_full = full.n_gen, n_sk = sk.n_gen, same_end = full.stopped == sk.stopped;
	conv_answer_free(&full);
	conv_answer_free(&sk);
	/* the stop rules may end the answer before -n: enough tokens to compare */
	T_CHECKF(t, n_full >= 8, "full answer has %d tokens", n_full);
	T_CHECK(t, same_end);
	T_CHECKF(t, same, "sekv (%d tokens) differs from full (%d) at token %d", n_sk, n_full, first_diff);
}

static void integration_budget_respected(struct test_ctx *t)
{
	struct app_opts o;
	struct conv_answer a;
	struct session_info in;

	T_CHECK(t, sample_doc(t));
	base_opts(&o);
	o.n_predict = 24;
	o.r_max = 32;
	o.r_max_set = 1;
	if (ask(t, &o, "Which version of the license applies?", &a, &in, NULL))
		return;
	size_t peak = a.peak_resident_bytes;
	double zpt = a.zoom_per_token;
	float q[3] = { a.alpha_q[0], a.alpha_q[1], a.alpha_q[2] };
	conv_answer_free(&a);
	T_CHECKF(t, peak <= in.full_kv_bytes / 10 + 1, "resident %zu > 10%% of %zu", peak, in.full_kv_bytes);
	T_CHECKF(t, zpt > 0, "no span zoomed (%.2f per token)", zpt);
	T_CHECK(t, in.host_bytes > 0);
	/* alpha_S (a share of the head's attention) spreads below 1 */
	T_CHECKF(t, q[0] > 0 && q[0] <= q[1] && q[1] <= q[2] && q[2] < 0.9f,
		 "alpha_S percentiles %g %g %g", q[0], q[1], q[2]);
}

/* With the exact keys read (--mass-recall), an answer's mass_recall per
 * global layer and query head lies in [0, 1] and its mean is the overall
 * mass_recall (every layer decodes each step once). */
static void integration_mass_recall_per_layer_head(struct test_ctx *t)
{
	struct app_opts o;
	struct conv_answer a;
	struct session_info in;
	double mean = 0, lo = 1, hi = 0;

	T_CHECK(t, sample_doc(t));
	base_opts(&o);
	o.n_predict = 8;
	o.r_max = 32;
	o.r_max_set = 1;
	o.mass_recall = 1;
	if (ask(t, &o, "Which version of the license applies?", &a, &in, NULL))
		return;
	int n = in.n_layer * in.n_head;
	for (int i = 0; a.mass_recall_lh && i < n; i++) {
		double x = a.mass_recall_lh[i];
		mean += x / n;
		lo = x < lo ? x : lo;
		hi = x > hi ? x : hi;
	}
	double overall = a.mass_recall;
	int have = a.mass_recall_lh != NULL;
	conv_answer_free(&a);
	T_CHECKF(t, have && overall >= 0, "no mass_recall per layer and head");
	T_CHECKF(t, lo >= 0 && hi <= 1 + 1e-9, "a (layer, head) out of [0, 1]: %g .. %g", lo, hi);
	T_CHECKF(t, hi > lo, "every (layer, head) the same: %g", lo);
	T_CHECKF(t, fabs(mean - overall) < 1e-9, "mean %.9f, overall %.9f", mean, overall);
}

static void cli_ask_json_fields(struct test_ctx *t)
{
	char cmd[2048];

	T_CHECK(t, sample_doc(t));
	snprintf(cmd, sizeof cmd, "%s ask %lld 'Who is the licensor?' --db %s -m %s -n 12 --rmax 32 --json 2>/dev/null",
		 test_sekv_bin(), (long long)g_doc, g_db, test_model_path());
	int status;
	char *out = test_run_cmd(cmd, &status);
	T_CHECKF(t, out != NULL && status == 0, "command failed (%d): %s", status, cmd);
	cJSON *j = cJSON_Parse(out);
	free(out);
	T_CHECK(t, j != NULL);
	const char *keys[] = { "answer", "prefill_s", "resume_s", "decode_tps", "resident_bytes",
			       "full_kv_bytes", "host_bytes", "zoomed_spans" };
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
		if (!cJSON_GetObjectItem(j, keys[i])) {
			T_FAIL(t, "--json lacks %s", keys[i]);
			cJSON_Delete(j);
			return;
		}
	cJSON *z = cJSON_GetObjectItem(j, "zoomed_spans");
	int ok = cJSON_IsArray(z) && cJSON_GetArraySize(z) > 0 &&
		 cJSON_GetObjectItem(cJSON_GetArrayItem(z, 0), "text") &&
		 cJSON_GetObjectItem(j, "prefill_s")->valuedouble == 0.0 &&
		 cJSON_IsString(cJSON_GetObjectItem(j, "answer"));
	cJSON_Delete(j);
	T_CHECK(t, ok);
}

/* `ask --json` on the sample with --kv method (extra options appended);
 * the parsed object, or NULL after recording the failure. */
static cJSON *ask_json_kv(struct test_ctx *t, const char *method, const char *extra)
{
	char cmd[2048];
	int status;

	snprintf(cmd, sizeof cmd, "%s ask %lld 'Who may convey copies?' --db %s -m %s -n 12 -q --json "
		 "--no-evidence --kv %s %s 2>&1", test_sekv_bin(), (long long)g_doc, g_db,
		 test_model_path(), method, extra);
	char *out = test_run_cmd(cmd, &status);
	cJSON *j = out && status == 0 ? cJSON_Parse(out) : NULL;
	if (!j)
		T_FAIL(t, "--kv %s: exit %d: %.400s", method, status, out ? out : "");
	free(out);
	return j;
}

static double jnum(const cJSON *j, const char *key)
{
	const cJSON *x = cJSON_GetObjectItem(j, key);
	return cJSON_IsNumber(x) ? x->valuedouble : -1;
}

/* Every rival answers through the CLI at the document's budget (10%):
 * the method is named, its device bytes (kept rows or metadata and
 * pages, plus the conversation) are within the budget and above the part
 * it always holds; SnapKV says its question turn read every row, Quest
 * keeps every row in the host tier, ShadowKV the values and says its
 * rank, and the summary rival never zooms. */
static void cli_ask_every_rival_within_budget(struct test_ctx *t)
{
	const char *rivals[] = { "streaming", "snapkv", "h2o", "quest", "summary", "shadowkv" };

	T_CHECK(t, sample_doc(t));
	for (size_t i = 0; i < sizeof rivals / sizeof *rivals; i++) {
		cJSON *j = ask_json_kv(t, rivals[i], "");
		if (!j)
			return;
		const cJSON *m = cJSON_GetObjectItem(j, "method"), *note = cJSON_GetObjectItem(j, "note");
		const cJSON *router = cJSON_GetObjectItem(j, "router");
		double res = jnum(j, "resident_bytes"), full = jnum(j, "full_kv_bytes");
		double fixed = jnum(j, "static_bytes"), host = jnum(j, "host_bytes");
		int named = cJSON_IsString(m) && !strcmp(m->valuestring, rivals[i]) && jnum(j, "budget") == 0.1 &&
			    cJSON_IsString(cJSON_GetObjectItem(j, "answer"));
		int bytes = full > 0 && fixed > 0 && res > fixed && res <= 0.1 * full + 1;
		int own = 1;
		if (!strcmp(rivals[i], "snapkv"))
			own = cJSON_IsString(note) && strstr(note->valuestring, "question is read over all");
		else if (!strcmp(rivals[i], "quest"))
			own = host == full;
		else if (!strcmp(rivals[i], "shadowkv"))
			own = host == full / 2 && cJSON_IsString(note) && strstr(note->valuestring, "key factors of rank");
		else if (!strcmp(rivals[i], "summary"))
			own = cJSON_IsString(router) && !strcmp(router->valuestring, "none") &&
			      jnum(j, "zoom_per_token") == 0 && jnum(j, "n_compressed") > 0;
		else
			own = !router && host == 0;
		cJSON_Delete(j);
		T_CHECKF(t, named && bytes && own, "--kv %s: named %d, resident %.0f / fixed %.0f of %.0f, own %d",
			 rivals[i], named, res, fixed, full, own);
	}
}

/* Ingest stored H2O's scores from the prefill's attention: for every
 * global layer and KV head, each of the document's tokens spreads one
 * unit of attention per query head of the group (so the scores sum to
 * n_tok x group), all non-negative, and the first position (the sink)
 * draws more than the average. */
static void integration_h2o_scores_are_prefill_attention(struct test_ctx *t)
{
	struct store *st = NULL;
	struct store_doc d;
	float *score = NULL;
	int n_tok = 0;
	char err[512];

	struct model *m = NULL;

	T_CHECK(t, sample_doc(t));
	T_CHECKF(t, model_open(&m, test_model_path(), 1, err, sizeof err) == 0, "%s", err);
	int n_head = model_hparams(m)->n_head;
	model_close(m);
	T_CHECKF(t, store_open(&st, g_db, err, sizeof err) == 0 && store_doc_get(st, g_doc, &d, err, sizeof err) == 0 &&
		 store_doc_get_h2o(st, g_doc, &score, &n_tok, err, sizeof err) == 0, "%s", err);
	store_close(st);
	int group = n_head / d.n_head_kv, ok = n_tok == d.n_tok;
	for (int s = 0; ok && s < d.n_layer_global * d.n_head_kv; s++) {
		const float *x = score + (size_t)s * n_tok;
		double sum = 0;
		for (int i = 0; i < n_tok; i++) {
			ok &= x[i] >= 0;
			sum += x[i];
		}
		if (!ok || fabs(sum - (double)n_tok * group) > 1e-3 * n_tok * group || x[0] <= sum / n_tok) {
			T_FAIL(t, "layer %d KV head %d: sum %.2f for %d tokens x %d heads, sink %.2f", s / d.n_head_kv,
			       s % d.n_head_kv, sum, n_tok, group, x[0]);
			ok = 0;
		}
	}
	free(score);
	T_CHECK(t, ok);
}

/* A document ingested before H2O's scores were stored: --kv h2o refuses
 * it, saying to ingest it again (the row is deleted behind the store's
 * back, as an older library has none); the other methods still answer. */
static void cli_ask_h2o_without_scores_says_ingest_again(struct test_ctx *t)
{
	struct app_opts o;
	char path[512], db[512], err[1024], cmd[2048];
	int64_t id = 0;
	int st1, st2;

	snprintf(path, sizeof path, "%s/noscores.txt", test_tmpdir());
	snprintf(db, sizeof db, "%s/noscores.db", test_tmpdir());
	T_CHECK(t, test_write_file(path, "The lighthouse keeper counts ships every night.\n", 48) == 0);
	base_opts(&o);
	snprintf(o.db, sizeof o.db, "%s", db);
	T_CHECKF(t, app_ingest(&o, path, NULL, NULL, &id, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, raw_delete_scores(db) == SQLITE_OK);
	snprintf(cmd, sizeof cmd, "%s ask %lld 'What does the keeper count?' --db %s -m %s -n 4 -q --no-evidence "
		 "--kv h2o 2>&1", test_sekv_bin(), (long long)id, db, test_model_path());
	char *out = test_run_cmd(cmd, &st1);
	int said = out && st1 != 0 && strstr(out, "no H2O scores") && strstr(out, "ingest it again");
	T_CHECKF(t, said, "exit %d: %s", st1, out ? out : "");
	free(out);
	snprintf(cmd, sizeof cmd, "%s ask %lld 'What does the keeper count?' --db %s -m %s -n 4 -q --no-evidence "
		 "--kv streaming 2>&1", test_sekv_bin(), (long long)id, db, test_model_path());
	out = test_run_cmd(cmd, &st2);
	free(out);
	T_CHECKF(t, st2 == 0, "--kv streaming on the same document: exit %d", st2);
}

/* Quest's page metadata takes 1/16 of the full KV: a budget that leaves
 * no page beside it and the conversation's reserve is refused naming the
 * smallest budget that holds one, and that budget answers: its fixed part
 * (metadata and a page) within it, the conversation too or the answer
 * warns that it goes over (as SeKV at its fixed part). */
static void cli_ask_quest_budget_below_metadata_refused(struct test_ctx *t)
{
	char cmd[2048], extra[64];
	int status;
	double fit = 0;

	T_CHECK(t, sample_doc(t));
	snprintf(cmd, sizeof cmd, "%s ask %lld 'Who may convey copies?' --db %s -m %s -n 12 -q --no-evidence "
		 "--kv quest --budget 0.05 2>&1", test_sekv_bin(), (long long)g_doc, g_db, test_model_path());
	char *out = test_run_cmd(cmd, &status);
	const char *hint = out ? strstr(out, "--budget ") : NULL;
	int parsed = hint && sscanf(hint, "--budget %lf or more", &fit) == 1;
	T_CHECKF(t, out && status != 0 && parsed && fit > 0.0625 && fit < 0.1, "exit %d: %s", status,
		 out ? out : "");
	free(out);
	snprintf(extra, sizeof extra, "--budget %.4f", fit);
	cJSON *j = ask_json_kv(t, "quest", extra);
	if (!j)
		return;
	double res = jnum(j, "resident_bytes"), full = jnum(j, "full_kv_bytes"), fixed = jnum(j, "static_bytes");
	cJSON *w = cJSON_GetObjectItem(j, "warning");
	int warned = cJSON_IsString(w) && strstr(w->valuestring, "over the budget") != NULL;
	cJSON_Delete(j);
	/* the warning says what happened: given exactly when the peak went over */
	T_CHECKF(t, fixed > full / 16 && fixed <= fit * full && res > fixed && (res <= fit * full + 1) == !warned,
		 "resident %.0f (fixed %.0f) of %.0f at budget %.4f, warned %d", res, fixed, full, fit, warned);
}

/* A memory fitted with the default (k8v4) device rows asked with
 * --device-rows f16 at a budget its fixed part fits and its fp16 one does
 * not: refused naming the rows that fit and the rebuild, never answered
 * with nothing zoomable. */
static void cli_ask_f16_rows_on_smaller_rows_memory_refused(struct test_ctx *t)
{
	char cmd[2048], extra[64];
	int status;

	T_CHECK(t, sample_doc(t));
	cJSON *j = ask_json_kv(t, "sekv", "");
	if (!j)
		return;
	double fixed = jnum(j, "static_bytes"), full = jnum(j, "full_kv_bytes");
	cJSON_Delete(j);
	T_CHECKF(t, fixed > 0 && full > 0, "static %.0f, full %.0f", fixed, full);
	if (fixed <= 0 || full <= 0)
		return;
	/* fp16 rows take 256/108 of k8v4's bytes: 1.2x the k8v4 part lies between */
	snprintf(extra, sizeof extra, "--budget %.5f", 1.2 * fixed / full);
	j = ask_json_kv(t, "sekv", extra);
	T_CHECK(t, j != NULL);
	cJSON_Delete(j);
	snprintf(cmd, sizeof cmd, "%s ask %lld 'Who may convey copies?' --db %s -m %s -n 4 -q --no-evidence "
		 "--device-rows f16 %s 2>&1", test_sekv_bin(), (long long)g_doc, g_db, test_model_path(), extra);
	char *out = test_run_cmd(cmd, &status);
	T_CHECKF(t, out && status != 0 && strstr(out, "--rebuild") && strstr(out, "--device-rows f16") &&
		 strstr(out, "ask with --device-rows "),
		 "exit %d: %s", status, out ? out : "");
	free(out);
}

/* A document full of terminal escapes (OSC 52 clipboard write, OSC 0
 * title, C1 CSI, DEL): whatever ask quotes from it, as text or as JSON,
 * reaches stdout without a byte that could drive the terminal. */
static void cli_ask_output_inert(struct test_ctx *t)
{
	struct app_opts o;
	char path[512], db[512], err[1024], cmd[2048];
	int64_t id = 0;
	int st1, st2;
	FILE *f;

	snprintf(path, sizeof path, "%s/escapes.txt", test_tmpdir());
	snprintf(db, sizeof db, "%s/escapes.db", test_tmpdir());
	T_CHECK(t, (f = fopen(path, "w")) != NULL);
	for (int i = 1; i <= 40; i++)
		fprintf(f, "Record %d: the code word is \x1b]52;c;cHduZWQ=\x07 then \x1b]0;owned\x07"
			" and \xc2\x9b" "31m red \x7f end.\n", i);
	fclose(f);
	base_opts(&o);
	snprintf(o.db, sizeof o.db, "%s", db);
	T_CHECKF(t, app_ingest(&o, path, NULL, NULL, &id, err, sizeof err) == 0, "%s", err);
	snprintf(cmd, sizeof cmd, "%s ask %lld 'What is the code word of record 17?' --db %s -m %s -n 24 -q 2>/dev/null",
		 test_sekv_bin(), (long long)id, db, test_model_path());
	char *plain = test_run_cmd(cmd, &st1);
	strcat(cmd, " --json");
	char *json = test_run_cmd(cmd, &st2);
	cJSON *j = json ? cJSON_Parse(json) : NULL;
	int ok = plain && json && st1 == 0 && st2 == 0 && j && !test_has_controls(plain, strlen(plain)) &&
		 !test_has_controls(json, strlen(json));
	int quoted = ok && (strstr(plain, "]52;c;") || strstr(json, "]52;c;"));
	/* the stored session quotes the evidence passages: export is inert too */
	cJSON *sid = j ? cJSON_GetObjectItem(j, "session") : NULL;
	char *md = NULL;
	int st3 = -1;
	if (ok && cJSON_IsNumber(sid)) {
		snprintf(cmd, sizeof cmd, "%s export %lld --db %s 2>/dev/null", test_sekv_bin(),
			 (long long)sid->valuedouble, db);
		md = test_run_cmd(cmd, &st3);
	}
	ok = ok && md && st3 == 0 && strstr(md, "Evidence") && !test_has_controls(md, strlen(md));
	free(md);
	cJSON_Delete(j);
	if (!ok)
		T_FAIL(t, "exit %d/%d/%d, text: %.200s\njson: %.300s", st1, st2, st3, plain ? plain : "",
		       json ? json : "");
	free(plain);
	free(json);
	if (!ok)
		return;
	if (!quoted)
		T_SKIP(t, "the model quoted none of the document's escapes: nothing reached the output to check");
}

/* Every answer of ask is stored as a session turn with its evidence:
 * `sessions` lists it, `export` writes the question, the answer and each
 * passage quoted from the stored text at its byte range, and
 * `rm --session` deletes it. */
static void cli_ask_stores_session_and_exports_it(struct test_ctx *t)
{
	char cmd[1024], want[128], *text = NULL;
	size_t text_len = 0;
	struct store *st = NULL;
	int status;

	T_CHECK(t, sample_doc(t));
	snprintf(cmd, sizeof cmd, "%s ask %lld 'Who publishes this License?' --db %s -m %s -n 16 -q --json",
		 test_sekv_bin(), (long long)g_doc, g_db, test_model_path());
	char *out = test_run_cmd(cmd, &status);
	cJSON *j = out ? cJSON_Parse(out) : NULL;
	cJSON *sid = j ? cJSON_GetObjectItem(j, "session") : NULL;
	cJSON *ans = j ? cJSON_GetObjectItem(j, "answer") : NULL;
	cJSON *ev = j ? cJSON_GetArrayItem(cJSON_GetObjectItem(j, "evidence"), 0) : NULL;
	free(out);
	if (!(status == 0 && cJSON_IsNumber(sid) && cJSON_IsString(ans) && ev)) {
		cJSON_Delete(j);
		T_FAIL(t, "ask --json: exit %d, no session, answer or evidence", status);
		return;
	}
	long long id = (long long)sid->valuedouble;
	int64_t a = (int64_t)cJSON_GetObjectItem(ev, "start")->valuedouble;
	int64_t b = (int64_t)cJSON_GetObjectItem(ev, "end")->valuedouble;
	cJSON *pos = cJSON_GetObjectItem(ev, "position");
	double position = cJSON_IsNumber(pos) ? pos->valuedouble : -1;
	char answer[512], quote[64];
	snprintf(answer, sizeof answer, "%s", ans->valuestring);
	cJSON_Delete(j);
	char err[512];
	T_CHECKF(t, store_open(&st, g_db, err, sizeof err) == 0 &&
		 store_doc_text_dup(st, g_doc, &text, &text_len, err, sizeof err) == 0, "%s", err);
	store_close(st);
	T_CHECK(t, a >= 0 && b > a && (size_t)b <= text_len);
	T_CHECKF(t, fabs(position - (double)a / (double)text_len) < 1e-9, "position %g", position);
	/* the passage's first word run, as export collapses white space */
	app_evidence_snippet(text, a, b, quote, 40);
	free(text);
	char *dots = strstr(quote, "...");
	if (dots)
		*dots = 0;

	snprintf(cmd, sizeof cmd, "%s sessions %lld --db %s", test_sekv_bin(), (long long)g_doc, g_db);
	out = test_run_cmd(cmd, &status);
	snprintf(want, sizeof want, "\n%lld\tdoc %lld\t", id, (long long)g_doc);
	char want0[128];
	snprintf(want0, sizeof want0, "%lld\tdoc %lld\t", id, (long long)g_doc);
	int listed = out && status == 0 && (strstr(out, want) || !strncmp(out, want0, strlen(want0))) &&
		     strstr(out, "1 turn\t");
	free(out);
	T_CHECKF(t, listed, "session %lld not listed", id);

	snprintf(cmd, sizeof cmd, "%s export %lld --db %s", test_sekv_bin(), id, g_db);
	out = test_run_cmd(cmd, &status);
	int exported = out && status == 0 && strstr(out, "## 1. Who publishes this License?") &&
		       strstr(out, answer) && strstr(out, "Evidence (retrieval heads ") && strstr(out, quote) &&
		       strstr(out, "% into the document), score ");
	T_CHECKF(t, exported, "export: exit %d, want answer \"%s\" and quote \"%s\":\n%.600s", status,
		 answer, quote, out ? out : "");
	free(out);

	snprintf(cmd, sizeof cmd, "%s rm --session %lld --db %s -q && %s export %lld --db %s 2>&1",
		 test_sekv_bin(), id, g_db, test_sekv_bin(), id, g_db);
	out = test_run_cmd(cmd, &status);
	int gone = out && status != 0 && strstr(out, "is not in");
	free(out);
	T_CHECK(t, gone);
}

static void cli_ls_lists_document(struct test_ctx *t)
{
	char cmd[1024], want[64];

	T_CHECK(t, sample_doc(t));
	snprintf(cmd, sizeof cmd, "%s ls --db %s", test_sekv_bin(), g_db);
	int status;
	char *out = test_run_cmd(cmd, &status);
	T_CHECKF(t, out != NULL && status == 0, "command failed (%d): %s", status, cmd);
	snprintf(want, sizeof want, "%lld\t", (long long)g_doc);
	int ok = strncmp(out, want, strlen(want)) == 0 && strstr(out, "gnu-gpl-3-and-lgpl-3.txt");
	free(out);
	T_CHECK(t, ok);
}

/* A conversation that outgrows the budget drops its oldest turns instead of
 * going over it, and keeps zooming. */
static void integration_multi_turn_stays_in_budget(struct test_ctx *t)
{
	struct app_opts o;
	struct model *m = NULL;
	struct tok *tk = NULL;
	struct session *s = NULL;
	struct conv_answer a;
	struct session_info in;
	char err[1024];
	const char *qs[] = { "Who may convey copies?", "What is the LGPL?", "What is the warranty?",
			     "What is a covered work?" };
	int evicted = 0, rows = 0, n_ans = 0;

	T_CHECK(t, sample_doc(t));
	base_opts(&o);
	o.n_predict = 120;
	o.r_max = 32;
	o.r_max_set = 1;
	T_CHECKF(t, app_load(&o, &m, &tk, err, sizeof err) == 0, "%s", err);
	if (session_open(&s, m, tk, &o, g_doc, err, sizeof err)) {
		tok_close(tk);
		model_close(m);
		T_FAIL(t, "%s", err);
		return;
	}
	session_get_info(s, &in);
	for (int i = 0; i < 4 && !t->failed; i++) {
		int rc = conv_ask(session_conv(s), qs[i], NULL, NULL, &a, err, sizeof err);
		size_t peak = a.peak_resident_bytes;
		double zpt = a.zoom_per_token;
		int n_gen = a.n_gen;
		evicted += a.n_evicted_turns;
		rows += a.n_question + a.n_gen;
		n_ans += a.n_gen > 0;
		conv_answer_free(&a);
		if (rc)
			T_FAIL(t, "turn %d: %s", i, err);
		else if (peak > in.full_kv_bytes / 10 + 1 || (n_gen > 0 && zpt <= 0))
			T_FAIL(t, "turn %d: resident %zu of %zu, %.2f zooms/token", i, peak, in.full_kv_bytes, zpt);
	}
	session_close(s);
	tok_close(tk);
	model_close(m);
	if (t->failed)
		return;
	/* the rows questions and answers may hold: half of what the budget
	 * leaves after the fixed part (engine/conv/conv.c); more than that in all
	 * must have evicted a turn, whatever the model chose to say */
	size_t row_bytes = in.full_kv_bytes / ((size_t)in.n_tok * in.n_layer);
	long long cap = (long long)((in.full_kv_bytes / 10 - in.static_bytes) / (row_bytes * in.n_layer)) / 2;
	T_CHECKF(t, n_ans >= 2, "only %d non-empty answers", n_ans);
	T_CHECKF(t, rows <= cap || evicted > 0, "%d rows held over 4 turns (cap %lld), none evicted", rows, cap);
}

/* A document whose stored fingerprint is not this model's is refused with a
 * message that says so (the fingerprint is changed behind the store's back,
 * as a library written by another model would have it). */
static void integration_other_model_refused(struct test_ctx *t)
{
	struct app_opts o;
	struct model *m = NULL;
	struct tok *tk = NULL;
	struct session *s = NULL;
	sqlite3 *db = NULL;
	char err[1024], path[512], dbp[512];
	int64_t id = 0;

	snprintf(path, sizeof path, "%s/small.txt", test_tmpdir());
	snprintf(dbp, sizeof dbp, "%s/other.db", test_tmpdir());
	FILE *f = fopen(path, "w");
	T_CHECK(t, f != NULL);
	fputs("The Harbor Street bakery opened in 1998. Its owner bakes rye bread at four.\n", f);
	fclose(f);
	base_opts(&o);
	snprintf(o.db, sizeof o.db, "%s", dbp);
	T_CHECKF(t, app_ingest(&o, path, NULL, NULL, &id, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, sqlite3_open(dbp, &db) == SQLITE_OK);
	int rc = sqlite3_exec(db, "UPDATE documents SET model_fp = '0123456789abcdef'", NULL, NULL, NULL);
	sqlite3_close(db);
	T_CHECK(t, rc == SQLITE_OK);
	T_CHECKF(t, app_load(&o, &m, &tk, err, sizeof err) == 0, "%s", err);
	rc = session_open(&s, m, tk, &o, id, err, sizeof err);
	session_close(s);
	tok_close(tk);
	model_close(m);
	T_CHECKF(t, rc == SEKV_EMISMATCH, "rc %d: %s", rc, err);
	T_CHECKF(t, strstr(err, "another model") != NULL, "%s", err);
}

/* A budget whose bytes fall below the memory's fixed part (1e-10 rounds
 * to 0 bytes, which would mean "no cap") is refused at open, naming the
 * smallest budget that fits; that budget opens, one step less does not. */
static void integration_budget_below_fixed_part_refused(struct test_ctx *t)
{
	struct app_opts o;
	struct model *m = NULL;
	struct tok *tk = NULL;
	struct session *s = NULL;
	char err[1024];
	double fit = 0;

	T_CHECK(t, sample_doc(t));
	base_opts(&o);
	o.budget = 1e-10;
	o.budget_set = 1;
	T_CHECKF(t, app_load(&o, &m, &tk, err, sizeof err) == 0, "%s", err);
	int rc = session_open(&s, m, tk, &o, g_doc, err, sizeof err);
	session_close(s);
	s = NULL;
	const char *hint = strstr(err, "--budget ");
	int parsed = hint && sscanf(hint, "--budget %lf or more", &fit) == 1;
	int rc_fit = -1, rc_less = -1;
	if (parsed) {
		o.budget = fit;
		rc_fit = session_open(&s, m, tk, &o, g_doc, err, sizeof err);
		session_close(s);
		s = NULL;
		o.budget = fit - 1e-4;
		rc_less = session_open(&s, m, tk, &o, g_doc, err, sizeof err);
		session_close(s);
	}
	tok_close(tk);
	model_close(m);
	T_CHECKF(t, rc == SEKV_EINVAL, "budget 1e-10 opened (rc %d)", rc);
	T_CHECKF(t, parsed && fit > 0 && fit < 1, "no budget named: %s", err);
	T_CHECKF(t, rc_fit == 0, "--budget %.4f refused: %s", fit, err);
	T_CHECKF(t, rc_less == SEKV_EINVAL, "--budget %.4f accepted", fit - 1e-4);
}

struct first_report {
	double t0, first; /* seconds (clk_now) */
	long long counted; /* bytes counted at the last report */
};

static void on_progress(void *ud, const struct app_ingest_progress *p)
{
	struct first_report *r = ud;
	if (r->first == 0)
		r->first = clk_now();
	if (!strcmp(p->stage, "count"))
		r->counted = p->done;
}

/* A document far longer than the model's context (4 MiB, about a million
 * tokens) is refused while counting, before any prefill or library write,
 * with both lengths named and the options that store it anyway; the
 * first progress report comes at once. */
static void ingest_refuses_document_longer_than_context(struct test_ctx *t)
{
	struct app_opts o;
	struct first_report r = {0};
	char err[1024], path[512], dbp[512];
	const char *words[] = { "harbor ", "street ", "bakery ", "opened ", "nineteen ", "rye ",
				"bread ", "four ", "morning ", "closed ", "Sunday ", "kettle\n" };
	int64_t id = 0;

	snprintf(path, sizeof path, "%s/long.txt", test_tmpdir());
	snprintf(dbp, sizeof dbp, "%s/long.db", test_tmpdir());
	FILE *f = fopen(path, "w");
	T_CHECK(t, f != NULL);
	for (long i = 0, n = 0; n < (4L << 20); i++) {
		const char *w = words[(i * 7 + i / 12) % 12];
		fputs(w, f);
		n += (long)strlen(w);
	}
	T_CHECK(t, fclose(f) == 0);
	base_opts(&o);
	snprintf(o.db, sizeof o.db, "%s", dbp);
	r.t0 = clk_now();
	int rc = app_ingest(&o, path, on_progress, &r, &id, err, sizeof err);
	double took = clk_now() - r.t0;
	T_CHECKF(t, rc == SEKV_EINVAL, "rc %d: %s", rc, err);
	T_CHECKF(t, strstr(err, "longer than the model's context") && strstr(err, "32768") &&
		 strstr(err, "4.0 MiB") && strstr(err, "--max-tokens") && strstr(err, "--split"), "%s", err);
	T_CHECKF(t, r.first > 0 && r.first - r.t0 < 2.0, "first progress after %.1fs", r.first - r.t0);
	T_CHECKF(t, r.counted < (1 << 20), "counted %lld bytes before refusing", r.counted);
	T_CHECKF(t, took < 30, "refused after %.1fs", took);
	T_CHECKF(t, access(dbp, F_OK) != 0, "a library was written: %s", dbp);
}

const struct test_case test_integration[] = {
	{ "integration_ingest_sample", integration_ingest_sample },
	{ "integration_ask_without_document_forward", integration_ask_without_document_forward },
	{ "integration_sekv_full_budget_equals_full_kv", integration_sekv_full_budget_equals_full_kv },
	{ "integration_budget_respected", integration_budget_respected },
	{ "integration_multi_turn_stays_in_budget", integration_multi_turn_stays_in_budget },
	{ "cli_ask_stores_session_and_exports_it", cli_ask_stores_session_and_exports_it },
	{ "integration_other_model_refused", integration_other_model_refused },
	{ "integration_budget_below_fixed_part_refused", integration_budget_below_fixed_part_refused },
	{ "ingest_refuses_document_longer_than_context", ingest_refuses_document_longer_than_context },
	{ "cli_ask_json_fields", cli_ask_json_fields },
	{ "integration_mass_recall_per_layer_head", integration_mass_recall_per_layer_head },
	{ "cli_ask_rival_every_method_within_budget", cli_ask_every_rival_within_budget },
	{ "integration_rival_h2o_scores_are_prefill_attention", integration_h2o_scores_are_prefill_attention },
	{ "cli_ask_rival_h2o_without_scores_says_ingest_again", cli_ask_h2o_without_scores_says_ingest_again },
	{ "cli_ask_rival_quest_budget_below_metadata_refused", cli_ask_quest_budget_below_metadata_refused },
	{ "cli_ask_f16_rows_on_smaller_rows_memory_refused", cli_ask_f16_rows_on_smaller_rows_memory_refused },
	{ "cli_ls_lists_document", cli_ls_lists_document },
	{ "cli_ask_output_inert", cli_ask_output_inert },
	{ NULL, NULL },
};
