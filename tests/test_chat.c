/* test_chat.c - prompt formats and stop rules without a model: the format
 * a GGUF calls for (with and without tokenizer.chat_template), stored
 * format names, and the stop rules (chat_stop_feed) over synthetic
 * streams of pieces. Token sequences with the real tokenizer are checked
 * in test_conv.c. */
#include <stdlib.h>
#include <string.h>

#include "engine/conv/chat.h"
#include "engine/base/err.h"
#include "engine/gguf/gguf.h"
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
	T_CHECK(t, format_of("{% for m in messages %}{{ m.content }}{% endfor %}") == CHAT_FORMAT_TEMPLATE);
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

const struct test_case test_chat[] = {
	{ "chat_format_from_gguf", chat_format_from_gguf },
	{ "chat_format_names_round_trip", chat_format_names_round_trip },
	{ "chat_stop_rules_on_synthetic_streams", chat_stop_rules_on_synthetic_streams },
	{ "chat_example_quotes_first_real_line", chat_example_quotes_first_real_line },
	{ "chat_repeats_example_only_whole_copies", chat_repeats_example_only_whole_copies },
	{ NULL, NULL },
};
