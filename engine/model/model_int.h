/* model_int.h - private to engine/model/: the weights and hyper-parameters
 * behind the opaque struct model of engine/model/model.h.
 *
 * model_load.c fills a struct model from a GGUF (model_open) and owns its
 * teardown; model.c reads it in the forward pass; arch_<family>.c hooks
 * read family keys through model_load_int / model_load_float; rope.c
 * builds the RoPE tables. Invariant: after model_open every field is set
 * and read-only, except n_eval (under lock).
 */
#ifndef SEKV_MODEL_INT_H
#define SEKV_MODEL_INT_H

#include "engine/model/model.h"

#include "engine/backend/backend.h"
#include "engine/model/arch.h"

#include <pthread.h>
#include <stddef.h>

/* One layer's weights. With a fused tensor (Phi-3's attn_qkv, ffn_up
 * [gate; up]) wq/wk/wv and gate/up are views: rows of the one tensor. */
struct model_layer {
	struct backend_weight wq;    /* [n_head*d_head][n_embd] */
	struct backend_weight wk;    /* [n_head_kv*d_head][n_embd] */
	struct backend_weight wv;    /* [n_head_kv*d_head][n_embd] */
	struct backend_weight wo;    /* [n_embd][n_head*d_head] */
	struct backend_weight gate;  /* [n_ff][n_embd] */
	struct backend_weight up;    /* [n_ff][n_embd] */
	struct backend_weight down;  /* [n_embd][n_ff] */
	float *attn_norm;            /* [n_embd] */
	float *q_norm;               /* [d_head], MODEL_ARCH_QK_NORM, else NULL */
	float *k_norm;               /* [d_head], MODEL_ARCH_QK_NORM, else NULL */
	float *post_attn_norm;       /* [n_embd], MODEL_ARCH_POST_NORM, else NULL */
	float *ffn_norm;             /* [n_embd] */
	float *post_ffw_norm;        /* [n_embd], MODEL_ARCH_POST_NORM, else NULL */
	float *bq;                   /* [n_head*d_head] bias or NULL */
	float *bk;                   /* [n_head_kv*d_head] bias or NULL */
	float *bv;                   /* [n_head_kv*d_head] bias or NULL */
	float *bo;                   /* [n_embd] bias or NULL */
};

/* RoPE scaling as the GGUF states it (<arch>.rope.scaling.*). */
enum model_rope_scaling {
	MODEL_ROPE_SCALING_NONE,
	MODEL_ROPE_SCALING_LINEAR,   /* positions divided by factor */
	MODEL_ROPE_SCALING_YARN,     /* YaRN (rope.c) */
};

struct model_rope_params {
	float base;                  /* theta */
	enum model_rope_scaling scaling;
	float factor;                /* scaling factor (>= 1) */
	int n_ctx_orig;              /* YaRN: original training context */
	float attn_factor;           /* YaRN: extra cos/sin magnitude (1) */
	float beta_fast, beta_slow;  /* YaRN: ramp bounds in rotations (32, 1) */
	const float *freq_factors;   /* [n_rot/2] frequency divisors (Llama 3's
	                                rope_freqs.weight, borrowed) or NULL */
};

struct model {
	struct gguf *g;
	struct backend *be;
	const struct model_arch *arch;
	struct model_hparams hp;
	int n_rot;                   /* rotated dims per head (even, <= d_head) */
	struct backend_weight tok_embd; /* [n_vocab][n_embd] */
	struct backend_weight output;   /* [n_vocab][n_embd], tied: = tok_embd */
	float *output_norm;          /* [n_embd] */
	struct model_rope_params rope_par[2]; /* local (0) and global (1) layers */
	struct model_rope rope[2];   /* their tables (inv_freq owned) */
	float *freq_factors;         /* [n_rot/2] owned copy, or NULL */
	float *norms;                /* owned block behind every norm and bias pointer */
	size_t max_w_elems;          /* largest layer weight rows*cols */
	struct model_layer layer[MODEL_MAX_LAYER];
	pthread_mutex_t lock;        /* one forward at a time (shared backend) */
	long long n_eval;            /* positions run, under lock */
};

/* <arch>.<suffix> as an integer in [lo, hi] into *out; when absent, def
 * if !required, else SEKV_EFORMAT naming the key (also for a value out of
 * range or of another type). */
int model_load_int(const struct model *m, const char *suffix, int required, int def,
		   int lo, int hi, int *out, char *err, size_t errlen);
/* <arch>.<suffix> as a finite float; def when absent and !required. */
int model_load_float(const struct model *m, const char *suffix, int required, float def,
		     float *out, char *err, size_t errlen);
/* Fills is_global/n_global/global_layer from per-layer flags already in
 * hp.is_global (the hooks set them; the default is every layer global). */
void model_load_global_list(struct model *m);

/* Builds r->inv_freq [n_rot/2] (malloc'ed) and r->mscale from p: base
 * theta_j = base^(-2j/n_rot), divided by freq_factors[j] when given, by
 * factor for LINEAR, and for YARN mixed between theta_j / factor and
 * theta_j by the ramp over the correction dims, with mscale =
 * attn_factor * (1 + 0.1 ln factor) (rope.c states the formulas and
 * their source). 0 or SEKV_ENOMEM. */
int model_rope_build(const struct model_rope_params *p, int n_rot, int neox,
		     struct model_rope *r);

#endif
