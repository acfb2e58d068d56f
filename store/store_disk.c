/* store_disk.c - what the library keeps beside its file: the reserve
 * ("<library>-reserve", STORE_RESERVE_BYTES preallocated) that deletes draw
 * on when another program filled the disk, and the per-document ingest
 * locks ("<library>-ingest-<doc>", an open-file-description write lock the
 * kernel drops when its process dies, the file removed on a normal release).
 * Invariant: a connection holds at most one ingest lock (lock_fd), on a
 * document it is writing, and never the reserve file open. The free room
 * writes keep is store_room's (store.c), the deletes store.c's and
 * store_session.c's.
 */
#include "store/store_int.h"
#include "engine/base/err.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Files beside ":memory:" would land in the working directory. */
static int in_memory(const struct store *s)
{
	return !strcmp(s->path, ":memory:");
}

static void reserve_path(const struct store *s, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s-reserve", s->path);
}

int store_reserve_held(struct store *s)
{
	char path[sizeof s->path + 16];
	struct stat st;

	reserve_path(s, path, sizeof path);
	return !in_memory(s) && stat(path, &st) == 0 && st.st_size >= STORE_RESERVE_BYTES;
}

void store_reserve_make(struct store *s)
{
	char path[sizeof s->path + 16];

	if (in_memory(s) || store_reserve_held(s))
		return;
	reserve_path(s, path, sizeof path);
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	/* allocated, not sparse: its blocks are what a delete gets back */
	int rc = posix_fallocate(fd, 0, STORE_RESERVE_BYTES);
	if (close(fd) != 0 || rc != 0)
		unlink(path);
}

int store_reserve_draw(struct store *s)
{
	char path[sizeof s->path + 16];

	if (in_memory(s))
		return 0;
	reserve_path(s, path, sizeof path);
	return unlink(path) == 0;
}

int store_run_delete(struct store *s, int (*fn)(struct store *, int64_t, char *, size_t),
		     int64_t key, char *err, size_t errlen)
{
	int top = s->tx_depth == 0, rc;

	/* a transaction of the caller's cannot be run again, nor vacuumed */
	if (!top)
		return fn(s, key, err, errlen);
	/* the vacuum and checkpoint after the commit need the room too, and
	 * report nothing: a short disk draws on the reserve before */
	if (store_room(s, 0, "store_run_delete", NULL, 0) != 0)
		store_reserve_draw(s);
	rc = fn(s, key, err, errlen);
	if ((rc == SEKV_EDB || rc == SEKV_EIO) && store_reserve_draw(s))
		rc = fn(s, key, err, errlen);
	store_reserve_make(s);
	return rc;
}

static void lock_path(const struct store *s, int64_t doc, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s-ingest-%lld", s->path, (long long)doc);
}

/* Opens document doc's lock file and write-locks it into *fd. A holder
 * releasing it removes the file, so a lock taken on a file no longer at
 * the path is let go and the one there now tried. */
static int lock_open(struct store *s, int64_t doc, int *fd, char *err, size_t errlen)
{
	char path[sizeof s->path + 32];
	struct stat a, b;

	lock_path(s, doc, path, sizeof path);
	for (int tries = 0; tries < 8; tries++) {
		struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
		int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (f < 0)
			return sekv_errf(err, errlen, SEKV_EIO, "store_doc_lock: %s: %s", path,
					 strerror(errno));
		if (fcntl(f, F_OFD_SETLK, &fl) != 0) {
			int e = errno;
			close(f);
			if (e == EAGAIN || e == EACCES)
				return sekv_errf(err, errlen, SEKV_EBUSY, "store_doc_lock: %s: document "
						 "%lld is being ingested by another process", s->path,
						 (long long)doc);
			return sekv_errf(err, errlen, SEKV_EIO, "store_doc_lock: %s: %s", path,
					 strerror(e));
		}
		if (fstat(f, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
		    a.st_ino == b.st_ino) {
			*fd = f;
			return 0;
		}
		close(f);
	}
	return sekv_errf(err, errlen, SEKV_EIO, "store_doc_lock: %s: replaced while locking", path);
}

/* Removed before it is unlocked: whoever locks the file after sees it gone. */
static void lock_close(const struct store *s, int64_t doc, int fd)
{
	char path[sizeof s->path + 32];

	lock_path(s, doc, path, sizeof path);
	unlink(path);
	close(fd);
}

int store_doc_lock(struct store *s, int64_t doc, char *err, size_t errlen)
{
	int fd, rc;

	if (in_memory(s) || (s->lock_fd >= 0 && s->lock_doc == doc))
		return 0;
	store_doc_unlock(s);
	if ((rc = lock_open(s, doc, &fd, err, errlen)))
		return rc;
	s->lock_fd = fd;
	s->lock_doc = doc;
	return 0;
}

void store_doc_unlock(struct store *s)
{
	if (s->lock_fd < 0)
		return;
	lock_close(s, s->lock_doc, s->lock_fd);
	s->lock_fd = -1;
	s->lock_doc = 0;
}

int store_doc_busy(struct store *s, int64_t doc)
{
	char path[sizeof s->path + 32];
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };

	if (in_memory(s) || (s->lock_fd >= 0 && s->lock_doc == doc))
		return 0;
	lock_path(s, doc, path, sizeof path);
	int f = open(path, O_RDONLY | O_CLOEXEC);
	if (f < 0)
		return 0;
	/* asks without taking it: a probe never makes a locker fail */
	int busy = fcntl(f, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
	close(f);
	return busy;
}

int store_lock_take(struct store *s, int64_t doc, int *fd, char *err, size_t errlen)
{
	*fd = -1;
	if (in_memory(s) || (s->lock_fd >= 0 && s->lock_doc == doc))
		return 0;
	return lock_open(s, doc, fd, err, errlen);
}

void store_lock_drop(struct store *s, int64_t doc, int fd)
{
	if (fd >= 0)
		lock_close(s, doc, fd);
}
