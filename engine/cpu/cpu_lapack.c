/* cpu_lapack.c - the CPU backend's build-time SeKV operations, the only
 * LAPACK calls of the program: truncated SVD of spans (sgesdd) and the
 * principal directions of a layer's keys for the router (ssyevd). Jobs are
 * independent and handed out one at a time from a shared counter to the
 * pool's threads (longest first when the caller orders them so); each
 * thread owns its LAPACK scratch, so results do not depend on the thread
 * count. These operations allocate (build time, not per token).
 */
#include "engine/cpu/backend_cpu_int.h"

#include "engine/base/err.h"

#include <lapacke.h>
#include <stdlib.h>

#define COV_BLOCK 32  /* rows per covariance update */
#define LP_NOMEM (-1000) /* a job's "info" when its scratch cannot grow */

/* Shared by the threads of one svd or pca call. */
struct lp_job {
	const struct backend_svd *svd;  /* [n] or NULL */
	const struct backend_pca *pca;  /* [n] or NULL */
	int n;
	int max_rows, max_cols;         /* over the jobs */
	atomic_int next;
	atomic_int fail;                /* first failure: job index + 1 */
	int fail_info;                  /* its LAPACK info (LP_NOMEM: memory) */
};

struct lp_ws {
	float *a, *s, *u, *vt, *work;
	lapack_int *iwork;
	size_t lwork, liwork;
};

static void lp_ws_free(struct lp_ws *w)
{
	free(w->a);
	free(w->s);
	free(w->u);
	free(w->vt);
	free(w->work);
	free(w->iwork);
}

/* Scratch for matrices up to rows x cols (and the cols x cols covariance). */
static int lp_ws_alloc(struct lp_ws *w, int rows, int cols)
{
	size_t d = (size_t)cols, big = d * (size_t)(cols > rows ? cols : rows);
	size_t k = (size_t)(rows < cols ? rows : cols);

	memset(w, 0, sizeof *w);
	w->a = malloc(big * sizeof(float));
	w->s = malloc(d * sizeof(float));
	w->u = malloc(big * sizeof(float));
	w->vt = malloc((k * (size_t)(rows > cols ? rows : cols) + COV_BLOCK * d) * sizeof(float));
	w->liwork = 8 * d;
	w->iwork = malloc(w->liwork * sizeof(lapack_int));
	if (!w->a || !w->s || !w->u || !w->vt || !w->iwork) {
		lp_ws_free(w);
		return SEKV_ENOMEM;
	}
	return SEKV_OK;
}

/* Ensures w->work holds lwork floats. */
static int lp_ws_work(struct lp_ws *w, size_t lwork)
{
	if (lwork > w->lwork) {
		float *p = realloc(w->work, lwork * sizeof(float));
		if (!p)
			return SEKV_ENOMEM;
		w->work = p;
		w->lwork = lwork;
	}
	return SEKV_OK;
}

/* Stores u and v (rank r) at the job's type from LAPACK's column-major
 * outputs: our u[i][t] = vt[i*mn + t] (a row of u is a column of VT), our
 * v[j][t] = lu[t*d + j]. Singular vectors have entries in [-1, 1], so fp16
 * rounds but never overflows. */
static void put_factor(const struct backend_svd *f, const float *vt, int mn, const float *lu)
{
	size_t r = (size_t)f->rank;
	int d = f->cols;

	for (int i = 0; i < f->rows; i++) {
		if (f->f16)
			quant_f32_to_f16_row(vt + (size_t)i * mn, (uint16_t *)f->u + i * r, r);
		else
			memcpy((float *)f->u + i * r, vt + (size_t)i * mn, r * sizeof(float));
	}
	for (int j = 0; j < d; j++)
		for (size_t t = 0; t < r; t++) {
			float x = lu[t * d + j];
			if (f->f16)
				((uint16_t *)f->v)[j * r + t] = quant_f32_to_f16(x);
			else
				((float *)f->v)[j * r + t] = x;
		}
}

/* The row-major rows x d matrix is the column-major d x rows matrix
 * X^T = V S U^T, so LAPACK's left vectors are our v and its right vectors
 * our u. Returns 0 or LAPACK info. */
static int svd_one(const struct backend_svd *f, struct lp_ws *w)
{
	int d = f->cols, len = f->rows, mn = len < d ? len : d;
	float q;
	lapack_int info;

	for (int i = 0; i < len; i++)
		quant_f16_to_f32_row(f->x + (size_t)i * f->ldx, w->a + (size_t)i * d, (size_t)d);
	info = LAPACKE_sgesdd_work(LAPACK_COL_MAJOR, 'S', d, len, w->a, d, w->s,
				   w->u, d, w->vt, mn, &q, -1, w->iwork);
	if (info)
		return (int)info;
	if (lp_ws_work(w, (size_t)q + 1))
		return LP_NOMEM;
	info = LAPACKE_sgesdd_work(LAPACK_COL_MAJOR, 'S', d, len, w->a, d, w->s,
				   w->u, d, w->vt, mn, w->work, (lapack_int)w->lwork,
				   w->iwork);
	if (info)
		return (int)info;
	for (int i = 0; i < f->rank; i++)
		f->s[i] = w->s[i];
	if (f->share) {
		double all = 0, kept = 0;
		for (int i = 0; i < mn; i++) {
			all += (double)w->s[i] * w->s[i];
			kept += i < f->rank ? (double)w->s[i] * w->s[i] : 0;
		}
		*f->share = all > 0 ? (float)(kept / all) : 1.0f;
	}
	put_factor(f, w->vt, mn, w->u);
	return 0;
}

/* Covariance of the centred rows into cov [d][d] (upper triangle). */
static void pca_cov(const struct backend_pca *p, struct lp_ws *w, float *cov)
{
	int d = p->cols, n = p->rows;
	float *mean = w->s, *row = w->vt, *blk = w->vt;

	memset(cov, 0, (size_t)d * d * sizeof(float));
	memset(mean, 0, (size_t)d * sizeof(float));
	for (int t = 0; t < n; t++) {
		quant_f16_to_f32_row(p->x + (size_t)t * p->ldx, row, (size_t)d);
		for (int i = 0; i < d; i++)
			mean[i] += row[i];
	}
	for (int i = 0; i < d; i++)
		mean[i] /= n > 0 ? (float)n : 1.0f;
	/* blocks of rows keep one row of cov in L1 while it is updated */
	for (int t0 = 0; t0 < n; t0 += COV_BLOCK) {
		int nb = n - t0 < COV_BLOCK ? n - t0 : COV_BLOCK;
		for (int b = 0; b < nb; b++) {
			float *x = blk + (size_t)b * d;
			quant_f16_to_f32_row(p->x + (size_t)(t0 + b) * p->ldx, x, (size_t)d);
			for (int i = 0; i < d; i++)
				x[i] -= mean[i];
		}
		for (int i = 0; i < d; i++) {
			float *ci = cov + (size_t)i * d;
			for (int b = 0; b < nb; b++) {
				const float *x = blk + (size_t)b * d;
				float xi = x[i];
				for (int jj = i; jj < d; jj++)
					ci[jj] += xi * x[jj];
			}
		}
	}
}

/* Eigenvectors of the covariance (ssyevd, ascending), the last n_vec
 * written first. Returns 0 or LAPACK info. */
static int pca_one(const struct backend_pca *p, struct lp_ws *w)
{
	int d = p->cols;
	float *cov = w->u, *ev = w->a, q;
	lapack_int info, iq;

	pca_cov(p, w, cov);
	/* upper triangle in row-major = lower triangle in column-major */
	info = LAPACKE_ssyevd_work(LAPACK_COL_MAJOR, 'V', 'L', d, cov, d, ev,
				   &q, -1, &iq, -1);
	if (info)
		return (int)info;
	if (lp_ws_work(w, (size_t)q + 1))
		return LP_NOMEM;
	if ((size_t)iq > w->liwork) {
		lapack_int *np = realloc(w->iwork, (size_t)iq * sizeof *np);
		if (!np)
			return LP_NOMEM;
		w->iwork = np;
		w->liwork = (size_t)iq;
	}
	info = LAPACKE_ssyevd_work(LAPACK_COL_MAJOR, 'V', 'L', d, cov, d, ev,
				   w->work, (lapack_int)w->lwork, w->iwork,
				   iq > 8 * d ? iq : 8 * d);
	if (info)
		return (int)info;
	for (int i = 0; i < p->n_vec; i++)
		memcpy(p->vec + (size_t)i * d, cov + (size_t)(d - 1 - i) * d, (size_t)d * sizeof(float));
	return 0;
}

static void lp_fail(struct lp_job *j, int job, int info)
{
	int z = 0;

	if (atomic_compare_exchange_strong(&j->fail, &z, job + 1))
		j->fail_info = info;
}

/* One per thread: takes jobs from the shared counter until none is left. */
static void lp_thread(void *ctx, int i0, int i1, int tid)
{
	struct lp_job *j = ctx;
	struct lp_ws w;

	(void)tid;
	for (int t = i0; t < i1; t++) {
		if (lp_ws_alloc(&w, j->max_rows, j->max_cols)) {
			lp_fail(j, 0, LP_NOMEM);
			return;
		}
		for (;;) {
			int k = atomic_fetch_add(&j->next, 1), rc;
			if (k >= j->n || atomic_load(&j->fail))
				break;
			rc = j->svd ? svd_one(&j->svd[k], &w) : pca_one(&j->pca[k], &w);
			if (rc) {
				lp_fail(j, k, rc);
				break;
			}
		}
		lp_ws_free(&w);
	}
}

static int lp_run(struct backend *b, struct lp_job *j, int *bad, int *info)
{
	struct cpu *c = b->impl;
	int n_th = c->n_threads < j->n ? c->n_threads : j->n, f;

	atomic_init(&j->next, 0);
	atomic_init(&j->fail, 0);
	j->fail_info = 0;
	if (j->max_rows < j->max_cols)
		j->max_rows = j->max_cols;
	cpu_parallel_for(c, n_th, 1, lp_thread, j);
	f = atomic_load(&j->fail);
	if (!f)
		return 0;
	*bad = f - 1;
	*info = j->fail_info;
	return j->fail_info == LP_NOMEM ? SEKV_ENOMEM : SEKV_EINVAL;
}

int cpu_svd(struct backend *b, const struct backend_svd *job, int n, int *bad, int *info)
{
	struct lp_job j = { .svd = job, .n = n };

	*bad = -1;
	*info = 0;
	for (int i = 0; i < n; i++) {
		const struct backend_svd *f = &job[i];
		int mn = f->rows < f->cols ? f->rows : f->cols;
		if (f->rows < 1 || f->cols < 1 || f->ldx < (size_t)f->cols || f->rank < 0 ||
		    f->rank > mn) {
			*bad = i;
			return SEKV_EINVAL;
		}
		j.max_rows = f->rows > j.max_rows ? f->rows : j.max_rows;
		j.max_cols = f->cols > j.max_cols ? f->cols : j.max_cols;
	}
	return lp_run(b, &j, bad, info);
}

int cpu_pca(struct backend *b, const struct backend_pca *job, int n, int *bad, int *info)
{
	struct lp_job j = { .pca = job, .n = n };

	*bad = -1;
	*info = 0;
	for (int i = 0; i < n; i++) {
		const struct backend_pca *p = &job[i];
		if (p->rows < 0 || p->cols < 1 || p->ldx < (size_t)p->cols || p->n_vec < 0 ||
		    p->n_vec > p->cols) {
			*bad = i;
			return SEKV_EINVAL;
		}
		j.max_cols = p->cols > j.max_cols ? p->cols : j.max_cols;
	}
	j.max_rows = j.max_cols;
	return lp_run(b, &j, bad, info);
}
