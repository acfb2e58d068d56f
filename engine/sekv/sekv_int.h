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
/* Static device bytes of a segmentation; row_elems = n_layer*n_head_kv*d_h. */
size_t sekv_seg_static_bytes(int n, const struct sekv_span *span, int n_span,
			     size_t row_elems, int *n_exact, int *n_comp);
/* Segments with the smallest alpha >= p->alpha whose static bytes fit
 * p->static_share * p->budget * full KV, merging spans when no alpha does;
 * writes is_anchor [n], span [n / 2 + 1], *n_span, *alpha_used and a note
 * (empty when p->alpha already fit or there is no budget). Returns 0. */
int sekv_seg_fit(const float *h, int n, const struct sekv_params *p,
		 size_t row_elems, uint8_t *is_anchor, struct sekv_span *span,
		 int *n_span, float *alpha_used, char *note, size_t note_len);

#endif
