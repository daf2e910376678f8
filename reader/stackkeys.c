/* SPDX-License-Identifier: MIT */
/*
 * Stack ids to one id per printed call path (stackkeys.h).
 */
#include "reader/stackkeys.h"

#include <stdlib.h> /* realloc */
#include <string.h> /* memset */

struct mt_stackkeys_ent {
	uint32_t parent, line, key, used;
	const char *function, *file;
};

static int memo_room(struct mt_stackkeys *sk, uint32_t id)
{
	if (id < sk->memo_cap)
		return 0;
	uint32_t n = sk->memo_cap ? sk->memo_cap : 1024;
	while (n <= id)
		n *= 2;
	uint32_t *m = realloc(sk->memo, (size_t)n * sizeof(*m));
	if (!m)
		return -1;
	memset(m + sk->memo_cap, 0, (size_t)(n - sk->memo_cap) * sizeof(*m));
	sk->memo = m;
	sk->memo_cap = n;
	return 0;
}

static size_t ent_hash(uint32_t parent, const char *fn, const char *file, uint32_t line)
{
	uint64_t h = parent * 0x9E3779B97F4A7C15ull;
	h ^= (uint64_t)(uintptr_t)fn * 0xC2B2AE3D27D4EB4Full;
	h ^= (uint64_t)(uintptr_t)file * 0x165667B19E3779F9ull;
	h ^= line * 0x27D4EB2F165667C5ull;
	return (size_t)(h ^ (h >> 29));
}

static int map_grow(struct mt_stackkeys *sk)
{
	size_t n = sk->map_cap ? sk->map_cap * 2 : 1024;
	struct mt_stackkeys_ent *m = calloc(n, sizeof(*m));
	if (!m)
		return -1;
	for (size_t i = 0; i < sk->map_cap; i++) {
		const struct mt_stackkeys_ent *e = &sk->map[i];
		if (!e->used)
			continue;
		size_t j = ent_hash(e->parent, e->function, e->file, e->line) & (n - 1);
		while (m[j].used)
			j = (j + 1) & (n - 1);
		m[j] = *e;
	}
	free(sk->map);
	sk->map = m;
	sk->map_cap = n;
	return 0;
}

/* the key of @id, whose parent's key is @pkey: the first id with that
 * parent key and frame */
static uint32_t key_of(struct mt_stackkeys *sk, const struct mt_stacks *k, uint32_t id,
		       uint32_t pkey, int *oom)
{
	const struct mt_stack_node *n = &k->nodes[id];
	if (n->code == MT_CODE_FRAME || n->code >= k->codes_cap || !k->codes[n->code].defined)
		return id;
	if ((sk->map_n + 1) * 2 > sk->map_cap && map_grow(sk) < 0) {
		*oom = 1;
		return id;
	}
	struct mt_frame f;
	mt_stacks_frame(k, id, &f);
	uint32_t line = (uint32_t)f.line;
	size_t j = ent_hash(pkey, f.function, f.file, line) & (sk->map_cap - 1);
	for (;; j = (j + 1) & (sk->map_cap - 1)) {
		struct mt_stackkeys_ent *e = &sk->map[j];
		if (!e->used) {
			*e = (struct mt_stackkeys_ent){ pkey, line, id, 1, f.function, f.file };
			sk->map_n++;
			return id;
		}
		if (e->parent == pkey && e->line == line && e->function == f.function &&
		    e->file == f.file)
			return e->key;
	}
}

uint32_t mt_stackkeys_get(struct mt_stackkeys *sk, const struct mt_stacks *k, uint32_t id,
			  int *oom)
{
	if (id < sk->memo_cap && sk->memo[id])
		return sk->memo[id] - 1;
	if (!id)
		return 0;
	if (memo_room(sk, id) < 0) {
		*oom = 1;
		return id;
	}
	/* up to the first node whose key is known, the root or an undefined
	 * node; then down, each from its parent's key */
	size_t n = 0;
	uint32_t pkey = 0;
	for (uint32_t at = id, guard = 0;; guard++) {
		if (at < sk->memo_cap && sk->memo[at]) {
			pkey = sk->memo[at] - 1;
			break;
		}
		if (at == 0)
			break;
		if (at >= k->nodes_cap || !k->nodes[at].defined || guard > k->nodes_cap ||
		    memo_room(sk, at) < 0) {
			/* undefined (or a loop): its own key, no parent */
			if (at < sk->memo_cap)
				sk->memo[at] = at + 1;
			pkey = at;
			if (at == id)
				return id;
			break;
		}
		if (n == sk->work_cap) {
			size_t c = sk->work_cap ? sk->work_cap * 2 : 256;
			uint32_t *w = realloc(sk->work, c * sizeof(*w));
			if (!w) {
				*oom = 1;
				return id;
			}
			sk->work = w;
			sk->work_cap = c;
		}
		sk->work[n++] = at;
		at = k->nodes[at].parent;
	}
	while (n--) {
		uint32_t at = sk->work[n];
		pkey = key_of(sk, k, at, pkey, oom);
		sk->memo[at] = pkey + 1;
	}
	return pkey;
}

void mt_stackkeys_release(struct mt_stackkeys *sk)
{
	free(sk->memo);
	free(sk->map);
	free(sk->work);
	memset(sk, 0, sizeof(*sk));
}
