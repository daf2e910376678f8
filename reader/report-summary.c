/* SPDX-License-Identifier: MIT */
/*
 * The summary report: memory per source location at the peak of the
 * tracked heap (or live at the end with MT_VIEW_LEAKS), inclusive
 * ("total": the location or anything it called) and exclusive ("own").
 */
#include "reader/report.h"
#include "util/json.h"
#include "util/plural.h"
#include "util/strbuf.h"

#include <errno.h>  /* EIO */
#include <stdlib.h> /* qsort */

static double pct(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

static int summary_json(FILE *out, const struct mt_snapshot *s, const struct mt_report_opts *o,
			const struct mt_location *locs, size_t n, size_t rows, int hidden)
{
	struct mt_strbuf sb = MT_STRBUF_INIT;
	struct mt_json j;
	int leaks = o->view == MT_VIEW_LEAKS, temp = o->view == MT_VIEW_TEMPORARY;

	mt_json_init(&j, &sb, 1);
	mt_json_begin_object(&j, NULL);
	mt_json_str(&j, "capture", o->path ? o->path : "");
	mt_json_str(&j, "view", mt__view_name(o->view));
	mt_json_u64(&j, "total_bytes", leaks ? s->heap_end : temp ? s->temp_bytes : s->peak_heap);
	if (leaks) {
		mt_json_u64(&j, "total_allocations", s->leak_count);
	} else if (temp) {
		mt_json_u64(&j, "total_allocations", s->temp_count);
		mt_json_u64(&j, "temporary_allocation_threshold", s->temp_threshold);
	} else {
		/* live at the peak: every location's own, as the other views' */
		uint64_t count = 0;
		for (size_t i = 0; i < n; i++)
			count += locs[i].own_count;
		mt_json_u64(&j, "total_allocations", count);
		mt_json_u64(&j, "peak_event", s->peak_event);
		mt_json_u64(&j, "peak_time_us", s->peak_time_us);
	}
	mt_json_bool(&j, "truncated", s->status.truncated);
	mt_json_bool(&j, "frames_hidden", hidden); /* reader/frames.h's, left out */
	mt_json_begin_array(&j, "rows");
	for (size_t i = 0; i < rows; i++) {
		const struct mt_location *l = &locs[i];
		mt_json_begin_object(&j, NULL);
		mt_json_str(&j, "function", l->function);
		if (l->native)
			mt_json_bool(&j, "native", 1);
		mt_json_str(&j, "file", l->file);
		mt_json_i64(&j, "line", l->line);
		mt_json_u64(&j, "total_bytes", l->total_bytes);
		mt_json_u64(&j, "total_allocations", l->total_count);
		mt_json_u64(&j, "own_bytes", l->own_bytes);
		mt_json_u64(&j, "own_allocations", l->own_count);
		mt_json_end(&j);
	}
	mt_json_end(&j);
	mt_json_end(&j);
	mt_strbuf_addch(&sb, '\n');
	return mt_strbuf_write_release(&sb, out);
}

int mt_report_summary(FILE *out, const struct mt_snapshot *s, const struct mt_report_opts *o)
{
	struct mt_strbuf sb = MT_STRBUF_INIT;
	struct mt_location *locs;
	uint64_t whole;
	char a[32], t[64];
	size_t hidden = 0;
	ssize_t n;

	n = mt_snapshot_locations_opt(s, o->view, o->show_hidden ? 0 : MT_LOC_HIDE, &hidden, &locs);
	if (n < 0)
		return (int)n;
	unsigned col = o->sort_column ? o->sort_column : 1;
	if (n > 1)
		qsort(locs, (size_t)n, sizeof(*locs),
		      col <= 2 ? mt_location_cmp_total
		      : col <= 4 ? mt_location_cmp_own : mt_location_cmp_total_count);
	size_t rows = o->top_n && o->top_n < (size_t)n ? o->top_n : (size_t)n;
	if (o->json) {
		int err = summary_json(out, s, o, locs, (size_t)n, rows, hidden > 0);
		free(locs);
		return err;
	}
	if (o->view == MT_VIEW_LEAKS) {
		whole = s->heap_end;
		fprintf(out, "Live at the end of the capture (leaks): %s in %llu %s\n",
			mt__report_bytes(a, whole), (unsigned long long)s->leak_count,
			mt_plural(s->leak_count, "allocation", "allocations"));
		if (s->header.flags & MT_HDR_ATTACHED)
			fprintf(out, "(attached capture: only memory allocated after attaching is seen)\n");
		else if (s->header.flags & MT_HDR_TRACKER)
			fprintf(out, "(Tracker capture: only memory allocated in its block is seen)\n");
	} else if (o->view == MT_VIEW_TEMPORARY) {
		whole = s->temp_bytes;
		fprintf(out, "Temporary allocations (freed by their thread with at most %llu of its "
			     "allocations in between): %s in %llu %s\n",
			(unsigned long long)s->temp_threshold, mt__report_bytes(a, whole),
			(unsigned long long)s->temp_count,
			mt_plural(s->temp_count, "allocation", "allocations"));
	} else {
		whole = s->peak_heap;
		fprintf(out, "Peak tracked heap: %s", mt__report_bytes(a, whole));
		if (s->n_samples)
			fprintf(out, " %s", mt__report_peak_time(t, sizeof(t), s));
		if (s->header.flags & MT_HDR_AGGREGATED)
			fprintf(out, " (aggregated capture, %llu events)\n",
				(unsigned long long)s->n_events);
		else
			fprintf(out, " (event %llu of %llu)\n", (unsigned long long)s->peak_event,
				(unsigned long long)s->n_events);
	}
	/* memray's columns, the one sorted on in <> as memray marks it */
	static const char *const heads[] = { "Total", "Total%", "Own", "Own%", "Allocs" };
	char head[5][16];
	for (unsigned i = 0; i < 5; i++)
		snprintf(head[i], sizeof(head[i]), i + 1 == col ? "<%s>" : "%s", heads[i]);
	fprintf(out, "\n%12s %8s %12s %8s %10s  %s\n", head[0], head[1], head[2], head[3], head[4],
		"Location");
	for (size_t i = 0; i < rows; i++) {
		const struct mt_location *l = &locs[i];
		char tb[32], ob[32];
		mt_strbuf_reset(&sb);
		if (l->native)
			mt_strbuf_addstr(&sb, "[C] "); /* a native frame */
		mt__report_location(&sb, l->function, l->file, l->line);
		fprintf(out, "%12s %7.2f%% %12s %7.2f%% %10llu  %s\n", mt__report_bytes(tb, l->total_bytes),
			pct(l->total_bytes, whole), mt__report_bytes(ob, l->own_bytes),
			pct(l->own_bytes, whole), (unsigned long long)l->total_count, sb.buf);
	}
	if (!rows)
		fprintf(out, "%12s\n", "(none)");
	else if (rows < (size_t)n)
		fprintf(out, "(%zu more %s; -n 0 shows all)\n", (size_t)n - rows,
			mt_plural((size_t)n - rows, "location", "locations"));
	if (hidden)
		fprintf(out, "(import-system and memtrace frames hidden; --show-hidden-frames shows "
			     "them)\n");
	mt_strbuf_release(&sb);
	free(locs);
	return ferror(out) ? -EIO : 0;
}
