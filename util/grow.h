/* SPDX-License-Identifier: MIT */
#ifndef MT_UTIL_GROW_H
#define MT_UTIL_GROW_H
/*
 * Growth of the reader's dense per-id arrays (by stack id, code id,
 * thread index, site): an array of *cap elements of @elem bytes grows by
 * doubling (from 64) until index @need fits, and the new elements are
 * zeroed, so that a zero element means "not seen yet". The caller bounds
 * @need (the snapshot refuses ids above 2^24). Reader only (it
 * allocates), never the payload.
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint32_t */

/* mt_grow() - room for index @need in *@v, an array of *@cap elements of
 * @elem bytes. Returns 0, or -ENOMEM with *@v and *@cap as they were. */
int mt_grow(void **v, uint32_t *cap, uint32_t need, size_t elem);

#endif /* MT_UTIL_GROW_H */
