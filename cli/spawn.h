/* SPDX-License-Identifier: MIT */
#ifndef MT_CLI_SPAWN_H
#define MT_CLI_SPAWN_H
/*
 * Starting one program with a library preloaded, passing memtrace's
 * signals on to it and waiting for it (git's run-command.h is the model).
 * Used by `memtrace run`; one spawned program at a time per process (the
 * signal handlers find it in a static).
 *
 * mt_spawn_start() puts in the handlers for SIGINT, SIGTERM, SIGHUP,
 * SIGQUIT, SIGUSR1, SIGUSR2 and SIGALRM that pass each signal on to the
 * program, except one it got already: the terminal sends ^C, ^\ and its hangup (the kernel's signal,
 * SI_KERNEL) to its whole foreground process group, which holds the
 * program while it stays in ours. A kill of memtrace's pid (SI_USER)
 * reached memtrace alone. mt_spawn_wait() puts the old handlers back.
 *
 * In the child, in this order: the old handlers back; the read ends of
 * spawn's pipes closed; @prepare, given a copy of the write end of the
 * program's pipe that the program inherits (-1 if dup() failed); each @env variable set, then @preload
 * put first in LD_PRELOAD; @note written to the parent; execv(). A child
 * that fails before the exec leaves with status 1, silently (its
 * @prepare says why); a failed exec calls @exec_failed, then prints
 * "cannot execute '@file'". The parent learns which happened through a
 * close-on-exec pipe: @started.
 *
 * Prints (cli/ only): what failed, as mt_error() does.
 */
#include <stddef.h>    /* size_t */
#include <sys/types.h> /* pid_t */

struct mt_spawn_var {
	const char *name;
	const char *value; /* read in the child, after @prepare */
};

struct mt_spawn {
	/* set by the caller */
	const char *file;  /* the executable's path (mt_spawn_find()) */
	char *const *argv; /* NULL-terminated */
	const char *preload;              /* a library for LD_PRELOAD, or NULL */
	const struct mt_spawn_var *env;   /* ended by a NULL name, or NULL */
	/* in the child before the exec: 0, or < 0 to leave with status 1
	 * (having said why); fills @note, up to @cap bytes with its NUL */
	int (*prepare)(void *data, int pipe_fd, char *note, size_t cap);
	void (*exec_failed)(void *data); /* in the child, or NULL */
	void *data;
	char *note; /* @note_cap bytes: the child's note, in the parent */
	size_t note_cap;

	/* set by mt_spawn_start() */
	pid_t pid;
	int pipe_fd; /* the read end of the program's pipe (close-on-exec) */
	int started; /* the exec happened: @note holds what the child said */
};

/* mt_spawn_find() - the path of program @name into @out (@cap bytes):
 * @name itself if it has a slash, else the first executable of that
 * name on PATH. Returns 0, -errno of access() for a name with a slash,
 * -ENOENT. Prints nothing. */
int mt_spawn_find(const char *name, char *out, size_t cap);

/* mt_spawn_start() - fork and exec @sp's program (see above) and wait
 * until it was executed or its child ended. Returns 0, or -1 after
 * printing why no child was made. */
int mt_spawn_start(struct mt_spawn *sp);

/* mt_spawn_rearm() - the forwarding handlers in again, after code that
 * replaced them (the live view). */
void mt_spawn_rearm(struct mt_spawn *sp);

/* mt_spawn_forward() - pass @sig on to the program unless it got it
 * already (@from_kernel: the signal came from the terminal). */
void mt_spawn_forward(struct mt_spawn *sp, int sig, int from_kernel);

/* mt_spawn_running() - whether the program has not ended yet (it is not
 * reaped). */
int mt_spawn_running(struct mt_spawn *sp);

/* mt_spawn_running_after() - whether the program has not ended within
 * @ms milliseconds (woken by its end, not polled). */
int mt_spawn_running_after(struct mt_spawn *sp, int ms);

/* mt_spawn_wait() - wait for the program to end, its wait status into
 * *@wstatus, and put the old signal handlers back. Returns 0, or -1
 * after printing why. */
int mt_spawn_wait(struct mt_spawn *sp, int *wstatus);

#endif /* MT_CLI_SPAWN_H */
