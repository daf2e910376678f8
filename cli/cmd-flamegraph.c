/* SPDX-License-Identifier: MIT */
/* memtrace flamegraph: one self-contained HTML page of a view. Also the
 * output file handling the HTML reports share (memtrace table). */
#include "cli/cmd.h"
#include "reader/report.h"
#include "util/error.h"

#include <errno.h>    /* errno */
#include <fcntl.h>    /* open */
#include <getopt.h>   /* getopt_long */
#include <stdio.h>    /* fdopen */
#include <stdlib.h>   /* strtoull */
#include <string.h>   /* strrchr */
#include <sys/stat.h> /* fstat */
#include <unistd.h>   /* unlink */

static const char usage[] =
	"usage: memtrace flamegraph [-o OUT.html] [-f] [--leaks | --temporary-allocations\n"
	"                           [--temporary-allocation-threshold N]] [--inverted]\n"
	"                           [--split-threads] CAPTURE\n"
	"\n"
	"  -o, --output OUT     the page to write (default memtrace-flamegraph-<capture\n"
	"                       name>.html beside the capture; - for standard output)\n"
	"  -f, --force          overwrite OUT if it exists\n"
	"  --leaks              memory still live at the end, not at the peak\n"
	"  --temporary-allocations\n"
	"                       allocations freed soon after by the thread that made them\n"
	"  --temporary-allocation-threshold N\n"
	"                       ... with fewer than N of its allocations in between (default 1)\n"
	"  --inverted           start with callers below the allocating functions\n"
	"  --split-threads      a thread filter in the page\n";

static void warn_line(void *ctx, const char *msg)
{
	(void)ctx;
	mt_warning("%s", msg);
}

void mt_cli_default_output(char *buf, size_t len, const char *kind, const char *capture)
{
	const char *base = strrchr(capture, '/');
	size_t dir = base ? (size_t)(base - capture) + 1 : 0;
	base = base ? base + 1 : capture;
	const char *dot = strrchr(base, '.');
	size_t stem = dot && dot != base ? (size_t)(dot - base) : strlen(base);
	snprintf(buf, len, "%.*smemtrace-%s-%.*s.html", (int)dir, capture, kind, (int)stem, base);
}

FILE *mt_cli_open_output(const char *path, int force, const char *cmd)
{
	if (!strcmp(path, "-"))
		return stdout;
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (force ? O_TRUNC : O_EXCL), 0644);
	if (fd < 0) {
		if (errno == EEXIST)
			mt_error(0, "%s: '%s' exists (use -f to overwrite it)", cmd, path);
		else
			mt_error(-errno, "%s: cannot create '%s'", cmd, path);
		return NULL;
	}
	FILE *f = fdopen(fd, "w");
	if (!f) {
		mt_error(-errno, "%s: cannot create '%s'", cmd, path);
		close(fd);
		unlink(path);
	}
	return f;
}

int mt_cli_close_output(FILE *f, const char *path, int err, const char *cmd)
{
	if (f == stdout)
		return err < 0 ? (mt_error(err, "%s: cannot write the report", cmd), 1) : 0;
	if (fclose(f) != 0 && err == 0)
		err = -errno;
	if (err < 0) {
		mt_error(err, "%s: cannot write '%s'", cmd, path);
		unlink(path);
		return 1;
	}
	struct stat sb;
	if (stat(path, &sb) == 0) {
		char size[32];
		printf("wrote %s (%s)\n", path, mt__report_bytes(size, (unsigned long long)sb.st_size));
	}
	return 0;
}

int mt_cli_view_option(int c, const char *arg, struct mt_report_opts *o, const char *cmd)
{
	char *end;

	switch (c) {
	case 'L':
		o->view = MT_VIEW_LEAKS;
		return 0;
	case 'T':
		o->view = MT_VIEW_TEMPORARY;
		return 0;
	case 'N':
		errno = 0;
		o->temp_threshold = strtoull(arg, &end, 10);
		if (*end || !*arg || errno || o->temp_threshold == 0 || o->temp_threshold > UINT32_MAX / 2 ||
		    arg[0] == '-') {
			mt_error(0, "%s: --temporary-allocation-threshold wants a number from 1, not '%s'",
				 cmd, arg);
			return 2;
		}
		return 0;
	}
	return -1;
}

int cmd_flamegraph(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "force", no_argument, NULL, 'f' },
		{ "leaks", no_argument, NULL, 'L' },
		{ "temporary-allocations", no_argument, NULL, 'T' },
		{ "temporary-allocation-threshold", required_argument, NULL, 'N' },
		{ "inverted", no_argument, NULL, 'I' },
		{ "split-threads", no_argument, NULL, 'S' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct mt_report_opts o = { .view = MT_VIEW_PEAK, .temp_threshold = 1 };
	const char *output = NULL;
	char msg[600], defout[4096];
	int c, err, force = 0, views = 0, threshold_given = 0;
	struct mt_snapshot s;

	optind = 1;
	while ((c = getopt_long(argc, argv, "o:fh", opts, NULL)) != -1) {
		switch (c) {
		case 'o':
			output = optarg;
			break;
		case 'f':
			force = 1;
			break;
		case 'I':
			o.inverted = 1;
			break;
		case 'S':
			o.split_threads = 1;
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		case 'L':
		case 'T':
			views++;
			/* fall through */
		case 'N':
			threshold_given |= c == 'N';
			if (mt_cli_view_option(c, optarg, &o, "flamegraph"))
				return 2;
			break;
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
		mt_error(0, "flamegraph: %s", views > 1 ? "--leaks and --temporary-allocations exclude each other"
							: "--temporary-allocation-threshold goes with --temporary-allocations");
		return 2;
	}
	o.path = argv[optind];
	if (!output) {
		mt_cli_default_output(defout, sizeof(defout), "flamegraph", o.path);
		output = defout;
	}
	err = mt_report_load(&s, &o, warn_line, NULL, msg, sizeof(msg));
	if (err < 0) {
		mt_error(0, "%s", msg);
		return 1;
	}
	FILE *f = mt_cli_open_output(output, force, "flamegraph");
	if (!f) {
		mt_snapshot_release(&s);
		return 1;
	}
	err = mt_report_flamegraph(f, &s, &o);
	mt_snapshot_release(&s);
	return mt_cli_close_output(f, output, err, "flamegraph");
}
