/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_PYGATE_H
#define MT_PAYLOAD_PYGATE_H
/*
 * The import gate (pygate.c): no os.fork() while one of memtrace's own
 * threads imports a module.
 *
 * An import holds the module's lock (importlib's _ModuleLock) from before
 * the module is found until it has run. A fork in that time leaves the
 * lock held in the child by a thread the child does not have: the child's
 * next import of the module, or its exit (Py_FinalizeEx() looks threading
 * up), waits forever. Attaching imports what the program may not have
 * (atexit, warnings, re) on memtrace's start thread, and threading on the
 * main thread, and the program may fork at any moment.
 *
 * So that thread imports between mt_pygate_enter() and mt_pygate_leave(),
 * and a before-fork hook (os.register_at_fork(before=...), registered by
 * mt_pygate_register()) lets a fork wait, without the GIL, until it is
 * out; a thread entering while a fork is under way waits for the fork to
 * be done (the after-fork hooks). The program's own imports do not use
 * it. Either side waits at most a few seconds and then goes on, so a
 * thread that never leaves cannot stop the program.
 */

/* mt_pygate_register() - the before- and after-fork hooks, once per
 * interpreter (a fork child has its parent's). Needs the GIL; imports
 * nothing. 0, or -1 if they could not be registered. */
int mt_pygate_register(void);

/* mt_pygate_enter() / mt_pygate_leave() - around imports on a thread of
 * memtrace's; enter without the GIL (it may wait for a fork to end). */
void mt_pygate_enter(void);
void mt_pygate_leave(void);

/* mt_pygate_enter_with_gil() - mt_pygate_enter() for a caller that holds
 * the GIL (a pending call on the main thread): it lets the GIL go while it
 * waits for a fork, which needs it to end. Needs mt_pyapi_bind(). */
void mt_pygate_enter_with_gil(void);

#endif /* MT_PAYLOAD_PYGATE_H */
