/* session.c - question answering over a stored document (session.h).
 *
 * Invariant: the model state is positioned at the end of everything decoded
 * so far (document + earlier turns); document KV comes only from the
 * library (SeKV memory, or exact rows with --kv full), never from a forward
 * pass. The sampled token that ends a turn is not decoded: the next turn
 * starts by closing the model turn.
 */
#include "app/session.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/app.h"
#include "engine/chat.h"
#include "engine/err.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/sekv/sekv.h"
#include "engine/tokenizer.h"
#include "store/store.h"

#define SESSION_TAIL_CAP 8192 /* question + answer tokens per session */
#define SESSION_BATCH 64
#define SESSION_MAX_TURNS 1024

struct session {
	struct app_opts o;
	struct model *m;
	struct tok *tk;
	struct store *st;
	struct chat_template ct;
	struct store_doc doc;
	const struct model_hparams *hp;
	struct sekv_mem *mem;      /* SeKV mode */
	struct sekv_ctx *sc;       /* SeKV mode */
	struct sekv_params sp;
	struct model_attn attn;
	int32_t *tokens;           /* [n_tok] document tokens */
	int n_tok;
	struct model_state *ms;
	struct sampler smp;
	float *logits;             /* [n_vocab] */
	int n_tail;                /* tokens decoded after the document */
	int turn_pos[SESSION_MAX_TURNS]; /* start of each turn still held, positions */
	int n_turn_held;
	int n_turn;                /* answers given */
	double resume_s;
	char note[256];            /* why the budget cannot be met, or "" */
	size_t swa_bytes;
	size_t full_kv_bytes;
	size_t row_bytes;          /* one position, one global layer, K+V fp16 */
	int32_t *agg_idx;          /* [n_layer][n_span] -> index in agg, -1 */
	struct session_zoom *agg;  /* [n_layer * n_span] */
	struct chat_tokvec turn;   /* scratch for a turn's tokens */
	session_warn_fn warn;
	void *warn_ud;
};

void session_set_warn(struct session *s, session_warn_fn fn, void *ud)
{
	s->warn = fn;
	s->warn_ud = ud;
}

void session_answer_free(struct session_answer *a)
{
	if (!a)
		return;
	free(a->text);
	free(a->ids);
	free(a->zoom);
	memset(a, 0, sizeof *a);
}

static int load_swa(struct session *s, char *err, size_t errlen)
{
	int n_layer = 0, n_row = 0, rc;
	int32_t *layer_id = NULL;
	uint16_t **k = NULL, **v = NULL;
	size_t row = (size_t)s->hp->n_head_kv * s->hp->d_head;

	rc = store_doc_get_swa(s->st, s->doc.id, &n_layer, &layer_id, &n_row, &k, &v, err, errlen);
	if (rc)
		return rc;
	for (int i = 0; i < n_layer; i++) {
		int l = layer_id[i];
		if (l < 0 || l >= s->hp->n_layer || s->hp->is_global[l] || n_row > s->n_tok) {
			rc = sekv_errf(err, errlen, SEKV_EFORMAT,
				       "session: document %lld: bad sliding-window layer %d", (long long)s->doc.id, l);
			break;
		}
		if (model_state_set_rows(s->ms, l, s->n_tok - n_row, n_row, k[i], v[i])) {
			rc = sekv_errf(err, errlen, SEKV_EFORMAT,
				       "session: document %lld: %d sliding-window rows do not fit layer %d",
				       (long long)s->doc.id, n_row, l);
			break;
		}
	}
	s->swa_bytes = (size_t)n_layer * n_row * row * 2 * 2;
	store_swa_free(n_layer, layer_id, k, v);
	return rc;
}

static int open_memory(struct session *s, char *err, size_t errlen)
{
	const struct model_hparams *hp = s->hp;
	int rc;

	if (s->o.kv_full) {
		rc = model_state_new(&s->ms, s->m, s->n_tok + SESSION_TAIL_CAP, SESSION_BATCH, 1, err, errlen);
		if (rc)
			return rc;
		size_t n = (size_t)s->n_tok * hp->n_head_kv * hp->d_head;
		uint16_t *k = malloc(n * sizeof *k), *v = malloc(n * sizeof *v);
		if (!k || !v)
			rc = sekv_errf(err, errlen, SEKV_ENOMEM, "session: out of memory");
		for (int l = 0; !rc && l < hp->n_global; l++) {
			rc = store_doc_get_full_kv(s->st, s->doc.id, l, k, v, err, errlen);
			if (!rc && model_state_set_rows(s->ms, hp->global_layer[l], 0, s->n_tok, k, v))
				rc = sekv_errf(err, errlen, SEKV_EINVAL, "session: cannot restore global layer %d",
					       hp->global_layer[l]);
		}
		free(k);
		free(v);
		if (rc)
			return rc;
	} else {
		rc = store_doc_get_mem(s->st, s->doc.id, &s->mem, err, errlen);
		if (rc)
			return rc;
		if (s->mem->n_tok != s->n_tok || s->mem->n_layer != hp->n_global ||
		    s->mem->d_h != hp->d_head || s->mem->n_head_kv != hp->n_head_kv)
			return sekv_errf(err, errlen, SEKV_EFORMAT,
					 "session: document %lld: stored memory shape does not match the model",
					 (long long)s->doc.id);
		sekv_default_params(&s->sp);
		s->sp.budget = s->o.budget_set ? s->o.budget : s->doc.budget;
		s->sp.r_max = s->mem->r_max;
		s->sp.r_use = s->o.r_max_set ? s->o.r_max : s->mem->r_max;
		if (s->sp.r_use > s->mem->r_max)
			snprintf(s->note, sizeof s->note,
				 "rank %d is above the rank %d this document was stored with: %d is used "
				 "(ingest with --rmax %d to keep more)", s->sp.r_use, s->mem->r_max,
				 s->mem->r_max, s->sp.r_use);
		s->sp.n_threads = s->o.n_threads;
		double fixed = (double)s->mem->static_bytes / (double)s->mem->full_kv_bytes;
		if (fixed > s->sp.budget && s->mem->n_comp == 0)
			snprintf(s->note, sizeof s->note,
				 "this document is short enough to be kept exact (%d tokens, no compressed span): "
				 "the budget does not apply", s->n_tok);
		else if (fixed > s->sp.budget)
			snprintf(s->note, sizeof s->note,
				 "budget %.1f%% is below the fixed part of this memory (%.1f%%: anchors, short spans, "
				 "summaries, recent window): no span can be zoomed; ask with --budget %.2f or more",
				 100 * s->sp.budget, 100 * fixed, ceil(fixed * 100.0 + 1.0) / 100.0);
		rc = sekv_ctx_new(&s->sc, s->mem, &s->sp, SESSION_TAIL_CAP, hp->q_scale, err, errlen);
		if (rc)
			return rc;
		s->attn.ctx = s->sc;
		s->attn.attend = sekv_attend;
		rc = model_state_new(&s->ms, s->m, SESSION_BATCH, SESSION_BATCH, 0, err, errlen);
		if (rc)
			return rc;
		s->agg_idx = malloc((size_t)s->mem->n_layer * (s->mem->n_span + 1) * sizeof *s->agg_idx);
		s->agg = malloc((size_t)s->mem->n_layer * (s->mem->n_span + 1) * sizeof *s->agg);
		if (!s->agg_idx || !s->agg)
			return sekv_errf(err, errlen, SEKV_ENOMEM, "session: out of memory");
	}
	if ((rc = load_swa(s, err, errlen)))
		return rc;
	return model_state_resume(s->ms, s->n_tok);
}

int session_open(struct session **out, const struct app_opts *o, int64_t doc_id,
		 char *err, size_t errlen)
{
	struct session *s = calloc(1, sizeof *s);
	float *surprisal = NULL;
	int64_t n_tok = 0;
	int rc;

	*out = NULL;
	if (!s)
		return sekv_errf(err, errlen, SEKV_ENOMEM, "session: out of memory");
	s->o = *o;
	if ((rc = app_load(o, &s->m, &s->tk, err, errlen)))
		goto fail;
	s->hp = model_hparams(s->m);
	if ((rc = chat_template_init(&s->ct, s->hp->arch, s->tk, err, errlen)))
		goto fail;

	double t0 = app_now();
	if ((rc = store_open(&s->st, o->db, err, errlen)))
		goto fail;
	if ((rc = store_doc_get(s->st, doc_id, &s->doc, err, errlen))) {
		if (rc == SEKV_ENOTFOUND)
			sekv_errf(err, errlen, rc, "document %lld is not in %s (see 'sekv ls')",
				  (long long)doc_id, o->db);
		goto fail;
	}
	if (strcmp(s->doc.model_fp, s->hp->fingerprint) != 0) {
		rc = sekv_errf(err, errlen, SEKV_EMISMATCH,
			       "document %lld was ingested with another model (%s, fingerprint %.12s); "
			       "this model (%s) has fingerprint %.12s: ingest it again with this model or pass -m",
			       (long long)doc_id, s->doc.model_name, s->doc.model_fp, o->model, s->hp->fingerprint);
		goto fail;
	}
	if (s->doc.state != STORE_DOC_READY) {
		rc = sekv_errf(err, errlen, SEKV_EINVAL,
			       "document %lld: ingest did not finish (%lld tokens stored); ingest the file again",
			       (long long)doc_id, (long long)s->doc.n_tok);
		goto fail;
	}
	if ((rc = store_doc_get_tokens(s->st, doc_id, &s->tokens, &surprisal, &n_tok, err, errlen)))
		goto fail;
	free(surprisal);
	s->n_tok = (int)n_tok;
	s->row_bytes = (size_t)s->hp->n_head_kv * s->hp->d_head * 2 * 2;
	s->full_kv_bytes = (size_t)s->n_tok * s->hp->n_global * s->row_bytes;
	if ((rc = open_memory(s, err, errlen)))
		goto fail;
	s->resume_s = app_now() - t0;

	struct sampler_params spp;
	sampler_default_params(&spp);
	spp.temperature = o->temperature;
	spp.seed = o->seed;
	spp.repeat_penalty = o->repeat_penalty;
	if ((rc = sampler_init(&s->smp, &spp, s->hp->n_vocab)) != 0) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "session: sampler: out of memory");
		goto fail;
	}
	s->logits = malloc((size_t)s->hp->n_vocab * sizeof *s->logits);
	if (!s->logits) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "session: out of memory");
		goto fail;
	}
	*out = s;
	return 0;
fail:
	session_close(s);
	return rc;
}

void session_close(struct session *s)
{
	if (!s)
		return;
	sampler_free(&s->smp);
	free(s->logits);
	free(s->agg_idx);
	free(s->agg);
	chat_tokvec_free(&s->turn);
	model_state_free(s->ms);
	sekv_ctx_free(s->sc);
	sekv_mem_free(s->mem);
	free(s->tokens);
	store_close(s->st);
	tok_close(s->tk);
	model_close(s->m);
	free(s);
}

const struct model *session_model(const struct session *s)
{
	return s->m;
}

static size_t resident_now(const struct session *s)
{
	if (s->sc)
		return sekv_ctx_stats(s->sc)->resident_bytes;
	return (size_t)(s->n_tok + s->n_tail) * s->hp->n_global * s->row_bytes;
}

static int decode_one(struct session *s, int32_t id, int need_logits, char *err, size_t errlen)
{
	int held = s->sc ? sekv_ctx_tail_rows(s->sc) : s->n_tail;
	if (held >= SESSION_TAIL_CAP)
		return sekv_errf(err, errlen, SEKV_EINVAL,
				 "session: conversation reached %d tokens after the document; start a new one",
				 SESSION_TAIL_CAP);
	int rc = model_decode_ex(s->m, s->ms, id, s->sc ? &s->attn : NULL, s->logits,
				 need_logits, err, errlen);
	if (rc)
		return rc;
	s->n_tail++;
	return 0;
}

/* SeKV mode: evicts the oldest whole turns while the held question and
 * answer rows, plus this turn and its longest answer, would take more than
 * half of the budget left after the memory's fixed part (the other half
 * stays for zooming) or more than the tail capacity. */
static void evict_turns(struct session *s, int n_new, struct session_answer *a)
{
	const struct sekv_stats *st = sekv_ctx_stats(s->sc);
	size_t per_row = (size_t)s->mem->n_layer * s->row_bytes;
	long long cap = SESSION_TAIL_CAP;

	if (st->budget_bytes) {
		long long free_rows = st->budget_bytes > s->mem->static_bytes
			? (long long)((st->budget_bytes - s->mem->static_bytes) / per_row) : 0;
		if (free_rows / 2 < cap)
			cap = free_rows / 2;
	}
	if ((long long)n_new + s->o.n_predict > cap) {
		snprintf(a->warn, sizeof a->warn,
			 "this question (%d tokens) and an answer of up to %d tokens need more fast-tier rows "
			 "than the budget leaves (%lld): the device tier goes over the budget for this answer",
			 n_new, s->o.n_predict, cap);
		if (s->warn)
			s->warn(s->warn_ud, a->warn);
	}
	int k = 0;
	while (k < s->n_turn_held &&
	       sekv_ctx_tail_rows(s->sc) + (long long)n_new + s->o.n_predict > cap) {
		int upto = k + 1 < s->n_turn_held ? s->turn_pos[k + 1] : s->n_tok + s->n_tail;
		int before = sekv_ctx_tail_rows(s->sc);
		if (sekv_ctx_evict_tail(s->sc, upto))
			break;
		a->n_evicted_tokens += before - sekv_ctx_tail_rows(s->sc);
		a->n_evicted_turns++;
		k++;
	}
	memmove(s->turn_pos, s->turn_pos + k, (size_t)(s->n_turn_held - k) * sizeof *s->turn_pos);
	s->n_turn_held -= k;
}

static int build_turn(struct session *s, const char *q, char *err, size_t errlen)
{
	struct chat_tokvec *v = &s->turn;
	int rc;

	v->n = 0;
	if (s->n_turn == 0) {
		rc = chat_push_text(v, s->tk, "\n\n", 2, err, errlen);
	} else {
		rc = chat_close_turn(v, &s->ct, s->tk, err, errlen);
		if (!rc)
			rc = chat_open_turn(v, &s->ct, s->tk, "user", err, errlen);
	}
	if (!rc)
		rc = chat_push_text(v, s->tk, q, strlen(q), err, errlen);
	if (!rc)
		rc = chat_close_turn(v, &s->ct, s->tk, err, errlen);
	if (!rc)
		rc = chat_open_turn(v, &s->ct, s->tk, "model", err, errlen);
	return rc;
}

/* Folds this step's zooms into the per-answer aggregate. */
static void agg_step(struct session *s, struct session_answer *a, int *n_agg)
{
	const struct sekv_stats *st = sekv_ctx_stats(s->sc);
	int n_span = s->mem->n_span;

	a->zoom_per_token += st->n_zoom;
	for (int i = 0; i < st->n_zoom; i++) {
		const struct sekv_zoom *z = &st->zoom[i];
		if (z->layer < 0 || z->layer >= s->mem->n_layer || z->span < 0 || z->span >= n_span)
			continue;
		int32_t *slot = &s->agg_idx[(size_t)z->layer * n_span + z->span];
		if (*slot < 0) {
			*slot = (*n_agg)++;
			s->agg[*slot] = (struct session_zoom){ z->span, z->layer, z->head, 0, z->alpha };
		}
		struct session_zoom *g = &s->agg[*slot];
		g->steps++;
		if (z->alpha > g->alpha_max) {
			g->alpha_max = z->alpha;
			g->head = z->head;
		}
	}
}

static int cmp_zoom(const void *a, const void *b)
{
	const struct session_zoom *x = a, *y = b;
	if (x->steps != y->steps)
		return y->steps - x->steps;
	if (x->layer != y->layer)
		return x->layer - y->layer;
	return x->span - y->span;
}

static int append_text(struct session_answer *a, size_t *cap, const char *p, size_t n)
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

int session_ask(struct session *s, const char *question, session_step_fn fn,
		void *ud, struct session_answer *a, char *err, size_t errlen)
{
	char pend[256];
	size_t n_pend = 0, cap = 0;
	int rc, n_agg = 0;

	memset(a, 0, sizeof *a);
	if ((rc = append_text(a, &cap, "", 0)))
		return sekv_errf(err, errlen, rc, "session: out of memory");
	a->ids = malloc(((size_t)s->o.n_predict + 1) * sizeof *a->ids);
	if (!a->ids)
		return sekv_errf(err, errlen, SEKV_ENOMEM, "session: out of memory");
	if ((rc = build_turn(s, question, err, errlen)))
		return rc;
	if (s->agg_idx)
		memset(s->agg_idx, 0xff, (size_t)s->mem->n_layer * s->mem->n_span * sizeof *s->agg_idx);
	if ((long long)s->turn.n + s->o.n_predict > SESSION_TAIL_CAP)
		return sekv_errf(err, errlen, SEKV_EINVAL,
				 "question of %d tokens is too long: a question and its answer (-n %d) may take "
				 "at most %d tokens", s->turn.n, s->o.n_predict, SESSION_TAIL_CAP);
	if (s->sc)
		evict_turns(s, s->turn.n, a);
	if (s->n_turn_held == SESSION_MAX_TURNS) {
		memmove(s->turn_pos, s->turn_pos + 1, (SESSION_MAX_TURNS - 1) * sizeof *s->turn_pos);
		s->n_turn_held--;
	}
	s->turn_pos[s->n_turn_held++] = s->n_tok + s->n_tail;

	double t0 = app_now();
	for (int i = 0; i < s->turn.n; i++)
		if ((rc = decode_one(s, s->turn.ids[i], i == s->turn.n - 1, err, errlen)))
			return rc;
	a->n_question = s->turn.n;
	a->question_s = app_now() - t0;
	a->peak_resident_bytes = resident_now(s);

	double g0 = app_now();
	sampler_reset_recent(&s->smp);
	for (;;) {
		int32_t id = sampler_sample(&s->smp, s->logits);
		if (chat_is_end(&s->ct, id) || a->n_gen >= s->o.n_predict)
			break;
		if ((rc = decode_one(s, id, 1, err, errlen)))
			return rc;
		a->ids[a->n_gen++] = id;
		sampler_accept(&s->smp, id);
		if (s->sc)
			agg_step(s, a, &n_agg);
		size_t res = resident_now(s);
		if (res > a->peak_resident_bytes)
			a->peak_resident_bytes = res;

		int n = tok_token_text(s->tk, id, pend + n_pend, (int)(sizeof pend - n_pend));
		if (n > 0)
			n_pend += (size_t)n;
		size_t ok = tok_utf8_complete(pend, n_pend);
		if (n_pend >= sizeof pend - 8)
			ok = n_pend; /* never stall on garbage */
		if ((rc = append_text(a, &cap, pend, ok)))
			return sekv_errf(err, errlen, rc, "session: out of memory");
		double el = app_now() - g0;
		struct session_step ev = {
			.piece = pend, .piece_len = (int)ok, .token = id, .n_gen = a->n_gen,
			.tps = el > 0 ? a->n_gen / el : 0,
			.stats = s->sc ? sekv_ctx_stats(s->sc) : NULL,
			.resident_bytes = res, .peak_resident_bytes = a->peak_resident_bytes,
		};
		int stop = fn ? fn(ud, &ev) : 0;
		memmove(pend, pend + ok, n_pend - ok);
		n_pend -= ok;
		if (stop) {
			a->stopped = 1;
			break;
		}
	}
	a->decode_s = app_now() - g0;
	a->decode_tps = a->decode_s > 0 ? a->n_gen / a->decode_s : 0;
	if (a->n_gen > 0)
		a->zoom_per_token /= a->n_gen;
	if (n_agg > 0) {
		a->zoom = malloc((size_t)n_agg * sizeof *a->zoom);
		if (!a->zoom)
			return sekv_errf(err, errlen, SEKV_ENOMEM, "session: out of memory");
		memcpy(a->zoom, s->agg, (size_t)n_agg * sizeof *a->zoom);
		qsort(a->zoom, (size_t)n_agg, sizeof *a->zoom, cmp_zoom);
		a->n_zoom = n_agg;
	}
	s->n_turn++;
	return a->stopped ? SEKV_EINTR : 0;
}

void session_get_info(const struct session *s, struct session_info *in)
{
	memset(in, 0, sizeof *in);
	in->doc_id = s->doc.id;
	in->title = s->doc.title;
	in->model_name = s->doc.model_name;
	in->n_tok = s->n_tok;
	in->kv_full = s->o.kv_full;
	in->budget = s->sc ? s->sp.budget : 1.0;
	in->r_use = s->sc ? s->sp.r_use : 0;
	in->resume_s = s->resume_s;
	in->full_kv_bytes = s->full_kv_bytes;
	in->swa_bytes = s->swa_bytes;
	in->disk_bytes = s->doc.disk_bytes;
	in->n_layer = s->hp->n_global;
	in->n_head = s->hp->n_head;
	in->layer_id = s->hp->global_layer;
	in->tokens = s->tokens;
	in->note = s->note;
	if (s->mem) {
		in->host_bytes = s->mem->host_bytes;
		in->static_bytes = s->mem->static_bytes;
		in->alpha_used = s->mem->alpha_used;
		in->n_span = s->mem->n_span;
		in->n_comp = s->mem->n_comp;
		in->mem = s->mem;
	}
}

void session_span_text(const struct session *s, int32_t start, int32_t len,
		       char *buf, size_t cap)
{
	size_t o = 0;

	if (!cap)
		return;
	buf[0] = 0;
	if (start < 0 || len < 0 || start > s->n_tok)
		return;
	if (len > s->n_tok - start)
		len = s->n_tok - start;
	for (int32_t i = 0; i < len && o + 1 < cap; i++) {
		int n = tok_token_text(s->tk, s->tokens[start + i], buf + o, (int)(cap - 1 - o));
		if (n > 0)
			o += (size_t)n;
	}
	o = tok_utf8_complete(buf, o);
	buf[o] = 0;
}
