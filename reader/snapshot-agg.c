/* SPDX-License-Identifier: MIT */
/*
 * The snapshot of an aggregated capture (MT_HDR_AGGREGATED): the payload
 * counted, and its SITE and TOTALS records are the figures, the latest
 * of each winning (docs/format.md section 4.1).
 */
#include "reader/snapshot-state.h"

#include <errno.h>  /* ENOMEM */
#include <string.h> /* memcpy */

/* An aggregated capture's figures of a site so far: they replace any
 * earlier ones. Its peak figures are kept as the values at the peak
 * (last = 1 > peak_event = 0). */
int mt__snap_on_site(void *ctx, const struct mt_record *r)
{
	struct mt_snapshot *s = ctx;
	struct mt__snapshot_state *st = s->st;
	const struct mt_rec_site *x = &r->site;
	uint32_t stack = mt__snap_believed(st, x->stack, DEF_STACK) ? x->stack : 0;
	uint32_t thread = mt__snap_believed(st, x->thread, DEF_THREAD) ? x->thread : 0;

	int64_t si = mt__snap_site(st, stack, thread, x->allocator, x->first_addr);
	if (si < 0)
		return -ENOMEM;
	st->sites[si] = (struct acc){ .cur_bytes = x->leak_bytes, .cur_count = x->leak_count,
				      .pk_bytes = x->peak_bytes, .pk_count = x->peak_count,
				      .last = 1, .alloc_bytes = x->alloc_bytes,
				      .alloc_count = x->alloc_count, .key = st->sites[si].key };
	return 0;
}

_Static_assert(MT_HIST_BUCKETS == MT_TOTALS_BUCKETS, "one size histogram");

/* An aggregated capture's totals so far: the latest wins. */
int mt__snap_on_totals(void *ctx, const struct mt_record *r)
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
	s->peak_time_us = s->peak_until_us = t->peak_time_us;
	s->leak_count = t->live_count;
	s->st->heap = t->heap;
	for (unsigned k = 0; k < MT_ALLOC__COUNT && k < MT_TOTALS_KINDS; k++) {
		s->by_allocator_count[k] = t->kind_count[k];
		s->by_allocator_bytes[k] = t->kind_bytes[k];
	}
	memcpy(s->size_hist, t->size_hist, sizeof(s->size_hist));
	return 0;
}

/* Its TOTALS give the last sample before the peak, which was reached
 * before the next sample, as a capture of events tells it. */
uint64_t mt__snap_agg_peak_until(const struct mt_snapshot *s)
{
	for (size_t i = 0; i < s->n_samples; i++)
		if (s->samples[i].time_us > s->peak_time_us)
			return s->samples[i].time_us;
	return 0;
}
