/* ingest_int.h - the state of one ingest, shared by ingest.c (the stages
 * of a new document, its parts, chat histories) and ingest_resume.c
 * (continuing an interrupted one); not for other modules.
 */
#ifndef SEKV_APP_INGEST_INT_H
#define SEKV_APP_INGEST_INT_H

#include "app/app.h"
#include "app/extract.h"
#include "engine/conv/chat.h"
#include "engine/model/model.h"
#include "engine/sekv/sekv.h"
#include "store/store.h"

struct import_conv;

struct ingest {
	const struct app_opts *o;
	const char *path;
	app_ingest_progress_fn fn;
	void *ud;
	struct model *m;
	struct tok *tk;
	const struct model_hparams *hp;
	struct chat_template ct;
	struct extract_doc x;       /* the whole document (resume: the stored one's
	                               text and page map) */
	int page_base;              /* pages before x's first: 0, or a resumed
	                               part's first page number - 1 */
	struct app_plan plan;
	int part;                   /* the part being stored, 0..plan.n_part-1 */
	int part0;                  /* the first part this run stores (a resumed
	                               split ingest: the resumed one), 0 otherwise */
	int64_t *ids;               /* [plan.n_part] documents stored so far,
	                               from part0 on */
	int more_parts;             /* 1: parts after this one are still to be
	                               stored (a split ingest's part but the last):
	                               its resume state stays, as their
	                               continuation, when it turns ready */
	char text_fp[17];           /* split: FNV-1a 64 of x's whole text, hex */
	double t_pages;             /* clk_now when extraction started */
	struct import_conv *chat;   /* a chat history's conversation (app/import.h), or NULL */
	int64_t session;            /* chat: the session holding its turns */
	char *chat_text;            /* chat: its rendering, the document's text (owned) */
	const char *text;           /* the part's text (in x.text, or chat_text), text_len bytes */
	size_t text_len;
	int32_t *tok_byte;          /* [tv.n] byte of each token in text, -1 outside
	                               (a PDF's, for the page in prefill progress) */
	struct chat_tokvec tv;      /* document tokens */
	struct store *st;
	struct store_doc doc;       /* the part's document; id 0 before it exists */
	struct model_state *ms;
	float *surprisal;           /* [n_tok] nats */
	uint16_t *glob_k[MODEL_MAX_LAYER]; /* [n_global][n_tok][n_head_kv][d_h] fp16 */
	uint16_t *glob_v[MODEL_MAX_LAYER];
	double prefill_s;
	double commit_s;            /* seconds spent committing chunks */
	double build_s;
	struct sekv_mem *mem;
	struct model_probe h2o_probe; /* every (global layer, query head) pair of the
	                                 prefill, mass [n][n_tok]; n = 0: none */
	float *h2o;                 /* [n_global][n_head_kv][n_tok] H2O's scores, or NULL */
	int pos_start;              /* first position this run prefills (resume: > 0) */
	float h_start;              /* surprisal of token pos_start, stored by the run
	                               that committed the chunk before it */
	int n_swa;                  /* sliding-window layers */
	int32_t swa_id[MODEL_MAX_LAYER];  /* [n_swa] their model layer ids */
	uint16_t *swa_k[MODEL_MAX_LAYER]; /* [n_swa] -> [swa_window][n_head_kv][d_h] fp16 */
	uint16_t *swa_v[MODEL_MAX_LAYER]; /* scratch: the rows each chunk commits */
};

/* The stages ingest_resume.c runs again (ingest.c): each 0 or a negative
 * code with err filled. */
/* Loads the model, its tokenizer and the prompt format. */
int app_ingest_load(struct ingest *g, char *err, size_t errlen);
/* Reads g->path (a PDF or text; g->o->password, else asked for on a
 * terminal) into g->x, reporting pages and bytes. */
int app_ingest_extract(struct ingest *g, char *err, size_t errlen);
/* The fingerprint of x's whole text (FNV-1a 64, engine/base/hash.h) as 16
 * lowercase hex digits into fp (NUL-terminated). */
void app_ingest_text_fp(const struct extract_doc *x, char fp[17]);
/* Plans g->x against g->o->max_tokens and g->o->split (app_plan) into
 * g->plan, says what is left out or split, and allocates g->ids. */
int app_ingest_plan(struct ingest *g, char *err, size_t errlen);
/* Parts first..plan.n_part-1 of g->plan, each its own document, through
 * every stage; g->ids[part] set as each completes, g->part the one that
 * failed. */
int app_ingest_run_parts(struct ingest *g, int first, char *err, size_t errlen);
/* The document's tokens: its part's text as a document turn, or a chat
 * history's conversation rendered as turns. */
int app_ingest_tokenize(struct ingest *g, char *err, size_t errlen);
/* Buffers of the prefill: surprisal, host copies of the global rows, the
 * sliding-window rows each chunk commits, H2O's probe. */
int app_ingest_prefill_alloc(struct ingest *g, char *err, size_t errlen);
/* From the document row on: prefill (from pos_start), build, persist. */
int app_ingest_finish(struct ingest *g, char *err, size_t errlen);
/* What one part holds (tokens, prefill buffers, memory, document row);
 * the model, tokenizer, library, text and plan stay. */
void app_ingest_part_free(struct ingest *g);
/* Appends to err what a failed ingest left in the library: the part
 * being written (incomplete: its id, --resume or rm), of a split document
 * the parts stored from g->part0 on and those never started. */
void app_ingest_note_left(struct ingest *g, char *err, size_t errlen);
/* Reports the "document" stage: g->doc is the document being written
 * (the id an interruption names). */
void app_ingest_report_doc(struct ingest *g);
/* The documents this run stored, in part order, into *ids (malloc'ed,
 * caller frees; NULL when none), *n of them: g->ids[g->part0..g->part-1]
 * (ready) and g->doc once it exists (being written). 0 or SEKV_ENOMEM. */
int app_ingest_ids_dup(const struct ingest *g, int64_t **ids, int *n);
/* Frees everything g holds (model, tokenizer and library included). */
void app_ingest_free(struct ingest *g);

/* ingest_mem.c. The SeKV build's parameters from the options, at budget
 * (a fraction of the full KV); sp is overwritten. */
void app_ingest_mem_params(const struct app_opts *o, const struct model *m, double budget,
			   struct sekv_params *sp);
/* Sets sp->anchor_score for a document of n_tok tokens as --anchors says:
 * NULL for surprisal, else from H2O's scores h2o [n_global][n_head_kv]
 * [n_tok] (sekv_anchor_score_attention; with "both" its union with
 * surprisal [n_tok], sekv_anchor_score_union). Without h2o (none recorded)
 * the anchors stay by surprisal and a note says so. *buf is what to free
 * after sekv_build (malloc'ed, or NULL). 0 or SEKV_ENOMEM. */
int app_ingest_anchor_score(const struct app_opts *o, const struct model_hparams *hp,
			    const float *h2o, const float *surprisal, int n_tok, struct sekv_params *sp,
			    float **buf, char *err, size_t errlen);

#endif
