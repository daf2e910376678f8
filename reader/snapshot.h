/* SPDX-License-Identifier: MIT */
#ifndef MT_READER_SNAPSHOT_H
#define MT_READER_SNAPSHOT_H
/*
 * One pass over a capture that keeps the live allocations (a hash map for
 * the malloc family, an interval list for mmap so that munmap may cover
 * part of a mapping or several) and accumulates, per site (a stack,
 * thread and allocator): what was live at the peak of the tracked heap,
 * what is still live at the end (leaks), what was allocated in total and
 * what was temporary (freed by the allocating thread within a threshold
 * of its allocations). The peak is found in the same pass without storing
 * events: every counter remembers its value at the latest peak lazily,
 * when it is next changed. Per-stack and per-thread figures are sums over
 * sites.
 *
 * Frees of pointers never seen are ignored (allocated before tracking
 * started). Stack and code definitions may come after their first use;
 * they are resolved only when a report asks.
 *
 * Ownership: everything a snapshot hands out is borrowed and valid until
 * mt_snapshot_release().
 */
#include <stddef.h>    /* size_t */
#include <stdint.h>    /* uint64_t */
#include <sys/types.h> /* ssize_t */

#include "format/record.h"
#include "reader/capture.h"
#include "reader/stacks.h" /* struct mt_frame */

/* What a counter holds for one stack (or thread). */
struct mt_usage {
	uint64_t peak_bytes, peak_count;   /* live at the heap peak */
	uint64_t leak_bytes, leak_count;   /* live at the end */
	uint64_t alloc_bytes, alloc_count; /* allocated over the whole capture */
	uint64_t temp_bytes, temp_count;   /* temporary allocations */
};

/* Memory of one (stack, thread, allocator) combination. */
struct mt_site {
	uint32_t stack;     /* STACK id, 0 = no Python frames */
	uint32_t thread;    /* thread index */
	uint32_t allocator; /* enum mt_allocator of the allocations */
	uint64_t first_addr; /* address of its first allocation */
	struct mt_usage usage;
};

/* A memory sample. The C allocator's own count and the tracked blocks it
 * is compared with (reader/coverage.h) may be unknown: MT_SAMPLE_UNKNOWN. */
#define MT_SAMPLE_UNKNOWN UINT64_MAX
struct mt_sample {
	uint64_t time_us;
	uint64_t rss;  /* from the SAMPLE record */
	uint64_t heap; /* tracked heap when the sample was read */
	uint64_t in_use; /* the C allocator's count of bytes in use (SAMPLE in_use) */
	/* The tracked blocks that glibc's malloc holds (the malloc family,
	 * and pymalloc's blocks above 512 bytes, which it passes on to
	 * malloc): their bytes, and their sizes as glibc's chunks (header
	 * and rounding); unknown in an aggregated capture. */
	uint64_t malloc_bytes, malloc_chunks;
};

struct mt_diag {
	uint32_t code;
	char *msg;
};

struct mt_thread_info {
	uint32_t index;  /* thread index in the capture */
	uint64_t tid;    /* 0 if no THREAD record named it */
	char *name;      /* "" if unnamed */
	struct mt_usage usage;
};

#define MT_HIST_BUCKETS 65 /* [0] size 0, [k] 2^(k-1) <= size < 2^k */

struct mt_snapshot {
	struct mt_header header;  /* cmdline points into the snapshot */
	struct mt_capture_status status;

	uint64_t n_events;        /* ALLOC + FREE records */
	uint64_t n_allocs, n_frees, n_unmatched_frees;
	uint64_t bytes_allocated, bytes_freed;
	uint64_t by_allocator_count[MT_ALLOC__COUNT];
	uint64_t by_allocator_bytes[MT_ALLOC__COUNT];
	uint64_t size_hist[MT_HIST_BUCKETS];

	uint64_t heap_end;        /* tracked heap at the end */
	uint64_t peak_heap;       /* highest tracked heap */
	uint64_t peak_event;      /* its event number (1-based; 0 = empty) */
	uint64_t peak_time_us;    /* time of the last sample before the peak */
	uint64_t peak_until_us;   /* of the first after it (the end if none): events
				   * carry no time, so the peak was reached
				   * between the two */
	uint64_t leak_count;      /* allocations live at the end */
	uint64_t peak_rss, peak_rss_time_us;
	/* the C allocator's count at the last sample before the first event
	 * (what it held as tracking started), MT_SAMPLE_UNKNOWN if none or
	 * an aggregated capture */
	uint64_t in_use_start;

	struct mt_sample *samples;
	size_t n_samples;
	struct mt_diag *diags;
	size_t n_diags;
	struct mt_thread_info *threads; /* by index; only those seen */
	size_t n_threads;

	char python_allocator[24]; /* as memray names it; "" if the capture does not say */

	int have_trailer;
	uint64_t end_time_us;     /* trailer, else the last sample */
	uint64_t trailer_events, n_dropped;
	uint64_t temp_threshold;  /* what temp_* counts (see mt_snapshot_opts) */
	uint64_t temp_bytes, temp_count; /* temporary allocations in all */

	struct mt__snapshot_state *st; /* private */
};

/* mt_snapshot_build() - read all of @cap into @s (uninitialised).
 * Returns 0 or -ENOMEM; on error @s is released. Capture damage is not
 * an error: see s->status. */
int mt_snapshot_build(struct mt_snapshot *s, struct mt_capture *cap);

struct mt_snapshot_opts {
	/* An allocation is temporary when the thread that made it frees it
	 * with at most this many of its own allocations in between (memray's
	 * threshold; 0: nothing between); a mapping, when that thread's
	 * munmap of its address and length takes it. */
	uint64_t temp_threshold;
	/* With native stacks: show Python frames only (native.h). */
	int python_only;
	/* Follow each stack's live bytes across the samples (growth.h). */
	int growth;
	/* When each call path's blocks were live (temporal.h), with at most
	 * this many intervals (0: its default). */
	int temporal;
	size_t temporal_budget;
	/* ... keyed by site (struct mt_site's index) rather than by call path */
	int temporal_by_site;
	/* Each site's share of the high-water mark between two snapshots, one
	 * memory sample in this many a snapshot (hwmtime.h); 0: not kept. */
	uint64_t hwm_stride;
	/* Count the allocations of each exact size (sizes.h); an aggregated
	 * capture has none to count. */
	int exact_sizes;
};

/* mt_snapshot_build_opts() - mt_snapshot_build() with options:
 * mt_snapshot_begin(), mt_snapshot_feed() and mt_snapshot_end(). */
int mt_snapshot_build_opts(struct mt_snapshot *s, struct mt_capture *cap,
			   const struct mt_snapshot_opts *o);

/*
 * A capture read a part at a time, as it is written (mt_capture_follow()):
 * begin, then feed and view as often as wanted, then end. A feed reads
 * the chunks that @cap has gained since the last one, so that its cost is
 * that of the new events; a view makes the per-stack, per-thread and
 * per-site figures (and s->threads) of everything read so far, from the
 * site counters, at a cost that does not grow with the events read. The
 * figures of a snapshot fed in parts are those of one built at once from
 * the same bytes. What a view gave (sites, threads, stack usage) is valid
 * until the next feed or view. s->status is the capture's after the last
 * feed: truncated while the last chunk is not whole yet.
 *
 * A view of a capture with native stacks resolves its hybrid stacks
 * into frames of the trie, with ids above the capture's (native.h), and
 * the next feed takes them out again: the return addresses are
 * symbolized once, each view rebuilds the frame nodes of all the hybrid
 * stacks read (their cost, not the events'). The trie then holds the
 * nodes and ids of a snapshot built at once from the same bytes: a
 * hybrid stack keeps its id (the capture's) from view to view, the frame
 * nodes under it do not (an id met in an earlier view's walk may name
 * another node now: compare call paths by their frames). Growth
 * (mt_snapshot_growth()) and the high-water marks (mt_snapshot_hwmtime())
 * are there after mt_snapshot_end() only (growth so far after a view:
 * mt_snapshot_growth_sofar()); the temporal intervals
 * (mt_snapshot_temporal()) after every feed.
 */
/* mt_snapshot_begin() - @s (uninitialised) set up for @cap, whose pass
 * it rewinds. Returns 0 or -ENOMEM (@s released). */
int mt_snapshot_begin(struct mt_snapshot *s, struct mt_capture *cap,
		      const struct mt_snapshot_opts *o);
/* mt_snapshot_feed() - read the rest of @cap's pass. Returns 0, -ENOMEM,
 * the -errno of a failed read, or -EBUSY after the end; after an error
 * only mt_snapshot_release() is left. */
int mt_snapshot_feed(struct mt_snapshot *s, struct mt_capture *cap);
/* mt_snapshot_closed() - whether feeds are refused now (-EBUSY). */
int mt_snapshot_closed(const struct mt_snapshot *s);
/* mt_snapshot_view() - the figures of what has been fed. 0 or -ENOMEM. */
int mt_snapshot_view(struct mt_snapshot *s);
/* mt_snapshot_end() - the last view: no feed after it; growth finished. */
int mt_snapshot_end(struct mt_snapshot *s);
void mt_snapshot_release(struct mt_snapshot *s);

/* mt_snapshot_stack_usage() - counters of stack @id (0 = no Python
 * frames), the sum of its sites' (O(sites): a report of every stack sums
 * mt_snapshot_sites() once); all zero for an id never used. */
struct mt_usage mt_snapshot_stack_usage(const struct mt_snapshot *s, uint32_t id);
/* mt_snapshot_sites() - every site, in order of first use; *@out is
 * borrowed. Returns the number of sites. */
size_t mt_snapshot_sites(const struct mt_snapshot *s, const struct mt_site **out);

/* Highest stack id used or defined, for iterating: below 2^24 (a higher
 * id is taken for corruption, and counted as stack 0). */
uint32_t mt_snapshot_max_stack(const struct mt_snapshot *s);

/* struct mt_frame: reader/stacks.h */
/* mt_snapshot_stack_key() - mt_stackkeys_get() of the snapshot's stacks:
 * one key per call path as it prints, memoized in @sk. */
struct mt_stackkeys;
uint32_t mt_snapshot_stack_key(const struct mt_snapshot *s, struct mt_stackkeys *sk, uint32_t id,
			       int *oom);

/* mt_snapshot_hybrid_parts() - mt_native_hybrid_parts() of the snapshot. */
int mt_snapshot_hybrid_parts(const struct mt_snapshot *s, uint32_t id, uint32_t *python,
			     uint32_t *leaf);

/* mt_snapshot_stack() - frames of stack @id, innermost first, into
 * @out[0..max). Returns the full depth (0 for stack 0), which may be more
 * than @max. Undefined stacks or code give "<unknown>" frames. */
size_t mt_snapshot_stack(const struct mt_snapshot *s, uint32_t id, struct mt_frame *out, size_t max);

/* mt_snapshot_stack_frame() - the innermost frame of stack @id (> 0);
 * mt_snapshot_stack_parent() - the stack it was called from, 0 at the
 * outermost frame (or an undefined or corrupt node: a trie may loop, so
 * callers bound their walks by mt_snapshot_max_stack()). */
void mt_snapshot_stack_frame(const struct mt_snapshot *s, uint32_t id, struct mt_frame *f);
uint32_t mt_snapshot_stack_parent(const struct mt_snapshot *s, uint32_t id);

/* mt_snapshot_growth() - with mt_snapshot_opts.growth, each stack's
 * series across the capture (reader/growth.h), finished; NULL otherwise. */
struct mt_growth;
const struct mt_growth *mt_snapshot_growth(const struct mt_snapshot *s);
/* mt_snapshot_growth_sofar() - the same, as far as it has been fed: not
 * finished before mt_snapshot_end(); rank it with mt_growth_rank_at(g,
 * s->end_time_us). Its stack ids are valid after a view. */
const struct mt_growth *mt_snapshot_growth_sofar(const struct mt_snapshot *s);

/* mt_snapshot_temporal() - with mt_snapshot_opts.temporal, the intervals
 * of the capture (reader/temporal.h); NULL otherwise. Their keys are
 * stack ids of the snapshot, or site indexes (temporal_by_site). */
struct mt_temporal;
const struct mt_temporal *mt_snapshot_temporal(const struct mt_snapshot *s);

/* mt_snapshot_hwmtime() - with mt_snapshot_opts.hwm_stride, the sites'
 * shares of each stretch's high-water mark (reader/hwmtime.h), finished;
 * NULL otherwise. */
struct mt_hwmtime;
const struct mt_hwmtime *mt_snapshot_hwmtime(const struct mt_snapshot *s);

/* mt_snapshot_sizes() - with mt_snapshot_opts.exact_sizes, the
 * allocations by exact size (reader/sizes.h); NULL otherwise. */
struct mt_sizes;
const struct mt_sizes *mt_snapshot_sizes(const struct mt_snapshot *s);

/* mt_snapshot_small_hidden() - whether a report of live blocks (the leaks)
 * may miss small Python objects: the interpreter's allocator kept them in
 * arenas of its own (pymalloc, mimalloc) and its domains were not traced. */
int mt_snapshot_small_hidden(const struct mt_snapshot *s);

enum mt_view {
	MT_VIEW_PEAK,      /* live at the peak of the tracked heap */
	MT_VIEW_LEAKS,     /* live at the end */
	MT_VIEW_ALLOCATED, /* everything allocated */
	MT_VIEW_TEMPORARY, /* temporary allocations */
};

/* mt_usage_view() - the bytes and count of @u that @view shows. */
void mt_usage_view(const struct mt_usage *u, enum mt_view view, uint64_t *bytes, uint64_t *count);

/* mt_snapshot_native() - with native stacks, how symbolizing went:
 * distinct return addresses, those left as module+offset, and modules
 * whose file could not be found (reader/native.h). Zero otherwise. */
struct mt_native_stats;
void mt_snapshot_native(const struct mt_snapshot *s, struct mt_native_stats *st);

/* mt_snapshot_native_stack() - mt_native_chain() of the snapshot. */
size_t mt_snapshot_native_stack(const struct mt_snapshot *s, uint32_t id, struct mt_frame *out,
				size_t max, uint32_t *leaf, uint32_t *gen);

/* mt_snapshot_merged_stack() - mt_native_merged() of the snapshot. */
size_t mt_snapshot_merged_stack(const struct mt_snapshot *s, uint32_t id, struct mt_frame *out,
				size_t max);

#endif /* MT_READER_SNAPSHOT_H */
