/* test_families.c - the whole pipeline on every family of the
 * architecture table, through the command line: the small random-weight
 * models of tests/data/arch (tools/gen_arch_goldens.py: each family's
 * tensors, its vocabulary type and a chat template) ingest a document,
 * answer from SeKV (every global layer: all of them for Llama, Qwen2 and
 * Phi-3), from the exact KV and from every rival at the same budget, and
 * a session resumes. Random weights answer nonsense, so what is checked
 * is the machinery: exit status, the JSON's byte counts against the
 * family's full KV formula, the budget, and the session's turns.
 */
#include "tests/test.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ~1,500 bytes of prose: with a byte-level vocabulary of a few merges,
 * about as many tokens, several spans and anchors. */
static const char k_doc[] =
	"The harbour office opens at seven. Ferries to the northern islands leave twice a day, "
	"at nine in the morning and at four in the afternoon, except on Sundays when only the "
	"afternoon ferry runs. Tickets are sold at the office and on board; bicycles travel free. "
	"The lighthouse on the point was built in 1871 and automated in 1962. Its keeper, "
	"Agnes Lindqvist, kept a log of every storm for thirty years. The password of the blue "
	"door is cobalt. In winter the harbour freezes for two or three weeks, and the islanders "
	"cross the ice on foot when it is thick enough. The museum beside the church shows maps, "
	"fishing nets and the old lens of the lighthouse. Guided walks start at the museum at "
	"eleven on Saturdays. The bakery sells rye bread until noon. ";

struct fam_case {
	const char *name;   /* tests/data/arch/<name>.gguf */
};

/* Runs cmd; the stdout of a success, malloc'ed (caller frees), else NULL
 * after recording the failure with the output. */
static char *run_ok(struct test_ctx *t, const char *cmd)
{
	int status;
	char *out = test_run_cmd(cmd, &status);

	if (!out || status != 0) {
		T_FAIL(t, "exit %d: %.300s: %.400s", status, cmd, out ? out : "");
		free(out);
		return NULL;
	}
	return out;
}

static double jnum(const cJSON *j, const char *key)
{
	const cJSON *x = cJSON_GetObjectItem(j, key);
	return cJSON_IsNumber(x) ? x->valuedouble : -1;
}

/* `ask --json` of doc (or of session sid when doc is 0) with --kv kv. */
static cJSON *ask(struct test_ctx *t, const char *model, const char *db, long long doc,
		  long long sid, const char *kv)
{
	char cmd[2048];
	char *out;
	cJSON *j;

	if (doc)
		snprintf(cmd, sizeof cmd, "%s ask %lld 'When does the ferry leave?' --db %s -m %s -n 6 "
			 "-q --json --temp 0 --kv %s 2>&1", test_sekv_bin(), doc, db, model, kv);
	else
		snprintf(cmd, sizeof cmd, "%s ask --session %lld 'And on Sundays?' --db %s -m %s -n 6 "
			 "-q --json --temp 0 2>&1", test_sekv_bin(), sid, db, model);
	if (!(out = run_ok(t, cmd)))
		return NULL;
	j = cJSON_Parse(out);
	if (!j)
		T_FAIL(t, "--kv %s: not JSON: %.300s", kv, out);
	free(out);
	return j;
}

static void family_pipeline(struct test_ctx *t, const char *name)
{
	static const char *const kv[] = { "full", "streaming", "snapkv", "h2o", "quest", "summary" };
	char model[256], db[512], docp[512], cmd[2048];
	cJSON *j = NULL;
	char *out;
	long long doc = 0, sid = 0;

	snprintf(model, sizeof model, "tests/data/arch/%s.gguf", name);
	snprintf(db, sizeof db, "%s/family-%s.db", test_tmpdir(), name);
	snprintf(docp, sizeof docp, "%s/family-%s.txt", test_tmpdir(), name);
	T_CHECK(t, test_write_file(docp, k_doc, sizeof k_doc - 1) == 0);
	/* a short text: --exact-below 0 segments it as a long one */
	snprintf(cmd, sizeof cmd, "%s ingest %s --db %s -m %s -q --keep-full-kv --exact-below 0 "
		 "2>&1 | tail -n 1", test_sekv_bin(), docp, db, model);
	if (!(out = run_ok(t, cmd)))
		return;
	doc = atoll(out);
	free(out);
	T_CHECKF(t, doc > 0, "ingest printed no document id");

	/* SeKV: within the budget, every global layer in the full KV */
	if (!(j = ask(t, model, db, doc, 0, "sekv")))
		return;
	double full = jnum(j, "full_kv_bytes"), res = jnum(j, "resident_bytes");
	sid = (long long)jnum(j, "session");
	int ok = full > 0 && res > 0 && res <= 0.5 * full && jnum(j, "host_bytes") > 0 &&
		 cJSON_IsString(cJSON_GetObjectItem(j, "answer"));
	cJSON_Delete(j);
	T_CHECKF(t, ok, "sekv: full_kv_bytes %.0f, resident_bytes %.0f", full, res);
	/* rebuilt from the kept KV at a larger budget: more of it resident */
	snprintf(cmd, sizeof cmd, "%s ingest --rebuild %lld --db %s -m %s -q --budget 0.6 "
		 "--exact-below 0 2>&1", test_sekv_bin(), doc, db, model);
	if (!(out = run_ok(t, cmd)))
		return;
	free(out);
	if (!(j = ask(t, model, db, doc, 0, "sekv")))
		return;
	double res6 = jnum(j, "resident_bytes"), bud = jnum(j, "budget");
	cJSON_Delete(j);
	T_CHECKF(t, bud == 0.6 && res6 > res && res6 <= 0.6 * full,
		 "after --rebuild --budget 0.6: budget %g, resident %.0f (before %.0f) of %.0f", bud,
		 res6, res, full);
	/* the exact methods count the document's full KV; the memory methods
	 * (sekv, summary) also their session's turn, whose length is their
	 * answer's */
	double doc_kv = 0;
	for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) {
		if (!(j = ask(t, model, db, doc, 0, kv[i])))
			return;
		double f = jnum(j, "full_kv_bytes");
		cJSON_Delete(j);
		if (i == 0)
			doc_kv = f;
		int mem = !strcmp(kv[i], "summary");
		T_CHECKF(t, f > 0 && f <= full + (mem ? 0.5 * full : 0) && (mem ? f >= doc_kv : f == doc_kv),
			 "--kv %s: full_kv_bytes %.0f, --kv full's %.0f, sekv's %.0f", kv[i], f, doc_kv,
			 full);
	}
	T_CHECKF(t, doc_kv > 0 && doc_kv <= full, "--kv full: %.0f, sekv's %.0f", doc_kv, full);
	/* the SeKV session resumes with its first turn */
	T_CHECKF(t, sid > 0, "sekv: no session id in --json");
	if (!(j = ask(t, model, db, 0, sid, "sekv")))
		return;
	ok = (long long)jnum(j, "session") == sid && cJSON_IsString(cJSON_GetObjectItem(j, "answer"));
	cJSON_Delete(j);
	T_CHECKF(t, ok, "session %lld did not resume", sid);
	snprintf(cmd, sizeof cmd, "%s check --db %s 2>&1", test_sekv_bin(), db);
	if ((out = run_ok(t, cmd)))
		free(out);
}

#define FAMILY_TEST(fn, name) \
	static void fn(struct test_ctx *t) { family_pipeline(t, name); }
FAMILY_TEST(family_gemma3_ingest_ask_rivals_resume, "gemma3")
FAMILY_TEST(family_llama_spm_ingest_ask_rivals_resume, "llama")
FAMILY_TEST(family_llama_bpe_ingest_ask_rivals_resume, "llama_tied")
FAMILY_TEST(family_llama3_ingest_ask_rivals_resume, "llama3")
FAMILY_TEST(family_qwen2_ingest_ask_rivals_resume, "qwen2")
/* The mistral case slides on every layer (window 8): no global layer
 * keeps long memory, so ingest refuses it and says why. */
static void family_mistral_all_sliding_refused(struct test_ctx *t)
{
	char cmd[2048], docp[512];
	int status;

	snprintf(docp, sizeof docp, "%s/family-mistral.txt", test_tmpdir());
	T_CHECK(t, test_write_file(docp, k_doc, sizeof k_doc - 1) == 0);
	snprintf(cmd, sizeof cmd, "%s ingest %s --db %s/family-mistral.db -m tests/data/arch/mistral.gguf"
		 " -q 2>&1", test_sekv_bin(), docp, test_tmpdir());
	char *out = test_run_cmd(cmd, &status);
	int ok = out && status != 0 && strstr(out, "no global-attention layer");
	T_CHECKF(t, ok, "exit %d: %.300s", status, out ? out : "");
	free(out);
}
FAMILY_TEST(family_phi3_ingest_ask_rivals_resume, "phi3")

const struct test_case test_families[] = {
	{ "family_gemma3_ingest_ask_rivals_resume", family_gemma3_ingest_ask_rivals_resume },
	{ "family_llama_spm_ingest_ask_rivals_resume", family_llama_spm_ingest_ask_rivals_resume },
	{ "family_llama_bpe_ingest_ask_rivals_resume", family_llama_bpe_ingest_ask_rivals_resume },
	{ "family_llama3_ingest_ask_rivals_resume", family_llama3_ingest_ask_rivals_resume },
	{ "family_qwen2_ingest_ask_rivals_resume", family_qwen2_ingest_ask_rivals_resume },
	{ "family_mistral_all_sliding_refused", family_mistral_all_sliding_refused },
	{ "family_phi3_ingest_ask_rivals_resume", family_phi3_ingest_ask_rivals_resume },
	{ NULL, NULL },
};
