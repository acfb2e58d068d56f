/* train.h - training the SeKV router with the base model frozen (DESIGN.md
 * section 3; issue 19 item 3): teacher labels from exact attention, the
 * student's zoom loss with hand-written gradients, AdamW with warmup and
 * cosine decay, tau calibration, and the files a training run writes
 * (checkpoint, data cache, weights).
 *
 * The student is struct sekv_router_w (engine/sekv/sekv.h): per global
 * layer l and query head h, z_S = a x_S + b + <W q, normalize(W k_bar_S)>
 * / sqrt(d') over the compressed spans S of a memory, x_S being the
 * landmark router's logit(alpha_S) at the same query. Collecting the
 * queries (a model, a memory, a decode) lives in app/cmd_train.c; this
 * module is pure arithmetic and files, single-threaded and deterministic.
 */
#ifndef SEKV_TRAIN_H
#define SEKV_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "engine/sekv/sekv.h"

/* One memory's compressed spans as the student sees them. */
struct train_doc {
	int n_comp;
	int32_t *len;     /* [n_comp] span lengths, tokens */
	float *k_bar;     /* [n_layer][n_comp][n_head_kv][d_h] summary keys */
};

/* One query of one (global layer, query head): its spans' features and
 * labels live at off .. off + n_comp - 1 of the set's per-span arrays. */
struct train_sample {
	int32_t doc, layer, head;
	int32_t n_comp;   /* = the doc's n_comp */
	int64_t off;
	float w;          /* weight: share of the head's document attention on
	                     compressed spans (what mass_recall can lose) */
};

/* Training (or held-out) data: samples over docs, all of one shape. */
struct train_set {
	int n_layer, n_head, n_head_kv, d_h;
	int n_doc, cap_doc;
	struct train_doc *doc;      /* [n_doc] */
	int n_sample, cap_sample;
	struct train_sample *s;     /* [n_sample], grouped by doc */
	float *q;                   /* [n_sample][d_h] the head's query, unscaled */
	int64_t n_span, cap_span;
	float *x;                   /* [n_span] landmark logit of each span */
	float *mass;                /* [n_span] share of the head's compressed mass */
	uint8_t *y;                 /* [n_span] teacher label: 1 = in the cover */
};

/* Teacher label (issue 19): y [n] = 1 on the smallest set of spans whose
 * mass [n] (>= 0, any scale) reaches rho (0..1] of the total: the spans by
 * descending mass (ties: lower index first) until the running sum reaches
 * rho * total. All zero when the total is 0. Returns the count of ones.
 * order [n] is scratch. Pure. */
int train_label(const double *mass, int n, double rho, uint8_t *y, int32_t *order);

void train_set_init(struct train_set *t, int n_layer, int n_head, int n_head_kv, int d_h);
void train_set_free(struct train_set *t); /* NULL-safe; leaves t empty */
/* Adds memory m's compressed spans (k_bar to fp32, lengths) as a new doc;
 * *doc gets its index. SEKV_EINVAL (shape differs from the set's),
 * SEKV_ENOMEM. */
int train_set_add_doc(struct train_set *t, const struct sekv_mem *m, int *doc);
/* Adds the samples of one routed step of global layer v->layer of doc
 * (v from sekv_ctx_route_view with x and mass set; q [n_head][d_h] the
 * step's queries): for each query head whose compressed share of its
 * document mass is at least w_min (and positive) one sample, labelled by
 * train_label with rho. Strict causality holds by construction: every
 * span of the memory ends before the decoded position. Returns the
 * samples added (>= 0), SEKV_EINVAL or SEKV_ENOMEM. */
int train_set_add_step(struct train_set *t, int doc, const struct sekv_route_view *v,
		       const float *q, double rho, double w_min);

/* What the student's sigmoid(z_S) is trained towards. */
enum train_target {
	/* the rho-cover labels y (DESIGN.md section 3): weighted BCE, each
	 * sample weighted by its head's compressed share w */
	TRAIN_TARGET_COVER,
	/* the span's share p_S = w * mass_S of the head's whole document
	 * attention: soft-label BCE, every sample alike. Its optimum is
	 * sigmoid(z_S) = p_S, a score comparable across heads, which is what
	 * the budget compares when it keeps a layer's best candidates over all
	 * its KV heads (attend.c); the cover labels are per head and are not. */
	TRAIN_TARGET_SHARE,
};

/* Loss weights of the student. */
struct train_hyper {
	int target;         /* enum train_target (TRAIN_TARGET_COVER) */
	float pos_weight;   /* cover: BCE weight of positive labels (10) */
	float lambda_budget;/* weight of the budget loss: expected share of the
	                       compressed tokens zoomed (0.05) */
	int train_w;        /* 1: W is trained (the <W q, kappa> term), 0: a, b only */
};
void train_default_hyper(struct train_hyper *h);

/* Parts of a loss evaluation, weighted means over the samples. */
struct train_loss {
	double total, bce, budget;  /* bce: the target's term (share: sum over
	                               spans of KL(Bernoulli(p_S) || Bernoulli(
	                               sigmoid(z_S))), 0 when exact) */
	double pos_recall;  /* weighted mean over samples of the teacher mass on
	                       the student's k best spans by z over the mass of
	                       the head's rho cover, k the cover's size (1: the
	                       student ranks as the teacher; comparable across
	                       targets) */
	double w_sum;       /* sum of sample weights */
};

/* Parameters as one flat vector (AdamW works on it): a [L*H], b [L*H],
 * tau [L*H] (not trained), W [L*H*D*d_h] (present even when frozen). */
struct train_params {
	size_t n;           /* floats in v */
	float *v;
	struct sekv_router_w rw; /* views into v (rw.w NULL when !with_w) */
};
/* Allocates params for the shape, a = 1, b = 0, tau = 0 and W = w_init
 * scaled by w_scale ([L][H][D][d_h], e.g. the untrained memory's route_w;
 * NULL: zeros, which makes the W term 0 and its gradient 0). with_w: rw.w
 * set. SEKV_ENOMEM. */
int train_params_new(struct train_params *p, int n_layer, int n_head, int d_h,
		     const float *w_init, float w_scale, int with_w);
void train_params_free(struct train_params *p);

/* Loss of samples idx [n] of t under p (z_S as above; cover: per sample
 * w * (mean_S BCE_S(pos_weight) + lambda_budget * sum_S sigmoid(z_S) |S| /
 * sum_S |S|), summed and divided by the weights' sum; share: per sample
 * sum_S KL(Bernoulli(p_S) || Bernoulli(sigmoid(z_S))) + the same budget
 * term, averaged over the samples) into *out; with grad
 * (same n as p, zeroed here) also its gradient with respect to p's vector
 * (hand-written; tau's part is 0; W's only with h->train_w). Returns 0,
 * SEKV_EINVAL (an index out of range) or SEKV_ENOMEM. */
int train_loss_eval(const struct train_set *t, const struct train_params *p,
		    const struct train_hyper *h, const int32_t *idx, int n, float *grad,
		    struct train_loss *out);

/* AdamW (Loshchilov and Hutter 2019) with linear warmup then cosine decay
 * to lr_min. */
struct train_adam {
	float lr, lr_min;   /* peak and final learning rate */
	float beta1, beta2, eps, weight_decay; /* decay on W only */
	int warmup, total;  /* steps */
	long step;          /* steps done */
	float *m, *v;       /* [n] moments */
	size_t n;
};
int train_adam_new(struct train_adam *a, size_t n, float lr, int warmup, int total);
void train_adam_free(struct train_adam *a);
/* The learning rate of step s (0-based): lr * (s+1)/warmup during warmup,
 * then lr_min + (lr - lr_min) (1 + cos(pi * progress)) / 2. Pure. */
float train_lr_at(const struct train_adam *a, long s);
/* One update of p with gradient g; the decay applies to W's entries
 * (index >= w0) only. */
void train_adam_step(struct train_adam *a, struct train_params *p, const float *g, size_t w0);

/* Deterministic generator (splitmix64). */
uint64_t train_rand(uint64_t *state);

/* Per (layer, head): tau = sigmoid of the z value below which lies
 * 1 - recall of the head's weighted teacher mass over t's samples (the
 * zooms it may skip when the budget is loose); heads without samples get
 * 0 (zoom all). Writes p->rw.tau. SEKV_ENOMEM. */
int train_calibrate_tau(const struct train_set *t, struct train_params *p, double recall);

/* ---- files (train_io.c) ---------------------------------------------- */

/* Loss history entry of a run. */
struct train_hist {
	double step, lr, train, val, bce, budget, recall, val_recall;
};

/* The resumable state of a run. */
struct train_ckpt {
	struct train_params p;
	struct train_adam adam;
	uint64_t rng;
	int n_hist, cap_hist;
	struct train_hist *hist;
};
/* Writes c atomically (path.tmp, then rename). 0 or SEKV_EIO with err. */
int train_ckpt_save(const struct train_ckpt *c, const char *path, char *err, size_t errlen);
/* Reads a checkpoint into c, whose params and adam must be allocated with
 * the same n (their values are replaced). SEKV_EIO (unreadable),
 * SEKV_EFORMAT (bad magic, a size that does not match, a truncated file or
 * a checksum that fails), SEKV_ENOMEM. */
int train_ckpt_load(struct train_ckpt *c, const char *path, char *err, size_t errlen);
int train_hist_push(struct train_ckpt *c, const struct train_hist *h);
/* dst becomes a copy of src's state (parameters, moments, step, seed,
 * history), as early stopping keeps the best step: both allocated with
 * the same n, else SEKV_EINVAL; SEKV_ENOMEM (history). */
int train_ckpt_copy(struct train_ckpt *dst, const struct train_ckpt *src);

/* Data cache of collected samples (a resumed run does not decode again). */
int train_set_save(const struct train_set *t, const char *path, char *err, size_t errlen);
/* Reads into t (initialised empty). SEKV_EIO, SEKV_EFORMAT (every count
 * and length checked against the file, and its checksum), SEKV_ENOMEM. */
int train_set_load(struct train_set *t, const char *path, char *err, size_t errlen);

/* Router weights file: "SEKVRTW1", the shape, the model fingerprint (16
 * hex digits of model_hparams.fingerprint), a, b, tau (fp32), W (fp16,
 * when present) and an FNV-1a 64 checksum of everything before it; little
 * endian. */
int train_weights_save(const struct sekv_router_w *rw, const char *fingerprint, const char *path,
		       char *err, size_t errlen);
/* Loads weights for a model of fingerprint, n_layer global layers, n_head
 * query heads and d_h: *out malloc'ed (one block; free with free()).
 * SEKV_EIO (unreadable), SEKV_EMISMATCH (another model's fingerprint or
 * shape), SEKV_EFORMAT (bad magic, a length that does not match the
 * shape, trailing or missing bytes, a failed checksum, non-finite or
 * out-of-range values). */
int train_weights_load(struct sekv_router_w **out, const char *path, const char *fingerprint,
		       int n_layer, int n_head, int d_h, char *err, size_t errlen);

#endif
