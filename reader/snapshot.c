/* SPDX-License-Identifier: MIT */
/*
 * Snapshot: one pass over the records that tracks live memory and
 * accumulates per-stack and per-thread usage at the heap peak, at the end
 * and in total. The alloc/free callbacks are the hot path of every
 * report: no allocation there except amortised table growth.
 */
#include "reader/snapshot.h"
#include "format/error.h"
#include "util/livemap.h"
#include "util/mappings.h"
#include "reader/native.h"
#include "reader/stacks.h"
#include "reader/threadnames.h"
#include "util/grow.h"
#include "util/slots.h"

#include <errno.h>  /* ENOMEM */
#include <stdio.h>  /* sscanf */
#include <stdlib.h> /* malloc */
#include <string.h> /* memcpy */

/* Ids above these are taken as corrupt and folded into stack 0 (or
 * ignored, for definitions) instead of growing tables without bound. */
#define MAX_STACK_ID (1u << 24)
#define MAX_CODE_ID (1u << 24)
#define MAX_THREAD (1u << 20)
/* The writer numbers stacks, code objects and threads densely from the
 * start (1, 2, 3, ...), and each number comes with a record that defines
 * it: so an id far above the ids defined so far is corruption too. Without
 * this bound one record of a few bytes, a STACK or CODE id near MAX_*_ID
 * or a thread index near MAX_THREAD, made the dense per-id tables take
 * gigabytes and every report walk them. Ids are never reused, and those
 * whose records were lost (a writer that could not keep up) leave gaps:
 * an id is believed below ID_SLACK + 2 x the ids of its kind defined. */
#define ID_SLACK (1u << 16)   /* ids whose records may still be in other threads' buffers */

/* A usage counter with lazy peak capture: pk_* is the value at the peak
 * whenever last > peak_event; otherwise cur_* still is. */
struct acc {
	uint64_t cur_bytes, cur_count;
	uint64_t pk_bytes, pk_count;
	uint64_t last;
	uint64_t alloc_bytes, alloc_count;
	uint64_t tmp_bytes, tmp_count;
};

/* Memory is counted per site, a (stack, thread, allocator) triple; the
 * per-stack and per-thread figures are sums over sites, made once at the
 * end (every view is a sum at one moment, so sums of lazily captured
 * peaks are the peak of the sum). */
struct site_key {
	uint32_t stack;
	uint32_t thread_kind; /* thread << 4 | allocator */
};

struct mt__snapshot_state {
	struct mt_livemap live; /* malloc family */

	struct mt_mappings mm; /* mmap family */

	struct acc *sites;
	struct site_key *site_keys;
	uint64_t *site_first; /* address of each site's first allocation */
	uint32_t sites_cap, n_sites;
	uint32_t *site_slots; /* hash of site keys: util/slots.h */
	size_t site_nslots;
	uint32_t site_slots_mask; /* site_nslots - 1 */
	uint32_t *stack_site; /* stack id -> its latest site + 1: a cache */
	uint32_t stacks_cap, max_stack;
	uint32_t thr_cap, max_thread;
	uint32_t *thr_seq;    /* allocations made by each thread so far */
	uint64_t *thr_tid;
	char **thr_name;
	struct mt_tnames names; /* the program's, by tid (NAME records) */
	struct mt_usage *stack_usage; /* by stack id, made at the end */
	struct mt_site *site_out;     /* made at the end */
	uint64_t temp_threshold;

	struct mt_stacks stk; /* stack trie and code objects */
	struct mt_native nat; /* native and hybrid stacks, their frames */

	uint64_t t, peak_event, heap;
	uint32_t root_depth; /* a Tracker's: its stacks start below this depth */
	uint64_t root_hash;
	/* stack ids, code ids and thread indexes defined by their records */
	uint32_t n_def[3];
	uint64_t last_sample_us;
	uint64_t page_mask;
	size_t samples_cap, diags_cap;
	int oom;
};

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
}

enum { DEF_STACK, DEF_CODE, DEF_THREAD };
static const uint32_t id_max[3] = { MAX_STACK_ID, MAX_CODE_ID, MAX_THREAD };

/* Whether @id of kind @kind (a stack id, a code id, a thread index) is
 * below its kind's maximum and within ID_SLACK + 2 x the ids of that kind
 * defined so far. */
static inline int believed(const struct mt__snapshot_state *st, uint32_t id, int kind)
{
	return id < id_max[kind] && (uint64_t)id < ID_SLACK + 2 * (uint64_t)st->n_def[kind];
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

/* The site of (@stack, @thread, @kind), made with room for its stack and
 * thread in the per-id arrays. Its index, or -1 without memory. */
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

/* ------------------------------------------------------------------------
 * Record callbacks
 * ---------------------------------------------------------------------- */
static inline unsigned size_bucket(uint64_t size)
{
	return size ? 64 - (unsigned)__builtin_clzll(size) : 0;
}

static int on_alloc(void *ctx, const struct mt_record *r)
{
	struct mt_snapshot *s = ctx;
	struct mt__snapshot_state *st = s->st;
	uint64_t size = r->alloc.size, addr = r->alloc.addr;
	unsigned kind = r->alloc.kind;
	uint32_t stack = believed(st, r->alloc.stack, DEF_STACK) ? r->alloc.stack : 0;
	uint32_t thread = believed(st, r->tidx, DEF_THREAD) ? r->tidx : 0;

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
			s->leak_count--;
		} else {
			st->live.n++;
		}
		e->addr = addr;
		e->size = size;
		e->site = (uint32_t)si;
		e->seq = seq;
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
	uint32_t thread = believed(st, r->tidx, DEF_THREAD) ? r->tidx : 0;
	if (st->site_keys[e->site].thread_kind >> 4 == thread &&
	    (uint32_t)(st->thr_seq[thread] - e->seq) <= st->temp_threshold) {
		a->tmp_bytes += e->size;
		a->tmp_count++;
	}
	st->heap -= e->size;
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

	uint32_t i = believed(st, r->tidx, DEF_THREAD) ? r->tidx : 0;
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

	if (!believed(st, r->code.id, DEF_CODE))
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

	if (!believed(st, k->id, DEF_STACK))
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

	if (!believed(st, r->native.id, DEF_STACK))
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

	if (!believed(st, r->hybrid.id, DEF_STACK))
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
	s->samples[s->n_samples++] = (struct mt_sample){ r->sample.time_us, r->sample.rss, heap };
	if (r->sample.rss > s->peak_rss) {
		s->peak_rss = r->sample.rss;
		s->peak_rss_time_us = r->sample.time_us;
	}
	st->last_sample_us = r->sample.time_us;
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

/* An aggregated capture's figures of a site so far: they replace any
 * earlier ones. Its peak figures are kept as the values at the peak
 * (last = 1 > peak_event = 0). */
static int on_site(void *ctx, const struct mt_record *r)
{
	struct mt_snapshot *s = ctx;
	struct mt__snapshot_state *st = s->st;
	const struct mt_rec_site *x = &r->site;
	uint32_t stack = believed(st, x->stack, DEF_STACK) ? x->stack : 0;
	uint32_t thread = believed(st, x->thread, DEF_THREAD) ? x->thread : 0;

	int64_t si = site_for(st, stack, thread, x->allocator, x->first_addr);
	if (si < 0)
		return -ENOMEM;
	st->sites[si] = (struct acc){ .cur_bytes = x->leak_bytes, .cur_count = x->leak_count,
				      .pk_bytes = x->peak_bytes, .pk_count = x->peak_count,
				      .last = 1, .alloc_bytes = x->alloc_bytes,
				      .alloc_count = x->alloc_count };
	return 0;
}

_Static_assert(MT_HIST_BUCKETS == MT_TOTALS_BUCKETS, "one size histogram");

/* An aggregated capture's totals so far: the latest wins. */
static int on_totals(void *ctx, const struct mt_record *r)
{
	struct mt_snapshot *s = ctx;
	const struct mt_rec_totals *t = &r->totals;

	s->n_allocs = t->n_allocs;
	s->n_frees = t->n_frees;
	s->n_events = t->n_allocs + t->n_frees;
	s->n_unmatched_frees = t->n_unmatched_frees;
	s->bytes_allocated = t->bytes_allocated;
	s->bytes_freed = t->bytes_freed;
	s->peak_heap = t->peak_heap;
	s->peak_time_us = t->peak_time_us;
	s->leak_count = t->live_count;
	s->st->heap = t->heap;
	for (unsigned k = 0; k < MT_ALLOC__COUNT && k < MT_TOTALS_KINDS; k++) {
		s->by_allocator_count[k] = t->kind_count[k];
		s->by_allocator_bytes[k] = t->kind_bytes[k];
	}
	memcpy(s->size_hist, t->size_hist, sizeof(s->size_hist));
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
		.site = on_site,
		.totals = on_totals,
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
	err = mt_capture_read(cap, &ops, s);
	if (err < 0) {
		mt_snapshot_release(s);
		return err;
	}
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
		free(st);
	}
	memset(s, 0, sizeof(*s));
}

/* ------------------------------------------------------------------------
 * Queries
 * ---------------------------------------------------------------------- */
struct mt_usage mt_snapshot_stack_usage(const struct mt_snapshot *s, uint32_t id)
{
	const struct mt__snapshot_state *st = s->st;
	struct mt_usage u = { 0 };

	if (id > st->max_stack || !st->stack_usage)
		return u;
	return st->stack_usage[id];
}

void mt_usage_view(const struct mt_usage *u, enum mt_view view, uint64_t *bytes, uint64_t *count)
{
	switch (view) {
	case MT_VIEW_PEAK:
		*bytes = u->peak_bytes, *count = u->peak_count;
		break;
	case MT_VIEW_LEAKS:
		*bytes = u->leak_bytes, *count = u->leak_count;
		break;
	case MT_VIEW_TEMPORARY:
		*bytes = u->temp_bytes, *count = u->temp_count;
		break;
	default:
		*bytes = u->alloc_bytes, *count = u->alloc_count;
		break;
	}
}

size_t mt_snapshot_sites(const struct mt_snapshot *s, const struct mt_site **out)
{
	*out = s->st->site_out;
	return s->st->n_sites;
}

uint32_t mt_snapshot_max_stack(const struct mt_snapshot *s)
{
	return s->st->max_stack;
}


uint32_t mt_snapshot_stack_parent(const struct mt_snapshot *s, uint32_t id)
{
	return mt_stacks_parent(&s->st->stk, id);
}

void mt_snapshot_stack_frame(const struct mt_snapshot *s, uint32_t id, struct mt_frame *f)
{
	mt_stacks_frame(&s->st->stk, id, f);
}

size_t mt_snapshot_stack(const struct mt_snapshot *s, uint32_t id, struct mt_frame *out, size_t max)
{
	return mt_stacks_walk(&s->st->stk, id, out, max);
}

void mt_snapshot_native(const struct mt_snapshot *s, struct mt_native_stats *st)
{
	mt_native_stats(&s->st->nat, st);
}

size_t mt_snapshot_native_stack(const struct mt_snapshot *s, uint32_t id, struct mt_frame *out,
				size_t max, uint32_t *leaf, uint32_t *gen)
{
	return mt_native_chain(&s->st->nat, id, out, max, leaf, gen);
}
