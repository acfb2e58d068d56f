/* history.c - chat histories into conversations of messages (history.h):
 * detection, ChatGPT's conversations.json (the current branch of each
 * tree), JSONL and "role: text" transcripts, --conversation.
 *
 * Invariant: every kept message's text went through extract_clean_dup
 * (valid UTF-8, LF line ends) and is not blank; every skipped one is
 * counted under one reason. Errors name the file and where: line and byte
 * for JSON and JSONL, conversation and node for a ChatGPT tree.
 */
#include "app/history.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "app/extract.h"
#include "engine/base/err.h"

#define HISTORY_PART_SEP "\n\n" /* between text parts of one message */

const char *history_kind_name(enum history_kind k)
{
	switch (k) {
	case HISTORY_CHATGPT: return "ChatGPT conversations.json";
	case HISTORY_JSONL: return "JSONL";
	case HISTORY_TRANSCRIPT: return "transcript";
	default: return "text";
	}
}

/* ---- roles ----------------------------------------------------------- */

/* The role a word names, ignoring case: 0 with *role set, 1 for a tool or
 * function (skipped), -1 for none. */
static int role_of_word(const char *w, size_t n, enum history_role *role)
{
	static const struct { const char *word; int role; } words[] = {
		{ "user", HISTORY_USER }, { "human", HISTORY_USER },
		{ "assistant", HISTORY_ASSISTANT }, { "model", HISTORY_ASSISTANT },
		{ "ai", HISTORY_ASSISTANT }, { "system", HISTORY_SYSTEM },
		{ "developer", HISTORY_SYSTEM }, { "tool", -1 }, { "function", -1 },
	};

	for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
		if (strlen(words[i].word) != n || strncasecmp(w, words[i].word, n))
			continue;
		if (words[i].role < 0)
			return 1;
		*role = (enum history_role)words[i].role;
		return 0;
	}
	return -1;
}

/* A transcript role line "Role: text" (role word, optional blanks, ':'):
 * 0 with *role and the text's offset *at, 1 for a tool line, -1 for none. */
static int role_line(const char *s, size_t n, enum history_role *role, size_t *at)
{
	size_t w = 0, c;

	while (w < n && w < 16 && isalpha((unsigned char)s[w]))
		w++;
	for (c = w; c < n && (s[c] == ' ' || s[c] == '\t'); c++)
		;
	if (w == 0 || c >= n || s[c] != ':')
		return -1;
	int r = role_of_word(s, w, role);
	for (c++; c < n && (s[c] == ' ' || s[c] == '\t'); c++)
		;
	*at = c;
	return r;
}

/* ---- messages -------------------------------------------------------- */

static int is_blank_text(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!isspace((unsigned char)s[i]))
			return 0;
	return 1;
}

/* Appends a message of role with text s[0..n) (cleaned, trailing blank
 * lines dropped) to c; a blank text counts as empty instead. */
static int add_msg(struct history_conv *c, enum history_role role, const char *s, size_t n)
{
	size_t len, bad = 0;

	while (n > 0 && isspace((unsigned char)s[n - 1]))
		n--;
	if (is_blank_text(s, n)) {
		c->skip.n_empty++;
		return 0;
	}
	struct history_msg *m = realloc(c->msg, (size_t)(c->n_msg + 1) * sizeof *m);
	if (!m)
		return SEKV_ENOMEM;
	c->msg = m;
	m[c->n_msg].role = role;
	/* the file's text is clean already; JSON escapes may still hold CR */
	if (!(m[c->n_msg].text = extract_clean_dup(s, n, &len, &bad)))
		return SEKV_ENOMEM;
	c->n_msg++;
	return 0;
}

/* A growable byte buffer for joining text parts. */
struct buf {
	char *p;
	size_t n, cap;
};

static int buf_add(struct buf *b, const char *s, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->n + n + 1)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p)
			return SEKV_ENOMEM;
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = 0;
	return 0;
}

/* Joins the text parts of parts (a JSON array) into b: strings, and
 * objects of type "text" with a "text" string (JSONL's OpenAI form); any
 * other part counts in *n_part. */
static int join_parts(const cJSON *parts, struct buf *b, int *n_part)
{
	const cJSON *p;
	int rc = 0;

	cJSON_ArrayForEach(p, parts) {
		const cJSON *tx = cJSON_GetObjectItemCaseSensitive(p, "text");
		const cJSON *ty = cJSON_GetObjectItemCaseSensitive(p, "type");
		const char *s = cJSON_IsString(p) ? p->valuestring
			: cJSON_IsString(tx) && cJSON_IsString(ty) && !strcmp(ty->valuestring, "text")
			? tx->valuestring : NULL;
		if (!s) {
			(*n_part)++;
			continue;
		}
		if (!*s)
			continue;
		if ((b->n && (rc = buf_add(b, HISTORY_PART_SEP, strlen(HISTORY_PART_SEP)))) ||
		    (rc = buf_add(b, s, strlen(s))))
			return rc;
	}
	return 0;
}

/* ---- errors ---------------------------------------------------------- */

/* Line (1-based) of byte at in text. */
static long line_of(const char *text, size_t at)
{
	long line = 1;

	for (size_t i = 0; i < at; i++)
		line += text[i] == '\n';
	return line;
}

static int json_error(const char *path, const char *text, size_t len, const char *end,
		      char *err, size_t errlen)
{
	size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : len;

	return sekv_errf(err, errlen, SEKV_EFORMAT, "read: %s: invalid JSON at line %ld, byte %zu",
			 path, line_of(text, at), at);
}

/* ---- ChatGPT conversations.json ------------------------------------- */

/* The node of id in mapping, or NULL. */
static const cJSON *node_of(const cJSON *mapping, const char *id)
{
	return cJSON_GetObjectItemCaseSensitive(mapping, id);
}

/* Reads one node's message into c, or counts why it is skipped. */
static int chatgpt_message(struct history_conv *c, const cJSON *node, const char *id,
			   const char *path, char *err, size_t errlen)
{
	const cJSON *msg = cJSON_GetObjectItemCaseSensitive(node, "message");
	enum history_role role;
	struct buf b = { 0 };
	int rc;

	if (!msg || cJSON_IsNull(msg)) {
		c->skip.n_null++;
		return 0;
	}
	const cJSON *author = cJSON_GetObjectItemCaseSensitive(msg, "author");
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(author, "role");
	if (!cJSON_IsString(r))
		return sekv_errf(err, errlen, SEKV_EFORMAT, "read: %s: conversation %d (%s), node "
				 "'%s': a message without author.role", path, c->index, c->title, id);
	const cJSON *meta = cJSON_GetObjectItemCaseSensitive(msg, "metadata");
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(meta, "is_visually_hidden_from_conversation"))) {
		c->skip.n_hidden++;
		return 0;
	}
	if (role_of_word(r->valuestring, strlen(r->valuestring), &role) != 0) {
		c->skip.n_tool++;
		return 0;
	}
	const cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
	const cJSON *type = cJSON_GetObjectItemCaseSensitive(content, "content_type");
	const cJSON *parts = cJSON_GetObjectItemCaseSensitive(content, "parts");
	if (!cJSON_IsString(type) || (strcmp(type->valuestring, "text") &&
				       strcmp(type->valuestring, "multimodal_text")) ||
	    !cJSON_IsArray(parts)) {
		c->skip.n_nontext++;
		return 0;
	}
	if ((rc = join_parts(parts, &b, &c->skip.n_part)) == 0)
		rc = add_msg(c, role, b.p ? b.p : "", b.n);
	free(b.p);
	return rc ? sekv_errf(err, errlen, rc, "read: %s: out of memory", path) : 0;
}

/* The current branch of mapping from current_node up to the root, into
 * nodes [*n] (root last; malloc'ed). A missing node, a parent that is not
 * a string or null, or more steps than nodes (a cycle) is an error. */
static int chatgpt_branch(const struct history_conv *c, const cJSON *mapping, const char *cur,
			  const cJSON ***nodes, int *n, const char *path, char *err, size_t errlen)
{
	int n_node = cJSON_GetArraySize(mapping);
	const char *id = cur, *child = NULL;

	*n = 0;
	if (!(*nodes = malloc(((size_t)n_node + 1) * sizeof **nodes)))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "read: %s: out of memory", path);
	while (id) {
		const cJSON *node = node_of(mapping, id);
		if (!node && !child)
			return sekv_errf(err, errlen, SEKV_EFORMAT, "read: %s: conversation %d (%s): "
					 "current_node '%s' is not in mapping", path, c->index, c->title, id);
		if (!node)
			return sekv_errf(err, errlen, SEKV_EFORMAT, "read: %s: conversation %d (%s): node "
					 "'%s' has parent '%s', which is not in mapping", path, c->index,
					 c->title, child, id);
		if (*n == n_node)
			return sekv_errf(err, errlen, SEKV_EFORMAT, "read: %s: conversation %d (%s): a "
					 "cycle in mapping through node '%s'", path, c->index, c->title, id);
		(*nodes)[(*n)++] = node;
		const cJSON *parent = cJSON_GetObjectItemCaseSensitive(node, "parent");
		if (parent && !cJSON_IsNull(parent) && !cJSON_IsString(parent))
			return sekv_errf(err, errlen, SEKV_EFORMAT, "read: %s: conversation %d (%s): node "
					 "'%s': parent is neither a node id nor null", path, c->index,
					 c->title, id);
		child = id;
		id = cJSON_IsString(parent) ? parent->valuestring : NULL;
	}
	return 0;
}

/* One conversation object j (1-based index) into c. */
static int chatgpt_conv(struct history_conv *c, const cJSON *j, int index, const char *path,
			char *err, size_t errlen)
{
	const cJSON *title = cJSON_GetObjectItemCaseSensitive(j, "title");
	const cJSON *mapping = cJSON_GetObjectItemCaseSensitive(j, "mapping");
	const cJSON *cur = cJSON_GetObjectItemCaseSensitive(j, "current_node"), *node;
	const cJSON **nodes = NULL;
	int n = 0, n_with_msg = 0, rc;

	c->index = index;
	if (cJSON_IsString(title) && title->valuestring[0])
		snprintf(c->title, sizeof c->title, "%s", title->valuestring);
	else
		snprintf(c->title, sizeof c->title, "conversation %d", index);
	if (!cJSON_IsObject(mapping))
		return sekv_errf(err, errlen, SEKV_EFORMAT, "read: %s: conversation %d (%s): no "
				 "\"mapping\" object", path, index, c->title);
	if (!cJSON_IsString(cur))
		return sekv_errf(err, errlen, SEKV_EFORMAT, "read: %s: conversation %d (%s): no "
				 "\"current_node\"", path, index, c->title);
	rc = chatgpt_branch(c, mapping, cur->valuestring, &nodes, &n, path, err, errlen);
	for (int i = n - 1; !rc && i >= 0; i--) {
		const cJSON *k = cJSON_GetObjectItemCaseSensitive(nodes[i], "id");
		rc = chatgpt_message(c, nodes[i], cJSON_IsString(k) ? k->valuestring : "?", path,
				     err, errlen);
		n_with_msg += !cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(nodes[i], "message"));
	}
	cJSON_ArrayForEach(node, mapping) {
		const cJSON *m = cJSON_GetObjectItemCaseSensitive(node, "message");
		c->skip.n_off_branch += m && !cJSON_IsNull(m);
	}
	c->skip.n_off_branch -= n_with_msg;
	free(nodes);
	return rc;
}

static int parse_chatgpt(struct history *h, const char *path, const char *text, size_t len,
			 char *err, size_t errlen)
{
	const char *end = NULL;
	cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0), *j;
	int rc = 0, n;

	if (!root)
		return json_error(path, text, len, end, err, errlen);
	/* a single conversation object counts as a list of one */
	n = cJSON_IsArray(root) ? cJSON_GetArraySize(root) : 1;
	if (!cJSON_IsArray(root) && !cJSON_IsObject(root))
		rc = sekv_errf(err, errlen, SEKV_EFORMAT, "read: %s: neither a list of conversations "
			       "nor one conversation", path);
	else if (!(h->conv = calloc((size_t)n + 1, sizeof *h->conv)))
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "read: %s: out of memory", path);
	for (int i = 0; !rc && i < n; i++) {
		j = cJSON_IsArray(root) ? cJSON_GetArrayItem(root, i) : root;
		h->n_conv = i + 1;
		if (!cJSON_IsObject(j))
			rc = sekv_errf(err, errlen, SEKV_EFORMAT, "read: %s: conversation %d is not a "
				       "JSON object", path, i + 1);
		else
			rc = chatgpt_conv(&h->conv[i], j, i + 1, path, err, errlen);
	}
	cJSON_Delete(root);
	return rc;
}

/* ---- JSONL ----------------------------------------------------------- */

/* The text of content (a string, a list of parts, or null) into b. */
static int jsonl_content(const cJSON *content, struct buf *b, struct history_conv *c,
			 const char *path, long line, char *err, size_t errlen)
{
	int rc = 0;

	if (!content)
		return sekv_errf(err, errlen, SEKV_EFORMAT, "read: %s: line %ld: a message without "
				 "\"content\"", path, line);
	if (cJSON_IsString(content))
		rc = buf_add(b, content->valuestring, strlen(content->valuestring));
	else if (cJSON_IsArray(content))
		rc = join_parts(content, b, &c->skip.n_part);
	else if (!cJSON_IsNull(content))
		return sekv_errf(err, errlen, SEKV_EFORMAT, "read: %s: line %ld: \"content\" is "
				 "neither text nor a list of parts", path, line);
	return rc ? sekv_errf(err, errlen, rc, "read: %s: out of memory", path) : 0;
}

/* One JSONL line s[0..n) at byte `at` of the file. */
static int jsonl_line(struct history_conv *c, const char *text, size_t len, size_t at, size_t n,
		      const char *path, char *err, size_t errlen)
{
	const char *end = NULL;
	long line = line_of(text, at);
	cJSON *j = cJSON_ParseWithLengthOpts(text + at, n, &end, 0);
	enum history_role role;
	struct buf b = { 0 };
	int rc = 0;

	if (!j)
		return json_error(path, text, len, end, err, errlen);
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "role");
	if (!cJSON_IsObject(j))
		rc = sekv_errf(err, errlen, SEKV_EFORMAT, "read: %s: line %ld: not a JSON object", path,
			       line);
	else if (!cJSON_IsString(r))
		rc = sekv_errf(err, errlen, SEKV_EFORMAT, "read: %s: line %ld: a message without a "
			       "\"role\"", path, line);
	else if ((rc = role_of_word(r->valuestring, strlen(r->valuestring), &role)) < 0)
		rc = sekv_errf(err, errlen, SEKV_EFORMAT, "read: %s: line %ld: unknown role '%.40s' "
			       "(user, assistant, system, tool)", path, line, r->valuestring);
	else if (rc == 1)
		c->skip.n_tool++;
	else if (!(rc = jsonl_content(cJSON_GetObjectItemCaseSensitive(j, "content"), &b, c, path,
				      line, err, errlen)) &&
		 (rc = add_msg(c, role, b.p ? b.p : "", b.n)))
		rc = sekv_errf(err, errlen, rc, "read: %s: out of memory", path);
	if (rc == 1)
		rc = 0;
	free(b.p);
	cJSON_Delete(j);
	return rc;
}

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}

/* One conversation named after the file (JSONL, transcripts). */
static int one_conv(struct history *h, const char *path, char *err, size_t errlen)
{
	if (!(h->conv = calloc(1, sizeof *h->conv)))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "read: %s: out of memory", path);
	h->n_conv = 1;
	h->conv->index = 1;
	snprintf(h->conv->title, sizeof h->conv->title, "%s", base_name(path));
	return 0;
}

static int parse_jsonl(struct history *h, const char *path, const char *text, size_t len,
		       char *err, size_t errlen)
{
	int rc = one_conv(h, path, err, errlen);

	for (size_t at = 0; !rc && at < len;) {
		const char *nl = memchr(text + at, '\n', len - at);
		size_t n = nl ? (size_t)(nl - text) - at : len - at;
		if (!is_blank_text(text + at, n))
			rc = jsonl_line(h->conv, text, len, at, n, path, err, errlen);
		at += n + 1;
	}
	return rc;
}

/* ---- transcripts ----------------------------------------------------- */

/* Ends the transcript message s[0..n) whose role line role_line read as
 * kind (0: a message of role, 1: a tool line, counted; -1: none yet). */
static int transcript_flush(struct history_conv *c, int kind, enum history_role role,
			    const char *s, size_t n)
{
	if (kind == 1) {
		c->skip.n_tool++;
		return 0;
	}
	return kind == 0 ? add_msg(c, role, s, n) : 0;
}

static int parse_transcript(struct history *h, const char *path, const char *text, size_t len,
			    char *err, size_t errlen)
{
	enum history_role role = HISTORY_USER;
	size_t from = 0;
	int kind = -1, rc = one_conv(h, path, err, errlen);

	for (size_t at = 0; !rc && at < len;) {
		const char *nl = memchr(text + at, '\n', len - at);
		size_t n = nl ? (size_t)(nl - text) - at : len - at, off;
		enum history_role r;
		int k = role_line(text + at, n, &r, &off);
		if (k >= 0) {
			if ((rc = transcript_flush(h->conv, kind, role, text + from, at - from)))
				break;
			kind = k;
			role = r;
			from = at + off;
		} else if (kind < 0 && !is_blank_text(text + at, n)) {
			return sekv_errf(err, errlen, SEKV_EFORMAT, "read: %s: line %ld: a message "
					 "without a role (a transcript's lines start 'user:', "
					 "'assistant:' or 'system:')", path, line_of(text, at));
		}
		at += n + 1;
	}
	if (!rc)
		rc = transcript_flush(h->conv, kind, role, text + from, len > from ? len - from : 0);
	return rc ? sekv_errf(err, errlen, rc, "read: %s: out of memory", path) : 0;
}

/* ---- detection ------------------------------------------------------- */

static int has_suffix(const char *path, const char *suf)
{
	size_t n = strlen(path), k = strlen(suf);
	return n >= k && !strcasecmp(path + n - k, suf);
}

/* 1 when line s[0..n) is a JSON object with a "role" string. */
static int is_jsonl_line(const char *s, size_t n)
{
	cJSON *j = cJSON_ParseWithLengthOpts(s, n, NULL, 0);
	int ok = cJSON_IsObject(j) && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "role"));

	cJSON_Delete(j);
	return ok;
}

/* 1 when the first non-blank line is a role line and both a user and an
 * assistant line occur. */
static int is_transcript(const char *text, size_t len)
{
	int seen = 0, first = 1;

	for (size_t at = 0; at < len;) {
		const char *nl = memchr(text + at, '\n', len - at);
		size_t n = nl ? (size_t)(nl - text) - at : len - at, off;
		enum history_role r;
		int k = role_line(text + at, n, &r, &off);
		if (first && !is_blank_text(text + at, n)) {
			if (k < 0)
				return 0;
			first = 0;
		}
		if (k == 0 && r != HISTORY_SYSTEM)
			seen |= r == HISTORY_USER ? 1 : 2;
		if (seen == 3)
			return 1;
		at += n + 1;
	}
	return 0;
}

enum history_kind history_detect(const char *path, const char *text, size_t len)
{
	size_t at = 0;

	if (has_suffix(path, ".jsonl") || has_suffix(path, ".ndjson"))
		return HISTORY_JSONL;
	while (at < len && isspace((unsigned char)text[at]))
		at++;
	if (at < len && text[at] == '{') {
		const char *nl = memchr(text + at, '\n', len - at);
		if (is_jsonl_line(text + at, nl ? (size_t)(nl - text) - at : len - at))
			return HISTORY_JSONL;
	}
	if (at < len && (text[at] == '[' || text[at] == '{') && memmem(text, len, "\"mapping\"", 9))
		return HISTORY_CHATGPT;
	return is_transcript(text, len) ? HISTORY_TRANSCRIPT : HISTORY_NONE;
}

int history_parse(struct history *h, enum history_kind kind, const char *path,
		  const char *text, size_t len, char *err, size_t errlen)
{
	int rc;

	memset(h, 0, sizeof *h);
	h->kind = kind;
	if (kind == HISTORY_CHATGPT)
		rc = parse_chatgpt(h, path, text, len, err, errlen);
	else if (kind == HISTORY_JSONL)
		rc = parse_jsonl(h, path, text, len, err, errlen);
	else if (kind == HISTORY_TRANSCRIPT)
		rc = parse_transcript(h, path, text, len, err, errlen);
	else
		rc = sekv_errf(err, errlen, SEKV_EINVAL, "read: %s: not a chat history", path);
	if (!rc && h->n_conv == 0)
		rc = sekv_errf(err, errlen, SEKV_EINVAL, "read: %s: no conversation in this %s", path,
			       history_kind_name(kind));
	return rc;
}

void history_free(struct history *h)
{
	if (!h)
		return;
	for (int i = 0; i < h->n_conv; i++) {
		for (int k = 0; k < h->conv[i].n_msg; k++)
			free(h->conv[i].msg[k].text);
		free(h->conv[i].msg);
	}
	free(h->conv);
	memset(h, 0, sizeof *h);
}

/* The numbers of the conversations titled sel (cmp: strcmp or strcasecmp)
 * into list; their count, the first in *idx. */
static int titled(const struct history *h, const char *sel, int (*cmp)(const char *, const char *),
		  int *idx, char *list, size_t cap)
{
	int n = 0;
	size_t at = 0;

	for (int i = 0; i < h->n_conv; i++) {
		if (cmp(h->conv[i].title, sel))
			continue;
		if (n++ == 0)
			*idx = i;
		int w = snprintf(list + at, cap - at, "%s%d", n > 1 ? ", " : "", i + 1);
		if (w > 0 && (size_t)w < cap - at)
			at += (size_t)w;
	}
	return n;
}

int history_select(const struct history *h, const char *sel, int *first, int *last,
		   char *err, size_t errlen)
{
	char list[256] = "", *end;
	int idx = 0, n;

	*first = 0;
	*last = h->n_conv - 1;
	if (!sel || !*sel)
		return 0;
	long k = strtol(sel, &end, 10);
	if (!*end && end != sel) {
		if (k < 1 || k > h->n_conv)
			return sekv_errf(err, errlen, SEKV_ENOTFOUND, "--conversation %s: the file has %d "
					 "conversation%s (1..%d)", sel, h->n_conv,
					 h->n_conv == 1 ? "" : "s", h->n_conv);
		*first = *last = (int)k - 1;
		return 0;
	}
	if (!(n = titled(h, sel, strcmp, &idx, list, sizeof list)))
		n = titled(h, sel, strcasecmp, &idx, list, sizeof list);
	if (n == 0)
		return sekv_errf(err, errlen, SEKV_ENOTFOUND, "--conversation %s: no conversation has "
				 "this title (give its number, 1..%d)", sel, h->n_conv);
	if (n > 1)
		return sekv_errf(err, errlen, SEKV_EINVAL, "--conversation %s: %d conversations have "
				 "this title (numbers %s): give one number", sel, n, list);
	*first = *last = idx;
	return 0;
}
