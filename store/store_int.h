/* store_int.h - what the files of store/ share and nobody else sees: the
 * connection struct, its cache of prepared statements, the transaction and
 * fault-injection helpers, and checked blob access.
 * Invariant: every statement is prepared once (lazily) and reset before the
 * public function that used it returns, so no read snapshot outlives a call.
 * The schema lives in schema.c, documents in store.c, prefill chunks and
 * SWA rows in store_chunk.c, the SeKV memory in store_mem.c, H2O's scores
 * in store_score.c, sessions and their turns in store_session.c, the
 * resume state of an ingest in store_ingest.c, `sekv check` in
 * store_check.c, PDF page maps in store_pages.c, the reserve file and
 * the ingest locks beside the library in store_disk.c.
 */
#ifndef SEKV_STORE_INT_H
#define SEKV_STORE_INT_H

#include "store/store.h"

#include <sqlite3.h>
#include <stdint.h>

/* Upper bound of every shape field read back (d_h, n_head, layers, ...):
 * keeps size arithmetic far from overflow whatever a corrupt file says. */
#define STORE_MAX_DIM 65536

enum store_st {
	ST_BEGIN, ST_BEGIN_READ, ST_COMMIT, ST_ROLLBACK, ST_SAVEPOINT, ST_RELEASE, ST_ROLLBACK_TO,
	ST_DOC_INSERT, ST_TEXT_INSERT, ST_DOC_GET, ST_DOC_LIST, ST_DOC_DELETE,
	ST_TEXT_GET, ST_DISK_BYTES, ST_VACUUM, ST_FREELIST, ST_KV_DELETE, ST_DOC_FULL_KV_OFF,
	ST_SES_DISK_BYTES,
	ST_TOK_INSERT, ST_KV_INSERT, ST_DOC_ADD_CHUNK, ST_TOK_GET, ST_KV_GET,
	ST_SWA_DELETE, ST_SWA_INSERT, ST_SWA_GET,
	ST_MEM_DELETE, ST_MEM_INSERT, ST_MEML_INSERT, ST_DOC_READY,
	ST_MEM_GET, ST_MEML_GET,
	ST_EVH_GET, ST_EVH_PUT, ST_H2O_PUT, ST_H2O_GET,
	ST_SES_INSERT, ST_SES_GET, ST_SES_LIST, ST_SES_TOUCH, ST_SES_DELETE,
	ST_TURN_INSERT, ST_TURN_GET, ST_TEV_INSERT, ST_TEV_GET,
	ST_ING_INSERT, ST_ING_ADVANCE, ST_ING_GET, ST_ING_DELETE, ST_ING_PEND, ST_ING_END,
	ST_CHECKPOINT,
	ST_PART_INSERT, ST_PARTL_INSERT, ST_PART_DELETE_OPEN, ST_PART_GET, ST_PARTL_GET,
	ST_SSWA_INSERT, ST_SSWA_PRUNE, ST_SSWA_COUNT, ST_SSWA_GET, ST_SES_SET_KV,
	ST_PAGES_PUT, ST_PAGES_GET,
	ST_COUNT
};

struct store {
	sqlite3 *db;
	char path[4096];
	sqlite3_stmt *st[ST_COUNT];
	int tx_depth;      /* store_tx_begin nesting: 1 = BEGIN, >1 = SAVEPOINT */
	int fault_step;    /* >0: the fault_step-th step from now fails */
	int fault_hit;     /* the last failing step was injected */
	int is_open;       /* store_open succeeded: the reserve is this library's */
	int lock_fd;       /* the ingest lock this connection holds (store_doc_lock)
	                      on document lock_doc, or -1 */
	int64_t lock_doc;
};

/* schema.c: creates or migrates the schema of a freshly opened connection.
 * Returns 0, SEKV_EFORMAT (newer version, not a sekv library) or SEKV_EDB. */
int store_schema_open(struct store *s, char *err, size_t errlen);

/* The cached statement id, reset and with bindings cleared, in *out.
 * Returns 0 or SEKV_EDB. */
int store_stmt(struct store *s, enum store_st id, sqlite3_stmt **out,
	       char *err, size_t errlen);
/* Resets every cached statement (ends read snapshots). */
void store_stmt_reset_all(struct store *s);
/* sqlite3_step through the fault-injection counter. */
int store_step(struct store *s, sqlite3_stmt *st);
/* A transaction level (as store_tx_begin) that only reads: every
 * statement until the matching store_tx_commit sees one snapshot. */
int store_tx_begin_read(struct store *s, char *err, size_t errlen);
/* Runs a statement that returns no rows to completion. */
int store_exec_st(struct store *s, enum store_st id, char *err, size_t errlen);
/* Runs statement id, whose one parameter ?1 is key (a row id), to
 * completion; a failure reads "what: obj: message". *changes (when not
 * NULL) gets the rows it changed. 0 or a negative code (SEKV_EDB). */
int store_exec_key(struct store *s, enum store_st id, int64_t key, int *changes,
		   const char *what, const char *obj, char *err, size_t errlen);
/* Formats a SQLite failure as "what: obj: message" and maps rc to a code. */
int store_dberr(struct store *s, int rc, char *err, size_t errlen,
		const char *what, const char *obj);

/* Binds n bytes (a zero-length blob, never NULL, when n == 0). */
int store_bind_blob(sqlite3_stmt *st, int i, const void *p, size_t n);
/* Column col as a blob of exactly `expect` bytes in *p (NULL when 0);
 * anything else is SEKV_EFORMAT "what: doc D: table.column: has N bytes,
 * expected M". *p is valid until the statement steps or resets. */
int store_col_blob(sqlite3_stmt *st, int col, size_t expect, const void **p,
		   const char *what, int64_t doc, const char *table,
		   const char *column, char *err, size_t errlen);

/* The reserve: a file "<library>-reserve" of STORE_RESERVE_BYTES,
 * preallocated beside the library, that a delete or the open before it
 * gives back to the file system when the disk is full (filled by another
 * program): its room lets the commit, the vacuum and the WAL checkpoint
 * that free the document's pages run. Writes keep STORE_ROOM_BYTES free
 * beside it (the WAL checkpoints every STORE_WAL_PAGES pages, so what a
 * checkpoint copies into the database file stays below that), or both
 * when the reserve could not be made. */
#define STORE_RESERVE_BYTES ((int64_t)32 << 20)
#define STORE_ROOM_BYTES ((int64_t)16 << 20)
#define STORE_WAL_PAGES 256
/* 0 when writing `bytes` more leaves the room above free where the
 * library lives (or the free space cannot be known), else SEKV_EIO "what:
 * path: disk full: ...". */
int store_room(struct store *s, int64_t bytes, const char *what, char *err, size_t errlen);

/* store_disk.c: makes the reserve file (0600) when it is missing and fits
 * on the file system; a failure leaves none. Nothing for ":memory:". */
void store_reserve_make(struct store *s);
/* 1 when the reserve file is there at its full size, else 0. */
int store_reserve_held(struct store *s);
/* Removes the reserve file: 1 when there was one (its room is free now),
 * else 0. */
int store_reserve_draw(struct store *s);
/* Runs fn(s, key) (a delete) so that it works on a full disk: on a file
 * system below the room writes keep, or when fn fails outside a
 * transaction with SEKV_EDB or SEKV_EIO, the reserve is drawn on and fn
 * run (again); the reserve is made again afterwards where it fits. fn's
 * result. */
int store_run_delete(struct store *s, int (*fn)(struct store *, int64_t, char *, size_t),
		     int64_t key, char *err, size_t errlen);
/* Takes document doc's ingest lock for the length of a delete into *fd
 * (-1: this connection holds it already): 0, SEKV_EBUSY (another process
 * holds it), SEKV_EIO. store_lock_drop(s, doc, *fd) gives it back. */
int store_lock_take(struct store *s, int64_t doc, int *fd, char *err, size_t errlen);
void store_lock_drop(struct store *s, int64_t doc, int fd);

/* The documents row (no disk_bytes) with shape fields range-checked.
 * Returns 0, SEKV_ENOTFOUND, SEKV_EFORMAT or SEKV_EDB. */
int store_doc_read(struct store *s, int64_t doc, struct store_doc *out,
		   const char *what, char *err, size_t errlen);

/* store_mem.c: slice idx of a session's memory (idx -1: the open end,
 * replacing the one before), positions from pos0, with h_next; written
 * as the document's memory is, without its router. Joins the caller's
 * transaction. 0, SEKV_EINVAL (bad layout), SEKV_EDB. */
int store_mem_put_part(struct store *s, int64_t session, int idx, int32_t pos0, float h_next,
		       const struct sekv_mem *m, char *err, size_t errlen);
/* The slices of session (over document d, whose memory fixes the shapes),
 * in order, the open end last: *parts [*n] new memories, *pos0 [*n] (caller
 * frees all), *h_next the open end's. Inside the caller's read snapshot.
 * 0 (none: *n = 0), SEKV_EFORMAT, SEKV_ENOMEM, SEKV_EDB. */
int store_mem_get_parts(struct store *s, int64_t session, const struct store_doc *d,
			struct sekv_mem ***parts, int32_t **pos0, int *n, float *h_next,
			char *err, size_t errlen);

#endif
