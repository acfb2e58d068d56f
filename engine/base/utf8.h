/* utf8.h - the one UTF-8 codec of the project: decode one code point with
 * its validity, encode one, repair a buffer (invalid bytes become U+FFFD),
 * and the complete-prefix length a streaming writer holds back on.
 *
 * Validity follows Unicode 15 section 3.9, table 3-7: overlongs,
 * surrogates (U+D800..U+DFFF), code points above U+10FFFF, bad
 * continuation bytes and truncated sequences are malformed. Pure functions
 * over caller buffers: no heap, no locale, thread-safe. Display widths and
 * terminal sanitising live in ui/text.c. C and C++ (engine/tok/tokenizer_spm.cc).
 */
#ifndef SEKV_UTF8_H
#define SEKV_UTF8_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define UTF8_REPLACEMENT 0xfffdu /* U+FFFD, 3 bytes: ef bf bd */

/* Decodes the character at s[0..n). Returns the bytes consumed: 0 when
 * n == 0, else 1..4. A well-formed sequence stores its code point in *cp
 * and 1 in *valid. A malformed one stores U+FFFD and 0 (valid may be NULL)
 * and consumes its maximal valid subpart, at least one byte, so a caller
 * that emits one U+FFFD per call follows Unicode's recommended practice. */
int utf8_decode(const char *s, size_t n, uint32_t *cp, int *valid);

/* Writes the encoding of cp into out[4] (U+FFFD for a surrogate or a value
 * above U+10FFFF). Returns its length, 1..4. */
int utf8_encode(uint32_t cp, char out[4]);

/* Copies s[0..n) into out as well-formed UTF-8: every byte of a malformed
 * sequence becomes one U+FFFD (3 bytes), so out needs at most 3*n bytes;
 * nothing is written when out is NULL (validation, or sizing). Returns the
 * bytes written (or that would be); *n_bad (may be NULL) gets the number
 * of invalid input bytes, 0 exactly when s is well-formed. Does not
 * NUL-terminate. */
size_t utf8_repair(const char *s, size_t n, char *out, size_t *n_bad);

/* Length of the longest prefix of s[0..n) that does not end inside an
 * incomplete but so far well-formed multi-byte sequence (the rest may
 * arrive with the next piece of a stream). Malformed bytes are never held
 * back, so a streaming caller cannot wait on them forever. */
size_t utf8_complete(const char *s, size_t n);

#ifdef __cplusplus
}
#endif

#endif
