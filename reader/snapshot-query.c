/* SPDX-License-Identifier: MIT */
/*
 * The snapshot's views (the figures made from its counters at each view),
 * the end of its pass, and its queries (snapshot.h), once it is built.
 */
#include "reader/snapshot-state.h"
#include "util/grow.h"

#include <errno.h>  /* ENOMEM */
#include <stdlib.h> /* calloc */
#include <string.h> /* memset, strncmp */

/* ------------------------------------------------------------------------
 * Views
 * ---------------------------------------------------------------------- */
static void usage_add(struct mt_usage *u, const struct mt__snapshot_state *st, const struct acc *a,
		      const struct acc_tmp *t)
{
	u->peak_bytes += acc_peak_bytes(st, a);
	u->peak_count += acc_peak_count(st, a);
	u->leak_bytes += a->cur_bytes;
	u->leak_count += a->cur_count;
	u->alloc_bytes += a->alloc_bytes;
	u->alloc_count += a->alloc_count;
	u->temp_bytes += t->bytes;
	u->temp_count += t->count;
}

/* Per-thread and per-site figures from the site counters, made again at
 * every view: O(sites + threads), whatever was read. A stack's are its
 * sites' (mt_snapshot_stack_usage()): an array by stack id would be as
 * big as the trie of hybrid stacks, most of it never used. */
int mt__snap_finish(struct mt_snapshot *s)
{
	static char no_name[1];
	struct mt__snapshot_state *st = s->st;

	free(s->threads);
	s->threads = NULL;
	s->n_threads = 0;
	s->temp_bytes = s->temp_count = 0;
	if (st->n_sites > st->site_out_cap) {
		struct mt_site *v = realloc(st->site_out, (size_t)st->n_sites * sizeof(*v));
		if (!v)
			return -ENOMEM;
		st->site_out = v;
		st->site_out_cap = st->n_sites;
	}
	/* by thread index first, then the threads seen moved to the front:
	 * no second array of a million threads' sums */
	s->threads = calloc(st->max_thread ? st->max_thread : 1, sizeof(*s->threads));
	if (!s->threads)
		return -ENOMEM;
	for (uint32_t i = 0; i < st->n_sites; i++)
		memset(&st->site_out[i], 0, sizeof(st->site_out[i]));
	for (uint32_t i = 0; i < st->n_sites; i++) {
		const struct site_key *k = &st->sites[i].key;
		const struct acc_tmp *t = &st->site_tmp[i];
		struct mt_site *o = &st->site_out[i];
		o->stack = k->stack;
		o->thread = k->thread_kind >> SITE_KIND_BITS;
		o->allocator = k->thread_kind & SITE_KIND_MASK;
		o->first_addr = st->site_first[i];
		usage_add(&o->usage, st, &st->sites[i], t);
		usage_add(&s->threads[o->thread].usage, st, &st->sites[i], t);
		s->temp_bytes += t->bytes;
		s->temp_count += t->count;
	}
	for (uint32_t i = 0; i < st->max_thread; i++) {
		struct mt_usage u = s->threads[i].usage;
		if (!u.alloc_count && !st->thr_name[i] && !(i == 0 && s->n_events))
			continue;
		/* the state ending threads share (tid 0), when it holds only
		 * frees: no thread of the program */
		if (!u.alloc_count && st->thr_name[i] && !st->thr_tid[i])
			continue;
		/* n_threads <= i: the slots after i are still to be read */
		struct mt_thread_info *t = &s->threads[s->n_threads++];
		t->index = i;
		t->tid = st->thr_tid[i];
		t->name = st->thr_name[i] ? st->thr_name[i] : no_name; /* borrowed */
		t->usage = u;
	}
	return 0;
}


/* ------------------------------------------------------------------------
 * Queries
 * ---------------------------------------------------------------------- */
struct mt_usage mt_snapshot_stack_usage(const struct mt_snapshot *s, uint32_t id)
{
	struct mt_usage u = { 0 };
	const struct mt_site *sites;
	size_t n = mt_snapshot_sites(s, &sites);

	for (size_t i = 0; i < n; i++) {
		const struct mt_usage *o = &sites[i].usage;
		if (sites[i].stack != id)
			continue;
		u.peak_bytes += o->peak_bytes, u.peak_count += o->peak_count;
		u.leak_bytes += o->leak_bytes, u.leak_count += o->leak_count;
		u.alloc_bytes += o->alloc_bytes, u.alloc_count += o->alloc_count;
		u.temp_bytes += o->temp_bytes, u.temp_count += o->temp_count;
	}
	return u;
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
	/* those of the last view: a site fed since has no figures yet */
	*out = s->st->site_out;
	return s->st->n_sites < s->st->site_out_cap ? s->st->n_sites : s->st->site_out_cap;
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

size_t mt_snapshot_merged_stack(const struct mt_snapshot *s, uint32_t id, struct mt_frame *out,
				size_t max)
{
	return mt_native_merged(&s->st->nat, &s->st->stk, id, out, max);
}

const struct mt_growth *mt_snapshot_growth(const struct mt_snapshot *s)
{
	const struct mt_growth *g = s->st->growth;
	return g && g->finished ? g : NULL;
}

const struct mt_growth *mt_snapshot_growth_sofar(const struct mt_snapshot *s)
{
	return s->st->growth;
}

const struct mt_temporal *mt_snapshot_temporal(const struct mt_snapshot *s)
{
	return s->st->temporal;
}

const struct mt_hwmtime *mt_snapshot_hwmtime(const struct mt_snapshot *s)
{
	const struct mt_hwmtime *h = s->st->hwm;
	return h && h->finished ? h : NULL;
}

const struct mt_sizes *mt_snapshot_sizes(const struct mt_snapshot *s)
{
	return s->st->sizes;
}

uint32_t mt_snapshot_stack_key(const struct mt_snapshot *s, struct mt_stackkeys *sk, uint32_t id,
			       int *oom)
{
	return mt_stackkeys_get(sk, &s->st->stk, id, oom);
}

int mt_snapshot_hybrid_parts(const struct mt_snapshot *s, uint32_t id, uint32_t *python,
			     uint32_t *leaf)
{
	return mt_native_hybrid_parts(&s->st->nat, id, python, leaf);
}

/* ------------------------------------------------------------------------
 * A view of what was read, and the end of the pass
 * ---------------------------------------------------------------------- */
int mt_snapshot_closed(const struct mt_snapshot *s)
{
	return s->st->closed;
}

int mt_snapshot_view(struct mt_snapshot *s)
{
	struct mt__snapshot_state *st = s->st;

	if (st->nat.n_hyb && !st->resolved) {
		/* hybrid stacks become frames of the trie, with new ids above
		 * those of the capture, until the next feed */
		st->resolved = 1;
		st->nat.tracker = (s->header.flags & MT_HDR_TRACKER) != 0;
		if (mt_native_resolve(&st->nat, &st->stk, st->python_only) < 0 ||
		    (st->stk.next_free > st->max_stack + 1 &&
		     mt__snap_stack_room(st, st->stk.next_free - 1) < 0))
			return -ENOMEM;
	}
	if (st->root_depth && mt_stacks_cut(&st->stk, st->root_depth, st->root_hash) < 0)
		return -ENOMEM;
	return mt__snap_finish(s);
}

int mt_snapshot_end(struct mt_snapshot *s)
{
	struct mt__snapshot_state *st = s->st;

	st->closed = 1;
	mt_livemap_ahead_free(st->live_tables); /* its spare tables go */
	st->live_tables = NULL;
	int open = st->peak_open || s->peak_until_us < s->peak_time_us;
	if (s->header.flags & MT_HDR_AGGREGATED)
		open = !(s->peak_until_us = mt__snap_agg_peak_until(s));
	/* no sample after the peak: it was before the end */
	if (open)
		s->peak_until_us = s->end_time_us > s->peak_time_us ? s->end_time_us
								     : s->peak_time_us;
	if (st->hwm && !st->hwm->finished) {
		mt_hwmtime_finish(st->hwm);
		if (st->hwm->oom)
			return -ENOMEM;
	}
	if (st->growth && !st->growth->finished)
		mt_growth_finish(st->growth, s->end_time_us);
	return mt_snapshot_view(s);
}

int mt_snapshot_small_hidden(const struct mt_snapshot *s)
{
	return !(s->header.flags & MT_HDR_PYALLOC) &&
	       (strncmp(s->python_allocator, "pymalloc", 8) == 0 ||
		strncmp(s->python_allocator, "mimalloc", 8) == 0);
}
