/* SPDX-License-Identifier: MIT */
#ifndef MT_CLI_CMD_H
#define MT_CLI_CMD_H

#include <sys/types.h> /* uid_t */
#include <stddef.h> /* size_t */
#include <stdint.h> /* int64_t, uint64_t */
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
int cmd_live(int argc, char **argv);     /* cli/cmd-live.c */
int cmd_growth(int argc, char **argv);   /* cli/cmd-growth.c */
int cmd_diff(int argc, char **argv);     /* cli/cmd-diff.c */
int cmd_transform(int argc, char **argv); /* cli/cmd-transform.c */

/*
 * Usage errors (cli/options.c): one line on standard error, "memtrace:
 * CMD: what is wrong (see memtrace CMD --help)"; only --help prints the
 * usage. Each returns 2, the exit status of a usage error. The commands
 * parse with opterr 0 (set in main()): getopt_long() prints nothing.
 */
/* mt_cli_usage_error() - @fmt says what is wrong. */
int mt_cli_usage_error(const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* mt_cli_operands_error() - "CMD: wants @wants (@given given; see ...)":
 * too few or too many operands. */
int mt_cli_operands_error(const char *cmd, const char *wants, int given);
/* mt_cli_option_error() - what made getopt_long(@argv, @short_opts,
 * @opts) return '?': an option unknown or ambiguous, or one with a value
 * missing or not taken. */
struct option;
int mt_cli_option_error(const char *cmd, char **argv, const char *short_opts,
			const struct option *opts);
/* mt_cli_path_option() - @arg, the value of option @name, is a path:
 * 0, or 2 after saying, as @cmd, that the @what ("output") path is
 * empty. ("" would be taken for the current directory, or searched for
 * on PATH.) */
int mt_cli_path_option(const char *arg, const char *cmd, const char *name, const char *what);
/* mt_cli_count_option() - @arg, the value of option @name, as a count
 * from @lo to @hi into *@out: digits alone, no sign or space. 0, or 2
 * after saying, as @cmd, that @name wants such a number and not @arg. */
int mt_cli_count_option(const char *arg, unsigned lo, unsigned hi, unsigned *out, const char *cmd,
			const char *name);
/* mt_cli_is_number() - @arg is digits alone (with @dot, and at most one
 * '.' among them): no sign, space, hex or exponent, which strtol() and
 * strtod() would take. For the options whose own message says what they
 * want (--memory-interval-ms, --live-port, --duration, live's --interval). */
int mt_cli_is_number(const char *arg, int dot);

/* mt_cli_method_option() - a --method name (auto, ptrace, gdb, lldb) into
 * *@m: 0, or 2 after saying it is none of them (cli/cmd-attach.c). */
#include "inject/inject.h" /* enum mt_inject_method */
int mt_cli_method_option(const char *s, enum mt_inject_method *m);

/*
 * The report commands (cli/report-args.c). A command names the options it
 * shares with the others and its own; mt_cli_report_args() parses them
 * all, mt_cli_report_write() loads the capture and writes the report.
 */
#include <stdio.h> /* FILE */

#include "reader/report.h"

enum {
	MT_RA_TOP = 1 << 0,         /* -n, --top N */
	MT_RA_VIEWS = 1 << 2,       /* --leaks | --temporary-allocations (with
				     * --temporary-allocation-threshold N) */
	MT_RA_THRESHOLD = 1 << 3,   /* --temporary-allocation-threshold N alone */
	MT_RA_JSON = 1 << 4,        /* --json */
	MT_RA_OUTPUT = 1 << 5,      /* -o, --output OUT and -f, --force: a page
				     * written to OUT, by default beside the
				     * capture as memtrace-<name>-<stem>.html */
	MT_RA_FORMAT = 1 << 6,      /* a FORMAT operand before CAPTURE (a->format) */
	MT_RA_ALL_FRAMES = 1 << 7,  /* MT_RA_VIEWS without --python-only and
				     * --show-hidden-frames: every frame, always */
	MT_RA_OUTPUT_BY_CALLER = 1 << 8, /* MT_RA_OUTPUT without a default: a->output
					  * stays NULL unless -o was given */
	MT_RA_SORT = 1 << 9,        /* -s, --sort-column N (memray's summary: 1 to 5) */
	MT_RA_MAX_POINTS = 1 << 10, /* --max-memory-records N (memray's flamegraph) */
	MT_RA_SOURCES = 1 << 11,    /* --confidential-files all|none|default (memray's
				     * flamegraph): whose source lines a page leaves out */
};

#define MT_REPORT_OWN_MAX 6

struct option;
struct mt_report_cmd {
	const char *name;  /* in messages and the default output's name */
	const char *usage; /* for --help (stdout) and usage errors (stderr) */
	unsigned args;     /* MT_RA_* */
	/* the command's own long options (at most MT_REPORT_OWN_MAX, ended
	 * by an empty one), listed after the shared ones: flags that
	 * getopt_long sets itself; NULL for none */
	const struct option *own;
	/* memray's names for -n, or NULL and 0: summary's -r/--max-rows,
	 * tree's -b/--biggest-allocs, stats' --num-largest (no short name) */
	const char *top_alias;
	char top_alias_short;
	/* what MT_RA_OUTPUT writes, in messages ("csv file"); NULL: "<name> page" */
	const char *output_what;
	/* the report (MT_RA_OUTPUT: to the page, else to standard output) */
	int (*write)(FILE *out, const struct mt_snapshot *s, const struct mt_report_opts *o);
};

struct mt_report_args {
	struct mt_report_opts o; /* defaults in, options out; o.path: the capture */
	const char *output;      /* MT_RA_OUTPUT: the page to write */
	const char *format;      /* MT_RA_FORMAT: the FORMAT operand */
	int force;               /* -f */
	int top_given;           /* -n was given */
	int quiet;               /* -q: no progress line */
	char defout[4096];       /* room for the default output's name */
};

/* mt_cli_report_args() - parse @argv (argv[0] the command name) as @c
 * declares into @a, whose o holds the defaults. Returns -1 to go on, or
 * the exit status: 0 after --help, 2 after a usage error (printed). */
int mt_cli_report_args(int argc, char **argv, const struct mt_report_cmd *c,
		       struct mt_report_args *a);
/* mt_cli_report_write() - load a->o.path and write @c's report; prints
 * what failed. Returns the exit status. */
int mt_cli_report_write(const struct mt_report_cmd *c, const struct mt_report_args *a);

/* mt_cli_page_name() - "DIR/memtrace-<kind>-<stem>.html" beside
 * @capture, the default name of a page. */
void mt_cli_page_name(char *buf, size_t len, const char *kind, const char *capture);
/* mt_cli_output_name() - the same with @suffix (".csv") for ".html". */
void mt_cli_output_name(char *buf, size_t len, const char *kind, const char *capture,
			const char *suffix);
/* mt_cli_open_page() - @path for writing ("-": standard output), a new
 * file (mt_cli_create_file()) replacing one only with @force; NULL after
 * printing why. mt_cli_close_page() - close it, say "wrote PATH (size)"
 * on standard output, or print the error @err (or closing's) and remove
 * the file; returns the exit status. @cmd names the command. */
FILE *mt_cli_open_page(const char *path, int force, const char *cmd);
/* mt_cli_open_output() - mt_cli_open_page() with @what ("csv file") naming
 * the file in messages. */
FILE *mt_cli_open_output(const char *path, int force, const char *what, const char *cmd);
int mt_cli_close_page(FILE *f, const char *path, int err, const char *cmd);
/*
 * The progress line of a report's read of its capture (cli/progress.c):
 * on standard error when it is a terminal and not @quiet, once the read
 * has taken a second (MEMTRACE_PROGRESS_AFTER seconds instead: for tests),
 * "memtrace: reading PATH: 1.20 GiB of 3.40 GiB (35%), about 9 s left",
 * rewritten in place as the reader tells it how far it has got. When the
 * read ends, the line says @next ("making the report") until the caller
 * ends it, or goes with @next NULL. Nothing else may be printed on the
 * terminal while it is there: clear it first.
 */
struct mt_cli_progress {
	const char *path;  /* the capture, as named */
	const char *next;  /* what follows the read, or NULL */
	int on;            /* may be shown */
	int ended;         /* the read has ended */
	int64_t start_ms;  /* mt_now_ms() at the start */
	int64_t after_ms;  /* shown from this long after it */
	size_t shown;      /* bytes of the line on the terminal; 0: none */
	char line[256];    /* the last line shown, "" for none */
};
/* mt_cli_progress_start() - the read of @path starts now. */
void mt_cli_progress_start(struct mt_cli_progress *p, const char *path, const char *next,
			   int quiet);
/* mt_cli_progress_tell() - the reader's progress callback
 * (mt_capture_set_progress(), mt_report_opts.progress), @ctx the struct
 * mt_cli_progress. */
void mt_cli_progress_tell(void *ctx, uint64_t done, uint64_t total);
/* mt_cli_progress_clear() - erase the line, if it is shown, to print
 * something else; the next tell, or mt_cli_progress_resume(), shows it
 * again. */
void mt_cli_progress_clear(struct mt_cli_progress *p);
void mt_cli_progress_resume(struct mt_cli_progress *p);
/* mt_cli_progress_end() - erase the line, for good. */
void mt_cli_progress_end(struct mt_cli_progress *p);

/* The order of the live view's rows. */
enum mt_live_sort {
	MT_LIVE_SORT_OWN,    /* the most memory of their own live first */
	MT_LIVE_SORT_GROWTH, /* the most growth since the view started first */
	MT_LIVE_SORT_STEADY, /* the steadiest and biggest rise across the capture
			      * so far first (reader/growth.h) */
	MT_LIVE_SORT_TOTAL,  /* the most memory live in what they called too first */
	MT_LIVE_SORT_BLOCKS, /* the most blocks of their own live first */
};

/* mt_cli_live() - the live view of capture @path until tracking ends or
 * the user quits; prints what failed. Returns the exit status.
 * (cli/cmd-live.c) */
struct mt_live_opts {
	const char *path;
	double interval;  /* seconds between refreshes */
	unsigned top_n;   /* rows, if top_given */
	int top_given;
	int sort;         /* enum mt_live_sort */
	int once;         /* one frame */
	pid_t writer;     /* the process writing the capture, if ours (run --live):
			   * no header to wait for once it has ended */
	int stopped_by;   /* out: the signal that ended the view, or 0 */
	int stopped_by_kernel; /* out: that signal was the kernel's (a terminal's
				* to its foreground process group, say) */
	int cut_short;    /* out: the writer went away without finishing the capture */
	int output_gone;  /* out: the view could not be written (a closed pipe) */
};
int mt_cli_live(struct mt_live_opts *lo);
/* mt_cli_live_accept() - listen on 127.0.0.1:@port (0: any free port),
 * say where on standard error (into @where too) and wait for one client.
 * Returns its connection, or -1 after printing why. (cli/cmd-live.c) */
int mt_cli_live_accept(int port, char *where, size_t len);

/* mt_self_dir() - directory of the running memtrace executable, for
 * finding the payload and Python package of an installed or built tree.
 * Returns a static string, or NULL. (cli/memtrace.c) */
const char *mt_self_dir(void);

/* mt_find_payload() - absolute path of this memtrace's payload .so:
 * MEMTRACE_PAYLOAD, else installed beside the executable (<libdir>/memtrace),
 * else the build tree, else a wheel's (the memtrace package in
 * ../lib/python3.X/site-packages). Returns 0 or a negative error
 * (printed). (cli/payload-path.c) */
int mt_find_payload(char *out, size_t cap);

/* mt_detach_pid() - ask the payload in @nspid (pid @pid here) to stop and
 * report the capture. Returns 0, or 1 after printing why. (cli/cmd-detach.c) */
int mt_detach_pid(int pid, int nspid);

/* mt_cli_control_error() - one line saying why the control socket of
 * @pid could not be used (@rc from mt_control_ask()).
 * (cli/cmd-detach.c) */
void mt_cli_control_error(int rc, int pid);

/* mt_cli_say_written() - "memtrace: <lead>capture written to <path>", and
 * how many events were dropped when @dropped is not NULL nor "0", on
 * standard error: the last word of run, attach --duration and detach. */
void mt_cli_say_written(const char *lead, const char *path, const char *dropped);

/* mt_cli_create_file() - create @path as a new regular file of @mode and
 * return it open for writing (O_WRONLY | O_CLOEXEC). Never through a
 * symbolic link: a new name is made O_CREAT | O_EXCL | O_NOFOLLOW. An
 * existing name is an error unless @force; with it, a regular file or a
 * symbolic link (not what it points to) is replaced by a new file made
 * under a temporary name in the same directory and renamed over it.
 * Anything else there (FIFO, device, directory, socket) is an error, and
 * is never opened. @what names the file in messages, before its quoted
 * path ("capture ", "log "). With @abs, its absolute path
 * (the directory resolved, then the name made in it) goes there.
 * /dev/null is opened as it is: what is written there is thrown away.
 * Returns the descriptor, or a negative error after printing one line
 * (nothing is left behind). (cli/capture-file.c) */
int mt_cli_create_file(const char *path, int force, mode_t mode, const char *what, char *abs,
		       size_t cap);

/* mt_cli_reads() - @path (a regular file) is read by this command, and
 * mt_cli_create_file() refuses to replace it: "OUT is @what: give it
 * another name" (@what: "the capture read", say). At most two; a static
 * string. Returns 1 if @path is there, 0 if not (the read will say why):
 * an output is checked (mt_cli_check_output()) only after its input is
 * found, as memray does. (cli/capture-file.c) */
int mt_cli_reads(const char *path, const char *what);

/* mt_cli_check_output() - 0 if mt_cli_create_file(@path, @force, ...)
 * may go on, or -errno after saying why not: @path is a file this command
 * reads, exists without @force, or is not a regular file, or it cannot be
 * made (its directory missing, not ours to write, read-only). Said before
 * the reading rather than after it (the create checks again). @what
 * names it, as for mt_cli_create_file(). (cli/capture-file.c) */
int mt_cli_check_output(const char *path, const char *what, int force);

/* mt_cli_std_stream() - 1 or 2 if @path is a symbolic link to what our
 * standard output or error is (/dev/stdout, /dev/fd/2, /proc/self/fd/1),
 * else 0: a report there goes to the stream, and no file is ever made in
 * its place. (cli/capture-file.c) */
int mt_cli_std_stream(const char *path);

/* mt_cli_is_null_device() - @path is /dev/null (or another name of that
 * device): a capture thrown away as it is written, as memray allows.
 * (cli/capture-file.c) */
int mt_cli_is_null_device(const char *path);

/* mt_cli_create_capture() - mt_cli_create_file() for capture @path:
 * 0600, "capture " in messages, its absolute path in @abs; /dev/null is
 * refused as any other device (memtrace run handles it). Returns the
 * descriptor (the caller closes it if it has no use for it), or a
 * negative error after printing one line. (cli/capture-file.c) */
int mt_cli_create_capture(const char *path, int force, char *abs,
			  size_t cap);

/* mt_cli_check_script() - refuse, as python would, a script that cannot
 * be opened, and one python cannot run as a script (an executable, a
 * binary with NUL bytes that is neither a zip archive nor compiled
 * bytecode), before anything is created. Returns 0, or the exit status
 * after printing one line (2). (cli/run-target.c) */
int mt_cli_check_script(const char *script);

#endif /* MT_CLI_CMD_H */
