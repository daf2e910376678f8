/* SPDX-License-Identifier: MIT */
/* The snapshot's stack trie and code-object table (reader/stacks.h). */
#include "reader/stacks.h"
#include "format/error.h"
#include "format/linetable.h"
#include "util/grow.h"

#include <errno.h>  /* ENOMEM */
#include <stdlib.h> /* malloc */
#include <string.h> /* memcpy */

static const char *intern(struct mt_stacks *k, const uint8_t *p, uint32_t len)
{
	uint64_t h = 1469598103934665603ull;

	if (k->strs_n * 2 >= k->strs_cap) {
		size_t n = k->strs_cap ? k->strs_cap * 2 : 256;
		char **nv = calloc(n, sizeof(*nv));
		if (!nv)
			return NULL;
		for (size_t i = 0; i < k->strs_cap; i++) {
			if (!k->strs[i])
				continue;
			uint64_t g = 1469598103934665603ull;
			for (const char *c = k->strs[i]; *c; c++)
				g = (g ^ (uint8_t)*c) * 1099511628211ull;
			size_t j = g & (n - 1);
			while (nv[j])
				j = (j + 1) & (n - 1);
			nv[j] = k->strs[i];
		}
		free(k->strs);
		k->strs = nv;
		k->strs_cap = n;
	}
	/* strings stop at the first NUL: they are printed as C strings */
	const uint8_t *nul = memchr(p, 0, len);
	if (nul)
		len = (uint32_t)(nul - p);
	for (uint32_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	size_t j = h & (k->strs_cap - 1);
	while (k->strs[j]) {
		if (strncmp(k->strs[j], (const char *)p, len) == 0 && k->strs[j][len] == '\0')
			return k->strs[j];
		j = (j + 1) & (k->strs_cap - 1);
	}
	char *c = malloc(len + 1);
	if (!c)
		return NULL;
	if (len)
		memcpy(c, p, len);
	c[len] = '\0';
	k->strs[j] = c;
	k->strs_n++;
	return c;
}

int mt_stacks_define_code(struct mt_stacks *k, const struct mt_rec_code *c)
{
	if (c->id >= k->codes_cap &&
	    mt_grow((void **)&k->codes, &k->codes_cap, c->id, sizeof(struct mt_code_def)) < 0)
		return -ENOMEM;
	struct mt_code_def *d = &k->codes[c->id];
	int fresh = !d->defined;
	const struct mt_bytes *fn = c->qualname.len ? &c->qualname : &c->name;
	d->file = intern(k, c->filename.p, c->filename.len);
	d->function = intern(k, fn->p, fn->len);
	if (!d->file || !d->function)
		return -ENOMEM;
	free(d->linetable);
	d->linetable = NULL;
	d->lt_len = 0;
	if (c->linetable.len) {
		d->linetable = malloc(c->linetable.len);
		if (!d->linetable)
			return -ENOMEM;
		memcpy(d->linetable, c->linetable.p, c->linetable.len);
		d->lt_len = c->linetable.len;
	}
	d->firstlineno = c->firstlineno > INT32_MAX ? 0 : (int)c->firstlineno;
	d->defined = 1;
	return fresh;
}

int mt_stacks_define_stack(struct mt_stacks *k, const struct mt_rec_stack *r)
{
	if (r->id >= k->nodes_cap &&
	    mt_grow((void **)&k->nodes, &k->nodes_cap, r->id, sizeof(struct mt_stack_node)) < 0)
		return -ENOMEM;
	struct mt_stack_node *n = &k->nodes[r->id];
	int fresh = !n->defined;
	/* an id is defined once (the same record read again is no news) */
	if (!fresh && (n->parent != r->parent || n->code != r->code || n->offset != r->offset))
		return -MT_ECORRUPT;
	*n = (struct mt_stack_node){ r->parent, r->code, r->offset, 1, NULL };
	if (r->id >= k->next_free)
		k->next_free = r->id + 1;
	return fresh;
}

int mt_stacks_set_frame(struct mt_stacks *k, uint32_t id, uint32_t parent,
			const struct mt_frame *f)
{
	if (id >= k->nodes_cap &&
	    mt_grow((void **)&k->nodes, &k->nodes_cap, id, sizeof(struct mt_stack_node)) < 0)
		return -ENOMEM;
	k->nodes[id] = (struct mt_stack_node){ parent, MT_CODE_FRAME, 0, 1, f };
	if (id >= k->next_free)
		k->next_free = id + 1;
	return 0;
}

int mt_stacks_alias(struct mt_stacks *k, uint32_t id, uint32_t of)
{
	/* a stack of native frames only, with them folded away: named as a
	 * capture without native stacks names it */
	static const struct mt_frame none = { "<no Python frames>", "", 0, 0 };
	if (of == 0)
		return mt_stacks_set_frame(k, id, 0, &none);
	if (id >= k->nodes_cap &&
	    mt_grow((void **)&k->nodes, &k->nodes_cap, id, sizeof(struct mt_stack_node)) < 0)
		return -ENOMEM;
	/* an undefined @of: an undefined @id, "<unknown>" as @of would be */
	k->nodes[id] = of < k->nodes_cap ? k->nodes[of] : (struct mt_stack_node){ 0 };
	return 0;
}

static uint32_t fhash(uint32_t parent, const struct mt_frame *f)
{
	/* frames are interned by whoever made them: their strings compare by
	 * address */
	uint64_t v = (uint64_t)parent * 0x9e3779b97f4a7c15ull;
	v ^= ((uint64_t)(uintptr_t)f->function + (uint64_t)(uintptr_t)f->file * 31 +
	      (uint64_t)f->line) * 0xc2b2ae3d27d4eb4full;
	v ^= v >> 29;
	return (uint32_t)v;
}

static int same_frame(const struct mt_frame *a, const struct mt_frame *b)
{
	return a->function == b->function && a->file == b->file && a->line == b->line &&
	       a->native == b->native;
}

/* A frame node table of @n slots, zeroed by writing: a page of calloc's
 * read before it is written faults twice. */
static uint64_t *fmap_table(uint32_t n)
{
	uint64_t *v = malloc((size_t)n * sizeof(*v));
	if (v) {
		mt_grow_huge(v, (size_t)n * sizeof(*v));
		memset(v, 0, (size_t)n * sizeof(*v));
	}
	return v;
}

uint32_t mt_stacks_add_frame(struct mt_stacks *k, uint32_t parent, const struct mt_frame *f)
{
	if ((k->fmap_n + 1) * 2 > k->fmap_cap) {
		uint32_t n = k->fmap_cap ? k->fmap_cap * 2 : 1024;
		uint64_t *nv = fmap_table(n);
		if (!nv)
			return 0;
		for (uint32_t i = 0; i < k->fmap_cap; i++) {
			uint64_t e = k->fmap[i];
			if (!e)
				continue;
			uint32_t j = (uint32_t)(e >> 32) & (n - 1);
			while (nv[j])
				j = (j + 1) & (n - 1);
			nv[j] = e;
		}
		free(k->fmap);
		k->fmap = nv;
		k->fmap_cap = n;
	}
	uint32_t h = fhash(parent, f);
	uint32_t j = h & (k->fmap_cap - 1);
	for (; k->fmap[j]; j = (j + 1) & (k->fmap_cap - 1)) {
		uint64_t e = k->fmap[j];
		if ((uint32_t)(e >> 32) != h)
			continue;
		const struct mt_stack_node *n = &k->nodes[(uint32_t)e];
		if (n->parent == parent && (n->frame == f || same_frame(n->frame, f)))
			return (uint32_t)e;
	}
	uint32_t id = k->next_free ? k->next_free : 1;
	if (mt_stacks_set_frame(k, id, parent, f) < 0)
		return 0;
	k->fmap[j] = (uint64_t)h << 32 | id;
	k->fmap_n++;
	return id;
}

void mt_stacks_drop_frames(struct mt_stacks *k, uint32_t from)
{
	if (from >= k->next_free)
		return;
	for (uint32_t id = from; id < k->next_free && id < k->nodes_cap; id++)
		k->nodes[id] = (struct mt_stack_node){ 0 };
	if (k->fmap)
		memset(k->fmap, 0, (size_t)k->fmap_cap * sizeof(*k->fmap));
	k->fmap_n = 0;
	k->next_free = from;
}

void mt_stacks_undefine(struct mt_stacks *k, uint32_t id)
{
	if (id < k->nodes_cap)
		k->nodes[id] = (struct mt_stack_node){ 0 };
}

static const char unknown[] = "<unknown>";

void mt_stacks_frame(const struct mt_stacks *k, uint32_t id, struct mt_frame *f)
{
	f->function = unknown;
	f->file = unknown;
	f->line = 0;
	f->native = 0;
	if (id >= k->nodes_cap || !k->nodes[id].defined)
		return;
	const struct mt_stack_node *n = &k->nodes[id];
	if (n->code == MT_CODE_FRAME) {
		*f = *n->frame;
		return;
	}
	if (n->code >= k->codes_cap || !k->codes[n->code].defined)
		return;
	const struct mt_code_def *c = &k->codes[n->code];
	f->function = c->function;
	f->file = c->file;
	if (k->lines) {
		f->line = (int)mt_stacks_offset(k, n);
		return;
	}
	int line = mt_linetable_line(mt_linetable_capture_hex(k->python_hex), c->linetable,
				     c->lt_len, c->firstlineno, mt_stacks_offset(k, n));
	f->line = line > 0 ? line : 0;
}

size_t mt_stacks_walk(const struct mt_stacks *k, uint32_t id, struct mt_frame *out, size_t max)
{
	size_t depth = 0;

	/* a corrupt trie may loop: no stack is deeper than the trie */
	while (id && depth <= k->nodes_cap) {
		if (depth < max)
			mt_stacks_frame(k, id, &out[depth]);
		depth++;
		id = mt_stacks_parent(k, id);
	}
	return depth;
}

/* zlib's CRC-32 (the IEEE polynomial, reflected), as Python's zlib.crc32 */
static uint32_t crc32(const char *s)
{
	static uint32_t table[256];
	if (!table[1])
		for (uint32_t i = 0; i < 256; i++) {
			uint32_t c = i;
			for (int b = 0; b < 8; b++)
				c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
			table[i] = c;
		}
	uint32_t c = 0xFFFFFFFFu;
	for (; *s; s++)
		c = table[(c ^ (uint8_t)*s) & 0xFF] ^ (c >> 8);
	return c ^ 0xFFFFFFFFu;
}

void mt_stacks_uncut(struct mt_stacks *k)
{
	/* a node defined again since keeps its new parent */
	for (uint32_t i = 0; i < k->n_cut; i++) {
		struct mt_stack_node *n = &k->nodes[k->cut[2 * i]];
		if (n->parent == 0)
			n->parent = k->cut[2 * i + 1];
	}
	k->n_cut = 0;
}

int mt_stacks_cut(struct mt_stacks *k, uint32_t depth, uint64_t hash)
{
	uint64_t *h = calloc(k->nodes_cap ? k->nodes_cap : 1, sizeof(*h));
	uint32_t *d = calloc(k->nodes_cap ? k->nodes_cap : 1, sizeof(*d));
	if (!h || !d) {
		free(h);
		free(d);
		return -ENOMEM;
	}
	mt_stacks_uncut(k);
	/* parents come before their children: one pass, from the root down;
	 * d[] = 1 + the Python frames from the root to the node, its own
	 * included, 0 for a node out of reach. A hybrid stack's frames are
	 * given as they are, its Python frames among them; a native frame
	 * is seen through, as the Tracker's chain has none: its d[]
	 * and h[] are its parent's, and a cut below it takes it off too, as
	 * memray drops every frame above the one that entered the Tracker. */
	for (uint32_t id = 1; id < k->nodes_cap; id++) {
		struct mt_stack_node *n = &k->nodes[id];
		uint32_t p = n->parent;
		if (!n->defined || p >= id || (p && !d[p]))
			continue;
		uint32_t pd = p ? d[p] : 1;
		uint64_t ph = p ? h[p] : 0;
		if (n->code == MT_CODE_FRAME && (!n->frame || n->frame->native)) {
			d[id] = pd;
			h[id] = ph;
			continue;
		}
		if (pd == depth + 1 && ph == hash) {
			if (k->n_cut == k->cut_cap &&
			    mt_grow((void **)&k->cut, &k->cut_cap, k->n_cut, 2 * sizeof(uint32_t)) < 0) {
				free(h);
				free(d);
				return -ENOMEM;
			}
			k->cut[2 * k->n_cut] = id;
			k->cut[2 * k->n_cut++ + 1] = p;
			n->parent = 0; /* the frame that entered the Tracker: outermost */
			continue;
		}
		struct mt_frame f;
		mt_stacks_frame(k, id, &f);
		h[id] = (ph * 1000003u) ^ crc32(f.file ? f.file : "") ^
			((uint64_t)(unsigned)f.line * 0x9E3779B1u);
		d[id] = pd + 1;
	}
	free(h);
	free(d);
	return 0;
}

void mt_stacks_release(struct mt_stacks *k)
{
	mt_grow_free(k->nodes);
	for (uint32_t i = 0; i < k->codes_cap; i++)
		free(k->codes[i].linetable);
	mt_grow_free(k->codes);
	for (size_t i = 0; i < k->strs_cap; i++)
		free(k->strs[i]);
	free(k->strs);
	free(k->fmap);
	k->fmap = NULL;
	mt_grow_free(k->cut);
	k->cut = NULL;
	k->n_cut = k->cut_cap = 0;
	k->fmap_cap = k->fmap_n = k->next_free = 0;
	k->nodes = NULL;
	k->codes = NULL;
	k->strs = NULL;
	k->nodes_cap = k->codes_cap = 0;
	k->strs_cap = k->strs_n = 0;
}
