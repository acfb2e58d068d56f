/* test_train.c - the router training module (engine/train/): cover labels
 * on a hand-made case, the loss gradient against central finite
 * differences, AdamW reproducible by seed, checkpoint / data / weights
 * round trips and damaged or foreign files refused, and the trained
 * router at identity weights deciding as the landmark router does. */
#include "tests/test.h"
#include "tests/sekv_fixture.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/err.h"
#include "engine/train/train.h"

static void train_label_smallest_cover(struct test_ctx *t)
{
	const double mass[5] = { 0.1, 0.5, 0.05, 0.3, 0.05 }, zero[3] = { 0, 0, 0 };
	uint8_t y[5];
	int32_t ord[5];

	/* 0.5 + 0.3 + 0.1 = 0.9 reaches rho = 0.9 */
	T_CHECK(t, train_label(mass, 5, 0.9, y, ord) == 3);
	T_CHECK(t, y[0] == 1 && y[1] == 1 && y[2] == 0 && y[3] == 1 && y[4] == 0);
	/* one more is needed for 0.95; of the tied 0.05s the lower index */
	T_CHECK(t, train_label(mass, 5, 0.95, y, ord) == 4);
	T_CHECK(t, y[2] == 1 && y[4] == 0);
	T_CHECK(t, train_label(mass, 5, 0.01, y, ord) == 1 && y[1] == 1);
	T_CHECK(t, train_label(zero, 3, 0.9, y, ord) == 0 && !y[0] && !y[1] && !y[2]);
}

/* A hand-built set: L layers, H heads over K KV heads, n_doc docs of
 * n_comp spans, n_per samples per (doc, layer, head). */
static int make_set(struct train_set *s, int L, int H, int K, int dh, int n_doc, int n_comp,
		    int n_per, uint64_t seed)
{
	int n = n_doc * L * H * n_per;

	fx_rng_seed(seed);
	train_set_init(s, L, H, K, dh);
	s->doc = calloc((size_t)n_doc, sizeof *s->doc);
	s->s = calloc((size_t)n, sizeof *s->s);
	s->q = malloc((size_t)n * dh * sizeof *s->q);
	s->x = malloc((size_t)n * n_comp * sizeof *s->x);
	s->mass = malloc((size_t)n * n_comp * sizeof *s->mass);
	s->y = malloc((size_t)n * n_comp);
	if (!s->doc || !s->s || !s->q || !s->x || !s->mass || !s->y)
		return -1;
	s->n_doc = s->cap_doc = n_doc;
	for (int d = 0; d < n_doc; d++) {
		struct train_doc *dc = &s->doc[d];
		dc->n_comp = n_comp;
		dc->len = malloc((size_t)n_comp * sizeof *dc->len);
		dc->k_bar = malloc((size_t)L * n_comp * K * dh * sizeof *dc->k_bar);
		if (!dc->len || !dc->k_bar)
			return -1;
		for (int i = 0; i < n_comp; i++)
			dc->len[i] = 4 + (int)(fx_rng_u() * 40);
		for (int i = 0; i < L * n_comp * K * dh; i++)
			dc->k_bar[i] = (float)fx_rng_n();
	}
	for (int i = 0; i < n; i++) {
		struct train_sample *sm = &s->s[i];
		double m[64], tot = 0;
		int32_t ord[64];
		sm->doc = i / (L * H * n_per);
		sm->layer = (i / (H * n_per)) % L;
		sm->head = (i / n_per) % H;
		sm->n_comp = n_comp;
		sm->off = (int64_t)i * n_comp;
		sm->w = (float)(0.1 + fx_rng_u());
		for (int j = 0; j < dh; j++)
			s->q[(size_t)i * dh + j] = (float)fx_rng_n();
		for (int c = 0; c < n_comp; c++) {
			s->x[sm->off + c] = (float)(fx_rng_n() * 3 - 4);
			m[c] = exp(2 * fx_rng_n());
			tot += m[c];
		}
		for (int c = 0; c < n_comp; c++)
			s->mass[sm->off + c] = (float)(m[c] / tot);
		train_label(m, n_comp, 0.9, s->y + sm->off, ord);
	}
	s->n_sample = s->cap_sample = n;
	s->n_span = s->cap_span = (int64_t)n * n_comp;
	return 0;
}

/* The gradient of target tgt at a random point against central finite
 * differences. */
static void grad_vs_fd(struct test_ctx *t, int tgt)
{
	struct train_set s;
	struct train_params p;
	struct train_hyper hy;
	struct train_loss lo, lp, lm;
	int32_t idx[64];
	float *g;
	double worst = 0;
	int n = 0;

	T_CHECK(t, make_set(&s, 2, 2, 1, 8, 2, 6, 4, 11) == 0);
	T_CHECK(t, train_params_new(&p, 2, 2, 8, NULL, 0, 1) == 0);
	fx_rng_seed(3);
	for (size_t i = 0; i < p.n; i++)
		p.v[i] = (float)(i < 4 ? 1.0 + 0.3 * fx_rng_n() : i < 8 ? 0.5 * fx_rng_n() : i < 12 ? 0 :
				 0.4 * fx_rng_n());
	train_default_hyper(&hy);
	hy.target = tgt;
	hy.lambda_budget = 0.5f;   /* the budget term's gradient must show */
	g = malloc(p.n * sizeof *g);
	T_CHECK(t, g != NULL);
	for (int i = 0; i < s.n_sample; i += 1)
		idx[n++] = i;
	T_CHECK(t, train_loss_eval(&s, &p, &hy, idx, n, g, &lo) == 0 && lo.total > 0);
	/* a, b and a spread of W's entries; tau must get no gradient */
	for (size_t i = 0; i < p.n; i += (i < 12 ? 1 : 37)) {
		float keep = p.v[i], h = 1e-2f;
		p.v[i] = keep + h;
		train_loss_eval(&s, &p, &hy, idx, n, NULL, &lp);
		p.v[i] = keep - h;
		train_loss_eval(&s, &p, &hy, idx, n, NULL, &lm);
		p.v[i] = keep;
		double fd = (lp.total - lm.total) / (2.0 * h);
		double e = fabs(fd - g[i]) / (fabs(fd) + fabs(g[i]) + 1e-3);
		worst = e > worst ? e : worst;
		T_CHECKF(t, e < 2e-2, "param %zu: analytic %g, finite difference %g", i, g[i], fd);
		T_CHECK(t, i < 8 || i >= 12 || g[i] == 0);
	}
	T_CHECK(t, worst < 2e-2);
	/* frozen W: its gradient is zero, a's is unchanged */
	float ga = g[0];
	hy.train_w = 0;
	T_CHECK(t, train_loss_eval(&s, &p, &hy, idx, n, g, &lo) == 0);
	T_CHECK(t, g[12] == 0 && g[p.n - 1] == 0 && fabsf(g[0] - ga) < 1e-6f);
	free(g);
	train_params_free(&p);
	train_set_free(&s);
}

static void train_grad_vs_finite_differences(struct test_ctx *t)
{
	grad_vs_fd(t, TRAIN_TARGET_COVER);
}

static void train_share_grad_vs_finite_differences(struct test_ctx *t)
{
	grad_vs_fd(t, TRAIN_TARGET_SHARE);
}

/* The share target's loss is 0, with a zero gradient, where sigmoid(z_S)
 * is each span's share of its head's attention, and grows when a head's
 * bias moves away; the recall of the student's top spans is then 1. */
static void train_share_loss_zero_at_exact_shares(struct test_ctx *t)
{
	struct train_set s;
	struct train_params p;
	struct train_hyper hy;
	struct train_loss lo, l1;
	int32_t idx[64];
	float *g;
	int n = 0;

	T_CHECK(t, make_set(&s, 2, 2, 1, 8, 2, 6, 4, 17) == 0);
	for (int i = 0; i < s.n_sample; i++) {
		s.s[i].w = 0.5f + 0.2f * (float)(i % 3);   /* a share: at most 1 */
		for (int c = 0; c < s.s[i].n_comp; c++) {
			double pt = s.s[i].w * s.mass[s.s[i].off + c];
			s.x[s.s[i].off + c] = (float)log(pt / (1.0 - pt));
		}
	}
	T_CHECK(t, train_params_new(&p, 2, 2, 8, NULL, 0, 0) == 0);
	train_default_hyper(&hy);
	hy.target = TRAIN_TARGET_SHARE;
	hy.lambda_budget = 0;
	hy.train_w = 0;
	g = malloc(p.n * sizeof *g);
	T_CHECK(t, g != NULL);
	for (int i = 0; i < s.n_sample && n < 64; i++)
		idx[n++] = i;
	T_CHECK(t, train_loss_eval(&s, &p, &hy, idx, n, g, &lo) == 0);
	T_CHECKF(t, fabs(lo.bce) < 1e-5 && fabs(lo.total) < 1e-5, "loss %g at the exact shares", lo.total);
	for (int i = 0; i < 8; i++)
		T_CHECKF(t, fabsf(g[i]) < 1e-4f, "param %d: gradient %g at the optimum", i, g[i]);
	T_CHECKF(t, fabs(lo.pos_recall - 1.0) < 1e-5, "top-k recall %g", lo.pos_recall);
	p.rw.b[1] = 1.0f;
	T_CHECK(t, train_loss_eval(&s, &p, &hy, idx, n, g, &l1) == 0);
	T_CHECKF(t, l1.total > 1e-3 && g[4 + 1] > 0, "loss %g, dL/db %g with b = 1", l1.total, g[5]);
	free(g);
	train_params_free(&p);
	train_set_free(&s);
}

/* steps of AdamW over random batches; the final params into out [n] */
static int run_steps(const struct train_set *s, uint64_t seed, int steps, float *out, double *l0,
		     double *l1)
{
	struct train_params p;
	struct train_adam a;
	struct train_hyper hy;
	struct train_loss lo;
	int32_t idx[16];
	float *g;
	uint64_t rng = seed;

	train_default_hyper(&hy);
	if (train_params_new(&p, s->n_layer, s->n_head, s->d_h, NULL, 0, 1) ||
	    train_adam_new(&a, p.n, 0.05f, 5, steps) || !(g = malloc(p.n * sizeof *g)))
		return -1;
	for (size_t i = 3 * (size_t)s->n_layer * s->n_head; i < p.n; i++)
		p.v[i] = (float)(((double)(train_rand(&rng) >> 11) / 9007199254740992.0 - 0.5) * 0.2);
	int32_t all[256];
	int n_all = s->n_sample < 256 ? s->n_sample : 256;
	for (int i = 0; i < n_all; i++)
		all[i] = i;
	train_loss_eval(s, &p, &hy, all, n_all, NULL, &lo);
	*l0 = lo.total;
	for (int k = 0; k < steps; k++) {
		for (int i = 0; i < 16; i++)
			idx[i] = (int32_t)(train_rand(&rng) % (uint64_t)s->n_sample);
		for (int i = 1; i < 16; i++)
			for (int j = i; j > 0 && idx[j - 1] > idx[j]; j--) {
				int32_t x = idx[j];
				idx[j] = idx[j - 1];
				idx[j - 1] = x;
			}
		train_loss_eval(s, &p, &hy, idx, 16, g, &lo);
		train_adam_step(&a, &p, g, 3 * (size_t)s->n_layer * s->n_head);
	}
	train_loss_eval(s, &p, &hy, all, n_all, NULL, &lo);
	*l1 = lo.total;
	memcpy(out, p.v, p.n * sizeof *out);
	free(g);
	train_adam_free(&a);
	train_params_free(&p);
	return 0;
}

static void train_adamw_reproducible_by_seed(struct test_ctx *t)
{
	struct train_set s;
	struct train_params p;
	struct train_adam a;
	double l0, l1, m0, m1, k0, k1;
	float *x, *y, *z;
	size_t n;

	T_CHECK(t, make_set(&s, 2, 2, 1, 8, 2, 6, 8, 5) == 0);
	T_CHECK(t, train_params_new(&p, 2, 2, 8, NULL, 0, 1) == 0);
	n = p.n;
	train_params_free(&p);
	x = calloc(n, sizeof *x);
	y = calloc(n, sizeof *y);
	z = calloc(n, sizeof *z);
	T_CHECK(t, x && y && z);
	T_CHECK(t, run_steps(&s, 7, 60, x, &l0, &l1) == 0);
	T_CHECK(t, run_steps(&s, 7, 60, y, &m0, &m1) == 0);
	T_CHECK(t, run_steps(&s, 8, 60, z, &k0, &k1) == 0);
	/* same seed, same losses bit for bit; another seed, another run */
	T_CHECKF(t, l1 == m1 && l0 == m0, "%.17g vs %.17g", l1, m1);
	T_CHECK(t, !memcmp(x, y, n * sizeof *x));
	T_CHECK(t, k1 != l1 && memcmp(x, z, n * sizeof *x));
	T_CHECKF(t, l1 < 0.8 * l0, "loss %g -> %g: training does not learn", l0, l1);
	/* the schedule: warmup to the peak, cosine down to lr_min */
	T_CHECK(t, train_adam_new(&a, 1, 0.1f, 10, 110) == 0);
	T_CHECK(t, fabsf(train_lr_at(&a, 0) - 0.01f) < 1e-7f && fabsf(train_lr_at(&a, 9) - 0.1f) < 1e-7f);
	T_CHECK(t, fabsf(train_lr_at(&a, 60) - (a.lr_min + (0.1f - a.lr_min) * 0.5f)) < 1e-6f);
	T_CHECK(t, fabsf(train_lr_at(&a, 110) - a.lr_min) < 1e-7f);
	train_adam_free(&a);
	free(x);
	free(y);
	free(z);
	train_set_free(&s);
}

static long file_size(const char *path)
{
	FILE *f = fopen(path, "rb");
	long n;
	if (!f)
		return -1;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fclose(f);
	return n;
}

/* Rewrites path as its first n bytes of buf, or buf with byte i flipped. */
static int write_cut(const char *path, const unsigned char *buf, long n)
{
	return test_write_file(path, buf, (size_t)n);
}

static unsigned char *read_all(const char *path, long *n)
{
	FILE *f = fopen(path, "rb");
	unsigned char *b;
	*n = file_size(path);
	if (!f || *n < 0 || !(b = malloc((size_t)*n + 1))) {
		if (f)
			fclose(f);
		return NULL;
	}
	if (fread(b, 1, (size_t)*n, f) != (size_t)*n) {
		fclose(f);
		free(b);
		return NULL;
	}
	fclose(f);
	return b;
}

static void train_checkpoint_round_trip(struct test_ctx *t)
{
	struct train_ckpt a = { 0 }, b = { 0 };
	struct train_hist h = { 3, 0.01, 0.5, 0.6, 0.45, 0.05, 0.9, 0.8 };
	char path[512], err[256];
	unsigned char *buf;
	long n;

	snprintf(path, sizeof path, "%s/ck.bin", test_tmpdir());
	T_CHECK(t, train_params_new(&a.p, 2, 3, 8, NULL, 0, 1) == 0 && train_adam_new(&a.adam, a.p.n, 0.1f, 2, 9) == 0);
	T_CHECK(t, train_params_new(&b.p, 2, 3, 8, NULL, 0, 1) == 0 && train_adam_new(&b.adam, b.p.n, 0.1f, 2, 9) == 0);
	for (size_t i = 0; i < a.p.n; i++) {
		a.p.v[i] = (float)i * 0.5f;
		a.adam.m[i] = (float)i;
		a.adam.v[i] = (float)i * 2;
	}
	a.adam.step = 42;
	a.rng = 0x1234567890ull;
	T_CHECK(t, train_hist_push(&a, &h) == 0 && train_hist_push(&a, &h) == 0);
	T_CHECKF(t, train_ckpt_save(&a, path, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, train_ckpt_load(&b, path, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, b.adam.step == 42 && b.rng == a.rng && b.n_hist == 2 && b.hist[1].val == 0.6);
	T_CHECK(t, !memcmp(a.p.v, b.p.v, a.p.n * 4) && !memcmp(a.adam.m, b.adam.m, a.p.n * 4) &&
		   !memcmp(a.adam.v, b.adam.v, a.p.n * 4));
	/* every truncation and a flipped byte are refused */
	T_CHECK(t, (buf = read_all(path, &n)) != NULL);
	for (long k = 0; k < n; k += (k < 64 ? 1 : 97)) {
		T_CHECK(t, write_cut(path, buf, k) == 0);
		T_CHECKF(t, train_ckpt_load(&b, path, err, sizeof err) == SEKV_EFORMAT, "cut at %ld", k);
	}
	buf[n / 2] ^= 0x10;
	T_CHECK(t, write_cut(path, buf, n) == 0 && train_ckpt_load(&b, path, err, sizeof err) == SEKV_EFORMAT);
	free(buf);
	/* a checkpoint of another size of run */
	T_CHECK(t, train_ckpt_save(&a, path, err, sizeof err) == 0);
	train_params_free(&b.p);
	train_adam_free(&b.adam);
	T_CHECK(t, train_params_new(&b.p, 2, 2, 8, NULL, 0, 1) == 0 && train_adam_new(&b.adam, b.p.n, 0.1f, 2, 9) == 0);
	T_CHECK(t, train_ckpt_load(&b, path, err, sizeof err) == SEKV_EFORMAT);
	free(a.hist);
	free(b.hist);
	train_params_free(&a.p);
	train_params_free(&b.p);
	train_adam_free(&a.adam);
	train_adam_free(&b.adam);
}

/* Early stopping's copy of the best step: parameters, moments, step and
 * history equal the source's and survive a save and load; a state of
 * another size is refused. */
static void train_ckpt_copy_keeps_best(struct test_ctx *t)
{
	struct train_ckpt a = { 0 }, b = { 0 }, c = { 0 }, o = { 0 };
	struct train_hist h = { 50, 1e-3, 0.5, 0.7, 0.4, 0.1, 0.9, 0.8 };
	struct train_ckpt *all[4] = { &a, &b, &c, &o };
	char path[512], err[256];

	for (int k = 0; k < 4; k++)
		T_CHECK(t, train_params_new(&all[k]->p, k == 3 ? 1 : 2, 2, 8, NULL, 0, 1) == 0 &&
			   train_adam_new(&all[k]->adam, all[k]->p.n, 0.01f, 2, 10) == 0);
	for (size_t i = 0; i < a.p.n; i++) {
		a.p.v[i] = (float)i * 0.25f - 3.0f;
		a.adam.m[i] = (float)i;
		a.adam.v[i] = (float)(2 * i);
	}
	a.adam.step = 50;
	a.rng = 1234;
	T_CHECK(t, train_hist_push(&a, &h) == 0 && train_hist_push(&a, &h) == 0);
	T_CHECK(t, train_ckpt_copy(&b, &a) == 0);
	T_CHECK(t, !memcmp(b.p.v, a.p.v, a.p.n * sizeof *a.p.v) &&
		   !memcmp(b.adam.m, a.adam.m, a.p.n * sizeof *a.adam.m) &&
		   !memcmp(b.adam.v, a.adam.v, a.p.n * sizeof *a.adam.v));
	T_CHECK(t, b.adam.step == 50 && b.rng == 1234 && b.n_hist == 2 && b.hist[1].val == 0.7);
	/* later steps of the run do not touch the copy */
	a.p.v[0] = 99.0f;
	T_CHECK(t, b.p.v[0] == -3.0f);
	snprintf(path, sizeof path, "%s/best.ckpt", test_tmpdir());
	T_CHECK(t, train_ckpt_save(&b, path, err, sizeof err) == 0);
	T_CHECK(t, train_ckpt_load(&c, path, err, sizeof err) == 0);
	T_CHECK(t, !memcmp(c.p.v, b.p.v, b.p.n * sizeof *b.p.v) && c.adam.step == 50 && c.n_hist == 2);
	T_CHECK(t, train_ckpt_copy(&o, &a) == SEKV_EINVAL);
	for (int k = 0; k < 4; k++) {
		free(all[k]->hist);
		train_params_free(&all[k]->p);
		train_adam_free(&all[k]->adam);
	}
}

static void train_data_cache_round_trip(struct test_ctx *t)
{
	struct train_set s, r;
	char path[512], err[256];
	unsigned char *buf;
	long n;

	T_CHECK(t, make_set(&s, 2, 2, 1, 4, 2, 3, 2, 9) == 0);
	snprintf(path, sizeof path, "%s/data.bin", test_tmpdir());
	T_CHECKF(t, train_set_save(&s, path, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, train_set_load(&r, path, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, r.n_sample == s.n_sample && r.n_span == s.n_span && r.n_doc == 2);
	T_CHECK(t, !memcmp(r.x, s.x, (size_t)s.n_span * 4) && !memcmp(r.y, s.y, (size_t)s.n_span) &&
		   !memcmp(r.doc[1].k_bar, s.doc[1].k_bar, 2 * 3 * 4 * 4) && r.s[5].off == s.s[5].off);
	train_set_free(&r);
	T_CHECK(t, (buf = read_all(path, &n)) != NULL);
	for (long k = 0; k < n; k++) {
		T_CHECK(t, write_cut(path, buf, k) == 0);
		T_CHECKF(t, train_set_load(&r, path, err, sizeof err) == SEKV_EFORMAT, "cut at %ld", k);
	}
	free(buf);
	train_set_free(&s);
}

static void train_weights_refused_foreign_or_damaged(struct test_ctx *t)
{
	struct train_params p;
	struct sekv_router_w *w = NULL;
	char path[512], err[256];
	const char *fp = "0123456789abcdef";
	unsigned char *buf;
	long n;

	snprintf(path, sizeof path, "%s/router.bin", test_tmpdir());
	T_CHECK(t, train_params_new(&p, 2, 4, 8, NULL, 0, 1) == 0);
	for (size_t i = 0; i < p.n; i++)
		p.v[i] = (float)((i % 7) * 0.125);
	for (int i = 0; i < 8; i++)
		p.rw.tau[i] = 0.25f;
	T_CHECKF(t, train_weights_save(&p.rw, fp, path, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, train_weights_load(&w, path, fp, 2, 4, 8, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, w->a[3] == p.rw.a[3] && w->b[5] == p.rw.b[5] && w->tau[2] == 0.25f && w->w &&
		   w->w[100] == p.rw.w[100]);   /* multiples of 1/8 are exact in fp16 */
	free(w);
	w = NULL;
	/* another model's fingerprint or shape */
	T_CHECK(t, train_weights_load(&w, path, "fedcba9876543210", 2, 4, 8, err, sizeof err) == SEKV_EMISMATCH &&
		   !w && strstr(err, "fingerprint"));
	T_CHECK(t, train_weights_load(&w, path, fp, 3, 4, 8, err, sizeof err) == SEKV_EMISMATCH && !w);
	T_CHECK(t, train_weights_load(&w, path, fp, 2, 4, 16, err, sizeof err) == SEKV_EMISMATCH && !w);
	/* every length short of the file, a flipped byte, a trailing byte */
	T_CHECK(t, (buf = read_all(path, &n)) != NULL);
	for (long k = 0; k < n; k++) {
		T_CHECK(t, write_cut(path, buf, k) == 0);
		int rc = train_weights_load(&w, path, fp, 2, 4, 8, err, sizeof err);
		T_CHECKF(t, rc == SEKV_EFORMAT && !w, "cut at %ld: %d", k, rc);
	}
	buf[n - 20] ^= 1;
	T_CHECK(t, write_cut(path, buf, n) == 0);
	T_CHECK(t, train_weights_load(&w, path, fp, 2, 4, 8, err, sizeof err) == SEKV_EFORMAT && !w);
	T_CHECK(t, train_weights_load(&w, "/nonexistent/router.bin", fp, 2, 4, 8, err, sizeof err) == SEKV_EIO);
	T_CHECKF(t, strstr(err, "router weights: /nonexistent/router.bin: ") == err, "%s", err);
	/* a directory opens with fopen on Linux: refused before its size is read */
	T_CHECK(t, train_weights_load(&w, test_tmpdir(), fp, 2, 4, 8, err, sizeof err) == SEKV_EIO && !w);
	T_CHECKF(t, strstr(err, "not a regular file") != NULL, "%s", err);
	/* without W the file is a, b, tau only */
	p.rw.w = NULL;
	T_CHECK(t, train_weights_save(&p.rw, fp, path, err, sizeof err) == 0);
	T_CHECK(t, file_size(path) == 8 + 5 * 8 + 16 + 3 * 8 * 4 + 8);
	T_CHECK(t, train_weights_load(&w, path, fp, 2, 4, 8, err, sizeof err) == 0 && w && !w->w);
	free(w);
	free(buf);
	train_params_free(&p);
}

/* At a = 1, b = 0, tau = 0 and no W the trained router is the landmark
 * router: same zooms, same output bit for bit; a bias far below with a
 * threshold zooms nothing. */
static void train_router_identity_is_landmark(struct test_ctx *t)
{
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	struct sekv_ctx *c[3] = { NULL, NULL, NULL };
	struct train_params w, off;
	float q[4 * 64], k[64], v[64], out[3][4 * 64];
	char err[256];

	T_CHECK(t, fx_doc_make(&d, 600, 2, 4, 1, 64, 41) == 0);
	fx_exact_params(&p);
	p.budget = 0.5;
	p.tau = 0.0f;
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, m->n_lm > 0 && m->n_comp >= 8);
	T_CHECK(t, train_params_new(&w, m->n_layer, m->n_head, m->d_h, NULL, 0, 0) == 0);
	T_CHECK(t, train_params_new(&off, m->n_layer, m->n_head, m->d_h, NULL, 0, 0) == 0);
	for (int i = 0; i < m->n_layer * m->n_head; i++) {
		off.rw.b[i] = -100.0f;
		off.rw.tau[i] = 0.5f;
	}
	p.router = SEKV_ROUTER_TRAINED;
	p.trained = NULL;
	T_CHECK(t, sekv_ctx_new(&c[0], m, &p, 4, 0.125f, err, sizeof err) == SEKV_EINVAL);
	for (int r = 0; r < 3; r++) {
		p.router = r == 0 ? SEKV_ROUTER_LANDMARK : SEKV_ROUTER_TRAINED;
		p.trained = r == 1 ? &w.rw : &off.rw;
		T_CHECKF(t, sekv_ctx_new(&c[r], m, &p, 4, 0.125f, err, sizeof err) == 0, "%s", err);
	}
	test_fill_random(q, 4 * 64, 5);
	test_fill_random(k, 64, 6);
	test_fill_random(v, 64, 7);
	for (int r = 0; r < 3; r++)
		for (int l = 0; l < m->n_layer; l++)
			T_CHECK(t, sekv_attend(c[r], m->layer_id[l], m->n_tok, q, k, v, out[r]) == 0);
	T_CHECK(t, sekv_ctx_stats(c[0])->zoom_total > 0);
	T_CHECK(t, sekv_ctx_stats(c[1])->zoom_total == sekv_ctx_stats(c[0])->zoom_total);
	T_CHECK(t, !memcmp(out[0], out[1], sizeof out[0]));
	T_CHECK(t, sekv_ctx_stats(c[2])->zoom_total == 0);
	for (int r = 0; r < 3; r++)
		sekv_ctx_free(c[r]);
	train_params_free(&w);
	train_params_free(&off);
	sekv_mem_free(m);
	fx_doc_free(&d);
}

const struct test_case test_train[] = {
	{ "train_label_smallest_cover", train_label_smallest_cover },
	{ "train_grad_vs_finite_differences", train_grad_vs_finite_differences },
	{ "train_share_grad_vs_finite_differences", train_share_grad_vs_finite_differences },
	{ "train_share_loss_zero_at_exact_shares", train_share_loss_zero_at_exact_shares },
	{ "train_adamw_reproducible_by_seed", train_adamw_reproducible_by_seed },
	{ "train_checkpoint_round_trip", train_checkpoint_round_trip },
	{ "train_ckpt_copy_keeps_best", train_ckpt_copy_keeps_best },
	{ "train_data_cache_round_trip", train_data_cache_round_trip },
	{ "train_weights_refused_foreign_or_damaged", train_weights_refused_foreign_or_damaged },
	{ "train_router_identity_is_landmark", train_router_identity_is_landmark },
	{ NULL, NULL },
};
