/* test_store_durable.c - the library's durability without the model: the
 * resume state of an ingest (round trip, checked against the document,
 * gone once ready; a split ingest's part, parts, limit and text
 * fingerprint, and a version 11 row migrated as a single part; a part's
 * state kept as the continuation of its split ingest once ready, until the
 * next part takes it up), `sekv check` (store_check and the CLI) on a good
 * library and on planted corruption, file modes under umask 0, deleting
 * an incomplete document on a full file system (a small tmpfs; skipped
 * where mounting is not allowed), and `sekv ls`/`rm` of an incomplete
 * document and of a newer library through the CLI, and the refusals of
 * `sekv rm --only-full-kv`.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "engine/base/err.h"
#include "store/store.h"
#include "tests/store_fixtures.h"
#include "tests/test.h"

#define CHECK_TITLE "a sample library document text"

/* A library at path with one ready document (memory, SWA rows), one
 * incomplete one with a resume state (part 2 of 3 of a split ingest at
 * 400 tokens) and a page map of two pages, and a session of two turns
 * with evidence. 0 or the failing code. */
static int make_library(const char *path, struct fixture *ready, struct fixture *part,
			char *err, size_t errlen)
{
	struct sekv_mem *m = fixture_synth_mem(71, 300, 2, 4, 2, 16, 8, 40);
	struct store_evidence_row ev[1] = { { 1, 0, 4, 0.5, 0 } }; /* inside "memdoc" */
	struct store_turn turn = { .question = "Who?", .answer = "Mira", .stopped = "stop",
				   .n_gen = 2, .n_ev = 1, .ev = ev };
	struct store_ingest in = { .n_tok_total = 900, .n_batch = 64, .alpha = 1, .n_probe = 2,
				   .part = 1, .n_part = 3, .part_limit = 400,
				   .text_fp = "0123456789abcdef" };
	const int64_t page_start[2] = { 0, 9 }; /* its text is CHECK_TITLE */
	float probe[2 * 900] = { 0 };
	struct store *s = NULL;
	int64_t ses = 0;
	int rc = m ? store_open(&s, path, err, errlen) : SEKV_ENOMEM;

	if (rc == 0)
		rc = fixture_with_mem(s, ready, m, 72, 0.1, err, errlen);
	if (rc == 0)
		rc = store_session_create(s, ready->doc.id, "sekv", &ses, err, errlen);
	for (int i = 0; rc == 0 && i < 2; i++)
		rc = store_session_add_turn(s, ses, &turn, err, errlen);
	if (rc == 0)
		rc = fixture_make(s, part, 73, CHECK_TITLE, 2, 2, 2, 16, 200, 64, err, errlen);
	if (rc == 0)
		rc = fixture_swa(s, part, 74, 16, err, errlen);
	if (rc == 0)
		rc = store_ingest_begin(s, part->doc.id, &in, err, errlen);
	if (rc == 0)
		rc = store_doc_put_pages(s, part->doc.id, 3, 2, page_start, (int64_t)strlen(CHECK_TITLE),
					 err, errlen);
	for (int i = 0; i < 2 * 900; i++)
		probe[i] = (float)i;
	if (rc == 0)
		rc = store_ingest_advance(s, part->doc.id, 2.5f, probe, 900, err, errlen);
	store_close(s);
	sekv_mem_free(m);
	return rc;
}

static void collect(void *ud, const char *problem)
{
	char *buf = ud;
	size_t n = strlen(buf);
	snprintf(buf + n, 4096 - n, "%s\n", problem);
}

/* store_check on the library at path: the problems, one a line, in buf [4096]. */
static int check_library(const char *path, char *buf, char *err, size_t errlen)
{
	struct store *s = NULL;
	int n = -1, rc = store_open(&s, path, err, errlen);

	buf[0] = 0;
	if (rc == 0)
		rc = store_check(s, collect, buf, &n, err, errlen);
	store_close(s);
	return rc ? rc : n;
}

/* The resume state of document doc in the library at path into *in after
 * sql runs on it: store_ingest_get's code. */
static int ingest_state_after(const char *path, const char *sql, int64_t doc,
			      struct store_ingest *in, char *err, size_t errlen)
{
	struct store *s = NULL;
	int rc = fixture_raw_exec(path, sql) ? SEKV_EDB : store_open(&s, path, err, errlen);

	if (rc == 0)
		rc = store_ingest_get(s, doc, in, NULL, err, errlen);
	store_close(s);
	return rc;
}

static void store_ingest_state_round_trip(struct test_ctx *t)
{
	const char *path = fixture_db_path("ingest_state");
	struct fixture a = {0}, b = {0};
	struct store_ingest in;
	struct store *s = NULL;
	float *probe = NULL;
	char err[512];

	int rc = make_library(path, &a, &b, err, sizeof err);
	int64_t part = b.doc.id;
	if (rc == 0)
		rc = store_open(&s, path, err, sizeof err);
	if (rc == 0)
		rc = store_ingest_get(s, part, &in, &probe, err, sizeof err);
	int ok = rc == 0 && in.n_tok_total == 900 && in.n_batch == 64 && in.pos_end == 200 &&
		 in.h_next == 2.5f && in.n_probe == 2 && probe && probe[199] == 199.0f &&
		 probe[200] == 900.0f && probe[399] == 1099.0f && in.part == 1 && in.n_part == 3 &&
		 in.part_limit == 400 && in.next_pending == 0 && !strcmp(in.text_fp, "0123456789abcdef");
	free(probe);
	int r_ready = store_ingest_get(s, a.doc.id, &in, NULL, NULL, 0);
	store_close(s);
	fixture_free(&a);
	fixture_free(&b);
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECK(t, ok);
	T_CHECK(t, r_ready == SEKV_ENOTFOUND);
	/* a chunk committed without advancing the state is caught */
	rc = ingest_state_after(path, "UPDATE documents SET n_tok = n_tok + 1 WHERE state = 0", part,
				&in, err, sizeof err);
	T_CHECKF(t, rc == SEKV_EFORMAT && strstr(err, "pos_end"), "rc %d: %s", rc, err);
}

/* A split ingest's place (part, n_part, part_limit) is refused out of
 * range when written and when read; a row of a version 11 library (before
 * those columns) migrates as a single part, its other fields kept. */
static void store_ingest_state_split_fields(struct test_ctx *t)
{
	static const struct store_ingest bad[] = {
		{ .n_tok_total = 9, .n_batch = 1, .part = 0, .n_part = 0 },
		{ .n_tok_total = 9, .n_batch = 1, .part = 3, .n_part = 3 },
		{ .n_tok_total = 9, .n_batch = 1, .part = -1, .n_part = 3 },
		{ .n_tok_total = 9, .n_batch = 1, .part = 0, .n_part = 2, .part_limit = -5 },
		{ .n_tok_total = 9, .n_batch = 1, .part = 0, .n_part = 2, .text_fp = "0123" },
		{ .n_tok_total = 9, .n_batch = 1, .part = 0, .n_part = 2, .text_fp = "0123456789abcdeX" },
	};
	const char *path = fixture_db_path("ingest_state_split");
	struct fixture a = {0}, b = {0};
	struct store_ingest in;
	struct store *s = NULL;
	char err[512];
	int refused = 0;

	int rc = make_library(path, &a, &b, err, sizeof err);
	int64_t part = b.doc.id;
	if (rc == 0)
		rc = store_open(&s, path, err, sizeof err);
	for (size_t i = 0; rc == 0 && i < sizeof bad / sizeof bad[0]; i++)
		refused += store_ingest_begin(s, part, &bad[i], NULL, 0) == SEKV_EINVAL;
	store_close(s);
	s = NULL;
	fixture_free(&a);
	fixture_free(&b);
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECKF(t, refused == 6, "%d of 6 bad places refused", refused);
	rc = ingest_state_after(path, "UPDATE ingest_state SET part = 3", part, &in, err, sizeof err);
	T_CHECKF(t, rc == SEKV_EFORMAT && strstr(err, "part 3 of 3"), "rc %d: %s", rc, err);
	/* back to version 11: the columns migrations 12, 13 and 14 add go */
	rc = ingest_state_after(path, "ALTER TABLE ingest_state DROP COLUMN part; ALTER TABLE ingest_state DROP COLUMN n_part;"
		" ALTER TABLE ingest_state DROP COLUMN part_limit;"
		" ALTER TABLE ingest_state DROP COLUMN keep_full_kv;"
		" ALTER TABLE ingest_state DROP COLUMN next_pending;"
		" ALTER TABLE ingest_state DROP COLUMN text_fp;"
		" ALTER TABLE ingest_state DROP COLUMN rank_energy_v;"
		" ALTER TABLE ingest_state DROP COLUMN exact_below; ALTER TABLE mem DROP COLUMN rank_energy_v;"
		" ALTER TABLE documents DROP COLUMN full_kv; ALTER TABLE turn_evidence DROP COLUMN peak;"
		" ALTER TABLE session_part DROP COLUMN lm_len;"
		" PRAGMA user_version = 11", part, &in, err,
		sizeof err);
	int64_t ver = fixture_raw_int(path, "PRAGMA user_version");
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECKF(t, ver == 14, "user_version %lld after migration", (long long)ver);
	T_CHECKF(t, in.part == 0 && in.n_part == 1 && in.part_limit == 0 && in.keep_full_kv == 1 &&
		 in.n_tok_total == 900 && in.pos_end == 200 && in.n_probe == 2 && !in.next_pending &&
		 !in.text_fp[0], "migrated row: part %d "
		 "of %d, limit %d, keep_full_kv %d, %lld of %lld tokens", in.part, in.n_part,
		 in.part_limit, in.keep_full_kv, (long long)in.pos_end, (long long)in.n_tok_total);
}

/* The incomplete part (2 of 3) turning ready with its state marked as the
 * continuation (store_ingest_pend, then store_doc_put_mem in one
 * transaction) keeps the state, probe dropped; check passes it, and flags
 * it once unmarked (a stale state) or marked on an incomplete document;
 * store_ingest_end deletes it once, and nothing but such a part is marked. */
static void store_ingest_continuation_kept_until_next_part(struct test_ctx *t)
{
	const char *path = fixture_db_path("ingest_continuation");
	struct sekv_mem *m = fixture_synth_mem(75, 200, 2, 4, 2, 16, 8, 40);
	struct fixture a = {0}, b = {0};
	struct store_ingest in = {0};
	struct store *s = NULL;
	struct store_doc d = {0};
	char err[512], buf[4096];

	int rc = m ? make_library(path, &a, &b, err, sizeof err) : SEKV_ENOMEM;
	int64_t part = b.doc.id, other = a.doc.id;
	fixture_free(&a);
	fixture_free(&b);
	if (rc == 0)
		rc = store_open(&s, path, err, sizeof err);
	int lone = rc == 0 ? store_ingest_pend(s, other, NULL, 0) : 0;
	if (rc == 0 && !(rc = store_tx_begin(s, err, sizeof err)) &&
	    ((rc = store_ingest_pend(s, part, err, sizeof err)) ||
	     (rc = store_doc_put_mem(s, part, m, 0.1, err, sizeof err)) ||
	     (rc = store_tx_commit(s, err, sizeof err))))
		store_tx_rollback(s);
	if (rc == 0)
		rc = store_doc_get(s, part, &d, err, sizeof err);
	if (rc == 0)
		rc = store_ingest_get(s, part, &in, NULL, err, sizeof err);
	store_close(s);
	s = NULL;
	sekv_mem_free(m);
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECKF(t, lone == SEKV_EINVAL, "a document without a state marked: %d", lone);
	T_CHECKF(t, d.state == STORE_DOC_READY && in.next_pending == 1 && in.n_probe == 0 &&
		 in.part == 1 && in.n_part == 3 && in.pos_end == 200, "state %d, next_pending %d, "
		 "n_probe %d, part %d of %d", d.state, in.next_pending, in.n_probe, in.part, in.n_part);
	int n = check_library(path, buf, err, sizeof err);
	T_CHECKF(t, n == 0, "%d problems with a continuation: %s", n, buf);
	T_CHECK(t, fixture_raw_exec(path, "UPDATE ingest_state SET next_pending = 0") == 0);
	n = check_library(path, buf, err, sizeof err);
	T_CHECKF(t, n == 1 && strstr(buf, "ready, yet a resume state"), "stale state: %d: %s", n, buf);
	T_CHECK(t, fixture_raw_exec(path, "UPDATE ingest_state SET next_pending = 1; UPDATE "
				    "documents SET state = 0 WHERE id IN (SELECT doc FROM ingest_state)") == 0);
	n = check_library(path, buf, err, sizeof err);
	T_CHECKF(t, n >= 1 && strstr(buf, "incomplete, yet its resume state"), "%d: %s", n, buf);
	T_CHECK(t, fixture_raw_exec(path, "UPDATE documents SET state = 1") == 0);
	rc = store_open(&s, path, err, sizeof err);
	int end1 = rc == 0 ? store_ingest_end(s, part, err, sizeof err) : rc;
	int end2 = rc == 0 ? store_ingest_end(s, part, NULL, 0) : rc;
	int gone = rc == 0 ? store_ingest_get(s, part, &in, NULL, NULL, 0) : rc;
	store_close(s);
	T_CHECKF(t, end1 == 0 && end2 == SEKV_ENOTFOUND && gone == SEKV_ENOTFOUND, "end %d, again "
		 "%d, then get %d: %s", end1, end2, gone, err);
	n = check_library(path, buf, err, sizeof err);
	T_CHECKF(t, n == 0, "%d problems once ended: %s", n, buf);
}

static void store_check_passes_good_library(struct test_ctx *t)
{
	const char *path = fixture_db_path("check_good");
	struct fixture a = {0}, b = {0};
	char err[512], buf[4096];

	int rc = make_library(path, &a, &b, err, sizeof err);
	fixture_free(&a);
	fixture_free(&b);
	T_CHECKF(t, rc == 0, "%s", err);
	int n = check_library(path, buf, err, sizeof err);
	T_CHECKF(t, n == 0, "%d problems: %s%s", n, buf, n < 0 ? err : "");
}

/* Each planted fault, in a fresh library, is found and named. */
static void store_check_names_planted_corruption(struct test_ctx *t)
{
	static const struct { const char *sql, *want; } plant[] = {
		{ "DELETE FROM mem_layer WHERE layer = 1", "mem_layer" },
		{ "UPDATE mem_layer SET fac_u = substr(fac_u, 3) WHERE layer = 0", "fac_u" },
		{ "UPDATE documents SET n_tok = n_tok + 3 WHERE state = 1", "covers" },
		{ "UPDATE documents SET n_tok = n_tok - 1 WHERE state = 1", "chunk at" },
		{ "DELETE FROM kv_chunk WHERE layer = 1 AND pos0 = 0", "kv_chunk" },
		{ "UPDATE kv_chunk SET k = substr(k, 2) WHERE pos0 > 0", "blobs" },
		{ "UPDATE tok_chunk SET n = n + 1 WHERE pos0 = 0", "tok_chunk" },
		{ "DELETE FROM swa WHERE idx = 1", "swa" },
		{ "DELETE FROM doc_text", "doc_text" },
		{ "UPDATE ingest_state SET pos_end = 3", "pos_end" },
		{ "UPDATE ingest_state SET probe = x'00'", "probe" },
		{ "UPDATE ingest_state SET n_part = 0", "part 1 of 0" },
		{ "UPDATE ingest_state SET text_fp = 'x'", "text_fp" },
		{ "UPDATE doc_pages SET text_len = text_len + 4", "doc_pages" },
		{ "UPDATE doc_pages SET start = x'00'", "doc_pages" },
		{ "UPDATE turns SET idx = 7 WHERE idx = 1", "session" },
		{ "UPDATE turns SET created = 0 WHERE idx = 1", "before the turn" },
		{ "UPDATE sessions SET last_used = 1", "last used" },
		{ "UPDATE turn_evidence SET end = 5000", "evidence" },
		{ "PRAGMA foreign_keys = OFF; DELETE FROM sessions", "turns" },
	};
	struct fixture a = {0}, b = {0};
	char err[512], buf[4096];

	for (size_t i = 0; i < sizeof plant / sizeof plant[0]; i++) {
		const char *path = fixture_db_path("check_bad");
		int rc = make_library(path, &a, &b, err, sizeof err);
		fixture_free(&a);
		fixture_free(&b);
		T_CHECKF(t, rc == 0, "%s", err);
		T_CHECKF(t, fixture_raw_exec(path, plant[i].sql) == 0, "%s", plant[i].sql);
		int n = check_library(path, buf, err, sizeof err);
		T_CHECKF(t, n > 0 && strstr(buf, plant[i].want), "%s: %d problems: %s", plant[i].sql, n, buf);
	}
}

/* `sekv check` exits 0 on a good library, 1 naming the problem on a bad
 * one; `sekv ls` shows the incomplete document as such; `sekv rm` deletes
 * it; a library of a newer schema is refused, versions named. */
static void cli_check_ls_rm_incomplete(struct test_ctx *t)
{
	char path[512], cmd[1536], err[512], want[64];
	struct fixture a = {0}, b = {0};
	int st1, st2, st3, st4, st5;

	snprintf(path, sizeof path, "%s", fixture_db_path("cli_check"));
	int rc = make_library(path, &a, &b, err, sizeof err);
	int64_t part = b.doc.id;
	fixture_free(&a);
	fixture_free(&b);
	T_CHECKF(t, rc == 0, "%s", err);
	snprintf(cmd, sizeof cmd, "%s check --db %s 2>&1", test_sekv_bin(), path);
	char *good = test_run_cmd(cmd, &st1);
	snprintf(cmd, sizeof cmd, "%s ls --db %s", test_sekv_bin(), path);
	char *ls = test_run_cmd(cmd, &st2);
	snprintf(want, sizeof want, "\n%lld\tincomplete\t200/900 tokens\t", (long long)part);
	int ls_ok = ls && st2 == 0 && strstr(ls, want) && strstr(ls, "\tready\t300 tokens\t") &&
		    strstr(ls, "\t" CHECK_TITLE "\n");
	free(ls);
	snprintf(cmd, sizeof cmd, "%s rm %lld --db %s 2>&1 && %s ls --db %s", test_sekv_bin(),
		 (long long)part, path, test_sekv_bin(), path);
	char *rm = test_run_cmd(cmd, &st3);
	int rm_ok = rm && st3 == 0 && !strstr(rm, "incomplete") && strstr(rm, "\tready\t");
	free(rm);
	fixture_raw_exec(path, "DELETE FROM mem_layer WHERE layer = 0");
	snprintf(cmd, sizeof cmd, "%s check --db %s 2>&1", test_sekv_bin(), path);
	char *bad = test_run_cmd(cmd, &st4);
	fixture_raw_exec(path, "PRAGMA user_version = 77");
	snprintf(cmd, sizeof cmd, "%s ls --db %s 2>&1", test_sekv_bin(), path);
	char *newer = test_run_cmd(cmd, &st5);
	int good_ok = good && st1 == 0 && strstr(good, ": ok");
	int bad_ok = bad && st4 == 1 && strstr(bad, "mem_layer") && strstr(bad, "1 problem");
	int newer_ok = newer && st5 == 1 && strstr(newer, "schema version 77 is newer than this build's");
	T_CHECKF(t, good_ok, "check of a good library (%d): %s", st1, good ? good : "");
	T_CHECKF(t, ls_ok, "ls (%d) does not show the incomplete document", st2);
	T_CHECKF(t, rm_ok, "rm of the incomplete document (%d)", st3);
	T_CHECKF(t, bad_ok, "check of a bad library (%d): %s", st4, bad ? bad : "");
	T_CHECKF(t, newer_ok, "newer library (%d): %s", st5, newer ? newer : "");
	free(good);
	free(bad);
	free(newer);
}

/* `sekv rm --only-full-kv --session ID` is a usage error (exit 2) that
 * deletes nothing, the usage naming --only-full-kv; a second
 * --only-full-kv of a document says it keeps no exact KV and deletes
 * nothing. */
static void cli_rm_only_full_kv_refusals(struct test_ctx *t)
{
	char path[512], cmd[1536], err[512];
	struct fixture a = {0}, b = {0};
	int st1 = -1, st2 = -1, st3 = -1;

	snprintf(path, sizeof path, "%s", fixture_db_path("cli_rm_full_kv"));
	int rc = make_library(path, &a, &b, err, sizeof err);
	long long ready = (long long)a.doc.id;
	fixture_free(&a);
	fixture_free(&b);
	T_CHECKF(t, rc == 0, "%s", err);
	snprintf(cmd, sizeof cmd, "%s rm --only-full-kv --session 1 --db %s 2>&1", test_sekv_bin(), path);
	char *ses = test_run_cmd(cmd, &st1);
	int64_t n_ses = fixture_raw_int(path, "SELECT count(*) FROM sessions");
	snprintf(cmd, sizeof cmd, "%s rm --only-full-kv %lld --db %s 2>&1", test_sekv_bin(), ready, path);
	char *first = test_run_cmd(cmd, &st2);
	char *again = test_run_cmd(cmd, &st3);
	int ses_ok = ses && st1 == 2 && strstr(ses, "usage: sekv rm [--only-full-kv] DOC...") && n_ses == 1;
	int first_ok = first && st2 == 0 && strstr(first, "exact KV deleted");
	int again_ok = again && st3 == 0 && strstr(again, "keeps no exact KV: nothing deleted") &&
		       !strstr(again, "freed");
	T_CHECKF(t, ses_ok, "rm --only-full-kv --session (%d, %lld sessions left): %.300s", st1,
		 (long long)n_ses, ses ? ses : "");
	T_CHECKF(t, first_ok, "rm --only-full-kv (%d): %.300s", st2, first ? first : "");
	T_CHECKF(t, again_ok, "rm --only-full-kv again (%d): %.300s", st3, again ? again : "");
	free(ses);
	free(first);
	free(again);
}

static int mode_of(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 ? (int)(st.st_mode & 07777) : -1;
}

/* Under umask 0 the library's directory is 0700 and its file, -wal and
 * -shm 0600: a user's documents are nobody else's. */
static void store_library_private_under_umask_0(struct test_ctx *t)
{
	char dir[512], path[600], aux[640], err[512];
	struct store *s = NULL;
	struct fixture f = {0};

	snprintf(dir, sizeof dir, "%s/private", test_tmpdir());
	snprintf(path, sizeof path, "%s/lib.db", dir);
	mode_t old = umask(0);
	int rc = store_open(&s, path, err, sizeof err);
	umask(old);
	if (rc == 0)
		rc = fixture_make(s, &f, 5, "p", 1, 1, 1, 8, 40, 16, err, sizeof err);
	int m_dir = mode_of(dir), m_db = mode_of(path);
	snprintf(aux, sizeof aux, "%s-wal", path);
	int m_wal = mode_of(aux);
	snprintf(aux, sizeof aux, "%s-shm", path);
	int m_shm = mode_of(aux);
	store_close(s);
	fixture_free(&f);
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECKF(t, m_dir == 0700 && m_db == 0600 && m_wal == 0600 && m_shm == 0600,
		 "modes: dir %o, db %o, wal %o, shm %o", m_dir, m_db, m_wal, m_shm);
}

static long long free_bytes(const char *dir)
{
	struct statvfs v;
	return statvfs(dir, &v) == 0 ? (long long)v.f_bavail * (long long)v.f_frsize : -1;
}

/* Fills an 80 MiB tmpfs with a document's chunks until the disk is full
 * (but for the room the library keeps for deletes); the library keeps the
 * chunks committed before (the document incomplete) and the first
 * document whole, `rm` of the incomplete one succeeds on the full disk and
 * gives its space back, and writing works again. */
static void store_rm_incomplete_on_full_disk(struct test_ctx *t)
{
	char dir[512], path[600], err[512], why[256];
	struct fixture a = {0}, b = {0}, c = {0};
	struct store *s = NULL;
	struct store_doc d;

	snprintf(dir, sizeof dir, "%s/full", test_tmpdir());
	snprintf(path, sizeof path, "%s/lib.db", dir);
	if (mkdir(dir, 0700) != 0 && errno != EEXIST)
		T_SKIP(t, "mkdir %s: %s", dir, strerror(errno));
	if (mount("sekv-test", dir, "tmpfs", 0, "size=80m") != 0)
		T_SKIP(t, "cannot mount a small tmpfs here (%s)", strerror(errno));
	int rc = store_open(&s, path, err, sizeof err);
	if (rc == 0)
		rc = fixture_make(s, &a, 81, "kept", 2, 1, 2, 64, 2000, 256, err, sizeof err);
	int r_full = rc ? rc : fixture_make(s, &b, 82, "too big", 2, 1, 2, 64, 60000, 256, err, sizeof err);
	char full_err[512];
	snprintf(full_err, sizeof full_err, "%s", err);
	long long full_free = free_bytes(dir);
	int r_get = store_doc_get(s, b.doc.id, &d, NULL, 0);
	int r_rm = store_doc_delete(s, b.doc.id, err, sizeof err);
	long long freed = free_bytes(dir) - full_free;
	int r_a = fixture_check(s, &a, why, sizeof why);
	int r_again = r_rm ? r_rm : fixture_make(s, &c, 83, "again", 2, 1, 2, 64, 500, 256, NULL, 0);
	store_close(s);
	umount(dir);
	fixture_free(&a);
	fixture_free(&b);
	fixture_free(&c);
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECKF(t, r_full == SEKV_EIO && strstr(full_err, "disk full"), "filling the disk gave %d: %s",
		 r_full, full_err);
	T_CHECKF(t, r_get == 0 && d.state == STORE_DOC_PREFILL && d.n_tok > 0 && d.n_tok < 60000,
		 "incomplete document: rc %d, %lld tokens", r_get, (long long)d.n_tok);
	T_CHECKF(t, r_rm == 0, "rm on a full disk: %s", err);
	T_CHECKF(t, freed > 16LL << 20, "rm gave back %lld bytes", freed);
	T_CHECKF(t, r_a == 0, "first document: %s", why);
	T_CHECKF(t, r_again == 0, "writing after rm: %d", r_again);
}

const struct test_case test_store_durable[] = {
	{ "store_ingest_state_round_trip", store_ingest_state_round_trip },
	{ "store_ingest_state_split_fields", store_ingest_state_split_fields },
	{ "store_ingest_continuation_kept_until_next_part", store_ingest_continuation_kept_until_next_part },
	{ "store_check_passes_good_library", store_check_passes_good_library },
	{ "store_check_names_planted_corruption", store_check_names_planted_corruption },
	{ "store_library_private_under_umask_0", store_library_private_under_umask_0 },
	{ "store_rm_incomplete_on_full_disk", store_rm_incomplete_on_full_disk },
	{ "cli_check_ls_rm_incomplete", cli_check_ls_rm_incomplete },
	{ "cli_rm_only_full_kv_refusals", cli_rm_only_full_kv_refusals },
	{ NULL, NULL },
};
