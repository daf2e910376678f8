/* SPDX-License-Identifier: MIT */
#ifndef MT_UTIL_LIVEMAP_H
#define MT_UTIL_LIVEMAP_H
/*
 * The live blocks of the malloc family by address, for the reader's
 * snapshot and the payload's aggregation (payload/aggregate.h): open
 * addressing, linear probing, backward-shift deletion (no tombstones).
 *
 * The map is 64 tables, chosen by the top bits of an address's hash, each
 * at most three quarters full and doubling on its own: a map of 100
 * million blocks then never holds its old and new tables at once (half as
 * much again), only one table's 1/64 of it. A table is 3/8 to 3/4 full:
 * 32 to 64 bytes a block, where most of a big heap's memory goes. Lookups are inline: they are the
 * snapshot's hottest path. Zero-initialised is empty. Its tables are its
 * own (livemap.c: mmap or calloc) unless it is given a supply of them: a
 * program with a core to spare may make the next table of each ahead, on
 * a thread of its own (util/livemap-ahead.h), so that a doubling costs
 * the move of its blocks alone, not the kernel's zeroing of its pages.
 */
#include <stddef.h> /* NULL */
#include <stdint.h> /* uint64_t */

struct mt_live {
	uint64_t addr; /* 0 = empty slot */
	uint64_t size;
	uint32_t site;
	uint32_t seq; /* the snapshot's: the thread's allocation count after this one */
};

#define MT_LIVEMAP_SEG_BITS 6

struct mt_liveseg {
	struct mt_live *v;
	uint64_t mask, n;
	uint64_t limit; /* n at which a put goes through mt_livemap_room() */
	unsigned shift;
};

/* Where a map's tables come from and where they go; a table of 2^bits
 * slots is made and freed by mt_livemap_table() / _table_free(). */
struct mt_livemap_supply {
	/* a zeroed table of 2^@bits slots for table @seg, or NULL: the map
	 * then makes its own */
	struct mt_live *(*take)(void *ctx, unsigned seg, unsigned bits);
	/* table @seg will want 2^@bits slots soon (it is 5/6 of the way) */
	void (*soon)(void *ctx, unsigned seg, unsigned bits);
	/* @v, a table of 2^@bits slots, no longer used */
	void (*give)(void *ctx, struct mt_live *v, unsigned bits);
	void *ctx;
};

struct mt_livemap {
	struct mt_liveseg seg[1u << MT_LIVEMAP_SEG_BITS];
	const struct mt_livemap_supply *supply; /* NULL: the map's own tables */
};

static inline uint64_t mt_livemap_hash(uint64_t addr)
{
	return addr * 0x9E3779B97F4A7C15ull;
}

static inline struct mt_liveseg *mt_livemap_seg(struct mt_livemap *m, uint64_t h)
{
	return &m->seg[h >> (64 - MT_LIVEMAP_SEG_BITS)];
}

/* the slot of hash @h in its table: the bits below the table's choice */
static inline uint64_t mt_liveseg_slot(const struct mt_liveseg *g, uint64_t h)
{
	return (h << MT_LIVEMAP_SEG_BITS) >> g->shift;
}

/* mt_livemap_room() - room for one more block in @g, a table of @m, whose
 * count reached its limit: the table doubled (or made), or its supply
 * told. 0 or -ENOMEM, with the table as it was. */
int mt_livemap_room(struct mt_livemap *m, struct mt_liveseg *g);

/* mt_livemap_table() - a zeroed table of 2^@bits slots, or NULL; freed by
 * mt_livemap_table_free(). What a supply hands out. */
struct mt_live *mt_livemap_table(unsigned bits);
void mt_livemap_table_free(struct mt_live *v, unsigned bits);

/* mt_livemap_get() - the block at @addr (non-zero), or NULL. */
static inline struct mt_live *mt_livemap_get(struct mt_livemap *m, uint64_t addr)
{
	uint64_t h = mt_livemap_hash(addr);
	struct mt_liveseg *g = mt_livemap_seg(m, h);
	if (!g->v)
		return NULL;
	for (uint64_t j = mt_liveseg_slot(g, h);; j = (j + 1) & g->mask) {
		struct mt_live *e = &g->v[j];
		if (e->addr == addr)
			return e;
		if (!e->addr)
			return NULL;
	}
}

/* mt_livemap_put() - the slot of @addr (non-zero): the block there, with
 * *@had = 1, or a new one with only its address set and *@had = 0. NULL
 * without memory, the map as it was. */
static inline struct mt_live *mt_livemap_put(struct mt_livemap *m, uint64_t addr, int *had)
{
	uint64_t h = mt_livemap_hash(addr);
	struct mt_liveseg *g = mt_livemap_seg(m, h);
	if (g->n >= g->limit && mt_livemap_room(m, g) < 0)
		return NULL;
	for (uint64_t j = mt_liveseg_slot(g, h);; j = (j + 1) & g->mask) {
		struct mt_live *e = &g->v[j];
		if (e->addr == addr) {
			*had = 1;
			return e;
		}
		if (!e->addr) {
			e->addr = addr;
			g->n++;
			*had = 0;
			return e;
		}
	}
}

/* mt_livemap_prefetch() - start fetching @addr's first slot into the
 * cache: a lookup that follows soon then finds it there. */
static inline void mt_livemap_prefetch(struct mt_livemap *m, uint64_t addr)
{
	uint64_t h = mt_livemap_hash(addr);
	struct mt_liveseg *g = mt_livemap_seg(m, h);
	if (g->v)
		__builtin_prefetch(&g->v[mt_liveseg_slot(g, h)]);
}

/* mt_livemap_delete() - empty slot @e (from mt_livemap_get() or _put()). */
void mt_livemap_delete(struct mt_livemap *m, struct mt_live *e);

/* mt_livemap_count() - the blocks in the map. */
uint64_t mt_livemap_count(const struct mt_livemap *m);

void mt_livemap_release(struct mt_livemap *m);

#endif /* MT_UTIL_LIVEMAP_H */
