/* SPDX-License-Identifier: MIT */
/*
 * The summary report: memory per source location at the peak of the
 * tracked heap (or live at the end with MT_VIEW_LEAKS), inclusive
 * ("total": the location or anything it called) and exclusive ("own").
 */
#include "reader/report.h"
#include "util/strbuf.h"

#include <errno.h>  /* EIO */
#include <stdlib.h> /* qsort */

static double pct(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

int mt_report_summary(FILE *out, const struct mt_snapshot *s, const struct mt_report_opts *o)
{
	struct mt_strbuf sb = MT_STRBUF_INIT;
	struct mt_location *locs;
	uint64_t whole, count;
	char a[32], t[32];
	ssize_t n;

	if (o->view == MT_VIEW_LEAKS) {
		whole = s->heap_end;
		count = s->leak_count;
		fprintf(out, "Live at the end of the capture (leaks): %s in %llu allocations\n",
			mt__report_bytes(a, whole), (unsigned long long)count);
		if (s->header.flags & MT_HDR_ATTACHED)
			fprintf(out, "(attached capture: only memory allocated after attaching is seen)\n");
	} else {
		whole = s->peak_heap;
		count = 0;
		fprintf(out, "Peak tracked heap: %s", mt__report_bytes(a, whole));
		if (s->n_samples)
			fprintf(out, " at %s", mt__report_seconds(t, sizeof(t), s->peak_time_us));
		fprintf(out, " (event %llu of %llu)\n", (unsigned long long)s->peak_event,
			(unsigned long long)s->n_events);
	}

	n = mt_snapshot_locations(s, o->view, &locs);
	if (n < 0)
		return (int)n;
	qsort(locs, (size_t)n, sizeof(*locs), mt_location_cmp_total);
	size_t rows = o->top_n && o->top_n < (size_t)n ? o->top_n : (size_t)n;

	fprintf(out, "\n%12s %7s %12s %7s %11s  %s\n", "Total", "Total%", "Own", "Own%", "Allocations",
		"Location");
	for (size_t i = 0; i < rows; i++) {
		const struct mt_location *l = &locs[i];
		char tb[32], ob[32];
		mt_strbuf_reset(&sb);
		mt__report_location(&sb, l->function, l->file, l->line);
		fprintf(out, "%12s %6.2f%% %12s %6.2f%% %11llu  %s\n", mt__report_bytes(tb, l->total_bytes),
			pct(l->total_bytes, whole), mt__report_bytes(ob, l->own_bytes),
			pct(l->own_bytes, whole), (unsigned long long)l->total_count, sb.buf);
	}
	if (!rows)
		fprintf(out, "%12s\n", "(none)");
	else if (rows < (size_t)n)
		fprintf(out, "(%zu more locations; -n 0 shows all)\n", (size_t)n - rows);
	mt_strbuf_release(&sb);
	free(locs);
	return ferror(out) ? -EIO : 0;
}
