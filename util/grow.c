/* SPDX-License-Identifier: MIT */
/* Growth of the reader's dense per-id arrays (util/grow.h). */
#include "util/grow.h"

#include <errno.h>    /* ENOMEM */
#include <stdlib.h>   /* realloc */
#include <sys/mman.h> /* mmap, mremap, munmap, madvise */
#include <unistd.h>   /* sysconf */

#define HUGE ((uintptr_t)2 << 20)

/* An array's mapping starts with its size; the elements follow, one
 * cache line in. */
#define HEAD 64

void mt_grow_huge(void *p, size_t len)
{
	/* the whole pages of the block, not its 2 MiB-aligned part alone: a
	 * block that malloc mapped on its own then stays one mapping, which
	 * realloc can move and grow with mremap instead of a copy (a mapping
	 * split in three by a part's flags makes mremap fail) */
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t lo = (uintptr_t)p & ~(page - 1);
	uintptr_t hi = ((uintptr_t)p + len + page - 1) & ~(uintptr_t)(page - 1);
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
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	uint32_t n = *cap ? *cap : 64;
	while (n <= need)
		n *= 2;
	size_t bytes = (HEAD + (size_t)n * elem + page - 1) & ~(page - 1);
	char *m;
	if (*v) {
		char *old = (char *)*v - HEAD;
		size_t had = *(size_t *)old;
		if (had >= bytes) { /* a grow that failed beside it left it bigger */
			*cap = n;
			return 0;
		}
		m = mremap(old, had, bytes, MREMAP_MAYMOVE);
	} else {
		m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	}
	if (m == MAP_FAILED)
		return -ENOMEM;
	if (bytes >= HUGE)
		(void)madvise(m, bytes, MADV_HUGEPAGE);
	*(size_t *)m = bytes;
	*v = m + HEAD;
	*cap = n;
	return 0;
}

void mt_grow_free(void *v)
{
	if (v) {
		char *m = (char *)v - HEAD;
		munmap(m, *(size_t *)m);
	}
}
