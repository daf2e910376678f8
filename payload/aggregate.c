/* SPDX-License-Identifier: MIT */
/*
 * Aggregated captures: counting in the target (aggregate.h).
 */
#include "payload/aggregate.h"

#include "format/record.h"
#include "util/livemap.h"
#include "util/mappings.h"

#include <stdlib.h> /* malloc, realloc, free */
#include <string.h> /* memset */
#include <unistd.h> /* sysconf */

/* A site's counters; pk_* hold its value at the peak whenever last >
 * peak_event, otherwise cur_* still do (reader/snapshot.c's struct acc). */
struct site {
	uint32_t stack, thread, kind;
	uint64_t cur_bytes, cur_count, pk_bytes, pk_count, last;
	uint64_t alloc_bytes, alloc_count, first_addr;
	/* as last written */
	uint64_t w_peak_bytes, w_peak_count, w_leak_bytes, w_leak_count, w_alloc_count;
	int written;
};

static struct {
	struct site *sites;
	uint32_t n_sites, sites_cap;
	uint32_t *slots; /* site index + 1 by hash of its key, 0 = empty */
	uint32_t slots_mask;
	struct mt_livemap live;
	struct mt_mappings mm;
	uint64_t page_mask;
	uint64_t t, peak_event, last_sample_us;
	struct mt_rec_totals tot;
	int failed;
} ag;

void mt_agg_begin(void)
{
	mt_agg_release();
	long page = sysconf(_SC_PAGESIZE);
	ag.page_mask = (uint64_t)(page > 0 ? page : 4096) - 1;
}

void mt_agg_release(void)
{
	free(ag.sites);
	free(ag.slots);
	mt_livemap_release(&ag.live);
	mt_mappings_release(&ag.mm);
	memset(&ag, 0, sizeof(ag));
}

int mt_agg_failed(void)
{
	return ag.failed;
}

uint64_t mt_agg_heap(void)
{
	return ag.tot.heap;
}

void mt_agg_sampled(uint64_t time_us)
{
	ag.last_sample_us = time_us;
}

static void change(struct site *s, uint64_t dbytes, uint64_t dcount)
{
	if (s->last <= ag.peak_event) {
		s->pk_bytes = s->cur_bytes;
		s->pk_count = s->cur_count;
	}
	s->last = ag.t;
	s->cur_bytes += dbytes; /* sizes wrap, as they do in the heap total */
	s->cur_count += dcount;
}

/* ------------------------------------------------------------------------
 * Sites and the live map.
 * ---------------------------------------------------------------------- */
static uint32_t key_hash(uint32_t stack, uint32_t thread, unsigned kind)
{
	uint64_t k = (uint64_t)stack << 32 | thread << 4 | kind;
	return (uint32_t)((k * 0x9E3779B97F4A7C15ull) >> 32);
}

static int slots_grow(void)
{
	uint32_t n = ag.slots ? (ag.slots_mask + 1) * 2 : 1024;
	uint32_t *v = calloc(n, sizeof(*v));
	if (!v)
		return -1;
	for (uint32_t i = 0; i < ag.n_sites; i++) {
		const struct site *s = &ag.sites[i];
		uint32_t j = key_hash(s->stack, s->thread, s->kind) & (n - 1);
		while (v[j])
			j = (j + 1) & (n - 1);
		v[j] = i + 1;
	}
	free(ag.slots);
	ag.slots = v;
	ag.slots_mask = n - 1;
	return 0;
}

static struct site *site_get(uint32_t stack, uint32_t thread, unsigned kind, uint64_t addr)
{
	if (!ag.slots && slots_grow() < 0)
		return NULL;
	uint32_t j = key_hash(stack, thread, kind) & ag.slots_mask;
	for (; ag.slots[j]; j = (j + 1) & ag.slots_mask) {
		struct site *s = &ag.sites[ag.slots[j] - 1];
		if (s->stack == stack && s->thread == thread && s->kind == kind)
			return s;
	}
	if (ag.n_sites == ag.sites_cap) {
		uint32_t cap = ag.sites_cap ? ag.sites_cap * 2 : 256;
		struct site *v = realloc(ag.sites, cap * sizeof(*v));
		if (!v)
			return NULL;
		ag.sites = v;
		ag.sites_cap = cap;
	}
	uint32_t i = ag.n_sites++;
	ag.sites[i] = (struct site){ .stack = stack, .thread = thread, .kind = kind,
				     .first_addr = addr };
	ag.slots[j] = i + 1;
	if ((uint64_t)ag.n_sites * 2 > ag.slots_mask && slots_grow() < 0) {
		ag.n_sites--; /* not in the new table: forget it */
		return NULL;
	}
	return &ag.sites[i];
}

static void mm_removed(void *ctx, uint32_t site, uint64_t bytes, int last)
{
	(void)ctx;
	change(&ag.sites[site], 0 - bytes, last ? (uint64_t)-1 : 0);
	if (last)
		ag.tot.live_count--;
}

static uint64_t range_end(uint64_t a, uint64_t len)
{
	return a + len < a ? UINT64_MAX : a + len;
}

/* ------------------------------------------------------------------------
 * Events.
 * ---------------------------------------------------------------------- */
void mt_agg_alloc(uint32_t thread, unsigned kind, uint64_t addr, uint64_t size, uint32_t stack)
{
	if (ag.failed)
		return;
	ag.t++;
	ag.tot.n_allocs++;
	ag.tot.bytes_allocated += size;
	if (kind < MT_TOTALS_KINDS) {
		ag.tot.kind_count[kind]++;
		ag.tot.kind_bytes[kind] += size;
	}
	ag.tot.size_hist[size ? 64 - __builtin_clzll(size) : 0]++;
	struct site *s = site_get(stack, thread, kind, addr);
	if (!s)
		goto oom;
	s->alloc_bytes += size;
	s->alloc_count++;
	if (addr == 0)
		return;
	if (kind == MT_ALLOC_MMAP) {
		uint64_t end = range_end(addr, size);
		if (size == 0)
			return;
		/* a mapping over a live one replaces it (MAP_FIXED) */
		uint64_t gone = mt_mappings_remove(&ag.mm, addr, end, mm_removed, NULL);
		if (gone == (uint64_t)-1)
			goto oom;
		ag.tot.heap -= gone;
		if (mt_mappings_add(&ag.mm, addr, end, (uint32_t)(s - ag.sites)) < 0)
			goto oom;
	} else {
		int had;
		struct mt_live *e = mt_livemap_put(&ag.live, addr, &had);
		if (!e)
			goto oom;
		if (had) {
			/* the free of the previous block was never recorded */
			change(&ag.sites[e->site], 0 - e->size, (uint64_t)-1);
			ag.tot.heap -= e->size;
			ag.tot.live_count--;
		}
		*e = (struct mt_live){ addr, size, (uint32_t)(s - ag.sites), 0 };
	}
	change(s, size, 1);
	ag.tot.live_count++;
	ag.tot.heap += size;
	if (ag.tot.heap >= ag.tot.peak_heap) {
		ag.tot.peak_heap = ag.tot.heap;
		ag.peak_event = ag.t;
		ag.tot.peak_time_us = ag.last_sample_us;
	}
	return;
oom:
	ag.failed = 1;
}

void mt_agg_free(uint32_t thread, unsigned kind, uint64_t addr, uint64_t size)
{
	(void)thread;
	if (ag.failed)
		return;
	ag.t++;
	ag.tot.n_frees++;
	if (kind == MT_ALLOC_MUNMAP) {
		uint64_t len = (size + ag.page_mask) & ~ag.page_mask;
		uint64_t gone = mt_mappings_remove(&ag.mm, addr, range_end(addr, len), mm_removed,
						   NULL);
		if (gone == (uint64_t)-1) {
			ag.failed = 1;
			return;
		}
		if (gone == 0)
			ag.tot.n_unmatched_frees++;
		ag.tot.heap -= gone;
		ag.tot.bytes_freed += gone;
		return;
	}
	struct mt_live *e = addr ? mt_livemap_get(&ag.live, addr) : NULL;
	if (!e) {
		ag.tot.n_unmatched_frees++;
		return;
	}
	change(&ag.sites[e->site], 0 - e->size, (uint64_t)-1);
	ag.tot.heap -= e->size;
	ag.tot.bytes_freed += e->size;
	ag.tot.live_count--;
	mt_livemap_delete(&ag.live, e);
}

/* ------------------------------------------------------------------------
 * Writing.
 * ---------------------------------------------------------------------- */
void mt_agg_emit(void (*append)(const struct mt_record *r))
{
	struct mt_record r = { .type = MT_REC_SITE };
	for (uint32_t i = 0; i < ag.n_sites; i++) {
		struct site *s = &ag.sites[i];
		int at_peak = s->last <= ag.peak_event;
		uint64_t pb = at_peak ? s->cur_bytes : s->pk_bytes;
		uint64_t pc = at_peak ? s->cur_count : s->pk_count;
		if (s->written && pb == s->w_peak_bytes && pc == s->w_peak_count &&
		    s->cur_bytes == s->w_leak_bytes && s->cur_count == s->w_leak_count &&
		    s->alloc_count == s->w_alloc_count)
			continue;
		r.site = (struct mt_rec_site){ .stack = s->stack,
					       .thread = s->thread,
					       .allocator = s->kind,
					       .peak_bytes = pb,
					       .peak_count = pc,
					       .leak_bytes = s->cur_bytes,
					       .leak_count = s->cur_count,
					       .alloc_bytes = s->alloc_bytes,
					       .alloc_count = s->alloc_count,
					       .first_addr = s->first_addr };
		append(&r);
		s->w_peak_bytes = pb, s->w_peak_count = pc;
		s->w_leak_bytes = s->cur_bytes, s->w_leak_count = s->cur_count;
		s->w_alloc_count = s->alloc_count;
		s->written = 1;
	}
	struct mt_record t = { .type = MT_REC_TOTALS };
	t.totals = ag.tot;
	append(&t);
}
