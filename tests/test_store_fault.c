/* test_store_fault.c - crash safety by fault injection: failing steps
 * through store_fault_step, failing writes and process death at the n-th
 * write through a VFS shim. Each fault leaves the previous memory or chunk
 * list exactly as it was, or the complete new one; never a mixture.
 * Helpers in store_fixtures.c.
 */
#include "tests/test.h"
#include "tests/store_fixtures.h"
#include "engine/base/err.h"

#include <sqlite3.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Step faults at every point of put_mem: each failure leaves the old
 * memory (and document row) exactly as it was; the store stays usable. */
static void store_fault_step_mem_keeps_previous(struct test_ctx *t)
{
	const char *path = fixture_db_path("faultmem");
	struct sekv_mem *a = fixture_synth_mem(81, 300, 3, 4, 1, 16, 8, 30);
	struct sekv_mem *b = fixture_synth_mem(82, 300, 3, 4, 1, 16, 8, 30), *g = NULL;
	struct fixture f;
	struct store_doc d;
	struct store *s = NULL;
	char err[512], why[256];
	int rc, n_fail = 0, done = 0, n_read_fail = 0;

	T_CHECK(t, a && b);
	rc = store_open(&s, path, err, sizeof err);
	if (rc == 0)
		rc = fixture_with_mem(s, &f, a, 81, 0.1, err, sizeof err);
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
		if (rc == 0 && fixture_mem_cmp(a, g, why, sizeof why))
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
		if (ok && fixture_mem_cmp(b, g, why, sizeof why))
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
	const char *path = fixture_db_path("faultchunk");
	struct fixture f;
	struct store *s = NULL;
	int32_t tok[32];
	float h[32];
	uint16_t kv[2][32 * 2 * 8];
	const uint16_t *k[2] = { kv[0], kv[1] }, *v[2] = { kv[1], kv[0] };
	char err[512];
	int rc, n_fail = 0, done = 0;
	uint64_t r = 99;

	fixture_rnd_fill(&r, tok, sizeof tok);
	fixture_rnd_fill(&r, h, sizeof h);
	fixture_rnd_fill(&r, kv, sizeof kv);
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
		if (!fixture_mem_cmp(a, g, why, sizeof why))
			*which = 1;
		else if (b && !fixture_mem_cmp(b, g, why, sizeof why))
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
	const char *path = fixture_db_path("faultio");
	struct sekv_mem *a = fixture_synth_mem(101, 2000, 3, 4, 1, 64, 32, 60);
	struct sekv_mem *b = fixture_synth_mem(102, 2000, 3, 4, 1, 64, 32, 60);
	struct fixture f;
	struct store *s = NULL;
	char err[512];
	int rc, n_fail = 0, which = 0, hits = 0;

	T_CHECK(t, a && b);
	rc = store_open(&s, path, err, sizeof err);
	if (rc == 0)
		rc = fixture_with_mem(s, &f, a, 101, 0.1, err, sizeof err);
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
	const char *path = fixture_db_path("crash");
	struct sekv_mem *a = fixture_synth_mem(111, 1500, 3, 4, 1, 64, 32, 60);
	struct sekv_mem *b = fixture_synth_mem(112, 1500, 3, 4, 1, 64, 32, 60);
	struct fixture f;
	struct store *s = NULL;
	char err[512];
	int rc, n_crash = 0, n_old = 0, which = 0, finished = 0;

	T_CHECK(t, a && b);
	rc = store_open(&s, path, err, sizeof err);
	if (rc == 0)
		rc = fixture_with_mem(s, &f, a, 111, 0.1, err, sizeof err);
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

const struct test_case test_store_fault[] = {
	{ "store_fault_step_mem_keeps_previous", store_fault_step_mem_keeps_previous },
	{ "store_fault_step_chunk_keeps_previous", store_fault_step_chunk_keeps_previous },
	{ "store_fault_write_keeps_previous", store_fault_write_keeps_previous },
	{ "store_crash_mid_write_recovers", store_crash_mid_write_recovers },
	{ NULL, NULL },
};
