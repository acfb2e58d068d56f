/* app.h - the sub-commands and the pieces they share: loading the model and
 * tokenizer, ingesting a document (app/ingest.c), and a stored document
 * opened for questions (app/session.c; the conversation itself is
 * engine/conv/conv.c). Only app/ calls exit(). */
#ifndef SEKV_APP_H
#define SEKV_APP_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "app/config.h"
#include "engine/conv/chat.h"

struct model;
struct tok;
struct store;
struct sekv_mem;
struct sekv_ctx;
struct model_state;

struct sekv_router_w;
/* The trained router's weights file of o's model into buf [cap]:
 * o->router_weights, else assets/router/MODEL.bin (MODEL: the model
 * file's name without ".gguf"; app_asset_path). Pure. */
void app_router_weights_path(const struct app_opts *o, char *buf, size_t cap);
/* With router == SEKV_ROUTER_TRAINED, loads that file for model m into
 * *out (malloc'ed; free()), refusing another model's (SEKV_EMISMATCH) or
 * a damaged file (SEKV_EFORMAT, SEKV_EIO; err names it); other routers:
 * *out = NULL, 0. */
int app_router_load(const struct app_opts *o, const struct model *m, int router,
		    struct sekv_router_w **out, char *err, size_t errlen);

/* Opens the model (o->model) and its tokenizer (o->tokenizer when given,
 * else the GGUF vocabulary). Either out pointer may be NULL to skip it; the
 * model pointer is required when *tk is built from the GGUF. */
int app_load(const struct app_opts *o, struct model **m, struct tok **tk,
	     char *err, size_t errlen);

/* Prints "sekv CMD: note: ..." once (unless quiet) when the model's chat
 * template is not one sekv knows, so its documents get the completion
 * format (chat_template_init's note). m and tk borrowed for the call. */
void app_template_note(const char *cmd, const struct model *m, const struct tok *tk, int quiet);

/* The system instruction of a document's prompt (chat_build_turn's system:
 * the chat-template format only; the completion format has none). Chosen
 * on bench-qa (69 questions, -n 32) with Qwen2.5-Coder-0.5B-Instruct under
 * llama.cpp: "Answer questions about the document from its text. Quote
 * the document where you can." 41; adding "Reply with the answer only, in
 * a few words copied from the document." 39, or "Keep answers short: a
 * few words, not a full sentence." 39; "You are given a document. Answer
 * each question with a short phrase copied exactly from the document. Do
 * not repeat the question." 37; this one 46 (answers in the document's
 * own words and case). */
#define APP_DOC_SYSTEM \
	"Answer each question about the document in as few words as possible, copying the words " \
	"from the document."

/* Progress of one ingest stage (borrowed for the callback). */
struct app_ingest_progress {
	const char *stage;   /* "pages" (PDF pages read), "extract" (bytes of
	                        text), "count" (bytes tokenized while counting),
	                        "document" (once, when doc was created or taken
	                        up by a resume: nothing to show), "prefill"
	                        (tokens), "stored" (once, when doc turned ready:
	                        nothing to show; more says what follows) */
	const char *path;    /* the input file */
	long long done;      /* units of the stage */
	long long total;
	double rate;         /* units/s so far */
	double eta_s;        /* seconds left at that rate, -1 before a rate is known */
	int final;           /* 1 on the stage's last report */
	int64_t doc;         /* the document being written (or, between the parts
	                        of a split ingest, the part a resume continues
	                        from), 0 before it exists */
	int more;            /* "stored": 1 when parts of a split ingest follow
	                        (a resume of doc stores them), else 0 */
	int page, n_page;    /* "prefill" of a PDF: the page (1-based) of the
	                        last token prefilled, of n_page (a resumed
	                        part: its last page); else 0, 0 */
};
typedef void (*app_ingest_progress_fn)(void *ud, const struct app_ingest_progress *p);

/* Ingests path: extract (by input kind: PDF pages reported one by one,
 * then the text), count tokens (a document longer than the model's
 * context, or than o->max_tokens, is refused with SEKV_EINVAL before
 * anything is stored, naming both lengths, unless o->max_tokens keeps its
 * first tokens or o->split cuts it in parts: app_plan), then per part,
 * each its own document: tokenize, create the document with its resume
 * state and a PDF's page map, prefill in chunks, commit every chunk in its
 * own transaction (with what a resume needs: a failure or a crash leaves
 * that part's document in state prefill, "incomplete" in `sekv ls`, for
 * app_ingest_resume; parts before it stay ready, parts after it are
 * created by its resume), build and store the SeKV memory. A part with
 * parts after it keeps its resume state, as their continuation, until the
 * next part's document is created (in that transaction): an interruption
 * between parts leaves the last part stored resumable, app_ingest_resume
 * then storing the rest. A split ingest records a fingerprint of the whole
 * text that a resume checks. fn (may be NULL) sees every stage's progress;
 * the first report comes during extraction. *ids (malloc'ed, caller
 * frees; NULL when none) gets the documents this run stored, *n_ids of
 * them, in part order (a chat history: one per conversation), also after
 * an error (the last one then the incomplete document, if any). Returns 0
 * or a negative code; after an error err goes on to say what the library
 * was left with: the incomplete document (its id, --resume or rm) and, of
 * a split document, the parts stored before it and those never started
 * (and which document's resume stores them). */
int app_ingest_parts(const struct app_opts *o, const char *path, app_ingest_progress_fn fn,
		     void *ud, int64_t **ids, int *n_ids, char *err, size_t errlen);
/* app_ingest_parts for one document: *doc_id is the first part's. */
int app_ingest(const struct app_opts *o, const char *path, app_ingest_progress_fn fn,
	       void *ud, int64_t *doc_id, char *err, size_t errlen);

/* Continues the interrupted ingest of document doc_id (state prefill) in
 * library o->db from its last committed chunk: re-tokenizes the stored
 * text, restores the global rows, the sliding-window rows, the surprisal
 * and H2O's probe at that chunk, prefills the rest with the settings the
 * ingest was started with (--batch, --alpha, --budget, ... of o are not
 * used), builds and stores the memory. A part of a split document is a
 * document of its own: its page map was stored when it was created. The
 * stored memory is then the one an uninterrupted ingest stores (bit for
 * bit at -t 1). Part i of n of a --split ingest then goes on with parts
 * i+1..n as that ingest would have stored them; part i may also be ready
 * already, its state kept as their continuation (an ingest interrupted
 * between parts), and then only they are stored. Before anything is
 * stored, the source file (the document's source; o->password for an
 * encrypted PDF, else asked for on a terminal) is read and planned again
 * at the stored limit: its whole text must have the fingerprint recorded
 * when the split ingest began, and give n parts with part i's text byte
 * for byte the stored one's, else SEKV_EMISMATCH (or the read's error) and
 * err says why and how to go on; the library is then as it was, part i
 * still resumable. Titles "TITLE (part j/n)" keep the stored title's
 * TITLE. fn as app_ingest's (the first report, "document", comes before
 * the model loads). *ids (malloc'ed, caller frees; NULL when none) gets
 * doc_id once this run completed it (or found it ready) and the documents
 * created after it, *n_ids of them, in part order, also after an error
 * (err then names, as app_ingest_parts' does, what a later part left). 0,
 * SEKV_EINVAL (the document is complete), SEKV_ENOTFOUND (no such
 * document, or no resume state), SEKV_EMISMATCH (another model or
 * tokenizer, or the file changed), or another code. */
int app_ingest_resume(const struct app_opts *o, int64_t doc_id, app_ingest_progress_fn fn,
		      void *ud, int64_t **ids, int *n_ids, char *err, size_t errlen);

/* ---- what ingest stores of a document (app/ingest_plan.c) ---------- */
struct extract_doc;
struct app_part {
	size_t start, end;   /* bytes [start, end) of the document's text */
	int n_tok;           /* tokens of its document turn */
};
struct app_plan {
	int n_tok;           /* tokens of the whole document's turn */
	int limit;           /* most tokens of a part: the model's context or
	                        --max-tokens, the smaller; 0 = none */
	int cut;             /* 1: only the first part of a longer document
	                        is kept (--max-tokens without --split) */
	int n_part;
	struct app_part *part; /* [n_part], consecutive, in text order */
};
/* Plans text [len] (valid UTF-8) against the limit: one part when it
 * fits; else with split, consecutive parts each within the limit, cut
 * after a paragraph, line, sentence or word end in the last eighth of the
 * room where there is one; else with max_tokens > 0, only the first such
 * part (pl->cut); else SEKV_EINVAL naming both lengths and the options.
 * n_ctx: the model's context (0: none). ct, tk borrowed. app_plan_free
 * the plan (also after an error). */
int app_plan(struct app_plan *pl, const struct chat_template *ct, const struct tok *tk,
	     const char *text, size_t len, int n_ctx, int max_tokens, int split,
	     char *err, size_t errlen);
void app_plan_free(struct app_plan *pl);
/* The page map of text bytes [a, b) of x (a PDF): *page0 (1-based) its
 * first page, *start malloc'ed [*n_page] offsets from a (caller frees).
 * A text document gives *n_page = 0, *start NULL. 0 or SEKV_ENOMEM. */
int app_part_pages(const struct extract_doc *x, size_t a, size_t b, int *page0, int *n_page,
		   int64_t **start);
/* One line saying how path was read (encoding and conversion, invalid
 * bytes replaced; a PDF's pages, those without text, headers removed,
 * words joined, ligatures) into buf [cap]. Outside text: print inert. */
void app_extract_describe(const char *path, const struct extract_doc *x, char *buf, size_t cap);
/* extract_params.ask_password for a terminal: asks on stderr, reads
 * stdin with echo off. -1 when stdin is not a terminal or at its end. */
int app_ask_password(void *ud, const char *path, int wrong, char *buf, size_t cap);

struct store_doc;
/* The exact KV of every global layer of stored document d (read with
 * store_doc_get) into the caller's buffers k[l], v[l] [n_tok][n_head_kv]
 * [d_h] fp16, l < the model's n_global (v[l] may all be one scratch buffer
 * when only keys are wanted): read from the library when the document
 * kept them (--keep-full-kv), else prefilled again from its stored tokens
 * in batches of n_batch, in a model state of its own (about the time its
 * ingest's prefill took; *prefill_s, when not NULL, gets the seconds, 0
 * when read). m and st are borrowed; m must be the model the document was
 * ingested with (else SEKV_EMISMATCH). 0 or a negative code. */
int app_full_kv_load(const struct model *m, struct store *st, const struct store_doc *d,
		     int n_batch, uint16_t *const *k, uint16_t *const *v, double *prefill_s,
		     char *err, size_t errlen);

/* Rebuilds document doc_id's SeKV memory in library o->db for another
 * budget (a fraction of its full KV) from what the library stores: tokens,
 * surprisal and the global layers' exact KV (app_full_kv_load: a forward
 * pass only when the document did not keep them). The new
 * memory (o's --alpha, --rmax, --recent, as ingest builds it) replaces
 * the stored one and its budget (store_doc_put_mem). m is the loaded
 * model (borrowed; its backend runs the SVD). 0 or a negative code
 * (SEKV_EMISMATCH: ingested with another model). `sekv eval` measures
 * every budget on one prefill this way. */
int app_mem_rebuild(const struct app_opts *o, const struct model *m, int64_t doc_id, double budget,
		    char *err, size_t errlen);
/* "ingest: ..." lines on stderr: the segmentation, the tiers' bytes
 * against the full KV and what the factors keep (mem borrowed). */
void app_mem_print(const struct sekv_mem *mem);

/* A progress printer for stderr (app/ingest_meter.c): a live line on a
 * terminal; in a log, a line per committed chunk (at most one a second)
 * while prefilling, per tenth of the other stages. ud of app_ingest_print
 * is a meter set up by app_ingest_meter_init (one per ingest). */
struct app_ingest_meter {
	char stage[16];   /* stage being shown */
	double last;      /* seconds (clk_now) of the last line */
	int last_tenth;   /* tenth of the stage last printed, -1 none */
	int tty;          /* stderr is a terminal */
};
void app_ingest_meter_init(struct app_ingest_meter *mt);
void app_ingest_print(void *ud, const struct app_ingest_progress *p);

/* Writes s[0..n) to f as text for a terminal: control characters (ESC,
 * BEL, DEL, C1 such as U+009B, CR) are dropped, newlines and tabs kept,
 * malformed UTF-8 becomes U+FFFD (ui_text_inert). For all plain-text ask
 * output, to a terminal or not (a pipe may end in `less -R`). */
void app_print_inert(FILE *f, const char *s, size_t n);

/* Copy of the JSON text json (valid UTF-8, as cJSON prints it from valid
 * strings) with DEL and the C1 controls U+0080..U+009F written as \u
 * escapes, which cJSON leaves raw (it escapes only < 0x20). Malloc'ed, the
 * caller frees; NULL when out of memory. */
char *app_json_inert_dup(const char *json);

/* printf to stderr through app_print_inert: every message that may hold a
 * file name, a title or other outside text (at most 4,095 bytes are kept). */
void app_errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Evidence passages of one answer (app/evidence.c; engine/evidence/evidence.h). */
#include "engine/evidence/evidence.h"
struct session;
struct cJSON;
struct store_turn;
/* A stored document's page map (store_doc_get_pages): n_page = 0 for a
 * document from a text file. */
struct app_pages {
	int page0;          /* number of the first page (1-based) */
	int n_page;
	int64_t *start;     /* [n_page] byte where each page starts, malloc'ed */
};
/* Loads document doc's page map from st into pg (n_page = 0 when it has
 * none). 0 or a negative code. app_pages_free it. */
int app_pages_load(struct app_pages *pg, struct store *st, int64_t doc, char *err, size_t errlen);
void app_pages_free(struct app_pages *pg);
/* The pages of text bytes [a, b) into *first, *last (page numbers);
 * 0 when pg has no map (nothing set), else 1. */
int app_pages_of(const struct app_pages *pg, int64_t a, int64_t b, int *first, int *last);
/* "p. 12" or "pp. 12-13" for bytes [a, b) into buf [cap], "" without a map. */
void app_pages_text(const struct app_pages *pg, int64_t a, int64_t b, char *buf, size_t cap);
struct app_evidence {
	int on;                       /* probing (not --no-evidence) */
	int n_head;
	struct evidence_head head[EVIDENCE_MAX_HEADS];
	struct model_probe probe;
	float *mass;                  /* [n_head][n_pos] question text and answer */
	float *base;                  /* [n_head][n_pos] the turn's fixed part */
	int n_pos;                    /* document tokens */
	char *text;                   /* the document's text (after _end) */
	size_t text_len;
	int exact;                    /* 1: exact character ranges */
	int n_pas;
	int top;                      /* passages wanted (--evidence-top) */
	struct evidence_passage *pas; /* [n_pas], best first (after _end) */
	struct app_pages pages;       /* the document's page map (a PDF), after _end */
};
/* Chooses the heads (--evidence-heads; else stored for the model; else a
 * calibration, stored) and probes the session's conversation for the next
 * answer. With --no-evidence only clears ev. 0 or a negative code. */
int app_evidence_begin(struct app_evidence *ev, const struct app_opts *o, struct session *s,
		       const struct model *m, const struct tok *tk, char *err, size_t errlen);
/* Stops the probe and ranks passages (ev->pas). 0 or a negative code. */
int app_evidence_end(struct app_evidence *ev, struct session *s, const struct tok *tk,
		     char *err, size_t errlen);
/* Passage p (its rank, start, end, peak and score are read) of document
 * text [text_len bytes] with page map pg as one line into buf [cap]
 * (NUL-terminated): "rank. [start, end) score%  snippet", with "p. N" (or
 * "pp. N-M") after the rank for a PDF. The snippet (about 100 bytes) starts
 * a little before the peak, on a word ("..." first), or at start when the
 * peak is not inside the passage; a range outside the text says so in its
 * place. The one formatter of a passage's line: `ask` prints it, `chat`
 * shows it for live answers and for stored rows. The snippet is raw
 * document text: make it inert before showing it. */
void app_evidence_format(const char *text, size_t text_len, const struct app_pages *pg,
			 const struct evidence_passage *p, char *buf, size_t cap);
/* The chat transcript's note for passage p: "evidence " and
 * app_evidence_format's line, into buf [cap] (APP_EVIDENCE_NOTE fits it). */
#define APP_EVIDENCE_NOTE 300
void app_evidence_note(const char *text, size_t text_len, const struct app_pages *pg,
		       const struct evidence_passage *p, char *buf, size_t cap);
/* The notes of stored turns' evidence, for a resumed chat's transcript. */
struct app_evidence_notes {
	char *buf;           /* [n_note][APP_EVIDENCE_NOTE] the lines, malloc'ed */
	const char **note;   /* [n_note] into buf: turn 0's rows, then turn 1's, ... */
	int n_note;          /* the turns' n_ev summed */
};
/* Fills nt with one note (app_evidence_note) per evidence row of turns
 * t [n] (store_session_turns_dup; borrowed), in order, turn i's t[i].n_ev
 * notes after those of the turns before it; each row's snippet starts
 * near its stored peak, as the live line did. Reads document doc's text and page map
 * from st only when a turn has rows. 0 (nt empty when no turn has rows),
 * or a negative code (store_doc_text_dup, app_pages_load, SEKV_ENOMEM)
 * with nt empty. app_evidence_notes_free it. */
int app_evidence_notes_load(struct app_evidence_notes *nt, struct store *st, int64_t doc,
			    const struct store_turn *t, int n, char *err, size_t errlen);
void app_evidence_notes_free(struct app_evidence_notes *nt); /* an empty nt is a no-op */
/* A stored session's transcript for the chat screen (cmd_chat.c). */
struct ui_turn;
struct app_transcript {
	struct store_turn *turns;        /* [n] store_session_turns_dup, owned */
	int n;
	struct ui_turn *ut;              /* [n] the screen's turns (ui/ui.h), malloc'ed,
	                                    pointing into turns and notes */
	struct app_evidence_notes notes; /* each answer's evidence lines */
	char why[256];                   /* "" or why the evidence is not shown */
};
/* Reads session's turns from st with each answer's evidence lines
 * (app_evidence_notes_load over doc, the session's document) into tr:
 * ut[i] shows turns[i] and its turns[i].n_ev rows; a turn imported from a
 * chat history has none. Evidence that cannot be read is left out and said in
 * tr->why. 0, or the code of store_session_turns_dup or SEKV_ENOMEM with
 * err filled and tr empty. app_transcript_free it. */
int app_transcript_load(struct app_transcript *tr, struct store *st, int64_t session,
			int64_t doc, char *err, size_t errlen);
void app_transcript_free(struct app_transcript *tr); /* an empty tr is a no-op */
/* One line of at most max bytes (max >= 8) of text[a, b) into out: white
 * space runs become one space, cut on a UTF-8 boundary ("..." when cut).
 * Raw text: make it inert before showing it. */
void app_evidence_snippet(const char *text, int64_t a, int64_t b, char *out, size_t max);
/* "Evidence:" block: rank, [start, end) bytes, score %, inert snippet. */
void app_evidence_print(const struct app_evidence *ev, FILE *f);
/* [{rank, start, end, position, text, score}] (a new cJSON array), with
 * page_first and page_last (page numbers) for a PDF. */
struct cJSON *app_evidence_json(const struct app_evidence *ev);
void app_evidence_free(struct app_evidence *ev);
/* Runs the needle calibration (engine/evidence/evidence.h) for m, picks the top 3
 * heads into head [*n_head], reports scores on stderr unless quiet, and
 * stores them for the model in st (when not NULL). */
int app_evidence_calibrate(const struct model *m, const struct tok *tk, struct store *st,
			   int quiet, struct evidence_head *head, int *n_head,
			   char *err, size_t errlen);
/* Adds s to o as a JSON string, made valid UTF-8 first (cmd_ask.c). */
void app_json_add_text(struct cJSON *o, const char *key, const char *s);

/* The device tier of a SeKV answer by kind of row, bytes: the memory's
 * static parts (sekv_mem_tier_parts), then the conversation's and the
 * zoomed rows' peaks over the answer (conv_answer.peak_tail_bytes,
 * peak_recon_bytes); they sum to its resident bytes. `ask --json` and
 * `sekv eval` report them under these names (cmd_ask.c). */
#define APP_TIER_N 8
extern const char *const app_tier_name[APP_TIER_N];
struct sekv_tier_parts;
void app_tier_bytes(const struct sekv_tier_parts *tp, double conversation, double zoomed,
		    double out[APP_TIER_N]);
/* Adds "device_tier": {budget, <app_tier_name>: bytes ...} to o. */
void app_json_add_device_tier(struct cJSON *o, double budget_bytes, const double part[APP_TIER_N]);

/* Sub-commands: argc/argv are the words after the sub-command name.
 * Each returns a process exit status. */
int cmd_inspect(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_ingest(int argc, char **argv);
int cmd_count(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_rm(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_sessions(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_ask(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_train(int argc, char **argv);

#endif
