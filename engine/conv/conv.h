/* conv.h - a conversation: the one decode loop, over a pluggable KV method.
 *
 * A conversation continues a model state (borrowed) from wherever its
 * caller left it: after a stored document restored into the state (app/),
 * or empty (`sekv generate`, the benchmark). Turns come from the model's
 * chat template (chat_build_turn); answers are sampled (engine/conv/sampler.h)
 * and streamed as complete UTF-8 pieces, one view (struct conv_step) per
 * step. Global layers attend through a KV method (struct conv_kv): full
 * (exact rows in the state), SeKV, or a rival at the same device budget
 * (StreamingLLM, SnapKV, H2O, Quest, ShadowKV); a method that can evict forgets the
 * oldest turns to stay within its budget. One loaded model serves any
 * number of conversations. Loading documents lives in app/ (store/).
 */
#ifndef SEKV_CONV_H
#define SEKV_CONV_H

#include <stddef.h>
#include <stdint.h>

#include "engine/conv/sampler.h"

struct conv;
struct model;
struct model_state;
struct tok;
struct sekv_ctx;
struct sekv_mem;
struct kv_subset;
struct kv_quest;
struct kv_shadow;
struct sekv_stats;
struct sekv_zoom;
struct model_probe;

#define CONV_TAIL_CAP 8192 /* default tokens a conversation adds (question + answer) */

/* A KV method: how global layers attend, and what it holds. All fields
 * are read at conv_new; ctx is borrowed and must outlive the conversation.
 * A NULL function means the full-KV behaviour named beside it. */
struct conv_kv {
	const char *name;  /* "full", "sekv", a rival's ("streaming", "snapkv", ...) */
	void *ctx;         /* the method's decode stream */
	/* model_attn callback (engine/model/model.h); NULL: exact rows in the state */
	int (*attend)(void *ctx, int layer, int pos, const float *q,
		      const float *k, const float *v, float *out);
	/* rows held after the conversation's start, per global layer;
	 * NULL: every position decoded since conv_new */
	int (*tail_rows)(const void *ctx);
	/* forgets the rows of positions before pos (0 or SEKV_EINVAL);
	 * NULL: never evicts */
	int (*evict)(void *ctx, int pos);
	/* device-tier KV bytes now; NULL: held positions x global layers x
	 * model_kv_bytes of one row */
	size_t (*resident_bytes)(const void *ctx);
	/* live counters and this step's zooms; NULL: none */
	const struct sekv_stats *(*stats)(const void *ctx);
	size_t fixed_bytes;  /* device bytes held whatever the tail (SeKV static part) */
	size_t budget_bytes; /* device-tier budget, bytes; 0 = no cap */
	int n_span;          /* spans zooms refer to (0: the method never zooms) */
	/* attention probe of the method (engine/model/model.h, struct model_probe);
	 * NULL: the state's exact rows are probed (model_state_set_probe) */
	void (*set_probe)(void *ctx, const struct model_probe *p);
	/* called by conv_ask once a question turn is decoded, before the
	 * answer's first token is (and by conv_answer_begin): a method that
	 * chooses its rows from the question (SnapKV) chooses them here.
	 * 0 or a negative code; NULL: nothing */
	int (*answer_begin)(void *ctx);
	/* called with 1 before a question turn's first token is decoded and
	 * with 0 once the turn is done (or stopped), before answer_begin: a
	 * method that reads the question turn otherwise than the answer
	 * (SeKV's exact question turn) switches here. NULL: nothing */
	void (*question)(void *ctx, int on);
};

/* Full KV: exact rows in the model state (needs global_exact). */
void conv_kv_full(struct conv_kv *kv);
/* A rival keeping a subset of the exact rows (engine/kv/kv_subset.h), named
 * name (static storage, e.g. "streaming", "snapkv", "h2o"), with its
 * device budget. */
void conv_kv_subset(struct conv_kv *kv, const char *name, struct kv_subset *s,
		    size_t budget_bytes);
/* Quest (engine/kv/kv_quest.h), named "quest", with its device budget. */
void conv_kv_quest(struct conv_kv *kv, struct kv_quest *s, size_t budget_bytes);
/* ShadowKV (engine/kv/kv_shadow.h), named "shadowkv", with its device budget. */
void conv_kv_shadow(struct conv_kv *kv, struct kv_shadow *s, size_t budget_bytes);
/* SeKV over mem through sc (both borrowed, outliving the conversation). */
void conv_kv_sekv(struct conv_kv *kv, struct sekv_ctx *sc, const struct sekv_mem *mem);

struct conv_params {
	int n_predict;       /* answer tokens at most, >= 0 */
	int tail_cap;        /* tokens the conversation may add, >= 1 (CONV_TAIL_CAP) */
	int n_batch;         /* > 0: question turns are prefilled in chunks of
	                        n_batch (full KV only, as `generate` does); 0:
	                        decoded token by token through the KV method */
	int in_user_turn;    /* 1: the state ends inside an open user turn (a
	                        document): the first question joins it after a
	                        blank line; 0: the first turn starts the stream */
	int format;          /* enum chat_format of the turns and stop rules;
	                        -1: the model's own (chat_format_of_gguf) */
	int n_turn_before;   /* turns already in the state (a resumed
	                        conversation): the first question closes the
	                        model's turn, as a later one does (0) */
	int surprisal;       /* 1: every decoded token's surprisal is kept
	                        (conv_surprisal); each token's logits are then
	                        computed, question tokens included (0) */
	float h_first;       /* the surprisal given to the first token when the
	                        state has no logits (a resumed stream): what
	                        conv_next_surprisal said before it stopped (0) */
	const char *example; /* completion format: the worked example's answer
	                        before the first question (chat_example_of_text),
	                        borrowed for the conversation; NULL: none */
	struct sampler_params sampler;
};

/* Defaults: 256 answer tokens, CONV_TAIL_CAP, token by token, new stream,
 * the model's own format, sampler_default_params. */
void conv_default_params(struct conv_params *p);

/* One step as the caller sees it (borrowed for the callback). While the
 * question turn is decoded, question is 1 and there is no piece or token. */
struct conv_step {
	int question;            /* 1: a question token was decoded */
	const char *piece;       /* complete UTF-8 text this token finished */
	int piece_len;           /* bytes, >= 0 */
	int32_t token;           /* sampled token (-1 during the question) */
	int n_gen;               /* answer tokens so far */
	double tps;              /* answer tokens/s so far */
	const struct sekv_stats *stats; /* zooms of this step; NULL without */
	size_t resident_bytes;   /* device tier now */
	size_t peak_resident_bytes;
	const float *logits;     /* [n_vocab] raw logits after this token (the
	                            next token's distribution, before any sampler
	                            penalty): during the question its last token
	                            only (NULL before), in the answer every token
	                            that was decoded (NULL for one a stop rule
	                            ended, which is not) */
};

/* Return nonzero to stop (the question or the answer). */
typedef int (*conv_step_fn)(void *ud, const struct conv_step *st);
/* A warning before an answer starts (msg borrowed for the call). */
typedef void (*conv_warn_fn)(void *ud, const char *msg);

/* Why an answer ended. */
enum conv_stop {
	CONV_STOP_STOP,    /* the model ended it (EOS, end of turn, a stop rule) */
	CONV_STOP_LENGTH,  /* the length cap (-n, or where the context ends) */
	CONV_STOP_USER,    /* the step callback stopped it */
};

/* "stop", "length", "user" (static storage). */
const char *conv_stop_name(enum conv_stop s);

struct conv_answer {
	char *text;              /* malloc'ed, NUL-terminated (conv_answer_free):
	                            what the stop rules let through (no leading
	                            or trailing white space, no stop text) */
	size_t text_len;
	char rest[256];          /* bytes of a UTF-8 sequence left incomplete
	                            at the end (not in text) */
	int n_rest;
	int32_t *ids;            /* [n_gen] answer token ids, malloc'ed; when a
	                            stop rule ended the answer inside a token
	                            that also held answer text, that token is the
	                            last and was not decoded */
	int n_gen;
	int n_question;          /* tokens decoded for the question turn */
	enum conv_stop stopped;  /* why it ended */
	int n_cap;               /* the length cap it ran under, tokens */
	char warn[256];          /* why this answer may exceed the budget, or "" */
	int repeats_example;     /* 1: the answer is the worked example's answer
	                            (conv_params.example) again: a base model that
	                            finds no answer tends to copy it */
	int n_evicted_turns;     /* earlier turns dropped to stay within the budget */
	int n_evicted_tokens;
	double question_s;       /* seconds on the question turn */
	size_t question_host_bytes; /* SeKV's exact question turn: the rows it
	                            rebuilt, host-tier scratch (sekv_stats) */
	double decode_s;         /* seconds generating the answer */
	double decode_tps;
	size_t peak_resident_bytes;
	size_t peak_tail_bytes;  /* SeKV: of the peak, the conversation's rows
	                            (question and answer) and the rows rebuilt
	                            from factors (sekv_stats); 0 otherwise */
	size_t peak_recon_bytes;
	double zoom_per_token;   /* mean zooms per answer token, one per (span,
	                            global layer, KV head) rebuilt or reused */
	float alpha_q[3];        /* 10th, 50th, 90th percentile of alpha_S over
	                            every zoom of every answer step (log-spaced
	                            bins of 1/20 decade from 1e-4; the spread
	                            shows whether the router saturates); -1
	                            without zooms */
	double kv_read_per_token; /* mean KV bytes an answer step read: the method's
	                            sekv_stats.read_bytes, else the rows it holds */
	double mass_recall;      /* SeKV with exact keys (sekv_ctx_set_exact_keys):
	                            mean mass_recall over the answer's steps, global
	                            layers and query heads; -1 otherwise */
	double attn_err;         /* SeKV with exact keys and values
	                            (sekv_ctx_set_exact_values): mean relative error
	                            of the attention output against exact attention
	                            over the answer's steps, global layers and query
	                            heads (sekv_stats.attn_err_sum); -1 otherwise */
	double mass_oracle;      /* SeKV with exact keys and a budget: mean
	                            sekv_stats mass_oracle over the answer's steps
	                            (the mass the budget's bytes would hold as the
	                            best rows); -1 otherwise */
	double *mass_recall_lh;  /* [n_global][n_head] the same mean per global
	                            layer and query head (sekv_stats.mass_recall_lh),
	                            malloc'ed; NULL when mass_recall is -1 */
	int n_zoom;
	struct sekv_zoom *zoom;  /* [n_zoom] aggregated (engine/sekv/sekv.h), by
	                            steps descending, malloc'ed */
};

void conv_answer_free(struct conv_answer *a); /* NULL is a no-op */

/* Opens a conversation continuing ms (model_state_n_past positions are
 * its start) with model m and tokenizer tk (NULL: no turns, only
 * conv_prefill and conv_feed, as the benchmark does). m, tk, ms and kv->ctx are
 * borrowed: they must outlive the conversation, and ms is used by nothing
 * else meanwhile. Scratch for every step is sized here. Errors:
 * SEKV_EUNSUP (no chat template), SEKV_EINVAL (bad params), SEKV_ENOMEM. */
int conv_new(struct conv **out, const struct model *m, const struct tok *tk,
	     struct model_state *ms, const struct conv_kv *kv,
	     const struct conv_params *p, char *err, size_t errlen);
void conv_free(struct conv *c); /* NULL is a no-op */

/* Probes the attention of every later decode step through the KV method
 * (bit-neutral: answers do not change). The mass of each question's text
 * and of the answer tokens accumulates into p->mass; that of each turn's
 * fixed part before the text (opening and instruction: the baseline of
 * engine/evidence/evidence.h) into base [p->n][p->n_pos], or into p->mass too when
 * base is NULL. Both borrowed until replaced; p NULL: off. */
void conv_set_probe(struct conv *c, const struct model_probe *p, float *base);

void conv_set_warn(struct conv *c, conv_warn_fn fn, void *ud);
const struct model *conv_model(const struct conv *c);

/* Prefills ids[0..n) in chunks of the state's batch p->n_batch (full KV,
 * exact rows; nothing is sampled). 0 or a negative code. */
int conv_prefill(struct conv *c, const int32_t *ids, int n, char *err, size_t errlen);

/* Feeds given tokens (teacher forcing): decodes ids[0..n) one by one
 * through the KV method, logits after the last one (conv_logits). Counts
 * against tail_cap. 0 or a negative code (SEKV_EINVAL past tail_cap). */
int conv_feed(struct conv *c, const int32_t *ids, int n, char *err, size_t errlen);

/* The token ids decoded (or prefilled) since conv_new or conv_set_kv,
 * oldest first: turns and answers as the model saw them; *n of them (the
 * first tail_cap when more were decoded). Borrowed, valid until the next
 * call on c. */
const int32_t *conv_tokens(const struct conv *c, int *n);
/* Their surprisal (nats, -log p of each under the logits before it; the
 * first token of a resumed stream gets p.h_first) with p.surprisal, else
 * NULL and *n = 0. Borrowed like conv_tokens. */
const float *conv_surprisal(const struct conv *c, int *n);
/* The surprisal the next turn's first token will have (it closes the
 * model's turn, whatever the question), under the logits after the last
 * decoded token; p.h_first when there are none. Store it with a resumable
 * conversation and give it back as h_first. 0 or a tokenizer error. */
int conv_next_surprisal(const struct conv *c, float *h, char *err, size_t errlen);
/* Goes on with another KV method from the state's current position (e.g.
 * a SeKV memory that took in the turns so far, sekv_mem_append): kv->ctx
 * borrowed as in conv_new; the turns held are forgotten (the new method
 * holds them), conv_tokens starts again empty; turns asked still count
 * (the next question closes the model's turn). The state, logits and
 * probe stay. 0 or SEKV_ENOMEM. */
int conv_set_kv(struct conv *c, const struct conv_kv *kv, char *err, size_t errlen);

/* Tells the KV method that the answer begins after the tokens fed so far
 * (its answer_begin hook; conv_ask does this itself): for teacher-forced
 * measurements that feed a question, then an answer. 0 or the hook's
 * negative code. */
int conv_answer_begin(struct conv *c, char *err, size_t errlen);

/* Logits [n_vocab] after the last fed token, or NULL (borrowed, valid
 * until the next call on c). */
const float *conv_logits(const struct conv *c);

/* Asks text: builds the turn (chat_build_turn), evicts old turns when the
 * method needs room, decodes the turn (calling fn with question = 1 after
 * each token), then samples up to n_predict tokens until the model ends
 * its turn or a stop rule (chat_stop_feed) ends the answer, calling fn for
 * each token (piece: the text the stop rules let through, maybe empty).
 * The token that ends an answer is not decoded. fn may be NULL. Returns 0, SEKV_EINTR
 * when fn stopped it (ans filled with what was produced), or a negative
 * code. ans is always initialised (conv_answer_free it). */
int conv_ask(struct conv *c, const char *text, conv_step_fn fn, void *ud,
	     struct conv_answer *ans, char *err, size_t errlen);

/* Logits before answer token i of a teacher-forced answer: logits
 * [n_vocab] raw (no sampler penalty), borrowed for the call. Return
 * nonzero to stop. */
typedef int (*conv_forced_fn)(void *ud, int i, const float *logits);

/* Teacher forcing (`sekv eval` kl, DESIGN.md section 6): asks text with the
 * turn built, evicted for and checked against the context exactly as
 * conv_ask does (the turn counts as asked, so a later question follows
 * it), then, instead of sampling, feeds the given answer ids[0..n) one by
 * one through the KV method, calling fn (may be NULL) with the logits
 * before each ids[i], i = 0..n-1. All n ids are decoded. With the same
 * conversation state and ids = the greedy answer of conv_ask, fn sees
 * exactly the logits that answer was sampled from. Returns 0, SEKV_EINTR
 * when fn stopped it, SEKV_EINVAL (n < 0, or the turn and n ids pass the
 * tail capacity or the model's context), or another negative code.
 * a (may be NULL) gets n_question, question_s, decode_s, decode_tps and
 * peak_resident_bytes; conv_answer_free it. */
int conv_ask_forced(struct conv *c, const char *text, const int32_t *ids, int n,
		    conv_forced_fn fn, void *ud, struct conv_answer *a, char *err, size_t errlen);

#endif
