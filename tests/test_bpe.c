/* test_bpe.c - byte-level BPE tokenizers against Hugging Face tokenizers.
 *
 * Goldens: tests/golden/bpe.json (tools/gen_bpe_goldens.py: the ids of the
 * same strings from `tokenizers` built from the same vocabulary and merges)
 * over the vocabulary-only GGUFs of tests/data/bpe/: SmolLM2 and Qwen2 (the
 * llama-bpe and gpt2 pre-tokenizers run on them with tokenizer.ggml.pre
 * rewritten in memory) and a made-up one where llama-bpe's digit groups and
 * ignore_merges matter. Plus round trips, the rest of tokenizer.h, special
 * token text, and malformed vocabularies made by editing one key of a real
 * one (tests/gguf_writer.c). Paths are relative to the repository root.
 */
#include "tests/test.h"
#include "tests/gguf_writer.h"

#include "engine/base/err.h"
#include "engine/base/utf8.h"
#include "engine/gguf/gguf.h"
#include "engine/tok/tokenizer.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GOLDEN "tests/golden/bpe.json"
#define VOCAB_QWEN2 "tests/data/bpe/qwen2-vocab.gguf"
#define VOCAB_SMOLLM "tests/data/bpe/smollm2-vocab.gguf"
#define EDITED_NAME "edited.gguf"

/* ---- GGUF editing ------------------------------------------------------- */

/* Writes one key/value (or nothing) in place of the edited key. */
typedef void (*kv_put_fn)(struct gw_buf *b, const struct gguf *src, const void *ud);

static void put_kv_raw(struct gw_buf *b, const struct gguf_kv *kv)
{
	gw_u64(b, kv->key.len);
	gw_bytes(b, kv->key.ptr, (size_t)kv->key.len);
	gw_u32(b, kv->type);
	if (kv->type == GGUF_ARRAY) {
		gw_u32(b, kv->arr_type);
		gw_u64(b, kv->arr_n);
	}
	gw_bytes(b, kv->data, (size_t)kv->nbytes);
}

static int key_is(const struct gguf_kv *kv, const char *key)
{
	return kv->key.len == strlen(key) && !memcmp(kv->key.ptr, key, (size_t)kv->key.len);
}

static int dropped(const struct gguf_kv *kv, const char *const *drop)
{
	for (; *drop; drop++)
		if (key_is(kv, *drop))
			return 1;
	return 0;
}

/* A copy of the vocabulary-only src without the keys of drop (NULL-ended)
 * and with put's key/value (when put is not NULL) appended, opened from
 * memory as EDITED_NAME. The caller frees b->p after closing *out. */
static int edit_open(struct gw_buf *b, const struct gguf *src, const char *const *drop,
		     kv_put_fn put, const void *ud, struct gguf **out, char *err, size_t errlen)
{
	uint64_t n = src->n_kv + (put ? 1 : 0);

	for (uint64_t i = 0; i < src->n_kv; i++)
		n -= (uint64_t)dropped(&src->kv[i], drop);
	gw_header(b, 3, 0, n);
	for (uint64_t i = 0; i < src->n_kv; i++)
		if (!dropped(&src->kv[i], drop))
			put_kv_raw(b, &src->kv[i]);
	if (put)
		put(b, src, ud);
	if (b->oom)
		return sekv_errf(err, errlen, SEKV_ENOMEM, "edit: out of memory");
	return gguf_open_buffer(out, b->p, b->n, EDITED_NAME, err, errlen);
}

/* Opens the tokenizer of src with key replaced (or dropped); returns
 * tok_open_gguf's code and its message in err. */
static int edit_open_tok(struct test_ctx *t, const struct gguf *src, const char *key,
			 kv_put_fn put, const void *ud, struct tok **tk, char *err, size_t errlen)
{
	const char *const drop[] = {key, NULL};
	struct gw_buf b = {0};
	struct gguf *g = NULL;
	int rc = edit_open(&b, src, drop, put, ud, &g, err, errlen);

	*tk = NULL;
	if (rc) {
		T_FAIL(t, "edited GGUF (%s) does not open: %s", key, err);
		free(b.p);
		return SEKV_EINVAL;
	}
	rc = tok_open_gguf(tk, g, err, errlen);
	gguf_close(g);
	free(b.p);
	return rc;
}

static void put_str(struct gw_buf *b, const char *key, const char *s)
{
	gw_kv_str(b, key, s);
}

static void put_pre(struct gw_buf *b, const struct gguf *src, const void *ud)
{
	(void)src;
	put_str(b, "tokenizer.ggml.pre", ud);
}

static struct gguf *open_file(struct test_ctx *t, const char *path)
{
	struct gguf *g = NULL;
	char err[512] = "";

	if (gguf_open(&g, path, err, sizeof err))
		T_FAIL(t, "gguf_open: %s", err);
	return g;
}

/* The tokenizer of the vocabulary at path, with tokenizer.ggml.pre set to
 * pre when pre is not NULL. NULL (and a failure) when it does not open. */
static struct tok *open_vocab(struct test_ctx *t, const char *path, const char *pre)
{
	struct gguf *g = open_file(t, path);
	struct tok *tk = NULL;
	char err[512] = "";
	int rc;

	if (!g)
		return NULL;
	if (pre)
		rc = edit_open_tok(t, g, "tokenizer.ggml.pre", put_pre, pre, &tk, err, sizeof err);
	else
		rc = tok_open_gguf(&tk, g, err, sizeof err);
	gguf_close(g);
	if (rc && !t->failed)
		T_FAIL(t, "tok_open_gguf %s (pre %s): %s", path, pre ? pre : "as stored", err);
	return rc ? NULL : tk;
}

/* ---- goldens ------------------------------------------------------------ */

/* One golden string: raw bytes (malloc'ed) and what HF decodes its ids to. */
struct gcase {
	const char *name;
	char *raw, *want;  /* owned */
	size_t n_raw, n_want;
};

/* Bytes of a case object's "text" or "hex" into a malloc'ed buffer. */
static char *case_bytes(const cJSON *c, size_t *n)
{
	const cJSON *text = cJSON_GetObjectItemCaseSensitive(c, "text");
	const cJSON *hex = cJSON_GetObjectItemCaseSensitive(c, "hex");
	char *out;

	if (cJSON_IsString(text)) {
		*n = strlen(text->valuestring);
		out = malloc(*n + 1);
		if (out)
			memcpy(out, text->valuestring, *n + 1);
		return out;
	}
	if (!cJSON_IsString(hex) || strlen(hex->valuestring) % 2)
		return NULL;
	*n = strlen(hex->valuestring) / 2;
	if (!(out = malloc(*n + 1)))
		return NULL;
	for (size_t i = 0; i < *n; i++) {
		unsigned v;
		if (sscanf(hex->valuestring + 2 * i, "%2x", &v) != 1) {
			free(out);
			return NULL;
		}
		out[i] = (char)v;
	}
	return out;
}

static void free_cases(struct gcase *c, int n)
{
	for (int i = 0; c && i < n; i++) {
		free(c[i].raw);
		free(c[i].want);
	}
	free(c);
}

/* The cases of configuration cfg (its own "cases", else the golden's),
 * at least min_n, with the text Hugging Face decodes their ids to
 * ("decoded" by index, else the raw text). NULL after a failure. */
static struct gcase *load_cases(struct test_ctx *t, const cJSON *root, const cJSON *cfg,
				int min_n, int *n)
{
	const cJSON *cases = cJSON_GetObjectItemCaseSensitive(cfg, "cases");
	const cJSON *dec = cJSON_GetObjectItemCaseSensitive(cfg, "decoded"), *c;
	struct gcase *out;
	int i = 0;

	if (!cases)
		cases = cJSON_GetObjectItemCaseSensitive(root, "cases");
	*n = cJSON_GetArraySize(cases);
	if (!cJSON_IsArray(cases) || *n < min_n || !(out = calloc((size_t)*n, sizeof *out))) {
		T_FAIL(t, "%s: fewer than %d cases", GOLDEN, min_n);
		return NULL;
	}
	cJSON_ArrayForEach(c, cases) {
		char key[16];
		const cJSON *d, *name = cJSON_GetObjectItemCaseSensitive(c, "name");
		snprintf(key, sizeof key, "%d", i);
		d = cJSON_GetObjectItemCaseSensitive(dec, key);
		out[i].name = cJSON_IsString(name) ? name->valuestring : "?";
		out[i].raw = case_bytes(c, &out[i].n_raw);
		out[i].want = case_bytes(d ? d : c, &out[i].n_want);
		if (!out[i].raw || !out[i].want) {
			T_FAIL(t, "%s: case %d: no text or hex", GOLDEN, i);
			free_cases(out, *n);
			return NULL;
		}
		i++;
	}
	return out;
}

static const cJSON *find_config(struct test_ctx *t, const cJSON *root, const char *name)
{
	const cJSON *c, *cfgs = cJSON_GetObjectItemCaseSensitive(root, "configs");

	cJSON_ArrayForEach(c, cfgs) {
		const cJSON *n = cJSON_GetObjectItemCaseSensitive(c, "name");
		if (cJSON_IsString(n) && !strcmp(n->valuestring, name))
			return c;
	}
	T_FAIL(t, "%s: no configuration %s", GOLDEN, name);
	return NULL;
}

/* Encodes raw[0..n) into a malloc'ed array; *n_ids its length. NULL (and
 * a failure) on error. */
static int32_t *encode_dup(struct test_ctx *t, const struct tok *tk, const char *raw, size_t n,
			   int *n_ids)
{
	char err[256] = "";
	int k = tok_encode(tk, raw, n, 0, NULL, 0, err, sizeof err);
	int32_t *ids = k >= 0 ? malloc(((size_t)k + 1) * sizeof *ids) : NULL;

	if (!ids) {
		T_FAIL(t, "encode of %zu bytes: %d %s", n, k, err);
		return NULL;
	}
	if (tok_encode(tk, raw, n, 0, ids, k, err, sizeof err) != k) {
		T_FAIL(t, "second encode of %zu bytes disagrees: %s", n, err);
		free(ids);
		return NULL;
	}
	*n_ids = k;
	return ids;
}

/* Every case (at least min_n) of configuration name: our ids == the
 * golden's. The vocabulary is opened with tokenizer.ggml.pre rewritten to
 * the configuration's pre-tokenizer when rewrite is set. */
static void check_config(struct test_ctx *t, const char *name, const char *want_pre, int rewrite,
			 int min_n)
{
	cJSON *root = test_json_load(t, GOLDEN);
	const cJSON *cfg, *ids, *row, *vocab, *pre;
	struct gcase *cases = NULL;
	struct tok *tk = NULL;
	int n_case = 0, i = 0;

	if (!root)
		return;
	if (!(cfg = find_config(t, root, name)))
		goto out;
	ids = cJSON_GetObjectItemCaseSensitive(cfg, "ids");
	vocab = cJSON_GetObjectItemCaseSensitive(cfg, "vocab");
	pre = cJSON_GetObjectItemCaseSensitive(cfg, "pre");
	if (!cJSON_IsString(vocab) || !cJSON_IsString(pre) || strcmp(pre->valuestring, want_pre)) {
		T_FAIL(t, "%s: %s: no vocabulary or not pre-tokenizer %s", GOLDEN, name, want_pre);
		goto out;
	}
	if (!(cases = load_cases(t, root, cfg, min_n, &n_case)))
		goto out;
	if (cJSON_GetArraySize(ids) != n_case) {
		T_FAIL(t, "%s: %s: %d id lists for %d cases", GOLDEN, name, cJSON_GetArraySize(ids), n_case);
		goto out;
	}
	if (!(tk = open_vocab(t, vocab->valuestring, rewrite ? want_pre : NULL)))
		goto out;
	cJSON_ArrayForEach(row, ids) {
		const struct gcase *c = &cases[i];
		int n = 0, n_want = cJSON_GetArraySize(row), j = 0;
		int32_t *got = encode_dup(t, tk, c->raw, c->n_raw, &n);
		const cJSON *id;

		if (!got)
			goto out;
		cJSON_ArrayForEach(id, row) {
			if (j >= n || got[j] != (int32_t)id->valuedouble)
				break;
			j++;
		}
		if (j != n_want || n != n_want) {
			T_FAIL(t, "%s case %d (%s, %zu bytes): %d ids, want %d; first difference at %d: "
			       "got %d want %d", name, i, c->name, c->n_raw, n, n_want, j,
			       j < n ? got[j] : -1,
			       j < n_want ? (int)cJSON_GetArrayItem(row, j)->valuedouble : -1);
			free(got);
			goto out;
		}
		free(got);
		i++;
	}
out:
	tok_close(tk);
	free_cases(cases, n_case);
	cJSON_Delete(root);
}

static void test_qwen2_ids_vs_golden(struct test_ctx *t)
{
	check_config(t, "qwen2", "qwen2", 0, 200);
}

static void test_smollm_ids_vs_golden(struct test_ctx *t)
{
	check_config(t, "smollm", "smollm", 0, 200);
}

/* Llama 3's expression (and ignore_merges) on the Qwen2 vocabulary:
 * the same ids as qwen2 there, which has no digit merges and no token
 * that merges cannot reach; the tiny vocabulary tells them apart. */
static void test_llama_bpe_ids_vs_golden(struct test_ctx *t)
{
	check_config(t, "llama_bpe", "llama-bpe", 1, 200);
}

/* GPT-2's expression on the SmolLM2 vocabulary. */
static void test_gpt2_ids_vs_golden(struct test_ctx *t)
{
	check_config(t, "gpt2", "gpt2", 1, 200);
}

/* Digit groups of up to three and whole-word tokens (ignore_merges) on a
 * made-up vocabulary with digit merges and tokens no merge reaches. */
static void test_tiny_llama_bpe_ids_vs_golden(struct test_ctx *t)
{
	check_config(t, "tiny_llama_bpe", "llama-bpe", 0, 30);
}

/* The same vocabulary and strings with Qwen2's single digits and merges. */
static void test_tiny_qwen2_ids_vs_golden(struct test_ctx *t)
{
	check_config(t, "tiny_qwen2", "qwen2", 1, 30);
}

/* For each vocabulary: decode(golden ids) == what Hugging Face decodes them
 * to, and decode(encode(s)) == the same (s itself when s is valid UTF-8
 * whose every byte has a token). */
static void test_roundtrip_decode(struct test_ctx *t)
{
	static const char *const cfg_names[] = {"qwen2", "smollm"};
	cJSON *root = test_json_load(t, GOLDEN);

	if (!root)
		return;
	for (size_t k = 0; k < 2 && !t->failed; k++) {
		const cJSON *cfg = find_config(t, root, cfg_names[k]), *row;
		const cJSON *vocab = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "vocab") : NULL;
		struct gcase *cases = NULL;
		struct tok *tk = NULL;
		int n_case = 0, i = 0, n_same = 0;

		if (!cJSON_IsString(vocab) || !(cases = load_cases(t, root, cfg, 200, &n_case)) ||
		    !(tk = open_vocab(t, vocab->valuestring, NULL))) {
			free_cases(cases, n_case);
			break;
		}
		cJSON_ArrayForEach(row, cJSON_GetObjectItemCaseSensitive(cfg, "ids")) {
			const struct gcase *c = &cases[i];
			int32_t *gold = malloc(((size_t)cJSON_GetArraySize(row) + 1) * sizeof *gold), *ids;
			const cJSON *id;
			int n_gold = 0, n = 0;

			if (!gold) {
				T_FAIL(t, "out of memory");
				break;
			}
			cJSON_ArrayForEach(id, row)
				gold[n_gold++] = (int32_t)id->valuedouble;
			for (int pass = 0; pass < 2 && !t->failed; pass++) {
				ids = pass ? encode_dup(t, tk, c->raw, c->n_raw, &n) : gold;
				n = pass ? n : n_gold;
				char *back = ids ? tok_decode_dup(tk, ids, n) : NULL;
				if (!back || strlen(back) > c->n_want ||
				    memcmp(back, c->want, c->n_want) || back[c->n_want])
					T_FAIL(t, "%s case %d (%s): %s does not decode to Hugging Face's text",
					       cfg_names[k], i, c->name, pass ? "encode" : "the golden ids");
				free(back);
				if (pass)
					free(ids);
			}
			n_same += c->n_want == c->n_raw && !memcmp(c->want, c->raw, c->n_raw);
			free(gold);
			i++;
			if (t->failed)
				break;
		}
		/* all but the malformed and the left-out-byte strings come back as they were */
		if (!t->failed && n_same < n_case - 60)
			T_FAIL(t, "%s: only %d of %d strings decode to themselves", cfg_names[k], n_same, n_case);
		tok_close(tk);
		free_cases(cases, n_case);
	}
	cJSON_Delete(root);
}

/* ---- special tokens ----------------------------------------------------- */

/* 1 when needle occurs in ids[0..n). */
static int has_id(const int32_t *ids, int n, int32_t needle)
{
	for (int i = 0; i < n; i++)
		if (ids[i] == needle)
			return 1;
	return 0;
}

/* Control and user-defined token texts in a document are spelled with
 * ordinary tokens; only tok_special_id / tok_piece_id give their ids. */
static void test_special_text_is_ordinary(struct test_ctx *t)
{
	static const struct {
		const char *vocab, *text;
		int32_t id;      /* the token the text is the piece of */
		int control;     /* type 3 (else user-defined, 4) */
	} cases[] = {
		{VOCAB_QWEN2, "<|im_start|>", 151644, 1},
		{VOCAB_QWEN2, "<|im_end|>", 151645, 1},
		{VOCAB_QWEN2, "<|endoftext|>", 151643, 1},
		{VOCAB_QWEN2, "<tool_call>", 151657, 0},
		{VOCAB_SMOLLM, "<|im_start|>", 1, 1},
		{VOCAB_SMOLLM, "<|endoftext|>", 0, 1},
		{VOCAB_SMOLLM, "<jupyter_code>", 13, 1},
	};
	char buf[64];

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct tok *tk = open_vocab(t, cases[i].vocab, NULL);
		char text[128];
		int32_t *ids;
		int n = 0;

		if (!tk)
			return;
		snprintf(text, sizeof text, "x%s\n%s y", cases[i].text, cases[i].text);
		ids = encode_dup(t, tk, text, strlen(text), &n);
		int ok = ids && n > 4 && !has_id(ids, n, cases[i].id) &&
			 tok_piece_id(tk, cases[i].text) == cases[i].id &&
			 tok_special_id(tk, cases[i].text) == (cases[i].control ? cases[i].id : -1) &&
			 tok_is_control(tk, cases[i].id) == cases[i].control &&
			 tok_token_text(tk, cases[i].id, buf, sizeof buf) ==
			 (cases[i].control ? 0 : (int)strlen(cases[i].text));
		for (int j = 0; ok && j < n; j++)
			ok = !tok_is_control(tk, ids[j]);
		free(ids);
		tok_close(tk);
		T_CHECKF(t, ok, "%s in %s: matched as a token, or its ids/text are wrong", cases[i].text,
			 cases[i].vocab);
	}
}

/* Malformed UTF-8 encodes as its utf8_repair'ed text in both kinds (for
 * SentencePiece: its own rule is utf8_repair's, one U+FFFD per byte). */
static void test_malformed_utf8_as_repaired(struct test_ctx *t)
{
	static const char *const bad[] = {
		"\xe2\x82", "\xc0\xaf", "a\xf0\x9f\x98" "b", "\xed\xa0\x80", "\xf4\x90\x80\x80",
		"x\xffy", "\xe0\x80\xaf", "caf\xe9 au lait", "\xf0\x9f\x98\x80\xf0\x9f", "\x80\x80 \xc3",
	};
	struct tok *tks[3] = {NULL, NULL, NULL};
	char err[512] = "", fixed[64];

	T_CHECKF(t, tok_open_file(&tks[0], "tests/data/tokenizer/llama2-tokenizer.model", err,
				  sizeof err) == 0, "%s", err);
	tks[1] = open_vocab(t, VOCAB_QWEN2, NULL);
	tks[2] = tks[1] ? open_vocab(t, VOCAB_SMOLLM, NULL) : NULL;
	for (int k = 0; k < 3 && tks[2] && !t->failed; k++)
		for (size_t i = 0; i < sizeof bad / sizeof bad[0] && !t->failed; i++) {
			size_t n_bad = 0, n = utf8_repair(bad[i], strlen(bad[i]), fixed, &n_bad);
			int na = 0, nb = 0;
			int32_t *a = encode_dup(t, tks[k], bad[i], strlen(bad[i]), &na);
			int32_t *b = a ? encode_dup(t, tks[k], fixed, n, &nb) : NULL;
			if (b && (n_bad == 0 || na != nb || memcmp(a, b, (size_t)na * sizeof *a)))
				T_FAIL(t, "tokenizer %d, string %zu: not encoded as its repair", k, i);
			free(a);
			free(b);
		}
	for (int k = 0; k < 3; k++)
		tok_close(tks[k]);
}

/* ---- refusals ----------------------------------------------------------- */

static void test_unknown_pre_refused(struct test_ctx *t)
{
	static const char *const bad[] = {"tekken", "", "llama-bpe ", "QWEN2", "default"};
	struct gguf *g = open_file(t, VOCAB_SMOLLM);
	struct tok *tk = NULL;
	char err[512] = "";
	int rc;

	if (!g)
		return;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		rc = edit_open_tok(t, g, "tokenizer.ggml.pre", put_pre, bad[i], &tk, err, sizeof err);
		if (t->failed)
			break;
		if (rc != SEKV_EUNSUP || tk || !strstr(err, EDITED_NAME) ||
		    (bad[i][0] && !strstr(err, bad[i]))) {
			T_FAIL(t, "pre \"%s\": got %d \"%s\", want SEKV_EUNSUP naming it", bad[i], rc, err);
			tok_close(tk);
			break;
		}
	}
	if (!t->failed) {
		rc = edit_open_tok(t, g, "tokenizer.ggml.pre", NULL, NULL, &tk, err, sizeof err);
		if (!t->failed && (rc != SEKV_EUNSUP || !strstr(err, "tokenizer.ggml.pre"))) {
			T_FAIL(t, "no pre: got %d \"%s\", want SEKV_EUNSUP", rc, err);
			tok_close(tk);
		}
	}
	gguf_close(g);
}

static void put_merges(struct gw_buf *b, const struct gguf *src, const void *ud)
{
	const char *const *m = ud;
	uint64_t n = 0;

	(void)src;
	while (m[n])
		n++;
	gw_arr_head(b, "tokenizer.ggml.merges", GGUF_STRING, n);
	for (uint64_t i = 0; i < n; i++)
		gw_str(b, m[i]);
}

static void put_u32_array(struct gw_buf *b, const char *key, uint64_t n, uint32_t v)
{
	gw_arr_head(b, key, GGUF_U32, n);
	for (uint64_t i = 0; i < n; i++)
		gw_u32(b, v);
}

static void put_merges_u32(struct gw_buf *b, const struct gguf *src, const void *ud)
{
	(void)src;
	(void)ud;
	put_u32_array(b, "tokenizer.ggml.merges", 3, 1);
}

static void put_tokens_u32(struct gw_buf *b, const struct gguf *src, const void *ud)
{
	(void)ud;
	put_u32_array(b, "tokenizer.ggml.tokens", gguf_find_kv(src, "tokenizer.ggml.tokens")->arr_n, 1);
}

/* token_type with *ud elements less than the tokens (or type 7 at [40]
 * when ud is NULL). */
static void put_types(struct gw_buf *b, const struct gguf *src, const void *ud)
{
	uint64_t n = gguf_find_kv(src, "tokenizer.ggml.tokens")->arr_n - (ud ? *(const int *)ud : 0);

	gw_arr_head(b, "tokenizer.ggml.token_type", GGUF_I32, n);
	for (uint64_t i = 0; i < n; i++)
		gw_u32(b, !ud && i == 40 ? 7 : 1);
}

static void put_types_str(struct gw_buf *b, const struct gguf *src, const void *ud)
{
	uint64_t n = gguf_find_kv(src, "tokenizer.ggml.tokens")->arr_n;

	(void)ud;
	gw_arr_head(b, "tokenizer.ggml.token_type", GGUF_STRING, n);
	for (uint64_t i = 0; i < n; i++)
		gw_str(b, "1");
}

/* The tokens with piece 40 emptied. */
static void put_tokens_empty(struct gw_buf *b, const struct gguf *src, const void *ud)
{
	const struct gguf_kv *kt = gguf_find_kv(src, "tokenizer.ggml.tokens");
	struct gguf_str s;

	(void)ud;
	gw_arr_head(b, "tokenizer.ggml.tokens", GGUF_STRING, kt->arr_n);
	for (uint64_t i = 0; i < kt->arr_n; i++) {
		gguf_arr_str(src, kt, i, &s);
		gw_u64(b, i == 40 ? 0 : s.len);
		gw_bytes(b, s.ptr, i == 40 ? 0 : (size_t)s.len);
	}
}

static void put_bos_range(struct gw_buf *b, const struct gguf *src, const void *ud)
{
	(void)ud;
	gw_kv_u32(b, "tokenizer.ggml.bos_token_id",
		  (uint32_t)gguf_find_kv(src, "tokenizer.ggml.tokens")->arr_n);
}

/* A string value under the key named by ud. */
static void put_key_str(struct gw_buf *b, const struct gguf *src, const void *ud)
{
	(void)src;
	put_str(b, ud, "1");
}

static void put_pre_u32(struct gw_buf *b, const struct gguf *src, const void *ud)
{
	(void)src;
	(void)ud;
	gw_kv_u32(b, "tokenizer.ggml.pre", 2);
}

static void put_model_bert(struct gw_buf *b, const struct gguf *src, const void *ud)
{
	(void)src;
	(void)ud;
	put_str(b, "tokenizer.ggml.model", "bert");
}

static void test_malformed_vocab_refused(struct test_ctx *t)
{
	static const char *const no_space[] = {"\xc4\xa0t", NULL};
	static const char *const two_spaces[] = {"\xc4\xa0 t", "a  b", NULL};
	static const char *const lead_space[] = {" a", NULL};
	static const char *const bad_left[] = {"zzqqxx t", NULL};
	static const char *const bad_right[] = {"\xc4\xa0 zzqqxx", NULL};
	static const char *const bad_merged[] = {"\xc4\xa0 <|endoftext|>", NULL};
	static const int one = 1;
	static const struct {
		const char *what, *key;
		kv_put_fn put;
		const void *ud;
		int want;
		const char *msg;  /* a part of the message */
	} cases[] = {
		{"merge without a space", "tokenizer.ggml.merges", put_merges, no_space, SEKV_EFORMAT, "merges[0]"},
		{"merge with two spaces", "tokenizer.ggml.merges", put_merges, two_spaces, SEKV_EFORMAT, "merges[1]"},
		{"merge with an empty left piece", "tokenizer.ggml.merges", put_merges, lead_space, SEKV_EFORMAT, "merges[0]"},
		{"merge of an unknown left piece", "tokenizer.ggml.merges", put_merges, bad_left, SEKV_EFORMAT, "left piece"},
		{"merge of an unknown right piece", "tokenizer.ggml.merges", put_merges, bad_right, SEKV_EFORMAT, "right piece"},
		{"merge into an unknown piece", "tokenizer.ggml.merges", put_merges, bad_merged, SEKV_EFORMAT, "merged piece"},
		{"merges of integers", "tokenizer.ggml.merges", put_merges_u32, NULL, SEKV_EFORMAT, "tokenizer.ggml.merges"},
		{"no merges", "tokenizer.ggml.merges", NULL, NULL, SEKV_EFORMAT, "tokenizer.ggml.merges missing"},
		{"tokens of integers", "tokenizer.ggml.tokens", put_tokens_u32, NULL, SEKV_EFORMAT, "tokenizer.ggml.tokens"},
		{"an empty piece", "tokenizer.ggml.tokens", put_tokens_empty, NULL, SEKV_EFORMAT, "tokens[40]"},
		{"no tokens", "tokenizer.ggml.tokens", NULL, NULL, SEKV_ENOTFOUND, "tokenizer.ggml.tokens"},
		{"types short by one", "tokenizer.ggml.token_type", put_types, &one, SEKV_EFORMAT, "token_type"},
		{"type 7", "tokenizer.ggml.token_type", put_types, NULL, SEKV_EFORMAT, "token_type[40]"},
		{"types as strings", "tokenizer.ggml.token_type", put_types_str, NULL, SEKV_EFORMAT, "token_type"},
		{"no types", "tokenizer.ggml.token_type", NULL, NULL, SEKV_EFORMAT, "token_type missing"},
		{"BOS out of range", "tokenizer.ggml.bos_token_id", put_bos_range, NULL, SEKV_EFORMAT, "out of range"},
		{"EOS a string", "tokenizer.ggml.eos_token_id", put_key_str, "tokenizer.ggml.eos_token_id", SEKV_EFORMAT, "eos_token_id"},
		{"add_bos_token a string", "tokenizer.ggml.add_bos_token", put_key_str, "tokenizer.ggml.add_bos_token", SEKV_EFORMAT, "add_bos_token"},
		{"pre an integer", "tokenizer.ggml.pre", put_pre_u32, NULL, SEKV_EFORMAT, "tokenizer.ggml.pre"},
		{"model bert", "tokenizer.ggml.model", put_model_bert, NULL, SEKV_EUNSUP, "bert"},
	};
	struct gguf *g = open_file(t, VOCAB_SMOLLM);
	struct tok *tk = NULL;
	char err[512] = "";
	int rc;

	if (!g)
		return;
	/* the same copy with nothing edited opens, so each refusal below is its edit's doing */
	rc = edit_open_tok(t, g, "no such key", NULL, NULL, &tk, err, sizeof err);
	tok_close(tk);
	if (rc || t->failed) {
		gguf_close(g);
		T_CHECKF(t, rc == 0, "unedited copy: %s", err);
		return;
	}
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		err[0] = '\0';
		rc = edit_open_tok(t, g, cases[i].key, cases[i].put, cases[i].ud, &tk, err, sizeof err);
		if (t->failed)
			break;
		if (rc != cases[i].want || tk || !strstr(err, EDITED_NAME) || !strstr(err, cases[i].msg)) {
			T_FAIL(t, "%s: got %d \"%s\", want %d naming the file and \"%s\"", cases[i].what, rc,
			       err, cases[i].want, cases[i].msg);
			tok_close(tk);
			break;
		}
	}
	gguf_close(g);
}

/* ---- the rest of tokenizer.h --------------------------------------------- */

static void test_tok_api(struct test_ctx *t)
{
	struct tok *q = open_vocab(t, VOCAB_QWEN2, NULL);
	struct tok *s = q ? open_vocab(t, VOCAB_SMOLLM, NULL) : NULL;
	int32_t ids[8] = {0}, all[16];
	char buf[512], err[256] = "";
	int id, n, max = 0;

	if (!s) {
		tok_close(q);
		return;
	}
	T_CHECK(t, tok_n_vocab(q) == 151936 && tok_bos(q) == 151643 && tok_eos(q) == 151645);
	T_CHECK(t, tok_n_vocab(s) == 49152 && tok_bos(s) == 1 && tok_eos(s) == 2);
	T_CHECK(t, tok_add_bos(q) == 0 && tok_add_bos(s) == 0);  /* add_bos_token = false in both */
	/* "\xc4\xa0" is U+0120, the byte character of ' ', "\xc4\x8a" that of '\n' */
	id = tok_piece_id(q, "\xc4\xa0hello");
	T_CHECK(t, id > 0 && !strcmp(tok_piece(q, id), "\xc4\xa0hello"));
	T_CHECK(t, tok_token_text(q, id, buf, sizeof buf) == 6 && !memcmp(buf, " hello", 6));
	T_CHECK(t, tok_token_text(q, id, buf, 5) == SEKV_EINVAL);
	T_CHECK(t, tok_token_text(q, tok_piece_id(q, "\xc4\x8a"), buf, sizeof buf) == 1 && buf[0] == '\n');
	T_CHECK(t, tok_token_text(q, 151665, buf, sizeof buf) == 11 && !memcmp(buf, "[PAD151665]", 11));
	T_CHECK(t, tok_token_text(q, -1, buf, sizeof buf) == SEKV_EINVAL);
	T_CHECK(t, tok_token_text(q, tok_n_vocab(q), buf, sizeof buf) == SEKV_EINVAL);
	T_CHECK(t, tok_piece(q, tok_n_vocab(q)) == NULL && tok_piece(q, -1) == NULL);
	T_CHECK(t, tok_piece_id(q, "no such piece \x01") == -1 && tok_special_id(q, "\xc4\xa0hello") == -1);
	T_CHECK(t, tok_decode_dup(q, (const int32_t[]){id, 151936}, 2) == NULL);
	/* every text fits in tok_max_text_len bytes, and one needs all of them */
	T_CHECK(t, tok_max_text_len(q) > 0 && tok_max_text_len(q) <= (int)sizeof buf);
	for (int i = 0; i < tok_n_vocab(q); i++) {
		n = tok_token_text(q, i, buf, tok_max_text_len(q));
		T_CHECKF(t, n >= 0, "token %d: no text in %d bytes", i, tok_max_text_len(q));
		max = n > max ? n : max;
	}
	T_CHECKF(t, max == tok_max_text_len(q), "longest text %d, tok_max_text_len %d", max,
		 tok_max_text_len(q));

	/* cap and BOS, as for SentencePiece */
	const char *text = "The quick brown fox jumps over the lazy dog";
	n = tok_encode(s, text, strlen(text), 1, all, 16, err, sizeof err);
	T_CHECKF(t, n == 10 && all[0] == 1, "%d %s", n, err);
	T_CHECK(t, tok_encode(s, text, strlen(text), 1, ids, 3, err, sizeof err) == n &&
		   !memcmp(ids, all, 3 * sizeof ids[0]) && ids[3] == 0);
	T_CHECK(t, tok_encode(s, text, strlen(text), 0, NULL, 0, err, sizeof err) == n - 1);
	T_CHECK(t, tok_encode(s, NULL, 0, 0, NULL, 0, err, sizeof err) == 0);
	T_CHECK(t, tok_encode(s, NULL, 3, 0, ids, 8, err, sizeof err) == SEKV_EINVAL);
	tok_close(q);
	tok_close(s);
}

/* Opens src without the keys of drop and with pre set; NULL after a failure. */
static struct tok *open_edited(struct test_ctx *t, const struct gguf *src, const char *const *drop,
			       const char *pre)
{
	struct gw_buf b = {0};
	struct gguf *g = NULL;
	struct tok *tk = NULL;
	char err[512] = "";
	int rc = edit_open(&b, src, drop, put_pre, pre, &g, err, sizeof err);

	if (!rc)
		rc = tok_open_gguf(&tk, g, err, sizeof err);
	gguf_close(g);
	free(b.p);
	if (rc)
		T_FAIL(t, "edited vocabulary: %s", err);
	return tk;
}

/* Without tokenizer.ggml.add_bos_token, llama.cpp's default: llama-bpe
 * adds BOS, qwen2 does not; a vocabulary without BOS never does. */
static void test_add_bos_defaults(struct test_ctx *t)
{
	static const char *const no_flag[] = {"tokenizer.ggml.add_bos_token", "tokenizer.ggml.pre", NULL};
	static const char *const no_bos[] = {"tokenizer.ggml.add_bos_token", "tokenizer.ggml.pre",
					     "tokenizer.ggml.bos_token_id", NULL};
	static const struct {
		const char *const *drop;
		const char *pre;
		int add_bos, bos;
	} cases[] = {
		{no_flag, "llama-bpe", 1, 1}, {no_flag, "qwen2", 0, 1}, {no_bos, "llama-bpe", 0, -1},
	};
	struct gguf *g = open_file(t, VOCAB_SMOLLM);
	int32_t ids[4];
	char err[256];

	if (!g)
		return;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct tok *tk = open_edited(t, g, cases[i].drop, cases[i].pre);
		int ok = tk && tok_add_bos(tk) == cases[i].add_bos && tok_bos(tk) == cases[i].bos &&
			 (cases[i].bos >= 0 ? tok_encode(tk, "a", 1, 1, ids, 4, err, sizeof err) == 2 &&
			  ids[0] == cases[i].bos : tok_encode(tk, "a", 1, 1, ids, 4, err, sizeof err) == SEKV_EINVAL);
		tok_close(tk);
		if (!ok) {
			gguf_close(g);
			T_CHECKF(t, t->failed, "case %zu (%s): add_bos %d bos %d", i, cases[i].pre,
				 cases[i].add_bos, cases[i].bos);
			return;
		}
	}
	gguf_close(g);
}

/* Every name the pre-tokenizer table knows opens; the aliases split as
 * the names they stand for. */
static void test_pre_names_all_open(struct test_ctx *t)
{
	static const char *const pairs[][2] = {
		{"llama-bpe", "llama-bpe"}, {"llama3", "llama-bpe"}, {"llama-v3", "llama-bpe"},
		{"qwen2", "qwen2"}, {"smollm", "smollm"}, {"gpt2", "gpt2"}, {"gpt-2", "gpt2"},
	};
	static const char *const drop[] = {"tokenizer.ggml.pre", NULL};
	const char *text = "Hello  world's 1234567 <|im_start|>\n\n\t x\r\n";
	struct gguf *g = open_file(t, VOCAB_QWEN2);

	if (!g)
		return;
	for (size_t i = 0; i < sizeof pairs / sizeof pairs[0] && !t->failed; i++) {
		struct tok *a = open_edited(t, g, drop, pairs[i][0]);
		struct tok *b = a ? open_edited(t, g, drop, pairs[i][1]) : NULL;
		int na = 0, nb = 0;
		int32_t *ia = b ? encode_dup(t, a, text, strlen(text), &na) : NULL;
		int32_t *ib = ia ? encode_dup(t, b, text, strlen(text), &nb) : NULL;
		if (ib && (na != nb || memcmp(ia, ib, (size_t)na * sizeof *ia)))
			T_FAIL(t, "pre %s splits unlike %s", pairs[i][0], pairs[i][1]);
		free(ia);
		free(ib);
		tok_close(a);
		tok_close(b);
	}
	gguf_close(g);
}

/* A megabyte without a space, and a megabyte of lines, come back whole
 * (the merge heap at scale; speed is measured in bench/, not here). */
static void test_megabyte_round_trip(struct test_ctx *t)
{
	const size_t n = (size_t)1 << 20;
	char *text = malloc(n + 1);
	struct tok *tk = open_vocab(t, VOCAB_QWEN2, NULL);
	unsigned long long x = 88172645463325252ull;

	if (!text || !tk) {
		free(text);
		tok_close(tk);
		T_CHECK(t, t->failed);
		return;
	}
	for (int pass = 0; pass < 2 && !t->failed; pass++) {
		for (size_t i = 0; i < n; i++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			text[i] = pass == 0 ? (char)('a' + x % 26)
				  : (i % 64 == 63 ? '\n' : (char)(" etaoinshrdlu,.0123"[x % 19]));
		}
		text[n] = '\0';
		int m = 0;
		int32_t *ids = encode_dup(t, tk, text, n, &m);
		char *back = ids ? tok_decode_dup(tk, ids, m) : NULL;
		if (ids && (!back || strcmp(back, text) || m < (int)(n / 16)))
			T_FAIL(t, "pass %d: %d ids do not decode to the megabyte", pass, m);
		free(back);
		free(ids);
	}
	free(text);
	tok_close(tk);
}

const struct test_case test_bpe[] = {
	{"bpe_qwen2_ids_vs_golden", test_qwen2_ids_vs_golden},
	{"bpe_smollm_ids_vs_golden", test_smollm_ids_vs_golden},
	{"bpe_llama_bpe_ids_vs_golden", test_llama_bpe_ids_vs_golden},
	{"bpe_gpt2_ids_vs_golden", test_gpt2_ids_vs_golden},
	{"bpe_tiny_llama_bpe_ids_vs_golden", test_tiny_llama_bpe_ids_vs_golden},
	{"bpe_tiny_qwen2_ids_vs_golden", test_tiny_qwen2_ids_vs_golden},
	{"bpe_roundtrip_decode", test_roundtrip_decode},
	{"bpe_special_text_is_ordinary", test_special_text_is_ordinary},
	{"tok_malformed_utf8_as_repaired", test_malformed_utf8_as_repaired},
	{"bpe_unknown_pre_refused", test_unknown_pre_refused},
	{"bpe_malformed_vocab_refused", test_malformed_vocab_refused},
	{"bpe_tok_api", test_tok_api},
	{"bpe_add_bos_defaults", test_add_bos_defaults},
	{"bpe_pre_names_all_open", test_pre_names_all_open},
	{"bpe_megabyte_round_trip", test_megabyte_round_trip},
	{NULL, NULL},
};
