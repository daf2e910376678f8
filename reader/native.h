/* SPDX-License-Identifier: MIT */
#ifndef MT_READER_NATIVE_H
#define MT_READER_NATIVE_H
/*
 * Native and hybrid stacks in the reader. A capture made with native
 * stacks holds module maps (MODULE records, one generation each), a trie
 * of return addresses (NATIVE records, each resolved against the map in
 * force where it was read) and hybrid stacks (HYBRID records: a native
 * chain under a Python stack), which its allocations name.
 *
 * For a view of what was read, mt_native_resolve() symbolizes every return
 * address the hybrid stacks use (symbols.h: elfutils, on this machine,
 * never in the target) and defines each hybrid stack in the stack trie
 * (stacks.h) as its Python frames followed by the native frames that the
 * innermost Python frame called: the interpreter's own frames, from its
 * evaluation loop outwards, are cut, as the Python frames stand for them.
 * Where C called Python again (more than one evaluation loop, paired with
 * the runs of Python frames that end with an entry frame), the native
 * frames between two loops go between their runs, but for the
 * interpreter's own, which the Python frames stand for.
 * A chain with no evaluation loop in it (a thread started from C) is
 * shown whole; a Python stack whose evaluation loop cannot be found (no
 * symbols for the interpreter) is shown without native frames.
 *
 * The stacks of a capture read a part at a time are resolved again at
 * each view: mt_native_unresolve() takes what the last resolution put in
 * the trie out of it (the capture's later records may define its ids),
 * and mt_native_resolve() puts in it the stacks of everything read. The
 * return addresses keep what they were symbolized to (each is looked up
 * once), so that a resolution again costs the trie's frame nodes, not
 * the symbols; the trie gets the nodes and ids that one resolution of
 * the same records at once gives.
 *
 * Zero-initialised is empty. Ownership: the frames given to the stack
 * trie live until mt_native_release(), which must come after the trie's.
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint32_t */

#include "format/record.h"
#include "reader/stacks.h"

struct mt_symbols;
struct mt_nmodule;
struct mt_nnode;
struct mt_nhybrid;
struct mt_nframes;

struct mt_native {
	struct mt_nmodule *mods; /* every MODULE record, in order */
	uint32_t n_mods, cap_mods;
	uint32_t gen;            /* the generation in force */
	struct mt_nnode *nodes;  /* by id */
	uint32_t cap_nodes;
	struct mt_nhybrid *hyb;  /* HYBRID records */
	uint32_t n_hyb, cap_hyb;
	uint32_t max_id;         /* largest NATIVE or HYBRID id */
	struct mt_symbols *sym;
	struct mt_frame *frames; /* resolved frames, by node (see native.c) */
	uint32_t n_frames, cap_frames;
	char **strs;             /* names made here: addresses in no module */
	uint32_t n_strs, cap_strs;
	uint32_t *pyf;           /* by Python node: its frame in the pool + 1 */
	uint32_t cap_pyf;
	int interp;              /* symbols handle of the interpreter's module; -1 (set
				  * by mt_native_resolve) until an evaluation loop is seen */
	uint64_t unresolved;     /* return addresses in no module of their map */
	uint32_t frames_from;    /* the first id the resolution in the trie gave a frame */
	uint32_t n_aliased;      /* hybrid stacks (n->hyb[0..)) it defined there */
	int in_trie;             /* the trie holds a resolution (mt_native_unresolve()) */
	uint32_t unpaired;       /* hybrid stacks of several Python runs that the last
				  * resolution gave without the C frames between them */
	int tracker;             /* a Tracker's capture: its stacks are cut at the frame
				  * that entered it, their loops outside left over */
};

/* mt_native_module() / mt_native_node() / mt_native_hybrid() - a record
 * as it is read. Return 1 for a new id (node, hybrid), 0 for one defined
 * again or a module, or -ENOMEM. */
int mt_native_module(struct mt_native *n, const struct mt_rec_module *m);
int mt_native_node(struct mt_native *n, const struct mt_rec_native *r);
int mt_native_hybrid(struct mt_native *n, const struct mt_rec_hybrid *r);

/* mt_native_resolve() - define every hybrid stack in @k (see above), or,
 * with @python_only, as its Python stack alone, the last resolution
 * taken out first. Returns 0 or -ENOMEM (@k may then hold a part: take
 * it out with mt_native_unresolve(), or release it). */
int mt_native_resolve(struct mt_native *n, struct mt_stacks *k, int python_only);

/* mt_native_unresolve() - what the last mt_native_resolve() defined in
 * @k (its frame nodes, the hybrid stacks' ids) undefined again, @k as the
 * capture's records left it, the symbolized frames kept: call it before
 * reading more records into @k. A no-op when nothing is resolved. */
void mt_native_unresolve(struct mt_native *n, struct mt_stacks *k);

/* mt_native_chain() - the native chain of hybrid stack @id alone, its
 * frames innermost first into @out[0..max) (the interpreter's included;
 * symbolized by mt_native_resolve() unless it was Python-only), its
 * native leaf id and the module map generation it resolves in. Returns
 * how many frames there are (0 if @id is no hybrid stack). */
size_t mt_native_chain(const struct mt_native *n, uint32_t id, struct mt_frame *out, size_t max,
		       uint32_t *leaf, uint32_t *gen);

/* mt_native_hybrid_parts() - if @id is a hybrid stack, its Python stack
 * and its native leaf (0: no native frames) into *@python and *@leaf, and
 * 1; else 0. */
int mt_native_hybrid_parts(const struct mt_native *n, uint32_t id, uint32_t *python,
			   uint32_t *leaf);

/* mt_native_merged() - hybrid stack @id as memray's hybrid_stack_trace()
 * has it, innermost first into @out[0..max): every frame of its native
 * chain, with each evaluation loop's own frame replaced by the run of
 * Python frames (of @k) it was running, paired from the innermost out,
 * and the frames inlined into the loop kept inside that run. The chain
 * ends at a loop left over once the Python frames are used up (frames
 * cut above a Tracker: those outside it are not shown); a Python stack
 * left over once the loops are (an interpreter without symbols) is given
 * alone; a chain with no Python stack (a thread started from C) whole.
 * Nothing is hidden. Returns the full depth (0 if @id is no hybrid
 * stack), which may be more than @max. */
size_t mt_native_merged(const struct mt_native *n, const struct mt_stacks *k, uint32_t id,
			struct mt_frame *out, size_t max);

/* Symbolization figures, after mt_native_resolve(). */
struct mt_native_stats {
	uint64_t addresses;   /* distinct return addresses resolved */
	uint64_t unresolved;  /* ... with no symbol (module+offset shown) */
	uint32_t modules_missing; /* modules whose file could not be found */
	uint32_t unpaired;    /* hybrid stacks whose Python runs did not match their
			       * evaluation loops: shown as their Python stack over
			       * their innermost C frames */
};
void mt_native_stats(const struct mt_native *n, struct mt_native_stats *st);

void mt_native_release(struct mt_native *n);

#endif /* MT_READER_NATIVE_H */
