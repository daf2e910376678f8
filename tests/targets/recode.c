/* SPDX-License-Identifier: MIT */
/*
 * mt-recode IN OUT VERSION: the capture IN written again as OUT with the
 * chunk layout of format VERSION (6: six columns; 7 and 8: eight with
 * native stacks; one whose STACK records carry lines only as 8), record
 * for record and chunk for chunk: each chunk's records joined from its
 * columns, split again and coded at LZ4HC's level 9
 * against the new histories (stored when that is not shorter). For
 * tests/integration/test_format_columns.py, which reads both and
 * compares the reports. One line on stderr and exit 1 on any problem.
 */
#include "format/columns.h"
#include "format/pack.h"
#include "format/record.h"

#include <lz4hc.h>  /* LZ4_sizeofStateHC */
#include <stdio.h>  /* fopen, fprintf */
#include <stdlib.h> /* malloc, strtoul */
#include <string.h> /* memcpy */

static int fail(const char *what)
{
	fprintf(stderr, "mt-recode: %s\n", what);
	return 1;
}

int main(int argc, char **argv)
{
	if (argc != 4)
		return fail("usage: mt-recode IN OUT VERSION");
	FILE *f = fopen(argv[1], "rb");
	if (!f)
		return fail("cannot open the input");
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	rewind(f);
	uint8_t *b = malloc((size_t)n + 1);
	if (!b || fread(b, 1, (size_t)n, f) != (size_t)n)
		return fail("cannot read the input");
	fclose(f);

	struct mt_header h;
	ssize_t off = mt_header_decode(b, (size_t)n, &h);
	if (off < 0)
		return fail("not a capture");
	unsigned in_opts = mt_header_columns(&h);
	h.version = (uint16_t)strtoul(argv[3], NULL, 10);
	if (h.version < MT_FORMAT_VERSION_MIN || h.version > MT_FORMAT_VERSION)
		return fail("unsupported version");
	if ((h.flags & MT_HDR_LINES) && h.version < MT_FORMAT_VERSION_LINES)
		return fail("a capture with lines has no older version");
	unsigned out_opts = mt_header_columns(&h);
	FILE *o = fopen(argv[2], "wb");
	uint8_t hdr[MT_HDR_FIXED + MT_CMDLINE_MAX];
	ssize_t hn = mt_header_encode(hdr, sizeof(hdr), &h);
	if (!o || hn < 0 || fwrite(hdr, 1, (size_t)hn, o) != (size_t)hn)
		return fail("cannot write the output");

	struct mt_history *hi = malloc(sizeof(*hi)), *ho = malloc(sizeof(*ho));
	void *state = aligned_alloc(64, ((size_t)LZ4_sizeofStateHC() + 63) & ~(size_t)63);
	if (!hi || !ho || !state)
		return fail("out of memory");
	mt_history_reset(hi);
	mt_history_reset(ho);
	mt_history_layout(hi, in_opts);
	mt_history_layout(ho, out_opts);
	size_t at = (size_t)off;
	while (at + MT_CHUNK_HEADER <= (size_t)n) {
		struct mt_chunk c;
		if (mt_chunk_header_decode(b + at, &c) < 0 ||
		    c.stored_len > (size_t)n - at - MT_CHUNK_HEADER)
			return fail("bad chunk");
		const uint8_t *d = b + at + MT_CHUNK_HEADER;
		size_t cap = MT_JOIN_MAX(c.raw_len), joined;
		uint8_t *raw = malloc(c.raw_len), *rows = malloc(cap);
		uint8_t *cols = malloc(MT_SPLIT_MAX(cap)), *split = malloc(MT_SPLIT_SCRATCH(cap));
		uint8_t *scratch = malloc(MT_PACK_SCRATCH(MT_SPLIT_MAX(cap)));
		uint8_t *out = malloc(MT_CHUNK_HEADER + MT_PACK_MAX(MT_SPLIT_MAX(cap)));
		if (!raw || !rows || !cols || !split || !scratch || !out)
			return fail("out of memory");
		if (c.stored_len == c.raw_len) {
			memcpy(raw, d, c.raw_len);
			if (mt_history_add(hi, raw, c.raw_len) < 0)
				return fail("bad chunk directory");
		} else if (mt_chunk_unpack(raw, c.raw_len, d, c.stored_len, hi, scratch) < 0) {
			return fail("a chunk does not decode");
		}
		ssize_t rl = mt_chunk_join(rows, cap, raw, c.raw_len, &joined, in_opts);
		if (rl < 0)
			return fail("a chunk's columns do not join");
		ssize_t cl = mt_chunk_split(cols, split, rows, (size_t)rl, NULL, out_opts);
		if (cl < 0)
			return fail("a chunk's records do not split");
		uint8_t *data = out + MT_CHUNK_HEADER;
		ssize_t sl = mt_chunk_pack(data, cols, (size_t)cl, ho, 9, state, scratch);
		if (sl <= 0 || sl >= cl) {
			memcpy(data, cols, (size_t)cl);
			sl = cl;
		}
		struct mt_chunk w = { (uint32_t)cl, (uint32_t)sl, mt_checksum(data, (size_t)sl) };
		mt_chunk_header_encode(out, &w);
		if (fwrite(out, 1, MT_CHUNK_HEADER + (size_t)sl, o) != MT_CHUNK_HEADER + (size_t)sl)
			return fail("cannot write the output");
		at += MT_CHUNK_HEADER + c.stored_len;
		free(raw);
		free(rows);
		free(cols);
		free(split);
		free(scratch);
		free(out);
	}
	if (fclose(o) != 0)
		return fail("cannot write the output");
	return 0;
}
