/* SPDX-License-Identifier: MIT */
#ifndef MT_READER_GROUPS_H
#define MT_READER_GROUPS_H
/*
 * A snapshot's records as memray groups them (groups.c), for FileReader's
 * get_*_allocation_records() and transform csv: one record per call path
 * as it prints (stackkeys.h: two calls on one line are one; of a hybrid
 * stack, its Python stack's), native chain and thread (unless the threads
 * are merged), whatever the allocator. A
 * record takes its allocator, address, thread and stack id from its first
 * site, and sums its sites' bytes and allocations. The snapshot's own
 * sites are finer: a stack id per bytecode offset, and an allocator each.
 */
#include <stdint.h> /* uint32_t */

#include "reader/snapshot.h"

#define MT_GROUP_NONE UINT32_MAX

struct mt_groups {
	uint32_t *of_site; /* by site: its group, or MT_GROUP_NONE (nothing in the view) */
	uint32_t n;        /* groups, numbered in the order of their first sites */
};

/* mt_groups_build() - group the sites of @s with something in @view,
 * across threads if @merge_threads. 0 or -ENOMEM. */
int mt_groups_build(struct mt_groups *g, const struct mt_snapshot *s, enum mt_view view,
		    int merge_threads);

void mt_groups_release(struct mt_groups *g);

#endif /* MT_READER_GROUPS_H */
