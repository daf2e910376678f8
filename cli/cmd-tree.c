/* SPDX-License-Identifier: MIT */
/* memtrace tree: the biggest allocating call paths as an indented tree. */
#include "cli/cmd.h"
#include "reader/report.h"

static const char usage[] =
	"usage: memtrace tree [-n N] [--leaks | --temporary-allocations\n"
	"                     [--temporary-allocation-threshold N]] [--python-only]\n"
	"                     [--show-hidden-frames] [-q] CAPTURE\n"
	"\n"
	"  -n, --top N          call paths to show, biggest first (default 10, 0 = all);\n"
	"                       memray's -b, --biggest-allocs N too\n"
	"  --leaks              memory still live at the end, not at the peak\n"
	"  --temporary-allocations\n"
	"                       allocations freed soon after by the thread that made them\n"
	"  --temporary-allocation-threshold N\n"
	"                       ... with at most N of its allocations in between (default 1)\n"
	"  --python-only        with native stacks: the Python frames alone\n"
	"  --show-hidden-frames frames of the import system and of memtrace too (hidden\n"
	"                       by default: their memory is their callers')\n"
	"  -q, --quiet          no progress line on the terminal while the capture is read\n";

int cmd_tree(int argc, char **argv)
{
	static const struct mt_report_cmd cmd = {
		.name = "tree",
		.usage = usage,
		.args = MT_RA_TOP | MT_RA_VIEWS,
		.top_alias = "biggest-allocs",
		.top_alias_short = 'b',
		.write = mt_report_tree,
	};
	struct mt_report_args a = {
		.o = { .top_n = 10, .view = MT_VIEW_PEAK, .temp_threshold = 1 },
	};
	int rc = mt_cli_report_args(argc, argv, &cmd, &a);

	return rc >= 0 ? rc : mt_cli_report_write(&cmd, &a);
}
