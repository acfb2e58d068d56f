/* test_store_format.c - files store/ did not write as it expects: every
 * blob length, shape and position corrupted under store/ (through sqlite3
 * directly) is a clean error naming the document; newer schemas, other
 * programs' databases and non-SQLite files are refused; a version 1 file
 * migrates and its memory loads as fp32. Helpers in store_fixtures.c.
 */
#include "tests/test.h"
#include "engine/quant/quant.h"
#include "tests/store_fixtures.h"
#include "engine/base/err.h"

#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
		{ "UPDATE mem SET ranks = CAST(x'fdffffff' || substr(ranks, 5) AS BLOB) WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "rank" },
		{ "UPDATE mem SET key_rope_base = 10000, n_rot = 3 WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "mem.key_rope_base" },
		{ "UPDATE mem SET key_rope_base = -1 WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "mem.key_rope_base" },
		{ "UPDATE mem SET rank_energy = 2 WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "mem.rank_energy" },
		{ "UPDATE mem SET rank_energy_v = -1 WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "mem.rank_energy" },
		/* -1 is a raw factor: valid, but its rows are not in the blobs */
		{ "UPDATE mem SET ranks = CAST(x'ffffffff' || substr(ranks, 5) AS BLOB) WHERE doc = %lld", R_MEM, SEKV_EFORMAT, "mem_layer.fac_" },
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
	const char *path = fixture_db_path("corrupt");
	char err[512], sql[512], docstr[48], name[64];
	int n_case = (int)(sizeof cases / sizeof cases[0]);

	for (int i = 0; i < n_case; i++) {
		struct sekv_mem *m = fixture_synth_mem(50 + i, 300, 2, 2, 1, 16, 8, 30);
		struct fixture f;
		struct store *s = NULL;
		int rc, rc_before;

		T_CHECK(t, m != NULL);
		snprintf(name, sizeof name, "corrupt%d", i);
		path = fixture_db_path(name);
		rc = store_open(&s, path, err, sizeof err);
		if (rc == 0)
			rc = fixture_with_mem(s, &f, m, 50 + i, 0.1, err, sizeof err);
		sekv_mem_free(m);
		if (rc) {
			store_close(s);
			fixture_free(&f);
			T_CHECKF(t, 0, "setup: %s", err);
		}
		rc_before = run_reader(s, f.doc.id, cases[i].reader, err, sizeof err);
		snprintf(sql, sizeof sql, cases[i].sql, (long long)f.doc.id);
		if (fixture_raw_exec(path, sql) != SQLITE_OK || rc_before != 0) {
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
	const char *path = fixture_db_path("newer");
	const char *foreign = fixture_db_path("foreign");
	const char *garbage = fixture_db_path("garbage");
	struct store *s = NULL;
	char err[512];
	FILE *fp;
	int rc;

	T_CHECK(t, store_open(&s, path, err, sizeof err) == 0);
	store_close(s);
	T_CHECK(t, fixture_raw_exec(path, "PRAGMA user_version = 99") == SQLITE_OK);
	rc = store_open(&s, path, err, sizeof err);
	T_CHECKF(t, rc == SEKV_EFORMAT && s == NULL && strstr(err, "newer"), "rc %d: %s", rc, err);
	T_CHECK(t, fixture_raw_int(path, "PRAGMA user_version") == 99);
	/* an SQLite file of some other program */
	T_CHECK(t, fixture_raw_exec(foreign, "CREATE TABLE t (x)") == SQLITE_OK);
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
 * the current version on open and its memory loads bit-exactly as fp32; an fp16
 * memory then replaces it in the migrated file and loads back too. */
static void store_v1_memory_loads_as_fp32(struct test_ctx *t)
{
	const char *path = fixture_db_path("v1mem");
	/* seeds with no landmarks (fixture_synth_mem: seed % 3 == 0) */
	struct sekv_mem *m = fixture_synth_mem(60, 300, 2, 2, 1, 16, 8, 30);
	struct sekv_mem *m16 = fixture_synth_mem(63, 300, 2, 2, 1, 16, 8, 30);
	struct sekv_mem *g = NULL, *g16 = NULL;
	struct fixture f;
	struct store *s = NULL;
	char err[512], why[256] = "";
	int rc, v1_ok, diff = 1, diff16 = 1, full_kv = -1;
	int64_t ver;
	struct store_doc d;

	memset(&f, 0, sizeof f);
	T_CHECK(t, m && m16 && m->factor_f16 == 0 && m16->factor_f16 == 1);
	if (m) {
		/* a v1 file had no rank gate and post-RoPE factors (the defaults) */
		m->rank_energy = 0;
		m->rank_energy_v = 0;
		m->rope_base = 0;
		m->n_rot = 0;
	}
	/* finite summaries: fp32 files held real numbers, not random bits */
	for (size_t i = 0; m && i < (size_t)m->n_layer * m->n_comp * m->n_head_kv * m->d_h; i++) {
		m->k_bar[i] = quant_f32_to_f16((float)(i % 97) / 7.0f - 5.0f);
		m->v_bar[i] = quant_f32_to_f16((float)(i % 89) / 3.0f - 11.0f);
	}
	rc = store_open(&s, path, err, sizeof err);
	if (rc == 0)
		rc = fixture_with_mem(s, &f, m, 60, 0.1, err, sizeof err);
	store_close(s);
	s = NULL;
	v1_ok = rc == 0 &&
		fixture_raw_exec(path, "ALTER TABLE mem DROP COLUMN factor_f16;"
			 " ALTER TABLE mem DROP COLUMN lm_len; ALTER TABLE mem_layer DROP COLUMN lm_k;"
			 " ALTER TABLE mem DROP COLUMN bar_f16; ALTER TABLE mem DROP COLUMN rank_energy;"
			 " ALTER TABLE mem DROP COLUMN rank_energy_v;"
			 " ALTER TABLE mem DROP COLUMN key_rope_base; ALTER TABLE mem DROP COLUMN n_rot;"
			 " ALTER TABLE mem_layer DROP COLUMN lm_s;"
			 " ALTER TABLE documents DROP COLUMN prompt_format; DROP TABLE evidence_heads;"
			 " ALTER TABLE documents DROP COLUMN full_kv;"
			 " DROP TABLE session_part_layer; DROP TABLE session_part; DROP TABLE session_swa;"
			 " DROP TABLE turn_evidence; DROP TABLE h2o_score; DROP TABLE doc_pages; DROP TABLE turns; DROP TABLE sessions;"
			 " DROP TABLE ingest_state;"
			 " PRAGMA user_version = 1") == SQLITE_OK &&
		fixture_raw_bars_to_f32(path) == SQLITE_OK &&
		fixture_raw_int(path, "SELECT count(*) FROM pragma_table_info('mem')"
			" WHERE name = 'factor_f16'") == 0;
	if (rc == 0)
		rc = store_open(&s, path, err, sizeof err);
	ver = fixture_raw_int(path, "PRAGMA user_version");
	if (rc == 0 && (rc = store_doc_get(s, f.doc.id, &d, err, sizeof err)) == 0)
		full_kv = d.full_kv;
	if (rc == 0)
		rc = store_doc_get_mem(s, f.doc.id, &g, err, sizeof err);
	if (rc == 0)
		diff = fixture_mem_cmp(m, g, why, sizeof why);
	if (rc == 0)
		rc = store_doc_put_mem(s, f.doc.id, m16, 0.1, err, sizeof err);
	if (rc == 0)
		rc = store_doc_get_mem(s, f.doc.id, &g16, err, sizeof err);
	if (rc == 0)
		diff16 = fixture_mem_cmp(m16, g16, why, sizeof why);
	store_close(s);
	fixture_free(&f);
	T_CHECK(t, v1_ok);
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECKF(t, ver == 14, "user_version %lld after migration", (long long)ver);
	T_CHECKF(t, full_kv == 1, "documents.full_kv %d after migration: its rows were kept", full_kv);
	T_CHECKF(t, !diff && g->factor_f16 == 0, "v1 memory: %s", why);
	T_CHECKF(t, !diff16 && g16->factor_f16 == 1, "fp16 memory: %s", why);
	sekv_mem_free(m);
	sekv_mem_free(m16);
	sekv_mem_free(g);
	sekv_mem_free(g16);
}

const struct test_case test_store_format[] = {
	{ "store_corrupt_file_is_clean_error", store_corrupt_file_is_clean_error },
	{ "store_newer_schema_refused", store_newer_schema_refused },
	{ "store_v1_memory_loads_as_fp32", store_v1_memory_loads_as_fp32 },
	{ NULL, NULL },
};
