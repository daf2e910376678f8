/* SPDX-License-Identifier: MIT */
#ifndef MT_TESTS_CAPTURE_WRITER_H
#define MT_TESTS_CAPTURE_WRITER_H
/*
 * Builds captures in memory for tests: header, records through the real
 * codec (per-thread delta state that runs across chunks, as the payload
 * writes it), chunks cut at a chosen size of records, split into columns
 * (mt_chunk_split) and coded (mt_chunk_pack, LZ4HC against the columns'
 * histories) or stored.
 * Aborts on allocation failure; tests only.
 */
#include <lz4hc.h>  /* LZ4_sizeofStateHC */
#include <stdio.h>  /* FILE */
#include <stdlib.h> /* abort */
#include <string.h> /* memcpy */

#include "format/columns.h"
#include "format/pack.h"
#include "format/record.h"

#define CW_THREADS 64

struct cw {
	uint8_t *buf; /* the capture file */
	size_t len, cap;
	uint8_t *raw; /* the chunk being filled */
	size_t raw_len, chunk_max;
	int compress;
	size_t n_chunks;
	struct mt_delta deltas[CW_THREADS];
	struct mt_history *hist;
	unsigned opts; /* the chunks' layout, as a reader takes it from the header */
};

static inline void cw__reserve(struct cw *w, size_t n)
{
	if (w->len + n <= w->cap)
		return;
	size_t c = w->cap ? w->cap : 4096;
	while (c < w->len + n)
		c *= 2;
	w->buf = realloc(w->buf, c);
	if (!w->buf)
		abort();
	w->cap = c;
}

/* cw_init() - start a capture. @chunk_max: raw bytes per chunk. */
static inline void cw_init(struct cw *w, const struct mt_header *h, size_t chunk_max, int compress)
{
	memset(w, 0, sizeof(*w));
	w->chunk_max = chunk_max;
	w->compress = compress;
	w->raw = malloc(chunk_max + MT_REC_HOT_MAX + 8192);
	w->hist = malloc(sizeof(*w->hist));
	if (!w->raw || !w->hist)
		abort();
	w->opts = mt_header_columns(h);
	mt_history_reset(w->hist);
	mt_history_layout(w->hist, w->opts);
	cw__reserve(w, MT_HDR_FIXED + h->cmdline.len);
	ssize_t n = mt_header_encode(w->buf, w->cap, h);
	if (n < 0)
		abort();
	w->len = (size_t)n;
}

/* A header with the usual fields filled in. */
static inline struct mt_header cw_header(uint32_t flags)
{
	static const uint8_t cmd[] = "python3\0script.py\0arg";
	struct mt_header h = {
		.version = MT_FORMAT_VERSION,
		.flags = flags,
		.pid = 4242,
		.python_hex = 0x030b04f0,
		.start_ns = 1700000000ull * 1000000000ull,
		.interval_ms = 10,
		.page_size = 4096,
		.main_tid = 4242,
		.cmdline = { cmd, sizeof(cmd) - 1 },
	};
	return h;
}

static inline void cw_flush(struct cw *w)
{
	struct mt_chunk c;
	if (!w->raw_len)
		return;
	uint8_t *cols = malloc(MT_SPLIT_MAX(w->raw_len));
	uint8_t *split = malloc(MT_SPLIT_SCRATCH(w->raw_len));
	if (!cols || !split)
		abort();
	ssize_t raw_len = mt_chunk_split(cols, split, w->raw, w->raw_len, NULL, w->opts);
	free(split);
	if (raw_len < 0)
		abort();
	cw__reserve(w, MT_CHUNK_HEADER + MT_PACK_MAX(raw_len));
	uint8_t *data = w->buf + w->len + MT_CHUNK_HEADER;
	ssize_t stored = 0;
	if (w->compress) {
		void *state = aligned_alloc(64, ((size_t)LZ4_sizeofStateHC() + 63) & ~(size_t)63);
		uint8_t *scratch = malloc(MT_PACK_SCRATCH(raw_len));
		if (!state || !scratch)
			abort();
		stored = mt_chunk_pack(data, cols, (size_t)raw_len, w->hist, 9, state, scratch);
		free(scratch);
		free(state);
	} else if (mt_history_add(w->hist, cols, (size_t)raw_len) < 0) {
		abort();
	}
	if (stored <= 0 || stored >= raw_len) {
		memcpy(data, cols, (size_t)raw_len);
		stored = raw_len;
	}
	free(cols);
	c.raw_len = (uint32_t)raw_len;
	c.stored_len = (uint32_t)stored;
	c.checksum = mt_checksum(data, (size_t)stored);
	mt_chunk_header_encode(w->buf + w->len, &c);
	w->len += MT_CHUNK_HEADER + (size_t)stored;
	w->raw_len = 0;
	w->n_chunks++;
}

static inline void cw_rec(struct cw *w, const struct mt_record *r)
{
	uint8_t tmp[8192];
	/* thread indexes from CW_THREADS - 1 on share one coding state (a
	 * reader keeps one per index: for captures meant to be hostile) */
	struct mt_delta *d = &w->deltas[r->tidx < CW_THREADS ? r->tidx : CW_THREADS - 1];
	ssize_t n = mt_rec_encode(tmp, sizeof(tmp), r, d);
	if (n < 0)
		abort();
	if (w->raw_len + (size_t)n > w->chunk_max)
		cw_flush(w);
	memcpy(w->raw + w->raw_len, tmp, (size_t)n);
	w->raw_len += (size_t)n;
}

static inline struct mt_bytes cw_str(const char *s)
{
	struct mt_bytes b = { (const uint8_t *)s, (uint32_t)strlen(s) };
	return b;
}

static inline void cw_alloc(struct cw *w, uint32_t thread, unsigned kind, uint64_t addr,
			    uint64_t size, uint32_t stack)
{
	struct mt_record r = { .type = MT_REC_ALLOC, .tidx = thread };
	r.alloc = (struct mt_rec_alloc){ (uint8_t)kind, addr, size, stack };
	cw_rec(w, &r);
}

static inline void cw_free(struct cw *w, uint32_t thread, unsigned kind, uint64_t addr, uint64_t size)
{
	struct mt_record r = { .type = MT_REC_FREE, .tidx = thread };
	r.free = (struct mt_rec_free){ (uint8_t)kind, addr, size };
	cw_rec(w, &r);
}

static inline void cw_thread(struct cw *w, uint32_t index, uint64_t tid, const char *name)
{
	struct mt_record r = { .type = MT_REC_THREAD, .tidx = index };
	r.thread.tid = tid;
	r.thread.name = cw_str(name);
	cw_rec(w, &r);
}

/* cw_thread_next() - the THREAD record of index @index, new to the capture
 * (its events code from a fresh state, as a reader starts one), saying
 * that index @index - @ended ended (0: none did). */
static inline void cw_thread_next(struct cw *w, uint32_t index, uint64_t tid, const char *name,
				  uint32_t ended)
{
	struct mt_record r = { .type = MT_REC_THREAD, .tidx = index };
	r.thread.tid = tid;
	r.thread.name = cw_str(name);
	r.thread.ended = ended;
	if (index >= CW_THREADS - 1)
		memset(&w->deltas[CW_THREADS - 1], 0, sizeof(w->deltas[0]));
	cw_rec(w, &r);
}

/* The program's name for the thread of kernel id @tid (a NAME record). */
static inline void cw_name(struct cw *w, uint64_t tid, const char *name)
{
	struct mt_record r = { .type = MT_REC_NAME };
	r.name.tid = tid;
	r.name.name = cw_str(name);
	cw_rec(w, &r);
}

/* A code object with an empty line table: every offset is @firstlineno. */
static inline void cw_code(struct cw *w, uint32_t id, const char *file, const char *qualname,
			   uint32_t firstlineno)
{
	struct mt_record r = { .type = MT_REC_CODE };
	r.code.id = id;
	r.code.firstlineno = firstlineno;
	r.code.filename = cw_str(file);
	r.code.name = cw_str(qualname);
	r.code.qualname = cw_str(qualname);
	r.code.linetable = cw_str("");
	cw_rec(w, &r);
}

static inline void cw_stack(struct cw *w, uint32_t id, uint32_t parent, uint32_t code, uint32_t offset)
{
	struct mt_record r = { .type = MT_REC_STACK };
	r.stack = (struct mt_rec_stack){ id, parent, code, offset };
	cw_rec(w, &r);
}

static inline void cw_sample(struct cw *w, uint64_t time_us, uint64_t rss)
{
	struct mt_record r = { .type = MT_REC_SAMPLE };
	r.sample = (struct mt_rec_sample){ .time_us = time_us, .rss = rss };
	cw_rec(w, &r);
}

static inline void cw_diag(struct cw *w, uint32_t code, const char *msg)
{
	struct mt_record r = { .type = MT_REC_DIAG };
	r.diag.code = code;
	r.diag.msg = cw_str(msg);
	cw_rec(w, &r);
}

static inline void cw_trailer(struct cw *w, uint64_t time_us, uint64_t events, uint64_t dropped)
{
	struct mt_record r = { .type = MT_REC_TRAILER };
	r.trailer = (struct mt_rec_trailer){ time_us, events, dropped };
	cw_rec(w, &r);
}

/* cw_finish() - flush the last chunk; the capture is w->buf[0..len). */
static inline void cw_finish(struct cw *w)
{
	cw_flush(w);
}

static inline void cw_release(struct cw *w)
{
	free(w->buf);
	free(w->raw);
	free(w->hist);
	memset(w, 0, sizeof(*w));
}

/* cw_save() - write the capture to @path. Returns 0 or -1. */
static inline int cw_save(const struct cw *w, const char *path)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	size_t n = fwrite(w->buf, 1, w->len, f);
	return fclose(f) == 0 && n == w->len ? 0 : -1;
}

#endif /* MT_TESTS_CAPTURE_WRITER_H */
