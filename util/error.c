/* SPDX-License-Identifier: MIT */
/* User-facing error and warning lines for everything above the payload. */
#include "util/error.h"
#include "format/error.h"

#include <stdarg.h> /* va_copy */
#include <stdio.h>  /* fprintf */
#include <stdlib.h> /* malloc */

/* @text with its control characters written as C escapes (\n, \t,
 * \x1b): a name given to memtrace may hold them (a file name with a
 * newline, say), and a message stays one line whatever it quotes. */
static void put_escaped(const char *text)
{
	for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
		if (*p == '\n')
			fputs("\\n", stderr);
		else if (*p == '\t')
			fputs("\\t", stderr);
		else if (*p == '\r')
			fputs("\\r", stderr);
		else if (*p < 0x20 || *p == 0x7f)
			fprintf(stderr, "\\x%02x", *p);
		else
			fputc(*p, stderr);
	}
}

/* "memtrace: <lead><fmt>[: <reason of @err>]" and its newline. */
static void say(const char *lead, int err, const char *fmt, va_list ap)
{
	char buf[1024], *text = buf;
	va_list again;
	va_copy(again, ap);
	int n = vsnprintf(buf, sizeof(buf), fmt, ap);
	if (n >= (int)sizeof(buf) && (text = malloc((size_t)n + 1)) != NULL)
		vsnprintf(text, (size_t)n + 1, fmt, again);
	else if (n >= (int)sizeof(buf))
		text = buf; /* cut short rather than not said */
	va_end(again);
	fprintf(stderr, "memtrace: %s", lead);
	put_escaped(n < 0 ? fmt : text);
	if (text != buf)
		free(text);
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
		if (*instead) {
			fputs("memtrace: ", stderr);
			put_escaped(instead);
			fputc('\n', stderr);
		}
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
