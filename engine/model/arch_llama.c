/* arch_llama.c - Llama (Llama 2, Llama 3.x, SmolLM2, TinyLlama, and
 * Mistral 7B, which llama.cpp's converter writes as arch llama): SwiGLU,
 * RoPE on adjacent pairs (llama.cpp LLAMA_ROPE_TYPE_NORM; the converter
 * permuted the q and k rows for it), RMSNorm before each block, output
 * head tied when output.weight is absent; Llama 3.1's RoPE frequency
 * factors come as rope_freqs.weight (rope.c). Every layer is global
 * unless the GGUF gives <arch>.attention.sliding_window: then every layer
 * attends to that many positions (HF MistralForCausalLM's sliding_window;
 * llama.cpp's converter writes no such key for Llama).
 * Facts: llama.cpp src/models/llama.cpp, HF modeling_llama.py and
 * modeling_mistral.py.
 */
#include "engine/model/model_int.h"

int model_arch_llama_hparams(struct model *m, char *err, size_t errlen)
{
	struct model_hparams *hp = &m->hp;

	(void)err;
	(void)errlen;
	for (int il = 0; il < hp->n_layer; il++)
		hp->is_global[il] = hp->swa_window == 0;
	return 0;
}

const struct model_arch model_arch_llama = {
	.name = "llama",
	.act = MODEL_ACT_SILU,
	.rope_neox = 0,
	.flags = 0,
	.hparams = model_arch_llama_hparams,
};
