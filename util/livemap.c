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

static void table_free(struct mt_live *v, uint64_t slots)
{
	size_t bytes = (size_t)slots * sizeof(*v);
	if (bytes < MAPPED)
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
