/* main.c - `sekv` entry point: dispatches sub-commands (app/cmd_*.c) and
 * prints help: the synopsis of each sub-command is here, its options come
 * from the option table (app_opts_help, app/config.c). */
#include <stdio.h>
#include <string.h>

#include "app/app.h"

#define SEKV_VERSION "0.1.0"

struct cmd {
	const char *name;
	int (*fn)(int, char **);
	unsigned bit;        /* APP_CMD_*: its options in the table */
	const char *args;    /* positional arguments, for the synopsis */
	const char *summary;
};

static const struct cmd cmds[] = {
	{ "chat", cmd_chat, APP_CMD_CHAT, "[DOC]",
	  "terminal UI: ask questions about document DOC (the newest one when DOC is omitted), a new "
	  "session; --session ID goes on with a stored one (its transcript shown with each "
	  "answer's evidence, its turns remembered, no forward pass over earlier tokens)" },
	{ "ingest", cmd_ingest, APP_CMD_INGEST, "FILE",
	  "prefill a PDF or text/Markdown file once, store its SeKV memory (and a PDF's page "
	  "numbers); prints the id of every document stored, one a line (one per part with "
	  "--split), also when it fails or is interrupted. "
	  "A chat history (ChatGPT conversations.json, JSONL of {role, content}, a 'user:'/"
	  "'assistant:' transcript) becomes a document and a session per conversation, its turns "
	  "rendered in the model's prompt format (--conversation picks one). "
	  "Every chunk is committed as it is prefilled: an interrupted ingest (Ctrl-C, crash, full "
	  "disk) leaves the document incomplete, and 'sekv ingest --resume DOC' continues it (a "
	  "--split ingest: that part, then the parts after it, the file checked unchanged first)" },
	{ "count", cmd_count, APP_CMD_COUNT, "FILE",
	  "print the tokens a document would take (and a PDF's pages) without prefilling it; "
	  "how --split would cut it when it is too long" },
	{ "ask", cmd_ask, APP_CMD_ASK, "DOC QUESTION",
	  "answer from the stored memory, no prefill of the document (a new session); "
	  "'sekv ask --session ID QUESTION' goes on with a stored session" },
	{ "ls", cmd_ls, APP_CMD_LS, "",
	  "list stored documents, one a line, tab-separated: id, state (ready, ingesting by another "
	  "process, or incomplete), tokens (done/all while incomplete; a --split part stopped "
	  "before the parts after it: incomplete, naming them), size on disk, date, model, title" },
	{ "rm", cmd_rm, APP_CMD_RM, "[--only-full-kv] DOC... | --session ID",
	  "delete stored documents (and their sessions); --session ID deletes one session; "
	  "--only-full-kv deletes only the documents' exact KV; the blobs' space goes back to the "
	  "file system" },
	{ "check", cmd_check, APP_CMD_CHECK, "",
	  "check the library: SQLite's integrity check, then every document's chunks, factors and "
	  "resume state, every session's turns; prints each problem, exits 1 on any" },
	{ "sessions", cmd_sessions, APP_CMD_SESSIONS, "[DOC]",
	  "list stored sessions, one a line, tab-separated: id, document, title, turns, tokens its "
	  "memory holds after the document's, memory, last used" },
	{ "export", cmd_export, APP_CMD_EXPORT, "SESSION",
	  "write a session as Markdown: questions, answers, evidence quoted from the document" },
	{ "eval", cmd_eval, APP_CMD_EVAL, "--out DIR",
	  "measure SeKV against full KV and rival KV methods on needle haystacks built from this "
	  "machine's text: results.json, results.md, PNG plots in DIR (answers of at most 32 tokens "
	  "unless -n says; --seed also seeds the haystacks)" },
	{ "train", cmd_train, APP_CMD_TRAIN, "[--steps N] [--out FILE] [--resume]",
	  "train the SeKV router of the model (frozen) on this machine's text: teacher labels from "
	  "exact attention, AdamW; prints step, losses, samples/s and ETA, checkpoints to FILE.ckpt "
	  "(--resume goes on from it and the collected FILE.data), draws FILE.png, writes the "
	  "weights (default assets/router/MODEL.bin) that --router trained loads" },
	{ "generate", cmd_generate, APP_CMD_GENERATE, "-p TEXT",
	  "plain generation, the prompt wrapped in the model's chat template" },
	{ "tokenize", cmd_tokenize, APP_CMD_TOKENIZE, "-- TEXT", "print token ids separated by spaces" },
	{ "inspect", cmd_inspect, APP_CMD_INSPECT, "[FILE]", "print a GGUF file's metadata and tensors" },
};

#define N_CMD (sizeof cmds / sizeof cmds[0])

static void usage(FILE *f)
{
	char syn[64];

	fprintf(f, "sekv %s - ask questions about long documents with a local model and a SeKV memory\n"
		"\nusage: sekv COMMAND [options]\n\n", SEKV_VERSION);
	for (size_t i = 0; i < N_CMD; i++) {
		snprintf(syn, sizeof syn, "%s %s", cmds[i].name, cmds[i].args);
		fprintf(f, "  %-22s %s\n", syn, cmds[i].summary);
	}
	fprintf(f, "\noptions ('sekv help COMMAND' lists those of one command):\n");
	app_opts_help(f, APP_CMD_ALL);
}

static void cmd_usage(FILE *f, const struct cmd *c)
{
	fprintf(f, "usage: sekv %s%s%s [options]\n  %s\n\noptions:\n", c->name, *c->args ? " " : "",
		c->args, c->summary);
	app_opts_help(f, c->bit);
}

/* 1 when every character of a appears in b in order ("ls" in "list"). */
static int is_subsequence(const char *a, const char *b)
{
	for (; *a && *b; b++)
		a += *a == *b;
	return !*a;
}

/* Edit distance of a and b (insertions, deletions, substitutions), names
 * of up to 31 characters; longer ones count as far. */
static int edit_distance(const char *a, const char *b)
{
	int la = (int)strlen(a), lb = (int)strlen(b), d[32][32];

	if (la > 31 || lb > 31)
		return 99;
	for (int i = 0; i <= la; i++)
		for (int j = 0; j <= lb; j++) {
			if (!i || !j) {
				d[i][j] = i + j;
				continue;
			}
			int best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
			best = d[i - 1][j] + 1 < best ? d[i - 1][j] + 1 : best;
			d[i][j] = d[i][j - 1] + 1 < best ? d[i][j - 1] + 1 : best;
		}
	return d[la][lb];
}

/* A mistyped command: one line naming the commands, the likely one first
 * (within two edits, or one name inside the other as a subsequence with
 * the same first letter), never the whole help. */
static void unknown_command(const char *what, const char *name)
{
	const char *near = NULL;

	for (size_t i = 0; i < N_CMD && !near; i++)
		if (edit_distance(name, cmds[i].name) <= 2 ||
		    (name[0] == cmds[i].name[0] &&
		     (is_subsequence(name, cmds[i].name) || is_subsequence(cmds[i].name, name))))
			near = cmds[i].name;
	app_errorf("%s: unknown command '%s'", what, name);
	if (near)
		app_errorf(" (did you mean '%s'?)", near);
	app_errorf("; commands:");
	for (size_t i = 0; i < N_CMD; i++)
		app_errorf(" %s", cmds[i].name);
	app_errorf(" ('sekv help' describes them)\n");
}

static const struct cmd *cmd_find(const char *name)
{
	for (size_t i = 0; i < N_CMD; i++)
		if (!strcmp(name, cmds[i].name))
			return &cmds[i];
	return NULL;
}

int main(int argc, char **argv)
{
	const struct cmd *c = argc >= 2 ? cmd_find(argv[1]) : NULL;

	if (argc >= 3 && !strcmp(argv[1], "help")) {
		if ((c = cmd_find(argv[2]))) {
			cmd_usage(stdout, c);
			return 0;
		}
		unknown_command("sekv help", argv[2]);
		return 2;
	}
	for (int a = 2; c && a < argc && strcmp(argv[a], "--"); a++)
		if (!strcmp(argv[a], "-h") || !strcmp(argv[a], "--help")) {
			cmd_usage(stdout, c);
			return 0;
		}
	if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(stdout);
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
		printf("sekv %s\n", SEKV_VERSION);
		return 0;
	}
	if (c)
		return c->fn(argc - 2, argv + 2);
	unknown_command("sekv", argv[1]);
	return 2;
}
