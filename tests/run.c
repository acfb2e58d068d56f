/* run.c - the test runner: runs every table (or the tests whose name
 * contains argv[1]), prints one line per test and ends with
 * "N passed, N failed, N skipped"; exits 1 on any failure. Tables are weak
 * so a module without tests yet still links. */
#include "tests/test.h"

#include <cjson/cJSON.h>

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TABLE(name) extern const struct test_case name[] __attribute__((weak));
TABLE(test_err)
TABLE(test_gguf)
TABLE(test_quant)
TABLE(test_quant_act)
TABLE(test_gemm)
TABLE(test_tokenizer)
TABLE(test_model)
TABLE(test_sampler)
TABLE(test_sekv)
TABLE(test_store)
TABLE(test_ui)
TABLE(test_app)
TABLE(test_conv)
TABLE(test_integration)

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

int main(int argc, char **argv)
{
	const struct test_case *tables[] = {
		test_err, test_gguf, test_quant, test_quant_act, test_gemm, test_tokenizer, test_model,
		test_sampler, test_sekv, test_store, test_ui, test_app, test_conv,
		test_integration,
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
	printf("%d passed, %d failed, %d skipped\n", n_pass, n_fail, n_skip);
	return n_fail ? 1 : 0;
}
