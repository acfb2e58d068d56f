/* test_store_doc.c - the SQLite library file, document side: default and
 * created paths, document rows and text, chunks of tokens and full KV, SWA
 * rows, the contiguity rule, listing, deleting, disk bytes, reopening and
 * transactions. Memories are in test_store_mem.c, corrupt and old files in
 * test_store_format.c, fault injection in test_store_fault.c; shared
 * helpers in store_fixtures.c.
 */
#include "tests/test.h"
#include "tests/store_fixtures.h"
#include "engine/base/err.h"

#include <sqlite3.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void store_default_path_xdg_and_home(struct test_ctx *t)
{
	char buf[1024], want[1024], *old_xdg = getenv("XDG_DATA_HOME"), *old_home = getenv("HOME");
	char sx[1024], sh[1024];
	struct store *s = NULL;
	char err[512];
	struct stat st;
	char home_path[1024], opened[1024] = "";
	int r_xdg, r_open, r_home, r_small, r_stat;

	snprintf(sx, sizeof sx, "%s", old_xdg ? old_xdg : "");
	snprintf(sh, sizeof sh, "%s", old_home ? old_home : "");
	snprintf(want, sizeof want, "%s/xdg/sekv/library.db", test_tmpdir());
	snprintf(buf, sizeof buf, "%s/xdg", test_tmpdir());
	setenv("XDG_DATA_HOME", buf, 1);
	r_xdg = store_default_path(buf, sizeof buf);
	r_open = store_open(&s, NULL, err, sizeof err);
	if (r_open == 0)
		snprintf(opened, sizeof opened, "%s", store_path(s));
	store_close(s);
	r_stat = stat(want, &st);
	/* a relative XDG_DATA_HOME is ignored (XDG base directory spec) */
	setenv("XDG_DATA_HOME", "relative/ignored", 1);
	setenv("HOME", "/home/someone", 1);
	r_home = store_default_path(home_path, sizeof home_path);
	r_small = store_default_path(home_path + 900, 10);
	setenv("HOME", "relative-home", 1);
	char rel[512];
	int r_rel_home = store_default_path(rel, sizeof rel);
	if (old_xdg)
		setenv("XDG_DATA_HOME", sx, 1);
	else
		unsetenv("XDG_DATA_HOME");
	if (old_home)
		setenv("HOME", sh, 1);
	else
		unsetenv("HOME");
	T_CHECKF(t, r_xdg == 0 && strcmp(buf, want) == 0, "xdg path %s", buf);
	T_CHECKF(t, r_open == 0, "open default: %s", err);
	T_CHECK(t, strcmp(opened, want) == 0 && r_stat == 0);
	T_CHECKF(t, r_home == 0 && strcmp(home_path, "/home/someone/.local/share/sekv/library.db") == 0,
		 "home path %s", home_path);
	T_CHECK(t, r_small == SEKV_EINVAL);
	T_CHECK(t, r_rel_home == SEKV_EINVAL);
}

static void store_open_creates_parent_dirs(struct test_ctx *t)
{
	char path[512], err[512];
	struct store *s = NULL;
	struct stat st;
	int rc;

	snprintf(path, sizeof path, "%s/a/b/c/lib.db", test_tmpdir());
	rc = store_open(&s, path, err, sizeof err);
	T_CHECKF(t, rc == 0, "%s", err);
	store_close(s);
	T_CHECK(t, stat(path, &st) == 0 && S_ISREG(st.st_mode));
	T_CHECK(t, fixture_raw_int(path, "PRAGMA user_version") == 14);
	T_CHECK(t, fixture_raw_int(path, "PRAGMA application_id") == 0x73656b76);
	/* a file where a directory must go is an I/O error, not a crash */
	snprintf(path, sizeof path, "%s/a/b/c/lib.db/x.db", test_tmpdir());
	rc = store_open(&s, path, err, sizeof err);
	T_CHECKF(t, rc == SEKV_EIO && s == NULL, "rc %d %s", rc, err);
}

static void store_doc_fields_and_text_round_trip(struct test_ctx *t)
{
	const char *path = fixture_db_path("fields");
	static const char text[] = "Call me Ishmael.\nSome years ago\xe2\x80\x94never mind how long";
	struct store_doc d = {0}, g;
	struct store *s = NULL;
	char err[512], *txt = NULL;
	size_t len = 0;
	int rc;

	T_CHECKF(t, store_open(&s, path, err, sizeof err) == 0, "%s", err);
	snprintf(d.title, sizeof d.title, "Moby-Dick");
	snprintf(d.source, sizeof d.source, "/books/moby.txt");
	snprintf(d.model_fp, sizeof d.model_fp, "%s", "0123456789abcdef0123456789abcdef"
		 "0123456789abcdef0123456789abcdef");
	snprintf(d.model_name, sizeof d.model_name, "gemma-3-270m-q4_k_m");
	d.n_layer_global = 3;
	d.n_layer_swa = 15;
	d.n_head_kv = 1;
	d.d_h = 256;
	d.swa_window = 512;
	d.created = 1700000000.5;
	rc = store_doc_create(s, &d, text, sizeof text - 1, err, sizeof err);
	T_CHECKF(t, rc == 0 && d.id > 0, "%s", err);
	rc = store_doc_get(s, d.id, &g, err, sizeof err);
	store_close(s);
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECK(t, strcmp(g.title, d.title) == 0 && strcmp(g.source, d.source) == 0);
	T_CHECK(t, strcmp(g.model_fp, d.model_fp) == 0 && strcmp(g.model_name, d.model_name) == 0);
	T_CHECK(t, g.state == STORE_DOC_PREFILL && g.n_tok == 0 && g.created == d.created);
	T_CHECK(t, g.n_layer_global == 3 && g.n_layer_swa == 15 && g.n_head_kv == 1 &&
		g.d_h == 256 && g.swa_window == 512 && g.disk_bytes == 0);
	T_CHECKF(t, store_open(&s, path, err, sizeof err) == 0, "%s", err);
	rc = store_doc_text_dup(s, d.id, &txt, &len, err, sizeof err);
	T_CHECKF(t, rc == 0 && len == sizeof text - 1 && memcmp(txt, text, len) == 0 &&
		 txt[len] == 0, "%s", err);
	free(txt);
	T_CHECK(t, store_doc_text_dup(s, d.id + 1, &txt, &len, err, sizeof err) == SEKV_ENOTFOUND);
	T_CHECK(t, store_doc_get(s, d.id + 1, &g, err, sizeof err) == SEKV_ENOTFOUND);
	store_close(s);
}

static void store_chunks_full_kv_swa_round_trip(struct test_ctx *t)
{
	const char *path = fixture_db_path("chunks");
	struct fixture f;
	struct store_doc g;
	struct store *s = NULL;
	char err[512];
	int rc;

	T_CHECKF(t, store_open(&s, path, err, sizeof err) == 0, "%s", err);
	rc = fixture_make(s, &f, 11, "chunks", 2, 3, 2, 16, 777, 120, err, sizeof err);
	if (rc == 0)
		rc = fixture_swa(s, &f, 1, 40, err, sizeof err);
	if (rc == 0 && fixture_check(s, &f, err, sizeof err))
		rc = -100;
	/* replacing SWA rows with fewer rows keeps only the new ones */
	if (rc == 0)
		rc = fixture_swa(s, &f, 2, 9, err, sizeof err);
	if (rc == 0 && fixture_check(s, &f, err, sizeof err))
		rc = -101;
	if (rc == 0)
		rc = store_doc_get(s, f.doc.id, &g, err, sizeof err);
	store_close(s);
	if (rc) {
		fixture_free(&f);
		T_CHECKF(t, 0, "rc %d: %s", rc, err);
	}
	/* reopened: the same bytes, n_tok and summed prefill seconds */
	rc = store_open(&s, path, err, sizeof err);
	if (rc == 0 && fixture_check(s, &f, err, sizeof err))
		rc = -102;
	store_close(s);
	T_CHECK(t, g.n_tok == 777 && g.state == STORE_DOC_PREFILL);
	T_CHECKF(t, g.prefill_s > 0.25 && (int64_t)(g.prefill_s / 0.25 + 0.5) * 0.25 == g.prefill_s,
		 "prefill_s %g", g.prefill_s);
	fixture_free(&f);
	T_CHECKF(t, rc == 0, "after reopen: rc %d: %s", rc, err);
}

static void store_chunk_pos0_mismatch_rejected(struct test_ctx *t)
{
	const char *path = fixture_db_path("pos0");
	struct store_doc d = {0}, g;
	struct store *s = NULL;
	int32_t tok[20] = {0};
	float h[20] = {0};
	uint16_t kv[20 * 8] = {0};
	const uint16_t *k[1] = { kv }, *v[1] = { kv };
	char err[512];

	T_CHECKF(t, store_open(&s, path, err, sizeof err) == 0, "%s", err);
	d.n_layer_global = 1;
	d.n_head_kv = 1;
	d.d_h = 8;
	T_CHECK(t, store_doc_create(s, &d, "x", 1, err, sizeof err) == 0);
	T_CHECK(t, store_doc_put_chunk(s, d.id, 0, 10, tok, h, k, v, 1, err, sizeof err) == 0);
	T_CHECK(t, store_doc_put_chunk(s, d.id, 5, 10, tok, h, k, v, 1, err, sizeof err) == SEKV_EINVAL);
	T_CHECKF(t, strstr(err, "pos0 5") != NULL, "message: %s", err);
	T_CHECK(t, store_doc_put_chunk(s, d.id, 11, 5, tok, h, k, v, 1, err, sizeof err) == SEKV_EINVAL);
	T_CHECK(t, store_doc_put_chunk(s, d.id, 0, 5, tok, h, k, v, 1, err, sizeof err) == SEKV_EINVAL);
	T_CHECK(t, store_doc_put_chunk(s, d.id, 10, 0, tok, h, k, v, 1, err, sizeof err) == SEKV_EINVAL);
	T_CHECK(t, store_doc_put_chunk(s, d.id + 7, 0, 5, tok, h, k, v, 1, err, sizeof err) ==
		SEKV_ENOTFOUND);
	T_CHECK(t, store_doc_get(s, d.id, &g, err, sizeof err) == 0 && g.n_tok == 10 &&
		g.prefill_s == 1);
	T_CHECK(t, store_doc_put_chunk(s, d.id, 10, 10, tok, h, k, v, 1, err, sizeof err) == 0);
	T_CHECK(t, store_doc_get(s, d.id, &g, err, sizeof err) == 0 && g.n_tok == 20);
	T_CHECK(t, fixture_raw_int(path, "SELECT count(*) FROM tok_chunk") == 2);
	store_close(s);
}

static void store_doc_list_in_id_order(struct test_ctx *t)
{
	const char *path = fixture_db_path("list");
	static const char *const names[] = { "alpha", "beta", "gamma", "delta" };
	struct fixture f[4];
	struct store_doc *list = NULL;
	struct store *s = NULL;
	char err[512];
	int rc = 0, n = -1;

	memset(f, 0, sizeof f);
	T_CHECKF(t, store_open(&s, path, err, sizeof err) == 0, "%s", err);
	for (int i = 0; i < 4 && rc == 0; i++)
		rc = fixture_make(s, &f[i], 20 + i, names[i], 1, 0, 1, 8, 10 * (i + 1), 7,
				  err, sizeof err);
	if (rc == 0)
		rc = store_doc_delete(s, f[1].doc.id, err, sizeof err);
	if (rc == 0)
		rc = store_doc_list(s, &list, &n, err, sizeof err);
	store_close(s);
	for (int i = 0; i < 4; i++)
		fixture_free(&f[i]);
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECKF(t, n == 3, "n %d", n);
	T_CHECK(t, strcmp(list[0].title, "alpha") == 0 && strcmp(list[1].title, "gamma") == 0 &&
		strcmp(list[2].title, "delta") == 0);
	T_CHECK(t, list[0].id < list[1].id && list[1].id < list[2].id);
	/* 10/30/40 tokens: 8 bytes of ids + surprisal, 2 * 8 * 2 of KV each */
	T_CHECKF(t, list[0].n_tok == 10 && list[0].disk_bytes == 10 * (8 + 32) &&
		 list[1].disk_bytes == 30 * 40 && list[2].disk_bytes == 40 * 40,
		 "disk bytes %lld %lld %lld", (long long)list[0].disk_bytes,
		 (long long)list[1].disk_bytes, (long long)list[2].disk_bytes);
	free(list);
	/* a new document gets a new id, after every earlier one */
	{
		struct store_doc d = {0};
		T_CHECK(t, store_open(&s, path, err, sizeof err) == 0);
		rc = store_doc_create(s, &d, "", 0, err, sizeof err);
		if (rc == 0)
			rc = store_doc_list(s, &list, &n, err, sizeof err);
		store_close(s);
		T_CHECKF(t, rc == 0 && n == 4 && list[3].id == d.id && d.id > list[2].id, "%s", err);
		free(list);
	}
}

static const char *const owned_tables[] = { "doc_text", "tok_chunk", "kv_chunk", "swa",
					    "mem", "mem_layer" };

static void store_doc_delete_removes_everything(struct test_ctx *t)
{
	const char *path = fixture_db_path("delete");
	struct sekv_mem *m1 = fixture_synth_mem(31, 300, 2, 2, 1, 16, 8, 30);
	struct sekv_mem *m2 = fixture_synth_mem(32, 250, 2, 2, 1, 16, 8, 30), *g = NULL;
	struct fixture f1, f2;
	struct store *s = NULL;
	char err[512], sql[256], why[256];
	int rc, r_get, r_mem, r_tok, r_del, r_swa;
	int64_t left = 0, bytes1, bytes_after, n_tok;
	int32_t *tk = NULL;
	float *hh = NULL;

	T_CHECK(t, m1 && m2);
	memset(&f1, 0, sizeof f1);
	memset(&f2, 0, sizeof f2);
	rc = store_open(&s, path, err, sizeof err);
	if (rc == 0)
		rc = fixture_with_mem(s, &f1, m1, 31, 0.1, err, sizeof err);
	if (rc == 0)
		rc = fixture_with_mem(s, &f2, m2, 32, 0.1, err, sizeof err);
	if (rc) {
		store_close(s);
		sekv_mem_free(m1);
		sekv_mem_free(m2);
		fixture_free(&f1);
		fixture_free(&f2);
		T_CHECKF(t, 0, "%s", err);
	}
	bytes1 = store_doc_disk_bytes(s, f1.doc.id);
	rc = store_doc_delete(s, f1.doc.id, err, sizeof err);
	r_get = store_doc_get(s, f1.doc.id, &f1.doc, NULL, 0);
	r_mem = store_doc_get_mem(s, f1.doc.id, &g, NULL, 0);
	r_tok = store_doc_get_tokens(s, f1.doc.id, &tk, &hh, &n_tok, NULL, 0);
	r_swa = store_doc_put_swa(s, f1.doc.id, 0, NULL, 0, NULL, NULL, NULL, 0);
	r_del = store_doc_delete(s, f1.doc.id, NULL, 0);
	bytes_after = store_doc_disk_bytes(s, f1.doc.id);
	/* the other document is untouched */
	if (rc == 0 && fixture_check(s, &f2, why, sizeof why))
		rc = -1, snprintf(err, sizeof err, "other doc: %s", why);
	if (rc == 0 && (rc = store_doc_get_mem(s, f2.doc.id, &g, err, sizeof err)) == 0 &&
	    fixture_mem_cmp(m2, g, why, sizeof why))
		rc = -1, snprintf(err, sizeof err, "other mem: %s", why);
	sekv_mem_free(g);
	store_close(s);
	for (size_t i = 0; i < sizeof owned_tables / sizeof owned_tables[0]; i++) {
		snprintf(sql, sizeof sql, "SELECT count(*) FROM %s WHERE doc = %lld",
			 owned_tables[i], (long long)f1.doc.id);
		left += fixture_raw_int(path, sql);
	}
	snprintf(sql, sizeof sql, "SELECT count(*) FROM mem_layer WHERE doc = %lld",
		 (long long)f2.doc.id);
	T_CHECK(t, fixture_raw_int(path, sql) == 2);
	sekv_mem_free(m1);
	sekv_mem_free(m2);
	fixture_free(&f1);
	fixture_free(&f2);
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECK(t, r_get == SEKV_ENOTFOUND && r_mem == SEKV_ENOTFOUND && r_tok == SEKV_ENOTFOUND &&
		r_swa == SEKV_ENOTFOUND && r_del == SEKV_ENOTFOUND);
	T_CHECKF(t, left == 0, "%lld rows left", (long long)left);
	T_CHECKF(t, bytes1 > 0 && bytes_after == 0, "bytes %lld -> %lld", (long long)bytes1,
		 (long long)bytes_after);
}

static void store_disk_bytes_is_sum_of_blobs(struct test_ctx *t)
{
	const char *path = fixture_db_path("diskbytes");
	struct sekv_mem *m = fixture_synth_mem(41, 400, 3, 4, 2, 16, 12, 40);
	struct fixture f;
	struct store_doc d;
	struct store *s = NULL;
	char err[512];
	int64_t want, got;
	size_t row, fac = 0, nf;
	int rc;

	T_CHECK(t, m != NULL);
	rc = store_open(&s, path, err, sizeof err);
	if (rc == 0)
		rc = fixture_with_mem(s, &f, m, 41, 0.1, err, sizeof err);
	if (rc == 0)
		rc = store_doc_get(s, f.doc.id, &d, err, sizeof err);
	got = store_doc_disk_bytes(s, f.doc.id);
	store_close(s);
	/* what the shapes say, counted independently of the schema */
	row = (size_t)m->n_head_kv * m->d_h;
	nf = (size_t)m->n_layer * m->n_comp * m->n_head_kv * 2;
	for (size_t i = 0; i < nf; i++) {
		size_t len = (size_t)m->span[m->comp_span[(i / ((size_t)m->n_head_kv * 2)) %
						       (size_t)m->n_comp]].len;
		size_t es = m->factor_f16 ? 2 : 4;
		fac += m->fac[i].rank == SEKV_RANK_RAW ? len * (size_t)m->d_h * es :
		       m->fac[i].rank == SEKV_RANK_RAW8 ? len * ((size_t)m->d_h + 4) :
		       (size_t)m->fac[i].rank * ((len + (size_t)m->d_h) * es + 4);
	}
	want = (int64_t)f.n_tok * 8 + (int64_t)f.n_tok * m->n_layer * row * 4  /* chunks */
	       + (int64_t)2 * 16 * row * 4                                       /* swa */
	       + m->n_layer * 4 + m->n_span * 12 + m->n_exact * 4 + nf * 4 + m->n_tok * 9
	       + (int64_t)m->n_layer * (m->n_head * 4 + m->n_head * SEKV_D_ROUTE * m->d_h * 4 +
					m->n_comp * row * 4 + m->n_exact * row * 4 +
					m->n_lm * (row + (size_t)m->n_head_kv * 4))
	       + (int64_t)fac;
	T_CHECK(t, m->host_bytes == fac);
	sekv_mem_free(m);
	fixture_free(&f);
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECKF(t, got == want && d.disk_bytes == want, "disk bytes %lld / %lld, expected %lld",
		 (long long)got, (long long)d.disk_bytes, (long long)want);
}

/* Dropping a ready document's exact KV removes exactly its kv_chunk bytes,
 * keeps everything SeKV reads, and leaves a library `sekv check` finds
 * sound; an incomplete document keeps its rows (its resume reads them). */
static void store_drop_full_kv_keeps_memory(struct test_ctx *t)
{
	const char *path = fixture_db_path("dropkv");
	struct sekv_mem *m = fixture_synth_mem(43, 300, 3, 4, 2, 16, 12, 40), *g = NULL;
	struct fixture f, inc;
	struct store_doc d, di;
	struct store *s = NULL;
	char err[512], why[256] = "";
	uint16_t *k = NULL, *v = NULL;
	int64_t before = -1, after = -1, kv_rows = -1;
	int rc, r_inc = 0, r_get = 0, r_again = -1, n_problem = -1, diff = 1;

	memset(&inc, 0, sizeof inc);
	T_CHECK(t, m != NULL);
	rc = store_open(&s, path, err, sizeof err);
	if (rc == 0)
		rc = fixture_with_mem(s, &f, m, 43, 0.1, err, sizeof err);
	if (rc == 0)
		rc = fixture_make(s, &inc, 44, "incomplete", 3, 2, 2, 16, 50, 16, err, sizeof err);
	before = store_doc_disk_bytes(s, f.doc.id);
	if (rc == 0)
		rc = store_doc_drop_full_kv(s, f.doc.id, err, sizeof err);
	after = store_doc_disk_bytes(s, f.doc.id);
	if (rc == 0)
		rc = store_doc_get(s, f.doc.id, &d, err, sizeof err);
	if (rc == 0)
		rc = store_doc_get_mem(s, f.doc.id, &g, err, sizeof err);
	if (rc == 0)
		diff = fixture_mem_cmp(m, g, why, sizeof why);
	k = malloc((size_t)f.n_tok * 2 * 16 * sizeof *k);
	v = malloc((size_t)f.n_tok * 2 * 16 * sizeof *v);
	r_get = store_doc_get_full_kv(s, f.doc.id, 0, k, v, NULL, 0);
	r_again = store_doc_drop_full_kv(s, f.doc.id, NULL, 0);
	r_inc = store_doc_drop_full_kv(s, inc.doc.id, NULL, 0);
	if (rc == 0)
		rc = store_doc_get(s, inc.doc.id, &di, err, sizeof err);
	if (rc == 0)
		rc = store_check(s, NULL, NULL, &n_problem, err, sizeof err);
	store_close(s);
	kv_rows = fixture_raw_int(path, "SELECT count(*) FROM kv_chunk");
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECKF(t, after == before - f.n_tok * 3 * 2 * 16 * 2 * 2, "disk bytes %lld -> %lld "
		 "(%lld tokens)", (long long)before, (long long)after, (long long)f.n_tok);
	T_CHECK(t, d.full_kv == 0 && di.full_kv == 1);
	T_CHECKF(t, !diff, "memory after the drop: %s", why);
	T_CHECK(t, r_get == SEKV_ENOTFOUND && r_again == 0 && r_inc == SEKV_EINVAL);
	/* the incomplete document's 3 layers of rows are all that is left */
	T_CHECKF(t, kv_rows > 0 && kv_rows == fixture_raw_int(path, "SELECT count(*) FROM kv_chunk"
		 " WHERE doc = (SELECT max(id) FROM documents)"), "%lld kv_chunk rows left",
		 (long long)kv_rows);
	T_CHECKF(t, n_problem == 0, "sekv check: %d problems", n_problem);
	/* rows left behind a drop, or a drop marked on an incomplete one, are found */
	T_CHECK(t, fixture_raw_exec(path, "UPDATE documents SET full_kv = 0 WHERE state = 0") ==
		SQLITE_OK);
	rc = store_open(&s, path, err, sizeof err);
	if (rc == 0)
		rc = store_check(s, NULL, NULL, &n_problem, err, sizeof err);
	store_close(s);
	T_CHECKF(t, rc == 0 && n_problem == 2, "sekv check: %d problems (%s)", n_problem, err);
	free(k);
	free(v);
	sekv_mem_free(m);
	sekv_mem_free(g);
	fixture_free(&f);
	fixture_free(&inc);
}

static void store_reopen_keeps_everything(struct test_ctx *t)
{
	const char *path = fixture_db_path("reopen");
	struct sekv_mem *m = fixture_synth_mem(61, 500, 3, 4, 1, 32, 16, 40), *g = NULL;
	struct fixture f;
	struct store_doc d1, d2;
	struct store *s = NULL;
	char err[512], why[256];
	int rc;

	T_CHECK(t, m != NULL);
	rc = store_open(&s, path, err, sizeof err);
	if (rc == 0)
		rc = fixture_with_mem(s, &f, m, 61, 0.2, err, sizeof err);
	if (rc == 0)
		rc = store_doc_get(s, f.doc.id, &d1, err, sizeof err);
	store_close(s);
	s = NULL;
	if (rc == 0)
		rc = store_open(&s, path, err, sizeof err);
	if (rc == 0)
		rc = store_doc_get(s, f.doc.id, &d2, err, sizeof err);
	if (rc == 0 && memcmp(&d1, &d2, sizeof d1))
		rc = -1, snprintf(err, sizeof err, "document row differs");
	if (rc == 0 && fixture_check(s, &f, why, sizeof why))
		rc = -1, snprintf(err, sizeof err, "%s", why);
	if (rc == 0 && (rc = store_doc_get_mem(s, f.doc.id, &g, err, sizeof err)) == 0 &&
	    fixture_mem_cmp(m, g, why, sizeof why))
		rc = -1, snprintf(err, sizeof err, "%s", why);
	store_close(s);
	sekv_mem_free(g);
	sekv_mem_free(m);
	fixture_free(&f);
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECK(t, d2.state == STORE_DOC_READY && d2.n_tok == 500 && d2.disk_bytes > 0);
}

static void store_tx_groups_chunk_and_swa(struct test_ctx *t)
{
	const char *path = fixture_db_path("tx");
	struct fixture f;
	struct store_doc d;
	struct store *s = NULL;
	int32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8}, *lid = NULL;
	float h[8] = {0};
	uint16_t kv[8 * 8] = {0}, **sk = NULL, **sv = NULL;
	const uint16_t *k[1] = { kv }, *v[1] = { kv };
	char err[512];
	int rc, n_layer = 0, n_row = 0, r_in, r_swa, n_row2;

	rc = store_open(&s, path, err, sizeof err);
	if (rc == 0)
		rc = fixture_make(s, &f, 71, "tx", 1, 2, 1, 8, 16, 16, err, sizeof err);
	if (rc == 0)
		rc = fixture_swa(s, &f, 71, 4, err, sizeof err);
	T_CHECKF(t, rc == 0, "%s", err);
	/* rolled back: neither the chunk nor the SWA rows */
	rc = store_tx_begin(s, err, sizeof err);
	if (rc == 0)
		rc = store_doc_put_chunk(s, f.doc.id, 16, 8, tok, h, k, v, 1, err, sizeof err);
	if (rc == 0)
		rc = fixture_swa(s, &f, 72, 6, err, sizeof err);
	store_tx_rollback(s);
	if (rc == 0)
		rc = store_doc_get(s, f.doc.id, &d, err, sizeof err);
	r_swa = store_doc_get_swa(s, f.doc.id, &n_layer, &lid, &n_row, &sk, &sv, NULL, 0);
	store_swa_free(n_layer, lid, sk, sv);
	if (rc) {
		store_close(s);
		fixture_free(&f);
		T_CHECKF(t, 0, "%s", err);
	}
	T_CHECK(t, d.n_tok == 16 && r_swa == 0 && n_row == 4);
	/* committed: both; a failing call inside undoes only itself */
	rc = store_tx_begin(s, err, sizeof err);
	if (rc == 0)
		rc = store_doc_put_chunk(s, f.doc.id, 16, 8, tok, h, k, v, 1, err, sizeof err);
	r_in = store_doc_put_chunk(s, f.doc.id, 3, 8, tok, h, k, v, 1, NULL, 0);
	if (rc == 0)
		rc = fixture_swa(s, &f, 73, 5, err, sizeof err);
	if (rc == 0)
		rc = store_tx_commit(s, err, sizeof err);
	else
		store_tx_rollback(s);
	if (rc == 0)
		rc = store_doc_get(s, f.doc.id, &d, err, sizeof err);
	r_swa = store_doc_get_swa(s, f.doc.id, &n_layer, &lid, &n_row, &sk, &sv, NULL, 0);
	store_swa_free(n_layer, lid, sk, sv);
	n_row2 = n_row;
	/* SWA rows older than the last chunk are refused as stale */
	{
		int r_stale = 0;
		if (rc == 0)
			rc = store_doc_put_chunk(s, f.doc.id, 24, 8, tok, h, k, v, 1, err, sizeof err);
		r_stale = store_doc_get_swa(s, f.doc.id, &n_layer, &lid, &n_row, &sk, &sv, err,
					    sizeof err);
		store_swa_free(n_layer, lid, sk, sv);
		store_close(s);
		fixture_free(&f);
		T_CHECKF(t, rc == 0, "%s", err);
		T_CHECK(t, r_in == SEKV_EINVAL);
		T_CHECK(t, d.n_tok == 24 && r_swa == 0 && n_row2 == 5);
		T_CHECKF(t, r_stale == SEKV_EMISMATCH, "stale swa: %d", r_stale);
	}
}

/* A page map round-trips; a bad one is refused on write; a row that
 * disagrees with itself is SEKV_EFORMAT on read; a document without one
 * is SEKV_ENOTFOUND; deleting the document deletes its map. */
static void store_pages_round_trip_and_bad_rows(struct test_ctx *t)
{
	const char *path = fixture_db_path("pages");
	const int64_t start[4] = { 0, 120, 120, 400 }, bad[3] = { 0, 50, 40 };
	struct store *s = NULL;
	struct store_doc d = { .n_layer_global = 1, .n_head_kv = 1, .d_h = 8 }, e = d;
	int64_t *got = NULL, len = 0;
	int page0 = 0, n = 0, rc;
	char err[512];

	T_CHECKF(t, store_open(&s, path, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, store_doc_create(s, &d, "x", 1, err, sizeof err) == 0);
	T_CHECK(t, store_doc_create(s, &e, "y", 1, err, sizeof err) == 0);
	rc = store_doc_put_pages(s, d.id, 7, 4, start, 500, err, sizeof err);
	if (rc == 0)
		rc = store_doc_get_pages(s, d.id, &page0, &n, &got, &len, err, sizeof err);
	int ok = rc == 0 && page0 == 7 && n == 4 && len == 500 && got && !memcmp(got, start, sizeof start);
	free(got);
	got = NULL;
	int r_none = store_doc_get_pages(s, e.id, &page0, &n, &got, &len, NULL, 0);
	int r_order = store_doc_put_pages(s, e.id, 1, 3, bad, 100, NULL, 0);
	int r_past = store_doc_put_pages(s, e.id, 1, 4, start, 300, NULL, 0);
	int r_page0 = store_doc_put_pages(s, e.id, 0, 4, start, 500, NULL, 0);
	int r_nodoc = store_doc_put_pages(s, e.id + 9, 1, 4, start, 500, NULL, 0);
	T_CHECK(t, fixture_raw_exec(path, "UPDATE doc_pages SET n_page = 5") == 0);
	int r_short = store_doc_get_pages(s, d.id, &page0, &n, &got, &len, err, sizeof err);
	int r_del = store_doc_delete(s, d.id, NULL, 0);
	store_close(s);
	T_CHECKF(t, ok, "rc %d: %s", rc, err);
	T_CHECK(t, r_none == SEKV_ENOTFOUND && r_order == SEKV_EINVAL && r_past == SEKV_EINVAL &&
		r_page0 == SEKV_EINVAL && r_nodoc == SEKV_ENOTFOUND);
	T_CHECKF(t, r_short == SEKV_EFORMAT && !got, "rc %d: %s", r_short, err);
	T_CHECK(t, r_del == 0 && fixture_raw_int(path, "SELECT count(*) FROM doc_pages") == 0);
}

const struct test_case test_store_doc[] = {
	{ "store_default_path_xdg_and_home", store_default_path_xdg_and_home },
	{ "store_open_creates_parent_dirs", store_open_creates_parent_dirs },
	{ "store_doc_fields_and_text_round_trip", store_doc_fields_and_text_round_trip },
	{ "store_chunks_full_kv_swa_round_trip", store_chunks_full_kv_swa_round_trip },
	{ "store_chunk_pos0_mismatch_rejected", store_chunk_pos0_mismatch_rejected },
	{ "store_doc_list_in_id_order", store_doc_list_in_id_order },
	{ "store_doc_delete_removes_everything", store_doc_delete_removes_everything },
	{ "store_disk_bytes_is_sum_of_blobs", store_disk_bytes_is_sum_of_blobs },
	{ "store_drop_full_kv_keeps_memory", store_drop_full_kv_keeps_memory },
	{ "store_reopen_keeps_everything", store_reopen_keeps_everything },
	{ "store_tx_groups_chunk_and_swa", store_tx_groups_chunk_and_swa },
	{ "store_pages_round_trip_and_bad_rows", store_pages_round_trip_and_bad_rows },
	{ NULL, NULL },
};
