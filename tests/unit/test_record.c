/* SPDX-License-Identifier: MIT */
/* Record codec: round trips, damage, delta and address state. */
#include "format/columns.h"
#include "format/error.h"
#include "format/hotdec.h"
#include "format/record.h"

#include <check.h>
#include <errno.h>  /* ENOSPC */
#include <stdlib.h> /* EXIT_SUCCESS */
#include <string.h> /* memcmp */

#include "record-sample.h"

static void assert_record_eq(const struct mt_record *a, const struct mt_record *b)
{
	ck_assert_uint_eq(a->type, b->type);
	switch (a->type) {
	case MT_REC_ALLOC:
		ck_assert_uint_eq(a->tidx, b->tidx);
		ck_assert_uint_eq(a->alloc.kind, b->alloc.kind);
		ck_assert_uint_eq(a->alloc.addr, b->alloc.addr);
		ck_assert_uint_eq(a->alloc.size, b->alloc.size);
		ck_assert_uint_eq(a->alloc.stack, b->alloc.stack);
		break;
	case MT_REC_FREE:
		ck_assert_uint_eq(a->tidx, b->tidx);
		ck_assert_uint_eq(a->free.kind, b->free.kind);
		ck_assert_uint_eq(a->free.addr, b->free.addr);
		ck_assert_uint_eq(a->free.size, b->free.size);
		break;
	case MT_REC_THREAD:
		ck_assert_uint_eq(a->tidx, b->tidx);
		ck_assert_uint_eq(a->thread.tid, b->thread.tid);
		assert_bytes_eq(a->thread.name, b->thread.name);
		ck_assert_uint_eq(a->thread.ended, b->thread.ended);
		break;
	case MT_REC_CODE:
		ck_assert_uint_eq(a->code.id, b->code.id);
		ck_assert_uint_eq(a->code.firstlineno, b->code.firstlineno);
		assert_bytes_eq(a->code.filename, b->code.filename);
		assert_bytes_eq(a->code.name, b->code.name);
		assert_bytes_eq(a->code.qualname, b->code.qualname);
		assert_bytes_eq(a->code.linetable, b->code.linetable);
		break;
	case MT_REC_STACK:
		ck_assert_uint_eq(a->stack.id, b->stack.id);
		ck_assert_uint_eq(a->stack.parent, b->stack.parent);
		ck_assert_uint_eq(a->stack.code, b->stack.code);
		ck_assert_uint_eq(a->stack.offset, b->stack.offset);
		break;
	case MT_REC_SAMPLE:
		ck_assert_uint_eq(a->sample.time_us, b->sample.time_us);
		ck_assert_uint_eq(a->sample.rss, b->sample.rss);
		ck_assert_uint_eq(a->sample.heap, b->sample.heap);
		ck_assert_uint_eq(a->sample.in_use, b->sample.in_use);
		break;
	case MT_REC_SITE:
		ck_assert_uint_eq(a->site.stack, b->site.stack);
		ck_assert_uint_eq(a->site.thread, b->site.thread);
		ck_assert_uint_eq(a->site.allocator, b->site.allocator);
		ck_assert_uint_eq(a->site.peak_bytes, b->site.peak_bytes);
		ck_assert_uint_eq(a->site.peak_count, b->site.peak_count);
		ck_assert_uint_eq(a->site.leak_bytes, b->site.leak_bytes);
		ck_assert_uint_eq(a->site.leak_count, b->site.leak_count);
		ck_assert_uint_eq(a->site.alloc_bytes, b->site.alloc_bytes);
		ck_assert_uint_eq(a->site.alloc_count, b->site.alloc_count);
		ck_assert_uint_eq(a->site.first_addr, b->site.first_addr);
		break;
	case MT_REC_TOTALS:
		ck_assert_mem_eq(&a->totals, &b->totals, sizeof(a->totals));
		break;
	case MT_REC_NAME:
		ck_assert_uint_eq(a->name.tid, b->name.tid);
		assert_bytes_eq(a->name.name, b->name.name);
		break;
	case MT_REC_DIAG:
		ck_assert_uint_eq(a->diag.code, b->diag.code);
		assert_bytes_eq(a->diag.msg, b->diag.msg);
		break;
	case MT_REC_TRAILER:
		ck_assert_uint_eq(a->trailer.time_us, b->trailer.time_us);
		ck_assert_uint_eq(a->trailer.n_events, b->trailer.n_events);
		ck_assert_uint_eq(a->trailer.n_dropped, b->trailer.n_dropped);
		break;
	case MT_REC_NATIVE:
		ck_assert_uint_eq(a->native.id, b->native.id);
		ck_assert_uint_eq(a->native.parent, b->native.parent);
		ck_assert_uint_eq(a->native.ip, b->native.ip);
		break;
	case MT_REC_MODULE:
		ck_assert_uint_eq(a->module.gen, b->module.gen);
		ck_assert_uint_eq(a->module.bias, b->module.bias);
		assert_bytes_eq(a->module.path, b->module.path);
		assert_bytes_eq(a->module.build_id, b->module.build_id);
		ck_assert_uint_eq(a->module.nsegs, b->module.nsegs);
		for (uint32_t i = 0; i < a->module.nsegs; i++) {
			ck_assert_uint_eq(a->module.seg_vaddr[i], b->module.seg_vaddr[i]);
			ck_assert_uint_eq(a->module.seg_memsz[i], b->module.seg_memsz[i]);
		}
		break;
	case MT_REC_HYBRID:
		ck_assert_uint_eq(a->hybrid.id, b->hybrid.id);
		ck_assert_uint_eq(a->hybrid.python, b->hybrid.python);
		ck_assert_uint_eq(a->hybrid.native, b->hybrid.native);
		break;
	default:
		ck_abort_msg("record type %u not compared", a->type);
	}
}

/* Decoder side delta state: one per thread index. */
struct deltas {
	struct mt_delta d[512];
};

static struct mt_delta *get_delta(void *ctx, uint32_t thread)
{
	struct deltas *ds = ctx;
	return thread < 512 ? &ds->d[thread] : NULL;
}

START_TEST(test_record_roundtrip)
{
	for (int variant = 0; variant < 2; variant++) {
		struct mt_record in = sample_record(rec_types[_i], variant), out;
		struct mt_delta enc = { 0 };
		struct deltas dec;
		uint8_t buf[512];

		memset(&dec, 0, sizeof(dec));
		ck_assert_str_eq(mt_rec_name(in.type) ? "ok" : "missing", "ok");
		ssize_t n = mt_rec_encode(buf, sizeof(buf), &in, &enc);
		ck_assert_int_gt(n, 0);
		memset(&out, 0xa5, sizeof(out));
		ck_assert_int_eq(mt_rec_decode(buf, (size_t)n, &out, get_delta, &dec), n);
		assert_record_eq(&in, &out);
	}
}
END_TEST

START_TEST(test_record_truncation)
{
	for (int variant = 0; variant < 2; variant++) {
		struct mt_record in = sample_record(rec_types[_i], variant), out;
		struct mt_delta enc = { 0 };
		struct deltas dec;
		uint8_t buf[512];

		ssize_t n = mt_rec_encode(buf, sizeof(buf), &in, &enc);
		ck_assert_int_gt(n, 0);
		for (ssize_t len = 0; len < n; len++) {
			/* copy so that ASan sees reads past len */
			uint8_t *cut = malloc(len ? (size_t)len : 1);
			memcpy(cut, buf, (size_t)len);
			memset(&dec, 0, sizeof(dec));
			ck_assert_int_eq(mt_rec_decode(cut, (size_t)len, &out, get_delta, &dec),
					 -MT_ETRUNC);
			/* a failed decode leaves the delta state alone */
			static const struct mt_delta zero;
			for (int t = 0; t < 512; t++)
				ck_assert(memcmp(&dec.d[t], &zero, sizeof(zero)) == 0);
			free(cut);
		}
	}
}
END_TEST

START_TEST(test_record_enospc)
{
	struct mt_record in = sample_record(rec_types[_i], 0);
	uint8_t buf[512];
	struct mt_delta enc = { 0 };
	ssize_t n = mt_rec_encode(buf, sizeof(buf), &in, &enc);

	ck_assert_int_gt(n, 0);
	for (ssize_t cap = 0; cap < n; cap++) {
		struct mt_delta e = { 0 };
		ck_assert_int_eq(mt_rec_encode(buf, (size_t)cap, &in, &e), -ENOSPC);
	}
}
END_TEST

/* Deltas go up and down and interleave threads, as the payload writes. */
START_TEST(test_record_delta_sequence)
{
	static uint8_t buf[1 << 16];
	struct mt_delta enc[4] = { { 0 } };
	struct deltas dec;
	uint64_t addrs[] = { 0x7f0000001000, 0x1000, UINT64_MAX - 15, 0x10, 0x7f0000001000, 0 };
	uint32_t stacks[] = { 1, 100000, 0, 5, 5, UINT32_MAX };
	size_t len = 0;

	memset(&dec, 0, sizeof(dec));
	for (int i = 0; i < 600; i++) {
		struct mt_record r = { .type = (uint8_t)(i % 3 ? MT_REC_ALLOC : MT_REC_FREE),
				       .tidx = (uint32_t)(i % 4) };
		if (r.type == MT_REC_ALLOC)
			r.alloc = (struct mt_rec_alloc){ MT_ALLOC_MALLOC, addrs[i % 6] + (uint64_t)i,
							 (uint64_t)i * 7, stacks[i % 6] };
		else
			r.free = (struct mt_rec_free){ MT_ALLOC_FREE, addrs[(i + 3) % 6], 0 };
		ssize_t n = mt_rec_encode(buf + len, sizeof(buf) - len, &r, &enc[r.tidx]);
		ck_assert_int_gt(n, 0);
		len += (size_t)n;
	}
	size_t off = 0;
	for (int i = 0; i < 600; i++) {
		struct mt_record r;
		ssize_t n = mt_rec_decode(buf + off, len - off, &r, get_delta, &dec);
		ck_assert_int_gt(n, 0);
		ck_assert_uint_eq(r.tidx, (uint32_t)(i % 4));
		if (i % 3) {
			ck_assert_uint_eq(r.alloc.addr, addrs[i % 6] + (uint64_t)i);
			ck_assert_uint_eq(r.alloc.stack, stacks[i % 6]);
			ck_assert_uint_eq(r.alloc.size, (uint64_t)i * 7);
		} else {
			ck_assert_uint_eq(r.free.addr, addrs[(i + 3) % 6]);
		}
		off += (size_t)n;
	}
	ck_assert_uint_eq(off, len);
}
END_TEST

START_TEST(test_record_unknown_type_skipped)
{
	/* type 15 (not known), length 3, body; then a SAMPLE */
	uint8_t buf[64] = { 0x0f, 0x03, 0xaa, 0xbb, 0xcc };
	struct mt_record s = sample_record(MT_REC_SAMPLE, 0), r;
	struct deltas dec;
	ssize_t n = mt_rec_encode(buf + 5, sizeof(buf) - 5, &s, NULL);

	memset(&dec, 0, sizeof(dec));
	ck_assert_int_gt(n, 0);
	ck_assert_int_eq(mt_rec_decode(buf, 5 + (size_t)n, &r, get_delta, &dec), 5);
	ck_assert_uint_eq(r.type, 15);
	ck_assert_int_eq(mt_rec_decode(buf + 5, (size_t)n, &r, get_delta, &dec), n);
	assert_record_eq(&s, &r);
}
END_TEST

/* The allocator's count is a trailing field after heap: a full capture
 * writes heap as 0 before it; bodies of two or three fields (older
 * captures, aggregated ones) read as not taken; a field cut by the body's
 * end is corrupt. */
START_TEST(test_record_sample_in_use)
{
	struct mt_record in = { .type = MT_REC_SAMPLE }, out;
	struct deltas dec;
	uint8_t buf[64];

	in.sample = (struct mt_rec_sample){ .time_us = 5, .rss = 7, .in_use = 300 + 1 };
	memset(&dec, 0, sizeof(dec));
	ssize_t n = mt_rec_encode(buf, sizeof(buf), &in, NULL);
	static const uint8_t want[] = { 0x06, 0x05, 0x05, 0x07, 0x00, 0xad, 0x02 };
	ck_assert_int_eq(n, sizeof(want));
	ck_assert(memcmp(buf, want, sizeof(want)) == 0);
	ck_assert_int_eq(mt_rec_decode(buf, (size_t)n, &out, get_delta, &dec), n);
	ck_assert_uint_eq(out.sample.heap, 0);
	ck_assert_uint_eq(out.sample.in_use, 301);

	static const uint8_t two[] = { 0x06, 0x02, 0x05, 0x07 };
	memset(&out, 0xa5, sizeof(out));
	ck_assert_int_eq(mt_rec_decode(two, sizeof(two), &out, get_delta, &dec), 4);
	ck_assert_uint_eq(out.sample.heap, 0);
	ck_assert_uint_eq(out.sample.in_use, 0);

	static const uint8_t three[] = { 0x06, 0x03, 0x05, 0x07, 0x09 };
	memset(&out, 0xa5, sizeof(out));
	ck_assert_int_eq(mt_rec_decode(three, sizeof(three), &out, get_delta, &dec), 5);
	ck_assert_uint_eq(out.sample.heap, 9);
	ck_assert_uint_eq(out.sample.in_use, 0);

	/* the body ends inside in_use's varint */
	static const uint8_t cut[] = { 0x06, 0x04, 0x05, 0x07, 0x00, 0xad, 0x02 };
	ck_assert_int_eq(mt_rec_decode(cut, sizeof(cut), &out, get_delta, &dec), -MT_ECORRUPT);
}
END_TEST

START_TEST(test_record_malformed)
{
	static const struct {
		const char *what, *rec;
		size_t len;
		ssize_t want;
	} cases[] = {
		{ "type 0", "\x00\x01\x00", 3, -MT_ECORRUPT },
		{ "ALLOC with a free kind", "\x01\x02\x00\x00\x00", 5, -MT_ECORRUPT },
		{ "FREE with an allocation kind", "\x02\x01\x00", 3, -MT_ECORRUPT },
		{ "STACK with id 0", "\x05\x04\x00\x00\x00\x00", 6, -MT_ECORRUPT },
		{ "STACK 1 whose parent would be 1 - 2 = -1", "\x05\x04\x01\x04\x00\x00", 6, -MT_ECORRUPT },
		{ "STACK 1 whose parent would be 1 + 2^32", "\x05\x08\x01\xff\xff\xff\xff\x1f\x00\x00", 10,
		  -MT_ECORRUPT },
		/* a parent made after its child could close a cycle */
		{ "STACK 2 whose parent is itself", "\x05\x04\x02\x00\x00\x00", 6, -MT_ECORRUPT },
		{ "STACK 2 whose parent is 3", "\x05\x04\x02\x01\x00\x00", 6, -MT_ECORRUPT },
		{ "STACK 2 whose parent is 1", "\x05\x04\x02\x02\x00\x00", 6, 6 },
		{ "STACK whose parent distance is 2^63 (no overflow)",
		  "\x05\x0d\x05\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01\x00\x00", 15, -MT_ECORRUPT },
		{ "ALLOC whose stack delta is 2^63",
		  "\x01\xf1\x00\x10\xfe\xff\xff\xff\xff\xff\xff\xff\xff\x01", 14, -MT_ECORRUPT },
		{ "SAMPLE with a non-zero thread nibble", "\x16\x02\x00\x00", 4, -MT_ECORRUPT },
		{ "body shorter than its fields", "\x06\x01\x00", 3, -MT_ECORRUPT },
		{ "THREAD 2 saying index 2 - 3 ended", "\x23\x04\x01\x01\x41\x03", 6, -MT_ECORRUPT },
		{ "THREAD 2 saying index 2 - 2 = 0 ended", "\x23\x04\x01\x01\x41\x02", 6, 6 },
		{ "THREAD 2 without the field", "\x23\x03\x01\x01\x41", 5, 5 },
		{ "thread index with no delta state", "\xf1\x80\x08\x01\x00\x00\x00", 7, -ENOMEM },
	};
	struct deltas dec;
	struct mt_record r;
	memset(&dec, 0, sizeof(dec));
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ssize_t got = mt_rec_decode((const uint8_t *)cases[i].rec, cases[i].len, &r, get_delta,
					    &dec);
		ck_assert_msg(got == cases[i].want, "%s: %zd, expected %zd", cases[i].what, got,
			      cases[i].want);
	}
}
END_TEST

/* Addresses that come back (a block freed and handed out again, a block
 * freed right after its allocation) are coded as ring slots: the stream
 * must decode to the same events and be shorter than explicit deltas. */
START_TEST(test_record_address_rings)
{
	static const struct { int alloc; uint64_t addr; } ev[] = {
		{ 1, 0x7f0000001000 }, { 1, 0x7f0000001040 }, { 0, 0x7f0000001040 },
		{ 1, 0x7f0000001040 }, { 0, 0x7f0000001000 }, { 0, 0x7f0000001040 },
		{ 1, 0x7f0000001000 }, { 1, 0x7f0000009008 }, { 0, 0x7f0000009008 },
		{ 0, 0x7f0000001000 }, { 1, 0x7f0000001000 }, { 0, 0x7f0000001000 },
	};
	uint8_t buf[1024];
	struct mt_delta enc = { 0 };
	size_t n = 0, explicit_bytes = 0;
	for (size_t i = 0; i < sizeof(ev) / sizeof(ev[0]); i++) {
		/* the same state without the rings: every address a delta */
		struct mt_delta plain = enc;
		memset(plain.freed, 0, sizeof(plain.freed));
		memset(plain.live, 0, sizeof(plain.live));
		if (ev[i].alloc) {
			n += mt_enc_alloc(buf + n, &enc, 0, MT_ALLOC_PYMALLOC_MALLOC, ev[i].addr, 32, 3);
			explicit_bytes += mt_enc_alloc(buf + 512, &plain, 0, MT_ALLOC_PYMALLOC_MALLOC,
						       ev[i].addr, 32, 3);
		} else {
			n += mt_enc_free(buf + n, &enc, 0, MT_ALLOC_PYMALLOC_FREE, ev[i].addr, 0);
			explicit_bytes += mt_enc_free(buf + 512, &plain, 0, MT_ALLOC_PYMALLOC_FREE,
						      ev[i].addr, 0);
		}
	}
	ck_assert_uint_lt(n, explicit_bytes);
	static struct deltas dec;
	memset(&dec, 0, sizeof(dec));
	size_t off = 0;
	for (size_t i = 0; i < sizeof(ev) / sizeof(ev[0]); i++) {
		struct mt_record r;
		ssize_t k = mt_rec_decode(buf + off, n - off, &r, get_delta, &dec);
		ck_assert_int_gt(k, 0);
		ck_assert_uint_eq(r.type, ev[i].alloc ? MT_REC_ALLOC : MT_REC_FREE);
		ck_assert_uint_eq(ev[i].alloc ? r.alloc.addr : r.free.addr, ev[i].addr);
		if (ev[i].alloc)
			ck_assert_uint_eq(r.alloc.stack, 3);
		off += (size_t)k;
	}
	ck_assert_uint_eq(off, n);
}
END_TEST

/* The state the threads share: pymalloc's blocks, handed out one after
 * another from a pool, freed, and handed out again the last freed first
 * (by another thread too), are named by mode alone: one block past the
 * last of their class (9) or the block of their class freed last (8);
 * freed by a thread whose ring does not hold them, they are named by
 * their table slot (12).
 * The decoder follows; without the shared state, modes 8 and 12 are
 * corrupt. */
START_TEST(test_record_reuse)
{
	static uint8_t buf[1 << 14];
	static struct mt_reuse er, dr;
	static struct deltas dec, bare;
	struct mt_delta enc[2];
	struct { int alloc; uint32_t thread; uint64_t addr, size; } ev[64];
	size_t nev = 0, n = 0, modes[16] = { 0 };
	const uint64_t pool = 0x7f0000010000;

	memset(&er, 0, sizeof(er));
	memset(&dr, 0, sizeof(dr));
	memset(enc, 0, sizeof(enc));
	memset(&dec, 0, sizeof(dec));
	memset(&bare, 0, sizeof(bare));
	enc[0].reuse = enc[1].reuse = &er;
	for (int i = 0; i < 512; i++)
		dec.d[i].reuse = &dr;
	for (int i = 0; i < 10; i++) /* 48-byte blocks, one after another */
		ev[nev++] = (typeof(ev[0])){ 1, 0, pool + 48 * (uint64_t)i, 40 + (uint64_t)i % 8 };
	for (int i = 2; i < 8; i++) /* freed by the other thread */
		ev[nev++] = (typeof(ev[0])){ 0, 1, pool + 48 * (uint64_t)i, 0 };
	for (int i = 7; i >= 2; i--) /* handed out again, the last freed first */
		ev[nev++] = (typeof(ev[0])){ 1, 0, pool + 48 * (uint64_t)i, 33 };
	for (size_t i = 0; i < nev; i++) {
		size_t k = ev[i].alloc ? mt_enc_alloc(buf + n, &enc[ev[i].thread], ev[i].thread,
						      MT_ALLOC_PYMALLOC_MALLOC, ev[i].addr, ev[i].size, 0)
				       : mt_enc_free(buf + n, &enc[ev[i].thread], ev[i].thread,
						     MT_ALLOC_PYMALLOC_FREE, ev[i].addr, 0);
		modes[buf[n + 1] >> 4]++;
		n += k;
	}
	ck_assert_uint_eq(modes[MT_ADDR_NEXT], 9); /* all but the first */
	ck_assert_uint_eq(modes[MT_ADDR_REUSED], 6); /* every block handed out again */
	ck_assert_uint_eq(modes[MT_ADDR_SLOT], 6);   /* the frees: not in thread 1's ring */
	size_t off = 0;
	for (size_t i = 0; i < nev; i++) {
		struct mt_record r;
		ssize_t k = mt_rec_decode(buf + off, n - off, &r, get_delta, &dec);
		ck_assert_int_gt(k, 0);
		ck_assert_uint_eq(r.tidx, ev[i].thread);
		ck_assert_uint_eq(ev[i].alloc ? r.alloc.addr : r.free.addr, ev[i].addr);
		off += (size_t)k;
	}
	ck_assert_uint_eq(off, n);
	ck_assert(memcmp(&dr, &er, sizeof(er)) == 0);
	/* the first FREE of a table slot, read without the shared state */
	off = 0;
	for (size_t i = 0; i < nev; i++) {
		struct mt_record r;
		ssize_t k = mt_rec_decode(buf + off, n - off, &r, get_delta, &bare);
		if (i < 10) {
			ck_assert_int_gt(k, 0);
		} else {
			ck_assert_int_eq(k, -MT_ECORRUPT);
			break;
		}
		off += (size_t)k;
	}
}
END_TEST

/* Blocks of two size classes carved from two pools one after another
 * are each one block past the last of their class; freed in reverse, the
 * last few are in the ring and the others deltas from the last such FREE
 * of a byte each. Ring entries are named by age, and the
 * decoder follows the state exactly, sizes above 512 and 0 included. */
START_TEST(test_record_size_classes)
{
	static uint8_t buf[1 << 16];
	static struct deltas dec;
	struct mt_delta enc;
	struct { int alloc; uint64_t addr, size; } ev[400];
	size_t nev = 0, n = 0;

	memset(&enc, 0, sizeof(enc));
	for (int i = 0; i < 100; i++) {
		ev[nev++] = (typeof(ev[0])){ 1, 0x7f0000100000 + 64 * (uint64_t)i, 50 + i % 10 };
		ev[nev++] = (typeof(ev[0])){ 1, 0x7f0000200000 + 32 * (uint64_t)i, 24 + i % 8 };
	}
	for (int i = 99; i >= 0; i--)
		ev[nev++] = (typeof(ev[0])){ 0, 0x7f0000100000 + 64 * (uint64_t)i, 0 };
	for (int i = 0; i < 50; i++) /* big blocks: one class per power of two */
		ev[nev++] = (typeof(ev[0])){ 1, 0x7e0000000000 + (i % 2 ? 0 : 1ull << 30) +
						    4096 * (uint64_t)i, i % 2 ? 600 : (1ull << 45) };
	for (int i = 0; i < 50; i++)
		ev[nev++] = (typeof(ev[0])){ 1, 0, 0 }; /* failed: never a ring slot */
	for (size_t i = 0; i < nev; i++) {
		size_t k = ev[i].alloc ? mt_enc_alloc(buf + n, &enc, 0, MT_ALLOC_PYMALLOC_MALLOC,
						      ev[i].addr, ev[i].size, 1)
				       : mt_enc_free(buf + n, &enc, 0, MT_ALLOC_PYMALLOC_FREE,
						     ev[i].addr, 0);
		if (i >= 2 && i < 200)
			ck_assert_uint_eq(k, 4); /* head, km (one block on), size, stack */
		else if (i >= 200 && i < 206)
			ck_assert_uint_eq(k, 2); /* head, km: in the ring of the last 12 */
		else if (i >= 207 && i < 300)
			ck_assert_uint_eq(k, 3); /* head, km, one delta byte */
		n += k;
	}
	memset(&dec, 0, sizeof(dec));
	size_t off = 0;
	for (size_t i = 0; i < nev; i++) {
		struct mt_record r;
		ssize_t k = mt_rec_decode(buf + off, n - off, &r, get_delta, &dec);
		ck_assert_int_gt(k, 0);
		ck_assert_uint_eq(r.type, ev[i].alloc ? MT_REC_ALLOC : MT_REC_FREE);
		ck_assert_uint_eq(ev[i].alloc ? r.alloc.addr : r.free.addr, ev[i].addr);
		if (ev[i].alloc)
			ck_assert_uint_eq(r.alloc.size, ev[i].size);
		off += (size_t)k;
	}
	ck_assert_uint_eq(off, n);
	/* the encoder's search aid */
	memset(enc.freed_tag, 0, sizeof(enc.freed_tag));
	memset(enc.live_tag, 0, sizeof(enc.live_tag));
	ck_assert(memcmp(&dec.d[0], &enc, sizeof(enc)) == 0);

	/* the newest entry is age 0, wherever the ring position is */
	uint8_t rec[MT_REC_HOT_MAX];
	mt_enc_free(rec, &enc, 0, MT_ALLOC_FREE, 0x5000, 0);
	ck_assert_uint_eq(mt_enc_alloc(rec, &enc, 0, MT_ALLOC_MALLOC, 0x5000, 16, 1), 4);
	/* head, km of age 0, size, stack */
	ck_assert_uint_eq(rec[1], MT_ALLOC_MALLOC);
	/* a taken slot is never matched by a failed allocation (address 0) */
	mt_enc_free(rec, &enc, 0, MT_ALLOC_FREE, 0x1000, 0);
	mt_enc_free(rec, &enc, 0, MT_ALLOC_FREE, 0x2000, 0);
	mt_enc_alloc(rec, &enc, 0, MT_ALLOC_MALLOC, 0x1000, 16, 1);
	ck_assert_uint_eq(rec[1], MT_ALLOC_MALLOC | 1 << 4);
	mt_enc_alloc(rec, &enc, 0, MT_ALLOC_MALLOC, 0, 16, 1);
	ck_assert_uint_eq(rec[1] >> 4, MT_ADDR_ALIGNED);
	/* an age naming an empty slot is corrupt, and changes nothing */
	memset(&dec, 0, sizeof(dec));
	ck_assert_int_eq(mt_rec_decode((const uint8_t *)"\x01\x31\x10\x00", 4, &(struct mt_record){ 0 }, get_delta,
				       &dec),
			 -MT_ECORRUPT);
}
END_TEST

/* Columns read a record at a time, as the reader reads them: a hot record
 * of the last hot thread from its fields (mt_cols_in_hot(), hotdec.h),
 * raw kinds' km and xm too, any other as a row; every record is the one
 * mt_rec_decode() reads from the rows, with every address mode (the
 * shared state too) and with the node column coded as @opts says, and a
 * cut of the columns stops the reading at a misfit, never at a wrong
 * record. */
static struct deltas dec_rows, dec_cols;
static struct mt_reuse reuse_enc, reuse_rows, reuse_cols;

static void deltas_reset(void)
{
	memset(&dec_rows, 0, sizeof(dec_rows));
	memset(&dec_cols, 0, sizeof(dec_cols));
	memset(&reuse_rows, 0, sizeof(reuse_rows));
	memset(&reuse_cols, 0, sizeof(reuse_cols));
	for (int i = 0; i < 512; i++) {
		dec_rows.d[i].reuse = &reuse_rows;
		dec_cols.d[i].reuse = &reuse_cols;
	}
}

/* The records of columns [@cols, +@n) split with @opts, read by
 * mt_cols_in, each checked against @want (@max of them) as it is read;
 * *@fit: whether they fit together; *@from_fields and *@raw count the
 * records read from their fields and the raw ones among them. Returns
 * how many were read. */
static size_t read_cols(const uint8_t *cols, size_t n, unsigned opts,
			const struct mt_record *want, size_t max, int *fit, size_t *from_fields,
			size_t *raw)
{
	static uint8_t row[(1 << 14) + MT_ROW_SLACK];
	static struct mt_cols_in in;
	struct mt_record r;
	size_t k = 0;

	*fit = 0;
	if (mt_cols_in_begin(&in, cols, n, opts) < 0)
		return 0;
	while (mt_cols_in_more(&in) && k < max) {
		struct mt_cols_hot h;
		int hot = mt_cols_in_hot(&in, &h);
		if (hot < 0)
			return k;
		if (hot) {
			ck_assert(mt__hot_km_ok(h.type, h.kind, h.mode));
			ck_assert(!h.overflow);
			r.type = (uint8_t)h.type;
			r.tidx = (uint32_t)in.thread;
			ck_assert_int_eq(mt__hot_decode(get_delta(&dec_cols, (uint32_t)in.thread), &r,
							h.type, h.kind, h.mode, h.zaddr, h.size,
							h.zstack),
					 0);
			assert_record_eq(&r, &want[k++]);
			(*from_fields)++;
			*raw += mt_allocator_is_raw(h.kind);
			continue;
		}
		ssize_t len = mt_cols_in_row(&in, row, sizeof(row));
		if (len < 0)
			return k;
		ck_assert_int_eq(mt_rec_decode(row, (size_t)len, &r, get_delta, &dec_cols), len);
		assert_record_eq(&r, &want[k++]);
	}
	*fit = mt_cols_in_end(&in);
	return k;
}

static size_t put_rec(uint8_t *p, size_t cap, const struct mt_record *r)
{
	ssize_t n = mt_rec_encode(p, cap, r, NULL);
	ck_assert_int_gt(n, 0);
	return (size_t)n;
}

START_TEST(test_record_columns_read)
{
	static uint8_t recs[1 << 14], cols[MT_SPLIT_MAX(1 << 14)], split[MT_SPLIT_SCRATCH(1 << 14)];
	static struct mt_record want[1024];
	unsigned opts = _i ? MT_NODES_NATIVE : 0;
	struct mt_delta enc[21];
	size_t len = 0, n_want = 0, from_fields = 0, raw = 0;
	int fit;

	memset(enc, 0, sizeof(enc));
	memset(&reuse_enc, 0, sizeof(reuse_enc));
	for (int i = 0; i < 21; i++)
		enc[i].reuse = &reuse_enc;
	for (int t = 0; t < N_TYPES; t++) {
		struct mt_record r = sample_record(rec_types[t], 0);
		len += (size_t)mt_rec_encode(recs + len, sizeof(recs) - len, &r, &enc[0]);
	}
	for (uint32_t i = 1; i <= 12; i++) { /* node records the node column codes */
		struct mt_record r = { .type = MT_REC_STACK };
		r.stack = (struct mt_rec_stack){ 100 + 3 * i, 100 + 3 * (i - 1), 7, 10 + i };
		len += put_rec(recs + len, sizeof(recs) - len, &r);
		r = (struct mt_record){ .type = MT_REC_NATIVE };
		r.native = (struct mt_rec_native){ 101 + 3 * i, 98 + 3 * i, 0x54d560 + 16 * (i % 3) };
		len += put_rec(recs + len, sizeof(recs) - len, &r);
		r = (struct mt_record){ .type = MT_REC_HYBRID };
		r.hybrid = (struct mt_rec_hybrid){ 102 + 3 * i, 100 + 3 * i, 101 + 3 * i };
		len += put_rec(recs + len, sizeof(recs) - len, &r);
	}
	for (int i = 0; i < 240; i++) { /* rings, reused and next blocks, slots, deltas */
		uint32_t thread = i % 50 < 40 ? 2 : 20;
		struct mt_delta *d = &enc[thread];
		uint64_t addr = 0x7f0000000000 + (uint64_t)(i % 9) * 48 + (i % 11 == 0 ? 8 : 0);
		int is_raw = i % 5 == 4;
		unsigned kind = is_raw ? MT_ALLOC_PYMALLOC_RAW_MALLOC + (unsigned)(i % 3)
			      : i % 3	? MT_ALLOC_PYMALLOC_MALLOC
					: MT_ALLOC_MALLOC;
		len += mt_enc_alloc(recs + len, d, thread, kind, addr, 16 + (uint64_t)(i % 4) * 16,
				    (uint32_t)(i % 13));
		if (i % 4 != 3)
			len += mt_enc_free(recs + len, d, thread,
					   is_raw	    ? MT_ALLOC_PYMALLOC_RAW_FREE
					   : i % 17 ? (i % 3 ? MT_ALLOC_PYMALLOC_FREE : MT_ALLOC_FREE)
						    : MT_ALLOC_MUNMAP,
					   addr - (uint64_t)(i % 3) * 48, 4096);
	}
	ck_assert_uint_lt(len, sizeof(recs));
	deltas_reset();
	for (size_t off = 0; off < len; n_want++) {
		ck_assert_uint_lt(n_want, 1024);
		ssize_t n = mt_rec_decode(recs + off, len - off, &want[n_want], get_delta, &dec_rows);
		ck_assert_int_gt(n, 0);
		off += (size_t)n;
	}
	ssize_t ncols = mt_chunk_split(cols, split, recs, len, NULL, opts);
	ck_assert_int_gt(ncols, 0);
	ck_assert_uint_eq(read_cols(cols, (size_t)ncols, opts, want, n_want, &fit, &from_fields,
				    &raw),
			  n_want);
	ck_assert(fit);
	ck_assert_uint_gt(from_fields, n_want / 2); /* most from their fields */
	ck_assert_uint_gt(raw, 20);                 /* raw ones among them */
	/* a cut of the columns: whole records, then a misfit */
	for (size_t cut = 0; cut < (size_t)ncols; cut += 7) {
		uint8_t *c = malloc(cut ? cut : 1); /* ASan sees reads past cut */
		memcpy(c, cols, cut);
		deltas_reset();
		ck_assert_uint_lt(read_cols(c, cut, opts, want, n_want, &fit, &from_fields, &raw),
				  n_want);
		ck_assert(!fit);
		free(c);
	}
}
END_TEST

static Suite *record_suite(void)
{
	Suite *s = suite_create("record");
	TCase *tc = tcase_create("codec");

	tcase_add_loop_test(tc, test_record_roundtrip, 0, N_TYPES);
	tcase_add_loop_test(tc, test_record_truncation, 0, N_TYPES);
	tcase_add_loop_test(tc, test_record_enospc, 0, N_TYPES);
	tcase_add_test(tc, test_record_delta_sequence);
	tcase_add_test(tc, test_record_address_rings);
	tcase_add_test(tc, test_record_size_classes);
	tcase_add_test(tc, test_record_reuse);
	tcase_add_test(tc, test_record_unknown_type_skipped);
	tcase_add_test(tc, test_record_malformed);
	tcase_add_test(tc, test_record_sample_in_use);
	tcase_add_loop_test(tc, test_record_columns_read, 0, 2);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(record_suite());
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
