/* SPDX-License-Identifier: MIT */
/*
 * Chunk columns: a chunk's records split into columns and joined back
 * (format/columns.h). Runs inside the payload's writer as well as in the
 * reader: no I/O, no allocation, no stdio.
 */
#include "format/columns.h"
#include "format/error.h"
#include "format/nodes.h"

#include <errno.h>  /* ENOSPC */
#include <string.h> /* memcpy, memcmp, memset */

#define COL_CTL MT_COL_CTL
#define COL_ADDR MT_COL_ADDR
#define COL_SIZE MT_COL_SIZE
#define COL_STACK MT_COL_STACK
#define COL_NODE MT_COL_NODE
#define COL_BODY MT_COL_BODY

/* Bytes of the varint at [p, p+avail), or 0 if it does not end in time. */
static inline size_t varint_len(const uint8_t *p, size_t avail)
{
	for (size_t i = 0; i < avail && i < MT_VARINT_MAX; i++)
		if (!(p[i] & 0x80))
			return i + 1;
	return 0;
}

/* The segment lengths @n of the record at @p (@left bytes from there on,
 * its segments one after the other), its head's among them: @n[COL_CTL]
 * is its head and km, *@nhead the head alone. Returns 0, or -1 if the
 * record is cut short, has type 0 or a thread index past 2^32 - 1. */
static int rec_segments(const uint8_t *p, size_t left, size_t n[MT_COLUMNS], size_t *nhead)
{
	const uint8_t *q = p, *end = p + left;
	memset(n, 0, MT_COLUMNS * sizeof(*n));
	if (left < 1)
		return -1;
	unsigned type = p[0] & 0x0f;
	size_t k = 1;
	if (type == 0)
		return -1;
	if (p[0] >> 4 == 15) {
		const uint8_t *v = p + 1;
		uint64_t thread;
		if (mt_varint_get(&v, end, &thread) < 0 || thread > UINT32_MAX)
			return -1;
		k += (size_t)(v - (p + 1));
	}
	*nhead = k;
	q += k;
	if (type != MT_REC_ALLOC && type != MT_REC_FREE) {
		n[COL_CTL] = k;
		uint64_t body;
		const uint8_t *b = q;
		if (mt_varint_get(&b, end, &body) < 0 || body > (uint64_t)(end - b))
			return -1;
		n[COL_BODY] = (size_t)(b - q) + (size_t)body;
		return 0;
	}
	if (left < k + 1)
		return -1;
	unsigned kind = p[k] & 0x0f, mode = p[k] >> 4;
	n[COL_CTL] = k + 1;
	q++;
	if (mode == MT_ADDR_EXT) { /* xm, with the address mode */
		if (left < k + 2)
			return -1;
		mode = p[k + 1] & 0x0f;
		n[COL_CTL]++;
		q++;
	}
	int fields[3] = { mode >= MT_ADDR_SLOT, type == MT_REC_ALLOC || kind == MT_ALLOC_MUNMAP,
			  type == MT_REC_ALLOC };
	for (int i = 0; i < 3; i++) {
		if (!fields[i])
			continue;
		size_t v = varint_len(q, (size_t)(end - q));
		if (!v)
			return -1;
		n[COL_ADDR + i] = v;
		q += v;
	}
	return 0;
}

/* Copy the varint at *@src to *@dst, advancing both; at most @max bytes.
 * Returns 0, or -1 if it is longer. */
static inline int copy_varint(uint8_t **dst, const uint8_t **src, size_t max)
{
	uint8_t *d = *dst;
	const uint8_t *q = *src;
	uint8_t b;
	do {
		if (!max--)
			return -1;
		b = *q++;
		*d++ = b;
	} while (b & 0x80);
	*dst = d;
	*src = q;
	return 0;
}

/* An ALLOC or FREE record (type 1 or 2). */
static inline int is_hot(uint8_t head)
{
	return (unsigned)((head & 0x0f) - MT_REC_ALLOC) < 2;
}

/* A hot record with a one-byte head (thread nibble below 15): the usual
 * record, taken apart or put together without going through
 * rec_segments(). */
static inline int is_plain_hot(uint8_t head)
{
	return is_hot(head) && head < 0xf0;
}

void mt_cols_begin(struct mt_cols *c, uint8_t *dst, uint8_t *scratch, size_t cap, unsigned opts)
{
	/* Each column is written where it has room whatever the others
	 * hold: the first after the room for the directory, the others in
	 * the scratch space. */
	memset(c, 0, sizeof(*c));
	c->dst = dst;
	c->base[COL_CTL] = dst + MT_COLUMNS_DIR_MAX;
	for (int i = 1; i < MT_COLUMNS; i++)
		c->base[i] = scratch + (size_t)(i - 1) * cap;
	memcpy(c->out, c->base, sizeof(c->out));
	mt_nodes_begin(&c->node, opts);
}

/* The control segment (docs/format.md section 2.1) of the record at @p,
 * whose head is @nhead bytes, into @o; *@thread_now is the thread index
 * of the chunk's last hot record. Returns its length. */
static size_t ctl_from_row(uint8_t *o, uint64_t *thread_now, const uint8_t *p, size_t nhead)
{
	unsigned type = p[0] & 0x0f;
	unsigned hot = is_hot(p[0]) ? p[nhead] + 1u : 0;
	uint64_t thread = p[0] >> 4;
	if (thread == 15) {
		const uint8_t *q = p + 1;
		if (mt_varint_get(&q, p + nhead, &thread) < 0 || thread < 15 ||
		    nhead != 1 + mt_varint_len(thread)) {
			/* Not the shortest head: kept as it is. */
			o[0] = 0;
			memcpy(o + 1, p, nhead);
			size_t n = 1 + nhead;
			if (hot) {
				o[n++] = (uint8_t)(hot - 1);
				*thread_now = thread;
			}
			return n;
		}
	}
	return mt__ctl_put(o, thread_now, type, thread, hot);
}

ssize_t mt_cols_add(struct mt_cols *c, const uint8_t *p, size_t left)
{
	uint8_t **out = c->out;
	const uint8_t *start = p;
	size_t n[MT_COLUMNS], nhead;

	/* A plain hot record with MT_REC_HOT_MAX bytes after it needs no
	 * bounds checks: its segments end within 32 bytes. */
	if (left >= MT_REC_HOT_MAX && is_plain_hot(p[0]) && p[1] >> 4 != MT_ADDR_EXT) {
		unsigned type = p[0] & 0x0f, km = p[1];
		out[COL_CTL] += mt__ctl_put(out[COL_CTL], &c->thread, type, p[0] >> 4, km + 1);
		p += 2;
		if ((km >> 4 >= MT_ADDR_SLOT && copy_varint(&out[COL_ADDR], &p, MT_VARINT_MAX) < 0) ||
		    ((type == MT_REC_ALLOC || (km & 0x0f) == MT_ALLOC_MUNMAP) &&
		     copy_varint(&out[COL_SIZE], &p, MT_VARINT_MAX) < 0) ||
		    (type == MT_REC_ALLOC && copy_varint(&out[COL_STACK], &p, MT_VARINT_MAX) < 0))
			return -MT_ECORRUPT;
		c->events++;
		c->len += (size_t)(p - start);
		return p - start;
	}
	if (rec_segments(p, left, n, &nhead) < 0)
		return -MT_ECORRUPT;
	c->events += is_hot(p[0]);
	if (mt_nodes_coded(&c->node, p[0])) {
		int col = mt_node_column(c->node.opts, p[0]);
		size_t k = mt_node_pack(&c->node, out[col], p, 1 + n[COL_BODY]);
		if (k) {
			*out[COL_CTL]++ = (uint8_t)(p[0] << 4);
			out[col] += k;
			c->len += 1 + n[COL_BODY];
			return (ssize_t)(1 + n[COL_BODY]);
		}
		*out[col]++ = MT_NODE_VERBATIM;
	}
	out[COL_CTL] += ctl_from_row(out[COL_CTL], &c->thread, p, nhead);
	if (n[COL_CTL] > nhead + 1) /* the xm after km */
		*out[COL_CTL]++ = p[nhead + 1];
	p += n[COL_CTL];
	for (int i = 1; i <= COL_BODY; i++) { /* a row's segments go no further */
		memcpy(out[i], p, n[i]);
		out[i] += n[i];
		p += n[i];
	}
	c->len += (size_t)(p - start);
	return p - start;
}

size_t mt_cols_finish(struct mt_cols *c)
{
	/* The directory, and the columns in place behind it. */
	uint8_t dir[MT_COLUMNS_DIR_MAX];
	size_t ndir = 0;
	int ncols = mt_columns(c->node.opts);
	for (int i = 0; i < ncols - 1; i++)
		ndir += mt_varint_put(dir + ndir, (uint64_t)(c->out[i] - c->base[i]));
	uint8_t *q = c->dst + ndir;
	memmove(q, c->base[COL_CTL], (size_t)(c->out[COL_CTL] - c->base[COL_CTL]));
	memcpy(c->dst, dir, ndir);
	q += c->out[COL_CTL] - c->base[COL_CTL];
	for (int i = 1; i < ncols; i++) {
		memcpy(q, c->base[i], (size_t)(c->out[i] - c->base[i]));
		q += c->out[i] - c->base[i];
	}
	return (size_t)(q - c->dst);
}

ssize_t mt_chunk_split(uint8_t *dst, uint8_t *scratch, const uint8_t *src, size_t len,
		       uint64_t *events, unsigned opts)
{
	struct mt_cols c;
	const uint8_t *p = src, *end = src + len;

	mt_cols_begin(&c, dst, scratch, len, opts);
	while (p < end) {
		ssize_t n = mt_cols_add(&c, p, (size_t)(end - p));
		if (n < 0)
			return n;
		p += n;
	}
	if (events)
		*events += c.events;
	return (ssize_t)mt_cols_finish(&c);
}

/* The head and km of the next record from the control column at *@p
 * (before @end), as a row, into @o (room for MT_REC_HEAD_MAX + 2 bytes:
 * the head, km and, after a km of mode MT_ADDR_EXT, xm);
 * *@thread_now is the thread index of the chunk's last hot record.
 * Returns the row's length, or 0 if the control column does not hold a
 * record there. */
#define MT_REC_HEAD_MAX (1 + MT_VARINT_MAX)
static size_t ctl_to_row(uint8_t *o, uint64_t *thread_now, const uint8_t **p, const uint8_t *end)
{
	const uint8_t *q = *p;
	uint8_t b = *q++;
	size_t n;
	uint64_t thread;

	if (b & 0x0f) { /* a hot record of the last hot record's thread */
		unsigned type = mt_allocator_is_free(b & 0x0f) ? MT_REC_FREE : MT_REC_ALLOC;
		n = mt__rec_head(o, type, *thread_now);
		o[n++] = b;
		if (b >> 4 == MT_ADDR_EXT) { /* xm follows */
			if (q == end)
				return 0;
			o[n++] = *q++;
		}
		*p = q;
		return n;
	}
	if (b) { /* a head of thread 0 */
		o[0] = b >> 4;
		thread = 0;
		n = 1;
	} else { /* the head itself */
		if (q == end || (*q & 0x0f) == 0)
			return 0;
		o[0] = *q++;
		thread = o[0] >> 4;
		n = 1;
		if (thread == 15) {
			const uint8_t *v = q;
			if (mt_varint_get(&q, end, &thread) < 0 || thread > UINT32_MAX)
				return 0;
			memcpy(o + 1, v, (size_t)(q - v));
			n += (size_t)(q - v);
		}
	}
	if (is_hot(o[0])) {
		if (q == end)
			return 0;
		o[n++] = *q++;
		if (o[n - 1] >> 4 == MT_ADDR_EXT) { /* xm follows */
			if (q == end)
				return 0;
			o[n++] = *q++;
		}
		*thread_now = thread;
	}
	*p = q;
	return n;
}

int mt_cols_in_begin(struct mt_cols_in *in, const uint8_t *src, size_t len, unsigned opts)
{
	const uint8_t *q = src;
	size_t left[MT_COLUMNS];

	memset(in->p, 0, sizeof(in->p));
	memset(in->end, 0, sizeof(in->end));
	in->thread = 0;
	mt_nodes_begin(&in->node, opts);
	int ncols = mt_columns(opts);
	for (int i = 0; i < ncols - 1; i++) {
		uint64_t v;
		if (mt_varint_get(&q, src + len, &v) < 0)
			return -MT_ECORRUPT;
		left[i] = (size_t)v;
	}
	for (int i = 0; i < ncols; i++) {
		if (i == ncols - 1)
			left[i] = (size_t)(src + len - q);
		else if (left[i] > (size_t)(src + len - q))
			return -MT_ECORRUPT;
		in->p[i] = q;
		q += left[i];
		in->end[i] = q;
	}
	return 0;
}

int mt_cols_in_end(const struct mt_cols_in *in)
{
	for (int i = 0; i < MT_COLUMNS; i++)
		if (in->p[i] != in->end[i])
			return 0;
	return 1;
}

ssize_t mt_cols_in_row(struct mt_cols_in *in, uint8_t *dst, size_t cap)
{
	const uint8_t **p = in->p, *const *end = in->end;
	uint8_t *o = dst, *o_end = dst + cap;

	/* The record is put together in @tmp when @dst may not have room
	 * for it, and copied once its length is known. */
	uint8_t tmp[MT_REC_HEAD_MAX + 2 + 3 * MT_VARINT_MAX];
	int direct = o_end - o >= (ptrdiff_t)sizeof(tmp);
	uint8_t *w = direct ? o : tmp;
	size_t n = ctl_to_row(w, &in->thread, &p[COL_CTL], end[COL_CTL]);
	if (!n)
		return -MT_ECORRUPT;
	uint8_t *r = w + n;
	if (is_hot(w[0])) {
		size_t nhead = w[0] >> 4 == 15 ? 1 + varint_len(w + 1, n - 1) : 1;
		unsigned type = w[0] & 0x0f, km = w[nhead];
		unsigned mode = km >> 4 == MT_ADDR_EXT ? w[nhead + 1] & 0x0f : km >> 4;
		int fields[3] = { mode >= MT_ADDR_SLOT,
				  type == MT_REC_ALLOC || (km & 0x0f) == MT_ALLOC_MUNMAP,
				  type == MT_REC_ALLOC };
		for (int i = 0; i < 3; i++) {
			size_t avail = (size_t)(end[COL_ADDR + i] - p[COL_ADDR + i]);
			if (fields[i] && copy_varint(&r, &p[COL_ADDR + i],
						     avail < MT_VARINT_MAX ? avail : MT_VARINT_MAX) < 0)
				return -MT_ECORRUPT;
		}
		n = (size_t)(r - w);
		if (!direct) {
			if (n > (size_t)(o_end - o))
				return -ENOSPC;
			memcpy(o, tmp, n);
		}
		return (ssize_t)n;
	}
	if (mt_nodes_coded(&in->node, w[0])) {
		int col = mt_node_column(in->node.opts, w[0]);
		if (p[col] == end[col])
			return -MT_ECORRUPT;
		unsigned flag = *p[col]++;
		if (flag != MT_NODE_VERBATIM) {
			uint8_t rec[MT_NODE_REC_MAX];
			size_t k = mt_node_unpack(&in->node, rec, w[0], flag, &p[col], end[col]);
			if (!k)
				return -MT_ECORRUPT;
			if (k > (size_t)(o_end - o))
				return -ENOSPC;
			memcpy(o, rec, k);
			return (ssize_t)k;
		}
	}
	/* A length-prefixed record: its head, then its body segment. */
	uint64_t body;
	const uint8_t *b = p[COL_BODY];
	if (mt_varint_get(&b, end[COL_BODY], &body) < 0 || body > (uint64_t)(end[COL_BODY] - b))
		return -MT_ECORRUPT;
	size_t nb = (size_t)(b - p[COL_BODY]) + (size_t)body;
	if (n + nb > (size_t)(o_end - o))
		return -ENOSPC;
	if (!direct)
		memcpy(o, tmp, n);
	memcpy(o + n, p[COL_BODY], nb);
	p[COL_BODY] += nb;
	return (ssize_t)(n + nb);
}

ssize_t mt_chunk_join(uint8_t *dst, size_t cap, const uint8_t *src, size_t len, size_t *joined,
		      unsigned opts)
{
	struct mt_cols_in in;
	uint8_t *o = dst;

	*joined = 0;
	if (mt_cols_in_begin(&in, src, len, opts) < 0)
		return -MT_ECORRUPT;
	while (mt_cols_in_more(&in)) {
		ssize_t n = mt_cols_in_row(&in, o, (size_t)(dst + cap - o));
		if (n < 0)
			return n;
		o += n;
		*joined = (size_t)(o - dst);
	}
	return mt_cols_in_end(&in) ? (ssize_t)(o - dst) : -MT_ECORRUPT;
}
