/* session.c - a stored document opened for questions (session.h).
 *
 * Invariant: document KV comes only from the library (SeKV memory, or
 * exact rows with --kv full), never from a forward pass; the model state is
 * resumed at the end of the document before the conversation starts.
 * Turns, decoding, eviction and streaming live in engine/conv.c.
 */
#include "app/session.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/app.h"
#include "engine/chat.h"
#include "engine/conv.h"
#include "engine/clock.h"
#include "engine/err.h"
#include "engine/evidence.h"
#include "engine/kv_select.h"
#include "engine/kv_subset.h"
#include "engine/model.h"
#include "engine/sekv/sekv.h"
#include "engine/tokenizer.h"
#include "engine/utf8.h"
#include "store/store.h"

#define SESSION_BATCH 64

struct session {
	struct app_opts o;
	const struct model *m;     /* borrowed */
	const struct tok *tk;      /* borrowed */
	struct store *st;
	struct store_doc doc;
	const struct model_hparams *hp;
	struct sekv_mem *mem;      /* SeKV mode */
	struct sekv_ctx *sc;       /* SeKV mode */
	struct sekv_params sp;
	int32_t *tokens;           /* [n_tok] document tokens */
	int n_tok;
	char example[160];         /* worked example's answer (chat_example_of_text, whole words), "" none */
	int64_t stored_id;         /* the session in the library, 0 until the first turn */
	uint16_t *xk[8];           /* [n_global] exact keys (--router oracle, --mass-recall) */
	struct kv_subset *sub;     /* --kv streaming: the kept rows */
	double sub_budget;         /* its budget, a fraction of full_kv_bytes */
	struct model_state *ms;
	struct conv *conv;
	double resume_s;
	char note[256];            /* why the budget does not apply, or "" */
	size_t swa_bytes;
	size_t full_kv_bytes;
};

static int load_swa(struct session *s, char *err, size_t errlen)
{
	int n_layer = 0, n_row = 0, rc;
	int32_t *layer_id = NULL;
	uint16_t **k = NULL, **v = NULL;

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
	s->swa_bytes = model_kv_bytes(n_row, n_layer, s->hp->n_head_kv, s->hp->d_head);
	store_swa_free(n_layer, layer_id, k, v);
	return rc;
}

/* A budget asked for (--budget) below the memory's fixed part (anchors,
 * short spans, summaries, recent window) leaves nothing to zoom, and one
 * that rounds to 0 bytes would mean "no cap": both are refused, naming the
 * smallest budget (4 decimals) whose bytes hold the fixed part. The budget
 * stored at ingest only earns a note. A memory without compressed spans is
 * exact anyway: the budget does not apply (a note says so). */
static int check_budget(struct session *s, char *err, size_t errlen)
{
	const struct sekv_mem *mem = s->mem;
	double full = (double)mem->full_kv_bytes, b = s->sp.budget;
	size_t bytes = (size_t)(b * full);

	if (b >= 1.0 || full <= 0 || bytes >= mem->static_bytes)
		return 0;
	if (mem->n_comp == 0) {
		snprintf(s->note, sizeof s->note,
			 "this document is short enough to be kept exact (%d tokens, no compressed span): "
			 "the budget does not apply", s->n_tok);
		return 0;
	}
	double fixed = (double)mem->static_bytes / full, fit = ceil(fixed * 1e4) / 1e4;
	while ((size_t)(fit * full) < mem->static_bytes)
		fit += 1e-4;
	if (!s->o.budget_set && bytes > 0) {
		snprintf(s->note, sizeof s->note,
			 "budget %.1f%% is below the fixed part of this memory (%.1f%%: anchors, short spans, "
			 "summaries, recent window): no span can be zoomed; ask with --budget %.4f or more",
			 100 * b, 100 * fixed, fit);
		return 0;
	}
	return sekv_errf(err, errlen, SEKV_EINVAL,
			 "budget %g: below the fixed part of document %lld's memory (%.2f%% of its full KV: "
			 "anchors, short spans, summaries, recent window), so no span could be zoomed; "
			 "ask with --budget %.4f or more", b, (long long)s->doc.id, 100 * fixed, fit);
}

/* The exact keys of every global layer, for the oracle router and
 * mass_recall (a measurement: the product's decode reads none). */
static int load_exact_keys(struct session *s, char *err, size_t errlen)
{
	const struct model_hparams *hp = s->hp;
	size_t n = (size_t)s->n_tok * hp->n_head_kv * hp->d_head;
	uint16_t *v = malloc(n * sizeof *v);
	int rc = 0;

	if (hp->n_global > (int)(sizeof s->xk / sizeof *s->xk))
		rc = sekv_errf(err, errlen, SEKV_EUNSUP, "session: %d global layers: too many for "
			       "the oracle router", hp->n_global);
	for (int l = 0; !rc && l < hp->n_global; l++) {
		if (!v || !(s->xk[l] = malloc(n * sizeof *s->xk[l])))
			rc = sekv_errf(err, errlen, SEKV_ENOMEM, "session: exact keys: out of memory");
		else
			rc = store_doc_get_full_kv(s->st, s->doc.id, l, s->xk[l], v, err, errlen);
	}
	free(v);
	if (!rc)
		sekv_ctx_set_exact_keys(s->sc, (const uint16_t *const *)s->xk);
	return rc;
}

/* Sinks and recent rows per layer at the budget (StreamingLLM): the rows
 * that fit budget * full_kv_bytes after a reserve for the conversation
 * (2 * (n_predict + 64) rows, at most half the budget: half of what is
 * left is what a turn may take before older turns are evicted). */
#define SESSION_N_SINK 4
static int open_streaming(struct session *s, char *err, size_t errlen)
{
	const struct model_hparams *hp = s->hp;
	size_t n = (size_t)s->n_tok * hp->n_head_kv * hp->d_head;
	uint16_t *k[8] = { 0 }, *v[8] = { 0 };
	int32_t *pos = NULL;
	double b = s->o.budget_set ? s->o.budget : s->doc.budget > 0 ? s->doc.budget : 0.10;
	long long rows = (long long)(b * (double)s->n_tok), reserve = 2 * ((long long)s->o.n_predict + 64);
	int rc = 0, n_pos;

	if (hp->n_global > 8)
		return sekv_errf(err, errlen, SEKV_EUNSUP, "session: %d global layers: too many", hp->n_global);
	if (reserve > rows / 2)
		reserve = rows / 2;
	s->sub_budget = b;
	if (!(pos = malloc(((size_t)s->n_tok + 1) * hp->n_global * hp->n_head_kv * sizeof *pos)))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "session: out of memory");
	n_pos = kv_select_streaming(s->n_tok, (int)(rows - reserve), SESSION_N_SINK, pos);
	for (int i = 1; i < hp->n_global * hp->n_head_kv; i++)
		memcpy(pos + (size_t)i * n_pos, pos, (size_t)n_pos * sizeof *pos);
	for (int l = 0; !rc && l < hp->n_global; l++) {
		if (!(k[l] = malloc(n * sizeof *k[l])) || !(v[l] = malloc(n * sizeof *v[l])))
			rc = sekv_errf(err, errlen, SEKV_ENOMEM, "session: out of memory");
		else
			rc = store_doc_get_full_kv(s->st, s->doc.id, l, k[l], v[l], err, errlen);
	}
	if (!rc) {
		struct kv_subset_params kp = { .n_layer = hp->n_global, .layer_id = hp->global_layer,
			.n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .d_h = hp->d_head,
			.q_scale = hp->q_scale, .tail_cap = CONV_TAIL_CAP, .be = model_backend(s->m) };
		rc = kv_subset_new(&s->sub, &kp, pos, n_pos, s->n_tok, (const uint16_t *const *)k,
				   (const uint16_t *const *)v, err, errlen);
	}
	for (int l = 0; l < 8; l++) {
		free(k[l]);
		free(v[l]);
	}
	free(pos);
	if (!rc)
		rc = model_state_new(&s->ms, s->m, SESSION_BATCH, SESSION_BATCH, 0, err, errlen);
	return rc;
}

static int open_memory(struct session *s, char *err, size_t errlen)
{
	const struct model_hparams *hp = s->hp;
	int rc;

	if (s->o.kv == APP_KV_STREAMING) {
		if ((rc = open_streaming(s, err, errlen)) || (rc = load_swa(s, err, errlen)))
			return rc;
		return model_state_resume(s->ms, s->n_tok);
	}

	if (s->o.kv == APP_KV_FULL) {
		rc = model_state_new(&s->ms, s->m, s->n_tok + CONV_TAIL_CAP, SESSION_BATCH, 1, err, errlen);
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
		s->sp.be = model_backend(s->m);
		if ((rc = check_budget(s, err, errlen)))
			return rc;
		s->sp.router = s->o.router;
		rc = sekv_ctx_new(&s->sc, s->mem, &s->sp, CONV_TAIL_CAP, hp->q_scale, err, errlen);
		if (rc)
			return rc;
		if ((s->o.router == SEKV_ROUTER_ORACLE || s->o.mass_recall) &&
		    (rc = load_exact_keys(s, err, errlen)))
			return rc;
		rc = model_state_new(&s->ms, s->m, SESSION_BATCH, SESSION_BATCH, 0, err, errlen);
		if (rc)
			return rc;
	}
	if ((rc = load_swa(s, err, errlen)))
		return rc;
	return model_state_resume(s->ms, s->n_tok);
}

/* Sampling and turn options of the conversation over the document. */
static int start_conv(struct session *s, char *err, size_t errlen)
{
	struct conv_params cp;
	struct conv_kv kv;

	enum chat_format fmt;

	/* the format the document was ingested with, never guessed again */
	if (chat_format_parse(s->doc.prompt_format, &fmt))
		return sekv_errf(err, errlen, SEKV_EFORMAT,
				 "document %lld: prompt format '%s' unknown to this build: ingest it again",
				 (long long)s->doc.id, s->doc.prompt_format);
	conv_default_params(&cp);
	cp.n_predict = s->o.n_predict;
	cp.in_user_turn = 1;
	cp.format = (int)fmt;
	cp.sampler.temperature = s->o.temperature;
	cp.sampler.seed = s->o.seed;
	cp.sampler.repeat_penalty = s->o.repeat_penalty;
	cp.example = s->example[0] ? s->example : NULL;
	if (s->sc)
		conv_kv_sekv(&kv, s->sc, s->mem);
	else if (s->sub)
		conv_kv_subset(&kv, "streaming", s->sub,
			       (size_t)(s->sub_budget * (double)s->full_kv_bytes));
	else
		conv_kv_full(&kv);
	return conv_new(&s->conv, s->m, s->tk, s->ms, &kv, &cp, err, errlen);
}

/* The stored document: checked against the model, tokens read. */
static int read_doc(struct session *s, int64_t doc_id, char *err, size_t errlen)
{
	const struct app_opts *o = &s->o;
	float *surprisal = NULL;
	int64_t n_tok = 0;
	int rc;

	if ((rc = store_open(&s->st, o->db, err, errlen)))
		return rc;
	if ((rc = store_doc_get(s->st, doc_id, &s->doc, err, errlen))) {
		if (rc == SEKV_ENOTFOUND)
			sekv_errf(err, errlen, rc, "document %lld is not in %s (see 'sekv ls')",
				  (long long)doc_id, o->db);
		return rc;
	}
	if (strcmp(s->doc.model_fp, s->hp->fingerprint) != 0)
		return sekv_errf(err, errlen, SEKV_EMISMATCH,
				 "document %lld was ingested with another model (%s, fingerprint %.12s); "
				 "this model (%s) has fingerprint %.12s: ingest it again with this model or pass -m",
				 (long long)doc_id, s->doc.model_name, s->doc.model_fp, o->model, s->hp->fingerprint);
	if (s->doc.state != STORE_DOC_READY)
		return sekv_errf(err, errlen, SEKV_EINVAL,
				 "document %lld: ingest did not finish (%lld tokens stored); ingest the file again",
				 (long long)doc_id, (long long)s->doc.n_tok);
	if ((rc = store_doc_get_tokens(s->st, doc_id, &s->tokens, &surprisal, &n_tok, err, errlen)))
		return rc;
	free(surprisal);
	s->n_tok = (int)n_tok;
	{
		char *text = NULL;
		size_t len = 0;
		if ((rc = store_doc_text_dup(s->st, doc_id, &text, &len, err, errlen)))
			return rc;
		chat_example_of_text(text, len, s->example, sizeof s->example);
		free(text);
	}
	s->full_kv_bytes = model_kv_bytes(s->n_tok, s->hp->n_global, s->hp->n_head_kv, s->hp->d_head);
	return 0;
}

int session_open(struct session **out, const struct model *m, const struct tok *tk,
		 const struct app_opts *o, int64_t doc_id, char *err, size_t errlen)
{
	struct session *s = calloc(1, sizeof *s);
	int rc;

	*out = NULL;
	if (!s)
		return sekv_errf(err, errlen, SEKV_ENOMEM, "session: out of memory");
	s->o = *o;
	s->m = m;
	s->tk = tk;
	s->hp = model_hparams(m);
	double t0 = clk_now();
	if ((rc = read_doc(s, doc_id, err, errlen)) || (rc = open_memory(s, err, errlen)))
		goto fail;
	s->resume_s = clk_now() - t0;
	if ((rc = start_conv(s, err, errlen)))
		goto fail;
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
	conv_free(s->conv);
	model_state_free(s->ms);
	sekv_ctx_free(s->sc);
	kv_subset_free(s->sub);
	sekv_mem_free(s->mem);
	for (size_t i = 0; i < sizeof s->xk / sizeof *s->xk; i++)
		free(s->xk[i]);
	free(s->tokens);
	store_close(s->st);
	free(s);
}

int session_record_turn(struct session *s, const char *question, const struct conv_answer *a,
			const struct app_evidence *ev, char *err, size_t errlen)
{
	struct store_turn t = { 0 };
	struct store_evidence_row row[64];
	int64_t id = s->stored_id;
	int rc;

	/* a new session and its first turn land together or not at all */
	if ((rc = store_tx_begin(s->st, err, errlen)))
		return rc;
	if (!id && (rc = store_session_create(s->st, s->doc.id, s->sc ? "sekv" : s->sub ? "streaming" : "full", &id,
					      err, errlen)))
		goto fail;
	t.question = (char *)question;
	t.answer = a->text ? a->text : "";
	snprintf(t.stopped, sizeof t.stopped, "%s", conv_stop_name(a->stopped));
	t.n_gen = a->n_gen;
	if (ev && ev->on) {
		evidence_heads_format(ev->head, ev->n_head, t.heads, sizeof t.heads);
		for (int i = 0; i < ev->n_pas && i < (int)(sizeof row / sizeof *row); i++) {
			row[i] = (struct store_evidence_row){ .rank = ev->pas[i].rank,
				.start = ev->pas[i].start, .end = ev->pas[i].end, .score = ev->pas[i].score };
			t.n_ev = i + 1;
		}
		t.ev = row;
	}
	if ((rc = store_session_add_turn(s->st, id, &t, err, errlen)))
		goto fail;
	if ((rc = store_tx_commit(s->st, err, errlen)))
		return rc;
	s->stored_id = id;
	return 0;
fail:
	store_tx_rollback(s->st);
	return rc;
}

int64_t session_stored_id(const struct session *s)
{
	return s->stored_id;
}

struct conv *session_conv(struct session *s)
{
	return s->conv;
}

struct store *session_store(struct session *s)
{
	return s->st;
}

void session_get_info(const struct session *s, struct session_info *in)
{
	memset(in, 0, sizeof *in);
	in->doc_id = s->doc.id;
	in->title = s->doc.title;
	in->model_name = s->doc.model_name;
	in->n_tok = s->n_tok;
	in->kv_full = s->o.kv == APP_KV_FULL;
	in->method = s->o.kv == APP_KV_FULL ? "full" : s->o.kv == APP_KV_STREAMING ? "streaming" : "sekv";
	in->budget = s->sc ? s->sp.budget : s->sub ? s->sub_budget : 1.0;
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
	o = utf8_complete(buf, o);
	buf[o] = 0;
}
