/* config.c - the option table and the parser and help generated from it
 * (config.h). One row per option: adding an option is adding a row (and
 * its struct app_opts field). No allocation: strings point into argv or
 * into fixed buffers. Sub-command synopses live in main.c. */
#include "app/config.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/err.h"
#include "engine/conv/chat.h"
#include "engine/evidence/evidence.h"
#include "engine/conv/sampler.h"
#include "engine/sekv/sekv.h"
#include "store/store.h"

#define DEFAULT_MODEL_REL "assets/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"

void app_asset_path(const char *rel, char *buf, size_t cap)
{
	char exe[4096];
	ssize_t n;

	if (rel[0] == '/' || access(rel, R_OK) == 0) {
		snprintf(buf, cap, "%s", rel);
		return;
	}
	n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n > 0) {
		exe[n] = 0;
		char *slash = strrchr(exe, '/');
		if (slash) {
			*slash = 0; /* .../bin */
			slash = strrchr(exe, '/');
			if (slash)
				*slash = 0;
			snprintf(buf, cap, "%.3000s/%s", exe, rel);
			if (access(buf, R_OK) == 0)
				return;
		}
	}
	snprintf(buf, cap, "%s", rel);
}

void app_default_model(char *buf, size_t cap)
{
	app_asset_path(DEFAULT_MODEL_REL, buf, cap);
}

const char *app_kv_name(int kv)
{
	static const char *const name[APP_KV_COUNT] = {
		[APP_KV_SEKV] = "sekv", [APP_KV_FULL] = "full", [APP_KV_STREAMING] = "streaming",
		[APP_KV_SNAPKV] = "snapkv", [APP_KV_H2O] = "h2o", [APP_KV_QUEST] = "quest",
		[APP_KV_SUMMARY] = "summary", [APP_KV_SHADOWKV] = "shadowkv",
	};

	return kv >= 0 && kv < APP_KV_COUNT ? name[kv] : "?";
}

int app_parse_doc_id(const char *s, int64_t *id)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v <= 0)
		return -1;
	*id = v;
	return 0;
}

static int parse_int(const char *s, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

static int parse_double(const char *s, double lo, double hi, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= lo && v <= hi))
		return -1;
	*out = v;
	return 0;
}

enum opt_kind {
	OPT_FLAG,   /* int, set to 1; takes no value */
	OPT_TEXT,   /* const char *, pointing into argv */
	OPT_PATH,   /* char[APP_PATH_MAX], copied; empty refused */
	OPT_INT,    /* int in [imin, imax] */
	OPT_U64,    /* uint64_t in [imin, imax] */
	OPT_DOUBLE, /* double in [lo, hi], (lo, hi] when lo_open */
	OPT_FLOAT,  /* float, likewise */
	OPT_CHOICE, /* int: index of the value in choices */
};

enum opt_def {
	DEF_ZERO,    /* 0 / NULL / "" / the first choice */
	DEF_VALUE,   /* def_value */
	DEF_SEKV,    /* the field at def_off of sekv_default_params() */
	DEF_SAMPLER, /* the field at def_off of sampler_default_params() */
	DEF_CORES,   /* online CPU cores */
	DEF_MODEL,   /* app_default_model() */
	DEF_LIBRARY, /* store_default_path(), "" when there is none */
};

struct opt_row {
	const char *name;    /* "-m": in messages */
	const char *alias;   /* "--model", or NULL */
	const char *arg;     /* value name in help ("FILE"); NULL for OPT_FLAG,
	                        and for OPT_CHOICE (its choices are shown) */
	enum opt_kind kind;
	size_t off;          /* offsetof(struct app_opts, field) */
	size_t set_off;      /* offsetof its "given" flag, or NO_SET */
	enum opt_def def;
	double def_value;    /* DEF_VALUE */
	size_t def_off;      /* DEF_SEKV, DEF_SAMPLER: offsetof in the engine's params */
	long imin, imax;     /* OPT_INT, OPT_U64 limits, inclusive */
	double lo, hi;       /* OPT_DOUBLE, OPT_FLOAT limits, inclusive */
	int lo_open;         /* 1: lo itself is refused */
	const char *what;    /* what a value is, for errors ("a rank"), or NULL */
	const char *choices; /* OPT_CHOICE: "sekv|full" */
	const char *env;     /* environment variable, or NULL */
	const char *def_text;/* the default in help when it is not a number */
	const char *help;
	unsigned cmds;       /* APP_CMD_* that use it */
	unsigned help_cmds;  /* APP_CMD_* whose help shows this row (0: cmds) */
	int help_only;       /* 1: a command's own wording of an option another
	                        row parses (or the command parses itself); never
	                        matched */
};

#define NO_SET ((size_t)-1)
#define F(field) offsetof(struct app_opts, field)
#define SEKV_DEF(field) .def = DEF_SEKV, .def_off = offsetof(struct sekv_params, field)
#define SAMPLER_DEF(field) .def = DEF_SAMPLER, .def_off = offsetof(struct sampler_params, field)

/* Sub-commands that load the model (app_load). */
#define USES_MODEL (APP_CMD_CHAT | APP_CMD_INGEST | APP_CMD_ASK | APP_CMD_GENERATE | APP_CMD_EVAL | \
		    APP_CMD_TRAIN)
#define ANSWERS (APP_CMD_CHAT | APP_CMD_ASK | APP_CMD_GENERATE | APP_CMD_EVAL)
#define MEMORY (APP_CMD_CHAT | APP_CMD_INGEST | APP_CMD_ASK)

/* An engine default is copied by the option's kind: the types must agree. */
_Static_assert(_Generic(((struct sekv_params *)0)->budget, double: 1, default: 0), "--budget is double");
_Static_assert(_Generic(((struct sekv_params *)0)->r_max, int: 1, default: 0), "--rmax is int");
_Static_assert(_Generic(((struct sekv_params *)0)->n_recent, int: 1, default: 0), "--recent is int");
_Static_assert(_Generic(((struct sekv_params *)0)->exact_below, int: 1, default: 0),
	       "--exact-below is int");
_Static_assert(_Generic(((struct sekv_params *)0)->alpha, float: 1, default: 0), "--alpha is float");
_Static_assert(_Generic(((struct sekv_params *)0)->rank_energy, float: 1, default: 0),
	       "--rank-energy is float");
_Static_assert(_Generic(((struct sekv_params *)0)->rank_energy_v, float: 1, default: 0),
	       "--rank-energy-v is float");
_Static_assert(_Generic(((struct sekv_params *)0)->key_pre_rope, int: 1, default: 0),
	       "--factor-keys is int");
_Static_assert(_Generic(((struct sekv_params *)0)->static_share, double: 1, default: 0),
	       "--static-share is double");
_Static_assert(_Generic(((struct sekv_params *)0)->zoom_blocks, int: 1, default: 0),
	       "--zoom-blocks is int");
_Static_assert(_Generic(((struct sekv_params *)0)->zoom_scan, int: 1, default: 0),
	       "--zoom-scan is int");
_Static_assert(_Generic(((struct sampler_params *)0)->temperature, float: 1, default: 0), "--temp is float");
_Static_assert(_Generic(((struct sampler_params *)0)->seed, uint64_t: 1, default: 0), "--seed is uint64_t");

static const struct opt_row opt_table[] = {
	{ .name = "-m", .alias = "--model", .arg = "FILE", .kind = OPT_PATH, .off = F(model),
	  .set_off = NO_SET, .def = DEF_MODEL, .env = "SEKV_MODEL",
	  .def_text = "assets/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", .help = "GGUF model",
	  .cmds = USES_MODEL | APP_CMD_TOKENIZE | APP_CMD_INSPECT | APP_CMD_COUNT },
	{ .name = "--tokenizer", .arg = "FILE", .kind = OPT_TEXT, .off = F(tokenizer), .set_off = NO_SET,
	  .help = "SentencePiece tokenizer.model instead of the GGUF vocabulary",
	  .cmds = USES_MODEL | APP_CMD_TOKENIZE | APP_CMD_COUNT },
	{ .name = "--db", .arg = "FILE", .kind = OPT_PATH, .off = F(db), .set_off = NO_SET,
	  .def = DEF_LIBRARY, .env = "SEKV_DB",
	  .def_text = "$XDG_DATA_HOME/sekv/library.db, else ~/.local/share/sekv/library.db",
	  .help = "library",
	  .cmds = MEMORY | APP_CMD_LS | APP_CMD_RM | APP_CMD_SESSIONS | APP_CMD_EXPORT | APP_CMD_CHECK },
	{ .name = "-t", .alias = "--threads", .arg = "N", .kind = OPT_INT, .off = F(n_threads),
	  .set_off = NO_SET, .def = DEF_CORES, .imin = 1, .imax = 1024, .env = "SEKV_THREADS",
	  .def_text = "all cores", .help = "threads", .cmds = USES_MODEL },
	{ .name = "--budget", .arg = "F", .kind = OPT_DOUBLE, .off = F(budget), .set_off = F(budget_set),
	  SEKV_DEF(budget), .lo = 0, .hi = 1, .lo_open = 1, .what = "a fraction of the full KV cache",
	  .env = "SEKV_BUDGET", .help = "device-tier budget as a fraction of the full KV cache",
	  .cmds = MEMORY },
	{ .name = "--rmax", .arg = "R", .kind = OPT_INT, .off = F(r_max), .set_off = F(r_max_set),
	  SEKV_DEF(r_max), .imin = 1, .imax = SEKV_R_MAX_ALL, .what = "a rank",
	  .def_text = "no cap: the span's length or d_h",
	  .help = "most SVD components a span factor keeps (stored at ingest), used at ask",
	  .cmds = MEMORY | APP_CMD_EVAL },
	{ .name = "--kv", .kind = OPT_CHOICE, .off = F(kv), .set_off = NO_SET,
	  .choices = "sekv|full|streaming|snapkv|h2o|quest|summary|shadowkv",
	  .help = "memory to answer from: SeKV, the exact full KV cache, or a rival at the same "
		  "device budget: attention sinks and recent rows (StreamingLLM), the rows the "
		  "question attends to (SnapKV), heavy hitters of the prefill and recent rows (H2O), "
		  "per step the pages with the best key bound (Quest), SeKV's summaries never zoomed, "
		  "per step the chunks with the best landmarks rebuilt from low-rank keys (ShadowKV)",
	  .cmds = APP_CMD_CHAT | APP_CMD_ASK },
	{ .name = "--router", .kind = OPT_CHOICE, .off = F(router), .set_off = NO_SET,
	  .choices = "landmark|summary|oracle|none|trained|untrained",
	  .help = "SeKV zoom choice: landmarks (mean keys of short blocks; the untrained default, "
		  "also named untrained), the paper's router over span summaries (untrained W), the "
		  "spans with the most exact attention (measurement: reads the exact KV; implies "
		  "--mass-recall), none (summaries only), or the trained router (the landmark scores "
		  "recalibrated per layer and head by --router-weights, trained by sekv train)",
	  .cmds = APP_CMD_CHAT | APP_CMD_ASK | APP_CMD_EVAL },
	{ .name = "--device-rows", .kind = OPT_CHOICE, .off = F(device_rows), .set_off = NO_SET,
	  .choices = "k8v4|int8|f16",
	  .help = "SeKV's device-tier rows (exact, summaries, question and answer, zoomed): int8 "
		  "keys (a scale per row, keys scaled per channel first) with int4 values (a scale "
		  "per 32 values): 0.42x the fp16 bytes at d_h 64; int8 keys and values (0.53x); or "
		  "fp16 as the model computed them. A memory is fitted to the budget at the type it "
		  "is ingested with",
	  .cmds = MEMORY | APP_CMD_EVAL },
	{ .name = "--router-weights", .arg = "FILE", .kind = OPT_TEXT, .off = F(router_weights),
	  .set_off = NO_SET, .def_text = "assets/router/MODEL.bin, MODEL the model file's name without .gguf",
	  .help = "weights of --router trained (refused unless trained for this model's fingerprint); "
		  "sekv train writes them here unless --out says",
	  .cmds = APP_CMD_CHAT | APP_CMD_ASK | APP_CMD_EVAL | APP_CMD_TRAIN },
	{ .name = "--steps", .arg = "N", .kind = OPT_INT, .off = F(train_steps), .set_off = NO_SET,
	  .def = DEF_VALUE, .def_value = 600, .imin = 1, .imax = 1000000, .what = "a number of steps",
	  .help = "optimiser steps of the router training", .cmds = APP_CMD_TRAIN },
	{ .name = "--train-docs", .arg = "N", .kind = OPT_INT, .off = F(train_docs), .set_off = NO_SET,
	  .def = DEF_VALUE, .def_value = 16, .imin = 1, .imax = 100000, .what = "a number of documents",
	  .help = "training memories cut from the training files (a quarter as many held-out ones "
		  "from the held-out files, at least 2)", .cmds = APP_CMD_TRAIN },
	{ .name = "--doc-tokens", .arg = "N", .kind = OPT_INT, .off = F(train_tokens), .set_off = NO_SET,
	  .def = DEF_VALUE, .def_value = 2048, .imin = 256, .imax = 1 << 20, .what = "a number of tokens",
	  .help = "tokens of each training memory", .cmds = APP_CMD_TRAIN },
	{ .name = "--train-w", .kind = OPT_CHOICE, .off = F(train_w), .set_off = NO_SET,
	  .choices = "on|off", .help = "train the projection W (the paper's router term) beside the "
		  "landmark recalibration", .cmds = APP_CMD_TRAIN },
	{ .name = "--train-target", .kind = OPT_CHOICE, .off = F(train_target), .set_off = NO_SET,
	  .choices = "share|cover", .help = "what the router learns: each span's share of the head's "
		  "attention (soft labels: a score the budget can compare across heads), or the smallest "
		  "span set holding 0.9 of each head's attention over compressed spans (the paper's cover "
		  "labels, positive weight 10, and a budget loss)",
	  .cmds = APP_CMD_TRAIN },
	{ .name = "--zoom-blocks", .arg = "N", .kind = OPT_INT, .off = F(zoom_blocks),
	  .set_off = NO_SET, SEKV_DEF(zoom_blocks), .imin = 0, .imax = 1 << 16,
	  .help = "with landmark routing, a zoom rebuilds at most N landmark blocks of a span "
		  "(its best block and neighbours; the span's summary stands for the rest), grown "
		  "to the whole span where the budget still allows; 0: whole spans",
	  .cmds = APP_CMD_CHAT | APP_CMD_ASK | APP_CMD_EVAL },
	{ .name = "--zoom-scan", .arg = "N", .kind = OPT_INT, .off = F(zoom_scan),
	  .set_off = NO_SET, SEKV_DEF(zoom_scan), .imin = 0, .imax = 1 << 10,
	  .help = "with landmark routing, zoom single rows: the best landmark blocks holding N "
		  "(an integer) times the rows the zoom budget holds have their keys scored against the query "
		  "through their factors, and only the rows with the most estimated attention are "
		  "rebuilt (--zoom-blocks is then unused; keys factored before RoPE keep blocks); "
		  "0: landmark blocks",
	  .cmds = APP_CMD_CHAT | APP_CMD_ASK | APP_CMD_EVAL },
	{ .name = "--question-turn", .kind = OPT_CHOICE, .off = F(question_zoom), .set_off = NO_SET,
	  .choices = "exact|zoom",
	  .help = "how SeKV reads the memory while a question turn is decoded: every span rebuilt "
		  "from the host tier (the question is read as if prefilled with the document; the "
		  "budget binds the answer), or zoomed under the budget as the answer is",
	  .cmds = APP_CMD_CHAT | APP_CMD_ASK | APP_CMD_EVAL },
	{ .name = "--zoom-shares", .arg = "LIST", .kind = OPT_TEXT, .off = F(zoom_shares),
	  .set_off = NO_SET,
	  .help = "shares of the zoom budget of the global layers in order, e.g. 2,2,1 (one "
		  "number per global layer; normalised); default: equal",
	  .cmds = APP_CMD_CHAT | APP_CMD_ASK | APP_CMD_EVAL },
	{ .name = "--mass-recall", .kind = OPT_FLAG, .off = F(mass_recall), .set_off = NO_SET,
	  .help = "SeKV: also read the exact keys and values and report the share of exact "
		  "attention on exact and zoomed rows and the attention output's relative error "
		  "against exact attention, and the share the budget would hold as the rows with the "
		  "most exact attention (--json: mass_recall, attn_err, mass_oracle)",
	  .cmds = APP_CMD_ASK },
	{ .name = "-n", .alias = "--n-predict", .arg = "N", .kind = OPT_INT, .off = F(n_predict),
	  .set_off = F(n_predict_set), .def = DEF_VALUE, .def_value = 256, .imin = 0, .imax = 1 << 20,
	  .help = "most answer tokens", .cmds = ANSWERS },
	{ .name = "--json", .kind = OPT_FLAG, .off = F(json), .set_off = NO_SET,
	  .help = "one JSON object: answer, metrics, zoomed spans, evidence (with page_first and "
		  "page_last for a PDF)", .cmds = APP_CMD_ASK },
	{ .name = "--evidence-heads", .arg = "L:H,...", .kind = OPT_TEXT, .off = F(evidence_heads),
	  .set_off = NO_SET, .def_text = "calibrated once per model, stored in the library",
	  .help = "retrieval heads (model layer:query head) whose attention ranks the evidence",
	  .cmds = APP_CMD_CHAT | APP_CMD_ASK },
	{ .name = "--evidence-top", .arg = "N", .kind = OPT_INT, .off = F(evidence_top),
	  .set_off = NO_SET, .def = DEF_VALUE, .def_value = APP_EVIDENCE_TOP, .imin = 1, .imax = 1 << 20,
	  .what = "a number of passages (--no-evidence shows none)",
	  .help = "evidence passages shown per answer (--json: every passage with a large N)",
	  .cmds = APP_CMD_CHAT | APP_CMD_ASK },
	{ .name = "--session", .arg = "ID", .kind = OPT_INT, .off = F(session_id), .set_off = NO_SET,
	  .imin = 1, .imax = INT_MAX, .what = "a session id (see 'sekv sessions')",
	  .help = "chat, ask: continue this stored session (its document, transcript and the KV "
		  "of its turns; no forward pass over earlier tokens); rm: delete it",
	  .cmds = APP_CMD_RM | APP_CMD_CHAT | APP_CMD_ASK },
	{ .name = "--only-full-kv", .kind = OPT_FLAG, .off = F(only_full_kv), .set_off = NO_SET,
	  .help = "delete only the documents' exact KV (kept with --keep-full-kv, or by an older "
		  "sekv): their memory, sessions and answers stay",
	  .cmds = APP_CMD_RM },
	{ .name = "--no-evidence", .kind = OPT_FLAG, .off = F(no_evidence), .set_off = NO_SET,
	  .help = "no evidence passages after the answer", .cmds = APP_CMD_CHAT | APP_CMD_ASK },
	{ .name = "--temp", .arg = "T", .kind = OPT_FLOAT, .off = F(temperature), .set_off = NO_SET,
	  SAMPLER_DEF(temperature), .lo = 0, .hi = 100, .help = "sampling temperature, 0 = greedy",
	  .cmds = ANSWERS },
	{ .name = "--seed", .arg = "S", .kind = OPT_U64, .off = F(seed), .set_off = NO_SET,
	  SAMPLER_DEF(seed), .imin = 0, .imax = LONG_MAX, .help = "sampling seed (sekv train: the "
	  "run's seed)", .cmds = ANSWERS | APP_CMD_TRAIN },
	{ .name = "--repeat-penalty", .arg = "P", .kind = OPT_FLOAT, .off = F(repeat_penalty),
	  .set_off = F(repeat_penalty_set), .def = DEF_VALUE, .def_value = APP_REPEAT_PENALTY_BASE,
	  .lo = 1, .hi = 10, .what = "a factor",
	  .def_text = "1 (off) with an instruction-tuned model's chat template, 1.1 with the "
		      "completion format of a pre-trained one",
	  .help = "penalty on the last 64 answer tokens, 1 = off", .cmds = ANSWERS },
	{ .name = "--bos", .kind = OPT_FLAG, .off = F(bos), .set_off = NO_SET,
	  .help = "start with the BOS token", .cmds = APP_CMD_TOKENIZE },
	{ .name = "-p", .alias = "--prompt", .arg = "TEXT", .kind = OPT_TEXT, .off = F(prompt),
	  .set_off = NO_SET, .help = "the prompt", .cmds = APP_CMD_GENERATE },
	{ .name = "--title", .arg = "TEXT", .kind = OPT_TEXT, .off = F(title), .set_off = NO_SET,
	  .def_text = "the file name", .help = "document title", .cmds = APP_CMD_INGEST },
	{ .name = "--conversation", .arg = "N|TITLE", .kind = OPT_TEXT, .off = F(conversation),
	  .set_off = NO_SET, .def_text = "all",
	  .help = "of a chat history (ChatGPT conversations.json, JSONL, transcript), the "
		  "conversation to import: its number in the file or its title; each one imported "
		  "becomes a document and a session", .cmds = APP_CMD_INGEST },
	{ .name = "--resume", .arg = "DOC", .kind = OPT_TEXT, .off = F(resume), .set_off = NO_SET,
	  .help = "continue the interrupted ingest of document DOC (shown 'incomplete' by 'sekv ls') "
		  "from its last committed chunk, with the settings it was started with; the stored "
		  "memory is the one an uninterrupted ingest stores; a part of a --split ingest goes "
		  "on with the parts after it, read again from the file", .cmds = APP_CMD_INGEST },
	{ .name = "--rebuild", .arg = "DOC", .kind = OPT_TEXT, .off = F(rebuild), .set_off = NO_SET,
	  .help = "build the SeKV memory of the stored document DOC again with this command's "
		  "memory settings (--budget, --alpha, --rank-energy, --recent, ...), from its kept "
		  "exact KV (--keep-full-kv) or, without it, a prefill of its stored tokens; the new "
		  "memory replaces the old one (its sessions keep theirs)", .cmds = APP_CMD_INGEST },
	{ .name = "--password", .arg = "PW", .kind = OPT_TEXT, .off = F(password), .set_off = NO_SET,
	  .def_text = "asked for on a terminal when the PDF needs one",
	  .help = "user password of an encrypted PDF (a PDF with only an owner password needs none)",
	  .cmds = APP_CMD_INGEST | APP_CMD_COUNT },
	{ .name = "--max-tokens", .arg = "N", .kind = OPT_INT, .off = F(max_tokens), .set_off = NO_SET,
	  .imin = 1, .imax = 1 << 30, .what = "a number of tokens", .def_text = "the model's context",
	  .help = "most tokens a document may have: a longer one is refused, or with this option "
		  "only its first N tokens are stored (said so), or with --split it is cut in parts "
		  "of at most N",
	  .cmds = APP_CMD_INGEST | APP_CMD_COUNT },
	{ .name = "--split", .kind = OPT_FLAG, .off = F(split), .set_off = NO_SET,
	  .help = "store a document longer than the model's context (or --max-tokens) as "
		  "consecutive parts, each its own document titled \"TITLE (part i/n)\", cut at "
		  "paragraph ends where one is near; ask them one by one",
	  .cmds = APP_CMD_INGEST },
	{ .name = "--keep-full-kv", .kind = OPT_FLAG, .off = F(keep_full_kv), .set_off = NO_SET,
	  .help = "also keep the document's exact KV in the library (about as much again as "
		  "everything else): --kv full and the rivals then read it instead of prefilling "
		  "the document again; SeKV never needs it",
	  .cmds = APP_CMD_INGEST },
	{ .name = "--batch", .arg = "N", .kind = OPT_INT, .off = F(n_batch), .set_off = NO_SET,
	  .def = DEF_VALUE, .def_value = 256, .imin = 1, .imax = 4096, .help = "prefill tokens per forward pass",
	  .cmds = APP_CMD_INGEST | APP_CMD_GENERATE },
	{ .name = "--exact-below", .arg = "N", .kind = OPT_INT, .off = F(exact_below),
	  .set_off = F(exact_below_set), SEKV_DEF(exact_below), .imin = 0, .imax = 1 << 30,
	  .help = "a document shorter than N tokens keeps its memory exact (no spans: at a small "
		  "budget a short text would be a handful of spans); 0: never. sekv eval: 0 unless "
		  "given, so that every length measures the method at its budget",
	  .cmds = APP_CMD_INGEST | APP_CMD_EVAL },
	{ .name = "--recent", .arg = "N", .kind = OPT_INT, .off = F(n_recent), .set_off = NO_SET,
	  SEKV_DEF(n_recent), .imin = 0, .imax = 1 << 20, .help = "last document tokens kept exact",
	  .cmds = APP_CMD_INGEST | APP_CMD_EVAL },
	{ .name = "--alpha", .arg = "A", .kind = OPT_FLOAT, .off = F(alpha), .set_off = NO_SET,
	  SEKV_DEF(alpha), .lo = 0, .hi = 100, .help = "span boundary threshold: mean + A deviations of surprisal",
	  .cmds = APP_CMD_INGEST },
	{ .name = "--rank-energy", .arg = "E", .kind = OPT_FLOAT, .off = F(rank_energy),
	  .set_off = NO_SET, SEKV_DEF(rank_energy), .lo = 0, .hi = 1,
	  .help = "rank gate of the keys: each span's K factor keeps the fewest components holding "
		  "this share of the span's energy, at most --rmax, and is stored as rows instead "
		  "(int8 when their error is within 1 - E, else fp16) where those are smaller "
		  "(0: no gate: every component up to --rmax, never rows)",
	  .cmds = APP_CMD_INGEST | APP_CMD_EVAL },
	{ .name = "--rank-energy-v", .arg = "E", .kind = OPT_FLOAT, .off = F(rank_energy_v),
	  .set_off = NO_SET, SEKV_DEF(rank_energy_v), .lo = 0, .hi = 1,
	  .help = "the same rank gate for the values, which need more to copy a digit "
		  "(0: --rank-energy's)",
	  .cmds = APP_CMD_INGEST | APP_CMD_EVAL },
	{ .name = "--anchors", .kind = OPT_CHOICE, .off = F(anchors), .set_off = NO_SET,
	  .choices = "surprisal|attention|both",
	  .help = "SeKV anchors (exact rows and span boundaries): the most surprising tokens (the "
		  "paper's rule; also where no attention was recorded), the tokens that received the "
		  "most attention while the document was prefilled (log of the mean per later query, "
		  "over the global layers and KV heads), or those where either stands out; chosen when "
		  "the memory is built, so --resume and --rebuild follow the flag given to them",
	  .cmds = APP_CMD_INGEST | APP_CMD_EVAL },
	{ .name = "--static-share", .arg = "F", .kind = OPT_DOUBLE, .off = F(static_share),
	  .set_off = NO_SET, SEKV_DEF(static_share), .lo = 0, .hi = 1, .lo_open = 1,
	  .what = "a fraction of the budget",
	  .help = "share of the device budget for exact rows (anchors, sinks, recent window), "
		  "span summaries and landmarks; the rest is for zoomed spans and the conversation",
	  .cmds = APP_CMD_INGEST | APP_CMD_EVAL },
	{ .name = "--factor-keys", .kind = OPT_CHOICE, .off = F(key_pre_rope), .set_off = NO_SET,
	  SEKV_DEF(key_pre_rope), .choices = "post-rope|pre-rope",
	  .help = "SVD of the keys as the model stores them (after RoPE), or of the keys before "
		  "RoPE, each rebuilt row rotated back to its position",
	  .cmds = APP_CMD_INGEST | APP_CMD_EVAL },
	{ .name = "--act", .kind = OPT_CHOICE, .off = F(act_f32), .set_off = NO_SET,
	  .choices = "q8|f32", .help = "decode activations: int8 blocks as llama.cpp, or fp32",
	  .cmds = USES_MODEL },
	/* sekv eval: the grid (lists are parsed by app/cmd_eval.c) */
	{ .name = "--methods", .arg = "LIST", .kind = OPT_TEXT, .off = F(eval_methods), .set_off = NO_SET,
	  .def_text = APP_EVAL_METHODS,
	  .help = "KV methods to compare: full (the reference), sekv, and the rivals streaming, "
		  "snapkv, h2o, quest, summary (SeKV summaries, never zoomed), shadowkv; sekv-landmark, "
		  "sekv-trained, sekv-oracle: SeKV with that router whatever --router says (routers "
		  "compared on the same haystacks)", .cmds = APP_CMD_EVAL },
	{ .name = "--budgets", .arg = "LIST", .kind = OPT_TEXT, .off = F(eval_budgets), .set_off = NO_SET,
	  .def_text = APP_EVAL_BUDGETS, .help = "device budgets of every method but full, fractions of "
		  "the full KV cache", .cmds = APP_CMD_EVAL },
	{ .name = "--tasks", .arg = "LIST", .kind = OPT_TEXT, .off = F(eval_tasks), .set_off = NO_SET,
	  .def_text = APP_EVAL_TASKS,
	  .help = "needle retrieval, ten facts in one haystack, a second question in the same "
		  "conversation, KL and top-1 against full KV, SeKV mass_recall and attn_err; RULER-style: copy (digit "
		  "strings and codes), mk, mv, mq (multi-key, -value, -query needles), vt (variable "
		  "tracking), cwe, fwe (common and frequent words), qa (--qa questions)",
	  .cmds = APP_CMD_EVAL },
	{ .name = "--lengths", .arg = "LIST", .kind = OPT_TEXT, .off = F(eval_lengths), .set_off = NO_SET,
	  .def_text = APP_EVAL_LENGTHS, .help = "haystack lengths, tokens", .cmds = APP_CMD_EVAL },
	{ .name = "--depths", .arg = "LIST", .kind = OPT_TEXT, .off = F(eval_depths), .set_off = NO_SET,
	  .def_text = APP_EVAL_DEPTHS, .help = "needle depths, fractions of the haystack",
	  .cmds = APP_CMD_EVAL },
	{ .name = "--needles", .arg = "N", .kind = OPT_INT, .off = F(eval_needles), .set_off = NO_SET,
	  .def = DEF_VALUE, .def_value = APP_EVAL_NEEDLES, .imin = 1, .imax = 10000, .what = "a number of needles",
	  .help = "needles (haystacks) per length x depth cell", .cmds = APP_CMD_EVAL },
	{ .name = "--kl-needles", .arg = "N", .kind = OPT_INT, .off = F(eval_kl_needles), .set_off = NO_SET,
	  .def = DEF_VALUE, .def_value = 0, .imin = 0, .imax = 10000, .what = "a number of needles",
	  .help = "the kl task runs on the first N needle haystacks of a cell (its forced pass decodes "
		  "the question again per method); 0: a quarter of --needles", .cmds = APP_CMD_EVAL },
	{ .name = "--corpus", .arg = "FILE", .kind = OPT_TEXT, .off = F(eval_corpus), .set_off = NO_SET,
	  .def_text = APP_EVAL_CORPUS, .help = "the corpus list: the background files with their SHA-256 "
		  "(a changed or missing file is reported and left out)", .cmds = APP_CMD_EVAL },
	{ .name = "--corpus-pin", .kind = OPT_FLAG, .off = F(eval_corpus_pin), .set_off = NO_SET,
	  .help = "write this machine's plain text files (/usr/share/common-licenses, /usr/share/doc) "
		  "and the qa documents to the --corpus list, then exit", .cmds = APP_CMD_EVAL },
	{ .name = "--qa", .arg = "FILE", .kind = OPT_TEXT, .off = F(eval_qa), .set_off = NO_SET,
	  .def_text = APP_EVAL_QA, .help = "questions of the qa task (JSONL of doc, question, answer)",
	  .cmds = APP_CMD_EVAL },
	{ .name = "--out", .arg = "DIR", .kind = OPT_TEXT, .off = F(eval_out), .set_off = NO_SET,
	  .help = "directory for results.json, results.md, the plots and eval.db (created)",
	  .cmds = APP_CMD_EVAL | APP_CMD_TRAIN, .help_cmds = APP_CMD_EVAL },
	{ .name = "--out", .arg = "FILE", .kind = OPT_FLAG, .off = F(help), .set_off = NO_SET,
	  .help = "the router weights written (default --router-weights' path); beside them: "
		  "FILE.ckpt (checkpoint), FILE.data and FILE.val (the collected training and held-out "
		  "samples, kept for --resume), FILE.best (the checkpoint of the step with the lowest "
		  "held-out loss, whose weights FILE gets), FILE.png (loss curves)",
	  .cmds = APP_CMD_TRAIN, .help_only = 1 },
	{ .name = "--resume", .kind = OPT_FLAG, .off = F(help), .set_off = NO_SET,
	  .help = "go on from FILE.ckpt and the collected FILE.data and FILE.val of a run that was "
		  "stopped (same model and options); without them, start afresh",
	  .cmds = APP_CMD_TRAIN, .help_only = 1 },
	{ .name = "-q", .alias = "--quiet", .kind = OPT_FLAG, .off = F(quiet), .set_off = NO_SET,
	  .help = "no progress output",
	  .cmds = APP_CMD_INGEST | APP_CMD_ASK | APP_CMD_GENERATE | APP_CMD_LS | APP_CMD_RM | APP_CMD_EVAL |
		  APP_CMD_CHECK | APP_CMD_COUNT | APP_CMD_TRAIN },
	{ .name = "-h", .alias = "--help", .kind = OPT_FLAG, .off = F(help), .set_off = NO_SET,
	  .help = "this help", .cmds = APP_CMD_ALL },
};

#define N_OPT (sizeof opt_table / sizeof opt_table[0])

static const struct opt_row *opt_find(const char *a)
{
	for (size_t i = 0; i < N_OPT; i++)
		if (!opt_table[i].help_only && (!strcmp(a, opt_table[i].name) ||
		    (opt_table[i].alias && !strcmp(a, opt_table[i].alias))))
			return &opt_table[i];
	return NULL;
}

/* Index of val in the '|'-separated list, or -1. */
static int choice_index(const char *list, const char *val)
{
	size_t n = strlen(val);

	for (int i = 0; *list; i++) {
		size_t len = strcspn(list, "|");
		if (len == n && !strncmp(list, val, n))
			return i;
		list += len + (list[len] == '|');
	}
	return -1;
}

/* Stores val into o's field for r. Returns 0, or -1 when it is not a
 * value of the option's kind and limits. */
static int opt_store(struct app_opts *o, const struct opt_row *r, const char *val)
{
	char *f = (char *)o + r->off;
	long n;
	double d;

	switch (r->kind) {
	case OPT_FLAG:
		*(int *)f = 1;
		break;
	case OPT_TEXT:
		*(const char **)f = val;
		break;
	case OPT_PATH:
		if (!*val)
			return -1;
		snprintf(f, APP_PATH_MAX, "%s", val);
		break;
	case OPT_INT:
	case OPT_U64:
		if (parse_int(val, r->imin, r->imax, &n))
			return -1;
		if (r->kind == OPT_INT)
			*(int *)f = (int)n;
		else
			*(uint64_t *)f = (uint64_t)n;
		break;
	case OPT_DOUBLE:
	case OPT_FLOAT:
		if (parse_double(val, r->lo, r->hi, &d) || (r->lo_open && d <= r->lo))
			return -1;
		if (r->kind == OPT_DOUBLE)
			*(double *)f = d;
		else
			*(float *)f = (float)d;
		break;
	case OPT_CHOICE:
		if ((n = choice_index(r->choices, val)) < 0)
			return -1;
		*(int *)f = (int)n;
		break;
	}
	if (r->set_off != NO_SET)
		*(int *)((char *)o + r->set_off) = 1;
	return 0;
}

/* The error for a bad value of r given as flag a: what was expected. */
static int opt_bad(const struct opt_row *r, const char *a, const char *val, char *err, size_t errlen)
{
	switch (r->kind) {
	case OPT_PATH:
		return sekv_errf(err, errlen, SEKV_EINVAL, "%s: empty path", r->name);
	case OPT_CHOICE: {
		size_t len = strcspn(r->choices, "|");
		if (strchr(r->choices + len + 1, '|'))
			return sekv_errf(err, errlen, SEKV_EINVAL, "%s %s: expected one of %s", a, val,
					 r->choices);
		return sekv_errf(err, errlen, SEKV_EINVAL, "%s %s: expected '%.*s' or '%s'", a, val,
				 (int)len, r->choices, r->choices + len + 1);
	}
	case OPT_INT:
	case OPT_U64:
		return sekv_errf(err, errlen, SEKV_EINVAL, "%s %s: expected %s in [%ld, %ld]", a, val,
				 r->what ? r->what : "an integer", r->imin, r->imax);
	case OPT_DOUBLE:
	case OPT_FLOAT:
		return sekv_errf(err, errlen, SEKV_EINVAL, "%s %s: expected %s in %c%g, %g]", a, val,
				 r->what ? r->what : "a number", r->lo_open ? '(' : '[', r->lo, r->hi);
	default:
		return sekv_errf(err, errlen, SEKV_EINVAL, "option %s: bad value '%s'", a, val);
	}
}

/* The default of r as a number (numeric and choice kinds). */
static double opt_default_num(const struct opt_row *r)
{
	struct sekv_params sp;
	struct sampler_params smp;
	const char *src;

	switch (r->def) {
	case DEF_VALUE:
		return r->def_value;
	case DEF_SEKV:
		sekv_default_params(&sp);
		src = (const char *)&sp + r->def_off;
		break;
	case DEF_SAMPLER:
		sampler_default_params(&smp);
		src = (const char *)&smp + r->def_off;
		break;
	case DEF_CORES: {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		return n < 1 ? 1 : (double)n;
	}
	default:
		return 0;
	}
	switch (r->kind) {
	case OPT_INT:
		return *(const int *)src;
	case OPT_U64:
		return (double)*(const uint64_t *)src;
	case OPT_DOUBLE:
		return *(const double *)src;
	case OPT_FLOAT:
		return *(const float *)src;
	default:
		return 0;
	}
}

static void opt_default(struct app_opts *o, const struct opt_row *r)
{
	char *f = (char *)o + r->off;
	double v = opt_default_num(r);

	switch (r->kind) {
	case OPT_PATH:
		if (r->def == DEF_MODEL)
			app_default_model(f, APP_PATH_MAX);
		else if (r->def == DEF_LIBRARY && store_default_path(f, APP_PATH_MAX))
			f[0] = 0; /* no usable default: app_check_db says what to set */
		break;
	case OPT_INT:
	case OPT_CHOICE:
		*(int *)f = (int)v;
		break;
	case OPT_U64:
		*(uint64_t *)f = (uint64_t)v;
		break;
	case OPT_DOUBLE:
		*(double *)f = v;
		break;
	case OPT_FLOAT:
		*(float *)f = (float)v;
		break;
	default:
		break; /* flags and text start at 0 / NULL */
	}
}

float app_repeat_penalty(const struct app_opts *o, int fmt)
{
	if (o->repeat_penalty_set)
		return o->repeat_penalty;
	return fmt == CHAT_FORMAT_TEMPLATE ? 1.0f : APP_REPEAT_PENALTY_BASE;
}

int app_dev_rows(const struct app_opts *o)
{
	static const int type[] = { SEKV_DEV_K8V4, SEKV_DEV_I8, SEKV_DEV_F16 };

	return type[o->device_rows >= 0 && o->device_rows < 3 ? o->device_rows : 0];
}

const char *app_dev_rows_name(const struct app_opts *o)
{
	static const char *name[] = { "k8v4", "int8", "f16" };

	return name[o->device_rows >= 0 && o->device_rows < 3 ? o->device_rows : 0];
}

int app_opts_parse(struct app_opts *o, int argc, char **argv, char *err, size_t errlen)
{
	int only_args = 0;
	const char *e;

	memset(o, 0, sizeof *o);
	for (size_t i = 0; i < N_OPT; i++)
		if (!opt_table[i].help_only)
			opt_default(o, &opt_table[i]);
	/* a malformed environment value is ignored: the default stands */
	for (size_t i = 0; i < N_OPT; i++)
		if (opt_table[i].env && (e = getenv(opt_table[i].env)) && *e)
			opt_store(o, &opt_table[i], e);
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		const struct opt_row *r;

		/* "-3" is a (bad) document id, not an option */
		if (only_args || a[0] != '-' || !a[1] || (a[1] >= '0' && a[1] <= '9')) {
			if (o->n_args >= APP_MAX_ARGS)
				return sekv_errf(err, errlen, SEKV_EINVAL, "too many arguments");
			o->args[o->n_args++] = a;
			continue;
		}
		if (!strcmp(a, "--")) {
			only_args = 1;
			continue;
		}
		if (!(r = opt_find(a)))
			return sekv_errf(err, errlen, SEKV_EINVAL, "unknown option %s (see 'sekv help')", a);
		if (r->kind == OPT_FLAG) {
			opt_store(o, r, NULL);
			continue;
		}
		if (i + 1 >= argc)
			return sekv_errf(err, errlen, SEKV_EINVAL, "option %s needs a value", a);
		if (opt_store(o, r, argv[++i]))
			return opt_bad(r, a, argv[i], err, errlen);
	}
	/* --router untrained names the untrained default, the landmark router */
	if (o->router == SEKV_ROUTER_TRAINED + 1)
		o->router = SEKV_ROUTER_LANDMARK;
	/* the list's form now; whether its layers are global, once the model is open */
	if (o->evidence_heads) {
		struct evidence_head h[EVIDENCE_MAX_HEADS];
		int n;
		if (evidence_heads_parse(o->evidence_heads, NULL, h, EVIDENCE_MAX_HEADS, &n, err, errlen))
			return SEKV_EINVAL;
	}
	return 0;
}

void app_opts_help(FILE *f, unsigned cmds)
{
	char names[64], def[128];

	for (size_t i = 0; i < N_OPT; i++) {
		const struct opt_row *r = &opt_table[i];
		if (!((r->help_cmds ? r->help_cmds : r->cmds) & cmds))
			continue;
		const char *arg = r->kind == OPT_CHOICE ? r->choices : r->arg;
		snprintf(names, sizeof names, "%s%s%s%s%s", r->name, r->alias ? ", " : "",
			 r->alias ? r->alias : "", arg ? " " : "", arg ? arg : "");
		def[0] = 0;
		if (r->def_text)
			snprintf(def, sizeof def, "%s", r->def_text);
		else if (r->kind == OPT_CHOICE)
			snprintf(def, sizeof def, "%.*s", (int)strcspn(r->choices, "|"), r->choices);
		else if (r->def != DEF_ZERO)
			snprintf(def, sizeof def, "%g", opt_default_num(r));
		fprintf(f, "  %-24s %s", names, r->help);
		if (r->env || def[0])
			fprintf(f, " (%s%s%s%s%s)", r->env ? "env " : "", r->env ? r->env : "",
				r->env && def[0] ? "; " : "", def[0] ? "default " : "", def);
		fputc('\n', f);
	}
}

int app_check_db(const struct app_opts *o, char *err, size_t errlen)
{
	if (o->db[0])
		return 0;
	return sekv_errf(err, errlen, SEKV_EINVAL,
			 "library: no path: give --db FILE, or set SEKV_DB, XDG_DATA_HOME (absolute) or HOME");
}
