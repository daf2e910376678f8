/* SPDX-License-Identifier: MIT */
/*
 * The snapshot's queries (snapshot.h), once it is built.
 */
#include "reader/snapshot-state.h"

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
