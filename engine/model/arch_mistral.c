/* arch_mistral.c - a GGUF whose general.architecture is "mistral": the
 * Llama block (SwiGLU, RoPE on adjacent pairs) and Llama's layer rule
 * (every layer slides when <arch>.attention.sliding_window is given, as
 * in Mistral 7B v0.1's 4096; else all global). llama.cpp's converter
 * writes Mistral 7B as arch llama (arch_llama.c); this row reads the
 * same block under its own name.
 * Facts: HF modeling_mistral.py, llama.cpp's Llama graph.
 */
#include "engine/model/model_int.h"

const struct model_arch model_arch_mistral = {
	.name = "mistral",
	.act = MODEL_ACT_SILU,
	.rope_neox = 0,
	.flags = 0,
	.hparams = model_arch_llama_hparams,
};
