/* SPDX-License-Identifier: MIT */
/*
 * The reader's interface for the Python package (ctypes): a snapshot for
 * metadata and stacks, plus replays of the record stream for what the
 * snapshot does not keep per event: every event, the allocations live at
 * the peak or at the end grouped by stack and thread, and temporary
 * allocations. Replays follow snapshot.c's rules (frees of unknown
 * pointers ignored, a mapping counts once while any piece of it is
 * live) so that their totals are the snapshot's. Never prints or exits.
 */
#include "reader/pyapi.h"
#include "format/error.h"
#include "reader/capture.h"
#include "reader/report.h"
#include "reader/snapshot.h"

#include <errno.h>  /* ENOMEM */
#include <stdio.h>  /* fopencookie, snprintf */
#include <stdlib.h> /* malloc */
#include <string.h> /* memset */

_Static_assert(sizeof(struct mt_py_sample) == sizeof(struct mt_sample),
	       "mt_py_sample mirrors mt_sample");

struct mt_py_reader {
	struct mt_capture *cap;
	struct mt_snapshot snap;
	char *warnings;
	size_t warnings_len;
	uint64_t *tid;      /* by thread index */
	const char **name;  /* by thread index */
	uint32_t n_index;
};

int mt_py_abi(void)
{
	return MT_PY_ABI;
}

static void collect_warning(void *ctx, const char *msg)
{
	struct mt_py_reader *r = ctx;
	size_t len = strlen(msg);
	char *nv = realloc(r->warnings, r->warnings_len + len + 2);

	if (!nv)
		return; /* a warning lost to a failed allocation is not worth failing for */
	memcpy(nv + r->warnings_len, msg, len);
	r->warnings_len += len;
	nv[r->warnings_len++] = '\n';
	nv[r->warnings_len] = '\0';
	r->warnings = nv;
}

int mt_py_open(const char *path, struct mt_py_reader **out, char *err, size_t errlen)
{
	struct mt_py_reader *r = calloc(1, sizeof(*r));
	int e;

	if (!r) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	e = mt_capture_open(path, &r->cap);
	if (e < 0) {
		mt_report_describe_open_error(err, errlen, path, e);
		free(r);
		return e;
	}
	mt_capture_set_warn(r->cap, collect_warning, r);
	e = mt_snapshot_build(&r->snap, r->cap);
	if (e < 0) {
		snprintf(err, errlen, "cannot read '%s': %s", path, mt_strerror(e));
		mt_capture_close(r->cap);
		free(r->warnings);
		free(r);
		return e;
	}
	/* damage is reported once, by the snapshot's pass */
	mt_capture_set_warn(r->cap, NULL, NULL);
	for (size_t i = 0; i < r->snap.n_threads; i++)
		if (r->snap.threads[i].index + 1 > r->n_index)
			r->n_index = r->snap.threads[i].index + 1;
	r->tid = calloc(r->n_index ? r->n_index : 1, sizeof(*r->tid));
	r->name = calloc(r->n_index ? r->n_index : 1, sizeof(*r->name));
	if (!r->tid || !r->name) {
		snprintf(err, errlen, "out of memory");
		mt_py_close(r);
		return -ENOMEM;
	}
	for (size_t i = 0; i < r->snap.n_threads; i++) {
		const struct mt_thread_info *t = &r->snap.threads[i];
		r->tid[t->index] = t->tid;
		r->name[t->index] = t->name;
	}
	*out = r;
	return 0;
}

void mt_py_close(struct mt_py_reader *r)
{
	if (!r)
		return;
	mt_snapshot_release(&r->snap);
	mt_capture_close(r->cap);
	free(r->warnings);
	free(r->tid);
	free(r->name);
	free(r);
}

void mt_py_meta(const struct mt_py_reader *r, struct mt_py_meta *m)
{
	const struct mt_snapshot *s = &r->snap;

	memset(m, 0, sizeof(*m));
	m->abi = MT_PY_ABI;
	m->pid = s->header.pid;
	m->python_hex = s->header.python_hex;
	m->flags = s->header.flags;
	m->start_ns = s->header.start_ns;
	m->end_time_us = s->end_time_us;
	m->interval_ms = s->header.interval_ms;
	m->main_tid = s->header.main_tid;
	m->peak_heap = s->peak_heap;
	m->peak_event = s->peak_event;
	m->n_events = s->n_events;
	m->n_allocs = s->n_allocs;
	m->n_frees = s->n_frees;
	m->heap_end = s->heap_end;
	m->leak_count = s->leak_count;
	m->n_dropped = s->n_dropped;
	m->have_trailer = (uint64_t)s->have_trailer;
	m->truncated = (uint64_t)s->status.truncated || s->status.stopped;
	m->peak_rss = s->peak_rss;
	m->n_samples = s->n_samples;
	m->n_threads = s->n_threads;
	m->n_diags = s->n_diags;
	m->cmdline_len = s->header.cmdline.len;
	m->cmdline = (const char *)s->header.cmdline.p;
}

const char *mt_py_warnings(const struct mt_py_reader *r)
{
	return r->warnings ? r->warnings : "";
}

const char *mt_py_diag(const struct mt_py_reader *r, size_t i, uint32_t *code)
{
	if (i >= r->snap.n_diags)
		return NULL;
	*code = r->snap.diags[i].code;
	return r->snap.diags[i].msg;
}

void mt_py_free(void *p)
{
	free(p);
}

size_t mt_py_stack(const struct mt_py_reader *r, uint32_t id, struct mt_py_frame *out, size_t max)
{
	struct mt_frame f[64];
	size_t depth = mt_snapshot_stack(&r->snap, id, f, 64);

	if (depth > 64 && max > 64) {
		struct mt_frame *all = malloc(depth * sizeof(*all));
		if (!all)
			max = 64; /* the innermost frames are the ones that matter */
		else {
			mt_snapshot_stack(&r->snap, id, all, depth);
			for (size_t i = 0; i < depth && i < max; i++)
				out[i] = (struct mt_py_frame){ all[i].function, all[i].file, all[i].line };
			free(all);
			return depth;
		}
	}
	for (size_t i = 0; i < depth && i < max && i < 64; i++)
		out[i] = (struct mt_py_frame){ f[i].function, f[i].file, f[i].line };
	return depth;
}

int mt_py_thread(const struct mt_py_reader *r, uint32_t index, uint64_t *tid, const char **name)
{
	if (index >= r->n_index || !r->name[index])
		return -ENOENT;
	*tid = r->tid[index];
	*name = r->name[index];
	return 0;
}

const struct mt_py_sample *mt_py_samples(const struct mt_py_reader *r, size_t *n)
{
	*n = r->snap.n_samples;
	return (const struct mt_py_sample *)r->snap.samples;
}

static uint64_t thread_tid(const struct mt_py_reader *r, uint32_t index)
{
	return index < r->n_index ? r->tid[index] : 0;
}

/* ------------------------------------------------------------------------
 * A growable record array.
 * ---------------------------------------------------------------------- */
struct recs {
	struct mt_py_record *v;
	size_t n, cap;
};

static struct mt_py_record *recs_push(struct recs *a)
{
	if (a->n == a->cap) {
		size_t n = a->cap ? a->cap * 2 : 256;
		struct mt_py_record *nv = realloc(a->v, n * sizeof(*nv));
		if (!nv)
			return NULL;
		a->v = nv;
		a->cap = n;
	}
	memset(&a->v[a->n], 0, sizeof(a->v[0]));
	return &a->v[a->n++];
}

/* ------------------------------------------------------------------------
 * Every event.
 * ---------------------------------------------------------------------- */
struct events_ctx {
	struct mt_py_reader *r;
	struct recs out;
};

static int ev_alloc(void *ctx, const struct mt_record *rec)
{
	struct events_ctx *c = ctx;
	struct mt_py_record *o = recs_push(&c->out);

	if (!o)
		return -ENOMEM;
	o->tid = thread_tid(c->r, rec->tidx);
	o->address = rec->alloc.addr;
	o->size = rec->alloc.size;
	o->n_allocations = 1;
	o->allocator = rec->alloc.kind;
	o->stack = rec->alloc.stack;
	o->thread = rec->tidx;
	return 0;
}

static int ev_free(void *ctx, const struct mt_record *rec)
{
	struct events_ctx *c = ctx;
	struct mt_py_record *o = recs_push(&c->out);

	if (!o)
		return -ENOMEM;
	o->tid = thread_tid(c->r, rec->tidx);
	o->address = rec->free.addr;
	o->size = rec->free.size;
	o->n_allocations = 1;
	o->allocator = rec->free.kind;
	o->thread = rec->tidx;
	return 0;
}

ssize_t mt_py_events(struct mt_py_reader *r, struct mt_py_record **out)
{
	struct mt_record_ops ops = { .alloc = ev_alloc, .free = ev_free };
	struct events_ctx c = { .r = r };
	int e;

	mt_record_ops_init(&ops);
	e = mt_capture_read(r->cap, &ops, &c);
	if (e < 0) {
		free(c.out.v);
		return e;
	}
	*out = c.out.v;
	return (ssize_t)c.out.n;
}

/* ------------------------------------------------------------------------
 * Replay: the live set, as snapshot.c keeps it, with each allocation's
 * event number so that groups can be ordered and named by their first.
 * ---------------------------------------------------------------------- */
struct alloc_info {
	uint64_t seq;  /* event number, 1-based */
	uint64_t addr, size;
	uint32_t stack, thread;
	uint8_t kind;
};

struct slot {
	uint64_t addr; /* 0 = empty */
	struct alloc_info a;
};

struct piece {
	uint64_t start, end;
	uint32_t origin;
};

struct origin {
	struct alloc_info a;
	uint32_t pieces;   /* 0 = free for reuse */
	uint64_t counted;  /* grouping stamp */
};

struct replay {
	struct mt_py_reader *r;
	uint64_t t, stop_at; /* stop after event stop_at (0 = never) */
	uint64_t page_mask;

	struct slot *map;
	uint64_t mask, n;

	struct piece *pc;
	size_t n_pc, cap_pc;
	struct origin *org;
	uint32_t n_org, cap_org;
	uint32_t *free_org;
	uint32_t n_free_org;

	/* temporary view: per thread, a ring of the last threshold + 1
	 * allocations */
	int temporary;
	uint64_t ring_len;
	struct alloc_info **rings;
	uint64_t *ring_pos;
	uint32_t n_rings;
	struct groups *tmp_groups;
};

static inline uint64_t hash_addr(uint64_t a)
{
	a ^= a >> 33;
	a *= 0xff51afd7ed558ccdull;
	a ^= a >> 33;
	return a;
}

static int map_grow(struct replay *p)
{
	uint64_t old_cap = p->map ? p->mask + 1 : 0;
	uint64_t cap = old_cap ? old_cap * 2 : 1024;
	struct slot *nv = calloc(cap, sizeof(*nv));

	if (!nv)
		return -ENOMEM;
	for (uint64_t i = 0; i < old_cap; i++) {
		if (!p->map[i].addr)
			continue;
		uint64_t j = hash_addr(p->map[i].addr) & (cap - 1);
		while (nv[j].addr)
			j = (j + 1) & (cap - 1);
		nv[j] = p->map[i];
	}
	free(p->map);
	p->map = nv;
	p->mask = cap - 1;
	return 0;
}

static struct slot *map_find(struct replay *p, uint64_t addr)
{
	uint64_t j = hash_addr(addr) & p->mask;
	while (p->map[j].addr && p->map[j].addr != addr)
		j = (j + 1) & p->mask;
	return &p->map[j];
}

/* Remove @s by shifting later members of its probe run back into the hole,
 * so that lookups never need tombstones. */
static void map_remove(struct replay *p, struct slot *s)
{
	uint64_t hole = (uint64_t)(s - p->map), j = hole;

	for (;;) {
		j = (j + 1) & p->mask;
		if (!p->map[j].addr)
			break;
		uint64_t home = hash_addr(p->map[j].addr) & p->mask;
		if (((j - home) & p->mask) >= ((j - hole) & p->mask)) {
			p->map[hole] = p->map[j];
			hole = j;
		}
	}
	p->map[hole].addr = 0;
	p->n--;
}

/* First piece whose end is above @a. */
static size_t pc_first_after(const struct replay *p, uint64_t a)
{
	size_t lo = 0, hi = p->n_pc;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (p->pc[mid].end > a)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

static int pc_insert(struct replay *p, size_t i, const struct piece *x)
{
	if (p->n_pc == p->cap_pc) {
		size_t n = p->cap_pc ? p->cap_pc * 2 : 64;
		struct piece *nv = realloc(p->pc, n * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		p->pc = nv;
		p->cap_pc = n;
	}
	memmove(&p->pc[i + 1], &p->pc[i], (p->n_pc - i) * sizeof(*x));
	p->pc[i] = *x;
	p->n_pc++;
	return 0;
}

static void origin_release(struct replay *p, uint32_t o)
{
	p->free_org[p->n_free_org++] = o;
}

static int origin_new(struct replay *p, const struct alloc_info *a, uint32_t *out)
{
	uint32_t o;

	if (p->n_free_org) {
		o = p->free_org[--p->n_free_org];
	} else {
		if (p->n_org == p->cap_org) {
			uint32_t n = p->cap_org ? p->cap_org * 2 : 64;
			struct origin *nv = realloc(p->org, n * sizeof(*nv));
			if (!nv)
				return -ENOMEM;
			p->org = nv;
			uint32_t *nf = realloc(p->free_org, n * sizeof(*nf));
			if (!nf)
				return -ENOMEM;
			p->free_org = nf;
			p->cap_org = n;
		}
		o = p->n_org++;
	}
	p->org[o] = (struct origin){ *a, 1, 0 };
	*out = o;
	return 0;
}

/* Take [a, b) out of the live mappings. */
static int pc_remove(struct replay *p, uint64_t a, uint64_t b)
{
	size_t i = pc_first_after(p, a), lo = SIZE_MAX, hi = 0;

	for (; i < p->n_pc && p->pc[i].start < b; i++) {
		struct piece *x = &p->pc[i];
		if (a <= x->start && x->end <= b) {
			if (--p->org[x->origin].pieces == 0)
				origin_release(p, x->origin);
			if (lo == SIZE_MAX)
				lo = i;
			hi = i + 1;
		} else if (a <= x->start) {
			x->start = b;
		} else if (x->end <= b) {
			x->end = a;
		} else {
			struct piece right = *x;
			right.start = b;
			x->end = a;
			p->org[x->origin].pieces++;
			if (pc_insert(p, i + 1, &right) < 0)
				return -ENOMEM;
			i++;
		}
	}
	if (lo != SIZE_MAX) {
		memmove(&p->pc[lo], &p->pc[hi], (p->n_pc - hi) * sizeof(struct piece));
		p->n_pc -= hi - lo;
	}
	return 0;
}

static inline uint64_t range_end(uint64_t a, uint64_t len)
{
	return a + len < a ? UINT64_MAX : a + len;
}

/* Groups of allocations by (stack, thread, allocator). */
struct group {
	uint32_t stack, thread;
	uint8_t kind;
	struct mt_py_record rec;
	uint64_t first_seq;
};

struct groups {
	struct group *v;
	size_t n, cap;
	uint32_t *slots; /* index + 1 */
	size_t n_slots;
	int merge;
	struct mt_py_reader *r;
};

static uint64_t group_hash(uint32_t stack, uint32_t thread, uint8_t kind)
{
	return hash_addr(((uint64_t)stack << 32 | thread) + 1) ^ kind;
}

static int groups_add(struct groups *g, const struct alloc_info *a, uint64_t bytes, uint64_t count)
{
	uint32_t thread = g->merge ? UINT32_MAX : a->thread;

	if (g->n * 2 >= g->n_slots) {
		size_t n = g->n_slots ? g->n_slots * 2 : 256;
		uint32_t *ns = calloc(n, sizeof(*ns));
		if (!ns)
			return -ENOMEM;
		for (size_t i = 0; i < g->n; i++) {
			size_t j = group_hash(g->v[i].stack, g->v[i].thread, g->v[i].kind) & (n - 1);
			while (ns[j])
				j = (j + 1) & (n - 1);
			ns[j] = (uint32_t)i + 1;
		}
		free(g->slots);
		g->slots = ns;
		g->n_slots = n;
	}
	size_t j = group_hash(a->stack, thread, a->kind) & (g->n_slots - 1);
	struct group *x = NULL;
	while (g->slots[j]) {
		struct group *c = &g->v[g->slots[j] - 1];
		if (c->stack == a->stack && c->thread == thread && c->kind == a->kind) {
			x = c;
			break;
		}
		j = (j + 1) & (g->n_slots - 1);
	}
	if (!x) {
		if (g->n == g->cap) {
			size_t n = g->cap ? g->cap * 2 : 256;
			struct group *nv = realloc(g->v, n * sizeof(*nv));
			if (!nv)
				return -ENOMEM;
			g->v = nv;
			g->cap = n;
		}
		x = &g->v[g->n];
		memset(x, 0, sizeof(*x));
		x->stack = a->stack;
		x->thread = thread;
		x->kind = a->kind;
		x->rec.allocator = a->kind;
		x->first_seq = UINT64_MAX;
		x->rec.stack = a->stack;
		x->rec.thread = thread;
		x->rec.tid = g->merge ? 0 : thread_tid(g->r, thread);
		g->slots[j] = (uint32_t)++g->n;
	}
	x->rec.size += bytes;
	x->rec.n_allocations += count;
	if (a->seq < x->first_seq) {
		x->first_seq = a->seq;
		x->rec.address = a->addr;
	}
	return 0;
}

static int group_cmp(const void *pa, const void *pb)
{
	const struct group *a = pa, *b = pb;
	return (a->first_seq > b->first_seq) - (a->first_seq < b->first_seq);
}

/* Sorted records out of @g; @g's arrays are released. */
static ssize_t groups_finish(struct groups *g, struct mt_py_record **out)
{
	struct mt_py_record *v = malloc((g->n ? g->n : 1) * sizeof(*v));

	free(g->slots);
	g->slots = NULL;
	if (!v) {
		free(g->v);
		return -ENOMEM;
	}
	qsort(g->v, g->n, sizeof(*g->v), group_cmp);
	for (size_t i = 0; i < g->n; i++)
		v[i] = g->v[i].rec;
	free(g->v);
	*out = v;
	return (ssize_t)g->n;
}

/* The live set as groups. */
static int groups_of_live(struct replay *p, struct groups *g)
{
	for (uint64_t i = 0; p->map && i <= p->mask; i++)
		if (p->map[i].addr && groups_add(g, &p->map[i].a, p->map[i].a.size, 1) < 0)
			return -ENOMEM;
	for (size_t i = 0; i < p->n_pc; i++) {
		struct origin *o = &p->org[p->pc[i].origin];
		uint64_t count = o->counted != 1;
		o->counted = 1;
		if (groups_add(g, &o->a, p->pc[i].end - p->pc[i].start, count) < 0)
			return -ENOMEM;
	}
	return 0;
}

static int tmp_note_alloc(struct replay *p, const struct alloc_info *a)
{
	if (a->thread >= p->n_rings) {
		uint32_t n = a->thread + 1 > p->n_rings * 2 ? a->thread + 1 : p->n_rings * 2;
		struct alloc_info **nr = realloc(p->rings, n * sizeof(*nr));
		if (!nr)
			return -ENOMEM;
		p->rings = nr;
		uint64_t *np = realloc(p->ring_pos, n * sizeof(*np));
		if (!np)
			return -ENOMEM;
		p->ring_pos = np;
		memset(&p->rings[p->n_rings], 0, (n - p->n_rings) * sizeof(*nr));
		memset(&p->ring_pos[p->n_rings], 0, (n - p->n_rings) * sizeof(*np));
		p->n_rings = n;
	}
	if (!p->rings[a->thread] &&
	    !(p->rings[a->thread] = calloc(p->ring_len, sizeof(struct alloc_info))))
		return -ENOMEM;
	p->rings[a->thread][p->ring_pos[a->thread]++ % p->ring_len] = *a;
	return 0;
}

static int tmp_note_free(struct replay *p, uint32_t thread, unsigned kind, uint64_t addr,
			 uint64_t size)
{
	if (thread >= p->n_rings || !p->rings[thread] || !addr)
		return 0;
	struct alloc_info *ring = p->rings[thread];
	for (uint64_t i = 0; i < p->ring_len; i++) {
		struct alloc_info *a = &ring[i];
		if (a->addr != addr || !a->seq)
			continue;
		if ((kind == MT_ALLOC_MUNMAP) != (a->kind == MT_ALLOC_MMAP))
			continue;
		if (kind == MT_ALLOC_MUNMAP && a->size != size)
			continue;
		int e = groups_add(p->tmp_groups, a, a->size, 1);
		a->seq = 0; /* counted once, even if the address comes back */
		a->addr = 0;
		return e;
	}
	return 0;
}

static int rp_alloc(void *ctx, const struct mt_record *rec)
{
	struct replay *p = ctx;
	struct alloc_info a = { ++p->t, rec->alloc.addr, rec->alloc.size, rec->alloc.stack,
				rec->tidx, rec->alloc.kind };
	int e = 0;

	if (p->temporary) {
		if (a.addr && (e = tmp_note_alloc(p, &a)) < 0)
			return e;
		return 0;
	}
	if (a.addr == 0)
		goto out;
	if (a.kind == MT_ALLOC_MMAP) {
		struct piece x = { a.addr, range_end(a.addr, a.size), 0 };
		if (a.size == 0)
			goto out;
		if (pc_remove(p, x.start, x.end) < 0 || origin_new(p, &a, &x.origin) < 0 ||
		    pc_insert(p, pc_first_after(p, x.start), &x) < 0)
			return -ENOMEM;
	} else {
		if ((p->n + 1) * 2 > p->mask + 1 && map_grow(p) < 0)
			return -ENOMEM;
		struct slot *s = map_find(p, a.addr);
		if (!s->addr)
			p->n++;
		s->addr = a.addr;
		s->a = a;
	}
out:
	return p->stop_at && p->t >= p->stop_at ? 1 : 0;
}

static int rp_free(void *ctx, const struct mt_record *rec)
{
	struct replay *p = ctx;
	uint64_t addr = rec->free.addr;

	p->t++;
	if (p->temporary)
		return tmp_note_free(p, rec->tidx, rec->free.kind, addr, rec->free.size);
	if (rec->free.kind == MT_ALLOC_MUNMAP) {
		uint64_t len = (rec->free.size + p->page_mask) & ~p->page_mask;
		if (pc_remove(p, addr, range_end(addr, len)) < 0)
			return -ENOMEM;
	} else if (addr && p->map) {
		struct slot *s = map_find(p, addr);
		if (s->addr)
			map_remove(p, s);
	}
	return p->stop_at && p->t >= p->stop_at ? 1 : 0;
}

static void replay_release(struct replay *p)
{
	free(p->map);
	free(p->pc);
	free(p->org);
	free(p->free_org);
	for (uint32_t i = 0; i < p->n_rings; i++)
		free(p->rings[i]);
	free(p->rings);
	free(p->ring_pos);
}

ssize_t mt_py_view(struct mt_py_reader *r, int view, int merge_threads, uint64_t threshold,
		   struct mt_py_record **out)
{
	struct mt_record_ops ops = { .alloc = rp_alloc, .free = rp_free };
	struct replay p = { .r = r };
	struct groups g = { .merge = merge_threads != 0, .r = r };
	uint32_t ps = r->snap.header.page_size;
	ssize_t ret;
	int e;

	if (view != MT_PY_PEAK && view != MT_PY_LEAKS && view != MT_PY_TEMPORARY)
		return -EINVAL;
	if (view == MT_PY_PEAK && r->snap.peak_event == 0)
		return groups_finish(&g, out); /* nothing was ever live */
	mt_record_ops_init(&ops);
	p.page_mask = ps && !(ps & (ps - 1)) ? ps - 1 : 0;
	p.stop_at = view == MT_PY_PEAK ? r->snap.peak_event : 0;
	p.temporary = view == MT_PY_TEMPORARY;
	/* a ring longer than this would make every free a long search */
	p.ring_len = threshold < (1u << 20) ? threshold + 1 : (1u << 20);
	p.tmp_groups = &g;
	if (!p.temporary && map_grow(&p) < 0) {
		replay_release(&p);
		return -ENOMEM;
	}
	e = mt_capture_read(r->cap, &ops, &p);
	if (e < 0 || (!p.temporary && groups_of_live(&p, &g) < 0)) {
		replay_release(&p);
		free(g.v);
		free(g.slots);
		return e < 0 ? e : -ENOMEM;
	}
	replay_release(&p);
	ret = groups_finish(&g, out);
	return ret;
}

/* ------------------------------------------------------------------------
 * The parse report through a caller's write function.
 * ---------------------------------------------------------------------- */
struct dump_cookie {
	ssize_t (*write)(void *ctx, const char *buf, size_t len);
	void *ctx;
};

static ssize_t cookie_write(void *c, const char *buf, size_t len)
{
	struct dump_cookie *d = c;
	size_t done = 0;

	while (done < len) {
		ssize_t n = d->write(d->ctx, buf + done, len - done);
		if (n <= 0) {
			errno = EIO;
			return done ? (ssize_t)done : -1;
		}
		done += (size_t)n;
	}
	return (ssize_t)len;
}

int mt_py_dump(const char *path, ssize_t (*write)(void *ctx, const char *buf, size_t len),
	       void *ctx, char *err, size_t errlen)
{
	struct dump_cookie d = { write, ctx };
	cookie_io_functions_t io = { .write = cookie_write };
	struct mt_capture *cap;
	FILE *f;
	int e = mt_capture_open(path, &cap);

	if (e < 0) {
		mt_report_describe_open_error(err, errlen, path, e);
		return e;
	}
	f = fopencookie(&d, "w", io);
	if (!f) {
		e = -errno;
		snprintf(err, errlen, "cannot write the records: %s", mt_strerror(e));
		mt_capture_close(cap);
		return e;
	}
	e = mt_report_parse(f, cap);
	if (fclose(f) != 0 && e == 0)
		e = -EIO;
	if (e < 0)
		snprintf(err, errlen, "cannot write the records of '%s': %s", path, mt_strerror(e));
	mt_capture_close(cap);
	return e;
}
