/* SPDX-License-Identifier: MIT */
#ifndef MT_READER_TEMPORAL_H
#define MT_READER_TEMPORAL_H
/*
 * When each call path's memory was live, for the temporal flame graph:
 * what was allocated in a range of time and still live at its end, or at
 * the highest point of the heap inside it.
 *
 * Time is cut at the memory samples: a block allocated after @a samples
 * and freed after @f is live at sample i when a <= i < f (never, when it
 * is freed before the next sample). Blocks are counted per (call path
 * key, a, f) as bytes and count; a block still live at the end has f =
 * MT_TEMPORAL_LIVE. So the data grows with paths x samples, not with
 * events; and it is bounded: the samples are taken in groups of 2^shift
 * (a boundary every 2^shift samples, a block's indices rounded up to the
 * next boundary, which keeps "live at boundary J" exact), and the group
 * doubles whenever the intervals pass their budget or the boundaries
 * pass MT_TEMPORAL_BOUNDARIES. Blocks freed before the next boundary
 * leave nothing behind.
 *
 * The snapshot feeds it in the order of the capture (snapshot.h's
 * mt_snapshot_opts.temporal); it keeps, per live block, the sample count
 * its allocation saw and hands it back at the free. Nothing here prints.
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint32_t */

#define MT_TEMPORAL_LIVE UINT32_MAX
#define MT_TEMPORAL_BOUNDARIES 2048
#define MT_TEMPORAL_BUDGET 120000 /* intervals, by default: about 3 MB of page */

struct mt_interval {
	uint32_t key;  /* call path (stackkeys.h) */
	uint32_t a, f; /* boundaries: live at J when a <= J < f */
	uint32_t used;
	uint64_t bytes, count;
};

struct mt_temporal {
	struct mt_interval *v; /* open addressing */
	size_t cap, n;
	size_t budget;    /* intervals kept at most (0: MT_TEMPORAL_BUDGET; SIZE_MAX:
			   * no bound, nor on the boundaries: every sample one) */
	uint64_t k;       /* samples so far */
	unsigned shift;   /* boundary J is sample J << shift */
	int oom;
};

/* mt_temporal_sample() - a memory sample. */
void mt_temporal_sample(struct mt_temporal *t);

/* mt_temporal_alloc() - a block of @bytes of path @key allocated now.
 * Returns the sample count to keep with the block for its free. */
uint64_t mt_temporal_alloc(struct mt_temporal *t, uint32_t key, uint64_t bytes);

/* mt_temporal_free() - @bytes of a block of path @key allocated when
 * mt_temporal_alloc() returned @a are freed now (@last: the block is
 * gone, for the count; a munmap may free part of a mapping). */
void mt_temporal_free(struct mt_temporal *t, uint32_t key, uint64_t a, uint64_t bytes, int last);

/* mt_temporal_boundaries() - boundaries so far: sample 0, 2^shift, ...,
 * and one more for the end (blocks allocated after the last sample). */
static inline uint32_t mt_temporal_boundaries(const struct mt_temporal *t)
{
	return (uint32_t)((t->k + (1ull << t->shift) - 1) >> t->shift) + 1;
}

/* mt_temporal_intervals() - the intervals with bytes or count, in no
 * order, into a malloc'ed array *@out (caller frees). Returns how many, or
 * -ENOMEM. */
long mt_temporal_intervals(const struct mt_temporal *t, struct mt_interval **out);

void mt_temporal_release(struct mt_temporal *t);

#endif /* MT_READER_TEMPORAL_H */
