/* SPDX-License-Identifier: MIT */
/*
 * Records as memray groups them (groups.h).
 */
#include "reader/groups.h"
#include "reader/stackkeys.h"

#include <errno.h>  /* ENOMEM */
#include <stdlib.h> /* calloc */

/* (path key, native leaf, thread) -> group: open addressing, a power of
 * two slots */
struct slot {
	uint32_t path, leaf, thread;
	uint32_t group; /* group + 1; 0: the slot is empty */
};

static uint64_t mix(uint32_t path, uint32_t leaf, uint32_t thread)
{
	uint64_t k = ((uint64_t)path << 32 | leaf) ^ (uint64_t)thread * 0x9E3779B97F4A7C15ull;
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	return k;
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
	g->of_site = malloc((n_sites ? n_sites : 1) * sizeof(*g->of_site));
	if (!slots || !g->of_site)
		goto fail;
	for (size_t i = 0; i < n_sites; i++) {
		uint64_t bytes, count;
		g->of_site[i] = MT_GROUP_NONE;
		mt_usage_view(&sites[i].usage, view, &bytes, &count);
		if (!bytes && !count)
			continue;
		/* a hybrid stack: its Python stack's path and its native chain */
		uint32_t python = sites[i].stack, leaf = 0;
		(void)mt_snapshot_hybrid_parts(s, sites[i].stack, &python, &leaf);
		uint32_t path = mt_snapshot_stack_key(s, &keys, python, &oom);
		uint32_t thread = merge_threads ? UINT32_MAX : sites[i].thread;
		if (oom)
			goto fail;
		size_t at = (size_t)mix(path, leaf, thread) & mask;
		while (slots[at].group && (slots[at].path != path || slots[at].leaf != leaf ||
					   slots[at].thread != thread))
			at = (at + 1) & mask;
		if (!slots[at].group)
			slots[at] = (struct slot){ path, leaf, thread, ++g->n };
		g->of_site[i] = slots[at].group - 1;
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
	free(g->of_site);
	g->of_site = NULL;
	g->n = 0;
}
