/* tokenizer.h - C interface to SentencePiece (engine/tokenizer.cc is the
 * only C++ in the project).
 *
 * A tokenizer is built either from a tokenizer.model file or from the GGUF
 * vocabulary (tokenizer.ggml.tokens/scores/token_type, BOS/EOS/UNK ids,
 * add_space_prefix), serialised by hand as a SentencePiece ModelProto and
 * loaded from memory (recipe: shared/DESIGN.md section 2 step 2).
 * Text is always encoded with special-token parsing off: "<start_of_turn>"
 * inside a document is ordinary text; only tok_special_id gives control ids.
 * A tokenizer is read-only after open and safe to share between threads.
 */
#ifndef SEKV_TOKENIZER_H
#define SEKV_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

struct gguf;
struct tok;

/* Builds from the vocabulary inside an open GGUF (model or vocab-only). The
 * gguf may be closed afterwards. Errors: SEKV_ENOTFOUND (no vocabulary),
 * SEKV_EFORMAT (array lengths disagree, ids out of range),
 * SEKV_EUNSUP (tokenizer.ggml.model is not "llama"), SEKV_ENOMEM. */
int tok_open_gguf(struct tok **out, const struct gguf *g, char *err, size_t errlen);
/* Loads a SentencePiece tokenizer.model file. */
int tok_open_file(struct tok **out, const char *path, char *err, size_t errlen);
void tok_close(struct tok *t); /* NULL is a no-op */

int tok_n_vocab(const struct tok *t);
int tok_bos(const struct tok *t);
int tok_eos(const struct tok *t);
/* Id of an exact piece such as "<start_of_turn>", or -1. */
int tok_piece_id(const struct tok *t, const char *piece);

/* Encodes text[0..len) (UTF-8). Writes up to cap ids to ids and returns the
 * total number of ids the text needs (may exceed cap: call again with a larger
 * buffer), or a negative SEKV_E* code. Adds BOS first when add_bos. */
int tok_encode(const struct tok *t, const char *text, size_t len, int add_bos,
	       int32_t *ids, int cap, char *err, size_t errlen);

/* Text of one id as it appears in decoded output (leading-space marker
 * U+2581 turned into a space, byte pieces <0xNN> turned into that byte).
 * Returns bytes written to buf (<= cap, not NUL-terminated) or a negative
 * code. Control tokens produce "". Streaming callers must buffer incomplete
 * UTF-8 sequences themselves (see tok_utf8_complete). */
int tok_token_text(const struct tok *t, int32_t id, char *buf, int cap);
/* Raw piece string of id (NUL-terminated, owned by t), or NULL. */
const char *tok_piece(const struct tok *t, int32_t id);
/* Decodes ids into a malloc'ed NUL-terminated string the caller frees. */
char *tok_decode_dup(const struct tok *t, const int32_t *ids, int n);
/* Number of leading bytes of s[0..n) that form complete UTF-8 sequences. */
size_t tok_utf8_complete(const char *s, size_t n);

#endif
