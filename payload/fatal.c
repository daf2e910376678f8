/* SPDX-License-Identifier: MIT */
/*
 * The handler for signals that end the process (see fatal.h): finish the
 * capture, then die of the signal as the default disposition would.
 */
#include "payload/fatal.h"
#include "format/runproto.h"
#include "payload/status.h"
#include "payload/writer.h"

#include <errno.h>   /* errno */
#include <pthread.h> /* pthread_sigmask */
#include <signal.h>  /* sigaction */
#include <string.h>  /* memset */
#include <unistd.h>  /* write */

static const struct {
	int sig;
	const char *name;
} fatal_sigs[] = {
	{ SIGHUP, "SIGHUP" },       { SIGINT, "SIGINT" },       { SIGQUIT, "SIGQUIT" },
	{ SIGABRT, "SIGABRT" },     { SIGUSR1, "SIGUSR1" },     { SIGUSR2, "SIGUSR2" },
	{ SIGPIPE, "SIGPIPE" },     { SIGALRM, "SIGALRM" },     { SIGTERM, "SIGTERM" },
	{ SIGSTKFLT, "SIGSTKFLT" }, { SIGXCPU, "SIGXCPU" },     { SIGXFSZ, "SIGXFSZ" },
	{ SIGVTALRM, "SIGVTALRM" }, { SIGPROF, "SIGPROF" },     { SIGIO, "SIGIO" },
	{ SIGPWR, "SIGPWR" },
};
#define N_FATAL (sizeof(fatal_sigs) / sizeof(fatal_sigs[0]))

/* The dispositions the handler replaced (defaults, with the program's
 * flags and mask): set before it goes in, kept after (a library may
 * have saved the handler and put it back). */
static struct {
	struct sigaction old[N_FATAL];
	volatile sig_atomic_t saved[N_FATAL];
} fs;

static int slot(int sig)
{
	for (size_t i = 0; i < N_FATAL; i++)
		if (fatal_sigs[i].sig == sig)
			return (int)i;
	return -1;
}

/* @dst = @a @b @c, cut to @cap bytes with its NUL. No stdio here. */
static void compose(char *dst, size_t cap, const char *a, const char *b, const char *c)
{
	const char *parts[3] = { a, b, c };
	size_t n = 0;
	for (int k = 0; k < 3; k++)
		for (const char *p = parts[k]; *p && n + 1 < cap; p++)
			dst[n++] = *p;
	dst[n] = '\0';
}

/* Tell memtrace run, if it listens, that @sig ended the process and the
 * capture is whole up to it: "signal N[ dropped M]" (format/runproto.h). */
static void report_signal(int sig)
{
	struct mt_run_status s = { .end = MT_RUN_SIGNAL, .sig = sig,
				   .dropped = mt_writer_dropped() };
	mt_status_report(&s);
}

static void on_fatal(int sig, siginfo_t *si, void *uc)
{
	(void)si;
	(void)uc;
	int saved_errno = errno;
	int i = slot(sig);
	if (i >= 0) {
		char msg[96];
		compose(msg, sizeof(msg), "ended by signal ", fatal_sigs[i].name,
			": the capture is complete up to it");
		if (mt_writer_end_now(msg, MT_FATAL_WAIT_MS * 1000000ull) == 0)
			report_signal(sig);
	}
	/* as the default disposition would have: die of the signal */
	if (i >= 0 && fs.saved[i]) {
		sigaction(sig, &fs.old[i], NULL);
	} else {
		struct sigaction dfl;
		memset(&dfl, 0, sizeof(dfl));
		dfl.sa_handler = SIG_DFL;
		sigaction(sig, &dfl, NULL);
	}
	raise(sig); /* blocked while we run: pending until unblocked */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, sig);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	errno = saved_errno;
}

static void fatal_set(sigset_t *set)
{
	sigemptyset(set);
	for (size_t i = 0; i < N_FATAL; i++)
		sigaddset(set, fatal_sigs[i].sig);
}

void mt_fatal_block(sigset_t *old)
{
	sigset_t set;
	fatal_set(&set);
	pthread_sigmask(SIG_BLOCK, &set, old);
}

void mt_fatal_unblock(const sigset_t *old)
{
	pthread_sigmask(SIG_SETMASK, old, NULL);
}

static int is_ours(const struct sigaction *sa)
{
	return (sa->sa_flags & SA_SIGINFO) && sa->sa_sigaction == on_fatal;
}

void mt_fatal_arm(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_fatal;
	/* the others wait while one finishes the capture on this thread */
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
	fatal_set(&sa.sa_mask);
	for (size_t i = 0; i < N_FATAL; i++) {
		struct sigaction cur;
		if (sigaction(fatal_sigs[i].sig, NULL, &cur) != 0 || is_ours(&cur))
			continue;
		if ((cur.sa_flags & SA_SIGINFO) || cur.sa_handler != SIG_DFL)
			continue; /* the program's */
		fs.old[i] = cur;
		fs.saved[i] = 1;
		sigaction(fatal_sigs[i].sig, &sa, NULL);
	}
}

void mt_fatal_release(void)
{
	for (size_t i = 0; i < N_FATAL; i++) {
		struct sigaction cur;
		if (fs.saved[i] && sigaction(fatal_sigs[i].sig, NULL, &cur) == 0 && is_ours(&cur))
			sigaction(fatal_sigs[i].sig, &fs.old[i], NULL);
	}
}
