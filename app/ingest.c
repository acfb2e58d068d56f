/* ingest.c - one document from file to durable SeKV memory, in stages.
 *
 * Flow (DESIGN.md section 2), one function per stage: extract (by input
 * kind) -> count (refuse a document longer than the model's context before
 * any long work) -> tokenize (the one turn builder: BOS, user turn,
 * preamble, text) -> create the document -> prefill in chunks, each chunk
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

/* ---- input kinds ---------------------------------------------------- */

/* An extractor: detect says whether path is of its kind (the last entry
 * takes anything); extract fills a malloc'ed UTF-8 text as
 * extract_text_file does. PDF and chat histories plug in here. */
struct ingest_kind {
	const char *name;
	int (*detect)(const char *path);
	int (*extract)(const char *path, char **text, size_t *len, size_t *n_replaced,
		       char *err, size_t errlen);
};

static int detect_any(const char *path)
{
	(void)path;
	return 1;
}

static const struct ingest_kind ingest_kinds[] = {
	{ "text", detect_any, extract_text_file }, /* plain text and Markdown */
};

static const struct ingest_kind *kind_of(const char *path)
{
	size_t n = sizeof ingest_kinds / sizeof ingest_kinds[0];
	for (size_t i = 0; i + 1 < n; i++)
		if (ingest_kinds[i].detect(path))
			return &ingest_kinds[i];
	return &ingest_kinds[n - 1];
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
	char *text;
	size_t text_len;
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
					 rate > 0 ? (total - done) / rate : 0, final };
	g->fn(g->ud, &p);
}

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}

static int stage_extract(struct ingest *g, char *err, size_t errlen)
{
	size_t n_bad = 0;
	int rc = kind_of(g->path)->extract(g->path, &g->text, &g->text_len, &n_bad, err, errlen);
	if (rc)
		return rc;
	if (n_bad && !g->o->quiet)
		app_errorf("ingest: %s: %zu invalid UTF-8 bytes replaced by U+FFFD\n", g->path, n_bad);
	report(g, "extract", (long long)g->text_len, (long long)g->text_len, clk_now(), 1);
	return 0;
}

/* Counts tokens piece by piece (cut after a newline) and stops as soon as
 * the count passes the model's context, so a document far too long is
 * refused in seconds. The count of a text cut in pieces can differ from
 * the whole text's by a few tokens per cut: stage_tokenize checks again. */
static int stage_count(struct ingest *g, char *err, size_t errlen)
{
	long long n_ctx = g->hp->n_ctx_train, count = 0;
	size_t pos = 0;
	double t0 = clk_now();

	if (n_ctx <= 0 || g->text_len <= INGEST_COUNT_PIECE)
		return 0;
	while (pos < g->text_len && count <= n_ctx) {
		size_t end = pos + INGEST_COUNT_PIECE < g->text_len ? pos + INGEST_COUNT_PIECE : g->text_len;
		const char *nl = end < g->text_len ? memrchr(g->text + pos, '\n', end - pos) : NULL;
		if (nl)
			end = (size_t)(nl - g->text) + 1;
		report(g, "count", (long long)pos, (long long)g->text_len, t0, 0);
		int n = tok_encode(g->tk, g->text + pos, end - pos, 0, NULL, 0, err, errlen);
		if (n < 0)
			return n;
		count += n;
		pos = end;
	}
	report(g, "count", (long long)pos, (long long)g->text_len, t0, 1);
	if (count <= n_ctx)
		return 0;
	char seen[32], all[32];
	fmt_bytes((size_t)pos, seen, sizeof seen);
	fmt_bytes((size_t)g->text_len, all, sizeof all);
	return sekv_errf(err, errlen, SEKV_EINVAL,
			 "%s: document is longer than the model's context: more than %lld tokens "
			 "in the first %s of %s (about %.0f tokens in all); context %lld tokens "
			 "(splitting a long document, --max-tokens/--split, comes with the library)",
			 g->path, n_ctx, seen, all, (double)count * (double)g->text_len / (double)pos, n_ctx);
}

static int stage_tokenize(struct ingest *g, char *err, size_t errlen)
{
	int rc = chat_build_turn(&g->tv, &g->ct, g->tk, CHAT_START_STREAM, APP_DOC_PREAMBLE,
				 g->text, g->text_len, 0, NULL, err, errlen);
	if (rc)
		return rc;
	int n_ctx = g->hp->n_ctx_train;
	if (n_ctx > 0 && g->tv.n > n_ctx)
		return sekv_errf(err, errlen, SEKV_EINVAL,
				 "%s: document is longer than the model's context: %d tokens; "
				 "context %d tokens (splitting a long document, --max-tokens/--split, "
				 "comes with the library)", g->path, g->tv.n, n_ctx);
	if (!g->o->quiet)
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

	if ((rc = store_open(&g->st, o->db, err, errlen)))
		return rc;
	memset(d, 0, sizeof *d);
	snprintf(d->title, sizeof d->title, "%s", o->title ? o->title : base_name(g->path));
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

static void ingest_free(struct ingest *g)
{
	for (int l = 0; l < MODEL_MAX_LAYER; l++) {
		free(g->glob_k[l]);
		free(g->glob_v[l]);
	}
	free(g->surprisal);
	free(g->h2o_probe.mass);
	free(g->h2o);
	sekv_mem_free(g->mem);
	model_state_free(g->ms);
	store_close(g->st);
	chat_tokvec_free(&g->tv);
	tok_close(g->tk);
	model_close(g->m);
	free(g->text);
}

int app_ingest(const struct app_opts *o, const char *path, app_ingest_progress_fn fn, void *ud,
	       int64_t *doc_id, char *err, size_t errlen)
{
	struct ingest g = { .o = o, .path = path, .fn = fn, .ud = ud };
	int rc;

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
	if ((rc = stage_count(&g, err, errlen)) || (rc = stage_tokenize(&g, err, errlen)) ||
	    (rc = stage_create_doc(&g, err, errlen)) || (rc = stage_prefill(&g, err, errlen)) ||
	    (rc = stage_swa(&g, err, errlen)) || (rc = stage_build(&g, err, errlen)) ||
	    (rc = stage_persist(&g, err, errlen)))
		goto out;
	if (!o->quiet)
		print_summary(&g);
	*doc_id = g.doc.id;
out:
	ingest_free(&g);
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
	if (strcmp(p->stage, "prefill") == 0)
		fprintf(stderr, "%sprefill %lld/%lld tokens  %.1f tokens/s  ETA %.0fs%s",
			mt->tty ? "\r\033[K" : "", p->done, p->total, p->rate, p->eta_s,
			mt->tty && !p->final ? "" : "\n");
	else
		fprintf(stderr, "%scounting tokens %lld/%lld KiB%s", mt->tty ? "\r\033[K" : "",
			p->done >> 10, p->total >> 10, mt->tty && !p->final ? "" : "\n");
}
