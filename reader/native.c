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
	uint64_t ip;    /* a HYBRID id's: its Python stack */
	uint32_t parent, gen;
	int32_t mod; /* its module's symbols handle, -1 for none */
	uint8_t defined, state, eval;
	uint8_t hybrid; /* a HYBRID id: parent is its native leaf */
	uint32_t fi, fn; /* its frames, n->frames[fi..fi+fn), innermost first */
	uint32_t evals;  /* 1 + evaluation loops from it to its root; 0: not counted */
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
	struct mt_nnode *d = &n->nodes[r->id];
	int fresh = !d->defined;
	*d = (struct mt_nnode){ .ip = r->python, .parent = r->native, .defined = 1, .hybrid = 1 };
	return fresh;
}

static int module_has(const struct mt_nmodule *m, uint64_t a)
{
	for (uint32_t s = 0; s < m->nsegs; s++)
		if (a >= m->lo[s] && a < m->hi[s])
			return 1;
	return 0;
}

/* The module holding address @a in the map of generation @gen: of the
 * modules of that generation and those before it, the newest (a later
 * module loaded where an unloaded one was takes its place). Failing
 * that, the first of a later generation: a library's constructors run
 * inside dlopen(), before the map that holds it is written. NULL if
 * none holds @a. */
static struct mt_nmodule *module_at(struct mt_native *n, uint32_t gen, uint64_t a)
{
	for (uint32_t i = n->n_mods; i-- > 0;)
		if (n->mods[i].gen <= gen && module_has(&n->mods[i], a))
			return &n->mods[i];
	for (uint32_t i = 0; i < n->n_mods; i++)
		if (n->mods[i].gen > gen && module_has(&n->mods[i], a))
			return &n->mods[i];
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
	d->mod = h;
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
	if (d->eval && n->interp < 0)
		n->interp = h; /* the interpreter's module */
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

/* Working lists of one hybrid stack, innermost first. */
struct work {
	uint32_t *chain; /* native nodes */
	size_t depth, cap;
	uint32_t *py;    /* Python nodes */
	size_t npy, cap_py;
	const struct mt_frame **out; /* the merged frames */
	size_t nout, cap_out;
};

static void work_free(struct work *w)
{
	free(w->chain);
	free(w->py);
	free(w->out);
}

static int push_id(uint32_t **v, size_t *n, size_t *cap, uint32_t id)
{
	if (*n == *cap) {
		size_t nc = *cap ? *cap * 2 : 256;
		uint32_t *nv = realloc(*v, nc * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		*v = nv;
		*cap = nc;
	}
	(*v)[(*n)++] = id;
	return 0;
}

static int push_frame(struct work *w, const struct mt_frame *f)
{
	if (w->nout == w->cap_out) {
		size_t nc = w->cap_out ? w->cap_out * 2 : 256;
		const struct mt_frame **nv = realloc(w->out, nc * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		w->out = nv;
		w->cap_out = nc;
	}
	w->out[w->nout++] = f;
	return 0;
}

/* The native chain of @y, and its Python stack, into @w. */
static int lists_of(const struct mt_native *n, const struct mt_stacks *k,
		    const struct mt_nhybrid *y, struct work *w)
{
	w->depth = w->npy = 0;
	for (uint32_t id = y->native; id && id < n->cap_nodes && n->nodes[id].defined &&
				      w->depth <= n->cap_nodes;
	     id = n->nodes[id].parent)
		if (push_id(&w->chain, &w->depth, &w->cap, id) < 0)
			return -ENOMEM;
	for (uint32_t id = y->python; id && id < k->nodes_cap && k->nodes[id].defined &&
				      k->nodes[id].code != MT_CODE_FRAME && w->npy <= k->nodes_cap;
	     id = k->nodes[id].parent)
		if (push_id(&w->py, &w->npy, &w->cap_py, id) < 0)
			return -ENOMEM;
	return 0;
}

/* Python node @id's frame, kept in the pool (once per node). */
static int python_frame(struct mt_native *n, const struct mt_stacks *k, uint32_t id)
{
	if (id >= n->cap_pyf &&
	    mt_grow((void **)&n->pyf, &n->cap_pyf, id, sizeof(*n->pyf)) < 0)
		return -ENOMEM;
	if (n->pyf[id])
		return 0;
	if (frames_room(n, 1) < 0)
		return -ENOMEM;
	mt_stacks_frame(k, id, &n->frames[n->n_frames]);
	n->pyf[id] = ++n->n_frames; /* index + 1 */
	return 0;
}

/* Native node @id's frames onto @w, innermost first; none for the
 * interpreter's own frames when @hide_interp. */
static int push_native(struct mt_native *n, struct work *w, uint32_t id, int hide_interp)
{
	const struct mt_nnode *d = &n->nodes[id];
	if (hide_interp && d->mod >= 0 && d->mod == n->interp)
		return 0;
	for (uint32_t f = 0; f < d->fn; f++)
		if (push_frame(w, &n->frames[d->fi + f]) < 0)
			return -ENOMEM;
	return 0;
}

/* The merged frames of @w, innermost first: the native frames down to
 * the innermost evaluation loop, its run of Python frames, the native
 * frames between it and the next loop (the interpreter's own hidden),
 * the next run, and so on; nothing past the outermost loop. */
static int interleave(struct mt_native *n, const struct mt_stacks *k, struct work *w)
{
	size_t i = 0, p = 0;
	w->nout = 0;
	for (int run = 0; p < w->npy; run++) {
		for (; i < w->depth && !n->nodes[w->chain[i]].eval; i++)
			if (push_native(n, w, w->chain[i], run > 0) < 0)
				return -ENOMEM;
		i++; /* the loop itself */
		for (; p < w->npy; p++) {
			uint32_t id = w->py[p];
			if (push_frame(w, &n->frames[n->pyf[id] - 1]) < 0)
				return -ENOMEM;
			if (mt_stacks_entry(k, &k->nodes[id])) {
				p++;
				break;
			}
		}
	}
	return 0;
}

/* Node @id and those on its way to its root symbolized (each once), and
 * the evaluation loops among them counted; 0, or -ENOMEM. A chain that
 * loops (a damaged capture) ends where it would. */
static int count_evals(struct mt_native *n, uint32_t id, struct work *w)
{
	size_t from = w->depth; /* the walk's nodes, in w->chain after @from */
	uint32_t below = 0;
	for (uint32_t x = id; x && x < n->cap_nodes && n->nodes[x].defined && !n->nodes[x].hybrid;
	     x = n->nodes[x].parent) {
		if (n->nodes[x].evals) {
			below = n->nodes[x].evals - 1;
			break;
		}
		if (w->depth - from > n->cap_nodes)
			break;
		if (push_id(&w->chain, &w->depth, &w->cap, x) < 0)
			return -ENOMEM;
	}
	for (size_t i = w->depth; i-- > from;) {
		uint32_t x = w->chain[i];
		if (resolve_node(n, x) < 0 || (!n->nodes[x].fn && address_frame(n, x) < 0))
			return -ENOMEM;
		below += n->nodes[x].eval;
		n->nodes[x].evals = below + 1;
	}
	w->depth = from;
	return 0;
}

/* Whether Python frame @x ends a run of Python frames (outwards): the
 * outermost frame of its stack does, as does every entry frame. */
static int ends_run(const struct mt_stacks *k, uint32_t x)
{
	uint32_t parent = k->nodes[x].parent;
	return !parent || parent >= k->nodes_cap || !k->nodes[parent].defined ||
	       k->nodes[parent].code == MT_CODE_FRAME || mt_stacks_entry(k, &k->nodes[x]);
}

/* Runs of Python frames in Python stack @id, each ending (outwards) with
 * an entry frame or the outermost frame, into @runs, by Python id (1 +
 * the count; 0: not counted). A hybrid stack pairs up when its native
 * chain has as many evaluation loops as that, and more than one (one
 * needs no pairing). */
static int python_runs(const struct mt_stacks *k, uint32_t **runs, uint32_t *cap, uint32_t id,
		       struct work *w)
{
	size_t from = w->npy;
	uint32_t below = 0;
	for (uint32_t x = id; x && x < k->nodes_cap && k->nodes[x].defined &&
			      k->nodes[x].code != MT_CODE_FRAME; x = k->nodes[x].parent) {
		if (x < *cap && (*runs)[x]) {
			below = (*runs)[x] - 1;
			break;
		}
		if (w->npy - from > k->nodes_cap)
			break;
		if (push_id(&w->py, &w->npy, &w->cap_py, x) < 0)
			return -ENOMEM;
	}
	for (size_t i = w->npy; i-- > from;) {
		uint32_t x = w->py[i];
		if (x >= *cap && mt_grow((void **)runs, cap, x, sizeof(**runs)) < 0)
			return -ENOMEM;
		below += ends_run(k, x);
		(*runs)[x] = below + 1;
	}
	w->npy = from;
	return 0;
}

/* (Python stack, native node) -> the trie node of that Python stack
 * with the native frames from the node's innermost evaluation loop
 * (exclusive) to the node: what hybrid stacks that share a caller share.
 * Kept only for the nodes that two walks may reach (shared[], see
 * shared_nodes()) and for evaluation loops: a node with one way in is
 * reached again only through the node below it. A miss costs a longer
 * walk, never a different node, as the trie adds each frame once. */
struct memo_slot {
	uint32_t py, nat, val; /* nat 0: empty */
};

struct memo {
	struct memo_slot *s;
	size_t mask, used;
	uint8_t *shared; /* by native node: 1 if memoized */
};

static size_t memo_hash(const struct memo *m, uint32_t py, uint32_t nat)
{
	uint64_t v = ((uint64_t)py << 32 | nat) * 0x9e3779b97f4a7c15ull;
	return (size_t)(v ^ v >> 29) & m->mask;
}

static uint32_t memo_get(const struct memo *m, uint32_t py, uint32_t nat)
{
	if (!m->s)
		return 0;
	for (size_t j = memo_hash(m, py, nat);; j = (j + 1) & m->mask) {
		const struct memo_slot *e = &m->s[j];
		if (e->nat == nat && e->py == py)
			return e->val;
		if (!e->nat)
			return 0;
	}
}

/* A table of @cap slots, zeroed by writing (not calloc: a page read
 * before it is written faults twice). */
static struct memo_slot *memo_table(size_t cap)
{
	struct memo_slot *s = malloc(cap * sizeof(*s));
	if (s) {
		mt_grow_huge(s, cap * sizeof(*s));
		memset(s, 0, cap * sizeof(*s));
	}
	return s;
}

static int memo_put(struct memo *m, uint32_t py, uint32_t nat, uint32_t val)
{
	if ((m->used + 1) * 2 > m->mask) {
		size_t cap = m->s ? (m->mask + 1) * 4 : 4096;
		struct memo g = { memo_table(cap), cap - 1, m->used, m->shared };
		if (!g.s)
			return -ENOMEM;
		for (size_t i = 0; m->s && i <= m->mask; i++) {
			const struct memo_slot *e = &m->s[i];
			if (!e->nat)
				continue;
			size_t j = memo_hash(&g, e->py, e->nat);
			while (g.s[j].nat)
				j = (j + 1) & g.mask;
			g.s[j] = *e;
		}
		free(m->s);
		*m = g;
	}
	size_t j = memo_hash(m, py, nat);
	while (m->s[j].nat && !(m->s[j].nat == nat && m->s[j].py == py))
		j = (j + 1) & m->mask;
	m->used += !m->s[j].nat;
	m->s[j] = (struct memo_slot){ py, nat, val };
	return 0;
}

/* The native nodes that more than one walk from a hybrid stack's leaf
 * may reach: those with two or more ways in (children, hybrid stacks
 * whose leaf they are). Returns 0 or -ENOMEM. */
static int shared_nodes(const struct mt_native *n, struct memo *m)
{
	m->shared = calloc(n->cap_nodes ? n->cap_nodes : 1, 1);
	if (!m->shared)
		return -ENOMEM;
	for (uint32_t i = 1; i < n->cap_nodes; i++) {
		const struct mt_nnode *d = &n->nodes[i];
		uint32_t p = d->parent;
		if (d->defined && p && p < n->cap_nodes && m->shared[p] < 2)
			m->shared[p]++;
	}
	for (uint32_t i = 0; i < n->cap_nodes; i++)
		m->shared[i] = m->shared[i] > 1;
	return 0;
}

/* How a hybrid stack pairs (paired[] of mt_native_resolve()): not (its
 * Python stack alone over the C frames below its innermost Python frame),
 * each loop with a run of Python frames, or so from the second loop out,
 * the innermost being that of a frame not started (below). */
enum { UNPAIRED, PAIRED, PAIRED_UNSTARTED };

/* Whether a chain of @evals evaluation loops, under a Python stack of @runs
 * runs, pairs from its second loop out: its innermost loop runs a frame that
 * has not started, which no stack shows (CPython's own walks skip it) and
 * which can call nothing: a generator's function called from C, whose loop
 * makes the generator (RETURN_GENERATOR) or a cell before the function's
 * first line, from 3.11. Not in a Tracker's capture: its stacks are cut at
 * the frame that entered it (mt_stacks_cut()), and the loops of the frames
 * above are left over on the outside. */
static int unstarted_inside(const struct mt_native *n, uint32_t evals, uint32_t runs)
{
	return !n->tracker && runs >= 1 && evals == runs + 1;
}

/* The trie node of hybrid @y: the native frames its innermost Python
 * frame called, under the rest, which is its Python stack if the stacks
 * do not pair up (@paired), and the interleaving of both, from the
 * innermost evaluation loop out (the second, with PAIRED_UNSTARTED), if
 * they do. A chain with no evaluation loop is shown whole if there is no
 * Python stack, and not at all if there is. Each (Python stack, native
 * node) is added to the trie once: whether it pairs up depends on nothing
 * else. 0 means @y's Python stack. */
static int64_t hybrid_leaf(struct mt_native *n, struct mt_stacks *k, struct memo *m,
			   const struct mt_nhybrid *y, int paired, struct work *w,
			   struct work *outer)
{
	uint32_t py = y->python, base = 0, x = y->native;
	int found = 0, unstarted = paired == PAIRED_UNSTARTED;
	w->depth = 0;
	for (; x && x < n->cap_nodes && n->nodes[x].defined && !n->nodes[x].hybrid;
	     x = n->nodes[x].parent) {
		uint32_t v = m->shared[x] || n->nodes[x].eval ? memo_get(m, py, x) : 0;
		if (v) {
			base = v;
			found = 1;
			break;
		}
		if (n->nodes[x].eval && unstarted) {
			unstarted = 0; /* its C frames below the innermost Python frame */
		} else if (n->nodes[x].eval) {
			found = 1;
			if (!paired) {
				base = py;
				break;
			}
			/* Python called from C called from Python: the
			 * interleaving from this loop out, once */
			struct mt_nhybrid from_loop = { 0, py, x };
			if (lists_of(n, k, &from_loop, outer) < 0 || interleave(n, k, outer) < 0)
				return -ENOMEM;
			for (size_t i = outer->nout; i-- > 0;) {
				base = mt_stacks_add_frame(k, base, outer->out[i]);
				if (!base)
					return -ENOMEM;
			}
			if (memo_put(m, py, x, base) < 0)
				return -ENOMEM;
			break;
		}
		if (w->depth > n->cap_nodes)
			break;
		if (push_id(&w->chain, &w->depth, &w->cap, x) < 0)
			return -ENOMEM;
	}
	if (!found) {
		if (py)
			return 0; /* no evaluation loop found */
		base = 0;
	}
	for (size_t i = w->depth; i-- > 0;) {
		const struct mt_nnode *d = &n->nodes[w->chain[i]];
		for (uint32_t f = d->fn; f-- > 0;) {
			base = mt_stacks_add_frame(k, base, &n->frames[d->fi + f]);
			if (!base)
				return -ENOMEM;
		}
		if (m->shared[w->chain[i]] && memo_put(m, py, w->chain[i], base) < 0)
			return -ENOMEM;
	}
	return base;
}

int mt_native_resolve(struct mt_native *n, struct mt_stacks *k, int python_only)
{
	struct work w = { 0 }, outer = { 0 }; /* a hybrid stack's, the part from its loop out */
	struct memo m = { 0 };
	uint32_t *runs = NULL, cap_runs = 0;
	uint8_t *paired = NULL;
	int err = -ENOMEM;

	if (!n->sym) {
		if (!(n->sym = mt_symbols_new()))
			return -ENOMEM;
		n->interp = -1;
	}
	mt_native_unresolve(n, k);
	n->unpaired = 0;
	if (k->next_free <= n->max_id)
		k->next_free = n->max_id + 1;
	n->frames_from = k->next_free;
	n->n_aliased = n->n_hyb;
	n->in_trie = 1;
	if (python_only) {
		for (uint32_t h = 0; h < n->n_hyb; h++)
			if (mt_stacks_alias(k, n->hyb[h].id, n->hyb[h].python) < 0)
				return -ENOMEM;
		return 0;
	}
	if (!(paired = calloc(n->n_hyb ? n->n_hyb : 1, 1)) || shared_nodes(n, &m) < 0)
		goto out;
	/* the Python frames kept from a resolution before: as the stacks
	 * read since define them */
	for (uint32_t x = 1; x < n->cap_pyf; x++)
		if (n->pyf[x])
			mt_stacks_frame(k, x, &n->frames[n->pyf[x] - 1]);
	/* first every frame (the pool then stays put: the trie points into
	 * it), then the stacks; a hybrid stack pairs up when its chain has
	 * as many evaluation loops as its Python stack has runs */
	for (uint32_t h = 0; h < n->n_hyb; h++) {
		const struct mt_nhybrid *y = &n->hyb[h];
		if (count_evals(n, y->native, &w) < 0 || python_runs(k, &runs, &cap_runs, y->python, &w) < 0)
			goto out;
		uint32_t nat = y->native, evals = 0, r = 0;
		if (nat && nat < n->cap_nodes && n->nodes[nat].evals)
			evals = n->nodes[nat].evals - 1;
		if (y->python && y->python < cap_runs && runs[y->python])
			r = runs[y->python] - 1;
		if (r > 1 && evals == r) {
			paired[h] = PAIRED;
		} else if (unstarted_inside(n, evals, r)) {
			paired[h] = PAIRED_UNSTARTED;
		} else {
			n->unpaired += r > 1;
			continue;
		}
		/* its Python frames into the pool, up to one that is there
		 * (with all below it) */
		for (uint32_t x = y->python, i = 0; x && x < k->nodes_cap && k->nodes[x].defined &&
						    k->nodes[x].code != MT_CODE_FRAME && i <= k->nodes_cap;
		     x = k->nodes[x].parent, i++) {
			if (x < n->cap_pyf && n->pyf[x])
				break;
			if (python_frame(n, k, x) < 0)
				goto out;
		}
	}
	for (uint32_t h = 0; h < n->n_hyb; h++) {
		const struct mt_nhybrid *y = &n->hyb[h];
		int64_t leaf = hybrid_leaf(n, k, &m, y, paired[h], &w, &outer);
		if (leaf < 0)
			goto out;
		if (mt_stacks_alias(k, y->id, leaf ? (uint32_t)leaf : y->python) < 0)
			goto out;
	}
	err = 0;
out:
	work_free(&w);
	work_free(&outer);
	free(m.s);
	free(m.shared);
	mt_grow_free(runs);
	free(paired);
	return err;
}

void mt_native_unresolve(struct mt_native *n, struct mt_stacks *k)
{
	if (!n->in_trie)
		return;
	for (uint32_t h = 0; h < n->n_aliased; h++)
		mt_stacks_undefine(k, n->hyb[h].id);
	mt_stacks_drop_frames(k, n->frames_from);
	n->in_trie = 0;
}

size_t mt_native_chain(const struct mt_native *n, uint32_t id, struct mt_frame *out, size_t max,
		       uint32_t *leaf, uint32_t *gen)
{
	size_t k = 0, depth = 0;
	*leaf = *gen = 0;
	if (id >= n->cap_nodes || !n->nodes[id].hybrid)
		return 0;
	id = n->nodes[id].parent;
	if (id < n->cap_nodes && n->nodes[id].defined) {
		*leaf = id;
		*gen = n->nodes[id].gen;
	}
	for (; id && id < n->cap_nodes && n->nodes[id].defined && !n->nodes[id].hybrid &&
	       depth++ <= n->cap_nodes;
	     id = n->nodes[id].parent) {
		const struct mt_nnode *d = &n->nodes[id];
		for (uint32_t f = 0; f < d->fn; f++, k++)
			if (k < max)
				out[k] = n->frames[d->fi + f];
	}
	return k;
}

int mt_native_hybrid_parts(const struct mt_native *n, uint32_t id, uint32_t *python,
			   uint32_t *leaf)
{
	if (id >= n->cap_nodes || !n->nodes[id].hybrid)
		return 0;
	*python = (uint32_t)n->nodes[id].ip;
	*leaf = n->nodes[id].parent;
	return 1;
}

/* The runs of Python frames of stack @py, as python_runs() counts them. */
static uint32_t runs_of(const struct mt_stacks *k, uint32_t py)
{
	uint32_t runs = 0, d = 0;
	for (uint32_t x = py; x && x < k->nodes_cap && k->nodes[x].defined &&
			      k->nodes[x].code != MT_CODE_FRAME && d <= k->nodes_cap;
	     x = k->nodes[x].parent, d++)
		runs += ends_run(k, x);
	return runs;
}

/* The frames of Python stack @py alone, innermost first, from out[k]. */
static size_t python_alone(const struct mt_stacks *k, uint32_t py, struct mt_frame *out, size_t max)
{
	size_t d = 0;
	for (uint32_t x = py; x && x < k->nodes_cap && k->nodes[x].defined && d <= k->nodes_cap;
	     x = k->nodes[x].parent, d++)
		if (d < max)
			mt_stacks_frame(k, x, &out[d]);
	return d;
}

size_t mt_native_merged(const struct mt_native *n, const struct mt_stacks *k, uint32_t id,
			struct mt_frame *out, size_t max)
{
	if (id >= n->cap_nodes || !n->nodes[id].hybrid)
		return 0;
	uint32_t py = (uint32_t)n->nodes[id].ip, p = py, leaf = n->nodes[id].parent;
	size_t d = 0, depth = 0;
	/* evals: known once mt_native_resolve() counted them */
	int unstarted = leaf < n->cap_nodes && n->nodes[leaf].evals &&
			unstarted_inside(n, n->nodes[leaf].evals - 1, runs_of(k, py));
#define PUT(f) do { if (d < max) out[d] = (f); d++; } while (0)
	for (uint32_t x = leaf; x && x < n->cap_nodes && n->nodes[x].defined &&
			       !n->nodes[x].hybrid && depth++ <= n->cap_nodes;
	     x = n->nodes[x].parent) {
		const struct mt_nnode *v = &n->nodes[x];
		/* C frames, or the loop of a frame not started: all its frames */
		if (!v->eval || !v->fn || !py || unstarted) {
			unstarted = unstarted && !v->eval;
			for (uint32_t f = 0; f < v->fn; f++)
				PUT(n->frames[v->fi + f]);
			continue;
		}
		if (!p)
			break; /* a loop of the frames cut above a Tracker: what is left is theirs */
		for (uint32_t f = 0; f + 1 < v->fn; f++)
			PUT(n->frames[v->fi + f]); /* inlined into the loop, inside its frames */
		/* the loop's run: outwards up to an entry frame or the outermost */
		for (size_t guard = 0; p && p < k->nodes_cap && k->nodes[p].defined &&
				       guard <= k->nodes_cap; guard++) {
			struct mt_frame f;
			mt_stacks_frame(k, p, &f);
			PUT(f);
			int entry = mt_stacks_entry(k, &k->nodes[p]);
			p = k->nodes[p].parent;
			if (entry)
				break;
		}
	}
#undef PUT
	if (p && p < k->nodes_cap && k->nodes[p].defined)
		return python_alone(k, py, out, max); /* loops not found: no pairing */
	return d;
}

void mt_native_stats(const struct mt_native *n, struct mt_native_stats *st)
{
	struct mt_symbols_stats ss = { 0 };
	if (n->sym)
		mt_symbols_stats(n->sym, &ss);
	st->addresses = ss.addresses;
	st->unresolved = ss.unresolved + n->unresolved;
	st->modules_missing = ss.modules_missing;
	st->unpaired = n->unpaired;
}

void mt_native_release(struct mt_native *n)
{
	for (uint32_t i = 0; i < n->n_mods; i++)
		free(n->mods[i].path);
	for (uint32_t i = 0; i < n->n_strs; i++)
		free(n->strs[i]);
	mt_grow_free(n->strs);
	mt_grow_free(n->mods);
	mt_grow_free(n->nodes);
	mt_grow_free(n->hyb);
	mt_grow_free(n->frames);
	mt_grow_free(n->pyf);
	if (n->sym)
		mt_symbols_free(n->sym);
	memset(n, 0, sizeof(*n));
}
