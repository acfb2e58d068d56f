/* engine_bench.c - `sekv-bench`: tokens/s of our engine on one GGUF file,
 * the counterpart of bench/llamacpp_bench.py (same CLI, same output line).
 *
 * Modes: prefill (chunks of B tokens, no scores), prefill_surprisal (every
 * token's -log p), decode (C tokens prefilled untimed, then N teacher-forced
 * tokens fed one by one to a full-KV conversation, engine/conv/conv.h, with
 * logits). Only the forward-pass calls are timed.
 * Prints `tok_s X peak_rss_mib Y bytes_per_token Z`; bytes_per_token is the
 * memory a decoded token has to read (all weights + attended KV rows), 0
 * outside decode. Uses only the public API of engine/model/model.h, conv.h and
 * gguf.h.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/conv/conv.h"
#include "engine/base/clock.h"
#include "engine/base/err.h"
#include "engine/gguf/gguf.h"
#include "engine/model/model.h"

#define BENCH_DEFAULT_BATCH 512
#define BENCH_DEFAULT_CTX 4096

enum bench_mode { MODE_PREFILL, MODE_PREFILL_SURPRISAL, MODE_DECODE };

struct bench_opts {
	const char *model;
	const char *tokens;
	enum bench_mode mode;
	int n_threads;  /* <= 0: all cores */
	int n;          /* tokens timed */
	int n_ctx;      /* decode: tokens prefilled before the timed ones */
	int n_batch;    /* prefill chunk */
	int verify;     /* also print a check line on stderr */
	int top;        /* prefill: print the last position's top logits (0: no) */
};

static const char usage_text[] =
	"usage: sekv-bench -m MODEL -t THREADS --tokens FILE\n"
	"                  --mode prefill|prefill_surprisal|decode -n N\n"
	"                  [--ctx C] [--batch B] [--verify] [--top K]\n"
	"  FILE: token ids separated by whitespace (decode needs C+N of them)\n"
	"  prints: tok_s X peak_rss_mib Y bytes_per_token Z\n"
	"  --top K (prefill modes): also 'top: ID LOGIT ...' on stderr, the K\n"
	"  largest logits after the last token, fp32 activations throughout\n"
	"  (tools/check_real_logits.py compares them with llama.cpp)\n";

/* Parses a positive int option value; 0 or a message in err. */
static int parse_int(const char *opt, const char *s, int lo, int *out,
		     char *err, size_t errlen)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > INT32_MAX)
		return sekv_errf(err, errlen, SEKV_EINVAL,
				 "option: %s: '%s' is not an integer >= %d", opt, s, lo);
	*out = (int)v;
	return 0;
}

static int parse_args(struct bench_opts *o, int argc, char **argv,
		      char *err, size_t errlen)
{
	const char *mode = NULL;

	*o = (struct bench_opts){ .n_threads = 0, .n = -1,
				  .n_ctx = BENCH_DEFAULT_CTX,
				  .n_batch = BENCH_DEFAULT_BATCH };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		int rc = 0;

		if (!strcmp(a, "--verify")) {
			o->verify = 1;
			continue;
		}
		if (!strcmp(a, "-h") || !strcmp(a, "--help"))
			return sekv_errf(err, errlen, SEKV_EINVAL, "help");
		if (i + 1 >= argc)
			return sekv_errf(err, errlen, SEKV_EINVAL,
					 "option: %s: missing value (or unknown option)", a);
		const char *v = argv[++i];
		if (!strcmp(a, "-m"))
			o->model = v;
		else if (!strcmp(a, "--tokens"))
			o->tokens = v;
		else if (!strcmp(a, "--mode"))
			mode = v;
		else if (!strcmp(a, "-t"))
			rc = parse_int(a, v, 0, &o->n_threads, err, errlen);
		else if (!strcmp(a, "-n"))
			rc = parse_int(a, v, 1, &o->n, err, errlen);
		else if (!strcmp(a, "--ctx"))
			rc = parse_int(a, v, 1, &o->n_ctx, err, errlen);
		else if (!strcmp(a, "--batch"))
			rc = parse_int(a, v, 1, &o->n_batch, err, errlen);
		else if (!strcmp(a, "--top"))
			rc = parse_int(a, v, 1, &o->top, err, errlen);
		else
			return sekv_errf(err, errlen, SEKV_EINVAL, "option: %s: unknown", a);
		if (rc)
			return rc;
	}
	if (!o->model || !o->tokens || !mode || o->n < 0)
		return sekv_errf(err, errlen, SEKV_EINVAL,
				 "options: -m, --tokens, --mode and -n are required");
	if (!strcmp(mode, "prefill"))
		o->mode = MODE_PREFILL;
	else if (!strcmp(mode, "prefill_surprisal"))
		o->mode = MODE_PREFILL_SURPRISAL;
	else if (!strcmp(mode, "decode"))
		o->mode = MODE_DECODE;
	else
		return sekv_errf(err, errlen, SEKV_EINVAL, "option: --mode: '%s' is not "
				 "prefill, prefill_surprisal or decode", mode);
	return 0;
}

/* Reads whitespace-separated token ids from path into *out (caller frees).
 * Every field must be a decimal integer in [0, INT32_MAX]. */
static int read_tokens(const char *path, int32_t **out, int *n_out,
		       char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	int32_t *ids = NULL;
	int n = 0, cap = 0, rc = 0;
	char word[32];

	*out = NULL;
	*n_out = 0;
	if (!f)
		return sekv_errf(err, errlen, SEKV_EIO, "open: %s: %s", path, strerror(errno));
	while (fscanf(f, "%31s", word) == 1) {
		char *end;
		long v;

		errno = 0;
		v = strtol(word, &end, 10);
		if (errno || end == word || *end || v < 0 || v > INT32_MAX) {
			rc = sekv_errf(err, errlen, SEKV_EFORMAT,
				       "read tokens: %s: field %d '%s' is not a token id",
				       path, n + 1, word);
			goto out;
		}
		if (n == cap) {
			int32_t *p;

			cap = cap ? 2 * cap : 4096;
			if (!(p = realloc(ids, (size_t)cap * sizeof *ids))) {
				rc = sekv_errf(err, errlen, SEKV_ENOMEM, "read tokens: %s: out of memory", path);
				goto out;
			}
			ids = p;
		}
		ids[n++] = (int32_t)v;
	}
	if (ferror(f))
		rc = sekv_errf(err, errlen, SEKV_EIO, "read: %s: %s", path, strerror(errno));
out:
	fclose(f);
	if (rc) {
		free(ids);
		return rc;
	}
	*out = ids;
	*n_out = n;
	return 0;
}

/* Bytes one decoded token reads: every tensor once (the tied token_embd is
 * read whole by the output projection) plus, averaged over the positions
 * [p0, p0+n), the KV rows it attends: p+1 on global layers, min(p+1, window)
 * on sliding-window layers. */
static double decode_bytes_per_token(const struct model *m, int p0, int n)
{
	const struct model_hparams *hp = model_hparams(m);
	const struct gguf *g = model_gguf(m);
	double w = 0.0, rows = 0.0;

	for (uint64_t i = 0; i < g->n_tensor; i++)
		w += (double)g->tensor[i].nbytes;
	for (int i = 0; i < n; i++) {
		long p1 = (long)p0 + i + 1;

		for (int l = 0; l < hp->n_layer; l++) {
			int local = !hp->is_global[l] && hp->swa_window > 0;

			rows += local && p1 > hp->swa_window ? hp->swa_window : p1;
		}
	}
	return w + rows / n * (double)model_kv_row_bytes(m);
}

/* Prefills tokens[0..n) in chunks of n_batch; adds the time of the calls
 * to *secs when secs != NULL. */
static int run_prefill(const struct model *m, struct model_state *s,
		       const int32_t *tokens, int n, int n_batch, float *surprisal,
		       double *secs, char *err, size_t errlen)
{
	for (int pos = 0; pos < n; pos += n_batch) {
		int k = n - pos < n_batch ? n - pos : n_batch;
		double t0 = clk_now();
		int rc = model_prefill(m, s, tokens + pos, k,
				       surprisal ? surprisal + pos : NULL, err, errlen);

		if (rc)
			return rc;
		if (secs)
			*secs += clk_now() - t0;
	}
	return 0;
}

/* Decode mode: o->n_ctx tokens prefilled untimed, then o->n tokens fed
 * one at a time (teacher forcing) to a full-KV conversation over s; adds
 * the time of the feeds to *secs. With o->verify prints the mean NLL. */
static int run_decode(const struct bench_opts *o, const struct model *m,
		      struct model_state *s, const int32_t *tokens, double *secs,
		      char *err, size_t errlen)
{
	struct conv *c = NULL;
	struct conv_params cp;
	struct conv_kv kv;
	double nll = 0.0;
	int rc;

	conv_default_params(&cp);
	cp.tail_cap = o->n_ctx + o->n;
	cp.n_batch = o->n_batch;
	conv_kv_full(&kv);
	if ((rc = conv_new(&c, m, NULL, s, &kv, &cp, err, errlen)) ||
	    (rc = conv_prefill(c, tokens, o->n_ctx, err, errlen)))
		goto out;
	for (int i = 0; i < o->n && !rc; i++) {
		double t0 = clk_now();

		rc = conv_feed(c, &tokens[o->n_ctx + i], 1, err, errlen);
		*secs += clk_now() - t0;
		if (!rc && o->verify && i + 1 < o->n)
			nll += model_state_lse(s) - conv_logits(c)[tokens[o->n_ctx + i + 1]];
	}
	if (!rc && o->verify)
		fprintf(stderr, "verify: n_tokens %d first %d last %d n_scored %d mean_nll %.4f\n",
			o->n, tokens[o->n_ctx], tokens[o->n_ctx + o->n - 1], o->n - 1,
			o->n > 1 ? nll / (o->n - 1) : 0.0);
out:
	conv_free(c);
	return rc;
}

/* 'top: ID LOGIT ...' of the k largest logits of state s (stderr). */
static void print_top(const struct model *m, const struct model_state *s, int k)
{
	const float *lg = model_state_logits(s);
	int V = model_hparams(m)->n_vocab, last = -1;
	float last_v = INFINITY;

	if (!lg)
		return;
	fputs("top:", stderr);
	for (int r = 0; r < k && r < V; r++) {
		int best = -1;
		/* the next largest after (last_v, last) in (value desc, id asc) order */
		for (int i = 0; i < V; i++) {
			int after = lg[i] < last_v || (lg[i] == last_v && i > last);
			if (after && (best < 0 || lg[i] > lg[best]))
				best = i;
		}
		if (best < 0)
			break;
		fprintf(stderr, " %d %.6f", best, lg[best]);
		last = best;
		last_v = lg[best];
	}
	fputc('\n', stderr);
}

/* Runs the timed part of o->mode; fills *tok_s and *bpt. */
static int run_bench(const struct bench_opts *o, const struct model *m,
		     const int32_t *tokens, double *tok_s, double *bpt,
		     char *err, size_t errlen)
{
	int decode = o->mode == MODE_DECODE;
	int n_ctx = decode ? o->n_ctx + o->n : o->n;
	struct model_state *s = NULL, *warm = NULL;
	float *buf = NULL;
	double secs = 0.0;
	int rc;

	/* One untimed token on a throw-away state faults the mapped weights
	 * in, as llama.cpp does at load (the other side warms up the same way). */
	if ((rc = model_state_new(&warm, m, 1, 1, 1, err, errlen)) ||
	    (rc = model_prefill(m, warm, tokens, 1, NULL, err, errlen)))
		goto out;
	if ((rc = model_state_new(&s, m, n_ctx, o->n_batch, 1, err, errlen)))
		goto out;
	if (!decode && !(buf = malloc((size_t)o->n * sizeof *buf))) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "bench: buffer: out of memory");
		goto out;
	}
	*bpt = 0.0;
	if (!decode) {
		rc = run_prefill(m, s, tokens, o->n, o->n_batch,
				 o->mode == MODE_PREFILL_SURPRISAL ? buf : NULL,
				 &secs, err, errlen);
		if (!rc && o->verify && o->mode == MODE_PREFILL_SURPRISAL) {
			double sum = 0.0;

			for (int i = 1; i < o->n; i++)
				sum += buf[i];
			fprintf(stderr, "verify: n_tokens %d first %d last %d n_scored %d mean_nll %.4f\n",
				o->n, tokens[0], tokens[o->n - 1], o->n - 1, sum / (o->n - 1));
		}
		if (!rc && o->top)
			print_top(m, s, o->top);
	} else {
		rc = run_decode(o, m, s, tokens, &secs, err, errlen);
		if (rc)
			goto out;
		*bpt = decode_bytes_per_token(m, o->n_ctx, o->n);
	}
	if (!rc)
		*tok_s = secs > 0.0 ? o->n / secs : 0.0;
out:
	free(buf);
	model_state_free(s);
	model_state_free(warm);
	return rc;
}

int main(int argc, char **argv)
{
	struct bench_opts o;
	struct model *m = NULL;
	int32_t *tokens = NULL;
	int n_tok = 0, need, ret = 1;
	double tok_s = 0.0, bpt = 0.0;
	char err[512];

	if (parse_args(&o, argc, argv, err, sizeof err)) {
		if (strcmp(err, "help"))
			fprintf(stderr, "sekv-bench: %s\n", err);
		fputs(usage_text, stderr);
		return strcmp(err, "help") ? 1 : 0;
	}
	if (read_tokens(o.tokens, &tokens, &n_tok, err, sizeof err))
		goto fail;
	need = o.mode == MODE_DECODE ? o.n_ctx + o.n : o.n;
	if (n_tok < need) {
		snprintf(err, sizeof err, "read tokens: %s: %d ids, this run needs %d",
			 o.tokens, n_tok, need);
		goto fail;
	}
	if (model_open(&m, o.model, o.n_threads, err, sizeof err))
		goto fail;
	for (int i = 0; i < need; i++) {
		if (tokens[i] >= model_hparams(m)->n_vocab) {
			snprintf(err, sizeof err, "read tokens: %s: id %d at %d is outside the "
				 "vocabulary (%d)", o.tokens, tokens[i], i, model_hparams(m)->n_vocab);
			goto fail;
		}
	}
	if (o.top)
		model_set_act_q8(m, 0);
	if (run_bench(&o, m, tokens, &tok_s, &bpt, err, sizeof err))
		goto fail;
	printf("tok_s %.3f peak_rss_mib %.1f bytes_per_token %.0f\n",
	       tok_s, clk_peak_rss() / 1048576.0, bpt);
	ret = 0;
	goto out;
fail:
	fprintf(stderr, "sekv-bench: %s\n", err);
out:
	model_close(m);
	free(tokens);
	return ret;
}
