/* test_sekv_budget.c - SeKV under a memory budget: resident bytes never
 * above it, zooms that change from step to step against the reference,
 * alpha raised (or spans merged) to fit it, the exact question turn within
 * it, tail eviction; and routing: the oracle and landmark routers zoom the
 * span holding the attention mass (mass_recall against a double
 * reference). Decoding equivalences and edges are in test_sekv_attend.c.
 * Synthetic data only, fixed seeds (sekv_fixture.c). */
#include "tests/test.h"
#include "tests/sekv_fixture.h"
#include "engine/base/err.h"
#include "engine/quant/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- question turn and tail eviction ----------------------------------- */

/* An exact question turn (sekv_params.question_exact): under a small
 * budget the turn's tokens attend exactly over every document row (full-
 * rank fp32 factors rebuild the spans exactly), the rebuilt rows are
 * counted as host-tier scratch and the device tier stays within the
 * budget; once the turn ends the answer zooms under the budget again (a
 * few spans, not all), and with question_exact 0 the turn zooms as the
 * answer does (not exact). */
static void question_turn_exact_within_budget(struct test_ctx *t)
{
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	struct sekv_ctx *c = NULL;
	const struct sekv_stats *st;
	char err[256];

	T_CHECK(t, fx_doc_make(&d, 1200, 2, 4, 1, 64, 41) == 0);
	fx_exact_params(&p);
	p.n_recent = 32;
	p.budget = 0.3;
	p.static_share = 0.5;
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, m && m->n_comp > 4, "%d compressed spans", m ? m->n_comp : -1);
	for (int exact = 1; m && exact >= 0; exact--) {
		p.question_exact = exact;
		T_CHECKF(t, sekv_ctx_new(&c, m, &p, 16, 0.125f, err, sizeof err) == 0, "%s", err);
		st = sekv_ctx_stats(c);
		sekv_ctx_question(c, 1);
		double e = fx_decode_vs_ref(&d, m, c, 4, 0, 0.125f, 9);
		if (exact) {
			T_CHECKF(t, e >= 0 && e < 1e-4, "question turn vs exact attention: %g", e);
			T_CHECKF(t, st->question_host_bytes > 0 && st->recon_bytes == 0 &&
				 st->peak_resident_bytes <= st->budget_bytes,
				 "host %zu, rebuilt on the device %zu, peak %zu of %zu",
				 st->question_host_bytes, st->recon_bytes, st->peak_resident_bytes,
				 st->budget_bytes);
		} else {
			T_CHECKF(t, e > 1e-3, "question turn zoomed under the budget matched exact "
				 "attention (%g)", e);
			T_CHECK(t, st->question_host_bytes == 0);
		}
		sekv_ctx_question(c, 0);
		/* the answer: under the budget, exact no longer */
		double ea = fx_decode_vs_ref(&d, m, c, 2, 0, 0.125f, 10);
		T_CHECKF(t, ea > 1e-3 && st->peak_resident_bytes <= st->budget_bytes &&
			 st->recon_bytes > 0, "answer: diff %g, peak %zu of %zu, rebuilt %zu", ea,
			 st->peak_resident_bytes, st->budget_bytes, st->recon_bytes);
		sekv_ctx_free(c);
		c = NULL;
	}
	sekv_mem_free(m);
	fx_doc_free(&d);
}

/* Evicting the oldest tail rows: later steps attend exactly as if those
 * tokens had never been there, and the held rows and bytes shrink. */
static void evict_tail_forgets_oldest_rows(struct test_ctx *t)
{
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	struct sekv_ctx *c = NULL;
	char err[256];

	T_CHECK(t, fx_doc_make(&d, 300, 2, 4, 1, 64, 5) == 0);
	fx_exact_params(&p);
	p.n_recent = 64;
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, sekv_ctx_new(&c, m, &p, 8, 0.125f, err, sizeof err) == 0, "%s", err);
	fx_decode_evict_at(5, 3);
	double e = fx_decode_vs_ref(&d, m, c, 8, 0, 0.125f, 3);
	fx_decode_evict_at(-1, 0);
	int rows = sekv_ctx_tail_rows(c);
	int bad_back = sekv_ctx_evict_tail(c, d.n_tok + 2);   /* before the held rows */
	int bad_fwd = sekv_ctx_evict_tail(c, d.n_tok + 9);    /* past the last row */
	int ok_all = sekv_ctx_evict_tail(c, d.n_tok + 8);
	int rows0 = sekv_ctx_tail_rows(c);
	sekv_ctx_free(c);
	sekv_mem_free(m);
	fx_doc_free(&d);
	T_CHECKF(t, e >= 0 && e < 1e-4, "after eviction vs exact: max diff %g", e);
	T_CHECKF(t, rows == 5, "held rows %d", rows);
	T_CHECK(t, bad_back == SEKV_EINVAL && bad_fwd == SEKV_EINVAL && ok_all == 0 && rows0 == 0);
}

/* ---- budget ------------------------------------------------------------ */

/* Decodes n_step steps; returns zoom_total, or -1 when resident bytes ever
 * exceeded the budget; *recon = reconstructed bytes summed over steps. */
static long long run_budget(const struct fx_doc *d, struct sekv_ctx *c, int n_step,
			    double *recon)
{
	const struct sekv_stats *st = sekv_ctx_stats(c);
	int nq = d->n_head * d->d_h, nkv = d->n_head_kv * d->d_h;
	float *q = malloc((size_t)nq * 4), *k = malloc((size_t)nkv * 4);
	float *v = malloc((size_t)nkv * 4), *out = malloc((size_t)nq * 4);
	long long rc = 0;

	fx_rng_seed(1234);
	*recon = 0;
	for (int s = 0; s < n_step && rc >= 0; s++, *recon += (double)st->recon_bytes)
		for (int l = 0; l < d->n_layer; l++) {
			for (int i = 0; i < nq; i++)
				q[i] = (float)(3 * fx_rng_n());
			for (int i = 0; i < nkv; i++) {
				k[i] = (float)fx_rng_n();
				v[i] = (float)fx_rng_n();
			}
			if (sekv_attend(c, d->layer_id[l], d->n_tok + s, q, k, v, out) ||
			    st->resident_bytes > st->budget_bytes ||
			    st->peak_resident_bytes > st->budget_bytes) {
				rc = -1;
				break;
			}
		}
	if (rc == 0)
		rc = st->zoom_total;
	free(q); free(k); free(v); free(out);
	return rc;
}

/* Under a budget the zooms change from step to step (random queries);
 * rows kept from the previous step and rows rebuilt must both be the
 * right spans' rows: every step equals exact rows + zoomed spans exact +
 * the rest coarse (full-rank fp32 factors), for both routers. */
static void zoom_changes_between_steps_match_reference(struct test_ctx *t)
{
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	struct sekv_ctx *c = NULL;
	char err[256];

	T_CHECK(t, fx_doc_make(&d, 600, 2, 4, 1, 64, 41) == 0);
	fx_exact_params(&p);
	p.budget = 0.5;
	p.tau = 0.0f;   /* the budget chooses the zooms */
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, m->n_comp >= 8, "n_comp %d", m->n_comp);
	/* landmark and summary routers, then landmark zooms of at most two
	 * blocks (rows of a span rebuilt, its coarse row for the rest), then
	 * zooms of single rows (zoom_scan) */
	for (int r = 0; r < 4; r++) {
		int part = 0;
		p.router = r == 1 ? SEKV_ROUTER_SUMMARY : SEKV_ROUTER_LANDMARK;
		p.zoom_blocks = r == 2 ? 2 : 0;
		p.zoom_scan = r == 3 ? 4 : 0;
		T_CHECKF(t, sekv_ctx_new(&c, m, &p, 12, 0.125f, err, sizeof err) == 0, "%s", err);
		double e = fx_decode_vs_ref(&d, m, c, 12, 2, 0.125f, 5 + r);
		const struct sekv_stats *st = sekv_ctx_stats(c);
		T_CHECKF(t, e >= 0 && e < 1e-4, "router %d: max diff %g", r, e);
		T_CHECKF(t, st->zoom_total > 0 && st->zoom_total < 12LL * 2 * m->n_comp,
			 "router %d: %lld zooms", r, st->zoom_total);
		for (int z = 0; z < st->n_zoom; z++) {
			const struct sekv_zoom *zz = &st->zoom[z];
			int len = m->span[zz->span].len;
			part += zz->n < len;
			/* a window grows to its span where the budget still allows */
			T_CHECK(t, zz->r0 >= 0 && zz->n > 0 && zz->r0 + zz->n <= len &&
				   (r == 3 || (r == 2 ? zz->n <= 2 * m->lm_len || zz->n == len :
						   zz->n == len)));
		}
		T_CHECKF(t, r < 2 || part > 0, "no span zoomed in part (%d zooms)", st->n_zoom);
		sekv_ctx_free(c);
		c = NULL;
	}
	sekv_mem_free(m);
	fx_doc_free(&d);
}

static void budget_resident_never_exceeds(struct test_ctx *t)
{
	static const double budgets[3] = { 0.06, 0.10, 0.25 };
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL, *small = NULL;
	long long zooms[3];
	double recon[3];
	float alpha[3];
	char err[256];

	T_CHECK(t, fx_doc_make(&d, 3000, 3, 4, 1, 64, 33) == 0);
	/* the build: alpha rises as the budget shrinks */
	for (int b = 0; b < 3; b++) {
		fx_default_params(&p);
		p.budget = budgets[b];
		p.n_recent = 32;
		/* the fixed part's share the budgets here were chosen for (at
		 * 0.3 of 6% the sinks and recent rows alone do not fit) */
		p.static_share = 0.7;
		T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
		T_CHECKF(t, m->static_bytes <= p.static_share * p.budget * m->full_kv_bytes,
			 "static %zu of %zu (%s)", m->static_bytes, m->full_kv_bytes, m->note);
		alpha[b] = m->alpha_used;
		if (b == 0)
			small = m;
		else
			sekv_mem_free(m);
		m = NULL;
	}
	T_CHECKF(t, alpha[0] > alpha[1] && alpha[1] >= alpha[2] && alpha[0] > 1.0f,
		 "alpha_used %g %g %g", alpha[0], alpha[1], alpha[2]);
	/* decode over one memory: never above budget, fewer zooms when smaller */
	for (int b = 0; b < 3; b++) {
		struct sekv_ctx *c = NULL;
		p.budget = budgets[b];
		T_CHECKF(t, sekv_ctx_new(&c, small, &p, 24, 0.125f, err, sizeof err) == 0, "%s", err);
		T_CHECK(t, sekv_ctx_stats(c)->budget_bytes ==
			(size_t)(p.budget * (double)small->full_kv_bytes));
		zooms[b] = run_budget(&d, c, 24, &recon[b]);
		T_CHECKF(t, zooms[b] >= 0, "budget %.2f exceeded: resident %zu > %zu",
			 p.budget, sekv_ctx_stats(c)->resident_bytes,
			 sekv_ctx_stats(c)->budget_bytes);
		T_CHECKF(t, sekv_ctx_stats(c)->peak_resident_bytes >
			 sekv_ctx_stats(c)->budget_bytes * 8 / 10,
			 "budget %.2f barely used", p.budget);
		sekv_ctx_free(c);
	}
	/* zoom counts need not be monotone (a larger budget takes longer spans
	 * first); reconstructed rows are */
	T_CHECKF(t, recon[0] < recon[1] && recon[1] < recon[2] && zooms[0] > 0 &&
		 zooms[0] < zooms[2], "zooms %lld %lld %lld, recon %.0f %.0f %.0f",
		 zooms[0], zooms[1], zooms[2], recon[0], recon[1], recon[2]);
	sekv_mem_free(small);
	fx_doc_free(&d);
}

static void budget_alpha_note_and_merge(struct test_ctx *t)
{
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	char err[256];

	T_CHECK(t, fx_doc_make(&d, 2000, 1, 4, 1, 32, 44) == 0);
	fx_default_params(&p);
	p.budget = 0.08;
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, m->alpha_used > 1.0f && strstr(m->note, "alpha raised 1.00 ->"),
		 "note '%s'", m->note);
	sekv_mem_free(m);
	/* the recent window alone exceeds the static share: merged, reported */
	p.n_recent = 150;
	p.budget = 0.05;
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, strstr(m->note, "budget not met") && strstr(m->note, "merged"),
		 "note '%s'", m->note);
	T_CHECK(t, m->n_span == 1 && m->n_comp == 1);
	sekv_mem_free(m);
	fx_doc_free(&d);
}

/* ---- routing ----------------------------------------------------------- */

/* mass_recall of one step of layer 0 in double: the exact softmax of each
 * query head over the document, minus the mass of compressed spans not
 * zoomed for its KV head in that step, averaged over heads. */
static double ref_mass_recall(const struct fx_doc *d, const struct sekv_mem *m,
			      const struct sekv_ctx *c, const float *q, float q_scale)
{
	double sum = 0;
	int32_t *pos = malloc((size_t)d->n_tok * sizeof *pos);
	uint8_t *held = malloc((size_t)d->n_tok);

	for (int h = 0; h < d->n_head; h++) {
		int kv = h / (d->n_head / d->n_head_kv);
		double *x = malloc((size_t)d->n_tok * sizeof *x), mx = -1e300, tot = 0, lost = 0;
		for (int j = 0; j < d->n_tok; j++) {
			double a = 0;
			for (int i = 0; i < d->d_h; i++)
				a += (double)q[h * d->d_h + i] *
				     quant_f16_to_f32(d->k[0][((size_t)j * d->n_head_kv + kv) * d->d_h + i]);
			x[j] = a * q_scale;
			mx = x[j] > mx ? x[j] : mx;
		}
		for (int j = 0; j < d->n_tok; j++)
			tot += (x[j] = exp(x[j] - mx));
		/* the rows each span holds rebuilt in layer 0 */
		memset(held, 0, (size_t)d->n_tok);
		for (int s = 0; s < m->n_comp; s++) {
			int n = sekv_ctx_zoomed_rows(c, 0, kv, s, pos, d->n_tok);
			for (int i = 0; i < n; i++)
				held[pos[i]] = 1;
			if (n < 0)
				lost = 1e300;
		}
		for (int s = 0; s < m->n_comp; s++) {
			int sp = m->comp_span[s];
			for (int j = m->span[sp].start; j < m->span[sp].start + m->span[sp].len; j++)
				lost += held[j] ? 0 : x[j];
		}
		sum += 1 - lost / tot;
		free(x);
	}
	free(pos);
	free(held);
	return sum / d->n_head;
}

/* The oracle router zooms the span holding a planted match of the query
 * (the summary router's pick need not), its mass_recall equals a double
 * reference and beats the summary router's; the landmark router zooms it
 * too, within 0.9x of the oracle's mass_recall; with every span zoomed
 * mass_recall is 1. */
static void oracle_router_zooms_most_mass(struct test_ctx *t)
{
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	struct sekv_ctx *c[4] = { NULL, NULL, NULL, NULL };
	const uint16_t *keys[8];
	float q[4 * 32], kk[32], vv[32], out[4 * 32];
	double recall[4] = { -1, -1, -1, -1 };
	float target_alpha = -1, other_alpha = 0;
	char err[256];
	int target = -1;

	T_CHECK(t, fx_doc_make(&d, 1500, 1, 4, 1, 32, 77) == 0);
	fx_default_params(&p);
	p.budget = 0.10;
	p.n_recent = 16;
	p.static_share = 0.7;   /* short spans, one of which fits the zoom room */
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, m->n_comp > 8);
	/* the query: a scaled copy of a key in the middle of a short span (one
	 * that fits the zoom allowance) past the middle of the document */
	for (int i = m->n_comp / 2; i < m->n_comp && target < 0; i++)
		if (m->span[m->comp_span[i]].len >= 16 && m->span[m->comp_span[i]].len <= 48)
			target = m->comp_span[i];
	T_CHECK(t, target >= 0);
	int start = m->span[target].start, len = m->span[target].len, j = start + len / 2;
	/* plant a key no other resembles (segmentation reads only surprisal,
	 * so the rebuilt memory has the same spans) and query for it */
	double e[32], nrm = 0;
	fx_rng_seed(99);
	for (int i = 0; i < 32; i++) {
		e[i] = fx_rng_n();
		nrm += e[i] * e[i];
	}
	for (int i = 0; i < 32; i++) {
		e[i] /= sqrt(nrm);
		d.k[0][(size_t)j * 32 + i] = quant_f32_to_f16((float)(40 * e[i]));
		for (int h = 0; h < 4; h++)
			q[h * 32 + i] = (float)(3 * e[i]);
	}
	sekv_mem_free(m);
	m = NULL;
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, target < m->n_span && m->span[target].start == start && m->span[target].len == len &&
		!m->span[target].full);
	for (int i = 0; i < 32; i++)
		kk[i] = vv[i] = 0.1f;
	keys[0] = d.k[0];
	/* 0 oracle, 1 summary, 2 oracle without a cap, 3 landmark */
	for (int r = 0; r < 4; r++) {
		struct sekv_params pr = p;
		pr.router = r == 1 ? SEKV_ROUTER_SUMMARY : r == 3 ? SEKV_ROUTER_LANDMARK
								   : SEKV_ROUTER_ORACLE;
		pr.budget = r == 2 ? 0 : p.budget;   /* 2: no cap, every span zoomed */
		pr.zoom_blocks = 0;  /* routing of whole spans (a mean key dilutes the
		                        planted one 16-fold: its block's window loses
		                        to two others' under this budget) */
		T_CHECKF(t, sekv_ctx_new(&c[r], m, &pr, 8, 0.18f, err, sizeof err) == 0, "%s", err);
		sekv_ctx_set_exact_keys(c[r], keys);
		T_CHECK(t, sekv_attend(c[r], d.layer_id[0], d.n_tok, q, kk, vv, out) == 0);
		const struct sekv_stats *st = sekv_ctx_stats(c[r]);
		T_CHECK(t, st->mass_recall_n == 4);
		for (int h = 0; h < 4; h++)
			T_CHECKF(t, st->mass_recall_lh[h] >= 0 && st->mass_recall_lh[h] <= 1 + 1e-9,
				 "head %d: %g", h, st->mass_recall_lh[h]);
		T_CHECK(t, fabs(st->mass_recall_lh[0] + st->mass_recall_lh[1] + st->mass_recall_lh[2] +
				st->mass_recall_lh[3] - st->mass_recall_sum) < 1e-9);
		recall[r] = st->mass_recall_sum / st->mass_recall_n;
		double ref = ref_mass_recall(&d, m, c[r], q, 0.18f);
		T_CHECKF(t, fabs(recall[r] - ref) < 1e-4, "router %d: mass_recall %.6f, reference %.6f",
			 r, recall[r], ref);
		if (r == 0 || r == 3) {
			int hit = 0;
			for (int z = 0; z < st->n_zoom; z++) {
				hit |= st->zoom[z].span == target;
				if (r == 3 && st->zoom[z].span == target)
					target_alpha = st->zoom[z].alpha;
				else if (r == 3 && st->zoom[z].alpha > other_alpha)
					other_alpha = st->zoom[z].alpha;
			}
			T_CHECKF(t, hit && st->n_zoom < m->n_comp,
				 "router %d: zooms %d of %d spans, target %d missed", r, st->n_zoom,
				 m->n_comp, target);
		}
	}
	T_CHECKF(t, recall[0] >= recall[1] && recall[0] > 0.5 && fabs(recall[2] - 1) < 1e-9,
		 "mass_recall oracle %.4f summary %.4f all zoomed %.6f", recall[0], recall[1], recall[2]);
	/* landmarks: near the oracle, and alpha_S is the span's estimated share
	 * of the attention, highest for the planted key's span, not a saturated 1 */
	T_CHECKF(t, m->n_lm > m->n_comp && recall[3] >= 0.9 * recall[0] &&
		 target_alpha > other_alpha && target_alpha < 1.0f,
		 "landmark: %d blocks, mass_recall %.4f (oracle %.4f), alpha target %.4f, others <= %.4f",
		 m->n_lm, recall[3], recall[0], target_alpha, other_alpha);
	for (int r = 0; r < 4; r++)
		sekv_ctx_free(c[r]);
	sekv_mem_free(m);
	fx_doc_free(&d);
}

/* attn_err (sekv_stats.attn_err_sum / _n) against the fixture's double
 * reference: per query head ||out - ref|| / ||ref||, ref over every
 * document row (fp16) and the step's own row; 0 to rounding when every
 * span is zoomed at full rank, and the same mean as the fixture's when
 * nothing is zoomed (coarse rows stand for the spans). */
static void attn_err_vs_reference(struct test_ctx *t)
{
	const int n_tok = 600, L = 2, nh = 4, nkv = 2, dh = 32;
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	struct sekv_ctx *c = NULL;
	const uint16_t *keys[2], *vals[2];
	float q[4 * 32], k[2 * 32], v[2 * 32], out[4 * 32], ref[32], kr[32], vr[32];
	struct fx_ref_rows r = { 0, malloc((size_t)(n_tok + 1) * dh * 4),
				 malloc((size_t)(n_tok + 1) * dh * 4), malloc((size_t)(n_tok + 1) * 4) };
	char err[256];

	T_CHECK(t, r.k && r.v && r.bias && fx_doc_make(&d, n_tok, L, nh, nkv, dh, 61) == 0);
	fx_exact_params(&p);
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECK(t, m->n_comp > 4);
	for (int l = 0; l < L; l++) {
		keys[l] = d.k[l];
		vals[l] = d.v[l];
	}
	for (int pass = 0; pass < 2; pass++) {
		double want = 0;
		int n = 0;
		/* pass 0: every span zoomed whole; pass 1: none (tau above 1) */
		for (int i = 0; pass == 1 && i < L * nh; i++)
			m->tau[i] = 2.0f;
		T_CHECKF(t, sekv_ctx_new(&c, m, &p, 4, 0.2f, err, sizeof err) == 0, "%s", err);
		sekv_ctx_set_exact_keys(c, keys);
		sekv_ctx_set_exact_values(c, vals);
		fx_rng_seed(5 + pass);
		for (int l = 0; l < L; l++) {
			for (int i = 0; i < nh * dh; i++)
				q[i] = (float)(2 * fx_rng_n());
			for (int i = 0; i < nkv * dh; i++) {
				k[i] = fx_f16r((float)fx_rng_n());
				v[i] = fx_f16r((float)fx_rng_n());
			}
			T_CHECK(t, sekv_attend(c, d.layer_id[l], n_tok, q, k, v, out) == 0);
			for (int h = 0; h < nh; h++) {
				double e2 = 0, r2 = 0;
				r.n = 0;
				for (int pos = 0; pos < n_tok; pos++) {
					for (int j = 0; j < dh; j++) {
						kr[j] = quant_f16_to_f32(d.k[l][((size_t)pos * nkv + h / 2) * dh + j]);
						vr[j] = quant_f16_to_f32(d.v[l][((size_t)pos * nkv + h / 2) * dh + j]);
					}
					fx_ref_add(&r, kr, vr, 0, dh);
				}
				fx_ref_add(&r, k + (h / 2) * dh, v + (h / 2) * dh, 0, dh);
				fx_ref_attend(&r, q + h * dh, dh, 0.2f, ref);
				for (int j = 0; j < dh; j++) {
					e2 += (out[h * dh + j] - ref[j]) * (double)(out[h * dh + j] - ref[j]);
					r2 += (double)ref[j] * ref[j];
				}
				want += sqrt(e2 / r2);
				n++;
			}
		}
		const struct sekv_stats *st = sekv_ctx_stats(c);
		double got = st->attn_err_n ? st->attn_err_sum / (double)st->attn_err_n : -1;
		T_CHECKF(t, st->attn_err_n == n, "terms %lld of %d", st->attn_err_n, n);
		if (pass == 0)
			T_CHECKF(t, got >= 0 && got < 1e-4 && want / n < 1e-4,
				 "all zoomed: attn_err %g (reference %g)", got, want / n);
		else
			T_CHECKF(t, want / n > 1e-2 && fabs(got - want / n) < 1e-4 * (1 + want / n),
				 "none zoomed: attn_err %g, reference %g", got, want / n);
		sekv_ctx_free(c);
		c = NULL;
	}
	free(r.k);
	free(r.v);
	free(r.bias);
	sekv_mem_free(m);
	fx_doc_free(&d);
}

static int cmp_desc(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x < y) - (x > y);
}

/* mass_oracle (sekv_stats) against a double reference that sorts: per
 * layer and KV head, the R rows with the most exact mass summed over the
 * group's query heads (each head's softmax over the document), R = (budget
 * - the tail rows of every layer) / (n_layer * one device row); each query
 * head's share of its mass on those rows, averaged. */
static void mass_oracle_vs_sorted_reference(struct test_ctx *t)
{
	const int n_tok = 1200, L = 2, nh = 4, nkv = 2, dh = 32, grp = nh / nkv;
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	struct sekv_ctx *c = NULL;
	const uint16_t *keys[2];
	float q[4 * 32], k[2 * 32], v[2 * 32], out[4 * 32];
	double *x = malloc((size_t)nh * n_tok * sizeof *x), *pm = malloc((size_t)n_tok * sizeof *pm),
	       *srt = malloc((size_t)n_tok * sizeof *srt), want = 0;
	char err[256];
	int n = 0;

	T_CHECK(t, x && pm && srt && fx_doc_make(&d, n_tok, L, nh, nkv, dh, 91) == 0);
	fx_default_params(&p);
	p.budget = 0.10;
	p.n_recent = 16;
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, sekv_ctx_new(&c, m, &p, 4, 0.2f, err, sizeof err) == 0, "%s", err);
	for (int l = 0; l < L; l++)
		keys[l] = d.k[l];
	sekv_ctx_set_exact_keys(c, keys);
	size_t row = sekv_dev_rows_bytes(1, 1, nkv, dh, sekv_mem_dev_rows(m));
	size_t budget = sekv_ctx_stats(c)->budget_bytes;
	/* one tail row per layer at this step */
	long r = ((long)budget - (long)(L * row)) / (long)(L * row);
	T_CHECKF(t, r > 8 && r < n_tok / 4, "R %ld rows of %d", r, n_tok);
	fx_rng_seed(17);
	for (int l = 0; l < L; l++) {
		for (int i = 0; i < nh * dh; i++)
			q[i] = (float)(3 * fx_rng_n());
		for (int i = 0; i < nkv * dh; i++) {
			k[i] = fx_f16r((float)fx_rng_n());
			v[i] = fx_f16r((float)fx_rng_n());
		}
		T_CHECK(t, sekv_attend(c, d.layer_id[l], n_tok, q, k, v, out) == 0);
		for (int h = 0; h < nh; h++) {
			double mx = -1e300, tot = 0, *xh = x + (size_t)h * n_tok;
			for (int j = 0; j < n_tok; j++) {
				double a = 0;
				for (int i = 0; i < dh; i++)
					a += (double)q[h * dh + i] *
					     quant_f16_to_f32(d.k[l][((size_t)j * nkv + h / grp) * dh + i]);
				xh[j] = a * 0.2;
				mx = xh[j] > mx ? xh[j] : mx;
			}
			for (int j = 0; j < n_tok; j++)
				tot += (xh[j] = exp(xh[j] - mx));
			for (int j = 0; j < n_tok; j++)
				xh[j] /= tot;
		}
		for (int kv = 0; kv < nkv; kv++) {
			for (int j = 0; j < n_tok; j++) {
				pm[j] = 0;
				for (int g = 0; g < grp; g++)
					pm[j] += x[(size_t)(kv * grp + g) * n_tok + j];
				srt[j] = pm[j];
			}
			qsort(srt, (size_t)n_tok, sizeof *srt, cmp_desc);
			for (int g = 0; g < grp; g++) {
				double got = 0;
				for (int j = 0; j < n_tok; j++)
					got += pm[j] >= srt[r - 1] ? x[(size_t)(kv * grp + g) * n_tok + j] : 0;
				want += got;
				n++;
			}
		}
	}
	const struct sekv_stats *st = sekv_ctx_stats(c);
	double got = st->mass_oracle_n ? st->mass_oracle_sum / (double)st->mass_oracle_n : -1;
	T_CHECKF(t, st->mass_oracle_n == n && want / n > 0.05 && want / n < 0.95 &&
		 fabs(got - want / n) < 1e-4,
		 "mass_oracle %g (%lld terms), reference %g (%d)", got, st->mass_oracle_n, want / n, n);
	sekv_ctx_free(c);
	sekv_mem_free(m);
	fx_doc_free(&d);
	free(x);
	free(pm);
	free(srt);
}

static int cmp_desc_f(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x < y) - (x > y);
}

/* Zooms of single rows (sekv_params.zoom_scan) scanning every compressed
 * row: the rows kept are the best by exact score (one query head, so the
 * ranking is the score's; int8 scan keys may swap near-ties, so a margin
 * of 3 ranks), the planted matches among them, their count what the zoom
 * budget holds; mass_recall equals a double reference over the rows kept
 * and beats zooms of landmark blocks at the same budget. */
static void zoom_rows_keep_the_best_rows(struct test_ctx *t)
{
	const int n_tok = 1500, dh = 32;
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	struct sekv_ctx *c = NULL;
	const uint16_t *keys[1];
	float q[32], kk[32], vv[32], out[32];
	double recall[2] = { -1, -1 }, e[32], nrm = 0;
	double *sc = malloc((size_t)n_tok * sizeof *sc), *srt = malloc((size_t)n_tok * sizeof *srt);
	int32_t *pos = malloc((size_t)n_tok * sizeof *pos);
	int plant[5] = { 150, 420, 700, 701, 1200 }, comp_tok = 0;
	char err[256];

	T_CHECK(t, sc && srt && pos && fx_doc_make(&d, n_tok, 1, 1, 1, dh, 63) == 0);
	fx_default_params(&p);
	p.budget = 0.10;
	p.n_recent = 16;
	p.rank_energy = 0;    /* every component: rebuilt keys are the rows */
	p.r_max = p.r_use = dh;
	p.factor_f16 = 0;
	fx_rng_seed(5);
	for (int i = 0; i < dh; i++) {
		e[i] = fx_rng_n();
		nrm += e[i] * e[i];
	}
	for (int k = 0; k < 5; k++)
		for (int i = 0; i < dh; i++)
			d.k[0][(size_t)plant[k] * dh + i] = quant_f32_to_f16((float)((30 - k) * e[i] / sqrt(nrm)));
	for (int i = 0; i < dh; i++) {
		q[i] = (float)(2 * e[i] / sqrt(nrm));
		kk[i] = vv[i] = 0.1f;
	}
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	keys[0] = d.k[0];
	for (int s = 0; s < m->n_comp; s++)
		comp_tok += m->span[m->comp_span[s]].len;
	for (int r = 0; r < 2; r++) {
		struct sekv_params pr = p;
		pr.zoom_scan = r == 0 ? 64 : 0;   /* 64 x the zoom rows: every row scanned */
		T_CHECKF(t, sekv_ctx_new(&c, m, &pr, 4, 0.18f, err, sizeof err) == 0, "%s", err);
		sekv_ctx_set_exact_keys(c, keys);
		T_CHECK(t, sekv_attend(c, d.layer_id[0], n_tok, q, kk, vv, out) == 0);
		const struct sekv_stats *st = sekv_ctx_stats(c);
		recall[r] = st->mass_recall_n ? st->mass_recall_sum / st->mass_recall_n : -1;
		double ref = ref_mass_recall(&d, m, c, q, 0.18f);
		T_CHECKF(t, fabs(recall[r] - ref) < 1e-4, "zoom_scan %d: mass_recall %.6f, reference %.6f",
			 pr.zoom_scan, recall[r], ref);
		if (r == 1)
			break;
		/* exact scores of the compressed rows, the kept ones marked */
		int n = 0, kept = 0, low = 0, miss = 0;
		for (int s = 0; s < m->n_comp; s++) {
			const struct sekv_span *sp = &m->span[m->comp_span[s]];
			for (int j = sp->start; j < sp->start + sp->len; j++) {
				double a = 0;
				for (int i = 0; i < dh; i++)
					a += (double)q[i] * quant_f16_to_f32(d.k[0][(size_t)j * dh + i]);
				sc[j] = a;
				srt[n++] = a;
			}
		}
		qsort(srt, (size_t)n, sizeof *srt, cmp_desc_f);
		for (int s = 0; s < m->n_comp; s++)
			kept += sekv_ctx_zoomed_rows(c, 0, 0, s, pos, n_tok);
		T_CHECKF(t, kept > 8 && kept < comp_tok / 4 &&
			 (size_t)kept * sekv_dev_rows_bytes(1, 1, 1, dh, 0) == st->recon_bytes,
			 "%d rows kept of %d, %zu bytes", kept, comp_tok, st->recon_bytes);
		double hi = srt[kept - 1 - 3], lo = srt[kept + 3];
		for (int s = 0; s < m->n_comp; s++) {
			const struct sekv_span *sp = &m->span[m->comp_span[s]];
			int nk = sekv_ctx_zoomed_rows(c, 0, 0, s, pos, n_tok);
			uint8_t in[4096] = { 0 };
			for (int i = 0; i < nk; i++) {
				T_CHECK(t, pos[i] >= sp->start && pos[i] < sp->start + sp->len &&
					   (i == 0 || pos[i] > pos[i - 1]));
				in[pos[i] - sp->start] = 1;
				low += sc[pos[i]] < lo;
			}
			for (int j = sp->start; j < sp->start + sp->len; j++)
				miss += sc[j] > hi && !in[j - sp->start];
		}
		T_CHECKF(t, low == 0 && miss == 0, "%d kept below rank %d, %d above rank %d not kept",
			 low, kept + 3, miss, kept - 3);
		/* a planted row in a compressed span is kept (one outside is exact) */
		int n_comp_plant = 0;
		for (int k = 0; k < 5; k++) {
			int found = 0, in_comp = 0;
			for (int s = 0; s < m->n_comp; s++) {
				const struct sekv_span *sp = &m->span[m->comp_span[s]];
				int nk = sekv_ctx_zoomed_rows(c, 0, 0, s, pos, n_tok);
				in_comp |= plant[k] >= sp->start && plant[k] < sp->start + sp->len;
				for (int i = 0; i < nk; i++)
					found |= pos[i] == plant[k];
			}
			n_comp_plant += in_comp;
			T_CHECKF(t, found || !in_comp, "planted row %d not kept", plant[k]);
		}
		T_CHECKF(t, n_comp_plant >= 3, "%d planted rows in compressed spans", n_comp_plant);
		sekv_ctx_free(c);
		c = NULL;
	}
	T_CHECKF(t, recall[0] > recall[1] + 0.02, "mass_recall rows %.4f, blocks %.4f", recall[0],
		 recall[1]);
	/* damaged key factors (NaN scales) neither take the budget nor pass it */
	{
		struct sekv_params pr = p;
		int n_bad = 0;
		pr.zoom_scan = 64;
		for (int s = 0; s < m->n_comp; s += 2)
			if (m->fac[(size_t)s * 2].s) {
				m->fac[(size_t)s * 2].s[0] = NAN;
				n_bad++;
			}
		T_CHECKF(t, sekv_ctx_new(&c, m, &pr, 4, 0.18f, err, sizeof err) == 0, "%s", err);
		int arc = sekv_attend(c, d.layer_id[0], n_tok, q, kk, vv, out);
		T_CHECKF(t, n_bad >= 3 && arc == 0, "%d damaged factors, sekv_attend %d", n_bad, arc);
		const struct sekv_stats *st = sekv_ctx_stats(c);
		T_CHECKF(t, st->recon_bytes > 0 && st->resident_bytes <= st->budget_bytes,
			 "rebuilt %zu, resident %zu of %zu", st->recon_bytes, st->resident_bytes,
			 st->budget_bytes);
		sekv_ctx_free(c);
		c = NULL;
	}
	sekv_ctx_free(c);
	sekv_mem_free(m);
	fx_doc_free(&d);
	free(sc);
	free(srt);
	free(pos);
}

/* Row zooms (zoom_scan) around exact question turns: the turn reads every
 * span exactly, the answer after it holds single rows that are exactly
 * the rows it reports (sekv_ctx_zoomed_rows; fp32 full-rank factors) and
 * stays within the budget, and a second question turn, after the row
 * zooms rewrote the region, is exact again. */
static void zoom_rows_between_question_turns(struct test_ctx *t)
{
	struct fx_doc d;
	struct sekv_params p;
	struct sekv_mem *m = NULL;
	struct sekv_ctx *c = NULL;
	const struct sekv_stats *st;
	char err[256];
	double e;

	T_CHECK(t, fx_doc_make(&d, 1200, 2, 4, 2, 64, 43) == 0);
	fx_exact_params(&p);
	p.n_recent = 32;
	p.budget = 0.3;
	p.static_share = 0.5;
	p.tau = 0.0f;
	p.zoom_scan = 4;
	p.question_exact = 1;
	T_CHECKF(t, fx_doc_build(&m, &d, &p, err, sizeof err) == 0, "%s", err);
	T_CHECKF(t, sekv_ctx_new(&c, m, &p, 16, 0.125f, err, sizeof err) == 0, "%s", err);
	st = sekv_ctx_stats(c);
	for (int turn = 0; turn < 2; turn++) {
		sekv_ctx_question(c, 1);
		e = fx_decode_vs_ref(&d, m, c, 3, 0, 0.125f, 11 + turn);
		T_CHECKF(t, e >= 0 && e < 1e-4, "turn %d: question vs exact attention: %g", turn, e);
		sekv_ctx_question(c, 0);
		e = fx_decode_vs_ref(&d, m, c, 3, 2, 0.125f, 21 + turn);
		T_CHECKF(t, e >= 0 && e < 1e-4 && st->recon_bytes > 0 &&
			 st->peak_resident_bytes <= st->budget_bytes,
			 "turn %d: answer vs its rows: %g, rebuilt %zu, peak %zu of %zu", turn, e,
			 st->recon_bytes, st->peak_resident_bytes, st->budget_bytes);
		/* and those rows are not every row: the budget binds */
		e = fx_decode_vs_ref(&d, m, c, 1, 0, 0.125f, 31 + turn);
		T_CHECKF(t, e > 1e-3, "turn %d: the answer matched exact attention (%g)", turn, e);
	}
	sekv_ctx_free(c);
	sekv_mem_free(m);
	fx_doc_free(&d);
}

const struct test_case test_sekv_budget[] = {
	{ "sekv_question_turn_exact_within_budget", question_turn_exact_within_budget },
	{ "sekv_evict_tail_forgets_oldest_rows", evict_tail_forgets_oldest_rows },
	{ "sekv_zoom_changes_between_steps_match_reference", zoom_changes_between_steps_match_reference },
	{ "sekv_budget_resident_never_exceeds", budget_resident_never_exceeds },
	{ "sekv_budget_alpha_note_and_merge", budget_alpha_note_and_merge },
	{ "sekv_oracle_and_landmark_routers_zoom_most_mass", oracle_router_zooms_most_mass },
	{ "sekv_attn_err_vs_reference", attn_err_vs_reference },
	{ "sekv_mass_oracle_vs_sorted_reference", mass_oracle_vs_sorted_reference },
	{ "sekv_zoom_rows_keep_the_best_rows", zoom_rows_keep_the_best_rows },
	{ "sekv_zoom_rows_between_question_turns", zoom_rows_between_question_turns },
	{ NULL, NULL },
};
