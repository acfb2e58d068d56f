/* cmd_chat.c - `sekv chat [DOC]`: the terminal UI over a session. Without
 * DOC, the newest ready document is opened; with --session ID, the stored
 * transcript is shown first, each answer with its stored evidence in the
 * lines a live answer shows (app_transcript_load). The UI sees the engine
 * only through struct ui_frame: this step's SeKV live statistics (their
 * zoom records as they are) and the document's span list. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/app.h"
#include "app/session.h"
#include "engine/conv/conv.h"
#include "engine/base/err.h"
#include "engine/model/model.h"
#include "engine/sekv/sekv.h"
#include "engine/tok/tokenizer.h"
#include "store/store.h"
#include "ui/ui.h"

struct chat_app {
	struct session *s;
	struct session_info info;
	struct ui_chat *ui;
	struct app_opts o;        /* quiet: nothing may reach stderr under curses */
	const struct model *m;
	const struct tok *tk;
	int evidence;             /* retrieval heads known: list evidence */
};

/* Evidence passages of the answer as transcript notes (ui text is inert);
 * a resumed session's stored rows read the same (app_transcript_load). */
static void note_evidence(struct ui_chat *ui, const struct app_evidence *ev)
{
	char msg[APP_EVIDENCE_NOTE];

	for (int i = 0; ev->on && i < ev->n_pas; i++) {
		app_evidence_note(ev->text, ev->text_len, &ev->pages, &ev->pas[i], msg, sizeof msg);
		ui_chat_note(ui, msg);
	}
}

static int on_step(void *ud, const struct conv_step *st)
{
	struct chat_app *c = ud;
	struct ui_frame f;

	if (st->question) /* no piece yet: only Ctrl-C is looked at */
		return ui_chat_on_token(c->ui, NULL);

	memset(&f, 0, sizeof f);
	f.piece = st->piece;
	f.piece_len = st->piece_len;
	f.n_gen = st->n_gen;
	f.tps = st->tps;
	f.n_layer = c->info.n_layer;
	f.n_head = c->info.n_head;
	f.layer_id = c->info.layer_id;
	f.n_tok_doc = c->info.n_tok_memory;
	f.resident_bytes = st->resident_bytes;
	f.peak_resident_bytes = st->peak_resident_bytes;
	f.full_kv_bytes = c->info.full_kv_bytes;
	f.host_bytes = c->info.host_bytes;
	f.mode = c->info.method;
	if (!c->info.kv_full)
		f.budget_bytes = (size_t)(c->info.budget * (double)c->info.full_kv_bytes);
	if (st->stats && c->info.mem) {
		f.stats = st->stats;
		f.n_span = c->info.mem->n_span;
		f.span = c->info.mem->span;
	}
	return ui_chat_on_token(c->ui, &f);
}

static int chat_ask(void *ud, struct ui_chat *ui, const char *q, char *err, size_t errlen)
{
	struct chat_app *c = ud;
	struct conv_answer a;

	struct app_evidence ev = {0};
	char e2[256];
	int rc;

	c->ui = ui;
	/* the memory grew with the last turn: its spans are new */
	session_get_info(c->s, &c->info);
	if (c->evidence && app_evidence_begin(&ev, &c->o, c->s, c->m, c->tk, e2, sizeof e2))
		ev.on = 0;
	rc = conv_ask(session_conv(c->s), q, on_step, c, &a, err, errlen);
	if (ev.on && (rc == 0 || rc == SEKV_EINTR) &&
	    app_evidence_end(&ev, c->s, c->tk, e2, sizeof e2) == 0)
		note_evidence(ui, &ev);
	else if (ev.on) {
		conv_set_probe(session_conv(c->s), NULL, NULL);
		ev.on = 0; /* no passages to store */
	}
	if (rc == 0 || rc == SEKV_EINTR) {
		int first = session_stored_id(c->s) == 0;
		char msg[600];
		if (session_record_turn(c->s, q, &a, &ev, e2, sizeof e2)) {
			snprintf(msg, sizeof msg, "not saved in the library: %s", e2);
			ui_chat_note(ui, msg);
		} else if (first) {
			snprintf(msg, sizeof msg, "saved as session %lld ('sekv export %lld' writes it as Markdown)",
				 (long long)session_stored_id(c->s), (long long)session_stored_id(c->s));
			ui_chat_note(ui, msg);
		}
	}
	app_evidence_free(&ev);
	if (rc == 0 && a.stopped == CONV_STOP_LENGTH) {
		char msg[96];
		snprintf(msg, sizeof msg, "… (answer cut at %d tokens)", a.n_gen);
		ui_chat_note(ui, msg);
	}
	if (a.warn[0])
		ui_chat_note(ui, a.warn);
	if (a.repeats_example)
		ui_chat_note(ui, "the answer repeats the worked example (the document's first words): "
			     "the model likely found no answer");
	if (a.n_evicted_turns > 0) {
		char msg[160];
		snprintf(msg, sizeof msg, "memory: the %d oldest turn%s (%d tokens) left the model's memory to stay within the budget",
			 a.n_evicted_turns, a.n_evicted_turns > 1 ? "s" : "", a.n_evicted_tokens);
		ui_chat_note(ui, msg);
	}
	conv_answer_free(&a);
	return rc;
}

static void chat_span_text(void *ud, int32_t start, int32_t len, char *buf, size_t cap)
{
	struct chat_app *c = ud;
	session_span_text(c->s, start, len, buf, cap);
}

/* Newest document in state READY, or 0. */
static int64_t newest_doc(const struct app_opts *o, char *err, size_t errlen)
{
	struct store *st = NULL;
	struct store_doc *docs = NULL;
	int n = 0;
	int64_t id = 0;

	if (store_open(&st, o->db, err, errlen) == 0 && store_doc_list(st, &docs, &n, err, errlen) == 0)
		for (int i = n - 1; i >= 0 && !id; i--)
			if (docs[i].state == STORE_DOC_READY)
				id = docs[i].id;
	free(docs);
	store_close(st);
	return id;
}

/* Finds the retrieval heads before the screen opens (a first calibration
 * reports on stderr and stores them), so each answer only probes. 1 when
 * evidence can be listed, 0 when not (a failed calibration is reported
 * and only turns it off), -1 when --evidence-heads does not fit the model
 * (reported: the user asked for something that cannot be). */
static int resolve_evidence_heads(const struct app_opts *o, struct session *s,
				  const struct model *m, const struct tok *tk)
{
	struct app_evidence ev;
	char err[512];

	if (o->no_evidence)
		return 0;
	if (app_evidence_begin(&ev, o, s, m, tk, err, sizeof err)) {
		if (o->evidence_heads)
			app_errorf("sekv chat: %s\n", err);
		else
			app_errorf("sekv chat: no evidence for answers: %s\n", err);
		app_evidence_free(&ev);
		return o->evidence_heads ? -1 : 0;
	}
	conv_set_probe(session_conv(s), NULL, NULL);
	app_evidence_free(&ev);
	return 1;
}

int app_transcript_load(struct app_transcript *tr, struct store *st, int64_t session,
			int64_t doc, char *err, size_t errlen)
{
	int rc;

	memset(tr, 0, sizeof *tr);
	if ((rc = store_session_turns_dup(st, session, &tr->turns, &tr->n, err, errlen)))
		return rc;
	if (!(tr->ut = calloc((size_t)tr->n + 1, sizeof *tr->ut))) {
		app_transcript_free(tr);
		return sekv_errf(err, errlen, SEKV_ENOMEM, "chat: out of memory");
	}
	/* evidence that cannot be read leaves the transcript whole; e2 is
	 * also written on success (a text document has no page map) */
	char e2[sizeof tr->why] = "";
	if ((rc = app_evidence_notes_load(&tr->notes, st, doc, tr->turns, tr->n, e2, sizeof e2)))
		snprintf(tr->why, sizeof tr->why, "%s", e2[0] ? e2 : sekv_strerror(rc));
	for (int i = 0, k = 0; i < tr->n; i++) {
		const struct store_turn *t = &tr->turns[i];
		int n_note = tr->notes.n_note ? t->n_ev : 0;
		tr->ut[i] = (struct ui_turn){ t->question, t->answer,
					     n_note ? tr->notes.note + k : NULL, n_note };
		k += n_note;
	}
	return 0;
}

void app_transcript_free(struct app_transcript *tr)
{
	free(tr->ut);
	app_evidence_notes_free(&tr->notes);
	store_turns_free(tr->turns, tr->n);
	memset(tr, 0, sizeof *tr);
}

/* Session id's transcript into tr (app_transcript_load) and the line said
 * after it into msg [cap] (or why it cannot be read). 0 or a negative code. */
static int transcript_of(struct chat_app *c, int64_t id, struct app_transcript *tr,
			 char *msg, size_t cap)
{
	int rc = app_transcript_load(tr, session_store(c->s), id, c->info.doc_id, msg, cap);

	if (rc)
		return rc;
	snprintf(msg, cap, "session %lld resumed in %.2f s: %d turn%s, the model remembers them "
		 "(%d tokens after the document's)%s%s%s%s", (long long)id, c->info.resume_s,
		 tr->n, tr->n == 1 ? "" : "s", c->info.n_tok_memory - c->info.n_tok,
		 c->info.note[0] ? "; " : "", c->info.note,
		 tr->why[0] ? "; evidence not shown: " : "", tr->why);
	return 0;
}

int cmd_chat(int argc, char **argv)
{
	struct app_opts o;
	struct chat_app c;
	struct model *m = NULL;
	struct tok *tk = NULL;
	char err[1024];
	int64_t id = 0;

	memset(&c, 0, sizeof c);
	if (app_opts_parse(&o, argc, argv, err, sizeof err)) {
		app_errorf("sekv chat: %s\n", err);
		return 2;
	}
	if (o.n_args == 1 && app_parse_doc_id(o.args[0], &id)) {
		app_errorf("sekv chat: " APP_DOC_ID_BAD "\n", o.args[0]);
		return 2;
	}
	if (o.n_args > 1 || (o.n_args == 1 && o.session_id)) {
		app_errorf("usage: sekv chat [DOC] | sekv chat --session ID [options]: see 'sekv chat "
			   "--help'\n");
		return 2;
	}
	if (app_check_db(&o, err, sizeof err)) {
		app_errorf("sekv chat: %s\n", err);
		return 1;
	}
	if (access(o.db, F_OK) != 0) {
		app_errorf("sekv chat: no library at %s yet: add a document with 'sekv ingest FILE'\n", o.db);
		return 1;
	}
	if (!o.session_id && !id && !(id = newest_doc(&o, err, sizeof err))) {
		app_errorf("sekv chat: no document in %s yet: run 'sekv ingest FILE' first\n", o.db);
		return 1;
	}
	if (o.session_id)
		app_errorf("sekv chat: opening session %d...\n", o.session_id);
	else
		app_errorf("sekv chat: opening document %lld...\n", (long long)id);
	if (app_load(&o, &m, &tk, err, sizeof err) ||
	    session_open_stored(&c.s, m, tk, &o, id, o.session_id, err, sizeof err)) {
		app_errorf("sekv chat: %s\n", err);
		tok_close(tk);
		model_close(m);
		return 1;
	}
	app_template_note("chat", m, tk, o.quiet);
	session_get_info(c.s, &c.info);
	c.o = o;
	c.o.quiet = 1;
	c.m = m;
	c.tk = tk;
	if ((c.evidence = resolve_evidence_heads(&o, c.s, m, tk)) < 0) {
		session_close(c.s);
		tok_close(tk);
		model_close(m);
		return 1;
	}
	struct ui_chat_ops ops = { .ud = &c, .ask = chat_ask, .span_text = chat_span_text };
	struct ui_doc_info di = {
		.title = c.info.title, .doc_id = c.info.doc_id, .n_tok = c.info.n_tok,
		.model_name = c.info.model_name, .resume_s = c.info.resume_s,
	};
	struct app_transcript tr = { 0 };
	char resumed[640];
	int rc = 0;
	if (o.session_id &&
	    (rc = transcript_of(&c, o.session_id, &tr, resumed, sizeof resumed)) == 0) {
		di.turns = tr.ut;
		di.n_turn = tr.n;
		di.resumed = resumed;
	} else if (!o.session_id && c.info.note[0]) {
		/* what opening the memory said (a raised budget, a document
		 * prefilled again for a reference) stays in view */
		snprintf(resumed, sizeof resumed, "note: %s", c.info.note);
		di.resumed = resumed;
	}
	if (rc == 0)
		rc = ui_chat_run(&ops, &di, err, sizeof err);
	else
		snprintf(err, sizeof err, "%s", resumed);
	app_transcript_free(&tr);
	session_close(c.s);
	tok_close(tk);
	model_close(m);
	if (rc) {
		app_errorf("sekv chat: %s\n", err);
		return 1;
	}
	return 0;
}
