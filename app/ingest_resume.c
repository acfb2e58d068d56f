/* ingest_resume.c - `sekv ingest --resume DOC`: continues an interrupted
 * ingest from its last committed chunk with the settings it began with,
 * restoring the global rows, the sliding-window rows, the surprisal and
 * H2O's probe so the stored memory equals an uninterrupted ingest's; a
 * part of a --split ingest (also one already ready whose state was kept as
 * the continuation) then goes on with the parts after it, its source file
 * read, fingerprinted, planned and checked against the stored part before
 * anything is written. The stages themselves are ingest.c's.
 */
#include "app/ingest_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/history.h"
#include "app/import.h"
#include "engine/base/clock.h"
#include "engine/base/err.h"
#include "engine/tok/tokenizer.h"

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


/* The incomplete document doc (or a ready part whose state is the
 * continuation of its split ingest), its resume state (the settings it
 * was started with go into *ro, which g->o points at) and its text. */
static int resume_open(struct ingest *g, struct app_opts *ro, int64_t doc, struct store_ingest *in,
		       float **probe, char *err, size_t errlen)
{
	struct store_doc *d = &g->doc;
	int rc;

	if ((rc = store_open(&g->st, ro->db, err, errlen)) ||
	    (rc = store_doc_lock(g->st, doc, err, errlen)))
		return rc;
	rc = store_doc_get(g->st, doc, d, err, errlen);
	if (rc == SEKV_ENOTFOUND)
		return sekv_errf(err, errlen, rc, "ingest --resume: document %lld is not in %s (see "
				 "'sekv ls')", (long long)doc, ro->db);
	if (rc)
		return rc;
	g->path = d->source;
	rc = store_ingest_get(g->st, doc, in, probe, err, errlen);
	if (d->state == STORE_DOC_READY && (rc || !in->next_pending))
		return sekv_errf(err, errlen, SEKV_EINVAL, "ingest --resume: document %lld is complete: "
				 "nothing to resume", (long long)doc);
	if (rc == SEKV_ENOTFOUND)
		return sekv_errf(err, errlen, rc, "ingest --resume: document %lld has no resume state "
				 "(its ingest began before sekv kept one): delete it ('sekv rm %lld') "
				 "and ingest the file again", (long long)doc, (long long)doc);
	if (rc)
		return rc;
	ro->n_batch = in->n_batch;
	ro->alpha = in->alpha;
	ro->rank_energy = in->rank_energy;
	ro->rank_energy_v = in->rank_energy_v;
	ro->exact_below = in->exact_below;
	ro->key_pre_rope = in->key_pre_rope;
	ro->static_share = in->static_share;
	ro->n_recent = in->n_recent;
	ro->keep_full_kv |= in->keep_full_kv;
	ro->budget = d->budget;
	ro->r_max = d->r_max;
	g->pos_start = (int)in->pos_end;
	g->h_start = in->h_next;
	app_ingest_report_doc(g);
	if (!ro->quiet && in->next_pending)
		app_errorf("ingest: document %lld (%s) is ready; its --split ingest stopped before part "
			   "%d of %d: storing the parts after it\n", (long long)doc, d->title,
			   in->part + 2, in->n_part);
	else if (!ro->quiet)
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

/* ---- the parts after a resumed one ------------------------------------ */

/* The source read again (g->x) and planned as the split ingest was must
 * give in->n_part parts, part in->part of the text was [was_len] (the
 * stored document's) byte for byte. */
static int plan_check(const struct ingest *g, const struct store_ingest *in, const char *was,
		      size_t was_len, int64_t doc, char *err, size_t errlen)
{
	if (g->plan.n_part != in->n_part)
		return sekv_errf(err, errlen, SEKV_EMISMATCH, "%s: it now makes %d parts of at most "
				 "%d tokens, not %d (changed since?)", g->path, g->plan.n_part,
				 in->part_limit, in->n_part);
	const struct app_part *p = &g->plan.part[in->part];
	if (p->end - p->start != was_len || memcmp(g->x.text + p->start, was, was_len))
		return sekv_errf(err, errlen, SEKV_EMISMATCH, "%s: its part %d/%d is no longer the "
				 "text of document %lld (changed since?)", g->path, in->part + 1,
				 in->n_part, (long long)doc);
	return 0;
}

/* ro->title for the parts after part in->part: g->doc's title less its
 * " (part i/n)", into title [cap]. */
static void resume_title(const struct ingest *g, struct app_opts *ro, const struct store_ingest *in,
			 char *title, size_t cap)
{
	char suffix[48];

	snprintf(title, cap, "%s", g->doc.title);
	snprintf(suffix, sizeof suffix, " (part %d/%d)", in->part + 1, in->n_part);
	size_t len = strlen(title), sl = strlen(suffix);
	if (len >= sl && !strcmp(title + len - sl, suffix))
		title[len - sl] = 0;
	ro->title = title;
}

/* Before anything is stored: the source of part in->part of a split ingest
 * (g->doc's source, into path [cap]) read again into src, which borrows
 * g's model, tokenizer and format, and planned as that ingest was (ro's
 * max_tokens and split set so, its title by resume_title into title
 * [title_cap]). Its whole text must have the fingerprint the ingest
 * recorded (none in a row from before), and part in->part must be the
 * stored text, g->x, byte for byte (plan_check). On a failure err says
 * why and how to go on; the library is as it was, the part resumable. */
static int resume_source(struct ingest *g, struct ingest *src, struct app_opts *ro,
			 const struct store_ingest *in, char *title, size_t title_cap, char *path,
			 size_t cap, char *err, size_t errlen)
{
	long long id = (long long)g->doc.id;
	int i = in->part, n = in->n_part, rc;
	char why[768], fp[17];

	snprintf(path, cap, "%s", g->doc.source);
	resume_title(g, ro, in, title, title_cap);
	ro->max_tokens = in->part_limit;
	ro->split = 1;
	*src = (struct ingest){ .o = ro, .path = path, .fn = g->fn, .ud = g->ud, .m = g->m,
				.tk = g->tk, .hp = g->hp, .ct = g->ct };
	if (!ro->quiet)
		app_errorf("ingest: reading %s again for the parts after part %d/%d\n", path, i + 1, n);
	if ((rc = app_ingest_extract(src, why, sizeof why)))
		return sekv_errf(err, errlen, rc, "ingest --resume: document %lld (part %d/%d): the "
				 "parts after it are read from its source, which failed: %s; nothing "
				 "was stored: 'sekv ingest --resume %lld' continues once the file reads "
				 "again", id, i + 1, n, why, id);
	app_ingest_text_fp(&src->x, fp);
	if (in->text_fp[0] && strcmp(fp, in->text_fp))
		return sekv_errf(err, errlen, SEKV_EMISMATCH, "ingest --resume: document %lld (part "
				 "%d/%d): %s has changed since its --split ingest began (its text "
				 "differs), so the parts after it would come from another version of "
				 "the file than the parts before; nothing was stored. For a consistent "
				 "set, delete every part of it (\"%s (part j/%d)\" in 'sekv ls'; 'sekv "
				 "rm ID...') and ingest the file again with --split --max-tokens %d", id,
				 i + 1, n, path, title, n, in->part_limit);
	if ((rc = app_ingest_plan(src, why, sizeof why)) ||
	    (rc = plan_check(src, in, g->x.text, g->x.len, (int64_t)id, why, sizeof why)))
		return sekv_errf(err, errlen, rc, "ingest --resume: document %lld (part %d/%d): %s; "
				 "nothing was stored: to store every part anew, delete them and ingest "
				 "%s again with --split --max-tokens %d", id, i + 1, n, why, path,
				 in->part_limit);
	return 0;
}

/* Part in->part itself from its last committed chunk: tokens checked,
 * state restored, the rest prefilled, the memory built and stored. */
static int resume_part(struct ingest *g, const struct store_ingest *in, const float *probe,
		       char *err, size_t errlen)
{
	double t0;
	int rc;

	if ((rc = app_ingest_tokenize(g, err, errlen)) || (rc = resume_check(g, in, err, errlen)) ||
	    (rc = app_ingest_prefill_alloc(g, err, errlen)))
		return rc;
	if (in->n_probe != g->h2o_probe.n)
		return sekv_errf(err, errlen, SEKV_EFORMAT, "ingest --resume: document %lld: %d probe "
				 "rows stored, the model has %d", (long long)g->doc.id, in->n_probe,
				 g->h2o_probe.n);
	t0 = clk_now();
	if ((rc = restore_state(g, probe, err, errlen)))
		return rc;
	if (!g->o->quiet)
		app_errorf("ingest: state at token %d restored in %.3fs (model loading apart)\n",
			   g->pos_start, clk_now() - t0);
	return app_ingest_finish(g, err, errlen);
}

/* After part in->part of a split ingest is ready (g->doc): the source
 * resume_source read and planned (src's text, plan and ids move to g),
 * then the parts after it through the stages of a new ingest. */
static int resume_next_parts(struct ingest *g, struct ingest *src, const struct store_ingest *in,
			     char *err, size_t errlen)
{
	int64_t id = g->doc.id;
	int i = in->part, rc;

	app_ingest_part_free(g);
	extract_doc_free(&g->x);
	app_plan_free(&g->plan);
	g->x = src->x;
	g->plan = src->plan;
	g->ids = src->ids;
	g->path = src->path;
	memcpy(g->text_fp, src->text_fp, sizeof g->text_fp);
	memset(&src->x, 0, sizeof src->x);
	memset(&src->plan, 0, sizeof src->plan);
	src->ids = NULL;
	g->page_base = g->pos_start = 0;
	g->h_start = 0;
	g->ids[i] = id;
	g->part0 = i;
	if (!g->o->quiet && !in->next_pending)
		app_errorf("ingest: document %lld (part %d/%d) is ready; storing the parts after it\n",
			   (long long)id, i + 1, in->n_part);
	if ((rc = app_ingest_run_parts(g, i + 1, err, errlen)))
		app_ingest_note_left(g, err, errlen);
	return rc;
}

int app_ingest_resume(const struct app_opts *o, int64_t doc_id, app_ingest_progress_fn fn,
		      void *ud, int64_t **ids, int *n_ids, char *err, size_t errlen)
{
	struct app_opts ro = *o;
	struct ingest g = { .o = &ro, .fn = fn, .ud = ud }, src = { 0 };
	struct store_ingest in;
	struct history h = { 0 };
	struct import_conv ic = { 0 };
	char path[sizeof g.doc.source], title[sizeof g.doc.title];
	float *probe = NULL;
	int ready = 0, rc;

	*ids = NULL;
	*n_ids = 0;
	if ((rc = resume_open(&g, &ro, doc_id, &in, &probe, err, errlen)) ||
	    (rc = resume_chat(&g, &h, &ic, path, sizeof path, err, errlen)) ||
	    (rc = app_ingest_load(&g, err, errlen)))
		goto out;
	g.more_parts = !g.chat && in.part + 1 < in.n_part;
	if ((g.more_parts && (rc = resume_source(&g, &src, &ro, &in, title, sizeof title, path,
						 sizeof path, err, errlen))) ||
	    (!in.next_pending && (rc = resume_part(&g, &in, probe, err, errlen))))
		goto out;
	ready = 1;
	if (g.more_parts)
		rc = resume_next_parts(&g, &src, &in, err, errlen);
out:;
	/* g.ids: [n_part] of a split ingest continued; else doc_id alone, once ready */
	int64_t one = doc_id;
	struct ingest only = { .ids = &one, .part = ready };
	if (app_ingest_ids_dup(g.ids ? &g : &only, ids, n_ids) && !rc)
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "ingest: out of memory");
	free(probe);
	src.m = NULL;
	src.tk = NULL;
	app_ingest_free(&src);
	app_ingest_free(&g);
	import_conv_free(&ic);
	history_free(&h);
	return rc;
}
