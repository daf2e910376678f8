/* SPDX-License-Identifier: MIT */
/*
 * A thread's native stacks as trie nodes (hybrid.h).
 */
#include "payload/hybrid.h"
#include "payload/intern.h" /* MT_NATIVE_CODE, MT_HYBRID_CODE */

#include <string.h> /* memset */

static size_t xcache_slot(uint32_t parent, uintptr_t ip)
{
	uint64_t v = ((uint64_t)ip ^ ((uint64_t)parent << 40)) * 0x9e3779b97f4a7c15ull;
	return (size_t)(v >> 55) & (MT_XCACHE - 1);
}

static size_t hcache_slot(uint32_t py, uint32_t leaf)
{
	uint64_t v = ((uint64_t)py << 32 | leaf) * 0x9e3779b97f4a7c15ull;
	return (size_t)(v >> 56) & (MT_HCACHE - 1);
}

uint32_t mt_hybrid_stack(struct mt_hybrid *h, const struct mt_pychain *c, uint32_t py, size_t keep,
			 mt_hybrid_node_fn node, void *ctx)
{
	uintptr_t *ips = h->nnew; /* not on the hook's stack: threads' stacks may be small */
	size_t same, n = mt_memo_unwind(&h->memo, c, keep, h->nips, h->nn, ips, &same);
	h->unwound += n - same;
	size_t lim = n < h->nn ? n : h->nn;
	while (same < lim && ips[n - 1 - same] == h->nips[same])
		same++;
	uint32_t leaf = same ? h->nid[same - 1] : 0;
	for (size_t k = same; k < n; k++) {
		uintptr_t ip = ips[n - 1 - k];
		struct mt_xcache_entry *e = &h->xcache[xcache_slot(leaf, ip)];
		if (e->ip == ip && e->parent == leaf) {
			leaf = e->id;
		} else {
			uint32_t id = node(ctx, leaf, MT_NATIVE_CODE | (uint32_t)((uint64_t)ip >> 32),
					   (uint32_t)ip);
			*e = (struct mt_xcache_entry){ ip, leaf, id };
			leaf = id;
		}
		h->nips[k] = ip;
		h->nid[k] = leaf;
	}
	mt_memo_done(&h->memo, h->nips, same, n);
	h->nn = (uint32_t)n;
	struct mt_hcache_entry *p = &h->hcache[hcache_slot(py, leaf)];
	if (p->id && p->py == py && p->leaf == leaf)
		return p->id;
	uint32_t id = node(ctx, py, MT_HYBRID_CODE, leaf);
	*p = (struct mt_hcache_entry){ py, leaf, id };
	return id;
}

void mt_hybrid_forget(struct mt_hybrid *h)
{
	h->nn = 0;
	mt_memo_forget(&h->memo);
	memset(h->xcache, 0, sizeof(h->xcache));
	memset(h->hcache, 0, sizeof(h->hcache));
}
