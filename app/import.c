/* import.c - a chat history's conversation as turns, their rendering in
 * the model's prompt format, and the session that holds them (import.h).
 *
 * Invariant: the rendering goes through chat_build_turn only, so an
 * imported conversation's tokens are those sekv's own conversation would
 * have had (no format words here). Reading the files is app/history.c;
 * the ingest around it (prefill, memory, resume) is app/ingest.c.
 */
#include "app/import.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/extract.h"
#include "engine/conv/chat.h"
#include "engine/base/err.h"
#include "engine/tok/tokenizer.h"
#include "store/store.h"

#define IMPORT_SOURCE_TAG "#conversation="
#define IMPORT_JOIN "\n\n"      /* between messages of one role that follow each other */

void import_conv_free(struct import_conv *ic)
{
	if (!ic)
		return;
	for (int i = 0; i < ic->n_turn; i++) {
		free(ic->turn[i].question);
		free(ic->turn[i].answer);
	}
	free(ic->turn);
	memset(ic, 0, sizeof *ic);
}

/* *dst (malloc'ed or NULL) with IMPORT_JOIN and s appended. */
static int join(char **dst, const char *s)
{
	size_t n = *dst ? strlen(*dst) : 0, k = strlen(s), j = n ? strlen(IMPORT_JOIN) : 0;
	char *p = realloc(*dst, n + j + k + 1);

	if (!p)
		return SEKV_ENOMEM;
	memcpy(p + n, IMPORT_JOIN, j);
	memcpy(p + n + j, s, k + 1);
	*dst = p;
	return 0;
}

/* Ends the turn (q, a) pending in *q, *a: ownership moves to ic. */
static int push_turn(struct import_conv *ic, char **q, char **a)
{
	struct import_turn *t = realloc(ic->turn, (size_t)(ic->n_turn + 1) * sizeof *t);

	if (!t)
		return SEKV_ENOMEM;
	ic->turn = t;
	if (!*q && !(*q = calloc(1, 1)))
		return SEKV_ENOMEM;
	t[ic->n_turn++] = (struct import_turn){ .question = *q, .answer = *a };
	*q = *a = NULL;
	return 0;
}

int import_conv_of(const struct history_conv *c, const char *title, struct import_conv *out)
{
	char *sys = NULL, *q = NULL, *a = NULL;
	int rc = 0, n_q = 0; /* messages since the last answer */

	memset(out, 0, sizeof *out);
	snprintf(out->title, sizeof out->title, "%s", title ? title : c->title);
	out->index = c->index;
	out->n_msg = c->n_msg;
	out->skip = c->skip;
	for (int i = 0; !rc && i < c->n_msg; i++) {
		const struct history_msg *m = &c->msg[i];
		n_q++;
		if (m->role == HISTORY_SYSTEM) {
			rc = join(&sys, m->text);
			continue;
		}
		if (m->role == HISTORY_USER && a && (rc = push_turn(out, &q, &a)))
			break;
		/* a system text tops the question of the turn it comes before */
		if (sys && !(rc = join(&q, sys))) {
			free(sys);
			sys = NULL;
		}
		if (!rc && m->role == HISTORY_ASSISTANT) {
			rc = join(&a, m->text);
			n_q = 0;
		} else if (!rc) {
			rc = join(&q, m->text);
		}
	}
	if (!rc && a)
		rc = push_turn(out, &q, &a);
	out->n_unanswered = n_q;
	out->n_msg -= n_q;
	free(sys);
	free(q);
	free(a);
	return rc;
}

int import_render(struct import_conv *ic, const struct chat_template *ct, const struct tok *t,
		  struct chat_tokvec *v, char **text, size_t *len, char *err, size_t errlen)
{
	int rc = 0;

	*text = NULL;
	for (int i = 0; !rc && i < ic->n_turn; i++) {
		struct import_turn *tu = &ic->turn[i];
		rc = chat_build_turn(v, ct, t, i ? CHAT_START_AFTER_MODEL : CHAT_START_STREAM, NULL,
				     tu->question, strlen(tu->question), 1, NULL, err, errlen);
		int n0 = v->n;
		if (!rc)
			rc = chat_push_answer(v, ct, t, tu->answer, strlen(tu->answer), err, errlen);
		tu->n_answer_tok = v->n - n0;
	}
	/* a template document ends in an open user turn, which the first
	 * question continues (as after any document); where the question gets
	 * a turn of its own, it closes the last answer's turn itself */
	if (!rc && ct->fmt == CHAT_FORMAT_TEMPLATE && ct->alternates)
		rc = chat_build_turn(v, ct, t, CHAT_START_AFTER_MODEL, NULL, "", 0, 0, NULL, err, errlen);
	if (rc)
		return rc;
	if (!(*text = tok_decode_dup(t, v->ids, v->n)))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "import: out of memory");
	*len = strlen(*text);
	return 0;
}

int import_store_session(struct store *st, int64_t doc, const char *kv,
			 const struct import_conv *ic, int64_t *session, char *err, size_t errlen)
{
	int rc;

	if ((rc = store_tx_begin(st, err, errlen)))
		return rc;
	rc = store_session_create(st, doc, kv, session, err, errlen);
	for (int i = 0; !rc && i < ic->n_turn; i++) {
		struct store_turn tu = { .idx = i, .question = ic->turn[i].question,
					 .answer = ic->turn[i].answer,
					 .n_gen = ic->turn[i].n_answer_tok };
		snprintf(tu.stopped, sizeof tu.stopped, "%s", IMPORT_STOPPED);
		rc = store_session_add_turn(st, *session, &tu, err, errlen);
	}
	if (!rc)
		return store_tx_commit(st, err, errlen);
	store_tx_rollback(st);
	return rc;
}

void import_source(const char *path, int index, char *buf, size_t cap)
{
	char *abs = realpath(path, NULL);

	snprintf(buf, cap, "%s" IMPORT_SOURCE_TAG "%d", abs ? abs : path, index);
	free(abs);
}

int import_source_parse(const char *source, char *path, size_t cap, int *index)
{
	const char *tag = NULL, *p = source;
	char *end;

	while ((p = strstr(p, IMPORT_SOURCE_TAG)))
		tag = p++;
	if (!tag)
		return 0;
	long k = strtol(tag + strlen(IMPORT_SOURCE_TAG), &end, 10);
	if (*end || k < 1 || k > 1 << 30 || (size_t)(tag - source) >= cap)
		return 0;
	memcpy(path, source, (size_t)(tag - source));
	path[tag - source] = 0;
	*index = (int)k;
	return 1;
}

int import_conv_reload(const char *path, int index, const char *title, struct history *h,
		       struct import_conv *ic, char *err, size_t errlen)
{
	enum history_kind kind = HISTORY_NONE;
	struct extract_params p = { 0 };
	struct extract_doc x = { 0 };
	int rc;

	memset(h, 0, sizeof *h);
	memset(ic, 0, sizeof *ic);
	if (!(rc = extract_file(path, &p, &x, err, errlen)) &&
	    (x.n_page || (kind = history_detect(path, x.text, x.len)) == HISTORY_NONE))
		rc = sekv_errf(err, errlen, SEKV_EFORMAT, "%s: no longer a chat history", path);
	if (!rc && !(rc = history_parse(h, kind, path, x.text, x.len, err, errlen)) && index > h->n_conv)
		rc = sekv_errf(err, errlen, SEKV_EFORMAT, "%s: %d conversations, no longer %d", path,
			       h->n_conv, index);
	if (!rc && (rc = import_conv_of(&h->conv[index - 1], title, ic)))
		sekv_errf(err, errlen, rc, "%s: out of memory", path);
	extract_doc_free(&x);
	return rc;
}

/* Appends ", N what" (what in the plural when N > 1) to buf at *at. */
static void add_count(char *buf, size_t cap, size_t *at, int n, const char *one, const char *many)
{
	if (n <= 0 || *at >= cap)
		return;
	int w = snprintf(buf + *at, cap - *at, "%s%d %s", buf[*at - 1] == ':' ? " " : ", ", n,
			 n == 1 ? one : many);
	if (w > 0)
		*at += (size_t)w;
}

void import_describe(const struct import_conv *ic, int n_tok, char *buf, size_t cap)
{
	const struct history_skips *s = &ic->skip;
	int w = snprintf(buf, cap, "%d message%s kept in %d turn%s, %d tokens; skipped:", ic->n_msg,
			 ic->n_msg == 1 ? "" : "s", ic->n_turn, ic->n_turn == 1 ? "" : "s", n_tok);
	size_t at = w > 0 && (size_t)w < cap ? (size_t)w : cap;

	add_count(buf, cap, &at, s->n_null, "node without a message", "nodes without a message");
	add_count(buf, cap, &at, s->n_hidden, "hidden message", "hidden messages");
	add_count(buf, cap, &at, s->n_tool, "tool message", "tool messages");
	add_count(buf, cap, &at, s->n_nontext, "message that is not text (code, output)",
		  "messages that are not text (code, output)");
	add_count(buf, cap, &at, s->n_part, "image or file part", "image or file parts");
	add_count(buf, cap, &at, s->n_empty, "empty message", "empty messages");
	add_count(buf, cap, &at, ic->n_unanswered, "unanswered message at the end",
		  "unanswered messages at the end");
	add_count(buf, cap, &at, s->n_off_branch, "message on another branch",
		  "messages on other branches");
	if (at < cap && buf[at - 1] == ':')
		snprintf(buf + at, cap - at, " none");
}
