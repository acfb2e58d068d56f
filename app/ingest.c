/* ingest.c - one document from file to durable SeKV memory, in stages.
 *
 * Flow (DESIGN.md section 2), one function per stage: extract (by input
 * kind) -> count (refuse a document longer than the model's context before
 * any long work) -> tokenize (the one turn builder: BOS, user turn,
 * preamble, text) -> create the document -> prefill in chunks, each chunk
 * committed in its own transaction with the sliding-window rows and what
 * a resume needs, the global layers' attention probed for H2O's scores ->
 * SeKV build -> memory and scores persisted together, document marked
 * ready. A chat history (app/history.h) becomes one such document per
 * conversation, its turns rendered by app/import.c, and a session of them
 * stored with the memory. A crash leaves a document in state "prefill"
 * that `sekv ls` shows as incomplete and app_ingest_resume continues
 * exactly. Progress goes through a callback (struct app_ingest_progress);
 * nothing here keeps static state.
 */
#include "app/app.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/extract.h"
#include "app/history.h"
#include "app/import.h"
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
 * extract_text_file does. PDF plugs in here; chat histories are read
 * from the extracted text (app_ingest, ingest_history). */
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
	struct import_conv *chat;   /* a chat history's conversation (app/import.h), or NULL */
	int64_t session;            /* chat: the session holding its turns */
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
	struct app_ingest_progress p = { stage, g->path, done, total, rate,
					 rate > 0 ? (total - done) / rate : -1, final, g->doc.id };
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

/* The document's tokens: its text as a document turn, or a chat
 * history's conversation rendered as turns (whose decoded rendering
 * becomes the text). */
static int stage_tokenize(struct ingest *g, char *err, size_t errlen)
{
	int rc;

	if (g->chat) {
		free(g->text);
		rc = import_render(g->chat, &g->ct, g->tk, &g->tv, &g->text, &g->text_len, err, errlen);
	} else {
		rc = chat_build_turn(&g->tv, &g->ct, g->tk, CHAT_START_STREAM, APP_DOC_PREAMBLE,
				     g->text, g->text_len, 0, NULL, err, errlen);
	}
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
	snprintf(d->title, sizeof d->title, "%s", g->chat ? g->chat->title :
		 o->title ? o->title : base_name(g->path));
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
	if ((rc = store_tx_begin(g->st, err, errlen)))
		return rc;
	if ((rc = store_doc_create(g->st, d, g->text, g->text_len, err, errlen)) ||
	    (rc = store_ingest_begin(g->st, d->id, &in, err, errlen)) ||
	    (rc = store_tx_commit(g->st, err, errlen))) {
		store_tx_rollback(g->st);
		d->id = 0;
	}
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

static void ingest_free(struct ingest *g)
{
	for (int l = 0; l < MODEL_MAX_LAYER; l++) {
		free(g->glob_k[l]);
		free(g->glob_v[l]);
		free(g->swa_k[l]);
		free(g->swa_v[l]);
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

/* After a failure: says in err how to continue or delete the document
 * the ingest left incomplete, if it created one. */
static void note_incomplete(struct ingest *g, char *err, size_t errlen)
{
	if (g->doc.id <= 0 || !g->st || !err || !errlen)
		return;
	size_t len = strnlen(err, errlen);
	snprintf(err + len, errlen - len, "; document %lld is incomplete (%d of %d tokens "
		 "stored): continue with 'sekv ingest --resume %lld' or delete it with "
		 "'sekv rm %lld'", (long long)g->doc.id, committed(g), g->tv.n,
		 (long long)g->doc.id, (long long)g->doc.id);
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
		note_incomplete(&c, err, errlen);
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

/* A chat history, read into g->text: every conversation --conversation
 * picks becomes a document and a session, listed at the end (*doc_id:
 * the last document). A conversation with no answer is left out. */
static int ingest_history(struct ingest *g, enum history_kind kind, int64_t *doc_id,
			  char *err, size_t errlen)
{
	struct history h;
	char **lines = NULL;
	int first = 0, last = -1, n_line = 0, rc;

	if (!(rc = history_parse(&h, kind, g->path, g->text, g->text_len, err, errlen)) &&
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

int app_ingest(const struct app_opts *o, const char *path, app_ingest_progress_fn fn, void *ud,
	       int64_t *doc_id, char *err, size_t errlen)
{
	struct ingest g = { .o = o, .path = path, .fn = fn, .ud = ud };
	enum history_kind kind = HISTORY_NONE;
	int rc;

	if (!(rc = stage_extract(&g, err, errlen)))
		kind = history_detect(path, g.text, g.text_len);
	if (!rc && kind != HISTORY_NONE)
		rc = ingest_history(&g, kind, doc_id, err, errlen);
	else if (!rc && o->conversation)
		rc = sekv_errf(err, errlen, SEKV_EINVAL, "ingest: %s: --conversation: not a chat "
			       "history (ChatGPT conversations.json, JSONL of {role, content}, or a "
			       "'user:'/'assistant:' transcript)", path);
	else if (!rc && !(rc = stage_load(&g, err, errlen)) && !(rc = stage_count(&g, err, errlen)) &&
		 !(rc = stage_tokenize(&g, err, errlen)) && !(rc = stage_create_doc(&g, err, errlen)) &&
		 !(rc = prefill_alloc(&g, err, errlen)) && !(rc = ingest_finish(&g, err, errlen)))
		*doc_id = g.doc.id;
	if (rc)
		note_incomplete(&g, err, errlen);
	ingest_free(&g);
	return rc;
}

/* ---- resume ---------------------------------------------------------- */

/* The incomplete document doc, its resume state (the settings it was
 * started with go into *ro, which g->o points at) and its text. */
static int resume_open(struct ingest *g, struct app_opts *ro, int64_t doc, struct store_ingest *in,
		       float **probe, char *err, size_t errlen)
{
	struct store_doc *d = &g->doc;
	int rc;

	if ((rc = store_open(&g->st, ro->db, err, errlen)) ||
	    (rc = store_doc_get(g->st, doc, d, err, errlen)))
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
	return store_doc_text_dup(g->st, doc, &g->text, &g->text_len, err, errlen);
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

void app_ingest_meter_init(struct app_ingest_meter *mt)
{
	memset(mt, 0, sizeof *mt);
	mt->last_tenth = -1;
	mt->tty = isatty(2);
}

/* "ETA 12s", "ETA 3m05s", "ETA -" (no rate yet) into buf. */
static void fmt_eta(double s, char *buf, size_t cap)
{
	if (s < 0)
		snprintf(buf, cap, "ETA -");
	else if (s < 100)
		snprintf(buf, cap, "ETA %.0fs", s);
	else
		snprintf(buf, cap, "ETA %dm%02ds", (int)(s / 60), (int)s % 60);
}

void app_ingest_print(void *ud, const struct app_ingest_progress *p)
{
	struct app_ingest_meter *mt = ud;
	double now = clk_now();
	long long total = p->total > 0 ? p->total : 1;
	int tenth = (int)(p->done * 10 / total), prefill = !strcmp(p->stage, "prefill");
	char eta[32];

	if (strcmp(p->stage, "extract") == 0) {
		char sz[32];
		fmt_bytes((size_t)p->done, sz, sizeof sz);
		app_errorf("ingest: %s: %s of text\n", p->path, sz);
		return;
	}
	if (strcmp(p->stage, mt->stage) != 0) {
		snprintf(mt->stage, sizeof mt->stage, "%s", p->stage);
		mt->last_tenth = -1;
		mt->last = -1e9;
	}
	/* a terminal gets a live line; a log a line per chunk (at most one a
	 * second) while prefilling, per tenth while counting */
	if (!p->final && (mt->tty ? now - mt->last < 0.25 :
			  prefill ? now - mt->last < 1.0 : tenth == mt->last_tenth))
		return;
	mt->last_tenth = tenth;
	mt->last = now;
	fmt_eta(p->eta_s, eta, sizeof eta);
	if (prefill) {
		char rate[32] = "- tokens/s";
		if (p->rate > 0)
			snprintf(rate, sizeof rate, "%.1f tokens/s", p->rate);
		fprintf(stderr, "%sprefill %lld/%lld tokens (%lld%%)  %s  %s%s",
			mt->tty ? "\r\033[K" : "", p->done, p->total, p->done * 100 / total, rate,
			eta, mt->tty && !p->final ? "" : "\n");
	} else {
		fprintf(stderr, "%scounting tokens %lld/%lld KiB%s", mt->tty ? "\r\033[K" : "",
			p->done >> 10, p->total >> 10, mt->tty && !p->final ? "" : "\n");
	}
}
