/* SPDX-License-Identifier: MIT */
/*
 * memtrace run: start a Python program with the payload preloaded and
 * wait for it. The program keeps our stdin, stdout and stderr; its exit
 * status (or the signal that killed it) becomes ours.
 */
#include "cli/cmd.h"
#include "format/record.h"
#include "mt-config.h"
#include "reader/capture.h"
#include "util/error.h"
#include "util/io.h"

#include <errno.h>    /* errno */
#include <fcntl.h>    /* open */
#include <getopt.h>   /* getopt_long */
#include <limits.h>   /* PATH_MAX */
#include <signal.h>   /* sigaction */
#include <stdio.h>    /* snprintf */
#include <stdlib.h>   /* setenv */
#include <string.h>   /* strrchr */
#include <sys/stat.h> /* stat */
#include <sys/wait.h> /* waitpid */
#include <unistd.h>   /* fork, execv */

static const char usage[] =
	"usage: memtrace run [-o FILE] [-f] [--trace-python-allocators] [--follow-fork]\n"
	"                    [--live | --live-remote [--live-port N]]\n"
	"                    [--memory-interval-ms N] [--python PATH]\n"
	"                    (script.py | -m module | -c code) [args...]\n"
	"\n"
	"  -o, --output FILE            capture file (default memtrace-<script>.<pid>.bin)\n"
	"  -f, --force                  replace the capture file (and with --live its\n"
	"                               .log) if it exists: by a new file\n"
	"      --trace-python-allocators  record every Python object allocation\n"
	"      --follow-fork            a child of fork() (without exec) gets a capture\n"
	"                               of its own, FILE.<child's pid>\n"
	"      --live                   show the live view (memtrace live) while the\n"
	"                               program runs; its output goes to FILE with .log\n"
	"                               for .bin\n"
	"      --live-remote            no file: the capture goes to one client of\n"
	"                               `memtrace live PORT`, waited for before the\n"
	"                               program starts (not with -o or --follow-fork)\n"
	"      --live-port N            its port on 127.0.0.1 (default 0: any free one)\n"
	"      --memory-interval-ms N   sample RSS every N ms (default 10)\n"
	"      --python PATH            interpreter to run (default: python3 on PATH)\n";

static pid_t child;

/* Signals to memtrace are the program's: passed on, except those the
 * program got already. The terminal sends ^C, ^\ and its hangup to its
 * whole foreground process group (the kernel's signal, SI_KERNEL), which
 * holds the program while it stays in our group: a second SIGINT would
 * interrupt Python's handling of the first (a lost traceback). A kill of
 * memtrace's pid (SI_USER) reached memtrace alone. */
static int program_got_it(int from_kernel)
{
	return from_kernel && getpgid(child) == getpgrp();
}

static void forward_signal(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	int saved = errno;
	if (child > 0 && !program_got_it(si && si->si_code == SI_KERNEL))
		kill(child, sig);
	errno = saved;
}

/* "SIGTERM" for SIGTERM. */
static const char *signal_name(int sig, char *buf, size_t cap)
{
	const char *abbrev = sigabbrev_np(sig);
	if (abbrev)
		snprintf(buf, cap, "SIG%s", abbrev);
	else
		snprintf(buf, cap, "signal %d", sig);
	return buf;
}

/* The program died of @sig; the payload said @said ("signal N", "ok",
 * nothing, ...) of the capture at @where: say how it ended and what the
 * capture holds. */
static void say_killed(int sig, const char *said, const char *where, int remote)
{
	char name[32];
	const char *dropped = strstr(said, " dropped ");
	unsigned long long n = dropped ? strtoull(dropped + 9, NULL, 10) : 0;
	char more[128] = "";
	if (n)
		snprintf(more, sizeof(more), "; %llu events were dropped, as it could not be "
					     "written fast enough", n);
	signal_name(sig, name, sizeof(name));
	if (!strncmp(said, "signal ", 7))
		fprintf(stderr, "memtrace: the program was killed by %s; capture %s %s, complete up "
				"to the signal%s\n",
			name, remote ? "sent to" : "written to", where, more);
	else if (!strncmp(said, "ok", 2))
		fprintf(stderr, "memtrace: the program was killed by %s after tracking ended; "
				"capture %s %s%s\n",
			name, remote ? "sent to" : "written to", where, more);
	else
		fprintf(stderr, "memtrace: the program was killed by %s before memtrace could "
				"finish the capture: %s holds what was written up to 250 ms before\n",
			name, where);
}

/* Search PATH for @name unless it contains a slash. */
static int find_program(const char *name, char *out, size_t cap)
{
	if (strchr(name, '/')) {
		if (access(name, X_OK) != 0)
			return mt_error(-errno, "cannot run interpreter '%s'", name);
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
	return mt_error(-ENOENT, "cannot find interpreter '%s' on PATH", name);
}

/* memtrace-<stem>.<pid>.bin, where stem is the script's or module's name */
static void default_output(char *out, size_t cap, const char *kind, const char *target, pid_t pid)
{
	char stem[256];
	if (!strcmp(kind, "-c")) {
		snprintf(stem, sizeof(stem), "c");
	} else {
		const char *base = strrchr(target, '/');
		base = base ? base + 1 : target;
		snprintf(stem, sizeof(stem), "%s", base);
		char *dot = strrchr(stem, '.');
		if (dot && !strcmp(kind, "script") && !strcmp(dot, ".py"))
			*dot = '\0';
	}
	snprintf(out, cap, "memtrace-%s.%d.bin", stem, (int)pid);
}

/* With --live, the program's output goes beside the capture: its name
 * with .log for .bin. */
static void log_name(char *out, size_t cap, const char *capture)
{
	size_t n = strlen(capture);
	if (n > 4 && !strcmp(capture + n - 4, ".bin"))
		n -= 4;
	snprintf(out, cap, "%.*s.log", (int)n, capture);
}

/* Whether capture @path ends with its trailer: for a program whose payload
 * could not say how the capture ended (the program closed the status pipe
 * with every other descriptor, say). */
static int capture_finished(const char *path)
{
	struct mt_capture *c;
	struct mt_record_ops ops;
	if (mt_capture_open(path, &c) < 0)
		return 0;
	mt_record_ops_init(&ops);
	int done = mt_capture_read(c, &ops, NULL) >= 0 && !mt_capture_status(c)->truncated;
	mt_capture_close(c);
	return done;
}

int cmd_run(int argc, char **argv)
{
	enum { OPT_PYALLOC = 256, OPT_INTERVAL, OPT_PYTHON, OPT_FOLLOW_FORK, OPT_LIVE,
	       OPT_LIVE_REMOTE, OPT_LIVE_PORT };
	static const struct option opts[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "force", no_argument, NULL, 'f' },
		{ "trace-python-allocators", no_argument, NULL, OPT_PYALLOC },
		{ "follow-fork", no_argument, NULL, OPT_FOLLOW_FORK },
		{ "live", no_argument, NULL, OPT_LIVE },
		{ "live-remote", no_argument, NULL, OPT_LIVE_REMOTE },
		{ "live-port", required_argument, NULL, OPT_LIVE_PORT },
		{ "memory-interval-ms", required_argument, NULL, OPT_INTERVAL },
		{ "python", required_argument, NULL, OPT_PYTHON },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *kind = "script", *target = NULL;
	const char *output = NULL, *python = "python3";
	unsigned flags = 0;
	long interval = 10;
	int force = 0, live = 0, remote = 0, port_given = 0, c;
	long port = 0;

	/* -m and -c end our options, as they end Python's */
	while (!target && (c = getopt_long(argc, argv, "+o:fhm:c:", opts, NULL)) != -1) {
		switch (c) {
		case 'm':
		case 'c':
			kind = c == 'm' ? "-m" : "-c";
			target = optarg;
			break;
		case 'o':
			output = optarg;
			break;
		case 'f':
			force = 1;
			break;
		case OPT_PYALLOC:
			flags |= MT_HDR_PYALLOC;
			break;
		case OPT_FOLLOW_FORK:
			flags |= MT_HDR_FOLLOW_FORK;
			break;
		case OPT_LIVE:
			live = 1;
			break;
		case OPT_LIVE_REMOTE:
			remote = 1;
			break;
		case OPT_LIVE_PORT: {
			char *end;
			port = strtol(optarg, &end, 10);
			port_given = 1;
			if (*end || !*optarg || port < 0 || port > 65535) {
				mt_error(0, "invalid --live-port '%s' (0..65535)", optarg);
				return 2;
			}
			break;
		}
		case OPT_INTERVAL: {
			char *end;
			interval = strtol(optarg, &end, 10);
			if (*end || interval < 1 || interval > 3600000) {
				mt_error(0, "invalid --memory-interval-ms '%s' (1..3600000)", optarg);
				return 2;
			}
			break;
		}
		case OPT_PYTHON:
			python = optarg;
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		default:
			fputs(usage, stderr);
			return 2;
		}
	}
	if (remote && (live || output || (flags & MT_HDR_FOLLOW_FORK))) {
		mt_error(0, "--live-remote sends the capture to a client: not with %s",
			 live ? "--live" : output ? "-o" : "--follow-fork");
		return 2;
	}
	if (port_given && !remote) {
		mt_error(0, "--live-port goes with --live-remote");
		return 2;
	}
	if (!target && optind >= argc) {
		mt_error(0, "run: no program given");
		fputs(usage, stderr);
		return 2;
	}
	if (!target)
		target = argv[optind++];
	int rest = optind;

	char payload[PATH_MAX], interp[PATH_MAX];
	if (mt_find_payload(payload, sizeof(payload)) < 0 ||
	    find_program(python, interp, sizeof(interp)) < 0)
		return 1;
	/* a script python would refuse gets no capture */
	int bad = !strcmp(kind, "script") ? mt_cli_check_script(target) : 0;
	if (bad)
		return bad;

	/* --live-remote: one client, before the program starts, so that it
	 * sees the capture from its header on. */
	int client = -1;
	char where[64] = "";
	if (remote && (client = mt_cli_live_accept((int)port, where, sizeof(where))) < 0)
		return 1;

	/* The child names and creates the capture (the default name carries
	 * its pid), sets the environment and execs; it reports the capture's
	 * path through a close-on-exec pipe, whose end of file tells us the
	 * exec happened. */
	int report[2], status[2];
	if (pipe2(report, O_CLOEXEC) != 0 || pipe2(status, O_CLOEXEC) != 0)
		return mt_error(-errno, "cannot create pipe"), 1;

	struct sigaction sa = { .sa_sigaction = forward_signal, .sa_flags = SA_SIGINFO }, old[4];
	const int sigs[4] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };
	sigemptyset(&sa.sa_mask);
	for (int i = 0; i < 4; i++)
		sigaction(sigs[i], &sa, &old[i]);

	fflush(stdout);
	fflush(stderr);
	child = fork();
	if (child < 0)
		return mt_error(-errno, "cannot fork"), 1;
	if (child == 0) {
		char capture[PATH_MAX], abs[PATH_MAX], where_to[PATH_MAX + 32];
		char env[PATH_MAX + 96], pre[PATH_MAX * 2];
		for (int i = 0; i < 4; i++)
			sigaction(sigs[i], &old[i], NULL);
		close(report[0]);
		close(status[0]);
		/* the payload's end of the status pipe survives the exec; the
		 * payload marks it close-on-exec again at once */
		int sfd = dup(status[1]);
		if (remote) {
			/* the payload takes the socket ("fd:N") and marks it
			 * close-on-exec again */
			snprintf(capture, sizeof(capture), "the live client on %s", where);
			snprintf(where_to, sizeof(where_to), "fd:%d", dup(client));
		} else {
			if (output)
				snprintf(capture, sizeof(capture), "%s", output);
			else
				default_output(capture, sizeof(capture), kind, target, getpid());
			/* the payload is given the file memtrace made, open
			 * ("fd:N:PATH", the path for messages and follow-fork
			 * names): it never opens the capture by name */
			int cfd = mt_cli_create_capture(capture, force, abs,
							sizeof(abs));
			if (cfd < 0)
				_exit(1);
			snprintf(where_to, sizeof(where_to), "fd:%d:%s", dup(cfd), abs);
			close(cfd);
		}
		if (live) {
			/* the terminal is the view's: the program's output goes to
			 * a file, and its input is empty */
			char log[PATH_MAX + 8];
			log_name(log, sizeof(log), capture);
			int nfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
			if (nfd < 0) {
				mt_error(-errno, "cannot open /dev/null");
				mt_unlink_regular(abs);
				_exit(1);
			}
			int lfd = mt_cli_create_file(log, force, 0600, "log ",
						     NULL, 0);
			if (lfd < 0) {
				mt_unlink_regular(abs);
				_exit(1);
			}
			if (dup2(nfd, 0) < 0 || dup2(lfd, 1) < 0 || dup2(lfd, 2) < 0)
				_exit(1);
		}
		const char *oldpre = getenv("LD_PRELOAD");
		snprintf(env, sizeof(env), "%u:%ld:%d:%s", flags, interval, sfd, where_to);
		if (oldpre && *oldpre)
			snprintf(pre, sizeof(pre), "%s:%s", payload, oldpre);
		else
			snprintf(pre, sizeof(pre), "%s", payload);
		if (setenv("MEMTRACE_RUN", env, 1) != 0 || setenv("LD_PRELOAD", pre, 1) != 0)
			_exit(1);
		char **av = calloc((size_t)(argc - rest) + 4, sizeof(char *));
		if (!av)
			_exit(1);
		int n = 0;
		av[n++] = (char *)python;
		if (strcmp(kind, "script") != 0)
			av[n++] = (char *)kind;
		av[n++] = (char *)target;
		for (int i = rest; i < argc; i++)
			av[n++] = argv[i];
		av[n] = NULL;
		if (write(report[1], capture, strlen(capture) + 1) < 0)
			_exit(1);
		execv(interp, av);
		int e = errno;
		if (!remote)
			mt_unlink_regular(abs);
		(void)!write(report[1], "", 1); /* a second NUL: exec failed */
		mt_error(-e, "cannot execute '%s'", interp);
		_exit(1);
	}
	close(report[1]);
	close(status[1]);
	if (client >= 0)
		close(client); /* the program's now */

	char capture[PATH_MAX + 2];
	ssize_t got = 0, r;
	while (got < (ssize_t)sizeof(capture) - 1 &&
	       ((r = read(report[0], capture + got, sizeof(capture) - 1 - (size_t)got)) > 0 ||
		(r < 0 && errno == EINTR)))
		got += r > 0 ? r : 0;
	close(report[0]);
	capture[got] = '\0';
	int started = got > 0 && (size_t)got == strlen(capture) + 1;

	char log[PATH_MAX + 8];
	log_name(log, sizeof(log), capture);
	if (started && live) {
		struct mt_live_opts lo = { .path = capture, .interval = 1.0, .writer = child };
		struct sigaction tstp, winch;
		sigaction(SIGTSTP, NULL, &tstp);
		sigaction(SIGWINCH, NULL, &winch);
		mt_cli_live(&lo);
		/* the view's signal handlers out, ours back in */
		for (int i = 0; i < 4; i++)
			sigaction(sigs[i], &sa, NULL);
		sigaction(SIGTSTP, &tstp, NULL);
		sigaction(SIGWINCH, &winch, NULL);
		/* a signal that ended the view was meant for the program too,
		 * as without --live, unless it got it already */
		if (lo.stopped_by && !program_got_it(lo.stopped_by_kernel))
			kill(child, lo.stopped_by);
		siginfo_t si = { 0 };
		if (waitid(P_PID, (id_t)child, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && !si.si_pid)
			mt_warning("the program (pid %d) runs on: waiting for it to end; its output "
				   "goes to %s", (int)child, log);
	}

	int wstatus;
	while (waitpid(child, &wstatus, 0) < 0) {
		if (errno != EINTR)
			return mt_error(-errno, "cannot wait for the program"), 1;
	}
	for (int i = 0; i < 4; i++)
		sigaction(sigs[i], &old[i], NULL);
	if (!started)
		return WIFEXITED(wstatus) && WEXITSTATUS(wstatus) ? WEXITSTATUS(wstatus) : 1;

	/* How the capture ended, as the payload says; nothing when the
	 * process was killed or never started Python. Not waiting for more:
	 * the line was written before the process exited. */
	char said[512];
	fcntl(status[0], F_SETFL, O_NONBLOCK);
	ssize_t k, got_status = 0;
	while (got_status < (ssize_t)sizeof(said) - 1 &&
	       ((k = read(status[0], said + got_status,
			  sizeof(said) - 1 - (size_t)got_status)) > 0 ||
		(k < 0 && errno == EINTR)))
		got_status += k > 0 ? k : 0;
	close(status[0]);
	said[got_status] = '\0';
	said[strcspn(said, "\n")] = '\0';

	int rc = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 0;
	struct stat sb;
	int empty = !remote && stat(capture, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size == 0;
	if (!strncmp(said, "error ", 6)) {
		if (empty) {
			mt_error(0, "%s: no capture written", said + 6);
			mt_unlink_regular(capture);
		} else if (remote) {
			mt_error(0, "capture to %s is incomplete: %s", capture, said + 6);
		} else {
			mt_error(0, "capture '%s' is incomplete: %s", capture, said + 6);
		}
		if (rc == 0)
			rc = 1;
	} else if (!said[0] && empty) {
		mt_error(0, "no Python interpreter started under memtrace: capture '%s' is empty",
			 capture);
		mt_unlink_regular(capture);
	} else if (WIFSIGNALED(wstatus)) {
		say_killed(WTERMSIG(wstatus), said, capture, remote);
	} else if (remote) {
		if (!strncmp(said, "ok dropped ", 11))
			fprintf(stderr, "memtrace: capture sent to %s; %s events were dropped, as it "
					"did not take them fast enough\n", capture, said + 11);
		else
			fprintf(stderr, "memtrace: capture sent to %s\n", capture);
	} else if (!said[0] && !capture_finished(capture)) {
		mt_error(0, "capture '%s' is incomplete: tracking could not finish it (did the program "
			 "close memtrace's descriptors?)", capture);
		if (rc == 0)
			rc = 1;
	} else {
		mt_cli_say_written("", capture, !strncmp(said, "ok dropped ", 11) ? said + 11 : NULL);
	}
	if (live)
		fprintf(stderr, "memtrace: the program's output is in %s\n", log);
	if (WIFSIGNALED(wstatus)) {
		/* Die the same way, so that shells and supervisors see it. */
		int sig = WTERMSIG(wstatus);
		signal(sig, SIG_DFL);
		fflush(stdout);
		kill(getpid(), sig);
		return 128 + sig;
	}
	return rc;
}
