/* cmd_misc.c - small sub-commands: inspect, tokenize, generate, ingest, ls, rm. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "app/app.h"
#include "engine/chat.h"
#include "engine/err.h"
#include "engine/fmt.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/tokenizer.h"
#include "store/store.h"

static int fail(const char *cmd, const char *err)
{
	fprintf(stderr, "sekv %s: %s\n", cmd, err);
	return 1;
}

/* Usage errors exit 2, like every sub-command. */
static int usage_fail(const char *cmd, const char *usage)
{
	fprintf(stderr, "sekv %s: %s\n", cmd, usage);
	return 2;
}

int cmd_inspect(int argc, char **argv)
{
	struct app_opts o;
	struct gguf *g = NULL;
	char err[512];

	if (app_opts_parse(&o, argc, argv, err, sizeof err))
		return usage_fail("inspect", err);
	const char *path = o.n_args > 0 ? o.args[0] : o.model;
	if (gguf_open(&g, path, err, sizeof err))
		return fail("inspect", err);
	gguf_print(g, stdout);
	gguf_close(g);
	return 0;
}

/* Tokenizer from --tokenizer, or from -m (a model or a vocabulary-only GGUF:
 * no model weights are needed, so only the GGUF is opened). */
static int open_tok_only(const struct app_opts *o, struct tok **tk, char *err, size_t errlen)
{
	struct gguf *g = NULL;
	int rc;

	if (o->tokenizer)
		return tok_open_file(tk, o->tokenizer, err, errlen);
	if ((rc = gguf_open(&g, o->model, err, errlen)))
		return rc;
	rc = tok_open_gguf(tk, g, err, errlen);
	gguf_close(g);
	return rc;
}

int cmd_tokenize(int argc, char **argv)
{
	struct app_opts o;
	struct tok *tk = NULL;
	char err[512];
	int rc = 0;

	if (app_opts_parse(&o, argc, argv, err, sizeof err))
		return usage_fail("tokenize", err);
	if (o.n_args != 1)
		return usage_fail("tokenize", "usage: sekv tokenize [-m MODEL | --tokenizer FILE] [--bos] -- TEXT");
	if (open_tok_only(&o, &tk, err, sizeof err))
		return fail("tokenize", err);
	const char *text = o.args[0];
	int n = tok_encode(tk, text, strlen(text), o.bos, NULL, 0, err, sizeof err);
	int32_t *ids = n > 0 ? malloc((size_t)n * sizeof *ids) : NULL;
	if (n < 0 || (n > 0 && !ids)) {
		rc = fail("tokenize", n < 0 ? err : "out of memory");
		goto out;
	}
	n = tok_encode(tk, text, strlen(text), o.bos, ids, n, err, sizeof err);
	for (int i = 0; i < n; i++)
		printf(i ? " %d" : "%d", ids[i]);
	printf("\n");
out:
	free(ids);
	tok_close(tk);
	return rc;
}

int cmd_generate(int argc, char **argv)
{
	struct app_opts o;
	struct model *m = NULL;
	struct tok *tk = NULL;
	struct model_state *ms = NULL;
	struct chat_template ct;
	struct chat_tokvec v = {0};
	struct sampler smp = {0};
	struct sampler_params sp;
	float *logits = NULL;
	char err[512], pend[256];
	size_t n_pend = 0;
	int rc = 1, n_gen = 0;

	if (app_opts_parse(&o, argc, argv, err, sizeof err))
		return usage_fail("generate", err);
	if (!o.prompt && o.n_args == 1)
		o.prompt = o.args[0];
	if (!o.prompt)
		return usage_fail("generate", "usage: sekv generate [-m MODEL] -p TEXT [-n N] [--temp T] [--seed S]");
	if (app_load(&o, &m, &tk, err, sizeof err))
		return fail("generate", err);
	const struct model_hparams *hp = model_hparams(m);
	if (chat_template_init(&ct, hp->arch, tk, err, sizeof err) ||
	    (ct.bos >= 0 && chat_tokvec_push(&v, ct.bos)) ||
	    chat_open_turn(&v, &ct, tk, "user", err, sizeof err) ||
	    chat_push_text(&v, tk, o.prompt, strlen(o.prompt), err, sizeof err) ||
	    chat_close_turn(&v, &ct, tk, err, sizeof err) ||
	    chat_open_turn(&v, &ct, tk, "model", err, sizeof err)) {
		fail("generate", err);
		goto out;
	}
	if (model_state_new(&ms, m, v.n + o.n_predict + 1, o.n_batch, 1, err, sizeof err)) {
		fail("generate", err);
		goto out;
	}
	logits = malloc((size_t)hp->n_vocab * sizeof *logits);
	sampler_default_params(&sp);
	sp.temperature = o.temperature;
	sp.seed = o.seed;
	sp.repeat_penalty = o.repeat_penalty;
	if (!logits || sampler_init(&smp, &sp, hp->n_vocab)) {
		fail("generate", "out of memory");
		goto out;
	}
	for (int pos = 0; pos < v.n; pos += o.n_batch) {
		int n = v.n - pos < o.n_batch ? v.n - pos : o.n_batch;
		if (model_prefill(m, ms, v.ids + pos, n, NULL, err, sizeof err)) {
			fail("generate", err);
			goto out;
		}
	}
	memcpy(logits, model_state_logits(ms), (size_t)hp->n_vocab * sizeof *logits);
	double t0 = app_now();
	while (n_gen < o.n_predict) {
		int32_t id = sampler_sample(&smp, logits);
		if (chat_is_end(&ct, id))
			break;
		int n = tok_token_text(tk, id, pend + n_pend, (int)(sizeof pend - n_pend));
		if (n > 0)
			n_pend += (size_t)n;
		size_t ok = tok_utf8_complete(pend, n_pend);
		fwrite(pend, 1, ok, stdout);
		fflush(stdout);
		memmove(pend, pend + ok, n_pend - ok);
		n_pend -= ok;
		n_gen++;
		sampler_accept(&smp, id);
		if (model_decode(m, ms, id, NULL, logits, err, sizeof err)) {
			fail("generate", err);
			goto out;
		}
	}
	fwrite(pend, 1, n_pend, stdout);
	printf("\n");
	double dt = app_now() - t0;
	if (!o.quiet)
		fprintf(stderr, "generate: %d tokens, %.1f tokens/s\n", n_gen, dt > 0 ? n_gen / dt : 0);
	rc = 0;
out:
	sampler_free(&smp);
	free(logits);
	model_state_free(ms);
	chat_tokvec_free(&v);
	tok_close(tk);
	model_close(m);
	return rc;
}

int cmd_ingest(int argc, char **argv)
{
	struct app_opts o;
	char err[1024];
	int64_t id = 0;

	if (app_opts_parse(&o, argc, argv, err, sizeof err))
		return usage_fail("ingest", err);
	if (o.n_args != 1)
		return usage_fail("ingest", "usage: sekv ingest FILE [--title T] [--budget F] [--rmax R] [-m MODEL] [--db FILE]");
	if (app_check_db(&o, err, sizeof err))
		return fail("ingest", err);
	if (app_ingest(&o, o.args[0], &id, err, sizeof err))
		return fail("ingest", err);
	printf("%lld\n", (long long)id);
	return 0;
}

int cmd_ls(int argc, char **argv)
{
	struct app_opts o;
	struct store *st = NULL;
	struct store_doc *docs = NULL;
	char err[512], when[32], disk[32];
	int n = 0;

	if (app_opts_parse(&o, argc, argv, err, sizeof err))
		return usage_fail("ls", err);
	if (app_check_db(&o, err, sizeof err))
		return fail("ls", err);
	if (access(o.db, F_OK) != 0) {
		if (!o.quiet)
			fprintf(stderr, "sekv ls: no library at %s yet: add a document with 'sekv ingest FILE'\n", o.db);
		return 0;
	}
	if (store_open(&st, o.db, err, sizeof err) || store_doc_list(st, &docs, &n, err, sizeof err)) {
		store_close(st);
		return fail("ls", err);
	}
	if (n == 0 && !o.quiet)
		fprintf(stderr, "sekv ls: no documents in %s yet: add one with 'sekv ingest FILE'\n", o.db);
	for (int i = 0; i < n; i++) {
		time_t t = (time_t)docs[i].created;
		/* one record per line, tab-separated: no control bytes in fields */
		for (char *c = docs[i].title; *c; c++)
			if ((unsigned char)*c < 0x20 || *c == 0x7f)
				*c = ' ';
		struct tm tm;
		localtime_r(&t, &tm);
		strftime(when, sizeof when, "%Y-%m-%d %H:%M", &tm);
		fmt_bytes(docs[i].disk_bytes > 0 ? (size_t)docs[i].disk_bytes : 0, disk, sizeof disk);
		printf("%lld\t%s\t%lld tokens\t%s\t%s\t%s%s\n", (long long)docs[i].id, docs[i].title,
		       (long long)docs[i].n_tok, disk, when, docs[i].model_name,
		       docs[i].state == STORE_DOC_READY ? "" : "\t(ingest incomplete)");
	}
	free(docs);
	store_close(st);
	return 0;
}

int cmd_rm(int argc, char **argv)
{
	struct app_opts o;
	struct store *st = NULL;
	char err[512];
	int rc = 0;

	if (app_opts_parse(&o, argc, argv, err, sizeof err))
		return usage_fail("rm", err);
	if (o.n_args < 1)
		return usage_fail("rm", "usage: sekv rm DOC...");
	if (app_check_db(&o, err, sizeof err))
		return fail("rm", err);
	if (access(o.db, F_OK) != 0) {
		snprintf(err, sizeof err, "no library at %.400s", o.db);
		return fail("rm", err);
	}
	if (store_open(&st, o.db, err, sizeof err))
		return fail("rm", err);
	for (int i = 0; i < o.n_args; i++) {
		int64_t id;
		if (app_parse_doc_id(o.args[i], &id)) {
			fprintf(stderr, "sekv rm: " APP_DOC_ID_BAD "\n", o.args[i]);
			rc = 2;
			continue;
		}
		int drc = store_doc_delete(st, id, err, sizeof err);
		if (drc == SEKV_ENOTFOUND)
			snprintf(err, sizeof err, "document %lld is not in %.400s (see 'sekv ls')", (long long)id, o.db);
		if (drc)
			rc = fail("rm", err);
		else if (!o.quiet)
			fprintf(stderr, "sekv rm: document %lld deleted\n", (long long)id);
	}
	store_close(st);
	return rc;
}
