/* test_store_session.c - sessions, turns and their evidence in the library
 * (store/store_session.c): round trips, missing parents, cascades from a
 * deleted document or session, a failing write at every step leaving no
 * partial turn, and rows a damaged file could hold.
 */
#include "test.h"
#include "store_fixtures.h"

#include "engine/base/err.h"
#include "engine/sekv/sekv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A document of 40 random tokens in a fresh library at path; NULL (and
 * the test failed) when that cannot be made. */
static struct store *open_with_doc(struct test_ctx *t, const char *name, const char **path,
				   struct fixture *f)
{
	struct store *s = NULL;
	char err[512];

	*path = fixture_db_path(name);
	memset(f, 0, sizeof *f);
	if (store_open(&s, *path, err, sizeof err) == 0 &&
	    fixture_make(s, f, 7, "doc", 2, 1, 2, 8, 40, 16, err, sizeof err) == 0)
		return s;
	T_FAIL(t, "%s", err);
	store_close(s);
	fixture_free(f);
	return NULL;
}

static struct store_turn make_turn(const char *q, const char *a, struct store_evidence_row *ev,
				   int n_ev)
{
	struct store_turn t = { .question = (char *)q, .answer = (char *)a, .n_gen = 5,
				.n_ev = n_ev, .ev = ev };

	snprintf(t.stopped, sizeof t.stopped, "stop");
	snprintf(t.heads, sizeof t.heads, "%s", n_ev ? "5:1,11:2" : "");
	return t;
}

/* Two sessions, three turns: what is read back is what was written. */
static void session_turns_round_trip(struct test_ctx *t)
{
	struct fixture f;
	const char *path;
	struct store *s = open_with_doc(t, "ses_rt", &path, &f);
	/* the second peak lies outside its passage: stored as the passage start */
	struct store_evidence_row ev[2] = { { 1, 10, 90, 0.25, 47 }, { 2, 0, 10, -0.5, 10 } };
	struct store_turn *rt = NULL;
	struct store_session *list = NULL, one;
	char err[512];
	int64_t a = 0, b = 0;
	int n = 0;

	if (!s)
		return;
	T_CHECKF(t, store_session_create(s, f.doc.id, "sekv", &a, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, store_session_create(s, f.doc.id, "full", &b, err, sizeof err) == 0, "%s", err);
	struct store_turn t0 = make_turn("Who?", "Mira \xc3\x96lsen", ev, 2);
	struct store_turn t1 = make_turn("When?\nReally?", "", NULL, 0);
	snprintf(t1.stopped, sizeof t1.stopped, "length");
	T_CHECKF(t, store_session_add_turn(s, a, &t0, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, store_session_add_turn(s, a, &t1, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, store_session_add_turn(s, b, &t0, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, store_session_turns_dup(s, a, &rt, &n, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, n == 2, "%d turns", n);
	if (n == 2) {
		T_CHECK(t, rt[0].idx == 0 && !strcmp(rt[0].question, "Who?") &&
			!strcmp(rt[0].answer, "Mira \xc3\x96lsen") && !strcmp(rt[0].stopped, "stop") &&
			rt[0].n_gen == 5 && !strcmp(rt[0].heads, "5:1,11:2") && rt[0].n_ev == 2);
		T_CHECK(t, rt[0].ev[0].rank == 1 && rt[0].ev[0].start == 10 && rt[0].ev[0].end == 90 &&
			rt[0].ev[0].score == 0.25 && rt[0].ev[1].score == -0.5 &&
			rt[0].ev[0].peak == 47 && rt[0].ev[1].peak == 0);
		T_CHECK(t, rt[1].idx == 1 && !strcmp(rt[1].question, "When?\nReally?") &&
			!strcmp(rt[1].answer, "") && !strcmp(rt[1].stopped, "length") &&
			rt[1].heads[0] == 0 && rt[1].n_ev == 0 && rt[1].ev == NULL);
	}
	store_turns_free(rt, n);
	T_CHECKF(t, store_session_get(s, a, &one, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, one.id == a && one.doc == f.doc.id && one.n_turn == 2 && !strcmp(one.kv, "sekv") &&
		!strcmp(one.doc_title, "doc") && one.last_used >= one.created);
	T_CHECKF(t, store_session_list(s, -1, &list, &n, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, n == 2 && list[0].id == a && list[1].id == b && list[1].n_turn == 1);
	free(list);
	T_CHECKF(t, store_session_list(s, f.doc.id + 1, &list, &n, err, sizeof err) == 0 && n == 0 &&
		 list == NULL, "%s", err);
	store_close(s);
	fixture_free(&f);
}

/* Parents that are not there are refused by name; deleting a session
 * removes its turns and evidence, deleting the document its sessions. */
static void session_missing_parents_and_cascades(struct test_ctx *t)
{
	struct fixture f;
	const char *path;
	struct store *s = open_with_doc(t, "ses_cascade", &path, &f);
	struct store_evidence_row ev[1] = { { 1, 0, 5, 0.1, 0 } };
	struct store_session one;
	char err[512];
	int64_t a = 0, b = 0, none = 0;

	if (!s)
		return;
	struct store_turn t0 = make_turn("q", "a", ev, 1);
	T_CHECK(t, store_session_create(s, f.doc.id + 100, "full", &none, err, sizeof err) == SEKV_ENOTFOUND);
	T_CHECK(t, store_session_add_turn(s, 12345, &t0, err, sizeof err) == SEKV_ENOTFOUND &&
		strstr(err, "session 12345"));
	T_CHECK(t, store_session_get(s, 12345, &one, err, sizeof err) == SEKV_ENOTFOUND);
	T_CHECK(t, store_session_delete(s, 12345, err, sizeof err) == SEKV_ENOTFOUND);
	T_CHECK(t, store_session_create(s, f.doc.id, "full", &a, err, sizeof err) == 0 &&
		store_session_create(s, f.doc.id, "full", &b, err, sizeof err) == 0 &&
		store_session_add_turn(s, a, &t0, err, sizeof err) == 0 &&
		store_session_add_turn(s, b, &t0, err, sizeof err) == 0);
	T_CHECKF(t, store_session_delete(s, a, err, sizeof err) == 0, "%s", err);
	store_close(s);
	T_CHECK(t, fixture_raw_int(path, "SELECT COUNT(*) FROM turns") == 1);
	T_CHECK(t, fixture_raw_int(path, "SELECT COUNT(*) FROM turn_evidence") == 1);
	T_CHECK(t, store_open(&s, path, err, sizeof err) == 0);
	T_CHECKF(t, store_doc_delete(s, f.doc.id, err, sizeof err) == 0, "%s", err);
	store_close(s);
	T_CHECK(t, fixture_raw_int(path, "SELECT COUNT(*) FROM sessions") == 0);
	T_CHECK(t, fixture_raw_int(path, "SELECT COUNT(*) FROM turns") == 0);
	T_CHECK(t, fixture_raw_int(path, "SELECT COUNT(*) FROM turn_evidence") == 0);
	fixture_free(&f);
}

/* A write that fails at its n-th step, for every n: the turn is stored
 * whole (with all its evidence and the session advanced) or not at all. */
static void session_add_turn_fault_keeps_whole_turns(struct test_ctx *t)
{
	struct fixture f;
	const char *path;
	struct store *s = open_with_doc(t, "ses_fault", &path, &f);
	struct store_evidence_row ev[3] = { { 1, 0, 5, 0.1, 0 }, { 2, 5, 9, 0.05, 5 }, { 3, 9, 20, 0, 9 } };
	char err[512];
	int64_t a = 0;
	int stored = 0, failed = 0;

	if (!s)
		return;
	struct store_turn t0 = make_turn("q", "a", ev, 3);
	T_CHECK(t, store_session_create(s, f.doc.id, "full", &a, err, sizeof err) == 0);
	for (int n = 1; n <= 12; n++) {
		store_fault_step(s, n);
		int rc = store_session_add_turn(s, a, &t0, err, sizeof err);
		store_fault_step(s, 0);
		stored += rc == 0;
		failed += rc != 0;
	}
	store_close(s);
	T_CHECKF(t, failed >= 5 && stored >= 1, "failed %d stored %d", failed, stored);
	T_CHECK(t, fixture_raw_int(path, "SELECT n_turn FROM sessions") == stored);
	T_CHECK(t, fixture_raw_int(path, "SELECT COUNT(*) FROM turns") == stored);
	T_CHECK(t, fixture_raw_int(path, "SELECT COUNT(*) FROM turn_evidence") == 3 * stored);
	T_CHECK(t, fixture_raw_int(path, "SELECT MAX(idx) FROM turns") == stored - 1);
	fixture_free(&f);
}

/* Rows a damaged or hand-edited file could hold are refused by name. */
/* The end of the last span of m starting before pos (0 when none). */
static int span_cut(const struct sekv_mem *m, int pos)
{
	int c = 0;

	for (int i = 0; i < m->n_span && m->span[i].start < pos; i++)
		c = m->span[i].start + m->span[i].len;
	return c;
}

/* A session's KV (a memory grown past its document's, kept as slices, and
 * its newest sliding-window rows) written and read back: the document's
 * memory joined with the slices read is the grown memory bit for bit;
 * deleting the session deletes its KV. */
static void session_kv_round_trip(struct test_ctx *t)
{
	struct fixture f = {0};
	struct store *s = NULL;
	struct sekv_mem *m = fixture_synth_mem(5, 300, 2, 4, 2, 16, 8, 20);
	struct sekv_mem *doc = NULL, *part = NULL, *open = NULL, *dm = NULL, *back = NULL;
	struct store_session_kv kv = {0};
	struct store_session ss;
	uint16_t *swk[2], *swv[2];
	uint64_t rnd = 11;
	char err[512], why[128];
	int64_t id = 0;
	const char *path = fixture_db_path("ses_kv");

	T_CHECK(t, m != NULL);
	int cut0 = span_cut(m, 150), cut1 = span_cut(m, 230);
	T_CHECK(t, cut0 > 0 && cut1 > cut0);
	T_CHECK(t, sekv_mem_slice_dup(&doc, m, 0, cut0) == 0 &&
		   sekv_mem_slice_dup(&part, m, cut0, cut1) == 0 &&
		   sekv_mem_slice_dup(&open, m, cut1, 300) == 0);
	for (int l = 0; l < 2; l++) {
		swk[l] = malloc(20 * 2 * 16 * 2);
		swv[l] = malloc(20 * 2 * 16 * 2);
		fixture_rnd_fill(&rnd, swk[l], 20 * 2 * 16 * 2);
		fixture_rnd_fill(&rnd, swv[l], 20 * 2 * 16 * 2);
	}
	T_CHECKF(t, store_open(&s, path, err, sizeof err) == 0 &&
		     fixture_with_mem(s, &f, doc, 3, 0.1, err, sizeof err) == 0 &&
		     store_session_create(s, f.doc.id, "sekv", &id, err, sizeof err) == 0, "%s", err);
	struct store_session_mem w = { .part_idx = 0, .part_pos0 = cut0, .part = part,
		.open_pos0 = cut1, .open = open, .h_next = 1.5f, .kv_turns = 1, .swa_pos0 = 280,
		.swa_n = 20, .swa_n_layer = 2, .swa_k = (const uint16_t *const *)swk,
		.swa_v = (const uint16_t *const *)swv, .swa_window = 16 };
	T_CHECKF(t, store_session_put_mem(s, id, &w, err, sizeof err) == 0, "%s", err);
	/* the open end is replaced, not added */
	T_CHECKF(t, store_session_put_mem(s, id, &w, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, store_session_get_kv(s, id, &kv, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, kv.n_part == 2 && kv.pos0[0] == cut0 && kv.pos0[1] == cut1 && kv.h_next == 1.5f);
	T_CHECK(t, kv.kv_turns == 1 && kv.swa_pos0 == 280 && kv.swa_n == 20 && kv.swa_n_layer == 2);
	T_CHECK(t, !memcmp(kv.swa_k, swk[0], 20 * 64) && !memcmp(kv.swa_v + 20 * 32, swv[1], 20 * 64));
	T_CHECK(t, store_session_get(s, id, &ss, err, sizeof err) == 0 && ss.n_tok == 300 - cut0);
	T_CHECKF(t, store_doc_get_mem(s, f.doc.id, &dm, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, sekv_mem_join(&back, dm, kv.n_part, (const struct sekv_mem *const *)kv.part,
				 kv.pos0) == 0);
	T_CHECKF(t, fixture_mem_cmp(back, m, why, sizeof why) == 0, "joined vs grown: %s", why);
	/* slices out of place are refused */
	w.open_pos0++;
	T_CHECK(t, store_session_put_mem(s, id, &w, err, sizeof err) == SEKV_EINVAL);
	T_CHECK(t, store_session_delete(s, id, err, sizeof err) == 0);
	store_close(s);
	s = NULL;
	T_CHECK(t, fixture_raw_int(path, "SELECT (SELECT count(*) FROM session_part) + (SELECT count(*)"
				   " FROM session_part_layer) + (SELECT count(*) FROM session_swa)") == 0);
	for (int l = 0; l < 2; l++) {
		free(swk[l]);
		free(swv[l]);
	}
	store_session_kv_free(&kv);
	sekv_mem_free(back);
	sekv_mem_free(dm);
	sekv_mem_free(doc);
	sekv_mem_free(part);
	sekv_mem_free(open);
	sekv_mem_free(m);
	fixture_free(&f);
}

static void session_bad_rows_refused(struct test_ctx *t)
{
	struct fixture f;
	const char *path;
	struct store *s = open_with_doc(t, "ses_bad", &path, &f);
	struct store_evidence_row ev[1] = { { 1, 0, 5, 0.1, 0 } };
	struct store_turn *rt = NULL;
	char err[512], sql[256];
	int64_t a = 0;
	int n = 0;

	if (!s)
		return;
	struct store_turn t0 = make_turn("q", "a", ev, 1);
	T_CHECK(t, store_session_create(s, f.doc.id, "full", &a, err, sizeof err) == 0 &&
		store_session_add_turn(s, a, &t0, err, sizeof err) == 0);
	store_close(s);
	snprintf(sql, sizeof sql, "UPDATE turn_evidence SET start = 9 WHERE session = %lld", (long long)a);
	T_CHECK(t, fixture_raw_exec(path, sql) == 0);
	T_CHECK(t, store_open(&s, path, err, sizeof err) == 0);
	T_CHECK(t, store_session_turns_dup(s, a, &rt, &n, err, sizeof err) == SEKV_EFORMAT &&
		rt == NULL && n == 0 && strstr(err, "[9, 5)"));
	store_close(s);
	snprintf(sql, sizeof sql, "UPDATE turn_evidence SET start = 0;"
		 " UPDATE turns SET idx = 3 WHERE session = %lld", (long long)a);
	T_CHECK(t, fixture_raw_exec(path, sql) == 0);
	T_CHECK(t, store_open(&s, path, err, sizeof err) == 0);
	T_CHECK(t, store_session_turns_dup(s, a, &rt, &n, err, sizeof err) == SEKV_EFORMAT && rt == NULL);
	store_close(s);
	fixture_free(&f);
}

const struct test_case test_store_session[] = {
	{ "store_session_turns_round_trip", session_turns_round_trip },
	{ "store_session_missing_parents_and_cascades", session_missing_parents_and_cascades },
	{ "store_session_add_turn_fault_keeps_whole_turns", session_add_turn_fault_keeps_whole_turns },
	{ "store_session_bad_rows_refused", session_bad_rows_refused },
	{ "store_session_kv_round_trip", session_kv_round_trip },
	{ NULL, NULL },
};
