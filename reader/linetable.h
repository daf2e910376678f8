/* SPDX-License-Identifier: MIT */
#ifndef MT_READER_LINETABLE_H
#define MT_READER_LINETABLE_H
/*
 * Source line lookup in a CPython code object's line table, as copied by
 * the payload into CODE records. One pure function for every supported
 * table format: 3.8/3.9 co_lnotab, 3.10 co_linetable and the 3.11+
 * location table. No allocation, no I/O; safe on corrupt input.
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

#endif /* MT_READER_LINETABLE_H */
