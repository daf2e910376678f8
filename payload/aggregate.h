/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_AGGREGATE_H
#define MT_PAYLOAD_AGGREGATE_H
/*
 * Aggregated captures (MT_HDR_AGGREGATED): the writer thread, rather than
 * coding each event, counts it here, and writes the figures at every
 * flush. The counting is the reader's (reader/snapshot.c), so that a
 * report of an aggregated capture gives what the full capture's would:
 * per site, a (stack, thread, allocator) triple, the bytes and count live
 * at the peak of the tracked heap (captured lazily: a site remembers its
 * value at the latest peak when it next changes), live now, and allocated
 * so far; a live map of the malloc family by address (util/livemap.h),
 * and an interval list for the mmap family (util/mappings.h). Frees of blocks never seen
 * are counted, not applied.
 *
 * mt_agg_emit() writes a SITE record for every site whose figures
 * changed since its last one, then a TOTALS record: a reader takes the
 * last record of each site, so a capture cut short (a SIGKILL) reads as
 * of its last flush.
 *
 * One thread at a time (the writer's, or the one finishing the capture);
 * it allocates with malloc (memtrace's own threads are never recorded).
 * Out of memory, counting stops and mt_agg_failed() says so.
 */
#include <stdint.h> /* uint64_t */

struct mt_record;

/* mt_agg_begin() - a new capture: nothing counted, nothing written. */
void mt_agg_begin(void);

/* mt_agg_alloc() / mt_agg_free() - one event of thread index @thread:
 * @kind an enum mt_allocator (a free kind for mt_agg_free(); @size is the
 * length for MUNMAP, else 0). */
void mt_agg_alloc(uint32_t thread, unsigned kind, uint64_t addr, uint64_t size, uint32_t stack);
void mt_agg_free(uint32_t thread, unsigned kind, uint64_t addr, uint64_t size);

/* mt_agg_sampled() - the last memory sample was taken at @time_us (the
 * peak's time is that of the last sample before it). */
void mt_agg_sampled(uint64_t time_us);

/* mt_agg_heap() - the tracked heap now. */
uint64_t mt_agg_heap(void);

/* mt_agg_emit() - the records of what changed since the last call, through
 * @append (the writer's: merge.h). */
void mt_agg_emit(void (*append)(const struct mt_record *r));

/* mt_agg_failed() - nonzero once counting stopped for want of memory. */
int mt_agg_failed(void);

/* mt_agg_release() - free everything (a capture's end). */
void mt_agg_release(void);

#endif /* MT_PAYLOAD_AGGREGATE_H */
