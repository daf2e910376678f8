/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_TRACK_INTERNAL_H
#define MT_PAYLOAD_TRACK_INTERNAL_H
/* Control-thread side of track.c and hooks.c (not for python.c). */

/* mt_track_init() - reset stack and code ids and thread indexes for a new
 * capture. @python: whether mt_python_init() succeeded (stacks walked). */
int mt_track_init(int python);

/* mt_hooks_resolve() - find the real allocator functions. 0 or -errno. */
int mt_hooks_resolve(void);
/* mt_hooks_install() / mt_hooks_uninstall() - patch or restore the GOTs of
 * all loaded objects. Return slots changed or -errno. */
int mt_hooks_install(void);
int mt_hooks_uninstall(void);

/* mt_finish_at_exit() - the process is exiting: stop tracking and close
 * the capture if this process owns it (entry.c). */
void mt_finish_at_exit(void);
/* mt_finish_at_exec() - the process is about to exec another program:
 * the same, with a note in the capture saying so (entry.c). */
void mt_finish_at_exec(void);

/* mt_take_status_fd() - memtrace run's status pipe, taken: the caller
 * writes the one line and closes it; -1 if there is none or another took
 * it. Async-signal-safe (entry.c). */
int mt_take_status_fd(void);

/* mt_track_after_fork() / mt_control_after_fork() - in a fork child, free
 * the locks that threads the child does not have may have held, and drop
 * what belongs to the parent (control.c: its socket and thread). */
void mt_track_after_fork(void);
void mt_control_after_fork(void);
/* mt_control_thread() - 1 while this process has the control thread. */
int mt_control_thread(void);

#endif /* MT_PAYLOAD_TRACK_INTERNAL_H */
