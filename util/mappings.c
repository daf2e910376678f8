/* SPDX-License-Identifier: MIT */
/*
 * The live mappings of a snapshot (util/mappings.h): pieces sorted by
 * address, found by binary search, and how many pieces each mapping has
 * left.
 */
#include "util/mappings.h"

#include <errno.h>  /* ENOMEM */
#include <stdlib.h> /* realloc */
#include <string.h> /* memmove */

static size_t first_after(const struct mt_mappings *m, uint64_t a)
{
	size_t lo = 0, hi = m->n;
	while (lo < hi) { /* first piece with end > a */
		size_t mid = lo + (hi - lo) / 2;
		if (m->v[mid].end > a)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

static int insert_at(struct mt_mappings *m, size_t i, const struct mt_piece *p)
{
	if (m->n == m->cap) {
		size_t n = m->cap ? m->cap * 2 : 64;
		struct mt_piece *nv = realloc(m->v, n * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		m->v = nv;
		m->cap = n;
	}
	memmove(&m->v[i + 1], &m->v[i], (m->n - i) * sizeof(*p));
	m->v[i] = *p;
	m->n++;
	return 0;
}

static void origin_put(struct mt_mappings *m, uint32_t o)
{
	/* free_origins has room for every origin ever created */
	m->free_origins[m->n_free_origins++] = o;
}

static int origin_new(struct mt_mappings *m, uint32_t *out)
{
	if (m->n_free_origins) {
		*out = m->free_origins[--m->n_free_origins];
		m->origin_pieces[*out] = 1;
		return 0;
	}
	if (m->n_origins == m->cap_origins) {
		size_t n = m->cap_origins ? m->cap_origins * 2 : 64;
		uint32_t *a = realloc(m->origin_pieces, n * sizeof(*a));
		if (!a)
			return -ENOMEM;
		m->origin_pieces = a;
		uint32_t *b = realloc(m->free_origins, n * sizeof(*b));
		if (!b)
			return -ENOMEM;
		m->free_origins = b;
		m->cap_origins = n;
	}
	*out = (uint32_t)m->n_origins++;
	m->origin_pieces[*out] = 1;
	return 0;
}

uint64_t mt_mappings_remove(struct mt_mappings *m, uint64_t a, uint64_t b,
			   mt_mappings_removed_fn removed, void *ctx)
{
	size_t i = first_after(m, a), rm_lo = SIZE_MAX, rm_hi = 0;
	uint64_t total = 0;

	for (; i < m->n && m->v[i].start < b; i++) {
		struct mt_piece *p = &m->v[i];
		uint64_t os = p->start > a ? p->start : a;
		uint64_t oe = p->end < b ? p->end : b;
		uint64_t n = oe - os;
		int gone = a <= p->start && p->end <= b;
		int last = 0;

		if (gone && --m->origin_pieces[p->origin] == 0) {
			last = 1;
			origin_put(m, p->origin);
		}
		removed(ctx, p->site, n, last);
		total += n;
		if (gone) {
			if (rm_lo == SIZE_MAX)
				rm_lo = i;
			rm_hi = i + 1;
		} else if (a <= p->start) {
			p->start = b;
		} else if (p->end <= b) {
			p->end = a;
		} else {
			struct mt_piece right = *p;
			right.start = b;
			p->end = a;
			m->origin_pieces[p->origin]++;
			if (insert_at(m, i + 1, &right) < 0)
				return (uint64_t)-1;
			i++;
		}
	}
	if (rm_lo != SIZE_MAX) {
		memmove(&m->v[rm_lo], &m->v[rm_hi], (m->n - rm_hi) * sizeof(struct mt_piece));
		m->n -= rm_hi - rm_lo;
	}
	return total;
}

int mt_mappings_add(struct mt_mappings *m, uint64_t start, uint64_t end, uint32_t site)
{
	struct mt_piece p = { start, end, site, 0 };

	if (origin_new(m, &p.origin) < 0)
		return -ENOMEM;
	return insert_at(m, first_after(m, start), &p);
}

void mt_mappings_release(struct mt_mappings *m)
{
	free(m->v);
	free(m->origin_pieces);
	free(m->free_origins);
	memset(m, 0, sizeof(*m));
}
