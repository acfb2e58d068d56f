/* hash.h - the one non-cryptographic hash: FNV-1a 64 (Fowler, Noll, Vo),
 * for fingerprints (a model's weights file, a document's text) and hash
 * tables (GGUF keys, a corpus's files). Pure, thread-safe. Not for
 * anything an adversary chooses to collide.
 */
#ifndef SEKV_HASH_H
#define SEKV_HASH_H

#include <stddef.h>
#include <stdint.h>

#define HASH_FNV1A64_INIT 1469598103934665603ull /* the offset basis */

/* h (HASH_FNV1A64_INIT to start, or the value of an earlier call to go on)
 * over bytes p [n]: each byte XORed in, then multiplied by the FNV prime
 * 1099511628211 (mod 2^64). */
uint64_t hash_fnv1a64(uint64_t h, const void *p, size_t n);

#endif
