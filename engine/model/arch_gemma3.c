/* arch_gemma3.c - Gemma 3 (all sizes): GeGLU (tanh), NEOX RoPE, per-head
 * q/k RMSNorm, norms after both blocks, embeddings scaled by sqrt(n_embd),
 * interleaved sliding-window and global layers (local RoPE base
 * rope.freq_base_swa without scaling; global layers take the GGUF's RoPE
 * scaling, e.g. linear 8 on the 4B-27B models), tied output head.
 * Facts: llama.cpp src/models/gemma3.cpp (iswa graph), the gemma3 case of
 * llama-model.cpp, HF modeling_gemma3.py. The GGUF converter already
 * added Gemma's +1 to every RMSNorm weight, so norms are used as stored.
 */
#include "engine/model/model_int.h"

#include "engine/base/err.h"
#include "engine/gguf/gguf.h"

#include <math.h>
#include <stdio.h>

/* Which layers are global. llama.cpp (gemma3): the key
 * <arch>.attention.sliding_window_pattern is a period n (default 6) and
 * layer il slides when il % n < n - 1, i.e. il is global when
 * (il + 1) % 6 == 0; an array gives each layer (true = sliding). No
 * sliding window at all makes every layer global. */
static int gemma3_layer_kinds(struct model *m, char *err, size_t errlen)
{
	struct model_hparams *hp = &m->hp;
	const struct gguf_kv *kv;
	char key[128];
	int period = 6;

	snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", hp->arch);
	kv = gguf_find_kv(m->g, key);
	if (hp->swa_window == 0) {
		for (int il = 0; il < hp->n_layer; il++)
			hp->is_global[il] = 1;
	} else if (kv && kv->type == GGUF_ARRAY) {
		if (kv->arr_n != (uint64_t)hp->n_layer)
			return sekv_errf(err, errlen, SEKV_EFORMAT, "model: %s: %s has %llu entries, not %d",
					 m->g->path, key, (unsigned long long)kv->arr_n, hp->n_layer);
		for (int il = 0; il < hp->n_layer; il++) {
			double v;
			if (gguf_arr_num(kv, (uint64_t)il, &v))
				return sekv_errf(err, errlen, SEKV_EFORMAT, "model: %s: %s: not numeric",
						 m->g->path, key);
			hp->is_global[il] = v == 0.0;
		}
	} else {
		int rc = model_load_int(m, "attention.sliding_window_pattern", 0, 6, 0, 1 << 20,
					&period, err, errlen);
		if (rc)
			return rc;
		/* period 0: every layer slides (llama.cpp set_swa_pattern) */
		for (int il = 0; il < hp->n_layer; il++)
			hp->is_global[il] = period > 0 && il % period == period - 1;
	}
	return 0;
}

/* Layer kinds and the attention scale: llama.cpp (after gemma_pytorch's
 * config) scales q by 1/sqrt(d_head), except 1/sqrt(n_embd/n_head) for
 * the 62-layer 27B. */
static int gemma3_hparams(struct model *m, char *err, size_t errlen)
{
	struct model_hparams *hp = &m->hp;

	hp->q_scale = hp->n_layer == 62 ? 1.0f / sqrtf((float)(hp->n_embd / hp->n_head))
					: 1.0f / sqrtf((float)hp->d_head);
	return gemma3_layer_kinds(m, err, errlen);
}

const struct model_arch model_arch_gemma3 = {
	.name = "gemma3",
	.act = MODEL_ACT_GELU_TANH,
	.rope_neox = 1,
	.flags = MODEL_ARCH_QK_NORM | MODEL_ARCH_POST_NORM | MODEL_ARCH_EMBD_SCALE,
	.hparams = gemma3_hparams,
};
