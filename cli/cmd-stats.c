/* SPDX-License-Identifier: MIT */
/* memtrace stats: totals, size histogram, allocators, top locations. */
#include "cli/cmd.h"
#include "reader/report.h"

static const char usage[] =
	"usage: memtrace stats [-n N] [--temporary-allocation-threshold N] [--json] [-q] CAPTURE\n"
	"\n"
	"  -n, --top N   rows in the top-locations tables (default 5, 0 = all)\n"
	"  --temporary-allocation-threshold N\n"
	"                count as temporary what its thread freed with at most N of\n"
	"                its allocations in between (default 1)\n"
	"  --json        one JSON object on standard output\n"
	"  -q, --quiet   no progress line on the terminal while the capture is read\n";

int cmd_stats(int argc, char **argv)
{
	static const struct mt_report_cmd cmd = {
		.name = "stats",
		.usage = usage,
		.args = MT_RA_TOP | MT_RA_THRESHOLD | MT_RA_JSON,
		.write = mt_report_stats,
	};
	struct mt_report_args a = {
		.o = { .top_n = 5, .view = MT_VIEW_ALLOCATED, .temp_threshold = 1 },
	};
	int rc = mt_cli_report_args(argc, argv, &cmd, &a);

	return rc >= 0 ? rc : mt_cli_report_write(&cmd, &a);
}
