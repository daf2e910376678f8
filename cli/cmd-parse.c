/* SPDX-License-Identifier: MIT */
/* memtrace parse: every record of a capture as one line of text. */
#include "cli/cmd.h"
#include "reader/report.h"
#include "util/error.h"

#include <limits.h>   /* PATH_MAX */
#include <stdio.h>    /* stdout */
#include <sys/stat.h> /* fstat */
#include <unistd.h>   /* STDOUT_FILENO */

static const char usage[] =
	"usage: memtrace parse [-q] CAPTURE\n"
	"\n"
	"  -q, --quiet   no progress line (shown on a terminal when the records go\n"
	"                to a file and reading takes more than a second)\n";

struct parse_ctx {
	struct mt_capture *cap;
	struct mt_cli_progress p;
};

/* truncation is a warning; corruption is the error printed at the end */
static void warn_line(void *ctx, const char *msg)
{
	struct parse_ctx *pc = ctx;

	if (!mt_capture_status(pc->cap)->stopped) {
		mt_cli_progress_clear(&pc->p);
		mt_warning("%s", msg);
	}
}

/* Is standard output a file? Then the records do not show how far the
 * read has got, and a progress line does not come between them. */
static int to_file(void)
{
	struct stat sb;

	return fstat(STDOUT_FILENO, &sb) == 0 && S_ISREG(sb.st_mode);
}

int cmd_parse(int argc, char **argv)
{
	static const struct mt_report_cmd cmd = { .name = "parse", .usage = usage };
	struct mt_report_args a = { 0 };
	struct parse_ctx pc;
	struct mt_capture *cap;
	char msg[PATH_MAX + 1024]; /* a message quotes the capture's path */
	int err = mt_cli_report_args(argc, argv, &cmd, &a);

	if (err >= 0)
		return err;
	err = mt_capture_open(a.o.path, &cap);
	if (err < 0) {
		mt_error(0, "%s", mt_report_describe_open_error(msg, sizeof(msg), a.o.path, err));
		return 1;
	}
	pc.cap = cap;
	mt_cli_progress_start(&pc.p, a.o.path, NULL, a.quiet || !to_file());
	mt_capture_set_warn(cap, warn_line, &pc);
	mt_capture_set_progress(cap, mt_cli_progress_tell, &pc.p);
	err = mt_report_parse(stdout, cap);
	mt_cli_progress_end(&pc.p);
	if (err < 0) {
		mt_capture_close(cap);
		if (!ferror(stdout)) /* else main() says so, with the reason */
			mt_error(err, "parse: cannot write the records");
		return 1;
	}
	if (mt_capture_damage(cap)) {
		fflush(stdout);
		mt_error(0, "cannot read '%s': %s", a.o.path, mt_capture_damage(cap));
		mt_capture_close(cap);
		return 1;
	}
	mt_capture_close(cap);
	return 0;
}
