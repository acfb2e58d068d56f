/* arch_llama.c - Llama (Llama 2, Llama 3.x, SmolLM2, TinyLlama): SwiGLU,
 * RoPE on adjacent pairs (llama.cpp LLAMA_ROPE_TYPE_NORM; the GGUF
 * converter permuted the q and k rows for it), RMSNorm before each block,
 * every layer global, output head tied when output.weight is absent;
 * Llama 3.1's RoPE frequency factors come as rope_freqs.weight (rope.c).
 * Facts: llama.cpp src/models/llama.cpp, HF modeling_llama.py.
 */
#include "engine/model/model_int.h"

const struct model_arch model_arch_llama = {
	.name = "llama",
	.act = MODEL_ACT_SILU,
	.rope_neox = 0,
	.flags = 0,
	.hparams = NULL,
};
