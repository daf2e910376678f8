/* SPDX-License-Identifier: MIT */
/* The rehash of the reader's index-slot hash tables (util/slots.h). */
#include "util/slots.h"

#include "util/grow.h"

#include <errno.h>  /* ENOMEM */
#include <stdlib.h> /* malloc */
#include <string.h> /* memset */

int mt_slots_grow(uint32_t **slots, size_t *nslots, size_t first, size_t from, size_t to,
		  mt_slots_hash_fn hash, const void *ctx)
{
	size_t n = *nslots ? *nslots * 2 : first;
	/* zeroed by writing: a page of calloc's that the probes below read
	 * before they write it faults twice */
	uint32_t *ns = malloc(n * sizeof(*ns));
	if (!ns)
		return -ENOMEM;
	mt_grow_huge(ns, n * sizeof(*ns));
	memset(ns, 0, n * sizeof(*ns));
	for (size_t i = from; i < to; i++) {
		size_t j = hash(ctx, i) & (n - 1);
		while (ns[j])
			j = (j + 1) & (n - 1);
		ns[j] = (uint32_t)i + 1;
	}
	free(*slots);
	*slots = ns;
	*nslots = n;
	return 0;
}
