/* test_eval.c - `sekv eval` (app/eval*.c, app/cmd_eval.c): haystacks have
 * the asked token length with each needle at its depth, deterministically;
 * KL and top-1 by hand; results.json, results.md and the PNGs read back;
 * and one small run of the command with the real model. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "app/app.h"
#include "app/eval.h"
#include "engine/conv/chat.h"
#include "engine/base/err.h"
#include "engine/base/sha256.h"
#include "engine/model/model.h"
#include "engine/tok/tokenizer.h"
#include "tests/eval_fixture.h"
#include "tests/test.h"

/* The decoded text of tokens [i, i + k) of v into buf. */
static void decode_at(const struct chat_tokvec *v, int i, int k, char *buf, size_t cap)
{
	char *s = tok_decode_dup(eval_fx_tok(), v->ids + i, i + k <= v->n ? k : v->n - i);
	snprintf(buf, cap, "%s", s ? s : "");
	free(s);
}

/* Every (length, depth): exactly the asked tokens as ingest counts them,
 * the needle's first token within a tolerance of the asked depth (2%, or
 * 64 tokens: half of a long legal sentence, the distance to the nearest
 * sentence boundary), and
 * the tokens from there decode to the needle's sentence. */
static void eval_hay_length_and_depth(struct test_ctx *t)
{
	static const int lens[] = { 512, 1024, 3000 };
	static const double depths[] = { 0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0 };
	struct eval_corpus c;
	struct chat_tokvec v = { 0 };
	char err[512], got[512];

	if (!eval_fx_load(t) || !eval_fx_corpus(t, &c))
		return;
	for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
		for (size_t di = 0; di < sizeof depths / sizeof *depths; di++) {
			struct eval_needle e;
			struct eval_hay h;
			eval_needles_make(eval_seed_mix(7, li, di), 1, &e);
			e.depth = depths[di];
			int rc = eval_hay_build(&h, &c, eval_fx_tok(), eval_fx_tmpl(), lens[li], 11 + li, &e, 1, err, sizeof err);
			int n = rc ? -1 : eval_fx_count(h.text, h.len, &v);
			double at = h.needle[0].depth_at, tol = fmax(0.02, 64.0 / lens[li]);
			got[0] = 0;
			if (!rc)
				decode_at(&v, h.needle[0].tok_at, 40, got, sizeof got);
			const char *p = got + strspn(got, " \n");
			int starts = !strncmp(p, e.sentence, strlen(p) < strlen(e.sentence) ? strlen(p)
									       : strlen(e.sentence));
			const char *s0 = rc ? NULL : strstr(h.text, e.sentence);
			int once = s0 && strstr(h.text, e.value) == s0 + (strstr(e.sentence, e.value) - e.sentence) &&
				   !strstr(s0 + strlen(e.sentence), e.value);
			eval_hay_free(&h);
			if (rc || n != lens[li] || fabs(at - depths[di]) > tol || !starts || !once) {
				T_FAIL(t, "length %d depth %.1f: rc %d %s, %d tokens, needle at %.3f, text there '%.60s'",
				       lens[li], depths[di], rc, rc ? err : "", n, at, p);
				break;
			}
		}
	}
	chat_tokvec_free(&v);
	eval_corpus_free(&c);
}

/* Several needles: ascending depths, each at its depth, all planted once. */
static void eval_hay_many_needles(struct test_ctx *t)
{
	struct eval_corpus c;
	struct eval_needle e[EVAL_MULTI_FACTS];
	struct eval_hay h;
	struct chat_tokvec v = { 0 };
	char err[512];

	if (!eval_fx_load(t) || !eval_fx_corpus(t, &c))
		return;
	eval_needles_make(99, EVAL_MULTI_FACTS, e);
	for (int i = 0; i < EVAL_MULTI_FACTS; i++)
		e[i].depth = (EVAL_MULTI_FACTS - i - 0.5) / EVAL_MULTI_FACTS; /* given in reverse */
	int rc = eval_hay_build(&h, &c, eval_fx_tok(), eval_fx_tmpl(), 2048, 5, e, EVAL_MULTI_FACTS, err, sizeof err);
	eval_corpus_free(&c);
	T_CHECKF(t, rc == 0, "%s", err);
	int n = eval_fx_count(h.text, h.len, &v), bad = -1;
	for (int i = 0; i < h.n_needle; i++) {
		const struct eval_needle *x = &h.needle[i];
		const char *s = strstr(h.text, x->sentence);
		if (!s || strstr(s + 1, x->sentence) || fabs(x->depth_at - x->depth) > 0.03 ||
		    (i && x->depth <= h.needle[i - 1].depth))
			bad = i;
	}
	double d0 = h.needle[0].depth, at0 = h.needle[bad < 0 ? 0 : bad].depth_at;
	if (bad >= 0) {
		const char *s = strstr(h.text, h.needle[bad].sentence);
		fprintf(stderr, "---\n%.*s\n---\n", 600, s ? s - 500 : "");
	}
	eval_hay_free(&h);
	chat_tokvec_free(&v);
	T_CHECKF(t, n == 2048, "%d tokens", n);
	T_CHECKF(t, bad < 0, "needle %d: depth_at %.3f", bad, at0);
	T_CHECKF(t, fabs(d0 - 0.05) < 1e-9, "needles not sorted by depth (first %.2f)", d0);
}

/* Same seeds, same haystack and needles; other seeds, other ones; the
 * needles of one haystack differ in key and value, and no value is in
 * the corpus or its question. */
static void eval_hay_deterministic(struct test_ctx *t)
{
	struct eval_corpus c;
	struct eval_needle a[EVAL_MAX_NEEDLES], b[EVAL_MAX_NEEDLES], d[EVAL_MAX_NEEDLES];
	struct eval_hay h1, h2, h3;
	char err[512];

	if (!eval_fx_load(t) || !eval_fx_corpus(t, &c))
		return;
	eval_needles_make(eval_seed_mix(42, 1, 2), EVAL_MAX_NEEDLES, a);
	eval_needles_make(eval_seed_mix(42, 1, 2), EVAL_MAX_NEEDLES, b);
	eval_needles_make(eval_seed_mix(42, 1, 3), EVAL_MAX_NEEDLES, d);
	int same = !memcmp(a, b, sizeof a), other = 0, distinct = 1, clean = 1;
	for (int i = 0; i < EVAL_MAX_NEEDLES; i++) {
		other |= strcmp(a[i].value, d[i].value) != 0 || strcmp(a[i].key, d[i].key) != 0;
		clean &= !strstr(c.text, a[i].value) && !strstr(a[i].question, a[i].value) &&
			 strstr(a[i].sentence, a[i].value) && strstr(a[i].question, a[i].key);
		for (int j = 0; j < i; j++)
			distinct &= strcmp(a[i].value, a[j].value) && strcmp(a[i].key, a[j].key);
	}
	a[0].depth = 0.5;
	int rc = eval_hay_build(&h1, &c, eval_fx_tok(), eval_fx_tmpl(), 1024, 3, a, 1, err, sizeof err);
	if (!rc)
		rc = eval_hay_build(&h2, &c, eval_fx_tok(), eval_fx_tmpl(), 1024, 3, a, 1, err, sizeof err);
	if (!rc)
		rc = eval_hay_build(&h3, &c, eval_fx_tok(), eval_fx_tmpl(), 1024, 4, a, 1, err, sizeof err);
	eval_corpus_free(&c);
	T_CHECKF(t, rc == 0, "%s", err);
	int same_hay = h1.len == h2.len && !memcmp(h1.text, h2.text, h1.len);
	int other_hay = h1.len != h3.len || memcmp(h1.text, h3.text, h1.len);
	eval_hay_free(&h1);
	eval_hay_free(&h2);
	eval_hay_free(&h3);
	T_CHECK(t, same);
	T_CHECK(t, other);
	T_CHECK(t, distinct);
	T_CHECK(t, clean);
	T_CHECK(t, same_hay);
	T_CHECKF(t, other_hay, "another background seed gave the same haystack");
}

/* Refusals: too few tokens for the needles, a corpus too small, and a
 * file that is not plain ASCII is skipped (1), a missing one is too. */
static void eval_hay_refusals(struct test_ctx *t)
{
	struct eval_corpus c, small = { 0 };
	struct eval_needle e[4];
	struct eval_hay h;
	char err[512], path[512];

	if (!eval_fx_load(t) || !eval_fx_corpus(t, &c))
		return;
	eval_needles_make(1, 4, e);
	int rc1 = eval_hay_build(&h, &c, eval_fx_tok(), eval_fx_tmpl(), 40, 1, e, 4, err, sizeof err);
	int rc2 = eval_hay_build(&h, &c, eval_fx_tok(), eval_fx_tmpl(), 30000, 1, e, 1, err, sizeof err);
	snprintf(path, sizeof path, "%s/binary.txt", test_tmpdir());
	char bin[200];
	memset(bin, 'a', sizeof bin);
	bin[50] = (char)0xc3;
	bin[51] = (char)0xa9;
	test_write_file(path, bin, sizeof bin);
	int rc3 = eval_corpus_add_file(&small, path, err, sizeof err);
	int rc4 = eval_corpus_add_file(&small, "/nonexistent/file", err, sizeof err);
	snprintf(path, sizeof path, "%s/short.txt", test_tmpdir());
	const char *txt = "One sentence here. Another one there.\n\nA new paragraph of plain text follows.\n";
	test_write_file(path, txt, strlen(txt));
	int rc5 = eval_corpus_add_file(&small, path, err, sizeof err);
	int rc6 = rc5 ? -1 : eval_hay_build(&h, &small, eval_fx_tok(), eval_fx_tmpl(), 512, 1, e, 1, err, sizeof err);
	eval_corpus_free(&c);
	eval_corpus_free(&small);
	T_CHECKF(t, rc1 == SEKV_EINVAL, "40 tokens for 4 needles: %d", rc1);
	T_CHECKF(t, rc2 == SEKV_EINVAL, "30000 tokens from the sample: %d", rc2);
	T_CHECKF(t, rc3 == 1 && rc4 == 1, "non-ASCII %d, missing %d", rc3, rc4);
	T_CHECKF(t, rc5 == 0 && rc6 == SEKV_EINVAL, "short corpus: add %d, build %d", rc5, rc6);
}

/* ---- KL ------------------------------------------------------------- */

/* KL and top-1 by hand: equal distributions 0; p = (1/2, 1/2) against
 * q = (3/4, 1/4): 0.5 ln(2/3) + 0.5 ln 2 = 0.143841 nats; the log softmax
 * normalises; argmax takes the lowest index on ties. */
static void eval_kl_by_hand(struct test_ctx *t)
{
	float a[2] = { 0, 0 }, b[2] = { logf(3), 0 }, c[3] = { 5, 7, 7 }, la[2], lb[2], lc[3];
	int ta = eval_log_softmax(a, 2, la), tb = eval_log_softmax(b, 2, lb), tc = eval_log_softmax(c, 3, lc);
	double kl_ab = eval_kl(la, lb, 2), kl_aa = eval_kl(la, la, 2), kl_ba = eval_kl(lb, la, 2);
	double sum = exp(lc[0]) + exp(lc[1]) + exp(lc[2]);

	T_CHECKF(t, fabs(kl_ab - 0.143841) < 1e-5, "KL(p||q) %.6f", kl_ab);
	T_CHECKF(t, kl_aa == 0, "KL(p||p) %g", kl_aa);
	/* 0.75 ln(1.5) + 0.25 ln(0.5) = 0.130812: KL is not symmetric */
	T_CHECKF(t, fabs(kl_ba - 0.130812) < 1e-5, "KL(q||p) %.6f", kl_ba);
	T_CHECK(t, ta == 0 && tb == 0 && tc == 1);
	T_CHECKF(t, fabs(sum - 1) < 1e-6, "softmax sums to %g", sum);
}

/* ---- report and plots ----------------------------------------------- */

/* Synthetic records: full and sekv@0.1 on niah over 2 lengths x 2 depths
 * x 2 needles (sekv right on the first needle of each cell only), a kl
 * and a mass record, and a second-question pair. */
static void fake_records(struct eval_recs *v)
{
	static const char *const meth[2] = { "full", "sekv" };
	struct eval_rec r;

	memset(v, 0, sizeof *v);
	for (int m = 0; m < 2; m++)
		for (int l = 0; l < 2; l++)
			for (int d = 0; d < 2; d++)
				for (int i = 0; i < 2; i++) {
					eval_rec_init(&r);
					snprintf(r.method, sizeof r.method, "%s", meth[m]);
					snprintf(r.router, sizeof r.router, "%s", m ? "landmark" : "");
					r.budget = m ? 0.1 : 1;
					r.task = EVAL_NIAH;
					r.length = 1024 << l;
					r.depth = d ? 0.9 : 0.1;
					r.depth_at = r.depth + 0.01;
					r.needle = i;
					r.correct = r.niah = m ? i == 0 : 1;
					r.full_correct = 1;
					r.full_kv_bytes = 786432.0 * (1 << l);
					/* bytes are whole numbers (cJSON prints 15 digits) */
					r.resident_bytes = floor(m ? r.full_kv_bytes * 0.1 : r.full_kv_bytes * 1.05);
					r.host_bytes = m ? r.full_kv_bytes * 0.5 : 0;
					r.disk_bytes = 3e6;
					r.swa_bytes = 7864320;
					r.prefill_tps = 500;
					r.decode_tps = 100;
					r.n_answer = 9;
					/* SeKV's device tier: part k is (k + 1) / 40 of
					 * the budget (2.5% .. 20%, 90% in all) */
					for (int k = 0; k < EVAL_TIER_N; k++)
						r.tier[k] = m ? floor(r.full_kv_bytes * 0.1 * (k + 1) / 40) : NAN;
					snprintf(r.value, sizeof r.value, "AMBER-FALCON-%d", 10 + i);
					snprintf(r.answer, sizeof r.answer, "%s", r.correct ? r.value : "no idea");
					eval_recs_push(v, &r);
				}
	r.task = EVAL_KL;
	r.correct = r.niah = -1;
	r.decode_tps = NAN;
	r.kl = 0.25;
	r.top1 = 0.75;
	eval_recs_push(v, &r);
	r.task = EVAL_MASS;
	r.kl = r.top1 = NAN;
	r.mass_recall = 0.625;
	r.attn_err = 0.0625;
	r.mass_oracle = 0.875;
	r.correct = 1;
	/* two global layers (model layers 5, 11) x 4 heads: means 0.5, 0.75 */
	r.n_lh_layer = 2;
	r.n_lh_head = 4;
	r.lh_layer[0] = 5;
	r.lh_layer[1] = 11;
	for (int h = 0; h < 4; h++) {
		r.mass_lh[h] = 0.125 + 0.25 * h;
		r.mass_lh[4 + h] = 0.75;
	}
	eval_recs_push(v, &r);
	r.n_lh_layer = r.n_lh_head = 0;
	r.task = EVAL_SECOND;
	r.mass_recall = r.attn_err = r.mass_oracle = NAN;
	r.decode_tps = 100;
	for (int q = 1; q <= 2; q++) {
		r.question = q;
		r.correct = q == 1;
		eval_recs_push(v, &r);
	}
}

static const char *const DESIGN_FIELDS[] = {
	"method", "budget", "task", "length", "depth", "needle", "correct", "full_correct", "niah", "kl",
	"top1", "mass_recall", "resident_bytes", "host_bytes", "disk_bytes", "swa_bytes", "full_kv_bytes",
	"prefill_tps", "decode_tps",
};

/* Every record has the fields of DESIGN.md section 6, "not measured" is
 * null, and the file reads back into the same records (mass_recall per
 * layer and head included). */
static void eval_report_json_fields(struct test_ctx *t)
{
	struct eval_recs v, w = { 0 };
	char dir[512], path[600], err[256];

	fake_records(&v);
	snprintf(dir, sizeof dir, "%s/eval-json", test_tmpdir());
	mkdir(dir, 0777);
	snprintf(path, sizeof path, "%s/results.json", dir);
	int rc = eval_write_json(&v, path, err, sizeof err);
	int rc2 = rc ? rc : eval_read_json(&w, path, err, sizeof err);
	cJSON *doc = rc ? NULL : test_json_load(t, path);
	int n = cJSON_GetArraySize(doc), missing = -1, null_ok = 1, same = w.n == v.n;
	for (int i = 0; i < n; i++) {
		const cJSON *o = cJSON_GetArrayItem(doc, i);
		for (size_t k = 0; k < sizeof DESIGN_FIELDS / sizeof *DESIGN_FIELDS; k++)
			if (!cJSON_GetObjectItemCaseSensitive(o, DESIGN_FIELDS[k]))
				missing = (int)k;
	}
	const cJSON *kl = cJSON_GetArrayItem(doc, v.n - 4);
	null_ok = cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(kl, "correct")) &&
		  cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(kl, "kl")) &&
		  cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(doc, 0), "kl"));
	const cJSON *sec = cJSON_GetArrayItem(doc, v.n - 1);
	const cJSON *qn = cJSON_GetObjectItemCaseSensitive(sec, "question");
	int second_ok = cJSON_IsString(qn) && !strcmp(qn->valuestring, "second");
	for (int i = 0; same && i < v.n; i++) {
		const struct eval_rec *a = &v.r[i], *b = &w.r[i];
		same = !strcmp(a->method, b->method) && a->task == b->task && a->length == b->length &&
		       a->depth == b->depth && a->correct == b->correct && a->question == b->question &&
		       (isnan(a->kl) ? isnan(b->kl) : a->kl == b->kl) && a->resident_bytes == b->resident_bytes &&
		       (isnan(a->attn_err) ? isnan(b->attn_err) : a->attn_err == b->attn_err) &&
		       (isnan(a->mass_oracle) ? isnan(b->mass_oracle) : a->mass_oracle == b->mass_oracle) &&
		       !strcmp(a->value, b->value) && a->n_lh_layer == b->n_lh_layer &&
		       a->n_lh_head == b->n_lh_head &&
		       (isnan(a->tier[0]) ? isnan(b->tier[0]) : !memcmp(a->tier, b->tier, sizeof a->tier)) &&
		       !memcmp(a->mass_lh, b->mass_lh, (size_t)a->n_lh_layer * a->n_lh_head * sizeof *a->mass_lh) &&
		       !memcmp(a->lh_layer, b->lh_layer, (size_t)a->n_lh_layer * sizeof *a->lh_layer);
	}
	cJSON_Delete(doc);
	eval_recs_free(&v);
	eval_recs_free(&w);
	T_CHECKF(t, rc == 0 && rc2 == 0, "%s", err);
	T_CHECKF(t, n == 20, "%d records in the file", n);
	T_CHECKF(t, missing < 0, "field %s missing", missing < 0 ? "" : DESIGN_FIELDS[missing]);
	T_CHECK(t, null_ok);
	T_CHECK(t, second_ok);
	T_CHECKF(t, same, "records differ after a round trip");
}

/* results.md: a section per task with the method x budget table, the
 * values computed from the records (sekv@0.1 right on half of the niah
 * questions, agreement 0.5, resident ratio 0.1), the length x depth
 * grid, the second question against the first, mass_recall per layer
 * and head, the images, a router other than the default named in its
 * row, and notes of one kind once. */
static void eval_report_md_tables(struct test_ctx *t)
{
	struct eval_recs v;
	char path[512], err[256];
	const char *png[2] = { "heat_sekv_0.1.png", "mem_sekv.png" };

	fake_records(&v);
	/* a router other than the default is named in the label */
	struct eval_rec x = v.r[8];
	snprintf(x.router, sizeof x.router, "oracle");
	eval_recs_push(&v, &x);
	/* notes that differ in their numbers only make one line */
	snprintf(v.r[8].note, sizeof v.r[8].note, "budget 2.0%% is below the fixed part (7.1%%)");
	snprintf(v.r[9].note, sizeof v.r[9].note, "budget 2.0%% is below the fixed part (6.3%%)");
	snprintf(path, sizeof path, "%s/results.md", test_tmpdir());
	int rc = eval_write_md(&v, path, "header line", png, 2, err, sizeof err);
	eval_recs_free(&v);
	T_CHECKF(t, rc == 0, "%s", err);
	char buf[32768];
	eval_fx_read_text(path, buf, sizeof buf);
	static const char *const want[] = {
		"header line", "## niah", "## kl", "## mass", "## second",
		"| method | n | accuracy | agreement (full right) | KL (nats) | top-1 | mass_recall | mass_oracle | "
		"attn_err | resident ratio |",
		"| full | 8 | 1.000 | 1.000 | - | - | - | - | - | 1.0500 | 100.0 |",
		"| sekv@0.1 | 8 | 0.500 | 0.500 | - | - | - | - | - | 0.1000 | 100.0 |",
		"| sekv@0.1 | 1 | - | - | 0.2500 | 0.750 | - | - | - | 0.1000 | - |",
		"| sekv@0.1 | 1 | 1.000 | 1.000 | - | - | 0.625 | 0.875 | 0.0625 |",
		"| method | length | depth 0.1 | depth 0.9 | all |",
		"| sekv@0.1 | 2048 | 0.50 | 0.50 | 0.50 |",
		"| sekv@0.1 | 1.000 | 0.000 | 1.000 | 0.000 |",
		"![heat_sekv_0.1.png](heat_sekv_0.1.png)",
		"| sekv(oracle)@0.1 | 1 | 1.000 |",
		"- sekv@0.1, length 1024, 2 records: budget 2.0% is below the fixed part (7.1%)",
		"| method | layer | head 0 | head 1 | head 2 | head 3 | all |",
		"| sekv@0.1 | 5 | 0.125 | 0.375 | 0.625 | 0.875 | 0.500 |",
		"| sekv@0.1 | 11 | 0.750 | 0.750 | 0.750 | 0.750 | 0.750 |",
		"| method | answers | sinks | anchors | short_spans | recent | summaries | landmarks | "
		"conversation | zoomed | total |",
		"| sekv@0.1 | 12 | 2.5 | 5.0 | 7.5 | 10.0 | 12.5 | 15.0 | 17.5 | 20.0 | 90.0 |",
	};
	for (size_t i = 0; i < sizeof want / sizeof *want; i++)
		T_CHECKF(t, strstr(buf, want[i]), "results.md lacks '%s'", want[i]);
}

/* The plots: a heat map per method and budget and a memory plot per
 * method, valid PNGs of the right size that are not blank; a file that is
 * not a PNG is refused. */
static void eval_plots_read_back(struct test_ctx *t)
{
	struct eval_recs v;
	char dir[512], path[600], err[256];
	char **names = NULL;
	int n = 0, w, h, nc;

	fake_records(&v);
	snprintf(dir, sizeof dir, "%s/plots", test_tmpdir());
	mkdir(dir, 0777);
	int rc = eval_plot_all(&v, dir, &names, &n, err, sizeof err);
	eval_recs_free(&v);
	T_CHECKF(t, rc == 0, "%s", err);
	int heat = 0, mem = 0, panels = 0, bad = -1;
	for (int i = 0; i < n; i++) {
		snprintf(path, sizeof path, "%s/%s", dir, names[i]);
		int is_heat = !strncmp(names[i], "heat_", 5), is_panels = !strcmp(names[i], "panels_tasks.png");
		heat += is_heat;
		mem += !strncmp(names[i], "mem_", 4);
		panels += is_panels;
		/* panels: niah and second (the fake records' per-question tasks),
		 * two groups of two lengths side by side */
		if (eval_png_info(path, &w, &h, &nc, err, sizeof err) || nc < 4 ||
		    (is_panels ? w < 360 || h < 150 : w != (is_heat ? 560 : 640) || h != (is_heat ? 400 : 420)))
			bad = i;
	}
	char first[64];
	snprintf(first, sizeof first, "%s", n ? names[0] : "");
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
	T_CHECKF(t, heat == 2 && mem == 2 && panels == 1, "%d heat maps, %d memory plots, %d panel figures", heat,
		 mem, panels);
	T_CHECKF(t, !strcmp(first, "heat_full_1.png"), "first plot %s", first);
	T_CHECKF(t, bad < 0, "plot %d: %s (%dx%d, %d colours)", bad, err, w, h, nc);
	snprintf(path, sizeof path, "%s/not-a.png", test_tmpdir());
	test_write_file(path, "# not a png\n", 12);
	T_CHECK(t, eval_png_info(path, &w, &h, &nc, err, sizeof err) == SEKV_EFORMAT);
}


/* The heat maps' ramp: relative luminance rises strictly from dark blue
 * through grey to yellow, the red-green difference stays small (the axis
 * protanopia and deuteranopia lose), and out-of-range values clamp. */
static void eval_ramp_colour_blind_safe(struct test_ctx *t)
{
	double c[3], prev = -1, lo[3], hi[3], mid[3], nan_c[3], under[3], over[3];

	for (int i = 0; i <= 40; i++) {
		eval_ramp(i / 40.0, c);
		double y = 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
		T_CHECKF(t, y > prev + 0.005, "luminance %g at %g after %g", y, i / 40.0, prev);
		T_CHECKF(t, fabs(c[0] - c[1]) < 0.2, "red %g against green %g at %g", c[0], c[1], i / 40.0);
		for (int k = 0; k < 3; k++)
			T_CHECK(t, c[k] >= 0 && c[k] <= 1);
		prev = y;
	}
	eval_ramp(0, lo);
	eval_ramp(1, hi);
	eval_ramp(0.5, mid);
	eval_ramp(NAN, nan_c);
	eval_ramp(-3, under);
	eval_ramp(7, over);
	T_CHECKF(t, lo[2] > lo[0] + 0.15 && lo[2] > lo[1], "t=0 is not blue: %g %g %g", lo[0], lo[1], lo[2]);
	T_CHECKF(t, hi[0] > hi[2] + 0.3 && hi[1] > hi[2] + 0.3, "t=1 is not yellow: %g %g %g", hi[0], hi[1], hi[2]);
	T_CHECKF(t, fabs(mid[0] - mid[1]) < 0.05 && fabs(mid[1] - mid[2]) < 0.05, "t=0.5 is not grey: %g %g %g",
		 mid[0], mid[1], mid[2]);
	T_CHECK(t, !memcmp(nan_c, lo, sizeof lo) && !memcmp(under, lo, sizeof lo) && !memcmp(over, hi, sizeof hi));
}

/* ---- the pinned corpus ------------------------------------------------ */

/* A list of a file as it is, one changed since, one missing, one no
 * longer plain text and a comment: only the first is read, each other
 * recorded with its state; the list of what was read reads back into the
 * same text; a malformed line, no list and too little text are refused. */
static void eval_corpus_pinned_states(struct test_ctx *t)
{
	static const char good[] = "This file is plain text that stays as it was pinned, long enough to count.\n";
	static const char later[] = "This file was pinned with other bytes; its digest differs now from the list.\n";
	char dir[512], list[600], path[4][600], line[2048], err[256], hex[65];
	struct eval_corpus c, c2;

	snprintf(dir, sizeof dir, "%s/pins", test_tmpdir());
	mkdir(dir, 0777);
	for (int i = 0; i < 4; i++)
		snprintf(path[i], sizeof path[i], "%s/f%d.txt", dir, i);
	test_write_file(path[0], good, strlen(good));
	test_write_file(path[1], later, strlen(later));
	char bin[80];
	memset(bin, 1, sizeof bin);
	test_write_file(path[3], bin, sizeof bin);
	snprintf(list, sizeof list, "%s/list.sha256", dir);
	FILE *f = fopen(list, "wb");
	T_CHECK(t, f != NULL);
	sha256_hex(good, strlen(good), hex);
	fprintf(f, "# a comment\n%s  %s\n", hex, path[0]);
	sha256_hex("other bytes", 11, hex);
	fprintf(f, "%s  %s\n%s  %s\n", hex, path[1], hex, path[2]);
	sha256_hex(bin, sizeof bin, hex);
	fprintf(f, "%s  %s\n", hex, path[3]);
	fclose(f);
	int rc = eval_corpus_load_pinned(&c, list, 10, err, sizeof err);
	T_CHECKF(t, rc == 0, "%s", err);
	int states = c.n_listed == 4 && c.n_files == 1 && eval_corpus_pin_state(&c, path[0]) == EVAL_PIN_USED &&
		     eval_corpus_pin_state(&c, path[1]) == EVAL_PIN_CHANGED &&
		     eval_corpus_pin_state(&c, path[2]) == EVAL_PIN_MISSING &&
		     eval_corpus_pin_state(&c, path[3]) == EVAL_PIN_SKIPPED &&
		     eval_corpus_pin_state(&c, "/elsewhere") == EVAL_PIN_UNLISTED &&
		     eval_corpus_count(&c, EVAL_PIN_USED) == 1 && eval_corpus_count(&c, EVAL_PIN_MISSING) == 1;
	int text = c.len == strlen(good) - 1 && !strncmp(c.text, good, c.len);
	snprintf(line, sizeof line, "%s/used.sha256", dir);
	rc = eval_corpus_write_list(&c, line, "used", err, sizeof err);
	int rc2 = rc ? rc : eval_corpus_load_pinned(&c2, line, 10, err, sizeof err);
	int back = !rc2 && c2.len == c.len && !memcmp(c2.text, c.text, c.len) && c2.n_listed == 1;
	eval_corpus_free(&c);
	eval_corpus_free(&c2);
	T_CHECK(t, states);
	T_CHECK(t, text);
	T_CHECKF(t, back, "%d %d %s", rc, rc2, err);
	T_CHECK(t, eval_corpus_load_pinned(&c, list, 1 << 20, err, sizeof err) == SEKV_ENOTFOUND);
	snprintf(line, sizeof line, "%s/none.sha256", dir);
	T_CHECK(t, eval_corpus_load_pinned(&c, line, 0, err, sizeof err) == SEKV_EIO);
	test_write_file(line, "abc  /etc/hostname\n", 19);
	rc = eval_corpus_load_pinned(&c, line, 0, err, sizeof err);
	T_CHECKF(t, rc == SEKV_EFORMAT && strstr(err, "line 1"), "%d %s", rc, err);
}

/* The committed list: well-formed, every path once. */
static void eval_corpus_list_committed(struct test_ctx *t)
{
	struct eval_corpus c;
	char err[256];
	int rc = eval_corpus_load_pinned(&c, APP_EVAL_CORPUS, 0, err, sizeof err), dup = -1;

	T_CHECKF(t, rc == 0, "%s", err);
	for (int i = 0; i < c.n_listed && dup < 0; i++)
		for (int k = 0; k < i; k++)
			if (!strcmp(c.file[i].path, c.file[k].path))
				dup = i;
	int n = c.n_listed;
	eval_corpus_free(&c);
	T_CHECKF(t, n > 10 && dup < 0, "%d files, duplicate %d", n, dup);
}

/* ---- the command ------------------------------------------------------ */

/* One small run through the CLI with the real model: full KV answers its
 * needle, full teacher-forced on its own answer gives KL 0 and top-1 1,
 * SeKV at 0.5 has a record of each task, and the report and plots are
 * there. */
static void eval_cli_small_run(struct test_ctx *t)
{
	char dir[512], path[600], err[256];
	int st, w, h, nc;

	if (access(test_model_path(), R_OK) != 0)
		T_SKIP(t, "model %s missing (make model)", test_model_path());
	snprintf(dir, sizeof dir, "%s/eval-cli", test_tmpdir());
	char tail[400], *out = eval_fx_run_eval(dir, "--lengths 512 --depths 0.5 --needles 1 --methods full,sekv "
						"--budgets 0.5 --tasks niah,kl", &st, tail, sizeof tail);
	int progress = out && strstr(out, "estimated") && strstr(out, "eval: done");
	free(out);
	T_CHECKF(t, st == 0, "exit %d: ...%s", st, tail);
	T_CHECKF(t, progress, "no estimate or summary on stderr");
	snprintf(path, sizeof path, "%s/results.json", dir);
	cJSON *doc = test_json_load(t, path);
	if (!doc)
		return;
	const cJSON *fn = eval_fx_find_rec(doc, "full", "niah"), *fk = eval_fx_find_rec(doc, "full", "kl");
	const cJSON *sn = eval_fx_find_rec(doc, "sekv", "niah"), *sk = eval_fx_find_rec(doc, "sekv", "kl");
	double f_ok = eval_fx_num(fn, "correct"), kl = eval_fx_num(fk, "kl"), top1 = eval_fx_num(fk, "top1");
	double s_budget = eval_fx_num(sn, "budget"), s_kl = eval_fx_num(sk, "kl"), len = eval_fx_num(fn, "length");
	double res = eval_fx_num(sn, "resident_bytes"), full = eval_fx_num(sn, "full_kv_bytes");
	int n = cJSON_GetArraySize(doc);
	cJSON_Delete(doc);
	T_CHECKF(t, n == 4, "%d records (full and sekv, niah and kl)", n);
	T_CHECKF(t, fn && fk && sn && sk, "a record is missing");
	T_CHECKF(t, f_ok == 1, "full KV missed the needle");
	T_CHECKF(t, len == 512, "length %g", len);
	T_CHECKF(t, kl == 0 && top1 == 1, "full against itself: kl %g top1 %g", kl, top1);
	T_CHECKF(t, s_budget == 0.5 && s_kl >= 0 && res > 0 && res < full, "sekv: budget %g kl %g resident %g of %g",
		 s_budget, s_kl, res, full);
	snprintf(path, sizeof path, "%s/results.md", dir);
	char buf[8192];
	eval_fx_read_text(path, buf, sizeof buf);
	T_CHECKF(t, strstr(buf, "## niah") && strstr(buf, "## kl") && strstr(buf, "| sekv@0.5 |"), "results.md: %.200s", buf);
	snprintf(path, sizeof path, "%s/heat_sekv_0.5.png", dir);
	T_CHECKF(t, eval_png_info(path, &w, &h, &nc, err, sizeof err) == 0 && nc > 3, "%s", err);
}

/* Bad lists and lengths exit 2 with the reason, an unwritable DIR 1. */
static void eval_cli_refusals(struct test_ctx *t)
{
	static const struct {
		const char *args;
		int status;
		const char *says;
	} cases[] = {
		{ "--methods full,bogus", 2, "unknown method 'bogus'" },
		{ "--budgets 0,0.1", 2, "--budgets" },
		{ "--budgets 0.1,,0.2", 2, "--budgets" },
		{ "--depths 0.5,1.5", 2, "--depths" },
		{ "--tasks niah,foo", 2, "unknown task" },
		{ "--lengths 100", 2, "at least 256" },
		{ "--lengths 512 --tasks multi", 2, "768" },
		{ "--lengths 40000 --tasks niah", 2, "context" },
		{ "--needles 0", 2, "--needles" },
	};
	char cmd[2048], dir[512], file[512];

	if (access(test_model_path(), R_OK) != 0)
		T_SKIP(t, "model %s missing (make model)", test_model_path());
	snprintf(dir, sizeof dir, "%s/eval-bad", test_tmpdir());
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		int st;
		snprintf(cmd, sizeof cmd, "'%s' eval -m '%s' --out '%s' %s 2>&1", test_sekv_bin(), test_model_path(),
			 dir, cases[i].args);
		char *out = test_run_cmd(cmd, &st);
		int ok = out && st == cases[i].status && strstr(out, cases[i].says);
		if (!ok)
			T_FAIL(t, "%s: exit %d: %.200s", cases[i].args, st, out ? out : "");
		free(out);
		if (!ok)
			return;
	}
	int st;
	snprintf(cmd, sizeof cmd, "'%s' eval --lengths 512 2>&1", test_sekv_bin());
	char *out = test_run_cmd(cmd, &st);
	free(out);
	T_CHECKF(t, st == 2, "no --out: exit %d", st);
	snprintf(file, sizeof file, "%s/a-file", test_tmpdir());
	test_write_file(file, "x", 1);
	snprintf(cmd, sizeof cmd, "'%s' eval -m '%s' --out '%s/sub' --lengths 512 --tasks niah 2>&1", test_sekv_bin(),
		 test_model_path(), file);
	out = test_run_cmd(cmd, &st);
	int says = out && strstr(out, "cannot create");
	free(out);
	T_CHECKF(t, st == 1 && says, "unwritable DIR: exit %d", st);
}

const struct test_case test_eval[] = {
	{ "eval_hay_length_and_depth", eval_hay_length_and_depth },
	{ "eval_hay_many_needles", eval_hay_many_needles },
	{ "eval_hay_deterministic", eval_hay_deterministic },
	{ "eval_hay_refusals", eval_hay_refusals },
	{ "eval_kl_by_hand", eval_kl_by_hand },
	{ "eval_corpus_pinned_states", eval_corpus_pinned_states },
	{ "eval_corpus_list_committed", eval_corpus_list_committed },
	{ "eval_report_json_fields", eval_report_json_fields },
	{ "eval_report_md_tables", eval_report_md_tables },
	{ "eval_plots_read_back", eval_plots_read_back },
	{ "eval_ramp_colour_blind_safe", eval_ramp_colour_blind_safe },
	{ "eval_cli_refusals", eval_cli_refusals },
	{ "eval_cli_small_run", eval_cli_small_run },
	{ NULL, NULL },
};
