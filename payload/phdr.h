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
 * mt_phdr_leave(). Once mt_phdr_guard() has run, a fork waits for the
 * walks under way (pthread_atfork prepare) and new walks wait while it
 * forks. Both waits are bounded, so that a fork handler of the program's
 * that waits for a thread which waits here costs a delay, never a
 * deadlock: a walk waits at most 200 ms, and then an optional one (an
 * unwind's) is skipped and a needed one goes on; a fork waits at most 1 s.
 * The forking thread never waits for itself: not for its own walk (a fork
 * from a signal handler that interrupted one), nor as a walker while it
 * forks (the program's other fork handlers may allocate, and unwind, on
 * it). A walk inside another on the same thread never waits either: the
 * outer one holds the fork off.
 *
 * Allocates nothing; takes no lock (atomics, and short sleeps while a fork
 * is under way). Not for a signal handler that may have interrupted a fork.
 */
#include <link.h> /* struct dl_phdr_info */

/* mt_phdr_enter() - before a call that may walk or change the list of
 * loaded objects. Returns a token for mt_phdr_leave(), or, if @optional
 * and a fork kept it waiting too long, -1: skip the call (and call no
 * mt_phdr_leave()). */
int mt_phdr_enter(int optional);
void mt_phdr_leave(int token);

/* mt_phdr_walk() - dl_iterate_phdr(@cb, @data), out of a fork's way. */
int mt_phdr_walk(int (*cb)(struct dl_phdr_info *, size_t, void *), void *data);
/* mt_phdr_walk_if() - the same for an optional walk: -1 if it was
 * skipped (see mt_phdr_enter()). */
int mt_phdr_walk_if(int (*cb)(struct dl_phdr_info *, size_t, void *), void *data);

/* mt_phdr_guard() - registers the fork handlers, once per process: at
 * the first start, before the payload's other fork handlers (a child's
 * run in the order they were registered, so this one's comes first). */
void mt_phdr_guard(void);

#endif /* MT_PAYLOAD_PHDR_H */
