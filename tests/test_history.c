/* test_history.c - chat histories read into conversations (app/history.c)
 * and made turns (app/import.c), without a model: a generated ChatGPT
 * conversations.json whose tree has an edited message (two children, the
 * current node on the second branch), a root without a message, a hidden
 * system message, code and tool output, an image part and non-ASCII text;
 * JSONL; transcripts; detection; --conversation; and malformed files,
 * each refused with a message naming the file and the place.
 */
#include <stdlib.h>
#include <string.h>

#include "app/history.h"
#include "app/import.h"
#include "engine/base/err.h"
#include "tests/test.h"

/* Three conversations: the tree above, "Recipes" (linear), one untitled. */
static const char chatgpt_json[] =
	"[{\"title\": \"Trip to K\\u00f6ln \\u2615\", \"current_node\": \"a2b\", \"mapping\": {\n"
	" \"root\": {\"id\": \"root\", \"message\": null, \"parent\": null, \"children\": [\"sys\"]},\n"
	" \"sys\": {\"id\": \"sys\", \"parent\": \"root\", \"children\": [\"u1\"], \"message\":"
	"  {\"author\": {\"role\": \"system\"}, \"content\": {\"content_type\": \"text\", \"parts\": [\"\"]},"
	"   \"metadata\": {\"is_visually_hidden_from_conversation\": true}}},\n"
	" \"u1\": {\"id\": \"u1\", \"parent\": \"sys\", \"children\": [\"a1\"], \"message\":"
	"  {\"author\": {\"role\": \"user\"}, \"content\": {\"content_type\": \"text\","
	"   \"parts\": [\"Wie weit ist es nach K\xc3\xb6ln? \xf0\x9f\x9a\x86\"]}}},\n"
	" \"a1\": {\"id\": \"a1\", \"parent\": \"u1\", \"children\": [\"u2a\", \"u2b\"], \"message\":"
	"  {\"author\": {\"role\": \"assistant\"}, \"content\": {\"content_type\": \"text\","
	"   \"parts\": [\"Etwa 200 km.\"]}}},\n"
	" \"u2a\": {\"id\": \"u2a\", \"parent\": \"a1\", \"children\": [\"a2a\"], \"message\":"
	"  {\"author\": {\"role\": \"user\"}, \"content\": {\"content_type\": \"text\", \"parts\": [\"Und Bonn?\"]}}},\n"
	" \"a2a\": {\"id\": \"a2a\", \"parent\": \"u2a\", \"children\": [], \"message\":"
	"  {\"author\": {\"role\": \"assistant\"}, \"content\": {\"content_type\": \"text\", \"parts\": [\"30 km.\"]}}},\n"
	" \"u2b\": {\"id\": \"u2b\", \"parent\": \"a1\", \"children\": [\"c1\"], \"message\":"
	"  {\"author\": {\"role\": \"user\"}, \"content\": {\"content_type\": \"multimodal_text\", \"parts\":"
	"   [{\"content_type\": \"image_asset_pointer\", \"asset_pointer\": \"file-service://x\"},"
	"    \"What is in this photo?\"]}}},\n"
	" \"c1\": {\"id\": \"c1\", \"parent\": \"u2b\", \"children\": [\"o1\"], \"message\":"
	"  {\"author\": {\"role\": \"assistant\"}, \"recipient\": \"python\","
	"   \"content\": {\"content_type\": \"code\", \"language\": \"python\", \"text\": \"print(1)\"}}},\n"
	" \"o1\": {\"id\": \"o1\", \"parent\": \"c1\", \"children\": [\"a2b\"], \"message\":"
	"  {\"author\": {\"role\": \"tool\"}, \"content\": {\"content_type\": \"execution_output\", \"text\": \"1\"}}},\n"
	" \"a2b\": {\"id\": \"a2b\", \"parent\": \"o1\", \"children\": [], \"message\":"
	"  {\"author\": {\"role\": \"assistant\"}, \"content\": {\"content_type\": \"text\","
	"   \"parts\": [\"A cathedral \\u6771\\u4eac.\\r\\nTwo towers.\"]}}}}},\n"
	"{\"title\": \"Recipes\", \"current_node\": \"b\", \"mapping\": {\n"
	" \"r\": {\"id\": \"r\", \"message\": null, \"parent\": null, \"children\": [\"a\"]},\n"
	" \"a\": {\"id\": \"a\", \"parent\": \"r\", \"children\": [\"b\"], \"message\": {\"author\": {\"role\":"
	"  \"user\"}, \"content\": {\"content_type\": \"text\", \"parts\": [\"How long to boil an egg?\"]}}},\n"
	" \"b\": {\"id\": \"b\", \"parent\": \"a\", \"children\": [], \"message\": {\"author\": {\"role\":"
	"  \"assistant\"}, \"content\": {\"content_type\": \"text\", \"parts\": [\"Nine minutes.\"]}}}}},\n"
	"{\"title\": null, \"current_node\": \"x\", \"mapping\": {\"x\": {\"id\": \"x\", \"parent\": null,"
	" \"message\": null}}}]\n";

static int parse(struct history *h, const char *path, const char *text, char *err, size_t errlen)
{
	return history_parse(h, history_detect(path, text, strlen(text)), path, text, strlen(text),
			     err, errlen);
}

static int msg_is(const struct history_conv *c, int i, enum history_role role, const char *text)
{
	return i < c->n_msg && c->msg[i].role == role && !strcmp(c->msg[i].text, text);
}

static void history_chatgpt_current_branch(struct test_ctx *t)
{
	struct history h;
	char err[512];
	int rc = parse(&h, "conversations.json", chatgpt_json, err, sizeof err);

	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECK(t, h.kind == HISTORY_CHATGPT && h.n_conv == 3);
	const struct history_conv *c = &h.conv[0];
	const struct history_skips *s = &c->skip;
	int ok = !strcmp(c->title, "Trip to K\xc3\xb6ln \xe2\x98\x95") && c->n_msg == 4 &&
		 msg_is(c, 0, HISTORY_USER, "Wie weit ist es nach K\xc3\xb6ln? \xf0\x9f\x9a\x86") &&
		 msg_is(c, 1, HISTORY_ASSISTANT, "Etwa 200 km.") &&
		 msg_is(c, 2, HISTORY_USER, "What is in this photo?") &&
		 msg_is(c, 3, HISTORY_ASSISTANT, "A cathedral \xe6\x9d\xb1\xe4\xba\xac.\nTwo towers.");
	int skips = s->n_null == 1 && s->n_hidden == 1 && s->n_nontext == 1 && s->n_tool == 1 &&
		    s->n_part == 1 && s->n_empty == 0 && s->n_off_branch == 2;
	int others = !strcmp(h.conv[1].title, "Recipes") && h.conv[1].n_msg == 2 &&
		     !strcmp(h.conv[2].title, "conversation 3") && h.conv[2].n_msg == 0 &&
		     h.conv[2].skip.n_null == 1 && h.conv[1].index == 2;
	int n_msg = c->n_msg;
	history_free(&h);
	T_CHECKF(t, ok, "first conversation: %d messages, not the current branch's 4", n_msg);
	T_CHECKF(t, skips, "skips: null %d hidden %d nontext %d tool %d part %d empty %d off %d",
		 s->n_null, s->n_hidden, s->n_nontext, s->n_tool, s->n_part, s->n_empty, s->n_off_branch);
	T_CHECK(t, others);
}

static void history_select_number_and_title(struct test_ctx *t)
{
	struct history h;
	char err[512];
	int a = -1, b = -1;

	T_CHECKF(t, parse(&h, "c.json", chatgpt_json, err, sizeof err) == 0, "%s", err);
	int all = history_select(&h, NULL, &a, &b, err, sizeof err) == 0 && a == 0 && b == 2;
	int num = history_select(&h, "2", &a, &b, err, sizeof err) == 0 && a == 1 && b == 1;
	int title = history_select(&h, "recipes", &a, &b, err, sizeof err) == 0 && a == 1 && b == 1;
	int out = history_select(&h, "4", &a, &b, err, sizeof err) == SEKV_ENOTFOUND &&
		  strstr(err, "1..3") != NULL;
	int none = history_select(&h, "Cooking", &a, &b, err, sizeof err) == SEKV_ENOTFOUND;
	snprintf(h.conv[2].title, sizeof h.conv[2].title, "Recipes");
	int twice = history_select(&h, "Recipes", &a, &b, err, sizeof err) == SEKV_EINVAL &&
		    strstr(err, "numbers 2, 3") != NULL;
	history_free(&h);
	T_CHECKF(t, all && num && title && out && none && twice, "all %d num %d title %d out %d "
		 "none %d twice %d: %s", all, num, title, out, none, twice, err);
}

static void history_jsonl_roles_and_parts(struct test_ctx *t)
{
	static const char text[] =
		"{\"role\": \"system\", \"content\": \"Be brief.\"}\n"
		"\n"
		"{\"role\": \"User\", \"content\": \"Name a red fruit.\"}\n"
		"{\"role\": \"assistant\", \"content\": [{\"type\": \"text\", \"text\": \"A strawberry.\"},"
		" {\"type\": \"image_url\", \"image_url\": {\"url\": \"x\"}}]}\n"
		"{\"role\": \"tool\", \"content\": \"42\"}\n"
		"{\"role\": \"user\", \"content\": null}\n";
	struct history h;
	char err[512];

	T_CHECKF(t, parse(&h, "chat.txt", text, err, sizeof err) == 0, "%s", err);
	const struct history_conv *c = &h.conv[0];
	int ok = h.kind == HISTORY_JSONL && h.n_conv == 1 && !strcmp(c->title, "chat.txt") &&
		 c->n_msg == 3 && msg_is(c, 0, HISTORY_SYSTEM, "Be brief.") &&
		 msg_is(c, 1, HISTORY_USER, "Name a red fruit.") &&
		 msg_is(c, 2, HISTORY_ASSISTANT, "A strawberry.") && c->skip.n_part == 1 &&
		 c->skip.n_tool == 1 && c->skip.n_empty == 1;
	history_free(&h);
	T_CHECK(t, ok);
}

static void history_transcript_continuation_lines(struct test_ctx *t)
{
	static const char text[] =
		"User: Hi there\n  indented continuation\n\nsecond paragraph\n"
		"ASSISTANT : Hello!\nNote: not a role\nTool: ran a search\nuser:bye\nModel: ok\n\n";
	struct history h;
	char err[512];

	T_CHECKF(t, parse(&h, "talk.md", text, err, sizeof err) == 0, "%s", err);
	const struct history_conv *c = &h.conv[0];
	int ok = h.kind == HISTORY_TRANSCRIPT && c->n_msg == 4 &&
		 msg_is(c, 0, HISTORY_USER, "Hi there\n  indented continuation\n\nsecond paragraph") &&
		 msg_is(c, 1, HISTORY_ASSISTANT, "Hello!\nNote: not a role") &&
		 msg_is(c, 2, HISTORY_USER, "bye") && msg_is(c, 3, HISTORY_ASSISTANT, "ok") &&
		 c->skip.n_tool == 1;
	history_free(&h);
	T_CHECK(t, ok);
}

static void history_detect_kinds(struct test_ctx *t)
{
	static const struct {
		const char *path, *text;
		enum history_kind kind;
	} c[] = {
		{ "notes.txt", "User manual\nuser: hi\nassistant: ho\n", HISTORY_NONE },
		{ "package.json", "{\"name\": \"x\", \"role\": 1}\n", HISTORY_NONE },
		{ "a.txt", "\n\nuser: hi\nassistant: hello\n", HISTORY_TRANSCRIPT },
		{ "a.txt", "user: hi\nuser: again\n", HISTORY_NONE },
		{ "x.JSONL", "not json", HISTORY_JSONL },
		{ "x.txt", "{\"role\": \"user\", \"content\": \"hi\"}\n", HISTORY_JSONL },
		{ "c.json", " [{\"mapping\": {}}]", HISTORY_CHATGPT },
		{ "c.txt", "{\"mapping\": {}, \"current_node\": null}", HISTORY_CHATGPT },
		{ "mapping.md", "A \"mapping\" in prose.", HISTORY_NONE },
	};

	for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
		enum history_kind k = history_detect(c[i].path, c[i].text, strlen(c[i].text));
		T_CHECKF(t, k == c[i].kind, "case %zu (%s): %s, expected %s", i, c[i].path,
			 history_kind_name(k), history_kind_name(c[i].kind));
	}
}

/* Each malformed file is refused, naming the file and the place. */
static void history_malformed_named(struct test_ctx *t)
{
	static const struct {
		const char *path, *text, *want;
	} c[] = {
		{ "bad.json", "[\n{\"title\": \"x\",\n \"mapping\": {\"a\": }}]", "invalid JSON at line 3, byte 35" },
		{ "c.json", "[{\"title\": \"one\", \"current_node\": \"r\", \"mapping\": {\"r\": {\"message\": null}}},"
		  " {\"title\": \"two\"}]", "conversation 2 (two): no \"mapping\"" },
		{ "c.json", "[{\"mapping\": {\"r\": {\"message\": null}}}]", "conversation 1 (conversation 1): no \"current_node\"" },
		{ "c.json", "[{\"mapping\": {\"r\": {}}, \"current_node\": \"zz\"}]", "current_node 'zz' is not in mapping" },
		{ "c.json", "[{\"mapping\": {\"b\": {\"parent\": \"ghost\"}}, \"current_node\": \"b\"}]",
		  "node 'b' has parent 'ghost', which is not in mapping" },
		{ "c.json", "[{\"mapping\": {\"a\": {\"parent\": \"b\"}, \"b\": {\"parent\": \"a\"}}, "
		  "\"current_node\": \"a\"}]", "a cycle in mapping" },
		{ "c.json", "[{\"mapping\": {\"a\": {\"id\": \"a\", \"message\": {\"content\": {}}}}, "
		  "\"current_node\": \"a\"}]", "node 'a': a message without author.role" },
		{ "c.jsonl", "{\"role\": \"user\", \"content\": \"hi\"}\n{\"content\": \"no role\"}\n",
		  "line 2: a message without a \"role\"" },
		{ "c.jsonl", "{\"role\": \"user\", \"content\": \"hi\"}\n\n{\"role\": \"user\", \"content\": \"x}\n",
		  "invalid JSON at line 3" },
		{ "c.jsonl", "{\"role\": \"wizard\", \"content\": \"hi\"}\n", "line 1: unknown role 'wizard'" },
		{ "c.jsonl", "{\"role\": \"user\"}\n", "line 1: a message without \"content\"" },
		{ "c.jsonl", "[1, 2]\n", "line 1: not a JSON object" },
	};
	char err[512];

	for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
		struct history h;
		err[0] = 0;
		int rc = parse(&h, c[i].path, c[i].text, err, sizeof err);
		history_free(&h);
		T_CHECKF(t, rc == SEKV_EFORMAT && strstr(err, c[i].path) && strstr(err, c[i].want),
			 "case %zu: rc %d, '%s' lacks '%s'", i, rc, err, c[i].want);
	}
	struct history h;
	const char *tx = "Hello\nuser: hi\n";
	int rc = history_parse(&h, HISTORY_TRANSCRIPT, "t.txt", tx, strlen(tx), err, sizeof err);
	history_free(&h);
	T_CHECKF(t, rc == SEKV_EFORMAT && strstr(err, "t.txt: line 1: a message without a role"),
		 "transcript: %s", err);
}

/* Roles join and order into turns; what follows the last answer is counted. */
static void import_turns_join_roles(struct test_ctx *t)
{
	struct history_msg m[] = {
		{ HISTORY_SYSTEM, "S" }, { HISTORY_ASSISTANT, "A0" }, { HISTORY_USER, "U1" },
		{ HISTORY_USER, "U1b" }, { HISTORY_ASSISTANT, "A1" }, { HISTORY_ASSISTANT, "A1b" },
		{ HISTORY_SYSTEM, "S2" }, { HISTORY_USER, "U2" },
	};
	struct history_conv c = { .title = "t", .index = 3, .msg = m, .n_msg = 8 };
	struct import_conv ic;
	char line[512];

	T_CHECK(t, import_conv_of(&c, NULL, &ic) == 0);
	int ok = ic.n_turn == 2 && !strcmp(ic.turn[0].question, "S") && !strcmp(ic.turn[0].answer, "A0") &&
		 !strcmp(ic.turn[1].question, "U1\n\nU1b") && !strcmp(ic.turn[1].answer, "A1\n\nA1b") &&
		 ic.n_unanswered == 2 && ic.n_msg == 6 && ic.index == 3;
	import_describe(&ic, 99, line, sizeof line);
	import_conv_free(&ic);
	T_CHECK(t, ok);
	T_CHECKF(t, !strcmp(line, "6 messages kept in 2 turns, 99 tokens; skipped: 2 unanswered "
			    "messages at the end"), "%s", line);
}

static void import_source_round_trip(struct test_ctx *t)
{
	char src[256], path[256];
	int idx = 0;

	import_source("/no/such/dir/conv#1.json", 12, src, sizeof src);
	T_CHECKF(t, !strcmp(src, "/no/such/dir/conv#1.json#conversation=12"), "%s", src);
	T_CHECK(t, import_source_parse(src, path, sizeof path, &idx) == 1);
	T_CHECK(t, !strcmp(path, "/no/such/dir/conv#1.json") && idx == 12);
	T_CHECK(t, import_source_parse("/a/b.txt", path, sizeof path, &idx) == 0);
	T_CHECK(t, import_source_parse("/a#conversation=x", path, sizeof path, &idx) == 0);
}

const struct test_case test_history[] = {
	{ "history_chatgpt_current_branch", history_chatgpt_current_branch },
	{ "history_select_number_and_title", history_select_number_and_title },
	{ "history_jsonl_roles_and_parts", history_jsonl_roles_and_parts },
	{ "history_transcript_continuation_lines", history_transcript_continuation_lines },
	{ "history_detect_kinds", history_detect_kinds },
	{ "history_malformed_named", history_malformed_named },
	{ "import_turns_join_roles", import_turns_join_roles },
	{ "import_source_round_trip", import_source_round_trip },
	{ NULL, NULL },
};
