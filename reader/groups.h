/* SPDX-License-Identifier: MIT */
#ifndef MT_READER_GROUPS_H
#define MT_READER_GROUPS_H
/*
 * A snapshot's records as memray groups them (groups.c), for FileReader's
 * get_*_allocation_records() and the transforms (csv, gprof2dot,
 * speedscope): one record per call path as it prints (stackkeys.h: two
 * calls on one line are one; of a hybrid stack, its Python stack's),
 * native chain and thread (unless the threads are merged), whatever the
 * allocator. A record takes its allocator, address, thread and stack id
 * from its first site, and sums its sites' bytes and allocations. The
 * snapshot's own sites are finer: a stack id per bytecode offset, and an
 * allocator each.
 */
#include <stdint.h> /* uint32_t, uint64_t */

#include "reader/snapshot.h"

struct mt_stackkeys;

struct mt_group {
	size_t first;          /* its first site (sites are in order of first use) */
	uint64_t bytes, count; /* its sites' sums in the view */
};

struct mt_groups {
	struct mt_group *v; /* in the order of their first sites */
	uint32_t n;
};

/* mt_groups_build() - group the sites of @s with something in @view,
 * across threads if @merge_threads. 0 or -ENOMEM. */
int mt_groups_build(struct mt_groups *g, const struct mt_snapshot *s, enum mt_view view,
		    int merge_threads);

void mt_groups_release(struct mt_groups *g);

/* mt_groups_path_key() - what groups stack @id with others, the threads
 * aside: its call path's key (memoized in @sk) << 32 | its native leaf. On
 * running out of memory, *@oom is set and the key is @id's own. */
uint64_t mt_groups_path_key(const struct mt_snapshot *s, struct mt_stackkeys *sk, uint32_t id,
			    int *oom);

#endif /* MT_READER_GROUPS_H */
