/* Shared by the memtrace reader fuzz harnesses. */
#ifndef MT_FUZZ_COMMON_H
#define MT_FUZZ_COMMON_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "reader/capture.h"
#include "reader/calltree.h"
#include "reader/report.h"
#include "reader/snapshot.h"

static FILE *fz_null(void)
{
	static FILE *f;
	if (!f) {
		f = fopen("/dev/null", "w");
		if (!f)
			abort();
	}
	return f;
}

static void fz_warn(void *ctx, const char *msg)
{
	(void)ctx;
	(void)msg;
}

/* A memfd holding @data, as a path the reader can open (a regular file,
 * so it takes the mmap path as a real capture does). */
static const char *fz_memfd_path(const uint8_t *data, size_t size)
{
	static int fd = -1;
	static char path[64];
	if (fd < 0) {
		fd = memfd_create("mtfuzz", MFD_CLOEXEC);
		if (fd < 0)
			abort();
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	}
	if (ftruncate(fd, 0) != 0)
		abort();
	size_t off = 0;
	while (off < size) {
		ssize_t n = pwrite(fd, data + off, size - off, (off_t)off);
		if (n <= 0)
			abort();
		off += (size_t)n;
	}
	return path;
}

/* Every report generator over one snapshot, the way the CLI calls them. */
static void fz_reports(const struct mt_snapshot *s, const char *path, unsigned sel)
{
	FILE *out = fz_null();
	struct mt_report_opts o = { .path = path, .temp_threshold = 1 };

	o.top_n = 5, o.view = MT_VIEW_ALLOCATED;
	mt_report_stats(out, s, &o);
	o.json = 1, o.top_n = sel & 1 ? 0 : 5;
	mt_report_stats(out, s, &o);
	for (int v = 0; v < 4; v++) {
		o.view = (enum mt_view)v;
		o.json = (sel >> 1) & 1;
		o.top_n = 25;
		mt_report_summary(out, s, &o);
		o.top_n = sel & 4 ? 0 : 10;
		mt_report_tree(out, s, &o);
	}
	o.json = 0;
	o.view = (enum mt_view)((sel >> 3) & 3);
	o.inverted = (sel >> 5) & 1;
	o.split_threads = (sel >> 6) & 1;
	if (sel & 0x80)
		o.max_nodes = 8; /* exercise pruning hard */
	mt_report_flamegraph(out, s, &o);
	mt_report_table(out, s, &o);
}

#endif
