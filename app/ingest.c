/* ingest.c - one document from file to durable SeKV memory, in stages.
 *
 * Flow (DESIGN.md section 2), one function per stage: extract (PDF or
 * text, app/extract.h) -> count (refuse a document longer than the model's
 * context before any long work) -> plan (the whole text, its first
 * --max-tokens, or --split parts: app/ingest_plan.c) -> per part: tokenize
 * (the one turn builder: BOS, user turn, preamble, text) -> create the
 * document with its page map -> prefill in chunks, each chunk
 * persisted in its own transaction, the global layers' attention probed
 * for H2O's scores -> sliding-window rows -> SeKV build -> memory and
 * scores persisted together, document marked ready. A crash leaves a document in
 * state "prefill" that `sekv ls` shows as incomplete. Progress goes through
 * a callback (struct app_ingest_progress); nothing here keeps static state.
 */
#include "app/app.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/extract.h"
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
	struct extract_doc x;       /* the whole document */
	struct app_plan plan;
	int part;                   /* the part being stored, 0..plan.n_part-1 */
	int64_t *ids;               /* [plan.n_part] documents stored so far */
	double t_pages;             /* clk_now when extraction started */
	const char *text;           /* the part's text (in x.text), text_len bytes */
	size_t text_len;
	int32_t *tok_byte;          /* [tv.n] byte of each token in text, -1 outside
	                               (a PDF's, for the page in prefill progress) */
	struct chat_tokvec tv;      /* document tokens */
	struct store *st;
	struct store_doc doc;
	struct model_state *ms;
	float *surprisal;           /* [n_tok] nats */
	uint16_t *glob_k[MODEL_MAX_LAYER]; /* [n_global][n_tok][n_head_kv][d_h] fp16 */
	uint16_t *glob_v[MODEL_MAX_LAYER];
	double prefill_s;
	double build_s;
	struct sekv_mem *mem;
	struct model_probe h2o_probe; /* every (global layer, query head) pair of the
	                                 prefill, mass [n][n_tok]; n = 0: none */
	float *h2o;                 /* [n_global][n_head_kv][n_tok] H2O's scores, or NULL */
};

static void report(struct ingest *g, const char *stage, long long done, long long total,
		   double t0, int final)
{
	if (!g->fn)
		return;
	double el = clk_now() - t0, rate = el > 0 ? done / el : 0;
	struct app_ingest_progress p = { stage, g->path, done, total, rate,
					 rate > 0 ? (total - done) / rate : 0, final, 0, 0 };
	if (g->tok_byte && !strcmp(stage, "prefill") && done > 0) {
		long long i = done - 1;
		while (i > 0 && g->tok_byte[i] < 0)
			i--;
		int64_t at = (int64_t)(g->text - g->x.text) + (g->tok_byte[i] > 0 ? g->tok_byte[i] : 0);
		p.page = extract_page_of(g->x.page_start, g->x.n_page, at) + 1;
		p.n_page = g->x.n_page;
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

static int stage_tokenize(struct ingest *g, char *err, size_t errlen)
{
	const struct app_part *pt = &g->plan.part[g->part];

	g->text = g->x.text + pt->start;
	g->text_len = pt->end - pt->start;
	int rc = chat_build_turn(&g->tv, &g->ct, g->tk, CHAT_START_STREAM, APP_DOC_PREAMBLE,
				 g->text, g->text_len, 0, NULL, err, errlen);
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
	if (!g->o->quiet && g->plan.n_part > 1)
		app_errorf("ingest: %s: part %d/%d: bytes %zu-%zu, %d tokens, model %s\n", g->path,
			   g->part + 1, g->plan.n_part, pt->start, pt->end, g->tv.n, g->hp->arch);
	else if (!g->o->quiet)
		app_errorf("ingest: %s: %zu bytes, %d tokens, model %s\n", g->path, g->text_len,
			g->tv.n, g->hp->arch);
	return 0;
}

static int stage_create_doc(struct ingest *g, char *err, size_t errlen)
{
	const struct app_opts *o = g->o;
	const struct model_hparams *hp = g->hp;
	struct store_doc *d = &g->doc;
	int rc;

	if (!g->st && (rc = store_open(&g->st, o->db, err, errlen)))
		return rc;
	memset(d, 0, sizeof *d);
	const char *title = o->title ? o->title : base_name(g->path);
	if (g->plan.n_part > 1)
		snprintf(d->title, sizeof d->title, "%.200s (part %d/%d)", title, g->part + 1, g->plan.n_part);
	else
		snprintf(d->title, sizeof d->title, "%s", title);
	char *abs = realpath(g->path, NULL);
	snprintf(d->source, sizeof d->source, "%s", abs ? abs : g->path);
	free(abs);
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
	return store_doc_create(g->st, d, g->text, g->text_len, err, errlen);
}

/* The document row and, for a PDF, the page map of its part, together. */
static int stage_create_doc_pages(struct ingest *g, char *err, size_t errlen)
{
	const struct app_part *pt = &g->plan.part[g->part];
	int64_t *start = NULL;
	int page0 = 0, n_page = 0, rc;

	if (!g->st && (rc = store_open(&g->st, g->o->db, err, errlen)))
		return rc;
	if (app_part_pages(&g->x, pt->start, pt->end, &page0, &n_page, &start))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "ingest: out of memory");
	if ((rc = store_tx_begin(g->st, err, errlen)))
		goto out;
	if ((rc = stage_create_doc(g, err, errlen)) ||
	    (n_page && (rc = store_doc_put_pages(g->st, g->doc.id, page0, n_page, start,
						 (int64_t)g->text_len, err, errlen))) ||
	    (rc = store_tx_commit(g->st, err, errlen)))
		store_tx_rollback(g->st);
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

/* Prefills in chunks of --batch, keeping surprisal and host copies of the
 * global layers' rows (persisted per chunk, then the SeKV build's input)
 * and H2O's scores. */
static int stage_prefill(struct ingest *g, char *err, size_t errlen)
{
	const struct model_hparams *hp = g->hp;
	int n_tok = g->tv.n, n_batch = g->o->n_batch, rc;
	size_t row = (size_t)hp->n_head_kv * hp->d_head;
	const uint16_t *ck[MODEL_MAX_LAYER], *cv[MODEL_MAX_LAYER];

	if ((rc = model_state_new(&g->ms, g->m, n_tok, n_batch, 1, err, errlen)))
		return rc;
	int ok = (g->surprisal = malloc((size_t)n_tok * sizeof *g->surprisal)) != NULL;
	for (int l = 0; l < hp->n_global; l++) {
		g->glob_k[l] = malloc((size_t)n_tok * row * sizeof(uint16_t));
		g->glob_v[l] = malloc((size_t)n_tok * row * sizeof(uint16_t));
		ok = ok && g->glob_k[l] && g->glob_v[l];
	}
	if (!ok)
		return sekv_errf(err, errlen, SEKV_ENOMEM, "ingest: out of memory");
	if ((rc = h2o_probe_start(g, err, errlen)))
		return rc;
	double t0 = clk_now();
	for (int pos = 0; pos < n_tok; pos += n_batch) {
		int n = n_tok - pos < n_batch ? n_tok - pos : n_batch;
		double c0 = clk_now();
		if ((rc = model_prefill(g->m, g->ms, g->tv.ids + pos, n, g->surprisal + pos, err, errlen)))
			return rc;
		double dt = clk_now() - c0;
		g->prefill_s += dt;
		for (int l = 0; l < hp->n_global; l++) {
			ck[l] = g->glob_k[l] + (size_t)pos * row;
			cv[l] = g->glob_v[l] + (size_t)pos * row;
			if ((rc = model_state_get_rows(g->ms, hp->global_layer[l], pos, n,
						       g->glob_k[l] + (size_t)pos * row,
						       g->glob_v[l] + (size_t)pos * row)))
				return sekv_errf(err, errlen, rc, "ingest: global layer %d: rows %d..%d not held",
						 hp->global_layer[l], pos, pos + n);
		}
		if ((rc = store_doc_put_chunk(g->st, g->doc.id, pos, n, g->tv.ids + pos, g->surprisal + pos,
					      ck, cv, dt, err, errlen)))
			return rc;
		report(g, "prefill", pos + n, n_tok, t0, pos + n == n_tok);
	}
	return h2o_scores(g, err, errlen);
}

/* The last `window` rows of every sliding-window layer, persisted. */
static int stage_swa(struct ingest *g, char *err, size_t errlen)
{
	const struct model_hparams *hp = g->hp;
	int n_tok = g->tv.n, n_swa = hp->n_layer - hp->n_global, rc = 0;
	int n_row = hp->swa_window < n_tok ? hp->swa_window : n_tok;
	size_t bytes = model_kv_bytes(n_row, 1, hp->n_head_kv, hp->d_head) / 2;
	uint16_t **k = calloc((size_t)n_swa + 1, sizeof *k);
	uint16_t **v = calloc((size_t)n_swa + 1, sizeof *v);
	int32_t *id = calloc((size_t)n_swa + 1, sizeof *id);

	if (!k || !v || !id)
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "ingest: out of memory");
	for (int l = 0, i = 0; !rc && l < hp->n_layer; l++) {
		if (hp->is_global[l])
			continue;
		id[i] = l;
		k[i] = malloc(bytes);
		v[i] = malloc(bytes);
		if (!k[i] || !v[i])
			rc = sekv_errf(err, errlen, SEKV_ENOMEM, "ingest: out of memory");
		else if ((rc = model_state_get_rows(g->ms, l, n_tok - n_row, n_row, k[i], v[i])))
			sekv_errf(err, errlen, rc, "ingest: sliding-window layer %d: last %d rows not held", l, n_row);
		i++;
	}
	if (!rc)
		rc = store_doc_put_swa(g->st, g->doc.id, n_swa, id, n_row,
				       (const uint16_t *const *)k, (const uint16_t *const *)v, err, errlen);
	for (int i = 0; k && v && i < n_swa; i++) {
		free(k[i]);
		free(v[i]);
	}
	free(k);
	free(v);
	free(id);
	return rc;
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

	app_errorf("ingest: prefill %.1fs (%.1f tokens/s), memory built in %.1fs\n",
		g->prefill_s, n_tok / (g->prefill_s > 0 ? g->prefill_s : 1), g->build_s);
	app_errorf("ingest: %d spans (%d compressed), %d exact rows, alpha %.2f%s%s\n",
		mem->n_span, mem->n_comp, mem->n_exact, mem->alpha_used,
		mem->note[0] ? ": " : "", mem->note);
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

/* The memory and H2O's scores in one transaction: the document turns
 * READY with both or with neither. */
static int stage_persist(struct ingest *g, char *err, size_t errlen)
{
	const struct model_hparams *hp = g->hp;
	int rc;

	if ((rc = store_tx_begin(g->st, err, errlen)))
		return rc;
	if ((g->h2o && (rc = store_doc_put_h2o(g->st, g->doc.id, g->h2o, hp->n_global, hp->n_head_kv,
					       g->tv.n, err, errlen))) ||
	    (rc = store_doc_put_mem(g->st, g->doc.id, g->mem, g->o->budget, err, errlen)) ||
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
		g->glob_k[l] = g->glob_v[l] = NULL;
	}
	free(g->surprisal);
	free(g->h2o_probe.mass);
	free(g->h2o);
	free(g->tok_byte);
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
	g->prefill_s = g->build_s = 0;
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

/* Every part: tokenize, create with its pages, prefill, persist, build. */
static int ingest_parts(struct ingest *g, char *err, size_t errlen)
{
	int rc;

	for (g->part = 0; g->part < g->plan.n_part; g->part++) {
		if ((rc = stage_tokenize(g, err, errlen)) || (rc = stage_create_doc_pages(g, err, errlen)) ||
		    (rc = stage_prefill(g, err, errlen)) || (rc = stage_swa(g, err, errlen)) ||
		    (rc = stage_build(g, err, errlen)) || (rc = stage_persist(g, err, errlen)))
			return rc;
		g->ids[g->part] = g->doc.id;
		if (!g->o->quiet)
			print_summary(g);
		part_free(g);
	}
	return 0;
}

int app_ingest_parts(const struct app_opts *o, const char *path, app_ingest_progress_fn fn,
		     void *ud, int64_t **ids, int *n_ids, char *err, size_t errlen)
{
	struct ingest g = { .o = o, .path = path, .fn = fn, .ud = ud };
	int rc;

	*ids = NULL;
	*n_ids = 0;
	if ((rc = stage_extract(&g, err, errlen)) || (rc = app_load(o, &g.m, &g.tk, err, errlen)))
		goto out;
	g.hp = model_hparams(g.m);
	if ((rc = chat_template_init(&g.ct, g.hp->arch, chat_format_of_gguf(model_gguf(g.m)),
				     g.tk, err, errlen)))
		goto out;
	if (g.hp->n_global <= 0) {
		rc = sekv_errf(err, errlen, SEKV_EUNSUP, "ingest: %s: model has no global-attention layer", o->model);
		goto out;
	}
	if ((rc = stage_count(&g, err, errlen)) || (rc = stage_plan(&g, err, errlen)) ||
	    (rc = ingest_parts(&g, err, errlen)))
		goto out;
	*ids = g.ids;
	*n_ids = g.plan.n_part;
	g.ids = NULL;
out:
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

void app_ingest_meter_init(struct app_ingest_meter *mt)
{
	memset(mt, 0, sizeof *mt);
	mt->last_tenth = -1;
	mt->tty = isatty(2);
}

void app_ingest_print(void *ud, const struct app_ingest_progress *p)
{
	struct app_ingest_meter *mt = ud;
	double now = clk_now();
	long long total = p->total > 0 ? p->total : 1;
	int tenth = (int)(p->done * 10 / total);

	if (strcmp(p->stage, "extract") == 0) {
		char sz[32];
		fmt_bytes((size_t)p->done, sz, sizeof sz);
		app_errorf("ingest: %s: %s of text\n", p->path, sz);
		return;
	}
	if (strcmp(p->stage, mt->stage) != 0) {
		snprintf(mt->stage, sizeof mt->stage, "%s", p->stage);
		mt->last_tenth = -1;
		mt->last = 0;
	}
	/* a terminal gets a live line; a log gets a line per tenth */
	if (!p->final && (mt->tty ? now - mt->last < 0.5 : tenth == mt->last_tenth))
		return;
	mt->last_tenth = tenth;
	mt->last = now;
	if (strcmp(p->stage, "prefill") == 0 && p->n_page)
		fprintf(stderr, "%sprefill %lld/%lld tokens (page %d of %d)  %.1f tokens/s  ETA %.0fs%s",
			mt->tty ? "\r\033[K" : "", p->done, p->total, p->page, p->n_page, p->rate, p->eta_s,
			mt->tty && !p->final ? "" : "\n");
	else if (strcmp(p->stage, "prefill") == 0)
		fprintf(stderr, "%sprefill %lld/%lld tokens  %.1f tokens/s  ETA %.0fs%s",
			mt->tty ? "\r\033[K" : "", p->done, p->total, p->rate, p->eta_s,
			mt->tty && !p->final ? "" : "\n");
	else if (strcmp(p->stage, "pages") == 0)
		fprintf(stderr, "%sPDF page %lld/%lld  %.1f pages/s  ETA %.0fs%s", mt->tty ? "\r\033[K" : "",
			p->done, p->total, p->rate, p->eta_s, mt->tty && !p->final ? "" : "\n");
	else
		fprintf(stderr, "%scounting tokens %lld/%lld KiB%s", mt->tty ? "\r\033[K" : "",
			p->done >> 10, p->total >> 10, mt->tty && !p->final ? "" : "\n");
}
