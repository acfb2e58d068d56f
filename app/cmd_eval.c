/* cmd_eval.c - `sekv eval --out DIR`: the grid (methods x budgets x tasks x
 * lengths x depths x needles), its time estimate and progress, and the
 * files it writes (eval.h says what each task measures).
 *
 * Haystacks of a run: for niah, kl and mass one per (length, depth,
 * needle) holding one needle (kl on the first quarter of the needle indices);
 * for second one per (length, depth) and every eighth needle index,
 * holding two needles (the second at depth d + 0.4 or d - 0.4); for multi
 * one per length and every eighth needle index, holding
 * EVAL_MULTI_FACTS facts at depths (i + 0.5) / 10. The
 * background of needle index i starts at the same corpus paragraph for
 * every length and depth (seeded by --seed and i); each needle's key and
 * value are seeded by its cell. Results are rewritten after every
 * haystack, so an interrupted run keeps what it measured.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/app.h"
#include "app/eval.h"
#include "engine/base/clock.h"
#include "engine/base/err.h"
#include "engine/model/model.h"
#include "engine/sekv/sekv.h"
#include "engine/tok/tokenizer.h"

#define EVAL_N_PREDICT 32     /* answer tokens unless -n says: a quoted needle sentence is ~20 */
#define EVAL_CTX_ROOM 512     /* tokens a haystack leaves in the context for questions */
#define EVAL_MIN_LENGTH 256
#define EVAL_MULTI_MIN 768    /* ten facts and some text between them */
#define MAX_LIST 32

/* The cost model of the estimate: ingest seconds per document token and
 * seconds per decoded token (session opening included), as multiples of
 * what a short probe of this machine measures at the start (a prefill
 * with surprisal, decode steps); the factors come from runs on the
 * project's 2-core VM (README, "sekv eval"). The live ETA then scales the
 * estimate by the speed measured so far. */
#define PROBE_PREFILL 256     /* tokens */
#define PROBE_DECODE 64
#define K_INGEST 1.1          /* ingest s/token over the probe's prefill s/token */
#define K_DECODE 0.75         /* session s/decoded token over the probe's decode s/token */
#define K_DECODE_CTX 0.02     /* ... plus this share per 1,000 context tokens */
#define K_REBUILD 0.03        /* a memory rebuild, in ingests of the same document */
#define STEPS_FIRST 60        /* worked example, question, answer */
#define STEPS_NEXT 35         /* a later question and its answer */
#define STEPS_PROBE 20        /* a probe's longer question or list answer, beyond STEPS_FIRST */

struct job {
	enum eval_hay_kind kind;
	int task;             /* EVAL_HAY_PROBE: the probe's enum eval_task */
	unsigned tasks;       /* 1 << enum eval_task run on it */
	int length;
	double depth;
	int i_depth;
	int index;
	double predicted_s;
};

struct grid {
	struct app_opts o;
	struct eval_setup su;
	int length[MAX_LIST], n_length;
	double depth[MAX_LIST];
	int n_depth;
	unsigned tasks;
	struct job *job;
	int n_job;
	double prefill_s_tok; /* the probe: prefill seconds per token */
	double decode_s_tok;  /* the probe: decode seconds per token */
	char dir[APP_PATH_MAX];
	char corpus_list[APP_PATH_MAX]; /* --corpus, resolved (app_asset_path) */
	char qa_path[APP_PATH_MAX];     /* --qa, resolved */
	struct eval_qa qa;              /* the qa task's questions (its documents: jobs) */
	int *qa_tok;                    /* [qa.n_doc] document tokens, 0: left out */
	char pin_note[1024];            /* the corpus and qa documents used, for results.md */
	int tty;
	/* progress */
	int at;               /* job running */
	double t_start;       /* clk_now at the start of the run */
	double t_job;         /* clk_now at the job's start */
	double done_pred;     /* predicted seconds of the jobs done */
	double total_pred;
	struct eval_hay_cost spent; /* summed over the jobs done */
	long long toks_done;  /* document tokens ingested */
};

static int usage(const char *msg, const char *item)
{
	if (msg)
		app_errorf("sekv eval: %s%s%s\n", msg, item ? ": " : "", item ? item : "");
	app_errorf("usage: sekv eval --out DIR [--methods LIST] [--budgets LIST] [--tasks LIST] "
		   "[--lengths LIST] [--depths LIST] [--needles N] [--router landmark|summary|oracle]: "
		   "see 'sekv help eval'\n");
	return 2;
}

/* Splits a comma list into items [cap] of at most 63 bytes. -1: an empty
 * or too long item, or too many. */
static int split(const char *s, char item[][64], int cap)
{
	int n = 0;
	while (1) {
		size_t len = strcspn(s, ",");
		if (!len || len >= 64 || n == cap)
			return -1;
		memcpy(item[n], s, len);
		item[n++][len] = 0;
		if (!s[len])
			return n;
		s += len + 1;
	}
}

static int parse_num(const char *s, double lo, double hi, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= lo && v <= hi))
		return -1;
	*out = v;
	return 0;
}

/* Fills g from the option lists; returns 0 or an exit status (usage). */
static int parse_lists(struct grid *g)
{
	const struct app_opts *o = &g->o;
	char item[MAX_LIST][64];
	int n;
	double v;

	/* full always runs first: the reference of full_correct and kl */
	g->su.meth[g->su.n_meth++] = eval_method_find("full");
	if ((n = split(o->eval_methods ? o->eval_methods : APP_EVAL_METHODS, item, MAX_LIST)) < 0)
		return usage("--methods: expected a comma list of methods", o->eval_methods);
	for (int i = 0; i < n; i++) {
		const struct eval_method *m = eval_method_find(item[i]);
		int dup = 0;
		if (!m) {
			char known[256] = "";
			for (int k = 0; eval_method_at(k); k++)
				snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", k ? ", " : "",
					 eval_method_at(k)->name);
			app_errorf("sekv eval: --methods: unknown method '%s' (known: %s)\n", item[i], known);
			return usage(NULL, NULL);
		}
		for (int k = 0; k < g->su.n_meth; k++)
			dup |= g->su.meth[k] == m;
		if (!dup && g->su.n_meth < (int)(sizeof g->su.meth / sizeof *g->su.meth))
			g->su.meth[g->su.n_meth++] = m;
	}
	if ((n = split(o->eval_budgets ? o->eval_budgets : APP_EVAL_BUDGETS, item, 8)) < 0)
		return usage("--budgets: expected a comma list of at most 8 fractions", o->eval_budgets);
	for (int i = 0; i < n; i++) {
		if (parse_num(item[i], 1e-6, 1, &v))
			return usage("--budgets: expected fractions of the full KV cache in (0, 1]", item[i]);
		g->su.budget[g->su.n_budget++] = v;
	}
	if ((n = split(o->eval_tasks ? o->eval_tasks : APP_EVAL_TASKS, item, MAX_LIST)) < 0)
		return usage("--tasks: expected a comma list of tasks", o->eval_tasks);
	for (int i = 0; i < n; i++) {
		int t = eval_task_find(item[i]);
		if (t < 0)
			return usage("--tasks: unknown task (known: niah, multi, second, kl, mass, copy, mk, mv, "
				     "mq, vt, cwe, fwe, qa)", item[i]);
		g->tasks |= 1u << t;
	}
	if ((n = split(o->eval_lengths ? o->eval_lengths : APP_EVAL_LENGTHS, item, MAX_LIST)) < 0)
		return usage("--lengths: expected a comma list of token counts", o->eval_lengths);
	for (int i = 0; i < n; i++) {
		if (parse_num(item[i], EVAL_MIN_LENGTH, 1 << 24, &v) || v != floor(v))
			return usage("--lengths: expected whole token counts of at least 256", item[i]);
		if ((g->tasks & (1u << EVAL_MULTI)) && v < EVAL_MULTI_MIN)
			return usage("--lengths: multi plants ten facts: lengths of at least 768 tokens", item[i]);
		g->length[g->n_length++] = (int)v;
	}
	if ((n = split(o->eval_depths ? o->eval_depths : APP_EVAL_DEPTHS, item, MAX_LIST)) < 0)
		return usage("--depths: expected a comma list of fractions", o->eval_depths);
	for (int i = 0; i < n; i++) {
		if (parse_num(item[i], 0, 1, &v))
			return usage("--depths: expected fractions in [0, 1]", item[i]);
		g->depth[g->n_depth++] = v;
	}
	return 0;
}

/* ---- the grid and its estimate --------------------------------------- */

/* Predicted seconds of one haystack: ingest, rebuilds, decoded tokens. */
static double predict(const struct grid *g, enum eval_hay_kind kind, unsigned tasks, int length)
{
	const struct eval_setup *su = &g->su;
	int any_mem = 0, n_pass = 0, mem = 0;
	double steps = 0, s;

	for (int i = 0; i < su->n_meth; i++) {
		int k = su->meth[i]->budgeted ? su->n_budget : 1;
		any_mem |= su->meth[i]->mem;
		n_pass += k;
		mem += su->meth[i]->mem ? k : 0;
	}
	int free_ans = kind != EVAL_HAY_NEEDLE || (tasks & (1u << EVAL_NIAH)) ? n_pass
		: 1 + ((tasks & (1u << EVAL_MASS)) ? mem : 0);
	int forced = kind == EVAL_HAY_NEEDLE && (tasks & (1u << EVAL_KL)) ? n_pass : 0;
	if (kind == EVAL_HAY_NEEDLE)
		steps = (free_ans + forced) * (double)STEPS_FIRST;
	else if (kind == EVAL_HAY_SECOND)
		steps = n_pass * (double)(STEPS_FIRST + STEPS_NEXT);
	else if (kind == EVAL_HAY_PROBE)
		steps = n_pass * (double)(STEPS_FIRST + STEPS_PROBE);
	else
		steps = n_pass * (double)EVAL_MULTI_FACTS * STEPS_FIRST;
	double ingest = length * g->prefill_s_tok * K_INGEST;
	s = ingest + steps * g->decode_s_tok * (K_DECODE + K_DECODE_CTX * length / 1000.0);
	if (any_mem && su->n_budget > 1)
		s += (su->n_budget - 1) * ingest * K_REBUILD;
	return s;
}

/* A short measurement of this machine now: PROBE_PREFILL tokens of the
 * corpus prefilled with surprisal, then PROBE_DECODE decode steps. */
static int probe_speed(struct grid *g, const struct eval_corpus *c, char *err, size_t errlen)
{
	struct model_state *ms = NULL;
	int32_t ids[PROBE_PREFILL + PROBE_DECODE];
	float sur[PROBE_PREFILL];
	size_t len = c->len < 4096 ? c->len : 4096;
	int n = tok_encode(g->su.tk, c->text, len, 1, ids, PROBE_PREFILL + PROBE_DECODE, err, errlen), rc;

	if (n < PROBE_PREFILL + PROBE_DECODE)
		return n < 0 ? n : sekv_errf(err, errlen, SEKV_EINVAL, "eval: corpus too small to probe");
	if ((rc = model_state_new(&ms, g->su.m, PROBE_PREFILL + PROBE_DECODE, PROBE_PREFILL, 1, err, errlen)))
		return rc;
	double t0 = clk_now();
	rc = model_prefill(g->su.m, ms, ids, PROBE_PREFILL, sur, err, errlen);
	double t1 = clk_now();
	/* as a question and its answer: logits for one step in five */
	for (int i = 0; !rc && i < PROBE_DECODE; i++)
		rc = model_decode_ex(g->su.m, ms, ids[PROBE_PREFILL + i], NULL, NULL, i % 5 == 4, err, errlen);
	double t2 = clk_now();
	model_state_free(ms);
	g->prefill_s_tok = (t1 - t0) / PROBE_PREFILL;
	g->decode_s_tok = (t2 - t1) / PROBE_DECODE;
	return rc;
}

/* The tasks job (kind, needle index) runs: kl on the first --kl-needles
 * needle indices only, by default a quarter of them (its forced pass
 * costs a method a second decoding of the question; a quarter of the
 * default grid's haystacks still compares ~180 answer positions per
 * method and budget). */
static unsigned job_tasks(const struct grid *g, enum eval_hay_kind kind, int index)
{
	unsigned t = g->tasks;
	int n_kl = g->o.eval_kl_needles > 0 ? g->o.eval_kl_needles : (g->o.eval_needles + 3) / 4;
	if (kind == EVAL_HAY_NEEDLE && index >= n_kl)
		t &= ~(1u << EVAL_KL);
	return t;
}

/* A job; task: a probe's enum eval_task (kind EVAL_HAY_PROBE), else -1. */
static int add_job(struct grid *g, enum eval_hay_kind kind, int task, int length, double depth, int i_depth,
		   int index)
{
	struct job *p = realloc(g->job, ((size_t)g->n_job + 1) * sizeof *p);
	if (!p)
		return SEKV_ENOMEM;
	g->job = p;
	unsigned t = task >= 0 ? 1u << task : job_tasks(g, kind, index);
	p[g->n_job++] = (struct job){ kind, task, t, length, depth, i_depth, index, predict(g, kind, t, length) };
	g->total_pred += p[g->n_job - 1].predicted_s;
	return 0;
}

static int make_grid_jobs(struct grid *g)
{
	unsigned t = g->tasks;
	int n_needle = g->o.eval_needles, rc = 0;
	int n_second = (n_needle + 7) / 8, n_multi = (n_needle + 7) / 8;

	for (int l = 0; !rc && l < g->n_length; l++) {
		if (t & ((1u << EVAL_NIAH) | (1u << EVAL_KL) | (1u << EVAL_MASS)))
			for (int d = 0; !rc && d < g->n_depth; d++)
				for (int i = 0; !rc && i < n_needle; i++)
					rc = add_job(g, EVAL_HAY_NEEDLE, -1, g->length[l], g->depth[d], d, i);
		if (t & (1u << EVAL_SECOND))
			for (int d = 0; !rc && d < g->n_depth; d++)
				for (int i = 0; !rc && i < n_second; i++)
					rc = add_job(g, EVAL_HAY_SECOND, -1, g->length[l], g->depth[d], d, i);
		if (t & (1u << EVAL_MULTI))
			for (int i = 0; !rc && i < n_multi; i++)
				rc = add_job(g, EVAL_HAY_MULTI, -1, g->length[l], 0.5, 0, i);
		/* copy and mk ask a needle at the cell's depth; the others spread
		 * theirs over the text (or are a word list) */
		for (int p = EVAL_FIRST_PROBE; p < EVAL_N_TASK; p++) {
			int by_depth = p == EVAL_COPY || p == EVAL_MK;
			if (!(t & (1u << p)) || p == EVAL_QA)
				continue;
			for (int d = 0; !rc && d < (by_depth ? g->n_depth : 1); d++)
				for (int i = 0; !rc && i < n_needle; i++)
					rc = add_job(g, EVAL_HAY_PROBE, p, g->length[l], by_depth ? g->depth[d] : 0.5,
						     d, i);
		}
	}
	return rc;
}

static int make_jobs(struct grid *g)
{
	int rc = make_grid_jobs(g);
	for (int d = 0; !rc && d < g->qa.n_doc; d++)
		if (g->qa_tok[d] > 0)
			rc = add_job(g, EVAL_HAY_PROBE, EVAL_QA, g->qa_tok[d], 0, 0, d);
	return rc;
}

static void fmt_dur(double s, char *buf, size_t cap)
{
	if (s < 90)
		snprintf(buf, cap, "%.0fs", s);
	else if (s < 5400)
		snprintf(buf, cap, "%.0fm", s / 60);
	else
		snprintf(buf, cap, "%.1fh", s / 3600);
}

/* ---- progress --------------------------------------------------------- */

/* "needle", "second", "multi", or a probe's task name. */
static const char *job_name(const struct job *j)
{
	return j->kind == EVAL_HAY_NEEDLE ? "needle" : j->kind == EVAL_HAY_SECOND ? "second"
		: j->kind == EVAL_HAY_MULTI ? "multi" : eval_task_name(j->task);
}

/* Seconds left: the prediction of the jobs not done, scaled by measured /
 * predicted so far (1 before any job is done), less the current job's
 * time spent. */
static double eta(const struct grid *g, double now)
{
	double left = 0, scale = g->done_pred > 0 ? (now - g->t_start) / g->done_pred : 1;
	for (int i = g->at + 1; i < g->n_job; i++)
		left += g->job[i].predicted_s;
	double cur = g->job[g->at].predicted_s * scale - (now - g->t_job);
	return left * scale + (cur > 0 ? cur : 0);
}

static void on_ready(void *ud, double ingest_s, double tps)
{
	struct grid *g = ud;
	const struct job *j = &g->job[g->at];
	char e[32];

	fmt_dur(eta(g, clk_now()), e, sizeof e);
	fprintf(stderr, "%s[%d/%d] %s haystack: length %d, depth %g, #%d: ingest %.1fs (prefill %.0f tokens/s), "
		"ETA %s\n", g->tty ? "\r\033[K" : "", g->at + 1, g->n_job, job_name(j), j->length, j->depth,
		j->index, ingest_s, tps, e);
}

static void on_method(void *ud, const char *line)
{
	(void)ud;
	fprintf(stderr, "    ");
	app_print_inert(stderr, line, strlen(line));
	fputc('\n', stderr);
}

static void on_ingest(void *ud, long long done, long long total, double rate)
{
	struct grid *g = ud;
	const struct job *j = &g->job[g->at];
	if (!g->tty)
		return;
	fprintf(stderr, "\r\033[K[%d/%d] %s haystack: length %d, depth %g, #%d: prefill %lld/%lld tokens, "
		"%.0f tokens/s", g->at + 1, g->n_job, job_name(j), j->length, j->depth, j->index, done,
		total, rate);
}

/* ---- the run ---------------------------------------------------------- */

/* DIR and DIR/haystacks exist and take files; an earlier eval.db goes. */
static int prepare_dir(struct grid *g, char *err, size_t errlen)
{
	char path[APP_PATH_MAX + 64];

	for (char *p = g->dir + 1; ; p++) {
		char c = *p;
		if (c != '/' && c)
			continue;
		*p = 0;
		if (mkdir(g->dir, 0777) && errno != EEXIST) {
			int e = errno;
			*p = c;
			return sekv_errf(err, errlen, SEKV_EIO, "%s: cannot create: %s", g->dir, strerror(e));
		}
		*p = c;
		if (!c)
			break;
	}
	snprintf(path, sizeof path, "%s/.sekv-eval-write-test", g->dir);
	FILE *f = fopen(path, "wb");
	if (!f || fclose(f))
		return sekv_errf(err, errlen, SEKV_EIO, "%s: cannot write there: %s", g->dir, strerror(errno));
	unlink(path);
	snprintf(g->su.hay_dir, sizeof g->su.hay_dir, "%.3900s/haystacks", g->dir);
	if (mkdir(g->su.hay_dir, 0777) && errno != EEXIST)
		return sekv_errf(err, errlen, SEKV_EIO, "%s: cannot create: %s", g->su.hay_dir, strerror(errno));
	snprintf(g->o.db, sizeof g->o.db, "%.3900s/eval.db", g->dir);
	for (int i = 0; i < 3; i++) {
		snprintf(path, sizeof path, "%s%s", g->o.db, (const char *[]){ "", "-wal", "-shm" }[i]);
		if (unlink(path) && errno != ENOENT)
			return sekv_errf(err, errlen, SEKV_EIO, "%s: cannot remove: %s", path, strerror(errno));
	}
	return 0;
}

/* The haystack of job j: needles seeded by the cell, background by index. */
static int build_hay(const struct grid *g, const struct job *j, const struct eval_corpus *c,
		     const struct chat_template *ct, struct eval_hay *h, char *err, size_t errlen)
{
	struct eval_needle e[EVAL_MAX_NEEDLES];
	uint64_t seed = g->o.seed;
	int n = j->kind == EVAL_HAY_NEEDLE ? 1 : j->kind == EVAL_HAY_SECOND ? 2 : EVAL_MULTI_FACTS;

	if (j->kind == EVAL_HAY_PROBE && j->task == EVAL_QA)
		return eval_qa_build(h, &g->qa.doc[j->index], g->o.eval_needles, g->su.tk, ct, err, errlen);
	if (j->kind == EVAL_HAY_PROBE)
		return eval_probe_build(h, j->task, c, g->su.tk, ct, j->length, j->depth, j->index,
					eval_seed_mix(seed, (uint64_t)j->task << 40 | (uint64_t)j->length,
						      (uint64_t)j->i_depth << 32 | (uint64_t)j->index),
					eval_seed_mix(seed, 0xba5e, (uint64_t)j->index), err, errlen);
	eval_needles_make(eval_seed_mix(seed, (uint64_t)j->kind << 32 | (uint64_t)j->length,
					(uint64_t)j->i_depth << 32 | (uint64_t)j->index), n, e);
	if (j->kind == EVAL_HAY_NEEDLE) {
		e[0].depth = j->depth;
	} else if (j->kind == EVAL_HAY_SECOND) {
		e[0].depth = j->depth;
		e[1].depth = j->depth < 0.5 ? j->depth + 0.4 : j->depth - 0.4;
	} else {
		for (int i = 0; i < n; i++)
			e[i].depth = (i + 0.5) / n;
	}
	return eval_hay_build(h, c, g->su.tk, ct, j->length, eval_seed_mix(seed, 0xba5e, (uint64_t)j->index), e, n,
			      err, errlen);
}

static void write_outputs(struct grid *g, const struct eval_recs *v, int final, double wall)
{
	char path[APP_PATH_MAX + 64], err[512], header[3072];
	char **png = NULL;
	int n_png = 0;

	snprintf(path, sizeof path, "%s/results.json", g->dir);
	if (eval_write_json(v, path, err, sizeof err))
		app_errorf("sekv eval: %s\n", err);
	if (!final)
		return;
	if (eval_plot_all(v, g->dir, &png, &n_png, err, sizeof err))
		app_errorf("sekv eval: plots: %s\n", err);
	char w[32];
	fmt_dur(wall, w, sizeof w);
	snprintf(header, sizeof header,
		 "Model `%.200s`, %d threads, greedy answers of at most %d tokens, seed %llu. Grid: methods %s, "
		 "budgets %s, tasks %s, lengths %s, depths %s, %d needles per cell; %d haystacks in %s. "
		 "SeKV: router %s, --zoom-blocks %d, --zoom-scan %d, --rmax %d, --rank-energy %g, --rank-energy-v %g, "
		 "--factor-keys %s, --anchors %s, --static-share %.2f, --recent %d, --zoom-shares %s, "
		 "--question-turn %s, --device-rows %s.",
		 g->o.model, g->o.n_threads, g->o.n_predict, (unsigned long long)g->o.seed,
		 g->o.eval_methods ? g->o.eval_methods : APP_EVAL_METHODS,
		 g->o.eval_budgets ? g->o.eval_budgets : APP_EVAL_BUDGETS,
		 g->o.eval_tasks ? g->o.eval_tasks : APP_EVAL_TASKS,
		 g->o.eval_lengths ? g->o.eval_lengths : APP_EVAL_LENGTHS,
		 g->o.eval_depths ? g->o.eval_depths : APP_EVAL_DEPTHS, g->o.eval_needles, g->n_job, w,
		 sekv_router_name(g->o.router), g->o.zoom_blocks, g->o.zoom_scan, g->o.r_max, g->o.rank_energy,
		 g->o.rank_energy_v, g->o.key_pre_rope ? "pre-rope" : "post-rope",
		 g->o.anchors == 2 ? "both" : g->o.anchors ? "attention" : "surprisal", g->o.static_share,
		 g->o.n_recent, g->o.zoom_shares ? g->o.zoom_shares : "equal",
		 g->o.question_zoom ? "zoom" : "exact", app_dev_rows_name(&g->o));
	snprintf(header + strlen(header), sizeof header - strlen(header), "\n\n%s", g->pin_note);
	snprintf(path, sizeof path, "%s/results.md", g->dir);
	if (eval_write_md(v, path, header, (const char *const *)png, n_png, err, sizeof err))
		app_errorf("sekv eval: %s\n", err);
	for (int i = 0; i < n_png; i++)
		free(png[i]);
	free(png);
}

/* Prints the estimate, runs every job, writes the results. */
static int run(struct grid *g, const struct eval_corpus *c, const struct chat_template *ct)
{
	struct eval_recs v = { 0 };
	char err[1024], name[96], est[32];
	long long toks = 0;
	int rc = 0;

	for (int i = 0; i < g->n_job; i++)
		toks += g->job[i].length;
	fmt_dur(g->total_pred, est, sizeof est);
	if (!g->o.quiet)
		fprintf(stderr, "eval: %d haystacks (%lld document tokens, each prefilled once), %d methods; "
			"estimated %s on this machine now (prefill %.0f tokens/s, decode %.0f tokens/s; the ETA "
			"follows the measured speed)\n", g->n_job, toks, g->su.n_meth, est,
			1 / g->prefill_s_tok, 1 / g->decode_s_tok);
	g->t_start = clk_now();
	for (g->at = 0; !rc && g->at < g->n_job; g->at++) {
		const struct job *j = &g->job[g->at];
		struct eval_hay h;
		struct eval_hay_cost cost;
		g->t_job = clk_now();
		snprintf(name, sizeof name, "%s-%d-%g-%d", job_name(j), j->length, j->depth, j->index);
		if ((rc = build_hay(g, j, c, ct, &h, err, sizeof err)))
			break;
		rc = eval_run_hay(&g->su, j->kind, j->tasks, name, &h, j->depth, j->index, &v, &cost, err,
				  sizeof err);
		eval_hay_free(&h);
		g->spent.prefill_s += cost.prefill_s;
		g->spent.rebuild_s += cost.rebuild_s;
		g->spent.answer_s += cost.answer_s;
		g->spent.n_step += cost.n_step;
		g->spent.n_session += cost.n_session;
		g->toks_done += j->length;
		g->done_pred += j->predicted_s;
		write_outputs(g, &v, 0, 0);
	}
	double wall = clk_now() - g->t_start;
	if (rc)
		app_errorf("%ssekv eval: haystack %d of %d: %s\n", g->tty ? "\n" : "", g->at + 1, g->n_job, err);
	write_outputs(g, &v, 1, wall);
	if (!g->o.quiet) {
		char w[32];
		int n_niah = 0, ok = 0, ok_full = 0, n_full = 0;
		for (int i = 0; i < v.n; i++)
			if (v.r[i].task == EVAL_NIAH && !strcmp(v.r[i].method, "full") && v.r[i].correct >= 0) {
				n_full++;
				ok_full += v.r[i].correct;
			} else if (v.r[i].task == EVAL_NIAH && v.r[i].correct >= 0) {
				n_niah++;
				ok += v.r[i].correct;
			}
		const struct eval_hay_cost *c = &g->spent;
		fmt_dur(wall, w, sizeof w);
		fprintf(stderr, "eval: %s %d haystacks in %s (estimated %s); %d records; niah: full KV %d/%d "
			"right, the other methods %d/%d; %s/results.md, results.json and plots\n",
			rc ? "stopped after" : "done:", g->at, w, est, v.n, ok_full, n_full, ok, n_niah, g->dir);
		fputc('\n', stderr);
		eval_write_overview(stderr, &v);
		fprintf(stderr, "eval: time: ingest %.0fs (%.0f tokens/s), memory rebuilds %.0fs, %d sessions "
			"%.0fs (%lld tokens decoded, %.1f tokens/s)\n", c->prefill_s,
			c->prefill_s > 0 ? g->toks_done / c->prefill_s : 0, c->rebuild_s, c->n_session, c->answer_s,
			c->n_step, c->answer_s > 0 ? c->n_step / c->answer_s : 0);
	}
	eval_recs_free(&v);
	return rc ? 1 : 0;
}

/* Options and lists: 0, or the exit status of a usage error. */
static int parse_args(struct grid *g, int argc, char **argv)
{
	char err[1024];

	if (app_opts_parse(&g->o, argc, argv, err, sizeof err)) {
		app_errorf("sekv eval: %s\n", err);
		return usage(NULL, NULL);
	}
	if (g->o.n_args)
		return usage("unexpected argument", g->o.args[0]);
	if ((!g->o.eval_out || !*g->o.eval_out) && !g->o.eval_corpus_pin)
		return usage("--out DIR is required", NULL);
	if (!g->o.n_predict_set)
		g->o.n_predict = EVAL_N_PREDICT;
	if (!g->o.exact_below_set)
		g->o.exact_below = 0;
	snprintf(g->dir, sizeof g->dir, "%s", g->o.eval_out);
	return parse_lists(g);
}

/* Every length fits the model's context with room for the questions:
 * 0, or the exit status of a usage error. *longest gets the longest. */
static int check_lengths(const struct grid *g, const struct model *m, int *longest)
{
	int n_ctx = model_hparams(m)->n_ctx_train;

	*longest = 0;
	for (int i = 0; i < g->n_length; i++) {
		if (n_ctx > 0 && g->length[i] + EVAL_CTX_ROOM > n_ctx) {
			app_errorf("sekv eval: --lengths: %d tokens is above what the model's context of %d tokens "
				   "holds with %d left for the questions and answers (at most %d)\n", g->length[i],
				   n_ctx, EVAL_CTX_ROOM, n_ctx - EVAL_CTX_ROOM);
			return usage(NULL, NULL);
		}
		*longest = g->length[i] > *longest ? g->length[i] : *longest;
	}
	return 0;
}

/* ---- corpus and qa documents ------------------------------------------ */

#define PIN_MAX_BYTES ((size_t)4 << 20) /* --corpus-pin: text taken from the system, at most */
#define NOTE_NAMES 3                    /* left-out files named in a note */

/* --corpus-pin: this machine's text (eval_corpus_load_system) and the
 * qa documents not in it, written to the --corpus list. An exit status. */
static int pin_corpus(struct grid *g)
{
	const char *list = g->o.eval_corpus ? g->o.eval_corpus : APP_EVAL_CORPUS;
	struct eval_corpus c;
	struct eval_qa qa;
	char err[1024];
	int n_qa = 0;

	if (eval_corpus_load_system(&c, 0, PIN_MAX_BYTES, err, sizeof err)) {
		app_errorf("sekv eval: %s\n", err);
		return 1;
	}
	if (eval_qa_load(&qa, g->qa_path, err, sizeof err))
		app_errorf("sekv eval: --corpus-pin: no qa documents: %s\n", err);
	for (int d = 0; d < qa.n_doc; d++)
		if (eval_corpus_pin_state(&c, qa.doc[d].path) == EVAL_PIN_UNLISTED)
			n_qa += eval_corpus_add_file(&c, qa.doc[d].path, err, sizeof err) == 0;
	eval_qa_free(&qa);
	int rc = eval_corpus_write_list(&c, list, "sekv eval's corpus: SHA-256 and path of each background file, "
					"in the order they are read (written by sekv eval --corpus-pin)", err, sizeof err);
	if (rc)
		app_errorf("sekv eval: %s\n", err);
	else if (!g->o.quiet)
		fprintf(stderr, "eval: pinned %d files (%zu bytes of text, %d qa documents) in %s\n", c.n_files, c.len,
			n_qa, list);
	eval_corpus_free(&c);
	return rc ? 1 : 0;
}

/* ", a, b (and N more)": the files of c in state, into buf. */
static void name_files(const struct eval_corpus *c, int state, const char *what, char *buf, size_t cap)
{
	int n = eval_corpus_count(c, state), k = 0;
	size_t o = strlen(buf);

	if (!n || o >= cap)
		return;
	o += (size_t)snprintf(buf + o, cap - o, "; %d %s:", n, what);
	for (int i = 0; i < c->n_listed && k < NOTE_NAMES && o < cap; i++)
		if (c->file[i].state == state)
			o += (size_t)snprintf(buf + o, cap - o, "%s %s", k++ ? "," : "", c->file[i].path);
	if (n > k && o < cap)
		snprintf(buf + o, cap - o, " and %d more", n - k);
}

/* Says which corpus files the run reads (stderr, results.md) and writes
 * their list to DIR/corpus.sha256; a missing or changed file is always
 * reported. */
static void corpus_note(struct grid *g, const struct eval_corpus *c)
{
	char path[APP_PATH_MAX + 32], err[512], left[768] = "";

	name_files(c, EVAL_PIN_MISSING, "missing", left, sizeof left);
	name_files(c, EVAL_PIN_CHANGED, "changed (another SHA-256)", left, sizeof left);
	name_files(c, EVAL_PIN_SKIPPED, "no longer plain text", left, sizeof left);
	snprintf(g->pin_note, sizeof g->pin_note, "Corpus: %d of the %d files of `%.200s` (%zu bytes; those read: "
		 "corpus.sha256)%s.", eval_corpus_count(c, EVAL_PIN_USED), c->n_listed, g->corpus_list, c->len, left);
	if (left[0])
		app_errorf("sekv eval: corpus: the figures do not compare with runs on the pinned files%s\n", left);
	if (!g->o.quiet)
		fprintf(stderr, "eval: %s\n", g->pin_note);
	snprintf(path, sizeof path, "%s/corpus.sha256", g->dir);
	if (eval_corpus_write_list(c, path, "the corpus files this run read", err, sizeof err))
		app_errorf("sekv eval: %s\n", err);
}

/* The qa documents: present, unchanged against the corpus list when it
 * lists them, and within the context; each kept one's tokens into
 * g->qa_tok. 0, or 1 when the questions cannot be read. */
static int qa_docs(struct grid *g, const struct eval_corpus *c, const struct chat_template *ct, int n_ctx)
{
	char err[1024], left[768] = "";
	int n_kept = 0, n_q = 0, n_left = 0;

	if (eval_qa_load(&g->qa, g->qa_path, err, sizeof err)) {
		app_errorf("sekv eval: %s\n", err);
		return 1;
	}
	if (!(g->qa_tok = calloc((size_t)g->qa.n_doc + 1, sizeof *g->qa_tok)))
		return 1;
	for (int d = 0; d < g->qa.n_doc; d++) {
		const struct eval_qa_doc *doc = &g->qa.doc[d];
		int state = eval_corpus_pin_state(c, doc->path);
		const char *why = state == EVAL_PIN_MISSING ? "missing" : state == EVAL_PIN_CHANGED ? "changed"
			: state == EVAL_PIN_SKIPPED ? "not plain text" : NULL;
		struct eval_hay h;
		if (!why && access(doc->path, F_OK))
			why = "missing";
		else if (!why && eval_qa_build(&h, doc, 1, g->su.tk, ct, err, sizeof err))
			why = "not readable";
		else if (!why) {
			g->qa_tok[d] = h.n_tok;
			eval_hay_free(&h);
			if (n_ctx > 0 && g->qa_tok[d] + EVAL_CTX_ROOM > n_ctx)
				why = "longer than the context";
		}
		if (why) {
			g->qa_tok[d] = 0;
			if (n_left++ < NOTE_NAMES)
				snprintf(left + strlen(left), sizeof left - strlen(left), "%s %s (%s)", n_left > 1 ? "," : "",
					 doc->path, why);
			continue;
		}
		n_kept++;
		n_q += doc->n_query < g->o.eval_needles ? doc->n_query : g->o.eval_needles;
	}
	snprintf(g->pin_note + strlen(g->pin_note), sizeof g->pin_note - strlen(g->pin_note),
		 " qa: %d of the %d documents of `%.200s`, %d questions (at most --needles per document)%s%s%s.",
		 n_kept, g->qa.n_doc, g->qa_path, n_q, n_left ? "; left out:" : "", left,
		 n_left > NOTE_NAMES ? " and more" : "");
	if (!g->o.quiet)
		fprintf(stderr, "eval: qa: %d documents, %d questions%s%s\n", n_kept, n_q, n_left ? "; left out:" : "",
			left);
	return 0;
}

int cmd_eval(int argc, char **argv)
{
	struct grid *g = calloc(1, sizeof *g);
	struct eval_corpus c = { 0 };
	struct model *m = NULL;
	struct tok *tk = NULL;
	struct chat_template ct;
	char err[1024];
	int status = 1, longest;

	if (!g)
		return 1;
	if ((status = parse_args(g, argc, argv)))
		goto out;
	app_asset_path(g->o.eval_corpus ? g->o.eval_corpus : APP_EVAL_CORPUS, g->corpus_list, sizeof g->corpus_list);
	app_asset_path(g->o.eval_qa ? g->o.eval_qa : APP_EVAL_QA, g->qa_path, sizeof g->qa_path);
	if (g->o.eval_corpus_pin) {
		status = pin_corpus(g);
		goto out;
	}
	status = 1;
	if (app_load(&g->o, &m, &tk, err, sizeof err) ||
	    chat_template_init(&ct, model_gguf(m), chat_format_of_gguf(model_gguf(m)), tk, err,
			       sizeof err)) {
		app_errorf("sekv eval: %s\n", err);
		goto out;
	}
	if ((status = check_lengths(g, m, &longest)))
		goto out;
	status = 1;
	if (prepare_dir(g, err, sizeof err) ||
	    eval_corpus_load_pinned(&c, g->corpus_list, (size_t)longest * 8, err, sizeof err)) {
		app_errorf("sekv eval: %s\n", err);
		goto out;
	}
	corpus_note(g, &c);
	g->su.o = &g->o;
	g->su.m = m;
	g->su.tk = tk;
	g->su.tasks = g->tasks;
	g->su.router = g->o.router;
	g->su.on_method = g->o.quiet ? NULL : on_method;
	g->su.on_ingest = g->o.quiet ? NULL : on_ingest;
	g->su.on_ready = g->o.quiet ? NULL : on_ready;
	g->su.ud = g;
	g->tty = isatty(2);
	if (probe_speed(g, &c, err, sizeof err)) {
		app_errorf("sekv eval: %s\n", err);
		goto out;
	}
	if ((g->tasks & (1u << EVAL_QA)) && qa_docs(g, &c, &ct, model_hparams(m)->n_ctx_train))
		goto out;
	if (make_jobs(g)) {
		app_errorf("sekv eval: out of memory\n");
		goto out;
	}
	status = run(g, &c, &ct);
out:
	eval_corpus_free(&c);
	tok_close(tk);
	model_close(m);
	eval_qa_free(&g->qa);
	free(g->qa_tok);
	free(g->job);
	free(g);
	return status;
}
