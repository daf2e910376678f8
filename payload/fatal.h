/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_FATAL_H
#define MT_PAYLOAD_FATAL_H
/*
 * A capture that a signal ends: for each signal that terminates the
 * process by default (SIGTERM, SIGHUP, SIGINT, SIGQUIT, SIGABRT, SIGUSR1,
 * SIGALRM, ...; not the faults, nor SIGKILL) and whose disposition is
 * still the default when tracking starts, memtrace's handler takes its
 * place. When the signal comes it has the writer thread finish the
 * capture up to the signal (all that is buffered, a DIAG "ended by signal
 * SIGTERM", the trailer; mt_writer_end_now()), waiting MT_FATAL_WAIT_MS at
 * most, tells memtrace run (the status line "signal N"), then puts the
 * default back and raises the signal again: the process ends as it would
 * have, its exit status the signal's.
 *
 * A disposition the program chose is never touched, and one it sets later
 * replaces ours. Python reads every disposition once, as it starts, so
 * signal.getsignal() still says SIG_DFL (in run mode the handlers go in
 * when the program's first line is next, after that). A fork child keeps
 * the handlers: with a capture of its own they end it, without one they do
 * what the default does.
 *
 * Control paths only (entry.c, under its lock); the handler itself makes
 * async-signal-safe calls only.
 */

#include <signal.h> /* sigset_t */

#define MT_FATAL_WAIT_MS 2000

/* mt_fatal_arm() - put the handler in place of every default disposition
 * of these signals (one already there, inherited over fork, stays). */
void mt_fatal_arm(void);

/* mt_fatal_block() / mt_fatal_unblock() - hold these signals off the
 * calling thread (while it stops tracking: the handler cannot wait for
 * the thread it interrupted), then let them in again, as @old was. */
void mt_fatal_block(sigset_t *old);
void mt_fatal_unblock(const sigset_t *old);

/* mt_fatal_release() - give back, exactly, the dispositions the handler
 * replaced, where it is still the one in place. */
void mt_fatal_release(void);

#endif /* MT_PAYLOAD_FATAL_H */
