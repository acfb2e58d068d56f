/* chat.h - prompt formats: turn openings and closings as token ids, so that
 * only the template emits control tokens (document and question text are
 * always tokenized with special-token parsing off), and the stop rules that
 * end an answer.
 *
 * The format follows the GGUF's tokenizer.chat_template (never the
 * architecture): an instruction-tuned model gets its family's template, a
 * pre-trained one (no template) or one whose template sekv does not know
 * gets a completion format a base model continues:
 *   <bos>Context:\n{document}\n\nAnswer with a quote from the context.\n
 *   Question: {q}\nAnswer:{answer}\n\nAnswer with a quote ...\nQuestion: ...
 *
 * Families (markup as the templates write it; <x> are control tokens):
 *   gemma    <bos><start_of_turn>user\n{system}\n\n{doc}\n\n{q}<end_of_turn>\n
 *            <start_of_turn>model\n{answer}<end_of_turn>\n<start_of_turn>user\n...
 *   chatml   <|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{doc}
 *            <|im_end|>\n<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n
 *   llama3   <|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n{system}
 *            <|eot_id|><|start_header_id|>user<|end_header_id|>\n\n{doc}<|eot_id|>...
 *   llama2   <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{doc}\n\n{q} [/INST] {answer}
 *            </s><s>[INST] {q} [/INST]
 *   mistral  <s>[INST] {system}\n\n{doc}\n\n{q}[/INST] {answer}</s>[INST] ...
 *            (spacing variants v1, v3, v3-tekken, the Llama-2-like original
 *            and v7 with [SYSTEM_PROMPT]; [INST] is a control token where the
 *            vocabulary has one, else text)
 *   phi3     <|system|>\n{system}<|end|>\n<|user|>\n{doc}<|end|>\n<|user|>\n{q}
 *            <|end|>\n<|assistant|>\n
 * Gemma, Llama 2 and Mistral templates refuse two user turns in a row:
 * there the first question shares the document's user turn after a blank
 * line. Gemma and Mistral (before v7) have no system role: the system text
 * tops the first user turn.
 *
 * Tokens: the text between two control tokens is tokenized as one string,
 * so the ids are those llama.cpp gives the rendered template (special
 * tokens parsed); text that continues such a run across calls (a question
 * after the stored document, the closing after a generated answer) goes
 * without the dummy-prefix space a SentencePiece vocabulary would put
 * before it (chat_build_turn). Contents are not trimmed, as some templates
 * do: byte offsets into the document stay exact.
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

/* The template families sekv renders (chat.h top). */
enum chat_family {
	CHAT_FAMILY_NONE,       /* no template: the completion format */
	CHAT_FAMILY_UNKNOWN,    /* a template sekv does not know: the completion format */
	CHAT_FAMILY_GEMMA,
	CHAT_FAMILY_CHATML,
	CHAT_FAMILY_LLAMA3,
	CHAT_FAMILY_LLAMA2,
	CHAT_FAMILY_MISTRAL,
	CHAT_FAMILY_PHI3,
};

/* Recognises a tokenizer.chat_template string tmpl[0..len) (need not be
 * NUL-terminated; NULL or len 0 is NONE) by the markup it writes: <|im_start|>
 * (ChatML; not Phi-4's <|im_sep|> nor SmolVLM's <end_of_utterance>),
 * <|start_header_id|> with <|eot_id|> (Llama 3), <start_of_turn> (Gemma),
 * <|user|> <|assistant|> <|end|> (Phi-3), [INST] with <<SYS>> (Llama 2) and
 * [INST] without it (Mistral, its variant told by the spaces around [INST]
 * and [/INST] and before an answer, and by [SYSTEM_PROMPT]). *variant (may
 * be NULL) gets the row's name ("chatml", "mistral-v3"; static storage),
 * "" for NONE and UNKNOWN. Pure; thread-safe. */
enum chat_family chat_family_of_template(const char *tmpl, size_t len, const char **variant);
/* The GGUF's tokenizer.chat_template (borrowed from g, not NUL-terminated)
 * and its length into *len; NULL (and *len 0) when g is NULL or has none. */
const char *chat_template_text(const struct gguf *g, size_t *len);
/* The format a model's GGUF calls for: TEMPLATE when its
 * tokenizer.chat_template is of a family sekv knows, else COMPLETION. g
 * borrowed for the call (NULL: COMPLETION). */
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

#define CHAT_MAX_CTL 8   /* control pieces one family's markup names */
#define CHAT_MAX_END 16  /* ids that end an answer */

/* A resolved prompt format (chat_template_init); read-only afterwards, so
 * one may be shared between threads. The markup strings are static;
 * control pieces inside them are turned into ids through ctl_name/ctl_id
 * when a turn is built. */
struct chat_template {
	enum chat_format fmt;
	enum chat_family family;    /* NONE when fmt is COMPLETION */
	char name[24];              /* "gemma", "chatml", "mistral-v3", ...;
	                               "completion" */
	int32_t bos;                /* -1 when the model has none */
	int32_t eos;                /* -1 when the model has none */
	int bos_first;              /* 1: BOS opens the stream (the template
	                               writes bos_token; Llama 2 writes it at
	                               every user turn, in user_open) */
	int alternates;             /* 1: the template refuses two user turns
	                               in a row: the first question shares the
	                               document's turn after join */
	int dummy_prefix;           /* 1: text tokenized alone starts with a
	                               space (SentencePiece add_dummy_prefix) */
	int32_t space_id;           /* the lone space piece U+2581, or -1 */
	int answer_cont;            /* 1: markup text precedes the answer, which
	                               continues its run (chat_push_answer) */
	/* markup, NUL-terminated static strings ("" when the family writes
	 * nothing there) */
	const char *sys_open, *sys_close;  /* a system turn; NULL: no system role */
	const char *sys_pre, *sys_post;    /* else the system text tops the first
	                                      user turn between these */
	const char *user_open, *user_close;
	const char *model_open, *model_close;
	const char *answer_pre;     /* before an answer the model did not write
	                               itself (chat_push_answer) */
	const char *join;           /* alternates: between the document and the
	                               first question */
	const char *ctl_name[CHAT_MAX_CTL]; /* control pieces in the markup */
	int32_t ctl_id[CHAT_MAX_CTL];      /* their ids (-1: the piece is not a
	                                      control token here: text) */
	int n_ctl;
	int32_t end[CHAT_MAX_END];  /* ids that end an answer (chat_is_end) */
	int n_end;
	char note[160];             /* a one-line notice for the user ("" none):
	                               the model's template is not one sekv knows
	                               and the completion format is used */
	const char *example;        /* COMPLETION: answer of the worked example put
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

/* Resolves a prompt format against the tokenizer t (borrowed for the
 * call). tmpl[0..len) is the model's tokenizer.chat_template (NULL: none).
 * TEMPLATE: the template's family (chat_family_of_template); a template
 * that is absent or unknown falls back to the family whose turn-opening
 * control piece the vocabulary has (<start_of_turn>, <|im_start|>,
 * <|start_header_id|>, <|user|>: a format asked for explicitly), else
 * SEKV_EUNSUP. COMPLETION: the completion format; its answers still end
 * at EOS and at any family's end-of-turn or turn-opening control piece the
 * vocabulary has (a base Gemma model emits <end_of_turn>). Either way a
 * non-empty template of no family sekv knows fills ct->note (one line, no
 * newline) for the caller to show. Errors: SEKV_ENOTFOUND when the
 * family's control piece is missing from the vocabulary (err names it),
 * SEKV_EUNSUP (above), SEKV_EINVAL without a tokenizer. */
int chat_template_init_text(struct chat_template *ct, const char *tmpl, size_t len,
			    enum chat_format fmt, const struct tok *t, char *err, size_t errlen);
/* chat_template_init_text with g's tokenizer.chat_template (g borrowed for
 * the call; NULL: none). */
int chat_template_init(struct chat_template *ct, const struct gguf *g, enum chat_format fmt,
		       const struct tok *t, char *err, size_t errlen);

/* Appends text[0..len) tokenized as ordinary text (no BOS, no special). */
int chat_push_text(struct chat_tokvec *v, const struct tok *t,
		   const char *text, size_t len, char *err, size_t errlen);
/* Appends an answer the model did not write itself (an imported
 * conversation's) as the model would have written it: after "Answer:" the
 * completion format's answers start with a space; TEMPLATE puts the
 * family's answer_pre before it (Llama 2, Mistral v1/v3: a space). The
 * turn stays open; the next question's CHAT_START_AFTER_MODEL closes it. */
int chat_push_answer(struct chat_tokvec *v, const struct chat_template *ct, const struct tok *t,
		     const char *answer, size_t len, char *err, size_t errlen);
/* Where a new user turn starts in the stream. */
enum chat_turn_start {
	CHAT_START_STREAM,      /* nothing yet: BOS (where the family puts
	                           it), the system turn, then the user turn
	                           opens */
	CHAT_START_IN_USER,     /* a user turn is open (a document): the text
	                           continues it after ct->join where the family
	                           alternates, else the open turn closes and
	                           the text gets a user turn of its own (these
	                           families close a user and a model turn
	                           alike, so an open model turn, an imported
	                           conversation's last answer, closes too) */
	CHAT_START_AFTER_MODEL, /* a model turn is open (an answer): it closes,
	                           then the user turn opens */
};

/* The one turn builder (document, question, prompt). TEMPLATE: appends to
 * v the opening `start` calls for (with CHAT_START_STREAM and a non-empty
 * system: the system turn, or the system text between sys_pre and
 * sys_post at the top of the user turn), then text[0..len), then, when
 * `answer` is 1, the user turn's closing and the model turn's opening (the
 * model answers next). Control pieces are ids; the text between two of
 * them is tokenized as one string, so a family whose markup is text ([INST]
 * in a Llama 2 vocabulary) tokenizes as llama.cpp tokenizes the rendered
 * template. Text that continues the stream's text before the call
 * (IN_USER's join, Llama 2's " </s>" after an answer) goes without the
 * dummy prefix a SentencePiece vocabulary puts before text tokenized
 * alone: a leading space of that text stands for it, else the text is
 * tokenized after a newline whose tokens are dropped.
 * COMPLETION: system is not used; a document (answer 0) is BOS + the
 * tokens of "Context:\n{text}"; a question (answer 1) is the tokens of
 * "\n\nAnswer with a quote from the context.\nQuestion: {text}\nAnswer:"
 * (BOS + "Question: {text}\nAnswer:" when it starts the stream), each string
 * tokenized whole; with ct->example, the first question (start is not
 * CHAT_START_AFTER_MODEL) follows the worked example "Question: "
 * CHAT_EXAMPLE_Q "\nAnswer: {example}\n\n". system may be NULL. mk (may be
 * NULL) gets where text and the example lie in v: the rest of the turn
 * (markup, system, instruction) is its fixed part, whose attention is the
 * evidence baseline (engine/evidence/evidence.h); the example, which reads
 * the document's start, is neither. 0 or a negative code (v keeps what was
 * appended). */
struct chat_turn_marks {
	int text_at;      /* index in v of the first token of text */
	int example_at;   /* the worked example: tokens [example_at, example_end) */
	int example_end;  /* (example_at == example_end: none) */
};
int chat_build_turn(struct chat_tokvec *v, const struct chat_template *ct,
		    const struct tok *t, enum chat_turn_start start, const char *system,
		    const char *text, size_t len, int answer, struct chat_turn_marks *mk,
		    char *err, size_t errlen);

/* 1 when id ends a model turn: the family's end-of-turn pieces (gemma
 * <end_of_turn>; chatml <|im_end|>, <|endoftext|>; llama3 <|eot_id|>,
 * <|end_of_text|>, <|eom_id|>; llama2 and mistral </s>; phi3 <|end|>,
 * <|endoftext|>), EOS, or the piece that opens a turn (a model that opens
 * the next turn has ended its own). */
int chat_is_end(const struct chat_template *ct, int32_t id);

/* The stop rules over an answer's text, fed piece by piece (pure: no
 * model). Leading white space is held back and dropped; with TEMPLATE a
 * leading role word ("user", "model", "assistant") followed by white
 * space is dropped too. With COMPLETION the answer ends at a newline after visible text (a
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
