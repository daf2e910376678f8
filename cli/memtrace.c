/* SPDX-License-Identifier: MIT */
/*
 * memtrace: the command table and dispatch. Commands live in cli/cmd-*.c;
 * the real work is in payload/, inject/ and reader/.
 */
#include "cli/cmd.h"
#include "mt-config.h"
#include "util/error.h"
#include "util/fd.h"

#include <errno.h>  /* errno */
#include <getopt.h> /* opterr */
#include <limits.h> /* PATH_MAX */
#include <malloc.h> /* mallopt */
#include <stdio.h>  /* printf */
#include <string.h> /* strcmp */
#include <unistd.h> /* readlink */

static const struct mt_cmd commands[] = {
	{ "run", cmd_run, "run a Python program with memory tracking" },
	{ "attach", cmd_attach, "start tracking a running Python process" },
	{ "detach", cmd_detach, "stop tracking an attached process" },
	{ "stats", cmd_stats, "totals, size histogram, top locations, peaks" },
	{ "summary", cmd_summary, "per-location memory at the peak" },
	{ "flamegraph", cmd_flamegraph, "an HTML flame graph of memory at the peak, leaks or temporaries" },
	{ "table", cmd_table, "an HTML table of memory by location, thread and allocator" },
	{ "tree", cmd_tree, "the biggest allocating call paths as a tree" },
	{ "diff", cmd_diff, "what changed between two captures, by location, and a page of it" },
	{ "transform", cmd_transform, "a view of a capture as csv, or JSON for gprof2dot or speedscope" },
	{ "growth", cmd_growth, "the stacks whose live bytes rose across the run, steadiest first" },
	{ "live", cmd_live, "follow a capture as it is written: what holds memory now" },
	{ "parse", cmd_parse, "every record of a capture as a line of text" },
};

static const struct mt_cmd *find_command(const char *name)
{
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	return NULL;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: memtrace <command> [options] [args]\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\nmemtrace <command> --help shows the options of a command; memtrace --version\n"
		   "(-V) shows memtrace's version.\n");
}

const char *mt_self_dir(void)
{
	static char dir[PATH_MAX];
	if (dir[0])
		return dir;
	ssize_t n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);
	if (n <= 0)
		return NULL;
	dir[n] = '\0';
	char *slash = strrchr(dir, '/');
	if (!slash)
		return NULL;
	*slash = '\0';
	return dir;
}

int main(int argc, char **argv)
{
	/* A standard descriptor memtrace was started without is held by
	 * /dev/null, close-on-exec, for good: nothing memtrace opens takes its
	 * number (a report's output would take stdout's, and the capture
	 * memtrace run hands the program its stderr), and the program it runs
	 * finds it closed, as it would without memtrace. */
	(void)mt_fd_hold();
	/* A report's big arrays (by stack id, by node) double as a capture
	 * is read: from 1 MiB each is a mapping of its own, which realloc
	 * grows with mremap, without a copy. glibc's threshold would
	 * otherwise rise to 32 MiB as big blocks are freed, and those below
	 * it be copied at every doubling. */
	mallopt(M_MMAP_THRESHOLD, 1 << 20);
	/* memray's -v/--verbose before the command, repeated or not (-vv):
	 * attach's and detach's own -v; the other commands say nothing more
	 * with it */
	size_t verbose = 0;
	while (argc > 1 && (!strcmp(argv[1], "--verbose") ||
			    (argv[1][0] == '-' && argv[1][1] == 'v' &&
			     strspn(argv[1] + 1, "v") == strlen(argv[1] + 1)))) {
		verbose += argv[1][1] == '-' ? 1 : strlen(argv[1] + 1);
		argv++;
		argc--;
	}
	if (argc < 2) {
		mt_error(0, "no command given (see memtrace --help)");
		return 2;
	}
	const struct mt_cmd *cmd = find_command(argv[1]);
	int rc;
	/* a command says what is wrong with an option itself, in one line
	 * with its name (mt_cli_option_error()) */
	opterr = 0;
	/* what is written here is checked below too: a help or version
	 * that did not reach a full disk is a failure as a report is */
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		usage(stdout);
		rc = 0;
	} else if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
		printf("memtrace %s\n", MT_VERSION);
		rc = 0;
	} else if (!cmd) {
		mt_error(0, "unknown command '%s' (see memtrace --help)", argv[1]);
		return 2;
	} else if (verbose && (cmd->fn == cmd_attach || cmd->fn == cmd_detach)) {
		/* the -v before the command (at argv[0] now) goes after it,
		 * as many times as it was given (attach says more with two) */
		argv[0] = argv[1];
		argv[1] = verbose > 1 ? "-vv" : "-v";
		rc = cmd->fn(argc, argv);
	} else {
		rc = cmd->fn(argc - 1, argv + 1);
	}
	/* A report cut short by a full disk or closed pipe is a failure. */
	if (fflush(stdout) != 0 || ferror(stdout)) {
		if (errno != EPIPE)
			mt_error(-errno, "write failure on standard output");
		return rc ? rc : 1;
	}
	return rc;
}
