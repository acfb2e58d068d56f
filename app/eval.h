/* eval.h - `sekv eval`: SeKV against full KV and rival KV methods, side by
 * side, on haystacks built from the machine's own text.
 *
 * Pieces: haystacks and needles (app/eval_hay.c), the tasks run over one
 * ingested haystack through sessions (app/eval_task.c), results.json and
 * results.md (app/eval_report.c), PNG plots (app/eval_plot.c, the only
 * file that includes cairo.h), the command, its grid and progress
 * (app/cmd_eval.c). Every haystack is prefilled once (app_ingest into the
 * private library DIR/eval.db); every method and budget then answers from
 * that stored prefill through session_open, as `sekv ask` does.
 *
 * A record (struct eval_rec, one object of results.json) uses the field
 * names of DESIGN.md section 6. Which record each task writes:
 *   niah    one per needle haystack and method/budget: the answer to the
 *           needle's question contains its value (correct = niah)
 *   multi   one per fact of a ten-fact haystack; each fact asked in a fresh
 *           conversation (a new session per question)
 *   second  two per two-needle haystack, question "first" and "second",
 *           asked in order in one conversation
 *   kl      one per needle haystack: KL(p_full || p_method) in nats and
 *           top-1 agreement over the full-KV answer's tokens, teacher-forced
 *   mass    one per needle haystack for methods that read the SeKV memory:
 *           mass_recall over the answer, overall and per global layer and
 *           query head (sekv_stats.mass_recall_lh), and attn_err
 * The RULER-style probes (app/eval_probe.c) write one record per question
 * of a probe haystack (struct eval_query): score = share of the expected
 * items the answer holds, correct = all of them:
 *   copy    one needle whose value is a digit string or a code, asked back
 *   mk      four needles of one kind of key, one asked (multi-key)
 *   mv      one key with four values, all asked (multi-value)
 *   mq      four needles, all four keys asked in one question (multi-query)
 *   vt      a chain of five variable assignments, every name asked
 *   cwe     a numbered word list: the ten most common words
 *   fwe     coded text of Zipf-distributed words: the three most frequent
 *   qa      the questions of a questions.jsonl file over their documents
 * Not measured: correct / full_correct / niah = -1, kl / top1 /
 * mass_recall / decode_tps = NAN; both are null in JSON.
 * One eval runs in one thread; nothing here is thread-safe. Errors are
 * negative SEKV_E* codes with "what: object: why" in err.
 */
#ifndef SEKV_APP_EVAL_H
#define SEKV_APP_EVAL_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "engine/conv/chat.h"

struct tok;
struct model;
struct app_opts;

#define EVAL_MAX_NEEDLES 16   /* needles in one haystack */
#define EVAL_MULTI_FACTS 10   /* facts of a multi haystack */
#define EVAL_ROUTER_OPT (-1)  /* a method row's router: the --router option */
#define EVAL_LH_LAYERS 8      /* mass_recall per layer and head: global layers kept */
#define EVAL_LH_HEADS 16      /* ... and query heads */
#define EVAL_MAX_QUERIES 16   /* questions of one probe haystack */
#define EVAL_MAX_ITEMS 12     /* expected strings of one question */
#define EVAL_ITEM_CAP 64      /* bytes of one expected string, NUL included */

/* ---- methods --------------------------------------------------------- */

/* One KV method as eval runs it: a session opened with these app_opts.
 * Adding a rival that session_open knows (--kv NAME) is one row in
 * eval_methods[] (eval_task.c). */
struct eval_method {
	const char *name;   /* results' "method": a --kv name, or "summary" */
	int kv;             /* enum app_kv */
	int router;         /* enum sekv_router, or EVAL_ROUTER_OPT */
	int budgeted;       /* 1: once per --budgets value; 0: exact, budget 1 */
	int mem;            /* 1: answers from the SeKV memory (built per budget) */
};
/* The row named name, or NULL. */
const struct eval_method *eval_method_find(const char *name);
/* Row i of the table (NULL past its end): for help and messages. */
const struct eval_method *eval_method_at(int i);

/* ---- tasks and records ----------------------------------------------- */

enum eval_task {
	EVAL_NIAH, EVAL_MULTI, EVAL_SECOND, EVAL_KL, EVAL_MASS,
	/* probes: one record per question (eval_probe.c) */
	EVAL_COPY, EVAL_MK, EVAL_MV, EVAL_MQ, EVAL_VT, EVAL_CWE, EVAL_FWE, EVAL_QA,
	EVAL_N_TASK
};
#define EVAL_FIRST_PROBE EVAL_COPY
/* "niah", "multi", "second", "kl", "mass", "copy", "mk", "mv", "mq", "vt",
 * "cwe", "fwe", "qa" (static storage), NULL past the end. */
const char *eval_task_name(int task);
/* The task called name, or -1. */
int eval_task_find(const char *name);

#define EVAL_TIER_N 8 /* = APP_TIER_N (app/app.h) */

struct eval_rec {
	char method[16];        /* eval_method.name */
	char router[12];        /* memory methods: sekv_router_name ("landmark",
	                           "summary", "oracle", "none"); "" else */
	double budget;          /* fraction of full_kv_bytes; 1 for full */
	int task;               /* enum eval_task */
	int length;             /* document tokens (as stored) */
	double depth;           /* asked needle depth, fraction of length */
	double depth_at;        /* where the needle's first token landed */
	int needle;             /* index in the cell (multi: the fact) */
	int question;           /* second: 1 first, 2 second; 0 other tasks */
	int correct;            /* answer contains the value (case-sensitive;
	                           probes: every expected item), -1 n/a */
	int full_correct;       /* full KV's answer to the same question, -1 n/a */
	double score;           /* probes: share of the expected items in the
	                           answer, 0..1; NAN n/a */
	int same_answer;        /* probes: 1 when the answer's text is full KV's
	                           answer to the same question, -1 n/a */
	int niah;               /* niah task: = correct; -1 elsewhere */
	double kl;              /* nats, mean over answer positions; NAN n/a */
	double top1;            /* share of positions whose argmax agrees; NAN n/a */
	double mass_recall;     /* NAN n/a */
	double attn_err;        /* mass task: the attention output's relative error
	                           against exact attention (conv_answer.attn_err);
	                           NAN n/a */
	double mass_oracle;     /* mass task: the mass the budget's bytes would
	                           hold as the best rows (conv_answer.mass_oracle),
	                           mass_recall's ceiling; NAN n/a */
	double alpha_q[3];      /* SeKV: alpha_S percentiles 10/50/90 over the
	                           answer's zooms (conv_answer.alpha_q); NAN n/a */
	double resident_bytes;  /* peak device-tier KV over the answer, bytes */
	double host_bytes;
	double disk_bytes;
	double swa_bytes;
	double full_kv_bytes;
	double tier[EVAL_TIER_N]; /* SeKV: the device tier at the answer's peak by
	                           kind of row, bytes, in app_tier_name order
	                           (sinks ... zoomed); NAN n/a */
	double prefill_tps;     /* document tokens / prefill seconds (as stored) */
	double decode_tps;      /* answer tokens/s; NAN n/a */
	int n_answer;           /* answer tokens (kl: positions compared) */
	int n_lh_layer;         /* mass_lh's global layers (0: no breakdown) */
	int n_lh_head;          /* mass_lh's query heads */
	int lh_layer[EVAL_LH_LAYERS]; /* model layer of each */
	double mass_lh[EVAL_LH_LAYERS * EVAL_LH_HEADS]; /* [layer][head] mass_recall
	                           over the answer (n_lh_head per layer) */
	char value[192];        /* the expected string (probes: the items, ", "
	                           between them, cut) */
	char answer[256];       /* the answer, cut */
	char note[256];         /* why the budget did not apply, an error, or "" */
};

/* A growable array of records; eval_recs_free(NULL) is a no-op. */
struct eval_recs {
	struct eval_rec *r;     /* [n] */
	int n;
	int cap;
};
/* Appends a copy of *r: 0 or SEKV_ENOMEM. */
int eval_recs_push(struct eval_recs *v, const struct eval_rec *r);
void eval_recs_free(struct eval_recs *v);
/* A record with every measure "not measured" (see above). */
void eval_rec_init(struct eval_rec *r);

/* ---- haystacks (eval_hay.c) ------------------------------------------ */

/* ---- corpus (eval_corpus.c) ------------------------------------------- */

/* What became of a file of the corpus (eval_corpus_file.state). */
enum eval_pin {
	EVAL_PIN_USED,      /* its text is in the corpus */
	EVAL_PIN_MISSING,   /* listed, not on this machine */
	EVAL_PIN_CHANGED,   /* listed, its bytes have another SHA-256 now */
	EVAL_PIN_SKIPPED,   /* listed, no longer a plain ASCII file within the size limits */
	EVAL_PIN_UNLISTED,  /* eval_corpus_pin_state: not in the list */
};
struct eval_corpus_file {
	char path[512];
	char sha256[65];    /* lowercase hex: the list's, or of the bytes read */
	int state;          /* enum eval_pin */
};
/* Background text: plain ASCII files joined by blank lines. */
struct eval_corpus {
	char *text;     /* malloc'ed, NUL-terminated */
	size_t len;     /* bytes */
	int n_files;    /* files taken */
	struct eval_corpus_file *file; /* [n_listed] every file taken or listed, in order */
	int n_listed;
};
/* Reads path whole into *buf (malloc'ed, NUL-terminated, *n bytes): 0;
 * 1 when it is not a regular file (links included) or under 64 bytes or
 * over 4 MiB; SEKV_EIO / SEKV_ENOMEM with err. */
int eval_file_read(const char *path, char **buf, size_t *n, char *err, size_t errlen);
/* Appends path when it is a regular file of printable ASCII (tab, newline,
 * CR and form feed allowed; CRs dropped, form feeds become newlines),
 * else leaves c as it was and returns 1 (skipped). 0 when added, or a
 * negative code (SEKV_EIO, SEKV_ENOMEM). */
int eval_corpus_add_file(struct eval_corpus *c, const char *path, char *err, size_t errlen);
/* The machine's text, in a fixed order until max_bytes: regular files of
 * /usr/share/common-licenses (by name, links skipped), then
 * /usr/share/doc/<package>/copyright, then README* files (not .gz) right
 * under /usr/share/doc/<package>/, packages by name. SEKV_ENOTFOUND when
 * that yields less than min_bytes. */
int eval_corpus_load_system(struct eval_corpus *c, size_t min_bytes, size_t max_bytes,
			    char *err, size_t errlen);
void eval_corpus_free(struct eval_corpus *c); /* NULL is a no-op */
/* The corpus pinned by the list at list_path: lines "SHA256  PATH" as
 * sha256sum writes them ('#' comments). Each listed file whose bytes
 * still have the listed digest is taken, in the list's order (as
 * eval_corpus_add_file takes a file); a missing, changed or no longer
 * plain-text file is left out, recorded in c->file with its state.
 * SEKV_EIO: the list cannot be read; SEKV_EFORMAT: a malformed line (its
 * number in err); SEKV_ENOTFOUND: under min_bytes taken. */
int eval_corpus_load_pinned(struct eval_corpus *c, const char *list_path, size_t min_bytes,
			    char *err, size_t errlen);
/* The state of path in c's files (enum eval_pin; EVAL_PIN_UNLISTED when
 * not there). */
int eval_corpus_pin_state(const struct eval_corpus *c, const char *path);
/* How many of c's files are in state. */
int eval_corpus_count(const struct eval_corpus *c, int state);
/* Writes the files c took as a list eval_corpus_load_pinned reads (a
 * "# comment" line first when comment is not NULL): the pin of a system
 * corpus, or the record of what a run used. 0 or SEKV_EIO. */
int eval_corpus_write_list(const struct eval_corpus *c, const char *path, const char *comment,
			   char *err, size_t errlen);

/* One planted fact. */
struct eval_needle {
	char key[96];        /* "secret passphrase for the archive vault" */
	char value[32];      /* "AMBER-FALCON-42": in no corpus file */
	char sentence[192];  /* "The secret passphrase for the archive vault is AMBER-FALCON-42." */
	char question[160];  /* "What is the secret passphrase for the archive vault?" */
	double depth;        /* asked: the sentence's first token at depth x
	                        (document tokens - sentence tokens), so 0 starts
	                        the text and 1 ends it */
	double depth_at;     /* eval_hay_build: where it landed, the same way */
	int tok_at;          /* eval_hay_build: index of that token in the document */
	int n_tok;           /* eval_hay_build: tokens of the sentence alone */
};

/* n (<= EVAL_MAX_NEEDLES) needles with pairwise different keys and values,
 * a function of seed only (splitmix64), every byte set (depth 0, tok_at
 * -1 until eval_hay_build). */
void eval_needles_make(uint64_t seed, int n, struct eval_needle *out);
/* Sets e's key and value and the sentence ("The KEY is VALUE.") and
 * question ("What is the KEY?") made of them (each cut to its field). */
void eval_needle_set(struct eval_needle *e, const char *key, const char *value);
/* Mixes numbers into a seed (splitmix64 steps): haystack seeds. */
uint64_t eval_seed_mix(uint64_t seed, uint64_t a, uint64_t b);
/* The next number of the splitmix64 stream *s (Steele et al., "Fast
 * splittable pseudorandom number generators", 2014): every random choice
 * of the haystacks. */
uint64_t eval_rand(uint64_t *s);

/* One question of a probe haystack and what its answer must hold. */
#define EVAL_MATCH_WORD 1   /* an item counts only with no letter or digit beside it */
#define EVAL_MATCH_NOCASE 2 /* ASCII letters compared without case */
struct eval_query {
	char question[256];
	char item[EVAL_MAX_ITEMS][EVAL_ITEM_CAP]; /* [n_item] expected strings */
	int n_item;
	int match;           /* EVAL_MATCH_* bits */
	int n_predict;       /* answer tokens it needs, at least */
	int needle;          /* index in eval_hay.needle of the needle asked
	                        (its depth goes in the record), -1: none */
};
/* Share (0..1) of q's items found in answer under q->match; 0 for a
 * NULL answer or no items. */
double eval_score_items(const char *answer, const struct eval_query *q);

struct eval_hay {
	char *text;          /* malloc'ed document text, NUL-terminated */
	size_t len;
	int n_tok;           /* document tokens as ingest stores them (BOS and
	                        the prompt format's opening included) */
	int n_needle;
	struct eval_needle needle[EVAL_MAX_NEEDLES]; /* by depth, ascending */
	int task;            /* probe haystacks: enum eval_task of the queries; -1 else */
	int n_query;
	struct eval_query query[EVAL_MAX_QUERIES]; /* probes: asked in order */
};
/* Document tokens of text [len] as app_ingest counts them (the turn of
 * ct, APP_DOC_SYSTEM), into v (reset first; the caller frees it): their
 * count, or a negative code. */
int eval_doc_tokens(const struct tok *tk, const struct chat_template *ct, const char *text,
		    size_t len, struct chat_tokvec *v, char *err, size_t errlen);
/* Builds a haystack of exactly n_tok document tokens, counted with tk and
 * the turn builder of ct as app_ingest tokenizes (chat_build_turn), from
 * corpus text starting at a paragraph chosen by bg_seed (wrapping around),
 * with the n needles (copied; depth in [0, 1]) each inserted at the
 * sentence or paragraph boundary nearest to its depth. Refused
 * (SEKV_EINVAL): n_tok too small for the needles and the turn's opening,
 * a corpus smaller than the text needed, a corpus tokenization that does
 * not decode back to itself; SEKV_EBUDGET when no cut reaches n_tok exactly.
 * h is owned by the caller (eval_hay_free). */
int eval_hay_build(struct eval_hay *h, const struct eval_corpus *c, const struct tok *tk,
		   const struct chat_template *ct, int n_tok, uint64_t bg_seed,
		   const struct eval_needle *needles, int n, char *err, size_t errlen);
void eval_hay_free(struct eval_hay *h); /* NULL is a no-op */

/* ---- probes (eval_probe.c) -------------------------------------------- */

/* The needles [*n_e] and questions [*n_q] of the needle probe task (copy,
 * mk, mv, mq, vt) for one haystack: a function of seed, variant and depth
 * only. copy: one needle at depth, its value a digit string
 * ("4071-9382-5516", even variant) or a code ("QX7-K2P9-M4", odd); mk:
 * four needles of one kind of key at depth and three evenly spaced from
 * it, the first asked; mv: one key's four values at depths (i + 0.5) / 4,
 * all asked; mq: four keys there, all asked in one question; vt: a chain
 * "VAR A = 40718." then "VAR B = VAR A." ... of five names at
 * (i + 0.5) / 5, every name asked. A value or name that corpus c (NULL:
 * no check) contains is drawn again, so none is in the background.
 * SEKV_EINVAL for another task. e [EVAL_MAX_NEEDLES], q [EVAL_MAX_QUERIES]. */
int eval_probe_make(int task, uint64_t seed, int variant, double depth, const struct eval_corpus *c,
		    struct eval_needle *e, int *n_e, struct eval_query *q, int *n_q);
/* The haystack of cwe or fwe, exactly n_tok tokens (eval_doc_tokens), a
 * function of seed and n_tok: cwe a numbered list of made-up words, ten
 * of them each filling a thirtieth of the items (3 times at least), the
 * others each at most a third as often and 3 times at most (RULER's
 * freq_cw, freq_ucw), asked for the ten;
 * fwe coded text of made-up words whose counts follow Zipf's law with
 * exponent 2 (count of rank r ~ 1 / r^2, the top four strictly apart),
 * asked for the three most frequent. A closing line of a chosen number of
 * words makes the count exact. SEKV_EINVAL: another task or n_tok too
 * small; SEKV_EBUDGET when no count is exact. h is the caller's. */
int eval_list_build(struct eval_hay *h, int task, const struct tok *tk, const struct chat_template *ct,
		    int n_tok, uint64_t seed, char *err, size_t errlen);
/* The haystack of probe task (copy .. fwe) at n_tok tokens (as
 * eval_hay_build counts them): the needles of eval_probe_make over corpus
 * background from bg_seed (when no cut is exact there, from up to three
 * other starts the seed gives; each query's needle index found again
 * after the needles are sorted by depth), or for cwe and fwe the word list of
 * eval_list_build. Errors as eval_hay_build; h is the caller's. */
int eval_probe_build(struct eval_hay *h, int task, const struct eval_corpus *c, const struct tok *tk,
		     const struct chat_template *ct, int n_tok, double depth, int variant, uint64_t seed,
		     uint64_t bg_seed, char *err, size_t errlen);

/* 1 when answer contains value (case-sensitive), else 0. */
int eval_answer_correct(const char *answer, const char *value);

/* ---- qa (eval_qa.c) --------------------------------------------------- */

/* The questions of one document of a questions file. */
struct eval_qa_doc {
	char path[512];
	int n_query;
	struct eval_query query[EVAL_MAX_QUERIES]; /* in the file's order; one item:
	                                              the answer, matched as a
	                                              plain case-sensitive substring */
};
struct eval_qa {
	struct eval_qa_doc *doc;   /* [n_doc] in first-seen order */
	int n_doc;
	int n_question;            /* questions kept */
	int n_dropped;             /* past EVAL_MAX_QUERIES of their document */
};
/* Reads a JSONL file of {"doc": PATH, "question": TEXT, "answer": TEXT}
 * (bench/qa/questions.jsonl) into qa, grouped by document. SEKV_EIO: not
 * readable; SEKV_EFORMAT: a line that is not such an object (its number
 * in err), or a question or answer longer than its field. qa is the
 * caller's (eval_qa_free, NULL a no-op). */
int eval_qa_load(struct eval_qa *qa, const char *path, char *err, size_t errlen);
void eval_qa_free(struct eval_qa *qa);
/* The haystack of document d: its file's text whole (n_tok as
 * eval_doc_tokens counts it), the first max_q (>= 1) of its questions.
 * SEKV_ENOTFOUND: the file is not a readable text file (err says why). */
int eval_qa_build(struct eval_hay *h, const struct eval_qa_doc *d, int max_q, const struct tok *tk,
		  const struct chat_template *ct, char *err, size_t errlen);

/* ---- KL (eval_task.c) ------------------------------------------------ */

/* log softmax of logits [n] into out [n] (double sums; out may alias no
 * input). Returns the argmax (lowest index on ties). */
int eval_log_softmax(const float *logits, int n, float *out);
/* KL(p || q) in nats of two log distributions [n] (eval_log_softmax). */
double eval_kl(const float *logp, const float *logq, int n);

/* ---- one haystack through every method (eval_task.c) ------------------ */

/* Kinds of haystack: which tasks it serves. */
enum eval_hay_kind {
	EVAL_HAY_NEEDLE,  /* one needle: niah, kl, mass */
	EVAL_HAY_SECOND,  /* two needles, asked in order: second */
	EVAL_HAY_MULTI,   /* EVAL_MULTI_FACTS needles: multi */
	EVAL_HAY_PROBE,   /* a probe's queries (eval_hay.task): one task */
};

/* What every haystack is run with (borrowed for eval_run_hay). */
struct eval_setup {
	const struct app_opts *o;        /* model, threads, -n, sampling, ingest
	                                    options; db is the private library
	                                    DIR/eval.db */
	struct model *m;                 /* loaded once (app_load) */
	const struct tok *tk;
	const struct eval_method *meth[16];
	int n_meth;
	double budget[8];                /* ascending order not required */
	int n_budget;
	unsigned tasks;                  /* 1 << enum eval_task: those asked for */
	int router;                      /* --router: enum sekv_router */
	char hay_dir[4096];              /* DIR/haystacks */
	/* progress (may be NULL): one line per method, as it finishes */
	void (*on_method)(void *ud, const char *line);
	/* live progress of the ingest (may be NULL) */
	void (*on_ingest)(void *ud, long long done, long long total, double rate);
	/* the haystack is stored: ingest wall seconds, prefill tokens/s (may be NULL) */
	void (*on_ready)(void *ud, double ingest_s, double prefill_tps);
	void *ud;
};

/* Timings of one haystack, for the ETA. */
struct eval_hay_cost {
	double prefill_s;    /* ingest, wall */
	double rebuild_s;    /* memories rebuilt for other budgets */
	double answer_s;     /* sessions: open, question, answer, forced passes */
	long long n_step;    /* tokens decoded by all sessions */
	int n_session;
};

/* Ingests h (written to setup->hay_dir/name.txt) into setup->o->db, runs
 * every method and budget of setup over it for the tasks (1 << enum
 * eval_task) that kind serves, and
 * appends their records (length, depth, needle index from the arguments)
 * to out; the document is deleted from the library afterwards. A method
 * that cannot open (a budget below what it can hold) gets records with
 * its error in note and nothing measured; other errors stop the run.
 * 0 or a negative code. */
int eval_run_hay(const struct eval_setup *setup, enum eval_hay_kind kind, unsigned tasks, const char *name,
		 const struct eval_hay *h, double depth, int index, struct eval_recs *out,
		 struct eval_hay_cost *cost, char *err, size_t errlen);

/* ---- report (eval_report.c) ------------------------------------------ */

/* DIR/results.json: an array of records (field names above; NAN and -1
 * "not measured" become null). 0 or SEKV_EIO / SEKV_ENOMEM. */
int eval_write_json(const struct eval_recs *v, const char *path, char *err, size_t errlen);
/* Reads results.json back into v (tests, re-plotting). */
int eval_read_json(struct eval_recs *v, const char *path, char *err, size_t errlen);
/* DIR/results.md: per task, a table of method x budget (accuracy,
 * agreement with full where full is right, KL, top-1, mass_recall,
 * resident ratio), niah accuracy by length x depth, the second question
 * against the first, and the plots (names from eval_plot_all) as images.
 * header (may be NULL) is put under the title. */
int eval_write_md(const struct eval_recs *v, const char *path, const char *header,
		  const char *const *png, int n_png, char *err, size_t errlen);

/* One Markdown table of every task but kl and mass by method and
 * budget: records, accuracy, score, agreement where full KV is right,
 * the same answer as full KV (results.md's overview; `sekv eval` prints
 * it at the end). Writes nothing when v has no such records. */
void eval_write_overview(FILE *f, const struct eval_recs *v);

/* A method at a budget: the rows of one table line. */
struct eval_group {
	char method[16];
	char router[12];
	double budget;
};
/* Distinct groups of the records of task (-1: all), in first-seen order,
 * into g [cap]; returns how many (<= cap). */
int eval_groups(const struct eval_recs *v, int task, struct eval_group *g, int cap);
/* 1 when r belongs to g. */
int eval_in_group(const struct eval_rec *r, const struct eval_group *g);
/* The distinct lengths (use_depth 0) or depths (1) of the records of task,
 * of group g only (NULL: all), ascending, into out [EVAL_MAX_AXIS]; their
 * count (values past EVAL_MAX_AXIS are left out). */
#define EVAL_MAX_AXIS 32
int eval_axis(const struct eval_recs *v, int task, const struct eval_group *g, int use_depth,
	      double *out);
/* "sekv@0.1", "full" into buf; a router other than the default one and
 * "none" is named: "sekv(oracle)@0.1". */
void eval_group_label(const struct eval_group *g, char *buf, size_t cap);

/* ---- plots (eval_plot.c) ---------------------------------------------- */

/* 1 when g's router is named in labels and file names (eval_group_label). */
int eval_router_named(const struct eval_group *g);
/* Writes into dir, for each group with niah records, heat_<label>.png
 * (accuracy by length x depth) and, per method, mem_<method>.png
 * (resident bytes per budget and full_kv_bytes against length) and, when
 * v has per-question tasks with lengths, panels_tasks.png (one panel per
 * method and budget, task x length, mean score or accuracy on one shared
 * scale with a colour bar). The file
 * names (malloc'ed, the caller frees each and the array) go to *names,
 * their count to *n. 0 or a negative code. */
int eval_plot_all(const struct eval_recs *v, const char *dir, char ***names, int *n,
		  char *err, size_t errlen);
/* The heat maps' colour of t in [0, 1] (clamped; NAN is 0) as sRGB
 * components in [0, 1] into rgb [3]: CIELAB lightness rising linearly
 * from 15 to 93 while the hue goes from dark blue through grey to yellow
 * (a colour-blind-safe ramp like cividis, computed, not a table). */
void eval_ramp(double t, double rgb[3]);
/* Reads a PNG back (cairo): its width, height, and the number of distinct
 * pixel values among at most 4096 sampled (1: blank). 0 or SEKV_EFORMAT. */
int eval_png_info(const char *path, int *w, int *h, int *n_colors, char *err, size_t errlen);

/* A line plot of n_series curves y[k] [n] over x [n] (non-finite values
 * skipped), linear axes from 0, a legend of name [n_series], written as a
 * PNG to path (sekv train's loss curves). 0 or SEKV_EIO. */
int eval_plot_curves(const char *path, const char *title, const char *xlabel, int n_series,
		     const char *const *name, const double *x, const double *const *y, int n,
		     char *err, size_t errlen);

#endif
