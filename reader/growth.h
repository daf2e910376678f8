/* SPDX-License-Identifier: MIT */
#ifndef MT_READER_GROWTH_H
#define MT_READER_GROWTH_H
/*
 * How each stack's live bytes moved across a capture, for finding the
 * slow leak of a long-running program without knowing where to look.
 *
 * The series of a stack is its live bytes at each memory sample (the
 * SAMPLE records, every --memory-interval-ms), plus a last point at the
 * end of the capture; before its first allocation a stack holds 0. The
 * snapshot feeds every change of a stack's live bytes and every sample
 * in the order of the capture; the series is never stored: a stack's
 * value between two of its changes is constant, so each run of equal
 * points is folded into running sums in closed form when the stack next
 * changes (or at the end). Per event the cost is O(1), and the memory
 * is a fixed record per stack (with a plot of MT_GROWTH_POINTS points,
 * the highest value in each stretch of the run).
 *
 * From the sums, per stack: the least-squares slope of the series
 * (bytes per second, over the samples' mean interval), its correlation
 * with time (r: 1 for a straight rise), and how steadily it rose
 * (steady: the increases between consecutive points less the decreases,
 * over both; 1 when it never went down). The ranking score is the rise
 * the fitted line makes over the run, times r and steady (both taken
 * as 0 when negative): a stack that rises by as much in a sawtooth, or
 * in one step at start-up, ranks below one that rises all the time.
 *
 * A capture still being read can be ranked as it stands (mt_growth_rank_at(),
 * for `memtrace live`): the figures mt_growth_finish() would give if the
 * capture ended now, made from copies of the records with their pending
 * runs folded in, so that @g goes on as before; the cost is that of the
 * stacks, not of the events read.
 *
 * Stack ids are the snapshot's (below 2^24). Nothing here prints.
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint64_t */

#define MT_GROWTH_POINTS 32

struct mt_growth_stack; /* private */

struct mt_growth {
	struct mt_growth_stack *v; /* by stack id */
	uint32_t cap;
	uint64_t k;          /* samples so far */
	uint64_t width;      /* samples per plot point (a power of 2) */
	uint64_t first_us, last_us; /* times of the first and last points */
	int finished;
};

/* What the ranking says of one stack. */
struct mt_growth_row {
	uint32_t stack;
	double slope;       /* bytes per second */
	double rise;        /* slope x the run's length: what the fit grew */
	double r;           /* correlation with time, -1..1 (0 if flat) */
	double steady;      /* (increases - decreases) / (increases + decreases) */
	double score;       /* rise x max(r, 0) x max(steady, 0) */
	uint64_t end_bytes; /* live at the end */
	uint64_t max_bytes; /* highest point */
	unsigned n_points;  /* plot points used (<= MT_GROWTH_POINTS) */
	float points[MT_GROWTH_POINTS]; /* highest value in each stretch */
};

/* mt_growth_change() - stack @stack's live bytes change by @dbytes now.
 * Returns 0 or -ENOMEM. */
int mt_growth_change(struct mt_growth *g, uint32_t stack, int64_t dbytes);
/* mt_growth_sample() - a memory sample at @time_us: every stack's live
 * bytes now are a point of its series. */
void mt_growth_sample(struct mt_growth *g, uint64_t time_us);
/* mt_growth_finish() - the end of the capture at @end_us (its last
 * point, unless a sample was taken then). No change after it. */
void mt_growth_finish(struct mt_growth *g, uint64_t end_us);

/* mt_growth_points() - points in every series (samples, and the end). */
static inline uint64_t mt_growth_points(const struct mt_growth *g)
{
	return g->k;
}

/* mt_growth_rank() - the stacks whose fitted rise is above 0, the highest
 * score first (ties: the bigger rise, then the lower id), into a malloc'ed
 * array *@out (caller frees). After mt_growth_finish() (before it: the
 * points up to the last sample). Returns the number of rows, or -ENOMEM. */
long mt_growth_rank(const struct mt_growth *g, struct mt_growth_row **out);

/* mt_growth_row_of() - the figures of stack @stack (zero for one never
 * seen), as mt_growth_rank() makes them. */
void mt_growth_row_of(const struct mt_growth *g, uint32_t stack, struct mt_growth_row *row);

/* mt_growth_rank_at(), mt_growth_row_at() - as mt_growth_rank() and
 * mt_growth_row_of() would say after mt_growth_finish(@g, @end_us), at any
 * time, leaving @g as it is (once finished, @end_us is not used). The
 * ranking costs O(stacks), a row O(1). */
long mt_growth_rank_at(const struct mt_growth *g, uint64_t end_us, struct mt_growth_row **out);
/* mt_growth_points_at() - the points those figures stand on, and the
 * microseconds from the first to the last into *@span_us. */
uint64_t mt_growth_points_at(const struct mt_growth *g, uint64_t end_us, uint64_t *span_us);
void mt_growth_row_at(const struct mt_growth *g, uint64_t end_us, uint32_t stack,
		      struct mt_growth_row *row);

void mt_growth_release(struct mt_growth *g);

#endif /* MT_READER_GROWTH_H */
