/* model.h - decoder-only transformers (Gemma 3, Llama, Qwen2, Mistral,
 * Phi-3: engine/model/arch.h) on the backend table.
 *
 * struct model holds read-only weights (memory-mapped GGUF) and
 * hyper-parameters; struct model_state holds one stream's KV cache and
 * scratch (whisper.h split: model apart from per-stream state).
 * Global-attention layers can delegate their attention to a provider
 * (struct model_attn: SeKV memory, see engine/sekv/sekv.h); sliding-window
 * layers always use the exact ring kept in the state.
 * KV rows are fp16, activations fp32. Keys are cached after RoPE.
 */
#ifndef SEKV_MODEL_H
#define SEKV_MODEL_H

#include <stddef.h>
#include <stdint.h>

#define MODEL_MAX_LAYER 128

struct gguf;
struct backend_probe;

struct model_hparams {
	char arch[32];          /* general.architecture, e.g. "gemma3" */
	int n_layer;
	int n_embd;
	int n_head;             /* query heads */
	int n_head_kv;          /* KV heads (GQA) */
	int d_head;             /* key/value head size d_h */
	int n_ff;
	int n_vocab;
	int n_ctx_train;
	int swa_window;         /* sliding window in tokens (local layers), 0 = none */
	float rope_base_global; /* RoPE theta on global layers */
	float rope_base_local;  /* RoPE theta on sliding-window layers */
	int n_rot;              /* rotated dims per head */
	int rope_neox;          /* 1: pairs (j, j + n_rot/2) (NEOX: Gemma 3, Qwen2,
	                           Phi-3), 0: pairs (2j, 2j + 1) (Llama, Mistral) */
	int rope_plain;         /* 1: the global layers' RoPE is NEOX with base
	                           rope_base_global and nothing else (no scaling,
	                           no frequency factors): what model_rope_inv_freq
	                           computes (SeKV's pre-RoPE key factors need it) */
	float norm_eps;
	float q_scale;          /* attention logits = q.k * q_scale */
	float embd_scale;       /* token embeddings multiplied by this (sqrt(n_embd)) */
	uint8_t is_global[MODEL_MAX_LAYER]; /* 1 = global attention layer */
	int n_global;
	int global_layer[MODEL_MAX_LAYER];  /* [n_global] model indices of global layers */
	char fingerprint[65];   /* hex digest identifying the weights file: FNV-1a 64
	                           over bytes [0, data_offset) (metadata and tensor
	                           infos), the file size (8 bytes LE) and the first
	                           min(4096, nbytes) bytes of each tensor, as 16
	                           lowercase hex digits */
};

struct model; /* opaque: weights + hparams */

/* The RoPE one kind of layer applies (engine/model/rope.c builds it from
 * the GGUF's base, scaling and frequency factors). */
struct model_rope {
	int neox;               /* pairing, as hparams.rope_neox */
	int n_rot;              /* rotated dims (even) */
	double *inv_freq;       /* [n_rot/2] radians per position */
	float mscale;           /* magnitude of cos and sin (YaRN), else 1 */
};

/* The RoPE of model layer `layer` (borrowed, valid until model_close). */
const struct model_rope *model_rope_of(const struct model *m, int layer);
/* cos and sin [n][n_rot/2] of r at positions pos0 .. pos0 + n - 1:
 * mscale * cos((pos0 + i) * inv_freq[j]), angles in double. Pure. */
void model_rope_tables(const struct model_rope *r, int pos0, int n, float *cs, float *sn);

/* Plain RoPE frequencies: inv_freq [n_rot/2] out, inv_freq[j] =
 * base^(-2j/n_rot) (RoFormer; what a model with rope_plain applies). */
void model_rope_inv_freq(float base, int n_rot, double *inv_freq);
/* cos and sin [n][n_rot/2] of the angles (pos0 + i) * inv_freq[j], the
 * angle in double, for positions pos0 .. pos0 + n - 1. Pure. */
void model_rope_cos_sin(const double *inv_freq, int n_rot, int pos0, int n, float *cs,
			float *sn);

/* One stream's KV cache and scratch (opaque: rows only through
 * model_state_get_rows / model_state_set_rows, so a backend may keep them
 * where it likes). Global layers (when exact) keep rows indexed by
 * position, n_ctx of them; sliding-window layers keep a ring of
 * swa_window + n_batch rows, the row of position p at p % cap. */
struct model_state;

/* Attention provider for global layers during decode.
 * attend(): `layer` is the model layer index, pos the token position;
 * q [n_head][d_head] after q-norm and RoPE, NOT scaled (apply
 * hparams.q_scale); k, v [n_head_kv][d_head] of this token (k after k-norm
 * and RoPE). The provider must include this token's own k, v in the softmax
 * (append them to its memory first). Writes out [n_head][d_head].
 * Returns 0 or a negative SEKV_E* code (the forward pass then fails). */
struct model_attn {
	void *ctx;
	int (*attend)(void *ctx, int layer, int pos, const float *q,
		      const float *k, const float *v, float *out);
};

/* Attention probe (evidence, engine/evidence/evidence.h; H2O's scores at ingest):
 * while set on a state (or on an attention provider that takes one),
 * every decode step adds, for each (model layer, query head) pair, the
 * softmax weight each position p < n_pos receives into mass[i][p]; a
 * prefill batch on exact rows adds the weights of each of its tokens.
 * Bit-neutral: outputs do not change. */
#define MODEL_PROBE_MAX 2048 /* every query head of 64 layers of 32 heads */
struct model_probe {
	int n;                        /* pairs, 0..MODEL_PROBE_MAX */
	int layer[MODEL_PROBE_MAX];   /* model layer (global attention) */
	int head[MODEL_PROBE_MAX];    /* query head */
	int n_pos;                    /* positions counted: [0, n_pos) */
	float *mass;                  /* [n][n_pos], accumulated (caller zeroes) */
};

/* The entries of probe p on model layer `layer` (query heads < n_head) as
 * a backend probe pr (engine/backend/backend.h). rows NULL: keys are document
 * positions (n_key = p->n_pos) and each entry accumulates straight into
 * its row of p->mass; else each distinct head accumulates into rows + h *
 * ld, n_key floats zeroed here, for a caller that maps keys to positions
 * afterwards (mixed attention). Returns 1 when some entry is on the layer. */
int model_probe_backend(const struct model_probe *p, int layer, int n_head, float *rows,
			size_t ld, int n_key, struct backend_probe *pr);

/* Opens a GGUF model of a family in the architecture table
 * (engine/model/arch.h). n_threads <= 0 means all cores. Errors name the
 * file and the missing/bad key or tensor (SEKV_EFORMAT; SEKV_EUNSUP for an
 * architecture this build lacks, naming the ones it has). *out owns the mapping.
 * Thread-safety: prefill/decode calls on states of one model are
 * serialised by a lock inside the model (they share its backend threads);
 * an attention provider must not call back into the model. */
int model_open(struct model **out, const char *path, int n_threads,
	       char *err, size_t errlen);
void model_close(struct model *m); /* NULL is a no-op */
const struct model_hparams *model_hparams(const struct model *m);
/* The GGUF the model reads from (borrowed, valid until model_close). */
const struct gguf *model_gguf(const struct model *m);
/* The backend the model runs on (borrowed, valid until model_close): pass
 * it to SeKV (sekv_params.be) so its operations share the model's thread
 * pool. Not for use while another thread runs a forward on the model. */
struct backend *model_backend(const struct model *m);

/* Allocates a stream state: exact global rows for n_ctx positions when
 * global_exact, local rings of swa_window + n_batch rows, scratch for
 * batches of up to n_batch tokens. Nothing is allocated per token later. */
int model_state_new(struct model_state **out, const struct model *m,
		    int n_ctx, int n_batch, int global_exact,
		    char *err, size_t errlen);
void model_state_free(struct model_state *s);
/* Probes the exact global attention of later decode steps and prefill
 * batches (p borrowed until replaced; NULL: off). Pairs naming a sliding-window layer or a
 * head outside the model are ignored. Not used by an attention provider:
 * give it its own (sekv_ctx_set_probe). */
void model_state_set_probe(struct model_state *s, const struct model_probe *p);
/* Forgets all positions (n_past = 0). */
void model_state_reset(struct model_state *s);

/* Positions already in the cache. */
int model_state_n_past(const struct model_state *s);
/* Resumes a stream at n_past positions whose rows were restored with
 * model_state_set_rows (see there); no last logits (the next call must be
 * a decode). 0, or SEKV_EINVAL when n_past < 0 or, with exact global rows,
 * n_past > n_ctx. */
int model_state_resume(struct model_state *s, int n_past);
/* Logits [n_vocab] after the last processed token (borrowed, valid until
 * the next call on s), or NULL when there are none (after reset, resume, or
 * a decode that skipped the output projection). */
const float *model_state_logits(const struct model_state *s);
/* log-sum-exp of model_state_logits (0 when there are none). */
double model_state_lse(const struct model_state *s);
/* Rows allocated for model layer `layer` (0 for a global layer without
 * exact rows, or a layer outside the model). */
int model_state_kv_cap(const struct model_state *s, int layer);

/* Prefill: runs tokens[0..n) (n <= n_batch) at positions n_past.. with exact
 * attention on every layer (requires global_exact), appends their KV.
 * When surprisal != NULL writes surprisal[i] = -log p(tokens[i] | tokens
 * before it) in nats (0 for position 0), computed with a streaming
 * log-sum-exp over the vocabulary. The first token of a later call is
 * scored with the state's last logits (0 when it has none). Leaves
 * the last token's logits in the state (model_state_logits). Returns 0 or a negative code
 * (SEKV_EINVAL: n outside [1, n_batch], n_past + n > n_ctx, no exact
 * global rows, or a token outside the vocabulary). */
int model_prefill(const struct model *m, struct model_state *s,
		  const int32_t *tokens, int n, float *surprisal,
		  char *err, size_t errlen);

/* Decode one token at position n_past. Global layers use attn when non-NULL,
 * else the exact rows in the state. Writes logits [n_vocab] when non-NULL
 * (also kept as model_state_logits). Returns 0 or a negative code; a provider's
 * error is returned as is. With attn, exact global rows (if allocated) are
 * still appended while n_past < n_ctx, and n_ctx does not limit decoding. */
int model_decode(const struct model *m, struct model_state *s, int32_t token,
		 const struct model_attn *attn, float *logits,
		 char *err, size_t errlen);

/* model_decode, skipping the output projection when need_logits is 0
 * (tokens whose prediction nobody reads, e.g. a question's prompt tokens):
 * model_state_logits is then NULL and logits is not written. */
int model_decode_ex(const struct model *m, struct model_state *s, int32_t token,
		    const struct model_attn *attn, float *logits, int need_logits,
		    char *err, size_t errlen);

/* Decode (one token per step) multiplies weights by an int8-quantised
 * copy of each activation vector (blocks of 32, as llama.cpp does), which
 * is faster but adds the activation rounding to the decode logits
 * (typically ~1e-3 relative per matvec; prefill keeps fp32 activations).
 * on = 0 makes decode use fp32 activations, so decode and prefill differ
 * only in summation order (the equivalence tests need that). Default 1.
 * Not thread-safe: call before decoding. */
void model_set_act_q8(struct model *m, int on);

/* Bytes of one KV row (K and V, all KV heads) for one layer at fp16. */
size_t model_kv_row_bytes(const struct model *m);

/* Token positions run through the forward pass since model_open, over all
 * states (prefill and decode that succeeded). Thread-safe. */
long long model_n_eval(const struct model *m);

/* Copies the fp16 rows of positions [p0, p0+n) of model layer `layer` out
 * of the state's cache into k, v ([n][n_head_kv][d_head] each). The rows
 * must be held: p0 >= 0, p0 + n <= n_past, and for a ring (sliding-window
 * layer) p0 >= n_past - cap. SEKV_EINVAL otherwise (also for a global layer
 * without exact rows). Used to persist the sliding-window rings. */
int model_state_get_rows(const struct model_state *s, int layer, int p0, int n,
			 uint16_t *k, uint16_t *v);
/* Writes rows of positions [p0, p0+n) into the cache at their slots (row
 * p % cap); n <= cap, and p0 + n <= cap for exact global rows. Does not
 * change n_past: to resume a stream, restore the last swa_window rows of
 * every sliding-window layer (and, without an attention provider, all
 * global rows), then call model_state_resume. */
int model_state_set_rows(struct model_state *s, int layer, int p0, int n,
			 const uint16_t *k, const uint16_t *v);

/* KV-cache bytes of n_tok positions over n_layer layers at fp16, K and V:
 * n_tok x n_layer x n_head_kv x d_h x 2 x 2 (full_kv_bytes of DESIGN.md
 * section 6 when n_layer is the global layers). Pure; no overflow below
 * SIZE_MAX. */
size_t model_kv_bytes(long long n_tok, int n_layer, int n_head_kv, int d_h);

#endif
