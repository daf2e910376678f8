/* SPDX-License-Identifier: MIT */
#ifndef MT_FORMAT_COLUMNS_H
#define MT_FORMAT_COLUMNS_H
/*
 * Chunk columns. A chunk's records are stored as columns, one after the
 * other, so that LZ4 sees alike bytes together: the heads and km bytes of
 * all records, then all address deltas, sizes, stack deltas, STACK
 * definitions and the other length-prefixed records' bodies. Every record
 * is the concatenation of one segment per column, in column order, and the
 * control column tells which segments a record has. A STACK record (and,
 * with MT_NODES_NATIVE, a NATIVE or HYBRID record) is stored as its fields
 * coded against the chunk's records before it (format/nodes.h); that
 * coding starts afresh in every chunk, so a chunk's columns still split
 * and join on their own.
 * The chunk data (raw_len bytes) are: the byte lengths of all columns but
 * the last as varints, then the columns (docs/format.md section 2.1): six
 * up to format version 6; eight from version 7 (MT_NODES_COLUMNS), where
 * the node segments of NATIVE and HYBRID records have a column each, for
 * LZ4 finds more in three columns of one kind each than in their mix.
 *
 * Two ways in: mt_chunk_split() and mt_chunk_join() take whole buffers
 * (a row of records to columns and back), and struct mt_cols builds the
 * columns a record at a time. mt_cols_alloc() and mt_cols_free() are the
 * payload's hot path, called inside its malloc hooks for every event, so
 * they stay static inline here. Like format/record.h: pure functions over
 * byte buffers, no I/O, no malloc, async-signal-safe. The records
 * themselves (their row form and the hot records' coding state) are
 * format/record.h's; format/pack.h codes the columns for the file.
 */
#include <stddef.h>    /* size_t */
#include <stdint.h>    /* uint64_t */
#include <sys/types.h> /* ssize_t */

#include "format/error.h"  /* MT_ECORRUPT */
#include "format/nodes.h"  /* struct mt_nodes, MT_NODES_NATIVE */
#include "format/record.h" /* struct mt_delta, mt__code_alloc */
#include "format/varint.h" /* mt_varint_put */

#define MT_COLUMNS 8    /* at most: version 7's */
#define MT_COLUMNS_V6 6 /* versions 5 and 6 */
#define MT_COLUMNS_DIR_MAX 35 /* the directory of seven varint lengths < 2^32 */

/* mt_chunk_split() - the columns of the whole records [@src, @src+@len)
 * into @dst (>= MT_SPLIT_MAX(@len) bytes), in one pass that uses @scratch
 * (>= MT_SPLIT_SCRATCH(@len) bytes); *@events (if not NULL) grows by the
 * number of ALLOC and FREE records. Returns the columns' length, or
 * -MT_ECORRUPT if @src does not parse as records (@dst then holds nothing
 * useful). A record's segments are at most one byte longer than the
 * record (a control segment that starts with 0, or the node segment of a
 * node record stored as it is), and a record is at least two bytes.
 * @opts: MT_NODES_NATIVE and MT_NODES_COLUMNS, or 0 (format/nodes.h). */
#define MT_SPLIT_MAX(len) ((size_t)(len) + (size_t)(len) / 2 + MT_COLUMNS_DIR_MAX)
#define MT_SPLIT_SCRATCH(len) ((size_t)(MT_COLUMNS - 1) * (len))
ssize_t mt_chunk_split(uint8_t *dst, uint8_t *scratch, const uint8_t *src, size_t len,
		       uint64_t *events, unsigned opts);

/* Chunk columns built a record at a time, as mt_chunk_split() builds them
 * (the payload's writer codes its events straight into them). The caller
 * keeps the records' length as a row (@len) within the capacity given to
 * mt_cols_begin(): a record goes in only while len plus its own length
 * (MT_REC_HOT_MAX for an event) fits. */
enum {
	MT_COL_CTL,
	MT_COL_ADDR,
	MT_COL_SIZE,
	MT_COL_STACK,
	MT_COL_NODE, /* STACK records' node segments (all of them before version 7) */
	MT_COL_BODY,
	MT_COL_NATIVE, /* from version 7: NATIVE records' node segments */
	MT_COL_HYBRID, /* and HYBRID records' */
};

/* mt_columns() - the number of columns of chunk data split with @opts. */
static inline int mt_columns(unsigned opts)
{
	return opts & MT_NODES_COLUMNS ? MT_COLUMNS : MT_COLUMNS_V6;
}

/* mt_header_columns() - the options a reader splits and joins the chunks
 * of a capture of header @h with: native nodes by its flag; from version
 * 7, eight columns if it has native stacks. */
static inline unsigned mt_header_columns(const struct mt_header *h)
{
	unsigned eight = h->version >= MT_FORMAT_VERSION_COLUMNS && (h->flags & MT_HDR_NATIVE);
	return (h->flags & MT_HDR_NATIVE_NODES ? MT_NODES_NATIVE : 0) | (eight ? MT_NODES_COLUMNS : 0);
}

/* mt_node_column() - the column of the node segment of a record whose
 * head byte is @head (mt_nodes_coded()). */
static inline int mt_node_column(unsigned opts, uint8_t head)
{
	if (!(opts & MT_NODES_COLUMNS) || head == MT_REC_STACK)
		return MT_COL_NODE;
	return head == MT_REC_NATIVE ? MT_COL_NATIVE : MT_COL_HYBRID;
}

struct mt_cols {
	uint8_t *dst;
	uint8_t *base[MT_COLUMNS], *out[MT_COLUMNS];
	struct mt_nodes node; /* the node column's state (docs/format.md section 2.2) */
	uint64_t thread;  /* the thread index of the chunk's last hot record */
	size_t len;       /* the records' length as a row */
	uint64_t events;  /* ALLOC and FREE records */
};

/* mt_cols_begin() - no records yet, for at most @cap bytes of them; the
 * chunk data will be in @dst (>= MT_SPLIT_MAX(@cap) bytes), and @scratch
 * (>= MT_SPLIT_SCRATCH(@cap) bytes) holds columns meanwhile. @opts as
 * for mt_chunk_split(). */
void mt_cols_begin(struct mt_cols *c, uint8_t *dst, uint8_t *scratch, size_t cap, unsigned opts);

/* mt_cols_add() - the whole record at @p (@left bytes from there on).
 * Returns its length, or -MT_ECORRUPT if no record starts there. */
ssize_t mt_cols_add(struct mt_cols *c, const uint8_t *p, size_t left);

/* mt_cols_finish() - the chunk data (directory and columns) into the
 * @dst given to mt_cols_begin(). Returns their length. */
size_t mt_cols_finish(struct mt_cols *c);

/* Whether @km's kind is one a record of @type has: an allocation kind for
 * ALLOC, a free kind (free, munmap, pymalloc_free) for FREE. */
static inline int mt__km_fits(unsigned type, unsigned km)
{
	unsigned kind = km & 0x0f;
	return kind != 0 && (int)((MT_FREE_KINDS >> kind) & 1) == (type == MT_REC_FREE);
}

/* The control segment of a record whose head is @type and @thread
 * (docs/format.md section 2.1), into @p, but for the xm byte that follows
 * a km of mode MT_ADDR_EXT; *@thread_now is the thread index
 * of the chunk's last hot record. A hot record of that thread is its km
 * byte alone (@hot: km + 1, else 0); any other record starts with its
 * head: the byte type << 4 for thread 0, else 0 and the head itself. */
static inline size_t mt__ctl_put(uint8_t *p, uint64_t *thread_now, unsigned type, uint64_t thread,
				 unsigned hot)
{
	size_t n = 0;
	if (!hot || thread != *thread_now || !mt__km_fits(type, hot - 1)) {
		if (thread == 0) {
			p[n++] = (uint8_t)(type << 4);
		} else {
			p[n++] = 0;
			n += mt__rec_head(p + n, type, thread);
		}
	}
	if (hot) {
		p[n++] = (uint8_t)(hot - 1);
		*thread_now = thread;
	}
	return n;
}

static inline void mt__cols_hot(struct mt_cols *c, unsigned type, uint32_t thread,
				struct mt__hot h)
{
	size_t n = (thread < 15 ? 1 : 1 + mt_varint_len(thread)) + 1;
	c->out[MT_COL_CTL] += mt__ctl_put(c->out[MT_COL_CTL], &c->thread, type, thread, h.km + 1);
	if (h.xm) { /* a raw kind: xm follows km (0 known at compile time otherwise) */
		*c->out[MT_COL_CTL]++ = (uint8_t)h.xm;
		n++;
	}
	if (mt__hot_mode(h) >= MT_ADDR_SLOT) {
		size_t k = mt_varint_put(c->out[MT_COL_ADDR], h.zaddr);
		c->out[MT_COL_ADDR] += k;
		n += k;
	}
	c->len += n;
	c->events++;
}

/* An ALLOC's control, then its size and stack columns. */
static inline __attribute__((always_inline)) void
mt__cols_alloc_hot(struct mt_cols *c, uint32_t thread, struct mt__hot h, uint64_t size)
{
	mt__cols_hot(c, MT_REC_ALLOC, thread, h);
	size_t k = mt_varint_put(c->out[MT_COL_SIZE], size);
	c->out[MT_COL_SIZE] += k;
	size_t j = mt_varint_put(c->out[MT_COL_STACK], h.zstack);
	c->out[MT_COL_STACK] += j;
	c->len += k + j;
}

/* mt_cols_alloc() / mt_cols_free() - the record mt_enc_alloc() /
 * mt_enc_free() would make, straight into the columns; @kind below 16
 * (the raw kinds: mt_cols_alloc_raw(), mt_cols_free_raw()). */
static inline void mt_cols_alloc(struct mt_cols *c, struct mt_delta *d, uint32_t thread,
				 unsigned kind, uint64_t addr, uint64_t size, uint32_t stack)
{
	struct mt__hot h = mt__code_alloc(d, kind, addr, size, stack);
	mt__cols_alloc_hot(c, thread, h, size);
}

/* mt_cols_alloc_raw() / mt_cols_free_raw() - the same for a raw kind: the
 * other kinds' coding is left as it is. */
static inline void mt_cols_alloc_raw(struct mt_cols *c, struct mt_delta *d, uint32_t thread,
				     unsigned kind, uint64_t addr, uint64_t size, uint32_t stack)
{
	struct mt__hot h = mt__code_alloc(d, mt_allocator_pymalloc(kind), addr, size, stack);
	mt__hot_raw(&h, kind);
	mt__cols_alloc_hot(c, thread, h, size);
}

static inline void mt_cols_free_raw(struct mt_cols *c, struct mt_delta *d, uint32_t thread,
				    unsigned kind, uint64_t addr)
{
	struct mt__hot h = mt__code_free(d, MT_ALLOC_FREE, addr);
	mt__hot_raw(&h, kind);
	mt__cols_hot(c, MT_REC_FREE, thread, h);
}

static inline void mt_cols_free(struct mt_cols *c, struct mt_delta *d, uint32_t thread,
				unsigned kind, uint64_t addr, uint64_t size)
{
	mt__cols_hot(c, MT_REC_FREE, thread, mt__code_free(d, kind, addr));
	if (kind == MT_ALLOC_MUNMAP) {
		size_t k = mt_varint_put(c->out[MT_COL_SIZE], size);
		c->out[MT_COL_SIZE] += k;
		c->len += k;
	}
}
/*
 * Chunk columns read a record at a time, the reader's way: the usual
 * record, a hot record of the chunk's last hot record's thread, has its
 * fields read straight from the columns (mt_cols_in_hot(), inline, for the
 * reader's loop: format/hotdec.h decodes them); any other record is put
 * together as a row, as mt_chunk_join() makes it (mt_cols_in_row()).
 */
struct mt_cols_in {
	const uint8_t *p[MT_COLUMNS], *end[MT_COLUMNS];
	struct mt_nodes node; /* the node column's coding state */
	uint64_t thread; /* the thread index of the chunk's last hot record */
};

/* A hot record's fields as read from the columns. */
struct mt_cols_hot {
	unsigned type;
	unsigned kind; /* a raw kind (km of mode MT_ADDR_EXT and a valid xm)
			* as it is; MT__COLS_BAD_KIND after an xm that is
			* not valid */
	unsigned mode; /* the address mode, xm's after a km of MT_ADDR_EXT */
	uint64_t zaddr, size, zstack; /* 0 where the record has none */
	int overflow; /* a varint's value does not fit 64 bits: as a row, the
		       * record would run past its end (-MT_ETRUNC) */
};

#define MT__COLS_BAD_KIND 31 /* no kind: neither an ALLOC's nor a FREE's */

/* mt_cols_in_begin() - @in at the first record of chunk data [@src,
 * @src+@len), split with @opts (format/nodes.h). Returns 0, or
 * -MT_ECORRUPT if its directory does not fit. */
int mt_cols_in_begin(struct mt_cols_in *in, const uint8_t *src, size_t len, unsigned opts);

/* mt_cols_in_more() - whether records are left (the control column is not
 * at its end). */
static inline int mt_cols_in_more(const struct mt_cols_in *in)
{
	return in->p[MT_COL_CTL] < in->end[MT_COL_CTL];
}

/* mt_cols_in_end() - whether every column was read to its end: 1, or 0 if
 * the columns do not fit together. */
int mt_cols_in_end(const struct mt_cols_in *in);

/* A hot record's field from [*@p, @end) as mt_chunk_join() copies it: a
 * varint of at most MT_VARINT_MAX bytes that ends before @end. Returns 0,
 * 1 if its value overflows 64 bits, or -1 if it does not end in time. */
static inline int mt__cols_field(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	const uint8_t *q = *p;
	if (q < end && *q < 0x80) {
		*v = *q;
		*p = q + 1;
		return 0;
	}
	size_t max = (size_t)(end - q) < MT_VARINT_MAX ? (size_t)(end - q) : MT_VARINT_MAX;
	uint64_t r = 0;
	int over = 0;
	for (size_t i = 0; i < max; i++) {
		uint8_t b = q[i];
		if (i == MT_VARINT_MAX - 1 && b > 1)
			over = 1;
		r |= (uint64_t)(b & 0x7f) << (7 * i);
		if (!(b & 0x80)) {
			*v = r;
			*p = q + i + 1;
			return over;
		}
	}
	return -1;
}

/* mt_cols_in_hot() - the next record (mt_cols_in_more()) if it is a hot
 * record of in->thread whose control segment is its km byte alone, or km
 * and xm: its fields into @h, and 1. 0 if it is any other record (nothing
 * read), or -MT_ECORRUPT if its xm or fields run past their columns (they
 * do not fit together). */
static inline int mt_cols_in_hot(struct mt_cols_in *in, struct mt_cols_hot *h)
{
	const uint8_t *c = in->p[MT_COL_CTL];
	unsigned km = *c++;
	int rc, over = 0;

	if (!(km & 0x0f))
		return 0;
	h->type = (MT_FREE_KINDS >> (km & 0x0f) & 1) ? MT_REC_FREE : MT_REC_ALLOC;
	h->kind = km & 0x0f;
	h->mode = km >> 4;
	if (h->mode == MT_ADDR_EXT) {
		/* xm: a raw kind, coded as its pymalloc kind */
		if (c == in->end[MT_COL_CTL])
			return -MT_ECORRUPT;
		unsigned xm = *c++;
		h->mode = xm & 0x0f;
		h->kind = xm >> 4 == MT_XM_RAW && h->kind >= MT_ALLOC_PYMALLOC_MALLOC
				  ? h->kind + MT_ALLOC_RAW_SHIFT
				  : MT__COLS_BAD_KIND;
	}
	h->zaddr = h->size = h->zstack = 0;
	if (h->mode >= MT_ADDR_SLOT) {
		if ((rc = mt__cols_field(&in->p[MT_COL_ADDR], in->end[MT_COL_ADDR], &h->zaddr)) < 0)
			return -MT_ECORRUPT;
		over |= rc;
	}
	if (h->type == MT_REC_ALLOC || (km & 0x0f) == MT_ALLOC_MUNMAP) {
		if ((rc = mt__cols_field(&in->p[MT_COL_SIZE], in->end[MT_COL_SIZE], &h->size)) < 0)
			return -MT_ECORRUPT;
		over |= rc;
	}
	if (h->type == MT_REC_ALLOC) {
		if ((rc = mt__cols_field(&in->p[MT_COL_STACK], in->end[MT_COL_STACK], &h->zstack)) < 0)
			return -MT_ECORRUPT;
		over |= rc;
	}
	h->overflow = over;
	in->p[MT_COL_CTL] = c;
	return 1;
}

/* mt_cols_in_row() - the next record (mt_cols_in_more()), whatever it is,
 * as a row into @dst (@cap bytes; a chunk's raw length plus
 * MT_ROW_SLACK always suffice). Returns its length, -ENOSPC if @cap is
 * too small, or -MT_ECORRUPT if the columns do not fit together; @in is
 * then of no further use. */
#define MT_ROW_SLACK 64
ssize_t mt_cols_in_row(struct mt_cols_in *in, uint8_t *dst, size_t cap);

/* mt_chunk_join() - the records of chunk data [@src, @src+@len), split
 * with the same @opts, into @dst (@cap bytes; MT_JOIN_MAX(@len) always
 * suffice: a control byte becomes at most a head and km of seven bytes,
 * and a control byte and a node segment's flag byte a node record of at
 * most MT_NODE_REC_MAX). Returns their length, -ENOSPC if @cap is too
 * small, or -MT_ECORRUPT if the columns do not fit together; *@joined is
 * then the length of the whole records in @dst before the problem. */
#define MT_JOIN_MAX(len) ((size_t)(len) * (MT_NODE_REC_MAX / 2))
ssize_t mt_chunk_join(uint8_t *dst, size_t cap, const uint8_t *src, size_t len, size_t *joined,
		      unsigned opts);

#endif /* MT_FORMAT_COLUMNS_H */
