/* history.h - chat histories read into conversations of messages: ChatGPT's
 * conversations.json (a list of conversations, each a tree of nodes in
 * "mapping": the current branch is followed from current_node up to the
 * root through "parent"), JSONL of {role, content} (one message a line) and
 * plain "role: text" transcripts. Pure: no model, no library; rendering the
 * turns and storing them live in app/import.c.
 *
 * Kept: user and assistant messages with text, and system messages with
 * text that are not hidden (app/import.c puts them at the top of the next
 * question, as Gemma's template puts a system text in the user turn). Skipped and counted: nodes without
 * a message, messages hidden from the conversation (ChatGPT's
 * metadata.is_visually_hidden_from_conversation), tool messages (and roles
 * other than user, assistant, system), messages whose content type is not
 * text (code, execution output, browsing), non-text parts (images, files)
 * and messages left without text.
 */
#ifndef SEKV_APP_HISTORY_H
#define SEKV_APP_HISTORY_H

#include <stddef.h>

enum history_kind {
	HISTORY_NONE,       /* not a chat history: a plain document */
	HISTORY_CHATGPT,    /* ChatGPT conversations.json */
	HISTORY_JSONL,      /* {"role": ..., "content": ...} a line */
	HISTORY_TRANSCRIPT, /* "user: ..." / "assistant: ..." lines */
};

enum history_role { HISTORY_USER, HISTORY_ASSISTANT, HISTORY_SYSTEM };

struct history_msg {
	enum history_role role;
	char *text;               /* valid UTF-8, LF line ends, not blank; owned */
};

/* What a conversation's reading left out, by reason. */
struct history_skips {
	int n_null;               /* nodes without a message (a ChatGPT root has none) */
	int n_hidden;             /* messages hidden from the conversation */
	int n_tool;               /* tool messages and roles other than user, assistant, system */
	int n_nontext;            /* messages whose content type is not text */
	int n_part;               /* non-text parts (images, files) of other messages */
	int n_empty;              /* messages with no text */
	int n_off_branch;         /* messages on branches the current node does not follow */
};

struct history_conv {
	char title[256];          /* ChatGPT's title, else "conversation N" or the file name */
	int index;                /* 1-based place in the file (--conversation N) */
	struct history_msg *msg;  /* [n_msg] in conversation order; owned */
	int n_msg;
	struct history_skips skip;
};

struct history {
	enum history_kind kind;
	struct history_conv *conv; /* [n_conv] in file order; owned */
	int n_conv;
};

/* The kind of the file path whose cleaned text is text[0..len) (as
 * extract_text_file gives it). JSONL: a .jsonl/.ndjson name, or a first
 * non-blank line that is a JSON object with a "role". ChatGPT: text that
 * starts with '[' or '{' and holds the key "mapping" (other JSON stays a
 * plain document). Transcript: the first non-blank line is a role line
 * and both a user and an assistant line occur. Else HISTORY_NONE. */
enum history_kind history_detect(const char *path, const char *text, size_t len);
/* "ChatGPT conversations.json", "JSONL", "transcript", "text" (static). */
const char *history_kind_name(enum history_kind k);

/* Reads text[0..len) of file path (for messages) as kind into *h (free
 * with history_free, also after an error). Errors, each naming path:
 * SEKV_EFORMAT for invalid JSON (line and byte), a missing or mistyped
 * field, a message without a role, an unknown role (JSONL), a current_node
 * or parent not in mapping, a cycle in mapping; SEKV_EINVAL for a history
 * without any conversation; SEKV_ENOMEM. */
int history_parse(struct history *h, enum history_kind kind, const char *path,
		  const char *text, size_t len, char *err, size_t errlen);
void history_free(struct history *h); /* NULL is a no-op */

/* The conversations --conversation sel picks: sel NULL or "" is all
 * (*first = 0, *last = n_conv - 1); a number N is the N-th (1-based); any
 * other text is the conversation with that title (exactly, else ignoring
 * case). SEKV_ENOTFOUND (no such number or title), SEKV_EINVAL (a title
 * several conversations have: the message lists their numbers). */
int history_select(const struct history *h, const char *sel, int *first, int *last,
		   char *err, size_t errlen);

#endif
