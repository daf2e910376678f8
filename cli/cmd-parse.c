/* SPDX-License-Identifier: MIT */
/* memtrace parse: every record of a capture as one line of text. */
#include "cli/cmd.h"
#include "reader/report.h"
#include "util/error.h"

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
	static const struct mt_report_cmd cmd = { .name = "parse", .usage = usage };
	struct mt_report_args a = { 0 };
	struct mt_capture *cap;
	char msg[512];
	int err = mt_cli_report_args(argc, argv, &cmd, &a);

	if (err >= 0)
		return err;
	err = mt_capture_open(a.o.path, &cap);
	if (err < 0) {
		mt_error(0, "%s", mt_report_describe_open_error(msg, sizeof(msg), a.o.path, err));
		return 1;
	}
	if (mt_capture_header(cap)->flags & MT_HDR_AGGREGATED) {
		mt_error(0, "parse: '%s' is an aggregated capture, which keeps no single "
			    "allocations to list (capture without --aggregate)", a.o.path);
		mt_capture_close(cap);
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
		mt_error(0, "cannot read '%s': %s", a.o.path, mt_capture_damage(cap));
		mt_capture_close(cap);
		return 1;
	}
	mt_capture_close(cap);
	return 0;
}
