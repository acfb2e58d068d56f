/* model_load.c - opens a GGUF into a struct model for any family of the
 * architecture table (arch.h): the common hyper-parameters from the GGUF
 * keys, the family's own through its hook, weights (mapped, not copied;
 * fused tensors as row views), norms and biases (dequantised into one
 * block), RoPE scaling, the weights fingerprint; plus the model's
 * accessors and KV size formulas.
 *
 * Invariant: every size and shape read from the file is checked before use;
 * a model_open that fails leaves nothing allocated. The forward pass and the
 * per-stream state live in model.c; struct model in model_int.h.
 */
#include "engine/model/model_int.h"

#include "engine/base/err.h"
#include "engine/gguf/gguf.h"
#include "engine/base/hash.h"
#include "engine/quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int key_of(char *buf, size_t len, const char *arch, const char *suffix)
{
	int n = snprintf(buf, len, "%s.%s", arch, suffix);
	return n > 0 && (size_t)n < len ? 0 : SEKV_EINVAL;
}

static int get_int(const struct gguf *g, const char *arch, const char *suffix,
		   int required, int def, int lo, int hi, int *out,
		   char *err, size_t errlen)
{
	char key[128];
	int64_t v;
	int rc;

	if (key_of(key, sizeof key, arch, suffix))
		return sekv_errf(err, errlen, SEKV_EFORMAT, "model: %s: key too long", g->path);
	rc = gguf_get_i64(g, key, &v);
	if (rc == SEKV_ENOTFOUND && !required) {
		*out = def;
		return 0;
	}
	if (rc)
		return sekv_errf(err, errlen, SEKV_EFORMAT, "model: %s: %s: %s", g->path, key,
				 rc == SEKV_ENOTFOUND ? "missing" : "not an integer");
	if (v < lo || v > hi)
		return sekv_errf(err, errlen, SEKV_EFORMAT, "model: %s: %s = %lld out of [%d, %d]",
				 g->path, key, (long long)v, lo, hi);
	*out = (int)v;
	return 0;
}

static int get_float(const struct gguf *g, const char *arch, const char *suffix,
		     int required, float def, float *out, char *err, size_t errlen)
{
	char key[128];
	int rc;

	if (key_of(key, sizeof key, arch, suffix))
		return sekv_errf(err, errlen, SEKV_EFORMAT, "model: %s: key too long", g->path);
	rc = gguf_get_f32(g, key, out);
	if (rc == SEKV_ENOTFOUND && !required) {
		*out = def;
		return 0;
	}
	if (rc)
		return sekv_errf(err, errlen, SEKV_EFORMAT, "model: %s: %s: %s", g->path, key,
				 rc == SEKV_ENOTFOUND ? "missing" : "not a number");
	if (!isfinite(*out))
		return sekv_errf(err, errlen, SEKV_EFORMAT, "model: %s: %s is not finite", g->path, key);
	return 0;
}

/* Looks up a 2-D weight [rows][cols] (GGUF ne = {cols, rows}). */
static int load_weight(struct model *m, const char *name, int rows, int cols,
		       struct backend_weight *w, char *err, size_t errlen)
{
	const struct gguf_tensor *t = gguf_find_tensor(m->g, name);
	size_t rb;

	if (!t)
		return sekv_errf(err, errlen, SEKV_EFORMAT, "model: %s: tensor %s missing",
				 m->g->path, name);
	if (!quant_supported(t->type))
		return sekv_errf(err, errlen, SEKV_EUNSUP, "model: %s: tensor %s: type %u unsupported",
				 m->g->path, name, t->type);
	if (t->ne[0] != (uint64_t)cols || t->ne[1] != (uint64_t)rows || t->ne[2] != 1 || t->ne[3] != 1)
		return sekv_errf(err, errlen, SEKV_EFORMAT,
				 "model: %s: tensor %s: shape [%llu, %llu], expected [%d, %d]",
				 m->g->path, name, (unsigned long long)t->ne[0],
				 (unsigned long long)t->ne[1], cols, rows);
	rb = quant_row_bytes(t->type, (uint64_t)cols);
	if (rb == 0 || t->nbytes < rb * (size_t)rows)
		return sekv_errf(err, errlen, SEKV_EFORMAT, "model: %s: tensor %s: bad size",
				 m->g->path, name);
	w->type = t->type;
	w->rows = rows;
	w->cols = cols;
	w->row_bytes = rb;
	w->data = t->data;
	return 0;
}

/* Copies a 1-D norm weight of n values into dst as fp32. */
static int load_norm(struct model *m, const char *name, int n, float *dst,
		     char *err, size_t errlen)
{
	const struct gguf_tensor *t = gguf_find_tensor(m->g, name);

	if (!t)
		return sekv_errf(err, errlen, SEKV_EFORMAT, "model: %s: tensor %s missing",
				 m->g->path, name);
	if (t->ne[0] != (uint64_t)n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1)
		return sekv_errf(err, errlen, SEKV_EFORMAT, "model: %s: tensor %s: expected [%d]",
				 m->g->path, name, n);
	if (!quant_supported(t->type) || quant_row_bytes(t->type, (uint64_t)n) == 0)
		return sekv_errf(err, errlen, SEKV_EUNSUP, "model: %s: tensor %s: type %u unsupported",
				 m->g->path, name, t->type);
	if (t->nbytes < quant_row_bytes(t->type, (uint64_t)n))
		return sekv_errf(err, errlen, SEKV_EFORMAT, "model: %s: tensor %s: bad size",
				 m->g->path, name);
	/* Weights are used as stored: the GGUF converter already added
	 * Gemma's +1 to every RMSNorm weight. */
	quant_dequant_row(t->type, t->data, dst, (size_t)n);
	return 0;
}

/* FNV-1a 64 over [0, data_offset) (metadata and tensor infos), the file size
 * as 8 little-endian bytes, and the first min(4096, nbytes) bytes of every
 * tensor in file order; printed as 16 lowercase hex digits. */
static void fingerprint(const struct gguf *g, char out[65])
{
	uint8_t size[8];

	for (int i = 0; i < 8; i++)
		size[i] = (uint8_t)(g->size >> (8 * i));
	uint64_t h = hash_fnv1a64(HASH_FNV1A64_INIT, g->map,
				  g->data_offset < g->size ? g->data_offset : g->size);
	h = hash_fnv1a64(h, size, sizeof size);
	for (uint64_t t = 0; t < g->n_tensor; t++)
		h = hash_fnv1a64(h, g->tensor[t].data,
				 g->tensor[t].nbytes < 4096 ? g->tensor[t].nbytes : 4096);
	snprintf(out, 65, "%016llx", (unsigned long long)h);
}

int model_load_int(const struct model *m, const char *suffix, int required, int def,
		   int lo, int hi, int *out, char *err, size_t errlen)
{
	return get_int(m->g, m->hp.arch, suffix, required, def, lo, hi, out, err, errlen);
}

int model_load_float(const struct model *m, const char *suffix, int required, float def,
		     float *out, char *err, size_t errlen)
{
	return get_float(m->g, m->hp.arch, suffix, required, def, out, err, errlen);
}

void model_load_global_list(struct model *m)
{
	struct model_hparams *hp = &m->hp;

	hp->n_global = 0;
	for (int il = 0; il < hp->n_layer; il++)
		if (hp->is_global[il])
			hp->global_layer[hp->n_global++] = il;
}

/* <arch>.rope.scaling.* (and the older rope.scale_linear) into the
 * global layers' RoPE parameters; Llama 3's rope_freqs.weight (F32
 * [n_rot/2]) as frequency factors. Sliding-window layers keep their own
 * base without scaling (llama.cpp: rope_freq_scale_train_swa = 1). */
static int load_rope_scaling(struct model *m, char *err, size_t errlen)
{
	struct model_rope_params *p = &m->rope_par[1];
	const struct gguf_tensor *ff;
	struct gguf_str type;
	char key[128];
	float lin;
	int rc;

	p->factor = 1.0f;
	p->attn_factor = 1.0f;
	p->beta_fast = 32.0f;
	p->beta_slow = 1.0f;
	if ((rc = model_load_float(m, "rope.scale_linear", 0, 1.0f, &lin, err, errlen)))
		return rc;
	if (lin != 1.0f) {
		p->scaling = MODEL_ROPE_SCALING_LINEAR;
		p->factor = lin;
	}
	if (key_of(key, sizeof key, m->hp.arch, "rope.scaling.type"))
		return sekv_errf(err, errlen, SEKV_EFORMAT, "model: %s: key too long", m->g->path);
	if (gguf_get_str(m->g, key, &type) == 0) {
		if (type.len == 4 && memcmp(type.ptr, "none", 4) == 0)
			p->scaling = MODEL_ROPE_SCALING_NONE;
		else if (type.len == 6 && memcmp(type.ptr, "linear", 6) == 0)
			p->scaling = MODEL_ROPE_SCALING_LINEAR;
		else if (type.len == 4 && memcmp(type.ptr, "yarn", 4) == 0)
			p->scaling = MODEL_ROPE_SCALING_YARN;
		else
			return sekv_errf(err, errlen, SEKV_EUNSUP,
					 "model: %s: %s = '%.*s' unsupported (none, linear, yarn)",
					 m->g->path, key, (int)(type.len < 32 ? type.len : 32), type.ptr);
		if (p->scaling != MODEL_ROPE_SCALING_NONE &&
		    (rc = model_load_float(m, "rope.scaling.factor", 1, 1.0f, &p->factor, err, errlen)))
			return rc;
	}
	if (p->scaling != MODEL_ROPE_SCALING_NONE && !(p->factor >= 1.0f && p->factor <= 1024.0f))
		return sekv_errf(err, errlen, SEKV_EFORMAT, "model: %s: rope scaling factor %g out of [1, 1024]",
				 m->g->path, p->factor);
	if (p->scaling == MODEL_ROPE_SCALING_YARN &&
	    ((rc = model_load_int(m, "rope.scaling.original_context_length", 0, m->hp.n_ctx_train, 1,
				  1 << 30, &p->n_ctx_orig, err, errlen)) ||
	     (rc = model_load_float(m, "rope.scaling.attn_factor", 0, 1.0f, &p->attn_factor, err, errlen)) ||
	     (rc = model_load_float(m, "rope.scaling.yarn_beta_fast", 0, 32.0f, &p->beta_fast, err, errlen)) ||
	     (rc = model_load_float(m, "rope.scaling.yarn_beta_slow", 0, 1.0f, &p->beta_slow, err, errlen))))
		return rc;
	if (p->scaling == MODEL_ROPE_SCALING_LINEAR && p->factor == 1.0f)
		p->scaling = MODEL_ROPE_SCALING_NONE;
	ff = gguf_find_tensor(m->g, "rope_freqs.weight");
	if (ff) {
		int half = m->n_rot / 2;
		if (ff->type != QT_F32 || ff->ne[0] != (uint64_t)half || ff->ne[1] != 1 ||
		    ff->nbytes < sizeof(float) * (size_t)half)
			return sekv_errf(err, errlen, SEKV_EFORMAT,
					 "model: %s: rope_freqs.weight: expected F32 [%d]", m->g->path, half);
		if (!(m->freq_factors = malloc(sizeof(float) * (size_t)half)))
			return sekv_errf(err, errlen, SEKV_ENOMEM, "model: %s: out of memory", m->g->path);
		memcpy(m->freq_factors, ff->data, sizeof(float) * (size_t)half);
		for (int j = 0; j < half; j++)
			if (!(m->freq_factors[j] > 0.0f) || !isfinite(m->freq_factors[j]))
				return sekv_errf(err, errlen, SEKV_EFORMAT,
						 "model: %s: rope_freqs.weight[%d] is not a positive number",
						 m->g->path, j);
		p->freq_factors = m->freq_factors;
	}
	m->rope_par[0].base = m->hp.rope_base_local;
	m->rope_par[0].factor = 1.0f;
	m->rope_par[0].attn_factor = 1.0f;
	p->base = m->hp.rope_base_global;
	m->hp.rope_plain = m->arch->rope_neox && p->scaling == MODEL_ROPE_SCALING_NONE && !p->freq_factors;
	return 0;
}

static int load_hparams(struct model *m, char *err, size_t errlen)
{
	struct model_hparams *hp = &m->hp;
	const struct gguf_tensor *te;
	struct gguf_str arch;
	float softcap;
	int rc, d_v;

	if (gguf_get_str(m->g, "general.architecture", &arch) || arch.len == 0 ||
	    arch.len >= sizeof hp->arch)
		return sekv_errf(err, errlen, SEKV_EFORMAT, "model: %s: general.architecture missing",
				 m->g->path);
	memcpy(hp->arch, arch.ptr, arch.len);
	hp->arch[arch.len] = 0;
	if (!(m->arch = model_arch_find(hp->arch)))
		return sekv_errf(err, errlen, SEKV_EUNSUP,
				 "model: %s: architecture %s not supported (this build runs %s)",
				 m->g->path, hp->arch, model_arch_names());
	if ((rc = get_int(m->g, hp->arch, "block_count", 1, 0, 1, MODEL_MAX_LAYER, &hp->n_layer, err, errlen)) ||
	    (rc = get_int(m->g, hp->arch, "embedding_length", 1, 0, 1, 1 << 16, &hp->n_embd, err, errlen)) ||
	    (rc = get_int(m->g, hp->arch, "attention.head_count", 1, 0, 1, 1024, &hp->n_head, err, errlen)) ||
	    (rc = get_int(m->g, hp->arch, "attention.head_count_kv", 0, hp->n_head, 1, 1024,
			  &hp->n_head_kv, err, errlen)) ||
	    (rc = get_int(m->g, hp->arch, "attention.key_length", 0, hp->n_embd / hp->n_head, 2, 4096,
			  &hp->d_head, err, errlen)) ||
	    (rc = get_int(m->g, hp->arch, "attention.value_length", 0, hp->d_head, 1, 4096, &d_v, err, errlen)) ||
	    (rc = get_int(m->g, hp->arch, "feed_forward_length", 1, 0, 1, 1 << 20, &hp->n_ff, err, errlen)) ||
	    (rc = get_int(m->g, hp->arch, "context_length", 0, 8192, 1, 1 << 30, &hp->n_ctx_train, err, errlen)) ||
	    (rc = get_int(m->g, hp->arch, "attention.sliding_window", 0, 0, 0, 1 << 30,
			  &hp->swa_window, err, errlen)) ||
	    (rc = get_int(m->g, hp->arch, "rope.dimension_count", 0, hp->d_head, 2, hp->d_head,
			  &m->n_rot, err, errlen)))
		return rc;
	if (d_v != hp->d_head || hp->n_head % hp->n_head_kv || m->n_rot % 2 || m->n_rot < 2 ||
	    m->n_rot > hp->d_head)
		return sekv_errf(err, errlen, SEKV_EUNSUP,
				 "model: %s: head shapes (k %d, v %d, heads %d/%d, rope %d) unsupported",
				 m->g->path, hp->d_head, d_v, hp->n_head, hp->n_head_kv, m->n_rot);
	/* llama.cpp defaults: rope.freq_base 10000; sliding layers use 10000
	 * unless <arch>.rope.freq_base_swa is present. */
	if ((rc = get_float(m->g, hp->arch, "rope.freq_base", 0, 10000.0f, &hp->rope_base_global, err, errlen)) ||
	    (rc = get_float(m->g, hp->arch, "rope.freq_base_swa", 0, 10000.0f, &hp->rope_base_local, err, errlen)) ||
	    (rc = get_float(m->g, hp->arch, "attention.layer_norm_rms_epsilon", 1, 0.0f, &hp->norm_eps, err, errlen)) ||
	    (rc = get_float(m->g, hp->arch, "final_logit_softcapping", 0, 0.0f, &softcap, err, errlen)) ||
	    (rc = get_float(m->g, hp->arch, "attention.scale", 0, 0.0f, &hp->q_scale, err, errlen)))
		return rc;
	if (hp->rope_base_global <= 1.0f || hp->rope_base_local <= 1.0f || hp->norm_eps < 0.0f ||
	    hp->q_scale < 0.0f)
		return sekv_errf(err, errlen, SEKV_EFORMAT,
				 "model: %s: bad rope base, norm epsilon or attention scale", m->g->path);
	/* Gemma 3 with a sliding window has no final softcapping in llama.cpp's
	 * graph; any other family that asks for it is refused. */
	if (softcap > 0.0f && !(m->arch == &model_arch_gemma3 && hp->swa_window > 0))
		return sekv_errf(err, errlen, SEKV_EUNSUP, "model: %s: final logit softcapping unsupported",
				 m->g->path);
	if (hp->q_scale == 0.0f)
		hp->q_scale = 1.0f / sqrtf((float)hp->d_head);
	hp->embd_scale = m->arch->flags & MODEL_ARCH_EMBD_SCALE ? sqrtf((float)hp->n_embd) : 1.0f;
	hp->rope_neox = m->arch->rope_neox;
	hp->n_rot = m->n_rot;
	te = gguf_find_tensor(m->g, "token_embd.weight");
	if (!te || te->ne[1] == 0 || te->ne[1] > (1u << 24))
		return sekv_errf(err, errlen, SEKV_EFORMAT, "model: %s: token_embd.weight missing or bad",
				 m->g->path);
	hp->n_vocab = (int)te->ne[1];
	for (int il = 0; il < hp->n_layer; il++)
		hp->is_global[il] = 1;
	if (m->arch->hparams && (rc = m->arch->hparams(m, err, errlen)))
		return rc;
	model_load_global_list(m);
	if ((rc = load_rope_scaling(m, err, errlen)))
		return rc;
	fingerprint(m->g, hp->fingerprint);
	return 0;
}

/* An optional 1-D tensor (a bias) of n values into *dst from the norm
 * block at *off, or *dst = NULL when absent and !required. */
static int load_vec(struct model *m, const char *name, int n, int required, float **dst,
		    size_t *off, char *err, size_t errlen)
{
	int rc;

	*dst = NULL;
	if (!required && !gguf_find_tensor(m->g, name))
		return 0;
	if ((rc = load_norm(m, name, n, m->norms + *off, err, errlen)))
		return rc;
	*dst = m->norms + *off;
	*off += (size_t)n;
	return 0;
}

/* A view of rows [r0, r0 + rows) of w (a fused tensor's part). */
static struct backend_weight weight_rows(const struct backend_weight *w, int r0, int rows)
{
	struct backend_weight v = *w;

	v.rows = rows;
	v.data = (const uint8_t *)w->data + (size_t)r0 * w->row_bytes;
	return v;
}

static int load_layer(struct model *m, int il, size_t *off, char *err, size_t errlen)
{
	const struct model_hparams *hp = &m->hp;
	unsigned fl = m->arch->flags;
	struct model_layer *L = &m->layer[il];
	int E = hp->n_embd, D = hp->d_head, nq = hp->n_head * D, nkv = hp->n_head_kv * D;
	struct backend_weight fused;
	char name[96];
	int rc;

#define BLK(suffix) (snprintf(name, sizeof name, "blk.%d.%s", il, suffix), name)
	if ((fl & MODEL_ARCH_FUSED_QKV) && gguf_find_tensor(m->g, BLK("attn_qkv.weight"))) {
		if ((rc = load_weight(m, name, nq + 2 * nkv, E, &fused, err, errlen)))
			return rc;
		L->wq = weight_rows(&fused, 0, nq);
		L->wk = weight_rows(&fused, nq, nkv);
		L->wv = weight_rows(&fused, nq + nkv, nkv);
	} else if ((rc = load_weight(m, BLK("attn_q.weight"), nq, E, &L->wq, err, errlen)) ||
		   (rc = load_weight(m, BLK("attn_k.weight"), nkv, E, &L->wk, err, errlen)) ||
		   (rc = load_weight(m, BLK("attn_v.weight"), nkv, E, &L->wv, err, errlen))) {
		return rc;
	}
	if ((rc = load_weight(m, BLK("attn_output.weight"), E, nq, &L->wo, err, errlen)))
		return rc;
	if (fl & MODEL_ARCH_FUSED_GATE_UP) {
		if ((rc = load_weight(m, BLK("ffn_up.weight"), 2 * hp->n_ff, E, &fused, err, errlen)))
			return rc;
		L->gate = weight_rows(&fused, 0, hp->n_ff);
		L->up = weight_rows(&fused, hp->n_ff, hp->n_ff);
	} else if ((rc = load_weight(m, BLK("ffn_gate.weight"), hp->n_ff, E, &L->gate, err, errlen)) ||
		   (rc = load_weight(m, BLK("ffn_up.weight"), hp->n_ff, E, &L->up, err, errlen))) {
		return rc;
	}
	if ((rc = load_weight(m, BLK("ffn_down.weight"), E, hp->n_ff, &L->down, err, errlen)))
		return rc;
	if ((size_t)(nq + 2 * nkv) * E > m->max_w_elems)
		m->max_w_elems = (size_t)(nq + 2 * nkv) * E;
	if ((size_t)2 * hp->n_ff * E > m->max_w_elems)
		m->max_w_elems = (size_t)2 * hp->n_ff * E;
	if ((size_t)nq * E > m->max_w_elems)
		m->max_w_elems = (size_t)nq * E;
	if ((rc = load_vec(m, BLK("attn_norm.weight"), E, 1, &L->attn_norm, off, err, errlen)) ||
	    (rc = load_vec(m, BLK("ffn_norm.weight"), E, 1, &L->ffn_norm, off, err, errlen)) ||
	    ((fl & MODEL_ARCH_QK_NORM) &&
	     ((rc = load_vec(m, BLK("attn_q_norm.weight"), D, 1, &L->q_norm, off, err, errlen)) ||
	      (rc = load_vec(m, BLK("attn_k_norm.weight"), D, 1, &L->k_norm, off, err, errlen)))) ||
	    ((fl & MODEL_ARCH_POST_NORM) &&
	     ((rc = load_vec(m, BLK("post_attention_norm.weight"), E, 1, &L->post_attn_norm, off, err, errlen)) ||
	      (rc = load_vec(m, BLK("post_ffw_norm.weight"), E, 1, &L->post_ffw_norm, off, err, errlen)))))
		return rc;
	int need_b = (fl & MODEL_ARCH_QKV_BIAS) != 0;
	if ((rc = load_vec(m, BLK("attn_q.bias"), nq, need_b, &L->bq, off, err, errlen)) ||
	    (rc = load_vec(m, BLK("attn_k.bias"), nkv, need_b, &L->bk, off, err, errlen)) ||
	    (rc = load_vec(m, BLK("attn_v.bias"), nkv, need_b, &L->bv, off, err, errlen)) ||
	    (rc = load_vec(m, BLK("attn_output.bias"), E, 0, &L->bo, off, err, errlen)))
		return rc;
#undef BLK
	return 0;
}

static int load_tensors(struct model *m, char *err, size_t errlen)
{
	const struct model_hparams *hp = &m->hp;
	int E = hp->n_embd, D = hp->d_head, nq = hp->n_head * D, nkv = hp->n_head_kv * D;
	size_t per_layer = 5 * (size_t)E + 2 * (size_t)D + (size_t)nq + 2 * (size_t)nkv, off = 0;
	int rc;

	if ((rc = load_weight(m, "token_embd.weight", hp->n_vocab, E, &m->tok_embd, err, errlen)))
		return rc;
	m->output = m->tok_embd; /* tied output head when there is no output.weight */
	if (gguf_find_tensor(m->g, "output.weight") &&
	    (rc = load_weight(m, "output.weight", hp->n_vocab, E, &m->output, err, errlen)))
		return rc;
	m->norms = malloc(sizeof(float) * (per_layer * (size_t)hp->n_layer + (size_t)E));
	if (!m->norms)
		return sekv_errf(err, errlen, SEKV_ENOMEM, "model: %s: out of memory", m->g->path);
	m->output_norm = m->norms;
	off = (size_t)E;
	if ((rc = load_norm(m, "output_norm.weight", E, m->output_norm, err, errlen)))
		return rc;
	m->max_w_elems = 0;
	for (int il = 0; il < hp->n_layer; il++)
		if ((rc = load_layer(m, il, &off, err, errlen)))
			return rc;
	return 0;
}

static int load_rope(struct model *m, char *err, size_t errlen)
{
	for (int b = 0; b < 2; b++)
		if (model_rope_build(&m->rope_par[b], m->n_rot, m->arch->rope_neox, &m->rope[b]))
			return sekv_errf(err, errlen, SEKV_ENOMEM, "model: out of memory");
	return 0;
}

int model_open(struct model **out, const char *path, int n_threads,
	       char *err, size_t errlen)
{
	struct model *m;
	int rc;

	*out = NULL;
	m = calloc(1, sizeof *m);
	if (!m)
		return sekv_errf(err, errlen, SEKV_ENOMEM, "model: %s: out of memory", path);
	pthread_mutex_init(&m->lock, NULL);
	if ((rc = gguf_open(&m->g, path, err, errlen)) ||
	    (rc = load_hparams(m, err, errlen)) ||
	    (rc = load_tensors(m, err, errlen)) ||
	    (rc = load_rope(m, err, errlen)) ||
	    (rc = backend_open("cpu", n_threads, &m->be, err, errlen))) {
		model_close(m);
		return rc;
	}
	*out = m;
	return 0;
}

void model_close(struct model *m)
{
	if (!m)
		return;
	backend_close(m->be);
	gguf_close(m->g);
	free(m->norms);
	free(m->freq_factors);
	free(m->rope[0].inv_freq);
	free(m->rope[1].inv_freq);
	pthread_mutex_destroy(&m->lock);
	free(m);
}

const struct model_hparams *model_hparams(const struct model *m)
{
	return &m->hp;
}

const struct gguf *model_gguf(const struct model *m)
{
	return m->g;
}

struct backend *model_backend(const struct model *m)
{
	return m->be;
}

void model_set_act_q8(struct model *m, int on)
{
	m->be->act_q8 = on != 0;
}

long long model_n_eval(const struct model *m)
{
	struct model *mm = (struct model *)m;
	long long n;

	pthread_mutex_lock(&mm->lock);
	n = m->n_eval;
	pthread_mutex_unlock(&mm->lock);
	return n;
}

size_t model_kv_row_bytes(const struct model *m)
{
	return model_kv_bytes(1, 1, m->hp.n_head_kv, m->hp.d_head);
}

size_t model_kv_bytes(long long n_tok, int n_layer, int n_head_kv, int d_h)
{
	return (size_t)n_tok * (size_t)n_layer * (size_t)n_head_kv * (size_t)d_h * 2 * 2;
}
