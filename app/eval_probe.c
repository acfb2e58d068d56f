/* eval_probe.c - the RULER-style probes of `sekv eval` (eval.h): needles
 * whose values are digit strings and codes (copy), the needle variants
 * (mk, mv, mq), variable tracking (vt), their questions and how an answer
 * is scored (share of the expected items it holds).
 *
 * Invariant: a probe is a function of its seed, variant and depth only
 * (eval_rand), with every value and name absent from the corpus it is
 * planted in, so a right answer can only come from the needle. The task
 * definitions follow RULER (Hsieh et al., "RULER: What's the Real Context
 * Size of Your Long-Context Language Models?", 2024, section 3); the word
 * lists of cwe and fwe live in eval_list.c, the qa questions in eval_qa.c,
 * running them in eval_task.c.
 */
#include "app/eval.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/base/err.h"

#define PROBE_N_KEYS 4     /* mk, mv, mq: needles (RULER's num_needle_k, _v, _q) */
#define PROBE_N_HOPS 4     /* vt: assignments after the first (RULER's num_hops) */
#define PROBE_BG_TRIES 4   /* background starts tried before no exact cut is an error */
#define PROBE_REDRAW 64    /* draws of a value before one outside the corpus is given up */

/* ---- scoring ---------------------------------------------------------- */

static int same_char(char a, char b, int nocase)
{
	return nocase ? tolower((unsigned char)a) == tolower((unsigned char)b) : a == b;
}

static int is_alnum(char c)
{
	return isalnum((unsigned char)c) != 0;
}

/* 1 when item occurs in s under match. */
static int holds(const char *s, const char *item, int match)
{
	size_t n = strlen(item), len = strlen(s);
	int nocase = (match & EVAL_MATCH_NOCASE) != 0;

	if (!n)
		return 0;
	for (size_t i = 0; i + n <= len; i++) {
		size_t k = 0;
		while (k < n && same_char(s[i + k], item[k], nocase))
			k++;
		if (k < n)
			continue;
		if (!(match & EVAL_MATCH_WORD) || ((i == 0 || !is_alnum(s[i - 1])) && !is_alnum(s[i + n])))
			return 1;
	}
	return 0;
}

double eval_score_items(const char *answer, const struct eval_query *q)
{
	int found = 0;

	if (!answer || q->n_item <= 0)
		return 0;
	for (int i = 0; i < q->n_item; i++)
		found += holds(answer, q->item[i], q->match);
	return (double)found / q->n_item;
}

/* ---- values ----------------------------------------------------------- */

enum value_kind { VAL_DIGITS, VAL_CODE, VAL_NUMBER, VAL_VT_NUMBER, VAL_VT_NAME };

/* Letters and digits that cannot be read as one another (no I, O, 0, 1). */
static const char CODE_CHARS[] = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789";

static void draw_value(uint64_t *s, enum value_kind k, char *buf, size_t cap)
{
	static const int groups[3] = { 3, 4, 2 };
	unsigned long long r = eval_rand(s);

	switch (k) {
	case VAL_DIGITS: /* "4071-9382-5516" */
		snprintf(buf, cap, "%04llu-%04llu-%04llu", 1000 + r % 9000, (unsigned long long)(eval_rand(s) % 10000),
			 (unsigned long long)(eval_rand(s) % 10000));
		break;
	case VAL_CODE: /* "QX7-K2P9-M4": letters and digits both */
		for (int letters = 0, digits = 0; !letters || !digits;) {
			size_t o = 0;
			letters = digits = 0;
			for (int g = 0; g < 3; g++) {
				for (int i = 0; i < groups[g] && o + 1 < cap; i++) {
					char c = CODE_CHARS[eval_rand(s) % (sizeof CODE_CHARS - 1)];
					letters += c >= 'A';
					digits += c < 'A';
					buf[o++] = c;
				}
				if (g < 2 && o + 1 < cap)
					buf[o++] = '-';
			}
			buf[o] = 0;
		}
		break;
	case VAL_NUMBER: /* RULER's seven-digit magic numbers */
		snprintf(buf, cap, "%llu", 1000000 + r % 9000000);
		break;
	case VAL_VT_NUMBER:
		snprintf(buf, cap, "%llu", 10000 + r % 90000);
		break;
	case VAL_VT_NAME: /* five capitals */
		for (int i = 0; i < 5 && (size_t)i + 1 < cap; i++)
			buf[i] = (char)('A' + eval_rand(s) % 26);
		buf[cap > 5 ? 5 : cap - 1] = 0;
		break;
	}
}

/* A value of kind k that c does not contain and that differs from the
 * taken [n_taken] values. */
static void fresh_value(uint64_t *s, enum value_kind k, const struct eval_corpus *c, char (*taken)[EVAL_ITEM_CAP],
			int n_taken, char *buf, size_t cap)
{
	for (int tries = 0; tries < PROBE_REDRAW; tries++) {
		int dup = 0;
		draw_value(s, k, buf, cap);
		for (int i = 0; i < n_taken; i++)
			dup |= !strcmp(taken[i], buf);
		if (!dup && !(c && c->text && strstr(c->text, buf)))
			return;
	}
}

/* ---- needle probes ---------------------------------------------------- */

/* The "THING" of a needle key "THING for the PLACE", and its place. */
static void split_key(const char *key, char *thing, size_t cap_t, const char **place)
{
	const char *p = strstr(key, " for the ");
	snprintf(thing, cap_t, "%.*s", p ? (int)(p - key) : (int)strlen(key), key);
	*place = p ? p + 9 : "";
}

static void query_one(struct eval_query *q, const char *question, int needle, int n_predict)
{
	memset(q, 0, sizeof *q);
	snprintf(q->question, sizeof q->question, "%s", question);
	q->match = EVAL_MATCH_WORD;
	q->n_predict = n_predict;
	q->needle = needle;
}

static void query_add(struct eval_query *q, const char *item)
{
	if (q->n_item < EVAL_MAX_ITEMS)
		snprintf(q->item[q->n_item++], EVAL_ITEM_CAP, "%.*s", EVAL_ITEM_CAP - 1, item);
}

/* copy, mk, mq: needles of eval_needles_make, one kind of key for all,
 * with fresh values of kind k. */
static void keyed_needles(uint64_t *s, int n, enum value_kind k, const struct eval_corpus *c,
			  struct eval_needle *e)
{
	char thing[96], key[96], taken[EVAL_MAX_NEEDLES][EVAL_ITEM_CAP], v[EVAL_ITEM_CAP];
	const char *place;

	eval_needles_make(eval_rand(s), n, e);
	split_key(e[0].key, thing, sizeof thing, &place);
	for (int i = 0; i < n; i++) {
		split_key(e[i].key, key, sizeof key, &place);
		snprintf(key, sizeof key, "%.40s for the %.40s", thing, place);
		fresh_value(s, k, c, taken, i, v, sizeof v);
		snprintf(taken[i], sizeof taken[i], "%s", v);
		eval_needle_set(&e[i], key, v);
	}
}

static double wrap01(double x)
{
	return x - floor(x);
}

int eval_probe_make(int task, uint64_t seed, int variant, double depth, const struct eval_corpus *c,
		    struct eval_needle *e, int *n_e, struct eval_query *q, int *n_q)
{
	uint64_t s = seed;
	char buf[256], thing[96];
	const char *place;

	*n_e = *n_q = 0;
	switch (task) {
	case EVAL_COPY:
		keyed_needles(&s, 1, variant % 2 ? VAL_CODE : VAL_DIGITS, c, e);
		e[0].depth = depth;
		query_one(&q[0], e[0].question, 0, 0);
		query_add(&q[0], e[0].value);
		*n_e = *n_q = 1;
		return 0;
	case EVAL_MK:
	case EVAL_MQ:
		keyed_needles(&s, PROBE_N_KEYS, VAL_NUMBER, c, e);
		for (int i = 0; i < PROBE_N_KEYS; i++)
			e[i].depth = task == EVAL_MK ? wrap01(depth + (double)i / PROBE_N_KEYS)
				: (i + 0.5) / PROBE_N_KEYS;
		*n_e = PROBE_N_KEYS;
		*n_q = 1;
		if (task == EVAL_MK) {
			query_one(&q[0], e[0].question, 0, 0);
			query_add(&q[0], e[0].value);
			return 0;
		}
		split_key(e[0].key, thing, sizeof thing, &place);
		int o = snprintf(buf, sizeof buf, "What are the %ss for", thing);
		for (int i = 0; i < PROBE_N_KEYS; i++) {
			split_key(e[i].key, thing, sizeof thing, &place);
			o += snprintf(buf + o, sizeof buf - (size_t)o, "%s the %s", i == 0 ? "" : i + 1 < PROBE_N_KEYS ? ","
				      : " and", place);
		}
		snprintf(buf + o, sizeof buf - (size_t)o, "?");
		query_one(&q[0], buf, -1, 64);
		for (int i = 0; i < PROBE_N_KEYS; i++)
			query_add(&q[0], e[i].value);
		return 0;
	case EVAL_MV: {
		char taken[PROBE_N_KEYS][EVAL_ITEM_CAP];
		eval_needles_make(eval_rand(&s), 1, e);
		split_key(e[0].key, thing, sizeof thing, &place);
		snprintf(buf, sizeof buf, "What are all the %ss for the %s?", thing, place);
		query_one(&q[0], buf, -1, 64);
		for (int i = 0; i < PROBE_N_KEYS; i++) {
			fresh_value(&s, VAL_NUMBER, c, taken, i, taken[i], sizeof taken[i]);
			e[i] = e[0];
			snprintf(e[i].value, sizeof e[i].value, "%.31s", taken[i]);
			snprintf(e[i].sentence, sizeof e[i].sentence, "One of the %.40ss for the %.40s is %.31s.", thing,
				 place, taken[i]);
			snprintf(e[i].question, sizeof e[i].question, "%.159s", q[0].question);
			e[i].depth = (i + 0.5) / PROBE_N_KEYS;
			query_add(&q[0], taken[i]);
		}
		*n_e = PROBE_N_KEYS;
		*n_q = 1;
		return 0;
	}
	case EVAL_VT: {
		char name[PROBE_N_HOPS + 1][EVAL_ITEM_CAP], number[EVAL_ITEM_CAP];
		int n = PROBE_N_HOPS + 1;
		fresh_value(&s, VAL_VT_NUMBER, c, NULL, 0, number, sizeof number);
		for (int i = 0; i < n; i++)
			fresh_value(&s, VAL_VT_NAME, c, name, i, name[i], sizeof name[i]);
		snprintf(buf, sizeof buf, "Which variables are assigned the value %s, directly or through other "
			 "variables? Name them all.", number);
		query_one(&q[0], buf, -1, 48);
		for (int i = 0; i < n; i++) {
			memset(&e[i], 0, sizeof e[i]);
			snprintf(e[i].key, sizeof e[i].key, "%.31s", name[i]);
			snprintf(e[i].value, sizeof e[i].value, "%.31s", i ? name[i - 1] : number);
			snprintf(e[i].sentence, sizeof e[i].sentence, "VAR %s = %s%s.", e[i].key, i ? "VAR " : "",
				 e[i].value);
			snprintf(e[i].question, sizeof e[i].question, "%.159s", q[0].question);
			e[i].depth = (i + 0.5) / n;
			e[i].tok_at = -1;
			query_add(&q[0], name[i]);
		}
		*n_e = n;
		*n_q = 1;
		return 0;
	}
	default:
		return SEKV_EINVAL;
	}
}

int eval_probe_build(struct eval_hay *h, int task, const struct eval_corpus *c, const struct tok *tk,
		     const struct chat_template *ct, int n_tok, double depth, int variant, uint64_t seed,
		     uint64_t bg_seed, char *err, size_t errlen)
{
	struct eval_needle e[EVAL_MAX_NEEDLES];
	struct eval_query q[EVAL_MAX_QUERIES];
	int n_e, n_q, rc;

	if (task == EVAL_CWE || task == EVAL_FWE)
		return eval_list_build(h, task, tk, ct, n_tok, seed, err, errlen);
	if (eval_probe_make(task, seed, variant, depth, c, e, &n_e, q, &n_q))
		return sekv_errf(err, errlen, SEKV_EINVAL, "probe: %s is not a needle probe",
				 eval_task_name(task) ? eval_task_name(task) : "?");
	/* many needles in a short text can leave no cut of exactly n_tok
	 * tokens: the background then starts at another paragraph, chosen by
	 * the seed as well */
	rc = eval_hay_build(h, c, tk, ct, n_tok, bg_seed, e, n_e, err, errlen);
	for (int i = 1; rc == SEKV_EBUDGET && i < PROBE_BG_TRIES; i++)
		rc = eval_hay_build(h, c, tk, ct, n_tok, eval_seed_mix(bg_seed, 0xb9, (uint64_t)i), e, n_e, err, errlen);
	if (rc)
		return rc;
	h->task = task;
	h->n_query = n_q;
	memcpy(h->query, q, (size_t)n_q * sizeof *q);
	/* eval_hay_build sorted the needles by depth */
	for (int i = 0; i < n_q; i++) {
		int k = q[i].needle;
		h->query[i].needle = -1;
		for (int j = 0; k >= 0 && j < h->n_needle; j++)
			if (!strcmp(h->needle[j].sentence, e[k].sentence))
				h->query[i].needle = j;
	}
	return 0;
}
