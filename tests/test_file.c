/* test_file.c - files opened for reading must be regular files
 * (engine/base/file.h): a FIFO (or a directory, or a device) given as the input
 * document, as -m or as --tokenizer is refused at once instead of blocking
 * in open(). Each open runs in a child process under alarm(), so a
 * regression fails the test instead of hanging the suite. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "app/extract.h"
#include "engine/base/err.h"
#include "engine/base/file.h"
#include "engine/gguf/gguf.h"
#include "engine/tok/tokenizer.h"
#include "tests/test.h"

#define GUARD_S 5    /* seconds an open may take before it counts as hung */
#define CLI_GUARD_S 30 /* the same for a whole command (it may load the model first) */

/* A FIFO in the test directory (made once); NULL when mkfifo fails. */
static const char *fifo_path(void)
{
	static char path[512];
	struct stat st;

	if (!path[0]) {
		snprintf(path, sizeof path, "%s/input.fifo", test_tmpdir());
		if (stat(path, &st) != 0 && mkfifo(path, 0600) != 0)
			return NULL;
	}
	return path;
}

/* The three opens under test; each returns its code and fills err. */
static int open_extract(const char *path, char *err, size_t errlen)
{
	struct extract_doc d;
	int rc = extract_file(path, NULL, &d, err, errlen);
	extract_doc_free(&d);
	return rc;
}

static int open_gguf(const char *path, char *err, size_t errlen)
{
	struct gguf *g = NULL;
	int rc = gguf_open(&g, path, err, errlen);
	gguf_close(g);
	return rc;
}

static int open_tok(const char *path, char *err, size_t errlen)
{
	struct tok *tk = NULL;
	int rc = tok_open_file(&tk, path, err, errlen);
	tok_close(tk);
	return rc;
}

/* Runs fn(path) in a child with an alarm. The child exits 0 when fn
 * refused the path with SEKV_EIO and "PATH: not a regular file". */
static void expect_refused(struct test_ctx *t, int (*fn)(const char *, char *, size_t), const char *path)
{
	int status;
	pid_t pid;

	T_CHECKF(t, path != NULL, "mkfifo failed");
	fflush(NULL);
	pid = fork();
	T_CHECK(t, pid >= 0);
	if (pid == 0) {
		char err[1024], want[600];
		alarm(GUARD_S);
		int rc = fn(path, err, sizeof err);
		snprintf(want, sizeof want, "%s: not a regular file", path);
		if (rc != SEKV_EIO || !strstr(err, want)) {
			fprintf(stderr, "rc %d: %s\n", rc, err);
			_exit(1);
		}
		_exit(0);
	}
	T_CHECK(t, waitpid(pid, &status, 0) == pid);
	T_CHECKF(t, !WIFSIGNALED(status), "%s: hung (killed by signal %d after %d s)", path,
		 WTERMSIG(status), GUARD_S);
	T_CHECKF(t, WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: not refused as not a regular file", path);
}

static void file_open_regular_checks_type(struct test_ctx *t)
{
	char path[512], err[1024];
	off_t size = -1;
	int fd;

	snprintf(path, sizeof path, "%s/regular.txt", test_tmpdir());
	T_CHECK(t, test_write_file(path, "twelve bytes", 12) == 0);
	T_CHECKF(t, file_open_regular(path, "test", &fd, &size, err, sizeof err) == 0, "%s", err);
	int flags = fcntl(fd, F_GETFL);
	close(fd);
	T_CHECK(t, size == 12 && flags >= 0 && !(flags & O_NONBLOCK));
	T_CHECK(t, fifo_path() != NULL);
	T_CHECK(t, file_open_regular(fifo_path(), "test", &fd, &size, err, sizeof err) == SEKV_EIO && fd == -1);
	T_CHECKF(t, strstr(err, "test: ") && strstr(err, "input.fifo: not a regular file"), "%s", err);
	T_CHECK(t, file_open_regular("/nonexistent/x", "test", &fd, NULL, err, sizeof err) == SEKV_EIO);
	T_CHECKF(t, strstr(err, "test: /nonexistent/x: open: No such file"), "%s", err);
}

static void extract_refuses_fifo_and_directory(struct test_ctx *t)
{
	expect_refused(t, open_extract, fifo_path());
	expect_refused(t, open_extract, test_tmpdir());
}

static void gguf_open_refuses_fifo(struct test_ctx *t)
{
	expect_refused(t, open_gguf, fifo_path());
	expect_refused(t, open_gguf, "/dev/null");
}

static void tok_open_file_refuses_fifo(struct test_ctx *t)
{
	expect_refused(t, open_tok, fifo_path());
	expect_refused(t, open_tok, "/dev/zero");
}

/* The same through bin/sekv, under timeout(1). */
static void cli_fifo_arguments_refused(struct test_ctx *t)
{
	static const char *const fmt[] = {
		"ingest %s --db %s/fifo.db -q", "inspect %s", "tokenize -m %s -- hi",
		"tokenize --tokenizer %s -- hi",
	};
	const char *fifo = fifo_path();
	char args[1200], cmd[2400];
	int status;

	T_CHECKF(t, fifo != NULL, "mkfifo failed");
	for (size_t i = 0; i < sizeof fmt / sizeof fmt[0]; i++) {
		snprintf(args, sizeof args, fmt[i], fifo, test_tmpdir());
		snprintf(cmd, sizeof cmd, "timeout %d %s %s 2>&1 </dev/null", CLI_GUARD_S, test_sekv_bin(), args);
		char *out = test_run_cmd(cmd, &status);
		int ok = out && status == 1 && strstr(out, "not a regular file");
		T_CHECKF(t, ok, "sekv %s: exit %d (124: hung): %s", args, status, out ? out : "");
		free(out);
	}
}

const struct test_case test_file[] = {
	{ "file_open_regular_checks_type", file_open_regular_checks_type },
	{ "extract_refuses_fifo_and_directory", extract_refuses_fifo_and_directory },
	{ "gguf_open_refuses_fifo", gguf_open_refuses_fifo },
	{ "tok_open_file_refuses_fifo", tok_open_file_refuses_fifo },
	{ "cli_fifo_arguments_refused", cli_fifo_arguments_refused },
	{ NULL, NULL },
};
