/* eval_fixture.h - what the `sekv eval` tests share (test_eval.c:
 * haystacks, reports, plots, the command; test_eval_probe.c: the probes):
 * the real model's tokenizer and prompt format, loaded once, and the
 * sample document as a corpus. */
#ifndef SEKV_TESTS_EVAL_FIXTURE_H
#define SEKV_TESTS_EVAL_FIXTURE_H

#include <stddef.h>

#include "app/eval.h"
#include "engine/conv/chat.h"
#include "tests/test.h"

#define EVAL_FX_SAMPLE "assets/samples/gnu-gpl-3-and-lgpl-3.txt"

/* Loads the test model's tokenizer and prompt format once: 1, or 0 with
 * a failure recorded in t. */
int eval_fx_load(struct test_ctx *t);
/* The tokenizer and prompt format eval_fx_load loaded (borrowed until exit). */
const struct tok *eval_fx_tok(void);
const struct chat_template *eval_fx_tmpl(void);
/* c = EVAL_FX_SAMPLE alone: 1, or 0 with a failure recorded. */
int eval_fx_corpus(struct test_ctx *t, struct eval_corpus *c);
/* Document tokens of text [len] as ingest makes them (into v), -1 on error. */
int eval_fx_count(const char *text, size_t len, struct chat_tokvec *v);

/* The first record of results.json doc with method and task, or NULL. */
struct cJSON;
const struct cJSON *eval_fx_find_rec(const struct cJSON *doc, const char *method, const char *task);
/* The number field k of o, NAN when absent or not a number. */
double eval_fx_num(const struct cJSON *o, const char *k);
/* Runs `sekv eval -m MODEL --out dir ARGS 2>&1`: its output (malloc'ed,
 * the caller frees; NULL when it did not run), its exit status in *st
 * and the output's last bytes in tail [cap]. */
char *eval_fx_run_eval(const char *dir, const char *args, int *st, char *tail, size_t cap);
/* path's first cap - 1 bytes into buf, NUL-terminated ("" when unreadable). */
void eval_fx_read_text(const char *path, char *buf, size_t cap);

#endif
