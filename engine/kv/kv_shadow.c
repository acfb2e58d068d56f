/* kv_shadow.c - ShadowKV's decode stream (kv_shadow.h): at build, keys
 * rotated back to before RoPE (the model's own rotation, angles negated)
 * and factored per layer by the backend's svd, landmarks and outliers per
 * (layer, KV head), exact chunks on the device, values in host memory
 * grouped per (layer, KV head) so a chunk is contiguous; per step and
 * layer, landmark scores, the best chunks (kv_select_top), their keys
 * rebuilt by one backend reconstruct and their values written to a device
 * buffer, then one attention_mix over the exact chunks, the rebuilt ones
 * and the tail (kv_tail.c).
 * Invariant: nothing is allocated after kv_shadow_new.
 */
#include "engine/kv/kv_shadow.h"

#include "engine/backend/backend.h"
#include "engine/base/err.h"
#include "engine/kv/kv_select.h"
#include "engine/kv/kv_tail.h"
#include "engine/model/model.h"
#include "engine/quant/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define KV_SHADOW_MAX_LAYER 64
#define KV_SHADOW_OUTLIER_SHARE 8 /* outliers take 1/8 of the exact rows a plan leaves */
/* The factors' share of a plan's rows: the paper's proportion (rank 160
 * of 1,024 columns is 7.8% of the full KV beside a 1.56% sparse budget
 * and its outliers), and measured best of 1/4, 1/2, 3/4 and 7/8 at a 0.25
 * budget on Qwen2.5 0.5B (README.md, "Rivals at the same budget"). */
#define KV_SHADOW_FACTOR_SHARE 0.75

struct kv_shadow {
	struct kv_shadow_params p;
	int32_t layer_id[KV_SHADOW_MAX_LAYER];
	int n_tok, n_chunk, w;      /* w = n_head_kv * d_h, the factored columns */
	int rank, n_out, n_sel;     /* after clipping */
	int n_exact;                /* exact rows per (layer, KV head) */
	int slot;                   /* rebuilt rows per (layer, KV head): n_sel * chunk */
	int half;                   /* n_rot / 2 */
	uint16_t *fu;               /* factors U [n_layer][n_tok][rank] fp16 */
	uint16_t *fv;               /*         V [n_layer][w][rank] fp16 */
	float *fs;                  /*         s [n_layer][rank] */
	float *lm;                  /* landmarks [n_layer][n_head_kv][n_chunk][d_h] */
	uint8_t *held;              /* [n_layer][n_head_kv][n_chunk] 1: chunk exact */
	uint16_t *hv;               /* host tier: values [n_layer][n_head_kv][n_tok][d_h] fp16 */
	float *cs, *sn;             /* RoPE [n_tok][half] of every document position */
	struct backend_buf *xk, *xv; /* device exact rows [n_layer][n_head_kv][n_exact][d_h] fp16 */
	int32_t *xpos;              /* [n_layer][n_head_kv][n_exact] their positions */
	struct backend_buf *dk, *dv; /* device rebuilt rows [n_layer][n_head_kv][slot][d_h] fp16 */
	struct kv_tail tail;
	struct backend_ws *ws;
	struct backend_mix_block *blk; /* [n_head_kv][3] */
	struct backend_recon *job;  /* [n_head_kv * n_sel] one step's rebuilds */
	float *score, *logit;       /* [n_chunk] scratch */
	int32_t *chosen;            /* [n_layer][n_head_kv][n_sel] chunks of the last step */
	int *n_chosen;              /* [n_layer][n_head_kv] */
	int *n_rows;                /* [n_layer][n_head_kv] rows of those chunks */
	const struct model_probe *probe;
	float *probe_row;           /* [n_head][n_exact + slot + tail_cap] */
};

/* ---- the budget rule -------------------------------------------------- */

/* Rows (of 4 w bytes per layer) one layer's factors of the given rank take. */
static long long factor_rows(int n_tok, int w, int rank)
{
	long long bytes = ((long long)2 * ((long long)n_tok + w) + 4) * rank;

	return (bytes + 4LL * w - 1) / (4LL * w);
}

static int n_chunk_of(int n_tok, int chunk)
{
	return (n_tok + chunk - 1) / chunk;
}

/* Rows of the first and the last chunk (every row of a document of at
 * most two chunks). */
static int ends_rows(int n_tok, int chunk)
{
	int n_chunk = n_chunk_of(n_tok, chunk);

	return n_chunk <= 2 ? n_tok : chunk + (n_tok - (n_chunk - 1) * chunk);
}

long long kv_shadow_landmark_rows(int n_tok, int chunk)
{
	return chunk < 1 || n_tok < 0 ? -1 : (n_chunk_of(n_tok, chunk) + 1) / 2;
}

long long kv_shadow_rows_min(int n_tok, int n_head_kv, int d_h, int chunk)
{
	if (n_tok < 0 || n_head_kv < 1 || d_h < 1 || chunk < 1)
		return -1;
	return factor_rows(n_tok, n_head_kv * d_h, 1) + ends_rows(n_tok, chunk) +
	       (n_chunk_of(n_tok, chunk) > 2 ? chunk : 0);
}

int kv_shadow_plan(int n_tok, int n_head_kv, int d_h, int chunk, long long rows,
		   struct kv_shadow_plan *out)
{
	long long need = kv_shadow_rows_min(n_tok, n_head_kv, d_h, chunk);

	if (!out || need < 0 || rows < need)
		return SEKV_EINVAL;
	int w = n_head_kv * d_h, r_max = n_tok < w ? n_tok : w, n_free = n_chunk_of(n_tok, chunk) - 2;
	long long one = n_free > 0 ? chunk : 0, ends = ends_rows(n_tok, chunk);
	int rank = 1;
	double share = KV_SHADOW_FACTOR_SHARE * (double)rows;
	while (rank < r_max && (double)factor_rows(n_tok, w, rank + 1) <= share &&
	       rows - factor_rows(n_tok, w, rank + 1) - ends >= one)
		rank++;
	long long left = rows - factor_rows(n_tok, w, rank) - ends;
	long long n_out = left / (KV_SHADOW_OUTLIER_SHARE * (long long)chunk), n_sel;
	if (n_free < 1) {
		n_out = n_sel = 0;
	} else {
		n_out = n_out < n_free - 1 ? n_out : n_free - 1;
		n_sel = (left - n_out * chunk) / chunk;
		n_sel = n_sel < n_free - n_out ? n_sel : n_free - n_out;
	}
	*out = (struct kv_shadow_plan){ rank, (int)n_out, (int)n_sel };
	return 0;
}

/* ---- building the stream --------------------------------------------- */

void kv_shadow_free(struct kv_shadow *s)
{
	if (!s)
		return;
	if (s->p.be) {
		s->p.be->ops->buf_free(s->p.be, s->xk);
		s->p.be->ops->buf_free(s->p.be, s->xv);
		s->p.be->ops->buf_free(s->p.be, s->dk);
		s->p.be->ops->buf_free(s->p.be, s->dv);
		if (s->ws)
			s->p.be->ops->ws_free(s->ws);
	}
	kv_tail_free(&s->tail);
	free(s->fu);
	free(s->fv);
	free(s->fs);
	free(s->lm);
	free(s->held);
	free(s->hv);
	free(s->cs);
	free(s->sn);
	free(s->xpos);
	free(s->blk);
	free(s->job);
	free(s->score);
	free(s->logit);
	free(s->chosen);
	free(s->n_chosen);
	free(s->n_rows);
	free(s->probe_row);
	free(s);
}

/* (layer index l, KV head g)'s slot index. */
static size_t slot_of(const struct kv_shadow *s, int l, int g)
{
	return (size_t)l * s->p.n_head_kv + g;
}

/* Every layer's keys before RoPE, kpre [n_layer][n_tok][w] fp16: the
 * rotation of each position inverted (cos and sin over their squared
 * magnitude, sine negated: YaRN's magnitude is undone too), by the
 * backend's rope. x [256][w] and ic, is [256][half] are scratch. */
static void unrope_keys(struct kv_shadow *s, const uint16_t *const *k, uint16_t *kpre,
			float *x, float *ic, float *is)
{
	enum { STEP = 256 };
	struct backend *be = s->p.be;
	size_t w = (size_t)s->w, half = (size_t)s->half;

	for (int l = 0; l < s->p.n_layer; l++)
		for (int t0 = 0; t0 < s->n_tok; t0 += STEP) {
			int n = s->n_tok - t0 < STEP ? s->n_tok - t0 : STEP;
			for (size_t i = 0; i < (size_t)n * half; i++) {
				float c = s->cs[(size_t)t0 * half + i], sn = s->sn[(size_t)t0 * half + i];
				float m2 = c * c + sn * sn;
				ic[i] = c / m2;
				is[i] = -sn / m2;
			}
			quant_f16_to_f32_row(k[l] + (size_t)t0 * w, x, (size_t)n * w);
			be->ops->rope(be, x, n, s->p.n_head_kv, s->p.d_h, s->p.rope->n_rot, s->p.rope->neox, ic, is);
			quant_f32_to_f16_row(x, kpre + ((size_t)l * s->n_tok + t0) * w, (size_t)n * w);
		}
}

/* The truncated SVD of every layer's pre-RoPE keys, one backend job each. */
static int factor_keys(struct kv_shadow *s, const uint16_t *const *k, char *err, size_t errlen)
{
	size_t w = (size_t)s->w, n = (size_t)s->n_tok * w * s->p.n_layer;
	uint16_t *kpre = malloc(n * sizeof *kpre);
	float *x = malloc(256 * w * sizeof *x), *ic = malloc(256 * (size_t)s->half * sizeof *ic);
	float *is = malloc(256 * (size_t)s->half * sizeof *is);
	struct backend_svd *job = calloc((size_t)s->p.n_layer, sizeof *job);
	int rc = 0, bad = 0, info = 0;

	if (!kpre || !x || !ic || !is || !job) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "kv_shadow_new: pre-RoPE keys: out of memory");
		goto out;
	}
	unrope_keys(s, k, kpre, x, ic, is);
	for (int l = 0; l < s->p.n_layer; l++)
		job[l] = (struct backend_svd){ .x = kpre + (size_t)l * s->n_tok * w, .ldx = w,
			.rows = s->n_tok, .cols = s->w, .rank = s->rank, .s = s->fs + (size_t)l * s->rank,
			.u = s->fu + (size_t)l * s->n_tok * s->rank, .v = s->fv + (size_t)l * w * s->rank,
			.f16 = 1 };
	if ((rc = s->p.be->ops->svd(s->p.be, job, s->p.n_layer, &bad, &info)))
		rc = sekv_errf(err, errlen, rc, "kv_shadow_new: key factors: layer %d: LAPACK info %d",
			       bad, info);
out:
	free(job);
	free(is);
	free(ic);
	free(x);
	free(kpre);
	return rc;
}

/* cos of rows a, b [d] (1 when either is zero: no evidence of an outlier). */
static float cos_of(const float *a, const float *b, int d)
{
	double ab = 0, aa = 0, bb = 0;

	for (int i = 0; i < d; i++) {
		ab += (double)a[i] * b[i];
		aa += (double)a[i] * a[i];
		bb += (double)b[i] * b[i];
	}
	return aa > 0 && bb > 0 ? (float)(ab / sqrt(aa * bb)) : 1.0f;
}

/* (l, g)'s landmarks, its outlier chunks (beside the first and the last,
 * held exact) and its values in the host tier. row [d_h] and pick
 * [n_out] are scratch. */
static void fill_slot(struct kv_shadow *s, int l, int g, const uint16_t *k, const uint16_t *v,
		      float *row, int32_t *pick)
{
	int d = s->p.d_h, c_len = s->p.chunk;
	size_t sl = slot_of(s, l, g), w = (size_t)s->w;
	float *lm = s->lm + sl * s->n_chunk * d;
	uint8_t *held = s->held + sl * s->n_chunk;

	for (int c = 0; c < s->n_chunk; c++) {
		int t0 = c * c_len, t1 = t0 + c_len < s->n_tok ? t0 + c_len : s->n_tok;
		float *m = lm + (size_t)c * d;
		memset(m, 0, (size_t)d * sizeof *m);
		for (int t = t0; t < t1; t++) {
			quant_f16_to_f32_row(k + t * w + (size_t)g * d, row, (size_t)d);
			for (int i = 0; i < d; i++)
				m[i] += row[i] / (float)(t1 - t0);
		}
		float lo = 1.0f;
		for (int t = t0; t < t1; t++) {
			quant_f16_to_f32_row(k + t * w + (size_t)g * d, row, (size_t)d);
			float cs = cos_of(row, m, d);
			lo = cs < lo ? cs : lo;
		}
		held[c] = c == 0 || c == s->n_chunk - 1;
		/* the lowest similarity first; the ends are never outliers */
		s->score[c] = held[c] ? -INFINITY : -lo;
	}
	int n = kv_select_top(s->score, NULL, s->n_chunk, s->n_out, pick);
	for (int i = 0; i < n; i++)
		held[pick[i]] = 1;
	for (int t = 0; t < s->n_tok; t++)
		memcpy(s->hv + (sl * s->n_tok + t) * d, v + t * w + (size_t)g * d, (size_t)d * sizeof *s->hv);
}

/* (l, g)'s exact chunks into the device tier, ascending. */
static int copy_exact(struct kv_shadow *s, int l, int g, const uint16_t *k, const uint16_t *v)
{
	struct backend *be = s->p.be;
	size_t sl = slot_of(s, l, g), w = (size_t)s->w, rb = (size_t)s->p.d_h * sizeof(uint16_t);
	int r = 0, rc = 0;

	for (int c = 0; c < s->n_chunk && !rc; c++) {
		if (!s->held[sl * s->n_chunk + c])
			continue;
		for (int t = c * s->p.chunk; t < (c + 1) * s->p.chunk && t < s->n_tok && !rc; t++, r++) {
			size_t src = t * w + (size_t)g * s->p.d_h, dst = (sl * s->n_exact + r) * rb;
			s->xpos[sl * s->n_exact + r] = t;
			if (!(rc = be->ops->buf_write(be, s->xk, dst, k + src, rb)))
				rc = be->ops->buf_write(be, s->xv, dst, v + src, rb);
		}
	}
	return rc;
}

/* Every (layer, KV head)'s landmarks, outliers, exact chunks and values.
 * 0, SEKV_ENOMEM or a backend code. */
static int fill_all(struct kv_shadow *s, const uint16_t *const *k, const uint16_t *const *v,
		    char *err, size_t errlen)
{
	float *row = malloc(((size_t)s->p.d_h + 1) * sizeof *row);
	int32_t *pick = malloc(((size_t)s->n_out + 1) * sizeof *pick);
	int rc = 0;

	if (!row || !pick)
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "kv_shadow_new: out of memory");
	for (int l = 0; l < s->p.n_layer && !rc; l++)
		for (int g = 0; g < s->p.n_head_kv && !rc; g++) {
			fill_slot(s, l, g, k[l], v[l], row, pick);
			if ((rc = copy_exact(s, l, g, k[l], v[l])))
				rc = sekv_errf(err, errlen, rc, "kv_shadow_new: exact rows to the device");
		}
	free(pick);
	free(row);
	return rc;
}

/* Sizes after clipping. */
static void shape(struct kv_shadow *s, const struct kv_shadow_params *p, int n_tok)
{
	s->n_tok = n_tok;
	s->w = p->n_head_kv * p->d_h;
	s->n_chunk = n_chunk_of(n_tok, p->chunk);
	s->half = p->rope->n_rot / 2;
	s->rank = p->rank < n_tok ? p->rank : n_tok > 0 ? n_tok : 1;
	int n_free = s->n_chunk > 2 ? s->n_chunk - 2 : 0;
	s->n_out = p->n_outlier < n_free ? p->n_outlier : n_free;
	s->n_sel = p->n_select < n_free - s->n_out ? p->n_select : n_free - s->n_out;
	s->n_exact = ends_rows(n_tok, p->chunk) + s->n_out * p->chunk;
	s->slot = s->n_sel * p->chunk;
}

static int alloc_all(struct kv_shadow *s)
{
	const struct kv_shadow_params *p = &s->p;
	size_t n_slot = (size_t)p->n_layer * p->n_head_kv, d = (size_t)p->d_h, L = (size_t)p->n_layer;
	size_t nt = (size_t)s->n_tok, nc = (size_t)s->n_chunk, rk = (size_t)s->rank;

	return !(s->fu = malloc((L * nt * rk + 1) * sizeof *s->fu)) ||
	       !(s->fv = malloc((L * s->w * rk + 1) * sizeof *s->fv)) ||
	       !(s->fs = malloc((L * rk + 1) * sizeof *s->fs)) ||
	       !(s->lm = malloc((n_slot * nc * d + 1) * sizeof *s->lm)) ||
	       !(s->held = calloc(n_slot * nc + 1, sizeof *s->held)) ||
	       !(s->hv = malloc((n_slot * nt * d + 1) * sizeof *s->hv)) ||
	       !(s->cs = malloc((nt * s->half + 1) * sizeof *s->cs)) ||
	       !(s->sn = malloc((nt * s->half + 1) * sizeof *s->sn)) ||
	       !(s->xpos = calloc(n_slot * s->n_exact + 1, sizeof *s->xpos)) ||
	       !(s->blk = calloc((size_t)p->n_head_kv * 3, sizeof *s->blk)) ||
	       !(s->job = calloc((size_t)p->n_head_kv * s->n_sel + 1, sizeof *s->job)) ||
	       !(s->score = malloc((nc + 1) * sizeof *s->score)) ||
	       !(s->logit = malloc((nc + 1) * sizeof *s->logit)) ||
	       !(s->chosen = calloc(n_slot * s->n_sel + 1, sizeof *s->chosen)) ||
	       !(s->n_chosen = calloc(n_slot, sizeof *s->n_chosen)) ||
	       !(s->n_rows = calloc(n_slot, sizeof *s->n_rows)) ||
	       !(s->probe_row = calloc((size_t)p->n_head * (s->n_exact + s->slot + p->tail_cap),
				       sizeof *s->probe_row));
}

int kv_shadow_new(struct kv_shadow **out, const struct kv_shadow_params *p, int n_tok,
		  const uint16_t *const *k, const uint16_t *const *v, char *err, size_t errlen)
{
	struct kv_shadow *s;
	int rc;

	*out = NULL;
	if (!p || !p->be || !p->layer_id || !p->rope || p->n_layer < 1 || p->n_layer > KV_SHADOW_MAX_LAYER ||
	    p->n_head_kv < 1 || p->n_head % p->n_head_kv || p->d_h < 1 || p->tail_cap < 1 ||
	    p->chunk < 1 || p->rank < 1 || p->rank > p->n_head_kv * p->d_h || p->n_outlier < 0 ||
	    p->n_select < 0 || p->rope->n_rot < 2 || p->rope->n_rot % 2 || p->rope->n_rot > p->d_h ||
	    !p->rope->inv_freq || n_tok < 0 || (n_tok && (!k || !v)))
		return sekv_errf(err, errlen, SEKV_EINVAL, "kv_shadow_new: bad shape or arguments");
	if (!(s = calloc(1, sizeof *s)))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "kv_shadow_new: out of memory");
	s->p = *p;
	memcpy(s->layer_id, p->layer_id, (size_t)p->n_layer * sizeof *s->layer_id);
	s->p.layer_id = s->layer_id;
	shape(s, p, n_tok);
	size_t n_slot = (size_t)p->n_layer * p->n_head_kv, d = (size_t)p->d_h;
	size_t ex = n_slot * s->n_exact * d, dev = n_slot * s->slot * d;
	struct backend_ws_size wsz = { .n_batch = 1, .n_head = p->n_head, .d_head = p->d_h,
				       .mix_rows = s->n_exact + s->slot + p->tail_cap, .recon_rank = s->rank };
	const struct backend_ops *op = p->be->ops;
	if (alloc_all(s)) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "kv_shadow_new: out of memory (%zu host rows)",
			       n_slot * n_tok);
		goto fail;
	}
	if ((rc = op->ws_new(p->be, &wsz, &s->ws)) ||
	    (rc = op->buf_new(p->be, (ex + 1) * sizeof(uint16_t), &s->xk)) ||
	    (rc = op->buf_new(p->be, (ex + 1) * sizeof(uint16_t), &s->xv)) ||
	    (rc = op->buf_new(p->be, (dev + 1) * sizeof(uint16_t), &s->dk)) ||
	    (rc = op->buf_new(p->be, (dev + 1) * sizeof(uint16_t), &s->dv)) ||
	    (rc = kv_tail_init(&s->tail, p->be, p->n_layer, p->tail_cap, p->n_head_kv, p->d_h))) {
		rc = sekv_errf(err, errlen, rc, "kv_shadow_new: backend buffers: %zu bytes",
			       2 * (ex + dev) * sizeof(uint16_t));
		goto fail;
	}
	model_rope_tables(p->rope, 0, n_tok, s->cs, s->sn);
	if (n_tok && (rc = factor_keys(s, k, err, errlen)))
		goto fail;
	if ((rc = fill_all(s, k, v, err, errlen)))
		goto fail;
	*out = s;
	return 0;
fail:
	kv_shadow_free(s);
	return rc;
}

/* ---- counters ---------------------------------------------------------- */

size_t kv_shadow_meta_bytes(const struct kv_shadow *s)
{
	size_t L = (size_t)s->p.n_layer, rk = (size_t)s->rank;
	size_t factors = L * (((size_t)s->n_tok + s->w) * rk * sizeof(uint16_t) + rk * sizeof(float));

	return factors + L * s->n_chunk * s->w * sizeof(uint16_t);
}

size_t kv_shadow_fixed_bytes(const struct kv_shadow *s)
{
	return kv_shadow_meta_bytes(s) +
	       model_kv_bytes(s->n_exact + s->slot, s->p.n_layer, s->p.n_head_kv, s->p.d_h);
}

size_t kv_shadow_resident_bytes(const void *ctx)
{
	const struct kv_shadow *s = ctx;
	size_t b = kv_shadow_meta_bytes(s) + kv_tail_bytes(&s->tail) +
		   model_kv_bytes(s->n_exact, s->p.n_layer, s->p.n_head_kv, s->p.d_h);

	for (size_t i = 0; i < (size_t)s->p.n_layer * s->p.n_head_kv; i++)
		b += model_kv_bytes(s->n_rows[i], 1, 1, s->p.d_h);
	return b;
}

size_t kv_shadow_host_bytes(const struct kv_shadow *s)
{
	return model_kv_bytes(s->n_tok, s->p.n_layer, s->p.n_head_kv, s->p.d_h) / 2;
}

void kv_shadow_get_plan(const struct kv_shadow *s, struct kv_shadow_plan *p)
{
	*p = (struct kv_shadow_plan){ s->rank, s->n_out, s->n_sel };
}

int kv_shadow_tail_rows(const void *ctx)
{
	return kv_tail_rows(&((const struct kv_shadow *)ctx)->tail);
}

int kv_shadow_evict(void *ctx, int pos)
{
	struct kv_shadow *s = ctx;

	return kv_tail_evict(&s->tail, pos - s->n_tok);
}

void kv_shadow_set_probe(void *ctx, const struct model_probe *p)
{
	((struct kv_shadow *)ctx)->probe = p;
}

int kv_shadow_chosen(const struct kv_shadow *s, int l, int g, const int32_t **chunk)
{
	*chunk = s->chosen + slot_of(s, l, g) * s->n_sel;
	return s->n_chosen[slot_of(s, l, g)];
}

int kv_shadow_exact(const struct kv_shadow *s, int l, int g, const int32_t **pos)
{
	*pos = s->xpos + slot_of(s, l, g) * s->n_exact;
	return s->n_exact;
}

/* ---- a decode step ----------------------------------------------------- */

/* (layer index l, KV head g)'s chunks for queries q [n_head][d_h]: each
 * query head's softmax over the landmarks of the chunks not held exact,
 * summed over the group; the best n_sel get a rebuild job each (jobs
 * from *n_job on) and their values are written to the device slot.
 * 0 or a backend code. */
static int choose_chunks(struct kv_shadow *s, int l, int g, const float *q, int *n_job)
{
	struct backend *be = s->p.be;
	int d = s->p.d_h, group = s->p.n_head / s->p.n_head_kv, r = 0, rc = 0, cl = s->p.chunk;
	size_t sl = slot_of(s, l, g), rk = (size_t)s->rank;
	const float *lm = s->lm + sl * s->n_chunk * d;
	const uint8_t *held = s->held + sl * s->n_chunk;
	int32_t *chosen = s->chosen + sl * s->n_sel;

	for (int c = 0; c < s->n_chunk; c++)
		s->score[c] = held[c] ? -INFINITY : 0.0f;
	for (int h = 0; h < group; h++) {
		const float *qh = q + ((size_t)g * group + h) * d;
		float mx = -INFINITY;
		double z = 0;
		for (int c = 0; c < s->n_chunk; c++) {
			if (held[c])
				continue;
			float a = 0;
			for (int i = 0; i < d; i++)
				a += qh[i] * lm[(size_t)c * d + i];
			s->logit[c] = a * s->p.q_scale;
			mx = s->logit[c] > mx ? s->logit[c] : mx;
		}
		for (int c = 0; c < s->n_chunk; c++)
			if (!held[c])
				z += s->logit[c] = expf(s->logit[c] - mx);
		for (int c = 0; c < s->n_chunk; c++)
			if (!held[c])
				s->score[c] += (float)(s->logit[c] / z);
	}
	s->n_chosen[sl] = kv_select_top(s->score, NULL, s->n_chunk, s->n_sel, chosen);
	for (int c = 0; c < s->n_chosen[sl] && !rc; c++) {
		int t0 = chosen[c] * cl;
		size_t dst = sl * s->slot + r;
		s->job[(*n_job)++] = (struct backend_recon){ .len = cl, .d = d, .rank = s->rank,
			.r = s->rank, .f16 = 1, .u = s->fu + ((size_t)l * s->n_tok + t0) * rk,
			.s = s->fs + (size_t)l * rk, .v = s->fv + ((size_t)l * s->w + (size_t)g * d) * rk,
			.dst = s->dk, .off = dst * d, .cs = s->cs + (size_t)t0 * s->half,
			.sn = s->sn + (size_t)t0 * s->half, .n_rot = s->p.rope->n_rot,
			.rope_gptj = !s->p.rope->neox };
		rc = be->ops->buf_write(be, s->dv, dst * d * sizeof(uint16_t),
					s->hv + (sl * s->n_tok + t0) * d, (size_t)cl * d * sizeof(uint16_t));
		r += cl;
	}
	s->n_rows[sl] = r;
	return rc;
}

/* Exact and rebuilt rows' probe mass back to their positions (tail rows
 * hold no document). */
static void probe_end(struct kv_shadow *s, int l, int layer)
{
	const struct model_probe *p = s->probe;
	int group = s->p.n_head / s->p.n_head_kv, cl = s->p.chunk;

	for (int i = 0; i < p->n && i < MODEL_PROBE_MAX; i++) {
		int h = p->head[i];
		if (p->layer[i] != layer || h < 0 || h >= s->p.n_head)
			continue;
		size_t sl = slot_of(s, l, h / group);
		const float *rm = s->probe_row + (size_t)h * (s->n_exact + s->slot + s->p.tail_cap);
		const int32_t *xpos = s->xpos + sl * s->n_exact, *chosen = s->chosen + sl * s->n_sel;
		float *m = p->mass + (size_t)i * p->n_pos;
		for (int r = 0; r < s->n_exact; r++)
			if (xpos[r] < p->n_pos)
				m[xpos[r]] += rm[r];
		for (int r = 0; r < s->n_rows[sl]; r++) {
			int pos = chosen[r / cl] * cl + r % cl;
			if (pos < p->n_pos)
				m[pos] += rm[s->n_exact + r];
		}
	}
}

int kv_shadow_attend(void *ctx, int layer, int pos, const float *q,
		     const float *k, const float *v, float *out)
{
	struct kv_shadow *s = ctx;
	struct backend_mix mx;
	struct backend_probe pr;
	int l = -1, n_job = 0, rc;

	if (!s || !q || !k || !v || !out)
		return SEKV_EINVAL;
	for (int i = 0; i < s->p.n_layer; i++)
		if (s->layer_id[i] == layer)
			l = i;
	if (l < 0 || kv_tail_append(&s->tail, l, pos - s->n_tok, k, v))
		return SEKV_EINVAL;
	for (int g = 0; g < s->p.n_head_kv; g++)
		if ((rc = choose_chunks(s, l, g, q, &n_job)))
			return rc;
	if (n_job && (rc = s->p.be->ops->reconstruct(s->p.be, s->ws, s->job, n_job)))
		return rc;
	for (int g = 0; g < s->p.n_head_kv; g++) {
		size_t sl = slot_of(s, l, g), d = (size_t)s->p.d_h;
		s->blk[3 * g] = (struct backend_mix_block){ s->xk, s->xv, sl * s->n_exact * d, d,
			s->n_exact, BACKEND_ROW_F16, 0.0f, 0, NULL, NULL, 0, 0 };
		s->blk[3 * g + 1] = (struct backend_mix_block){ s->dk, s->dv, sl * s->slot * d, d,
			s->n_rows[sl], BACKEND_ROW_F16, 0.0f, 0, NULL, NULL, 0, 0 };
		s->blk[3 * g + 2] = kv_tail_block(&s->tail, l, g);
	}
	mx = (struct backend_mix){ .q = q, .out = out, .n_head = s->p.n_head,
		.n_head_kv = s->p.n_head_kv, .d_head = s->p.d_h, .scale = s->p.q_scale,
		.blk = s->blk, .n_blk = 3 };
	if (s->probe && model_probe_backend(s->probe, layer, s->p.n_head, s->probe_row,
					    (size_t)s->n_exact + s->slot + s->p.tail_cap,
					    s->n_exact + s->slot + s->blk[2].n, &pr))
		mx.probe = &pr;
	if ((rc = s->p.be->ops->attention_mix(s->p.be, s->ws, &mx)))
		return rc;
	if (mx.probe)
		probe_end(s, l, layer);
	return 0;
}
