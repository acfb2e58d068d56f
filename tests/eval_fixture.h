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

#endif
