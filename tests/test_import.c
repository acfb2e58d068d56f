/* test_import.c - chat histories with the real model's tokenizer and the
 * sekv binary: the rendering of imported turns in both prompt formats (the
 * text a reader sees, the turn tokens) and in a family whose questions get
 * turns of their own (a vocabulary from tests/data/chat), then a generated conversations.json
 * ingested end to end (two conversations, each a document and a session
 * that `sekv sessions` lists and `sekv ask` continues), --conversation, a
 * malformed file refused by name and line, and an import killed mid-way
 * continued by `sekv ingest --resume` into the same session.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/app.h"
#include "app/import.h"
#include "engine/conv/chat.h"
#include "engine/gguf/gguf.h"
#include "engine/model/model.h"
#include "engine/tok/tokenizer.h"
#include "tests/test.h"

/* Two turns of a conversation, for the renderings. */
static void two_turns(struct import_conv *ic, struct import_turn *tu)
{
	memset(ic, 0, sizeof *ic);
	tu[0] = (struct import_turn){ .question = "Name a red fruit.", .answer = "A strawberry." };
	tu[1] = (struct import_turn){ .question = "And a yellow one?", .answer = "A banana.\nOr a lemon." };
	ic->turn = tu;
	ic->n_turn = 2;
}

/* Renders two turns in format fmt with the model's tokenizer. */
static int render(struct test_ctx *t, enum chat_format fmt, struct chat_tokvec *v, char **text,
		  struct import_turn *tu, struct chat_template *ct)
{
	struct app_opts o;
	struct model *m = NULL;
	struct tok *tk = NULL;
	struct import_conv ic;
	char err[512];
	size_t len = 0;
	int rc;

	app_opts_parse(&o, 0, NULL, err, sizeof err);
	snprintf(o.model, sizeof o.model, "%s", test_model_path());
	if ((rc = app_load(&o, &m, &tk, err, sizeof err)) ||
	    (rc = chat_template_init(ct, model_gguf(m), fmt, tk, err, sizeof err))) {
		T_FAIL(t, "%s", err);
	} else {
		two_turns(&ic, tu);
		if ((rc = import_render(&ic, ct, tk, v, text, &len, err, sizeof err)))
			T_FAIL(t, "import_render: %s", err);
		else if (len != strlen(*text))
			T_FAIL(t, "length %zu of a %zu-byte text", len, strlen(*text));
	}
	tok_close(tk);
	model_close(m);
	return rc;
}

/* The completion format: the turns read as sekv's own questions and
 * answers after the first, BOS first, each answer's tokens counted. */
static void import_render_completion_reads_as_sekv_turns(struct test_ctx *t)
{
	struct chat_tokvec v = { 0 };
	struct chat_template ct;
	struct import_turn tu[2];
	char *text = NULL;

	if (access(test_model_path(), R_OK) != 0)
		T_SKIP(t, "model %s missing (make model)", test_model_path());
	int rc = render(t, CHAT_FORMAT_COMPLETION, &v, &text, tu, &ct);
	int same = !rc && !strcmp(text, "Question: Name a red fruit.\nAnswer: A strawberry.\n\n"
				  "Answer with a quote from the context.\nQuestion: And a yellow one?\n"
				  "Answer: A banana.\nOr a lemon.");
	int bos = !rc && v.n > 0 && v.ids[0] == ct.bos && ct.bos >= 0;
	int counted = tu[0].n_answer_tok >= 3 && tu[1].n_answer_tok >= 5;
	T_CHECKF(t, rc == 0 && same, "text: %s", text ? text : "(none)");
	free(text);
	chat_tokvec_free(&v);
	T_CHECK(t, bos && counted);
}

/* The id a template gives a control piece of its markup, or -1. */
static int32_t ctl_of(const struct chat_template *ct, const char *name)
{
	for (int i = 0; i < ct->n_ctl; i++)
		if (!strcmp(ct->ctl_name[i], name))
			return ct->ctl_id[i];
	return -1;
}

/* The template: user and model turns, and an open user turn at the end
 * (as after any document), so the first question continues it. */
static void import_render_template_ends_in_open_user_turn(struct test_ctx *t)
{
	struct chat_tokvec v = { 0 };
	struct chat_template ct;
	struct import_turn tu[2];
	char *text = NULL;
	int n_open = 0, n_close = 0, last_open = -1;

	if (access(test_model_path(), R_OK) != 0)
		T_SKIP(t, "model %s missing (make model)", test_model_path());
	int rc = render(t, CHAT_FORMAT_TEMPLATE, &v, &text, tu, &ct);
	int same = !rc && !strcmp(text, "user\nName a red fruit.\nmodel\nA strawberry.\nuser\n"
				  "And a yellow one?\nmodel\nA banana.\nOr a lemon.\nuser\n");
	int32_t turn_open = ctl_of(&ct, "<start_of_turn>"), turn_close = ctl_of(&ct, "<end_of_turn>");
	for (int i = 0; i < v.n; i++) {
		n_open += v.ids[i] == turn_open;
		n_close += v.ids[i] == turn_close;
		if (v.ids[i] == turn_open)
			last_open = i;
	}
	/* <start_of_turn>user\n closes the stream: a few tokens after the last opening */
	int open_end = last_open > 0 && v.n - last_open <= 3;
	T_CHECKF(t, rc == 0 && same, "text: %s", text ? text : "(none)");
	free(text);
	chat_tokvec_free(&v);
	T_CHECKF(t, n_open == 5 && n_close == 4 && open_end, "%d openings, %d closings, last at %d of %d",
		 n_open, n_close, last_open, v.n);
}

/* A family that gives each question a turn of its own (Phi-3, through its
 * vocabulary and template in tests/data/chat): the rendering leaves the
 * last answer's turn open and the first question closes it, so no empty
 * user turn lies between: the control pieces read user, end, assistant,
 * end, ... as the template writes them. */
static void import_render_phi3_first_question_closes_answer(struct test_ctx *t)
{
	static const char *const want[] = { "<|user|>", "<|end|>", "<|assistant|>", "<|end|>",
		"<|user|>", "<|end|>", "<|assistant|>", "<|end|>", "<|user|>", "<|end|>",
		"<|assistant|>" };
	struct gguf *g = NULL;
	struct tok *tk = NULL;
	struct chat_template ct;
	struct chat_tokvec v = { 0 };
	struct import_turn tu[2];
	struct import_conv ic;
	char err[512] = "", *text = NULL;
	size_t len = 0, k = 0;
	int rc;

	if ((rc = gguf_open(&g, "tests/data/chat/phi3-vocab.gguf", err, sizeof err)) == 0 &&
	    (rc = tok_open_gguf(&tk, g, err, sizeof err)) == 0)
		rc = chat_template_init(&ct, g, chat_format_of_gguf(g), tk, err, sizeof err);
	two_turns(&ic, tu);
	if (!rc)
		rc = import_render(&ic, &ct, tk, &v, &text, &len, err, sizeof err);
	if (!rc)
		rc = chat_build_turn(&v, &ct, tk, CHAT_START_IN_USER, NULL, "Q?", 2, 1, NULL, err,
				     sizeof err);
	for (int i = 0; !rc && i < v.n; i++) {
		if (!tok_is_control(tk, v.ids[i]))
			continue;
		const char *p = tok_piece(tk, v.ids[i]);
		if (k >= sizeof want / sizeof *want || !p || strcmp(p, want[k]))
			rc = -1;
		k++;
	}
	T_CHECKF(t, rc == 0 && ct.family == CHAT_FAMILY_PHI3 && k == sizeof want / sizeof *want,
		 "rc %d (%s), %zu control pieces, family %s", rc, err, k, ct.name);
	free(text);
	chat_tokvec_free(&v);
	tok_close(tk);
	gguf_close(g);
}

/* Two conversations: "Pets" (two turns) and "Recipes" (one). */
static const char pets_json[] =
	"[{\"title\": \"Pets\", \"current_node\": \"a2\", \"mapping\": {\n"
	" \"r\": {\"id\": \"r\", \"message\": null, \"parent\": null, \"children\": [\"u1\"]},\n"
	" \"u1\": {\"id\": \"u1\", \"parent\": \"r\", \"message\": {\"author\": {\"role\": \"user\"}, \"content\":"
	"  {\"content_type\": \"text\", \"parts\": [\"My cat is called Whiskers and she is three years old.\"]}}},\n"
	" \"a1\": {\"id\": \"a1\", \"parent\": \"u1\", \"message\": {\"author\": {\"role\": \"assistant\"},"
	"  \"content\": {\"content_type\": \"text\", \"parts\": [\"Whiskers is a lovely name for a cat.\"]}}},\n"
	" \"u2\": {\"id\": \"u2\", \"parent\": \"a1\", \"message\": {\"author\": {\"role\": \"user\"}, \"content\":"
	"  {\"content_type\": \"text\", \"parts\": [\"I also have a dog called Rex.\"]}}},\n"
	" \"a2\": {\"id\": \"a2\", \"parent\": \"u2\", \"message\": {\"author\": {\"role\": \"assistant\"},"
	"  \"content\": {\"content_type\": \"text\", \"parts\": [\"Rex sounds like a good dog.\"]}}}}},\n"
	"{\"title\": \"Recipes\", \"current_node\": \"b\", \"mapping\": {\n"
	" \"a\": {\"id\": \"a\", \"parent\": null, \"message\": {\"author\": {\"role\": \"user\"}, \"content\":"
	"  {\"content_type\": \"text\", \"parts\": [\"How long should I boil an egg?\"]}}},\n"
	" \"b\": {\"id\": \"b\", \"parent\": \"a\", \"message\": {\"author\": {\"role\": \"assistant\"},"
	"  \"content\": {\"content_type\": \"text\", \"parts\": [\"Nine minutes for a hard egg.\"]}}}}}]\n";

/* Runs `sekv ARGS --db db -m MODEL` (stderr too when both); its output
 * (caller frees) and exit status. */
static char *sekv(const char *db, int both, int *status, const char *args)
{
	char cmd[2048];

	snprintf(cmd, sizeof cmd, "%s %s --db %s -m %s%s", test_sekv_bin(), args, db,
		 test_model_path(), both ? " 2>&1" : " 2>/dev/null");
	return test_run_cmd(cmd, status);
}

/* `sekv sessions` lists sessions id\tdoc N\ttitle\tK turns... : 1 when a
 * line has title and turns, with its session and document ids. */
static int find_session(const char *list, const char *title, const char *turns, long *ses,
			long *doc)
{
	char pat[128];

	snprintf(pat, sizeof pat, "\t%s\t%s\t", title, turns);
	const char *hit = list ? strstr(list, pat) : NULL;
	if (!hit)
		return 0;
	while (hit > list && hit[-1] != '\n')
		hit--;
	return sscanf(hit, "%ld\tdoc %ld", ses, doc) == 2;
}

static void import_cli_chatgpt_sessions_then_ask(struct test_ctx *t)
{
	char db[512], path[512], args[1024];
	long ses = 0, doc = 0, ses2 = 0, doc2 = 0;
	int st = 0;

	if (access(test_model_path(), R_OK) != 0)
		T_SKIP(t, "model %s missing (make model)", test_model_path());
	snprintf(db, sizeof db, "%s/import_cli.db", test_tmpdir());
	snprintf(path, sizeof path, "%s/conversations.json", test_tmpdir());
	T_CHECK(t, test_write_file(path, pets_json, strlen(pets_json)) == 0);
	snprintf(args, sizeof args, "ingest %s", path);
	char *out = sekv(db, 1, &st, args);
	/* stdout: both documents' ids, after the listing */
	int listed = out && st == 0 && strstr(out, "2 conversations imported") &&
		     strstr(out, "1. Pets: document 1, session 1: 4 messages kept in 2 turns") &&
		     strstr(out, "\n1\n2\n");
	T_CHECKF(t, listed, "ingest (%d): %.600s", st, out ? out : "");
	free(out);
	out = sekv(db, 0, &st, "sessions");
	int both = st == 0 && find_session(out, "Pets", "2 turns", &ses, &doc) &&
		   find_session(out, "Recipes", "1 turn", &ses2, &doc2) && doc != doc2;
	T_CHECKF(t, both, "sessions (%d): %s", st, out ? out : "");
	free(out);
	snprintf(args, sizeof args, "ask %ld \"What is my cat called?\" -n 12 --no-evidence -q", doc);
	out = sekv(db, 0, &st, args);
	T_CHECKF(t, out && st == 0 && strstr(out, "Whiskers"), "ask (%d): %s", st, out ? out : "");
	free(out);
	snprintf(args, sizeof args, "export %ld", ses);
	out = sekv(db, 0, &st, args);
	int exported = out && st == 0 && strstr(out, "## 2. I also have a dog called Rex.") &&
		       strstr(out, "Rex sounds like a good dog.");
	T_CHECKF(t, exported, "export (%d): %s", st, out ? out : "");
	free(out);
	snprintf(args, sizeof args, "ingest %s --conversation recipes -q", path);
	out = sekv(db, 0, &st, args);
	T_CHECKF(t, out && st == 0 && atoi(out) == 3, "--conversation (%d): %s", st, out ? out : "");
	free(out);
	out = sekv(db, 1, &st, "check");
	T_CHECKF(t, out && st == 0, "check (%d): %s", st, out ? out : "");
	free(out);
}

static void import_cli_malformed_names_file_and_line(struct test_ctx *t)
{
	static const char bad[] = "{\"role\": \"user\", \"content\": \"hi\"}\n{\"role\": \"assistant\"}\n";
	char db[512], path[512], args[1024];
	int st = 0;

	snprintf(db, sizeof db, "%s/import_bad.db", test_tmpdir());
	snprintf(path, sizeof path, "%s/bad.jsonl", test_tmpdir());
	T_CHECK(t, test_write_file(path, bad, strlen(bad)) == 0);
	snprintf(args, sizeof args, "ingest %s", path);
	char *out = sekv(db, 1, &st, args);
	int named = out && st != 0 && strstr(out, "bad.jsonl: line 2: a message without \"content\"");
	T_CHECKF(t, named, "exit %d: %s", st, out ? out : "");
	free(out);
	snprintf(path, sizeof path, "%s/plain.txt", test_tmpdir());
	T_CHECK(t, test_write_file(path, "Plain words.\n", 13) == 0);
	snprintf(args, sizeof args, "ingest %s --conversation 1", path);
	out = sekv(db, 1, &st, args);
	named = out && st != 0 && strstr(out, "plain.txt: --conversation: not a chat history");
	T_CHECKF(t, named, "exit %d: %s", st, out ? out : "");
	free(out);
}

/* A JSONL history of n_msg messages (about 1,200 tokens for 40) at path. */
static int write_long_history(const char *path, int n_msg)
{
	static const char *const words[] = { "the", "harbour", "lantern", "keeper", "counts",
					     "ships", "every", "night", "while", "storms", "pass",
					     "over", "granite", "cliffs", "and", "gulls" };
	FILE *f = fopen(path, "w");
	unsigned x = 7;

	if (!f)
		return -1;
	for (int i = 0; i < n_msg; i++) {
		fprintf(f, "{\"role\": \"%s\", \"content\": \"Message %d:", i % 2 ? "assistant" : "user", i);
		for (int w = 0; w < 20; w++, x = x * 1103515245u + 12345u)
			fprintf(f, " %s", words[(x >> 16) % 16]);
		fprintf(f, ".\"}\n");
	}
	return fclose(f) ? -1 : 0;
}

/* An import killed by SIGKILL once a chunk is committed is continued by
 * --resume, which renders the conversation again from its file: the
 * document ends ready with its one session of all the turns. */
static void import_killed_then_resume(struct test_ctx *t)
{
	char db[512], path[512], cmd[4096];
	long ses = 0, doc = 0;
	int st = 0;

	if (access(test_model_path(), R_OK) != 0)
		T_SKIP(t, "model %s missing (make model)", test_model_path());
	snprintf(db, sizeof db, "%s/import_resume.db", test_tmpdir());
	snprintf(path, sizeof path, "%s/long.jsonl", test_tmpdir());
	T_CHECK(t, write_long_history(path, 40) == 0);
	/* kill -9 once `sekv ls` shows some tokens of the document being ingested */
	snprintf(cmd, sizeof cmd, "%s ingest %s --db %s -m %s -t 1 --batch 32 -q & p=$!; i=0; "
		 "while [ $i -lt 1200 ]; do %s ls --db %s 2>/dev/null | "
		 "grep -Eq '^1.(ingesting|incomplete).[1-9]' && break; sleep 0.05; i=$((i+1)); done; "
		 "{ kill -9 $p; wait $p; } 2>/dev/null; "
		 "%s ls --db %s",
		 test_sekv_bin(), path, db, test_model_path(), test_sekv_bin(), db, test_sekv_bin(), db);
	char *out = test_run_cmd(cmd, &st);
	int cut = out && !strncmp(out, "1\tincomplete\t", 13);
	T_CHECKF(t, cut, "not killed mid-way: %s", out ? out : "");
	free(out);
	out = sekv(db, 1, &st, "ingest --resume 1");
	T_CHECKF(t, out && st == 0 && strstr(out, "restored in"), "resume (%d): %.400s", st,
		 out ? out : "");
	free(out);
	out = sekv(db, 0, &st, "sessions");
	int n_line = 0;
	for (const char *c = out; c && *c; c++)
		n_line += *c == '\n';
	int one = st == 0 && n_line == 1 && find_session(out, "long.jsonl", "20 turns", &ses, &doc) &&
		  doc == 1;
	T_CHECKF(t, one, "sessions (%d): %s", st, out ? out : "");
	free(out);
	out = sekv(db, 1, &st, "check");
	T_CHECKF(t, out && st == 0, "check (%d): %s", st, out ? out : "");
	free(out);
}

const struct test_case test_import[] = {
	{ "import_render_completion_reads_as_sekv_turns", import_render_completion_reads_as_sekv_turns },
	{ "import_render_template_ends_in_open_user_turn", import_render_template_ends_in_open_user_turn },
	{ "import_render_phi3_first_question_closes_answer", import_render_phi3_first_question_closes_answer },
	{ "import_cli_chatgpt_sessions_then_ask", import_cli_chatgpt_sessions_then_ask },
	{ "import_cli_malformed_names_file_and_line", import_cli_malformed_names_file_and_line },
	{ "import_killed_then_resume", import_killed_then_resume },
	{ NULL, NULL },
};
