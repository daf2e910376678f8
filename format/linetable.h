/* SPDX-License-Identifier: MIT */
#ifndef MT_FORMAT_LINETABLE_H
#define MT_FORMAT_LINETABLE_H
/*
 * Source line lookup in a CPython code object's line table, as copied by
 * the payload into CODE records. One pure function for every supported
 * table format: 3.8/3.9 co_lnotab, 3.10 co_linetable and the 3.11+
 * location table; and the conversion of a location table into the 3.10
 * form, which is how captures store them. No allocation, no I/O; safe on
 * corrupt input.
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint8_t, uint32_t */

/* mt_linetable_line() - the source line of the instruction that starts at
 * byte @offset of the bytecode, for a table in the format of CPython
 * @python_hex (PY_VERSION_HEX; only major and minor are used).
 * Returns the line (>= 1); @firstlineno when the table is empty or the
 * format is unknown; -1 when the table says the instruction has no line
 * (3.10+) or @offset lies past the end of the table. */
int mt_linetable_line(uint32_t python_hex, const uint8_t *table, size_t len, int firstlineno,
		      uint32_t offset);

/* A place in a line table: where the entry that held the last offset
 * asked for starts, so that a lookup of an offset at or past it goes on
 * from there rather than from the table's start (a module's body, met
 * top to bottom, costs the length of its table, not its square).
 * Zero-initialised is the start of no table. */
struct mt_linecursor {
	const uint8_t *table;
	size_t len, pos;   /* the table; its entry at pos holds the offset */
	uint64_t start;    /* the byte offset where that entry starts */
	int64_t line;      /* the line before that entry */
	int firstlineno;
	uint32_t python_hex;
};

/* mt_linetable_line_from() - mt_linetable_line() that starts from @c when
 * @c is at the same table and not past @offset, and leaves @c at the
 * entry that holds @offset (as it was when there is none). */
int mt_linetable_line_from(struct mt_linecursor *c, uint32_t python_hex, const uint8_t *table,
			   size_t len, int firstlineno, uint32_t offset);

/* mt_linetable_compact() - the 3.11+ location table [@loc, @loc+@len) as a
 * 3.10 co_linetable in @dst (@cap bytes): pairs of (byte length of a
 * range, signed line delta, -128 for none), giving mt_linetable_line() the
 * same line for every offset without the column positions, mostly a
 * sixth of the size. Writes the ranges that fit in @cap, each whole, and
 * stops at a truncated entry; returns the bytes written. */
size_t mt_linetable_compact(uint8_t *dst, size_t cap, const uint8_t *loc, size_t len);

/* mt_linetable_capture_hex() - the python_hex whose table format the CODE
 * records of a capture of CPython @python_hex are in (docs/format.md 3.2):
 * its own up to 3.10, 3.10's from 3.11 on (mt_linetable_compact()). */
static inline uint32_t mt_linetable_capture_hex(uint32_t python_hex)
{
	if ((python_hex >> 24) == 3 && ((python_hex >> 16) & 0xff) >= 11)
		return 0x030a00f0;
	return python_hex;
}

#endif /* MT_FORMAT_LINETABLE_H */
