/* tokenizer.h - text to token ids and back, over the two kinds of GGUF
 * vocabulary: SentencePiece (tokenizer.ggml.model "llama": Gemma; the C++
 * shim engine/tok/tokenizer_spm.cc) and byte-level BPE ("gpt2": Llama 3,
 * Qwen2, SmolLM2; engine/tok/bpe.c, pretok.c); engine/tok/tok.c dispatches.
 * Invariant: text is always encoded with special-token parsing off, so
 * "<start_of_turn>" or "<|im_start|>" inside a document is ordinary text;
 * only tok_piece_id and tok_special_id give such ids (the chat templates
 * use them). Malformed UTF-8 is encoded as if repaired by utf8_repair
 * (engine/base/utf8.h: one U+FFFD per malformed byte) in both kinds.
 * A tokenizer is read-only after open and safe to share between threads.
 */
#ifndef SEKV_TOKENIZER_H
#define SEKV_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

struct gguf;
struct tok;

/* The two kinds, and where they follow their references.
 *
 * SentencePiece: built from a tokenizer.model file or from the GGUF
 * vocabulary (tokens/scores/token_type, BOS/EOS/UNK ids, add_space_prefix),
 * serialised by hand as a ModelProto and loaded from memory (recipe:
 * shared/DESIGN.md section 2 step 2). Special pieces follow llama.cpp's
 * tokenizer with parse_special = false (the reference the goldens come
 * from): control pieces (<bos>, <start_of_turn>, ...) never come out of
 * tok_encode; user-defined pieces (Gemma 3: "\n\n", runs of spaces and tabs,
 * "<b>", "<start_of_image>") are matched in the raw text, longest first, and
 * the stretches between them are encoded by SentencePiece one by one. From
 * a GGUF, the unknown token is typed UNKNOWN (SentencePiece needs exactly
 * one) and user-defined pieces whose text llama.cpp treats as end of
 * generation (Gemma 3: "</s>") become control pieces, as llama.cpp makes
 * them. Malformed UTF-8: llama.cpp emits byte pieces instead.
 *
 * Byte-level BPE (goldens: Hugging Face tokenizers): tokens, token types
 * and merges ("a b", rank = index) from the GGUF; the text is split by the
 * pre-tokenizer tokenizer.ggml.pre names (llama.cpp's expressions for
 * "llama-bpe", "qwen2", "smollm", "gpt2", run with PCRE2; any other name is
 * refused), each word's bytes are mapped to GPT-2's byte characters and
 * merged by rank. Neither control (type 3) nor user-defined (type 4)
 * tokens are matched in text (llama.cpp matches user-defined ones, such as
 * Qwen2's "<tool_call>"). A byte whose character has no token (SmolLM2 has
 * none for 0x04, 0x06, 0x13, 0x14, 0x16, 0x1d) is left out, as Hugging
 * Face tokenizers and llama.cpp leave it. Known difference: letters and
 * digits assigned after Unicode 14 (PCRE2 10.42's tables; Kawi, Garay,
 * CJK extension H, ...) are not \p{L}/\p{N} here, as they are for Hugging
 * Face's Oniguruma (Unicode 16). Encoding is O(n log n) in the longest word
 * and allocates about 40 bytes per byte of it (bench/tok_bench.c: about 3
 * million tokens/s on prose, a 1 MB line without spaces in 0.4 s).
 */

/* Builds from the vocabulary inside an open GGUF (model or vocab-only). The
 * gguf may be closed afterwards. Errors: SEKV_ENOTFOUND (no vocabulary),
 * SEKV_EFORMAT (a key of the wrong type, array lengths disagree, ids or
 * types out of range, a merge that is not two pieces of the vocabulary
 * whose concatenation is one; the message names the file, key and index),
 * SEKV_EUNSUP (tokenizer.ggml.model neither "llama" nor "gpt2", or a BPE
 * vocabulary whose tokenizer.ggml.pre is missing or unknown; named),
 * SEKV_ENOMEM. */
int tok_open_gguf(struct tok **out, const struct gguf *g, char *err, size_t errlen);
/* Loads a SentencePiece tokenizer.model file. Errors: SEKV_EIO (open/read,
 * errno text; "not a regular file" for a FIFO or device), SEKV_EFORMAT (not a model SentencePiece accepts),
 * SEKV_ENOMEM. */
int tok_open_file(struct tok **out, const char *path, char *err, size_t errlen);
void tok_close(struct tok *t); /* NULL is a no-op */

int tok_n_vocab(const struct tok *t);
int tok_bos(const struct tok *t);
int tok_eos(const struct tok *t);
/* 1 when the vocabulary asks for BOS before a text and has one
 * (tokenizer.ggml.add_bos_token; when absent, llama.cpp's default: 1 for
 * SentencePiece and for the llama-bpe pre-tokenizer, else 0). */
int tok_add_bos(const struct tok *t);
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

/* Text of one id as it appears in decoded output. SentencePiece: the
 * leading-space marker U+2581 turned into a space, byte pieces <0xNN> into
 * that byte, the unknown token " \u2047 " (SentencePiece's unk surface).
 * BPE: the bytes the piece's byte characters stand for; a user-defined
 * piece, or one with a character outside that alphabet, as it is. Control
 * tokens produce "". Returns bytes written to buf (<= cap, not
 * NUL-terminated) or a negative code. SEKV_EINVAL when id is out of range or
 * the text does not fit in cap (nothing written; see tok_max_text_len).
 * Never allocates. Streaming callers must buffer incomplete UTF-8 sequences
 * themselves (see utf8_complete in engine/base/utf8.h). */
int tok_token_text(const struct tok *t, int32_t id, char *buf, int cap);
/* Raw piece string of id (NUL-terminated, owned by t), or NULL. */
const char *tok_piece(const struct tok *t, int32_t id);
/* Decodes ids[0..n) into a malloc'ed NUL-terminated string the caller
 * frees: the tok_token_text of every id, concatenated, except that when a
 * SentencePiece model adds a dummy prefix (Llama) the leading space of the
 * first visible piece is dropped, as SentencePiece's Decode does, so
 * decode(encode(x)) == x for valid UTF-8 (BPE: but for bytes left out, see
 * above). Byte pieces are copied raw (no U+FFFD). NULL when an id is out
 * of range or memory runs out. */
char *tok_decode_dup(const struct tok *t, const int32_t *ids, int n);

#endif
