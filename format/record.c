/* SPDX-License-Identifier: MIT */
/*
 * Record codec, file header and chunk framing. Runs inside the payload's
 * malloc hooks as well as in the reader: no I/O, no allocation, no stdio.
 */
#include "format/record.h"
#include "format/error.h"
#include "format/hotdec.h"

#include <errno.h>  /* ENOSPC */
#include <string.h> /* memcpy, memcmp */

const char *mt_allocator_name(unsigned kind)
{
	switch (kind) {
#define MT_X(name, val, str, isfree) \
	case val:                    \
		return str;
		MT_ALLOCATORS(MT_X)
#undef MT_X
	}
	return NULL;
}

int mt_allocator_is_free(unsigned kind)
{
	switch (kind) {
#define MT_X(name, val, str, isfree) \
	case val:                    \
		return isfree;
		MT_ALLOCATORS(MT_X)
#undef MT_X
	}
	return 0;
}

const char *mt_rec_name(unsigned type)
{
	switch (type) {
#define MT_X(name, val, member) \
	case val:               \
		return #member;
		MT_RECORDS(MT_X)
#undef MT_X
	}
	return NULL;
}

/* ------------------------------------------------------------------------
 * Body writers for the length-prefixed records. Each returns the body
 * length, or -1 if it does not fit in @cap.
 * ---------------------------------------------------------------------- */
struct wbuf {
	uint8_t *p;
	size_t n, cap;
	int over;
};

static void w_varint(struct wbuf *w, uint64_t v)
{
	if (w->n + MT_VARINT_MAX > w->cap) {
		uint8_t tmp[MT_VARINT_MAX];
		size_t k = mt_varint_put(tmp, v);
		if (w->n + k > w->cap) {
			w->over = 1;
			return;
		}
		memcpy(w->p + w->n, tmp, k);
		w->n += k;
		return;
	}
	w->n += mt_varint_put(w->p + w->n, v);
}

static void w_bytes(struct wbuf *w, struct mt_bytes b)
{
	w_varint(w, b.len);
	if (w->over || w->n + b.len > w->cap) {
		w->over = 1;
		return;
	}
	if (b.len)
		memcpy(w->p + w->n, b.p, b.len);
	w->n += b.len;
}

/* @id's distance back to a node made before it (r_below()'s), zigzag: a
 * parent is mostly a node made just before, a small distance. */
static void w_below(struct wbuf *w, uint32_t id, uint32_t below)
{
	w_varint(w, mt_zigzag((int64_t)id - (int64_t)below));
}

static void body_encode(struct wbuf *w, const struct mt_record *r)
{
	switch (r->type) {
	case MT_REC_THREAD:
		w_varint(w, r->thread.tid);
		w_bytes(w, r->thread.name);
		if (r->thread.ended)
			w_varint(w, r->thread.ended);
		break;
	case MT_REC_CODE:
		w_varint(w, r->code.id);
		w_varint(w, r->code.firstlineno);
		w_bytes(w, r->code.filename);
		w_bytes(w, r->code.name);
		w_bytes(w, r->code.qualname);
		w_bytes(w, r->code.linetable);
		break;
	case MT_REC_STACK:
		w_varint(w, r->stack.id);
		w_below(w, r->stack.id, r->stack.parent);
		w_varint(w, r->stack.code);
		w_varint(w, r->stack.offset);
		break;
	case MT_REC_NATIVE:
		w_varint(w, r->native.id);
		w_below(w, r->native.id, r->native.parent);
		w_varint(w, r->native.ip);
		break;
	case MT_REC_HYBRID:
		w_varint(w, r->hybrid.id);
		w_below(w, r->hybrid.id, r->hybrid.python);
		w_below(w, r->hybrid.id, r->hybrid.native);
		break;
	case MT_REC_MODULE:
		w_varint(w, r->module.gen);
		w_varint(w, r->module.bias);
		w_bytes(w, r->module.path);
		w_bytes(w, r->module.build_id);
		w_varint(w, r->module.nsegs);
		for (uint32_t i = 0; i < r->module.nsegs && i < MT_MODULE_SEGS_MAX; i++) {
			w_varint(w, r->module.seg_vaddr[i]);
			w_varint(w, r->module.seg_memsz[i]);
		}
		break;
	case MT_REC_SAMPLE:
		w_varint(w, r->sample.time_us);
		w_varint(w, r->sample.rss);
		if (r->sample.heap || r->sample.in_use)
			w_varint(w, r->sample.heap);
		if (r->sample.in_use)
			w_varint(w, r->sample.in_use);
		break;
	case MT_REC_NAME:
		w_varint(w, r->name.tid);
		w_bytes(w, r->name.name);
		break;
	case MT_REC_SITE:
		w_varint(w, r->site.stack);
		w_varint(w, r->site.thread);
		w_varint(w, r->site.allocator);
		w_varint(w, r->site.peak_bytes);
		w_varint(w, r->site.peak_count);
		w_varint(w, r->site.leak_bytes);
		w_varint(w, r->site.leak_count);
		w_varint(w, r->site.alloc_bytes);
		w_varint(w, r->site.alloc_count);
		w_varint(w, r->site.first_addr);
		break;
	case MT_REC_TOTALS: {
		const struct mt_rec_totals *t = &r->totals;
		const uint64_t head[] = { t->n_allocs, t->n_frees, t->n_unmatched_frees,
					  t->bytes_allocated, t->bytes_freed, t->heap,
					  t->peak_heap, t->peak_time_us, t->live_count };
		for (size_t i = 0; i < sizeof(head) / sizeof(head[0]); i++)
			w_varint(w, head[i]);
		w_varint(w, MT_TOTALS_KINDS);
		for (size_t i = 0; i < MT_TOTALS_KINDS; i++) {
			w_varint(w, t->kind_count[i]);
			w_varint(w, t->kind_bytes[i]);
		}
		w_varint(w, MT_TOTALS_BUCKETS);
		for (size_t i = 0; i < MT_TOTALS_BUCKETS; i++)
			w_varint(w, t->size_hist[i]);
		break;
	}
	case MT_REC_DIAG:
		w_varint(w, r->diag.code);
		w_bytes(w, r->diag.msg);
		break;
	case MT_REC_TRAILER:
		w_varint(w, r->trailer.time_us);
		w_varint(w, r->trailer.n_events);
		w_varint(w, r->trailer.n_dropped);
		break;
	}
}

ssize_t mt_rec_encode(uint8_t *p, size_t cap, const struct mt_record *r, struct mt_delta *d)
{
	uint8_t hot[MT_REC_HOT_MAX];
	size_t n;

	switch (r->type) {
	case MT_REC_ALLOC:
		n = mt_enc_alloc(hot, d, r->tidx, r->alloc.kind, r->alloc.addr, r->alloc.size,
				 r->alloc.stack);
		break;
	case MT_REC_FREE:
		n = mt_enc_free(hot, d, r->tidx, r->free.kind, r->free.addr, r->free.size);
		break;
	case MT_REC_THREAD:
	case MT_REC_CODE:
	case MT_REC_STACK:
	case MT_REC_SAMPLE:
	case MT_REC_SITE:
	case MT_REC_TOTALS:
	case MT_REC_NAME:
	case MT_REC_DIAG:
	case MT_REC_TRAILER:
	case MT_REC_NATIVE:
	case MT_REC_MODULE:
	case MT_REC_HYBRID: {
		/* The body is written after room for the longest length varint,
		 * then moved down next to the real length. */
		uint8_t head_buf[MT_VARINT_MAX * 2 + 1];
		size_t head = mt__rec_head(head_buf, r->type,
					   r->type == MT_REC_THREAD ? r->tidx : 0);
		if (cap < head + MT_VARINT_MAX)
			return -ENOSPC;
		struct wbuf w = { p + head + MT_VARINT_MAX, 0, cap - head - MT_VARINT_MAX, 0 };
		body_encode(&w, r);
		if (w.over)
			return -ENOSPC;
		size_t lenb = mt_varint_put(head_buf + head, w.n);
		memmove(p + head + lenb, p + head + MT_VARINT_MAX, w.n);
		memcpy(p, head_buf, head + lenb);
		return (ssize_t)(head + lenb + w.n);
	}
	default:
		return -EINVAL;
	}
	if (n > cap)
		return -ENOSPC;
	memcpy(p, hot, n);
	return (ssize_t)n;
}

/* ------------------------------------------------------------------------
 * Decoding.
 * ---------------------------------------------------------------------- */
struct rbuf {
	const uint8_t *p, *end;
	int bad;
};

static uint64_t r_varint(struct rbuf *r)
{
	uint64_t v = 0;
	if (r->bad || mt_varint_get(&r->p, r->end, &v) < 0)
		r->bad = 1;
	return v;
}

static uint32_t r_u32(struct rbuf *r)
{
	uint64_t v = r_varint(r);
	if (v > UINT32_MAX)
		r->bad = 1;
	return (uint32_t)v;
}

static struct mt_bytes r_bytes(struct rbuf *r)
{
	struct mt_bytes b = { NULL, 0 };
	uint64_t len = r_varint(r);
	if (r->bad || len > (uint64_t)(r->end - r->p)) {
		r->bad = 1;
		return b;
	}
	b.p = r->p;
	b.len = (uint32_t)len;
	r->p += len;
	return b;
}

/* A zigzag distance back from @id to a node made before it (0: none). */
static uint32_t r_below(struct rbuf *b, uint32_t id)
{
	uint64_t dist = r_varint(b);
	int64_t v = dist >> 34 ? -1 : (int64_t)id - mt_unzigzag(dist);
	if (v < 0 || v >= id) {
		b->bad = 1;
		return 0;
	}
	return (uint32_t)v;
}

static int body_decode(struct rbuf *b, struct mt_record *r)
{
	switch (r->type) {
	case MT_REC_THREAD:
		r->thread.tid = r_varint(b);
		r->thread.name = r_bytes(b);
		r->thread.ended = b->p < b->end ? r_varint(b) : 0;
		if (r->thread.ended > r->tidx)
			b->bad = 1; /* only an index before this one can have ended */
		break;
	case MT_REC_CODE:
		r->code.id = r_u32(b);
		if (r->code.id == UINT32_MAX)
			b->bad = 1;
		r->code.firstlineno = r_u32(b);
		r->code.filename = r_bytes(b);
		r->code.name = r_bytes(b);
		r->code.qualname = r_bytes(b);
		r->code.linetable = r_bytes(b);
		break;
	/* a parent is made before its children: parent < id, which also
	 * keeps the tries free of cycles */
	case MT_REC_STACK:
		r->stack.id = r_u32(b);
		r->stack.parent = r_below(b, r->stack.id);
		r->stack.code = r_u32(b);
		r->stack.offset = r_u32(b);
		if (r->stack.code == UINT32_MAX) /* no CODE id: readers mark frames so */
			b->bad = 1;
		break;
	case MT_REC_NATIVE:
		r->native.id = r_u32(b);
		r->native.parent = r_below(b, r->native.id);
		r->native.ip = r_varint(b);
		break;
	case MT_REC_HYBRID:
		r->hybrid.id = r_u32(b);
		r->hybrid.python = r_below(b, r->hybrid.id);
		r->hybrid.native = r_below(b, r->hybrid.id);
		break;
	case MT_REC_MODULE:
		r->module.gen = r_u32(b);
		r->module.bias = r_varint(b);
		r->module.path = r_bytes(b);
		r->module.build_id = r_bytes(b);
		r->module.nsegs = r_u32(b);
		if (r->module.gen == 0 || r->module.nsegs > MT_MODULE_SEGS_MAX)
			b->bad = 1;
		for (uint32_t i = 0; i < r->module.nsegs && !b->bad; i++) {
			r->module.seg_vaddr[i] = r_varint(b);
			r->module.seg_memsz[i] = r_varint(b);
		}
		break;
	case MT_REC_SAMPLE:
		r->sample.time_us = r_varint(b);
		r->sample.rss = r_varint(b);
		r->sample.heap = b->p < b->end ? r_varint(b) : 0;
		r->sample.in_use = b->p < b->end ? r_varint(b) : 0;
		break;
	case MT_REC_NAME:
		r->name.tid = r_varint(b);
		r->name.name = r_bytes(b);
		break;
	case MT_REC_SITE:
		r->site.stack = r_u32(b);
		r->site.thread = r_u32(b);
		r->site.allocator = r_u32(b);
		r->site.peak_bytes = r_varint(b);
		r->site.peak_count = r_varint(b);
		r->site.leak_bytes = r_varint(b);
		r->site.leak_count = r_varint(b);
		r->site.alloc_bytes = r_varint(b);
		r->site.alloc_count = r_varint(b);
		r->site.first_addr = r_varint(b);
		if (r->site.allocator >= MT_ALLOC__COUNT || mt_allocator_is_free(r->site.allocator))
			b->bad = 1;
		break;
	case MT_REC_TOTALS: {
		struct mt_rec_totals *t = &r->totals;
		memset(t, 0, sizeof(*t));
		uint64_t *head[] = { &t->n_allocs, &t->n_frees, &t->n_unmatched_frees,
				     &t->bytes_allocated, &t->bytes_freed, &t->heap,
				     &t->peak_heap, &t->peak_time_us, &t->live_count };
		for (size_t i = 0; i < sizeof(head) / sizeof(head[0]); i++)
			*head[i] = r_varint(b);
		/* counts of the arrays first: a later version may have more */
		uint64_t kinds = r_varint(b);
		for (uint64_t i = 0; i < kinds && !b->bad; i++) {
			uint64_t c = r_varint(b), by = r_varint(b);
			if (i < MT_TOTALS_KINDS)
				t->kind_count[i] = c, t->kind_bytes[i] = by;
		}
		uint64_t buckets = r_varint(b);
		for (uint64_t i = 0; i < buckets && !b->bad; i++) {
			uint64_t c = r_varint(b);
			if (i < MT_TOTALS_BUCKETS)
				t->size_hist[i] = c;
		}
		break;
	}
	case MT_REC_DIAG:
		r->diag.code = r_u32(b);
		r->diag.msg = r_bytes(b);
		break;
	case MT_REC_TRAILER:
		r->trailer.time_us = r_varint(b);
		r->trailer.n_events = r_varint(b);
		r->trailer.n_dropped = r_varint(b);
		break;
	default:
		return 0; /* unknown: skipped by length */
	}
	/* A body may grow new trailing fields in later minor versions: extra
	 * bytes are allowed, missing ones are corruption. */
	return b->bad ? -1 : 0;
}

ssize_t mt_rec_decode(const uint8_t *p, size_t len, struct mt_record *r,
		      mt_delta_fn get_delta, void *ctx)
{
	struct rbuf b = { p, p + len, 0 };
	uint64_t v;

	if (len == 0)
		return -MT_ETRUNC;
	r->type = p[0] & 0x0f;
	r->tidx = p[0] >> 4;
	b.p++;
	if (r->tidx == 15) {
		if (mt_varint_get(&b.p, b.end, &v) < 0)
			return -MT_ETRUNC;
		if (v > UINT32_MAX)
			return -MT_ECORRUPT;
		r->tidx = (uint32_t)v;
	}
	if (r->type == 0)
		return -MT_ECORRUPT;

	if (r->type == MT_REC_ALLOC || r->type == MT_REC_FREE) {
		struct mt_delta *d = get_delta(ctx, r->tidx);
		uint64_t zaddr = 0, size = 0, zstack = 0;
		if (!d)
			return -ENOMEM;
		if (b.p >= b.end)
			return -MT_ETRUNC;
		unsigned kind = *b.p & 0x0f, mode = *b.p++ >> 4;
		if (mode == MT_ADDR_EXT) {
			/* xm: a raw kind, coded as its pymalloc kind */
			if (b.p >= b.end)
				return -MT_ETRUNC;
			if (*b.p >> 4 != MT_XM_RAW || kind < MT_ALLOC_PYMALLOC_MALLOC)
				return -MT_ECORRUPT;
			kind += MT_ALLOC_RAW_SHIFT;
			mode = *b.p++ & 0x0f;
		}
		if (!mt__hot_km_ok(r->type, kind, mode))
			return -MT_ECORRUPT;
		if (mode >= MT_ADDR_SLOT && mt_varint_get(&b.p, b.end, &zaddr) < 0)
			return -MT_ETRUNC;
		if (r->type == MT_REC_ALLOC) {
			if (mt_varint_get(&b.p, b.end, &size) < 0 ||
			    mt_varint_get(&b.p, b.end, &zstack) < 0)
				return -MT_ETRUNC;
		} else if (kind == MT_ALLOC_MUNMAP && mt_varint_get(&b.p, b.end, &size) < 0) {
			return -MT_ETRUNC;
		}
		int err = mt__hot_decode(d, r, r->type, kind, mode, zaddr, size, zstack);
		return err < 0 ? err : b.p - p;
	}

	if (r->type != MT_REC_THREAD && r->tidx != 0)
		return -MT_ECORRUPT;
	if (mt_varint_get(&b.p, b.end, &v) < 0)
		return -MT_ETRUNC;
	if (v > (uint64_t)(b.end - b.p))
		return -MT_ETRUNC;
	struct rbuf body = { b.p, b.p + v, 0 };
	if (body_decode(&body, r) < 0)
		return -MT_ECORRUPT;
	return (b.p + v) - p;
}

/* ------------------------------------------------------------------------
 * Header and chunks.
 * ---------------------------------------------------------------------- */
ssize_t mt_header_encode(uint8_t *p, size_t cap, const struct mt_header *h)
{
	size_t size = MT_HDR_FIXED + h->cmdline.len;
	if (size > cap || size > UINT16_MAX)
		return -ENOSPC;
	memcpy(p, MT_MAGIC, MT_MAGIC_LEN);
	mt_le16_put(p + 8, h->version);
	mt_le16_put(p + 10, (uint16_t)size);
	mt_le32_put(p + 12, h->flags);
	mt_le32_put(p + 16, h->pid);
	mt_le32_put(p + 20, h->python_hex);
	mt_le64_put(p + 24, h->start_ns);
	mt_le32_put(p + 32, h->interval_ms);
	mt_le32_put(p + 36, h->page_size);
	mt_le64_put(p + 40, h->main_tid);
	mt_le32_put(p + 48, h->cmdline.len);
	if (h->cmdline.len)
		memcpy(p + MT_HDR_FIXED, h->cmdline.p, h->cmdline.len);
	return (ssize_t)size;
}

ssize_t mt_header_decode(const uint8_t *p, size_t len, struct mt_header *h)
{
	if (len < MT_MAGIC_LEN + 4)
		return len < MT_MAGIC_LEN && memcmp(p, MT_MAGIC, len) != 0 ? -MT_EFORMAT
									   : -MT_ETRUNC;
	if (memcmp(p, MT_MAGIC, MT_MAGIC_LEN) != 0)
		return -MT_EFORMAT;
	uint16_t version = mt_le16_get(p + 8);
	uint16_t size = mt_le16_get(p + 10);
	if (version < MT_FORMAT_VERSION_MIN || version > MT_FORMAT_VERSION)
		return -MT_EVERSION;
	if (size < MT_HDR_FIXED)
		return -MT_ECORRUPT;
	if (len < size)
		return -MT_ETRUNC;
	h->version = version;
	h->flags = mt_le32_get(p + 12);
	h->pid = mt_le32_get(p + 16);
	h->python_hex = mt_le32_get(p + 20);
	h->start_ns = mt_le64_get(p + 24);
	h->interval_ms = mt_le32_get(p + 32);
	h->page_size = mt_le32_get(p + 36);
	h->main_tid = mt_le64_get(p + 40);
	h->cmdline.len = mt_le32_get(p + 48);
	if (h->cmdline.len > (uint32_t)size - MT_HDR_FIXED)
		return -MT_ECORRUPT;
	h->cmdline.p = p + MT_HDR_FIXED;
	return size;
}

void mt_chunk_header_encode(uint8_t p[MT_CHUNK_HEADER], const struct mt_chunk *c)
{
	memcpy(p, MT_CHUNK_MAGIC, 4);
	mt_le32_put(p + 4, c->raw_len);
	mt_le32_put(p + 8, c->stored_len);
	mt_le32_put(p + 12, c->checksum);
}

int mt_chunk_header_decode(const uint8_t p[MT_CHUNK_HEADER], struct mt_chunk *c)
{
	if (memcmp(p, MT_CHUNK_MAGIC, 4) != 0)
		return -MT_ECORRUPT;
	c->raw_len = mt_le32_get(p + 4);
	c->stored_len = mt_le32_get(p + 8);
	c->checksum = mt_le32_get(p + 12);
	if (c->raw_len == 0 || c->raw_len > MT_CHUNK_LIMIT || c->stored_len == 0 ||
	    c->stored_len > c->raw_len + c->raw_len / 255 + 16)
		return -MT_ECORRUPT;
	return 0;
}

/* MT32 (docs/format.md section 2): four 64-bit lanes over 32-byte blocks,
 * so the multiplies of a block run in parallel, then the lanes, the
 * remaining 8-byte words and bytes folded into one state and finished
 * with the murmur3 64-bit finaliser. Every step is a bijection of the
 * state, so a change confined to one step's input always changes the
 * 64-bit state. */
#define MT32_K1 0x9E3779B97F4A7C15ull
#define MT32_K2 0xC2B2AE3D27D4EB4Full
#define MT32_K3 0x165667B19E3779F9ull

static inline uint64_t mt32_rotl(uint64_t x, unsigned r)
{
	return (x << r) | (x >> (64 - r));
}

/* little-endian 64-bit load; one instruction on x86 and arm64 */
static inline uint64_t mt32_load(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	v = __builtin_bswap64(v);
#endif
	return v;
}

static inline uint64_t mt32_round(uint64_t h, uint64_t w)
{
	return mt32_rotl((h ^ w) * MT32_K2, 31);
}

uint32_t mt_checksum(const uint8_t *p, size_t len)
{
	uint64_t v0 = MT32_K1, v1 = MT32_K2, v2 = MT32_K3, v3 = MT32_K1 ^ MT32_K2;
	uint64_t h = (uint64_t)len * MT32_K1;
	size_t i = 0;

	for (; i + 32 <= len; i += 32) {
		v0 = mt32_round(v0, mt32_load(p + i));
		v1 = mt32_round(v1, mt32_load(p + i + 8));
		v2 = mt32_round(v2, mt32_load(p + i + 16));
		v3 = mt32_round(v3, mt32_load(p + i + 24));
	}
	h = mt32_round(h, v0);
	h = mt32_round(h, v1);
	h = mt32_round(h, v2);
	h = mt32_round(h, v3);
	for (; i + 8 <= len; i += 8)
		h = mt32_round(h, mt32_load(p + i));
	for (; i < len; i++)
		h = (h ^ p[i]) * MT32_K1;
	h ^= h >> 33;
	h *= 0xFF51AFD7ED558CCDull;
	h ^= h >> 33;
	h *= 0xC4CEB9FE1A85EC53ull;
	h ^= h >> 33;
	return (uint32_t)(h ^ (h >> 32));
}
