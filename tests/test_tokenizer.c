/* test_tokenizer.c - the SentencePiece shim against independent ids.
 *
 * Goldens: llama.cpp's SPM vectors (tests/data/tokenizer, through both the
 * GGUF-built model and the original tokenizer.model) and llama.cpp's Gemma 3
 * ids (tests/golden/tokenizer_gemma3.json). Plus round trips, special-token
 * handling, and malformed vocabularies built in memory as GGUF files
 * (tests/gguf_writer.c).
 * Paths are relative to the repository root (where make test runs).
 */
#include "tests/test.h"
#include "tests/gguf_writer.h"

#include "engine/base/err.h"
#include "engine/gguf/gguf.h"
#include "engine/tok/tokenizer.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define GOLDEN_GEMMA "tests/golden/tokenizer_gemma3.json"
#define VOCAB_DIR "tests/data/tokenizer"
#define VOCAB_SEP "\n__ggml_vocab_test__\n"
#define MAX_IDS 4096

/* ---- helpers ------------------------------------------------------------ */

/* Reads a whole file into a malloc'ed NUL-terminated buffer. */
static char *read_all(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t n = 0, cap = 0, got;

	if (!f)
		return NULL;
	for (;;) {
		if (cap - n < 65537) {
			char *nb = realloc(buf, cap = cap * 2 + 65537);
			if (!nb) {
				free(buf);
				fclose(f);
				return NULL;
			}
			buf = nb;
		}
		got = fread(buf + n, 1, cap - n - 1, f);
		n += got;
		if (got == 0)
			break;
	}
	fclose(f);
	buf[n] = '\0';
	if (len)
		*len = n;
	return buf;
}

/* Compares the encoding of text[0..len) with want[0..n_want); on mismatch
 * describes the first difference in msg. Returns 0 when equal. */
static int check_ids(const struct tok *tk, const char *text, size_t len,
		     const int32_t *want, int n_want, char *msg, size_t msglen)
{
	static int32_t got[MAX_IDS];
	char err[256] = "";
	int n = tok_encode(tk, text, len, 0, got, MAX_IDS, err, sizeof err);

	if (n < 0) {
		snprintf(msg, msglen, "encode failed: %s", err);
		return 1;
	}
	if (n > MAX_IDS) {
		snprintf(msg, msglen, "%d ids, more than the test holds", n);
		return 1;
	}
	for (int i = 0; i < n || i < n_want; i++) {
		if (i >= n || i >= n_want || got[i] != want[i]) {
			snprintf(msg, msglen, "%d ids (want %d), first difference at %d: got %d want %d",
				 n, n_want, i, i < n ? got[i] : -1, i < n_want ? want[i] : -1);
			return 1;
		}
	}
	return 0;
}

/* Runs every vector of ggml-vocab-llama-spm.gguf.{inp,out} through tk. */
static void check_llama_vectors(struct test_ctx *t, const struct tok *tk)
{
	char path[1200], msg[200];
	char *inp, *out, *s, *line;
	int n_case = 0, n_line = 0;
	static int32_t want[MAX_IDS];

	snprintf(path, sizeof path, "%s/ggml-vocab-llama-spm.gguf.inp", VOCAB_DIR);
	inp = read_all(path, NULL);
	snprintf(path, sizeof path, "%s/ggml-vocab-llama-spm.gguf.out", VOCAB_DIR);
	out = read_all(path, NULL);
	if (!inp || !out) {
		free(inp);
		free(out);
		T_CHECKF(t, 0, "cannot read %s (run from the repository root)", path);
	}
	for (char *o = out; *o; o++)
		n_line += *o == '\n';

	/* .inp: each string is followed by VOCAB_SEP; .out: one line per
	 * string, ids separated by spaces (an empty line for ""). */
	s = inp;
	line = out;
	for (char *sep; (sep = strstr(s, VOCAB_SEP)); s = sep + strlen(VOCAB_SEP), n_case++) {
		char *eol = strchr(line, '\n');
		int n = 0;

		if (!eol) {
			T_FAIL(t, "case %d: .out has only %d lines", n_case, n_line);
			break;
		}
		*eol = '\0';
		for (char *p = line, *e; n < MAX_IDS; p = e) {
			long v = strtol(p, &e, 10);
			if (e == p)
				break;
			want[n++] = (int32_t)v;
		}
		line = eol + 1;
		if (check_ids(tk, s, (size_t)(sep - s), want, n, msg, sizeof msg)) {
			T_FAIL(t, "case %d \"%.*s\": %s", n_case,
			       (int)(sep - s < 40 ? sep - s : 40), s, msg);
			break;
		}
	}
	free(inp);
	free(out);
	if (t->failed)
		return;
	T_CHECKF(t, n_case == n_line && n_case >= 40, "%d strings, %d expected lines",
		 n_case, n_line);
}

static int open_gguf_tok(struct test_ctx *t, const char *path, struct gguf **g,
			 struct tok **tk)
{
	char err[512] = "";
	int rc = gguf_open(g, path, err, sizeof err);

	if (rc) {
		T_FAIL(t, "gguf_open: %s", err);
		return rc;
	}
	rc = tok_open_gguf(tk, *g, err, sizeof err);
	if (rc) {
		T_FAIL(t, "tok_open_gguf: %s", err);
		gguf_close(*g);
		*g = NULL;
	}
	return rc;
}

/* Opens the default Gemma model's tokenizer; fails when the model is absent
 * (make test always fetches it). */
static struct tok *open_gemma(struct test_ctx *t)
{
	struct gguf *g = NULL;
	struct tok *tk = NULL;
	struct stat st;

	if (stat(test_model_path(), &st) != 0) {
		T_FAIL(t, "model %s absent (make model)", test_model_path());
		return NULL;
	}
	if (open_gguf_tok(t, test_model_path(), &g, &tk))
		return NULL;
	gguf_close(g);  /* the tokenizer outlives the file */
	return tk;
}

/* ---- goldens ------------------------------------------------------------ */

static void test_llama_spm_gguf_vs_vectors(struct test_ctx *t)
{
	char path[1200];
	struct gguf *g = NULL;
	struct tok *tk = NULL;

	snprintf(path, sizeof path, "%s/ggml-vocab-llama-spm.gguf", VOCAB_DIR);
	if (open_gguf_tok(t, path, &g, &tk))
		return;
	gguf_close(g);
	T_CHECK(t, tok_n_vocab(tk) == 32000 && tok_bos(tk) == 1 && tok_eos(tk) == 2);
	check_llama_vectors(t, tk);
	tok_close(tk);
}

static void test_llama_spm_model_file_vs_vectors(struct test_ctx *t)
{
	char path[1200], err[512] = "";
	struct tok *tk = NULL;
	int rc;

	snprintf(path, sizeof path, "%s/llama2-tokenizer.model", VOCAB_DIR);
	rc = tok_open_file(&tk, path, err, sizeof err);
	T_CHECKF(t, rc == 0, "tok_open_file: %s", err);
	T_CHECK(t, tok_n_vocab(tk) == 32000 && tok_bos(tk) == 1 && tok_eos(tk) == 2);
	check_llama_vectors(t, tk);
	tok_close(tk);
}

static void test_gemma3_vs_golden(struct test_ctx *t)
{
	char *json = read_all(GOLDEN_GEMMA, NULL);
	cJSON *root, *cases, *c;
	struct tok *tk;
	int n_case = 0;
	static int32_t want[MAX_IDS];

	T_CHECKF(t, json != NULL, "cannot read %s", GOLDEN_GEMMA);
	root = cJSON_Parse(json);
	free(json);
	T_CHECKF(t, root != NULL, "%s: not JSON", GOLDEN_GEMMA);
	cases = cJSON_GetObjectItemCaseSensitive(root, "cases");
	if (!cJSON_IsArray(cases) || cJSON_GetArraySize(cases) < 20) {
		cJSON_Delete(root);
		T_CHECKF(t, 0, "%s: fewer than 20 cases", GOLDEN_GEMMA);
	}
	tk = open_gemma(t);
	if (!tk) {
		cJSON_Delete(root);
		return;
	}
	cJSON_ArrayForEach(c, cases) {
		cJSON *text = cJSON_GetObjectItemCaseSensitive(c, "text");
		cJSON *ids = cJSON_GetObjectItemCaseSensitive(c, "ids"), *id;
		char msg[200];
		int n = 0;

		if (!cJSON_IsString(text) || !cJSON_IsArray(ids) ||
		    cJSON_GetArraySize(ids) > MAX_IDS) {
			T_FAIL(t, "case %d: no text or ids", n_case);
			break;
		}
		cJSON_ArrayForEach(id, ids)
			want[n++] = (int32_t)id->valuedouble;
		if (check_ids(tk, text->valuestring, strlen(text->valuestring), want, n,
			      msg, sizeof msg)) {
			T_FAIL(t, "case %d \"%.40s\": %s", n_case, text->valuestring, msg);
			break;
		}
		n_case++;
	}
	tok_close(tk);
	cJSON_Delete(root);
}

/* Control pieces in text stay text; user-defined pieces are matched; "</s>"
 * is control as in llama.cpp. Expected ids: llama-cpp-python 0.3.36,
 * tokenize(special=False) on the default model. */
static void test_gemma3_special_pieces_in_text(struct test_ctx *t)
{
	static const int32_t turn[] = {236820, 3041, 236779, 1340, 236779, 887, 236813, 2364};
	static const int32_t eog[] = {236781, 954, 236751, 236813, 236762};
	static const int32_t tags[] = {203, 236781, 200, 15640, 209};
	char msg[200];
	struct tok *tk = open_gemma(t);

	if (!tk)
		return;
	T_CHECK(t, tok_special_id(tk, "<start_of_turn>") == 105);
	T_CHECK(t, tok_special_id(tk, "<end_of_turn>") == 106);
	T_CHECK(t, tok_special_id(tk, "<b>") == -1 && tok_piece_id(tk, "<b>") == 200);
	T_CHECK(t, tok_special_id(tk, "</s>") == 212 && tok_is_control(tk, 212));
	T_CHECK(t, tok_piece_id(tk, "no such piece \x01") == -1);
	T_CHECK(t, tok_bos(tk) == 2 && tok_eos(tk) == 1 && tok_is_control(tk, 2));
	T_CHECKF(t, !check_ids(tk, "<start_of_turn>user", 19, turn, 8, msg, sizeof msg),
		 "<start_of_turn>user: %s", msg);
	T_CHECKF(t, !check_ids(tk, "x</s>y", 6, eog, 5, msg, sizeof msg), "x</s>y: %s", msg);
	T_CHECKF(t, !check_ids(tk, "<s>x<b>bold</b>", 15, tags, 5, msg, sizeof msg),
		 "<s>x<b>bold</b>: %s", msg);
	tok_close(tk);
}

/* ---- round trips and pieces ---------------------------------------------- */

static void round_trip(struct test_ctx *t, const struct tok *tk, const char *name)
{
	static const char *const texts[] = {
		"Hello world", " leading space", "  two leading, trailing  ",
		"line one\nline two\n\n\ttabbed", "日本語と中文 – émigré ∑ 😀🦙",
		"<start_of_turn>user\nliteral</s><unk>", "a", "",
	};
	static int32_t ids[MAX_IDS];
	char err[256] = "";

	for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
		int n = tok_encode(tk, texts[i], strlen(texts[i]), 1, ids, MAX_IDS, err, sizeof err);
		char *back;

		T_CHECKF(t, n >= 1 && n <= MAX_IDS, "%s: encode \"%s\": %d %s", name, texts[i], n, err);
		T_CHECKF(t, ids[0] == tok_bos(tk), "%s: BOS not first", name);
		back = tok_decode_dup(tk, ids, n);
		T_CHECKF(t, back != NULL, "%s: decode failed", name);
		if (strcmp(back, texts[i])) {
			T_FAIL(t, "%s: \"%s\" came back as \"%s\"", name, texts[i], back);
			free(back);
			return;
		}
		free(back);
	}
}

static void test_round_trip(struct test_ctx *t)
{
	char path[1200], err[512] = "";
	struct tok *tk = NULL;

	snprintf(path, sizeof path, "%s/llama2-tokenizer.model", VOCAB_DIR);
	T_CHECKF(t, tok_open_file(&tk, path, err, sizeof err) == 0, "%s", err);
	round_trip(t, tk, "llama");
	tok_close(tk);
	if (t->failed)
		return;
	tk = open_gemma(t);
	if (!tk)
		return;
	round_trip(t, tk, "gemma3");
	tok_close(tk);
}

static void test_token_text_pieces(struct test_ctx *t)
{
	char path[1200], err[512] = "", buf[64];
	struct tok *tk = NULL;
	int id;

	snprintf(path, sizeof path, "%s/llama2-tokenizer.model", VOCAB_DIR);
	T_CHECKF(t, tok_open_file(&tk, path, err, sizeof err) == 0, "%s", err);
	id = tok_piece_id(tk, "\xe2\x96\x81hello");
	T_CHECK(t, id > 0 && !strcmp(tok_piece(tk, id), "\xe2\x96\x81hello"));
	T_CHECK(t, tok_token_text(tk, id, buf, sizeof buf) == 6 && !memcmp(buf, " hello", 6));
	T_CHECK(t, tok_token_text(tk, id, buf, 5) == SEKV_EINVAL);
	T_CHECK(t, tok_token_text(tk, tok_piece_id(tk, "<0x0A>"), buf, sizeof buf) == 1 && buf[0] == '\n');
	T_CHECK(t, tok_token_text(tk, tok_piece_id(tk, "<0xE2>"), buf, sizeof buf) == 1 &&
		   (unsigned char)buf[0] == 0xe2);
	T_CHECK(t, tok_token_text(tk, tok_bos(tk), buf, sizeof buf) == 0);
	T_CHECK(t, tok_token_text(tk, 0, buf, sizeof buf) == 5 && !memcmp(buf, " \xe2\x81\x87 ", 5));
	T_CHECK(t, tok_token_text(tk, -1, buf, sizeof buf) == SEKV_EINVAL);
	T_CHECK(t, tok_token_text(tk, tok_n_vocab(tk), buf, sizeof buf) == SEKV_EINVAL);
	T_CHECK(t, tok_piece(tk, tok_n_vocab(tk)) == NULL);
	T_CHECK(t, tok_max_text_len(tk) >= 6 && tok_max_text_len(tk) < 64);
	T_CHECK(t, tok_special_id(tk, "</s>") == 2 && tok_special_id(tk, "\xe2\x96\x81hello") == -1);
	T_CHECK(t, tok_decode_dup(tk, (const int32_t[]){1, 32000}, 2) == NULL);
	tok_close(tk);
}

static void test_encode_cap_and_bos(struct test_ctx *t)
{
	char path[1200], err[512] = "";
	struct tok *tk = NULL;
	int32_t ids[8] = {0}, all[64];
	const char *s = "The quick brown fox jumps over the lazy dog";
	int n, m;

	snprintf(path, sizeof path, "%s/llama2-tokenizer.model", VOCAB_DIR);
	T_CHECKF(t, tok_open_file(&tk, path, err, sizeof err) == 0, "%s", err);
	n = tok_encode(tk, s, strlen(s), 1, all, 64, err, sizeof err);
	T_CHECKF(t, n > 8 && n <= 64, "%d %s", n, err);
	m = tok_encode(tk, s, strlen(s), 1, ids, 3, err, sizeof err);
	T_CHECK(t, m == n && ids[0] == 1 && !memcmp(ids, all, 3 * sizeof ids[0]) && ids[3] == 0);
	T_CHECK(t, tok_encode(tk, s, strlen(s), 0, NULL, 0, err, sizeof err) == n - 1);
	T_CHECK(t, tok_encode(tk, NULL, 0, 0, NULL, 0, err, sizeof err) == 0);
	T_CHECK(t, tok_encode(tk, NULL, 3, 0, ids, 8, err, sizeof err) == SEKV_EINVAL);
	tok_close(tk);
}

/* ---- malformed vocabularies ---------------------------------------------- */

/* What to break in the tiny vocabulary. */
enum vocab_fault {
	FAULT_NONE, FAULT_SHORT_SCORES, FAULT_SHORT_TYPES, FAULT_BAD_TYPE,
	FAULT_UNK_RANGE, FAULT_NO_TOKENS, FAULT_BERT, FAULT_EMPTY_PIECE, FAULT_TWO_UNK,
};

/* <unk> <s> </s> ▁a a b ▁: a Llama-like vocabulary without byte pieces. */
static void tiny_vocab(struct gw_buf *b, enum vocab_fault fault)
{
	static const char *const piece[] = {
		"<unk>", "<s>", "</s>", "\xe2\x96\x81" "a", "a", "b", "\xe2\x96\x81",
	};
	static const float score[] = {0, 0, 0, -1, -2, -3, -4};
	int32_t type[] = {2, 3, 3, 1, 1, 1, 1};
	uint64_t n = 7;

	gw_header(b, 3, 0, fault == FAULT_NO_TOKENS ? 6 : 7);
	gw_kv_str(b, "tokenizer.ggml.model", fault == FAULT_BERT ? "bert" : "llama");
	if (fault != FAULT_NO_TOKENS) {
		gw_arr_head(b, "tokenizer.ggml.tokens", GGUF_STRING, n);
		for (uint64_t i = 0; i < n; i++)
			gw_str(b, fault == FAULT_EMPTY_PIECE && i == 5 ? "" : piece[i]);
	}
	gw_arr_head(b, "tokenizer.ggml.scores", GGUF_F32, fault == FAULT_SHORT_SCORES ? n - 1 : n);
	for (uint64_t i = 0; i < (fault == FAULT_SHORT_SCORES ? n - 1 : n); i++)
		gw_bytes(b, &score[i], 4);
	if (fault == FAULT_BAD_TYPE)
		type[4] = 7;
	if (fault == FAULT_TWO_UNK)
		type[5] = 2;
	gw_arr_head(b, "tokenizer.ggml.token_type", GGUF_I32,
		    fault == FAULT_SHORT_TYPES ? n + 1 : n);
	gw_bytes(b, type, sizeof type);
	if (fault == FAULT_SHORT_TYPES)
		gw_u32(b, 1);
	gw_kv_u32(b, "tokenizer.ggml.bos_token_id", 1);
	gw_kv_u32(b, "tokenizer.ggml.eos_token_id", 2);
	gw_kv_u32(b, "tokenizer.ggml.unknown_token_id", fault == FAULT_UNK_RANGE ? 7 : 0);
}

/* Opens the tiny vocabulary with one fault; returns tok_open_gguf's code. */
static int open_tiny(struct test_ctx *t, enum vocab_fault fault, struct tok **tk)
{
	struct gw_buf b = {0};
	struct gguf *g = NULL;
	char err[512] = "";
	int rc;

	tiny_vocab(&b, fault);
	if (b.oom) {
		free(b.p);
		T_FAIL(t, "tiny vocabulary: writer out of memory");
		return SEKV_EINVAL;
	}
	rc = gguf_open_buffer(&g, b.p, b.n, "tiny.gguf", err, sizeof err);
	if (rc) {
		free(b.p);
		T_FAIL(t, "gguf_open_buffer (fault %d): %s", fault, err);
		return rc;
	}
	*tk = NULL;
	rc = tok_open_gguf(tk, g, err, sizeof err);
	gguf_close(g);
	free(b.p);
	if (rc && (!err[0] || !strstr(err, "tiny.gguf"))) {
		T_FAIL(t, "fault %d: message \"%s\" does not name the file", fault, err);
		tok_close(*tk);
		return SEKV_EINVAL;
	}
	return rc;
}

static void test_malformed_vocab(struct test_ctx *t)
{
	static const struct {
		enum vocab_fault fault;
		int want;
	} cases[] = {
		{FAULT_SHORT_SCORES, SEKV_EFORMAT}, {FAULT_SHORT_TYPES, SEKV_EFORMAT},
		{FAULT_BAD_TYPE, SEKV_EFORMAT}, {FAULT_UNK_RANGE, SEKV_EFORMAT},
		{FAULT_EMPTY_PIECE, SEKV_EFORMAT}, {FAULT_TWO_UNK, SEKV_EFORMAT},
		{FAULT_NO_TOKENS, SEKV_ENOTFOUND}, {FAULT_BERT, SEKV_EUNSUP},
	};
	static const int32_t want[] = {3, 5};  /* "ab" -> ▁a b */
	struct tok *tk = NULL;
	char msg[200];
	int rc;

	/* The intact vocabulary opens and encodes, so each failure below is
	 * the fault's doing. */
	rc = open_tiny(t, FAULT_NONE, &tk);
	if (t->failed)
		return;
	T_CHECKF(t, rc == 0 && tk, "intact tiny vocabulary: %d", rc);
	rc = check_ids(tk, "ab", 2, want, 2, msg, sizeof msg);
	tok_close(tk);
	T_CHECKF(t, rc == 0, "tiny \"ab\": %s", msg);

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		rc = open_tiny(t, cases[i].fault, &tk);
		if (t->failed)
			return;
		if (rc != cases[i].want || tk) {
			tok_close(tk);
			T_CHECKF(t, 0, "fault %d: got %d, want %d", cases[i].fault, rc, cases[i].want);
		}
	}
}

static void test_open_file_errors(struct test_ctx *t)
{
	char path[1200], err[512] = "";
	struct tok *tk = (struct tok *)1;

	T_CHECK(t, tok_open_file(&tk, "/nonexistent/tokenizer.model", err, sizeof err) == SEKV_EIO);
	T_CHECK(t, tk == NULL && strstr(err, "/nonexistent/tokenizer.model"));
	snprintf(path, sizeof path, "%s/ggml-vocab-llama-spm.gguf.out", VOCAB_DIR);
	T_CHECKF(t, tok_open_file(&tk, path, err, sizeof err) == SEKV_EFORMAT, "%s", err);
	T_CHECK(t, tk == NULL);
	tok_close(NULL);
}

const struct test_case test_tokenizer[] = {
	{"tok_llama_spm_gguf_vs_vectors", test_llama_spm_gguf_vs_vectors},
	{"tok_llama_spm_model_file_vs_vectors", test_llama_spm_model_file_vs_vectors},
	{"tok_gemma3_vs_golden", test_gemma3_vs_golden},
	{"tok_gemma3_special_pieces_in_text", test_gemma3_special_pieces_in_text},
	{"tok_round_trip", test_round_trip},
	{"tok_token_text_pieces", test_token_text_pieces},
	{"tok_encode_cap_and_bos", test_encode_cap_and_bos},
	{"tok_malformed_vocab", test_malformed_vocab},
	{"tok_open_file_errors", test_open_file_errors},
	{NULL, NULL},
};
