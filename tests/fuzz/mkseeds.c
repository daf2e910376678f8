/* Seed maker for fuzz_chunk_data: mkseeds OUTDIR CAPTURE...
 * Reads each capture's chunks (checksum, coded form), joins their columns into
 * one record stream, and writes prefixes of whole records (re-split into
 * chunk data with mt_chunk_split) in the harness's input layout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/columns.h"
#include "format/error.h"
#include "format/pack.h"
#include "format/record.h"

#include "chunkwrap.h"

static struct mt_delta deltas[4096];
static struct mt_delta *get_delta(void *ctx, uint32_t t)
{
	(void)ctx;
	return t < 4096 ? &deltas[t] : NULL;
}

static uint8_t *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long sz = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *b = malloc((size_t)sz + 1);
	*n = fread(b, 1, (size_t)sz, f);
	fclose(f);
	return b;
}

static int seq;

static void emit(const char *dir, const char *tag, uint8_t b0, uint8_t b1, const uint8_t *recs,
		 size_t nrec, size_t split)
{
	/* records -> chunk data, one or two chunks, in the layout the
	 * harness's header gives them (byte 0's flags: eight columns with
	 * MT_HDR_NATIVE, bit 7) */
	unsigned opts = (b0 >> 5) & MT_HDR_NATIVE ? MT_NODES_COLUMNS : 0;
	uint8_t *out = malloc(2 * MT_SPLIT_MAX(nrec) + 64), *scratch = malloc(MT_SPLIT_SCRATCH(nrec) + 64);
	size_t len = 0, c1 = 0;
	if (split && split < nrec) {
		ssize_t a = mt_chunk_split(out, scratch, recs, split, NULL, opts);
		ssize_t b = mt_chunk_split(out + a, scratch, recs + split, nrec - split, NULL, opts);
		if (a < 0 || b < 0)
			goto done;
		len = (size_t)(a + b);
		c1 = (size_t)a;
		b1 |= 2;
	} else {
		ssize_t a = mt_chunk_split(out, scratch, recs, nrec, NULL, opts);
		if (a < 0)
			goto done;
		len = (size_t)a;
	}
	if (c1 > 0xffff)
		goto done;
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s-%03d", dir, tag, seq++);
	FILE *f = fopen(path, "wb");
	uint8_t pre[FZ_PREFIX] = { b0, b1, (uint8_t)c1, (uint8_t)(c1 >> 8) };
	fwrite(pre, 1, sizeof(pre), f);
	fwrite(out, 1, len, f);
	fclose(f);
done:
	free(out);
	free(scratch);
}

int main(int argc, char **argv)
{
	for (int a = 2; a < argc; a++) {
		size_t n;
		uint8_t *f = slurp(argv[a], &n);
		struct mt_header h;
		ssize_t off = f ? mt_header_decode(f, n, &h) : -1;
		if (off < 0) {
			fprintf(stderr, "%s: not a capture\n", argv[a]);
			continue;
		}
		size_t cap = 1 << 20, rl = 0;
		uint8_t *recs = malloc(cap), *raw = malloc(MT_CHUNK_LIMIT);
		uint8_t *scratch = malloc(MT_PACK_SCRATCH(MT_CHUNK_LIMIT));
		struct mt_history *hist = malloc(sizeof(*hist));
		unsigned in_opts = mt_header_columns(&h);
		mt_history_reset(hist);
		mt_history_layout(hist, in_opts);
		while ((size_t)off + MT_CHUNK_HEADER <= n) {
			struct mt_chunk c;
			if (mt_chunk_header_decode(f + off, &c) < 0 ||
			    off + MT_CHUNK_HEADER + c.stored_len > n)
				break;
			const uint8_t *d = f + off + MT_CHUNK_HEADER;
			if (c.stored_len != c.raw_len) {
				if (mt_chunk_unpack(raw, c.raw_len, d, c.stored_len, hist, scratch) < 0)
					break;
				d = raw;
			} else if (mt_history_add(hist, d, c.raw_len) < 0) {
				break;
			}
			while (rl + c.raw_len > cap)
				recs = realloc(recs, cap *= 2);
			size_t joined;
			ssize_t j = mt_chunk_join(recs + rl, cap - rl, d, c.raw_len, &joined, in_opts);
			if (j < 0)
				break;
			rl += (size_t)j;
			off += MT_CHUNK_HEADER + c.stored_len;
		}
		/* record boundaries */
		memset(deltas, 0, sizeof(deltas));
		size_t *bounds = malloc((rl + 1) * sizeof(*bounds)), nb = 0, p = 0;
		struct mt_record r;
		while (p < rl) {
			ssize_t k = mt_rec_decode(recs + p, rl - p, &r, get_delta, NULL);
			if (k <= 0)
				break;
			p += (size_t)k;
			bounds[nb++] = p;
		}
		unsigned minor = (h.python_hex >> 16) & 0xff, vi = 6;
		for (unsigned i = 0; i < 8; i++)
			if (fz_pyhex[i] && ((fz_pyhex[i] >> 16) & 0xff) == minor)
				vi = i;
		uint8_t b0 = (uint8_t)(vi | (h.flags & 7) << 5);
		const char *base = strrchr(argv[a], '/');
		base = base ? base + 1 : argv[a];
		static const size_t sizes[] = { 1500, 6000, 20000, 60000 };
		for (int si = 0; si < 4; si++) {
			size_t end = 0, half = 0;
			for (size_t i = 0; i < nb && bounds[i] <= sizes[si]; i++)
				end = bounds[i];
			for (size_t i = 0; i < nb && bounds[i] <= end / 2; i++)
				half = bounds[i];
			if (!end)
				continue;
			emit(argv[1], base, b0, (uint8_t)(si & 1), recs, end, 0);
			emit(argv[1], base, b0, (uint8_t)(1 | 4 | 8), recs, end, half);
			if (end == rl)
				break;
		}
		free(bounds);
		free(recs);
		free(raw);
		free(scratch);
		free(hist);
		free(f);
	}
	return 0;
}
