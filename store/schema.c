/* schema.c - the library file's schema and its migrations.
 *
 * The version lives in PRAGMA user_version, the file's kind in PRAGMA
 * application_id. A build opens files of its own version or older (running
 * every migration in one transaction) and refuses newer ones. Big blobs are
 * the last columns of their rows, so reading the small columns before them
 * never walks their overflow pages. Blobs are little-endian arrays whose
 * shapes are the integer columns beside them (or of the parent row).
 */
#include "store/store_int.h"
#include "engine/base/err.h"

#include <stdio.h>

#define STORE_APP_ID 0x73656b76 /* "sekv" */

/* Retrieval heads of a model (evidence, engine/evidence/evidence.h): heads is
 * "L:H,..." (model layer : query head), scores the calibration's report. */
#define STORE_MIGRATION_EVIDENCE_HEADS \
	"CREATE TABLE evidence_heads (" \
	" model_fp TEXT PRIMARY KEY, heads TEXT NOT NULL, scores TEXT NOT NULL," \
	" created REAL NOT NULL);"

/* Migration i takes the file from version i to version i + 1. */
static const char *const store_migration[] = {
	/* 0 -> 1: documents, prefill chunks, SWA rows, SeKV memory */
	"CREATE TABLE documents ("
	" id INTEGER PRIMARY KEY AUTOINCREMENT,"
	" title TEXT NOT NULL, source TEXT NOT NULL,"
	" model_fp TEXT NOT NULL, model_name TEXT NOT NULL,"
	" state INTEGER NOT NULL, n_tok INTEGER NOT NULL,"
	" n_layer_global INTEGER NOT NULL, n_layer_swa INTEGER NOT NULL,"
	" n_head_kv INTEGER NOT NULL, d_h INTEGER NOT NULL,"
	" swa_window INTEGER NOT NULL, prefill_s REAL NOT NULL,"
	" created REAL NOT NULL, budget REAL NOT NULL, r_max INTEGER NOT NULL,"
	" alpha_used REAL NOT NULL);"
	/* kept apart so listing documents never reads the texts */
	"CREATE TABLE doc_text ("
	" doc INTEGER PRIMARY KEY REFERENCES documents(id) ON DELETE CASCADE,"
	" text TEXT NOT NULL);"
	/* tokens int32 [n], surprisal f32 [n] (nats) */
	"CREATE TABLE tok_chunk ("
	" doc INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,"
	" pos0 INTEGER NOT NULL, n INTEGER NOT NULL,"
	" tokens BLOB NOT NULL, surprisal BLOB NOT NULL,"
	" PRIMARY KEY (doc, pos0));"
	/* k, v fp16 [n][n_head_kv][d_h] of global layer `layer` */
	"CREATE TABLE kv_chunk ("
	" doc INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,"
	" layer INTEGER NOT NULL, pos0 INTEGER NOT NULL, n INTEGER NOT NULL,"
	" k BLOB NOT NULL, v BLOB NOT NULL,"
	" PRIMARY KEY (doc, layer, pos0));"
	/* k, v fp16 [n_row][n_head_kv][d_h]: positions pos_end-n_row..pos_end-1 */
	"CREATE TABLE swa ("
	" doc INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,"
	" idx INTEGER NOT NULL, layer_id INTEGER NOT NULL,"
	" n_row INTEGER NOT NULL, pos_end INTEGER NOT NULL,"
	" k BLOB NOT NULL, v BLOB NOT NULL,"
	" PRIMARY KEY (doc, idx));"
	/* layer_id int32 [n_layer]; spans int32 [n_span][3] (start, len, full);
	 * exact_pos int32 [n_exact]; ranks int32 [n_layer][n_comp][n_head_kv][2];
	 * tokens int32, surprisal f32, is_anchor u8 [n_tok] */
	"CREATE TABLE mem ("
	" doc INTEGER PRIMARY KEY REFERENCES documents(id) ON DELETE CASCADE,"
	" n_tok INTEGER NOT NULL, n_layer INTEGER NOT NULL,"
	" n_head INTEGER NOT NULL, n_head_kv INTEGER NOT NULL,"
	" d_h INTEGER NOT NULL, r_max INTEGER NOT NULL,"
	" alpha_used REAL NOT NULL, note TEXT NOT NULL,"
	" n_span INTEGER NOT NULL, n_exact INTEGER NOT NULL,"
	" layer_id BLOB NOT NULL, spans BLOB NOT NULL, exact_pos BLOB NOT NULL,"
	" ranks BLOB NOT NULL, tokens BLOB NOT NULL, surprisal BLOB NOT NULL,"
	" is_anchor BLOB NOT NULL);"
	/* per global layer: tau f32 [n_head]; route_w f32 [n_head][32][d_h];
	 * k_bar, v_bar f32 [n_comp][n_head_kv][d_h]; exact_k, exact_v fp16
	 * [n_exact][n_head_kv][d_h]; fac_s, fac_u, fac_v: the factors' s [rank],
	 * u [len][rank], v [d_h][rank] concatenated in (comp, kv head, K/V) order */
	"CREATE TABLE mem_layer ("
	" doc INTEGER NOT NULL REFERENCES mem(doc) ON DELETE CASCADE,"
	" layer INTEGER NOT NULL,"
	" tau BLOB NOT NULL, route_w BLOB NOT NULL,"
	" k_bar BLOB NOT NULL, v_bar BLOB NOT NULL,"
	" exact_k BLOB NOT NULL, exact_v BLOB NOT NULL,"
	" fac_s BLOB NOT NULL, fac_u BLOB NOT NULL, fac_v BLOB NOT NULL,"
	" PRIMARY KEY (doc, layer));",
	/* 1 -> 2: mem.factor_f16: 1 when fac_u, fac_v hold fp16 halves, 0 when
	 * fp32 (fac_s is always fp32); version 1 memories were all fp32. Added
	 * after the blobs, where ALTER TABLE puts it: it is read once per load. */
	"ALTER TABLE mem ADD COLUMN factor_f16 INTEGER NOT NULL DEFAULT 0;",
	/* 2 -> 3: documents.prompt_format: the prompt format the document turn
	 * was built with ("template", "completion"); NULL for documents
	 * ingested before, which were all built with the chat template. */
	"ALTER TABLE documents ADD COLUMN prompt_format TEXT;",
	/* 3 -> 4: evidence_heads: retrieval heads per model fingerprint */
	STORE_MIGRATION_EVIDENCE_HEADS,
	/* 4 -> 5: sessions over a document (kv: "sekv" or "full"); turns: each
	 * question, its answer (stopped: conv_stop_name) and the retrieval
	 * heads ("L:H,...", NULL without evidence); turn_evidence: the
	 * answer's evidence passages, byte range [start, end) of the text */
	"CREATE TABLE sessions ("
	" id INTEGER PRIMARY KEY AUTOINCREMENT,"
	" doc INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,"
	" kv TEXT NOT NULL, created REAL NOT NULL, last_used REAL NOT NULL,"
	" n_turn INTEGER NOT NULL);"
	"CREATE INDEX sessions_doc ON sessions(doc);"
	"CREATE TABLE turns ("
	" session INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,"
	" idx INTEGER NOT NULL, question TEXT NOT NULL, answer TEXT NOT NULL,"
	" stopped TEXT NOT NULL, n_gen INTEGER NOT NULL, heads TEXT,"
	" created REAL NOT NULL,"
	" PRIMARY KEY (session, idx));"
	"CREATE TABLE turn_evidence ("
	" session INTEGER NOT NULL, idx INTEGER NOT NULL, rank INTEGER NOT NULL,"
	" start INTEGER NOT NULL, end INTEGER NOT NULL, score REAL NOT NULL,"
	" PRIMARY KEY (session, idx, rank),"
	" FOREIGN KEY (session, idx) REFERENCES turns(session, idx) ON DELETE CASCADE);",
	/* 5 -> 6: landmarks (SeKV routing, engine/sekv/sekv.h): mem.lm_len
	 * tokens per block, 0 for memories stored before (they route by their
	 * summaries); mem_layer.lm_k int8 [n_lm][n_head_kv][d_h] and lm_s f32
	 * [n_lm][n_head_kv], NULL then */
	"ALTER TABLE mem ADD COLUMN lm_len INTEGER NOT NULL DEFAULT 0;"
	/* and mem.bar_f16: 1 when k_bar, v_bar hold fp16 halves, 0 when fp32
	 * (memories stored before; they load converted to fp16) */
	"ALTER TABLE mem ADD COLUMN bar_f16 INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE mem_layer ADD COLUMN lm_k BLOB;"
	"ALTER TABLE mem_layer ADD COLUMN lm_s BLOB;",
	/* 6 -> 7: h2o_score: H2O's accumulated attention (engine/kv/kv_select.h),
	 * score f32 [n_layer][n_head_kv][n_tok]: the softmax weight each
	 * position got from every document token under full attention at
	 * ingest, summed over each KV head's query heads. Documents ingested
	 * before have no row. */
	"CREATE TABLE h2o_score ("
	" doc INTEGER PRIMARY KEY REFERENCES documents(id) ON DELETE CASCADE,"
	" n_tok INTEGER NOT NULL, n_layer INTEGER NOT NULL, n_head_kv INTEGER NOT NULL,"
	" score BLOB NOT NULL);",
	/* 7 -> 8: the rank gate (issue 9): mem.rank_energy, the share of each
	 * span's energy its factors keep (0: no gate, as before); ranks may
	 * be -1 (SEKV_RANK_RAW): that factor's fac_u part holds the span's
	 * rows [len][d_h] and it has no fac_s, fac_v part */
	"ALTER TABLE mem ADD COLUMN rank_energy REAL NOT NULL DEFAULT 0;"
	/* and keys factored before RoPE: mem.key_rope_base, the RoPE theta
	 * over mem.n_rot dims their rebuilt rows are rotated by (0: factors
	 * of the stored, post-RoPE keys, as before) */
	"ALTER TABLE mem ADD COLUMN key_rope_base REAL NOT NULL DEFAULT 0;"
	"ALTER TABLE mem ADD COLUMN n_rot INTEGER NOT NULL DEFAULT 0;",
	/* 8 -> 9: ingest_state: what `sekv ingest --resume` needs to continue
	 * an interrupted ingest exactly, one row per document still in state
	 * prefill (deleted when it turns ready): the whole turn's n_tok_total
	 * tokens, the chunk size and SeKV build settings it was started with,
	 * and at the last committed chunk (pos_end = documents.n_tok) the
	 * surprisal h_next (nats) of token pos_end under that chunk's last
	 * logits and H2O's probe mass, f32 [n_probe][pos_end]. The sliding-
	 * window rows at pos_end are the swa table's, written with each chunk. */
	"CREATE TABLE ingest_state ("
	" doc INTEGER PRIMARY KEY REFERENCES documents(id) ON DELETE CASCADE,"
	" n_tok_total INTEGER NOT NULL, n_batch INTEGER NOT NULL,"
	" alpha REAL NOT NULL, rank_energy REAL NOT NULL, key_pre_rope INTEGER NOT NULL,"
	" static_share REAL NOT NULL, n_recent INTEGER NOT NULL,"
	" pos_end INTEGER NOT NULL, h_next REAL NOT NULL,"
	" n_probe INTEGER NOT NULL, probe BLOB NOT NULL);",
	/* 9 -> 10: a session's memory (app/session.c): the document's SeKV
	 * memory grown by the session's turns (sekv_mem_append), kept as
	 * slices of positions (sekv_mem_slice_dup) joined back at resume:
	 * session_part idx >= 0 is what turn idx made final, positions
	 * [pos0, pos0 + n_tok); idx -1 the open end after the last of them
	 * (the recent window, replaced every turn), with h_next, the surprisal
	 * (nats) the next turn's first token gets. Blobs as mem and
	 * mem_layer's, at the memory's factor type (the document's mem row),
	 * summaries fp16, no router (the document's). */
	"CREATE TABLE session_part ("
	" session INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,"
	" idx INTEGER NOT NULL, pos0 INTEGER NOT NULL, h_next REAL NOT NULL,"
	" n_tok INTEGER NOT NULL, n_span INTEGER NOT NULL, n_exact INTEGER NOT NULL,"
	" spans BLOB NOT NULL, exact_pos BLOB NOT NULL, ranks BLOB NOT NULL,"
	" tokens BLOB NOT NULL, surprisal BLOB NOT NULL, is_anchor BLOB NOT NULL,"
	" PRIMARY KEY (session, idx));"
	"CREATE TABLE session_part_layer ("
	" session INTEGER NOT NULL, idx INTEGER NOT NULL, layer INTEGER NOT NULL,"
	" k_bar BLOB NOT NULL, v_bar BLOB NOT NULL, exact_k BLOB NOT NULL, exact_v BLOB NOT NULL,"
	" fac_s BLOB NOT NULL, fac_u BLOB NOT NULL, fac_v BLOB NOT NULL, lm_k BLOB, lm_s BLOB,"
	" PRIMARY KEY (session, idx, layer),"
	" FOREIGN KEY (session, idx) REFERENCES session_part(session, idx) ON DELETE CASCADE);"
	/* the sliding-window rows of the session's newest positions, one row
	 * per turn: k, v fp16 [n_layer_swa][n][n_head_kv][d_h] of positions
	 * [pos0, pos0 + n), the model's sliding-window layers in order; rows
	 * older than the window are deleted as turns come */
	"CREATE TABLE session_swa ("
	" session INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,"
	" pos0 INTEGER NOT NULL, n INTEGER NOT NULL, k BLOB NOT NULL, v BLOB NOT NULL,"
	" PRIMARY KEY (session, pos0));"
	/* sessions.n_tok: positions the session's memory holds after the
	 * document's; kv_turns: its turns whose KV it holds (0: none, a
	 * session stored before, or answered without SeKV) */
	"ALTER TABLE sessions ADD COLUMN n_tok INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE sessions ADD COLUMN kv_turns INTEGER NOT NULL DEFAULT 0;",
	/* 10 -> 11: doc_pages: the page map of a document read from a PDF
	 * (app/extract.h): start int64 [n_page], the byte offset in doc_text
	 * where page page0 + i starts (page numbers 1-based, as printed by
	 * the PDF's reader; a part of a split document starts at its first
	 * page, start[0] = 0); a page ends where the next starts, the last at
	 * text_len. Pages without text share the next page's start. Documents
	 * from text files have no row. */
	"CREATE TABLE doc_pages ("
	" doc INTEGER PRIMARY KEY REFERENCES documents(id) ON DELETE CASCADE,"
	" page0 INTEGER NOT NULL, n_page INTEGER NOT NULL, text_len INTEGER NOT NULL,"
	" start BLOB NOT NULL);",
	/* 11 -> 12: documents.full_kv: 1 while the document's kv_chunk rows
	 * (its exact global KV) are kept, 0 once they were dropped
	 * (store_doc_drop_full_kv: a ready document keeps its SeKV memory,
	 * and the exact rows are prefilled again when a reference needs
	 * them). Documents stored before kept them all. */
	"ALTER TABLE documents ADD COLUMN full_kv INTEGER NOT NULL DEFAULT 1;"
	/* and ingest_state.keep_full_kv: 1 when the ingest keeps them at the
	 * end (--keep-full-kv), so that a resume does as it would have */
	"ALTER TABLE ingest_state ADD COLUMN keep_full_kv INTEGER NOT NULL DEFAULT 1;"
	/* and where the document stands in a --split ingest, so that a resume
	 * of one part goes on with the parts after it (app/ingest_resume.c):
	 * part (0-based) of n_part, and part_limit, the most tokens of a part
	 * its plan allowed (app_plan's limit: the model's context or
	 * --max-tokens; 0: none). Rows from before were single parts. */
	"ALTER TABLE ingest_state ADD COLUMN part INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE ingest_state ADD COLUMN n_part INTEGER NOT NULL DEFAULT 1;"
	"ALTER TABLE ingest_state ADD COLUMN part_limit INTEGER NOT NULL DEFAULT 0;"
	/* and next_pending: 1 once the document (a part but the last) is
	 * ready while the parts after it are not yet begun: the row stays as
	 * their continuation (`sekv ingest --resume` of the part stores them)
	 * and goes in the transaction that creates the next part's document;
	 * text_fp: FNV-1a 64 (engine/base/hash.h) of the whole text the split
	 * ingest read, 16 hex digits, which a resume reading the file again
	 * must find (NULL: not split, or a row from before) */
	"ALTER TABLE ingest_state ADD COLUMN next_pending INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE ingest_state ADD COLUMN text_fp TEXT;"
	/* and turn_evidence.peak: the byte (in [start, end)) of the passage's
	 * most attended token, where its snippet starts; NULL for rows from
	 * before, read as start */
	"ALTER TABLE turn_evidence ADD COLUMN peak INTEGER;",
	/* 12 -> 13: factors in int8 rows (issue 19): a rank of -2
	 * (SEKV_RANK_RAW8) packs the span's rows as int8 codes [len][d_h] in
	 * fac_u and one fp32 scale per row in fac_s (no fac_v part); and the
	 * V factors' own rank gate, mem.rank_energy_v (0: the K gate, as
	 * before), kept by ingest_state for a resume with exact_below, the
	 * length under which a document's memory stays exact (0: none, as
	 * before) */
	"ALTER TABLE mem ADD COLUMN rank_energy_v REAL NOT NULL DEFAULT 0;"
	"ALTER TABLE ingest_state ADD COLUMN rank_energy_v REAL NOT NULL DEFAULT 0;"
	"ALTER TABLE ingest_state ADD COLUMN exact_below INTEGER NOT NULL DEFAULT 0;",
	/* 13 -> 14: session_part.lm_len, the landmark block of the part's own
	 * memory (NULL: the document's; parts stored before take the
	 * document's of now, the one they were built with): `ingest --rebuild`
	 * may choose other blocks for the document than a session's turns
	 * kept, and the join rebuilds those landmarks (engine/sekv/part.c) */
	"ALTER TABLE session_part ADD COLUMN lm_len INTEGER;"
	"UPDATE session_part SET lm_len = (SELECT m.lm_len FROM sessions s JOIN mem m ON m.doc = s.doc"
	" WHERE s.id = session_part.session);",
};

#define STORE_SCHEMA_VERSION \
	((int)(sizeof store_migration / sizeof store_migration[0]))

/* First column of the one-row result of sql into *v. */
static int pragma_int(struct store *s, const char *sql, int64_t *v,
		      char *err, size_t errlen)
{
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);

	if (rc == SQLITE_OK) {
		rc = sqlite3_step(st);
		if (rc == SQLITE_ROW) {
			*v = sqlite3_column_int64(st, 0);
			rc = SQLITE_OK;
		}
	}
	if (rc != SQLITE_OK)
		rc = store_dberr(s, rc, err, errlen, "store_open", s->path);
	sqlite3_finalize(st);
	return rc;
}

static int exec(struct store *s, const char *sql, char *err, size_t errlen)
{
	char *msg = NULL;
	int rc = sqlite3_exec(s->db, sql, NULL, NULL, &msg);

	if (rc != SQLITE_OK) {
		rc = sekv_errf(err, errlen, rc == SQLITE_NOTADB ? SEKV_EFORMAT : SEKV_EDB,
			       "store_open: %s: %s", s->path, msg ? msg : sqlite3_errstr(rc));
		sqlite3_free(msg);
		return rc;
	}
	return 0;
}

/* Runs migrations user_version .. STORE_SCHEMA_VERSION-1 in one
 * transaction, re-reading the version under the write lock (another process
 * may have migrated meanwhile). */
static int migrate(struct store *s, char *err, size_t errlen)
{
	int64_t ver = 0;
	char sql[64];
	int rc;

	if ((rc = exec(s, "BEGIN IMMEDIATE", err, errlen)))
		return rc;
	if ((rc = pragma_int(s, "PRAGMA user_version", &ver, err, errlen)))
		goto fail;
	if (ver > STORE_SCHEMA_VERSION) {
		rc = sekv_errf(err, errlen, SEKV_EFORMAT,
			       "store_open: %s: schema version %lld is newer than this build's %d",
			       s->path, (long long)ver, STORE_SCHEMA_VERSION);
		goto fail;
	}
	for (; ver < STORE_SCHEMA_VERSION; ver++)
		if ((rc = exec(s, store_migration[ver], err, errlen)))
			goto fail;
	snprintf(sql, sizeof sql, "PRAGMA user_version = %d; PRAGMA application_id = %d",
		 STORE_SCHEMA_VERSION, STORE_APP_ID);
	if ((rc = exec(s, sql, err, errlen)) || (rc = exec(s, "COMMIT", err, errlen)))
		goto fail;
	return 0;
fail:
	if (!sqlite3_get_autocommit(s->db))
		sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
	return rc;
}

int store_schema_open(struct store *s, char *err, size_t errlen)
{
	int64_t app = 0, ver = 0, n_obj = 0;
	int rc;

	if ((rc = pragma_int(s, "PRAGMA application_id", &app, err, errlen)) ||
	    (rc = pragma_int(s, "PRAGMA user_version", &ver, err, errlen)) ||
	    (rc = pragma_int(s, "SELECT count(*) FROM sqlite_master", &n_obj, err, errlen)))
		return rc;
	if (app != STORE_APP_ID && (app != 0 || ver != 0 || n_obj != 0))
		return sekv_errf(err, errlen, SEKV_EFORMAT,
				 "store_open: %s: not a sekv library (application_id %lld)",
				 s->path, (long long)app);
	if (ver > STORE_SCHEMA_VERSION)
		return sekv_errf(err, errlen, SEKV_EFORMAT,
				 "store_open: %s: schema version %lld is newer than this build's %d",
				 s->path, (long long)ver, STORE_SCHEMA_VERSION);
	/* Only an empty file can still take a page size and the vacuum mode;
	 * 64 KiB pages (the largest) make the big blobs short overflow chains
	 * (loading measured about twice as fast as with 4-16 KiB), and
	 * incremental vacuum gives a deleted document's pages back. */
	if (n_obj == 0 &&
	    (rc = exec(s, "PRAGMA page_size = 65536; PRAGMA auto_vacuum = INCREMENTAL",
		       err, errlen)))
		return rc;
	/* WAL: readers never block the writer, a commit is one append, and a
	 * crash leaves the last committed state; NORMAL sync is durable at
	 * checkpoints and always consistent. secure_delete FAST (where SQLite
	 * was built to zero every freed page): a delete writes its b-tree
	 * pages, not each page it frees, so that it fits the reserve on a full
	 * disk (store_disk.c); the vacuum after it overwrites or truncates
	 * those pages. */
	if ((rc = exec(s, "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;"
		       "PRAGMA foreign_keys = ON; PRAGMA journal_size_limit = 67108864;"
		       "PRAGMA secure_delete = FAST", err, errlen)))
		return rc;
	/* 64 KiB pages: the default 1000 would be 64 MiB of WAL between
	 * checkpoints; fewer keeps what a checkpoint writes within the free
	 * space every chunk write leaves (store_room) */
	sqlite3_wal_autocheckpoint(s->db, STORE_WAL_PAGES);
	if (ver < STORE_SCHEMA_VERSION)
		return migrate(s, err, errlen);
	return 0;
}
