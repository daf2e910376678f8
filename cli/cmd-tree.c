/* SPDX-License-Identifier: MIT */
/* memtrace tree: the biggest allocating call paths as an indented tree. */
#include "cli/cmd.h"
#include "reader/report.h"
#include "util/error.h"

#include <getopt.h> /* getopt_long */
#include <stdio.h>  /* stdout */
#include <stdlib.h> /* strtoul */

static const char usage[] =
	"usage: memtrace tree [-n N] [--leaks | --temporary-allocations\n"
	"                     [--temporary-allocation-threshold N]] CAPTURE\n"
	"\n"
	"  -n, --top N          call paths to show, biggest first (default 10, 0 = all)\n"
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

int cmd_tree(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "top", required_argument, NULL, 'n' },
		{ "leaks", no_argument, NULL, 'L' },
		{ "temporary-allocations", no_argument, NULL, 'T' },
		{ "temporary-allocation-threshold", required_argument, NULL, 'N' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct mt_report_opts o = { .top_n = 10, .view = MT_VIEW_PEAK, .temp_threshold = 1 };
	char msg[600], *end;
	int c, err, views = 0, threshold_given = 0;
	struct mt_snapshot s;

	optind = 1;
	while ((c = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
		switch (c) {
		case 'n':
			o.top_n = (unsigned)strtoul(optarg, &end, 10);
			if (*end || !*optarg || optarg[0] == '-') {
				mt_error(0, "tree: -n wants a number, not '%s'", optarg);
				return 2;
			}
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
			if (mt_cli_view_option(c, optarg, &o, "tree"))
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
		mt_error(0, "tree: %s", views > 1 ? "--leaks and --temporary-allocations exclude each other"
						  : "--temporary-allocation-threshold goes with --temporary-allocations");
		return 2;
	}
	o.path = argv[optind];
	err = mt_report_load(&s, &o, warn_line, NULL, msg, sizeof(msg));
	if (err < 0) {
		mt_error(0, "%s", msg);
		return 1;
	}
	err = mt_report_tree(stdout, &s, &o);
	mt_snapshot_release(&s);
	if (err < 0) {
		mt_error(err, "tree: cannot write the report");
		return 1;
	}
	return 0;
}
