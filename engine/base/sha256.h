/* sha256.h - SHA-256 (FIPS 180-4, "Secure Hash Standard", 2015, sections
 * 4.1.2, 5.3.3, 6.2): the digest that pins files whose content a
 * measurement depends on (`sekv eval`'s corpus). Pure, thread-safe per
 * context. Fingerprints and hash tables use hash.h's FNV-1a instead.
 */
#ifndef SEKV_SHA256_H
#define SEKV_SHA256_H

#include <stddef.h>
#include <stdint.h>

struct sha256 {
	uint32_t h[8];          /* the hash value so far */
	uint64_t n_bytes;       /* message bytes taken */
	unsigned char blk[64];  /* a partial block [fill] */
	size_t fill;
};

void sha256_init(struct sha256 *c);
/* Takes p [n] (n may be 0). */
void sha256_update(struct sha256 *c, const void *p, size_t n);
/* Pads, and writes the digest as 64 lowercase hex digits and a NUL into
 * hex [65]; c must be initialised again before another use. */
void sha256_final_hex(struct sha256 *c, char hex[65]);
/* The digest of p [n] in one call, as sha256_final_hex. */
void sha256_hex(const void *p, size_t n, char hex[65]);

#endif
