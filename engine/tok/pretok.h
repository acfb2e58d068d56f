/* pretok.h - the pre-tokenizers of byte-level BPE vocabularies: the regular
 * expressions llama.cpp (src/llama-vocab.cpp, llm_tokenizer_bpe) uses for
 * each tokenizer.ggml.pre name, compiled with PCRE2 in UTF and UCP mode.
 *
 * Splitting follows Hugging Face's Split(regex, "isolated") applied in
 * order: every match of the first expression and every stretch between
 * matches becomes a word, and each word is split again by the next
 * expression. Internal to engine/tok/ (bpe.c); merges live in bpe.c.
 * A pre-tokenizer is read-only after open and safe to share between threads.
 */
#ifndef SEKV_PRETOK_H
#define SEKV_PRETOK_H

#include <stddef.h>

struct tok_pre;

/* Compiles the pre-tokenizer named name[0..len) (not NUL-terminated):
 * "llama-bpe" (also "llama3", "llama-v3"), "qwen2", "smollm", "gpt2" (also
 * llama.cpp's "gpt-2"). Errors: SEKV_EUNSUP for any other name (the
 * message names it), SEKV_ENOMEM, SEKV_EINVAL when PCRE2 refuses an
 * expression (a bug: the message has PCRE2's text). */
int tok_pre_open(struct tok_pre **out, const char *name, size_t len,
		 char *err, size_t errlen);
void tok_pre_close(struct tok_pre *p); /* NULL is a no-op */

/* llama.cpp's defaults for the name: whether a word that is a token as a
 * whole skips the merges (Llama 3), and whether BOS is added when the
 * GGUF has no tokenizer.ggml.add_bos_token. 1 or 0. */
int tok_pre_ignore_merges(const struct tok_pre *p);
int tok_pre_add_bos(const struct tok_pre *p);

/* Called once per word, in text order; word[0..n) lies inside the text
 * given to tok_pre_split, n >= 1. A nonzero return stops the split. */
typedef int (*tok_pre_word_fn)(void *ud, const char *word, size_t n);

/* Splits text[0..len), which must be well-formed UTF-8 (unchecked; see
 * utf8.h), calling fn for every word; the words cover the text exactly.
 * Returns 0, the first nonzero value fn returned, SEKV_ENOMEM, or
 * SEKV_EINVAL when PCRE2 fails to match (its message in err). Time
 * linear in len for the expressions here; allocates one PCRE2 match block
 * per expression per call. Thread-safe on a shared p. */
int tok_pre_split(const struct tok_pre *p, const char *text, size_t len,
		  tok_pre_word_fn fn, void *ud, char *err, size_t errlen);

#endif
