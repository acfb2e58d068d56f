/* arch.h - the architecture table: what differs between the decoder-only
 * families sekv runs (Gemma 3, Llama, Qwen2, Mistral, Phi-3), as one row
 * per family.
 *
 * The forward pass (engine/model/model.c) and the loader (model_load.c)
 * are written once; a row says which optional parts a family has (norms,
 * activation, RoPE pairing, biases, fused tensors) and a family may add a
 * hook for what its GGUF keys say beyond the common ones (Gemma 3's
 * sliding-window pattern and attention scale). Adding a family is one
 * file arch_<name>.c holding its row and one line in arch.c.
 * Facts per family: llama.cpp (src/models/<family>.cpp, llama-model.cpp)
 * and HF transformers modeling_<family>.py; each row cites its own.
 */
#ifndef SEKV_MODEL_ARCH_H
#define SEKV_MODEL_ARCH_H

#include <stddef.h>

struct model;

/* Gated feed-forward activation: down(act(gate(h)) * up(h)). */
enum model_act {
	MODEL_ACT_GELU_TANH, /* GeGLU, tanh approximation (Gemma) */
	MODEL_ACT_SILU,      /* SwiGLU (Llama, Qwen2, Mistral, Phi-3) */
};

/* Optional parts of a block (struct model_arch.flags). */
enum {
	MODEL_ARCH_QK_NORM = 1u << 0,       /* per-head RMSNorm of q and k after
	                                       the projections (attn_q_norm,
	                                       attn_k_norm) */
	MODEL_ARCH_POST_NORM = 1u << 1,     /* RMSNorm of each block's output
	                                       before the residual add
	                                       (post_attention_norm, post_ffw_norm) */
	MODEL_ARCH_QKV_BIAS = 1u << 2,      /* attn_q/k/v.bias required (any
	                                       family's biases are used when present) */
	MODEL_ARCH_FUSED_QKV = 1u << 3,     /* attn_qkv.weight rows [q; k; v] when
	                                       present (instead of attn_q/k/v) */
	MODEL_ARCH_FUSED_GATE_UP = 1u << 4, /* ffn_up.weight rows [gate; up] and
	                                       no ffn_gate.weight */
	MODEL_ARCH_EMBD_SCALE = 1u << 5,    /* token embeddings * sqrt(n_embd) */
};

struct model_arch {
	const char *name;      /* general.architecture */
	enum model_act act;
	int rope_neox;         /* 1: RoPE pairs (j, j + n_rot/2) (NEOX), 0: (2j, 2j+1) */
	unsigned flags;        /* MODEL_ARCH_* */
	/* Family keys read after the common hyper-parameters and before the
	 * RoPE tables (layer kinds, attention scale, RoPE bases); NULL: none.
	 * 0 or a negative SEKV_E* code with err filled. */
	int (*hparams)(struct model *m, char *err, size_t errlen);
};

extern const struct model_arch model_arch_gemma3;
extern const struct model_arch model_arch_llama;
extern const struct model_arch model_arch_qwen2;
extern const struct model_arch model_arch_mistral;
extern const struct model_arch model_arch_phi3;

/* Llama's layer rule, shared by the rows that run the Llama block: every
 * layer slides when <arch>.attention.sliding_window is given, else all
 * are global (arch_llama.c). */
int model_arch_llama_hparams(struct model *m, char *err, size_t errlen);

/* The row whose name is general.architecture `name`, or NULL. */
const struct model_arch *model_arch_find(const char *name);
/* The supported names, comma-separated (static storage), for messages. */
const char *model_arch_names(void);

#endif
