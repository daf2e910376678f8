/* SPDX-License-Identifier: MIT */
/* memtrace summary: memory per location at the peak (or at the end). */
#include "cli/cmd.h"
#include "reader/report.h"

static const char usage[] =
	"usage: memtrace summary [-n N] [-s COLUMN] [--leaks | --temporary-allocations\n"
	"                        [--temporary-allocation-threshold N]] [--python-only] [--json]\n"
	"                        [--show-hidden-frames] [-q] CAPTURE\n"
	"\n"
	"  -n, --top N   rows to show (default 25, or all with --json; 0 = all);\n"
	"                memray's -r, --max-rows N too\n"
	"  -s, --sort-column COLUMN\n"
	"                the column to sort on, as memray numbers them: 1 or 2 total,\n"
	"                3 or 4 own, 5 allocations (default 1)\n"
	"  --leaks       memory still live at the end of the capture, not at the peak\n"
	"  --temporary-allocations\n"
	"                allocations freed soon after by the thread that made them\n"
	"  --temporary-allocation-threshold N\n"
	"                ... with at most N of its allocations in between (default 1)\n"
	"  --json        one JSON object on standard output\n"
	"  --show-hidden-frames\n"
	"                frames of the import system and of memtrace too (hidden by\n"
	"                default: their memory is their callers')\n"
	"  -q, --quiet   no progress line on the terminal while the capture is read\n";

int cmd_summary(int argc, char **argv)
{
	static const struct mt_report_cmd cmd = {
		.name = "summary",
		.usage = usage,
		.args = MT_RA_TOP | MT_RA_VIEWS | MT_RA_JSON | MT_RA_SORT,
		.top_alias = "max-rows",
		.top_alias_short = 'r',
		.write = mt_report_summary,
	};
	struct mt_report_args a = {
		.o = { .top_n = 25, .view = MT_VIEW_PEAK, .temp_threshold = 1 },
	};
	int rc = mt_cli_report_args(argc, argv, &cmd, &a);

	if (rc >= 0)
		return rc;
	if (a.o.json && !a.top_given)
		a.o.top_n = 0;
	return mt_cli_report_write(&cmd, &a);
}
