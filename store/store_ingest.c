/* store_ingest.c - the resume state of an interrupted ingest (ingest_state
 * table, schema.c): settings fixed when the ingest started, and what the
 * forward pass had at the last committed chunk that the chunk tables do
 * not hold (the next token's surprisal, H2O's probe mass).
 * Invariant: a row's pos_end equals its document's n_tok, because
 * app/ingest.c advances it in each chunk's own transaction; readers check
 * it, and every blob length, before use. store_doc_put_mem deletes the row
 * unless it is a split ingest's continuation (next_pending), which the
 * next part's creation deletes (store_ingest_end).
 */
#include "store/store_int.h"
#include "engine/base/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A text fingerprint as stored: "" or 16 lowercase hex digits. */
static int fp_ok(const char *fp)
{
	size_t n = strnlen(fp, 17);
	return n == 0 || (n == 16 && strspn(fp, "0123456789abcdef") == 16);
}

int store_ingest_begin(struct store *s, int64_t doc, const struct store_ingest *in,
		       char *err, size_t errlen)
{
	sqlite3_stmt *st;
	char obj[48];
	int rc;

	snprintf(obj, sizeof obj, "doc %lld", (long long)doc);
	if (in->n_tok_total < 0 || in->n_tok_total > INT32_MAX || in->n_batch < 1 ||
	    in->n_probe < 0 || in->n_probe > STORE_MAX_DIM || in->n_part < 1 || in->part < 0 ||
	    in->part >= in->n_part || in->part_limit < 0 || !fp_ok(in->text_fp))
		return sekv_errf(err, errlen, SEKV_EINVAL, "store_ingest_begin: %s: bad values", obj);
	if ((rc = store_stmt(s, ST_ING_INSERT, &st, err, errlen)))
		return rc;
	sqlite3_bind_int64(st, 1, doc);
	sqlite3_bind_int64(st, 2, in->n_tok_total);
	sqlite3_bind_int(st, 3, in->n_batch);
	sqlite3_bind_double(st, 4, in->alpha);
	sqlite3_bind_double(st, 5, in->rank_energy);
	sqlite3_bind_int(st, 6, in->key_pre_rope);
	sqlite3_bind_double(st, 7, in->static_share);
	sqlite3_bind_int(st, 8, in->n_recent);
	sqlite3_bind_int(st, 9, in->n_probe);
	sqlite3_bind_int(st, 10, in->keep_full_kv != 0);
	sqlite3_bind_int(st, 11, in->part);
	sqlite3_bind_int(st, 12, in->n_part);
	sqlite3_bind_int(st, 13, in->part_limit);
	if (in->text_fp[0])
		sqlite3_bind_text(st, 14, in->text_fp, -1, SQLITE_TRANSIENT);
	else
		sqlite3_bind_null(st, 14);
	sqlite3_bind_double(st, 15, in->rank_energy_v);
	sqlite3_bind_int(st, 16, in->exact_below);
	rc = store_step(s, st);
	rc = rc == SQLITE_DONE ? 0 : store_dberr(s, rc, err, errlen, "store_ingest_begin", obj);
	store_stmt_reset_all(s);
	return rc;
}

/* The row's (n_probe) and the document's n_tok, for advance. */
static int ingest_shape(struct store *s, int64_t doc, int *n_probe, int64_t *n_tok,
			const char *what, char *err, size_t errlen)
{
	struct store_ingest in;
	struct store_doc d;
	sqlite3_stmt *st;
	int rc;

	if ((rc = store_doc_read(s, doc, &d, what, err, errlen)))
		return rc;
	*n_tok = d.n_tok;
	if ((rc = store_stmt(s, ST_ING_GET, &st, err, errlen)))
		return rc;
	sqlite3_bind_int64(st, 1, doc);
	rc = store_step(s, st);
	if (rc == SQLITE_ROW) {
		in.n_probe = sqlite3_column_int(st, 9);
		*n_probe = in.n_probe;
		rc = in.n_probe >= 0 && in.n_probe <= STORE_MAX_DIM ? 0 :
			sekv_errf(err, errlen, SEKV_EFORMAT, "%s: doc %lld: ingest_state.n_probe %d",
				  what, (long long)doc, in.n_probe);
	} else if (rc == SQLITE_DONE) {
		rc = sekv_errf(err, errlen, SEKV_ENOTFOUND, "%s: doc %lld: no resume state",
			       what, (long long)doc);
	} else {
		rc = store_dberr(s, rc, err, errlen, what, "ingest_state");
	}
	sqlite3_reset(st);
	return rc;
}

int store_ingest_advance(struct store *s, int64_t doc, float h_next, const float *probe,
			 int64_t ld, char *err, size_t errlen)
{
	static const char what[] = "store_ingest_advance";
	sqlite3_stmt *st;
	float *pack = NULL;
	int64_t n_tok = 0;
	int n_probe = 0, rc;

	if ((rc = store_tx_begin(s, err, errlen)))
		return rc;
	if ((rc = ingest_shape(s, doc, &n_probe, &n_tok, what, err, errlen)))
		goto fail;
	if (n_probe && (!probe || ld < n_tok)) {
		rc = sekv_errf(err, errlen, SEKV_EINVAL, "%s: doc %lld: probe of %d rows of %lld, "
			       "%lld tokens stored", what, (long long)doc, n_probe, (long long)ld,
			       (long long)n_tok);
		goto fail;
	}
	size_t n = (size_t)n_probe * (size_t)n_tok;
	if (!(pack = malloc(n ? n * sizeof *pack : 1))) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "%s: doc %lld: out of memory", what, (long long)doc);
		goto fail;
	}
	for (int i = 0; i < n_probe; i++)
		memcpy(pack + (size_t)i * n_tok, probe + (size_t)i * ld, (size_t)n_tok * sizeof *pack);
	if ((rc = store_stmt(s, ST_ING_ADVANCE, &st, err, errlen)))
		goto fail;
	sqlite3_bind_int64(st, 1, doc);
	sqlite3_bind_int64(st, 2, n_tok);
	sqlite3_bind_double(st, 3, h_next);
	store_bind_blob(st, 4, pack, n * sizeof *pack);
	if ((rc = store_step(s, st)) != SQLITE_DONE) {
		rc = store_dberr(s, rc, err, errlen, what, "ingest_state");
		goto fail;
	}
	rc = store_tx_commit(s, err, errlen);
	goto out;
fail:
	store_tx_rollback(s);
out:
	store_stmt_reset_all(s);
	free(pack);
	return rc;
}

/* The current ST_ING_GET row into *out, checked against the document d. */
static int ingest_row(sqlite3_stmt *st, const struct store_doc *d, struct store_ingest *out,
		      char *err, size_t errlen)
{
	memset(out, 0, sizeof *out);
	out->n_tok_total = sqlite3_column_int64(st, 0);
	out->n_batch = sqlite3_column_int(st, 1);
	out->alpha = (float)sqlite3_column_double(st, 2);
	out->rank_energy = (float)sqlite3_column_double(st, 3);
	out->key_pre_rope = sqlite3_column_int(st, 4);
	out->static_share = sqlite3_column_double(st, 5);
	out->n_recent = sqlite3_column_int(st, 6);
	out->pos_end = sqlite3_column_int64(st, 7);
	out->h_next = (float)sqlite3_column_double(st, 8);
	out->n_probe = sqlite3_column_int(st, 9);
	out->keep_full_kv = sqlite3_column_int(st, 11) != 0;
	out->part = sqlite3_column_int(st, 12);
	out->n_part = sqlite3_column_int(st, 13);
	out->part_limit = sqlite3_column_int(st, 14);
	out->next_pending = sqlite3_column_int(st, 15);
	const unsigned char *fp = sqlite3_column_text(st, 16);
	snprintf(out->text_fp, sizeof out->text_fp, "%s", fp ? (const char *)fp : "");
	out->rank_energy_v = (float)sqlite3_column_double(st, 17);
	out->exact_below = sqlite3_column_int(st, 18);
	if (out->pos_end != d->n_tok || out->n_tok_total < d->n_tok ||
	    out->n_tok_total > INT32_MAX || out->n_batch < 1 || out->n_probe < 0 ||
	    out->n_probe > STORE_MAX_DIM || out->n_recent < 0 || out->exact_below < 0 ||
	    out->n_part < 1 ||
	    out->part < 0 || out->part >= out->n_part || out->part_limit < 0 ||
	    (out->next_pending != 0 && out->next_pending != 1) ||
	    (out->next_pending && out->part + 1 >= out->n_part) ||
	    (fp && (sqlite3_column_bytes(st, 16) != 16 || !fp_ok(out->text_fp))))
		return sekv_errf(err, errlen, SEKV_EFORMAT,
				 "store_ingest_get: doc %lld: ingest_state: pos_end %lld of %lld "
				 "tokens (document has %lld), n_batch %d, n_probe %d, part %d of %d "
				 "(limit %d, next pending %d, text_fp '%s')", (long long)d->id,
				 (long long)out->pos_end, (long long)out->n_tok_total,
				 (long long)d->n_tok, out->n_batch, out->n_probe, out->part,
				 out->n_part, out->part_limit, out->next_pending, out->text_fp);
	return 0;
}

int store_ingest_get(struct store *s, int64_t doc, struct store_ingest *out, float **probe,
		     char *err, size_t errlen)
{
	static const char what[] = "store_ingest_get";
	struct store_doc d;
	sqlite3_stmt *st;
	const void *b;
	int rc;

	if (probe)
		*probe = NULL;
	if ((rc = store_tx_begin_read(s, err, errlen)))
		return rc;
	if ((rc = store_doc_read(s, doc, &d, what, err, errlen)) ||
	    (rc = store_stmt(s, ST_ING_GET, &st, err, errlen)))
		goto fail;
	sqlite3_bind_int64(st, 1, doc);
	rc = store_step(s, st);
	if (rc == SQLITE_DONE) {
		rc = sekv_errf(err, errlen, SEKV_ENOTFOUND, "%s: doc %lld: no resume state",
			       what, (long long)doc);
		goto fail;
	}
	if (rc != SQLITE_ROW) {
		rc = store_dberr(s, rc, err, errlen, what, "ingest_state");
		goto fail;
	}
	if ((rc = ingest_row(st, &d, out, err, errlen)))
		goto fail;
	size_t n = (size_t)out->n_probe * (size_t)d.n_tok;
	if ((rc = store_col_blob(st, 10, n * sizeof(float), &b, what, doc, "ingest_state", "probe",
				 err, errlen)))
		goto fail;
	if (probe && n) {
		if (!(*probe = malloc(n * sizeof **probe))) {
			rc = sekv_errf(err, errlen, SEKV_ENOMEM, "%s: doc %lld: out of memory",
				       what, (long long)doc);
			goto fail;
		}
		memcpy(*probe, b, n * sizeof **probe);
	}
	rc = store_tx_commit(s, err, errlen);
	store_stmt_reset_all(s);
	if (rc && probe) {
		free(*probe);
		*probe = NULL;
	}
	return rc;
fail:
	store_tx_rollback(s);
	store_stmt_reset_all(s);
	return rc;
}

/* Runs the keyed statement id on doc's row: it must change exactly one
 * row, else code with err "what: doc N: why". */
static int ingest_exec_one(struct store *s, enum store_st id, int64_t doc, const char *what,
			   int code, const char *why, char *err, size_t errlen)
{
	char obj[48];
	int changes = 0;

	snprintf(obj, sizeof obj, "doc %lld", (long long)doc);
	int rc = store_exec_key(s, id, doc, &changes, what, obj, err, errlen);
	if (rc == 0 && changes != 1)
		rc = sekv_errf(err, errlen, code, "%s: %s: %s", what, obj, why);
	return rc;
}

int store_ingest_pend(struct store *s, int64_t doc, char *err, size_t errlen)
{
	return ingest_exec_one(s, ST_ING_PEND, doc, "store_ingest_pend", SEKV_EINVAL,
			       "no resume state of a part with parts after it", err, errlen);
}

int store_ingest_end(struct store *s, int64_t doc, char *err, size_t errlen)
{
	return ingest_exec_one(s, ST_ING_END, doc, "store_ingest_end", SEKV_ENOTFOUND,
			       "the parts after it are no longer pending (another ingest stored "
			       "them?)", err, errlen);
}
