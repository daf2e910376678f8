/* SPDX-License-Identifier: MIT */
/*
 * memtrace attach: start tracking a running CPython process. If its payload
 * is already loaded (an earlier attach), the control socket starts a new
 * capture; otherwise the injector loads it. Then wait until the payload
 * reports that tracking is active, and with --duration detach later.
 */
#include "cli/cmd.h"
#include "format/ctlproto.h"
#include "format/record.h"
#include "inject/inject.h"
#include "payload/memtrace-payload.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/io.h"
#include "util/procstat.h"

#include <errno.h>       /* errno */
#include <fcntl.h>       /* open */
#include <getopt.h>      /* getopt_long */
#include <limits.h>      /* PATH_MAX */
#include <poll.h>        /* poll */
#include <signal.h>      /* sigaction */
#include <stddef.h>      /* offsetof */
#include <stdio.h>       /* snprintf */
#include <stdlib.h>      /* strtol */
#include <string.h>      /* strcmp */
#include <sys/stat.h>    /* fstat */
#include <sys/socket.h>  /* socket, bind */
#include <sys/syscall.h> /* SYS_pidfd_open */
#include <sys/un.h>      /* sockaddr_un */
#include <sys/wait.h>    /* waitpid */
#include <time.h>        /* nanosleep */
#include <unistd.h>      /* unlink */

static const char usage[] =
	"usage: memtrace attach [-o FILE] [-f] [--duration SECONDS]\n"
	"                       [--method auto|ptrace|gdb|lldb] [--native]\n"
	"                       [--trace-python-allocators] [--aggregate] [--follow-fork]\n"
	"                       [--memory-interval-ms N] [--live] [-v] PID\n"
	"\n"
	"  -o, --output FILE            capture file (default memtrace-<pid>.bin)\n"
	"  -f, --force                  overwrite the capture file if it exists\n"
	"      --duration SECONDS       the process detaches by itself after SECONDS (or\n"
	"                               when it exits); attach returns at once\n"
	"      --live                   show the live view (memtrace live) of the capture,\n"
	"                               and detach when it is quit (q or Ctrl-C)\n"
	"      --method M               how to load the payload: ptrace, gdb, lldb, or auto\n"
	"                               (ptrace, then gdb if no thread reaches a safe point)\n"
	"      --native                 record each allocation's native (C) stack too\n"
	"      --trace-python-allocators  record every Python object allocation\n"
	"      --aggregate              write per-stack figures (peak, leaks, totals),\n"
	"                               not every event (see memtrace run --help)\n"
	"      --follow-fork            a child of fork() (without exec) from now on gets\n"
	"                               a capture of its own, FILE.<child pid>\n"
	"      --memory-interval-ms N   sample RSS every N ms (default 10)\n"
	"      --compress-on-exit, --no-compress  accepted as memray takes them; they change\n"
	"                               nothing: chunks are compressed as they are written\n"
	"  -v, --verbose                say what the injector does (twice: more)\n";

/* How long the payload may take from injection to "active": it needs the
 * GIL once, which a thread stuck in C code may hold for a while. */
#define START_TIMEOUT_MS 5000
#define POLL_PAUSE_MS 10

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	interrupted = sig;
}

int mt_cli_method_option(const char *s, enum mt_inject_method *m)
{
	static const char *const names[] = { "auto", "ptrace", "gdb", "lldb" };
	for (int i = 0; i < 4; i++) {
		if (!strcmp(s, names[i])) {
			*m = (enum mt_inject_method)i;
			return 0;
		}
	}
	mt_error(0, "invalid --method '%s' (auto, ptrace, gdb or lldb)", s);
	return 2;
}

/* Our capture, for what must only touch the file we made. */
struct capture {
	char path[PATH_MAX]; /* absolute */
	int fd;              /* open on it, handed to the payload */
};

/* Removes the capture if the path still names the file we made: it was
 * made new for this attach, and what did not start leaves nothing. */
static void drop_capture(const struct capture *c)
{
	struct stat ours, now;
	if (c->fd >= 0 && fstat(c->fd, &ours) == 0 && lstat(c->path, &now) == 0 &&
	    ours.st_dev == now.st_dev && ours.st_ino == now.st_ino)
		unlink(c->path);
}

/* Gives up a start: a stop is what undoes it, whether the payload's start
 * has opened the capture or still waits (it is then cancelled when it
 * returns). The payload answers without the GIL. Returns 0 once it is
 * undone, or the error that kept the stop from being delivered. */
static int cancel_start(const struct mt_target *t)
{
	static const struct mt_ctl_request stop = { .kind = MT_CTL_STOP };
	char line[MEMTRACE_PATH_MAX + 64];
	struct mt_ctl_reply r;
	int rc = mt_control_ask(t->pid, t->nspid, &stop, -1, line, sizeof(line), &r, 2000);
	/* a stop of a capture that runs is answered once it is finished; it
	 * goes on if we stop waiting, or once a process stopped meanwhile is
	 * resumed */
	if (rc == -ETIMEDOUT || rc == MT_CONTROL_STOPPED_ASKED)
		return 0;
	return rc < 0 ? rc : mt_ctl_reply_is_ok(r.kind) || r.kind == MT_CTL_ERR_NOT_ATTACHED ? 0 : -EIO;
}

/* Waits until the payload says "ok active". Polling is the only way to
 * watch another process's state here; each poll is one connection, and
 * the payload answers at once. */
static int wait_active(const struct mt_target *t, char *line, size_t cap)
{
	static const struct mt_ctl_request status = { .kind = MT_CTL_STATUS };
	struct mt_ctl_reply reply;
	int64_t deadline = mt_now_ms() + START_TIMEOUT_MS;
	const char *last = "no answer on the control socket";
	char lastbuf[256];
	struct sigaction sa = { .sa_handler = on_signal }, old_int, old_term;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	int rc = -1;

	for (;;) {
		int64_t left = deadline - mt_now_ms();
		int r = mt_control_ask(t->pid, t->nspid, &status, -1, line, cap, &reply,
				       left < 1000 ? (left > 50 ? (int)left : 50) : 1000);
		if (r == 0) {
			if (reply.kind == MT_CTL_OK_ACTIVE) {
				rc = 0;
				break;
			}
			if (reply.message) {
				mt_error(0, "pid %d could not start tracking: %s", (int)t->pid,
					 reply.message);
				break;
			}
			if (reply.kind == MT_CTL_OK_IDLE || reply.kind == MT_CTL_OK_CANCELLING) {
				mt_error(0, "pid %d: the start was cancelled by another memtrace",
					 (int)t->pid);
				break;
			}
			snprintf(lastbuf, sizeof(lastbuf), "%.200s", line);
			last = reply.kind == MT_CTL_OK_STARTING ? "its start waits for the GIL" : lastbuf;
		} else if (r == MT_CONTROL_STOPPED || r == MT_CONTROL_STOPPED_ASKED) {
			last = "it is stopped (resume it with kill -CONT)";
			struct timespec ts = { 0, 100 * 1000000L }; /* asked again when resumed */
			nanosleep(&ts, NULL);
		} else if (r != -ECONNREFUSED) {
			snprintf(lastbuf, sizeof(lastbuf), "%s", strerror(-r));
			last = lastbuf;
		}
		if (kill(t->pid, 0) != 0 && errno == ESRCH) {
			mt_error(0, "pid %d exited while attaching", (int)t->pid);
			break;
		}
		if (interrupted || mt_now_ms() >= deadline) {
			int c = cancel_start(t);
			char why[384];
			if (interrupted)
				snprintf(why, sizeof(why), "interrupted");
			else
				snprintf(why, sizeof(why), "did not start tracking within %d s (%s)",
					 START_TIMEOUT_MS / 1000, last);
			if (c == 0)
				mt_error(0, "pid %d %s; the start is cancelled%s", (int)t->pid, why,
					 interrupted ? ""
						     : ": is a thread holding the GIL in C code?");
			else
				mt_error(0, "pid %d %s, and cannot be told to give up (%s): run "
					 "memtrace detach %d", (int)t->pid, why,
					 c == MT_CONTROL_STOPPED ? "it is stopped" : strerror(-c),
					 (int)t->pid);
			break;
		}
		struct timespec ts = { 0, POLL_PAUSE_MS * 1000000L };
		nanosleep(&ts, NULL);
	}
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	return rc;
}

/* Sleeps until @seconds pass, the target exits, or we get SIGINT/SIGTERM.
 * Returns 1 if the target exited. */
static int wait_duration(pid_t pid, double seconds)
{
	int fd = (int)syscall(SYS_pidfd_open, pid, 0);
	int64_t deadline = mt_now_ms() + (int64_t)(seconds * 1000);
	struct sigaction sa = { .sa_handler = on_signal };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	int exited = 0;
	while (!interrupted) {
		int64_t left = deadline - mt_now_ms();
		if (left <= 0)
			break;
		if (fd >= 0) {
			struct pollfd p = { .fd = fd, .events = POLLIN };
			if (poll(&p, 1, left > 1000 ? 1000 : (int)left) > 0) {
				exited = 1;
				break;
			}
		} else {
			struct timespec ts = { 0, 100 * 1000000L };
			nanosleep(&ts, NULL);
			if (kill(pid, 0) != 0 && errno == ESRCH) {
				exited = 1;
				break;
			}
		}
	}
	if (fd >= 0)
		close(fd);
	return exited;
}

/* The ptrace injector runs in a child of its own session: while it holds
 * a thread of the target in the middle of a call, the target must not be
 * left to it (the thread would run on into the call's trap and die of
 * SIGTRAP). A terminal's signals do not reach that child, and if this
 * process is killed it still puts the thread back. */
static int inject_ptrace_apart(const struct mt_target *t, const char *there, const char *here,
			       const struct memtrace_config *cfg, int verbose)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) != 0)
		return mt_error(-errno, "cannot create a pipe");
	fflush(stderr);
	pid_t child = fork();
	if (child < 0) {
		close(p[0]);
		close(p[1]);
		return mt_error(-errno, "cannot fork");
	}
	if (child == 0) {
		close(p[0]);
		setsid();
		signal(SIGPIPE, SIG_IGN); /* a parent gone is seen in write()'s error */
		int rc = mt_inject_ptrace(t, there, here, cfg, verbose);
		/* the payload only listens until asked to start: nothing to
		 * undo if we are gone */
		(void)!write(p[1], &rc, sizeof(rc));
		_exit(0);
	}
	close(p[1]);
	int rc = 0;
	ssize_t got;
	while ((got = read(p[0], &rc, sizeof(rc))) < 0 && errno == EINTR)
		;
	close(p[0]);
	while (waitpid(child, NULL, 0) < 0 && errno == EINTR)
		;
	if (got != (ssize_t)sizeof(rc))
		return mt_error(-EIO, "the injector for pid %d ended without a result", (int)t->pid);
	return rc;
}

static int inject(const struct mt_target *t, enum mt_inject_method method,
		  const struct memtrace_config *cfg, int verbose)
{
	char payload[PATH_MAX], there[PATH_MAX], here[PATH_MAX + 64];
	if (mt_find_payload(payload, sizeof(payload)) < 0)
		return -1;
	if (mt_inject_visible_path(t, payload, there, sizeof(there)) < 0)
		return -1;
	if (strcmp(there, payload) != 0) {
		snprintf(here, sizeof(here), "/proc/%d/root%s", (int)t->pid, there);
		if (verbose)
			mt_warning("pid %d is in another mount namespace: payload copied to %s",
				   (int)t->pid, there);
	} else {
		snprintf(here, sizeof(here), "%s", payload);
	}
	int rc = MT_INJECT_NO_SAFE_POINT;
	if (method == MT_METHOD_AUTO || method == MT_METHOD_PTRACE) {
		rc = inject_ptrace_apart(t, there, here, cfg, verbose);
		if (rc == MT_INJECT_NO_SAFE_POINT && method == MT_METHOD_PTRACE) {
			mt_error(0, "no thread of pid %d reached a safe point (in a signal handler, "
				 "the loader or the allocator); try --method gdb",
				 (int)t->pid);
			return -1;
		}
		if (rc == MT_INJECT_NO_SAFE_POINT && verbose)
			mt_warning("no thread of pid %d reached a safe point; trying gdb", (int)t->pid);
	}
	if (rc == MT_INJECT_NO_SAFE_POINT) {
		rc = mt_inject_debugger(t, method == MT_METHOD_LLDB ? MT_METHOD_LLDB : MT_METHOD_GDB,
					there, payload, cfg, verbose);
		if (rc == MT_INJECT_NO_SAFE_POINT && method == MT_METHOD_AUTO)
			mt_error(0, "no thread of pid %d reached a safe point (by ptrace nor by gdb): "
				 "each was in a signal handler, the loader, the allocator, or a call "
				 "that cannot be interrupted safely (input() reading a terminal, say), "
				 "and the main thread ran no Python code",
				 (int)t->pid);
		else if (rc == MT_INJECT_NO_SAFE_POINT)
			mt_error(0, "the main thread of pid %d ran no Python code within %s's time "
				 "(blocked in a call such as time.sleep(), input() or a lock), which "
				 "%s needs; the default method does not",
				 (int)t->pid, method == MT_METHOD_LLDB ? "lldb" : "gdb",
				 method == MT_METHOD_LLDB ? "lldb" : "gdb");
	}
	return rc;
}

/* One attach at a time per process: an abstract socket named after it
 * (pid and start time), bound and listening while the attach runs, and
 * gone with us. Without it, of two attaches at once, the one whose ptrace
 * failed could not always tell why: the other may have let go of the
 * process by the time it looked. Anyone may bind such a name, so a holder
 * counts only if it is of our user, root, or the target's (those who may
 * trace it). The process's start time into *@start (0 if unknown).
 * Returns the socket, -1 (printed) if another memtrace holds it, or -2 if
 * no lock could be had (none then: the payload's status says the rest). */
static int attach_lock(pid_t pid, unsigned long long *start)
{
	struct mt_procstat ps;
	char proc[32];
	struct stat pst;
	*start = 0;
	snprintf(proc, sizeof(proc), "/proc/%d", (int)pid);
	if (mt_procstat_read(pid, &ps) < 0 || stat(proc, &pst) != 0)
		return -2;
	*start = ps.start;
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int len = snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, "memtrace-attach.%d.%llu",
			   (int)pid, ps.start);
	socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len);
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -2;
	if (bind(s, (struct sockaddr *)&a, alen) == 0 && listen(s, 64) == 0)
		return s;
	int e = errno;
	close(s);
	/* never waits: a holder whose queue is full (no one accepts) is a
	 * holder we cannot tell about */
	if (e != EADDRINUSE || (s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
					   0)) < 0)
		return -2;
	struct ucred peer;
	socklen_t plen = sizeof(peer);
	int held = connect(s, (struct sockaddr *)&a, alen) == 0 &&
		   getsockopt(s, SOL_SOCKET, SO_PEERCRED, &peer, &plen) == 0 &&
		   (peer.uid == geteuid() || peer.uid == 0 || peer.uid == pst.st_uid);
	close(s);
	if (!held)
		return -2;
	mt_error(0, "pid %d is being attached by another memtrace", (int)pid);
	return -1;
}

/* Whether @uid (of group @gid) may @bit (S_IWOTH, S_IXOTH: the "other"
 * bit, shifted for owner and group) in @path, by its mode bits alone. */
static int may(const char *path, uid_t uid, gid_t gid, mode_t bit)
{
	struct stat sb;
	if (stat(path, &sb) != 0)
		return 0;
	if (sb.st_uid == uid)
		return (sb.st_mode & (bit << 6)) != 0;
	if (sb.st_gid == gid)
		return (sb.st_mode & (bit << 3)) != 0;
	return (sb.st_mode & bit) != 0;
}

/* Whether the target's user may create files beside @path: search every
 * directory above it and write in its own, as the mode bits say (not
 * supplementary groups nor ACLs). */
static int may_create_beside(const struct mt_target *t, const char *path)
{
	char dir[PATH_MAX];
	char proc[32];
	struct stat pst;
	snprintf(proc, sizeof(proc), "/proc/%d", (int)t->pid);
	/* files are made with the effective ids, which /proc/PID is owned by */
	int known = stat(proc, &pst) == 0;
	uid_t uid = known ? pst.st_uid : t->uid;
	gid_t gid = known ? pst.st_gid : t->gid;
	if (uid == 0 || path[0] != '/' || strlen(path) >= sizeof(dir))
		return 1;
	strcpy(dir, path);
	*strrchr(dir, '/') = '\0';
	if (!dir[0])
		strcpy(dir, "/");
	if (!may(dir, uid, gid, S_IWOTH) || !may(dir, uid, gid, S_IXOTH))
		return 0;
	for (char *slash = strrchr(dir, '/'); slash; slash = strrchr(dir, '/')) {
		*slash = '\0';
		if (!may(dir[0] ? dir : "/", uid, gid, S_IXOTH))
			return 0;
		if (!dir[0])
			break;
	}
	return 1;
}

/* --live: the view of @capture until it is quit (q, Ctrl-C, a closed
 * pipe) or tracking ends; then a detach, if tracking still runs in the
 * process that started at @start. */
static int live_then_detach(const struct mt_target *t, const char *capture,
			    unsigned long long start)
{
	static const struct mt_ctl_request status = { .kind = MT_CTL_STATUS };
	static const int stops[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };
	static char line[MEMTRACE_PATH_MAX + 64];
	struct mt_live_opts lo = { .path = capture, .interval = 1.0 };
	struct sigaction ign = { .sa_handler = SIG_IGN }, dfl = { .sa_handler = SIG_DFL };
	struct sigaction pipe_was;
	struct mt_ctl_reply reply;
	int rc;

	sigaction(SIGPIPE, &ign, &pipe_was); /* a closed pipe ends the view, not us */
	int view = mt_cli_live(&lo);
	sigaction(SIGPIPE, &pipe_was, NULL);
	/* the view's handlers out: a second Ctrl-C while detaching ends us */
	for (size_t i = 0; i < sizeof(stops) / sizeof(stops[0]); i++)
		sigaction(stops[i], &dfl, NULL);
	if (mt_control_ask(t->pid, t->nspid, &status, -1, line, sizeof(line), &reply, 2000) == 0) {
		/* not active: detached meanwhile, by another memtrace */
		rc = reply.kind == MT_CTL_OK_ACTIVE ? mt_detach_pid((int)t->pid, (int)t->nspid) : 0;
	} else if (mt_procstat_running(t->pid, start)) {
		rc = mt_detach_pid((int)t->pid, (int)t->nspid); /* it says what is wrong */
	} else if (lo.cut_short) {
		mt_error(0, "pid %d ended without finishing the capture (killed?): %s is cut short",
			 (int)t->pid, capture);
		rc = 1;
	} else {
		char lead[64];
		snprintf(lead, sizeof(lead), "pid %d exited, ", (int)t->pid);
		mt_cli_say_written(lead, capture, NULL);
		rc = 0;
	}
	if (!rc && view)
		rc = view;
	if (!rc && (lo.stopped_by == SIGTERM || lo.stopped_by == SIGHUP))
		rc = 128 + lo.stopped_by;
	return rc;
}

/* mt_error_override()'s while the target is attached to: whatever fails
 * once it has exited (its /proc gone, its socket reset) is its exit's,
 * said once. */
static const char *target_gone(void *ctx)
{
	static char msg[64];
	pid_t pid = *(const pid_t *)ctx;
	if (msg[0])
		return "";
	if (mt_procstat_running(pid, 0))
		return NULL;
	snprintf(msg, sizeof(msg), "pid %d exited while attaching", (int)pid);
	return msg;
}

int cmd_attach(int argc, char **argv)
{
	enum { OPT_PYALLOC = 256, OPT_INTERVAL, OPT_DURATION, OPT_METHOD, OPT_NATIVE,
	       OPT_AGGREGATE, OPT_COMPRESS, OPT_FOLLOW_FORK, OPT_LIVE };
	static const struct option opts[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "force", no_argument, NULL, 'f' },
		{ "duration", required_argument, NULL, OPT_DURATION },
		{ "method", required_argument, NULL, OPT_METHOD },
		{ "trace-python-allocators", no_argument, NULL, OPT_PYALLOC },
		{ "native", no_argument, NULL, OPT_NATIVE },
		{ "aggregate", no_argument, NULL, OPT_AGGREGATE },
		{ "follow-fork", no_argument, NULL, OPT_FOLLOW_FORK },
		{ "live", no_argument, NULL, OPT_LIVE },
		{ "memory-interval-ms", required_argument, NULL, OPT_INTERVAL },
		{ "compress-on-exit", no_argument, NULL, OPT_COMPRESS },
		{ "no-compress", no_argument, NULL, OPT_COMPRESS },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *output = NULL;
	enum mt_inject_method method = MT_METHOD_AUTO;
	unsigned flags = MT_HDR_ATTACHED;
	long interval = 10;
	double duration = -1;
	int force = 0, verbose = 0, live = 0, c;
	char *end;

	while ((c = getopt_long(argc, argv, "o:fvh", opts, NULL)) != -1) {
		switch (c) {
		case 'o':
			if (mt_cli_path_option(optarg, "attach", "-o", "output"))
				return 2;
			output = optarg;
			break;
		case 'f':
			force = 1;
			break;
		case 'v':
			verbose++;
			break;
		case OPT_PYALLOC:
			flags |= MT_HDR_PYALLOC;
			break;
		case OPT_NATIVE:
			flags |= MT_HDR_NATIVE;
			break;
		case OPT_AGGREGATE:
			flags |= MT_HDR_AGGREGATED;
			break;
		case OPT_FOLLOW_FORK:
			flags |= MT_HDR_FOLLOW_FORK;
			break;
		case OPT_LIVE:
			live = 1;
			break;
		case OPT_COMPRESS: /* memray's: no compression pass at exit here */
			break;
		case OPT_INTERVAL:
			interval = strtol(optarg, &end, 10);
			if (!mt_cli_is_number(optarg, 0) || *end || interval < 1 ||
			    interval > 3600000) {
				mt_error(0, "invalid --memory-interval-ms '%s' (1..3600000)", optarg);
				return 2;
			}
			break;
		case OPT_DURATION:
			duration = strtod(optarg, &end);
			if (!mt_cli_is_number(optarg, 1) || *end || duration > 1e7) {
				mt_error(0, "invalid --duration '%s' (seconds)", optarg);
				return 2;
			}
			break;
		case OPT_METHOD:
			if (mt_cli_method_option(optarg, &method))
				return 2;
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		default:
			return mt_cli_option_error("attach", argv, "o:fvh", opts);
		}
	}
	if (live && (duration >= 0 || (flags & MT_HDR_AGGREGATED))) {
		mt_error(0, "--live shows the capture until it is quit: not with %s",
			 duration >= 0 ? "--duration" : "--aggregate (figures, not events)");
		return 2;
	}
	if (optind + 1 != argc)
		return mt_cli_usage_error("attach", optind >= argc ? "no pid given" : "one pid only");
	long lpid = strtol(argv[optind], &end, 10);
	if (*end || end == argv[optind] || lpid <= 0 || lpid > 0x3fffffff) {
		mt_error(0, "invalid pid '%s'", argv[optind]);
		return 2;
	}

	unsigned long long started;
	int lock = attach_lock((pid_t)lpid, &started);
	if (lock == -1)
		return 1;
	struct mt_target t;
	if (mt_inject_inspect((pid_t)lpid, &t) < 0)
		return 1;
	static pid_t gone_pid;
	gone_pid = t.pid;
	mt_error_override(target_gone, &gone_pid);
	/* a child's capture is made by the child, at a path of its own view */
	if ((flags & MT_HDR_FOLLOW_FORK) && (t.other_mntns || t.other_root)) {
		mt_error(0, "--follow-fork: pid %d sees other files than we do (another mount "
			    "namespace or root), and its children make their captures themselves",
			 (int)t.pid);
		return 1;
	}

	/* A payload already loaded answers on its control socket. */
	static const struct mt_ctl_request status = { .kind = MT_CTL_STATUS };
	static char line[MEMTRACE_PATH_MAX + 64];
	struct mt_ctl_reply reply;
	int loaded = 0;
	int rc = mt_control_ask(t.pid, t.nspid, &status, -1, line, sizeof(line), &reply, 2000);
	if (rc == 0) {
		if (reply.kind == MT_CTL_OK_ACTIVE) {
			mt_error(0, "pid %d is already attached (capture %s); run memtrace detach %d first",
				 (int)t.pid, reply.text, (int)t.pid);
			return 1;
		}
		if (reply.kind == MT_CTL_OK_STARTING || reply.kind == MT_CTL_OK_CANCELLING) {
			mt_error(0, "pid %d is being attached by another memtrace", (int)t.pid);
			return 1;
		}
		if (reply.kind == MT_CTL_OK_STOPPING) {
			mt_error(0, "pid %d is being detached; attach again once that is done",
				 (int)t.pid);
			return 1;
		}
		loaded = 1;
	} else if (rc != -ECONNREFUSED) {
		mt_cli_control_error(rc, (int)t.pid);
		return 1;
	}

	static char capture[PATH_MAX];
	static struct capture cap = { .fd = -1 };
	if (output)
		snprintf(capture, sizeof(capture), "%s", output);
	else
		snprintf(capture, sizeof(capture), "memtrace-%d.bin", (int)t.pid);
	/* made here, by us, as a new file, and handed to the payload open:
	 * any path of ours will do, in whatever namespaces the target lives,
	 * and the target's user gets no say in which file it is */
	cap.fd = mt_cli_create_capture(capture, force, cap.path, sizeof(cap.path));
	if (cap.fd < 0)
		return 1;
	if ((flags & MT_HDR_FOLLOW_FORK) && !may_create_beside(&t, cap.path))
		mt_warning("--follow-fork: pid %d runs as uid %d, which may not create its "
			   "children's captures beside %s", (int)t.pid, (int)t.uid, cap.path);
	if (strlen(cap.path) >= MEMTRACE_PATH_MAX) {
		mt_error(-ENAMETOOLONG, "cannot hand capture '%s' to pid %d", cap.path, (int)t.pid);
		drop_capture(&cap);
		return 1;
	}

	if (!loaded) {
		/* the payload's entry only opens its control socket */
		static struct memtrace_config cfg;
		cfg.size = sizeof(cfg);
		cfg.flags = flags;
		cfg.interval_ms = (uint32_t)interval;
		cfg.fd = -1;
		if (inject(&t, method, &cfg, verbose) != 0) {
			drop_capture(&cap);
			return 1;
		}
	}
	struct mt_ctl_request start = { .kind = MT_CTL_START, .flags = flags,
					.interval_ms = (uint32_t)interval, .path = cap.path };
	rc = mt_control_ask(t.pid, t.nspid, &start, cap.fd, line, sizeof(line), &reply, 5000);
	if (rc == MT_CONTROL_STOPPED_ASKED) {
		/* the payload holds the capture's descriptor: the file stays */
		mt_error(0, "pid %d was stopped before it answered; it starts tracking into %s "
			 "once resumed (kill -CONT %d), until memtrace detach %d", (int)t.pid,
			 cap.path, (int)t.pid, (int)t.pid);
		close(cap.fd);
		return 1;
	}
	if (rc < 0 || !mt_ctl_reply_is_ok(reply.kind)) {
		if (rc < 0)
			mt_cli_control_error(rc, (int)t.pid);
		else if (reply.kind == MT_CTL_ERR_ALREADY_ATTACHED)
			mt_error(0, "pid %d is being attached by another memtrace", (int)t.pid);
		else if (reply.kind == MT_CTL_ERR_BUSY)
			mt_error(0, "pid %d is still finishing an earlier start or stop (waiting for "
				 "the GIL?); try again later", (int)t.pid);
		else
			mt_error(0, "cannot start tracking in pid %d: %s", (int)t.pid,
				 reply.message ? reply.message : line);
		drop_capture(&cap);
		return 1;
	}
	if (wait_active(&t, line, sizeof(line)) < 0) {
		drop_capture(&cap);
		return 1;
	}
	mt_error_override(NULL, NULL); /* attached: errors from here on are their own */
	close(cap.fd);
	if (lock >= 0)
		close(lock); /* attached: another attach now hears so from the payload */
	const char *abs = cap.path;
	fprintf(stderr, "memtrace: tracking pid %d into %s\n", (int)t.pid, abs);
	if (live)
		return live_then_detach(&t, abs, started);
	if (duration < 0)
		return 0;
	/* the payload ends the capture by itself, as memray's attach
	 * --duration does: nothing here waits for it */
	struct mt_ctl_request expire = { .kind = MT_CTL_EXPIRE,
					 .after_ms = (uint64_t)(duration * 1000 + 0.5) };
	rc = mt_control_ask(t.pid, t.nspid, &expire, -1, line, sizeof(line), &reply, 5000);
	if (rc == 0 && reply.kind == MT_CTL_OK_EXPIRING) {
		fprintf(stderr, "memtrace: tracking stops in %g s, or sooner with memtrace detach %d\n",
			duration, (int)t.pid);
		return 0;
	}
	/* a payload from before "expire", loaded by an earlier attach */
	if (wait_duration(t.pid, duration)) {
		char lead[64];
		snprintf(lead, sizeof(lead), "pid %d exited, ", (int)t.pid);
		mt_cli_say_written(lead, abs, NULL);
		return 0;
	}
	return mt_detach_pid((int)t.pid, (int)t.nspid);
}
