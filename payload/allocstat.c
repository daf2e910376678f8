/* SPDX-License-Identifier: MIT */
/*
 * The C allocator's own count of bytes in use (allocstat.h).
 */
#include "payload/allocstat.h"
#include "payload/got.h"
#include "payload/wait.h"

#include <dlfcn.h>  /* dlopen, dlsym */
#include <stddef.h> /* size_t */

/* glibc's struct mallinfo2 (2.33), spelled out: the headers of an older
 * glibc have none. */
struct glibc_mallinfo2 {
	size_t arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks;
	size_t uordblks, fordblks, keepcost;
};

static struct {
	struct glibc_mallinfo2 (*mallinfo2)(void); /* NULL: no count */
	uint64_t next_ns; /* the next call's earliest time */
} as;

int mt_allocstat_init(void)
{
	as.mallinfo2 = NULL;
	as.next_ns = 0;
	void *h = dlopen("libc.so.6", RTLD_NOLOAD | RTLD_LAZY);
	if (!h)
		return 0;
	void *fn = dlsym(h, "mallinfo2");
	void *libc_malloc = dlsym(h, "malloc");
	dlclose(h);
	/* the malloc the program calls: the first object's that defines it */
	if (fn && libc_malloc && mt_got_find_definition("malloc") == libc_malloc)
		as.mallinfo2 = (struct glibc_mallinfo2 (*)(void))fn;
	return as.mallinfo2 != NULL;
}

int mt_allocstat_take(uint64_t now_ns, int force, uint64_t *bytes)
{
	if (!as.mallinfo2 || (!force && now_ns < as.next_ns))
		return 0;
	uint64_t t0 = mt_mono_ns();
	struct glibc_mallinfo2 mi = as.mallinfo2();
	uint64_t took = mt_mono_ns() - t0;
	uint64_t gap = took * 100;
	if (gap < MT_ALLOCSTAT_MIN_NS)
		gap = MT_ALLOCSTAT_MIN_NS;
	if (gap > MT_ALLOCSTAT_MAX_NS)
		gap = MT_ALLOCSTAT_MAX_NS;
	as.next_ns = now_ns + gap;
	*bytes = (uint64_t)mi.uordblks + (uint64_t)mi.hblkhd;
	return 1;
}
