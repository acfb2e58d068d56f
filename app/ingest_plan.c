/* ingest_plan.c - what ingest stores of a document, decided before any
 * prefill: the whole text, its first --max-tokens tokens, or --split
 * consecutive parts each within the limit (cut at a paragraph, line,
 * sentence or word end near the limit); each part's slice of the page
 * map; the report of what extraction did; and the no-echo password prompt
 * for an encrypted PDF. Nothing is ever cut silently: a document longer
 * than the limit without either option is refused with both lengths.
 */
#include "app/app.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "app/extract.h"
#include "engine/base/err.h"
#include "engine/evidence/evidence.h"
#include "engine/tok/tokenizer.h"

#define PLAN_MARGIN 4  /* tokens kept free under the limit: a cut's pieces may merge differently */
#define PLAN_MIN_ROOM 16 /* fewest text tokens a part must be able to hold */

/* Tokens of text[0..len) as the document turn ingest builds. */
static int turn_tokens(const struct chat_template *ct, const struct tok *tk, const char *text,
		       size_t len, int *n, char *err, size_t errlen)
{
	struct chat_tokvec v = { 0 };
	int rc = chat_build_turn(&v, ct, tk, CHAT_START_STREAM, APP_DOC_SYSTEM, text, len, 0, NULL,
				 err, errlen);
	*n = v.n;
	chat_tokvec_free(&v);
	return rc;
}

/* b moved back to just after a paragraph end, else a line end, a
 * sentence end or a space, within the last eighth of text[a, b); b
 * itself when none is there. */
static size_t nice_cut(const char *text, size_t a, size_t b)
{
	static const char *const sep[] = { "\n\n", "\n", ". ", " " };
	size_t lo = b - (b - a) / 8;

	for (size_t k = 0; k < sizeof sep / sizeof *sep; k++) {
		size_t n = strlen(sep[k]);
		for (size_t i = b; i >= lo + n && i > a + n; i--)
			if (!memcmp(text + i - n, sep[k], n))
				return i;
	}
	return b;
}

/* Byte offset of text token i (i < n), the last known one before it for
 * a token outside the text. */
static size_t tok_at(const int32_t *off, int i)
{
	while (i > 0 && off[i] < 0)
		i--;
	return off[i] < 0 ? 0 : (size_t)off[i];
}

/* One part starting at byte a (text token i0): the longest that fits the
 * limit, cut nicely; its end into *b and its tokens into *n_tok. */
static int plan_part(struct app_plan *pl, const struct chat_template *ct, const struct tok *tk,
		     const char *text, size_t len, const int32_t *off, int n_ids, int room, size_t a,
		     int i0, size_t *b, int *n_tok, char *err, size_t errlen)
{
	int i1 = i0 + room, rc;

	for (;;) {
		*b = i1 >= n_ids ? len : nice_cut(text, a, tok_at(off, i1));
		/* offsets scaled from a normalising tokenizer may fall inside a character */
		while (*b < len && *b > a && ((unsigned char)text[*b] & 0xc0) == 0x80)
			(*b)--;
		if ((rc = turn_tokens(ct, tk, text + a, *b - a, n_tok, err, errlen)))
			return rc;
		if (*n_tok <= pl->limit)
			return 0;
		i1 -= *n_tok - pl->limit + PLAN_MARGIN;
		if (i1 <= i0 || tok_at(off, i1) <= a)
			return sekv_errf(err, errlen, SEKV_EINVAL,
					 "plan: no cut of the text at byte %zu fits %d tokens", a, pl->limit);
	}
}

/* The parts of a document longer than pl->limit. */
static int plan_cut(struct app_plan *pl, const struct chat_template *ct, const struct tok *tk,
		    const char *text, size_t len, int split, char *err, size_t errlen)
{
	int32_t *ids = NULL, *off = NULL;
	int n_ids, exact, rc, i0 = 0, cap = 0;
	size_t a = 0;

	n_ids = tok_encode(tk, text, len, 0, NULL, 0, err, errlen);
	if (n_ids < 0)
		return n_ids;
	int room = pl->limit - (pl->n_tok - n_ids) - PLAN_MARGIN;
	if (room < PLAN_MIN_ROOM)
		return sekv_errf(err, errlen, SEKV_EINVAL, "--max-tokens %d leaves no room for the text "
				 "(the document turn itself takes %d tokens)", pl->limit, pl->n_tok - n_ids);
	if (!(ids = malloc(((size_t)n_ids + 1) * sizeof *ids)) ||
	    !(off = malloc(((size_t)n_ids + 1) * sizeof *off))) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "plan: out of memory");
		goto out;
	}
	if ((rc = tok_encode(tk, text, len, 0, ids, n_ids, err, errlen)) < 0 ||
	    (rc = evidence_offsets(tk, ids, n_ids, text, len, off, &exact, err, errlen)))
		goto out;
	while (a < len && strspn(text + a, " \t\n") < len - a) {
		if (pl->n_part == cap) {
			struct app_part *np = realloc(pl->part, (size_t)(cap = 2 * cap + 4) * sizeof *np);
			if (!np) {
				rc = sekv_errf(err, errlen, SEKV_ENOMEM, "plan: out of memory");
				goto out;
			}
			pl->part = np;
		}
		struct app_part *p = &pl->part[pl->n_part];
		p->start = a;
		if ((rc = plan_part(pl, ct, tk, text, len, off, n_ids, room, a, i0, &p->end, &p->n_tok,
				    err, errlen)))
			goto out;
		pl->n_part++;
		if (!split)
			break;
		for (a = p->end; i0 < n_ids && tok_at(off, i0) < a; i0++)
			;
	}
	pl->cut = !split;
	rc = 0;
out:
	free(ids);
	free(off);
	return rc;
}

int app_plan(struct app_plan *pl, const struct chat_template *ct, const struct tok *tk,
	     const char *text, size_t len, int n_ctx, int max_tokens, int split,
	     char *err, size_t errlen)
{
	int rc;

	memset(pl, 0, sizeof *pl);
	pl->limit = n_ctx > 0 ? n_ctx : 0;
	if (max_tokens > 0 && (pl->limit == 0 || max_tokens < pl->limit))
		pl->limit = max_tokens;
	if ((rc = turn_tokens(ct, tk, text, len, &pl->n_tok, err, errlen)))
		return rc;
	if (pl->limit == 0 || pl->n_tok <= pl->limit) {
		if (!(pl->part = calloc(1, sizeof *pl->part)))
			return sekv_errf(err, errlen, SEKV_ENOMEM, "plan: out of memory");
		pl->part[0] = (struct app_part){ 0, len, pl->n_tok };
		pl->n_part = 1;
		return 0;
	}
	if (!split && max_tokens <= 0)
		return sekv_errf(err, errlen, SEKV_EINVAL,
				 "document is %d tokens, longer than the model's context of %d tokens: "
				 "--max-tokens %d stores its first %d tokens, --split stores it in parts",
				 pl->n_tok, pl->limit, pl->limit, pl->limit);
	return plan_cut(pl, ct, tk, text, len, split, err, errlen);
}

void app_plan_free(struct app_plan *pl)
{
	free(pl->part);
	memset(pl, 0, sizeof *pl);
}

int app_part_pages(const struct extract_doc *x, size_t a, size_t b, int *page0, int *n_page,
		   int64_t **start)
{
	int p0 = extract_page_of(x->page_start, x->n_page, (int64_t)a);
	int p1 = extract_page_of(x->page_start, x->n_page, (int64_t)(b > a ? b - 1 : a));

	*start = NULL;
	*n_page = 0;
	if (p0 < 0)
		return 0;
	if (!(*start = malloc((size_t)(p1 - p0 + 1) * sizeof **start)))
		return SEKV_ENOMEM;
	for (int p = p0; p <= p1; p++) {
		int64_t s = x->page_start[p] - (int64_t)a;
		(*start)[p - p0] = s > 0 ? s : 0;
	}
	*page0 = p0 + 1;
	*n_page = p1 - p0 + 1;
	return 0;
}

/* Page numbers as "3, 7, 12" (at most 20, then "and N more") into buf. */
static void page_list(const int *page, int n, char *buf, size_t cap)
{
	size_t at = 0;

	buf[0] = 0;
	for (int i = 0; i < n && i < 20 && at < cap; i++)
		at += (size_t)snprintf(buf + at, cap - at, "%s%d", i ? ", " : "", page[i]);
	if (n > 20 && at < cap)
		snprintf(buf + at, cap - at, " and %d more", n - 20);
}

void app_extract_describe(const char *path, const struct extract_doc *x, char *buf, size_t cap)
{
	char pages[256];
	size_t at = 0;

	if (x->n_page)
		at += (size_t)snprintf(buf, cap, "%s: PDF, %d page%s", path, x->n_page, x->n_page == 1 ? "" : "s");
	else
		at += (size_t)snprintf(buf, cap, "%s: %s%s", path, x->encoding,
				       x->bom ? " with a byte order mark" : "");
	if (!x->n_page && strcmp(x->encoding, "UTF-8") && at < cap)
		at += (size_t)snprintf(buf + at, cap - at, "%s", strncmp(x->encoding, "UTF-16", 6)
				       ? " (detected: the bytes are not UTF-8), converted" : ", converted");
	if (x->n_replaced && at < cap)
		at += (size_t)snprintf(buf + at, cap - at, "; %zu invalid %s replaced by U+FFFD", x->n_replaced,
				       x->n_page ? "bytes" : strncmp(x->encoding, "UTF-16", 6) ? "bytes" : "code units");
	if (x->n_no_text && at < cap) {
		page_list(x->no_text, x->n_no_text, pages, sizeof pages);
		at += (size_t)snprintf(buf + at, cap - at, "; %d without a text layer (%d with images: "
				       "scans need OCR): page%s %s", x->n_no_text, x->n_image_only,
				       x->n_no_text == 1 ? "" : "s", pages);
	}
	if (x->n_page && at < cap)
		snprintf(buf + at, cap - at, "; %d repeated header/footer line%s removed, %d hyphenated "
			 "word%s joined, %d ligature%s as letters", x->n_header_lines,
			 x->n_header_lines == 1 ? "" : "s", x->n_hyphen_joins, x->n_hyphen_joins == 1 ? "" : "s",
			 x->n_ligatures, x->n_ligatures == 1 ? "" : "s");
}

int app_ask_password(void *ud, const char *path, int wrong, char *buf, size_t cap)
{
	struct termios old, quiet;
	int ok;

	(void)ud;
	if (!isatty(0) || tcgetattr(0, &old))
		return -1;
	app_errorf("%s%s is encrypted: password: ", wrong ? "wrong password. " : "", path);
	quiet = old;
	quiet.c_lflag &= ~(tcflag_t)ECHO;
	tcsetattr(0, TCSAFLUSH, &quiet);
	ok = fgets(buf, (int)cap, stdin) != NULL;
	tcsetattr(0, TCSAFLUSH, &old);
	fputc('\n', stderr);
	if (!ok)
		return -1;
	buf[strcspn(buf, "\r\n")] = 0;
	return 0;
}
