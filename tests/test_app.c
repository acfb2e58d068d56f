/* test_app.c - option parsing and text extraction (bad input included). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "app/app.h"
#include "app/config.h"
#include "app/extract.h"
#include "engine/base/err.h"
#include "engine/conv/sampler.h"
#include "engine/sekv/sekv.h"
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
	T_CHECK(t, o.r_max == 16 && o.kv == APP_KV_FULL && o.n_predict == 7);
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

/* Every --kv value parses to its method, whose name is the value again;
 * a bad one lists them all. */
static void opts_kv_methods_round_trip(struct test_ctx *t)
{
	const char *names[] = { "sekv", "full", "streaming", "snapkv", "h2o", "quest", "summary", "shadowkv" };
	struct app_opts o;
	char err[256];

	T_CHECK(t, sizeof names / sizeof *names == APP_KV_COUNT);
	for (int i = 0; i < APP_KV_COUNT; i++) {
		char *argv[] = { "--kv", (char *)names[i] };
		T_CHECKF(t, app_opts_parse(&o, 2, argv, err, sizeof err) == 0 && o.kv == i &&
			 !strcmp(app_kv_name(o.kv), names[i]), "--kv %s: %s", names[i], err);
	}
	T_CHECK(t, !strcmp(app_kv_name(APP_KV_COUNT), "?") && !strcmp(app_kv_name(-1), "?"));
	char *bad[] = { "--kv", "snap" };
	T_CHECK(t, app_opts_parse(&o, 2, bad, err, sizeof err) == SEKV_EINVAL);
	T_CHECKF(t, !strcmp(err, "--kv snap: expected one of sekv|full|streaming|snapkv|h2o|quest|summary|shadowkv"),
		 "%s", err);
}

/* The environment variables a test changes, saved to be put back. */
struct env_save {
	const char *name[4];
	char *value[4];
	int n;
};

static void env_unset(struct env_save *sv, const char *name)
{
	const char *v = getenv(name);

	sv->name[sv->n] = name;
	sv->value[sv->n++] = v ? strdup(v) : NULL;
	unsetenv(name);
}

static void env_restore(struct env_save *sv)
{
	for (int i = 0; i < sv->n; i++) {
		if (sv->value[i])
			setenv(sv->name[i], sv->value[i], 1);
		else
			unsetenv(sv->name[i]);
		free(sv->value[i]);
	}
	sv->n = 0;
}

/* Defaults the engine also has come from its *_default_params. */
static void opts_defaults_from_engine_params(struct test_ctx *t)
{
	struct env_save sv = { .n = 0 };
	struct app_opts o;
	struct sekv_params sp;
	struct sampler_params smp;
	char err[256];

	env_unset(&sv, "SEKV_MODEL");
	env_unset(&sv, "SEKV_DB");
	env_unset(&sv, "SEKV_THREADS");
	env_unset(&sv, "SEKV_BUDGET");
	sekv_default_params(&sp);
	sampler_default_params(&smp);
	int rc = app_opts_parse(&o, 0, NULL, err, sizeof err);
	env_restore(&sv);
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECK(t, o.budget == sp.budget && !o.budget_set && o.r_max == sp.r_max && !o.r_max_set);
	T_CHECK(t, o.n_recent == sp.n_recent && o.alpha == sp.alpha);
	T_CHECK(t, o.temperature == smp.temperature && o.seed == smp.seed);
	T_CHECK(t, o.n_predict == 256 && o.n_batch == 256 && o.repeat_penalty == 1.1f);
	T_CHECK(t, o.n_threads >= 1 && o.kv == APP_KV_SEKV && o.act_f32 == 0 && o.model[0]);
	T_CHECK(t, !o.tokenizer && !o.prompt && !o.title && !o.json && !o.quiet && !o.help && !o.bos);
}

static void opts_values_and_limits(struct test_ctx *t)
{
	struct app_opts o;
	char err[256];
	char *ok[] = { "--seed", "9223372036854775807", "--act", "f32", "--kv", "sekv", "-t", "1024",
		       "--temp", "0.5", "--alpha", "2", "--recent", "0", "--batch", "1", "-p", "hi",
		       "--title", "T", "--tokenizer", "x.model", "--model", "m.gguf", "--db", "l.db",
		       "--bos", "--json", "--quiet", "--help", "--n-predict", "0", "--repeat-penalty", "1" };
	char *b1[] = { "-t", "0" };
	char *b2[] = { "--budget", "0" };
	char *b3[] = { "-m", "" };
	char *b4[] = { "--act", "f16" };
	char *b5[] = { "--seed", "-1" };

	T_CHECKF(t, app_opts_parse(&o, (int)(sizeof ok / sizeof ok[0]), ok, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, o.seed == 9223372036854775807ull && o.act_f32 == 1 && o.kv == APP_KV_SEKV && o.n_threads == 1024);
	T_CHECK(t, o.temperature == 0.5f && o.alpha == 2.0f && o.n_recent == 0 && o.n_batch == 1);
	T_CHECK(t, !strcmp(o.prompt, "hi") && !strcmp(o.title, "T") && !strcmp(o.tokenizer, "x.model"));
	T_CHECK(t, !strcmp(o.model, "m.gguf") && !strcmp(o.db, "l.db") && o.n_predict == 0);
	T_CHECK(t, o.bos && o.json && o.quiet && o.help && o.repeat_penalty == 1.0f && o.n_args == 0);
	T_CHECK(t, app_opts_parse(&o, 2, b1, err, sizeof err) == SEKV_EINVAL);
	T_CHECKF(t, strstr(err, "-t 0") && strstr(err, "[1, 1024]"), "%s", err);
	T_CHECK(t, app_opts_parse(&o, 2, b2, err, sizeof err) == SEKV_EINVAL);
	T_CHECKF(t, strstr(err, "--budget 0: expected a fraction of the full KV cache in (0, 1]"), "%s", err);
	T_CHECK(t, app_opts_parse(&o, 2, b3, err, sizeof err) == SEKV_EINVAL);
	T_CHECKF(t, !strcmp(err, "-m: empty path"), "%s", err);
	T_CHECK(t, app_opts_parse(&o, 2, b4, err, sizeof err) == SEKV_EINVAL);
	T_CHECKF(t, !strcmp(err, "--act f16: expected 'q8' or 'f32'"), "%s", err);
	T_CHECK(t, app_opts_parse(&o, 2, b5, err, sizeof err) == SEKV_EINVAL);
}

/* A malformed environment value leaves the default, as before the table. */
static void opts_bad_env_ignored(struct test_ctx *t)
{
	struct env_save sv = { .n = 0 };
	struct app_opts o, d;
	char err[256];

	env_unset(&sv, "SEKV_THREADS");
	env_unset(&sv, "SEKV_BUDGET");
	int rc = app_opts_parse(&d, 0, NULL, err, sizeof err);
	setenv("SEKV_THREADS", "0", 1);
	setenv("SEKV_BUDGET", "2", 1);
	rc |= app_opts_parse(&o, 0, NULL, err, sizeof err);
	env_restore(&sv);
	T_CHECK(t, rc == 0 && o.n_threads == d.n_threads && o.budget == d.budget && !o.budget_set);
}

/* Help text of one sub-command's options, from the table. */
static char *help_dup(unsigned cmds)
{
	char *buf = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&buf, &n);

	if (!f)
		return NULL;
	app_opts_help(f, cmds);
	fclose(f);
	return buf;
}

static void opts_help_lists_each_commands_options(struct test_ctx *t)
{
	char *ls = help_dup(APP_CMD_LS), *ask = help_dup(APP_CMD_ASK), *all = help_dup(APP_CMD_ALL);
	int ok = ls && ask && all && strstr(ls, "--db FILE") && strstr(ls, "env SEKV_DB") &&
		 !strstr(ls, "--budget") && !strstr(ls, "--json") &&
		 strstr(ask, "--json") && strstr(ask, "--budget F") && strstr(ask, "env SEKV_BUDGET; default 0.1") &&
		 strstr(ask, "-n, --n-predict N") && strstr(ask, "default 42") && !strstr(ask, "--title") &&
		 strstr(all, "--title") && strstr(all, "--bos") && strstr(all, "--act q8|f32");
	T_CHECKF(t, ok, "ls:\n%s\nask:\n%s", ls ? ls : "", ask ? ask : "");
	free(ls);
	free(ask);
	free(all);
}

/* Without HOME and an absolute XDG_DATA_HOME there is no library path:
 * an error naming what to set, not SQLite's vanishing temporary database. */
static void opts_no_library_path_is_an_error(struct test_ctx *t)
{
	struct env_save sv = { .n = 0 };
	struct app_opts o1, o2, o3;
	struct store *st = NULL;
	char err[256], longhome[5000];
	int rc1, rc2, rc3;

	env_unset(&sv, "HOME");
	env_unset(&sv, "XDG_DATA_HOME");
	env_unset(&sv, "SEKV_DB");
	rc1 = app_opts_parse(&o1, 0, NULL, err, sizeof err);
	setenv("XDG_DATA_HOME", "relative/dir", 1); /* invalid per XDG: ignored */
	rc2 = app_opts_parse(&o2, 0, NULL, err, sizeof err);
	memset(longhome, 'h', sizeof longhome - 1);
	longhome[0] = '/';
	longhome[sizeof longhome - 1] = 0;
	setenv("HOME", longhome, 1);               /* too long for a path */
	rc3 = app_opts_parse(&o3, 0, NULL, err, sizeof err);
	env_restore(&sv);
	T_CHECK(t, rc1 == 0 && rc2 == 0 && rc3 == 0);
	T_CHECKF(t, o1.db[0] == 0 && o2.db[0] == 0 && o3.db[0] == 0, "db '%s' '%s' '%.40s'", o1.db, o2.db, o3.db);
	T_CHECK(t, app_check_db(&o1, err, sizeof err) == SEKV_EINVAL);
	T_CHECKF(t, strstr(err, "--db") && strstr(err, "SEKV_DB") && strstr(err, "XDG_DATA_HOME") &&
		 strstr(err, "HOME"), "%s", err);
	snprintf(o1.db, sizeof o1.db, "x.db");
	T_CHECK(t, app_check_db(&o1, err, sizeof err) == 0);
	T_CHECK(t, store_open(&st, "", err, sizeof err) == SEKV_EINVAL && st == NULL);
	T_CHECKF(t, strstr(err, "empty path"), "%s", err);
}

static void cli_no_library_path_fails(struct test_ctx *t)
{
	char doc[512], args[1024];
	int status;

	snprintf(doc, sizeof doc, "%s/nolib.txt", test_tmpdir());
	T_CHECK(t, test_write_file(doc, "A short document.\n", 18) == 0);
	static const char *const cmds[] = { "ingest %s -q", "ls", "rm 1", "ask 1 why", "chat 1" };
	for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
		char cmd[1200];
		snprintf(args, sizeof args, cmds[i], doc);
		snprintf(cmd, sizeof cmd, "env -u HOME -u XDG_DATA_HOME -u SEKV_DB %s %s 2>&1 </dev/null",
			 test_sekv_bin(), args);
		char *out = test_run_cmd(cmd, &status);
		int ok = out && status == 1 && strstr(out, "no path") && strstr(out, "SEKV_DB");
		T_CHECKF(t, ok, "%s: exit %d: %s", args, status, out ? out : "");
		free(out);
	}
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

static void cli_help_from_option_table(struct test_ctx *t)
{
	int s1, s2, s3, s4;
	char *h1 = sekv_run("help ask", &s1), *h2 = sekv_run("ls --help", &s2);
	char *h3 = sekv_run("help nope", &s3), *h4 = sekv_run("ask --frobnicate 1 2 x", &s4);
	int ok = h1 && h2 && h3 && h4 && s1 == 0 && strstr(h1, "usage: sekv ask DOC QUESTION") &&
		 strstr(h1, "--json") && strstr(h1, "--budget F") && s2 == 0 && strstr(h2, "--db FILE") &&
		 !strstr(h2, "--json") && s3 == 2 && strstr(h3, "unknown command 'nope'") && s4 == 2 &&
		 strstr(h4, "unknown option --frobnicate");
	T_CHECKF(t, ok, "%d %d %d %d\n%s\n%s", s1, s2, s3, s4, h1 ? h1 : "", h2 ? h2 : "");
	/* a mistyped command gets one line naming the likely one, not the help */
	int s5;
	char *h5 = sekv_run("list", &s5);
	T_CHECKF(t, h5 && s5 == 2 && strstr(h5, "unknown command 'list' (did you mean 'ls'?)") &&
		 !strstr(h5, "usage:") && (!strchr(h5, '\n') || !strchr(h5, '\n')[1]), "%d: %s", s5,
		 h5 ? h5 : "");
	free(h5);
	free(h1);
	free(h2);
	free(h3);
	free(h4);
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

/* A file name is outside text too: errors that quote it stay inert. */
static void cli_error_messages_inert(struct test_ctx *t)
{
	char args[1024];
	int status;

	snprintf(args, sizeof args, "ingest --db %s/inert.db '%s/no\033]0;pwned\007\033[2J.txt'",
		 test_tmpdir(), test_tmpdir());
	char *out = sekv_run(args, &status);
	T_CHECK(t, out != NULL);
	int ok = status == 1 && strstr(out, "]0;pwned") && !test_has_controls(out, strlen(out));
	T_CHECKF(t, ok, "exit %d: %s", status, out);
	free(out);
}

static void app_print_inert_keeps_text_drops_controls(struct test_ctx *t)
{
	static const char in[] = "a\x1b]52;c;SGk=\x07" "b\tc\n\xc2\x9b" "31m\x7f";
	static const char want[] = "a]52;c;SGk=b\tc\n31m";
	char *buf = NULL, *long_in = malloc(601);
	size_t n = 0;
	FILE *f = open_memstream(&buf, &n);

	T_CHECK(t, f && long_in);
	app_print_inert(f, in, sizeof in - 1);
	/* 300 two-byte characters: chunk boundaries never cut one */
	for (int i = 0; i < 300; i++)
		memcpy(long_in + 2 * i, "\xc3\xa9", 2);
	long_in[600] = 0;
	app_print_inert(f, long_in, 600);
	fclose(f);
	size_t w = sizeof want - 1;
	int ok = n == w + 600 && !memcmp(buf, want, w) && !memcmp(buf + w, long_in, 600) &&
		 !test_has_controls(buf, n);
	free(long_in);
	T_CHECKF(t, ok, "n %zu: %.40s", n, buf ? buf : "");
	free(buf);
}

static void app_json_inert_escapes_del_and_c1(struct test_ctx *t)
{
	static const char s[] = "esc\x1b]0;x\x07 del\x7f csi\xc2\x9b" "2J nel\xc2\x85 nbsp\xc2\xa0 \xc3\xa9";
	cJSON *j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "answer", s);
	char *raw = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	T_CHECK(t, raw != NULL);
	char *safe = app_json_inert_dup(raw);
	/* cJSON alone leaves DEL and C1 raw: the reason for the escaping */
	int raw_bad = test_has_controls(raw, strlen(raw));
	free(raw);
	T_CHECK(t, safe != NULL);
	int ok = !test_has_controls(safe, strlen(safe)) && strstr(safe, "\\u007f") && strstr(safe, "\\u009b") &&
		 strstr(safe, "\\u0085") && strstr(safe, "\xc2\xa0") && strstr(safe, "\\u001b");
	cJSON *back = cJSON_Parse(safe);
	cJSON *a = back ? cJSON_GetObjectItem(back, "answer") : NULL;
	ok = ok && raw_bad && cJSON_IsString(a) && !strcmp(a->valuestring, s);
	T_CHECKF(t, ok, "%s", safe);
	cJSON_Delete(back);
	free(safe);
}

static void extract_repairs_utf8_and_crlf(struct test_ctx *t)
{
	char path[512], err[256];
	struct extract_doc d;
	const char in[] = "caf\xc3\xa9\r\nbad \xff byte\rend \xe2\x82"; /* truncated euro sign */

	snprintf(path, sizeof path, "%s/utf8.txt", test_tmpdir());
	T_CHECK(t, test_write_file(path, in, sizeof in - 1) == 0);
	T_CHECKF(t, extract_file(path, NULL, &d, err, sizeof err) == 0, "%s", err);
	int ok = !strcmp(d.text, "caf\xc3\xa9\nbad \xef\xbf\xbd byte\nend \xef\xbf\xbd\xef\xbf\xbd") &&
		 d.n_replaced == 3 && d.len == strlen(d.text) && !strcmp(d.encoding, "UTF-8") && !d.n_page;
	extract_doc_free(&d);
	T_CHECK(t, ok);
}

static void extract_rejects_binary_pdf_empty_missing(struct test_ctx *t)
{
	char path[512], err[256];
	struct extract_doc d;

	snprintf(path, sizeof path, "%s/bin.dat", test_tmpdir());
	T_CHECK(t, test_write_file(path, "ab\0cd", 5) == 0);
	T_CHECK(t, extract_file(path, NULL, &d, err, sizeof err) == SEKV_EFORMAT && !d.text);
	T_CHECK(t, strstr(err, "bin.dat") && strstr(err, "NUL"));
	snprintf(path, sizeof path, "%s/doc.pdf", test_tmpdir());
	T_CHECK(t, test_write_file(path, "%PDF-1.7\n", 9) == 0);
	T_CHECKF(t, extract_file(path, NULL, &d, err, sizeof err) == SEKV_EFORMAT && !d.text, "%s", err);
	T_CHECKF(t, strstr(err, "doc.pdf") && strstr(err, "not a readable PDF"), "%s", err);
	snprintf(path, sizeof path, "%s/empty.txt", test_tmpdir());
	T_CHECK(t, test_write_file(path, "", 0) == 0);
	T_CHECK(t, extract_file(path, NULL, &d, err, sizeof err) == SEKV_EINVAL);
	extract_doc_free(&d);
	snprintf(path, sizeof path, "%s/blank.txt", test_tmpdir());
	T_CHECK(t, test_write_file(path, "\n\n  \r\n\t\n", 8) == 0);
	T_CHECK(t, extract_file(path, NULL, &d, err, sizeof err) == SEKV_EINVAL);
	extract_doc_free(&d);
	T_CHECK(t, strstr(err, "blank.txt") && strstr(err, "white space"));
	snprintf(path, sizeof path, "%s/none.txt", test_tmpdir());
	T_CHECK(t, extract_file(path, NULL, &d, err, sizeof err) == SEKV_EIO);
	T_CHECK(t, strstr(err, "none.txt") != NULL);
}

const struct test_case test_app[] = {
	{ "opts_flags_override_env", opts_flags_override_env },
	{ "opts_bad_values_rejected", opts_bad_values_rejected },
	{ "opts_kv_methods_round_trip", opts_kv_methods_round_trip },
	{ "opts_defaults_from_engine_params", opts_defaults_from_engine_params },
	{ "opts_values_and_limits", opts_values_and_limits },
	{ "opts_bad_env_ignored", opts_bad_env_ignored },
	{ "opts_help_lists_each_commands_options", opts_help_lists_each_commands_options },
	{ "opts_no_library_path_is_an_error", opts_no_library_path_is_an_error },
	{ "cli_no_library_path_fails", cli_no_library_path_fails },
	{ "app_parse_doc_id_positive_only", app_parse_doc_id_positive_only },
	{ "cli_help_from_option_table", cli_help_from_option_table },
	{ "cli_rm_rejects_bad_document_id", cli_rm_rejects_bad_document_id },
	{ "cli_error_messages_inert", cli_error_messages_inert },
	{ "app_print_inert_keeps_text_drops_controls", app_print_inert_keeps_text_drops_controls },
	{ "app_json_inert_escapes_del_and_c1", app_json_inert_escapes_del_and_c1 },
	{ "extract_repairs_utf8_and_crlf", extract_repairs_utf8_and_crlf },
	{ "extract_rejects_binary_pdf_empty_missing", extract_rejects_binary_pdf_empty_missing },
	{ NULL, NULL },
};
