/* eval_qa.c - the qa probe of `sekv eval` (eval.h): questions with known
 * answers (bench/qa/questions.jsonl) over documents of this machine, the
 * document whole as the haystack.
 *
 * Invariant: an answer is right when it contains the expected string
 * (case-sensitive), as bench-qa scores it (DESIGN.md section 6,
 * answer_acc); which documents are present and unchanged is decided
 * against the corpus list by cmd_eval.c. The other probes live in
 * eval_probe.c and eval_list.c.
 */
#include "app/eval.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/base/err.h"

#define QA_LINE (64 << 10) /* bytes of one JSONL line, at most */

static const char *str_of(const cJSON *o, const char *k)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsString(x) && x->valuestring[0] ? x->valuestring : NULL;
}

/* The document of path in qa, added when new: its index, or -1. */
static int doc_of(struct eval_qa *qa, const char *path)
{
	for (int i = 0; i < qa->n_doc; i++)
		if (!strcmp(qa->doc[i].path, path))
			return i;
	struct eval_qa_doc *p = realloc(qa->doc, ((size_t)qa->n_doc + 1) * sizeof *p);
	if (!p)
		return -1;
	qa->doc = p;
	memset(&p[qa->n_doc], 0, sizeof *p);
	snprintf(p[qa->n_doc].path, sizeof p->path, "%s", path);
	return qa->n_doc++;
}

int eval_qa_load(struct eval_qa *qa, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	char *line = malloc(QA_LINE);
	int rc = 0, no = 0;

	memset(qa, 0, sizeof *qa);
	if (!f || !line) {
		free(line);
		if (f)
			fclose(f);
		return f ? sekv_errf(err, errlen, SEKV_ENOMEM, "qa: out of memory")
			 : sekv_errf(err, errlen, SEKV_EIO, "qa: %s: %s", path, strerror(errno));
	}
	while (!rc && fgets(line, QA_LINE, f)) {
		no++;
		if (strspn(line, " \t\r\n") == strlen(line))
			continue;
		cJSON *o = cJSON_Parse(line);
		const char *doc = str_of(o, "doc"), *q = str_of(o, "question"), *a = str_of(o, "answer");
		struct eval_query *y;
		int d;
		if (!doc || !q || !a || strlen(doc) >= sizeof qa->doc->path || strlen(q) >= sizeof y->question ||
		    strlen(a) >= EVAL_ITEM_CAP)
			rc = sekv_errf(err, errlen, SEKV_EFORMAT, "qa: %s: line %d: not {\"doc\", \"question\", "
				       "\"answer\"} within the lengths (%zu, %d bytes)", path, no,
				       sizeof y->question - 1, EVAL_ITEM_CAP - 1);
		else if ((d = doc_of(qa, doc)) < 0)
			rc = sekv_errf(err, errlen, SEKV_ENOMEM, "qa: out of memory");
		else if (qa->doc[d].n_query == EVAL_MAX_QUERIES)
			qa->n_dropped++;
		else {
			y = &qa->doc[d].query[qa->doc[d].n_query++];
			memset(y, 0, sizeof *y);
			snprintf(y->question, sizeof y->question, "%s", q);
			snprintf(y->item[0], sizeof y->item[0], "%s", a);
			y->n_item = 1;
			y->needle = -1;
			qa->n_question++;
		}
		cJSON_Delete(o);
	}
	fclose(f);
	free(line);
	if (rc)
		eval_qa_free(qa);
	return rc;
}

void eval_qa_free(struct eval_qa *qa)
{
	if (!qa)
		return;
	free(qa->doc);
	memset(qa, 0, sizeof *qa);
}

int eval_qa_build(struct eval_hay *h, const struct eval_qa_doc *d, int max_q, const struct tok *tk,
		  const struct chat_template *ct, char *err, size_t errlen)
{
	struct chat_tokvec v = { 0 };
	char *buf;
	size_t n;
	int rc = eval_file_read(d->path, &buf, &n, err, errlen);

	memset(h, 0, sizeof *h);
	h->task = -1;
	if (rc > 0 || (!rc && memchr(buf, 0, n))) {
		free(buf);
		return sekv_errf(err, errlen, SEKV_ENOTFOUND, "qa: %s: not a text file of 64 bytes to 4 MiB", d->path);
	}
	if (rc)
		return rc;
	if ((rc = eval_doc_tokens(tk, ct, buf, n, &v, err, errlen)) < 0) {
		free(buf);
		chat_tokvec_free(&v);
		return rc;
	}
	h->text = buf;
	h->len = n;
	h->n_tok = rc;
	h->task = EVAL_QA;
	h->n_query = max_q < d->n_query ? max_q : d->n_query;
	memcpy(h->query, d->query, (size_t)h->n_query * sizeof *h->query);
	chat_tokvec_free(&v);
	return 0;
}
