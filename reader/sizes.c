/* SPDX-License-Identifier: MIT */
/* Allocations counted by exact size (reader/sizes.h). */
#include "reader/sizes.h"

#include <errno.h>  /* ENOMEM */
#include <stdlib.h> /* calloc */

static size_t slot_of(uint64_t size, size_t cap)
{
	return (size_t)((size * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
}

static int grow(struct mt_sizes *z)
{
	size_t cap = z->cap ? z->cap * 2 : 1024;
	uint64_t *keys = calloc(cap, sizeof(*keys)), *counts = calloc(cap, sizeof(*counts));

	if (!keys || !counts) {
		free(keys);
		free(counts);
		return -ENOMEM;
	}
	for (size_t i = 0; i < z->cap; i++) {
		if (!z->keys[i])
			continue;
		size_t k = slot_of(z->keys[i], cap);
		while (keys[k])
			k = (k + 1) & (cap - 1);
		keys[k] = z->keys[i];
		counts[k] = z->counts[i];
	}
	free(z->keys);
	free(z->counts);
	z->keys = keys;
	z->counts = counts;
	z->cap = cap;
	return 0;
}

int mt_sizes_add(struct mt_sizes *z, uint64_t size)
{
	if (!size) {
		z->zero++;
		return 0;
	}
	if ((z->n + 1) * 2 > z->cap && grow(z) < 0) {
		z->oom = 1;
		return -ENOMEM;
	}
	size_t k = slot_of(size, z->cap);
	while (z->keys[k] && z->keys[k] != size)
		k = (k + 1) & (z->cap - 1);
	if (!z->keys[k]) {
		z->keys[k] = size;
		z->n++;
	}
	z->counts[k]++;
	return 0;
}

void mt_sizes_each(const struct mt_sizes *z, void (*fn)(void *ctx, uint64_t size, uint64_t count),
		   void *ctx)
{
	if (z->zero)
		fn(ctx, 0, z->zero);
	for (size_t i = 0; i < z->cap; i++)
		if (z->keys[i])
			fn(ctx, z->keys[i], z->counts[i]);
}

void mt_sizes_release(struct mt_sizes *z)
{
	free(z->keys);
	free(z->counts);
	*z = (struct mt_sizes){ 0 };
}
