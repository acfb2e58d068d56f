/* test_store.c - the SQLite library file: round trips (document rows,
 * chunks, full KV, SWA rows, synthetic SeKV memories compared bit for bit),
 * the contiguity and shape rules, deleting, listing, corrupt files, newer
 * schemas, and crash safety by fault injection (failing steps through
 * store_fault_step, failing writes and process death through a VFS shim).
 * Tests may use sqlite3 directly to corrupt what store/ wrote.
 */
#include "tests/test.h"
#include "engine/err.h"
#include "engine/sekv/sekv.h"
#include "store/store.h"

#include <sqlite3.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------ */

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static int rnd_int(uint64_t *s, int lo, int hi) /* inclusive */
{
	return lo + (int)(rnd(s) % (uint64_t)(hi - lo + 1));
}

static void rnd_fill(uint64_t *s, void *p, size_t n)
{
	unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)(rnd(s) >> 24);
}

/* A fresh database path in the test directory (old files removed). */
static const char *db_path(const char *name)
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
	return p;
}

/* A random memory of the given shape: spans from position 4 to a random
 * recent window, random anchors between them, exact = everything outside
 * compressed spans, ranks in 0..min(len, d_h, r_max), factors' u and v fp16
 * for odd seeds and fp32 for even ones, every array random bytes (NaN
 * payloads included: comparisons are bitwise). */
static struct sekv_mem *synth_mem(uint64_t seed, int n_tok, int n_layer, int n_head,
				  int n_head_kv, int d_h, int r_max, int max_span)
{
	uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
	struct sekv_span *span = malloc(sizeof *span * (size_t)(n_tok + 1));
	uint8_t *in_comp = calloc((size_t)n_tok + 1, 1);
	int32_t *ranks = NULL;
	struct sekv_mem *m = NULL;
	int n_span = 0, n_comp = 0, n_exact = 0, pos = n_tok < 4 ? n_tok : 4;
	int end = n_tok - rnd_int(&s, 0, 64);

	for (; pos < end; ) {
		int len = rnd_int(&s, 1, max_span);
		if (len > end - pos)
			len = end - pos;
		span[n_span] = (struct sekv_span){ pos, len, len < 4 };
		if (len >= 4) {
			n_comp++;
			memset(in_comp + pos, 1, (size_t)len);
		}
		n_span++;
		pos += len + (rnd(&s) % 3 == 0); /* an anchor between spans */
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
				ranks[f++] = rnd(&s) % 8 == 0 ? 0 : rnd_int(&s, 0, cap);
		}
	if (sekv_mem_alloc(&m, n_tok, n_layer, n_head, n_head_kv, d_h, n_span, span, n_exact,
			   ranks, (int)(seed & 1)))
		goto out;
	rnd_fill(&s, m->layer_id, (size_t)n_layer * 4);
	rnd_fill(&s, m->tokens, (size_t)n_tok * 4);
	rnd_fill(&s, m->surprisal, (size_t)n_tok * 4);
	rnd_fill(&s, m->is_anchor, (size_t)n_tok);
	for (int i = 0, e = 0; i < n_tok; i++)
		if (!in_comp[i])
			m->exact_pos[e++] = i;
	{
		size_t row = (size_t)n_head_kv * d_h, nf = (size_t)n_layer * n_comp * n_head_kv * 2;
		size_t es = m->factor_f16 ? 2 : 4;
		rnd_fill(&s, m->exact_k, (size_t)n_layer * n_exact * row * 2);
		rnd_fill(&s, m->exact_v, (size_t)n_layer * n_exact * row * 2);
		rnd_fill(&s, m->k_bar, (size_t)n_layer * n_comp * row * 4);
		rnd_fill(&s, m->v_bar, (size_t)n_layer * n_comp * row * 4);
		for (size_t f = 0; f < nf; f++) {
			struct sekv_factor *fc = &m->fac[f];
			int len = m->span[m->comp_span[(f / ((size_t)n_head_kv * 2)) % (size_t)n_comp]].len;
			rnd_fill(&s, fc->u, (size_t)len * fc->rank * es);
			rnd_fill(&s, fc->s, (size_t)fc->rank * 4);
			rnd_fill(&s, fc->v, (size_t)d_h * fc->rank * es);
		}
		rnd_fill(&s, m->route_w, (size_t)n_layer * n_head * SEKV_D_ROUTE * d_h * 4);
		rnd_fill(&s, m->tau, (size_t)n_layer * n_head * 4);
	}
	m->r_max = r_max;
	m->alpha_used = 1.0f + (float)(rnd(&s) % 1000) / 100.0f;
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

/* 0 when a and b hold the same bits everywhere, else 1 and why. */
static int mem_cmp(const struct sekv_mem *a, const struct sekv_mem *b, char *why, size_t whylen)
{
	size_t row, nf, es = a->factor_f16 ? 2 : 4;

	CMP_VAL(a, b, factor_f16);
	CMP_VAL(a, b, n_tok); CMP_VAL(a, b, n_layer); CMP_VAL(a, b, n_head);
	CMP_VAL(a, b, n_head_kv); CMP_VAL(a, b, d_h); CMP_VAL(a, b, r_max);
	CMP_VAL(a, b, n_span); CMP_VAL(a, b, n_comp); CMP_VAL(a, b, n_exact);
	CMP_VAL(a, b, full_kv_bytes); CMP_VAL(a, b, static_bytes); CMP_VAL(a, b, host_bytes);
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
	CMP_ARR(a, b, k_bar, (size_t)a->n_layer * a->n_comp * row * 4);
	CMP_ARR(a, b, v_bar, (size_t)a->n_layer * a->n_comp * row * 4);
	CMP_ARR(a, b, route_w, (size_t)a->n_layer * a->n_head * SEKV_D_ROUTE * a->d_h * 4);
	CMP_ARR(a, b, tau, (size_t)a->n_layer * a->n_head * 4);
	for (size_t f = 0; f < nf; f++) {
		const struct sekv_factor *fa = &a->fac[f], *fb = &b->fac[f];
		size_t len = (size_t)a->span[a->comp_span[(f / ((size_t)a->n_head_kv * 2)) %
						       (size_t)a->n_comp]].len, r = (size_t)fa->rank;
		if (fa->rank != fb->rank || (r && (memcmp(fa->u, fb->u, len * r * es) ||
						   memcmp(fa->s, fb->s, r * 4) ||
						   memcmp(fa->v, fb->v, (size_t)a->d_h * r * es)))) {
			snprintf(why, whylen, "factor %zu differs (rank %d vs %d)", f, fa->rank,
				 fb->rank);
			return 1;
		}
	}
	return 0;
}

/* Everything one document holds, kept in memory for comparisons. */
struct fixture {
	struct store_doc doc;
	int64_t n_tok;
	int32_t *tokens;
	float *surprisal;
	uint16_t **k, **v;   /* [n_layer_global] -> [n_tok][n_head_kv][d_h] */
	int32_t *swa_id;
	uint16_t **swa_k, **swa_v;
	int n_row;
};

static void fixture_free(struct fixture *f)
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

/* Creates a document and appends n_tok random tokens in chunks of at most
 * chunk (global KV included). Returns 0 or the failing code. */
static int fixture_make(struct store *s, struct fixture *f, uint64_t seed, const char *title,
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
	rnd_fill(&r, f->tokens, (size_t)n_tok * 4);
	rnd_fill(&r, f->surprisal, (size_t)n_tok * 4);
	for (int l = 0; l < n_layer_global; l++) {
		f->k[l] = malloc((size_t)n_tok * row * 2 + 1);
		f->v[l] = malloc((size_t)n_tok * row * 2 + 1);
		rnd_fill(&r, f->k[l], (size_t)n_tok * row * 2);
		rnd_fill(&r, f->v[l], (size_t)n_tok * row * 2);
	}
	rc = store_doc_create(s, &f->doc, title, strlen(title), err, errlen);
	for (int pos = 0; rc == 0 && pos < n_tok; ) {
		int n = rnd_int(&r, 1, chunk);
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

/* Stores n_row random SWA rows for every SWA layer of f. */
static int fixture_swa(struct store *s, struct fixture *f, uint64_t seed, int n_row,
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
		rnd_fill(&r, f->swa_k[i], bytes);
		rnd_fill(&r, f->swa_v[i], bytes);
	}
	f->n_row = n_row;
	return store_doc_put_swa(s, f->doc.id, n, f->swa_id, n_row,
				 (const uint16_t *const *)f->swa_k,
				 (const uint16_t *const *)f->swa_v, err, errlen);
}

/* 0 when the store holds exactly f's tokens, full KV and SWA rows. */
static int fixture_check(struct store *s, const struct fixture *f, char *why, size_t whylen)
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

/* A document sized for mem and the memory stored into it. */
static int store_with_mem(struct store *s, struct fixture *f, const struct sekv_mem *m,
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

/* Runs sql on the file through its own connection (the way a test reaches
 * under store/); returns the SQLite code. */
static int raw_exec(const char *path, const char *sql)
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

static int64_t raw_int(const char *path, const char *sql)
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

/* ---- tests -------------------------------------------------------------- */

static void store_default_path_xdg_and_home(struct test_ctx *t)
{
	char buf[1024], want[1024], *old_xdg = getenv("XDG_DATA_HOME"), *old_home = getenv("HOME");
	char sx[1024], sh[1024];
	struct store *s = NULL;
	char err[512];
	struct stat st;
	char home_path[1024], opened[1024] = "";
	int r_xdg, r_open, r_home, r_small, r_stat;

	snprintf(sx, sizeof sx, "%s", old_xdg ? old_xdg : "");
	snprintf(sh, sizeof sh, "%s", old_home ? old_home : "");
	snprintf(want, sizeof want, "%s/xdg/sekv/library.db", test_tmpdir());
	snprintf(buf, sizeof buf, "%s/xdg", test_tmpdir());
	setenv("XDG_DATA_HOME", buf, 1);
	r_xdg = store_default_path(buf, sizeof buf);
	r_open = store_open(&s, NULL, err, sizeof err);
	if (r_open == 0)
		snprintf(opened, sizeof opened, "%s", store_path(s));
	store_close(s);
	r_stat = stat(want, &st);
	/* a relative XDG_DATA_HOME is ignored (XDG base directory spec) */
	setenv("XDG_DATA_HOME", "relative/ignored", 1);
	setenv("HOME", "/home/someone", 1);
	r_home = store_default_path(home_path, sizeof home_path);
	r_small = store_default_path(home_path + 900, 10);
	if (old_xdg)
		setenv("XDG_DATA_HOME", sx, 1);
	else
		unsetenv("XDG_DATA_HOME");
	if (old_home)
		setenv("HOME", sh, 1);
	else
		unsetenv("HOME");
	T_CHECKF(t, r_xdg == 0 && strcmp(buf, want) == 0, "xdg path %s", buf);
	T_CHECKF(t, r_open == 0, "open default: %s", err);
	T_CHECK(t, strcmp(opened, want) == 0 && r_stat == 0);
	T_CHECKF(t, r_home == 0 && strcmp(home_path, "/home/someone/.local/share/sekv/library.db") == 0,
		 "home path %s", home_path);
	T_CHECK(t, r_small == SEKV_EINVAL);
}

static void store_open_creates_parent_dirs(struct test_ctx *t)
{
	char path[512], err[512];
	struct store *s = NULL;
	struct stat st;
	int rc;

	snprintf(path, sizeof path, "%s/a/b/c/lib.db", test_tmpdir());
	rc = store_open(&s, path, err, sizeof err);
	T_CHECKF(t, rc == 0, "%s", err);
	store_close(s);
	T_CHECK(t, stat(path, &st) == 0 && S_ISREG(st.st_mode));
	T_CHECK(t, raw_int(path, "PRAGMA user_version") == 2);
	T_CHECK(t, raw_int(path, "PRAGMA application_id") == 0x73656b76);
	/* a file where a directory must go is an I/O error, not a crash */
	snprintf(path, sizeof path, "%s/a/b/c/lib.db/x.db", test_tmpdir());
	rc = store_open(&s, path, err, sizeof err);
	T_CHECKF(t, rc == SEKV_EIO && s == NULL, "rc %d %s", rc, err);
}

static void store_doc_fields_and_text_round_trip(struct test_ctx *t)
{
	const char *path = db_path("fields");
	static const char text[] = "Call me Ishmael.\nSome years ago\xe2\x80\x94never mind how long";
	struct store_doc d = {0}, g;
	struct store *s = NULL;
	char err[512], *txt = NULL;
	size_t len = 0;
	int rc;

	T_CHECKF(t, store_open(&s, path, err, sizeof err) == 0, "%s", err);
	snprintf(d.title, sizeof d.title, "Moby-Dick");
	snprintf(d.source, sizeof d.source, "/books/moby.txt");
	snprintf(d.model_fp, sizeof d.model_fp, "%s", "0123456789abcdef0123456789abcdef"
		 "0123456789abcdef0123456789abcdef");
	snprintf(d.model_name, sizeof d.model_name, "gemma-3-270m-q4_k_m");
	d.n_layer_global = 3;
	d.n_layer_swa = 15;
	d.n_head_kv = 1;
	d.d_h = 256;
	d.swa_window = 512;
	d.created = 1700000000.5;
	rc = store_doc_create(s, &d, text, sizeof text - 1, err, sizeof err);
	T_CHECKF(t, rc == 0 && d.id > 0, "%s", err);
	rc = store_doc_get(s, d.id, &g, err, sizeof err);
	store_close(s);
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECK(t, strcmp(g.title, d.title) == 0 && strcmp(g.source, d.source) == 0);
	T_CHECK(t, strcmp(g.model_fp, d.model_fp) == 0 && strcmp(g.model_name, d.model_name) == 0);
	T_CHECK(t, g.state == STORE_DOC_PREFILL && g.n_tok == 0 && g.created == d.created);
	T_CHECK(t, g.n_layer_global == 3 && g.n_layer_swa == 15 && g.n_head_kv == 1 &&
		g.d_h == 256 && g.swa_window == 512 && g.disk_bytes == 0);
	T_CHECKF(t, store_open(&s, path, err, sizeof err) == 0, "%s", err);
	rc = store_doc_text_dup(s, d.id, &txt, &len, err, sizeof err);
	T_CHECKF(t, rc == 0 && len == sizeof text - 1 && memcmp(txt, text, len) == 0 &&
		 txt[len] == 0, "%s", err);
	free(txt);
	T_CHECK(t, store_doc_text_dup(s, d.id + 1, &txt, &len, err, sizeof err) == SEKV_ENOTFOUND);
	T_CHECK(t, store_doc_get(s, d.id + 1, &g, err, sizeof err) == SEKV_ENOTFOUND);
	store_close(s);
}

static void store_chunks_full_kv_swa_round_trip(struct test_ctx *t)
{
	const char *path = db_path("chunks");
	struct fixture f;
	struct store_doc g;
	struct store *s = NULL;
	char err[512];
	int rc;

	T_CHECKF(t, store_open(&s, path, err, sizeof err) == 0, "%s", err);
	rc = fixture_make(s, &f, 11, "chunks", 2, 3, 2, 16, 777, 120, err, sizeof err);
	if (rc == 0)
		rc = fixture_swa(s, &f, 1, 40, err, sizeof err);
	if (rc == 0 && fixture_check(s, &f, err, sizeof err))
		rc = -100;
	/* replacing SWA rows with fewer rows keeps only the new ones */
	if (rc == 0)
		rc = fixture_swa(s, &f, 2, 9, err, sizeof err);
	if (rc == 0 && fixture_check(s, &f, err, sizeof err))
		rc = -101;
	if (rc == 0)
		rc = store_doc_get(s, f.doc.id, &g, err, sizeof err);
	store_close(s);
	if (rc) {
		fixture_free(&f);
		T_CHECKF(t, 0, "rc %d: %s", rc, err);
	}
	/* reopened: the same bytes, n_tok and summed prefill seconds */
	rc = store_open(&s, path, err, sizeof err);
	if (rc == 0 && fixture_check(s, &f, err, sizeof err))
		rc = -102;
	store_close(s);
	T_CHECK(t, g.n_tok == 777 && g.state == STORE_DOC_PREFILL);
	T_CHECKF(t, g.prefill_s > 0.25 && (int64_t)(g.prefill_s / 0.25 + 0.5) * 0.25 == g.prefill_s,
		 "prefill_s %g", g.prefill_s);
	fixture_free(&f);
	T_CHECKF(t, rc == 0, "after reopen: rc %d: %s", rc, err);
}

static void store_chunk_pos0_mismatch_rejected(struct test_ctx *t)
{
	const char *path = db_path("pos0");
	struct store_doc d = {0}, g;
	struct store *s = NULL;
	int32_t tok[20] = {0};
	float h[20] = {0};
	uint16_t kv[20 * 8] = {0};
	const uint16_t *k[1] = { kv }, *v[1] = { kv };
	char err[512];

	T_CHECKF(t, store_open(&s, path, err, sizeof err) == 0, "%s", err);
	d.n_layer_global = 1;
	d.n_head_kv = 1;
	d.d_h = 8;
	T_CHECK(t, store_doc_create(s, &d, "x", 1, err, sizeof err) == 0);
	T_CHECK(t, store_doc_put_chunk(s, d.id, 0, 10, tok, h, k, v, 1, err, sizeof err) == 0);
	T_CHECK(t, store_doc_put_chunk(s, d.id, 5, 10, tok, h, k, v, 1, err, sizeof err) == SEKV_EINVAL);
	T_CHECKF(t, strstr(err, "pos0 5") != NULL, "message: %s", err);
	T_CHECK(t, store_doc_put_chunk(s, d.id, 11, 5, tok, h, k, v, 1, err, sizeof err) == SEKV_EINVAL);
	T_CHECK(t, store_doc_put_chunk(s, d.id, 0, 5, tok, h, k, v, 1, err, sizeof err) == SEKV_EINVAL);
	T_CHECK(t, store_doc_put_chunk(s, d.id, 10, 0, tok, h, k, v, 1, err, sizeof err) == SEKV_EINVAL);
	T_CHECK(t, store_doc_put_chunk(s, d.id + 7, 0, 5, tok, h, k, v, 1, err, sizeof err) ==
		SEKV_ENOTFOUND);
	T_CHECK(t, store_doc_get(s, d.id, &g, err, sizeof err) == 0 && g.n_tok == 10 &&
		g.prefill_s == 1);
	T_CHECK(t, store_doc_put_chunk(s, d.id, 10, 10, tok, h, k, v, 1, err, sizeof err) == 0);
	T_CHECK(t, store_doc_get(s, d.id, &g, err, sizeof err) == 0 && g.n_tok == 20);
	T_CHECK(t, raw_int(path, "SELECT count(*) FROM tok_chunk") == 2);
	store_close(s);
}

static void store_mem_round_trip_bit_exact(struct test_ctx *t)
{
	const char *path = db_path("memrt");
	struct store *s = NULL;
	char err[512], why[256];
	int rc = 0, n_mem = 0, n_f16 = 0;
	struct {
		struct sekv_mem *m;
		struct fixture f;
	} c[10];

	memset(c, 0, sizeof c);
	T_CHECKF(t, store_open(&s, path, err, sizeof err) == 0, "%s", err);
	for (int i = 0; i < 10 && rc == 0; i++, n_mem++) {
		uint64_t r = 1000 + i;
		int n_head_kv = rnd_int(&r, 1, 2), d_h = 8 << rnd_int(&r, 0, 3);
		/* seed 0: all exact (no spans); others random sizes and ranks */
		int n_tok = i == 0 ? 7 : rnd_int(&r, 1, 700);
		c[i].m = synth_mem(r, n_tok, rnd_int(&r, 1, 3), n_head_kv * rnd_int(&r, 1, 4),
				   n_head_kv, d_h, rnd_int(&r, 1, 40), rnd_int(&r, 1, 60));
		if (!c[i].m) {
			rc = -1;
			snprintf(err, sizeof err, "synth_mem %d failed", i);
			break;
		}
		n_f16 += c[i].m->factor_f16;
		rc = store_with_mem(s, &c[i].f, c[i].m, r, 0.1 * i, err, sizeof err);
	}
	/* each loads back bit-exactly, before and after reopening */
	for (int pass = 0; pass < 2 && rc == 0; pass++) {
		if (pass) {
			store_close(s);
			rc = store_open(&s, path, err, sizeof err);
		}
		for (int i = 0; i < n_mem && rc == 0; i++) {
			struct sekv_mem *g = NULL;
			struct store_doc d;
			rc = store_doc_get_mem(s, c[i].f.doc.id, &g, err, sizeof err);
			if (rc == 0 && mem_cmp(c[i].m, g, why, sizeof why)) {
				snprintf(err, sizeof err, "mem %d: %s", i, why);
				rc = -1;
			}
			sekv_mem_free(g);
			if (rc == 0)
				rc = store_doc_get(s, c[i].f.doc.id, &d, err, sizeof err);
			if (rc == 0 && (d.state != STORE_DOC_READY || d.budget != 0.1 * i ||
					d.r_max != c[i].m->r_max || d.alpha_used != c[i].m->alpha_used)) {
				snprintf(err, sizeof err, "doc row %d not updated", i);
				rc = -1;
			}
			if (rc == 0 && fixture_check(s, &c[i].f, err, sizeof err))
				rc = -1;
		}
	}
	/* a second memory replaces the first completely */
	if (rc == 0 && n_mem > 2) {
		struct sekv_mem *m2 = synth_mem(77, c[2].m->n_tok, c[2].m->n_layer,
						c[2].m->n_head_kv, c[2].m->n_head_kv,
						c[2].m->d_h, 5, 9), *g = NULL;
		rc = m2 ? store_doc_put_mem(s, c[2].f.doc.id, m2, 0.5, err, sizeof err) : -1;
		if (rc == 0)
			rc = store_doc_get_mem(s, c[2].f.doc.id, &g, err, sizeof err);
		if (rc == 0 && mem_cmp(m2, g, why, sizeof why)) {
			snprintf(err, sizeof err, "replaced mem: %s", why);
			rc = -1;
		}
		sekv_mem_free(g);
		sekv_mem_free(m2);
	}
	store_close(s);
	for (int i = 0; i < 10; i++) {
		sekv_mem_free(c[i].m);
		fixture_free(&c[i].f);
	}
	T_CHECKF(t, rc == 0, "rc %d: %s", rc, err);
	T_CHECK(t, n_mem == 10);
	T_CHECKF(t, n_f16 > 0 && n_f16 < n_mem, "%d of %d memories fp16: both types must round-trip",
		 n_f16, n_mem);
}

/* The real flow: chunks stored, full KV read back, sekv_build over it,
 * the memory stored and loaded bit-exactly after reopening. */
static void store_mem_round_trip_of_sekv_build(struct test_ctx *t)
{
	const char *path = db_path("realmem");
	enum { N = 700, L = 2, KVH = 1, DH = 32 };
	const int32_t layer_id[L] = { 5, 11 };
	struct sekv_mem *m = NULL, *g = NULL;
	struct sekv_params p;
	struct store_doc d = {0};
	struct store *s = NULL;
	int32_t *tok = malloc(N * 4);
	float *h = malloc(N * 4);
	uint16_t *k[L], *v[L], *kr[L], *vr[L];
	char err[512], why[256];
	uint64_t r = 4242;
	int rc;

	for (int i = 0; i < N; i++) {
		tok[i] = rnd_int(&r, 0, 262143);
		h[i] = i ? (float)rnd_int(&r, 0, 1000) / 150.0f : 0.0f;
	}
	for (int l = 0; l < L; l++) {
		k[l] = malloc(N * KVH * DH * 2);
		v[l] = malloc(N * KVH * DH * 2);
		kr[l] = malloc(N * KVH * DH * 2);
		vr[l] = malloc(N * KVH * DH * 2);
		/* finite fp16 values of both signs in [0.5, 2) */
		for (int i = 0; i < N * KVH * DH; i++) {
			k[l][i] = (uint16_t)((rnd(&r) & 0x8000) | (0x3800 + (rnd(&r) & 0x7ff)));
			v[l][i] = (uint16_t)((rnd(&r) & 0x8000) | (0x3800 + (rnd(&r) & 0x7ff)));
		}
	}
	d.n_layer_global = L;
	d.n_layer_swa = 0;
	d.n_head_kv = KVH;
	d.d_h = DH;
	rc = store_open(&s, path, err, sizeof err);
	if (rc == 0)
		rc = store_doc_create(s, &d, "real", 4, err, sizeof err);
	for (int pos = 0; rc == 0 && pos < N; pos += 256) {
		int n = N - pos < 256 ? N - pos : 256;
		const uint16_t *kp[L], *vp[L];
		for (int l = 0; l < L; l++) {
			kp[l] = k[l] + (size_t)pos * KVH * DH;
			vp[l] = v[l] + (size_t)pos * KVH * DH;
		}
		rc = store_doc_put_chunk(s, d.id, pos, n, tok + pos, h + pos, kp, vp, 0.5, err,
					 sizeof err);
	}
	for (int l = 0; rc == 0 && l < L; l++)
		rc = store_doc_get_full_kv(s, d.id, l, kr[l], vr[l], err, sizeof err);
	sekv_default_params(&p);
	p.budget = 0.5;
	p.n_threads = 1;
	if (rc == 0)
		rc = sekv_build(&m, &p, N, tok, h, L, layer_id, 4, KVH, DH,
				(const uint16_t *const *)kr, (const uint16_t *const *)vr, err, sizeof err);
	if (rc == 0)
		rc = store_doc_put_mem(s, d.id, m, p.budget, err, sizeof err);
	store_close(s);
	s = NULL;
	if (rc == 0)
		rc = store_open(&s, path, err, sizeof err);
	if (rc == 0)
		rc = store_doc_get_mem(s, d.id, &g, err, sizeof err);
	if (rc == 0 && mem_cmp(m, g, why, sizeof why))
		rc = -1, snprintf(err, sizeof err, "%s", why);
	store_close(s);
	for (int l = 0; l < L; l++) {
		if (rc == 0 && (memcmp(k[l], kr[l], N * KVH * DH * 2) ||
				memcmp(v[l], vr[l], N * KVH * DH * 2)))
			rc = -1, snprintf(err, sizeof err, "full KV of layer %d differs", l);
		free(k[l]);
		free(v[l]);
		free(kr[l]);
		free(vr[l]);
	}
	free(tok);
	free(h);
	T_CHECKF(t, rc == 0, "rc %d: %s", rc, err);
	T_CHECKF(t, m->n_comp > 0 && g->layer_id[1] == 11 && strcmp(g->note, m->note) == 0 &&
		 g->host_bytes == m->host_bytes && g->factor_f16 == 1, "n_comp %d", m->n_comp);
	sekv_mem_free(m);
	sekv_mem_free(g);
}

static void store_put_mem_shape_mismatch_rejected(struct test_ctx *t)
{
	const char *path = db_path("memshape");
	struct sekv_mem *m = synth_mem(5, 200, 2, 4, 1, 16, 8, 20), *g = NULL;
	struct fixture f;
	struct store_doc d;
	struct store *s = NULL;
	char err[512];
	int rc, r1, r2, r3, r4;

	T_CHECK(t, m != NULL);
	rc = store_open(&s, path, err, sizeof err);
	if (rc == 0)
		rc = fixture_make(s, &f, 5, "shape", 2, 0, 1, 32, 200, 50, err, sizeof err);
	T_CHECKF(t, rc == 0, "%s", err);
	/* d_h 16 against a document of d_h 32 */
	r1 = store_doc_put_mem(s, f.doc.id, m, 0.1, err, sizeof err);
	m->d_h = 32;
	m->n_tok = 201;  /* more tokens than stored */
	r2 = store_doc_put_mem(s, f.doc.id, m, 0.1, err, sizeof err);
	m->d_h = 16;
	m->n_tok = 200;
	if (m->n_comp > 1) {
		int32_t c0 = m->comp_span[0];
		m->comp_span[0] = m->comp_span[1];
		r3 = store_doc_put_mem(s, f.doc.id, m, 0.1, err, sizeof err);
		m->comp_span[0] = c0;
	} else {
		r3 = SEKV_EINVAL;
	}
	m->fac[0].rank = 1000;
	r4 = store_doc_put_mem(s, f.doc.id, m, 0.1, err, sizeof err);
	rc = store_doc_get(s, f.doc.id, &d, err, sizeof err);
	T_CHECK(t, store_doc_get_mem(s, f.doc.id, &g, err, sizeof err) == SEKV_ENOTFOUND);
	store_close(s);
	sekv_mem_free(m);
	fixture_free(&f);
	T_CHECKF(t, r1 == SEKV_EMISMATCH, "d_h mismatch: %d", r1);
	T_CHECKF(t, r2 == SEKV_EMISMATCH || r2 == SEKV_EINVAL, "n_tok: %d", r2);
	T_CHECKF(t, r3 == SEKV_EINVAL, "comp_span: %d", r3);
	T_CHECKF(t, r4 == SEKV_EINVAL, "rank: %d", r4);
	T_CHECK(t, rc == 0 && d.state == STORE_DOC_PREFILL);
}

static void store_doc_list_in_id_order(struct test_ctx *t)
{
	const char *path = db_path("list");
	static const char *const names[] = { "alpha", "beta", "gamma", "delta" };
	struct fixture f[4];
	struct store_doc *list = NULL;
	struct store *s = NULL;
	char err[512];
	int rc = 0, n = -1;

	memset(f, 0, sizeof f);
	T_CHECKF(t, store_open(&s, path, err, sizeof err) == 0, "%s", err);
	for (int i = 0; i < 4 && rc == 0; i++)
		rc = fixture_make(s, &f[i], 20 + i, names[i], 1, 0, 1, 8, 10 * (i + 1), 7,
				  err, sizeof err);
	if (rc == 0)
		rc = store_doc_delete(s, f[1].doc.id, err, sizeof err);
	if (rc == 0)
		rc = store_doc_list(s, &list, &n, err, sizeof err);
	store_close(s);
	for (int i = 0; i < 4; i++)
		fixture_free(&f[i]);
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECKF(t, n == 3, "n %d", n);
	T_CHECK(t, strcmp(list[0].title, "alpha") == 0 && strcmp(list[1].title, "gamma") == 0 &&
		strcmp(list[2].title, "delta") == 0);
	T_CHECK(t, list[0].id < list[1].id && list[1].id < list[2].id);
	/* 10/30/40 tokens: 8 bytes of ids + surprisal, 2 * 8 * 2 of KV each */
	T_CHECKF(t, list[0].n_tok == 10 && list[0].disk_bytes == 10 * (8 + 32) &&
		 list[1].disk_bytes == 30 * 40 && list[2].disk_bytes == 40 * 40,
		 "disk bytes %lld %lld %lld", (long long)list[0].disk_bytes,
		 (long long)list[1].disk_bytes, (long long)list[2].disk_bytes);
	free(list);
	/* a new document gets a new id, after every earlier one */
	{
		struct store_doc d = {0};
		T_CHECK(t, store_open(&s, path, err, sizeof err) == 0);
		rc = store_doc_create(s, &d, "", 0, err, sizeof err);
		if (rc == 0)
			rc = store_doc_list(s, &list, &n, err, sizeof err);
		store_close(s);
		T_CHECKF(t, rc == 0 && n == 4 && list[3].id == d.id && d.id > list[2].id, "%s", err);
		free(list);
	}
}

static const char *const owned_tables[] = { "doc_text", "tok_chunk", "kv_chunk", "swa",
					    "mem", "mem_layer" };

static void store_doc_delete_removes_everything(struct test_ctx *t)
{
	const char *path = db_path("delete");
	struct sekv_mem *m1 = synth_mem(31, 300, 2, 2, 1, 16, 8, 30);
	struct sekv_mem *m2 = synth_mem(32, 250, 2, 2, 1, 16, 8, 30), *g = NULL;
	struct fixture f1, f2;
	struct store *s = NULL;
	char err[512], sql[256], why[256];
	int rc, r_get, r_mem, r_tok, r_del, r_swa;
	int64_t left = 0, bytes1, bytes_after, n_tok;
	int32_t *tk = NULL;
	float *hh = NULL;

	T_CHECK(t, m1 && m2);
	memset(&f1, 0, sizeof f1);
	memset(&f2, 0, sizeof f2);
	rc = store_open(&s, path, err, sizeof err);
	if (rc == 0)
		rc = store_with_mem(s, &f1, m1, 31, 0.1, err, sizeof err);
	if (rc == 0)
		rc = store_with_mem(s, &f2, m2, 32, 0.1, err, sizeof err);
	if (rc) {
		store_close(s);
		sekv_mem_free(m1);
		sekv_mem_free(m2);
		fixture_free(&f1);
		fixture_free(&f2);
		T_CHECKF(t, 0, "%s", err);
	}
	bytes1 = store_doc_disk_bytes(s, f1.doc.id);
	rc = store_doc_delete(s, f1.doc.id, err, sizeof err);
	r_get = store_doc_get(s, f1.doc.id, &f1.doc, NULL, 0);
	r_mem = store_doc_get_mem(s, f1.doc.id, &g, NULL, 0);
	r_tok = store_doc_get_tokens(s, f1.doc.id, &tk, &hh, &n_tok, NULL, 0);
	r_swa = store_doc_put_swa(s, f1.doc.id, 0, NULL, 0, NULL, NULL, NULL, 0);
	r_del = store_doc_delete(s, f1.doc.id, NULL, 0);
	bytes_after = store_doc_disk_bytes(s, f1.doc.id);
	/* the other document is untouched */
	if (rc == 0 && fixture_check(s, &f2, why, sizeof why))
		rc = -1, snprintf(err, sizeof err, "other doc: %s", why);
	if (rc == 0 && (rc = store_doc_get_mem(s, f2.doc.id, &g, err, sizeof err)) == 0 &&
	    mem_cmp(m2, g, why, sizeof why))
		rc = -1, snprintf(err, sizeof err, "other mem: %s", why);
	sekv_mem_free(g);
	store_close(s);
	for (size_t i = 0; i < sizeof owned_tables / sizeof owned_tables[0]; i++) {
		snprintf(sql, sizeof sql, "SELECT count(*) FROM %s WHERE doc = %lld",
			 owned_tables[i], (long long)f1.doc.id);
		left += raw_int(path, sql);
	}
	snprintf(sql, sizeof sql, "SELECT count(*) FROM mem_layer WHERE doc = %lld",
		 (long long)f2.doc.id);
	T_CHECK(t, raw_int(path, sql) == 2);
	sekv_mem_free(m1);
	sekv_mem_free(m2);
	fixture_free(&f1);
	fixture_free(&f2);
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECK(t, r_get == SEKV_ENOTFOUND && r_mem == SEKV_ENOTFOUND && r_tok == SEKV_ENOTFOUND &&
		r_swa == SEKV_ENOTFOUND && r_del == SEKV_ENOTFOUND);
	T_CHECKF(t, left == 0, "%lld rows left", (long long)left);
	T_CHECKF(t, bytes1 > 0 && bytes_after == 0, "bytes %lld -> %lld", (long long)bytes1,
		 (long long)bytes_after);
}

static void store_disk_bytes_is_sum_of_blobs(struct test_ctx *t)
{
	const char *path = db_path("diskbytes");
	struct sekv_mem *m = synth_mem(41, 400, 3, 4, 2, 16, 12, 40);
	struct fixture f;
	struct store_doc d;
	struct store *s = NULL;
	char err[512];
	int64_t want, got;
	size_t row, fac = 0, nf;
	int rc;

	T_CHECK(t, m != NULL);
	rc = store_open(&s, path, err, sizeof err);
	if (rc == 0)
		rc = store_with_mem(s, &f, m, 41, 0.1, err, sizeof err);
	if (rc == 0)
		rc = store_doc_get(s, f.doc.id, &d, err, sizeof err);
	got = store_doc_disk_bytes(s, f.doc.id);
	store_close(s);
	/* what the shapes say, counted independently of the schema */
	row = (size_t)m->n_head_kv * m->d_h;
	nf = (size_t)m->n_layer * m->n_comp * m->n_head_kv * 2;
	for (size_t i = 0; i < nf; i++) {
		size_t len = (size_t)m->span[m->comp_span[(i / ((size_t)m->n_head_kv * 2)) %
						       (size_t)m->n_comp]].len;
		fac += (size_t)m->fac[i].rank * ((len + (size_t)m->d_h) * (m->factor_f16 ? 2 : 4) + 4);
	}
	want = (int64_t)f.n_tok * 8 + (int64_t)f.n_tok * m->n_layer * row * 4  /* chunks */
	       + (int64_t)2 * 16 * row * 4                                       /* swa */
	       + m->n_layer * 4 + m->n_span * 12 + m->n_exact * 4 + nf * 4 + m->n_tok * 9
	       + (int64_t)m->n_layer * (m->n_head * 4 + m->n_head * SEKV_D_ROUTE * m->d_h * 4 +
					m->n_comp * row * 8 + m->n_exact * row * 4)
	       + (int64_t)fac;
	T_CHECK(t, m->host_bytes == fac);
	sekv_mem_free(m);
	fixture_free(&f);
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECKF(t, got == want && d.disk_bytes == want, "disk bytes %lld / %lld, expected %lld",
		 (long long)got, (long long)d.disk_bytes, (long long)want);
}

/* One corruption: SQL run on the file, and which reader must refuse it. */
enum reader { R_TOKENS, R_KV, R_SWA, R_MEM };
struct corruption {
	const char *sql;       /* %1$lld = doc id */
	enum reader reader;
	int code;
	const char *needle;    /* in the error message, besides "doc N" */
};

static int run_reader(struct store *s, int64_t doc, enum reader r, char *err, size_t errlen)
{
	int rc = 0;

	switch (r) {
	case R_TOKENS: {
		int32_t *tk = NULL;
		float *h = NULL;
		int64_t n;
		rc = store_doc_get_tokens(s, doc, &tk, &h, &n, err, errlen);
		free(tk);
		free(h);
		break;
	}
	case R_KV: {
		struct store_doc d;
		uint16_t *k, *v;
		if ((rc = store_doc_get(s, doc, &d, err, errlen)))
			break;
		k = malloc((size_t)d.n_tok * d.n_head_kv * d.d_h * 2 + 1);
		v = malloc((size_t)d.n_tok * d.n_head_kv * d.d_h * 2 + 1);
		for (int l = 0; l < d.n_layer_global && rc == 0; l++)
			rc = store_doc_get_full_kv(s, doc, l, k, v, err, errlen);
		free(k);
		free(v);
		break;
	}
	case R_SWA: {
		int n_layer, n_row;
		int32_t *lid;
		uint16_t **k, **v;
		rc = store_doc_get_swa(s, doc, &n_layer, &lid, &n_row, &k, &v, err, errlen);
		store_swa_free(n_layer, lid, k, v);
		break;
	}
	case R_MEM: {
		struct sekv_mem *m = NULL;
		rc = store_doc_get_mem(s, doc, &m, err, errlen);
		sekv_mem_free(m);
		break;
	}
	}
	return rc;
}

static void store_corrupt_file_is_clean_error(struct test_ctx *t)
{
	static const struct corruption cases[] = {
		/* blob lengths one byte off, or empty */
		{ "UPDATE tok_chunk SET tokens = substr(tokens, 2) WHERE doc = %lld AND pos0 > 0", R_TOKENS, SEKV_EFORMAT, "tok_chunk.tokens" },
		{ "UPDATE tok_chunk SET surprisal = CAST(surprisal || x'00' AS BLOB) WHERE doc = %lld", R_TOKENS, SEKV_EFORMAT, "tok_chunk.surprisal" },
		{ "UPDATE kv_chunk SET k = zeroblob(3) WHERE doc = %lld AND layer = 1", R_KV, SEKV_EFORMAT, "kv_chunk.k" },
		{ "UPDATE kv_chunk SET v = substr(v, 3) WHERE doc = %lld", R_KV, SEKV_EFORMAT, "kv_chunk.v" },
		{ "UPDATE swa SET k = substr(k, 2) WHERE doc = %lld AND idx = 1", R_SWA, SEKV_EFORMAT, "swa.k" },
		{ "UPDATE swa SET v = 'text' WHERE doc = %lld", R_SWA, SEKV_EFORMAT, "swa.v" },
		{ "UPDATE swa SET k = CAST(k AS TEXT) WHERE doc = %lld", R_SWA, SEKV_EFORMAT, "swa.k" },
		{ "UPDATE mem SET layer_id = substr(layer_id, 2) WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "mem.layer_id" },
		{ "UPDATE mem SET spans = CAST(spans || x'00' AS BLOB) WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "mem.spans" },
		{ "UPDATE mem SET exact_pos = substr(exact_pos, 5) WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "mem.exact_pos" },
		{ "UPDATE mem SET ranks = substr(ranks, 2) WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "mem.ranks" },
		{ "UPDATE mem SET tokens = x'' WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "mem.tokens" },
		{ "UPDATE mem SET surprisal = 12 WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "mem.surprisal" },
		{ "UPDATE mem SET is_anchor = CAST(is_anchor || x'01' AS BLOB) WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "mem.is_anchor" },
		{ "UPDATE mem_layer SET tau = substr(tau, 2) WHERE doc = %lld AND layer = 1", R_MEM, SEKV_EFORMAT, "mem_layer.tau" },
		{ "UPDATE mem_layer SET route_w = substr(route_w, 2) WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "mem_layer.route_w" },
		{ "UPDATE mem_layer SET k_bar = CAST(k_bar || x'00' AS BLOB) WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "mem_layer.k_bar" },
		{ "UPDATE mem_layer SET v_bar = substr(v_bar, 2) WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "mem_layer.v_bar" },
		{ "UPDATE mem_layer SET exact_k = substr(exact_k, 2) WHERE doc = %lld AND layer = 1", R_MEM, SEKV_EFORMAT, "mem_layer.exact_k" },
		{ "UPDATE mem_layer SET exact_v = zeroblob(7) WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "mem_layer.exact_v" },
		{ "UPDATE mem_layer SET fac_s = substr(fac_s, 5) WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "mem_layer.fac_s" },
		{ "UPDATE mem_layer SET fac_u = zeroblob(7) WHERE doc = %lld AND layer = 1", R_MEM, SEKV_EFORMAT, "mem_layer.fac_u" },
		{ "UPDATE mem_layer SET fac_v = CAST(fac_v || x'0000' AS BLOB) WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "mem_layer.fac_v" },
		/* shapes and positions that disagree with the blobs or each other */
		{ "UPDATE tok_chunk SET pos0 = pos0 + 1 WHERE doc = %lld AND pos0 > 0", R_TOKENS, SEKV_EFORMAT, "tok_chunk" },
		{ "DELETE FROM tok_chunk WHERE doc = %lld AND pos0 > 0", R_TOKENS, SEKV_EFORMAT, "tok_chunk" },
		{ "UPDATE tok_chunk SET n = -1 WHERE doc = %lld", R_TOKENS, SEKV_EFORMAT, "tok_chunk" },
		{ "UPDATE documents SET n_tok = n_tok + 1 WHERE id = %lld", R_KV, SEKV_EFORMAT, "kv_chunk" },
		{ "UPDATE documents SET d_h = 100000 WHERE id = %lld", R_KV, SEKV_EFORMAT, "documents" },
		{ "UPDATE kv_chunk SET n = n * 1000 WHERE doc = %lld", R_KV, SEKV_EFORMAT, "kv_chunk" },
		{ "UPDATE swa SET idx = 5 WHERE doc = %lld AND idx = 1", R_SWA, SEKV_EFORMAT, "swa" },
		{ "UPDATE swa SET n_row = 1000000 WHERE doc = %lld", R_SWA, SEKV_EFORMAT, "swa" },
		{ "UPDATE swa SET pos_end = pos_end - 1 WHERE doc = %lld", R_SWA, SEKV_EMISMATCH, "swa" },
		{ "UPDATE mem SET n_span = n_span + 1 WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "mem" },
		{ "UPDATE mem SET d_h = 1000000000 WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "mem" },
		{ "UPDATE mem SET n_head = 3 WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "mem" },
		{ "UPDATE mem SET n_tok = 99999999999 WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "mem" },
		{ "UPDATE mem SET spans = CAST(x'00000000ffffff7f00000000' || substr(spans, 13) AS BLOB) WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "mem.spans" },
		{ "UPDATE mem SET spans = CAST(substr(spans, 1, 8) || x'02000000' || substr(spans, 13) AS BLOB) WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "mem.spans" },
		{ "UPDATE mem SET ranks = CAST(x'ffff0000' || substr(ranks, 5) AS BLOB) WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "rank" },
		{ "UPDATE mem SET ranks = CAST(x'ffffffff' || substr(ranks, 5) AS BLOB) WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "rank" },
		{ "UPDATE mem SET exact_pos = CAST(substr(exact_pos, 5, 4) || substr(exact_pos, 5) AS BLOB) WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "exact_pos" },
		{ "DELETE FROM mem_layer WHERE doc = %lld AND layer = 1", R_MEM, SEKV_EFORMAT, "mem_layer" },
		{ "UPDATE mem_layer SET layer = 7 WHERE doc = %lld AND layer = 0", R_MEM, SEKV_EFORMAT, "mem_layer" },
		/* the factor type: out of range, not an integer, or flipped so the
		 * blobs have the other type's lengths */
		{ "UPDATE mem SET factor_f16 = 2 WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "mem.factor_f16" },
		{ "UPDATE mem SET factor_f16 = 'yes' WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "mem.factor_f16" },
		{ "UPDATE mem SET factor_f16 = 1 - factor_f16 WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "mem_layer.fac_u" },
		{ "UPDATE mem SET factor_f16 = 1 - factor_f16 WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "mem_layer.fac_u" },
	};
	const char *path = db_path("corrupt");
	char err[512], sql[512], docstr[48], name[64];
	int n_case = (int)(sizeof cases / sizeof cases[0]);

	for (int i = 0; i < n_case; i++) {
		struct sekv_mem *m = synth_mem(50 + i, 300, 2, 2, 1, 16, 8, 30);
		struct fixture f;
		struct store *s = NULL;
		int rc, rc_before;

		T_CHECK(t, m != NULL);
		snprintf(name, sizeof name, "corrupt%d", i);
		path = db_path(name);
		rc = store_open(&s, path, err, sizeof err);
		if (rc == 0)
			rc = store_with_mem(s, &f, m, 50 + i, 0.1, err, sizeof err);
		sekv_mem_free(m);
		if (rc) {
			store_close(s);
			fixture_free(&f);
			T_CHECKF(t, 0, "setup: %s", err);
		}
		rc_before = run_reader(s, f.doc.id, cases[i].reader, err, sizeof err);
		snprintf(sql, sizeof sql, cases[i].sql, (long long)f.doc.id);
		if (raw_exec(path, sql) != SQLITE_OK || rc_before != 0) {
			store_close(s);
			fixture_free(&f);
			T_CHECKF(t, 0, "case %d: setup rc %d, sql %s", i, rc_before, sql);
		}
		err[0] = 0;
		rc = run_reader(s, f.doc.id, cases[i].reader, err, sizeof err);
		snprintf(docstr, sizeof docstr, "doc %lld", (long long)f.doc.id);
		store_close(s);
		fixture_free(&f);
		T_CHECKF(t, rc == cases[i].code, "case %d (%s): rc %d, want %d: %s", i, sql, rc,
			 cases[i].code, err);
		T_CHECKF(t, strstr(err, cases[i].needle) && strstr(err, docstr),
			 "case %d: message lacks '%s' or '%s': %s", i, cases[i].needle, docstr, err);
	}
}

static void store_newer_schema_refused(struct test_ctx *t)
{
	const char *path = db_path("newer");
	const char *foreign = db_path("foreign");
	const char *garbage = db_path("garbage");
	struct store *s = NULL;
	char err[512];
	FILE *fp;
	int rc;

	T_CHECK(t, store_open(&s, path, err, sizeof err) == 0);
	store_close(s);
	T_CHECK(t, raw_exec(path, "PRAGMA user_version = 3") == SQLITE_OK);
	rc = store_open(&s, path, err, sizeof err);
	T_CHECKF(t, rc == SEKV_EFORMAT && s == NULL && strstr(err, "newer"), "rc %d: %s", rc, err);
	T_CHECK(t, raw_int(path, "PRAGMA user_version") == 3);
	/* an SQLite file of some other program */
	T_CHECK(t, raw_exec(foreign, "CREATE TABLE t (x)") == SQLITE_OK);
	rc = store_open(&s, foreign, err, sizeof err);
	T_CHECKF(t, rc == SEKV_EFORMAT && strstr(err, "not a sekv library"), "rc %d: %s", rc, err);
	/* not an SQLite file at all */
	fp = fopen(garbage, "wb");
	T_CHECK(t, fp != NULL);
	for (int i = 0; i < 300; i++)
		fputs("this is not a database file ", fp);
	fclose(fp);
	rc = store_open(&s, garbage, err, sizeof err);
	T_CHECKF(t, rc == SEKV_EFORMAT && s == NULL, "rc %d: %s", rc, err);
}

/* A version 1 file (no mem.factor_f16 column, fp32 factors) migrates to
 * version 2 on open and its memory loads bit-exactly as fp32; an fp16
 * memory then replaces it in the migrated file and loads back too. */
static void store_v1_memory_loads_as_fp32(struct test_ctx *t)
{
	const char *path = db_path("v1mem");
	struct sekv_mem *m = synth_mem(62, 300, 2, 2, 1, 16, 8, 30);
	struct sekv_mem *m16 = synth_mem(63, 300, 2, 2, 1, 16, 8, 30), *g = NULL, *g16 = NULL;
	struct fixture f;
	struct store *s = NULL;
	char err[512], why[256] = "";
	int rc, v1_ok, diff = 1, diff16 = 1;
	int64_t ver;

	memset(&f, 0, sizeof f);
	T_CHECK(t, m && m16 && m->factor_f16 == 0 && m16->factor_f16 == 1);
	rc = store_open(&s, path, err, sizeof err);
	if (rc == 0)
		rc = store_with_mem(s, &f, m, 62, 0.1, err, sizeof err);
	store_close(s);
	s = NULL;
	v1_ok = rc == 0 &&
		raw_exec(path, "ALTER TABLE mem DROP COLUMN factor_f16;"
			 " PRAGMA user_version = 1") == SQLITE_OK &&
		raw_int(path, "SELECT count(*) FROM pragma_table_info('mem')"
			" WHERE name = 'factor_f16'") == 0;
	if (rc == 0)
		rc = store_open(&s, path, err, sizeof err);
	ver = raw_int(path, "PRAGMA user_version");
	if (rc == 0)
		rc = store_doc_get_mem(s, f.doc.id, &g, err, sizeof err);
	if (rc == 0)
		diff = mem_cmp(m, g, why, sizeof why);
	if (rc == 0)
		rc = store_doc_put_mem(s, f.doc.id, m16, 0.1, err, sizeof err);
	if (rc == 0)
		rc = store_doc_get_mem(s, f.doc.id, &g16, err, sizeof err);
	if (rc == 0)
		diff16 = mem_cmp(m16, g16, why, sizeof why);
	store_close(s);
	fixture_free(&f);
	T_CHECK(t, v1_ok);
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECKF(t, ver == 2, "user_version %lld after migration", (long long)ver);
	T_CHECKF(t, !diff && g->factor_f16 == 0, "v1 memory: %s", why);
	T_CHECKF(t, !diff16 && g16->factor_f16 == 1, "fp16 memory: %s", why);
	sekv_mem_free(m);
	sekv_mem_free(m16);
	sekv_mem_free(g);
	sekv_mem_free(g16);
}

static void store_reopen_keeps_everything(struct test_ctx *t)
{
	const char *path = db_path("reopen");
	struct sekv_mem *m = synth_mem(61, 500, 3, 4, 1, 32, 16, 40), *g = NULL;
	struct fixture f;
	struct store_doc d1, d2;
	struct store *s = NULL;
	char err[512], why[256];
	int rc;

	T_CHECK(t, m != NULL);
	rc = store_open(&s, path, err, sizeof err);
	if (rc == 0)
		rc = store_with_mem(s, &f, m, 61, 0.2, err, sizeof err);
	if (rc == 0)
		rc = store_doc_get(s, f.doc.id, &d1, err, sizeof err);
	store_close(s);
	s = NULL;
	if (rc == 0)
		rc = store_open(&s, path, err, sizeof err);
	if (rc == 0)
		rc = store_doc_get(s, f.doc.id, &d2, err, sizeof err);
	if (rc == 0 && memcmp(&d1, &d2, sizeof d1))
		rc = -1, snprintf(err, sizeof err, "document row differs");
	if (rc == 0 && fixture_check(s, &f, why, sizeof why))
		rc = -1, snprintf(err, sizeof err, "%s", why);
	if (rc == 0 && (rc = store_doc_get_mem(s, f.doc.id, &g, err, sizeof err)) == 0 &&
	    mem_cmp(m, g, why, sizeof why))
		rc = -1, snprintf(err, sizeof err, "%s", why);
	store_close(s);
	sekv_mem_free(g);
	sekv_mem_free(m);
	fixture_free(&f);
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECK(t, d2.state == STORE_DOC_READY && d2.n_tok == 500 && d2.disk_bytes > 0);
}

static void store_tx_groups_chunk_and_swa(struct test_ctx *t)
{
	const char *path = db_path("tx");
	struct fixture f;
	struct store_doc d;
	struct store *s = NULL;
	int32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8}, *lid = NULL;
	float h[8] = {0};
	uint16_t kv[8 * 8] = {0}, **sk = NULL, **sv = NULL;
	const uint16_t *k[1] = { kv }, *v[1] = { kv };
	char err[512];
	int rc, n_layer = 0, n_row = 0, r_in, r_swa, n_row2;

	rc = store_open(&s, path, err, sizeof err);
	if (rc == 0)
		rc = fixture_make(s, &f, 71, "tx", 1, 2, 1, 8, 16, 16, err, sizeof err);
	if (rc == 0)
		rc = fixture_swa(s, &f, 71, 4, err, sizeof err);
	T_CHECKF(t, rc == 0, "%s", err);
	/* rolled back: neither the chunk nor the SWA rows */
	rc = store_tx_begin(s, err, sizeof err);
	if (rc == 0)
		rc = store_doc_put_chunk(s, f.doc.id, 16, 8, tok, h, k, v, 1, err, sizeof err);
	if (rc == 0)
		rc = fixture_swa(s, &f, 72, 6, err, sizeof err);
	store_tx_rollback(s);
	if (rc == 0)
		rc = store_doc_get(s, f.doc.id, &d, err, sizeof err);
	r_swa = store_doc_get_swa(s, f.doc.id, &n_layer, &lid, &n_row, &sk, &sv, NULL, 0);
	store_swa_free(n_layer, lid, sk, sv);
	if (rc) {
		store_close(s);
		fixture_free(&f);
		T_CHECKF(t, 0, "%s", err);
	}
	T_CHECK(t, d.n_tok == 16 && r_swa == 0 && n_row == 4);
	/* committed: both; a failing call inside undoes only itself */
	rc = store_tx_begin(s, err, sizeof err);
	if (rc == 0)
		rc = store_doc_put_chunk(s, f.doc.id, 16, 8, tok, h, k, v, 1, err, sizeof err);
	r_in = store_doc_put_chunk(s, f.doc.id, 3, 8, tok, h, k, v, 1, NULL, 0);
	if (rc == 0)
		rc = fixture_swa(s, &f, 73, 5, err, sizeof err);
	if (rc == 0)
		rc = store_tx_commit(s, err, sizeof err);
	else
		store_tx_rollback(s);
	if (rc == 0)
		rc = store_doc_get(s, f.doc.id, &d, err, sizeof err);
	r_swa = store_doc_get_swa(s, f.doc.id, &n_layer, &lid, &n_row, &sk, &sv, NULL, 0);
	store_swa_free(n_layer, lid, sk, sv);
	n_row2 = n_row;
	/* SWA rows older than the last chunk are refused as stale */
	{
		int r_stale = 0;
		if (rc == 0)
			rc = store_doc_put_chunk(s, f.doc.id, 24, 8, tok, h, k, v, 1, err, sizeof err);
		r_stale = store_doc_get_swa(s, f.doc.id, &n_layer, &lid, &n_row, &sk, &sv, err,
					    sizeof err);
		store_swa_free(n_layer, lid, sk, sv);
		store_close(s);
		fixture_free(&f);
		T_CHECKF(t, rc == 0, "%s", err);
		T_CHECK(t, r_in == SEKV_EINVAL);
		T_CHECK(t, d.n_tok == 24 && r_swa == 0 && n_row2 == 5);
		T_CHECKF(t, r_stale == SEKV_EMISMATCH, "stale swa: %d", r_stale);
	}
}

/* Step faults at every point of put_mem: each failure leaves the old
 * memory (and document row) exactly as it was; the store stays usable. */
static void store_fault_step_mem_keeps_previous(struct test_ctx *t)
{
	const char *path = db_path("faultmem");
	struct sekv_mem *a = synth_mem(81, 300, 3, 4, 1, 16, 8, 30);
	struct sekv_mem *b = synth_mem(82, 300, 3, 4, 1, 16, 8, 30), *g = NULL;
	struct fixture f;
	struct store_doc d;
	struct store *s = NULL;
	char err[512], why[256];
	int rc, n_fail = 0, done = 0, n_read_fail = 0;

	T_CHECK(t, a && b);
	rc = store_open(&s, path, err, sizeof err);
	if (rc == 0)
		rc = store_with_mem(s, &f, a, 81, 0.1, err, sizeof err);
	for (int n = 1; rc == 0 && !done && n < 200; n++) {
		int rp;
		store_fault_step(s, n);
		err[0] = 0;
		rp = store_doc_put_mem(s, f.doc.id, b, 0.3, err, sizeof err);
		store_fault_step(s, 0);
		if (rp == 0) {
			done = 1;
			break;
		}
		n_fail++;
		if (!strstr(err, "injected fault")) {
			rc = -1;
			snprintf(why, sizeof why, "step %d: rc %d: %s", n, rp, err);
			snprintf(err, sizeof err, "%s", why);
			break;
		}
		rc = store_doc_get_mem(s, f.doc.id, &g, err, sizeof err);
		if (rc == 0 && mem_cmp(a, g, why, sizeof why))
			rc = -1, snprintf(err, sizeof err, "after fault at step %d: %s", n, why);
		sekv_mem_free(g);
		g = NULL;
		if (rc == 0)
			rc = store_doc_get(s, f.doc.id, &d, err, sizeof err);
		if (rc == 0 && d.budget != 0.1)
			rc = -1, snprintf(err, sizeof err, "doc row changed at step %d", n);
	}
	/* a read failing at any step fails cleanly, until it has no step left
	 * to fail and then loads the new memory */
	for (int n = 1, ok = 0; rc == 0 && !ok && n < 100; n++) {
		store_fault_step(s, n);
		ok = store_doc_get_mem(s, f.doc.id, &g, NULL, 0) == 0;
		store_fault_step(s, 0);
		n_read_fail += !ok;
		if (ok && mem_cmp(b, g, why, sizeof why))
			rc = -1, snprintf(err, sizeof err, "final: %s", why);
		sekv_mem_free(g);
		g = NULL;
	}
	store_close(s);
	sekv_mem_free(a);
	sekv_mem_free(b);
	fixture_free(&f);
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECKF(t, done && n_fail >= 6, "done %d after %d failures", done, n_fail);
	T_CHECKF(t, n_read_fail >= 6, "%d read failures", n_read_fail);
}

static void store_fault_step_chunk_keeps_previous(struct test_ctx *t)
{
	const char *path = db_path("faultchunk");
	struct fixture f;
	struct store *s = NULL;
	int32_t tok[32];
	float h[32];
	uint16_t kv[2][32 * 2 * 8];
	const uint16_t *k[2] = { kv[0], kv[1] }, *v[2] = { kv[1], kv[0] };
	char err[512];
	int rc, n_fail = 0, done = 0;
	uint64_t r = 99;

	rnd_fill(&r, tok, sizeof tok);
	rnd_fill(&r, h, sizeof h);
	rnd_fill(&r, kv, sizeof kv);
	rc = store_open(&s, path, err, sizeof err);
	if (rc == 0)
		rc = fixture_make(s, &f, 91, "faultchunk", 2, 1, 2, 8, 100, 30, err, sizeof err);
	if (rc == 0)
		rc = fixture_swa(s, &f, 91, 10, err, sizeof err);
	for (int n = 1; rc == 0 && !done && n < 100; n++) {
		int rp;
		store_fault_step(s, n);
		rp = store_doc_put_chunk(s, f.doc.id, 100, 32, tok, h, k, v, 1, err, sizeof err);
		store_fault_step(s, 0);
		if (rp == 0) {
			done = 1;
		} else {
			n_fail++;
			if (fixture_check(s, &f, err, sizeof err))
				rc = -1;
		}
	}
	store_close(s);
	fixture_free(&f);
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECKF(t, done && n_fail >= 4, "done %d after %d failures", done, n_fail);
}

/* ---- a VFS that fails (or dies at) the n-th write ------------------------ */

struct shim_file {
	sqlite3_file base;
	sqlite3_file *real;
};

static sqlite3_vfs *shim_orig;
static sqlite3_vfs shim_vfs;
static int shim_countdown;   /* > 0: the countdown-th write from now fails */
static int shim_die;         /* 1: the failing write ends the process instead */
static int shim_hits;

#define REAL(f) (((struct shim_file *)(f))->real)

static int shim_close(sqlite3_file *f)
{
	int rc = REAL(f)->pMethods ? REAL(f)->pMethods->xClose(REAL(f)) : SQLITE_OK;
	return rc;
}
static int shim_read(sqlite3_file *f, void *p, int n, sqlite3_int64 off)
{ return REAL(f)->pMethods->xRead(REAL(f), p, n, off); }
static int shim_write(sqlite3_file *f, const void *p, int n, sqlite3_int64 off)
{
	if (shim_countdown > 0 && --shim_countdown == 0) {
		shim_hits++;
		if (shim_die)
			_exit(42);
		return SQLITE_IOERR_WRITE;
	}
	return REAL(f)->pMethods->xWrite(REAL(f), p, n, off);
}
static int shim_truncate(sqlite3_file *f, sqlite3_int64 n)
{ return REAL(f)->pMethods->xTruncate(REAL(f), n); }
static int shim_sync(sqlite3_file *f, int flags)
{ return REAL(f)->pMethods->xSync(REAL(f), flags); }
static int shim_size(sqlite3_file *f, sqlite3_int64 *n)
{ return REAL(f)->pMethods->xFileSize(REAL(f), n); }
static int shim_lock(sqlite3_file *f, int l)
{ return REAL(f)->pMethods->xLock(REAL(f), l); }
static int shim_unlock(sqlite3_file *f, int l)
{ return REAL(f)->pMethods->xUnlock(REAL(f), l); }
static int shim_reserved(sqlite3_file *f, int *r)
{ return REAL(f)->pMethods->xCheckReservedLock(REAL(f), r); }
static int shim_fcntl(sqlite3_file *f, int op, void *a)
{ return REAL(f)->pMethods->xFileControl(REAL(f), op, a); }
static int shim_sector(sqlite3_file *f)
{ return REAL(f)->pMethods->xSectorSize(REAL(f)); }
static int shim_devchar(sqlite3_file *f)
{ return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f)); }
static int shim_shm_map(sqlite3_file *f, int pg, int sz, int ext, void volatile **p)
{ return REAL(f)->pMethods->xShmMap(REAL(f), pg, sz, ext, p); }
static int shim_shm_lock(sqlite3_file *f, int off, int n, int flags)
{ return REAL(f)->pMethods->xShmLock(REAL(f), off, n, flags); }
static void shim_shm_barrier(sqlite3_file *f)
{ REAL(f)->pMethods->xShmBarrier(REAL(f)); }
static int shim_shm_unmap(sqlite3_file *f, int del)
{ return REAL(f)->pMethods->xShmUnmap(REAL(f), del); }
static int shim_fetch(sqlite3_file *f, sqlite3_int64 off, int n, void **pp)
{ return REAL(f)->pMethods->xFetch(REAL(f), off, n, pp); }
static int shim_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p)
{ return REAL(f)->pMethods->xUnfetch(REAL(f), off, p); }

static const sqlite3_io_methods shim_io = {
	3, shim_close, shim_read, shim_write, shim_truncate, shim_sync, shim_size,
	shim_lock, shim_unlock, shim_reserved, shim_fcntl, shim_sector, shim_devchar,
	shim_shm_map, shim_shm_lock, shim_shm_barrier, shim_shm_unmap, shim_fetch, shim_unfetch,
};

static int shim_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out)
{
	struct shim_file *sf = (struct shim_file *)f;
	int rc;

	(void)vfs;
	sf->real = (sqlite3_file *)(sf + 1);
	memset(sf->real, 0, (size_t)shim_orig->szOsFile);
	rc = shim_orig->xOpen(shim_orig, name, sf->real, flags, out);
	sf->base.pMethods = sf->real->pMethods ? &shim_io : NULL;
	return rc;
}

/* Makes the shim the default VFS (every store_open goes through it). */
static void shim_install(void)
{
	shim_orig = sqlite3_vfs_find(NULL);
	shim_vfs = *shim_orig;
	shim_vfs.zName = "sekv-test-shim";
	shim_vfs.szOsFile = (int)sizeof(struct shim_file) + shim_orig->szOsFile;
	shim_vfs.xOpen = shim_open;
	shim_vfs.pNext = NULL;
	sqlite3_vfs_register(&shim_vfs, 1);
	shim_countdown = shim_die = shim_hits = 0;
}

static void shim_remove(void)
{
	sqlite3_vfs_register(shim_orig, 1);
	sqlite3_vfs_unregister(&shim_vfs);
	shim_countdown = shim_die = 0;
}

/* The memory in the file is a or b (bitwise); which one in *which. */
static int mem_is(struct store *s, int64_t doc, const struct sekv_mem *a,
		  const struct sekv_mem *b, int *which, char *err, size_t errlen)
{
	struct sekv_mem *g = NULL;
	char why[256];
	int rc = store_doc_get_mem(s, doc, &g, err, errlen);

	*which = 0;
	if (rc == 0) {
		if (!mem_cmp(a, g, why, sizeof why))
			*which = 1;
		else if (b && !mem_cmp(b, g, why, sizeof why))
			*which = 2;
		else
			rc = -1, snprintf(err, errlen, "memory is neither old nor new: %s", why);
	}
	sekv_mem_free(g);
	return rc;
}

/* I/O errors at the n-th write (n growing geometrically, cache spills
 * included): put_mem fails cleanly and the file still holds the old memory,
 * or it succeeds and holds the new one. */
static void store_fault_write_keeps_previous(struct test_ctx *t)
{
	const char *path = db_path("faultio");
	struct sekv_mem *a = synth_mem(101, 2000, 3, 4, 1, 64, 32, 60);
	struct sekv_mem *b = synth_mem(102, 2000, 3, 4, 1, 64, 32, 60);
	struct fixture f;
	struct store *s = NULL;
	char err[512];
	int rc, n_fail = 0, which = 0, hits = 0;

	T_CHECK(t, a && b);
	rc = store_open(&s, path, err, sizeof err);
	if (rc == 0)
		rc = store_with_mem(s, &f, a, 101, 0.1, err, sizeof err);
	store_close(s);
	s = NULL;
	shim_install();
	for (int n = 1; rc == 0 && which != 2; n += 1 + n / 3) {
		int rp;
		rc = store_open(&s, path, err, sizeof err);
		if (rc)
			break;
		shim_countdown = n;
		rp = store_doc_put_mem(s, f.doc.id, b, 0.3, NULL, 0);
		hits += shim_countdown == 0;
		shim_countdown = 0;
		store_close(s);
		s = NULL;
		rc = store_open(&s, path, err, sizeof err);
		if (rc == 0)
			rc = mem_is(s, f.doc.id, a, b, &which, err, sizeof err);
		if (rc == 0 && rp != 0 && which != 1)
			rc = -1, snprintf(err, sizeof err, "write %d failed (%d) but memory changed", n, rp);
		if (rc == 0 && rp == 0 && which != 2)
			rc = -1, snprintf(err, sizeof err, "write %d: success but old memory", n);
		n_fail += rp != 0;
		store_close(s);
		s = NULL;
	}
	shim_remove();
	sekv_mem_free(a);
	sekv_mem_free(b);
	fixture_free(&f);
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECKF(t, which == 2 && n_fail >= 5 && hits >= n_fail, "which %d, %d failures, %d hits",
		 which, n_fail, hits);
}

/* The process dies at the n-th write of put_mem (a kill -9 in the middle
 * of a commit or of a checkpoint): reopening recovers the old memory or the
 * complete new one, never a mixture. */
static void store_crash_mid_write_recovers(struct test_ctx *t)
{
	const char *path = db_path("crash");
	struct sekv_mem *a = synth_mem(111, 1500, 3, 4, 1, 64, 32, 60);
	struct sekv_mem *b = synth_mem(112, 1500, 3, 4, 1, 64, 32, 60);
	struct fixture f;
	struct store *s = NULL;
	char err[512];
	int rc, n_crash = 0, n_old = 0, which = 0, finished = 0;

	T_CHECK(t, a && b);
	rc = store_open(&s, path, err, sizeof err);
	if (rc == 0)
		rc = store_with_mem(s, &f, a, 111, 0.1, err, sizeof err);
	store_close(s);
	s = NULL;
	for (int n = 1; rc == 0 && !finished && n < 100000; n += 1 + n / 2) {
		int status = 0;
		pid_t pid;
		fflush(NULL);
		pid = fork();
		if (pid < 0) {
			rc = -1;
			snprintf(err, sizeof err, "fork failed");
			break;
		}
		if (pid == 0) {
			struct store *cs = NULL;
			shim_install();
			if (store_open(&cs, path, NULL, 0))
				_exit(3);
			shim_die = 1;
			shim_countdown = n;
			if (store_doc_put_mem(cs, f.doc.id, b, 0.3, NULL, 0))
				_exit(4);
			store_close(cs);
			_exit(0);
		}
		waitpid(pid, &status, 0);
		if (!WIFEXITED(status) || (WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 42)) {
			rc = -1;
			snprintf(err, sizeof err, "child at write %d: status %d", n, status);
			break;
		}
		finished = WEXITSTATUS(status) == 0;
		n_crash += !finished;
		rc = store_open(&s, path, err, sizeof err);
		if (rc == 0)
			rc = mem_is(s, f.doc.id, a, b, &which, err, sizeof err);
		if (rc == 0 && finished && which != 2)
			rc = -1, snprintf(err, sizeof err, "finished but old memory");
		n_old += which == 1;
		/* back to the old memory for the next crash */
		if (rc == 0 && which == 2 && !finished)
			rc = store_doc_put_mem(s, f.doc.id, a, 0.1, err, sizeof err);
		store_close(s);
		s = NULL;
	}
	sekv_mem_free(a);
	sekv_mem_free(b);
	fixture_free(&f);
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECKF(t, finished && n_crash >= 5 && n_old >= 3, "finished %d, %d crashes, %d old",
		 finished, n_crash, n_old);
}

const struct test_case test_store[] = {
	{ "store_default_path_xdg_and_home", store_default_path_xdg_and_home },
	{ "store_open_creates_parent_dirs", store_open_creates_parent_dirs },
	{ "store_doc_fields_and_text_round_trip", store_doc_fields_and_text_round_trip },
	{ "store_chunks_full_kv_swa_round_trip", store_chunks_full_kv_swa_round_trip },
	{ "store_chunk_pos0_mismatch_rejected", store_chunk_pos0_mismatch_rejected },
	{ "store_mem_round_trip_bit_exact", store_mem_round_trip_bit_exact },
	{ "store_mem_round_trip_of_sekv_build", store_mem_round_trip_of_sekv_build },
	{ "store_put_mem_shape_mismatch_rejected", store_put_mem_shape_mismatch_rejected },
	{ "store_doc_list_in_id_order", store_doc_list_in_id_order },
	{ "store_doc_delete_removes_everything", store_doc_delete_removes_everything },
	{ "store_disk_bytes_is_sum_of_blobs", store_disk_bytes_is_sum_of_blobs },
	{ "store_corrupt_file_is_clean_error", store_corrupt_file_is_clean_error },
	{ "store_newer_schema_refused", store_newer_schema_refused },
	{ "store_v1_memory_loads_as_fp32", store_v1_memory_loads_as_fp32 },
	{ "store_reopen_keeps_everything", store_reopen_keeps_everything },
	{ "store_tx_groups_chunk_and_swa", store_tx_groups_chunk_and_swa },
	{ "store_fault_step_mem_keeps_previous", store_fault_step_mem_keeps_previous },
	{ "store_fault_step_chunk_keeps_previous", store_fault_step_chunk_keeps_previous },
	{ "store_fault_write_keeps_previous", store_fault_write_keeps_previous },
	{ "store_crash_mid_write_recovers", store_crash_mid_write_recovers },
	{ NULL, NULL },
};
