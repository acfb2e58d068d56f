/* evidence_calib.c - finds a model's retrieval heads (evidence.h,
 * evidence_calibrate): synthetic documents of built-in filler sentences
 * with one planted fact, asked about in other words, in the completion
 * prompt answers use (chat_build_turn); exact attention in memory, every
 * global query head probed while question and answer are decoded. A head
 * scores the needle's share of the question's document mass minus its
 * share of the prompt's fixed part: the same contrast evidence_rank ranks
 * passages by, so a head that looks at the needle whatever is asked
 * (position, sinks) scores nothing.
 * Invariant: deterministic (fixed sentences, needles and depths; greedy).
 */
#include "engine/evidence/evidence.h"

#include "engine/conv/chat.h"
#include "engine/base/err.h"
#include "engine/tok/tokenizer.h"

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

/* Needles and questions that say it in other words, as people ask. */
static const char *const calib_needle[][2] = {
	{ " The ferry to Larsholm leaves the harbour at seven each morning.",
	  "At what time does the boat to Larsholm depart?" },
	{ " Dr. Okafor keeps the spare key to the laboratory in a blue tin under the sink.",
	  "Where is the extra lab key stored?" },
	{ " The town's oldest oak was planted by a sailor named Edwin Marsh in 1802.",
	  "Who put the oldest oak tree in the ground?" },
	{ " Membership of the chess club costs forty crowns a year.",
	  "How much does it cost to join the chess club annually?" },
	{ " The lighthouse keeper's daughter, Ines, repaired the lamp during the storm.",
	  "Who fixed the light while the storm was raging?" },
	{ " Shipments of copper wire arrive from the Velden mine every second Thursday.",
	  "How often does copper wire get delivered?" },
	{ " The password for the staff wireless network is printed on the back of the menu.",
	  "Where can employees find the Wi-Fi password?" },
	{ " The choir's winter concert moved from the chapel to the old grain hall.",
	  "Where will the choir sing its winter concert now?" },
};
#define N_NEEDLE ((int)(sizeof calib_needle / sizeof *calib_needle))

void evidence_calib_default_params(struct evidence_calib_params *p)
{
	p->n_doc = N_NEEDLE;
	p->doc_tok = 1000;
	p->n_answer = 4;
	p->n_batch = 256;
}

/* Document d as the prompt answers see: the document turn (filler with
 * needle d % N_NEEDLE at depth (d + 0.5) / n_doc), then the question turn.
 * v gets the ids; needle tokens [*n0, *n1); the question turn starts at
 * *nq and its text at *text_at. */
static int calib_doc(const struct tok *tk, const struct chat_template *ct,
		     const struct evidence_calib_params *p, int d, struct chat_tokvec *v,
		     int *n0, int *n1, int *nq, int *text_at, char *err, size_t errlen)
{
	int nf = (int)(sizeof calib_filler / sizeof *calib_filler), s = d * 5 % nf, depth, rc;
	const char *needle = calib_needle[d % N_NEEDLE][0], *q = calib_needle[d % N_NEEDLE][1];

	v->n = 0;
	if ((rc = chat_build_turn(v, ct, tk, CHAT_START_STREAM, NULL, "", 0, 0, NULL, err, errlen)))
		return rc;
	depth = (int)((double)p->doc_tok * (d + 0.5) / p->n_doc);
	*n0 = -1;
	for (int start = v->n; v->n - start < p->doc_tok; s = (s * 7 + 3) % nf) {
		if (*n0 < 0 && v->n - start >= depth) {
			*n0 = v->n;
			if ((rc = chat_push_text(v, tk, needle, strlen(needle), err, errlen)))
				return rc;
			*n1 = v->n;
		}
		if ((rc = chat_push_text(v, tk, calib_filler[s], strlen(calib_filler[s]), err, errlen)))
			return rc;
	}
	*nq = v->n;
	struct chat_turn_marks mk;
	int rc2 = chat_build_turn(v, ct, tk, CHAT_START_AFTER_MODEL, NULL, q, strlen(q), 1, &mk,
				  err, errlen);
	*text_at = mk.text_at;
	return rc2;
}

static int argmax(const float *x, int n)
{
	int b = 0;

	for (int i = 1; i < n; i++)
		if (x[i] > x[b])
			b = i;
	return b;
}

/* Needle share of head h's mass over the document [0, nq). */
static double needle_share(const float *mass, int h, int nq, int n0, int n1)
{
	double all = 0, hit = 0;

	for (int t = 0; t < nq; t++) {
		double x = mass[(size_t)h * nq + t];
		all += x;
		hit += t >= n0 && t < n1 ? x : 0;
	}
	return all > 0 ? hit / all : 0;
}

/* Prefills the document, decodes the question turn (its fixed part into
 * base, its text into q) and n_answer greedy tokens (into q); adds each
 * probed head's contrast to score. */
static int calib_run(const struct model *m, const struct evidence_calib_params *p,
		     const struct chat_tokvec *v, int n0, int n1, int nq, int text_at,
		     struct model_probe *q, struct model_probe *base, float *score,
		     char *err, size_t errlen)
{
	const struct model_hparams *hp = model_hparams(m);
	struct model_state *ms = NULL;
	int rc, tok, n = v->n;

	if ((rc = model_state_new(&ms, m, n + p->n_answer + 1, p->n_batch, 1, err, errlen)))
		return rc;
	for (int at = 0; at < nq && !rc; at += p->n_batch)
		rc = model_prefill(m, ms, v->ids + at, nq - at < p->n_batch ? nq - at : p->n_batch,
				   NULL, err, errlen);
	q->n_pos = base->n_pos = nq;
	memset(q->mass, 0, (size_t)q->n * nq * sizeof(float));
	memset(base->mass, 0, (size_t)q->n * nq * sizeof(float));
	for (int i = nq; i < n && !rc; i++) {
		model_state_set_probe(ms, i < text_at ? base : q);
		rc = model_decode_ex(m, ms, v->ids[i], NULL, NULL, i == n - 1, err, errlen);
	}
	for (int i = 0; i < p->n_answer && !rc; i++) {
		tok = argmax(model_state_logits(ms), hp->n_vocab);
		rc = model_decode_ex(m, ms, tok, NULL, NULL, 1, err, errlen);
	}
	for (int h = 0; h < q->n && !rc; h++)
		score[h] += (float)((needle_share(q->mass, h, nq, n0, n1) -
				     needle_share(base->mass, h, nq, n0, n1)) / p->n_doc);
	model_state_free(ms);
	return rc;
}

int evidence_calibrate(const struct model *m, const struct tok *tk,
		       const struct evidence_calib_params *p, float *score,
		       struct evidence_head *best, int n_best, char *err, size_t errlen)
{
	const struct model_hparams *hp = model_hparams(m);
	struct model_probe pr = { 0 }, pb;
	struct chat_template ct;
	struct chat_tokvec v = { 0 };
	int n_all = hp->n_global * hp->n_head, cap = 0, n0 = 0, n1 = 0, nq = 0, text_at = 0, rc = 0;

	if (p->n_doc < 1 || p->doc_tok < 16 || p->n_answer < 0 || p->n_batch < 1 || n_best < 0)
		return sekv_errf(err, errlen, SEKV_EINVAL, "evidence: calibration: bad parameters");
	if (n_all > MODEL_PROBE_MAX || n_all < 1)
		return sekv_errf(err, errlen, SEKV_EUNSUP,
				 "evidence: calibration: %d global heads (at most %d)", n_all, MODEL_PROBE_MAX);
	if ((rc = chat_template_init(&ct, model_gguf(m), CHAT_FORMAT_COMPLETION, tk, err, errlen)))
		return rc;
	pr.n = n_all;
	for (int i = 0; i < n_all; i++) {
		pr.layer[i] = hp->global_layer[i / hp->n_head];
		pr.head[i] = i % hp->n_head;
		score[i] = 0;
	}
	pb = pr;
	for (int d = 0; d < p->n_doc && !rc; d++) {
		rc = calib_doc(tk, &ct, p, d, &v, &n0, &n1, &nq, &text_at, err, errlen);
		if (!rc && nq > cap) {
			float *g = realloc(pr.mass, (size_t)n_all * nq * 2 * sizeof *g);
			if (!g) {
				rc = sekv_errf(err, errlen, SEKV_ENOMEM, "evidence: calibration: out of memory");
				break;
			}
			pr.mass = g;
			pb.mass = g + (size_t)n_all * nq;
			cap = nq;
		}
		if (!rc)
			rc = calib_run(m, p, &v, n0, n1, nq, text_at, &pr, &pb, score, err, errlen);
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
	chat_tokvec_free(&v);
	free(pr.mass);
	return rc;
}
