/* SPDX-License-Identifier: MIT */
/*
 * Decoding of CPython line tables into the line number of one bytecode
 * offset, mirroring what the interpreter itself reports as f_lineno.
 * Pure and bounded: it reads only [table, table+len), never allocates,
 * and returns -1 rather than reading past a truncated or corrupt table.
 */
#include "reader/linetable.h"

#include <stdint.h> /* int32_t */

#define MT_CODEUNIT 2 /* bytes per instruction word from 3.6 on */

/*
 * 3.6 to 3.9 co_lnotab: pairs (address increment, signed line increment).
 * The line of an address is the line reached by applying every pair whose
 * cumulated address is not past it; there is no "no line" marker.
 */
static int mt_lnotab_line(const uint8_t *t, size_t len, int firstlineno, uint32_t offset)
{
	int line = firstlineno;
	uint32_t addr = 0;

	for (size_t i = 0; i + 1 < len; i += 2) {
		addr += t[i];
		if (addr > offset)
			break;
		line += (int8_t)t[i + 1];
	}
	return line;
}

/*
 * 3.10 co_linetable: pairs (byte length of a range, signed line delta)
 * where a delta of -128 marks a range without a line. Deltas accumulate
 * even across empty ranges, which split deltas too large for one byte.
 */
static int mt_linetable310_line(const uint8_t *t, size_t len, int firstlineno, uint32_t offset)
{
	int line = firstlineno;
	uint32_t end = 0;

	for (size_t i = 0; i + 1 < len; i += 2) {
		uint32_t start = end;
		int8_t ldelta = (int8_t)t[i + 1];
		int cur = -1;

		end += t[i];
		if (ldelta != -128) {
			line += ldelta;
			cur = line;
		}
		if (offset >= start && offset < end)
			return cur;
	}
	return -1;
}

/* Location table varints: 6 bits per byte, low bits first, 0x40 means
 * another byte follows. Entry starts have 0x80 set and end a varint. */
static int mt_loc_varint(const uint8_t *t, size_t len, size_t *pos, uint32_t *out)
{
	uint32_t val = 0;
	unsigned shift = 0;

	for (;;) {
		if (*pos >= len || shift > 30)
			return -1;
		uint8_t b = t[(*pos)++];
		val |= (uint32_t)(b & 0x3f) << shift;
		shift += 6;
		if (!(b & 0x40))
			break;
	}
	*out = val;
	return 0;
}

static int mt_loc_svarint(const uint8_t *t, size_t len, size_t *pos, int32_t *out)
{
	uint32_t u;

	if (mt_loc_varint(t, len, pos, &u) < 0)
		return -1;
	*out = (u & 1) ? -(int32_t)(u >> 1) : (int32_t)(u >> 1);
	return 0;
}

/*
 * 3.11+ location table: each entry starts with a byte 1cccclll, covering
 * lll+1 code units, whose code cccc says how the line is given:
 *   15      no location
 *   14      long form: svarint line delta, then end line and columns
 *   13      svarint line delta, no columns
 *   10..12  line delta cccc-10, then two column bytes
 *   0..9    same line, one column byte
 * Only the line delta matters here; the rest of an entry is skipped by
 * looking for the next byte with the high bit set.
 */
static int mt_loctable_line(const uint8_t *t, size_t len, int firstlineno, uint32_t offset)
{
	int line = firstlineno;
	uint32_t end = 0;
	size_t pos = 0;

	while (pos < len) {
		uint8_t head = t[pos++];
		unsigned code = (head >> 3) & 0x0f;
		uint32_t start = end;
		int32_t delta = 0;
		int cur;

		if (!(head & 0x80))
			return -1; /* not at an entry start: corrupt */
		end += ((head & 7u) + 1) * MT_CODEUNIT;
		if (code == 14 || code == 13) {
			if (mt_loc_svarint(t, len, &pos, &delta) < 0)
				return -1;
		} else if (code >= 10 && code <= 12) {
			delta = (int32_t)code - 10;
		}
		line += delta;
		cur = code == 15 ? -1 : line;
		if (offset >= start && offset < end)
			return cur;
		while (pos < len && !(t[pos] & 0x80))
			pos++;
	}
	return -1;
}

int mt_linetable_line(uint32_t python_hex, const uint8_t *table, size_t len, int firstlineno,
		      uint32_t offset)
{
	unsigned major = (python_hex >> 24) & 0xff;
	unsigned minor = (python_hex >> 16) & 0xff;

	/* A frame that has not run its first instruction reports a negative
	 * offset (f_lasti -1); CPython gives it the first line. */
	if ((int32_t)offset < 0)
		return firstlineno;
	if (table == NULL || len == 0 || major != 3)
		return firstlineno;
	if (minor >= 11)
		return mt_loctable_line(table, len, firstlineno, offset);
	if (minor == 10)
		return mt_linetable310_line(table, len, firstlineno, offset);
	if (minor >= 6)
		return mt_lnotab_line(table, len, firstlineno, offset);
	return firstlineno;
}
