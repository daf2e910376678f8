/* SPDX-License-Identifier: MIT */
/* The rehash of the reader's index-slot hash tables (util/slots.h). */
#include "util/slots.h"

#include <errno.h>  /* ENOMEM */
#include <stdlib.h> /* calloc */

int mt_slots_grow(uint32_t **slots, size_t *nslots, size_t first, size_t from, size_t to,
		  mt_slots_hash_fn hash, const void *ctx)
{
	size_t n = *nslots ? *nslots * 2 : first;
	uint32_t *ns = calloc(n, sizeof(*ns));
	if (!ns)
		return -ENOMEM;
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
