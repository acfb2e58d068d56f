/* hash.c - FNV-1a 64 (hash.h): one loop over the bytes; the callers keep
 * their own meaning of what is hashed (model_load.c's fingerprint, gguf.c's
 * key table, ingest's text fingerprint, eval's corpus).
 */
#include "engine/base/hash.h"

uint64_t hash_fnv1a64(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}
