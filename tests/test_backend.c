/* test_backend.c - every operation of the backend table against a plain
 * scalar reference written here (double sums), on the default model's
 * shapes (Gemma 3 270M: n_embd 640, n_head 4, n_head_kv 1, d_head 256,
 * n_ff 2048, sliding window 512), with real weight rows from the model
 * file and fixed-seed random data elsewhere. The checks are one table over
 * a struct backend *: a second backend runs the same table (add a row to
 * k_backends).
 */
#include "tests/test.h"

#include "engine/backend/backend.h"
#include "engine/base/err.h"
#include "engine/gguf/gguf.h"
#include "engine/quant/quant.h"
#include "engine/sekv/sekv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define E 640      /* n_embd */
#define NH 4       /* n_head */
#define NKV 1      /* n_head_kv */
#define D 256      /* d_head */
#define FF 2048    /* n_ff */
#define WIN 512    /* sliding window */

static const char *k_backends[] = { "cpu" };

/* ---- helpers --------------------------------------------------------- */

static struct backend *open_be(struct test_ctx *t, const char *name, int n_threads)
{
	struct backend *b = NULL;
	char err[256];

	if (backend_open(name, n_threads, &b, err, sizeof err))
		T_FAIL(t, "backend_open(%s): %s", name, err);
	return b;
}

static struct backend_ws *ws_for(struct backend *b, int n_batch, size_t max_w, int mix_rows)
{
	struct backend_ws_size sz = { n_batch, NH, D, max_w, FF, mix_rows, 0 };
	struct backend_ws *ws = NULL;

	return b->ops->ws_new(b, &sz, &ws) ? NULL : ws;
}

/* A weight of the model file; 0 when the file or tensor is missing. */
static int load_weight(struct gguf *g, const char *name, struct backend_weight *w)
{
	const struct gguf_tensor *t = gguf_find_tensor(g, name);

	if (!t || !quant_supported(t->type))
		return 0;
	w->type = t->type;
	w->cols = (int)t->ne[0];
	w->rows = (int)t->ne[1];
	w->row_bytes = quant_row_bytes(t->type, t->ne[0]);
	w->data = t->data;
	return 1;
}

static float *randv(size_t n, unsigned long long seed)
{
	float *x = malloc(n * sizeof *x);

	if (x)
		test_fill_random(x, n, seed);
	return x;
}

/* Worst |a - b| / (|b| + floor) over n. */
static double max_rel(const float *a, const double *b, size_t n, double floor)
{
	double e = 0;

	for (size_t i = 0; i < n; i++) {
		double d = fabs(a[i] - b[i]) / (fabs(b[i]) + floor);
		e = d > e ? d : e;
	}
	return e;
}

typedef void (*check_fn)(struct test_ctx *t, struct backend *b, struct gguf *g);

/* ---- matmul, get_rows ------------------------------------------------ */

/* y = x W^T for batch n and one token, int8 paths (act_q8) within their
 * bound, fp32 paths tight, on real rows of blk.0.ffn_gate, ffn_down and
 * attn_q. */
static void check_matmul(struct test_ctx *t, struct backend *b, struct gguf *g)
{
	const char *names[] = { "blk.0.ffn_gate.weight", "blk.0.ffn_down.weight",
				"blk.0.attn_q.weight" };
	int n = 9, r0 = 64, rows = 96;

	for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
		struct backend_weight w;
		if (!load_weight(g, names[k], &w))
			T_SKIP(t, "skipped: %s not in the model", names[k]);
		float *x = randv((size_t)n * w.cols, 11 + k), *y = malloc(sizeof(float) * n * rows);
		float *wr = malloc(sizeof(float) * w.cols);
		double *ref = malloc(sizeof(double) * n * rows), *mag = malloc(sizeof(double) * n * rows);
		struct backend_ws *ws = ws_for(b, n, (size_t)rows * w.cols, 0);
		T_CHECK(t, x && y && wr && ref && mag && ws);
		for (int r = 0; r < rows; r++) {
			quant_dequant_row(w.type, (const char *)w.data + (size_t)(r0 + r) * w.row_bytes,
					  wr, (size_t)w.cols);
			for (int i = 0; i < n; i++) {
				double s = 0, a = 0;
				for (int c = 0; c < w.cols; c++) {
					s += (double)wr[c] * x[(size_t)i * w.cols + c];
					a += fabs((double)wr[c] * x[(size_t)i * w.cols + c]);
				}
				ref[(size_t)i * rows + r] = s;
				mag[(size_t)i * rows + r] = a;
			}
		}
		for (int q8 = 0; q8 < 2; q8++) {
			int keep = b->act_q8;
			/* int8 activations (batch and one token): each x rounded
			 * to 1/254 of its block's max */
			double tol = q8 ? 1.5e-2 : 1e-5;
			b->act_q8 = q8;
			b->ops->matmul(b, ws, &w, r0, rows, x, n, y, rows);
			for (int i = 0; i < n * rows; i++)
				T_CHECKF(t, fabs(y[i] - ref[i]) <= tol * mag[i] + 1e-6,
					 "%s batch q8=%d [%d]: %g vs %g", names[k], q8, i, y[i], ref[i]);
			b->ops->matmul(b, ws, &w, r0, rows, x, 1, y, rows);
			b->act_q8 = keep;
			for (int r = 0; r < rows; r++)
				T_CHECKF(t, fabs(y[r] - ref[r]) <= tol * mag[r] + 1e-6,
					 "%s one token q8=%d [%d]: %g vs %g", names[k], q8, r, y[r], ref[r]);
		}
		b->ops->ws_free(ws);
		free(x), free(y), free(wr), free(ref), free(mag);
	}
}

static void check_get_rows(struct test_ctx *t, struct backend *b, struct gguf *g)
{
	struct backend_weight w;
	int32_t ids[3] = { 2, 1000, 236764 };
	float *y, *r;

	if (!load_weight(g, "token_embd.weight", &w))
		T_SKIP(t, "skipped: token_embd.weight not in the model");
	y = malloc(sizeof(float) * 3 * w.cols);
	r = malloc(sizeof(float) * w.cols);
	T_CHECK(t, y && r);
	b->ops->get_rows(b, &w, ids, 3, 25.3f, y);
	for (int i = 0; i < 3; i++) {
		quant_dequant_row(w.type, (const char *)w.data + (size_t)ids[i] * w.row_bytes, r,
				  (size_t)w.cols);
		for (int c = 0; c < w.cols; c++)
			T_CHECKF(t, y[(size_t)i * w.cols + c] == r[c] * 25.3f, "row %d col %d", i, c);
	}
	free(y);
	free(r);
}

/* ---- element-wise ---------------------------------------------------- */

static void check_elementwise(struct test_ctx *t, struct backend *b, struct gguf *g)
{
	int n = 5;
	float *x = randv((size_t)n * E, 21), *w = randv(E, 22), *y = malloc(sizeof(float) * n * E);
	float *u = randv((size_t)n * FF, 23), *gg = randv((size_t)n * FF, 24);
	double *ref = malloc(sizeof(double) * n * FF);

	(void)g;
	T_CHECK(t, x && w && y && u && gg && ref);
	/* rmsnorm */
	b->ops->rmsnorm(b, x, w, n, E, 1e-6f, y);
	for (int r = 0; r < n; r++) {
		double ss = 0;
		for (int e = 0; e < E; e++)
			ss += (double)x[r * E + e] * x[r * E + e];
		for (int e = 0; e < E; e++)
			ref[r * E + e] = x[r * E + e] / sqrt(ss / E + 1e-6) * w[e];
	}
	T_CHECKF(t, max_rel(y, ref, (size_t)n * E, 1e-3) < 1e-5, "rmsnorm");
	/* gelu_mul: gelu_tanh(g) * u */
	for (int i = 0; i < n * FF; i++) {
		double v = gg[i] * 4.0;
		gg[i] = (float)v;
		ref[i] = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))) * u[i];
	}
	b->ops->gelu_mul(b, gg, u, (size_t)n * FF);
	T_CHECKF(t, max_rel(gg, ref, (size_t)n * FF, 1e-3) < 1e-5, "gelu_mul");
	/* add */
	memcpy(y, x, sizeof(float) * n * E);
	b->ops->add(b, y, w, E);
	for (int e = 0; e < E; e++)
		T_CHECKF(t, y[e] == x[e] + w[e], "add [%d]", e);
	/* rope: NEOX pairs (j, j + n_rot/2) at token angles */
	{
		int nrot = D, half = D / 2;
		float *q = randv((size_t)n * NH * D, 25), *cs = malloc(sizeof(float) * n * half);
		float *sn = malloc(sizeof(float) * n * half);
		double *rr = malloc(sizeof(double) * n * NH * D);
		T_CHECK(t, q && cs && sn && rr);
		for (int i = 0; i < n; i++)
			for (int j = 0; j < half; j++) {
				double a = (700 + i) * pow(10000.0, -2.0 * j / nrot);
				cs[i * half + j] = (float)cos(a);
				sn[i * half + j] = (float)sin(a);
			}
		for (int i = 0; i < n; i++)
			for (int h = 0; h < NH; h++)
				for (int j = 0; j < half; j++) {
					const float *qh = q + ((size_t)i * NH + h) * D;
					double c = cs[i * half + j], s = sn[i * half + j];
					rr[((size_t)i * NH + h) * D + j] = qh[j] * c - qh[j + half] * s;
					rr[((size_t)i * NH + h) * D + j + half] = qh[j] * s + qh[j + half] * c;
				}
		b->ops->rope(b, q, n, NH, D, nrot, 1, cs, sn);
		T_CHECKF(t, max_rel(q, rr, (size_t)n * NH * D, 1e-2) < 1e-5, "rope");
		/* adjacent pairs (2j, 2j + 1): GPT-J / llama.cpp NORM */
		free(q);
		q = randv((size_t)n * NH * D, 26);
		T_CHECK(t, q != NULL);
		for (int i = 0; i < n; i++)
			for (int h = 0; h < NH; h++)
				for (int j = 0; j < half; j++) {
					const float *qh = q + ((size_t)i * NH + h) * D;
					double c = cs[i * half + j], s = sn[i * half + j];
					rr[((size_t)i * NH + h) * D + 2 * j] = qh[2 * j] * c - qh[2 * j + 1] * s;
					rr[((size_t)i * NH + h) * D + 2 * j + 1] = qh[2 * j] * s + qh[2 * j + 1] * c;
				}
		b->ops->rope(b, q, n, NH, D, nrot, 0, cs, sn);
		T_CHECKF(t, max_rel(q, rr, (size_t)n * NH * D, 1e-2) < 1e-5, "rope pairs (2j, 2j+1)");
		free(q), free(cs), free(sn), free(rr);
	}
	/* silu_mul: g / (1 + exp(-g)) * u */
	for (int i = 0; i < n * FF; i++) {
		double v = (i % 17 - 8) * 0.9;
		gg[i] = (float)v;
		ref[i] = v / (1 + exp(-v)) * u[i];
	}
	b->ops->silu_mul(b, gg, u, (size_t)n * FF);
	T_CHECKF(t, max_rel(gg, ref, (size_t)n * FF, 1e-3) < 1e-5, "silu_mul");
	/* add_bias: every row gets the same vector */
	memcpy(y, x, sizeof(float) * n * E);
	b->ops->add_bias(b, y, w, n, E);
	for (int r = 0; r < n; r++)
		for (int e = 0; e < E; e++)
			T_CHECKF(t, y[r * E + e] == x[r * E + e] + w[e], "add_bias [%d][%d]", r, e);
	free(x), free(w), free(y), free(u), free(gg), free(ref);
}

/* ---- buffers, kv_store ----------------------------------------------- */

static void check_buffers(struct test_ctx *t, struct backend *b, struct gguf *g)
{
	int cap = 8, w = NKV * D, n = 11;
	struct backend_buf *kb = NULL, *vb = NULL, *wr = NULL;
	float *k = randv((size_t)n * w, 31), *v = randv((size_t)n * w, 32);
	uint16_t *out = malloc(sizeof(uint16_t) * cap * w), pat[64], back[64];

	(void)g;
	T_CHECK(t, k && v && out);
	T_CHECK(t, b->ops->buf_new(b, sizeof(uint16_t) * cap * w, &kb) == 0);
	T_CHECK(t, b->ops->buf_new(b, sizeof(uint16_t) * cap * w, &vb) == 0);
	/* n > cap rows wrap the ring: row i lands at (pos0 + i) % cap */
	b->ops->kv_store(b, kb, vb, cap, w, k, v, 5, n);
	T_CHECK(t, b->ops->buf_read(b, kb, 0, out, sizeof(uint16_t) * cap * w) == 0);
	for (int i = n - cap; i < n; i++)
		for (int e = 0; e < w; e++)
			T_CHECKF(t, out[(size_t)((5 + i) % cap) * w + e] ==
				 quant_f32_to_f16(k[(size_t)i * w + e]), "k row %d", i);
	T_CHECK(t, b->ops->buf_read(b, vb, 0, out, sizeof(uint16_t) * cap * w) == 0);
	T_CHECK(t, out[(size_t)((5 + n - 1) % cap) * w] == quant_f32_to_f16(v[(size_t)(n - 1) * w]));
	/* write / read / overlapping copy / ranges */
	for (int i = 0; i < 64; i++)
		pat[i] = (uint16_t)(i * 977);
	T_CHECK(t, b->ops->buf_write(b, kb, 10, pat, sizeof pat) == 0);
	T_CHECK(t, b->ops->buf_read(b, kb, 10, back, sizeof back) == 0);
	T_CHECK(t, !memcmp(pat, back, sizeof pat));
	T_CHECK(t, b->ops->buf_copy(b, kb, 14, kb, 10, sizeof pat) == 0);
	T_CHECK(t, b->ops->buf_read(b, kb, 14, back, sizeof back) == 0);
	T_CHECK(t, !memcmp(pat, back, sizeof pat));
	T_CHECK(t, b->ops->buf_read(b, kb, kb->bytes - 1, back, 2) == SEKV_EINVAL);
	T_CHECK(t, b->ops->buf_write(b, kb, (size_t)-1, pat, 2) == SEKV_EINVAL);
	T_CHECK(t, b->ops->buf_wrap(b, pat, sizeof pat, &wr) == 0);
	T_CHECK(t, b->ops->buf_read(b, wr, 6, back, 8) == 0 && !memcmp(back, pat + 3, 8));
	T_CHECK(t, b->ops->buf_write(b, wr, 0, back, 2) == SEKV_EINVAL);
	b->ops->buf_free(b, wr);
	b->ops->buf_free(b, kb);
	b->ops->buf_free(b, vb);
	b->ops->buf_free(b, NULL);
	free(k), free(v), free(out);
}

/* ---- attention ------------------------------------------------------- */

/* Scalar attention over fp16 rows in double (causal, window as in
 * struct backend_attn). */
static void attn_ref(const float *q, const uint16_t *kc, const uint16_t *vc, int cap, int n,
		     int pos0, int window, float scale, double *out)
{
	for (int i = 0; i < n; i++) {
		int p = pos0 + i, lo = window > 0 ? p - window + 1 : 0;
		lo = lo < 0 ? 0 : lo;
		for (int h = 0; h < NH; h++) {
			int g = h / (NH / NKV);
			const float *qh = q + ((size_t)i * NH + h) * D;
			double mx = -INFINITY, sum = 0, *o = out + ((size_t)i * NH + h) * D;
			double *s = malloc(sizeof(double) * (size_t)(p - lo + 1));
			for (int j = lo; j <= p; j++) {
				const uint16_t *kr = kc + ((size_t)(j % cap) * NKV + g) * D;
				double d = 0;
				for (int e = 0; e < D; e++)
					d += (double)qh[e] * quant_f16_to_f32(kr[e]);
				s[j - lo] = d * scale;
				mx = s[j - lo] > mx ? s[j - lo] : mx;
			}
			memset(o, 0, sizeof(double) * D);
			for (int j = lo; j <= p; j++) {
				const uint16_t *vr = vc + ((size_t)(j % cap) * NKV + g) * D;
				double pj = exp(s[j - lo] - mx);
				sum += pj;
				for (int e = 0; e < D; e++)
					o[e] += pj * quant_f16_to_f32(vr[e]);
			}
			for (int e = 0; e < D; e++)
				o[e] /= sum;
			free(s);
		}
	}
}

static void check_attention(struct test_ctx *t, struct backend *b, struct gguf *g)
{
	/* {n, pos0, window, cap}: batch causal, batch sliding window over a
	 * wrapped ring, one token causal, one token in a window */
	const int cases[][4] = { { 70, 0, 0, 96 }, { 40, 600, WIN, WIN + 40 },
				 { 1, 700, 0, 701 }, { 1, 1300, WIN, WIN + 8 } };

	(void)g;
	for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
		int n = cases[c][0], pos0 = cases[c][1], win = cases[c][2], cap = cases[c][3];
		int lo = win > 0 ? pos0 - win + 1 : 0, w = NKV * D;
		struct backend_buf *kb = NULL, *vb = NULL;
		struct backend_ws *ws = ws_for(b, n, 1, 0);
		float *q = randv((size_t)n * NH * D, 41 + c), *out = malloc(sizeof(float) * n * NH * D);
		float *kv = randv((size_t)(pos0 + n) * w * 2, 51 + c);
		uint16_t *kc = malloc(sizeof(uint16_t) * cap * w), *vc = malloc(sizeof(uint16_t) * cap * w);
		double *ref = malloc(sizeof(double) * n * NH * D);
		T_CHECK(t, ws && q && out && kv && kc && vc && ref);
		T_CHECK(t, b->ops->buf_new(b, sizeof(uint16_t) * cap * w, &kb) == 0);
		T_CHECK(t, b->ops->buf_new(b, sizeof(uint16_t) * cap * w, &vb) == 0);
		lo = lo < 0 ? 0 : lo;
		for (int p = lo; p < pos0 + n; p++) /* rows scaled up: peaky softmax */
			for (int e = 0; e < w; e++)
				kv[(size_t)p * w + e] *= 3.0f;
		b->ops->kv_store(b, kb, vb, cap, w, kv + (size_t)lo * w,
				 kv + (size_t)(pos0 + n) * w + (size_t)lo * w, lo, pos0 + n - lo);
		b->ops->buf_read(b, kb, 0, kc, sizeof(uint16_t) * cap * w);
		b->ops->buf_read(b, vb, 0, vc, sizeof(uint16_t) * cap * w);
		struct backend_attn a = { q, out, n, pos0, NH, NKV, D, kb, vb, cap, win, 0.0625f, NULL };
		T_CHECK(t, b->ops->attention(b, ws, &a) == 0);
		attn_ref(q, kc, vc, cap, n, pos0, win, 0.0625f, ref);
		T_CHECKF(t, max_rel(out, ref, (size_t)n * NH * D, 1e-2) < 1e-4,
			 "case %zu: %g", c, max_rel(out, ref, (size_t)n * NH * D, 1e-2));
		b->ops->buf_free(b, kb);
		b->ops->buf_free(b, vb);
		b->ops->ws_free(ws);
		free(q), free(out), free(kv), free(kc), free(vc), free(ref);
	}
}

static void check_lse_fold(struct test_ctx *t, struct backend *b, struct gguf *g)
{
	int n = 6, cols = 1000;
	float *s = randv((size_t)n * cols, 61), mx[6];
	double sm[6];

	(void)g;
	T_CHECK(t, s);
	for (int i = 0; i < n * cols; i++)
		s[i] *= 30.0f;
	for (int i = 0; i < n; i++) {
		mx[i] = -INFINITY;
		sm[i] = 0;
	}
	/* two folds of 600 and 400 columns = one row of 1000 */
	b->ops->lse_fold(b, s, n, 600, cols, mx, sm);
	b->ops->lse_fold(b, s + 600, n, 400, cols, mx, sm);
	for (int i = 0; i < n; i++) {
		double m = -INFINITY, z = 0;
		for (int c = 0; c < cols; c++)
			m = s[i * cols + c] > m ? s[i * cols + c] : m;
		for (int c = 0; c < cols; c++)
			z += exp(s[i * cols + c] - m);
		T_CHECKF(t, fabs(mx[i] + log(sm[i]) - (m + log(z))) < 1e-5 * fabs(m + log(z)) + 1e-5,
			 "row %d", i);
	}
	free(s);
}

/* ---- SeKV operations ------------------------------------------------- */

/* Double-precision mixed attention of head h over blocks blk[0..nb) of its
 * KV head (k = v: a block's value rows are its key rows): ref[D], the
 * softmax weight of every unmasked row into w (if not NULL), returns the
 * log of the softmax's denominator. */
static double mix_ref(const struct backend_mix_block *blk, int nb, const float *src,
		      const uint16_t *h16, const float *qh, double scale, double *ref, double *w)
{
	static double s[1024];
	double mx = -INFINITY, z = 0;
	int n = 0;

	for (int k = 0; k < nb; k++)
		for (int i = 0; !blk[k].masked && i < blk[k].n; i++, n++) {
			size_t e = blk[k].off + (size_t)i * blk[k].ld;
			double d = 0;
			for (int c = 0; c < D; c++)
				d += (double)qh[c] * (blk[k].type == BACKEND_ROW_F32 ? src[e + c] : quant_f16_to_f32(h16[e + c]));
			s[n] = d * scale + blk[k].bias;
			mx = s[n] > mx ? s[n] : mx;
		}
	memset(ref, 0, sizeof(double) * D);
	for (int i = 0; i < n; i++)
		z += exp(s[i] - mx);
	n = 0;
	for (int k = 0; k < nb; k++)
		for (int i = 0; !blk[k].masked && i < blk[k].n; i++, n++) {
			size_t e = blk[k].off + (size_t)i * blk[k].ld;
			double p = exp(s[n] - mx) / z;
			if (w)
				w[n] = p;
			for (int c = 0; c < D; c++)
				ref[c] += p * (blk[k].type == BACKEND_ROW_F32 ? src[e + c] : quant_f16_to_f32(h16[e + c]));
		}
	return mx + log(z);
}

/* Blocks: fp16 exact rows, fp32 coarse rows with bias +log 7 (one masked),
 * fp16 and fp32 reconstructed rows; two KV heads of two query heads; more
 * rows than one part. Checked against double precision: the output, the
 * log-denominator, the probe's weights, and the same softmax taken in two
 * calls (the second carrying the first's result). */
static void check_attention_mix(struct test_ctx *t, struct backend *b, struct gguf *g)
{
	enum { NB = 5, ROWS = 800, H = 4, KV = 2, N1 = 2 };
	float *q = randv((size_t)H * D, 71), *out = malloc(sizeof(float) * H * D);
	float *out2 = malloc(sizeof(float) * H * D), lse[H], lse1[H], lse2[H];
	float *src = randv((size_t)ROWS * KV * D * 2, 72), *mass = calloc(ROWS, sizeof(float));
	uint16_t *h16 = malloc(sizeof(uint16_t) * ROWS * KV * D * 2);
	struct backend_buf *b16 = NULL, *b32 = NULL;
	struct backend_mix_block blk[KV][NB];
	struct backend_ws *ws = ws_for(b, 1, 1, ROWS);
	double *ref = malloc(sizeof(double) * H * D), ref_lse[H], *w = malloc(sizeof(double) * ROWS);
	size_t half = (size_t)ROWS * KV * D;
	double worst = 0, worst_w = 0;

	(void)g;
	T_CHECK(t, q && out && out2 && src && mass && h16 && ws && ref && w);
	for (size_t i = 0; i < half * 2; i++)
		h16[i] = quant_f32_to_f16(src[i] * 2.0f);
	T_CHECK(t, b->ops->buf_wrap(b, h16, sizeof(uint16_t) * half * 2, &b16) == 0);
	T_CHECK(t, b->ops->buf_wrap(b, src, sizeof(float) * half * 2, &b32) == 0);
	for (int g2 = 0; g2 < KV; g2++) {
		size_t ld = (size_t)KV * D, o = (size_t)g2 * D;
		blk[g2][0] = (struct backend_mix_block){ b16, b16, o, ld, 300, BACKEND_ROW_F16, 0.0f, 0, NULL, NULL, 0, 0 };
		blk[g2][1] = (struct backend_mix_block){ b16, b16, o + 300 * ld, ld, g2 ? 7 : 0, BACKEND_ROW_F16, 0.0f, 0, NULL, NULL, 0, 0 };
		blk[g2][2] = (struct backend_mix_block){ b32, b32, o + 320 * ld, ld, 20, 1, logf(7), 0, NULL, NULL, 0, 0 };
		blk[g2][3] = (struct backend_mix_block){ b32, b32, o + 340 * ld, ld, 5, 1, logf(7), 1, NULL, NULL, 0, 0 };
		blk[g2][4] = (struct backend_mix_block){ b16, b16, o + 350 * ld, ld, 300, BACKEND_ROW_F16, 0.0f, 0, NULL, NULL, 0, 0 };
	}
	struct backend_probe pr = { 1, { 3 }, { mass }, ROWS };
	struct backend_mix a = { q, out, H, KV, D, 0.0625f, &blk[0][0], NB, &pr, NULL, NULL, lse };
	T_CHECK(t, b->ops->attention_mix(b, ws, &a) == 0);
	for (int h = 0; h < H; h++) {
		int g2 = h / (H / KV);
		ref_lse[h] = mix_ref(blk[g2], NB, src, h16, q + h * D, 0.0625, ref + h * D, h == 3 ? w : NULL);
		T_CHECKF(t, fabs(lse[h] - ref_lse[h]) < 1e-4 * fabs(ref_lse[h]) + 1e-4, "lse %d: %g vs %g",
			 h, lse[h], ref_lse[h]);
	}
	for (int r = 0; r < 627; r++)
		worst_w = fmax(worst_w, fabs(mass[r] - w[r]) / (w[r] + 1e-4));
	T_CHECKF(t, max_rel(out, ref, (size_t)H * D, 1e-2) < 1e-4, "mix: %g",
		 max_rel(out, ref, (size_t)H * D, 1e-2));
	T_CHECKF(t, worst_w < 1e-3, "probe weights: %g", worst_w);

	/* the same softmax in two calls: blocks [0, N1), then the rest with
	 * the first call's result carried */
	struct backend_mix_block b1[KV][N1], b2[KV][NB - N1];
	for (int g2 = 0; g2 < KV; g2++) {
		memcpy(b1[g2], blk[g2], sizeof b1[g2]);
		memcpy(b2[g2], blk[g2] + N1, sizeof b2[g2]);
	}
	struct backend_mix a1 = { q, out2, H, KV, D, 0.0625f, &b1[0][0], N1, NULL, NULL, NULL, lse1 };
	T_CHECK(t, b->ops->attention_mix(b, ws, &a1) == 0);
	float *carry = malloc(sizeof(float) * H * D);
	memcpy(carry, out2, sizeof(float) * H * D);
	struct backend_mix a2 = { q, out2, H, KV, D, 0.0625f, &b2[0][0], NB - N1, NULL, lse1, carry, lse2 };
	T_CHECK(t, b->ops->attention_mix(b, ws, &a2) == 0);
	for (int h = 0; h < H; h++)
		worst = fmax(worst, fabs(lse2[h] - ref_lse[h]));
	T_CHECKF(t, worst < 1e-4, "carried lse: %g", worst);
	T_CHECKF(t, max_rel(out2, ref, (size_t)H * D, 1e-2) < 1e-4, "carried mix: %g",
		 max_rel(out2, ref, (size_t)H * D, 1e-2));
	/* too many rows for the workspace: refused */
	blk[0][0].n = ROWS;
	T_CHECK(t, b->ops->attention_mix(b, ws, &a) == SEKV_EINVAL);
	b->ops->buf_free(b, b16);
	b->ops->buf_free(b, b32);
	b->ops->ws_free(ws);
	free(q), free(out), free(out2), free(carry), free(src), free(h16), free(ref), free(w), free(mass);
}

/* int8 rows with a scale per row and KV head: s = (q . k) * ks * scale,
 * against double precision; rows past a buffer are refused. */
static void check_score_i8(struct test_ctx *t, struct backend *b, struct gguf *g)
{
	enum { N = 301, H = 4, KV = 2, LDS = 310 };
	float *q = randv((size_t)H * D, 91), *ks = randv((size_t)N * KV, 92);
	float *s = malloc(sizeof(float) * H * LDS);
	int8_t *k = malloc((size_t)N * KV * D + 16);
	struct backend_buf *bk = NULL, *bs = NULL;
	struct backend_ws *ws = ws_for(b, 1, 1, 1);
	double worst = 0;
	uint64_t x = 12345;

	(void)g;
	T_CHECK(t, q && ks && s && k && ws);
	for (size_t i = 0; i < (size_t)N * KV * D + 16; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		k[i] = (int8_t)(x & 0xff);
	}
	T_CHECK(t, b->ops->buf_wrap(b, k, (size_t)N * KV * D + 16, &bk) == 0);
	T_CHECK(t, b->ops->buf_wrap(b, ks, sizeof(float) * N * KV, &bs) == 0);
	struct backend_score a = { q, H, KV, D, bk, 16, (size_t)KV * D, bs, 0, N, 0.5f, s, LDS };
	T_CHECK(t, b->ops->score_i8(b, ws, &a) == 0);
	for (int h = 0; h < H; h++)
		for (int j = 0; j < N; j++) {
			int g2 = h / (H / KV);
			double d = 0;
			for (int c = 0; c < D; c++)
				d += (double)q[h * D + c] * k[16 + ((size_t)j * KV + g2) * D + c];
			d *= (double)ks[j * KV + g2] * 0.5;
			worst = fmax(worst, fabs(s[h * LDS + j] - d) / (fabs(d) + 1.0));
		}
	T_CHECKF(t, worst < 1e-4, "score_i8: %g", worst);
	a.off = 17;
	T_CHECK(t, b->ops->score_i8(b, ws, &a) == SEKV_EINVAL);
	b->ops->buf_free(b, bk);
	b->ops->buf_free(b, bs);
	b->ops->ws_free(ws);
	free(q), free(ks), free(s), free(k);
}

/* int8 rows with a scale per row (SeKV's device rows; enum
 * backend_row_type): a mixed attention over an int8 block, an fp16 block
 * and a masked int8 block against double precision over the rows the
 * codes stand for; an unmasked int8 block without scales is refused.
 * Reconstruction into int8 rows divided by per-channel scales kc, from a
 * raw fp32 factor and a low-rank one: codes within one step of the
 * rounding of x / kc, scales max|x / kc| / 127. */
static void check_rows_i8(struct test_ctx *t, struct backend *b, struct gguf *g)
{
	enum { N = 300, H = 4, KV = 2, LEN = 20, RK = 6 };
	float *q = randv((size_t)H * D, 81), *x = randv((size_t)N * KV * D, 82);
	float *out = malloc(sizeof(float) * H * D), *sc = malloc(sizeof(float) * N * KV);
	float *kc = randv(D, 83), *u = randv((size_t)LEN * RK, 84), *v = randv((size_t)D * RK, 85);
	float sv[RK], lse[H];
	int8_t *c8 = malloc((size_t)N * KV * D);
	uint16_t *h16 = malloc(sizeof(uint16_t) * N * KV * D);
	double *ref = malloc(sizeof(double) * H * D), worst = 0;
	struct backend_buf *b8 = NULL, *bs = NULL, *b16 = NULL, *dst = NULL, *dsc = NULL;
	struct backend_ws *ws = ws_for(b, 1, 1, 2 * N);
	struct backend_mix_block blk[KV][3];

	(void)g;
	T_CHECK(t, q && x && out && sc && kc && u && v && c8 && h16 && ref && ws);
	for (int i = 0; i < N * KV; i++)
		sc[i] = quant_f32_to_i8_row(x + (size_t)i * D, c8 + (size_t)i * D, D);
	for (int i = 0; i < N * KV * D; i++)
		h16[i] = quant_f32_to_f16(x[i] * 0.5f);
	T_CHECK(t, b->ops->buf_wrap(b, c8, (size_t)N * KV * D, &b8) == 0);
	T_CHECK(t, b->ops->buf_wrap(b, sc, sizeof(float) * N * KV, &bs) == 0);
	T_CHECK(t, b->ops->buf_wrap(b, h16, sizeof(uint16_t) * N * KV * D, &b16) == 0);
	for (int g2 = 0; g2 < KV; g2++) {
		size_t ld = (size_t)KV * D;
		blk[g2][0] = (struct backend_mix_block){ b8, b8, (size_t)g2 * D, ld, 200, BACKEND_ROW_I8,
			0.0f, 0, bs, bs, (size_t)g2, KV };
		blk[g2][1] = (struct backend_mix_block){ b16, b16, 200 * ld + (size_t)g2 * D, ld, 60,
			BACKEND_ROW_F16, 0.5f, 0, NULL, NULL, 0, 0 };
		blk[g2][2] = (struct backend_mix_block){ b8, b8, 260 * ld + (size_t)g2 * D, ld, 40,
			BACKEND_ROW_I8, 0.0f, 1, NULL, NULL, 0, 0 };
	}
	struct backend_mix a = { q, out, H, KV, D, 0.0625f, &blk[0][0], 3, NULL, NULL, NULL, lse };
	T_CHECK(t, b->ops->attention_mix(b, ws, &a) == 0);
	for (int h = 0; h < H; h++) {
		int g2 = h / (H / KV);
		double sco[260], mx = -INFINITY, z = 0;
		for (int r = 0; r < 260; r++) {
			size_t e = ((size_t)r * KV + g2) * D;
			double d = 0;
			for (int c = 0; c < D; c++)
				d += (double)q[h * D + c] * (r < 200 ? (double)sc[r * KV + g2] * c8[e + c]
								    : quant_f16_to_f32(h16[e + c]));
			sco[r] = d * 0.0625 + (r < 200 ? 0 : 0.5);
			mx = fmax(mx, sco[r]);
		}
		memset(ref + h * D, 0, sizeof(double) * D);
		for (int r = 0; r < 260; r++)
			z += exp(sco[r] - mx);
		for (int r = 0; r < 260; r++) {
			size_t e = ((size_t)r * KV + g2) * D;
			for (int c = 0; c < D; c++)
				ref[h * D + c] += exp(sco[r] - mx) / z *
						  (r < 200 ? (double)sc[r * KV + g2] * c8[e + c]
							   : quant_f16_to_f32(h16[e + c]));
		}
		worst = fmax(worst, fabs(lse[h] - (mx + log(z))));
	}
	T_CHECKF(t, worst < 1e-4, "int8 mix lse: %g", worst);
	T_CHECKF(t, max_rel(out, ref, (size_t)H * D, 1e-2) < 1e-4, "int8 mix: %g",
		 max_rel(out, ref, (size_t)H * D, 1e-2));
	blk[1][0].ks = NULL;
	T_CHECK(t, b->ops->attention_mix(b, ws, &a) == SEKV_EINVAL);

	/* reconstruction into int8 rows */
	for (int j = 0; j < D; j++)
		kc[j] = 0.5f + fabsf(kc[j]);
	for (int r = 0; r < RK; r++)
		sv[r] = 4.0f / (1 + r);
	T_CHECK(t, b->ops->buf_new(b, 2 * LEN * D, &dst) == 0);
	T_CHECK(t, b->ops->buf_new(b, sizeof(float) * 2 * LEN, &dsc) == 0);
	struct backend_recon rc[2] = {
		{ .len = LEN, .d = D, .rank = SEKV_RANK_RAW, .u = x, .dst = dst, .dst_type = BACKEND_ROW_I8,
		  .dst_s = dsc, .kc = kc },
		{ .len = LEN, .d = D, .rank = RK, .r = RK, .u = u, .s = sv, .v = v, .dst = dst,
		  .off = (size_t)LEN * D, .dst_type = BACKEND_ROW_I8, .dst_s = dsc, .soff = LEN, .kc = kc },
	};
	T_CHECK(t, b->ops->reconstruct(b, ws, rc, 2) == 0);
	const int8_t *got = dst->host;
	const float *gs = dsc->host;
	int bad = 0;
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < LEN; i++) {
			double y[D], top = 0;
			for (int j = 0; j < D; j++) {
				double xv = 0;
				if (k == 0)
					xv = x[(size_t)i * D + j];
				for (int r = 0; k == 1 && r < RK; r++)
					xv += (double)u[i * RK + r] * sv[r] * v[j * RK + r];
				y[j] = xv / kc[j];
				top = fmax(top, fabs(y[j]));
			}
			float s8 = gs[k * LEN + i];
			bad += fabs(s8 - top / 127) > 1e-5 * top;
			for (int j = 0; j < D; j++)
				bad += fabs(got[((size_t)k * LEN + i) * D + j] - y[j] / (top / 127)) > 0.5 + 1e-3;
		}
	T_CHECKF(t, bad == 0, "int8 reconstruction: %d codes or scales off", bad);
	rc[0].dst_s = NULL;
	T_CHECK(t, b->ops->reconstruct(b, ws, rc, 1) == SEKV_EINVAL);
	b->ops->buf_free(b, b8);
	b->ops->buf_free(b, bs);
	b->ops->buf_free(b, b16);
	b->ops->buf_free(b, dst);
	b->ops->buf_free(b, dsc);
	b->ops->ws_free(ws);
	free(q), free(x), free(out), free(sc), free(kc), free(u), free(v), free(c8), free(h16), free(ref);
}

/* rows = sum_{t<r} s_t u_t v_t^T for fp32 and fp16 factors, r < rank and
 * r = rank, into fp32 and fp16 rows. */
static void check_reconstruct(struct test_ctx *t, struct backend *b, struct gguf *g)
{
	enum { LEN = 37, RK = 24 };
	float *u = randv(LEN * RK, 81), *v = randv(D * RK, 82), s[RK];
	uint16_t *u16 = malloc(sizeof(uint16_t) * LEN * RK), *v16 = malloc(sizeof(uint16_t) * D * RK);
	struct backend_buf *dst = NULL;
	struct backend_ws *ws = ws_for(b, 1, 1, 1);
	struct backend_recon rc[4];
	float *got = malloc(sizeof(float) * LEN * D);
	uint16_t *got16 = malloc(sizeof(uint16_t) * LEN * D);
	double *ref = malloc(sizeof(double) * LEN * D);

	(void)g;
	T_CHECK(t, u && v && u16 && v16 && ws && got && got16 && ref);
	for (int i = 0; i < RK; i++)
		s[i] = 10.0f / (1 + i);
	for (int i = 0; i < LEN * RK; i++)
		u16[i] = quant_f32_to_f16(u[i]);
	for (int i = 0; i < D * RK; i++)
		v16[i] = quant_f32_to_f16(v[i]);
	T_CHECK(t, b->ops->buf_new(b, sizeof(float) * 4 * LEN * D, &dst) == 0);
	for (int k = 0; k < 4; k++)
		rc[k] = (struct backend_recon){ LEN, D, RK, k % 2 ? RK : 10, k >= 2,
			k >= 2 ? (const void *)u16 : u, s, k >= 2 ? (const void *)v16 : v,
			dst, (size_t)k * LEN * D * (k == 3 ? 2 : 1), k != 3, NULL, NULL, 0, 0, NULL, 0, NULL };
	T_CHECK(t, b->ops->reconstruct(b, ws, rc, 4) == 0);
	for (int k = 0; k < 4; k++) {
		for (int i = 0; i < LEN; i++)
			for (int j = 0; j < D; j++) {
				double x = 0;
				for (int r = 0; r < rc[k].r; r++) {
					double uu = k >= 2 ? quant_f16_to_f32(u16[i * RK + r]) : u[i * RK + r];
					double vv = k >= 2 ? quant_f16_to_f32(v16[j * RK + r]) : v[j * RK + r];
					x += uu * s[r] * vv;
				}
				ref[i * D + j] = x;
			}
		if (k == 3) {
			/* offsets count elements of the row type: job 3's fp16 rows
			 * start at the byte of float 3 * LEN * D */
			b->ops->buf_read(b, dst, sizeof(uint16_t) * 6 * LEN * D, got16,
					 sizeof(uint16_t) * LEN * D);
			for (int i = 0; i < LEN * D; i++)
				got[i] = quant_f16_to_f32(got16[i]);
		} else {
			b->ops->buf_read(b, dst, sizeof(float) * k * LEN * D, got, sizeof(float) * LEN * D);
		}
		T_CHECKF(t, max_rel(got, ref, (size_t)LEN * D, 1.0) < (k == 3 ? 1e-3 : 1e-5),
			 "job %d: %g", k, max_rel(got, ref, (size_t)LEN * D, 1.0));
	}
	/* pre-RoPE keys: job 0 again with NEOX RoPE over the first D - 4 dims
	 * at angles (10 + i) * j / 7, against the reference rotated in double;
	 * and a raw job (rank SEKV_RANK_RAW): its rows u copied exactly */
	{
		enum { HALF = (D - 4) / 2 };
		float *cs = malloc(sizeof(float) * LEN * HALF), *sn = malloc(sizeof(float) * LEN * HALF);
		struct backend_recon rr[2] = { rc[0], rc[0] };
		T_CHECK(t, cs && sn);
		for (int i = 0; i < LEN; i++)
			for (int j = 0; j < HALF; j++) {
				cs[i * HALF + j] = (float)cos((10.0 + i) * j / 7.0);
				sn[i * HALF + j] = (float)sin((10.0 + i) * j / 7.0);
			}
		rr[0].cs = cs;
		rr[0].sn = sn;
		rr[0].n_rot = D - 4;
		rr[1].rank = SEKV_RANK_RAW;
		rr[1].u = u;    /* LEN * RK >= 2 rows of D */
		rr[1].len = 2;
		rr[1].off = (size_t)LEN * D;
		T_CHECK(t, b->ops->reconstruct(b, ws, rr, 2) == 0);
		for (int i = 0; i < LEN; i++)
			for (int j = 0; j < D; j++) {
				double x = 0, y = 0;
				for (int r = 0; r < rc[0].r; r++)
					x += (double)u[i * RK + r] * s[r] * v[j * RK + r];
				ref[i * D + j] = x;
				if (j < HALF) {
					int j2 = j + HALF;
					for (int r = 0; r < rc[0].r; r++)
						y += (double)u[i * RK + r] * s[r] * v[j2 * RK + r];
					ref[i * D + j] = x * cs[i * HALF + j] - y * sn[i * HALF + j];
				} else if (j < 2 * HALF) {
					int j0 = j - HALF;
					for (int r = 0; r < rc[0].r; r++)
						y += (double)u[i * RK + r] * s[r] * v[j0 * RK + r];
					ref[i * D + j] = y * sn[i * HALF + j0] + x * cs[i * HALF + j0];
				}
			}
		b->ops->buf_read(b, dst, 0, got, sizeof(float) * LEN * D);
		T_CHECKF(t, max_rel(got, ref, (size_t)LEN * D, 1.0) < 1e-5, "rope job: %g",
			 max_rel(got, ref, (size_t)LEN * D, 1.0));
		b->ops->buf_read(b, dst, sizeof(float) * LEN * D, got, sizeof(float) * 2 * D);
		T_CHECK(t, !memcmp(got, u, sizeof(float) * 2 * D));
		rr[0].n_rot = 3;
		T_CHECK(t, b->ops->reconstruct(b, ws, rr, 1) == SEKV_EINVAL);
		free(cs), free(sn);
	}
	rc[0].r = RK + 1;
	T_CHECK(t, b->ops->reconstruct(b, ws, rc, 1) == SEKV_EINVAL);
	b->ops->buf_free(b, dst);
	b->ops->ws_free(ws);
	free(u), free(v), free(u16), free(v16), free(got), free(got16), free(ref);
}

/* A factor over three heads' columns (48 = 3 x 16) at rank 40 > 16, as
 * ShadowKV keeps one per layer: the rows of head 1 rebuilt from v's rows
 * 16..31 with GPT-J RoPE pairs (2j, 2j + 1) over the first 12 dims, fp32
 * factors, against double; a workspace without recon_rank refuses it. */
static void check_reconstruct_wide_rank(struct test_ctx *t, struct backend *b, struct gguf *g)
{
	enum { LEN = 9, RK = 40, W = 48, DH = 16, ROT = 12, HALF = ROT / 2 };
	float *u = randv(LEN * RK, 91), *v = randv(W * RK, 92), s[RK], cs[LEN * HALF], sn[LEN * HALF];
	float got[LEN * DH];
	double ref[LEN * DH];
	struct backend_ws_size sz = { 1, NH, D, 1, FF, 64, RK };
	struct backend_ws *ws = NULL, *narrow = ws_for(b, 1, 1, 64);
	struct backend_buf *dst = NULL;

	(void)g;
	T_CHECK(t, u && v && narrow && b->ops->ws_new(b, &sz, &ws) == 0);
	T_CHECK(t, b->ops->buf_new(b, sizeof(float) * LEN * DH, &dst) == 0);
	for (int i = 0; i < RK; i++)
		s[i] = 5.0f / (1 + i);
	for (int i = 0; i < LEN; i++)
		for (int j = 0; j < HALF; j++) {
			cs[i * HALF + j] = (float)cos((3.0 + i) * (j + 1) / 5.0);
			sn[i * HALF + j] = (float)sin((3.0 + i) * (j + 1) / 5.0);
		}
	struct backend_recon rc = { LEN, DH, RK, RK, 0, u, s, v + (size_t)DH * RK, dst, 0, 1, cs, sn, ROT, 1, NULL, 0, NULL };
	T_CHECK(t, b->ops->reconstruct(b, ws, &rc, 1) == 0);
	for (int i = 0; i < LEN; i++)
		for (int j = 0; j < DH; j++) {
			double x = 0;
			for (int r = 0; r < RK; r++)
				x += (double)u[i * RK + r] * s[r] * v[(DH + j) * RK + r];
			ref[i * DH + j] = x;
		}
	for (int i = 0; i < LEN; i++)
		for (int j = 0; j < HALF; j++) {
			double a = ref[i * DH + 2 * j], c = ref[i * DH + 2 * j + 1];
			ref[i * DH + 2 * j] = a * cs[i * HALF + j] - c * sn[i * HALF + j];
			ref[i * DH + 2 * j + 1] = a * sn[i * HALF + j] + c * cs[i * HALF + j];
		}
	b->ops->buf_read(b, dst, 0, got, sizeof got);
	T_CHECKF(t, max_rel(got, ref, (size_t)LEN * DH, 1.0) < 1e-5, "wide rank, GPT-J pairs: %g",
		 max_rel(got, ref, (size_t)LEN * DH, 1.0));
	T_CHECK(t, b->ops->reconstruct(b, narrow, &rc, 1) == 0); /* 40 <= d_head 256 */
	sz.d_head = DH;
	sz.recon_rank = 0;
	b->ops->ws_free(ws);
	T_CHECK(t, b->ops->ws_new(b, &sz, &ws) == 0);
	T_CHECK(t, b->ops->reconstruct(b, ws, &rc, 1) == SEKV_EINVAL);
	b->ops->buf_free(b, dst);
	b->ops->ws_free(ws);
	b->ops->ws_free(narrow);
	free(u), free(v);
}

/* SVD of a tall (300 x 256) and a wide (40 x 256) fp16 matrix: s
 * descending, U^T U = I, V^T V = I, U S V^T = X at full rank, and the
 * rank-k error equals the dropped singular values (Eckart-Young). */
static void check_svd(struct test_ctx *t, struct backend *b, struct gguf *g)
{
	const int rows_of[2] = { 300, 40 };
	struct backend_svd job[2];
	float *x = randv(300 * D, 91);
	uint16_t *x16 = malloc(sizeof(uint16_t) * 300 * D);
	int bad, info;

	(void)g;
	T_CHECK(t, x && x16);
	for (int i = 0; i < 300 * D; i++)
		x16[i] = quant_f32_to_f16(x[i]);
	for (int k = 0; k < 2; k++) {
		int m = rows_of[k], r = m < D ? m : D;
		job[k] = (struct backend_svd){ x16, D, m, D, r, malloc(sizeof(float) * r),
			malloc(sizeof(float) * m * r), malloc(sizeof(float) * D * r), 0, NULL };
		T_CHECK(t, job[k].s && job[k].u && job[k].v);
	}
	T_CHECK(t, b->ops->svd(b, job, 2, &bad, &info) == 0);
	for (int k = 0; k < 2; k++) {
		int m = job[k].rows, r = job[k].rank;
		const float *s = job[k].s, *u = job[k].u, *v = job[k].v;
		double worst = 0, tail = 0, err = 0;
		for (int i = 1; i < r; i++)
			T_CHECKF(t, s[i] <= s[i - 1], "s not descending at %d", i);
		for (int a = 0; a < r; a++)
			for (int c = a; c < r; c++) {
				double du = 0, dv = 0;
				for (int i = 0; i < m; i++)
					du += (double)u[i * r + a] * u[i * r + c];
				for (int j = 0; j < D; j++)
					dv += (double)v[j * r + a] * v[j * r + c];
				worst = fmax(worst, fabs(du - (a == c)));
				worst = fmax(worst, fabs(dv - (a == c)));
			}
		T_CHECKF(t, worst < 1e-4, "matrix %d: orthonormality %g", k, worst);
		/* full rank: exact; rank 16: error^2 = sum of dropped s^2 */
		for (int kk = 0; kk < 2; kk++) {
			int use = kk ? 16 : r;
			double e2 = 0, x2 = 0;
			for (int i = 0; i < m; i++)
				for (int j = 0; j < D; j++) {
					double y = 0, xv = quant_f16_to_f32(x16[i * D + j]);
					for (int a = 0; a < use; a++)
						y += (double)u[i * r + a] * s[a] * v[j * r + a];
					e2 += (y - xv) * (y - xv);
					x2 += xv * xv;
				}
			if (kk) {
				tail = 0;
				for (int a = 16; a < r; a++)
					tail += (double)s[a] * s[a];
				T_CHECKF(t, fabs(e2 - tail) < 1e-3 * tail, "matrix %d: rank 16 %g vs %g",
					 k, e2, tail);
			} else {
				err = sqrt(e2 / x2);
				T_CHECKF(t, err < 1e-5, "matrix %d: full rank error %g", k, err);
			}
		}
		free(job[k].s), free(job[k].u), free(job[k].v);
	}
	/* rank 16 of the wide matrix: its share of ||X||_F^2 (the rank gate's
	 * input) is the kept s^2 over the matrix's own sum of squares */
	{
		float s16[16], share = -1, *u16 = malloc(sizeof(float) * 40 * 16),
		      *v16 = malloc(sizeof(float) * D * 16);
		struct backend_svd j = { x16, D, 40, D, 16, s16, u16, v16, 0, &share };
		double kept = 0, x2 = 0;
		T_CHECK(t, u16 && v16 && b->ops->svd(b, &j, 1, &bad, &info) == 0);
		for (int a = 0; a < 16; a++)
			kept += (double)s16[a] * s16[a];
		for (int i = 0; i < 40 * D; i++)
			x2 += (double)quant_f16_to_f32(x16[i]) * quant_f16_to_f32(x16[i]);
		T_CHECKF(t, fabs(share - kept / x2) < 1e-4 && share < 0.9, "share %g vs %g", share,
			 kept / x2);
		free(u16), free(v16);
	}
	free(x), free(x16);
}

/* Principal directions of 400 x 64 rows with two planted directions:
 * orthonormal, eigenvectors of the covariance (C v = lambda v, checked in
 * double), eigenvalues descending, the planted ones found first. */
static void check_pca(struct test_ctx *t, struct backend *b, struct gguf *g)
{
	enum { N = 400, C = 64, NV = 8 };
	float *x = randv(N * C, 101), vec[NV * C];
	uint16_t *x16 = malloc(sizeof(uint16_t) * N * C);
	double *cov = calloc(C * C, sizeof(double)), mean[C] = { 0 }, lam_prev = INFINITY;
	struct backend_pca job = { x16, C, N, C, NV, vec };
	int bad, info;

	(void)g;
	T_CHECK(t, x && x16 && cov);
	for (int i = 0; i < N; i++) {
		x[i * C + 3] += 8.0f * x[i * C + 5];      /* strongest: e3 + e5 mix */
		x[i * C + 10] *= 4.0f;                    /* second: e10 */
	}
	for (int i = 0; i < N * C; i++)
		x16[i] = quant_f32_to_f16(x[i]);
	T_CHECK(t, b->ops->pca(b, &job, 1, &bad, &info) == 0);
	for (int i = 0; i < N; i++)
		for (int c = 0; c < C; c++)
			mean[c] += quant_f16_to_f32(x16[i * C + c]) / N;
	for (int i = 0; i < N; i++)
		for (int a = 0; a < C; a++)
			for (int c = 0; c < C; c++)
				cov[a * C + c] += (quant_f16_to_f32(x16[i * C + a]) - mean[a]) *
						  (quant_f16_to_f32(x16[i * C + c]) - mean[c]);
	for (int k = 0; k < NV; k++) {
		const float *e = vec + k * C;
		double cv[C], lam = 0, nrm = 0, res = 0;
		for (int a = 0; a < C; a++) {
			cv[a] = 0;
			for (int c = 0; c < C; c++)
				cv[a] += cov[a * C + c] * e[c];
			lam += e[a] * cv[a];
			nrm += (double)e[a] * e[a];
		}
		for (int a = 0; a < C; a++)
			res += (cv[a] - lam * e[a]) * (cv[a] - lam * e[a]);
		T_CHECKF(t, fabs(nrm - 1) < 1e-4, "vector %d norm %g", k, nrm);
		T_CHECKF(t, sqrt(res) < 1e-3 * lam, "vector %d: |Cv - lv| %g (l %g)", k, sqrt(res), lam);
		T_CHECKF(t, lam <= lam_prev * (1 + 1e-5), "vector %d: eigenvalues not descending", k);
		lam_prev = lam;
	}
	T_CHECK(t, fabs(vec[3]) > 0.9 && fabs(vec[C + 10]) > 0.9);
	free(x), free(x16), free(cov);
}

/* ---- the table over backends ----------------------------------------- */

static const struct { const char *name; check_fn fn; } k_checks[] = {
	{ "matmul", check_matmul },
	{ "get_rows", check_get_rows },
	{ "elementwise", check_elementwise },
	{ "buffers_kv_store", check_buffers },
	{ "attention", check_attention },
	{ "lse_fold", check_lse_fold },
	{ "attention_mix", check_attention_mix },
	{ "score_i8", check_score_i8 },
	{ "rows_i8", check_rows_i8 },
	{ "reconstruct", check_reconstruct },
	{ "reconstruct_wide_rank", check_reconstruct_wide_rank },
	{ "svd", check_svd },
	{ "pca", check_pca },
};
#define N_CHECKS (sizeof k_checks / sizeof k_checks[0])

/* Every check on every backend of k_backends (2 threads); a failure names
 * the backend and the check. */
static void run_checks(struct test_ctx *t, size_t first, size_t last)
{
	struct gguf *g = NULL;
	char err[256];

	if (gguf_open(&g, test_model_path(), err, sizeof err))
		T_SKIP(t, "skipped: no model (%s)", err);
	/* the checks' buffers have the default model's shapes (E, NH, D, FF) */
	const struct gguf_tensor *te = gguf_find_tensor(g, "token_embd.weight");
	if (!te || te->ne[0] != E) {
		gguf_close(g);
		T_SKIP(t, "skipped: sized for Gemma 3 270M (n_embd %d); %s is another model", E,
		       test_model_path());
	}
	for (size_t k = 0; k < sizeof k_backends / sizeof *k_backends; k++) {
		struct backend *b = open_be(t, k_backends[k], 2);
		if (!b)
			break;
		for (size_t c = first; c < last && !t->failed && !t->skipped; c++) {
			k_checks[c].fn(t, b, g);
			if (t->failed) {
				char m[sizeof t->msg];
				snprintf(m, sizeof m, "%s %s: %s", k_backends[k], k_checks[c].name, t->msg);
				memcpy(t->msg, m, sizeof m);
			}
		}
		backend_close(b);
	}
	gguf_close(g);
}

static void backend_ops_matmul_get_rows_elementwise_vs_scalar(struct test_ctx *t)
{
	run_checks(t, 0, 3);
}

static void backend_ops_buffers_attention_lse_vs_scalar(struct test_ctx *t)
{
	run_checks(t, 3, 6);
}

static void backend_ops_sekv_mix_recon_svd_pca_vs_scalar(struct test_ctx *t)
{
	run_checks(t, 6, N_CHECKS);
}

/* SeKV's operations give the same bits at 1 and 3 threads (the greedy
 * answers of the CPU build must not depend on -t for them). */
static void backend_cpu_sekv_ops_same_bits_any_threads(struct test_ctx *t)
{
	enum { H = 4, ROWS = 700, LEN = 50, RK = 32 };
	float *q = randv(H * D, 111), *rows = randv(ROWS * D, 112), *u = randv(LEN * RK, 113);
	float *v = randv(D * RK, 114), s[RK], out[2][H * D], got[2][LEN * D];
	struct backend_buf *src = NULL, *dst = NULL;

	T_CHECK(t, q && rows && u && v);
	for (int i = 0; i < RK; i++)
		s[i] = 1.0f + 1.0f / (i + 1);
	for (int th = 0; th < 2; th++) {
		struct backend *b = open_be(t, "cpu", th ? 3 : 1);
		struct backend_ws *ws = b ? ws_for(b, 1, 1, ROWS) : NULL;
		T_CHECK(t, ws);
		T_CHECK(t, b->ops->buf_wrap(b, rows, sizeof(float) * ROWS * D, &src) == 0);
		T_CHECK(t, b->ops->buf_new(b, sizeof(float) * LEN * D, &dst) == 0);
		struct backend_mix_block blk = { src, src, 0, D, ROWS, 1, 0.5f, 0, NULL, NULL, 0, 0 };
		struct backend_mix a = { q, out[th], H, 1, D, 0.0625f, &blk, 1, NULL, NULL, NULL, NULL };
		struct backend_recon rc = { LEN, D, RK, RK - 3, 0, u, s, v, dst, 0, 1, NULL, NULL, 0, 0, NULL, 0, NULL };
		T_CHECK(t, b->ops->attention_mix(b, ws, &a) == 0);
		T_CHECK(t, b->ops->reconstruct(b, ws, &rc, 1) == 0);
		b->ops->buf_read(b, dst, 0, got[th], sizeof got[th]);
		b->ops->buf_free(b, src);
		b->ops->buf_free(b, dst);
		b->ops->ws_free(ws);
		backend_close(b);
	}
	T_CHECK(t, !memcmp(out[0], out[1], sizeof out[0]));
	T_CHECK(t, !memcmp(got[0], got[1], sizeof got[0]));
	free(q), free(rows), free(u), free(v);
}

static void backend_open_unknown_name_refused(struct test_ctx *t)
{
	struct backend *b = (struct backend *)1;
	char err[256] = "";

	T_CHECK(t, backend_open("tpu", 1, &b, err, sizeof err) == SEKV_EUNSUP);
	T_CHECK(t, b == NULL && strstr(err, "tpu"));
	T_CHECK(t, backend_open(NULL, 1, &b, err, sizeof err) == 0 && b);
	T_CHECK(t, !strcmp(b->ops->name, "cpu"));
	backend_close(b);
	backend_close(NULL);
}

const struct test_case test_backend[] = {
	{ "backend_ops_matmul_get_rows_elementwise_vs_scalar",
	  backend_ops_matmul_get_rows_elementwise_vs_scalar },
	{ "backend_ops_buffers_attention_lse_vs_scalar", backend_ops_buffers_attention_lse_vs_scalar },
	{ "backend_ops_sekv_mix_recon_svd_pca_vs_scalar", backend_ops_sekv_mix_recon_svd_pca_vs_scalar },
	{ "backend_cpu_sekv_ops_same_bits_any_threads", backend_cpu_sekv_ops_same_bits_any_threads },
	{ "backend_open_unknown_name_refused", backend_open_unknown_name_refused },
	{ NULL, NULL },
};
