/* session_exact.c - the --kv methods that read a document's exact rows:
 * full KV (the reference) and the rivals at the same device budget
 * (StreamingLLM, SnapKV, H2O, Quest, ShadowKV), whose rows all come through
 * session_load_rows and whose budgets all follow rival_rows. The rows come
 * from the library, or from a prefill of the stored tokens when the
 * document did not keep them (app_full_kv_load). SeKV is session.c's.
 */
#include "app/session_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/app.h"
#include "engine/conv/conv.h"
#include "engine/base/err.h"
#include "engine/kv/kv_quest.h"
#include "engine/kv/kv_select.h"
#include "engine/kv/kv_shadow.h"
#include "engine/kv/kv_subset.h"
#include "engine/model/model.h"

#define SESSION_N_SINK 4       /* StreamingLLM's attention sinks (the paper's 4) */
#define SESSION_SNAP_KERNEL 7  /* SnapKV's pooling kernel (the paper's 7) */

void session_note_add(struct session *s, const char *fmt, ...)
{
	size_t n = strlen(s->note);
	va_list ap;

	if (n && n + 2 < sizeof s->note) {
		memcpy(s->note + n, "; ", 3);
		n += 2;
	}
	va_start(ap, fmt);
	vsnprintf(s->note + n, sizeof s->note - n, fmt, ap);
	va_end(ap);
}

int session_load_rows(struct session *s, uint16_t **k, uint16_t **v, char *err, size_t errlen)
{
	const struct model_hparams *hp = s->hp;
	size_t n = (size_t)s->n_tok * hp->n_head_kv * hp->d_head;
	uint16_t *scratch = v ? NULL : malloc(n * sizeof *scratch), *vs[MODEL_MAX_LAYER];
	double sec = 0;
	int rc = 0;

	if (hp->n_global > SESSION_MAX_GLOBAL)
		return sekv_errf(err, errlen, SEKV_EUNSUP, "session: %d global layers: at most %d",
				 hp->n_global, SESSION_MAX_GLOBAL);
	for (int l = 0; !rc && l < hp->n_global; l++) {
		vs[l] = v ? (v[l] = malloc(n * sizeof *v[l])) : scratch;
		if (!(k[l] = malloc(n * sizeof *k[l])) || !vs[l])
			rc = sekv_errf(err, errlen, SEKV_ENOMEM, "session: exact rows: out of memory");
	}
	if (!rc && !s->doc.full_kv && !s->o.quiet)
		app_errorf("sekv: document %lld keeps no exact KV (ingest --keep-full-kv keeps it): "
			   "prefilling its %d tokens again for --kv %s%s (its ingest took %.0fs)...\n",
			   (long long)s->doc.id, s->n_tok, app_kv_name(s->o.kv),
			   s->o.kv == APP_KV_SEKV ? " measurements" : "", s->doc.prefill_s);
	if (!rc)
		rc = app_full_kv_load(s->m, s->st, &s->doc, s->o.n_batch, k, vs, &sec, err, errlen);
	if (!rc && !s->doc.full_kv)
		session_note_add(s, "document %lld keeps no exact KV: its %d tokens were prefilled again for "
			 "this reference (%.1fs; ingest --keep-full-kv keeps them)", (long long)s->doc.id,
			 s->n_tok, sec);
	free(scratch);
	return rc;
}

void session_free_rows(uint16_t **k, uint16_t **v)
{
	for (int l = 0; l < SESSION_MAX_GLOBAL; l++) {
		free(k[l]);
		if (v)
			free(v[l]);
	}
}

/* ---- the methods at the same device budget ---------------------------- */

/* Document rows a rival keeps per (layer, KV head) at the budget
 * (--budget, else the document's, else 0.10) beside fixed_rows rows' worth
 * of its own metadata: of budget * n_tok rows, the metadata's, then a
 * reserve for the conversation (2 * (n_predict + 64) rows, at most half of
 * what the metadata leaves: conv.c evicts turns past half of what the
 * fixed part leaves), then the rest. Fewer than need rows (at most the
 * document): a budget given is refused naming the smallest that fits;
 * the document's own budget, or one a document too short for any budget
 * needs, is raised to it with a note. *keep and s->riv_budget set. */
static int rival_rows(struct session *s, long long fixed_rows, int need, int *keep,
		      char *err, size_t errlen)
{
	double b = s->o.budget_set ? s->o.budget : s->doc.budget > 0 ? s->doc.budget : 0.10;
	long long n_tok = s->n_tok, k = 0, rows = (long long)(b * (double)n_tok);
	const char *name = app_kv_name(s->o.kv);

	if (need > n_tok)
		need = (int)n_tok;
	for (;; rows++) {
		long long left = rows - fixed_rows, reserve = 2 * ((long long)s->o.n_predict + 64);
		if (reserve > left / 2)
			reserve = left / 2;
		k = left - reserve;
		if (k >= need || k >= n_tok || rows >= n_tok + fixed_rows + reserve)
			break;
	}
	if (k > n_tok)
		k = n_tok;
	double fit = (double)rows / (double)(n_tok ? n_tok : 1);
	if (fit > b + 1e-12) {
		double shown = ceil(fit * 1e4) / 1e4;
		while ((long long)(shown * (double)n_tok) < rows)
			shown += 1e-4;
		char meta[64] = "";
		if (fixed_rows)
			snprintf(meta, sizeof meta, "%lld for its metadata, ", fixed_rows);
		if (s->o.budget_set && fit <= 1)
			return sekv_errf(err, errlen, SEKV_EINVAL,
					 "budget %g (%lld rows of document %lld's %lld): %s needs %s%lld for the "
					 "conversation and %d for the document; ask with --budget %.4f or more",
					 b, (long long)(b * (double)n_tok), (long long)s->doc.id, n_tok, name, meta,
					 rows - fixed_rows - k, need, shown);
		if (fit > 1)
			snprintf(s->note, sizeof s->note,
				 "document %lld is too short for a budget (%lld tokens): %s holds %.0f%% of its "
				 "full KV", (long long)s->doc.id, n_tok, name, 100 * fit);
		else
			snprintf(s->note, sizeof s->note,
				 "budget %.1f%% leaves %s less than %d document rows: %.2f%% is used", 100 * b,
				 name, need, 100 * fit);
		b = fit;
	}
	*keep = (int)k;
	s->riv_budget = b;
	return 0;
}

/* A kept-subset stream (streaming, snapkv, h2o) over rows k, v with
 * positions pos [n_global][n_head_kv][n_keep]; snap_keep > 0: SnapKV. */
static int open_subset(struct session *s, const int32_t *pos, int n_keep, int snap_keep,
		       uint16_t **k, uint16_t **v, char *err, size_t errlen)
{
	const struct model_hparams *hp = s->hp;
	struct kv_subset_params kp = { .n_layer = hp->n_global, .layer_id = hp->global_layer,
		.n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .d_h = hp->d_head,
		.q_scale = hp->q_scale, .tail_cap = CONV_TAIL_CAP, .be = model_backend(s->m),
		.snap_keep = snap_keep, .snap_kernel = SESSION_SNAP_KERNEL };

	return kv_subset_new(&s->sub, &kp, pos, n_keep, s->n_tok, (const uint16_t *const *)k,
			     (const uint16_t *const *)v, err, errlen);
}

/* StreamingLLM: the first SESSION_N_SINK positions and the most recent
 * ones, the same in every layer and KV head. */
int session_open_streaming(struct session *s, char *err, size_t errlen)
{
	const struct model_hparams *hp = s->hp;
	int n_slot = hp->n_global * hp->n_head_kv, keep, n, rc;
	uint16_t *k[SESSION_MAX_GLOBAL] = { 0 }, *v[SESSION_MAX_GLOBAL] = { 0 };
	int32_t *pos = NULL;

	if ((rc = rival_rows(s, 0, 1, &keep, err, errlen)))
		return rc;
	if (!(pos = malloc(((size_t)keep + 1) * n_slot * sizeof *pos)))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "session: out of memory");
	n = kv_select_streaming(s->n_tok, keep, SESSION_N_SINK, pos);
	for (int i = 1; i < n_slot; i++)
		memcpy(pos + (size_t)i * n, pos, (size_t)n * sizeof *pos);
	if (!(rc = session_load_rows(s, k, v, err, errlen)))
		rc = open_subset(s, pos, n, 0, k, v, err, errlen);
	session_free_rows(k, v);
	free(pos);
	return rc;
}

/* SnapKV: every row until the answer begins, then the rows each (layer,
 * KV head) voted for. */
int session_open_snapkv(struct session *s, char *err, size_t errlen)
{
	const struct model_hparams *hp = s->hp;
	int n_slot = hp->n_global * hp->n_head_kv, keep, rc;
	uint16_t *k[SESSION_MAX_GLOBAL] = { 0 }, *v[SESSION_MAX_GLOBAL] = { 0 };
	int32_t *pos = NULL;

	if ((rc = rival_rows(s, 0, 1, &keep, err, errlen)))
		return rc;
	if (!(pos = malloc(((size_t)s->n_tok + 1) * n_slot * sizeof *pos)))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "session: out of memory");
	for (int i = 0; i < n_slot; i++)
		for (int t = 0; t < s->n_tok; t++)
			pos[(size_t)i * s->n_tok + t] = t;
	if (!(rc = session_load_rows(s, k, v, err, errlen)))
		rc = open_subset(s, pos, s->n_tok, keep, k, v, err, errlen);
	session_free_rows(k, v);
	free(pos);
	if (!rc)
		session_note_add(s, "snapkv: the question is read over all %d exact rows (SnapKV's prefill); the answer "
			 "over the %d rows each layer and KV head keeps (resident bytes)", s->n_tok, keep);
	return rc;
}

/* H2O: the positions with the most attention during the prefill (the
 * scores stored at ingest) and the most recent ones, half and half, per
 * layer and KV head. */
int session_open_h2o(struct session *s, char *err, size_t errlen)
{
	const struct model_hparams *hp = s->hp;
	int n_slot = hp->n_global * hp->n_head_kv, keep, n = 0, n_tok = 0, rc;
	uint16_t *k[SESSION_MAX_GLOBAL] = { 0 }, *v[SESSION_MAX_GLOBAL] = { 0 };
	int32_t *pos = NULL;
	float *score = NULL;

	if ((rc = rival_rows(s, 0, 1, &keep, err, errlen)))
		return rc;
	rc = store_doc_get_h2o(s->st, s->doc.id, &score, &n_tok, err, errlen);
	if (rc == SEKV_ENOTFOUND)
		return sekv_errf(err, errlen, SEKV_ENOTFOUND,
				 "--kv h2o: document %lld has no H2O scores (it was ingested before they were "
				 "stored): ingest it again", (long long)s->doc.id);
	if (rc)
		return rc;
	if (n_tok != s->n_tok)
		rc = sekv_errf(err, errlen, SEKV_EFORMAT, "--kv h2o: document %lld: scores of %d tokens, "
			       "document of %d", (long long)s->doc.id, n_tok, s->n_tok);
	else if (!(pos = malloc(((size_t)keep + 1) * n_slot * sizeof *pos)))
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "session: out of memory");
	for (int i = 0; !rc && i < n_slot; i++)
		n = kv_select_h2o(score + (size_t)i * s->n_tok, s->n_tok, keep, keep / 2,
				  pos + (size_t)i * keep);
	if (!rc && !(rc = session_load_rows(s, k, v, err, errlen)))
		rc = open_subset(s, pos, n, 0, k, v, err, errlen);
	session_free_rows(k, v);
	free(pos);
	free(score);
	return rc;
}

/* Quest: every exact row in the host tier; the page metadata takes one
 * row's worth per page of the budget, chosen pages what is left (a
 * document shorter than a page is one page). */
int session_open_quest(struct session *s, char *err, size_t errlen)
{
	const struct model_hparams *hp = s->hp;
	long long n_page = (s->n_tok + KV_QUEST_PAGE - 1) / KV_QUEST_PAGE;
	uint16_t *k[SESSION_MAX_GLOBAL] = { 0 }, *v[SESSION_MAX_GLOBAL] = { 0 };
	int keep, rc;

	if ((rc = rival_rows(s, n_page, KV_QUEST_PAGE, &keep, err, errlen)) ||
	    (rc = session_load_rows(s, k, v, err, errlen))) {
		session_free_rows(k, v);
		return rc;
	}
	struct kv_quest_params qp = { .n_layer = hp->n_global, .layer_id = hp->global_layer,
		.n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .d_h = hp->d_head,
		.q_scale = hp->q_scale, .tail_cap = CONV_TAIL_CAP, .be = model_backend(s->m),
		.page = KV_QUEST_PAGE, .page_rows = keep > KV_QUEST_PAGE ? keep : KV_QUEST_PAGE };
	rc = kv_quest_new(&s->quest, &qp, s->n_tok, (const uint16_t *const *)k,
			  (const uint16_t *const *)v, err, errlen);
	session_free_rows(k, v);
	return rc;
}

/* ShadowKV: the landmarks take one key row per chunk of the budget (the
 * metadata of rival_rows); kv_shadow_plan splits the document rows left
 * into the rank of the key factors, outlier chunks and the chunks a step
 * rebuilds. A document of at most two chunks (all exact) is held whole
 * with its factor, whatever the budget, with a note. */
int session_open_shadowkv(struct session *s, char *err, size_t errlen)
{
	const struct model_hparams *hp = s->hp;
	long long lm = kv_shadow_landmark_rows(s->n_tok, KV_SHADOW_CHUNK);
	long long need = kv_shadow_rows_min(s->n_tok, hp->n_head_kv, hp->d_head, KV_SHADOW_CHUNK);
	uint16_t *k[SESSION_MAX_GLOBAL] = { 0 }, *v[SESSION_MAX_GLOBAL] = { 0 };
	struct kv_shadow_plan pl;
	int keep, rc;

	if ((rc = rival_rows(s, lm, need < INT32_MAX ? (int)need : INT32_MAX, &keep, err, errlen)))
		return rc;
	if (kv_shadow_plan(s->n_tok, hp->n_head_kv, hp->d_head, KV_SHADOW_CHUNK, keep, &pl)) {
		kv_shadow_plan(s->n_tok, hp->n_head_kv, hp->d_head, KV_SHADOW_CHUNK, need, &pl);
		session_note_add(s, "shadowkv: document %lld (%d tokens) is held whole beside its key factor",
				 (long long)s->doc.id, s->n_tok);
	}
	if ((rc = session_load_rows(s, k, v, err, errlen))) {
		session_free_rows(k, v);
		return rc;
	}
	struct kv_shadow_params sp = { .n_layer = hp->n_global, .layer_id = hp->global_layer,
		.n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .d_h = hp->d_head,
		.q_scale = hp->q_scale, .tail_cap = CONV_TAIL_CAP, .be = model_backend(s->m),
		.rope = model_rope_of(s->m, hp->global_layer[0]), .chunk = KV_SHADOW_CHUNK,
		.rank = pl.rank, .n_outlier = pl.n_outlier, .n_select = pl.n_select };
	rc = kv_shadow_new(&s->shadow, &sp, s->n_tok, (const uint16_t *const *)k,
			   (const uint16_t *const *)v, err, errlen);
	session_free_rows(k, v);
	if (!rc)
		session_note_add(s, "shadowkv: key factors of rank %d (of %d columns), %d outlier and %d "
				 "rebuilt chunks of %d tokens per layer and KV head", pl.rank,
				 hp->n_head_kv * hp->d_head, pl.n_outlier, pl.n_select, KV_SHADOW_CHUNK);
	return rc;
}

/* Every exact row in the model state (the reference). */
int session_open_full(struct session *s, char *err, size_t errlen)
{
	const struct model_hparams *hp = s->hp;
	uint16_t *k[SESSION_MAX_GLOBAL] = { 0 }, *v[SESSION_MAX_GLOBAL] = { 0 };
	int rc = model_state_new(&s->ms, s->m, s->n_tok + CONV_TAIL_CAP, SESSION_BATCH, 1, err, errlen);

	if (!rc)
		rc = session_load_rows(s, k, v, err, errlen);
	for (int l = 0; !rc && l < hp->n_global; l++)
		if (model_state_set_rows(s->ms, hp->global_layer[l], 0, s->n_tok, k[l], v[l]))
			rc = sekv_errf(err, errlen, SEKV_EINVAL, "session: cannot restore global layer %d",
				       hp->global_layer[l]);
	session_free_rows(k, v);
	return rc;
}
