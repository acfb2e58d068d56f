/* tok.c - tokenizer.h over its two kinds of vocabulary: SentencePiece
 * (spm.h, engine/tok/tokenizer_spm.cc) and byte-level BPE (bpe.h, bpe.c).
 *
 * tok_open_gguf picks the kind from tokenizer.ggml.model and reads
 * tokenizer.ggml.add_bos_token for both; every other call checks its
 * arguments here once and forwards. Invariant: exactly one of spm and bpe
 * is set in an open tokenizer.
 */
#include "engine/tok/tokenizer.h"
#include "engine/tok/bpe.h"
#include "engine/tok/spm.h"
#include "engine/tok/tok_int.h"
#include "engine/base/err.h"
#include "engine/gguf/gguf.h"

#include <stdlib.h>
#include <string.h>

struct tok {
	struct tok_spm *spm;  /* SentencePiece, or NULL */
	struct tok_bpe *bpe;  /* byte-level BPE, or NULL */
	int add_bos;          /* the vocabulary asks for BOS before a text */
};

static const char *gguf_name(const struct gguf *g)
{
	return g->path ? g->path : "gguf";
}

static int str_is(const struct gguf_str *s, const char *z)
{
	return s->len == strlen(z) && !memcmp(s->ptr, z, (size_t)s->len);
}

int tok_open_gguf(struct tok **out, const struct gguf *g, char *err, size_t errlen)
{
	struct gguf_str model;
	struct tok *t;
	int rc, flag;

	if (!out || !g)
		return sekv_errf(err, errlen, SEKV_EINVAL, "tok_open_gguf: no output or gguf");
	*out = NULL;
	rc = gguf_get_str(g, "tokenizer.ggml.model", &model);
	if (rc == SEKV_ENOTFOUND)
		return sekv_errf(err, errlen, SEKV_ENOTFOUND,
				 "tok_open_gguf: %s: no vocabulary (tokenizer.ggml.model missing)", gguf_name(g));
	if (rc)
		return sekv_errf(err, errlen, SEKV_EFORMAT,
				 "tok_open_gguf: %s: tokenizer.ggml.model: not a string", gguf_name(g));
	if (!str_is(&model, "llama") && !str_is(&model, "gpt2"))
		return sekv_errf(err, errlen, SEKV_EUNSUP,
				 "tok_open_gguf: %s: tokenizer.ggml.model \"%.*s\": only SentencePiece "
				 "(\"llama\") and byte-level BPE (\"gpt2\") vocabularies", gguf_name(g),
				 (int)(model.len > 32 ? 32 : model.len), model.ptr);
	if (!(t = calloc(1, sizeof *t)))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "tok_open_gguf: %s: out of memory", gguf_name(g));
	rc = str_is(&model, "llama") ? tok_spm_open_gguf(&t->spm, g, err, errlen)
				     : tok_bpe_open(&t->bpe, g, err, errlen);
	if (rc)
		goto fail;
	/* llama.cpp's defaults: SentencePiece adds BOS, BPE as its pre-tokenizer says */
	rc = gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &flag);
	if (rc == SEKV_ENOTFOUND) {
		flag = t->bpe ? tok_bpe_add_bos_default(t->bpe) : 1;
	} else if (rc) {
		rc = sekv_errf(err, errlen, SEKV_EFORMAT,
			       "tok_open_gguf: %s: tokenizer.ggml.add_bos_token: not a bool", gguf_name(g));
		goto fail;
	}
	t->add_bos = flag != 0;
	*out = t;
	return 0;
fail:
	tok_close(t);
	return rc;
}

int tok_open_file(struct tok **out, const char *path, char *err, size_t errlen)
{
	struct tok *t;
	int rc;

	if (!out || !path)
		return sekv_errf(err, errlen, SEKV_EINVAL, "tok_open_file: no output or path");
	*out = NULL;
	if (!(t = calloc(1, sizeof *t)))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "tok_open_file: %s: out of memory", path);
	if ((rc = tok_spm_open_file(&t->spm, path, err, errlen))) {
		free(t);
		return rc;
	}
	t->add_bos = 1;
	*out = t;
	return 0;
}

void tok_close(struct tok *t)
{
	if (!t)
		return;
	tok_spm_close(t->spm);
	tok_bpe_close(t->bpe);
	free(t);
}

int tok_n_vocab(const struct tok *t)
{
	return t->bpe ? tok_bpe_n_vocab(t->bpe) : tok_spm_n_vocab(t->spm);
}

int tok_bos(const struct tok *t)
{
	return t->bpe ? tok_bpe_bos(t->bpe) : tok_spm_bos(t->spm);
}

int tok_eos(const struct tok *t)
{
	return t->bpe ? tok_bpe_eos(t->bpe) : tok_spm_eos(t->spm);
}

int tok_add_bos(const struct tok *t)
{
	return t->add_bos && tok_bos(t) >= 0;
}

int tok_piece_id(const struct tok *t, const char *piece)
{
	if (!piece)
		return -1;
	return t->bpe ? tok_bpe_piece_id(t->bpe, piece) : tok_spm_piece_id(t->spm, piece);
}

int tok_special_id(const struct tok *t, const char *piece)
{
	if (!piece)
		return -1;
	return t->bpe ? tok_bpe_special_id(t->bpe, piece) : tok_spm_special_id(t->spm, piece);
}

int tok_is_control(const struct tok *t, int32_t id)
{
	return t->bpe ? tok_bpe_is_control(t->bpe, id) : tok_spm_is_control(t->spm, id);
}

int tok_max_text_len(const struct tok *t)
{
	return t->bpe ? tok_bpe_max_text_len(t->bpe) : tok_spm_max_text_len(t->spm);
}

int tok_encode(const struct tok *t, const char *text, size_t len, int add_bos,
	       int32_t *ids, int cap, char *err, size_t errlen)
{
	if (!t || (!text && len) || cap < 0 || (!ids && cap > 0))
		return sekv_errf(err, errlen, SEKV_EINVAL, "tok_encode: bad arguments");
	if (add_bos && tok_bos(t) < 0)
		return sekv_errf(err, errlen, SEKV_EINVAL, "tok_encode: add_bos: the vocabulary has no BOS");
	if (!len)
		text = "";
	return t->bpe ? tok_bpe_encode(t->bpe, text, len, add_bos, ids, cap, err, errlen)
		      : tok_spm_encode(t->spm, text, len, add_bos, ids, cap, err, errlen);
}

int tok_token_text(const struct tok *t, int32_t id, char *buf, int cap)
{
	return t->bpe ? tok_bpe_token_text(t->bpe, id, buf, cap)
		      : tok_spm_token_text(t->spm, id, buf, cap);
}

const char *tok_piece(const struct tok *t, int32_t id)
{
	return t->bpe ? tok_bpe_piece(t->bpe, id) : tok_spm_piece(t->spm, id);
}

char *tok_decode_dup(const struct tok *t, const int32_t *ids, int n)
{
	return t->bpe ? tok_bpe_decode_dup(t->bpe, ids, n) : tok_spm_decode_dup(t->spm, ids, n);
}

int tok_read_special_id(const struct gguf *g, const char *key, size_t n_vocab, int *id,
			char *err, size_t errlen)
{
	uint32_t u;
	int rc = gguf_get_u32(g, key, &u);

	*id = -1;
	if (rc == SEKV_ENOTFOUND)
		return 0;
	if (rc)
		return sekv_errf(err, errlen, SEKV_EFORMAT,
				 "tok_open_gguf: %s: %s: not an unsigned integer", gguf_name(g), key);
	if (u >= n_vocab)
		return sekv_errf(err, errlen, SEKV_EFORMAT,
				 "tok_open_gguf: %s: %s = %u: out of range (vocabulary has %zu tokens)",
				 gguf_name(g), key, u, n_vocab);
	*id = (int)u;
	return 0;
}
