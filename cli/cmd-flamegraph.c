/* SPDX-License-Identifier: MIT */
/* memtrace flamegraph: one self-contained HTML page of a view. */
#include "cli/cmd.h"
#include "reader/report.h"
#include "util/error.h"

#include <getopt.h> /* struct option */

static const char usage[] =
	"usage: memtrace flamegraph [-o OUT.html] [-f] [--leaks | --temporary-allocations\n"
	"                           [--temporary-allocation-threshold N]] [--python-only] [--inverted]\n"
	"                           [--split-threads] [--temporal] [--max-memory-records N]\n"
	"                           [--show-hidden-frames] [--confidential-files all|none|default]\n"
	"                           [--no-web] [-q] CAPTURE\n"
	"\n"
	"  -o, --output OUT     the page to write (default memtrace-flamegraph-<capture\n"
	"                       name>.html beside the capture; - for standard output)\n"
	"  -f, --force          overwrite OUT if it exists\n"
	"  --leaks              memory still live at the end, not at the peak\n"
	"  --temporary-allocations\n"
	"                       allocations freed soon after by the thread that made them\n"
	"  --temporary-allocation-threshold N\n"
	"                       ... with at most N of its allocations in between (default 1)\n"
	"  --python-only        with native stacks: the Python frames alone\n"
	"  --inverted           start with callers below the allocating functions\n"
	"  --split-threads      a thread filter in the page\n"
	"  --temporal           choose a range of time on the page's memory plot: the graph\n"
	"                       shows what was allocated in it and still live at its end\n"
	"                       (or at the heap's highest point in it, or never freed)\n"
	"  --max-memory-records N\n"
	"                       at most N points on the memory plot (default 1500)\n"
	"  --show-hidden-frames start with the frames of the import system and of memtrace\n"
	"                       shown (the page has a checkbox for them)\n"
	"  --confidential-files all|none|default\n"
	"                       the files whose source lines the page leaves out: all, none,\n"
	"                       or (default) all but *.py and files executable or readable\n"
	"                       by all, as memray guesses which may hold secrets\n"
	"  --no-web             accepted as memray takes it; the page never needs the network\n"
	"  -q, --quiet          no progress line on the terminal while the capture is read\n";

int cmd_flamegraph(int argc, char **argv)
{
	struct mt_report_args a = {
		.o = { .view = MT_VIEW_PEAK, .temp_threshold = 1 },
	};
	int no_web = 0; /* memray's: its page's assets from the page itself */
	const struct option own[] = {
		{ "inverted", no_argument, &a.o.inverted, 1 },
		{ "no-web", no_argument, &no_web, 1 },
		{ "split-threads", no_argument, &a.o.split_threads, 1 },
		{ "temporal", no_argument, &a.o.temporal, 1 },
		{ NULL, 0, NULL, 0 },
	};
	const struct mt_report_cmd cmd = {
		.name = "flamegraph",
		.usage = usage,
		.args = MT_RA_OUTPUT | MT_RA_VIEWS | MT_RA_MAX_POINTS | MT_RA_SOURCES,
		.own = own,
		.write = mt_report_flamegraph,
	};
	int rc = mt_cli_report_args(argc, argv, &cmd, &a);

	if (rc >= 0)
		return rc;
	if (a.o.temporal && (a.o.view == MT_VIEW_TEMPORARY || a.o.split_threads)) {
		mt_error(0, "flamegraph: --temporal does not go with %s",
			 a.o.split_threads ? "--split-threads" : "--temporary-allocations");
		return 2;
	}
	return mt_cli_report_write(&cmd, &a);
}
