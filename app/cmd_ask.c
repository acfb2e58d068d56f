/* cmd_ask.c - `sekv ask DOC QUESTION`: one answer from the stored memory,
 * streamed to stdout, or one JSON object with --json (field names from
 * DESIGN.md section 6). Invariant: text from the document or the model
 * reaches stdout with its control characters inert (ui_text_inert for
 * plain text, \u escapes in JSON), so it cannot drive the terminal. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "app/app.h"
#include "app/session.h"
#include "engine/conv.h"
#include "engine/err.h"
#include "engine/model.h"
#include "engine/sekv/sekv.h"
#include "engine/tokenizer.h"
#include "engine/utf8.h"
#include "ui/text.h"

#define ASK_MAX_SPANS_JSON 64 /* zoomed spans listed in --json */
#define INERT_CHUNK 256       /* input bytes made inert per step */

void app_print_inert(FILE *f, const char *s, size_t n)
{
	char out[3 * INERT_CHUNK + 1];

	while (n > 0) {
		/* whole characters per chunk: a cut one would become U+FFFD */
		size_t take = n > INERT_CHUNK ? utf8_complete(s, INERT_CHUNK) : n;
		int w = ui_text_inert(s, (int)take, out, (int)sizeof out);
		fwrite(out, 1, (size_t)w, f);
		s += take;
		n -= take;
	}
}

char *app_json_inert_dup(const char *json)
{
	const unsigned char *u = (const unsigned char *)json;
	size_t n = strlen(json), extra = 0, o = 0;
	char *out;

	for (size_t i = 0; i < n; i++)
		if (u[i] == 0x7f)
			extra += 5;
		else if (u[i] == 0xc2 && i + 1 < n && u[i + 1] >= 0x80 && u[i + 1] <= 0x9f)
			extra += 4;
	if (!(out = malloc(n + extra + 1)))
		return NULL;
	/* Such bytes only occur inside strings (the rest is ASCII), where
	 * \u00XX means the same character. */
	for (size_t i = 0; i < n; i++) {
		if (u[i] == 0x7f) {
			memcpy(out + o, "\\u007f", 6);
			o += 6;
		} else if (u[i] == 0xc2 && i + 1 < n && u[i + 1] >= 0x80 && u[i + 1] <= 0x9f) {
			o += (size_t)sprintf(out + o, "\\u00%02x", u[++i]);
		} else {
			out[o++] = (char)u[i];
		}
	}
	out[o] = 0;
	return out;
}

static int print_step(void *ud, const struct conv_step *st)
{
	(void)ud;
	app_print_inert(stdout, st->piece, (size_t)st->piece_len);
	fflush(stdout);
	return 0;
}

/* Adds s as a JSON string, made valid UTF-8 first: cJSON copies bytes as
 * they are, and app_json_inert_dup relies on well-formed text. */
static void json_add_text(cJSON *o, const char *key, const char *s)
{
	size_t n = strlen(s), bad;
	char *fixed;

	utf8_repair(s, n, NULL, &bad);
	if (!bad || !(fixed = malloc(3 * n + 1))) {
		cJSON_AddStringToObject(o, key, bad ? "" : s);
		return;
	}
	fixed[utf8_repair(s, n, fixed, NULL)] = 0;
	cJSON_AddStringToObject(o, key, fixed);
	free(fixed);
}

static void warn_stderr(void *ud, const char *msg)
{
	(void)ud;
	fprintf(stderr, "sekv ask: note: %s\n", msg);
}

static cJSON *zooms_json(const struct session *s, const struct session_info *in,
			 const struct conv_answer *a)
{
	cJSON *arr = cJSON_CreateArray();
	char text[512];

	for (int i = 0; i < a->n_zoom && i < ASK_MAX_SPANS_JSON; i++) {
		const struct sekv_zoom *z = &a->zoom[i];
		const struct sekv_span *sp = &in->mem->span[z->span];
		cJSON *o = cJSON_CreateObject();
		session_span_text(s, sp->start, sp->len, text, sizeof text);
		cJSON_AddNumberToObject(o, "span", z->span);
		cJSON_AddNumberToObject(o, "layer", in->layer_id[z->layer]);
		cJSON_AddNumberToObject(o, "head", z->head);
		cJSON_AddNumberToObject(o, "steps", z->steps);
		cJSON_AddNumberToObject(o, "start", sp->start);
		cJSON_AddNumberToObject(o, "len", sp->len);
		cJSON_AddNumberToObject(o, "alpha", z->alpha);
		json_add_text(o, "text", text);
		cJSON_AddItemToArray(arr, o);
	}
	return arr;
}

static int print_json(const struct session *s, const struct app_opts *o,
		      const struct conv_answer *a)
{
	struct session_info in;
	cJSON *j = cJSON_CreateObject();

	session_get_info(s, &in);
	json_add_text(j, "answer", a->text ? a->text : "");
	if (a->warn[0])
		json_add_text(j, "warning", a->warn);
	cJSON_AddNumberToObject(j, "doc", (double)in.doc_id);
	cJSON_AddStringToObject(j, "method", in.kv_full ? "full" : "sekv");
	cJSON_AddNumberToObject(j, "budget", in.kv_full ? 1.0 : in.budget);
	cJSON_AddNumberToObject(j, "rmax", in.r_use);
	cJSON_AddNumberToObject(j, "length", in.n_tok);
	cJSON_AddNumberToObject(j, "prefill_s", 0.0);
	cJSON_AddNumberToObject(j, "resume_s", in.resume_s);
	cJSON_AddNumberToObject(j, "question_tokens", a->n_question);
	cJSON_AddNumberToObject(j, "question_s", a->question_s);
	cJSON_AddNumberToObject(j, "answer_tokens", a->n_gen);
	cJSON_AddNumberToObject(j, "decode_tps", a->decode_tps);
	cJSON_AddNumberToObject(j, "resident_bytes", (double)a->peak_resident_bytes);
	cJSON_AddNumberToObject(j, "full_kv_bytes", (double)in.full_kv_bytes);
	cJSON_AddNumberToObject(j, "resident_ratio",
				in.full_kv_bytes ? (double)a->peak_resident_bytes / (double)in.full_kv_bytes : 0);
	cJSON_AddNumberToObject(j, "host_bytes", (double)in.host_bytes);
	cJSON_AddNumberToObject(j, "disk_bytes", (double)in.disk_bytes);
	cJSON_AddNumberToObject(j, "swa_bytes", (double)in.swa_bytes);
	if (in.note[0])
		json_add_text(j, "note", in.note);
	if (!in.kv_full) {
		cJSON_AddNumberToObject(j, "static_bytes", (double)in.static_bytes);
		cJSON_AddNumberToObject(j, "alpha_used", in.alpha_used);
		cJSON_AddNumberToObject(j, "n_span", in.n_span);
		cJSON_AddNumberToObject(j, "n_compressed", in.n_comp);
		cJSON_AddNumberToObject(j, "zoom_per_token", a->zoom_per_token);
		cJSON_AddNumberToObject(j, "zoomed_distinct", a->n_zoom);
		cJSON_AddItemToObject(j, "zoomed_spans", zooms_json(s, &in, a));
	} else {
		cJSON_AddItemToObject(j, "zoomed_spans", cJSON_CreateArray());
	}
	(void)o;
	char *txt = cJSON_PrintUnformatted(j);
	char *safe = txt ? app_json_inert_dup(txt) : NULL;
	cJSON_Delete(j);
	free(txt);
	if (!safe)
		return SEKV_ENOMEM;
	printf("%s\n", safe);
	free(safe);
	return 0;
}

int cmd_ask(int argc, char **argv)
{
	struct app_opts o;
	struct model *m = NULL;
	struct tok *tk = NULL;
	struct session *s = NULL;
	struct conv_answer a = {0};
	char err[1024];
	int64_t id;
	int rc;

	if (app_opts_parse(&o, argc, argv, err, sizeof err)) {
		fprintf(stderr, "sekv ask: %s\n", err);
		return 2;
	}
	if (o.n_args != 2) {
		fprintf(stderr, "usage: sekv ask DOC QUESTION [--kv sekv|full] [--budget F] [--rmax R] [-n N] [--json]\n");
		return 2;
	}
	if (app_parse_doc_id(o.args[0], &id)) {
		fprintf(stderr, "sekv ask: " APP_DOC_ID_BAD "\n", o.args[0]);
		return 2;
	}
	if (!o.args[1][strspn(o.args[1], " \t\r\n")]) {
		fprintf(stderr, "sekv ask: the question is empty\n");
		return 2;
	}
	if (app_check_db(&o, err, sizeof err)) {
		fprintf(stderr, "sekv ask: %s\n", err);
		return 1;
	}
	if (access(o.db, F_OK) != 0) {
		fprintf(stderr, "sekv ask: no library at %s yet: add a document with 'sekv ingest FILE'\n", o.db);
		return 1;
	}
	if ((rc = app_load(&o, &m, &tk, err, sizeof err)) ||
	    (rc = session_open(&s, m, tk, &o, id, err, sizeof err))) {
		fprintf(stderr, "sekv ask: %s\n", err);
		tok_close(tk);
		model_close(m);
		return 1;
	}
	if (!o.quiet) {
		struct session_info in;
		session_get_info(s, &in);
		if (in.note[0])
			fprintf(stderr, "sekv ask: note: %s\n", in.note);
	}
	if (!o.quiet && !o.json)
		conv_set_warn(session_conv(s), warn_stderr, NULL);
	rc = conv_ask(session_conv(s), o.args[1], o.json ? NULL : print_step, NULL, &a, err, sizeof err);
	if (rc && rc != SEKV_EINTR) {
		fprintf(stderr, "sekv ask: %s\n", err);
	} else if (o.json) {
		rc = print_json(s, &o, &a);
	} else {
		printf("\n");
		fflush(stdout);
		if (!o.quiet) {
			struct session_info in;
			session_get_info(s, &in);
			fprintf(stderr, "ask: %d answer tokens, %.1f tokens/s, resident %.1f%% of full KV, "
				"%.1f zoomed spans/token, resume %.3fs\n",
				a.n_gen, a.decode_tps,
				100.0 * (double)a.peak_resident_bytes / (double)(in.full_kv_bytes ? in.full_kv_bytes : 1),
				a.zoom_per_token, in.resume_s);
		}
	}
	conv_answer_free(&a);
	session_close(s);
	tok_close(tk);
	model_close(m);
	return rc ? 1 : 0;
}
