/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_TRACK_INTERNAL_H
#define MT_PAYLOAD_TRACK_INTERNAL_H

struct memtrace_config;
/* Control-thread side of track.c and hooks.c (not for python.c). */

/* mt_track_init() - reset stack and code ids and thread indexes for a new
 * capture. @python: whether mt_python_init() succeeded (stacks walked). */
int mt_track_init(int python);

/* mt_start_attached() - memtrace_payload_start() for the control thread,
 * which must never wait for the GIL: tracking of the C allocators starts
 * at once, without what needs the GIL (the PyMem wrappers of
 * MT_HDR_PYALLOC, the atexit and fork registrations). 0 or -errno (entry.c). */
int mt_start_attached(const struct memtrace_config *cfg);
/* mt_start_attached_python() - the rest of that start: waits for the GIL,
 * then does what needs it, if the capture still runs. Returns 1 if it
 * did, 0 if tracking had stopped meanwhile or Python is not there. */
int mt_start_attached_python(void);

/* mt_take_status_fd() - memtrace run's status pipe, taken: the caller
 * writes the one line and closes it; -1 if there is none or another took
 * it. Async-signal-safe (entry.c). */
int mt_take_status_fd(void);

/* mt_track_after_fork() / mt_control_after_fork() - in a fork child, free
 * the locks that threads the child does not have may have held, and drop
 * what belongs to the parent (control.c: its socket and thread). */
void mt_track_after_fork(void);
void mt_control_after_fork(void);
/* mt_control_thread() - how many threads of the control channel this
 * process has (the control thread, and one per start or stop under way). */
int mt_control_thread(void);

#endif /* MT_PAYLOAD_TRACK_INTERNAL_H */
