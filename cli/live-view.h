/* SPDX-License-Identifier: MIT */
#ifndef MT_CLI_LIVE_VIEW_H
#define MT_CLI_LIVE_VIEW_H
/*
 * What the keys of `memtrace live` choose, as memray's view has them: the
 * sort, all threads or one at a time, the rows scrolled past, a pause;
 * and the Growth column's starting points, one for all threads and one
 * for each thread shown on its own. cli/cmd-live.c reads the keys
 * (cli/live-term.h) and draws the frames (reader/report.h); this file
 * only keeps the choices. Prints nothing.
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint32_t */

struct mt_snapshot;
struct mt_live_base;

struct mt_live_view {
	int sort;        /* enum mt_live_sort */
	int split;       /* one thread at a time (m) */
	uint32_t thread; /* which, by its index in the capture (until the
			  * next frame, MT_ALL_THREADS after m: the first) */
	int step;        /* threads to move by (< and >), at the next frame */
	size_t first;    /* the rows scrolled past; the frame keeps it in range */
	size_t page;     /* the rows of the last frame */
	int paused;      /* space: nothing read until space again */
	/* the Growth column's starting points */
	struct mt_live_view_base *bases;
	size_t n_bases;
};

/* mt_live_view_keys() - @v changed by the keys @keys[0..n) as
 * mt_live_term_wait() gives them; @sort_keys[k] chooses sort k. */
void mt_live_view_keys(struct mt_live_view *v, const char *keys, size_t n,
		       const char *sort_keys);

/* mt_live_view_thread() - @v's thread after its step, among those @s has
 * seen (the first of them when the view was just split). */
void mt_live_view_thread(struct mt_live_view *v, const struct mt_snapshot *s);

/* mt_live_view_base() - the starting point of the threads @v shows, made
 * from @s if there is none yet: NULL if out of memory (no Growth column).
 * mt_live_view_forget() - all of them forgotten (a new capture in the
 * file: growth starts again), and freed. */
const struct mt_live_base *mt_live_view_base(struct mt_live_view *v, const struct mt_snapshot *s);
void mt_live_view_forget(struct mt_live_view *v);

#endif /* MT_CLI_LIVE_VIEW_H */
