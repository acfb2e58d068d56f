/* chat.h - prompt formats: turn openings and closings as token ids, so that
 * only the template emits control tokens (document and question text are
 * always tokenized with special-token parsing off), and the stop rules that
 * end an answer.
 *
 * Two formats, chosen from the GGUF (chat_format_of_gguf): an
 * instruction-tuned model (it has tokenizer.chat_template) gets its chat
 * template; a pre-trained one gets a completion format a base model
 * continues:
 *   <bos>Context:\n{document}\n\nAnswer with a quote from the context.\n
 *   Question: {q}\nAnswer:{answer}\n\nAnswer with a quote ...\nQuestion: ...
 *
 * Gemma 3 (the model's own template): <bos><start_of_turn>user\n{text}
 * <end_of_turn>\n<start_of_turn>model\n{answer}<end_of_turn>\n ...
 * Gemma has no system role: a system text is put at the top of the first
 * user turn.
 */
#ifndef SEKV_CHAT_H
#define SEKV_CHAT_H

#include <stddef.h>
#include <stdint.h>

struct tok;
struct gguf;

enum chat_format {
	CHAT_FORMAT_TEMPLATE,   /* the model's chat template (instruction-tuned) */
	CHAT_FORMAT_COMPLETION, /* Context/Question/Answer (pre-trained) */
};

/* The format a model's GGUF calls for: TEMPLATE when it has a non-empty
 * tokenizer.chat_template, else COMPLETION. g borrowed for the call. */
enum chat_format chat_format_of_gguf(const struct gguf *g);
/* "template" or "completion" (static storage). */
const char *chat_format_name(enum chat_format f);
/* Parses a stored name; NULL or "" (a document from before formats were
 * stored) is TEMPLATE. 0, or SEKV_EFORMAT for another word. */
int chat_format_parse(const char *name, enum chat_format *out);

/* A growable token buffer; chat_tokvec_free releases ids. */
struct chat_tokvec {
	int32_t *ids;  /* [n], owned */
	int n;
	int cap;
};

void chat_tokvec_free(struct chat_tokvec *v);
int chat_tokvec_push(struct chat_tokvec *v, int32_t id);

struct chat_template {
	int32_t bos;            /* -1 when the model has none */
	int32_t turn_open;      /* <start_of_turn> */
	int32_t turn_close;     /* <end_of_turn> */
	int32_t eos;
	char name[16];          /* "gemma" */
	enum chat_format fmt;
	const char *example;    /* COMPLETION: answer of the worked example put
	                           before the first question (chat_example_of_text;
	                           borrowed), NULL: none */
};

/* The worked example's question; its answer quotes the document's start. */
#define CHAT_EXAMPLE_Q "What are the first words of the context?"
#define CHAT_EXAMPLE_WORDS 8

/* The worked example's answer for a document: the first CHAT_EXAMPLE_WORDS
 * words of its first line that has at least 3 words (words: runs of
 * non-white-space bytes, joined by one space), into out [cap]
 * (NUL-terminated, cut on a word). Measured on bench/qa (issue 8): a
 * pre-trained model that first sees one question answered by a short
 * quote answers the real question with one more often (answer accuracy
 * 0.275 -> 0.33). Returns its length, 0 when no line has 3 words. */
int chat_example_of_text(const char *text, size_t len, char *out, size_t cap);
/* 1 when answer is the worked example's answer again: the same bytes once
 * white space is dropped and a final '.' ignored (a base model that finds
 * no answer tends to copy the example), else 0. */
int chat_repeats_example(const char *answer, const char *example);

/* Resolves the format fmt of an architecture ("gemma3") against the
 * tokenizer's control ids. SEKV_EUNSUP for an architecture without a
 * template, SEKV_ENOTFOUND when a control piece is missing from the
 * vocabulary (the completion format needs only BOS/EOS, but a Gemma
 * model's <end_of_turn> still ends an answer). */
int chat_template_init(struct chat_template *ct, const char *arch, enum chat_format fmt,
		       const struct tok *t, char *err, size_t errlen);

/* Appends text[0..len) tokenized as ordinary text (no BOS, no special). */
int chat_push_text(struct chat_tokvec *v, const struct tok *t,
		   const char *text, size_t len, char *err, size_t errlen);
/* Appends "<start_of_turn>{role}\n" ("user" or "model"). */
int chat_open_turn(struct chat_tokvec *v, const struct chat_template *ct,
		   const struct tok *t, const char *role, char *err, size_t errlen);
/* Appends "<end_of_turn>\n". */
int chat_close_turn(struct chat_tokvec *v, const struct chat_template *ct,
		    const struct tok *t, char *err, size_t errlen);
/* Where a new user turn starts in the stream. */
enum chat_turn_start {
	CHAT_START_STREAM,      /* nothing yet: BOS (when the model has one),
	                           then the user turn opens */
	CHAT_START_IN_USER,     /* a user turn is open (a document): the text
	                           continues it */
	CHAT_START_AFTER_MODEL, /* a model turn is open (an answer): it closes,
	                           then the user turn opens */
};

/* The one turn builder (document, question, prompt). TEMPLATE: appends to
 * v the opening `start` calls for, then sep and text[0..len) (each
 * tokenized apart as ordinary text; sep may be NULL or ""), then, when
 * `answer` is 1, the user turn's closing and the model turn's opening (the
 * model answers next). COMPLETION: sep is not used; a document (answer 0)
 * is BOS + the tokens of "Context:\n{text}"; a question (answer 1) is the
 * tokens of "\n\nAnswer with a quote from the context.\nQuestion: {text}
 * \nAnswer:" (BOS + "Question: {text}\nAnswer:" when it starts the
 * stream), each string tokenized whole; with ct->example, the first
 * question (start is not CHAT_START_AFTER_MODEL) follows the worked
 * example "Question: " CHAT_EXAMPLE_Q "\nAnswer: {example}\n\n". mk (may be NULL) gets where text and the example lie in v:
 * the rest of the turn (opening, sep, instruction) is its fixed part,
 * whose attention is the evidence baseline (engine/evidence/evidence.h); the
 * example, which reads the document's start, is neither. 0 or a
 * negative code (v keeps what was appended). */
struct chat_turn_marks {
	int text_at;      /* index in v of the first token of text */
	int example_at;   /* the worked example: tokens [example_at, example_end) */
	int example_end;  /* (example_at == example_end: none) */
};
int chat_build_turn(struct chat_tokvec *v, const struct chat_template *ct,
		    const struct tok *t, enum chat_turn_start start, const char *sep,
		    const char *text, size_t len, int answer, struct chat_turn_marks *mk,
		    char *err, size_t errlen);

/* 1 when id ends a model turn (<end_of_turn>, EOS, or <start_of_turn>:
 * a model that opens the next turn has ended its own). */
int chat_is_end(const struct chat_template *ct, int32_t id);

/* The stop rules over an answer's text, fed piece by piece (pure: no
 * model). Leading white space is held back and dropped; with TEMPLATE a
 * leading role word ("user", "model") followed by white space is dropped
 * too. With COMPLETION the answer ends at a newline after visible text (a
 * base model answers in one line; a blank line ends it too) or where
 * "Question:" starts; a partial "Question:" is held back until decided.
 * The stop text is never shown. */
#define CHAT_STOP_HOLD 64
struct chat_stop {
	enum chat_format fmt;
	int started;                  /* a visible character was shown */
	int done;                     /* 1: a stop rule ended the answer */
	char held[CHAT_STOP_HOLD];    /* bytes not yet decided */
	int n_held;
};

void chat_stop_init(struct chat_stop *s, enum chat_format fmt);
/* Feeds piece[0..n) (bytes of complete UTF-8 characters); writes to out
 * (room for n + CHAT_STOP_HOLD bytes) what may be shown now and returns
 * its length (>= 0). After a stop, s->done is 1 and later feeds show
 * nothing. Bytes still held when the answer ends otherwise (length, EOS)
 * are a prefix of a stop or role word and are dropped. */
int chat_stop_feed(struct chat_stop *s, const char *piece, int n, char *out);

#endif
