/* SPDX-License-Identifier: MIT */
#ifndef MT_READER_HWMTIME_H
#define MT_READER_HWMTIME_H
/*
 * Each site's share of the high-water mark of every stretch between two
 * memory snapshots, for FileReader.get_temporal_high_water_mark_
 * allocation_records() as memray defines it.
 *
 * Stretch k holds the events after snapshot k - 1 and up to snapshot k
 * (stretch 0 starts with the capture; stretch K, after the last of K
 * snapshots, ends with it). Its high-water mark is the highest tracked
 * heap in it, its start included, the latest moment of that height if
 * there are several. A site's share is its live bytes and blocks at that
 * moment. Shares are kept as runs: a site's share changes at stretch k
 * when it differs from stretch k - 1's (0 before the first), and one more
 * entry at stretch K + 1 holds what the site still has at the end.
 *
 * Like the snapshot's peak, a share is taken lazily: a site remembers its
 * value at the running high-water mark of the current stretch when it
 * first changes after it, and settles the stretches it did not change in
 * at its next change (or at the end), so that the cost per event is O(1).
 * The snapshot feeds it every change of a site and every snapshot
 * (mt_snapshot_opts.hwm_stride: one memory sample in every stride is a
 * snapshot, as FileReader's max_memory_records keeps them). Nothing here
 * prints.
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint64_t */

struct mt_hwm_run {
	uint64_t as_of;          /* the stretch from which ... */
	uint64_t bytes, count;   /* ... the site had this share */
};

struct mt_hwm_site; /* private */

struct mt_hwmtime {
	struct mt_hwm_site *v;   /* by site */
	uint32_t cap;
	uint64_t k;              /* snapshots so far: the current stretch */
	uint64_t t;              /* events so far */
	uint64_t heap;           /* tracked heap now */
	uint64_t pk_heap, pk_t;  /* the current stretch's high-water mark so far, and when */
	uint64_t *final_t;       /* by stretch: when its high-water mark was */
	uint64_t *final_heap;    /* ... and its height */
	size_t final_cap;
	int finished, oom;
};

/* mt_hwmtime_change() - site @site's live bytes and blocks change by
 * @dbytes and @dcount (the tracked heap is the sum of the sites'). */
void mt_hwmtime_change(struct mt_hwmtime *h, uint32_t site, int64_t dbytes, int64_t dcount);
/* mt_hwmtime_snapshot() - a snapshot is taken now: the current stretch ends. */
void mt_hwmtime_snapshot(struct mt_hwmtime *h);
/* mt_hwmtime_finish() - the end of the capture: every run settled. */
void mt_hwmtime_finish(struct mt_hwmtime *h);

/* mt_hwmtime_runs() - after mt_hwmtime_finish(), the runs of site @site,
 * borrowed; *@n is their count. */
const struct mt_hwm_run *mt_hwmtime_runs(const struct mt_hwmtime *h, uint32_t site, size_t *n);

/* The stretches, K + 1 after K snapshots: mt_hwmtime.final_heap[0..k]. */

void mt_hwmtime_release(struct mt_hwmtime *h);

#endif /* MT_READER_HWMTIME_H */
