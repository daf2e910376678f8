/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_PHDR_H
#define MT_PAYLOAD_PHDR_H
/*
 * The payload's walks of the loaded objects, kept out of the way of a
 * fork. dl_iterate_phdr() holds the loader's write lock while it runs, and
 * so do dlopen() and dlclose() while they change the list; glibc before
 * 2.38 neither takes nor resets that lock around fork(): a fork while
 * another thread walks leaves the child with the lock held by a thread it
 * does not have, and the child's next walk or dlopen waits forever (a
 * `--follow-fork` child starting its capture walks at once).
 *
 * So every walk of the payload goes through mt_phdr_walk() (or
 * mt_phdr_walk_if()), and every call into libunwind (which walks on its
 * own) and the payload's own dlopen/dlclose between mt_phdr_enter() and
 * mt_phdr_leave(). So does the one other call of the payload's that holds
 * a lock a fork child cannot get back: the making of a Python thread
 * state for a thread of memtrace's (python.h, mt_python_gil_take()).
 * Once mt_phdr_guard() has run, a fork waits for the walks under way
 * (pthread_atfork prepare) and new walks wait while it forks, however
 * many threads fork at once. Both waits are bounded, so
 * that a fork handler of the program's that waits for a thread which
 * waits here costs a delay, never a deadlock: an optional walk (an
 * unwind's) waits at most 10 ms and is then skipped, a needed one waits
 * at most 200 ms and then goes on, still counted; a fork waits at most
 * 1 s. The forking thread never waits: not for its own walk (a fork from
 * a signal handler that interrupted one), nor as a walker while it forks
 * (the program's other fork handlers may allocate, and unwind, on it);
 * its walks are counted all the same, for another thread's fork. A walk
 * inside another on the same thread never waits either: the outer one
 * holds the fork off.
 *
 * When a wait gave up (or a signal handler forked inside a walk), the
 * child may have inherited the lock held: it is *unsafe*, and so are its
 * own children. There every walk is skipped, and a capture must not start
 * (mt_phdr_unsafe()).
 *
 * Allocates nothing; takes no lock (atomics, and short sleeps, which are
 * not cancellation points, while a fork is under way); errno is kept.
 * Not for a signal handler that may have interrupted a fork.
 */
#include <link.h> /* struct dl_phdr_info */

/* mt_phdr_enter() - before a call that may walk or change the list of
 * loaded objects. Returns a token for mt_phdr_leave(), or, if @optional
 * and a fork kept it waiting too long or the process is unsafe, -1: skip
 * the call (and call no mt_phdr_leave()). */
int mt_phdr_enter(int optional);
void mt_phdr_leave(int token);

/* mt_phdr_walk() - dl_iterate_phdr(@cb, @data), out of a fork's way; -1
 * without a walk in an unsafe process. */
int mt_phdr_walk(int (*cb)(struct dl_phdr_info *, size_t, void *), void *data);
/* mt_phdr_walk_if() - the same for an optional walk: -1 if it was
 * skipped (see mt_phdr_enter()). */
int mt_phdr_walk_if(int (*cb)(struct dl_phdr_info *, size_t, void *), void *data);

/* mt_phdr_unsafe() - 1 in a process whose walks would risk waiting
 * forever (above), else 0. */
int mt_phdr_unsafe(void);

/* mt_phdr_guard() - registers the fork handlers, once per process: at
 * the first start, before the payload's other fork handlers (a child's
 * run in the order they were registered, so this one's comes first). */
void mt_phdr_guard(void);

#endif /* MT_PAYLOAD_PHDR_H */
