/* SPDX-License-Identifier: MIT */
/*
 * memtrace detach: ask the payload of an attached process, over its
 * control socket, to stop tracking and finish the capture. No ptrace.
 */
#include "cli/cmd.h"
#include "inject/inject.h"
#include "payload/memtrace-payload.h"
#include "util/error.h"

#include <errno.h>  /* ECONNREFUSED */
#include <fcntl.h>  /* open */
#include <getopt.h> /* getopt_long */
#include <stdio.h>  /* fputs, sscanf, snprintf */
#include <stdlib.h> /* strtol */
#include <string.h> /* strncmp */
#include <unistd.h> /* read */

static const char usage[] = "usage: memtrace detach PID\n";

/* The payload flushes and closes the capture before it answers. */
#define STOP_TIMEOUT_MS 60000

void mt_cli_control_error(int rc, int pid)
{
	if (rc == MT_CONTROL_OTHER_NETNS)
		mt_error(0, "pid %d is in another network namespace, where its control socket "
			 "lives: only root (CAP_SYS_ADMIN) can reach it", pid);
	else if (rc == -EPERM)
		mt_error(0, "the control socket of pid %d is not served by pid %d", pid, pid);
	else if (rc == -ESRCH)
		mt_error(0, "pid %d has exited", pid);
	else if (rc == -ETIMEDOUT)
		mt_error(0, "pid %d did not answer on its control socket in time", pid);
	else
		mt_error(rc, "cannot talk to the payload in pid %d", pid);
}

/* The state letter of /proc/@pid/stat (R, S, T, Z...), or 0. */
static char process_state(int pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	const char *p = strrchr(buf, ')'); /* the name may hold anything */
	return p && p[1] == ' ' ? p[2] : 0;
}

int mt_detach_pid(int pid, int nspid)
{
	char reply[MEMTRACE_PATH_MAX + 64];
	char state = process_state(pid);
	if (state == 'Z' || state == 'X') {
		mt_error(0, "pid %d has exited", pid);
		return 1;
	}
	if (state == 'T' || state == 't') {
		/* its payload could not finish the capture: say so at once */
		mt_error(0, "pid %d is stopped; resume it first (kill -CONT %d), then detach",
			 pid, pid);
		return 1;
	}
	int rc = mt_control_request(pid, nspid, "detach\n", reply, sizeof(reply), STOP_TIMEOUT_MS);

	/* a payload mapped by an older memtrace knows only "stop" */
	if (rc >= 0 && !strcmp(reply, "error unknown request"))
		rc = mt_control_request(pid, nspid, "stop\n", reply, sizeof(reply), STOP_TIMEOUT_MS);

	if (rc == -ECONNREFUSED) {
		mt_error(0, "pid %d is not attached", pid);
		return 1;
	}
	if (rc < 0) {
		mt_cli_control_error(rc, pid);
		return 1;
	}
	/* "ok detached DROPPED PATH", or an older payload's "ok stopped PATH" */
	char lead[64], dropped[24] = "0";
	int at = 0;
	if (!strncmp(reply, "ok stopped ", 11))
		at = 11;
	else if (sscanf(reply, "ok detached %20[0-9] %n", dropped, &at) != 1)
		at = 0;
	if (at > 0) {
		snprintf(lead, sizeof(lead), "detached from pid %d, ", pid);
		mt_cli_say_written(lead, reply + at, dropped);
		return 0;
	}
	if (!strcmp(reply, "ok cancelled")) {
		fprintf(stderr, "memtrace: pid %d was still starting to track: the start is "
				"cancelled\n", pid);
		return 0;
	}
	if (!strcmp(reply, "error not attached")) {
		mt_error(0, "pid %d is not attached", pid);
		return 1;
	}
	if (!strcmp(reply, "error stopping")) {
		mt_error(0, "pid %d is being detached by another memtrace", pid);
		return 1;
	}
	mt_error(0, "pid %d: detach failed: %s", pid,
		 strncmp(reply, "error ", 6) ? reply : reply + 6);
	return 1;
}

int cmd_detach(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (c == 'h') {
			fputs(usage, stdout);
			return 0;
		}
		fputs(usage, stderr);
		return 2;
	}
	if (optind + 1 != argc) {
		fputs(usage, stderr);
		return 2;
	}
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
	return mt_detach_pid((int)pid, (int)nspid);
}
