/* eval_task.c - one haystack through every method of `sekv eval`
 * (eval.h): ingest once, then per method and budget a session over the
 * stored prefill (session_open, as `sekv ask`), the task's questions, and
 * one record per question.
 *
 * Invariant: the document is prefilled exactly once; another budget
 * rebuilds the SeKV memory from the stored KV (app_mem_rebuild), never by
 * a forward pass. Full KV runs first: its answers are the reference
 * (full_correct) and the teacher of the kl task. Haystacks live in
 * eval_hay.c, the grid and progress in cmd_eval.c.
 */
#include "app/eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/app.h"
#include "app/session.h"
#include "engine/base/clock.h"
#include "engine/conv/conv.h"
#include "engine/base/err.h"
#include "engine/model/model.h"
#include "engine/sekv/sekv.h"
#include "engine/tok/tokenizer.h"
#include "store/store.h"

#define EVAL_KL_MAX 64 /* answer positions compared by the kl task, at most */

/* ---- methods, tasks, records ----------------------------------------- */

/* One row per method; a rival that session_open knows is one more row. */
static const struct eval_method eval_methods[] = {
	{ "full", APP_KV_FULL, EVAL_ROUTER_OPT, 0, 0 },
	{ "sekv", APP_KV_SEKV, EVAL_ROUTER_OPT, 1, 1 },
	{ "streaming", APP_KV_STREAMING, EVAL_ROUTER_OPT, 1, 0 },
	{ "snapkv", APP_KV_SNAPKV, EVAL_ROUTER_OPT, 1, 0 },
	{ "h2o", APP_KV_H2O, EVAL_ROUTER_OPT, 1, 0 },
	{ "quest", APP_KV_QUEST, EVAL_ROUTER_OPT, 1, 0 },
	{ "summary", APP_KV_SEKV, SEKV_ROUTER_NONE, 1, 1 },
	{ "shadowkv", APP_KV_SHADOWKV, EVAL_ROUTER_OPT, 1, 0 },
	/* SeKV with a fixed router beside --router's, on the same haystacks
	 * and memories: routers compared cell by cell in one run */
	{ "sekv-landmark", APP_KV_SEKV, SEKV_ROUTER_LANDMARK, 1, 1 },
	{ "sekv-trained", APP_KV_SEKV, SEKV_ROUTER_TRAINED, 1, 1 },
	{ "sekv-oracle", APP_KV_SEKV, SEKV_ROUTER_ORACLE, 1, 1 },
};
#define N_METHOD ((int)(sizeof eval_methods / sizeof eval_methods[0]))

const struct eval_method *eval_method_find(const char *name)
{
	for (int i = 0; i < N_METHOD; i++)
		if (!strcmp(name, eval_methods[i].name))
			return &eval_methods[i];
	return NULL;
}

const struct eval_method *eval_method_at(int i)
{
	return i >= 0 && i < N_METHOD ? &eval_methods[i] : NULL;
}

static const char *const TASKS[EVAL_N_TASK] = {
	"niah", "multi", "second", "kl", "mass", "copy", "mk", "mv", "mq", "vt", "cwe", "fwe", "qa",
};

const char *eval_task_name(int task)
{
	return task >= 0 && task < EVAL_N_TASK ? TASKS[task] : NULL;
}

int eval_task_find(const char *name)
{
	for (int i = 0; i < EVAL_N_TASK; i++)
		if (!strcmp(name, TASKS[i]))
			return i;
	return -1;
}

void eval_rec_init(struct eval_rec *r)
{
	memset(r, 0, sizeof *r);
	r->correct = r->full_correct = r->niah = r->same_answer = -1;
	r->score = NAN;
	r->kl = r->top1 = r->mass_recall = r->attn_err = r->mass_oracle = r->decode_tps = NAN;
	r->alpha_q[0] = r->alpha_q[1] = r->alpha_q[2] = NAN;
	for (int i = 0; i < EVAL_TIER_N; i++)
		r->tier[i] = NAN;
}

_Static_assert(EVAL_TIER_N == APP_TIER_N, "eval_rec.tier holds app_tier_name's parts");

int eval_recs_push(struct eval_recs *v, const struct eval_rec *r)
{
	if (v->n == v->cap) {
		int nc = v->cap ? 2 * v->cap : 64;
		struct eval_rec *p = realloc(v->r, (size_t)nc * sizeof *p);
		if (!p)
			return SEKV_ENOMEM;
		v->r = p;
		v->cap = nc;
	}
	v->r[v->n++] = *r;
	return 0;
}

void eval_recs_free(struct eval_recs *v)
{
	if (!v)
		return;
	free(v->r);
	memset(v, 0, sizeof *v);
}

/* ---- KL --------------------------------------------------------------- */

int eval_log_softmax(const float *logits, int n, float *out)
{
	int best = 0;
	double sum = 0;

	for (int i = 1; i < n; i++)
		if (logits[i] > logits[best])
			best = i;
	for (int i = 0; i < n; i++)
		sum += exp((double)logits[i] - logits[best]);
	double lse = logits[best] + log(sum);
	for (int i = 0; i < n; i++)
		out[i] = (float)((double)logits[i] - lse);
	return best;
}

double eval_kl(const float *logp, const float *logq, int n)
{
	double kl = 0;

	for (int i = 0; i < n; i++)
		if (logp[i] > -80.0f) /* exp(-80) is below float's resolution of 1 */
			kl += exp((double)logp[i]) * ((double)logp[i] - logq[i]);
	return kl > 0 ? kl : 0;
}

/* ---- one haystack ----------------------------------------------------- */

struct hay_run {
	const struct eval_setup *su;
	enum eval_hay_kind kind;
	unsigned tasks;                  /* 1 << enum eval_task run on this haystack */
	const struct eval_hay *h;
	double depth;
	int index;
	struct eval_recs *out;
	struct eval_hay_cost *cost;
	int64_t doc;
	struct store_doc d;
	int full_ok[EVAL_MAX_NEEDLES];   /* full KV's answer right, per needle; -1 unknown */
	char *full_text[EVAL_MAX_QUERIES]; /* probes: full KV's answer per query (malloc'ed) */
	int n_vocab;
	/* the teacher: full KV's answer to needle 0 and its log distributions */
	int32_t t_ids[EVAL_KL_MAX];
	int t_n;
	float *t_logp;                   /* [EVAL_KL_MAX][n_vocab] */
	int t_top[EVAL_KL_MAX];          /* argmax of each */
	int t_have;                      /* positions filled */
	float *logq;                     /* [n_vocab] scratch */
	double kl_sum;
	int n_top;
	int n_pos;
};

/* What a record shares with every other of this haystack, method, budget. */
static void rec_base(const struct hay_run *r, const struct eval_method *mt, double budget, int task,
		     struct eval_rec *x)
{
	eval_rec_init(x);
	snprintf(x->method, sizeof x->method, "%s", mt->name);
	if (mt->mem) {
		int rt = mt->router == EVAL_ROUTER_OPT ? r->su->router : mt->router;
		snprintf(x->router, sizeof x->router, "%s", sekv_router_name(rt));
	}
	x->budget = mt->budgeted ? budget : 1.0;
	x->task = task;
	x->length = (int)r->d.n_tok;
	x->depth = r->depth;
	x->depth_at = r->h->needle[0].depth_at;
	x->needle = r->index;
	/* as `sekv ingest` keeps it: the exact KV these runs keep for the
	 * references is not part of it */
	x->disk_bytes = (double)r->d.disk_bytes -
			(r->d.full_kv ? (double)r->d.n_layer_global * (double)r->d.n_tok * 2.0 *
					r->d.n_head_kv * r->d.d_h * 2.0 : 0.0);
	x->prefill_tps = r->d.prefill_s > 0 ? (double)r->d.n_tok / r->d.prefill_s : 0;
}

/* The measures of one answer a to needle j from session s. */
static void rec_answer(const struct hay_run *r, struct session *s, const struct conv_answer *a, int j,
		       struct eval_rec *x)
{
	struct session_info in;
	const struct eval_needle *e = &r->h->needle[j];

	session_get_info(s, &in);
	x->depth = r->kind == EVAL_HAY_NEEDLE || r->kind == EVAL_HAY_PROBE ? r->depth : e->depth;
	x->depth_at = e->depth_at;
	snprintf(x->value, sizeof x->value, "%s", e->value);
	snprintf(x->answer, sizeof x->answer, "%s", a->text ? a->text : "");
	x->correct = eval_answer_correct(a->text, e->value);
	x->full_correct = r->full_ok[j];
	x->resident_bytes = (double)a->peak_resident_bytes;
	x->host_bytes = (double)in.host_bytes;
	x->swa_bytes = (double)in.swa_bytes;
	x->full_kv_bytes = (double)in.full_kv_bytes;
	x->decode_tps = a->decode_tps;
	x->n_answer = a->n_gen;
	if (in.mem) {
		struct sekv_params dp;
		struct sekv_tier_parts tp;
		sekv_default_params(&dp);
		sekv_mem_tier_parts(in.mem, dp.n_sink, &tp);
		app_tier_bytes(&tp, (double)a->peak_tail_bytes, (double)a->peak_recon_bytes, x->tier);
	}
	if (a->mass_recall >= 0)
		x->mass_recall = a->mass_recall;
	if (a->attn_err >= 0)
		x->attn_err = a->attn_err;
	if (a->mass_oracle >= 0)
		x->mass_oracle = a->mass_oracle;
	for (int i = 0; i < 3 && a->alpha_q[0] >= 0; i++)
		x->alpha_q[i] = a->alpha_q[i];
	if (a->mass_recall_lh && in.n_layer <= EVAL_LH_LAYERS && in.n_head <= EVAL_LH_HEADS) {
		x->n_lh_layer = in.n_layer;
		x->n_lh_head = in.n_head;
		for (int l = 0; l < in.n_layer; l++) {
			x->lh_layer[l] = in.layer_id[l];
			for (int h = 0; h < in.n_head; h++)
				x->mass_lh[l * in.n_head + h] = a->mass_recall_lh[l * in.n_head + h];
		}
	}
	snprintf(x->note, sizeof x->note, "%.255s", in.note[0] ? in.note : a->warn);
}

/* Opens a session of method mt at budget over the haystack's document;
 * answers of at least n_predict tokens unless -n said how many. */
static int open_method(struct hay_run *r, const struct eval_method *mt, double budget, int mass,
		       int n_predict, struct session **s, char *err, size_t errlen)
{
	struct app_opts o = *r->su->o;
	double t0 = clk_now();

	if (!o.n_predict_set && n_predict > o.n_predict)
		o.n_predict = n_predict;
	o.kv = mt->kv;
	o.router = mt->router == EVAL_ROUTER_OPT ? r->su->router : mt->router;
	o.mass_recall = mass;
	/* a memory method reads the memory rebuilt for this budget and, like
	 * `sekv ask` without --budget, runs over a budget below its fixed part
	 * with a note (recorded) rather than refusing */
	o.budget = budget;
	o.budget_set = !mt->mem;
	int rc = session_open(s, r->su->m, r->su->tk, &o, r->doc, err, errlen);
	r->cost->answer_s += clk_now() - t0;
	r->cost->n_session++;
	return rc;
}

/* Errors of one method (recorded, the run goes on) against the rest. */
static int method_error(int rc)
{
	return rc == SEKV_EINVAL || rc == SEKV_EBUDGET || rc == SEKV_EUNSUP;
}

struct teach {
	struct hay_run *r;
	int capture;     /* 1: keep the free answer's distributions (full KV) */
};

static int on_step(void *ud, const struct conv_step *st)
{
	struct teach *t = ud;
	struct hay_run *r = t->r;
	int i = st->question ? 0 : st->n_gen;

	if (!t->capture || !st->logits || i >= EVAL_KL_MAX)
		return 0;
	r->t_top[i] = eval_log_softmax(st->logits, r->n_vocab, r->t_logp + (size_t)i * r->n_vocab);
	if (i + 1 > r->t_have)
		r->t_have = i + 1;
	return 0;
}

/* Asks question in session s; the answer goes to a. */
static int ask(struct hay_run *r, struct session *s, const char *question, int capture, struct conv_answer *a,
	       char *err, size_t errlen)
{
	struct teach t = { r, capture };
	double t0 = clk_now();
	int rc = conv_ask(session_conv(s), question, on_step, &t, a, err, errlen);
	r->cost->answer_s += clk_now() - t0;
	r->cost->n_step += a->n_question + a->n_gen;
	return rc;
}

static int on_forced(void *ud, int i, const float *logits)
{
	struct hay_run *r = ud;
	int top = eval_log_softmax(logits, r->n_vocab, r->logq);

	if (i >= r->t_have)
		return 1;
	r->kl_sum += eval_kl(r->t_logp + (size_t)i * r->n_vocab, r->logq, r->n_vocab);
	r->n_top += top == r->t_top[i];
	r->n_pos++;
	return 0;
}

static int push(struct hay_run *r, const struct eval_rec *x, char *err, size_t errlen)
{
	if (eval_recs_push(r->out, x))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "eval: out of memory");
	return 0;
}

/* What a probe record of query q holds before its answer: the asked
 * needle's depth, the expected items. */
static void probe_fields(const struct hay_run *r, int q, struct eval_rec *x)
{
	const struct eval_query *y = &r->h->query[q];
	size_t o = 0;

	if (y->needle >= 0)
		x->depth_at = r->h->needle[y->needle].depth_at;
	x->needle = r->h->task == EVAL_QA ? r->index * EVAL_MAX_QUERIES + q : r->index;
	x->value[0] = 0;
	for (int i = 0; i < y->n_item && o < sizeof x->value; i++)
		o += (size_t)snprintf(x->value + o, sizeof x->value - o, "%s%s", i ? ", " : "", y->item[i]);
}

/* A record per task of this method that says why it measured nothing. */
static int push_failed(struct hay_run *r, const struct eval_method *mt, double budget, const char *why,
		       char *err, size_t errlen)
{
	static const int order[] = { EVAL_NIAH, EVAL_MASS, EVAL_KL, EVAL_SECOND, EVAL_MULTI };
	struct eval_rec x;

	for (int q = 0; r->kind == EVAL_HAY_PROBE && q < r->h->n_query; q++) {
		int rc;
		rec_base(r, mt, budget, r->h->task, &x);
		probe_fields(r, q, &x);
		snprintf(x.note, sizeof x.note, "%s", why);
		if ((rc = push(r, &x, err, errlen)))
			return rc;
	}
	for (size_t k = 0; r->kind != EVAL_HAY_PROBE && k < sizeof order / sizeof *order; k++) {
		int task = order[k];
		int of_kind = r->kind == EVAL_HAY_NEEDLE ? task == EVAL_NIAH || task == EVAL_KL ||
			(task == EVAL_MASS && mt->mem)
			: r->kind == EVAL_HAY_SECOND ? task == EVAL_SECOND : task == EVAL_MULTI;
		if (!of_kind || !(r->tasks & (1u << task)))
			continue;
		rec_base(r, mt, budget, task, &x);
		snprintf(x.note, sizeof x.note, "%s", why);
		int rc = push(r, &x, err, errlen);
		if (rc)
			return rc;
	}
	return 0;
}

/* The end of a method's questions: its answer and session freed; an
 * error of the method alone (method_error) becomes its records' note.
 * Returns rc, or 0 once the note is recorded. */
static int method_end(struct hay_run *r, const struct eval_method *mt, double budget, struct conv_answer *a,
		      struct session *s, int rc, char *err, size_t errlen)
{
	conv_answer_free(a);
	session_close(s);
	if (rc && method_error(rc))
		rc = push_failed(r, mt, budget, err, err, errlen);
	return rc;
}

/* The kl task: the full-KV answer teacher-forced through mt. */
static int run_kl(struct hay_run *r, const struct eval_method *mt, double budget, char *err, size_t errlen)
{
	struct session *s = NULL;
	struct conv_answer a = { 0 };
	struct eval_rec x;
	int rc = open_method(r, mt, budget, 0, 0, &s, err, errlen);

	r->kl_sum = 0;
	r->n_top = r->n_pos = 0;
	if (!rc) {
		double t0 = clk_now();
		rc = conv_ask_forced(session_conv(s), r->h->needle[0].question, r->t_ids, r->t_have, on_forced, r,
				     &a, err, errlen);
		r->cost->answer_s += clk_now() - t0;
		r->cost->n_step += a.n_question + a.n_gen;
	}
	rec_base(r, mt, budget, EVAL_KL, &x);
	if (!rc) {
		rec_answer(r, s, &a, 0, &x);
		x.correct = -1;
		x.decode_tps = NAN;
		snprintf(x.answer, sizeof x.answer, "%s", "");
		x.n_answer = r->n_pos;
		x.kl = r->n_pos ? r->kl_sum / r->n_pos : NAN;
		x.top1 = r->n_pos ? (double)r->n_top / r->n_pos : NAN;
	} else if (method_error(rc)) {
		snprintf(x.note, sizeof x.note, "%s", err);
		rc = 0;
	}
	conv_answer_free(&a);
	session_close(s);
	return rc ? rc : push(r, &x, err, errlen);
}

/* The one-needle tasks of method mt: niah and mass from a free answer,
 * kl from a forced one. */
static int run_needle(struct hay_run *r, const struct eval_method *mt, double budget, char *err,
		      size_t errlen)
{
	unsigned tk = r->tasks;
	int full = mt->kv == APP_KV_FULL && !mt->budgeted;
	int mass = (tk & (1u << EVAL_MASS)) && mt->mem;
	struct session *s = NULL;
	struct conv_answer a = { 0 };
	struct eval_rec x;
	int rc = 0;

	if (full || (tk & (1u << EVAL_NIAH)) || mass) {
		if (!(rc = open_method(r, mt, budget, mass, 0, &s, err, errlen)))
			rc = ask(r, s, r->h->needle[0].question, full && (tk & (1u << EVAL_KL)), &a, err, errlen);
		if (rc)
			goto out;
		rec_base(r, mt, budget, EVAL_NIAH, &x);
		if (full) {
			r->full_ok[0] = eval_answer_correct(a.text, r->h->needle[0].value);
			r->t_n = a.n_gen < EVAL_KL_MAX ? a.n_gen : EVAL_KL_MAX;
			memcpy(r->t_ids, a.ids, (size_t)r->t_n * sizeof *a.ids);
			if (r->t_have > r->t_n)
				r->t_have = r->t_n;
		}
		rec_answer(r, s, &a, 0, &x);
		if (tk & (1u << EVAL_NIAH)) {
			x.niah = x.correct;
			if ((rc = push(r, &x, err, errlen)))
				goto out;
		}
		if (mass) {
			x.task = EVAL_MASS;
			x.niah = -1;
			if ((rc = push(r, &x, err, errlen)))
				goto out;
		}
		conv_answer_free(&a);
		session_close(s);
		s = NULL;
	}
	if ((tk & (1u << EVAL_KL)) && r->t_have > 0)
		rc = run_kl(r, mt, budget, err, errlen);
out:
	return method_end(r, mt, budget, &a, s, rc, err, errlen);
}

/* Questions j in order in one conversation (second), or each in a fresh
 * one (multi). */
static int run_questions(struct hay_run *r, const struct eval_method *mt, double budget, char *err,
			 size_t errlen)
{
	int second = r->kind == EVAL_HAY_SECOND, full = mt->kv == APP_KV_FULL && !mt->budgeted;
	int task = second ? EVAL_SECOND : EVAL_MULTI;
	struct session *s = NULL;
	struct conv_answer a = { 0 };
	struct eval_rec x;
	int rc = 0;

	if (!(r->tasks & (1u << task)))
		return 0;
	for (int j = 0; !rc && j < r->h->n_needle; j++) {
		if (!s && (rc = open_method(r, mt, budget, 0, 0, &s, err, errlen)))
			break;
		/* second: the needle at the cell's depth is asked first */
		int q = second && r->h->needle[0].depth != r->depth ? 1 - j : j;
		if ((rc = ask(r, s, r->h->needle[q].question, 0, &a, err, errlen)))
			break;
		if (full)
			r->full_ok[q] = eval_answer_correct(a.text, r->h->needle[q].value);
		rec_base(r, mt, budget, task, &x);
		rec_answer(r, s, &a, q, &x);
		x.question = second ? j + 1 : 0;
		x.needle = second ? r->index : r->index * EVAL_MULTI_FACTS + q;
		rc = push(r, &x, err, errlen);
		conv_answer_free(&a);
		if (!second) {
			session_close(s);
			s = NULL;
		}
	}
	return method_end(r, mt, budget, &a, s, rc, err, errlen);
}

/* A probe haystack: each query in a fresh conversation, scored by the
 * share of its items in the answer; full KV's answers are kept as the
 * reference of the others. */
static int run_probes(struct hay_run *r, const struct eval_method *mt, double budget, char *err,
		      size_t errlen)
{
	int full = mt->kv == APP_KV_FULL && !mt->budgeted;
	struct session *s = NULL;
	struct conv_answer a = { 0 };
	struct eval_rec x;
	int rc = 0;

	for (int q = 0; !rc && q < r->h->n_query; q++) {
		const struct eval_query *y = &r->h->query[q];
		if ((rc = open_method(r, mt, budget, 0, y->n_predict, &s, err, errlen)) ||
		    (rc = ask(r, s, y->question, 0, &a, err, errlen)))
			break;
		rec_base(r, mt, budget, r->h->task, &x);
		rec_answer(r, s, &a, y->needle >= 0 ? y->needle : 0, &x);
		probe_fields(r, q, &x);
		x.score = eval_score_items(a.text, y);
		x.correct = x.score == 1;
		if (full) {
			r->full_ok[q] = x.correct;
			free(r->full_text[q]);
			r->full_text[q] = strdup(a.text ? a.text : "");
		}
		x.full_correct = r->full_ok[q];
		if (r->full_text[q])
			x.same_answer = !strcmp(r->full_text[q], a.text ? a.text : "");
		rc = push(r, &x, err, errlen);
		conv_answer_free(&a);
		session_close(s);
		s = NULL;
	}
	return method_end(r, mt, budget, &a, s, rc, err, errlen);
}

static int run_method(struct hay_run *r, const struct eval_method *mt, double budget, char *err,
		      size_t errlen)
{
	int n0 = r->out->n, rc;
	double t0 = clk_now();

	rc = r->kind == EVAL_HAY_NEEDLE ? run_needle(r, mt, budget, err, errlen)
		: r->kind == EVAL_HAY_PROBE ? run_probes(r, mt, budget, err, errlen)
		: run_questions(r, mt, budget, err, errlen);
	if (rc || !r->su->on_method)
		return rc;
	/* one progress line: answers right (full's), kl, mass_recall, time */
	int n = 0, ok = 0, n_full = 0, ok_full = 0, n_kl = 0, n_mr = 0;
	double kl = 0, top = 0, mr = 0;
	const char *note = "";
	for (int i = n0; i < r->out->n; i++) {
		const struct eval_rec *x = &r->out->r[i];
		if (x->correct >= 0 && x->task != EVAL_MASS) {
			n++;
			ok += x->correct;
		}
		if (x->full_correct >= 0 && x->correct >= 0 && x->task != EVAL_MASS) {
			n_full++;
			ok_full += x->full_correct;
		}
		if (!isnan(x->kl)) {
			n_kl++;
			kl += x->kl;
			top += x->top1;
		}
		if (!isnan(x->mass_recall) && x->task == EVAL_MASS) {
			n_mr++;
			mr += x->mass_recall;
		}
		if (x->note[0] && x->correct < 0 && isnan(x->kl))
			note = x->note;
	}
	char line[512], label[48];
	struct eval_group g = { { 0 }, { 0 }, mt->budgeted ? budget : 1.0 };
	snprintf(g.method, sizeof g.method, "%s", mt->name);
	if (n0 < r->out->n)
		snprintf(g.router, sizeof g.router, "%s", r->out->r[n0].router);
	eval_group_label(&g, label, sizeof label);
	int o = snprintf(line, sizeof line, "%-18s %d/%d right (full %d/%d)", label, ok, n, ok_full, n_full);
	if (n_kl && o < (int)sizeof line)
		o += snprintf(line + o, sizeof line - o, ", kl %.3f top1 %.2f", kl / n_kl, top / n_kl);
	if (n_mr && o < (int)sizeof line)
		o += snprintf(line + o, sizeof line - o, ", mass_recall %.3f", mr / n_mr);
	if (o < (int)sizeof line)
		o += snprintf(line + o, sizeof line - o, ", %.1fs%s%.120s", clk_now() - t0, *note ? ": " : "",
			      note);
	r->su->on_method(r->su->ud, line);
	return 0;
}

static void on_ingest(void *ud, const struct app_ingest_progress *p)
{
	const struct eval_setup *su = ud;
	if (su->on_ingest && !strcmp(p->stage, "prefill"))
		su->on_ingest(su->ud, p->done, p->total, p->rate);
}

/* Ingests the haystack (written to hay_dir/name.txt) and reads its row. */
static int ingest(struct hay_run *r, const char *name, char *err, size_t errlen)
{
	const struct eval_setup *su = r->su;
	struct app_opts o = *su->o;
	struct store *st = NULL;
	char path[4352];
	FILE *f;
	int rc;

	snprintf(path, sizeof path, "%s/%s.txt", su->hay_dir, name);
	if (!(f = fopen(path, "wb")))
		return sekv_errf(err, errlen, SEKV_EIO, "eval: %s: cannot write", path);
	size_t w = fwrite(r->h->text, 1, r->h->len, f);
	if (fclose(f) || w != r->h->len)
		return sekv_errf(err, errlen, SEKV_EIO, "eval: %s: cannot write", path);
	o.quiet = 1;
	o.title = name;
	/* every method and budget is measured on this one prefill */
	o.keep_full_kv = 1;
	o.budget = su->n_budget ? su->budget[0] : o.budget;
	double t0 = clk_now();
	rc = app_ingest(&o, path, on_ingest, (void *)su, &r->doc, err, errlen);
	r->cost->prefill_s += clk_now() - t0;
	if (!rc && !(rc = store_open(&st, su->o->db, err, errlen)))
		rc = store_doc_get(st, r->doc, &r->d, err, errlen);
	store_close(st);
	if (!rc && r->d.n_tok != r->h->n_tok)
		rc = sekv_errf(err, errlen, SEKV_EINVAL, "eval: %s: ingest stored %lld tokens, the haystack has %d",
			       name, (long long)r->d.n_tok, r->h->n_tok);
	return rc;
}

static int drop_doc(const struct eval_setup *su, int64_t doc, char *err, size_t errlen)
{
	struct store *st = NULL;
	int rc = store_open(&st, su->o->db, err, errlen);
	if (!rc)
		rc = store_doc_delete(st, doc, err, errlen);
	store_close(st);
	return rc;
}

int eval_run_hay(const struct eval_setup *su, enum eval_hay_kind kind, unsigned tasks, const char *name,
		 const struct eval_hay *h, double depth, int index, struct eval_recs *out,
		 struct eval_hay_cost *cost, char *err, size_t errlen)
{
	struct hay_run *r = calloc(1, sizeof *r);
	const struct eval_method *full = eval_method_find("full");
	int rc, any_mem = 0;

	memset(cost, 0, sizeof *cost);
	if (!r)
		return sekv_errf(err, errlen, SEKV_ENOMEM, "eval: out of memory");
	*r = (struct hay_run){ .su = su, .kind = kind, .tasks = tasks, .h = h, .depth = depth, .index = index, .out = out,
			       .cost = cost, .n_vocab = tok_n_vocab(su->tk) };
	for (int j = 0; j < EVAL_MAX_NEEDLES; j++)
		r->full_ok[j] = -1;
	r->t_logp = malloc((size_t)EVAL_KL_MAX * r->n_vocab * sizeof *r->t_logp);
	r->logq = malloc((size_t)r->n_vocab * sizeof *r->logq);
	if (!r->t_logp || !r->logq) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "eval: out of memory");
		goto out;
	}
	if ((rc = ingest(r, name, err, errlen)))
		goto out;
	if (su->on_ready)
		su->on_ready(su->ud, cost->prefill_s, r->d.prefill_s > 0 ? (double)r->d.n_tok / r->d.prefill_s : 0);
	/* full KV first: the reference and the kl teacher */
	rc = run_method(r, full, 1.0, err, errlen);
	for (int i = 0; i < su->n_meth; i++)
		any_mem |= su->meth[i]->mem;
	double built = su->n_budget ? su->budget[0] : -1;
	for (int b = 0; !rc && b < su->n_budget; b++) {
		if (any_mem && su->budget[b] != built) {
			struct app_opts ro = *su->o;
			double t0 = clk_now();
			ro.quiet = 1;
			rc = app_mem_rebuild(&ro, su->m, r->doc, su->budget[b], err, errlen);
			cost->rebuild_s += clk_now() - t0;
			built = su->budget[b];
		}
		for (int i = 0; !rc && i < su->n_meth; i++)
			if (su->meth[i]->budgeted)
				rc = run_method(r, su->meth[i], su->budget[b], err, errlen);
	}
	if (r->doc > 0) {
		char e2[256];
		int rc2 = drop_doc(su, r->doc, e2, sizeof e2);
		if (!rc && rc2)
			rc = sekv_errf(err, errlen, rc2, "%s", e2);
	}
out:
	for (int q = 0; q < EVAL_MAX_QUERIES; q++)
		free(r->full_text[q]);
	free(r->t_logp);
	free(r->logq);
	free(r);
	return rc;
}
