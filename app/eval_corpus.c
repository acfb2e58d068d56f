/* eval_corpus.c - the background text of `sekv eval` (eval.h): plain
 * ASCII files of this machine, and the committed list that pins them
 * (assets/eval_corpus.sha256: each file's SHA-256), so figures compare
 * across days and machines.
 *
 * Invariant: a pinned corpus holds exactly the listed files whose bytes
 * still have the listed digest, in the list's order; every other listed
 * file is recorded as missing, changed or skipped, never silently left
 * out. Haystacks cut from the text live in eval_hay.c.
 */
#include "app/eval.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/base/err.h"
#include "engine/base/hash.h"
#include "engine/base/sha256.h"

#define CORPUS_MIN_FILE 64           /* bytes: shorter files add nothing */
#define CORPUS_MAX_FILE (4u << 20)   /* bytes: larger files are skipped */

/* ---- files ------------------------------------------------------------ */

/* Hashes of the files taken, so the same licence copied into many
 * packages' copyright files counts once. */
struct seen {
	uint64_t *h;
	int n, cap;
};

static int seen_add(struct seen *s, uint64_t h)
{
	for (int i = 0; i < s->n; i++)
		if (s->h[i] == h)
			return 1;
	if (s->n == s->cap) {
		int nc = s->cap ? 2 * s->cap : 256;
		uint64_t *p = realloc(s->h, (size_t)nc * sizeof *p);
		if (!p)
			return SEKV_ENOMEM;
		s->h = p;
		s->cap = nc;
	}
	s->h[s->n++] = h;
	return 0;
}

int eval_file_read(const char *path, char **buf, size_t *n, char *err, size_t errlen)
{
	struct stat st;
	FILE *f;

	*buf = NULL;
	if (lstat(path, &st) || !S_ISREG(st.st_mode) || st.st_size < CORPUS_MIN_FILE ||
	    (size_t)st.st_size > CORPUS_MAX_FILE)
		return 1;
	if (!(f = fopen(path, "rb")))
		return sekv_errf(err, errlen, SEKV_EIO, "corpus: %s: %s", path, strerror(errno));
	*buf = malloc((size_t)st.st_size + 1);
	*n = *buf ? fread(*buf, 1, (size_t)st.st_size, f) : 0;
	if (*buf)
		(*buf)[*n] = 0;
	fclose(f);
	if (!*buf)
		return sekv_errf(err, errlen, SEKV_ENOMEM, "corpus: %s: out of memory", path);
	return 0;
}

/* Records path in c->file with its digest and state. */
static int note_file(struct eval_corpus *c, const char *path, const char *sha, int state)
{
	struct eval_corpus_file *p = realloc(c->file, ((size_t)c->n_listed + 1) * sizeof *p);
	if (!p)
		return SEKV_ENOMEM;
	c->file = p;
	p += c->n_listed++;
	snprintf(p->path, sizeof p->path, "%s", path);
	snprintf(p->sha256, sizeof p->sha256, "%s", sha ? sha : "");
	p->state = state;
	return 0;
}

/* Appends buf [n] (malloc'ed, taken) when it is plain ASCII and, with
 * seen, not taken before: 0, 1 (skipped) or a negative code. */
static int add_text(struct eval_corpus *c, struct seen *seen, char *buf, size_t n, char *err, size_t errlen)
{
	size_t o = 0;
	int rc = 0;

	for (size_t i = 0; i < n; i++) {
		unsigned char b = (unsigned char)buf[i];
		if (b == '\r')
			continue;
		if (!(b >= 0x20 && b < 0x7f) && b != '\t' && b != '\n' && b != '\f') {
			free(buf);
			return 1;
		}
		buf[o++] = b == '\f' ? '\n' : (char)b;
	}
	/* from the first visible byte to the last: files join by one blank line */
	size_t a = 0;
	while (a < o && strchr(" \t\n", buf[a]))
		a++;
	while (o > a && strchr(" \t\n", buf[o - 1]))
		o--;
	if (o - a < CORPUS_MIN_FILE || (seen && (rc = seen_add(seen, hash_fnv1a64(HASH_FNV1A64_INIT, buf + a, o - a))))) {
		free(buf);
		return rc < 0 ? sekv_errf(err, errlen, rc, "corpus: out of memory") : 1;
	}
	char *t = realloc(c->text, c->len + 2 + (o - a) + 1);
	if (!t) {
		free(buf);
		return sekv_errf(err, errlen, SEKV_ENOMEM, "corpus: out of memory");
	}
	c->text = t;
	if (c->len) {
		memcpy(t + c->len, "\n\n", 2);
		c->len += 2;
	}
	memcpy(t + c->len, buf + a, o - a);
	c->len += o - a;
	t[c->len] = 0;
	c->n_files++;
	free(buf);
	return 0;
}

static int corpus_add(struct eval_corpus *c, struct seen *seen, const char *path,
		      char *err, size_t errlen)
{
	char *buf, sha[65];
	size_t n;
	int rc = eval_file_read(path, &buf, &n, err, errlen);

	if (rc)
		return rc;
	sha256_hex(buf, n, sha);
	if ((rc = add_text(c, seen, buf, n, err, errlen)) == 0 && note_file(c, path, sha, EVAL_PIN_USED))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "corpus: out of memory");
	return rc;
}

int eval_corpus_add_file(struct eval_corpus *c, const char *path, char *err, size_t errlen)
{
	return corpus_add(c, NULL, path, err, errlen);
}

void eval_corpus_free(struct eval_corpus *c)
{
	if (!c)
		return;
	free(c->text);
	free(c->file);
	memset(c, 0, sizeof *c);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Names in dir (no "." entries) sorted bytewise: *names malloc'ed. */
static int list_dir(const char *dir, char ***names, int *n)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int cap = 0;

	*names = NULL;
	*n = 0;
	if (!d)
		return 0; /* a machine without the directory has no text there */
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		if (*n == cap) {
			cap = cap ? 2 * cap : 64;
			char **p = realloc(*names, (size_t)cap * sizeof *p);
			if (!p)
				break;
			*names = p;
		}
		if (!((*names)[*n] = strdup(e->d_name)))
			break;
		(*n)++;
	}
	closedir(d);
	if (*n)
		qsort(*names, (size_t)*n, sizeof **names, cmp_str);
	return 0;
}

static void free_names(char **names, int n)
{
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

/* Adds dir/name for each listed name passing want (NULL: all). */
static int add_listed(struct eval_corpus *c, struct seen *seen, const char *dir, char **names,
		      int n, int (*want)(const char *), size_t max_bytes, char *err, size_t errlen)
{
	char path[4096];

	for (int i = 0; i < n && c->len < max_bytes; i++) {
		if (want && !want(names[i]))
			continue;
		snprintf(path, sizeof path, "%.2047s/%.255s", dir, names[i]);
		int rc = corpus_add(c, seen, path, err, errlen);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int is_readme(const char *name)
{
	size_t n = strlen(name);
	return !strncmp(name, "README", 6) && !(n > 3 && !strcmp(name + n - 3, ".gz"));
}

static int is_copyright(const char *name)
{
	return !strcmp(name, "copyright");
}

int eval_corpus_load_system(struct eval_corpus *c, size_t min_bytes, size_t max_bytes,
			    char *err, size_t errlen)
{
	static const char lic[] = "/usr/share/common-licenses", doc[] = "/usr/share/doc";
	struct seen seen = { 0 };
	char **names = NULL, **pkg = NULL, path[4096];
	int n = 0, n_pkg = 0, rc;

	memset(c, 0, sizeof *c);
	list_dir(lic, &names, &n);
	rc = add_listed(c, &seen, lic, names, n, NULL, max_bytes, err, errlen);
	free_names(names, n);
	list_dir(doc, &pkg, &n_pkg);
	/* pass 0: copyright files, pass 1: READMEs */
	for (int pass = 0; !rc && pass < 2; pass++) {
		for (int i = 0; !rc && i < n_pkg && c->len < max_bytes; i++) {
			struct stat st;
			snprintf(path, sizeof path, "%s/%.255s", doc, pkg[i]);
			if (lstat(path, &st) || !S_ISDIR(st.st_mode))
				continue;
			list_dir(path, &names, &n);
			rc = add_listed(c, &seen, path, names, n, pass ? is_readme : is_copyright, max_bytes,
					err, errlen);
			free_names(names, n);
		}
	}
	free_names(pkg, n_pkg);
	free(seen.h);
	if (!rc && c->len < min_bytes)
		rc = sekv_errf(err, errlen, SEKV_ENOTFOUND,
			       "corpus: %zu bytes of plain ASCII text in %s and %s, %zu needed", c->len, lic,
			       doc, min_bytes);
	if (rc)
		eval_corpus_free(c);
	return rc;
}

/* ---- the pinned list --------------------------------------------------- */

/* One line of a list: "HEX  PATH" (sha256sum's text mode; '*' before
 * PATH for its binary mode). 0, 1 for a comment or blank line, -1 else. */
static int parse_line(char *line, char *sha, char **path)
{
	size_t n = strlen(line);

	while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		line[--n] = 0;
	if (!n || line[0] == '#')
		return 1;
	if (n < 67 || strspn(line, "0123456789abcdef") != 64 || line[64] != ' ' ||
	    (line[65] != ' ' && line[65] != '*') || !line[66])
		return -1;
	memcpy(sha, line, 64);
	sha[64] = 0;
	*path = line + 66;
	return 0;
}

int eval_corpus_load_pinned(struct eval_corpus *c, const char *list_path, size_t min_bytes,
			    char *err, size_t errlen)
{
	FILE *f = fopen(list_path, "rb");
	char line[4096], sha[65], got[65], *path;
	int rc = 0, no = 0;

	memset(c, 0, sizeof *c);
	if (!f)
		return sekv_errf(err, errlen, SEKV_EIO, "corpus list: %s: %s", list_path, strerror(errno));
	while (!rc && fgets(line, sizeof line, f)) {
		char *buf;
		size_t n;
		struct stat st;
		int k = parse_line(line, sha, &path);
		no++;
		if (k > 0)
			continue;
		if (k < 0) {
			rc = sekv_errf(err, errlen, SEKV_EFORMAT, "corpus list: %s: line %d: not \"SHA256  PATH\"",
				       list_path, no);
			break;
		}
		if (lstat(path, &st)) {
			rc = note_file(c, path, sha, EVAL_PIN_MISSING);
			continue;
		}
		if ((k = eval_file_read(path, &buf, &n, err, errlen)) < 0) {
			rc = k;
			break;
		}
		if (k > 0) {
			rc = note_file(c, path, sha, EVAL_PIN_SKIPPED);
			continue;
		}
		sha256_hex(buf, n, got);
		if (strcmp(got, sha)) {
			free(buf);
			rc = note_file(c, path, sha, EVAL_PIN_CHANGED);
			continue;
		}
		k = add_text(c, NULL, buf, n, err, errlen);
		rc = k < 0 ? k : note_file(c, path, sha, k ? EVAL_PIN_SKIPPED : EVAL_PIN_USED);
	}
	fclose(f);
	if (rc == SEKV_ENOMEM)
		sekv_errf(err, errlen, rc, "corpus: out of memory");
	if (!rc && c->len < min_bytes)
		rc = sekv_errf(err, errlen, SEKV_ENOTFOUND, "corpus: %zu bytes in the files of %s that are here "
			       "unchanged, %zu needed", c->len, list_path, min_bytes);
	if (rc)
		eval_corpus_free(c);
	return rc;
}

int eval_corpus_pin_state(const struct eval_corpus *c, const char *path)
{
	for (int i = 0; i < c->n_listed; i++)
		if (!strcmp(c->file[i].path, path))
			return c->file[i].state;
	return EVAL_PIN_UNLISTED;
}

int eval_corpus_count(const struct eval_corpus *c, int state)
{
	int n = 0;
	for (int i = 0; i < c->n_listed; i++)
		n += c->file[i].state == state;
	return n;
}

int eval_corpus_write_list(const struct eval_corpus *c, const char *path, const char *comment,
			   char *err, size_t errlen)
{
	FILE *f = fopen(path, "wb");
	int ok;

	if (!f)
		return sekv_errf(err, errlen, SEKV_EIO, "corpus list: %s: %s", path, strerror(errno));
	ok = !comment || fprintf(f, "# %s\n", comment) >= 0;
	for (int i = 0; ok && i < c->n_listed; i++)
		if (c->file[i].state == EVAL_PIN_USED)
			ok = fprintf(f, "%s  %s\n", c->file[i].sha256, c->file[i].path) >= 0;
	if ((fclose(f) != 0) | !ok)
		return sekv_errf(err, errlen, SEKV_EIO, "corpus list: %s: write failed", path);
	return 0;
}
