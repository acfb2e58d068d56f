/* test_arch.c - the forward pass of every family in the architecture table
 * against an independent reference: tests/data/arch/<case>.gguf are small
 * random-weight models written by tools/gen_arch_goldens.py with the
 * tensor names and keys llama.cpp's converter writes, and <case>.json
 * holds the logits a float64 numpy forward (written from HF transformers'
 * semantics, not from this code) gives at several positions of a fixed
 * token sequence longer than the sliding windows.
 *
 * Each case is checked three ways: token-by-token decode with fp32
 * activations (max |logit error| <= ARCH_TOL * the logits' spread), the
 * same with int8 activations (decode's default: top-1 equal, error <=
 * ARCH_TOL_Q8 * spread), and a one-batch prefill (its last logits).
 */
#include "tests/test.h"

#include "engine/base/err.h"
#include "engine/model/model.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARCH_TOL 2e-3     /* fp32 activations: summation order and fp16 KV rows */
#define ARCH_TOL_Q8 3e-2  /* int8-quantised activations (one-token matmuls) */
#define ARCH_MAX_TOK 512

struct arch_golden {
	cJSON *root;
	int32_t tok[ARCH_MAX_TOK];
	int n_tok;
	const cJSON *pos;   /* array of positions */
	const cJSON *logit; /* array of arrays [n_vocab] */
};

static int golden_load(struct test_ctx *t, const char *name, struct arch_golden *g)
{
	char path[256];
	const cJSON *tk;

	memset(g, 0, sizeof *g);
	snprintf(path, sizeof path, "tests/data/arch/%s.json", name);
	if (!(g->root = test_json_load(t, path)))
		return -1;
	tk = cJSON_GetObjectItemCaseSensitive(g->root, "tokens");
	g->pos = cJSON_GetObjectItemCaseSensitive(g->root, "positions");
	g->logit = cJSON_GetObjectItemCaseSensitive(g->root, "logits");
	if (!cJSON_IsArray(tk) || !cJSON_IsArray(g->pos) || !cJSON_IsArray(g->logit) ||
	    cJSON_GetArraySize(g->pos) != cJSON_GetArraySize(g->logit) ||
	    cJSON_GetArraySize(tk) < 2 || cJSON_GetArraySize(tk) > ARCH_MAX_TOK) {
		T_FAIL(t, "%s: tokens, positions or logits missing or malformed", path);
		return -1;
	}
	for (const cJSON *e = tk->child; e; e = e->next)
		g->tok[g->n_tok++] = (int32_t)e->valuedouble;
	return 0;
}

/* max |got - want| / (max want - min want) over one row of n logits. */
static double rel_err(const float *got, const cJSON *want, int n, int *argmax_same)
{
	double lo = INFINITY, hi = -INFINITY, e = 0;
	int i = 0, ag = 0, aw = 0;

	for (const cJSON *w = want->child; w && i < n; w = w->next, i++) {
		double v = w->valuedouble;
		lo = v < lo ? v : lo;
		hi = v > hi ? v : hi;
		e = fabs(got[i] - v) > e || isnan(got[i]) ? (isnan(got[i]) ? INFINITY : fabs(got[i] - v)) : e;
		if (got[i] > got[ag])
			ag = i;
		if (v > cJSON_GetArrayItem(want, aw)->valuedouble)
			aw = i;
	}
	*argmax_same = ag == aw;
	return i == n ? e / (hi - lo > 0 ? hi - lo : 1) : INFINITY;
}

/* Decodes the golden tokens one by one on exact rows and checks the logits
 * at the golden positions; returns the worst relative error. */
static double decode_check(struct test_ctx *t, struct model *m, const struct arch_golden *g,
			   int need_top1)
{
	const struct model_hparams *hp = model_hparams(m);
	struct model_state *s = NULL;
	float *lg = malloc(sizeof(float) * (size_t)hp->n_vocab);
	double worst = 0;
	char err[256];
	int k = 0;

	if (!lg || model_state_new(&s, m, g->n_tok, 8, 1, err, sizeof err)) {
		T_FAIL(t, "state: %s", err);
		free(lg);
		return INFINITY;
	}
	const cJSON *p = g->pos->child, *row = g->logit->child;
	for (int i = 0; i < g->n_tok && p; i++) {
		if (model_decode(m, s, g->tok[i], NULL, lg, err, sizeof err)) {
			T_FAIL(t, "decode at %d: %s", i, err);
			worst = INFINITY;
			break;
		}
		if ((int)p->valuedouble != i)
			continue;
		int same;
		double e = rel_err(lg, row, hp->n_vocab, &same);
		if (need_top1 && !same) {
			T_FAIL(t, "position %d: argmax differs from the reference", i);
			worst = INFINITY;
			break;
		}
		worst = e > worst ? e : worst;
		p = p->next;
		row = row->next;
		k++;
	}
	if (!t->failed && (p || k == 0)) {
		T_FAIL(t, "golden positions beyond the tokens");
		worst = INFINITY;
	}
	model_state_free(s);
	free(lg);
	return worst;
}

static void arch_case(struct test_ctx *t, const char *name, const char *arch)
{
	struct arch_golden g;
	struct model *m = NULL;
	struct model_state *s = NULL;
	char path[256], err[256];
	double e32, e8, ep;

	snprintf(path, sizeof path, "tests/data/arch/%s.gguf", name);
	if (golden_load(t, name, &g))
		return;
	if (model_open(&m, path, 1, err, sizeof err)) {
		T_FAIL(t, "model_open(%s): %s", path, err);
		goto out;
	}
	if (strcmp(model_hparams(m)->arch, arch) != 0) {
		T_FAIL(t, "%s: architecture %s, expected %s", path, model_hparams(m)->arch, arch);
		goto out;
	}
	model_set_act_q8(m, 0);
	e32 = decode_check(t, m, &g, 1);
	if (t->failed)
		goto out;
	/* one batch: the last golden position's logits from prefill */
	{
		const cJSON *lp = cJSON_GetArrayItem(g.pos, cJSON_GetArraySize(g.pos) - 1);
		const cJSON *lr = cJSON_GetArrayItem(g.logit, cJSON_GetArraySize(g.logit) - 1);
		int n = (int)lp->valuedouble + 1, same;
		if (model_state_new(&s, m, n, n, 1, err, sizeof err) ||
		    model_prefill(m, s, g.tok, n, NULL, err, sizeof err)) {
			T_FAIL(t, "prefill: %s", err);
			goto out;
		}
		ep = rel_err(model_state_logits(s), lr, model_hparams(m)->n_vocab, &same);
	}
	model_set_act_q8(m, 1);
	e8 = decode_check(t, m, &g, 0);
	if (t->failed)
		goto out;
	if (!(e32 <= ARCH_TOL) || !(e8 <= ARCH_TOL_Q8) || !(ep <= ARCH_TOL))
		T_FAIL(t, "%s: max logit error / spread: decode fp32 %.2e (tol %.0e), int8 %.2e (tol %.0e),"
		       " prefill %.2e", name, e32, ARCH_TOL, e8, ARCH_TOL_Q8, ep);
out:
	model_state_free(s);
	model_close(m);
	cJSON_Delete(g.root);
}

#define ARCH_TEST(fn, name, arch) \
	static void fn(struct test_ctx *t) { arch_case(t, name, arch); }
ARCH_TEST(gemma3_logits_vs_golden, "gemma3", "gemma3")
ARCH_TEST(gemma3_linear_rope_logits_vs_golden, "gemma3_linear", "gemma3")
ARCH_TEST(llama_logits_vs_golden, "llama", "llama")
ARCH_TEST(llama_tied_logits_vs_golden, "llama_tied", "llama")
ARCH_TEST(llama3_rope_freqs_logits_vs_golden, "llama3", "llama")
ARCH_TEST(qwen2_logits_vs_golden, "qwen2", "qwen2")
ARCH_TEST(qwen2_yarn_logits_vs_golden, "qwen2_yarn", "qwen2")
ARCH_TEST(mistral_logits_vs_golden, "mistral", "llama")
ARCH_TEST(phi3_logits_vs_golden, "phi3", "phi3")

const struct test_case test_arch[] = {
	{ "gemma3_logits_vs_golden", gemma3_logits_vs_golden },
	{ "gemma3_linear_rope_logits_vs_golden", gemma3_linear_rope_logits_vs_golden },
	{ "llama_logits_vs_golden", llama_logits_vs_golden },
	{ "llama_tied_logits_vs_golden", llama_tied_logits_vs_golden },
	{ "llama3_rope_freqs_logits_vs_golden", llama3_rope_freqs_logits_vs_golden },
	{ "qwen2_logits_vs_golden", qwen2_logits_vs_golden },
	{ "qwen2_yarn_logits_vs_golden", qwen2_yarn_logits_vs_golden },
	{ "mistral_logits_vs_golden", mistral_logits_vs_golden },
	{ "phi3_logits_vs_golden", phi3_logits_vs_golden },
	{ NULL, NULL },
};
