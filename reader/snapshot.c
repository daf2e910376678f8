/* SPDX-License-Identifier: MIT */
/*
 * Snapshot: one pass over the records that tracks live memory and
 * accumulates per-stack and per-thread usage at the heap peak, at the end
 * and in total. The alloc/free callbacks are the hot path of every
 * report: no allocation there except amortised table growth.
 */
#include "reader/snapshot-state.h"
#include "format/error.h"
#include "util/grow.h"
#include "util/slots.h"

#include <errno.h>  /* ENOMEM */
#include <stdio.h>  /* snprintf */
#include <stdlib.h> /* malloc */
#include <string.h> /* memcpy */

/* ------------------------------------------------------------------------
 * Counters
 * ---------------------------------------------------------------------- */
/* A change of @a's live bytes and count. With @extras 0 (a constant where
 * it is inlined) the options that follow each change are known to be off:
 * the pass of a snapshot without them (snapshot_ops) tests none of them at
 * every event. */
static inline __attribute__((always_inline)) void
acc_change_x(struct mt__snapshot_state *st, struct acc *a, int64_t dbytes, int64_t dcount,
	     int extras)
{
	if (a->last <= st->peak_event) {
		a->pk_bytes = a->cur_bytes;
		a->pk_count = a->cur_count;
	}
	a->last = st->t;
	a->cur_bytes += (uint64_t)dbytes; /* sizes wrap, as they do in the heap total */
	a->cur_count += (uint64_t)dcount;
	if (!extras)
		return;
	if (st->hwm)
		mt_hwmtime_change(st->hwm, (uint32_t)(a - st->sites), dbytes, dcount);
	if (st->growth && dbytes) {
		/* one series per printed call path (stackkeys.h) */
		uint32_t stack = a->key.stack;
		uint32_t key = mt_stackkeys_get(&st->gkeys, &st->stk, stack, &st->oom);
		if (mt_growth_change(st->growth, key, dbytes) < 0)
			st->oom = 1;
	}
}

static inline void acc_change(struct mt__snapshot_state *st, struct acc *a, int64_t dbytes,
			      int64_t dcount)
{
	acc_change_x(st, a, dbytes, dcount, 1);
}

/* Room for stack id @id in the per-stack arrays. */
int mt__snap_stack_room(struct mt__snapshot_state *st, uint32_t id)
{
	if (id >= st->stacks_cap &&
	    mt_grow((void **)&st->stack_site, &st->stacks_cap, id, sizeof(uint32_t)) < 0)
		return -ENOMEM;
	if (id > st->max_stack)
		st->max_stack = id;
	return 0;
}

static int thread_grow(struct mt__snapshot_state *st, uint32_t idx)
{
	uint32_t cap = st->thr_cap;
	if (mt_grow((void **)&st->thr_seq, &cap, idx, sizeof(uint32_t)) < 0)
		return -ENOMEM;
	cap = st->thr_cap;
	if (mt_grow((void **)&st->thr_tid, &cap, idx, sizeof(uint64_t)) < 0)
		return -ENOMEM;
	cap = st->thr_cap;
	if (mt_grow((void **)&st->thr_name, &cap, idx, sizeof(char *)) < 0)
		return -ENOMEM;
	st->thr_cap = cap;
	return 0;
}

/* Room for thread index @idx (< MAX_THREAD) in the per-thread arrays. */
int mt__snap_thread_room(struct mt__snapshot_state *st, uint32_t idx)
{
	if (idx >= st->thr_cap && thread_grow(st, idx) < 0)
		return -ENOMEM;
	if (idx + 1 > st->max_thread)
		st->max_thread = idx + 1;
	return 0;
}

static inline uint64_t site_key_hash(struct site_key k)
{
	return ((uint64_t)k.stack << 32 | k.thread_kind) * 0x9E3779B97F4A7C15ull >> 32;
}

static uint64_t site_hash_at(const void *ctx, size_t i)
{
	return site_key_hash(((const struct mt__snapshot_state *)ctx)->sites[i].key);
}

/* Twice the site slots (64 at first), holding every site. */
static int site_slots_grow(struct mt__snapshot_state *st)
{
	if (mt_slots_grow(&st->site_slots, &st->site_nslots, 64, 0, st->n_sites, site_hash_at,
			  st) < 0)
		return -ENOMEM;
	st->site_slots_mask = (uint32_t)st->site_nslots - 1;
	return 0;
}

/* The site of (@stack, @thread, @kind), created on first use by the
 * allocation at @addr; -1 when out of memory. The caller made room for
 * @stack and @thread. */
static inline int64_t site_get(struct mt__snapshot_state *st, uint32_t stack, uint32_t thread,
			       unsigned kind, uint64_t addr)
{
	struct site_key k = { stack, thread << SITE_KIND_BITS | kind };
	uint32_t c = st->stack_site[stack];
	if (c && st->sites[c - 1].key.thread_kind == k.thread_kind)
		return c - 1;
	uint32_t j = (uint32_t)site_key_hash(k) & st->site_slots_mask;
	while (st->site_slots[j]) {
		uint32_t i = st->site_slots[j] - 1;
		if (st->sites[i].key.stack == stack && st->sites[i].key.thread_kind == k.thread_kind) {
			st->stack_site[stack] = i + 1;
			return i;
		}
		j = (j + 1) & st->site_slots_mask;
	}
	if (st->n_sites == st->sites_cap) {
		/* each site's counters one line of the cache: mt_grow()'s
		 * arrays start on one */
		uint32_t cap = st->sites_cap;
		if (mt_grow((void **)&st->sites, &cap, st->n_sites, sizeof(struct acc)) < 0)
			return -1;
		cap = st->sites_cap;
		if (mt_grow((void **)&st->site_tmp, &cap, st->n_sites, sizeof(struct acc_tmp)) < 0)
			return -1;
		cap = st->sites_cap;
		if (mt_grow((void **)&st->site_first, &cap, st->n_sites, sizeof(uint64_t)) < 0)
			return -1;
		st->sites_cap = cap;
	}
	uint32_t i = st->n_sites++;
	st->sites[i].key = k;
	st->site_first[i] = addr;
	st->site_slots[j] = i + 1;
	st->stack_site[stack] = i + 1;
	if ((uint64_t)st->n_sites * 2 > st->site_slots_mask && site_slots_grow(st) < 0)
		return -1;
	return i;
}

/* ------------------------------------------------------------------------
 * Temporal: when each block was allocated, kept beside it (temporal.h)
 * ---------------------------------------------------------------------- */
static inline uint32_t path_key(struct mt__snapshot_state *st, uint32_t site)
{
	if (st->temporal_by_site)
		return site;
	return mt_stackkeys_get(&st->gkeys, &st->stk, st->sites[site].key.stack, &st->oom);
}

/* A block of the malloc family at @addr allocated now. */
static void temporal_alloc(struct mt__snapshot_state *st, uint32_t site, uint64_t addr,
			   uint64_t size)
{
	uint64_t a = mt_temporal_alloc(st->temporal, path_key(st, site), size);
	int had;
	struct mt_live *e = mt_livemap_put(&st->tlive, addr, &had);
	if (!e) {
		st->oom = 1;
		return;
	}
	*e = (struct mt_live){ addr, a, site, 0 };
}

/* ... and freed now */
static void temporal_free(struct mt__snapshot_state *st, uint64_t addr, uint64_t size)
{
	struct mt_live *e = mt_livemap_get(&st->tlive, addr);
	if (!e)
		return;
	mt_temporal_free(st->temporal, path_key(st, e->site), e->size, size, 1);
	mt_livemap_delete(&st->tlive, e);
}

/* A new mapping of site @site at @addr (@size bytes, the thread's count
 * @seq after it): its index in st->maps, or -1 without memory. */
static int64_t map_new(struct mt__snapshot_state *st, uint32_t site, uint64_t addr,
		       uint64_t size, uint32_t seq)
{
	uint32_t i;

	if (st->n_maps_free) {
		i = st->maps_free[--st->n_maps_free];
	} else {
		if (st->n_maps == st->maps_cap) {
			size_t n = st->maps_cap ? st->maps_cap * 2 : 256;
			if (n > UINT32_MAX)
				return -1;
			struct mt__map *v = realloc(st->maps, n * sizeof(*v));
			if (!v)
				return -1;
			st->maps = v;
			uint32_t *f = realloc(st->maps_free, n * sizeof(*f));
			if (!f)
				return -1;
			st->maps_free = f;
			st->maps_cap = n;
		}
		i = (uint32_t)st->n_maps++;
	}
	uint64_t a = st->temporal ? mt_temporal_alloc(st->temporal, path_key(st, site), size) : 0;
	st->maps[i] = (struct mt__map){ addr, size, a, site, seq };
	return i;
}

/* Mapping @m gone whole under the munmap being applied: temporary if it
 * was that munmap's address and length, and the thread that made it
 * unmapped it with at most temp_threshold of its allocations in between
 * (memray's meaning, as for the malloc family's blocks). */
static void map_temporary(struct mt__snapshot_state *st, const struct mt__map *m)
{
	const struct mt__unmap *u = &st->unmap;

	if (!u->on || m->addr != u->addr || m->size != u->size ||
	    st->sites[m->site].key.thread_kind >> SITE_KIND_BITS != u->thread ||
	    (uint32_t)(st->thr_seq[u->thread] - m->seq) > st->temp_threshold)
		return;
	st->site_tmp[m->site].bytes += m->size;
	st->site_tmp[m->site].count++;
}

/* A part of live mapping @value gone (@last: the mapping's last part). */
static void mm_removed(void *ctx, uint32_t value, uint64_t bytes, int last)
{
	struct mt_snapshot *s = ctx;
	struct mt__snapshot_state *st = s->st;
	const struct mt__map *m = &st->maps[value];

	if (st->temporal)
		mt_temporal_free(st->temporal, path_key(st, m->site), m->a, bytes, last);
	acc_change(st, &st->sites[m->site], (int64_t)(0 - bytes), last ? -1 : 0);
	if (!last)
		return;
	s->leak_count--;
	map_temporary(st, m);
	st->maps_free[st->n_maps_free++] = value;
}

static inline uint64_t range_end(uint64_t a, uint64_t len)
{
	return a + len < a ? UINT64_MAX : a + len;
}

/* mt__snap_site()'s body, inline in the hot path here */
static inline int64_t site_for(struct mt__snapshot_state *st, uint32_t stack, uint32_t thread,
			       unsigned kind, uint64_t addr)
{
	if ((stack >= st->stacks_cap || thread >= st->thr_cap) &&
	    (mt__snap_stack_room(st, stack) < 0 || mt__snap_thread_room(st, thread) < 0))
		return -1;
	if (stack > st->max_stack)
		st->max_stack = stack;
	if (thread >= st->max_thread)
		st->max_thread = thread + 1;
	return site_get(st, stack, thread, kind, addr);
}

int64_t mt__snap_site(struct mt__snapshot_state *st, uint32_t stack, uint32_t thread,
		      unsigned kind, uint64_t addr)
{
	return site_for(st, stack, thread, kind, addr);
}

/* ------------------------------------------------------------------------
 * Record callbacks
 * ---------------------------------------------------------------------- */
static inline unsigned size_bucket(uint64_t size)
{
	return size ? 64 - (unsigned)__builtin_clzll(size) : 0;
}

/* Whether a block of @kind and @size is one of glibc's malloc: the malloc
 * family, and pymalloc's blocks above its 512 bytes, which it gets from
 * malloc (unless Python's object allocator is mimalloc). */
static inline int in_malloc(const struct mt__snapshot_state *st, unsigned kind, uint64_t size)
{
	if (kind >= MT_ALLOC_PYMALLOC_MALLOC && kind <= MT_ALLOC_PYMALLOC_REALLOC)
		return size > 512 && !st->mimalloc;
	return kind != MT_ALLOC_MMAP;
}

/* The size of glibc's chunk for a block of @size (64-bit): an 8-byte
 * header, 16-byte alignment, 32 bytes at least; from 128 KiB, its first
 * mmap threshold, a mapping of its own in whole pages. */
static uint64_t malloc_chunk(const struct mt__snapshot_state *st, uint64_t size)
{
	if (size > UINT64_MAX / 2)
		return size;
	uint64_t c = size + 8 + 15 < 32 ? 32 : (size + 8 + 15) & ~15ull;
	if (size >= (128u << 10))
		c = (c + 8 + st->page_mask) & ~st->page_mask;
	return c;
}

/* A live block of @kind and @size comes (@sign 1) or goes (-1). */
static void malloc_count(struct mt_snapshot *s, unsigned kind, uint64_t size, int sign)
{
	struct mt__snapshot_state *st = s->st;
	if (!in_malloc(st, kind, size))
		return;
	uint64_t c = malloc_chunk(st, size);
	st->malloc_bytes += sign > 0 ? size : 0 - size;
	st->malloc_chunks += sign > 0 ? c : 0 - c;
}

/* An ALLOC record; @extras: as acc_change_x()'s. */
static inline __attribute__((always_inline)) int alloc_x(void *ctx, const struct mt__event *r,
							 int extras)
{
	struct mt_snapshot *s = ctx;
	struct mt__snapshot_state *st = s->st;
	uint64_t size = r->size, addr = r->addr;
	unsigned kind = r->kind;
	uint32_t stack = mt__snap_believed(st, r->stack, DEF_STACK) ? r->stack : 0;
	uint32_t thread = mt__snap_believed(st, r->tidx, DEF_THREAD) ? r->tidx : 0;

	st->t++;
	s->n_events++;
	s->n_allocs++;
	s->bytes_allocated += size;
	s->by_allocator_count[kind]++;
	s->by_allocator_bytes[kind] += size;
	s->size_hist[size_bucket(size)]++;
	if (extras && st->sizes && mt_sizes_add(st->sizes, size) < 0)
		return -ENOMEM;
	int64_t si = site_for(st, stack, thread, kind, addr);
	if (si < 0)
		return -ENOMEM;
	struct acc *sa = &st->sites[si];
	uint32_t seq = ++st->thr_seq[thread];
	sa->alloc_bytes += size;
	sa->alloc_count++;
	if (addr == 0)
		return 0;

	if (kind == MT_ALLOC_MMAP) {
		uint64_t end = range_end(addr, size);
		if (size == 0)
			return 0;
		/* a mapping over a live one replaces it (MAP_FIXED) */
		uint64_t gone = mt_mappings_remove(&st->mm, addr, end, mm_removed, s);
		if (gone == (uint64_t)-1)
			return -ENOMEM;
		st->heap -= gone;
		int64_t value = map_new(st, (uint32_t)si, addr, size, seq);
		if (value < 0 || mt_mappings_add(&st->mm, addr, end, (uint32_t)value) < 0)
			return -ENOMEM;
	} else {
		int had;
		struct mt_live *e = mt_livemap_put(&st->live, addr, &had);
		if (!e)
			return -ENOMEM;
		if (had) {
			/* the free of the previous block was never recorded */
			if (extras && st->temporal)
				temporal_free(st, addr, e->size);
			acc_change_x(st, &st->sites[e->site], (int64_t)(0 - e->size), -1, extras);
			st->heap -= e->size;
			malloc_count(s, st->sites[e->site].key.thread_kind & SITE_KIND_MASK, e->size, -1);
			s->leak_count--;
		}
		e->size = size;
		e->site = (uint32_t)si;
		e->seq = seq;
		if (extras && st->temporal)
			temporal_alloc(st, (uint32_t)si, addr, size);
		malloc_count(s, kind, size, 1);
	}
	acc_change_x(st, sa, (int64_t)size, 1, extras);
	s->leak_count++;
	st->heap += size;
	/* live blocks larger than an address space, together: no process
	 * holds that (and sums past 2^64 would wrap) */
	if (__builtin_expect(!mt_size_possible(st->heap), 0)) {
		snprintf(st->why, sizeof(st->why),
			 "the blocks live here add up to more than any address space holds");
		return -MT_ECORRUPT;
	}
	if (st->heap >= s->peak_heap) {
		s->peak_heap = st->heap;
		st->peak_event = st->t;
		s->peak_time_us = st->last_sample_us;
		st->peak_open = 1;
	}
	return 0;
}

static inline __attribute__((always_inline)) int free_x(void *ctx, const struct mt__event *r,
							int extras)
{
	struct mt_snapshot *s = ctx;
	struct mt__snapshot_state *st = s->st;
	uint64_t addr = r->addr;

	st->t++;
	s->n_events++;
	s->n_frees++;
	if (r->kind == MT_ALLOC_MUNMAP) {
		uint64_t len = (r->size + st->page_mask) & ~st->page_mask;
		uint32_t thread = mt__snap_believed(st, r->tidx, DEF_THREAD) ? r->tidx : 0;
		st->unmap = (struct mt__unmap){ addr, r->size, thread, 1 };
		uint64_t gone = mt_mappings_remove(&st->mm, addr, range_end(addr, len), mm_removed, s);
		st->unmap.on = 0;
		if (gone == (uint64_t)-1)
			return -ENOMEM;
		if (gone == 0)
			s->n_unmatched_frees++;
		st->heap -= gone;
		s->bytes_freed += gone;
		return 0;
	}
	struct mt_live *e = addr ? mt_livemap_get(&st->live, addr) : NULL;
	if (!e) {
		s->n_unmatched_frees++;
		return 0;
	}
	struct acc *a = &st->sites[e->site];
	acc_change_x(st, a, (int64_t)(0 - e->size), -1, extras);
	/* temporary: freed by the allocating thread with at most
	 * temp_threshold of its allocations in between (memray's meaning) */
	uint32_t thread = mt__snap_believed(st, r->tidx, DEF_THREAD) ? r->tidx : 0;
	if (st->sites[e->site].key.thread_kind >> SITE_KIND_BITS == thread &&
	    (uint32_t)(st->thr_seq[thread] - e->seq) <= st->temp_threshold) {
		st->site_tmp[e->site].bytes += e->size;
		st->site_tmp[e->site].count++;
	}
	st->heap -= e->size;
	malloc_count(s, st->sites[e->site].key.thread_kind & SITE_KIND_MASK, e->size, -1);
	s->bytes_freed += e->size;
	s->leak_count--;
	if (extras && st->temporal)
		temporal_free(st, addr, e->size);
	mt_livemap_delete(&st->live, e);
	return 0;
}

/* The record at the head of the queue leaves it and is counted; on an
 * error the records behind it are dropped, as they would not have been
 * read. */
static int ahead_run(struct mt_snapshot *s)
{
	struct mt__ahead *q = &s->st->ahead;
	const struct mt__event *r = &q->r[q->head];
	int rc = !r->free ? (q->extras ? alloc_x(s, r, 1) : alloc_x(s, r, 0))
			  : (q->extras ? free_x(s, r, 1) : free_x(s, r, 0));
	q->head = (q->head + 1) % MT__AHEAD;
	q->n--;
	if (rc < 0)
		q->n = 0;
	return rc;
}

static int ahead_flush(struct mt_snapshot *s)
{
	int rc = 0;
	while (s->st->ahead.n && rc >= 0)
		rc = ahead_run(s);
	return rc;
}

/* Half way through the queue, @r's slot of the live map (a FREE's) or its
 * stack's latest site (an ALLOC's) has come into the cache: what they
 * name, its site's counters, is fetched in turn. A hint only: the records
 * before it may still change both. */
static inline void ahead_site(struct mt__snapshot_state *st, const struct mt__event *r)
{
	uint32_t site;
	if (r->free) {
		const struct mt_live *e = r->addr ? mt_livemap_get(&st->live, r->addr) : NULL;
		if (!e)
			return;
		site = e->site;
	} else {
		if (r->stack >= st->stacks_cap || !st->stack_site[r->stack])
			return;
		site = st->stack_site[r->stack] - 1;
	}
	if (site < st->n_sites)
		__builtin_prefetch(&st->sites[site], 1);
}

static int on_hot(void *ctx, const struct mt_record *r)
{
	struct mt_snapshot *s = ctx;
	struct mt__snapshot_state *st = s->st;
	struct mt__ahead *q = &st->ahead;
	int rc = q->n == MT__AHEAD ? ahead_run(s) : 0;
	if (rc < 0)
		return rc;
	struct mt__event *h = &q->r[(q->head + q->n++) % MT__AHEAD];
	if (r->type == MT_REC_ALLOC)
		*h = (struct mt__event){ r->alloc.addr, r->alloc.size, r->alloc.stack, r->tidx, 0,
				       r->alloc.kind };
	else
		*h = (struct mt__event){ r->free.addr, r->free.size, 0, r->tidx, 1, r->free.kind };
	mt_livemap_prefetch(&st->live, h->addr);
	if (st->temporal)
		mt_livemap_prefetch(&st->tlive, h->addr);
	if (!h->free && h->stack < st->stacks_cap)
		__builtin_prefetch(&st->stack_site[h->stack]);
	if (q->n > MT__AHEAD / 2)
		ahead_site(st, &q->r[(q->head + q->n - 1 - MT__AHEAD / 2) % MT__AHEAD]);
	return 0;
}

static int on_sample(void *ctx, const struct mt_record *r)
{
	struct mt_snapshot *s = ctx;
	struct mt__snapshot_state *st = s->st;

	if (s->n_samples == st->samples_cap) {
		size_t n = st->samples_cap ? st->samples_cap * 2 : 256;
		struct mt_sample *nv = realloc(s->samples, n * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		s->samples = nv;
		st->samples_cap = n;
	}
	/* an aggregated capture's samples say what the heap was */
	uint64_t heap = r->sample.heap ? r->sample.heap - 1 : st->heap;
	int agg = (s->header.flags & MT_HDR_AGGREGATED) != 0;
	if (!agg && !s->n_events && r->sample.in_use)
		s->in_use_start = r->sample.in_use - 1;
	s->samples[s->n_samples++] = (struct mt_sample){
		.time_us = r->sample.time_us,
		.rss = r->sample.rss,
		.heap = heap,
		.in_use = r->sample.in_use ? r->sample.in_use - 1 : MT_SAMPLE_UNKNOWN,
		.malloc_bytes = agg ? MT_SAMPLE_UNKNOWN : st->malloc_bytes,
		.malloc_chunks = agg ? MT_SAMPLE_UNKNOWN : st->malloc_chunks,
	};
	if (r->sample.rss > s->peak_rss) {
		s->peak_rss = r->sample.rss;
		s->peak_rss_time_us = r->sample.time_us;
	}
	st->last_sample_us = r->sample.time_us;
	if (st->peak_open) {
		s->peak_until_us = r->sample.time_us;
		st->peak_open = 0;
	}
	if (st->growth)
		mt_growth_sample(st->growth, r->sample.time_us);
	if (st->temporal)
		mt_temporal_sample(st->temporal);
	if (st->hwm && st->hwm_samples++ % st->hwm_stride == 0)
		mt_hwmtime_snapshot(st->hwm);
	if (!s->have_trailer && r->sample.time_us > s->end_time_us)
		s->end_time_us = r->sample.time_us;
	return 0;
}

/* ------------------------------------------------------------------------
 * Build and release
 * ---------------------------------------------------------------------- */
static const char *on_why(void *ctx)
{
	struct mt_snapshot *s = ctx;
	return s->st->why[0] ? s->st->why : NULL;
}

/* every record but ALLOC and FREE empties the queue first */
#define AFTER_AHEAD(fn)                                                \
	static int fn##_ahead(void *ctx, const struct mt_record *r)      \
	{                                                                \
		int rc = ahead_flush(ctx);                               \
		return rc < 0 ? rc : fn(ctx, r);                          \
	}
AFTER_AHEAD(mt__snap_on_thread)
AFTER_AHEAD(mt__snap_on_code)
AFTER_AHEAD(mt__snap_on_stack)
AFTER_AHEAD(on_sample)
AFTER_AHEAD(mt__snap_on_diag)
AFTER_AHEAD(mt__snap_on_trailer)
AFTER_AHEAD(mt__snap_on_native)
AFTER_AHEAD(mt__snap_on_hybrid)
AFTER_AHEAD(mt__snap_on_module)
AFTER_AHEAD(mt__snap_on_site)
AFTER_AHEAD(mt__snap_on_totals)
AFTER_AHEAD(mt__snap_on_name)

/* a record's damage is told with its own chunk */
static int on_chunk_end(void *ctx)
{
	return ahead_flush(ctx);
}

static const struct mt_record_ops snapshot_ops = {
	.alloc = on_hot,
	.free = on_hot,
	.thread = mt__snap_on_thread_ahead,
	.code = mt__snap_on_code_ahead,
	.stack = mt__snap_on_stack_ahead,
	.sample = on_sample_ahead,
	.diag = mt__snap_on_diag_ahead,
	.trailer = mt__snap_on_trailer_ahead,
	.native = mt__snap_on_native_ahead,
	.hybrid = mt__snap_on_hybrid_ahead,
	.module = mt__snap_on_module_ahead,
	.site = mt__snap_on_site_ahead,
	.totals = mt__snap_on_totals_ahead,
	.name = mt__snap_on_name_ahead,
	.chunk_end = on_chunk_end,
	.why = on_why,
};

int mt_snapshot_build(struct mt_snapshot *s, struct mt_capture *cap)
{
	struct mt_snapshot_opts o = { .temp_threshold = 1 };
	return mt_snapshot_build_opts(s, cap, &o);
}

int mt_snapshot_build_opts(struct mt_snapshot *s, struct mt_capture *cap,
			   const struct mt_snapshot_opts *o)
{
	int err = mt_snapshot_begin(s, cap, o);

	if (err < 0)
		return err;
	if ((err = mt_snapshot_feed(s, cap)) < 0 || (err = mt_snapshot_end(s)) < 0)
		mt_snapshot_release(s);
	return err;
}

int mt_snapshot_begin(struct mt_snapshot *s, struct mt_capture *cap,
		      const struct mt_snapshot_opts *o)
{
	const struct mt_header *h = mt_capture_header(cap);
	struct mt__snapshot_state *st;

	memset(s, 0, sizeof(*s));
	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	s->st = st;
	s->in_use_start = MT_SAMPLE_UNKNOWN;
	s->header = *h;
	s->header.cmdline.p = NULL;
	if (h->cmdline.len) {
		uint8_t *c = malloc(h->cmdline.len);
		if (!c) {
			mt_snapshot_release(s);
			return -ENOMEM;
		}
		memcpy(c, h->cmdline.p, h->cmdline.len);
		s->header.cmdline.p = c;
	}
	st->stk.python_hex = h->python_hex;
	st->stk.lines = mt_header_lines(h);
	st->temp_threshold = o->temp_threshold;
	st->python_only = o->python_only;
	s->temp_threshold = st->temp_threshold;
	st->page_mask = h->page_size && !(h->page_size & (h->page_size - 1)) ? h->page_size - 1 : 0;
	if (mt__snap_stack_room(st, 0) < 0 ||
	    mt__snap_thread_room(st, 0) < 0 || site_slots_grow(st) < 0) {
		mt_snapshot_release(s);
		return -ENOMEM;
	}
	if ((o->growth && !(st->growth = calloc(1, sizeof(*st->growth)))) ||
	    (o->temporal && !(st->temporal = calloc(1, sizeof(*st->temporal))))) {
		mt_snapshot_release(s);
		return -ENOMEM;
	}
	if (st->temporal) {
		st->temporal->budget = o->temporal_budget;
		st->temporal_by_site = o->temporal_by_site;
	}
	if (o->hwm_stride && !(st->hwm = calloc(1, sizeof(*st->hwm)))) {
		mt_snapshot_release(s);
		return -ENOMEM;
	}
	st->hwm_stride = o->hwm_stride;
	if (o->exact_sizes && !(st->sizes = calloc(1, sizeof(*st->sizes)))) {
		mt_snapshot_release(s);
		return -ENOMEM;
	}
	/* NULL without memory: the map then makes its tables itself */
	st->live_tables = mt_livemap_ahead_new(&st->live);
	mt_capture_rewind(cap);
	return 0;
}

int mt_snapshot_feed(struct mt_snapshot *s, struct mt_capture *cap)
{
	struct mt__snapshot_state *st = s->st;
	int rc;

	if (st->closed)
		return -EBUSY;
	/* the records are read against the trie as the capture defines it
	 * (growth's keys walk it): a view's cut and hybrid stacks come again
	 * at the next view */
	mt_stacks_uncut(&st->stk);
	if (st->resolved) {
		mt_native_unresolve(&st->nat, &st->stk);
		st->resolved = 0;
	}
	st->ahead.extras = st->growth || st->temporal || st->hwm || st->sizes;
	while (mt_capture_step(cap, &snapshot_ops, s, &rc))
		;
	s->status = *mt_capture_status(cap);
	s->heap_end = st->heap;
	s->peak_event = st->peak_event;
	if (rc < 0 || st->oom || (st->temporal && st->temporal->oom) || (st->hwm && st->hwm->oom))
		return rc < 0 ? rc : -ENOMEM;
	return 0;
}

void mt_snapshot_release(struct mt_snapshot *s)
{
	struct mt__snapshot_state *st = s->st;

	free((void *)s->header.cmdline.p);
	free(s->samples);
	for (size_t i = 0; i < s->n_diags; i++)
		free(s->diags[i].msg);
	free(s->diags);
	free(s->threads);
	if (st) {
		mt_livemap_ahead_free(st->live_tables);
		mt_livemap_release(&st->live);
		mt_mappings_release(&st->mm);
		mt_grow_free(st->sites);
		mt_grow_free(st->site_tmp);
		mt_grow_free(st->site_first);
		free(st->site_slots);
		mt_grow_free(st->stack_site);
		free(st->site_out);
		mt_grow_free(st->thr_seq);
		mt_grow_free(st->thr_tid);
		for (uint32_t i = 0; i < st->thr_cap && st->thr_name; i++)
			free(st->thr_name[i]);
		mt_grow_free(st->thr_name);
		mt_tnames_release(&st->names);
		mt_stacks_release(&st->stk);
		mt_native_release(&st->nat);
		if (st->growth)
			mt_growth_release(st->growth);
		mt_stackkeys_release(&st->gkeys);
		if (st->temporal)
			mt_temporal_release(st->temporal);
		free(st->temporal);
		mt_livemap_release(&st->tlive);
		free(st->maps);
		free(st->maps_free);
		if (st->hwm)
			mt_hwmtime_release(st->hwm);
		free(st->hwm);
		if (st->sizes)
			mt_sizes_release(st->sizes);
		free(st->sizes);
		free(st->growth);
		free(st);
	}
	memset(s, 0, sizeof(*s));
}
