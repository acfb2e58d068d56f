/* session_int.h - the state of one open session (app/session.c), shared
 * with app/session_exact.c, which opens the methods that read the exact
 * rows (full KV and the rivals at the same budget). Not for other modules.
 */
#ifndef SEKV_APP_SESSION_INT_H
#define SEKV_APP_SESSION_INT_H

#include <stddef.h>
#include <stdint.h>

#include "app/config.h"
#include "app/session.h"
#include "engine/model/model.h"
#include "engine/sekv/sekv.h"
#include "store/store.h"

struct kv_subset;
struct kv_quest;
struct kv_shadow;
struct model_state;
struct model_hparams;

#define SESSION_BATCH 64
#define SESSION_MAX_GLOBAL MODEL_MAX_LAYER /* global layers whose exact rows a session loads */

struct session {
	struct app_opts o;
	const struct model *m;     /* borrowed */
	const struct tok *tk;      /* borrowed */
	struct store *st;
	struct store_doc doc;
	const struct model_hparams *hp;
	struct sekv_mem *mem;      /* SeKV mode */
	struct sekv_ctx *sc;       /* SeKV mode */
	struct sekv_params sp;
	struct sekv_router_w *router_w; /* --router trained's weights (sp.trained), NULL */
	int32_t *tokens;           /* [n_tok] document tokens */
	int n_tok;
	char example[160];         /* worked example's answer (chat_example_of_text, whole words), "" none */
	int64_t stored_id;         /* the session in the library, 0 until the first turn */
	int kv_turns;              /* turns the SeKV memory holds (stored and since) */
	float h_next;              /* a resumed session's conv_next_surprisal */
	int grow;                  /* 1: each turn's KV goes into the memory and the library */
	struct store_session_kv sess_swa; /* a resumed session's sliding-window rows
	                              (its slices already joined and freed) */
	int kv_lost;               /* a turn's KV could not be stored: later ones are not */
	int kv_stored;             /* turns whose KV the library holds */
	uint16_t *xk[SESSION_MAX_GLOBAL]; /* [n_global] exact keys (--router oracle, --mass-recall) */
	uint16_t *xv[SESSION_MAX_GLOBAL]; /* [n_global] exact values (--mass-recall: attn_err) */
	struct kv_subset *sub;     /* --kv streaming, snapkv, h2o: the kept rows */
	struct kv_quest *quest;    /* --kv quest */
	struct kv_shadow *shadow;  /* --kv shadowkv */
	double riv_budget;         /* a rival's budget, a fraction of full_kv_bytes */
	struct model_state *ms;
	struct conv *conv;
	double resume_s;
	char note[512];            /* what the user should know of this memory (why the
	                              budget does not apply, ...), notes joined by "; ", or "" */
	size_t swa_bytes;
	size_t full_kv_bytes;
	int64_t ses_disk_bytes;    /* the stored session's KV in the file (store_session_disk_bytes) */
};

/* Appends one note to s->note, after "; " when it holds one already (cut
 * to fit). */
void session_note_add(struct session *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The exact rows of every global layer (app_full_kv_load: from the
 * library, or prefilled again when the document did not keep them, said
 * on stderr unless quiet and in the note): k[l], v[l] malloc'ed
 * [n_tok][n_head_kv][d_h] fp16 for l < n_global (session_free_rows frees
 * them, also after a failure). v NULL: keys only. 0 or a negative code. */
int session_load_rows(struct session *s, uint16_t **k, uint16_t **v, char *err, size_t errlen);
/* Frees what session_load_rows allocated ([SESSION_MAX_GLOBAL] each; v
 * may be NULL). */
void session_free_rows(uint16_t **k, uint16_t **v);

/* The methods over exact rows, by --kv (session_exact.c); each 0 or a
 * negative code with err filled, the session's note said when a budget
 * was raised or rows were prefilled again:
 * full: every exact row in the model state (the reference); streaming:
 * StreamingLLM's sinks and recent rows; snapkv: SnapKV's votes after its
 * question; h2o: the heavy hitters of the scores stored at ingest;
 * quest: every exact row in the host tier, Quest's pages chosen per step;
 * shadowkv: low-rank pre-RoPE keys and landmarks on the device, values in
 * the host tier, ShadowKV's chunks rebuilt per step. */
int session_open_full(struct session *s, char *err, size_t errlen);
int session_open_streaming(struct session *s, char *err, size_t errlen);
int session_open_snapkv(struct session *s, char *err, size_t errlen);
int session_open_h2o(struct session *s, char *err, size_t errlen);
int session_open_quest(struct session *s, char *err, size_t errlen);
int session_open_shadowkv(struct session *s, char *err, size_t errlen);

#endif
