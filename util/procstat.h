/* SPDX-License-Identifier: MIT */
#ifndef MT_UTIL_PROCSTAT_H
#define MT_UTIL_PROCSTAT_H
/*
 * A process's /proc/PID/stat, the fields memtrace reads (CLI, payload).
 * The command name may hold anything, spaces and parentheses included:
 * the fields are read after its last ')'. No allocation.
 */
#include <sys/types.h> /* pid_t */

struct mt_procstat {
	char state;               /* R, S, D, Z, X, T, t, ... */
	long threads;             /* num_threads */
	unsigned long long start; /* starttime, in clock ticks after boot */
};

/* mt_procstat_read() - the stat of @pid (0: this process). 0, or -1 if
 * it could not be read (gone, no /proc). */
int mt_procstat_read(pid_t pid, struct mt_procstat *st);

/* mt_procstat_running() - 1 if @pid is still the process it was: its stat
 * reads, it is not a zombie nor dead (Z, X), and, unless @start is 0, it
 * started at @start (a reused pid is another process); else 0. */
int mt_procstat_running(pid_t pid, unsigned long long start);

#endif /* MT_UTIL_PROCSTAT_H */
