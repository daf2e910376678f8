/* SPDX-License-Identifier: MIT */
/* memtrace summary: memory per location at the peak (or at the end). */
#include "cli/cmd.h"
#include "reader/report.h"
#include "util/error.h"

#include <getopt.h> /* getopt_long */
#include <stdio.h>  /* stdout */
#include <stdlib.h> /* strtoul */

static const char usage[] =
	"usage: memtrace summary [-n N] [--leaks | --temporary-allocations\n"
	"                        [--temporary-allocation-threshold N]] [--json] CAPTURE\n"
	"\n"
	"  -n, --top N   rows to show (default 25, or all with --json; 0 = all)\n"
	"  --leaks       memory still live at the end of the capture, not at the peak\n"
	"  --temporary-allocations\n"
	"                allocations freed soon after by the thread that made them\n"
	"  --temporary-allocation-threshold N\n"
	"                ... with fewer than N of its allocations in between (default 1)\n"
	"  --json        one JSON object on standard output\n";

static void warn_line(void *ctx, const char *msg)
{
	(void)ctx;
	mt_warning("%s", msg);
}

int cmd_summary(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "top", required_argument, NULL, 'n' },
		{ "leaks", no_argument, NULL, 'L' },
		{ "temporary-allocations", no_argument, NULL, 'T' },
		{ "temporary-allocation-threshold", required_argument, NULL, 'N' },
		{ "json", no_argument, NULL, 'J' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct mt_report_opts o = { .top_n = 25, .view = MT_VIEW_PEAK, .temp_threshold = 1 };
	struct mt_snapshot s;
	char msg[512], *end;
	int c, err, top_given = 0, views = 0, threshold_given = 0;

	optind = 1;
	while ((c = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
		switch (c) {
		case 'n':
			o.top_n = (unsigned)strtoul(optarg, &end, 10);
			top_given = 1;
			if (*end || !*optarg) {
				mt_error(0, "summary: -n wants a number, not '%s'", optarg);
				return 2;
			}
			break;
		case 'L':
		case 'T':
			views++;
			/* fall through */
		case 'N':
			threshold_given |= c == 'N';
			if (mt_cli_view_option(c, optarg, &o, "summary"))
				return 2;
			break;
		case 'J':
			o.json = 1;
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
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
		mt_error(0, "summary: %s", views > 1 ? "--leaks and --temporary-allocations exclude each other"
						     : "--temporary-allocation-threshold goes with --temporary-allocations");
		return 2;
	}
	if (o.json && !top_given)
		o.top_n = 0;
	o.path = argv[optind];
	err = mt_report_load(&s, &o, warn_line, NULL, msg, sizeof(msg));
	if (err < 0) {
		mt_error(0, "%s", msg);
		return 1;
	}
	err = mt_report_summary(stdout, &s, &o);
	mt_snapshot_release(&s);
	if (err < 0) {
		mt_error(err, "summary: cannot write the report");
		return 1;
	}
	return 0;
}
