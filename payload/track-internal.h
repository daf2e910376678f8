/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_TRACK_INTERNAL_H
#define MT_PAYLOAD_TRACK_INTERNAL_H

struct memtrace_config;
/* Control-thread side of track.c and hooks.c (not for python.c). */

/* mt_track_init() - reset stack and code ids and thread indexes for a new
 * capture. @python: whether mt_python_init() succeeded (stacks walked). */
int mt_track_init(int python);

/* mt_take_status_fd() - memtrace run's status pipe, taken: the caller
 * writes the one line and closes it; -1 if there is none or another took
 * it. Async-signal-safe (entry.c). */
int mt_take_status_fd(void);

/* mt_track_after_fork() - in a fork child, free the locks that threads
 * the child does not have may have held. */
void mt_track_after_fork(void);

#endif /* MT_PAYLOAD_TRACK_INTERNAL_H */
