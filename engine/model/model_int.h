/* model_int.h - private to engine/model*.c: the weights and hyper-parameters
 * behind the opaque struct model of engine/model/model.h.
 *
 * engine/model/model_load.c fills a struct model from a GGUF (model_open) and owns
 * its teardown; engine/model/model.c reads it in the forward pass. Invariant: after
 * model_open every field is set and read-only, except n_eval (under lock).
 */
#ifndef SEKV_MODEL_INT_H
#define SEKV_MODEL_INT_H

#include "engine/model/model.h"

#include "engine/backend/backend.h"

#include <pthread.h>
#include <stddef.h>

struct model_layer {
	struct backend_weight wq;    /* [n_head*d_head][n_embd] */
	struct backend_weight wk;    /* [n_head_kv*d_head][n_embd] */
	struct backend_weight wv;    /* [n_head_kv*d_head][n_embd] */
	struct backend_weight wo;    /* [n_embd][n_head*d_head] */
	struct backend_weight gate;  /* [n_ff][n_embd] */
	struct backend_weight up;    /* [n_ff][n_embd] */
	struct backend_weight down;  /* [n_embd][n_ff] */
	float *attn_norm;            /* [n_embd] */
	float *q_norm;               /* [d_head] */
	float *k_norm;               /* [d_head] */
	float *post_attn_norm;       /* [n_embd] */
	float *ffn_norm;             /* [n_embd] */
	float *post_ffw_norm;        /* [n_embd] */
};

struct model {
	struct gguf *g;
	struct backend *be;
	struct model_hparams hp;
	int n_rot;                   /* rotated dims per head (even, <= d_head) */
	struct backend_weight tok_embd; /* [n_vocab][n_embd] */
	struct backend_weight output;   /* [n_vocab][n_embd], tied: = tok_embd */
	float *output_norm;          /* [n_embd] */
	double *inv_freq[2];         /* [n_rot/2] for local (0) and global (1) bases */
	float *norms;                /* owned block behind every norm pointer */
	size_t max_w_elems;          /* largest layer weight rows*cols */
	struct model_layer layer[MODEL_MAX_LAYER];
	pthread_mutex_t lock;        /* one forward at a time (shared backend) */
	long long n_eval;            /* positions run, under lock */
};

#endif
