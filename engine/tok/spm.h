/* spm.h - the SentencePiece tokenizer behind tokenizer.h (GGUF
 * tokenizer.ggml.model = "llama", or a tokenizer.model file), implemented
 * in engine/tok/tokenizer_spm.cc; internal to engine/tok/.
 *
 * Every function has the contract of the tok_ function of the same name in
 * tokenizer.h, over a struct tok_spm instead of a struct tok; tok.c
 * checks the arguments and the vocabulary kind before calling them.
 */
#ifndef SEKV_SPM_H
#define SEKV_SPM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct gguf;
struct tok_spm;

int tok_spm_open_gguf(struct tok_spm **out, const struct gguf *g, char *err, size_t errlen);
int tok_spm_open_file(struct tok_spm **out, const char *path, char *err, size_t errlen);
void tok_spm_close(struct tok_spm *t); /* NULL is a no-op */

int tok_spm_n_vocab(const struct tok_spm *t);
int tok_spm_bos(const struct tok_spm *t);
int tok_spm_eos(const struct tok_spm *t);
int tok_spm_piece_id(const struct tok_spm *t, const char *piece);
int tok_spm_special_id(const struct tok_spm *t, const char *piece);
int tok_spm_is_control(const struct tok_spm *t, int32_t id);
int tok_spm_max_text_len(const struct tok_spm *t);
int tok_spm_encode(const struct tok_spm *t, const char *text, size_t len, int add_bos,
		   int32_t *ids, int cap, char *err, size_t errlen);
int tok_spm_token_text(const struct tok_spm *t, int32_t id, char *buf, int cap);
const char *tok_spm_piece(const struct tok_spm *t, int32_t id);
char *tok_spm_decode_dup(const struct tok_spm *t, const int32_t *ids, int n);

#ifdef __cplusplus
}
#endif

#endif
