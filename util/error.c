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

static const char *(*override)(void *ctx);
static void *override_ctx;

void mt_error_override(const char *(*fn)(void *ctx), void *ctx)
{
	override = fn;
	override_ctx = ctx;
}

int mt_error(int err, const char *fmt, ...)
{
	const char *instead = override ? override(override_ctx) : NULL;
	if (instead) {
		if (*instead)
			fprintf(stderr, "memtrace: %s\n", instead);
		return err;
	}
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
