/* test_backend.c - every operation of the backend table against a plain
 * scalar reference written here (double sums), on the default model's
 * shapes (Gemma 3 270M: n_embd 640, n_head 4, n_head_kv 1, d_head 256,
 * n_ff 2048, sliding window 512), with real weight rows from the model
 * file and fixed-seed random data elsewhere. The checks are one table over
 * a struct backend *: a second backend runs the same table (add a row to
 * k_backends). The SeKV operations' checks are tests/backend_check_sekv.c.
 * The CPU backend's decode kernels (engine/cpu/backend_cpu_int.h) are also
 * checked directly over a table of group sizes and head sizes, since the
 * operations above see only the default model's (G 2 and 4, d_head 256).
 */
#include "tests/test.h"
#include "tests/backend_check.h"

#include "engine/backend/backend.h"
#include "engine/base/err.h"
#include "engine/cpu/backend_cpu_int.h"
#include "engine/gguf/gguf.h"
#include "engine/quant/quant.h"
#include "engine/sekv/sekv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


static const char *k_backends[] = { "cpu" };

/* ---- helpers --------------------------------------------------------- */

struct backend *bk_open(struct test_ctx *t, const char *name, int n_threads)
{
	struct backend *b = NULL;
	char err[256];

	if (backend_open(name, n_threads, &b, err, sizeof err))
		T_FAIL(t, "backend_open(%s): %s", name, err);
	return b;
}

struct backend_ws *bk_ws_for(struct backend *b, int n_batch, size_t max_w, int mix_rows)
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

float *bk_randv(size_t n, unsigned long long seed)
{
	float *x = malloc(n * sizeof *x);

	if (x)
		test_fill_random(x, n, seed);
	return x;
}

/* Worst |a - b| / (|b| + floor) over n. */
double bk_max_rel(const float *a, const double *b, size_t n, double floor)
{
	double e = 0;

	for (size_t i = 0; i < n; i++) {
		double d = fabs(a[i] - b[i]) / (fabs(b[i]) + floor);
		e = d > e ? d : e;
	}
	return e;
}


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
		float *x = bk_randv((size_t)n * w.cols, 11 + k), *y = malloc(sizeof(float) * n * rows);
		float *wr = malloc(sizeof(float) * w.cols);
		double *ref = malloc(sizeof(double) * n * rows), *mag = malloc(sizeof(double) * n * rows);
		struct backend_ws *ws = bk_ws_for(b, n, (size_t)rows * w.cols, 0);
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
	float *x = bk_randv((size_t)n * E, 21), *w = bk_randv(E, 22), *y = malloc(sizeof(float) * n * E);
	float *u = bk_randv((size_t)n * FF, 23), *gg = bk_randv((size_t)n * FF, 24);
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
	T_CHECKF(t, bk_max_rel(y, ref, (size_t)n * E, 1e-3) < 1e-5, "rmsnorm");
	/* gelu_mul: gelu_tanh(g) * u */
	for (int i = 0; i < n * FF; i++) {
		double v = gg[i] * 4.0;
		gg[i] = (float)v;
		ref[i] = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))) * u[i];
	}
	b->ops->gelu_mul(b, gg, u, (size_t)n * FF);
	T_CHECKF(t, bk_max_rel(gg, ref, (size_t)n * FF, 1e-3) < 1e-5, "gelu_mul");
	/* add */
	memcpy(y, x, sizeof(float) * n * E);
	b->ops->add(b, y, w, E);
	for (int e = 0; e < E; e++)
		T_CHECKF(t, y[e] == x[e] + w[e], "add [%d]", e);
	/* rope: NEOX pairs (j, j + n_rot/2) at token angles */
	{
		int nrot = D, half = D / 2;
		float *q = bk_randv((size_t)n * NH * D, 25), *cs = malloc(sizeof(float) * n * half);
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
		T_CHECKF(t, bk_max_rel(q, rr, (size_t)n * NH * D, 1e-2) < 1e-5, "rope");
		/* adjacent pairs (2j, 2j + 1): GPT-J / llama.cpp NORM */
		free(q);
		q = bk_randv((size_t)n * NH * D, 26);
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
		T_CHECKF(t, bk_max_rel(q, rr, (size_t)n * NH * D, 1e-2) < 1e-5, "rope pairs (2j, 2j+1)");
		free(q), free(cs), free(sn), free(rr);
	}
	/* silu_mul: g / (1 + exp(-g)) * u */
	for (int i = 0; i < n * FF; i++) {
		double v = (i % 17 - 8) * 0.9;
		gg[i] = (float)v;
		ref[i] = v / (1 + exp(-v)) * u[i];
	}
	b->ops->silu_mul(b, gg, u, (size_t)n * FF);
	T_CHECKF(t, bk_max_rel(gg, ref, (size_t)n * FF, 1e-3) < 1e-5, "silu_mul");
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
	float *k = bk_randv((size_t)n * w, 31), *v = bk_randv((size_t)n * w, 32);
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
		struct backend_ws *ws = bk_ws_for(b, n, 1, 0);
		float *q = bk_randv((size_t)n * NH * D, 41 + c), *out = malloc(sizeof(float) * n * NH * D);
		float *kv = bk_randv((size_t)(pos0 + n) * w * 2, 51 + c);
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
		T_CHECKF(t, bk_max_rel(out, ref, (size_t)n * NH * D, 1e-2) < 1e-4,
			 "case %zu: %g", c, bk_max_rel(out, ref, (size_t)n * NH * D, 1e-2));
		b->ops->buf_free(b, kb);
		b->ops->buf_free(b, vb);
		b->ops->ws_free(ws);
		free(q), free(out), free(kv), free(kc), free(vc), free(ref);
	}
}

static void check_lse_fold(struct test_ctx *t, struct backend *b, struct gguf *g)
{
	int n = 6, cols = 1000;
	float *s = bk_randv((size_t)n * cols, 61), mx[6];
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
	{ "score_lowrank", check_score_lowrank },
	{ "rows_i8", check_rows_i8 },
	{ "rows_k8v4", check_rows_k8v4 },
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
		struct backend *b = bk_open(t, k_backends[k], 2);
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
	float *q = bk_randv(H * D, 111), *rows = bk_randv(ROWS * D, 112), *u = bk_randv(LEN * RK, 113);
	float *v = bk_randv(D * RK, 114), s[RK], out[2][H * D], got[2][LEN * D];
	struct backend_buf *src = NULL, *dst = NULL;

	T_CHECK(t, q && rows && u && v);
	for (int i = 0; i < RK; i++)
		s[i] = 1.0f + 1.0f / (i + 1);
	for (int th = 0; th < 2; th++) {
		struct backend *b = bk_open(t, "cpu", th ? 3 : 1);
		struct backend_ws *ws = b ? bk_ws_for(b, 1, 1, ROWS) : NULL;
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

/* ---- the CPU decode kernels at every group size ---------------------- */

enum { KT_T = 37, KT_LD = 5 }; /* value rows of a tile, weight stride */

/* Inputs of one kernel case: G heads of d. */
struct kern_in {
	int G, d;
	float q[9 * 256], o0[9 * 256], p[9 * (KT_T + 3)], sc[256 / 32];
	uint16_t h16[KT_T * (256 + 8)]; /* KT_T fp16 rows, d + 8 apart */
	int8_t c8[256];
	uint8_t c4[128];
};

/* Element e of value kind k (0 fp16 row 0, 1 int8 codes times 0.01, 2
 * int4 codes times their group's scale) as a double. */
static double kern_v(const struct kern_in *in, int k, int e)
{
	int nib = (in->c4[e / 2] >> (4 * (e % 2))) & 0x0f;

	if (k == 0)
		return quant_f16_to_f32(in->h16[e]);
	return k == 1 ? in->c8[e] * (double)0.01f : (nib >= 8 ? nib - 16 : nib) * (double)in->sc[e / 32];
}

/* Worst |got - ref| / mag over a kernel's G x d outputs (mag: the sum of
 * the magnitudes of the terms, so fp32 rounding of any order passes and a
 * lost or misplaced term does not). */
static double kern_err(const float *got, const double *ref, const double *mag, int n)
{
	double e = 0;

	for (int i = 0; i < n; i++)
		e = fmax(e, fabs(got[i] - ref[i]) / (mag[i] + 1e-30));
	return e;
}

/* cpu_scores_row_g (fp16 and int8 keys), cpu_values_{f16,i8,i4}_g and
 * cpu_values_tile_g for one shape, against double sums: the worst error
 * of each into err[6]; -1 where a kernel wrote outside its outputs. */
static void kern_case(struct kern_in *in, double err[6])
{
	int G = in->G, d = in->d, n = G * d;
	float s[9 * 3], o[9 * 256 + 8], buf[256];
	double ref[9 * 256], mag[9 * 256];

	for (int i8 = 0; i8 < 2; i8++) {
		float got[9];
		for (int i = 0; i < 9 * 3; i++)
			s[i] = 7.0f;
		cpu_scores_row_g(in->q, G, d, i8 ? (const void *)in->c8 : in->h16, i8, 0.125f, s, 3, buf);
		for (int h = 0; h < G; h++) {
			ref[h] = mag[h] = 0;
			for (int e = 0; e < d; e++) {
				double kv = i8 ? in->c8[e] : quant_f16_to_f32(in->h16[e]);
				ref[h] += 0.125 * in->q[h * d + e] * kv;
				mag[h] += fabs(0.125 * in->q[h * d + e] * kv);
			}
			got[h] = s[h * 3];
		}
		err[i8] = kern_err(got, ref, mag, G);
		for (int i = 0; i < 9 * 3; i++)
			err[i8] = i % 3 && s[i] != 7.0f ? -1 : err[i8];
	}
	for (int k = 0; k < 4; k++) {
		if (k == 2 && d % 32)
			continue;
		memcpy(o, in->o0, sizeof(float) * n);
		o[n] = 7.0f;
		if (k == 0)
			cpu_values_f16_g(o, G, d, in->h16, in->p, KT_LD, buf);
		else if (k == 1)
			cpu_values_i8_g(o, G, d, in->c8, 0.01f, in->p, KT_LD, buf);
		else if (k == 2)
			cpu_values_i4_g(o, G, d, in->c4, in->sc, in->p, KT_LD, buf);
		else
			cpu_values_tile_g(o, G, d, in->h16, (size_t)d + 8, KT_T, in->p, KT_T + 3, buf);
		for (int h = 0; h < G; h++)
			for (int e = 0; e < d; e++) {
				double r = in->o0[h * d + e], m = fabs(r);
				for (int t = 0; t < (k == 3 ? KT_T : 1); t++) {
					double pv = in->p[h * (k == 3 ? KT_T + 3 : KT_LD) + t];
					double v = k == 3 ? quant_f16_to_f32(in->h16[t * (d + 8) + e]) : kern_v(in, k, e);
					r += pv * v;
					m += fabs(pv * v);
				}
				ref[h * d + e] = r;
				mag[h * d + e] = m;
			}
		err[2 + k] = o[n] != 7.0f ? -1 : kern_err(o, ref, mag, n);
	}
}

/* Every decode kernel of the CPU backend at group sizes 1-9 (9 takes the
 * scalar path; 7 is Qwen2.5 0.5B's, 4 Gemma 3 270M's) and head sizes 64,
 * 256 and 40 (40, no int4 rows: AVX2 takes its narrowest blocks, AVX-512
 * the scalar path), within fp32 rounding of double sums; no kernel writes
 * outside its outputs. */
static void backend_cpu_decode_kernels_every_group_vs_double(struct test_ctx *t)
{
	static const int shapes[][2] = { { 1, 64 }, { 2, 64 }, { 3, 64 }, { 4, 64 }, { 5, 64 },
		{ 6, 64 }, { 7, 64 }, { 8, 64 }, { 9, 64 }, { 1, 256 }, { 4, 256 }, { 7, 256 },
		{ 8, 256 }, { 2, 40 }, { 7, 40 } };
	static const char *kernel[6] = { "scores fp16", "scores int8", "values fp16",
		"values int8", "values int4", "values tile" };
	struct kern_in *in = calloc(1, sizeof *in);
	float x[KT_T * (256 + 8)];

	T_CHECK(t, in != NULL);
	for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++) {
		double err[6] = { 0 };
		in->G = shapes[c][0];
		in->d = shapes[c][1];
		test_fill_random(in->q, 9 * 256, 121 + c);
		test_fill_random(in->o0, 9 * 256, 131 + c);
		test_fill_random(in->p, 9 * (KT_T + 3), 141 + c);
		test_fill_random(in->sc, 256 / 32, 151 + c);
		test_fill_random(x, KT_T * (256 + 8), 161 + c);
		for (int i = 0; i < KT_T * (256 + 8); i++)
			in->h16[i] = quant_f32_to_f16(4.0f * x[i]);
		for (int i = 0; i < 256; i++)
			in->c8[i] = (int8_t)lrintf(127.0f * x[i]);
		for (int i = 0; i < 128; i++)
			in->c4[i] = (uint8_t)lrintf(127.5f * (x[256 + i] + 1.0f));
		kern_case(in, err);
		for (int k = 0; k < 6; k++)
			if (!(err[k] >= 0 && err[k] < 1e-5)) {
				T_FAIL(t, "G %d d %d: %s %s %g", in->G, in->d, kernel[k],
				       err[k] < 0 ? "wrote outside its outputs" : "off by", err[k]);
				free(in);
				return;
			}
	}
	free(in);
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
	{ "backend_cpu_decode_kernels_every_group_vs_double",
	  backend_cpu_decode_kernels_every_group_vs_double },
	{ "backend_open_unknown_name_refused", backend_open_unknown_name_refused },
	{ NULL, NULL },
};
