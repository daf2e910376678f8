/* SPDX-License-Identifier: MIT */
/* memtrace growth: the stacks whose live bytes rose across a capture. */
#include "cli/cmd.h"
#include "reader/report.h"
#include "util/error.h"

#include <getopt.h> /* struct option */

static const char usage[] =
	"usage: memtrace growth [-n N] [--json | --html [-o OUT.html] [-f]] [-q] CAPTURE\n"
	"\n"
	"The stacks whose live bytes rose across the run, the steadiest and biggest\n"
	"rise first: a slow leak found without knowing where to look.\n"
	"\n"
	"  -n, --top N     stacks to show (default 10, 50 in the page, all with --json;\n"
	"                  0 = all)\n"
	"  --json          one JSON object on standard output\n"
	"  --html          an HTML page with a plot per stack, written to OUT (default\n"
	"                  memtrace-growth-<capture name>.html beside the capture)\n"
	"  -o, --output OUT\n"
	"                  the page to write (implies --html; - for standard output)\n"
	"  -f, --force     overwrite OUT if it exists\n"
	"  -q, --quiet     no progress line on the terminal while the capture is read\n";

int cmd_growth(int argc, char **argv)
{
	struct mt_report_args a = {
		.o = { .top_n = 10, .view = MT_VIEW_LEAKS, .growth = 1 },
	};
	const struct option own[] = {
		{ "html", no_argument, &a.o.html, 1 },
		{ NULL, 0, NULL, 0 },
	};
	struct mt_report_cmd cmd = {
		.name = "growth",
		.usage = usage,
		.args = MT_RA_TOP | MT_RA_JSON | MT_RA_OUTPUT,
		.own = own,
		.write = mt_report_growth,
	};
	int rc = mt_cli_report_args(argc, argv, &cmd, &a);

	if (rc >= 0)
		return rc;
	if (a.output != a.defout || a.force)
		a.o.html = 1;
	if (a.o.html && a.o.json) {
		mt_error(0, "growth: --json and --html (or -o) exclude each other");
		return 2;
	}
	if (!a.top_given)
		a.o.top_n = a.o.json ? 0 : a.o.html ? 50 : 10;
	if (!a.o.html)
		cmd.args &= ~MT_RA_OUTPUT; /* text and JSON go to standard output */
	return mt_cli_report_write(&cmd, &a);
}
