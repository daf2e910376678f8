/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_TRACK_H
#define MT_PAYLOAD_TRACK_H
/*
 * Event recording, shared by the GOT hooks (hooks.c) and the PyMem domain
 * wrappers (defined here, put in place by pymem.c). Every function here is hook-safe: no allocation,
 * no stdio, no lock a writer can hold for long; errno is preserved.
 *
 * The recursion guard is a byte of initial-exec TLS: reading it never
 * calls __tls_get_addr, which would malloc inside our own hook.
 *
 * But for mt_track_init() and mt_track_after_fork(): those are entry.c's,
 * on control paths (a start, a fork child), never in a hook.
 */
#include "payload/python-layout.h" /* struct mt_pymem_allocator */

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
extern volatile int mt_tracking __attribute__((visibility("hidden")));

/* mt_track_init() - reset stack and code ids and thread indexes for a new
 * capture. @python: whether mt_python_init() succeeded (stacks walked);
 * @lines: STACK records carry source lines, CODE records no line tables
 * (the header's MT_HDR_LINES). Control paths only. */
int mt_track_init(int python, int lines);

/* mt_track_native() - record native stacks (@on) or not, from the next
 * event on: each event's stack is then its native chain (NATIVE records)
 * hung under its Python stack. mt_native_start() must have succeeded.
 * Control paths only. */
void mt_track_native(int on);

/* mt_track_unloaded() - with native stacks on, a library was unloaded
 * (dlclose): return addresses met from now on get nodes of their own,
 * resolved against the module map as it is then (another library may
 * be loaded where this one was). Not from an allocation hook. */
void mt_track_unloaded(void);

/* mt_track_modules() - with native stacks on, the module map as MODULE
 * records of a new generation, in the calling thread's order of events:
 * @all of it at the start of a capture, and after each dlopen the modules
 * new to the capture, before anything they allocate. Control paths and
 * the dlopen hook, guard held. */
void mt_track_modules(int all);

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

/* mt_track_alloc_raw() / mt_track_free_raw() - the same for a kind past
 * 15 (the PyMem RAW domain's, which any thread may call, with or without
 * the GIL: the stack is read as for the GOT hooks). */
void mt_track_alloc_raw(unsigned kind, const void *ptr, size_t size);
void mt_track_free_raw(unsigned kind, const void *ptr);

/* mt_track_frame_exit() - the calling thread's Python frame @frame is
 * exiting (returning, yielding or unwinding): its stack reader, which
 * marked it, forgets it and what is above it (python.h). Called by the
 * exit feed (pyfeed.c), with the GIL held. */
void mt_track_frame_exit(const void *frame);

/* mt_track_frames_checked() - frames the stack readers of all threads
 * have checked or described since the process started, told every 256
 * stacks a thread reads: what reading stacks costs (pyadapt.c). Any
 * thread. */
uint64_t mt_track_frames_checked(void);

/* mt_track_code_gone() - code object @code is being deallocated: a code
 * object made later at its address gets an id of its own, and threads
 * forget the stacks they cached at their next event. Called from its
 * tp_dealloc (python.c's wrapper, given it by pymem.c), with the GIL
 * held; takes the tables' lock. */
void mt_track_code_gone(const void *code);

/* mt_track_thread_name() - the program named the thread of kernel id
 * @tid @name (@len bytes): a NAME record, in the calling thread's buffer,
 * while a capture runs. Called by pythreads.c with the GIL held. */
void mt_track_thread_name(uint64_t tid, const char *name, size_t len);

/*
 * The PyMem OBJ and MEM domain wrappers (--trace-python-allocators),
 * defined here so that the recording path and the stack walk inline into
 * them: with every Python object allocation an event, a call less per
 * event shows. pymem.c puts them in place and takes them out.
 */

/* One wrapper instance: its ctx. A wrapper that someone else wrapped in
 * turn cannot be taken out of their chain on detach; it stays there as a
 * pass-through forever, with its saved allocator. A later attach must
 * then not reuse that instance (its orig would point back into the chain
 * and loop), so each domain has a few instances. */
struct mt_pymem_domain {
	int domain;
	volatile int active; /* record through this wrapper */
	int used;            /* reachable from the domain's chain */
	struct mt_pymem_allocator orig; /* what we delegate to */
};

/* mt_pymem_wrappers() - the wrappers for interpreters of layout row @row
 * (mt_pylayouts), with a NULL ctx: the stack walk is compiled into each
 * row's allocating functions. Their free is mt_pymem_free for every row,
 * which is how an installed wrapper is recognised. */
const struct mt_pymem_allocator *mt_pymem_wrappers(size_t row);
void mt_pymem_free(void *ctx, void *ptr);

#endif /* MT_PAYLOAD_TRACK_H */
