/* tok_int.h - what the two tokenizer kinds of engine/tok/ share (tok.c
 * implements it; spm.h and bpe.h declare each kind's own entry points).
 * Internal to engine/tok/. */
#ifndef SEKV_TOK_INT_H
#define SEKV_TOK_INT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct gguf;

/* The optional special-token id at GGUF key `key` (u32) into *id: -1 when
 * absent; SEKV_EFORMAT (err names file and key) when it is not an
 * unsigned integer or not below n_vocab. 0 otherwise. */
int tok_read_special_id(const struct gguf *g, const char *key, size_t n_vocab, int *id,
			char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
