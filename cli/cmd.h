/* SPDX-License-Identifier: MIT */
#ifndef MT_CLI_CMD_H
#define MT_CLI_CMD_H
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

/* mt_self_dir() - directory of the running memtrace executable, for
 * finding the payload and Python package of an installed or built tree.
 * Returns a static string, or NULL. (cli/memtrace.c) */
const char *mt_self_dir(void);

#endif /* MT_CLI_CMD_H */
