/* test_session.c - a long conversation kept in the SeKV memory with the
 * real model (app/session.c): thirty turns whose tokens are far more than
 * the budget could hold as tail rows go into the memory turn by turn and
 * into the library; a new process resumes the session (no forward pass
 * over the earlier tokens) and still answers from the first turn. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "app/app.h"
#include "app/session.h"
#include "engine/conv/conv.h"
#include "engine/base/err.h"
#include "engine/model/model.h"
#include "engine/tok/tokenizer.h"
#include "store/store.h"
#include "tests/test.h"

#define SES_DOC "The Harbor Street bakery opened in 1998. Its owner, Mira Olsen, bakes rye " \
	"bread at four every morning and sells it until noon. On Sundays the bakery is closed.\n"
#define SES_TURNS 30
#define SES_FACT "Note for later: my locker code is 4817."
#define SES_ASK "What is my locker code?"
#define SES_WANT "4817"

static const char *const filler[] = {
	"When did the bakery open?", "Who is the owner?", "What bread is baked?",
	"When is the bread baked?", "Until when is bread sold?", "On which day is it closed?",
	"What street is the bakery on?",
};

struct ses_fix {
	struct app_opts o;
	struct model *m;
	struct tok *tk;
	struct session *s;
};

static void ses_close(struct ses_fix *f)
{
	session_close(f->s);
	tok_close(f->tk);
	model_close(f->m);
	f->s = NULL;
	f->tk = NULL;
	f->m = NULL;
}

/* Options for the library db: greedy, short answers, no evidence,
 * budget 30%. */
static void ses_opts(struct ses_fix *f, const char *db)
{
	char err[256];

	memset(f, 0, sizeof *f);
	app_opts_parse(&f->o, 0, NULL, err, sizeof err);
	snprintf(f->o.model, sizeof f->o.model, "%s", test_model_path());
	snprintf(f->o.db, sizeof f->o.db, "%s", db);
	f->o.quiet = 1;
	f->o.no_evidence = 1;
	f->o.n_predict = 8;
	f->o.temperature = 0;
	/* above the memory's fixed part, which grows with the turns (the
	 * budget is not refitted as the memory grows: about 14% here) */
	f->o.budget = 0.3;
	f->o.budget_set = 1;
}

/* One turn asked and recorded; 0 or a negative code (err filled). */
static int ses_turn(struct ses_fix *f, const char *q, char *ans, size_t cap, char *err,
		    size_t errlen)
{
	struct conv_answer a = { 0 };
	int rc = conv_ask(session_conv(f->s), q, NULL, NULL, &a, err, errlen);

	if (!rc)
		rc = session_record_turn(f->s, q, &a, NULL, err, errlen);
	if (ans)
		snprintf(ans, cap, "%s", a.text ? a.text : "");
	conv_answer_free(&a);
	return rc;
}

/* The child: resumes the session in a fresh process and asks about turn
 * 1; writes "resume_s answer" to out; exits 0 when it could ask. */
static int ses_child(const char *db, int64_t id, const char *out)
{
	struct ses_fix f;
	struct session_info in;
	char err[1024], ans[256] = "";
	FILE *fp;
	int rc;

	ses_opts(&f, db);
	if ((rc = app_load(&f.o, &f.m, &f.tk, err, sizeof err)) ||
	    (rc = session_open_stored(&f.s, f.m, f.tk, &f.o, 0, id, err, sizeof err)) ||
	    (rc = ses_turn(&f, SES_ASK, ans, sizeof ans, err, sizeof err)))
		snprintf(ans, sizeof ans, "error: %.200s", err);
	session_get_info(f.s, &in);
	if ((fp = fopen(out, "w"))) {
		fprintf(fp, "%.6f %lld %d %s\n", f.s ? in.resume_s : -1.0, (long long)model_n_eval(f.m),
			in.n_tok_memory, ans);
		fclose(fp);
	}
	ses_close(&f);
	return rc ? 1 : 0;
}

static void session_30_turns_resume_remembers_turn_1(struct test_ctx *t)
{
	struct ses_fix f;
	struct session_info in;
	struct store_session ss;
	char db[512], path[512], out[512], err[1024], line[512] = "";
	int64_t doc = 0, id = 0;
	long long n_eval = -1;
	double resume_s = -1;
	int n_mem = 0, status = 0;

	if (access(test_model_path(), R_OK) != 0)
		T_SKIP(t, "model %s missing (make model)", test_model_path());
	snprintf(db, sizeof db, "%s/session30.db", test_tmpdir());
	snprintf(path, sizeof path, "%s/session30.txt", test_tmpdir());
	snprintf(out, sizeof out, "%s/session30.out", test_tmpdir());
	FILE *fp = fopen(path, "w");
	T_CHECK(t, fp && fputs(SES_DOC, fp) >= 0 && fclose(fp) == 0);
	ses_opts(&f, db);
	T_CHECKF(t, app_ingest(&f.o, path, NULL, NULL, &doc, err, sizeof err) == 0, "ingest: %s", err);
	T_CHECKF(t, app_load(&f.o, &f.m, &f.tk, err, sizeof err) == 0 &&
		     session_open(&f.s, f.m, f.tk, &f.o, doc, err, sizeof err) == 0, "%s", err);
	for (int i = 0; i < SES_TURNS - 1; i++) {
		const char *q = i == 0 ? SES_FACT : filler[i % (sizeof filler / sizeof *filler)];
		if (ses_turn(&f, q, NULL, 0, err, sizeof err)) {
			ses_close(&f);
			T_FAIL(t, "turn %d: %s", i + 1, err);
			return;
		}
	}
	id = session_stored_id(f.s);
	session_get_info(f.s, &in);
	ses_close(&f);
	/* the turns are far more than the budget's rows: a tail would have
	 * evicted turn 1 long ago */
	size_t turn_bytes = (in.full_kv_bytes / (size_t)in.n_tok_memory) *
			    (size_t)(in.n_tok_memory - in.n_tok);
	T_CHECKF(t, turn_bytes > 2 * (size_t)(in.budget * (double)in.full_kv_bytes),
		 "turns of %zu bytes fit the budget of %.0f", turn_bytes,
		 in.budget * (double)in.full_kv_bytes);
	pid_t pid = fork();
	T_CHECK(t, pid >= 0);
	if (pid == 0)
		_exit(ses_child(db, id, out));
	T_CHECK(t, waitpid(pid, &status, 0) == pid);
	fp = fopen(out, "r");
	T_CHECK(t, fp != NULL);
	if (fscanf(fp, "%lf %lld %d ", &resume_s, &n_eval, &n_mem) != 3 || !fgets(line, sizeof line, fp))
		line[0] = 0;
	fclose(fp);
	T_CHECKF(t, WIFEXITED(status) && WEXITSTATUS(status) == 0, "resumed turn: %s", line);
	/* the resumed process ran the forward pass over the new question and
	 * answer only (at most 8 answer tokens + the question's) */
	T_CHECKF(t, n_eval > 0 && n_eval < 64, "%lld tokens through the forward pass after resume",
		 n_eval);
	T_CHECKF(t, strstr(line, SES_WANT) != NULL, "turn %d asked about turn 1 (memory of %d tokens, "
		 "resume %.3f s): answer '%s'", SES_TURNS, n_mem, resume_s, line);
	struct store *st = NULL;
	T_CHECKF(t, store_open(&st, db, err, sizeof err) == 0 &&
		     store_session_get(st, id, &ss, err, sizeof err) == 0, "%s", err);
	store_close(st);
	T_CHECKF(t, ss.n_turn == SES_TURNS && ss.kv_turns == SES_TURNS && ss.n_tok > 0,
		 "%d turns, %d with KV, %lld tokens", ss.n_turn, ss.kv_turns, (long long)ss.n_tok);
	fprintf(stderr, "session: %d turns, %lld tokens after the document's %d, resume %.3f s\n",
		ss.n_turn, (long long)ss.n_tok, in.n_tok, resume_s);
}

const struct test_case test_session[] = {
	{ "session_30_turns_resume_remembers_turn_1", session_30_turns_resume_remembers_turn_1 },
	{ NULL, NULL },
};
