/* test_sha256.c - SHA-256 (engine/base/sha256.c) against the digests of
 * FIPS 180-4's examples (NIST's "SHA256.pdf" example values: "abc", the
 * two-block message, one million 'a') and of the empty message, whole and
 * fed in uneven pieces. */
#include <string.h>

#include "engine/base/sha256.h"
#include "tests/test.h"

static const char ABC[] = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
static const char EMPTY[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
static const char TWO[] = "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1";
static const char MILLION[] = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";

static void sha256_fips_examples(struct test_ctx *t)
{
	static const char two[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	char hex[65];

	sha256_hex("abc", 3, hex);
	T_CHECKF(t, !strcmp(hex, ABC), "abc: %s", hex);
	sha256_hex("", 0, hex);
	T_CHECKF(t, !strcmp(hex, EMPTY), "empty: %s", hex);
	sha256_hex(two, strlen(two), hex);
	T_CHECKF(t, !strcmp(hex, TWO), "two blocks: %s", hex);
}

/* One million 'a' in pieces of 1..997 bytes: the same digest as whole. */
static void sha256_pieces(struct test_ctx *t)
{
	static char a[1000];
	struct sha256 c;
	char hex[65];
	size_t done = 0, k = 1;

	memset(a, 'a', sizeof a);
	sha256_init(&c);
	while (done < 1000000) {
		size_t n = 1000000 - done < k ? 1000000 - done : k;
		sha256_update(&c, a, n);
		done += n;
		k = k % 997 + 1;
	}
	sha256_final_hex(&c, hex);
	T_CHECKF(t, !strcmp(hex, MILLION), "million a: %s", hex);
}

const struct test_case test_sha256[] = {
	{ "sha256_fips_examples", sha256_fips_examples },
	{ "sha256_pieces", sha256_pieces },
	{ NULL, NULL },
};
