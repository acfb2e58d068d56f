/* evidence_calib.c - finds a model's retrieval heads (evidence.h,
 * evidence_calibrate): synthetic documents of built-in filler sentences
 * with one planted passphrase, exact attention in memory, every global
 * query head probed while the question is decoded; a head scores the
 * share of its document mass that lands on the needle.
 * Invariant: deterministic (fixed sentences, words and depths; greedy).
 */
#include "engine/evidence.h"

#include "engine/err.h"
#include "engine/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const calib_filler[] = {
	"The committee met on Tuesday to review the quarterly budget and the plans for the new library wing.",
	" Rainfall in the valley was higher than usual this spring, and the river rose above its banks twice.",
	" Most of the visitors arrived by train, although a few came on bicycles along the old canal path.",
	" The recipe calls for two cups of flour, a pinch of salt and butter softened at room temperature.",
	" Engineers replaced the bridge's bearings after an inspection found cracks in the steel plates.",
	" In the afternoon the children painted the fence while their grandparents watched from the porch.",
	" The museum's new exhibition traces the history of maps from clay tablets to satellite images.",
	" A small bakery on the corner sells bread until noon and closes early on Sundays and holidays.",
	" The orchestra rehearsed the second movement several times before the conductor was satisfied.",
	" Farmers in the region rotate wheat, barley and clover to keep the soil rich from year to year.",
	" The report recommends better lighting in the parking area and a second entrance for deliveries.",
	" Sailors once used the stars and a simple wooden instrument to find their latitude at sea.",
};

static const char *const calib_word[] = {
	"marmalade", "tangerine", "quasar", "lighthouse", "pelican", "saffron", "obsidian", "juniper",
};

#define CALIB_QUESTION "\n\nQuestion: What is the secret passphrase?\nAnswer:"

void evidence_calib_default_params(struct evidence_calib_params *p)
{
	p->n_doc = 4;
	p->doc_tok = 1200;
	p->n_answer = 4;
	p->n_batch = 256;
}

/* Appends the ids of text to v (grown by doubling). */
static int push_text(const struct tok *tk, const char *text, int32_t **v, int *n, int *cap,
		     char *err, size_t errlen)
{
	int k = tok_encode(tk, text, strlen(text), 0, NULL, 0, err, errlen);

	if (k < 0)
		return k;
	if (*n + k > *cap) {
		int c = (*n + k) * 2;
		int32_t *g = realloc(*v, (size_t)c * sizeof *g);
		if (!g)
			return sekv_errf(err, errlen, SEKV_ENOMEM, "evidence: calibration: out of memory");
		*v = g;
		*cap = c;
	}
	k = tok_encode(tk, text, strlen(text), 0, *v + *n, *cap - *n, err, errlen);
	if (k < 0)
		return k;
	*n += k;
	return 0;
}

/* Document d: ids of the prompt in *v [*n]; needle tokens [*n0, *n1);
 * question starts at *nq. */
static int calib_doc(const struct tok *tk, const struct evidence_calib_params *p, int d,
		     int32_t **v, int *n, int *cap, int *n0, int *n1, int *nq,
		     char *err, size_t errlen)
{
	int nf = (int)(sizeof calib_filler / sizeof *calib_filler), rc, depth, s = d * 5;
	char needle[128];

	*n = 0;
	if (tok_bos(tk) >= 0) {
		(*v)[0] = tok_bos(tk);
		*n = 1;
	}
	if ((rc = push_text(tk, "Context:\n", v, n, cap, err, errlen)))
		return rc;
	depth = (int)((double)p->doc_tok * (d + 0.5) / p->n_doc);
	*n0 = -1;
	snprintf(needle, sizeof needle, " The secret passphrase is %s.",
		 calib_word[d % (int)(sizeof calib_word / sizeof *calib_word)]);
	for (int start = *n; *n - start < p->doc_tok; s = (s * 7 + 3) % nf) {
		if (*n0 < 0 && *n - start >= depth) {
			*n0 = *n;
			if ((rc = push_text(tk, needle, v, n, cap, err, errlen)))
				return rc;
			*n1 = *n;
		}
		if ((rc = push_text(tk, calib_filler[s], v, n, cap, err, errlen)))
			return rc;
	}
	*nq = *n;
	return push_text(tk, CALIB_QUESTION, v, n, cap, err, errlen);
}

static int argmax(const float *x, int n)
{
	int b = 0;

	for (int i = 1; i < n; i++)
		if (x[i] > x[b])
			b = i;
	return b;
}

/* Prefills the document part, decodes question and answer with the probe;
 * adds needle share per probed head to score. */
static int calib_run(const struct model *m, const struct evidence_calib_params *p,
		     const int32_t *ids, int n, int n0, int n1, int nq,
		     struct model_probe *pr, float *score, char *err, size_t errlen)
{
	const struct model_hparams *hp = model_hparams(m);
	struct model_state *ms = NULL;
	int rc, tok;

	if ((rc = model_state_new(&ms, m, n + p->n_answer + 1, p->n_batch, 1, err, errlen)))
		return rc;
	for (int at = 0; at < nq && !rc; at += p->n_batch)
		rc = model_prefill(m, ms, ids + at, nq - at < p->n_batch ? nq - at : p->n_batch,
				   NULL, err, errlen);
	pr->n_pos = nq;
	memset(pr->mass, 0, (size_t)pr->n * nq * sizeof(float));
	model_state_set_probe(ms, pr);
	for (int i = nq; i < n && !rc; i++)
		rc = model_decode_ex(m, ms, ids[i], NULL, NULL, i == n - 1, err, errlen);
	for (int i = 0; i < p->n_answer && !rc; i++) {
		tok = argmax(model_state_logits(ms), hp->n_vocab);
		rc = model_decode_ex(m, ms, tok, NULL, NULL, 1, err, errlen);
	}
	for (int h = 0; h < pr->n && !rc; h++) {
		double all = 0, hit = 0;
		for (int t = 0; t < nq; t++) {
			double x = pr->mass[(size_t)h * nq + t];
			all += x;
			hit += t >= n0 && t < n1 ? x : 0;
		}
		score[h] += all > 0 ? (float)(hit / all / p->n_doc) : 0.0f;
	}
	model_state_free(ms);
	return rc;
}

int evidence_calibrate(const struct model *m, const struct tok *tk,
		       const struct evidence_calib_params *p, float *score,
		       struct evidence_head *best, int n_best, char *err, size_t errlen)
{
	const struct model_hparams *hp = model_hparams(m);
	struct model_probe pr = { 0 };
	int32_t *ids = NULL;
	int n_all = hp->n_global * hp->n_head, cap = 0, n = 0, n0 = 0, n1 = 0, nq = 0, rc = 0;

	if (p->n_doc < 1 || p->doc_tok < 16 || p->n_answer < 0 || p->n_batch < 1 || n_best < 0)
		return sekv_errf(err, errlen, SEKV_EINVAL, "evidence: calibration: bad parameters");
	if (n_all > MODEL_PROBE_MAX || n_all < 1)
		return sekv_errf(err, errlen, SEKV_EUNSUP,
				 "evidence: calibration: %d global heads (at most %d)", n_all, MODEL_PROBE_MAX);
	cap = p->doc_tok * 2 + 256;
	if (!(ids = malloc((size_t)cap * sizeof *ids)) ||
	    !(pr.mass = malloc((size_t)n_all * cap * sizeof *pr.mass))) {
		free(ids);
		return sekv_errf(err, errlen, SEKV_ENOMEM, "evidence: calibration: out of memory");
	}
	pr.n = n_all;
	for (int i = 0; i < n_all; i++) {
		pr.layer[i] = hp->global_layer[i / hp->n_head];
		pr.head[i] = i % hp->n_head;
		score[i] = 0;
	}
	for (int d = 0; d < p->n_doc && !rc; d++) {
		int cap0 = cap;
		rc = calib_doc(tk, p, d, &ids, &n, &cap, &n0, &n1, &nq, err, errlen);
		if (!rc && cap != cap0) {
			float *g = realloc(pr.mass, (size_t)n_all * cap * sizeof *g);
			if (!g)
				rc = sekv_errf(err, errlen, SEKV_ENOMEM, "evidence: calibration: out of memory");
			else
				pr.mass = g;
		}
		if (!rc)
			rc = calib_run(m, p, ids, n, n0, n1, nq, &pr, score, err, errlen);
	}
	/* best: selection by score, ties to the earlier (layer, head) */
	for (int b = 0; b < n_best && !rc; b++) {
		int pick = -1;
		for (int i = 0; i < n_all; i++) {
			int used = 0;
			for (int e = 0; e < b; e++)
				used |= best[e].layer == pr.layer[i] && best[e].head == pr.head[i];
			if (!used && (pick < 0 || score[i] > score[pick]))
				pick = i;
		}
		if (pick < 0)
			break;
		best[b] = (struct evidence_head){ pr.layer[pick], pr.head[pick] };
	}
	free(ids);
	free(pr.mass);
	return rc;
}
