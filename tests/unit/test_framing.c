/* SPDX-License-Identifier: MIT */
/* Header and chunk framing, chunk columns, the allocator table. */
#include "format/columns.h"
#include "format/error.h"
#include "format/record.h"

#include <check.h>
#include <errno.h>  /* ENOSPC */
#include <stdlib.h> /* EXIT_SUCCESS */
#include <string.h> /* memcmp */

#include "record-sample.h"

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
	ck_assert_int_eq(mt_chunk_split(cols, split, recs, 0, NULL, 0), MT_COLUMNS_V6 - 1);
	ck_assert_int_eq(mt_chunk_join(back, sizeof(back), cols, MT_COLUMNS_V6 - 1, &joined, 0), 0);
	ck_assert_int_eq(mt_chunk_split(cols, split, recs, 0, NULL, MT_NODES_COLUMNS), MT_COLUMNS - 1);
	ck_assert_int_eq(mt_chunk_join(back, sizeof(back), cols, MT_COLUMNS - 1, &joined,
				       MT_NODES_COLUMNS),
			 0);
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

static Suite *framing_suite(void)
{
	Suite *s = suite_create("framing");
	TCase *tc = tcase_create("framing");

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
	SRunner *sr = srunner_create(framing_suite());
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
