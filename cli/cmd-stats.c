/* SPDX-License-Identifier: MIT */
/* memtrace stats: totals, size histogram, allocators, top locations. */
#include "cli/cmd.h"
#include "reader/report.h"
#include "util/error.h"

#include <getopt.h> /* getopt_long */
#include <stdio.h>  /* stdout */
#include <stdlib.h> /* strtoul */

static const char usage[] =
	"usage: memtrace stats [-n N] [--temporary-allocation-threshold N] [--json] CAPTURE\n"
	"\n"
	"  -n, --top N   rows in the top-locations tables (default 5, 0 = all)\n"
	"  --temporary-allocation-threshold N\n"
	"                count as temporary what its thread freed with fewer than N of\n"
	"                its allocations in between (default 1)\n"
	"  --json        one JSON object on standard output\n";

static void warn_line(void *ctx, const char *msg)
{
	(void)ctx;
	mt_warning("%s", msg);
}

int cmd_stats(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "top", required_argument, NULL, 'n' },
		{ "temporary-allocation-threshold", required_argument, NULL, 'N' },
		{ "json", no_argument, NULL, 'J' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct mt_report_opts o = { .top_n = 5, .view = MT_VIEW_ALLOCATED, .temp_threshold = 1 };
	struct mt_snapshot s;
	char msg[512], *end;
	int c, err;

	optind = 1;
	while ((c = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
		switch (c) {
		case 'n':
			o.top_n = (unsigned)strtoul(optarg, &end, 10);
			if (*end || !*optarg) {
				mt_error(0, "stats: -n wants a number, not '%s'", optarg);
				return 2;
			}
			break;
		case 'J':
			o.json = 1;
			break;
		case 'N':
			if (mt_cli_view_option(c, optarg, &o, "stats"))
				return 2;
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
	o.path = argv[optind];
	err = mt_report_load(&s, &o, warn_line, NULL, msg, sizeof(msg));
	if (err < 0) {
		mt_error(0, "%s", msg);
		return 1;
	}
	err = mt_report_stats(stdout, &s, &o);
	mt_snapshot_release(&s);
	if (err < 0) {
		mt_error(err, "stats: cannot write the report");
		return 1;
	}
	return 0;
}
