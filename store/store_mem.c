/* store_mem.c - the SeKV memory of a document (engine/sekv/sekv.h) in the
 * mem and mem_layer tables (schema.c): one row of shapes and per-token
 * arrays, then one row per global layer holding that layer's summaries,
 * exact rows, router and all its factors packed in factor order (u and v
 * at the memory's type, mem.factor_f16; version 1 files load as fp32).
 * Invariant: what is written passes the same layout checks (spans, exact
 * positions, ranks) that loading applies, and loading checks every blob
 * length against the shapes before anything is copied. Sizes are computed
 * saturating, so a corrupt shape can only make a length mismatch.
 */
#include "store/store_int.h"
#include "engine/base/err.h"
#include "engine/quant/quant.h"
#include "engine/sekv/sekv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t sat_mul(size_t a, size_t b)
{
	return a && b > SIZE_MAX / a ? SIZE_MAX : a * b;
}

static size_t sat_add(size_t a, size_t b)
{
	return b > SIZE_MAX - a ? SIZE_MAX : a + b;
}

/* The shapes every size of a memory follows. */
struct mem_shape {
	int n_tok, n_layer, n_head, n_head_kv, d_h, n_span, n_exact, n_comp;
	int32_t *comp_len;  /* [n_comp] lengths of the compressed spans */
	int factor_f16;     /* factors' u, v: 1 fp16, 0 fp32 (s always fp32) */
	int lm_len;         /* tokens per landmark block, 0: none */
	int bar_f32;        /* stored k_bar, v_bar are fp32 (before schema 6) */
	size_t n_lm;        /* landmark blocks (spans_check) */
	int no_router;      /* a session's slice: no tau, route_w stored */
};

/* Where a memory's rows go: the document's mem and mem_layer, or a
 * session's slice in session_part and session_part_layer (whose
 * statements number their parameters alike, see store.c). */
struct mem_dest {
	enum store_st row, layer;
	int64_t key;        /* documents.id or sessions.id */
	int part;           /* 1: a session's slice (idx, pos0, h_next bound) */
	int idx;
	int32_t pos0;
	float h_next;
};

#define MEM_MAX_LM_LEN 65536

/* Scalar shape fields in range. Returns 0 or 1 (bad). */
static int shape_bad(const struct mem_shape *sh)
{
	return sh->n_tok < 0 || sh->n_layer < 1 || sh->n_layer > STORE_MAX_DIM ||
	       sh->n_head < 1 || sh->n_head > STORE_MAX_DIM || sh->n_head_kv < 1 ||
	       sh->n_head_kv > STORE_MAX_DIM || sh->n_head % sh->n_head_kv ||
	       sh->d_h < 1 || sh->d_h > STORE_MAX_DIM || sh->n_span < 0 ||
	       sh->n_span > sh->n_tok || sh->n_exact < 0 || sh->n_exact > sh->n_tok;
}

/* Spans ascending, non-overlapping, inside 0..n_tok, full 0/1; fills
 * sh->n_comp and sh->comp_len (malloc'ed). Returns -1, the bad span's
 * index, or -2 when out of memory. */
static int spans_check(struct mem_shape *sh, const struct sekv_span *span)
{
	int64_t end = 0;

	sh->n_comp = 0;
	for (int i = 0; i < sh->n_span; i++) {
		if (span[i].start < end || span[i].len < 1 ||
		    span[i].len > sh->n_tok - span[i].start ||
		    (span[i].full != 0 && span[i].full != 1))
			return i;
		end = (int64_t)span[i].start + span[i].len;
		sh->n_comp += !span[i].full;
	}
	sh->comp_len = malloc((size_t)(sh->n_comp ? sh->n_comp : 1) * sizeof *sh->comp_len);
	if (!sh->comp_len)
		return -2;
	sh->n_lm = 0;
	for (int i = 0, c = 0; i < sh->n_span; i++)
		if (!span[i].full) {
			sh->comp_len[c++] = span[i].len;
			if (sh->lm_len > 0)
				sh->n_lm += (size_t)(span[i].len + sh->lm_len - 1) / (size_t)sh->lm_len;
		}
	return -1;
}

/* Exact positions strictly ascending inside 0..n_tok. -1 or bad index. */
static int exact_check(const struct mem_shape *sh, const int32_t *pos)
{
	for (int i = 0; i < sh->n_exact; i++)
		if (pos[i] < 0 || pos[i] >= sh->n_tok || (i && pos[i] <= pos[i - 1]))
			return i;
	return -1;
}

static size_t n_fac_layer(const struct mem_shape *sh)
{
	return sat_mul(sat_mul((size_t)sh->n_comp, (size_t)sh->n_head_kv), 2);
}

/* Ranks [n_layer][n_comp][n_head_kv][2]: SEKV_RANK_RAW, SEKV_RANK_RAW8
 * or in 0..min(len, d_h). -1 or index. */
static int64_t ranks_check(const struct mem_shape *sh, const int32_t *ranks)
{
	size_t nf = n_fac_layer(sh), i = 0;

	for (int l = 0; l < sh->n_layer; l++)
		for (size_t f = 0; f < nf; f++, i++) {
			int32_t len = sh->comp_len[f / ((size_t)sh->n_head_kv * 2)];
			if (!sekv_rank_is_rows(ranks[i]) &&
			    (ranks[i] < 0 || ranks[i] > len || ranks[i] > sh->d_h))
				return (int64_t)i;
		}
	return -1;
}

/* Bytes of factor f of a layer at rank r in the packed s, u, v blobs
 * (a row factor's rows are packed as its u, an int8 one's scales as its
 * s; sekv_factor_bytes). */
static void fac_one(const struct mem_shape *sh, size_t f, int32_t r, size_t *ns,
		    size_t *nu, size_t *nv)
{
	int len = sh->comp_len[f / ((size_t)sh->n_head_kv * 2)];

	sekv_factor_bytes(r, len, sh->d_h, sh->factor_f16, ns, nu, nv);
}

/* Byte counts of one layer's packed s, u, v (ranks of that layer). */
static void fac_counts(const struct mem_shape *sh, const int32_t *ranks,
		       size_t *ns, size_t *nu, size_t *nv)
{
	size_t nf = n_fac_layer(sh), a, b, c;

	*ns = *nu = *nv = 0;
	for (size_t f = 0; f < nf; f++) {
		fac_one(sh, f, ranks[f], &a, &b, &c);
		*ns += a;
		*nu += b;
		*nv += c;
	}
}

/* Per-layer element counts of the fixed-size arrays. */
struct layer_counts {
	size_t tau, route_w, bar, exact, lm, lm_s;
};

static struct layer_counts layer_counts(const struct mem_shape *sh)
{
	size_t row = sat_mul((size_t)sh->n_head_kv, (size_t)sh->d_h);
	struct layer_counts c;

	c.tau = (size_t)sh->n_head;
	c.route_w = sat_mul(sat_mul((size_t)sh->n_head, SEKV_D_ROUTE), (size_t)sh->d_h);
	c.bar = sat_mul((size_t)sh->n_comp, row);
	c.exact = sat_mul((size_t)sh->n_exact, row);
	c.lm = sat_mul(sh->n_lm, row);
	c.lm_s = sat_mul(sh->n_lm, (size_t)sh->n_head_kv);
	return c;
}

/* Checks m's layout for writing; fills sh and ranks (malloc'ed). */
static int mem_layout(const struct sekv_mem *m, struct mem_shape *sh, int32_t **ranks,
		      const char *obj, char *err, size_t errlen)
{
	static const char what[] = "store_doc_put_mem";
	int64_t bad64;
	size_t nf;
	int bad;

	*ranks = NULL;
	*sh = (struct mem_shape){ m->n_tok, m->n_layer, m->n_head, m->n_head_kv, m->d_h,
				  m->n_span, m->n_exact, 0, NULL, m->factor_f16, m->lm_len, 0, 0, 0 };
	if (shape_bad(sh) || (m->factor_f16 != 0 && m->factor_f16 != 1) ||
	    m->lm_len < 0 || m->lm_len > MEM_MAX_LM_LEN || (sh->n_span && !m->span) || !m->layer_id || !m->tau ||
	    !m->route_w || (sh->n_tok && (!m->tokens || !m->surprisal || !m->is_anchor)) ||
	    (sh->n_exact && (!m->exact_pos || !m->exact_k || !m->exact_v)))
		return sekv_errf(err, errlen, SEKV_EINVAL, "%s: %s: bad memory shape", what, obj);
	if ((bad = spans_check(sh, m->span)) != -1)
		return bad == -2 ? sekv_errf(err, errlen, SEKV_ENOMEM, "%s: %s: out of memory", what, obj)
			: sekv_errf(err, errlen, SEKV_EINVAL, "%s: %s: span %d is malformed",
				    what, obj, bad);
	if (m->n_comp != sh->n_comp || (sh->n_comp && (!m->comp_span || !m->k_bar || !m->v_bar ||
						       !m->fac)))
		return sekv_errf(err, errlen, SEKV_EINVAL, "%s: %s: n_comp %d, spans say %d",
				 what, obj, m->n_comp, sh->n_comp);
	if ((size_t)m->n_lm != sh->n_lm || (sh->n_lm && (!m->lm_k || !m->lm_s)))
		return sekv_errf(err, errlen, SEKV_EINVAL, "%s: %s: %d landmarks, spans say %zu",
				 what, obj, m->n_lm, sh->n_lm);
	for (int i = 0, c = 0; i < sh->n_span; i++)
		if (!m->span[i].full && m->comp_span[c++] != i)
			return sekv_errf(err, errlen, SEKV_EINVAL,
					 "%s: %s: comp_span[%d] is not span %d", what, obj, c - 1, i);
	if ((bad = exact_check(sh, m->exact_pos)) != -1)
		return sekv_errf(err, errlen, SEKV_EINVAL, "%s: %s: exact_pos[%d] out of order",
				 what, obj, bad);
	nf = (size_t)sh->n_layer * n_fac_layer(sh);
	*ranks = malloc((nf ? nf : 1) * sizeof **ranks);
	if (!*ranks)
		return sekv_errf(err, errlen, SEKV_ENOMEM, "%s: %s: out of memory", what, obj);
	for (size_t f = 0; f < nf; f++) {
		const struct sekv_factor *fc = &m->fac[f];
		(*ranks)[f] = fc->rank;
		if ((fc->rank > 0 && (!fc->u || !fc->s || !fc->v)) ||
		    (sekv_rank_is_rows(fc->rank) && !fc->u) ||
		    (fc->rank == SEKV_RANK_RAW8 && !fc->s))
			return sekv_errf(err, errlen, SEKV_EINVAL, "%s: %s: factor %zu has no arrays",
					 what, obj, f);
	}
	if ((bad64 = ranks_check(sh, *ranks)) != -1)
		return sekv_errf(err, errlen, SEKV_EINVAL, "%s: %s: factor %lld has a bad rank",
				 what, obj, (long long)bad64);
	return 0;
}

static int insert_mem_row(struct store *s, const struct mem_dest *d, const struct sekv_mem *m,
			  const struct mem_shape *sh, const int32_t *ranks,
			  char *err, size_t errlen)
{
	int32_t *sp = malloc((size_t)(sh->n_span ? sh->n_span : 1) * 3 * sizeof *sp);
	sqlite3_stmt *st;
	int rc;

	if (!sp)
		return sekv_errf(err, errlen, SEKV_ENOMEM, "store_doc_put_mem: mem: out of memory");
	for (int i = 0; i < sh->n_span; i++) {
		sp[3 * i] = m->span[i].start;
		sp[3 * i + 1] = m->span[i].len;
		sp[3 * i + 2] = m->span[i].full;
	}
	if ((rc = store_stmt(s, d->row, &st, err, errlen)))
		goto out;
	sqlite3_bind_int64(st, 1, d->key);
	if (d->part) {
		sqlite3_bind_int(st, 24, d->idx);
		sqlite3_bind_int(st, 25, d->pos0);
		sqlite3_bind_double(st, 26, d->h_next);
	}
	sqlite3_bind_int(st, 2, sh->n_tok);
	sqlite3_bind_int(st, 3, sh->n_layer);
	sqlite3_bind_int(st, 4, sh->n_head);
	sqlite3_bind_int(st, 5, sh->n_head_kv);
	sqlite3_bind_int(st, 6, sh->d_h);
	sqlite3_bind_int(st, 7, m->r_max);
	sqlite3_bind_double(st, 8, m->alpha_used);
	sqlite3_bind_text(st, 9, m->note, (int)strnlen(m->note, sizeof m->note), SQLITE_STATIC);
	sqlite3_bind_int(st, 10, sh->n_span);
	sqlite3_bind_int(st, 11, sh->n_exact);
	store_bind_blob(st, 12, m->layer_id, (size_t)sh->n_layer * sizeof(int32_t));
	store_bind_blob(st, 13, sp, (size_t)sh->n_span * 3 * sizeof *sp);
	store_bind_blob(st, 14, m->exact_pos, (size_t)sh->n_exact * sizeof(int32_t));
	store_bind_blob(st, 15, ranks, (size_t)sh->n_layer * n_fac_layer(sh) * sizeof *ranks);
	store_bind_blob(st, 16, m->tokens, (size_t)sh->n_tok * sizeof(int32_t));
	store_bind_blob(st, 17, m->surprisal, (size_t)sh->n_tok * sizeof(float));
	store_bind_blob(st, 18, m->is_anchor, (size_t)sh->n_tok);
	sqlite3_bind_int(st, 19, sh->factor_f16);
	sqlite3_bind_int(st, 20, sh->lm_len);
	sqlite3_bind_double(st, 21, m->rank_energy);
	if (!d->part)
		sqlite3_bind_double(st, 27, m->rank_energy_v);
	sqlite3_bind_double(st, 22, m->rope_base);
	sqlite3_bind_int(st, 23, m->rope_base > 0 ? m->n_rot : 0);
	if ((rc = store_step(s, st)) != SQLITE_DONE)
		rc = store_dberr(s, rc, err, errlen, "store_doc_put_mem", d->part ? "session_part" : "mem");
	else
		rc = 0;
out:
	free(sp);
	return rc;
}

/* Packs layer l's factors into ps/pu/pv (capacity from fac_counts; u and
 * v at their stored type, bytes as they are in memory). */
static void pack_factors(const struct sekv_mem *m, const struct mem_shape *sh, int l,
			 char *ps, char *pu, char *pv)
{
	size_t nf = n_fac_layer(sh);
	const struct sekv_factor *f = m->fac + (size_t)l * nf;

	for (size_t i = 0; i < nf; i++, f++) {
		size_t ns, nu, nv;
		fac_one(sh, i, f->rank, &ns, &nu, &nv);
		if (ns)
			memcpy(ps, f->s, ns);
		if (nu)
			memcpy(pu, f->u, nu);
		if (nv)
			memcpy(pv, f->v, nv);
		ps += ns;
		pu += nu;
		pv += nv;
	}
}

static int insert_layers(struct store *s, const struct mem_dest *d, const struct sekv_mem *m,
			 const struct mem_shape *sh, const int32_t *ranks,
			 char *err, size_t errlen)
{
	struct layer_counts c = layer_counts(sh);
	size_t nf = n_fac_layer(sh), ns, nu, nv, cap = 0;
	char *buf = NULL;
	sqlite3_stmt *st;
	int rc = 0;

	for (int l = 0; l < sh->n_layer; l++) {
		fac_counts(sh, ranks + (size_t)l * nf, &ns, &nu, &nv);
		if (ns + nu + nv > cap)
			cap = ns + nu + nv;
	}
	buf = malloc(cap ? cap : 1);
	if (!buf)
		return sekv_errf(err, errlen, SEKV_ENOMEM, "store_doc_put_mem: mem_layer: out of memory");
	for (int l = 0; l < sh->n_layer && rc == 0; l++) {
		fac_counts(sh, ranks + (size_t)l * nf, &ns, &nu, &nv);
		pack_factors(m, sh, l, buf, buf + ns, buf + ns + nu);
		if ((rc = store_stmt(s, d->layer, &st, err, errlen)))
			break;
		sqlite3_bind_int64(st, 1, d->key);
		sqlite3_bind_int(st, 2, l);
		if (d->part)
			sqlite3_bind_int(st, 14, d->idx);
		store_bind_blob(st, 3, m->tau + l * c.tau, c.tau * sizeof(float));
		store_bind_blob(st, 4, m->route_w + l * c.route_w, c.route_w * sizeof(float));
		store_bind_blob(st, 5, m->k_bar + l * c.bar, c.bar * sizeof(uint16_t));
		store_bind_blob(st, 6, m->v_bar + l * c.bar, c.bar * sizeof(uint16_t));
		store_bind_blob(st, 7, m->exact_k + l * c.exact, c.exact * sizeof(uint16_t));
		store_bind_blob(st, 8, m->exact_v + l * c.exact, c.exact * sizeof(uint16_t));
		store_bind_blob(st, 9, buf, ns);
		store_bind_blob(st, 10, buf + ns, nu);
		store_bind_blob(st, 11, buf + ns + nu, nv);
		if (c.lm) {
			store_bind_blob(st, 12, m->lm_k + l * c.lm, c.lm);
			store_bind_blob(st, 13, m->lm_s + l * c.lm_s, c.lm_s * sizeof(float));
		} else {
			sqlite3_bind_null(st, 12);
			sqlite3_bind_null(st, 13);
		}
		if ((rc = store_step(s, st)) != SQLITE_DONE)
			rc = store_dberr(s, rc, err, errlen, "store_doc_put_mem", "mem_layer");
		else
			rc = 0;
		/* the statement holds buf (SQLITE_STATIC) until reset */
		sqlite3_reset(st);
	}
	free(buf);
	return rc;
}

int store_doc_put_mem(struct store *s, int64_t doc, const struct sekv_mem *m,
		      double budget, char *err, size_t errlen)
{
	static const char what[] = "store_doc_put_mem";
	struct mem_shape sh = {0};
	struct store_doc d;
	int32_t *ranks = NULL;
	sqlite3_stmt *st;
	char obj[48];
	int rc;

	snprintf(obj, sizeof obj, "doc %lld", (long long)doc);
	if (!m)
		return sekv_errf(err, errlen, SEKV_EINVAL, "%s: %s: no memory", what, obj);
	if ((rc = mem_layout(m, &sh, &ranks, obj, err, errlen)))
		goto out;
	if ((rc = store_tx_begin(s, err, errlen)))
		goto out;
	if ((rc = store_doc_read(s, doc, &d, what, err, errlen)))
		goto fail;
	if (sh.n_layer != d.n_layer_global || sh.n_head_kv != d.n_head_kv || sh.d_h != d.d_h) {
		rc = sekv_errf(err, errlen, SEKV_EMISMATCH,
			       "%s: %s: memory of %d layers x %d KV heads x d_h %d, document has %d x %d x %d",
			       what, obj, sh.n_layer, sh.n_head_kv, sh.d_h, d.n_layer_global,
			       d.n_head_kv, d.d_h);
		goto fail;
	}
	if (sh.n_tok > d.n_tok) {
		rc = sekv_errf(err, errlen, SEKV_EINVAL, "%s: %s: memory of %d tokens, %lld stored",
			       what, obj, sh.n_tok, (long long)d.n_tok);
		goto fail;
	}
	if ((rc = store_stmt(s, ST_MEM_DELETE, &st, err, errlen)))
		goto fail;
	sqlite3_bind_int64(st, 1, doc);
	if ((rc = store_step(s, st)) != SQLITE_DONE) {
		rc = store_dberr(s, rc, err, errlen, what, "mem");
		goto fail;
	}
	struct mem_dest dest = { ST_MEM_INSERT, ST_MEML_INSERT, doc, 0, 0, 0, 0 };
	if ((rc = insert_mem_row(s, &dest, m, &sh, ranks, err, errlen)) ||
	    (rc = insert_layers(s, &dest, m, &sh, ranks, err, errlen)) ||
	    (rc = store_stmt(s, ST_DOC_READY, &st, err, errlen)))
		goto fail;
	sqlite3_bind_int64(st, 1, doc);
	sqlite3_bind_double(st, 2, budget);
	sqlite3_bind_int(st, 3, m->r_max);
	sqlite3_bind_double(st, 4, m->alpha_used);
	if ((rc = store_step(s, st)) != SQLITE_DONE) {
		rc = store_dberr(s, rc, err, errlen, what, "documents");
		goto fail;
	}
	/* ready: nothing left to resume */
	if ((rc = store_stmt(s, ST_ING_DELETE, &st, err, errlen)))
		goto fail;
	sqlite3_bind_int64(st, 1, doc);
	if ((rc = store_step(s, st)) != SQLITE_DONE) {
		rc = store_dberr(s, rc, err, errlen, what, "ingest_state");
		goto fail;
	}
	/* no ingest writes it any more, so its lock goes (within a caller's
	 * transaction that fails after, that ingest is giving up on it) */
	if ((rc = store_tx_commit(s, err, errlen)) == 0 && s->lock_doc == doc)
		store_doc_unlock(s);
	goto out;
fail:
	store_tx_rollback(s);
out:
	store_stmt_reset_all(s);
	free(ranks);
	free(sh.comp_len);
	return rc;
}

/* Columns of mem.factor_f16 and mem.lm_len in ST_MEM_GET (after the
 * blobs, see schema.c). */
#define MEM_COL_FACTOR_F16 17
#define MEM_COL_LM_LEN 18
#define MEM_COL_BAR_F16 19
#define MEM_COL_RANK_ENERGY 20
#define MEM_COL_KEY_ROPE_BASE 21
#define MEM_COL_N_ROT 22
#define MEM_COL_RANK_ENERGY_V 23

/* Reads the mem row's shapes and factor type and checks them against the
 * doc row. */
static int read_shape(sqlite3_stmt *st, const struct store_doc *d, int no_router,
		      struct mem_shape *sh, char *err, size_t errlen)
{
	int64_t v[10], f16 = sqlite3_column_int64(st, MEM_COL_FACTOR_F16);
	int64_t lm_len = sqlite3_column_int64(st, MEM_COL_LM_LEN);
	int64_t bar_f16 = sqlite3_column_int64(st, MEM_COL_BAR_F16);

	/* columns 6 (alpha_used) and 7 (note) are not integers */
	for (int i = 0; i < 10; i++)
		v[i] = i == 6 || i == 7 ? 0 : sqlite3_column_int64(st, i);
	for (int i = 0; i < 10; i++)
		if (v[i] < INT32_MIN || v[i] > INT32_MAX)
			return sekv_errf(err, errlen, SEKV_EFORMAT,
					 "store_doc_get_mem: doc %lld: mem.%s: %lld out of range",
					 (long long)d->id, sqlite3_column_name(st, i), (long long)v[i]);
	if (sqlite3_column_type(st, MEM_COL_FACTOR_F16) != SQLITE_INTEGER || (f16 != 0 && f16 != 1))
		return sekv_errf(err, errlen, SEKV_EFORMAT,
				 "store_doc_get_mem: doc %lld: mem.factor_f16: %lld is not 0 or 1",
				 (long long)d->id, (long long)f16);
	if (sqlite3_column_type(st, MEM_COL_LM_LEN) != SQLITE_INTEGER || lm_len < 0 ||
	    lm_len > MEM_MAX_LM_LEN)
		return sekv_errf(err, errlen, SEKV_EFORMAT,
				 "store_doc_get_mem: doc %lld: mem.lm_len: %lld out of range",
				 (long long)d->id, (long long)lm_len);
	if (sqlite3_column_type(st, MEM_COL_BAR_F16) != SQLITE_INTEGER || (bar_f16 != 0 && bar_f16 != 1))
		return sekv_errf(err, errlen, SEKV_EFORMAT,
				 "store_doc_get_mem: doc %lld: mem.bar_f16: %lld is not 0 or 1",
				 (long long)d->id, (long long)bar_f16);
	*sh = (struct mem_shape){ (int)v[0], (int)v[1], (int)v[2], (int)v[3], (int)v[4],
				  (int)v[8], (int)v[9], 0, NULL, (int)f16, (int)lm_len, !bar_f16, 0,
				  no_router };
	/* a session's slice lies past the document's tokens */
	if (shape_bad(sh) || sh->n_layer != d->n_layer_global || sh->n_head_kv != d->n_head_kv ||
	    sh->d_h != d->d_h || (!no_router && sh->n_tok > d->n_tok))
		return sekv_errf(err, errlen, SEKV_EFORMAT,
				 "store_doc_get_mem: doc %lld: mem: shape %d tok x %d layers x %d heads"
				 " x %d KV heads x d_h %d (%d spans, %d exact) disagrees with the document",
				 (long long)d->id, sh->n_tok, sh->n_layer, sh->n_head, sh->n_head_kv,
				 sh->d_h, sh->n_span, sh->n_exact);
	return 0;
}

/* Blob columns of the mem row (ST_MEM_GET order). */
enum { MB_LAYER_ID, MB_SPANS, MB_EXACT_POS, MB_RANKS, MB_TOKENS, MB_SURPRISAL,
       MB_IS_ANCHOR, MB_COUNT };

/* The mem row's blobs into b[], each checked against the shapes; the
 * spans decoded into span [n_span] and, with ranks and exact positions,
 * validated (sh->comp_len filled). */
static int mem_row_blobs(sqlite3_stmt *st, struct mem_shape *sh, int64_t doc,
			 const void **b, struct sekv_span *span, char *err, size_t errlen)
{
	static const char what[] = "store_doc_get_mem";
	static const char *const col[MB_COUNT] = { "layer_id", "spans", "exact_pos", "ranks",
						   "tokens", "surprisal", "is_anchor" };
	size_t bytes[MB_COUNT];
	int64_t bad = -1;
	int rc = 0;

	bytes[MB_LAYER_ID] = (size_t)sh->n_layer * 4;
	bytes[MB_SPANS] = (size_t)sh->n_span * 12;
	bytes[MB_EXACT_POS] = (size_t)sh->n_exact * 4;
	bytes[MB_TOKENS] = bytes[MB_SURPRISAL] = (size_t)sh->n_tok * 4;
	bytes[MB_IS_ANCHOR] = (size_t)sh->n_tok;
	for (int i = 0; i < MB_COUNT && rc == 0; i++)
		if (i != MB_RANKS)
			rc = store_col_blob(st, 10 + i, bytes[i], &b[i], what, doc, "mem", col[i],
					    err, errlen);
	if (rc)
		return rc;
	/* the ranks' count follows from the spans: check those first */
	for (int i = 0; i < sh->n_span; i++) {
		const char *p = (const char *)b[MB_SPANS] + 12 * (size_t)i;
		memcpy(&span[i].start, p, 4);
		memcpy(&span[i].len, p + 4, 4);
		memcpy(&span[i].full, p + 8, 4);
	}
	bad = spans_check(sh, span);
	if (bad == -2)
		return sekv_errf(err, errlen, SEKV_ENOMEM, "%s: doc %lld: out of memory", what,
				 (long long)doc);
	if (bad != -1)
		return sekv_errf(err, errlen, SEKV_EFORMAT, "%s: doc %lld: mem.spans: span %lld is malformed",
				 what, (long long)doc, (long long)bad);
	bytes[MB_RANKS] = sat_mul(sat_mul((size_t)sh->n_layer, n_fac_layer(sh)), 4);
	if ((rc = store_col_blob(st, 10 + MB_RANKS, bytes[MB_RANKS], &b[MB_RANKS], what, doc,
				 "mem", col[MB_RANKS], err, errlen)))
		return rc;
	if ((bad = ranks_check(sh, b[MB_RANKS])) != -1)
		return sekv_errf(err, errlen, SEKV_EFORMAT,
				 "%s: doc %lld: mem.ranks: rank of factor %lld out of range",
				 what, (long long)doc, (long long)bad);
	if ((bad = exact_check(sh, b[MB_EXACT_POS])) != -1)
		return sekv_errf(err, errlen, SEKV_EFORMAT,
				 "%s: doc %lld: mem.exact_pos: position %lld out of order",
				 what, (long long)doc, (long long)bad);
	return 0;
}

/* The memory of the row st stands on (ST_MEM_GET's columns): shapes,
 * blobs and layout checked, then sekv_mem_alloc and the per-token arrays
 * copied. no_router: a session's slice (read_shape). */
static int mem_of_row(sqlite3_stmt *st, const struct store_doc *d, int no_router,
		      struct mem_shape *sh, struct sekv_mem **out, char *err, size_t errlen)
{
	static const char what[] = "store_doc_get_mem";
	const int64_t doc = d->id;
	const void *b[MB_COUNT] = {0};
	const unsigned char *note;
	struct sekv_span *span = NULL;
	struct sekv_mem *m = NULL;
	size_t n;
	int rc;

	if ((rc = read_shape(st, d, no_router, sh, err, errlen)) == 0 &&
	    !(span = malloc((size_t)(sh->n_span ? sh->n_span : 1) * sizeof *span)))
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "%s: doc %lld: out of memory", what,
			       (long long)doc);
	else if (rc == 0)
		rc = mem_row_blobs(st, sh, doc, b, span, err, errlen);
	if (rc)
		goto out;
	rc = sekv_mem_alloc(&m, sh->n_tok, sh->n_layer, sh->n_head, sh->n_head_kv, sh->d_h,
			    sh->n_span, span, sh->n_exact, b[MB_RANKS], sh->factor_f16, sh->lm_len);
	if (rc) {
		rc = sekv_errf(err, errlen, rc == SEKV_ENOMEM ? SEKV_ENOMEM : SEKV_EFORMAT,
			       "%s: doc %lld: mem: sekv_mem_alloc: %s", what, (long long)doc,
			       sekv_strerror(rc));
		goto out;
	}
	if (sh->n_layer)
		memcpy(m->layer_id, b[MB_LAYER_ID], (size_t)sh->n_layer * 4);
	if (sh->n_exact)
		memcpy(m->exact_pos, b[MB_EXACT_POS], (size_t)sh->n_exact * 4);
	if (sh->n_tok) {
		memcpy(m->tokens, b[MB_TOKENS], (size_t)sh->n_tok * 4);
		memcpy(m->surprisal, b[MB_SURPRISAL], (size_t)sh->n_tok * 4);
		memcpy(m->is_anchor, b[MB_IS_ANCHOR], (size_t)sh->n_tok);
	}
	m->r_max = sqlite3_column_int(st, 5);
	m->rank_energy = (float)sqlite3_column_double(st, MEM_COL_RANK_ENERGY);
	m->rank_energy_v = (float)sqlite3_column_double(st, MEM_COL_RANK_ENERGY_V);
	if (!(m->rank_energy >= 0 && m->rank_energy <= 1) ||
	    !(m->rank_energy_v >= 0 && m->rank_energy_v <= 1)) {
		rc = sekv_errf(err, errlen, SEKV_EFORMAT, "%s: doc %lld: mem.rank_energy: %g, %g not"
			       " in 0..1", what, (long long)doc, m->rank_energy, m->rank_energy_v);
		goto out;
	}
	m->rope_base = (float)sqlite3_column_double(st, MEM_COL_KEY_ROPE_BASE);
	m->n_rot = sqlite3_column_int(st, MEM_COL_N_ROT);
	if (!(m->rope_base == 0 || (m->rope_base > 1 && isfinite(m->rope_base) && m->n_rot >= 2 &&
				    m->n_rot % 2 == 0 && m->n_rot <= m->d_h))) {
		rc = sekv_errf(err, errlen, SEKV_EFORMAT, "%s: doc %lld: mem.key_rope_base %g over"
			       " mem.n_rot %d of %d dims is not a RoPE", what, (long long)doc,
			       m->rope_base, m->n_rot, m->d_h);
		goto out;
	}
	m->alpha_used = (float)sqlite3_column_double(st, 6);
	note = sqlite3_column_text(st, 7);
	n = note ? strlen((const char *)note) : 0;
	n = n < sizeof m->note ? n : sizeof m->note - 1;
	if (n)
		memcpy(m->note, note, n);
	m->note[n] = 0;
	*out = m;
	m = NULL;
out:
	sekv_mem_free(m);
	free(span);
	return rc;
}

/* The document's mem row (mem_of_row). */
static int load_mem_row(struct store *s, const struct store_doc *d, struct mem_shape *sh,
			struct sekv_mem **out, char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc;

	if ((rc = store_stmt(s, ST_MEM_GET, &st, err, errlen)))
		return rc;
	sqlite3_bind_int64(st, 1, d->id);
	rc = store_step(s, st);
	if (rc == SQLITE_DONE)
		rc = sekv_errf(err, errlen, SEKV_ENOTFOUND, "store_doc_get_mem: doc %lld: no memory stored",
			       (long long)d->id);
	else if (rc != SQLITE_ROW)
		rc = store_dberr(s, rc, err, errlen, "store_doc_get_mem", "mem");
	else
		rc = mem_of_row(st, d, 0, sh, out, err, errlen);
	sqlite3_reset(st);
	return rc;
}

/* n summary elements from a blob: fp16 as they are, or fp32 (stored
 * before schema 6) rounded to fp16. */
static void bar_copy(uint16_t *dst, const void *src, size_t n, int f32)
{
	if (!f32) {
		memcpy(dst, src, n * sizeof *dst);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		float x;
		memcpy(&x, (const char *)src + 4 * i, 4);
		dst[i] = quant_f32_to_f16(x);
	}
}

/* Copies one mem_layer row into layer l of m. */
static int load_layer(sqlite3_stmt *st, int l, const struct mem_shape *sh,
		      struct sekv_mem *m, int64_t doc, char *err, size_t errlen)
{
	static const char what[] = "store_doc_get_mem";
	static const char *const col[] = { "tau", "route_w", "k_bar", "v_bar", "exact_k",
					   "exact_v", "fac_s", "fac_u", "fac_v", "lm_k", "lm_s" };
	struct layer_counts c = layer_counts(sh);
	size_t nf = n_fac_layer(sh), ns, nu, nv, bytes[11];
	const void *b[11];
	const char *ps, *pu, *pv;
	struct sekv_factor *f;
	int rc;

	if (sqlite3_column_int64(st, 0) != l || l >= sh->n_layer)
		return sekv_errf(err, errlen, SEKV_EFORMAT,
				 "%s: doc %lld: mem_layer: row of layer %lld, expected layer %d of %d",
				 what, (long long)doc, (long long)sqlite3_column_int64(st, 0), l,
				 sh->n_layer);
	f = m->fac + (size_t)l * nf;
	ns = nu = nv = 0;
	for (size_t i = 0; i < nf; i++) {
		size_t a, bu, bv;
		fac_one(sh, i, f[i].rank, &a, &bu, &bv);
		ns = sat_add(ns, a);
		nu = sat_add(nu, bu);
		nv = sat_add(nv, bv);
	}
	bytes[0] = sh->no_router ? 0 : c.tau * 4;
	bytes[1] = sh->no_router ? 0 : sat_mul(c.route_w, 4);
	bytes[2] = bytes[3] = sat_mul(c.bar, sh->bar_f32 ? 4 : 2);
	bytes[4] = bytes[5] = sat_mul(c.exact, 2);
	bytes[6] = ns;
	bytes[7] = nu;
	bytes[8] = nv;
	bytes[9] = c.lm;
	bytes[10] = sat_mul(c.lm_s, 4);
	for (int i = 0; i < 11; i++)
		if ((rc = store_col_blob(st, 1 + i, bytes[i], &b[i], what, doc, "mem_layer", col[i],
					 err, errlen)))
			return rc;
	if (bytes[0])
		memcpy(m->tau + l * c.tau, b[0], bytes[0]);
	if (bytes[1])
		memcpy(m->route_w + l * c.route_w, b[1], bytes[1]);
	if (bytes[2]) {
		bar_copy(m->k_bar + l * c.bar, b[2], c.bar, sh->bar_f32);
		bar_copy(m->v_bar + l * c.bar, b[3], c.bar, sh->bar_f32);
	}
	if (bytes[4]) {
		memcpy(m->exact_k + l * c.exact, b[4], bytes[4]);
		memcpy(m->exact_v + l * c.exact, b[5], bytes[5]);
	}
	if (bytes[9]) {
		memcpy(m->lm_k + l * c.lm, b[9], bytes[9]);
		memcpy(m->lm_s + l * c.lm_s, b[10], bytes[10]);
	}
	ps = b[6];
	pu = b[7];
	pv = b[8];
	for (size_t i = 0; i < nf; i++) {
		size_t a, bu, bv;
		fac_one(sh, i, f[i].rank, &a, &bu, &bv);
		if (a)
			memcpy(f[i].s, ps, a);
		if (bu)
			memcpy(f[i].u, pu, bu);
		if (bv)
			memcpy(f[i].v, pv, bv);
		ps += a;
		pu += bu;
		pv += bv;
	}
	return 0;
}

int store_doc_get_mem(struct store *s, int64_t doc, struct sekv_mem **out,
		      char *err, size_t errlen)
{
	static const char what[] = "store_doc_get_mem";
	struct mem_shape sh = {0};
	struct sekv_mem *m = NULL;
	struct store_doc d;
	sqlite3_stmt *st;
	char obj[48];
	int rc, cnt = 0;

	*out = NULL;
	snprintf(obj, sizeof obj, "doc %lld", (long long)doc);
	if ((rc = store_tx_begin_read(s, err, errlen)))
		return rc;
	if ((rc = store_doc_read(s, doc, &d, what, err, errlen)) ||
	    (rc = load_mem_row(s, &d, &sh, &m, err, errlen)) ||
	    (rc = store_stmt(s, ST_MEML_GET, &st, err, errlen)))
		goto fail;
	sqlite3_bind_int64(st, 1, doc);
	while ((rc = store_step(s, st)) == SQLITE_ROW)
		if ((rc = load_layer(st, cnt++, &sh, m, doc, err, errlen)))
			goto fail;
	if (rc != SQLITE_DONE) {
		rc = store_dberr(s, rc, err, errlen, what, obj);
		goto fail;
	}
	if (cnt != sh.n_layer) {
		rc = sekv_errf(err, errlen, SEKV_EFORMAT, "%s: %s: mem_layer: %d rows for %d layers",
			       what, obj, cnt, sh.n_layer);
		goto fail;
	}
	if ((rc = store_tx_commit(s, err, errlen)) == 0) {
		sekv_mem_update_counts(m);
		*out = m;
		m = NULL;
	}
	goto out;
fail:
	store_tx_rollback(s);
out:
	sekv_mem_free(m);
	store_stmt_reset_all(s);
	free(sh.comp_len);
	return rc;
}

/* ---- a session's memory as slices (store_session.c) ------------------- */

int store_mem_put_part(struct store *s, int64_t session, int idx, int32_t pos0, float h_next,
		       const struct sekv_mem *m, char *err, size_t errlen)
{
	struct mem_dest dest = { ST_PART_INSERT, ST_PARTL_INSERT, session, 1, idx, pos0, h_next };
	struct mem_shape sh = {0};
	int32_t *ranks = NULL;
	sqlite3_stmt *st;
	char obj[64];
	int rc;

	snprintf(obj, sizeof obj, "session %lld part %d", (long long)session, idx);
	if ((rc = mem_layout(m, &sh, &ranks, obj, err, errlen)))
		goto out;
	if (idx < 0) {
		if ((rc = store_stmt(s, ST_PART_DELETE_OPEN, &st, err, errlen)))
			goto out;
		sqlite3_bind_int64(st, 1, session);
		if ((rc = store_step(s, st)) != SQLITE_DONE) {
			rc = store_dberr(s, rc, err, errlen, "store_session_put_mem", obj);
			goto out;
		}
	}
	if (!(rc = insert_mem_row(s, &dest, m, &sh, ranks, err, errlen)))
		rc = insert_layers(s, &dest, m, &sh, ranks, err, errlen);
out:
	free(ranks);
	free(sh.comp_len);
	return rc;
}

/* The layers of slice idx of session into m (shapes sh). */
static int part_layers(struct store *s, int64_t session, int idx, const struct mem_shape *sh,
		       struct sekv_mem *m, int64_t doc, char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc, cnt = 0;

	if ((rc = store_stmt(s, ST_PARTL_GET, &st, err, errlen)))
		return rc;
	sqlite3_bind_int64(st, 1, session);
	sqlite3_bind_int(st, 2, idx);
	while ((rc = store_step(s, st)) == SQLITE_ROW)
		if ((rc = load_layer(st, cnt++, sh, m, doc, err, errlen)))
			break;
	if (rc == SQLITE_DONE)
		rc = cnt == sh->n_layer ? 0
			: sekv_errf(err, errlen, SEKV_EFORMAT, "store_session_get_mem: session %lld part %d: "
				    "%d layer rows for %d layers", (long long)session, idx, cnt, sh->n_layer);
	else if (rc > 0)
		rc = store_dberr(s, rc, err, errlen, "store_session_get_mem", "session_part_layer");
	sqlite3_reset(st);
	return rc;
}

int store_mem_get_parts(struct store *s, int64_t session, const struct store_doc *d,
			struct sekv_mem ***parts, int32_t **pos0, int *n, float *h_next,
			char *err, size_t errlen)
{
	struct sekv_mem **v = NULL, *m = NULL;
	int32_t *p = NULL;
	sqlite3_stmt *st;
	int rc, cap = 0;

	*parts = NULL;
	*pos0 = NULL;
	*n = 0;
	*h_next = 0;
	if ((rc = store_stmt(s, ST_PART_GET, &st, err, errlen)))
		return rc;
	sqlite3_bind_int64(st, 1, session);
	while ((rc = store_step(s, st)) == SQLITE_ROW) {
		struct mem_shape sh = {0};
		int idx = sqlite3_column_int(st, 24);
		if (*n == cap) {
			cap = cap ? 2 * cap : 16;
			void *a = realloc(v, (size_t)cap * sizeof *v), *b = realloc(p, (size_t)cap * sizeof *p);
			v = a ? a : v;
			p = b ? b : p;
			if (!a || !b) {
				rc = sekv_errf(err, errlen, SEKV_ENOMEM, "store_session_get_mem: out of memory");
				break;
			}
		}
		p[*n] = sqlite3_column_int(st, 25);
		if (idx < 0)
			*h_next = (float)sqlite3_column_double(st, 26);
		rc = mem_of_row(st, d, 1, &sh, &m, err, errlen);
		if (!rc)
			rc = part_layers(s, session, idx, &sh, m, d->id, err, errlen);
		free(sh.comp_len);
		if (rc)
			break;
		v[(*n)++] = m;
		m = NULL;
	}
	if (rc == SQLITE_DONE)
		rc = 0;
	else if (rc > 0)
		rc = store_dberr(s, rc, err, errlen, "store_session_get_mem", "session_part");
	sqlite3_reset(st);
	sekv_mem_free(m);
	if (rc) {
		for (int i = 0; i < *n; i++)
			sekv_mem_free(v[i]);
		free(v);
		free(p);
		*n = 0;
		return rc;
	}
	*parts = v;
	*pos0 = p;
	return 0;
}
