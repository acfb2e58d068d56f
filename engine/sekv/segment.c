/* segment.c - surprisal segmentation (DESIGN.md section 2 step 4) and the
 * budget-driven choice of the threshold multiplier alpha.
 * Invariant: anchors are causal - whether t is an anchor depends only on
 * H_0..H_t - so appending tokens never changes earlier anchors; only the
 * recent window at the end of the document moves.
 * Summaries, factors and the router are built in build.c.
 */
#include "engine/sekv/sekv_int.h"
#include "engine/base/err.h"
#include "engine/model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sekv_seg_anchors(const float *h, int n, float alpha, int n_sink,
		      uint8_t *is_anchor)
{
	double mean = 0, m2 = 0;

	for (int t = 0; t < n; t++) {
		/* Welford over H_0..H_{t-1}; population deviation */
		int a = t < n_sink;
		if (!a && t >= 2) {
			double sd = sqrt(m2 / t);
			a = h[t] > mean + alpha * sd;
		}
		is_anchor[t] = (uint8_t)a;
		double d = h[t] - mean;
		mean += d / (t + 1);
		m2 += d * (h[t] - mean);
	}
}

int sekv_seg_spans(const uint8_t *is_anchor, int n, int l_min, int n_sink,
		   int n_recent, struct sekv_span *span)
{
	int lo = n_sink < 0 ? 0 : n_sink, hi = n - (n_recent < 0 ? 0 : n_recent);
	int n_span = 0;

	for (int t = lo; t < hi;) {
		if (is_anchor[t]) {
			t++;
			continue;
		}
		int s = t;
		while (t < hi && !is_anchor[t])
			t++;
		span[n_span].start = s;
		span[n_span].len = t - s;
		span[n_span].full = t - s < l_min;
		n_span++;
	}
	return n_span;
}

void sekv_anchor_score_attention(const float *acc, int n_row, int n_tok, float *out)
{
	for (int t = 0; t < n_tok; t++) {
		double a = 0;
		for (int r = 0; r < n_row; r++) {
			float x = acc[(size_t)r * n_tok + t];
			a += isfinite(x) && x > 0 ? x : 0;
		}
		out[t] = (float)log(a / (double)(n_tok - t) + 1e-9);
	}
}

void sekv_anchor_score_union(const float *a, const float *b, int n, float *out)
{
	double mean[2] = { 0, 0 }, m2[2] = { 0, 0 };

	for (int t = 0; t < n; t++) {
		double z = -INFINITY;
		for (int i = 0; i < 2; i++) {
			double x = i ? b[t] : a[t], sd = t >= 2 ? sqrt(m2[i] / t) : 0;
			double zi = sd > 0 ? (x - mean[i]) / sd : 0;
			z = zi > z ? zi : z;
			double d = x - mean[i];
			mean[i] += d / (t + 1);
			m2[i] += d * (x - mean[i]);
		}
		out[t] = (float)z;
	}
}

int sekv_segment(const float *surprisal, int n, float alpha, int l_min,
		 int n_sink, int n_recent, uint8_t *is_anchor,
		 struct sekv_span **span, int *n_span)
{
	*span = NULL;
	*n_span = 0;
	if (n < 0 || (n > 0 && (!surprisal || !is_anchor)) || !isfinite(alpha))
		return SEKV_EINVAL;
	for (int t = 0; t < n; t++)
		if (!isfinite(surprisal[t]))
			return SEKV_EINVAL;
	/* at most one span per two positions (spans are split by anchors) */
	*span = malloc(((size_t)n / 2 + 1) * sizeof **span);
	if (!*span)
		return SEKV_ENOMEM;
	sekv_seg_anchors(surprisal, n, alpha, n_sink, is_anchor);
	*n_span = sekv_seg_spans(is_anchor, n, l_min, n_sink, n_recent, *span);
	return SEKV_OK;
}

/* Device-tier static bytes of a segmentation (DESIGN.md section 4): exact
 * rows + one (k_bar, v_bar) per compressed span, per layer/KV head, at the
 * device row type (sekv_dev_rows_bytes with row_elems / d_h = n_layer *
 * n_head_kv heads as one layer), + one int8 landmark key per lm_len-token
 * block of a compressed span (sekv_lm_bytes of ceil(len / lm_len) blocks). */
size_t sekv_lm_bytes(size_t n_lm, int n_layer, int n_head_kv, int d_h)
{
	return n_lm * (size_t)n_layer * n_head_kv * ((size_t)d_h + sizeof(float));
}

size_t sekv_seg_static_bytes(int n, const struct sekv_span *span, int n_span,
			     size_t row_elems, int d_h, int lm_len, int i8, int *n_exact_out,
			     int *n_comp_out)
{
	int n_exact = n, n_comp = 0;
	size_t n_lm = 0;

	for (int i = 0; i < n_span; i++)
		if (!span[i].full) {
			n_comp++;
			n_exact -= span[i].len;
			if (lm_len > 0)
				n_lm += (size_t)(span[i].len + lm_len - 1) / lm_len;
		}
	*n_exact_out = n_exact;
	*n_comp_out = n_comp;
	return sekv_dev_rows_bytes((size_t)n_exact + (size_t)n_comp, 1, (int)(row_elems / (size_t)d_h),
				   d_h, i8) +
	       sekv_lm_bytes(n_lm, 1, (int)(row_elems / (size_t)d_h), d_h);
}

/* Merges each pair of neighbouring spans, with the anchors between them,
 * into one span (demoted anchors lose their flag); halves the span count. */
static int merge_pairs(uint8_t *is_anchor, struct sekv_span *span, int n_span,
		       int l_min)
{
	int out = 0;

	for (int i = 0; i < n_span; i += 2) {
		int j = i + 2 < n_span ? i + 2 : n_span;
		int s = span[i].start, e = span[j - 1].start + span[j - 1].len;
		memset(is_anchor + s, 0, (size_t)(e - s));
		span[out].start = s;
		span[out].len = e - s;
		span[out].full = e - s < l_min;
		out++;
	}
	return out;
}

int sekv_seg_fit(const float *h, int n, const struct sekv_params *p,
		 size_t row_elems, int d_h, uint8_t *is_anchor, struct sekv_span *span,
		 int *n_span, float *alpha_used, int *lm_len_used, char *note, size_t note_len)
{
	size_t full = model_kv_bytes(n, 1, 1, 1) * row_elems, cap = 0, bytes;
	double b = p->budget;
	int n_exact, n_comp, ns, lm = p->lm_len > 0 ? p->lm_len : 0;
	float lo = p->alpha, hi, a;

	note[0] = 0;
	*alpha_used = p->alpha;
	/* landmarks over every position (an upper bound) within their share */
	if (lm > 0 && b > 0 && b < 1 && n > 0) {
		double lm_cap = p->lm_share * p->static_share * b * (double)full;
		int n_lk = (int)(row_elems / (size_t)d_h);
		while (lm < n && (double)sekv_lm_bytes((size_t)(n + lm - 1) / (size_t)lm, 1, n_lk,
						       d_h) > lm_cap)
			lm *= 2;
	}
	*lm_len_used = lm;
	sekv_seg_anchors(h, n, p->alpha, p->n_sink, is_anchor);
	if (n > 0 && n < p->exact_below) {
		*n_span = 0;
		snprintf(note, note_len, "%d tokens kept exact (no spans below %d tokens: "
			 "--exact-below)", n, p->exact_below);
		return SEKV_OK;
	}
	*n_span = sekv_seg_spans(is_anchor, n, p->l_min, p->n_sink, p->n_recent, span);
	if (b <= 0 || b >= 1 || n == 0)
		return SEKV_OK;
	cap = (size_t)(p->static_share * b * (double)full);
	if (sekv_seg_static_bytes(n, span, *n_span, row_elems, d_h, lm, p->dev_rows, &n_exact, &n_comp) <= cap)
		return SEKV_OK;

	/* grow alpha geometrically until it fits, then bisect to the smallest */
	hi = lo;
	for (float step = 0.25f; step <= 256.0f; step *= 2) {
		hi = p->alpha + step;
		sekv_seg_anchors(h, n, hi, p->n_sink, is_anchor);
		ns = sekv_seg_spans(is_anchor, n, p->l_min, p->n_sink, p->n_recent, span);
		if (sekv_seg_static_bytes(n, span, ns, row_elems, d_h, lm, p->dev_rows, &n_exact, &n_comp) <= cap)
			break;
		lo = hi;
	}
	for (int it = 0; it < 12 && hi - lo > 0.01f; it++) {
		a = 0.5f * (lo + hi);
		sekv_seg_anchors(h, n, a, p->n_sink, is_anchor);
		ns = sekv_seg_spans(is_anchor, n, p->l_min, p->n_sink, p->n_recent, span);
		if (sekv_seg_static_bytes(n, span, ns, row_elems, d_h, lm, p->dev_rows, &n_exact, &n_comp) <= cap)
			hi = a;
		else
			lo = a;
	}
	*alpha_used = hi;
	sekv_seg_anchors(h, n, hi, p->n_sink, is_anchor);
	ns = sekv_seg_spans(is_anchor, n, p->l_min, p->n_sink, p->n_recent, span);
	bytes = sekv_seg_static_bytes(n, span, ns, row_elems, d_h, lm, p->dev_rows, &n_exact, &n_comp);
	if (bytes <= cap) {
		int n_anchor = 0;
		for (int t = 0; t < n; t++)
			n_anchor += is_anchor[t];
		*n_span = ns;
		snprintf(note, note_len, "alpha raised %.2f -> %.2f, %d anchors "
			 "(%.1f%%), %d spans (%d compressed), landmarks every %d tokens, "
			 "static %.1f%% of full KV", p->alpha, hi, n_anchor, 100.0 * n_anchor / n,
			 ns, n_comp, lm, 100.0 * bytes / full);
		return SEKV_OK;
	}

	/* even the largest alpha leaves too many exact rows or summaries:
	 * merge neighbouring spans (and the anchors between them) */
	while (ns > 1 && bytes > cap) {
		ns = merge_pairs(is_anchor, span, ns, p->l_min);
		bytes = sekv_seg_static_bytes(n, span, ns, row_elems, d_h, lm, p->dev_rows, &n_exact, &n_comp);
	}
	*n_span = ns;
	snprintf(note, note_len, "%salpha raised %.2f -> %.2f and spans merged: "
		 "%d spans (%d compressed), %d exact rows, static %.1f%% of full "
		 "KV (they may take %.1f%%: --static-share of the budget)", bytes > cap ? "budget not met: " : "",
		 p->alpha, hi, ns, n_comp, n_exact, 100.0 * bytes / full,
		 100.0 * p->static_share * b);
	return SEKV_OK;
}
