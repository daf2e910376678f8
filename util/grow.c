/* SPDX-License-Identifier: MIT */
/* Growth of the reader's dense per-id arrays (util/grow.h). */
#include "util/grow.h"

#include <errno.h>  /* ENOMEM */
#include <stdlib.h> /* realloc */
#include <string.h> /* memset */
#include <sys/mman.h> /* madvise */
#include <unistd.h>   /* sysconf */

#define HUGE ((uintptr_t)2 << 20)

void mt_grow_huge(void *p, size_t len)
{
	/* the whole pages of the block, not its 2 MiB-aligned part alone: a
	 * block that malloc mapped on its own then stays one mapping, which
	 * realloc can move and grow with mremap instead of a copy (a mapping
	 * split in three by a part's flags makes mremap fail) */
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t lo = (uintptr_t)p & ~(page - 1);
	uintptr_t hi = ((uintptr_t)p + len + page - 1) & ~(page - 1);
	if (len >= HUGE)
		(void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
}

int mt_grow_buf(uint8_t **buf, size_t *cap, size_t want)
{
	if (*cap >= want)
		return 0;
	uint8_t *nb = realloc(*buf, want);
	if (!nb)
		return -ENOMEM;
	*buf = nb;
	*cap = want;
	return 0;
}

int mt_grow(void **v, uint32_t *cap, uint32_t need, size_t elem)
{
	uint32_t n = *cap ? *cap : 64;
	while (n <= need)
		n *= 2;
	void *nv = realloc(*v, (size_t)n * elem);
	if (!nv)
		return -ENOMEM;
	mt_grow_huge(nv, (size_t)n * elem);
	memset((char *)nv + (size_t)*cap * elem, 0, (size_t)(n - *cap) * elem);
	*v = nv;
	*cap = n;
	return 0;
}
