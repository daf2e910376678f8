/* SPDX-License-Identifier: MIT */
/*
 * The capture's code object and stack node tables (intern.h): open
 * addressing with linear probing, in mmap'ed tables that double.
 */
#include "payload/intern.h"
#include "format/linetable.h" /* struct mt_linecursor */
#include "format/record.h"
#include "payload/python.h"
#include "payload/tbuf.h"

#include "util/spin.h"

#include <string.h>   /* memcmp, memset */
#include <sys/mman.h> /* mmap */

/* A CODE record is encoded in CODE_SCRATCH bytes after its fields: its
 * strings and line table, which leave room for its framing (a head, a
 * length and six varints) so that it can be pushed whole. */
#define CODE_SCRATCH MT_TBUF_PUSH_MAX
#define CODE_FIELDS_MAX (CODE_SCRATCH - 64)

struct code_entry {
	const void *code;
	struct mt_pycode_key key;
	uint32_t id;
	struct mt_linecursor cursor; /* where its new frames' lines were met last */
};

struct node_entry {
	uint32_t parent, code, offset, id;
};

static struct {
	atomic_flag lock;
	struct code_entry *codes;
	size_t codes_cap, codes_used;
	uint32_t next_code;
	struct node_entry *nodes;
	size_t nodes_cap, nodes_used;
	uint32_t next_node;
	uint8_t *scratch; /* CODE record strings, then the encoded record */
	int lines;        /* STACK records carry lines (MT_HDR_LINES) */
} g = { .lock = ATOMIC_FLAG_INIT };

void mt_intern_lock(void)
{
	mt_spin_lock(&g.lock);
}

void mt_intern_unlock(void)
{
	mt_spin_unlock(&g.lock);
}

void mt_intern_after_fork(void)
{
	mt_intern_unlock();
}

static void *map(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

static size_t hash_ptr(const void *p)
{
	uint64_t v = (uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ull;
	return (size_t)(v >> 17);
}

static int grow_codes(void)
{
	size_t ncap = g.codes_cap ? g.codes_cap * 2 : 4096;
	struct code_entry *nt = map(ncap * sizeof(*nt));
	if (!nt)
		return -1;
	for (size_t i = 0; i < g.codes_cap; i++) {
		if (!g.codes[i].code)
			continue;
		size_t j = hash_ptr(g.codes[i].code) & (ncap - 1);
		while (nt[j].code)
			j = (j + 1) & (ncap - 1);
		nt[j] = g.codes[i];
	}
	/* the new table first, the old one unmapped after: a fork child
	 * (which clears the tables) never sees a table that is gone */
	struct code_entry *old = g.codes;
	size_t old_cap = g.codes_cap;
	g.codes = nt;
	g.codes_cap = ncap;
	if (old)
		munmap(old, old_cap * sizeof(*old));
	return 0;
}

static void push(struct mt_tbuf *buf, const uint8_t *rec, ssize_t n, int *lost)
{
	if (n > 0 && mt_tbuf_push(buf, rec, (size_t)n) < 0)
		*lost = 1;
}

static uint32_t new_code(const void *code, struct code_entry *e, struct mt_tbuf *buf, int *lost)
{
	struct mt_record r = { .type = MT_REC_CODE };
	e->id = ++g.next_code;
	e->cursor = (struct mt_linecursor){ 0 };
	if (!g.scratch && !(g.scratch = map(2 * CODE_SCRATCH)))
		return e->id;
	if (mt_python_code_describe(code, &r.code, g.scratch, CODE_FIELDS_MAX, !g.lines) < 0)
		memset(&r.code, 0, sizeof(r.code));
	r.code.id = e->id;
	push(buf, g.scratch + CODE_SCRATCH,
	     mt_rec_encode(g.scratch + CODE_SCRATCH, CODE_SCRATCH, &r, NULL), lost);
	return e->id;
}

uint32_t mt_intern_code(const void *code, struct mt_tbuf *buf, int *lost)
{
	struct mt_pycode_key key;
	size_t j;

	memset(&key, 0, sizeof(key)); /* compared with memcmp, padding too */
	if ((g.codes_used + 1) * 2 > g.codes_cap && grow_codes() < 0)
		return 0;
	mt_python_code_key(code, &key);
	for (j = hash_ptr(code) & (g.codes_cap - 1); g.codes[j].code;
	     j = (j + 1) & (g.codes_cap - 1)) {
		if (g.codes[j].code != code)
			continue;
		if (g.codes[j].id && memcmp(&g.codes[j].key, &key, sizeof(key)) == 0)
			return g.codes[j].id;
		/* The old code object died (id 0: mt_intern_code_gone() saw
		 * it) and a new one took its address. */
		g.codes[j].key = key;
		return new_code(code, &g.codes[j], buf, lost);
	}
	g.codes[j].code = code;
	g.codes[j].key = key;
	g.codes_used++;
	return new_code(code, &g.codes[j], buf, lost);
}

/* The entry of live code object @code, NULL if it has none. */
static struct code_entry *code_entry_of(const void *code)
{
	if (!g.codes || !code)
		return NULL;
	for (size_t j = hash_ptr(code) & (g.codes_cap - 1); g.codes[j].code;
	     j = (j + 1) & (g.codes_cap - 1))
		if (g.codes[j].code == code)
			return g.codes[j].id ? &g.codes[j] : NULL;
	return NULL;
}

int mt_intern_code_gone(const void *code)
{
	if (!g.codes)
		return 0;
	for (size_t j = hash_ptr(code) & (g.codes_cap - 1); g.codes[j].code;
	     j = (j + 1) & (g.codes_cap - 1)) {
		struct code_entry *e = &g.codes[j];
		if (e->code != code)
			continue;
		if (!e->id)
			return 0;
		/* the entry stays, as a step of its probe chain */
		e->id = 0;
		return 1;
	}
	return 0;
}

static size_t hash_node(uint32_t parent, uint32_t code, uint32_t offset)
{
	/* every input must reach the bits kept: a recursion has thousands of
	 * nodes that differ only in their parent */
	uint64_t v = (uint64_t)parent * 0x9e3779b97f4a7c15ull;
	v ^= ((uint64_t)code << 32 | offset) * 0xc2b2ae3d27d4eb4full;
	v ^= v >> 31;
	v *= 0x94d049bb133111ebull;
	return (size_t)(v ^ (v >> 29));
}

/* The node table anew with @ncap entries, without its native and hybrid
 * nodes if @no_native. */
static int rehash_nodes(size_t ncap, int no_native)
{
	struct node_entry *nt = map(ncap * sizeof(*nt));
	if (!nt)
		return -1;
	size_t used = 0;
	for (size_t i = 0; i < g.nodes_cap; i++) {
		struct node_entry *e = &g.nodes[i];
		if (!e->id || (no_native && (e->code & MT_NATIVE_CODE)))
			continue;
		size_t j = hash_node(e->parent, e->code, e->offset) & (ncap - 1);
		while (nt[j].id)
			j = (j + 1) & (ncap - 1);
		nt[j] = *e;
		used++;
	}
	struct node_entry *old = g.nodes; /* as in grow_codes() */
	size_t old_cap = g.nodes_cap;
	g.nodes = nt;
	g.nodes_cap = ncap;
	g.nodes_used = used;
	if (old)
		munmap(old, old_cap * sizeof(*old));
	return 0;
}

static int grow_nodes(void)
{
	return rehash_nodes(g.nodes_cap ? g.nodes_cap * 2 : 16384, 0);
}

int mt_intern_forget_native(void)
{
	return g.nodes_cap ? rehash_nodes(g.nodes_cap, 1) : 0;
}

void mt_intern_lines(int on)
{
	g.lines = on;
}

uint32_t mt_intern_node(uint32_t parent, uint32_t code, uint32_t offset, const void *pycode,
			struct mt_tbuf *buf, int *lost)
{
	size_t j;
	if ((g.nodes_used + 1) * 2 > g.nodes_cap && grow_nodes() < 0)
		return parent;
	for (j = hash_node(parent, code, offset) & (g.nodes_cap - 1); g.nodes[j].id;
	     j = (j + 1) & (g.nodes_cap - 1)) {
		struct node_entry *e = &g.nodes[j];
		if (e->parent == parent && e->code == code && e->offset == offset)
			return e->id;
	}
	struct node_entry *e = &g.nodes[j];
	*e = (struct node_entry){ parent, code, offset, ++g.next_node };
	g.nodes_used++;

	uint8_t rec[64];
	struct mt_record r = { .type = MT_REC_STACK };
	if (code == MT_HYBRID_CODE) {
		r.type = MT_REC_HYBRID;
		r.hybrid = (struct mt_rec_hybrid){ e->id, parent, offset };
	} else if (code & MT_NATIVE_CODE) {
		r.type = MT_REC_NATIVE;
		r.native = (struct mt_rec_native){ e->id, parent,
						   (uint64_t)(code & ~MT_NATIVE_CODE) << 32 | offset };
	} else {
		uint32_t where = offset;
		if (g.lines) {
			/* each code object's own cursor: a module's body, met
			 * top to bottom, is read once whatever it calls */
			struct code_entry *c = code_entry_of(pycode);
			struct mt_linecursor fresh = { 0 };
			int line = mt_python_code_line(pycode, offset, c ? &c->cursor : &fresh);
			where = (uint32_t)line << 1 | mt_python_code_entry(offset);
		}
		r.stack = (struct mt_rec_stack){ e->id, parent, code, where };
	}
	push(buf, rec, mt_rec_encode(rec, sizeof(rec), &r, NULL), lost);
	return e->id;
}

void mt_intern_forget(void)
{
	if (g.codes)
		memset(g.codes, 0, g.codes_cap * sizeof(*g.codes));
	if (g.nodes)
		memset(g.nodes, 0, g.nodes_cap * sizeof(*g.nodes));
	g.codes_used = g.nodes_used = 0;
}

void mt_intern_reset(void)
{
	mt_intern_forget();
	g.next_code = g.next_node = 0;
}
