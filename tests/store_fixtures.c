/* store_fixtures.c - what the store tests (tests/test_store_*.c) share:
 * xorshift random bytes, fresh database paths, synthetic SeKV memories and
 * their bitwise comparison, whole documents kept in memory (struct fixture)
 * to store and check, and raw SQLite access to what store/ wrote.
 * Contracts are in store_fixtures.h; the tests themselves live elsewhere.
 */
#include "tests/store_fixtures.h"
#include "tests/test.h"

#include "engine/quant/quant.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

uint64_t fixture_rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

int fixture_rnd_int(uint64_t *s, int lo, int hi) /* inclusive */
{
	return lo + (int)(fixture_rnd(s) % (uint64_t)(hi - lo + 1));
}

void fixture_rnd_fill(uint64_t *s, void *p, size_t n)
{
	unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)(fixture_rnd(s) >> 24);
}

const char *fixture_db_path(const char *name)
{
	static char buf[4][512];
	static int k;
	char *p = buf[k++ & 3], aux[600];

	snprintf(p, sizeof buf[0], "%s/%s.db", test_tmpdir(), name);
	unlink(p);
	snprintf(aux, sizeof aux, "%s-wal", p);
	unlink(aux);
	snprintf(aux, sizeof aux, "%s-shm", p);
	unlink(aux);
	snprintf(aux, sizeof aux, "%s-reserve", p);
	unlink(aux);
	return p;
}

struct sekv_mem *fixture_synth_mem(uint64_t seed, int n_tok, int n_layer, int n_head,
				    int n_head_kv, int d_h, int r_max, int max_span)
{
	uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
	struct sekv_span *span = malloc(sizeof *span * (size_t)(n_tok + 1));
	uint8_t *in_comp = calloc((size_t)n_tok + 1, 1);
	int32_t *ranks = NULL;
	struct sekv_mem *m = NULL;
	int n_span = 0, n_comp = 0, n_exact = 0, pos = n_tok < 4 ? n_tok : 4;
	int end = n_tok - fixture_rnd_int(&s, 0, 64);

	for (; pos < end; ) {
		int len = fixture_rnd_int(&s, 1, max_span);
		if (len > end - pos)
			len = end - pos;
		span[n_span] = (struct sekv_span){ pos, len, len < 4 };
		if (len >= 4) {
			n_comp++;
			memset(in_comp + pos, 1, (size_t)len);
		}
		n_span++;
		pos += len + (fixture_rnd(&s) % 3 == 0); /* an anchor between spans */
	}
	for (int i = 0; i < n_tok; i++)
		n_exact += !in_comp[i];
	ranks = malloc(sizeof *ranks * ((size_t)n_layer * n_comp * n_head_kv * 2 + 1));
	for (int l = 0, f = 0; l < n_layer; l++)
		for (int i = 0; i < n_span; i++) {
			int cap = span[i].len;
			if (span[i].full)
				continue;
			cap = cap < d_h ? cap : d_h;
			cap = cap < r_max ? cap : r_max;
			for (int j = 0; j < n_head_kv * 2; j++)
				ranks[f++] = fixture_rnd(&s) % 8 == 0 ? 0 :
					     fixture_rnd(&s) % 7 == 0 ? SEKV_RANK_RAW :
					     fixture_rnd(&s) % 7 == 0 ? SEKV_RANK_RAW8 :
					     fixture_rnd_int(&s, 0, cap);
		}
	if (sekv_mem_alloc(&m, n_tok, n_layer, n_head, n_head_kv, d_h, n_span, span, n_exact,
			   ranks, (int)(seed & 1), seed % 3 == 0 ? 0 : (int)(2 + seed % 15)))
		goto out;
	fixture_rnd_fill(&s, m->layer_id, (size_t)n_layer * 4);
	fixture_rnd_fill(&s, m->tokens, (size_t)n_tok * 4);
	fixture_rnd_fill(&s, m->surprisal, (size_t)n_tok * 4);
	fixture_rnd_fill(&s, m->is_anchor, (size_t)n_tok);
	for (int i = 0, e = 0; i < n_tok; i++)
		if (!in_comp[i])
			m->exact_pos[e++] = i;
	{
		size_t row = (size_t)n_head_kv * d_h, nf = (size_t)n_layer * n_comp * n_head_kv * 2;
		fixture_rnd_fill(&s, m->exact_k, (size_t)n_layer * n_exact * row * 2);
		fixture_rnd_fill(&s, m->exact_v, (size_t)n_layer * n_exact * row * 2);
		fixture_rnd_fill(&s, m->k_bar, (size_t)n_layer * n_comp * row * 2);
		fixture_rnd_fill(&s, m->v_bar, (size_t)n_layer * n_comp * row * 2);
		for (size_t f = 0; f < nf; f++) {
			struct sekv_factor *fc = &m->fac[f];
			int len = m->span[m->comp_span[(f / ((size_t)n_head_kv * 2)) % (size_t)n_comp]].len;
			size_t sb, ub, vb;
			sekv_factor_bytes(fc->rank, len, d_h, m->factor_f16, &sb, &ub, &vb);
			fixture_rnd_fill(&s, fc->u, ub);
			fixture_rnd_fill(&s, fc->s, sb);
			fixture_rnd_fill(&s, fc->v, vb);
		}
		fixture_rnd_fill(&s, m->route_w, (size_t)n_layer * n_head * SEKV_D_ROUTE * d_h * 4);
		fixture_rnd_fill(&s, m->tau, (size_t)n_layer * n_head * 4);
		fixture_rnd_fill(&s, m->lm_k, (size_t)n_layer * m->n_lm * row);
		fixture_rnd_fill(&s, m->lm_s, (size_t)n_layer * m->n_lm * n_head_kv * 4);
	}
	m->r_max = r_max;
	m->rank_energy = (float)(fixture_rnd(&s) % 101) / 100.0f;
	m->rank_energy_v = (float)(fixture_rnd(&s) % 101) / 100.0f;
	if (seed % 2) {
		m->rope_base = 10000.0f * (float)(1 + seed % 100);
		m->n_rot = seed % 4 == 1 ? d_h - 2 : d_h;
	}
	m->alpha_used = 1.0f + (float)(fixture_rnd(&s) % 1000) / 100.0f;
	snprintf(m->note, sizeof m->note, "synthetic memory, seed %llu", (unsigned long long)seed);
	sekv_mem_update_counts(m);
out:
	free(span);
	free(in_comp);
	free(ranks);
	return m;
}

#define CMP_ARR(a, b, field, n) do { if ((n) != 0 && memcmp((a)->field, (b)->field, (n))) { \
	snprintf(why, whylen, "%s differs", #field); return 1; } } while (0)
#define CMP_VAL(a, b, field) do { if ((a)->field != (b)->field) { \
	snprintf(why, whylen, "%s: %lld vs %lld", #field, (long long)(a)->field, \
		 (long long)(b)->field); return 1; } } while (0)

int fixture_mem_cmp(const struct sekv_mem *a, const struct sekv_mem *b, char *why,
		    size_t whylen)
{
	size_t row, nf;

	CMP_VAL(a, b, factor_f16);
	CMP_VAL(a, b, n_tok); CMP_VAL(a, b, n_layer); CMP_VAL(a, b, n_head);
	CMP_VAL(a, b, n_head_kv); CMP_VAL(a, b, d_h); CMP_VAL(a, b, r_max); CMP_VAL(a, b, n_raw);
	CMP_VAL(a, b, rank_energy); CMP_VAL(a, b, rank_energy_v); CMP_VAL(a, b, rope_base); CMP_VAL(a, b, n_rot);
	CMP_VAL(a, b, n_span); CMP_VAL(a, b, n_comp); CMP_VAL(a, b, n_exact);
	CMP_VAL(a, b, full_kv_bytes); CMP_VAL(a, b, static_bytes); CMP_VAL(a, b, host_bytes);
	CMP_VAL(a, b, lm_len); CMP_VAL(a, b, n_lm);
	if (memcmp(&a->alpha_used, &b->alpha_used, sizeof a->alpha_used) ||
	    strcmp(a->note, b->note)) {
		snprintf(why, whylen, "alpha_used or note differ");
		return 1;
	}
	row = (size_t)a->n_head_kv * a->d_h;
	nf = (size_t)a->n_layer * a->n_comp * a->n_head_kv * 2;
	CMP_ARR(a, b, layer_id, (size_t)a->n_layer * 4);
	CMP_ARR(a, b, tokens, (size_t)a->n_tok * 4);
	CMP_ARR(a, b, surprisal, (size_t)a->n_tok * 4);
	CMP_ARR(a, b, is_anchor, (size_t)a->n_tok);
	CMP_ARR(a, b, span, (size_t)a->n_span * sizeof *a->span);
	CMP_ARR(a, b, comp_span, (size_t)a->n_comp * 4);
	CMP_ARR(a, b, exact_pos, (size_t)a->n_exact * 4);
	CMP_ARR(a, b, exact_k, (size_t)a->n_layer * a->n_exact * row * 2);
	CMP_ARR(a, b, exact_v, (size_t)a->n_layer * a->n_exact * row * 2);
	CMP_ARR(a, b, k_bar, (size_t)a->n_layer * a->n_comp * row * 2);
	CMP_ARR(a, b, v_bar, (size_t)a->n_layer * a->n_comp * row * 2);
	CMP_ARR(a, b, route_w, (size_t)a->n_layer * a->n_head * SEKV_D_ROUTE * a->d_h * 4);
	CMP_ARR(a, b, tau, (size_t)a->n_layer * a->n_head * 4);
	CMP_ARR(a, b, lm_first, ((size_t)a->n_comp + 1) * 4);
	CMP_ARR(a, b, lm_k, (size_t)a->n_layer * a->n_lm * row);
	CMP_ARR(a, b, lm_s, (size_t)a->n_layer * a->n_lm * a->n_head_kv * 4);
	for (size_t f = 0; f < nf; f++) {
		const struct sekv_factor *fa = &a->fac[f], *fb = &b->fac[f];
		int len = a->span[a->comp_span[(f / ((size_t)a->n_head_kv * 2)) %
					       (size_t)a->n_comp]].len;
		size_t sb, ub, vb;
		sekv_factor_bytes(fa->rank, len, a->d_h, a->factor_f16, &sb, &ub, &vb);
		if (fa->rank != fb->rank || (ub && memcmp(fa->u, fb->u, ub)) ||
		    (sb && memcmp(fa->s, fb->s, sb)) || (vb && memcmp(fa->v, fb->v, vb))) {
			snprintf(why, whylen, "factor %zu differs (rank %d vs %d)", f, fa->rank,
				 fb->rank);
			return 1;
		}
	}
	return 0;
}

void fixture_free(struct fixture *f)
{
	for (int l = 0; f->k && l < f->doc.n_layer_global; l++) {
		free(f->k[l]);
		free(f->v[l]);
	}
	for (int l = 0; f->swa_k && l < f->doc.n_layer_swa; l++) {
		free(f->swa_k[l]);
		free(f->swa_v[l]);
	}
	free(f->k);
	free(f->v);
	free(f->swa_k);
	free(f->swa_v);
	free(f->swa_id);
	free(f->tokens);
	free(f->surprisal);
	memset(f, 0, sizeof *f);
}

int fixture_make(struct store *s, struct fixture *f, uint64_t seed, const char *title,
		 int n_layer_global, int n_layer_swa, int n_head_kv, int d_h,
		 int n_tok, int chunk, char *err, size_t errlen)
{
	uint64_t r = seed * 7919 + 3;
	size_t row = (size_t)n_head_kv * d_h;
	const uint16_t **kp, **vp;
	int rc = 0;

	memset(f, 0, sizeof *f);
	snprintf(f->doc.title, sizeof f->doc.title, "%s", title);
	snprintf(f->doc.source, sizeof f->doc.source, "/docs/%s.txt", title);
	snprintf(f->doc.model_fp, sizeof f->doc.model_fp, "%064llx", (unsigned long long)seed);
	snprintf(f->doc.model_name, sizeof f->doc.model_name, "gemma-3-270m");
	f->doc.n_layer_global = n_layer_global;
	f->doc.n_layer_swa = n_layer_swa;
	f->doc.n_head_kv = n_head_kv;
	f->doc.d_h = d_h;
	f->doc.swa_window = 512;
	f->n_tok = n_tok;
	f->tokens = malloc((size_t)n_tok * 4 + 1);
	f->surprisal = malloc((size_t)n_tok * 4 + 1);
	f->k = calloc((size_t)n_layer_global + 1, sizeof *f->k);
	f->v = calloc((size_t)n_layer_global + 1, sizeof *f->v);
	kp = calloc((size_t)n_layer_global + 1, sizeof *kp);
	vp = calloc((size_t)n_layer_global + 1, sizeof *vp);
	fixture_rnd_fill(&r, f->tokens, (size_t)n_tok * 4);
	fixture_rnd_fill(&r, f->surprisal, (size_t)n_tok * 4);
	for (int l = 0; l < n_layer_global; l++) {
		f->k[l] = malloc((size_t)n_tok * row * 2 + 1);
		f->v[l] = malloc((size_t)n_tok * row * 2 + 1);
		fixture_rnd_fill(&r, f->k[l], (size_t)n_tok * row * 2);
		fixture_rnd_fill(&r, f->v[l], (size_t)n_tok * row * 2);
	}
	rc = store_doc_create(s, &f->doc, title, strlen(title), err, errlen);
	for (int pos = 0; rc == 0 && pos < n_tok; ) {
		int n = fixture_rnd_int(&r, 1, chunk);
		if (n > n_tok - pos)
			n = n_tok - pos;
		for (int l = 0; l < n_layer_global; l++) {
			kp[l] = f->k[l] + (size_t)pos * row;
			vp[l] = f->v[l] + (size_t)pos * row;
		}
		rc = store_doc_put_chunk(s, f->doc.id, pos, n, f->tokens + pos, f->surprisal + pos,
					 kp, vp, 0.25, err, errlen);
		pos += n;
	}
	free(kp);
	free(vp);
	return rc;
}

int fixture_swa(struct store *s, struct fixture *f, uint64_t seed, int n_row,
		char *err, size_t errlen)
{
	uint64_t r = seed * 104729 + 5;
	size_t bytes = (size_t)n_row * f->doc.n_head_kv * f->doc.d_h * 2;
	int n = f->doc.n_layer_swa;

	if (!f->swa_k) {
		f->swa_id = calloc((size_t)n + 1, sizeof *f->swa_id);
		f->swa_k = calloc((size_t)n + 1, sizeof *f->swa_k);
		f->swa_v = calloc((size_t)n + 1, sizeof *f->swa_v);
	}
	for (int i = 0; i < n; i++) {
		free(f->swa_k[i]);
		free(f->swa_v[i]);
		f->swa_id[i] = i * 6 + 1;
		f->swa_k[i] = malloc(bytes + 1);
		f->swa_v[i] = malloc(bytes + 1);
		fixture_rnd_fill(&r, f->swa_k[i], bytes);
		fixture_rnd_fill(&r, f->swa_v[i], bytes);
	}
	f->n_row = n_row;
	return store_doc_put_swa(s, f->doc.id, n, f->swa_id, n_row,
				 (const uint16_t *const *)f->swa_k,
				 (const uint16_t *const *)f->swa_v, err, errlen);
}

int fixture_check(struct store *s, const struct fixture *f, char *why, size_t whylen)
{
	size_t row = (size_t)f->doc.n_head_kv * f->doc.d_h, bytes = (size_t)f->n_tok * row * 2;
	int32_t *t = NULL, *lid = NULL;
	float *h = NULL;
	uint16_t *k = malloc(bytes + 1), *v = malloc(bytes + 1), **sk = NULL, **sv = NULL;
	int64_t n = -1;
	int rc, n_layer = 0, n_row = 0, bad = 1;

	if ((rc = store_doc_get_tokens(s, f->doc.id, &t, &h, &n, why, whylen)))
		goto out;
	if (n != f->n_tok || (n && (memcmp(t, f->tokens, (size_t)n * 4) ||
				    memcmp(h, f->surprisal, (size_t)n * 4)))) {
		snprintf(why, whylen, "tokens differ (%lld tokens)", (long long)n);
		goto out;
	}
	for (int l = 0; l < f->doc.n_layer_global; l++) {
		if ((rc = store_doc_get_full_kv(s, f->doc.id, l, k, v, why, whylen)))
			goto out;
		if (bytes && (memcmp(k, f->k[l], bytes) || memcmp(v, f->v[l], bytes))) {
			snprintf(why, whylen, "full KV of layer %d differs", l);
			goto out;
		}
	}
	if (f->swa_k) {
		if ((rc = store_doc_get_swa(s, f->doc.id, &n_layer, &lid, &n_row, &sk, &sv,
					    why, whylen)))
			goto out;
		if (n_layer != f->doc.n_layer_swa || n_row != f->n_row) {
			snprintf(why, whylen, "swa: %d layers x %d rows", n_layer, n_row);
			goto out;
		}
		for (int i = 0; i < n_layer; i++)
			if (lid[i] != f->swa_id[i] ||
			    memcmp(sk[i], f->swa_k[i], (size_t)n_row * row * 2) ||
			    memcmp(sv[i], f->swa_v[i], (size_t)n_row * row * 2)) {
				snprintf(why, whylen, "swa layer %d differs", i);
				goto out;
			}
	}
	bad = 0;
out:
	store_swa_free(n_layer, lid, sk, sv);
	free(t);
	free(h);
	free(k);
	free(v);
	return bad;
}

int fixture_with_mem(struct store *s, struct fixture *f, const struct sekv_mem *m,
		     uint64_t seed, double budget, char *err, size_t errlen)
{
	int rc = fixture_make(s, f, seed, "memdoc", m->n_layer, 2, m->n_head_kv, m->d_h,
			      m->n_tok, 97, err, errlen);
	if (rc == 0)
		rc = fixture_swa(s, f, seed, m->n_tok < 16 ? m->n_tok : 16, err, errlen);
	if (rc == 0)
		rc = store_doc_put_mem(s, f->doc.id, m, budget, err, errlen);
	return rc;
}

int fixture_raw_exec(const char *path, const char *sql)
{
	sqlite3 *db = NULL;
	int rc = sqlite3_open(path, &db);

	if (rc == SQLITE_OK) {
		sqlite3_busy_timeout(db, 2000);
		rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
	}
	sqlite3_close(db);
	return rc;
}

/* One blob of fp16 halves as fp32, bound to parameter i of st. */
static int bind_f16_as_f32(sqlite3_stmt *st, int i, const void *b, int n)
{
	float *x = malloc(((size_t)n / 2 + 1) * sizeof *x);
	uint16_t h;

	if (!x)
		return SQLITE_NOMEM;
	for (int j = 0; j < n / 2; j++) {
		memcpy(&h, (const char *)b + 2 * j, 2);
		x[j] = quant_f16_to_f32(h);
	}
	return sqlite3_bind_blob(st, i, x, (n / 2) * 4, free);
}

int fixture_raw_bars_to_f32(const char *path)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *sel = NULL, *up = NULL;
	int rc = sqlite3_open(path, &db);

	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(db, "SELECT doc, layer, k_bar, v_bar FROM mem_layer", -1,
					&sel, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(db, "UPDATE mem_layer SET k_bar = ?3, v_bar = ?4"
					" WHERE doc = ?1 AND layer = ?2", -1, &up, NULL);
	while (rc == SQLITE_OK && sqlite3_step(sel) == SQLITE_ROW) {
		sqlite3_bind_int64(up, 1, sqlite3_column_int64(sel, 0));
		sqlite3_bind_int64(up, 2, sqlite3_column_int64(sel, 1));
		if ((rc = bind_f16_as_f32(up, 3, sqlite3_column_blob(sel, 2),
					  sqlite3_column_bytes(sel, 2))) == SQLITE_OK &&
		    (rc = bind_f16_as_f32(up, 4, sqlite3_column_blob(sel, 3),
					  sqlite3_column_bytes(sel, 3))) == SQLITE_OK)
			rc = sqlite3_step(up) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
		sqlite3_reset(up);
	}
	sqlite3_finalize(sel);
	sqlite3_finalize(up);
	sqlite3_close(db);
	return rc;
}

int64_t fixture_raw_int(const char *path, const char *sql)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	int64_t v = -1;

	if (sqlite3_open(path, &db) == SQLITE_OK &&
	    sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return v;
}
