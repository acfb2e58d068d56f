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
#include "engine/chat.h"
#include "engine/err.h"
#include "engine/model.h"
#include "engine/tokenizer.h"
#include "tests/test.h"

#define SAMPLE "assets/samples/gnu-gpl-3-and-lgpl-3.txt"

/* The tokenizer and prompt format of the real model, loaded once. */
static struct model *g_m;
static struct tok *g_tk;
static struct chat_template g_ct;

static int load_tok(struct test_ctx *t)
{
	struct app_opts o;
	char err[512];

	if (g_tk)
		return 1;
	if (access(test_model_path(), R_OK) != 0) {
		T_FAIL(t, "model %s missing (make model)", test_model_path());
		return 0;
	}
	app_opts_parse(&o, 0, NULL, err, sizeof err);
	snprintf(o.model, sizeof o.model, "%s", test_model_path());
	o.n_threads = 1;
	if (app_load(&o, &g_m, &g_tk, err, sizeof err) ||
	    chat_template_init(&g_ct, model_hparams(g_m)->arch, chat_format_of_gguf(model_gguf(g_m)), g_tk,
			       err, sizeof err)) {
		T_FAIL(t, "load: %s", err);
		return 0;
	}
	return 1;
}

static int sample_corpus(struct test_ctx *t, struct eval_corpus *c)
{
	char err[256];
	memset(c, 0, sizeof *c);
	int rc = eval_corpus_add_file(c, SAMPLE, err, sizeof err);
	if (rc) {
		T_FAIL(t, "corpus: %d %s", rc, err);
		return 0;
	}
	return 1;
}

/* Document tokens of text as ingest makes them (into v). */
static int count_doc(const char *text, size_t len, struct chat_tokvec *v)
{
	char err[256];
	v->n = 0;
	if (chat_build_turn(v, &g_ct, g_tk, CHAT_START_STREAM, APP_DOC_PREAMBLE, text, len, 0, NULL, err,
			    sizeof err))
		return -1;
	return v->n;
}

/* The decoded text of tokens [i, i + k) of v into buf. */
static void decode_at(const struct chat_tokvec *v, int i, int k, char *buf, size_t cap)
{
	char *s = tok_decode_dup(g_tk, v->ids + i, i + k <= v->n ? k : v->n - i);
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

	if (!load_tok(t) || !sample_corpus(t, &c))
		return;
	for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
		for (size_t di = 0; di < sizeof depths / sizeof *depths; di++) {
			struct eval_needle e;
			struct eval_hay h;
			eval_needles_make(eval_seed_mix(7, li, di), 1, &e);
			e.depth = depths[di];
			int rc = eval_hay_build(&h, &c, g_tk, &g_ct, lens[li], 11 + li, &e, 1, err, sizeof err);
			int n = rc ? -1 : count_doc(h.text, h.len, &v);
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

	if (!load_tok(t) || !sample_corpus(t, &c))
		return;
	eval_needles_make(99, EVAL_MULTI_FACTS, e);
	for (int i = 0; i < EVAL_MULTI_FACTS; i++)
		e[i].depth = (EVAL_MULTI_FACTS - i - 0.5) / EVAL_MULTI_FACTS; /* given in reverse */
	int rc = eval_hay_build(&h, &c, g_tk, &g_ct, 2048, 5, e, EVAL_MULTI_FACTS, err, sizeof err);
	eval_corpus_free(&c);
	T_CHECKF(t, rc == 0, "%s", err);
	int n = count_doc(h.text, h.len, &v), bad = -1;
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

	if (!load_tok(t) || !sample_corpus(t, &c))
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
	int rc = eval_hay_build(&h1, &c, g_tk, &g_ct, 1024, 3, a, 1, err, sizeof err);
	if (!rc)
		rc = eval_hay_build(&h2, &c, g_tk, &g_ct, 1024, 3, a, 1, err, sizeof err);
	if (!rc)
		rc = eval_hay_build(&h3, &c, g_tk, &g_ct, 1024, 4, a, 1, err, sizeof err);
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

	if (!load_tok(t) || !sample_corpus(t, &c))
		return;
	eval_needles_make(1, 4, e);
	int rc1 = eval_hay_build(&h, &c, g_tk, &g_ct, 40, 1, e, 4, err, sizeof err);
	int rc2 = eval_hay_build(&h, &c, g_tk, &g_ct, 30000, 1, e, 1, err, sizeof err);
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
	int rc6 = rc5 ? -1 : eval_hay_build(&h, &small, g_tk, &g_ct, 512, 1, e, 1, err, sizeof err);
	eval_corpus_free(&c);
	eval_corpus_free(&small);
	T_CHECKF(t, rc1 == SEKV_EINVAL, "40 tokens for 4 needles: %d", rc1);
	T_CHECKF(t, rc2 == SEKV_EINVAL, "30000 tokens from the sample: %d", rc2);
	T_CHECKF(t, rc3 == 1 && rc4 == 1, "non-ASCII %d, missing %d", rc3, rc4);
	T_CHECKF(t, rc5 == 0 && rc6 == SEKV_EINVAL, "short corpus: add %d, build %d", rc5, rc6);
}

const struct test_case test_eval[] = {
	{ "eval_hay_length_and_depth", eval_hay_length_and_depth },
	{ "eval_hay_many_needles", eval_hay_many_needles },
	{ "eval_hay_deterministic", eval_hay_deterministic },
	{ "eval_hay_refusals", eval_hay_refusals },
	{ NULL, NULL },
};
