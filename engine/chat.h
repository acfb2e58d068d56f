/* chat.h - chat templates: turn openings and closings as token ids, so that
 * only the template emits control tokens (document and question text are
 * always tokenized with special-token parsing off).
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
};

/* Resolves the template of an architecture ("gemma3") against the
 * tokenizer's control ids. SEKV_EUNSUP for an architecture without one,
 * SEKV_ENOTFOUND when a control piece is missing from the vocabulary. */
int chat_template_init(struct chat_template *ct, const char *arch,
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

/* The one turn builder (document, question, prompt): appends to v the
 * opening `start` calls for, then sep and text[0..len) (each tokenized
 * apart as ordinary text; sep may be NULL or ""), then, when `answer` is 1,
 * the user turn's closing and the model turn's opening (the model answers
 * next). 0 or a negative code (v keeps what was appended). */
int chat_build_turn(struct chat_tokvec *v, const struct chat_template *ct,
		    const struct tok *t, enum chat_turn_start start, const char *sep,
		    const char *text, size_t len, int answer, char *err, size_t errlen);

/* 1 when id ends a model turn (<end_of_turn>, EOS, or <start_of_turn>:
 * a model that opens the next turn has ended its own). */
int chat_is_end(const struct chat_template *ct, int32_t id);

#endif
