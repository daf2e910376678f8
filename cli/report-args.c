/* SPDX-License-Identifier: MIT */
/*
 * What the report commands (stats, summary, flamegraph, table, tree,
 * parse) share: their options, parsed by one function from the set a
 * command declares, loading the capture (with a progress line on a
 * terminal), and writing the report to standard output or to an HTML page
 * beside the capture.
 */
#include "cli/cmd.h"
#include "reader/report.h"
#include "reader/srclines.h" /* enum mt_confidential */
#include "util/error.h"
#include "util/io.h"

#include <errno.h>    /* errno */
#include <getopt.h>   /* getopt_long */
#include <limits.h>   /* PATH_MAX */
#include <stdio.h>    /* fdopen */
#include <string.h>   /* strrchr */
#include <sys/stat.h> /* stat */
#include <unistd.h>   /* unlink */

/* "DIR/memtrace-<kind>-<capture stem>.html", beside the capture; a stem
 * that already starts with "memtrace-" (run's default capture name,
 * memtrace-<script>.<pid>.bin) loses it, so that the prefix is not said
 * twice: memtrace-flamegraph-<script>.<pid>.html. */
void mt_cli_page_name(char *buf, size_t len, const char *kind, const char *capture)
{
	mt_cli_output_name(buf, len, kind, capture, ".html");
}

void mt_cli_output_name(char *buf, size_t len, const char *kind, const char *capture,
			const char *suffix)
{
	static const char prefix[] = "memtrace-";
	const char *base = strrchr(capture, '/');
	size_t dir = base ? (size_t)(base - capture) + 1 : 0;
	base = base ? base + 1 : capture;
	const char *dot0 = strrchr(base, '.');
	if (!strncmp(base, prefix, sizeof(prefix) - 1) && base[sizeof(prefix) - 1] &&
	    base + sizeof(prefix) - 1 != dot0)
		base += sizeof(prefix) - 1;
	const char *dot = strrchr(base, '.');
	size_t stem = dot && dot != base ? (size_t)(dot - base) : strlen(base);
	snprintf(buf, len, "%.*smemtrace-%s-%.*s%s", (int)dir, capture, kind, (int)stem, base,
		 suffix);
}

/* @path for writing ("-": stdout): a new file (mt_cli_create_file()),
 * which replaces an existing one only with @force. NULL after printing
 * why. */
FILE *mt_cli_open_page(const char *path, int force, const char *cmd)
{
	char what[64];

	snprintf(what, sizeof(what), "%s page", cmd);
	return mt_cli_open_output(path, force, what, cmd);
}

FILE *mt_cli_open_output(const char *path, int force, const char *what_, const char *cmd)
{
	char what[80];
	if (!strcmp(path, "-") || mt_cli_std_stream(path) == 1)
		return stdout; /* "-", or /dev/stdout as memray's users write it */
	snprintf(what, sizeof(what), "%s ", what_);
	int fd = mt_cli_create_file(path, force, 0644, what, NULL, 0);
	if (fd < 0)
		return NULL;
	FILE *f = fdopen(fd, "w");
	if (!f) {
		mt_error(-errno, "%s: cannot create '%s'", cmd, path);
		close(fd);
		mt_unlink_regular(path);
	}
	return f;
}

/* Close @f, report "wrote PATH (size)" or the error (removing the file);
 * returns the exit status. */
int mt_cli_close_page(FILE *f, const char *path, int err, const char *cmd)
{
	struct stat sb;
	/* a failed standard output is said by main(), once, with the reason
	 * its last flush gives (a writer knows only that the stream failed) */
	if (f == stdout) {
		if (err < 0 && !ferror(stdout))
			mt_error(err, "%s: cannot write the report", cmd);
		return err < 0;
	}
	/* the size of the file we wrote, whatever the name points to now; a
	 * report that fits in the stream's buffer meets a full disk here,
	 * and one that did not says why again here (a writer knows only
	 * that the stream failed: -EIO) */
	int sized = 0;
	if (fflush(f) != 0) {
		if (err == 0 || err == -EIO)
			err = -errno;
	} else {
		sized = fstat(fileno(f), &sb) == 0;
	}
	if (fclose(f) != 0 && err == 0)
		err = -errno;
	if (err < 0) {
		mt_error(err, "%s: cannot write '%s'", cmd, path);
		mt_unlink_regular(path);
		return 1;
	}
	if (sized) {
		char size[32];
		printf("wrote %s (%s)\n", path, mt__report_bytes(size, (unsigned long long)sb.st_size));
	}
	return 0;
}

/* --temporary-allocation-threshold N (at most N allocations in between,
 * as memray counts): 0, or 2 after a usage error */
static int threshold_option(const char *arg, struct mt_report_opts *o, const char *cmd)
{
	unsigned n;

	if (mt_cli_count_option(arg, 0, UINT32_MAX / 2, &n, cmd, "--temporary-allocation-threshold"))
		return 2;
	o->temp_threshold = n;
	return 0;
}

int mt_cli_report_args(int argc, char **argv, const struct mt_report_cmd *c,
		       struct mt_report_args *a)
{
	/* in the order getopt_long lists ambiguous abbreviations */
	static const struct {
		struct option opt;
		unsigned with; /* MT_RA_* that brings it */
	} shared[] = {
		{ { "output", required_argument, NULL, 'o' }, MT_RA_OUTPUT },
		{ { "force", no_argument, NULL, 'f' }, MT_RA_OUTPUT },
		{ { "top", required_argument, NULL, 'n' }, MT_RA_TOP },
		{ { "leaks", no_argument, NULL, 'L' }, MT_RA_VIEWS },
		{ { "temporary-allocations", no_argument, NULL, 'T' }, MT_RA_VIEWS },
		{ { "temporary-allocation-threshold", required_argument, NULL, 'N' },
		  MT_RA_VIEWS | MT_RA_THRESHOLD },
		{ { "json", no_argument, NULL, 'J' }, MT_RA_JSON },
		{ { "python-only", no_argument, NULL, 'P' }, MT_RA_VIEWS },
		{ { "show-hidden-frames", no_argument, NULL, 'H' }, MT_RA_VIEWS },
		{ { "sort-column", required_argument, NULL, 's' }, MT_RA_SORT },
		{ { "max-memory-records", required_argument, NULL, 'M' }, MT_RA_MAX_POINTS },
		{ { "confidential-files", required_argument, NULL, 'C' }, MT_RA_SOURCES },
	};
	static const struct option help = { "help", no_argument, NULL, 'h' };
	static const struct option quiet = { "quiet", no_argument, NULL, 'q' };
	struct option opts[sizeof(shared) / sizeof(shared[0]) + MT_REPORT_OWN_MAX + 4];
	unsigned has = c->args;
	size_t n = 0;
	char short_opts[16];
	int ch, views = 0, threshold_given = 0;

	char alias[3] = "";
	if ((has & MT_RA_TOP) && c->top_alias && c->top_alias_short)
		snprintf(alias, sizeof(alias), "%c:", c->top_alias_short);
	snprintf(short_opts, sizeof(short_opts), "%s%s%s%sqh", has & MT_RA_OUTPUT ? "o:f" : "",
		 has & MT_RA_TOP ? "n:" : "", alias, has & MT_RA_SORT ? "s:" : "");
	for (size_t i = 0; i < sizeof(shared) / sizeof(shared[0]); i++)
		if ((has & shared[i].with) &&
		    !((has & MT_RA_ALL_FRAMES) && strchr("PH", shared[i].opt.val)))
			opts[n++] = shared[i].opt;
	if ((has & MT_RA_TOP) && c->top_alias)
		opts[n++] = (struct option){ c->top_alias, required_argument, NULL, 'n' };
	for (size_t i = 0; c->own && c->own[i].name && i < MT_REPORT_OWN_MAX; i++)
		opts[n++] = c->own[i];
	opts[n++] = quiet;
	opts[n++] = help;
	opts[n] = (struct option){ NULL, 0, NULL, 0 };

	optind = 1;
	int li = -1;
	while ((ch = getopt_long(argc, argv, short_opts, opts, &li)) != -1) {
		/* the option as it was given, for its error: "-r", "--max-rows" */
		char given[48];
		if (li >= 0)
			snprintf(given, sizeof(given), "--%s", opts[li].name);
		else
			snprintf(given, sizeof(given), "-%c", ch);
		li = -1;
		if (alias[0] && ch == alias[0])
			ch = 'n';
		switch (ch) {
		case 0: /* a flag of the command's own options, set by getopt_long */
			break;
		case 'o':
			if (mt_cli_path_option(optarg, c->name, "-o", "output"))
				return 2;
			a->output = optarg;
			break;
		case 'f':
			a->force = 1;
			break;
		case 'n':
			if (mt_cli_count_option(optarg, 0, UINT32_MAX, &a->o.top_n, c->name, given))
				return 2;
			a->top_given = 1;
			break;
		case 'L':
			views++;
			a->o.view = MT_VIEW_LEAKS;
			break;
		case 'T':
			views++;
			a->o.view = MT_VIEW_TEMPORARY;
			break;
		case 'N':
			threshold_given = 1;
			if (threshold_option(optarg, &a->o, c->name))
				return 2;
			break;
		case 's':
			if (mt_cli_count_option(optarg, 1, 5, &a->o.sort_column, c->name,
						"--sort-column"))
				return 2;
			break;
		case 'M':
			if (mt_cli_count_option(optarg, 1, UINT32_MAX, &a->o.max_points, c->name,
						"--max-memory-records"))
				return 2;
			break;
		case 'C': {
			static const char *const names[] = {
				[MT_CONFIDENTIAL_DEFAULT] = "default",
				[MT_CONFIDENTIAL_NONE] = "none",
				[MT_CONFIDENTIAL_ALL] = "all",
			};
			unsigned k = 0;
			while (k < sizeof(names) / sizeof(names[0]) && strcmp(optarg, names[k]))
				k++;
			if (k == sizeof(names) / sizeof(names[0])) {
				mt_error(0, "%s: invalid --confidential-files '%s' (all, none or default)",
					 c->name, optarg);
				return 2;
			}
			a->o.confidential = (int)k;
			break;
		}
		case 'J':
			a->o.json = 1;
			break;
		case 'P':
			a->o.python_only = 1;
			break;
		case 'q':
			a->quiet = 1;
			break;
		case 'H':
			a->o.show_hidden = 1;
			break;
		case 'h':
			fputs(c->usage, stdout);
			return 0;
		default:
			return mt_cli_option_error(c->name, argv, short_opts, opts);
		}
	}
	if (argc - optind != ((has & MT_RA_FORMAT) ? 2 : 1))
		return mt_cli_operands_error(c->name,
					     (has & MT_RA_FORMAT) ? "a FORMAT and a capture" : "one capture",
					     argc - optind);
	if (has & MT_RA_FORMAT)
		a->format = argv[optind++];
	/* the threshold alone asks for the temporary view, as in memray */
	if ((has & MT_RA_VIEWS) && threshold_given && views == 0) {
		views = 1;
		a->o.view = MT_VIEW_TEMPORARY;
	}
	if ((has & MT_RA_VIEWS) && (views > 1 || (threshold_given && a->o.view != MT_VIEW_TEMPORARY))) {
		mt_error(0, "%s: %s", c->name,
			 views > 1 ? "--leaks and --temporary-allocations exclude each other"
				   : "--temporary-allocation-threshold is the temporary view's, not "
				     "--leaks'");
		return 2;
	}
	a->o.path = argv[optind];
	if ((has & MT_RA_OUTPUT) && !(has & MT_RA_OUTPUT_BY_CALLER) && !a->output) {
		mt_cli_page_name(a->defout, sizeof(a->defout), c->name, a->o.path);
		a->output = a->defout;
	}
	return -1;
}

static void warn_line(void *ctx, const char *msg)
{
	mt_cli_progress_clear(ctx);
	mt_warning("%s", msg);
}

int mt_cli_report_write(const struct mt_report_cmd *c, const struct mt_report_args *a)
{
	struct mt_report_opts o = a->o;
	struct mt_cli_progress p;
	struct mt_snapshot s;
	char msg[PATH_MAX + 1024]; /* a message quotes the capture's path */
	FILE *f = stdout;
	int err;

	/* the line covers the read, then says that the report is made; it
	 * goes before anything else is printed, and before a report on
	 * standard output is written */
	mt_cli_progress_start(&p, o.path, "making the report", a->quiet);
	int found = mt_cli_reads(o.path, "the capture read");
	char what[80];
	snprintf(what, sizeof(what), "%s%s", c->output_what ? c->output_what : c->name,
		 c->output_what ? " " : " page ");
	if (found && (c->args & MT_RA_OUTPUT) && a->output && strcmp(a->output, "-") &&
	    mt_cli_check_output(a->output, what, a->force) < 0) {
		mt_cli_progress_end(&p);
		return 1;
	}
	o.progress = mt_cli_progress_tell;
	o.progress_ctx = &p;
	err = mt_report_load(&s, &o, warn_line, &p, msg, sizeof(msg));
	if (err < 0) {
		mt_cli_progress_end(&p);
		mt_error(0, "%s", msg);
		return 1;
	}
	char note[256];
	mt_cli_progress_clear(&p);
	if (mt_report_leak_note(note, sizeof(note), &s, o.view))
		fprintf(stderr, "memtrace: note: %s\n", note);
	if ((c->args & MT_RA_OUTPUT) &&
	    !(f = c->output_what ? mt_cli_open_output(a->output, a->force, c->output_what, c->name)
				 : mt_cli_open_page(a->output, a->force, c->name))) {
		mt_snapshot_release(&s);
		return 1;
	}
	if (f == stdout)
		mt_cli_progress_end(&p);
	else
		mt_cli_progress_resume(&p);
	err = c->write(f, &s, &a->o);
	mt_cli_progress_end(&p);
	mt_snapshot_release(&s);
	return mt_cli_close_page(f, a->output, err, c->name);
}
