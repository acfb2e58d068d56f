/* eval_list.c - the word lists of the aggregation probes of `sekv eval`
 * (eval.h): cwe, a numbered list in which ten words are common, and fwe,
 * coded text whose word counts follow Zipf's law; each a whole haystack
 * of an exact token count, asked for its most frequent words.
 *
 * Invariant: the list is a function of the seed and the token count; the
 * words are made up (syllables drawn with eval_rand), so no answer comes
 * from the model's knowledge, and the expected words are the true top
 * counts of the text (the closing line holds none of them). Task
 * definitions after RULER (Hsieh et al., 2024, section 3.3, "common words
 * extraction" and "frequent words extraction"); the needle probes live in
 * eval_probe.c.
 */
#include "app/eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/err.h"

#define LIST_N_CW 10      /* cwe: the common words asked for (RULER's num_cw) */
#define LIST_N_FW 3       /* fwe: the frequent words asked for */
#define LIST_WORD 16      /* bytes of a made-up word, NUL included */
#define LIST_PLANS 10     /* item counts tried to come near the token count */
#define LIST_BACK 8       /* items dropped one by one when no closing line fits */
#define LIST_UCW 3        /* cwe: the most an uncommon word occurs (RULER's freq_ucw) */
#define LIST_REACH 32     /* tokens below the count a plan may end: the closing line's reach */

/* The closing line's words: its first k of them make the count exact, so
 * it reaches further than a few items (LIST_REACH tokens at least). */
static const char *const CLOSING[] = {
	"(end", "of", "the", "list;", "nothing", "more", "follows", "after", "this", "line,", "which", "is",
	"written", "here", "only", "to", "close", "the", "text", "and", "carries", "no", "word", "that",
	"belongs", "to", "it,", "so", "what", "stands", "above", "is", "all", "there", "is)",
};
#define N_CLOSING ((int)(sizeof CLOSING / sizeof CLOSING[0]))

struct list {
	char (*word)[LIST_WORD];  /* [n_word] distinct words, the asked ones first */
	int n_word;
	int *slot;                /* [n_slot] word of each position */
	int n_slot;
	char *text;               /* rendered; malloc'ed */
	size_t len;
};

static void list_free(struct list *l)
{
	free(l->word);
	free(l->slot);
	free(l->text);
	memset(l, 0, sizeof *l);
}

/* A made-up lowercase word of two or three syllables. */
static void made_up_word(uint64_t *s, char *buf)
{
	static const char cons[] = "bdfgklmnprstvz", vow[] = "aeiou", tail[] = "nrsl";
	int n_syl = 2 + (int)(eval_rand(s) % 2), o = 0;

	for (int i = 0; i < n_syl; i++) {
		buf[o++] = cons[eval_rand(s) % (sizeof cons - 1)];
		buf[o++] = vow[eval_rand(s) % (sizeof vow - 1)];
	}
	if (eval_rand(s) % 3 == 0)
		buf[o++] = tail[eval_rand(s) % (sizeof tail - 1)];
	buf[o] = 0;
}

/* n distinct made-up words into l->word. */
static int draw_words(struct list *l, uint64_t *s, int n)
{
	if (!(l->word = malloc((size_t)n * sizeof *l->word)))
		return SEKV_ENOMEM;
	for (l->n_word = 0; l->n_word < n;) {
		int dup = 0;
		made_up_word(s, l->word[l->n_word]);
		for (int k = 0; k < l->n_word && !dup; k++)
			dup = !strcmp(l->word[k], l->word[l->n_word]);
		l->n_word += !dup;
	}
	return 0;
}

/* The counts of a list of about n items: count [n_word] (from the words
 * asked for down), into a shuffled l->slot. */
static int plan(struct list *l, int task, uint64_t seed, int n)
{
	uint64_t s = seed;
	int n_word, *count, rc;

	if (task == EVAL_CWE) {
		int c = n / (3 * LIST_N_CW) > 3 ? n / (3 * LIST_N_CW) : 3;
		int u = c / 3 < 1 ? 1 : c / 3 > LIST_UCW ? LIST_UCW : c / 3;
		int n_uc = n - LIST_N_CW * c > 0 ? (n - LIST_N_CW * c) / u : 0;
		n_word = LIST_N_CW + n_uc;
		if (!(count = malloc((size_t)n_word * sizeof *count)))
			return SEKV_ENOMEM;
		for (int i = 0; i < n_word; i++)
			count[i] = i < LIST_N_CW ? c : u;
	} else {
		int v = n / 8 < 10 ? 10 : n / 8 > 200 ? 200 : n / 8;
		double hsum = 0;
		for (int r = 1; r <= v; r++)
			hsum += 1.0 / ((double)r * r);
		n_word = v;
		if (!(count = malloc((size_t)n_word * sizeof *count)))
			return SEKV_ENOMEM;
		for (int r = 1; r <= v; r++) {
			int k = (int)floor(n / ((double)r * r) / hsum);
			count[r - 1] = k > 1 ? k : 1;
		}
		/* the asked ranks and the next strictly apart */
		for (int r = LIST_N_FW; r >= 1; r--)
			if (count[r - 1] <= count[r])
				count[r - 1] = count[r] + 1;
	}
	int total = 0;
	for (int i = 0; i < n_word; i++)
		total += count[i];
	if ((rc = draw_words(l, &s, n_word)) || !(l->slot = malloc((size_t)total * sizeof *l->slot))) {
		free(count);
		return rc ? rc : SEKV_ENOMEM;
	}
	l->n_slot = 0;
	for (int i = 0; i < n_word; i++)
		for (int k = 0; k < count[i]; k++)
			l->slot[l->n_slot++] = i;
	free(count);
	for (int i = l->n_slot - 1; i > 0; i--) { /* Fisher-Yates */
		int j = (int)(eval_rand(&s) % (uint64_t)(i + 1)), t = l->slot[i];
		l->slot[i] = l->slot[j];
		l->slot[j] = t;
	}
	return 0;
}

/* The text of the first n_slot items and a closing line of k words. */
static int render(struct list *l, int task, int n_slot, int k)
{
	static const char *const head[2] = {
		"Below is a numbered list of words. Some of them appear more often than the others.\n\n",
		"Below is a coded text. Its coded words appear with different frequencies.\n\n",
	};
	size_t cap = strlen(head[1]) + (size_t)n_slot * (LIST_WORD + 10) + 128, o;
	char *t = realloc(l->text, cap);

	if (!t)
		return SEKV_ENOMEM;
	l->text = t;
	o = (size_t)snprintf(t, cap, "%s", head[task != EVAL_CWE]);
	for (int i = 0; i < n_slot; i++) {
		const char *w = l->word[l->slot[i]];
		if (task == EVAL_CWE)
			o += (size_t)snprintf(t + o, cap - o, "%d. %s\n", i + 1, w);
		else
			o += (size_t)snprintf(t + o, cap - o, "%s%s", w, i + 1 == n_slot || i % 12 == 11 ? "\n" : " ");
	}
	for (int i = 0; i < k; i++)
		o += (size_t)snprintf(t + o, cap - o, "%s%s", i ? " " : "\n", CLOSING[i]);
	l->len = o;
	return 0;
}

/* Tokens of the first n_slot items with a closing line of k words. */
static int count_at(struct list *l, int task, int n_slot, int k, const struct tok *tk,
		    const struct chat_template *ct, struct chat_tokvec *v, char *err, size_t errlen)
{
	int rc = render(l, task, n_slot, k);
	if (rc)
		return sekv_errf(err, errlen, rc, "list: out of memory");
	return eval_doc_tokens(tk, ct, l->text, l->len, v, err, errlen);
}

/* The asked words: the LIST_N_CW or LIST_N_FW most frequent of the first
 * n_slot items (ties: the planned order). */
static void set_query(struct eval_hay *h, const struct list *l, int task, int n_slot)
{
	struct eval_query *q = &h->query[0];
	int n_ask = task == EVAL_CWE ? LIST_N_CW : LIST_N_FW, *count = calloc((size_t)l->n_word, sizeof *count);

	memset(q, 0, sizeof *q);
	snprintf(q->question, sizeof q->question, task == EVAL_CWE
		 ? "What are the %d most common words in the numbered list above?"
		 : "What are the %d most frequently appearing coded words in the coded text above?", n_ask);
	q->match = EVAL_MATCH_WORD | EVAL_MATCH_NOCASE;
	q->n_predict = task == EVAL_CWE ? 64 : 32;
	q->needle = -1;
	for (int i = 0; count && i < n_slot; i++)
		count[l->slot[i]]++;
	for (int a = 0; count && a < n_ask; a++) {
		int best = -1;
		for (int w = 0; w < l->n_word; w++)
			if (count[w] >= 0 && (best < 0 || count[w] > count[best]))
				best = w;
		if (best < 0)
			break;
		snprintf(q->item[q->n_item++], EVAL_ITEM_CAP, "%s", l->word[best]);
		count[best] = -1;
	}
	free(count);
	h->n_query = 1;
}

int eval_list_build(struct eval_hay *h, int task, const struct tok *tk, const struct chat_template *ct,
		    int n_tok, uint64_t seed, char *err, size_t errlen)
{
	struct list l = { 0 };
	struct chat_tokvec v = { 0 };
	int rc = 0, n = n_tok / 4, t = -1, t0;

	memset(h, 0, sizeof *h);
	h->task = -1;
	if (task != EVAL_CWE && task != EVAL_FWE)
		return sekv_errf(err, errlen, SEKV_EINVAL, "list: %s is not a word-list task",
				 eval_task_name(task) ? eval_task_name(task) : "?");
	if ((rc = t0 = count_at(&l, task, 0, 0, tk, ct, &v, err, errlen)) < 0)
		goto out;
	if (n_tok < t0 + 64) {
		rc = sekv_errf(err, errlen, SEKV_EINVAL, "list: %d tokens: too few for a word list", n_tok);
		goto out;
	}
	/* item counts by the tokens per item measured, until within a few items */
	for (int i = 0; i < LIST_PLANS; i++) {
		list_free(&l);
		if ((rc = plan(&l, task, seed, n)))
			goto out;
		if ((rc = t = count_at(&l, task, l.n_slot, 0, tk, ct, &v, err, errlen)) < 0)
			goto out;
		double per = (double)(t - t0) / (l.n_slot > 0 ? l.n_slot : 1);
		int step = (int)floor((n_tok - t) / (per > 0.5 ? per : 0.5));
		if (t <= n_tok && n_tok - t <= LIST_REACH)
			break;
		n += step ? step : -1;
	}
	rc = SEKV_EBUDGET;
	/* the last items dropped one by one, each time every closing line tried */
	for (int drop = 0; rc == SEKV_EBUDGET && drop < LIST_BACK && drop < l.n_slot; drop++) {
		for (int k = 0; k <= N_CLOSING; k++) {
			if ((t = count_at(&l, task, l.n_slot - drop, k, tk, ct, &v, err, errlen)) < 0) {
				rc = t;
				goto out;
			}
			if (t == n_tok) {
				set_query(h, &l, task, l.n_slot - drop);
				rc = 0;
				break;
			}
			if (t > n_tok)
				break;
		}
	}
	if (rc) {
		rc = sekv_errf(err, errlen, rc, "list: no closing line gives exactly %d tokens", n_tok);
		goto out;
	}
	h->text = l.text;
	h->len = l.len;
	l.text = NULL;
	h->n_tok = n_tok;
	h->task = task;
out:
	list_free(&l);
	chat_tokvec_free(&v);
	return rc;
}
