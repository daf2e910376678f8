/* SPDX-License-Identifier: MIT */
#ifndef MT_UTIL_GROW_H
#define MT_UTIL_GROW_H
/*
 * Growth of the reader's dense per-id arrays (by stack id, code id,
 * thread index, site): an array of *cap elements of @elem bytes grows by
 * doubling (from 64) until index @need fits, and the new elements are
 * zero, so that a zero element means "not seen yet". The caller bounds
 * @need (the snapshot refuses ids above 2^24). Each array is a mapping of
 * its own, grown by mremap: its pages are moved, never copied, and the
 * new ones are the kernel's zero pages until written (a page never used
 * costs nothing), whatever malloc's thresholds are in the process (the
 * Python API's, a program's). Element 0 starts a 64-byte line of the
 * cache. The reader's: never a hook's. And the
 * reader's byte buffers, grown to a size (mt_grow_buf()).
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint32_t */

/* mt_grow() - room for index @need in *@v, an array of *@cap elements of
 * @elem bytes. Returns 0, or -ENOMEM with *@v and *@cap as they were. */
int mt_grow(void **v, uint32_t *cap, uint32_t need, size_t elem);
/* mt_grow_free() - frees an array of mt_grow() (NULL: none). */
void mt_grow_free(void *v);

/* mt_grow_buf() - room for @want bytes in *@buf, of *@cap bytes (grown to
 * exactly @want, contents kept): a reader's scratch buffer. Returns 0, or
 * -ENOMEM with *@buf and *@cap as they were. */
int mt_grow_buf(uint8_t **buf, size_t *cap, size_t want);

/* mt_grow_huge() - huge pages, where the kernel leaves them to the
 * program (as Debian's does), for the pages of [@p, @p + @len) from 2 MiB
 * on: a report's big arrays then fault once per 2 MiB rather than once
 * per 4 KiB, which on a virtual machine is much of a report's time. All
 * of the block's pages, so that a block malloc mapped on its own stays one
 * mapping and realloc grows it with mremap, without a copy. */
void mt_grow_huge(void *p, size_t len);

#endif /* MT_UTIL_GROW_H */
