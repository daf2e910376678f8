/* SPDX-License-Identifier: MIT */
/* memtrace stats: totals, size histogram, allocators, top locations. */
#include "cli/cmd.h"
#include "reader/report.h"

static const char usage[] =
	"usage: memtrace stats [-n N] [--temporary-allocation-threshold N] [--json]\n"
	"                      [-o OUT [-f]] [-q] CAPTURE\n"
	"\n"
	"  -n, --top N   rows in the top-locations tables (default 5, 0 = all);\n"
	"                memray's --num-largest N too\n"
	"  --temporary-allocation-threshold N\n"
	"                count as temporary what its thread freed with at most N of\n"
	"                its allocations in between (default 1)\n"
	"  --json        one JSON object on standard output, memtrace's layout\n"
	"  -o, --output OUT  the stats in memray's JSON layout (as its stats --json\n"
	"                writes them) to OUT (\"-\": standard output), with or\n"
	"                without --json\n"
	"  -f, --force   replace OUT if it exists\n"
	"  -q, --quiet   no progress line on the terminal while the capture is read\n";

int cmd_stats(int argc, char **argv)
{
	static const struct mt_report_cmd cmd = {
		.name = "stats",
		.usage = usage,
		.args = MT_RA_TOP | MT_RA_THRESHOLD | MT_RA_JSON | MT_RA_OUTPUT |
			MT_RA_OUTPUT_BY_CALLER,
		.top_alias = "num-largest",
		.write = mt_report_stats,
	};
	/* -o: memray's layout, written to a file */
	static const struct mt_report_cmd memray = {
		.name = "stats",
		.args = MT_RA_OUTPUT,
		.output_what = "stats file",
		.write = mt_report_stats_memray,
	};
	struct mt_report_args a = {
		.o = { .top_n = 5, .view = MT_VIEW_ALLOCATED, .temp_threshold = 1 },
	};
	int rc = mt_cli_report_args(argc, argv, &cmd, &a);

	if (rc >= 0)
		return rc;
	if (!a.output) {
		struct mt_report_cmd text = cmd;
		text.args &= ~(unsigned)MT_RA_OUTPUT;
		return mt_cli_report_write(&text, &a);
	}
	/* memray's locations are the innermost Python frames */
	a.o.memray_stats = 1;
	a.o.python_only = 1;
	a.o.json = 0;
	return mt_cli_report_write(&memray, &a);
}
