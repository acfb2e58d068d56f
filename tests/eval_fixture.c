/* eval_fixture.c - the model, tokenizer and corpus of the eval tests
 * (eval_fixture.h). The model stays loaded until the runner exits. */
#include "tests/eval_fixture.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

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
