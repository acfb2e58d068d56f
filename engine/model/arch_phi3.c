/* arch_phi3.c - Phi-3: one fused projection attn_qkv.weight (rows q, k,
 * v) and one fused ffn_up.weight (rows gate, then up) with SwiGLU, NEOX
 * RoPE (llama.cpp LLAMA_ROPE_TYPE_NEOX), every layer global: the
 * converter writes phi3.attention.sliding_window (2047 for Phi-3-mini)
 * and llama.cpp does not apply it, so neither do we. LongRoPE factors (rope_factors_long/short of
 * the 128K models) are refused by the loader as an unknown scaling.
 * Facts: llama.cpp src/models/phi3.cpp, HF modeling_phi3.py.
 */
#include "engine/model/model_int.h"

#include "engine/base/err.h"
#include "engine/gguf/gguf.h"

static int phi3_hparams(struct model *m, char *err, size_t errlen)
{
	struct model_hparams *hp = &m->hp;

	if (gguf_find_tensor(m->g, "rope_factors_long.weight") ||
	    gguf_find_tensor(m->g, "rope_factors_short.weight"))
		return sekv_errf(err, errlen, SEKV_EUNSUP,
				 "model: %s: phi3 LongRoPE factors (rope_factors_long/short) unsupported",
				 m->g->path);
	hp->swa_window = 0;
	for (int il = 0; il < hp->n_layer; il++)
		hp->is_global[il] = 1;
	return 0;
}

const struct model_arch model_arch_phi3 = {
	.name = "phi3",
	.act = MODEL_ACT_SILU,
	.rope_neox = 1,
	.flags = MODEL_ARCH_FUSED_QKV | MODEL_ARCH_FUSED_GATE_UP,
	.hparams = phi3_hparams,
};
