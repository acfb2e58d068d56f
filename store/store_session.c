/* store_session.c - sessions over a document and their turns: each
 * question, its answer and its evidence passages (tables sessions, turns,
 * turn_evidence, schema.c). A turn and its evidence are written in one
 * transaction, so a crash keeps either the whole turn or none of it.
 * Deleting a document cascades to its sessions (foreign keys).
 */
#include "store/store_int.h"
#include "engine/base/err.h"
#include "engine/sekv/sekv.h"

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
	o->n_tok = sqlite3_column_int64(st, 7);
	o->kv_turns = sqlite3_column_int(st, 8);
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
		sqlite3_bind_int64(st, 7, t->ev[i].peak >= t->ev[i].start && t->ev[i].peak < t->ev[i].end ?
				  t->ev[i].peak : t->ev[i].start);
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
			.peak = sqlite3_column_int64(st, 5),
		};
		/* a peak outside the passage (a damaged row) starts the snippet at start */
		if (r.peak < r.start || r.peak >= r.end)
			r.peak = r.start;
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

/* The delete of store_session_delete, without the reserve. */
static int session_delete(struct store *s, int64_t id, char *err, size_t errlen)
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
	if (!rc)
		store_give_back(s);
	return rc;
}

int store_session_delete(struct store *s, int64_t id, char *err, size_t errlen)
{
	return store_run_delete(s, session_delete, id, err, errlen);
}

/* ---- a session's KV (its memory's slices, its sliding-window rows) ---- */

/* The newest sliding-window rows of w as one session_swa row, and the
 * rows a resume no longer needs deleted. A model without sliding-window
 * layers (Llama, Qwen2, Phi-3) keeps none: nothing is written. */
static int put_swa(struct store *s, int64_t session, const struct store_session_mem *w,
		   size_t row, const char *obj, char *err, size_t errlen)
{
	size_t per = (size_t)w->swa_n * row, n = (size_t)w->swa_n_layer * per;
	uint16_t *k, *v;
	sqlite3_stmt *st;
	int rc;

	if (w->swa_n_layer == 0 || w->swa_n == 0)
		return 0;
	k = malloc((n ? n : 1) * sizeof *k);
	v = malloc((n ? n : 1) * sizeof *v);
	if (!k || !v) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "store_session_put_mem: %s: out of memory", obj);
		goto out;
	}
	for (int l = 0; l < w->swa_n_layer; l++) {
		memcpy(k + l * per, w->swa_k[l], per * sizeof *k);
		memcpy(v + l * per, w->swa_v[l], per * sizeof *v);
	}
	if ((rc = store_stmt(s, ST_SSWA_INSERT, &st, err, errlen)))
		goto out;
	sqlite3_bind_int64(st, 1, session);
	sqlite3_bind_int(st, 2, w->swa_pos0);
	sqlite3_bind_int(st, 3, w->swa_n);
	store_bind_blob(st, 4, k, n * sizeof *k);
	store_bind_blob(st, 5, v, n * sizeof *v);
	if ((rc = store_step(s, st)) != SQLITE_DONE)
		goto db;
	if ((rc = store_stmt(s, ST_SSWA_PRUNE, &st, err, errlen)))
		goto out;
	sqlite3_bind_int64(st, 1, session);
	sqlite3_bind_int64(st, 2, (int64_t)w->swa_pos0 + w->swa_n - w->swa_window);
	if ((rc = store_step(s, st)) != SQLITE_DONE)
		goto db;
	rc = 0;
	goto out;
db:
	rc = store_dberr(s, rc, err, errlen, "store_session_put_mem", obj);
out:
	store_stmt_reset_all(s);
	free(k);
	free(v);
	return rc;
}

/* Checks w against the session's document; its row size into *row. */
static int mem_check(struct store *s, int64_t session, const struct store_session_mem *w,
		     size_t *row, const char *obj, char *err, size_t errlen)
{
	struct store_session ss;
	struct store_doc d;
	int rc;

	if ((rc = store_session_get(s, session, &ss, err, errlen)) ||
	    (rc = store_doc_read(s, ss.doc, &d, "store_session_put_mem", err, errlen)))
		return rc;
	*row = (size_t)d.n_head_kv * d.d_h;
	if (!w->open || w->swa_n < 0 || w->swa_window < 1 || w->swa_n_layer != d.n_layer_swa ||
	    (w->swa_n && (!w->swa_k || !w->swa_v)) || w->open_pos0 < 0 ||
	    w->open_pos0 + w->open->n_tok <= d.n_tok ||
	    (w->part && (w->part_pos0 < 0 || w->part_pos0 + w->part->n_tok != w->open_pos0)) ||
	    w->swa_pos0 + w->swa_n != w->open_pos0 + w->open->n_tok)
		return sekv_errf(err, errlen, SEKV_EINVAL, "store_session_put_mem: %s: slices or "
				 "sliding-window rows out of place (document of %lld tokens, %d "
				 "sliding-window layers)", obj, (long long)d.n_tok, d.n_layer_swa);
	return 0;
}

int store_session_put_mem(struct store *s, int64_t session, const struct store_session_mem *w,
			  char *err, size_t errlen)
{
	sqlite3_stmt *st;
	size_t row = 0;
	char obj[48];
	int rc;

	snprintf(obj, sizeof obj, "session %lld", (long long)session);
	if ((rc = store_tx_begin(s, err, errlen)))
		return rc;
	if ((rc = mem_check(s, session, w, &row, obj, err, errlen)))
		goto fail;
	int64_t bytes = (int64_t)(w->part ? w->part->static_bytes + w->part->host_bytes : 0) +
			(int64_t)(w->open->static_bytes + w->open->host_bytes) +
			(int64_t)w->swa_n * w->swa_n_layer * (int64_t)row * 4;
	if ((rc = store_room(s, bytes, "store_session_put_mem", err, errlen)) ||
	    (w->part && (rc = store_mem_put_part(s, session, w->part_idx, w->part_pos0, 0, w->part,
						  err, errlen))) ||
	    (rc = store_mem_put_part(s, session, -1, w->open_pos0, w->h_next, w->open, err, errlen)) ||
	    (rc = put_swa(s, session, w, row, obj, err, errlen)) ||
	    (rc = store_stmt(s, ST_SES_SET_KV, &st, err, errlen)))
		goto fail;
	sqlite3_bind_int64(st, 1, session);
	sqlite3_bind_int64(st, 2, (int64_t)w->open_pos0 + w->open->n_tok);
	sqlite3_bind_int(st, 3, w->kv_turns);
	if ((rc = store_step(s, st)) != SQLITE_DONE) {
		rc = store_dberr(s, rc, err, errlen, "store_session_put_mem", obj);
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

void store_session_kv_free(struct store_session_kv *kv)
{
	if (!kv)
		return;
	for (int i = 0; i < kv->n_part; i++)
		sekv_mem_free(kv->part[i]);
	free(kv->part);
	free(kv->pos0);
	free(kv->swa_k);
	free(kv->swa_v);
	memset(kv, 0, sizeof *kv);
}

/* The session_swa rows, which must follow each other, into kv: counted
 * first, so the rows are copied once into place (layer-major). */
static int get_swa(struct store *s, int64_t session, const struct store_doc *d,
		   struct store_session_kv *kv, const char *obj, char *err, size_t errlen)
{
	size_t row = (size_t)d->n_head_kv * d->d_h, total;
	sqlite3_stmt *st;
	int rc;

	kv->swa_n_layer = d->n_layer_swa;
	if ((rc = store_stmt(s, ST_SSWA_COUNT, &st, err, errlen)))
		return rc;
	sqlite3_bind_int64(st, 1, session);
	if ((rc = store_step(s, st)) != SQLITE_ROW) {
		rc = store_dberr(s, rc, err, errlen, "store_session_get_kv", obj);
		sqlite3_reset(st);
		return rc;
	}
	int64_t n_all = sqlite3_column_int64(st, 0);
	sqlite3_reset(st);
	if (n_all < 0 || n_all > INT32_MAX / 2)
		return sekv_errf(err, errlen, SEKV_EFORMAT, "store_session_get_kv: %s: session_swa: "
				 "%lld rows", obj, (long long)n_all);
	total = (size_t)n_all;
	kv->swa_k = malloc((total * d->n_layer_swa * row + 1) * sizeof *kv->swa_k);
	kv->swa_v = malloc((total * d->n_layer_swa * row + 1) * sizeof *kv->swa_v);
	if (!kv->swa_k || !kv->swa_v)
		return sekv_errf(err, errlen, SEKV_ENOMEM, "store_session_get_kv: out of memory");
	if ((rc = store_stmt(s, ST_SSWA_GET, &st, err, errlen)))
		return rc;
	sqlite3_bind_int64(st, 1, session);
	while ((rc = store_step(s, st)) == SQLITE_ROW) {
		int64_t p0 = sqlite3_column_int64(st, 0), n = sqlite3_column_int64(st, 1);
		const void *k, *v;
		if (p0 < d->n_tok || n < 1 || p0 > INT32_MAX / 2 || (size_t)kv->swa_n + (size_t)n > total ||
		    (kv->swa_n && p0 != (int64_t)kv->swa_pos0 + kv->swa_n)) {
			rc = sekv_errf(err, errlen, SEKV_EFORMAT, "store_session_get_kv: %s: "
				       "session_swa: rows [%lld, +%lld) out of place", obj,
				       (long long)p0, (long long)n);
			break;
		}
		size_t bytes = (size_t)d->n_layer_swa * (size_t)n * row * 2;
		if ((rc = store_col_blob(st, 2, bytes, &k, "store_session_get_kv", d->id, "session_swa",
					 "k", err, errlen)) ||
		    (rc = store_col_blob(st, 3, bytes, &v, "store_session_get_kv", d->id, "session_swa",
					 "v", err, errlen)))
			break;
		for (int l = 0; l < d->n_layer_swa; l++) {
			size_t at = ((size_t)l * total + (size_t)kv->swa_n) * row, from = (size_t)l * n * row;
			memcpy(kv->swa_k + at, (const uint16_t *)k + from, (size_t)n * row * 2);
			memcpy(kv->swa_v + at, (const uint16_t *)v + from, (size_t)n * row * 2);
		}
		if (!kv->swa_n)
			kv->swa_pos0 = (int32_t)p0;
		kv->swa_n += (int)n;
	}
	if (rc == SQLITE_DONE)
		rc = (size_t)kv->swa_n == total ? 0 : sekv_errf(err, errlen, SEKV_EFORMAT,
			"store_session_get_kv: %s: session_swa: %d rows of %zu", obj, kv->swa_n, total);
	else if (rc > 0)
		rc = store_dberr(s, rc, err, errlen, "store_session_get_kv", obj);
	sqlite3_reset(st);
	return rc;
}

int store_session_get_kv(struct store *s, int64_t session, struct store_session_kv *out,
			 char *err, size_t errlen)
{
	struct store_session ss;
	struct store_doc d;
	char obj[48];
	int rc;

	memset(out, 0, sizeof *out);
	snprintf(obj, sizeof obj, "session %lld", (long long)session);
	if ((rc = store_tx_begin_read(s, err, errlen)))
		return rc;
	if ((rc = store_session_get(s, session, &ss, err, errlen)) ||
	    (rc = store_doc_read(s, ss.doc, &d, "store_session_get_kv", err, errlen)) ||
	    (rc = store_mem_get_parts(s, session, &d, &out->part, &out->pos0, &out->n_part,
				      &out->h_next, err, errlen)) ||
	    (rc = get_swa(s, session, &d, out, obj, err, errlen)))
		goto fail;
	out->kv_turns = ss.kv_turns;
	if (out->n_part && (out->pos0[0] > d.n_tok ||
			    out->pos0[out->n_part - 1] + out->part[out->n_part - 1]->n_tok !=
				    d.n_tok + ss.n_tok ||
			    (out->swa_n && out->swa_pos0 + out->swa_n != d.n_tok + ss.n_tok))) {
		rc = sekv_errf(err, errlen, SEKV_EFORMAT, "store_session_get_kv: %s: its memory and "
			       "sliding-window rows do not end at its %lld tokens after the document's %lld",
			       obj, (long long)ss.n_tok, (long long)d.n_tok);
		goto fail;
	}
	if ((rc = store_tx_commit(s, err, errlen)))
		goto fail_done;
	store_stmt_reset_all(s);
	return 0;
fail:
	store_tx_rollback(s);
fail_done:
	store_stmt_reset_all(s);
	store_session_kv_free(out);
	return rc;
}

int64_t store_session_disk_bytes(struct store *s, int64_t session)
{
	sqlite3_stmt *st;
	int64_t n;
	int rc;

	if ((rc = store_stmt(s, ST_SES_DISK_BYTES, &st, NULL, 0)))
		return rc;
	sqlite3_bind_int64(st, 1, session);
	rc = store_step(s, st);
	n = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : store_dberr(s, rc, NULL, 0,
		"store_session_disk_bytes", "sessions");
	sqlite3_reset(st);
	return n;
}
