/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_ENTRY_H
#define MT_PAYLOAD_ENTRY_H
/*
 * Starting and stopping tracking (entry.c), for the control thread
 * (control.c): the payload's other entry points besides the exported
 * memtrace_payload_start()/stop() of memtrace-payload.h.
 *
 * entry.c calls nothing of control.c: what it must know of the control
 * channel (how many threads it has, for the fork-warning filter) comes
 * through the counter it is given. Control paths only.
 */
struct memtrace_config;

/* mt_start_attached() - memtrace_payload_start() for the control thread,
 * which must never wait for the GIL: tracking of the C allocators starts
 * at once, without what needs the GIL (the PyMem wrappers of
 * MT_HDR_PYALLOC, the atexit and fork registrations). 0 or -errno. */
int mt_start_attached(const struct memtrace_config *cfg);

/* mt_start_attached_python() - the rest of that start: waits for the GIL,
 * then does what needs it, if the capture still runs. Returns 1 if it
 * did, 0 if tracking had stopped meanwhile or Python is not there. */
int mt_start_attached_python(void);

/* mt_entry_forked() - 1 while the capture under way is this process's own
 * as a fork child followed (--follow-fork), else 0. */
int mt_entry_forked(void);

/* mt_entry_count_threads() - @count tells how many threads of its own the
 * caller has in this process (called from Python's before-fork hook,
 * with the GIL held; it must not wait for the GIL). NULL: none. */
void mt_entry_count_threads(int (*count)(void));

#endif /* MT_PAYLOAD_ENTRY_H */
