/* arch_qwen2.c - Qwen2 and Qwen2.5: the Llama block with biases on the
 * q, k and v projections and NEOX RoPE (llama.cpp LLAMA_ROPE_TYPE_NEOX);
 * every layer global; small models tie the output head to token_embd.
 * Facts: llama.cpp src/models/qwen2.cpp, HF modeling_qwen2.py.
 */
#include "engine/model/model_int.h"

const struct model_arch model_arch_qwen2 = {
	.name = "qwen2",
	.act = MODEL_ACT_SILU,
	.rope_neox = 1,
	.flags = MODEL_ARCH_QKV_BIAS,
	.hparams = NULL,
};
