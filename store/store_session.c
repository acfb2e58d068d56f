/* store_session.c - sessions over a document and their turns: each
 * question, its answer and its evidence passages (tables sessions, turns,
 * turn_evidence, schema.c). A turn and its evidence are written in one
 * transaction, so a crash keeps either the whole turn or none of it.
 * Deleting a document cascades to its sessions (foreign keys).
 */
#include "store/store_int.h"
#include "engine/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Column col as text copied into buf [cap] (cut to fit, "" for NULL). */
static void col_text(sqlite3_stmt *st, int col, char *buf, size_t cap)
{
	const unsigned char *p = sqlite3_column_text(st, col);
	size_t n = p ? (size_t)sqlite3_column_bytes(st, col) : 0;

	if (n >= cap)
		n = cap - 1;
	if (n)
		memcpy(buf, p, n);
	buf[n] = 0;
}

/* Column col as a malloc'ed string ("" for NULL), or NULL out of memory. */
static char *col_text_dup(sqlite3_stmt *st, int col)
{
	const unsigned char *p = sqlite3_column_text(st, col);
	size_t n = p ? (size_t)sqlite3_column_bytes(st, col) : 0;
	char *d = malloc(n + 1);

	if (d) {
		if (n)
			memcpy(d, p, n);
		d[n] = 0;
	}
	return d;
}

static void read_session(sqlite3_stmt *st, struct store_session *o)
{
	memset(o, 0, sizeof *o);
	o->id = sqlite3_column_int64(st, 0);
	o->doc = sqlite3_column_int64(st, 1);
	col_text(st, 2, o->kv, sizeof o->kv);
	o->created = sqlite3_column_double(st, 3);
	o->last_used = sqlite3_column_double(st, 4);
	o->n_turn = sqlite3_column_int(st, 5);
	col_text(st, 6, o->doc_title, sizeof o->doc_title);
}

int store_session_create(struct store *s, int64_t doc, const char *kv, int64_t *id,
			 char *err, size_t errlen)
{
	sqlite3_stmt *st;
	char obj[48];
	double now = (double)time(NULL);
	int rc;

	snprintf(obj, sizeof obj, "doc %lld", (long long)doc);
	if ((rc = store_stmt(s, ST_SES_INSERT, &st, err, errlen)))
		return rc;
	sqlite3_bind_int64(st, 1, doc);
	sqlite3_bind_text(st, 2, kv, -1, SQLITE_STATIC);
	sqlite3_bind_double(st, 3, now);
	sqlite3_bind_double(st, 4, now);
	rc = store_step(s, st);
	if ((rc & 0xff) == SQLITE_CONSTRAINT)
		rc = sekv_errf(err, errlen, SEKV_ENOTFOUND, "store_session_create: %s: no such document", obj);
	else if (rc != SQLITE_DONE)
		rc = store_dberr(s, rc, err, errlen, "store_session_create", obj);
	else {
		*id = sqlite3_last_insert_rowid(s->db);
		rc = 0;
	}
	sqlite3_reset(st);
	return rc;
}

int store_session_add_turn(struct store *s, int64_t session, const struct store_turn *t,
			   char *err, size_t errlen)
{
	sqlite3_stmt *st;
	char obj[48];
	double now = (double)time(NULL);
	int rc;

	snprintf(obj, sizeof obj, "session %lld", (long long)session);
	if ((rc = store_tx_begin(s, err, errlen)))
		return rc;
	/* the turn's idx is the session's n_turn, read inside the statement */
	if ((rc = store_stmt(s, ST_TURN_INSERT, &st, err, errlen)))
		goto fail;
	sqlite3_bind_int64(st, 1, session);
	sqlite3_bind_text(st, 3, t->question ? t->question : "", -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, t->answer ? t->answer : "", -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 5, t->stopped, -1, SQLITE_STATIC);
	sqlite3_bind_int(st, 6, t->n_gen);
	if (t->heads[0])
		sqlite3_bind_text(st, 7, t->heads, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(st, 7);
	sqlite3_bind_double(st, 8, now);
	if ((rc = store_step(s, st)) != SQLITE_DONE) {
		rc = (rc & 0xff) == SQLITE_CONSTRAINT
		     ? sekv_errf(err, errlen, SEKV_ENOTFOUND, "store_session_add_turn: %s: no such session", obj)
		     : store_dberr(s, rc, err, errlen, "store_session_add_turn", obj);
		goto fail;
	}
	for (int i = 0; i < t->n_ev; i++) {
		if ((rc = store_stmt(s, ST_TEV_INSERT, &st, err, errlen)))
			goto fail;
		sqlite3_bind_int64(st, 1, session);
		sqlite3_bind_int(st, 3, t->ev[i].rank);
		sqlite3_bind_int64(st, 4, t->ev[i].start);
		sqlite3_bind_int64(st, 5, t->ev[i].end);
		sqlite3_bind_double(st, 6, t->ev[i].score);
		if ((rc = store_step(s, st)) != SQLITE_DONE) {
			rc = store_dberr(s, rc, err, errlen, "store_session_add_turn: evidence", obj);
			goto fail;
		}
	}
	if ((rc = store_stmt(s, ST_SES_TOUCH, &st, err, errlen)))
		goto fail;
	sqlite3_bind_int64(st, 1, session);
	sqlite3_bind_double(st, 2, now);
	if ((rc = store_step(s, st)) != SQLITE_DONE) {
		rc = store_dberr(s, rc, err, errlen, "store_session_add_turn", obj);
		goto fail;
	}
	rc = store_tx_commit(s, err, errlen);
	goto out;
fail:
	store_tx_rollback(s);
out:
	store_stmt_reset_all(s);
	return rc;
}

int store_session_get(struct store *s, int64_t id, struct store_session *out,
		      char *err, size_t errlen)
{
	sqlite3_stmt *st;
	char obj[48];
	int rc;

	snprintf(obj, sizeof obj, "session %lld", (long long)id);
	if ((rc = store_stmt(s, ST_SES_GET, &st, err, errlen)))
		return rc;
	sqlite3_bind_int64(st, 1, id);
	rc = store_step(s, st);
	if (rc == SQLITE_ROW) {
		read_session(st, out);
		rc = 0;
	} else if (rc == SQLITE_DONE) {
		rc = sekv_errf(err, errlen, SEKV_ENOTFOUND, "store_session_get: %s: no such session", obj);
	} else {
		rc = store_dberr(s, rc, err, errlen, "store_session_get", obj);
	}
	sqlite3_reset(st);
	return rc;
}

int store_session_list(struct store *s, int64_t doc, struct store_session **out, int *n,
		       char *err, size_t errlen)
{
	sqlite3_stmt *st;
	struct store_session *v = NULL;
	int rc, cap = 0;

	*out = NULL;
	*n = 0;
	if ((rc = store_stmt(s, ST_SES_LIST, &st, err, errlen)))
		return rc;
	sqlite3_bind_int64(st, 1, doc);
	while ((rc = store_step(s, st)) == SQLITE_ROW) {
		if (*n == cap) {
			int c = cap ? cap * 2 : 16;
			struct store_session *g = realloc(v, (size_t)c * sizeof *g);
			if (!g) {
				rc = sekv_errf(err, errlen, SEKV_ENOMEM, "store_session_list: out of memory");
				goto fail;
			}
			v = g;
			cap = c;
		}
		read_session(st, &v[(*n)++]);
	}
	if (rc != SQLITE_DONE) {
		rc = store_dberr(s, rc, err, errlen, "store_session_list", s->path);
		goto fail;
	}
	sqlite3_reset(st);
	*out = v;
	return 0;
fail:
	sqlite3_reset(st);
	free(v);
	*n = 0;
	return rc;
}

void store_turns_free(struct store_turn *t, int n)
{
	if (!t)
		return;
	for (int i = 0; i < n; i++) {
		free(t[i].question);
		free(t[i].answer);
		free(t[i].ev);
	}
	free(t);
}

/* Reads the evidence rows of session into the turns t [n] (idx = index). */
static int read_evidence(struct store *s, int64_t session, struct store_turn *t, int n,
			 const char *obj, char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc;

	if ((rc = store_stmt(s, ST_TEV_GET, &st, err, errlen)))
		return rc;
	sqlite3_bind_int64(st, 1, session);
	while ((rc = store_step(s, st)) == SQLITE_ROW) {
		int64_t idx = sqlite3_column_int64(st, 0);
		struct store_evidence_row r = {
			.rank = sqlite3_column_int(st, 1), .start = sqlite3_column_int64(st, 2),
			.end = sqlite3_column_int64(st, 3), .score = sqlite3_column_double(st, 4),
		};
		if (idx < 0 || idx >= n || r.start < 0 || r.end < r.start) {
			rc = sekv_errf(err, errlen, SEKV_EFORMAT, "store_session_turns_dup: %s: evidence "
				       "of turn %lld: range [%lld, %lld) or turn out of place", obj,
				       (long long)idx, (long long)r.start, (long long)r.end);
			sqlite3_reset(st);
			return rc;
		}
		struct store_turn *tt = &t[idx];
		struct store_evidence_row *g = realloc(tt->ev, (size_t)(tt->n_ev + 1) * sizeof *g);
		if (!g) {
			sqlite3_reset(st);
			return sekv_errf(err, errlen, SEKV_ENOMEM, "store_session_turns_dup: out of memory");
		}
		tt->ev = g;
		tt->ev[tt->n_ev++] = r;
	}
	rc = rc == SQLITE_DONE ? 0 : store_dberr(s, rc, err, errlen, "store_session_turns_dup", obj);
	sqlite3_reset(st);
	return rc;
}

int store_session_turns_dup(struct store *s, int64_t session, struct store_turn **out,
			    int *n, char *err, size_t errlen)
{
	sqlite3_stmt *st;
	struct store_turn *v = NULL;
	char obj[48];
	int rc, cap = 0;

	*out = NULL;
	*n = 0;
	snprintf(obj, sizeof obj, "session %lld", (long long)session);
	if ((rc = store_tx_begin_read(s, err, errlen)))
		return rc;
	if ((rc = store_stmt(s, ST_TURN_GET, &st, err, errlen)))
		goto fail;
	sqlite3_bind_int64(st, 1, session);
	while ((rc = store_step(s, st)) == SQLITE_ROW) {
		if (sqlite3_column_int64(st, 0) != *n) {
			rc = sekv_errf(err, errlen, SEKV_EFORMAT, "store_session_turns_dup: %s: turn %lld "
				       "where turn %d belongs", obj, (long long)sqlite3_column_int64(st, 0), *n);
			goto fail;
		}
		if (*n == cap) {
			int c = cap ? cap * 2 : 8;
			struct store_turn *g = realloc(v, (size_t)c * sizeof *g);
			if (!g) {
				rc = sekv_errf(err, errlen, SEKV_ENOMEM, "store_session_turns_dup: out of memory");
				goto fail;
			}
			v = g;
			cap = c;
		}
		struct store_turn *t = &v[*n];
		memset(t, 0, sizeof *t);
		(*n)++;
		t->idx = *n - 1;
		t->question = col_text_dup(st, 1);
		t->answer = col_text_dup(st, 2);
		col_text(st, 3, t->stopped, sizeof t->stopped);
		t->n_gen = sqlite3_column_int(st, 4);
		col_text(st, 5, t->heads, sizeof t->heads);
		t->created = sqlite3_column_double(st, 6);
		if (!t->question || !t->answer) {
			rc = sekv_errf(err, errlen, SEKV_ENOMEM, "store_session_turns_dup: out of memory");
			goto fail;
		}
	}
	if (rc != SQLITE_DONE) {
		rc = store_dberr(s, rc, err, errlen, "store_session_turns_dup", obj);
		goto fail;
	}
	sqlite3_reset(st);
	if ((rc = read_evidence(s, session, v, *n, obj, err, errlen)))
		goto fail;
	if ((rc = store_tx_commit(s, err, errlen)))
		goto fail_done;
	store_stmt_reset_all(s);
	*out = v;
	return 0;
fail:
	store_tx_rollback(s);
fail_done:
	store_stmt_reset_all(s);
	store_turns_free(v, *n);
	*n = 0;
	return rc;
}

int store_session_delete(struct store *s, int64_t id, char *err, size_t errlen)
{
	sqlite3_stmt *st;
	char obj[48];
	int rc;

	snprintf(obj, sizeof obj, "session %lld", (long long)id);
	/* the foreign keys cascade to turns and their evidence */
	if ((rc = store_stmt(s, ST_SES_DELETE, &st, err, errlen)))
		return rc;
	sqlite3_bind_int64(st, 1, id);
	rc = store_step(s, st);
	if (rc != SQLITE_DONE)
		rc = store_dberr(s, rc, err, errlen, "store_session_delete", obj);
	else if (sqlite3_changes(s->db) == 0)
		rc = sekv_errf(err, errlen, SEKV_ENOTFOUND, "store_session_delete: %s: no such session", obj);
	else
		rc = 0;
	sqlite3_reset(st);
	return rc;
}
