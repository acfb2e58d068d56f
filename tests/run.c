/* run.c - the test runner: runs every table (or the tests whose name
 * contains argv[1]), prints one line per test and ends with
 * "N passed, N failed, N skipped"; exits 1 on any failure. Tables are weak
 * so a module without tests yet still links. The run's temporary folder
 * (test_tmpdir: libraries, each with its 32 MiB reserve) is removed at the
 * end unless SEKV_TEST_KEEP is set (its path is then printed). */
#include "tests/test.h"

#include <cjson/cJSON.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define TABLE(name) extern const struct test_case name[] __attribute__((weak));
TABLE(test_err)
TABLE(test_utf8)
TABLE(test_chat)
TABLE(test_clock)
TABLE(test_fmt)
TABLE(test_file)
TABLE(test_sha256)
TABLE(test_gguf)
TABLE(test_gguf_malformed)
TABLE(test_quant)
TABLE(test_quant_act)
TABLE(test_gemm)
TABLE(test_arena)
TABLE(test_backend)
TABLE(test_tokenizer)
TABLE(test_bpe)
TABLE(test_model)
TABLE(test_arch)
TABLE(test_families)
TABLE(test_sampler)
TABLE(test_sekv)
TABLE(test_sekv_attend)
TABLE(test_sekv_budget)
TABLE(test_train)
TABLE(test_kv_select)
TABLE(test_kv_subset)
TABLE(test_kv_quest)
TABLE(test_kv_shadow)
TABLE(test_evidence)
TABLE(test_store_doc)
TABLE(test_store_mem)
TABLE(test_store_format)
TABLE(test_store_fault)
TABLE(test_store_session)
TABLE(test_store_durable)
TABLE(test_store_disk)
TABLE(test_ui)
TABLE(test_app)
TABLE(test_history)
TABLE(test_extract)
TABLE(test_conv)
TABLE(test_eval)
TABLE(test_eval_probe)
TABLE(test_integration)
TABLE(test_durable)
TABLE(test_session)
TABLE(test_import)
TABLE(test_ingest)

void test_fill_random(float *y, size_t n, unsigned long long seed)
{
	unsigned long long s = seed * 2654435761u + 1;

	for (size_t i = 0; i < n; i++) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		y[i] = (float)((double)(s >> 11) / 4503599627370496.0 - 1.0);
	}
}

const char *test_model_path(void)
{
	const char *p = getenv("SEKV_MODEL");
	return p && *p ? p : "assets/models/gemma-3-270m-q4_k_m.gguf";
}

cJSON *test_json_load(struct test_ctx *t, const char *path)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n = -1;
	cJSON *doc;

	if (!f) {
		T_FAIL(t, "cannot open %s (run from the repository root)", path);
		return NULL;
	}
	if (fseek(f, 0, SEEK_END) == 0)
		n = ftell(f);
	if (n >= 0 && fseek(f, 0, SEEK_SET) == 0)
		buf = malloc((size_t)n + 1);
	if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		fclose(f);
		T_FAIL(t, "cannot read %s", path);
		return NULL;
	}
	fclose(f);
	buf[n] = 0;
	doc = cJSON_Parse(buf);
	free(buf);
	if (!doc)
		T_FAIL(t, "%s: invalid JSON", path);
	return doc;
}

const char *test_sekv_bin(void)
{
	static char path[4096];
	if (!path[0]) {
		ssize_t n = readlink("/proc/self/exe", path, sizeof path - 16);
		char *slash = n > 0 ? (path[n] = 0, strrchr(path, '/')) : NULL;
		if (slash)
			strcpy(slash + 1, "sekv");
		else
			strcpy(path, "./bin/sekv");
	}
	return path;
}

char *test_run_cmd(const char *cmd, int *status)
{
	FILE *p = popen(cmd, "r");
	size_t n = 0, cap = 1 << 16, r;
	char *buf = malloc(cap);

	*status = -1;
	if (!p || !buf) {
		free(buf);
		if (p)
			pclose(p);
		return NULL;
	}
	while ((r = fread(buf + n, 1, cap - 1 - n, p)) > 0) {
		n += r;
		if (n + 1 >= cap) {
			char *nb = realloc(buf, cap *= 2);
			if (!nb)
				break;
			buf = nb;
		}
	}
	buf[n] = 0;
	int st = pclose(p);
	*status = st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	return buf;
}

int test_write_file(const char *path, const void *data, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	size_t w = fwrite(data, 1, n, f);
	return fclose(f) == 0 && w == n ? 0 : -1;
}

int test_has_controls(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;

	for (size_t i = 0; i < n; i++)
		if (u[i] == 0x1b || u[i] == 0x07 || u[i] == 0x7f || u[i] == '\r' ||
		    (u[i] == 0xc2 && i + 1 < n && u[i + 1] >= 0x80 && u[i + 1] <= 0x9f))
			return 1;
	return 0;
}

const char *test_tmpdir(void)
{
	static char dir[256];
	if (!dir[0]) {
		const char *base = getenv("TMPDIR");
		snprintf(dir, sizeof dir, "%s/sekv-tests-XXXXXX", base && *base ? base : "/tmp");
		if (!mkdtemp(dir)) {
			perror("mkdtemp");
			exit(2);
		}
	}
	return dir;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	if (remove(path) != 0)
		perror(path);
	return 0;
}

/* The run's temporary folder and what the tests left in it; FTW_MOUNT:
 * never into a file system a test left mounted there. */
static void remove_tmpdir(void)
{
	const char *keep = getenv("SEKV_TEST_KEEP");
	struct stat st;

	if (stat(test_tmpdir(), &st) != 0)
		return;
	if (keep && *keep) {
		printf("kept %s\n", test_tmpdir());
		return;
	}
	nftw(test_tmpdir(), remove_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

int main(int argc, char **argv)
{
	const struct test_case *tables[] = {
		test_err, test_utf8, test_chat, test_clock, test_fmt, test_file, test_sha256, test_gguf, test_gguf_malformed,
		test_quant, test_quant_act, test_gemm, test_arena, test_backend, test_tokenizer, test_bpe,
		test_model, test_arch, test_families, test_sampler, test_sekv, test_sekv_attend, test_sekv_budget, test_train, test_kv_select, test_kv_subset, test_kv_quest, test_kv_shadow, test_evidence, test_store_doc, test_store_mem,
		test_store_format, test_store_fault, test_store_session, test_store_durable, test_store_disk, test_ui, test_app, test_history, test_extract, test_conv,
		test_eval, test_eval_probe, test_integration, test_durable, test_session, test_import, test_ingest,
	};
	const char *pat = argc > 1 ? argv[1] : NULL;
	int n_pass = 0, n_fail = 0, n_skip = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
		if (!tables[i])
			continue;
		for (const struct test_case *tc = tables[i]; tc->name; tc++) {
			struct test_ctx t = {0};
			if (pat && !strstr(tc->name, pat))
				continue;
			tc->fn(&t);
			if (t.failed) {
				printf("FAIL %s %s\n", tc->name, t.msg);
				n_fail++;
			} else if (t.skipped) {
				printf("skip %s: %s\n", tc->name, t.msg);
				n_skip++;
			} else {
				printf("ok %s\n", tc->name);
				n_pass++;
			}
		}
	}
	remove_tmpdir();
	printf("%d passed, %d failed, %d skipped\n", n_pass, n_fail, n_skip);
	return n_fail ? 1 : 0;
}
