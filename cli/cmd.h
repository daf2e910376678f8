/* SPDX-License-Identifier: MIT */
#ifndef MT_CLI_CMD_H
#define MT_CLI_CMD_H
#include <stddef.h> /* size_t */
/*
 * Subcommands. To add one: write cli/cmd-<name>.c with
 * int cmd_<name>(int argc, char **argv) (argv[0] is the command name; parse
 * with getopt_long; return 0, 1 for a failure, 2 for a usage error), declare
 * it here, add it to commands[] in cli/memtrace.c and to cli/meson.build.
 */

struct mt_cmd {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
};

int cmd_run(int argc, char **argv);      /* cli/cmd-run.c */
int cmd_stats(int argc, char **argv);    /* cli/cmd-stats.c */
int cmd_summary(int argc, char **argv);  /* cli/cmd-summary.c */
int cmd_parse(int argc, char **argv);    /* cli/cmd-parse.c */
int cmd_attach(int argc, char **argv);   /* cli/cmd-attach.c */
int cmd_detach(int argc, char **argv);   /* cli/cmd-detach.c */
int cmd_flamegraph(int argc, char **argv); /* cli/cmd-flamegraph.c */
int cmd_table(int argc, char **argv);    /* cli/cmd-table.c */
int cmd_tree(int argc, char **argv);     /* cli/cmd-tree.c */

/* Shared by the report commands (cli/cmd-flamegraph.c). */
#include <stdio.h> /* FILE */
struct mt_report_opts;
/* "DIR/memtrace-<kind>-<capture stem>.html", beside the capture */
void mt_cli_default_output(char *buf, size_t len, const char *kind, const char *capture);
/* @path for writing ("-": stdout); refuses an existing file unless
 * @force. NULL after printing why. */
FILE *mt_cli_open_output(const char *path, int force, const char *cmd);
/* close, report "wrote PATH (size)" or the error (removing the file);
 * returns the exit status */
int mt_cli_close_output(FILE *f, const char *path, int err, const char *cmd);
/* --leaks ('L'), --temporary-allocations ('T'),
 * --temporary-allocation-threshold ('N'): 0, 2 after a usage error, -1
 * for another option */
int mt_cli_view_option(int c, const char *arg, struct mt_report_opts *o, const char *cmd);

/* mt_self_dir() - directory of the running memtrace executable, for
 * finding the payload and Python package of an installed or built tree.
 * Returns a static string, or NULL. (cli/memtrace.c) */
const char *mt_self_dir(void);

/* mt_find_payload() - absolute path of this memtrace's payload .so:
 * MEMTRACE_PAYLOAD, else installed beside the executable, else the build
 * tree. Returns 0 or a negative error (printed). (cli/payload-path.c) */
int mt_find_payload(char *out, size_t cap);

/* mt_detach_pid() - ask the payload in @nspid (pid @pid here) to stop and
 * report the capture. Returns 0, or 1 after printing why. (cli/cmd-detach.c) */
int mt_detach_pid(int pid, int nspid);

#endif /* MT_CLI_CMD_H */
