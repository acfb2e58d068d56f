/* store_chunk.c - prefill chunks (token ids, surprisal, the exact KV of the
 * global layers) and the sliding-window layers' last rows.
 * Invariant: the chunks of a document tile positions 0..n_tok-1 without a
 * gap (store_doc_put_chunk appends only at pos0 == n_tok, in the same
 * transaction that advances n_tok), and the SWA rows record the n_tok they
 * end at. Readers check both, and every blob length, before copying.
 */
#include "store/store_int.h"
#include "engine/base/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int store_doc_put_chunk(struct store *s, int64_t doc, int64_t pos0, int n,
			const int32_t *tokens, const float *surprisal,
			const uint16_t *const *k, const uint16_t *const *v,
			double prefill_s, char *err, size_t errlen)
{
	static const char what[] = "store_doc_put_chunk";
	struct store_doc d;
	sqlite3_stmt *st;
	char obj[48];
	size_t row;
	int rc;

	snprintf(obj, sizeof obj, "doc %lld", (long long)doc);
	if (n < 1 || !tokens || !surprisal)
		return sekv_errf(err, errlen, SEKV_EINVAL, "%s: %s: empty chunk (n %d)", what, obj, n);
	if ((rc = store_tx_begin(s, err, errlen)))
		return rc;
	if ((rc = store_doc_read(s, doc, &d, what, err, errlen)))
		goto fail;
	if (pos0 != d.n_tok) {
		rc = sekv_errf(err, errlen, SEKV_EINVAL, "%s: %s: pos0 %lld is not the %lld tokens stored",
			       what, obj, (long long)pos0, (long long)d.n_tok);
		goto fail;
	}
	if (n > INT32_MAX - d.n_tok || (d.n_layer_global && (!k || !v))) {
		rc = sekv_errf(err, errlen, SEKV_EINVAL, "%s: %s: too many tokens or no KV", what, obj);
		goto fail;
	}
	for (int l = 0; l < d.n_layer_global; l++)
		if (!k[l] || !v[l]) {
			rc = sekv_errf(err, errlen, SEKV_EINVAL, "%s: %s: no KV for layer %d",
				       what, obj, l);
			goto fail;
		}
	row = (size_t)d.n_head_kv * d.d_h * sizeof(uint16_t);
	if ((rc = store_room(s, (int64_t)n * (8 + 2 * (int64_t)row * d.n_layer_global), what,
			     err, errlen)))
		goto fail;
	if ((rc = store_stmt(s, ST_TOK_INSERT, &st, err, errlen)))
		goto fail;
	sqlite3_bind_int64(st, 1, doc);
	sqlite3_bind_int64(st, 2, pos0);
	sqlite3_bind_int(st, 3, n);
	store_bind_blob(st, 4, tokens, (size_t)n * sizeof *tokens);
	store_bind_blob(st, 5, surprisal, (size_t)n * sizeof *surprisal);
	if ((rc = store_step(s, st)) != SQLITE_DONE) {
		rc = store_dberr(s, rc, err, errlen, what, "tok_chunk");
		goto fail;
	}
	for (int l = 0; l < d.n_layer_global; l++) {
		if ((rc = store_stmt(s, ST_KV_INSERT, &st, err, errlen)))
			goto fail;
		sqlite3_bind_int64(st, 1, doc);
		sqlite3_bind_int(st, 2, l);
		sqlite3_bind_int64(st, 3, pos0);
		sqlite3_bind_int(st, 4, n);
		store_bind_blob(st, 5, k[l], (size_t)n * row);
		store_bind_blob(st, 6, v[l], (size_t)n * row);
		if ((rc = store_step(s, st)) != SQLITE_DONE) {
			rc = store_dberr(s, rc, err, errlen, what, "kv_chunk");
			goto fail;
		}
	}
	if ((rc = store_stmt(s, ST_DOC_ADD_CHUNK, &st, err, errlen)))
		goto fail;
	sqlite3_bind_int64(st, 1, doc);
	sqlite3_bind_int(st, 2, n);
	sqlite3_bind_double(st, 3, prefill_s);
	if ((rc = store_step(s, st)) != SQLITE_DONE) {
		rc = store_dberr(s, rc, err, errlen, what, "documents");
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

static void *alloc_bytes(size_t n)
{
	return malloc(n ? n : 1);
}

/* The (pos0, n) of the current chunk row, checked to continue at *next and
 * to stay inside n_tok; advances *next. */
static int chunk_span(sqlite3_stmt *st, int64_t *next, int64_t n_tok, int *n,
		      const char *what, int64_t doc, const char *table,
		      char *err, size_t errlen)
{
	int64_t pos0 = sqlite3_column_int64(st, 0), cnt = sqlite3_column_int64(st, 1);

	if (pos0 != *next || cnt < 1 || cnt > n_tok - pos0)
		return sekv_errf(err, errlen, SEKV_EFORMAT,
				 "%s: doc %lld: %s: chunk at %lld of %lld tokens, expected one at %lld inside %lld",
				 what, (long long)doc, table, (long long)pos0, (long long)cnt,
				 (long long)*next, (long long)n_tok);
	*n = (int)cnt;
	*next = pos0 + cnt;
	return 0;
}

int store_doc_get_tokens(struct store *s, int64_t doc, int32_t **tokens,
			 float **surprisal, int64_t *n_tok, char *err, size_t errlen)
{
	static const char what[] = "store_doc_get_tokens";
	struct store_doc d;
	int32_t *t = NULL;
	float *h = NULL;
	sqlite3_stmt *st;
	const void *bt, *bh;
	int64_t next = 0;
	char obj[48];
	int rc, n;

	if (tokens)
		*tokens = NULL;
	if (surprisal)
		*surprisal = NULL;
	*n_tok = 0;
	snprintf(obj, sizeof obj, "doc %lld", (long long)doc);
	if ((rc = store_tx_begin_read(s, err, errlen)))
		return rc;
	if ((rc = store_doc_read(s, doc, &d, what, err, errlen)))
		goto fail;
	t = alloc_bytes((size_t)d.n_tok * sizeof *t);
	h = alloc_bytes((size_t)d.n_tok * sizeof *h);
	if (!t || !h) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "%s: %s: out of memory", what, obj);
		goto fail;
	}
	if ((rc = store_stmt(s, ST_TOK_GET, &st, err, errlen)))
		goto fail;
	sqlite3_bind_int64(st, 1, doc);
	while ((rc = store_step(s, st)) == SQLITE_ROW) {
		int64_t at = next;
		if ((rc = chunk_span(st, &next, d.n_tok, &n, what, doc, "tok_chunk", err, errlen)) ||
		    (rc = store_col_blob(st, 2, (size_t)n * sizeof *t, &bt, what, doc,
					 "tok_chunk", "tokens", err, errlen)) ||
		    (rc = store_col_blob(st, 3, (size_t)n * sizeof *h, &bh, what, doc,
					 "tok_chunk", "surprisal", err, errlen)))
			goto fail;
		memcpy(t + at, bt, (size_t)n * sizeof *t);
		memcpy(h + at, bh, (size_t)n * sizeof *h);
	}
	if (rc != SQLITE_DONE) {
		rc = store_dberr(s, rc, err, errlen, what, obj);
		goto fail;
	}
	if (next != d.n_tok) {
		rc = sekv_errf(err, errlen, SEKV_EFORMAT, "%s: %s: tok_chunk: covers %lld of %lld tokens",
			       what, obj, (long long)next, (long long)d.n_tok);
		goto fail;
	}
	if ((rc = store_tx_commit(s, err, errlen)))
		goto out;
	if (tokens) {
		*tokens = t;
		t = NULL;
	}
	if (surprisal) {
		*surprisal = h;
		h = NULL;
	}
	*n_tok = d.n_tok;
	goto out;
fail:
	store_tx_rollback(s);
out:
	store_stmt_reset_all(s);
	free(t);
	free(h);
	return rc;
}

int store_doc_get_full_kv(struct store *s, int64_t doc, int l,
			  uint16_t *k, uint16_t *v, char *err, size_t errlen)
{
	static const char what[] = "store_doc_get_full_kv";
	struct store_doc d;
	sqlite3_stmt *st;
	const void *bk, *bv;
	int64_t next = 0;
	size_t row;
	char obj[48];
	int rc, n;

	snprintf(obj, sizeof obj, "doc %lld", (long long)doc);
	if ((rc = store_tx_begin_read(s, err, errlen)))
		return rc;
	if ((rc = store_doc_read(s, doc, &d, what, err, errlen)))
		goto fail;
	if (l < 0 || l >= d.n_layer_global || (d.n_tok && (!k || !v))) {
		rc = sekv_errf(err, errlen, SEKV_EINVAL, "%s: %s: layer %d of %d or no buffer",
			       what, obj, l, d.n_layer_global);
		goto fail;
	}
	if (!d.full_kv) {
		rc = sekv_errf(err, errlen, SEKV_ENOTFOUND, "%s: %s: its exact KV was not kept",
			       what, obj);
		goto fail;
	}
	row = (size_t)d.n_head_kv * d.d_h * sizeof(uint16_t);
	if ((rc = store_stmt(s, ST_KV_GET, &st, err, errlen)))
		goto fail;
	sqlite3_bind_int64(st, 1, doc);
	sqlite3_bind_int(st, 2, l);
	while ((rc = store_step(s, st)) == SQLITE_ROW) {
		int64_t at = next;
		if ((rc = chunk_span(st, &next, d.n_tok, &n, what, doc, "kv_chunk", err, errlen)) ||
		    (rc = store_col_blob(st, 2, (size_t)n * row, &bk, what, doc, "kv_chunk", "k",
					 err, errlen)) ||
		    (rc = store_col_blob(st, 3, (size_t)n * row, &bv, what, doc, "kv_chunk", "v",
					 err, errlen)))
			goto fail;
		memcpy((char *)k + (size_t)at * row, bk, (size_t)n * row);
		memcpy((char *)v + (size_t)at * row, bv, (size_t)n * row);
	}
	if (rc != SQLITE_DONE) {
		rc = store_dberr(s, rc, err, errlen, what, obj);
		goto fail;
	}
	if (next != d.n_tok) {
		rc = sekv_errf(err, errlen, SEKV_EFORMAT,
			       "%s: %s: kv_chunk: layer %d covers %lld of %lld tokens",
			       what, obj, l, (long long)next, (long long)d.n_tok);
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

/* The delete of store_doc_drop_full_kv, without the reserve. */
static int drop_full_kv(struct store *s, int64_t doc, char *err, size_t errlen)
{
	static const char what[] = "store_doc_drop_full_kv";
	struct store_doc d;
	char obj[48];
	int rc;

	snprintf(obj, sizeof obj, "doc %lld", (long long)doc);
	if ((rc = store_tx_begin(s, err, errlen)))
		return rc;
	if ((rc = store_doc_read(s, doc, &d, what, err, errlen)))
		goto fail;
	/* an incomplete ingest resumes from these rows */
	if (d.state != STORE_DOC_READY) {
		rc = sekv_errf(err, errlen, SEKV_EINVAL, "%s: %s: incomplete: its ingest resumes "
			       "from its exact KV", what, obj);
		goto fail;
	}
	if ((rc = store_exec_key(s, ST_KV_DELETE, doc, NULL, what, "kv_chunk", err, errlen)) ||
	    (rc = store_exec_key(s, ST_DOC_FULL_KV_OFF, doc, NULL, what, "documents", err, errlen)))
		goto fail;
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

int store_doc_drop_full_kv(struct store *s, int64_t doc, char *err, size_t errlen)
{
	return store_run_delete(s, drop_full_kv, doc, err, errlen);
}

int store_doc_put_swa(struct store *s, int64_t doc, int n_layer,
		      const int32_t *layer_id, int n_row,
		      const uint16_t *const *k, const uint16_t *const *v,
		      char *err, size_t errlen)
{
	static const char what[] = "store_doc_put_swa";
	struct store_doc d;
	sqlite3_stmt *st;
	char obj[48];
	size_t bytes;
	int rc;

	snprintf(obj, sizeof obj, "doc %lld", (long long)doc);
	if (n_layer < 0 || n_row < 0 || (n_layer && (!layer_id || !k || !v)))
		return sekv_errf(err, errlen, SEKV_EINVAL, "%s: %s: bad arguments", what, obj);
	for (int i = 0; i < n_layer; i++)
		if (n_row && (!k[i] || !v[i]))
			return sekv_errf(err, errlen, SEKV_EINVAL, "%s: %s: no rows for layer %d",
					 what, obj, i);
	if ((rc = store_tx_begin(s, err, errlen)))
		return rc;
	if ((rc = store_doc_read(s, doc, &d, what, err, errlen)))
		goto fail;
	if (n_layer != d.n_layer_swa || n_row > d.n_tok) {
		rc = sekv_errf(err, errlen, SEKV_EINVAL,
			       "%s: %s: %d layers of %d rows, document has %d SWA layers, %lld tokens",
			       what, obj, n_layer, n_row, d.n_layer_swa, (long long)d.n_tok);
		goto fail;
	}
	bytes = (size_t)n_row * d.n_head_kv * d.d_h * sizeof(uint16_t);
	if ((rc = store_room(s, (int64_t)bytes * 2 * n_layer, what, err, errlen)) ||
	    (rc = store_stmt(s, ST_SWA_DELETE, &st, err, errlen)))
		goto fail;
	sqlite3_bind_int64(st, 1, doc);
	if ((rc = store_step(s, st)) != SQLITE_DONE) {
		rc = store_dberr(s, rc, err, errlen, what, "swa");
		goto fail;
	}
	for (int i = 0; i < n_layer; i++) {
		if ((rc = store_stmt(s, ST_SWA_INSERT, &st, err, errlen)))
			goto fail;
		sqlite3_bind_int64(st, 1, doc);
		sqlite3_bind_int(st, 2, i);
		sqlite3_bind_int(st, 3, layer_id[i]);
		sqlite3_bind_int(st, 4, n_row);
		sqlite3_bind_int64(st, 5, d.n_tok);
		store_bind_blob(st, 6, n_row ? k[i] : NULL, bytes);
		store_bind_blob(st, 7, n_row ? v[i] : NULL, bytes);
		if ((rc = store_step(s, st)) != SQLITE_DONE) {
			rc = store_dberr(s, rc, err, errlen, what, "swa");
			goto fail;
		}
	}
	rc = store_tx_commit(s, err, errlen);
	store_stmt_reset_all(s);
	return rc;
fail:
	store_tx_rollback(s);
	store_stmt_reset_all(s);
	return rc;
}

void store_swa_free(int n_layer, int32_t *layer_id, uint16_t **k, uint16_t **v)
{
	for (int i = 0; i < n_layer; i++) {
		if (k)
			free(k[i]);
		if (v)
			free(v[i]);
	}
	free(layer_id);
	free(k);
	free(v);
}

/* Row i of the swa table (ST_SWA_GET order) into lid/k/v[i]; *n_row is
 * taken from row 0 and must agree in the others. */
static int swa_row(sqlite3_stmt *st, int i, const struct store_doc *d, int *n_row,
		   int32_t *lid, uint16_t **k, uint16_t **v, char *err, size_t errlen)
{
	static const char what[] = "store_doc_get_swa";
	int64_t idx = sqlite3_column_int64(st, 0), nr = sqlite3_column_int64(st, 2);
	int64_t pos_end = sqlite3_column_int64(st, 3);
	const void *bk, *bv;
	size_t bytes;
	int rc;

	if (idx != i || i >= d->n_layer_swa || nr < 0 || nr > d->n_tok || (i && nr != *n_row))
		return sekv_errf(err, errlen, SEKV_EFORMAT,
				 "%s: doc %lld: swa: row %lld of %lld rows, expected row %d of %d layers",
				 what, (long long)d->id, (long long)idx, (long long)nr, i,
				 d->n_layer_swa);
	if (pos_end != d->n_tok)
		return sekv_errf(err, errlen, SEKV_EMISMATCH,
				 "%s: doc %lld: swa: rows end at %lld, document has %lld tokens",
				 what, (long long)d->id, (long long)pos_end, (long long)d->n_tok);
	*n_row = (int)nr;
	bytes = (size_t)nr * d->n_head_kv * d->d_h * sizeof(uint16_t);
	if ((rc = store_col_blob(st, 4, bytes, &bk, what, d->id, "swa", "k", err, errlen)) ||
	    (rc = store_col_blob(st, 5, bytes, &bv, what, d->id, "swa", "v", err, errlen)))
		return rc;
	lid[i] = sqlite3_column_int(st, 1);
	k[i] = alloc_bytes(bytes);
	v[i] = alloc_bytes(bytes);
	if (!k[i] || !v[i])
		return sekv_errf(err, errlen, SEKV_ENOMEM, "%s: doc %lld: out of memory",
				 what, (long long)d->id);
	if (bytes) {
		memcpy(k[i], bk, bytes);
		memcpy(v[i], bv, bytes);
	}
	return 0;
}

int store_doc_get_swa(struct store *s, int64_t doc, int *n_layer,
		      int32_t **layer_id, int *n_row, uint16_t ***k,
		      uint16_t ***v, char *err, size_t errlen)
{
	static const char what[] = "store_doc_get_swa";
	struct store_doc d = {0};
	int32_t *lid = NULL;
	uint16_t **kk = NULL, **vv = NULL;
	sqlite3_stmt *st;
	char obj[48];
	int rc, cnt = 0, nr = 0;

	*n_layer = 0;
	*layer_id = NULL;
	*n_row = 0;
	*k = NULL;
	*v = NULL;
	snprintf(obj, sizeof obj, "doc %lld", (long long)doc);
	if ((rc = store_tx_begin_read(s, err, errlen)))
		return rc;
	if ((rc = store_doc_read(s, doc, &d, what, err, errlen)))
		goto fail;
	if (d.n_layer_swa == 0)
		goto done;
	lid = calloc((size_t)d.n_layer_swa, sizeof *lid);
	kk = calloc((size_t)d.n_layer_swa, sizeof *kk);
	vv = calloc((size_t)d.n_layer_swa, sizeof *vv);
	if (!lid || !kk || !vv) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "%s: %s: out of memory", what, obj);
		goto fail;
	}
	if ((rc = store_stmt(s, ST_SWA_GET, &st, err, errlen)))
		goto fail;
	sqlite3_bind_int64(st, 1, doc);
	while ((rc = store_step(s, st)) == SQLITE_ROW)
		if ((rc = swa_row(st, cnt++, &d, &nr, lid, kk, vv, err, errlen)))
			goto fail;
	if (rc != SQLITE_DONE) {
		rc = store_dberr(s, rc, err, errlen, what, obj);
		goto fail;
	}
	if (cnt != d.n_layer_swa) {
		rc = cnt == 0 ?
			sekv_errf(err, errlen, SEKV_ENOTFOUND, "%s: %s: no SWA rows stored", what, obj) :
			sekv_errf(err, errlen, SEKV_EFORMAT, "%s: %s: swa: %d rows for %d layers",
				  what, obj, cnt, d.n_layer_swa);
		goto fail;
	}
done:
	if ((rc = store_tx_commit(s, err, errlen)))
		goto out;
	*n_layer = d.n_layer_swa;
	*layer_id = lid;
	*n_row = nr;
	*k = kk;
	*v = vv;
	store_stmt_reset_all(s);
	return 0;
fail:
	store_tx_rollback(s);
out:
	store_stmt_reset_all(s);
	store_swa_free(d.n_layer_swa, lid, kk, vv);
	return rc;
}
