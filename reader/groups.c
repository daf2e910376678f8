/* SPDX-License-Identifier: MIT */
/*
 * Records as memray groups them (groups.h).
 */
#include "reader/groups.h"
#include "reader/stackkeys.h"

#include <errno.h>  /* ENOMEM */
#include <stdlib.h> /* calloc */

/* (path key, thread) -> group: open addressing, a power of two slots */
struct slot {
	uint64_t key;    /* mt_groups_path_key() */
	uint32_t thread;
	uint32_t group;  /* group + 1; 0: the slot is empty */
};

static uint64_t mix(uint64_t key, uint32_t thread)
{
	uint64_t k = key ^ (uint64_t)thread * 0x9E3779B97F4A7C15ull;
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	return k;
}

uint64_t mt_groups_path_key(const struct mt_snapshot *s, struct mt_stackkeys *sk, uint32_t id,
			    int *oom)
{
	/* a hybrid stack: its Python stack's path and its native chain */
	uint32_t python = id, leaf = 0;
	(void)mt_snapshot_hybrid_parts(s, id, &python, &leaf);
	return (uint64_t)mt_snapshot_stack_key(s, sk, python, oom) << 32 | leaf;
}

int mt_groups_build(struct mt_groups *g, const struct mt_snapshot *s, enum mt_view view,
		    int merge_threads)
{
	const struct mt_site *sites;
	size_t n_sites = mt_snapshot_sites(s, &sites), mask = 15;
	struct mt_stackkeys keys = { 0 };
	int oom = 0;

	g->n = 0;
	while (mask + 1 < n_sites * 2)
		mask = mask * 2 + 1;
	struct slot *slots = calloc(mask + 1, sizeof(*slots));
	g->v = malloc((n_sites ? n_sites : 1) * sizeof(*g->v));
	if (!slots || !g->v)
		goto fail;
	for (size_t i = 0; i < n_sites; i++) {
		uint64_t bytes, count;
		mt_usage_view(&sites[i].usage, view, &bytes, &count);
		if (!bytes && !count)
			continue;
		uint64_t key = mt_groups_path_key(s, &keys, sites[i].stack, &oom);
		uint32_t thread = merge_threads ? UINT32_MAX : sites[i].thread;
		if (oom)
			goto fail;
		size_t at = (size_t)mix(key, thread) & mask;
		while (slots[at].group && (slots[at].key != key || slots[at].thread != thread))
			at = (at + 1) & mask;
		if (!slots[at].group) {
			slots[at] = (struct slot){ key, thread, ++g->n };
			g->v[g->n - 1] = (struct mt_group){ .first = i };
		}
		g->v[slots[at].group - 1].bytes += bytes;
		g->v[slots[at].group - 1].count += count;
	}
	free(slots);
	mt_stackkeys_release(&keys);
	return 0;
fail:
	free(slots);
	mt_stackkeys_release(&keys);
	mt_groups_release(g);
	return -ENOMEM;
}

void mt_groups_release(struct mt_groups *g)
{
	free(g->v);
	g->v = NULL;
	g->n = 0;
}
