/* SPDX-License-Identifier: MIT */
#ifndef MT_UTIL_LIVEMAP_H
#define MT_UTIL_LIVEMAP_H
/*
 * The live blocks of the malloc family by address, for the reader's
 * snapshot and the payload's aggregation (payload/aggregate.h): open
 * addressing, linear probing, backward-shift deletion (no tombstones).
 * Lookups are inline: they are the snapshot's hottest path. It allocates
 * with malloc; zero-initialised is empty (mt_livemap_reserve() before the
 * first mt_livemap_find()).
 */
#include <stdint.h> /* uint64_t */

struct mt_live {
	uint64_t addr; /* 0 = empty slot */
	uint64_t size;
	uint32_t site;
	uint32_t seq; /* the snapshot's: the thread's allocation count after this one */
};

struct mt_livemap {
	struct mt_live *v;
	uint64_t mask, n;
	unsigned shift;
};

static inline uint64_t mt_livemap_slot(const struct mt_livemap *m, uint64_t addr)
{
	return (addr * 0x9E3779B97F4A7C15ull) >> m->shift;
}

/* mt_livemap_reserve() - room for one more block (the table at most half
 * full). 0 or -ENOMEM, with the map as it was. */
int mt_livemap_grow(struct mt_livemap *m);
static inline int mt_livemap_reserve(struct mt_livemap *m)
{
	return m->v && (m->n + 1) * 2 <= m->mask + 1 ? 0 : mt_livemap_grow(m);
}

/* mt_livemap_find() - the slot holding @addr (non-zero), or the empty one
 * where it would go (then set it and count it: m->n++). */
static inline struct mt_live *mt_livemap_find(struct mt_livemap *m, uint64_t addr)
{
	for (uint64_t j = mt_livemap_slot(m, addr);; j = (j + 1) & m->mask) {
		struct mt_live *e = &m->v[j];
		if (e->addr == addr || e->addr == 0)
			return e;
	}
}

/* mt_livemap_delete() - empty slot @e (from mt_livemap_find()). */
void mt_livemap_delete(struct mt_livemap *m, struct mt_live *e);

void mt_livemap_release(struct mt_livemap *m);

#endif /* MT_UTIL_LIVEMAP_H */
