/* SPDX-License-Identifier: MIT */
/*
 * Starting a program, passing signals on to it, waiting for it (see
 * spawn.h).
 */
#include "cli/spawn.h"
#include "util/error.h"

#include <errno.h>    /* errno */
#include <fcntl.h>    /* O_CLOEXEC */
#include <poll.h>     /* poll */
#include <signal.h>   /* sigaction */
#include <stdio.h>    /* snprintf */
#include <stdlib.h>   /* getenv, setenv */
#include <string.h>   /* strlen */
#include <sys/syscall.h> /* SYS_pidfd_open */
#include <sys/wait.h> /* waitpid, waitid */
#include <unistd.h>   /* fork, execv, pipe2 */

/* the signals a user sends a program, whose default action would end
 * memtrace alone and leave the program running on, unwaited for */
#define N_SIGS 7
static const int sigs[N_SIGS] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM };

/* The program, for the handlers; and the handlers they replaced. */
static struct {
	pid_t child;
	struct sigaction old[N_SIGS];
} sp_state;

/* Whether a signal the kernel sent (the terminal's) reached the program
 * already: it stays in our process group. */
static int program_got_it(int from_kernel)
{
	return from_kernel && getpgid(sp_state.child) == getpgrp();
}

static void forward_signal(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	int saved = errno;
	if (sp_state.child > 0 && !program_got_it(si && si->si_code == SI_KERNEL))
		kill(sp_state.child, sig);
	errno = saved;
}

static void arm(struct sigaction *old)
{
	struct sigaction sa = { .sa_sigaction = forward_signal, .sa_flags = SA_SIGINFO };
	sigemptyset(&sa.sa_mask);
	for (int i = 0; i < N_SIGS; i++)
		sigaction(sigs[i], &sa, old ? &old[i] : NULL);
}

static void disarm(void)
{
	for (int i = 0; i < N_SIGS; i++)
		sigaction(sigs[i], &sp_state.old[i], NULL);
}

int mt_spawn_find(const char *name, char *out, size_t cap)
{
	if (strchr(name, '/')) {
		if (access(name, X_OK) != 0)
			return -errno;
		snprintf(out, cap, "%s", name);
		return 0;
	}
	const char *path = getenv("PATH");
	if (!path)
		path = "/usr/local/bin:/usr/bin:/bin";
	while (*path) {
		size_t len = strcspn(path, ":");
		snprintf(out, cap, "%.*s/%s", (int)len, len ? path : ".", name);
		if (access(out, X_OK) == 0)
			return 0;
		path += len + (path[len] == ':');
	}
	return -ENOENT;
}

/* The child's side: never returns. */
static void child_run(struct mt_spawn *sp, int note_fd, int pipe_wr)
{
	disarm();
	/* the payload's end of the program's pipe survives the exec */
	int pfd = dup(pipe_wr);
	if (sp->prepare(sp->data, pfd, sp->note, sp->note_cap) < 0)
		_exit(1);
	for (const struct mt_spawn_var *v = sp->env; v && v->name; v++)
		if (setenv(v->name, v->value, 1) != 0)
			_exit(1);
	if (sp->preload) {
		const char *oldpre = getenv("LD_PRELOAD");
		size_t n = strlen(sp->preload) + (oldpre ? strlen(oldpre) : 0) + 2;
		char *pre = malloc(n);
		if (!pre)
			_exit(1);
		if (oldpre && *oldpre)
			snprintf(pre, n, "%s:%s", sp->preload, oldpre);
		else
			snprintf(pre, n, "%s", sp->preload);
		if (setenv("LD_PRELOAD", pre, 1) != 0)
			_exit(1);
	}
	if (write(note_fd, sp->note, strlen(sp->note) + 1) < 0)
		_exit(1);
	execv(sp->file, sp->argv);
	int e = errno;
	if (sp->exec_failed)
		sp->exec_failed(sp->data);
	(void)!write(note_fd, "", 1); /* a second NUL: exec failed */
	mt_error(-e, "cannot execute '%s'", sp->file);
	_exit(1);
}

int mt_spawn_start(struct mt_spawn *sp)
{
	int note[2], prog[2];
	sp->pid = -1;
	sp->pipe_fd = -1;
	sp->started = 0;
	if (pipe2(note, O_CLOEXEC) != 0 || pipe2(prog, O_CLOEXEC) != 0)
		return mt_error(-errno, "cannot create pipe"), -1;
	arm(sp_state.old);
	fflush(stdout);
	fflush(stderr);
	sp_state.child = sp->pid = fork();
	if (sp->pid < 0)
		return mt_error(-errno, "cannot fork"), -1;
	if (sp->pid == 0) {
		close(note[0]);
		close(prog[0]);
		child_run(sp, note[1], prog[1]);
	}
	close(note[1]);
	close(prog[1]);
	sp->pipe_fd = prog[0];

	/* the note and its NUL, then end of file at the exec; a second NUL
	 * if the exec failed, nothing if the child left before */
	size_t cap = sp->note_cap - 1;
	ssize_t got = 0, r;
	while (got < (ssize_t)cap &&
	       ((r = read(note[0], sp->note + got, cap - (size_t)got)) > 0 ||
		(r < 0 && errno == EINTR)))
		got += r > 0 ? r : 0;
	close(note[0]);
	sp->note[got] = '\0';
	sp->started = got > 0 && (size_t)got == strlen(sp->note) + 1;
	return 0;
}

void mt_spawn_rearm(struct mt_spawn *sp)
{
	(void)sp;
	arm(NULL);
}

void mt_spawn_forward(struct mt_spawn *sp, int sig, int from_kernel)
{
	if (sig && !program_got_it(from_kernel))
		kill(sp->pid, sig);
}

int mt_spawn_running(struct mt_spawn *sp)
{
	siginfo_t si = { 0 };
	return waitid(P_PID, (id_t)sp->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && !si.si_pid;
}

int mt_spawn_running_after(struct mt_spawn *sp, int ms)
{
	int fd = (int)syscall(SYS_pidfd_open, sp->pid, 0);
	if (fd >= 0) {
		/* readable once the program has ended */
		struct pollfd p = { .fd = fd, .events = POLLIN };
		while (poll(&p, 1, ms) < 0 && errno == EINTR)
			;
		close(fd);
	}
	return mt_spawn_running(sp);
}

int mt_spawn_wait(struct mt_spawn *sp, int *wstatus)
{
	while (waitpid(sp->pid, wstatus, 0) < 0) {
		if (errno != EINTR)
			return mt_error(-errno, "cannot wait for the program"), -1;
	}
	disarm();
	return 0;
}
