/* SPDX-License-Identifier: MIT */
/* Capture parser: dispatch, delta state across chunks, damage handling. */
#include "format/error.h"
#include "reader/capture.h"

#include "capture-writer.h"

#include <check.h>
#include <errno.h>  /* ENOENT */
#include <stdlib.h> /* EXIT_SUCCESS */
#include <unistd.h> /* unlink */

struct counts {
	uint64_t by_type[16];
	uint64_t n, addr_sum, chunks;
	int warnings;
	char last_warning[512];
	int stop_after; /* stop with stop_with after this many records, 0 = never */
	int stop_with;  /* 0: 99 */
	int stop_chunk; /* stop with it at the first chunk, 0 = never */
};

static int count(void *ctx, const struct mt_record *r)
{
	struct counts *c = ctx;
	c->by_type[r->type & 15]++;
	c->n++;
	if (r->type == MT_REC_ALLOC)
		c->addr_sum += r->alloc.addr + r->alloc.size + r->alloc.stack + r->tidx;
	if (r->type == MT_REC_FREE)
		c->addr_sum += r->free.addr;
	if (c->stop_after && c->n == (uint64_t)c->stop_after)
		return c->stop_with ? c->stop_with : 99;
	return 0;
}

static int count_chunk(void *ctx, uint64_t index, uint64_t offset, const struct mt_chunk *ch)
{
	struct counts *c = ctx;
	(void)index;
	(void)offset;
	(void)ch;
	c->chunks++;
	return c->stop_chunk;
}

static void on_warn(void *ctx, const char *msg)
{
	struct counts *c = ctx;
	c->warnings++;
	snprintf(c->last_warning, sizeof(c->last_warning), "%s", msg);
}

static const struct mt_record_ops count_ops = {
	.alloc = count, .free = count, .thread = count, .code = count, .stack = count,
	.sample = count, .diag = count, .trailer = count, .unknown = count, .chunk = count_chunk,
};

/* A capture of several chunks over four threads; returns the expected
 * record count and address checksum. */
static void build(struct cw *w, int compress, int trailer, uint64_t *n_records, uint64_t *sum)
{
	struct mt_header h = cw_header(0);
	uint64_t n = 0, s = 0;

	cw_init(w, &h, 256, compress);
	for (uint32_t t = 0; t < 4; t++, n++)
		cw_thread(w, t, 100 + t, t ? "worker" : "MainThread");
	cw_code(w, 1, "/app/x.py", "f", 10);
	cw_stack(w, 1, 0, 1, 0);
	n += 2;
	for (int i = 0; i < 400; i++) {
		uint32_t t = (uint32_t)(i % 4);
		uint64_t a = 0x7f0000000000ull + (uint64_t)((i * 7919) % 1000) * 64;
		cw_alloc(w, t, MT_ALLOC_MALLOC, a, (uint64_t)i, (uint32_t)(i % 3));
		s += a + (uint64_t)i + (uint64_t)(i % 3) + t;
		cw_free(w, t, MT_ALLOC_FREE, a, 0);
		s += a;
		n += 2;
		if (i % 100 == 0) {
			cw_sample(w, (uint64_t)i * 1000, 1 << 20);
			n++;
		}
	}
	cw_diag(w, MT_DIAG_INFO, "hello");
	n++;
	if (trailer) {
		cw_trailer(w, 5000000, 800, 0);
		n++;
	}
	cw_finish(w);
	*n_records = n;
	*sum = s;
}

START_TEST(test_reader_reads_everything)
{
	struct cw w;
	struct mt_capture *c;
	struct counts k = { 0 };
	uint64_t n, sum;

	build(&w, _i, 1, &n, &sum);
	ck_assert_uint_gt(w.n_chunks, 10);
	ck_assert_int_eq(mt_capture_open_mem(w.buf, w.len, &c), 0);
	mt_capture_set_warn(c, on_warn, &k);
	ck_assert_uint_eq(mt_capture_header(c)->pid, 4242);
	ck_assert_int_eq(mt_capture_read(c, &count_ops, &k), 0);
	const struct mt_capture_status *st = mt_capture_status(c);
	ck_assert_uint_eq(k.n, n);
	ck_assert_uint_eq(k.addr_sum, sum);
	ck_assert_uint_eq(k.by_type[MT_REC_ALLOC], 400);
	ck_assert_uint_eq(k.by_type[MT_REC_THREAD], 4);
	ck_assert_uint_eq(k.chunks, w.n_chunks);
	ck_assert_uint_eq(st->n_chunks, w.n_chunks);
	ck_assert_uint_eq(st->n_records, n);
	ck_assert(st->trailer_seen && !st->truncated && !st->stopped);
	ck_assert_uint_eq(st->end_offset, w.len);
	ck_assert_int_eq(k.warnings, 0);

	/* a second pass sees the same, delta state starting afresh */
	memset(&k, 0, sizeof(k));
	ck_assert_int_eq(mt_capture_read(c, &count_ops, &k), 0);
	ck_assert_uint_eq(k.addr_sum, sum);
	mt_capture_close(c);
	cw_release(&w);
}
END_TEST

/* A chunk of nothing but new stacks, as an import makes: its coded
 * STACK records join back to several times the chunk's size, and every
 * one comes out with its fields. */
static int check_stack(void *ctx, const struct mt_record *r)
{
	struct counts *c = ctx;
	uint32_t i = r->stack.id - 1;
	if (r->stack.parent == (i % 50 ? 0 : i) && r->stack.code == 1 + i / 50 &&
	    r->stack.offset == 2 * (i % 50))
		c->addr_sum++;
	return count(ctx, r);
}

START_TEST(test_reader_chunk_of_stacks)
{
	struct mt_header h = cw_header(0);
	struct cw w;
	struct mt_capture *c;
	struct counts k = { 0 };
	struct mt_record_ops ops = count_ops;
	ops.stack = check_stack;

	size_t joined = 0;
	cw_init(&w, &h, 1 << 18, _i);
	for (uint32_t i = 0; i < 20000; i++) { /* runs of siblings */
		struct mt_record r = { .type = MT_REC_STACK };
		r.stack = (struct mt_rec_stack){ i + 1, i % 50 ? 0 : i, 1 + i / 50, 2 * (i % 50) };
		uint8_t buf[64];
		joined += (size_t)mt_rec_encode(buf, sizeof(buf), &r, NULL);
		cw_rec(&w, &r);
	}
	cw_trailer(&w, 1000, 0, 0);
	cw_finish(&w);
	ck_assert_uint_eq(w.n_chunks, 1);
	ck_assert_int_eq(mt_capture_open_mem(w.buf, w.len, &c), 0);
	ck_assert_int_eq(mt_capture_read(c, &ops, &k), 0);
	ck_assert_uint_eq(k.by_type[MT_REC_STACK], 20000);
	ck_assert_uint_eq(k.addr_sum, 20000);
	ck_assert(mt_capture_status(c)->trailer_seen);
	ck_assert_uint_lt(w.len * 3, joined); /* the reader's buffer had to grow */
	mt_capture_close(c);
	cw_release(&w);
}
END_TEST

START_TEST(test_reader_callback_stops)
{
	struct cw w;
	struct mt_capture *c;
	struct counts k = { .stop_after = 50 };
	uint64_t n, sum;
	struct mt_record_ops partial = { .alloc = count, .free = count };

	build(&w, 1, 1, &n, &sum);
	ck_assert_int_eq(mt_capture_open_mem(w.buf, w.len, &c), 0);
	ck_assert_int_eq(mt_capture_read(c, &count_ops, &k), 99);
	ck_assert_uint_eq(k.n, 50);
	/* any value stops, 1 too (a step's "more" is not a callback's value),
	 * from a record or at a chunk; the pass stays stopped */
	for (int v = 1; v <= 2; v++) {
		memset(&k, 0, sizeof(k));
		k.stop_after = 50;
		k.stop_with = v;
		k.warnings = 0;
		mt_capture_set_warn(c, on_warn, &k);
		ck_assert_int_eq(mt_capture_read(c, &count_ops, &k), v);
		ck_assert_uint_eq(k.n, 50);
		ck_assert_int_eq(k.warnings, 0);
		ck_assert(!mt_capture_status(c)->stopped);
		int rc;
		ck_assert_int_eq(mt_capture_step(c, &count_ops, &k, &rc), 0);
		ck_assert_int_eq(rc, v);
		ck_assert_uint_eq(k.n, 50);
		memset(&k, 0, sizeof(k));
		k.stop_chunk = v;
		ck_assert_int_eq(mt_capture_read(c, &count_ops, &k), v);
		ck_assert_uint_eq(k.chunks, 1);
		ck_assert_uint_eq(k.n, 0);
	}
	mt_capture_set_warn(c, NULL, NULL);
	/* NULL callbacks are stubs */
	memset(&k, 0, sizeof(k));
	ck_assert_int_eq(mt_capture_read(c, &partial, &k), 0);
	ck_assert_uint_eq(k.n, 800);
	mt_capture_close(c);
	cw_release(&w);
}
END_TEST

/* Every prefix of a capture either fails to open (inside the header) or
 * reads the chunks it fully contains and reports truncation. */
START_TEST(test_reader_truncation_every_byte)
{
	struct cw w;
	uint64_t n, sum, prev = 0;
	size_t hdr = MT_HDR_FIXED + cw_header(0).cmdline.len;

	build(&w, _i, 1, &n, &sum);
	for (size_t len = 0; len <= w.len; len++) {
		uint8_t *cut = malloc(len ? len : 1);
		struct mt_capture *c;
		struct counts k = { 0 };

		memcpy(cut, w.buf, len);
		int err = mt_capture_open_mem(cut, len, &c);
		if (len < hdr) {
			ck_assert(err == -MT_ETRUNC || (len == 0 && err == -MT_EFORMAT));
			free(cut);
			continue;
		}
		ck_assert_int_eq(err, 0);
		mt_capture_set_warn(c, on_warn, &k);
		ck_assert_int_eq(mt_capture_read(c, &count_ops, &k), 0);
		const struct mt_capture_status *st = mt_capture_status(c);
		ck_assert_uint_ge(k.n, prev);
		prev = k.n;
		ck_assert(!st->stopped);
		if (len == w.len) {
			ck_assert(!st->truncated);
			ck_assert_uint_eq(k.n, n);
			ck_assert_int_eq(k.warnings, 0);
		} else {
			ck_assert(st->truncated);
			ck_assert_int_eq(k.warnings, 1);
			ck_assert(strstr(k.last_warning, "capture is truncated: read ") != NULL);
			ck_assert_uint_le(st->end_offset, len);
			ck_assert_uint_lt(k.n, n);
		}
		mt_capture_close(c);
		free(cut);
	}
	cw_release(&w);
}
END_TEST

static size_t chunk_offset(const struct cw *w, int index)
{
	size_t off = MT_HDR_FIXED + cw_header(0).cmdline.len;
	for (int i = 0; i < index; i++) {
		struct mt_chunk ch;
		ck_assert_int_eq(mt_chunk_header_decode(w->buf + off, &ch), 0);
		off += MT_CHUNK_HEADER + ch.stored_len;
	}
	return off;
}

START_TEST(test_reader_corrupt_chunk_mid_file)
{
	struct cw w;
	struct mt_capture *c;
	struct counts k = { 0 };
	uint64_t n, sum;

	build(&w, _i, 1, &n, &sum);
	size_t off = chunk_offset(&w, 3);
	w.buf[off + MT_CHUNK_HEADER + 5] ^= 0x40;
	ck_assert_int_eq(mt_capture_open_mem(w.buf, w.len, &c), 0);
	mt_capture_set_warn(c, on_warn, &k);
	ck_assert_int_eq(mt_capture_read(c, &count_ops, &k), 0);
	const struct mt_capture_status *st = mt_capture_status(c);
	ck_assert(st->stopped && st->truncated && !st->trailer_seen);
	ck_assert_uint_eq(st->n_chunks, 3);
	ck_assert_uint_eq(st->bad_offset, off);
	ck_assert_uint_eq(k.chunks, 3);
	ck_assert_int_eq(k.warnings, 1);
	ck_assert_msg(strstr(k.last_warning, "checksum mismatch") != NULL, "%s", k.last_warning);
	ck_assert_str_eq(mt_capture_damage(c), k.last_warning);
	mt_capture_close(c);

	/* a broken chunk header in the middle stops reading too */
	w.buf[off + MT_CHUNK_HEADER + 5] ^= 0x40;
	w.buf[off] = 'X';
	memset(&k, 0, sizeof(k));
	ck_assert_int_eq(mt_capture_open_mem(w.buf, w.len, &c), 0);
	mt_capture_set_warn(c, on_warn, &k);
	ck_assert_int_eq(mt_capture_read(c, &count_ops, &k), 0);
	ck_assert(mt_capture_status(c)->stopped);
	ck_assert_uint_eq(mt_capture_status(c)->n_chunks, 3);
	mt_capture_close(c);

	/* lengths that run past the end of the file, with whole chunks after
	 * them: damage, not a torn last write */
	w.buf[off] = 'M';
	memcpy(w.buf + off + 4, "\0\0\0\3\0\0\0\3", 8); /* raw and stored: 48 MiB */
	memset(&k, 0, sizeof(k));
	ck_assert_int_eq(mt_capture_open_mem(w.buf, w.len, &c), 0);
	mt_capture_set_warn(c, on_warn, &k);
	ck_assert_int_eq(mt_capture_read(c, &count_ops, &k), 0);
	st = mt_capture_status(c);
	ck_assert(st->stopped && st->truncated && !st->trailer_seen);
	ck_assert_uint_eq(st->n_chunks, 3);
	ck_assert_uint_eq(st->bad_offset, off);
	ck_assert_int_eq(k.warnings, 1);
	ck_assert_msg(strstr(k.last_warning, "its length runs past the end of the file, but a "
					     "whole chunk follows at byte ") != NULL,
		      "%s", k.last_warning);
	mt_capture_close(c);
	cw_release(&w);
}
END_TEST

/* What the progress callback was told. */
struct told {
	uint64_t done[64], total[64];
	int n;
};

static void on_progress(void *ctx, uint64_t done, uint64_t total)
{
	struct told *t = ctx;
	if (t->n < 64) {
		t->done[t->n] = done;
		t->total[t->n] = total;
	}
	t->n++;
}

/* @t: after the first chunk, then at chunk ends only, never backwards,
 * and once at the end with done == total == @len. */
static void check_told(const struct told *t, const struct cw *w, size_t len)
{
	ck_assert_int_ge(t->n, 2);
	ck_assert_int_le(t->n, 64);
	ck_assert_uint_eq(t->done[0], chunk_offset(w, 1));
	for (int i = 0; i < t->n; i++) {
		ck_assert_uint_eq(t->total[i], len);
		if (i)
			ck_assert_uint_ge(t->done[i], t->done[i - 1]);
	}
	ck_assert_uint_eq(t->done[t->n - 1], len);
	for (int i = 1; i < t->n - 1; i++) {
		int at_end = 0;
		for (int j = 1; j <= (int)w->n_chunks && !at_end; j++)
			at_end = t->done[i] == chunk_offset(w, j);
		ck_assert_msg(at_end, "told %llu, not the end of a chunk",
			      (unsigned long long)t->done[i]);
	}
}

/* The progress callback: its own context, every pass, however it ends. */
START_TEST(test_reader_progress)
{
	struct cw w;
	struct mt_capture *c;
	struct counts k = { 0 };
	struct told t = { 0 };
	uint64_t n, sum;

	build(&w, 1, 1, &n, &sum);
	ck_assert_uint_gt(w.n_chunks, 10);
	ck_assert_int_eq(mt_capture_open_mem(w.buf, w.len, &c), 0);
	ck_assert_int_eq(mt_capture_read(c, &count_ops, &k), 0);
	ck_assert_int_eq(t.n, 0);
	mt_capture_set_progress(c, on_progress, &t);
	ck_assert_int_eq(mt_capture_read(c, &count_ops, &k), 0);
	check_told(&t, &w, w.len);
	/* a second pass starts again */
	memset(&t, 0, sizeof(t));
	ck_assert_int_eq(mt_capture_read(c, &count_ops, &k), 0);
	check_told(&t, &w, w.len);
	/* a pass a callback stops ends with done == total too */
	memset(&t, 0, sizeof(t));
	memset(&k, 0, sizeof(k));
	k.stop_chunk = 7;
	ck_assert_int_eq(mt_capture_read(c, &count_ops, &k), 7);
	ck_assert_int_eq(t.n, 1);
	ck_assert_uint_eq(t.done[0], w.len);
	memset(&t, 0, sizeof(t));
	memset(&k, 0, sizeof(k));
	mt_capture_set_progress(c, NULL, NULL);
	ck_assert_int_eq(mt_capture_read(c, &count_ops, &k), 0);
	ck_assert_int_eq(t.n, 0);
	mt_capture_close(c);

	/* so does one that stops at corruption, and a truncated one */
	size_t off = chunk_offset(&w, 3);
	w.buf[off + MT_CHUNK_HEADER + 5] ^= 0x40;
	ck_assert_int_eq(mt_capture_open_mem(w.buf, w.len, &c), 0);
	mt_capture_set_progress(c, on_progress, &t);
	ck_assert_int_eq(mt_capture_read(c, &count_ops, &k), 0);
	ck_assert(mt_capture_status(c)->stopped);
	check_told(&t, &w, w.len);
	mt_capture_close(c);
	w.buf[off + MT_CHUNK_HEADER + 5] ^= 0x40;
	memset(&t, 0, sizeof(t));
	ck_assert_int_eq(mt_capture_open_mem(w.buf, off + 10, &c), 0);
	mt_capture_set_progress(c, on_progress, &t);
	ck_assert_int_eq(mt_capture_read(c, &count_ops, &k), 0);
	ck_assert(mt_capture_status(c)->truncated);
	check_told(&t, &w, off + 10);
	mt_capture_close(c);
	cw_release(&w);
}
END_TEST

START_TEST(test_reader_damaged_last_chunk_is_truncation)
{
	struct cw w;
	struct mt_capture *c;
	struct counts k = { 0 };
	uint64_t n, sum;

	build(&w, 1, 1, &n, &sum);
	size_t last = chunk_offset(&w, (int)w.n_chunks - 1);
	w.buf[w.len - 1] ^= 0xff;
	ck_assert_int_eq(mt_capture_open_mem(w.buf, w.len, &c), 0);
	mt_capture_set_warn(c, on_warn, &k);
	ck_assert_int_eq(mt_capture_read(c, &count_ops, &k), 0);
	ck_assert(mt_capture_status(c)->truncated && !mt_capture_status(c)->stopped);
	ck_assert(mt_capture_damage(c) == NULL);
	ck_assert_uint_eq(mt_capture_status(c)->end_offset, last);
	ck_assert_int_eq(k.warnings, 1);
	mt_capture_close(c);

	/* a zero-filled tail (file extended, data never written) */
	w.buf[w.len - 1] ^= 0xff;
	uint8_t *z = calloc(1, w.len + 4096);
	memcpy(z, w.buf, w.len);
	memset(&k, 0, sizeof(k));
	ck_assert_int_eq(mt_capture_open_mem(z, w.len + 4096, &c), 0);
	mt_capture_set_warn(c, on_warn, &k);
	ck_assert_int_eq(mt_capture_read(c, &count_ops, &k), 0);
	ck_assert(mt_capture_status(c)->truncated && !mt_capture_status(c)->stopped);
	ck_assert_uint_eq(k.n, n);
	mt_capture_close(c);
	free(z);

	/* but a last chunk that passes its checksum was written whole: what
	 * does not decode in it (here its column directory) is damage */
	struct mt_chunk ch;
	ck_assert_int_eq(mt_chunk_header_decode(w.buf + last, &ch), 0);
	uint8_t *d = w.buf + last + MT_CHUNK_HEADER;
	d[0] = d[1] = 0xff;
	d[2] = 0x7f;
	uint32_t sum32 = mt_checksum(d, ch.stored_len);
	memcpy(w.buf + last + 12, &sum32, 4); /* little-endian, as x86-64 is */
	memset(&k, 0, sizeof(k));
	ck_assert_int_eq(mt_capture_open_mem(w.buf, w.len, &c), 0);
	mt_capture_set_warn(c, on_warn, &k);
	ck_assert_int_eq(mt_capture_read(c, &count_ops, &k), 0);
	ck_assert(mt_capture_status(c)->stopped);
	ck_assert_ptr_nonnull(mt_capture_damage(c));
	ck_assert_msg(strstr(mt_capture_damage(c), "capture is corrupt: chunk ") != NULL, "%s",
		      mt_capture_damage(c));
	mt_capture_close(c);
	cw_release(&w);
}
END_TEST

/* Read the capture @w holds, which is damaged where its records were
 * written whole: the read stops, without the TRAILER, saying @want. */
static void read_damaged(const struct cw *w, struct counts *k, const char *want)
{
	struct mt_capture *c;

	ck_assert_int_eq(mt_capture_open_mem(w->buf, w->len, &c), 0);
	mt_capture_set_warn(c, on_warn, k);
	ck_assert_int_eq(mt_capture_read(c, &count_ops, k), 0);
	ck_assert(mt_capture_status(c)->stopped && !mt_capture_status(c)->trailer_seen);
	ck_assert_ptr_nonnull(mt_capture_damage(c));
	ck_assert_msg(strstr(mt_capture_damage(c), want) != NULL, "%s", mt_capture_damage(c));
	mt_capture_close(c);
}

/* A TRAILER that counts other than the events before it: chunks went
 * missing (their records are not there to be told apart from others). */
START_TEST(test_reader_trailer_counts_events)
{
	struct cw w;
	struct counts k = { 0 };
	struct mt_header h = cw_header(0);

	cw_init(&w, &h, 256, 0);
	cw_thread(&w, 0, 100, "MainThread");
	for (int i = 0; i < 10; i++)
		cw_alloc(&w, 0, MT_ALLOC_MALLOC, 0x10000 + (uint64_t)i * 64, 32, 0);
	cw_trailer(&w, 1000, 11, 0);
	cw_finish(&w);
	read_damaged(&w, &k, "counts 11 allocations and frees where the chunks up to it hold 10");
	cw_release(&w);
}
END_TEST

/* A capture's events are written one by one or counted into SITE and
 * TOTALS records, never both: a record of the other mode is damage. */
START_TEST(test_reader_records_of_the_other_mode)
{
	struct cw w;
	struct counts k = { 0 };
	struct mt_header h = cw_header(_i ? MT_HDR_AGGREGATED : 0);

	cw_init(&w, &h, 256, _i == 2);
	cw_thread(&w, 0, 100, "MainThread");
	if (_i) { /* aggregated: an ALLOC, hot or with its head (thread 1) */
		cw_alloc(&w, _i == 1 ? 0 : 1, MT_ALLOC_MALLOC, 0x10000, 32, 0);
	} else {
		struct mt_record r = { .type = MT_REC_SITE };
		r.site = (struct mt_rec_site){ .allocator = MT_ALLOC_MALLOC, .alloc_count = 1,
					       .alloc_bytes = 32, .first_addr = 0x10000 };
		cw_rec(&w, &r);
	}
	cw_trailer(&w, 1000, _i ? 1 : 0, 0);
	cw_finish(&w);
	read_damaged(&w, &k, _i ? "an allocation record in an aggregated capture"
				: "a SITE record in a non-aggregated capture");
	/* the THREAD record before it, and nothing of it */
	ck_assert_uint_eq(k.n, 1);
	ck_assert_uint_eq(k.by_type[MT_REC_THREAD], 1);
	cw_release(&w);
}
END_TEST

/* A THREAD record may say that an earlier thread index ended (another
 * thread took over its buffer): a reader drops that index's coding state,
 * and an event of it after that is corrupt. _i: the event is hot with its
 * head, or of the chunk's current thread. */
START_TEST(test_reader_thread_ended)
{
	struct cw w;
	struct counts k = { 0 };
	struct mt_header h = cw_header(0);
	struct mt_record r = { .type = MT_REC_THREAD, .tidx = 2 };

	cw_init(&w, &h, 4096, 0);
	cw_thread(&w, 1, 100, "worker");
	cw_alloc(&w, 1, MT_ALLOC_MALLOC, 0x10000, 32, 0);
	r.thread.tid = 101;
	r.thread.name = cw_str("worker");
	r.thread.ended = 1; /* index 1 */
	cw_rec(&w, &r);
	cw_alloc(&w, 2, MT_ALLOC_MALLOC, 0x20000, 32, 0);
	if (_i)
		cw_alloc(&w, 2, MT_ALLOC_MALLOC, 0x30000, 32, 0);
	cw_alloc(&w, 1, MT_ALLOC_MALLOC, 0x40000, 32, 0);
	cw_trailer(&w, 1000, 3 + _i, 0);
	cw_finish(&w);
	read_damaged(&w, &k, "a thread that a THREAD record said had ended");
	ck_assert_uint_eq(k.by_type[MT_REC_ALLOC], 2 + _i);
	cw_release(&w);

	/* without the last event, the capture reads whole */
	struct mt_capture *c;
	memset(&k, 0, sizeof(k));
	cw_init(&w, &h, 4096, 0);
	cw_thread(&w, 1, 100, "worker");
	cw_alloc(&w, 1, MT_ALLOC_MALLOC, 0x10000, 32, 0);
	cw_rec(&w, &r);
	cw_alloc(&w, 2, MT_ALLOC_MALLOC, 0x20000, 32, 0);
	cw_trailer(&w, 1000, 2, 0);
	cw_finish(&w);
	ck_assert_int_eq(mt_capture_open_mem(w.buf, w.len, &c), 0);
	ck_assert_int_eq(mt_capture_read(c, &count_ops, &k), 0);
	ck_assert(mt_capture_status(c)->trailer_seen && !mt_capture_damage(c));
	ck_assert_uint_eq(k.by_type[MT_REC_ALLOC], 2);
	mt_capture_close(c);
	cw_release(&w);
}
END_TEST

/* A thread-per-request service announces a new thread index for every
 * request, past a million in a night: each reads, as a THREAD record far
 * beyond those before it does not, nor an event of an index never
 * announced. _i: 0 the long capture, 1 an event of an index far beyond,
 * 2 a THREAD record far beyond. */
START_TEST(test_reader_million_threads)
{
	struct cw w;
	struct counts k = { 0 };
	struct mt_header h = cw_header(0);
	const uint32_t n = _i ? 16 : (1u << 20) + 4096;

	cw_init(&w, &h, 1 << 16, 0);
	for (uint32_t i = 0; i < n; i++) {
		/* each takes over the buffer of the one before */
		cw_thread_next(&w, i, 1000 + i % 30000, "worker", i > 0);
		cw_alloc(&w, i, MT_ALLOC_MALLOC, 0x100000 + 16ull * i, 16, 0);
		if (i & 1)
			cw_free(&w, i, MT_ALLOC_FREE, 0x100000 + 16ull * i, 0);
	}
	if (_i == 1) {
		cw_alloc(&w, n + (1u << 16), MT_ALLOC_MALLOC, 0x10, 16, 0);
		cw_trailer(&w, 1000, n + n / 2 + 1, 0);
	} else if (_i == 2) {
		cw_thread(&w, 16 + 32 + (1u << 16), 99, "far");
		cw_trailer(&w, 1000, n + n / 2, 0);
	} else {
		cw_trailer(&w, 1000, n + n / 2, 0);
	}
	cw_finish(&w);
	if (_i) {
		read_damaged(&w, &k, _i == 1 ? "far beyond the 16 announced"
					     : "a THREAD record of index 65584 after 16");
	} else {
		struct mt_capture *c;
		ck_assert_int_eq(mt_capture_open_mem(w.buf, w.len, &c), 0);
		ck_assert_int_eq(mt_capture_read(c, &count_ops, &k), 0);
		ck_assert(mt_capture_status(c)->trailer_seen && !mt_capture_damage(c));
		mt_capture_close(c);
		ck_assert_uint_eq(k.by_type[MT_REC_THREAD], n);
		ck_assert_uint_eq(k.by_type[MT_REC_ALLOC], n);
		ck_assert_uint_eq(k.by_type[MT_REC_FREE], n / 2);
	}
	cw_release(&w);
}
END_TEST

START_TEST(test_reader_no_trailer)
{
	struct cw w;
	struct mt_capture *c;
	struct counts k = { 0 };
	uint64_t n, sum;

	build(&w, 1, 0, &n, &sum);
	ck_assert_int_eq(mt_capture_open_mem(w.buf, w.len, &c), 0);
	mt_capture_set_warn(c, on_warn, &k);
	ck_assert_int_eq(mt_capture_read(c, &count_ops, &k), 0);
	ck_assert_uint_eq(k.n, n);
	ck_assert(mt_capture_status(c)->truncated);
	ck_assert_int_eq(k.warnings, 1);
	ck_assert(strstr(k.last_warning, "capture is truncated") != NULL);
	mt_capture_close(c);
	cw_release(&w);
}
END_TEST

START_TEST(test_reader_bad_files)
{
	char path[] = "/tmp/mt-test-reader-XXXXXX";
	struct mt_capture *c = NULL;
	struct cw w;
	uint64_t n, sum;
	int fd = mkstemp(path);

	ck_assert_int_ge(fd, 0);
	close(fd);
	ck_assert_int_eq(mt_capture_open(path, &c), -MT_EFORMAT); /* empty */
	ck_assert_int_eq(mt_capture_open("/nonexistent/capture.bin", &c), -ENOENT);
	ck_assert_int_eq(mt_capture_open("/tmp", &c), -EISDIR);

	build(&w, 1, 1, &n, &sum);
	ck_assert_int_eq(cw_save(&w, path), 0);
	ck_assert_int_eq(mt_capture_open(path, &c), 0);
	struct counts k = { 0 };
	ck_assert_int_eq(mt_capture_read(c, &count_ops, &k), 0);
	ck_assert_uint_eq(k.addr_sum, sum);
	mt_capture_close(c);

	w.buf[8] = MT_FORMAT_VERSION + 1;
	ck_assert_int_eq(cw_save(&w, path), 0);
	ck_assert_int_eq(mt_capture_open(path, &c), -MT_EVERSION);
	w.buf[0] = 'm';
	ck_assert_int_eq(cw_save(&w, path), 0);
	ck_assert_int_eq(mt_capture_open(path, &c), -MT_EFORMAT);
	unlink(path);
	mt_capture_close(NULL);
	cw_release(&w);
}
END_TEST

/* Never crash: every single-bit flip of a small capture, then random
 * chunk bodies behind a valid header. */
START_TEST(test_reader_fuzz)
{
	struct cw w;
	struct mt_header h = cw_header(0);
	uint64_t seed = 88172645463325252ull;

	cw_init(&w, &h, 64, 1);
	cw_thread(&w, 0, 1, "main");
	cw_code(&w, 1, "x.py", "f", 1);
	cw_stack(&w, 1, 0, 1, 2);
	for (int i = 0; i < 40; i++)
		cw_alloc(&w, (uint32_t)(i % 17), MT_ALLOC_MALLOC, 0x1000 + (uint64_t)i * 32, 32, 1);
	cw_free(&w, 0, MT_ALLOC_MUNMAP, 0x1000, 4096);
	cw_trailer(&w, 1, 41, 0);
	cw_finish(&w);
	for (size_t bit = 0; bit < w.len * 8; bit++) {
		struct mt_capture *c;
		struct counts k = { 0 };
		w.buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		if (mt_capture_open_mem(w.buf, w.len, &c) == 0) {
			int r = mt_capture_read(c, &count_ops, &k);
			ck_assert(r == 0);
			mt_capture_close(c);
		}
		w.buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
	}
	size_t hdr = MT_HDR_FIXED + h.cmdline.len;
	uint8_t *buf = malloc(hdr + 4096);
	memcpy(buf, w.buf, hdr);
	for (int iter = 0; iter < 3000; iter++) {
		size_t len = hdr + (size_t)(seed % 4096);
		for (size_t i = hdr; i < len; i++) {
			seed ^= seed << 13;
			seed ^= seed >> 7;
			seed ^= seed << 17;
			buf[i] = (uint8_t)seed;
		}
		/* a valid chunk header around random records, half the time */
		if (iter % 2 && len > hdr + MT_CHUNK_HEADER + 1) {
			struct mt_chunk ch;
			ch.raw_len = ch.stored_len = (uint32_t)(len - hdr - MT_CHUNK_HEADER);
			ch.checksum = mt_checksum(buf + hdr + MT_CHUNK_HEADER, ch.stored_len);
			mt_chunk_header_encode(buf + hdr, &ch);
		}
		struct mt_capture *c;
		struct counts k = { 0 };
		ck_assert_int_eq(mt_capture_open_mem(buf, len, &c), 0);
		ck_assert_int_eq(mt_capture_read(c, &count_ops, &k), 0);
		mt_capture_close(c);
	}
	free(buf);
	cw_release(&w);
}
END_TEST

static Suite *reader_suite(void)
{
	Suite *s = suite_create("reader");
	TCase *tc = tcase_create("read");

	tcase_add_loop_test(tc, test_reader_reads_everything, 0, 2);
	tcase_add_loop_test(tc, test_reader_chunk_of_stacks, 0, 2);
	tcase_add_test(tc, test_reader_callback_stops);
	tcase_add_test(tc, test_reader_trailer_counts_events);
	tcase_add_loop_test(tc, test_reader_records_of_the_other_mode, 0, 3);
	tcase_add_test(tc, test_reader_no_trailer);
	tcase_add_loop_test(tc, test_reader_thread_ended, 0, 2);
	tcase_add_test(tc, test_reader_bad_files);
	tcase_add_test(tc, test_reader_progress);
	suite_add_tcase(s, tc);

	tc = tcase_create("damage");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_reader_million_threads, 0, 3);
	tcase_add_loop_test(tc, test_reader_truncation_every_byte, 0, 2);
	tcase_add_loop_test(tc, test_reader_corrupt_chunk_mid_file, 0, 2);
	tcase_add_test(tc, test_reader_damaged_last_chunk_is_truncation);
	tcase_add_test(tc, test_reader_fuzz);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(reader_suite());
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
