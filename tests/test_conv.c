/* test_conv.c - the conversation (engine/conv/conv.c) with the real model over a
 * short document ingested into a fresh library: a conversation resumed
 * from stored rows answers as one over a state prefilled live, streamed
 * pieces are whole UTF-8 and make up the answer, a KV method that evicts
 * forgets whole turns under its budget, and a stop during the question
 * ends the turn at once. */
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/app.h"
#include "app/session.h"
#include "engine/conv/chat.h"
#include "engine/conv/conv.h"
#include "engine/base/err.h"
#include "engine/model/model.h"
#include "engine/sekv/sekv.h"
#include "engine/tok/tokenizer.h"
#include "engine/base/utf8.h"
#include "store/store.h"
#include "tests/store_fixtures.h"
#include "tests/test.h"

#define CONV_DOC "The Harbor Street bakery opened in 1998. Its owner, Mira Olsen, bakes rye " \
	"bread at four every morning and sells it until noon. On Sundays the bakery is closed. " \
	"The café next door, Blue Kettle, serves coffee in tall glasses and cinnamon buns.\n"

static int64_t g_conv_doc;
static char g_conv_db[512];

struct fix {
	struct app_opts o;
	struct model *m;
	struct tok *tk;
	struct session *s;
};

static void fix_close(struct fix *f)
{
	session_close(f->s);
	tok_close(f->tk);
	model_close(f->m);
}

/* Ingests CONV_DOC once, then opens it with --kv full (kv_full) or SeKV. */
static int fix_open(struct test_ctx *t, struct fix *f, int kv_full)
{
	char err[1024], path[512];

	memset(f, 0, sizeof *f);
	app_opts_parse(&f->o, 0, NULL, err, sizeof err);
	snprintf(f->o.model, sizeof f->o.model, "%s", test_model_path());
	f->o.quiet = 1;
	f->o.n_predict = 24;
	if (access(test_model_path(), R_OK) != 0) {
		T_FAIL(t, "model %s missing (make model)", test_model_path());
		return -1;
	}
	if (!g_conv_doc) {
		snprintf(g_conv_db, sizeof g_conv_db, "%s/conv.db", test_tmpdir());
		snprintf(path, sizeof path, "%s/conv_doc.txt", test_tmpdir());
		FILE *fp = fopen(path, "w");
		if (!fp || fputs(CONV_DOC, fp) < 0 || fclose(fp)) {
			T_FAIL(t, "cannot write %s", path);
			return -1;
		}
		snprintf(f->o.db, sizeof f->o.db, "%s", g_conv_db);
		if (app_ingest(&f->o, path, NULL, NULL, &g_conv_doc, err, sizeof err)) {
			T_FAIL(t, "ingest: %s", err);
			return -1;
		}
	}
	snprintf(f->o.db, sizeof f->o.db, "%s", g_conv_db);
	f->o.kv = kv_full ? APP_KV_FULL : APP_KV_SEKV;
	if (app_load(&f->o, &f->m, &f->tk, err, sizeof err) ||
	    session_open(&f->s, f->m, f->tk, &f->o, g_conv_doc, err, sizeof err)) {
		T_FAIL(t, "open: %s", err);
		fix_close(f);
		return -1;
	}
	return 0;
}

struct stream {
	char text[4096];
	size_t len;
	int bad_piece;      /* a piece that is not whole UTF-8 */
	int n_question;     /* question steps seen */
	int stop_question;  /* stop at the first question step */
};

static int on_step(void *ud, const struct conv_step *st)
{
	struct stream *s = ud;
	if (st->question) {
		s->n_question++;
		return s->stop_question;
	}
	if (utf8_complete(st->piece, (size_t)st->piece_len) != (size_t)st->piece_len)
		s->bad_piece = 1;
	if (s->len + (size_t)st->piece_len < sizeof s->text) {
		memcpy(s->text + s->len, st->piece, (size_t)st->piece_len);
		s->len += (size_t)st->piece_len;
	}
	return 0;
}

/* Full KV restored from the library == the same document prefilled live
 * into a fresh exact state (the stored rows are the prefill's rows), and
 * every streamed piece is whole UTF-8, together the answer's text. */
static void conv_resumed_equals_live_prefill(struct test_ctx *t)
{
	struct fix f;
	struct conv_answer a = {0}, b = {0};
	struct stream st = {0};
	struct session_info in;
	struct model_state *ms = NULL;
	struct conv *c = NULL;
	struct conv_params cp;
	struct conv_kv kv;
	char err[1024];
	const char *q = "When does the bakery close?";

	if (fix_open(t, &f, 1))
		return;
	session_get_info(f.s, &in);
	int rc = conv_ask(session_conv(f.s), q, on_step, &st, &a, err, sizeof err);
	conv_default_params(&cp);
	cp.n_predict = f.o.n_predict;
	cp.n_batch = f.o.n_batch;
	cp.in_user_turn = 1;
	cp.sampler.temperature = f.o.temperature;
	cp.sampler.seed = f.o.seed;
	cp.sampler.repeat_penalty = f.o.repeat_penalty;
	conv_kv_full(&kv);
	int rc2 = model_state_new(&ms, f.m, in.n_tok + CONV_TAIL_CAP, f.o.n_batch, 1, err, sizeof err);
	if (!rc2)
		rc2 = conv_new(&c, f.m, f.tk, ms, &kv, &cp, err, sizeof err);
	/* ingest prefilled in chunks of --batch: the same chunks here */
	if (!rc2)
		rc2 = conv_prefill(c, in.tokens, in.n_tok, err, sizeof err);
	cp.n_batch = 0;
	conv_free(c);
	c = NULL;
	/* questions are decoded token by token, as over a stored document */
	if (!rc2)
		rc2 = conv_new(&c, f.m, f.tk, ms, &kv, &cp, err, sizeof err);
	if (!rc2)
		rc2 = conv_ask(c, q, NULL, NULL, &b, err, sizeof err);
	int same = a.n_gen == b.n_gen && !memcmp(a.ids, b.ids, (size_t)a.n_gen * sizeof *a.ids);
	int text_ok = a.text && st.len == a.text_len && !memcmp(st.text, a.text, st.len);
	int n_gen = a.n_gen, bad = st.bad_piece, nq = st.n_question, n_question = a.n_question;
	conv_answer_free(&a);
	conv_answer_free(&b);
	conv_free(c);
	model_state_free(ms);
	fix_close(&f);
	T_CHECKF(t, rc == 0 && rc2 == 0, "%s", err);
	T_CHECK(t, n_gen > 0);
	T_CHECKF(t, same, "resumed and live answers differ");
	T_CHECK(t, text_ok);
	T_CHECK(t, !bad);
	T_CHECKF(t, nq == n_question, "%d question steps for %d tokens", nq, n_question);
}

/* A stop asked during the question ends the turn after one token: nothing
 * is generated, and the next question still works. */
static void conv_stop_during_question(struct test_ctx *t)
{
	struct fix f;
	struct conv_answer a = {0};
	struct stream st = { .stop_question = 1 };
	char err[1024];

	if (fix_open(t, &f, 0))
		return;
	long long e0 = model_n_eval(f.m);
	int rc = conv_ask(session_conv(f.s), "Who owns the bakery?", on_step, &st, &a, err, sizeof err);
	long long n_eval = model_n_eval(f.m) - e0;
	int n_gen = a.n_gen, stopped = a.stopped == CONV_STOP_USER;
	conv_answer_free(&a);
	st.stop_question = 0;
	int rc2 = conv_ask(session_conv(f.s), "Who owns the bakery?", on_step, &st, &a, err, sizeof err);
	int n_gen2 = a.n_gen;
	conv_answer_free(&a);
	fix_close(&f);
	T_CHECKF(t, rc == SEKV_EINTR, "rc %d", rc);
	T_CHECK(t, stopped && n_gen == 0);
	T_CHECKF(t, n_eval == 1, "%lld forward positions after the stop", n_eval);
	T_CHECKF(t, rc2 == 0 && n_gen2 > 0, "rc %d, %d tokens: %s", rc2, n_gen2, err);
}

/* A KV method (here a recorder over full KV) whose budget holds about two
 * turns: later turns evict the oldest whole turns, at turn starts. */
struct recorder {
	int n_tail;       /* rows the conversation decoded (mirrors conv) */
	int first_held;   /* position of the first held row */
	int n_start;
	int evict_pos[16];
	int n_evict;
};

static int rec_tail(const void *ctx)
{
	const struct recorder *r = ctx;
	return r->n_start + r->n_tail - r->first_held;
}

static int rec_evict(void *ctx, int pos)
{
	struct recorder *r = ctx;
	if (pos < r->first_held || r->n_evict == 16)
		return SEKV_EINVAL;
	r->evict_pos[r->n_evict++] = pos;
	r->first_held = pos;
	return 0;
}

static int rec_step(void *ud, const struct conv_step *st)
{
	struct recorder *r = ud;
	(void)st;
	r->n_tail++;
	return 0;
}

static void conv_evicts_oldest_turns(struct test_ctx *t)
{
	struct fix f;
	struct conv_answer a = {0};
	struct session_info in;
	struct model_state *ms = NULL;
	struct conv *c = NULL;
	struct conv_params cp;
	struct conv_kv kv;
	struct recorder r = {0};
	char err[1024];
	int rc, evicted = 0, turn_start[4];

	if (fix_open(t, &f, 1))
		return;
	session_get_info(f.s, &in);
	const struct model_hparams *hp = model_hparams(f.m);
	conv_default_params(&cp);
	cp.n_predict = 8;
	conv_kv_full(&kv);
	kv.name = "recorder";
	kv.ctx = &r;
	kv.tail_rows = rec_tail;
	kv.evict = rec_evict;
	/* room for 2 x 40 rows: question (~12) + answer (8) fits twice */
	kv.budget_bytes = 2 * 40 * model_kv_bytes(1, hp->n_global, hp->n_head_kv, hp->d_head);
	rc = model_state_new(&ms, f.m, 512, 64, 1, err, sizeof err);
	if (!rc)
		rc = conv_new(&c, f.m, f.tk, ms, &kv, &cp, err, sizeof err);
	for (int i = 0; i < 4 && !rc; i++) {
		turn_start[i] = r.n_start + r.n_tail;
		rc = conv_ask(c, "Name one thing the bakery sells.", rec_step, &r, &a, err, sizeof err);
		evicted += a.n_evicted_turns;
		conv_answer_free(&a);
	}
	conv_free(c);
	model_state_free(ms);
	fix_close(&f);
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECKF(t, evicted > 0 && r.n_evict == evicted, "%d turns evicted, %d calls", evicted, r.n_evict);
	for (int i = 0; i < r.n_evict; i++)
		T_CHECKF(t, r.evict_pos[i] == turn_start[i + 1], "eviction %d at %d, turn %d starts at %d",
			 i, r.evict_pos[i], i + 1, turn_start[i + 1]);
}

/* Nothing is decoded past the model's training context: an answer that
 * would cross it stops where it ends (and says so), a question that would
 * is refused. The state starts near the end of the context over zero rows
 * (what the rows hold does not matter here). */
static void conv_stops_at_model_context(struct test_ctx *t)
{
	struct app_opts o;
	struct model *m = NULL;
	struct tok *tk = NULL;
	struct model_state *ms = NULL;
	struct conv *c = NULL;
	struct conv_params cp;
	struct conv_kv kv;
	struct conv_answer a = {0}, b = {0};
	char err[1024], err2[1024] = "";
	int rc, rc2 = -1, n_ctx = 0;

	app_opts_parse(&o, 0, NULL, err, sizeof err);
	snprintf(o.model, sizeof o.model, "%s", test_model_path());
	rc = app_load(&o, &m, &tk, err, sizeof err);
	if (!rc) {
		n_ctx = model_hparams(m)->n_ctx_train;
		rc = model_state_new(&ms, m, n_ctx + 64, 64, 1, err, sizeof err);
	}
	conv_kv_full(&kv);
	conv_default_params(&cp);
	cp.n_predict = 64;
	cp.format = CHAT_FORMAT_TEMPLATE; /* no newline stop before the context ends */
	if (!rc && !(rc = model_state_resume(ms, n_ctx - 40)) &&
	    !(rc = conv_new(&c, m, tk, ms, &kv, &cp, err, sizeof err)))
		rc = conv_ask(c, "Why?", NULL, NULL, &a, err, sizeof err);
	conv_free(c);
	c = NULL;
	if (!rc && !model_state_resume(ms, n_ctx - 2) &&
	    !conv_new(&c, m, tk, ms, &kv, &cp, err2, sizeof err2))
		rc2 = conv_ask(c, "Why?", NULL, NULL, &b, err2, sizeof err2);
	int room = 40 - a.n_question, n_gen = a.n_gen, warned = strstr(a.warn, "context") != NULL;
	int cut = a.stopped == CONV_STOP_LENGTH;
	conv_answer_free(&a);
	conv_answer_free(&b);
	conv_free(c);
	model_state_free(ms);
	tok_close(tk);
	model_close(m);
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECKF(t, n_gen > 0 && n_gen <= room && warned, "%d answer tokens with room for %d, warned %d",
		 n_gen, room, warned);
	T_CHECKF(t, rc2 == SEKV_EINVAL && strstr(err2, "context"), "rc %d: %s", rc2, err2);
	T_CHECKF(t, n_gen == room, "%d answer tokens, room for %d", n_gen, room);
	T_CHECK(t, cut);
}

/* The text of ids[0..n) (tokens as the tokenizer spells them). */
static void ids_text(const struct tok *tk, const int32_t *ids, int n, char *buf, size_t cap)
{
	size_t len = 0;

	for (int i = 0; i < n && len + 64 < cap; i++) {
		int k = tok_token_text(tk, ids[i], buf + len, (int)(cap - len - 1));
		if (k > 0)
			len += (size_t)k;
	}
	buf[len] = 0;
}

/* The completion format's document and question turns are the tokens of
 * the exact strings (each tokenized whole), and text_at splits the
 * question turn where the question's own tokens start. */
static void conv_completion_turns_equal_exact_strings(struct test_ctx *t)
{
	struct fix f;
	struct chat_template ct;
	struct chat_tokvec d = {0}, q = {0}, wd = {0}, wq = {0};
	char err[1024];
	const char *doc = "The bakery opened in 1998.\nIt closes at noon.";
	const char *exact_d = "Context:\nThe bakery opened in 1998.\nIt closes at noon.";
	const char *exact_q = "\n\nAnswer with a quote from the context.\nQuestion: When does it close?\nAnswer:";
	char fixed[256], rest[256];
	struct chat_turn_marks mk = { -1, -1, -1 };
	int rc;

	memset(&f, 0, sizeof f);
	app_opts_parse(&f.o, 0, NULL, err, sizeof err);
	snprintf(f.o.model, sizeof f.o.model, "%s", test_model_path());
	rc = app_load(&f.o, &f.m, &f.tk, err, sizeof err);
	if (!rc)
		rc = chat_template_init(&ct, model_gguf(f.m), CHAT_FORMAT_COMPLETION, f.tk,
					err, sizeof err);
	if (!rc)
		rc = chat_build_turn(&d, &ct, f.tk, CHAT_START_STREAM, "ignored", doc, strlen(doc), 0,
				     NULL, err, sizeof err);
	if (!rc)
		rc = chat_build_turn(&q, &ct, f.tk, CHAT_START_AFTER_MODEL, NULL, "When does it close?",
				     19, 1, &mk, err, sizeof err);
	if (!rc)
		rc = chat_tokvec_push(&wd, ct.bos);
	if (!rc)
		rc = chat_push_text(&wd, f.tk, exact_d, strlen(exact_d), err, sizeof err);
	if (!rc)
		rc = chat_push_text(&wq, f.tk, exact_q, strlen(exact_q), err, sizeof err);
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECK(t, ct.bos >= 0 && d.n == wd.n && !memcmp(d.ids, wd.ids, (size_t)d.n * sizeof *d.ids));
	T_CHECK(t, q.n == wq.n && !memcmp(q.ids, wq.ids, (size_t)q.n * sizeof *q.ids));
	/* marks: the fixed part ends where the question's own tokens start */
	ids_text(f.tk, q.ids, mk.text_at, fixed, sizeof fixed);
	ids_text(f.tk, q.ids + mk.text_at, q.n - mk.text_at, rest, sizeof rest);
	T_CHECKF(t, !strcmp(fixed, "\n\nAnswer with a quote from the context.\nQuestion:") &&
		 !strcmp(rest, " When does it close?\nAnswer:") && mk.example_at == mk.example_end,
		 "fixed \"%s\" rest \"%s\"", fixed, rest);
	/* the first question with a worked example: the example lies between */
	q.n = 0;
	ct.example = "The bakery opened";
	if (chat_build_turn(&q, &ct, f.tk, CHAT_START_IN_USER, NULL, "When?", 5, 1, &mk,
			    err, sizeof err) == 0) {
		char ex[256];
		ids_text(f.tk, q.ids, mk.example_at, fixed, sizeof fixed);
		ids_text(f.tk, q.ids + mk.example_at, mk.example_end - mk.example_at, ex, sizeof ex);
		ids_text(f.tk, q.ids + mk.text_at, q.n - mk.text_at, rest, sizeof rest);
		T_CHECKF(t, !strcmp(fixed, "\n\nAnswer with a quote from the context.\n") &&
			 !strcmp(ex, "Question: " CHAT_EXAMPLE_Q "\nAnswer: The bakery opened\n\n") &&
			 !strcmp(rest, " When?\nAnswer:") && mk.text_at > mk.example_end,
			 "fixed \"%s\" example \"%s\" rest \"%s\"", fixed, ex, rest);
	} else {
		T_CHECKF(t, 0, "%s", err);
	}
	ct.example = NULL;
	/* and in the chat-template format, after the user turn's opening */
	q.n = 0;
	if (chat_template_init(&ct, model_gguf(f.m), CHAT_FORMAT_TEMPLATE, f.tk, err, sizeof err) == 0 &&
	    chat_build_turn(&q, &ct, f.tk, CHAT_START_AFTER_MODEL, NULL, "When?", 5, 1, &mk,
			    err, sizeof err) == 0) {
		ids_text(f.tk, q.ids + mk.text_at, q.n - mk.text_at, rest, sizeof rest);
		T_CHECKF(t, !strncmp(rest, "When?", 5) && mk.text_at >= 3, "at %d rest \"%s\"",
			 mk.text_at, rest);
	} else {
		T_CHECKF(t, 0, "%s", err);
	}
	chat_tokvec_free(&d);
	chat_tokvec_free(&q);
	chat_tokvec_free(&wd);
	chat_tokvec_free(&wq);
	fix_close(&f);
}

/* -n 2 cuts the answer (stopped: length); with room, the completion
 * format's stop rules end it (stopped: stop) in one line without the stop
 * text; a second question follows the first question and answer in the
 * tokens the model saw. */
static void conv_completion_stops_and_keeps_history(struct test_ctx *t)
{
	struct fix f;
	struct conv_answer a = {0}, b = {0}, c2 = {0};
	static char seen[8192];
	char err[1024], want1[512];
	int rc, rc2 = -1, n_hist = 0;

	if (fix_open(t, &f, 1))
		return;
	f.o.n_predict = 2;
	session_close(f.s);
	f.s = NULL;
	rc = session_open(&f.s, f.m, f.tk, &f.o, g_conv_doc, err, sizeof err);
	if (!rc)
		rc = conv_ask(session_conv(f.s), "Who owns the bakery?", NULL, NULL, &a, err, sizeof err);
	session_close(f.s);
	f.o.n_predict = 48;
	if (!rc)
		rc = session_open(&f.s, f.m, f.tk, &f.o, g_conv_doc, err, sizeof err);
	else
		f.s = NULL;
	if (!rc)
		rc = conv_ask(session_conv(f.s), "Who owns the bakery?", NULL, NULL, &b, err, sizeof err);
	if (!rc)
		rc2 = conv_ask(session_conv(f.s), "What is served next door?", NULL, NULL, &c2, err, sizeof err);
	if (!rc) {
		const int32_t *h = conv_tokens(session_conv(f.s), &n_hist);
		ids_text(f.tk, h, n_hist, seen, sizeof seen);
	}
	snprintf(want1, sizeof want1, "Question: Who owns the bakery?\nAnswer: %s", b.text ? b.text : "?");
	char *p1 = strstr(seen, want1);
	char *p2 = p1 ? strstr(p1, "\n\nAnswer with a quote from the context.\nQuestion: What is served next door?\nAnswer:") : NULL;
	T_CHECKF(t, rc == 0 && rc2 == 0, "%s", err);
	T_CHECKF(t, a.stopped == CONV_STOP_LENGTH && a.n_gen == 2, "stopped %d, %d tokens", a.stopped, a.n_gen);
	T_CHECKF(t, b.stopped == CONV_STOP_STOP && b.n_gen < 48 && b.text_len > 0 &&
		 !strchr(b.text, '\n') && !strstr(b.text, "Question:"),
		 "stopped %d, %d tokens: '%s'", b.stopped, b.n_gen, b.text ? b.text : "");
	T_CHECKF(t, p1 && p2, "history: '%s'", seen);
	conv_answer_free(&a);
	conv_answer_free(&b);
	conv_answer_free(&c2);
	fix_close(&f);
}

/* A document row from before formats were stored (prompt_format NULL)
 * still answers, with the chat-template turns it was ingested with; an
 * unknown format is refused with "ingest it again". */
static void conv_old_format_row_answers(struct test_ctx *t)
{
	struct fix f;
	struct conv_answer a = {0};
	struct store_doc d;
	struct store *st = NULL;
	char err[1024] = "", err2[1024] = "", sql[160];
	int rc, rc2, n_hist = 0, has_turn = 0;
	struct session *s2 = NULL;

	if (fix_open(t, &f, 1))
		return;
	session_close(f.s);
	f.s = NULL;
	snprintf(sql, sizeof sql, "UPDATE documents SET prompt_format = NULL WHERE id = %lld",
		 (long long)g_conv_doc);
	rc = fixture_raw_exec(g_conv_db, sql) == 0 ? 0 : -1;
	if (!rc)
		rc = store_open(&st, g_conv_db, err, sizeof err);
	if (!rc)
		rc = store_doc_get(st, g_conv_doc, &d, err, sizeof err);
	store_close(st);
	if (!rc)
		rc = session_open(&f.s, f.m, f.tk, &f.o, g_conv_doc, err, sizeof err);
	if (!rc)
		rc = conv_ask(session_conv(f.s), "Who owns the bakery?", NULL, NULL, &a, err, sizeof err);
	if (!rc) {
		const int32_t *h = conv_tokens(session_conv(f.s), &n_hist);
		for (int i = 0; i < n_hist; i++)
			has_turn |= h[i] == tok_piece_id(f.tk, "<start_of_turn>");
	}
	snprintf(sql, sizeof sql, "UPDATE documents SET prompt_format = 'sonnet' WHERE id = %lld",
		 (long long)g_conv_doc);
	fixture_raw_exec(g_conv_db, sql);
	rc2 = session_open(&s2, f.m, f.tk, &f.o, g_conv_doc, err2, sizeof err2);
	session_close(s2);
	snprintf(sql, sizeof sql, "UPDATE documents SET prompt_format = 'completion' WHERE id = %lld",
		 (long long)g_conv_doc);
	int restored = fixture_raw_exec(g_conv_db, sql) == 0;
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECK(t, d.prompt_format[0] == 0);
	T_CHECKF(t, a.n_gen > 0 && has_turn, "%d tokens, template turn %d", a.n_gen, has_turn);
	T_CHECKF(t, rc2 == SEKV_EFORMAT && strstr(err2, "ingest it again"), "rc %d: %s", rc2, err2);
	T_CHECK(t, restored);
	conv_answer_free(&a);
	fix_close(&f);
}

/* The probe's baseline: the question turn's fixed part (opening and
 * instruction) lands in base, the question's text and the answer in mass,
 * and together they equal one probe without a baseline (SeKV and full). */
static void conv_probe_splits_fixed_part(struct test_ctx *t)
{
	for (int kv_full = 1; kv_full >= 0; kv_full--) {
		struct fix f;
		struct session_info in;
		struct conv_answer a = {0}, b = {0};
		struct model_probe pr = { .n = 1, .layer = { 5 }, .head = { 1 } };
		float *mass = NULL, *base = NULL, *all = NULL;
		char err[1024];
		double sm = 0, sb = 0, diff = 0;
		int rc;

		if (fix_open(t, &f, kv_full))
			return;
		session_get_info(f.s, &in);
		pr.n_pos = in.n_tok;
		mass = calloc((size_t)in.n_tok, sizeof *mass);
		base = calloc((size_t)in.n_tok, sizeof *base);
		all = calloc((size_t)in.n_tok, sizeof *all);
		pr.mass = mass;
		conv_set_probe(session_conv(f.s), &pr, base);
		rc = conv_ask(session_conv(f.s), "Who owns the bakery?", NULL, NULL, &a, err, sizeof err);
		session_close(f.s);
		f.s = NULL;
		if (!rc)
			rc = session_open(&f.s, f.m, f.tk, &f.o, g_conv_doc, err, sizeof err);
		pr.mass = all;
		if (!rc) {
			conv_set_probe(session_conv(f.s), &pr, NULL);
			rc = conv_ask(session_conv(f.s), "Who owns the bakery?", NULL, NULL, &b, err, sizeof err);
		}
		T_CHECKF(t, rc == 0, "%s", err);
		for (int i = 0; rc == 0 && i < in.n_tok; i++) {
			sm += mass[i];
			sb += base[i];
			diff = fmax(diff, fabs(mass[i] + base[i] - all[i]));
		}
		T_CHECKF(t, sm > 0 && sb > 0 && diff < 1e-5, "kv %s: mass %g base %g diff %g",
			 kv_full ? "full" : "sekv", sm, sb, diff);
		T_CHECK(t, a.text && b.text && !strcmp(a.text, b.text));
		conv_answer_free(&a);
		conv_answer_free(&b);
		free(mass);
		free(base);
		free(all);
		fix_close(&f);
	}
}

/* Logits of each answer position, kept from a step callback (free answer)
 * or a forced one: [CAP][n_vocab]. */
#define FORCED_CAP 32
struct logit_log {
	float *l;          /* [FORCED_CAP][n_vocab] */
	int n_vocab;
	int n;             /* positions recorded */
	int n_null;        /* answer steps without logits */
	int bad_index;     /* a forced callback out of order */
};

static int log_free_step(void *ud, const struct conv_step *st)
{
	struct logit_log *g = ud;
	int i = st->question ? 0 : st->n_gen;
	if (!st->logits) {
		g->n_null += !st->question;
		return 0;
	}
	if (i < FORCED_CAP) {
		memcpy(g->l + (size_t)i * g->n_vocab, st->logits, (size_t)g->n_vocab * sizeof *g->l);
		if (i + 1 > g->n)
			g->n = i + 1;
	}
	return 0;
}

static int log_forced(void *ud, int i, const float *logits)
{
	struct logit_log *g = ud;
	if (i != g->n || i >= FORCED_CAP) {
		g->bad_index = 1;
		return 1;
	}
	memcpy(g->l + (size_t)i * g->n_vocab, logits, (size_t)g->n_vocab * sizeof *g->l);
	g->n++;
	return 0;
}

static int argmax_of(const float *x, int n)
{
	int b = 0;
	for (int i = 1; i < n; i++)
		if (x[i] > x[b])
			b = i;
	return b;
}

/* Teacher forcing (conv_ask_forced) with full KV on the greedy answer of
 * conv_ask over the same stored state sees the very logits the answer was
 * sampled from (top-1 agreement 1, KL 0: equal bits), one callback per
 * answer token in order; forcing other tokens changes later logits; and
 * the forced turn counts, so a question after it is answered. */
static void conv_forced_equals_free_answer(struct test_ctx *t)
{
	struct fix f;
	struct conv_answer a = {0}, b = {0}, c2 = {0};
	struct logit_log lf = {0}, lt = {0}, lx = {0};
	char err[1024];
	const char *q = "Who owns the Harbor Street bakery?";
	int rc, n_vocab, same_bits = 1, top_ok = 1;

	if (fix_open(t, &f, 1))
		return;
	n_vocab = tok_n_vocab(f.tk);
	lf.n_vocab = lt.n_vocab = lx.n_vocab = n_vocab;
	lf.l = malloc((size_t)FORCED_CAP * n_vocab * sizeof *lf.l);
	lt.l = malloc((size_t)FORCED_CAP * n_vocab * sizeof *lt.l);
	lx.l = malloc((size_t)FORCED_CAP * n_vocab * sizeof *lx.l);
	rc = lf.l && lt.l && lx.l ? 0 : SEKV_ENOMEM;
	if (!rc)
		rc = conv_ask(session_conv(f.s), q, log_free_step, &lf, &a, err, sizeof err);
	session_close(f.s);
	f.s = NULL;
	if (!rc)
		rc = session_open(&f.s, f.m, f.tk, &f.o, g_conv_doc, err, sizeof err);
	if (!rc)
		rc = conv_ask_forced(session_conv(f.s), q, a.ids, a.n_gen, log_forced, &lt, &b, err, sizeof err);
	for (int i = 0; !rc && i < a.n_gen && i < lf.n; i++) {
		const float *x = lf.l + (size_t)i * n_vocab, *y = lt.l + (size_t)i * n_vocab;
		same_bits &= !memcmp(x, y, (size_t)n_vocab * sizeof *x);
		top_ok &= argmax_of(x, n_vocab) == argmax_of(y, n_vocab);
	}
	/* a question after the forced answer follows it */
	if (!rc)
		rc = conv_ask(session_conv(f.s), "When does the bakery close?", NULL, NULL, &c2, err, sizeof err);
	/* other forced tokens: the first logits agree, the later ones do not */
	int32_t other[2] = { a.n_gen > 0 && a.ids[0] == 1000 ? 1001 : 1000, 1002 };
	session_close(f.s);
	f.s = NULL;
	if (!rc)
		rc = session_open(&f.s, f.m, f.tk, &f.o, g_conv_doc, err, sizeof err);
	if (!rc)
		rc = conv_ask_forced(session_conv(f.s), q, other, 2, log_forced, &lx, NULL, err, sizeof err);
	int first_same = lx.n == 2 && !memcmp(lx.l, lt.l, (size_t)n_vocab * sizeof *lx.l);
	int second_diff = lx.n == 2 && lt.n >= 2 &&
		memcmp(lx.l + n_vocab, lt.l + n_vocab, (size_t)n_vocab * sizeof *lx.l) != 0;
	int n_gen = a.n_gen, nf = lf.n, nt = lt.n, bad = lt.bad_index || lx.bad_index, n_null = lf.n_null;
	int b_gen = b.n_gen, c_gen = c2.n_gen;
	conv_answer_free(&a);
	conv_answer_free(&b);
	conv_answer_free(&c2);
	free(lf.l);
	free(lt.l);
	free(lx.l);
	fix_close(&f);
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECKF(t, n_gen >= 2, "greedy answer of %d tokens: too short to compare", n_gen);
	T_CHECKF(t, !bad, "forced callback out of order");
	T_CHECKF(t, nt == n_gen && b_gen == n_gen, "%d forced callbacks, %d fed, for %d tokens", nt, b_gen, n_gen);
	T_CHECKF(t, nf >= n_gen - (n_null > 0), "free answer logged %d positions of %d", nf, n_gen);
	T_CHECKF(t, same_bits, "forced logits differ from the free answer's");
	T_CHECK(t, top_ok);
	T_CHECKF(t, c_gen > 0, "no answer after a forced turn");
	T_CHECKF(t, first_same, "logits before the first forced token depend on it");
	T_CHECKF(t, second_diff, "logits after another forced token did not change");
}

const struct test_case test_conv[] = {
	{ "conv_resumed_equals_live_prefill", conv_resumed_equals_live_prefill },
	{ "conv_stop_during_question", conv_stop_during_question },
	{ "conv_evicts_oldest_turns", conv_evicts_oldest_turns },
	{ "conv_stops_at_model_context", conv_stops_at_model_context },
	{ "conv_completion_turns_equal_exact_strings", conv_completion_turns_equal_exact_strings },
	{ "conv_completion_stops_and_keeps_history", conv_completion_stops_and_keeps_history },
	{ "conv_old_format_row_answers", conv_old_format_row_answers },
	{ "conv_probe_splits_fixed_part", conv_probe_splits_fixed_part },
	{ "conv_forced_equals_free_answer", conv_forced_equals_free_answer },
	{ NULL, NULL },
};
