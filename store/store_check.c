/* store_check.c - `sekv check`: SQLite's integrity and foreign-key checks,
 * then the library's own invariants, each broken one reported as a line
 * "where: what" through a callback (store.h, store_check).
 * The chunk tables are checked from their small columns and blob lengths
 * (length() reads a record header, not the blob); memories, SWA rows,
 * resume states and page maps are read through the same loaders the app
 * uses, so a library that passes here loads. Nothing here writes.
 */
#include "store/store_int.h"
#include "engine/base/err.h"
#include "engine/sekv/sekv.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct check {
	struct store *s;
	store_check_fn fn;
	void *ud;
	int n;                  /* problems so far */
	struct store_doc *doc;  /* [n_doc] by id */
	int n_doc;
};

static void problem(struct check *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(struct check *c, const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	c->n++;
	if (c->fn)
		c->fn(c->ud, line);
}

static const struct store_doc *find_doc(const struct check *c, int64_t id)
{
	int lo = 0, hi = c->n_doc - 1;

	while (lo <= hi) {
		int mid = (lo + hi) / 2;
		if (c->doc[mid].id == id)
			return &c->doc[mid];
		if (c->doc[mid].id < id)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return NULL;
}

/* Runs sql (no parameters) and hands every row to row(); a failing query
 * is itself a problem (the check goes on). */
static void each_row(struct check *c, const char *sql,
		     void (*row)(struct check *c, sqlite3_stmt *st, void *arg), void *arg)
{
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(c->s->db, sql, -1, &st, NULL);

	if (rc == SQLITE_OK)
		while ((rc = sqlite3_step(st)) == SQLITE_ROW)
			row(c, st, arg);
	if (rc != SQLITE_DONE)
		problem(c, "library: %.60s...: %s", sql, sqlite3_errmsg(c->s->db));
	sqlite3_finalize(st);
}

static void integrity_row(struct check *c, sqlite3_stmt *st, void *arg)
{
	const char *msg = (const char *)sqlite3_column_text(st, 0);

	(void)arg;
	if (!msg || strcmp(msg, "ok"))
		problem(c, "sqlite integrity_check: %s", msg ? msg : "(null)");
}

static void fk_row(struct check *c, sqlite3_stmt *st, void *arg)
{
	(void)arg;
	problem(c, "%s: row %lld: refers to a missing %s row", sqlite3_column_text(st, 0),
		(long long)sqlite3_column_int64(st, 1), sqlite3_column_text(st, 2));
}

/* Walks chunk rows ordered by (doc, layer, pos0): columns doc, layer,
 * pos0, n, length of blob a, length of blob b. */
struct tiling {
	const char *table;
	int kv;              /* 1: kv_chunk (layers, KV row bytes); 0: tok_chunk (4 bytes) */
	int64_t doc, next;   /* group being walked, position expected next */
	int layer, bad;      /* bad: a problem already reported in the group */
	int *groups;         /* [n_doc] (doc, layer) groups seen per document */
};

/* "kv_chunk: layer 2" or "tok_chunk" into buf, for messages. */
static const char *tiling_where(const struct tiling *t, char *buf, size_t cap)
{
	if (t->kv)
		snprintf(buf, cap, "%s: layer %d", t->table, t->layer);
	else
		snprintf(buf, cap, "%s", t->table);
	return buf;
}

static void tiling_end(struct check *c, struct tiling *t)
{
	const struct store_doc *d = find_doc(c, t->doc);
	char w[48];

	if (d && !t->bad && t->next != d->n_tok)
		problem(c, "doc %lld: %s: covers %lld of %lld tokens", (long long)t->doc,
			tiling_where(t, w, sizeof w), (long long)t->next, (long long)d->n_tok);
}

/* One chunk row: continues the group's tiling at the right blob lengths. */
static void tiling_check(struct check *c, struct tiling *t, const struct store_doc *d,
			 sqlite3_stmt *st)
{
	int64_t pos0 = sqlite3_column_int64(st, 2), n = sqlite3_column_int64(st, 3);
	int64_t la = sqlite3_column_int64(st, 4), lb = sqlite3_column_int64(st, 5);
	int64_t unit = t->kv ? (int64_t)d->n_head_kv * d->d_h * 2 : 4;
	char w[48];

	if (t->kv && (t->layer < 0 || t->layer >= d->n_layer_global)) {
		problem(c, "doc %lld: %s: layer %d of %d global layers", (long long)d->id, t->table,
			t->layer, d->n_layer_global);
		t->bad = 1;
	} else if (pos0 != t->next || n < 1 || n > d->n_tok - pos0) {
		problem(c, "doc %lld: %s: chunk at %lld of %lld tokens, expected one at %lld inside "
			"%lld", (long long)d->id, tiling_where(t, w, sizeof w), (long long)pos0,
			(long long)n, (long long)t->next, (long long)d->n_tok);
		t->bad = 1;
	} else if (la != n * unit || lb != n * unit) {
		problem(c, "doc %lld: %s: chunk at %lld has blobs of %lld and %lld bytes, expected "
			"%lld", (long long)d->id, tiling_where(t, w, sizeof w), (long long)pos0,
			(long long)la, (long long)lb, (long long)(n * unit));
		t->bad = 1;
	}
	t->next = pos0 + n;
}

static void tiling_row(struct check *c, sqlite3_stmt *st, void *arg)
{
	struct tiling *t = arg;
	int64_t doc = sqlite3_column_int64(st, 0), layer = sqlite3_column_int64(st, 1);
	const struct store_doc *d = find_doc(c, doc);

	if (doc != t->doc || layer != t->layer) {
		if (t->doc)
			tiling_end(c, t);
		t->doc = doc;
		t->layer = layer < INT32_MIN || layer > INT32_MAX ? -1 : (int)layer;
		t->next = 0;
		t->bad = 0;
		if (d)
			t->groups[d - c->doc]++;
	}
	if (d && !t->bad)
		tiling_check(c, t, d, st);
}

/* Every document's chunks of one table tile 0..n_tok (per global layer
 * for kv_chunk). */
static void check_tiling(struct check *c, int kv)
{
	struct tiling t = { .table = kv ? "kv_chunk" : "tok_chunk", .kv = kv };

	if (!(t.groups = calloc((size_t)c->n_doc + 1, sizeof *t.groups))) {
		problem(c, "library: out of memory");
		return;
	}
	each_row(c, kv ? "SELECT doc, layer, pos0, n, length(k), length(v) FROM kv_chunk"
			 " ORDER BY doc, layer, pos0" :
			 "SELECT doc, 0, pos0, n, length(tokens), length(surprisal) FROM tok_chunk"
			 " ORDER BY doc, pos0", tiling_row, &t);
	if (t.doc)
		tiling_end(c, &t);
	for (int i = 0; i < c->n_doc; i++) {
		const struct store_doc *d = &c->doc[i];
		int want = d->n_tok == 0 ? 0 : !kv ? 1 : d->full_kv ? d->n_layer_global : 0;
		if (t.groups[i] != want)
			problem(c, "doc %lld: %s: rows for %d layers, expected %d (%lld tokens%s)",
				(long long)d->id, t.table, t.groups[i], want, (long long)d->n_tok,
				kv && !d->full_kv ? ", exact KV dropped" : "");
	}
	free(t.groups);
}

/* A PDF document's page map (none for a text document): a row that loads
 * and maps the whole stored text of text_len bytes. */
static void check_pages(struct check *c, int64_t doc, size_t text_len)
{
	char err[512];
	int64_t *start = NULL, len = 0;
	int page0 = 0, n_page = 0;
	int rc = store_doc_get_pages(c->s, doc, &page0, &n_page, &start, &len, err, sizeof err);

	if (rc && rc != SEKV_ENOTFOUND)
		problem(c, "%s", err);
	else if (rc == 0 && len != (int64_t)text_len)
		problem(c, "doc %lld: doc_pages: maps %lld bytes, the text has %zu", (long long)doc,
			(long long)len, text_len);
	free(start);
}

/* What the loaders say of one document: its text and page map, SWA rows,
 * memory and H2O's scores (ready), or its resume state (incomplete). */
static void check_doc(struct check *c, const struct store_doc *d)
{
	char err[512];
	char *text = NULL;
	size_t text_len = 0;
	int n_swa = 0, n_row = 0, rc, h2o_n = 0;
	int32_t *lid = NULL;
	uint16_t **k = NULL, **v = NULL;
	struct sekv_mem *m = NULL;
	struct store_ingest in;
	float *score = NULL;
	int ready = d->state == STORE_DOC_READY;

	if (store_doc_text_dup(c->s, d->id, &text, &text_len, err, sizeof err))
		problem(c, "%s", err);
	else
		check_pages(c, d->id, text_len);
	free(text);
	rc = store_ingest_get(c->s, d->id, &in, NULL, err, sizeof err);
	/* a ready part keeps its state as the continuation of a split ingest
	 * whose later parts are not yet begun */
	if (ready && rc != SEKV_ENOTFOUND && !(rc == 0 && in.next_pending))
		problem(c, "doc %lld: ready, yet a resume state (ingest_state) is left", (long long)d->id);
	else if (!ready && rc == 0 && in.next_pending)
		problem(c, "doc %lld: incomplete, yet its resume state says it is ready (next_pending)",
			(long long)d->id);
	else if (!ready && rc && rc != SEKV_ENOTFOUND)
		problem(c, "%s", err);
	/* SWA rows are written with every chunk; an incomplete document from
	 * before resume states may have none yet */
	if (d->n_tok > 0 && (ready || rc == 0)) {
		rc = store_doc_get_swa(c->s, d->id, &n_swa, &lid, &n_row, &k, &v, err, sizeof err);
		if (rc)
			problem(c, "%s", err);
		store_swa_free(n_swa, lid, k, v);
	}
	if (!ready) {
		if (!d->full_kv)
			problem(c, "doc %lld: incomplete, yet its exact KV (which its resume needs) is "
				"marked dropped", (long long)d->id);
		return;
	}
	if ((rc = store_doc_get_mem(c->s, d->id, &m, err, sizeof err)))
		problem(c, "%s", err);
	else if (m->n_tok > d->n_tok)
		problem(c, "doc %lld: mem: %d tokens, the document has %lld", (long long)d->id,
			m->n_tok, (long long)d->n_tok);
	sekv_mem_free(m);
	rc = store_doc_get_h2o(c->s, d->id, &score, &h2o_n, err, sizeof err);
	if (rc && rc != SEKV_ENOTFOUND)
		problem(c, "%s", err);
	free(score);
}

/* Sessions: turns numbered 0..n_turn-1 in time order, last_used not before
 * a turn; columns id, n_turn, created, last_used, turns, min idx, max idx,
 * whether created is ordered, last turn's created. */
static void session_row(struct check *c, sqlite3_stmt *st, void *arg)
{
	long long id = sqlite3_column_int64(st, 0), n_turn = sqlite3_column_int64(st, 1);
	long long cnt = sqlite3_column_int64(st, 4), lo = sqlite3_column_int64(st, 5);
	long long hi = sqlite3_column_int64(st, 6), unordered = sqlite3_column_int64(st, 7);
	double created = sqlite3_column_double(st, 2), last = sqlite3_column_double(st, 3);
	double last_turn = sqlite3_column_double(st, 8);

	(void)arg;
	if (cnt != n_turn || (cnt && (lo != 0 || hi != cnt - 1)))
		problem(c, "session %lld: turns: %lld rows numbered %lld..%lld, n_turn %lld", id, cnt,
			lo, hi, n_turn);
	if (unordered)
		problem(c, "session %lld: turns: %lld asked before the turn before them", id, unordered);
	if (last < created || (cnt && last < last_turn))
		problem(c, "session %lld: last used %.0f, before its creation or last turn", id, last);
}

static void evidence_row(struct check *c, sqlite3_stmt *st, void *arg)
{
	(void)arg;
	problem(c, "session %lld: turn %lld: evidence %lld: bytes [%lld, %lld) outside the "
		"document's %lld", (long long)sqlite3_column_int64(st, 0),
		(long long)sqlite3_column_int64(st, 1), (long long)sqlite3_column_int64(st, 2),
		(long long)sqlite3_column_int64(st, 3), (long long)sqlite3_column_int64(st, 4),
		(long long)sqlite3_column_int64(st, 5));
}

/* Each session's KV: loads (shapes, slices following each other and the
 * document's memory, sliding-window rows ending where the memory does)
 * and joins the document's memory. */
static void check_session_kv(struct check *c)
{
	struct store_session *v = NULL;
	char err[512];
	int n = 0;

	if (store_session_list(c->s, -1, &v, &n, err, sizeof err)) {
		problem(c, "sessions: %s", err);
		return;
	}
	for (int i = 0; i < n; i++) {
		struct store_session_kv kv;
		struct sekv_mem *dm = NULL, *m = NULL;
		if (v[i].kv_turns > v[i].n_turn)
			problem(c, "session %lld: KV of %d turns, %d asked", (long long)v[i].id,
				v[i].kv_turns, v[i].n_turn);
		if (store_session_get_kv(c->s, v[i].id, &kv, err, sizeof err)) {
			problem(c, "%s", err);
			continue;
		}
		if ((kv.n_part > 0) != (v[i].kv_turns > 0))
			problem(c, "session %lld: KV of %d turns in %d slices", (long long)v[i].id,
				v[i].kv_turns, kv.n_part);
		else if (kv.n_part && store_doc_get_mem(c->s, v[i].doc, &dm, err, sizeof err))
			problem(c, "session %lld: %s", (long long)v[i].id, err);
		else if (kv.n_part && sekv_mem_join(&m, dm, kv.n_part,
						     (const struct sekv_mem *const *)kv.part, kv.pos0))
			problem(c, "session %lld: its memory's slices do not follow document %lld's memory",
				(long long)v[i].id, (long long)v[i].doc);
		sekv_mem_free(m);
		sekv_mem_free(dm);
		store_session_kv_free(&kv);
	}
	free(v);
}

static void check_sessions(struct check *c)
{
	check_session_kv(c);
	each_row(c, "SELECT s.id, s.n_turn, s.created, s.last_used, COUNT(t.idx), MIN(t.idx),"
		 " MAX(t.idx), (SELECT COUNT(*) FROM turns a JOIN turns b ON b.session = a.session"
		 "  AND b.idx = a.idx + 1 WHERE a.session = s.id AND b.created < a.created),"
		 " MAX(t.created) FROM sessions s LEFT JOIN turns t ON t.session = s.id"
		 " GROUP BY s.id ORDER BY s.id", session_row, NULL);
	each_row(c, "SELECT e.session, e.idx, e.rank, e.start, e.end,"
		 " length(CAST(x.text AS BLOB)) FROM turn_evidence e"
		 " JOIN sessions s ON s.id = e.session JOIN doc_text x ON x.doc = s.doc"
		 " WHERE e.rank < 1 OR e.start < 0 OR e.end <= e.start"
		 " OR e.end > length(CAST(x.text AS BLOB)) ORDER BY e.session, e.idx, e.rank",
		 evidence_row, NULL);
}

int store_check(struct store *s, store_check_fn fn, void *ud, int *n_problem,
		char *err, size_t errlen)
{
	struct check c = { .s = s, .fn = fn, .ud = ud };
	int rc;

	*n_problem = 0;
	each_row(&c, "PRAGMA integrity_check", integrity_row, NULL);
	each_row(&c, "PRAGMA foreign_key_check", fk_row, NULL);
	if ((rc = store_doc_list(s, &c.doc, &c.n_doc, err, errlen))) {
		/* a documents table this broken leaves nothing to walk */
		problem(&c, "documents: %s", err);
		*n_problem = c.n;
		return 0;
	}
	check_tiling(&c, 0);
	check_tiling(&c, 1);
	for (int i = 0; i < c.n_doc; i++)
		check_doc(&c, &c.doc[i]);
	check_sessions(&c);
	free(c.doc);
	*n_problem = c.n;
	return 0;
}
