/* chat.c - chat templates as token sequences (see chat.h). Only this file
 * and tokenizer.cc know control-piece names. */
#include "engine/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/err.h"
#include "engine/tokenizer.h"

void chat_tokvec_free(struct chat_tokvec *v)
{
	if (!v)
		return;
	free(v->ids);
	v->ids = NULL;
	v->n = v->cap = 0;
}

static int tokvec_reserve(struct chat_tokvec *v, int need)
{
	if (need <= v->cap)
		return 0;
	int cap = v->cap ? v->cap : 256;
	while (cap < need) {
		if (cap > (1 << 29))
			return SEKV_ENOMEM;
		cap *= 2;
	}
	int32_t *p = realloc(v->ids, (size_t)cap * sizeof *p);
	if (!p)
		return SEKV_ENOMEM;
	v->ids = p;
	v->cap = cap;
	return 0;
}

int chat_tokvec_push(struct chat_tokvec *v, int32_t id)
{
	int rc = tokvec_reserve(v, v->n + 1);
	if (rc)
		return rc;
	v->ids[v->n++] = id;
	return 0;
}

int chat_template_init(struct chat_template *ct, const char *arch,
		       const struct tok *t, char *err, size_t errlen)
{
	memset(ct, 0, sizeof *ct);
	if (strncmp(arch, "gemma", 5) != 0)
		return sekv_errf(err, errlen, SEKV_EUNSUP,
				 "chat template: architecture '%s': no template in this build", arch);
	snprintf(ct->name, sizeof ct->name, "gemma");
	ct->bos = tok_bos(t);
	ct->eos = tok_eos(t);
	ct->turn_open = tok_piece_id(t, "<start_of_turn>");
	ct->turn_close = tok_piece_id(t, "<end_of_turn>");
	if (ct->turn_open < 0 || ct->turn_close < 0)
		return sekv_errf(err, errlen, SEKV_ENOTFOUND,
				 "chat template: gemma: <start_of_turn>/<end_of_turn> not in the vocabulary");
	return 0;
}

int chat_push_text(struct chat_tokvec *v, const struct tok *t,
		   const char *text, size_t len, char *err, size_t errlen)
{
	if (len == 0)
		return 0;
	int need = tok_encode(t, text, len, 0, NULL, 0, err, errlen);
	if (need < 0)
		return need;
	int rc = tokvec_reserve(v, v->n + need);
	if (rc)
		return sekv_errf(err, errlen, rc, "tokenize: out of memory");
	int got = tok_encode(t, text, len, 0, v->ids + v->n, need, err, errlen);
	if (got < 0)
		return got;
	v->n += got;
	return 0;
}

int chat_open_turn(struct chat_tokvec *v, const struct chat_template *ct,
		   const struct tok *t, const char *role, char *err, size_t errlen)
{
	int rc = chat_tokvec_push(v, ct->turn_open);
	if (rc)
		return sekv_errf(err, errlen, rc, "chat: out of memory");
	char line[64];
	int n = snprintf(line, sizeof line, "%s\n", role);
	if (n < 0 || n >= (int)sizeof line)
		return sekv_errf(err, errlen, SEKV_EINVAL, "chat: role '%s' too long", role);
	return chat_push_text(v, t, line, (size_t)n, err, errlen);
}

int chat_close_turn(struct chat_tokvec *v, const struct chat_template *ct,
		    const struct tok *t, char *err, size_t errlen)
{
	int rc = chat_tokvec_push(v, ct->turn_close);
	if (rc)
		return sekv_errf(err, errlen, rc, "chat: out of memory");
	return chat_push_text(v, t, "\n", 1, err, errlen);
}

int chat_build_turn(struct chat_tokvec *v, const struct chat_template *ct,
		    const struct tok *t, enum chat_turn_start start, const char *sep,
		    const char *text, size_t len, int answer, char *err, size_t errlen)
{
	int rc = 0;

	if (start == CHAT_START_STREAM && ct->bos >= 0 && (rc = chat_tokvec_push(v, ct->bos)))
		return sekv_errf(err, errlen, rc, "chat: out of memory");
	if (start == CHAT_START_AFTER_MODEL)
		rc = chat_close_turn(v, ct, t, err, errlen);
	if (!rc && start != CHAT_START_IN_USER)
		rc = chat_open_turn(v, ct, t, "user", err, errlen);
	if (!rc && sep)
		rc = chat_push_text(v, t, sep, strlen(sep), err, errlen);
	if (!rc)
		rc = chat_push_text(v, t, text, len, err, errlen);
	if (!rc && answer)
		rc = chat_close_turn(v, ct, t, err, errlen);
	if (!rc && answer)
		rc = chat_open_turn(v, ct, t, "model", err, errlen);
	return rc;
}

int chat_is_end(const struct chat_template *ct, int32_t id)
{
	/* a model that opens a new turn has ended its own */
	return id == ct->turn_close || id == ct->eos || id == ct->turn_open;
}
