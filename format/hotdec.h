/* SPDX-License-Identifier: MIT */
#ifndef MT_FORMAT_HOTDEC_H
#define MT_FORMAT_HOTDEC_H
/*
 * The hot records' decoding once their fields are read: an ALLOC or FREE
 * record's km byte and varints against its thread's struct mt_delta
 * (docs/format.md section 3.1). mt_rec_decode() reads the fields from a
 * record's row; the reader's loop reads them straight from a chunk's
 * columns (format/columns.h) and calls these inline, so that an event is
 * not joined into a row and parsed again. Like format/record.h: no I/O,
 * no malloc.
 */
#include <stdint.h> /* uint64_t */

#include "format/error.h"  /* MT_ECORRUPT */
#include "format/record.h" /* struct mt_delta, struct mt_record */

/* The allocator kinds that have a name (mt_allocator_name() != NULL), as a
 * mask of bits by kind. */
#define MT__KIND_BIT(name, val, str, isfree) | (1u << (val))
#define MT_NAMED_KINDS (0u MT_ALLOCATORS(MT__KIND_BIT))

/* mt__hot_km_ok() - whether allocator kind @kind and address mode @mode
 * (km's, or for a raw kind the ones km and xm name) may start a record of
 * @type (MT_REC_ALLOC or MT_REC_FREE): a kind of its own, an address mode
 * that the type has (never MT_ADDR_EXT). */
static inline int mt__hot_km_ok(unsigned type, unsigned kind, unsigned mode)
{
	if (type == MT_REC_ALLOC)
		return ((MT_NAMED_KINDS & ~MT_FREE_KINDS) >> kind & 1) &&
		       !(mode > MT_ADDR_NEXT && mode < MT_ADDR_ALIGNED);
	return (MT_FREE_KINDS >> kind & 1) &&
	       !(mode >= MT_LIVE_RING && mode != MT_ADDR_SLOT && mode < MT_ADDR_ALIGNED);
}

/* mt__hot_decode() - the record of @type (@kind and @mode, passed by
 * mt__hot_km_ok()) whose fields are @zaddr (when its mode is
 * MT_ADDR_SLOT or above), @size (an ALLOC or a munmap FREE; else 0) and
 * @zstack (an ALLOC) into @r, and @d moved past it. Returns 0, or
 * -MT_ECORRUPT with @d left as it was. @r's type and tidx are the
 * caller's. */
static inline int mt__hot_decode(struct mt_delta *d, struct mt_record *r, unsigned type,
				 unsigned kind, unsigned mode, uint64_t zaddr, uint64_t size,
				 uint64_t zstack)
{
	uint64_t addr;

	if (type == MT_REC_ALLOC && !mt_size_possible(size)) /* no allocation that big */
		return -MT_ECORRUPT;
	if (type == MT_REC_ALLOC) {
		int64_t s = zstack >> 34 ? -1 : (int64_t)d->stack + mt_unzigzag(zstack);
		if (s < 0 || s > UINT32_MAX)
			return -MT_ECORRUPT;
		/* a delta is from the last ALLOC of the size class; a ring
		 * entry is named by its age */
		unsigned c = mt_size_class(size);
		if (mode >= MT_ADDR_ALIGNED) {
			int64_t dv = mt_unzigzag(zaddr);
			addr = d->last[c] + (mode == MT_ADDR_ALIGNED ? (uint64_t)dv * 16 : (uint64_t)dv);
		} else if (mode == MT_ADDR_REUSED) {
			if (!d->reuse || c >= MT_SMALL_CLASSES || !d->reuse->n[c])
				return -MT_ECORRUPT;
			addr = mt__reused(d->reuse, c);
		} else if (mode == MT_ADDR_NEXT) {
			if (c >= MT_SMALL_CLASSES)
				return -MT_ECORRUPT;
			addr = d->last[c] + 16 * c;
		} else {
			addr = d->freed[(d->freed_pos + 2 * MT_FREED_RING - 1 - mode) % MT_FREED_RING];
			if (!addr)
				return -MT_ECORRUPT;
			mt__ring_close(d->freed, NULL, MT_FREED_RING, &d->freed_pos, mode);
		}
		/* the whole record is read: only now the state moves */
		d->last[c] = addr;
		d->stack = (uint32_t)s;
		d->live[d->live_pos] = addr;
		d->live_pos = (uint8_t)(d->live_pos + 1 == MT_LIVE_RING ? 0 : d->live_pos + 1);
		if (d->reuse)
			mt__reuse_alloc(d->reuse, c, addr);
		r->alloc.kind = (uint8_t)kind;
		r->alloc.addr = addr;
		r->alloc.size = size;
		r->alloc.stack = (uint32_t)s;
		return 0;
	}
	/* a delta is from the last FREE of the kind coded as a delta (a raw
	 * free's is free's) */
	uint64_t *prev = &d->free_addr[mt__free_base(mt_allocator_is_raw(kind) ? MT_ALLOC_FREE
									   : kind)];
	unsigned block = 0;
	if (mode >= MT_ADDR_ALIGNED) {
		int64_t dv = mt_unzigzag(zaddr);
		addr = *prev + (mode == MT_ADDR_ALIGNED ? (uint64_t)dv * 16 : (uint64_t)dv);
		*prev = addr;
	} else if (mode == MT_ADDR_SLOT) {
		int64_t dv = mt_unzigzag(zaddr);
		if (!d->reuse || dv < -MT_BLOCK_SLOTS / 2 || dv >= MT_BLOCK_SLOTS / 2)
			return -MT_ECORRUPT;
		block = (unsigned)((int64_t)d->free_slot + MT_BLOCK_SLOTS + dv) % MT_BLOCK_SLOTS;
		addr = d->reuse->block[block];
		if (!addr)
			return -MT_ECORRUPT;
		d->free_slot = (uint16_t)block;
	} else {
		addr = d->live[(d->live_pos + 2 * MT_LIVE_RING - 1 - mode) % MT_LIVE_RING];
		if (!addr)
			return -MT_ECORRUPT;
		mt__ring_close(d->live, NULL, MT_LIVE_RING, &d->live_pos, mode);
	}
	d->freed[d->freed_pos] = addr;
	d->freed_pos = (uint8_t)(d->freed_pos + 1 == MT_FREED_RING ? 0 : d->freed_pos + 1);
	if (d->reuse)
		mt__reuse_free(d->reuse, addr);
	r->free.kind = (uint8_t)kind;
	r->free.addr = addr;
	r->free.size = size;
	return 0;
}

#endif /* MT_FORMAT_HOTDEC_H */
