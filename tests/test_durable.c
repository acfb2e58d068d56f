/* test_durable.c - durable ingest with the real model and the sekv binary:
 * an ingest killed with SIGKILL after some chunks were committed is
 * continued by `sekv ingest --resume` into the very bytes an uninterrupted
 * ingest stores (spans, factors, summaries, every chunk, SWA rows, H2O's
 * scores) at -t 1; two processes share a library, one ingesting while the
 * other answers, and the ingest's progress reaches a log (not a terminal)
 * as plain lines, the first within 2 s; an ingest that fills the disk
 * leaves an incomplete document that `sekv rm` deletes, and so does a disk
 * another program filled to the last byte (the library's reserve); while
 * one process ingests a document, another's `ingest --resume` and `rm` of
 * it are refused at once and `ls` says `ingesting`; a --split ingest
 * killed in its second part leaves that part resumable, page map kept,
 * and its resume stores the parts after it as an uninterrupted --split
 * ingest does, as it does after a SIGINT between two parts (the ids
 * stored printed, the part to resume named, `ls` saying which parts are
 * missing); a resume reads the source again before it stores anything,
 * refusing a file gone or changed; a document whose exact KV was dropped at the end of its
 * ingest (the default) gets it back, bit for bit, by a prefill of its
 * stored tokens. Short documents (~650 to ~1,300 tokens) keep it to about
 * a minute.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <sqlite3.h>

#include "app/app.h"
#include "engine/base/clock.h"
#include "engine/base/err.h"
#include "engine/model/model.h"
#include "store/store.h"
#include "tests/pdf_fixture.h"
#include "tests/store_fixtures.h"
#include "tests/test.h"

#define SAMPLE "assets/samples/gnu-gpl-3-and-lgpl-3.txt"

static char g_doc_path[512]; /* the ~650-token document */
static char g_ref_db[512];   /* its uninterrupted ingest, doc 1 (also the shared library) */

/* The first `bytes` of the sample, cut after a newline, written to path. */
static int write_prefix(const char *path, size_t bytes)
{
	FILE *f = fopen(SAMPLE, "rb");
	char *buf = malloc(bytes);
	size_t n = f && buf ? fread(buf, 1, bytes, f) : 0;

	if (f)
		fclose(f);
	while (n > 0 && buf[n - 1] != '\n')
		n--;
	int rc = n > 0 ? test_write_file(path, buf, n) : -1;
	free(buf);
	return rc;
}

/* Options of an ingest in process into the library at db: quiet, one
 * thread, chunks of 64, the test model, defaults otherwise. */
static void ingest_opts(struct app_opts *o, const char *db)
{
	char err[256];

	app_opts_parse(o, 0, NULL, err, sizeof err);
	snprintf(o->model, sizeof o->model, "%s", test_model_path());
	snprintf(o->db, sizeof o->db, "%s", db);
	o->quiet = 1;
	o->n_threads = 1;
	o->n_batch = 64;
}

/* The reference: the document ingested without interruption, in process,
 * one thread, chunks of 64, its exact KV kept (so that the resumed
 * ingest's kv_chunk rows are compared too). 1 when it is there. */
static int reference(struct test_ctx *t)
{
	struct app_opts o;
	char err[1024], db[512];
	int64_t id = 0;

	if (g_ref_db[0])
		return 1;
	if (access(test_model_path(), R_OK) != 0) {
		T_FAIL(t, "model %s missing (make model)", test_model_path());
		return 0;
	}
	snprintf(g_doc_path, sizeof g_doc_path, "%s/durable.txt", test_tmpdir());
	if (write_prefix(g_doc_path, 3000)) {
		T_FAIL(t, "cannot write %s", g_doc_path);
		return 0;
	}
	snprintf(db, sizeof db, "%s/durable_ref.db", test_tmpdir());
	ingest_opts(&o, db);
	o.keep_full_kv = 1;
	if (app_ingest(&o, g_doc_path, NULL, NULL, &id, err, sizeof err) || id != 1) {
		T_FAIL(t, "reference ingest: %s", err);
		return 0;
	}
	snprintf(g_ref_db, sizeof g_ref_db, "%s", db);
	return 1;
}

/* Starts argv[] with stderr into *err_fd (a pipe; -1: /dev/null). */
static pid_t spawn(char *const argv[], int *err_fd)
{
	int p[2] = { -1, -1 };

	if (err_fd && pipe(p) != 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		int fd = err_fd ? p[1] : open("/dev/null", O_WRONLY);
		dup2(fd, 2);
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		if (err_fd)
			close(p[0]);
		execv(argv[0], argv);
		_exit(127);
	}
	if (err_fd) {
		close(p[1]);
		*err_fd = pid > 0 ? p[0] : (close(p[0]), -1);
	}
	return pid;
}

/* Column col (n_tok, state) of document doc in the library at path (-1:
 * no such document yet). */
static long long doc_int(const char *path, long long doc, const char *col)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	long long n = -1;
	char sql[128];

	snprintf(sql, sizeof sql, "SELECT %s FROM documents WHERE id = ?", col);
	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
	    sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, doc);
		if (sqlite3_step(st) == SQLITE_ROW)
			n = sqlite3_column_int64(st, 0);
	}
	sqlite3_finalize(st);
	sqlite3_close(db);
	return n;
}

/* documents.n_tok of document doc in the library at path (-1: not yet). */
static long long stored_tokens(const char *path, long long doc)
{
	return doc_int(path, doc, "n_tok");
}

/* Waits (at most 120 s) until column col of document doc of path is >= n
 * or pid exits; 1 when it is and pid still runs. */
static int wait_doc(const char *path, long long doc, const char *col, long long n, pid_t pid)
{
	for (int i = 0; i < 12000; i++) {
		if (doc_int(path, doc, col) >= n)
			return waitpid(pid, NULL, WNOHANG) == 0;
		if (waitpid(pid, NULL, WNOHANG) != 0)
			return 0;
		usleep(10000);
	}
	return 0;
}

/* Runs argv and kills it with SIGKILL once document doc of the library at
 * path holds n tokens. 1 when it was killed then; *running (when not NULL)
 * whether it still ran when the tokens were there. */
static int kill_at_tokens(char *const argv[], const char *path, long long doc, long long n,
			  int *running)
{
	int status = 0, killed = 0;
	pid_t pid = spawn(argv, NULL);

	if (pid <= 0)
		return 0;
	int run = wait_doc(path, doc, "n_tok", n, pid);
	if (run && kill(pid, SIGKILL) == 0)
		killed = waitpid(pid, &status, 0) == pid && WIFSIGNALED(status);
	else
		waitpid(pid, &status, 0);
	if (running)
		*running = run;
	return killed;
}

/* Rows of document doc in table of main that are not in ref, plus the
 * other way round (blobs compared byte for byte), plus 1 when main has
 * none; -1 when the query fails. "documents": its row but for the times
 * (created, prefill_s). */
static long long rows_differing(sqlite3 *db, const char *table, long long doc)
{
	int row = !strcmp(table, "documents");
	const char *cols = row ? "id, title, source, model_fp, state, n_tok, budget, r_max, alpha_used,"
		" full_kv" : "*", *key = row ? "id" : "doc";
	char sql[1536];
	sqlite3_stmt *st = NULL;
	long long n = -1;

	snprintf(sql, sizeof sql, "SELECT (SELECT count(*) FROM (SELECT %s FROM main.%s WHERE %s = ?1"
		 " EXCEPT SELECT %s FROM ref.%s WHERE %s = ?1)) + (SELECT count(*) FROM (SELECT %s FROM"
		 " ref.%s WHERE %s = ?1 EXCEPT SELECT %s FROM main.%s WHERE %s = ?1))"
		 " + ((SELECT count(*) FROM main.%s WHERE %s = ?1) = 0)", cols, table, key, cols, table,
		 key, cols, table, key, cols, table, key, table, key);
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_bind_int64(st, 1, doc) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
		n = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return n;
}

/* Tables [n] compared whole for document doc: NULL when the library at
 * path holds what the one at ref holds; else the first table differing. */
static const char *tables_differ(const char *path, const char *ref, long long doc,
				 const char *const *tables, size_t n)
{
	char sql[600];
	sqlite3 *db = NULL;
	const char *bad = NULL;

	snprintf(sql, sizeof sql, "ATTACH '%s' AS ref", ref);
	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
	    sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
		bad = "(cannot open)";
	for (size_t i = 0; !bad && i < n; i++)
		if (rows_differing(db, tables[i], doc) != 0)
			bad = tables[i];
	sqlite3_close(db);
	return bad;
}

/* The tables the memory lives in, all compared whole: NULL when document
 * 1 of the library at path is the reference's; else the first table
 * differing. */
static const char *memory_differs(const char *path)
{
	static const char *const tables[] = { "mem", "mem_layer", "tok_chunk", "kv_chunk", "swa",
					      "h2o_score" };
	return tables_differ(path, g_ref_db, 1, tables, sizeof tables / sizeof tables[0]);
}

/* kill -9 after two of eleven chunks are committed, then --resume (which
 * keeps the exact KV as the ingest it continues was told to). */
static void durable_sigkill_then_resume_bit_identical(struct test_ctx *t)
{
	char db[512], cmd[2048];
	int status = 0, killed = 0;

	T_CHECK(t, reference(t));
	snprintf(db, sizeof db, "%s/durable_killed.db", test_tmpdir());
	char *argv[] = { (char *)test_sekv_bin(), "ingest", g_doc_path, "--db", db, "-t", "1",
			 "--batch", "64", "-m", (char *)test_model_path(), "-q", "--keep-full-kv", NULL };
	int running = 0;
	killed = kill_at_tokens(argv, db, 1, 128, &running);
	long long at_kill = stored_tokens(db, 1);
	T_CHECKF(t, killed, "the ingest was not killed mid-way (running %d, %lld tokens)", running, at_kill);
	snprintf(cmd, sizeof cmd, "%s ls --db %s", test_sekv_bin(), db);
	char *ls = test_run_cmd(cmd, &status);
	int incomplete = ls && status == 0 && !strncmp(ls, "1\tincomplete\t", 13);
	free(ls);
	T_CHECKF(t, incomplete, "ls does not show document 1 incomplete after the kill");
	snprintf(cmd, sizeof cmd, "%s ingest --resume 1 --db %s -t 1 -m %s 2>&1", test_sekv_bin(), db,
		 test_model_path());
	char *out = test_run_cmd(cmd, &status);
	int resumed = out && status == 0 && strstr(out, "resuming document 1") &&
		      strstr(out, "restored in");
	T_CHECKF(t, resumed, "resume failed (%d): %.300s", status, out ? out : "");
	free(out);
	const char *bad = memory_differs(db);
	T_CHECKF(t, bad == NULL, "table %s differs from the uninterrupted ingest's (killed at %lld tokens)",
		 bad, at_kill);
	snprintf(cmd, sizeof cmd, "%s check --db %s 2>&1", test_sekv_bin(), db);
	out = test_run_cmd(cmd, &status);
	int ok = out && status == 0;
	T_CHECKF(t, ok, "check after resume (%d): %.300s", status, out ? out : "");
	free(out);
	/* the kept exact KV can go later; the memory stays as it was */
	snprintf(cmd, sizeof cmd, "%s rm --only-full-kv 1 --db %s 2>&1 && %s check --db %s 2>&1",
		 test_sekv_bin(), db, test_sekv_bin(), db);
	out = test_run_cmd(cmd, &status);
	ok = out && status == 0 && strstr(out, "document 1: exact KV deleted") && strstr(out, ": ok");
	T_CHECKF(t, ok, "rm --only-full-kv (%d): %.300s", status, out ? out : "");
	free(out);
	bad = memory_differs(db);
	T_CHECKF(t, bad && !strcmp(bad, "kv_chunk"), "after rm --only-full-kv: table %s differs "
		 "(kv_chunk alone should)", bad ? bad : "none");
}

/* Without --keep-full-kv the same ingest stores the same memory (every
 * table but kv_chunk byte for byte), drops the exact KV at the end, and
 * app_full_kv_load prefills it again into the bits the kept rows hold. */
static void durable_dropped_full_kv_prefilled_again(struct test_ctx *t)
{
	static const char *const tables[] = { "mem", "mem_layer", "tok_chunk", "swa", "h2o_score" };
	struct app_opts o;
	struct model *m = NULL;
	struct store *st = NULL, *ref = NULL;
	struct store_doc d, dr;
	uint16_t *k[MODEL_MAX_LAYER] = { 0 }, *v[MODEL_MAX_LAYER] = { 0 };
	uint16_t *rk = NULL, *rv = NULL;
	char err[1024] = "", db[512];
	sqlite3 *raw = NULL;
	sqlite3_stmt *q = NULL;
	int64_t id = 0, kv_rows = -1;
	long long differ = 0;
	double sec = 0;
	size_t n;
	int rc;

	T_CHECK(t, reference(t));
	snprintf(db, sizeof db, "%s/durable_dropped.db", test_tmpdir());
	ingest_opts(&o, db);
	rc = app_ingest(&o, g_doc_path, NULL, NULL, &id, err, sizeof err);
	T_CHECKF(t, rc == 0 && id == 1, "ingest: %s", err);
	const char *bad = tables_differ(db, g_ref_db, 1, tables, sizeof tables / sizeof tables[0]);
	if (sqlite3_open_v2(db, &raw, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
	    sqlite3_prepare_v2(raw, "SELECT count(*) FROM main.kv_chunk", -1, &q, NULL) == SQLITE_OK &&
	    sqlite3_step(q) == SQLITE_ROW)
		kv_rows = sqlite3_column_int64(q, 0);
	sqlite3_finalize(q);
	sqlite3_close(raw);
	T_CHECKF(t, bad == NULL, "table %s differs from the ingest that kept its exact KV", bad);
	T_CHECKF(t, kv_rows == 0, "%lld kv_chunk rows left", (long long)kv_rows);

	if ((rc = app_load(&o, &m, NULL, err, sizeof err)) ||
	    (rc = store_open(&st, db, err, sizeof err)) ||
	    (rc = store_open(&ref, g_ref_db, err, sizeof err)) ||
	    (rc = store_doc_get(st, 1, &d, err, sizeof err)) ||
	    (rc = store_doc_get(ref, 1, &dr, err, sizeof err)))
		goto out;
	T_CHECKF(t, d.full_kv == 0 && dr.full_kv == 1, "full_kv %d, reference %d", d.full_kv,
		 dr.full_kv);
	/* smaller than the kept one by exactly the exact KV: layers x tokens
	 * x (K, V) x row of fp16 */
	int64_t kv_bytes = (int64_t)d.n_layer_global * d.n_tok * 2 * d.n_head_kv * d.d_h * 2;
	T_CHECKF(t, dr.disk_bytes - d.disk_bytes == kv_bytes, "disk bytes %lld vs %lld kept "
		 "(exact KV %lld)", (long long)d.disk_bytes, (long long)dr.disk_bytes,
		 (long long)kv_bytes);
	n = (size_t)d.n_tok * d.n_head_kv * d.d_h;
	rk = malloc(n * sizeof *rk);
	rv = malloc(n * sizeof *rv);
	for (int l = 0; l < d.n_layer_global; l++) {
		k[l] = malloc(n * sizeof *k[l]);
		v[l] = malloc(n * sizeof *v[l]);
		if (!k[l] || !v[l] || !rk || !rv) {
			rc = -1;
			snprintf(err, sizeof err, "out of memory");
			goto out;
		}
	}
	if ((rc = app_full_kv_load(m, st, &d, 64, k, v, &sec, err, sizeof err)))
		goto out;
	for (int l = 0; !rc && l < d.n_layer_global; l++) {
		if ((rc = store_doc_get_full_kv(ref, 1, l, rk, rv, err, sizeof err)))
			break;
		for (size_t i = 0; i < n; i++)
			differ += (k[l][i] != rk[i]) + (v[l][i] != rv[i]);
	}
	T_CHECKF(t, sec > 0, "no prefill timed (%.3fs)", sec);
	T_CHECKF(t, differ == 0, "%lld of %zu halves differ from the kept exact KV", differ,
		 2 * n * d.n_layer_global);
	/* through the CLI: --kv full says what it does and answers as the kept rows do */
	char *out[2] = { NULL, NULL }, *said = NULL, cmd[2048];
	cJSON *j[2] = { NULL, NULL };
	int status[2] = { -1, -1 }, st_said = -1;
	for (int i = 0; i < 2; i++) {
		snprintf(cmd, sizeof cmd, "%s ask 1 'Who may convey copies?' --kv full -n 12 --temp 0 "
			 "--no-evidence --json -t 1 --batch 64 -m %s --db %s 2>%s/full%d.err",
			 test_sekv_bin(), test_model_path(), i ? g_ref_db : db, test_tmpdir(), i);
		out[i] = test_run_cmd(cmd, &status[i]);
		j[i] = out[i] && status[i] == 0 ? cJSON_Parse(out[i]) : NULL;
	}
	snprintf(cmd, sizeof cmd, "cat %s/full0.err", test_tmpdir());
	said = test_run_cmd(cmd, &st_said);
	const cJSON *a0 = cJSON_GetObjectItem(j[0], "answer"), *a1 = cJSON_GetObjectItem(j[1], "answer");
	int same = cJSON_IsString(a0) && cJSON_IsString(a1) && a0->valuestring[0] &&
		   !strcmp(a0->valuestring, a1->valuestring);
	int told = said && strstr(said, "keeps no exact KV") && strstr(said, "prefilling its");
	T_CHECKF(t, same && told, "ask --kv full (%d, %d): %.200s | %.200s | stderr %.300s",
		 status[0], status[1], out[0] ? out[0] : "", out[1] ? out[1] : "", said ? said : "");
	for (int i = 0; i < 2; i++) {
		cJSON_Delete(j[i]);
		free(out[i]);
	}
	free(said);
out:
	T_CHECKF(t, rc == 0, "%s", err);
	for (int l = 0; l < MODEL_MAX_LAYER; l++) {
		free(k[l]);
		free(v[l]);
	}
	free(rk);
	free(rv);
	store_close(st);
	store_close(ref);
	model_close(m);
}

/* Reads fd to its end into buf [cap]; *first gets the clk_now of the
 * first byte when it is still 0. */
static void read_all(int fd, char *buf, size_t cap, double *first)
{
	size_t n = strlen(buf);
	ssize_t r;

	while (n + 1 < cap && (r = read(fd, buf + n, cap - 1 - n)) > 0) {
		if (*first == 0)
			*first = clk_now();
		n += (size_t)r;
		buf[n] = 0;
	}
}

/* Ctrl-C after the document was stored whole (its summary is printed
 * after that): the message says so and suggests no resume, and the
 * document is ready. A run where the ingest ended before the signal
 * came is reported, not passed. */
static void durable_sigint_after_stored_suggests_no_resume(struct test_ctx *t)
{
	char db[512], buf[8192] = "", cmd[1024];
	double first = 0;
	int fd = -1, status = 0, st_ls = -1;
	size_t n = 0;
	ssize_t r;

	T_CHECK(t, reference(t));
	snprintf(db, sizeof db, "%s/durable_sigint.db", test_tmpdir());
	char *argv[] = { (char *)test_sekv_bin(), "ingest", g_doc_path, "--db", db, "-t", "1",
			 "-m", (char *)test_model_path(), NULL };
	pid_t pid = spawn(argv, &fd);
	T_CHECK(t, pid > 0 && fd >= 0);
	while (!strstr(buf, "memory built") && n + 1 < sizeof buf &&
	       (r = read(fd, buf + n, sizeof buf - 1 - n)) > 0) {
		n += (size_t)r;
		buf[n] = 0;
	}
	kill(pid, SIGINT);
	read_all(fd, buf, sizeof buf, &first);
	close(fd);
	waitpid(pid, &status, 0);
	snprintf(cmd, sizeof cmd, "%s ls --db %s", test_sekv_bin(), db);
	char *ls = test_run_cmd(cmd, &st_ls);
	int ready = ls && st_ls == 0 && !strncmp(ls, "1\tready\t", 8);
	free(ls);
	T_CHECKF(t, WIFSIGNALED(status), "the ingest ended before the signal (status %d)", status);
	const char *said = strstr(buf, "sekv ingest: interrupted");
	T_CHECKF(t, said && strstr(said, "interrupted after document 1 was stored whole") &&
		 !strstr(said, "--resume"), "message: %.600s", said ? said : buf);
	T_CHECK(t, ready);
}

/* One process ingests a second document into the library while another
 * answers a question about the first; both succeed. The ingest's stderr
 * is a pipe: its first line comes within 2 s, and the prefill reports
 * plain lines with tokens/s and ETA. */
static void durable_two_processes_ingest_and_ask(struct test_ctx *t)
{
	char doc2[512], cmd[2048], log[16384] = "";
	int status = 0, ing_status = -1, fd = -1;
	double first = 0;

	T_CHECK(t, reference(t));
	snprintf(doc2, sizeof doc2, "%s/durable2.txt", test_tmpdir());
	T_CHECK(t, write_prefix(doc2, 6000) == 0);
	char *argv[] = { (char *)test_sekv_bin(), "ingest", doc2, "--db", g_ref_db, "-t", "1",
			 "--batch", "128", "-m", (char *)test_model_path(), NULL };
	double t0 = clk_now();
	pid_t pid = spawn(argv, &fd);
	T_CHECK(t, pid > 0 && fd >= 0);
	/* the first line, then wait until the ingest writes the library */
	char c;
	if (read(fd, &c, 1) == 1) {
		first = clk_now();
		log[0] = c;
		log[1] = 0;
	}
	int writing = wait_doc(g_ref_db, 2, "n_tok", 1, pid);
	snprintf(cmd, sizeof cmd, "%s ask 1 'Who may convey copies?' --db %s -t 1 -n 8 "
		 "--no-evidence -m %s 2>/dev/null", test_sekv_bin(), g_ref_db, test_model_path());
	char *answer = test_run_cmd(cmd, &status);
	int overlapped = waitpid(pid, &ing_status, WNOHANG) == 0;
	read_all(fd, log, sizeof log, &first);
	close(fd);
	if (overlapped)
		waitpid(pid, &ing_status, 0);
	int ask_ok = answer && status == 0 && strlen(answer) > 1;
	free(answer);
	T_CHECKF(t, writing, "the ingest never wrote the library: %.300s", log);
	T_CHECKF(t, ask_ok, "ask beside an ingest failed (%d)", status);
	T_CHECKF(t, WIFEXITED(ing_status) && WEXITSTATUS(ing_status) == 0,
		 "ingest beside an ask failed: %.400s", log);
	T_CHECKF(t, first > 0 && first - t0 < 2.0, "first progress line after %.2fs", first - t0);
	int n_prefill = 0;
	for (const char *p = log; (p = strstr(p, "\nprefill ")); p++)
		n_prefill += strstr(p, "tokens/s") && strstr(p, "ETA") ? 1 : 0;
	T_CHECKF(t, n_prefill >= 2 && !strchr(log, '\r'), "%d prefill lines: %.600s", n_prefill, log);
	snprintf(cmd, sizeof cmd, "%s ls --db %s", test_sekv_bin(), g_ref_db);
	char *ls = test_run_cmd(cmd, &status);
	int both = ls && strstr(ls, "1\tready\t") && strstr(ls, "\n2\tready\t");
	free(ls);
	T_CHECKF(t, both, "ls does not show both documents ready");
}

/* Mounts a tmpfs of size ("56m") at test_tmpdir()/name into dir [cap]:
 * 0, or -1 with why [whylen] (not allowed here: the caller skips). */
static int small_tmpfs(char *dir, size_t cap, const char *name, const char *size, char *why,
		       size_t whylen)
{
	char opt[32];

	snprintf(dir, cap, "%s/%s", test_tmpdir(), name);
	snprintf(opt, sizeof opt, "size=%s", size);
	if (mkdir(dir, 0700) != 0 && errno != EEXIST)
		return snprintf(why, whylen, "mkdir %s: %s", dir, strerror(errno)), -1;
	if (mount("sekv-test", dir, "tmpfs", 0, opt) != 0)
		return snprintf(why, whylen, "cannot mount a small tmpfs here (%s)", strerror(errno)), -1;
	return 0;
}

/* An ingest into a library on a nearly full file system (a 56 MiB tmpfs,
 * of which the library keeps 48 MiB for deletes: its reserve, 16 MiB
 * free) stops with "disk
 * full", the document incomplete and the way on named; `sekv rm` of it
 * then succeeds and the library checks clean. */
static void durable_disk_full_ingest_then_rm(struct test_ctx *t)
{
	char dir[512], cmd[2048], why[512];
	int st_ing = 0, st_ls = 0, st_rm = 0;

	T_CHECK(t, reference(t));
	if (small_tmpfs(dir, sizeof dir, "full_ingest", "56m", why, sizeof why))
		T_SKIP(t, "%s", why);
	snprintf(cmd, sizeof cmd, "%s ingest %s --db %s/lib.db -t 1 --batch 64 -m %s 2>&1",
		 test_sekv_bin(), g_doc_path, dir, test_model_path());
	char *ing = test_run_cmd(cmd, &st_ing);
	snprintf(cmd, sizeof cmd, "%s ls --db %s/lib.db", test_sekv_bin(), dir);
	char *ls = test_run_cmd(cmd, &st_ls);
	snprintf(cmd, sizeof cmd, "%s rm 1 --db %s/lib.db 2>&1 && %s check --db %s/lib.db 2>&1",
		 test_sekv_bin(), dir, test_sekv_bin(), dir);
	char *rm = test_run_cmd(cmd, &st_rm);
	umount(dir);
	int ing_ok = ing && st_ing == 1 && strstr(ing, "disk full") &&
		     strstr(ing, "sekv ingest --resume 1");
	int ls_ok = ls && st_ls == 0 && !strncmp(ls, "1\tincomplete\t", 13);
	int rm_ok = rm && st_rm == 0 && strstr(rm, ": ok");
	T_CHECKF(t, ing_ok, "ingest on a full disk (%d): %.400s", st_ing, ing ? ing : "");
	T_CHECKF(t, ls_ok, "ls after it: %.200s", ls ? ls : "");
	T_CHECKF(t, rm_ok, "rm and check (%d): %.300s", st_rm, rm ? rm : "");
	free(ing);
	free(ls);
	free(rm);
}

/* A document stored in a 96 MiB tmpfs, then another program (cat) fills
 * it to the last byte: `sekv ls` and `check` still run, `sekv rm` deletes
 * the document and gives its space back (the library's reserve made
 * again), and the library checks clean. */
static void durable_disk_filled_by_another_then_rm(struct test_ctx *t)
{
	char dir[512], cmd[2048], why[512];
	struct statvfs v;
	int st_ing = 0, st_fill = 0, st_rm = 0;
	long long full = -1, after = -1;

	T_CHECK(t, reference(t));
	if (small_tmpfs(dir, sizeof dir, "filled_by_other", "96m", why, sizeof why))
		T_SKIP(t, "%s", why);
	snprintf(cmd, sizeof cmd, "%s ingest %s --db %s/lib.db -t 1 --batch 128 -q -m %s 2>&1",
		 test_sekv_bin(), g_doc_path, dir, test_model_path());
	char *ing = test_run_cmd(cmd, &st_ing);
	snprintf(cmd, sizeof cmd, "cat /dev/zero > %s/other-program 2>/dev/null", dir);
	free(test_run_cmd(cmd, &st_fill));
	if (statvfs(dir, &v) == 0)
		full = (long long)v.f_bavail * (long long)v.f_frsize;
	snprintf(cmd, sizeof cmd, "%s ls --db %s/lib.db 2>&1 && %s check --db %s/lib.db 2>&1 && "
		 "%s rm 1 --db %s/lib.db 2>&1 && %s check --db %s/lib.db 2>&1", test_sekv_bin(), dir,
		 test_sekv_bin(), dir, test_sekv_bin(), dir, test_sekv_bin(), dir);
	char *rm = test_run_cmd(cmd, &st_rm);
	if (statvfs(dir, &v) == 0)
		after = (long long)v.f_bavail * (long long)v.f_frsize;
	snprintf(cmd, sizeof cmd, "%s/lib.db-reserve", dir);
	int reserve = access(cmd, F_OK) == 0;
	umount(dir);
	int rm_ok = rm && st_rm == 0 && !strncmp(rm, "1\tready\t", 8) && strstr(rm, "document 1 deleted") &&
		    strstr(rm, ": ok\n") && strstr(strstr(rm, "deleted"), ": ok");
	T_CHECKF(t, ing && st_ing == 0, "ingest (%d): %.300s", st_ing, ing ? ing : "");
	T_CHECKF(t, full == 0, "the other program left %lld bytes free", full);
	T_CHECKF(t, rm_ok, "ls, check, rm, check on the full disk (%d): %.400s", st_rm, rm ? rm : "");
	T_CHECKF(t, after > 4LL << 20 && reserve, "after rm: %lld bytes free, reserve %d", after, reserve);
	free(ing);
	free(rm);
}

/* While one process ingests document 1, another's `ingest --resume 1`
 * and `rm 1` are refused at once, naming it, and `ls` shows it
 * `ingesting`; the ingest completes undisturbed and its lock file goes. */
static void durable_second_process_refused_while_ingesting(struct test_ctx *t)
{
	char db[512], cmd[2048], lock[600];
	int status = 0, st_res = -1, st_rm = -1, st_ls = -1;

	T_CHECK(t, reference(t));
	snprintf(db, sizeof db, "%s/durable_locked.db", test_tmpdir());
	snprintf(lock, sizeof lock, "%s-ingest-1", db);
	char *argv[] = { (char *)test_sekv_bin(), "ingest", g_doc_path, "--db", db, "-t", "1",
			 "--batch", "64", "-m", (char *)test_model_path(), "-q", NULL };
	pid_t pid = spawn(argv, NULL);
	T_CHECK(t, pid > 0);
	int running = wait_doc(db, 1, "n_tok", 64, pid);
	snprintf(cmd, sizeof cmd, "%s ingest --resume 1 --db %s -t 1 -m %s 2>&1", test_sekv_bin(), db,
		 test_model_path());
	char *res = test_run_cmd(cmd, &st_res);
	snprintf(cmd, sizeof cmd, "%s rm 1 --db %s 2>&1", test_sekv_bin(), db);
	char *rm = test_run_cmd(cmd, &st_rm);
	snprintf(cmd, sizeof cmd, "%s ls --db %s", test_sekv_bin(), db);
	char *ls = test_run_cmd(cmd, &st_ls);
	/* asking it, or deleting its exact KV, is told the same */
	int st_ask = -1, st_kv = -1;
	snprintf(cmd, sizeof cmd, "%s ask 1 'What is it?' -n 4 -t 1 -m %s --db %s 2>&1",
		 test_sekv_bin(), test_model_path(), db);
	char *ask = test_run_cmd(cmd, &st_ask);
	snprintf(cmd, sizeof cmd, "%s rm --only-full-kv 1 --db %s 2>&1", test_sekv_bin(), db);
	char *kv = test_run_cmd(cmd, &st_kv);
	int overlapped = running && waitpid(pid, NULL, WNOHANG) == 0;
	waitpid(pid, &status, 0);
	snprintf(cmd, sizeof cmd, "%s ls --db %s", test_sekv_bin(), db);
	int st_ls2 = -1;
	char *ls2 = test_run_cmd(cmd, &st_ls2);
	int res_ok = res && st_res == 1 && strstr(res, "document 1 is being ingested by another process") &&
		     !strstr(res, "restored");
	int rm_ok = rm && st_rm == 1 && strstr(rm, "sekv rm: document 1 is being ingested by another process");
	int ls_ok = ls && st_ls == 0 && !strncmp(ls, "1\tingesting\t", 12);
	int done = WIFEXITED(status) && WEXITSTATUS(status) == 0 && ls2 && !strncmp(ls2, "1\tready\t", 8);
	T_CHECKF(t, overlapped, "the ingest was not running through the checks (running %d)", running);
	T_CHECKF(t, res_ok, "ingest --resume beside it (%d): %.300s", st_res, res ? res : "");
	T_CHECKF(t, rm_ok, "rm beside it (%d): %.300s", st_rm, rm ? rm : "");
	T_CHECKF(t, ls_ok, "ls beside it: %.200s", ls ? ls : "");
	T_CHECKF(t, ask && st_ask == 1 && strstr(ask, "document 1 is being ingested by another "
		 "process"), "ask beside it (%d): %.300s", st_ask, ask ? ask : "");
	T_CHECKF(t, kv && st_kv == 1 && strstr(kv, "document 1 is being ingested by another "
		 "process"), "rm --only-full-kv beside it (%d): %.300s", st_kv, kv ? kv : "");
	T_CHECKF(t, done && access(lock, F_OK) != 0, "ingest after (%d): %.200s, lock file left %d",
		 status, ls2 ? ls2 : "", access(lock, F_OK) == 0);
	free(res);
	free(rm);
	free(ls);
	free(ls2);
	free(ask);
	free(kv);
}

/* A PDF of 6 pages, 12 lines each (about 1,000 tokens), to path; every
 * line names its own town, so none reads as a running header. */
static int write_pdf(const char *path, char *err, size_t errlen)
{
	static char text[6][1024];
	struct fx_page pages[6];

	for (int p = 0; p < 6; p++) {
		size_t at = 0;
		for (int i = 0, k = p * 12; i < 12 && at < sizeof text[p]; i++, k++)
			at += (size_t)snprintf(text[p] + at, sizeof text[p] - at, "%sThe harbor of %c%c%cton "
					       "opened in %d.", i ? "\n" : "", 'A' + k % 26, 'a' + k / 26,
					       'a' + k * 7 % 26, 1800 + k);
		pages[p] = (struct fx_page){ text[p], NULL, 0 };
	}
	return fx_pdf_write(path, pages, 6, NULL, 0, err, errlen);
}

static char g_split_pdf[512]; /* the PDF of write_pdf */
static char g_split_ref[512]; /* its uninterrupted --split ingest (3 parts) */

/* The PDF (g_split_pdf) ingested with --split --max-tokens 400 without
 * interruption, in process, one thread, chunks of 64, into g_split_ref.
 * 1 when both are there. */
static int split_reference(struct test_ctx *t)
{
	struct app_opts o;
	char pdf[512], db[512], err[1024] = "";
	int64_t *ids = NULL;
	int n = 0;

	if (g_split_ref[0])
		return 1;
	snprintf(pdf, sizeof pdf, "%s/durable_split.pdf", test_tmpdir());
	snprintf(db, sizeof db, "%s/durable_split_ref.db", test_tmpdir());
	if (write_pdf(pdf, err, sizeof err)) {
		T_FAIL(t, "%s", err);
		return 0;
	}
	ingest_opts(&o, db);
	o.max_tokens = 400;
	o.split = 1;
	int rc = app_ingest_parts(&o, pdf, NULL, NULL, &ids, &n, err, sizeof err);
	free(ids);
	if (rc || n != 3) {
		T_FAIL(t, "uninterrupted --split: %d parts: %s", n, err);
		return 0;
	}
	snprintf(g_split_pdf, sizeof g_split_pdf, "%s", pdf);
	snprintf(g_split_ref, sizeof g_split_ref, "%s", db);
	return 1;
}

/* Each of documents 1..n_doc of the library at path against the one at
 * ref: its row (title, source, tokens, state, settings), text, page map,
 * tokens, SWA rows, memory and H2O's scores; 0 when all are the same,
 * else the first document differing (*table the table). */
static int split_parts_differ(const char *path, const char *ref, int n_doc, const char **table)
{
	static const char *const tables[] = { "documents", "doc_text", "doc_pages", "tok_chunk", "swa",
					      "mem", "mem_layer", "h2o_score" };

	for (int doc = 1; doc <= n_doc; doc++)
		if ((*table = tables_differ(path, ref, doc, tables, sizeof tables / sizeof tables[0])))
			return doc;
	return 0;
}

/* A --split ingest of a PDF killed in its second part: the first part is
 * ready, the second incomplete with its resume state (part 2 of 3 at 400
 * tokens) and page map (made in one transaction), no third; --resume
 * continues that part, naming its pages, then reads the PDF again and
 * stores the third part, printing both ids: every part is then what an
 * uninterrupted --split ingest stores (title, text, page map, tokens,
 * memory, at -t 1 the same bytes), and the library checks clean. */
static void durable_split_part_killed_then_resumed(struct test_ctx *t)
{
	char *pdf = g_split_pdf, db[512], cmd[2048], err[512];
	struct store *st = NULL;
	struct store_ingest in;
	int status = 0, killed = 0, page0 = 0, n_page = 0, page0_after = 0;
	int64_t *start = NULL, text_len = 0;
	const char *bad = NULL;

	if (access(test_model_path(), R_OK) != 0)
		T_SKIP(t, "model %s missing (make model)", test_model_path());
	T_CHECK(t, split_reference(t));
	snprintf(db, sizeof db, "%s/durable_split.db", test_tmpdir());
	char *argv[] = { (char *)test_sekv_bin(), "ingest", pdf, "--split", "--max-tokens", "400",
			 "--db", db, "-t", "1", "--batch", "64", "-m", (char *)test_model_path(), "-q",
			 NULL };
	int running = 0;
	killed = kill_at_tokens(argv, db, 2, 64, &running);
	T_CHECKF(t, killed, "the ingest was not killed in part 2 (running %d, %lld tokens)", running,
		 stored_tokens(db, 2));
	snprintf(cmd, sizeof cmd, "%s ls --db %s", test_sekv_bin(), db);
	char *ls = test_run_cmd(cmd, &status);
	int listed = ls && status == 0 && !strncmp(ls, "1\tready\t", 8) &&
		     strstr(ls, "\n2\tincomplete\t") && strstr(ls, "durable_split.pdf (part 2/3)\n") &&
		     !strstr(ls, "\n3\t");
	T_CHECKF(t, listed, "ls after the kill: %.400s", ls ? ls : "");
	free(ls);
	T_CHECKF(t, store_open(&st, db, err, sizeof err) == 0, "%s", err);
	int state = store_ingest_get(st, 2, &in, NULL, err, sizeof err);
	int pages = store_doc_get_pages(st, 2, &page0, &n_page, &start, &text_len, err, sizeof err);
	store_close(st);
	free(start);
	T_CHECKF(t, state == 0 && pages == 0 && page0 > 1 && n_page >= 1, "part 2: resume state %d, "
		 "page map %d (pages %d+%d)", state, pages, page0, n_page);
	T_CHECKF(t, in.part == 1 && in.n_part == 3 && in.part_limit == 400, "part 2's resume state: "
		 "part %d of %d, limit %d", in.part, in.n_part, in.part_limit);
	snprintf(cmd, sizeof cmd, "%s ingest --resume 2 --db %s -t 1 -m %s 2>&1", test_sekv_bin(), db,
		 test_model_path());
	char *out = test_run_cmd(cmd, &status);
	int resumed = out && status == 0 && strstr(out, "resuming document 2") && strstr(out, ", page ") &&
		      strstr(out, "part 3/3") && strstr(out, "\n2\n3\n");
	T_CHECKF(t, resumed, "resume failed (%d): %.900s", status, out ? out : "");
	free(out);
	snprintf(cmd, sizeof cmd, "%s ls --db %s && %s check --db %s 2>&1", test_sekv_bin(), db,
		 test_sekv_bin(), db);
	out = test_run_cmd(cmd, &status);
	int ok = out && status == 0 && strstr(out, "\n2\tready\t") && strstr(out, "\n3\tready\t") &&
		 strstr(out, "durable_split.pdf (part 3/3)\n") && !strstr(out, "\n4\t") &&
		 strstr(out, ": ok");
	T_CHECKF(t, ok, "ls and check after resume (%d): %.600s", status, out ? out : "");
	free(out);
	T_CHECKF(t, store_open(&st, db, err, sizeof err) == 0, "%s", err);
	pages = store_doc_get_pages(st, 2, &page0_after, &n_page, &start, &text_len, err, sizeof err);
	store_close(st);
	free(start);
	T_CHECKF(t, pages == 0 && page0_after == page0, "page map after resume: %d, first page %d", pages,
		 page0_after);
	int doc = split_parts_differ(db, g_split_ref, 3, &bad);
	T_CHECKF(t, doc == 0, "document %d: table %s differs from the uninterrupted --split ingest's",
		 doc, bad ? bad : "");
}

/* An empty library at path with sql run on it (raw, planted): 0 or -1. */
static int library_with(const char *path, const char *sql)
{
	struct store *st = NULL;
	char err[512];

	if (store_open(&st, path, err, sizeof err))
		return -1;
	store_close(st);
	return fixture_raw_exec(path, sql);
}

/* The whole of file path (malloc'ed; NULL when unreadable). */
static char *file_text(const char *path)
{
	char cmd[1100];
	int status = 0;

	snprintf(cmd, sizeof cmd, "cat '%s'", path);
	return test_run_cmd(cmd, &status);
}

/* The PDF's --split ingest stopped by SIGINT between parts: part 1 ready,
 * part 2's document held in its creation by a slow trigger (so rolled
 * back). The interrupt prints id 1 on stdout and names document 1 to
 * resume; `ls` shows it incomplete with parts 2-3 not stored, `check`
 * passes; `--resume 1` prints 1, 2, 3, and every part is then what an
 * uninterrupted --split ingest stores. */
static void durable_split_interrupted_between_parts_resumed(struct test_ctx *t)
{
	char db[512], cmd[2048], out_path[600], err_path[600];
	int status = 0, stopped = 0;
	const char *bad = NULL;

	if (access(test_model_path(), R_OK) != 0)
		T_SKIP(t, "model %s missing (make model)", test_model_path());
	T_CHECK(t, split_reference(t));
	snprintf(db, sizeof db, "%s/durable_between.db", test_tmpdir());
	snprintf(out_path, sizeof out_path, "%s/between.out", test_tmpdir());
	snprintf(err_path, sizeof err_path, "%s/between.err", test_tmpdir());
	T_CHECK(t, library_with(db, "CREATE TABLE slow (x); WITH RECURSIVE c(i) AS (SELECT 1 UNION "
				"ALL SELECT i + 1 FROM c WHERE i < 1000) INSERT INTO slow SELECT i FROM c; "
				"CREATE TRIGGER hold BEFORE INSERT ON documents "
				"WHEN NEW.title LIKE '%(part 2/3)' BEGIN SELECT count(*) FROM slow a, "
				"slow b, slow c; END") == 0);
	snprintf(cmd, sizeof cmd, "exec %s ingest %s --split --max-tokens 400 --db %s -t 1 --batch 64 "
		 "-m %s -q >%s 2>%s", test_sekv_bin(), g_split_pdf, db, test_model_path(), out_path,
		 err_path);
	char *argv[] = { "/bin/sh", "-c", cmd, NULL };
	pid_t pid = spawn(argv, NULL);
	T_CHECK(t, pid > 0);
	int between = wait_doc(db, 1, "state", STORE_DOC_READY, pid);
	usleep(300000);
	between = between && doc_int(db, 2, "n_tok") < 0 && waitpid(pid, NULL, WNOHANG) == 0;
	if (kill(pid, between ? SIGINT : SIGKILL) == 0)
		stopped = waitpid(pid, &status, 0) == pid && WIFSIGNALED(status) &&
			  WTERMSIG(status) == SIGINT;
	char *ids = file_text(out_path), *said = file_text(err_path);
	int named = ids && !strcmp(ids, "1\n") && said &&
		    strstr(said, "continue with 'sekv ingest --resume 1'");
	T_CHECKF(t, between && stopped, "not interrupted between parts (%d, %d)", between, stopped);
	T_CHECKF(t, named, "interrupted: stdout '%s', stderr %.300s", ids ? ids : "", said ? said : "");
	free(ids);
	free(said);
	T_CHECK(t, fixture_raw_exec(db, "DROP TRIGGER hold; DROP TABLE slow") == 0);
	snprintf(cmd, sizeof cmd, "%s ls --db %s && %s check --db %s 2>&1", test_sekv_bin(), db,
		 test_sekv_bin(), db);
	char *out = test_run_cmd(cmd, &status);
	int listed = out && status == 0 && !strncmp(out, "1\tincomplete\t", 13) &&
		     strstr(out, "tokens; parts 2-3 of 3 not stored\t") && !strstr(out, "\n2\t") &&
		     strstr(out, ": ok");
	T_CHECKF(t, listed, "ls and check after the interrupt (%d): %.400s", status, out ? out : "");
	free(out);
	snprintf(cmd, sizeof cmd, "%s ingest --resume 1 --db %s -t 1 -m %s 2>/dev/null", test_sekv_bin(),
		 db, test_model_path());
	out = test_run_cmd(cmd, &status);
	T_CHECKF(t, out && status == 0 && !strcmp(out, "1\n2\n3\n"), "resume (%d): '%s'", status,
		 out ? out : "");
	free(out);
	snprintf(cmd, sizeof cmd, "%s ls --db %s && %s check --db %s 2>&1", test_sekv_bin(), db,
		 test_sekv_bin(), db);
	out = test_run_cmd(cmd, &status);
	int ok = out && status == 0 && !strstr(out, "incomplete") && strstr(out, "\n3\tready\t") &&
		 strstr(out, ": ok");
	T_CHECKF(t, ok, "ls and check after resume (%d): %.400s", status, out ? out : "");
	free(out);
	int doc = split_parts_differ(db, g_split_ref, 3, &bad);
	T_CHECKF(t, doc == 0, "document %d: table %s differs from the uninterrupted --split ingest's",
		 doc, bad ? bad : "");
}

/* A --split ingest of a text (2 parts) failing in part 1 (a planted
 * trigger refuses its third chunk) prints that part's id before exiting
 * 1. Its resume reads the source again before anything else: with the
 * file gone, then changed after part 1's text, it refuses saying why,
 * part 1 still incomplete at 128 tokens; with the file back it stores both
 * parts, printing both ids. */
static void durable_split_resume_checks_source_first(struct test_ctx *t)
{
	char db[512], path[512], away[600], cmd[2048];
	int status = 0;

	T_CHECK(t, reference(t));
	snprintf(db, sizeof db, "%s/durable_source.db", test_tmpdir());
	snprintf(path, sizeof path, "%s/durable_source.txt", test_tmpdir());
	snprintf(away, sizeof away, "%s.away", path);
	T_CHECK(t, write_prefix(path, 3000) == 0);
	T_CHECK(t, library_with(db, "CREATE TRIGGER stop BEFORE INSERT ON tok_chunk WHEN NEW.pos0 = "
				"128 BEGIN SELECT RAISE(ABORT, 'planted'); END") == 0);
	snprintf(cmd, sizeof cmd, "%s ingest %s --split --max-tokens 400 --db %s -t 1 --batch 64 -m %s "
		 "-q 2>/dev/null", test_sekv_bin(), path, db, test_model_path());
	char *out = test_run_cmd(cmd, &status);
	T_CHECKF(t, out && status == 1 && !strcmp(out, "1\n"), "failed ingest (%d): '%s'", status,
		 out ? out : "");
	free(out);
	T_CHECK(t, fixture_raw_exec(db, "DROP TRIGGER stop") == 0);
	snprintf(cmd, sizeof cmd, "%s ingest --resume 1 --db %s -t 1 -m %s -q 2>&1", test_sekv_bin(),
		 db, test_model_path());
	T_CHECK(t, rename(path, away) == 0);
	out = test_run_cmd(cmd, &status);
	int kept = doc_int(db, 1, "n_tok") == 128 && doc_int(db, 1, "state") == 0;
	T_CHECKF(t, out && status == 1 && strstr(out, "durable_source.txt") &&
		 strstr(out, "nothing was stored") && kept, "resume without the file (%d, kept %d): %.400s",
		 status, kept, out ? out : "");
	free(out);
	char *text = file_text(away);
	size_t len = text ? strlen(text) : 0;
	T_CHECK(t, len > 100);
	for (size_t i = len - 60; i < len; i++)
		text[i] = text[i] >= 'a' && text[i] <= 'z' ? (char)(text[i] - 'a' + 'A') : text[i];
	int written = test_write_file(path, text, len);
	free(text);
	T_CHECK(t, written == 0);
	out = test_run_cmd(cmd, &status);
	kept = doc_int(db, 1, "n_tok") == 128 && doc_int(db, 1, "state") == 0;
	T_CHECKF(t, out && status == 1 && strstr(out, "has changed since") &&
		 strstr(out, "ingest the file again with --split") && kept,
		 "resume of a changed file (%d, kept %d): %.400s", status, kept, out ? out : "");
	free(out);
	T_CHECK(t, rename(away, path) == 0);
	snprintf(cmd, sizeof cmd, "%s ingest --resume 1 --db %s -t 1 -m %s -q 2>/dev/null && %s check "
		 "--db %s 2>&1", test_sekv_bin(), db, test_model_path(), test_sekv_bin(), db);
	out = test_run_cmd(cmd, &status);
	T_CHECKF(t, out && status == 0 && !strncmp(out, "1\n2\n", 4) && strstr(out, ": ok"),
		 "resume with the file back (%d): %.400s", status, out ? out : "");
	free(out);
}

const struct test_case test_durable[] = {
	{ "durable_sigkill_then_resume_bit_identical", durable_sigkill_then_resume_bit_identical },
	{ "durable_dropped_full_kv_prefilled_again", durable_dropped_full_kv_prefilled_again },
	{ "durable_sigint_after_stored_suggests_no_resume", durable_sigint_after_stored_suggests_no_resume },
	{ "durable_two_processes_ingest_and_ask", durable_two_processes_ingest_and_ask },
	{ "durable_disk_full_ingest_then_rm", durable_disk_full_ingest_then_rm },
	{ "durable_disk_filled_by_another_then_rm", durable_disk_filled_by_another_then_rm },
	{ "durable_second_process_refused_while_ingesting", durable_second_process_refused_while_ingesting },
	{ "durable_split_part_killed_then_resumed", durable_split_part_killed_then_resumed },
	{ "durable_split_interrupted_between_parts_resumed",
	  durable_split_interrupted_between_parts_resumed },
	{ "durable_split_resume_checks_source_first", durable_split_resume_checks_source_first },
	{ NULL, NULL },
};
