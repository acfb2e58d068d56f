/* tokenizer.h - C interface to SentencePiece (engine/tok/tokenizer.cc is the
 * only C++ in the project).
 *
 * A tokenizer is built either from a tokenizer.model file or from the GGUF
 * vocabulary (tokenizer.ggml.tokens/scores/token_type, BOS/EOS/UNK ids,
 * add_space_prefix), serialised by hand as a SentencePiece ModelProto and
 * loaded from memory (recipe: shared/DESIGN.md section 2 step 2).
 * Text is always encoded with special-token parsing off: "<start_of_turn>"
 * inside a document is ordinary text; only tok_special_id gives control ids.
 * A tokenizer is read-only after open and safe to share between threads.
 *
 * Special pieces follow llama.cpp's tokenizer with parse_special = false
 * (the reference the goldens come from): control pieces (<bos>,
 * <start_of_turn>, ...) never come out of tok_encode, so such text in a
 * document is spelled with ordinary pieces; user-defined pieces (Gemma 3:
 * "\n\n", runs of spaces and tabs, "<b>", "<start_of_image>") are matched
 * in the raw text, longest first, and the stretches between them are
 * encoded by SentencePiece one by one. From a GGUF, the unknown token is
 * typed UNKNOWN (SentencePiece needs exactly one) and user-defined pieces
 * whose text llama.cpp treats as end of generation (Gemma 3: "</s>") become
 * control pieces, as llama.cpp makes them. A tokenizer.model file is used
 * as SentencePiece reads it. Known difference: malformed UTF-8 is encoded
 * as U+FFFD (SentencePiece's rule) where llama.cpp emits byte pieces, so
 * callers should hand over valid UTF-8.
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
/* Loads a SentencePiece tokenizer.model file. Errors: SEKV_EIO (open/read,
 * errno text; "not a regular file" for a FIFO or device), SEKV_EFORMAT (not a model SentencePiece accepts),
 * SEKV_ENOMEM. */
int tok_open_file(struct tok **out, const char *path, char *err, size_t errlen);
void tok_close(struct tok *t); /* NULL is a no-op */

int tok_n_vocab(const struct tok *t);
int tok_bos(const struct tok *t);
int tok_eos(const struct tok *t);
/* Id of an exact piece such as "<start_of_turn>", or -1. */
int tok_piece_id(const struct tok *t, const char *piece);
/* Id of an exact control piece ("<start_of_turn>", "<eos>"), or -1 when the
 * piece is absent or not a control piece. */
int tok_special_id(const struct tok *t, const char *piece);
/* 1 when id is a control piece (decodes to ""), else 0 (also out of range). */
int tok_is_control(const struct tok *t, int32_t id);
/* Longest text tok_token_text can write for any id, in bytes: a buffer this
 * large never gets SEKV_EINVAL for want of room. Fixed at open. */
int tok_max_text_len(const struct tok *t);

/* Encodes text[0..len) (UTF-8). Writes up to cap ids to ids and returns the
 * total number of ids the text needs (may exceed cap: call again with a larger
 * buffer), or a negative SEKV_E* code. Adds BOS first when add_bos.
 * SEKV_EINVAL for bad arguments or add_bos without a BOS, SEKV_ENOMEM.
 * Allocates scratch proportional to len; thread-safe on a shared t. */
int tok_encode(const struct tok *t, const char *text, size_t len, int add_bos,
	       int32_t *ids, int cap, char *err, size_t errlen);

/* Text of one id as it appears in decoded output (leading-space marker
 * U+2581 turned into a space, byte pieces <0xNN> turned into that byte).
 * Returns bytes written to buf (<= cap, not NUL-terminated) or a negative
 * code. Control tokens produce "", the unknown token " \u2047 "
 * (SentencePiece's unk surface). SEKV_EINVAL when id is out of range or
 * the text does not fit in cap (nothing written; see tok_max_text_len).
 * Never allocates. Streaming callers must buffer incomplete UTF-8 sequences
 * themselves (see utf8_complete in engine/base/utf8.h). */
int tok_token_text(const struct tok *t, int32_t id, char *buf, int cap);
/* Raw piece string of id (NUL-terminated, owned by t), or NULL. */
const char *tok_piece(const struct tok *t, int32_t id);
/* Decodes ids[0..n) into a malloc'ed NUL-terminated string the caller
 * frees: the tok_token_text of every id, concatenated, except that when the
 * model adds a dummy prefix (Llama) the leading space of the first visible
 * piece is dropped, as SentencePiece's Decode does, so decode(encode(x)) ==
 * x for valid UTF-8. Byte pieces are copied raw (no U+FFFD). NULL when an
 * id is out of range or memory runs out. */
char *tok_decode_dup(const struct tok *t, const int32_t *ids, int n);

#endif
