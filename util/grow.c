/* SPDX-License-Identifier: MIT */
/* Growth of the reader's dense per-id arrays (util/grow.h). */
#include "util/grow.h"

#include <errno.h>  /* ENOMEM */
#include <stdlib.h> /* realloc */
#include <string.h> /* memset */

int mt_grow(void **v, uint32_t *cap, uint32_t need, size_t elem)
{
	uint32_t n = *cap ? *cap : 64;
	while (n <= need)
		n *= 2;
	void *nv = realloc(*v, (size_t)n * elem);
	if (!nv)
		return -ENOMEM;
	memset((char *)nv + (size_t)*cap * elem, 0, (size_t)(n - *cap) * elem);
	*v = nv;
	*cap = n;
	return 0;
}
