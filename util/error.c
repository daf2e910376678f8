/* SPDX-License-Identifier: MIT */
/* User-facing error and warning lines for everything above the payload. */
#include "util/error.h"
#include "format/error.h"

#include <stdio.h> /* fprintf */

/* "memtrace: <lead><fmt>[: <reason of @err>]" and its newline. */
static void say(const char *lead, int err, const char *fmt, va_list ap)
{
	fprintf(stderr, "memtrace: %s", lead);
	vfprintf(stderr, fmt, ap);
	if (err)
		fprintf(stderr, ": %s", mt_strerror(err));
	fputc('\n', stderr);
}

int mt_error(int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	say("", err, fmt, ap);
	va_end(ap);
	return err;
}

void mt_note(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	say("", 0, fmt, ap);
	va_end(ap);
}

void mt_warning(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	say("warning: ", 0, fmt, ap);
	va_end(ap);
}
