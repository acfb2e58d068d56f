/* cmd_session.c - `sekv sessions` (the stored conversations, one line
 * each) and `sekv export SESSION` (one as Markdown: every question, its
 * answer and its evidence passages quoted from the document, with their
 * page numbers when it came from a PDF). Turns are
 * stored by app/session.c (session_record_turn) as `ask` and `chat`
 * answer. Outside text (titles, questions, answers, the document) reaches
 * stdout only through app_print_inert.
 */
#include "app/app.h"
#include "engine/base/err.h"
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void when_text(double t, char *buf, size_t cap)
{
	time_t tt = (time_t)t;
	struct tm tm;

	localtime_r(&tt, &tm);
	strftime(buf, cap, "%Y-%m-%d %H:%M", &tm);
}

/* Opens the library of o for reading, or says why not (exit code in *code). */
static int open_library(const struct app_opts *o, const char *cmd, struct store **st, int *code)
{
	char err[512];

	*st = NULL;
	if (app_check_db(o, err, sizeof err)) {
		app_errorf("sekv %s: %s\n", cmd, err);
		*code = 1;
		return -1;
	}
	if (access(o->db, F_OK) != 0) {
		app_errorf("sekv %s: no library at %s yet: add a document with 'sekv ingest FILE'\n",
			   cmd, o->db);
		*code = 1;
		return -1;
	}
	if (store_open(st, o->db, err, sizeof err)) {
		app_errorf("sekv %s: %s\n", cmd, err);
		*code = 1;
		return -1;
	}
	return 0;
}

/* One record per line, tab-separated, the title made one inert line. */
static void print_session_line(const struct store_session *ss)
{
	char when[32], line[512];

	when_text(ss->last_used, when, sizeof when);
	snprintf(line, sizeof line, "%lld\tdoc %lld\t", (long long)ss->id, (long long)ss->doc);
	fputs(line, stdout);
	for (const char *c = ss->doc_title; *c; c++)
		putchar((unsigned char)*c < 0x20 || *c == 0x7f ? ' ' : *c);
	printf("\t%d turn%s\t%lld tokens\t%s\t%s\n", ss->n_turn, ss->n_turn == 1 ? "" : "s",
	       (long long)ss->n_tok, ss->kv, when);
}

int cmd_sessions(int argc, char **argv)
{
	struct app_opts o;
	struct store *st;
	struct store_session *v = NULL;
	char err[512];
	int64_t doc = -1;
	int n = 0, code = 0;

	if (app_opts_parse(&o, argc, argv, err, sizeof err)) {
		app_errorf("sekv sessions: %s\n", err);
		return 2;
	}
	if (o.n_args > 1) {
		app_errorf("sekv sessions: usage: sekv sessions [DOC]\n");
		return 2;
	}
	if (o.n_args == 1 && app_parse_doc_id(o.args[0], &doc)) {
		app_errorf("sekv sessions: " APP_DOC_ID_BAD "\n", o.args[0]);
		return 2;
	}
	if (open_library(&o, "sessions", &st, &code))
		return code;
	if (store_session_list(st, doc, &v, &n, err, sizeof err)) {
		app_errorf("sekv sessions: %s\n", err);
		store_close(st);
		return 1;
	}
	if (n == 0 && !o.quiet)
		app_errorf("sekv sessions: none yet: 'sekv ask' and 'sekv chat' store every answer\n");
	for (int i = 0; i < n; i++)
		print_session_line(&v[i]);
	free(v);
	store_close(st);
	return 0;
}

/* One turn as Markdown; passages quoted from text [text_len], with their
 * pages when pg has a map (a PDF). */
static void export_turn(const struct store_turn *t, const char *text, size_t text_len,
			const struct app_pages *pg)
{
	char head[64], snip[512], page[48];

	snprintf(head, sizeof head, "## %d. ", t->idx + 1);
	fputs(head, stdout);
	app_print_inert(stdout, t->question, strlen(t->question));
	fputs("\n\n", stdout);
	app_print_inert(stdout, t->answer, strlen(t->answer));
	if (!strcmp(t->stopped, "length"))
		fputs(" *(cut at the length limit)*", stdout);
	else if (!strcmp(t->stopped, "user"))
		fputs(" *(stopped)*", stdout);
	fputs("\n\n", stdout);
	if (t->n_ev == 0)
		return;
	fputs("Evidence (retrieval heads ", stdout);
	app_print_inert(stdout, t->heads[0] ? t->heads : "?", t->heads[0] ? strlen(t->heads) : 1);
	fputs("):\n\n", stdout);
	for (int i = 0; i < t->n_ev; i++) {
		const struct store_evidence_row *r = &t->ev[i];
		app_pages_text(pg, r->start, r->end, page, sizeof page - 2);
		if (page[0])
			strcat(page, ", ");
		printf("%d. %sbytes [%lld, %lld) (%.0f%% into the document), score %+.1f%%", r->rank,
		       page, (long long)r->start, (long long)r->end,
		       text_len ? 100.0 * (double)r->start / (double)text_len : 0.0, 100.0 * r->score);
		if (r->end > (int64_t)text_len) {
			fputs(" (outside the stored text)\n", stdout);
			continue;
		}
		app_evidence_snippet(text, r->start, r->end, snip, 400);
		fputs("\n   > ", stdout);
		app_print_inert(stdout, snip, strlen(snip));
		fputc('\n', stdout);
	}
	fputc('\n', stdout);
}

int cmd_export(int argc, char **argv)
{
	struct app_opts o;
	struct store *st;
	struct store_session ss;
	struct store_turn *t = NULL;
	struct app_pages pg = { 0 };
	char err[512], when[32], *text = NULL;
	size_t text_len = 0;
	int64_t id;
	int n = 0, code = 0;

	if (app_opts_parse(&o, argc, argv, err, sizeof err)) {
		app_errorf("sekv export: %s\n", err);
		return 2;
	}
	if (o.n_args != 1 || app_parse_doc_id(o.args[0], &id)) {
		app_errorf("sekv export: usage: sekv export SESSION (a number from 'sekv sessions')\n");
		return 2;
	}
	if (open_library(&o, "export", &st, &code))
		return code;
	int rc = store_session_get(st, id, &ss, err, sizeof err);
	if (rc == SEKV_ENOTFOUND)
		snprintf(err, sizeof err, "session %lld is not in %.400s (see 'sekv sessions')",
			 (long long)id, o.db);
	if (rc || store_session_turns_dup(st, id, &t, &n, err, sizeof err) ||
	    store_doc_text_dup(st, ss.doc, &text, &text_len, err, sizeof err) ||
	    app_pages_load(&pg, st, ss.doc, err, sizeof err)) {
		app_errorf("sekv export: %s\n", err);
		free(text);
		store_turns_free(t, n);
		store_close(st);
		return 1;
	}
	when_text(ss.created, when, sizeof when);
	printf("# Session %lld: ", (long long)ss.id);
	app_print_inert(stdout, ss.doc_title, strlen(ss.doc_title));
	printf("\n\nDocument %lld, %d turn%s, answered from %s, started %s.\n\n", (long long)ss.doc,
	       n, n == 1 ? "" : "s", !strcmp(ss.kv, "full") ? "the full KV cache" : "the SeKV memory",
	       when);
	for (int i = 0; i < n; i++)
		export_turn(&t[i], text, text_len, &pg);
	app_pages_free(&pg);
	free(text);
	store_turns_free(t, n);
	store_close(st);
	return 0;
}
