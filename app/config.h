/* config.h - command-line options shared by every sub-command, described
 * once in the option table of config.c (names, kind, default, limits,
 * environment variable, help text, the sub-commands that use it), from
 * which parsing and `sekv help` are both generated.
 * Precedence: flags > environment (SEKV_MODEL, SEKV_DB, SEKV_THREADS,
 * SEKV_BUDGET) > defaults; numeric defaults that the engine also has come
 * from sekv_default_params and sampler_default_params. Positional
 * arguments are kept in order. */
#ifndef SEKV_APP_CONFIG_H
#define SEKV_APP_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define APP_MAX_ARGS 64
#define APP_PATH_MAX 4096 /* bytes of a path option, NUL included */

/* The sub-commands, as bits: which ones use an option (help only: every
 * sub-command still accepts every option). */
enum {
	APP_CMD_CHAT = 1 << 0,
	APP_CMD_INGEST = 1 << 1,
	APP_CMD_ASK = 1 << 2,
	APP_CMD_LS = 1 << 3,
	APP_CMD_RM = 1 << 4,
	APP_CMD_GENERATE = 1 << 5,
	APP_CMD_TOKENIZE = 1 << 6,
	APP_CMD_INSPECT = 1 << 7,
	APP_CMD_SESSIONS = 1 << 8,
	APP_CMD_EXPORT = 1 << 9,
	APP_CMD_EVAL = 1 << 10,
	APP_CMD_CHECK = 1 << 11,
	APP_CMD_COUNT = 1 << 12,
	APP_CMD_TRAIN = 1 << 13,
	APP_CMD_ALL = (1 << 14) - 1,
};

/* The memory an answer is decoded from (--kv): SeKV, the reference, and
 * the rivals, each at the same device budget (app/session.c). */
enum app_kv {
	APP_KV_SEKV = 0,       /* the SeKV memory */
	APP_KV_FULL = 1,       /* every exact row (the reference) */
	APP_KV_STREAMING = 2,  /* rival: sinks + recent rows (StreamingLLM) */
	APP_KV_SNAPKV = 3,     /* rival: rows the question turn votes for (SnapKV) */
	APP_KV_H2O = 4,        /* rival: heavy hitters of the prefill + recent rows (H2O) */
	APP_KV_QUEST = 5,      /* rival: per step, the pages with the best key bound (Quest) */
	APP_KV_SUMMARY = 6,    /* rival: the SeKV memory never zooming (summaries only) */
	APP_KV_SHADOWKV = 7,   /* rival: low-rank pre-RoPE keys, landmarks, host values (ShadowKV) */
	APP_KV_COUNT
};

/* "sekv", "full", "streaming", "snapkv", "h2o", "quest", "summary",
 * "shadowkv" (static storage; "?" outside the enum). */
const char *app_kv_name(int kv);
/* sekv eval's default grid (app/cmd_eval.c; its run time is measured in
 * README.md). */
#define APP_EVAL_METHODS "full,sekv,streaming,summary"
#define APP_EVAL_BUDGETS "0.1,0.02"
#define APP_EVAL_TASKS "niah,multi,second,kl,mass"
#define APP_EVAL_LENGTHS "1024,2048,4096"
#define APP_EVAL_DEPTHS "0.1,0.5,0.9"
#define APP_EVAL_NEEDLES 8
#define APP_EVAL_CORPUS "assets/eval_corpus.sha256" /* relative: app_asset_path */
#define APP_EVAL_QA "bench/qa/questions.jsonl"

/* Evidence passages shown per answer unless --evidence-top says. */
#define APP_EVIDENCE_TOP 3

struct app_opts {
	char model[APP_PATH_MAX];      /* -m FILE: GGUF model (or vocabulary-only GGUF) */
	const char *tokenizer; /* --tokenizer FILE: SentencePiece tokenizer.model */
	char db[APP_PATH_MAX];       /* --db FILE: library database */
	int n_threads;         /* -t N; default: cores */
	double budget;         /* --budget F: device tier, fraction of full KV (0.10) */
	int budget_set;        /* --budget given */
	int r_max;             /* --rmax R: most components a factor keeps
	                          (SEKV_R_MAX_ALL: no cap) */
	int r_max_set;
	int kv;                /* --kv sekv|full|streaming|snapkv|h2o|quest|summary|shadowkv: enum app_kv */
	int n_predict;         /* -n N: max answer tokens (256) */
	int n_predict_set;     /* -n given */
	int json;              /* --json */
	float temperature;     /* --temp T (0 = greedy) */
	uint64_t seed;         /* --seed S */
	float repeat_penalty;  /* --repeat-penalty P over the last 64 answer tokens (1 = off;
	                          unless set: app_repeat_penalty's default) */
	int repeat_penalty_set;
	int bos;               /* --bos (tokenize) */
	const char *prompt;    /* -p TEXT (generate) */
	const char *title;     /* --title TEXT (ingest) */
	const char *conversation; /* --conversation N|TITLE (ingest of a chat history), NULL = all */
	const char *resume;    /* --resume DOC (ingest): the incomplete document to continue */
	const char *rebuild;   /* --rebuild DOC (ingest): the document whose memory to build again */
	const char *password;  /* --password PW: a PDF's user password (ingest, count) */
	int max_tokens;        /* --max-tokens N: most tokens a document (or a part) may have, 0 = the model's context */
	int split;             /* --split: a longer document is stored as consecutive parts */
	int keep_full_kv;      /* --keep-full-kv: the exact global KV stays in the library */
	int only_full_kv;      /* rm --only-full-kv: delete the documents' exact KV only */
	int n_batch;           /* --batch N: prefill tokens per forward (256) */
	int quiet;             /* -q: no progress */
	int help;              /* -h / --help */
	int n_recent;          /* --recent N: exact trailing tokens (64) */
	int exact_below;       /* --exact-below N: shorter documents stay exact */
	int exact_below_set;
	float alpha;           /* --alpha A: boundary threshold (1.0) */
	float rank_energy;     /* --rank-energy E: the K factors' rank gate (energy share) */
	float rank_energy_v;   /* --rank-energy-v E: the V factors' (0: the K gate's) */
	int key_pre_rope;      /* --factor-keys post-rope|pre-rope: 1 = before RoPE */
	int zoom_blocks;       /* --zoom-blocks N: landmark blocks a zoom rebuilds */
	int zoom_scan;         /* --zoom-scan N: single-row zooms scanning N x the budget's rows */
	int question_zoom;     /* --question-turn exact|zoom (index: 1 = zoom) */
	int device_rows;       /* --device-rows k8v4|int8|f16: index of the choice
	                          (app_dev_rows gives the enum sekv_dev_rows) */
	const char *zoom_shares; /* --zoom-shares LIST: zoom budget per global layer */
	int anchors;           /* --anchors surprisal|attention|both: 0 = anchors
	                          by surprisal (the paper's rule), 1 = by the
	                          attention each token received in prefill,
	                          2 = where either stands out */
	double static_share;   /* --static-share F: budget share of exact rows,
	                          summaries and landmarks (0.7) */
	int act_f32;           /* --act f32: decode with fp32 activations (default q8) */
	const char *evidence_heads; /* --evidence-heads L:H,...: retrieval heads, NULL = stored/calibrated */
	int no_evidence;       /* --no-evidence */
	int evidence_top;      /* --evidence-top N: passages shown per answer */
	int session_id;        /* --session ID (chat, ask: continue it; rm), 0 = none */
	int router;            /* --router landmark|summary|oracle: enum sekv_router
	                          (the choices' order is the enum's) */
	int mass_recall;       /* --mass-recall: load exact keys, report mass_recall */
	const char *router_weights; /* --router-weights FILE: --router trained's weights
	                          (NULL: app_router_weights_path) */
	/* sekv train (app/cmd_train.c) */
	int train_steps;       /* --steps N: optimiser steps (600) */
	int train_docs;        /* --train-docs N: training memories collected (16) */
	int train_tokens;      /* --doc-tokens N: tokens of each memory (2048) */
	int train_w;           /* --train-w on|off: 0 = on (W trained), 1 = off */
	int train_target;      /* --train-target share|cover: 0 = share, 1 = cover */
	/* sekv eval (app/cmd_eval.c parses the lists; NULL: its defaults) */
	const char *eval_methods;  /* --methods LIST: --kv names and "summary" */
	const char *eval_budgets;  /* --budgets LIST: fractions of the full KV cache */
	const char *eval_tasks;    /* --tasks LIST: niah, multi, second, kl, mass, copy, mk,
	                              mv, mq, vt, cwe, fwe, qa */
	const char *eval_lengths;  /* --lengths LIST: haystack tokens */
	const char *eval_depths;   /* --depths LIST: needle positions, fractions */
	int eval_needles;          /* --needles N: needles per length x depth cell (8) */
	int eval_kl_needles;       /* --kl-needles N: kl on the first N of them (0: a quarter) */
	const char *eval_out;      /* --out DIR: where results go */
	const char *eval_corpus;   /* --corpus FILE: the corpus list (APP_EVAL_CORPUS) */
	int eval_corpus_pin;       /* --corpus-pin: write this machine's text to that list */
	const char *eval_qa;       /* --qa FILE: questions of the qa task (APP_EVAL_QA) */
	int n_args;
	const char *args[APP_MAX_ARGS]; /* positional arguments */
};

/* Fills defaults, then environment, then parses argv[0..argc) (the words
 * after the sub-command). "--" ends options: later words are positional.
 * Returns 0 or SEKV_EINVAL with a message naming the bad flag. */
int app_opts_parse(struct app_opts *o, int argc, char **argv, char *err, size_t errlen);

/* Prints the help lines of the options that the sub-commands in cmds
 * (APP_CMD_* bits) use, in table order: names and value, help text, the
 * environment variable and the default. */
void app_opts_help(FILE *f, unsigned cmds);

/* 0 when o->db names a library, else SEKV_EINVAL with a message naming
 * what to set (--db, SEKV_DB, XDG_DATA_HOME, HOME): with neither HOME nor
 * an absolute XDG_DATA_HOME there is no default path, and an empty path
 * would give SQLite a temporary database that vanishes on exit. */
int app_check_db(const struct app_opts *o, char *err, size_t errlen);

/* Parses a document id: a positive decimal integer that fits int64_t,
 * nothing after it. Returns 0 (*id set) or -1 (*id untouched). */
int app_parse_doc_id(const char *s, int64_t *id);
/* The one message for a word app_parse_doc_id refused (printf format,
 * takes the word). */
#define APP_DOC_ID_BAD "'%s' is not a document id (see 'sekv ls')"

/* Resolves the default model path: assets/models/... relative to the
 * working directory, else relative to the directory of the executable. */
void app_default_model(char *buf, size_t cap);
/* rel (a path inside the repository) as it is when it names a readable
 * file from here, else beside the binary (its bin/'s parent), else as it
 * is: into buf [cap]. Absolute paths come back as they are. */
void app_asset_path(const char *rel, char *buf, size_t cap);

/* The repeat penalty of an answer unless --repeat-penalty is given: off
 * (1) in a chat template, where it keeps a model from copying strings
 * whose tokens repeat ("#f8cbcb", digit runs; bench-qa with the default
 * model, full KV: 1.1 answers 44 of 69, 1 answers 45; llama.cpp, 1: 46), and
 * APP_REPEAT_PENALTY_BASE in the completion format, whose pre-trained
 * models loop without it. fmt: enum chat_format. */
#define APP_REPEAT_PENALTY_BASE 1.1f
float app_repeat_penalty(const struct app_opts *o, int fmt);
/* --device-rows as an enum sekv_dev_rows, and its name ("int8", "f16",
 * "k8v4"; static storage). */
int app_dev_rows(const struct app_opts *o);
const char *app_dev_rows_name(const struct app_opts *o);

#endif
