/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_STATUS_H
#define MT_PAYLOAD_STATUS_H
/*
 * memtrace run's status pipe (status.c): how the capture ended, told to
 * memtrace run in one line of format/runproto.h ("ok", "error ...", or
 * "signal N" for a capture a signal ended). The payload prints nothing
 * itself.
 *
 * The line is written once: whoever takes the pipe first (entry.c at the
 * end of tracking, fatal.c's signal handler) writes it and closes it;
 * later reports do nothing. The pipe is checked against what it was
 * (fd-id.h) before it is written to or closed: the program may have
 * closed it and given the number to a file of its own.
 *
 * mt_status_report() is async-signal-safe; the others are for control
 * paths.
 */
struct mt_run_status;

/* mt_status_set() - the pipe memtrace run gave (MEMTRACE_RUN's status
 * fd), made close-on-exec so that the program's children never hold it.
 * 0, or -1 if it is not a descriptor (then there is none). */
int mt_status_set(int fd);

/* mt_status_report() - write @s's line and close the pipe, if there is
 * one not yet taken. */
void mt_status_report(const struct mt_run_status *s);

/* mt_status_after_fork() - in a fork child: the pipe is the parent's,
 * closed here (if still ours) and forgotten. */
void mt_status_after_fork(void);

#endif /* MT_PAYLOAD_STATUS_H */
