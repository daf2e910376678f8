/* SPDX-License-Identifier: MIT */
/*
 * One frame of the live view: what a capture being written says about
 * memory now (the tracked heap and RSS of the last sample, the peak so
 * far) and the locations holding the most memory live at its end, the
 * biggest own first. `memtrace live` draws frames one after the other
 * (cli/cmd-live.c).
 */
#include "reader/report.h"
#include "util/strbuf.h"

#include <errno.h>  /* EIO */
#include <stdlib.h> /* qsort */
#include <string.h> /* strlen */

/* @sb cut to at most @width bytes, whole UTF-8 sequences only (0: as it is) */
static void fit(struct mt_strbuf *sb, unsigned width)
{
	size_t n = sb->len;
	if (!width || n <= width)
		return;
	n = width;
	while (n && ((unsigned char)sb->buf[n] & 0xc0) == 0x80)
		n--;
	sb->buf[n] = '\0';
	sb->len = n;
}

static void line(FILE *out, struct mt_strbuf *sb, unsigned width)
{
	fit(sb, width);
	fprintf(out, "%s\n", sb->buf);
	mt_strbuf_reset(sb);
}

int mt_report_live(FILE *out, const struct mt_snapshot *s, const struct mt_report_opts *o,
		   const struct mt_live_frame *f)
{
	struct mt_strbuf sb = MT_STRBUF_INIT;
	const struct mt_header *h = &s->header;
	struct mt_location *locs;
	char a[32], b[32], c[32], t[32];
	ssize_t n;

	n = mt_snapshot_locations(s, MT_VIEW_LEAKS, &locs);
	if (n < 0)
		return (int)n;
	if (n > 1)
		qsort(locs, (size_t)n, sizeof(*locs), mt_location_cmp_own);

	mt_strbuf_addstr(&sb, "memtrace live: ");
	mt__report_text(&sb, o->path ? o->path : "");
	mt_strbuf_addf(&sb, "  pid %u", h->pid);
	if (h->python_hex)
		mt_strbuf_addf(&sb, "  python %u.%u.%u", h->python_hex >> 24,
			       (h->python_hex >> 16) & 0xff, (h->python_hex >> 8) & 0xff);
	line(out, &sb, f->width);
	mt_strbuf_addf(&sb, "%s", f->state);
	if (f->hint)
		mt_strbuf_addf(&sb, "  (%s)", f->hint);
	line(out, &sb, f->width);

	uint64_t rss = s->n_samples ? s->samples[s->n_samples - 1].rss : 0;
	mt_strbuf_addf(&sb, "time %s   heap %s   peak heap %s   RSS %s",
		       mt__report_seconds(t, sizeof(t), s->end_time_us),
		       mt__report_bytes(a, s->heap_end), mt__report_bytes(b, s->peak_heap),
		       s->n_samples ? mt__report_bytes(c, rss) : "-");
	line(out, &sb, f->width);
	mt_strbuf_addf(&sb, "live blocks %llu   events %llu   dropped %llu",
		       (unsigned long long)s->leak_count, (unsigned long long)s->n_events,
		       (unsigned long long)s->n_dropped);
	line(out, &sb, f->width);

	fprintf(out, "\n%12s %12s %10s  %s\n", "Own live", "Total live", "Own blocks", "Location");
	size_t rows = 0;
	for (size_t i = 0; i < (size_t)n && (!o->top_n || rows < o->top_n); i++) {
		const struct mt_location *l = &locs[i];
		if (!l->own_bytes && !l->own_count)
			break; /* sorted: only callers from here on */
		mt_strbuf_addf(&sb, "%12s %12s %10llu  ", mt__report_bytes(a, l->own_bytes),
			       mt__report_bytes(b, l->total_bytes), (unsigned long long)l->own_count);
		mt__report_location(&sb, l->function, l->file, l->line);
		line(out, &sb, f->width);
		rows++;
	}
	if (!rows)
		fprintf(out, "%12s\n", "(nothing live)");
	mt_strbuf_release(&sb);
	free(locs);
	return ferror(out) ? -EIO : 0;
}
