/* SPDX-License-Identifier: MIT */
/* memtrace diff: what changed between two captures of one program. */
#include "cli/cmd.h"
#include "reader/diff.h"
#include "reader/report.h"
#include "util/error.h"

#include <ctype.h>  /* isdigit */
#include <errno.h>  /* ENOMEM */
#include <getopt.h> /* getopt_long */
#include <limits.h> /* PATH_MAX */
#include <stdlib.h> /* strtod */
#include <string.h> /* strcmp */

static const char usage[] =
	"usage: memtrace diff [-n N] [--json | --html | -o OUT.html [-f]] [--fail-over SIZE]\n"
	"                     [-q] BEFORE AFTER\n"
	"\n"
	"Memory at the peak and live at the end (leaks) of two captures of one\n"
	"program, per location: the function and file that allocated it (lines\n"
	"are not compared, as they move between builds).\n"
	"\n"
	"  -n, --top N       rows to show, biggest change at the peak first\n"
	"                    (default 25, or all with --json; 0 = all)\n"
	"  --json            one JSON object on standard output\n"
	"  --html            a page of AFTER's call paths coloured by their change,\n"
	"                    written to memtrace-diff-<AFTER's name>.html beside AFTER\n"
	"  -o, --output OUT  ... written to OUT instead (- for standard output)\n"
	"  -f, --force       overwrite OUT if it exists\n"
	"  --fail-over SIZE  exit with status 1 if the peak grew by more than SIZE\n"
	"                    (\"10 MB\", \"512KB\", \"1GiB\" or bytes; units of 1024)\n"
	"  -q, --quiet       no progress line on the terminal while the captures are read\n";

/* @arg as bytes into *@out, read as the pytest plugin reads a size
 * (python/memtrace/_pytest_limits.py parse_size): a number, maybe after a
 * "+", maybe with a fraction or an exponent, then K, M, G, T or P (powers
 * of 1024), then B or iB, any case, spaces around. Returns 0, or -1 if it
 * is not one. */
static int parse_size(const char *arg, uint64_t *out)
{
	static const char units[] = "KMGTP";
	const char *p = arg, *num;
	char buf[64];
	double v, scale = 1;
	size_t digits = 0, len;

	while (isspace((unsigned char)*p))
		p++;
	if (*p == '+')
		p++;
	num = p;
	while (isdigit((unsigned char)*p))
		p++;
	if (*p == '.')
		p++;
	while (isdigit((unsigned char)p[digits]))
		digits++;
	if (!digits && (p == num || p[-1] == '.'))
		return -1; /* no digit, or none after the point */
	p += digits;
	if ((*p == 'e' || *p == 'E') && isdigit((unsigned char)p[1]))
		for (p++; isdigit((unsigned char)*p); p++)
			;
	len = (size_t)(p - num);
	if (len >= sizeof(buf))
		return -1;
	memcpy(buf, num, len);
	buf[len] = '\0';
	v = strtod(buf, NULL);
	while (isspace((unsigned char)*p))
		p++;
	const char *u = *p ? strchr(units, toupper((unsigned char)*p)) : NULL;
	if (u) {
		for (long i = 0; i <= u - units; i++)
			scale *= 1024;
		p++;
	}
	if (toupper((unsigned char)*p) == 'I' && toupper((unsigned char)p[1]) == 'B')
		p += 2;
	else if (toupper((unsigned char)*p) == 'B')
		p++;
	while (isspace((unsigned char)*p))
		p++;
	if (*p || !(v * scale < 18446744073709551616.0))
		return -1;
	*out = (uint64_t)(v * scale);
	return 0;
}

/* Warnings of a capture being loaded: the first is kept, and said once
 * the capture is read. */
struct load_note {
	char first[300];
};

static void keep_warning(void *ctx, const char *msg)
{
	struct load_note *n = ctx;
	if (!n->first[0])
		snprintf(n->first, sizeof(n->first), "%s", msg);
}

/* Load capture @path into @s, with a progress line unless @quiet; 1
 * after printing why it cannot be used. */
static int load(struct mt_snapshot *s, const char *path, int quiet)
{
	struct mt_report_opts o = { .view = MT_VIEW_PEAK, .path = path, .temp_threshold = 1 };
	struct load_note note = { "" };
	struct mt_cli_progress p;
	char msg[PATH_MAX + 1024]; /* a message quotes the capture's path */
	int err;

	mt_cli_progress_start(&p, path, NULL, quiet);
	o.progress = mt_cli_progress_tell;
	o.progress_ctx = &p;
	err = mt_report_load(s, &o, keep_warning, &note, msg, sizeof(msg));
	mt_cli_progress_end(&p);
	if (err < 0) {
		mt_error(0, "diff: %s", msg);
		return 1;
	}
	/* a capture cut short (a service killed for its memory, say) is
	 * compared as far as it goes, as every report reads it, with a warning */
	if (note.first[0])
		mt_warning("diff: '%s': %s", path, note.first);
	else if (s->status.truncated)
		mt_warning("diff: '%s': capture is truncated: the figures are those it reached", path);
	return 0;
}

/* The report asked for, to standard output or the page; the exit status. */
static int write_report(const struct mt_snapshot *before, const struct mt_snapshot *after,
			const struct mt_diff *d, const struct mt_diff_opts *o, const char *page,
			int force)
{
	FILE *f;
	int err;

	if (!page) {
		err = mt_report_diff(stdout, d, o);
		return mt_cli_close_page(stdout, "-", err, "diff");
	}
	if (!(f = mt_cli_open_page(page, force, "diff")))
		return 1;
	err = mt_report_diff_html(f, before, after, o);
	return mt_cli_close_page(f, page, err, "diff");
}

int cmd_diff(int argc, char **argv)
{
	enum { OPT_JSON = 256, OPT_HTML, OPT_FAIL_OVER };
	static const struct option opts[] = {
		{ "top", required_argument, NULL, 'n' },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "html", no_argument, NULL, OPT_HTML },
		{ "output", required_argument, NULL, 'o' },
		{ "force", no_argument, NULL, 'f' },
		{ "fail-over", required_argument, NULL, OPT_FAIL_OVER },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct mt_diff_opts o = { .top_n = 25 };
	const char *output = NULL, *fail_arg = NULL;
	int ch, html = 0, force = 0, top_given = 0, quiet = 0, rc;
	uint64_t fail_over = 0;
	char page[4096];

	optind = 1;
	while ((ch = getopt_long(argc, argv, "n:o:fqh", opts, NULL)) != -1) {
		switch (ch) {
		case 'n':
			if (mt_cli_count_option(optarg, 0, UINT32_MAX, &o.top_n, "diff", "-n"))
				return 2;
			top_given = 1;
			break;
		case OPT_JSON:
			o.json = 1;
			break;
		case OPT_HTML:
			html = 1;
			break;
		case 'o':
			if (mt_cli_path_option(optarg, "diff", "-o", "output"))
				return 2;
			output = optarg;
			break;
		case 'f':
			force = 1;
			break;
		case OPT_FAIL_OVER:
			fail_arg = optarg;
			if (parse_size(optarg, &fail_over) < 0) {
				mt_error(0, "diff: --fail-over wants a size such as '10 MB', '512KB' "
					    "or a number of bytes, not '%s'", optarg);
				return 2;
			}
			break;
		case 'q':
			quiet = 1;
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		default:
			return mt_cli_option_error("diff", argv, "n:o:fqh", opts);
		}
	}
	if (argc - optind != 2)
		return mt_cli_operands_error("diff", "two captures, BEFORE and AFTER", argc - optind);
	if (o.json && (html || output)) {
		mt_error(0, "diff: --json and a page (--html, -o) exclude each other");
		return 2;
	}
	if (force && !html && !output) {
		mt_error(0, "diff: -f is for the page (--html, -o)");
		return 2;
	}
	o.before = argv[optind];
	o.after = argv[optind + 1];
	if (o.json && !top_given)
		o.top_n = 0;
	if (html && !output) {
		mt_cli_page_name(page, sizeof(page), "diff", o.after);
		output = page;
	}

	struct mt_snapshot before, after;
	struct mt_diff d;
	int found = mt_cli_reads(o.before, "the capture read");
	found &= mt_cli_reads(o.after, "the capture read");
	if (found && output && strcmp(output, "-") &&
	    mt_cli_check_output(output, "diff page ", force) < 0)
		return 1;
	if (load(&before, o.before, quiet))
		return 1;
	if (load(&after, o.after, quiet)) {
		mt_snapshot_release(&before);
		return 1;
	}
	if (mt_diff_build(&d, &before, &after) < 0) {
		mt_error(-ENOMEM, "diff: cannot compare the captures");
		rc = 1;
	} else {
		rc = write_report(&before, &after, &d, &o, output, force);
		int64_t grew = mt_diff_change(&d.total[MT_DIFF_PEAK]);
		if (rc == 0 && fail_arg && grew > 0 && (uint64_t)grew > fail_over) {
			char by[34], limit[32];
			mt_error(0, "diff: the peak grew by %s (%llu bytes), more than --fail-over %s (%s)",
				 mt__report_change(by, grew), (unsigned long long)grew, fail_arg,
				 mt__report_bytes(limit, fail_over));
			rc = 1;
		}
		mt_diff_release(&d);
	}
	mt_snapshot_release(&before);
	mt_snapshot_release(&after);
	return rc;
}
