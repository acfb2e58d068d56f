/* kv_select.h - the selection rules of the rival KV methods (issue 9 part
 * 3): which of a document's positions keep their exact rows in the device
 * tier, as pure functions of hand-checkable inputs (scores, votes, page
 * bounds). Each rule returns positions ascending. No allocation: callers
 * pass scratch. The decode streams that use them live in kv_subset.c
 * (StreamingLLM, SnapKV, H2O) and kv_quest.c (Quest).
 */
#ifndef SEKV_KV_SELECT_H
#define SEKV_KV_SELECT_H

#include <stdint.h>

/* StreamingLLM (Xiao et al., "Efficient Streaming Language Models with
 * Attention Sinks", arXiv 2309.17453, section 3.2): the first n_sink
 * positions (attention sinks) and the most recent ones, n_keep in all, of
 * a document of n_tok positions. out [min(n_keep, n_tok)] ascending.
 * Returns that count, or SEKV_EINVAL (n_keep < 0, n_sink < 0, n_tok < 0). */
int kv_select_streaming(int n_tok, int n_keep, int n_sink, int32_t *out);

/* The min(n_keep, n) indices i < n with the largest score[i], ascending in
 * out. Order of merit: score, then tie[i] when tie is non-NULL, then the
 * earlier index; NaN ranks below every number. O(n log n_keep).
 * Returns the count, or SEKV_EINVAL (n < 0, n_keep < 0). */
int kv_select_top(const float *score, const float *tie, int n, int n_keep, int32_t *out);

/* SnapKV (Li et al., "SnapKV: LLM Knows What You are Looking for Before
 * Generation", arXiv 2404.14469, section 4.2, Listing 1): vote [n_tok]
 * is one KV head's attention weight per document position, summed over
 * the observation window's queries and the group's query heads; it is
 * max-pooled over `kernel` neighbours (pool[i] = max vote[j], |j - i| <=
 * kernel / 2, kernel odd; the paper's kernel is 7, 1 = no pooling) so a
 * kept peak keeps its neighbours, and the n_keep best pooled positions
 * are kept (equal pooled votes: the larger own vote first, then the
 * earlier position). pool [n_tok] is scratch. out [min(n_keep, n_tok)]
 * ascending. Returns that count, or SEKV_EINVAL (negative sizes, kernel
 * even or < 1). */
int kv_select_snapkv(const float *vote, int n_tok, int n_keep, int kernel, float *pool,
		     int32_t *out);

/* H2O (Zhang et al., "H2O: Heavy-Hitter Oracle for Efficient Generative
 * Inference of Large Language Models", arXiv 2306.14048, section 3.2 and
 * Algorithm 1, taken once at the end of the prefill): score [n_tok] is one
 * KV head's accumulated attention (the softmax weight each position got
 * from every later query of the document, summed over the group's query
 * heads). Keeps the n_recent last positions and the n_keep - n_recent
 * positions before them with the largest score (heavy hitters; ties: the
 * earlier position); n_recent is clipped to n_keep. out [min(n_keep,
 * n_tok)] ascending. Returns that count, or SEKV_EINVAL (negative sizes). */
int kv_select_h2o(const float *score, int n_tok, int n_keep, int n_recent, int32_t *out);

#endif
