/* Harness b's input layout, shared with the seed maker:
 *   byte 0  bits 0-2: python_hex (3.8 .. 3.13, unknown, 3.7), bits 3-4:
 *           page_size (4096, 0, 65536, 12345), bits 5-7: header flags
 *   byte 1  bit 0: store chunk 1 coded (raw if that is not smaller),
 *           bit 1: two chunks, bit 2: chunk 2 coded,
 *           bit 3: a valid TRAILER chunk after them,
 *           bit 4: a larger header_size (bytes after the command line),
 *           bits 5-7: report selector
 *   bytes 2-3 le16: chunk 1 length when two chunks (mod the data length)
 *   rest: uncompressed chunk data (docs/format.md section 2.1) */
#ifndef MT_FUZZ_CHUNKWRAP_H
#define MT_FUZZ_CHUNKWRAP_H
#define FZ_PREFIX 4
static const uint32_t fz_pyhex[8] = { 0x030812f0, 0x030912f0, 0x030a0df0, 0x030b07f0,
				      0x030c01f0, 0x030d00f0, 0, 0x030710f0 };
static const uint32_t fz_pages[4] = { 4096, 0, 65536, 12345 };
#endif
