/* test_eval_probe.c - the RULER-style probes of `sekv eval`
 * (app/eval_probe.c, app/eval_list.c): scoring on handmade answers, every
 * generator deterministic given its seed with values outside the corpus,
 * the shape of each task's needles and question, word lists of the exact
 * token count whose asked words are the text's true top counts, and one
 * small run of the command over every probe with the real model. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "app/app.h"
#include "app/eval.h"
#include "engine/base/err.h"
#include "tests/eval_fixture.h"
#include "tests/test.h"

static const int NEEDLE_PROBES[] = { EVAL_COPY, EVAL_MK, EVAL_MV, EVAL_MQ, EVAL_VT };
#define N_NEEDLE_PROBES ((int)(sizeof NEEDLE_PROBES / sizeof *NEEDLE_PROBES))

static void query_of(struct eval_query *q, int match, const char *const *items, int n)
{
	memset(q, 0, sizeof *q);
	q->match = match;
	for (int i = 0; i < n; i++)
		snprintf(q->item[q->n_item++], EVAL_ITEM_CAP, "%s", items[i]);
}

/* Scores by hand: all, some, none of the items; a value inside a longer
 * number or word does not count under EVAL_MATCH_WORD; case only under
 * EVAL_MATCH_NOCASE. */
static void eval_score_items_by_hand(struct test_ctx *t)
{
	static const char *const codes[] = { "4071-9382-5516", "QX7-K2P9-M4" };
	static const char *const words[] = { "zigun", "livi", "tome", "runar" };
	static const struct {
		int which, match;
		const char *answer;
		double want;
	} cases[] = {
		{ 0, EVAL_MATCH_WORD, "The codes are 4071-9382-5516 and QX7-K2P9-M4.", 1.0 },
		{ 0, EVAL_MATCH_WORD, "4071-9382-5516", 0.5 },
		{ 0, EVAL_MATCH_WORD, "4071-9382-1.", 0.0 },             /* a dropped digit */
		{ 0, EVAL_MATCH_WORD, "14071-9382-55167, QX7-K2P9-M4X", 0.0 }, /* inside longer ones */
		{ 0, 0, "14071-9382-55167", 0.5 },                       /* plain substring */
		{ 0, EVAL_MATCH_WORD, "qx7-k2p9-m4", 0.0 },              /* case counts */
		{ 1, EVAL_MATCH_WORD | EVAL_MATCH_NOCASE, "Zigun, LIVI, tomes, runar", 0.75 },
		{ 1, EVAL_MATCH_WORD | EVAL_MATCH_NOCASE, "zigun livi tome runar zigun", 1.0 },
		{ 1, EVAL_MATCH_WORD, "Zigun, livi", 0.25 },
		{ 1, EVAL_MATCH_WORD | EVAL_MATCH_NOCASE, "", 0.0 },
	};
	struct eval_query q;

	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		query_of(&q, cases[i].match, cases[i].which ? words : codes, cases[i].which ? 4 : 2);
		double got = eval_score_items(cases[i].answer, &q);
		T_CHECKF(t, fabs(got - cases[i].want) < 1e-12, "case %zu '%s': score %g, want %g", i, cases[i].answer,
			 got, cases[i].want);
	}
	query_of(&q, 0, codes, 2);
	T_CHECK(t, eval_score_items(NULL, &q) == 0);
	q.n_item = 0;
	T_CHECK(t, eval_score_items("4071-9382-5516", &q) == 0);
}

static int same_probe(const struct eval_needle *a, int n_a, const struct eval_query *qa, int nq_a,
		      const struct eval_needle *b, int n_b, const struct eval_query *qb, int nq_b)
{
	if (n_a != n_b || nq_a != nq_b)
		return 0;
	for (int i = 0; i < n_a; i++)
		if (strcmp(a[i].sentence, b[i].sentence) || a[i].depth != b[i].depth)
			return 0;
	for (int i = 0; i < nq_a; i++) {
		if (strcmp(qa[i].question, qb[i].question) || qa[i].n_item != qb[i].n_item)
			return 0;
		for (int k = 0; k < qa[i].n_item; k++)
			if (strcmp(qa[i].item[k], qb[i].item[k]))
				return 0;
	}
	return 1;
}

/* Each needle probe: the same seed gives the same needles and questions,
 * another seed other values; copy's values are digit strings (even
 * variants) and codes (odd) of the documented shapes. */
static void eval_probe_deterministic(struct test_ctx *t)
{
	struct eval_needle a[EVAL_MAX_NEEDLES], b[EVAL_MAX_NEEDLES];
	struct eval_query qa[EVAL_MAX_QUERIES], qb[EVAL_MAX_QUERIES];
	int na, nb, nqa, nqb;

	for (int k = 0; k < N_NEEDLE_PROBES; k++) {
		int task = NEEDLE_PROBES[k];
		T_CHECK(t, eval_probe_make(task, 42, 0, 0.3, NULL, a, &na, qa, &nqa) == 0);
		T_CHECK(t, eval_probe_make(task, 42, 0, 0.3, NULL, b, &nb, qb, &nqb) == 0);
		T_CHECKF(t, same_probe(a, na, qa, nqa, b, nb, qb, nqb), "%s: not deterministic", eval_task_name(task));
		T_CHECK(t, eval_probe_make(task, 43, 0, 0.3, NULL, b, &nb, qb, &nqb) == 0);
		T_CHECKF(t, nqa == 1 && nqb == 1 && strcmp(qa[0].item[0], qb[0].item[0]), "%s: seed 43 repeats '%s'",
			 eval_task_name(task), qa[0].item[0]);
	}
	for (int v = 0; v < 8; v++) {
		T_CHECK(t, eval_probe_make(EVAL_COPY, 7 + v, v, 0.5, NULL, a, &na, qa, &nqa) == 0);
		const char *x = qa[0].item[0];
		int ok = 1, letters = 0, digits = 0;
		if (v % 2 == 0) { /* DDDD-DDDD-DDDD */
			ok = strlen(x) == 14;
			for (int i = 0; ok && i < 14; i++)
				ok = i == 4 || i == 9 ? x[i] == '-' : isdigit((unsigned char)x[i]);
		} else { /* a code: 3, 4 and 2 characters (capitals and digits, both kinds present) */
			ok = strlen(x) == 11 && x[3] == '-' && x[8] == '-';
			for (int i = 0; ok && i < 11; i++) {
				if (i == 3 || i == 8)
					continue;
				letters += isupper((unsigned char)x[i]) != 0;
				digits += isdigit((unsigned char)x[i]) != 0;
			}
			ok = ok && letters && digits && letters + digits == 9;
		}
		T_CHECKF(t, ok, "copy variant %d: value '%s'", v, x);
		T_CHECKF(t, na == 1 && strstr(a[0].sentence, x) && !strcmp(a[0].value, x) && qa[0].needle == 0 &&
			 a[0].depth == 0.5, "copy variant %d: needle '%s'", v, a[0].sentence);
	}
	T_CHECK(t, eval_probe_make(EVAL_NIAH, 1, 0, 0.5, NULL, a, &na, qa, &nqa) == SEKV_EINVAL);
	T_CHECK(t, eval_probe_make(EVAL_CWE, 1, 0, 0.5, NULL, a, &na, qa, &nqa) == SEKV_EINVAL);
}

/* No value or name of 300 seeds of each needle probe is in the corpus;
 * a corpus that holds the value a seed draws makes the generator draw
 * another. */
static void eval_probe_values_not_in_corpus(struct test_ctx *t)
{
	struct eval_needle e[EVAL_MAX_NEEDLES];
	struct eval_query q[EVAL_MAX_QUERIES];
	struct eval_corpus c;
	char err[256], path[600];
	int n, nq;

	if (!eval_fx_corpus(t, &c))
		return;
	for (int k = 0; k < N_NEEDLE_PROBES; k++)
		for (uint64_t seed = 0; seed < 300; seed++) {
			eval_probe_make(NEEDLE_PROBES[k], seed, (int)seed, 0.5, &c, e, &n, q, &nq);
			for (int i = 0; i < q[0].n_item; i++)
				if (strstr(c.text, q[0].item[i])) {
					T_FAIL(t, "%s seed %d: '%s' is in the corpus", eval_task_name(NEEDLE_PROBES[k]), (int)seed,
					       q[0].item[i]);
					eval_corpus_free(&c);
					return;
				}
		}
	eval_corpus_free(&c);
	/* a corpus holding seed 5's value and vt name */
	struct eval_needle e2[EVAL_MAX_NEEDLES];
	struct eval_query q2[EVAL_MAX_QUERIES], qv[EVAL_MAX_QUERIES];
	int n2, nq2;
	eval_probe_make(EVAL_COPY, 5, 0, 0.5, NULL, e, &n, q, &nq);
	eval_probe_make(EVAL_VT, 5, 0, 0.5, NULL, e2, &n2, qv, &nq2);
	char text[512];
	snprintf(text, sizeof text, "A ledger line: account %s was closed. Another: %s met %s at noon, and the "
		 "rest of this file is plain filler text so that it is long enough.\n", q[0].item[0], qv[0].item[0],
		 qv[0].item[2]);
	snprintf(path, sizeof path, "%s/holds-values.txt", test_tmpdir());
	test_write_file(path, text, strlen(text));
	T_CHECKF(t, eval_corpus_add_file(&c, path, err, sizeof err) == 0, "%s", err);
	eval_probe_make(EVAL_COPY, 5, 0, 0.5, &c, e2, &n2, q2, &nq2);
	int copy_other = strcmp(q2[0].item[0], q[0].item[0]) && !strstr(c.text, q2[0].item[0]);
	eval_probe_make(EVAL_VT, 5, 0, 0.5, &c, e2, &n2, q2, &nq2);
	int vt_other = strcmp(q2[0].item[0], qv[0].item[0]) && strcmp(q2[0].item[2], qv[0].item[2]);
	for (int i = 0; i < q2[0].n_item; i++)
		vt_other &= !strstr(c.text, q2[0].item[i]);
	eval_corpus_free(&c);
	T_CHECKF(t, copy_other, "copy drew '%s', which the corpus holds", q2[0].item[0]);
	T_CHECK(t, vt_other);
}

/* mk: four needles of one kind of key at evenly spaced depths from the
 * asked one, which is the first; mv: one key, four values, all asked; mq:
 * every place named in the one question; vt: each assignment names the
 * one before, the first the number asked, every name expected. */
static void eval_probe_task_shapes(struct test_ctx *t)
{
	struct eval_needle e[EVAL_MAX_NEEDLES];
	struct eval_query q[EVAL_MAX_QUERIES];
	int n, nq;
	char thing[96];

	T_CHECK(t, eval_probe_make(EVAL_MK, 9, 0, 0.1, NULL, e, &n, q, &nq) == 0);
	snprintf(thing, sizeof thing, "%.*s", (int)(strstr(e[0].key, " for the ") - e[0].key), e[0].key);
	T_CHECKF(t, n == 4 && nq == 1 && q[0].n_item == 1 && !strcmp(q[0].item[0], e[0].value) &&
		 !strcmp(q[0].question, e[0].question) && e[0].depth == 0.1, "mk: %d needles, asked '%s'", n,
		 q[0].question);
	for (int i = 0; i < 4; i++) {
		T_CHECKF(t, !strncmp(e[i].key, thing, strlen(thing)) && fabs(e[i].depth - fmod(0.1 + i * 0.25, 1)) < 1e-12,
			 "mk needle %d: '%s' at %g", i, e[i].sentence, e[i].depth);
		for (int k = 0; k < i; k++)
			T_CHECK(t, strcmp(e[i].key, e[k].key) && strcmp(e[i].value, e[k].value));
	}
	T_CHECK(t, eval_probe_make(EVAL_MV, 9, 0, 0.5, NULL, e, &n, q, &nq) == 0);
	T_CHECKF(t, n == 4 && q[0].n_item == 4 && strstr(q[0].question, "What are all the"), "mv: %s", q[0].question);
	for (int i = 0; i < 4; i++)
		T_CHECKF(t, !strcmp(e[i].key, e[0].key) && strstr(e[i].sentence, q[0].item[i]) &&
			 !strncmp(e[i].sentence, "One of the ", 11), "mv needle %d: %s", i, e[i].sentence);
	T_CHECK(t, eval_probe_make(EVAL_MQ, 9, 0, 0.5, NULL, e, &n, q, &nq) == 0);
	T_CHECK(t, n == 4 && q[0].n_item == 4 && q[0].needle == -1);
	for (int i = 0; i < 4; i++)
		T_CHECKF(t, strstr(q[0].question, strstr(e[i].key, " for the ") + 9) &&
			 !strcmp(q[0].item[i], e[i].value), "mq: '%s' lacks needle %d", q[0].question, i);
	T_CHECK(t, eval_probe_make(EVAL_VT, 9, 0, 0.5, NULL, e, &n, q, &nq) == 0);
	T_CHECK(t, n == 5 && q[0].n_item == 5);
	char want[96];
	for (int i = 0; i < 5; i++) {
		if (i == 0)
			snprintf(want, sizeof want, "VAR %s = %s.", q[0].item[0], e[0].value);
		else
			snprintf(want, sizeof want, "VAR %s = VAR %s.", q[0].item[i], q[0].item[i - 1]);
		T_CHECKF(t, !strcmp(e[i].sentence, want) && e[i].depth > (i ? e[i - 1].depth : 0), "vt %d: '%s'", i,
			 e[i].sentence);
	}
	T_CHECKF(t, strlen(e[0].value) == 5 && strstr(q[0].question, e[0].value), "vt question '%s'", q[0].question);
}

/* Each needle probe as a haystack: the asked token count, every needle
 * once, the asked needle (copy, mk) at its depth and found again after
 * the sort by depth. */
static void eval_probe_hay_build(struct test_ctx *t)
{
	struct eval_corpus c;
	struct chat_tokvec v = { 0 };
	char err[512];

	if (!eval_fx_load(t) || !eval_fx_corpus(t, &c))
		return;
	for (int k = 0; k < N_NEEDLE_PROBES; k++) {
		struct eval_hay h;
		int task = NEEDLE_PROBES[k];
		int rc = eval_probe_build(&h, task, &c, eval_fx_tok(), eval_fx_tmpl(), 768, 0.7, 1, 11, 12, err,
					  sizeof err);
		if (rc) {
			T_FAIL(t, "%s: %s", eval_task_name(task), err);
			break;
		}
		int n = eval_fx_count(h.text, h.len, &v), once = 1, j = h.query[0].needle;
		for (int i = 0; i < h.n_needle; i++) {
			const char *p = strstr(h.text, h.needle[i].sentence);
			once &= p && !strstr(p + 1, h.needle[i].sentence);
		}
		int asked = j < 0 ? task != EVAL_COPY && task != EVAL_MK
			: !strcmp(h.needle[j].value, h.query[0].item[0]) && fabs(h.needle[j].depth_at - 0.7) < 0.09;
		int ok = n == 768 && once && asked && h.task == task && h.n_query == 1;
		eval_hay_free(&h);
		if (!ok) {
			T_FAIL(t, "%s: %d tokens, once %d, asked needle %d right %d", eval_task_name(task), n, once, j, asked);
			break;
		}
	}
	chat_tokvec_free(&v);
	eval_corpus_free(&c);
}

/* Counts of each made-up word of a cwe or fwe text (the words between
 * the head and the closing line; cwe: "N. word" lines). */
static int word_counts(const char *text, char (*word)[16], int *count, int cap)
{
	const char *p = strstr(text, "\n\n"), *end = strstr(text, "\n(end");
	int n = 0;

	if (!p)
		return 0;
	if (!end)
		end = text + strlen(text);
	for (p += 2; p < end;) {
		while (p < end && !isalpha((unsigned char)*p))
			p++;
		const char *w = p;
		while (p < end && isalpha((unsigned char)*p))
			p++;
		if (p == w || p - w >= 16)
			continue;
		int k = 0;
		while (k < n && (strlen(word[k]) != (size_t)(p - w) || strncmp(word[k], w, (size_t)(p - w))))
			k++;
		if (k == n && n < cap) {
			snprintf(word[n], 16, "%.*s", (int)(p - w), w);
			count[n++] = 0;
		}
		if (k < n)
			count[k]++;
	}
	return n;
}

/* cwe and fwe at several lengths: exactly the asked tokens, the expected
 * words are the text's top counts with a gap to the next, the same seed
 * gives the same text and another seed another; too short is refused. */
static void eval_list_exact_and_top(struct test_ctx *t)
{
	static const int lens[] = { 300, 700, 2048, 6000 };
	static char word[2048][16];
	static int count[2048];
	struct chat_tokvec v = { 0 };
	char err[512];

	if (!eval_fx_load(t))
		return;
	for (int task = EVAL_CWE; task <= EVAL_FWE; task++)
		for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
			struct eval_hay h, h2;
			int rc = eval_list_build(&h, task, eval_fx_tok(), eval_fx_tmpl(), lens[li], 77 + li, err, sizeof err);
			T_CHECKF(t, rc == 0, "%s %d: %s", eval_task_name(task), lens[li], err);
			int n = eval_fx_count(h.text, h.len, &v), n_w = word_counts(h.text, word, count, 2048);
			const struct eval_query *q = &h.query[0];
			int want = task == EVAL_CWE ? 10 : 3, min_in = 1 << 30, max_out = 0;
			for (int w = 0; w < n_w; w++) {
				int asked = 0;
				for (int i = 0; i < q->n_item; i++)
					asked |= !strcmp(q->item[i], word[w]);
				if (asked && count[w] < min_in)
					min_in = count[w];
				if (!asked && count[w] > max_out)
					max_out = count[w];
			}
			rc = eval_list_build(&h2, task, eval_fx_tok(), eval_fx_tmpl(), lens[li], 77 + li, err, sizeof err);
			int same = !rc && h2.len == h.len && !memcmp(h2.text, h.text, h.len);
			eval_hay_free(&h2);
			rc = eval_list_build(&h2, task, eval_fx_tok(), eval_fx_tmpl(), lens[li], 78 + li, err, sizeof err);
			int other = !rc && (h2.len != h.len || memcmp(h2.text, h.text, h.len));
			eval_hay_free(&h2);
			int shape = h.task == task && h.n_query == 1 && q->n_item == want && h.n_needle == 0 &&
				    (q->match & EVAL_MATCH_NOCASE);
			eval_hay_free(&h);
			T_CHECKF(t, n == lens[li] && shape, "%s %d: %d tokens, %d items", eval_task_name(task), lens[li], n,
				 q->n_item);
			T_CHECKF(t, min_in > max_out, "%s %d: an asked word counts %d, another %d", eval_task_name(task),
				 lens[li], min_in, max_out);
			T_CHECKF(t, same && other, "%s %d: same seed same %d, other seed other %d", eval_task_name(task),
				 lens[li], same, other);
		}
	chat_tokvec_free(&v);
	struct eval_hay h;
	T_CHECK(t, eval_list_build(&h, EVAL_CWE, eval_fx_tok(), eval_fx_tmpl(), 40, 1, err, sizeof err) == SEKV_EINVAL);
	T_CHECK(t, eval_list_build(&h, EVAL_MK, eval_fx_tok(), eval_fx_tmpl(), 512, 1, err, sizeof err) == SEKV_EINVAL);
}


/* ---- qa --------------------------------------------------------------- */

/* The committed questions: grouped by document in the file's order, one
 * plain item each (the answer, case-sensitive); a malformed line is
 * refused with its number; a document's haystack is its text whole with
 * the token count ingest stores and at most max_q questions; a missing
 * document is refused. */
static void eval_qa_load_and_build(struct test_ctx *t)
{
	struct eval_qa qa;
	char err[512], path[600], doc[600];
	struct eval_hay h;
	struct chat_tokvec v = { 0 };

	int rc = eval_qa_load(&qa, APP_EVAL_QA, err, sizeof err);
	T_CHECKF(t, rc == 0, "%s", err);
	int shape = qa.n_doc == 8 && qa.n_question == 69 && qa.n_dropped == 0 &&
		    !strcmp(qa.doc[0].path, "/usr/share/common-licenses/Apache-2.0") &&
		    !strcmp(qa.doc[0].query[0].item[0], "January 2004") && qa.doc[0].query[0].n_item == 1 &&
		    qa.doc[0].query[0].match == 0 && qa.doc[0].query[0].needle == -1;
	double right = eval_score_items("It was issued in January 2004.", &qa.doc[0].query[0]);
	double wrong = eval_score_items("january 2004", &qa.doc[0].query[0]);
	eval_qa_free(&qa);
	T_CHECK(t, shape);
	T_CHECKF(t, right == 1 && wrong == 0, "right %g wrong %g", right, wrong);
	snprintf(path, sizeof path, "%s/bad.jsonl", test_tmpdir());
	static const char bad[] = "{\"doc\": \"/a\", \"question\": \"q?\", \"answer\": \"a\"}\n\n[1, 2]\n";
	test_write_file(path, bad, strlen(bad));
	rc = eval_qa_load(&qa, path, err, sizeof err);
	T_CHECKF(t, rc == SEKV_EFORMAT && strstr(err, "line 3"), "%d %s", rc, err);
	if (!eval_fx_load(t))
		return;
	snprintf(doc, sizeof doc, "%s/qa-doc.txt", test_tmpdir());
	static const char text[] = "The lighthouse keeper logs the weather every evening at nine o'clock.\n"
				   "Visitors may climb the tower on Sundays only.\n";
	test_write_file(doc, text, strlen(text));
	snprintf(path, sizeof path, "%s/qa.jsonl", test_tmpdir());
	char lines[2048];
	snprintf(lines, sizeof lines, "{\"doc\": \"%s\", \"question\": \"When are the logs made?\", \"answer\": "
		 "\"nine o'clock\"}\n{\"doc\": \"%s\", \"question\": \"When may visitors climb?\", \"answer\": "
		 "\"Sundays\"}\n{\"doc\": \"%s/none.txt\", \"question\": \"x?\", \"answer\": \"y\"}\n", doc, doc,
		 test_tmpdir());
	test_write_file(path, lines, strlen(lines));
	T_CHECKF(t, eval_qa_load(&qa, path, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, qa.n_doc == 2 && qa.doc[0].n_query == 2);
	rc = eval_qa_build(&h, &qa.doc[0], 1, eval_fx_tok(), eval_fx_tmpl(), err, sizeof err);
	int n = rc ? -1 : eval_fx_count(text, strlen(text), &v);
	int ok = !rc && h.len == strlen(text) && !strcmp(h.text, text) && h.n_tok == n && h.n_query == 1 &&
		 h.task == EVAL_QA && !strcmp(h.query[0].item[0], "nine o'clock");
	eval_hay_free(&h);
	int rc2 = eval_qa_build(&h, &qa.doc[1], 5, eval_fx_tok(), eval_fx_tmpl(), err, sizeof err);
	eval_qa_free(&qa);
	chat_tokvec_free(&v);
	T_CHECKF(t, ok, "rc %d: %s", rc, err);
	T_CHECK(t, rc2 == SEKV_ENOTFOUND);
}

/* One run of every probe but qa through the CLI at 256 tokens: a full
 * and a sekv record per task with a score in [0, 1], correct = all the
 * items, full KV's answer the reference of same_answer (1 for full), and
 * full KV copies the copy probe's value; results.md has each section. */
static void eval_cli_probes_small_run(struct test_ctx *t)
{
	static const char *const tasks[] = { "copy", "mk", "mv", "mq", "vt", "cwe", "fwe" };
	char dir[512], path[600];
	int st;

	if (access(test_model_path(), R_OK) != 0)
		T_SKIP(t, "model %s missing (make test-model)", test_model_path());
	snprintf(dir, sizeof dir, "%s/eval-probes", test_tmpdir());
	char tail[400], *out = eval_fx_run_eval(dir, "--lengths 256 --depths 0.5 --needles 1 --methods full,sekv "
						"--budgets 0.5 --tasks copy,mk,mv,mq,vt,cwe,fwe", &st, tail, sizeof tail);
	int overview = out && strstr(out, "| task | method | n | accuracy | score |") && strstr(out, "| cwe | full | 1 |");
	free(out);
	T_CHECKF(t, st == 0, "exit %d: ...%s", st, tail);
	T_CHECKF(t, overview, "no overview table on stderr: ...%s", tail);
	snprintf(path, sizeof path, "%s/results.json", dir);
	cJSON *doc = test_json_load(t, path);
	if (!doc)
		return;
	int n = cJSON_GetArraySize(doc), bad = -1;
	double copy_full = -1;
	for (size_t i = 0; i < sizeof tasks / sizeof *tasks && bad < 0; i++)
		for (int m = 0; m < 2 && bad < 0; m++) {
			const cJSON *r = eval_fx_find_rec(doc, m ? "sekv" : "full", tasks[i]);
			const cJSON *sc = cJSON_GetObjectItemCaseSensitive(r, "score");
			const cJSON *ok = cJSON_GetObjectItemCaseSensitive(r, "correct");
			const cJSON *same = cJSON_GetObjectItemCaseSensitive(r, "same_answer");
			const cJSON *fc = cJSON_GetObjectItemCaseSensitive(r, "full_correct");
			if (!cJSON_IsNumber(sc) || sc->valuedouble < 0 || sc->valuedouble > 1 || !cJSON_IsNumber(ok) ||
			    ok->valuedouble != (sc->valuedouble == 1) || !cJSON_IsNumber(same) || !cJSON_IsNumber(fc) ||
			    (!m && (same->valuedouble != 1 || fc->valuedouble != ok->valuedouble)))
				bad = (int)i * 2 + m;
			if (!m && i == 0)
				copy_full = ok ? ok->valuedouble : -1;
		}
	cJSON_Delete(doc);
	T_CHECKF(t, n == 14, "%d records (7 tasks, full and sekv)", n);
	T_CHECKF(t, bad < 0, "record of %s %s is wrong", bad < 0 ? "" : tasks[bad / 2], bad % 2 ? "sekv" : "full");
	T_CHECKF(t, copy_full == 1, "full KV did not copy the value back");
	snprintf(path, sizeof path, "%s/results.md", dir);
	char buf[16384];
	eval_fx_read_text(path, buf, sizeof buf);
	for (size_t i = 0; i < sizeof tasks / sizeof *tasks; i++) {
		char want[32];
		snprintf(want, sizeof want, "## %s\n", tasks[i]);
		T_CHECKF(t, strstr(buf, want), "results.md lacks '%s'", want);
	}
	T_CHECK(t, strstr(buf, "| method | n | accuracy | score | agreement (full right) | same answer as full |"));
}

const struct test_case test_eval_probe[] = {
	{ "eval_score_items_by_hand", eval_score_items_by_hand },
	{ "eval_probe_deterministic", eval_probe_deterministic },
	{ "eval_probe_values_not_in_corpus", eval_probe_values_not_in_corpus },
	{ "eval_probe_task_shapes", eval_probe_task_shapes },
	{ "eval_probe_hay_build", eval_probe_hay_build },
	{ "eval_list_exact_and_top", eval_list_exact_and_top },
	{ "eval_qa_load_and_build", eval_qa_load_and_build },
	{ "eval_cli_probes_small_run", eval_cli_probes_small_run },
	{ NULL, NULL },
};
