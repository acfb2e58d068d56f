/* store_pages.c - the page map of a document read from a PDF (table
 * doc_pages, schema.c): one row per document, the byte offset where each
 * page starts in the stored text, so that evidence and exports cite page
 * numbers. Invariant: starts ascend from 0 and stay within text_len,
 * checked on write and on read. What a page map means lives in
 * app/extract.h.
 */
#include "store/store_int.h"
#include "engine/base/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STORE_MAX_PAGES (1 << 24)

/* 1 when start [n] ascends from 0 and stays within text_len. */
static int pages_ok(const int64_t *start, int n, int64_t text_len)
{
	if (n < 1 || n > STORE_MAX_PAGES || start[0] != 0 || text_len < 0)
		return 0;
	for (int i = 1; i < n; i++)
		if (start[i] < start[i - 1])
			return 0;
	return start[n - 1] <= text_len;
}

int store_doc_put_pages(struct store *s, int64_t doc, int page0, int n_page,
			const int64_t *start, int64_t text_len, char *err, size_t errlen)
{
	static const char what[] = "store_doc_put_pages";
	struct store_doc d;
	sqlite3_stmt *st;
	char obj[48];
	int rc;

	snprintf(obj, sizeof obj, "doc %lld", (long long)doc);
	if (!start || page0 < 1 || !pages_ok(start, n_page, text_len))
		return sekv_errf(err, errlen, SEKV_EINVAL, "%s: %s: bad page map", what, obj);
	if ((rc = store_tx_begin(s, err, errlen)))
		return rc;
	if ((rc = store_doc_read(s, doc, &d, what, err, errlen)) ||
	    (rc = store_stmt(s, ST_PAGES_PUT, &st, err, errlen)))
		goto fail;
	sqlite3_bind_int64(st, 1, doc);
	sqlite3_bind_int(st, 2, page0);
	sqlite3_bind_int(st, 3, n_page);
	sqlite3_bind_int64(st, 4, text_len);
	store_bind_blob(st, 5, start, (size_t)n_page * sizeof *start);
	if ((rc = store_step(s, st)) != SQLITE_DONE) {
		rc = store_dberr(s, rc, err, errlen, what, "doc_pages");
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

int store_doc_get_pages(struct store *s, int64_t doc, int *page0, int *n_page,
			int64_t **start, int64_t *text_len, char *err, size_t errlen)
{
	static const char what[] = "store_doc_get_pages";
	sqlite3_stmt *st;
	const void *b = NULL;
	char obj[48];
	int rc;

	*start = NULL;
	*n_page = 0;
	snprintf(obj, sizeof obj, "doc %lld", (long long)doc);
	if ((rc = store_stmt(s, ST_PAGES_GET, &st, err, errlen)))
		return rc;
	sqlite3_bind_int64(st, 1, doc);
	rc = store_step(s, st);
	if (rc == SQLITE_DONE) {
		rc = sekv_errf(err, errlen, SEKV_ENOTFOUND, "%s: %s: no page map", what, obj);
		goto out;
	}
	if (rc != SQLITE_ROW) {
		rc = store_dberr(s, rc, err, errlen, what, obj);
		goto out;
	}
	int64_t p0 = sqlite3_column_int64(st, 0), n = sqlite3_column_int64(st, 1);
	*text_len = sqlite3_column_int64(st, 2);
	if (p0 < 1 || p0 > STORE_MAX_PAGES || n < 1 || n > STORE_MAX_PAGES) {
		rc = sekv_errf(err, errlen, SEKV_EFORMAT, "%s: %s: doc_pages: page0 %lld, %lld pages",
			       what, obj, (long long)p0, (long long)n);
		goto out;
	}
	if ((rc = store_col_blob(st, 3, (size_t)n * sizeof **start, &b, what, doc, "doc_pages", "start",
				 err, errlen)))
		goto out;
	if (!(*start = malloc((size_t)n * sizeof **start))) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "%s: %s: out of memory", what, obj);
		goto out;
	}
	memcpy(*start, b, (size_t)n * sizeof **start);
	if (!pages_ok(*start, (int)n, *text_len)) {
		free(*start);
		*start = NULL;
		rc = sekv_errf(err, errlen, SEKV_EFORMAT, "%s: %s: doc_pages: starts out of order or range",
			       what, obj);
		goto out;
	}
	*page0 = (int)p0;
	*n_page = (int)n;
out:
	sqlite3_reset(st);
	return rc;
}
