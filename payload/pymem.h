/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_PYMEM_H
#define MT_PAYLOAD_PYMEM_H
/*
 * The PyMem OBJ and MEM domain wrappers (--trace-python-allocators).
 * python.c installs and removes them; they are defined in track.c, where
 * the recording path and the stack walk inline into them: with every
 * Python object allocation an event, a call less per event shows.
 */
#include "payload/python-layout.h" /* struct mt_pymem_allocator */

#include <stddef.h> /* size_t */

/* One wrapper instance: its ctx. A wrapper that someone else wrapped in
 * turn cannot be taken out of their chain on detach; it stays there as a
 * pass-through forever, with its saved allocator. A later attach must
 * then not reuse that instance (its orig would point back into the chain
 * and loop), so each domain has a few instances. */
struct mt_pymem_domain {
	int domain;
	volatile int active; /* record through this wrapper */
	int used;            /* reachable from the domain's chain */
	struct mt_pymem_allocator orig; /* what we delegate to */
};

/* mt_pymem_wrappers() - the wrappers for interpreters of layout row @row
 * (mt_pylayouts), with a NULL ctx: the stack walk is compiled into each
 * row's allocating functions. Their free is mt_pymem_free for every row,
 * which is how an installed wrapper is recognised. */
const struct mt_pymem_allocator *mt_pymem_wrappers(size_t row);
void mt_pymem_free(void *ctx, void *ptr);

#endif /* MT_PAYLOAD_PYMEM_H */
