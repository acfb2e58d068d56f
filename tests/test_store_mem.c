/* test_store_mem.c - SeKV memories in the library file: synthetic memories
 * of many shapes (fp16 and fp32 factors) and one built by sekv_build over
 * stored chunks load back bit for bit; memories whose shape disagrees with
 * their document are refused; H2O's scores round-trip and are checked
 * against their document. Helpers in store_fixtures.c.
 */
#include "tests/test.h"
#include "tests/store_fixtures.h"
#include "engine/base/err.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void store_mem_round_trip_bit_exact(struct test_ctx *t)
{
	const char *path = fixture_db_path("memrt");
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
		int n_head_kv = fixture_rnd_int(&r, 1, 2), d_h = 8 << fixture_rnd_int(&r, 0, 3);
		/* seed 0: all exact (no spans); others random sizes and ranks */
		int n_tok = i == 0 ? 7 : fixture_rnd_int(&r, 1, 700);
		c[i].m = fixture_synth_mem(r, n_tok, fixture_rnd_int(&r, 1, 3),
					   n_head_kv * fixture_rnd_int(&r, 1, 4), n_head_kv, d_h,
					   fixture_rnd_int(&r, 1, 40), fixture_rnd_int(&r, 1, 60));
		if (!c[i].m) {
			rc = -1;
			snprintf(err, sizeof err, "fixture_synth_mem %d failed", i);
			break;
		}
		n_f16 += c[i].m->factor_f16;
		rc = fixture_with_mem(s, &c[i].f, c[i].m, r, 0.1 * i, err, sizeof err);
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
			if (rc == 0 && fixture_mem_cmp(c[i].m, g, why, sizeof why)) {
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
		struct sekv_mem *m2 = fixture_synth_mem(77, c[2].m->n_tok, c[2].m->n_layer,
						c[2].m->n_head_kv, c[2].m->n_head_kv,
						c[2].m->d_h, 5, 9), *g = NULL;
		rc = m2 ? store_doc_put_mem(s, c[2].f.doc.id, m2, 0.5, err, sizeof err) : -1;
		if (rc == 0)
			rc = store_doc_get_mem(s, c[2].f.doc.id, &g, err, sizeof err);
		if (rc == 0 && fixture_mem_cmp(m2, g, why, sizeof why)) {
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
	const char *path = fixture_db_path("realmem");
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
		tok[i] = fixture_rnd_int(&r, 0, 262143);
		h[i] = i ? (float)fixture_rnd_int(&r, 0, 1000) / 150.0f : 0.0f;
	}
	for (int l = 0; l < L; l++) {
		k[l] = malloc(N * KVH * DH * 2);
		v[l] = malloc(N * KVH * DH * 2);
		kr[l] = malloc(N * KVH * DH * 2);
		vr[l] = malloc(N * KVH * DH * 2);
		/* finite fp16 values of both signs in [0.5, 2) */
		for (int i = 0; i < N * KVH * DH; i++) {
			k[l][i] = (uint16_t)((fixture_rnd(&r) & 0x8000) |
					     (0x3800 + (fixture_rnd(&r) & 0x7ff)));
			v[l][i] = (uint16_t)((fixture_rnd(&r) & 0x8000) |
					     (0x3800 + (fixture_rnd(&r) & 0x7ff)));
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
	p.exact_below = 0;  /* a short text, segmented as a long one */
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
	if (rc == 0 && fixture_mem_cmp(m, g, why, sizeof why))
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
	const char *path = fixture_db_path("memshape");
	struct sekv_mem *m = fixture_synth_mem(5, 200, 2, 4, 1, 16, 8, 20), *g = NULL;
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

/* H2O's scores: none before they are stored (the message says so), the
 * same bits after, reopened; a wrong shape is refused; a write rolled
 * back with its transaction leaves nothing; a blob or shape column that
 * disagrees with the document is a format error; they count in the
 * document's disk bytes and go with it. */
static void store_h2o_scores_round_trip_and_checks(struct test_ctx *t)
{
	const char *path = fixture_db_path("h2o");
	struct store *s = NULL;
	struct fixture f;
	float score[2 * 2 * 50], *got = NULL;
	uint64_t r = 5;
	char err[512], sql[160];
	int n_tok = 0, rc;

	memset(&f, 0, sizeof f);
	T_CHECKF(t, store_open(&s, path, err, sizeof err) == 0, "%s", err);
	rc = fixture_make(s, &f, 31, "scores", 2, 1, 2, 8, 50, 9, err, sizeof err);
	T_CHECKF(t, rc == 0, "%s", err);
	int64_t id = f.doc.id, disk0 = store_doc_disk_bytes(s, id);
	fixture_rnd_fill(&r, score, sizeof score);
	rc = store_doc_get_h2o(s, id, &got, &n_tok, err, sizeof err);
	T_CHECKF(t, rc == SEKV_ENOTFOUND && !got && strstr(err, "no H2O scores"), "rc %d: %s", rc, err);
	T_CHECK(t, store_doc_put_h2o(s, id, score, 2, 2, 49, err, sizeof err) == SEKV_EMISMATCH);
	T_CHECK(t, store_doc_put_h2o(s, id, score, 3, 2, 50, err, sizeof err) == SEKV_EMISMATCH);
	T_CHECK(t, store_doc_put_h2o(s, id + 99, score, 2, 2, 50, err, sizeof err) == SEKV_ENOTFOUND);
	T_CHECK(t, store_tx_begin(s, err, sizeof err) == 0 &&
		store_doc_put_h2o(s, id, score, 2, 2, 50, err, sizeof err) == 0);
	store_tx_rollback(s);
	T_CHECK(t, store_doc_get_h2o(s, id, &got, &n_tok, err, sizeof err) == SEKV_ENOTFOUND);
	T_CHECKF(t, store_doc_put_h2o(s, id, score, 2, 2, 50, err, sizeof err) == 0, "%s", err);
	store_close(s);
	T_CHECKF(t, store_open(&s, path, err, sizeof err) == 0, "%s", err);
	rc = store_doc_get_h2o(s, id, &got, &n_tok, err, sizeof err);
	int same = rc == 0 && n_tok == 50 && !memcmp(got, score, sizeof score);
	free(got);
	got = NULL;
	T_CHECKF(t, same, "rc %d: %s", rc, err);
	T_CHECK(t, store_doc_disk_bytes(s, id) == disk0 + (int64_t)sizeof score);
	store_close(s);
	s = NULL;
	snprintf(sql, sizeof sql, "UPDATE h2o_score SET score = substr(score, 5) WHERE doc = %lld", (long long)id);
	T_CHECK(t, fixture_raw_exec(path, sql) == 0);
	T_CHECK(t, store_open(&s, path, err, sizeof err) == 0);
	rc = store_doc_get_h2o(s, id, &got, &n_tok, err, sizeof err);
	T_CHECKF(t, rc == SEKV_EFORMAT && !got && strstr(err, "h2o_score.score"), "rc %d: %s", rc, err);
	T_CHECK(t, store_doc_put_h2o(s, id, score, 2, 2, 50, err, sizeof err) == 0);
	store_close(s);
	s = NULL;
	snprintf(sql, sizeof sql, "UPDATE h2o_score SET n_head_kv = 1 WHERE doc = %lld", (long long)id);
	T_CHECK(t, fixture_raw_exec(path, sql) == 0);
	T_CHECK(t, store_open(&s, path, err, sizeof err) == 0);
	rc = store_doc_get_h2o(s, id, &got, &n_tok, err, sizeof err);
	T_CHECKF(t, rc == SEKV_EFORMAT && !got && strstr(err, "shape"), "rc %d: %s", rc, err);
	T_CHECK(t, store_doc_delete(s, id, err, sizeof err) == 0);
	store_close(s);
	fixture_free(&f);
	T_CHECK(t, fixture_raw_int(path, "SELECT count(*) FROM h2o_score") == 0);
}

const struct test_case test_store_mem[] = {
	{ "store_mem_round_trip_bit_exact", store_mem_round_trip_bit_exact },
	{ "store_mem_round_trip_of_sekv_build", store_mem_round_trip_of_sekv_build },
	{ "store_put_mem_shape_mismatch_rejected", store_put_mem_shape_mismatch_rejected },
	{ "store_h2o_scores_round_trip_and_checks", store_h2o_scores_round_trip_and_checks },
	{ NULL, NULL },
};
