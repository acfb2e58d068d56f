/* sekv_int.h - shared internals of engine/sekv/ (not for other modules):
 * segmentation helpers used by sekv_build, and fp16 conversion.
 */
#ifndef SEKV_SEKV_INT_H
#define SEKV_SEKV_INT_H

#include "engine/sekv/sekv.h"

#include <stddef.h>
#include <stdint.h>

/* is_anchor [n]: sinks and causal threshold anchors (segment.c). */
void sekv_seg_anchors(const float *h, int n, float alpha, int n_sink,
		      uint8_t *is_anchor);
/* Writes the spans between anchors inside [n_sink, n - n_recent) into
 * span [n / 2 + 1]; returns their number. */
int sekv_seg_spans(const uint8_t *is_anchor, int n, int l_min, int n_sink,
		   int n_recent, struct sekv_span *span);
/* Device bytes of n_lm landmarks: int8 keys + an fp32 scale per layer
 * and KV head. */
size_t sekv_lm_bytes(size_t n_lm, int n_layer, int n_head_kv, int d_h);
/* Static device bytes of a segmentation with landmark blocks of lm_len
 * tokens (0: none); row_elems = n_layer*n_head_kv*d_h; rows at the device
 * type dev_rows (enum sekv_dev_rows, sekv_dev_rows_bytes). */
size_t sekv_seg_static_bytes(int n, const struct sekv_span *span, int n_span,
			     size_t row_elems, int d_h, int lm_len, int dev_rows, int *n_exact,
			     int *n_comp);
/* Segments with the smallest alpha >= p->alpha whose static bytes fit
 * (no spans at all when n < p->exact_below: the memory stays exact)
 * p->static_share * p->budget * full KV, merging spans when no alpha does;
 * the landmark block *lm_len is p->lm_len doubled until landmarks over the
 * whole document fit p->lm_share of that (0 when p->lm_len is 0);
 * writes is_anchor [n], span [n / 2 + 1], *n_span, *alpha_used and a note
 * (empty when p->alpha already fit or there is no budget). Returns 0. */
int sekv_seg_fit(const float *h, int n, const struct sekv_params *p,
		 size_t row_elems, int d_h, uint8_t *is_anchor, struct sekv_span *span,
		 int *n_span, float *alpha_used, int *lm_len, char *note, size_t note_len);

/* Copies compressed spans [c0, c0 + n) of src (summaries, landmarks,
 * factors) into dst's compressed spans from d0, whose spans must have the
 * same lengths and whose factors the same ranks (part.c); landmarks of
 * another block size are rebuilt from the key factors (post-RoPE keys).
 * 0 or SEKV_ENOMEM. */
int sekv_mem_copy_comps(struct sekv_mem *dst, int d0, const struct sekv_mem *src, int c0, int n);
/* Copies exact rows [e0, e0 + n) of src (positions moved by shift) into
 * dst's exact rows from d0 (part.c). */
void sekv_mem_copy_exact(struct sekv_mem *dst, int d0, const struct sekv_mem *src, int e0, int n,
			 int shift);

#endif
