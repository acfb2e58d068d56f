/* train.c - the router student's data, loss, gradients and optimiser
 * (train.h): teacher cover labels, the zoom BCE against them or the soft
 * BCE against each span's attention share, and the budget loss, of z_S =
 * a x_S + b + <W q, kappa_S>/sqrt(d') with its hand-written gradient
 * (checked against finite differences in tests/test_train.c), AdamW with
 * warmup and cosine decay, and tau calibration.
 * Invariant: everything here is single-threaded arithmetic in a fixed
 * order, so a seed reproduces a run bit for bit. Files: train_io.c.
 */
#include "engine/train/train.h"
#include "engine/base/err.h"
#include "engine/quant/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define D SEKV_D_ROUTE

/* ---- labels ------------------------------------------------------------ */

static const double *g_sort_mass;

static int by_mass(const void *a, const void *b)
{
	int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
	if (g_sort_mass[i] != g_sort_mass[j])
		return g_sort_mass[i] > g_sort_mass[j] ? -1 : 1;
	return (i > j) - (i < j);
}

int train_label(const double *mass, int n, double rho, uint8_t *y, int32_t *order)
{
	double total = 0, run = 0;
	int k = 0;

	for (int i = 0; i < n; i++) {
		y[i] = 0;
		order[i] = i;
		total += mass[i] > 0 ? mass[i] : 0;
	}
	if (total <= 0)
		return 0;
	g_sort_mass = mass;
	qsort(order, (size_t)n, sizeof *order, by_mass);
	while (k < n && run < rho * total) {
		run += mass[order[k]] > 0 ? mass[order[k]] : 0;
		y[order[k++]] = 1;
	}
	return k;
}

/* ---- data -------------------------------------------------------------- */

void train_set_init(struct train_set *t, int n_layer, int n_head, int n_head_kv, int d_h)
{
	memset(t, 0, sizeof *t);
	t->n_layer = n_layer;
	t->n_head = n_head;
	t->n_head_kv = n_head_kv;
	t->d_h = d_h;
}

void train_set_free(struct train_set *t)
{
	if (!t)
		return;
	for (int i = 0; i < t->n_doc; i++) {
		free(t->doc[i].len);
		free(t->doc[i].k_bar);
	}
	free(t->doc);
	free(t->s);
	free(t->q);
	free(t->x);
	free(t->mass);
	free(t->y);
	train_set_init(t, t->n_layer, t->n_head, t->n_head_kv, t->d_h);
}

static int grow(void **p, size_t es, int64_t need, int64_t *cap)
{
	int64_t c = *cap ? *cap : 64;
	void *n;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	if (!(n = realloc(*p, (size_t)c * es)))
		return SEKV_ENOMEM;
	*p = n;
	*cap = c;
	return 0;
}

int train_set_add_doc(struct train_set *t, const struct sekv_mem *m, int *doc)
{
	struct train_doc *d;
	size_t row = (size_t)t->n_head_kv * t->d_h;
	int64_t cap = t->cap_doc;

	if (m->n_layer != t->n_layer || m->n_head != t->n_head || m->n_head_kv != t->n_head_kv ||
	    m->d_h != t->d_h)
		return SEKV_EINVAL;
	if (grow((void **)&t->doc, sizeof *t->doc, t->n_doc + 1, &cap))
		return SEKV_ENOMEM;
	t->cap_doc = (int)cap;
	d = &t->doc[t->n_doc];
	d->n_comp = m->n_comp;
	d->len = malloc(((size_t)m->n_comp + 1) * sizeof *d->len);
	d->k_bar = malloc(((size_t)m->n_layer * m->n_comp * row + 1) * sizeof *d->k_bar);
	if (!d->len || !d->k_bar) {
		free(d->len);
		free(d->k_bar);
		return SEKV_ENOMEM;
	}
	for (int s = 0; s < m->n_comp; s++)
		d->len[s] = m->span[m->comp_span[s]].len;
	quant_f16_to_f32_row(m->k_bar, d->k_bar, (size_t)m->n_layer * m->n_comp * row);
	*doc = t->n_doc++;
	return 0;
}

int train_set_add_step(struct train_set *t, int doc, const struct sekv_route_view *v,
		       const float *q, double rho, double w_min)
{
	int n = v->n_comp, added = 0, rc = 0;
	double *ms = NULL;
	int32_t *order = NULL;

	if (doc < 0 || doc >= t->n_doc || !v->x || !v->mass || v->layer < 0 ||
	    v->layer >= t->n_layer || v->n_head != t->n_head || n != t->doc[doc].n_comp)
		return SEKV_EINVAL;
	if (n == 0)
		return 0;
	ms = malloc((size_t)n * sizeof *ms);
	order = malloc((size_t)n * sizeof *order);
	if (!ms || !order) {
		rc = SEKV_ENOMEM;
		goto out;
	}
	for (int h = 0; h < t->n_head; h++) {
		const double *mh = v->mass + (size_t)h * n;
		double comp = 0, tot = v->total[h];
		int64_t c1 = t->cap_sample, c2 = t->cap_sample, cs = t->cap_span;
		for (int s = 0; s < n; s++)
			comp += mh[s];
		if (!(comp > 0) || !(tot > 0) || comp / tot < w_min)
			continue;
		if (grow((void **)&t->s, sizeof *t->s, t->n_sample + 1, &c1) ||
		    grow((void **)&t->q, (size_t)t->d_h * sizeof *t->q, t->n_sample + 1, &c2)) {
			rc = SEKV_ENOMEM;
			goto out;
		}
		t->cap_sample = (int)(c1 < c2 ? c1 : c2);
		cs = t->cap_span;
		if (grow((void **)&t->x, sizeof *t->x, t->n_span + n, &cs)) {
			rc = SEKV_ENOMEM;
			goto out;
		}
		cs = t->cap_span;
		if (grow((void **)&t->mass, sizeof *t->mass, t->n_span + n, &cs)) {
			rc = SEKV_ENOMEM;
			goto out;
		}
		cs = t->cap_span;
		if (grow((void **)&t->y, sizeof *t->y, t->n_span + n, &cs)) {
			rc = SEKV_ENOMEM;
			goto out;
		}
		t->cap_span = cs;
		struct train_sample *sm = &t->s[t->n_sample];
		*sm = (struct train_sample){ doc, v->layer, h, n, t->n_span, (float)(comp / tot) };
		memcpy(t->q + (size_t)t->n_sample * t->d_h, q + (size_t)h * t->d_h,
		       (size_t)t->d_h * sizeof *t->q);
		for (int s = 0; s < n; s++) {
			t->x[t->n_span + s] = v->x[(size_t)h * n + s];
			t->mass[t->n_span + s] = (float)(mh[s] / comp);
			ms[s] = mh[s];
		}
		train_label(ms, n, rho, t->y + t->n_span, order);
		t->n_span += n;
		t->n_sample++;
		added++;
	}
out:
	free(ms);
	free(order);
	return rc ? rc : added;
}

/* ---- parameters -------------------------------------------------------- */

void train_default_hyper(struct train_hyper *h)
{
	h->target = TRAIN_TARGET_COVER;
	h->pos_weight = 10.0f;
	h->lambda_budget = 0.05f;
	h->train_w = 1;
}

int train_params_new(struct train_params *p, int n_layer, int n_head, int d_h,
		     const float *w_init, float w_scale, int with_w)
{
	size_t lh = (size_t)n_layer * n_head, nw = lh * D * d_h;

	memset(p, 0, sizeof *p);
	p->n = 3 * lh + nw;
	if (!(p->v = calloc(p->n, sizeof *p->v)))
		return SEKV_ENOMEM;
	p->rw = (struct sekv_router_w){ n_layer, n_head, d_h, p->v, p->v + lh, p->v + 2 * lh,
					with_w ? p->v + 3 * lh : NULL };
	for (size_t i = 0; i < lh; i++)
		p->rw.a[i] = 1.0f;
	for (size_t i = 0; w_init && i < nw; i++)
		p->v[3 * lh + i] = w_init[i] * w_scale;
	return 0;
}

void train_params_free(struct train_params *p)
{
	if (p) {
		free(p->v);
		memset(p, 0, sizeof *p);
	}
}

/* ---- loss and gradient ------------------------------------------------- */

/* log sigmoid(z), stably. */
static double log_sig(double z)
{
	return z >= 0 ? -log1p(exp(-z)) : z - log1p(exp(z));
}

/* x log x, 0 at x = 0. */
static double xlogx(double x)
{
	return x > 0 ? x * log(x) : 0.0;
}

/* Mass [n] on the k spans of largest z [n] (ties: lower index first);
 * order [n] is scratch. */
static double top_k_mass(const double *z, const float *mass, int n, int k, int32_t *order)
{
	double got = 0;

	for (int i = 0; i < n; i++)
		order[i] = i;
	g_sort_mass = z;
	qsort(order, (size_t)n, sizeof *order, by_mass);
	for (int i = 0; i < k && i < n; i++)
		got += mass[order[i]];
	return got;
}

/* Per doc: kappa [L][H][n_comp][D] = W k_bar normalised, and the norms
 * [L][H][n_comp] before normalising. */
static void doc_kappa(const struct train_set *t, const struct train_doc *d, const float *w,
		      float *kap, float *nrm)
{
	int dh = t->d_h, grp = t->n_head / t->n_head_kv;

	for (int l = 0; l < t->n_layer; l++)
		for (int h = 0; h < t->n_head; h++) {
			size_t lh = (size_t)l * t->n_head + h;
			const float *wh = w + lh * D * dh;
			for (int s = 0; s < d->n_comp; s++) {
				const float *kb = d->k_bar + (((size_t)l * d->n_comp + s) * t->n_head_kv +
							      h / grp) * dh;
				float *kp = kap + (lh * d->n_comp + s) * D;
				double n2 = 0;
				for (int i = 0; i < D; i++) {
					double acc = 0;
					for (int j = 0; j < dh; j++)
						acc += (double)wh[(size_t)i * dh + j] * kb[j];
					kp[i] = (float)acc;
					n2 += acc * acc;
				}
				double nn = sqrt(n2);
				nrm[lh * d->n_comp + s] = (float)nn;
				for (int i = 0; nn > 0 && i < D; i++)
					kp[i] = (float)(kp[i] / nn);
			}
		}
}

int train_loss_eval(const struct train_set *t, const struct train_params *p,
		    const struct train_hyper *hy, const int32_t *idx, int n, float *grad,
		    struct train_loss *out)
{
	size_t lh_n = (size_t)t->n_layer * t->n_head;
	int dh = t->d_h, use_w = p->rw.w != NULL, grp = t->n_head / t->n_head_kv;
	const float *w = p->v + 3 * lh_n;
	float *kap = NULL, *nrm = NULL, *gk = NULL;
	double *zs = NULL;
	int32_t *order = NULL;
	size_t cap_doc = 0;
	double inv = 1.0 / sqrt((double)D), w_sum = 0, l_bce = 0, l_bud = 0, rec = 0;
	int rc = 0, share = hy->target == TRAIN_TARGET_SHARE, max_comp = 1;

	memset(out, 0, sizeof *out);
	for (int i = 0; i < n; i++) {
		if (idx[i] < 0 || idx[i] >= t->n_sample)
			return SEKV_EINVAL;
		w_sum += t->s[idx[i]].w;
	}
	if (grad)
		memset(grad, 0, p->n * sizeof *grad);
	if (n == 0 || w_sum <= 0)
		return 0;
	for (int i = 0; i < n; i++) {
		size_t need = lh_n * (size_t)t->doc[t->s[idx[i]].doc].n_comp;
		cap_doc = need > cap_doc ? need : cap_doc;
		max_comp = t->s[idx[i]].n_comp > max_comp ? t->s[idx[i]].n_comp : max_comp;
	}
	zs = malloc((size_t)max_comp * sizeof *zs);
	order = malloc((size_t)max_comp * sizeof *order);
	if (!zs || !order) {
		rc = SEKV_ENOMEM;
		goto out;
	}
	if (use_w) {
		kap = malloc((cap_doc * D + 1) * sizeof *kap);
		nrm = malloc((cap_doc + 1) * sizeof *nrm);
		gk = malloc((cap_doc * D + 1) * sizeof *gk);
		if (!kap || !nrm || !gk) {
			rc = SEKV_ENOMEM;
			goto out;
		}
	}
	/* samples in runs of one doc: kappa (and its gradient) once per run */
	for (int i0 = 0; i0 < n;) {
		int doc = t->s[idx[i0]].doc, i1 = i0;
		const struct train_doc *d = &t->doc[doc];
		while (i1 < n && t->s[idx[i1]].doc == doc)
			i1++;
		if (use_w) {
			doc_kappa(t, d, w, kap, nrm);
			memset(gk, 0, lh_n * d->n_comp * D * sizeof *gk);
		}
		for (int i = i0; i < i1; i++) {
			const struct train_sample *sm = &t->s[idx[i]];
			size_t lh = (size_t)sm->layer * t->n_head + sm->head;
			const float *q = t->q + (size_t)idx[i] * dh, *x = t->x + sm->off;
			const uint8_t *y = t->y + sm->off;
			const float *m = t->mass + sm->off;
			double u[D], gu[D], a = p->rw.a[lh], b = p->rw.b[lh], ga = 0, gb = 0, tot_len = 0;
			/* share: the target carries the head's share, so samples weigh alike */
			double wt = share ? 1.0 / n : sm->w / w_sum, bce = 0, bud = 0, cover = 0;
			int ns = sm->n_comp, k_cover = 0;
			for (int s = 0; s < ns; s++)
				tot_len += d->len[s];
			for (int k = 0; k < D; k++) {
				double acc = 0;
				for (int j = 0; use_w && j < dh; j++)
					acc += (double)w[(lh * D + k) * dh + j] * q[j];
				u[k] = acc;
				gu[k] = 0;
			}
			for (int s = 0; s < ns; s++) {
				const float *kp = use_w ? kap + (lh * d->n_comp + s) * D : NULL;
				double f = 0, z, pz, g;
				/* share: the span's share of the head's document attention */
				double pt = share ? fmin(fmax((double)sm->w * m[s], 0.0), 1.0) : 0.0;
				for (int k = 0; use_w && k < D; k++)
					f += u[k] * kp[k];
				z = a * x[s] + b + f * inv;
				pz = 1.0 / (1.0 + exp(-z));
				zs[s] = z;
				k_cover += y[s];
				if (share) {
					/* KL of Bernoullis = cross-entropy - entropy of pt */
					bce += xlogx(pt) + xlogx(1.0 - pt) - pt * log_sig(z) -
					       (1.0 - pt) * log_sig(-z);
				} else {
					bce -= y[s] ? hy->pos_weight * log_sig(z) : log_sig(-z);
				}
				bud += pz * d->len[s] / tot_len;
				/* dL/dz of this sample's target and budget terms */
				g = share ? pz - pt : (y[s] ? hy->pos_weight * (pz - 1.0) : pz) / ns;
				g = wt * (g + hy->lambda_budget * pz * (1.0 - pz) * d->len[s] / tot_len);
				ga += g * x[s];
				gb += g;
				if (use_w && grad && hy->train_w) {
					float *gks = gk + (lh * d->n_comp + s) * D;
					for (int k = 0; k < D; k++) {
						gu[k] += g * inv * kp[k];
						gks[k] += (float)(g * inv * u[k]);
					}
				}
			}
			l_bce += wt * (share ? bce : bce / ns);
			l_bud += wt * hy->lambda_budget * bud;
			for (int s = 0; s < ns; s++)
				cover += y[s] ? m[s] : 0;
			if (cover > 0)
				rec += sm->w / w_sum * top_k_mass(zs, m, ns, k_cover, order) / cover;
			if (!grad)
				continue;
			grad[lh] += (float)ga;
			grad[lh_n + lh] += (float)gb;
			for (int k = 0; use_w && hy->train_w && k < D; k++) {
				float *gw = grad + 3 * lh_n + (lh * D + k) * dh;
				for (int j = 0; j < dh; j++)
					gw[j] += (float)(gu[k] * q[j]);
			}
		}
		/* through kappa = v / |v|, v = W k_bar: dv = (gk - (gk.kappa) kappa) / |v| */
		for (size_t lh = 0; use_w && grad && hy->train_w && lh < lh_n; lh++)
			for (int s = 0; s < d->n_comp; s++) {
				const float *kp = kap + (lh * d->n_comp + s) * D, *gks = gk + (lh * d->n_comp + s) * D;
				const float *kb = d->k_bar + (((size_t)(lh / t->n_head) * d->n_comp + s) *
							      t->n_head_kv + (lh % t->n_head) / grp) * dh;
				double dot = 0, nn = nrm[lh * d->n_comp + s];
				if (nn <= 0)
					continue;
				for (int k = 0; k < D; k++)
					dot += (double)gks[k] * kp[k];
				for (int k = 0; k < D; k++) {
					double dv = (gks[k] - dot * kp[k]) / nn;
					float *gw = grad + 3 * lh_n + (lh * D + k) * dh;
					if (dv == 0)
						continue;
					for (int j = 0; j < dh; j++)
						gw[j] += (float)(dv * kb[j]);
				}
			}
		i0 = i1;
	}
	out->bce = l_bce;
	out->budget = l_bud;
	out->total = l_bce + l_bud;
	out->pos_recall = rec;
	out->w_sum = w_sum;
out:
	free(kap);
	free(nrm);
	free(gk);
	free(zs);
	free(order);
	return rc;
}

/* ---- optimiser --------------------------------------------------------- */

int train_adam_new(struct train_adam *a, size_t n, float lr, int warmup, int total)
{
	memset(a, 0, sizeof *a);
	a->lr = lr;
	a->lr_min = lr * 0.05f;
	a->beta1 = 0.9f;
	a->beta2 = 0.999f;
	a->eps = 1e-8f;
	a->weight_decay = 0.01f;
	a->warmup = warmup;
	a->total = total;
	a->n = n;
	a->m = calloc(n + 1, sizeof *a->m);
	a->v = calloc(n + 1, sizeof *a->v);
	if (!a->m || !a->v) {
		train_adam_free(a);
		return SEKV_ENOMEM;
	}
	return 0;
}

void train_adam_free(struct train_adam *a)
{
	if (!a)
		return;
	free(a->m);
	free(a->v);
	a->m = a->v = NULL;
}

float train_lr_at(const struct train_adam *a, long s)
{
	double prog;

	if (s < a->warmup)
		return a->lr * (float)(s + 1) / (float)a->warmup;
	if (a->total <= a->warmup)
		return a->lr_min;
	prog = (double)(s - a->warmup) / (double)(a->total - a->warmup);
	prog = prog > 1 ? 1 : prog;
	return (float)(a->lr_min + (a->lr - a->lr_min) * 0.5 * (1.0 + cos(M_PI * prog)));
}

void train_adam_step(struct train_adam *a, struct train_params *p, const float *g, size_t w0)
{
	float lr = train_lr_at(a, a->step);
	double b1t = 1.0 - pow(a->beta1, (double)(a->step + 1));
	double b2t = 1.0 - pow(a->beta2, (double)(a->step + 1));

	for (size_t i = 0; i < a->n; i++) {
		a->m[i] = a->beta1 * a->m[i] + (1.0f - a->beta1) * g[i];
		a->v[i] = a->beta2 * a->v[i] + (1.0f - a->beta2) * g[i] * g[i];
		double mh = a->m[i] / b1t, vh = a->v[i] / b2t;
		if (i >= w0)
			p->v[i] -= lr * a->weight_decay * p->v[i];
		p->v[i] -= (float)(lr * mh / (sqrt(vh) + a->eps));
	}
	a->step++;
}

uint64_t train_rand(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* ---- tau --------------------------------------------------------------- */

struct zm {
	float z, m;
};

static int by_z(const void *a, const void *b)
{
	const struct zm *x = a, *y = b;
	return (x->z > y->z) - (x->z < y->z);
}

/* z_S of every span of sample i (kap, from doc_kappa of its doc when p
 * has W) into z [n_comp]. */
static void sample_z(const struct train_set *t, const struct train_params *p, int i,
		     const float *kap, float *z)
{
	const struct train_sample *sm = &t->s[i];
	size_t lh = (size_t)sm->layer * t->n_head + sm->head;
	const float *q = t->q + (size_t)i * t->d_h;
	double u[D] = { 0 }, inv = 1.0 / sqrt((double)D);

	for (int c = 0; p->rw.w && c < D; c++)
		for (int j = 0; j < t->d_h; j++)
			u[c] += (double)p->rw.w[(lh * D + c) * t->d_h + j] * q[j];
	for (int s = 0; s < sm->n_comp; s++) {
		double f = 0;
		for (int c = 0; p->rw.w && c < D; c++)
			f += u[c] * kap[(lh * sm->n_comp + s) * D + c];
		z[s] = (float)(p->rw.a[lh] * t->x[sm->off + s] + p->rw.b[lh] + f * inv);
	}
}

int train_calibrate_tau(const struct train_set *t, struct train_params *p, double recall)
{
	size_t lh_n = (size_t)t->n_layer * t->n_head, cap_doc = 1;
	int64_t *cnt = calloc(lh_n + 1, sizeof *cnt), *at = calloc(lh_n + 1, sizeof *at);
	struct zm **v = calloc(lh_n + 1, sizeof *v);
	float *kap = NULL, *nrm = NULL, *z = NULL;
	int rc = 0, max_comp = 1;

	if (!cnt || !at || !v) {
		rc = SEKV_ENOMEM;
		goto out;
	}
	for (int d = 0; d < t->n_doc; d++) {
		max_comp = t->doc[d].n_comp > max_comp ? t->doc[d].n_comp : max_comp;
		cap_doc = lh_n * (size_t)max_comp;
	}
	for (int i = 0; i < t->n_sample; i++)
		cnt[(size_t)t->s[i].layer * t->n_head + t->s[i].head] += t->s[i].n_comp;
	kap = malloc((cap_doc * D + 1) * sizeof *kap);
	nrm = malloc((cap_doc + 1) * sizeof *nrm);
	z = malloc(((size_t)max_comp + 1) * sizeof *z);
	if (!kap || !nrm || !z) {
		rc = SEKV_ENOMEM;
		goto out;
	}
	for (size_t lh = 0; lh < lh_n; lh++)
		if (cnt[lh] && !(v[lh] = malloc((size_t)cnt[lh] * sizeof **v))) {
			rc = SEKV_ENOMEM;
			goto out;
		}
	for (int i = 0, last = -1; i < t->n_sample; i++) {
		const struct train_sample *sm = &t->s[i];
		size_t lh = (size_t)sm->layer * t->n_head + sm->head;
		if (p->rw.w && sm->doc != last)
			doc_kappa(t, &t->doc[sm->doc], p->rw.w, kap, nrm);
		last = sm->doc;
		sample_z(t, p, i, kap, z);
		for (int s = 0; s < sm->n_comp; s++)
			v[lh][at[lh]++] = (struct zm){ z[s], sm->w * t->mass[sm->off + s] };
	}
	for (size_t lh = 0; lh < lh_n; lh++) {
		double tot = 0, run = 0;
		p->rw.tau[lh] = 0.0f;
		for (int64_t i = 0; i < at[lh]; i++)
			tot += v[lh][i].m;
		if (!at[lh] || tot <= 0)
			continue;
		qsort(v[lh], (size_t)at[lh], sizeof **v, by_z);
		/* the largest threshold that keeps `recall` of the mass above it */
		for (int64_t i = 0; i < at[lh]; i++) {
			run += v[lh][i].m;
			if (run > (1.0 - recall) * tot) {
				double zt = fmin(fmax(v[lh][i].z - 1e-3, -20.0), 8.0);
				p->rw.tau[lh] = (float)(1.0 / (1.0 + exp(-zt)));
				break;
			}
		}
	}
out:
	for (size_t lh = 0; v && lh < lh_n; lh++)
		free(v[lh]);
	free(v);
	free(cnt);
	free(at);
	free(kap);
	free(nrm);
	free(z);
	return rc;
}
