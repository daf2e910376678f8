/* SPDX-License-Identifier: MIT */
/* Native and hybrid stacks in the reader (reader/native.h). */
#include "reader/native.h"
#include "reader/symbols.h"
#include "util/grow.h"

#include <errno.h>  /* ENOMEM */
#include <stdio.h>  /* snprintf */
#include <stdlib.h> /* malloc */
#include <string.h> /* memcpy, strncmp */

#define SYM_UNOPENED (-2)
#define INLINE_MAX 16 /* frames one return address may stand for */

struct mt_nmodule {
	uint32_t gen, nsegs;
	uint64_t bias;
	char *path;
	uint8_t build_id[64];
	uint32_t id_len;
	uint64_t lo[MT_MODULE_SEGS_MAX], hi[MT_MODULE_SEGS_MAX]; /* absolute */
	int sym; /* its symbols handle, SYM_UNOPENED until first asked */
};

enum { NODE_NEW, NODE_RESOLVED };

struct mt_nnode {
	uint64_t ip;
	uint32_t parent, gen;
	uint8_t defined, state, eval;
	uint32_t fi, fn; /* its frames, n->frames[fi..fi+fn), innermost first */
};

struct mt_nhybrid {
	uint32_t id, python, native;
};

int mt_native_module(struct mt_native *n, const struct mt_rec_module *m)
{
	if (n->n_mods == n->cap_mods &&
	    mt_grow((void **)&n->mods, &n->cap_mods, n->n_mods, sizeof(*n->mods)) < 0)
		return -ENOMEM;
	struct mt_nmodule *d = &n->mods[n->n_mods];
	memset(d, 0, sizeof(*d));
	d->path = malloc(m->path.len + 1);
	if (!d->path)
		return -ENOMEM;
	memcpy(d->path, m->path.p, m->path.len);
	d->path[m->path.len] = '\0';
	d->gen = m->gen;
	d->bias = m->bias;
	d->id_len = m->build_id.len <= sizeof(d->build_id) ? m->build_id.len : 0;
	memcpy(d->build_id, m->build_id.p, d->id_len);
	for (uint32_t i = 0; i < m->nsegs; i++) {
		d->lo[i] = m->bias + m->seg_vaddr[i];
		d->hi[i] = d->lo[i] + m->seg_memsz[i];
	}
	d->nsegs = m->nsegs;
	d->sym = SYM_UNOPENED;
	n->n_mods++;
	n->gen = m->gen;
	return 0;
}

static int node_room(struct mt_native *n, uint32_t id)
{
	if (id >= n->cap_nodes &&
	    mt_grow((void **)&n->nodes, &n->cap_nodes, id, sizeof(*n->nodes)) < 0)
		return -ENOMEM;
	if (id > n->max_id)
		n->max_id = id;
	return 0;
}

int mt_native_node(struct mt_native *n, const struct mt_rec_native *r)
{
	if (node_room(n, r->id) < 0)
		return -ENOMEM;
	struct mt_nnode *d = &n->nodes[r->id];
	int fresh = !d->defined;
	*d = (struct mt_nnode){ .ip = r->ip, .parent = r->parent, .gen = n->gen, .defined = 1 };
	return fresh;
}

int mt_native_hybrid(struct mt_native *n, const struct mt_rec_hybrid *r)
{
	if (node_room(n, r->id) < 0)
		return -ENOMEM;
	if (n->n_hyb == n->cap_hyb &&
	    mt_grow((void **)&n->hyb, &n->cap_hyb, n->n_hyb, sizeof(*n->hyb)) < 0)
		return -ENOMEM;
	n->hyb[n->n_hyb++] = (struct mt_nhybrid){ r->id, r->python, r->native };
	return 1;
}

/* The module of generation @gen holding address @a, or NULL. */
static struct mt_nmodule *module_at(struct mt_native *n, uint32_t gen, uint64_t a)
{
	for (uint32_t i = 0; i < n->n_mods; i++) {
		struct mt_nmodule *m = &n->mods[i];
		if (m->gen != gen)
			continue;
		for (uint32_t s = 0; s < m->nsegs; s++)
			if (a >= m->lo[s] && a < m->hi[s])
				return m;
	}
	return NULL;
}

/* @m's symbols handle: the one of an earlier module record of the same
 * file at the same place, or a new one. */
static int module_sym(struct mt_native *n, struct mt_nmodule *m)
{
	if (m->sym != SYM_UNOPENED)
		return m->sym;
	for (struct mt_nmodule *o = n->mods; o < m; o++) {
		if (o->sym >= 0 && o->bias == m->bias && o->id_len == m->id_len &&
		    memcmp(o->build_id, m->build_id, m->id_len) == 0 && strcmp(o->path, m->path) == 0)
			return m->sym = o->sym;
	}
	m->sym = mt_symbols_add_module(n->sym, m->path, m->id_len ? m->build_id : NULL, m->id_len,
				       m->bias);
	return m->sym;
}

static int frames_room(struct mt_native *n, size_t more)
{
	if (n->n_frames + more > n->cap_frames &&
	    mt_grow((void **)&n->frames, &n->cap_frames, (uint32_t)(n->n_frames + more),
		    sizeof(*n->frames)) < 0)
		return -ENOMEM;
	return 0;
}

static const char no_module[] = "<native>";

/* Symbolize node @id: its frames, and whether it is the interpreter's
 * evaluation loop. */
static int resolve_node(struct mt_native *n, uint32_t id)
{
	struct mt_nnode *d = &n->nodes[id];
	if (d->state == NODE_RESOLVED)
		return 0;
	if (frames_room(n, INLINE_MAX) < 0)
		return -ENOMEM;
	d->state = NODE_RESOLVED;
	d->fi = (uint32_t)n->n_frames;
	/* a return address: the call is the instruction before it */
	uint64_t pc = d->ip ? d->ip - 1 : 0;
	struct mt_nmodule *m = module_at(n, d->gen, pc);
	int h = m ? module_sym(n, m) : -1;
	if (h < 0) {
		n->unresolved++;
		d->fn = 0;
		return 0;
	}
	struct mt_symframe sf[INLINE_MAX];
	size_t k = mt_symbols_resolve(n->sym, h, pc - m->bias, sf, INLINE_MAX);
	for (size_t i = 0; i < k; i++) {
		struct mt_frame *f = &n->frames[n->n_frames++];
		f->function = sf[i].function;
		f->file = sf[i].file ? sf[i].file : m->path;
		f->line = (int)sf[i].line;
		f->native = 1;
	}
	d->fn = (uint32_t)k;
	const char *phys = k ? sf[k - 1].function : "";
	d->eval = strncmp(phys, "_PyEval_EvalFrameDefault", 24) == 0;
	return 0;
}

/* A frame for a return address in no module of its map: its address. */
static int address_frame(struct mt_native *n, uint32_t id)
{
	struct mt_nnode *d = &n->nodes[id];
	if (d->fn || frames_room(n, 1) < 0)
		return d->fn ? 0 : -ENOMEM;
	if (n->n_strs == n->cap_strs &&
	    mt_grow((void **)&n->strs, &n->cap_strs, n->n_strs, sizeof(*n->strs)) < 0)
		return -ENOMEM;
	char *s = malloc(24);
	if (!s)
		return -ENOMEM;
	n->strs[n->n_strs++] = s;
	snprintf(s, 24, "0x%llx", (unsigned long long)d->ip);
	d->fi = (uint32_t)n->n_frames;
	d->fn = 1;
	n->frames[n->n_frames++] = (struct mt_frame){ s, no_module, 0, 1 };
	return 0;
}

static int alias(struct mt_stacks *k, uint32_t id, uint32_t of)
{
	static const struct mt_frame none = { "<no frames>", "", 0, 1 };
	if (of == 0)
		return mt_stacks_set_frame(k, id, 0, &none);
	if (id >= k->nodes_cap &&
	    mt_grow((void **)&k->nodes, &k->nodes_cap, id, sizeof(struct mt_stack_node)) < 0)
		return -ENOMEM;
	if (of < k->nodes_cap)
		k->nodes[id] = k->nodes[of];
	else
		k->nodes[id] = (struct mt_stack_node){ 0 };
	return 0;
}

int mt_native_resolve(struct mt_native *n, struct mt_stacks *k, int python_only)
{
	uint32_t *chain = NULL;
	size_t cap = 0;
	int err = -ENOMEM;

	if (!n->sym && !(n->sym = mt_symbols_new()))
		return -ENOMEM;
	if (k->next_free <= n->max_id)
		k->next_free = n->max_id + 1;
	/* first every frame (the pool then stays put: the trie points
	 * into it), then the stacks */
	for (int pass = 0; pass < 2; pass++) {
		for (uint32_t h = 0; h < n->n_hyb; h++) {
			const struct mt_nhybrid *y = &n->hyb[h];
			size_t depth = 0;
			for (uint32_t id = y->native; id && id < n->cap_nodes && n->nodes[id].defined &&
						      depth <= n->cap_nodes;
			     id = n->nodes[id].parent) {
				if (depth == cap) {
					size_t nc = cap ? cap * 2 : 256;
					uint32_t *v = realloc(chain, nc * sizeof(*v));
					if (!v)
						goto out;
					chain = v;
					cap = nc;
				}
				chain[depth++] = id;
			}
			if (pass == 0) {
				if (python_only)
					continue;
				for (size_t i = 0; i < depth; i++) {
					if (resolve_node(n, chain[i]) < 0)
						goto out;
					if (!n->nodes[chain[i]].fn && address_frame(n, chain[i]) < 0)
						goto out;
				}
				continue;
			}
			/* the native frames the innermost Python frame called */
			size_t shown = 0;
			if (!python_only) {
				while (shown < depth && !n->nodes[chain[shown]].eval)
					shown++;
				if (shown == depth && y->python)
					shown = 0; /* no evaluation loop found */
			}
			uint32_t parent = y->python, leaf = 0;
			for (size_t i = shown; i-- > 0;) {
				const struct mt_nnode *d = &n->nodes[chain[i]];
				for (uint32_t f = d->fn; f-- > 0;) {
					leaf = mt_stacks_add_frame(k, parent, &n->frames[d->fi + f]);
					if (!leaf)
						goto out;
					parent = leaf;
				}
			}
			if (alias(k, y->id, leaf ? leaf : y->python) < 0)
				goto out;
		}
	}
	err = 0;
out:
	free(chain);
	return err;
}

void mt_native_stats(const struct mt_native *n, struct mt_native_stats *st)
{
	struct mt_symbols_stats ss = { 0 };
	if (n->sym)
		mt_symbols_stats(n->sym, &ss);
	st->addresses = ss.addresses;
	st->unresolved = ss.unresolved + n->unresolved;
	st->modules_missing = ss.modules_missing;
}

void mt_native_release(struct mt_native *n)
{
	for (uint32_t i = 0; i < n->n_mods; i++)
		free(n->mods[i].path);
	for (uint32_t i = 0; i < n->n_strs; i++)
		free(n->strs[i]);
	free(n->strs);
	free(n->mods);
	free(n->nodes);
	free(n->hyb);
	free(n->frames);
	if (n->sym)
		mt_symbols_free(n->sym);
	memset(n, 0, sizeof(*n));
}
