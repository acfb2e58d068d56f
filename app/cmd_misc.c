/* cmd_misc.c - small sub-commands: inspect, tokenize, generate, ingest
 * (and --resume), count, ls, rm, check. The `sekv ls` line format is
 * ls_line's (README.md documents it). */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "app/app.h"
#include "app/extract.h"
#include "app/history.h"
#include "app/import.h"
#include "engine/conv/chat.h"
#include "engine/conv/conv.h"
#include "engine/base/err.h"
#include "engine/base/fmt.h"
#include "engine/gguf/gguf.h"
#include "engine/model/model.h"
#include "engine/tok/tokenizer.h"
#include "store/store.h"

static int fail(const char *cmd, const char *err)
{
	app_errorf("sekv %s: %s\n", cmd, err);
	return 1;
}

/* Usage errors exit 2, like every sub-command. */
static int usage_fail(const char *cmd, const char *usage)
{
	app_errorf("sekv %s: %s\n", cmd, usage);
	return 2;
}

int cmd_inspect(int argc, char **argv)
{
	struct app_opts o;
	struct gguf *g = NULL;
	char err[512];

	if (app_opts_parse(&o, argc, argv, err, sizeof err))
		return usage_fail("inspect", err);
	const char *path = o.n_args > 0 ? o.args[0] : o.model;
	if (gguf_open(&g, path, err, sizeof err))
		return fail("inspect", err);
	gguf_print(g, stdout);
	gguf_close(g);
	return 0;
}

/* Tokenizer from --tokenizer, or from -m (a model or a vocabulary-only GGUF:
 * no model weights are needed, so only the GGUF is opened). */
static int open_tok_only(const struct app_opts *o, struct tok **tk, char *err, size_t errlen)
{
	struct gguf *g = NULL;
	int rc;

	if (o->tokenizer)
		return tok_open_file(tk, o->tokenizer, err, errlen);
	if ((rc = gguf_open(&g, o->model, err, errlen)))
		return rc;
	rc = tok_open_gguf(tk, g, err, errlen);
	gguf_close(g);
	return rc;
}

int cmd_tokenize(int argc, char **argv)
{
	struct app_opts o;
	struct tok *tk = NULL;
	char err[512];
	int rc = 0;

	if (app_opts_parse(&o, argc, argv, err, sizeof err))
		return usage_fail("tokenize", err);
	if (o.n_args != 1)
		return usage_fail("tokenize", "usage: sekv tokenize [-m MODEL | --tokenizer FILE] [--bos] -- TEXT");
	if (open_tok_only(&o, &tk, err, sizeof err))
		return fail("tokenize", err);
	const char *text = o.args[0];
	int n = tok_encode(tk, text, strlen(text), o.bos, NULL, 0, err, sizeof err);
	int32_t *ids = n > 0 ? malloc((size_t)n * sizeof *ids) : NULL;
	if (n < 0 || (n > 0 && !ids)) {
		rc = fail("tokenize", n < 0 ? err : "out of memory");
		goto out;
	}
	n = tok_encode(tk, text, strlen(text), o.bos, ids, n, err, sizeof err);
	for (int i = 0; i < n; i++)
		printf(i ? " %d" : "%d", ids[i]);
	printf("\n");
out:
	free(ids);
	tok_close(tk);
	return rc;
}

static int print_piece(void *ud, const struct conv_step *st)
{
	(void)ud;
	fwrite(st->piece, 1, (size_t)st->piece_len, stdout);
	fflush(stdout);
	return 0;
}

/* A prompt as one chat turn on a fresh full-KV state (prefilled in
 * batches of -b), answered by the conversation's decode loop. */
int cmd_generate(int argc, char **argv)
{
	struct app_opts o;
	struct model *m = NULL;
	struct tok *tk = NULL;
	struct model_state *ms = NULL;
	struct conv *c = NULL;
	struct conv_params cp;
	struct conv_kv kv;
	struct conv_answer a = {0};
	struct chat_template ct;
	struct chat_tokvec v = {0};
	char err[512];
	int rc = 1;

	if (app_opts_parse(&o, argc, argv, err, sizeof err))
		return usage_fail("generate", err);
	if (!o.prompt && o.n_args == 1)
		o.prompt = o.args[0];
	if (!o.prompt)
		return usage_fail("generate", "usage: sekv generate [-m MODEL] -p TEXT [-n N] [--temp T] [--seed S]");
	if (app_load(&o, &m, &tk, err, sizeof err))
		return fail("generate", err);
	/* the turn is built here once to size the state */
	if (chat_template_init(&ct, model_gguf(m), chat_format_of_gguf(model_gguf(m)), tk, err,
			       sizeof err) ||
	    chat_build_turn(&v, &ct, tk, CHAT_START_STREAM, NULL, o.prompt, strlen(o.prompt), 1,
			    NULL, err, sizeof err) ||
	    model_state_new(&ms, m, v.n + o.n_predict + 1, o.n_batch, 1, err, sizeof err)) {
		fail("generate", err);
		goto out;
	}
	conv_default_params(&cp);
	cp.n_predict = o.n_predict;
	cp.tail_cap = v.n + o.n_predict + 1;
	cp.n_batch = o.n_batch;
	cp.sampler.temperature = o.temperature;
	cp.sampler.seed = o.seed;
	cp.sampler.repeat_penalty = o.repeat_penalty;
	conv_kv_full(&kv);
	if (conv_new(&c, m, tk, ms, &kv, &cp, err, sizeof err) ||
	    conv_ask(c, o.prompt, print_piece, NULL, &a, err, sizeof err)) {
		fail("generate", err);
		goto out;
	}
	fwrite(a.rest, 1, (size_t)a.n_rest, stdout);
	printf("\n");
	if (!o.quiet)
		app_errorf("generate: %d tokens, %.1f tokens/s\n", a.n_gen, a.decode_tps);
	rc = 0;
out:
	conv_answer_free(&a);
	conv_free(c);
	model_state_free(ms);
	chat_tokvec_free(&v);
	tok_close(tk);
	model_close(m);
	return rc;
}

/* Ctrl-C during an ingest: the chunks committed so far are kept (each
 * is its own transaction; the one in flight is rolled back by SQLite at
 * the next open), so the handler only prints the ids of the documents
 * stored so far on stdout, as a finished ingest does, and says how to
 * continue, then exits as the signal would. Lines are formatted outside
 * the handler. */
static char g_intr_msg[160];
static volatile sig_atomic_t g_intr_len;
static int64_t g_intr_doc; /* the document g_intr_msg names */
static char g_intr_ids[4096]; /* "ID\n" of each document reported, in order */
static volatile sig_atomic_t g_intr_ids_len;

static void on_sigint(int sig)
{
	if (g_intr_ids_len > 0 && write(1, g_intr_ids, (size_t)g_intr_ids_len) < 0)
		g_intr_ids_len = 0;
	if (g_intr_len > 0 && write(2, g_intr_msg, (size_t)g_intr_len) < 0)
		g_intr_len = 0;
	signal(sig, SIG_DFL);
	raise(sig);
}

static void ingest_progress(void *ud, const struct app_ingest_progress *p)
{
	/* each part of a split document is a document of its own: the line
	 * names the one being written (between parts, the last one stored,
	 * whose resume stores the rest); the handler sees no line while it is
	 * rewritten, never half of one, and the ids only up to a whole line */
	if (p->doc > 0 && p->doc != g_intr_doc) {
		int at = g_intr_ids_len, w = snprintf(g_intr_ids + at, sizeof g_intr_ids - (size_t)at,
						      "%lld\n", (long long)p->doc);
		atomic_signal_fence(memory_order_seq_cst);
		if (w > 0 && (size_t)w < sizeof g_intr_ids - (size_t)at)
			g_intr_ids_len = at + w;
		g_intr_doc = p->doc;
		g_intr_len = 0;
		atomic_signal_fence(memory_order_seq_cst);
		int n = snprintf(g_intr_msg, sizeof g_intr_msg, "\nsekv ingest: interrupted; the "
				 "chunks committed are kept: continue with 'sekv ingest --resume %lld'\n",
				 (long long)p->doc);
		atomic_signal_fence(memory_order_seq_cst);
		g_intr_len = n > 0 && n < (int)sizeof g_intr_msg ? n : 0;
	}
	/* the document is stored whole: a Ctrl-C from now on has nothing to
	 * resume in it */
	if (!strcmp(p->stage, "stored") && !p->more) {
		g_intr_len = 0;
		atomic_signal_fence(memory_order_seq_cst);
		int n = snprintf(g_intr_msg, sizeof g_intr_msg, "\nsekv ingest: interrupted after "
				 "document %lld was stored whole; nothing after it was begun\n",
				 (long long)p->doc);
		atomic_signal_fence(memory_order_seq_cst);
		g_intr_len = n > 0 && n < (int)sizeof g_intr_msg ? n : 0;
	}
	if (ud)
		app_ingest_print(ud, p);
}

/* `sekv ingest --rebuild DOC`: the memory built again with o's settings. */
static int ingest_rebuild(const struct app_opts *o, int64_t id)
{
	struct model *m = NULL;
	struct tok *tk = NULL;
	char err[2048];
	int rc;

	if (!(rc = app_load(o, &m, &tk, err, sizeof err)))
		rc = app_mem_rebuild(o, m, id, o->budget, err, sizeof err);
	tok_close(tk);
	model_close(m);
	if (rc)
		return fail("ingest", err);
	printf("%lld\n", (long long)id);
	return 0;
}

int cmd_ingest(int argc, char **argv)
{
	struct app_opts o;
	struct app_ingest_meter mt;
	char err[2048];
	int64_t *ids = NULL, id = 0;
	int n = 0, rc;

	if (app_opts_parse(&o, argc, argv, err, sizeof err))
		return usage_fail("ingest", err);
	if (o.resume && o.rebuild)
		return usage_fail("ingest", "--resume and --rebuild: one at a time");
	if (o.resume || o.rebuild ? o.n_args != 0 || app_parse_doc_id(o.resume ? o.resume : o.rebuild,
								      &id) : o.n_args != 1)
		return usage_fail("ingest", "usage: sekv ingest FILE [--title T] [--password PW] "
				  "[--max-tokens N] [--split] [--budget F] [--rmax R] [-m MODEL] [--db FILE] "
				  "| sekv ingest --resume DOC [--password PW] [-m MODEL] [--db FILE] "
				  "| sekv ingest --rebuild DOC [--budget F ...] [-m MODEL] [--db FILE]");
	if (app_check_db(&o, err, sizeof err))
		return fail("ingest", err);
	if (o.rebuild)
		return ingest_rebuild(&o, id);
	app_ingest_meter_init(&mt);
	signal(SIGINT, on_sigint);
	signal(SIGTERM, on_sigint);
	if (o.resume)
		rc = app_ingest_resume(&o, id, ingest_progress, o.quiet ? NULL : &mt, &ids, &n, err,
				       sizeof err);
	else
		rc = app_ingest_parts(&o, o.args[0], ingest_progress, o.quiet ? NULL : &mt, &ids, &n,
				      err, sizeof err);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	/* every document stored, also before a failure exit (stdout: ids only) */
	for (int i = 0; i < n; i++)
		printf("%lld\n", (long long)ids[i]);
	free(ids);
	fflush(stdout);
	if (rc)
		return fail("ingest", err);
	return 0;
}

/* One `sekv ls` line: id, state (ready; ingesting: another process holds
 * its ingest lock; incomplete), tokens (done/all while incomplete), size
 * on disk, date, model, title; tab-separated, the title (free text) last,
 * with control bytes made spaces. A ready part of a --split ingest whose
 * later parts were never begun reads incomplete too, its tokens naming the
 * parts not stored (its resume stores them). */
static void ls_line(struct store *st, struct store_doc *d)
{
	char when[32], disk[32], tokens[96];
	struct store_ingest in;
	time_t t = (time_t)d->created;
	struct tm tm;
	int ready = d->state == STORE_DOC_READY;

	for (char *c = d->title; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			*c = ' ';
	localtime_r(&t, &tm);
	strftime(when, sizeof when, "%Y-%m-%d %H:%M", &tm);
	fmt_bytes(d->disk_bytes > 0 ? (size_t)d->disk_bytes : 0, disk, sizeof disk);
	int resumable = store_ingest_get(st, d->id, &in, NULL, NULL, 0) == 0;
	int pending = ready && resumable && in.next_pending;
	if (pending && in.part + 2 == in.n_part)
		snprintf(tokens, sizeof tokens, "%lld tokens; part %d of %d not stored",
			 (long long)d->n_tok, in.n_part, in.n_part);
	else if (pending)
		snprintf(tokens, sizeof tokens, "%lld tokens; parts %d-%d of %d not stored",
			 (long long)d->n_tok, in.part + 2, in.n_part, in.n_part);
	else if (!ready && resumable)
		snprintf(tokens, sizeof tokens, "%lld/%lld tokens", (long long)d->n_tok,
			 (long long)in.n_tok_total);
	else
		snprintf(tokens, sizeof tokens, "%lld tokens", (long long)d->n_tok);
	printf("%lld\t%s\t%s\t%s\t%s\t%s\t%s\n", (long long)d->id, ready && !pending ? "ready" :
	       store_doc_busy(st, d->id) ? "ingesting" : "incomplete", tokens, disk, when,
	       d->model_name, d->title);
}

/* The line on how the plan would store a document longer than its limit. */
static void print_plan(const char *path, const struct app_plan *pl, int n_ctx)
{
	char line[1024];
	size_t at = 0;

	at += (size_t)snprintf(line, sizeof line, "%s: longer than %d tokens (%s): --split stores "
			       "%d parts (", path, pl->limit, pl->limit == n_ctx ? "the model's context"
			       : "--max-tokens", pl->n_part);
	for (int i = 0; i < pl->n_part && at < sizeof line; i++)
		at += (size_t)snprintf(line + at, sizeof line - at, "%s%d", i ? ", " : "", pl->part[i].n_tok);
	if (at < sizeof line)
		snprintf(line + at, sizeof line - at, " tokens), --max-tokens %d stores the first %d tokens\n",
			 pl->limit, pl->part[0].n_tok);
	app_print_inert(stdout, line, strlen(line));
}

/* count of a chat history: each conversation --conversation picks, as
 * ingest renders and stores it (its own document). 0, or 1 on an error
 * (printed). */
static int count_history(const struct app_opts *o, enum history_kind kind, const struct extract_doc *x,
			 const struct chat_template *ct, const struct tok *tk)
{
	struct history h;
	char err[1024], line[1024];
	int first = 0, last = -1, rc;

	if ((rc = history_parse(&h, kind, o->args[0], x->text, x->len, err, sizeof err)) ||
	    (rc = history_select(&h, o->conversation, &first, &last, err, sizeof err))) {
		history_free(&h);
		return fail("count", err);
	}
	snprintf(line, sizeof line, "%s: a chat history (%s), %d conversation%s; each is stored as "
		 "its own document:\n", o->args[0], history_kind_name(h.kind), h.n_conv,
		 h.n_conv == 1 ? "" : "s");
	app_print_inert(stdout, line, strlen(line));
	for (int i = first; !rc && i <= last; i++) {
		struct import_conv ic;
		struct chat_tokvec tv = { 0 };
		char *text = NULL;
		size_t len = 0;
		if ((rc = import_conv_of(&h.conv[i], NULL, &ic)) == 0 && ic.n_turn == 0)
			snprintf(line, sizeof line, "  %d. %s: no answered message (left out)\n", ic.index,
				 ic.title);
		else if (!rc && !(rc = import_render(&ic, ct, tk, &tv, &text, &len, err, sizeof err)))
			snprintf(line, sizeof line, "  %d. %s: %d tokens, %d turn%s\n", ic.index, ic.title,
				 tv.n, ic.n_turn, ic.n_turn == 1 ? "" : "s");
		if (!rc)
			app_print_inert(stdout, line, strlen(line));
		free(text);
		chat_tokvec_free(&tv);
		import_conv_free(&ic);
	}
	history_free(&h);
	return rc ? fail("count", err) : 0;
}

/* sekv count FILE: the tokens ingest would store (and a PDF's pages),
 * from the tokenizer alone: no prefill. */
int cmd_count(int argc, char **argv)
{
	struct app_opts o;
	struct model *m = NULL;
	struct tok *tk = NULL;
	struct chat_template ct;
	struct extract_doc x = { 0 };
	struct app_plan pl = { 0 };
	struct extract_params p = { 0 };
	char err[1024], line[1024];
	int rc = 1;

	if (app_opts_parse(&o, argc, argv, err, sizeof err))
		return usage_fail("count", err);
	if (o.n_args != 1)
		return usage_fail("count", "usage: sekv count FILE [--password PW] [--max-tokens N] [-m MODEL]");
	p.password = o.password;
	if (!o.password && isatty(0))
		p.ask_password = app_ask_password;
	if (extract_file(o.args[0], &p, &x, err, sizeof err) || app_load(&o, &m, &tk, err, sizeof err) ||
	    chat_template_init(&ct, model_gguf(m), chat_format_of_gguf(model_gguf(m)), tk, err,
			       sizeof err)) {
		fail("count", err);
		goto out;
	}
	enum history_kind kind = x.n_page ? HISTORY_NONE : history_detect(o.args[0], x.text, x.len);
	if (kind != HISTORY_NONE) {
		rc = count_history(&o, kind, &x, &ct, tk);
		goto out;
	}
	int n_ctx = model_hparams(m)->n_ctx_train;
	if (app_plan(&pl, &ct, tk, x.text, x.len, n_ctx, o.max_tokens, 1, err, sizeof err)) {
		fail("count", err);
		goto out;
	}
	if (x.n_page)
		snprintf(line, sizeof line, "%d tokens, %d pages: %s\n", pl.n_tok, x.n_page, o.args[0]);
	else
		snprintf(line, sizeof line, "%d tokens: %s\n", pl.n_tok, o.args[0]);
	app_print_inert(stdout, line, strlen(line));
	if (!o.quiet) {
		app_extract_describe(o.args[0], &x, line, sizeof line - 1);
		strcat(line, "\n");
		app_print_inert(stdout, line, strlen(line));
		if (pl.n_part > 1)
			print_plan(o.args[0], &pl, n_ctx);
	}
	rc = 0;
out:
	app_plan_free(&pl);
	extract_doc_free(&x);
	tok_close(tk);
	model_close(m);
	return rc;
}

int cmd_ls(int argc, char **argv)
{
	struct app_opts o;
	struct store *st = NULL;
	struct store_doc *docs = NULL;
	char err[512];
	int n = 0;

	if (app_opts_parse(&o, argc, argv, err, sizeof err))
		return usage_fail("ls", err);
	if (app_check_db(&o, err, sizeof err))
		return fail("ls", err);
	if (access(o.db, F_OK) != 0) {
		if (!o.quiet)
			app_errorf("sekv ls: no library at %s yet: add a document with 'sekv ingest FILE'\n", o.db);
		return 0;
	}
	if (store_open(&st, o.db, err, sizeof err) || store_doc_list(st, &docs, &n, err, sizeof err)) {
		store_close(st);
		return fail("ls", err);
	}
	if (n == 0 && !o.quiet)
		app_errorf("sekv ls: no documents in %s yet: add one with 'sekv ingest FILE'\n", o.db);
	for (int i = 0; i < n; i++)
		ls_line(st, &docs[i]);
	free(docs);
	store_close(st);
	return 0;
}

static void print_problem(void *ud, const char *problem)
{
	(void)ud;
	printf("%s\n", problem);
}

int cmd_check(int argc, char **argv)
{
	struct app_opts o;
	struct store *st = NULL;
	char err[512];
	int n = 0;

	if (app_opts_parse(&o, argc, argv, err, sizeof err))
		return usage_fail("check", err);
	if (o.n_args)
		return usage_fail("check", "usage: sekv check [--db FILE]");
	if (app_check_db(&o, err, sizeof err))
		return fail("check", err);
	if (access(o.db, F_OK) != 0) {
		snprintf(err, sizeof err, "no library at %.400s", o.db);
		return fail("check", err);
	}
	if (store_open(&st, o.db, err, sizeof err) || store_check(st, print_problem, NULL, &n, err, sizeof err)) {
		store_close(st);
		return fail("check", err);
	}
	store_close(st);
	fflush(stdout);
	if (n) {
		app_errorf("sekv check: %s: %d problem%s\n", o.db, n, n == 1 ? "" : "s");
		return 1;
	}
	if (!o.quiet)
		app_errorf("sekv check: %s: ok\n", o.db);
	return 0;
}

/* sekv rm DOC (delete), or with --only-full-kv (drop its exact KV): 0, or
 * 1 with the error printed. */
static int rm_doc(struct store *st, const struct app_opts *o, int64_t id)
{
	struct store_doc d, after;
	char err[512];
	int rc = o->only_full_kv ? store_doc_get(st, id, &d, err, sizeof err) : 0;

	if (!rc && o->only_full_kv && d.state == STORE_DOC_READY && !d.full_kv) {
		if (!o->quiet)
			app_errorf("sekv rm: document %lld keeps no exact KV: nothing deleted\n", (long long)id);
		return 0;
	}
	if (!rc)
		rc = o->only_full_kv ? store_doc_drop_full_kv(st, id, err, sizeof err) :
		     store_doc_delete(st, id, err, sizeof err);
	if (rc == SEKV_ENOTFOUND)
		snprintf(err, sizeof err, "document %lld is not in %.400s (see 'sekv ls')", (long long)id, o->db);
	else if (rc == SEKV_EBUSY || (rc == SEKV_EINVAL && o->only_full_kv && store_doc_busy(st, id)))
		snprintf(err, sizeof err, "document %lld is being ingested by another process", (long long)id);
	else if (rc == SEKV_EINVAL && o->only_full_kv)
		snprintf(err, sizeof err, "document %lld is incomplete: its exact KV is what "
			 "'sekv ingest --resume %lld' continues from", (long long)id, (long long)id);
	if (rc)
		return fail("rm", err);
	if (o->quiet)
		return 0;
	if (!o->only_full_kv)
		app_errorf("sekv rm: document %lld deleted\n", (long long)id);
	else if (store_doc_get(st, id, &after, NULL, 0) == 0)
		app_errorf("sekv rm: document %lld: exact KV deleted (%.1f MiB freed)\n", (long long)id,
			   (double)(d.disk_bytes - after.disk_bytes) / 1048576.0);
	return 0;
}

int cmd_rm(int argc, char **argv)
{
	struct app_opts o;
	struct store *st = NULL;
	char err[512];
	int rc = 0;

	if (app_opts_parse(&o, argc, argv, err, sizeof err))
		return usage_fail("rm", err);
	/* the exact KV is a document's: a session has none of its own */
	if ((o.n_args < 1 && !o.session_id) || (o.only_full_kv && o.session_id))
		return usage_fail("rm", "usage: sekv rm [--only-full-kv] DOC... | sekv rm --session ID");
	if (app_check_db(&o, err, sizeof err))
		return fail("rm", err);
	if (access(o.db, F_OK) != 0) {
		snprintf(err, sizeof err, "no library at %.400s", o.db);
		return fail("rm", err);
	}
	if (store_open(&st, o.db, err, sizeof err))
		return fail("rm", err);
	if (o.session_id) {
		int src = store_session_delete(st, o.session_id, err, sizeof err);
		if (src == SEKV_ENOTFOUND)
			snprintf(err, sizeof err, "session %d is not in %.400s (see 'sekv sessions')",
				 o.session_id, o.db);
		if (src)
			rc = fail("rm", err);
		else if (!o.quiet)
			app_errorf("sekv rm: session %d deleted\n", o.session_id);
	}
	for (int i = 0; i < o.n_args; i++) {
		int64_t id;
		if (app_parse_doc_id(o.args[i], &id)) {
			app_errorf("sekv rm: " APP_DOC_ID_BAD "\n", o.args[i]);
			rc = 2;
		} else if (rm_doc(st, &o, id)) {
			rc = 1;
		}
	}
	store_close(st);
	return rc;
}
