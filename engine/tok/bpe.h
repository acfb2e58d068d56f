/* bpe.h - byte-level BPE tokenizers (GGUF tokenizer.ggml.model = "gpt2":
 * Llama 3, Qwen2, SmolLM2) behind tokenizer.h; internal to engine/tok/.
 *
 * Every function has the contract of the tok_ function of the same name in
 * tokenizer.h (which documents the rules: special-token parsing off,
 * U+FFFD for malformed UTF-8), over a struct tok_bpe instead of a struct
 * tok. The pre-tokenizer lives in pretok.h, the dispatch in tok.c.
 */
#ifndef SEKV_BPE_H
#define SEKV_BPE_H

#include <stddef.h>
#include <stdint.h>

struct gguf;
struct tok_bpe;

/* Reads tokenizer.ggml.tokens, token_type, merges, pre and the BOS, EOS,
 * UNK and padding ids of g (the caller has checked tokenizer.ggml.model);
 * g may be closed afterwards. add_bos_token is the caller's (tok.c),
 * tok_bpe_add_bos_default gives the pre-tokenizer's default. Errors:
 * SEKV_ENOTFOUND (no tokenizer.ggml.tokens), SEKV_EFORMAT (an array
 * missing, of the wrong type or length, a type outside 1..6, an id out of
 * range, an empty piece, a merge that is not "a b" over two pieces whose
 * concatenation is a piece; the message names the file, key and index),
 * SEKV_EUNSUP (tokenizer.ggml.pre missing or unknown, named), SEKV_ENOMEM. */
int tok_bpe_open(struct tok_bpe **out, const struct gguf *g, char *err, size_t errlen);
void tok_bpe_close(struct tok_bpe *b); /* NULL is a no-op */
int tok_bpe_add_bos_default(const struct tok_bpe *b);

int tok_bpe_n_vocab(const struct tok_bpe *b);
int tok_bpe_bos(const struct tok_bpe *b);
int tok_bpe_eos(const struct tok_bpe *b);
int tok_bpe_piece_id(const struct tok_bpe *b, const char *piece);
int tok_bpe_special_id(const struct tok_bpe *b, const char *piece);
int tok_bpe_is_control(const struct tok_bpe *b, int32_t id);
int tok_bpe_max_text_len(const struct tok_bpe *b);
int tok_bpe_encode(const struct tok_bpe *b, const char *text, size_t len, int add_bos,
		   int32_t *ids, int cap, char *err, size_t errlen);
int tok_bpe_token_text(const struct tok_bpe *b, int32_t id, char *buf, int cap);
const char *tok_bpe_piece(const struct tok_bpe *b, int32_t id);
char *tok_bpe_decode_dup(const struct tok_bpe *b, const int32_t *ids, int n);

#endif
