/* SPDX-License-Identifier: MIT */
#ifndef MT_FORMAT_NODES_H
#define MT_FORMAT_NODES_H
/*
 * The node column's coding (docs/format.md section 2.2): a trie node
 * record (STACK; with MT_NODES_NATIVE also NATIVE and HYBRID) stored as
 * its difference from the chunk's records before it. A new Python frame
 * is mostly a sibling or a child of the one made before it; a new native
 * chain mostly a child of the node made before it at a return address
 * that followed the parent's address before (an interpreter's recursion
 * repeats its few addresses over and over); a HYBRID record pairs the
 * stack and chain made just before it. The coding state starts afresh in
 * every chunk (mt_nodes_begin()), so a chunk's columns still split and
 * join on their own.
 * Pure functions over byte buffers, no I/O, no malloc: they run inside
 * the payload's writer as well as in the reader. The records themselves
 * are format/record.h's; format/columns.h puts the segments in the
 * node column.
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint8_t */

#include "format/record.h" /* MT_REC_STACK, MT_REC_NATIVE, MT_REC_HYBRID */

/* Options of a chunk's columns. MT_NODES_NATIVE (the capture header's
 * MT_HDR_NATIVE_NODES): NATIVE and HYBRID records are node records too.
 * MT_NODES_COLUMNS (format version 7 with native stacks): the chunk data
 * have eight columns, the node segments of NATIVE and HYBRID records in
 * two of their own (format/columns.h), apart from those of STACK records;
 * and a STACK record's id is coded against the last node record's, of any
 * type, as theirs are. */
#define MT_NODES_NATIVE 1u
#define MT_NODES_COLUMNS 2u

#define MT_NODES_RECENT 16   /* the native addresses met last */
#define MT_NODES_SUCC 1024   /* addresses that followed an address */
#define MT_NODES_CHAINS 1024  /* the native chains of the HYBRID records met last */
#define MT_NODE_SEG_MAX 32   /* a node segment never takes more */
#define MT_NODE_REC_MAX 32   /* nor a record rebuilt from one */
#define MT_NODE_VERBATIM 3   /* the segment of a record stored as it is */

struct mt_nodes {
	unsigned opts; /* MT_NODES_* */
	uint32_t last; /* id of the last record coded in the column */
	struct { uint32_t id, parent, code, offset; } stack; /* the previous STACK */
	struct {
		uint32_t id, parent;
		uint64_t ip, pip; /* its address, and its parent's if known */
		int pip_known;
	} native;                                 /* the previous NATIVE */
	struct { uint32_t python, native; } hybrid; /* the previous HYBRID */
	uint32_t nrecent;
	uint64_t recent[MT_NODES_RECENT]; /* most recent first */
	struct { uint64_t key, ip; } succ[MT_NODES_SUCC];
	uint32_t nchains;
	uint32_t chains[MT_NODES_CHAINS]; /* most recent first */
};

/* mt_nodes_begin() - the state at the start of a chunk. */
void mt_nodes_begin(struct mt_nodes *s, unsigned opts);

/* mt_nodes_coded() - whether a record whose head byte is @head takes a
 * node segment. */
static inline int mt_nodes_coded(const struct mt_nodes *s, uint8_t head)
{
	return head == MT_REC_STACK ||
	       ((s->opts & MT_NODES_NATIVE) && (head == MT_REC_NATIVE || head == MT_REC_HYBRID));
}

/* mt_node_pack() - the node segment of the record [@rec, @rec+@len)
 * (mt_nodes_coded() of its head) into @p (MT_NODE_SEG_MAX bytes).
 * Returns its length, or 0 if the record is to be stored verbatim: it
 * does not decode, is not in the shortest form mt_rec_encode() writes,
 * or coding it would take more room than storing it. */
size_t mt_node_pack(struct mt_nodes *s, uint8_t *p, const uint8_t *rec, size_t len);

/* mt_node_unpack() - undoes mt_node_pack(): the record of head byte
 * @head from the segment at *@q (before @end) after its flag byte @flag
 * (not MT_NODE_VERBATIM), into @p (MT_NODE_REC_MAX bytes). Returns the
 * record's length, or 0 if the segment does not decode. */
size_t mt_node_unpack(struct mt_nodes *s, uint8_t *p, uint8_t head, unsigned flag,
		      const uint8_t **q, const uint8_t *end);

#endif /* MT_FORMAT_NODES_H */
