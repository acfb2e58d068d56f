/* model_load.c - opens a Gemma 3 GGUF into a struct model: hyper-parameters
 * and layer kinds from the GGUF keys, weights (mapped, not copied), norms
 * (dequantised into one block), the weights fingerprint and the RoPE
 * frequency tables; plus the model's accessors and KV size formulas.
 *
 * Invariant: every size and shape read from the file is checked before use;
 * a model_open that fails leaves nothing allocated. The forward pass and the
 * per-stream state live in engine/model/model.c; struct model in model_int.h.
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

/* Which layers are global. llama.cpp (gemma3): the key
 * <arch>.attention.sliding_window_pattern is a period n (default 6) and
 * layer il slides when il % n < n - 1, i.e. il is global when
 * (il + 1) % 6 == 0; an array gives each layer (true = sliding). No
 * sliding window at all makes every layer global. */
static int load_layer_kinds(struct model *m, char *err, size_t errlen)
{
	struct model_hparams *hp = &m->hp;
	const struct gguf_kv *kv;
	char key[128];
	int period = 6;

	if (key_of(key, sizeof key, hp->arch, "attention.sliding_window_pattern"))
		return sekv_errf(err, errlen, SEKV_EFORMAT, "model: %s: key too long", m->g->path);
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
		int rc = get_int(m->g, hp->arch, "attention.sliding_window_pattern", 0, 6,
				 0, 1 << 20, &period, err, errlen);
		if (rc)
			return rc;
		/* period 0: every layer slides (llama.cpp set_swa_pattern) */
		for (int il = 0; il < hp->n_layer; il++)
			hp->is_global[il] = period > 0 && il % period == period - 1;
	}
	hp->n_global = 0;
	for (int il = 0; il < hp->n_layer; il++)
		if (hp->is_global[il])
			hp->global_layer[hp->n_global++] = il;
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
	if (strcmp(hp->arch, "gemma3") != 0)
		return sekv_errf(err, errlen, SEKV_EUNSUP, "model: %s: architecture %s not supported",
				 m->g->path, hp->arch);
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
	    (rc = get_float(m->g, hp->arch, "final_logit_softcapping", 0, 0.0f, &softcap, err, errlen)))
		return rc;
	if (hp->rope_base_global <= 1.0f || hp->rope_base_local <= 1.0f || hp->norm_eps < 0.0f)
		return sekv_errf(err, errlen, SEKV_EFORMAT, "model: %s: bad rope base or norm epsilon",
				 m->g->path);
	/* llama.cpp applies final logit softcapping only to Gemma 3 without a
	 * sliding window; we have no such path. */
	if (softcap > 0.0f && hp->swa_window == 0)
		return sekv_errf(err, errlen, SEKV_EUNSUP, "model: %s: final logit softcapping unsupported",
				 m->g->path);
	/* llama.cpp (gemma3, after gemma_pytorch config): q is scaled by
	 * 1/sqrt(d_head), except 1/sqrt(n_embd/n_head) for the 62-layer 27B. */
	hp->q_scale = hp->n_layer == 62 ? 1.0f / sqrtf((float)(hp->n_embd / hp->n_head))
					: 1.0f / sqrtf((float)hp->d_head);
	hp->embd_scale = sqrtf((float)hp->n_embd);
	te = gguf_find_tensor(m->g, "token_embd.weight");
	if (!te || te->ne[1] == 0 || te->ne[1] > (1u << 24))
		return sekv_errf(err, errlen, SEKV_EFORMAT, "model: %s: token_embd.weight missing or bad",
				 m->g->path);
	hp->n_vocab = (int)te->ne[1];
	if ((rc = load_layer_kinds(m, err, errlen)))
		return rc;
	fingerprint(m->g, hp->fingerprint);
	return 0;
}

static int load_tensors(struct model *m, char *err, size_t errlen)
{
	const struct model_hparams *hp = &m->hp;
	int E = hp->n_embd, D = hp->d_head, nq = hp->n_head * D, nkv = hp->n_head_kv * D;
	size_t per_layer = 4 * (size_t)E + 2 * (size_t)D, off = 0;
	char name[96];
	int rc;

	if ((rc = load_weight(m, "token_embd.weight", hp->n_vocab, E, &m->tok_embd, err, errlen)))
		return rc;
	m->output = m->tok_embd; /* Gemma ties the output head to token_embd */
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
	for (int il = 0; il < hp->n_layer; il++) {
		struct model_layer *L = &m->layer[il];
		struct { const char *n; int rows, cols; struct backend_weight *w; } ws[] = {
			{ "attn_q", nq, E, &L->wq }, { "attn_k", nkv, E, &L->wk },
			{ "attn_v", nkv, E, &L->wv }, { "attn_output", E, nq, &L->wo },
			{ "ffn_gate", hp->n_ff, E, &L->gate }, { "ffn_up", hp->n_ff, E, &L->up },
			{ "ffn_down", E, hp->n_ff, &L->down },
		};
		struct { const char *n; int dim; float **dst; } ns[] = {
			{ "attn_norm", E, &L->attn_norm }, { "attn_q_norm", D, &L->q_norm },
			{ "attn_k_norm", D, &L->k_norm }, { "post_attention_norm", E, &L->post_attn_norm },
			{ "ffn_norm", E, &L->ffn_norm }, { "post_ffw_norm", E, &L->post_ffw_norm },
		};
		for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) {
			snprintf(name, sizeof name, "blk.%d.%s.weight", il, ws[i].n);
			if ((rc = load_weight(m, name, ws[i].rows, ws[i].cols, ws[i].w, err, errlen)))
				return rc;
			if ((size_t)ws[i].rows * ws[i].cols > m->max_w_elems)
				m->max_w_elems = (size_t)ws[i].rows * ws[i].cols;
		}
		for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
			snprintf(name, sizeof name, "blk.%d.%s.weight", il, ns[i].n);
			*ns[i].dst = m->norms + off;
			off += (size_t)ns[i].dim;
			if ((rc = load_norm(m, name, ns[i].dim, *ns[i].dst, err, errlen)))
				return rc;
		}
	}
	return 0;
}

/* inv_freq[j] = base^(-2j/n_rot): NEOX RoPE as llama.cpp applies it to
 * Gemma 3 (LLAMA_ROPE_TYPE_NEOX; HF rotate_half), dims j and j + n_rot/2. */
void model_rope_inv_freq(float base, int n_rot, double *inv_freq)
{
	for (int j = 0; j < n_rot / 2; j++)
		inv_freq[j] = pow((double)base, -2.0 * j / n_rot);
}

static int load_rope(struct model *m, char *err, size_t errlen)
{
	int half = m->n_rot / 2;
	float base[2] = { m->hp.rope_base_local, m->hp.rope_base_global };

	for (int b = 0; b < 2; b++) {
		m->inv_freq[b] = malloc(sizeof(double) * (size_t)half);
		if (!m->inv_freq[b])
			return sekv_errf(err, errlen, SEKV_ENOMEM, "model: out of memory");
		model_rope_inv_freq(base[b], m->n_rot, m->inv_freq[b]);
	}
	m->hp.n_rot = m->n_rot;
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
	free(m->inv_freq[0]);
	free(m->inv_freq[1]);
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
