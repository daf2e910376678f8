/* SPDX-License-Identifier: MIT */
#ifndef MT_READER_REPORT_H
#define MT_READER_REPORT_H
/*
 * Text reports. Each consumes a snapshot (parse consumes the record
 * stream) and writes to a stdio stream; none prints anywhere else or
 * exits. Returns 0, or -errno when writing or allocation failed.
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint64_t */
#include <stdio.h>  /* FILE */

#include "reader/capture.h"
#include "reader/diff.h"
#include "reader/locations.h"
#include "reader/snapshot.h"

struct mt_report_opts {
	unsigned top_n;     /* rows per table; 0 = all */
	enum mt_view view;  /* summary, tree, flamegraph, table: which memory */
	const char *path;   /* the capture: loaded from here and shown */
	int json;           /* one JSON object instead of text */
	uint64_t temp_threshold; /* for MT_VIEW_TEMPORARY: at most this many allocations of the thread in between */
	int inverted;       /* flamegraph: callers below callees at first */
	int split_threads;  /* flamegraph: a thread filter in the page; table: a row per thread */
	double min_fraction; /* flamegraph: merge nodes below this share; 0 = default */
	unsigned max_nodes;  /* flamegraph: node budget; 0 = default */
	int open_flags;      /* mt_capture_open_flags()'s, for mt_report_load() */
	int python_only;     /* native stacks: show the Python frames only */
	int growth;          /* follow each stack's live bytes (mt_report_growth()) */
	int temporal;        /* flamegraph: when each path's memory was live, a range chosen in the page */
	int html;            /* growth: an HTML page rather than text */
	/* for mt_report_load(): how far the read of the capture has got
	 * (mt_capture_set_progress()); NULL for nothing */
	void (*progress)(void *ctx, uint64_t done, uint64_t total);
	void *progress_ctx;
	int memray_stats;    /* stats: memray's JSON layout (mt_report_stats_memray());
			      * for mt_report_load(): count exact sizes, refuse an
			      * aggregated capture */
	unsigned sort_column; /* summary: memray's -s (1, 2 total bytes; 3, 4 own
			       * bytes; 5 allocations, its callees' included); 0 = 1 */
	unsigned max_points;  /* flamegraph: points of the memory plot at most
			       * (memray's --max-memory-records); 0 = 1500 */
	int show_hidden;     /* summary, tree, flamegraph, table: the frames that
			      * reader/frames.h hides too (the flamegraph's
			      * checkbox starts ticked) */
	int confidential;    /* flamegraph, table: whose source lines stay out
			      * (enum mt_confidential, reader/srclines.h) */
};

/* mt_report_load() - open @o->path and build @s from it (read once), with
 * truncation described through @warn and the read's progress through
 * @o->progress. Returns 0, or a negative error
 * with one line (no prefix, no newline) in @msg saying why: the file
 * cannot be opened, is not a capture, or is corrupt (docs/format.md
 * section 5: damage before the end is an error, not a warning). */
/* mt_report_leak_note() - for the leaks view (@v) of a capture whose
 * small Python objects may be hidden in the allocator's arenas
 * (mt_snapshot_small_hidden()), one line saying so and what shows them,
 * into @buf; NULL otherwise. */
char *mt_report_leak_note(char *buf, size_t len, const struct mt_snapshot *s, enum mt_view v);

int mt_report_load(struct mt_snapshot *s, const struct mt_report_opts *o,
		   void (*warn)(void *ctx, const char *msg), void *ctx, char *msg, size_t len);

/* mt_report_describe_open_error() - one line (no prefix, no newline)
 * saying why @path could not be opened, for an error from
 * mt_capture_open(). Returns @buf. */
char *mt_report_describe_open_error(char *buf, size_t len, const char *path, int err);

int mt_report_stats(FILE *out, const struct mt_snapshot *s, const struct mt_report_opts *o);
/* mt_report_stats_memray() - the stats as memray's stats --json writes
 * them (reader/report-stats-memray.c), of a snapshot loaded with
 * @o->memray_stats (exact sizes) and @o->python_only (locations are the
 * innermost Python frames); @o->top_n rows per top list (0 = all). */
int mt_report_stats_memray(FILE *out, const struct mt_snapshot *s, const struct mt_report_opts *o);
/* mt_report_flamegraph() - one self-contained HTML page (no network) of
 * @o->view as a flame graph, with a memory-over-time plot. */
int mt_report_flamegraph(FILE *out, const struct mt_snapshot *s, const struct mt_report_opts *o);
/* mt_report_table() - an HTML page of @o->view by location, thread and
 * allocator, sortable and filterable. */
int mt_report_table(FILE *out, const struct mt_snapshot *s, const struct mt_report_opts *o);
/* mt_report_transform_csv() - @o->view (peak, leaks or temporary) as
 * memray's transform csv: a header row, then one row per site (stack,
 * thread, allocator) with memory in it, in order of first use.
 * mt_report_transform_gprof2dot() - the same sites as the JSON gprof2dot
 * reads ("-f json"), sites without frames left out. Every frame is
 * written (none hidden), Python ones by their co_name
 * (reader/report-transform.c). */
int mt_report_transform_csv(FILE *out, const struct mt_snapshot *s, const struct mt_report_opts *o);
int mt_report_transform_gprof2dot(FILE *out, const struct mt_snapshot *s,
				  const struct mt_report_opts *o);
/* mt_report_transform_speedscope() - the same sites in speedscope's file
 * format: a bytes and an allocations profile, one sample per distinct
 * stack (root first). */
int mt_report_transform_speedscope(FILE *out, const struct mt_snapshot *s,
				   const struct mt_report_opts *o);
/* mt_report_tree() - the @o->top_n biggest call paths of @o->view as an
 * indented tree of text (or JSON). */
int mt_report_tree(FILE *out, const struct mt_snapshot *s, const struct mt_report_opts *o);
int mt_report_summary(FILE *out, const struct mt_snapshot *s, const struct mt_report_opts *o);
/* Each location's own live bytes at one moment (mt_live_base_new()), of
 * all threads or of one (@thread, as mt_snapshot_thread_locations()
 * takes it), for the growth of later frames since; NULL if out of
 * memory. */
struct mt_live_base;
struct mt_live_base *mt_live_base_new(const struct mt_snapshot *s, uint32_t thread);
void mt_live_base_free(struct mt_live_base *b);

/* What `memtrace live` tells a frame besides the snapshot. */
struct mt_live_frame {
	const char *state; /* "tracking", "tracking ended", ... */
	const char *hint;  /* shown after it in parentheses, or NULL */
	double interval;   /* seconds to the next refresh, or 0: none */
	int utf8;          /* the terminal takes UTF-8 (the heap's plot) */
	unsigned width;    /* columns every line is cut to; 0 = no limit */
	const struct mt_live_base *base; /* a Growth column since then, or NULL */
	int by_growth;     /* with @base: the locations that grew most first */
	int by_total;      /* the most live in them and their callees first */
	int by_blocks;     /* the most blocks of their own live first */
	/* what this refresh read (reader/follow.h): a line says it */
	uint64_t read_chunks, read_events;
	uint64_t read_us;  /* how long reading them and making the figures took */
	int read_from_start;
	/* the locations of an earlier frame (mt_live_locations()) when nothing
	 * was read since, or NULL: made from the snapshot */
	const struct mt_location *locs;
	size_t n_locs;
	/* rows of call paths rather than locations: those whose live bytes
	 * rose across the capture so far, the steadiest and biggest rise
	 * first (mt_live_steady()) */
	int by_steady;
	const struct mt_growth_row *steady;
	size_t n_steady;
	/* with @split, the locations are the memory of one @thread (its index
	 * in the capture) only: a line says which of how many threads is
	 * shown (the steady sort's call paths are of all threads) */
	int split;
	uint32_t thread;
	/* in: the rows scrolled past; out: as many as there are rows to
	 * scroll past (the last page is full), or NULL: none */
	size_t *first_row;
};

/* mt_live_locations() - the locations a frame of @s shows (live at its
 * end, the biggest own first; of one @thread, or MT_ALL_THREADS), for the frames after it while nothing new
 * is read: their cost is then that of the locations, not of the stacks.
 * *@out is malloc'ed (free() it; its strings are the snapshot's). Returns
 * how many, or -ENOMEM. */
ssize_t mt_live_locations(const struct mt_snapshot *s, uint32_t thread, struct mt_location **out);

/* mt_live_steady() - the call paths whose live bytes rose across what @s
 * has read, ranked by reader/growth.h as if the capture ended there (a
 * snapshot followed with mt_snapshot_opts.growth): *@out is malloc'ed
 * (free() it). Returns how many, -ENOMEM, or -EINVAL without growth. */
struct mt_growth_row;
ssize_t mt_live_steady(const struct mt_snapshot *s, struct mt_growth_row **out);

/* mt_report_live() - one frame of the live view: memory now, and the
 * @o->top_n (0 = all) locations with the most memory of their own live at
 * the end of what @s has read (or that grew most, or the call paths that
 * rose most steadily: @f). */
int mt_report_live(FILE *out, const struct mt_snapshot *s, const struct mt_report_opts *o,
		   const struct mt_live_frame *f);

/* mt_report_growth() - the stacks whose live bytes rose across the
 * capture, the steadiest and biggest rise first (reader/growth.h), of a
 * snapshot built with @o->growth: as text, JSON (@o->json) or an HTML
 * page with a plot per stack (@o->html); @o->top_n rows (0 = all). */
int mt_report_growth(FILE *out, const struct mt_snapshot *s, const struct mt_report_opts *o);

/* What `memtrace diff` shows of two captures (reader/diff.h). */
struct mt_diff_opts {
	const char *before, *after; /* their paths, as shown */
	unsigned top_n;             /* rows of text; 0 = all */
	int json;                   /* one JSON object, @top_n rows of it */
};

/* mt_report_diff() - the totals of both captures and the @o->top_n
 * locations whose memory at the peak changed most, as a table of text or
 * one JSON object. */
int mt_report_diff(FILE *out, const struct mt_diff *d, const struct mt_diff_opts *o);
/* mt_report_diff_html() - one self-contained HTML page: AFTER's call
 * paths, at the peak or at the end, each coloured by its change since
 * BEFORE (growth red, shrinkage blue). */
int mt_report_diff_html(FILE *out, const struct mt_snapshot *before,
			const struct mt_snapshot *after, const struct mt_diff_opts *o);

/* mt_report_parse() - the header, then every record as one line. */
int mt_report_parse(FILE *out, struct mt_capture *c);

/* Helpers shared by the report files (reader/report-stats.c). */
struct mt_strbuf;
/* "1.50 MiB"; returns @buf (>= 32 bytes) */
char *mt__report_bytes(char *buf, unsigned long long n);
/* "+1.50 MiB", "-512 B", "0 B"; returns @buf (>= 34 bytes) or inside it */
char *mt__report_change(char *buf, int64_t change);
/* "function at file:line", or the function alone without a file */
/* mt__report_text() - @text for a terminal: bytes below 0x20 and 0x7f as
 * \xNN, so that names from the program cannot move the cursor or forge
 * lines. */
void mt__report_text(struct mt_strbuf *sb, const char *text);
void mt__report_location(struct mt_strbuf *sb, const char *function, const char *file, int line);
/* the command line's arguments joined by spaces, as memray's metadata
 * gives it (reader/report-stats-memray.c) */
struct mt_bytes;
void mt__report_cmdline(struct mt_strbuf *sb, const struct mt_bytes *c);
/* mt__report_cmdline_text() - the same for a terminal, its bytes as
 * mt__report_text() gives them. */
void mt__report_cmdline_text(struct mt_strbuf *sb, const struct mt_bytes *c);
/* "12.345 s" */
char *mt__report_seconds(char *buf, size_t len, unsigned long long us);
/* mt__report_peak_time() - when @s's tracked heap peaked: "at 1.250 s",
 * or "between 1.005 s and 2.005 s" where its samples are far apart. */
char *mt__report_peak_time(char *buf, size_t len, const struct mt_snapshot *s);

/* Helpers shared by the HTML reports (reader/report-html.c). */
struct mt_json;
enum mt__html_page { MT__HTML_FLAMEGRAPH, MT__HTML_TABLE, MT__HTML_GROWTH, MT__HTML_DIFF };
/* the page with @json (one JSON value) in its data slot */
int mt__html_write(FILE *out, enum mt__html_page page, const struct mt_strbuf *json);
/* interned strings (compared by pointer) -> indexes into one JSON array */
struct mt__strtab {
	const char **v;
	size_t n, cap;
	uint32_t *slots;
	size_t nslots;
};
int64_t mt__strtab_get(struct mt__strtab *t, const char *s); /* -1: out of memory */
void mt__strtab_json(struct mt_json *j, const char *key, const struct mt__strtab *t);
void mt__strtab_release(struct mt__strtab *t);
/* "peak", "leaks", "temporary"; and "memory at the peak", ... */
const char *mt__view_name(enum mt_view v);
char *mt__view_label(char *buf, size_t len, const struct mt_snapshot *s, enum mt_view v);
/* members describing the capture, the view and its totals, and the
 * threads the page names: those whose index is set in @used (@n_used
 * entries), or all of them when @used is NULL (a service that started a
 * thread per request has hundreds of thousands, most holding nothing in
 * the view) */
void mt__html_describe(struct mt_json *j, const struct mt_snapshot *s, const struct mt_report_opts *o,
		       uint64_t total_bytes, uint64_t total_count, const uint8_t *used,
		       size_t n_used);

#endif /* MT_READER_REPORT_H */
