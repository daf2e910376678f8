/* SPDX-License-Identifier: MIT */
/*
 * Live blocks by address (livemap.h).
 */
#include "util/livemap.h"

#include <errno.h>    /* ENOMEM */
#include <stdint.h>   /* uintptr_t */
#include <stdlib.h>   /* malloc, free */
#include <string.h>   /* memset */
#include <sys/mman.h> /* mmap, munmap, madvise */

#define SEG_FIRST_BITS 10 /* 1,024 slots, 24 KiB, a table at first */
#define HUGE ((size_t)2 << 20)

/* A zeroed table of @bytes. One of 2 MiB or more is mapped on its own,
 * on huge pages where the kernel leaves them to the program: malloc's
 * would often come from a heap of small pages, each a fault to zero and
 * a TLB miss to probe. Zeroed by writing, not left to the kernel: the
 * probes would read fresh pages as the shared zero page, and each page
 * would then fault again on its first write. */
static struct mt_live *table_new(size_t bytes)
{
	if (bytes < HUGE) {
		void *p = malloc(bytes);
		if (p)
			memset(p, 0, bytes);
		return p;
	}
	char *p = mmap(NULL, bytes + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
		       0);
	if (p == MAP_FAILED)
		return NULL;
	char *at = (char *)(((uintptr_t)p + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
	if (at > p)
		munmap(p, (size_t)(at - p));
	munmap(at + bytes, (size_t)(p + HUGE - at));
	(void)madvise(at, bytes, MADV_HUGEPAGE);
	memset(at, 0, bytes);
	return (struct mt_live *)at;
}

static void table_free(struct mt_live *v, uint64_t slots)
{
	size_t bytes = (size_t)slots * sizeof(*v);
	if (bytes < HUGE)
		free(v); /* NULL too: a table never made */
	else
		munmap(v, bytes);
}

int mt_liveseg_grow(struct mt_liveseg *g)
{
	unsigned bits = g->v ? 64 - g->shift + 1 : SEG_FIRST_BITS;
	struct mt_live *old = g->v, *nv = table_new(((size_t)1 << bits) * sizeof(struct mt_live));
	uint64_t old_n = old ? g->mask + 1 : 0;

	if (!nv)
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
	table_free(old, old_n);
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
		table_free(m->seg[k].v, m->seg[k].mask + 1);
	*m = (struct mt_livemap){ 0 };
}
