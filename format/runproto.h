/* SPDX-License-Identifier: MIT */
#ifndef MT_FORMAT_RUNPROTO_H
#define MT_FORMAT_RUNPROTO_H
/*
 * The two text protocols between `memtrace run` (cli/cmd-run.c) and the
 * payload it preloads (payload/entry.c, payload/fatal.c): each one's
 * encoder and parser, used by both sides.
 *
 * MEMTRACE_RUN, the environment run gives the payload:
 *   "<flags>:<interval_ms>:<status fd>:<where>"
 * where <where> is "fd:<capture fd>:<path>" (the capture run made, open;
 * the path for messages and follow-fork names, anything up to the end),
 * "fd:<socket fd>" (--live-remote: a connection to the live client) or
 * "<path>" starting with '/' (a capture the payload opens itself).
 * flags and interval_ms are unsigned 32-bit decimals; a descriptor is a
 * non-negative int or -1 (none: dup() failed in run).
 *
 * The status line, written once by the payload when tracking ends, on the
 * status fd, and read by run after the program exited:
 *   "ok\n", "ok dropped <N>\n", "error <reason>\n",
 *   "signal <S>\n", "signal <S> dropped <N>\n"
 * N (events dropped) is 1 or more; S is a signal number 1..127; a reason
 * is one or more bytes, no newline.
 *
 * Numbers are plain decimals: digits only, no sign (but "-1" for a
 * descriptor), no leading zero, no overflow. The parsers are strict: a
 * string that is not exactly one of these forms is an error (-EINVAL),
 * never a guess. The encoders write exactly these forms.
 *
 * Like all of format/: no I/O, no allocation, no locale. The encoders use
 * no stdio and are async-signal-safe (fatal.c writes its line from a
 * signal handler).
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint32_t, uint64_t */

/* MEMTRACE_RUN, decoded. */
struct mt_run_env {
	uint32_t flags;       /* MT_HDR_* of format/record.h */
	uint32_t interval_ms; /* memory sample interval */
	int status_fd;        /* where the status line goes, or -1 */
	int capture_fd;       /* -1 with a path alone, or when run had none */
	int has_fd;           /* <where> began "fd:" */
	const char *path;     /* the rest of the string after "fd:N:" or the
			       * whole <where>; NULL for "fd:N" alone. The
			       * parser points into its input. */
};

/* mt_run_env_encode() - MEMTRACE_RUN for @e into @buf of @cap bytes, with
 * its NUL. A path given with has_fd unset must start with '/'. Returns
 * its length, or -EINVAL if @e cannot be encoded (a path without its
 * '/'), -ENOSPC if it does not fit. */
int mt_run_env_encode(char *buf, size_t cap, const struct mt_run_env *e);

/* mt_run_env_parse() - decode NUL-terminated @s into @e (whose path then
 * points into @s). Returns 0, or -EINVAL. */
int mt_run_env_parse(const char *s, struct mt_run_env *e);

enum mt_run_end {
	MT_RUN_OK = 1,  /* tracking ended and the capture is finished */
	MT_RUN_ERROR,   /* reason says what went wrong */
	MT_RUN_SIGNAL,  /* a signal ended the process; the capture is
			 * whole up to it */
};

/* A status line, decoded. */
struct mt_run_status {
	enum mt_run_end end;
	int sig;             /* MT_RUN_SIGNAL */
	uint64_t dropped;    /* MT_RUN_OK and MT_RUN_SIGNAL: 0 for none */
	const char *reason;  /* MT_RUN_ERROR: not NUL-terminated; the parser */
	size_t reason_len;   /* points into its input */
};

#define MT_RUN_STATUS_MAX 300 /* bytes of the longest line encoded */

/* mt_run_status_encode() - the line for @s, newline included, into @buf
 * of @cap bytes (no NUL). A reason is cut at its first newline and
 * shortened to fit in @cap. Returns the line's length, or -EINVAL
 * for what no line says (an empty reason, a signal out of range), -ENOSPC
 * if even the shortest such line does not fit. Async-signal-safe. */
int mt_run_status_encode(char *buf, size_t cap, const struct mt_run_status *s);

/* mt_run_status_parse() - decode the @len bytes at @buf, which must be
 * exactly one line with its newline, into @s (whose reason then points
 * into @buf). Returns 0, or -EINVAL. */
int mt_run_status_parse(const char *buf, size_t len, struct mt_run_status *s);

#endif
