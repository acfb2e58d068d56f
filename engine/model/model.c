/* model.c - the decoder: per-stream state, one forward pass for every
 * family of the architecture table (arch.h), prefill with streaming
 * surprisal, and decode with an optional attention provider.
 *
 * The forward pass is written once over the operations of
 * engine/backend/backend.h and serves both prefill (a batch, exact
 * attention everywhere) and decode (one token, global layers optionally
 * delegated to a struct model_attn); the family's row decides the
 * optional steps (q/k norm, post norms, biases, activation, RoPE pairing).
 * Invariant: after model_state_new nothing is allocated. GGUF loading
 * lives in model_load.c, RoPE tables in rope.c.
 */
#include "engine/model/model_int.h"

#include "engine/base/err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define VOCAB_TILE 4096   /* vocabulary rows per sgemm when folding surprisal */

/* One layer's KV rows inside a state (see struct model_state in model.h). */
struct model_kv_layer {
	int cap;            /* rows allocated */
	struct backend_buf *k; /* [cap][n_head_kv][d_head] fp16, post-RoPE */
	struct backend_buf *v; /* [cap][n_head_kv][d_head] fp16 */
};

struct model_state {
	const struct model *m; /* the model the state was made for (its backend
	                          owns the KV buffers) */
	int n_ctx;          /* max positions for exact global layers */
	int n_batch;        /* max tokens per model_prefill call */
	int n_past;         /* positions already in the cache */
	int global_exact;   /* 1: global layers keep rows here (prefill, --kv full) */
	struct model_kv_layer kv[MODEL_MAX_LAYER];
	float *last_logits; /* [n_vocab] logits after the last processed token */
	double last_lse;    /* log-sum-exp of last_logits */
	int have_last;      /* last_logits valid */
	void *scratch;      /* struct model_scratch, sized at state_new */
	const struct model_probe *probe; /* borrowed, NULL: none */
};

/* Per-state scratch; every buffer sized for n_batch tokens at state_new. */
struct model_scratch {
	const struct model *m;  /* the model the state was made for */
	struct backend_ws *ws;
	float *x;       /* [n_batch][n_embd] residual stream */
	float *h;       /* [n_batch][n_embd] normed input of a block */
	float *t;       /* [n_batch][n_embd] block output */
	float *q;       /* [n_batch][n_head][d_head] */
	float *att;     /* [n_batch][n_head][d_head] */
	float *k;       /* [n_batch][n_head_kv][d_head] */
	float *v;       /* [n_batch][n_head_kv][d_head] */
	float *gate;    /* [n_batch][n_ff] */
	float *up;      /* [n_batch][n_ff] */
	float *cs[2];   /* [n_batch][n_rot/2] cos, local (0) / global (1) */
	float *sn[2];   /* [n_batch][n_rot/2] sin */
	float *logit;   /* [n_batch][VOCAB_TILE] one vocabulary tile */
	float *mx;      /* [n_batch] running max of the logits */
	double *sm;     /* [n_batch] running sum of exp(logit - mx) */
	float *tgt;     /* [n_batch] logit of the realised next token */
};

/* ---- state ---------------------------------------------------------- */

static int rows_ok(const struct model_state *s, int layer, int p0, int n)
{
	const struct model_kv_layer *kv;

	if (layer < 0 || layer >= MODEL_MAX_LAYER || p0 < 0 || n < 0)
		return 0;
	kv = &s->kv[layer];
	return kv->cap > 0 && n <= kv->cap;
}

/* The run of rows p0 + *at .. that does not wrap the ring of cap rows:
 * it starts at ring row *r and holds *run rows (up to row p0 + n - 1).
 * Returns 0 when *at >= n (no run left). */
static int ring_run(int cap, int p0, int n, int *at, int *r, int *run)
{
	if (*at >= n)
		return 0;
	*r = (p0 + *at) % cap;
	*run = cap - *r < n - *at ? cap - *r : n - *at;
	return 1;
}

int model_state_get_rows(const struct model_state *s, int layer, int p0, int n,
			 uint16_t *k, uint16_t *v)
{
	struct backend *be = s->m->be;
	size_t w = (size_t)s->m->hp.n_head_kv * s->m->hp.d_head;
	const struct model_kv_layer *kv;
	int rc = 0, r, run;

	if (!rows_ok(s, layer, p0, n) || p0 + n > s->n_past || p0 < s->n_past - s->kv[layer].cap)
		return SEKV_EINVAL;
	kv = &s->kv[layer];
	for (int i = 0; !rc && ring_run(kv->cap, p0, n, &i, &r, &run); i += run) {
		size_t off = (size_t)r * w * 2, bytes = (size_t)run * w * 2;
		if (!(rc = be->ops->buf_read(be, kv->k, off, k + (size_t)i * w, bytes)))
			rc = be->ops->buf_read(be, kv->v, off, v + (size_t)i * w, bytes);
	}
	return rc;
}

int model_state_set_rows(struct model_state *s, int layer, int p0, int n,
			 const uint16_t *k, const uint16_t *v)
{
	struct backend *be = s->m->be;
	size_t w = (size_t)s->m->hp.n_head_kv * s->m->hp.d_head;
	struct model_kv_layer *kv;
	int rc = 0, r, run;

	if (!rows_ok(s, layer, p0, n))
		return SEKV_EINVAL;
	kv = &s->kv[layer];
	if (s->m->hp.is_global[layer] && p0 + n > kv->cap)
		return SEKV_EINVAL;
	for (int i = 0; !rc && ring_run(kv->cap, p0, n, &i, &r, &run); i += run) {
		size_t off = (size_t)r * w * 2, bytes = (size_t)run * w * 2;
		if (!(rc = be->ops->buf_write(be, kv->k, off, k + (size_t)i * w, bytes)))
			rc = be->ops->buf_write(be, kv->v, off, v + (size_t)i * w, bytes);
	}
	return rc;
}

static void scratch_free(struct model_scratch *sc)
{
	if (!sc)
		return;
	if (sc->ws)
		sc->m->be->ops->ws_free(sc->ws);
	free(sc->x);
	free(sc->h);
	free(sc->t);
	free(sc->q);
	free(sc->att);
	free(sc->k);
	free(sc->v);
	free(sc->gate);
	free(sc->up);
	for (int b = 0; b < 2; b++) {
		free(sc->cs[b]);
		free(sc->sn[b]);
	}
	free(sc->logit);
	free(sc->mx);
	free(sc->sm);
	free(sc->tgt);
	free(sc);
}

static struct model_scratch *scratch_new(const struct model *m, int n_batch)
{
	const struct model_hparams *hp = &m->hp;
	struct model_scratch *sc = calloc(1, sizeof *sc);
	size_t nb = (size_t)n_batch, E = (size_t)hp->n_embd;
	size_t nq = (size_t)hp->n_head * hp->d_head, nkv = (size_t)hp->n_head_kv * hp->d_head;
	size_t half = (size_t)m->n_rot / 2;
	struct backend_ws_size wsz = { 0 }; /* mix_rows 0: no SeKV operation */
	int ok = 1;

	if (!sc)
		return NULL;
	sc->m = m;
	wsz.n_batch = n_batch;
	wsz.n_head = hp->n_head;
	wsz.d_head = hp->d_head;
	wsz.max_w_elems = m->max_w_elems > (size_t)VOCAB_TILE * E ? m->max_w_elems
								  : (size_t)VOCAB_TILE * E;
	wsz.max_cols = hp->n_ff > (int)nq ? hp->n_ff : (int)nq;
	if (wsz.max_cols < hp->n_embd)
		wsz.max_cols = hp->n_embd;
	if (m->be->ops->ws_new(m->be, &wsz, &sc->ws))
		ok = 0;
	sc->x = malloc(sizeof(float) * nb * E);
	sc->h = malloc(sizeof(float) * nb * E);
	sc->t = malloc(sizeof(float) * nb * E);
	sc->q = malloc(sizeof(float) * nb * nq);
	sc->att = malloc(sizeof(float) * nb * nq);
	sc->k = malloc(sizeof(float) * nb * nkv);
	sc->v = malloc(sizeof(float) * nb * nkv);
	sc->gate = malloc(sizeof(float) * nb * (size_t)hp->n_ff);
	sc->up = malloc(sizeof(float) * nb * (size_t)hp->n_ff);
	for (int b = 0; b < 2; b++) {
		sc->cs[b] = malloc(sizeof(float) * nb * half);
		sc->sn[b] = malloc(sizeof(float) * nb * half);
		ok = ok && sc->cs[b] && sc->sn[b];
	}
	sc->logit = malloc(sizeof(float) * nb * VOCAB_TILE);
	sc->mx = malloc(sizeof(float) * nb);
	sc->sm = malloc(sizeof(double) * nb);
	sc->tgt = malloc(sizeof(float) * nb);
	if (!ok || !sc->x || !sc->h || !sc->t || !sc->q || !sc->att || !sc->k || !sc->v ||
	    !sc->gate || !sc->up || !sc->logit || !sc->mx || !sc->sm || !sc->tgt) {
		scratch_free(sc);
		return NULL;
	}
	return sc;
}

int model_state_new(struct model_state **out, const struct model *m,
		    int n_ctx, int n_batch, int global_exact,
		    char *err, size_t errlen)
{
	const struct model_hparams *hp = &m->hp;
	struct model_state *s;
	size_t width = (size_t)hp->n_head_kv * hp->d_head;

	*out = NULL;
	if (n_ctx < 1 || n_batch < 1 || n_batch > (1 << 16) || n_ctx > (1 << 28))
		return sekv_errf(err, errlen, SEKV_EINVAL, "model: state: bad n_ctx %d / n_batch %d",
				 n_ctx, n_batch);
	s = calloc(1, sizeof *s);
	if (!s)
		return sekv_errf(err, errlen, SEKV_ENOMEM, "model: state: out of memory");
	s->m = m;
	s->n_ctx = n_ctx;
	s->n_batch = n_batch;
	s->global_exact = global_exact ? 1 : 0;
	for (int il = 0; il < hp->n_layer; il++) {
		struct model_kv_layer *kv = &s->kv[il];
		if (hp->is_global[il])
			kv->cap = global_exact ? n_ctx : 0;
		else
			kv->cap = hp->swa_window + n_batch;
		if (kv->cap == 0)
			continue;
		if (m->be->ops->buf_new(m->be, sizeof(uint16_t) * width * (size_t)kv->cap, &kv->k) ||
		    m->be->ops->buf_new(m->be, sizeof(uint16_t) * width * (size_t)kv->cap, &kv->v))
			goto nomem;
	}
	s->last_logits = malloc(sizeof(float) * (size_t)hp->n_vocab);
	s->scratch = scratch_new(m, n_batch);
	if (!s->last_logits || !s->scratch)
		goto nomem;
	*out = s;
	return 0;
nomem:
	model_state_free(s);
	return sekv_errf(err, errlen, SEKV_ENOMEM, "model: state: out of memory (n_ctx %d)", n_ctx);
}

void model_state_free(struct model_state *s)
{
	if (!s)
		return;
	for (int il = 0; il < MODEL_MAX_LAYER; il++) {
		s->m->be->ops->buf_free(s->m->be, s->kv[il].k);
		s->m->be->ops->buf_free(s->m->be, s->kv[il].v);
	}
	free(s->last_logits);
	scratch_free(s->scratch);
	free(s);
}

void model_state_reset(struct model_state *s)
{
	s->n_past = 0;
	s->have_last = 0;
	s->last_lse = 0.0;
}

void model_state_set_probe(struct model_state *s, const struct model_probe *p)
{
	s->probe = p;
}

int model_state_n_past(const struct model_state *s)
{
	return s->n_past;
}

int model_state_resume(struct model_state *s, int n_past)
{
	if (n_past < 0 || (s->global_exact && n_past > s->n_ctx))
		return SEKV_EINVAL;
	s->n_past = n_past;
	s->have_last = 0;
	s->last_lse = 0.0;
	return 0;
}

const float *model_state_logits(const struct model_state *s)
{
	return s->have_last ? s->last_logits : NULL;
}

double model_state_lse(const struct model_state *s)
{
	return s->have_last ? s->last_lse : 0.0;
}

int model_state_kv_cap(const struct model_state *s, int layer)
{
	if (layer < 0 || layer >= MODEL_MAX_LAYER)
		return 0;
	return s->kv[layer].cap;
}

/* ---- forward -------------------------------------------------------- */

/* cos/sin of the RoPE angles for both kinds of layer. */
static void rope_tables(const struct model *m, struct model_scratch *sc, int pos0, int n)
{
	for (int b = 0; b < 2; b++)
		model_rope_tables(&m->rope[b], pos0, n, sc->cs[b], sc->sn[b]);
}

int model_probe_backend(const struct model_probe *p, int layer, int n_head, float *rows,
			size_t ld, int n_key, struct backend_probe *pr)
{
	pr->n = 0;
	pr->n_key = rows ? n_key : p->n_pos;
	for (int i = 0; i < p->n && i < MODEL_PROBE_MAX && pr->n < BACKEND_PROBE_MAX; i++) {
		int h = p->head[i], dup = 0;
		if (p->layer[i] != layer || h < 0 || h >= n_head)
			continue;
		for (int e = 0; rows && e < pr->n; e++)
			dup |= pr->head[e] == h;
		if (dup)
			continue;
		pr->head[pr->n] = h;
		if (rows) {
			pr->mass[pr->n] = rows + (size_t)h * ld;
			memset(pr->mass[pr->n], 0, (size_t)n_key * sizeof(float));
		} else {
			pr->mass[pr->n] = p->mass + (size_t)i * p->n_pos;
		}
		pr->n++;
	}
	return pr->n > 0;
}

/* Attention block of layer il for n tokens at pos0: q, k, v projections
 * (+ biases), per-head q/k RMSNorm (QK_NORM), RoPE, attention (exact over the state's rows, or
 * the provider on global layers), output projection into sc->t. */
static int attn_block(const struct model *m, struct model_state *s, int il, int pos0,
		      int n, const struct model_attn *attn)
{
	const struct model_hparams *hp = &m->hp;
	const struct backend_ops *op = m->be->ops;
	struct backend *be = m->be;
	struct model_scratch *sc = s->scratch;
	const struct model_layer *L = &m->layer[il];
	struct model_kv_layer *kv = &s->kv[il];
	int nq = hp->n_head * hp->d_head, nkv = hp->n_head_kv * hp->d_head;
	int glob = hp->is_global[il], rc;

	op->matmul(be, sc->ws, &L->wq, 0, nq, sc->h, n, sc->q, nq);
	op->matmul(be, sc->ws, &L->wk, 0, nkv, sc->h, n, sc->k, nkv);
	op->matmul(be, sc->ws, &L->wv, 0, nkv, sc->h, n, sc->v, nkv);
	if (L->bq)
		op->add_bias(be, sc->q, L->bq, n, nq);
	if (L->bk)
		op->add_bias(be, sc->k, L->bk, n, nkv);
	if (L->bv)
		op->add_bias(be, sc->v, L->bv, n, nkv);
	if (L->q_norm) {
		op->rmsnorm(be, sc->q, L->q_norm, n * hp->n_head, hp->d_head, hp->norm_eps, sc->q);
		op->rmsnorm(be, sc->k, L->k_norm, n * hp->n_head_kv, hp->d_head, hp->norm_eps, sc->k);
	}
	op->rope(be, sc->q, n, hp->n_head, hp->d_head, m->n_rot, hp->rope_neox, sc->cs[glob],
		 sc->sn[glob]);
	op->rope(be, sc->k, n, hp->n_head_kv, hp->d_head, m->n_rot, hp->rope_neox, sc->cs[glob],
		 sc->sn[glob]);

	if (glob && attn) {
		/* Decode only (n == 1); exact rows are kept too when present. */
		if (kv->cap > 0 && pos0 < kv->cap)
			op->kv_store(be, kv->k, kv->v, kv->cap, nkv, sc->k, sc->v, pos0, 1);
		rc = attn->attend(attn->ctx, il, pos0, sc->q, sc->k, sc->v, sc->att);
		if (rc)
			return rc < 0 ? rc : SEKV_EINVAL;
	} else {
		struct backend_probe pr;
		struct backend_attn a = {
			.q = sc->q, .out = sc->att, .n = n, .pos0 = pos0,
			.n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .d_head = hp->d_head,
			.k = kv->k, .v = kv->v, .cap = kv->cap,
			.window = glob ? 0 : hp->swa_window, .scale = hp->q_scale,
		};
		if (glob && s->probe && model_probe_backend(s->probe, il, hp->n_head, NULL, 0, 0, &pr))
			a.probe = &pr;
		op->kv_store(be, kv->k, kv->v, kv->cap, nkv, sc->k, sc->v, pos0, n);
		if ((rc = op->attention(be, sc->ws, &a)))
			return rc;
	}
	op->matmul(be, sc->ws, &L->wo, 0, hp->n_embd, sc->att, n, sc->t, hp->n_embd);
	if (L->bo)
		op->add_bias(be, sc->t, L->bo, n, hp->n_embd);
	return 0;
}

/* Runs tokens[0..n) at positions n_past.. through every layer and the final
 * norm; leaves the normed hidden states in sc->h [n][n_embd]. The block
 * (pre-norm transformer; the optional steps per the family's row):
 *   x = embd (* sqrt(n_embd): EMBD_SCALE)
 *   t = attn(attn_norm(x)); t = post_attn_norm(t) (POST_NORM); x = x + t
 *   h = ffn_norm(x); t = down(act(gate(h)) * up(h))
 *   t = post_ffw_norm(t) (POST_NORM); x = x + t
 *   h = output_norm(x) */
static int forward(const struct model *m, struct model_state *s, const int32_t *tokens,
		   int n, const struct model_attn *attn)
{
	const struct model_hparams *hp = &m->hp;
	const struct backend_ops *op = m->be->ops;
	struct backend *be = m->be;
	struct model_scratch *sc = s->scratch;
	size_t ne = (size_t)n * hp->n_embd, nf = (size_t)n * hp->n_ff;
	int pos0 = s->n_past, rc;

	op->get_rows(be, &m->tok_embd, tokens, n, hp->embd_scale, sc->x);
	rope_tables(m, sc, pos0, n);
	for (int il = 0; il < hp->n_layer; il++) {
		const struct model_layer *L = &m->layer[il];

		op->rmsnorm(be, sc->x, L->attn_norm, n, hp->n_embd, hp->norm_eps, sc->h);
		if ((rc = attn_block(m, s, il, pos0, n, attn)))
			return rc;
		if (L->post_attn_norm)
			op->rmsnorm(be, sc->t, L->post_attn_norm, n, hp->n_embd, hp->norm_eps, sc->t);
		op->add(be, sc->x, sc->t, ne);

		op->rmsnorm(be, sc->x, L->ffn_norm, n, hp->n_embd, hp->norm_eps, sc->h);
		op->matmul(be, sc->ws, &L->gate, 0, hp->n_ff, sc->h, n, sc->gate, hp->n_ff);
		op->matmul(be, sc->ws, &L->up, 0, hp->n_ff, sc->h, n, sc->up, hp->n_ff);
		if (m->arch->act == MODEL_ACT_SILU)
			op->silu_mul(be, sc->gate, sc->up, nf);
		else
			op->gelu_mul(be, sc->gate, sc->up, nf);
		op->matmul(be, sc->ws, &L->down, 0, hp->n_embd, sc->gate, n, sc->t, hp->n_embd);
		if (L->post_ffw_norm)
			op->rmsnorm(be, sc->t, L->post_ffw_norm, n, hp->n_embd, hp->norm_eps, sc->t);
		op->add(be, sc->x, sc->t, ne);
	}
	op->rmsnorm(be, sc->x, m->output_norm, n, hp->n_embd, hp->norm_eps, sc->h);
	return 0;
}

/* Logits of one hidden row h [n_embd] into s->last_logits, with last_lse.
 * A tied head is token_embd, unscaled; no family we load soft-caps the
 * final logits (Gemma 3 with a sliding window: llama.cpp gemma3 iswa). */
static void last_logits_one(const struct model *m, struct model_state *s, const float *h)
{
	struct model_scratch *sc = s->scratch;
	float mx = -INFINITY;
	double sm = 0.0;

	m->be->ops->matmul(m->be, sc->ws, &m->output, 0, m->hp.n_vocab, h, 1,
			   s->last_logits, m->hp.n_vocab);
	m->be->ops->lse_fold(m->be, s->last_logits, 1, m->hp.n_vocab, m->hp.n_vocab, &mx, &sm);
	s->last_lse = (double)mx + log(sm);
	s->have_last = 1;
}

/* Surprisal of tokens[1..n) from rows 0..n-2 of sc->h and the last row's
 * full logits, in one pass over vocabulary tiles (dequantise VOCAB_TILE
 * rows, sgemm against the batch, fold max/sum per row). */
static void surprisal_tiles(const struct model *m, struct model_state *s,
			    const int32_t *tokens, int n, float *surprisal)
{
	const struct backend_ops *op = m->be->ops;
	struct model_scratch *sc = s->scratch;
	int V = m->hp.n_vocab;

	for (int i = 0; i < n; i++) {
		sc->mx[i] = -INFINITY;
		sc->sm[i] = 0.0;
		sc->tgt[i] = 0.0f;
	}
	for (int r0 = 0; r0 < V; r0 += VOCAB_TILE) {
		int T = V - r0 < VOCAB_TILE ? V - r0 : VOCAB_TILE;
		op->matmul(m->be, sc->ws, &m->output, r0, T, sc->h, n, sc->logit, T);
		op->lse_fold(m->be, sc->logit, n, T, T, sc->mx, sc->sm);
		for (int i = 0; i + 1 < n; i++) {
			int id = tokens[i + 1];
			if (id >= r0 && id < r0 + T)
				sc->tgt[i] = sc->logit[(size_t)i * T + (id - r0)];
		}
		memcpy(s->last_logits + r0, sc->logit + (size_t)(n - 1) * T, sizeof(float) * T);
	}
	for (int i = 0; i + 1 < n; i++)
		surprisal[i + 1] = (float)((double)sc->mx[i] + log(sc->sm[i]) - sc->tgt[i]);
	s->last_lse = (double)sc->mx[n - 1] + log(sc->sm[n - 1]);
	s->have_last = 1;
}

static int check_tokens(const struct model *m, const int32_t *tokens, int n,
			char *err, size_t errlen)
{
	for (int i = 0; i < n; i++)
		if (tokens[i] < 0 || tokens[i] >= m->hp.n_vocab)
			return sekv_errf(err, errlen, SEKV_EINVAL, "model: token %d at %d outside vocabulary",
					 tokens[i], i);
	return 0;
}

int model_prefill(const struct model *m, struct model_state *s,
		  const int32_t *tokens, int n, float *surprisal,
		  char *err, size_t errlen)
{
	struct model *mm = (struct model *)m;
	int rc;

	if (n < 1 || n > s->n_batch || !s->global_exact || s->n_past + n > s->n_ctx)
		return sekv_errf(err, errlen, SEKV_EINVAL,
				 "model: prefill: %d tokens at %d (n_batch %d, n_ctx %d, exact %d)",
				 n, s->n_past, s->n_batch, s->n_ctx, s->global_exact);
	if ((rc = check_tokens(m, tokens, n, err, errlen)))
		return rc;
	pthread_mutex_lock(&mm->lock);
	if (surprisal) {
		/* Before the tiles overwrite last_logits: the first token of a
		 * later chunk is scored by the previous chunk's last logits. */
		surprisal[0] = s->n_past > 0 && s->have_last
			? (float)(s->last_lse - s->last_logits[tokens[0]]) : 0.0f;
	}
	rc = forward(m, s, tokens, n, NULL);
	if (rc == 0) {
		struct model_scratch *sc = s->scratch;
		if (surprisal)
			surprisal_tiles(m, s, tokens, n, surprisal);
		else
			last_logits_one(m, s, sc->h + (size_t)(n - 1) * m->hp.n_embd);
		s->n_past += n;
		mm->n_eval += n;
	} else {
		s->have_last = 0;
	}
	pthread_mutex_unlock(&mm->lock);
	if (rc)
		return sekv_errf(err, errlen, rc, "model: prefill at %d: forward failed (%s)",
				 s->n_past, sekv_strerror(rc));
	return 0;
}

int model_decode(const struct model *m, struct model_state *s, int32_t token,
		 const struct model_attn *attn, float *logits,
		 char *err, size_t errlen)
{
	return model_decode_ex(m, s, token, attn, logits, 1, err, errlen);
}

int model_decode_ex(const struct model *m, struct model_state *s, int32_t token,
		    const struct model_attn *attn, float *logits, int need_logits,
		    char *err, size_t errlen)
{
	struct model *mm = (struct model *)m;
	int rc;

	if ((rc = check_tokens(m, &token, 1, err, errlen)))
		return rc;
	if (!attn && (!s->global_exact || s->n_past >= s->n_ctx))
		return sekv_errf(err, errlen, SEKV_EINVAL,
				 "model: decode at %d: no attention provider and no exact rows (n_ctx %d)",
				 s->n_past, s->n_ctx);
	pthread_mutex_lock(&mm->lock);
	rc = forward(m, s, &token, 1, attn);
	if (rc == 0) {
		if (need_logits)
			last_logits_one(m, s, ((struct model_scratch *)s->scratch)->h);
		else
			s->have_last = 0;
		s->n_past++;
		mm->n_eval++;
	} else {
		s->have_last = 0;
	}
	pthread_mutex_unlock(&mm->lock);
	if (rc)
		return sekv_errf(err, errlen, rc, "model: decode at %d: forward failed (%s)",
				 s->n_past, sekv_strerror(rc));
	if (logits && need_logits)
		memcpy(logits, s->last_logits, sizeof(float) * (size_t)m->hp.n_vocab);
	return 0;
}
