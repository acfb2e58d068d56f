/* store.h - the SQLite library file: documents, their SeKV memories, the
 * exact KV decoding needs, H2O's scores, ingest progress, and sessions
 * (each question, answer and its evidence).
 *
 * One file (default $XDG_DATA_HOME/sekv/library.db). Every write that
 * belongs together happens in one transaction, so a crash leaves either the
 * old or the new state. Only this module includes sqlite3.h. Blobs are
 * little-endian arrays; every blob length read back is checked against the
 * shape recorded beside it before use.
 */
#ifndef SEKV_STORE_H
#define SEKV_STORE_H

#include <stddef.h>
#include <stdint.h>

struct sekv_mem;
struct store; /* opaque; one connection, not thread-safe */

/* Opens (creating directories 0700, file 0600 whatever the umask, so its
 * -wal and -shm are 0600 too; schema; running migrations; WAL mode, a
 * 5 s busy timeout) the library at path, and makes its reserve beside it
 * ("<path>-reserve", 32 MiB preallocated, 0600) when missing and it fits:
 * on a disk another program filled, an open that fails (SQLite cannot
 * create its -wal and -shm) removes the reserve and tries again, so that
 * `sekv rm`, `ls` and `check` still run; store_close and the deletes make
 * it again where it fits. NULL path = default location; "" is refused (SQLite
 * would open a temporary database), SEKV_EINVAL. Errors: SEKV_EIO, SEKV_EDB
 * (SQLite message included), SEKV_EFORMAT (newer schema than this build,
 * not a sekv library, not an SQLite file), SEKV_EUNSUP (big-endian host). */
int store_open(struct store **out, const char *path, char *err, size_t errlen);
/* Releases the ingest lock it holds (store_doc_unlock), closes, and makes
 * the reserve again when missing and it fits. NULL is a no-op. */
void store_close(struct store *s);
/* Path of the open database file (borrowed). */
const char *store_path(const struct store *s);
/* Default library path into buf: $XDG_DATA_HOME/sekv/library.db, or
 * $HOME/.local/share/sekv/library.db; relative values of either are
 * ignored. Returns 0, or SEKV_EINVAL (neither usable, or cap too small). */
int store_default_path(char *buf, size_t cap);

enum store_doc_state { STORE_DOC_PREFILL = 0, STORE_DOC_READY = 1 };

struct store_doc {
	int64_t id;
	char title[256];
	char source[1024];        /* path the text came from */
	char model_fp[65];        /* model fingerprint (model_hparams) */
	char model_name[128];
	int state;                /* enum store_doc_state */
	int64_t n_tok;            /* tokens stored so far */
	int n_layer_global;
	int n_layer_swa;
	int n_head_kv;
	int d_h;
	int swa_window;
	double prefill_s;         /* seconds spent in forward passes */
	double created;           /* unix time */
	int64_t disk_bytes;       /* bytes of this document's blobs */
	double budget;            /* budget the memory was built for */
	int r_max;
	float alpha_used;
	char prompt_format[16];   /* chat_format_name of the turns it was
	                             ingested with; "" (NULL in the file, rows
	                             from before formats were stored): "template" */
	int full_kv;              /* 1: its exact global KV (kv_chunk) is kept;
	                             0: dropped (store_doc_drop_full_kv) */
};

/* Creates a document row in state PREFILL and stores its text (UTF-8).
 * Shape fields of *doc are stored; doc->id is set. */
int store_doc_create(struct store *s, struct store_doc *doc, const char *text,
		     size_t text_len, char *err, size_t errlen);

/* Appends one prefill chunk in one transaction: tokens [n], surprisal [n]
 * (nats), and the exact KV of every global layer for those positions:
 * k[l], v[l] -> [n][n_head_kv][d_h] fp16. pos0 must equal the tokens stored
 * so far. Also updates n_tok and prefill_s (seconds to add). A chunk that
 * would leave less than 16 MiB free on the library's file system beside
 * its reserve (48 MiB when it has none) is refused with SEKV_EIO ("disk
 * full"). A disk filled by others still fails the write cleanly
 * (SEKV_EDB), the chunks before it kept; the reserve then lets deleting a
 * document (an incomplete one included) run and give its space back. */
int store_doc_put_chunk(struct store *s, int64_t doc, int64_t pos0, int n,
			const int32_t *tokens, const float *surprisal,
			const uint16_t *const *k, const uint16_t *const *v,
			double prefill_s, char *err, size_t errlen);

/* Stores the sliding-window layers' last rows: for swa layer i (model
 * layer layer_id[i]) rows of positions n_tok-n_row .. n_tok-1, k[i], v[i]
 * -> [n_row][n_head_kv][d_h] fp16 in position order. Replaces earlier ones.
 * Keeps the same free room as store_doc_put_chunk (SEKV_EIO "disk full"). */
int store_doc_put_swa(struct store *s, int64_t doc, int n_layer,
		      const int32_t *layer_id, int n_row,
		      const uint16_t *const *k, const uint16_t *const *v,
		      char *err, size_t errlen);

/* Stores (replacing any earlier one) the SeKV memory and marks the document
 * READY (forgetting its resume state unless store_ingest_pend marked it,
 * releasing this connection's ingest lock on it), in one transaction.
 * budget/r_max are recorded in the doc row.
 * m (borrowed) must match the document: n_layer = n_layer_global, n_head_kv,
 * d_h (else SEKV_EMISMATCH), m->n_tok <= n_tok, comp_span = the spans with
 * full == 0 in order, ranks in 0..min(len, d_h) (else SEKV_EINVAL). */
int store_doc_put_mem(struct store *s, int64_t doc, const struct sekv_mem *m,
		      double budget, char *err, size_t errlen);

/* Reads a document row. SEKV_ENOTFOUND when absent. */
int store_doc_get(struct store *s, int64_t doc, struct store_doc *out,
		  char *err, size_t errlen);
/* Lists documents in id order: *out malloc'ed array of *n rows. */
int store_doc_list(struct store *s, struct store_doc **out, int *n,
		   char *err, size_t errlen);
/* Deletes a document and everything it owns in one transaction, then gives
 * the freed pages back to the file system (store_give_back). Works on a
 * full disk: on one below the room writes keep, or when the delete fails,
 * the reserve is removed first (the delete then run again) and made again
 * after. SEKV_ENOTFOUND when absent; SEKV_EBUSY "document N is being
 * ingested by another process" when another process holds its ingest
 * lock (store_doc_lock; it is held for the length of the delete). */
int store_doc_delete(struct store *s, int64_t doc, char *err, size_t errlen);
/* Retrieval heads stored for the model with fingerprint model_fp
 * ("L:H,...", engine/evidence/evidence.h) into buf [cap] (NUL-terminated).
 * 0, SEKV_ENOTFOUND (none stored), SEKV_EFORMAT (longer than cap), SEKV_EDB. */
int store_evidence_heads_get(struct store *s, const char *model_fp, char *buf, size_t cap,
			     char *err, size_t errlen);
/* Stores (replaces) them with the calibration's scores (free text).
 * 0 or SEKV_EDB. */
int store_evidence_heads_put(struct store *s, const char *model_fp, const char *heads,
			     const char *scores, char *err, size_t errlen);
/* The document's text (malloc'ed, NUL-terminated, caller frees). */
int store_doc_text_dup(struct store *s, int64_t doc, char **text,
		       size_t *len, char *err, size_t errlen);

/* Tokens and surprisal of positions [0, n_tok): malloc'ed, caller frees.
 * Either of tokens/surprisal may be NULL (not wanted). */
int store_doc_get_tokens(struct store *s, int64_t doc, int32_t **tokens,
			 float **surprisal, int64_t *n_tok, char *err, size_t errlen);
/* Exact KV of global layer l (0..n_layer_global-1) for all stored positions
 * into caller buffers k, v [n_tok][n_head_kv][d_h] fp16 (only for --kv full
 * and for building the memory; never read by the SeKV decode path).
 * SEKV_EFORMAT when the stored chunks do not tile 0..n_tok-1 exactly;
 * SEKV_ENOTFOUND when they were dropped (store_doc_drop_full_kv). */
int store_doc_get_full_kv(struct store *s, int64_t doc, int l,
			  uint16_t *k, uint16_t *v, char *err, size_t errlen);
/* Drops a ready document's exact global KV (its kv_chunk rows, the
 * largest part of it: full_kv_bytes) and sets its full_kv to 0; its SeKV
 * memory, tokens and sliding-window rows stay, so it answers as before,
 * and a reference that needs the exact rows (--kv full, the rivals, the
 * oracle router) prefills them again from its tokens (app/full_kv.h).
 * Joins an open transaction; else commits and gives the freed pages back
 * (store_give_back), drawing on the reserve on a full disk as
 * store_doc_delete does. 0; SEKV_ENOTFOUND (no such document); SEKV_EINVAL
 * (incomplete: its resume needs the rows); SEKV_EDB. A document whose rows
 * were already dropped is not an error. */
int store_doc_drop_full_kv(struct store *s, int64_t doc, char *err, size_t errlen);
/* Gives the file system back the pages committed deletes freed (SQLite's
 * incremental vacuum in steps of 256 pages, each followed by a WAL
 * checkpoint that truncates, so that the WAL never holds more than one
 * step of moved pages whatever the size deleted). Housekeeping: the deletes
 * stand whatever it meets, so it reports nothing; inside a transaction it
 * does nothing (call it after the outermost commit). */
void store_give_back(struct store *s);
/* SWA rows as stored by store_doc_put_swa; arrays malloc'ed [n_layer]
 * pointers each to [n_row][n_head_kv][d_h], freed with store_swa_free.
 * A document without SWA layers gives *n_layer = 0 and NULL arrays.
 * SEKV_ENOTFOUND: none stored yet; SEKV_EMISMATCH: the rows were stored at
 * another n_tok than the document's now (a chunk was committed after them,
 * e.g. a crash between the two: the caller recomputes them). */
int store_doc_get_swa(struct store *s, int64_t doc, int *n_layer,
		      int32_t **layer_id, int *n_row, uint16_t ***k,
		      uint16_t ***v, char *err, size_t errlen);
void store_swa_free(int n_layer, int32_t *layer_id, uint16_t **k, uint16_t **v);
/* Loads the SeKV memory (all shapes checked against blob lengths; spans,
 * ranks and exact positions validated) into a new sekv_mem (caller frees
 * with sekv_mem_free). SEKV_ENOTFOUND when none is stored, SEKV_EFORMAT
 * naming the doc and table when the file disagrees with itself. */
int store_doc_get_mem(struct store *s, int64_t doc, struct sekv_mem **out,
		      char *err, size_t errlen);

/* H2O's scores of document doc (app/ingest.c; engine/kv/kv_select.h):
 * score [n_layer][n_head_kv][n_tok] f32, borrowed for the call, the
 * accumulated attention each position got during the prefill, summed
 * over each KV head's query heads. Replaces earlier ones; joins an open
 * transaction (ingest writes them with the memory). The shape must be the
 * document's: n_layer_global, n_head_kv, its stored n_tok (else
 * SEKV_EMISMATCH). 0, SEKV_EINVAL, SEKV_ENOTFOUND (no such document),
 * SEKV_EDB. */
int store_doc_put_h2o(struct store *s, int64_t doc, const float *score, int n_layer,
		      int n_head_kv, int n_tok, char *err, size_t errlen);
/* Reads them into *score, malloc'ed [n_layer_global][n_head_kv][n_tok]
 * (caller frees), and *n_tok. SEKV_ENOTFOUND: none stored (a document
 * ingested before the scores were: ingest it again), or no such document;
 * SEKV_EFORMAT: the row's shape or blob length disagrees with the
 * document; SEKV_ENOMEM, SEKV_EDB. */
int store_doc_get_h2o(struct store *s, int64_t doc, float **score, int *n_tok,
		      char *err, size_t errlen);

/* The page map of a document read from a PDF (table doc_pages): page
 * page0 + i (1-based numbers) starts at byte start[i] of the document's
 * text [text_len bytes], i < n_page; a page ends where the next starts,
 * the last at text_len. start is borrowed, ascending, start[0] == 0, all
 * <= text_len (else SEKV_EINVAL). Replaces an earlier map; joins an open
 * transaction. 0, SEKV_EINVAL, SEKV_ENOTFOUND (no such document), SEKV_EDB. */
int store_doc_put_pages(struct store *s, int64_t doc, int page0, int n_page,
			const int64_t *start, int64_t text_len, char *err, size_t errlen);
/* Reads it: *start malloc'ed [*n_page] (caller frees), *page0, *text_len.
 * SEKV_ENOTFOUND: no map (a text document, or no such document);
 * SEKV_EFORMAT: the row disagrees with itself; SEKV_ENOMEM, SEKV_EDB. */
int store_doc_get_pages(struct store *s, int64_t doc, int *page0, int *n_page,
			int64_t **start, int64_t *text_len, char *err, size_t errlen);

/* ---- resuming an interrupted ingest (app/ingest.c) ------------------ */

/* The ingest lock of document doc: an advisory lock on the file
 * "<library>-ingest-<doc>" (0600) that the process writing the document's
 * chunks holds, so that another process's `ingest --resume` and
 * store_doc_delete of it refuse at once. The kernel drops it when the
 * process dies (kill -9 leaves at most the file, which the next lock
 * reuses). A connection holds one: taking another releases the one held;
 * store_doc_put_mem (the document ready), store_doc_delete of it and
 * store_close release it. Nothing for ":memory:". 0 (held; again by this
 * connection: 0), SEKV_EBUSY "document N is being ingested by another
 * process" (another connection or process holds it), SEKV_EIO. */
int store_doc_lock(struct store *s, int64_t doc, char *err, size_t errlen);
/* Releases the ingest lock this connection holds, removing its file; none
 * held: a no-op. */
void store_doc_unlock(struct store *s);
/* 1 when another connection or process holds document doc's ingest lock
 * (`sekv ls` says `ingesting`), else 0 (this connection's own lock, none,
 * or it cannot be known). Takes no lock, so it never makes one fail. */
int store_doc_busy(struct store *s, int64_t doc);

/* What an ingest needs to continue after a crash exactly where its last
 * committed chunk ended (the swa table holds the sliding-window rows at
 * that point, the chunk tables the tokens, surprisal and global KV). */
struct store_ingest {
	int64_t n_tok_total;  /* tokens of the whole document turn */
	int n_batch;          /* prefill tokens per chunk (chunks start at multiples) */
	float alpha;          /* SeKV build settings the ingest was started with */
	float rank_energy;
	float rank_energy_v;
	int exact_below;      /* tokens under which the memory stays exact */
	int key_pre_rope;
	double static_share;
	int n_recent;
	int64_t pos_end;      /* tokens committed (= documents.n_tok) */
	float h_next;         /* surprisal (nats) of token pos_end under the logits
	                         after token pos_end - 1 (0 when pos_end = 0) */
	int n_probe;          /* H2O probe pairs (model_probe.n), 0: none */
	int keep_full_kv;     /* 1: the exact global KV stays when it completes */
	int part;             /* of a --split ingest, this document's part,
	                         0..n_part-1 (0 when not split) */
	int n_part;           /* parts that ingest planned, >= 1 (1: not split) */
	int part_limit;       /* most tokens of a part in its plan (app_plan's
	                         limit), 0: none */
	int next_pending;     /* 1: the document is ready and the parts after it
	                         are still to be stored (store_ingest_pend) */
	char text_fp[17];     /* of a split ingest, the fingerprint of the whole
	                         text it read (16 hex digits); "": none */
};

/* Records the resume state of document doc (in state PREFILL) at pos_end 0:
 * in's settings, n_tok_total, n_probe and its place in a split ingest
 * (part, n_part, part_limit, text_fp; its pos_end, h_next, next_pending
 * ignored). Replaces an earlier row. Joins an open transaction. 0,
 * SEKV_EINVAL (bad values: also n_part < 1, part outside 0..n_part-1, a
 * text_fp not of 16 hex digits or ""), SEKV_EDB. */
int store_ingest_begin(struct store *s, int64_t doc, const struct store_ingest *in,
		       char *err, size_t errlen);
/* Advances it to the document's stored n_tok (call in the transaction of
 * the chunk just appended): h_next as above; probe [n_probe] rows of ld
 * floats (ld >= n_tok), of which the first n_tok of each are stored (NULL
 * when n_probe is 0). 0, SEKV_ENOTFOUND (no resume state), SEKV_EINVAL,
 * SEKV_EDB. */
int store_ingest_advance(struct store *s, int64_t doc, float h_next, const float *probe,
			 int64_t ld, char *err, size_t errlen);
/* Reads it into *out and, when probe is not NULL, the probe mass into a
 * malloc'ed *probe [n_probe][pos_end] (caller frees; NULL when empty).
 * SEKV_ENOTFOUND: no resume state (the document is ready and no split
 * ingest's continuation, absent, or its ingest started before resume
 * states were kept); SEKV_EFORMAT: pos_end
 * is not the document's n_tok, or a bad shape or blob length. */
int store_ingest_get(struct store *s, int64_t doc, struct store_ingest *out, float **probe,
		     char *err, size_t errlen);
/* Marks the resume state of document doc, part in->part < n_part - 1 of a
 * split ingest, as the continuation of that ingest (next_pending; the
 * probe goes): store_doc_put_mem, in the same transaction, then keeps it,
 * so that a resume of the ready document stores the parts after it. Joins
 * an open transaction. 0, SEKV_EINVAL (no resume state, or of the last
 * part), SEKV_EDB. */
int store_ingest_pend(struct store *s, int64_t doc, char *err, size_t errlen);
/* Deletes the continuation of document doc (the part before the one whose
 * document is being created, in the same transaction). Joins an open
 * transaction. 0, SEKV_ENOTFOUND (none: another ingest took it up), SEKV_EDB. */
int store_ingest_end(struct store *s, int64_t doc, char *err, size_t errlen);

/* ---- sekv check ------------------------------------------------------ */

/* Called once per problem found, with one line "where: what" (borrowed for
 * the call). */
typedef void (*store_check_fn)(void *ud, const char *problem);
/* Checks the whole library: SQLite's integrity and foreign-key checks,
 * then ours: every document's text present (and a PDF's page map over
 * the whole of it), its tok_chunk and kv_chunk
 * rows tiling 0..n_tok per global layer at the right blob lengths, its
 * sliding-window rows ending at n_tok; a ready document's SeKV memory
 * loading (every span's factors present at the sizes its ranks say,
 * mem.n_tok <= n_tok) and H2O's scores of its shape; an incomplete one's
 * resume state at its n_tok; every session's turns numbered 0..n_turn-1
 * in time order, last_used not before any turn, evidence inside the
 * text, its KV (store_session_get_kv) loading and joining its document's
 * memory. *n_problem gets the count. Returns 0, problems or not: a query
 * that cannot run (a file too damaged) is itself reported as a problem. */
int store_check(struct store *s, store_check_fn fn, void *ud, int *n_problem,
		char *err, size_t errlen);

/* Bytes the document occupies in the file (sum of its blob lengths).
 * Returns the count, or a negative SEKV_E* code (SEKV_EDB). */
int64_t store_doc_disk_bytes(struct store *s, int64_t doc);

/* ---- sessions: conversations over a document, turn by turn ---------- */

struct store_session {
	int64_t id;
	int64_t doc;
	char kv[16];              /* memory answered from (--kv): "sekv", "full", a rival's name */
	double created;           /* unix time */
	double last_used;         /* unix time of the last turn (created before) */
	int n_turn;
	char doc_title[256];
	int64_t n_tok;            /* positions its memory holds after the document's */
	int kv_turns;             /* turns whose KV its memory holds (the first ones) */
};

struct store_evidence_row {
	int rank;                 /* 1 = best */
	int64_t start, end;       /* byte range [start, end) of the document's text */
	double score;             /* evidence_rank's score */
	int64_t peak;             /* byte of its most attended token, in [start, end)
	                             (start for rows stored before peaks were) */
};

struct store_turn {
	int idx;                  /* 0-based, in the order asked */
	char *question;           /* UTF-8; owned by the array when read */
	char *answer;
	char stopped[8];          /* conv_stop_name: "stop", "length", "user"; "import": a
	                             turn imported from a chat history (app/import.h),
	                             part of the document's text and memory already */
	int n_gen;                /* answer tokens */
	char heads[128];          /* retrieval heads "L:H,...", "" without evidence */
	double created;
	int n_ev;
	struct store_evidence_row *ev; /* [n_ev] by rank; owned when read */
};

/* Creates a session over document doc answering from kv (--kv: "sekv", "full", a rival's name);
 * *id set. 0, SEKV_ENOTFOUND (no such document), SEKV_EDB. */
int store_session_create(struct store *s, int64_t doc, const char *kv, int64_t *id,
			 char *err, size_t errlen);
/* Appends turn t (its idx ignored: the next one) with its t->n_ev evidence
 * rows in one transaction and advances the session's n_turn and last_used.
 * t is borrowed. 0, SEKV_ENOTFOUND (no such session), SEKV_EDB. */
int store_session_add_turn(struct store *s, int64_t session, const struct store_turn *t,
			   char *err, size_t errlen);
/* One session (with its document's title). 0, SEKV_ENOTFOUND, SEKV_EDB. */
int store_session_get(struct store *s, int64_t id, struct store_session *out,
		      char *err, size_t errlen);
/* Sessions of document doc (doc < 0: all), by id, into a malloc'ed *out
 * [*n] (free it; NULL when none). 0, SEKV_ENOMEM, SEKV_EDB. */
int store_session_list(struct store *s, int64_t doc, struct store_session **out, int *n,
		       char *err, size_t errlen);
/* The turns of a session in order, each with its evidence, into *out [*n]
 * (store_turns_free). 0, SEKV_ENOMEM, SEKV_EFORMAT (evidence of a turn
 * that is not there, a bad range), SEKV_EDB. */
int store_session_turns_dup(struct store *s, int64_t session, struct store_turn **out,
			    int *n, char *err, size_t errlen);
void store_turns_free(struct store_turn *t, int n); /* NULL is a no-op */
/* What a turn adds to a session's KV (app/session.c): the document's SeKV
 * memory grown by the turns so far (sekv_mem_append) is kept as slices
 * (sekv_mem_slice_dup): part, what this turn made final (positions
 * [part_pos0, part_pos0 + part->n_tok)), stored once, and open, the rest
 * up to the conversation's end (its recent window), replacing the one of
 * the turn before; with the sliding-window rows of the newest positions,
 * so that a resume runs no forward pass. All borrowed. */
struct store_session_mem {
	int part_idx;                 /* the turn's index (its part's key) */
	int32_t part_pos0;
	const struct sekv_mem *part;  /* NULL: the turn made nothing final */
	int32_t open_pos0;            /* = part_pos0 + part->n_tok, or the
	                                 earlier open end's start */
	const struct sekv_mem *open;  /* required; may hold no tokens */
	float h_next;                 /* conv_next_surprisal (nats) */
	int kv_turns;                 /* turns the memory holds after this one */
	int32_t swa_pos0;             /* sliding-window rows of positions
	                                 [swa_pos0, swa_pos0 + swa_n), ending at
	                                 the conversation's end */
	int swa_n;
	int swa_n_layer;              /* the document's n_layer_swa */
	const uint16_t *const *swa_k; /* [swa_n_layer] -> [swa_n][n_head_kv][d_h] fp16,
	                                 the model's sliding-window layers in order */
	const uint16_t *const *swa_v;
	int swa_window;               /* rows a resume needs: older ones are deleted */
};

/* Writes w for session (whose memory then ends at open_pos0 + open->n_tok)
 * and records its n_tok and kv_turns, in one transaction (joining an open
 * one: app/session.c writes it with the turn). Keeps the free room of
 * store_doc_put_chunk (SEKV_EIO "disk full"). 0, SEKV_EINVAL (a bad
 * slice, shapes), SEKV_ENOTFOUND (no such session), SEKV_EDB. */
int store_session_put_mem(struct store *s, int64_t session, const struct store_session_mem *w,
			  char *err, size_t errlen);

/* A session's KV as stored by store_session_put_mem. */
struct store_session_kv {
	int n_part;                   /* slices, the open end last (0: no KV kept) */
	struct sekv_mem **part;       /* [n_part], join them to the document's
	                                 memory with sekv_mem_join */
	int32_t *pos0;                /* [n_part] their first positions */
	float h_next;
	int kv_turns;
	int32_t swa_pos0;             /* sliding-window rows of positions */
	int swa_n;                    /* [swa_pos0, swa_pos0 + swa_n) */
	int swa_n_layer;
	uint16_t *swa_k;              /* [swa_n_layer][swa_n][n_head_kv][d_h] fp16 */
	uint16_t *swa_v;
};
/* Reads it (one snapshot) into *out (store_session_kv_free; zeroed first).
 * A session without KV gives n_part = 0. Every shape and blob length is
 * checked against the document's memory and row: SEKV_EFORMAT; also
 * SEKV_ENOTFOUND (no such session), SEKV_ENOMEM, SEKV_EDB. */
int store_session_get_kv(struct store *s, int64_t session, struct store_session_kv *out,
			 char *err, size_t errlen);
void store_session_kv_free(struct store_session_kv *kv);

/* Bytes of the session's KV in the file (its memory slices and sliding-
 * window rows: the sum of their blob lengths; its turns' text apart), or
 * a negative SEKV_E* code (SEKV_EDB). 0 for a session without KV or an
 * unknown id. */
int64_t store_session_disk_bytes(struct store *s, int64_t session);

/* Deletes a session, its turns, their evidence and its KV, then gives the
 * freed pages back to the file system, drawing on the reserve on a full
 * disk as store_doc_delete does. 0, SEKV_ENOTFOUND, SEKV_EDB. */
int store_session_delete(struct store *s, int64_t id, char *err, size_t errlen);

/* Groups several writes (e.g. the last chunk and store_doc_put_swa) into
 * one transaction: every store_* call between begin and commit joins it,
 * and nothing is visible or durable before commit. Calls nest (inner levels
 * are SAVEPOINTs). A failing store_* call inside undoes only its own part;
 * the caller then commits or rolls back. store_tx_commit that fails has
 * rolled the level back. Returns 0 or SEKV_EDB. */
int store_tx_begin(struct store *s, char *err, size_t errlen);
int store_tx_commit(struct store *s, char *err, size_t errlen);
void store_tx_rollback(struct store *s);

/* Fault injection (tests only, as in SQLite's own tests): the n-th
 * sqlite3_step from now on this connection fails with SQLITE_IOERR, and
 * later ones run normally again. n <= 0 turns it off. ROLLBACKs are exempt
 * (they are the recovery being tested). */
void store_fault_step(struct store *s, int n);

#endif
