/* SPDX-License-Identifier: MIT */
/*
 * The stats report (header, totals, size histogram, allocators, top
 * locations, peaks, dropped events, diagnostics) and the helpers every
 * text report shares: loading a capture and formatting sizes and places.
 */
#include "reader/report.h"
#include "format/error.h"
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

void mt__report_location(struct mt_strbuf *sb, const char *function, const char *file, int line)
{
	mt_strbuf_addstr(sb, function);
	if (!file || !file[0])
		return;
	mt_strbuf_addf(sb, " at %s", file);
	if (line > 0)
		mt_strbuf_addf(sb, ":%d", line);
}

int mt_report_load(struct mt_snapshot *s, const char *path,
		   void (*warn)(void *ctx, const char *msg), void *ctx)
{
	struct mt_capture *c;
	int err = mt_capture_open(path, &c);

	if (err < 0)
		return err;
	mt_capture_set_warn(c, warn, ctx);
	err = mt_snapshot_build(s, c);
	mt_capture_close(c);
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
				 "(this memtrace reads version %d)",
				 path, (unsigned)(h[8] | h[9] << 8), MT_FORMAT_VERSION);
			return buf;
		}
	}
	if (err == -MT_EFORMAT) {
		struct stat sb;
		int empty = stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size == 0;
		snprintf(buf, len, "cannot read '%s': %s", path,
			 empty ? "file is empty" : "not a memtrace capture");
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
static void add_cmdline(struct mt_strbuf *sb, const struct mt_bytes *c)
{
	for (uint32_t i = 0; i < c->len; i++) {
		uint8_t ch = c->p[i];
		if (ch == 0) {
			if (i + 1 < c->len)
				mt_strbuf_addch(sb, ' ');
		} else if (ch < 0x20 || ch == 0x7f) {
			mt_strbuf_addf(sb, "\\x%02x", ch);
		} else {
			mt_strbuf_addch(sb, ch);
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
	add_cmdline(&sb, &h->cmdline);
	fprintf(out, "Capture: %s\n", path ? path : "");
	fprintf(out, "  pid:                %u\n", h->pid);
	fprintf(out, "  command line:       %s\n", sb.len ? sb.buf : "(unknown)");
	if (h->python_hex)
		fprintf(out, "  python:             %u.%u.%u\n", h->python_hex >> 24,
			(h->python_hex >> 16) & 0xff, (h->python_hex >> 8) & 0xff);
	else
		fprintf(out, "  python:             unknown\n");
	fprintf(out, "  started:            %s\n", when);
	fprintf(out, "  duration:           %s%s\n", mt__report_seconds(dur, sizeof(dur), s->end_time_us),
		s->have_trailer ? "" : " (at least; capture is truncated)");
	fprintf(out, "  tracking:           %s\n",
		h->flags & MT_HDR_ATTACHED ? "attached to a running process" : "from process start");
	fprintf(out, "  options:            python allocators %s, native stacks %s, memory interval %u ms\n",
		h->flags & MT_HDR_PYALLOC ? "traced" : "not traced",
		h->flags & MT_HDR_NATIVE ? "on" : "off", h->interval_ms);
	fprintf(out, "  threads:            %zu\n", s->n_threads);
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
		fprintf(out, "  %-18s %12llu  %s\n", mt_allocator_name(k),
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
	ssize_t nl = mt_snapshot_locations(s, MT_VIEW_ALLOCATED, &locs);

	if (nl < 0)
		return (int)nl;
	for (int pass = 0; pass < 2; pass++) {
		size_t rows = n && n < (size_t)nl ? n : (size_t)nl;
		qsort(locs, (size_t)nl, sizeof(*locs),
		      pass == 0 ? mt_location_cmp_own : mt_location_cmp_own_count);
		fprintf(out, "\nTop %zu locations by %s\n", rows, pass == 0 ? "size" : "count");
		if (!rows)
			fprintf(out, "  (none)\n");
		for (size_t i = 0; i < rows; i++) {
			char b[32];
			mt_strbuf_reset(&sb);
			mt__report_location(&sb, locs[i].function, locs[i].file, locs[i].line);
			fprintf(out, "  %3zu. %12s %12llu allocs  %s\n", i + 1,
				mt__report_bytes(b, locs[i].own_bytes),
				(unsigned long long)locs[i].own_count, sb.buf);
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

int mt_report_stats(FILE *out, const struct mt_snapshot *s, const struct mt_report_opts *o)
{
	char a[32], b[32], t[32];
	int err;

	print_header(out, s, o->path);
	fprintf(out, "\nTotals\n");
	fprintf(out, "  allocations:        %llu\n", (unsigned long long)s->n_allocs);
	fprintf(out, "  frees:              %llu", (unsigned long long)s->n_frees);
	if (s->n_unmatched_frees)
		fprintf(out, " (%llu of memory not allocated while tracking: ignored)",
			(unsigned long long)s->n_unmatched_frees);
	fprintf(out, "\n  bytes allocated:    %s\n", mt__report_bytes(a, s->bytes_allocated));
	fprintf(out, "  peak tracked heap:  %s", mt__report_bytes(a, s->peak_heap));
	if (s->n_samples)
		fprintf(out, " (at %s)", mt__report_seconds(t, sizeof(t), s->peak_time_us));
	fprintf(out, "\n  peak RSS:           ");
	if (s->n_samples)
		fprintf(out, "%s (at %s)\n", mt__report_bytes(b, s->peak_rss),
			mt__report_seconds(t, sizeof(t), s->peak_rss_time_us));
	else
		fprintf(out, "unknown (no memory samples)\n");
	fprintf(out, "  live at end:        %s in %llu allocations\n", mt__report_bytes(a, s->heap_end),
		(unsigned long long)s->leak_count);
	fprintf(out, "  dropped events:     ");
	if (s->have_trailer)
		fprintf(out, "%llu\n", (unsigned long long)s->n_dropped);
	else
		fprintf(out, "unknown (capture is truncated)\n");

	print_histogram(out, s);
	print_allocators(out, s);
	err = print_top(out, s, o->top_n);
	if (err < 0)
		return err;
	if (s->n_diags) {
		fprintf(out, "\nDiagnostics from the tracker\n");
		for (size_t i = 0; i < s->n_diags; i++)
			fprintf(out, "  [%s] %s\n", diag_name(s->diags[i].code), s->diags[i].msg);
	}
	return ferror(out) ? -EIO : 0;
}
