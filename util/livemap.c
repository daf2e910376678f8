/* SPDX-License-Identifier: MIT */
/*
 * Live blocks by address (livemap.h).
 */
#include "util/livemap.h"
#include "util/grow.h"

#include <errno.h>  /* ENOMEM */
#include <stdlib.h> /* malloc, free */
#include <string.h> /* memset */

int mt_livemap_grow(struct mt_livemap *m)
{
	unsigned bits = m->v ? 64 - m->shift + 1 : 16;
	size_t bytes = ((size_t)1 << bits) * sizeof(struct mt_live);
	/* zeroed by writing, not by calloc(): the probes would read calloc's
	 * fresh pages as the shared zero page, and each page would then
	 * fault again on its first write */
	struct mt_live *old = m->v, *nv = malloc(bytes);
	uint64_t old_n = old ? m->mask + 1 : 0;

	if (!nv)
		return -ENOMEM;
	mt_grow_huge(nv, bytes);
	memset(nv, 0, bytes);
	m->v = nv;
	m->mask = ((uint64_t)1 << bits) - 1;
	m->shift = 64 - bits;
	for (uint64_t i = 0; i < old_n; i++) {
		if (!old[i].addr)
			continue;
		uint64_t j = mt_livemap_slot(m, old[i].addr);
		while (nv[j].addr)
			j = (j + 1) & m->mask;
		nv[j] = old[i];
	}
	free(old);
	return 0;
}

void mt_livemap_delete(struct mt_livemap *m, struct mt_live *e)
{
	uint64_t i = (uint64_t)(e - m->v), j = i;

	for (;;) {
		j = (j + 1) & m->mask;
		if (!m->v[j].addr)
			break;
		uint64_t home = mt_livemap_slot(m, m->v[j].addr);
		/* can the entry at j move back to i? only if its home is not
		 * in the cyclic range (i, j] */
		if (((j - home) & m->mask) >= ((j - i) & m->mask)) {
			m->v[i] = m->v[j];
			i = j;
		}
	}
	m->v[i].addr = 0;
	m->n--;
}

void mt_livemap_release(struct mt_livemap *m)
{
	free(m->v);
	*m = (struct mt_livemap){ 0 };
}
