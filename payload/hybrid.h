/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_HYBRID_H
#define MT_PAYLOAD_HYBRID_H
/*
 * A thread's native stacks as nodes of the shared stack trie (intern.h):
 * each event's return addresses (native-memo.h unwinds them, in part
 * where the Python chain proves the rest unchanged) become NATIVE nodes
 * under one another, outermost first, and the pair of the event's Python
 * stack and its native leaf a HYBRID node. The native trie is shared by
 * all Python stacks. The return addresses the last event shared with this
 * one at the outermost end keep their nodes; the others are looked up in
 * the thread's direct-mapped caches, and interned through the caller's
 * callback on a miss only (which takes the shared lock then).
 *
 * Everything here runs in allocation hooks on the thread's own state.
 */
#include "payload/native-memo.h"
#include "payload/native.h" /* MT_NATIVE_MAX, MT_NATIVE_SLACK */
#include "payload/python.h" /* struct mt_pychain */

#include <stddef.h> /* size_t */
#include <stdint.h> /* uint32_t, uintptr_t */

/* Native frames: (parent, return address) -> node, direct mapped. */
#define MT_XCACHE 512
struct mt_xcache_entry {
	uintptr_t ip;
	uint32_t parent, id;
};

/* (Python stack, native leaf) -> hybrid node, direct mapped. */
#define MT_HCACHE 256
struct mt_hcache_entry {
	uint32_t py, leaf, id;
};

struct mt_hybrid {
	/* the last event's return addresses, outermost first, with their
	 * nodes */
	uint32_t nn;
	uintptr_t nips[MT_NATIVE_MAX];
	uint32_t nid[MT_NATIVE_MAX];
	uintptr_t nnew[MT_NATIVE_MAX + MT_NATIVE_SLACK]; /* this event's, unwound */
	struct mt_xcache_entry xcache[MT_XCACHE];
	struct mt_hcache_entry hcache[MT_HCACHE];
	struct mt_native_memo memo; /* where the loops are in nips[] and the chain */
	uint64_t unwound; /* return addresses unwound, in all */
};

/* The node (@parent, @code, @offset) of the trie, interned; 0 if it could
 * not be. Called on cache misses only. */
typedef uint32_t (*mt_hybrid_node_fn)(void *ctx, uint32_t parent, uint32_t code,
				      uint32_t offset);

/* mt_hybrid_stack() - the hybrid node of the calling thread's native
 * stack under its Python stack @py; @c: the chain just read, of which
 * @keep outermost frames were unchanged (MT_MEMO_NO_WALK: not read).
 * errno may change (the unwinder's). */
uint32_t mt_hybrid_stack(struct mt_hybrid *h, const struct mt_pychain *c, uint32_t py, size_t keep,
			 mt_hybrid_node_fn node, void *ctx);

/* mt_hybrid_forget() - the nodes cached mean nothing any more. */
void mt_hybrid_forget(struct mt_hybrid *h);

#endif /* MT_PAYLOAD_HYBRID_H */
