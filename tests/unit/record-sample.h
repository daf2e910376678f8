/* SPDX-License-Identifier: MIT */
#ifndef MT_TESTS_RECORD_SAMPLE_H
#define MT_TESTS_RECORD_SAMPLE_H
/*
 * Records for the codec and framing tests: the list of record types and
 * one record of each type with every field set (sample_record()), and
 * a comparison of byte strings (assert_bytes_eq()).
 * Tests only: a type without a sample aborts the test.
 */
#include <check.h>
#include <string.h> /* memcmp, memset, strlen */

#include "format/record.h"

static const unsigned rec_types[] = {
#define MT_X(name, val, member) val,
	MT_RECORDS(MT_X)
#undef MT_X
};
#define N_TYPES (int)(sizeof(rec_types) / sizeof(rec_types[0]))

static inline struct mt_bytes bytes(const char *s)
{
	struct mt_bytes b = { (const uint8_t *)s, (uint32_t)strlen(s) };
	return b;
}

/* A record of @type with every field set to something non-trivial;
 * @variant varies thread indexes and values across the one-byte and
 * extended encodings. */
static inline struct mt_record sample_record(unsigned type, int variant)
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
		r.thread.ended = variant ? 7 : 0; /* index 293 ended */
		break;
	case MT_REC_CODE:
		r.code.id = variant ? UINT32_MAX - 1 : 5; /* 2^32 - 1 is no id */
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
		ck_abort_msg("record type %u has no sample in record-sample.h", type);
	}
	return r;
}

static inline void assert_bytes_eq(struct mt_bytes a, struct mt_bytes b)
{
	ck_assert_uint_eq(a.len, b.len);
	if (a.len)
		ck_assert(memcmp(a.p, b.p, a.len) == 0);
}

#endif
