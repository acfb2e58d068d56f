/* ingest.c - one document from file to durable SeKV memory, in stages.
 *
 * Flow (DESIGN.md section 2), one function per stage: extract (PDF or
 * text, app/extract.h) -> count (refuse a document longer than the model's
 * context before any long work) -> plan (the whole text, its first
 * --max-tokens, or --split parts: app/ingest_plan.c) -> per part, each its
 * own document: tokenize (the one turn builder: BOS, user turn, preamble,
 * text) -> create the document with its resume state and page map in one
 * transaction -> prefill in chunks, each chunk committed in its own
 * transaction with the sliding-window rows and what a resume needs, the
 * global layers' attention probed for H2O's scores -> SeKV build ->
 * memory and scores persisted together, document marked ready. A crash
 * leaves the part being written in state "prefill" that `sekv ls` shows
 * as incomplete and app_ingest_resume continues exactly (then, of a
 * split document, the parts after it: app_ingest_run_parts). Progress goes
 * through a callback (struct app_ingest_progress); nothing here keeps
 * static state.
 */
#include "app/app.h"
#include "app/ingest_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/extract.h"
#include "app/history.h"
#include "app/import.h"
#include "engine/base/clock.h"
#include "engine/base/err.h"
#include "engine/evidence/evidence.h"
#include "engine/base/fmt.h"
#include "engine/base/hash.h"
#include "engine/model/model.h"
#include "engine/sekv/sekv.h"
#include "engine/tok/tokenizer.h"
#include "store/store.h"

#define INGEST_COUNT_PIECE ((size_t)64 << 10) /* bytes tokenized per counting step */

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

void app_template_note(const char *cmd, const struct model *m, const struct tok *tk, int quiet)
{
	struct chat_template ct;

	if (!quiet && chat_template_init(&ct, model_gguf(m), CHAT_FORMAT_COMPLETION, tk, NULL, 0) == 0 &&
	    ct.note[0])
		app_errorf("sekv %s: note: %s\n", cmd, ct.note);
}

/* ---- one ingest ------------------------------------------------------ */


static void report(struct ingest *g, const char *stage, long long done, long long total,
		   double t0, int final)
{
	if (!g->fn)
		return;
	/* a resumed prefill's rate counts only this run's tokens */
	long long base = strcmp(stage, "prefill") ? 0 : g->pos_start;
	double el = clk_now() - t0, rate = el > 0 && done > base ? (done - base) / el : 0;
	struct app_ingest_progress p = {
		.stage = stage, .path = g->path, .done = done, .total = total, .rate = rate,
		.eta_s = rate > 0 ? (total - done) / rate : -1, .final = final, .doc = g->doc.id,
		.more = !g->chat && g->part + 1 < g->plan.n_part,
	};
	if (g->tok_byte && !strcmp(stage, "prefill") && done > 0) {
		long long i = done - 1;
		while (i > 0 && g->tok_byte[i] < 0)
			i--;
		int64_t at = (int64_t)(g->text - g->x.text) + (g->tok_byte[i] > 0 ? g->tok_byte[i] : 0);
		p.page = g->page_base + extract_page_of(g->x.page_start, g->x.n_page, at) + 1;
		p.n_page = g->page_base + g->x.n_page;
	}
	g->fn(g->ud, &p);
}

void app_ingest_report_doc(struct ingest *g)
{
	report(g, "document", 0, g->tv.n, clk_now(), 1);
}

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}

static void on_page(void *ud, int page, int n_page)
{
	struct ingest *g = ud;
	report(g, "pages", page, n_page, g->t_pages, page == n_page);
}

/* Reads g->path into g->x (a PDF page by page, asking for its password on
 * a terminal when --password is not given). */
int app_ingest_extract(struct ingest *g, char *err, size_t errlen)
{
	struct extract_params p = { .password = g->o->password, .on_page = on_page, .ud = g };
	char line[1024];

	if (!g->o->password && isatty(0))
		p.ask_password = app_ask_password;
	g->t_pages = clk_now();
	int rc = extract_file(g->path, &p, &g->x, err, errlen);
	if (rc)
		return rc;
	app_extract_describe(g->path, &g->x, line, sizeof line);
	if (!g->o->quiet && (g->x.n_page || g->x.n_replaced || g->x.bom || strcmp(g->x.encoding, "UTF-8")))
		app_errorf("ingest: %s\n", line);
	report(g, "extract", (long long)g->x.len, (long long)g->x.len, clk_now(), 1);
	return 0;
}

/* Counts tokens piece by piece (cut after a newline) and stops as soon as
 * the count passes the model's context, so a document far too long is
 * refused in seconds. The count of a text cut in pieces can differ from
 * the whole text's by a few tokens per cut: app_ingest_tokenize checks again. */
static int stage_count(struct ingest *g, char *err, size_t errlen)
{
	long long n_ctx = g->hp->n_ctx_train, count = 0;
	const char *text = g->x.text;
	size_t pos = 0, len = g->x.len;
	double t0 = clk_now();

	/* --max-tokens and --split count the whole text anyway (app_plan) */
	if (n_ctx <= 0 || len <= INGEST_COUNT_PIECE || g->o->max_tokens || g->o->split)
		return 0;
	while (pos < len && count <= n_ctx) {
		size_t end = pos + INGEST_COUNT_PIECE < len ? pos + INGEST_COUNT_PIECE : len;
		const char *nl = end < len ? memrchr(text + pos, '\n', end - pos) : NULL;
		if (nl)
			end = (size_t)(nl - text) + 1;
		report(g, "count", (long long)pos, (long long)len, t0, 0);
		int n = tok_encode(g->tk, text + pos, end - pos, 0, NULL, 0, err, errlen);
		if (n < 0)
			return n;
		count += n;
		pos = end;
	}
	report(g, "count", (long long)pos, (long long)len, t0, 1);
	if (count <= n_ctx)
		return 0;
	char seen[32], all[32];
	fmt_bytes(pos, seen, sizeof seen);
	fmt_bytes(len, all, sizeof all);
	return sekv_errf(err, errlen, SEKV_EINVAL,
			 "%s: document is longer than the model's context: more than %lld tokens "
			 "in the first %s of %s (about %.0f tokens in all); context %lld tokens: "
			 "--max-tokens %lld stores its first %lld tokens, --split stores it in parts",
			 g->path, n_ctx, seen, all, (double)count * (double)len / (double)pos, n_ctx,
			 n_ctx, n_ctx);
}

void app_ingest_text_fp(const struct extract_doc *x, char fp[17])
{
	snprintf(fp, 17, "%016llx", (unsigned long long)hash_fnv1a64(HASH_FNV1A64_INIT, x->text, x->len));
}

/* What is stored: the whole text, its first --max-tokens, or parts. */
int app_ingest_plan(struct ingest *g, char *err, size_t errlen)
{
	const struct app_plan *pl = &g->plan;
	char e2[768];
	int rc = app_plan(&g->plan, &g->ct, g->tk, g->x.text, g->x.len, g->hp->n_ctx_train,
			  g->o->max_tokens, g->o->split, e2, sizeof e2);

	if (rc)
		return sekv_errf(err, errlen, rc, "%s: %s", g->path, e2);
	if (!(g->ids = calloc((size_t)pl->n_part, sizeof *g->ids)))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "ingest: out of memory");
	/* what a resume reading the file again must find: no parts from two
	 * versions of it */
	if (pl->n_part > 1)
		app_ingest_text_fp(&g->x, g->text_fp);
	if (pl->cut && !g->o->quiet) {
		const struct app_part *p = &pl->part[0];
		app_errorf("ingest: %s: --max-tokens %d: storing only the first %d of %d tokens "
			   "(bytes 0-%zu of %zu", g->path, pl->limit, p->n_tok, pl->n_tok, p->end, g->x.len);
		if (g->x.n_page)
			app_errorf(", pages 1-%d of %d", extract_page_of(g->x.page_start, g->x.n_page,
					(int64_t)(p->end ? p->end - 1 : 0)) + 1, g->x.n_page);
		app_errorf("); the rest is left out\n");
	} else if (pl->n_part > 1 && !g->o->quiet) {
		app_errorf("ingest: %s: %d tokens, more than %d: storing %d parts (--split)\n", g->path,
			   pl->n_tok, pl->limit, pl->n_part);
	}
	return 0;
}

/* The document's tokens: its text as a document turn, or a chat
 * history's conversation rendered as turns (whose decoded rendering
 * becomes the text). */
int app_ingest_tokenize(struct ingest *g, char *err, size_t errlen)
{
	const struct app_part *pt = g->chat ? NULL : &g->plan.part[g->part];
	int rc;

	if (g->chat) {
		free(g->chat_text);
		g->chat_text = NULL;
		rc = import_render(g->chat, &g->ct, g->tk, &g->tv, &g->chat_text, &g->text_len, err,
				   errlen);
		g->text = g->chat_text;
	} else {
		g->text = g->x.text + pt->start;
		g->text_len = pt->end - pt->start;
		rc = chat_build_turn(&g->tv, &g->ct, g->tk, CHAT_START_STREAM, APP_DOC_SYSTEM,
				     g->text, g->text_len, 0, NULL, err, errlen);
	}
	if (rc)
		return rc;
	int n_ctx = g->hp->n_ctx_train;
	if (n_ctx > 0 && g->tv.n > n_ctx)
		return sekv_errf(err, errlen, SEKV_EINVAL,
				 "%s: document is longer than the model's context: %d tokens; "
				 "context %d tokens", g->path, g->tv.n, n_ctx);
	if (g->x.n_page && g->fn) {
		if (!(g->tok_byte = malloc(((size_t)g->tv.n + 1) * sizeof *g->tok_byte)))
			return sekv_errf(err, errlen, SEKV_ENOMEM, "ingest: out of memory");
		int exact;
		if ((rc = evidence_offsets(g->tk, g->tv.ids, g->tv.n, g->text, g->text_len, g->tok_byte,
					   &exact, err, errlen)))
			return rc;
	}
	/* the prompt format decides how the model reads the document: say it */
	char fmt[64];
	if (g->ct.fmt == CHAT_FORMAT_COMPLETION)
		snprintf(fmt, sizeof fmt, "completion format (no chat template)");
	else
		snprintf(fmt, sizeof fmt, "%s chat template", g->ct.name);
	if (!g->o->quiet && pt && g->plan.n_part > 1)
		app_errorf("ingest: %s: part %d/%d: bytes %zu-%zu, %d tokens, model %s, prompt: %s\n",
			   g->path, g->part + 1, g->plan.n_part, pt->start, pt->end, g->tv.n, g->hp->arch, fmt);
	else if (!g->o->quiet)
		app_errorf("ingest: %s: %zu bytes, %d tokens, model %s, prompt: %s\n", g->path,
			   g->text_len, g->tv.n, g->hp->arch, fmt);
	return 0;
}

/* The part's document with its resume state and, for a PDF, its page
 * map, in one transaction that also ends the previous part's continuation
 * (store_ingest_end): a crash leaves all of it or none, and a resume of
 * the previous part or of this one always has its state. */
static int stage_create_doc(struct ingest *g, char *err, size_t errlen)
{
	const struct app_opts *o = g->o;
	const struct model_hparams *hp = g->hp;
	const struct app_part *pt = g->chat ? NULL : &g->plan.part[g->part];
	struct store_doc *d = &g->doc;
	int64_t *start = NULL;
	int page0 = 0, n_page = 0, rc;

	if (!g->st && (rc = store_open(&g->st, o->db, err, errlen)))
		return rc;
	memset(d, 0, sizeof *d);
	const char *title = g->chat ? g->chat->title : o->title ? o->title : base_name(g->path);
	if (g->plan.n_part > 1)
		snprintf(d->title, sizeof d->title, "%.200s (part %d/%d)", title, g->part + 1, g->plan.n_part);
	else
		snprintf(d->title, sizeof d->title, "%s", title);
	if (g->chat) {
		import_source(g->path, g->chat->index, d->source, sizeof d->source);
	} else {
		char *abs = realpath(g->path, NULL);
		snprintf(d->source, sizeof d->source, "%s", abs ? abs : g->path);
		free(abs);
	}
	snprintf(d->model_fp, sizeof d->model_fp, "%s", hp->fingerprint);
	snprintf(d->model_name, sizeof d->model_name, "%.127s", base_name(o->model));
	snprintf(d->prompt_format, sizeof d->prompt_format, "%s", chat_format_name(g->ct.fmt));
	d->n_layer_global = hp->n_global;
	d->n_layer_swa = hp->n_layer - hp->n_global;
	d->n_head_kv = hp->n_head_kv;
	d->d_h = hp->d_head;
	d->swa_window = hp->swa_window;
	d->budget = o->budget;
	d->r_max = o->r_max;
	struct store_ingest in = {
		.n_tok_total = g->tv.n, .n_batch = o->n_batch, .alpha = o->alpha,
		.rank_energy = o->rank_energy, .rank_energy_v = o->rank_energy_v,
		.key_pre_rope = o->key_pre_rope,
		.static_share = o->static_share, .n_recent = o->n_recent,
		.exact_below = o->exact_below,
		.keep_full_kv = o->keep_full_kv, .part = pt ? g->part : 0,
		.n_part = pt ? g->plan.n_part : 1, .part_limit = pt ? g->plan.limit : 0,
		.n_probe = hp->n_global * hp->n_head <= MODEL_PROBE_MAX ? hp->n_global * hp->n_head : 0,
	};
	int64_t prev = pt && g->part > g->part0 ? g->ids[g->part - 1] : 0;
	snprintf(in.text_fp, sizeof in.text_fp, "%s", pt ? g->text_fp : "");
	if (pt && app_part_pages(&g->x, pt->start, pt->end, &page0, &n_page, &start))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "ingest: out of memory");
	if ((rc = store_tx_begin(g->st, err, errlen)))
		goto out;
	if ((prev > 0 && (rc = store_ingest_end(g->st, prev, err, errlen))) ||
	    (rc = store_doc_create(g->st, d, g->text, g->text_len, err, errlen)) ||
	    (rc = store_doc_lock(g->st, d->id, err, errlen)) ||
	    (rc = store_ingest_begin(g->st, d->id, &in, err, errlen)) ||
	    (n_page && (rc = store_doc_put_pages(g->st, d->id, page0, n_page, start,
						 (int64_t)g->text_len, err, errlen))) ||
	    (rc = store_tx_commit(g->st, err, errlen))) {
		store_tx_rollback(g->st);
		d->id = 0;
		goto out;
	}
	app_ingest_report_doc(g);
	/* said now, so an interrupted ingest's id is known */
	if (!o->quiet)
		app_errorf("ingest: %s: document %lld (if interrupted: 'sekv ingest --resume %lld')\n",
			   g->path, (long long)d->id, (long long)d->id);
out:
	free(start);
	return rc;
}

/* Probes every query head of every global layer during the prefill, for
 * H2O's accumulated attention (engine/kv/kv_select.h): a model with more
 * global heads than a probe holds gets no scores (a note says so). */
static int h2o_probe_start(struct ingest *g, char *err, size_t errlen)
{
	const struct model_hparams *hp = g->hp;
	struct model_probe *p = &g->h2o_probe;
	int n = hp->n_global * hp->n_head;

	if (n > MODEL_PROBE_MAX) {
		if (!g->o->quiet)
			app_errorf("ingest: note: no H2O scores (--kv h2o): %d global heads, a probe holds %d\n",
				   n, MODEL_PROBE_MAX);
		return 0;
	}
	if (!(p->mass = calloc((size_t)n * g->tv.n + 1, sizeof *p->mass)))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "ingest: out of memory");
	for (int l = 0; l < hp->n_global; l++)
		for (int h = 0; h < hp->n_head; h++) {
			p->layer[p->n] = hp->global_layer[l];
			p->head[p->n++] = h;
		}
	p->n_pos = g->tv.n;
	model_state_set_probe(g->ms, p);
	return 0;
}

/* H2O's scores from the probe: each KV head's positions get the mass of
 * the query heads that share it. */
static int h2o_scores(struct ingest *g, char *err, size_t errlen)
{
	const struct model_hparams *hp = g->hp;
	const struct model_probe *p = &g->h2o_probe;
	int n_tok = g->tv.n, group = hp->n_head / hp->n_head_kv;

	model_state_set_probe(g->ms, NULL);
	if (!p->n)
		return 0;
	if (!(g->h2o = calloc((size_t)hp->n_global * hp->n_head_kv * n_tok + 1, sizeof *g->h2o)))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "ingest: out of memory");
	for (int i = 0; i < p->n; i++) {
		int l = i / hp->n_head, kv = p->head[i] / group;
		float *dst = g->h2o + ((size_t)l * hp->n_head_kv + kv) * n_tok;
		const float *src = p->mass + (size_t)i * n_tok;
		for (int t = 0; t < n_tok; t++)
			dst[t] += src[t];
	}
	return 0;
}

/* Buffers of the prefill: surprisal, host copies of the global layers'
 * rows (persisted per chunk, then the SeKV build's input), the sliding-
 * window rows each chunk commits, H2O's probe. */
int app_ingest_prefill_alloc(struct ingest *g, char *err, size_t errlen)
{
	const struct model_hparams *hp = g->hp;
	int n_tok = g->tv.n, rc;
	size_t row = (size_t)hp->n_head_kv * hp->d_head;

	if ((rc = model_state_new(&g->ms, g->m, n_tok, g->o->n_batch, 1, err, errlen)))
		return rc;
	int ok = (g->surprisal = malloc((size_t)n_tok * sizeof *g->surprisal)) != NULL;
	for (int l = 0; l < hp->n_global; l++) {
		g->glob_k[l] = malloc((size_t)n_tok * row * sizeof(uint16_t));
		g->glob_v[l] = malloc((size_t)n_tok * row * sizeof(uint16_t));
		ok = ok && g->glob_k[l] && g->glob_v[l];
	}
	for (int l = 0; l < hp->n_layer; l++) {
		if (hp->is_global[l])
			continue;
		g->swa_id[g->n_swa] = l;
		g->swa_k[g->n_swa] = malloc((size_t)hp->swa_window * row * sizeof(uint16_t) + 1);
		g->swa_v[g->n_swa] = malloc((size_t)hp->swa_window * row * sizeof(uint16_t) + 1);
		ok = ok && g->swa_k[g->n_swa] && g->swa_v[g->n_swa];
		g->n_swa++;
	}
	if (!ok)
		return sekv_errf(err, errlen, SEKV_ENOMEM, "ingest: out of memory");
	return h2o_probe_start(g, err, errlen);
}

/* Commits the chunk [pos, pos + n) in one transaction: its tokens,
 * surprisal and global rows, the sliding-window layers' last rows, and
 * what a resume needs beyond them (the next token's surprisal under this
 * chunk's last logits, computed as model_prefill scores a chunk's first
 * token; H2O's probe mass). A crash keeps all of it or none. */
static int commit_chunk(struct ingest *g, int pos, int n, double dt, char *err, size_t errlen)
{
	const struct model_hparams *hp = g->hp;
	size_t row = (size_t)hp->n_head_kv * hp->d_head;
	const uint16_t *ck[MODEL_MAX_LAYER], *cv[MODEL_MAX_LAYER];
	int end = pos + n, n_row = hp->swa_window < end ? hp->swa_window : end, rc;
	const float *logits = model_state_logits(g->ms);
	float h_next = 0;

	if (end < g->tv.n && logits)
		h_next = (float)(model_state_lse(g->ms) - logits[g->tv.ids[end]]);
	for (int l = 0; l < hp->n_global; l++) {
		ck[l] = g->glob_k[l] + (size_t)pos * row;
		cv[l] = g->glob_v[l] + (size_t)pos * row;
		if ((rc = model_state_get_rows(g->ms, hp->global_layer[l], pos, n,
					       g->glob_k[l] + (size_t)pos * row,
					       g->glob_v[l] + (size_t)pos * row)))
			return sekv_errf(err, errlen, rc, "ingest: global layer %d: rows %d..%d not held",
					 hp->global_layer[l], pos, end);
	}
	for (int i = 0; i < g->n_swa; i++)
		if ((rc = model_state_get_rows(g->ms, g->swa_id[i], end - n_row, n_row, g->swa_k[i],
					       g->swa_v[i])))
			return sekv_errf(err, errlen, rc, "ingest: sliding-window layer %d: last %d rows "
					 "not held", g->swa_id[i], n_row);
	if ((rc = store_tx_begin(g->st, err, errlen)))
		return rc;
	if ((rc = store_doc_put_chunk(g->st, g->doc.id, pos, n, g->tv.ids + pos, g->surprisal + pos,
				      ck, cv, dt, err, errlen)) ||
	    (rc = store_doc_put_swa(g->st, g->doc.id, g->n_swa, g->swa_id, n_row,
				    (const uint16_t *const *)g->swa_k,
				    (const uint16_t *const *)g->swa_v, err, errlen)) ||
	    (rc = store_ingest_advance(g->st, g->doc.id, h_next, g->h2o_probe.mass, g->tv.n,
				       err, errlen)) ||
	    (rc = store_tx_commit(g->st, err, errlen))) {
		store_tx_rollback(g->st);
		return rc;
	}
	return 0;
}

/* Prefills in chunks of --batch from pos_start (0, or where a resumed
 * ingest left off), each chunk committed on its own, keeping surprisal
 * and H2O's scores. A resumed run's first chunk gets the surprisal of
 * its first token from the stored h_start (the state has no logits). */
static int stage_prefill(struct ingest *g, char *err, size_t errlen)
{
	int n_tok = g->tv.n, n_batch = g->o->n_batch, rc;
	double t0 = clk_now();

	report(g, "prefill", g->pos_start, n_tok, t0, g->pos_start == n_tok);
	for (int pos = g->pos_start; pos < n_tok; pos += n_batch) {
		int n = n_tok - pos < n_batch ? n_tok - pos : n_batch;
		double c0 = clk_now();
		if ((rc = model_prefill(g->m, g->ms, g->tv.ids + pos, n, g->surprisal + pos, err, errlen)))
			return rc;
		if (pos == g->pos_start && pos > 0)
			g->surprisal[pos] = g->h_start;
		double dt = clk_now() - c0;
		g->prefill_s += dt;
		double w0 = clk_now();
		if ((rc = commit_chunk(g, pos, n, dt, err, errlen)))
			return rc;
		g->commit_s += clk_now() - w0;
		report(g, "prefill", pos + n, n_tok, t0, pos + n == n_tok);
	}
	return h2o_scores(g, err, errlen);
}

static int stage_build(struct ingest *g, char *err, size_t errlen)
{
	const struct model_hparams *hp = g->hp;
	const uint16_t *ck[MODEL_MAX_LAYER], *cv[MODEL_MAX_LAYER];
	struct sekv_params sp;
	float *score = NULL;
	int rc;

	app_ingest_mem_params(g->o, g->m, g->o->budget, &sp);
	for (int l = 0; l < hp->n_global; l++) {
		ck[l] = g->glob_k[l];
		cv[l] = g->glob_v[l];
	}
	if ((rc = app_ingest_anchor_score(g->o, hp, g->h2o, g->surprisal, g->tv.n, &sp, &score, err,
					  errlen)))
		return rc;
	double b0 = clk_now();
	rc = sekv_build(&g->mem, &sp, g->tv.n, g->tv.ids, g->surprisal, hp->n_global,
			hp->global_layer, hp->n_head, hp->n_head_kv, hp->d_head, ck, cv, err, errlen);
	g->build_s = clk_now() - b0;
	free(score);
	return rc;
}

static void print_summary(const struct ingest *g)
{
	int n_tok = g->tv.n;

	app_errorf("ingest: prefill %.1fs (%.1f tokens/s%s), chunks committed in %.2fs, memory "
		   "built in %.1fs\n", g->prefill_s,
		   (n_tok - g->pos_start) / (g->prefill_s > 0 ? g->prefill_s : 1),
		   g->pos_start ? " in this run" : "", g->commit_s, g->build_s);
	app_mem_print(g->mem);
}

/* The memory and H2O's scores (and a chat history's session) in one
 * transaction, the exact global KV dropped in it unless --keep-full-kv,
 * the resume state kept as the continuation when parts after it are
 * still to be stored: the document turns READY with all or with none. */
static int stage_persist(struct ingest *g, char *err, size_t errlen)
{
	const struct model_hparams *hp = g->hp;
	int rc;

	if ((rc = store_tx_begin(g->st, err, errlen)))
		return rc;
	if ((g->more_parts && (rc = store_ingest_pend(g->st, g->doc.id, err, errlen))) ||
	    (g->h2o && (rc = store_doc_put_h2o(g->st, g->doc.id, g->h2o, hp->n_global, hp->n_head_kv,
					       g->tv.n, err, errlen))) ||
	    (rc = store_doc_put_mem(g->st, g->doc.id, g->mem, g->o->budget, err, errlen)) ||
	    (!g->o->keep_full_kv && (rc = store_doc_drop_full_kv(g->st, g->doc.id, err, errlen))) ||
	    (g->chat && (rc = import_store_session(g->st, g->doc.id, app_kv_name(g->o->kv), g->chat,
						   &g->session, err, errlen))) ||
	    (rc = store_tx_commit(g->st, err, errlen))) {
		store_tx_rollback(g->st);
		return rc;
	}
	store_give_back(g->st);
	return 0;
}

/* What one part holds; the model, tokenizer, library and text stay. */
void app_ingest_part_free(struct ingest *g)
{
	for (int l = 0; l < MODEL_MAX_LAYER; l++) {
		free(g->glob_k[l]);
		free(g->glob_v[l]);
		free(g->swa_k[l]);
		free(g->swa_v[l]);
		g->glob_k[l] = g->glob_v[l] = g->swa_k[l] = g->swa_v[l] = NULL;
	}
	free(g->surprisal);
	free(g->h2o_probe.mass);
	free(g->h2o);
	free(g->tok_byte);
	free(g->chat_text);
	g->chat_text = NULL;
	sekv_mem_free(g->mem);
	model_state_free(g->ms);
	chat_tokvec_free(&g->tv);
	g->tok_byte = NULL;
	g->surprisal = NULL;
	g->h2o = NULL;
	g->mem = NULL;
	g->ms = NULL;
	memset(&g->h2o_probe, 0, sizeof g->h2o_probe);
	memset(&g->tv, 0, sizeof g->tv);
	memset(&g->doc, 0, sizeof g->doc);
	g->n_swa = 0;
	g->prefill_s = g->commit_s = g->build_s = 0;
}

void app_ingest_free(struct ingest *g)
{
	app_ingest_part_free(g);
	store_close(g->st);
	tok_close(g->tk);
	model_close(g->m);
	extract_doc_free(&g->x);
	app_plan_free(&g->plan);
	free(g->ids);
}

/* Loads the model, its tokenizer and the prompt format. */
int app_ingest_load(struct ingest *g, char *err, size_t errlen)
{
	int rc;

	if ((rc = app_load(g->o, &g->m, &g->tk, err, errlen)))
		return rc;
	g->hp = model_hparams(g->m);
	if ((rc = chat_template_init(&g->ct, model_gguf(g->m), chat_format_of_gguf(model_gguf(g->m)),
				     g->tk, err, errlen)))
		return rc;
	if (!g->o->quiet && g->ct.note[0])
		app_errorf("sekv ingest: note: %s\n", g->ct.note);
	if (g->hp->n_global <= 0)
		return sekv_errf(err, errlen, SEKV_EUNSUP, "ingest: %s: model has no global-attention layer",
				 g->o->model);
	/* Pre-RoPE key factors are rotated again with model_rope_inv_freq's
	 * plain NEOX angles (engine/sekv/build.c, attend.c). */
	if (g->o->key_pre_rope && !g->hp->rope_plain)
		return sekv_errf(err, errlen, SEKV_EUNSUP,
				 "ingest: %s: --factor-keys pre-rope needs a plain NEOX RoPE; this %s model's"
				 " RoPE %s (use post-rope, the default)", g->o->model, g->hp->arch,
				 g->hp->rope_neox ? "is scaled" : "rotates adjacent pairs");
	return 0;
}

/* From the document row on: prefill (from pos_start), build, persist. */
int app_ingest_finish(struct ingest *g, char *err, size_t errlen)
{
	int rc;

	if ((rc = stage_prefill(g, err, errlen)) || (rc = stage_build(g, err, errlen)) ||
	    (rc = stage_persist(g, err, errlen)))
		return rc;
	report(g, "stored", 1, 1, clk_now(), 1);
	if (!g->o->quiet)
		print_summary(g);
	return 0;
}

/* Tokens the library holds for the document now (what a resume starts at). */
static int committed(struct ingest *g)
{
	struct store_doc d;
	return store_doc_get(g->st, g->doc.id, &d, NULL, 0) ? 0 : (int)d.n_tok;
}

/* Appends printf-style text to the message in err [errlen]. */
static void __attribute__((format(printf, 3, 4))) err_append(char *err, size_t errlen,
							     const char *fmt, ...)
{
	size_t len = strnlen(err, errlen);
	va_list ap;

	if (len + 1 >= errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err + len, errlen - len, fmt, ap);
	va_end(ap);
}

/* What a failed ingest left in the library, appended to err: the part
 * being written once its document exists (incomplete: resume or delete
 * it), and of a split document the parts this run stored before it (from
 * part0 on) and those never started (which a resume of the last part
 * stored goes on with when no part is being written). */
void app_ingest_note_left(struct ingest *g, char *err, size_t errlen)
{
	long long id = (long long)g->doc.id;
	int n_part = g->plan.n_part, done = g->part, next = done + (id > 0), p0 = g->part0;

	if (!err || !errlen || !g->st)
		return;
	if (id > 0) {
		char of[32] = "";
		if (n_part > 1)
			snprintf(of, sizeof of, " (part %d/%d)", done + 1, n_part);
		err_append(err, errlen, "; document %lld%s is incomplete (%d of %d tokens stored): "
			   "continue with 'sekv ingest --resume %lld' or delete it with 'sekv rm %lld'",
			   id, of, committed(g), g->tv.n, id, id);
	}
	if (n_part <= 1 || next == 0)
		return;
	if (done == p0 + 1)
		err_append(err, errlen, "; part %d of %d is stored: document", done, n_part);
	else if (done > p0 + 1)
		err_append(err, errlen, "; parts %d-%d of %d are stored: documents", p0 + 1, done, n_part);
	for (int i = p0; i < done; i++)
		err_append(err, errlen, " %lld%s", (long long)g->ids[i], i + 1 < done ? "," : "");
	if (next + 1 == n_part)
		err_append(err, errlen, "; part %d of %d was not started", n_part, n_part);
	else if (next < n_part)
		err_append(err, errlen, "; parts %d-%d of %d were not started", next + 1, n_part, n_part);
	if (id == 0 && next < n_part)
		err_append(err, errlen, ": continue with 'sekv ingest --resume %lld'",
			   (long long)g->ids[done - 1]);
}

int app_ingest_ids_dup(const struct ingest *g, int64_t **ids, int *n)
{
	int first = g->ids ? g->part0 : 0, last = g->ids ? g->part : 0;

	*ids = NULL;
	*n = 0;
	if (last - first + (g->doc.id > 0) == 0)
		return 0;
	if (!(*ids = malloc((size_t)(last - first + 1) * sizeof **ids)))
		return SEKV_ENOMEM;
	for (int i = first; i < last; i++)
		(*ids)[(*n)++] = g->ids[i];
	if (g->doc.id > 0)
		(*ids)[(*n)++] = g->doc.id;
	return 0;
}

/* ---- chat histories ---------------------------------------------------- */

/* Conversation ic as a document and session, with the model, tokenizer
 * and format of g (borrowed); *doc, *session and *n_tok set. */
static int ingest_conv(const struct ingest *g, struct import_conv *ic, int64_t *doc,
		       int64_t *session, int *n_tok, char *err, size_t errlen)
{
	struct ingest c = { .o = g->o, .path = g->path, .fn = g->fn, .ud = g->ud, .m = g->m,
			    .tk = g->tk, .hp = g->hp, .ct = g->ct, .chat = ic };
	int rc;

	if ((rc = app_ingest_tokenize(&c, err, errlen)) || (rc = stage_create_doc(&c, err, errlen)) ||
	    (rc = app_ingest_prefill_alloc(&c, err, errlen)) || (rc = app_ingest_finish(&c, err, errlen)))
		app_ingest_note_left(&c, err, errlen);
	*doc = c.doc.id;
	*session = c.session;
	*n_tok = c.tv.n;
	c.m = NULL;
	c.tk = NULL;
	app_ingest_free(&c);
	return rc;
}

/* Appends one line on conversation ic (document doc, session ses) to the
 * list *lines [*n] printed when the ingest ends. */
static int list_add(char ***lines, int *n, const struct import_conv *ic, int64_t doc, int64_t ses,
		    int n_tok)
{
	char what[512], **v = realloc(*lines, (size_t)(*n + 1) * sizeof *v);

	if (!v)
		return SEKV_ENOMEM;
	*lines = v;
	import_describe(ic, n_tok, what, sizeof what);
	if (asprintf(&v[*n], "  %d. %s: document %lld, session %lld: %s\n", ic->index, ic->title,
		     (long long)doc, (long long)ses, what) < 0)
		return SEKV_ENOMEM;
	(*n)++;
	return 0;
}

/* Appends id to the list *ids [*n] (grown by realloc). 0 or SEKV_ENOMEM. */
static int ids_add(int64_t **ids, int *n, int64_t id)
{
	int64_t *v = realloc(*ids, (size_t)(*n + 1) * sizeof *v);

	if (!v)
		return SEKV_ENOMEM;
	*ids = v;
	v[(*n)++] = id;
	return 0;
}

/* A chat history, read into g->x: every conversation --conversation picks
 * becomes a document and a session, listed at the end; *ids [*n_ids]
 * (malloc'ed) gets every document stored, also after a failure (the last
 * one then incomplete). A conversation with no answer is left out. */
static int ingest_history(struct ingest *g, enum history_kind kind, int64_t **ids, int *n_ids,
			  char *err, size_t errlen)
{
	struct history h;
	char **lines = NULL;
	int first = 0, last = -1, n_line = 0, rc;

	if (!(rc = history_parse(&h, kind, g->path, g->x.text, g->x.len, err, errlen)) &&
	    !(rc = history_select(&h, g->o->conversation, &first, &last, err, errlen)))
		rc = app_ingest_load(g, err, errlen);
	for (int i = first; !rc && i <= last; i++) {
		struct import_conv ic;
		int64_t doc = 0, ses = 0;
		int n_tok = 0;
		if ((rc = import_conv_of(&h.conv[i], first == last ? g->o->title : NULL, &ic)))
			sekv_errf(err, errlen, rc, "ingest: %s: out of memory", g->path);
		else if (ic.n_turn == 0 && !g->o->quiet)
			app_errorf("ingest: %s: conversation %d (%s): no answered message, left out\n",
				   g->path, ic.index, ic.title);
		else if (ic.n_turn && !(rc = ingest_conv(g, &ic, &doc, &ses, &n_tok, err, errlen)) &&
			 (rc = list_add(&lines, &n_line, &ic, doc, ses, n_tok)))
			sekv_errf(err, errlen, rc, "ingest: out of memory");
		if (doc > 0 && ids_add(ids, n_ids, doc) && !rc)
			rc = sekv_errf(err, errlen, SEKV_ENOMEM, "ingest: out of memory");
		import_conv_free(&ic);
	}
	if (!rc && n_line == 0)
		rc = sekv_errf(err, errlen, SEKV_EINVAL, "ingest: %s: no conversation with an answered "
			       "message", g->path);
	if (n_line && !g->o->quiet)
		app_errorf("ingest: %s (%s): %d conversation%s imported as %s ('sekv chat DOC' "
			   "continues one):\n", g->path, history_kind_name(h.kind), n_line,
			   n_line == 1 ? "" : "s", n_line == 1 ? "a document and a session"
			   : "documents and sessions");
	for (int i = 0; i < n_line; i++) {
		if (!g->o->quiet)
			app_errorf("%s", lines[i]);
		free(lines[i]);
	}
	free(lines);
	history_free(&h);
	return rc;
}

/* Every part from first on, each its own document: tokenize, create it
 * (with its resume state and pages), prefill with a commit per chunk,
 * build, persist; then what the part held is freed for the next. */
int app_ingest_run_parts(struct ingest *g, int first, char *err, size_t errlen)
{
	int rc;

	for (g->part = first; g->part < g->plan.n_part; g->part++) {
		g->more_parts = g->part + 1 < g->plan.n_part;
		if ((rc = app_ingest_tokenize(g, err, errlen)) || (rc = stage_create_doc(g, err, errlen)) ||
		    (rc = app_ingest_prefill_alloc(g, err, errlen)) || (rc = app_ingest_finish(g, err, errlen)))
			return rc;
		g->ids[g->part] = g->doc.id;
		app_ingest_part_free(g);
	}
	return 0;
}

int app_ingest_parts(const struct app_opts *o, const char *path, app_ingest_progress_fn fn,
		     void *ud, int64_t **ids, int *n_ids, char *err, size_t errlen)
{
	struct ingest g = { .o = o, .path = path, .fn = fn, .ud = ud };
	enum history_kind kind = HISTORY_NONE;
	int rc;

	*ids = NULL;
	*n_ids = 0;
	if ((rc = app_ingest_extract(&g, err, errlen)))
		goto out;
	kind = g.x.n_page ? HISTORY_NONE : history_detect(path, g.x.text, g.x.len);
	if (kind != HISTORY_NONE) {
		rc = ingest_history(&g, kind, ids, n_ids, err, errlen);
		goto out;
	}
	if (o->conversation) {
		rc = sekv_errf(err, errlen, SEKV_EINVAL, "ingest: %s: --conversation: not a chat "
			       "history (ChatGPT conversations.json, JSONL of {role, content}, or a "
			       "'user:'/'assistant:' transcript)", path);
		goto out;
	}
	if ((rc = app_ingest_load(&g, err, errlen)) || (rc = stage_count(&g, err, errlen)) ||
	    (rc = app_ingest_plan(&g, err, errlen)))
		goto out;
	rc = app_ingest_run_parts(&g, 0, err, errlen);
	if (app_ingest_ids_dup(&g, ids, n_ids) && !rc)
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "ingest: out of memory");
out:
	if (rc)
		app_ingest_note_left(&g, err, errlen);
	app_ingest_free(&g);
	return rc;
}

int app_ingest(const struct app_opts *o, const char *path, app_ingest_progress_fn fn, void *ud,
	       int64_t *doc_id, char *err, size_t errlen)
{
	int64_t *ids = NULL;
	int n = 0;
	int rc = app_ingest_parts(o, path, fn, ud, &ids, &n, err, errlen);

	if (!rc)
		*doc_id = ids[0];
	free(ids);
	return rc;
}
