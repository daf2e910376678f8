/* SPDX-License-Identifier: MIT */
/*
 * Prints the CPython layout table compiled into the payload as
 * "3.minor field offset" lines, for tests/integration/test_pylayout.py to
 * compare with offsetof() under each installed version's real headers.
 * Fields a version does not have (-1) are not printed.
 */
#include "payload/python-layout.h"

#include <stddef.h> /* offsetof */
#include <stdio.h>  /* printf */

static void mt_dump_row(const struct mt_pylayout *l)
{
#define MT_X(member, name)                                                     \
	if (l->member >= 0)                                                    \
		printf("3.%u %s %d\n", l->minor, name, (int)l->member);
	MT_PYLAYOUT_FIELDS(MT_X)
#undef MT_X
	printf("3.%u pymem.domain_raw %d\n", l->minor, MT_PYMEM_DOMAIN_RAW);
	printf("3.%u pymem.domain_mem %d\n", l->minor, MT_PYMEM_DOMAIN_MEM);
	printf("3.%u pymem.domain_obj %d\n", l->minor, MT_PYMEM_DOMAIN_OBJ);
	printf("3.%u pymem.allocator_size %zu\n", l->minor, sizeof(struct mt_pymem_allocator));
	printf("3.%u pymem.ctx %zu\n", l->minor, offsetof(struct mt_pymem_allocator, ctx));
	printf("3.%u pymem.malloc %zu\n", l->minor, offsetof(struct mt_pymem_allocator, malloc));
	printf("3.%u pymem.calloc %zu\n", l->minor, offsetof(struct mt_pymem_allocator, calloc));
	printf("3.%u pymem.realloc %zu\n", l->minor, offsetof(struct mt_pymem_allocator, realloc));
	printf("3.%u pymem.free %zu\n", l->minor, offsetof(struct mt_pymem_allocator, free));
}

int main(void)
{
	for (size_t i = 0; i < MT_PYLAYOUT_COUNT; i++)
		mt_dump_row(&mt_pylayouts[i]);
	return fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
}
