/* tok_bench.c - `sekv-tok-bench`: tokenizer speed on long documents, the
 * figure behind tokenizer.h's "never quadratic" promise.
 *
 * Tokenizes, with the vocabulary of one GGUF, a prose text (a file repeated
 * up to the size asked) and single lines of that size that stress one part
 * of the pre-tokenizer and the merges each: letters without a space,
 * base64, digits, spaces, punctuation, CJK. Prints one line per input:
 * `kind bytes tokens seconds tok_s mb_s`. Uses only tokenizer.h and gguf.h.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/clock.h"
#include "engine/gguf/gguf.h"
#include "engine/tok/tokenizer.h"

#define DEFAULT_TEXT "assets/samples/gnu-gpl-3-and-lgpl-3.txt"

static const char usage_text[] =
	"usage: sekv-tok-bench -m MODEL [--bytes N] [--text FILE]\n"
	"  N bytes per input (default 1048576); FILE repeated for the prose input\n"
	"  prints: kind bytes tokens seconds tok_s mb_s\n";

/* xorshift64: a fixed stream, so every run tokenizes the same bytes. */
static uint64_t next_rand(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static const char *const KINDS[] = {
	"prose", "line_letters", "line_base64", "line_digits", "line_spaces", "line_punct", "line_cjk",
};

/* Fills buf[0..n) with input KINDS[k]. */
static void fill(char *buf, size_t n, size_t k, const char *prose, size_t n_prose)
{
	static const char *const alphabet[] = {
		NULL, "abcdefghijklmnopqrstuvwxyz",
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", "0123456789", " ",
		"=-+*/.,;:!?",
	};
	uint64_t x = 88172645463325252ull;
	size_t i = 0;

	if (k == 0) {
		for (; i < n; i++)
			buf[i] = prose[i % n_prose];
	} else if (k < sizeof alphabet / sizeof alphabet[0]) {
		for (size_t m = strlen(alphabet[k]); i < n; i++)
			buf[i] = alphabet[k][next_rand(&x) % m];
	} else {
		/* U+4E00..U+9FA4, 3 bytes each; 'x' pads the last one or two bytes */
		for (; i + 3 <= n; i += 3) {
			unsigned cp = 0x4e00 + (unsigned)(next_rand(&x) % 0x51a5);
			buf[i] = (char)(0xe0 | cp >> 12);
			buf[i + 1] = (char)(0x80 | (cp >> 6 & 0x3f));
			buf[i + 2] = (char)(0x80 | (cp & 0x3f));
		}
		for (; i < n; i++)
			buf[i] = 'x';
	}
}

static char *read_file(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long len;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
	    (buf = malloc((size_t)len)) && fread(buf, 1, (size_t)len, f) == (size_t)len) {
		*n = (size_t)len;
	} else {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	return buf;
}

int main(int argc, char **argv)
{
	const char *model = NULL, *text_path = DEFAULT_TEXT;
	size_t n = (size_t)1 << 20, n_prose = 0;
	struct gguf *g = NULL;
	struct tok *tk = NULL;
	char err[512], *prose, *buf;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-m") && i + 1 < argc)
			model = argv[++i];
		else if (!strcmp(argv[i], "--bytes") && i + 1 < argc)
			n = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--text") && i + 1 < argc)
			text_path = argv[++i];
		else
			model = NULL, i = argc;
	}
	if (!model || n == 0) {
		fputs(usage_text, stderr);
		return 2;
	}
	if (!(prose = read_file(text_path, &n_prose))) {
		fprintf(stderr, "sekv-tok-bench: %s: cannot read\n", text_path);
		return 1;
	}
	if (gguf_open(&g, model, err, sizeof err) || tok_open_gguf(&tk, g, err, sizeof err)) {
		fprintf(stderr, "sekv-tok-bench: %s\n", err);
		gguf_close(g);
		free(prose);
		return 1;
	}
	gguf_close(g);
	if (!(buf = malloc(n))) {
		fprintf(stderr, "sekv-tok-bench: out of memory\n");
		tok_close(tk);
		free(prose);
		return 1;
	}
	for (size_t k = 0; k < sizeof KINDS / sizeof KINDS[0]; k++) {
		fill(buf, n, k, prose, n_prose);
		double t0 = clk_now();
		int n_tok = tok_encode(tk, buf, n, 0, NULL, 0, err, sizeof err);
		double s = clk_now() - t0;
		if (n_tok < 0) {
			fprintf(stderr, "sekv-tok-bench: %s: %s\n", KINDS[k], err);
			break;
		}
		printf("%s %zu %d %.3f %.0f %.2f\n", KINDS[k], n, n_tok, s, s > 0 ? n_tok / s : 0.0,
		       s > 0 ? n / s / 1e6 : 0.0);
	}
	free(buf);
	free(prose);
	tok_close(tk);
	return 0;
}
