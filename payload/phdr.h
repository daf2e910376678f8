/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_PHDR_H
#define MT_PAYLOAD_PHDR_H
/*
 * The payload's walks of the loaded objects, kept out of the way of a
 * fork. dl_iterate_phdr() holds the loader's write lock while it runs,
 * and glibc before 2.38 neither takes nor resets that lock around fork():
 * a fork while another thread walks leaves the child with the lock held
 * by a thread it does not have, and the child's next walk or dlopen waits
 * forever (a `--follow-fork` child starting its capture walks at once).
 *
 * So every walk of the payload goes through mt_phdr_walk(), and every call
 * into libunwind (which walks on its own) between mt_phdr_enter() and
 * mt_phdr_leave(). Once mt_phdr_guard() has run, a fork waits for the
 * walks under way (pthread_atfork prepare) and walks wait while it forks.
 * Both waits are bounded, so that a fork handler of the program's that
 * waits for a thread which waits here costs a delay, never a deadlock:
 * a walk waits at most 200 ms, then goes on; a fork waits at most 1 s.
 * The forking thread itself never waits (the program's other fork
 * handlers may allocate, and unwind, on it).
 *
 * Not for a signal handler. Allocates nothing.
 */
#include <link.h> /* struct dl_phdr_info */

/* mt_phdr_walk() - dl_iterate_phdr(@cb, @data), out of a fork's way. */
int mt_phdr_walk(int (*cb)(struct dl_phdr_info *, size_t, void *), void *data);

/* mt_phdr_enter() - before a call that may walk (libunwind's); returns
 * what mt_phdr_leave() is to be given. */
int mt_phdr_enter(void);
void mt_phdr_leave(int entered);

/* mt_phdr_guard() - registers the fork handlers, once per process: at
 * the first start, before the payload's other fork handlers (a child's
 * run in the order they were registered, so this one's comes first). */
void mt_phdr_guard(void);

#endif /* MT_PAYLOAD_PHDR_H */
