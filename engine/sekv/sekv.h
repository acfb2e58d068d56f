/* sekv.h - SeKV hierarchical KV memory (SeKV paper, arXiv 2606.31145;
 * shared/DESIGN.md sections 2-4).
 *
 * A document's global-layer KV cache becomes: exact rows (attention sinks,
 * surprisal anchors, short spans, the recent window) and compressed spans,
 * each with a device-tier summary (k_bar, v_bar) and host-tier truncated-SVD
 * factors of its K and V. Decoding routes every query head to the spans that
 * matter, rebuilds them from their factors only, and attends with one
 * softmax over exact rows, coarse rows and reconstructed rows.
 * struct sekv_mem is the durable document memory (persisted by store/);
 * struct sekv_ctx is one decode stream over it (plus its own tail rows).
 * Layer indices below are indices into the global layers (0..n_layer-1)
 * unless named model layers.
 */
#ifndef SEKV_SEKV_H
#define SEKV_SEKV_H

#include <stddef.h>
#include <stdint.h>

#define SEKV_D_ROUTE 32  /* d' of the router (DESIGN.md section 3) */

struct backend;          /* engine/backend/backend.h */
struct model_probe;      /* engine/model/model.h */

#define SEKV_MAX_ZOOM_SHARE 8

struct sekv_params {
	float alpha;         /* boundary threshold mu_t + alpha*sigma_t (1.0) */
	int l_min;           /* spans shorter than this stay exact (4) */
	int n_sink;          /* first tokens always exact (attention sinks) (4) */
	int n_recent;        /* last document tokens always exact (64) */
	const float *anchor_score; /* [n_tok] borrowed for sekv_build: anchors
	                        and span boundaries by this score (same rule:
	                        above its running mean + alpha * deviation)
	                        instead of surprisal, which still weights the
	                        summaries; sekv_anchor_score_attention makes it
	                        (issue 19: anchors by received attention hold
	                        more of the answers' attention); NULL: surprisal
	                        (the paper's rule) */
	int exact_below;     /* a memory of fewer tokens stays exact: no spans
	                        (issue 19: at a small budget a short text
	                        became one or two compressed spans); 0: never
	                        (2048) */
	int r_max;           /* R_max: most components a factor keeps
	                        (SEKV_R_MAX_ALL: min(|S|, d_h), no cap) */
	float rank_energy;   /* rank gate of K factors (sekv_rank_gate): a
	                        factor keeps its leading components holding
	                        this share E of the span's energy sum_i s_i^2,
	                        at most R_max; it is stored as rows instead
	                        (int8 within the same error 1 - E, else fp16)
	                        where those take fewer bytes; <= 0: no gate
	                        (min(|S|, d_h, R_max) components, never rows:
	                        tests of the SVD itself) */
	float rank_energy_v; /* the same for V factors (values need more: a
	                        needle's digits live in them; issue 19) */
	int raw_i8;          /* 1: rows may be stored int8 (SEKV_RANK_RAW8)
	                        where their error is within the gate's (1) */
	int r_use;           /* rank used at decode, <= stored (default = r_max) */
	int key_pre_rope;    /* 1: keys are factored before RoPE (the model's
	                        rotation undone at build, redone on every rebuilt
	                        row; needs rope_base, n_rot), 0: as given (post-
	                        RoPE; the default: issue 9 measured kl 1.88 / top-1
	                        0.59 after RoPE, 1.88 / 0.57 before at rank 32) */
	float rope_base;     /* RoPE theta of the global layers (model_hparams) */
	int n_rot;           /* rotated dims per head (model_hparams.n_rot) */
	double budget;       /* device-tier budget as a fraction of full_kv_bytes
	                        (0.10); <= 0 or >= 1 with everything fitting:
	                        no cap */
	double static_share; /* share of the budget that exact rows + summaries
	                        may take; alpha rises until they fit (0.3) */
	float tau;           /* default zoom threshold on alpha_S (0.0) */
	int recon_f32;       /* 1: reconstructed rows kept fp32 (tests), else
	                        the device-tier row type */
	int dev_rows;        /* enum sekv_dev_rows of the device-tier KV rows
	                        (exact, summaries, tail, reconstructed):
	                        sekv_mem.dev_rows (SEKV_DEV_K8V4) */
	int factor_f16;      /* 1: host-tier factors u, v stored fp16 (s stays
	                        fp32), halving host_bytes; 0: fp32 (tests) (1) */
	int n_threads;       /* threads of the backend sekv_build opens when be
	                        is NULL; <= 0 all cores */
	struct backend *be;  /* borrowed backend the SVD, router, reconstruction
	                        and mixed attention run on (e.g. model_backend);
	                        must outlive the ctx made with it. NULL:
	                        sekv_build opens a private CPU backend with
	                        n_threads threads for the call, sekv_ctx_new
	                        one with a single thread for the ctx (NULL) */
	float q_scale;       /* model attention scale (model_hparams.q_scale);
	                        <= 0: 1/sqrt(d_h). Sets the router's scale. */
	int router;          /* enum sekv_router of sekv_ctx_new (LANDMARK) */
	int zoom_blocks;     /* with the landmark router, a zoom rebuilds at most
	                        this many landmark blocks of a span (the best one
	                        and its neighbours); the span's coarse row stands
	                        for its other tokens; 0: whole spans (1) */
	int zoom_scan;       /* with the landmark or trained router, > 0 zooms single rows:
	                        the best landmark blocks holding zoom_scan
	                        times the rows the layer's zoom budget holds
	                        have their keys scored against the query
	                        through their factors (no row rebuilt), and
	                        the rows with the largest estimated share of
	                        their heads' attention, over all KV heads, are
	                        rebuilt (the span's coarse row stands for its
	                        other rows); zoom_blocks is then unused. Keys
	                        factored before RoPE keep windows. 0: windows
	                        of landmark blocks (4) */
	float zoom_share[SEKV_MAX_ZOOM_SHARE]; /* share of the zoom budget (the
	                        budget past the static part and the tail) of
	                        each global layer, in layer order; used when
	                        n_zoom_share == the memory's n_layer, else an
	                        equal split */
	int n_zoom_share;    /* entries of zoom_share (0) */
	int question_exact;  /* 1: while a question turn is decoded
	                        (sekv_ctx_question), every compressed span is
	                        rebuilt whole from the host tier and attended
	                        exactly, as the question is prefilled with the
	                        document in the paper's setting; those rows are
	                        host-tier scratch kept for the turn
	                        (sekv_stats.question_host_bytes), not device-tier
	                        rows: the budget binds the answer's decoding.
	                        Measured on bench-qa (issue 19): a question turn
	                        read through the 10% zooms loses answers that
	                        the same answer decoding gets right when the
	                        question read everything. 0: the question turn
	                        zooms under the budget as the answer does (1) */
	int lm_len;          /* landmark block of sekv_build: fewest tokens per
	                        mean key kept for routing (16); 0: no landmarks */
	double lm_share;     /* landmarks may take this share of the static part
	                        (static_share * budget); the block doubles until
	                        they fit (0.5) */
	const struct sekv_router_w *trained; /* weights of SEKV_ROUTER_TRAINED
	                        (borrowed: must outlive every ctx opened with
	                        these params; shape = the memory's); NULL */
};

/* How a decode stream picks the spans to zoom (the first three in the
 * order of the command line's --router choices). */
enum sekv_router {
	SEKV_ROUTER_LANDMARK = 0,/* the spans whose landmarks (int8 mean keys of lm_len-
	                            token blocks, sekv_mem.lm_k) score highest: alpha_S is
	                            the span's estimated share of the head's whole
	                            attention (exact and tail rows scored exactly), so
	                            heads that look at the question or the recent rows
	                            zoom little (issue 9: measured above the summary
	                            router; a memory without landmarks falls back to
	                            SUMMARY) */
	SEKV_ROUTER_SUMMARY = 1, /* alpha_S from the spans' summaries through the
	                            router W (DESIGN.md section 3) */
	SEKV_ROUTER_ORACLE = 2,  /* the spans holding the most exact attention mass of the
	                            current query (needs sekv_ctx_set_exact_keys): an upper
	                            bound that separates routing loss from reconstruction
	                            loss (issue 9) */
	SEKV_ROUTER_NONE = 3,    /* never zoom: span summaries only (the summary-only
	                            rival, a SentenceKV-style cache; issue 9 part 3) */
	SEKV_ROUTER_TRAINED = 4, /* the landmark router's alpha_S recalibrated per layer
	                            and head by trained weights (sekv_params.trained,
	                            struct sekv_router_w; engine/train/train.h trains
	                            them): needs landmarks */
};

/* Trained router weights (DESIGN.md section 3; issue 19 item 3), read by
 * the SEKV_ROUTER_TRAINED router. Per global layer l and query head h the
 * zoom logit of compressed span S is
 *   z_S = a[l,h] * x_S + b[l,h] + <W[l,h] q, kappa_S> / sqrt(d')
 * where x_S = logit(alpha_S) of the landmark router and kappa_S =
 * normalize(W[l,h] k_bar_S) (the last term only when w is not NULL); the
 * span is a candidate when sigmoid(z_S) > tau[l,h] and candidates zoom by
 * descending z under the budget, as the other routers'. a = 1, b = 0, no
 * w and tau = 0 is the landmark router. All arrays borrowed by whoever
 * holds the struct. */
struct sekv_router_w {
	int n_layer;   /* global layers */
	int n_head;    /* query heads */
	int d_h;
	float *a;      /* [n_layer][n_head] scale of x_S */
	float *b;      /* [n_layer][n_head] bias (logit units) */
	float *tau;    /* [n_layer][n_head] zoom threshold on sigmoid(z), 0..1 */
	float *w;      /* [n_layer][n_head][SEKV_D_ROUTE][d_h] or NULL */
};

void sekv_default_params(struct sekv_params *p);
/* "landmark", "summary", "oracle", "none", "trained" (static storage; "?"
 * otherwise). */
const char *sekv_router_name(int router);

/* A run of tokens between anchors. */
struct sekv_span {
	int32_t start;   /* first position */
	int32_t len;     /* tokens */
	int32_t full;    /* 1: kept at full resolution (short), 0: compressed */
};

/* rank of a factor stored raw: its rows themselves, because its kept
 * components would take more bytes than the rows (issue 9). */
#define SEKV_RANK_RAW (-1)
/* rank of a factor stored as int8 rows with one fp32 scale per row
 * (absmax / 127, quant_f32_to_i8_row): the rows at about half their fp16
 * bytes, chosen where the quantisation error is within the rank gate's
 * and low-rank factors would take more bytes (issue 19). */
#define SEKV_RANK_RAW8 (-2)
/* sekv_params.r_max: no cap, every factor may keep min(|S|, d_h). */
#define SEKV_R_MAX_ALL 4096

/* Truncated SVD of one span's K (or V) for one layer and KV head, keeping
 * only the components the rank gate kept:
 * X_hat[i][j] = sum_r u[i*rank + r] * s[r] * v[j*rank + r].
 * u and v hold uint16_t IEEE halves when the memory's factor_f16 is 1,
 * else floats; s (the scale) is always fp32. A raw factor (rank
 * SEKV_RANK_RAW) holds the span's rows in u [len][d_h] at the same type;
 * its s and v are NULL. An int8 one (SEKV_RANK_RAW8) holds int8 codes in
 * u [len][d_h] and each row's scale in s [len] (row i = s[i] * u[i]); v
 * is NULL. */
struct sekv_factor {
	int32_t rank;    /* kept components, SEKV_RANK_RAW or SEKV_RANK_RAW8 */
	void *u;         /* [len][rank] fp16 or fp32 (sekv_mem.factor_f16);
	                    raw: [len][d_h]; raw8: int8 [len][d_h] */
	float *s;        /* [rank], descending (raw: NULL; raw8: [len] row
	                    scales) */
	void *v;         /* [d_h][rank] fp16 or fp32 (raw: NULL) */
};

/* Bytes of a factor of a span of len rows, by part: *s_bytes of fp32 s
 * (singular values; raw8: row scales), *u_bytes of u and *v_bytes of v at
 * the factor type (f16: 2-byte halves, else floats; raw: the rows in u,
 * no s or v; raw8: len * d_h int8 codes in u). rank must be
 * SEKV_RANK_RAW8, SEKV_RANK_RAW or 0..min(len, d_h) (unchecked). Pure. */
void sekv_factor_bytes(int rank, int len, int d_h, int f16, size_t *s_bytes,
		       size_t *u_bytes, size_t *v_bytes);
/* 1 when rank is one of the row forms (SEKV_RANK_RAW, SEKV_RANK_RAW8). */
static inline int sekv_rank_is_rows(int rank)
{
	return rank == SEKV_RANK_RAW || rank == SEKV_RANK_RAW8;
}

/* Rank-gate predictor g_phi (DESIGN.md section 3 step 3; issue 9): the
 * gates m_i in [0, 1] of a span factor's n_gate <= R_max components from
 * its singular values divided by the largest, s_norm [n_gate] (descending,
 * s_norm[0] = 1), the share of the span's energy the n_gate components
 * hold, share_in (sum of s_i^2 over them / the matrix's ||X||_F^2, 0..1),
 * and its unit summary key kbar_norm [d_h] (NULL allowed). Gates past
 * n_valid = min(|S|, d_h, R_max) are 0. Untrained rule (until a trained
 * g_phi replaces it behind this interface): m_i = 1 for the fewest leading
 * components whose energy reaches `energy` of the span's, else 0 (all
 * n_valid when they never reach it; energy <= 0: all n_valid). Returns the
 * kept count (gates are a prefix of ones). Pure; thread-safe. */
int sekv_rank_gate(float energy, const float *s_norm, int n_gate, int n_valid,
		   float share_in, const float *kbar_norm, int d_h, float *gate);

struct sekv_mem {
	int n_tok;            /* document tokens */
	int n_layer;          /* global layers */
	int n_head;           /* query heads */
	int n_head_kv;
	int d_h;
	int r_max;            /* R_max the factors were built with */
	float rank_energy;    /* energy share the rank gate kept of K factors
	                         (0: no gate) */
	float rank_energy_v;  /* and of V factors */
	int n_raw;            /* factors stored as rows (SEKV_RANK_RAW or
	                         SEKV_RANK_RAW8) */
	int n_raw8;           /* of which int8 (SEKV_RANK_RAW8) */
	float rope_base;      /* > 0: K factors (not raw ones) hold keys before
	                         RoPE of this theta over n_rot dims (NEOX, as
	                         model_rope_cos_sin): a rebuilt key row at
	                         position p is rotated by p's angles; 0: keys
	                         factored as the model stored them */
	int n_rot;
	float kept_energy[2]; /* build statistic (0 in a loaded memory): mean over
	                         K (0) and V (1) factors of the share of the
	                         span's energy ||X||_F^2 the stored factor keeps
	                         (raw: 1) */
	int factor_f16;       /* 1: every factor's u, v are fp16, 0: fp32 */
	int dev_rows;         /* enum sekv_dev_rows wanted for a decode stream
	                         over this memory and for static_bytes
	                         (sekv_params.dev_rows; not stored: a loaded memory
	                         gets SEKV_DEV_K8V4, a caller may change it, then
	                         sekv_mem_update_counts); sekv_mem_dev_rows says
	                         what is used */
	float alpha_used;     /* threshold multiplier actually used */
	char note[256];       /* how alpha / merging was chosen to fit the budget,
	                         e.g. "alpha raised 1.00 -> 2.35, ..." ("" = none) */
	int32_t *layer_id;    /* [n_layer] model layer index of each global layer */

	int32_t *tokens;      /* [n_tok] */
	float *surprisal;     /* [n_tok] nats, surprisal[0] = 0 */
	uint8_t *is_anchor;   /* [n_tok] 1 = anchor (incl. sinks) */

	int n_span;
	struct sekv_span *span;   /* [n_span] in position order */
	int n_comp;               /* compressed spans */
	int32_t *comp_span;       /* [n_comp] index into span[] */

	int n_exact;              /* positions kept exact */
	int32_t *exact_pos;       /* [n_exact] ascending */
	uint16_t *exact_k;        /* [n_layer][n_exact][n_head_kv][d_h] fp16 */
	uint16_t *exact_v;        /* same */

	uint16_t *k_bar;          /* [n_layer][n_comp][n_head_kv][d_h] fp16 */
	uint16_t *v_bar;          /* same */
	struct sekv_factor *fac;  /* [n_layer][n_comp][n_head_kv][2] (0 = K, 1 = V) */

	int lm_len;               /* tokens per landmark block (0: no landmarks) */
	int n_lm;                 /* landmark blocks over all compressed spans:
	                             span c has ceil(len / lm_len), from lm_first[c] */
	int32_t *lm_first;        /* [n_comp + 1] first block of compressed span c */
	int8_t *lm_k;             /* [n_layer][n_lm][n_head_kv][d_h] mean key of each
	                             block, int8 of scale lm_s (device tier, routing
	                             only): key ~= lm_k * lm_s */
	float *lm_s;              /* [n_layer][n_lm][n_head_kv] absmax / 127 */

	float *route_w;           /* [n_layer][n_head][SEKV_D_ROUTE][d_h] */
	float *tau;               /* [n_layer][n_head] */

	size_t full_kv_bytes;     /* n_tok * n_layer * n_head_kv * d_h * 2 * 2 */
	size_t static_bytes;      /* exact rows + summaries + landmarks, device tier
	                             at its types (dev_rows; sekv_dev_rows_bytes) */
	size_t host_bytes;        /* all factors (row forms included) at their
	                             stored types */
	void *arena;              /* implementation-owned storage */
};

/* Segmentation (DESIGN.md section 2 step 4): position t is an anchor when
 * H_t > mu_t + alpha * sigma_t, mu_t and sigma_t being the mean and standard
 * (population) deviation of H_0..H_{t-1} (causal, Welford; no anchor
 * before 2 samples). Positions
 * < n_sink and >= n - n_recent are exact and belong to no span. Runs between
 * anchors become spans; runs shorter than l_min are marked full.
 * is_anchor [n] out; *span is malloc'ed (caller frees). Returns 0 or code. */
int sekv_segment(const float *surprisal, int n, float alpha, int l_min,
		 int n_sink, int n_recent, uint8_t *is_anchor,
		 struct sekv_span **span, int *n_span);

/* Anchor score from the attention each position received while the
 * document was prefilled: acc -> [n_row][n_tok] attention mass accumulated
 * over every later query (H2O's scores, engine/kv/kv_select.h: one row per
 * global layer and KV head). out[t] = log(sum_r acc[r][t] / (n_tok - t) +
 * 1e-9): the mean mass per query that could see t, summed over the rows,
 * in log scale (measured, issue 19: the linear mean picks a few extreme
 * tokens and merges the rest into long spans). out [n_tok] may not alias
 * acc. Non-finite or negative sums count as 0. Pure, no allocation. */
void sekv_anchor_score_attention(const float *acc, int n_row, int n_tok, float *out);
/* Both scores at once: out[t] = max(z_a(t), z_b(t)), z_x(t) = (x_t -
 * mean) / deviation over x_0..x_{t-1} (causal, population; 0 before two
 * samples or at zero deviation), so that a position stands out when
 * either score does (issue 19: attention anchors keep what later text
 * reads, surprisal anchors the rare values a needle is made of). a, b, out
 * [n]; out may alias neither. Pure, no allocation. */
void sekv_anchor_score_union(const float *a, const float *b, int n, float *out);

/* Builds the memory of a document from its global-layer KV cache:
 * k[l], v[l] point to [n_tok][n_head_kv][d_h] fp16 rows of global layer l
 * (post-RoPE keys; with p->key_pre_rope the K factors are of the keys
 * rotated back by -pos, m->rope_base set). Factors are computed in fp32 and stored as
 * p->factor_f16 says (u, v rounded to nearest half). Chooses alpha
 * (>= p->alpha) so that static bytes fit
 * p->static_share * p->budget * full_kv_bytes (reported in alpha_used);
 * computes summaries, SVD factors (LAPACK sgesdd) and the untrained router
 * (W = top-d' principal directions of the layer's keys, scaled so the
 * router logit <Wq, kappa_S>/sqrt(d') has the size of the coarse attention
 * logit q.k_bar * q_scale for a span of typical summary norm; tau = p->tau).
 * Alpha policy: the smallest alpha >= p->alpha (geometric search, then
 * bisection to 0.01) whose exact rows (fp16) + summaries (fp32) fit; when
 * none does, neighbouring spans merge pairwise (anchors between them are
 * demoted) until they fit or one span is left; m->note says what was done
 * ("budget not met: ..." when even that cannot fit: decoding then zooms
 * nothing). Factors: the SVD keeps min(|S|, d_h, p->r_max) components,
 * then the rank gate (sekv_rank_gate with p->rank_energy for K,
 * p->rank_energy_v for V) keeps the leading part holding share E of the
 * energy; the factor is stored in the form of fewest bytes among those
 * components, int8 rows (with p->raw_i8, when their relative squared
 * error ||X - X_8||^2 / ||X||^2 is at most 1 - E) and fp16 rows
 * (SEKV_RANK_RAW8, SEKV_RANK_RAW; m->n_raw, m->n_raw8 count them). Only
 * kept components are stored. tokens may be NULL (zeros).
 * Runs the SVD and router on p->be (or a private CPU backend with
 * p->n_threads threads). Errors: SEKV_EINVAL (bad
 * shape, non-finite surprisal or KV, LAPACK failure), SEKV_ENOMEM.
 * Borrowed inputs are copied. *out owned by caller (sekv_mem_free). */
int sekv_build(struct sekv_mem **out, const struct sekv_params *p,
	       int n_tok, const int32_t *tokens, const float *surprisal,
	       int n_layer, const int32_t *layer_id, int n_head, int n_head_kv,
	       int d_h, const uint16_t *const *k, const uint16_t *const *v,
	       char *err, size_t errlen);

/* Grows a memory by n_new appended tokens (a conversation's turns, a
 * document read in parts) without a forward pass over earlier tokens and
 * without changing anything final (DESIGN.md section 2 step 4: the
 * running surprisal statistics continue, so earlier anchors stay; issue
 * 9): old's spans, summaries, landmarks, factors and exact rows are kept;
 * the positions after old's last span (its recent window and the anchors
 * there, exact in old) and the appended ones are segmented with old's
 * alpha_used and p's n_sink, l_min and n_recent; new compressed spans get
 * summaries, landmarks and factors as sekv_build makes them (old's R_max,
 * rank gate, key form and factor type); the router W and tau are old's.
 * k[l], v[l]: [n_new][n_head_kv][d_h] fp16 rows of global layer l as
 * sekv_build takes them; tokens may be NULL. The budget is not refitted:
 * static bytes grow with the text (m->note says how many tokens came).
 * Runs on p->be (or a private CPU backend). *out is a new memory (caller
 * frees; old is unchanged). SEKV_EINVAL (shapes, non-finite input),
 * SEKV_ENOMEM. */
int sekv_mem_append(struct sekv_mem **out, const struct sekv_mem *old,
		    const struct sekv_params *p, int n_new, const int32_t *tokens,
		    const float *surprisal, const uint16_t *const *k,
		    const uint16_t *const *v, char *err, size_t errlen);

/* Positions before this one never change when m grows (sekv_mem_append
 * with the same n_sink): the end of m's last span, or min(n_sink, n_tok)
 * without spans. Pure. */
int sekv_mem_frontier(const struct sekv_mem *m, int n_sink);

/* A slice of m: the memory of positions [lo, hi) (tokens, surprisal,
 * anchors, the spans inside with their summaries, landmarks and factors,
 * the exact rows inside), moved to start at position 0, with m's router
 * and scalars (a conversation's memory is persisted as slices: what each
 * turn made final, then the rest). *out new (sekv_mem_free). SEKV_EINVAL:
 * a span crosses lo or hi, or 0 <= lo <= hi <= n_tok fails; SEKV_ENOMEM. */
int sekv_mem_slice_dup(struct sekv_mem **out, const struct sekv_mem *m, int lo, int hi);

/* Puts a memory back together: positions [0, pos0[0]) of base (no span may
 * cross pos0[0]), then part[i] (slices as sekv_mem_slice_dup makes them)
 * at positions pos0[i] .. pos0[i] + part[i]->n_tok - 1, each starting
 * where the one before ends; router, tau and scalars are base's, the note
 * the last part's. For a
 * memory m grown from base by sekv_mem_append, the slices of m from
 * sekv_mem_frontier(base) on join base back into m bit for bit. *out new
 * (sekv_mem_free); inputs borrowed. SEKV_EINVAL (n_part < 1, ranges that
 * do not follow each other, shapes, factor types or landmark blocks that
 * differ), SEKV_ENOMEM. */
int sekv_mem_join(struct sekv_mem **out, const struct sekv_mem *base, int n_part,
		  const struct sekv_mem *const *part, const int32_t *pos0);

/* Allocates an empty memory with the given shape and counts, every array
 * zeroed and sized (factor arrays sized from ranks[] [n_layer][n_comp]
 * [n_head_kv][2] and span lengths, u and v fp16 when factor_f16 is 1,
 * else fp32; s always fp32); used by store/ when loading.
 * span [n_span] is copied and checked (ascending, non-overlapping, inside
 * 0..n_tok, full 0/1); n_comp = spans with full == 0; ranks may be NULL
 * (all ranks 0), else each rank is SEKV_RANK_RAW or in 0..min(len, d_h).
 * lm_len >= 0 sizes
 * the landmarks (lm_first filled, lm_k, lm_s zeroed; 0: none). r_max is set to the
 * largest rank, tau to 0, layer_id to 0..n_layer-1: the caller fills the
 * rest. One allocation (m->arena); each factor's v follows its u.
 * Returns 0, SEKV_EINVAL (bad shape, span
 * or rank) or SEKV_ENOMEM. Byte counters are filled (update_counts). */
int sekv_mem_alloc(struct sekv_mem **out, int n_tok, int n_layer, int n_head,
		   int n_head_kv, int d_h, int n_span, const struct sekv_span *span,
		   int n_exact, const int32_t *ranks, int factor_f16, int lm_len);
void sekv_mem_free(struct sekv_mem *m); /* NULL is a no-op */
/* Recomputes n_comp/comp_span from span[], and the byte counters:
 * full_kv_bytes as in DESIGN.md section 6; static_bytes = exact rows and
 * k_bar/v_bar at the device row type (dev_rows, sekv_dev_rows_bytes) +
 * landmarks (int8 keys, fp32 scales); host_bytes = all factors (u, v at 2 bytes
 * per element when factor_f16, else 4; s fp32). The span
 * array's full flags must not change the number of compressed spans the
 * factor arrays were sized for (store/ only calls this after filling). */
void sekv_mem_update_counts(struct sekv_mem *m);

/* What the device tier's KV rows are stored as (sekv_params.dev_rows):
 * - SEKV_DEV_F16: fp16, as the model computed them;
 * - SEKV_DEV_I8: keys and values int8 with an fp32 scale per row and KV
 *   head, keys divided by per-channel scales first (devrows.c);
 * - SEKV_DEV_K8V4: int8 keys as SEKV_DEV_I8, values int4 with an fp32
 *   scale per 32 values (quant_f32_to_i4_row). Measured on bench-qa with
 *   the full KV cache rounded so (issue 19): int4 values lose no answer,
 *   int4 keys lose a quarter of them. Needs d_h % 32 == 0, else it is
 *   SEKV_DEV_I8 (sekv_dev_rows_type). */
enum sekv_dev_rows {
	SEKV_DEV_F16 = 0,
	SEKV_DEV_I8 = 1,
	SEKV_DEV_K8V4 = 2,
};

/* The type rows of width d_h get when type is asked: SEKV_DEV_K8V4 falls
 * back to SEKV_DEV_I8 where d_h is not a multiple of 32. Pure. */
static inline int sekv_dev_rows_type(int type, int d_h)
{
	return type == SEKV_DEV_K8V4 && d_h % 32 ? SEKV_DEV_I8 : type;
}

/* The device row type a memory's rows take: m->dev_rows (sekv_dev_rows_type)
 * when m has compressed spans; a memory kept exact (no spans, no budget
 * pressure) keeps fp16 rows, exactly the document's. Pure. */
static inline int sekv_mem_dev_rows(const struct sekv_mem *m)
{
	return m->n_comp > 0 ? sekv_dev_rows_type(m->dev_rows, m->d_h) : SEKV_DEV_F16;
}

/* Device-tier bytes of n_rows positions' K and V rows over n_layer layers
 * and n_head_kv KV heads, at type (enum sekv_dev_rows, sekv_dev_rows_type
 * applied): per head and row, fp16 2 * d_h * 2; int8 2 * (d_h + 4) (codes,
 * one fp32 scale); k8v4 (d_h + 4) + (d_h / 2 + 4 * d_h / 32). A summary
 * (k_bar, v_bar) costs one row. Pure. */
size_t sekv_dev_rows_bytes(size_t n_rows, int n_layer, int n_head_kv, int d_h, int type);

/* What the static device tier of a memory holds, in bytes at the stored
 * types (issue 19: the composition ask --json and sekv eval report). */
struct sekv_tier_parts {
	size_t sink;       /* exact rows of positions < n_sink */
	size_t anchor;     /* exact rows of the other anchors */
	size_t short_span; /* exact rows of spans shorter than l_min */
	size_t recent;     /* the other exact rows: the recent window (and the
	                      tokens a conversation appended after it) */
	size_t summary;    /* k_bar, v_bar of the compressed spans */
	size_t landmark;   /* landmark keys and scales */
};
/* The parts of m->static_bytes (they sum to it) by the kind of row, with
 * the memory's n_sink (sekv_params.n_sink when it was built). Pure. */
void sekv_mem_tier_parts(const struct sekv_mem *m, int n_sink, struct sekv_tier_parts *out);

/* A zoomed span: the one zoom record of engine, app (--json) and ui. In a
 * step's list (sekv_stats.zoom) steps is 1; in an answer's aggregate
 * (engine/conv/conv.h, conv_answer.zoom) steps counts the answer tokens during
 * which the span was zoomed, and head and alpha are those of the highest
 * alpha seen. */
struct sekv_zoom {
	int32_t span;   /* index into mem->span */
	int32_t layer;  /* global layer index */
	int32_t head;   /* query head that routed it (highest alpha) */
	int32_t steps;  /* decode steps it was zoomed in (1 in a step's list) */
	float alpha;    /* alpha_S (the highest seen, aggregated); zooms of
	                   single rows: the rebuilt rows' estimated share of
	                   attention, mean over the KV head's query heads */
	int32_t r0;     /* rebuilt rows r0 .. r0 + n - 1 of the span (--zoom- */
	int32_t n;      /* blocks; n = |S|: all of it); single rows: the
	                   stretch from the first to the last rebuilt row, not
	                   all of it rebuilt; aggregated: the first */
};

/* Live counters of a decode stream, updated at every sekv_attend call. */
struct sekv_stats {
	int step;                 /* decode steps seen: a call with a new pos
	                             starts a step and clears the per-step fields */
	int *zoom_count;          /* [n_layer][n_head] spans zoomed this step for
	                             the head's KV head (all its query heads
	                             see a zoomed span's rows) */
	int n_zoom;               /* entries in zoom[] this step (all layers) */
	struct sekv_zoom *zoom;   /* [cap] this step's zooms, all layers */
	long long zoom_total;     /* sum over steps of distinct (layer, span) zooms */
	size_t resident_bytes;    /* device-tier KV rows now: static_bytes + tail
	                             + this step's reconstructed rows */
	size_t peak_resident_bytes;
	size_t budget_bytes;      /* budget * full_kv_bytes (0 = no cap) */
	size_t tail_bytes;        /* question + generated rows */
	size_t question_host_bytes; /* peak of the rows rebuilt for exact question
	                             turns (question_exact): host-tier scratch,
	                             outside resident_bytes */
	size_t recon_bytes;       /* reconstructed rows this step */
	size_t read_bytes;        /* KV memory this step read, all layers so far:
	                             device rows attended or routed on (static +
	                             tail + reconstructed) and the host-tier
	                             factors of the spans it rebuilt */
	size_t factor_read_bytes; /* the factors' part of read_bytes */
	double mass_recall_sum;   /* with exact keys: sum over steps, global layers
	                             and query heads of mass_recall (DESIGN.md
	                             section 6, over document positions): the share
	                             of the exact attention mass on exact rows and
	                             zoomed spans */
	long long mass_recall_n;  /* terms in mass_recall_sum */
	double attn_err_sum;      /* with exact keys and values: sum over steps,
	                             global layers and query heads of the attention
	                             output's relative error ||o - o_ref|| / ||o_ref||
	                             against exact attention over the document's
	                             rows and the stream's own tail rows (issue 19:
	                             copy fidelity measured directly) */
	long long attn_err_n;     /* terms in attn_err_sum */
	double mass_oracle_sum;   /* with exact keys and a budget: sum over steps,
	                             global layers and query heads of the mass the
	                             budget would hold as exact rows chosen by the
	                             exact attention itself: the top R document rows
	                             of each layer and KV head (summed over its query
	                             heads), R = (budget - tail rows) / (n_layer *
	                             one row of all KV heads at the device type); no
	                             static part, no summaries. The ceiling of
	                             mass_recall for any method keeping rows (issue
	                             19: is the budget or the method the limit) */
	long long mass_oracle_n;  /* terms in mass_oracle_sum */
	double *mass_recall_lh;   /* [n_layer][n_head] the same sum per global layer
	                             and query head; each has mass_recall_n /
	                             (n_layer * n_head) terms when every layer was
	                             decoded as often */
};

struct sekv_ctx; /* opaque decode stream */

/* Opens a decode stream over mem (borrowed: must outlive the ctx). tail_cap
 * is the most question + generated tokens it will see; q_scale as in
 * model_hparams. From p it takes budget, r_use and recon_f32; the zoom
 * thresholds are mem->tau (p->tau only seeds them in sekv_build). Tail and
 * reconstructed rows are buffers of p->be, where reconstruction and the
 * mixed attention run (NULL: a private single-thread CPU backend). The
 * router's kappa_S are precomputed here: change mem->route_w, mem->tau
 * only before opening a ctx. All scratch is sized here. Errors:
 * SEKV_EINVAL (tail_cap < 1, bad shape), SEKV_ENOMEM. */
int sekv_ctx_new(struct sekv_ctx **out, const struct sekv_mem *mem,
		 const struct sekv_params *p, int tail_cap, float q_scale,
		 char *err, size_t errlen);
void sekv_ctx_free(struct sekv_ctx *c);
/* Forgets tail rows and statistics (new conversation on the same doc). */
void sekv_ctx_reset(struct sekv_ctx *c);

/* model_attn callback (engine/model/model.h): `layer` is the MODEL layer index;
 * routes, zooms under the budget, reconstructs from factors and attends
 * with one softmax (DESIGN.md section 3). ctx is a struct sekv_ctx.
 * q [n_head][d_h] unscaled, k, v [n_head_kv][d_h] of this token (stored
 * fp16 as tail row pos - n_tok), out [n_head][d_h]. Tail rows are appended
 * in order per layer (a position may be redone: later rows are forgotten).
 * Budget: the allowance left by static + tail bytes is split equally over
 * global layers; a layer zooms its candidates (alpha_S > tau, one per
 * (KV head, span), best alpha of its query heads; with the oracle router
 * the span's share of the head's exact attention mass instead, no tau)
 * by descending alpha_S,
 * skipping one that no longer fits (so a long span cannot block shorter,
 * lower-alpha ones). SEKV_EINVAL: layer not global, pos
 * outside n_tok..n_tok+tail_cap-1 or skipping a row. Not thread-safe
 * per ctx; several ctx may share one mem. */
int sekv_attend(void *ctx, int layer, int pos, const float *q,
		const float *k, const float *v, float *out);

/* Probes later sekv_attend calls (p borrowed until replaced; NULL: off):
 * for each (model layer, query head) pair of p, the mixed softmax's
 * weights go to document positions: exact and reconstructed rows to their
 * own, a coarse row's weight spread evenly over its span's tokens, tail
 * rows (question, answer) dropped. Bit-neutral. No allocation. */
void sekv_ctx_set_probe(struct sekv_ctx *c, const struct model_probe *p);

/* Marks the start (on = 1) or end (on = 0, before the answer's first
 * token) of a question turn. With sekv_params.question_exact, the turn's
 * tokens attend to every compressed span rebuilt whole (rebuilt at the
 * turn's first token and kept until it ends; host-tier scratch counted in
 * question_host_bytes, not resident_bytes); without it, a no-op. The next
 * answer step zooms under the budget again. No allocation. */
void sekv_ctx_question(struct sekv_ctx *c, int on);

/* Evicts the tail rows (question and generated tokens) of positions before
 * pos: later attention no longer sees them (a conversation that outgrows
 * the budget forgets its oldest turns; the document memory stays whole).
 * pos must lie between the first held row and the last appended one.
 * Returns 0 or SEKV_EINVAL. No allocation. */
int sekv_ctx_evict_tail(struct sekv_ctx *c, int pos);
/* Copies the tail rows (question and generated tokens) of positions
 * [pos0, pos0 + n) of global layer `layer` into k, v [n][n_head_kv][d_h]
 * fp16 (a conversation's turns, to grow the memory with them). The rows
 * must be held (not evicted, already appended). 0 or SEKV_EINVAL. */
int sekv_ctx_tail_get(const struct sekv_ctx *c, int layer, int pos0, int n, uint16_t *k,
		      uint16_t *v);
/* Tail rows held now (per global layer). */
int sekv_ctx_tail_rows(const struct sekv_ctx *c);

/* Exact document keys for the oracle router and mass_recall: k[l] ->
 * [n_tok][n_head_kv][d_h] fp16 post-RoPE keys of global layer l (as
 * sekv_build took them). The pointers are copied, the rows borrowed until
 * replaced or the ctx is freed; NULL: none. With them every step scores
 * the query against every document key (n_tok * d_h * n_head flops per
 * layer): a measurement aid, not the product's decode path. No allocation. */
void sekv_ctx_set_exact_keys(struct sekv_ctx *c, const uint16_t *const *k);
/* Exact document values v[l] -> [n_tok][n_head_kv][d_h] fp16 of global
 * layer l, borrowed as the keys are; with them and the keys every step
 * adds its attention output error (sekv_stats.attn_err_sum): n_tok * d_h *
 * n_head flops more per layer and a copy of the tail rows. NULL: none. */
void sekv_ctx_set_exact_values(struct sekv_ctx *c, const uint16_t *const *v);

/* What the last sekv_attend call routed (training the router: engine/
 * train/): its global layer's landmark logits and, with exact keys set,
 * the exact attention mass per compressed span. */
struct sekv_route_view {
	int layer;             /* global layer of the last call, -1: none */
	int n_head, n_comp;
	const float *x;        /* [n_head][n_comp] logit(alpha_S) of the landmark
	                          router (NULL unless the ctx's router is
	                          SEKV_ROUTER_LANDMARK) */
	const double *mass;    /* [n_head][n_comp] exact attention mass per span,
	                          relative to the head's largest document score
	                          (NULL without exact keys) */
	const double *total;   /* [n_head] the same over the whole document */
};
/* Fills v with borrowed views valid until the next sekv_attend or
 * sekv_ctx_free. Pure. */
void sekv_ctx_route_view(const struct sekv_ctx *c, struct sekv_route_view *v);

/* The document positions of the rows of compressed span comp (index into
 * comp_span) that KV head kv holds rebuilt at this step in global layer l,
 * the layer sekv_attend zoomed last (a window's rows, or single rows with
 * zoom_scan), ascending, into pos (at most cap written). Returns how many
 * it holds (0: not zoomed), or SEKV_EINVAL for another layer or bad
 * indices. */
int sekv_ctx_zoomed_rows(const struct sekv_ctx *c, int l, int kv, int comp, int32_t *pos, int cap);

/* Live statistics (borrowed, valid until the next sekv_attend). */
const struct sekv_stats *sekv_ctx_stats(const struct sekv_ctx *c);

#endif
