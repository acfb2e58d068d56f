/* import.h - a conversation of a chat history (app/history.h) as a stored
 * document and session: its messages become turns (a user message and the
 * answer to it), rendered with the one turn builder (engine/conv/chat.h) in the
 * model's prompt format exactly as sekv's own conversations are, so that
 * a question asked over the document continues the conversation:
 *   template:   <bos><start_of_turn>user\n{q1}<end_of_turn>\n
 *               <start_of_turn>model\n{a1}<end_of_turn>\n ...
 *               <start_of_turn>user\n        (left open, as for any document)
 *   completion: <bos>Question: {q1}\nAnswer: {a1}\n\nAnswer with a quote
 *               from the context.\nQuestion: {q2}\nAnswer: {a2} ...
 * The document's text is the decoded rendering (its tokens' text), so
 * evidence passages map onto it exactly. The session's turns hold the
 * question and answer texts with stopped = IMPORT_STOPPED: they are part of
 * the document's text and memory already (no KV of their own).
 *
 * A document imported this way has the source "PATH#conversation=N", which
 * `sekv ingest --resume` reads back to render the same tokens again.
 */
#ifndef SEKV_APP_IMPORT_H
#define SEKV_APP_IMPORT_H

#include <stddef.h>
#include <stdint.h>

#include "app/history.h"

struct chat_template;
struct chat_tokvec;
struct store;
struct tok;

/* The turns table's `stopped` of an imported turn (fits store_turn.stopped). */
#define IMPORT_STOPPED "import"

struct import_turn {
	char *question;           /* user text (a system text at the top of the first); owned */
	char *answer;             /* the assistant's text; owned */
	int n_answer_tok;         /* answer tokens as rendered (import_render) */
};

/* One conversation ready to ingest. */
struct import_conv {
	char title[256];
	int index;                /* 1-based place in its file */
	struct import_turn *turn; /* [n_turn]; owned */
	int n_turn;
	int n_msg;                /* messages imported (before joining) */
	int n_unanswered;         /* user and system messages after the last answer: not imported */
	struct history_skips skip;
};

/* The turns of c into *out (import_conv_free, also after an error):
 * consecutive messages of one role join (blank line between), a system
 * text goes to the top of the question of the turn it comes before (an
 * answer with no question before it gets an empty one, or the system
 * text), and user and system messages after the last
 * answer are left out (counted: the conversation continues after its last
 * answer). title (NULL: c's) names the document. 0 or SEKV_ENOMEM. */
int import_conv_of(const struct history_conv *c, const char *title, struct import_conv *out);
void import_conv_free(struct import_conv *ic); /* NULL is a no-op */

/* Renders ic's turns in ct's format into v (empty on entry) and the
 * decoded rendering into *text (malloc'ed, *len bytes; the caller frees),
 * setting each turn's n_answer_tok. t and ct borrowed. 0 or a negative
 * code (tokenizer, SEKV_ENOMEM). */
int import_render(struct import_conv *ic, const struct chat_template *ct, const struct tok *t,
		  struct chat_tokvec *v, char **text, size_t *len, char *err, size_t errlen);

/* Creates a session over document doc (answering from kv) holding ic's
 * turns, inside one transaction (which joins the caller's when one is
 * open). *session set. 0 or a store error. */
int import_store_session(struct store *st, int64_t doc, const char *kv,
			 const struct import_conv *ic, int64_t *session, char *err, size_t errlen);

/* The document source of conversation index of the file path:
 * "ABSPATH#conversation=N" into buf [cap]. */
void import_source(const char *path, int index, char *buf, size_t cap);
/* Parses such a source: 1 with the file's path into path [cap] and *index,
 * 0 when source is not one. */
int import_source_parse(const char *source, char *path, size_t cap, int *index);

/* Reads conversation index (1-based) of the chat history at path again,
 * as `sekv ingest --resume` does, into *h and *ic (free both, also after
 * an error; title names the document). The errors of extract_text_file
 * and history_parse, or SEKV_EFORMAT: no longer a chat history, or of
 * fewer conversations. */
int import_conv_reload(const char *path, int index, const char *title, struct history *h,
		       struct import_conv *ic, char *err, size_t errlen);

/* One line on what was imported of ic ("12 messages kept in 6 turns,
 * 812 tokens; skipped: 1 node without a message, 2 image or file parts")
 * into buf [cap]. */
void import_describe(const struct import_conv *ic, int n_tok, char *buf, size_t cap);

#endif
