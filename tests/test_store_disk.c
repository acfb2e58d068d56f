/* test_store_disk.c - what the library keeps beside its file (store_disk.c)
 * without the model: the reserve, made 0600 at open, lets a delete and the
 * open before it run on a disk another writer filled to the last byte (a
 * small tmpfs; skipped where mounting is not allowed), its vacuum giving
 * back more than the reserve holds; the per-document ingest lock refuses a
 * second connection's lock and delete, is seen by store_doc_busy, goes with
 * its file on release and with its process on SIGKILL.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/base/err.h"
#include "store/store.h"
#include "tests/store_fixtures.h"
#include "tests/test.h"

static long long free_bytes(const char *dir)
{
	struct statvfs v;
	return statvfs(dir, &v) == 0 ? (long long)v.f_bavail * (long long)v.f_frsize : -1;
}

static long long size_of(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* Another program filling the file system of path's directory: appends
 * to path until no byte more fits. The free bytes left (0 on success). */
static long long fill_disk(const char *path, const char *dir)
{
	static char block[1 << 16];
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);

	if (fd < 0)
		return -1;
	for (size_t n = sizeof block; n >= 512; n /= 2)
		while (write(fd, block, n) == (ssize_t)n)
			;
	close(fd);
	return free_bytes(dir);
}

/* Two 40 MiB documents in a 160 MiB tmpfs, then another writer takes every
 * free byte: deleting the first through the connection open before (its
 * commit meets the full disk) and, after another fill, opening the library
 * again (SQLite must create its -wal and -shm) and deleting the second both
 * work. The first delete's vacuum moves the second document's 40 MiB down
 * through the WAL, more than the 32 MiB reserve, in steps; the file shrinks
 * by what was deleted, the reserve is back after each, and what stays is
 * intact. */
static void store_rm_on_disk_filled_by_another_program(struct test_ctx *t)
{
	char dir[512], path[600], fill[600], reserve[640], err[512] = "", why[256] = "";
	struct fixture a = {0}, b = {0};
	struct store *s = NULL;
	struct store_doc *docs = NULL;
	int n_doc = -1;

	snprintf(dir, sizeof dir, "%s/filled", test_tmpdir());
	snprintf(path, sizeof path, "%s/lib.db", dir);
	snprintf(fill, sizeof fill, "%s/other-program", dir);
	snprintf(reserve, sizeof reserve, "%s-reserve", path);
	if (mkdir(dir, 0700) != 0 && errno != EEXIST)
		T_SKIP(t, "mkdir %s: %s", dir, strerror(errno));
	if (mount("sekv-test", dir, "tmpfs", 0, "size=160m") != 0)
		T_SKIP(t, "cannot mount a small tmpfs here (%s)", strerror(errno));
	int rc = store_open(&s, path, err, sizeof err);
	if (rc == 0)
		rc = fixture_make(s, &a, 91, "first", 2, 1, 2, 64, 40000, 1024, err, sizeof err);
	if (rc == 0)
		rc = fixture_make(s, &b, 92, "second", 2, 1, 2, 64, 40000, 1024, err, sizeof err);
	long long res0 = size_of(reserve), db0 = size_of(path);
	long long left1 = rc ? -1 : fill_disk(fill, dir);
	int r_del1 = rc ? rc : store_doc_delete(s, a.doc.id, err, sizeof err);
	long long res1 = size_of(reserve), db1 = size_of(path);
	int r_b = r_del1 ? 1 : fixture_check(s, &b, why, sizeof why);
	store_close(s);
	s = NULL;
	long long left2 = r_del1 ? -1 : fill_disk(fill, dir);
	int r_open = r_del1 ? r_del1 : store_open(&s, path, err, sizeof err);
	int r_list = r_open ? r_open : store_doc_list(s, &docs, &n_doc, err, sizeof err);
	int r_del2 = r_list ? r_list : store_doc_delete(s, b.doc.id, err, sizeof err);
	store_close(s);
	long long res2 = size_of(reserve), db2 = size_of(path);
	umount(dir);
	free(docs);
	fixture_free(&a);
	fixture_free(&b);
	T_CHECKF(t, rc == 0, "%s", err);
	T_CHECKF(t, res0 == 32LL << 20, "reserve of %lld bytes at open", res0);
	T_CHECKF(t, left1 == 0 && left2 == 0, "the other writer left %lld, then %lld bytes", left1, left2);
	T_CHECKF(t, r_del1 == 0, "delete on the full disk: %s", err);
	T_CHECKF(t, db0 - db1 > 38LL << 20 && res1 == 32LL << 20, "the delete shrank the file by "
		 "%lld bytes (of %lld), reserve %lld", db0 - db1, db0, res1);
	T_CHECKF(t, r_b == 0, "second document after the delete: %s", why);
	T_CHECKF(t, r_open == 0 && r_list == 0 && n_doc == 1, "open and list on the full disk "
		 "(%d, %d, %d documents): %s", r_open, r_list, n_doc, err);
	T_CHECKF(t, r_del2 == 0 && db1 - db2 > 38LL << 20 && res2 == 32LL << 20, "second delete "
		 "(%d): file %lld -> %lld, reserve %lld: %s", r_del2, db1, db2, res2, err);
}

/* The reserve is the library's: 0600 whatever the umask, 32 MiB
 * allocated, made again at close when it was removed. */
static void store_reserve_beside_library_0600(struct test_ctx *t)
{
	char reserve[640], err[512];
	const char *path = fixture_db_path("reserve_mode");
	struct store *s = NULL;
	struct stat st;

	snprintf(reserve, sizeof reserve, "%s-reserve", path);
	unlink(reserve);
	mode_t old = umask(0);
	int rc = store_open(&s, path, err, sizeof err);
	umask(old);
	T_CHECKF(t, rc == 0, "%s", err);
	int made = stat(reserve, &st) == 0 && (st.st_mode & 07777) == 0600 &&
		   st.st_size == 32LL << 20 && (long long)st.st_blocks * 512 >= 32LL << 20;
	unlink(reserve);
	store_close(s);
	T_CHECKF(t, made, "reserve at open: mode %o, %lld bytes, %lld allocated", st.st_mode & 07777,
		 (long long)st.st_size, (long long)st.st_blocks * 512);
	T_CHECKF(t, size_of(reserve) == 32LL << 20, "reserve not made again at close");
}

/* One connection's ingest lock refuses another's lock and delete (as
 * another process is refused: open-file-description locks), which sees
 * it busy; released, its file is gone and the other may lock and delete. */
static void store_doc_lock_refuses_other_connection(struct test_ctx *t)
{
	char lock[640], err[512] = "", err2[512] = "";
	const char *path = fixture_db_path("doc_lock");
	struct store *s1 = NULL, *s2 = NULL;
	struct fixture f = {0};
	struct store_doc d;

	snprintf(lock, sizeof lock, "%s-ingest-1", path);
	int rc = store_open(&s1, path, err, sizeof err);
	if (rc == 0)
		rc = store_open(&s2, path, err, sizeof err);
	if (rc == 0)
		rc = fixture_make(s1, &f, 7, "locked", 1, 1, 1, 8, 40, 16, err, sizeof err);
	if (rc == 0)
		rc = store_doc_lock(s1, f.doc.id, err, sizeof err);
	int held = access(lock, F_OK) == 0 && f.doc.id == 1;
	int r_lock2 = rc ? rc : store_doc_lock(s2, 1, err2, sizeof err2);
	int busy2 = store_doc_busy(s2, 1), busy1 = store_doc_busy(s1, 1);
	int r_del2 = rc ? rc : store_doc_delete(s2, 1, err, sizeof err);
	int kept = store_doc_get(s2, 1, &d, NULL, 0) == 0;
	int r_again = rc ? rc : store_doc_lock(s1, 1, NULL, 0);
	store_doc_unlock(s1);
	int gone = access(lock, F_OK) != 0 && !store_doc_busy(s2, 1);
	int r_lock3 = rc ? rc : store_doc_lock(s2, 1, NULL, 0);
	int r_del3 = rc ? rc : store_doc_delete(s2, 1, NULL, 0);
	int gone3 = access(lock, F_OK) != 0;
	store_close(s1);
	store_close(s2);
	fixture_free(&f);
	T_CHECKF(t, rc == 0 && held, "lock: %s", err);
	T_CHECKF(t, r_lock2 == SEKV_EBUSY && strstr(err2, "document 1 is being ingested by another "
		 "process"), "second lock: %d %s", r_lock2, err2);
	T_CHECKF(t, busy2 == 1 && busy1 == 0, "busy: other %d, own %d", busy2, busy1);
	T_CHECKF(t, r_del2 == SEKV_EBUSY && kept, "delete while locked: %d (kept %d)", r_del2, kept);
	T_CHECKF(t, r_again == 0, "locking again what it holds: %d", r_again);
	T_CHECKF(t, gone, "after unlock: lock file there or still busy");
	T_CHECKF(t, r_lock3 == 0 && r_del3 == 0 && gone3, "lock %d, delete %d, file left %d", r_lock3,
		 r_del3, !gone3);
}

/* A process holding the lock killed with SIGKILL leaves its file but
 * not the lock: the document is no longer busy and the next lock works. */
static void store_doc_lock_dies_with_its_process(struct test_ctx *t)
{
	char lock[640], err[512] = "", c = 0;
	const char *path = fixture_db_path("doc_lock_kill");
	struct store *s = NULL;
	int p[2], status = 0;

	snprintf(lock, sizeof lock, "%s-ingest-5", path);
	T_CHECK(t, pipe(p) == 0);
	pid_t pid = fork();
	if (pid == 0) {
		struct store *cs = NULL;
		close(p[0]);
		if (store_open(&cs, path, NULL, 0) == 0 && store_doc_lock(cs, 5, NULL, 0) == 0 &&
		    write(p[1], "1", 1) == 1)
			pause();
		_exit(1);
	}
	close(p[1]);
	int locked = pid > 0 && read(p[0], &c, 1) == 1;
	close(p[0]);
	int rc = store_open(&s, path, err, sizeof err);
	int busy = rc == 0 && store_doc_busy(s, 5);
	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	int left = access(lock, F_OK) == 0, busy_after = rc == 0 && store_doc_busy(s, 5);
	int r_lock = rc ? rc : store_doc_lock(s, 5, err, sizeof err);
	store_close(s);
	int gone = access(lock, F_OK) != 0;
	T_CHECKF(t, locked && rc == 0, "child lock %d, open: %s", locked, err);
	T_CHECKF(t, busy && !busy_after, "busy while held %d, after the kill %d", busy, busy_after);
	T_CHECKF(t, left, "the killed holder's file is gone (expected left)");
	T_CHECKF(t, r_lock == 0 && gone, "lock after the kill: %d %s (file removed at close: %d)",
		 r_lock, err, gone);
}

const struct test_case test_store_disk[] = {
	{ "store_rm_on_disk_filled_by_another_program", store_rm_on_disk_filled_by_another_program },
	{ "store_reserve_beside_library_0600", store_reserve_beside_library_0600 },
	{ "store_doc_lock_refuses_other_connection", store_doc_lock_refuses_other_connection },
	{ "store_doc_lock_dies_with_its_process", store_doc_lock_dies_with_its_process },
	{ NULL, NULL },
};
