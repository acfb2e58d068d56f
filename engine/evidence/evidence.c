/* evidence.c - passages ranked by retrieval-head attention mass, token
 * byte offsets, "L:H" head lists, and the needle calibration that picks a
 * model's retrieval heads (evidence.h).
 * Invariant: nothing here runs a forward pass over a stored document;
 * the mass comes from the probe of the decode steps that answer anyway
 * (calibration prefills its own synthetic documents only).
 */

#include "engine/evidence/evidence.h"

#include "engine/base/err.h"
#include "engine/tok/tokenizer.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- head lists ----------------------------------------------------- */

static int head_ok(const struct model_hparams *hp, int layer, int head)
{
	return layer >= 0 && layer < hp->n_layer && layer < MODEL_MAX_LAYER &&
	       hp->is_global[layer] && head >= 0 && head < hp->n_head;
}

int evidence_heads_parse(const char *s, const struct model_hparams *hp,
			 struct evidence_head *out, int cap, int *n,
			 char *err, size_t errlen)
{
	const char *p = s;

	*n = 0;
	if (!s || !*s)
		return sekv_errf(err, errlen, SEKV_EINVAL, "evidence heads: empty list (want L:H,...)");
	for (;;) {
		char *e;
		long l, h;
		errno = 0;
		l = strtol(p, &e, 10);
		if (e == p || *e != ':' || errno || l < 0 || l > 100000 || *p == '-' || *p == '+' || *p == ' ')
			return sekv_errf(err, errlen, SEKV_EINVAL, "evidence heads: \"%s\": want L:H "
					 "(model layer : query head), e.g. %s", s, EVIDENCE_DEFAULT_HEADS);
		p = e + 1;
		h = strtol(p, &e, 10);
		if (e == p || (*e != ',' && *e) || errno || h < 0 || h > 100000 || *p == '-' ||
		    *p == '+' || *p == ' ')
			return sekv_errf(err, errlen, SEKV_EINVAL, "evidence heads: \"%s\": want L:H "
					 "(model layer : query head), e.g. %s", s, EVIDENCE_DEFAULT_HEADS);
		if (hp && !head_ok(hp, (int)l, (int)h)) {
			char layers[128];
			size_t at = 0;
			layers[0] = 0;
			for (int g = 0; g < hp->n_global && at < sizeof layers; g++)
				at += (size_t)snprintf(layers + at, sizeof layers - at, "%s%d", g ? ", " : "",
						       hp->global_layer[g]);
			return sekv_errf(err, errlen, SEKV_EINVAL, "evidence heads: %ld:%ld: %s (global "
					 "layers: %s; query heads 0..%d)", l, h,
					 l < hp->n_layer && l < MODEL_MAX_LAYER && hp->is_global[l]
					 ? "no such query head" : "not a global-attention layer of the model",
					 layers, hp->n_head - 1);
		}
		for (int i = 0; i < *n; i++)
			if (out[i].layer == l && out[i].head == h)
				return sekv_errf(err, errlen, SEKV_EINVAL, "evidence heads: %ld:%ld twice", l, h);
		if (*n >= cap)
			return sekv_errf(err, errlen, SEKV_EINVAL, "evidence heads: more than %d", cap);
		out[*n].layer = (int)l;
		out[(*n)++].head = (int)h;
		if (!*e)
			return 0;
		p = e + 1;
	}
}

void evidence_heads_format(const struct evidence_head *h, int n, char *buf, size_t cap)
{
	size_t at = 0;

	if (!cap)
		return;
	buf[0] = 0;
	for (int i = 0; i < n && at < cap; i++) {
		int w = snprintf(buf + at, cap - at, "%s%d:%d", i ? "," : "", h[i].layer, h[i].head);
		if (w < 0)
			break;
		at += (size_t)w;
	}
	if (at >= cap)
		buf[cap - 1] = 0;
}

/* ---- offsets -------------------------------------------------------- */

int evidence_offsets(const struct tok *tk, const int32_t *tokens, int n_tok,
		     const char *text, size_t text_len, int32_t *start, int *exact,
		     char *err, size_t errlen)
{
	int cap = tok_max_text_len(tk) + 1, rc = 0;
	size_t total = 0, at = 0, *off = NULL;
	char *cat = NULL, piece[512], *big = cap > (int)sizeof piece ? malloc((size_t)cap) : piece;
	const char *hit;

	*exact = 0;
	if (!big || !(off = malloc(((size_t)n_tok + 1) * sizeof *off))) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "evidence: offsets: out of memory");
		goto done;
	}
	for (int i = 0; i < n_tok; i++) {
		int w = tok_token_text(tk, tokens[i], big, cap);
		if (w < 0) {
			rc = sekv_errf(err, errlen, SEKV_EINVAL, "evidence: token %d at %d: bad id",
				       tokens[i], i);
			goto done;
		}
		off[i] = total;
		total += (size_t)w;
	}
	off[n_tok] = total;
	if (!(cat = malloc(total + 1))) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "evidence: offsets: out of memory");
		goto done;
	}
	for (int i = 0; i < n_tok; i++)
		at += (size_t)tok_token_text(tk, tokens[i], cat + at, (int)(total + 1 - at));
	hit = text_len ? memmem(cat, total, text, text_len) : NULL;
	if (hit) {
		size_t o = (size_t)(hit - cat);
		for (int i = 0; i < n_tok; i++)
			start[i] = off[i] >= o && off[i] < o + text_len && off[i + 1] > off[i]
				   ? (int32_t)(off[i] - o) : -1;
		*exact = 1;
	} else {
		/* approximate: the visible pieces' bytes stretched over the text */
		size_t vis = 0, seen = 0;
		for (int i = 0; i < n_tok; i++)
			if (!tok_is_control(tk, tokens[i]))
				vis += off[i + 1] - off[i];
		for (int i = 0; i < n_tok; i++) {
			if (tok_is_control(tk, tokens[i]) || off[i + 1] == off[i]) {
				start[i] = -1;
				continue;
			}
			start[i] = (int32_t)((double)seen * (double)text_len / (double)(vis ? vis : 1));
			seen += off[i + 1] - off[i];
		}
	}
done:
	if (big != piece)
		free(big);
	free(off);
	free(cat);
	return rc;
}

/* ---- ranking -------------------------------------------------------- */

static int passage_cmp(const void *a, const void *b)
{
	const struct evidence_passage *x = a, *y = b;

	if (x->score != y->score)
		return x->score < y->score ? 1 : -1;
	return (x->index > y->index) - (x->index < y->index);
}

/* Sums the mass of positions [0, n) over heads into per-passage totals
 * (pas[p].score), returning the total over document tokens. */
static double passage_mass(const float *mass, int n_head, int n_pos, const int32_t *start,
			   int n_tok, int passage_tok, struct evidence_passage *all)
{
	int n = n_tok < n_pos ? n_tok : n_pos;
	double total = 0;

	for (int i = 0, p = -1, in_pas = 0; i < n_tok; i++) {
		double m = 0;
		if (start[i] < 0)
			continue;
		if (in_pas == 0)
			p++;
		for (int h = 0; i < n && h < n_head; h++)
			m += mass[(size_t)h * n_pos + i];
		all[p].score += m;
		total += m;
		in_pas = (in_pas + 1) % passage_tok;
	}
	return total;
}

/* Token i's score (as a passage's, over one token). */
static double token_score(const float *mass, const float *base, int n_head, int n_pos, int i,
			  double total, double btotal)
{
	double m = 0, b = 0;

	for (int h = 0; h < n_head; h++) {
		m += mass[(size_t)h * n_pos + i];
		b += base ? base[(size_t)h * n_pos + i] : 0;
	}
	return (total > 0 ? m / total : 0) - (btotal > 0 ? b / btotal : 0);
}

/* all[p].peak: the byte offset of passage p's best token. */
static void peaks(const float *mass, const float *base, int n_head, int n_pos,
		  const int32_t *start, int n_tok, int passage_tok, double total, double btotal,
		  struct evidence_passage *all)
{
	int n = n_tok < n_pos ? n_tok : n_pos;
	double best = 0;

	for (int i = 0, p = -1, in_pas = 0; i < n_tok; i++) {
		if (start[i] < 0)
			continue;
		if (in_pas == 0) {
			p++;
			all[p].peak = start[i];
			best = -2;
		}
		double x = i < n ? token_score(mass, base, n_head, n_pos, i, total, btotal) : -2;
		if (x > best) {
			best = x;
			all[p].peak = start[i];
		}
		in_pas = (in_pas + 1) % passage_tok;
	}
}

int evidence_rank(const float *mass, const float *base, int n_head, int n_pos,
		  const int32_t *start, int n_tok, size_t text_len, int passage_tok,
		  struct evidence_passage *out, int k)
{
	struct evidence_passage *all, *bp = NULL;
	int n_doc = 0, n_pas = 0, cap;
	double total, btotal = 0;

	if (!mass || !start || n_head < 0 || n_pos < 0 || n_tok < 0 || passage_tok < 1 || k < 0)
		return SEKV_EINVAL;
	for (int i = 0; i < n_tok; i++)
		n_doc += start[i] >= 0;
	if (!n_doc)
		return 0;
	cap = (n_doc + passage_tok - 1) / passage_tok;
	if (!(all = calloc((size_t)cap, sizeof *all)) || (base && !(bp = calloc((size_t)cap, sizeof *bp)))) {
		free(all);
		return SEKV_ENOMEM;
	}
	for (int i = 0, in_pas = 0; i < n_tok; i++) {
		if (start[i] < 0)
			continue;
		if (in_pas == 0) {
			all[n_pas] = (struct evidence_passage){ .index = n_pas, .tok0 = i,
				.start = n_pas ? start[i] : 0, .end = (int64_t)text_len };
			if (n_pas)
				all[n_pas - 1].end = start[i];
			n_pas++;
		}
		all[n_pas - 1].n_tok++;
		in_pas = (in_pas + 1) % passage_tok;
	}
	total = passage_mass(mass, n_head, n_pos, start, n_tok, passage_tok, all);
	if (bp)
		btotal = passage_mass(base, n_head, n_pos, start, n_tok, passage_tok, bp);
	for (int p = 0; p < n_pas; p++) {
		double share = total > 0 ? all[p].score / total : 0;
		all[p].score = share - (btotal > 0 ? bp[p].score / btotal : 0);
	}
	peaks(mass, base, n_head, n_pos, start, n_tok, passage_tok, total, btotal, all);
	qsort(all, (size_t)n_pas, sizeof *all, passage_cmp);
	if (k > n_pas)
		k = n_pas;
	for (int p = 0; p < k; p++) {
		out[p] = all[p];
		out[p].rank = p + 1;
	}
	free(all);
	free(bp);
	return k;
}
