/* SPDX-License-Identifier: MIT */
#ifndef MT_READER_STACKS_H
#define MT_READER_STACKS_H
/*
 * The snapshot's stack trie and code-object table, from the STACK and
 * CODE records: stack id -> (parent stack, code id, bytecode offset) and
 * code id -> (file, function, line table, first line), with file and
 * function names interned (one copy of each string). A definition may
 * come after its first use and a later one replaces an earlier one; both
 * are resolved only when a frame is asked for, and an undefined stack or
 * code gives a "<unknown>" frame. The caller bounds the ids it defines
 * (the tables are dense by id); ids asked for may be anything. Nothing
 * is counted here: the define calls say whether an id was new.
 * Zero-initialised with python_hex set (the capture's PY_VERSION_HEX,
 * which picks the line-table format) is empty.
 *
 * Ownership: the strings in frames are borrowed and valid until
 * mt_stacks_release().
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint32_t */

#include "format/record.h"

struct mt_frame {
	const char *function; /* qualified name */
	const char *file;
	int line;             /* 0 if unknown */
	int native;           /* a native (C) frame, not a Python one */
};

struct mt_code_def {
	const char *file, *function; /* interned */
	uint8_t *linetable;
	uint32_t lt_len;
	int firstlineno;
	int defined;
};

/* A node is a Python frame (code, offset), or, with code MT_CODE_FRAME,
 * a frame given as it is (native frames, from mt_stacks_add_frame()). */
#define MT_CODE_FRAME UINT32_MAX
struct mt_stack_node {
	uint32_t parent, code, offset;
	int defined;
	const struct mt_frame *frame; /* MT_CODE_FRAME: borrowed, see there */
};

struct mt_stacks {
	struct mt_stack_node *nodes; /* by stack id */
	uint32_t nodes_cap;
	struct mt_code_def *codes;   /* by code id */
	uint32_t codes_cap;
	char **strs;                 /* intern set: open addressing */
	size_t strs_cap, strs_n;
	uint32_t python_hex;
	int lines;                   /* STACK offsets are lines (mt_header_lines()) */
	uint64_t *fmap;              /* frame nodes by (parent, frame): open addressing,
				      * each its hash << 32 | its id */
	uint32_t fmap_cap, fmap_n;
	uint32_t next_free;          /* ids from here on are free for frame nodes: above
				      * every id defined (raise it for ids kept elsewhere) */
	uint32_t *cut;               /* mt_stacks_cut()'s: (node, parent it had) pairs */
	uint32_t n_cut, cut_cap;
};

/* mt_stacks_define_code() - code object @c->id defined by @c (names cut
 * at their first NUL). Returns 1 for a new id, 0 for one defined again,
 * or -ENOMEM. */
int mt_stacks_define_code(struct mt_stacks *k, const struct mt_rec_code *c);

/* mt_stacks_define_stack() - trie node @r->id defined by @r. Returns 1
 * for a new id, 0 for one defined again as it was, -MT_ECORRUPT for one
 * defined otherwise before (ids are never reused), or -ENOMEM. */
int mt_stacks_define_stack(struct mt_stacks *k, const struct mt_rec_stack *r);

/* mt_stacks_add_frame() - the node of frame @f called from stack
 * @parent: an existing one with the same parent and frame, or a new id
 * (above every id defined so far: take the frame nodes out with
 * mt_stacks_drop_frames() before the capture defines more). @f must
 * outlive @k, or the node (mt_stacks_drop_frames()).
 * Returns the id, or 0 on ENOMEM. */
uint32_t mt_stacks_add_frame(struct mt_stacks *k, uint32_t parent, const struct mt_frame *f);

/* mt_stacks_set_frame() - define id @id as frame @f called from @parent
 * (@f as above). Returns 0 or -ENOMEM. */
int mt_stacks_set_frame(struct mt_stacks *k, uint32_t id, uint32_t parent,
			const struct mt_frame *f);

/* mt_stacks_alias() - define id @id as the same frame, with the same
 * parent, as node @of (0: a "<no frames>" frame). Returns 0 or -ENOMEM. */
int mt_stacks_alias(struct mt_stacks *k, uint32_t id, uint32_t of);

/* mt_stacks_drop_frames() - every node of id @from and above undefined
 * and forgotten by mt_stacks_add_frame(), and next_free back to @from:
 * the frame nodes added since next_free was @from taken out, so that the
 * capture may define those ids (@from above every id it defined). */
void mt_stacks_drop_frames(struct mt_stacks *k, uint32_t from);

/* mt_stacks_undefine() - id @id undefined, as if never defined. */
void mt_stacks_undefine(struct mt_stacks *k, uint32_t id);

/* mt_stacks_offset() / mt_stacks_entry() - a Python node's bytecode
 * offset (its line, with lines), and whether its frame is an entry frame:
 * the first one an evaluation loop ran (3.11+: the low bit of the recorded
 * offset or line; before 3.11 every frame is one). */
static inline uint32_t mt_stacks_offset(const struct mt_stacks *k, const struct mt_stack_node *n)
{
	if (k->lines)
		return n->offset >> 1;
	return k->python_hex >= 0x030b0000 ? n->offset & ~1u : n->offset;
}
static inline int mt_stacks_entry(const struct mt_stacks *k, const struct mt_stack_node *n)
{
	return k->python_hex >= 0x030b0000 ? (int)(n->offset & 1) : 1;
}

/* mt_stacks_frame() - the innermost frame of stack @id. */
void mt_stacks_frame(const struct mt_stacks *k, uint32_t id, struct mt_frame *f);

/* mt_stacks_parent() - the stack @id was called from; 0 at the root or
 * for an undefined node. */
static inline uint32_t mt_stacks_parent(const struct mt_stacks *k, uint32_t id)
{
	if (id >= k->nodes_cap || !k->nodes[id].defined)
		return 0;
	return k->nodes[id].parent;
}

/* mt_stacks_walk() - frames of stack @id, innermost first, into
 * @out[0..max). Returns the full depth (0 for stack 0), which may be more
 * than @max; a trie that loops stops at nodes_cap + 1 frames. */
size_t mt_stacks_walk(const struct mt_stacks *k, uint32_t id, struct mt_frame *out, size_t max);

/* mt_stacks_cut() - a Tracker's stacks start at the frame that entered
 * it: every Python node called from the node at @depth (1 = outermost)
 * whose (file, line) chain, outermost first, hashes to @hash becomes
 * outermost itself. The hash of a chain: h = 0, then for each frame
 * h = h * 1000003 ^ crc32(file) ^ line * 0x9E3779B1 (mod 2^64), as
 * python/memtrace/tracker.py computes it. Native frames (frame nodes
 * whose frame is native: a hybrid stack's) do not count in the chain,
 * and go with the frames above the cut; a hybrid stack's Python frames
 * count as Python nodes do. It may be called again after
 * more definitions (a capture read a part at a time): the nodes it cut
 * before get their parents back first, so that the trie is cut as if
 * all of it had been there the first time. Returns 0 or -ENOMEM. */
int mt_stacks_cut(struct mt_stacks *k, uint32_t depth, uint64_t hash);
/* mt_stacks_uncut() - the parents mt_stacks_cut() changed, given back. */
void mt_stacks_uncut(struct mt_stacks *k);

void mt_stacks_release(struct mt_stacks *k);

#endif /* MT_READER_STACKS_H */
