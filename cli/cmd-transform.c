/* SPDX-License-Identifier: MIT */
/* memtrace transform: a view of a capture as a file for other tools. */
#include "cli/cmd.h"
#include "reader/report.h"
#include "util/error.h"

#include <string.h>  /* strcmp */
#include <strings.h> /* strcasecmp */

static const char usage[] =
	"usage: memtrace transform [-o OUT] [-f] [--leaks | --temporary-allocations\n"
	"                          [--temporary-allocation-threshold N]] [-q] FORMAT CAPTURE\n"
	"\n"
	"FORMAT, as memray's transform writes it:\n"
	"  csv         one row per call path and thread (the allocator its first\n"
	"              allocation's): allocator, num_allocations, size, tid,\n"
	"              thread_name, stack_trace\n"
	"  gprof2dot   JSON for 'gprof2dot -f json'\n"
	"  speedscope  a speedscope profile of bytes and of allocations\n"
	"\n"
	"  -o, --output OUT  the file to write (\"-\": standard output); by default\n"
	"                memtrace-FORMAT-<capture name>.csv, .json or .speedscope.json\n"
	"                beside the capture\n"
	"  -f, --force   replace OUT if it exists\n"
	"  --leaks       memory still live at the end of the capture, not at the peak\n"
	"  --temporary-allocations\n"
	"                allocations freed soon after by the thread that made them\n"
	"  --temporary-allocation-threshold N\n"
	"                ... with at most N of its allocations in between (default 1)\n"
	"  -q, --quiet   no progress line on the terminal while the capture is read\n";

static const struct {
	const char *name, *suffix, *what;
	int (*write)(FILE *out, const struct mt_snapshot *s, const struct mt_report_opts *o);
} formats[] = {
	{ "csv", ".csv", "csv file", mt_report_transform_csv },
	{ "gprof2dot", ".json", "gprof2dot file", mt_report_transform_gprof2dot },
	{ "speedscope", ".speedscope.json", "speedscope file", mt_report_transform_speedscope },
};

int cmd_transform(int argc, char **argv)
{
	struct mt_report_cmd cmd = {
		.name = "transform",
		.usage = usage,
		.args = MT_RA_VIEWS | MT_RA_ALL_FRAMES | MT_RA_OUTPUT | MT_RA_OUTPUT_BY_CALLER |
			MT_RA_FORMAT,
	};
	struct mt_report_args a = {
		.o = { .view = MT_VIEW_PEAK, .temp_threshold = 1 },
	};
	size_t k = 0, n = sizeof(formats) / sizeof(formats[0]);
	int rc = mt_cli_report_args(argc, argv, &cmd, &a);

	if (rc >= 0)
		return rc;
	while (k < n && strcasecmp(a.format, formats[k].name))
		k++;
	if (k == n) {
		mt_error(0, "transform: unknown format '%s' (csv, gprof2dot or speedscope)",
			 a.format);
		return 2;
	}
	cmd.write = formats[k].write;
	cmd.output_what = formats[k].what;
	if (!a.output) {
		mt_cli_output_name(a.defout, sizeof(a.defout), formats[k].name, a.o.path,
				   formats[k].suffix);
		a.output = a.defout;
	}
	rc = mt_cli_report_write(&cmd, &a);
	if (rc == 0 && formats[k].write == mt_report_transform_gprof2dot &&
	    strcmp(a.output, "-") && mt_cli_std_stream(a.output) != 1)
		printf("to draw it: gprof2dot -f json '%s' | dot -Tpng -o output.png\n", a.output);
	return rc;
}
