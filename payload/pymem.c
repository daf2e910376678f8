/* SPDX-License-Identifier: MIT */
/*
 * What the tracker puts into the interpreter (pymem.h): the PyMem domain
 * wrappers (OBJ and MEM: track.c's; RAW: here), and the code objects'
 * death notice. OBJ and MEM are only called with the GIL held, so
 * swapping them under the GIL cannot race a caller. RAW is called by any
 * thread, with or without the GIL: see the RAW wrappers below.
 */
#include "payload/pymem.h"
#include "payload/python.h"
#include "payload/python-layout.h"
#include "payload/python-walk.h"
#include "payload/track.h"
#include "format/error.h"
#include "format/record.h"

#include <string.h> /* strcmp */

#define MT_PYMEM_SLOTS 8
#define MT_PYMEM_DOMAINS 3
#define RAW 2 /* the RAW domain's index below */

static struct mt_pymem_domain mt_pymem_slots[MT_PYMEM_DOMAINS][MT_PYMEM_SLOTS];
static const int mt_pymem_domain_ids[MT_PYMEM_DOMAINS] = { MT_PYMEM_DOMAIN_MEM,
							   MT_PYMEM_DOMAIN_OBJ,
							   MT_PYMEM_DOMAIN_RAW };

/* ------------------------------------------------------------------------
 * The RAW domain's wrappers. The other domains' callers hold the GIL,
 * these may not: a thread Python does not know may call them, so they
 * record as the GOT hooks do (mt_track_alloc_raw(): the stack is read
 * without a thread state of the caller's). Three more things follow:
 * - A RAW slot's orig is written once and never changed (a later install
 *   takes a slot whose orig is the same allocator, or a new one), so a
 *   caller still inside a wrapper that was taken out calls what it did.
 * - PyMem_SetAllocator() copies the allocator field by field while other
 *   threads may read it: a caller may get our function with the ctx of
 *   the allocator we wrapped (raw_last's orig.ctx). Such a call passes
 *   through to that allocator.
 * - The recursion guard makes the outermost call the one recorded: OBJ
 *   and MEM hand blocks over 512 bytes to PyMem_RawMalloc with it held,
 *   and the C library's malloc under a RAW wrapper is not recorded.
 * ---------------------------------------------------------------------- */
static struct mt_pymem_domain *raw_last;

/* The slot @ctx is, or NULL for a torn read (above). */
static inline struct mt_pymem_domain *raw_slot(void *ctx)
{
	struct mt_pymem_domain *d = ctx;
	if (d >= &mt_pymem_slots[RAW][0] && d < &mt_pymem_slots[RAW][MT_PYMEM_SLOTS])
		return d;
	return NULL;
}

/* What a call through @ctx delegates to, and *@rec whether it records
 * (the guard is then held). */
static inline const struct mt_pymem_allocator *raw_enter(void *ctx, int *rec)
{
	struct mt_pymem_domain *d = raw_slot(ctx);
	if (d == NULL) {
		*rec = 0;
		return &__atomic_load_n(&raw_last, __ATOMIC_ACQUIRE)->orig;
	}
	*rec = d->active && mt_tracking && mt_guard_enter();
	return &d->orig;
}

static void *raw_malloc(void *ctx, size_t size)
{
	int rec;
	const struct mt_pymem_allocator *o = raw_enter(ctx, &rec);
	void *p = o->malloc(o->ctx, size);
	if (rec) {
		if (p != NULL)
			mt_track_alloc_raw(MT_ALLOC_PYMALLOC_RAW_MALLOC, p, size); /* keeps errno */
		mt_guard_leave();
	}
	return p;
}

static void *raw_calloc(void *ctx, size_t nelem, size_t elsize)
{
	int rec;
	const struct mt_pymem_allocator *o = raw_enter(ctx, &rec);
	void *p = o->calloc(o->ctx, nelem, elsize);
	if (rec) {
		if (p != NULL) /* no overflow here: the allocator succeeded */
			mt_track_alloc_raw(MT_ALLOC_PYMALLOC_RAW_CALLOC, p, nelem * elsize);
		mt_guard_leave();
	}
	return p;
}

/* The old block is recorded freed before the call, as for OBJ and MEM
 * (track.c). */
static void *raw_realloc(void *ctx, void *ptr, size_t size)
{
	int rec;
	const struct mt_pymem_allocator *o = raw_enter(ctx, &rec);
	if (rec && ptr != NULL)
		mt_track_free_raw(MT_ALLOC_PYMALLOC_RAW_FREE, ptr);
	void *p = o->realloc(o->ctx, ptr, size);
	if (rec) {
		if (p != NULL)
			mt_track_alloc_raw(MT_ALLOC_PYMALLOC_RAW_REALLOC, p, size);
		mt_guard_leave();
	}
	return p;
}

static void raw_free(void *ctx, void *ptr)
{
	int rec;
	const struct mt_pymem_allocator *o = raw_enter(ctx, &rec);
	if (rec && ptr != NULL) /* before the real free, as for OBJ and MEM */
		mt_track_free_raw(MT_ALLOC_PYMALLOC_RAW_FREE, ptr);
	o->free(o->ctx, ptr);
	if (rec)
		mt_guard_leave();
}

static const struct mt_pymem_allocator raw_wrappers = { NULL, raw_malloc, raw_calloc,
							 raw_realloc, raw_free };

/* The instance of ours that @a is, or NULL. */
static struct mt_pymem_domain *mt_pymem_ours(const struct mt_pymem_allocator *a, int d)
{
	void (*free)(void *, void *) = d == RAW ? raw_free : mt_pymem_free;
	for (int i = 0; i < MT_PYMEM_SLOTS; i++)
		if (a->free == free && a->ctx == &mt_pymem_slots[d][i])
			return &mt_pymem_slots[d][i];
	return NULL;
}

/* A slot of domain index @i for a wrapper around @cur, or NULL. A RAW
 * slot's orig never changes once written: one with @cur as its orig, or
 * one never used. */
static struct mt_pymem_domain *mt_pymem_slot(int i, const struct mt_pymem_allocator *cur)
{
	struct mt_pymem_domain *fresh = NULL;
	for (int k = 0; k < MT_PYMEM_SLOTS; k++) {
		struct mt_pymem_domain *d = &mt_pymem_slots[i][k];
		if (d->used)
			continue;
		if (i != RAW)
			return d;
		if (d->orig.free == NULL && fresh == NULL)
			fresh = d;
		if (memcmp(&d->orig, cur, sizeof(*cur)) == 0)
			return d;
	}
	return fresh;
}

/* A thread that takes the GIL while the interpreter finalizes is ended
 * inside PyGILState_Ensure (PyThread_exit_thread) in 3.8..3.13, so check
 * first. A shutdown starting between the check and the call still ends
 * the caller, which is the payload's own thread, never the target's. */
static int mt_gil_usable(void)
{
	return mt_python_initialized();
}

int mt_python_pymem_install(void)
{
	const char *name;
	mt_gilstate g;
	int err = 0;

	if (!mt_gil_usable())
		return -MT_ENOPY;
	g = mt_python_gil_take();
	/* With PYTHONMALLOC=malloc every block reaches the malloc hooks;
	 * wrapping the domains would count them twice. */
	name = mt_api.allocator_name != NULL ? mt_api.allocator_name() : NULL;
	if (name != NULL && (strcmp(name, "malloc") == 0 || strcmp(name, "malloc_debug") == 0))
		goto out;
	for (int i = 0; i < MT_PYMEM_DOMAINS; i++) {
		struct mt_pymem_allocator cur, ours;
		struct mt_pymem_domain *d;

		mt_api.mem_get(mt_pymem_domain_ids[i], &cur);
		/* Still on top from an earlier attach (someone wrapped us and
		 * unwrapped again): switching it back on is enough. */
		d = mt_pymem_ours(&cur, i);
		if (d == NULL) {
			d = mt_pymem_slot(i, &cur);
			if (d == NULL) {
				err = -MT_ENOPY;
				break;
			}
			d->domain = mt_pymem_domain_ids[i];
			d->orig = cur;
			d->used = 1;
			ours = i == RAW ? raw_wrappers : *mt_pymem_wrappers(mt_python_layout_row());
			ours.ctx = d;
			if (i == RAW) /* before a caller can see our functions */
				__atomic_store_n(&raw_last, d, __ATOMIC_RELEASE);
			mt_api.mem_set(d->domain, &ours);
		}
		d->active = 1;
	}
out:
	mt_python_gil_give(g);
	return err;
}

void mt_python_pymem_quiet(void)
{
	for (int i = 0; i < MT_PYMEM_DOMAINS; i++)
		for (int k = 0; k < MT_PYMEM_SLOTS; k++)
			mt_pymem_slots[i][k].active = 0;
}

int mt_python_pymem_uninstall(void)
{
	mt_gilstate g;

	if (!mt_gil_usable())
		return -MT_ENOPY;
	g = mt_python_gil_take();
	for (int i = 0; i < MT_PYMEM_DOMAINS; i++) {
		struct mt_pymem_allocator cur;
		struct mt_pymem_domain *top;

		/* Every instance goes quiet, also those buried in a chain. */
		for (int k = 0; k < MT_PYMEM_SLOTS; k++)
			mt_pymem_slots[i][k].active = 0;
		mt_api.mem_get(mt_pymem_domain_ids[i], &cur);
		/* Restore only our own top; if someone wrapped us later
		 * (tracemalloc), our wrapper stays in their chain and passes
		 * calls through. Calls into OBJ and MEM hold the GIL, as we do,
		 * so nobody is inside the instance we take out; a RAW caller
		 * may be, and its slot keeps its orig (above). */
		top = mt_pymem_ours(&cur, i);
		if (top != NULL) {
			mt_api.mem_set(top->domain, &top->orig);
			top->used = 0;
		}
	}
	mt_python_gil_give(g);
	return 0;
}

int mt_python_code_watch(int on)
{
	return mt_python_code_deaths(on, mt_track_code_gone);
}
