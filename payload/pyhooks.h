/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_PYHOOKS_H
#define MT_PAYLOAD_PYHOOKS_H
/*
 * The Python-side hooks (pyhooks.c): C functions that Python calls, so
 * that tracking ends when the program ends and not after the interpreter
 * has torn everything down (leaks would be meaningless), follows forks,
 * and makes no fork warn of memtrace's own threads.
 *
 * - atexit: Python's atexit handler calls ops.at_exit() (stop tracking).
 * - follow-fork: os.register_at_fork(after_in_child=...) calls
 *   ops.fork_child() in a child of os.fork() (multiprocessing's fork
 *   context too) once the interpreter is whole again. A fork that is only
 *   the way to exec another program (subprocess) runs none.
 * - fork warning: from 3.12, os.fork() and os.forkpty() warn
 *   (DeprecationWarning) when the process has more than one thread. Before
 *   a fork, if the program's threads alone (all of them less
 *   ops.own_threads()) are one, an "ignore" filter for that warning goes
 *   first in warnings.filters; it comes out in the child after the fork,
 *   and in the parent after the warning would have come (3.12: before the
 *   after-fork hooks; from 3.13 after them, so there it stays until the
 *   next fork's before hook).
 *
 * pyhooks.c knows nothing of the capture: what it must tell comes up
 * through the callbacks entry.c gives it (mt_pyhooks_init()). The C API
 * functions are found once, in the parent with the GIL held: finding one
 * walks the loaded objects under a loader lock that a fork child may
 * never get. Everything here needs the GIL (but mt_pyhooks_gil_take()),
 * and runs on control paths only.
 */
#include <stdint.h> /* uint32_t */

struct mt_pyhooks_ops {
	void (*at_exit)(void);    /* the program ended (Python's atexit) */
	void (*fork_child)(void); /* in a child of os.fork(), after the fork */
	int (*own_threads)(void); /* memtrace's own threads in this process */
};

/* mt_pyhooks_init() - the callbacks, copied; before any registration. */
void mt_pyhooks_init(const struct mt_pyhooks_ops *ops);

/* mt_pyhooks_atexit() - register the atexit handler, once per process
 * (a fork child's interpreter keeps its parent's, which checks the pid).
 * 0, or -1 if it could not be (tried again at the next call). */
int mt_pyhooks_atexit(void);

/* mt_pyhooks_follow_fork() - register the after-fork hook, once:
 * children inherit it with the interpreter. 0 or -1, as above. */
int mt_pyhooks_follow_fork(void);

/* mt_pyhooks_fork_warning() - register the fork-warning filter's hooks,
 * once, for an interpreter of @python_hex (3.12 or later). 0 or -1. It
 * runs Python code (warnings.filterwarnings()), during which the GIL may
 * pass to another thread: never call it holding a lock that a thread with
 * the GIL may wait for. */
int mt_pyhooks_fork_warning(uint32_t python_hex);

/* mt_pyhooks_allocator() - the interpreter's object allocator as memray
 * names it: "pymalloc", "pymalloc debug", "malloc", "mimalloc",
 * "mimalloc debug", or "unknown". Read once, before memtrace's own PyMem
 * wrappers go in (which it would not know); the same answer after. */
const char *mt_pyhooks_allocator(void);

/* mt_pyhooks_gil_take() / mt_pyhooks_gil_give() - the GIL, for control
 * paths: take returns 1 with it held (@state for give), 0 if there is no
 * interpreter to take it from. Lock order everywhere: the GIL first, then
 * entry.c's lock (the main thread calls in with the GIL held). */
int mt_pyhooks_gil_take(int *state);
void mt_pyhooks_gil_give(int state);

#endif /* MT_PAYLOAD_PYHOOKS_H */
