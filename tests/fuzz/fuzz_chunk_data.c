/* Harness b: the fuzz input (after a 4-byte prefix, see chunkwrap.h) is
 * the uncompressed data of one or two chunks. It is wrapped in a valid
 * file header and valid chunk headers (MT32 checksums right, chunks coded
 * by mt_chunk_pack()), so every input reaches the column join, the record
 * decoder, the snapshot, stack/code resolution and the line tables of
 * the Python version picked by the first byte. */
#include "common.h"
#include "chunkwrap.h"
#include "format/varint.h"

#include "format/pack.h"

#include <lz4hc.h> /* LZ4_sizeofStateHC */

static uint8_t *buf;
static size_t buf_cap;

static void put(const void *p, size_t n, size_t *len)
{
	if (*len + n > buf_cap) {
		buf_cap = (*len + n) * 2;
		buf = realloc(buf, buf_cap);
		if (!buf)
			abort();
	}
	memcpy(buf + *len, p, n);
	*len += n;
}

/* The writer's histories: a chunk that is coded may refer back into the
 * columns of those before it, stored or coded. */
static struct mt_history hist;

static void put_chunk(const uint8_t *d, size_t n, int compress, size_t *len)
{
	uint8_t h[MT_CHUNK_HEADER];
	struct mt_chunk c = { (uint32_t)n, (uint32_t)n, 0 };
	uint8_t *z = NULL;

	if (compress && n) {
		static void *state;
		if (!state)
			state = aligned_alloc(64, ((size_t)LZ4_sizeofStateHC() + 63) & ~(size_t)63);
		z = malloc(MT_PACK_MAX(n));
		uint8_t *scratch = malloc(MT_PACK_SCRATCH(n));
		if (!state || !z || !scratch)
			abort();
		ssize_t zn = mt_chunk_pack(z, d, n, &hist, 4, state, scratch);
		free(scratch);
		if (zn > 0 && (size_t)zn < n) {
			d = z;
			c.stored_len = (uint32_t)zn;
		}
	} else {
		(void)mt_history_add(&hist, d, n); /* a bad directory: the reader stops there */
	}
	c.checksum = mt_checksum(d, c.stored_len);
	mt_chunk_header_encode(h, &c);
	put(h, sizeof(h), len);
	put(d, c.stored_len, len);
	free(z);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < FZ_PREFIX + 1)
		return 0;
	uint8_t b0 = data[0], b1 = data[1];
	size_t split = (size_t)(data[2] | data[3] << 8);
	const uint8_t *d = data + FZ_PREFIX;
	size_t n = size - FZ_PREFIX, len = 0;

	static const char cmdline[] = "python3\0prog.py\0";
	uint8_t hb[MT_HDR_FIXED + sizeof(cmdline) + 16];
	struct mt_header h = {
		.version = MT_FORMAT_VERSION,
		.flags = (uint32_t)(b0 >> 5),
		.pid = 4242,
		.python_hex = fz_pyhex[b0 & 7],
		.start_ns = 1700000000000000000ull,
		.interval_ms = 10,
		.page_size = fz_pages[(b0 >> 3) & 3],
		.main_tid = 4242,
		.cmdline = { (const uint8_t *)cmdline, sizeof(cmdline) - 1 },
	};
	ssize_t hn = mt_header_encode(hb, sizeof(hb), &h);
	if (hn < 0)
		abort();
	if (b1 & 0x10) { /* a later minor version's extra header fields */
		memset(hb + hn, 0xAB, 16);
		hn += 16;
		mt_le16_put(hb + 10, (uint16_t)hn);
	}
	put(hb, (size_t)hn, &len);
	mt_history_reset(&hist);
	/* eight columns with native stacks, as the reader takes them */
	mt_history_layout(&hist, h.flags & MT_HDR_NATIVE ? MT_NODES_COLUMNS : 0);
	if ((b1 & 2) && n >= 2) {
		split = 1 + split % (n - 1); /* both chunks non-empty */
		put_chunk(d, split, b1 & 1, &len);
		put_chunk(d + split, n - split, b1 & 4, &len);
	} else {
		put_chunk(d, n, b1 & 1, &len);
	}
	if (b1 & 8) {
		/* directory: 1, 0, 0, 0; control: TRAILER head; body column */
		static const uint8_t tr[] = { 1, 0, 0, 0, MT_REC_TRAILER, 3, 1, 2, 0 };
		put_chunk(tr, sizeof(tr), 0, &len);
	}

	/* FZ_WRITE=FILE: keep the capture made from the input, to try it
	 * with the real CLI (memtrace stats FILE) */
	const char *keep = getenv("FZ_WRITE");
	if (keep) {
		FILE *f = fopen(keep, "wb");
		if (f) {
			fwrite(buf, 1, len, f);
			fclose(f);
		}
	}
	struct mt_capture *cap;
	if (mt_capture_open_mem(buf, len, &cap) != 0)
		abort(); /* the header we made is valid */
	mt_capture_set_warn(cap, fz_warn, NULL);
	struct mt_snapshot s;
	struct mt_snapshot_opts so = { .temp_threshold = 1 + (b1 >> 5) };
	if (mt_snapshot_build_opts(&s, cap, &so) == 0) {
		/* The CLI stops at corruption, the Python package (pyapi) goes
		 * on with what was read: reports run on both. */
		fz_reports(&s, "fuzz.bin", (unsigned)(b1 >> 5) | (unsigned)(b0 & 0x18) << 2);
		mt_snapshot_release(&s);
	}
	/* memtrace parse walks the records once more */
	mt_report_parse(fz_null(), cap);
	mt_capture_close(cap);
	return 0;
}
