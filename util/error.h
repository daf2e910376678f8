/* SPDX-License-Identifier: MIT */
#ifndef MT_UTIL_ERROR_H
#define MT_UTIL_ERROR_H
/*
 * One-line messages on stderr for the CLI, reader and injector (never the
 * payload). Messages are lower-case, say what failed first and quote the
 * subject: "memtrace: cannot open capture 'x.bin': No such file".
 */
#include <stdarg.h> /* va_list */

/* mt_error() - print "memtrace: <fmt>[: <mt_strerror(err)>]" and return
 * @err (pass 0 to omit the reason). */
int mt_error(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* mt_error_override() - until called again with NULL, each mt_error()
 * first asks @fn(@ctx): a message it returns is said instead (a process
 * that exited explains more than the error its exit caused), "" says
 * nothing (said already), NULL lets the error be said. */
void mt_error_override(const char *(*fn)(void *ctx), void *ctx);
/* mt_warning() - print "memtrace: warning: <fmt>". */
void mt_warning(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* mt_note() - print "memtrace: <fmt>": what -v asks to be told. */
void mt_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* MT_UTIL_ERROR_H */
