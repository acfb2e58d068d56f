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
#include "engine/conv/conv.h"
#include "engine/base/err.h"
#include "engine/model/model.h"
#include "engine/sekv/sekv.h"
#include "engine/tok/tokenizer.h"
#include "engine/base/utf8.h"

#define ASK_MAX_SPANS_JSON 64 /* zoomed spans listed in --json */
static int print_step(void *ud, const struct conv_step *st)
{
	(void)ud;
	app_print_inert(stdout, st->piece, (size_t)st->piece_len);
	fflush(stdout);
	return 0;
}

/* Adds s as a JSON string, made valid UTF-8 first: cJSON copies bytes as
 * they are, and app_json_inert_dup relies on well-formed text. */
void app_json_add_text(cJSON *o, const char *key, const char *s)
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

const char *const app_tier_name[APP_TIER_N] = {
	"sinks", "anchors", "short_spans", "recent", "summaries", "landmarks", "conversation", "zoomed",
};

void app_tier_bytes(const struct sekv_tier_parts *tp, double conversation, double zoomed,
		    double out[APP_TIER_N])
{
	const double v[APP_TIER_N] = {
		(double)tp->sink, (double)tp->anchor, (double)tp->short_span, (double)tp->recent,
		(double)tp->summary, (double)tp->landmark, conversation, zoomed,
	};

	memcpy(out, v, sizeof v);
}

void app_json_add_device_tier(cJSON *o, double budget_bytes, const double part[APP_TIER_N])
{
	cJSON *dt = cJSON_AddObjectToObject(o, "device_tier");

	if (!dt)
		return;
	cJSON_AddNumberToObject(dt, "budget", budget_bytes);
	for (int i = 0; i < APP_TIER_N; i++)
		cJSON_AddNumberToObject(dt, app_tier_name[i], part[i]);
}

static void warn_stderr(void *ud, const char *msg)
{
	(void)ud;
	app_errorf("sekv ask: note: %s\n", msg);
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
		/* the rows rebuilt: a window of the span (--zoom-blocks) or all;
		 * single rows (--zoom-scan): the stretch from the first to the last */
		cJSON_AddNumberToObject(o, "rows_start", sp->start + z->r0);
		cJSON_AddNumberToObject(o, "rows", z->n);
		cJSON_AddNumberToObject(o, "alpha", z->alpha);
		app_json_add_text(o, "text", text);
		cJSON_AddItemToArray(arr, o);
	}
	return arr;
}

/* tp: the device tier's static parts of the memory the answer was
 * decoded over (before the turn grew it), or NULL without one. */
static int print_json(const struct session *s, const struct conv_answer *a,
		      const struct app_evidence *ev, const struct sekv_tier_parts *tp)
{
	struct session_info in;
	cJSON *j = cJSON_CreateObject();

	session_get_info(s, &in);
	app_json_add_text(j, "answer", a->text ? a->text : "");
	cJSON_AddStringToObject(j, "stopped", conv_stop_name(a->stopped));
	if (a->warn[0])
		app_json_add_text(j, "warning", a->warn);
	if (a->repeats_example)
		cJSON_AddTrueToObject(j, "repeats_example");
	if (in.router)
		cJSON_AddStringToObject(j, "router", in.router);
	if (a->mass_recall >= 0)
		cJSON_AddNumberToObject(j, "mass_recall", a->mass_recall);
	if (a->attn_err >= 0)
		cJSON_AddNumberToObject(j, "attn_err", a->attn_err);
	if (a->mass_oracle >= 0)
		cJSON_AddNumberToObject(j, "mass_oracle", a->mass_oracle);
	cJSON_AddNumberToObject(j, "doc", (double)in.doc_id);
	if (session_stored_id(s))
		cJSON_AddNumberToObject(j, "session", (double)session_stored_id(s));
	cJSON_AddStringToObject(j, "method", in.method);
	cJSON_AddNumberToObject(j, "budget", in.kv_full ? 1.0 : in.budget);
	cJSON_AddNumberToObject(j, "rmax", in.r_use);
	cJSON_AddNumberToObject(j, "length", in.n_tok);
	cJSON_AddNumberToObject(j, "memory_tokens", in.n_tok_memory);
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
	cJSON_AddNumberToObject(j, "session_disk_bytes", (double)in.session_disk_bytes);
	cJSON_AddNumberToObject(j, "swa_bytes", (double)in.swa_bytes);
	cJSON_AddNumberToObject(j, "kv_read_bytes_per_token", a->kv_read_per_token);
	if (a->question_host_bytes)
		cJSON_AddNumberToObject(j, "question_host_bytes", (double)a->question_host_bytes);
	if (in.note[0])
		app_json_add_text(j, "note", in.note);
	/* SeKV's static part of the memory the answer was decoded over (the
	 * turn grew the session's memory since) */
	if (!in.kv_full)
		cJSON_AddNumberToObject(j, "static_bytes", tp ? (double)(tp->sink + tp->anchor +
			tp->short_span + tp->recent + tp->summary + tp->landmark) : (double)in.static_bytes);
	if (in.mem) {
		/* the device tier at the answer's peak, by kind of row (bytes;
		 * they sum to resident_bytes) */
		if (tp) {
			double part[APP_TIER_N];
			app_tier_bytes(tp, (double)a->peak_tail_bytes, (double)a->peak_recon_bytes, part);
			app_json_add_device_tier(j, in.budget * (double)in.full_kv_bytes, part);
		}
		cJSON_AddNumberToObject(j, "alpha_used", in.alpha_used);
		cJSON_AddNumberToObject(j, "n_span", in.n_span);
		cJSON_AddNumberToObject(j, "n_compressed", in.n_comp);
		cJSON_AddNumberToObject(j, "zoom_per_token", a->zoom_per_token);
		if (a->alpha_q[0] >= 0) {
			cJSON *q = cJSON_AddArrayToObject(j, "alpha_p10_p50_p90");
			for (int i = 0; q && i < 3; i++)
				cJSON_AddItemToArray(q, cJSON_CreateNumber(a->alpha_q[i]));
		}
		cJSON_AddNumberToObject(j, "zoomed_distinct", a->n_zoom);
		cJSON_AddItemToObject(j, "zoomed_spans", zooms_json(s, &in, a));
	} else {
		cJSON_AddItemToObject(j, "zoomed_spans", cJSON_CreateArray());
	}
	if (ev->on)
		cJSON_AddItemToObject(j, "evidence", app_evidence_json(ev));
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
	struct app_evidence ev = {0};
	char err[1024];
	int64_t id = 0;
	struct sekv_tier_parts parts;
	int rc, has_parts = 0;

	if (app_opts_parse(&o, argc, argv, err, sizeof err)) {
		app_errorf("sekv ask: %s\n", err);
		return 2;
	}
	/* with --session the document is the session's */
	int n_doc = o.session_id ? 0 : 1;
	if (o.n_args != n_doc + 1) {
		app_errorf("usage: sekv ask DOC QUESTION | sekv ask --session ID QUESTION [options]: "
			   "see 'sekv ask --help'\n");
		return 2;
	}
	const char *question = o.args[n_doc];
	if (n_doc && app_parse_doc_id(o.args[0], &id)) {
		app_errorf("sekv ask: " APP_DOC_ID_BAD "\n", o.args[0]);
		return 2;
	}
	if (!question[strspn(question, " \t\r\n")]) {
		app_errorf("sekv ask: the question is empty\n");
		return 2;
	}
	if (app_check_db(&o, err, sizeof err)) {
		app_errorf("sekv ask: %s\n", err);
		return 1;
	}
	if (access(o.db, F_OK) != 0) {
		app_errorf("sekv ask: no library at %s yet: add a document with 'sekv ingest FILE'\n", o.db);
		return 1;
	}
	if ((rc = app_load(&o, &m, &tk, err, sizeof err)) ||
	    (rc = session_open_stored(&s, m, tk, &o, n_doc ? id : 0, o.session_id, err, sizeof err))) {
		app_errorf("sekv ask: %s\n", err);
		tok_close(tk);
		model_close(m);
		return 1;
	}
	app_template_note("ask", m, tk, o.quiet);
	if (!o.quiet) {
		struct session_info in;
		session_get_info(s, &in);
		if (in.note[0])
			app_errorf("sekv ask: note: %s\n", in.note);
	}
	if (!o.quiet && !o.json)
		conv_set_warn(session_conv(s), warn_stderr, NULL);
	{
		struct session_info in;
		struct sekv_params dp;
		session_get_info(s, &in);
		sekv_default_params(&dp);
		if ((has_parts = in.mem != NULL))
			sekv_mem_tier_parts(in.mem, dp.n_sink, &parts);
	}
	if ((rc = app_evidence_begin(&ev, &o, s, m, tk, err, sizeof err)) == 0) {
		rc = conv_ask(session_conv(s), question, o.json ? NULL : print_step, NULL, &a,
			      err, sizeof err);
		if (!rc || rc == SEKV_EINTR) {
			int rc2 = app_evidence_end(&ev, s, tk, err, sizeof err);
			rc = rc2 ? rc2 : rc;
		}
	}
	if (!rc || rc == SEKV_EINTR) {
		char e3[512];
		if (session_record_turn(s, question, &a, &ev, e3, sizeof e3))
			app_errorf("sekv ask: note: the answer was not saved in the library: %s\n", e3);
	}
	if (rc && rc != SEKV_EINTR) {
		app_errorf("sekv ask: %s\n", err);
	} else if (o.json) {
		rc = print_json(s, &a, &ev, has_parts ? &parts : NULL);
	} else {
		printf("\n");
		app_evidence_print(&ev, stdout);
		fflush(stdout);
		if (a.repeats_example)
			app_errorf("ask: note: the answer repeats the worked example (the document's first "
				   "words): the model likely found no answer\n");
		if (a.stopped != CONV_STOP_LENGTH && (!a.text || !a.text[strspn(a.text, " \t\n")]))
			app_errorf("ask: note: the answer is empty: the model ended its answer at once "
				   "(it likely found no answer)\n");
		if (a.stopped == CONV_STOP_LENGTH)
			app_errorf("ask: answer cut at %d tokens (%s)\n", a.n_gen,
				   a.n_cap < o.n_predict ? "the model's context ends there" : "-n");
		if (!o.quiet) {
			struct session_info in;
			session_get_info(s, &in);
			char zooms[48] = "";
			if (in.mem)
				snprintf(zooms, sizeof zooms, "%.1f zooms/token (span, layer, KV head), ",
					 a.zoom_per_token);
			app_errorf("ask: %d answer tokens, %.1f tokens/s, resident %.1f%% of the document's "
				   "full KV (%s), "
				"%sresume %.3fs, session %lld\n",
				a.n_gen, a.decode_tps,
				100.0 * (double)a.peak_resident_bytes / (double)(in.full_kv_bytes ? in.full_kv_bytes : 1),
				in.method, zooms, in.resume_s, (long long)session_stored_id(s));
		}
	}
	conv_answer_free(&a);
	app_evidence_free(&ev);
	session_close(s);
	tok_close(tk);
	model_close(m);
	return rc ? 1 : 0;
}
