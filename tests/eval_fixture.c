/* eval_fixture.c - the model, tokenizer and corpus of the eval tests
 * (eval_fixture.h). The model stays loaded until the runner exits. */
#include "tests/eval_fixture.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "app/app.h"
#include "engine/model/model.h"
#include "engine/tok/tokenizer.h"

static struct model *g_m;
static struct tok *g_tk;
static struct chat_template g_ct;

int eval_fx_load(struct test_ctx *t)
{
	struct app_opts o;
	char err[512];

	if (g_tk)
		return 1;
	if (access(test_model_path(), R_OK) != 0) {
		T_FAIL(t, "model %s missing (make test-model)", test_model_path());
		return 0;
	}
	app_opts_parse(&o, 0, NULL, err, sizeof err);
	snprintf(o.model, sizeof o.model, "%s", test_model_path());
	o.n_threads = 1;
	if (app_load(&o, &g_m, &g_tk, err, sizeof err) ||
	    chat_template_init(&g_ct, model_gguf(g_m), chat_format_of_gguf(model_gguf(g_m)), g_tk,
			       err, sizeof err)) {
		T_FAIL(t, "load: %s", err);
		return 0;
	}
	return 1;
}

const struct tok *eval_fx_tok(void)
{
	return g_tk;
}

const struct chat_template *eval_fx_tmpl(void)
{
	return &g_ct;
}

int eval_fx_corpus(struct test_ctx *t, struct eval_corpus *c)
{
	char err[256];
	memset(c, 0, sizeof *c);
	int rc = eval_corpus_add_file(c, EVAL_FX_SAMPLE, err, sizeof err);
	if (rc) {
		T_FAIL(t, "corpus: %d %s", rc, err);
		return 0;
	}
	return 1;
}

int eval_fx_count(const char *text, size_t len, struct chat_tokvec *v)
{
	char err[256];
	int n = eval_doc_tokens(g_tk, &g_ct, text, len, v, err, sizeof err);
	return n < 0 ? -1 : n;
}

const cJSON *eval_fx_find_rec(const cJSON *doc, const char *method, const char *task)
{
	const cJSON *o;
	cJSON_ArrayForEach(o, doc) {
		const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "method");
		const cJSON *k = cJSON_GetObjectItemCaseSensitive(o, "task");
		if (cJSON_IsString(m) && cJSON_IsString(k) && !strcmp(m->valuestring, method) &&
		    !strcmp(k->valuestring, task))
			return o;
	}
	return NULL;
}

double eval_fx_num(const cJSON *o, const char *k)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsNumber(x) ? x->valuedouble : NAN;
}

void eval_fx_read_text(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "rb");
	size_t k = f ? fread(buf, 1, cap - 1, f) : 0;
	if (f)
		fclose(f);
	buf[k] = 0;
}

char *eval_fx_run_eval(const char *dir, const char *args, int *st, char *tail, size_t cap)
{
	char cmd[2048];

	snprintf(cmd, sizeof cmd, "'%s' eval -m '%s' --out '%s' %s 2>&1", test_sekv_bin(), test_model_path(), dir,
		 args);
	char *out = test_run_cmd(cmd, st);
	size_t n = out ? strlen(out) : 0;
	snprintf(tail, cap, "%s", out ? out + (n > cap - 1 ? n - (cap - 1) : 0) : "");
	return out;
}
