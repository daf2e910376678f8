/* SPDX-License-Identifier: MIT */
/*
 * /proc/PID/stat (procstat.h).
 */
#include "util/procstat.h"

#include <fcntl.h>  /* open */
#include <stdio.h>  /* snprintf, sscanf */
#include <string.h> /* strrchr */
#include <unistd.h> /* read, close */

int mt_procstat_read(pid_t pid, struct mt_procstat *st)
{
	char path[64], buf[1024];
	if (pid)
		snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	else
		snprintf(path, sizeof(path), "/proc/self/stat");
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	const char *p = strrchr(buf, ')');
	/* ") S ppid pgrp session tty tpgid flags minflt cminflt majflt
	 * cmajflt utime stime cutime cstime priority nice threads
	 * itrealvalue starttime" */
	if (!p || sscanf(p + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d "
				"%*d %ld %*d %llu", &st->state, &st->threads, &st->start) != 3)
		return -1;
	return 0;
}

int mt_procstat_running(pid_t pid, unsigned long long start)
{
	struct mt_procstat ps;
	return mt_procstat_read(pid, &ps) == 0 && ps.state != 'Z' && ps.state != 'X' &&
	       (!start || ps.start == start);
}
