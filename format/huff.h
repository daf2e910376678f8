/* SPDX-License-Identifier: MIT */
#ifndef MT_FORMAT_HUFF_H
#define MT_FORMAT_HUFF_H
/*
 * Byte streams, stored as they are or Huffman coded (docs/format.md 2.4):
 *   varint n, then for n > 0 a form byte: 0 and the n bytes, or 1 and a
 *   canonical Huffman code (a 32-byte bitmap of the bytes present, then
 *   each one's code length, 1 ..= 11, as nibbles), the varint length of
 *   the bit stream in bytes and the bit stream (codes packed from the low
 *   bit of each byte up).
 * The entropy stage after LZ4: LZ4 leaves its literals, tokens and offsets
 * as whole bytes, most of them far from uniform. Pure functions over byte
 * buffers, no malloc.
 */
#include <stddef.h>    /* size_t */
#include <stdint.h>    /* uint8_t */
#include <sys/types.h> /* ssize_t */

#define MT_HUFF_MAX_BITS 11
/* A stream of n bytes never takes more than this. */
#define MT_STREAM_MAX(n) ((size_t)(n) + 11)

/* mt_stream_put() - the stream form of [@src, @src+@n) into @dst (@cap
 * bytes), Huffman coded when that is shorter. Returns its length, or
 * -ENOSPC if it does not fit. */
ssize_t mt_stream_put(uint8_t *dst, size_t cap, const uint8_t *src, size_t n);

/* mt_stream_get() - decode the stream at [*@p, @end) into @dst, which has
 * room for @cap bytes; advances *@p past it. Returns the stream's length
 * n, or -MT_ECORRUPT if it is malformed, runs past @end or holds more than
 * @cap bytes. */
ssize_t mt_stream_get(uint8_t *dst, size_t cap, const uint8_t **p, const uint8_t *end);

#endif /* MT_FORMAT_HUFF_H */
