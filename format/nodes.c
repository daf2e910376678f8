/* SPDX-License-Identifier: MIT */
/*
 * The node column's coding (format/nodes.h). Runs inside the payload's
 * writer as well as in the reader: no I/O, no allocation, no stdio.
 */
#include "format/nodes.h"
#include "format/record.h"
#include "format/varint.h"

#include <string.h> /* memcmp, memcpy, memmove, memset */

/* A segment is a flag byte, then the varints it calls for. The low two
 * bits of every flag say where a parent is (NODE_VERBATIM: nowhere, the
 * record is stored as it is, its body in the body column, and leaves the
 * state alone); NODE_NEXT_ID: the id is one past the one before, else a
 * zigzag varint of the difference comes first.
 * STACK: the parent is NODE_SIBLING (the previous STACK's parent),
 * NODE_CHILD (the previous STACK) or NODE_FAR (a zigzag varint of id -
 * parent follows); NODE_SAME_CODE: the code is the previous STACK's and
 * the offset a zigzag varint of the difference from its offset, else a
 * zigzag varint of the code's difference comes before a plain offset.
 * NATIVE: the parent as for STACK, from the previous NATIVE; then the
 * address, per bits 3-4: IP_SUCC, the one that followed the parent's
 * address last (when that is known); IP_RECENT, the entry of a varint
 * index in the addresses met last; IP_DELTA, a zigzag varint of its
 * difference from the previous NATIVE's.
 * HYBRID: the native chain per the low two bits, REF_LAST (the previous
 * NATIVE), REF_PREV (the previous HYBRID's) or REF_FAR (a zigzag varint
 * of id - native follows), or with HYBRID_CHAIN (the low bits 0) a varint
 * index in the chains of the HYBRID records met last; the Python stack
 * per bits 3-4, the same with the previous STACK, after the chain's
 * varint. */
enum {
	NODE_SIBLING = 0,
	NODE_CHILD = 1,
	NODE_FAR = 2,
	NODE_PARENT = 3, /* mask */
	NODE_NEXT_ID = 1 << 2,
	NODE_SAME_CODE = 1 << 3,
	IP_SUCC = 0,
	IP_RECENT = 1,
	IP_DELTA = 2,
	REF_LAST = 0,
	REF_PREV = 1,
	REF_FAR = 2,
};
#define FIELD2(flag) (((flag) >> 3) & 3u)
#define HYBRID_CHAIN (1u << 5) /* the native chain is a varint index in chains */

void mt_nodes_begin(struct mt_nodes *s, unsigned opts)
{
	memset(s, 0, sizeof(*s));
	s->opts = opts;
}

static inline size_t put_zigzag(uint8_t *p, int64_t v)
{
	return mt_varint_put(p, mt_zigzag(v));
}

/* A zigzag varint from [*@q, @end) added to @base: the result, which
 * must be a u32, in *@out. Returns 0 or -1. */
static inline int get_u32_delta(const uint8_t **q, const uint8_t *end, int64_t base,
				uint32_t *out)
{
	uint64_t z;
	if (mt_varint_get(q, end, &z) < 0)
		return -1;
	int64_t d = mt_unzigzag(z);
	if (d < -(int64_t)UINT32_MAX - 1 || d > (int64_t)UINT32_MAX)
		return -1;
	int64_t v = base + d;
	if (v < 0 || v > UINT32_MAX)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

/* @id - a zigzag varint from [*@q, @end), a u32 in *@out. */
static inline int get_below(const uint8_t **q, const uint8_t *end, uint32_t id, uint32_t *out)
{
	uint64_t z;
	if (mt_varint_get(q, end, &z) < 0 || z >> 34)
		return -1;
	int64_t v = (int64_t)id - mt_unzigzag(z);
	if (v < 0 || v > UINT32_MAX)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

/* The id: NODE_NEXT_ID, or a difference from @prev + 1. */
static size_t put_id(uint8_t *p, unsigned *flag, uint32_t id, uint32_t prev)
{
	if (id == prev + 1u) {
		*flag |= NODE_NEXT_ID;
		return 0;
	}
	return put_zigzag(p, (int64_t)id - ((int64_t)prev + 1));
}

static int get_id(const uint8_t **q, const uint8_t *end, unsigned flag, uint32_t prev,
		  uint32_t *id)
{
	if (flag & NODE_NEXT_ID) {
		if (prev == UINT32_MAX)
			return -1;
		*id = prev + 1;
		return 0;
	}
	return get_u32_delta(q, end, (int64_t)prev + 1, id);
}

/* The record of @r in its shortest form, into @p. Returns its length. */
static size_t rebuild(uint8_t p[MT_NODE_REC_MAX], const struct mt_record *r)
{
	ssize_t n = mt_rec_encode(p, MT_NODE_REC_MAX, r, NULL);
	return n > 0 ? (size_t)n : 0;
}

/* ------------------------------------------------------------------------
 * Native addresses: the ones met last, and what followed an address.
 * ---------------------------------------------------------------------- */
static size_t succ_slot(uint64_t key)
{
	return (size_t)((key * 0x9e3779b97f4a7c15ull) >> 54) & (MT_NODES_SUCC - 1);
}

/* The address that followed @key last, 0 if none is known. */
static uint64_t succ_of(const struct mt_nodes *s, uint64_t key)
{
	size_t j = succ_slot(key);
	return s->succ[j].key == key ? s->succ[j].ip : 0;
}

static int recent_index(const struct mt_nodes *s, uint64_t ip)
{
	for (uint32_t i = 0; i < s->nrecent; i++)
		if (s->recent[i] == ip)
			return (int)i;
	return -1;
}

/* The parent @parent's address, if the state knows it. */
static int parent_ip(const struct mt_nodes *s, uint32_t parent, uint64_t *pip)
{
	if (parent == 0) {
		*pip = 0;
	} else if (parent == s->native.id) {
		*pip = s->native.ip;
	} else if (parent == s->native.parent && s->native.pip_known) {
		*pip = s->native.pip;
	} else {
		return 0;
	}
	return 1;
}

/* The NATIVE record @v is the previous one now. */
static void native_done(struct mt_nodes *s, const struct mt_rec_native *v)
{
	uint64_t pip = 0;
	int known = parent_ip(s, v->parent, &pip);
	if (known) {
		size_t j = succ_slot(pip);
		s->succ[j].key = pip;
		s->succ[j].ip = v->ip;
	}
	int i = recent_index(s, v->ip);
	uint32_t n = i >= 0 ? (uint32_t)i : (s->nrecent < MT_NODES_RECENT ? s->nrecent++ :
					    MT_NODES_RECENT - 1);
	memmove(s->recent + 1, s->recent, n * sizeof(*s->recent));
	s->recent[0] = v->ip;
	s->native.id = v->id;
	s->native.parent = v->parent;
	s->native.ip = v->ip;
	s->native.pip = pip;
	s->native.pip_known = known;
	s->last = v->id;
}

/* The id a STACK record's is one past, or a difference from one past:
 * the previous STACK's; with MT_NODES_COLUMNS (version 7), the last node
 * record's of any type, as for NATIVE and HYBRID records: a new Python
 * frame comes right after the native chain and the pair before it. */
static uint32_t stack_id_base(const struct mt_nodes *s)
{
	return s->opts & MT_NODES_COLUMNS ? s->last : s->stack.id;
}

/* ------------------------------------------------------------------------
 * Packing.
 * ---------------------------------------------------------------------- */
static size_t pack_stack(struct mt_nodes *s, uint8_t *seg, const struct mt_rec_stack *v)
{
	unsigned flag = 0;
	size_t n = 1;
	n += put_id(seg + n, &flag, v->id, stack_id_base(s));
	if (v->parent == s->stack.parent) {
		flag |= NODE_SIBLING;
	} else if (v->parent == s->stack.id) {
		flag |= NODE_CHILD;
	} else {
		flag |= NODE_FAR;
		n += put_zigzag(seg + n, (int64_t)v->id - (int64_t)v->parent);
	}
	if (v->code == s->stack.code) {
		flag |= NODE_SAME_CODE;
		n += put_zigzag(seg + n, (int64_t)v->offset - (int64_t)s->stack.offset);
	} else {
		n += put_zigzag(seg + n, (int64_t)v->code - (int64_t)s->stack.code);
		n += mt_varint_put(seg + n, v->offset);
	}
	seg[0] = (uint8_t)flag;
	return n;
}

static size_t pack_native(struct mt_nodes *s, uint8_t *seg, const struct mt_rec_native *v)
{
	unsigned flag = 0;
	size_t n = 1;
	uint64_t pip;
	n += put_id(seg + n, &flag, v->id, s->last);
	if (v->parent == s->native.parent) {
		flag |= NODE_SIBLING;
	} else if (v->parent == s->native.id) {
		flag |= NODE_CHILD;
	} else {
		flag |= NODE_FAR;
		n += put_zigzag(seg + n, (int64_t)v->id - (int64_t)v->parent);
	}
	int k;
	if (parent_ip(s, v->parent, &pip) && v->ip && succ_of(s, pip) == v->ip) {
		flag |= IP_SUCC << 3;
	} else if ((k = recent_index(s, v->ip)) >= 0) {
		flag |= IP_RECENT << 3;
		n += mt_varint_put(seg + n, (uint64_t)k);
	} else {
		flag |= IP_DELTA << 3;
		n += mt_varint_put(seg + n, mt_zigzag((int64_t)(v->ip - s->native.ip)));
	}
	seg[0] = (uint8_t)flag;
	return n;
}

/* A reference to @v: REF_LAST if it is @last, REF_PREV if @prev, else
 * REF_FAR and its distance below @id. */
static size_t put_ref(uint8_t *p, unsigned *ref, uint32_t v, uint32_t last, uint32_t prev,
		      uint32_t id)
{
	if (v == last) {
		*ref = REF_LAST;
		return 0;
	}
	if (v == prev) {
		*ref = REF_PREV;
		return 0;
	}
	*ref = REF_FAR;
	return put_zigzag(p, (int64_t)id - (int64_t)v);
}

/* The index of @native among the chains of the HYBRID records met last,
 * or -1. */
static int chain_index(const struct mt_nodes *s, uint32_t native)
{
	for (uint32_t i = 0; i < s->nchains; i++)
		if (s->chains[i] == native)
			return (int)i;
	return -1;
}

/* The HYBRID record @v is the previous one now. */
static void hybrid_done(struct mt_nodes *s, const struct mt_rec_hybrid *v)
{
	int i = chain_index(s, v->native);
	uint32_t n = i >= 0 ? (uint32_t)i : (s->nchains < MT_NODES_CHAINS ? s->nchains++ :
					    MT_NODES_CHAINS - 1);
	memmove(s->chains + 1, s->chains, n * sizeof(*s->chains));
	s->chains[0] = v->native;
	s->hybrid.python = v->python;
	s->hybrid.native = v->native;
	s->last = v->id;
}

static size_t pack_hybrid(struct mt_nodes *s, uint8_t *seg, const struct mt_rec_hybrid *v)
{
	unsigned flag = 0, native, python;
	size_t n = 1;
	int k;
	n += put_id(seg + n, &flag, v->id, s->last);
	if (v->native != s->native.id && v->native != s->hybrid.native &&
	    (k = chain_index(s, v->native)) >= 0) {
		native = HYBRID_CHAIN;
		n += mt_varint_put(seg + n, (uint64_t)k);
	} else {
		n += put_ref(seg + n, &native, v->native, s->native.id, s->hybrid.native, v->id);
	}
	n += put_ref(seg + n, &python, v->python, s->stack.id, s->hybrid.python, v->id);
	seg[0] = (uint8_t)(flag | native | python << 3);
	return n;
}

size_t mt_node_pack(struct mt_nodes *s, uint8_t *p, const uint8_t *rec, size_t len)
{
	struct mt_record r;
	uint8_t canon[MT_NODE_REC_MAX], seg[MT_NODE_SEG_MAX];
	size_t n;
	if (!mt_nodes_coded(s, rec[0]) || mt_rec_decode(rec, len, &r, NULL, NULL) != (ssize_t)len ||
	    rebuild(canon, &r) != len || memcmp(canon, rec, len) != 0)
		return 0;
	switch (r.type) {
	case MT_REC_STACK:
		n = pack_stack(s, seg, &r.stack);
		break;
	case MT_REC_NATIVE:
		n = pack_native(s, seg, &r.native);
		break;
	default:
		n = pack_hybrid(s, seg, &r.hybrid);
		break;
	}
	if (n > len) /* the verbatim form: a flag byte and the body segment */
		return 0;
	memcpy(p, seg, n);
	switch (r.type) {
	case MT_REC_STACK:
		s->stack.id = r.stack.id;
		s->stack.parent = r.stack.parent;
		s->stack.code = r.stack.code;
		s->stack.offset = r.stack.offset;
		s->last = r.stack.id;
		break;
	case MT_REC_NATIVE:
		native_done(s, &r.native);
		break;
	default:
		hybrid_done(s, &r.hybrid);
		break;
	}
	return n;
}

/* ------------------------------------------------------------------------
 * Unpacking.
 * ---------------------------------------------------------------------- */
static int unpack_stack(struct mt_nodes *s, struct mt_rec_stack *v, unsigned flag,
			const uint8_t **q, const uint8_t *end)
{
	uint64_t off;
	if (flag & ~(unsigned)(NODE_PARENT | NODE_NEXT_ID | NODE_SAME_CODE) ||
	    get_id(q, end, flag, stack_id_base(s), &v->id) < 0)
		return -1;
	switch (flag & NODE_PARENT) {
	case NODE_SIBLING:
		v->parent = s->stack.parent;
		break;
	case NODE_CHILD:
		v->parent = s->stack.id;
		break;
	default:
		if (get_below(q, end, v->id, &v->parent) < 0)
			return -1;
	}
	if (flag & NODE_SAME_CODE) {
		v->code = s->stack.code;
		if (get_u32_delta(q, end, s->stack.offset, &v->offset) < 0)
			return -1;
	} else {
		if (get_u32_delta(q, end, s->stack.code, &v->code) < 0 ||
		    mt_varint_get(q, end, &off) < 0 || off > UINT32_MAX)
			return -1;
		v->offset = (uint32_t)off;
	}
	s->stack.id = v->id;
	s->stack.parent = v->parent;
	s->stack.code = v->code;
	s->stack.offset = v->offset;
	s->last = v->id;
	return 0;
}

static int unpack_native(struct mt_nodes *s, struct mt_rec_native *v, unsigned flag,
			 const uint8_t **q, const uint8_t *end)
{
	uint64_t pip, z;
	if (flag >> 5 || get_id(q, end, flag, s->last, &v->id) < 0)
		return -1;
	switch (flag & NODE_PARENT) {
	case NODE_SIBLING:
		v->parent = s->native.parent;
		break;
	case NODE_CHILD:
		v->parent = s->native.id;
		break;
	default:
		if (get_below(q, end, v->id, &v->parent) < 0)
			return -1;
	}
	switch (FIELD2(flag)) {
	case IP_SUCC:
		if (!parent_ip(s, v->parent, &pip) || !(v->ip = succ_of(s, pip)))
			return -1;
		break;
	case IP_RECENT:
		if (mt_varint_get(q, end, &z) < 0 || z >= s->nrecent)
			return -1;
		v->ip = s->recent[z];
		break;
	case IP_DELTA:
		if (mt_varint_get(q, end, &z) < 0)
			return -1;
		v->ip = s->native.ip + (uint64_t)mt_unzigzag(z);
		break;
	default:
		return -1;
	}
	native_done(s, v);
	return 0;
}

static int get_ref(const uint8_t **q, const uint8_t *end, unsigned ref, uint32_t last,
		   uint32_t prev, uint32_t id, uint32_t *v)
{
	switch (ref) {
	case REF_LAST:
		*v = last;
		return 0;
	case REF_PREV:
		*v = prev;
		return 0;
	case REF_FAR:
		return get_below(q, end, id, v);
	default:
		return -1;
	}
}

static int unpack_hybrid(struct mt_nodes *s, struct mt_rec_hybrid *v, unsigned flag,
			 const uint8_t **q, const uint8_t *end)
{
	uint64_t k;
	if (flag >> 6 || get_id(q, end, flag, s->last, &v->id) < 0)
		return -1;
	if (flag & HYBRID_CHAIN) {
		if (flag & NODE_PARENT || mt_varint_get(q, end, &k) < 0 || k >= s->nchains)
			return -1;
		v->native = s->chains[k];
	} else if (get_ref(q, end, flag & NODE_PARENT, s->native.id, s->hybrid.native, v->id,
			   &v->native) < 0) {
		return -1;
	}
	if (get_ref(q, end, FIELD2(flag), s->stack.id, s->hybrid.python, v->id, &v->python) < 0)
		return -1;
	hybrid_done(s, v);
	return 0;
}

size_t mt_node_unpack(struct mt_nodes *s, uint8_t *p, uint8_t head, unsigned flag,
		      const uint8_t **q, const uint8_t *end)
{
	struct mt_record r = { .type = head };
	int e;
	if (!mt_nodes_coded(s, head))
		return 0;
	if (head == MT_REC_STACK)
		e = unpack_stack(s, &r.stack, flag, q, end);
	else if (head == MT_REC_NATIVE)
		e = unpack_native(s, &r.native, flag, q, end);
	else
		e = unpack_hybrid(s, &r.hybrid, flag, q, end);
	return e < 0 ? 0 : rebuild(p, &r);
}
