/* store.c - the library connection: open/close, the prepared-statement
 * cache, transactions (with the fault-injection hook), checked blob access,
 * and the documents table (create, read, list, delete, text, disk bytes).
 * Invariant: a public function returns with every statement reset and the
 * transaction depth it found. Prefill chunks and SWA rows are in store_chunk.c,
 * the SeKV memory in store_mem.c, the schema in schema.c.
 */
#include "store/store_int.h"
#include "engine/base/err.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

static const char *const store_sql[ST_COUNT] = {
	[ST_BEGIN] = "BEGIN IMMEDIATE",
	[ST_BEGIN_READ] = "BEGIN DEFERRED",
	[ST_COMMIT] = "COMMIT",
	[ST_ROLLBACK] = "ROLLBACK",
	[ST_SAVEPOINT] = "SAVEPOINT store_tx",
	[ST_RELEASE] = "RELEASE store_tx",
	[ST_ROLLBACK_TO] = "ROLLBACK TO store_tx",
	[ST_DOC_INSERT] = "INSERT INTO documents (title, source, model_fp, model_name,"
		" state, n_tok, n_layer_global, n_layer_swa, n_head_kv, d_h, swa_window,"
		" prefill_s, created, budget, r_max, alpha_used, prompt_format)"
		" VALUES (?, ?, ?, ?, 0, 0, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?)",
	[ST_TEXT_INSERT] = "INSERT INTO doc_text (doc, text) VALUES (?, ?)",
	[ST_DOC_GET] = "SELECT id, title, source, model_fp, model_name, state, n_tok,"
		" n_layer_global, n_layer_swa, n_head_kv, d_h, swa_window, prefill_s,"
		" created, budget, r_max, alpha_used, prompt_format, full_kv FROM documents WHERE id = ?",
	[ST_DOC_LIST] = "SELECT id, title, source, model_fp, model_name, state, n_tok,"
		" n_layer_global, n_layer_swa, n_head_kv, d_h, swa_window, prefill_s,"
		" created, budget, r_max, alpha_used, prompt_format, full_kv FROM documents ORDER BY id",
	[ST_DOC_DELETE] = "DELETE FROM documents WHERE id = ?",
	[ST_EVH_GET] = "SELECT heads FROM evidence_heads WHERE model_fp = ?",
	[ST_EVH_PUT] = "INSERT OR REPLACE INTO evidence_heads (model_fp, heads, scores, created)"
		" VALUES (?, ?, ?, ?)",
	[ST_H2O_PUT] = "INSERT OR REPLACE INTO h2o_score (doc, n_tok, n_layer, n_head_kv, score)"
		" VALUES (?, ?, ?, ?, ?)",
	[ST_H2O_GET] = "SELECT n_tok, n_layer, n_head_kv, score FROM h2o_score WHERE doc = ?",
	[ST_SES_INSERT] = "INSERT INTO sessions (doc, kv, created, last_used, n_turn)"
		" VALUES (?, ?, ?, ?, 0)",
	[ST_SES_GET] = "SELECT s.id, s.doc, s.kv, s.created, s.last_used, s.n_turn, d.title,"
		" s.n_tok, s.kv_turns FROM sessions s JOIN documents d ON d.id = s.doc WHERE s.id = ?",
	[ST_SES_LIST] = "SELECT s.id, s.doc, s.kv, s.created, s.last_used, s.n_turn, d.title,"
		" s.n_tok, s.kv_turns FROM sessions s JOIN documents d ON d.id = s.doc"
		" WHERE ?1 < 0 OR s.doc = ?1 ORDER BY s.id",
	[ST_SES_SET_KV] = "UPDATE sessions SET n_tok = ?2 - (SELECT n_tok FROM documents d"
		" WHERE d.id = sessions.doc), kv_turns = ?3 WHERE id = ?1",
	/* a session's memory: the parameters are numbered as ST_MEM_INSERT's
	 * and ST_MEML_INSERT's (store_mem.c binds both alike), its own after */
	[ST_PART_INSERT] = "INSERT OR REPLACE INTO session_part (session, idx, pos0, h_next, n_tok,"
		" n_span, n_exact, spans, exact_pos, ranks, tokens, surprisal, is_anchor, lm_len)"
		" VALUES (?1, ?24, ?25, ?26, ?2, ?10, ?11, ?13, ?14, ?15, ?16, ?17, ?18, ?20)",
	[ST_PARTL_INSERT] = "INSERT OR REPLACE INTO session_part_layer (session, idx, layer, k_bar,"
		" v_bar, exact_k, exact_v, fac_s, fac_u, fac_v, lm_k, lm_s)"
		" VALUES (?1, ?14, ?2, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
	/* cascades to its layers */
	[ST_PART_DELETE_OPEN] = "DELETE FROM session_part WHERE session = ? AND idx = -1",
	/* columns as ST_MEM_GET's (the shapes the document's memory fixes),
	 * then idx, pos0, h_next; the open end last */
	[ST_PART_GET] = "SELECT p.n_tok, m.n_layer, m.n_head, m.n_head_kv, m.d_h, m.r_max,"
		" m.alpha_used, m.note, p.n_span, p.n_exact, m.layer_id, p.spans, p.exact_pos,"
		" p.ranks, p.tokens, p.surprisal, p.is_anchor, m.factor_f16, IFNULL(p.lm_len, m.lm_len), 1,"
		" m.rank_energy, m.key_rope_base, m.n_rot, m.rank_energy_v, p.idx, p.pos0, p.h_next"
		" FROM session_part p JOIN sessions s ON s.id = p.session JOIN mem m ON m.doc = s.doc"
		" WHERE p.session = ? ORDER BY p.idx = -1, p.idx",
	[ST_PARTL_GET] = "SELECT layer, x'', x'', k_bar, v_bar, exact_k, exact_v, fac_s, fac_u,"
		" fac_v, lm_k, lm_s FROM session_part_layer WHERE session = ? AND idx = ? ORDER BY layer",
	[ST_SSWA_INSERT] = "INSERT OR REPLACE INTO session_swa (session, pos0, n, k, v)"
		" VALUES (?, ?, ?, ?, ?)",
	[ST_SSWA_PRUNE] = "DELETE FROM session_swa WHERE session = ?1 AND pos0 + n <= ?2",
	[ST_SSWA_COUNT] = "SELECT IFNULL(SUM(n), 0) FROM session_swa WHERE session = ?",
	[ST_SSWA_GET] = "SELECT pos0, n, k, v FROM session_swa WHERE session = ? ORDER BY pos0",
	[ST_SES_TOUCH] = "UPDATE sessions SET n_turn = n_turn + 1, last_used = ?2 WHERE id = ?1",
	[ST_SES_DELETE] = "DELETE FROM sessions WHERE id = ?",
	[ST_TURN_INSERT] = "INSERT INTO turns (session, idx, question, answer, stopped, n_gen,"
		" heads, created) VALUES (?1, (SELECT n_turn FROM sessions WHERE id = ?1),"
		" ?3, ?4, ?5, ?6, ?7, ?8)",
	[ST_TURN_GET] = "SELECT idx, question, answer, stopped, n_gen, heads, created"
		" FROM turns WHERE session = ? ORDER BY idx",
	[ST_TEV_INSERT] = "INSERT INTO turn_evidence (session, idx, rank, start, end, score, peak)"
		" VALUES (?1, (SELECT n_turn FROM sessions WHERE id = ?1), ?3, ?4, ?5, ?6, ?7)",
	[ST_TEV_GET] = "SELECT idx, rank, start, end, score, IFNULL(peak, start) FROM turn_evidence"
		" WHERE session = ? ORDER BY idx, rank",
	[ST_PAGES_PUT] = "INSERT OR REPLACE INTO doc_pages (doc, page0, n_page, text_len, start)"
		" VALUES (?, ?, ?, ?, ?)",
	[ST_PAGES_GET] = "SELECT page0, n_page, text_len, start FROM doc_pages WHERE doc = ?",
	[ST_TEXT_GET] = "SELECT text FROM doc_text WHERE doc = ?",
	/* length() of a blob reads its size from the record header, not its
	 * overflow pages */
	[ST_DISK_BYTES] = "SELECT"
		" (SELECT IFNULL(SUM(length(tokens) + length(surprisal)), 0)"
		"  FROM tok_chunk WHERE doc = ?1)"
		" + (SELECT IFNULL(SUM(length(k) + length(v)), 0) FROM kv_chunk WHERE doc = ?1)"
		" + (SELECT IFNULL(SUM(length(k) + length(v)), 0) FROM swa WHERE doc = ?1)"
		" + (SELECT IFNULL(SUM(length(layer_id) + length(spans) + length(exact_pos)"
		"  + length(ranks) + length(tokens) + length(surprisal) + length(is_anchor)), 0)"
		"  FROM mem WHERE doc = ?1)"
		" + (SELECT IFNULL(SUM(length(tau) + length(route_w) + length(k_bar)"
		"  + length(v_bar) + length(exact_k) + length(exact_v) + length(fac_s)"
		"  + length(fac_u) + length(fac_v) + IFNULL(length(lm_k), 0)"
		"  + IFNULL(length(lm_s), 0)), 0) FROM mem_layer WHERE doc = ?1)"
		" + (SELECT IFNULL(SUM(length(score)), 0) FROM h2o_score WHERE doc = ?1)",
	/* one step of store_give_back: STORE_WAL_PAGES pages */
	[ST_VACUUM] = "PRAGMA incremental_vacuum(256)",
	[ST_FREELIST] = "PRAGMA freelist_count",
	[ST_KV_DELETE] = "DELETE FROM kv_chunk WHERE doc = ?",
	[ST_SES_DISK_BYTES] = "SELECT"
		" (SELECT IFNULL(SUM(length(spans) + length(exact_pos) + length(ranks) + length(tokens)"
		"  + length(surprisal) + length(is_anchor)), 0) FROM session_part WHERE session = ?1)"
		" + (SELECT IFNULL(SUM(length(k_bar) + length(v_bar) + length(exact_k)"
		"  + length(exact_v) + length(fac_s) + length(fac_u) + length(fac_v)"
		"  + IFNULL(length(lm_k), 0) + IFNULL(length(lm_s), 0)), 0)"
		"  FROM session_part_layer WHERE session = ?1)"
		" + (SELECT IFNULL(SUM(length(k) + length(v)), 0) FROM session_swa WHERE session = ?1)",
	[ST_DOC_FULL_KV_OFF] = "UPDATE documents SET full_kv = 0 WHERE id = ?",
	[ST_TOK_INSERT] = "INSERT INTO tok_chunk (doc, pos0, n, tokens, surprisal)"
		" VALUES (?, ?, ?, ?, ?)",
	[ST_KV_INSERT] = "INSERT INTO kv_chunk (doc, layer, pos0, n, k, v)"
		" VALUES (?, ?, ?, ?, ?, ?)",
	[ST_DOC_ADD_CHUNK] = "UPDATE documents SET n_tok = n_tok + ?2,"
		" prefill_s = prefill_s + ?3 WHERE id = ?1",
	[ST_TOK_GET] = "SELECT pos0, n, tokens, surprisal FROM tok_chunk"
		" WHERE doc = ? ORDER BY pos0",
	[ST_KV_GET] = "SELECT pos0, n, k, v FROM kv_chunk"
		" WHERE doc = ? AND layer = ? ORDER BY pos0",
	[ST_SWA_DELETE] = "DELETE FROM swa WHERE doc = ?",
	[ST_SWA_INSERT] = "INSERT INTO swa (doc, idx, layer_id, n_row, pos_end, k, v)"
		" VALUES (?, ?, ?, ?, ?, ?, ?)",
	[ST_SWA_GET] = "SELECT idx, layer_id, n_row, pos_end, k, v FROM swa"
		" WHERE doc = ? ORDER BY idx",
	/* cascades to mem_layer */
	[ST_MEM_DELETE] = "DELETE FROM mem WHERE doc = ?",
	[ST_MEM_INSERT] = "INSERT INTO mem (doc, n_tok, n_layer, n_head, n_head_kv,"
		" d_h, r_max, alpha_used, note, n_span, n_exact, layer_id, spans,"
		" exact_pos, ranks, tokens, surprisal, is_anchor, factor_f16, lm_len, bar_f16,"
		" rank_energy, key_rope_base, n_rot, rank_energy_v)"
		" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?21, ?22, ?23,"
		" ?27)",
	[ST_MEML_INSERT] = "INSERT INTO mem_layer (doc, layer, tau, route_w, k_bar,"
		" v_bar, exact_k, exact_v, fac_s, fac_u, fac_v, lm_k, lm_s)"
		" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
	[ST_DOC_READY] = "UPDATE documents SET state = 1, budget = ?2, r_max = ?3,"
		" alpha_used = ?4 WHERE id = ?1",
	[ST_MEM_GET] = "SELECT n_tok, n_layer, n_head, n_head_kv, d_h, r_max,"
		" alpha_used, note, n_span, n_exact, layer_id, spans, exact_pos, ranks,"
		" tokens, surprisal, is_anchor, factor_f16, lm_len, bar_f16, rank_energy,"
		" key_rope_base, n_rot, rank_energy_v FROM mem WHERE doc = ?",
	[ST_ING_INSERT] = "INSERT OR REPLACE INTO ingest_state (doc, n_tok_total, n_batch, alpha,"
		" rank_energy, key_pre_rope, static_share, n_recent, pos_end, h_next, n_probe, probe,"
		" keep_full_kv, part, n_part, part_limit, text_fp, rank_energy_v, exact_below)"
		" VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, 0, ?, x'', ?, ?, ?, ?, ?, ?, ?)",
	[ST_ING_ADVANCE] = "UPDATE ingest_state SET pos_end = ?2, h_next = ?3, probe = ?4"
		" WHERE doc = ?1",
	[ST_ING_GET] = "SELECT n_tok_total, n_batch, alpha, rank_energy, key_pre_rope,"
		" static_share, n_recent, pos_end, h_next, n_probe, probe, keep_full_kv, part, n_part,"
		" part_limit, next_pending, text_fp, rank_energy_v, exact_below FROM ingest_state"
		" WHERE doc = ?",
	/* a continuation (next_pending) outlives its document's turning ready */
	[ST_ING_DELETE] = "DELETE FROM ingest_state WHERE doc = ? AND next_pending = 0",
	[ST_ING_PEND] = "UPDATE ingest_state SET next_pending = 1, n_probe = 0, probe = x''"
		" WHERE doc = ? AND part + 1 < n_part",
	[ST_ING_END] = "DELETE FROM ingest_state WHERE doc = ? AND next_pending = 1",
	/* gives the file system back what a delete and vacuum freed */
	[ST_CHECKPOINT] = "PRAGMA wal_checkpoint(TRUNCATE)",
	[ST_MEML_GET] = "SELECT layer, tau, route_w, k_bar, v_bar, exact_k, exact_v,"
		" fac_s, fac_u, fac_v, lm_k, lm_s FROM mem_layer WHERE doc = ? ORDER BY layer",
};

int store_dberr(struct store *s, int rc, char *err, size_t errlen,
		const char *what, const char *obj)
{
	const char *why = s->fault_hit ? "injected fault" :
		s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc);
	int code = SEKV_EDB;

	switch (rc & 0xff) {
	case SQLITE_NOMEM: code = SEKV_ENOMEM; break;
	case SQLITE_NOTADB:
	case SQLITE_CORRUPT: code = SEKV_EFORMAT; break;
	}
	s->fault_hit = 0;
	return sekv_errf(err, errlen, code, "%s: %s: %s", what, obj, why);
}

int store_step(struct store *s, sqlite3_stmt *st)
{
	if (s->fault_step > 0 && --s->fault_step == 0) {
		s->fault_hit = 1;
		return SQLITE_IOERR;
	}
	return sqlite3_step(st);
}

void store_fault_step(struct store *s, int n)
{
	s->fault_step = n > 0 ? n : 0;
	s->fault_hit = 0;
}

int store_stmt(struct store *s, enum store_st id, sqlite3_stmt **out,
	       char *err, size_t errlen)
{
	int rc;

	if (!s->st[id]) {
		rc = sqlite3_prepare_v3(s->db, store_sql[id], -1, SQLITE_PREPARE_PERSISTENT,
					&s->st[id], NULL);
		if (rc != SQLITE_OK)
			return store_dberr(s, rc, err, errlen, "prepare", store_sql[id]);
	} else {
		sqlite3_reset(s->st[id]);
		sqlite3_clear_bindings(s->st[id]);
	}
	*out = s->st[id];
	return 0;
}

void store_stmt_reset_all(struct store *s)
{
	for (int i = 0; i < ST_COUNT; i++)
		if (s->st[i])
			sqlite3_reset(s->st[i]);
}

int store_exec_key(struct store *s, enum store_st id, int64_t key, int *changes,
		   const char *what, const char *obj, char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc;

	if ((rc = store_stmt(s, id, &st, err, errlen)))
		return rc;
	sqlite3_bind_int64(st, 1, key);
	rc = store_step(s, st);
	if (changes)
		*changes = sqlite3_changes(s->db);
	sqlite3_reset(st);
	return rc == SQLITE_DONE ? 0 : store_dberr(s, rc, err, errlen, what, obj);
}

int store_exec_st(struct store *s, enum store_st id, char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc;

	if ((rc = store_stmt(s, id, &st, err, errlen)))
		return rc;
	rc = id == ST_ROLLBACK || id == ST_ROLLBACK_TO ? sqlite3_step(st) : store_step(s, st);
	while (rc == SQLITE_ROW)
		rc = sqlite3_step(st);
	sqlite3_reset(st);
	if (rc != SQLITE_DONE)
		return store_dberr(s, rc, err, errlen, "exec", store_sql[id]);
	return 0;
}

/* IMMEDIATE takes the write lock up front: a deferred transaction that
 * reads first could not upgrade once another process has committed. */
int store_tx_begin(struct store *s, char *err, size_t errlen)
{
	int rc = store_exec_st(s, s->tx_depth ? ST_SAVEPOINT : ST_BEGIN, err, errlen);

	if (rc == 0)
		s->tx_depth++;
	return rc;
}

int store_tx_begin_read(struct store *s, char *err, size_t errlen)
{
	int rc = store_exec_st(s, s->tx_depth ? ST_SAVEPOINT : ST_BEGIN_READ, err, errlen);

	if (rc == 0)
		s->tx_depth++;
	return rc;
}

void store_tx_rollback(struct store *s)
{
	if (s->tx_depth <= 0)
		return;
	store_stmt_reset_all(s);
	/* SQLite may already have rolled back the whole transaction itself
	 * (I/O error, disk full): then there is nothing left to undo. */
	if (!sqlite3_get_autocommit(s->db)) {
		if (s->tx_depth == 1) {
			store_exec_st(s, ST_ROLLBACK, NULL, 0);
		} else {
			store_exec_st(s, ST_ROLLBACK_TO, NULL, 0);
			store_exec_st(s, ST_RELEASE, NULL, 0);
		}
	}
	s->tx_depth--;
}

int store_tx_commit(struct store *s, char *err, size_t errlen)
{
	int rc;

	if (s->tx_depth <= 0)
		return sekv_errf(err, errlen, SEKV_EINVAL, "store_tx_commit: %s: no transaction",
				 s->path);
	store_stmt_reset_all(s);
	rc = store_exec_st(s, s->tx_depth == 1 ? ST_COMMIT : ST_RELEASE, err, errlen);
	if (rc) {
		store_tx_rollback(s);
		return rc;
	}
	s->tx_depth--;
	return 0;
}

int store_room(struct store *s, int64_t bytes, const char *what, char *err, size_t errlen)
{
	struct statvfs v;

	if (!strcmp(s->path, ":memory:") || statvfs(s->path, &v) != 0)
		return 0;
	int64_t avail = (int64_t)v.f_bavail * (int64_t)v.f_frsize, keep = STORE_ROOM_BYTES;
	if (!store_reserve_held(s))
		keep += STORE_RESERVE_BYTES;
	if (avail - bytes >= keep)
		return 0;
	return sekv_errf(err, errlen, SEKV_EIO, "%s: %s: disk full: %.1f MiB free, %.1f MiB to write "
			 "and %lld MiB kept free so that documents can still be deleted", what,
			 s->path, avail / 1048576.0, bytes / 1048576.0, (long long)(keep >> 20));
}

int store_bind_blob(sqlite3_stmt *st, int i, const void *p, size_t n)
{
	if (n == 0)
		return sqlite3_bind_zeroblob(st, i, 0);
	return sqlite3_bind_blob64(st, i, p, n, SQLITE_STATIC);
}

int store_col_blob(sqlite3_stmt *st, int col, size_t expect, const void **p,
		   const char *what, int64_t doc, const char *table,
		   const char *column, char *err, size_t errlen)
{
	int type = sqlite3_column_type(st, col);
	const void *b = type == SQLITE_BLOB ? sqlite3_column_blob(st, col) : NULL;
	size_t n = type == SQLITE_BLOB ? (size_t)sqlite3_column_bytes(st, col) : 0;

	if ((type != SQLITE_BLOB && !(type == SQLITE_NULL && expect == 0)) || n != expect)
		return sekv_errf(err, errlen, SEKV_EFORMAT,
				 "%s: doc %lld: %s.%s: has %zu bytes (type %d), expected %zu",
				 what, (long long)doc, table, column, n, type, expect);
	if (expect && !b)
		return sekv_errf(err, errlen, SEKV_ENOMEM, "%s: doc %lld: %s.%s: out of memory",
				 what, (long long)doc, table, column);
	*p = expect ? b : NULL;
	return 0;
}

int store_default_path(char *buf, size_t cap)
{
	const char *xdg = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
	int n;

	/* XDG: a relative XDG_DATA_HOME is invalid and ignored; so is a
	 * relative HOME (it would put the library under the working directory) */
	if (xdg && xdg[0] == '/')
		n = snprintf(buf, cap, "%s/sekv/library.db", xdg);
	else if (home && home[0] == '/')
		n = snprintf(buf, cap, "%s/.local/share/sekv/library.db", home);
	else
		return SEKV_EINVAL;
	return n < 0 || (size_t)n >= cap ? SEKV_EINVAL : 0;
}

/* mkdir -p of the directory part of path (0700: a user's documents). */
static int mkdir_parents(const char *path, char *err, size_t errlen)
{
	char dir[4096];
	size_t n = strlen(path);

	if (n >= sizeof dir)
		return sekv_errf(err, errlen, SEKV_EINVAL, "store_open: %s: path too long", path);
	memcpy(dir, path, n + 1);
	for (char *p = dir + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(dir, 0700) != 0 && errno != EEXIST)
			return sekv_errf(err, errlen, SEKV_EIO, "store_open: mkdir %s: %s",
					 dir, strerror(errno));
		*p = '/';
	}
	return 0;
}

/* Creates the library file 0600 when it is not there (an empty file is a
 * new database to SQLite): the umask can only take bits away, and SQLite
 * gives the -wal and -shm files the mode of the database file. */
static int create_private(const char *path, char *err, size_t errlen)
{
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);

	if (fd >= 0)
		return close(fd) == 0 ? 0 : sekv_errf(err, errlen, SEKV_EIO, "store_open: %s: %s",
						      path, strerror(errno));
	if (errno == EEXIST)
		return 0;
	return sekv_errf(err, errlen, SEKV_EIO, "store_open: create %s: %s", path, strerror(errno));
}

/* The SQLite connection of s->path, its schema checked or made. */
static int open_db(struct store *s, char *err, size_t errlen)
{
	int rc = sqlite3_open_v2(s->path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);

	if (rc != SQLITE_OK)
		return sekv_errf(err, errlen, SEKV_EIO, "store_open: %s: %s", s->path,
				 s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
	if (sqlite3_db_readonly(s->db, "main") == 1)
		return sekv_errf(err, errlen, SEKV_EIO, "store_open: %s: file is read-only", s->path);
	sqlite3_busy_timeout(s->db, 5000);
	return store_schema_open(s, err, errlen);
}

int store_open(struct store **out, const char *path, char *err, size_t errlen)
{
	const uint16_t one = 1;
	struct store *s;
	int rc;

	*out = NULL;
	/* blobs are memcpy'd arrays; the file format says little-endian */
	if (*(const uint8_t *)&one != 1)
		return sekv_errf(err, errlen, SEKV_EUNSUP, "store_open: host: big-endian");
	s = calloc(1, sizeof *s);
	if (!s)
		return sekv_errf(err, errlen, SEKV_ENOMEM, "store_open: store: out of memory");
	s->lock_fd = -1;
	/* "" would be SQLite's temporary database, gone at close */
	if (path && !*path) {
		rc = sekv_errf(err, errlen, SEKV_EINVAL, "store_open: empty path");
		goto fail;
	}
	if (!path)
		rc = store_default_path(s->path, sizeof s->path);
	else if (strlen(path) >= sizeof s->path)
		rc = SEKV_EINVAL;
	else {
		memcpy(s->path, path, strlen(path) + 1);
		rc = 0;
	}
	if (rc) {
		rc = sekv_errf(err, errlen, SEKV_EINVAL, "store_open: %s: no usable path",
			       path ? path : "$XDG_DATA_HOME or $HOME");
		goto fail;
	}
	if (strcmp(s->path, ":memory:") != 0 &&
	    ((rc = mkdir_parents(s->path, err, errlen)) || (rc = create_private(s->path, err, errlen))))
		goto fail;
	rc = open_db(s, err, errlen);
	/* a disk another program filled: SQLite cannot create the -wal and
	 * -shm files; the reserve's room lets it */
	if ((rc == SEKV_EIO || rc == SEKV_EDB) && store_room(s, 0, "store_open", NULL, 0) != 0 &&
	    store_reserve_draw(s)) {
		sqlite3_close(s->db);
		s->db = NULL;
		rc = open_db(s, err, errlen);
	}
	if (rc)
		goto fail;
	s->is_open = 1;
	store_reserve_make(s);
	*out = s;
	return 0;
fail:
	store_close(s);
	return rc;
}

void store_close(struct store *s)
{
	if (!s)
		return;
	while (s->tx_depth > 0)
		store_tx_rollback(s);
	store_doc_unlock(s);
	for (int i = 0; i < ST_COUNT; i++)
		sqlite3_finalize(s->st[i]);
	sqlite3_close(s->db);
	/* the last connection removed the -wal and -shm: their room may let
	 * a reserve drawn on come back */
	if (s->is_open)
		store_reserve_make(s);
	free(s);
}

const char *store_path(const struct store *s)
{
	return s->path;
}

static void copy_str(char *dst, size_t cap, const unsigned char *src)
{
	size_t n = src ? strlen((const char *)src) : 0;

	if (n >= cap)
		n = cap - 1;
	if (n)
		memcpy(dst, src, n);
	dst[n] = 0;
}

static int in_range(int64_t v, int64_t lo, int64_t hi)
{
	return v >= lo && v <= hi;
}

/* One documents row (ST_DOC_GET/ST_DOC_LIST column order) into *d. */
static int doc_from_row(sqlite3_stmt *st, struct store_doc *d, const char *what,
			char *err, size_t errlen)
{
	memset(d, 0, sizeof *d);
	d->id = sqlite3_column_int64(st, 0);
	copy_str(d->title, sizeof d->title, sqlite3_column_text(st, 1));
	copy_str(d->source, sizeof d->source, sqlite3_column_text(st, 2));
	copy_str(d->model_fp, sizeof d->model_fp, sqlite3_column_text(st, 3));
	copy_str(d->model_name, sizeof d->model_name, sqlite3_column_text(st, 4));
	d->state = sqlite3_column_int(st, 5);
	d->n_tok = sqlite3_column_int64(st, 6);
	d->prefill_s = sqlite3_column_double(st, 12);
	d->created = sqlite3_column_double(st, 13);
	d->budget = sqlite3_column_double(st, 14);
	d->r_max = sqlite3_column_int(st, 15);
	d->alpha_used = (float)sqlite3_column_double(st, 16);
	/* NULL: ingested before formats were stored, with the chat template */
	copy_str(d->prompt_format, sizeof d->prompt_format, sqlite3_column_text(st, 17));
	d->full_kv = sqlite3_column_int64(st, 18) != 0;
	for (int c = 7; c <= 11; c++)
		if (!in_range(sqlite3_column_int64(st, c), 0, c == 11 ? INT32_MAX : STORE_MAX_DIM))
			return sekv_errf(err, errlen, SEKV_EFORMAT,
					 "%s: doc %lld: documents.%s: %lld out of range", what,
					 (long long)d->id, sqlite3_column_name(st, c),
					 (long long)sqlite3_column_int64(st, c));
	d->n_layer_global = sqlite3_column_int(st, 7);
	d->n_layer_swa = sqlite3_column_int(st, 8);
	d->n_head_kv = sqlite3_column_int(st, 9);
	d->d_h = sqlite3_column_int(st, 10);
	d->swa_window = sqlite3_column_int(st, 11);
	if (!in_range(d->n_tok, 0, INT32_MAX) ||
	    (d->state != STORE_DOC_PREFILL && d->state != STORE_DOC_READY))
		return sekv_errf(err, errlen, SEKV_EFORMAT,
				 "%s: doc %lld: documents: n_tok %lld / state %d out of range",
				 what, (long long)d->id, (long long)d->n_tok, d->state);
	return 0;
}

int store_doc_read(struct store *s, int64_t doc, struct store_doc *out,
		   const char *what, char *err, size_t errlen)
{
	sqlite3_stmt *st;
	char obj[48];
	int rc;

	if ((rc = store_stmt(s, ST_DOC_GET, &st, err, errlen)))
		return rc;
	sqlite3_bind_int64(st, 1, doc);
	rc = store_step(s, st);
	if (rc == SQLITE_ROW)
		rc = doc_from_row(st, out, what, err, errlen);
	else if (rc == SQLITE_DONE)
		rc = sekv_errf(err, errlen, SEKV_ENOTFOUND, "%s: doc %lld: no such document",
			       what, (long long)doc);
	else {
		snprintf(obj, sizeof obj, "doc %lld", (long long)doc);
		rc = store_dberr(s, rc, err, errlen, what, obj);
	}
	sqlite3_reset(st);
	return rc;
}

/* Sum of the document's blob lengths, or a negative code. */
static int64_t disk_bytes(struct store *s, int64_t doc, char *err, size_t errlen)
{
	sqlite3_stmt *st;
	char obj[48];
	int64_t n;
	int rc;

	if ((rc = store_stmt(s, ST_DISK_BYTES, &st, err, errlen)))
		return rc;
	sqlite3_bind_int64(st, 1, doc);
	rc = store_step(s, st);
	if (rc != SQLITE_ROW) {
		snprintf(obj, sizeof obj, "doc %lld", (long long)doc);
		rc = store_dberr(s, rc, err, errlen, "store_doc_disk_bytes", obj);
		sqlite3_reset(st);
		return rc;
	}
	n = sqlite3_column_int64(st, 0);
	sqlite3_reset(st);
	return n;
}

int64_t store_doc_disk_bytes(struct store *s, int64_t doc)
{
	int64_t n = disk_bytes(s, doc, NULL, 0);

	store_stmt_reset_all(s);
	return n;
}

int store_doc_create(struct store *s, struct store_doc *doc, const char *text,
		     size_t text_len, char *err, size_t errlen)
{
	sqlite3_stmt *st;
	struct timespec ts;
	int rc;

	if (!in_range(doc->n_layer_global, 0, STORE_MAX_DIM) ||
	    !in_range(doc->n_layer_swa, 0, STORE_MAX_DIM) ||
	    !in_range(doc->n_head_kv, 0, STORE_MAX_DIM) || !in_range(doc->d_h, 0, STORE_MAX_DIM) ||
	    doc->swa_window < 0 || (text_len && !text) ||
	    text_len > INT32_MAX)
		return sekv_errf(err, errlen, SEKV_EINVAL,
				 "store_doc_create: %s: bad shape or text", doc->title);
	if (doc->created <= 0) {
		clock_gettime(CLOCK_REALTIME, &ts);
		doc->created = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
	}
	if ((rc = store_tx_begin(s, err, errlen)))
		return rc;
	if ((rc = store_stmt(s, ST_DOC_INSERT, &st, err, errlen)))
		goto fail;
	sqlite3_bind_text(st, 1, doc->title, (int)strnlen(doc->title, sizeof doc->title),
			  SQLITE_STATIC);
	sqlite3_bind_text(st, 2, doc->source, (int)strnlen(doc->source, sizeof doc->source),
			  SQLITE_STATIC);
	sqlite3_bind_text(st, 3, doc->model_fp, (int)strnlen(doc->model_fp, sizeof doc->model_fp),
			  SQLITE_STATIC);
	sqlite3_bind_text(st, 4, doc->model_name, (int)strnlen(doc->model_name, sizeof doc->model_name),
			  SQLITE_STATIC);
	sqlite3_bind_int(st, 5, doc->n_layer_global);
	sqlite3_bind_int(st, 6, doc->n_layer_swa);
	sqlite3_bind_int(st, 7, doc->n_head_kv);
	sqlite3_bind_int(st, 8, doc->d_h);
	sqlite3_bind_int(st, 9, doc->swa_window);
	sqlite3_bind_double(st, 10, doc->created);
	sqlite3_bind_double(st, 11, doc->budget);
	sqlite3_bind_int(st, 12, doc->r_max);
	sqlite3_bind_double(st, 13, doc->alpha_used);
	if (doc->prompt_format[0])
		sqlite3_bind_text(st, 14, doc->prompt_format,
				  (int)strnlen(doc->prompt_format, sizeof doc->prompt_format), SQLITE_STATIC);
	if ((rc = store_step(s, st)) != SQLITE_DONE) {
		rc = store_dberr(s, rc, err, errlen, "store_doc_create", "documents");
		goto fail;
	}
	doc->id = sqlite3_last_insert_rowid(s->db);
	if ((rc = store_stmt(s, ST_TEXT_INSERT, &st, err, errlen)))
		goto fail;
	sqlite3_bind_int64(st, 1, doc->id);
	sqlite3_bind_text(st, 2, text_len ? text : "", (int)text_len, SQLITE_STATIC);
	if ((rc = store_step(s, st)) != SQLITE_DONE) {
		rc = store_dberr(s, rc, err, errlen, "store_doc_create", "doc_text");
		goto fail;
	}
	if ((rc = store_tx_commit(s, err, errlen)))
		goto out;
	doc->state = STORE_DOC_PREFILL;
	doc->n_tok = 0;
	doc->prefill_s = 0;
	doc->disk_bytes = 0;
	goto out;
fail:
	store_tx_rollback(s);
out:
	store_stmt_reset_all(s);
	return rc;
}

int store_doc_get(struct store *s, int64_t doc, struct store_doc *out,
		  char *err, size_t errlen)
{
	int64_t n;
	int rc;

	if ((rc = store_tx_begin_read(s, err, errlen)))
		return rc;
	rc = store_doc_read(s, doc, out, "store_doc_get", err, errlen);
	if (rc == 0 && (n = disk_bytes(s, doc, err, errlen)) < 0)
		rc = (int)n;
	if (rc) {
		store_tx_rollback(s);
	} else {
		out->disk_bytes = n;
		rc = store_tx_commit(s, err, errlen);
	}
	store_stmt_reset_all(s);
	return rc;
}

int store_doc_list(struct store *s, struct store_doc **out, int *n,
		   char *err, size_t errlen)
{
	struct store_doc *d = NULL, *nd;
	sqlite3_stmt *st;
	int rc, cap = 0, cnt = 0;
	int64_t b;

	*out = NULL;
	*n = 0;
	if ((rc = store_tx_begin_read(s, err, errlen)))
		return rc;
	if ((rc = store_stmt(s, ST_DOC_LIST, &st, err, errlen)))
		goto fail;
	while ((rc = store_step(s, st)) == SQLITE_ROW) {
		if (cnt == cap) {
			cap = cap ? cap * 2 : 16;
			nd = realloc(d, (size_t)cap * sizeof *d);
			if (!nd) {
				rc = sekv_errf(err, errlen, SEKV_ENOMEM,
					       "store_doc_list: %s: out of memory", s->path);
				goto fail;
			}
			d = nd;
		}
		if ((rc = doc_from_row(st, &d[cnt], "store_doc_list", err, errlen)))
			goto fail;
		if ((b = disk_bytes(s, d[cnt].id, err, errlen)) < 0) {
			rc = (int)b;
			goto fail;
		}
		d[cnt++].disk_bytes = b;
	}
	if (rc != SQLITE_DONE) {
		rc = store_dberr(s, rc, err, errlen, "store_doc_list", "documents");
		goto fail;
	}
	if ((rc = store_tx_commit(s, err, errlen)))
		goto out;
	store_stmt_reset_all(s);
	*out = d;
	*n = cnt;
	return 0;
fail:
	store_tx_rollback(s);
out:
	store_stmt_reset_all(s);
	free(d);
	return rc;
}

/* PRAGMA freelist_count, or -1. */
static int64_t freelist_count(struct store *s)
{
	sqlite3_stmt *st = NULL;
	int64_t n = -1;

	if (store_stmt(s, ST_FREELIST, &st, NULL, 0) == 0 && store_step(s, st) == SQLITE_ROW)
		n = sqlite3_column_int64(st, 0);
	sqlite3_reset(st);
	return n;
}

void store_give_back(struct store *s)
{
	int64_t n, was;

	/* Housekeeping after a committed delete: whatever it says, the delete
	 * stands, so its result is not reported. Inside a transaction it waits
	 * for the next delete. Each step moves at most STORE_WAL_PAGES pages
	 * from the file's end through the WAL, which the checkpoint then
	 * empties: a full disk needs room for one step, not for the pages
	 * after the hole. */
	if (s->tx_depth)
		return;
	n = freelist_count(s);
	do {
		was = n;
		if (store_exec_st(s, ST_VACUUM, NULL, 0) || store_exec_st(s, ST_CHECKPOINT, NULL, 0))
			break;
		n = freelist_count(s);
	} while (n > 0 && n < was);
}

/* The delete of store_doc_delete, without the lock and the reserve. */
static int doc_delete(struct store *s, int64_t doc, char *err, size_t errlen)
{
	char obj[48];
	int rc, changes = 0;

	snprintf(obj, sizeof obj, "doc %lld", (long long)doc);
	if ((rc = store_tx_begin(s, err, errlen)))
		return rc;
	/* the foreign keys cascade to every table the document owns */
	if ((rc = store_exec_key(s, ST_DOC_DELETE, doc, &changes, "store_doc_delete", obj, err,
				 errlen)))
		goto fail;
	if (changes == 0) {
		rc = sekv_errf(err, errlen, SEKV_ENOTFOUND,
			       "store_doc_delete: %s: no such document", obj);
		goto fail;
	}
	if ((rc = store_tx_commit(s, err, errlen)))
		goto out;
	store_give_back(s);
	goto out;
fail:
	store_tx_rollback(s);
out:
	store_stmt_reset_all(s);
	return rc;
}

int store_doc_delete(struct store *s, int64_t doc, char *err, size_t errlen)
{
	int fd, rc;

	if ((rc = store_lock_take(s, doc, &fd, err, errlen)))
		return rc;
	rc = store_run_delete(s, doc_delete, doc, err, errlen);
	if (rc == 0 && s->lock_doc == doc)
		store_doc_unlock(s);
	store_lock_drop(s, doc, fd);
	return rc;
}

int store_doc_text_dup(struct store *s, int64_t doc, char **text,
		       size_t *len, char *err, size_t errlen)
{
	sqlite3_stmt *st;
	const unsigned char *p;
	char obj[48];
	size_t n;
	int rc;

	*text = NULL;
	if (len)
		*len = 0;
	snprintf(obj, sizeof obj, "doc %lld", (long long)doc);
	if ((rc = store_stmt(s, ST_TEXT_GET, &st, err, errlen)))
		return rc;
	sqlite3_bind_int64(st, 1, doc);
	rc = store_step(s, st);
	if (rc == SQLITE_DONE) {
		rc = sekv_errf(err, errlen, SEKV_ENOTFOUND,
			       "store_doc_text_dup: %s: no such document", obj);
		goto out;
	}
	if (rc != SQLITE_ROW) {
		rc = store_dberr(s, rc, err, errlen, "store_doc_text_dup", obj);
		goto out;
	}
	p = sqlite3_column_text(st, 0);
	n = (size_t)sqlite3_column_bytes(st, 0);
	*text = malloc(n + 1);
	if (!*text || (!p && n)) {
		free(*text);
		*text = NULL;
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "store_doc_text_dup: %s: out of memory", obj);
		goto out;
	}
	if (n)
		memcpy(*text, p, n);
	(*text)[n] = 0;
	if (len)
		*len = n;
	rc = 0;
out:
	store_stmt_reset_all(s);
	return rc;
}
