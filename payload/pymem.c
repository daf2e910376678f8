/* SPDX-License-Identifier: MIT */
/*
 * What the tracker puts into the interpreter (pymem.h): the PyMem domain
 * wrappers (track.c), and the code objects' death notice. OBJ and MEM are
 * only called with the GIL held, so swapping them under the GIL cannot
 * race a caller.
 */
#include "payload/pymem.h"
#include "payload/python.h"
#include "payload/python-layout.h"
#include "payload/python-walk.h"
#include "payload/track.h"
#include "format/error.h"

#include <string.h> /* strcmp */

#define MT_PYMEM_SLOTS 8

static struct mt_pymem_domain mt_pymem_slots[2][MT_PYMEM_SLOTS];
static const int mt_pymem_domain_ids[2] = { MT_PYMEM_DOMAIN_MEM, MT_PYMEM_DOMAIN_OBJ };

/* The instance of ours that @a is, or NULL. */
static struct mt_pymem_domain *mt_pymem_ours(const struct mt_pymem_allocator *a, int d)
{
	for (int i = 0; i < MT_PYMEM_SLOTS; i++)
		if (a->free == mt_pymem_free && a->ctx == &mt_pymem_slots[d][i])
			return &mt_pymem_slots[d][i];
	return NULL;
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
	g = mt_api.gil_ensure();
	/* With PYTHONMALLOC=malloc every block reaches the malloc hooks;
	 * wrapping the domains would count them twice. */
	name = mt_api.allocator_name != NULL ? mt_api.allocator_name() : NULL;
	if (name != NULL && (strcmp(name, "malloc") == 0 || strcmp(name, "malloc_debug") == 0))
		goto out;
	for (int i = 0; i < 2; i++) {
		struct mt_pymem_allocator cur, ours;
		struct mt_pymem_domain *d;

		mt_api.mem_get(mt_pymem_domain_ids[i], &cur);
		/* Still on top from an earlier attach (someone wrapped us and
		 * unwrapped again): switching it back on is enough. */
		d = mt_pymem_ours(&cur, i);
		if (d == NULL) {
			for (int k = 0; k < MT_PYMEM_SLOTS && d == NULL; k++)
				if (!mt_pymem_slots[i][k].used)
					d = &mt_pymem_slots[i][k];
			if (d == NULL) {
				err = -MT_ENOPY;
				break;
			}
			d->domain = mt_pymem_domain_ids[i];
			d->orig = cur;
			d->used = 1;
			ours = *mt_pymem_wrappers(mt_python_layout_row());
			ours.ctx = d;
			mt_api.mem_set(d->domain, &ours);
		}
		d->active = 1;
	}
out:
	mt_api.gil_release(g);
	return err;
}

void mt_python_pymem_quiet(void)
{
	for (int i = 0; i < 2; i++)
		for (int k = 0; k < MT_PYMEM_SLOTS; k++)
			mt_pymem_slots[i][k].active = 0;
}

int mt_python_pymem_uninstall(void)
{
	mt_gilstate g;

	if (!mt_gil_usable())
		return -MT_ENOPY;
	g = mt_api.gil_ensure();
	for (int i = 0; i < 2; i++) {
		struct mt_pymem_allocator cur;
		struct mt_pymem_domain *top;

		/* Every instance goes quiet, also those buried in a chain. */
		for (int k = 0; k < MT_PYMEM_SLOTS; k++)
			mt_pymem_slots[i][k].active = 0;
		mt_api.mem_get(mt_pymem_domain_ids[i], &cur);
		/* Restore only our own top; if someone wrapped us later
		 * (tracemalloc), our wrapper stays in their chain and passes
		 * calls through. Calls into a domain hold the GIL, as we do, so
		 * nobody is inside the instance we take out. */
		top = mt_pymem_ours(&cur, i);
		if (top != NULL) {
			mt_api.mem_set(top->domain, &top->orig);
			top->used = 0;
		}
	}
	mt_api.gil_release(g);
	return 0;
}

int mt_python_code_watch(int on)
{
	return mt_python_code_deaths(on, mt_track_code_gone);
}
