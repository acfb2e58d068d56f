/* err.c - the error-buffer helper declared in err.h. */
#include "err.h"

#include <stdarg.h>
#include <stdio.h>

int sekv_errf(char *err, size_t errlen, int code, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen > 0) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}

const char *sekv_strerror(int code)
{
	switch (code) {
	case SEKV_OK: return "ok";
	case SEKV_EIO: return "io";
	case SEKV_EFORMAT: return "format";
	case SEKV_ENOMEM: return "out of memory";
	case SEKV_EINVAL: return "invalid argument";
	case SEKV_EUNSUP: return "unsupported";
	case SEKV_ENOTFOUND: return "not found";
	case SEKV_EDB: return "database";
	case SEKV_EMISMATCH: return "mismatch";
	case SEKV_EBUDGET: return "budget";
	case SEKV_EINTR: return "interrupted";
	case SEKV_EBUSY: return "busy";
	}
	return "unknown";
}
