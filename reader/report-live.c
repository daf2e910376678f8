/* SPDX-License-Identifier: MIT */
/*
 * One frame of the live view: what a capture being written says about
 * memory now (the tracked heap and RSS of the last sample, the peak so
 * far) and the locations holding the most memory live at its end, the
 * biggest own first, or those that grew most since an earlier moment,
 * or the call paths whose live bytes rose most steadily across the
 * capture so far (reader/growth.h), and what the refresh read. `memtrace live` draws frames one after the
 * other (cli/cmd-live.c).
 */
#include "reader/growth.h"
#include "reader/report.h"
#include "util/plural.h"
#include "util/strbuf.h"

#include <errno.h>  /* EIO */
#include <stdio.h>  /* snprintf */
#include <stdlib.h> /* calloc, qsort */
#include <string.h> /* strcmp, strdup */

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

/* ------------------------------------------------------------------------
 * Growth: each location's own live bytes at one moment, to compare later
 * frames with (their snapshots are other objects: the names are copied).
 * ---------------------------------------------------------------------- */
struct base_ent {
	char *function, *file;
	int line;
	uint64_t own;
};

struct mt_live_base {
	struct base_ent *v;
	size_t n;
};

static int ent_cmp(const char *fa, const char *la, int na, const char *fb, const char *lb, int nb)
{
	int c = strcmp(fa, fb);
	if (!c)
		c = strcmp(la, lb);
	return c ? c : (na > nb) - (na < nb);
}

static int base_cmp(const void *a, const void *b)
{
	const struct base_ent *x = a, *y = b;
	return ent_cmp(x->function, x->file, x->line, y->function, y->file, y->line);
}

void mt_live_base_free(struct mt_live_base *b)
{
	if (!b)
		return;
	for (size_t i = 0; i < b->n; i++) {
		free(b->v[i].function);
		free(b->v[i].file);
	}
	free(b->v);
	free(b);
}

struct mt_live_base *mt_live_base_new(const struct mt_snapshot *s, uint32_t thread)
{
	struct mt_live_base *b = calloc(1, sizeof(*b));
	struct mt_location *locs = NULL;
	ssize_t n = mt_snapshot_thread_locations(s, MT_VIEW_LEAKS, 0, thread, NULL, &locs);

	if (!b || n < 0)
		goto fail;
	b->v = calloc((size_t)n + 1, sizeof(*b->v));
	if (!b->v)
		goto fail;
	for (ssize_t i = 0; i < n; i++) {
		if (!locs[i].own_bytes)
			continue;
		struct base_ent *e = &b->v[b->n++];
		e->function = strdup(locs[i].function);
		e->file = strdup(locs[i].file);
		e->line = locs[i].line;
		e->own = locs[i].own_bytes;
		if (!e->function || !e->file)
			goto fail;
	}
	qsort(b->v, b->n, sizeof(*b->v), base_cmp);
	free(locs);
	return b;
fail:
	free(locs);
	mt_live_base_free(b);
	return NULL;
}

static uint64_t base_own(const struct mt_live_base *b, const struct mt_location *l)
{
	size_t lo = 0, hi = b->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct base_ent *e = &b->v[mid];
		int c = ent_cmp(l->function, l->file, l->line, e->function, e->file, e->line);
		if (!c)
			return e->own;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return 0;
}

/* a location and its growth, for sorting by growth */
struct grown {
	const struct mt_location *l;
	int64_t growth;
};

static int grown_cmp(const void *a, const void *b)
{
	const struct grown *x = a, *y = b;
	if (x->growth != y->growth)
		return x->growth < y->growth ? 1 : -1;
	return mt_location_cmp_own(x->l, y->l);
}

static int grown_cmp_total(const void *a, const void *b)
{
	return mt_location_cmp_total(((const struct grown *)a)->l, ((const struct grown *)b)->l);
}

static int grown_cmp_blocks(const void *a, const void *b)
{
	return mt_location_cmp_own_count(((const struct grown *)a)->l,
					 ((const struct grown *)b)->l);
}

/* "+1.50 MiB", "-3.00 KiB", "0 B" into @buf (>= 40 bytes) */
static char *signed_bytes(char *buf, int64_t d)
{
	char b[32];
	mt__report_bytes(b, (unsigned long long)(d < 0 ? -(uint64_t)d : (uint64_t)d));
	snprintf(buf, 40, "%s%s", d > 0 ? "+" : d < 0 ? "-" : "", b);
	return buf;
}

ssize_t mt_live_locations(const struct mt_snapshot *s, uint32_t thread, struct mt_location **out)
{
	ssize_t n = mt_snapshot_thread_locations(s, MT_VIEW_LEAKS, 0, thread, NULL, out);

	if (n > 1)
		qsort(*out, (size_t)n, sizeof(**out), mt_location_cmp_own);
	return n;
}

ssize_t mt_live_steady(const struct mt_snapshot *s, struct mt_growth_row **out)
{
	const struct mt_growth *g = mt_snapshot_growth_sofar(s);

	*out = NULL;
	if (!g)
		return -EINVAL;
	return mt_growth_rank_at(g, s->end_time_us, out);
}

/* The frame @up callers above stack @id's innermost, 0 past its root. */
static uint32_t stack_up(const struct mt_snapshot *s, uint32_t id, unsigned up)
{
	while (id && up--)
		id = mt_snapshot_stack_parent(s, id);
	return id;
}

static int frame_eq(const struct mt_snapshot *s, uint32_t a, uint32_t b)
{
	if (a == b)
		return 1;
	if (!a || !b)
		return 0;
	struct mt_frame x, y;
	mt_snapshot_stack_frame(s, a, &x);
	mt_snapshot_stack_frame(s, b, &y);
	return x.line == y.line && x.native == y.native && !strcmp(x.function, y.function) &&
	       !strcmp(x.file, y.file);
}

/* Rows @a and @b read the same with @up callers shown. */
static int rows_alike(const struct mt_snapshot *s, uint32_t a, uint32_t b, unsigned up)
{
	for (unsigned k = 0; k <= up; k++)
		if (!frame_eq(s, stack_up(s, a, k), stack_up(s, b, k)))
			return 0;
	return 1;
}

#define STEADY_CALLERS 3 /* at most, to tell apart paths that end alike */

static void steady_location(struct mt_strbuf *sb, const struct mt_snapshot *s, uint32_t id,
			    unsigned up)
{
	for (unsigned k = 0; k <= up && id; k++, id = mt_snapshot_stack_parent(s, id)) {
		struct mt_frame fr;
		mt_snapshot_stack_frame(s, id, &fr);
		if (k)
			mt_strbuf_addstr(sb, " <- ");
		if (fr.native)
			mt_strbuf_addstr(sb, "[C] ");
		mt__report_location(sb, fr.function, fr.file, fr.line);
	}
}

/* The table of the call paths that rose, the steadiest and biggest rise
 * first: each by its innermost frame, and by as many of its callers as
 * tell it apart from the other rows shown. Returns the rows shown. */
static size_t steady_table(FILE *out, struct mt_strbuf *sb, const struct mt_snapshot *s,
			   const struct mt_live_frame *f, size_t skip, size_t shown)
{
	const struct mt_growth *g = mt_snapshot_growth_sofar(s);
	const struct mt_growth_row *rows = f->steady + skip;
	char a[32], b[40], c[40], t[32];

	unsigned *up = calloc(shown ? shown : 1, sizeof(*up)); /* NULL: no callers shown */
	for (unsigned level = 0; up && level < STEADY_CALLERS; level++) {
		int more = 0;
		for (size_t i = 0; i < shown; i++) {
			if (up[i] != level || !rows[i].stack)
				continue;
			for (size_t j = 0; j < shown; j++)
				if (j != i && rows[j].stack &&
				    rows_alike(s, rows[i].stack, rows[j].stack, level)) {
					up[i] = level + 1;
					more = 1;
					break;
				}
		}
		if (!more)
			break;
	}

	/* what the ranking stands on: the samples so far, and the end */
	uint64_t span = 0, k = g ? mt_growth_points_at(g, s->end_time_us, &span) : 0;
	mt_strbuf_addf(sb, "rise fitted over %llu %s in %s", (unsigned long long)k,
		       mt_plural(k, "point", "points"), mt__report_seconds(t, sizeof(t), span));
	line(out, sb, f->width);
	fputc('\n', out);
	mt_strbuf_addf(sb, "%12s %12s %12s %8s %5s  %s", "Live", "Rise", "Per hour", "Steady*",
		       "r", "Location");
	line(out, sb, f->width);
	for (size_t i = 0; i < shown; i++) {
		const struct mt_growth_row *r = &rows[i];
		mt_strbuf_addf(sb, "%12s %12s %12s %7.0f%% %5.2f  ",
			       mt__report_bytes(a, r->end_bytes),
			       signed_bytes(b, (int64_t)(r->rise < 0 ? r->rise - 0.5 : r->rise + 0.5)),
			       signed_bytes(c, (int64_t)(r->slope * 3600 + 0.5)), r->steady * 100,
			       r->r);
		if (!r->stack)
			mt_strbuf_addstr(sb, "<no Python frames>");
		else
			steady_location(sb, s, r->stack, up ? up[i] : 0);
		line(out, sb, f->width);
	}
	free(up);
	return shown;
}

/* The tracked heap over the samples so far, as memray's view plots it:
 * a column for each stretch of time, as high as the most the heap held
 * in it. Glyphs of one column each: block elements (three bytes each in
 * UTF-8), or letters of ASCII; the line fits @f->width columns. */
static void heap_plot(FILE *out, struct mt_strbuf *sb, const struct mt_snapshot *s,
		      const struct mt_live_frame *f)
{
	static const char *const blocks[] = { "\u2581", "\u2582", "\u2583", "\u2584",
					      "\u2585", "\u2586", "\u2587", "\u2588" };
	static const char ascii[] = "._-=+*#@";
	char a[32], t[32];

	if (s->n_samples < 2) {
		mt_strbuf_addstr(sb, "heap over time: (not sampled yet)");
		line(out, sb, f->width);
		return;
	}
	/* the samples, and the peak and the end between and after them; the
	 * plot's top is the most of all of them (an aggregated capture's
	 * figures are as its TOTALS record says, which may disagree) */
	uint64_t t0 = s->samples[0].time_us, t1 = s->samples[s->n_samples - 1].time_us;
	uint64_t top = s->peak_heap > s->heap_end ? s->peak_heap : s->heap_end;
	t1 = s->end_time_us > t1 ? s->end_time_us : t1;
	uint64_t span = t1 - t0;
	for (size_t i = 0; i < s->n_samples; i++)
		top = s->samples[i].heap > top ? s->samples[i].heap : top;
	mt_strbuf_addf(sb, "heap over %s, up to %s: ", mt__report_seconds(t, sizeof(t), span),
		       mt__report_bytes(a, top));
	size_t cols = f->width ? (f->width > sb->len ? f->width - sb->len : 0) : 60;
	if (cols > 200)
		cols = 200;
	if ((uint64_t)cols > s->n_samples)
		cols = s->n_samples; /* a column has a sample at least */
	if (!cols) { /* no room left */
		line(out, sb, f->width);
		return;
	}
	uint64_t col_max[200];
	for (size_t k = 0; k < cols; k++)
		col_max[k] = UINT64_MAX; /* no sample in it yet */
	for (size_t i = 0; i < s->n_samples + 2; i++) {
		uint64_t at = i < s->n_samples ? s->samples[i].time_us
			      : i == s->n_samples ? s->peak_time_us : t1;
		uint64_t heap = i < s->n_samples ? s->samples[i].heap
				: i == s->n_samples ? s->peak_heap : s->heap_end;
		at = at > t0 ? at - t0 : 0;
		size_t k = span ? (size_t)((double)at / (double)span * (double)cols) : 0;
		k = k < cols ? k : cols - 1;
		if (col_max[k] == UINT64_MAX || heap > col_max[k])
			col_max[k] = heap;
	}
	for (size_t k = 0; k < cols; k++) {
		if (col_max[k] == UINT64_MAX) /* a stretch with no sample: as before it */
			col_max[k] = k ? col_max[k - 1] : 0;
		int lv = top ? (int)((double)col_max[k] / (double)top * 7 + 0.5) : 0;
		if (f->utf8)
			mt_strbuf_addstr(sb, blocks[lv]);
		else
			mt_strbuf_addch(sb, ascii[lv]);
	}
	fprintf(out, "%s\n", sb->buf); /* fits: its glyphs take a column each */
	mt_strbuf_reset(sb);
}

/* Whether location row @r has something to show in the frame's sort. */
static int shows(const struct mt_live_frame *f, const struct grown *r)
{
	const struct mt_location *l = r->l;
	if (f->base && f->by_growth)
		return r->growth > 0;
	if (f->by_total)
		return l->total_bytes || l->total_count;
	return l->own_bytes || l->own_count;
}

/* Which threads' memory is shown, and which rows of how many. */
static void view_line(struct mt_strbuf *sb, const struct mt_snapshot *s,
		      const struct mt_live_frame *f, size_t skip, size_t shown, size_t avail)
{
	size_t k = 0;
	char a[32];

	while (f->split && k < s->n_threads && s->threads[k].index != f->thread)
		k++;
	if (!f->split || k == s->n_threads) {
		mt_strbuf_addf(sb, "all threads (%zu)", s->n_threads);
	} else {
		const struct mt_thread_info *t = &s->threads[k];
		mt_strbuf_addf(sb, "thread %zu of %zu: ", k + 1, s->n_threads);
		if (t->tid)
			mt_strbuf_addf(sb, "tid %llu", (unsigned long long)t->tid);
		else
			mt_strbuf_addf(sb, "#%u", t->index);
		if (*t->name) {
			mt_strbuf_addstr(sb, " \"");
			mt__report_text(sb, t->name);
			mt_strbuf_addstr(sb, "\"");
		}
		mt_strbuf_addf(sb, ", %s live in %llu %s", mt__report_bytes(a, t->usage.leak_bytes),
			       (unsigned long long)t->usage.leak_count,
			       mt_plural(t->usage.leak_count, "block", "blocks"));
		if (f->by_steady)
			mt_strbuf_addstr(sb, " (the rows: of all threads)");
	}
	if (skip || shown < avail)
		mt_strbuf_addf(sb, "   rows %zu-%zu of %zu", shown ? skip + 1 : skip, skip + shown,
			       avail);
}

int mt_report_live(FILE *out, const struct mt_snapshot *s, const struct mt_report_opts *o,
		   const struct mt_live_frame *f)
{
	struct mt_strbuf sb = MT_STRBUF_INIT;
	const struct mt_header *h = &s->header;
	struct mt_location *locs = NULL;
	char a[32], b[32], c[40], t[32];
	ssize_t n = 0;

	if (f->by_steady) {
		/* call paths, not locations */
	} else if (f->locs) {
		n = (ssize_t)f->n_locs;
		if (!(locs = malloc(((size_t)n + 1) * sizeof(*locs))))
			return -ENOMEM;
		memcpy(locs, f->locs, (size_t)n * sizeof(*locs));
	} else if ((n = mt_live_locations(s, f->split ? f->thread : MT_ALL_THREADS, &locs)) < 0) {
		return (int)n;
	}
	/* in the order shown: by own live bytes, or by growth */
	struct grown *g = malloc(((size_t)n + 1) * sizeof(*g));
	if (!g) {
		free(locs);
		return -ENOMEM;
	}
	for (ssize_t i = 0; i < n; i++) {
		g[i].l = &locs[i];
		g[i].growth = f->base ? (int64_t)(locs[i].own_bytes - base_own(f->base, &locs[i])) : 0;
	}
	if (f->base && f->by_growth && n > 1)
		qsort(g, (size_t)n, sizeof(*g), grown_cmp);
	else if (f->by_total && n > 1)
		qsort(g, (size_t)n, sizeof(*g), grown_cmp_total);
	else if (f->by_blocks && n > 1)
		qsort(g, (size_t)n, sizeof(*g), grown_cmp_blocks);

	mt_strbuf_addstr(&sb, "memtrace live: ");
	mt__report_text(&sb, o->path ? o->path : "");
	mt_strbuf_addf(&sb, "  pid %u", h->pid);
	if (h->python_hex)
		mt_strbuf_addf(&sb, "  python %u.%u.%u", h->python_hex >> 24,
			       (h->python_hex >> 16) & 0xff, (h->python_hex >> 8) & 0xff);
	if (h->cmdline.len) { /* memray's view shows the command too */
		mt_strbuf_addstr(&sb, "  command ");
		mt__report_cmdline_text(&sb, &h->cmdline);
	}
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
	heap_plot(out, &sb, s, f);
	mt_strbuf_addf(&sb, "live blocks %llu   events %llu   dropped %llu",
		       (unsigned long long)s->leak_count, (unsigned long long)s->n_events,
		       (unsigned long long)s->n_dropped);
	line(out, &sb, f->width);
	/* a refresh reads what the capture gained since the last one */
	mt_strbuf_addf(&sb, "read %llu %s, %llu %s %s (%.1f ms)", (unsigned long long)f->read_chunks,
		       mt_plural(f->read_chunks, "chunk", "chunks"),
		       (unsigned long long)f->read_events,
		       mt_plural(f->read_events, "event", "events"),
		       f->read_from_start ? "from the start" : "since the last refresh",
		       (double)f->read_us / 1000);
	if (f->interval > 0)
		mt_strbuf_addf(&sb, ", every %g s", f->interval);
	line(out, &sb, f->width);

	/* the rows there are (sorted: they end at the first with nothing to
	 * show), and those shown */
	size_t avail = 0;
	if (f->by_steady)
		avail = f->n_steady;
	else
		while (avail < (size_t)n && shows(f, &g[avail]))
			avail++;
	size_t skip = f->first_row ? *f->first_row : 0;
	if (o->top_n && avail > o->top_n) {
		if (skip > avail - o->top_n)
			skip = avail - o->top_n;
	} else {
		skip = 0;
	}
	if (f->first_row)
		*f->first_row = skip;
	size_t shown = avail - skip;
	if (o->top_n && shown > o->top_n)
		shown = o->top_n;
	view_line(&sb, s, f, skip, shown, avail);
	line(out, &sb, f->width);

	if (f->by_steady) {
		if (!steady_table(out, &sb, s, f, skip, shown))
			fprintf(out, "%12s\n", "(nothing rose)");
		mt_strbuf_release(&sb);
		free(g);
		free(locs);
		return ferror(out) ? -EIO : 0;
	}
	fputc('\n', out);
	/* the column sorted on, when not the first, is marked */
	const char *total = f->by_total ? "Total live*" : "Total live";
	const char *blocks = f->by_blocks ? "Own blocks*" : "Own blocks";
	if (f->base)
		mt_strbuf_addf(&sb, "%12s %12s %12s %11s  %s", "Own live", total,
			       f->by_growth ? "Growth*" : "Growth", blocks, "Location");
	else
		mt_strbuf_addf(&sb, "%12s %12s %11s  %s", "Own live", total, blocks, "Location");
	line(out, &sb, f->width);
	for (size_t i = skip; i < skip + shown; i++) {
		const struct mt_location *l = g[i].l;
		mt_strbuf_addf(&sb, "%12s %12s ", mt__report_bytes(a, l->own_bytes),
			       mt__report_bytes(b, l->total_bytes));
		if (f->base)
			mt_strbuf_addf(&sb, "%12s ", signed_bytes(c, g[i].growth));
		mt_strbuf_addf(&sb, "%11llu  ", (unsigned long long)l->own_count);
		if (l->native)
			mt_strbuf_addstr(&sb, "[C] "); /* a native frame */
		mt__report_location(&sb, l->function, l->file, l->line);
		line(out, &sb, f->width);
	}
	if (!shown)
		fprintf(out, "%12s\n", f->base && f->by_growth ? "(nothing grew)" : "(nothing live)");
	mt_strbuf_release(&sb);
	free(g);
	free(locs);
	return ferror(out) ? -EIO : 0;
}
