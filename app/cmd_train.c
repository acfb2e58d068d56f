/* cmd_train.c - `sekv train`: trains the SeKV router of a model with the
 * model frozen (issue 19 item 3; the arithmetic is engine/train/).
 *
 * Data: memories of --doc-tokens tokens cut from the training files
 * (assets/router_train.sha256; held-out ones from assets/router_heldout.
 * sha256, split by file, tools/router_split.sh), each prefilled and built
 * as ingest builds it (10% budget), then asked synthetic questions ("what
 * follows <a phrase of the document>?", answer teacher-forced) decoded
 * against the memory with the landmark router; at every step each global
 * layer's queries, landmark logits and exact attention mass per span
 * become samples (heads whose compressed share is under 2% are left out).
 * The target (--train-target) is each span's share of its head's
 * attention by default, or the paper's rho-cover labels. Then AdamW steps over random batches of one memory's samples; the
 * weights kept are those of the step with the lowest held-out loss
 * (early stopping: W overfits long before the last step), tau calibrated
 * on them, weights written. FILE.data / FILE.val cache the samples,
 * FILE.ckpt the state every 50 steps and FILE.best the best step's, so
 * --resume goes on where a killed run stopped; FILE.png draws the loss
 * curves.
 */
#include "app/app.h"
#include "app/eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/clock.h"
#include "engine/base/err.h"
#include "engine/conv/chat.h"
#include "engine/model/model.h"
#include "engine/sekv/sekv.h"
#include "engine/tok/tokenizer.h"
#include "engine/train/train.h"

#define TRAIN_LIST "assets/router_train.sha256"
#define HELD_LIST "assets/router_heldout.sha256"
#define TRAIN_QUESTIONS 3     /* synthetic questions per memory */
#define TRAIN_BATCH 1024      /* samples per optimiser step */
#define TRAIN_CKPT_EVERY 50   /* steps */
#define TRAIN_W_MIN 0.02      /* least compressed share of a sample's head */
#define TRAIN_RHO 0.9         /* teacher cover (DESIGN.md section 3) */
#define TRAIN_LR 0.02f

struct rec {
	struct sekv_ctx *ctx;
	struct train_set *set;
	int doc, on, failed;
};

/* model_attn: SeKV's attention, then the step's samples of the layer. */
static int rec_attend(void *ud, int layer, int pos, const float *q, const float *k, const float *v,
		      float *out)
{
	struct rec *r = ud;
	struct sekv_route_view rv;
	int rc = sekv_attend(r->ctx, layer, pos, q, k, v, out);

	if (rc || !r->on)
		return rc;
	sekv_ctx_route_view(r->ctx, &rv);
	if (rv.x && rv.mass && train_set_add_step(r->set, r->doc, &rv, q, TRAIN_RHO, TRAIN_W_MIN) < 0)
		r->failed = 1;
	return r->failed ? SEKV_ENOMEM : 0;
}

static void mem_params(const struct app_opts *o, const struct model *m, struct sekv_params *sp)
{
	const struct model_hparams *hp = model_hparams(m);

	sekv_default_params(sp);
	sp->alpha = o->alpha;
	sp->r_max = o->r_max;
	sp->r_use = o->r_max;
	sp->rank_energy = o->rank_energy;
	sp->rank_energy_v = o->rank_energy_v;
	sp->static_share = o->static_share;
	sp->rope_base = hp->rope_base_global;
	sp->n_rot = hp->n_rot;
	sp->n_recent = o->n_recent;
	sp->exact_below = 0;
	sp->n_threads = o->n_threads;
	sp->be = model_backend(m);
	sp->q_scale = hp->q_scale;
}

/* Tokens [at, at + n) of ids as text (malloc'ed). */
static char *piece_dup(const struct tok *tk, const int32_t *ids, int n)
{
	return tok_decode_dup(tk, ids, n);
}

/* One memory of text: prefill, build, questions; samples into set. */
static int collect_doc(const struct app_opts *o, const struct model *m, const struct tok *tk,
		       const struct chat_template *ct, const char *text, size_t len, int n_tok,
		       uint64_t *rng, struct train_set *set, double *tok_s, char *err, size_t errlen)
{
	const struct model_hparams *hp = model_hparams(m);
	struct chat_tokvec dv = { 0 }, qv = { 0 };
	struct model_state *st = NULL;
	struct sekv_mem *mem = NULL;
	struct sekv_ctx *ctx = NULL;
	struct sekv_params sp;
	uint16_t *k[MODEL_MAX_LAYER] = { 0 }, *v[MODEL_MAX_LAYER] = { 0 };
	float *sur = NULL;
	int32_t *ids = NULL;
	char *body = NULL;
	int n, rc, batch = 256, n_doc;
	double t0 = clk_now(), n_done = 0;
	struct rec r = { 0 };

	if (!(ids = malloc((size_t)n_tok * 2 * sizeof *ids)))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "train: out of memory");
	n = tok_encode(tk, text, len, 0, ids, n_tok * 2, err, errlen);
	if (n < 0) {
		rc = n;
		goto out;
	}
	n = n < n_tok ? n : n_tok;
	if (!(body = piece_dup(tk, ids, n))) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "train: out of memory");
		goto out;
	}
	if ((rc = chat_build_turn(&dv, ct, tk, CHAT_START_STREAM, APP_DOC_SYSTEM, body, strlen(body), 0,
				  NULL, err, errlen)))
		goto out;
	n_doc = dv.n;
	if ((rc = model_state_new(&st, m, n_doc + 512, batch, 1, err, errlen)) ||
	    !(sur = malloc((size_t)n_doc * sizeof *sur))) {
		rc = rc ? rc : SEKV_ENOMEM;
		goto out;
	}
	for (int at = 0; at < n_doc; at += batch) {
		int c = n_doc - at < batch ? n_doc - at : batch;
		if ((rc = model_prefill(m, st, dv.ids + at, c, sur + at, err, errlen)))
			goto out;
	}
	n_done += n_doc;
	for (int l = 0; l < hp->n_global; l++) {
		size_t rows = (size_t)n_doc * hp->n_head_kv * hp->d_head;
		if (!(k[l] = malloc(rows * 2)) || !(v[l] = malloc(rows * 2))) {
			rc = SEKV_ENOMEM;
			goto out;
		}
		if ((rc = model_state_get_rows(st, hp->global_layer[l], 0, n_doc, k[l], v[l])))
			goto out;
	}
	mem_params(o, m, &sp);
	sp.budget = 0.10;
	if ((rc = sekv_build(&mem, &sp, n_doc, dv.ids, sur, hp->n_global, hp->global_layer, hp->n_head,
			     hp->n_head_kv, hp->d_head, (const uint16_t *const *)k,
			     (const uint16_t *const *)v, err, errlen)))
		goto out;
	sp.router = SEKV_ROUTER_LANDMARK;
	if ((rc = sekv_ctx_new(&ctx, mem, &sp, 256, hp->q_scale, err, errlen)) ||
	    (rc = train_set_add_doc(set, mem, &r.doc)))
		goto out;
	sekv_ctx_set_exact_keys(ctx, (const uint16_t *const *)k);
	r.ctx = ctx;
	r.set = set;
	for (int qi = 0; qi < TRAIN_QUESTIONS && mem->n_comp > 0; qi++) {
		/* a phrase of 8 tokens at a random depth, its next 12 the answer */
		int at = (int)(n * (0.05 + 0.85 * (double)(train_rand(rng) >> 11) / 9007199254740992.0));
		char *ph = piece_dup(tk, ids + at, 8), *ans = piece_dup(tk, ids + at + 8, 12), q[512];
		struct model_attn attn = { &r, rec_attend };
		int n_q;
		if (!ph || !ans || at + 20 > n) {
			free(ph);
			free(ans);
			continue;
		}
		snprintf(q, sizeof q, "What comes right after \"%.200s\" in the document?", ph);
		qv.n = 0;
		if ((rc = chat_build_turn(&qv, ct, tk, CHAT_START_IN_USER, NULL, q, strlen(q), 1, NULL, err,
					  errlen)) ||
		    (rc = chat_push_text(&qv, tk, ans, strlen(ans), err, errlen))) {
			free(ph);
			free(ans);
			goto out;
		}
		free(ph);
		free(ans);
		n_q = qv.n < 250 ? qv.n : 250;
		sekv_ctx_reset(ctx);
		if ((rc = model_state_resume(st, n_doc)))
			goto out;
		for (int i = 0; i < n_q; i++) {
			r.on = i % 2 == 1;   /* every other step: neighbours are alike */
			if ((rc = model_decode_ex(m, st, qv.ids[i], &attn, NULL, 0, err, errlen)))
				goto out;
		}
		n_done += n_q;
	}
	*tok_s = n_done / (clk_now() - t0);
out:
	for (int l = 0; l < MODEL_MAX_LAYER; l++) {
		free(k[l]);
		free(v[l]);
	}
	sekv_ctx_free(ctx);
	sekv_mem_free(mem);
	model_state_free(st);
	chat_tokvec_free(&dv);
	chat_tokvec_free(&qv);
	free(sur);
	free(ids);
	free(body);
	return rc;
}

/* Collects memories [set->n_doc, n_want) of the corpus in list, cut at
 * n_tok tokens apart (about 4 bytes a token), saving the cache after each. */
static int collect(const struct app_opts *o, const struct model *m, const struct tok *tk,
		   const struct chat_template *ct, const char *list, int n_want, int n_tok, uint64_t seed,
		   struct train_set *set, const char *cache, const char *what, char *err, size_t errlen)
{
	struct eval_corpus c;
	size_t stride = (size_t)n_tok * 4;
	int rc;

	if (set->n_doc >= n_want)
		return 0;
	if ((rc = eval_corpus_load_pinned(&c, list, stride, err, errlen)))
		return rc;
	for (int d = set->n_doc; d < n_want; d++) {
		size_t at = ((size_t)d * stride) % (c.len > stride ? c.len - stride : 1);
		uint64_t rng = seed * 1000003u + (uint64_t)d;
		double t0 = clk_now(), tps = 0;
		if ((rc = collect_doc(o, m, tk, ct, c.text + at, stride * 2 < c.len - at ? stride * 2 : c.len - at,
				      n_tok, &rng, set, &tps, err, errlen)) ||
		    (rc = train_set_save(set, cache, err, errlen)))
			break;
		if (!o->quiet)
			printf("collect %s %d/%d: %d samples so far, %.0f tokens/s, ETA %.0fs\n", what, d + 1,
			       n_want, set->n_sample, tps, (clk_now() - t0) * (n_want - d - 1));
		fflush(stdout);
	}
	eval_corpus_free(&c);
	return rc;
}

/* A batch: TRAIN_BATCH random samples (or all) of one random memory of
 * set, in index order (grouped by memory). */
static int pick_batch(const struct train_set *t, const int32_t *first, uint64_t *rng, int32_t *idx)
{
	int d = (int)(train_rand(rng) % (uint64_t)t->n_doc), n = first[d + 1] - first[d];

	if (n <= TRAIN_BATCH) {
		for (int i = 0; i < n; i++)
			idx[i] = first[d] + i;
		return n;
	}
	for (int i = 0; i < TRAIN_BATCH; i++)
		idx[i] = first[d] + (int32_t)(train_rand(rng) % (uint64_t)n);
	for (int i = 1; i < TRAIN_BATCH; i++)   /* insertion sort: keep runs */
		for (int j = i; j > 0 && idx[j - 1] > idx[j]; j--) {
			int32_t x = idx[j];
			idx[j] = idx[j - 1];
			idx[j - 1] = x;
		}
	return TRAIN_BATCH;
}

static int plot(const struct train_ckpt *c, const char *path, char *err, size_t errlen)
{
	double *x = malloc(((size_t)c->n_hist + 1) * 4 * sizeof *x), *y[3];
	const char *name[3] = { "training loss", "held-out loss", "held-out recall (top spans)" };
	int rc;

	if (!x)
		return SEKV_ENOMEM;
	y[0] = x + c->n_hist;
	y[1] = y[0] + c->n_hist;
	y[2] = y[1] + c->n_hist;
	for (int i = 0; i < c->n_hist; i++) {
		x[i] = c->hist[i].step;
		y[0][i] = c->hist[i].train;
		y[1][i] = c->hist[i].val;
		y[2][i] = c->hist[i].val_recall;
	}
	rc = eval_plot_curves(path, "sekv train: router loss", "step", 3, name, x,
			      (const double *const *)y, c->n_hist, err, errlen);
	free(x);
	return rc;
}

/* The run's state c becomes the best so far: copied into best and
 * written to path, so that a resumed run keeps it. 0 or the code. */
static int keep_best(const struct train_ckpt *c, struct train_ckpt *best, const char *path, char *err,
		     size_t errlen)
{
	if (train_ckpt_copy(best, c))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "train: out of memory");
	return train_ckpt_save(best, path, err, errlen);
}

int cmd_train(int argc, char **argv)
{
	struct app_opts o;
	struct model *m = NULL;
	struct tok *tk = NULL;
	struct chat_template ct;
	struct train_set tr, va;
	struct train_ckpt ck = { 0 }, best = { 0 };
	double best_val = INFINITY;
	struct train_hyper hy;
	char err[1024], out[4096], p_ck[4200], p_tr[4200], p_va[4200], p_png[4200], p_best[4200];
	char *args[256];
	int32_t *first = NULL, *idx = NULL, *vidx = NULL;
	int resume = 0, n_args = 0, rc = 1, n_val, nv = 0;
	float *grad = NULL;
	const struct model_hparams *hp;

	for (int i = 0; i < argc && n_args < 255; i++) {
		if (!strcmp(argv[i], "--resume"))
			resume = 1;
		else
			args[n_args++] = argv[i];
	}
	if (app_opts_parse(&o, n_args, args, err, sizeof err)) {
		app_errorf("sekv train: %s\n", err);
		return 2;
	}
	if (app_load(&o, &m, &tk, err, sizeof err))
		goto fail;
	hp = model_hparams(m);
	if (chat_template_init(&ct, model_gguf(m), chat_format_of_gguf(model_gguf(m)), tk, err, sizeof err))
		goto fail;
	app_router_weights_path(&o, out, sizeof out);
	if (o.eval_out)
		snprintf(out, sizeof out, "%s", o.eval_out);
	snprintf(p_ck, sizeof p_ck, "%s.ckpt", out);
	snprintf(p_tr, sizeof p_tr, "%s.data", out);
	snprintf(p_va, sizeof p_va, "%s.val", out);
	snprintf(p_png, sizeof p_png, "%s.png", out);
	snprintf(p_best, sizeof p_best, "%s.best", out);
	train_set_init(&tr, hp->n_global, hp->n_head, hp->n_head_kv, hp->d_head);
	train_set_init(&va, hp->n_global, hp->n_head, hp->n_head_kv, hp->d_head);
	if (resume && access(p_tr, R_OK) == 0 && train_set_load(&tr, p_tr, err, sizeof err))
		goto fail;
	if (resume && access(p_va, R_OK) == 0 && train_set_load(&va, p_va, err, sizeof err))
		goto fail;
	if (tr.n_layer != hp->n_global || tr.n_head != hp->n_head || va.n_head != hp->n_head) {
		snprintf(err, sizeof err, "%.900s: collected for another model shape", p_tr);
		goto fail;
	}
	n_val = o.train_docs / 4 > 2 ? o.train_docs / 4 : 2;
	if (collect(&o, m, tk, &ct, TRAIN_LIST, o.train_docs, o.train_tokens, o.seed, &tr, p_tr, "training",
		    err, sizeof err) ||
	    collect(&o, m, tk, &ct, HELD_LIST, n_val, o.train_tokens, o.seed + 7777, &va, p_va, "held-out",
		    err, sizeof err))
		goto fail;
	if (tr.n_sample == 0 || va.n_sample == 0) {
		snprintf(err, sizeof err, "no samples collected");
		goto fail;
	}
	train_default_hyper(&hy);
	hy.train_w = o.train_w == 0;
	hy.target = o.train_target == 0 ? TRAIN_TARGET_SHARE : TRAIN_TARGET_COVER;
	if (hy.target == TRAIN_TARGET_SHARE)
		hy.lambda_budget = 0;   /* the share already prices a zoom: no push towards fewer */
	if (train_params_new(&ck.p, hp->n_global, hp->n_head, hp->d_head, NULL, 0.0f, 1) ||
	    train_adam_new(&ck.adam, ck.p.n, TRAIN_LR, o.train_steps / 20 + 1, o.train_steps) ||
	    train_params_new(&best.p, hp->n_global, hp->n_head, hp->d_head, NULL, 0.0f, 1) ||
	    train_adam_new(&best.adam, ck.p.n, TRAIN_LR, o.train_steps / 20 + 1, o.train_steps))
		goto nomem;
	ck.rng = o.seed;
	/* W starts small and random: its term is ~0, z = the landmark logit */
	{
		size_t lh = (size_t)hp->n_global * hp->n_head;
		uint64_t s = o.seed ^ 0x5eedull;
		for (size_t i = 3 * lh; i < ck.p.n; i++)
			ck.p.v[i] = (float)(((double)(train_rand(&s) >> 11) / 9007199254740992.0 - 0.5) * 0.02);
		if (!hy.train_w)
			ck.p.rw.w = NULL;
	}
	if (resume && access(p_ck, R_OK) == 0) {
		if (train_ckpt_load(&ck, p_ck, err, sizeof err))
			goto fail;
		printf("resumed at step %ld of %d\n", ck.adam.step, o.train_steps);
		if (access(p_best, R_OK) == 0) {
			if (train_ckpt_load(&best, p_best, err, sizeof err))
				goto fail;
			if (best.n_hist > 0)
				best_val = best.hist[best.n_hist - 1].val;
		}
	}
	first = malloc(((size_t)tr.n_doc + 1) * sizeof *first);
	idx = malloc(TRAIN_BATCH * sizeof *idx);
	vidx = malloc(((size_t)va.n_sample + 1) * sizeof *vidx);
	grad = malloc(ck.p.n * sizeof *grad);
	if (!first || !idx || !vidx || !grad)
		goto nomem;
	for (int d = 0, i = 0; d <= tr.n_doc; d++) {
		while (i < tr.n_sample && tr.s[i].doc < d)
			i++;
		first[d] = i;
	}
	/* a fixed held-out subset: every k-th sample, at most 8192 */
	for (int i = 0, step = va.n_sample / 8192 + 1; i < va.n_sample; i += step)
		vidx[nv++] = i;
	printf("training: %d samples over %d memories, held-out %d over %d; %zu parameters (W %s)\n",
	       tr.n_sample, tr.n_doc, va.n_sample, va.n_doc, hy.train_w ? ck.p.n : ck.p.n -
	       (size_t)hp->n_global * hp->n_head * SEKV_D_ROUTE * hp->d_head, hy.train_w ? "trained" : "off");
	{
		double t0 = clk_now(), samples = 0;
		long s0 = ck.adam.step;
		while (ck.adam.step < o.train_steps) {
			struct train_loss lo, lv;
			int n = pick_batch(&tr, first, &ck.rng, idx);
			if (train_loss_eval(&tr, &ck.p, &hy, idx, n, grad, &lo))
				goto nomem;
			train_adam_step(&ck.adam, &ck.p, grad, (size_t)3 * hp->n_global * hp->n_head);
			samples += n;
			if (ck.adam.step % TRAIN_CKPT_EVERY == 0 || ck.adam.step == o.train_steps ||
			    ck.adam.step == s0 + 1) {
				double dt = clk_now() - t0, sps = samples / (dt > 0 ? dt : 1);
				struct train_hist h;
				if (train_loss_eval(&va, &ck.p, &hy, vidx, nv, NULL, &lv))
					goto nomem;
				h = (struct train_hist){ (double)ck.adam.step, train_lr_at(&ck.adam, ck.adam.step - 1),
							 lo.total, lv.total, lo.bce, lo.budget, lo.pos_recall,
							 lv.pos_recall };
				if (train_hist_push(&ck, &h) || train_ckpt_save(&ck, p_ck, err, sizeof err))
					goto fail;
				if (lv.total < best_val && keep_best(&ck, &best, p_best, err, sizeof err))
					goto fail;
				best_val = lv.total < best_val ? lv.total : best_val;
				printf("step %ld/%d  loss %.4f (bce %.4f, budget %.4f)  held-out %.4f  recall %.3f  "
				       "lr %.2e  %.0f samples/s  ETA %.0fs\n", ck.adam.step, o.train_steps, lo.total,
				       lo.bce, lo.budget, lv.total, lv.pos_recall, h.lr, sps,
				       (o.train_steps - ck.adam.step) * n / (sps > 0 ? sps : 1));
				fflush(stdout);
			}
		}
	}
	if (best.n_hist > 0) {
		/* early stopping: the step of the lowest held-out loss */
		memcpy(ck.p.v, best.p.v, ck.p.n * sizeof *ck.p.v);
		printf("kept step %.0f of %ld: held-out loss %.4f (last %.4f)\n",
		       best.hist[best.n_hist - 1].step, ck.adam.step, best_val,
		       ck.n_hist ? ck.hist[ck.n_hist - 1].val : NAN);
	}
	if (train_calibrate_tau(&tr, &ck.p, 0.99))
		goto nomem;
	if (train_weights_save(&ck.p.rw, hp->fingerprint, out, err, sizeof err) ||
	    plot(&ck, p_png, err, sizeof err))
		goto fail;
	printf("wrote %s (%zu parameters), %s, %s\n", out, ck.p.rw.w ? ck.p.n : 3 * (size_t)hp->n_global *
	       hp->n_head, p_png, p_ck);
	rc = 0;
	goto done;
nomem:
	snprintf(err, sizeof err, "out of memory");
fail:
	app_errorf("sekv train: %s\n", err);
done:
	free(first);
	free(idx);
	free(vidx);
	free(grad);
	free(ck.hist);
	free(best.hist);
	train_params_free(&ck.p);
	train_adam_free(&ck.adam);
	train_params_free(&best.p);
	train_adam_free(&best.adam);
	train_set_free(&tr);
	train_set_free(&va);
	tok_close(tk);
	model_close(m);
	return rc;
}
