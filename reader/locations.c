/* SPDX-License-Identifier: MIT */
/*
 * Locations of a snapshot's memory (reader/locations.h): own and total
 * memory per (function, file, line), from one walk of the stack trie.
 */
#include "reader/locations.h"
#include "reader/frames.h"
#include "util/slots.h"

#include <errno.h>  /* ENOMEM */
#include <stdlib.h> /* malloc */
#include <string.h> /* memcpy, strcmp */

/* Location table for one mt_snapshot_locations() call. */
struct loctab {
	struct mt_location *v;
	size_t n, cap;
	uint32_t *slots; /* index + 1, 0 = empty */
	size_t nslots;
	uint64_t *stamp;
};

static const char no_frames[] = "<no Python frames>";
static const char hidden_frames[] = MT_HIDDEN_FRAMES;

static uint64_t loc_hash(const char *fn, const char *file, int line)
{
	uint64_t h = (uint64_t)(uintptr_t)fn * 0x9E3779B97F4A7C15ull;
	h ^= (uint64_t)(uintptr_t)file * 0xC2B2AE3D27D4EB4Full;
	h ^= (uint64_t)(unsigned)line * 0x165667B19E3779F9ull;
	return h ^ (h >> 29);
}

static uint64_t loctab_hash(const void *ctx, size_t i)
{
	const struct mt_location *l = &((const struct loctab *)ctx)->v[i];
	return loc_hash(l->function, l->file, l->line);
}

/* Interned strings compare by pointer. Returns the index or -1. */
static ssize_t loc_get(struct loctab *t, const char *fn, const char *file, int line, int native)
{
	if (t->n * 2 >= t->nslots &&
	    mt_slots_grow(&t->slots, &t->nslots, 1024, 0, t->n, loctab_hash, t) < 0)
		return -1;
	size_t j = loc_hash(fn, file, line) & (t->nslots - 1);
	while (t->slots[j]) {
		struct mt_location *l = &t->v[t->slots[j] - 1];
		if (l->function == fn && l->file == file && l->line == line)
			return t->slots[j] - 1;
		j = (j + 1) & (t->nslots - 1);
	}
	if (t->n == t->cap) {
		size_t n = t->cap ? t->cap * 2 : 256;
		struct mt_location *nv = realloc(t->v, n * sizeof(*nv));
		uint64_t *ns = nv ? realloc(t->stamp, n * sizeof(*ns)) : NULL;
		if (!nv)
			return -1;
		t->v = nv;
		if (!ns)
			return -1;
		t->stamp = ns;
		t->cap = n;
	}
	t->v[t->n] = (struct mt_location){ fn, file, line, 0, 0, 0, 0, native };
	t->stamp[t->n] = 0;
	t->slots[j] = (uint32_t)t->n + 1;
	return (ssize_t)t->n++;
}

/* Every location's own memory is that of the stacks whose newest frame it
 * is; its total counts each stack with memory once, however often the
 * location recurs in it. So the trie is walked depth first, once: a
 * node's subtree memory goes to its location's total unless that location
 * is already on the path above (t->stamp counts its occurrences there).
 * Parents mostly have lower ids than their children, but not always (a
 * hybrid stack, reader/native.h, is a frame node made after the capture's
 * ids): the child lists link each node with memory and its ancestors once,
 * walking up, and subtree sums come from a pass in depth-first order. A
 * loop of parents (never in a decoded capture) is not reached from the
 * roots and counts nothing. A frame left out (@how) has no location: its
 * node passes its nearest shown caller's location (NONE: none) to its
 * callees, and its own memory goes there, or to MT_HIDDEN_FRAMES (or the
 * "<no Python frames>" location for a native frame). */
ssize_t mt_snapshot_thread_locations(const struct mt_snapshot *s, enum mt_view view,
				     unsigned how, uint32_t thread, size_t *n_hidden,
				     struct mt_location **out)
{
	size_t n = (size_t)mt_snapshot_max_stack(s) + 1;
	struct loctab t = { 0 };
	uint64_t *sub = calloc(n, 2 * sizeof(*sub)); /* subtree bytes, count */
	uint32_t *first = calloc(n, sizeof(*first)); /* first child with memory */
	uint32_t *next = calloc(n, sizeof(*next));   /* its next sibling */
	uint32_t *li = malloc(n * sizeof(*li));      /* location of an entered node */
	uint32_t *todo = malloc(2 * n * sizeof(*todo));
	uint8_t *linked = calloc(n, 1);
	uint8_t *hid = calloc(n, 1);
	/* each stack's own memory (one thread's, or all), from its sites */
	uint64_t *own = calloc(n, 2 * sizeof(*own));
	ssize_t ret = -ENOMEM;
	const uint32_t EXIT = 1u << 31; /* stack ids are below 2^24 */
	const uint32_t NONE = UINT32_MAX;
	size_t hidden = 0;

	if (!sub || !first || !next || !li || !todo || !linked || !hid || !own)
		goto out;
	const struct mt_site *sites;
	size_t n_sites = mt_snapshot_sites(s, &sites);
	for (size_t i = 0; i < n_sites; i++) {
		uint64_t b, c;
		if ((thread != MT_ALL_THREADS && sites[i].thread != thread) || sites[i].stack >= n)
			continue;
		mt_usage_view(&sites[i].usage, view, &b, &c);
		own[2 * sites[i].stack] += b;
		own[2 * sites[i].stack + 1] += c;
	}
	memcpy(sub, own, n * 2 * sizeof(*sub));
	if (sub[0] || sub[1]) {
		ssize_t k = loc_get(&t, no_frames, "", 0, 0);
		if (k < 0)
			goto out;
		t.v[k].own_bytes = t.v[k].total_bytes = sub[0];
		t.v[k].own_count = t.v[k].total_count = sub[1];
	}
	for (size_t id = n - 1; id > 0; id--) {
		if (!sub[2 * id] && !sub[2 * id + 1])
			continue;
		for (uint32_t c = (uint32_t)id; c && !linked[c];) {
			uint32_t p = mt_snapshot_stack_parent(s, c);
			if (p >= n)
				p = 0;
			linked[c] = 1;
			next[c] = first[p];
			first[p] = c;
			c = p;
		}
	}
	/* subtree sums: children before their parent (post-order) */
	size_t top = 0;
	for (uint32_t c = first[0]; c; c = next[c])
		todo[top++] = c;
	while (top) {
		uint32_t id = todo[--top];
		if (id & EXIT) {
			id &= ~EXIT;
			for (uint32_t c = first[id]; c; c = next[c]) {
				sub[2 * id] += sub[2 * c];
				sub[2 * id + 1] += sub[2 * c + 1];
			}
			continue;
		}
		todo[top++] = id | EXIT;
		for (uint32_t c = first[id]; c; c = next[c])
			todo[top++] = c;
	}
	top = 0;
	for (uint32_t c = first[0]; c; c = next[c])
		todo[top++] = c;
	while (top) {
		uint32_t id = todo[--top];
		if (id & EXIT) {
			if (!hid[id & ~EXIT])
				t.stamp[li[id & ~EXIT]]--;
			continue;
		}
		struct mt_frame f;
		mt_snapshot_stack_frame(s, id, &f);
		uint64_t own_bytes = own[2 * id], own_count = own[2 * id + 1];
		ssize_t k;
		int native = (how & MT_LOC_PYTHON) && f.native;
		if (native || ((how & MT_LOC_HIDE) &&
			       mt_frame_kind(f.function, f.file, f.native) != MT_FRAME_SHOWN)) {
			uint32_t p = mt_snapshot_stack_parent(s, id);
			hid[id] = 1;
			hidden += !native;
			li[id] = p && p < n ? li[p] : NONE;
			if (own_bytes || own_count) {
				int alone = li[id] == NONE;
				k = !alone ? (ssize_t)li[id]
				    : loc_get(&t, native ? no_frames : hidden_frames, "", 0, 0);
				if (k < 0)
					goto out;
				t.v[k].own_bytes += own_bytes;
				t.v[k].own_count += own_count;
				if (alone) {
					t.v[k].total_bytes += own_bytes;
					t.v[k].total_count += own_count;
				}
			}
			todo[top++] = id | EXIT;
			for (uint32_t c = first[id]; c; c = next[c])
				todo[top++] = c;
			continue;
		}
		k = loc_get(&t, f.function, f.file, f.line, f.native);
		if (k < 0)
			goto out;
		li[id] = (uint32_t)k;
		struct mt_location *l = &t.v[k];
		l->own_bytes += own_bytes;
		l->own_count += own_count;
		if (t.stamp[k]++ == 0) {
			l->total_bytes += sub[2 * id];
			l->total_count += sub[2 * id + 1];
		}
		todo[top++] = id | EXIT;
		for (uint32_t c = first[id]; c; c = next[c])
			todo[top++] = c;
	}
	*out = t.v;
	t.v = NULL;
	ret = (ssize_t)t.n;
	if (n_hidden)
		*n_hidden = hidden;
out:
	free(t.v);
	free(t.slots);
	free(t.stamp);
	free(sub);
	free(first);
	free(next);
	free(li);
	free(todo);
	free(linked);
	free(hid);
	free(own);
	return ret;
}

ssize_t mt_snapshot_locations_opt(const struct mt_snapshot *s, enum mt_view view, unsigned how,
				  size_t *n_hidden, struct mt_location **out)
{
	return mt_snapshot_thread_locations(s, view, how, MT_ALL_THREADS, n_hidden, out);
}

ssize_t mt_snapshot_locations(const struct mt_snapshot *s, enum mt_view view,
			      struct mt_location **out)
{
	return mt_snapshot_locations_opt(s, view, 0, NULL, out);
}

static int loc_tiebreak(const struct mt_location *a, const struct mt_location *b)
{
	int c = strcmp(a->function, b->function);
	if (!c)
		c = strcmp(a->file, b->file);
	if (!c)
		c = (a->line > b->line) - (a->line < b->line);
	return c;
}

#define DESC(x, y) ((x) < (y) ? 1 : (x) > (y) ? -1 : 0)

int mt_location_cmp_total(const void *pa, const void *pb)
{
	const struct mt_location *a = pa, *b = pb;
	int c = DESC(a->total_bytes, b->total_bytes);
	/* equal totals are mostly a call chain: callers first */
	if (!c)
		c = -DESC(a->own_bytes, b->own_bytes);
	return c ? c : loc_tiebreak(a, b);
}

int mt_location_cmp_own(const void *pa, const void *pb)
{
	const struct mt_location *a = pa, *b = pb;
	int c = DESC(a->own_bytes, b->own_bytes);
	if (!c)
		c = DESC(a->own_count, b->own_count);
	return c ? c : loc_tiebreak(a, b);
}

int mt_location_cmp_own_count(const void *pa, const void *pb)
{
	const struct mt_location *a = pa, *b = pb;
	int c = DESC(a->own_count, b->own_count);
	if (!c)
		c = DESC(a->own_bytes, b->own_bytes);
	return c ? c : loc_tiebreak(a, b);
}

int mt_location_cmp_total_count(const void *pa, const void *pb)
{
	const struct mt_location *a = pa, *b = pb;
	int c = DESC(a->total_count, b->total_count);
	if (!c)
		c = DESC(a->total_bytes, b->total_bytes);
	return c ? c : loc_tiebreak(a, b);
}
