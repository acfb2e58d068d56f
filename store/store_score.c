/* store_score.c - H2O's accumulated attention of a document (table
 * h2o_score, schema.c): one row per document, the scores of every global
 * layer, KV head and position as one float blob, written by ingest in the
 * memory's transaction and read when `--kv h2o` selects its rows.
 * Invariant: the blob's length is the document's n_layer_global x
 * n_head_kv x n_tok floats, checked on write and on read. The scores'
 * meaning lives in engine/kv/kv_select.h (kv_select_h2o).
 */
#include "store/store_int.h"
#include "engine/base/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int store_doc_put_h2o(struct store *s, int64_t doc, const float *score, int n_layer,
		      int n_head_kv, int n_tok, char *err, size_t errlen)
{
	static const char what[] = "store_doc_put_h2o";
	struct store_doc d;
	sqlite3_stmt *st;
	char obj[48];
	int rc;

	snprintf(obj, sizeof obj, "doc %lld", (long long)doc);
	if (!score || n_layer < 1 || n_head_kv < 1 || n_tok < 0)
		return sekv_errf(err, errlen, SEKV_EINVAL, "%s: %s: bad shape", what, obj);
	if ((rc = store_tx_begin(s, err, errlen)))
		return rc;
	if ((rc = store_doc_read(s, doc, &d, what, err, errlen)))
		goto fail;
	if (n_layer != d.n_layer_global || n_head_kv != d.n_head_kv || n_tok != d.n_tok) {
		rc = sekv_errf(err, errlen, SEKV_EMISMATCH,
			       "%s: %s: scores of %d layers x %d KV heads x %d tokens, document has "
			       "%d x %d x %lld", what, obj, n_layer, n_head_kv, n_tok, d.n_layer_global,
			       d.n_head_kv, (long long)d.n_tok);
		goto fail;
	}
	if ((rc = store_stmt(s, ST_H2O_PUT, &st, err, errlen)))
		goto fail;
	sqlite3_bind_int64(st, 1, doc);
	sqlite3_bind_int(st, 2, n_tok);
	sqlite3_bind_int(st, 3, n_layer);
	sqlite3_bind_int(st, 4, n_head_kv);
	store_bind_blob(st, 5, score, (size_t)n_layer * n_head_kv * n_tok * sizeof *score);
	if ((rc = store_step(s, st)) != SQLITE_DONE) {
		rc = store_dberr(s, rc, err, errlen, what, "h2o_score");
		goto fail;
	}
	rc = store_tx_commit(s, err, errlen);
	store_stmt_reset_all(s);
	return rc;
fail:
	store_tx_rollback(s);
	store_stmt_reset_all(s);
	return rc;
}

int store_doc_get_h2o(struct store *s, int64_t doc, float **score, int *n_tok,
		      char *err, size_t errlen)
{
	static const char what[] = "store_doc_get_h2o";
	struct store_doc d;
	sqlite3_stmt *st;
	const void *b = NULL;
	char obj[48];
	size_t bytes = 0;
	int rc;

	*score = NULL;
	*n_tok = 0;
	snprintf(obj, sizeof obj, "doc %lld", (long long)doc);
	if ((rc = store_tx_begin_read(s, err, errlen)))
		return rc;
	if ((rc = store_doc_read(s, doc, &d, what, err, errlen)) ||
	    (rc = store_stmt(s, ST_H2O_GET, &st, err, errlen)))
		goto fail;
	sqlite3_bind_int64(st, 1, doc);
	rc = store_step(s, st);
	if (rc == SQLITE_DONE) {
		rc = sekv_errf(err, errlen, SEKV_ENOTFOUND, "%s: %s: no H2O scores stored", what, obj);
		goto fail;
	}
	if (rc != SQLITE_ROW) {
		rc = store_dberr(s, rc, err, errlen, what, "h2o_score");
		goto fail;
	}
	if (sqlite3_column_int64(st, 0) != d.n_tok || sqlite3_column_int64(st, 1) != d.n_layer_global ||
	    sqlite3_column_int64(st, 2) != d.n_head_kv) {
		rc = sekv_errf(err, errlen, SEKV_EFORMAT,
			       "%s: %s: h2o_score: shape %lld tokens x %lld layers x %lld KV heads, "
			       "document has %lld x %d x %d", what, obj,
			       (long long)sqlite3_column_int64(st, 0), (long long)sqlite3_column_int64(st, 1),
			       (long long)sqlite3_column_int64(st, 2), (long long)d.n_tok,
			       d.n_layer_global, d.n_head_kv);
		goto fail;
	}
	bytes = (size_t)d.n_layer_global * d.n_head_kv * (size_t)d.n_tok * sizeof **score;
	if ((rc = store_col_blob(st, 3, bytes, &b, what, doc, "h2o_score", "score", err, errlen)))
		goto fail;
	if (!(*score = malloc(bytes ? bytes : 1))) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "%s: %s: out of memory", what, obj);
		goto fail;
	}
	if (bytes)
		memcpy(*score, b, bytes);
	*n_tok = (int)d.n_tok;
	rc = store_tx_commit(s, err, errlen);
	store_stmt_reset_all(s);
	if (rc) {
		free(*score);
		*score = NULL;
	}
	return rc;
fail:
	store_tx_rollback(s);
	store_stmt_reset_all(s);
	return rc;
}
