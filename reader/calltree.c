/* SPDX-License-Identifier: MIT */
/*
 * Call tree of a view: sites resolved to frame paths through the stack
 * trie (each trie node resolved once per thread, memoised), children
 * found by a hash of (parent, frame, thread), then totals summed from the
 * leaves up. Pruning keeps the biggest nodes and folds the others.
 */
#include "reader/calltree.h"
#include "reader/frames.h"
#include "util/grow.h"
#include "util/slots.h"

#include <errno.h>  /* ENOMEM */
#include <stdlib.h> /* malloc */
#include <string.h> /* memset */

static const char no_frames[] = "<no Python frames>";
static const char hidden_frames[] = MT_HIDDEN_FRAMES;

struct builder {
	struct mt_ctree *t;
	size_t cap;
	uint32_t *slots; /* node index + 1, 0 = empty */
	size_t nslots;
};

static uint64_t child_hash(uint32_t parent, const char *fn, const char *file, int line,
			   uint32_t thread)
{
	uint64_t h = (uint64_t)parent * 0x9E3779B97F4A7C15ull;
	h ^= (uint64_t)(uintptr_t)fn * 0xC2B2AE3D27D4EB4Full;
	h ^= (uint64_t)(uintptr_t)file * 0x165667B19E3779F9ull;
	h ^= ((uint64_t)(unsigned)line << 20 ^ thread) * 0x27D4EB2F165667C5ull;
	return h ^ (h >> 31);
}

static uint64_t node_hash(const void *ctx, size_t i)
{
	const struct mt_ctree_node *c = &((const struct mt_ctree *)ctx)->v[i];
	return child_hash(c->parent, c->function, c->file, c->line, c->thread);
}

/* Index of the child of @parent for the frame, created if new; -1 when out
 * of memory. Strings are interned by the snapshot: compared by pointer. */
static int64_t child(struct builder *b, uint32_t parent, const struct mt_frame *f, uint32_t thread)
{
	struct mt_ctree *t = b->t;

	if (t->n * 2 >= b->nslots &&
	    mt_slots_grow(&b->slots, &b->nslots, 4096, 1, t->n, node_hash, t) < 0)
		return -1;
	size_t j = child_hash(parent, f->function, f->file, f->line, thread) & (b->nslots - 1);
	while (b->slots[j]) {
		const struct mt_ctree_node *c = &t->v[b->slots[j] - 1];
		if (c->parent == parent && c->function == f->function && c->file == f->file &&
		    c->line == f->line && c->thread == thread)
			return b->slots[j] - 1;
		j = (j + 1) & (b->nslots - 1);
	}
	if (t->n == b->cap) {
		size_t n = b->cap * 2;
		struct mt_ctree_node *nv = realloc(t->v, n * sizeof(*nv));
		if (!nv)
			return -1;
		t->v = nv;
		b->cap = n;
	}
	struct mt_ctree_node *c = &t->v[t->n];
	memset(c, 0, sizeof(*c));
	c->function = f->function;
	c->file = f->file;
	c->line = f->line;
	c->native = (uint8_t)f->native;
	c->kind = (uint8_t)mt_frame_page_kind(f->function, f->file, f->native);
	c->parent = parent;
	c->thread = thread;
	c->depth = t->v[parent].depth + 1;
	b->slots[j] = (uint32_t)t->n + 1;
	return (int64_t)t->n++;
}

/* Sites by thread, then in their own order. */
static int cmp_site_thread(const void *a, const void *b, void *arg)
{
	const struct mt_site *sites = arg;
	uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
	if (sites[i].thread != sites[j].thread)
		return sites[i].thread < sites[j].thread ? -1 : 1;
	return i < j ? -1 : i > j;
}

/* What finding a stack's node keeps between stacks: each trie node's
 * tree node for the thread being walked (stamped with that thread + 1). */
struct walker {
	struct builder b;
	const struct mt_snapshot *s;
	uint32_t max;
	uint32_t *memo, *stamp, *chain;
	size_t chain_cap;
	int hide;
};

/* @n zeroed elements of @elem bytes, zeroed by writing: a page of
 * calloc's read before it is written faults twice, and these are read
 * first, at random. */
static void *zeroed(size_t n, size_t elem)
{
	void *v = malloc(n * elem);
	if (v) {
		mt_grow_huge(v, n * elem);
		memset(v, 0, n * elem);
	}
	return v;
}

static int walker_init(struct walker *w, struct mt_ctree *t, const struct mt_snapshot *s, int hide)
{
	memset(w, 0, sizeof(*w));
	w->b = (struct builder){ t, 1024, NULL, 0 };
	w->s = s;
	w->hide = hide;
	w->max = mt_snapshot_max_stack(s);
	w->memo = zeroed((size_t)w->max + 1, sizeof(*w->memo));
	w->stamp = zeroed((size_t)w->max + 1, sizeof(*w->stamp));
	memset(t, 0, sizeof(*t));
	t->v = calloc(w->b.cap, sizeof(*t->v));
	if (!t->v || !w->memo || !w->stamp)
		return -ENOMEM;
	t->n = 1; /* the root */
	return 0;
}

static void walker_release(struct walker *w)
{
	free(w->b.slots);
	free(w->memo);
	free(w->stamp);
	free(w->chain);
}

/* The node of stack @stack for @thread, made with its ancestors if new;
 * -1 when out of memory. */
static int64_t path_node(struct walker *w, uint32_t stack, uint32_t thread)
{
	struct mt_ctree *t = w->b.t;
	uint32_t mark = thread + 1, max = w->max;
	int64_t node;

	if (stack == 0) {
		struct mt_frame f = { no_frames, "", 0, 0 };
		return child(&w->b, 0, &f, thread);
	}
	/* up to the first resolved ancestor, then back down */
	size_t depth = 0;
	uint32_t id = stack;
	while (id && !(id <= max && w->stamp[id] == mark) && depth <= (size_t)max) {
		if (depth == w->chain_cap) {
			size_t n = w->chain_cap ? w->chain_cap * 2 : 256;
			uint32_t *nc = realloc(w->chain, n * sizeof(*nc));
			if (!nc)
				return -1;
			w->chain = nc;
			w->chain_cap = n;
		}
		w->chain[depth++] = id;
		id = mt_snapshot_stack_parent(w->s, id);
	}
	node = id && id <= max && w->stamp[id] == mark ? w->memo[id] : 0;
	while (depth--) {
		struct mt_frame f;
		uint32_t at = w->chain[depth];
		mt_snapshot_stack_frame(w->s, at, &f);
		if (w->hide && mt_frame_kind(f.function, f.file, f.native) != MT_FRAME_SHOWN)
			t->n_hidden++; /* its callees join its caller */
		else if ((node = child(&w->b, (uint32_t)node, &f, thread)) < 0)
			return -1;
		if (at <= max) {
			w->memo[at] = (uint32_t)node;
			w->stamp[at] = mark;
		}
	}
	if (node == 0) { /* hidden frames alone */
		struct mt_frame f = { hidden_frames, "", 0, 0 };
		node = child(&w->b, 0, &f, thread);
	}
	return node;
}

/* Every node's totals from the own figures, leaves up. */
static void sum_totals(struct mt_ctree *t)
{
	for (size_t i = 0; i < t->n; i++) {
		t->v[i].total_bytes = t->v[i].own_bytes;
		t->v[i].total_count = t->v[i].own_count;
	}
	for (size_t i = t->n; i-- > 1;) {
		struct mt_ctree_node *p = &t->v[t->v[i].parent];
		p->total_bytes += t->v[i].total_bytes;
		p->total_count += t->v[i].total_count;
	}
}

int mt_ctree_build(struct mt_ctree *t, const struct mt_snapshot *s, enum mt_view view,
		   int split_threads, int hide)
{
	const struct mt_site *sites;
	size_t n_sites = mt_snapshot_sites(s, &sites);
	uint32_t *order = NULL;
	struct walker w;
	int err = -ENOMEM;

	if (walker_init(&w, t, s, hide) < 0)
		goto out;
	/* With threads apart, the memo holds one thread's nodes at a time:
	 * take each thread's sites together, or alternating threads would
	 * each walk their stacks to the root. */
	if (split_threads && n_sites > 1) {
		order = malloc(n_sites * sizeof(*order));
		if (!order)
			goto out;
		for (size_t i = 0; i < n_sites; i++)
			order[i] = (uint32_t)i;
		qsort_r(order, n_sites, sizeof(*order), cmp_site_thread, (void *)sites);
	}
	for (size_t k = 0; k < n_sites; k++) {
		size_t i = order ? order[k] : k;
		uint64_t bytes, count;
		mt_usage_view(&sites[i].usage, view, &bytes, &count);
		if (!bytes && !count)
			continue;
		int64_t node = path_node(&w, sites[i].stack, split_threads ? sites[i].thread : 0);
		if (node < 0)
			goto out;
		t->v[node].own_bytes += bytes;
		t->v[node].own_count += count;
	}
	sum_totals(t);
	err = 0;
out:
	free(order);
	walker_release(&w);
	if (err)
		mt_ctree_release(t);
	return err;
}

int mt_ctree_build_paths(struct mt_ctree *t, const struct mt_snapshot *s, const uint32_t *stacks,
			 const uint64_t *bytes, const uint64_t *counts, size_t n, uint32_t *node_of)
{
	struct walker w;
	int err = -ENOMEM;

	if (walker_init(&w, t, s, 0) < 0)
		goto out;
	for (size_t i = 0; i < n; i++) {
		int64_t node = path_node(&w, stacks[i], 0);
		if (node < 0)
			goto out;
		t->v[node].own_bytes += bytes[i];
		t->v[node].own_count += counts[i];
		node_of[i] = (uint32_t)node;
	}
	sum_totals(t);
	err = 0;
out:
	walker_release(&w);
	if (err)
		mt_ctree_release(t);
	return err;
}

/* Largest total first; among equal totals the older node (a parent is
 * always older than its children), so that any prefix of this order holds
 * the parent of each of its nodes. */
static int cmp_keep(const void *a, const void *b, void *arg)
{
	const struct mt_ctree_node *v = arg;
	uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
	uint64_t x = v[i].total_bytes, y = v[j].total_bytes;
	if (x != y)
		return x < y ? 1 : -1;
	return i < j ? -1 : i > j;
}

int mt_ctree_prune(struct mt_ctree *t, double min_fraction, size_t max_nodes)
{
	return mt_ctree_prune_map(t, min_fraction, max_nodes, NULL);
}

int mt_ctree_prune_map(struct mt_ctree *t, double min_fraction, size_t max_nodes, uint32_t *remap)
{
	uint64_t root = t->n ? t->v[0].total_bytes : 0;
	uint64_t cut = (uint64_t)(min_fraction * (double)root);

	if (t->n <= 1) {
		for (size_t i = 0; remap && i < t->n; i++)
			remap[i] = (uint32_t)i;
		return 0;
	}
	if (max_nodes < 2)
		max_nodes = 2;
	if (cut == 0)
		cut = 1; /* nodes with no bytes at all go (zero-size views keep counts) */

	/* Kept: the root and the largest nodes of at least @cut bytes, as many
	 * as leave room for the merged nodes too (at most one per kept node). */
	size_t budget = max_nodes / 2;
	uint8_t *keep = calloc(t->n, 1);
	uint32_t *order = malloc(t->n * sizeof(*order));
	uint32_t *map = malloc(t->n * sizeof(*map));        /* old -> new + 1, 0 = dropped */
	uint32_t *merged_of = calloc(t->n, sizeof(*merged_of)); /* new parent -> merged + 1 */
	struct mt_ctree_node *nv = malloc(t->n * sizeof(*nv) + sizeof(*nv));
	if (!keep || !order || !map || !merged_of || !nv) {
		free(keep);
		free(order);
		free(map);
		free(merged_of);
		free(nv);
		return -ENOMEM;
	}
	size_t big = 0;
	for (size_t i = 1; i < t->n; i++)
		if (t->v[i].total_bytes >= cut)
			order[big++] = (uint32_t)i;
	if (big > budget - 1)
		qsort_r(order, big, sizeof(*order), cmp_keep, t->v);
	for (size_t k = 0; k < big && k < budget - 1; k++)
		keep[order[k]] = 1;
	free(order);

	size_t n = 0, n_merged = 0;
	uint64_t dropped_max = 0;
	nv[n++] = t->v[0];
	map[0] = 1;
	for (size_t i = 1; i < t->n; i++) {
		const struct mt_ctree_node *c = &t->v[i];
		map[i] = 0;
		if (keep[i]) {
			nv[n] = *c;
			nv[n].parent = map[c->parent] - 1;
			map[i] = (uint32_t)++n;
		} else {
			n_merged++;
			if (c->total_bytes > dropped_max)
				dropped_max = c->total_bytes;
		}
	}
	free(keep);
	/* merged children, after every kept node */
	size_t kept = n;
	for (size_t i = 1; i < t->n; i++) {
		const struct mt_ctree_node *c = &t->v[i];
		if (map[i] || !map[c->parent])
			continue;
		uint32_t p = map[c->parent] - 1;
		size_t m = merged_of[p] ? merged_of[p] - 1 : 0;
		/* with split threads the root's children differ by thread */
		if (m && nv[m].thread != c->thread) {
			m = 0;
			for (size_t k = kept; k < n; k++)
				if (nv[k].parent == p && nv[k].thread == c->thread)
					m = k;
		}
		if (!m) {
			m = n++;
			memset(&nv[m], 0, sizeof(nv[m]));
			nv[m].parent = p;
			nv[m].thread = c->thread;
			nv[m].depth = nv[p].depth + 1;
			merged_of[p] = (uint32_t)m + 1;
		}
		nv[m].merged++;
		nv[m].own_bytes += c->total_bytes;
		nv[m].own_count += c->total_count;
		nv[m].total_bytes += c->total_bytes;
		nv[m].total_count += c->total_count;
	}
	/* each old node to its new one: itself if kept, else the merged node
	 * its topmost dropped ancestor went to (parents come first) */
	for (size_t i = 0; remap && i < t->n; i++) {
		const struct mt_ctree_node *c = &t->v[i];
		if (map[i])
			remap[i] = map[i] - 1;
		else if (map[c->parent])
			remap[i] = merged_of[map[c->parent] - 1] - 1;
		else
			remap[i] = remap[c->parent];
	}
	free(map);
	free(merged_of);
	free(t->v);
	t->v = nv;
	t->n = n;
	t->n_merged = n_merged;
	t->merged_below = n_merged ? dropped_max + 1 : 0;
	return 0;
}

void mt_ctree_release(struct mt_ctree *t)
{
	free(t->v);
	memset(t, 0, sizeof(*t));
}
