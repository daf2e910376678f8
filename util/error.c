/* SPDX-License-Identifier: MIT */
/* User-facing error and warning lines for everything above the payload. */
#include "util/error.h"
#include "format/error.h"

#include <stdio.h> /* fprintf */

int mt_error(int err, const char *fmt, ...)
{
	va_list ap;
	fputs("memtrace: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (err)
		fprintf(stderr, ": %s", mt_strerror(err));
	fputc('\n', stderr);
	return err;
}

void mt_note(const char *fmt, ...)
{
	va_list ap;
	fputs("memtrace: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void mt_warning(const char *fmt, ...)
{
	va_list ap;
	fputs("memtrace: warning: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}
