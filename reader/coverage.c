/* SPDX-License-Identifier: MIT */
/*
 * A capture's coverage of the C allocator (coverage.h).
 */
#include "reader/coverage.h"
#include "reader/snapshot.h"

#include <string.h> /* memset */

/* An aggregated capture's live blocks of the malloc family at the end.
 * Python's object allocator (pymalloc) takes blocks over 512 bytes from
 * malloc: a site of its kinds counts when its blocks are that big on
 * average (a site has no sizes of its own, only its totals; a site is one
 * line, whose blocks are mostly alike), unless the allocator is mimalloc,
 * which has arenas for every size. */
static void agg_end(const struct mt_snapshot *s, uint64_t *bytes, uint64_t *chunks)
{
	const struct mt_site *v;
	size_t n = mt_snapshot_sites(s, &v);
	int mimalloc = strncmp(s->python_allocator, "mimalloc", 8) == 0;
	*bytes = *chunks = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned k = v[i].allocator;
		const struct mt_usage *u = &v[i].usage;
		if (k == MT_ALLOC_MMAP || !u->leak_count)
			continue;
		/* the raw kinds are malloc's blocks: counted */
		if (k >= MT_ALLOC_PYMALLOC_MALLOC && k <= MT_ALLOC_PYMALLOC_FREE &&
		    (mimalloc || u->leak_bytes <= 512 * u->leak_count))
			continue;
		*bytes += u->leak_bytes;
		*chunks += u->leak_bytes + 16 * u->leak_count;
	}
}

int mt_coverage(const struct mt_snapshot *s, enum mt_coverage_when when, struct mt_coverage *c)
{
	int agg = (s->header.flags & MT_HDR_AGGREGATED) != 0;
	const struct mt_sample *at = NULL;

	memset(c, 0, sizeof(*c));
	if (agg && when != MT_COVERAGE_END)
		return 0;
	for (size_t i = 0; i < s->n_samples; i++) {
		const struct mt_sample *p = &s->samples[i];
		if (p->in_use == MT_SAMPLE_UNKNOWN || (!agg && p->malloc_chunks == MT_SAMPLE_UNKNOWN))
			continue;
		if (when == MT_COVERAGE_END || !at || p->heap >= at->heap)
			at = p;
	}
	if (!at)
		return 0;
	c->time_us = at->time_us;
	c->in_use = at->in_use;
	if (agg) {
		agg_end(s, &c->bytes, &c->chunks);
	} else {
		c->bytes = at->malloc_bytes;
		c->chunks = at->malloc_chunks;
	}
	c->accounted = c->chunks < c->in_use ? c->chunks : c->in_use;
	c->unaccounted = c->in_use - c->accounted;
	c->share = c->in_use ? (double)c->accounted / (double)c->in_use : 1.0;
	c->start = s->in_use_start;
	if (c->start != MT_SAMPLE_UNKNOWN && !(s->header.flags & (MT_HDR_ATTACHED | MT_HDR_TRACKER)))
		c->excused = c->start < c->unaccounted ? c->start : c->unaccounted;
	uint64_t rest = c->unaccounted - c->excused;
	c->warn = rest > MT_COVERAGE_WARN_BYTES &&
		  (double)rest > MT_COVERAGE_WARN_SHARE * (double)c->in_use;
	return 1;
}
