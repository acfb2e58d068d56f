/* session.h - a conversation over one stored document.
 *
 * Opening a session reads the document's SeKV memory (or, with --kv full
 * and the rivals, its exact KV; with --kv h2o also its H2O scores) and the
 * sliding-window rows from the library and resumes
 * the model state at the end of the document: no forward pass over
 * document tokens ever happens here. Questions go to the session's
 * conversation (engine/conv/conv.h: turns, decoding, eviction, streaming live
 * there). One session is one stream: not thread-safe.
 */
#ifndef SEKV_APP_SESSION_H
#define SEKV_APP_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "app/config.h"

struct session;
struct sekv_mem;
struct tok;
struct model;
struct conv;
struct store;
struct conv_answer;
struct app_evidence;

/* Opens document doc_id of the library o->db for model m and tokenizer tk
 * (borrowed: loaded once by the caller, they must outlive the session)
 * with o's --kv mode, budget, rmax and sampling options, and starts a
 * conversation over it (session_conv). Refuses (SEKV_EMISMATCH) a document
 * ingested with another model, an incomplete document (its ingest did not
 * finish: the message names `sekv ingest --resume`)
 * (SEKV_EINVAL), a budget below the memory's fixed part or below what a
 * rival needs (SEKV_EINVAL, naming the smallest budget that fits), and
 * --kv h2o on a document without H2O scores (SEKV_ENOTFOUND: ingest it
 * again). */
int session_open(struct session **out, const struct model *m, const struct tok *tk,
		 const struct app_opts *o, int64_t doc_id, char *err, size_t errlen);
void session_close(struct session *s); /* NULL is a no-op */
/* session_open of stored session session_id (> 0; doc_id is then its
 * document's, whatever is passed) to go on with it: the document's SeKV
 * memory joined with what its turns added, the sliding-window rows of its
 * end, the model state resumed after its last turn (no forward pass over
 * any earlier token); its next turns are stored in it. Refuses
 * (SEKV_EUNSUP, saying why) a session answered with another --kv, or
 * another --kv than sekv; SEKV_ENOTFOUND: no such session; a session
 * whose later turns were stored without KV goes on after the first
 * kv_turns (the info note says so). */
int session_open_stored(struct session **out, const struct model *m, const struct tok *tk,
			const struct app_opts *o, int64_t doc_id, int64_t session_id, char *err,
			size_t errlen);

/* The conversation over the document (borrowed, valid until session_close):
 * ask with conv_ask (engine/conv/conv.h). */
struct conv *session_conv(struct session *s);

/* Stores question, answer a and, when ev is on, its evidence passages (at
 * most 64, by rank) and heads as the next turn of this session in the
 * library, creating the stored session at the first turn. With the SeKV
 * memory, the turn's tokens (question and answer, as decoded since the
 * last turn) also go into the memory (sekv_mem_append: the running
 * surprisal statistics continue), the conversation goes on over the grown
 * memory (so no turn is ever evicted), and what the turn added is stored
 * with it (store_session_put_mem). 0 or a store error (the answer itself
 * is unaffected; say so and go on); a turn whose text was stored but not
 * its KV says so. */
int session_record_turn(struct session *s, const char *question, const struct conv_answer *a,
			const struct app_evidence *ev, char *err, size_t errlen);
/* The stored session's id (`sekv sessions`), 0 before the first turn. */
int64_t session_stored_id(const struct session *s);

/* The library the session reads (borrowed, valid until session_close). */
struct store *session_store(struct session *s);

/* Facts for display and JSON (all borrowed from the session). */
struct session_info {
	int64_t doc_id;
	const char *title;
	const char *model_name;
	int n_tok;                /* document tokens */
	int n_tok_memory;         /* positions the memory holds: the document's,
	                             then the turns it took in (SeKV) */
	int64_t session_id;       /* the stored session, 0 before its first turn */
	int kv_full;
	const char *method;       /* app_kv_name of --kv: "sekv", "full", "streaming",
	                             "snapkv", "h2o", "quest", "summary", "shadowkv"
	                             (static storage) */
	const char *router;       /* SeKV's zoom choice (sekv_router_name: "landmark",
	                             "summary", "oracle", "none" with --kv summary);
	                             NULL for the other methods */
	double budget;            /* device budget, a fraction of full_kv_bytes (full: 1) */
	int r_use;
	double resume_s;          /* opening the stored memory (model, tokenizer excluded) */
	size_t full_kv_bytes;
	size_t host_bytes;        /* host tier: SeKV's factors, Quest's exact rows,
	                             ShadowKV's values */
	size_t static_bytes;      /* device bytes held whatever the conversation: SeKV's
	                             fixed part, a rival's kept rows or metadata and pages */
	size_t swa_bytes;
	int64_t disk_bytes;       /* the document's blobs in the library, plus the
	                             stored session's KV (session_disk_bytes) */
	int64_t session_disk_bytes; /* the stored session's KV (store_session_disk_bytes) */
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

/* Text of tokens [start, start+len) of the document and the turns the
 * memory took in into buf (NUL-terminated): a continuous excerpt that,
 * when it does not fit in cap-1 bytes, stops at a token boundary and
 * ends with an ellipsis (U+2026). */
void session_span_text(const struct session *s, int32_t start, int32_t len,
		       char *buf, size_t cap);

#endif
