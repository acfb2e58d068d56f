/* session.h - a conversation over one stored document.
 *
 * Opening a session reads the document's SeKV memory (or, with --kv full,
 * its exact KV) and the sliding-window rows from the library and resumes
 * the model state at the end of the document: no forward pass over
 * document tokens ever happens here. Each question is appended as a chat
 * turn and decoded; the answer streams through a callback. One session is
 * one stream: not thread-safe.
 */
#ifndef SEKV_APP_SESSION_H
#define SEKV_APP_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "app/config.h"

struct session;
struct sekv_stats;
struct sekv_mem;
struct tok;
struct model;

/* One generated token as seen by the caller. Borrowed for the call. */
struct session_step {
	const char *piece;       /* complete UTF-8 text this token finished */
	int piece_len;
	int32_t token;
	int n_gen;               /* tokens generated so far */
	double tps;              /* decode tokens/s so far (answer tokens) */
	const struct sekv_stats *stats; /* NULL with --kv full */
	size_t resident_bytes;   /* device tier now */
	size_t peak_resident_bytes;
};

/* Return nonzero to stop the answer. */
typedef int (*session_step_fn)(void *ud, const struct session_step *st);

/* A span zoomed during an answer, aggregated over its decode steps. */
struct session_zoom {
	int32_t span;    /* index into the memory's span list */
	int32_t layer;   /* global layer index */
	int32_t head;    /* query head with the highest alpha */
	int32_t steps;   /* answer tokens during which it was zoomed */
	float alpha_max;
};

struct session_answer {
	char *text;              /* malloc'ed answer (session_answer_free) */
	size_t text_len;
	int32_t *ids;            /* [n_gen] answer token ids, malloc'ed */
	int n_gen;               /* answer tokens */
	int n_question;          /* tokens decoded for the question turn */
	int stopped;             /* 1 when the callback stopped it */
	char warn[256];          /* why this answer may exceed the budget, or "" */
	int n_evicted_turns;     /* earlier turns dropped to stay within the budget */
	int n_evicted_tokens;
	double question_s;       /* seconds decoding the question turn */
	double decode_s;         /* seconds generating the answer */
	double decode_tps;
	size_t peak_resident_bytes;
	double zoom_per_token;   /* mean distinct (layer, span) zooms per answer token */
	int n_zoom;
	struct session_zoom *zoom; /* [n_zoom] by steps, descending */
};

void session_answer_free(struct session_answer *a);

/* Opens document doc_id of the library o->db with o's model, tokenizer,
 * --kv mode, budget, rmax and sampling options. Refuses (SEKV_EMISMATCH) a
 * document ingested with another model, and a document whose ingest did not
 * finish (SEKV_EINVAL). */
int session_open(struct session **out, const struct app_opts *o, int64_t doc_id,
		 char *err, size_t errlen);
void session_close(struct session *s);

/* The session's model (borrowed, valid until session_close). */
const struct model *session_model(const struct session *s);

/* Called (when set) with a warning before an answer starts, e.g. a
 * question too long for the budget. msg is borrowed for the call. */
typedef void (*session_warn_fn)(void *ud, const char *msg);
void session_set_warn(struct session *s, session_warn_fn fn, void *ud);

/* Asks question: decodes the turn, then generates up to o->n_predict
 * tokens or until the model ends its turn. fn (may be NULL) sees every
 * answer token. Returns 0, SEKV_EINTR when fn stopped it (ans still
 * filled), or a negative code. */
int session_ask(struct session *s, const char *question, session_step_fn fn,
		void *ud, struct session_answer *ans, char *err, size_t errlen);

/* Facts for display and JSON (all borrowed from the session). */
struct session_info {
	int64_t doc_id;
	const char *title;
	const char *model_name;
	int n_tok;
	int kv_full;
	double budget;
	int r_use;
	double resume_s;          /* opening the stored memory (model, tokenizer excluded) */
	size_t full_kv_bytes;
	size_t host_bytes;
	size_t static_bytes;
	size_t swa_bytes;
	int64_t disk_bytes;
	float alpha_used;
	int n_span;
	int n_comp;
	int n_layer;
	int n_head;
	const int32_t *layer_id;  /* [n_layer] */
	const struct sekv_mem *mem; /* NULL with --kv full */
	const int32_t *tokens;    /* [n_tok] document tokens */
	const char *note;         /* budget warning, or "" */
};
void session_get_info(const struct session *s, struct session_info *info);

/* Text of document tokens [start, start+len) into buf (NUL-terminated,
 * truncated to cap-1 bytes on a UTF-8 boundary). */
void session_span_text(const struct session *s, int32_t start, int32_t len,
		       char *buf, size_t cap);

#endif
