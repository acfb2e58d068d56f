/* main.c - `sekv` entry point: dispatches sub-commands (app/cmd_*.c). */
#include <stdio.h>
#include <string.h>

#include "app/app.h"

#define SEKV_VERSION "0.1.0"

static void usage(FILE *f)
{
	fprintf(f,
		"sekv %s - ask questions about long documents with a local model and a SeKV memory\n"
		"\n"
		"usage: sekv COMMAND [options]\n"
		"\n"
		"  chat [DOC]                     terminal UI: ask questions about document DOC\n"
		"  ingest FILE [--title T]        prefill a text/Markdown file once, store its memory; prints its id\n"
		"  ask DOC QUESTION               answer from the stored memory (no prefill)\n"
		"        [--kv sekv|full] [--budget F] [--rmax R] [-n N] [--json] [--temp T] [--seed S]\n"
		"  ls                             list stored documents (id first)\n"
		"  rm DOC                         delete a stored document\n"
		"  generate -p TEXT [-n N]        plain generation (chat template applied)\n"
		"  tokenize [--bos] -- TEXT       print token ids\n"
		"  inspect FILE                   print a GGUF file's metadata and tensors\n"
		"\n"
		"common options:\n"
		"  -m FILE         GGUF model (env SEKV_MODEL; default assets/models/gemma-3-270m-q4_k_m.gguf)\n"
		"  --tokenizer F   SentencePiece tokenizer.model instead of the GGUF vocabulary\n"
		"  --db FILE       library (env SEKV_DB; default $XDG_DATA_HOME/sekv/library.db)\n"
		"  -t N            threads (env SEKV_THREADS; default: all cores)\n"
		"  --budget F      device-tier budget as a fraction of the full KV cache (default 0.10)\n"
		"  --rmax R        SVD rank: stored at ingest, used at ask (default 32)\n"
		"  --temp T        sampling temperature (default 0: greedy); --seed S\n"
		"  --repeat-penalty P  penalty on the last 64 answer tokens (default 1.1; 1 = off)\n"
		"  --act q8|f32    decode activations: int8 blocks as llama.cpp (default) or fp32\n"
		"  -q              no progress output\n",
		SEKV_VERSION);
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(int, char **);
		const char *usage;
	} cmds[] = {
		{ "chat", cmd_chat, "sekv chat [DOC] [--kv sekv|full] [--budget F] [--rmax R] [-n N] [--temp T]\n"
		  "  terminal UI over a stored document (the newest one when DOC is omitted)" },
		{ "ingest", cmd_ingest, "sekv ingest FILE [--title T] [--budget F] [--rmax R] [--alpha A] [--recent N] [--batch N]\n"
		  "  prefill a text/Markdown file once and store its SeKV memory; prints the new document id" },
		{ "ask", cmd_ask, "sekv ask DOC QUESTION [--kv sekv|full] [--budget F] [--rmax R] [-n N] [--json] [--temp T] [--seed S]\n"
		  "  answer from the stored memory, no prefill of the document" },
		{ "ls", cmd_ls, "sekv ls\n  list stored documents: id, title, tokens, size on disk, date, model" },
		{ "rm", cmd_rm, "sekv rm DOC...\n  delete stored documents" },
		{ "generate", cmd_generate, "sekv generate -p TEXT [-n N] [--temp T] [--seed S]\n"
		  "  plain generation, the prompt wrapped in the model's chat template" },
		{ "tokenize", cmd_tokenize, "sekv tokenize [-m MODEL | --tokenizer FILE] [--bos] -- TEXT\n"
		  "  print token ids separated by spaces" },
		{ "inspect", cmd_inspect, "sekv inspect [FILE]\n  print a GGUF file's metadata and tensors" },
	};

	if (argc >= 3 && !strcmp(argv[1], "help")) {
		for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
			if (!strcmp(argv[2], cmds[i].name)) {
				printf("usage: %s\n", cmds[i].usage);
				return 0;
			}
		fprintf(stderr, "sekv help: unknown command '%s'\n\n", argv[2]);
		usage(stderr);
		return 2;
	}
	for (size_t i = 0; argc >= 2 && i < sizeof cmds / sizeof cmds[0]; i++) {
		if (strcmp(argv[1], cmds[i].name))
			continue;
		for (int a = 2; a < argc && strcmp(argv[a], "--"); a++)
			if (!strcmp(argv[a], "-h") || !strcmp(argv[a], "--help")) {
				printf("usage: %s\n(common options: sekv help)\n", cmds[i].usage);
				return 0;
			}
	}

	if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(stdout);
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
		printf("sekv %s\n", SEKV_VERSION);
		return 0;
	}
	for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
		if (!strcmp(argv[1], cmds[i].name))
			return cmds[i].fn(argc - 2, argv + 2);
	fprintf(stderr, "sekv: unknown command '%s'\n\n", argv[1]);
	usage(stderr);
	return 2;
}
