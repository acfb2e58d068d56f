/* config.h - command-line options shared by every sub-command.
 * Precedence: flags > environment (SEKV_MODEL, SEKV_DB, SEKV_THREADS,
 * SEKV_BUDGET) > defaults. Positional arguments are kept in order. */
#ifndef SEKV_APP_CONFIG_H
#define SEKV_APP_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define APP_MAX_ARGS 64

struct app_opts {
	char model[4096];      /* -m FILE: GGUF model (or vocabulary-only GGUF) */
	const char *tokenizer; /* --tokenizer FILE: SentencePiece tokenizer.model */
	char db[4096];         /* --db FILE: library database */
	int n_threads;         /* -t N; default: cores */
	double budget;         /* --budget F: device tier, fraction of full KV (0.10) */
	int budget_set;        /* --budget given */
	int r_max;             /* --rmax R: SVD rank (32) */
	int r_max_set;
	int kv_full;           /* --kv full|sekv */
	int n_predict;         /* -n N: max answer tokens (256) */
	int json;              /* --json */
	float temperature;     /* --temp T (0 = greedy) */
	uint64_t seed;         /* --seed S */
	float repeat_penalty;  /* --repeat-penalty P over the last 64 answer tokens (1.1; 1 = off) */
	int bos;               /* --bos (tokenize) */
	const char *prompt;    /* -p TEXT (generate) */
	const char *title;     /* --title TEXT (ingest) */
	int n_batch;           /* --batch N: prefill tokens per forward (256) */
	int quiet;             /* -q: no progress */
	int help;              /* -h / --help */
	int n_recent;          /* --recent N: exact trailing tokens (64) */
	float alpha;           /* --alpha A: boundary threshold (1.0) */
	int act_f32;           /* --act f32: decode with fp32 activations (default q8) */
	int n_args;
	const char *args[APP_MAX_ARGS]; /* positional arguments */
};

/* Fills defaults, then environment, then parses argv[0..argc) (the words
 * after the sub-command). "--" ends options: later words are positional.
 * Returns 0 or SEKV_EINVAL with a message naming the bad flag. */
int app_opts_parse(struct app_opts *o, int argc, char **argv, char *err, size_t errlen);

/* Parses a document id: a positive decimal integer that fits int64_t,
 * nothing after it. Returns 0 (*id set) or -1 (*id untouched). */
int app_parse_doc_id(const char *s, int64_t *id);
/* The one message for a word app_parse_doc_id refused (printf format,
 * takes the word). */
#define APP_DOC_ID_BAD "'%s' is not a document id (see 'sekv ls')"

/* Resolves the default model path: assets/models/... relative to the
 * working directory, else relative to the directory of the executable. */
void app_default_model(char *buf, size_t cap);

#endif
