/* attend.c - decoding against a SeKV memory (DESIGN.md section 3): per
 * global layer and query head, route to spans, zoom the best ones under the
 * device budget, rebuild them from their factors only, and attend with ONE
 * softmax over exact rows, tail rows, coarse rows and reconstructed rows.
 * The rebuild and the softmax are backend operations (reconstruct,
 * attention_mix) over backend buffers: tail and reconstructed rows are
 * the backend's, exact rows and summaries are wrapped at sekv_ctx_new.
 * Invariant: no raw document KV is read here (exact rows, summaries and
 * factors only) and nothing is allocated after sekv_ctx_new.
 * Routing (alpha_S, zoom windows, candidates) lives in route.c, zooms of
 * single rows in zoomrows.c, the context struct in ctx_int.h; building the memory in build.c; its
 * storage in mem.c.
 */
#include "engine/sekv/ctx_int.h"
#include "engine/base/arena.h"
#include "engine/backend/backend.h"
#include "engine/base/err.h"
#include "engine/model/model.h"
#include "engine/quant/quant.h"
#include "engine/base/vec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


/* kappa_S = normalize(W[l,h] k_bar_S) for every layer, head and span. */
static void init_kappa(struct sekv_ctx *c)
{
	const struct sekv_mem *m = c->m;
	int d = m->d_h, D = SEKV_D_ROUTE;

	for (int l = 0; l < m->n_layer; l++)
		for (int h = 0; h < m->n_head; h++) {
			const float *w = (c->trained && c->trained->w ? c->trained->w : m->route_w) +
					 ((size_t)l * m->n_head + h) * D * d;
			for (int s = 0; s < m->n_comp; s++) {
				const uint16_t *kb = m->k_bar + (((size_t)l * m->n_comp + s) *
								 m->n_head_kv + h / c->group) * d;
				float *kp = c->kappa + (((size_t)l * m->n_head + h) * m->n_comp + s) * D;
				double nrm = 0;
				quant_f16_to_f32_row(kb, c->lrow, (size_t)d);
				for (int i = 0; i < D; i++) {
					kp[i] = vec_dot8(w + (size_t)i * d, c->lrow, d);
					nrm += (double)kp[i] * kp[i];
				}
				for (int i = 0; nrm > 0 && i < D; i++)
					kp[i] = (float)(kp[i] / sqrt(nrm));
			}
		}
}

/* Share of the zoom budget of global layer l (params' zoom_share when it
 * names every layer, else equal) into *share; returns the rows of its
 * region: every compressed token of every KV head (with question_exact or
 * without a budget), else at most what its share of the largest zoom
 * budget (one tail row held) holds. */
static size_t layer_rows(const struct sekv_mem *m, const struct sekv_params *p, size_t budget,
			 int comp_tok, size_t rrow, int l, float *share)
{
	size_t rows = (size_t)m->n_head_kv * comp_tok, fixed, allow;
	double w = 1.0 / m->n_layer, tot = 0;

	if (p->n_zoom_share == m->n_layer) {
		for (int i = 0; i < m->n_layer; i++)
			tot += p->zoom_share[i] > 0 ? p->zoom_share[i] : 0;
		if (tot > 0)
			w = (p->zoom_share[l] > 0 ? p->zoom_share[l] : 0) / tot;
	}
	if (share)
		*share = (float)w;
	if (!budget || p->question_exact)
		return rows;   /* an exact question turn holds every span's rows */
	fixed = m->static_bytes + sekv_dev_rows_bytes(1, m->n_layer, m->n_head_kv, m->d_h, sekv_mem_dev_rows(m));
	allow = budget > fixed ? (size_t)((double)(budget - fixed) * w) : 0;
	return allow / rrow < rows ? allow / rrow : rows;
}

/* Backend side of a ctx: its backend, workspace and buffers (n_tail
 * elements of each tail buffer, n_rec rows of each reconstructed-row
 * buffer). */
static int ctx_backend(struct sekv_ctx *c, const struct sekv_params *p, size_t n_tail,
		       size_t n_rec, char *err, size_t errlen)
{
	const struct sekv_mem *m = c->m;
	size_t row = (size_t)m->n_head_kv * m->d_h;
	struct backend_ws_size wsz = { .n_batch = 1, .n_head = m->n_head, .d_head = m->d_h,
				       .mix_rows = c->n_row };
	const struct backend_ops *op;
	int rc;

	c->be = p->be;
	if (!c->be) {
		if ((rc = backend_open("cpu", 1, &c->own_be, err, errlen)))
			return rc;
		c->be = c->own_be;
	}
	op = c->be->ops;
	/* int4 values: half a byte an element, d_h / 32 scales a row and head */
	size_t te = c->dev_rows ? 1 : sizeof(uint16_t), ts = (size_t)m->n_layer * c->tail_cap *
		    m->n_head_kv * sizeof(float), re = c->recon_type == BACKEND_ROW_F32 ? sizeof(float) :
		    c->recon_type == BACKEND_ROW_I8 ? 1 : sizeof(uint16_t);
	size_t tv = c->v4 ? n_tail / 2 : n_tail * te, rv = c->v4 ? n_rec * m->d_h / 2 : n_rec * m->d_h * re;
	size_t vsc = c->v4 ? (size_t)m->d_h / QUANT_I4_GROUP : 1;
	if ((rc = op->ws_new(c->be, &wsz, &c->ws)) ||
	    (rc = op->buf_new(c->be, n_tail * te, &c->tail_k)) ||
	    (rc = op->buf_new(c->be, tv, &c->tail_v)) ||
	    (rc = op->buf_new(c->be, n_rec * m->d_h * re, &c->recon_k)) ||
	    (rc = op->buf_new(c->be, rv, &c->recon_v)) ||
	    (c->dev_rows &&
	     ((rc = op->buf_new(c->be, ts, &c->tail_ks)) ||
	      (rc = op->buf_new(c->be, ts * vsc, &c->tail_vs)))) ||
	    (c->recon_type == BACKEND_ROW_I8 &&
	     ((rc = op->buf_new(c->be, n_rec * sizeof(float), &c->recon_ks)) ||
	      (rc = op->buf_new(c->be, n_rec * vsc * sizeof(float), &c->recon_vs)))) ||
	    (rc = sekv_dev_open(c)) ||
	    (m->n_lm > 0 &&
	     ((rc = op->buf_wrap(c->be, m->lm_k, (size_t)m->n_layer * m->n_lm * row, &c->lm_kb)) ||
	      (rc = op->buf_wrap(c->be, m->lm_s, (size_t)m->n_layer * m->n_lm * m->n_head_kv *
				 sizeof(float), &c->lm_sb)))))
		return sekv_errf(err, errlen, rc, "sekv_ctx_new: %s buffers: %s",
				 op->name, sekv_strerror(rc));
	return 0;
}

int sekv_ctx_new(struct sekv_ctx **out, const struct sekv_mem *m,
		 const struct sekv_params *p, int tail_cap, float q_scale,
		 char *err, size_t errlen)
{
	struct sekv_ctx *c;
	struct arena ar = {0};
	size_t max_rows = 0, o_sh, o_rb, o_rcp, o_c, o_kap, o_nt, o_rl, o_dl, o_qr, o_al, o_cand, o_zr, o_mark, o_rj,
	       o_blk, o_zc, o_z, o_pr, o_xk, o_xr, o_lr, o_mr, o_zl, o_nzl, o_xs, o_xm, o_xt, o_rf, o_rc, o_rs, o_oe, o_lse, o_lsa, o_zw, o_zlw, o_lsc, half, n_tail, n_rec, rrow, budget,
	       n_comp, o_kc, o_qk, o_t8, o_t8s, o_t8f, o_xv, o_xmx, o_xtl, o_xtt, o_xac, o_xfd, o_xsl,
	       o_le, o_bc, o_ba, o_lj, o_sr, o_ssc, o_sp, o_scr, o_rp, o_zk, o_nzr, o_zm, scan_cap, n_rj;
	int comp_tok = 0, rc;
	void *a;

	*out = NULL;
	if (!m || !p || tail_cap < 1 || !isfinite(q_scale) || m->n_head_kv < 1 ||
	    m->n_head % m->n_head_kv)
		return sekv_errf(err, errlen, SEKV_EINVAL, "sekv_ctx_new: %s",
				 !m || !p ? "memory or params: NULL" :
				 tail_cap < 1 ? "tail_cap: must be >= 1" :
				 "shape: bad q_scale or head counts");
	if (p->router == SEKV_ROUTER_TRAINED &&
	    (!p->trained || p->trained->n_layer != m->n_layer || p->trained->n_head != m->n_head ||
	     p->trained->d_h != m->d_h || m->n_lm == 0))
		return sekv_errf(err, errlen, SEKV_EINVAL, "sekv_ctx_new: trained router: %s",
				 !p->trained ? "no weights" : m->n_lm == 0 ? "the memory has no landmarks" :
				 "weights of another shape");
	for (int i = 0; i < m->n_comp; i++)
		comp_tok += m->span[m->comp_span[i]].len;
	n_comp = (size_t)m->n_comp;
	int recon_type = p->recon_f32 ? BACKEND_ROW_F32 : sekv_mem_dev_rows(m) ? BACKEND_ROW_I8 : BACKEND_ROW_F16;
	rrow = recon_type == BACKEND_ROW_F32 ? 2 * (size_t)m->d_h * sizeof(float) :
	       sekv_dev_rows_bytes(1, 1, 1, m->d_h, sekv_mem_dev_rows(m));
	n_tail = (size_t)m->n_layer * tail_cap * m->n_head_kv * m->d_h;
	budget = p->budget > 0 && p->budget < 1 ? (size_t)(p->budget * (double)m->full_kv_bytes) : 0;
	n_rec = 0;
	for (int l = 0; l < m->n_layer; l++) {
		size_t r = layer_rows(m, p, budget, comp_tok, rrow, l, NULL);
		n_rec += r;
		max_rows = r > max_rows ? r : max_rows;
	}
	/* a row zoom scans zoom_scan times its region's rows, at least a
	 * block; keys factored before RoPE rotate per row, which a score
	 * through the factor cannot: their zooms stay windows */
	scan_cap = 0;
	if (p->zoom_scan > 0 && m->n_lm > 0 && m->rope_base <= 0 &&
	    (p->router == SEKV_ROUTER_LANDMARK || p->router == SEKV_ROUTER_TRAINED)) {
		scan_cap = (size_t)p->zoom_scan * max_rows;
		scan_cap = scan_cap > (size_t)m->lm_len ? scan_cap : (size_t)m->lm_len;
		scan_cap = scan_cap < (size_t)m->n_head_kv * comp_tok ? scan_cap :
			   (size_t)m->n_head_kv * comp_tok;
	}
	/* windows: two jobs a span and KV head; row zooms send theirs in
	 * batches of this size */
	n_rj = 2 * (size_t)m->n_head_kv * n_comp;
	n_rj = n_rj > 512 ? n_rj : 512;
	o_c = arena_reserve(&ar, 1, sizeof *c);
	o_kap = arena_reserve(&ar, (size_t)m->n_layer * m->n_head * n_comp, SEKV_D_ROUTE * sizeof(float));
	o_nt = arena_reserve(&ar, (size_t)m->n_layer, sizeof(int));
	o_rl = arena_reserve(&ar, (size_t)m->n_layer, sizeof(size_t));
	o_dl = arena_reserve(&ar, (size_t)m->n_layer, sizeof(int));
	o_qr = arena_reserve(&ar, SEKV_D_ROUTE, sizeof(float));
	o_al = arena_reserve(&ar, (size_t)m->n_head * n_comp, sizeof(float));
	o_cand = arena_reserve(&ar, (size_t)m->n_head_kv * n_comp, sizeof(struct cand));
	o_zr = arena_reserve(&ar, (size_t)m->n_head_kv * n_comp, sizeof(int32_t));
	o_zw = arena_reserve(&ar, (size_t)m->n_head_kv * n_comp * 2, sizeof(int32_t));
	o_zlw = arena_reserve(&ar, 2 * (size_t)m->n_head_kv * n_comp + 2, sizeof(struct zent));
	o_lsc = arena_reserve(&ar, (size_t)m->n_head * m->n_lm + 1, sizeof(float));
	o_mark = arena_reserve(&ar, n_comp, 1);
	o_rj = arena_reserve(&ar, n_rj, sizeof(struct backend_recon));
	o_le = arena_reserve(&ar, (size_t)m->n_head, sizeof(float));
	o_bc = arena_reserve(&ar, scan_cap ? (size_t)m->n_head_kv * m->n_lm : 0, sizeof(struct cand));
	o_ba = arena_reserve(&ar, scan_cap ? (size_t)m->n_head_kv * m->n_lm : 0, sizeof(float));
	o_lj = arena_reserve(&ar, scan_cap ? (size_t)m->n_head_kv * m->n_lm : 0,
			     sizeof(struct backend_lr_job));
	o_sr = arena_reserve(&ar, scan_cap, sizeof(struct srow));
	o_ssc = arena_reserve(&ar, scan_cap * (size_t)(m->n_head / m->n_head_kv), sizeof(float));
	o_sp = arena_reserve(&ar, 2 * scan_cap, sizeof(float));
	o_scr = arena_reserve(&ar, 2 * (size_t)m->n_head, sizeof(double));
	o_rp = arena_reserve(&ar, n_rec + 1, sizeof(int32_t));
	o_zk = arena_reserve(&ar, scan_cap ? n_rec + 1 : 0, sizeof(int64_t));
	o_nzr = arena_reserve(&ar, (size_t)m->n_layer, sizeof(int));
	o_zm = arena_reserve(&ar, scan_cap, sizeof(int32_t));
	o_blk = arena_reserve(&ar, (size_t)m->n_head_kv * (2 + 2 * n_comp),
			      sizeof(struct backend_mix_block));
	o_zc = arena_reserve(&ar, (size_t)m->n_layer * m->n_head, sizeof(int));
	o_mr = arena_reserve(&ar, (size_t)m->n_layer * m->n_head, sizeof(double));
	o_zl = arena_reserve(&ar, (size_t)m->n_layer * m->n_head_kv * n_comp + 1, sizeof(struct zent));
	o_nzl = arena_reserve(&ar, (size_t)m->n_layer, sizeof(int));
	o_z = arena_reserve(&ar, (size_t)m->n_layer * m->n_head_kv * n_comp + 1,
			    sizeof(struct sekv_zoom));
	o_pr = arena_reserve(&ar, (size_t)m->n_head * ((size_t)m->n_exact + tail_cap + n_comp +
						   (size_t)comp_tok), sizeof(float));
	o_xk = arena_reserve(&ar, (size_t)m->n_layer, sizeof(uint16_t *));
	o_xr = arena_reserve(&ar, (size_t)m->d_h, sizeof(float));
	o_lr = arena_reserve(&ar, (size_t)m->d_h, sizeof(float));
	o_xs = arena_reserve(&ar, (size_t)m->n_head * m->n_tok, sizeof(float));
	o_xm = arena_reserve(&ar, (size_t)m->n_head * n_comp + 1, sizeof(double));
	o_xt = arena_reserve(&ar, (size_t)m->n_head, sizeof(double));
	o_xv = arena_reserve(&ar, (size_t)m->n_layer, sizeof(uint16_t *));
	o_xmx = arena_reserve(&ar, (size_t)m->n_head, sizeof(double));
	o_xtl = arena_reserve(&ar, (size_t)tail_cap, sizeof(float));
	o_xtt = arena_reserve(&ar, 2 * (size_t)tail_cap * m->n_head_kv * m->d_h, sizeof(uint16_t));
	o_xac = arena_reserve(&ar, (size_t)m->n_head * m->d_h, sizeof(double));
	o_xfd = arena_reserve(&ar, 2 * (size_t)m->n_head, sizeof(double));
	o_xsl = arena_reserve(&ar, 2 * (size_t)m->n_tok + 1, sizeof(float));
	o_oe = arena_reserve(&ar, (size_t)m->n_head * m->d_h, sizeof(float));
	o_lse = arena_reserve(&ar, (size_t)m->n_head, sizeof(float));
	o_lsa = arena_reserve(&ar, (size_t)m->n_head, sizeof(float));
	half = m->rope_base > 0 ? (size_t)m->n_rot / 2 : 0;
	o_rf = arena_reserve(&ar, half, sizeof(double));
	o_rc = arena_reserve(&ar, max_rows * half, sizeof(float));
	o_rs = arena_reserve(&ar, max_rows * half, sizeof(float));
	o_sh = arena_reserve(&ar, (size_t)m->n_layer, sizeof(float));
	o_rb = arena_reserve(&ar, (size_t)m->n_layer, sizeof(int32_t));
	o_rcp = arena_reserve(&ar, (size_t)m->n_layer, sizeof(int32_t));
	o_kc = arena_reserve(&ar, (size_t)m->n_layer * m->n_head_kv * m->d_h, sizeof(float));
	o_qk = arena_reserve(&ar, (size_t)m->n_head * m->d_h, sizeof(float));
	o_t8 = arena_reserve(&ar, 2 * (size_t)m->n_head_kv * m->d_h, 1);
	o_t8s = arena_reserve(&ar, (size_t)m->n_head_kv * (2 + (size_t)m->d_h / QUANT_I4_GROUP),
			      sizeof(float));
	o_t8f = arena_reserve(&ar, (size_t)m->n_head_kv * m->d_h, sizeof(float));
	if ((rc = arena_alloc(&ar, &a)))
		return sekv_errf(err, errlen, rc, "sekv_ctx_new: scratch: %s (%zu bytes)",
				 rc == SEKV_ENOMEM ? "out of memory" : "size overflows", ar.bytes);
	c = (struct sekv_ctx *)((char *)a + o_c);
	c->arena = a;
	c->m = m;
	c->tail_cap = tail_cap;
	c->q_scale = q_scale;
	c->r_use = p->r_use;
	c->recon_f32 = p->recon_f32 != 0;
	c->dev_rows = sekv_mem_dev_rows(m);
	c->v4 = c->dev_rows == SEKV_DEV_K8V4;
	c->row_type = c->v4 ? BACKEND_ROW_K8V4 : c->dev_rows ? BACKEND_ROW_I8 : BACKEND_ROW_F16;
	c->recon_type = recon_type;
	c->recon_blk_type = c->v4 && recon_type == BACKEND_ROW_I8 ? BACKEND_ROW_K8V4 : recon_type;
	c->recon_row_bytes = rrow;
	c->kc = (float *)((char *)a + o_kc);
	c->qk = (float *)((char *)a + o_qk);
	c->tail8 = (int8_t *)((char *)a + o_t8);
	c->tail8_s = (float *)((char *)a + o_t8s);
	c->tail8_f = (float *)((char *)a + o_t8f);
	c->group = m->n_head / m->n_head_kv;
	c->comp_tok = comp_tok;
	c->n_row = m->n_exact + tail_cap + m->n_comp + comp_tok;
	c->n_blk = 2 + 2 * m->n_comp;
	c->row_bytes = sekv_dev_rows_bytes(1, 1, m->n_head_kv, m->d_h, c->dev_rows);
	c->kappa = (float *)((char *)a + o_kap);
	c->n_tail = (int *)((char *)a + o_nt);
	c->recon_layer = (size_t *)((char *)a + o_rl);
	c->distinct_layer = (int *)((char *)a + o_dl);
	c->qr = (float *)((char *)a + o_qr);
	c->alpha = (float *)((char *)a + o_al);
	c->cand = (struct cand *)((char *)a + o_cand);
	c->zoom_row = (int32_t *)((char *)a + o_zr);
	c->zoom_win = (int32_t *)((char *)a + o_zw);
	c->znew = (struct zent *)((char *)a + o_zlw);
	c->zocc = c->znew + m->n_head_kv * n_comp + 1;
	c->lm_sc = (float *)((char *)a + o_lsc);
	c->zoom_blocks = p->zoom_blocks > 0 ? p->zoom_blocks : 0;
	c->question_exact = p->question_exact != 0;
	c->mark = (uint8_t *)((char *)a + o_mark);
	c->rj = (struct backend_recon *)((char *)a + o_rj);
	c->n_rj = (int)n_rj;
	c->lse_est = (float *)((char *)a + o_le);
	c->zoom_scan = scan_cap ? p->zoom_scan : 0;
	c->scan_cap = (int)scan_cap;
	c->bcand = (struct cand *)((char *)a + o_bc);
	c->lrj = (struct backend_lr_job *)((char *)a + o_lj);
	c->balpha = (float *)((char *)a + o_ba);
	c->scan = (struct srow *)((char *)a + o_sr);
	c->scan_sc = (float *)((char *)a + o_ssc);
	c->scan_p = (float *)((char *)a + o_sp);
	c->scan_corr = (double *)((char *)a + o_scr);
	c->recon_pos = (int32_t *)((char *)a + o_rp);
	c->zkey = (int64_t *)((char *)a + o_zk);
	c->n_zrows = (int *)((char *)a + o_nzr);
	c->zmap = (int32_t *)((char *)a + o_zm);
	c->blk = (struct backend_mix_block *)((char *)a + o_blk);
	c->st.zoom_count = (int *)((char *)a + o_zc);
	c->st.mass_recall_lh = (double *)((char *)a + o_mr);
	c->zlist = (struct zent *)((char *)a + o_zl);
	c->n_zlist = (int *)((char *)a + o_nzl);
	c->share = (float *)((char *)a + o_sh);
	c->rec_base = (int32_t *)((char *)a + o_rb);
	c->rec_cap = (int32_t *)((char *)a + o_rcp);
	for (int l = 0, at = 0; l < m->n_layer; l++) {
		c->rec_cap[l] = (int32_t)layer_rows(m, p, budget, comp_tok, rrow, l, &c->share[l]);
		c->rec_base[l] = at;
		at += c->rec_cap[l];
	}
	if (half) {
		c->rope_freq = (double *)((char *)a + o_rf);
		c->rope_cs = (float *)((char *)a + o_rc);
		c->rope_sn = (float *)((char *)a + o_rs);
		model_rope_inv_freq(m->rope_base, m->n_rot, c->rope_freq);
	}
	c->st.zoom = (struct sekv_zoom *)((char *)a + o_z);
	c->probe_row = (float *)((char *)a + o_pr);
	/* a memory stored before landmarks routes by its summaries */
	c->router = p->router == SEKV_ROUTER_LANDMARK && m->n_lm == 0 ? SEKV_ROUTER_SUMMARY
								      : p->router;
	c->trained = p->router == SEKV_ROUTER_TRAINED ? p->trained : NULL;
	c->xk = (const uint16_t **)((char *)a + o_xk);
	c->xrow = (float *)((char *)a + o_xr);
	c->lrow = (float *)((char *)a + o_lr);
	c->xs = (float *)((char *)a + o_xs);
	c->out_exact = (float *)((char *)a + o_oe);
	c->lse_exact = (float *)((char *)a + o_lse);
	c->lse_all = (float *)((char *)a + o_lsa);
	c->xmass = (double *)((char *)a + o_xm);
	c->xtotal = (double *)((char *)a + o_xt);
	c->xv = (const uint16_t **)((char *)a + o_xv);
	c->xmax = (double *)((char *)a + o_xmx);
	c->xtl = (float *)((char *)a + o_xtl);
	c->xtail = (uint16_t *)((char *)a + o_xtt);
	c->xacc = (double *)((char *)a + o_xac);
	c->xfd = (double *)((char *)a + o_xfd);
	c->xsel = (float *)((char *)a + o_xsl);
	c->st.budget_bytes = budget;
	if ((rc = ctx_backend(c, p, n_tail, n_rec, err, errlen))) {
		sekv_ctx_free(c);
		return rc;
	}
	init_kappa(c);
	sekv_ctx_reset(c);
	*out = c;
	return SEKV_OK;
}

void sekv_ctx_free(struct sekv_ctx *c)
{
	if (!c)
		return;
	if (c->be) {
		const struct backend_ops *op = c->be->ops;
		struct backend_buf *bufs[] = { c->tail_k, c->tail_v, c->recon_k, c->recon_v,
					       c->exact_k, c->exact_v, c->bar_k, c->bar_v,
					       c->lm_kb, c->lm_sb, c->tail_ks, c->tail_vs,
					       c->exact_ks, c->exact_vs, c->bar_ks, c->bar_vs,
					       c->recon_ks, c->recon_vs };
		for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
			op->buf_free(c->be, bufs[i]);
		if (c->ws)
			op->ws_free(c->ws);
	}
	backend_close(c->own_be);
	free(c->dev_host);
	free(c->arena);
}

void sekv_ctx_reset(struct sekv_ctx *c)
{
	const struct sekv_mem *m = c->m;
	size_t budget = c->st.budget_bytes;

	c->last_pos = -1;
	c->zoomed_layer = -1;
	for (size_t i = 0; i < (size_t)m->n_head_kv * m->n_comp; i++)
		c->zoom_row[i] = -1;
	c->question = 0;
	c->st.question_host_bytes = 0;
	memset(c->n_tail, 0, (size_t)m->n_layer * sizeof *c->n_tail);
	c->tail_first = 0;
	memset(c->recon_layer, 0, (size_t)m->n_layer * sizeof *c->recon_layer);
	memset(c->distinct_layer, 0, (size_t)m->n_layer * sizeof *c->distinct_layer);
	memset(c->st.zoom_count, 0, (size_t)m->n_layer * m->n_head * sizeof(int));
	memset(c->n_zlist, 0, (size_t)m->n_layer * sizeof *c->n_zlist);
	memset(c->n_zrows, 0, (size_t)m->n_layer * sizeof *c->n_zrows);
	c->st.step = 0;
	c->st.n_zoom = 0;
	c->st.zoom_total = 0;
	c->st.tail_bytes = 0;
	c->st.recon_bytes = 0;
	c->st.mass_recall_sum = 0;
	c->st.attn_err_sum = 0;
	c->st.attn_err_n = 0;
	c->st.mass_oracle_sum = 0;
	c->st.mass_oracle_n = 0;
	c->st.mass_recall_n = 0;
	memset(c->st.mass_recall_lh, 0, (size_t)m->n_layer * m->n_head * sizeof(double));
	c->st.resident_bytes = m->static_bytes;
	c->st.peak_resident_bytes = m->static_bytes;
	c->st.budget_bytes = budget;
}

const struct sekv_stats *sekv_ctx_stats(const struct sekv_ctx *c)
{
	return &c->st;
}

/* Starts step `pos`: forgets the previous step's zooms and the tail rows
 * at or past the new position (a rewound stream overwrites them). */
static void new_step(struct sekv_ctx *c, int pos, int idx)
{
	const struct sekv_mem *m = c->m;

	c->last_pos = pos;
	c->st.step++;
	c->st.n_zoom = 0;
	memset(c->st.zoom_count, 0, (size_t)m->n_layer * m->n_head * sizeof(int));
	memset(c->recon_layer, 0, (size_t)m->n_layer * sizeof *c->recon_layer);
	memset(c->distinct_layer, 0, (size_t)m->n_layer * sizeof *c->distinct_layer);
	c->st.factor_read_bytes = 0;
	for (int l = 0; l < m->n_layer; l++)
		if (c->n_tail[l] > idx)
			c->n_tail[l] = idx;
}

void sekv_ctx_set_exact_keys(struct sekv_ctx *c, const uint16_t *const *k)
{
	for (int l = 0; l < c->m->n_layer; l++)
		c->xk[l] = k ? k[l] : NULL;
}

void sekv_ctx_set_exact_values(struct sekv_ctx *c, const uint16_t *const *v)
{
	for (int l = 0; l < c->m->n_layer; l++)
		c->xv[l] = v ? v[l] : NULL;
}

/* The kept components (at most r_use of them) or the raw rows; a pre-RoPE
 * key factor (is_key) gets its positions' RoPE angles in rows' part of
 * the tables (sized for the largest region). */
struct backend_recon sekv_recon_job(const struct sekv_ctx *c, const struct sekv_factor *f,
				    int start, int r0, int len, int l, int kv, int is_key,
				    size_t base, size_t rows)
{
	const struct sekv_mem *m = c->m;
	int rows_form = sekv_rank_is_rows(f->rank), r = rows_form ? 0 : f->rank;
	size_t u_row = f->rank == SEKV_RANK_RAW8 ? (size_t)m->d_h :
		       (size_t)(rows_form ? m->d_h : f->rank) *
		       (m->factor_f16 ? sizeof(uint16_t) : sizeof(float));
	struct backend_recon j;

	if (c->r_use > 0 && c->r_use < r)
		r = c->r_use;
	start += r0;
	j = (struct backend_recon){
		.len = len, .d = m->d_h, .rank = f->rank, .r = r,
		.f16 = m->factor_f16, .u = (const char *)f->u + (size_t)r0 * u_row,
		.s = f->rank == SEKV_RANK_RAW8 ? f->s + r0 : f->s,
		.v = f->v, .dst = is_key ? c->recon_k : c->recon_v, .off = (base + rows) * m->d_h,
		.dst_type = !is_key && c->recon_blk_type == BACKEND_ROW_K8V4 ? BACKEND_ROW_I4 : c->recon_type,
		.dst_s = is_key ? c->recon_ks : c->recon_vs,
		.soff = base + rows,
		.kc = is_key && c->dev_rows ? c->kc + ((size_t)l * m->n_head_kv + kv) * m->d_h : NULL,
	};
	if (is_key && c->rope_freq && !rows_form) {
		size_t half = (size_t)m->n_rot / 2;
		j.cs = c->rope_cs + rows * half;
		j.sn = c->rope_sn + rows * half;
		j.n_rot = m->n_rot;
		model_rope_cos_sin(c->rope_freq, m->n_rot, start, len, c->rope_cs + rows * half,
				   c->rope_sn + rows * half);
	}
	return j;
}

void sekv_count_read(struct sekv_ctx *c, const struct backend_recon *j, int n)
{
	size_t sb, ub, vb;

	sekv_factor_bytes(sekv_rank_is_rows(j->rank) ? j->rank : j->r, n, c->m->d_h,
			  c->m->factor_f16, &sb, &ub, &vb);
	c->st.factor_read_bytes += sb + ub + vb;
}

void sekv_zoom_clear(struct sekv_ctx *c, int l)
{
	const struct sekv_mem *m = c->m;
	struct sekv_stats *st = &c->st;

	c->zoomed_layer = l;
	memset(c->mark, 0, (size_t)m->n_comp);
	for (size_t i = 0; i < (size_t)m->n_head_kv * m->n_comp; i++)
		c->zoom_row[i] = -1;
	memset(c->zoom_win, 0, (size_t)m->n_head_kv * m->n_comp * 2 * sizeof *c->zoom_win);
	for (int i = 0, o = 0, n = st->n_zoom; i < n; i++)
		if (st->zoom[i].layer != l)
			st->zoom[o++] = st->zoom[i];
		else
			st->n_zoom--;
	st->zoom_total -= c->distinct_layer[l];
	c->distinct_layer[l] = 0;
	memset(st->zoom_count + (size_t)l * m->n_head, 0, (size_t)m->n_head * sizeof(int));
}

/* Bytes of reconstructed rows layer l may hold at step idx (tail index):
 * its share of the budget past the static part and the tail rows
 * reserved for this position in every layer; (size_t)-1 without a
 * budget or in an exact question turn. */
static size_t zoom_allow(const struct sekv_ctx *c, int l, int idx)
{
	const struct sekv_mem *m = c->m;
	size_t fixed;

	if (!c->st.budget_bytes || c->question)
		return (size_t)-1;
	fixed = m->static_bytes + (size_t)m->n_layer * (idx + 1 - c->tail_first) * c->row_bytes;
	return c->st.budget_bytes > fixed ?
	       (size_t)((double)(c->st.budget_bytes - fixed) * c->share[l]) : 0;
}

static int zent_by_row(const void *a, const void *b)
{
	const struct zent *x = a, *y = b;
	return (x->row > y->row) - (x->row < y->row);
}

/* First free run of n rows of the region (occ: the n_occ taken runs,
 * sorted by row), taken and kept sorted; its row, or -1. */
static int take_rows(struct zent *occ, int *n_occ, int n, int cap)
{
	int at = 0, i = 0;

	for (; i < *n_occ && occ[i].row - at < n; i++)
		at = occ[i].row + occ[i].n;
	if (i == *n_occ && cap - at < n)
		return -1;
	memmove(occ + i + 1, occ + i, (size_t)(*n_occ - i) * sizeof *occ);
	occ[i] = (struct zent){ -1, 0, n, at };
	(*n_occ)++;
	return at;
}

/* Rows of layer l's region for the candidates kept (n > 0), in candidate
 * order into c->znew: a window the layer already holds keeps its rows
 * (decode mostly keeps its zooms from token to token, in any order);
 * the others take free runs, marked for rebuilding as row = -(row + 1).
 * When they do not fit between the kept ones, every window is laid out
 * afresh and rebuilt. Returns the entries. */
static int place(struct sekv_ctx *c, int l, int n_cand)
{
	const struct sekv_mem *m = c->m;
	const struct zent *old = c->zlist + (size_t)l * m->n_head_kv * m->n_comp;
	int n_z = 0, n_occ = 0, cap = c->rec_cap[l];

	for (int i = 0; i < n_cand; i++) {
		const struct cand *cd = &c->cand[i];
		struct zent *z = &c->znew[n_z];
		if (cd->n == 0)
			continue;
		*z = (struct zent){ cd->kv * m->n_comp + cd->comp, cd->r0, cd->n, INT32_MIN };
		for (int k = 0; k < c->n_zlist[l]; k++)
			if (old[k].id == z->id && old[k].r0 == z->r0 && old[k].n == z->n) {
				z->row = old[k].row;
				c->zocc[n_occ++] = *z;
			}
		n_z++;
	}
	qsort(c->zocc, (size_t)n_occ, sizeof *c->zocc, zent_by_row);
	for (int i = 0; i < n_z; i++) {
		struct zent *z = &c->znew[i];
		int at;
		if (z->row != INT32_MIN)
			continue;
		if ((at = take_rows(c->zocc, &n_occ, z->n, cap)) < 0)
			break;
		z->row = -at - 1;
	}
	for (int i = 0; i < n_z; i++)
		if (c->znew[i].row == INT32_MIN) {
			/* fragmented: everything afresh, in candidate order */
			for (int k = 0, at = 0; k < n_z; k++) {
				c->znew[k].row = -at - 1;
				at += c->znew[k].n;
			}
			break;
		}
	return n_z;
}

/* Chooses the zooms of layer l under its share of the budget, places
 * them in the layer's region (place: a window the layer already holds is
 * not rebuilt), rebuilds the others (one backend call) and records
 * statistics. Returns 0 or the backend's code; *bytes = the reconstructed
 * bytes in use. */
static int zoom(struct sekv_ctx *c, int l, int n_cand, size_t allow, size_t *bytes)
{
	const struct sekv_mem *m = c->m;
	struct sekv_stats *st = &c->st;
	size_t rrow = c->recon_row_bytes;
	size_t used = 0, base = (size_t)c->rec_base[l];
	int distinct = 0, n_job = 0, n_z;

	sekv_zoom_clear(c, l);
	c->n_zrows[l] = 0;   /* windows rewrite the region */
	/* windows by alpha while they fit; then, alpha first, a window grows to
	 * its whole span where the rest still fits (a loose budget zooms
	 * whole spans, as without windows) */
	for (int i = 0; i < n_cand; i++) {
		struct cand *cd = &c->cand[i];
		size_t cost = (size_t)cd->n * rrow;
		if (cost > allow - used) {
			cd->n = 0;   /* a long span must not block shorter ones */
			continue;
		}
		used += cost;
	}
	for (int i = 0; i < n_cand; i++) {
		struct cand *cd = &c->cand[i];
		int len = m->span[m->comp_span[cd->comp]].len;
		size_t more = (size_t)(len - cd->n) * rrow;
		if (cd->n > 0 && cd->n < len && more <= allow - used) {
			used += more;
			cd->r0 = 0;
			cd->n = len;
		}
	}
	n_z = place(c, l, n_cand);
	for (int i = 0, k = 0; i < n_cand; i++) {
		const struct cand *cd = &c->cand[i];
		struct zent *z = &c->znew[k];
		int s = m->comp_span[cd->comp];
		size_t fi = (((size_t)l * m->n_comp + cd->comp) * m->n_head_kv + cd->kv) * 2;
		if (cd->n == 0)
			continue;
		k++;
		if (z->row < 0) {   /* rebuilt this step */
			z->row = -z->row - 1;
			for (int k = 0; k < 2; k++) {
				c->rj[n_job] = sekv_recon_job(c, &m->fac[fi + k], m->span[s].start, z->r0,
							      z->n, l, cd->kv, k == 0, base, (size_t)z->row);
				sekv_count_read(c, &c->rj[n_job++], z->n);
			}
		}
		for (int t = 0; t < z->n; t++)
			c->recon_pos[base + (size_t)z->row + t] = m->span[s].start + z->r0 + t;
		c->zoom_row[z->id] = z->row;
		c->zoom_win[2 * z->id] = z->r0;
		c->zoom_win[2 * z->id + 1] = z->n;
		distinct += !c->mark[cd->comp];
		c->mark[cd->comp] = 1;
		st->zoom[st->n_zoom++] = (struct sekv_zoom){ s, l, cd->head, 1,
			1.0f / (1.0f + expf(-cd->alpha)), z->r0, z->n };
		for (int h = cd->kv * c->group; h < (cd->kv + 1) * c->group; h++)
			st->zoom_count[(size_t)l * m->n_head + h]++;
	}
	memcpy(c->zlist + (size_t)l * m->n_head_kv * m->n_comp, c->znew, (size_t)n_z * sizeof *c->znew);
	c->n_zlist[l] = n_z;
	c->distinct_layer[l] = distinct;
	st->zoom_total += distinct;
	*bytes = used;
	if (n_job == 0)
		return SEKV_OK;
	int rc = c->be->ops->reconstruct(c->be, c->ws, c->rj, n_job);
	if (rc)
		c->n_zlist[l] = 0;   /* the rows are unknown now */
	return rc;
}

/* Blocks of layer l, in the order of the one softmax, per KV head kv:
 * exact rows and tail rows (c->blk[kv][0..1], the first call), then per
 * compressed span its coarse row (bias +log of the rows it stands for,
 * masked when the whole span is rebuilt) and its rebuilt rows (none
 * unless zoomed) (c->blk[n_head_kv * 2 + kv * (n_blk - 2) ..], the
 * second). The exact ones are set before routing, the others after. */
static void mix_blocks(struct sekv_ctx *c, int l, int second)
{
	const struct sekv_mem *m = c->m;
	int d = m->d_h, nt = c->n_tail[l] - c->tail_first;
	size_t row = (size_t)m->n_head_kv * d;

	for (int kv = 0; kv < m->n_head_kv; kv++) {
		struct backend_mix_block *blk = c->blk + (size_t)m->n_head_kv * 2 +
						(size_t)kv * (c->n_blk - 2);
		const int32_t *zr = c->zoom_row + (size_t)kv * m->n_comp;
		const int32_t *zw = c->zoom_win + (size_t)kv * m->n_comp * 2;
		if (!second) {
			c->blk[2 * kv] = (struct backend_mix_block){ c->exact_k, c->exact_v,
				(size_t)l * m->n_exact * row + (size_t)kv * d, row, m->n_exact, c->row_type,
				0.0f, 0, c->exact_ks, c->exact_vs,
				(size_t)l * m->n_exact * m->n_head_kv + (size_t)kv, (size_t)m->n_head_kv };
			c->blk[2 * kv + 1] = (struct backend_mix_block){ c->tail_k, c->tail_v,
				(size_t)l * c->tail_cap * row + (size_t)kv * d, row, nt, c->row_type, 0.0f, 0,
				c->tail_ks, c->tail_vs,
				(size_t)l * c->tail_cap * m->n_head_kv + (size_t)kv, (size_t)m->n_head_kv };
			continue;
		}
		for (int s = 0; s < m->n_comp; s++) {
			/* a span zoomed in part keeps its coarse row for the rest */
			int len = m->span[m->comp_span[s]].len, nz = zr[s] >= 0 ? zw[2 * s + 1] : 0;
			size_t at = (size_t)c->rec_base[l] + (size_t)(zr[s] >= 0 ? zr[s] : 0);
			blk[2 * s] = (struct backend_mix_block){ c->bar_k, c->bar_v,
				((size_t)l * m->n_comp + s) * row + (size_t)kv * d, row, 1, c->row_type,
				logf((float)(nz < len ? len - nz : len)), nz == len, c->bar_ks, c->bar_vs,
				((size_t)l * m->n_comp + s) * m->n_head_kv + (size_t)kv, 0 };
			blk[2 * s + 1] = (struct backend_mix_block){ c->recon_k, c->recon_v, at * d,
				(size_t)d, nz, c->recon_blk_type, 0.0f, 0, c->recon_ks, c->recon_vs, at, 1 };
		}
	}
}

void sekv_ctx_set_probe(struct sekv_ctx *c, const struct model_probe *p)
{
	c->probe = p;
}

/* Row mass -> document positions for every probe entry of this layer:
 * exact and reconstructed rows to their positions, a coarse row's mass
 * spread evenly over its span's tokens, tail rows (no document) dropped. */
static void probe_end(struct sekv_ctx *c, int layer)
{
	const struct sekv_mem *m = c->m;
	const struct model_probe *p = c->probe;
	int l = 0;

	while (l < m->n_layer - 1 && m->layer_id[l] != layer)
		l++;
	for (int i = 0; i < p->n && i < MODEL_PROBE_MAX; i++) {
		int h = p->head[i], g, r = 0;
		const struct backend_mix_block *blk;
		const float *rm;
		float *out = p->mass + (size_t)i * p->n_pos;
		if (p->layer[i] != layer || h < 0 || h >= m->n_head)
			continue;
		g = h / c->group;
		blk = c->blk + (size_t)m->n_head_kv * 2 + (size_t)g * (c->n_blk - 2);
		rm = c->probe_row + (size_t)h * c->n_row;
		for (int e = 0; e < m->n_exact; e++, r++)
			if (m->exact_pos[e] < p->n_pos)
				out[m->exact_pos[e]] += rm[r];
		r += c->blk[2 * g + 1].n;
		for (int s = 0; s < m->n_comp; s++) {
			const struct sekv_span *sp = &m->span[m->comp_span[s]];
			int nz = blk[2 * s + 1].n, zr = c->zoom_row[(size_t)g * m->n_comp + s];
			const int32_t *pos = c->recon_pos + c->rec_base[l] + (zr > 0 ? zr : 0);
			float each = 0;
			if (!blk[2 * s].masked) {
				/* over the tokens the span's rebuilt rows do not hold */
				each = rm[r++] / (float)(sp->len - nz);
				for (int t = 0; t < sp->len && sp->start + t < p->n_pos; t++)
					out[sp->start + t] += each;
			}
			for (int t = 0; t < nz; t++, r++)
				if (pos[t] < p->n_pos)
					out[pos[t]] += rm[r] - each;
		}
	}
}

/* The step's two softmax calls: the exact and tail rows first (their
 * log-mass routes the landmark router), then, after the zooms, every
 * compressed span's rows with the first call's result carried, so the
 * two make ONE softmax (backend_mix.carry_lse). A probe's rows of the
 * first call are rescaled by that call's final share. */
static int mix_call(struct sekv_ctx *c, int layer, int second, const float *q, float *out)
{
	const struct sekv_mem *m = c->m;
	int n1 = m->n_exact + c->blk[1].n, rc;
	struct backend_probe pr = c->pr;
	struct backend_mix mx = { .q = q, .out = second ? out : c->out_exact, .n_head = m->n_head,
		.n_head_kv = m->n_head_kv, .d_head = m->d_h, .scale = c->q_scale,
		.blk = second ? c->blk + (size_t)m->n_head_kv * 2 : c->blk,
		.n_blk = second ? c->n_blk - 2 : 2,
		.carry_lse = second ? c->lse_exact : NULL, .carry_out = second ? c->out_exact : NULL,
		.lse = second ? c->lse_all : c->lse_exact };

	if (pr.n > 0) {
		/* the second call's rows follow the first call's */
		for (int i = 0; second && i < pr.n; i++)
			pr.mass[i] += n1;
		pr.n_key = second ? c->n_row - n1 : n1;
		mx.probe = &pr;
	}
	if ((rc = c->be->ops->attention_mix(c->be, c->ws, &mx)) || !second || !mx.probe)
		return rc;
	for (int i = 0; i < pr.n; i++) {
		int h = pr.head[i];
		float f = c->lse_all[h] > -INFINITY ? expf(c->lse_exact[h] - c->lse_all[h]) : 0.0f;
		for (int r = 0; r < n1; r++)
			c->probe_row[(size_t)h * c->n_row + r] *= f;
	}
	probe_end(c, layer);
	return SEKV_OK;
}

int sekv_attend(void *ctx, int layer, int pos, const float *q,
		const float *k, const float *v, float *out)
{
	struct sekv_ctx *c = ctx;
	const struct sekv_mem *m;
	struct sekv_stats *st;
	size_t tail = 0, recon = 0;
	const float *qm;
	int l = -1, idx, n_cand = 0, rc;

	if (!c || !q || !k || !v || !out)
		return SEKV_EINVAL;
	m = c->m;
	st = &c->st;
	for (int i = 0; i < m->n_layer; i++)
		if (m->layer_id[i] == layer)
			l = i;
	idx = pos - m->n_tok;
	if (l < 0 || idx < c->tail_first || idx - c->tail_first >= c->tail_cap)
		return SEKV_EINVAL;
	if (idx > c->n_tail[l])
		return SEKV_EINVAL;   /* rows must be appended in order */
	if (pos != c->last_pos)
		new_step(c, pos, idx);
	sekv_dev_put_tail(c, l, idx - c->tail_first, k, v);
	c->n_tail[l] = idx + 1;
	c->pr.n = 0;
	if (c->probe)
		model_probe_backend(c->probe, layer, m->n_head, c->probe_row, (size_t)c->n_row,
				    c->n_row, &c->pr);

	if (c->xk[l])
		sekv_exact_mass(c, l, q);
	mix_blocks(c, l, 0);
	qm = sekv_dev_query(c, l, q);
	if (c->question && c->router != SEKV_ROUTER_NONE)
		sekv_route_all(c, &n_cand);
	if ((rc = mix_call(c, layer, 0, qm, out)) ||
	    (c->router != SEKV_ROUTER_NONE && !c->question && (rc = sekv_route(c, l, q, &n_cand))))
		return rc;
	rc = c->zoom_scan > 0 && !c->question ?
	     sekv_zoom_rows(c, l, q, zoom_allow(c, l, idx), &c->recon_layer[l]) :
	     zoom(c, l, n_cand, zoom_allow(c, l, idx), &c->recon_layer[l]);
	if (rc)
		return rc;
	if (c->xk[l])
		sekv_add_mass_recall(c, l);
	mix_blocks(c, l, 1);
	if ((rc = mix_call(c, layer, 1, qm, out)))
		return rc;
	if (c->xk[l] && c->xv[l])
		sekv_add_attn_err(c, l, q, out);

	for (int i = 0; i < m->n_layer; i++) {
		tail += (size_t)(c->n_tail[i] - c->tail_first) * c->row_bytes;
		recon += c->recon_layer[i];
	}
	st->tail_bytes = tail;
	if (c->question) {
		/* the question turn's rows live in the host tier's scratch */
		if (recon > st->question_host_bytes)
			st->question_host_bytes = recon;
		recon = 0;
	}
	st->recon_bytes = recon;
	st->resident_bytes = m->static_bytes + tail + recon;
	st->read_bytes = st->resident_bytes + st->factor_read_bytes;
	if (st->resident_bytes > st->peak_resident_bytes)
		st->peak_resident_bytes = st->resident_bytes;
	return SEKV_OK;
}

void sekv_ctx_question(struct sekv_ctx *c, int on)
{
	if (!c->question_exact)
		return;
	c->question = on != 0;
	if (on)
		c->st.question_host_bytes = 0;
}

int sekv_ctx_evict_tail(struct sekv_ctx *c, int pos)
{
	const struct sekv_mem *m = c->m;
	int first = pos - m->n_tok, lo = c->n_tail[0];
	size_t row = (size_t)m->n_head_kv * m->d_h;

	for (int l = 1; l < m->n_layer; l++)
		if (c->n_tail[l] < lo)
			lo = c->n_tail[l];
	if (first < c->tail_first || first > lo)
		return SEKV_EINVAL;
	int drop = first - c->tail_first;
	size_t es = c->dev_rows ? 1 : sizeof(uint16_t), sr = (size_t)m->n_head_kv * sizeof(float);
	/* int4 values: a row's bytes are half its elements, its scales d_h / 32 */
	size_t vr = c->v4 ? row / 2 : row * es, vs = c->v4 ? sr * (size_t)(m->d_h / QUANT_I4_GROUP) : sr;
	for (int l = 0; l < m->n_layer && drop > 0; l++) {
		size_t n = (size_t)(c->n_tail[l] - first), at = (size_t)l * c->tail_cap;
		size_t from = at + (size_t)drop;
		c->be->ops->buf_copy(c->be, c->tail_k, at * row * es, c->tail_k, from * row * es,
				     n * row * es);
		c->be->ops->buf_copy(c->be, c->tail_v, at * vr, c->tail_v, from * vr, n * vr);
		if (c->dev_rows) {
			c->be->ops->buf_copy(c->be, c->tail_ks, at * sr, c->tail_ks, from * sr, n * sr);
			c->be->ops->buf_copy(c->be, c->tail_vs, at * vs, c->tail_vs, from * vs, n * vs);
		}
	}
	c->tail_first = first;
	c->st.tail_bytes = 0;
	for (int l = 0; l < m->n_layer; l++)
		c->st.tail_bytes += (size_t)(c->n_tail[l] - first) * c->row_bytes;
	return SEKV_OK;
}

int sekv_ctx_zoomed_rows(const struct sekv_ctx *c, int l, int kv, int comp, int32_t *pos, int cap)
{
	const struct sekv_mem *m = c->m;
	size_t id = (size_t)kv * m->n_comp + comp;
	int n;

	if (l < 0 || l >= m->n_layer || l != c->zoomed_layer || kv < 0 || kv >= m->n_head_kv ||
	    comp < 0 || comp >= m->n_comp || cap < 0)
		return SEKV_EINVAL;
	if (c->zoom_row[id] < 0)
		return 0;
	n = c->zoom_win[2 * id + 1];
	for (int i = 0; i < n && i < cap; i++)
		pos[i] = c->recon_pos[(size_t)c->rec_base[l] + c->zoom_row[id] + i];
	return n;
}

int sekv_ctx_tail_rows(const struct sekv_ctx *c)
{
	int n = 0;
	for (int l = 0; l < c->m->n_layer; l++)
		if (c->n_tail[l] - c->tail_first > n)
			n = c->n_tail[l] - c->tail_first;
	return n;
}

int sekv_ctx_tail_get(const struct sekv_ctx *c, int layer, int pos0, int n, uint16_t *k,
		      uint16_t *v)
{
	const struct sekv_mem *m = c->m;
	int first = pos0 - m->n_tok;

	if (layer < 0 || layer >= m->n_layer || n < 0 || first < c->tail_first ||
	    first + n > c->n_tail[layer])
		return SEKV_EINVAL;
	if (n == 0)
		return SEKV_OK;
	return sekv_dev_get_tail(c, layer, first - c->tail_first, n, k, v);
}
