/* SPDX-License-Identifier: MIT */
/*
 * memtrace detach: ask the payload of an attached process, over its
 * control socket, to stop tracking and finish the capture. No ptrace.
 */
#include "cli/cmd.h"
#include "format/ctlproto.h"
#include "inject/inject.h"
#include "payload/memtrace-payload.h"
#include "util/error.h"

#include <errno.h>  /* ECONNREFUSED */
#include <getopt.h> /* getopt_long */
#include <stdio.h>  /* fputs, snprintf */
#include <stdlib.h> /* strtol */
#include <string.h> /* strrchr */
#include <sys/stat.h> /* stat */
#include <time.h>     /* nanosleep */
#include <unistd.h> /* geteuid */

static const char usage[] =
	"usage: memtrace detach [--method M] [-v] PID\n"
	"\n"
	"  --method M     memray's (auto, ptrace, gdb or lldb): taken and checked, but\n"
	"                 detach needs none, it asks the payload over its control socket\n"
	"  -v, --verbose  say what is done\n";

/* The payload flushes and closes the capture before it answers. */
#define STOP_TIMEOUT_MS 60000

/* Whether @pid runs as another user than we do (its uid into @uid). */
static int other_user(int pid, uid_t *uid)
{
	char path[32];
	struct stat sb;
	snprintf(path, sizeof(path), "/proc/%d", pid);
	if (stat(path, &sb) != 0 || sb.st_uid == geteuid())
		return 0;
	*uid = sb.st_uid;
	return 1;
}

void mt_cli_control_error(int rc, int pid)
{
	uid_t uid;
	if (rc == MT_CONTROL_OTHER_NETNS)
		mt_error(0, "pid %d is in another network namespace, where its control socket "
			 "lives: only root (CAP_SYS_ADMIN) can reach it", pid);
	else if (rc == -EPERM)
		mt_error(0, "the control socket of pid %d is not served by pid %d", pid, pid);
	else if (rc == -ESRCH)
		mt_error(0, "pid %d has exited", pid);
	else if (rc == MT_CONTROL_STOPPED)
		mt_error(0, "pid %d is stopped; resume it first (kill -CONT %d), then try again",
			 pid, pid);
	else if (rc == MT_CONTROL_STOPPED_ASKED)
		mt_error(0, "pid %d was stopped before it answered (kill -CONT %d resumes it)", pid,
			 pid);
	else if (rc == -ETIMEDOUT)
		mt_error(0, "pid %d did not answer on its control socket in time", pid);
	else if (rc == -EACCES && other_user(pid, &uid))
		mt_error(0, "cannot reach the control socket of pid %d: it runs as uid %u and we "
			 "as uid %u (run memtrace as that user or as root)", pid, (unsigned)uid,
			 (unsigned)geteuid());
	else
		mt_error(rc, "cannot talk to the payload in pid %d", pid);
}

/* Whether @pid ends within a second (gone, or a zombie): a payload that
 * dropped the connection unanswered was in its process's exit. */
static int exiting(int pid)
{
	for (int i = 0; i < 100; i++) {
		if (mt_inject_gone(pid))
			return 1;
		struct timespec ts = { 0, 10 * 1000000L };
		nanosleep(&ts, NULL);
	}
	return 0;
}

int mt_detach_pid(int pid, int nspid)
{
	static const struct mt_ctl_request detach = { .kind = MT_CTL_DETACH };
	static const struct mt_ctl_request stop = { .kind = MT_CTL_STOP };
	char line[MEMTRACE_PATH_MAX + 64];
	struct mt_ctl_reply reply;
	char state = mt_inject_state(pid);
	if (state == 'Z' || state == 'X') {
		mt_error(0, "pid %d has exited", pid);
		return 1;
	}
	if (state == 'T') {
		/* its payload could not finish the capture: say so at once (a
		 * tracer's stop, 't', may be strace's for a system call: the
		 * wait for the answer tells one that lasts) */
		mt_error(0, "pid %d is stopped; resume it first (kill -CONT %d), then detach",
			 pid, pid);
		return 1;
	}
	int rc = mt_control_ask(pid, nspid, &detach, -1, line, sizeof(line), &reply,
				STOP_TIMEOUT_MS);

	/* a payload mapped by an older memtrace knows only "stop" */
	if (rc >= 0 && reply.kind == MT_CTL_ERR_UNKNOWN_REQUEST)
		rc = mt_control_ask(pid, nspid, &stop, -1, line, sizeof(line), &reply,
				    STOP_TIMEOUT_MS);

	if (rc == -ECONNREFUSED) {
		mt_error(0, "pid %d is not attached", pid);
		return 1;
	}
	if (rc == MT_CONTROL_STOPPED_ASKED) {
		mt_error(0, "pid %d was stopped before it answered; it detaches, and finishes its "
			 "capture, once resumed (kill -CONT %d)", pid, pid);
		return 1;
	}
	if ((rc == -ECONNRESET || rc == -EPIPE) && exiting(pid)) {
		mt_error(0, "pid %d exited while it was being detached", pid);
		return 1;
	}
	if (rc < 0) {
		mt_cli_control_error(rc, pid);
		return 1;
	}
	/* "ok detached DROPPED PATH", or an older payload's "ok stopped PATH" */
	if (reply.kind == MT_CTL_OK_DETACHED || reply.kind == MT_CTL_OK_STOPPED) {
		char lead[64], dropped[24];
		snprintf(lead, sizeof(lead), "detached from pid %d, ", pid);
		snprintf(dropped, sizeof(dropped), "%llu", (unsigned long long)reply.dropped);
		mt_cli_say_written(lead, reply.text, dropped);
		return 0;
	}
	if (reply.kind == MT_CTL_OK_CANCELLED) {
		fprintf(stderr, "memtrace: pid %d was still starting to track: the start is "
				"cancelled\n", pid);
		return 0;
	}
	if (reply.kind == MT_CTL_ERR_NOT_ATTACHED) {
		mt_error(0, "pid %d is not attached", pid);
		return 1;
	}
	if (reply.kind == MT_CTL_ERR_STOPPING) {
		mt_error(0, "pid %d is being detached by another memtrace", pid);
		return 1;
	}
	mt_error(0, "pid %d: detach failed: %s", pid, reply.message ? reply.message : line);
	return 1;
}

int cmd_detach(int argc, char **argv)
{
	enum { OPT_METHOD = 256 };
	static const struct option opts[] = {
		{ "method", required_argument, NULL, OPT_METHOD },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	enum mt_inject_method method = MT_METHOD_AUTO; /* checked, not needed */
	int c, verbose = 0;
	while ((c = getopt_long(argc, argv, "vh", opts, NULL)) != -1) {
		switch (c) {
		case OPT_METHOD:
			if (mt_cli_method_option(optarg, &method))
				return 2;
			break;
		case 'v':
			verbose = 1;
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		default:
			return mt_cli_option_error("detach", argv, "vh", opts);
		}
	}
	if (optind + 1 != argc)
		return mt_cli_usage_error("detach", optind >= argc ? "no pid given" : "one pid only");
	char *end;
	long pid = strtol(argv[optind], &end, 10);
	if (*end || end == argv[optind] || pid <= 0 || pid > 0x3fffffff) {
		mt_error(0, "invalid pid '%s'", argv[optind]);
		return 2;
	}
	pid_t nspid = mt_inject_nspid((pid_t)pid);
	if (nspid < 0) {
		mt_error(0, "no process with pid %ld", pid);
		return 1;
	}
	if (mt_inject_not_a_process((pid_t)pid) < 0)
		return 1;
	if (verbose)
		fprintf(stderr, "memtrace: asking the payload of pid %ld to stop over its control "
				"socket\n", pid);
	return mt_detach_pid((int)pid, (int)nspid);
}
