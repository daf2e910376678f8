/* SPDX-License-Identifier: MIT */
/* memtrace parse: every record of a capture as one line of text. */
#include "cli/cmd.h"
#include "reader/report.h"
#include "util/error.h"

#include <getopt.h> /* getopt_long */
#include <stdio.h>  /* stdout */

static const char usage[] = "usage: memtrace parse CAPTURE\n";

/* truncation is a warning; corruption is the error printed at the end */
static void warn_line(void *ctx, const char *msg)
{
	if (!mt_capture_status(ctx)->stopped)
		mt_warning("%s", msg);
}

int cmd_parse(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct mt_capture *cap;
	char msg[512];
	int c, err;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (c == 'h') {
			fputs(usage, stdout);
			return 0;
		}
		fputs(usage, stderr);
		return 2;
	}
	if (argc - optind != 1) {
		fputs(usage, stderr);
		return 2;
	}
	err = mt_capture_open(argv[optind], &cap);
	if (err < 0) {
		mt_error(0, "%s", mt_report_describe_open_error(msg, sizeof(msg), argv[optind], err));
		return 1;
	}
	mt_capture_set_warn(cap, warn_line, cap);
	err = mt_report_parse(stdout, cap);
	if (err < 0) {
		mt_capture_close(cap);
		mt_error(err, "parse: cannot write the records");
		return 1;
	}
	if (mt_capture_damage(cap)) {
		fflush(stdout);
		mt_error(0, "cannot read '%s': %s", argv[optind], mt_capture_damage(cap));
		mt_capture_close(cap);
		return 1;
	}
	mt_capture_close(cap);
	return 0;
}
