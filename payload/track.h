/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_TRACK_H
#define MT_PAYLOAD_TRACK_H
/*
 * Event recording, shared by the GOT hooks (hooks.c) and the PyMem domain
 * wrappers (python.c). Every function here is hook-safe: no allocation,
 * no stdio, no lock a writer can hold for long; errno is preserved.
 *
 * The recursion guard is a byte of initial-exec TLS: reading it never
 * calls __tls_get_addr, which would malloc inside our own hook.
 *
 * But for mt_track_init() and mt_track_after_fork(): those are entry.c's,
 * on control paths (a start, a fork child), never in a hook.
 */
#include <stddef.h> /* size_t */

extern __thread unsigned char mt_in_hook __attribute__((tls_model("initial-exec")));

/* mt_guard_enter() - 1 if this thread may record (the guard is now set
 * and must be released with mt_guard_leave()), 0 if it is already inside
 * memtrace (pass through, do not record). */
static inline int mt_guard_enter(void)
{
	if (mt_in_hook)
		return 0;
	mt_in_hook = 1;
	return 1;
}

static inline void mt_guard_leave(void)
{
	mt_in_hook = 0;
}

/* mt_tracking - nonzero while events are being recorded. Relaxed reads. */
extern volatile int mt_tracking;

/* mt_track_init() - reset stack and code ids and thread indexes for a new
 * capture. @python: whether mt_python_init() succeeded (stacks walked).
 * Control paths only. */
int mt_track_init(int python);

/* mt_track_after_fork() - in a fork child, free the locks that threads
 * the child does not have may have held. Control paths only. */
void mt_track_after_fork(void);

/* mt_track_alloc() / mt_track_free() - record an event of allocator @kind
 * (enum mt_allocator) with the calling thread's Python stack. Call with
 * the guard held (mt_guard_enter() returned 1), and only for successful
 * allocations; frees before the real free. @size of a free is used for
 * MUNMAP only. errno is kept. */
void mt_track_alloc(unsigned kind, const void *ptr, size_t size);
void mt_track_free(unsigned kind, const void *ptr, size_t size);

/* mt_track_code_gone() - code object @code is being deallocated: a code
 * object made later at its address gets an id of its own, and threads
 * forget the stacks they cached at their next event. Called from its
 * tp_dealloc, with the GIL held; takes the tables' lock. */
void mt_track_code_gone(const void *code);

#endif /* MT_PAYLOAD_TRACK_H */
