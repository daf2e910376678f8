/* SPDX-License-Identifier: MIT */
/* Record codec, header and chunk framing: round trips and damage. */
#include "format/columns.h"
#include "format/error.h"
#include "format/record.h"

#include <check.h>
#include <errno.h>  /* ENOSPC */
#include <stdlib.h> /* EXIT_SUCCESS */
#include <string.h> /* memcmp */

static const unsigned rec_types[] = {
#define MT_X(name, val, member) val,
	MT_RECORDS(MT_X)
#undef MT_X
};
#define N_TYPES (int)(sizeof(rec_types) / sizeof(rec_types[0]))

static struct mt_bytes bytes(const char *s)
{
	struct mt_bytes b = { (const uint8_t *)s, (uint32_t)strlen(s) };
	return b;
}

/* A record of @type with every field set to something non-trivial;
 * @variant varies thread indexes and values across the one-byte and
 * extended encodings. */
static struct mt_record sample_record(unsigned type, int variant)
{
	struct mt_record r;
	memset(&r, 0, sizeof(r));
	r.type = (uint8_t)type;
	uint32_t thread = variant ? 300 : 3;
	switch (type) {
	case MT_REC_ALLOC:
		r.tidx = thread;
		r.alloc.kind = variant ? MT_ALLOC_MMAP : MT_ALLOC_CALLOC;
		r.alloc.addr = variant ? 0x7fffdeadb000ull : 0x1000;
		r.alloc.size = variant ? (1ull << 40) : 24;
		r.alloc.stack = variant ? 123456 : 7;
		break;
	case MT_REC_FREE:
		r.tidx = thread;
		r.free.kind = variant ? MT_ALLOC_MUNMAP : MT_ALLOC_PYMALLOC_FREE;
		r.free.addr = variant ? UINT64_MAX - 4095 : 0x2000;
		r.free.size = variant ? 8192 : 0;
		break;
	case MT_REC_THREAD:
		r.tidx = thread;
		r.thread.tid = variant ? UINT64_MAX : 1234;
		r.thread.name = bytes(variant ? "" : "MainThread");
		break;
	case MT_REC_CODE:
		r.code.id = variant ? UINT32_MAX : 5;
		r.code.firstlineno = 17;
		r.code.filename = bytes("/usr/lib/python3.11/json/decoder.py");
		r.code.name = bytes("decode");
		r.code.qualname = bytes(variant ? "" : "JSONDecoder.decode");
		r.code.linetable = bytes(variant ? "" : "\x80\x00\xd8\x08\x0c");
		break;
	case MT_REC_STACK:
		r.stack = (struct mt_rec_stack){ variant ? UINT32_MAX : 9, variant ? 0 : 8, 5,
						 variant ? UINT32_MAX : 42 };
		break;
	case MT_REC_SAMPLE:
		r.sample = (struct mt_rec_sample){ .time_us = variant ? UINT64_MAX : 10000,
						   .rss = 1ull << 33,
						   .heap = variant ? UINT64_MAX : 0,
						   .in_use = variant ? UINT64_MAX : 0 };
		break;
	case MT_REC_SITE:
		r.site = (struct mt_rec_site){ .stack = variant ? UINT32_MAX : 9,
					       .thread = variant ? 300 : 0,
					       .allocator = variant ? MT_ALLOC_PYMALLOC_REALLOC
								    : MT_ALLOC_MALLOC,
					       .peak_bytes = variant ? UINT64_MAX : 4096,
					       .peak_count = 2,
					       .leak_bytes = variant ? 1ull << 40 : 0,
					       .leak_count = variant ? 7 : 0,
					       .alloc_bytes = 1ull << 33,
					       .alloc_count = 1000,
					       .first_addr = variant ? UINT64_MAX - 15 : 0x1000 };
		break;
	case MT_REC_NAME:
		r.name.tid = variant ? UINT64_MAX : 4321;
		r.name.name = bytes(variant ? "" : "worker-3");
		break;
	case MT_REC_TOTALS:
		r.totals.n_allocs = variant ? UINT64_MAX : 1000;
		r.totals.n_frees = 999;
		r.totals.peak_heap = 1ull << 34;
		r.totals.live_count = variant ? 0 : 1;
		for (unsigned i = 0; i < MT_TOTALS_KINDS; i++)
			r.totals.kind_count[i] = variant ? UINT64_MAX - i : i;
		for (unsigned i = 0; i < MT_TOTALS_BUCKETS; i++)
			r.totals.size_hist[i] = variant ? i * 1000 : 0;
		break;
	case MT_REC_DIAG:
		r.diag.code = MT_DIAG_TRACKING_DISABLED;
		r.diag.msg = bytes(variant ? "" : "capture write failed: No space left on device");
		break;
	case MT_REC_TRAILER:
		r.trailer = (struct mt_rec_trailer){ 123456789, variant ? UINT64_MAX : 1000, 3 };
		break;
	case MT_REC_NATIVE:
		r.native = (struct mt_rec_native){ variant ? UINT32_MAX : 9, variant ? 0 : 8,
						   variant ? 0x7fffffffe123ull : 0x401000 };
		break;
	case MT_REC_MODULE:
		r.module.gen = variant ? UINT32_MAX : 1;
		r.module.bias = variant ? 0x7f0000000000ull : 0;
		r.module.path = bytes(variant ? "" : "/usr/lib/x86_64-linux-gnu/libc.so.6");
		r.module.build_id = bytes(variant ? "" : "\x57\x1d\x98\xe0");
		r.module.nsegs = variant ? MT_MODULE_SEGS_MAX : 2;
		for (uint32_t i = 0; i < r.module.nsegs; i++) {
			r.module.seg_vaddr[i] = 0x1000 * i;
			r.module.seg_memsz[i] = variant ? UINT64_MAX - i : 0x800 + i;
		}
		break;
	case MT_REC_HYBRID:
		r.hybrid = (struct mt_rec_hybrid){ variant ? UINT32_MAX : 9, variant ? 0 : 3,
						   variant ? UINT32_MAX - 1 : 0 };
		break;
	default:
		ck_abort_msg("record type %u has no sample in test_record.c", type);
	}
	return r;
}

static void assert_bytes_eq(struct mt_bytes a, struct mt_bytes b)
{
	ck_assert_uint_eq(a.len, b.len);
	if (a.len)
		ck_assert(memcmp(a.p, b.p, a.len) == 0);
}

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

START_TEST(test_record_header_roundtrip)
{
	static const uint8_t cmd[] = "python3\0-c\0pass";
	struct mt_header in = { MT_FORMAT_VERSION, MT_HDR_ATTACHED | MT_HDR_NATIVE, 77, 0x030c00f0,
				123456789012345ull, 10, 16384, 78, { cmd, sizeof(cmd) - 1 } };
	struct mt_header out;
	uint8_t buf[256];
	ssize_t n = mt_header_encode(buf, sizeof(buf), &in);

	ck_assert_int_eq(n, MT_HDR_FIXED + (ssize_t)sizeof(cmd) - 1);
	ck_assert_int_eq(mt_header_decode(buf, (size_t)n, &out), n);
	ck_assert_uint_eq(out.version, in.version);
	ck_assert_uint_eq(out.flags, in.flags);
	ck_assert_uint_eq(out.pid, in.pid);
	ck_assert_uint_eq(out.python_hex, in.python_hex);
	ck_assert_uint_eq(out.start_ns, in.start_ns);
	ck_assert_uint_eq(out.interval_ms, in.interval_ms);
	ck_assert_uint_eq(out.page_size, in.page_size);
	ck_assert_uint_eq(out.main_tid, in.main_tid);
	assert_bytes_eq(out.cmdline, in.cmdline);
	for (ssize_t len = 0; len < n; len++) {
		ssize_t r = mt_header_decode(buf, (size_t)len, &out);
		ck_assert_int_eq(r, -MT_ETRUNC);
	}
	for (size_t cap = 0; cap < (size_t)n; cap++)
		ck_assert_int_eq(mt_header_encode(buf, cap, &in), -ENOSPC);
}
END_TEST

START_TEST(test_record_header_rejects)
{
	struct mt_header h = { .version = MT_FORMAT_VERSION }, out;
	uint8_t buf[128];
	ssize_t n = mt_header_encode(buf, sizeof(buf), &h);

	ck_assert_int_eq(n, MT_HDR_FIXED);
	buf[0] = 'X';
	ck_assert_int_eq(mt_header_decode(buf, (size_t)n, &out), -MT_EFORMAT);
	ck_assert_int_eq(mt_header_decode(buf, 3, &out), -MT_EFORMAT);
	buf[0] = 'M';
	mt_le16_put(buf + 8, MT_FORMAT_VERSION + 1);
	ck_assert_int_eq(mt_header_decode(buf, (size_t)n, &out), -MT_EVERSION);
	mt_le16_put(buf + 8, MT_FORMAT_VERSION);
	mt_le16_put(buf + 10, MT_HDR_FIXED - 1);
	ck_assert_int_eq(mt_header_decode(buf, (size_t)n, &out), -MT_ECORRUPT);
	mt_le16_put(buf + 10, MT_HDR_FIXED);
	mt_le32_put(buf + 48, 1); /* cmdline longer than the header */
	ck_assert_int_eq(mt_header_decode(buf, (size_t)n, &out), -MT_ECORRUPT);
}
END_TEST

START_TEST(test_record_chunk_header)
{
	struct mt_chunk in = { 1000, 400, 0xdeadbeef }, out;
	uint8_t p[MT_CHUNK_HEADER];

	mt_chunk_header_encode(p, &in);
	ck_assert_int_eq(mt_chunk_header_decode(p, &out), 0);
	ck_assert_uint_eq(out.raw_len, 1000);
	ck_assert_uint_eq(out.stored_len, 400);
	ck_assert_uint_eq(out.checksum, 0xdeadbeef);
	p[0] = 'X';
	ck_assert_int_eq(mt_chunk_header_decode(p, &out), -MT_ECORRUPT);
	struct mt_chunk bad[] = { { 0, 1, 0 }, { 10, 0, 0 }, { MT_CHUNK_LIMIT + 1, 10, 0 }, { 10, 100, 0 } };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		mt_chunk_header_encode(p, &bad[i]);
		ck_assert_int_eq(mt_chunk_header_decode(p, &out), -MT_ECORRUPT);
	}
	/* MT32 reference values, from the Python transcription of
	 * docs/format.md in tests/integration/test_reports.py: empty, a tail
	 * only, one word, and blocks + words + tail */
	uint8_t seq[100];
	for (int i = 0; i < 100; i++)
		seq[i] = (uint8_t)i;
	ck_assert_uint_eq(mt_checksum((const uint8_t *)"", 0), 0x3192c8a9u);
	ck_assert_uint_eq(mt_checksum((const uint8_t *)"a", 1), 0xb21c73acu);
	ck_assert_uint_eq(mt_checksum((const uint8_t *)"memtrace", 8), 0xc3cdd704u);
	ck_assert_uint_eq(mt_checksum(seq, 100), 0x1087b49du);
	/* any single-bit flip changes it */
	uint32_t ref = mt_checksum(seq, 100);
	for (int bit = 0; bit < 800; bit++) {
		seq[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		ck_assert_uint_ne(mt_checksum(seq, 100), ref);
		seq[bit / 8] ^= (uint8_t)(1u << (bit % 8));
	}
}
END_TEST

START_TEST(test_record_allocator_table)
{
	for (unsigned k = 0; k < 32; k++) {
		const char *n = mt_allocator_name(k);
		if (k == 0 || k >= MT_ALLOC__COUNT) {
			ck_assert_ptr_null(n);
			ck_assert_int_eq(mt_allocator_is_free(k), 0);
		} else {
			ck_assert_ptr_nonnull(n);
		}
		/* the hot paths' mask says the same */
		ck_assert_int_eq(mt_allocator_is_free(k), (int)(MT_FREE_KINDS >> k & 1));
	}
	ck_assert(mt_allocator_is_free(MT_ALLOC_FREE) && mt_allocator_is_free(MT_ALLOC_MUNMAP) &&
		  mt_allocator_is_free(MT_ALLOC_PYMALLOC_FREE));
	ck_assert(!mt_allocator_is_free(MT_ALLOC_REALLOC));
	ck_assert_str_eq(mt_strerror(-MT_ETRUNC), "capture is truncated");
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

/* The payload's writer codes events straight into columns
 * (mt_cols_alloc/mt_cols_free) between coded records it adds whole
 * (mt_cols_add): the chunk data must be byte for byte what coding the same
 * events as records and splitting them gives, and join back to them. */
START_TEST(test_record_columns_built_directly)
{
	static uint8_t recs[1 << 15], cols[MT_SPLIT_MAX(1 << 15)], split[MT_SPLIT_SCRATCH(1 << 15)];
	static uint8_t direct[MT_SPLIT_MAX(1 << 15)], dsplit[MT_SPLIT_SCRATCH(1 << 15)];
	static uint8_t back[1 << 15];
	struct mt_delta row[2], col[2];
	struct mt_cols c;
	size_t len = 0;
	uint64_t events = 0;

	memset(row, 0, sizeof(row));
	memset(col, 0, sizeof(col));
	mt_cols_begin(&c, direct, dsplit, sizeof(recs), 0);
	for (int i = 0; i < 600; i++) {
		uint32_t thread = i % 3 ? 2 : 20; /* one-byte and escaped heads */
		unsigned k = (unsigned)i % 2;
		uint64_t addr = 0x7f0000000000 + (uint64_t)(i % 11) * 48 + (uint64_t)(i % 5) +
				(i % 97 == 0 ? (uint64_t)1 << 40 : 0);
		uint64_t size = i % 13 ? 24 + (uint64_t)i : (uint64_t)1 << (20 + i % 20);
		len += mt_enc_alloc(recs + len, &row[k], thread, MT_ALLOC_MALLOC + (unsigned)i % 3, addr,
				    size, (uint32_t)(i * 7 % 50));
		mt_cols_alloc(&c, &col[k], thread, MT_ALLOC_MALLOC + (unsigned)i % 3, addr, size,
			      (uint32_t)(i * 7 % 50));
		unsigned fk = i % 4 ? (i % 2 ? MT_ALLOC_FREE : MT_ALLOC_PYMALLOC_FREE) : MT_ALLOC_MUNMAP;
		uint64_t faddr = i % 5 ? addr - (uint64_t)(i % 3) * 48 : 0;
		len += mt_enc_free(recs + len, &row[k], thread, fk, faddr, 4096);
		mt_cols_free(&c, &col[k], thread, fk, faddr, 4096);
		if (i % 50 == 0) { /* coded records in between, STACK ones included */
			struct mt_record r = sample_record(rec_types[(i / 50) % N_TYPES], 0);
			if (r.type == MT_REC_ALLOC || r.type == MT_REC_FREE)
				continue;
			ssize_t n = mt_rec_encode(recs + len, sizeof(recs) - len, &r, NULL);
			ck_assert_int_gt(n, 0);
			ck_assert_int_eq(mt_cols_add(&c, recs + len, (size_t)n), n);
			len += (size_t)n;
		}
		ck_assert_uint_eq(c.len, len);
	}
	ck_assert_uint_lt(len, sizeof(recs));
	ssize_t ncols = mt_chunk_split(cols, split, recs, len, &events, 0);
	ck_assert_int_gt(ncols, 0);
	ck_assert_uint_eq(c.events, events);
	ck_assert_uint_eq(mt_cols_finish(&c), (size_t)ncols);
	ck_assert(memcmp(direct, cols, (size_t)ncols) == 0);
	size_t joined;
	ck_assert_int_eq(mt_chunk_join(back, sizeof(back), direct, (size_t)ncols, &joined, 0),
			 (ssize_t)len);
	ck_assert(memcmp(back, recs, len) == 0);
	/* what is not a record goes in as nothing */
	mt_cols_begin(&c, direct, dsplit, sizeof(recs), 0);
	ck_assert_int_eq(mt_cols_add(&c, (const uint8_t *)"\x00\x01\x00", 3), -MT_ECORRUPT);
}
END_TEST

/* Chunk columns: records of every type and every address mode, threads
 * with one-byte and escaped indexes, and a type this version does not
 * know, split into columns and joined back byte for byte; every cut of
 * the columns is caught, after the whole records before it. */
START_TEST(test_record_columns)
{
	static uint8_t recs[1 << 14], cols[MT_SPLIT_MAX(1 << 14)], back[1 << 14];
	static uint8_t split[MT_SPLIT_SCRATCH(1 << 14)];
	struct mt_delta enc[2];
	size_t len = 0;
	uint64_t events = 0, hot = 0;

	memset(enc, 0, sizeof(enc));
	for (int variant = 0; variant < 2; variant++)
		for (int t = 0; t < N_TYPES; t++) {
			struct mt_record r = sample_record(rec_types[t], variant);
			hot += r.type == MT_REC_ALLOC || r.type == MT_REC_FREE;
			ssize_t n = mt_rec_encode(recs + len, sizeof(recs) - len, &r, &enc[variant]);
			ck_assert_int_gt(n, 0);
			len += (size_t)n;
		}
	memcpy(recs + len, "\x0c\x03\xaa\xbb\xcc", 5); /* type 12, skipped by its length */
	len += 5;
	for (int i = 0; i < 40; i++) { /* ring ages, 16-byte and 1-byte deltas, munmap */
		uint32_t thread = i % 3 ? 2 : 20;
		struct mt_delta *d = &enc[i % 2];
		uint64_t addr = 0x7f0000000000 + (uint64_t)(i % 7) * 48 + (uint64_t)(i % 5);
		len += mt_enc_alloc(recs + len, d, thread, MT_ALLOC_MALLOC, addr, 24 + (uint64_t)i,
				    (uint32_t)i);
		len += mt_enc_free(recs + len, d, thread, i % 4 ? MT_ALLOC_FREE : MT_ALLOC_MUNMAP,
				   addr - (uint64_t)(i % 3) * 48, 4096);
		hot += 2;
	}
	ssize_t ncols = mt_chunk_split(cols, split, recs, len, &events, 0);
	ck_assert_uint_eq(events, hot); /* ALLOC and FREE records, one- and two-byte heads */
	ck_assert_uint_gt(hot, 80);
	ck_assert_int_gt(ncols, 0);
	ck_assert_int_le(ncols, (ssize_t)MT_SPLIT_MAX(len));
	size_t joined;
	ck_assert_int_eq(mt_chunk_join(back, sizeof(back), cols, (size_t)ncols, &joined, 0),
			 (ssize_t)len);
	ck_assert(memcmp(back, recs, len) == 0);
	for (size_t cut = 0; cut < (size_t)ncols; cut++) {
		uint8_t *c = malloc(cut ? cut : 1); /* ASan sees reads past cut */
		memcpy(c, cols, cut);
		ck_assert_int_eq(mt_chunk_join(back, sizeof(back), c, cut, &joined, 0), -MT_ECORRUPT);
		ck_assert_uint_le(joined, len);
		ck_assert(memcmp(back, recs, joined) == 0);
		free(c);
	}
	/* too little room is an error of its own, never an overflow */
	ck_assert_int_eq(mt_chunk_join(back, len - 1, cols, (size_t)ncols, &joined, 0), -ENOSPC);
	ck_assert_uint_lt(joined, len);
	ck_assert(memcmp(back, recs, joined) == 0);
	/* a record of type 0, or one cut short, does not split */
	ck_assert_int_eq(mt_chunk_split(cols, split, (const uint8_t *)"\x00\x01\x00", 3, NULL, 0), -MT_ECORRUPT);
	ck_assert_int_eq(mt_chunk_split(cols, split, recs, len - 1, NULL, 0), -MT_ECORRUPT);
	/* an empty chunk is six empty columns: five lengths of 0 */
	ck_assert_int_eq(mt_chunk_split(cols, split, recs, 0, NULL, 0), MT_COLUMNS - 1);
	ck_assert_int_eq(mt_chunk_join(back, sizeof(back), cols, MT_COLUMNS - 1, &joined, 0), 0);
}
END_TEST

/* Control segments: a hot record of the chunk's current thread is its km
 * byte alone; a change of thread, a head in a longer form than it needs
 * and a kind its type does not have take the head along. The control
 * column is exactly that, and joins back byte for byte. */
START_TEST(test_record_columns_control)
{
	/* ALLOC (malloc, explicit address) and FREE rows: head, km, varints */
	static const uint8_t recs[] = {
		0x01, 0xf1, 0x10, 0x18, 0x00, /* ALLOC, thread 0 */
		0x01, 0xf1, 0x20, 0x18, 0x00,
		0x02, 0xf2, 0x10,             /* FREE, thread 0 */
		0x51, 0xf3, 0x30, 0x20, 0x02, /* ALLOC, thread 5: calloc */
		0x51, 0xf1, 0x30, 0x20, 0x00,
		0xf1, 0x14, 0xf1, 0x40, 0x20, 0x00, /* ALLOC, thread 20 */
		0xf2, 0x14, 0xff, 0x40,             /* FREE, thread 20: pymalloc_free */
		0x05, 0x04, 0x01, 0x02, 0x00, 0x00, /* STACK 1 */
		0xf1, 0x03, 0xf1, 0x50, 0x20, 0x00, /* ALLOC, thread 3 in a long head */
		0x01, 0xf2, 0x60, 0x20, 0x00,       /* ALLOC of a free kind (corrupt later) */
		0x01, 0xfc, 0x60, 0x20, 0x00,       /* ALLOC, thread 0: pymalloc_malloc */
	};
	static const uint8_t ctl[] = {
		0xf1, 0xf1, 0xf2,             /* thread 0 at the start of a chunk */
		0x00, 0x51, 0xf3, 0xf1,       /* thread 5 */
		0x00, 0xf1, 0x14, 0xf1, 0xff, /* thread 20 */
		0x50,                         /* a STACK of thread 0 */
		0x00, 0xf1, 0x03, 0xf1,       /* as it is */
		0x10, 0xf2,                   /* type 1, thread 0 */
		0xfc,                         /* thread 0 again */
	};
	uint8_t cols[MT_SPLIT_MAX(sizeof(recs))], split[MT_SPLIT_SCRATCH(sizeof(recs))];
	uint8_t back[sizeof(recs)];
	uint64_t events = 0;
	size_t joined;

	ssize_t n = mt_chunk_split(cols, split, recs, sizeof(recs), &events, 0);
	ck_assert_int_gt(n, 0);
	ck_assert_uint_eq(events, 10);
	ck_assert_uint_eq(cols[0], sizeof(ctl));
	ck_assert(memcmp(cols + 5, ctl, sizeof(ctl)) == 0); /* five one-byte lengths */
	ck_assert_int_eq(mt_chunk_join(back, sizeof(back), cols, (size_t)n, &joined, 0),
			 (ssize_t)sizeof(recs));
	ck_assert(memcmp(back, recs, sizeof(recs)) == 0);
	/* a head of type 0 in any form, and a km cut off, are corrupt */
	static const uint8_t bad[][7] = {
		{ 0x02, 0, 0, 0, 0, 0x00, 0x00 }, /* the byte 0, then a head byte of type 0 */
		{ 0x01, 0, 0, 0, 0, 0x00 },       /* the byte 0, then nothing */
		{ 0x01, 0, 0, 0, 0, 0x10 },       /* an ALLOC head without its km */
	};
	static const size_t bad_len[] = { 7, 6, 6 };
	for (size_t i = 0; i < 3; i++)
		ck_assert_int_eq(mt_chunk_join(back, sizeof(back), bad[i], bad_len[i], &joined, 0),
				 -MT_ECORRUPT);
}
END_TEST

/* A chunk's worth of hot records whose fields take every varint length
 * from 1 to 10 bytes (sizes from 2^63 down, stack jumps, far addresses),
 * with one- and two-byte heads and a STACK record now and then: split
 * and joined back byte for byte, whole and cut after hundreds of
 * different records, so that every kind of field ends a column. */
START_TEST(test_record_columns_bulk)
{
	enum { CAP = 1 << 18 };
	uint8_t *recs = malloc(CAP), *cols = malloc(MT_SPLIT_MAX(CAP)), *back = malloc(CAP);
	uint8_t *split = malloc(MT_SPLIT_SCRATCH(CAP));
	size_t ends[20000], nrec = 0, len = 0;
	uint64_t hot = 0, x = 0x9e3779b97f4a7c15ull;
	struct mt_delta d;

	ck_assert(recs && cols && back && split);
	memset(&d, 0, sizeof(d));
	while (len + 64 < CAP && nrec < sizeof(ends) / sizeof(ends[0])) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		uint32_t thread = x % 11 ? (uint32_t)(x >> 8) % 3 : 15 + (uint32_t)(x >> 8) % 300;
		unsigned bits = (unsigned)(x >> 16) % 64;
		uint64_t size = (x >> 24) >> (63 - bits) | 1;
		uint64_t addr = x % 5 ? 0x7f0000001000 + (x >> 40) * 16 : x >> 1;
		if (x % 97 == 0) {
			struct mt_record r = { .type = MT_REC_STACK };
			r.stack.id = (uint32_t)(x >> 33);
			r.stack.parent = (uint32_t)(x >> 35);
			r.stack.code = 7;
			len += (size_t)mt_rec_encode(recs + len, CAP - len, &r, NULL);
		} else if (x % 3) {
			len += mt_enc_alloc(recs + len, &d, thread, MT_ALLOC_MALLOC, addr, size,
					    (uint32_t)(x >> (32 + x % 32)));
			hot++;
		} else {
			len += mt_enc_free(recs + len, &d, thread,
					   x % 7 ? MT_ALLOC_FREE : MT_ALLOC_MUNMAP, addr, size);
			hot++;
		}
		ends[nrec++] = len;
	}
	uint64_t events = 0;
	ssize_t ncols = mt_chunk_split(cols, split, recs, len, &events, 0);
	ck_assert_int_gt(ncols, 0);
	ck_assert_uint_eq(events, hot);
	size_t joined;
	ck_assert_int_eq(mt_chunk_join(back, CAP, cols, (size_t)ncols, &joined, 0), (ssize_t)len);
	ck_assert(memcmp(back, recs, len) == 0);
	for (size_t i = 0; i < nrec; i += 1 + i / 64) {
		ncols = mt_chunk_split(cols, split, recs, ends[i], NULL, 0);
		ck_assert_int_gt(ncols, 0);
		ck_assert_int_eq(mt_chunk_join(back, CAP, cols, (size_t)ncols, &joined, 0),
				 (ssize_t)ends[i]);
		ck_assert(memcmp(back, recs, ends[i]) == 0);
	}
	free(recs);
	free(cols);
	free(back);
	free(split);
}
END_TEST

static size_t put_stack(uint8_t *p, uint32_t id, uint32_t parent, uint32_t code, uint32_t offset)
{
	struct mt_record r = { .type = MT_REC_STACK };
	r.stack.id = id;
	r.stack.parent = parent;
	r.stack.code = code;
	r.stack.offset = offset;
	ssize_t n = mt_rec_encode(p, 64, &r, NULL);
	ck_assert_int_gt(n, 0);
	return (size_t)n;
}

/* Split @len bytes of @recs and join them back: byte for byte, and every
 * cut of the columns is caught. Returns the columns' length. */
static size_t columns_roundtrip(const uint8_t *recs, size_t len)
{
	uint8_t *cols = malloc(MT_SPLIT_MAX(len)), *split = malloc(MT_SPLIT_SCRATCH(len) + 1);
	uint8_t *back = malloc(MT_JOIN_MAX(MT_SPLIT_MAX(len)));
	size_t joined;
	ssize_t ncols = mt_chunk_split(cols, split, recs, len, NULL, 0);
	ck_assert_int_gt(ncols, 0);
	ck_assert_uint_le((size_t)ncols, MT_SPLIT_MAX(len));
	ck_assert_int_eq(mt_chunk_join(back, len, cols, (size_t)ncols, &joined, 0), (ssize_t)len);
	ck_assert(memcmp(back, recs, len) == 0);
	/* one byte short of room: -ENOSPC after the records that fit */
	ck_assert_int_eq(mt_chunk_join(back, len - 1, cols, (size_t)ncols, &joined, 0), -ENOSPC);
	ck_assert(memcmp(back, recs, joined) == 0);
	for (size_t cut = 0; cut < (size_t)ncols; cut++) {
		uint8_t *c = malloc(cut ? cut : 1);
		memcpy(c, cols, cut);
		ck_assert_int_eq(mt_chunk_join(back, len, c, cut, &joined, 0), -MT_ECORRUPT);
		ck_assert(memcmp(back, recs, joined) == 0);
		free(c);
	}
	free(cols);
	free(split);
	free(back);
	return (size_t)ncols;
}

/* STACK records in the node column: siblings, children and far parents,
 * ids in sequence and not, the same code or another, offsets up and down,
 * the largest values, and bodies that are not in their shortest form (an
 * extra field, an overlong varint, an empty body, a thread nibble) stored
 * verbatim; all among hot records, and joined back byte for byte. */
START_TEST(test_record_columns_stacks)
{
	static uint8_t recs[1 << 15];
	size_t len = 0;
	struct mt_delta d;
	memset(&d, 0, sizeof(d));

	len += put_stack(recs + len, 1, 0, 1, 10);                      /* sibling of nothing */
	len += put_stack(recs + len, 2, 0, 1, 20);                      /* sibling, same code */
	len += put_stack(recs + len, 3, 2, 2, 176);                     /* child, new code */
	len += put_stack(recs + len, 4, 2, 2, 6);                       /* sibling, offset down */
	len += mt_enc_alloc(recs + len, &d, 0, MT_ALLOC_PYMALLOC_MALLOC, 0x7000, 32, 4);
	len += put_stack(recs + len, 9, 1, 1, 4);                       /* id jump, far parent */
	len += put_stack(recs + len, 7, 9, 0, 0);                       /* id back, child, code down */
	len += put_stack(recs + len, UINT32_MAX, 0, UINT32_MAX, UINT32_MAX); /* largest */
	len += put_stack(recs + len, 1, UINT32_MAX - 1, 0, UINT32_MAX);  /* parent > id */
	len += put_stack(recs + len, 2, 1, 0, 0);                       /* after a wrap */
	/* verbatim: an extra field, an overlong id, an overlong body length,
	 * an empty body, and a thread nibble (corrupt as a record, but the
	 * columns carry it as they find it) */
	memcpy(recs + len, "\x05\x05\x0b\x02\x01\x02\x63", 7);
	len += 7;
	memcpy(recs + len, "\x05\x05\x8c\x00\x02\x01\x02", 7);
	len += 7;
	memcpy(recs + len, "\x05\x84\x00\x0d\x02\x01\x02", 7);
	len += 7;
	memcpy(recs + len, "\x05\x00", 2);
	len += 2;
	memcpy(recs + len, "\x15\x04\x0e\x02\x01\x02", 6);
	len += 6;
	len += put_stack(recs + len, 15, 14, 1, 2); /* coded against id 2, not the verbatim ones */
	len += mt_enc_free(recs + len, &d, 0, MT_ALLOC_PYMALLOC_FREE, 0x7000, 0);
	columns_roundtrip(recs, len);

	/* importing a module: runs of siblings and children take much less
	 * room than the records */
	size_t start = len;
	uint32_t id = 100, parent = 50;
	for (int i = 0; i < 2000; i++) {
		uint32_t p = i % 5 == 0 ? id : i % 17 == 0 ? (uint32_t)i : parent;
		len += put_stack(recs + len, ++id, p, 3 + (uint32_t)(i / 7), 2 * (uint32_t)(i % 40));
		parent = p;
	}
	size_t ncols = columns_roundtrip(recs + start, len - start);
	ck_assert_uint_lt(ncols * 2, len - start);
}
END_TEST

/* Node columns that do not decode are corrupt: reserved flag bits, an id
 * past 2^32 - 1, a parent above its id's reach, a missing field, and
 * bytes left in the node column. */
START_TEST(test_record_columns_stacks_corrupt)
{
	uint8_t back[256];
	size_t joined;
	/* directory: control 1, address 0, size 0, stack 0, node n; body rest */
	static const struct {
		const char *cols;
		size_t len;
	} bad[] = {
		{ "\x01\x00\x00\x00\x02" "\x50" "\x10\x00", 8 },         /* reserved bit */
		{ "\x01\x00\x00\x00\x01" "\x50" "\x04", 7 },               /* no offset */
		{ "\x01\x00\x00\x00\x06" "\x50" "\x00\xfe\xff\xff\xff\x1f", 12 }, /* id 2^32 */
		{ "\x01\x00\x00\x00\x04" "\x50" "\x06\x02\x01\x00", 10 }, /* parent -1 */
		{ "\x01\x00\x00\x00\x03" "\x50" "\x0c\x00\x00", 9 },     /* a byte left */
		{ "\x01\x00\x00\x00\x00" "\x50", 6 },                      /* no flag */
		{ "\x01\x00\x00\x00\x01" "\x50" "\x03", 7 },               /* verbatim, no body */
		{ "\x01\x00\x00\x00\x0d" "\x50" "\x06\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01\x02\x00",
		  19 }, /* id - parent of 2^63 */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(mt_chunk_join(back, sizeof(back), (const uint8_t *)bad[i].cols,
					    bad[i].len, &joined, 0) == -MT_ECORRUPT,
			      "case %zu", i);
	/* and the good neighbours of the first: id 1, parent 0, code 0, offset 0 */
	ck_assert_int_eq(mt_chunk_join(back, sizeof(back),
				       (const uint8_t *)"\x01\x00\x00\x00\x02\x50\x0c\x00", 8,
				       &joined, 0),
			 6);
	ck_assert(memcmp(back, "\x05\x04\x01\x02\x00\x00", 6) == 0);
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
	suite_add_tcase(s, tc);

	tc = tcase_create("framing");
	tcase_add_test(tc, test_record_header_roundtrip);
	tcase_add_test(tc, test_record_header_rejects);
	tcase_add_test(tc, test_record_chunk_header);
	tcase_add_test(tc, test_record_columns);
	tcase_add_test(tc, test_record_columns_built_directly);
	tcase_add_test(tc, test_record_columns_stacks);
	tcase_add_test(tc, test_record_columns_stacks_corrupt);
	tcase_add_test(tc, test_record_columns_control);
	tcase_add_test(tc, test_record_columns_bulk);
	tcase_add_test(tc, test_record_allocator_table);
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
