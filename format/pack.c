/* SPDX-License-Identifier: MIT */
#include "format/pack.h"

#include <errno.h>  /* ENOSPC */
#include <lz4.h>    /* LZ4_compress_default, LZ4_decompress_safe_usingDict */
#include <lz4hc.h>  /* LZ4_compress_HC_continue */
#include <string.h> /* memcpy */

#include "format/error.h"
#include "format/huff.h"
#include "format/varint.h"

enum { METHOD_STORED = 0, METHOD_LZ4 = 1 };

#define BOUND(n) ((size_t)(n) + (size_t)(n) / 255 + 16) /* LZ4_COMPRESSBOUND */

void mt_history_reset(struct mt_history *h)
{
	h->opts = 0;
	for (int i = 0; i < MT_COLUMNS; i++)
		h->len[i] = 0;
}

void mt_history_layout(struct mt_history *h, unsigned opts)
{
	h->opts = opts & MT_NODES_COLUMNS;
}

static void history_push(struct mt_history *h, int i, const uint8_t *p, size_t n)
{
	uint8_t *b = h->buf[i];
	size_t have = h->len[i];

	if (n >= MT_HISTORY) {
		memcpy(b, p + n - MT_HISTORY, MT_HISTORY);
		h->len[i] = MT_HISTORY;
		return;
	}
	if (have + n > MT_HISTORY) {
		size_t drop = have + n - MT_HISTORY;
		memmove(b, b + drop, have - drop);
		have -= drop;
	}
	memcpy(b + have, p, n);
	h->len[i] = (uint32_t)(have + n);
}

/* The column lengths of chunk data [@src, @src+@len) of @ncols columns
 * (the others 0): returns the length of its directory, or -1 if it runs
 * past the data. */
static ssize_t directory(const uint8_t *src, size_t len, size_t col[MT_COLUMNS], int ncols)
{
	const uint8_t *q = src, *end = src + len;
	size_t sum = 0;

	for (int i = 0; i < MT_COLUMNS; i++)
		col[i] = 0;
	for (int i = 0; i < ncols - 1; i++) {
		uint64_t v;
		if (mt_varint_get(&q, end, &v) < 0 || sum > (size_t)(end - q) ||
		    v > (size_t)(end - q) - sum)
			return -1;
		col[i] = (size_t)v;
		sum += col[i];
	}
	if (sum > (size_t)(end - q))
		return -1;
	col[ncols - 1] = (size_t)(end - q) - sum;
	return q - src;
}

int mt_history_add(struct mt_history *h, const uint8_t *data, size_t len)
{
	size_t col[MT_COLUMNS];
	ssize_t d = directory(data, len, col, mt_columns(h->opts));

	if (d < 0)
		return -MT_ECORRUPT;
	const uint8_t *p = data + d;
	for (int i = 0; i < MT_COLUMNS; i++) {
		history_push(h, i, p, col[i]);
		p += col[i];
	}
	return 0;
}

/* An LZ4 block is a run of sequences: a token (literal length in its high
 * nibble, match length - 4 in its low one), more literal length bytes
 * after a nibble of 15 (each 255 but the last), the literals, then, in
 * all but the last sequence, a two-byte offset (little-endian) and more
 * match length bytes after a nibble of 15. The streams hold the literals,
 * the token and length bytes, the offsets' low bytes and their high
 * bytes, each in block order. */
#define STREAMS 4
struct streams {
	uint8_t *s[STREAMS];
	size_t n[STREAMS];
};

/* Split our own LZ4 block [@b, @b+@n) into @st, whose streams have room. */
static void lz4_split(const uint8_t *b, size_t n, struct streams *st)
{
	const uint8_t *end = b + n;
	uint8_t *lit = st->s[0], *seq = st->s[1], *lo = st->s[2], *hi = st->s[3];

	while (b < end) {
		uint8_t t = *b++;
		size_t ll = t >> 4;
		*seq++ = t;
		if (ll == 15) {
			uint8_t x;
			do {
				x = *b++;
				*seq++ = x;
				ll += x;
			} while (x == 255);
		}
		memcpy(lit, b, ll);
		lit += ll;
		b += ll;
		if (b >= end)
			break;
		*lo++ = b[0];
		*hi++ = b[1];
		b += 2;
		if ((t & 15) == 15) {
			uint8_t x;
			do {
				x = *b++;
				*seq++ = x;
			} while (x == 255);
		}
	}
	st->n[0] = (size_t)(lit - st->s[0]);
	st->n[1] = (size_t)(seq - st->s[1]);
	st->n[2] = (size_t)(lo - st->s[2]);
	st->n[3] = (size_t)(hi - st->s[3]);
}

/* The LZ4 block of the streams @st into @b (@cap bytes): its length, or
 * -1 if the streams do not make one, or leave bytes over. LZ4 checks the
 * block itself when it decodes it. */
static ssize_t lz4_join(uint8_t *b, size_t cap, const struct streams *st)
{
	const uint8_t *lit = st->s[0], *seq = st->s[1], *lo = st->s[2], *hi = st->s[3];
	const uint8_t *lit_end = lit + st->n[0], *seq_end = seq + st->n[1];
	uint8_t *o = b;

	if (st->n[2] != st->n[3] || st->n[0] + st->n[1] + st->n[2] + st->n[3] > cap)
		return -1;
	const uint8_t *lo_end = lo + st->n[2];
	while (seq < seq_end) {
		uint8_t t = *seq++;
		size_t ll = t >> 4;
		*o++ = t;
		if (ll == 15) {
			uint8_t x;
			do {
				if (seq == seq_end)
					return -1;
				x = *seq++;
				*o++ = x;
				ll += x;
			} while (x == 255);
		}
		if (ll > (size_t)(lit_end - lit))
			return -1;
		memcpy(o, lit, ll);
		o += ll;
		lit += ll;
		if (seq == seq_end && lo == lo_end)
			break;
		if (lo == lo_end)
			return -1;
		*o++ = *lo++;
		*o++ = *hi++;
		if ((t & 15) == 15) {
			uint8_t x;
			do {
				if (seq == seq_end)
					return -1;
				x = *seq++;
				*o++ = x;
			} while (x == 255);
		}
	}
	if (lit != lit_end || seq != seq_end || lo != lo_end)
		return -1;
	return o - b;
}

/* The coded column [@src, @src+@n) into @dst, which has room for @cap
 * bytes: its length, or -ENOSPC if it would take @cap bytes or more. */
static ssize_t pack_column(uint8_t *dst, size_t cap, const uint8_t *src, size_t n,
			   const struct mt_history *h, int i, int level, void *state,
			   uint8_t *scratch)
{
	uint8_t *block = scratch, *parts = scratch + BOUND(n);
	int bn;

	if (cap < 2)
		return -ENOSPC;
	if (level > 0) {
		LZ4_streamHC_t *hc = LZ4_initStreamHC(state, sizeof(LZ4_streamHC_t));
		LZ4_resetStreamHC_fast(hc, level);
		if (h->len[i])
			LZ4_loadDictHC(hc, (const char *)h->buf[i], (int)h->len[i]);
		bn = LZ4_compress_HC_continue(hc, (const char *)src, (char *)block, (int)n,
					      (int)BOUND(n));
	} else if (level < 0 && h->len[i]) {
		LZ4_stream_t *fast = LZ4_initStream(state, sizeof(LZ4_stream_t));
		LZ4_loadDict(fast, (const char *)h->buf[i], (int)h->len[i]);
		bn = LZ4_compress_fast_continue(fast, (const char *)src, (char *)block, (int)n,
						(int)BOUND(n), 1);
	} else {
		bn = LZ4_compress_default((const char *)src, (char *)block, (int)n,
					  (int)BOUND(n));
	}
	if (bn <= 0 || (size_t)bn >= cap)
		return -ENOSPC;
	/* each stream is at most the block long */
	struct streams st = { { parts, parts + bn, parts + 2 * (size_t)bn, parts + 3 * (size_t)bn },
			      { 0 } };
	lz4_split(block, (size_t)bn, &st);
	uint8_t *o = dst, *o_end = dst + cap;
	*o++ = METHOD_LZ4;
	for (int k = 0; k < STREAMS; k++) {
		ssize_t w = mt_stream_put(o, (size_t)(o_end - o), st.s[k], st.n[k]);
		if (w < 0)
			return -ENOSPC;
		o += w;
	}
	return o < o_end ? o - dst : -ENOSPC;
}

ssize_t mt_chunk_pack(uint8_t *dst, const uint8_t *src, size_t len, struct mt_history *h,
		      int level, void *state, uint8_t *scratch)
{
	size_t col[MT_COLUMNS];
	ssize_t d = directory(src, len, col, mt_columns(h->opts));

	if (d < 0)
		return -MT_ECORRUPT;
	memcpy(dst, src, (size_t)d);
	uint8_t *o = dst + d;
	const uint8_t *p = src + d;
	for (int i = 0; i < MT_COLUMNS; i++) {
		size_t n = col[i];
		if (!n)
			continue;
		/* coded only if shorter than stored: 1 + n bytes */
		ssize_t w = pack_column(o, n + 1, p, n, h, i, level, state, scratch);
		if (w < 0) {
			*o = METHOD_STORED;
			memcpy(o + 1, p, n);
			w = (ssize_t)n + 1;
		}
		o += w;
		history_push(h, i, p, n);
		p += n;
	}
	return o - dst;
}

int mt_chunk_unpack(uint8_t *dst, size_t len, const uint8_t *src, size_t n,
		    struct mt_history *h, uint8_t *scratch)
{
	const uint8_t *q = src, *end = src + n;
	size_t col[MT_COLUMNS] = { 0 }, sum = 0;
	uint8_t *o = dst;
	int ncols = mt_columns(h->opts);

	for (int i = 0; i < ncols - 1; i++) {
		uint64_t v;
		const uint8_t *at = q;
		if (mt_varint_get(&q, end, &v) < 0 || v > len ||
		    (size_t)(q - at) > len - (size_t)(o - dst))
			return -MT_ECORRUPT;
		col[i] = (size_t)v;
		sum += col[i];
		memcpy(o, at, (size_t)(q - at));
		o += q - at;
	}
	if (sum > len - (size_t)(o - dst))
		return -MT_ECORRUPT;
	col[ncols - 1] = len - (size_t)(o - dst) - sum;
	for (int i = 0; i < MT_COLUMNS; i++) {
		size_t cn = col[i];
		if (!cn)
			continue;
		if (q == end)
			return -MT_ECORRUPT;
		uint8_t method = *q++;
		if (method == METHOD_STORED) {
			if ((size_t)(end - q) < cn)
				return -MT_ECORRUPT;
			memcpy(o, q, cn);
			q += cn;
		} else if (method == METHOD_LZ4) {
			size_t bound = BOUND(cn), used = 0;
			uint8_t *parts = scratch, *block = scratch + bound;
			struct streams st;
			for (int k = 0; k < STREAMS; k++) {
				st.s[k] = parts + used;
				ssize_t r = mt_stream_get(st.s[k], bound - used, &q, end);
				if (r < 0)
					return -MT_ECORRUPT;
				st.n[k] = (size_t)r;
				used += st.n[k];
			}
			ssize_t bn = lz4_join(block, bound, &st);
			if (bn <= 0)
				return -MT_ECORRUPT;
			int r = LZ4_decompress_safe_usingDict((const char *)block, (char *)o,
							      (int)bn, (int)cn,
							      (const char *)h->buf[i],
							      (int)h->len[i]);
			if (r != (int)cn)
				return -MT_ECORRUPT;
		} else {
			return -MT_ECORRUPT;
		}
		history_push(h, i, o, cn);
		o += cn;
	}
	return q == end ? 0 : -MT_ECORRUPT;
}
