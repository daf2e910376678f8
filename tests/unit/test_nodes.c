/* SPDX-License-Identifier: MIT */
/* The node column's coding of NATIVE and HYBRID records (format/nodes.h):
 * round trips through the columns, what they cost, and damage. */
#include "format/columns.h"
#include "format/error.h"
#include "format/nodes.h"
#include "format/record.h"

#include <check.h>
#include <errno.h>  /* ENOSPC */
#include <stdlib.h> /* EXIT_SUCCESS, malloc */
#include <string.h> /* memcmp */

#define CAP (1u << 20)

static size_t put(uint8_t *p, const struct mt_record *r)
{
	ssize_t n = mt_rec_encode(p, 64, r, NULL);
	ck_assert_int_gt(n, 0);
	return (size_t)n;
}

static size_t put_native(uint8_t *p, uint32_t id, uint32_t parent, uint64_t ip)
{
	struct mt_record r = { .type = MT_REC_NATIVE };
	r.native = (struct mt_rec_native){ id, parent, ip };
	return put(p, &r);
}

static size_t put_hybrid(uint8_t *p, uint32_t id, uint32_t python, uint32_t native)
{
	struct mt_record r = { .type = MT_REC_HYBRID };
	r.hybrid = (struct mt_rec_hybrid){ id, python, native };
	return put(p, &r);
}

static size_t put_stack(uint8_t *p, uint32_t id, uint32_t parent, uint32_t code, uint32_t offset)
{
	struct mt_record r = { .type = MT_REC_STACK };
	r.stack = (struct mt_rec_stack){ id, parent, code, offset };
	return put(p, &r);
}

/* An interpreter's recursion, as the payload interns it: each event
 * makes a Python frame (STACK), the native chain down from a node of the
 * last one (NATIVE, a few addresses of a small set over and over), and
 * their pair (HYBRID); a HYBRID of an older pair now and then, and one
 * record of each kind stored verbatim (a trailing field). */
static size_t workload(uint8_t *recs, size_t cap, size_t *nends, size_t *ends)
{
	static const uint64_t ips[] = { 0x54d560, 0x54d9c0, 0x54dd90, 0x7f4fb6d44305,
					0x7f4fb6d4424a, 0x66c0b0, 0x548aec };
	uint64_t x = 0x9e3779b97f4a7c15ull;
	uint32_t id = 0, py = 0, leaf = 0, oldpair[2] = { 0, 0 };
	size_t len = 0, n = 0;
	while (len + 256 < cap && n < 20000) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		if (x % 5) {
			uint32_t parent = py;
			py = ++id;
			len += put_stack(recs + len, py, parent, (uint32_t)(x % 40), (uint32_t)(x >> 40) % 300);
			uint32_t from = x % 3 ? leaf : (uint32_t)(x >> 20) % (id + 1);
			for (unsigned k = 0; k < 1 + (x >> 10) % 6; k++) {
				uint64_t ip = x % 11 ? ips[(k + (x >> 30)) % 7] : x >> 3;
				len += put_native(recs + len, ++id, from, ip);
				from = id;
			}
			leaf = id;
			len += put_hybrid(recs + len, ++id, py, leaf);
			oldpair[0] = py;
			oldpair[1] = leaf;
		} else if (x % 7 == 0) {
			/* a trailing field: stored as it is */
			uint8_t tmp[64];
			size_t k = put_native(tmp, ++id, leaf, x >> 2);
			recs[len++] = tmp[0];
			recs[len++] = (uint8_t)(tmp[1] + 1);
			memcpy(recs + len, tmp + 2, k - 2);
			len += k - 2;
			recs[len++] = 0x2a;
		} else {
			uint32_t native = x % 3 ? oldpair[1] : (uint32_t)(x >> 40) % (id + 1);
			len += put_hybrid(recs + len, ++id, x % 2 ? oldpair[0] : 0, native);
		}
		ends[n++] = len;
	}
	*nends = n;
	return len;
}

/* Split with @opts and joined back with @opts: byte for byte, whole and
 * cut after many records. Returns the columns' length of the whole. */
static size_t roundtrip(const uint8_t *recs, size_t len, const size_t *ends, size_t n,
			unsigned opts)
{
	uint8_t *cols = malloc(MT_SPLIT_MAX(CAP)), *split = malloc(MT_SPLIT_SCRATCH(CAP));
	uint8_t *back = malloc(CAP);
	size_t joined;
	ck_assert(cols && split && back);
	ssize_t whole = mt_chunk_split(cols, split, recs, len, NULL, opts);
	ck_assert_int_gt(whole, 0);
	for (size_t i = 0; i < n; i += 1 + i / 32) {
		ssize_t k = mt_chunk_split(cols, split, recs, ends[i], NULL, opts);
		ck_assert_int_gt(k, 0);
		ck_assert_int_eq(mt_chunk_join(back, CAP, cols, (size_t)k, &joined, opts),
				 (ssize_t)ends[i]);
		ck_assert(memcmp(back, recs, ends[i]) == 0);
	}
	ck_assert_int_eq(mt_chunk_split(cols, split, recs, len, NULL, opts), whole);
	ck_assert_int_eq(mt_chunk_join(back, CAP, cols, (size_t)whole, &joined, opts),
			 (ssize_t)len);
	ck_assert(memcmp(back, recs, len) == 0);
	free(cols);
	free(split);
	free(back);
	return (size_t)whole;
}

START_TEST(test_nodes_roundtrip)
{
	uint8_t *recs = malloc(CAP);
	size_t ends[20000], n;
	size_t len = workload(recs, CAP, &n, ends);
	size_t plain = roundtrip(recs, len, ends, n, 0);
	size_t coded = roundtrip(recs, len, ends, n, MT_NODES_NATIVE);
	/* the native nodes are most of the bytes, and mostly a flag byte */
	ck_assert_uint_lt(coded, plain * 2 / 3);
	/* in columns of their own (version 7): two more lengths in the
	 * directory, and STACK ids one past the HYBRID record before them
	 * rather than a distance from the STACK before */
	size_t own = roundtrip(recs, len, ends, n, MT_NODES_NATIVE | MT_NODES_COLUMNS);
	ck_assert_uint_lt(own, coded - coded / 50);
	free(recs);
}
END_TEST

/* The column lengths of chunk data [@d, @d+@n) of @ncols columns. */
static void lengths(const uint8_t *d, size_t n, int ncols, size_t col[MT_COLUMNS])
{
	const uint8_t *q = d, *end = d + n;
	size_t sum = 0;
	memset(col, 0, MT_COLUMNS * sizeof(*col));
	for (int i = 0; i < ncols - 1; i++) {
		uint64_t v;
		ck_assert_int_eq(mt_varint_get(&q, end, &v), 0);
		col[i] = (size_t)v;
		sum += col[i];
	}
	ck_assert_uint_le(sum, (size_t)(end - q));
	col[ncols - 1] = (size_t)(end - q) - sum;
}

/* Version 7's eight columns: the STACK records' node segments stay in
 * column 4, the NATIVE and HYBRID records' go to columns 6 and 7, all
 * else is where it was; the columns of one layout do not join as the
 * other's. */
START_TEST(test_nodes_own_columns)
{
	uint8_t *recs = malloc(CAP), *v6 = malloc(MT_SPLIT_MAX(CAP)), *v7 = malloc(MT_SPLIT_MAX(CAP));
	uint8_t *split = malloc(MT_SPLIT_SCRATCH(CAP)), *back = malloc(CAP);
	size_t ends[20000], n, joined, c6[MT_COLUMNS], c7[MT_COLUMNS], stacks = 0;
	ck_assert(recs && v6 && v7 && split && back);
	size_t len = workload(recs, CAP, &n, ends);
	const unsigned own = MT_NODES_NATIVE | MT_NODES_COLUMNS;
	ssize_t k6 = mt_chunk_split(v6, split, recs, len, NULL, MT_NODES_NATIVE);
	ssize_t k7 = mt_chunk_split(v7, split, recs, len, NULL, own);
	ck_assert(k6 > 0 && k7 > 0);
	lengths(v6, (size_t)k6, MT_COLUMNS_V6, c6);
	lengths(v7, (size_t)k7, MT_COLUMNS, c7);
	ck_assert(c7[MT_COL_NATIVE] > 0 && c7[MT_COL_HYBRID] > 0);
	ck_assert_uint_lt(c7[MT_COL_NODE] + c7[MT_COL_NATIVE] + c7[MT_COL_HYBRID], c6[MT_COL_NODE]);
	for (int i = 0; i <= MT_COL_BODY; i++)
		if (i != MT_COL_NODE)
			ck_assert_uint_eq(c7[i], c6[i]);
	/* column 4 holds one segment per STACK record: a flag byte each, and
	 * their varints */
	for (size_t i = 0; i < len; i += 2 + (size_t)recs[i + 1]) { /* bodies below 128 bytes */
		ck_assert_uint_lt(recs[i + 1], 0x80);
		stacks += recs[i] == MT_REC_STACK;
	}
	ck_assert_uint_gt(stacks, 1000);
	ck_assert_uint_ge(c7[MT_COL_NODE], stacks);
	ck_assert_uint_lt(c7[MT_COL_NODE], c6[MT_COL_NODE] / 2);
	ck_assert_int_eq(mt_chunk_join(back, CAP, v7, (size_t)k7, &joined, own), (ssize_t)len);
	ck_assert(memcmp(back, recs, len) == 0);
	ck_assert_int_eq(mt_chunk_join(back, CAP, v7, (size_t)k7, &joined, MT_NODES_NATIVE),
			 -MT_ECORRUPT);
	ck_assert_int_eq(mt_chunk_join(back, CAP, v6, (size_t)k6, &joined, own), -MT_ECORRUPT);

	/* without STACK records, the NATIVE and HYBRID segments are those of
	 * version 6, moved: the node column is empty */
	size_t kept = 0;
	for (size_t i = 0, k; i < len; i += k) {
		k = 2 + (size_t)recs[i + 1];
		if (recs[i] != MT_REC_STACK) {
			memmove(recs + kept, recs + i, k);
			kept += k;
		}
	}
	k6 = mt_chunk_split(v6, split, recs, kept, NULL, MT_NODES_NATIVE);
	k7 = mt_chunk_split(v7, split, recs, kept, NULL, own);
	ck_assert(k6 > 0 && k7 > 0);
	lengths(v6, (size_t)k6, MT_COLUMNS_V6, c6);
	lengths(v7, (size_t)k7, MT_COLUMNS, c7);
	ck_assert_uint_eq(c7[MT_COL_NODE], 0);
	ck_assert_uint_eq(c7[MT_COL_NATIVE] + c7[MT_COL_HYBRID], c6[MT_COL_NODE]);
	ck_assert_int_eq(mt_chunk_join(back, CAP, v7, (size_t)k7, &joined, own), (ssize_t)kept);
	ck_assert(memcmp(back, recs, kept) == 0);
	free(recs);
	free(v6);
	free(v7);
	free(split);
	free(back);
}
END_TEST

/* The columns of one option do not join as the other: the node column's
 * segments of NATIVE and HYBRID records are left over, or missing. */
START_TEST(test_nodes_option_mismatch)
{
	uint8_t recs[64], cols[MT_SPLIT_MAX(64)], split[MT_SPLIT_SCRATCH(64)], back[1024];
	size_t len = 0, joined;
	len += put_native(recs + len, 1, 0, 0x401000);
	len += put_hybrid(recs + len, 2, 0, 1);
	ssize_t k = mt_chunk_split(cols, split, recs, len, NULL, MT_NODES_NATIVE);
	ck_assert_int_gt(k, 0);
	ck_assert_int_eq(mt_chunk_join(back, sizeof(back), cols, (size_t)k, &joined, 0),
			 -MT_ECORRUPT);
	k = mt_chunk_split(cols, split, recs, len, NULL, 0);
	ck_assert_int_eq(mt_chunk_join(back, sizeof(back), cols, (size_t)k, &joined,
				       MT_NODES_NATIVE),
			 -MT_ECORRUPT);
	ck_assert_int_eq(mt_chunk_join(back, sizeof(back), cols, (size_t)k, &joined, 0),
			 (ssize_t)len);
}
END_TEST

/* Node segments that do not decode: each is a chunk of a NATIVE or
 * HYBRID record's control byte and node segment, and nothing else. */
START_TEST(test_nodes_corrupt)
{
	static const struct {
		const char *cols;
		size_t len;
	} bad[] = {
		/* directory (ctl 1, 0, 0, 0, node n), ctl byte, node segment */
		{ "\x01\x00\x00\x00\x01\x90\x20", 7 },     /* NATIVE: reserved bit 5 */
		{ "\x01\x00\x00\x00\x01\x90\x1c", 7 },     /* NATIVE: address mode 3 */
		{ "\x01\x00\x00\x00\x01\x90\x04", 7 },     /* NATIVE: no address follows its successor */
		{ "\x01\x00\x00\x00\x02\x90\x0c\x00", 8 }, /* NATIVE: recent entry 0 of none */
		{ "\x01\x00\x00\x00\x01\x90\x14", 7 },     /* NATIVE: delta cut short */
		{ "\x01\x00\x00\x00\x01\xb0\x1c", 7 },     /* HYBRID: Python stack mode 3 */
		{ "\x01\x00\x00\x00\x01\xb0\x06", 7 },     /* HYBRID: distance cut short */
		{ "\x01\x00\x00\x00\x01\xb0\x44", 7 },     /* HYBRID: reserved bit 6 */
		{ "\x01\x00\x00\x00\x02\xb0\x24\x00", 8 }, /* HYBRID: chain 0 of none */
		{ "\x01\x00\x00\x00\x02\xb0\x25\x00", 8 }, /* HYBRID: a chain and a reference */
		{ "\x01\x00\x00\x00\x00\xb0", 6 },         /* HYBRID: no segment */
	};
	uint8_t back[256];
	size_t joined;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(mt_chunk_join(back, sizeof(back), (const uint8_t *)bad[i].cols,
					    bad[i].len, &joined, MT_NODES_NATIVE) == -MT_ECORRUPT,
			      "case %zu", i);
	/* and the good ones next to them: a NATIVE of the next id, child of
	 * 0 (the previous NATIVE's id at the start), at delta 0x1000 */
	ck_assert_int_eq(mt_chunk_join(back, sizeof(back),
				       (const uint8_t *)"\x01\x00\x00\x00\x03\x90\x15\x80\x40", 9,
				       &joined, MT_NODES_NATIVE),
			 6);
	ck_assert(memcmp(back, "\x09\x04\x01\x02\x80\x20", 6) == 0);
	/* a HYBRID of the next id, the last NATIVE (0) and the last STACK (0) */
	ck_assert_int_eq(mt_chunk_join(back, sizeof(back), (const uint8_t *)"\x01\x00\x00\x00\x01\xb0\x04",
				       7, &joined, MT_NODES_NATIVE),
			 5);
	ck_assert(memcmp(back, "\x0b\x03\x01\x02\x02", 5) == 0);

	/* version 7: the same segments in the NATIVE and HYBRID columns */
	const unsigned own = MT_NODES_NATIVE | MT_NODES_COLUMNS;
	static const struct {
		const char *cols;
		size_t len;
	} bad7[] = {
		/* directory (ctl 1, 0, 0, 0, node, body, native), ctl byte,
		 * segments; the hybrid column runs to the end */
		{ "\x01\x00\x00\x00\x00\x00\x01\x90\x20", 9 }, /* NATIVE: reserved bit 5 */
		{ "\x01\x00\x00\x00\x00\x00\x01\x90\x14", 9 }, /* NATIVE: delta cut short */
		{ "\x01\x00\x00\x00\x01\x00\x00\x90\x15", 9 }, /* NATIVE: segment in the STACK column */
		{ "\x01\x00\x00\x00\x00\x00\x00\x90\x15", 9 }, /* NATIVE: in the HYBRID column */
		{ "\x01\x00\x00\x00\x00\x00\x00\xb0\x1c", 9 }, /* HYBRID: Python stack mode 3 */
		{ "\x01\x00\x00\x00\x00\x00\x01\xb0\x04", 9 }, /* HYBRID: in the NATIVE column */
		{ "\x01\x00\x00\x00\x00\x00\x00\xb0", 8 },     /* HYBRID: no segment */
		{ "\x01\x00\x00\x00\x00\x00\x05\xb0\x04", 9 }, /* a directory past the data */
	};
	for (size_t i = 0; i < sizeof(bad7) / sizeof(bad7[0]); i++)
		ck_assert_msg(mt_chunk_join(back, sizeof(back), (const uint8_t *)bad7[i].cols,
					    bad7[i].len, &joined, own) == -MT_ECORRUPT,
			      "version 7 case %zu", i);
	ck_assert_int_eq(mt_chunk_join(back, sizeof(back),
				       (const uint8_t *)"\x01\x00\x00\x00\x00\x00\x03\x90\x15\x80\x40",
				       11, &joined, own),
			 6);
	ck_assert(memcmp(back, "\x09\x04\x01\x02\x80\x20", 6) == 0);
	ck_assert_int_eq(mt_chunk_join(back, sizeof(back),
				       (const uint8_t *)"\x01\x00\x00\x00\x00\x00\x00\xb0\x04", 9,
				       &joined, own),
			 5);
	ck_assert(memcmp(back, "\x0b\x03\x01\x02\x02", 5) == 0);
}
END_TEST

static Suite *nodes_suite(void)
{
	Suite *s = suite_create("nodes");
	TCase *tc = tcase_create("nodes");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_nodes_roundtrip);
	tcase_add_test(tc, test_nodes_own_columns);
	tcase_add_test(tc, test_nodes_option_mismatch);
	tcase_add_test(tc, test_nodes_corrupt);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(nodes_suite());
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
