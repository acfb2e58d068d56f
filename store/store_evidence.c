/* store_evidence.c - retrieval heads per model fingerprint (table
 * evidence_heads, schema.c): what a calibration found, so that it runs
 * once per model and library. The heads' meaning lives in engine/evidence/evidence.h.
 */
#include "store/store_int.h"
#include "engine/base/err.h"

#include <string.h>
#include <time.h>

int store_evidence_heads_get(struct store *s, const char *model_fp, char *buf, size_t cap,
			     char *err, size_t errlen)
{
	sqlite3_stmt *st;
	const unsigned char *p;
	size_t n;
	int rc;

	if ((rc = store_stmt(s, ST_EVH_GET, &st, err, errlen)))
		return rc;
	sqlite3_bind_text(st, 1, model_fp, -1, SQLITE_STATIC);
	rc = store_step(s, st);
	if (rc == SQLITE_DONE) {
		rc = sekv_errf(err, errlen, SEKV_ENOTFOUND,
			       "store_evidence_heads_get: model %s: none stored", model_fp);
	} else if (rc != SQLITE_ROW) {
		rc = store_dberr(s, rc, err, errlen, "store_evidence_heads_get", model_fp);
	} else {
		p = sqlite3_column_text(st, 0);
		n = (size_t)sqlite3_column_bytes(st, 0);
		if (!p || n >= cap) {
			rc = sekv_errf(err, errlen, SEKV_EFORMAT,
				       "store_evidence_heads_get: model %s: %zu bytes", model_fp, n);
		} else {
			memcpy(buf, p, n);
			buf[n] = 0;
			rc = 0;
		}
	}
	sqlite3_reset(st);
	return rc;
}

int store_evidence_heads_put(struct store *s, const char *model_fp, const char *heads,
			     const char *scores, char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc;

	if ((rc = store_stmt(s, ST_EVH_PUT, &st, err, errlen)))
		return rc;
	sqlite3_bind_text(st, 1, model_fp, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, heads, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, scores, -1, SQLITE_STATIC);
	sqlite3_bind_double(st, 4, (double)time(NULL));
	rc = store_step(s, st);
	rc = rc == SQLITE_DONE ? 0 : store_dberr(s, rc, err, errlen, "store_evidence_heads_put", model_fp);
	sqlite3_reset(st);
	return rc;
}
