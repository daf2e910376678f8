/* SPDX-License-Identifier: MIT */
/*
 * Blocks counted by (call path, allocated at, freed at) boundary, with a
 * time grain that doubles to stay within budget (temporal.h).
 */
#include "reader/temporal.h"

#include <errno.h>  /* ENOMEM */
#include <stdint.h> /* SIZE_MAX */
#include <stdlib.h> /* calloc */
#include <string.h> /* memset */

static size_t hash(uint32_t key, uint32_t a, uint32_t f)
{
	uint64_t h = key * 0x9E3779B97F4A7C15ull ^ a * 0xC2B2AE3D27D4EB4Full ^
		     f * 0x165667B19E3779F9ull;
	return (size_t)(h ^ (h >> 31));
}

static uint32_t coarse(const struct mt_temporal *t, uint64_t fine)
{
	uint64_t c = (fine + (1ull << t->shift) - 1) >> t->shift;
	return c < MT_TEMPORAL_LIVE ? (uint32_t)c : MT_TEMPORAL_LIVE - 1;
}

static void put(struct mt_interval *v, size_t cap, const struct mt_interval *e)
{
	size_t j = hash(e->key, e->a, e->f) & (cap - 1);
	for (;; j = (j + 1) & (cap - 1)) {
		if (!v[j].used) {
			v[j] = *e;
			return;
		}
		if (v[j].key == e->key && v[j].a == e->a && v[j].f == e->f) {
			v[j].bytes += e->bytes;
			v[j].count += e->count;
			return;
		}
	}
}

/* The intervals again into a table of @cap slots, each rounded by
 * @halve more boundaries (0 or 1), without those left empty or never
 * live at a boundary. */
static int rehash(struct mt_temporal *t, size_t cap, int halve)
{
	struct mt_interval *v = calloc(cap, sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < t->cap; i++) {
		struct mt_interval e = t->v[i];
		if (!e.used || (!e.bytes && !e.count))
			continue;
		if (halve) {
			e.a = (e.a + 1) >> 1;
			if (e.f != MT_TEMPORAL_LIVE)
				e.f = (e.f + 1) >> 1;
		}
		if (e.f != MT_TEMPORAL_LIVE && e.f <= e.a)
			continue;
		put(v, cap, &e);
	}
	free(t->v);
	t->v = v;
	t->cap = cap;
	t->n = 0; /* entries rounded alike were merged */
	for (size_t i = 0; i < cap; i++)
		t->n += v[i].used;
	if (halve)
		t->shift++;
	return 0;
}

/* A coarser grain, until the intervals fit half the budget (or the grain
 * cannot grow: everything at one boundary). */
static void coarsen(struct mt_temporal *t)
{
	size_t budget = t->budget ? t->budget : MT_TEMPORAL_BUDGET;
	while ((t->n > budget / 2 || mt_temporal_boundaries(t) > MT_TEMPORAL_BOUNDARIES + 1) &&
	       mt_temporal_boundaries(t) > 2) {
		if (rehash(t, t->cap, 1) < 0) {
			t->oom = 1;
			return;
		}
	}
}

static struct mt_interval *get(struct mt_temporal *t, uint32_t key, uint32_t a, uint32_t f)
{
	size_t budget = t->budget ? t->budget : MT_TEMPORAL_BUDGET;
	if (t->n + 1 > budget && budget != SIZE_MAX && mt_temporal_boundaries(t) > 2) {
		unsigned shift = t->shift;
		coarsen(t);
		if (t->shift != shift)
			return NULL; /* the caller's indices change with the grain */
	}
	if ((t->n + 1) * 2 > t->cap) {
		if (rehash(t, t->cap ? t->cap * 2 : 1024, 0) < 0)
			t->oom = 1;
		return NULL;
	}
	size_t j = hash(key, a, f) & (t->cap - 1);
	for (;; j = (j + 1) & (t->cap - 1)) {
		struct mt_interval *e = &t->v[j];
		if (!e->used) {
			*e = (struct mt_interval){ key, a, f, 1, 0, 0 };
			t->n++;
			return e;
		}
		if (e->key == key && e->a == a && e->f == f)
			return e;
	}
}

/* get(), with the indices (fine sample counts, or LIVE) rounded at the
 * grain of the table after any growth */
static struct mt_interval *at(struct mt_temporal *t, uint32_t key, uint64_t a, uint64_t f)
{
	for (int tries = 0; tries < 64 && !t->oom; tries++) {
		struct mt_interval *e = get(t, key, coarse(t, a),
					    f == MT_TEMPORAL_LIVE ? MT_TEMPORAL_LIVE : coarse(t, f));
		if (e)
			return e;
	}
	return NULL;
}

void mt_temporal_sample(struct mt_temporal *t)
{
	t->k++;
	if (t->budget != SIZE_MAX && mt_temporal_boundaries(t) > MT_TEMPORAL_BOUNDARIES + 1)
		coarsen(t);
}

uint64_t mt_temporal_alloc(struct mt_temporal *t, uint32_t key, uint64_t bytes)
{
	struct mt_interval *e = at(t, key, t->k, MT_TEMPORAL_LIVE);
	if (e) {
		e->bytes += bytes;
		e->count++;
	}
	return t->k;
}

void mt_temporal_free(struct mt_temporal *t, uint32_t key, uint64_t a, uint64_t bytes, int last)
{
	if (coarse(t, t->k) > coarse(t, a)) {
		struct mt_interval *e = at(t, key, a, t->k);
		if (e) {
			e->bytes += bytes;
			e->count += (uint64_t)!!last;
		}
	}
	/* after any growth above: the live entry is looked up at the grain now */
	struct mt_interval *live = at(t, key, a, MT_TEMPORAL_LIVE);
	if (live) {
		live->bytes -= bytes;
		live->count -= (uint64_t)!!last;
	}
}

long mt_temporal_intervals(const struct mt_temporal *t, struct mt_interval **out)
{
	size_t n = 0;
	struct mt_interval *v = malloc((t->n ? t->n : 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < t->cap; i++) {
		const struct mt_interval *e = &t->v[i];
		if (e->used && (e->bytes || e->count) &&
		    (e->f == MT_TEMPORAL_LIVE || e->f > e->a))
			v[n++] = *e;
	}
	*out = v;
	return (long)n;
}

void mt_temporal_release(struct mt_temporal *t)
{
	free(t->v);
	memset(t, 0, sizeof(*t));
}
