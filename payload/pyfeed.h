/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_PYFEED_H
#define MT_PAYLOAD_PYFEED_H
/*
 * The exit feed: the interpreter tells the stack reader of every Python
 * frame that returns, yields or unwinds, so that a frame it marked can be
 * trusted to be the same activation at the next event and the frames
 * below it need no checking (python.h): an event's stack then costs the
 * same at any depth. Only exits are asked for, never calls.
 *
 * - 3.12 and later: sys.monitoring, tool id 4 (3 if 4 is taken), events
 *   PY_RETURN, PY_YIELD and PY_UNWIND, to a C function.
 * - 3.11: none. The reader knows a frame suspended in a call has not run
 *   since from a token it writes into the frame (python-walk.h); a
 *   profile function would take every instruction off the specialized
 *   path.
 * - 3.8 to 3.10: a C profile function in every thread that has none
 *   (a program's own profiler keeps its threads), and, through
 *   threading.setprofile(), in threads started later; it acts on
 *   PyTrace_RETURN only. Threads made from C, and threads whose profile
 *   function someone else replaces, are walked and checked as before.
 *
 * The frames a trace function, a profile function or another tool's
 * callback runs exit unreported; the reader never marks them. Start and
 * stop run with the GIL held, on control paths.
 */
#include <stdint.h> /* uint32_t */

/* mt_pyfeed_start() - turn the feed on for an interpreter of @python_hex
 * (on again: a new generation of marks). 0, or -1 if it could not be
 * (no tool id free, no C API): stacks are then read as without it. */
int mt_pyfeed_start(uint32_t python_hex);

/* mt_pyfeed_stop() - turn it off: no mark is trusted from here on, and
 * the hooks come out where they are still ours. */
void mt_pyfeed_stop(void);

/* mt_pyfeed_threading() - threading imported since the feed went on:
 * the threads it starts from here get the profile function too. */
void mt_pyfeed_threading(void);

/* mt_pyfeed_on() - whether the feed is on. */
int mt_pyfeed_on(void);

/* mt_pyfeed_exits() - exits reported so far: what the feed costs. Any
 * thread (a count read without the GIL may lag). */
uint64_t mt_pyfeed_exits(void);

#endif /* MT_PAYLOAD_PYFEED_H */
