/* SPDX-License-Identifier: MIT */
/*
 * Live blocks by address (livemap.h).
 */
#include "util/livemap.h"

#include <errno.h>    /* ENOMEM */
#include <stdint.h>   /* uintptr_t */
#include <stdlib.h>   /* calloc, free */
#include <string.h>   /* memset */
#include <sys/mman.h> /* mmap, munmap, madvise */

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels refuse it */
#endif

#define SEG_FIRST_BITS 10 /* 1,024 slots, 24 KiB, a table at first */
#define MAPPED ((size_t)64 << 10)
#define HUGE ((size_t)2 << 20)

/* A zeroed table of @bytes. One of 64 KiB or more is mapped on its own
 * (from 2 MiB on huge pages, where the kernel leaves them to the program)
 * and its pages made present and writable at once (MADV_POPULATE_WRITE,
 * Linux 5.14; written to, before): left to fault, the probes would read
 * fresh pages as the shared zero page and each page would fault again on
 * its first write, and on a virtual machine each fault costs more than
 * the work. A smaller one comes from calloc. */
static struct mt_live *table_new(size_t bytes)
{
	if (bytes < MAPPED)
		return calloc(1, bytes);
	size_t align = bytes >= HUGE ? HUGE : 0;
	char *p = mmap(NULL, bytes + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
		       0);
	if (p == MAP_FAILED)
		return NULL;
	char *at = p;
	if (align) {
		at = (char *)(((uintptr_t)p + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
		if (at > p)
			munmap(p, (size_t)(at - p));
		munmap(at + bytes, (size_t)(p + HUGE - at));
		(void)madvise(at, bytes, MADV_HUGEPAGE);
	}
	if (madvise(at, bytes, MADV_POPULATE_WRITE) < 0)
		memset(at, 0, bytes); /* already zero: written, to be present */
	return (struct mt_live *)at;
}

struct mt_live *mt_livemap_table(unsigned bits)
{
	return table_new(((size_t)1 << bits) * sizeof(struct mt_live));
}

void mt_livemap_table_free(struct mt_live *v, unsigned bits)
{
	size_t bytes = ((size_t)1 << bits) * sizeof(*v);
	if (bytes < MAPPED)
		free(v); /* NULL too: a table never made */
	else if (v)
		munmap(v, bytes);
}

/* The count at which a put of @g next needs mt_livemap_room(): where its
 * supply is told of the next table, then where the table doubles. */
static uint64_t limit_of(const struct mt_livemap *m, const struct mt_liveseg *g)
{
	uint64_t slots = g->mask + 1, full = slots / 4 * 3;
	if (m->supply && g->n < slots / 8 * 5)
		return slots / 8 * 5;
	return full;
}

static int grow(struct mt_livemap *m, struct mt_liveseg *g)
{
	const struct mt_livemap_supply *sup = m->supply;
	unsigned seg = (unsigned)(g - m->seg), old_bits = g->v ? 64 - g->shift : 0;
	unsigned bits = g->v ? old_bits + 1 : SEG_FIRST_BITS;
	struct mt_live *old = g->v, *nv = sup ? sup->take(sup->ctx, seg, bits) : NULL;
	uint64_t old_n = old ? g->mask + 1 : 0;

	if (!nv && !(nv = mt_livemap_table(bits)))
		return -ENOMEM;
	g->v = nv;
	g->mask = ((uint64_t)1 << bits) - 1;
	g->shift = 64 - bits;
	for (uint64_t i = 0; i < old_n; i++) {
		if (!old[i].addr)
			continue;
		uint64_t j = mt_liveseg_slot(g, mt_livemap_hash(old[i].addr));
		while (nv[j].addr)
			j = (j + 1) & g->mask;
		nv[j] = old[i];
	}
	if (old && sup && sup->give)
		sup->give(sup->ctx, old, old_bits);
	else if (old)
		mt_livemap_table_free(old, old_bits);
	g->limit = limit_of(m, g);
	return 0;
}

int mt_livemap_room(struct mt_livemap *m, struct mt_liveseg *g)
{
	if (!g->v || g->n >= (g->mask + 1) / 4 * 3)
		return grow(m, g);
	/* 5/8 full: the next table is asked for */
	const struct mt_livemap_supply *sup = m->supply;
	if (sup && sup->soon)
		sup->soon(sup->ctx, (unsigned)(g - m->seg), 64 - g->shift + 1);
	g->limit = (g->mask + 1) / 4 * 3;
	return 0;
}

void mt_livemap_delete(struct mt_livemap *m, struct mt_live *e)
{
	struct mt_liveseg *g = mt_livemap_seg(m, mt_livemap_hash(e->addr));
	uint64_t i = (uint64_t)(e - g->v), j = i;

	for (;;) {
		j = (j + 1) & g->mask;
		if (!g->v[j].addr)
			break;
		uint64_t home = mt_liveseg_slot(g, mt_livemap_hash(g->v[j].addr));
		/* can the entry at j move back to i? only if its home is not
		 * in the cyclic range (i, j] */
		if (((j - home) & g->mask) >= ((j - i) & g->mask)) {
			g->v[i] = g->v[j];
			i = j;
		}
	}
	g->v[i].addr = 0;
	g->n--;
}

uint64_t mt_livemap_count(const struct mt_livemap *m)
{
	uint64_t n = 0;
	for (unsigned k = 0; k < 1u << MT_LIVEMAP_SEG_BITS; k++)
		n += m->seg[k].n;
	return n;
}

void mt_livemap_release(struct mt_livemap *m)
{
	for (unsigned k = 0; k < 1u << MT_LIVEMAP_SEG_BITS; k++)
		if (m->seg[k].v)
			mt_livemap_table_free(m->seg[k].v, 64 - m->seg[k].shift);
	*m = (struct mt_livemap){ 0 };
}
