/* test_app.c - option parsing and text extraction (bad input included). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/config.h"
#include "app/extract.h"
#include "engine/err.h"
#include "store/store.h"
#include "tests/test.h"

static void opts_flags_override_env(struct test_ctx *t)
{
	struct app_opts o;
	char err[256];
	char *argv[] = { "--budget", "0.25", "--rmax", "16", "--kv", "full", "-n", "7", "3", "--", "-q" };

	setenv("SEKV_BUDGET", "0.5", 1);
	setenv("SEKV_THREADS", "3", 1);
	int rc = app_opts_parse(&o, 11, argv, err, sizeof err);
	unsetenv("SEKV_BUDGET");
	unsetenv("SEKV_THREADS");
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECK(t, o.budget == 0.25 && o.budget_set);
	T_CHECK(t, o.n_threads == 3); /* env, no flag */
	T_CHECK(t, o.r_max == 16 && o.kv_full == 1 && o.n_predict == 7);
	T_CHECK(t, o.n_args == 2 && !strcmp(o.args[0], "3") && !strcmp(o.args[1], "-q"));
	T_CHECK(t, o.quiet == 0);
}

static void opts_bad_values_rejected(struct test_ctx *t)
{
	struct app_opts o;
	char err[256];
	char *a1[] = { "--budget", "1.5" };
	char *a2[] = { "--kv", "half" };
	char *a3[] = { "--rmax" };
	char *a4[] = { "--frobnicate", "1" };
	char *a5[] = { "-n", "12x" };

	T_CHECK(t, app_opts_parse(&o, 2, a1, err, sizeof err) == SEKV_EINVAL && strstr(err, "--budget"));
	T_CHECK(t, app_opts_parse(&o, 2, a2, err, sizeof err) == SEKV_EINVAL && strstr(err, "--kv"));
	T_CHECK(t, app_opts_parse(&o, 1, a3, err, sizeof err) == SEKV_EINVAL && strstr(err, "needs a value"));
	T_CHECK(t, app_opts_parse(&o, 2, a4, err, sizeof err) == SEKV_EINVAL && strstr(err, "unknown option"));
	T_CHECK(t, app_opts_parse(&o, 2, a5, err, sizeof err) == SEKV_EINVAL);
}

static void app_parse_doc_id_positive_only(struct test_ctx *t)
{
	static const char *const bad[] = { "0", "-3", "12x", "", "x", "1.5", "99999999999999999999" };
	int64_t id = 7;

	T_CHECK(t, app_parse_doc_id("12", &id) == 0 && id == 12);
	T_CHECK(t, app_parse_doc_id("9223372036854775807", &id) == 0 && id == INT64_MAX);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		id = 7;
		T_CHECKF(t, app_parse_doc_id(bad[i], &id) == -1 && id == 7, "'%s' accepted", bad[i]);
	}
}

/* Runs "bin/sekv ARGS 2>&1"; returns the output (caller frees) and the exit
 * status in *status, or NULL. */
static char *sekv_run(const char *args, int *status)
{
	char cmd[4096];

	snprintf(cmd, sizeof cmd, "%s %s 2>&1", test_sekv_bin(), args);
	return test_run_cmd(cmd, status);
}

static void cli_rm_rejects_bad_document_id(struct test_ctx *t)
{
	struct store *st = NULL;
	char db[512], args[1024], err[256];
	int status;

	snprintf(db, sizeof db, "%s/rm-ids.db", test_tmpdir());
	T_CHECKF(t, store_open(&st, db, err, sizeof err) == 0, "%s", err);
	store_close(st);
	snprintf(args, sizeof args, "rm --db %s 0 -- -3 1x", db);
	char *out = sekv_run(args, &status);
	T_CHECK(t, out != NULL);
	int ok = status == 2 && strstr(out, "sekv rm: '0' is not a document id (see 'sekv ls')") &&
		 strstr(out, "'-3' is not a document id") && strstr(out, "'1x' is not a document id");
	T_CHECKF(t, ok, "exit %d: %s", status, out);
	free(out);
}

static int write_file(const char *path, const void *data, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	size_t w = fwrite(data, 1, n, f);
	fclose(f);
	return w == n ? 0 : -1;
}

static void extract_repairs_utf8_and_crlf(struct test_ctx *t)
{
	char path[512], err[256], *text = NULL;
	size_t len = 0, bad = 0;
	const char in[] = "caf\xc3\xa9\r\nbad \xff byte\rend \xe2\x82"; /* truncated euro sign */

	snprintf(path, sizeof path, "%s/utf8.txt", test_tmpdir());
	T_CHECK(t, write_file(path, in, sizeof in - 1) == 0);
	T_CHECKF(t, extract_text_file(path, &text, &len, &bad, err, sizeof err) == 0, "%s", err);
	int ok = !strcmp(text, "caf\xc3\xa9\nbad \xef\xbf\xbd byte\nend \xef\xbf\xbd\xef\xbf\xbd") && bad == 3 &&
		 len == strlen(text);
	free(text);
	T_CHECK(t, ok);
}

static void extract_rejects_binary_pdf_empty_missing(struct test_ctx *t)
{
	char path[512], err[256], *text = NULL;
	size_t len, bad;

	snprintf(path, sizeof path, "%s/bin.dat", test_tmpdir());
	T_CHECK(t, write_file(path, "ab\0cd", 5) == 0);
	T_CHECK(t, extract_text_file(path, &text, &len, &bad, err, sizeof err) == SEKV_EFORMAT && !text);
	T_CHECK(t, strstr(err, "bin.dat") && strstr(err, "NUL"));
	snprintf(path, sizeof path, "%s/doc.pdf", test_tmpdir());
	T_CHECK(t, write_file(path, "%PDF-1.7\n", 9) == 0);
	T_CHECK(t, extract_text_file(path, &text, &len, &bad, err, sizeof err) == SEKV_EUNSUP);
	snprintf(path, sizeof path, "%s/empty.txt", test_tmpdir());
	T_CHECK(t, write_file(path, "", 0) == 0);
	T_CHECK(t, extract_text_file(path, &text, &len, &bad, err, sizeof err) == SEKV_EINVAL);
	snprintf(path, sizeof path, "%s/none.txt", test_tmpdir());
	T_CHECK(t, extract_text_file(path, &text, &len, &bad, err, sizeof err) == SEKV_EIO);
	T_CHECK(t, strstr(err, "none.txt") != NULL);
}

const struct test_case test_app[] = {
	{ "opts_flags_override_env", opts_flags_override_env },
	{ "opts_bad_values_rejected", opts_bad_values_rejected },
	{ "app_parse_doc_id_positive_only", app_parse_doc_id_positive_only },
	{ "cli_rm_rejects_bad_document_id", cli_rm_rejects_bad_document_id },
	{ "extract_repairs_utf8_and_crlf", extract_repairs_utf8_and_crlf },
	{ "extract_rejects_binary_pdf_empty_missing", extract_rejects_binary_pdf_empty_missing },
	{ NULL, NULL },
};
