/* SPDX-License-Identifier: MIT */
/*
 * Each site's share of every stretch's high-water mark, taken lazily
 * (hwmtime.h).
 */
#include "reader/hwmtime.h"

#include <stdlib.h> /* realloc */
#include <string.h> /* memset */

#define MAX_SITES (1u << 28)

struct mt_hwm_site {
	int64_t cur_b, cur_c; /* live now */
	int64_t pk_b, pk_c;   /* at the running mark of stretch hk, if changed after it */
	uint64_t last_t;      /* event of its last change */
	uint64_t hk;          /* stretch of its last change */
	struct mt_hwm_run *runs;
	size_t n, cap;
	int seen;
};

static int room(struct mt_hwmtime *h, uint32_t site)
{
	if (site < h->cap)
		return 0;
	if (site >= MAX_SITES)
		return -1;
	uint32_t n = h->cap ? h->cap : 256;
	while (n <= site)
		n *= 2;
	struct mt_hwm_site *v = realloc(h->v, (size_t)n * sizeof(*v));
	if (!v)
		return -1;
	memset(v + h->cap, 0, (size_t)(n - h->cap) * sizeof(*v));
	h->v = v;
	h->cap = n;
	return 0;
}

/* @s's share from stretch @as_of: a run if it differs from the last one
 * (0 before any) */
static void push(struct mt_hwmtime *h, struct mt_hwm_site *s, uint64_t as_of, int64_t b, int64_t c)
{
	const struct mt_hwm_run *last = s->n ? &s->runs[s->n - 1] : NULL;
	if (last ? (last->bytes == (uint64_t)b && last->count == (uint64_t)c) : (!b && !c))
		return;
	if (s->n == s->cap) {
		size_t n = s->cap ? s->cap * 2 : 4;
		struct mt_hwm_run *r = realloc(s->runs, n * sizeof(*r));
		if (!r) {
			h->oom = 1;
			return;
		}
		s->runs = r;
		s->cap = n;
	}
	s->runs[s->n++] = (struct mt_hwm_run){ as_of, (uint64_t)b, (uint64_t)c };
}

/* The stretches @s did not change in since its last change, up to @upto
 * (not included; all completed): its last stretch at that stretch's mark,
 * the others at its value now. */
static void settle(struct mt_hwmtime *h, struct mt_hwm_site *s, uint64_t upto)
{
	if (s->hk >= upto)
		return;
	if (s->last_t <= h->final_t[s->hk])
		push(h, s, s->hk, s->cur_b, s->cur_c);
	else
		push(h, s, s->hk, s->pk_b, s->pk_c);
	if (s->hk + 1 < upto)
		push(h, s, s->hk + 1, s->cur_b, s->cur_c);
	s->hk = upto;
}

void mt_hwmtime_change(struct mt_hwmtime *h, uint32_t site, int64_t dbytes, int64_t dcount)
{
	if (h->finished)
		return;
	if (site >= h->cap && room(h, site) < 0) {
		h->oom = 1;
		return;
	}
	struct mt_hwm_site *s = &h->v[site];
	h->t++;
	if (!s->seen) {
		s->seen = 1;
		s->hk = h->k;
	}
	settle(h, s, h->k);
	if (s->last_t <= h->pk_t) { /* its value at the running mark, before this change */
		s->pk_b = s->cur_b;
		s->pk_c = s->cur_c;
	}
	s->cur_b += dbytes;
	s->cur_c += dcount;
	s->last_t = h->t;
	h->heap += (uint64_t)dbytes;
	if (h->heap >= h->pk_heap) {
		h->pk_heap = h->heap;
		h->pk_t = h->t;
	}
}

static int end_stretch(struct mt_hwmtime *h)
{
	if (h->k >= h->final_cap) {
		size_t n = h->final_cap ? h->final_cap * 2 : 256;
		uint64_t *t = realloc(h->final_t, n * sizeof(*t));
		if (t)
			h->final_t = t;
		uint64_t *b = t ? realloc(h->final_heap, n * sizeof(*b)) : NULL;
		if (!b) {
			h->oom = 1;
			return -1;
		}
		h->final_heap = b;
		h->final_cap = n;
	}
	h->final_t[h->k] = h->pk_t;
	h->final_heap[h->k] = h->pk_heap;
	return 0;
}

void mt_hwmtime_snapshot(struct mt_hwmtime *h)
{
	if (h->finished || end_stretch(h) < 0)
		return;
	h->k++;
	/* the start of a stretch counts as its mark until the heap rises */
	h->pk_heap = h->heap;
	h->pk_t = h->t;
}

void mt_hwmtime_finish(struct mt_hwmtime *h)
{
	if (h->finished || end_stretch(h) < 0)
		return;
	for (uint32_t i = 0; i < h->cap; i++) {
		struct mt_hwm_site *s = &h->v[i];
		if (!s->seen)
			continue;
		settle(h, s, h->k);
		/* the last stretch, then what is left at the end */
		if (s->last_t <= h->pk_t)
			push(h, s, h->k, s->cur_b, s->cur_c);
		else
			push(h, s, h->k, s->pk_b, s->pk_c);
		push(h, s, h->k + 1, s->cur_b, s->cur_c);
	}
	h->finished = 1;
}

const struct mt_hwm_run *mt_hwmtime_runs(const struct mt_hwmtime *h, uint32_t site, size_t *n)
{
	if (site >= h->cap) {
		*n = 0;
		return NULL;
	}
	*n = h->v[site].n;
	return h->v[site].runs;
}

void mt_hwmtime_release(struct mt_hwmtime *h)
{
	for (uint32_t i = 0; i < h->cap; i++)
		free(h->v[i].runs);
	free(h->v);
	free(h->final_t);
	free(h->final_heap);
	memset(h, 0, sizeof(*h));
}
