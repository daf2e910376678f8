/* SPDX-License-Identifier: MIT */
#ifndef MT_READER_STACKKEYS_H
#define MT_READER_STACKKEYS_H
/*
 * One id per call path as a report prints it, while the capture is read.
 * The capture's stack ids tell bytecode offsets apart: two allocations on
 * one line (`cache.append(bytearray(n))`: the object and the list's array)
 * have two stacks with the same (function, file, line) frames. A
 * figure that cannot be summed after the pass (growth.h's correlation and
 * steadiness) must be kept per printed path from the start: this maps
 * every stack id to the first id seen with the same frames, from its
 * parent's key and its own frame, memoized per id (O(1) amortized).
 *
 * A node whose definition or code has not been read when it is first
 * asked for (a definition still in another thread's buffer), and native
 * and hybrid nodes (resolved after the pass), keep their own id. The
 * answer for an id never changes once given.
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint32_t */

#include "reader/stacks.h"

struct mt_stackkeys_ent;

struct mt_stackkeys {
	uint32_t *memo;   /* by stack id: key + 1, 0 = not asked yet */
	uint32_t memo_cap;
	struct mt_stackkeys_ent *map; /* (parent key, frame) -> key: open addressing */
	size_t map_cap, map_n;
	uint32_t *work;   /* ids waiting for their parent's key */
	size_t work_cap;
};

/* mt_stackkeys_get() - the key of stack @id (< 2^24) in @k; @id itself
 * when out of memory (*@oom set). */
uint32_t mt_stackkeys_get(struct mt_stackkeys *sk, const struct mt_stacks *k, uint32_t id,
			  int *oom);

void mt_stackkeys_release(struct mt_stackkeys *sk);

#endif /* MT_READER_STACKKEYS_H */
