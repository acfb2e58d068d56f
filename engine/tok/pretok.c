/* pretok.c - byte-level BPE pre-tokenizers over PCRE2 (declared in pretok.h).
 *
 * One row per tokenizer.ggml.pre name: llama.cpp's expressions for it,
 * taken as facts from src/llama-vocab.cpp, and its defaults. Each
 * expression is compiled once (JIT when PCRE2 has it) and matched with
 * PCRE2_NO_UTF_CHECK, so that a long text is validated once, not once per
 * match. Invariant: no expression matches the empty string (checked at
 * open), so every match advances. Their backtracking is linear in the run
 * of one character class (\s*[\r\n]+ over a run of spaces), so the match
 * limit is raised from PCRE2's 10 million to its maximum: a 10 MB run of
 * spaces needs about 20 million steps.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "engine/tok/pretok.h"
#include "engine/base/err.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define PRE_MAX_REGEX 2 /* expressions of the longest row */

/* Unicode's White_Space characters, which \s means in llama.cpp's
 * expressions (its Unicode tables, and Hugging Face's Oniguruma, read it
 * so). PCRE2's \s also matches U+180E, white space before Unicode 6.3, so
 * the expressions below spell \s as [WS], \S as [^WS], and a \s inside a
 * class as WS; otherwise they are llama.cpp's, character for character. */
#define WS "\\t\\n\\x0b\\f\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}" \
	"\\x{202f}\\x{205f}\\x{3000}"

/* The contractions of llama.cpp's Llama 3 and Qwen2 expressions, spelled
 * without (?i:) as llama.cpp adapts them. */
#define RE_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
/* | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
#define RE_SPACES "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])" \
	"|[" WS "]+"
#define RE_LLAMA3 RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}" RE_SPACES
#define RE_QWEN2 RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}" RE_SPACES
/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S) */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+" \
	"|[" WS "]+(?![^" WS "])"

static const struct pre_row {
	const char *name;                  /* tokenizer.ggml.pre */
	const char *regex[PRE_MAX_REGEX];  /* applied in order; NULL ends */
	int ignore_merges;                 /* a word that is a token skips the merges */
	int add_bos;                       /* default of tokenizer.ggml.add_bos_token */
} PRE_ROWS[] = {
	{"llama-bpe", {RE_LLAMA3, NULL}, 1, 1},
	{"llama3", {RE_LLAMA3, NULL}, 1, 1},
	{"llama-v3", {RE_LLAMA3, NULL}, 1, 1},
	{"qwen2", {RE_QWEN2, NULL}, 0, 0},
	{"smollm", {"\\p{N}", RE_GPT2}, 0, 0},
	{"gpt2", {RE_GPT2, NULL}, 0, 0},
	{"gpt-2", {RE_GPT2, NULL}, 0, 0},
};

struct tok_pre {
	const struct pre_row *row;
	int n_regex;
	pcre2_code *code[PRE_MAX_REGEX];  /* [n_regex], owned */
	pcre2_match_context *mctx;        /* the match limit; owned, read-only */
};

void tok_pre_close(struct tok_pre *p)
{
	if (!p)
		return;
	for (int i = 0; i < p->n_regex; i++)
		pcre2_code_free(p->code[i]);
	pcre2_match_context_free(p->mctx);
	free(p);
}

/* Compiles one expression of row into p->code[p->n_regex]. */
static int compile_one(struct tok_pre *p, const char *re, char *err, size_t errlen)
{
	PCRE2_UCHAR msg[256];
	PCRE2_SIZE at;
	int code;
	uint32_t min_len = 0;
	pcre2_code *c = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED,
				      PCRE2_UTF | PCRE2_UCP, &code, &at, NULL);

	if (!c) {
		pcre2_get_error_message(code, msg, sizeof msg);
		return sekv_errf(err, errlen, SEKV_EINVAL, "tok_pre_open: %s: expression %d at offset %zu: %s",
				 p->row->name, p->n_regex, (size_t)at, (const char *)msg);
	}
	p->code[p->n_regex++] = c;
	/* without JIT support PCRE2 interprets: same matches, slower */
	pcre2_jit_compile(c, PCRE2_JIT_COMPLETE);
	if (pcre2_pattern_info(c, PCRE2_INFO_MINLENGTH, &min_len) != 0 || min_len == 0)
		return sekv_errf(err, errlen, SEKV_EINVAL,
				 "tok_pre_open: %s: expression %d can match the empty string",
				 p->row->name, p->n_regex - 1);
	return 0;
}

int tok_pre_open(struct tok_pre **out, const char *name, size_t len,
		 char *err, size_t errlen)
{
	const struct pre_row *row = NULL;
	struct tok_pre *p;
	int rc;

	*out = NULL;
	for (size_t i = 0; i < sizeof PRE_ROWS / sizeof PRE_ROWS[0]; i++)
		if (strlen(PRE_ROWS[i].name) == len && !memcmp(PRE_ROWS[i].name, name, len))
			row = &PRE_ROWS[i];
	if (!row)
		return sekv_errf(err, errlen, SEKV_EUNSUP,
				 "tok_pre_open: pre-tokenizer \"%.*s\": unknown (known: llama-bpe, "
				 "qwen2, smollm, gpt2)", (int)(len > 64 ? 64 : len), name);
	if (!(p = calloc(1, sizeof *p)))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "tok_pre_open: %s: out of memory", row->name);
	p->row = row;
	if (!(p->mctx = pcre2_match_context_create(NULL))) {
		tok_pre_close(p);
		return sekv_errf(err, errlen, SEKV_ENOMEM, "tok_pre_open: %s: out of memory", row->name);
	}
	pcre2_set_match_limit(p->mctx, UINT32_MAX);
	for (int i = 0; i < PRE_MAX_REGEX && row->regex[i]; i++)
		if ((rc = compile_one(p, row->regex[i], err, errlen))) {
			tok_pre_close(p);
			return rc;
		}
	*out = p;
	return 0;
}

int tok_pre_ignore_merges(const struct tok_pre *p)
{
	return p->row->ignore_merges;
}

int tok_pre_add_bos(const struct tok_pre *p)
{
	return p->row->add_bos;
}

struct split {
	const struct tok_pre *p;
	pcre2_match_data *md[PRE_MAX_REGEX];  /* one per expression */
	tok_pre_word_fn fn;
	void *ud;
	char *err;
	size_t errlen;
};

/* Splits s[0..n) with expression level and hands each piece to the next
 * level (the caller's fn after the last). Depth is at most PRE_MAX_REGEX. */
static int split_level(struct split *sp, int level, const char *s, size_t n)
{
	size_t gap = 0;
	int rc;

	if (level == sp->p->n_regex)
		return sp->fn(sp->ud, s, n);
	while (gap < n) {
		int m = pcre2_match(sp->p->code[level], (PCRE2_SPTR)s, n, gap,
				    PCRE2_NO_UTF_CHECK, sp->md[level], sp->p->mctx);
		if (m == PCRE2_ERROR_NOMATCH)
			break;
		if (m < 0) {
			PCRE2_UCHAR msg[256];
			pcre2_get_error_message(m, msg, sizeof msg);
			return sekv_errf(sp->err, sp->errlen, m == PCRE2_ERROR_NOMEMORY ? SEKV_ENOMEM : SEKV_EINVAL,
					 "tok_encode: pre-tokenizer %s: %zu bytes: %s",
					 sp->p->row->name, n, (const char *)msg);
		}
		const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(sp->md[level]);
		if (ov[0] > gap && (rc = split_level(sp, level + 1, s + gap, ov[0] - gap)))
			return rc;
		if ((rc = split_level(sp, level + 1, s + ov[0], ov[1] - ov[0])))
			return rc;
		gap = ov[1];
	}
	return gap < n ? split_level(sp, level + 1, s + gap, n - gap) : 0;
}

int tok_pre_split(const struct tok_pre *p, const char *text, size_t len,
		  tok_pre_word_fn fn, void *ud, char *err, size_t errlen)
{
	struct split sp = {.p = p, .fn = fn, .ud = ud, .err = err, .errlen = errlen};
	int rc = 0;

	if (len == 0)
		return 0;
	for (int i = 0; i < p->n_regex; i++)
		if (!(sp.md[i] = pcre2_match_data_create_from_pattern(p->code[i], NULL))) {
			rc = sekv_errf(err, errlen, SEKV_ENOMEM, "tok_encode: pre-tokenizer %s: out of memory",
				       p->row->name);
			goto out;
		}
	rc = split_level(&sp, 0, text, len);
out:
	for (int i = 0; i < p->n_regex; i++)
		pcre2_match_data_free(sp.md[i]);
	return rc;
}
