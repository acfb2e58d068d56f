/* evidence.h - where in the document an answer lies (issue 8 part 3).
 *
 * While a question and its answer are decoded, an attention probe
 * (struct model_probe, engine/model/model.h) sums the softmax weight a few
 * retrieval heads give every document position; no extra forward pass.
 * Here that mass is cut into passages of EVIDENCE_PASSAGE document tokens
 * (template and control tokens skipped), ranked, and mapped to character
 * (byte) ranges of the document text. The retrieval heads of a model are
 * found by a short calibration on synthetic needle documents.
 * Storing heads per model lives in store/; printing in app/cmd_ask.c.
 */
#ifndef SEKV_EVIDENCE_H
#define SEKV_EVIDENCE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/model/model.h"

#define EVIDENCE_PASSAGE 80          /* document tokens per passage */
#define EVIDENCE_MAX_HEADS 16 /* retrieval heads one evidence ranking reads */
/* Measured on Gemma 3 270M (issue 8): until a calibration has run. */
#define EVIDENCE_DEFAULT_HEADS "5:1,5:2,11:2"

struct tok;

struct evidence_head {
	int layer;  /* model layer (a global-attention layer) */
	int head;   /* query head */
};

/* Parses "L:H[,L:H...]" (model layer : query head, decimal) into out
 * [cap]; *n = pairs. With hp, each layer must be a global layer of the
 * model and each head < hp->n_head. 0 or SEKV_EINVAL ("what: why" in
 * err: empty list, bad number, duplicate, more than cap, not global). */
int evidence_heads_parse(const char *s, const struct model_hparams *hp,
			 struct evidence_head *out, int cap, int *n,
			 char *err, size_t errlen);
/* Writes "L:H,..." into buf (NUL-terminated, truncated to cap). */
void evidence_heads_format(const struct evidence_head *h, int n, char *buf, size_t cap);

/* Byte offset of each document token in text: tokens[0..n_tok) are the
 * stored token sequence (template tokens included) whose pieces
 * (tok_token_text) concatenate to a string holding text[0..text_len);
 * start[i] = offset in text of token i's piece, or -1 for a token outside
 * the text (template, control). When the pieces do not contain the text
 * (a tokenizer that normalises), every non-control token is a document
 * token and its offset is its share of the pieces' bytes scaled to
 * text_len: *exact = 0 then, else 1. start [n_tok] out.
 * 0, SEKV_EINVAL (bad id), SEKV_ENOMEM. */
int evidence_offsets(const struct tok *tk, const int32_t *tokens, int n_tok,
		     const char *text, size_t text_len, int32_t *start, int *exact,
		     char *err, size_t errlen);

struct evidence_passage {
	int rank;        /* 1 = most mass */
	int index;       /* passage number in document order */
	int tok0;        /* first token (position) */
	int n_tok;       /* document tokens in it */
	int64_t start;   /* byte range [start, end) of the text */
	int64_t end;
	int64_t peak;    /* byte offset of its token with the highest score */
	double score;    /* share of the question's mass on document tokens
	                    minus that of the baseline, -1..1 (evidence_rank) */
};

/* Ranks passages of passage_tok document tokens (start[i] >= 0, from
 * evidence_offsets) by the attention of the question over that of the
 * prompt's fixed instruction: mass and base are [n_head][n_pos] (position
 * i < n_pos; positions past n_tok ignored), the mass summed over the
 * question's text and answer tokens and over the turn's fixed part
 * (conv_set_probe). A passage's score is its share of mass minus its
 * share of base, both over document tokens: attention the question gives
 * a passage beyond where the model looks whatever the question (the
 * instruction tokens see the same document), which removes the pull of
 * attention sinks and of the document's end. Measured on bench/qa
 * (bench/qa/attn_study.py): recall@3 0.80 -> 0.90 with the default heads.
 * base NULL: the score is the share of mass alone.
 * Passage byte ranges tile [0, text_len): the first starts at 0, each
 * ends where the next starts, the last at text_len. Writes the best
 * min(k, passages) into out, by score descending (ties: document order).
 * Returns that count (0 without document tokens), SEKV_EINVAL or
 * SEKV_ENOMEM. */
int evidence_rank(const float *mass, const float *base, int n_head, int n_pos,
		  const int32_t *start, int n_tok, size_t text_len, int passage_tok,
		  struct evidence_passage *out, int k);

/* Calibration on synthetic needle documents: n_doc documents of about
 * doc_tok filler tokens (built-in sentences), document d with built-in
 * fact d (of 8) at depth (d + 0.5) / n_doc, then a question about the
 * fact in other words, in the completion format (chat_build_turn). Each
 * is prefilled with exact attention (in memory, nothing stored), then the
 * question turn and n_answer greedy tokens are decoded with every query
 * head of every global layer probed. A head's score is the needle's share
 * of its document mass from the question's text and answer minus its
 * share from the turn's fixed part (the contrast of evidence_rank),
 * averaged over documents. Deterministic for a model.
 * score [n_global][n_head] out (hp->global_layer order); best [n_best]
 * out, highest score first (ties: lower layer, then lower head).
 * n_global * n_head must be <= MODEL_PROBE_MAX.
 * 0, SEKV_EINVAL, SEKV_EUNSUP (too many heads), SEKV_ENOMEM, or the
 * model's code. Not thread-safe on m with other streams running. */
struct evidence_calib_params {
	int n_doc;       /* documents (8) */
	int doc_tok;     /* filler tokens per document (1000) */
	int n_answer;    /* greedy answer tokens decoded after the question (4) */
	int n_batch;     /* prefill chunk (256) */
};
void evidence_calib_default_params(struct evidence_calib_params *p);
int evidence_calibrate(const struct model *m, const struct tok *tk,
		       const struct evidence_calib_params *p, float *score,
		       struct evidence_head *best, int n_best, char *err, size_t errlen);

#endif
