/* eval_hay.c - haystacks for `sekv eval` (eval.h): needles (a key phrase
 * and a random value) and a haystack of background text (eval_corpus.c)
 * cut to an exact token count with each needle at a sentence or paragraph
 * boundary near its depth.
 *
 * Invariant: a haystack is a function of the corpus, the seeds and the
 * tokenizer only (no clock, no file order the OS chooses), and its token
 * count is the one app_ingest stores for it (same turn builder). Running
 * the tasks over it lives in eval_task.c.
 */
#include "app/eval.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/app.h"
#include "engine/base/err.h"
#include "engine/tok/tokenizer.h"

#define HAY_SEARCH 4096              /* bytes searched each way for a boundary */
#define HAY_CUT_TRIES 16
#define HAY_NEAR 48                  /* tokens: how far a sentence boundary may be */

/* ---- needles ---------------------------------------------------------- */

uint64_t eval_rand(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

uint64_t eval_seed_mix(uint64_t seed, uint64_t a, uint64_t b)
{
	uint64_t s = seed ^ 0x5eed5eedull;
	s ^= eval_rand(&s) + a;
	s ^= eval_rand(&s) + b;
	return eval_rand(&s);
}

static const char *const THINGS[] = {
	"secret passphrase", "access code", "password", "security code", "entry phrase",
	"unlock word", "radio call sign", "vault combination",
};
static const char *const PLACES[] = {
	"archive vault", "north gate", "harbor office", "old lighthouse", "river mill", "east tower",
	"garden shed", "main library", "train depot", "mountain cabin", "city museum", "village school",
	"copper mine", "weather station", "night market", "royal stables", "glass factory",
	"border post", "island ferry", "stone chapel",
};
static const char *const WORDS[] = {
	"AMBER", "FALCON", "COBALT", "MAPLE", "ORBIT", "TIGER", "SILVER", "CEDAR", "QUARTZ", "RAVEN",
	"EMBER", "JADE", "LOTUS", "NOVA", "ONYX", "PIXEL", "RIVET", "SABLE", "TUNDRA", "VIOLET",
	"WILLOW", "ZEPHYR", "BISON", "CANYON", "DELTA", "FROST", "GLACIER", "HALO", "IVORY",
	"KESTREL", "LUMEN", "MARBLE",
};
#define N_OF(a) ((int)(sizeof a / sizeof a[0]))
_Static_assert(sizeof PLACES / sizeof PLACES[0] >= EVAL_MAX_NEEDLES, "a place per needle");

void eval_needles_make(uint64_t seed, int n, struct eval_needle *out)
{
	int place[N_OF(PLACES)];
	uint64_t s = seed;

	if (n > EVAL_MAX_NEEDLES)
		n = EVAL_MAX_NEEDLES;
	for (int i = 0; i < N_OF(PLACES); i++)
		place[i] = i;
	memset(out, 0, (size_t)(n > 0 ? n : 0) * sizeof *out);
	for (int i = 0; i < n; i++) {
		struct eval_needle *e = &out[i];
		/* a partial shuffle: places differ within one haystack */
		int j = i + (int)(eval_rand(&s) % (uint64_t)(N_OF(PLACES) - i)), t = place[i];
		place[i] = place[j];
		place[j] = t;
		const char *thing = THINGS[eval_rand(&s) % N_OF(THINGS)];
		for (int dup = 1; dup;) {
			int a = (int)(eval_rand(&s) % N_OF(WORDS)), b = (int)(eval_rand(&s) % N_OF(WORDS));
			if (a == b)
				continue;
			snprintf(e->value, sizeof e->value, "%s-%s-%d", WORDS[a], WORDS[b],
				 10 + (int)(eval_rand(&s) % 90));
			dup = 0;
			for (int k = 0; k < i; k++)
				dup |= !strcmp(out[k].value, e->value);
		}
		char key[sizeof e->key];
		snprintf(key, sizeof key, "%s for the %s", thing, PLACES[place[i]]);
		eval_needle_set(e, key, e->value);
		e->tok_at = -1;
	}
}

void eval_needle_set(struct eval_needle *e, const char *key, const char *value)
{
	if (e->key != key)
		snprintf(e->key, sizeof e->key, "%s", key);
	if (e->value != value)
		snprintf(e->value, sizeof e->value, "%s", value);
	snprintf(e->sentence, sizeof e->sentence, "The %s is %s.", e->key, e->value);
	snprintf(e->question, sizeof e->question, "What is the %s?", e->key);
}

int eval_answer_correct(const char *answer, const char *value)
{
	return answer && value && *value && strstr(answer, value) != NULL;
}

/* ---- haystacks -------------------------------------------------------- */

/* The corpus window a haystack is cut from, and its tokens. */
struct bg {
	char *b;          /* [len] window text, NUL-terminated */
	size_t len;
	int32_t *ids;     /* [n] its tokens */
	int n;
	size_t *off;      /* [n + 1] byte where each token starts */
};

static void bg_free(struct bg *g)
{
	free(g->b);
	free(g->ids);
	free(g->off);
}

int eval_doc_tokens(const struct tok *tk, const struct chat_template *ct, const char *text,
		    size_t len, struct chat_tokvec *v, char *err, size_t errlen)
{
	v->n = 0;
	int rc = chat_build_turn(v, ct, tk, CHAT_START_STREAM, APP_DOC_SYSTEM, text, len, 0, NULL,
				 err, errlen);
	return rc ? rc : v->n;
}

/* Byte offsets of ids' decoded pieces into off [n + 1] (NULL: not
 * wanted); returns the total. With expect, *same says whether the pieces
 * spell expect[0, expect_len) from its start. */
static size_t piece_offsets(const struct tok *tk, const int32_t *ids, int n, size_t *off,
			    const char *expect, size_t expect_len, int *same)
{
	char piece[1024];
	size_t at = 0;

	*same = 1;
	for (int i = 0; i < n; i++) {
		int k = tok_token_text(tk, ids[i], piece, (int)sizeof piece);
		if (k < 0)
			k = 0;
		if (expect && (at + (size_t)k > expect_len || memcmp(expect + at, piece, (size_t)k)))
			*same = 0;
		if (off)
			off[i] = at;
		at += (size_t)k;
	}
	if (off)
		off[n] = at;
	return at;
}

/* A window of want bytes from a paragraph start chosen by seed, wrapping
 * around the corpus (joined by a blank line), tokenized. */
static int bg_make(struct bg *g, const struct eval_corpus *c, const struct tok *tk, uint64_t seed,
		   size_t want, char *err, size_t errlen)
{
	uint64_t s = seed;
	size_t start = 0;

	memset(g, 0, sizeof *g);
	if (!c->len)
		return sekv_errf(err, errlen, SEKV_EINVAL, "haystack: empty corpus");
	const char *p = strstr(c->text + eval_rand(&s) % c->len, "\n\n");
	if (p) {
		start = (size_t)(p - c->text);
		while (start < c->len && strchr(" \t\n", c->text[start]))
			start++;
		if (start >= c->len)
			start = 0;
	}
	if (want > c->len)
		want = c->len;
	if (!(g->b = malloc(want + 3)))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "haystack: out of memory");
	for (size_t i = start; g->len < want;) {
		g->b[g->len++] = c->text[i++];
		if (i == c->len) {
			if (g->len + 2 <= want) {
				memcpy(g->b + g->len, "\n\n", 2);
				g->len += 2;
			}
			i = 0;
		}
	}
	g->b[g->len] = 0;
	int n = tok_encode(tk, g->b, g->len, 0, NULL, 0, err, errlen);
	if (n < 0)
		return n;
	g->ids = malloc(((size_t)n + 1) * sizeof *g->ids);
	g->off = malloc(((size_t)n + 1) * sizeof *g->off);
	if (!g->ids || !g->off)
		return sekv_errf(err, errlen, SEKV_ENOMEM, "haystack: out of memory");
	if ((g->n = tok_encode(tk, g->b, g->len, 0, g->ids, n, err, errlen)) != n)
		return g->n < 0 ? g->n : sekv_errf(err, errlen, SEKV_EINVAL, "haystack: tokenizer unstable");
	int same;
	if (piece_offsets(tk, g->ids, n, g->off, g->b, g->len, &same) != g->len || !same)
		return sekv_errf(err, errlen, SEKV_EINVAL,
				 "haystack: the corpus's tokens do not decode back to its text");
	return 0;
}

/* A needle may start at p: the text's start, or a sentence or paragraph
 * start: a visible byte after white space that holds a blank line, or
 * follows '.', '!' or '?' (not "8. ", a numbered heading); ':' and ';'
 * count before a line break. */
static int is_boundary(const char *b, size_t p)
{
	size_t q = p, nl = 0;

	if (p == 0)
		return 1;
	if (strchr(" \t\n", b[p]))
		return 0;
	while (q > 0 && strchr(" \t\n", b[q - 1]))
		nl += b[--q] == '\n';
	if (q == p || q == 0)
		return q == 0 && q < p;
	if (nl >= 2)
		return 1;
	if (q >= 2 && b[q - 2] >= '0' && b[q - 2] <= '9')
		return 0;
	return strchr(".!?", b[q - 1]) || (nl && strchr(":;", b[q - 1]));
}

/* The sentence or paragraph boundary in [lo, hi] nearest to p0 within
 * near bytes; else the nearest line start, else word start within near;
 * else the same three within HAY_SEARCH; else lo. Text with long runs
 * without sentence ends (lists of copyright holders) keeps the needle
 * near its depth. */
static size_t find_boundary(const char *b, size_t p0, size_t lo, size_t hi, size_t near)
{
	for (int pass = 0; pass < 6; pass++) {
		int kind = pass % 3;
		size_t reach = pass < 3 ? near : HAY_SEARCH;
		for (size_t d = 0; d <= reach; d++) {
			size_t c[2] = { p0 >= d ? p0 - d : (size_t)-1, p0 + d };
			for (int k = 0; k < 2; k++) {
				size_t p = c[k];
				if (p == (size_t)-1 || p < lo || p > hi)
					continue;
				if (kind == 0 ? is_boundary(b, p)
				    : p > 0 && !strchr(" \t\n", b[p]) && b[p - 1] == (kind == 1 ? '\n' : ' '))
					return p;
			}
		}
	}
	return lo;
}

/* A needle to insert at byte at of the window: sentence + what follows. */
struct ins {
	size_t at;                /* window byte it goes before */
	int at_end;               /* 1: after the cut instead (the last needle) */
	char s[256];              /* sentence (< 192 bytes) and separator */
	size_t n;
};

/* Window bytes [0, cut) with the insertions (ascending at, all < cut). */
static char *compose(const struct bg *g, size_t cut, const struct ins *ins, int n_ins, size_t *len)
{
	size_t total = cut, o = 0, from = 0;
	for (int i = 0; i < n_ins; i++)
		total += ins[i].n;
	char *t = malloc(total + 1);
	if (!t)
		return NULL;
	for (int i = 0; i < n_ins; i++) {
		size_t at = ins[i].at_end ? cut : ins[i].at;
		memcpy(t + o, g->b + from, at - from);
		o += at - from;
		memcpy(t + o, ins[i].s, ins[i].n);
		o += ins[i].n;
		from = at;
	}
	memcpy(t + o, g->b + from, cut - from);
	o += cut - from;
	t[o] = 0;
	*len = o;
	return t;
}

static int cmp_depth(const void *a, const void *b)
{
	double x = ((const struct eval_needle *)a)->depth, y = ((const struct eval_needle *)b)->depth;
	return x < y ? -1 : x > y;
}

/* Where each needle's first token lies in the document of h (v holds its
 * tokens; the turn's opening decodes to open_len bytes): the token
 * holding the sentence's first byte (each sentence occurs once: values
 * are in no corpus file). */
static void locate_needles(struct eval_hay *h, const struct tok *tk, const struct chat_tokvec *v,
			   size_t open_len)
{
	size_t *off = malloc(((size_t)v->n + 1) * sizeof *off);
	int same;

	if (!off)
		return;
	piece_offsets(tk, v->ids, v->n, off, NULL, 0, &same);
	for (int j = 0; j < h->n_needle; j++) {
		struct eval_needle *e = &h->needle[j];
		const char *s = strstr(h->text, e->sentence);
		size_t at = open_len + (s ? (size_t)(s - h->text) : 0);
		int i = 0;
		while (i + 1 < v->n && off[i + 1] <= at)
			i++;
		e->tok_at = i;
		e->depth_at = (double)i / (double)(h->n_tok - e->n_tok);
	}
	free(off);
}

/* Plans where each needle goes in the window (ins, ascending). */
static int plan_needles(struct eval_hay *h, const struct bg *g, const struct tok *tk, int over,
			int body_bg, struct ins *ins, int *ins_tok, char *err, size_t errlen)
{
	size_t prev = 0, hi = g->off[body_bg];
	int before = 0;

	for (int j = 0; j < h->n_needle; j++) {
		const struct eval_needle *e = &h->needle[j];
		long t = lround(e->depth * (h->n_tok - e->n_tok)) - over - before;
		if (t < 0)
			t = 0;
		if (t > body_bg)
			t = body_bg;
		/* near: the bytes of HAY_NEAR tokens either side */
		long a = t > HAY_NEAR ? t - HAY_NEAR : 0, z = t + HAY_NEAR < g->n ? t + HAY_NEAR : g->n;
		size_t p0 = g->off[t], near = g->off[z] - p0 > p0 - g->off[a] ? g->off[z] - p0 : p0 - g->off[a];
		size_t p = find_boundary(g->b, p0, j ? prev + 1 : 0, hi, near), q = p;
		struct ins *x = &ins[j];
		/* the last needle nearer the end than any boundary ends the text */
		x->at_end = j == h->n_needle - 1 && hi - p0 < (p > p0 ? p - p0 : p0 - p);
		x->at = x->at_end ? hi : p;
		/* else the white space before p comes again after the needle (at
		 * most 48 bytes), so the text that follows keeps its layout */
		while (q > 0 && p - q < 48 && strchr(" \t\n", g->b[q - 1]))
			q--;
		if (x->at_end)
			x->n = (size_t)snprintf(x->s, sizeof x->s, "\n\n%s\n", e->sentence);
		else if (p == 0)
			x->n = (size_t)snprintf(x->s, sizeof x->s, "%s\n\n", e->sentence);
		else
			x->n = (size_t)snprintf(x->s, sizeof x->s, "%s%.*s", e->sentence, (int)(p - q), g->b + q);
		int k = tok_encode(tk, x->s, x->n, 0, NULL, 0, err, errlen);
		if (k < 0)
			return k;
		ins_tok[j] = k;
		before += k;
		prev = x->at;
	}
	return 0;
}

/* Moves the cut (in window tokens) until the document has n_tok tokens. */
static int cut_exact(struct eval_hay *h, const struct bg *g, const struct tok *tk,
		     const struct chat_template *ct, const struct ins *ins, int k,
		     struct chat_tokvec *v, char *err, size_t errlen)
{
	const struct ins *e = h->n_needle ? &ins[h->n_needle - 1] : NULL;
	size_t last = !e ? 0 : e->at_end ? (h->n_needle > 1 ? ins[h->n_needle - 2].at : 0) : e->at;
	int k_min = 0, best = -1, best_d = 1 << 30;

	while (k_min < g->n && g->off[k_min] <= last + 16)
		k_min++;
	for (int tries = 0; tries < HAY_CUT_TRIES + 17; tries++) {
		if (tries >= HAY_CUT_TRIES) /* a last sweep around the closest cut */
			k = best + (tries - HAY_CUT_TRIES) / 2 * ((tries - HAY_CUT_TRIES) % 2 ? 1 : -1);
		if (k < k_min || k > g->n) {
			if (tries < HAY_CUT_TRIES && k > g->n)
				return sekv_errf(err, errlen, SEKV_EINVAL,
						 "haystack: corpus too small for %d tokens", h->n_tok);
			k = k < k_min ? k_min : g->n;
		}
		free(h->text);
		if (!(h->text = compose(g, g->off[k], ins, h->n_needle, &h->len)))
			return sekv_errf(err, errlen, SEKV_ENOMEM, "haystack: out of memory");
		int n = eval_doc_tokens(tk, ct, h->text, h->len, v, err, errlen);
		if (n < 0)
			return n;
		if (n == h->n_tok)
			return 0;
		if (abs(n - h->n_tok) < best_d) {
			best_d = abs(n - h->n_tok);
			best = k;
		}
		if (tries < HAY_CUT_TRIES)
			k += h->n_tok - n;
	}
	return sekv_errf(err, errlen, SEKV_EBUDGET, "haystack: no cut gives exactly %d tokens (closest: %d off)",
			 h->n_tok, best_d);
}

int eval_hay_build(struct eval_hay *h, const struct eval_corpus *c, const struct tok *tk,
		   const struct chat_template *ct, int n_tok, uint64_t bg_seed,
		   const struct eval_needle *needles, int n, char *err, size_t errlen)
{
	struct chat_tokvec v = { 0 };
	struct ins ins[EVAL_MAX_NEEDLES];
	int ins_tok[EVAL_MAX_NEEDLES], rc, sum = 0;
	struct bg g;

	memset(h, 0, sizeof *h);
	memset(&g, 0, sizeof g);
	h->task = -1;
	if (n < 0 || n > EVAL_MAX_NEEDLES)
		return sekv_errf(err, errlen, SEKV_EINVAL, "haystack: %d needles (at most %d)", n,
				 EVAL_MAX_NEEDLES);
	h->n_tok = n_tok;
	h->n_needle = n;
	memcpy(h->needle, needles, (size_t)n * sizeof *needles);
	for (int j = 0; j < n; j++)
		h->needle[j].depth = h->needle[j].depth < 0 ? 0 : h->needle[j].depth > 1 ? 1 : h->needle[j].depth;
	qsort(h->needle, (size_t)n, sizeof *h->needle, cmp_depth);
	int over = eval_doc_tokens(tk, ct, "", 0, &v, err, errlen);
	if ((rc = over) < 0)
		goto out;
	int same;
	size_t open_len = piece_offsets(tk, v.ids, v.n, NULL, NULL, 0, &same);
	for (int j = 0; j < n; j++) {
		int k = tok_encode(tk, h->needle[j].sentence, strlen(h->needle[j].sentence), 0, NULL, 0,
				   err, errlen);
		if ((rc = k) < 0)
			goto out;
		h->needle[j].n_tok = k;
		sum += k + 1;
	}
	int body_bg = n_tok - over - sum;
	if (body_bg < 32 + 16 * n) {
		rc = sekv_errf(err, errlen, SEKV_EINVAL, "haystack: %d tokens: too few for %d needles", n_tok, n);
		goto out;
	}
	if ((rc = bg_make(&g, c, tk, bg_seed, (size_t)n_tok * 8 + 2 * HAY_SEARCH, err, errlen)))
		goto out;
	if (g.n < body_bg + 64) {
		rc = sekv_errf(err, errlen, SEKV_EINVAL, "haystack: corpus of %d tokens too small for %d",
			       g.n, n_tok);
		goto out;
	}
	if ((rc = plan_needles(h, &g, tk, over, body_bg, ins, ins_tok, err, errlen)))
		goto out;
	sum = 0;
	for (int j = 0; j < n; j++)
		sum += ins_tok[j];
	rc = cut_exact(h, &g, tk, ct, ins, n_tok - over - sum, &v, err, errlen);
	/* a needle after the cut joins the cut text's last piece: when no
	 * cut counts exactly, another separator may */
	for (int sep = 1; rc == SEKV_EBUDGET && n && ins[n - 1].at_end && sep < 3; sep++) {
		struct ins *x = &ins[n - 1];
		x->n = (size_t)snprintf(x->s, sizeof x->s, "%s%s\n", sep == 1 ? "\n" : " ", h->needle[n - 1].sentence);
		rc = cut_exact(h, &g, tk, ct, ins, n_tok - over - sum, &v, err, errlen);
	}
	if (rc)
		goto out;
	locate_needles(h, tk, &v, open_len);
out:
	bg_free(&g);
	chat_tokvec_free(&v);
	if (rc)
		eval_hay_free(h);
	return rc;
}

void eval_hay_free(struct eval_hay *h)
{
	if (!h)
		return;
	free(h->text);
	h->text = NULL;
	h->len = 0;
}
