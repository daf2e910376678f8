/* SPDX-License-Identifier: MIT */
#ifndef MT_UTIL_MAPPINGS_H
#define MT_UTIL_MAPPINGS_H
/*
 * Live mappings (the mmap family), for the snapshot and the payload's
 * aggregation: an interval list, so
 * that a munmap may cover part of a mapping (which may split it in two)
 * or several, and a mapping over a live one (MAP_FIXED) replaces what it
 * covers. A mapping counts as one allocation while any piece of it is
 * left. The counters are not kept here: mt_mappings_remove() tells its
 * caller, through the callback it is given, which site lost how many
 * bytes and whether a mapping went with them. Zero-initialised is empty.
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint64_t */

/* A piece [start, end) of a live mapping of a site; origin is its mapping. */
struct mt_piece {
	uint64_t start, end;
	uint32_t site;
	uint32_t origin;
};

struct mt_mappings {
	struct mt_piece *v; /* by address, not overlapping */
	size_t n, cap;
	uint32_t *origin_pieces; /* by mapping: its pieces left */
	size_t n_origins, cap_origins;
	uint32_t *free_origins;
	size_t n_free_origins;
};

/* mt_mappings_add() - a mapping [@start, @end) of site @site, over nothing
 * live (remove what it covers first). Returns 0 or -ENOMEM. */
int mt_mappings_add(struct mt_mappings *m, uint64_t start, uint64_t end, uint32_t site);

/* Called for each part of a piece removed: @bytes of site @site, @last
 * when its mapping has no piece left. */
typedef void (*mt_mappings_removed_fn)(void *ctx, uint32_t site, uint64_t bytes, int last);

/* mt_mappings_remove() - [@a, @b) from the live mappings, calling @removed
 * for each part removed. Returns the bytes removed, or (uint64_t)-1 when
 * out of memory. */
uint64_t mt_mappings_remove(struct mt_mappings *m, uint64_t a, uint64_t b,
			   mt_mappings_removed_fn removed, void *ctx);

void mt_mappings_release(struct mt_mappings *m);

#endif /* MT_UTIL_MAPPINGS_H */
