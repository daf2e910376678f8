/* SPDX-License-Identifier: MIT */
#ifndef MT_READER_SIZES_H
#define MT_READER_SIZES_H
/*
 * How many allocations there were of each exact size: an open-addressing
 * table of size -> count (size 0 counted apart, as 0 marks an empty
 * slot), for the size histogram that memray's stats computes from exact
 * sizes (mt_snapshot_opts.exact_sizes). Memory grows with the number of
 * distinct sizes, not of allocations. Zero-initialised is empty.
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint64_t */

struct mt_sizes {
	uint64_t *keys;   /* size, 0 = empty slot */
	uint64_t *counts;
	size_t n, cap;    /* nonzero sizes held; slots (a power of two) */
	uint64_t zero;    /* allocations of size 0 */
	int oom;          /* an add failed: the counts are incomplete */
};

/* mt_sizes_add() - one more allocation of @size. Returns 0 or -ENOMEM
 * (then oom is set). */
int mt_sizes_add(struct mt_sizes *z, uint64_t size);
/* mt_sizes_each() - call @fn for every size with allocations (size 0
 * first, if any; the others in no order). */
void mt_sizes_each(const struct mt_sizes *z, void (*fn)(void *ctx, uint64_t size, uint64_t count),
		   void *ctx);
void mt_sizes_release(struct mt_sizes *z);

#endif /* MT_READER_SIZES_H */
