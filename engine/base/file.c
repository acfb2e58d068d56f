/* file.c - file_open_regular (file.h). */
#include "engine/base/file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/err.h"

int file_open_regular(const char *path, const char *what, int *fd, off_t *size,
		      char *err, size_t errlen)
{
	struct stat st;
	int f, e, flags;

	*fd = -1;
	/* O_NONBLOCK: a FIFO opens at once instead of waiting for a writer */
	f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (f < 0)
		return sekv_errf(err, errlen, SEKV_EIO, "%s: %s: open: %s", what, path, strerror(errno));
	if (fstat(f, &st) != 0) {
		e = errno;
		close(f);
		return sekv_errf(err, errlen, SEKV_EIO, "%s: %s: stat: %s", what, path, strerror(e));
	}
	if (!S_ISREG(st.st_mode)) {
		close(f);
		return sekv_errf(err, errlen, SEKV_EIO, "%s: %s: not a regular file", what, path);
	}
	if ((flags = fcntl(f, F_GETFL)) < 0 || fcntl(f, F_SETFL, flags & ~O_NONBLOCK) < 0) {
		e = errno;
		close(f);
		return sekv_errf(err, errlen, SEKV_EIO, "%s: %s: fcntl: %s", what, path, strerror(e));
	}
	*fd = f;
	if (size)
		*size = st.st_size;
	return 0;
}
