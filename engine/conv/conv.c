/* conv.c - the conversation's decode loop (conv.h).
 *
 * Invariant: the model state is positioned at the end of everything decoded
 * so far (the caller's start + earlier turns); the sampled token that ends
 * a turn is not decoded: the next turn starts by closing the model turn.
 * Turn starts are remembered so a KV method that evicts forgets whole turns,
 * oldest first. The KV methods themselves live in engine/sekv/, in the
 * model state and in the rivals' streams (kv_subset.c, kv_quest.c, kv_shadow.c);
 * documents are loaded by app/.
 */
#include "engine/conv/conv.h"

#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/conv/chat.h"
#include "engine/base/clock.h"
#include "engine/kv/kv_quest.h"
#include "engine/kv/kv_shadow.h"
#include "engine/kv/kv_subset.h"
#include "engine/base/err.h"
#include "engine/model/model.h"
#include "engine/sekv/sekv.h"
#include "engine/tok/tokenizer.h"
#include "engine/base/utf8.h"

#define CONV_MAX_TURNS 1024
#define CONV_PEND_CAP 256 /* bytes held back for an incomplete UTF-8 sequence */
#define CONV_ALPHA_BINS 80 /* alpha_S histogram: 1e-4 .. 1 in 1/20 decades */

struct conv {
	const struct model *m;
	const struct tok *tk;
	struct model_state *ms;
	const struct model_hparams *hp;
	struct conv_kv kv;
	struct conv_params p;
	struct chat_template ct;
	struct model_attn attn;
	struct sampler smp;
	float *logits;             /* [n_vocab] */
	int have_logits;
	int n_start;               /* positions in the state at conv_new */
	int n_tail;                /* positions added since */
	int turn_pos[CONV_MAX_TURNS]; /* start of each turn still held, positions */
	int n_turn_held;
	int n_turn;                /* questions asked */
	int n_answer_max;          /* answer tokens allowed in this answer: n_predict,
	                              or less where the model's context ends */
	size_t pos_bytes;          /* one position over all global layers, fp16 K+V */
	int32_t *agg_idx;          /* [n_global][n_span] -> index in agg, or -1 */
	struct sekv_zoom *agg;     /* [n_global * n_span] */
	long alpha_hist[CONV_ALPHA_BINS]; /* zooms of this answer by alpha_S:
	                                     bin b holds [10^(b/20 - 4), 10^((b+1)/20 - 4)) */
	struct chat_tokvec turn;   /* scratch: the turn being asked */
	struct chat_turn_marks turn_mk; /* where the question and the example lie in turn */
	struct model_probe probe;  /* copy of the caller's probe, NULL mass: off */
	struct model_probe probe_base; /* the same heads into the baseline */
	int32_t *hist;             /* [tail_cap] ids decoded since conv_new (or
	                              conv_set_kv), the first tail_cap of them */
	float *surp;               /* [tail_cap] their surprisal (nats), with
	                              p.surprisal; else NULL */
	conv_warn_fn warn;
	void *warn_ud;
};

/* ---- KV methods ----------------------------------------------------- */

void conv_kv_full(struct conv_kv *kv)
{
	memset(kv, 0, sizeof *kv);
	kv->name = "full";
}

void conv_kv_subset(struct conv_kv *kv, const char *name, struct kv_subset *s,
		    size_t budget_bytes)
{
	memset(kv, 0, sizeof *kv);
	kv->name = name;
	kv->ctx = s;
	kv->attend = kv_subset_attend;
	kv->tail_rows = kv_subset_tail_rows;
	kv->evict = kv_subset_evict;
	kv->resident_bytes = kv_subset_resident_bytes;
	kv->set_probe = kv_subset_set_probe;
	kv->answer_begin = kv_subset_answer_begin;
	kv->fixed_bytes = kv_subset_fixed_bytes(s);
	kv->budget_bytes = budget_bytes;
}

void conv_kv_quest(struct conv_kv *kv, struct kv_quest *s, size_t budget_bytes)
{
	memset(kv, 0, sizeof *kv);
	kv->name = "quest";
	kv->ctx = s;
	kv->attend = kv_quest_attend;
	kv->tail_rows = kv_quest_tail_rows;
	kv->evict = kv_quest_evict;
	kv->resident_bytes = kv_quest_resident_bytes;
	kv->set_probe = kv_quest_set_probe;
	kv->fixed_bytes = kv_quest_fixed_bytes(s);
	kv->budget_bytes = budget_bytes;
}

void conv_kv_shadow(struct conv_kv *kv, struct kv_shadow *s, size_t budget_bytes)
{
	memset(kv, 0, sizeof *kv);
	kv->name = "shadowkv";
	kv->ctx = s;
	kv->attend = kv_shadow_attend;
	kv->tail_rows = kv_shadow_tail_rows;
	kv->evict = kv_shadow_evict;
	kv->resident_bytes = kv_shadow_resident_bytes;
	kv->set_probe = kv_shadow_set_probe;
	kv->fixed_bytes = kv_shadow_fixed_bytes(s);
	kv->budget_bytes = budget_bytes;
}

static int sekv_tail(const void *ctx)
{
	return sekv_ctx_tail_rows(ctx);
}

static int sekv_evict(void *ctx, int pos)
{
	return sekv_ctx_evict_tail(ctx, pos);
}

static size_t sekv_resident(const void *ctx)
{
	return sekv_ctx_stats(ctx)->resident_bytes;
}

static const struct sekv_stats *sekv_stats_of(const void *ctx)
{
	return sekv_ctx_stats(ctx);
}

static void sekv_probe(void *ctx, const struct model_probe *p)
{
	sekv_ctx_set_probe(ctx, p);
}

static void sekv_question(void *ctx, int on)
{
	sekv_ctx_question(ctx, on);
}

void conv_kv_sekv(struct conv_kv *kv, struct sekv_ctx *sc, const struct sekv_mem *mem)
{
	memset(kv, 0, sizeof *kv);
	kv->name = "sekv";
	kv->ctx = sc;
	kv->attend = sekv_attend;
	kv->tail_rows = sekv_tail;
	kv->evict = sekv_evict;
	kv->resident_bytes = sekv_resident;
	kv->stats = sekv_stats_of;
	kv->fixed_bytes = mem->static_bytes;
	/* an exact memory (a short text: no compressed span) has no budget
	 * to keep: nothing is zoomed, so no turn is evicted for one */
	kv->budget_bytes = mem->n_comp > 0 ? sekv_ctx_stats(sc)->budget_bytes : 0;
	kv->n_span = mem->n_span;
	kv->set_probe = sekv_probe;
	kv->question = sekv_question;
}

/* ---- life cycle ----------------------------------------------------- */

const char *conv_stop_name(enum conv_stop s)
{
	return s == CONV_STOP_LENGTH ? "length" : s == CONV_STOP_USER ? "user" : "stop";
}

void conv_default_params(struct conv_params *p)
{
	memset(p, 0, sizeof *p);
	p->format = -1;
	p->n_predict = 256;
	p->tail_cap = CONV_TAIL_CAP;
	sampler_default_params(&p->sampler);
}

void conv_answer_free(struct conv_answer *a)
{
	if (!a)
		return;
	free(a->text);
	free(a->ids);
	free(a->zoom);
	free(a->mass_recall_lh);
	memset(a, 0, sizeof *a);
}

/* The per-answer zoom aggregate, sized for the method's spans. */
static int agg_alloc(struct conv *c)
{
	size_t n_agg = c->kv.stats && c->kv.n_span > 0 ? (size_t)c->hp->n_global * c->kv.n_span : 0;

	free(c->agg_idx);
	free(c->agg);
	c->agg_idx = NULL;
	c->agg = NULL;
	if (!n_agg)
		return 0;
	c->agg_idx = malloc(n_agg * sizeof *c->agg_idx);
	c->agg = malloc(n_agg * sizeof *c->agg);
	return c->agg_idx && c->agg ? 0 : SEKV_ENOMEM;
}

int conv_new(struct conv **out, const struct model *m, const struct tok *tk,
	     struct model_state *ms, const struct conv_kv *kv,
	     const struct conv_params *p, char *err, size_t errlen)
{
	struct conv *c;
	int rc;

	*out = NULL;
	if (p->n_predict < 0 || p->tail_cap < 1 || p->n_batch < 0 || p->format < -1 ||
	    p->format > CHAT_FORMAT_COMPLETION)
		return sekv_errf(err, errlen, SEKV_EINVAL, "conversation: n_predict %d, tail_cap %d, "
				 "n_batch %d, format %d: out of range", p->n_predict, p->tail_cap,
				 p->n_batch, p->format);
	if (!(c = calloc(1, sizeof *c)))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "conversation: out of memory");
	c->m = m;
	c->tk = tk;
	c->ms = ms;
	c->hp = model_hparams(m);
	c->kv = *kv;
	c->p = *p;
	c->attn = (struct model_attn){ kv->ctx, kv->attend };
	c->n_start = model_state_n_past(ms);
	c->pos_bytes = model_kv_bytes(1, c->hp->n_global, c->hp->n_head_kv, c->hp->d_head);
	enum chat_format fmt = p->format >= 0 ? (enum chat_format)p->format
		: chat_format_of_gguf(model_gguf(m));
	if (tk && (rc = chat_template_init(&c->ct, model_gguf(m), fmt, tk, err, errlen)))
		goto fail;
	c->ct.example = p->example;
	if (sampler_init(&c->smp, &p->sampler, c->hp->n_vocab)) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "conversation: sampler: out of memory");
		goto fail;
	}
	c->logits = malloc((size_t)c->hp->n_vocab * sizeof *c->logits);
	c->hist = malloc((size_t)p->tail_cap * sizeof *c->hist);
	if (p->surprisal)
		c->surp = malloc((size_t)p->tail_cap * sizeof *c->surp);
	if (!c->logits || !c->hist || (p->surprisal && !c->surp) || agg_alloc(c)) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "conversation: out of memory");
		goto fail;
	}
	*out = c;
	return 0;
fail:
	conv_free(c);
	return rc;
}

void conv_free(struct conv *c)
{
	if (!c)
		return;
	sampler_free(&c->smp);
	free(c->logits);
	free(c->agg_idx);
	free(c->agg);
	free(c->hist);
	free(c->surp);
	chat_tokvec_free(&c->turn);
	free(c);
}

/* Points the KV method's probe at p (NULL: off). */
static void probe_use(struct conv *c, const struct model_probe *p)
{
	if (c->kv.set_probe)
		c->kv.set_probe(c->kv.ctx, p);
	else
		model_state_set_probe(c->ms, p);
}

void conv_set_probe(struct conv *c, const struct model_probe *p, float *base)
{
	memset(&c->probe, 0, sizeof c->probe);
	memset(&c->probe_base, 0, sizeof c->probe_base);
	if (p) {
		c->probe = *p;
		c->probe_base = *p;
		if (base)
			c->probe_base.mass = base;
	}
	probe_use(c, p ? &c->probe : NULL);
}

/* The probe for turn token i: none in the worked example, the baseline
 * elsewhere before the question's text, the question's probe from it on. */
static void probe_turn_token(struct conv *c, int i)
{
	const struct chat_turn_marks *mk = &c->turn_mk;

	if (!c->probe.mass)
		return;
	if (i == 0 || i == mk->example_at || i == mk->example_end || i == mk->text_at)
		probe_use(c, i >= mk->text_at ? &c->probe
			     : i >= mk->example_at && i < mk->example_end ? NULL : &c->probe_base);
}

void conv_set_warn(struct conv *c, conv_warn_fn fn, void *ud)
{
	c->warn = fn;
	c->warn_ud = ud;
}

const struct model *conv_model(const struct conv *c)
{
	return c->m;
}

const int32_t *conv_tokens(const struct conv *c, int *n)
{
	*n = c->n_tail < c->p.tail_cap ? c->n_tail : c->p.tail_cap;
	return c->hist;
}

const float *conv_surprisal(const struct conv *c, int *n)
{
	*n = c->surp ? (c->n_tail < c->p.tail_cap ? c->n_tail : c->p.tail_cap) : 0;
	return c->surp;
}

int conv_set_kv(struct conv *c, const struct conv_kv *kv, char *err, size_t errlen)
{
	c->kv = *kv;
	c->attn = (struct model_attn){ kv->ctx, kv->attend };
	c->n_start = model_state_n_past(c->ms);
	c->n_tail = 0;
	c->n_turn_held = 0;
	if (agg_alloc(c))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "conversation: out of memory");
	if (c->probe.mass)
		probe_use(c, &c->probe);
	return 0;
}

int conv_next_surprisal(const struct conv *c, float *h, char *err, size_t errlen)
{
	struct chat_tokvec v = { 0 };
	const float *lg = model_state_logits(c->ms);
	int rc;

	*h = c->p.h_first;
	if (!c->tk || !lg)
		return 0;
	/* the next turn's first token does not depend on its text */
	rc = chat_build_turn(&v, &c->ct, c->tk, CHAT_START_AFTER_MODEL, NULL, "?", 1, 1, NULL,
			     err, errlen);
	if (!rc && v.n > 0)
		*h = (float)(model_state_lse(c->ms) - lg[v.ids[0]]);
	chat_tokvec_free(&v);
	return rc;
}

const float *conv_logits(const struct conv *c)
{
	return c->have_logits ? c->logits : NULL;
}

/* ---- feeding tokens ------------------------------------------------- */

static int held_rows(const struct conv *c)
{
	return c->kv.tail_rows ? c->kv.tail_rows(c->kv.ctx) : c->n_tail;
}

static size_t resident_now(const struct conv *c)
{
	if (c->kv.resident_bytes)
		return c->kv.resident_bytes(c->kv.ctx);
	return (size_t)(c->n_start + c->n_tail) * c->pos_bytes;
}

/* Raises a's peak resident bytes to now's (first: sets it), with the
 * peak's tail and rebuilt rows from the method's statistics. */
static size_t note_peak(const struct conv *c, struct conv_answer *a, int first)
{
	size_t res = resident_now(c);
	const struct sekv_stats *st;

	if (first || res > a->peak_resident_bytes) {
		st = c->kv.stats ? c->kv.stats(c->kv.ctx) : NULL;
		a->peak_resident_bytes = res;
		a->peak_tail_bytes = st ? st->tail_bytes : 0;
		a->peak_recon_bytes = st ? st->recon_bytes : 0;
	}
	return res;
}

static int decode_one(struct conv *c, int32_t id, int need_logits, char *err, size_t errlen)
{
	if (held_rows(c) >= c->p.tail_cap)
		return sekv_errf(err, errlen, SEKV_EINVAL,
				 "conversation: reached %d tokens after its start; start a new one",
				 c->p.tail_cap);
	/* the surprisal of id under the logits before it (DESIGN.md section 2
	 * step 3): every token's logits are then needed */
	float h = c->p.h_first;
	if (c->surp) {
		need_logits = 1;
		if (model_state_logits(c->ms))
			h = (float)(model_state_lse(c->ms) - model_state_logits(c->ms)[id]);
	}
	int rc = model_decode_ex(c->m, c->ms, id, c->kv.attend ? &c->attn : NULL, c->logits,
				 need_logits, err, errlen);
	if (rc)
		return rc;
	c->have_logits = need_logits;
	if (c->n_tail < c->p.tail_cap) {
		c->hist[c->n_tail] = id;
		if (c->surp)
			c->surp[c->n_tail] = h;
	}
	c->n_tail++;
	return 0;
}

int conv_prefill(struct conv *c, const int32_t *ids, int n, char *err, size_t errlen)
{
	int batch = c->p.n_batch > 0 ? c->p.n_batch : 1;

	if (c->kv.attend)
		return sekv_errf(err, errlen, SEKV_EINVAL, "conversation: prefill needs full KV, not %s",
				 c->kv.name);
	for (int pos = 0; pos < n; pos += batch) {
		int k = n - pos < batch ? n - pos : batch;
		int rc = model_prefill(c->m, c->ms, ids + pos, k, NULL, err, errlen);
		if (rc)
			return rc;
		for (int i = 0; i < k && c->n_tail + i < c->p.tail_cap; i++)
			c->hist[c->n_tail + i] = ids[pos + i];
		c->n_tail += k;
	}
	if (n > 0) {
		memcpy(c->logits, model_state_logits(c->ms), (size_t)c->hp->n_vocab * sizeof *c->logits);
		c->have_logits = 1;
	}
	return 0;
}

int conv_feed(struct conv *c, const int32_t *ids, int n, char *err, size_t errlen)
{
	for (int i = 0; i < n; i++) {
		int rc = decode_one(c, ids[i], i == n - 1, err, errlen);
		if (rc)
			return rc;
	}
	return 0;
}

int conv_answer_begin(struct conv *c, char *err, size_t errlen)
{
	int rc = c->kv.answer_begin ? c->kv.answer_begin(c->kv.ctx) : 0;

	if (rc)
		return sekv_errf(err, errlen, rc, "conversation: %s: choosing the rows for the answer: %s",
				 c->kv.name, sekv_strerror(rc));
	return 0;
}

/* ---- turns ---------------------------------------------------------- */

/* With a method that evicts: drops the oldest whole turns while the held
 * question and answer rows, plus this turn and its longest answer, would
 * take more than half of the budget left after the fixed part (the other
 * half stays for zooming) or more than the tail capacity. */
static void evict_turns(struct conv *c, int n_new, int n_answer, struct conv_answer *a)
{
	long long cap = c->p.tail_cap;

	if (c->kv.budget_bytes) {
		long long free_rows = c->kv.budget_bytes > c->kv.fixed_bytes
			? (long long)((c->kv.budget_bytes - c->kv.fixed_bytes) / c->pos_bytes) : 0;
		if (free_rows / 2 < cap)
			cap = free_rows / 2;
		/* past half, the answer's rows take the zoom's share; only a
		 * question longer than all of it must go over (conv_ask checks
		 * the peak when the answer ends) */
		if (n_new > free_rows) {
			snprintf(a->warn, sizeof a->warn,
				 "this question (%d tokens) needs more fast-tier rows than the budget leaves "
				 "after the memory's fixed part (%lld): the device tier goes over the budget "
				 "for this answer", n_new, free_rows);
			if (c->warn)
				c->warn(c->warn_ud, a->warn);
		}
	}
	int k = 0;
	while (k < c->n_turn_held && held_rows(c) + (long long)n_new + n_answer > cap) {
		int upto = k + 1 < c->n_turn_held ? c->turn_pos[k + 1] : c->n_start + c->n_tail;
		int before = held_rows(c);
		if (c->kv.evict(c->kv.ctx, upto))
			break;
		a->n_evicted_tokens += before - held_rows(c);
		a->n_evicted_turns++;
		k++;
	}
	memmove(c->turn_pos, c->turn_pos + k, (size_t)(c->n_turn_held - k) * sizeof *c->turn_pos);
	c->n_turn_held -= k;
}

/* How the next turn starts: after the model's answer once a turn was
 * asked (here or before a resume), else in the document's open user turn
 * or at the start of the stream. */
static enum chat_turn_start turn_start(const struct conv *c)
{
	if (c->n_turn + c->p.n_turn_before > 0)
		return CHAT_START_AFTER_MODEL;
	return c->p.in_user_turn ? CHAT_START_IN_USER : CHAT_START_STREAM;
}

static int build_turn(struct conv *c, const char *q, char *err, size_t errlen)
{
	enum chat_turn_start start = turn_start(c);

	c->turn.n = 0;
	return chat_build_turn(&c->turn, &c->ct, c->tk, start, NULL, q, strlen(q), 1,
			       &c->turn_mk, err, errlen);
}

static void remember_turn(struct conv *c)
{
	if (c->n_turn_held == CONV_MAX_TURNS) {
		memmove(c->turn_pos, c->turn_pos + 1, (CONV_MAX_TURNS - 1) * sizeof *c->turn_pos);
		c->n_turn_held--;
	}
	c->turn_pos[c->n_turn_held++] = c->n_start + c->n_tail;
}

/* Decodes (or prefills) the turn; fn sees each question token and may stop. */
static int feed_turn(struct conv *c, conv_step_fn fn, void *ud, struct conv_answer *a,
		     char *err, size_t errlen)
{
	const struct chat_tokvec *v = &c->turn;

	if (c->p.n_batch > 0 && !c->kv.attend)
		return conv_prefill(c, v->ids, v->n, err, errlen);
	for (int i = 0; i < v->n; i++) {
		probe_turn_token(c, i);
		int rc = decode_one(c, v->ids[i], i == v->n - 1, err, errlen);
		if (rc)
			return rc;
		struct conv_step ev = { .question = 1, .piece = "", .token = -1,
					.resident_bytes = resident_now(c),
					.logits = i == v->n - 1 ? c->logits : NULL };
		ev.peak_resident_bytes = ev.resident_bytes;
		if (fn && fn(ud, &ev)) {
			a->stopped = CONV_STOP_USER;
			return SEKV_EINTR;
		}
	}
	return 0;
}

/* ---- answers -------------------------------------------------------- */

/* Folds this step's zooms into the per-answer aggregate. */
static void agg_step(struct conv *c, const struct sekv_stats *st, struct conv_answer *a, int *n_agg)
{
	int n_span = c->kv.n_span;

	a->zoom_per_token += st->n_zoom;
	for (int i = 0; i < st->n_zoom; i++) {
		const struct sekv_zoom *z = &st->zoom[i];
		int b = z->alpha > 0 ? (int)floor((log10(z->alpha) + 4) * 20) : 0;
		c->alpha_hist[b < 0 ? 0 : b >= CONV_ALPHA_BINS ? CONV_ALPHA_BINS - 1 : b]++;
		if (z->layer < 0 || z->layer >= c->hp->n_global || z->span < 0 || z->span >= n_span)
			continue;
		int32_t *slot = &c->agg_idx[(size_t)z->layer * n_span + z->span];
		if (*slot < 0) {
			*slot = (*n_agg)++;
			c->agg[*slot] = (struct sekv_zoom){ z->span, z->layer, z->head, 0, z->alpha,
							    z->r0, z->n };
		}
		struct sekv_zoom *g = &c->agg[*slot];
		g->steps++;
		if (z->alpha > g->alpha) {
			g->alpha = z->alpha;
			g->head = z->head;
		}
	}
}

static int cmp_zoom(const void *a, const void *b)
{
	const struct sekv_zoom *x = a, *y = b;
	if (x->steps != y->steps)
		return y->steps - x->steps;
	if (x->layer != y->layer)
		return x->layer - y->layer;
	return x->span - y->span;
}

static int append_text(struct conv_answer *a, size_t *cap, const char *p, size_t n)
{
	if (a->text_len + n + 1 > *cap) {
		size_t nc = (*cap ? *cap : 256);
		while (nc < a->text_len + n + 1)
			nc *= 2;
		char *t = realloc(a->text, nc);
		if (!t)
			return SEKV_ENOMEM;
		a->text = t;
		*cap = nc;
	}
	memcpy(a->text + a->text_len, p, n);
	a->text_len += n;
	a->text[a->text_len] = 0;
	return 0;
}

static void trim_end(struct conv_answer *a)
{
	while (a->text_len > 0 && strchr(" \t\r\n", a->text[a->text_len - 1]))
		a->text[--a->text_len] = 0;
}

/* Copies the per-answer zoom aggregate out, by steps descending, and the
 * alpha_S percentiles (bin centres, geometric) from the histogram. */
static int finish_zoom(struct conv *c, struct conv_answer *a, int n_agg, char *err, size_t errlen)
{
	static const double pct[3] = { 0.1, 0.5, 0.9 };
	long n = 0, run = 0;

	for (int b = 0; b < CONV_ALPHA_BINS; b++)
		n += c->alpha_hist[b];
	for (int i = 0, b = 0; i < 3; i++) {
		a->alpha_q[i] = -1;
		for (; n > 0 && b < CONV_ALPHA_BINS; run += c->alpha_hist[b++])
			if (run + c->alpha_hist[b] > pct[i] * n)
				break;
		if (n > 0)
			a->alpha_q[i] = (float)fmin(1.0, pow(10.0, (b + 0.5) / 20.0 - 4));
	}
	if (a->n_gen > 0)
		a->zoom_per_token /= a->n_gen;
	if (n_agg <= 0)
		return 0;
	if (!(a->zoom = malloc((size_t)n_agg * sizeof *a->zoom)))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "conversation: out of memory");
	memcpy(a->zoom, c->agg, (size_t)n_agg * sizeof *a->zoom);
	qsort(a->zoom, (size_t)n_agg, sizeof *a->zoom, cmp_zoom);
	a->n_zoom = n_agg;
	return 0;
}

/* Samples, decodes and streams the answer; pend holds back an incomplete
 * UTF-8 sequence until a later token completes it, the stop rules (sr)
 * what they have not decided. The text of a token is judged before the
 * token is decoded, so the token that ends the answer never is. */
static int answer_loop(struct conv *c, conv_step_fn fn, void *ud, struct conv_answer *a,
		       char *err, size_t errlen)
{
	char pend[CONV_PEND_CAP], shown[CONV_PEND_CAP + CHAT_STOP_HOLD];
	size_t n_pend = 0, cap = 0;
	int rc, n_agg = 0, n_read = 0;
	struct chat_stop sr;

	if ((rc = append_text(a, &cap, "", 0)))
		return sekv_errf(err, errlen, rc, "conversation: out of memory");
	chat_stop_init(&sr, c->ct.fmt);
	memset(c->alpha_hist, 0, sizeof c->alpha_hist);
	a->n_cap = c->n_answer_max;
	double g0 = clk_now();
	sampler_reset_recent(&c->smp);
	for (;;) {
		int32_t id = sampler_sample(&c->smp, c->logits);
		if (chat_is_end(&c->ct, id))
			break;
		if (a->n_gen >= c->n_answer_max) {
			a->stopped = CONV_STOP_LENGTH;
			break;
		}
		int n = tok_token_text(c->tk, id, pend + n_pend, (int)(sizeof pend - n_pend));
		if (n > 0)
			n_pend += (size_t)n;
		size_t ok = utf8_complete(pend, n_pend);
		if (n_pend >= sizeof pend - 8)
			ok = n_pend; /* never stall on garbage */
		int n_shown = chat_stop_feed(&sr, pend, (int)ok, shown);
		memmove(pend, pend + ok, n_pend - ok);
		n_pend -= ok;
		if ((rc = append_text(a, &cap, shown, (size_t)n_shown)))
			return sekv_errf(err, errlen, rc, "conversation: out of memory");
		if (sr.done && n_shown == 0)
			break;
		if (!sr.done && (rc = decode_one(c, id, 1, err, errlen)))
			return rc;
		a->ids[a->n_gen++] = id;
		if (!sr.done)
			sampler_accept(&c->smp, id);
		const struct sekv_stats *st = c->kv.stats && !sr.done ? c->kv.stats(c->kv.ctx) : NULL;
		if (st && c->agg)
			agg_step(c, st, a, &n_agg);
		size_t res = note_peak(c, a, 0);
		if (!sr.done) {
			a->kv_read_per_token += (double)(st ? st->read_bytes : res);
			n_read++;
		}
		double el = clk_now() - g0;
		struct conv_step ev = {
			.piece = shown, .piece_len = n_shown, .token = id, .n_gen = a->n_gen,
			.tps = el > 0 ? a->n_gen / el : 0, .stats = st,
			.resident_bytes = res, .peak_resident_bytes = a->peak_resident_bytes,
			.logits = sr.done ? NULL : c->logits,
		};
		if (fn && fn(ud, &ev)) {
			a->stopped = CONV_STOP_USER;
			break;
		}
		if (sr.done)
			break;
	}
	if (!sr.done) {
		memcpy(a->rest, pend, n_pend);
		a->n_rest = (int)n_pend;
	}
	trim_end(a);
	a->decode_s = clk_now() - g0;
	a->decode_tps = a->decode_s > 0 ? a->n_gen / a->decode_s : 0;
	if (n_read > 0)
		a->kv_read_per_token /= n_read;
	return finish_zoom(c, a, n_agg, err, errlen);
}

/* Positions past the model's training context (hparams n_ctx_train) are
 * never decoded: a question that would cross it is refused, an answer
 * that would is capped where the context ends (and a->warn says so). */
static int fit_context(struct conv *c, int n_answer, struct conv_answer *a, char *err, size_t errlen)
{
	long long n_ctx = c->hp->n_ctx_train;
	long long at = (long long)c->n_start + c->n_tail + c->turn.n;

	c->n_answer_max = n_answer;
	if (n_ctx <= 0)
		return 0;
	if (at >= n_ctx)
		return sekv_errf(err, errlen, SEKV_EINVAL,
				 "this question would end at position %lld, past the model's context of %lld "
				 "tokens (document and conversation so far: %lld): start a new conversation "
				 "or ask a shorter question", at, n_ctx, at - c->turn.n);
	if (at + n_answer > n_ctx) {
		c->n_answer_max = (int)(n_ctx - at);
		snprintf(a->warn, sizeof a->warn,
			 "the model's context of %lld tokens ends %d tokens into this answer: "
			 "it stops there (-n %d asked)", n_ctx, c->n_answer_max, n_answer);
		if (c->warn)
			c->warn(c->warn_ud, a->warn);
	}
	return 0;
}

/* The turn for text up to its answer, shared by conv_ask and
 * conv_ask_forced: built, checked against the tail capacity and the
 * context for an answer of up to n_answer tokens (what (static text) names
 * that cap in messages: "-n" or "a forced answer of"), old turns evicted,
 * decoded. a is initialised here. */
static int start_turn(struct conv *c, const char *text, int n_answer, const char *what,
		      conv_step_fn fn, void *ud, struct conv_answer *a, char *err, size_t errlen)
{
	int rc;

	memset(a, 0, sizeof *a);
	if (!c->tk)
		return sekv_errf(err, errlen, SEKV_EINVAL, "conversation: no tokenizer: only given tokens can be fed");
	if (!(a->ids = malloc(((size_t)n_answer + 1) * sizeof *a->ids)))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "conversation: out of memory");
	if ((rc = build_turn(c, text, err, errlen)))
		return rc;
	if (c->agg_idx)
		memset(c->agg_idx, 0xff, (size_t)c->hp->n_global * c->kv.n_span * sizeof *c->agg_idx);
	if (n_answer >= c->p.tail_cap)
		return sekv_errf(err, errlen, SEKV_EINVAL,
				 "%s %d is too large: a question and its answer may take at most %d tokens",
				 what, n_answer, c->p.tail_cap);
	if ((long long)c->turn.n + n_answer > c->p.tail_cap)
		return sekv_errf(err, errlen, SEKV_EINVAL,
				 "question of %d tokens is too long: a question and its answer (%s %d) may take "
				 "at most %d tokens", c->turn.n, what, n_answer, c->p.tail_cap);
	if ((rc = fit_context(c, n_answer, a, err, errlen)))
		return rc;
	if (c->kv.evict)
		evict_turns(c, c->turn.n, n_answer, a);
	remember_turn(c);

	double t0 = clk_now();
	if (c->kv.question)
		c->kv.question(c->kv.ctx, 1);
	rc = feed_turn(c, fn, ud, a, err, errlen);
	if (c->kv.question)
		c->kv.question(c->kv.ctx, 0);
	if (!rc)
		rc = conv_answer_begin(c, err, errlen);
	a->n_question = c->turn.n;
	a->question_s = clk_now() - t0;
	if (c->kv.stats && c->kv.stats(c->kv.ctx))
		a->question_host_bytes = c->kv.stats(c->kv.ctx)->question_host_bytes;
	note_peak(c, a, 1);
	return rc;
}

int conv_ask(struct conv *c, const char *text, conv_step_fn fn, void *ud,
	     struct conv_answer *a, char *err, size_t errlen)
{
	int rc = start_turn(c, text, c->p.n_predict, "-n", fn, ud, a, err, errlen);

	if (rc && rc != SEKV_EINTR)
		return rc;
	const struct sekv_stats *st0 = c->kv.stats ? c->kv.stats(c->kv.ctx) : NULL;
	double mr_sum = st0 ? st0->mass_recall_sum : 0, ae_sum = st0 ? st0->attn_err_sum : 0;
	long long mr_n = st0 ? st0->mass_recall_n : 0, ae_n = st0 ? st0->attn_err_n : 0;
	double mo_sum = st0 ? st0->mass_oracle_sum : 0;
	long long mo_n = st0 ? st0->mass_oracle_n : 0;
	size_t n_lh = (size_t)c->hp->n_global * c->hp->n_head;
	/* the per layer/head sums before the answer, then the answer's means */
	if (st0 && st0->mass_recall_lh && (a->mass_recall_lh = malloc(n_lh * sizeof *a->mass_recall_lh)))
		memcpy(a->mass_recall_lh, st0->mass_recall_lh, n_lh * sizeof *a->mass_recall_lh);
	if (!rc)
		rc = answer_loop(c, fn, ud, a, err, errlen);
	if (rc && rc != SEKV_EINTR)
		return rc;
	a->mass_recall = -1;
	a->attn_err = st0 && st0->attn_err_n > ae_n ?
		      (st0->attn_err_sum - ae_sum) / (double)(st0->attn_err_n - ae_n) : -1;
	a->mass_oracle = st0 && st0->mass_oracle_n > mo_n ?
			 (st0->mass_oracle_sum - mo_sum) / (double)(st0->mass_oracle_n - mo_n) : -1;
	if (st0 && st0->mass_recall_n > mr_n) {
		long long terms = st0->mass_recall_n - mr_n;
		a->mass_recall = (st0->mass_recall_sum - mr_sum) / (double)terms;
		/* every global layer is decoded once per step: each (layer, head)
		 * has terms / n_lh of them */
		for (size_t i = 0; a->mass_recall_lh && i < n_lh; i++)
			a->mass_recall_lh[i] = (st0->mass_recall_lh[i] - a->mass_recall_lh[i]) * (double)n_lh /
					       (double)terms;
	} else {
		free(a->mass_recall_lh);
		a->mass_recall_lh = NULL;
	}
	a->repeats_example = c->ct.example && a->text && chat_repeats_example(a->text, c->ct.example);
	if (c->kv.budget_bytes && a->peak_resident_bytes > c->kv.budget_bytes && !a->warn[0])
		snprintf(a->warn, sizeof a->warn,
			 "the device tier went over the budget for this answer: its peak was %.1f%% of the "
			 "budget (%d question and %d answer tokens held beside the memory's fixed part)",
			 100.0 * (double)a->peak_resident_bytes / (double)c->kv.budget_bytes, a->n_question,
			 a->n_gen);
	c->n_turn++;
	return a->stopped == CONV_STOP_USER ? SEKV_EINTR : 0;
}

int conv_ask_forced(struct conv *c, const char *text, const int32_t *ids, int n,
		    conv_forced_fn fn, void *ud, struct conv_answer *out, char *err, size_t errlen)
{
	struct conv_answer tmp, *a = out ? out : &tmp;
	int rc;

	if (n < 0) {
		memset(a, 0, sizeof *a);
		return sekv_errf(err, errlen, SEKV_EINVAL, "conversation: forced answer of %d tokens", n);
	}
	if ((rc = start_turn(c, text, n, "a forced answer of", NULL, NULL, a, err, errlen)))
		goto out;
	if (n > c->n_answer_max) {
		rc = sekv_errf(err, errlen, SEKV_EINVAL, "conversation: a forced answer of %d tokens passes "
			       "the model's context (%d fit)", n, c->n_answer_max);
		goto out;
	}
	double g0 = clk_now();
	for (int i = 0; i < n; i++) {
		if (fn && fn(ud, i, c->logits)) {
			rc = SEKV_EINTR;
			break;
		}
		if ((rc = decode_one(c, ids[i], i + 1 < n, err, errlen)))
			break;
		a->ids[a->n_gen++] = ids[i];
		note_peak(c, a, 0);
	}
	a->decode_s = clk_now() - g0;
	a->decode_tps = a->decode_s > 0 ? a->n_gen / a->decode_s : 0;
	a->mass_recall = -1;
	a->attn_err = -1;
	a->mass_oracle = -1;
	c->n_turn++;
out:
	if (!out)
		conv_answer_free(&tmp);
	return rc;
}
