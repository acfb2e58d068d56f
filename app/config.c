/* config.c - option parsing (see config.h). No allocation: strings point
 * into argv or into fixed buffers. */
#include "app/config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/err.h"
#include "store/store.h"

#define DEFAULT_MODEL_REL "assets/models/gemma-3-270m-q4_k_m.gguf"

void app_default_model(char *buf, size_t cap)
{
	char exe[4096];
	ssize_t n;

	if (access(DEFAULT_MODEL_REL, R_OK) == 0) {
		snprintf(buf, cap, "%s", DEFAULT_MODEL_REL);
		return;
	}
	n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n > 0) {
		exe[n] = 0;
		char *slash = strrchr(exe, '/');
		if (slash) {
			*slash = 0; /* .../bin */
			slash = strrchr(exe, '/');
			if (slash)
				*slash = 0;
			snprintf(buf, cap, "%.3000s/%s", exe, DEFAULT_MODEL_REL);
			if (access(buf, R_OK) == 0)
				return;
		}
	}
	snprintf(buf, cap, "%s", DEFAULT_MODEL_REL);
}

int app_parse_doc_id(const char *s, int64_t *id)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v <= 0)
		return -1;
	*id = v;
	return 0;
}

static int parse_int(const char *s, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

static int parse_double(const char *s, double lo, double hi, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= lo && v <= hi))
		return -1;
	*out = v;
	return 0;
}

static void opts_defaults(struct app_opts *o)
{
	const char *e;
	long n;
	double d;

	memset(o, 0, sizeof *o);
	app_default_model(o->model, sizeof o->model);
	store_default_path(o->db, sizeof o->db);
	o->n_threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (o->n_threads < 1)
		o->n_threads = 1;
	o->budget = 0.10;
	o->r_max = 32;
	o->n_predict = 256;
	o->seed = 42;
	o->repeat_penalty = 1.1f;
	o->n_batch = 256;
	o->n_recent = 64;
	o->alpha = 1.0f;
	if ((e = getenv("SEKV_MODEL")) && *e)
		snprintf(o->model, sizeof o->model, "%s", e);
	if ((e = getenv("SEKV_DB")) && *e)
		snprintf(o->db, sizeof o->db, "%s", e);
	if ((e = getenv("SEKV_THREADS")) && *e && parse_int(e, 1, 1024, &n) == 0)
		o->n_threads = (int)n;
	if ((e = getenv("SEKV_BUDGET")) && *e && parse_double(e, 0.0, 1.0, &d) == 0 && d > 0.0) {
		o->budget = d;
		o->budget_set = 1;
	}
}

/* Options that take a value. */
static int opt_known(const char *a)
{
	static const char *const known[] = {
		"-m", "--model", "--tokenizer", "--db", "-t", "--threads", "--budget",
		"--rmax", "--kv", "-n", "--n-predict", "--temp", "--seed", "-p",
		"--prompt", "--title", "--batch", "--recent", "--alpha", "--repeat-penalty",
		"--act",
	};
	for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
		if (!strcmp(a, known[i]))
			return 1;
	return 0;
}

int app_opts_parse(struct app_opts *o, int argc, char **argv, char *err, size_t errlen)
{
	int only_args = 0;
	long n;
	double d;

	opts_defaults(o);
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		const char *val = i + 1 < argc ? argv[i + 1] : NULL;
		int takes = 1;

		/* "-3" is a (bad) document id, not an option */
		if (only_args || a[0] != '-' || !a[1] || (a[1] >= '0' && a[1] <= '9')) {
			if (o->n_args >= APP_MAX_ARGS)
				return sekv_errf(err, errlen, SEKV_EINVAL, "too many arguments");
			o->args[o->n_args++] = a;
			continue;
		}
		if (!strcmp(a, "--")) {
			only_args = 1;
			continue;
		}
		/* flags without a value */
		if (!strcmp(a, "--json")) { o->json = 1; continue; }
		if (!strcmp(a, "--bos")) { o->bos = 1; continue; }
		if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) { o->quiet = 1; continue; }
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) { o->help = 1; continue; }
		if (!opt_known(a))
			return sekv_errf(err, errlen, SEKV_EINVAL, "unknown option %s (see 'sekv help')", a);
		if (!val)
			return sekv_errf(err, errlen, SEKV_EINVAL, "option %s needs a value", a);
		if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
			if (!*val)
				return sekv_errf(err, errlen, SEKV_EINVAL, "-m: empty path");
			snprintf(o->model, sizeof o->model, "%s", val);
		} else if (!strcmp(a, "--tokenizer")) {
			o->tokenizer = val;
		} else if (!strcmp(a, "--db")) {
			if (!*val)
				return sekv_errf(err, errlen, SEKV_EINVAL, "--db: empty path");
			snprintf(o->db, sizeof o->db, "%s", val);
		} else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
			if (parse_int(val, 1, 1024, &n))
				goto bad;
			o->n_threads = (int)n;
		} else if (!strcmp(a, "--budget")) {
			if (parse_double(val, 0.0, 1.0, &d) || d <= 0.0)
				return sekv_errf(err, errlen, SEKV_EINVAL,
						 "--budget %s: expected a fraction of the full KV cache in (0, 1]", val);
			o->budget = d;
			o->budget_set = 1;
		} else if (!strcmp(a, "--rmax")) {
			if (parse_int(val, 1, 4096, &n))
				return sekv_errf(err, errlen, SEKV_EINVAL, "--rmax %s: expected a rank in [1, 4096]", val);
			o->r_max = (int)n;
			o->r_max_set = 1;
		} else if (!strcmp(a, "--kv")) {
			if (!strcmp(val, "full"))
				o->kv_full = 1;
			else if (!strcmp(val, "sekv"))
				o->kv_full = 0;
			else
				return sekv_errf(err, errlen, SEKV_EINVAL, "--kv %s: expected 'sekv' or 'full'", val);
		} else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
			if (parse_int(val, 0, 1 << 20, &n))
				goto bad;
			o->n_predict = (int)n;
		} else if (!strcmp(a, "--temp")) {
			if (parse_double(val, 0.0, 100.0, &d))
				goto bad;
			o->temperature = (float)d;
		} else if (!strcmp(a, "--repeat-penalty")) {
			if (parse_double(val, 1.0, 10.0, &d))
				return sekv_errf(err, errlen, SEKV_EINVAL,
						 "--repeat-penalty %s: expected a factor in [1, 10] (1 = off)", val);
			o->repeat_penalty = (float)d;
		} else if (!strcmp(a, "--seed")) {
			if (parse_int(val, 0, LONG_MAX, &n))
				goto bad;
			o->seed = (uint64_t)n;
		} else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
			o->prompt = val;
		} else if (!strcmp(a, "--title")) {
			o->title = val;
		} else if (!strcmp(a, "--batch")) {
			if (parse_int(val, 1, 4096, &n))
				goto bad;
			o->n_batch = (int)n;
		} else if (!strcmp(a, "--recent")) {
			if (parse_int(val, 0, 1 << 20, &n))
				goto bad;
			o->n_recent = (int)n;
		} else if (!strcmp(a, "--act")) {
			if (!strcmp(val, "q8"))
				o->act_f32 = 0;
			else if (!strcmp(val, "f32"))
				o->act_f32 = 1;
			else
				return sekv_errf(err, errlen, SEKV_EINVAL, "--act %s: expected 'q8' or 'f32'", val);
		} else if (!strcmp(a, "--alpha")) {
			if (parse_double(val, 0.0, 100.0, &d))
				goto bad;
			o->alpha = (float)d;
		} else {
			return sekv_errf(err, errlen, SEKV_EINVAL, "unknown option %s (see 'sekv help')", a);
		}
		i += takes;
		continue;
bad:
		return sekv_errf(err, errlen, SEKV_EINVAL, "option %s: bad value '%s'", a, val);
	}
	return 0;
}
