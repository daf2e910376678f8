/* SPDX-License-Identifier: MIT */
#ifndef MT_READER_SNAPSHOT_STATE_H
#define MT_READER_SNAPSHOT_STATE_H
/*
 * The snapshot's private state, shared by its files: snapshot.c (the
 * record pass, its start and release), snapshot-defs.c (its definition
 * records), snapshot-agg.c (an aggregated capture's figures) and
 * snapshot-query.c (the views, the pass's end and the queries). Nothing
 * outside reader/snapshot*.c includes it.
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint64_t */

#include "reader/growth.h"
#include "reader/hwmtime.h"
#include "reader/native.h"
#include "reader/records.h" /* MT_THREADS_MAX */
#include "reader/sizes.h"
#include "reader/snapshot.h"
#include "reader/stackkeys.h"
#include "reader/stacks.h"
#include "reader/temporal.h"
#include "reader/threadnames.h"
#include "util/livemap.h"
#include "util/livemap-ahead.h"
#include "util/mappings.h"

/* Ids above these are taken as corrupt and folded into stack 0 (or
 * ignored, for definitions) instead of growing tables without bound. */
#define MAX_STACK_ID (1u << 24)
#define MAX_CODE_ID (1u << 24)
#define MAX_THREAD MT_THREADS_MAX
/* The writer numbers stacks, code objects and threads densely from the
 * start (1, 2, 3, ...), and each number comes with a record that defines
 * it: so an id far above the ids defined so far is corruption too. Without
 * this bound one record of a few bytes, a STACK or CODE id near MAX_*_ID
 * or a thread index near MAX_THREAD, made the dense per-id tables take
 * gigabytes and every report walk them. Ids are never reused, and those
 * whose records were lost (a writer that could not keep up) leave gaps:
 * an id is believed below ID_SLACK + 2 x the ids of its kind defined. */
#define ID_SLACK (1u << 16)   /* ids whose records may still be in other threads' buffers */

/* The allocator's bits in a site key: its kinds are below 2^5. */
#define SITE_KIND_BITS 5
#define SITE_KIND_MASK ((1u << SITE_KIND_BITS) - 1)
_Static_assert(MT_ALLOC__COUNT <= 1u << SITE_KIND_BITS, "an allocator fits a site key");
_Static_assert((uint64_t)MAX_THREAD << SITE_KIND_BITS <= 1ull << 32, "a thread index fits a site key");

/* Memory is counted per site, a (stack, thread, allocator) triple; the
 * per-stack and per-thread figures are sums over sites, made once at the
 * end (every view is a sum at one moment, so sums of lazily captured
 * peaks are the peak of the sum). */
struct site_key {
	uint32_t stack;
	uint32_t thread_kind; /* thread << SITE_KIND_BITS | allocator */
};

/* A site's usage counters, with lazy peak capture: pk_* is the value at
 * the peak whenever last > peak_event; otherwise cur_* still is. With its
 * key, what every event of the site reads and writes, in 64 bytes: one
 * line of the cache where the array is aligned (its temporary figures,
 * rarely changed, are apart, in struct acc_tmp). */
struct acc {
	uint64_t cur_bytes, cur_count;
	uint64_t pk_bytes, pk_count;
	uint64_t last;
	uint64_t alloc_bytes, alloc_count;
	struct site_key key;
};
_Static_assert(sizeof(struct acc) == 64, "a site's counters fill a line");

struct acc_tmp {
	uint64_t bytes, count;
};

/* A live mapping, what the mappings' values (st->mm) index: its site,
 * the address and length its mmap gave, the thread's allocation count
 * after it (the temporary check) and, in temporal mode, the sample count
 * at its mmap. An index is used again once its mapping is gone. */
struct mt__map {
	uint64_t addr, size, a;
	uint32_t site, seq;
};

/* The munmap being applied, for mm_removed(): a mapping it takes whole
 * may be temporary. */
struct mt__unmap {
	uint64_t addr, size;
	uint32_t thread;
	int on;
};

/* ALLOC and FREE records wait here, a few at a time, while the cache
 * fetches their slots of the live map and, half way through, the
 * counters of the sites those name: with millions of blocks live, each
 * is a miss to memory, and the misses of the records in the queue
 * overlap instead of each stalling the pass. The records leave in their
 * order, and every other record, and each chunk's end, empties the
 * queue first, so the figures are those of one record at a time. */
#define MT__AHEAD 16
struct mt__event {
	uint64_t addr, size; /* size: a FREE's only for munmap */
	uint32_t stack, tidx;
	uint8_t free, kind;
};
struct mt__ahead {
	struct mt__event r[MT__AHEAD];
	unsigned head, n;
	int extras; /* the feed's records go through the extras' paths */
};

struct mt__snapshot_state {
	struct mt_livemap live; /* malloc family */
	struct mt_livemap_ahead *live_tables; /* its tables made ahead, during the pass */
	struct mt__ahead ahead;

	struct mt_mappings mm; /* mmap family */
	struct mt__map *maps;  /* ... its mappings, by value */
	uint32_t *maps_free;   /* ... indexes free in maps (room for maps_cap) */
	size_t n_maps, maps_cap, n_maps_free;
	struct mt__unmap unmap;

	struct acc *sites;    /* by site: its counters, a line of the cache each */
	struct acc_tmp *site_tmp; /* by site: its temporary allocations */
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
	struct mt_site *site_out;     /* made at each view */
	uint32_t site_out_cap;
	uint64_t temp_threshold;

	struct mt_stacks stk; /* stack trie and code objects */
	struct mt_native nat; /* native and hybrid stacks, their frames */

	uint64_t t, peak_event, heap;
	uint64_t malloc_bytes, malloc_chunks; /* now: struct mt_sample */
	uint32_t root_depth; /* a Tracker's: its stacks start below this depth */
	uint64_t root_hash;
	/* stack ids, code ids and thread indexes defined by their records */
	uint32_t n_def[3];
	uint64_t last_sample_us;
	int peak_open;       /* no sample since the peak yet */
	uint64_t page_mask;
	size_t samples_cap, diags_cap;
	struct mt_growth *growth; /* mt_snapshot_opts.growth: each stack's series */
	struct mt_stackkeys gkeys; /* ... kept per printed call path (and temporal's) */
	struct mt_temporal *temporal; /* mt_snapshot_opts.temporal: when blocks were live */
	int temporal_by_site;         /* ... keyed by site, not by call path */
	struct mt_livemap tlive;      /* ... the malloc family's: size holds the sample count */
	struct mt_hwmtime *hwm;      /* mt_snapshot_opts.hwm_stride: shares of each stretch's mark */
	struct mt_sizes *sizes;      /* mt_snapshot_opts.exact_sizes: allocations by size */
	uint64_t hwm_stride, hwm_samples;
	int oom;                  /* a feed that cannot return an error ran out of memory */
	int mimalloc;             /* the capture says Python's allocator is mimalloc (its
				   * big blocks are not glibc's malloc's) */
	int python_only;          /* mt_snapshot_opts.python_only */
	int closed;               /* no more feeds: ended */
	int resolved;             /* hybrid stacks resolved in stk, until the next feed */
	char why[96];             /* why a record made the feed -MT_ECORRUPT */
};

/* A counter's value at the peak */
static inline uint64_t acc_peak_bytes(const struct mt__snapshot_state *st, const struct acc *a)
{
	return a->last <= st->peak_event ? a->cur_bytes : a->pk_bytes;
}

static inline uint64_t acc_peak_count(const struct mt__snapshot_state *st, const struct acc *a)
{
	return a->last <= st->peak_event ? a->cur_count : a->pk_count;
}

enum { DEF_STACK, DEF_CODE, DEF_THREAD };

/* believed() - whether @id of kind @kind (DEF_*) is below its kind's
 * maximum and within ID_SLACK + 2 x the ids of that kind defined so far. */
static inline int mt__snap_believed(const struct mt__snapshot_state *st, uint32_t id, int kind)
{
	static const uint32_t id_max[3] = { MAX_STACK_ID, MAX_CODE_ID, MAX_THREAD };
	return id < id_max[kind] && (uint64_t)id < ID_SLACK + 2 * (uint64_t)st->n_def[kind];
}

/* mt__snap_site() - the site of (@stack, @thread, @kind), made with room
 * for its stack and thread in the per-id arrays (snapshot.c). Its index,
 * or -1 without memory. */
int64_t mt__snap_site(struct mt__snapshot_state *st, uint32_t stack, uint32_t thread,
		      unsigned kind, uint64_t addr);

/* mt__snap_stack_room() / mt__snap_thread_room() - room for stack id @id
 * (thread index @idx) in the per-id arrays: 0 or -ENOMEM (snapshot.c). */
int mt__snap_stack_room(struct mt__snapshot_state *st, uint32_t id);
int mt__snap_thread_room(struct mt__snapshot_state *st, uint32_t idx);

/* mt__snap_finish() - the per-stack, per-thread and per-site figures of
 * a view, from the site counters: 0 or -ENOMEM (snapshot-query.c). */
int mt__snap_finish(struct mt_snapshot *s);

/* snapshot-defs.c: the definition records (@ctx is the struct mt_snapshot) */
int mt__snap_on_thread(void *ctx, const struct mt_record *r);
int mt__snap_on_name(void *ctx, const struct mt_record *r);
int mt__snap_on_code(void *ctx, const struct mt_record *r);
int mt__snap_on_stack(void *ctx, const struct mt_record *r);
int mt__snap_on_native(void *ctx, const struct mt_record *r);
int mt__snap_on_hybrid(void *ctx, const struct mt_record *r);
int mt__snap_on_module(void *ctx, const struct mt_record *r);
int mt__snap_on_diag(void *ctx, const struct mt_record *r);
int mt__snap_on_trailer(void *ctx, const struct mt_record *r);

/* snapshot-agg.c: an aggregated capture's SITE and TOTALS records */
int mt__snap_on_site(void *ctx, const struct mt_record *r);
int mt__snap_on_totals(void *ctx, const struct mt_record *r);
/* mt__snap_agg_peak_until() - an aggregated capture's peak_until_us: the
 * first sample after its peak_time_us, or 0 if none came */
uint64_t mt__snap_agg_peak_until(const struct mt_snapshot *s);

#endif /* MT_READER_SNAPSHOT_STATE_H */
