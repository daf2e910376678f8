/* SPDX-License-Identifier: MIT */
#ifndef MT_READER_CALLTREE_H
#define MT_READER_CALLTREE_H
/*
 * The call tree of one view of a snapshot: a node per call path of
 * (function, file, line) frames, outermost first, with the memory
 * allocated at the node itself (own) and at it or below (total). Shared
 * by the flamegraph, tree and table reports. With split threads the
 * paths of different threads stay apart (each node has one thread).
 *
 * Nodes are stored parents before children: node 0 is the root (no
 * frame), and every other node's parent has a smaller index.
 *
 * Frames that reader/frames.h hides are either marked (each node says
 * its kind) or, when the tree is built hiding them, left out: their
 * callees join their caller, memory allocated in them is their nearest
 * shown caller's, and that of paths of hidden frames alone is one
 * MT_HIDDEN_FRAMES node's under the root.
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint64_t */

#include "reader/snapshot.h"

struct mt_ctree_node {
	const char *function; /* NULL for the root and for merged nodes */
	const char *file;
	int line;
	uint32_t parent;      /* index; the root's is 0 */
	uint32_t thread;      /* thread index with split threads, else 0 */
	uint32_t merged;      /* > 0: stands for this many smaller nodes */
	uint32_t depth;       /* root 0 */
	uint8_t native;       /* a native (C) frame */
	uint8_t kind;         /* enum mt_frame_kind */
	uint64_t own_bytes, own_count;
	uint64_t total_bytes, total_count;
};

struct mt_ctree {
	struct mt_ctree_node *v;
	size_t n;
	size_t n_merged;        /* nodes folded into merged nodes by pruning */
	uint64_t merged_below;  /* ... each with total bytes below this */
	size_t n_hidden;        /* frames left out (built hiding them) */
};

/* mt_ctree_build() - the full tree of @view, without the frames that
 * reader/frames.h hides if @hide. Returns 0 or -ENOMEM (then @t is
 * empty). */
int mt_ctree_build(struct mt_ctree *t, const struct mt_snapshot *s, enum mt_view view,
		   int split_threads, int hide);

/* mt_ctree_build_paths() - the tree of the @n stacks @stacks (one thread,
 * no frame left out), stack @stacks[i] with own @bytes[i] and @counts[i]
 * (a stack may come more than once), its node into @node_of[i]. Returns
 * 0 or -ENOMEM (then @t is empty). */
int mt_ctree_build_paths(struct mt_ctree *t, const struct mt_snapshot *s, const uint32_t *stacks,
			 const uint64_t *bytes, const uint64_t *counts, size_t n, uint32_t *node_of);

/* mt_ctree_prune() - keep the root and the nodes whose total bytes are at
 * least @min_fraction of the root's and among the @max_nodes largest;
 * the rest of each kept node's children become one merged child. Returns
 * 0 or -ENOMEM (then @t is unchanged). */
int mt_ctree_prune(struct mt_ctree *t, double min_fraction, size_t max_nodes);

/* mt_ctree_prune_map() - mt_ctree_prune(), saying in @remap (one entry
 * per node before, or NULL) which node each became: itself, or the
 * merged node that stands for it. */
int mt_ctree_prune_map(struct mt_ctree *t, double min_fraction, size_t max_nodes, uint32_t *remap);

void mt_ctree_release(struct mt_ctree *t);

#endif /* MT_READER_CALLTREE_H */
