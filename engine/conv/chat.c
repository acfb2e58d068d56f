/* chat.c - prompt formats as token sequences and the stop rules (see
 * chat.h). Only this file and tokenizer.cc know control-piece names; only
 * this file knows the completion format's words. */
#include "engine/conv/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/err.h"
#include "engine/gguf/gguf.h"
#include "engine/tok/tokenizer.h"

/* The completion format's words (chat.h), chosen by measurement (README:
 * 6 of 12 licence questions with the quote cue, 5 without it, 5 with a
 * one-shot exemplar before the document). A question that starts the
 * stream (no document) has no cue. */
#define CHAT_DOC_OPEN "Context:\n"
#define CHAT_Q_OPEN "Question: "
#define CHAT_Q_SEP "\n\nAnswer with a quote from the context.\n"
#define CHAT_A_OPEN "\nAnswer:"
#define CHAT_STOP_WORD "Question:"

enum chat_format chat_format_of_gguf(const struct gguf *g)
{
	struct gguf_str s;

	if (g && gguf_get_str(g, "tokenizer.chat_template", &s) == 0 && s.len > 0)
		return CHAT_FORMAT_TEMPLATE;
	return CHAT_FORMAT_COMPLETION;
}

const char *chat_format_name(enum chat_format f)
{
	return f == CHAT_FORMAT_COMPLETION ? "completion" : "template";
}

int chat_format_parse(const char *name, enum chat_format *out)
{
	if (!name || !*name || strcmp(name, "template") == 0)
		*out = CHAT_FORMAT_TEMPLATE;
	else if (strcmp(name, "completion") == 0)
		*out = CHAT_FORMAT_COMPLETION;
	else
		return SEKV_EFORMAT;
	return 0;
}

void chat_tokvec_free(struct chat_tokvec *v)
{
	if (!v)
		return;
	free(v->ids);
	v->ids = NULL;
	v->n = v->cap = 0;
}

static int tokvec_reserve(struct chat_tokvec *v, int need)
{
	if (need <= v->cap)
		return 0;
	int cap = v->cap ? v->cap : 256;
	while (cap < need) {
		if (cap > (1 << 29))
			return SEKV_ENOMEM;
		cap *= 2;
	}
	int32_t *p = realloc(v->ids, (size_t)cap * sizeof *p);
	if (!p)
		return SEKV_ENOMEM;
	v->ids = p;
	v->cap = cap;
	return 0;
}

int chat_tokvec_push(struct chat_tokvec *v, int32_t id)
{
	int rc = tokvec_reserve(v, v->n + 1);
	if (rc)
		return rc;
	v->ids[v->n++] = id;
	return 0;
}

int chat_template_init(struct chat_template *ct, const char *arch, enum chat_format fmt,
		       const struct tok *t, char *err, size_t errlen)
{
	memset(ct, 0, sizeof *ct);
	ct->fmt = fmt;
	if (strncmp(arch, "gemma", 5) != 0)
		return sekv_errf(err, errlen, SEKV_EUNSUP,
				 "chat template: architecture '%s': no template in this build", arch);
	snprintf(ct->name, sizeof ct->name, "gemma");
	ct->bos = tok_bos(t);
	ct->eos = tok_eos(t);
	ct->turn_open = tok_piece_id(t, "<start_of_turn>");
	ct->turn_close = tok_piece_id(t, "<end_of_turn>");
	if (ct->turn_open < 0 || ct->turn_close < 0)
		return sekv_errf(err, errlen, SEKV_ENOTFOUND,
				 "chat template: gemma: <start_of_turn>/<end_of_turn> not in the vocabulary");
	return 0;
}

int chat_push_text(struct chat_tokvec *v, const struct tok *t,
		   const char *text, size_t len, char *err, size_t errlen)
{
	if (len == 0)
		return 0;
	int need = tok_encode(t, text, len, 0, NULL, 0, err, errlen);
	if (need < 0)
		return need;
	int rc = tokvec_reserve(v, v->n + need);
	if (rc)
		return sekv_errf(err, errlen, rc, "tokenize: out of memory");
	int got = tok_encode(t, text, len, 0, v->ids + v->n, need, err, errlen);
	if (got < 0)
		return got;
	v->n += got;
	return 0;
}

int chat_open_turn(struct chat_tokvec *v, const struct chat_template *ct,
		   const struct tok *t, const char *role, char *err, size_t errlen)
{
	int rc = chat_tokvec_push(v, ct->turn_open);
	if (rc)
		return sekv_errf(err, errlen, rc, "chat: out of memory");
	char line[64];
	int n = snprintf(line, sizeof line, "%s\n", role);
	if (n < 0 || n >= (int)sizeof line)
		return sekv_errf(err, errlen, SEKV_EINVAL, "chat: role '%s' too long", role);
	return chat_push_text(v, t, line, (size_t)n, err, errlen);
}

int chat_close_turn(struct chat_tokvec *v, const struct chat_template *ct,
		    const struct tok *t, char *err, size_t errlen)
{
	int rc = chat_tokvec_push(v, ct->turn_close);
	if (rc)
		return sekv_errf(err, errlen, rc, "chat: out of memory");
	return chat_push_text(v, t, "\n", 1, err, errlen);
}

/* Where the tokens of s[0..n) alone stop agreeing with v from index at
 * on (a word may join across the seam): the index in v of that token. */
static int seam(const struct chat_tokvec *v, int at, const struct tok *t, const char *s,
		size_t n, char *err, size_t errlen, int *rc)
{
	struct chat_tokvec o = { 0 };
	int k = 0;

	if ((*rc = chat_push_text(&o, t, s, n, err, errlen)) == 0)
		while (k < o.n && at + k < v->n && o.ids[k] == v->ids[at + k])
			k++;
	chat_tokvec_free(&o);
	return at + k;
}

/* COMPLETION: one string, tokenized whole, so the tokens equal those of
 * the text a reader sees; the marks are found at the seams. */
static int build_completion(struct chat_tokvec *v, const struct chat_template *ct,
			    const struct tok *t, enum chat_turn_start start,
			    const char *text, size_t len, int answer, struct chat_turn_marks *mk,
			    char *err, size_t errlen)
{
	const char *lead = !answer ? CHAT_DOC_OPEN
		: start == CHAT_START_STREAM ? "" : CHAT_Q_SEP;
	const char *close = answer ? CHAT_A_OPEN : "";
	char example[320] = "";
	int rc, at;

	if (answer && ct->example && start != CHAT_START_AFTER_MODEL)
		snprintf(example, sizeof example, CHAT_Q_OPEN CHAT_EXAMPLE_Q CHAT_A_OPEN " %.200s\n\n",
			 ct->example);
	const char *q_open = answer ? CHAT_Q_OPEN : "";
	size_t n_lead = strlen(lead), n_ex = strlen(example), n_q = strlen(q_open);
	size_t n_open = n_lead + n_ex + n_q, n_close = strlen(close);

	if (start == CHAT_START_STREAM && ct->bos >= 0 && (rc = chat_tokvec_push(v, ct->bos)))
		return sekv_errf(err, errlen, rc, "chat: out of memory");
	char *s = malloc(n_open + len + n_close);
	if (!s)
		return sekv_errf(err, errlen, SEKV_ENOMEM, "chat: out of memory");
	memcpy(s, lead, n_lead);
	memcpy(s + n_lead, example, n_ex);
	memcpy(s + n_lead + n_ex, q_open, n_q);
	memcpy(s + n_open, text, len);
	memcpy(s + n_open + len, close, n_close);
	at = v->n;
	rc = chat_push_text(v, t, s, n_open + len + n_close, err, errlen);
	mk->example_at = mk->example_end = mk->text_at = at;
	if (!rc && n_ex) {
		mk->example_at = seam(v, at, t, s, n_lead, err, errlen, &rc);
		if (!rc)
			mk->example_end = seam(v, at, t, s, n_lead + n_ex, err, errlen, &rc);
	}
	if (!rc)
		mk->text_at = seam(v, at, t, s, n_open, err, errlen, &rc);
	if (mk->example_end < mk->example_at)
		mk->example_end = mk->example_at;
	free(s);
	return rc;
}

int chat_repeats_example(const char *answer, const char *example)
{
	const char *x = answer, *y = example;

	for (;;) {
		while (*x == ' ' || *x == '\t' || *x == '\n' || (*x == '.' && !x[1]))
			x++;
		while (*y == ' ' || *y == '\t' || *y == '\n' || (*y == '.' && !y[1]))
			y++;
		if (!*x || !*y)
			return !*x && !*y;
		if (*x++ != *y++)
			return 0;
	}
}

static int is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

int chat_example_of_text(const char *text, size_t len, char *out, size_t cap)
{
	if (!cap)
		return 0;
	out[0] = 0;
	for (size_t i = 0; i < len;) {
		size_t e = i, n = 0;
		int words = 0;
		while (e < len && text[e] != '\n')
			e++;
		for (size_t j = i; j < e; j++)
			words += !is_blank(text[j]) && (j == i || is_blank(text[j - 1]));
		if (words >= 3) {
			words = 0;
			for (size_t j = i; j < e && words < CHAT_EXAMPLE_WORDS; ) {
				size_t w = j;
				if (is_blank(text[j])) {
					j++;
					continue;
				}
				while (w < e && !is_blank(text[w]))
					w++;
				if (n + (n > 0) + (w - j) + 1 > cap)
					break;
				if (n > 0)
					out[n++] = ' ';
				memcpy(out + n, text + j, w - j);
				n += w - j;
				words++;
				j = w;
			}
			out[n] = 0;
			return (int)n;
		}
		i = e + 1;
	}
	return 0;
}

int chat_build_turn(struct chat_tokvec *v, const struct chat_template *ct,
		    const struct tok *t, enum chat_turn_start start, const char *sep,
		    const char *text, size_t len, int answer, struct chat_turn_marks *mk,
		    char *err, size_t errlen)
{
	struct chat_turn_marks dummy;
	int rc = 0;

	if (!mk)
		mk = &dummy;
	if (ct->fmt == CHAT_FORMAT_COMPLETION)
		return build_completion(v, ct, t, start, text, len, answer, mk, err, errlen);

	if (start == CHAT_START_STREAM && ct->bos >= 0 && (rc = chat_tokvec_push(v, ct->bos)))
		return sekv_errf(err, errlen, rc, "chat: out of memory");
	if (start == CHAT_START_AFTER_MODEL)
		rc = chat_close_turn(v, ct, t, err, errlen);
	if (!rc && start != CHAT_START_IN_USER)
		rc = chat_open_turn(v, ct, t, "user", err, errlen);
	if (!rc && sep)
		rc = chat_push_text(v, t, sep, strlen(sep), err, errlen);
	mk->text_at = mk->example_at = mk->example_end = v->n;
	if (!rc)
		rc = chat_push_text(v, t, text, len, err, errlen);
	if (!rc && answer)
		rc = chat_close_turn(v, ct, t, err, errlen);
	if (!rc && answer)
		rc = chat_open_turn(v, ct, t, "model", err, errlen);
	return rc;
}

int chat_is_end(const struct chat_template *ct, int32_t id)
{
	/* a model that opens a new turn has ended its own */
	return id == ct->turn_close || id == ct->eos || id == ct->turn_open;
}

/* ---- stop rules ----------------------------------------------------- */

static int is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* 0: b[0..n) does not start with w; 1: it is a proper prefix of w (not
 * decided yet); 2: it starts with w. */
static int starts_with(const char *b, int n, const char *w)
{
	int wl = (int)strlen(w);
	int k = n < wl ? n : wl;

	if (memcmp(b, w, (size_t)k) != 0)
		return 0;
	return n < wl ? 1 : 2;
}

/* A leading role word: its length to drop, 0 for none, -1 undecided. */
static int role_word(const char *b, int n)
{
	static const char *const word[] = { "user", "model" };

	for (int i = 0; i < 2; i++) {
		int wl = (int)strlen(word[i]);
		int r = starts_with(b, n, word[i]);
		if (r == 1 || (r == 2 && n == wl))
			return -1;
		if (r == 2 && is_space(b[wl]))
			return wl;
	}
	return 0;
}

static void hold(struct chat_stop *s, const char *b, int n)
{
	memcpy(s->held, b, (size_t)n);
	s->n_held = n;
}

void chat_stop_init(struct chat_stop *s, enum chat_format fmt)
{
	memset(s, 0, sizeof *s);
	s->fmt = fmt;
}

int chat_stop_feed(struct chat_stop *s, const char *piece, int n, char *out)
{
	int len = s->n_held + n, i = 0;

	if (s->done)
		return 0;
	memcpy(out, s->held, (size_t)s->n_held);
	memcpy(out + s->n_held, piece, (size_t)n);
	s->n_held = 0;
	while (!s->started) {
		while (i < len && is_space(out[i]))
			i++;
		if (i == len)
			return 0;
		int r = s->fmt == CHAT_FORMAT_TEMPLATE ? role_word(out + i, len - i) : 0;
		if (r < 0) {
			hold(s, out + i, len - i);
			return 0;
		}
		i += r;
		s->started = r == 0;
	}
	memmove(out, out + i, (size_t)(len - i));
	len -= i;
	if (s->fmt != CHAT_FORMAT_COMPLETION)
		return len;
	for (int j = 0; j < len; j++) {
		int r = out[j] == '\n' ? 2 : starts_with(out + j, len - j, CHAT_STOP_WORD);
		if (r == 2)
			s->done = 1;
		if (r == 1 && len - j < CHAT_STOP_HOLD)
			hold(s, out + j, len - j);
		if (r)
			return j;
	}
	return len;
}
