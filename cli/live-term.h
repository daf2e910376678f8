/* SPDX-License-Identifier: MIT */
#ifndef MT_CLI_LIVE_TERM_H
#define MT_CLI_LIVE_TERM_H
/*
 * Where `memtrace live` draws its frames and takes its keys. Standard
 * output a terminal: each frame is drawn in place on the alternate screen,
 * with no cursor, until mt_live_term_leave() gives the terminal back as
 * it was; Ctrl-Z gives it back before stopping and takes it again after.
 * Otherwise each frame is printed after the last. Keys are read, raw and
 * unechoed, when standard input is a terminal too.
 *
 * SIGINT, SIGTERM, SIGHUP and SIGQUIT end the view: their handlers only
 * note the signal (mt_live_term_stopped()), and the waits return. One
 * view per process (the handlers find the state in a static). Prints
 * nothing but the frames.
 */
#include <stddef.h> /* size_t */

/* mt_live_term_enter() - the signals' handlers in, and the terminal set
 * up if standard output is one; again after mt_live_term_leave(). */
void mt_live_term_enter(void);
/* mt_live_term_leave() - the terminal as it was (a no-op without one). */
void mt_live_term_leave(void);

/* mt_live_term_screen() - frames are drawn in place (standard output is
 * a terminal, entered); mt_live_term_keys() - keys are read. */
int mt_live_term_screen(void);
int mt_live_term_keys(void);
/* mt_live_term_size() - the terminal's columns and rows: 0, or -1 if it
 * has no known size (or there is none). */
int mt_live_term_size(unsigned *cols, unsigned *rows);

/* mt_live_term_draw() - one frame of @len bytes (lines ended by '\n'); in
 * place, as many of its lines as the terminal has rows for. */
void mt_live_term_draw(const char *frame, size_t len);

/* Keys that come as sequences, as mt_live_term_wait() gives them: the
 * arrows up and down, Page Up and Down, Home and End (left and right are
 * given as '<' and '>'). */
enum { MT_KEY_UP = 1, MT_KEY_DOWN, MT_KEY_PGUP, MT_KEY_PGDN, MT_KEY_HOME, MT_KEY_END };

/* mt_live_term_wait() - wait @ms, or less if a key, a signal (Ctrl-Z
 * among them) or input on @wake (a descriptor, or -1) comes. Returns 1 if
 * the view is to end (q, Esc, or one of the signals above), else 0 with
 * the keys pressed, in order, in @keys[0..*@n) (at most @cap): characters
 * and MT_KEY_*; other sequences (function keys, Alt and a key) and
 * control characters (Ctrl and a key) are left out. */
int mt_live_term_wait(int ms, int wake, char *keys, size_t cap, size_t *n);
/* mt_live_term_suspend() - after a Ctrl-Z: the terminal given back, the
 * process stopped, and the terminal taken again once continued (to be
 * drawn again); a no-op otherwise. */
void mt_live_term_suspend(void);

/* mt_live_term_stopped() - the signal that ended the view, or 0; whether
 * the kernel sent it (a terminal's, to its foreground process group) in
 * *@by_kernel. mt_live_term_reset() forgets it, for a new view. */
int mt_live_term_stopped(int *by_kernel);
void mt_live_term_reset(void);

#endif /* MT_CLI_LIVE_TERM_H */
