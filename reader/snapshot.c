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
#include <stdio.h>  /* sscanf */
#include <stdlib.h> /* malloc */
#include <string.h> /* memcpy */

/* ------------------------------------------------------------------------
 * Counters
 * ---------------------------------------------------------------------- */
static inline void acc_change(struct mt__snapshot_state *st, struct acc *a, int64_t dbytes,
			      int64_t dcount)
{
	if (a->last <= st->peak_event) {
		a->pk_bytes = a->cur_bytes;
		a->pk_count = a->cur_count;
	}
	a->last = st->t;
	a->cur_bytes += (uint64_t)dbytes; /* sizes wrap, as they do in the heap total */
	a->cur_count += (uint64_t)dcount;
	if (st->growth && dbytes) {
		/* one series per printed call path (stackkeys.h) */
		uint32_t stack = st->site_keys[a - st->sites].stack;
		uint32_t key = mt_stackkeys_get(&st->gkeys, &st->stk, stack, &st->oom);
		if (mt_growth_change(st->growth, key, dbytes) < 0)
			st->oom = 1;
	}
}


static inline uint64_t acc_peak_bytes(const struct mt__snapshot_state *st, const struct acc *a)
{
	return a->last <= st->peak_event ? a->cur_bytes : a->pk_bytes;
}

static inline uint64_t acc_peak_count(const struct mt__snapshot_state *st, const struct acc *a)
{
	return a->last <= st->peak_event ? a->cur_count : a->pk_count;
}

/* Room for stack id @id in the per-stack arrays. */
static int stack_room(struct mt__snapshot_state *st, uint32_t id)
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
static int thread_room(struct mt__snapshot_state *st, uint32_t idx)
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
	return site_key_hash(((const struct mt__snapshot_state *)ctx)->site_keys[i]);
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
	struct site_key k = { stack, thread << 4 | kind };
	uint32_t c = st->stack_site[stack];
	if (c && st->site_keys[c - 1].thread_kind == k.thread_kind)
		return c - 1;
	uint32_t j = (uint32_t)site_key_hash(k) & st->site_slots_mask;
	while (st->site_slots[j]) {
		uint32_t i = st->site_slots[j] - 1;
		if (st->site_keys[i].stack == stack && st->site_keys[i].thread_kind == k.thread_kind) {
			st->stack_site[stack] = i + 1;
			return i;
		}
		j = (j + 1) & st->site_slots_mask;
	}
	if (st->n_sites == st->sites_cap) {
		uint32_t cap = st->sites_cap;
		if (mt_grow((void **)&st->sites, &cap, st->n_sites, sizeof(struct acc)) < 0)
			return -1;
		cap = st->sites_cap;
		if (mt_grow((void **)&st->site_keys, &cap, st->n_sites, sizeof(struct site_key)) < 0)
			return -1;
		cap = st->sites_cap;
		if (mt_grow((void **)&st->site_first, &cap, st->n_sites, sizeof(uint64_t)) < 0)
			return -1;
		st->sites_cap = cap;
	}
	uint32_t i = st->n_sites++;
	st->site_keys[i] = k;
	st->site_first[i] = addr;
	st->site_slots[j] = i + 1;
	st->stack_site[stack] = i + 1;
	if ((uint64_t)st->n_sites * 2 > st->site_slots_mask && site_slots_grow(st) < 0)
		return -1;
	return i;
}

/* A part of a live mapping of site @site gone (@last: the mapping's
 * last part). */
static void mm_removed(void *ctx, uint32_t site, uint64_t bytes, int last)
{
	struct mt_snapshot *s = ctx;
	struct mt__snapshot_state *st = s->st;

	acc_change(st, &st->sites[site], (int64_t)(0 - bytes), last ? -1 : 0);
	if (last)
		s->leak_count--;
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
	    (stack_room(st, stack) < 0 || thread_room(st, thread) < 0))
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
static int in_malloc(const struct mt_snapshot *s, unsigned kind, uint64_t size)
{
	if (kind >= MT_ALLOC_PYMALLOC_MALLOC && kind <= MT_ALLOC_PYMALLOC_REALLOC)
		return size > 512 && strncmp(s->python_allocator, "mimalloc", 8) != 0;
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
	if (!in_malloc(s, kind, size))
		return;
	uint64_t c = malloc_chunk(st, size);
	st->malloc_bytes += sign > 0 ? size : 0 - size;
	st->malloc_chunks += sign > 0 ? c : 0 - c;
}

static int on_alloc(void *ctx, const struct mt_record *r)
{
	struct mt_snapshot *s = ctx;
	struct mt__snapshot_state *st = s->st;
	uint64_t size = r->alloc.size, addr = r->alloc.addr;
	unsigned kind = r->alloc.kind;
	uint32_t stack = mt__snap_believed(st, r->alloc.stack, DEF_STACK) ? r->alloc.stack : 0;
	uint32_t thread = mt__snap_believed(st, r->tidx, DEF_THREAD) ? r->tidx : 0;

	st->t++;
	s->n_events++;
	s->n_allocs++;
	s->bytes_allocated += size;
	s->by_allocator_count[kind]++;
	s->by_allocator_bytes[kind] += size;
	s->size_hist[size_bucket(size)]++;
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
		if (mt_mappings_add(&st->mm, addr, end, (uint32_t)si) < 0)
			return -ENOMEM;
	} else {
		if (mt_livemap_reserve(&st->live) < 0)
			return -ENOMEM;
		struct mt_live *e = mt_livemap_find(&st->live, addr);
		if (e->addr) {
			/* the free of the previous block was never recorded */
			acc_change(st, &st->sites[e->site], (int64_t)(0 - e->size), -1);
			st->heap -= e->size;
			malloc_count(s, st->site_keys[e->site].thread_kind & 15, e->size, -1);
			s->leak_count--;
		} else {
			st->live.n++;
		}
		e->addr = addr;
		e->size = size;
		e->site = (uint32_t)si;
		e->seq = seq;
		malloc_count(s, kind, size, 1);
	}
	acc_change(st, sa, (int64_t)size, 1);
	s->leak_count++;
	st->heap += size;
	if (st->heap >= s->peak_heap) {
		s->peak_heap = st->heap;
		st->peak_event = st->t;
		s->peak_time_us = st->last_sample_us;
	}
	return 0;
}

static int on_free(void *ctx, const struct mt_record *r)
{
	struct mt_snapshot *s = ctx;
	struct mt__snapshot_state *st = s->st;
	uint64_t addr = r->free.addr;

	st->t++;
	s->n_events++;
	s->n_frees++;
	if (r->free.kind == MT_ALLOC_MUNMAP) {
		uint64_t len = (r->free.size + st->page_mask) & ~st->page_mask;
		uint64_t gone = mt_mappings_remove(&st->mm, addr, range_end(addr, len), mm_removed, s);
		if (gone == (uint64_t)-1)
			return -ENOMEM;
		if (gone == 0)
			s->n_unmatched_frees++;
		st->heap -= gone;
		s->bytes_freed += gone;
		return 0;
	}
	if (addr == 0 || !st->live.v) {
		s->n_unmatched_frees++;
		return 0;
	}
	struct mt_live *e = mt_livemap_find(&st->live, addr);
	if (!e->addr) {
		s->n_unmatched_frees++;
		return 0;
	}
	struct acc *a = &st->sites[e->site];
	acc_change(st, a, (int64_t)(0 - e->size), -1);
	/* temporary: freed by the allocating thread with at most
	 * temp_threshold of its allocations in between (memray's meaning) */
	uint32_t thread = mt__snap_believed(st, r->tidx, DEF_THREAD) ? r->tidx : 0;
	if (st->site_keys[e->site].thread_kind >> 4 == thread &&
	    (uint32_t)(st->thr_seq[thread] - e->seq) <= st->temp_threshold) {
		a->tmp_bytes += e->size;
		a->tmp_count++;
	}
	st->heap -= e->size;
	malloc_count(s, st->site_keys[e->site].thread_kind & 15, e->size, -1);
	s->bytes_freed += e->size;
	s->leak_count--;
	mt_livemap_delete(&st->live, e);
	return 0;
}

static char *copy_str(const struct mt_bytes *b)
{
	char *c = malloc(b->len + 1);
	if (!c)
		return NULL;
	for (uint32_t i = 0; i < b->len; i++)
		c[i] = b->p[i] ? (char)b->p[i] : ' ';
	c[b->len] = '\0';
	return c;
}

static int on_thread(void *ctx, const struct mt_record *r)
{
	struct mt_snapshot *s = ctx;
	struct mt__snapshot_state *st = s->st;
	char *name;

	uint32_t i = mt__snap_believed(st, r->tidx, DEF_THREAD) ? r->tidx : 0;
	/* the program's name for it if it gave one, else the OS name */
	const char *given = mt_tnames_get(&st->names, r->thread.tid);
	if (thread_room(st, i) < 0 || !(name = given ? strdup(given) : copy_str(&r->thread.name)))
		return -ENOMEM;
	st->thr_tid[i] = r->thread.tid;
	if (!st->thr_name[i])
		st->n_def[DEF_THREAD]++;
	free(st->thr_name[i]);
	st->thr_name[i] = name;
	return 0;
}

/* The program named a thread: the one of that tid registered last, and
 * any registered later. */
static int on_name(void *ctx, const struct mt_record *r)
{
	struct mt_snapshot *s = ctx;
	struct mt__snapshot_state *st = s->st;
	uint32_t n = r->name.name.len < MT_NAME_MAX ? r->name.name.len : MT_NAME_MAX;

	if (mt_tnames_set(&st->names, r->name.tid, r->name.name.p, n) < 0)
		return -ENOMEM;
	for (uint32_t i = st->thr_cap; i-- > 0;) {
		if (st->thr_name[i] && st->thr_tid[i] == r->name.tid) {
			char *name = strdup(mt_tnames_get(&st->names, r->name.tid));
			if (!name)
				return -ENOMEM;
			free(st->thr_name[i]);
			st->thr_name[i] = name;
			break;
		}
	}
	return 0;
}

static int on_code(void *ctx, const struct mt_record *r)
{
	struct mt_snapshot *s = ctx;
	struct mt__snapshot_state *st = s->st;

	if (!mt__snap_believed(st, r->code.id, DEF_CODE))
		return 0;
	int fresh = mt_stacks_define_code(&st->stk, &r->code);
	if (fresh < 0)
		return fresh;
	st->n_def[DEF_CODE] += (uint32_t)fresh;
	return 0;
}

static int on_stack(void *ctx, const struct mt_record *r)
{
	struct mt_snapshot *s = ctx;
	struct mt__snapshot_state *st = s->st;
	const struct mt_rec_stack *k = &r->stack;

	if (!mt__snap_believed(st, k->id, DEF_STACK))
		return 0;
	int fresh = mt_stacks_define_stack(&st->stk, k);
	if (fresh < 0)
		return fresh;
	st->n_def[DEF_STACK] += (uint32_t)fresh;
	if (k->id > st->max_stack && stack_room(st, k->id) < 0)
		return -ENOMEM;
	return 0;
}

/* NATIVE and HYBRID ids are stack ids too (an allocation names a HYBRID
 * one): they count as STACK definitions. */
static int on_native(void *ctx, const struct mt_record *r)
{
	struct mt_snapshot *s = ctx;
	struct mt__snapshot_state *st = s->st;

	if (!mt__snap_believed(st, r->native.id, DEF_STACK))
		return 0;
	int fresh = mt_native_node(&st->nat, &r->native);
	if (fresh < 0)
		return fresh;
	st->n_def[DEF_STACK] += (uint32_t)fresh;
	return 0;
}

static int on_hybrid(void *ctx, const struct mt_record *r)
{
	struct mt_snapshot *s = ctx;
	struct mt__snapshot_state *st = s->st;

	if (!mt__snap_believed(st, r->hybrid.id, DEF_STACK))
		return 0;
	int fresh = mt_native_hybrid(&st->nat, &r->hybrid);
	if (fresh < 0)
		return fresh;
	st->n_def[DEF_STACK] += (uint32_t)fresh;
	if (r->hybrid.id > st->max_stack && stack_room(st, r->hybrid.id) < 0)
		return -ENOMEM;
	return 0;
}

static int on_module(void *ctx, const struct mt_record *r)
{
	struct mt_snapshot *s = ctx;
	return mt_native_module(&s->st->nat, &r->module);
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
	if (st->growth)
		mt_growth_sample(st->growth, r->sample.time_us);
	if (!s->have_trailer && r->sample.time_us > s->end_time_us)
		s->end_time_us = r->sample.time_us;
	return 0;
}

static int on_diag(void *ctx, const struct mt_record *r)
{
	struct mt_snapshot *s = ctx;
	struct mt__snapshot_state *st = s->st;

	if (r->diag.code == MT_DIAG_TRACKER_ROOT) { /* where a Tracker's stacks start */
		char text[64];
		unsigned depth;
		unsigned long long hash;
		size_t n = r->diag.msg.len < sizeof(text) - 1 ? r->diag.msg.len : sizeof(text) - 1;
		memcpy(text, r->diag.msg.p, n);
		text[n] = '\0';
		if (sscanf(text, "%u %llx", &depth, &hash) == 2 && depth) {
			st->root_depth = depth;
			st->root_hash = hash;
		}
		return 0;
	}
	if (r->diag.code == MT_DIAG_PYTHON_ALLOCATOR) { /* metadata, not a message */
		size_t n = r->diag.msg.len < sizeof(s->python_allocator) - 1
				   ? r->diag.msg.len
				   : sizeof(s->python_allocator) - 1;
		memcpy(s->python_allocator, r->diag.msg.p, n);
		s->python_allocator[n] = '\0';
		return 0;
	}
	if (s->n_diags == st->diags_cap) {
		size_t n = st->diags_cap ? st->diags_cap * 2 : 16;
		struct mt_diag *nv = realloc(s->diags, n * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		s->diags = nv;
		st->diags_cap = n;
	}
	char *m = copy_str(&r->diag.msg);
	if (!m)
		return -ENOMEM;
	s->diags[s->n_diags++] = (struct mt_diag){ r->diag.code, m };
	return 0;
}

static int on_trailer(void *ctx, const struct mt_record *r)
{
	struct mt_snapshot *s = ctx;

	s->have_trailer = 1;
	s->end_time_us = r->trailer.time_us;
	s->trailer_events = r->trailer.n_events;
	s->n_dropped = r->trailer.n_dropped;
	return 0;
}

/* ------------------------------------------------------------------------
 * Build and release
 * ---------------------------------------------------------------------- */
static void usage_add(struct mt_usage *u, const struct mt__snapshot_state *st, const struct acc *a)
{
	u->peak_bytes += acc_peak_bytes(st, a);
	u->peak_count += acc_peak_count(st, a);
	u->leak_bytes += a->cur_bytes;
	u->leak_count += a->cur_count;
	u->alloc_bytes += a->alloc_bytes;
	u->alloc_count += a->alloc_count;
	u->temp_bytes += a->tmp_bytes;
	u->temp_count += a->tmp_count;
}

/* Per-stack, per-thread and per-site figures from the site counters. */
static int finish(struct mt_snapshot *s)
{
	struct mt__snapshot_state *st = s->st;
	struct mt_usage *tu;

	st->stack_usage = calloc((size_t)st->max_stack + 1, sizeof(*st->stack_usage));
	if (st->stack_usage)
		mt_grow_huge(st->stack_usage, ((size_t)st->max_stack + 1) * sizeof(*st->stack_usage));
	st->site_out = calloc(st->n_sites ? st->n_sites : 1, sizeof(*st->site_out));
	tu = calloc(st->max_thread ? st->max_thread : 1, sizeof(*tu));
	s->threads = calloc(st->max_thread ? st->max_thread : 1, sizeof(*s->threads));
	if (!st->stack_usage || !st->site_out || !tu || !s->threads) {
		free(tu);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < st->n_sites; i++) {
		const struct site_key *k = &st->site_keys[i];
		struct mt_site *o = &st->site_out[i];
		o->stack = k->stack;
		o->thread = k->thread_kind >> 4;
		o->allocator = k->thread_kind & 15;
		o->first_addr = st->site_first[i];
		usage_add(&o->usage, st, &st->sites[i]);
		usage_add(&st->stack_usage[o->stack], st, &st->sites[i]);
		usage_add(&tu[o->thread], st, &st->sites[i]);
		s->temp_bytes += st->sites[i].tmp_bytes;
		s->temp_count += st->sites[i].tmp_count;
	}
	for (uint32_t i = 0; i < st->max_thread; i++) {
		if (!tu[i].alloc_count && !st->thr_name[i] && !(i == 0 && s->n_events))
			continue;
		struct mt_thread_info *t = &s->threads[s->n_threads++];
		t->index = i;
		t->tid = st->thr_tid[i];
		t->name = st->thr_name[i];
		st->thr_name[i] = NULL;
		t->usage = tu[i];
		if (!t->name && !(t->name = calloc(1, 1))) {
			free(tu);
			return -ENOMEM;
		}
	}
	free(tu);
	return 0;
}

int mt_snapshot_build(struct mt_snapshot *s, struct mt_capture *cap)
{
	struct mt_snapshot_opts o = { .temp_threshold = 1 };
	return mt_snapshot_build_opts(s, cap, &o);
}

int mt_snapshot_build_opts(struct mt_snapshot *s, struct mt_capture *cap,
			   const struct mt_snapshot_opts *o)
{
	struct mt_record_ops ops = {
		.alloc = on_alloc,
		.free = on_free,
		.thread = on_thread,
		.code = on_code,
		.stack = on_stack,
		.sample = on_sample,
		.diag = on_diag,
		.trailer = on_trailer,
		.native = on_native,
		.hybrid = on_hybrid,
		.module = on_module,
		.site = mt__snap_on_site,
		.totals = mt__snap_on_totals,
		.name = on_name,
	};
	const struct mt_header *h = mt_capture_header(cap);
	struct mt__snapshot_state *st;
	int err;

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
	st->temp_threshold = o->temp_threshold;
	s->temp_threshold = st->temp_threshold;
	st->page_mask = h->page_size && !(h->page_size & (h->page_size - 1)) ? h->page_size - 1 : 0;
	if (mt_livemap_reserve(&st->live) < 0 || stack_room(st, 0) < 0 || thread_room(st, 0) < 0 ||
	    site_slots_grow(st) < 0) {
		mt_snapshot_release(s);
		return -ENOMEM;
	}
	if (o->growth && !(st->growth = calloc(1, sizeof(*st->growth)))) {
		mt_snapshot_release(s);
		return -ENOMEM;
	}
	err = mt_capture_read(cap, &ops, s);
	if (err < 0 || st->oom) {
		mt_snapshot_release(s);
		return err < 0 ? err : -ENOMEM;
	}
	if (st->growth)
		mt_growth_finish(st->growth, s->end_time_us);
	s->status = *mt_capture_status(cap);
	s->heap_end = st->heap;
	s->peak_event = st->peak_event;
	if (st->nat.n_hyb) {
		/* hybrid stacks become frames of the trie, with new ids */
		err = mt_native_resolve(&st->nat, &st->stk, o->python_only);
		if (err < 0 || (st->stk.next_free > st->max_stack + 1 &&
				stack_room(st, st->stk.next_free - 1) < 0)) {
			mt_snapshot_release(s);
			return -ENOMEM;
		}
	}

	if ((st->root_depth && mt_stacks_cut(&st->stk, st->root_depth, st->root_hash) < 0) ||
	    finish(s) < 0) {
		mt_snapshot_release(s);
		return -ENOMEM;
	}
	return 0;
}

int mt_snapshot_small_hidden(const struct mt_snapshot *s)
{
	return !(s->header.flags & MT_HDR_PYALLOC) &&
	       (strncmp(s->python_allocator, "pymalloc", 8) == 0 ||
		strncmp(s->python_allocator, "mimalloc", 8) == 0);
}

void mt_snapshot_release(struct mt_snapshot *s)
{
	struct mt__snapshot_state *st = s->st;

	free((void *)s->header.cmdline.p);
	free(s->samples);
	for (size_t i = 0; i < s->n_diags; i++)
		free(s->diags[i].msg);
	free(s->diags);
	for (size_t i = 0; i < s->n_threads; i++)
		free(s->threads[i].name);
	free(s->threads);
	if (st) {
		mt_livemap_release(&st->live);
		mt_mappings_release(&st->mm);
		free(st->sites);
		free(st->site_keys);
		free(st->site_first);
		free(st->site_slots);
		free(st->stack_site);
		free(st->stack_usage);
		free(st->site_out);
		free(st->thr_seq);
		free(st->thr_tid);
		for (uint32_t i = 0; i < st->thr_cap && st->thr_name; i++)
			free(st->thr_name[i]);
		free(st->thr_name);
		mt_tnames_release(&st->names);
		mt_stacks_release(&st->stk);
		mt_native_release(&st->nat);
		if (st->growth)
			mt_growth_release(st->growth);
		mt_stackkeys_release(&st->gkeys);
		free(st->growth);
		free(st);
	}
	memset(s, 0, sizeof(*s));
}
