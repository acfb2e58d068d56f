/* chat.c - prompt formats as token sequences and the stop rules (see
 * chat.h). Only this file and tokenizer.cc know control-piece names; only
 * this file knows the completion format's words. */
#include "engine/conv/chat.h"

#include <stdint.h>
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

/* One template family's markup as its templates write it (chat.h top). */
struct family {
	const char *name;
	enum chat_family family;
	int bos;             /* BOS opens the stream when the template writes
	                        bos_token (0: never; Llama 2 has it in user_open) */
	int bos_default;     /* ... and without a template */
	int alternates;      /* the template refuses two user turns in a row */
	const char *sys_open, *sys_close, *sys_pre, *sys_post;
	const char *user_open, *user_close, *model_open, *model_close;
	const char *answer_pre, *join;
	const char *ctl[5];  /* control pieces the markup names: required */
	const char *opt[5];  /* ids where the vocabulary has them as control
	                        pieces, else text ([INST] in a Llama 2 vocabulary) */
	const char *end[4];  /* pieces that end an answer where present */
	const char *open;    /* the piece that opens a turn (ends an answer too) */
};

#define MISTRAL_OPT { "[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]" }

static const struct family families[] = {
	{ "gemma", CHAT_FAMILY_GEMMA, 1, 1, 1, NULL, NULL, "", "\n\n",
	  "<start_of_turn>user\n", "<end_of_turn>\n", "<start_of_turn>model\n", "<end_of_turn>\n",
	  "", "\n\n", { "<start_of_turn>", "<end_of_turn>" }, { NULL }, { "<end_of_turn>" },
	  "<start_of_turn>" },
	{ "chatml", CHAT_FAMILY_CHATML, 1, 0, 0, "<|im_start|>system\n", "<|im_end|>\n", NULL, NULL,
	  "<|im_start|>user\n", "<|im_end|>\n", "<|im_start|>assistant\n", "<|im_end|>\n",
	  "", NULL, { "<|im_start|>", "<|im_end|>" }, { NULL }, { "<|im_end|>", "<|endoftext|>" },
	  "<|im_start|>" },
	{ "llama3", CHAT_FAMILY_LLAMA3, 1, 1, 0,
	  "<|start_header_id|>system<|end_header_id|>\n\n", "<|eot_id|>", NULL, NULL,
	  "<|start_header_id|>user<|end_header_id|>\n\n", "<|eot_id|>",
	  "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>", "", NULL,
	  { "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>" }, { NULL },
	  { "<|eot_id|>", "<|end_of_text|>", "<|eom_id|>" }, "<|start_header_id|>" },
	{ "llama2", CHAT_FAMILY_LLAMA2, 0, 0, 1, NULL, NULL, "<<SYS>>\n", "\n<</SYS>>\n\n",
	  "<s>[INST] ", " [/INST]", "", " </s>", " ", "\n\n", { "<s>", "</s>" },
	  { "[INST]", "[/INST]" }, { "</s>" }, NULL },
	/* Mistral's spacing variants: the original template spaces [INST]
	 * like Llama 2; v1 puts a space before both tags; v3 only after
	 * [INST]; tekken none; v7 adds [SYSTEM_PROMPT]. */
	{ "mistral", CHAT_FAMILY_MISTRAL, 1, 1, 1, NULL, NULL, "", "\n\n",
	  "[INST] ", " [/INST]", "", "</s>", "", "\n\n", { "</s>" }, MISTRAL_OPT, { "</s>" }, NULL },
	{ "mistral-v1", CHAT_FAMILY_MISTRAL, 1, 1, 1, NULL, NULL, "", "\n\n",
	  " [INST] ", " [/INST]", "", "</s>", " ", "\n\n", { "</s>" }, MISTRAL_OPT, { "</s>" }, NULL },
	{ "mistral-v3", CHAT_FAMILY_MISTRAL, 1, 1, 1, NULL, NULL, "", "\n\n",
	  "[INST] ", "[/INST]", "", "</s>", " ", "\n\n", { "</s>" }, MISTRAL_OPT, { "</s>" }, NULL },
	{ "mistral-v3-tekken", CHAT_FAMILY_MISTRAL, 1, 1, 1, NULL, NULL, "", "\n\n",
	  "[INST]", "[/INST]", "", "</s>", "", "\n\n", { "</s>" }, MISTRAL_OPT, { "</s>" }, NULL },
	{ "mistral-v7", CHAT_FAMILY_MISTRAL, 1, 1, 1, "[SYSTEM_PROMPT] ", "[/SYSTEM_PROMPT]", NULL, NULL,
	  "[INST] ", "[/INST]", "", "</s>", " ", "\n\n", { "</s>" }, MISTRAL_OPT, { "</s>" }, NULL },
	{ "mistral-v7-tekken", CHAT_FAMILY_MISTRAL, 1, 1, 1, "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]",
	  NULL, NULL, "[INST]", "[/INST]", "", "</s>", "", "\n\n", { "</s>" }, MISTRAL_OPT, { "</s>" },
	  NULL },
	{ "phi3", CHAT_FAMILY_PHI3, 1, 0, 0, "<|system|>\n", "<|end|>\n", NULL, NULL,
	  "<|user|>\n", "<|end|>\n", "<|assistant|>\n", "<|end|>\n", "", NULL,
	  { "<|system|>", "<|user|>", "<|assistant|>", "<|end|>" }, { NULL },
	  { "<|end|>", "<|endoftext|>" }, "<|user|>" },
};
#define N_FAMILY ((int)(sizeof families / sizeof *families))

static int has(const char *s, size_t n, const char *w)
{
	return memmem(s, n, w, strlen(w)) != NULL;
}

/* w as the start of a quoted template literal ('w or "w). */
static int has_lit(const char *s, size_t n, const char *w)
{
	char q[64];

	snprintf(q, sizeof q, "'%s", w);
	if (has(s, n, q))
		return 1;
	snprintf(q, sizeof q, "\"%s", w);
	return has(s, n, q);
}

/* The row of families[] a template renders with; -1 for none. */
static int family_row(const char *s, size_t n)
{
	const char *name = NULL;

	if (!s || n == 0)
		return -1;
	if (has(s, n, "<|im_start|>"))
		name = has(s, n, "<|im_sep|>") || has(s, n, "<end_of_utterance>") ? NULL : "chatml";
	else if (has(s, n, "<|start_header_id|>") && has(s, n, "<|eot_id|>"))
		name = "llama3";
	else if (has(s, n, "<start_of_turn>"))
		name = "gemma";
	else if (has(s, n, "<|user|>") && has(s, n, "<|assistant|>") && has(s, n, "<|end|>"))
		name = "phi3";
	else if (has(s, n, "[INST]") && has(s, n, "<<SYS>>"))
		name = "llama2";
	else if (has(s, n, "[INST]") && has(s, n, "[SYSTEM_PROMPT]"))
		name = has(s, n, "[INST] ") ? "mistral-v7" : "mistral-v7-tekken";
	else if (has(s, n, "[INST]"))
		name = has_lit(s, n, " [INST]") ? "mistral-v1"
			: !has(s, n, "[INST] ") ? "mistral-v3-tekken"
			: has(s, n, " [/INST]") ? "mistral" : "mistral-v3";
	for (int i = 0; name && i < N_FAMILY; i++)
		if (!strcmp(families[i].name, name))
			return i;
	return -1;
}

enum chat_family chat_family_of_template(const char *tmpl, size_t len, const char **variant)
{
	int r = family_row(tmpl, len);

	if (variant)
		*variant = r >= 0 ? families[r].name : "";
	if (r >= 0)
		return families[r].family;
	return tmpl && len > 0 ? CHAT_FAMILY_UNKNOWN : CHAT_FAMILY_NONE;
}

const char *chat_template_text(const struct gguf *g, size_t *len)
{
	struct gguf_str s;

	*len = 0;
	if (!g || gguf_get_str(g, "tokenizer.chat_template", &s) || s.len == 0)
		return NULL;
	*len = s.len;
	return s.ptr;
}

enum chat_format chat_format_of_gguf(const struct gguf *g)
{
	size_t n;
	const char *s = chat_template_text(g, &n);

	return family_row(s, n) >= 0 ? CHAT_FORMAT_TEMPLATE : CHAT_FORMAT_COMPLETION;
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

/* Id of a control piece (else a user-defined one when user_ok), or -1. */
static int32_t ctl_id(const struct tok *t, const char *piece, int user_ok)
{
	int32_t id = tok_special_id(t, piece);

	return id >= 0 || !user_ok ? id : tok_piece_id(t, piece);
}

static void add_end(struct chat_template *ct, int32_t id)
{
	if (id < 0 || ct->n_end == CHAT_MAX_END)
		return;
	for (int i = 0; i < ct->n_end; i++)
		if (ct->end[i] == id)
			return;
	ct->end[ct->n_end++] = id;
}

/* The family whose turn-opening control piece the vocabulary has, or -1. */
static int vocab_row(const struct tok *t)
{
	for (int i = 0; i < N_FAMILY; i++)
		if (families[i].open && tok_special_id(t, families[i].open) >= 0)
			return i;
	return -1;
}

/* Whether separately tokenized text starts with a space. */
static int has_dummy_prefix(const struct tok *t)
{
	int32_t id;
	char c[8];

	if (tok_encode(t, "a", 1, 0, &id, 1, NULL, 0) < 1)
		return 0;
	return tok_token_text(t, id, c, (int)sizeof c) > 0 && c[0] == ' ';
}

/* ct->note for a template sekv does not know: one line, the template's
 * first bytes as printable ASCII (nothing that drives a terminal); vr: the row of the vocabulary's markup used
 * instead (a TEMPLATE format asked for), -1: the completion format. */
static void note_unknown(struct chat_template *ct, const char *tmpl, size_t len, int vr)
{
	char head[28];
	size_t k = 0;

	for (size_t i = 0; i < len && k < sizeof head - 1; i++)
		head[k++] = (unsigned char)tmpl[i] < 0x20 ? ' ' : (unsigned char)tmpl[i] >= 0x7f ? '?'
			: tmpl[i];
	head[k] = 0;
	if (vr < 0)
		snprintf(ct->note, sizeof ct->note, "the model's chat template (\"%s...\") is not "
			 "one sekv knows: using the completion format", head);
	else
		snprintf(ct->note, sizeof ct->note, "the model's chat template (\"%s...\") is not "
			 "one sekv knows: using the %s markup of its vocabulary", head, families[vr].name);
}

/* Fills ct's markup and control ids from family f. */
static int resolve(struct chat_template *ct, const struct family *f, int bos_first,
		   const struct tok *t, char *err, size_t errlen)
{
	snprintf(ct->name, sizeof ct->name, "%s", f->name);
	ct->family = f->family;
	ct->bos_first = bos_first && ct->bos >= 0;
	ct->alternates = f->alternates;
	ct->sys_open = f->sys_open;
	ct->sys_close = f->sys_close;
	ct->sys_pre = f->sys_pre;
	ct->sys_post = f->sys_post;
	ct->user_open = f->user_open;
	ct->user_close = f->user_close;
	ct->model_open = f->model_open;
	ct->model_close = f->model_close;
	ct->answer_pre = f->answer_pre;
	ct->join = f->join;
	for (int i = 0; i < 5 && f->ctl[i]; i++) {
		int32_t id = ctl_id(t, f->ctl[i], 1);
		if (id < 0)
			return sekv_errf(err, errlen, SEKV_ENOTFOUND,
					 "chat template: %s: control piece %s not in the vocabulary",
					 f->name, f->ctl[i]);
		ct->ctl_name[ct->n_ctl] = f->ctl[i];
		ct->ctl_id[ct->n_ctl++] = id;
	}
	for (int i = 0; i < 5 && f->opt[i]; i++) {
		int32_t id = ctl_id(t, f->opt[i], 0);
		if (id >= 0) {
			ct->ctl_name[ct->n_ctl] = f->opt[i];
			ct->ctl_id[ct->n_ctl++] = id;
		}
	}
	/* an answer after markup text continues that text's run */
	const char *m = f->model_open[0] ? f->model_open : f->user_close;
	size_t n = strlen(m);
	ct->answer_cont = 1;
	for (int i = 0; i < ct->n_ctl; i++) {
		size_t k = strlen(ct->ctl_name[i]);
		if (k <= n && !strcmp(m + n - k, ct->ctl_name[i]))
			ct->answer_cont = 0;
	}
	return 0;
}

int chat_template_init_text(struct chat_template *ct, const char *tmpl, size_t len,
			    enum chat_format fmt, const struct tok *t, char *err, size_t errlen)
{
	memset(ct, 0, sizeof *ct);
	ct->fmt = fmt;
	ct->bos = ct->eos = ct->space_id = -1;
	if (!t)
		return sekv_errf(err, errlen, SEKV_EINVAL, "chat template: no tokenizer");
	ct->bos = tok_bos(t);
	ct->eos = tok_eos(t);
	if ((ct->dummy_prefix = has_dummy_prefix(t)))
		ct->space_id = tok_piece_id(t, "\xe2\x96\x81");
	snprintf(ct->name, sizeof ct->name, "completion");

	int r = family_row(tmpl, len);
	add_end(ct, ct->eos);
	if (r < 0 && tmpl && len > 0)
		note_unknown(ct, tmpl, len, fmt == CHAT_FORMAT_COMPLETION ? -1 : vocab_row(t));
	if (fmt == CHAT_FORMAT_COMPLETION) {
		/* a base model that writes a turn's end or opening is done */
		for (int i = 0; i < N_FAMILY; i++) {
			for (int k = 0; k < 4 && families[i].end[k]; k++)
				add_end(ct, tok_special_id(t, families[i].end[k]));
			if (families[i].open)
				add_end(ct, tok_special_id(t, families[i].open));
		}
		return 0;
	}
	int bos_first;
	if (r >= 0) {
		bos_first = families[r].bos && has(tmpl, len, "bos_token");
	} else if ((r = vocab_row(t)) >= 0) {
		bos_first = families[r].bos_default;
	} else {
		return sekv_errf(err, errlen, SEKV_EUNSUP, "chat template: %s; the vocabulary has no "
				 "turn pieces of a family sekv knows", tmpl && len ? "template unknown to sekv"
				 : "the model has no chat template");
	}
	const struct family *f = &families[r];
	int rc = resolve(ct, f, bos_first, t, err, errlen);
	if (rc)
		return rc;
	for (int k = 0; k < 4 && f->end[k]; k++)
		add_end(ct, ctl_id(t, f->end[k], 1));
	if (f->open)
		add_end(ct, ctl_id(t, f->open, 1));
	return 0;
}

int chat_template_init(struct chat_template *ct, const struct gguf *g, enum chat_format fmt,
		       const struct tok *t, char *err, size_t errlen)
{
	size_t n;
	const char *s = chat_template_text(g, &n);

	return chat_template_init_text(ct, s, n, fmt, t, err, errlen);
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

/* Appends s[0..n) tokenized as text; cont: it continues the text run
 * before it, so the dummy prefix the tokenizer puts in front is not
 * wanted. A leading space of s stands for it; else s is tokenized after a
 * newline, whose own tokens (the dummy prefix and the newline's byte
 * piece: no piece of such a vocabulary spans a newline) are dropped. */
static int push_run(struct chat_tokvec *v, const struct chat_template *ct, const struct tok *t,
		    const char *s, size_t n, int cont, char *err, size_t errlen)
{
	int32_t nl[4];
	int at = v->n, rc;

	if (!cont || !ct->dummy_prefix || n == 0)
		return chat_push_text(v, t, s, n, err, errlen);
	if (s[0] == ' ' && n == 1 && ct->space_id >= 0) {
		if ((rc = chat_tokvec_push(v, ct->space_id)))
			return sekv_errf(err, errlen, rc, "chat: out of memory");
		return 0;
	}
	if (s[0] == ' ')
		return chat_push_text(v, t, s + 1, n - 1, err, errlen);
	int k = tok_encode(t, "\n", 1, 0, nl, 4, err, errlen);
	char *b = malloc(n + 1);
	if (!b)
		return sekv_errf(err, errlen, SEKV_ENOMEM, "chat: out of memory");
	b[0] = '\n';
	memcpy(b + 1, s, n);
	rc = k < 0 ? k : chat_push_text(v, t, b, n + 1, err, errlen);
	free(b);
	if (rc)
		return rc;
	if (k > 4 || v->n - at <= k || memcmp(v->ids + at, nl, (size_t)k * sizeof *nl)) {
		/* the newline merged with s: tokenize s alone after all */
		v->n = at;
		return chat_push_text(v, t, s, n, err, errlen);
	}
	memmove(v->ids + at, v->ids + at + k, (size_t)(v->n - at - k) * sizeof *v->ids);
	v->n -= k;
	return 0;
}

/* A turn being built: markup and text gather into a run until a control
 * piece (or the end) ends it; the run is then tokenized whole. */
struct emit {
	struct chat_tokvec *v;
	const struct chat_template *ct;
	const struct tok *t;
	char *buf;              /* [cap] the run's bytes [0, n) */
	size_t n, cap;
	int cont;               /* the run continues text before it */
	size_t text_off;        /* where the caller's text starts in buf; SIZE_MAX: not in this run */
	int *text_at;           /* gets its index in v */
	char *err;
	size_t errlen;
	int rc;
};

static void emit_bytes(struct emit *e, const char *s, size_t n)
{
	if (e->rc || n == 0)
		return;
	if (e->n + n > e->cap) {
		size_t cap = (e->n + n) * 2 + 64;
		char *p = realloc(e->buf, cap);
		if (!p) {
			e->rc = sekv_errf(e->err, e->errlen, SEKV_ENOMEM, "chat: out of memory");
			return;
		}
		e->buf = p;
		e->cap = cap;
	}
	memcpy(e->buf + e->n, s, n);
	e->n += n;
}

/* Tokenizes the run; the caller's text starts at the first token where
 * the run's tokens part from those of the bytes before it alone. */
static void emit_flush(struct emit *e)
{
	int at = e->v->n;

	if (!e->rc && e->n)
		e->rc = push_run(e->v, e->ct, e->t, e->buf, e->n, e->cont, e->err, e->errlen);
	if (!e->rc && e->text_off != SIZE_MAX) {
		struct chat_tokvec o = { 0 };
		int k = 0;
		if (e->text_off > 0 && !(e->rc = push_run(&o, e->ct, e->t, e->buf, e->text_off,
							  e->cont, e->err, e->errlen)))
			while (k < o.n && at + k < e->v->n && o.ids[k] == e->v->ids[at + k])
				k++;
		chat_tokvec_free(&o);
		*e->text_at = at + k;
		e->text_off = SIZE_MAX;
	}
	e->n = 0;
	e->cont = 0;
}

static void emit_id(struct emit *e, int32_t id)
{
	emit_flush(e);
	if (!e->rc && (e->rc = chat_tokvec_push(e->v, id)))
		e->rc = sekv_errf(e->err, e->errlen, e->rc, "chat: out of memory");
}

/* Markup m (may be NULL): its control pieces become ids, the rest text. */
static void emit_markup(struct emit *e, const char *m)
{
	while (m && *m && !e->rc) {
		int hit = -1;
		for (int i = 0; i < e->ct->n_ctl && hit < 0; i++)
			if (e->ct->ctl_id[i] >= 0 &&
			    !strncmp(m, e->ct->ctl_name[i], strlen(e->ct->ctl_name[i])))
				hit = i;
		if (hit >= 0) {
			emit_id(e, e->ct->ctl_id[hit]);
			m += strlen(e->ct->ctl_name[hit]);
		} else {
			emit_bytes(e, m++, 1);
		}
	}
}

static int build_template(struct chat_tokvec *v, const struct chat_template *ct,
			  const struct tok *t, enum chat_turn_start start, const char *system,
			  const char *text, size_t len, int answer, struct chat_turn_marks *mk,
			  char *err, size_t errlen)
{
	struct emit e = { .v = v, .ct = ct, .t = t, .cont = start != CHAT_START_STREAM,
			  .text_off = SIZE_MAX, .text_at = &mk->text_at, .err = err,
			  .errlen = errlen };
	int sys = start == CHAT_START_STREAM && system && *system;

	mk->text_at = v->n;
	if (start == CHAT_START_STREAM && ct->bos_first)
		emit_id(&e, ct->bos);
	if (sys && ct->sys_open) {
		emit_markup(&e, ct->sys_open);
		emit_bytes(&e, system, strlen(system));
		emit_markup(&e, ct->sys_close);
	}
	if (start == CHAT_START_AFTER_MODEL) {
		emit_markup(&e, ct->model_close);
		emit_markup(&e, ct->user_open);
	} else if (start == CHAT_START_IN_USER && ct->alternates) {
		emit_markup(&e, ct->join);
	} else if (start == CHAT_START_IN_USER) {
		emit_markup(&e, ct->user_close);
		emit_markup(&e, ct->user_open);
	} else {
		emit_markup(&e, ct->user_open);
	}
	if (sys && !ct->sys_open) {
		emit_markup(&e, ct->sys_pre);
		emit_bytes(&e, system, strlen(system));
		emit_markup(&e, ct->sys_post);
	}
	e.text_off = e.n;
	emit_bytes(&e, text, len);
	if (answer) {
		emit_markup(&e, ct->user_close);
		emit_markup(&e, ct->model_open);
	}
	emit_flush(&e);
	free(e.buf);
	mk->example_at = mk->example_end = mk->text_at;
	return e.rc;
}

int chat_build_turn(struct chat_tokvec *v, const struct chat_template *ct,
		    const struct tok *t, enum chat_turn_start start, const char *system,
		    const char *text, size_t len, int answer, struct chat_turn_marks *mk,
		    char *err, size_t errlen)
{
	struct chat_turn_marks dummy;

	if (!mk)
		mk = &dummy;
	if (ct->fmt == CHAT_FORMAT_COMPLETION)
		return build_completion(v, ct, t, start, text, len, answer, mk, err, errlen);
	return build_template(v, ct, t, start, system, text, len, answer, mk, err, errlen);
}

int chat_push_answer(struct chat_tokvec *v, const struct chat_template *ct, const struct tok *t,
		     const char *answer, size_t len, char *err, size_t errlen)
{
	const char *pre = ct->fmt == CHAT_FORMAT_COMPLETION ? " " : ct->answer_pre;
	size_t n = strlen(pre);
	char *s = malloc(n + len + 1);
	int rc;

	if (!s)
		return sekv_errf(err, errlen, SEKV_ENOMEM, "chat: out of memory");
	memcpy(s, pre, n);
	memcpy(s + n, answer, len);
	rc = push_run(v, ct, t, s, n + len, ct->fmt == CHAT_FORMAT_COMPLETION || ct->answer_cont,
		      err, errlen);
	free(s);
	return rc;
}

int chat_is_end(const struct chat_template *ct, int32_t id)
{
	for (int i = 0; i < ct->n_end; i++)
		if (ct->end[i] == id)
			return 1;
	return 0;
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
	static const char *const word[] = { "user", "model", "assistant" };

	for (int i = 0; i < 3; i++) {
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
