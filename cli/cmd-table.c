/* SPDX-License-Identifier: MIT */
/* memtrace table: an HTML page of memory by location and allocator (and
 * thread, with --split-threads). */
#include "cli/cmd.h"
#include "reader/report.h"

#include <getopt.h> /* struct option */

static const char usage[] =
	"usage: memtrace table [-o OUT.html] [-f] [--leaks | --temporary-allocations\n"
	"                      [--temporary-allocation-threshold N]] [--python-only]\n"
	"                      [--show-hidden-frames] [--confidential-files all|none|default]\n"
	"                      [--split-threads] [--no-web] [-q] CAPTURE\n"
	"\n"
	"  -o, --output OUT     the page to write (default memtrace-table-<capture\n"
	"                       name>.html beside the capture; - for standard output)\n"
	"  -f, --force          overwrite OUT if it exists\n"
	"  --leaks              memory still live at the end, not at the peak\n"
	"  --temporary-allocations\n"
	"                       allocations freed soon after by the thread that made them\n"
	"  --temporary-allocation-threshold N\n"
	"                       ... with at most N of its allocations in between (default 1)\n"
	"  --python-only        with native stacks: the Python frames alone\n"
	"  --show-hidden-frames frames of the import system and of memtrace too (hidden\n"
	"                       by default: their memory is their callers')\n"
	"  --confidential-files all|none|default\n"
	"                       the files whose lines the Source column leaves out: all,\n"
	"                       none, or (default) all but *.py and files executable or\n"
	"                       readable by all (as flamegraph's)\n"
	"  --split-threads      a row per thread, with a Thread column (by default a\n"
	"                       location's rows of all threads are one, as memray's)\n"
	"  --no-web             accepted as memray takes it; the page never needs the network\n"
	"  -q, --quiet          no progress line on the terminal while the capture is read\n";

int cmd_table(int argc, char **argv)
{
	struct mt_report_args a = {
		.o = { .view = MT_VIEW_PEAK, .temp_threshold = 1 },
	};
	int no_web = 0; /* memray's: its page's assets from the page itself */
	const struct option own[] = {
		{ "split-threads", no_argument, &a.o.split_threads, 1 },
		{ "no-web", no_argument, &no_web, 1 },
		{ NULL, 0, NULL, 0 },
	};
	const struct mt_report_cmd cmd = {
		.name = "table",
		.usage = usage,
		.args = MT_RA_OUTPUT | MT_RA_VIEWS | MT_RA_SOURCES,
		.own = own,
		.write = mt_report_table,
	};
	int rc = mt_cli_report_args(argc, argv, &cmd, &a);

	return rc >= 0 ? rc : mt_cli_report_write(&cmd, &a);
}
