/* SPDX-License-Identifier: MIT */
#ifndef MT_UTIL_SLOTS_H
#define MT_UTIL_SLOTS_H
/*
 * The index slots of an open-addressing hash table whose entries live in
 * an array of their own (the reader's tables: the HTML reports' string
 * table, the call tree's children, the location table, the snapshot's
 * sites). A slot holds an entry's index + 1, 0 is empty; the number of
 * slots is a power of two, and a key probes linearly from its
 * hash & (slots - 1). The tables keep
 * their entries, their hash and their lookup (inline where they are
 * used); this is their one rehash, called as the entries pass half the
 * slots. Reader and CLI only (it allocates), never the payload.
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint32_t, uint64_t */

/* The hash of entry @i of the table @ctx. */
typedef uint64_t (*mt_slots_hash_fn)(const void *ctx, size_t i);

/* mt_slots_grow() - *@slots to twice *@nslots slots (@first, a power of
 * two, when there are none yet), holding entries [@from, @to) by @hash.
 * Returns 0, or -ENOMEM with *@slots and *@nslots as they were. */
int mt_slots_grow(uint32_t **slots, size_t *nslots, size_t first, size_t from, size_t to,
		  mt_slots_hash_fn hash, const void *ctx);

#endif /* MT_UTIL_SLOTS_H */
