/* arch_mistral.c - Mistral: the Llama block (SwiGLU, RoPE on adjacent
 * pairs) where, when the GGUF gives <arch>.attention.sliding_window,
 * every layer attends to that many positions only (Mistral 7B v0.1:
 * 4096); without it every layer is global, as in Llama.
 * Facts: HF modeling_mistral.py (sliding_window on all layers),
 * llama.cpp's Llama graph for the block.
 */
#include "engine/model/model_int.h"

static int mistral_hparams(struct model *m, char *err, size_t errlen)
{
	struct model_hparams *hp = &m->hp;

	(void)err;
	(void)errlen;
	for (int il = 0; il < hp->n_layer; il++)
		hp->is_global[il] = hp->swa_window == 0;
	return 0;
}

const struct model_arch model_arch_mistral = {
	.name = "mistral",
	.act = MODEL_ACT_SILU,
	.rope_neox = 0,
	.flags = 0,
	.hparams = mistral_hparams,
};
