/* session.c - a stored document opened for questions (session.h): the
 * SeKV memory (and its summary-only rival), a stored session joined to it
 * and grown turn by turn, the sliding-window rows, the conversation. The
 * methods over exact rows (full KV, the rivals) are session_exact.c's.
 *
 * Invariant: SeKV's KV comes only from the library (memory, session
 * slices, sliding-window rows), never from a forward pass over earlier
 * tokens; the model state is resumed at the end of the document (or of
 * the stored session) before the conversation starts. Turns, decoding,
 * eviction and streaming live in engine/conv/conv.c.
 */
#include "app/session_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/app.h"
#include "engine/conv/chat.h"
#include "engine/conv/conv.h"
#include "engine/base/clock.h"
#include "engine/base/err.h"
#include "engine/evidence/evidence.h"
#include "engine/kv/kv_quest.h"
#include "engine/kv/kv_shadow.h"
#include "engine/kv/kv_subset.h"
#include "engine/model/model.h"
#include "engine/sekv/sekv.h"
#include "engine/tok/tokenizer.h"
#include "engine/base/utf8.h"
#include "store/store.h"


/* A resumed session's sliding-window rows, after the document's (a ring
 * keeps the newest of each slot): the last window of them, each layer. */
static int load_session_swa(struct session *s, char *err, size_t errlen)
{
	const struct store_session_kv *kv = &s->sess_swa;
	size_t row = (size_t)s->hp->n_head_kv * s->hp->d_head;
	int n = kv->swa_n < s->hp->swa_window ? kv->swa_n : s->hp->swa_window, skip = kv->swa_n - n;

	for (int l = 0, i = 0; l < s->hp->n_layer && n > 0; l++) {
		if (s->hp->is_global[l])
			continue;
		size_t at = ((size_t)i++ * kv->swa_n + (size_t)skip) * row;
		if (i > kv->swa_n_layer ||
		    model_state_set_rows(s->ms, l, kv->swa_pos0 + skip, n, kv->swa_k + at, kv->swa_v + at))
			return sekv_errf(err, errlen, SEKV_EFORMAT, "session %lld: its sliding-window rows "
					 "do not fit layer %d", (long long)s->stored_id, l);
	}
	return 0;
}

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
	return rc ? rc : load_session_swa(s, err, errlen);
}

/* --zoom-shares: one positive number per global layer of the memory. */
static int parse_zoom_shares(struct session *s, char *err, size_t errlen)
{
	const char *p = s->o.zoom_shares;
	int n = 0;

	s->sp.n_zoom_share = 0;
	if (!p)
		return 0;
	while (*p) {
		char *end;
		double x = strtod(p, &end);
		if (end == p || !(x > 0) || !isfinite(x) || n == SEKV_MAX_ZOOM_SHARE ||
		    (*end && *end != ','))
			return sekv_errf(err, errlen, SEKV_EINVAL, "--zoom-shares: %s: expected up to %d "
					 "positive numbers separated by commas", s->o.zoom_shares,
					 SEKV_MAX_ZOOM_SHARE);
		s->sp.zoom_share[n++] = (float)x;
		p = *end ? end + 1 : end;
	}
	if (n != s->mem->n_layer)
		return sekv_errf(err, errlen, SEKV_EINVAL, "--zoom-shares: %s: %d numbers, but the "
				 "document has %d global layers", s->o.zoom_shares, n, s->mem->n_layer);
	s->sp.n_zoom_share = n;
	return 0;
}

/* A budget asked for (--budget) below the memory's fixed part (anchors,
 * short spans, summaries, recent window) leaves nothing to zoom, and one
 * that rounds to 0 bytes would mean "no cap": both are refused, naming the
 * smallest budget (4 decimals) whose bytes hold the fixed part. The budget
 * stored at ingest only earns a note. A memory without compressed spans is
 * exact anyway: the budget does not apply (a note says so). */
static int check_budget(struct session *s, const size_t *static_at, char *err, size_t errlen)
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
	/* the memory was fitted with smaller rows than these: say which fit */
	const char *names[] = { "f16", "int8", "k8v4" }, *ask = app_dev_rows_name(&s->o);
	int fits = -1;
	for (int t = SEKV_DEV_F16; t <= SEKV_DEV_K8V4; t++)
		if (fits < 0 && static_at[t] <= bytes)
			fits = t;
	if (fits >= 0)
		return sekv_errf(err, errlen, SEKV_EINVAL,
				 "--device-rows %s: with these rows the fixed part of document %lld's memory "
				 "takes %.2f%% of its full KV, above the budget of %g, so no span could be "
				 "zoomed (the memory was fitted with smaller rows): ask with --device-rows %s, "
				 "rebuild it with 'sekv ingest --rebuild %lld --device-rows %s', or ask with "
				 "--budget %.4f or more", ask, (long long)s->doc.id, 100 * fixed, b, names[fits],
				 (long long)s->doc.id, ask, fit);
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
 * mass_recall, and with --mass-recall the values, for attn_err (a
 * measurement: the product's decode reads none). */
static int load_exact_keys(struct session *s, char *err, size_t errlen)
{
	int rc = session_load_rows(s, s->xk, s->o.mass_recall ? s->xv : NULL, err, errlen);

	if (!rc)
		sekv_ctx_set_exact_keys(s->sc, (const uint16_t *const *)s->xk);
	if (!rc && s->o.mass_recall)
		sekv_ctx_set_exact_values(s->sc, (const uint16_t *const *)s->xv);
	return rc;
}

/* A stored session's memory: the document's joined with the slices its
 * turns left (store_session_put_mem); its newest sliding-window rows and
 * h_next are kept for open_memory and start_conv. */
static int join_session(struct session *s, char *err, size_t errlen)
{
	struct store_session_kv kv;
	struct sekv_mem *m = NULL;
	int rc = store_session_get_kv(s->st, s->stored_id, &kv, err, errlen);

	if (rc || kv.n_part == 0) {
		store_session_kv_free(&kv);
		return rc;
	}
	rc = sekv_mem_join(&m, s->mem, kv.n_part, (const struct sekv_mem *const *)kv.part, kv.pos0);
	if (rc) {
		store_session_kv_free(&kv);
		return sekv_errf(err, errlen, SEKV_EFORMAT, "session %lld: its memory does not follow "
				 "document %lld's: %s", (long long)s->stored_id, (long long)s->doc.id,
				 sekv_strerror(rc));
	}
	sekv_mem_free(s->mem);
	s->mem = m;
	s->kv_turns = s->kv_stored = kv.kv_turns;
	s->h_next = kv.h_next;
	s->ses_disk_bytes = store_session_disk_bytes(s->st, s->stored_id);
	for (int i = 0; i < kv.n_part; i++)
		sekv_mem_free(kv.part[i]);
	free(kv.part);
	free(kv.pos0);
	kv.part = NULL;
	kv.pos0 = NULL;
	kv.n_part = 0;
	s->sess_swa = kv;
	return 0;
}

/* The SeKV memory (--kv sekv; --kv summary: the same memory, never
 * zooming). */
static int open_sekv(struct session *s, char *err, size_t errlen)
{
	const struct model_hparams *hp = s->hp;
	int rc = store_doc_get_mem(s->st, s->doc.id, &s->mem, err, errlen);

	if (rc || (s->stored_id && (rc = join_session(s, err, errlen))))
		return rc;
	if (s->mem->n_tok < s->n_tok || s->mem->n_layer != hp->n_global ||
	    s->mem->d_h != hp->d_head || s->mem->n_head_kv != hp->n_head_kv)
		return sekv_errf(err, errlen, SEKV_EFORMAT,
				 "session: document %lld: stored memory shape does not match the model",
				 (long long)s->doc.id);
	sekv_default_params(&s->sp);
	/* the device rows' type is the stream's choice, not the stored memory's;
	 * the fixed part with int8 rows says what the build fitted */
	size_t static_at[3];
	for (int t = SEKV_DEV_F16; t <= SEKV_DEV_K8V4; t++) {
		s->mem->dev_rows = t;
		sekv_mem_update_counts(s->mem);
		static_at[t] = s->mem->static_bytes;
	}
	s->sp.dev_rows = app_dev_rows(&s->o);
	s->mem->dev_rows = s->sp.dev_rows;
	sekv_mem_update_counts(s->mem);
	s->sp.budget = s->o.budget_set ? s->o.budget : s->doc.budget;
	s->sp.r_max = s->mem->r_max;
	s->sp.r_use = s->o.r_max_set ? s->o.r_max : s->mem->r_max;
	if (s->sp.r_use > s->mem->r_max) {
		snprintf(s->note, sizeof s->note,
			 "rank %d is above the rank %d this document was stored with: %d is used "
			 "(ingest with --rmax %d to keep more)", s->sp.r_use, s->mem->r_max,
			 s->mem->r_max, s->sp.r_use);
		s->sp.r_use = s->mem->r_max;
	}
	s->sp.n_threads = s->o.n_threads;
	s->sp.be = model_backend(s->m);
	if ((rc = check_budget(s, static_at, err, errlen)))
		return rc;
	s->sp.router = s->o.kv == APP_KV_SUMMARY ? SEKV_ROUTER_NONE : s->o.router;
	s->sp.zoom_blocks = s->o.zoom_blocks;
	s->sp.zoom_scan = s->o.zoom_scan;
	s->sp.question_exact = !s->o.question_zoom;
	if ((rc = parse_zoom_shares(s, err, errlen)))
		return rc;
	if (s->sp.router == SEKV_ROUTER_LANDMARK && s->mem->n_lm == 0 && s->mem->n_comp > 0 &&
	    !s->note[0])
		snprintf(s->note, sizeof s->note,
			 "document %lld was stored without landmarks: its spans are routed by their "
			 "summaries (ingest it again for landmark routing)", (long long)s->doc.id);
	if ((rc = app_router_load(&s->o, s->m, s->sp.router, &s->router_w, err, errlen)))
		return rc;
	if (s->o.router_weights && s->sp.router != SEKV_ROUTER_TRAINED && !s->note[0])
		snprintf(s->note, sizeof s->note, "--router-weights applies to --router trained only: "
			 "ignored with --router %s", sekv_router_name(s->sp.router));
	s->sp.trained = s->router_w;
	if ((rc = sekv_ctx_new(&s->sc, s->mem, &s->sp, CONV_TAIL_CAP, hp->q_scale, err, errlen)))
		return rc;
	if (s->sp.router == SEKV_ROUTER_ORACLE || s->o.mass_recall)
		return load_exact_keys(s, err, errlen);
	/* the measurements' exact keys cover the document only: there the
	 * tail holds the turns, as before sessions kept them */
	s->grow = !rc;
	s->full_kv_bytes = s->mem->full_kv_bytes;
	return rc;
}

/* The document's memory by --kv, then the sliding-window rows, and the
 * state resumed at the document's end. */
static int open_memory(struct session *s, char *err, size_t errlen)
{
	int rc;

	switch (s->o.kv) {
	case APP_KV_FULL:
		rc = session_open_full(s, err, errlen);
		break;
	case APP_KV_STREAMING:
		rc = session_open_streaming(s, err, errlen);
		break;
	case APP_KV_SNAPKV:
		rc = session_open_snapkv(s, err, errlen);
		break;
	case APP_KV_H2O:
		rc = session_open_h2o(s, err, errlen);
		break;
	case APP_KV_QUEST:
		rc = session_open_quest(s, err, errlen);
		break;
	case APP_KV_SHADOWKV:
		rc = session_open_shadowkv(s, err, errlen);
		break;
	default:
		rc = open_sekv(s, err, errlen);
		break;
	}
	if (!rc && s->o.zoom_shares && !s->sc && !s->note[0])
		snprintf(s->note, sizeof s->note, "--zoom-shares applies to --kv sekv only: ignored "
			 "with --kv %s", app_kv_name(s->o.kv));
	/* every method but full attends through its provider: no exact rows */
	if (!rc && !s->ms)
		rc = model_state_new(&s->ms, s->m, SESSION_BATCH, SESSION_BATCH, 0, err, errlen);
	if (rc || (rc = load_swa(s, err, errlen)))
		return rc;
	return model_state_resume(s->ms, s->mem ? s->mem->n_tok : s->n_tok);
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
	cp.sampler.repeat_penalty = app_repeat_penalty(&s->o, (int)fmt);
	cp.example = s->example[0] ? s->example : NULL;
	cp.surprisal = s->grow;
	cp.n_turn_before = s->kv_turns;
	cp.h_first = s->h_next;
	size_t budget = (size_t)(s->riv_budget * (double)s->full_kv_bytes);
	if (s->sc) {
		conv_kv_sekv(&kv, s->sc, s->mem);
		kv.name = app_kv_name(s->o.kv);
	} else if (s->sub) {
		conv_kv_subset(&kv, app_kv_name(s->o.kv), s->sub, budget);
	} else if (s->quest) {
		conv_kv_quest(&kv, s->quest, budget);
	} else if (s->shadow) {
		conv_kv_shadow(&kv, s->shadow, budget);
	} else {
		conv_kv_full(&kv);
	}
	return conv_new(&s->conv, s->m, s->tk, s->ms, &kv, &cp, err, errlen);
}

/* The stored session s->stored_id: its document into *doc_id; only a
 * session answered from the SeKV memory can go on (its turns' KV is kept
 * there), and only with it. */
static int read_stored(struct session *s, int64_t *doc_id, char *err, size_t errlen)
{
	struct store_session ss;
	int rc = store_session_get(s->st, s->stored_id, &ss, err, errlen);

	if (rc == SEKV_ENOTFOUND)
		return sekv_errf(err, errlen, rc, "session %lld is not in %s (see 'sekv sessions')",
				 (long long)s->stored_id, s->o.db);
	if (rc)
		return rc;
	*doc_id = ss.doc;
	if (strcmp(ss.kv, "sekv"))
		return sekv_errf(err, errlen, SEKV_EUNSUP, "session %lld was answered with --kv %s, "
				 "which keeps no KV of its turns (only the SeKV memory does): 'sekv export "
				 "%lld' shows it; 'sekv chat %lld --kv %s' starts a new one", (long long)ss.id,
				 ss.kv, (long long)ss.id, (long long)ss.doc, ss.kv);
	if (s->o.kv != APP_KV_SEKV)
		return sekv_errf(err, errlen, SEKV_EUNSUP, "session %lld keeps its turns in the SeKV "
				 "memory: it goes on with --kv sekv only ('sekv chat %lld --kv %s' starts "
				 "a new session)", (long long)ss.id, (long long)ss.doc, app_kv_name(s->o.kv));
	if (s->o.router == SEKV_ROUTER_ORACLE || s->o.mass_recall)
		return sekv_errf(err, errlen, SEKV_EUNSUP, "session %lld: --router oracle and "
				 "--mass-recall measure over a document's exact keys, not a session's",
				 (long long)ss.id);
	if (ss.kv_turns < ss.n_turn) {
		/* turns imported from a chat history are the document's own text */
		struct store_turn *t = NULL;
		int n = 0, n_imp = 0;
		if ((rc = store_session_turns_dup(s->st, ss.id, &t, &n, err, errlen)))
			return rc;
		for (int i = 0; i < n; i++)
			n_imp += !strcmp(t[i].stopped, "import");
		store_turns_free(t, n);
		if (ss.kv_turns + n_imp < ss.n_turn)
			snprintf(s->note, sizeof s->note, "session %lld: the model remembers %d of its %d "
				 "turns (the others were stored without their KV)", (long long)ss.id,
				 ss.kv_turns + n_imp, ss.n_turn);
	}
	return 0;
}

/* The stored document: checked against the model, tokens read. */
static int read_doc(struct session *s, int64_t doc_id, char *err, size_t errlen)
{
	const struct app_opts *o = &s->o;
	float *surprisal = NULL;
	int64_t n_tok = 0;
	int rc;

	if ((rc = store_open(&s->st, o->db, err, errlen)) ||
	    (s->stored_id && (rc = read_stored(s, &doc_id, err, errlen))))
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
	if (s->doc.state != STORE_DOC_READY && store_doc_busy(s->st, doc_id))
		return sekv_errf(err, errlen, SEKV_EBUSY, "document %lld is being ingested by another "
				 "process (%lld tokens stored so far): ask when 'sekv ls' says ready",
				 (long long)doc_id, (long long)s->doc.n_tok);
	if (s->doc.state != STORE_DOC_READY)
		return sekv_errf(err, errlen, SEKV_EINVAL,
				 "document %lld is incomplete (%lld tokens stored): finish its ingest with "
				 "'sekv ingest --resume %lld'", (long long)doc_id, (long long)s->doc.n_tok,
				 (long long)doc_id);
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
	return session_open_stored(out, m, tk, o, doc_id, 0, err, errlen);
}

int session_open_stored(struct session **out, const struct model *m, const struct tok *tk,
			const struct app_opts *o, int64_t doc_id, int64_t session_id, char *err,
			size_t errlen)
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
	s->stored_id = session_id;
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
	kv_quest_free(s->quest);
	kv_shadow_free(s->shadow);
	sekv_mem_free(s->mem);
	free(s->router_w);
	store_session_kv_free(&s->sess_swa);
	for (size_t i = 0; i < sizeof s->xk / sizeof *s->xk; i++) {
		free(s->xk[i]);
		free(s->xv[i]);
	}
	free(s->tokens);
	store_close(s->st);
	free(s);
}

/* The turn just asked, as the conversation decoded it since the memory
 * last grew (tokens, surprisal, the global layers' tail rows), appended to
 * the memory: *out the grown memory, NULL when nothing was decoded. */
static int grow_memory(struct session *s, struct sekv_mem **out, char *err, size_t errlen)
{
	const struct model_hparams *hp = s->hp;
	uint16_t *k[SESSION_MAX_GLOBAL] = { 0 }, *v[SESSION_MAX_GLOBAL] = { 0 };
	size_t row = (size_t)hp->n_head_kv * hp->d_head;
	int n = 0, n_h = 0, rc = 0;
	const int32_t *ids = conv_tokens(s->conv, &n);
	const float *h = conv_surprisal(s->conv, &n_h);

	*out = NULL;
	if (n == 0)
		return 0;
	if (n_h != n || hp->n_global > SESSION_MAX_GLOBAL)
		return sekv_errf(err, errlen, SEKV_EINVAL, "session: the turn's %d tokens have %d "
				 "surprisal values", n, n_h);
	for (int l = 0; !rc && l < hp->n_global; l++) {
		k[l] = malloc((size_t)n * row * sizeof *k[l]);
		v[l] = malloc((size_t)n * row * sizeof *v[l]);
		if (!k[l] || !v[l])
			rc = sekv_errf(err, errlen, SEKV_ENOMEM, "session: out of memory");
		else if (sekv_ctx_tail_get(s->sc, l, s->mem->n_tok, n, k[l], v[l]))
			rc = sekv_errf(err, errlen, SEKV_EINVAL, "session: the turn's rows of global layer "
				       "%d are not held (evicted)", l);
	}
	if (!rc)
		rc = sekv_mem_append(out, s->mem, &s->sp, n, ids, h, (const uint16_t *const *)k,
				     (const uint16_t *const *)v, err, errlen);
	session_free_rows(k, v);
	return rc;
}

/* What grown adds to s->mem, for the library: the slice it made final,
 * its open end, and the sliding-window rows of the newest positions. */
static int store_growth(struct session *s, int64_t id, const struct sekv_mem *grown,
			char *err, size_t errlen)
{
	const struct model_hparams *hp = s->hp;
	int lo = sekv_mem_frontier(s->mem, s->sp.n_sink), hi = sekv_mem_frontier(grown, s->sp.n_sink);
	int end = grown->n_tok, p0 = end - hp->swa_window > s->mem->n_tok ? end - hp->swa_window
									 : s->mem->n_tok;
	size_t row = (size_t)hp->n_head_kv * hp->d_head;
	struct sekv_mem *part = NULL, *open = NULL;
	uint16_t *sk[MODEL_MAX_LAYER] = { 0 }, *sv[MODEL_MAX_LAYER] = { 0 };
	int n_swa = 0, rc;
	float h_next = 0;

	if ((hi > lo && sekv_mem_slice_dup(&part, grown, lo, hi)) ||
	    sekv_mem_slice_dup(&open, grown, hi, end)) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "session: slicing the memory: out of memory");
		goto out;
	}
	for (int l = 0; l < hp->n_layer; l++) {
		if (hp->is_global[l])
			continue;
		sk[n_swa] = malloc(((size_t)(end - p0) * row + 1) * sizeof **sk);
		sv[n_swa] = malloc(((size_t)(end - p0) * row + 1) * sizeof **sv);
		if (!sk[n_swa] || !sv[n_swa++] ||
		    model_state_get_rows(s->ms, l, p0, end - p0, sk[n_swa - 1], sv[n_swa - 1])) {
			rc = sekv_errf(err, errlen, SEKV_ENOMEM, "session: sliding-window rows of layer "
				       "%d: out of memory or not held", l);
			goto out;
		}
	}
	if ((rc = conv_next_surprisal(s->conv, &h_next, err, errlen)))
		goto out;
	struct store_session_mem w = { .part_idx = s->kv_turns, .part_pos0 = lo, .part = part,
		.open_pos0 = hi, .open = open, .h_next = h_next, .kv_turns = s->kv_turns + 1,
		.swa_pos0 = p0, .swa_n = end - p0, .swa_n_layer = n_swa,
		.swa_k = (const uint16_t *const *)sk, .swa_v = (const uint16_t *const *)sv,
		.swa_window = hp->swa_window > 0 ? hp->swa_window : 1 };
	rc = store_session_put_mem(s->st, id, &w, err, errlen);
out:
	for (int i = 0; i < MODEL_MAX_LAYER; i++) {
		free(sk[i]);
		free(sv[i]);
	}
	sekv_mem_free(part);
	sekv_mem_free(open);
	return rc;
}

/* The conversation goes on over the grown memory (which now holds every
 * turn so far): a new decode stream over it, the old one freed. */
static int grow_swap(struct session *s, struct sekv_mem *grown, char *err, size_t errlen)
{
	struct sekv_ctx *sc = NULL;
	struct conv_kv kv;
	int rc = sekv_ctx_new(&sc, grown, &s->sp, CONV_TAIL_CAP, s->hp->q_scale, err, errlen);

	if (rc) {
		sekv_mem_free(grown);
		return rc;
	}
	conv_kv_sekv(&kv, sc, grown);
	kv.name = app_kv_name(s->o.kv);
	if ((rc = conv_set_kv(s->conv, &kv, err, errlen))) {
		sekv_ctx_free(sc);
		sekv_mem_free(grown);
		return rc;
	}
	sekv_ctx_free(s->sc);
	sekv_mem_free(s->mem);
	s->sc = sc;
	s->mem = grown;
	s->full_kv_bytes = grown->full_kv_bytes;
	s->kv_turns++;
	return 0;
}

/* The turn's transcript row and evidence (joining the open transaction). */
static int add_turn(struct session *s, int64_t id, const char *question,
		    const struct conv_answer *a, const struct app_evidence *ev, char *err, size_t errlen)
{
	struct store_turn t = { 0 };
	struct store_evidence_row row[64];

	t.question = (char *)question;
	t.answer = a->text ? a->text : "";
	snprintf(t.stopped, sizeof t.stopped, "%s", conv_stop_name(a->stopped));
	t.n_gen = a->n_gen;
	if (ev && ev->on) {
		evidence_heads_format(ev->head, ev->n_head, t.heads, sizeof t.heads);
		for (int i = 0; i < ev->n_pas && i < (int)(sizeof row / sizeof *row); i++) {
			row[i] = (struct store_evidence_row){ .rank = ev->pas[i].rank,
				.start = ev->pas[i].start, .end = ev->pas[i].end, .score = ev->pas[i].score,
				.peak = ev->pas[i].peak };
			t.n_ev = i + 1;
		}
		t.ev = row;
	}
	return store_session_add_turn(s->st, id, &t, err, errlen);
}

int session_record_turn(struct session *s, const char *question, const struct conv_answer *a,
			const struct app_evidence *ev, char *err, size_t errlen)
{
	struct sekv_mem *grown = NULL;
	char kv_err[512] = "";
	int64_t id = s->stored_id;
	int rc, kv_rc = 0;

	/* the memory takes the turn in, stored or not: the conversation keeps it */
	if (s->grow && (kv_rc = grow_memory(s, &grown, kv_err, sizeof kv_err)))
		s->kv_lost = 1;
	/* a new session, its turn and the turn's KV land together; a KV that
	 * cannot be stored leaves the turn's text stored */
	if ((rc = store_tx_begin(s->st, err, errlen)))
		goto swap;
	if ((!id && (rc = store_session_create(s->st, s->doc.id, app_kv_name(s->o.kv), &id, err,
					      errlen))) ||
	    (rc = add_turn(s, id, question, a, ev, err, errlen))) {
		store_tx_rollback(s->st);
		goto swap;
	}
	if (grown && !s->kv_lost && (kv_rc = store_growth(s, id, grown, kv_err, sizeof kv_err)))
		s->kv_lost = 1;
	else if (grown && !s->kv_lost)
		s->kv_stored++;
	if ((rc = store_tx_commit(s->st, err, errlen))) {
		s->kv_stored = s->kv_turns;
		goto swap;
	}
	s->stored_id = id;
	s->ses_disk_bytes = store_session_disk_bytes(s->st, id);
swap:
	if (grown && (kv_rc = grow_swap(s, grown, kv_err, sizeof kv_err)) == 0 && rc == 0 && s->kv_lost)
		kv_rc = SEKV_EIO;
	if (!rc && kv_rc)
		rc = sekv_errf(err, errlen, kv_rc, "the turn was saved, its KV not (%s): a later "
			       "'--session %lld' remembers the first %d turns", kv_err[0] ? kv_err :
			       "an earlier one failed", (long long)s->stored_id, s->kv_stored);
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
	in->n_tok_memory = s->mem ? s->mem->n_tok : s->n_tok;
	in->session_id = s->stored_id;
	in->kv_full = s->o.kv == APP_KV_FULL;
	in->method = app_kv_name(s->o.kv);
	in->budget = s->sc ? s->sp.budget : s->sub || s->quest || s->shadow ? s->riv_budget : 1.0;
	in->r_use = s->sc ? s->sp.r_use : 0;
	in->resume_s = s->resume_s;
	in->full_kv_bytes = s->full_kv_bytes;
	in->swa_bytes = s->swa_bytes;
	in->session_disk_bytes = s->ses_disk_bytes > 0 ? s->ses_disk_bytes : 0;
	in->disk_bytes = s->doc.disk_bytes + in->session_disk_bytes;
	in->n_layer = s->hp->n_global;
	in->n_head = s->hp->n_head;
	in->layer_id = s->hp->global_layer;
	in->tokens = s->tokens;
	in->note = s->note;
	if (s->sc)
		in->router = sekv_router_name(s->sp.router);
	if (s->sub)
		in->static_bytes = kv_subset_fixed_bytes(s->sub);
	if (s->quest) {
		in->static_bytes = kv_quest_fixed_bytes(s->quest);
		in->host_bytes = s->full_kv_bytes;
	}
	if (s->shadow) {
		in->static_bytes = kv_shadow_fixed_bytes(s->shadow);
		in->host_bytes = kv_shadow_host_bytes(s->shadow);
	}
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
	/* the memory holds the conversation's tokens after the document's */
	const int32_t *tokens = s->mem ? s->mem->tokens : s->tokens;
	int32_t n_tok = s->mem ? s->mem->n_tok : s->n_tok;
	size_t o = 0;

	if (!cap)
		return;
	buf[0] = 0;
	if (start < 0 || len < 0 || start > n_tok)
		return;
	if (len > n_tok - start)
		len = n_tok - start;
	/* a continuous excerpt: it stops at the first token that does not fit,
	 * marked with an ellipsis (3 bytes kept for it) */
	for (int32_t i = 0; i < len && o + 1 < cap; i++) {
		size_t room = cap - 1 - o, keep = i + 1 < len && room > 3 ? 3 : 0;
		int n = tok_token_text(s->tk, tokens[start + i], buf + o, (int)(room - keep));
		if (n == SEKV_EINVAL && i + 1 < len && room >= 3) {
			o = utf8_complete(buf, o);
			memcpy(buf + o, "\xe2\x80\xa6", 3);
			o += 3;
			break;
		}
		if (n > 0)
			o += (size_t)n;
	}
	o = utf8_complete(buf, o);
	buf[o] = 0;
}
