/* test_chat.c - prompt formats and stop rules: the family a
 * tokenizer.chat_template is recognised as (every family, unknown and
 * empty templates), the format a GGUF calls for, stored format names, the
 * stop rules (chat_stop_feed) over synthetic streams of pieces, and each
 * family's turns against goldens: tools/gen_chat_goldens.py renders a
 * conversation with Jinja2 through the template and tokenizes it with
 * llama.cpp (tests/data/chat); chat_build_turn's ids must spell the same
 * text and be the same ids. The completion format's token sequences are
 * checked in test_conv.c. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "engine/conv/chat.h"
#include "engine/base/err.h"
#include "engine/gguf/gguf.h"
#include "engine/tok/tokenizer.h"
#include "tests/gguf_writer.h"
#include "tests/test.h"

/* A GGUF holding only keys: the architecture and, when tmpl is not NULL,
 * tokenizer.chat_template = tmpl. Returns the format it calls for, or -1. */
static int format_of(const char *tmpl)
{
	struct gw_buf b = {0};
	struct gguf *g = NULL;
	char err[256];
	int f = -1;

	gw_header(&b, 3, 0, tmpl ? 2 : 1);
	gw_kv_str(&b, "general.architecture", "gemma3");
	if (tmpl)
		gw_kv_str(&b, "tokenizer.chat_template", tmpl);
	gw_pad(&b, 32);
	if (!b.oom && gguf_open_buffer(&g, b.p, b.n, "fmt.gguf", err, sizeof err) == 0)
		f = (int)chat_format_of_gguf(g);
	gguf_close(g);
	free(b.p);
	return f;
}

static void chat_format_from_gguf(struct test_ctx *t)
{
	T_CHECK(t, format_of("{{ '<|im_start|>' + m['role'] }}") == CHAT_FORMAT_TEMPLATE);
	/* a template of no family sekv knows gets the completion format */
	T_CHECK(t, format_of("{% for m in messages %}{{ m.content }}{% endfor %}") ==
		CHAT_FORMAT_COMPLETION);
	T_CHECK(t, format_of(NULL) == CHAT_FORMAT_COMPLETION);
	T_CHECK(t, format_of("") == CHAT_FORMAT_COMPLETION);
	T_CHECK(t, chat_format_of_gguf(NULL) == CHAT_FORMAT_COMPLETION);
}

static void chat_format_names_round_trip(struct test_ctx *t)
{
	enum chat_format f = CHAT_FORMAT_COMPLETION;

	T_CHECK(t, chat_format_parse("completion", &f) == 0 && f == CHAT_FORMAT_COMPLETION);
	T_CHECK(t, chat_format_parse(chat_format_name(CHAT_FORMAT_TEMPLATE), &f) == 0 &&
		f == CHAT_FORMAT_TEMPLATE);
	/* a row from before formats were stored: the chat template */
	f = CHAT_FORMAT_COMPLETION;
	T_CHECK(t, chat_format_parse(NULL, &f) == 0 && f == CHAT_FORMAT_TEMPLATE);
	f = CHAT_FORMAT_COMPLETION;
	T_CHECK(t, chat_format_parse("", &f) == 0 && f == CHAT_FORMAT_TEMPLATE);
	T_CHECK(t, chat_format_parse("Completion", &f) == SEKV_EFORMAT);
}

/* Feeds pieces ("|"-separated) through the stop rules; *shown gets what a
 * stream would have shown, the return is 1 when a stop rule ended it,
 * *at the index of the piece that ended it. */
static int run_stop(enum chat_format fmt, const char *pieces, char *shown, int *at)
{
	struct chat_stop s;
	char out[256 + CHAT_STOP_HOLD];
	size_t n_shown = 0;
	int i = 0;

	chat_stop_init(&s, fmt);
	*at = -1;
	for (const char *p = pieces; ; i++) {
		const char *bar = strchr(p, '|');
		int n = bar ? (int)(bar - p) : (int)strlen(p);
		int k = chat_stop_feed(&s, p, n, out);
		memcpy(shown + n_shown, out, (size_t)k);
		n_shown += (size_t)k;
		if (s.done && *at < 0)
			*at = i;
		if (!bar)
			break;
		p = bar + 1;
	}
	shown[n_shown] = 0;
	return s.done;
}

struct stop_case {
	enum chat_format fmt;
	const char *pieces;  /* "|" between pieces */
	const char *shown;   /* what may be shown */
	int done;            /* a stop rule ended it */
	int at;              /* piece that ended it, -1 */
};

static void chat_stop_rules_on_synthetic_streams(struct test_ctx *t)
{
	static const struct stop_case c[] = {
		/* a newline after visible text ends a base model's answer */
		{ CHAT_FORMAT_COMPLETION, " Mira| Olsen|.|\n|\n|Question", "Mira Olsen.", 1, 3 },
		/* the newline inside a piece: text before it shows */
		{ CHAT_FORMAT_COMPLETION, " rye bread.\nThe", "rye bread.", 1, 0 },
		/* leading blank lines and spaces are held back and dropped */
		{ CHAT_FORMAT_COMPLETION, "\n|\n|  |noon|\n", "noon", 1, 4 },
		/* a new question on the same line: "Question:" never shows */
		{ CHAT_FORMAT_COMPLETION, "1998 |Quest|ion|:| Who", "1998 ", 1, 3 },
		/* held back until decided, then shown */
		{ CHAT_FORMAT_COMPLETION, "Que|bec", "Quebec", 0, -1 },
		/* a partial stop word when the answer ends otherwise is dropped */
		{ CHAT_FORMAT_COMPLETION, "four|Qu", "four", 0, -1 },
		/* the answer itself starting with the stop word is empty */
		{ CHAT_FORMAT_COMPLETION, " Question:", "", 1, 0 },
		/* the template format has no text stop rules */
		{ CHAT_FORMAT_TEMPLATE, "a\n|b", "a\nb", 0, -1 },
		/* a leading role word is dropped, a word that only starts like one is not */
		{ CHAT_FORMAT_TEMPLATE, "us|er|\n|Mira", "Mira", 0, -1 },
		{ CHAT_FORMAT_TEMPLATE, "\nmodel\nThe bakery", "The bakery", 0, -1 },
		{ CHAT_FORMAT_TEMPLATE, "users| of", "users of", 0, -1 },
		/* ChatML, Llama 3 and Phi-3 name the model's role "assistant" */
		{ CHAT_FORMAT_TEMPLATE, "assist|ant|\nIt opened", "It opened", 0, -1 },
		{ CHAT_FORMAT_TEMPLATE, "assistance is free", "assistance is free", 0, -1 },
		{ CHAT_FORMAT_COMPLETION, "user\nMira", "user", 1, 0 },
	};
	char shown[512];
	int at;

	for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
		int done = run_stop(c[i].fmt, c[i].pieces, shown, &at);
		T_CHECKF(t, strcmp(shown, c[i].shown) == 0 && done == c[i].done && at == c[i].at,
			 "case %zu: shown '%s' done %d at %d", i, shown, done, at);
	}
}

/* The worked example quotes the first line with 3 words: at most
 * CHAT_EXAMPLE_WORDS words, white space runs become one space, cut on a
 * word when out is small; no such line gives "". */
static void chat_example_quotes_first_real_line(struct test_ctx *t)
{
	static const struct {
		const char *text, *want;
		size_t cap;
	} c[] = {
		{ "\n   \nTitle\n\tGNU  GENERAL PUBLIC LICENSE\nVersion 3", "GNU GENERAL PUBLIC LICENSE", 64 },
		{ "one two three four five six seven eight nine ten", "one two three four five six seven eight", 64 },
		{ "alpha beta gamma delta", "alpha beta", 16 },
		{ "a b\n\nc d\n", "", 64 },
		{ "", "", 64 },
		{ "x y z", "x y z", 64 },
	};
	char out[64];

	for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
		int n = chat_example_of_text(c[i].text, strlen(c[i].text), out, c[i].cap);
		T_CHECKF(t, !strcmp(out, c[i].want) && n == (int)strlen(c[i].want),
			 "case %zu: \"%s\" (%d), want \"%s\"", i, out, n, c[i].want);
	}
}

/* Only a copy of the whole example counts, up to spacing and a final dot. */
static void chat_repeats_example_only_whole_copies(struct test_ctx *t)
{
	const char *ex = "GNU GENERAL PUBLIC LICENSE Version 3";

	T_CHECK(t, chat_repeats_example("GNU GENERAL PUBLIC LICENSE Version 3", ex));
	T_CHECK(t, chat_repeats_example("  GNU GENERAL  PUBLIC LICENSE\tVersion 3.", ex));
	T_CHECK(t, !chat_repeats_example("Version 3", ex));
	T_CHECK(t, !chat_repeats_example("GNU GENERAL PUBLIC LICENSE Version 3, 29 June 2007", ex));
	T_CHECK(t, !chat_repeats_example("GNU General Public License Version 3", ex));
	T_CHECK(t, !chat_repeats_example("", ex) && chat_repeats_example("", ""));
}

/* Templates by the markup they write, as real templates spell it (single
 * and double quotes, Jinja concatenation), and those sekv does not know. */
static void chat_family_recognised_from_template(struct test_ctx *t)
{
	static const struct {
		const char *tmpl;
		enum chat_family fam;
		const char *variant;
	} c[] = {
		{ "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}",
		  CHAT_FAMILY_CHATML, "chatml" },
		/* Phi-4 and SmolVLM use <|im_start|> but are not ChatML */
		{ "{{ '<|im_start|>' + role + '<|im_sep|>' + content + '<|im_end|>' }}", CHAT_FAMILY_UNKNOWN, "" },
		{ "<|im_start|>{{ role }}: {{ content }}<end_of_utterance>", CHAT_FAMILY_UNKNOWN, "" },
		{ "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
		  "message['content'] | trim + '<|eot_id|>' %}", CHAT_FAMILY_LLAMA3, "llama3" },
		{ "{{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}",
		  CHAT_FAMILY_GEMMA, "gemma" },
		{ "{{'<|user|>' + '\\n' + message['content'] + '<|end|>' + '\\n' + '<|assistant|>' + '\\n'}}",
		  CHAT_FAMILY_PHI3, "phi3" },
		/* Zephyr: <|user|> and <|assistant|> without <|end|> */
		{ "{{ '<|user|>\\n' + message['content'] + eos_token }}{{ '<|assistant|>\\n' }}",
		  CHAT_FAMILY_UNKNOWN, "" },
		{ "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
		  "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}", CHAT_FAMILY_LLAMA2, "llama2" },
		{ "{{ '[INST] ' + message['content'] + ' [/INST]' }}{{ message['content'] + eos_token }}",
		  CHAT_FAMILY_MISTRAL, "mistral" },
		{ "{{- ' [INST] ' + message['content'] + ' [/INST]' }}{{- ' ' + message['content'] + eos_token }}",
		  CHAT_FAMILY_MISTRAL, "mistral-v1" },
		{ "{{- \" [INST] \" + message[\"content\"] + \" [/INST]\" }}", CHAT_FAMILY_MISTRAL, "mistral-v1" },
		{ "{{- '[INST] ' + message['content'] + '[/INST]' }}{{- ' ' + message['content']|trim + eos_token}}",
		  CHAT_FAMILY_MISTRAL, "mistral-v3" },
		{ "{{- \"[INST]\" + message[\"content\"] + \"[/INST]\" }}", CHAT_FAMILY_MISTRAL,
		  "mistral-v3-tekken" },
		{ "{{- '[SYSTEM_PROMPT] ' + system_message + '[/SYSTEM_PROMPT]' }}{{- '[INST] ' + "
		  "message['content'] + '[/INST]' }}", CHAT_FAMILY_MISTRAL, "mistral-v7" },
		{ "{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}{{- '[INST]' + "
		  "message['content'] + '[/INST]' }}", CHAT_FAMILY_MISTRAL, "mistral-v7-tekken" },
		{ "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\\n{% endfor %}",
		  CHAT_FAMILY_UNKNOWN, "" },
		{ "", CHAT_FAMILY_NONE, "" },
	};
	const char *variant = NULL;

	for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
		enum chat_family f = chat_family_of_template(c[i].tmpl, strlen(c[i].tmpl), &variant);
		T_CHECKF(t, f == c[i].fam && !strcmp(variant, c[i].variant),
			 "case %zu: family %d \"%s\", want %d \"%s\"", i, (int)f, variant, (int)c[i].fam,
			 c[i].variant);
	}
	T_CHECK(t, chat_family_of_template(NULL, 0, &variant) == CHAT_FAMILY_NONE && !*variant);
	/* only len bytes count: the template need not be NUL-terminated */
	T_CHECK(t, chat_family_of_template("<start_of_turn>", 5, NULL) == CHAT_FAMILY_UNKNOWN);
}

/* ---- goldens (tests/data/chat) --------------------------------------- */

#define CHAT_GOLDEN_DIR "tests/data/chat"

/* ids as text: control pieces by name, the rest as decoded; with a dummy
 * prefix the space that starts each run of text after BOS or a control
 * piece (or at the start) is the tokenizer's, not the text's, and is
 * dropped (llama.cpp likewise puts it before every such run). Returns a
 * malloc'ed string, NULL when out of memory. */
static char *spell(const struct tok *tk, const struct chat_template *ct, const int32_t *ids, int n)
{
	size_t cap = 64, len = 0;
	char *s = malloc(cap), piece[1024];
	int run_start = 1;

	for (int i = 0; s && i < n; i++) {
		const char *p = piece;
		int k;
		if (tok_is_control(tk, ids[i])) {
			p = tok_piece(tk, ids[i]);
			k = p ? (int)strlen(p) : 0;
			run_start = 1;
		} else {
			k = tok_token_text(tk, ids[i], piece, (int)sizeof piece);
			if (k > 0 && run_start && ct->dummy_prefix && piece[0] == ' ') {
				p++;
				k--;
			}
			run_start = 0;
		}
		if (k < 0)
			k = 0;
		if (len + (size_t)k + 1 > cap) {
			char *q = realloc(s, cap = (len + (size_t)k + 1) * 2);
			if (!q) {
				free(s);
				return NULL;
			}
			s = q;
		}
		memcpy(s + len, p, (size_t)k);
		len += (size_t)k;
	}
	if (s)
		s[len] = 0;
	return s;
}

/* The first index where v and the JSON array ids differ; -1 when equal. */
static int ids_differ(const struct chat_tokvec *v, const cJSON *ids)
{
	int n = cJSON_GetArraySize(ids), i = 0;

	for (const cJSON *e = ids ? ids->child : NULL; e && i < v->n; e = e->next, i++)
		if (!cJSON_IsNumber(e) || (int32_t)e->valuedouble != v->ids[i])
			return i;
	return n == v->n ? -1 : i;
}

/* Compares v with one rendered conversation of the golden: its text, and
 * its ids where llama.cpp's are there. */
static void check_conv(struct test_ctx *t, const char *name, const char *what,
		       const struct tok *tk, const struct chat_template *ct,
		       const struct chat_tokvec *v, const cJSON *conv)
{
	const char *want = cJSON_GetStringValue(cJSON_GetObjectItem(conv, "rendered"));
	const cJSON *ids = cJSON_GetObjectItem(conv, "ids_llamacpp");
	char *got = spell(tk, ct, v->ids, v->n);

	if (!want || !got) {
		T_FAIL(t, "%s: %s: no rendered string or out of memory", name, what);
	} else if (strcmp(got, want)) {
		size_t k = 0;
		while (got[k] && got[k] == want[k])
			k++;
		T_FAIL(t, "%s: %s: text differs at byte %zu: got \"%.40s\", Jinja2 \"%.40s\"", name, what,
		       k, got + k, want + k);
	} else if (cJSON_IsArray(ids)) {
		int i = ids_differ(v, ids);
		const cJSON *e = cJSON_GetArrayItem(ids, i);
		if (i >= 0)
			T_FAIL(t, "%s: %s: id %d of %d differs: %d, llama.cpp %d", name, what, i, v->n,
			       i < v->n ? v->ids[i] : -1, e ? (int)e->valuedouble : -1);
	}
	free(got);
}

static const char *jstr(const cJSON *j, const char *key)
{
	const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(j, key));
	return s ? s : "";
}

/* The golden case `name`: chat_build_turn renders its document
 * conversation (system + document at CHAT_START_STREAM, the first question
 * CHAT_START_IN_USER, the answer by chat_push_answer, the second question
 * CHAT_START_AFTER_MODEL) and its prompt conversation (system + question
 * at CHAT_START_STREAM); end pieces (may be NULL-padded) must end an
 * answer. */
static void golden_case(struct test_ctx *t, const char *name, const char *const *ends)
{
	char path[256], err[512];
	struct gguf *g = NULL;
	struct tok *tk = NULL;
	struct chat_template ct;
	struct chat_tokvec v = { 0 }, p = { 0 };
	int rc;

	snprintf(path, sizeof path, CHAT_GOLDEN_DIR "/%s.json", name);
	cJSON *j = test_json_load(t, path);
	if (!j)
		return;
	const char *vocab = jstr(j, "vocab"), *tmpl = jstr(j, "template");
	if (!strcmp(vocab, "assets/models/gemma-3-270m-q4_k_m.gguf"))
		vocab = test_model_path();
	if (access(vocab, R_OK) != 0) {
		cJSON_Delete(j);
		T_SKIP(t, "vocabulary %s missing (make model)", vocab);
	}
	if ((rc = gguf_open(&g, vocab, err, sizeof err)) == 0)
		rc = tok_open_gguf(&tk, g, err, sizeof err);
	gguf_close(g);
	if (rc == SEKV_EUNSUP) {
		cJSON_Delete(j);
		T_SKIP(t, "%s", err);
	}
	const cJSON *doc = cJSON_GetObjectItem(j, "document_conversation");
	const char *sys = jstr(j, "system"), *d = jstr(j, "document"), *q1 = jstr(j, "question1"),
		*a1 = jstr(j, "answer1"), *q2 = jstr(j, "question2");
	if (!rc)
		rc = chat_template_init_text(&ct, tmpl, strlen(tmpl), CHAT_FORMAT_TEMPLATE, tk, err,
					     sizeof err);
	if (!rc && (strcmp(ct.name, jstr(j, "variant")) ||
		    ct.alternates != cJSON_IsTrue(cJSON_GetObjectItem(doc, "alternating")))) {
		rc = -1;
		snprintf(err, sizeof err, "recognised as %s (alternating %d), the golden is %s",
			 ct.name, ct.alternates, jstr(j, "variant"));
	}
	if (!rc)
		rc = chat_build_turn(&v, &ct, tk, CHAT_START_STREAM, sys, d, strlen(d), 0, NULL, err,
				     sizeof err);
	if (!rc)
		rc = chat_build_turn(&v, &ct, tk, CHAT_START_IN_USER, NULL, q1, strlen(q1), 1, NULL,
				     err, sizeof err);
	if (!rc)
		rc = chat_push_answer(&v, &ct, tk, a1, strlen(a1), err, sizeof err);
	if (!rc)
		rc = chat_build_turn(&v, &ct, tk, CHAT_START_AFTER_MODEL, NULL, q2, strlen(q2), 1, NULL,
				     err, sizeof err);
	if (!rc)
		rc = chat_build_turn(&p, &ct, tk, CHAT_START_STREAM, sys, q1, strlen(q1), 1, NULL, err,
				     sizeof err);
	if (rc) {
		T_FAIL(t, "%s: %s", name, err);
	} else {
		check_conv(t, name, "document conversation", tk, &ct, &v, doc);
		check_conv(t, name, "prompt conversation", tk, &ct, &p,
			   cJSON_GetObjectItem(j, "prompt_conversation"));
		for (int i = 0; ends[i]; i++)
			if (!chat_is_end(&ct, tok_piece_id(tk, ends[i])))
				T_FAIL(t, "%s: %s does not end an answer", name, ends[i]);
		/* text never ends one: the question's own tokens */
		for (int i = p.n - 1; i >= 0 && !tok_is_control(tk, p.ids[i]); i--)
			if (chat_is_end(&ct, p.ids[i]))
				T_FAIL(t, "%s: text id %d ends an answer", name, p.ids[i]);
	}
	chat_tokvec_free(&v);
	chat_tokvec_free(&p);
	tok_close(tk);
	cJSON_Delete(j);
}

#define ENDS(...) (const char *const[]){ __VA_ARGS__, NULL }

static void chat_gemma_vs_jinja_golden(struct test_ctx *t)
{
	golden_case(t, "gemma", ENDS("<end_of_turn>", "<eos>", "<start_of_turn>"));
}

static void chat_chatml_smollm2_vs_jinja_golden(struct test_ctx *t)
{
	golden_case(t, "smollm2", ENDS("<|im_end|>", "<|endoftext|>"));
}

static void chat_chatml_qwen2_vs_jinja_golden(struct test_ctx *t)
{
	golden_case(t, "qwen2", ENDS("<|im_end|>", "<|endoftext|>"));
}

static void chat_llama3_vs_jinja_golden(struct test_ctx *t)
{
	golden_case(t, "llama3", ENDS("<|eot_id|>", "<|end_of_text|>", "<|eom_id|>"));
}

static void chat_llama2_vs_jinja_golden(struct test_ctx *t)
{
	golden_case(t, "llama2", ENDS("</s>"));
}

static void chat_mistral_vs_jinja_golden(struct test_ctx *t)
{
	golden_case(t, "mistral", ENDS("</s>"));
}

static void chat_mistral_v1_vs_jinja_golden(struct test_ctx *t)
{
	golden_case(t, "mistral-v1", ENDS("</s>"));
}

static void chat_mistral_v3_vs_jinja_golden(struct test_ctx *t)
{
	golden_case(t, "mistral-v3", ENDS("</s>"));
}

static void chat_mistral_v3_tekken_vs_jinja_golden(struct test_ctx *t)
{
	golden_case(t, "mistral-v3-tekken", ENDS("</s>"));
}

static void chat_mistral_v7_vs_jinja_golden(struct test_ctx *t)
{
	golden_case(t, "mistral-v7", ENDS("</s>"));
}

static void chat_phi3_vs_jinja_golden(struct test_ctx *t)
{
	golden_case(t, "phi3", ENDS("<|end|>", "<|endoftext|>", "<|user|>"));
}

/* A vocabulary without the family's control piece is SEKV_ENOTFOUND
 * naming it; a template sekv does not know gets the completion format and
 * a note, or, when the template format is asked for, the markup of the
 * vocabulary's turn pieces; without them SEKV_EUNSUP. */
static void chat_template_init_fallbacks(struct test_ctx *t)
{
	static const char unknown[] = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n"
		"{% endfor %}";
	const char *chatml = "{{ '<|im_start|>' + m['role'] + '\\n' }}";
	struct gguf *g = NULL;
	struct tok *phi = NULL, *spm = NULL;
	struct chat_template ct;
	char err[512];
	int rc;

	if ((rc = gguf_open(&g, CHAT_GOLDEN_DIR "/phi3-vocab.gguf", err, sizeof err)) == 0)
		rc = tok_open_gguf(&phi, g, err, sizeof err);
	gguf_close(g);
	g = NULL;
	if (!rc && (rc = gguf_open(&g, "tests/data/tokenizer/ggml-vocab-llama-spm.gguf", err,
				   sizeof err)) == 0)
		rc = tok_open_gguf(&spm, g, err, sizeof err);
	gguf_close(g);
	if (rc) {
		T_FAIL(t, "%s", err);
		goto out;
	}
	rc = chat_template_init_text(&ct, chatml, strlen(chatml), CHAT_FORMAT_TEMPLATE, phi, err,
				     sizeof err);
	if (rc != SEKV_ENOTFOUND || !strstr(err, "<|im_start|>")) {
		T_FAIL(t, "missing piece: %d %s", rc, err);
		goto out;
	}
	rc = chat_template_init_text(&ct, unknown, strlen(unknown), CHAT_FORMAT_COMPLETION, phi, err,
				     sizeof err);
	if (rc || ct.fmt != CHAT_FORMAT_COMPLETION || !strstr(ct.note, "completion format") ||
	    strchr(ct.note, '\n') || !chat_is_end(&ct, tok_piece_id(phi, "<|end|>"))) {
		T_FAIL(t, "unknown, completion: %d fmt %d note \"%s\"", rc, (int)ct.fmt, ct.note);
		goto out;
	}
	rc = chat_template_init_text(&ct, unknown, strlen(unknown), CHAT_FORMAT_TEMPLATE, phi, err,
				     sizeof err);
	if (rc || ct.family != CHAT_FAMILY_PHI3 || !strstr(ct.note, "phi3")) {
		T_FAIL(t, "unknown, template: %d %s note \"%s\"", rc, ct.name, ct.note);
		goto out;
	}
	rc = chat_template_init_text(&ct, NULL, 0, CHAT_FORMAT_TEMPLATE, spm, err, sizeof err);
	if (rc != SEKV_EUNSUP)
		T_FAIL(t, "no template, no turn pieces: %d", rc);
	rc = chat_template_init_text(&ct, NULL, 0, CHAT_FORMAT_COMPLETION, spm, err, sizeof err);
	if (rc || ct.note[0] || ct.n_end != 1 || !chat_is_end(&ct, tok_eos(spm)))
		T_FAIL(t, "no template, completion: %d note \"%s\" %d ends", rc, ct.note, ct.n_end);
out:
	tok_close(phi);
	tok_close(spm);
}

const struct test_case test_chat[] = {
	{ "chat_family_recognised_from_template", chat_family_recognised_from_template },
	{ "chat_format_from_gguf", chat_format_from_gguf },
	{ "chat_template_init_fallbacks", chat_template_init_fallbacks },
	{ "chat_gemma_vs_jinja_golden", chat_gemma_vs_jinja_golden },
	{ "chat_chatml_smollm2_vs_jinja_golden", chat_chatml_smollm2_vs_jinja_golden },
	{ "chat_chatml_qwen2_vs_jinja_golden", chat_chatml_qwen2_vs_jinja_golden },
	{ "chat_llama3_vs_jinja_golden", chat_llama3_vs_jinja_golden },
	{ "chat_llama2_vs_jinja_golden", chat_llama2_vs_jinja_golden },
	{ "chat_mistral_vs_jinja_golden", chat_mistral_vs_jinja_golden },
	{ "chat_mistral_v1_vs_jinja_golden", chat_mistral_v1_vs_jinja_golden },
	{ "chat_mistral_v3_vs_jinja_golden", chat_mistral_v3_vs_jinja_golden },
	{ "chat_mistral_v3_tekken_vs_jinja_golden", chat_mistral_v3_tekken_vs_jinja_golden },
	{ "chat_mistral_v7_vs_jinja_golden", chat_mistral_v7_vs_jinja_golden },
	{ "chat_phi3_vs_jinja_golden", chat_phi3_vs_jinja_golden },
	{ "chat_format_names_round_trip", chat_format_names_round_trip },
	{ "chat_stop_rules_on_synthetic_streams", chat_stop_rules_on_synthetic_streams },
	{ "chat_example_quotes_first_real_line", chat_example_quotes_first_real_line },
	{ "chat_repeats_example_only_whole_copies", chat_repeats_example_only_whole_copies },
	{ NULL, NULL },
};
