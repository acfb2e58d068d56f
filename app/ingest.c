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
 * as incomplete and app_ingest_resume continues exactly. Progress goes
 * through a callback (struct app_ingest_progress); nothing here keeps
 * static state.
 */
#include "app/app.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/extract.h"
#include "app/history.h"
#include "app/import.h"
#include "engine/clock.h"
#include "engine/err.h"
#include "engine/evidence.h"
#include "engine/fmt.h"
#include "engine/model.h"
#include "engine/sekv/sekv.h"
#include "engine/tokenizer.h"
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

/* ---- one ingest ------------------------------------------------------ */

struct ingest {
	const struct app_opts *o;
	const char *path;
	app_ingest_progress_fn fn;
	void *ud;
	struct model *m;
	struct tok *tk;
	const struct model_hparams *hp;
	struct chat_template ct;
	struct extract_doc x;       /* the whole document (resume: the stored one's
	                               text and page map) */
	int page_base;              /* pages before x's first: 0, or a resumed
	                               part's first page number - 1 */
	struct app_plan plan;
	int part;                   /* the part being stored, 0..plan.n_part-1 */
	int64_t *ids;               /* [plan.n_part] documents stored so far */
	double t_pages;             /* clk_now when extraction started */
	struct import_conv *chat;   /* a chat history's conversation (app/import.h), or NULL */
	int64_t session;            /* chat: the session holding its turns */
	char *chat_text;            /* chat: its rendering, the document's text (owned) */
	const char *text;           /* the part's text (in x.text, or chat_text), text_len bytes */
	size_t text_len;
	int32_t *tok_byte;          /* [tv.n] byte of each token in text, -1 outside
	                               (a PDF's, for the page in prefill progress) */
	struct chat_tokvec tv;      /* document tokens */
	struct store *st;
	struct store_doc doc;       /* the part's document; id 0 before it exists */
	struct model_state *ms;
	float *surprisal;           /* [n_tok] nats */
	uint16_t *glob_k[MODEL_MAX_LAYER]; /* [n_global][n_tok][n_head_kv][d_h] fp16 */
	uint16_t *glob_v[MODEL_MAX_LAYER];
	double prefill_s;
	double commit_s;            /* seconds spent committing chunks */
	double build_s;
	struct sekv_mem *mem;
	struct model_probe h2o_probe; /* every (global layer, query head) pair of the
	                                 prefill, mass [n][n_tok]; n = 0: none */
	float *h2o;                 /* [n_global][n_head_kv][n_tok] H2O's scores, or NULL */
	int pos_start;              /* first position this run prefills (resume: > 0) */
	float h_start;              /* surprisal of token pos_start, stored by the run
	                               that committed the chunk before it */
	int n_swa;                  /* sliding-window layers */
	int32_t swa_id[MODEL_MAX_LAYER];  /* [n_swa] their model layer ids */
	uint16_t *swa_k[MODEL_MAX_LAYER]; /* [n_swa] -> [swa_window][n_head_kv][d_h] fp16 */
	uint16_t *swa_v[MODEL_MAX_LAYER]; /* scratch: the rows each chunk commits */
};

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

static int stage_extract(struct ingest *g, char *err, size_t errlen)
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
 * the whole text's by a few tokens per cut: stage_tokenize checks again. */
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

/* What is stored: the whole text, its first --max-tokens, or parts. */
static int stage_plan(struct ingest *g, char *err, size_t errlen)
{
	const struct app_plan *pl = &g->plan;
	char e2[768];
	int rc = app_plan(&g->plan, &g->ct, g->tk, g->x.text, g->x.len, g->hp->n_ctx_train,
			  g->o->max_tokens, g->o->split, e2, sizeof e2);

	if (rc)
		return sekv_errf(err, errlen, rc, "%s: %s", g->path, e2);
	if (!(g->ids = calloc((size_t)pl->n_part, sizeof *g->ids)))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "ingest: out of memory");
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
static int stage_tokenize(struct ingest *g, char *err, size_t errlen)
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
		rc = chat_build_turn(&g->tv, &g->ct, g->tk, CHAT_START_STREAM, APP_DOC_PREAMBLE,
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
	if (!g->o->quiet && pt && g->plan.n_part > 1)
		app_errorf("ingest: %s: part %d/%d: bytes %zu-%zu, %d tokens, model %s\n", g->path,
			   g->part + 1, g->plan.n_part, pt->start, pt->end, g->tv.n, g->hp->arch);
	else if (!g->o->quiet)
		app_errorf("ingest: %s: %zu bytes, %d tokens, model %s\n", g->path, g->text_len,
			g->tv.n, g->hp->arch);
	return 0;
}

/* The part's document with its resume state and, for a PDF, its page
 * map, in one transaction: a crash leaves all three or none. */
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
		.rank_energy = o->rank_energy, .key_pre_rope = o->key_pre_rope,
		.static_share = o->static_share, .n_recent = o->n_recent,
		.n_probe = hp->n_global * hp->n_head <= MODEL_PROBE_MAX ? hp->n_global * hp->n_head : 0,
	};
	if (pt && app_part_pages(&g->x, pt->start, pt->end, &page0, &n_page, &start))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "ingest: out of memory");
	if ((rc = store_tx_begin(g->st, err, errlen)))
		goto out;
	if ((rc = store_doc_create(g->st, d, g->text, g->text_len, err, errlen)) ||
	    (rc = store_ingest_begin(g->st, d->id, &in, err, errlen)) ||
	    (n_page && (rc = store_doc_put_pages(g->st, d->id, page0, n_page, start,
						 (int64_t)g->text_len, err, errlen))) ||
	    (rc = store_tx_commit(g->st, err, errlen))) {
		store_tx_rollback(g->st);
		d->id = 0;
	} else if (!o->quiet) {
		/* said now, so an interrupted ingest's id is known */
		app_errorf("ingest: %s: document %lld (if interrupted: 'sekv ingest --resume %lld')\n",
			   g->path, (long long)d->id, (long long)d->id);
	}
out:
	free(start);
	return rc;
}

/* Probes every query head of every global layer during the prefill, for
 * H2O's accumulated attention (engine/kv_select.h): a model with more
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
static int prefill_alloc(struct ingest *g, char *err, size_t errlen)
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

/* The SeKV build's parameters from the options, at budget. */
static void mem_params(const struct app_opts *o, const struct model *m, double budget,
		       struct sekv_params *sp)
{
	sekv_default_params(sp);
	sp->alpha = o->alpha;
	sp->r_max = o->r_max;
	sp->r_use = o->r_max;
	sp->rank_energy = o->rank_energy;
	sp->key_pre_rope = o->key_pre_rope;
	sp->static_share = o->static_share;
	sp->rope_base = model_hparams(m)->rope_base_global;
	sp->n_rot = model_hparams(m)->n_rot;
	sp->budget = budget;
	sp->n_recent = o->n_recent;
	sp->n_threads = o->n_threads;
	sp->be = model_backend(m);
	sp->q_scale = model_hparams(m)->q_scale;
}

static int stage_build(struct ingest *g, char *err, size_t errlen)
{
	const struct model_hparams *hp = g->hp;
	const uint16_t *ck[MODEL_MAX_LAYER], *cv[MODEL_MAX_LAYER];
	struct sekv_params sp;

	mem_params(g->o, g->m, g->o->budget, &sp);
	for (int l = 0; l < hp->n_global; l++) {
		ck[l] = g->glob_k[l];
		cv[l] = g->glob_v[l];
	}
	double b0 = clk_now();
	int rc = sekv_build(&g->mem, &sp, g->tv.n, g->tv.ids, g->surprisal, hp->n_global,
			    hp->global_layer, hp->n_head, hp->n_head_kv, hp->d_head, ck, cv, err, errlen);
	g->build_s = clk_now() - b0;
	return rc;
}

int app_mem_rebuild(const struct app_opts *o, const struct model *m, int64_t doc_id, double budget,
		    char *err, size_t errlen)
{
	const struct model_hparams *hp = model_hparams(m);
	struct store *st = NULL;
	struct store_doc d;
	struct sekv_params sp;
	struct sekv_mem *mem = NULL;
	int32_t *tokens = NULL;
	float *surprisal = NULL;
	uint16_t *k[MODEL_MAX_LAYER] = { 0 }, *v[MODEL_MAX_LAYER] = { 0 };
	int64_t n_tok = 0;
	int rc;

	if ((rc = store_open(&st, o->db, err, errlen)) || (rc = store_doc_get(st, doc_id, &d, err, errlen)))
		goto out;
	if (strcmp(d.model_fp, hp->fingerprint) || d.n_layer_global != hp->n_global) {
		rc = sekv_errf(err, errlen, SEKV_EMISMATCH, "rebuild: document %lld: ingested with another model",
			       (long long)doc_id);
		goto out;
	}
	if ((rc = store_doc_get_tokens(st, doc_id, &tokens, &surprisal, &n_tok, err, errlen)))
		goto out;
	size_t n = (size_t)n_tok * hp->n_head_kv * hp->d_head;
	for (int l = 0; !rc && l < hp->n_global; l++) {
		if (!(k[l] = malloc(n * sizeof *k[l])) || !(v[l] = malloc(n * sizeof *v[l])))
			rc = sekv_errf(err, errlen, SEKV_ENOMEM, "rebuild: out of memory");
		else
			rc = store_doc_get_full_kv(st, doc_id, l, k[l], v[l], err, errlen);
	}
	mem_params(o, m, budget, &sp);
	if (!rc)
		rc = sekv_build(&mem, &sp, (int)n_tok, tokens, surprisal, hp->n_global, hp->global_layer,
				hp->n_head, hp->n_head_kv, hp->d_head, (const uint16_t *const *)k,
				(const uint16_t *const *)v, err, errlen);
	if (!rc)
		rc = store_doc_put_mem(st, doc_id, mem, budget, err, errlen);
out:
	for (int l = 0; l < MODEL_MAX_LAYER; l++) {
		free(k[l]);
		free(v[l]);
	}
	free(tokens);
	free(surprisal);
	sekv_mem_free(mem);
	store_close(st);
	return rc;
}

static void print_summary(const struct ingest *g)
{
	const struct sekv_mem *mem = g->mem;
	int n_tok = g->tv.n;

	app_errorf("ingest: prefill %.1fs (%.1f tokens/s%s), chunks committed in %.2fs, memory "
		   "built in %.1fs\n", g->prefill_s,
		   (n_tok - g->pos_start) / (g->prefill_s > 0 ? g->prefill_s : 1),
		   g->pos_start ? " in this run" : "", g->commit_s, g->build_s);
	/* the segmentation's note, when it has one, already names the spans */
	if (mem->note[0])
		app_errorf("ingest: segmentation: %s\n", mem->note);
	else
		app_errorf("ingest: %d spans (%d compressed), %d exact rows, alpha %.2f\n",
			   mem->n_span, mem->n_comp, mem->n_exact, mem->alpha_used);
	app_errorf("ingest: full KV %.1f MiB, device static %.1f MiB (%.1f%%), host factors %.1f MiB"
		" (%.2fx full KV), peak RSS %.0f MiB\n",
		mem->full_kv_bytes / 1048576.0, mem->static_bytes / 1048576.0,
		100.0 * mem->static_bytes / (double)mem->full_kv_bytes, mem->host_bytes / 1048576.0,
		mem->host_bytes / (double)(mem->full_kv_bytes ? mem->full_kv_bytes : 1),
		clk_peak_rss() / 1048576.0);
	if (mem->n_comp)
		app_errorf("ingest: factors keep %.1f%% of K and %.1f%% of V span energy (rank gate %.2f,"
			" at most %d components; %d of %d factors raw; keys factored %s RoPE)\n",
			100.0 * mem->kept_energy[0], 100.0 * mem->kept_energy[1], mem->rank_energy,
			mem->r_max, mem->n_raw, mem->n_layer * mem->n_comp * mem->n_head_kv * 2,
			mem->rope_base > 0 ? "before" : "after");
}

/* The memory and H2O's scores (and a chat history's session) in one
 * transaction: the document turns READY with all or with none. */
static int stage_persist(struct ingest *g, char *err, size_t errlen)
{
	const struct model_hparams *hp = g->hp;
	int rc;

	if ((rc = store_tx_begin(g->st, err, errlen)))
		return rc;
	if ((g->h2o && (rc = store_doc_put_h2o(g->st, g->doc.id, g->h2o, hp->n_global, hp->n_head_kv,
					       g->tv.n, err, errlen))) ||
	    (rc = store_doc_put_mem(g->st, g->doc.id, g->mem, g->o->budget, err, errlen)) ||
	    (g->chat && (rc = import_store_session(g->st, g->doc.id, app_kv_name(g->o->kv), g->chat,
						   &g->session, err, errlen))) ||
	    (rc = store_tx_commit(g->st, err, errlen))) {
		store_tx_rollback(g->st);
		return rc;
	}
	return 0;
}

/* What one part holds; the model, tokenizer, library and text stay. */
static void part_free(struct ingest *g)
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

static void ingest_free(struct ingest *g)
{
	part_free(g);
	store_close(g->st);
	tok_close(g->tk);
	model_close(g->m);
	extract_doc_free(&g->x);
	app_plan_free(&g->plan);
	free(g->ids);
}

/* Loads the model, its tokenizer and the prompt format. */
static int stage_load(struct ingest *g, char *err, size_t errlen)
{
	int rc;

	if ((rc = app_load(g->o, &g->m, &g->tk, err, errlen)))
		return rc;
	g->hp = model_hparams(g->m);
	if ((rc = chat_template_init(&g->ct, g->hp->arch, chat_format_of_gguf(model_gguf(g->m)),
				     g->tk, err, errlen)))
		return rc;
	if (g->hp->n_global <= 0)
		return sekv_errf(err, errlen, SEKV_EUNSUP, "ingest: %s: model has no global-attention layer",
				 g->o->model);
	return 0;
}

/* From the document row on: prefill (from pos_start), build, persist. */
static int ingest_finish(struct ingest *g, char *err, size_t errlen)
{
	int rc;

	if ((rc = stage_prefill(g, err, errlen)) || (rc = stage_build(g, err, errlen)) ||
	    (rc = stage_persist(g, err, errlen)))
		return rc;
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
 * it), and of a split document the parts stored before it and those
 * never started. */
static void note_left(struct ingest *g, char *err, size_t errlen)
{
	long long id = (long long)g->doc.id;
	int n_part = g->plan.n_part, done = g->part, next = done + (id > 0);

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
	if (done == 1)
		err_append(err, errlen, "; part 1 of %d is stored: document", n_part);
	else if (done > 1)
		err_append(err, errlen, "; parts 1-%d of %d are stored: documents", done, n_part);
	for (int i = 0; i < done; i++)
		err_append(err, errlen, " %lld%s", (long long)g->ids[i], i + 1 < done ? "," : "");
	if (next + 1 == n_part)
		err_append(err, errlen, "; part %d of %d was not started", n_part, n_part);
	else if (next < n_part)
		err_append(err, errlen, "; parts %d-%d of %d were not started", next + 1, n_part, n_part);
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

	if ((rc = stage_tokenize(&c, err, errlen)) || (rc = stage_create_doc(&c, err, errlen)) ||
	    (rc = prefill_alloc(&c, err, errlen)) || (rc = ingest_finish(&c, err, errlen)))
		note_left(&c, err, errlen);
	*doc = c.doc.id;
	*session = c.session;
	*n_tok = c.tv.n;
	c.m = NULL;
	c.tk = NULL;
	ingest_free(&c);
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

/* A chat history, read into g->x: every conversation --conversation picks
 * becomes a document and a session, listed at the end (*doc_id: the last
 * document). A conversation with no answer is left out. */
static int ingest_history(struct ingest *g, enum history_kind kind, int64_t *doc_id,
			  char *err, size_t errlen)
{
	struct history h;
	char **lines = NULL;
	int first = 0, last = -1, n_line = 0, rc;

	if (!(rc = history_parse(&h, kind, g->path, g->x.text, g->x.len, err, errlen)) &&
	    !(rc = history_select(&h, g->o->conversation, &first, &last, err, errlen)))
		rc = stage_load(g, err, errlen);
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
		if (doc > 0 && !rc)
			*doc_id = doc;
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

/* Every part, each its own document: tokenize, create it (with its
 * resume state and pages), prefill with a commit per chunk, build,
 * persist; then what the part held is freed for the next. */
static int ingest_parts(struct ingest *g, char *err, size_t errlen)
{
	int rc;

	for (g->part = 0; g->part < g->plan.n_part; g->part++) {
		if ((rc = stage_tokenize(g, err, errlen)) || (rc = stage_create_doc(g, err, errlen)) ||
		    (rc = prefill_alloc(g, err, errlen)) || (rc = ingest_finish(g, err, errlen)))
			return rc;
		g->ids[g->part] = g->doc.id;
		part_free(g);
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
	if ((rc = stage_extract(&g, err, errlen)))
		goto out;
	kind = g.x.n_page ? HISTORY_NONE : history_detect(path, g.x.text, g.x.len);
	if (kind != HISTORY_NONE) {
		int64_t last = 0;
		if ((rc = ingest_history(&g, kind, &last, err, errlen)))
			goto out;
		if (!(*ids = malloc(sizeof **ids))) {
			rc = sekv_errf(err, errlen, SEKV_ENOMEM, "ingest: out of memory");
			goto out;
		}
		**ids = last;
		*n_ids = 1;
		goto out;
	}
	if (o->conversation) {
		rc = sekv_errf(err, errlen, SEKV_EINVAL, "ingest: %s: --conversation: not a chat "
			       "history (ChatGPT conversations.json, JSONL of {role, content}, or a "
			       "'user:'/'assistant:' transcript)", path);
		goto out;
	}
	if ((rc = stage_load(&g, err, errlen)) || (rc = stage_count(&g, err, errlen)) ||
	    (rc = stage_plan(&g, err, errlen)) || (rc = ingest_parts(&g, err, errlen)))
		goto out;
	*ids = g.ids;
	*n_ids = g.plan.n_part;
	g.ids = NULL;
out:
	if (rc)
		note_left(&g, err, errlen);
	ingest_free(&g);
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

/* ---- resume ---------------------------------------------------------- */

/* The stored document's text as the whole of g->x, planned as one part,
 * with its page map when it has one (page_base puts the map's first page
 * at its number, for prefill progress). */
static int resume_text(struct ingest *g, char *err, size_t errlen)
{
	int64_t *start = NULL, text_len = 0;
	int page0 = 0, n_page = 0;
	int rc = store_doc_text_dup(g->st, g->doc.id, &g->x.text, &g->x.len, err, errlen);

	if (rc)
		return rc;
	g->x.encoding = "UTF-8";
	if (!(g->plan.part = calloc(1, sizeof *g->plan.part)))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "ingest: out of memory");
	g->plan.n_part = 1;
	g->plan.part[0].end = g->x.len;
	rc = store_doc_get_pages(g->st, g->doc.id, &page0, &n_page, &start, &text_len, err, errlen);
	if (rc == SEKV_ENOTFOUND)
		return 0;
	if (rc)
		return rc;
	int64_t *s = text_len == (int64_t)g->x.len ? realloc(start, ((size_t)n_page + 1) * sizeof *s) : NULL;
	if (!s) {
		free(start);
		return text_len == (int64_t)g->x.len ?
			sekv_errf(err, errlen, SEKV_ENOMEM, "ingest: out of memory") :
			sekv_errf(err, errlen, SEKV_EFORMAT, "ingest --resume: document %lld: page map "
				  "of %lld bytes, text of %zu", (long long)g->doc.id, (long long)text_len,
				  g->x.len);
	}
	s[n_page] = (int64_t)g->x.len;
	g->x.page_start = s;
	g->x.n_page = n_page;
	g->page_base = page0 - 1;
	return 0;
}


/* The incomplete document doc, its resume state (the settings it was
 * started with go into *ro, which g->o points at) and its text. */
static int resume_open(struct ingest *g, struct app_opts *ro, int64_t doc, struct store_ingest *in,
		       float **probe, char *err, size_t errlen)
{
	struct store_doc *d = &g->doc;
	int rc;

	if ((rc = store_open(&g->st, ro->db, err, errlen)))
		return rc;
	rc = store_doc_get(g->st, doc, d, err, errlen);
	if (rc == SEKV_ENOTFOUND)
		return sekv_errf(err, errlen, rc, "ingest --resume: document %lld is not in %s (see "
				 "'sekv ls')", (long long)doc, ro->db);
	if (rc)
		return rc;
	g->path = d->source;
	if (d->state == STORE_DOC_READY)
		return sekv_errf(err, errlen, SEKV_EINVAL, "ingest --resume: document %lld is complete: "
				 "nothing to resume", (long long)doc);
	rc = store_ingest_get(g->st, doc, in, probe, err, errlen);
	if (rc == SEKV_ENOTFOUND)
		return sekv_errf(err, errlen, rc, "ingest --resume: document %lld has no resume state "
				 "(its ingest began before sekv kept one): delete it ('sekv rm %lld') "
				 "and ingest the file again", (long long)doc, (long long)doc);
	if (rc)
		return rc;
	ro->n_batch = in->n_batch;
	ro->alpha = in->alpha;
	ro->rank_energy = in->rank_energy;
	ro->key_pre_rope = in->key_pre_rope;
	ro->static_share = in->static_share;
	ro->n_recent = in->n_recent;
	ro->budget = d->budget;
	ro->r_max = d->r_max;
	g->pos_start = (int)in->pos_end;
	g->h_start = in->h_next;
	if (!ro->quiet)
		app_errorf("ingest: resuming document %lld (%s) at %lld of %lld tokens\n", (long long)doc,
			   d->title, (long long)in->pos_end, (long long)in->n_tok_total);
	return resume_text(g, err, errlen);
}

/* The document must be tokenized as before, by the same model. */
static int resume_check(struct ingest *g, const struct store_ingest *in, char *err, size_t errlen)
{
	const struct store_doc *d = &g->doc;

	if (strcmp(d->model_fp, g->hp->fingerprint) || d->n_layer_global != g->hp->n_global ||
	    d->n_head_kv != g->hp->n_head_kv || d->d_h != g->hp->d_head)
		return sekv_errf(err, errlen, SEKV_EMISMATCH, "ingest --resume: document %lld was "
				 "begun with model %s, not %s: give it with -m", (long long)d->id,
				 d->model_name, g->o->model);
	if (d->prompt_format[0] && strcmp(d->prompt_format, chat_format_name(g->ct.fmt)))
		return sekv_errf(err, errlen, SEKV_EMISMATCH, "ingest --resume: document %lld: prompt "
				 "format %s, the model gives %s", (long long)d->id, d->prompt_format,
				 chat_format_name(g->ct.fmt));
	if (g->tv.n != in->n_tok_total)
		return sekv_errf(err, errlen, SEKV_EMISMATCH, "ingest --resume: document %lld: its text "
				 "now makes %d tokens, it made %lld (another tokenizer?)",
				 (long long)d->id, g->tv.n, (long long)in->n_tok_total);
	return 0;
}

/* The sliding-window rows at pos_start into the state's rings. */
static int restore_swa(struct ingest *g, char *err, size_t errlen)
{
	int n_layer = 0, n_row = 0, rc;
	int32_t *lid = NULL;
	uint16_t **k = NULL, **v = NULL;

	if ((rc = store_doc_get_swa(g->st, g->doc.id, &n_layer, &lid, &n_row, &k, &v, err, errlen)))
		return rc;
	int want = g->hp->swa_window < g->pos_start ? g->hp->swa_window : g->pos_start;
	if (n_layer != g->n_swa || n_row != want)
		rc = sekv_errf(err, errlen, SEKV_EFORMAT, "ingest --resume: document %lld: %d "
			       "sliding-window layers of %d rows stored, expected %d of %d",
			       (long long)g->doc.id, n_layer, n_row, g->n_swa, want);
	for (int i = 0; !rc && i < n_layer; i++) {
		if (lid[i] != g->swa_id[i])
			rc = sekv_errf(err, errlen, SEKV_EFORMAT, "ingest --resume: document %lld: "
				       "sliding-window row %d is of layer %d, expected %d",
				       (long long)g->doc.id, i, lid[i], g->swa_id[i]);
		else if ((rc = model_state_set_rows(g->ms, lid[i], g->pos_start - n_row, n_row, k[i], v[i])))
			sekv_errf(err, errlen, rc, "ingest --resume: sliding-window layer %d: rows not "
				  "restored", lid[i]);
	}
	store_swa_free(n_layer, lid, k, v);
	return rc;
}

/* Puts the state where the interrupted run was after its last committed
 * chunk: the stored tokens (checked), surprisal, global rows, sliding-
 * window rows and H2O's probe mass [n_probe][pos_start]. */
static int restore_state(struct ingest *g, const float *probe, char *err, size_t errlen)
{
	const struct model_hparams *hp = g->hp;
	int32_t *tokens = NULL;
	float *h = NULL;
	int64_t n = 0;
	int R = g->pos_start, rc;

	if (R == 0)
		return 0;
	if ((rc = store_doc_get_tokens(g->st, g->doc.id, &tokens, &h, &n, err, errlen)))
		return rc;
	if (n != R || memcmp(tokens, g->tv.ids, (size_t)R * sizeof *tokens))
		rc = sekv_errf(err, errlen, SEKV_EMISMATCH, "ingest --resume: document %lld: the stored "
			       "tokens differ from its text's", (long long)g->doc.id);
	else
		memcpy(g->surprisal, h, (size_t)R * sizeof *h);
	for (int l = 0; !rc && l < hp->n_global; l++)
		if (!(rc = store_doc_get_full_kv(g->st, g->doc.id, l, g->glob_k[l], g->glob_v[l],
						 err, errlen)) &&
		    (rc = model_state_set_rows(g->ms, hp->global_layer[l], 0, R, g->glob_k[l],
					       g->glob_v[l])))
			sekv_errf(err, errlen, rc, "ingest --resume: global layer %d: rows not restored",
				  hp->global_layer[l]);
	if (!rc)
		rc = restore_swa(g, err, errlen);
	for (int i = 0; !rc && probe && i < g->h2o_probe.n; i++)
		memcpy(g->h2o_probe.mass + (size_t)i * g->tv.n, probe + (size_t)i * R,
		       (size_t)R * sizeof *probe);
	if (!rc && (rc = model_state_resume(g->ms, R)))
		sekv_errf(err, errlen, rc, "ingest --resume: state not resumed at %d", R);
	free(tokens);
	free(h);
	return rc;
}

/* A conversation imported from a chat history (its source says which)
 * renders again from its file into *ic (g->chat then points at it, g->path
 * at the file in path [cap]); the token check of restore_state catches a
 * file changed since. 0 also for any other document. */
static int resume_chat(struct ingest *g, struct history *h, struct import_conv *ic, char *path,
		       size_t cap, char *err, size_t errlen)
{
	int index, rc;

	if (!import_source_parse(g->doc.source, path, cap, &index))
		return 0;
	rc = import_conv_reload(path, index, g->doc.title, h, ic, err, errlen);
	if (rc) {
		size_t n = strnlen(err, errlen);
		snprintf(err + n, errlen - n, " (ingest --resume: document %lld is conversation %d of "
			 "this chat history: delete it with 'sekv rm %lld' and ingest the file again)",
			 (long long)g->doc.id, index, (long long)g->doc.id);
		return rc;
	}
	g->chat = ic;
	g->path = path;
	return 0;
}

int app_ingest_resume(const struct app_opts *o, int64_t doc_id, app_ingest_progress_fn fn,
		      void *ud, char *err, size_t errlen)
{
	struct app_opts ro = *o;
	struct ingest g = { .o = &ro, .fn = fn, .ud = ud };
	struct store_ingest in;
	struct history h = { 0 };
	struct import_conv ic = { 0 };
	char path[sizeof g.doc.source];
	float *probe = NULL;
	double t0;
	int rc;

	if ((rc = resume_open(&g, &ro, doc_id, &in, &probe, err, errlen)) ||
	    (rc = resume_chat(&g, &h, &ic, path, sizeof path, err, errlen)) ||
	    (rc = stage_load(&g, err, errlen)) || (rc = stage_tokenize(&g, err, errlen)) ||
	    (rc = resume_check(&g, &in, err, errlen)) || (rc = prefill_alloc(&g, err, errlen)))
		goto out;
	if (in.n_probe != g.h2o_probe.n) {
		rc = sekv_errf(err, errlen, SEKV_EFORMAT, "ingest --resume: document %lld: %d probe "
			       "rows stored, the model has %d", (long long)doc_id, in.n_probe,
			       g.h2o_probe.n);
		goto out;
	}
	t0 = clk_now();
	if ((rc = restore_state(&g, probe, err, errlen)))
		goto out;
	if (!ro.quiet)
		app_errorf("ingest: state at token %d restored in %.3fs (model loading apart)\n",
			   g.pos_start, clk_now() - t0);
	rc = ingest_finish(&g, err, errlen);
out:
	free(probe);
	ingest_free(&g);
	import_conv_free(&ic);
	history_free(&h);
	return rc;
}
