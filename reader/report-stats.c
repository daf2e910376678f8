/* SPDX-License-Identifier: MIT */
/*
 * The stats report (header, totals, size histogram, allocators, top
 * locations, peaks, dropped events, diagnostics) and the helpers every
 * text report shares: loading a capture and formatting sizes and places.
 */
#include "reader/coverage.h"
#include "reader/native.h"
#include "reader/report.h"
#include "format/error.h"
#include "util/json.h"
#include "util/plural.h"
#include "util/strbuf.h"

#include <errno.h>  /* EIO */
#include <fcntl.h>  /* open */
#include <stdlib.h> /* qsort */
#include <string.h>   /* strlen */
#include <sys/stat.h> /* stat */
#include <time.h>   /* gmtime_r */
#include <unistd.h> /* read */

/* ------------------------------------------------------------------------
 * Shared helpers
 * ---------------------------------------------------------------------- */
char *mt__report_bytes(char *buf, unsigned long long n)
{
	struct mt_strbuf sb = MT_STRBUF_INIT;

	mt_strbuf_addbytes(&sb, n);
	snprintf(buf, 32, "%s", sb.buf);
	mt_strbuf_release(&sb);
	return buf;
}

char *mt__report_seconds(char *buf, size_t len, unsigned long long us)
{
	snprintf(buf, len, "%llu.%03llu s", us / 1000000, us / 1000 % 1000);
	return buf;
}

/* Events carry no time: a peak is known to a sample interval, which only
 * needs saying when it is long (memtrace run --memory-interval-ms). */
#define PEAK_SPAN_SAID_US 50000

char *mt__report_peak_time(char *buf, size_t len, const struct mt_snapshot *s)
{
	char a[32], b[32];
	mt__report_seconds(a, sizeof(a), s->peak_time_us);
	if (s->peak_until_us > s->peak_time_us + PEAK_SPAN_SAID_US)
		snprintf(buf, len, "between %s and %s", a,
			 mt__report_seconds(b, sizeof(b), s->peak_until_us));
	else
		snprintf(buf, len, "at %s", a);
	return buf;
}

/* The character of a name at @p (of @left bytes) for a terminal, and how
 * many bytes it took: control characters as \xNN, C0 and DEL, and C1
 * (U+0080 to U+009F, which some terminals obey as escape sequences) as
 * \u00NN; a byte that is not UTF-8 as \xNN, as Python shows it. */
static size_t add_text_char(struct mt_strbuf *sb, const unsigned char *p, size_t left)
{
	if (p[0] < 0x80) {
		if (p[0] < 0x20 || p[0] == 0x7f)
			mt_strbuf_addf(sb, "\\x%02x", p[0]);
		else
			mt_strbuf_addch(sb, (char)p[0]);
		return 1;
	}
	size_t n = mt_utf8_len(p, left);
	if (n == 0) {
		mt_strbuf_addf(sb, "\\x%02x", p[0]);
		return 1;
	}
	if (n == 2 && p[0] == 0xc2 && p[1] < 0xa0)
		mt_strbuf_addf(sb, "\\u%04x", p[1]);
	else
		mt_strbuf_add(sb, (const char *)p, n);
	return n;
}

void mt__report_text(struct mt_strbuf *sb, const char *text)
{
	const unsigned char *p = (const unsigned char *)text;
	size_t left = strlen(text);
	while (left) {
		size_t n = add_text_char(sb, p, left);
		p += n;
		left -= n;
	}
}

void mt__report_location(struct mt_strbuf *sb, const char *function, const char *file, int line)
{
	mt__report_text(sb, function);
	if (!file || !file[0])
		return;
	mt_strbuf_addstr(sb, " at ");
	mt__report_text(sb, file);
	if (line > 0)
		mt_strbuf_addf(sb, ":%d", line);
}

struct load_ctx {
	struct mt_capture *cap;
	void (*warn)(void *ctx, const char *msg);
	void *ctx;
};

/* Truncation is a warning; corruption becomes mt_report_load()'s error
 * instead (the status says which before the message is sent). */
static void load_warn(void *p, const char *msg)
{
	struct load_ctx *l = p;

	if (!mt_capture_status(l->cap)->stopped && l->warn)
		l->warn(l->ctx, msg);
}

int mt_report_load(struct mt_snapshot *s, const struct mt_report_opts *o,
		   void (*warn)(void *ctx, const char *msg), void *ctx, char *msg, size_t len)
{
	struct mt_snapshot_opts so = { .temp_threshold = o->temp_threshold,
				       .python_only = o->python_only, .growth = o->growth,
				       .temporal = o->temporal, .exact_sizes = o->memray_stats };
	struct load_ctx l = { NULL, warn, ctx };
	int err = mt_capture_open_flags(o->path, o->open_flags, &l.cap);

	if (err < 0) {
		mt_report_describe_open_error(msg, len, o->path, err);
		return err;
	}
	if ((mt_capture_header(l.cap)->flags & MT_HDR_AGGREGATED) && o->view == MT_VIEW_TEMPORARY) {
		snprintf(msg, len, "cannot show temporary allocations of '%s': it is an aggregated "
				   "capture, which keeps no single allocations (capture without "
				   "--aggregate)", o->path);
		mt_capture_close(l.cap);
		return -EINVAL;
	}
	if ((mt_capture_header(l.cap)->flags & MT_HDR_AGGREGATED) && o->memray_stats) {
		snprintf(msg, len, "cannot write memray's stats of '%s': it is an aggregated capture, "
				   "which keeps no single allocations to count by size (capture "
				   "without --aggregate)", o->path);
		mt_capture_close(l.cap);
		return -EINVAL;
	}
	if ((mt_capture_header(l.cap)->flags & MT_HDR_AGGREGATED) && (o->growth || o->temporal)) {
		snprintf(msg, len, "cannot %s '%s': it is an aggregated capture, which keeps no "
				   "history of the allocations (capture without --aggregate)",
			 o->growth ? "follow growth in" : "show the temporal flame graph of", o->path);
		mt_capture_close(l.cap);
		return -EINVAL;
	}
	mt_capture_set_warn(l.cap, load_warn, &l);
	mt_capture_set_progress(l.cap, o->progress, o->progress_ctx);
	err = mt_snapshot_build_opts(s, l.cap, &so);
	if (err < 0) {
		snprintf(msg, len, "cannot read '%s': %s", o->path, mt_capture_error(l.cap, err));
	} else if (mt_capture_damage(l.cap)) {
		snprintf(msg, len, "cannot read '%s': %s", o->path, mt_capture_damage(l.cap));
		mt_snapshot_release(s);
		err = -MT_ECORRUPT;
	}
	mt_capture_close(l.cap);
	return err;
}

char *mt_report_describe_open_error(char *buf, size_t len, const char *path, int err)
{
	if (err == -MT_EVERSION) {
		uint8_t h[10];
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		ssize_t n = fd >= 0 ? read(fd, h, sizeof(h)) : -1;
		if (fd >= 0)
			close(fd);
		if (n == (ssize_t)sizeof(h)) {
			snprintf(buf, len,
				 "cannot read '%s': capture format version %u is not supported "
				 "(this memtrace reads versions %d to %d)",
				 path, (unsigned)(h[8] | h[9] << 8), MT_FORMAT_VERSION_MIN,
				 MT_FORMAT_VERSION);
			return buf;
		}
	}
	if (err == -MT_EFORMAT) {
		struct stat sb;
		uint8_t h[6] = { 0 };
		int empty = stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size == 0;
		int fd = empty ? -1 : open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
		ssize_t n = fd >= 0 ? read(fd, h, sizeof(h)) : -1;
		if (fd >= 0)
			close(fd);
		/* memray's captures, as it leaves them or compressed on exit
		 * (an LZ4 frame): a memray user switching says so */
		const char *what = empty ? "file is empty"
				   : n == 6 && !memcmp(h, "memray", 6)
					   ? "a memray capture, not a memtrace one: memtrace reads the "
					     "captures it makes (memtrace run, attach or Tracker)"
				   : n >= 4 && !memcmp(h, "\x04\x22\x4d\x18", 4)
					   ? "an LZ4 frame (memray compresses its captures so), not a "
					     "memtrace capture: memtrace reads the captures it makes "
					     "(memtrace run, attach or Tracker)"
					   : "not a memtrace capture";
		snprintf(buf, len, "cannot read '%s': %s", path, what);
		return buf;
	}
	if (err == -MT_ECORRUPT) {
		snprintf(buf, len, "cannot read '%s': capture header is corrupt", path);
		return buf;
	}
	if (err == -MT_ETRUNC) {
		snprintf(buf, len, "cannot read '%s': file ends inside the capture header", path);
		return buf;
	}
	snprintf(buf, len, "cannot read '%s': %s", path, mt_strerror(err));
	return buf;
}

/* ------------------------------------------------------------------------
 * Header
 * ---------------------------------------------------------------------- */
void mt__report_cmdline_text(struct mt_strbuf *sb, const struct mt_bytes *c)
{
	for (uint32_t i = 0; i < c->len;) {
		if (c->p[i] == 0) {
			if (i + 1 < c->len)
				mt_strbuf_addch(sb, ' ');
			i++;
		} else {
			i += (uint32_t)add_text_char(sb, c->p + i, c->len - i);
		}
	}
}

static void print_header(FILE *out, const struct mt_snapshot *s, const char *path)
{
	const struct mt_header *h = &s->header;
	struct mt_strbuf sb = MT_STRBUF_INIT;
	char when[64] = "unknown", dur[32];
	time_t t = (time_t)(h->start_ns / 1000000000ull);
	struct tm tm;

	if (h->start_ns && gmtime_r(&t, &tm))
		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
	mt__report_cmdline_text(&sb, &h->cmdline);
	fprintf(out, "Capture: %s\n", path ? path : "");
	fprintf(out, "  pid:                %u\n", h->pid);
	fprintf(out, "  command line:       %s\n", sb.len ? sb.buf : "(unknown)");
	if (h->python_hex)
		fprintf(out, "  python:             %u.%u.%u\n", h->python_hex >> 24,
			(h->python_hex >> 16) & 0xff, (h->python_hex >> 8) & 0xff);
	else
		fprintf(out, "  python:             unknown\n");
	if (s->python_allocator[0])
		fprintf(out, "  python allocator:   %s\n", s->python_allocator);
	fprintf(out, "  started:            %s\n", when);
	fprintf(out, "  duration:           %s%s\n", mt__report_seconds(dur, sizeof(dur), s->end_time_us),
		s->have_trailer ? "" : " (at least; capture is truncated)");
	fprintf(out, "  tracking:           %s\n",
		h->flags & MT_HDR_ATTACHED  ? "attached to a running process"
		: h->flags & MT_HDR_FORKED  ? "from a fork of a tracked process"
		: h->flags & MT_HDR_TRACKER ? "from where the program started a Tracker"
					    : "from process start");
	fprintf(out, "  options:            python allocators %s, native stacks %s, "
		     "fork children %s, memory interval %u ms\n",
		h->flags & MT_HDR_PYALLOC ? "traced" : "not traced",
		h->flags & MT_HDR_NATIVE ? "on" : "off",
		h->flags & MT_HDR_FOLLOW_FORK ? "followed" : "not followed", h->interval_ms);
	fprintf(out, "  threads:            %zu\n", s->n_threads);
	if (h->flags & MT_HDR_NATIVE) {
		struct mt_native_stats ns;
		mt_snapshot_native(s, &ns);
		fprintf(out, "  native frames:      %llu return addresses, %llu without a symbol; "
			     "%u module%s not found here\n",
			(unsigned long long)ns.addresses, (unsigned long long)ns.unresolved,
			ns.modules_missing, ns.modules_missing == 1 ? "" : "s");
		if (ns.unpaired)
			fprintf(out, "                      %u stack%s shown without the C frames "
				     "between %s Python calls (%s evaluation loops were not found)\n",
				ns.unpaired, ns.unpaired == 1 ? "" : "s",
				ns.unpaired == 1 ? "its" : "their", ns.unpaired == 1 ? "its" : "their");
	}
	mt_strbuf_release(&sb);
}

/* ------------------------------------------------------------------------
 * Stats
 * ---------------------------------------------------------------------- */
/* 2^k as "512 B", "4 KiB", "1 GiB" */
static char *pow2_name(char *buf, int k)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	snprintf(buf, 32, "%llu %s", 1ull << (k % 10), units[k / 10]);
	return buf;
}

static void print_histogram(FILE *out, const struct mt_snapshot *s)
{
	int lo = -1, hi = -1;
	uint64_t max = 0;

	for (int i = 0; i < MT_HIST_BUCKETS; i++) {
		if (!s->size_hist[i])
			continue;
		if (lo < 0)
			lo = i;
		hi = i;
		if (s->size_hist[i] > max)
			max = s->size_hist[i];
	}
	fprintf(out, "\nAllocations by size (from - below)\n");
	if (lo < 0) {
		fprintf(out, "  (none)\n");
		return;
	}
	for (int i = lo; i <= hi; i++) {
		char a[32], b[32], range[72];
		if (i == 0)
			snprintf(range, sizeof(range), "0 B");
		else
			snprintf(range, sizeof(range), "%s - %s", pow2_name(a, i - 1),
				 i == 64 ? "" : pow2_name(b, i));
		int bar = (int)((s->size_hist[i] * 30 + max - 1) / max);
		fprintf(out, "  %-24s %12llu  %.*s\n", range, (unsigned long long)s->size_hist[i],
			bar, "##############################");
	}
}

static void print_allocators(FILE *out, const struct mt_snapshot *s)
{
	fprintf(out, "\nAllocations by allocator\n");
	for (unsigned k = 0; k < MT_ALLOC__COUNT; k++) {
		char b[32];
		if (!s->by_allocator_count[k])
			continue;
		fprintf(out, "  %-20s %12llu  %s\n", mt_allocator_name(k),
			(unsigned long long)s->by_allocator_count[k],
			mt__report_bytes(b, s->by_allocator_bytes[k]));
	}
	if (!s->n_allocs)
		fprintf(out, "  (none)\n");
}

static int print_top(FILE *out, const struct mt_snapshot *s, unsigned n)
{
	struct mt_location *locs;
	struct mt_strbuf sb = MT_STRBUF_INIT;
	ssize_t nl = mt_snapshot_locations_opt(s, MT_VIEW_ALLOCATED, MT_LOC_PYTHON, NULL, &locs);

	if (nl < 0)
		return (int)nl;
	for (int pass = 0; pass < 2; pass++) {
		size_t rows = n && n < (size_t)nl ? n : (size_t)nl;
		if (nl > 1)
			qsort(locs, (size_t)nl, sizeof(*locs),
			      pass == 0 ? mt_location_cmp_own : mt_location_cmp_own_count);
		fprintf(out, "\nTop %zu %s by %s\n", rows, mt_plural(rows, "location", "locations"),
			pass == 0 ? "size" : "count");
		if (!rows)
			fprintf(out, "  (none)\n");
		for (size_t i = 0; i < rows; i++) {
			char b[32];
			mt_strbuf_reset(&sb);
			mt__report_location(&sb, locs[i].function, locs[i].file, locs[i].line);
			fprintf(out, "  %3zu. %12s %12llu %-6s  %s\n", i + 1,
				mt__report_bytes(b, locs[i].own_bytes),
				(unsigned long long)locs[i].own_count,
				mt_plural(locs[i].own_count, "alloc", "allocs"), sb.buf);
		}
	}
	mt_strbuf_release(&sb);
	free(locs);
	return 0;
}

static const char *diag_name(uint32_t code)
{
	switch (code) {
#define MT_X(name, val) \
	case val:       \
		return #name;
		MT_DIAGS(MT_X)
#undef MT_X
	}
	return "UNKNOWN";
}

static int stats_json(FILE *out, const struct mt_snapshot *s, const struct mt_report_opts *o);

/* What the C allocator holds and how much of it the capture accounts for
 * (coverage.h), at the end and at the peak; a warning when much is not. */
static void print_coverage(FILE *out, const struct mt_snapshot *s)
{
	static const char *const when[] = { "at the end", "at the peak" };
	char a[32], b[32], d[32], t[32];
	struct mt_coverage c[2];
	int known[2];

	for (int i = 0; i < 2; i++)
		known[i] = mt_coverage(s, i == 0 ? MT_COVERAGE_END : MT_COVERAGE_PEAK, &c[i]);
	fprintf(out, "  allocator:          ");
	if (!known[0]) {
		fprintf(out, "unknown (no memory sample has the C allocator's own count: a capture "
			     "of an older memtrace, a malloc other than glibc's, or a glibc before "
			     "2.33)\n");
		return;
	}
	for (int i = 0; i < 2; i++) {
		if (!known[i] || (i == 1 && c[1].time_us == c[0].time_us))
			continue;
		fprintf(out, "%sglibc malloc holds %s in use %s (%s); the capture accounts for %s "
			     "of it (%.1f%%: %s of blocks, with glibc's chunk headers)\n",
			i ? "                      " : "", mt__report_bytes(a, c[i].in_use), when[i],
			mt__report_seconds(t, sizeof(t), c[i].time_us),
			mt__report_bytes(b, c[i].accounted), 100.0 * c[i].share,
			mt__report_bytes(d, c[i].bytes));
	}
	if (c[0].start != MT_SAMPLE_UNKNOWN)
		fprintf(out, "                      %s was in use as tracking started%s\n",
			mt__report_bytes(a, c[0].start),
			s->header.flags & MT_HDR_FORKED	   ? " (the parent's, copied at the fork)"
			: s->header.flags & MT_HDR_ATTACHED ? " (the program's, before the attach)"
			: s->header.flags & MT_HDR_TRACKER  ? " (the program's, before the Tracker)"
							    : " (the interpreter's own start-up)");
	for (int i = 0; i < 2; i++) {
		if (!known[i] || !c[i].warn || (i == 1 && c[0].warn))
			continue;
		fprintf(out, "  warning: %s (%.1f%%) of what glibc's malloc holds %s is not in the "
			     "capture%s: memory allocated before tracking started, or by a path "
			     "memtrace does not see (a library calling glibc's internal entry "
			     "points, one whose calls to malloc were not patched, the C library's "
			     "and the loader's own allocations)\n",
			mt__report_bytes(a, c[i].unaccounted - c[i].excused),
			100.0 * (double)(c[i].unaccounted - c[i].excused) / (double)c[i].in_use, when[i],
			c[i].excused ? " (besides what was in use as tracking started)" : "");
	}
}

int mt_report_stats(FILE *out, const struct mt_snapshot *s, const struct mt_report_opts *o)
{
	char a[32], b[32], t[64];
	int err;

	if (o->json)
		return stats_json(out, s, o);
	print_header(out, s, o->path);
	fprintf(out, "\nTotals\n");
	fprintf(out, "  allocations:        %llu\n", (unsigned long long)s->n_allocs);
	fprintf(out, "  frees:              %llu", (unsigned long long)s->n_frees);
	if (s->n_unmatched_frees)
		fprintf(out, " (%llu %s not allocated while tracking: ignored)",
			(unsigned long long)s->n_unmatched_frees,
			mt_plural(s->n_unmatched_frees, "of a block", "of blocks"));
	fprintf(out, "\n  bytes allocated:    %s\n", mt__report_bytes(a, s->bytes_allocated));
	fprintf(out, "  peak tracked heap:  %s", mt__report_bytes(a, s->peak_heap));
	if (s->n_samples)
		fprintf(out, " (%s)", mt__report_peak_time(t, sizeof(t), s));
	fprintf(out, "\n  peak RSS:           ");
	if (s->n_samples)
		fprintf(out, "%s (at %s)\n", mt__report_bytes(b, s->peak_rss),
			mt__report_seconds(t, sizeof(t), s->peak_rss_time_us));
	else
		fprintf(out, "unknown (no memory samples)\n");
	fprintf(out, "  live at end:        %s in %llu %s\n", mt__report_bytes(a, s->heap_end),
		(unsigned long long)s->leak_count, mt_plural(s->leak_count, "allocation", "allocations"));
	if (s->header.flags & MT_HDR_AGGREGATED)
		fprintf(out, "  temporary:          not kept (an aggregated capture)\n");
	else
		fprintf(out, "  temporary:          %s in %llu %s (freed by their thread with at "
			     "most %llu of its allocations in between)\n",
			mt__report_bytes(a, s->temp_bytes), (unsigned long long)s->temp_count,
			mt_plural(s->temp_count, "allocation", "allocations"),
			(unsigned long long)s->temp_threshold);
	fprintf(out, "  dropped events:     ");
	if (s->have_trailer)
		fprintf(out, "%llu\n", (unsigned long long)s->n_dropped);
	else
		fprintf(out, "unknown (capture is truncated)\n");
	print_coverage(out, s);

	print_histogram(out, s);
	print_allocators(out, s);
	err = print_top(out, s, o->top_n);
	if (err < 0)
		return err;
	if (s->n_diags) {
		fprintf(out, "\nDiagnostics from the tracker\n");
		struct mt_strbuf sb = MT_STRBUF_INIT;
		for (size_t i = 0; i < s->n_diags; i++) {
			mt_strbuf_reset(&sb);
			mt__report_text(&sb, s->diags[i].msg);
			fprintf(out, "  [%s] %s\n", diag_name(s->diags[i].code), sb.len ? sb.buf : "");
		}
		mt_strbuf_release(&sb);
	}
	return ferror(out) ? -EIO : 0;
}

/* ------------------------------------------------------------------------
 * Stats as JSON
 * ---------------------------------------------------------------------- */
static void json_header(struct mt_json *j, const struct mt_snapshot *s, const char *path)
{
	const struct mt_header *h = &s->header;
	char py[32];

	mt_json_str(j, "capture", path ? path : "");
	mt_json_begin_object(j, "header");
	mt_json_u64(j, "version", h->version);
	mt_json_u64(j, "pid", h->pid);
	snprintf(py, sizeof(py), "%u.%u.%u", h->python_hex >> 24, (h->python_hex >> 16) & 0xff,
		 (h->python_hex >> 8) & 0xff);
	if (h->python_hex)
		mt_json_str(j, "python", py);
	else
		mt_json_null(j, "python");
	mt_json_u64(j, "python_hex", h->python_hex);
	if (s->python_allocator[0])
		mt_json_str(j, "python_allocator", s->python_allocator);
	else
		mt_json_null(j, "python_allocator");
	mt_json_u64(j, "start_ns", h->start_ns);
	mt_json_bool(j, "attached", !!(h->flags & MT_HDR_ATTACHED));
	mt_json_bool(j, "python_allocators", !!(h->flags & MT_HDR_PYALLOC));
	mt_json_bool(j, "native", !!(h->flags & MT_HDR_NATIVE));
	if (h->flags & MT_HDR_NATIVE) {
		struct mt_native_stats ns;
		mt_snapshot_native(s, &ns);
		mt_json_begin_object(j, "native_frames");
		mt_json_u64(j, "addresses", ns.addresses);
		mt_json_u64(j, "unresolved", ns.unresolved);
		mt_json_u64(j, "modules_missing", ns.modules_missing);
		mt_json_u64(j, "unpaired_stacks", ns.unpaired);
		mt_json_end(j);
	}
	mt_json_bool(j, "follow_fork", !!(h->flags & MT_HDR_FOLLOW_FORK));
	mt_json_bool(j, "forked", !!(h->flags & MT_HDR_FORKED));
	mt_json_bool(j, "tracker", !!(h->flags & MT_HDR_TRACKER));
	mt_json_u64(j, "interval_ms", h->interval_ms);
	mt_json_u64(j, "page_size", h->page_size);
	mt_json_u64(j, "main_tid", h->main_tid);
	mt_json_begin_array(j, "cmdline");
	/* arguments are NUL-separated: the last one may have no NUL after it */
	for (uint32_t i = 0, start = 0; i <= h->cmdline.len; i++) {
		if (i < h->cmdline.len && h->cmdline.p[i])
			continue;
		if (i < h->cmdline.len || start < i)
			mt_json_strn(j, NULL, (const char *)h->cmdline.p + start, i - start);
		start = i + 1;
	}
	mt_json_end(j);
	mt_json_end(j);
	mt_json_u64(j, "duration_us", s->end_time_us);
	mt_json_begin_object(j, "status");
	mt_json_bool(j, "complete", s->have_trailer && !s->status.truncated);
	mt_json_bool(j, "truncated", s->status.truncated);
	mt_json_bool(j, "corrupt", s->status.stopped);
	mt_json_u64(j, "chunks", s->status.n_chunks);
	mt_json_end(j);
}

static void json_locations(struct mt_json *j, const char *key, const struct mt_location *v, size_t n)
{
	mt_json_begin_array(j, key);
	for (size_t i = 0; i < n; i++) {
		mt_json_begin_object(j, NULL);
		mt_json_str(j, "function", v[i].function);
		mt_json_str(j, "file", v[i].file);
		mt_json_i64(j, "line", v[i].line);
		mt_json_u64(j, "bytes", v[i].own_bytes);
		mt_json_u64(j, "allocations", v[i].own_count);
		mt_json_end(j);
	}
	mt_json_end(j);
}

/* "allocator": the C allocator's count and the capture's share of it at
 * the end and at the peak (coverage.h); null when not known. */
static void json_coverage(struct mt_json *j, const struct mt_snapshot *s)
{
	struct mt_coverage c;

	if (!mt_coverage(s, MT_COVERAGE_END, &c)) {
		mt_json_null(j, "allocator");
		return;
	}
	mt_json_begin_object(j, "allocator");
	mt_json_str(j, "name", "glibc malloc");
	if (s->in_use_start != MT_SAMPLE_UNKNOWN)
		mt_json_u64(j, "in_use_at_start", s->in_use_start);
	else
		mt_json_null(j, "in_use_at_start");
	for (int i = 0; i < 2; i++) {
		if (!mt_coverage(s, i == 0 ? MT_COVERAGE_END : MT_COVERAGE_PEAK, &c)) {
			mt_json_null(j, i == 0 ? "end" : "peak");
			continue;
		}
		mt_json_begin_object(j, i == 0 ? "end" : "peak");
		mt_json_u64(j, "time_us", c.time_us);
		mt_json_u64(j, "in_use", c.in_use);
		mt_json_u64(j, "tracked_bytes", c.bytes);
		mt_json_u64(j, "tracked_chunks", c.chunks);
		mt_json_u64(j, "accounted", c.accounted);
		mt_json_u64(j, "unaccounted", c.unaccounted);
		mt_json_double(j, "share", c.share);
		mt_json_u64(j, "excused", c.excused);
		mt_json_bool(j, "warning", c.warn);
		mt_json_end(j);
	}
	mt_json_end(j);
}

static int stats_json(FILE *out, const struct mt_snapshot *s, const struct mt_report_opts *o)
{
	struct mt_strbuf sb = MT_STRBUF_INIT;
	struct mt_location *locs;
	struct mt_json j;
	ssize_t nl = mt_snapshot_locations_opt(s, MT_VIEW_ALLOCATED, MT_LOC_PYTHON, NULL, &locs);

	if (nl < 0)
		return (int)nl;
	mt_json_init(&j, &sb, 1);
	mt_json_begin_object(&j, NULL);
	json_header(&j, s, o->path);

	mt_json_begin_object(&j, "totals");
	mt_json_u64(&j, "events", s->n_events);
	mt_json_u64(&j, "allocations", s->n_allocs);
	mt_json_u64(&j, "frees", s->n_frees);
	mt_json_u64(&j, "unmatched_frees", s->n_unmatched_frees);
	mt_json_u64(&j, "bytes_allocated", s->bytes_allocated);
	mt_json_u64(&j, "bytes_freed", s->bytes_freed);
	mt_json_u64(&j, "peak_heap", s->peak_heap);
	mt_json_u64(&j, "peak_event", s->peak_event);
	mt_json_u64(&j, "peak_time_us", s->peak_time_us);
	mt_json_u64(&j, "peak_time_until_us", s->peak_until_us);
	if (s->n_samples) {
		mt_json_u64(&j, "peak_rss", s->peak_rss);
		mt_json_u64(&j, "peak_rss_time_us", s->peak_rss_time_us);
	} else {
		mt_json_null(&j, "peak_rss");
		mt_json_null(&j, "peak_rss_time_us");
	}
	mt_json_u64(&j, "live_bytes_at_end", s->heap_end);
	mt_json_u64(&j, "live_allocations_at_end", s->leak_count);
	mt_json_bool(&j, "aggregated", (s->header.flags & MT_HDR_AGGREGATED) != 0);
	if (s->header.flags & MT_HDR_AGGREGATED) {
		mt_json_null(&j, "temporary_bytes");
		mt_json_null(&j, "temporary_allocations");
	} else {
		mt_json_u64(&j, "temporary_bytes", s->temp_bytes);
		mt_json_u64(&j, "temporary_allocations", s->temp_count);
	}
	mt_json_u64(&j, "temporary_allocation_threshold", s->temp_threshold);
	if (s->have_trailer)
		mt_json_u64(&j, "dropped", s->n_dropped);
	else
		mt_json_null(&j, "dropped");
	mt_json_end(&j);
	json_coverage(&j, s);

	mt_json_begin_array(&j, "size_histogram");
	for (int i = 0; i < MT_HIST_BUCKETS; i++) {
		if (!s->size_hist[i])
			continue;
		mt_json_begin_object(&j, NULL);
		mt_json_u64(&j, "min", i ? 1ull << (i - 1) : 0);
		mt_json_u64(&j, "max", i == 0 ? 0 : i == 64 ? UINT64_MAX : (1ull << i) - 1);
		mt_json_u64(&j, "count", s->size_hist[i]);
		mt_json_end(&j);
	}
	mt_json_end(&j);

	mt_json_begin_object(&j, "allocators");
	for (unsigned k = 0; k < MT_ALLOC__COUNT; k++) {
		if (!s->by_allocator_count[k])
			continue;
		mt_json_begin_object(&j, mt_allocator_name(k));
		mt_json_u64(&j, "count", s->by_allocator_count[k]);
		mt_json_u64(&j, "bytes", s->by_allocator_bytes[k]);
		mt_json_end(&j);
	}
	mt_json_end(&j);

	size_t rows = o->top_n && o->top_n < (size_t)nl ? o->top_n : (size_t)nl;
	if (nl > 1)
		qsort(locs, (size_t)nl, sizeof(*locs), mt_location_cmp_own);
	json_locations(&j, "top_by_size", locs, rows);
	if (nl > 1)
		qsort(locs, (size_t)nl, sizeof(*locs), mt_location_cmp_own_count);
	json_locations(&j, "top_by_count", locs, rows);
	free(locs);

	mt_json_begin_array(&j, "threads");
	for (size_t i = 0; i < s->n_threads; i++) {
		const struct mt_thread_info *t = &s->threads[i];
		mt_json_begin_object(&j, NULL);
		mt_json_u64(&j, "index", t->index);
		mt_json_u64(&j, "tid", t->tid);
		mt_json_str(&j, "name", t->name);
		mt_json_u64(&j, "allocations", t->usage.alloc_count);
		mt_json_u64(&j, "bytes_allocated", t->usage.alloc_bytes);
		mt_json_u64(&j, "peak_bytes", t->usage.peak_bytes);
		mt_json_u64(&j, "live_bytes_at_end", t->usage.leak_bytes);
		mt_json_end(&j);
	}
	mt_json_end(&j);

	mt_json_begin_array(&j, "diagnostics");
	for (size_t i = 0; i < s->n_diags; i++) {
		mt_json_begin_object(&j, NULL);
		mt_json_u64(&j, "code", s->diags[i].code);
		mt_json_str(&j, "name", diag_name(s->diags[i].code));
		mt_json_str(&j, "message", s->diags[i].msg);
		mt_json_end(&j);
	}
	mt_json_end(&j);
	mt_json_end(&j);
	mt_strbuf_addch(&sb, '\n');

	return mt_strbuf_write_release(&sb, out);
}
