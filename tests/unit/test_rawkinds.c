/* SPDX-License-Identifier: MIT */
/* The PyMem RAW domain's allocator kinds (format version 6): their table,
 * their coding as a pymalloc kind with address mode MT_ADDR_EXT and an xm
 * byte, in rows and in columns, what is corrupt, and version 5 captures
 * still read. */
#include "format/columns.h"
#include "format/error.h"
#include "format/record.h"

#include <check.h>
#include <stdlib.h> /* EXIT_SUCCESS */
#include <string.h> /* memcmp */

static const unsigned raw_kinds[] = { MT_ALLOC_PYMALLOC_RAW_MALLOC, MT_ALLOC_PYMALLOC_RAW_CALLOC,
				      MT_ALLOC_PYMALLOC_RAW_REALLOC, MT_ALLOC_PYMALLOC_RAW_FREE };

struct deltas {
	struct mt_reuse reuse;
	struct mt_delta d[32];
};

static struct mt_delta *get_delta(void *ctx, uint32_t thread)
{
	struct deltas *ds = ctx;
	if (thread >= 32)
		return NULL;
	ds->d[thread].reuse = &ds->reuse;
	return &ds->d[thread];
}

START_TEST(test_rawkinds_table)
{
	static const char *names[] = { "pymalloc_raw_malloc", "pymalloc_raw_calloc",
				       "pymalloc_raw_realloc", "pymalloc_raw_free" };
	ck_assert_uint_eq(MT_ALLOC__COUNT, 20);
	ck_assert_uint_ge(MT_TOTALS_KINDS, MT_ALLOC__COUNT);
	for (unsigned i = 0; i < 4; i++) {
		unsigned k = raw_kinds[i];
		ck_assert_str_eq(mt_allocator_name(k), names[i]);
		ck_assert(mt_allocator_is_raw(k));
		ck_assert_uint_eq(mt_allocator_pymalloc(k), MT_ALLOC_PYMALLOC_MALLOC + i);
		ck_assert_int_eq(mt_allocator_is_free(k), i == 3);
		ck_assert_int_eq((int)(MT_FREE_KINDS >> k & 1), i == 3);
	}
	for (unsigned k = 0; k < 16; k++) {
		ck_assert(!mt_allocator_is_raw(k));
		ck_assert_uint_eq(mt_allocator_pymalloc(k), k);
	}
	ck_assert_ptr_null(mt_allocator_name(20));
}
END_TEST

/* The bytes docs/format.md section 3.1 gives: km 0xdc (kind 12, mode 13)
 * and xm 0x1e (mode 14) for a first raw ALLOC at a 16-byte aligned
 * address; a raw FREE's delta base is free's. */
START_TEST(test_rawkinds_bytes)
{
	struct mt_delta enc = { 0 };
	uint8_t buf[MT_REC_HOT_MAX];
	size_t n = mt_enc_alloc(buf, &enc, 0, MT_ALLOC_PYMALLOC_RAW_MALLOC, 0x1000, 777777, 0);
	/* head, km, xm, zigzag(0x100), size 777777, stack delta 0 */
	static const uint8_t want[] = { 0x01, 0xdc, 0x1e, 0x80, 0x04, 0xb1, 0xbc, 0x2f, 0x00 };
	ck_assert_uint_eq(n, sizeof(want));
	ck_assert(memcmp(buf, want, n) == 0);
	/* the same as pymalloc_malloc is one byte shorter and otherwise alike */
	struct mt_delta enc2 = { 0 };
	uint8_t py[MT_REC_HOT_MAX];
	ck_assert_uint_eq(mt_enc_alloc(py, &enc2, 0, MT_ALLOC_PYMALLOC_MALLOC, 0x1000, 777777, 0),
			  n - 1);
	ck_assert_uint_eq(py[1], 0xec);
	ck_assert(memcmp(py + 2, buf + 3, n - 3) == 0);

	/* FREE of kind free at 0x9000, then raw free at 0x9020: a delta of
	 * two 16-byte units from free's base */
	struct mt_delta f = { 0 };
	mt_enc_free(buf, &f, 0, MT_ALLOC_FREE, 0x9000, 0);
	n = mt_enc_free(buf, &f, 0, MT_ALLOC_PYMALLOC_RAW_FREE, 0x9020, 0);
	static const uint8_t want_free[] = { 0x02, 0xdf, 0x1e, 0x04 };
	ck_assert_uint_eq(n, sizeof(want_free));
	ck_assert(memcmp(buf, want_free, n) == 0);
}
END_TEST

/* A stream of raw and other events of two threads, with addresses that
 * come back (ring ages, the block freed last, the next block, table
 * slots, deltas): decoded to the same events, split into columns and
 * joined back byte for byte, the columns built a record at a time the
 * same; every cut of the columns is caught after whole records. */
START_TEST(test_rawkinds_stream)
{
	static uint8_t recs[1 << 15], cols[MT_SPLIT_MAX(1 << 15)], split[MT_SPLIT_SCRATCH(1 << 15)];
	static uint8_t direct[MT_SPLIT_MAX(1 << 15)], dsplit[MT_SPLIT_SCRATCH(1 << 15)];
	static uint8_t back[1 << 15];
	static struct deltas dec;
	struct mt_reuse reuse_row, reuse_col;
	struct mt_delta row[2], col[2];
	struct {
		int alloc;
		uint32_t thread;
		unsigned kind;
		uint64_t addr, size;
		uint32_t stack;
	} ev[1200];
	unsigned nev = 0, modes_seen = 0;
	struct mt_cols c;
	size_t len = 0;

	memset(row, 0, sizeof(row));
	memset(col, 0, sizeof(col));
	memset(&reuse_row, 0, sizeof(reuse_row));
	memset(&reuse_col, 0, sizeof(reuse_col));
	memset(&dec, 0, sizeof(dec));
	for (int k = 0; k < 2; k++) {
		row[k].reuse = &reuse_row;
		col[k].reuse = &reuse_col;
	}
	mt_cols_begin(&c, direct, dsplit, sizeof(recs), 0);
	for (int i = 0; i < 600; i++) {
		uint32_t thread = i % 7 ? 1 : 20; /* one-byte and escaped heads */
		int k = i % 7 ? 0 : 1;
		int raw = i % 3 != 0;
		unsigned ak = raw ? MT_ALLOC_PYMALLOC_RAW_MALLOC + (unsigned)i % 3
				  : MT_ALLOC_PYMALLOC_MALLOC + (unsigned)i % 3;
		uint64_t size = i % 5 ? 32 : 777777 + (uint64_t)i;
		uint64_t addr = 0x7f0000000000 + (uint64_t)(i % 9) * 32 + (i % 11 == 0 ? 8 : 0);
		uint32_t stack = (uint32_t)(i * 7 % 50);
		size_t before = len;
		len += mt_enc_alloc(recs + len, &row[k], thread, ak, addr, size, stack);
		if (raw)
			mt_cols_alloc_raw(&c, &col[k], thread, ak, addr, size, stack);
		else
			mt_cols_alloc(&c, &col[k], thread, ak, addr, size, stack);
		if (raw)
			modes_seen |= 1u << (recs[before + (thread < 15 ? 2 : 3)] & 15);
		ev[nev++] = (typeof(ev[0])){ 1, thread, ak, addr, size, stack };
		if (i % 4 == 3)
			continue; /* left live: later ones come back as slots */
		unsigned fk = raw ? MT_ALLOC_PYMALLOC_RAW_FREE
				  : i % 2 ? MT_ALLOC_FREE : MT_ALLOC_PYMALLOC_FREE;
		uint64_t faddr = addr - (uint64_t)(i % 2) * 32;
		len += mt_enc_free(recs + len, &row[k], thread, fk, faddr, 0);
		if (raw)
			mt_cols_free_raw(&c, &col[k], thread, fk, faddr);
		else
			mt_cols_free(&c, &col[k], thread, fk, faddr, 0);
		ev[nev++] = (typeof(ev[0])){ 0, thread, fk, faddr, 0, 0 };
		ck_assert_uint_eq(c.len, len);
	}
	/* raw records named ring entries, reused and next blocks and deltas */
	ck_assert_uint_gt(__builtin_popcount(modes_seen), 3);

	/* decoded as rows */
	size_t off = 0;
	for (unsigned e = 0; e < nev; e++) {
		struct mt_record r;
		ssize_t n = mt_rec_decode(recs + off, len - off, &r, get_delta, &dec);
		ck_assert_int_gt(n, 0);
		off += (size_t)n;
		ck_assert_uint_eq(r.tidx, ev[e].thread);
		if (ev[e].alloc) {
			ck_assert_uint_eq(r.type, MT_REC_ALLOC);
			ck_assert_uint_eq(r.alloc.kind, ev[e].kind);
			ck_assert_uint_eq(r.alloc.addr, ev[e].addr);
			ck_assert_uint_eq(r.alloc.size, ev[e].size);
			ck_assert_uint_eq(r.alloc.stack, ev[e].stack);
		} else {
			ck_assert_uint_eq(r.type, MT_REC_FREE);
			ck_assert_uint_eq(r.free.kind, ev[e].kind);
			ck_assert_uint_eq(r.free.addr, ev[e].addr);
		}
	}
	ck_assert_uint_eq(off, len);

	/* columns */
	uint64_t events = 0;
	ssize_t ncols = mt_chunk_split(cols, split, recs, len, &events, 0);
	ck_assert_int_gt(ncols, 0);
	ck_assert_uint_eq(events, nev);
	ck_assert_uint_eq(mt_cols_finish(&c), (size_t)ncols);
	ck_assert(memcmp(direct, cols, (size_t)ncols) == 0);
	size_t joined;
	ck_assert_int_eq(mt_chunk_join(back, sizeof(back), cols, (size_t)ncols, &joined, 0),
			 (ssize_t)len);
	ck_assert(memcmp(back, recs, len) == 0);
	for (size_t cut = 0; cut < (size_t)ncols; cut += 7) {
		uint8_t *p = malloc(cut ? cut : 1);
		memcpy(p, cols, cut);
		ck_assert_int_eq(mt_chunk_join(back, sizeof(back), p, cut, &joined, 0), -MT_ECORRUPT);
		ck_assert_uint_le(joined, len);
		ck_assert(memcmp(back, recs, joined) == 0);
		free(p);
	}
}
END_TEST

/* A raw record of the chunk's current thread is its km and xm: two
 * control bytes, which join back to the row. */
START_TEST(test_rawkinds_control)
{
	struct mt_delta d = { 0 };
	uint8_t recs[64], cols[MT_SPLIT_MAX(64)], split[MT_SPLIT_SCRATCH(64)], back[64];
	size_t len = mt_enc_alloc(recs, &d, 3, MT_ALLOC_PYMALLOC_MALLOC, 0x1000, 16, 1);
	len += mt_enc_alloc(recs + len, &d, 3, MT_ALLOC_PYMALLOC_RAW_MALLOC, 0x2000, 16, 1);
	len += mt_enc_free(recs + len, &d, 3, MT_ALLOC_PYMALLOC_RAW_FREE, 0x2000, 0);
	ssize_t n = mt_chunk_split(cols, split, recs, len, NULL, 0);
	ck_assert_int_gt(n, 0);
	/* control column: 0 (head follows), head 0x31, km; km, xm; km, xm */
	ck_assert_uint_eq(cols[0], 7);
	static const uint8_t ctl[] = { 0x00, 0x31, 0xec, 0xdc, 0x1e, 0xdf, 0x10 };
	ck_assert(memcmp(cols + 5, ctl, sizeof(ctl)) == 0);
	size_t joined;
	ck_assert_int_eq(mt_chunk_join(back, sizeof(back), cols, (size_t)n, &joined, 0), (ssize_t)len);
	ck_assert(memcmp(back, recs, len) == 0);
}
END_TEST

START_TEST(test_rawkinds_corrupt)
{
	static struct deltas dec;
	struct mt_record r;
	static const struct {
		const char *bytes;
		size_t len;
		int err;
	} cases[] = {
		{ "\x01\xd1\x1e\x02\x10\x00", 6, -MT_ECORRUPT }, /* mode 13 with malloc */
		{ "\x01\xdc\x2e\x02\x10\x00", 6, -MT_ECORRUPT }, /* xm of another extension */
		{ "\x01\xdc\x0e\x02\x10\x00", 6, -MT_ECORRUPT }, /* xm's extension 0 */
		{ "\x01\xdc\x1d\x02\x10\x00", 6, -MT_ECORRUPT }, /* xm of mode 13 */
		{ "\x01\xdc\x1a\x10\x00", 5, -MT_ECORRUPT },     /* an ALLOC mode that is none */
		{ "\x01\xdf\x1e\x02\x10\x00", 6, -MT_ECORRUPT }, /* raw free in an ALLOC */
		{ "\x02\xdc\x1e\x02", 4, -MT_ECORRUPT },         /* raw malloc in a FREE */
		{ "\x01\xdc", 2, -MT_ETRUNC },                   /* cut before xm */
		{ "\x01\xdc\x1e", 3, -MT_ETRUNC },               /* cut after it */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memset(&dec, 0, sizeof(dec));
		ck_assert_int_eq(mt_rec_decode((const uint8_t *)cases[i].bytes, cases[i].len, &r,
					       get_delta, &dec),
				 cases[i].err);
	}
	/* columns: a km of mode 13 whose xm is missing does not join */
	uint8_t back[64];
	size_t joined;
	static const uint8_t cut[] = { 2, 0, 0, 0, 0, 0x10, 0xdc };
	ck_assert_int_eq(mt_chunk_join(back, sizeof(back), cut, sizeof(cut), &joined, 0), -MT_ECORRUPT);
	ck_assert_uint_eq(joined, 0);
}
END_TEST

/* Version 5 captures read as they are: their header is accepted, and
 * their hot records (every kind a nibble, no mode 13) decode as before;
 * versions outside 5 ..= 8 are refused. */
START_TEST(test_rawkinds_old_layout)
{
	struct mt_header h = { .version = 5, .flags = MT_HDR_PYALLOC }, out;
	uint8_t buf[128];
	ssize_t n = mt_header_encode(buf, sizeof(buf), &h);
	ck_assert_int_eq(mt_header_decode(buf, (size_t)n, &out), n);
	ck_assert_uint_eq(out.version, 5);
	ck_assert_uint_eq(MT_FORMAT_VERSION_MIN, 5);
	ck_assert_uint_eq(MT_FORMAT_VERSION, 8);
	mt_le16_put(buf + 8, 4);
	ck_assert_int_eq(mt_header_decode(buf, (size_t)n, &out), -MT_EVERSION);
	mt_le16_put(buf + 8, 9);
	ck_assert_int_eq(mt_header_decode(buf, (size_t)n, &out), -MT_EVERSION);

	/* version 5's bytes of an ALLOC pymalloc_malloc at 0x1000 of 48
	 * bytes, stack 2, and its FREE: written by hand from its spec */
	static const uint8_t v5[] = { 0x01, 0xec, 0x80, 0x04, 0x30, 0x04 };
	static struct deltas dec;
	struct mt_record r;
	memset(&dec, 0, sizeof(dec));
	ck_assert_int_eq(mt_rec_decode(v5, sizeof(v5) - 1, &r, get_delta, &dec), -MT_ETRUNC);
	ck_assert_int_eq(mt_rec_decode(v5, sizeof(v5), &r, get_delta, &dec), 6);
	ck_assert_uint_eq(r.alloc.kind, MT_ALLOC_PYMALLOC_MALLOC);
	ck_assert_uint_eq(r.alloc.addr, 0x1000);
	ck_assert_uint_eq(r.alloc.size, 48);
	ck_assert_uint_eq(r.alloc.stack, 2);
	static const uint8_t v5free[] = { 0x02, 0x0f };
	ck_assert_int_eq(mt_rec_decode(v5free, sizeof(v5free), &r, get_delta, &dec), 2);
	ck_assert_uint_eq(r.free.kind, MT_ALLOC_PYMALLOC_FREE);
	ck_assert_uint_eq(r.free.addr, 0x1000);
	/* the encoder still writes them so */
	struct mt_delta enc = { 0 };
	uint8_t row[MT_REC_HOT_MAX];
	ck_assert_uint_eq(mt_enc_alloc(row, &enc, 0, MT_ALLOC_PYMALLOC_MALLOC, 0x1000, 48, 2), 6);
	ck_assert(memcmp(row, v5, 6) == 0);
}
END_TEST

/* The TOTALS record carries every kind, the raw ones included. */
START_TEST(test_rawkinds_totals)
{
	struct mt_record in = { .type = MT_REC_TOTALS }, out;
	uint8_t buf[2048];
	for (unsigned k = 0; k < MT_TOTALS_KINDS; k++) {
		in.totals.kind_count[k] = k + 1;
		in.totals.kind_bytes[k] = 1000 * k;
	}
	ssize_t n = mt_rec_encode(buf, sizeof(buf), &in, NULL);
	ck_assert_int_gt(n, 0);
	ck_assert_int_eq(mt_rec_decode(buf, (size_t)n, &out, NULL, NULL), n);
	for (unsigned k = 0; k < MT_TOTALS_KINDS; k++) {
		ck_assert_uint_eq(out.totals.kind_count[k], k + 1);
		ck_assert_uint_eq(out.totals.kind_bytes[k], 1000 * k);
	}
	ck_assert_uint_eq(out.totals.kind_count[MT_ALLOC_PYMALLOC_RAW_FREE], 20);
}
END_TEST

static Suite *rawkinds_suite(void)
{
	Suite *s = suite_create("rawkinds");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_rawkinds_table);
	tcase_add_test(tc, test_rawkinds_bytes);
	tcase_add_test(tc, test_rawkinds_stream);
	tcase_add_test(tc, test_rawkinds_control);
	tcase_add_test(tc, test_rawkinds_corrupt);
	tcase_add_test(tc, test_rawkinds_old_layout);
	tcase_add_test(tc, test_rawkinds_totals);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(rawkinds_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
