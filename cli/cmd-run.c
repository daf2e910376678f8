/* SPDX-License-Identifier: MIT */
/*
 * memtrace run: start a Python program with the payload preloaded and
 * wait for it. The program keeps our stdin, stdout and stderr; its exit
 * status (or the signal that killed it) becomes ours.
 */
#include "cli/cmd.h"
#include "cli/spawn.h"
#include "format/runproto.h"
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
#include <stdlib.h>   /* calloc */
#include <string.h>   /* strrchr */
#include <sys/resource.h> /* setrlimit */
#include <sys/stat.h> /* stat */
#include <sys/wait.h> /* WIFSIGNALED */
#include <unistd.h>   /* getpid, dup */

static const char usage[] =
	"usage: memtrace run [-o FILE] [-f] [--native] [--trace-python-allocators] [--follow-fork]\n"
	"                    [--aggregate] [-q]\n"
	"                    [--live | --live-remote [-p/--live-port N]]\n"
	"                    [--memory-interval-ms N] [--python PATH]\n"
	"                    (script.py | -m module | -c code) [args...]\n"
	"\n"
	"  -o, --output FILE            capture file (default memtrace-<script>.<pid>.bin\n"
	"                               beside the script, as memray names it)\n"
	"  -f, --force                  replace the capture file (and with --live its\n"
	"                               .log) if it exists: by a new file\n"
	"      --native                 record each allocation's native (C) stack too\n"
	"      --trace-python-allocators  record every Python object allocation\n"
	"      --aggregate              write per-stack figures (peak, leaks, totals),\n"
	"                               not every event: a far smaller file, every\n"
	"                               second; no temporary allocations or parse\n"
	"      --follow-fork            a child of fork() (without exec) gets a capture\n"
	"                               of its own, FILE.<child's pid>\n"
	"      --live                   show the live view (memtrace live) while the\n"
	"                               program runs; its output goes to FILE with .log\n"
	"                               for .bin\n"
	"      --live-remote            no file: the capture goes to one client of\n"
	"                               `memtrace live PORT`, waited for before the\n"
	"                               program starts (not with -o or --follow-fork)\n"
	"  -p, --live-port N            its port on 127.0.0.1 (default 0: any free one)\n"
	"      --memory-interval-ms N   sample RSS every N ms (default 10)\n"
	"      --compress-on-exit, --no-compress  accepted as memray takes them; they change\n"
	"                               nothing: chunks are compressed as they are written\n"
	"      --buffered-file-io       accepted as memray takes it; it changes nothing:\n"
	"                               the capture is written with write(2), never mapped\n"
	"  -q, --quiet                  say nothing when all went well (errors still)\n"
	"      --python PATH            interpreter to run (default: python3 on PATH, or the\n"
	"                               virtual environment's memtrace is installed in)\n";

/* The options, parsed. */
struct run_opts {
	const char *kind, *target; /* "script", "-m" or "-c", and its name */
	const char *output, *python;
	unsigned flags;
	long interval, port;
	int force, live, remote, port_given, quiet, python_given;
	int null; /* -o /dev/null: the capture is thrown away */
	int rest; /* the program's arguments: argv[rest..] */
};

/* The child's side of the run: what it needs to make the capture and
 * the environment (see prepare_child()). */
struct run_child {
	const struct run_opts *o;
	const char *where; /* --live-remote: the client's address */
	int client;        /* --live-remote: its connection */
	char abs[PATH_MAX];
	char env[PATH_MAX + 96]; /* MEMTRACE_RUN */
};

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

/* The program died of @sig; the payload said @said (end 0: nothing) of
 * the capture at @where: say how it ended and what the capture holds. */
static void say_killed(int sig, const struct mt_run_status *said, const char *where, int remote)
{
	char name[32];
	unsigned long long n = said->end == MT_RUN_OK || said->end == MT_RUN_SIGNAL ?
				       (unsigned long long)said->dropped : 0;
	char more[128] = "";
	if (n)
		snprintf(more, sizeof(more), "; %llu events were dropped, as it could not be "
					     "written fast enough", n);
	signal_name(sig, name, sizeof(name));
	if (said->end == MT_RUN_SIGNAL)
		fprintf(stderr, "memtrace: the program was killed by %s; capture %s %s, complete up "
				"to the signal%s\n",
			name, remote ? "sent to" : "written to", where, more);
	else if (said->end == MT_RUN_OK)
		fprintf(stderr, "memtrace: the program was killed by %s after tracking ended; "
				"capture %s %s%s\n",
			name, remote ? "sent to" : "written to", where, more);
	else
		fprintf(stderr, "memtrace: the program was killed by %s before memtrace could "
				"finish the capture: %s holds what was written up to 250 ms before\n",
			name, where);
}

/* memray's default name, memtrace-<name>.<pid>.bin: beside the script,
 * with the script's whole name (prog.py); in the current directory for
 * a module (its dotted name) or -c ("string") */
static int default_output(char *out, size_t cap, const char *kind, const char *target, pid_t pid)
{
	if (!strcmp(kind, "-c")) {
		snprintf(out, cap, "memtrace-string.%d.bin", (int)pid);
		return 0;
	}
	const char *base = strrchr(target, '/');
	size_t dir = base && !strcmp(kind, "script") ? (size_t)(base - target) + 1 : 0;
	base = base ? base + 1 : target;
	int n = snprintf(out, cap, "%.*smemtrace-%s.%d.bin", (int)dir, target, base, (int)pid);
	if (n < 0 || (size_t)n >= cap) {
		mt_error(0, "the capture's default name beside '%s' is too long: name it with -o",
			 target);
		return -1;
	}
	return 0;
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

/* Returns -1 to go on, or the exit status. */
static int parse_options(int argc, char **argv, struct run_opts *o)
{
	enum { OPT_PYALLOC = 256, OPT_INTERVAL, OPT_PYTHON, OPT_FOLLOW_FORK, OPT_LIVE,
	       OPT_LIVE_REMOTE, OPT_LIVE_PORT, OPT_NATIVE, OPT_AGGREGATE, OPT_COMPRESS };
	static const struct option opts[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "force", no_argument, NULL, 'f' },
		{ "trace-python-allocators", no_argument, NULL, OPT_PYALLOC },
		{ "native", no_argument, NULL, OPT_NATIVE },
		{ "aggregate", no_argument, NULL, OPT_AGGREGATE },
		{ "follow-fork", no_argument, NULL, OPT_FOLLOW_FORK },
		{ "live", no_argument, NULL, OPT_LIVE },
		{ "live-remote", no_argument, NULL, OPT_LIVE_REMOTE },
		{ "live-port", required_argument, NULL, OPT_LIVE_PORT },
		{ "memory-interval-ms", required_argument, NULL, OPT_INTERVAL },
		{ "python", required_argument, NULL, OPT_PYTHON },
		{ "compress-on-exit", no_argument, NULL, OPT_COMPRESS },
		{ "no-compress", no_argument, NULL, OPT_COMPRESS },
		{ "buffered-file-io", no_argument, NULL, OPT_COMPRESS },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	*o = (struct run_opts){ .kind = "script", .python = "python3", .interval = 10 };

	/* -m and -c end our options, as they end Python's */
	static const char short_opts[] = "+o:fhqm:c:p:";
	while (!o->target && (c = getopt_long(argc, argv, short_opts, opts, NULL)) != -1) {
		switch (c) {
		case 'm':
		case 'c':
			/* python would say "No module named", and we then
			 * that a capture of it was written */
			if (c == 'm' && !*optarg) {
				mt_error(0, "run: the module name is empty (-m '')");
				return 2;
			}
			o->kind = c == 'm' ? "-m" : "-c";
			o->target = optarg;
			break;
		case 'o':
			if (mt_cli_path_option(optarg, "run", "-o", "output"))
				return 2;
			o->output = optarg;
			break;
		case 'f':
			o->force = 1;
			break;
		case 'q':
			o->quiet = 1;
			break;
		case OPT_PYALLOC:
			o->flags |= MT_HDR_PYALLOC;
			break;
		case OPT_NATIVE:
			o->flags |= MT_HDR_NATIVE;
			break;
		case OPT_AGGREGATE:
			o->flags |= MT_HDR_AGGREGATED;
			break;
		case OPT_COMPRESS: /* memray's: no compression pass at exit, no mapped file here */
			break;
		case OPT_FOLLOW_FORK:
			o->flags |= MT_HDR_FOLLOW_FORK;
			break;
		case OPT_LIVE:
			o->live = 1;
			break;
		case OPT_LIVE_REMOTE:
			o->remote = 1;
			break;
		case 'p': /* memray's short name */
		case OPT_LIVE_PORT: {
			char *end;
			o->port = strtol(optarg, &end, 10);
			o->port_given = 1;
			if (!mt_cli_is_number(optarg, 0) || *end || o->port > 65535) {
				mt_error(0, "invalid --live-port '%s' (0..65535)", optarg);
				return 2;
			}
			break;
		}
		case OPT_INTERVAL: {
			char *end;
			o->interval = strtol(optarg, &end, 10);
			if (!mt_cli_is_number(optarg, 0) || *end || o->interval < 1 ||
			    o->interval > 3600000) {
				mt_error(0, "invalid --memory-interval-ms '%s' (1..3600000)", optarg);
				return 2;
			}
			break;
		}
		case OPT_PYTHON:
			if (mt_cli_path_option(optarg, "run", "--python", "interpreter"))
				return 2;
			o->python = optarg;
			o->python_given = 1;
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		default:
			return mt_cli_option_error("run", argv, short_opts, opts);
		}
	}
	if (o->remote && (o->live || o->output || (o->flags & MT_HDR_FOLLOW_FORK))) {
		mt_error(0, "--live-remote sends the capture to a client: not with %s",
			 o->live ? "--live" : o->output ? "-o" : "--follow-fork");
		return 2;
	}
	o->null = o->output && mt_cli_is_null_device(o->output);
	if (o->null && o->live) {
		mt_error(0, "--live shows the capture as it is written: not with -o %s", o->output);
		return 2;
	}
	if ((o->flags & MT_HDR_AGGREGATED) && (o->live || o->remote)) {
		mt_error(0, "--aggregate writes figures, not the events a live view shows: not "
			    "with %s", o->live ? "--live" : "--live-remote");
		return 2;
	}
	if (o->port_given && !o->remote) {
		mt_error(0, "--live-port goes with --live-remote");
		return 2;
	}
	if (!o->target && optind >= argc)
		return mt_cli_usage_error("run", "no program given");
	if (!o->target)
		o->target = argv[optind++];
	o->rest = optind;
	return -1;
}

/* python [-m|-c] target args..., or NULL without memory. */
static char **program_argv(const struct run_opts *o, int argc, char **argv)
{
	char **av = calloc((size_t)(argc - o->rest) + 4, sizeof(char *));
	if (!av)
		return NULL;
	int n = 0;
	av[n++] = (char *)o->python;
	if (strcmp(o->kind, "script") != 0)
		av[n++] = (char *)o->kind;
	av[n++] = (char *)o->target;
	for (int i = o->rest; i < argc; i++)
		av[n++] = argv[i];
	av[n] = NULL;
	return av;
}

/* In the child: name and create the capture (the default name carries
 * the child's pid) and, with --live, the log; MEMTRACE_RUN for the
 * payload, given @status_fd. The capture's name (or the client's
 * address) goes to the parent as the note. */
static int prepare_child(void *data, int status_fd, char *capture, size_t cap)
{
	struct run_child *rc = data;
	const struct run_opts *o = rc->o;
	struct mt_run_env env = { .flags = o->flags, .interval_ms = (uint32_t)o->interval,
				  .status_fd = status_fd, .has_fd = 1 };
	if (o->remote) {
		/* the payload takes the socket ("fd:N") and marks it
		 * close-on-exec again */
		snprintf(capture, cap, "the live client on %s", rc->where);
		env.capture_fd = dup(rc->client);
	} else if (o->null) {
		/* written and thrown away, as memray's null sink: no name for
		 * a followed child's capture either (it runs untracked) */
		snprintf(capture, cap, "%s", o->output);
		env.capture_fd = open(o->output, O_WRONLY); /* the program's to inherit */
		if (env.capture_fd < 0) {
			mt_error(-errno, "cannot open '%s'", o->output);
			return -1;
		}
	} else {
		if (o->output)
			snprintf(capture, cap, "%s", o->output);
		else if (default_output(capture, cap, o->kind, o->target, getpid()) < 0)
			return -1;
		/* the payload is given the file memtrace made, open
		 * ("fd:N:PATH", the path for messages and follow-fork
		 * names): it never opens the capture by name */
		int cfd = mt_cli_create_capture(capture, o->force, rc->abs, sizeof(rc->abs));
		if (cfd < 0)
			return -1;
		env.capture_fd = dup(cfd);
		env.path = rc->abs;
		close(cfd);
	}
	if (o->live) {
		/* the terminal is the view's: the program's output goes to
		 * a file, and its input is empty */
		char log[PATH_MAX + 8];
		log_name(log, sizeof(log), capture);
		int nfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (nfd < 0) {
			mt_error(-errno, "cannot open /dev/null");
			mt_unlink_regular(rc->abs);
			return -1;
		}
		int lfd = mt_cli_create_file(log, o->force, 0600, "log ", NULL, 0);
		if (lfd < 0) {
			mt_unlink_regular(rc->abs);
			return -1;
		}
		if (dup2(nfd, 0) < 0 || dup2(lfd, 1) < 0 || dup2(lfd, 2) < 0)
			return -1;
	}
	return mt_run_env_encode(rc->env, sizeof(rc->env), &env) < 0 ? -1 : 0;
}

static void exec_failed(void *data)
{
	struct run_child *rc = data;
	if (!rc->o->remote)
		mt_unlink_regular(rc->abs);
}

/* --live: the view of @capture while the program runs. */
static void run_live(struct mt_spawn *sp, const char *capture, const char *log)
{
	struct mt_live_opts lo = { .path = capture, .interval = 1.0, .writer = sp->pid };
	struct sigaction tstp, winch, pipe_was, ign = { .sa_handler = SIG_IGN };
	sigaction(SIGTSTP, NULL, &tstp);
	sigaction(SIGWINCH, NULL, &winch);
	/* a closed pipe ends the view, not us: we wait for the program */
	sigaction(SIGPIPE, &ign, &pipe_was);
	mt_cli_live(&lo);
	/* the view's signal handlers out, ours back in */
	mt_spawn_rearm(sp);
	sigaction(SIGTSTP, &tstp, NULL);
	sigaction(SIGWINCH, &winch, NULL);
	sigaction(SIGPIPE, &pipe_was, NULL);
	/* a signal that ended the view was meant for the program too,
	 * as without --live, unless it got it already */
	mt_spawn_forward(sp, lo.stopped_by, lo.stopped_by_kernel);
	/* a program the signal ends is given the moment that takes before
	 * it is said to run on */
	if (mt_spawn_running_after(sp, lo.stopped_by ? 1000 : 0))
		mt_warning("the program (pid %d) runs on: waiting for it to end; its output "
			   "goes to %s", (int)sp->pid, log);
}

/* How the capture ended, as the payload says on @fd, read into @line (@cap
 * bytes; said's reason points there): end 0 when it said nothing (the
 * process was killed or never started Python) or what no payload says.
 * Not waiting for more: the line was written before the process exited. */
static void read_status(int fd, char *line, size_t cap, struct mt_run_status *said)
{
	fcntl(fd, F_SETFL, O_NONBLOCK);
	ssize_t k, got = 0;
	while (got < (ssize_t)cap &&
	       ((k = read(fd, line + got, cap - (size_t)got)) > 0 ||
		(k < 0 && errno == EINTR)))
		got += k > 0 ? k : 0;
	close(fd);
	if (mt_run_status_parse(line, (size_t)got, said) < 0)
		*said = (struct mt_run_status){ 0 };
}

/* Say how the run ended; returns the exit status. */
static int report(const struct run_opts *o, int wstatus, const struct mt_run_status *said,
		  const char *capture, const char *log)
{
	int rc = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 0;
	struct stat sb;
	int empty = !o->remote && stat(capture, &sb) == 0 && S_ISREG(sb.st_mode) &&
		    sb.st_size == 0;
	unsigned long long dropped = said->end == MT_RUN_OK ? said->dropped : 0;
	if (said->end == MT_RUN_ERROR) {
		int len = (int)said->reason_len;
		if (empty) {
			mt_error(0, "%.*s: no capture written", len, said->reason);
			mt_unlink_regular(capture);
		} else if (o->remote) {
			mt_error(0, "capture to %s is incomplete: %.*s", capture, len, said->reason);
		} else {
			mt_error(0, "capture '%s' is incomplete: %.*s", capture, len, said->reason);
		}
		if (rc == 0)
			rc = 1;
	} else if (!said->end && empty) {
		mt_error(0, "no Python interpreter started under memtrace: capture '%s' is empty",
			 capture);
		mt_unlink_regular(capture);
		if (rc == 0)
			rc = 1;
	} else if (!said->end && o->null && !WIFSIGNALED(wstatus)) {
		/* no capture to look at, as below: either */
		mt_error(0, "no Python interpreter started under memtrace (or the program closed "
			    "memtrace's descriptors): nothing was captured");
		if (rc == 0)
			rc = 1;
	} else if (WIFSIGNALED(wstatus)) {
		if (!o->quiet) /* the exit status says it */
			say_killed(WTERMSIG(wstatus), said, capture, o->remote);
	} else if (o->remote) {
		if (o->quiet && !dropped)
			; /* all went well: nothing to say */
		else if (dropped)
			fprintf(stderr, "memtrace: capture sent to %s; %llu events were dropped, as "
					"it did not take them fast enough\n", capture, dropped);
		else
			fprintf(stderr, "memtrace: capture sent to %s\n", capture);
	} else if (!said->end && !o->null && !capture_finished(capture)) {
		mt_error(0, "capture '%s' is incomplete: tracking could not finish it (did the program "
			 "close memtrace's descriptors?)", capture);
		if (rc == 0)
			rc = 1;
	} else if (!o->quiet || dropped) {
		char n[24];
		snprintf(n, sizeof(n), "%llu", dropped);
		mt_cli_say_written("", capture, dropped ? n : NULL);
	}
	if (o->live && !o->quiet)
		fprintf(stderr, "memtrace: the program's output is in %s\n", log);
	if (WIFSIGNALED(wstatus)) {
		/* Die the same way, so that shells and supervisors see it;
		 * without a core of ours, which would take the place of the
		 * program's (a core_pattern of "core" names both alike), as
		 * GNU timeout dies */
		int sig = WTERMSIG(wstatus);
		struct rlimit core;
		if (getrlimit(RLIMIT_CORE, &core) == 0) {
			core.rlim_cur = 0;
			setrlimit(RLIMIT_CORE, &core);
		}
		signal(sig, SIG_DFL);
		fflush(stdout);
		kill(getpid(), sig);
		return 128 + sig;
	}
	return rc;
}

/* A memtrace installed in a virtual environment (pip's wheel puts it in
 * its bin/) runs programs with that environment's python3, as memray runs
 * them with its own interpreter, activated or not. */
static int venv_interpreter(char *out, size_t cap)
{
	const char *dir = mt_self_dir();
	char cfg[PATH_MAX];
	if (!dir || snprintf(cfg, sizeof(cfg), "%s/../pyvenv.cfg", dir) >= (int)sizeof(cfg) ||
	    access(cfg, R_OK) != 0)
		return 0;
	int n = snprintf(out, cap, "%s/python3", dir);
	return n > 0 && (size_t)n < cap && access(out, X_OK) == 0;
}

int cmd_run(int argc, char **argv)
{
	struct run_opts o;
	int rc = parse_options(argc, argv, &o);
	if (rc >= 0)
		return rc;

	char payload[PATH_MAX], interp[PATH_MAX], venv_python[PATH_MAX];
	if (mt_find_payload(payload, sizeof(payload)) < 0)
		return 1;
	if (!o.python_given && venv_interpreter(venv_python, sizeof(venv_python)))
		o.python = venv_python;
	if ((rc = mt_spawn_find(o.python, interp, sizeof(interp))) < 0) {
		if (strchr(o.python, '/'))
			mt_error(rc, "cannot run interpreter '%s'", o.python);
		else
			mt_error(rc, "cannot find interpreter '%s' on PATH", o.python);
		return 1;
	}
	/* a script python would refuse gets no capture */
	int bad = !strcmp(o.kind, "script") ? mt_cli_check_script(o.target) : 0;
	if (bad)
		return bad;
	if (!strcmp(o.kind, "script"))
		mt_cli_reads(o.target, "the script to run");

	/* --live-remote: one client, before the program starts, so that it
	 * sees the capture from its header on. */
	struct run_child child = { .o = &o, .client = -1 };
	char where[64] = "";
	child.where = where;
	if (o.remote && (child.client = mt_cli_live_accept((int)o.port, where, sizeof(where))) < 0)
		return 1;

	char **av = program_argv(&o, argc, argv);
	if (!av)
		return mt_error(-ENOMEM, "cannot start the program"), 1;
	char capture[PATH_MAX + 2];
	const struct mt_spawn_var env[] = { { "MEMTRACE_RUN", child.env }, { NULL, NULL } };
	struct mt_spawn sp = { .file = interp, .argv = av, .preload = payload, .env = env,
			       .prepare = prepare_child, .exec_failed = exec_failed,
			       .data = &child, .note = capture, .note_cap = sizeof(capture) };
	if (mt_spawn_start(&sp) < 0)
		return 1;
	free(av);
	if (child.client >= 0)
		close(child.client); /* the program's now */

	char log[PATH_MAX + 8];
	log_name(log, sizeof(log), capture);
	if (sp.started && o.live)
		run_live(&sp, capture, log);

	int wstatus;
	if (mt_spawn_wait(&sp, &wstatus) < 0)
		return 1;
	/* the program has ended: a message of ours that a closed pipe
	 * refuses (`memtrace run prog.py 2>&1 | head`) is lost, and the
	 * exit status stays the program's rather than SIGPIPE's */
	signal(SIGPIPE, SIG_IGN);
	if (!sp.started)
		return WIFEXITED(wstatus) && WEXITSTATUS(wstatus) ? WEXITSTATUS(wstatus) : 1;
	char line[512];
	struct mt_run_status said;
	read_status(sp.pipe_fd, line, sizeof(line), &said);
	return report(&o, wstatus, &said, capture, log);
}
