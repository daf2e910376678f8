/* SPDX-License-Identifier: MIT */
#ifndef MT_READER_DIFF_H
#define MT_READER_DIFF_H
/*
 * Two captures of one program compared: the memory at the peak of the
 * tracked heap and the memory live at the end (leaks), per location and
 * per call path, in BEFORE and in AFTER. Frames are matched by their
 * function and file (and whether they are native), never by line: lines
 * move between builds. A location is the innermost frame of a stack, as
 * reader/locations.h makes them, with the lines of one function merged.
 *
 * Made from two built snapshots through reader/locations.h and
 * reader/calltree.h alone; neither snapshot is changed. Strings are
 * borrowed from the snapshots: valid until both are released.
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint64_t */

#include "reader/snapshot.h"

enum { MT_DIFF_PEAK, MT_DIFF_LEAKS, MT_DIFF__VIEWS };
enum { MT_DIFF_BEFORE, MT_DIFF_AFTER };

/* The bytes and allocations of one view in each capture. */
struct mt_diff_fig {
	uint64_t bytes[2], count[2]; /* [MT_DIFF_BEFORE], [MT_DIFF_AFTER] */
};

struct mt_diff_row {
	const char *function, *file;
	int native;
	struct mt_diff_fig fig[MT_DIFF__VIEWS]; /* memory allocated here */
};

struct mt_diff {
	struct mt_diff_fig total[MT_DIFF__VIEWS]; /* whole tracked heap */
	struct mt_diff_row *rows; /* biggest change at the peak first */
	size_t n;
};

/* mt_diff_build() - @d (uninitialised) from @before and @after: every
 * location with memory at the peak or at the end in either, sorted by
 * the size of the change at the peak, then at the end, descending.
 * Returns 0 or -ENOMEM (then @d is empty). */
int mt_diff_build(struct mt_diff *d, const struct mt_snapshot *before,
		  const struct mt_snapshot *after);
void mt_diff_release(struct mt_diff *d);

/* mt_diff_change() - AFTER - BEFORE of @f's bytes, saturated to int64. */
int64_t mt_diff_change(const struct mt_diff_fig *f);

/* A call path of frames matched by (function, file, native), with the
 * memory at it or below in each capture and view. Node 0 is the root
 * (function NULL); every other node's parent has a smaller index. A
 * node with function NULL elsewhere stands for the smaller paths a call
 * tree merged (reader/calltree.h). */
struct mt_dtree_node {
	const char *function, *file;
	uint32_t parent;
	uint8_t native;
	struct mt_diff_fig fig[MT_DIFF__VIEWS]; /* totals: at it or below */
};

struct mt_dtree {
	struct mt_dtree_node *v;
	size_t n;
};

/* mt_dtree_build() - the paths of both captures' call trees in both
 * views (each pruned as the flame graph prunes, to @min_fraction of its
 * total and @max_nodes nodes), merged. Returns 0 or -ENOMEM (then @t is
 * empty). */
int mt_dtree_build(struct mt_dtree *t, const struct mt_snapshot *before,
		   const struct mt_snapshot *after, double min_fraction, size_t max_nodes);
void mt_dtree_release(struct mt_dtree *t);

#endif /* MT_READER_DIFF_H */
