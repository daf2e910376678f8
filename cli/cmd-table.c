/* SPDX-License-Identifier: MIT */
/* memtrace table: an HTML page of memory by location, thread, allocator. */
#include "cli/cmd.h"
#include "reader/report.h"
#include "util/error.h"

#include <getopt.h> /* getopt_long */
#include <stdio.h>  /* stdout */

static const char usage[] =
	"usage: memtrace table [-o OUT.html] [-f] [--leaks | --temporary-allocations\n"
	"                      [--temporary-allocation-threshold N]] CAPTURE\n"
	"\n"
	"  -o, --output OUT     the page to write (default memtrace-table-<capture\n"
	"                       name>.html beside the capture; - for standard output)\n"
	"  -f, --force          overwrite OUT if it exists\n"
	"  --leaks              memory still live at the end, not at the peak\n"
	"  --temporary-allocations\n"
	"                       allocations freed soon after by the thread that made them\n"
	"  --temporary-allocation-threshold N\n"
	"                       ... with fewer than N of its allocations in between (default 1)\n";

static void warn_line(void *ctx, const char *msg)
{
	(void)ctx;
	mt_warning("%s", msg);
}

int cmd_table(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "force", no_argument, NULL, 'f' },
		{ "leaks", no_argument, NULL, 'L' },
		{ "temporary-allocations", no_argument, NULL, 'T' },
		{ "temporary-allocation-threshold", required_argument, NULL, 'N' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct mt_report_opts o = { .view = MT_VIEW_PEAK, .temp_threshold = 1 };
	const char *output = NULL;
	char msg[600], defout[4096];
	int c, err, force = 0, views = 0, threshold_given = 0;
	struct mt_snapshot s;

	optind = 1;
	while ((c = getopt_long(argc, argv, "o:fh", opts, NULL)) != -1) {
		switch (c) {
		case 'o':
			output = optarg;
			break;
		case 'f':
			force = 1;
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		case 'L':
		case 'T':
			views++;
			/* fall through */
		case 'N':
			threshold_given |= c == 'N';
			if (mt_cli_view_option(c, optarg, &o, "table"))
				return 2;
			break;
		default:
			fputs(usage, stderr);
			return 2;
		}
	}
	if (argc - optind != 1) {
		fputs(usage, stderr);
		return 2;
	}
	if (views > 1 || (threshold_given && o.view != MT_VIEW_TEMPORARY)) {
		mt_error(0, "table: %s", views > 1 ? "--leaks and --temporary-allocations exclude each other"
						   : "--temporary-allocation-threshold goes with --temporary-allocations");
		return 2;
	}
	o.path = argv[optind];
	if (!output) {
		mt_cli_default_output(defout, sizeof(defout), "table", o.path);
		output = defout;
	}
	err = mt_report_load(&s, &o, warn_line, NULL, msg, sizeof(msg));
	if (err < 0) {
		mt_error(0, "%s", msg);
		return 1;
	}
	FILE *f = mt_cli_open_output(output, force, "table");
	if (!f) {
		mt_snapshot_release(&s);
		return 1;
	}
	err = mt_report_table(f, &s, &o);
	mt_snapshot_release(&s);
	return mt_cli_close_output(f, output, err, "table");
}
