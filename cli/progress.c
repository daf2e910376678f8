/* SPDX-License-Identifier: MIT */
/*
 * The progress line of a long read of a capture, on standard error when it
 * is a terminal: "memtrace: reading PATH: 1.20 GiB of 3.40 GiB (35%),
 * about 9 s left", rewritten in place with a carriage return, cut to the
 * terminal's width, and erased with spaces (no escape sequences, which a
 * dumb terminal would print).
 */
#include "cli/cmd.h"
#include "reader/report.h"
#include "util/clock.h"
#include "util/error.h"

#include <errno.h>     /* errno */
#include <stdlib.h>    /* getenv, strtod */
#include <string.h>    /* strlen */
#include <sys/ioctl.h> /* TIOCGWINSZ */
#include <unistd.h>    /* isatty */

#define LINE_MAX_BYTES sizeof(((struct mt_cli_progress *)0)->line)

/* MEMTRACE_PROGRESS_AFTER: seconds of reading before the line shows up
 * (for tests: 0 shows it for a small capture too); default 1 s. */
static int64_t after_ms(void)
{
	const char *v = getenv("MEMTRACE_PROGRESS_AFTER");
	char *end;
	double s;

	if (!v)
		return 1000;
	errno = 0;
	s = strtod(v, &end);
	if (!*v || *end || errno || !(s >= 0 && s <= 86400)) {
		mt_warning("MEMTRACE_PROGRESS_AFTER wants seconds from 0 to 86400, not '%s'", v);
		return 1000;
	}
	return (int64_t)(s * 1000);
}

void mt_cli_progress_start(struct mt_cli_progress *p, const char *path, const char *next,
			   int quiet)
{
	memset(p, 0, sizeof(*p));
	p->path = path;
	p->next = next;
	p->after_ms = after_ms();
	p->on = !quiet && isatty(STDERR_FILENO);
	p->start_ms = mt_now_ms();
}

/* Columns of the terminal on standard error, less one: a line as long as
 * the terminal is wide leaves the cursor on the next line in some. */
static size_t width(void)
{
	struct winsize ws;

	if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1)
		return (size_t)ws.ws_col - 1 < LINE_MAX_BYTES - 1 ? (size_t)ws.ws_col - 1
								  : LINE_MAX_BYTES - 1;
	return 79;
}

/* "9 s" or "3 min", rounded up */
static void left_text(char *buf, size_t len, double ms)
{
	unsigned long long s = ms < 1000 ? 1 : (unsigned long long)(ms / 1000 + 0.999);

	if (s < 60)
		snprintf(buf, len, "%llu s", s);
	else
		snprintf(buf, len, "%llu min", (s + 59) / 60);
}

/* Replace the line on the terminal with @text (which may be ""). */
static void draw(struct mt_cli_progress *p, const char *text)
{
	char out[2 * LINE_MAX_BYTES + 4];
	size_t n = strlen(text), k = 0;

	out[k++] = '\r';
	memcpy(out + k, text, n);
	k += n;
	/* spaces over what is left of the longer line before, then back */
	for (size_t i = n; i < p->shown; i++)
		out[k++] = ' ';
	if (!n)
		out[k++] = '\r';
	fwrite(out, 1, k, stderr);
	fflush(stderr);
	p->shown = n;
}

/* "memtrace: reading PATH: @what", PATH shortened from the left to fit
 * the terminal, control characters in it as '?'. */
static void show(struct mt_cli_progress *p, const char *what)
{
	static const char lead[] = "memtrace: reading ";
	char *line = p->line;
	size_t cols = width(), n = sizeof(lead) - 1;
	size_t plen = strlen(p->path), wlen = strlen(what);
	size_t room = cols > n + 2 + wlen ? cols - n - 2 - wlen : 0;
	const char *path = p->path;

	memcpy(line, lead, n);
	if (plen > room) {
		/* "..." and the end of the path, from the start of a character */
		path += plen - (room > 3 ? room - 3 : 0);
		while (*path && ((unsigned char)*path & 0xc0) == 0x80)
			path++;
		if (room > 3) {
			memcpy(line + n, "...", 3);
			n += 3;
		} else {
			n--; /* "memtrace: reading: ...", without the path */
		}
	}
	for (; *path && n < LINE_MAX_BYTES - 1; path++)
		line[n++] = (unsigned char)*path < 0x20 || *path == 0x7f ? '?' : *path;
	snprintf(line + n, LINE_MAX_BYTES - n, ": %s", what);
	if (strlen(line) > cols)
		line[cols] = '\0';
	draw(p, line);
}

void mt_cli_progress_tell(void *ctx, uint64_t done, uint64_t total)
{
	struct mt_cli_progress *p = ctx;
	int64_t ms = mt_now_ms() - p->start_ms;
	char what[160], got[32], all[32], left[32];

	if (!p->on || p->ended || ms < p->after_ms)
		return;
	mt__report_bytes(all, (unsigned long long)total);
	if (done >= total) {
		/* the read has ended: what comes after, or nothing */
		p->ended = 1;
		if (!p->next) {
			mt_cli_progress_end(p);
			return;
		}
		snprintf(what, sizeof(what), "%s, done; %s", all, p->next);
		show(p, what);
		return;
	}
	mt__report_bytes(got, (unsigned long long)done);
	int n = snprintf(what, sizeof(what), "%s of %s (%u%%)", got, all,
			 (unsigned)(total ? done * 100 / total : 0));
	if (done > 0 && ms > 0) {
		left_text(left, sizeof(left), (double)ms * (double)(total - done) / (double)done);
		snprintf(what + n, sizeof(what) - (size_t)n, ", about %s left", left);
	}
	show(p, what);
}

void mt_cli_progress_clear(struct mt_cli_progress *p)
{
	if (p->shown)
		draw(p, "");
}

void mt_cli_progress_resume(struct mt_cli_progress *p)
{
	if (p->on && !p->shown && p->line[0])
		draw(p, p->line);
}

void mt_cli_progress_end(struct mt_cli_progress *p)
{
	mt_cli_progress_clear(p);
	p->on = 0;
}
