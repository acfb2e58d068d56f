/* ingest.c - one document from file to durable SeKV memory.
 *
 * Flow (DESIGN.md section 2): extract -> tokenize (BOS, user turn, preamble,
 * text) -> prefill in chunks keeping surprisal and the global layers' KV ->
 * each chunk persisted in its own transaction -> sliding-window rows ->
 * SeKV build (segment, summaries, SVD factors, router) -> memory persisted,
 * document marked ready. A crash leaves a document in state "prefill" that
 * `sekv ls` shows as incomplete; nothing ready is ever half-written.
 */
#include "app/app.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "app/extract.h"
#include "engine/err.h"
#include "engine/model.h"
#include "engine/sekv/sekv.h"
#include "engine/tokenizer.h"
#include "store/store.h"

double app_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

size_t app_peak_rss(void)
{
	struct rusage ru;
	if (getrusage(RUSAGE_SELF, &ru) != 0)
		return 0;
	return (size_t)ru.ru_maxrss * 1024;
}

int app_load(const struct app_opts *o, struct model **m, struct tok **tk,
	     char *err, size_t errlen)
{
	int rc;

	if (m) {
		*m = NULL;
		rc = model_open(m, o->model, o->n_threads, err, errlen);
		if (rc)
			return rc;
		model_set_act_q8(*m, !o->act_f32);
	}
	if (tk) {
		*tk = NULL;
		if (o->tokenizer)
			rc = tok_open_file(tk, o->tokenizer, err, errlen);
		else
			rc = tok_open_gguf(tk, model_gguf(*m), err, errlen);
		if (rc) {
			if (m) {
				model_close(*m);
				*m = NULL;
			}
			return rc;
		}
	}
	return 0;
}

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}

static void progress(const struct app_opts *o, int done, int total, double t0, int final)
{
	static double last;
	static int last_tenth;
	double now = app_now(), el = now - t0;
	double tps = el > 0 ? done / el : 0;
	double eta = tps > 0 ? (total - done) / tps : 0;

	if (o->quiet)
		return;
	/* a terminal gets a live line; a log gets a line per tenth */
	if (!final && (isatty(2) ? now - last < 0.5 : (done * 10 / total) == last_tenth))
		return;
	last_tenth = done * 10 / total;
	last = now;
	fprintf(stderr, "%sprefill %d/%d tokens  %.1f tokens/s  ETA %.0fs%s",
		isatty(2) ? "\r\033[K" : "", done, total, tps, eta,
		isatty(2) && !final ? "" : "\n");
}

static int build_tokens(const struct tok *tk, const struct chat_template *ct,
			const char *text, size_t len, struct chat_tokvec *v,
			char *err, size_t errlen)
{
	int rc;

	if (ct->bos >= 0 && (rc = chat_tokvec_push(v, ct->bos)))
		return sekv_errf(err, errlen, rc, "tokenize: out of memory");
	if ((rc = chat_open_turn(v, ct, tk, "user", err, errlen)))
		return rc;
	if ((rc = chat_push_text(v, tk, APP_DOC_PREAMBLE, strlen(APP_DOC_PREAMBLE), err, errlen)))
		return rc;
	return chat_push_text(v, tk, text, len, err, errlen);
}

int app_ingest(const struct app_opts *o, const char *path, int64_t *doc_id,
	       char *err, size_t errlen)
{
	struct model *m = NULL;
	struct tok *tk = NULL;
	struct store *st = NULL;
	struct model_state *ms = NULL;
	struct sekv_mem *mem = NULL;
	struct chat_template ct;
	struct chat_tokvec tv = {0};
	struct store_doc doc;
	float *surprisal = NULL;
	uint16_t **swa_k = NULL, **swa_v = NULL;
	uint16_t *glob_k[MODEL_MAX_LAYER] = {0}, *glob_v[MODEL_MAX_LAYER] = {0};
	int32_t *swa_id = NULL;
	char *text = NULL;
	size_t text_len = 0, n_bad = 0;
	int rc, n_swa = 0;

	rc = extract_text_file(path, &text, &text_len, &n_bad, err, errlen);
	if (rc)
		goto out;
	if (n_bad && !o->quiet)
		fprintf(stderr, "ingest: %s: %zu invalid UTF-8 bytes replaced by U+FFFD\n", path, n_bad);
	if ((rc = app_load(o, &m, &tk, err, errlen)))
		goto out;
	const struct model_hparams *hp = model_hparams(m);
	if ((rc = chat_template_init(&ct, hp->arch, tk, err, errlen)))
		goto out;
	if ((rc = build_tokens(tk, &ct, text, text_len, &tv, err, errlen)))
		goto out;
	if (hp->n_global <= 0) {
		rc = sekv_errf(err, errlen, SEKV_EUNSUP, "ingest: %s: model has no global-attention layer", o->model);
		goto out;
	}
	int n_tok = tv.n;
	if (hp->n_ctx_train > 0 && n_tok > hp->n_ctx_train)
		fprintf(stderr, "ingest: warning: %s: %d tokens, more than the %d-token context the model "
			"was trained for; positions past it are extrapolated and answers may degrade\n",
			path, n_tok, hp->n_ctx_train);
	if (!o->quiet)
		fprintf(stderr, "ingest: %s: %zu bytes, %d tokens, model %s\n", path, text_len, n_tok, hp->arch);

	if ((rc = store_open(&st, o->db, err, errlen)))
		goto out;
	memset(&doc, 0, sizeof doc);
	snprintf(doc.title, sizeof doc.title, "%s", o->title ? o->title : base_name(path));
	char *abs = realpath(path, NULL);
	snprintf(doc.source, sizeof doc.source, "%s", abs ? abs : path);
	free(abs);
	snprintf(doc.model_fp, sizeof doc.model_fp, "%s", hp->fingerprint);
	snprintf(doc.model_name, sizeof doc.model_name, "%.127s", base_name(o->model));
	doc.n_layer_global = hp->n_global;
	doc.n_layer_swa = hp->n_layer - hp->n_global;
	doc.n_head_kv = hp->n_head_kv;
	doc.d_h = hp->d_head;
	doc.swa_window = hp->swa_window;
	doc.budget = o->budget;
	doc.r_max = o->r_max;
	if ((rc = store_doc_create(st, &doc, text, text_len, err, errlen)))
		goto out;

	if ((rc = model_state_new(&ms, m, n_tok, o->n_batch, 1, err, errlen)))
		goto out;
	size_t row = (size_t)hp->n_head_kv * hp->d_head;
	surprisal = malloc((size_t)n_tok * sizeof *surprisal);
	/* host copies of the global layers' rows: persisted per chunk, then
	 * the input of the SeKV build */
	int glob_ok = 1;
	for (int l = 0; l < hp->n_global; l++) {
		glob_k[l] = malloc((size_t)n_tok * row * sizeof(uint16_t));
		glob_v[l] = malloc((size_t)n_tok * row * sizeof(uint16_t));
		glob_ok = glob_ok && glob_k[l] && glob_v[l];
	}
	if (!surprisal || !glob_ok) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "ingest: out of memory");
		goto out;
	}
	const uint16_t *ck[MODEL_MAX_LAYER], *cv[MODEL_MAX_LAYER];
	double t0 = app_now(), prefill_s = 0;
	for (int pos = 0; pos < n_tok; pos += o->n_batch) {
		int n = n_tok - pos < o->n_batch ? n_tok - pos : o->n_batch;
		double c0 = app_now();
		if ((rc = model_prefill(m, ms, tv.ids + pos, n, surprisal + pos, err, errlen)))
			goto out;
		double dt = app_now() - c0;
		prefill_s += dt;
		for (int l = 0; l < hp->n_global; l++) {
			ck[l] = glob_k[l] + (size_t)pos * row;
			cv[l] = glob_v[l] + (size_t)pos * row;
			if ((rc = model_state_get_rows(ms, hp->global_layer[l], pos, n,
						       glob_k[l] + (size_t)pos * row,
						       glob_v[l] + (size_t)pos * row))) {
				sekv_errf(err, errlen, rc, "ingest: global layer %d: rows %d..%d not held",
					  hp->global_layer[l], pos, pos + n);
				goto out;
			}
		}
		if ((rc = store_doc_put_chunk(st, doc.id, pos, n, tv.ids + pos, surprisal + pos,
					      ck, cv, dt, err, errlen)))
			goto out;
		progress(o, pos + n, n_tok, t0, pos + n == n_tok);
	}

	/* sliding-window rows: the last `window` positions of each local layer */
	n_swa = hp->n_layer - hp->n_global;
	int n_row = hp->swa_window < n_tok ? hp->swa_window : n_tok;
	swa_k = calloc((size_t)n_swa + 1, sizeof *swa_k);
	swa_v = calloc((size_t)n_swa + 1, sizeof *swa_v);
	swa_id = calloc((size_t)n_swa + 1, sizeof *swa_id);
	if (!swa_k || !swa_v || !swa_id) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "ingest: out of memory");
		goto out;
	}
	for (int l = 0, i = 0; l < hp->n_layer; l++) {
		if (hp->is_global[l])
			continue;
		swa_id[i] = l;
		swa_k[i] = malloc((size_t)n_row * row * 2);
		swa_v[i] = malloc((size_t)n_row * row * 2);
		if (!swa_k[i] || !swa_v[i]) {
			rc = sekv_errf(err, errlen, SEKV_ENOMEM, "ingest: out of memory");
			goto out;
		}
		if ((rc = model_state_get_rows(ms, l, n_tok - n_row, n_row, swa_k[i], swa_v[i]))) {
			sekv_errf(err, errlen, rc, "ingest: sliding-window layer %d: last %d rows not held", l, n_row);
			goto out;
		}
		i++;
	}
	if ((rc = store_doc_put_swa(st, doc.id, n_swa, swa_id, n_row,
				    (const uint16_t *const *)swa_k, (const uint16_t *const *)swa_v, err, errlen)))
		goto out;

	/* SeKV memory */
	struct sekv_params sp;
	sekv_default_params(&sp);
	sp.alpha = o->alpha;
	sp.r_max = o->r_max;
	sp.r_use = o->r_max;
	sp.budget = o->budget;
	sp.n_recent = o->n_recent;
	sp.n_threads = o->n_threads;
	sp.q_scale = hp->q_scale;
	for (int l = 0; l < hp->n_global; l++) {
		ck[l] = glob_k[l];
		cv[l] = glob_v[l];
	}
	double b0 = app_now();
	if ((rc = sekv_build(&mem, &sp, n_tok, tv.ids, surprisal, hp->n_global, hp->global_layer,
			     hp->n_head, hp->n_head_kv, hp->d_head, ck, cv, err, errlen)))
		goto out;
	double build_s = app_now() - b0;
	if ((rc = store_doc_put_mem(st, doc.id, mem, o->budget, err, errlen)))
		goto out;
	if (!o->quiet) {
		fprintf(stderr, "ingest: prefill %.1fs (%.1f tokens/s), memory built in %.1fs\n",
			prefill_s, n_tok / (prefill_s > 0 ? prefill_s : 1), build_s);
		fprintf(stderr, "ingest: %d spans (%d compressed), %d exact rows, alpha %.2f%s%s\n",
			mem->n_span, mem->n_comp, mem->n_exact, mem->alpha_used,
			mem->note[0] ? ": " : "", mem->note);
		fprintf(stderr, "ingest: full KV %.1f MiB, device static %.1f MiB (%.1f%%), host factors %.1f MiB, peak RSS %.0f MiB\n",
			mem->full_kv_bytes / 1048576.0, mem->static_bytes / 1048576.0,
			100.0 * mem->static_bytes / (double)mem->full_kv_bytes,
			mem->host_bytes / 1048576.0, app_peak_rss() / 1048576.0);
	}
	*doc_id = doc.id;
out:
	if (swa_k)
		for (int i = 0; i < n_swa; i++) {
			free(swa_k[i]);
			free(swa_v[i]);
		}
	free(swa_k);
	free(swa_v);
	free(swa_id);
	for (int l = 0; l < MODEL_MAX_LAYER; l++) {
		free(glob_k[l]);
		free(glob_v[l]);
	}
	free(surprisal);
	sekv_mem_free(mem);
	model_state_free(ms);
	store_close(st);
	chat_tokvec_free(&tv);
	tok_close(tk);
	model_close(m);
	free(text);
	return rc;
}
