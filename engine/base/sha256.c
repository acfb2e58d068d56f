/* sha256.c - SHA-256 as FIPS 180-4 defines it (sha256.h). The constants
 * are computed as the standard defines them (section 4.2.2: the first 32
 * bits of the fractional parts of the cube roots of the first 64 primes;
 * section 5.3.3: of the square roots of the first 8), in long double,
 * once; tests/test_sha256.c checks the digests of the standard's examples.
 */
#include "engine/base/sha256.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static uint32_t K[64], H0[8];
static int have_k;

static uint32_t frac32(long double x)
{
	return (uint32_t)((x - floorl(x)) * 4294967296.0L);
}

static void make_constants(void)
{
	int n = 0;

	for (int p = 2; n < 64; p++) {
		int prime = 1;
		for (int d = 2; d * d <= p && prime; d++)
			prime = p % d != 0;
		if (!prime)
			continue;
		if (n < 8)
			H0[n] = frac32(sqrtl((long double)p));
		K[n++] = frac32(cbrtl((long double)p));
	}
	have_k = 1;
}

static uint32_t rotr(uint32_t x, int k)
{
	return x >> k | x << (32 - k);
}

static void block(struct sha256 *c, const unsigned char *b)
{
	uint32_t w[64], s[8];

	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)b[4 * i] << 24 | (uint32_t)b[4 * i + 1] << 16 | (uint32_t)b[4 * i + 2] << 8 | b[4 * i + 3];
	for (int i = 16; i < 64; i++) {
		uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ w[i - 15] >> 3;
		uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ w[i - 2] >> 10;
		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	memcpy(s, c->h, sizeof s);
	for (int i = 0; i < 64; i++) {
		uint32_t e = s[4], a = s[0];
		uint32_t t1 = s[7] + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & s[5]) ^ (~e & s[6])) + K[i] + w[i];
		uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & s[1]) ^ (a & s[2]) ^ (s[1] & s[2]));
		memmove(s + 1, s, 7 * sizeof *s);
		s[4] += t1;
		s[0] = t1 + t2;
	}
	for (int i = 0; i < 8; i++)
		c->h[i] += s[i];
}

void sha256_init(struct sha256 *c)
{
	if (!have_k)
		make_constants();
	memcpy(c->h, H0, sizeof c->h);
	c->n_bytes = 0;
	c->fill = 0;
}

void sha256_update(struct sha256 *c, const void *p, size_t n)
{
	const unsigned char *b = p;

	c->n_bytes += n;
	while (n) {
		size_t k = 64 - c->fill < n ? 64 - c->fill : n;
		memcpy(c->blk + c->fill, b, k);
		c->fill += k;
		b += k;
		n -= k;
		if (c->fill == 64) {
			block(c, c->blk);
			c->fill = 0;
		}
	}
}

void sha256_final_hex(struct sha256 *c, char hex[65])
{
	uint64_t bits = c->n_bytes * 8;
	unsigned char pad[72] = { 0x80 };
	size_t k = (c->fill < 56 ? 56 : 120) - c->fill;

	for (int i = 0; i < 8; i++)
		pad[k + i] = (unsigned char)(bits >> (56 - 8 * i));
	sha256_update(c, pad, k + 8);
	for (int i = 0; i < 8; i++)
		snprintf(hex + 8 * i, 9, "%08x", (unsigned)c->h[i]);
}

void sha256_hex(const void *p, size_t n, char hex[65])
{
	struct sha256 c;

	sha256_init(&c);
	sha256_update(&c, p, n);
	sha256_final_hex(&c, hex);
}
