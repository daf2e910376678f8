/* SPDX-License-Identifier: MIT */
/*
 * Two captures compared (reader/diff.h): their locations in both views
 * gathered into one list, sorted by (function, file, native) and merged
 * run by run; their call trees merged path by path through a hash of
 * (parent, function, file, native) over the strings' contents, since the
 * two snapshots intern their strings apart.
 */
#include "reader/calltree.h"
#include "reader/diff.h"
#include "reader/locations.h"
#include "util/slots.h"

#include <errno.h>  /* ENOMEM */
#include <stdlib.h> /* qsort */
#include <string.h> /* strcmp */

/* One location's own memory in one capture and view. */
struct entry {
	const char *function, *file;
	int native;
	uint8_t side, view;
	uint64_t bytes, count;
};

static int entry_cmp(const void *pa, const void *pb)
{
	const struct entry *a = pa, *b = pb;
	int c = strcmp(a->function, b->function);
	if (!c)
		c = strcmp(a->file, b->file);
	return c ? c : (a->native > b->native) - (a->native < b->native);
}

static uint64_t mag(int64_t v)
{
	return v < 0 ? -(uint64_t)v : (uint64_t)v;
}

int64_t mt_diff_change(const struct mt_diff_fig *f)
{
	uint64_t a = f->bytes[MT_DIFF_AFTER], b = f->bytes[MT_DIFF_BEFORE];
	if (a >= b)
		return a - b > INT64_MAX ? INT64_MAX : (int64_t)(a - b);
	return b - a > INT64_MAX ? INT64_MIN : -(int64_t)(b - a);
}

static int row_cmp(const void *pa, const void *pb)
{
	const struct mt_diff_row *a = pa, *b = pb;
	for (int v = 0; v < MT_DIFF__VIEWS; v++) {
		uint64_t x = mag(mt_diff_change(&a->fig[v])), y = mag(mt_diff_change(&b->fig[v]));
		if (x != y)
			return x < y ? 1 : -1;
	}
	int c = strcmp(a->function, b->function);
	if (!c)
		c = strcmp(a->file, b->file);
	return c ? c : (a->native > b->native) - (a->native < b->native);
}

/* Append the own memory of @s's locations in view @v to @e. */
static int gather(struct entry **e, size_t *n, size_t *cap, const struct mt_snapshot *s, int side,
		  int v)
{
	struct mt_location *locs;
	ssize_t k = mt_snapshot_locations(s, v == MT_DIFF_PEAK ? MT_VIEW_PEAK : MT_VIEW_LEAKS, &locs);

	if (k < 0)
		return (int)k;
	for (ssize_t i = 0; i < k; i++) {
		if (!locs[i].own_bytes && !locs[i].own_count)
			continue;
		if (*n == *cap) {
			size_t nc = *cap ? *cap * 2 : 256;
			struct entry *ne = realloc(*e, nc * sizeof(*ne));
			if (!ne) {
				free(locs);
				return -ENOMEM;
			}
			*e = ne;
			*cap = nc;
		}
		(*e)[(*n)++] = (struct entry){ locs[i].function, locs[i].file, locs[i].native,
					       (uint8_t)side, (uint8_t)v, locs[i].own_bytes,
					       locs[i].own_count };
	}
	free(locs);
	return 0;
}

int mt_diff_build(struct mt_diff *d, const struct mt_snapshot *before,
		  const struct mt_snapshot *after)
{
	const struct mt_snapshot *snap[2] = { before, after };
	struct entry *e = NULL;
	size_t n = 0, cap = 0;
	int err = 0;

	memset(d, 0, sizeof(*d));
	for (int side = 0; side < 2 && !err; side++) {
		d->total[MT_DIFF_PEAK].bytes[side] = snap[side]->peak_heap;
		d->total[MT_DIFF_LEAKS].bytes[side] = snap[side]->heap_end;
		d->total[MT_DIFF_LEAKS].count[side] = snap[side]->leak_count;
		for (int v = 0; v < MT_DIFF__VIEWS && !err; v++)
			err = gather(&e, &n, &cap, snap[side], side, v);
	}
	if (err)
		goto out;
	if (n > 1)
		qsort(e, n, sizeof(*e), entry_cmp);
	err = -ENOMEM;
	d->rows = malloc((n ? n : 1) * sizeof(*d->rows));
	if (!d->rows)
		goto out;
	for (size_t i = 0; i < n; i++) {
		struct mt_diff_row *r = &d->rows[d->n];
		if (i == 0 || entry_cmp(&e[i - 1], &e[i])) {
			memset(r, 0, sizeof(*r));
			r->function = e[i].function;
			r->file = e[i].file;
			r->native = e[i].native;
			d->n++;
		} else {
			r--;
		}
		r->fig[e[i].view].bytes[e[i].side] += e[i].bytes;
		r->fig[e[i].view].count[e[i].side] += e[i].count;
		if (e[i].view == MT_DIFF_PEAK) /* the snapshot keeps no count at its peak */
			d->total[MT_DIFF_PEAK].count[e[i].side] += e[i].count;
	}
	if (d->n > 1)
		qsort(d->rows, d->n, sizeof(*d->rows), row_cmp);
	err = 0;
out:
	free(e);
	if (err)
		mt_diff_release(d);
	return err;
}

void mt_diff_release(struct mt_diff *d)
{
	free(d->rows);
	memset(d, 0, sizeof(*d));
}

/* ------------------------------------------------------------------------
 * Call paths
 * ---------------------------------------------------------------------- */
struct dbuild {
	struct mt_dtree *t;
	size_t cap;
	uint32_t *slots; /* node index + 1, 0 = empty */
	size_t nslots;
};

static uint64_t str_hash(uint64_t h, const char *s)
{
	if (!s)
		return h * 0x100000001B3ull ^ 0xA5;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001B3ull;
	return h;
}

static uint64_t key_hash(uint32_t parent, const char *fn, const char *file, int native)
{
	uint64_t h = 0xCBF29CE484222325ull ^ ((uint64_t)parent * 0x9E3779B97F4A7C15ull);
	h = str_hash(h, fn);
	h = str_hash(h ^ (uint64_t)native, file);
	return h ^ (h >> 31);
}

static uint64_t dnode_hash(const void *ctx, size_t i)
{
	const struct mt_dtree_node *c = &((const struct mt_dtree *)ctx)->v[i];
	return key_hash(c->parent, c->function, c->file, c->native);
}

static int same(const char *a, const char *b)
{
	return a == b || (a && b && !strcmp(a, b));
}

/* The child of @parent for the frame, made if new; -1 when out of memory.
 * The root is in no slot: a merged child of it has its key. */
static int64_t dchild(struct dbuild *b, uint32_t parent, const char *fn, const char *file,
		      int native)
{
	struct mt_dtree *t = b->t;

	if (t->n * 2 >= b->nslots &&
	    mt_slots_grow(&b->slots, &b->nslots, 1024, 1, t->n, dnode_hash, t) < 0)
		return -1;
	size_t j = key_hash(parent, fn, file, native) & (b->nslots - 1);
	while (b->slots[j]) {
		struct mt_dtree_node *c = &t->v[b->slots[j] - 1];
		if (c->parent == parent && c->native == native && same(c->function, fn) &&
		    same(c->file, file))
			return b->slots[j] - 1;
		j = (j + 1) & (b->nslots - 1);
	}
	if (t->n == b->cap) {
		size_t nc = b->cap * 2;
		struct mt_dtree_node *nv = realloc(t->v, nc * sizeof(*nv));
		if (!nv)
			return -1;
		t->v = nv;
		b->cap = nc;
	}
	memset(&t->v[t->n], 0, sizeof(t->v[0]));
	t->v[t->n].function = fn;
	t->v[t->n].file = fn ? file : NULL;
	t->v[t->n].parent = parent;
	t->v[t->n].native = (uint8_t)native;
	b->slots[j] = (uint32_t)t->n + 1;
	return (int64_t)t->n++;
}

/* Merge the call tree of @s in view @v into @b's tree. */
static int merge_tree(struct dbuild *b, const struct mt_snapshot *s, int side, int v,
		      double min_fraction, size_t max_nodes)
{
	struct mt_ctree ct;
	uint32_t *map = NULL;
	int err = mt_ctree_build(&ct, s, v == MT_DIFF_PEAK ? MT_VIEW_PEAK : MT_VIEW_LEAKS, 0, 0);

	if (err < 0)
		return err;
	err = mt_ctree_prune(&ct, min_fraction, max_nodes);
	if (!err && !(map = malloc(ct.n * sizeof(*map))))
		err = -ENOMEM;
	for (size_t i = 0; !err && i < ct.n; i++) {
		const struct mt_ctree_node *c = &ct.v[i];
		int64_t k = 0;
		if (i > 0) {
			k = dchild(b, map[c->parent], c->function, c->file, c->native);
			if (k < 0) {
				err = -ENOMEM;
				break;
			}
		}
		map[i] = (uint32_t)k;
		b->t->v[k].fig[v].bytes[side] += c->total_bytes;
		b->t->v[k].fig[v].count[side] += c->total_count;
	}
	free(map);
	mt_ctree_release(&ct);
	return err;
}

int mt_dtree_build(struct mt_dtree *t, const struct mt_snapshot *before,
		   const struct mt_snapshot *after, double min_fraction, size_t max_nodes)
{
	const struct mt_snapshot *snap[2] = { before, after };
	struct dbuild b = { t, 1024, NULL, 0 };
	int err = 0;

	t->n = 1;
	t->v = calloc(b.cap, sizeof(*t->v));
	if (!t->v)
		err = -ENOMEM;
	for (int side = 0; side < 2 && !err; side++)
		for (int v = 0; v < MT_DIFF__VIEWS && !err; v++)
			err = merge_tree(&b, snap[side], side, v, min_fraction, max_nodes);
	free(b.slots);
	if (err)
		mt_dtree_release(t);
	return err;
}

void mt_dtree_release(struct mt_dtree *t)
{
	free(t->v);
	t->v = NULL;
	t->n = 0;
}
