/* SPDX-License-Identifier: MIT */
/*
 * The terminal of `memtrace live` (live-term.h): frames drawn in place,
 * keys, and the signals that end, suspend or resize the view.
 */
#include "cli/live-term.h"

#include <poll.h>      /* poll */
#include <signal.h>    /* sigaction, raise */
#include <stdio.h>     /* fputs */
#include <string.h>    /* memchr, memmove, strchr */
#include <sys/ioctl.h> /* TIOCGWINSZ */
#include <termios.h>   /* tcgetattr */
#include <unistd.h>    /* isatty */

static volatile sig_atomic_t stop_sig, stop_kernel, suspend;

static void on_stop(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	stop_kernel = si && si->si_code == SI_KERNEL;
	stop_sig = sig;
}

static void on_tstp(int sig)
{
	(void)sig; /* Ctrl-Z: the loop gives the terminal back, then stops */
	suspend = 1;
}

static void on_winch(int sig)
{
	(void)sig; /* ends the wait: the next frame fits the new size */
}

static struct {
	int screen;            /* standard output is a terminal: draw in place */
	int keys;              /* standard input is a terminal we set raw */
	struct termios saved;
} term;

void mt_live_term_enter(void)
{
	struct sigaction sa = { .sa_flags = SA_RESTART }; /* poll() ends on a signal all the same */

	sa.sa_sigaction = on_stop;
	sa.sa_flags |= SA_SIGINFO;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGQUIT, &sa, NULL);
	sa.sa_flags &= ~SA_SIGINFO;
	term.screen = isatty(STDOUT_FILENO);
	if (!term.screen)
		return;
	sa.sa_handler = on_winch;
	sigaction(SIGWINCH, &sa, NULL);
	sa.sa_handler = on_tstp;
	sigaction(SIGTSTP, &sa, NULL);
	if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &term.saved) == 0) {
		struct termios raw = term.saved;
		raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
		raw.c_cc[VMIN] = 0;
		raw.c_cc[VTIME] = 0;
		term.keys = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
	}
	fputs("\x1b[?1049h\x1b[?25l", stdout); /* the alternate screen, no cursor */
	fflush(stdout);
}

void mt_live_term_leave(void)
{
	if (!term.screen)
		return;
	fputs("\x1b[?25h\x1b[?1049l", stdout);
	fflush(stdout);
	if (term.keys)
		tcsetattr(STDIN_FILENO, TCSANOW, &term.saved);
	term.screen = term.keys = 0;
}

int mt_live_term_screen(void)
{
	return term.screen;
}

int mt_live_term_keys(void)
{
	return term.keys;
}

int mt_live_term_size(unsigned *cols, unsigned *rows)
{
	struct winsize ws;

	if (!term.screen || ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0 || !ws.ws_col || !ws.ws_row)
		return -1;
	*cols = ws.ws_col;
	*rows = ws.ws_row;
	return 0;
}

void mt_live_term_draw(const char *frame, size_t len)
{
	if (!term.screen) {
		fwrite(frame, 1, len, stdout);
		fputc('\n', stdout);
		fflush(stdout);
		return;
	}
	/* Home, each line then erase to its end, then erase below. A line
	 * break after the terminal's last row would scroll the frame's first
	 * lines away: breaks go between lines only, and the lines that do not
	 * fit are left out. */
	unsigned cols, rows, row = 0;
	if (mt_live_term_size(&cols, &rows) < 0)
		rows = 0; /* no known size: all of it */
	fputs("\x1b[H", stdout);
	for (const char *p = frame, *end = frame + len; p < end && (!rows || row < rows); row++) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		if (row)
			fputs("\r\n", stdout);
		fwrite(p, 1, n, stdout);
		fputs("\x1b[K", stdout);
		p += n + 1;
	}
	fputs("\x1b[J", stdout);
	fflush(stdout);
}

void mt_live_term_suspend(void)
{
	struct sigaction dfl = { .sa_handler = SIG_DFL };

	if (!suspend)
		return;
	suspend = 0;
	mt_live_term_leave();
	sigaction(SIGTSTP, &dfl, NULL);
	raise(SIGTSTP); /* stopped here until SIGCONT */
	mt_live_term_enter();
}

/* Room kept after a sequence for its rest, where a read cut it (a key
 * held down fills the terminal's queue faster than the view reads it). */
#define SEQ_ROOM 16

/* More of the keys into @c[*@k..@cap), if any come within 30 ms (a
 * terminal writes a sequence at once). Returns whether some came. */
static int read_more(char *c, ssize_t *k, ssize_t cap)
{
	struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };

	if (*k >= cap || poll(&p, 1, 30) <= 0)
		return 0;
	ssize_t more = read(STDIN_FILENO, c + *k, (size_t)(cap - *k));
	if (more <= 0)
		return 0;
	*k += more;
	return 1;
}

/* A key that is not a character comes as a sequence that starts with Esc
 * (an arrow "\x1b[A", F2 "\x1bOQ", Alt-x "\x1bx"): its letters are not
 * keys of their own. @c[@i] is an Esc of the @*k bytes read (@cap at
 * most). Returns the index of the sequence's last byte in @c, which may
 * have moved its bytes from @i on to its start, or -1 for the Esc key
 * alone: nothing after it, even a moment later (the rest of a sequence
 * cut by the read is read here). The key it is, if one of ours, in *@key
 * (else 0). */
static ssize_t key_sequence_end(char *c, ssize_t *k, ssize_t cap, ssize_t i, char *key)
{
	*key = 0;
	if (cap - *k < SEQ_ROOM && i > 0) {
		/* the keys before it are taken: the sequence moves to the
		 * front, its index and what it returns with it */
		memmove(c, c + i, (size_t)(*k - i));
		*k -= i;
		i = 0;
	}
	if (i + 1 == *k)
		read_more(c, k, cap);
	if (i + 1 >= *k)
		return -1;
	ssize_t j;
	if (c[i + 1] == 'O') {
		if (i + 2 == *k)
			read_more(c, k, cap);
		j = i + 2 < *k ? i + 2 : *k - 1; /* SS3: one byte more */
	} else if (c[i + 1] == '[') {
		/* CSI: parameters, then a final byte from @ to ~ */
		j = i + 2;
		do {
			while (j < *k && !(c[j] >= 0x40 && c[j] <= 0x7e))
				j++;
		} while (j >= *k && read_more(c, k, cap));
		if (j >= *k)
			return *k - 1;
	} else {
		return i + 1; /* Alt and a key */
	}
	/* the arrows and Home and End with or without a modifier ("1;5D"),
	 * the others by their number ("5~") */
	static const char finals[] = "ABCDHF", ours[] = { MT_KEY_UP, MT_KEY_DOWN, '>', '<',
							 MT_KEY_HOME, MT_KEY_END };
	const char *f = j > i + 1 ? strchr(finals, c[j]) : NULL;
	if (c[j] && f)
		*key = ours[f - finals];
	else if (c[j] == '~' && c[i + 1] == '[' && j == i + 3)
		*key = c[i + 2] == '5'				 ? MT_KEY_PGUP
		       : c[i + 2] == '6'			 ? MT_KEY_PGDN
		       : c[i + 2] == '1' || c[i + 2] == '7' ? MT_KEY_HOME
		       : c[i + 2] == '4' || c[i + 2] == '8' ? MT_KEY_END
							 : 0;
	return j;
}

int mt_live_term_wait(int ms, int wake, char *keys, size_t cap, size_t *n_keys)
{
	struct pollfd p[2];
	int n = 0, in = -1;

	*n_keys = 0;
	if (stop_sig)
		return 1;
	if (suspend)
		return 0;
	if (term.keys) {
		in = n;
		p[n++] = (struct pollfd){ .fd = STDIN_FILENO, .events = POLLIN };
	}
	if (wake >= 0)
		p[n++] = (struct pollfd){ .fd = wake, .events = POLLIN };
	if (poll(p, (nfds_t)n, ms) > 0 && in >= 0 && (p[in].revents & POLLIN)) {
		char c[64], key;
		ssize_t k = read(STDIN_FILENO, c, sizeof(c));
		for (ssize_t i = 0; i < k; i++) {
			key = c[i];
			/* Ctrl and a key: none of ours (their bytes are the
			 * values MT_KEY_* give the sequences) */
			if ((unsigned char)key < 0x20 && key != '\x1b')
				continue;
			if (key == '\x1b') {
				ssize_t end = key_sequence_end(c, &k, (ssize_t)sizeof(c), i, &key);
				if (end < 0)
					return 1; /* Esc alone quits, as q does */
				i = end;
			}
			if (key == 'q' || key == 'Q')
				return 1;
			if (key && *n_keys < cap)
				keys[(*n_keys)++] = key;
		}
	}
	return stop_sig != 0;
}

int mt_live_term_stopped(int *by_kernel)
{
	if (by_kernel)
		*by_kernel = stop_kernel;
	return stop_sig;
}

void mt_live_term_reset(void)
{
	stop_sig = stop_kernel = suspend = 0;
}
