/* SPDX-License-Identifier: MIT */
/* Streams (Huffman coded or not) and the coded form of chunk data: round
 * trips, the columns' histories across chunks, and malformed input. */
#include "format/error.h"
#include "format/huff.h"
#include "format/pack.h"
#include "format/varint.h"

#include <check.h>
#include <lz4hc.h>  /* LZ4_sizeofStateHC */
#include <stdlib.h> /* malloc */
#include <string.h> /* memcmp */

static uint64_t seed = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
	seed ^= seed << 13;
	seed ^= seed >> 7;
	seed ^= seed << 17;
	return seed;
}

/* Put @n bytes through a stream and back; returns the stream's length. */
static size_t round_trip(const uint8_t *src, size_t n)
{
	size_t cap = MT_STREAM_MAX(n);
	uint8_t *s = malloc(cap), *back = malloc(n + 1);
	ssize_t len = mt_stream_put(s, cap, src, n);
	ck_assert_int_gt(len, 0);
	ck_assert_uint_le((size_t)len, cap);
	const uint8_t *p = s;
	ck_assert_int_eq(mt_stream_get(back, n, &p, s + len), (ssize_t)n);
	ck_assert_ptr_eq(p, s + len);
	ck_assert(n == 0 || memcmp(back, src, n) == 0);
	/* too little room for the bytes is corrupt, not an overrun */
	if (n) {
		p = s;
		ck_assert_int_eq(mt_stream_get(back, n - 1, &p, s + len), -MT_ECORRUPT);
	}
	free(s);
	free(back);
	return (size_t)len;
}

/* The form byte of a stream of @n > 0 bytes. */
static uint8_t form_of(const uint8_t *src, size_t n)
{
	uint8_t *s = malloc(MT_STREAM_MAX(n));
	ck_assert_int_gt(mt_stream_put(s, MT_STREAM_MAX(n), src, n), 0);
	uint8_t f = s[mt_varint_len(n)];
	free(s);
	return f;
}

START_TEST(test_stream_round_trips)
{
	enum { N = 100000 };
	uint8_t *d = calloc(1, N);

	ck_assert_uint_eq(round_trip(d, 0), 1);
	/* one value only: a 1-bit code */
	memset(d, 'x', N);
	ck_assert_uint_lt(round_trip(d, N), N / 8 + 64);
	ck_assert_int_eq(form_of(d, N), 1);
	/* uniform bytes do not compress: stored as they are */
	for (int i = 0; i < N; i++)
		d[i] = (uint8_t)rnd();
	ck_assert_uint_eq(round_trip(d, N), N + mt_varint_len(N) + 1);
	ck_assert_int_eq(form_of(d, N), 0);
	/* skewed bytes, as LZ4 leaves them: well under 8 bits each */
	for (int i = 0; i < N; i++) {
		unsigned v = 0;
		while (v < 255 && rnd() % 3 == 0)
			v++;
		d[i] = (uint8_t)(v * 7);
	}
	ck_assert_uint_lt(round_trip(d, N), N / 3);
	/* counts 1, 1, 2, 3, 5, 8, ... over 24 values: Huffman's tree would
	 * be 23 deep; the code is limited to 11 bits and still decodes */
	size_t n = 0;
	uint32_t a = 1, b = 1;
	for (int v = 0; v < 24; v++) {
		for (uint32_t k = 0; k < a && n < N; k++)
			d[n++] = (uint8_t)(v + 100);
		uint32_t c = a + b;
		a = b;
		b = c;
	}
	for (size_t i = n; i > 1; i--) { /* shuffled */
		size_t j = rnd() % i;
		uint8_t t = d[i - 1];
		d[i - 1] = d[j];
		d[j] = t;
	}
	ck_assert_int_eq(form_of(d, n), 1);
	round_trip(d, n);
	/* short streams of every length, two values to all 256 */
	for (size_t len = 1; len < 600; len += 7) {
		for (size_t i = 0; i < len; i++)
			d[i] = (uint8_t)(rnd() % (2 + len % 255));
		round_trip(d, len);
	}
	free(d);
}
END_TEST

/* A Huffman-coded stream to damage: the bytes 0..15, skewed. */
static size_t huff_sample(uint8_t *s, size_t cap, uint8_t *src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		src[i] = (uint8_t)(__builtin_ctzll(rnd() | 1u << 15));
	ssize_t len = mt_stream_put(s, cap, src, n);
	ck_assert_int_gt(len, 0);
	ck_assert_int_eq(s[mt_varint_len(n)], 1);
	return (size_t)len;
}

static ssize_t get(const uint8_t *s, size_t len, uint8_t *dst, size_t cap)
{
	const uint8_t *p = s;
	return mt_stream_get(dst, cap, &p, s + len);
}

START_TEST(test_stream_malformed)
{
	enum { N = 3000 };
	uint8_t src[N], dst[N], s[MT_STREAM_MAX(N)], t[MT_STREAM_MAX(N)];
	size_t len = huff_sample(s, sizeof(s), src, N);
	size_t h = mt_varint_len(N); /* the form byte is s[h] */
	const size_t map = h + 1, nib = map + 32;

	ck_assert_int_eq(get(s, len, dst, N), N);
	/* every cut short is corrupt */
	for (size_t cut = 0; cut < len; cut++)
		ck_assert_int_eq(get(s, cut, dst, N), -MT_ECORRUPT);
	/* an unknown form */
	memcpy(t, s, len);
	t[h] = 2;
	ck_assert_int_eq(get(t, len, dst, N), -MT_ECORRUPT);
	/* no value at all */
	memcpy(t, s, len);
	memset(t + map, 0, 32);
	ck_assert_int_eq(get(t, len, dst, N), -MT_ECORRUPT);
	/* lengths of 0 and of 12 */
	memcpy(t, s, len);
	t[nib] &= 0xF0;
	ck_assert_int_eq(get(t, len, dst, N), -MT_ECORRUPT);
	t[nib] |= 12;
	ck_assert_int_eq(get(t, len, dst, N), -MT_ECORRUPT);
	/* over-subscribed: every length 1 */
	memcpy(t, s, len);
	unsigned m = 0;
	for (int v = 0; v < 256; v++)
		m += (t[map + v / 8] >> (v % 8)) & 1;
	ck_assert_uint_ge(m, 3);
	for (unsigned k = 0; k < m; k++)
		t[nib + k / 2] = (uint8_t)((t[nib + k / 2] & (k & 1 ? 0x0F : 0xF0)) | 1u << (4 * (k & 1)));
	ck_assert_int_eq(get(t, len, dst, N), -MT_ECORRUPT);
	/* a bit stream one byte short, or one byte long */
	size_t at = nib + (m + 1) / 2;
	uint64_t blen;
	const uint8_t *q = s + at;
	ck_assert_int_eq(mt_varint_get(&q, s + len, &blen), 0);
	ck_assert_uint_eq(s + len - q, blen);
	for (int delta = -1; delta <= 1; delta += 2) {
		memcpy(t, s, at);
		size_t k = at + mt_varint_put(t + at, blen + (uint64_t)(int64_t)delta);
		memcpy(t + k, q, blen);
		t[k + blen] = 0;
		ck_assert_int_eq(get(t, k + blen + (size_t)delta, dst, N), -MT_ECORRUPT);
	}
	/* more values than room for them */
	ck_assert_int_eq(get(s, len, dst, N - 1), -MT_ECORRUPT);
	/* an incomplete code whose missing prefix is met: 3 values of
	 * lengths 1, 2 and 3 leave the code 111 unused */
	uint8_t inc[64] = { 4, 1 };
	inc[2 + 0] = 0x07; /* values 0, 1, 2 */
	inc[34] = 1 | 2 << 4;
	inc[35] = 3;
	inc[36] = 1;
	inc[37] = 0xFF; /* codes 1 1 1 ...: not a code */
	ck_assert_int_eq(get(inc, 38, dst, N), -MT_ECORRUPT);
	inc[37] = 0x00; /* four times value 0 (code 0) */
	ck_assert_int_eq(get(inc, 38, dst, N), 4);
	ck_assert(dst[0] == 0 && dst[3] == 0);
	/* the pad nibble of an odd count is 0 */
	inc[35] = 3 | 1 << 4;
	ck_assert_int_eq(get(inc, 38, dst, N), -MT_ECORRUPT);
	/* random damage never reads out of bounds */
	for (int k = 0; k < 20000; k++) {
		memcpy(t, s, len);
		for (int f = 0; f < 1 + k % 3; f++)
			t[rnd() % len] ^= (uint8_t)(1u << (rnd() % 8));
		ssize_t r = get(t, len, dst, N);
		ck_assert(r == -MT_ECORRUPT || (r >= 0 && r <= N));
	}
}
END_TEST

/* Chunk data for tests: a directory and @ncols columns of @n bytes in
 * all, made of phrases that come back from chunk to chunk. */
static size_t chunk_data(uint8_t *d, size_t n, int ncols)
{
	size_t col[MT_COLUMNS], left = n - MT_COLUMNS_DIR_MAX, sum = 0;
	for (int i = 0; i < ncols - 1; i++) {
		col[i] = left / (size_t)(2 * ncols) + rnd() % (left / (size_t)(4 * ncols) + 1);
		sum += col[i];
	}
	uint8_t *p = d;
	for (int i = 0; i < ncols - 1; i++)
		p += mt_varint_put(p, col[i]);
	col[ncols - 1] = n - (size_t)(p - d) - sum;
	for (int i = 0; i < ncols; i++) {
		for (size_t k = 0; k < col[i];) {
			/* a phrase of the column: same in every round */
			unsigned ph = (unsigned)(rnd() % 64), len = 4 + ph % 29;
			for (unsigned j = 0; j < len && k < col[i]; j++, k++)
				*p++ = (uint8_t)(i * 40 + (ph * 7 + j * (ph % 5)) % 37);
		}
	}
	return (size_t)(p - d);
}

static void *hc_state(void)
{
	void *s = aligned_alloc(64, ((size_t)LZ4_sizeofStateHC() + 63) & ~(size_t)63);
	ck_assert_ptr_nonnull(s);
	return s;
}

/* Each level, with the six columns of versions 5 and 6 (_i < 4) and the
 * eight of version 7. */
START_TEST(test_pack_round_trips_and_histories)
{
	enum { N = 40000, CHUNKS = 8 };
	static const int levels[] = { 0, MT_PACK_FAST_HISTORY, 4, 9 };
	int level = levels[_i % 4];
	unsigned layout = _i < 4 ? 0 : MT_NODES_COLUMNS;
	int ncols = mt_columns(layout);
	struct mt_history *hw = malloc(sizeof(*hw)), *hr = malloc(sizeof(*hr)),
			  *fresh = malloc(sizeof(*fresh));
	uint8_t *d = malloc(N), *out = malloc(MT_PACK_MAX(N)), *back = malloc(N);
	uint8_t *scratch = malloc(MT_PACK_SCRATCH(N));
	void *state = hc_state();
	size_t coded_total = 0, raw_total = 0;

	mt_history_reset(hw);
	mt_history_reset(hr);
	mt_history_layout(hw, layout);
	mt_history_layout(hr, layout);
	for (unsigned c = 0; c < CHUNKS; c++) {
		size_t n = chunk_data(d, N - (c % 3) * 5000, ncols);
		ssize_t len = mt_chunk_pack(out, d, n, hw, level, state, scratch);
		ck_assert_int_gt(len, 0);
		ck_assert_uint_le((size_t)len, MT_PACK_MAX(n));
		if (c == 3) { /* stored as it is: the histories take it all the same */
			ck_assert_int_eq(mt_history_add(hr, d, n), 0);
			continue;
		}
		ck_assert_uint_lt((size_t)len, n / 2);
		coded_total += (size_t)len;
		raw_total += n;
		if (c >= 1 && level != 0) {
			/* later chunks refer back into the histories: without
			 * them they do not decode to what was written */
			mt_history_reset(fresh);
			mt_history_layout(fresh, layout);
			int r = mt_chunk_unpack(back, n, out, (size_t)len, fresh, scratch);
			ck_assert(r < 0 || memcmp(back, d, n) != 0);
		}
		memset(back, 0xAA, n);
		/* exactly the scratch space promised, for the sanitizer to check */
		uint8_t *uscratch = malloc(MT_UNPACK_SCRATCH(n));
		ck_assert_int_eq(mt_chunk_unpack(back, n, out, (size_t)len, hr, uscratch), 0);
		free(uscratch);
		ck_assert(memcmp(back, d, n) == 0);
		ck_assert(memcmp(hr->len, hw->len, sizeof(hr->len)) == 0);
		for (int i = 0; i < MT_COLUMNS; i++)
			ck_assert(memcmp(hr->buf[i], hw->buf[i], hr->len[i]) == 0);
		/* the wrong length does not decode, nor the other layout */
		mt_history_reset(fresh);
		mt_history_layout(fresh, layout);
		ck_assert_int_eq(mt_chunk_unpack(back, n - 1, out, (size_t)len, fresh, scratch),
				 -MT_ECORRUPT);
		mt_history_reset(fresh);
		mt_history_layout(fresh, layout ^ MT_NODES_COLUMNS);
		ck_assert_int_eq(mt_chunk_unpack(back, n, out, (size_t)len, fresh, scratch),
				 -MT_ECORRUPT);
	}
	ck_assert_uint_lt(coded_total, raw_total / 4);
	free(d);
	free(out);
	free(back);
	free(scratch);
	free(state);
	free(hw);
	free(hr);
	free(fresh);
}
END_TEST

START_TEST(test_pack_malformed)
{
	enum { N = 20000 };
	struct mt_history *hw = malloc(sizeof(*hw)), *hr = malloc(sizeof(*hr));
	uint8_t *d = malloc(N), *out = malloc(MT_PACK_MAX(N)), *t = malloc(MT_PACK_MAX(N));
	uint8_t *back = malloc(N), *scratch = malloc(MT_PACK_SCRATCH(N));
	void *state = hc_state();

	mt_history_reset(hw);
	size_t n = chunk_data(d, N, MT_COLUMNS_V6);
	ssize_t len = mt_chunk_pack(out, d, n, hw, 9, state, scratch);
	ck_assert_int_gt(len, 0);
	/* a directory that runs past the data */
	uint8_t bad[3] = { 0x80, 0x80, 0x80 };
	ck_assert_int_eq(mt_chunk_pack(t, bad, sizeof(bad), hw, 0, NULL, scratch), -MT_ECORRUPT);
	ck_assert_int_eq(mt_history_add(hw, bad, sizeof(bad)), -MT_ECORRUPT);
	uint8_t big[6] = { 10, 0, 0, 0, 0, 1 };
	ck_assert_int_eq(mt_history_add(hw, big, sizeof(big)), -MT_ECORRUPT);
	/* every cut short, and a byte too many */
	for (ssize_t cut = 0; cut < len; cut += 1 + cut / 64) {
		mt_history_reset(hr);
		ck_assert_int_eq(mt_chunk_unpack(back, n, out, (size_t)cut, hr, scratch), -MT_ECORRUPT);
	}
	memcpy(t, out, (size_t)len);
	t[len] = 0;
	mt_history_reset(hr);
	ck_assert_int_eq(mt_chunk_unpack(back, n, t, (size_t)len + 1, hr, scratch), -MT_ECORRUPT);
	/* raw lengths shorter than the directory */
	for (size_t small = 0; small < 8; small++) {
		mt_history_reset(hr);
		ck_assert_int_eq(mt_chunk_unpack(back, small, out, (size_t)len, hr, scratch),
				 -MT_ECORRUPT);
	}
	/* an unknown method */
	size_t dir = 0;
	for (int i = 0; i < MT_COLUMNS_V6 - 1; i++) {
		const uint8_t *q = out + dir;
		uint64_t v;
		ck_assert_int_eq(mt_varint_get(&q, out + len, &v), 0);
		dir = (size_t)(q - out);
	}
	memcpy(t, out, (size_t)len);
	t[dir] = 2;
	mt_history_reset(hr);
	ck_assert_int_eq(mt_chunk_unpack(back, n, t, (size_t)len, hr, scratch), -MT_ECORRUPT);
	/* random damage never reads or writes out of bounds */
	for (int k = 0; k < 3000; k++) {
		memcpy(t, out, (size_t)len);
		for (int f = 0; f < 1 + k % 4; f++)
			t[rnd() % (size_t)len] ^= (uint8_t)(1u << (rnd() % 8));
		mt_history_reset(hr);
		int r = mt_chunk_unpack(back, n, t, (size_t)len, hr, scratch);
		ck_assert(r == 0 || r == -MT_ECORRUPT);
	}
	free(d);
	free(out);
	free(t);
	free(back);
	free(scratch);
	free(state);
	free(hw);
	free(hr);
}
END_TEST

static Suite *pack_suite(void)
{
	Suite *s = suite_create("pack");
	TCase *tc = tcase_create("pack");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_stream_round_trips);
	tcase_add_test(tc, test_stream_malformed);
	tcase_add_loop_test(tc, test_pack_round_trips_and_histories, 0, 8);
	tcase_add_test(tc, test_pack_malformed);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(pack_suite());
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
