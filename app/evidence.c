/* evidence.c (app) - evidence passages for `ask` and `chat`: chooses the
 * retrieval heads (--evidence-heads, else those stored for the model,
 * else a calibration run once and stored), probes the conversation while
 * it answers, ranks passages and prints them (plain text, inert) or adds
 * them to --json. One formatter writes a passage's line, for a live answer
 * and for the rows a stored turn kept (a resumed chat's transcript). The
 * ranking itself is engine/evidence/evidence.c; storing rows is app/session.c.
 */
#include "app/app.h"
#include "app/session.h"
#include "engine/conv/conv.h"
#include "engine/base/err.h"
#include "engine/evidence/evidence.h"
#include "engine/model/model.h"
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/extract.h"

#include <cjson/cJSON.h>

/* The heads for o and model m: flag, stored, or calibrated (and stored). */
static int pick_heads(struct app_evidence *ev, const struct app_opts *o, struct session *s,
		      const struct model *m, const struct tok *tk, char *err, size_t errlen)
{
	const struct model_hparams *hp = model_hparams(m);
	char buf[512], e2[256];
	int rc;

	if (o->evidence_heads)
		return evidence_heads_parse(o->evidence_heads, hp, ev->head, EVIDENCE_MAX_HEADS,
					    &ev->n_head, err, errlen);
	rc = store_evidence_heads_get(session_store(s), hp->fingerprint, buf, sizeof buf, e2, sizeof e2);
	if (rc == 0 && evidence_heads_parse(buf, hp, ev->head, EVIDENCE_MAX_HEADS, &ev->n_head,
					    e2, sizeof e2) == 0)
		return 0;
	if (rc && rc != SEKV_ENOTFOUND)
		return sekv_errf(err, errlen, rc, "%s", e2);
	return app_evidence_calibrate(m, tk, session_store(s), o->quiet, ev->head, &ev->n_head,
				      err, errlen);
}

int app_evidence_calibrate(const struct model *m, const struct tok *tk, struct store *st,
			   int quiet, struct evidence_head *head, int *n_head,
			   char *err, size_t errlen)
{
	const struct model_hparams *hp = model_hparams(m);
	struct evidence_calib_params cp;
	int n_all = hp->n_global * hp->n_head, rc;
	/* "layer:head=score," is at most 24 bytes a head */
	size_t cap = (size_t)n_all * 24 + 1, at = 0;
	float *score = malloc(sizeof(float) * (size_t)(n_all > 0 ? n_all : 1));
	char *scores = malloc(cap), heads[256];

	if (!score || !scores) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "evidence: out of memory");
		goto out;
	}
	if (!quiet)
		app_errorf("sekv: finding this model's retrieval heads for evidence (once per model)...\n");
	evidence_calib_default_params(&cp);
	*n_head = n_all < 3 ? n_all : 3;
	if ((rc = evidence_calibrate(m, tk, &cp, score, head, *n_head, err, errlen)))
		goto out;
	scores[0] = 0;
	for (int i = 0; i < n_all && at < cap; i++)
		at += (size_t)snprintf(scores + at, cap - at, "%s%d:%d=%.3f", i ? "," : "",
				       hp->global_layer[i / hp->n_head], i % hp->n_head, score[i]);
	evidence_heads_format(head, *n_head, heads, sizeof heads);
	if (!quiet)
		app_errorf("sekv: retrieval heads %s (needle score per head: question minus baseline"
			   " share%s%s)\n", heads, n_all <= 16 ? ": " : "; the scores of all ",
			   n_all <= 16 ? scores : "global heads are stored in the library");
	rc = st ? store_evidence_heads_put(st, hp->fingerprint, heads, scores, err, errlen) : 0;
out:
	free(score);
	free(scores);
	return rc;
}

int app_evidence_begin(struct app_evidence *ev, const struct app_opts *o, struct session *s,
		       const struct model *m, const struct tok *tk, char *err, size_t errlen)
{
	struct session_info in;
	int rc;

	memset(ev, 0, sizeof *ev);
	if (o->no_evidence)
		return 0;
	if ((rc = pick_heads(ev, o, s, m, tk, err, errlen)))
		return rc;
	session_get_info(s, &in);
	ev->n_pos = in.n_tok;
	if (!(ev->mass = calloc((size_t)ev->n_head * (in.n_tok ? in.n_tok : 1), sizeof *ev->mass)) ||
	    !(ev->base = calloc((size_t)ev->n_head * (in.n_tok ? in.n_tok : 1), sizeof *ev->base)))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "evidence: out of memory");
	ev->top = o->evidence_top > 0 ? o->evidence_top : APP_EVIDENCE_TOP;
	ev->probe.n = ev->n_head;
	for (int i = 0; i < ev->n_head; i++) {
		ev->probe.layer[i] = ev->head[i].layer;
		ev->probe.head[i] = ev->head[i].head;
	}
	ev->probe.n_pos = in.n_tok;
	ev->probe.mass = ev->mass;
	ev->on = 1;
	conv_set_probe(session_conv(s), &ev->probe, ev->base);
	return 0;
}

int app_pages_load(struct app_pages *pg, struct store *st, int64_t doc, char *err, size_t errlen)
{
	int64_t text_len;
	int rc = store_doc_get_pages(st, doc, &pg->page0, &pg->n_page, &pg->start, &text_len,
				     err, errlen);

	if (rc == SEKV_ENOTFOUND) {
		memset(pg, 0, sizeof *pg);
		return 0;
	}
	return rc;
}

void app_pages_free(struct app_pages *pg)
{
	free(pg->start);
	memset(pg, 0, sizeof *pg);
}

int app_pages_of(const struct app_pages *pg, int64_t a, int64_t b, int *first, int *last)
{
	if (pg->n_page <= 0)
		return 0;
	*first = pg->page0 + extract_page_of(pg->start, pg->n_page, a);
	*last = pg->page0 + extract_page_of(pg->start, pg->n_page, b > a ? b - 1 : a);
	return 1;
}

void app_pages_text(const struct app_pages *pg, int64_t a, int64_t b, char *buf, size_t cap)
{
	int p0, p1;

	buf[0] = 0;
	if (!app_pages_of(pg, a, b, &p0, &p1))
		return;
	if (p0 == p1)
		snprintf(buf, cap, "p. %d", p0);
	else
		snprintf(buf, cap, "pp. %d-%d", p0, p1);
}

int app_evidence_end(struct app_evidence *ev, struct session *s, const struct tok *tk,
		     char *err, size_t errlen)
{
	struct session_info in;
	int32_t *start;
	int rc;

	if (!ev->on)
		return 0;
	conv_set_probe(session_conv(s), NULL, NULL);
	session_get_info(s, &in);
	app_pages_free(&ev->pages);
	if ((rc = store_doc_text_dup(session_store(s), in.doc_id, &ev->text, &ev->text_len,
				     err, errlen)) ||
	    (rc = app_pages_load(&ev->pages, session_store(s), in.doc_id, err, errlen)))
		return rc;
	int n_want = ev->top < in.n_tok ? ev->top : in.n_tok;
	free(ev->pas);
	ev->pas = NULL;
	if (!(start = malloc(((size_t)in.n_tok + 1) * sizeof *start)) ||
	    !(ev->pas = calloc((size_t)(n_want > 0 ? n_want : 1), sizeof *ev->pas))) {
		free(start);
		return sekv_errf(err, errlen, SEKV_ENOMEM, "evidence: out of memory");
	}
	rc = evidence_offsets(tk, in.tokens, in.n_tok, ev->text, ev->text_len, start,
			      &ev->exact, err, errlen);
	if (!rc) {
		rc = evidence_rank(ev->mass, ev->base, ev->n_head, ev->n_pos, start, in.n_tok,
				   ev->text_len, EVIDENCE_PASSAGE, ev->pas, n_want);
		ev->n_pas = rc > 0 ? rc : 0;
		rc = rc < 0 ? sekv_errf(err, errlen, rc, "evidence: ranking failed") : 0;
	}
	free(start);
	return rc;
}

void app_evidence_snippet(const char *text, int64_t a, int64_t b, char *out, size_t max)
{
	size_t n = 0;
	int sp = 0;

	for (int64_t i = a; i < b && n + 4 < max; i++) {
		unsigned char c = (unsigned char)text[i];
		if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
			sp = n > 0;
			continue;
		}
		if (sp)
			out[n++] = ' ';
		sp = 0;
		out[n++] = (char)c;
	}
	if (n + 4 >= max) {
		while (n > 0 && ((unsigned char)out[n - 1] & 0xC0) == 0x80)
			n--;
		if (n > 0 && ((unsigned char)out[n - 1] & 0xC0) == 0xC0)
			n--;
		memcpy(out + n, "...", 3);
		n += 3;
	}
	out[n] = 0;
}

void app_evidence_format(const char *text, size_t text_len, const struct app_pages *pg,
			 const struct evidence_passage *p, char *buf, size_t cap)
{
	char line[160], page[48];
	int64_t peak = p->peak > p->start && p->peak < p->end ? p->peak : p->start;

	if (p->start < 0 || p->end < p->start || p->end > (int64_t)text_len) {
		snprintf(line, sizeof line, "(outside the stored text)");
	} else {
		/* the snippet starts a little before the passage's best token,
		 * on a word, so what drew the attention is in view */
		int64_t a = peak - 40 > p->start ? peak - 40 : p->start;
		while (a > p->start && a < peak && text[a - 1] != ' ' && text[a - 1] != '\n')
			a++;
		if (a > p->start) {
			memcpy(line, "...", 3);
			app_evidence_snippet(text, a, p->end, line + 3, 100);
		} else {
			app_evidence_snippet(text, a, p->end, line, 100);
		}
	}
	app_pages_text(pg, p->start, p->end, page, sizeof page - 1);
	if (page[0])
		strcat(page, " ");
	snprintf(buf, cap, "%d. %s[%lld, %lld) %+.1f%%  %s", p->rank, page, (long long)p->start,
		 (long long)p->end, 100.0 * p->score, line);
}

void app_evidence_note(const char *text, size_t text_len, const struct app_pages *pg,
		       const struct evidence_passage *p, char *buf, size_t cap)
{
	int n = snprintf(buf, cap, "evidence ");

	if (n > 0 && (size_t)n < cap)
		app_evidence_format(text, text_len, pg, p, buf + n, cap - (size_t)n);
}

int app_evidence_notes_load(struct app_evidence_notes *nt, struct store *st, int64_t doc,
			    const struct store_turn *t, int n, char *err, size_t errlen)
{
	struct app_pages pg = { 0 };
	char *text = NULL;
	size_t text_len = 0;
	int rc, n_row = 0;

	memset(nt, 0, sizeof *nt);
	for (int i = 0; i < n; i++)
		n_row += t[i].n_ev;
	if (n_row == 0)
		return 0;
	if ((rc = store_doc_text_dup(st, doc, &text, &text_len, err, errlen)) ||
	    (rc = app_pages_load(&pg, st, doc, err, errlen)))
		goto out;
	nt->buf = malloc((size_t)n_row * APP_EVIDENCE_NOTE);
	nt->note = malloc((size_t)n_row * sizeof *nt->note);
	if (!nt->buf || !nt->note) {
		app_evidence_notes_free(nt);
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "evidence: out of memory");
		goto out;
	}
	for (int i = 0; i < n; i++)
		for (int k = 0; k < t[i].n_ev; k++) {
			const struct store_evidence_row *r = &t[i].ev[k];
			/* rows stored before peaks were read it as the start */
			struct evidence_passage p = { .rank = r->rank, .start = r->start,
						      .end = r->end, .peak = r->peak, .score = r->score };
			char *line = nt->buf + (size_t)nt->n_note * APP_EVIDENCE_NOTE;
			app_evidence_note(text, text_len, &pg, &p, line, APP_EVIDENCE_NOTE);
			nt->note[nt->n_note++] = line;
		}
out:
	app_pages_free(&pg);
	free(text);
	return rc;
}

void app_evidence_notes_free(struct app_evidence_notes *nt)
{
	free(nt->buf);
	free(nt->note);
	memset(nt, 0, sizeof *nt);
}

void app_evidence_print(const struct app_evidence *ev, FILE *f)
{
	char line[256];

	if (!ev->on || !ev->n_pas)
		return;
	fprintf(f, "Evidence%s:\n", ev->exact ? "" : " (approximate character ranges)");
	for (int i = 0; i < ev->n_pas; i++) {
		app_evidence_format(ev->text, ev->text_len, &ev->pages, &ev->pas[i], line, sizeof line);
		fputs("  ", f);
		app_print_inert(f, line, strlen(line));
		fputc('\n', f);
	}
}

cJSON *app_evidence_json(const struct app_evidence *ev)
{
	cJSON *arr = cJSON_CreateArray();

	for (int i = 0; ev->on && i < ev->n_pas; i++) {
		const struct evidence_passage *p = &ev->pas[i];
		cJSON *o = cJSON_CreateObject();
		char *t = malloc((size_t)(p->end - p->start) + 1);
		cJSON_AddNumberToObject(o, "rank", p->rank);
		cJSON_AddNumberToObject(o, "start", (double)p->start);
		cJSON_AddNumberToObject(o, "end", (double)p->end);
		cJSON_AddNumberToObject(o, "position", ev->text_len ? (double)p->start / (double)ev->text_len : 0);
		int p0, p1;
		if (app_pages_of(&ev->pages, p->start, p->end, &p0, &p1)) {
			cJSON_AddNumberToObject(o, "page_first", p0);
			cJSON_AddNumberToObject(o, "page_last", p1);
		}
		if (t) {
			memcpy(t, ev->text + p->start, (size_t)(p->end - p->start));
			t[p->end - p->start] = 0;
		}
		app_json_add_text(o, "text", t ? t : "");
		free(t);
		cJSON_AddNumberToObject(o, "score", p->score);
		cJSON_AddItemToArray(arr, o);
	}
	return arr;
}

void app_evidence_free(struct app_evidence *ev)
{
	free(ev->mass);
	free(ev->base);
	free(ev->pas);
	free(ev->text);
	app_pages_free(&ev->pages);
	memset(ev, 0, sizeof *ev);
}
