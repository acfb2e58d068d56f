/* attn_dump.c - sekv-attn-dump: the attention mass of every query head of
 * every global layer on every document position, one record per decoded
 * token of a question and its answer, for studying how evidence should
 * be scored (bench/qa/attn_study.py). Not part of the product: it asks
 * exactly as `sekv ask` does (same session, prompt and probe) but keeps
 * each step's mass apart instead of summing it.
 *
 * usage: sekv-attn-dump OUT DOC QUESTION [ask options]
 * OUT.bin: float32 [n_step][n_head][n_pos] (little-endian, host order)
 * OUT.json: {"heads": [[layer, head], ...], "n_pos", "exact",
 *            "steps": [{"q": 0|1, "tok": id}], "ids": the turn's and the
 *            answer's tokens as decoded, "start": [byte offset or -1
 *            per document position], "answer", "text": the stored text}
 */
#include "app/app.h"
#include "app/session.h"
#include "engine/conv/conv.h"
#include "engine/evidence/evidence.h"
#include "engine/model/model.h"
#include "engine/tok/tokenizer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dump {
	FILE *bin;
	struct app_evidence *ev;
	cJSON *steps;
	int failed;
};

static int on_step(void *ud, const struct conv_step *st)
{
	struct dump *d = ud;
	size_t n = (size_t)d->ev->n_head * (size_t)d->ev->n_pos;
	cJSON *o = cJSON_CreateObject();

	cJSON_AddNumberToObject(o, "q", st->question);
	cJSON_AddNumberToObject(o, "tok", st->token);
	cJSON_AddItemToArray(d->steps, o);
	/* a step lands in mass or in base (the turn's fixed part), never both */
	for (size_t i = 0; i < n; i++)
		d->ev->mass[i] += d->ev->base[i];
	if (fwrite(d->ev->mass, sizeof *d->ev->mass, n, d->bin) != n)
		d->failed = 1;
	memset(d->ev->mass, 0, n * sizeof *d->ev->mass);
	memset(d->ev->base, 0, n * sizeof *d->ev->base);
	return d->failed;
}

int main(int argc, char **argv)
{
	struct app_opts o;
	struct model *m = NULL;
	struct tok *tk = NULL;
	struct session *s = NULL;
	struct conv_answer a = {0};
	struct app_evidence ev = {0};
	struct session_info in;
	struct dump d = {0};
	char err[1024], path[4096], heads[512];
	int64_t id;
	int32_t *start = NULL;
	int rc = 1, exact = 0;

	if (argc < 4 || app_opts_parse(&o, argc - 2, argv + 2, err, sizeof err) || o.n_args != 2 ||
	    app_parse_doc_id(o.args[0], &id)) {
		fprintf(stderr, "usage: sekv-attn-dump OUT DOC QUESTION [ask options]\n");
		return 2;
	}
	if (app_load(&o, &m, &tk, err, sizeof err) ||
	    session_open(&s, m, tk, &o, id, err, sizeof err))
		goto fail;
	{
		const struct model_hparams *hp = model_hparams(m);
		size_t at = 0;
		heads[0] = 0;
		for (int g = 0; g < hp->n_global; g++)
			for (int h = 0; h < hp->n_head; h++)
				at += (size_t)snprintf(heads + at, sizeof heads - at, "%s%d:%d",
						       at ? "," : "", hp->global_layer[g], h);
		o.evidence_heads = heads;
		o.no_evidence = 0;
	}
	if (app_evidence_begin(&ev, &o, s, m, tk, err, sizeof err))
		goto fail;
	snprintf(path, sizeof path, "%s.bin", argv[1]);
	if (!(d.bin = fopen(path, "wb"))) {
		snprintf(err, sizeof err, "cannot create %.900s", path);
		goto fail;
	}
	d.ev = &ev;
	d.steps = cJSON_CreateArray();
	if (conv_ask(session_conv(s), o.args[1], on_step, &d, &a, err, sizeof err) || d.failed)
		goto fail;
	session_get_info(s, &in);
	{
		cJSON *j = cJSON_CreateObject(), *hs = cJSON_AddArrayToObject(j, "heads");
		if (!(start = malloc(((size_t)in.n_tok + 1) * sizeof *start)) ||
		    app_evidence_end(&ev, s, tk, err, sizeof err) ||
		    evidence_offsets(tk, in.tokens, in.n_tok, ev.text, ev.text_len, start, &exact,
				     err, sizeof err))
			goto fail;
		for (int i = 0; i < ev.n_head; i++) {
			int pair[2] = { ev.head[i].layer, ev.head[i].head };
			cJSON_AddItemToArray(hs, cJSON_CreateIntArray(pair, 2));
		}
		cJSON_AddNumberToObject(j, "n_pos", ev.n_pos);
		cJSON_AddNumberToObject(j, "exact", exact);
		cJSON_AddItemToObject(j, "steps", d.steps);
		{
			int n_ids;
			const int32_t *ids = conv_tokens(session_conv(s), &n_ids);
			cJSON_AddItemToObject(j, "ids", cJSON_CreateIntArray(ids, n_ids));
		}
		d.steps = NULL;
		cJSON_AddItemToObject(j, "start", cJSON_CreateIntArray(start, in.n_tok));
		app_json_add_text(j, "answer", a.text ? a.text : "");
		cJSON_AddItemToObject(j, "text", cJSON_CreateString(ev.text ? ev.text : ""));
		snprintf(path, sizeof path, "%s.json", argv[1]);
		FILE *f = fopen(path, "w");
		char *txt = cJSON_PrintUnformatted(j);
		if (!f || !txt || fputs(txt, f) < 0) {
			snprintf(err, sizeof err, "cannot write %.900s", path);
			free(txt);
			if (f)
				fclose(f);
			cJSON_Delete(j);
			goto fail;
		}
		free(txt);
		fclose(f);
		cJSON_Delete(j);
	}
	rc = 0;
	goto done;
fail:
	fprintf(stderr, "sekv-attn-dump: %s\n", err);
done:
	if (d.bin)
		fclose(d.bin);
	cJSON_Delete(d.steps);
	free(start);
	conv_answer_free(&a);
	app_evidence_free(&ev);
	session_close(s);
	tok_close(tk);
	model_close(m);
	return rc;
}
