/* SPDX-License-Identifier: MIT */
/*
 * Decoding of CPython line tables into the line number of one bytecode
 * offset, mirroring what the interpreter itself reports as f_lineno.
 * Pure and bounded: it reads only [table, table+len), never allocates,
 * and returns -1 rather than reading past a truncated or corrupt table.
 */
#include "format/linetable.h"

#include <limits.h> /* INT_MAX */
#include <stdint.h> /* int32_t */

#define MT_CODEUNIT 2 /* bytes per instruction word from 3.6 on */

/* Lines add up in 64 bits, so no table can overflow them; one that goes
 * beyond what an int holds gives no line. */
static int mt_lt_int(int64_t line)
{
	return line > INT_MAX || line < -INT_MAX ? -1 : (int)line;
}

/*
 * 3.6 to 3.9 co_lnotab: pairs (address increment, signed line increment).
 * The line of an address is the line reached by applying every pair whose
 * cumulated address is not past it; there is no "no line" marker.
 */
static int mt_lnotab_line(struct mt_linecursor *c, const uint8_t *t, size_t len, uint32_t offset)
{
	size_t i = c->pos;
	uint64_t addr = c->start;
	int64_t line = c->line;

	for (; i + 1 < len; i += 2) {
		if (addr + t[i] > offset)
			break;
		addr += t[i];
		line += (int8_t)t[i + 1];
	}
	/* every pair applied starts at or below @addr: a later offset at or
	 * past it applies them too */
	c->pos = i, c->start = addr, c->line = line;
	return mt_lt_int(line);
}

/*
 * 3.10 co_linetable: pairs (byte length of a range, signed line delta)
 * where a delta of -128 marks a range without a line. Deltas accumulate
 * even across empty ranges, which split deltas too large for one byte.
 */
static int mt_linetable310_line(struct mt_linecursor *c, const uint8_t *t, size_t len,
				uint32_t offset)
{
	int64_t line = c->line;
	uint64_t end = c->start;

	for (size_t i = c->pos; i + 1 < len; i += 2) {
		uint64_t start = end;
		int64_t before = line;
		int8_t ldelta = (int8_t)t[i + 1];
		int cur = -1;

		end += t[i];
		if (ldelta != -128) {
			line += ldelta;
			cur = mt_lt_int(line);
		}
		if (offset >= start && offset < end) {
			c->pos = i, c->start = start, c->line = before;
			return cur;
		}
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
struct mt_loc_entry {
	uint32_t bytes; /* of bytecode covered */
	int32_t delta;  /* line delta */
	int noline;     /* no location */
};

/* The entry at *@pos. Returns 1, 0 at the end of the table, or -1 if it
 * is corrupt (not at an entry start) or cut short in its line delta. */
static int mt_loc_next(const uint8_t *t, size_t len, size_t *pos, struct mt_loc_entry *e)
{
	if (*pos >= len)
		return 0;
	uint8_t head = t[(*pos)++];
	unsigned code = (head >> 3) & 0x0f;
	if (!(head & 0x80))
		return -1;
	e->bytes = ((head & 7u) + 1) * MT_CODEUNIT;
	e->delta = 0;
	e->noline = code == 15;
	if (code == 14 || code == 13) {
		if (mt_loc_svarint(t, len, pos, &e->delta) < 0)
			return -1;
	} else if (code >= 10 && code <= 12) {
		e->delta = (int32_t)code - 10;
	}
	while (*pos < len && !(t[*pos] & 0x80))
		(*pos)++;
	return 1;
}

static int mt_loctable_line(struct mt_linecursor *c, const uint8_t *t, size_t len,
			    uint32_t offset)
{
	int64_t line = c->line;
	uint64_t end = c->start;
	size_t pos = c->pos, at = pos;
	struct mt_loc_entry e;

	while (mt_loc_next(t, len, &pos, &e) > 0) {
		uint64_t start = end;
		int64_t before = line;
		end += e.bytes;
		line += e.delta;
		if (offset >= start && offset < end) {
			c->pos = at, c->start = start, c->line = before;
			return e.noline ? -1 : mt_lt_int(line);
		}
		at = pos;
	}
	return -1; /* past the end, or a corrupt entry */
}

/* Ranges of 3.10 pairs: a length up to 254 bytes (CPython's own bound,
 * which keeps them even) and a delta in -127..127. */
#define MT_RANGE_MAX 254

struct mt_lt_out {
	uint8_t *p;
	size_t n, cap;
};

/* One range of @bytes with line delta @delta from the one before, or no
 * line: into @o whole, or not at all. Returns 0 or -1 (no room). */
static int mt_lt_range(struct mt_lt_out *o, uint32_t bytes, int64_t delta, int noline)
{
	uint64_t mag = noline ? 0 : delta < 0 ? 0 - (uint64_t)delta : (uint64_t)delta;
	uint64_t extra = mag > 127 ? (mag - 1) / 127 : 0; /* pairs (0, +-127) before */
	uint64_t ranges = (bytes + MT_RANGE_MAX - 1) / MT_RANGE_MAX;
	if (extra > (o->cap - o->n) / 2 || 2 * (extra + ranges) > o->cap - o->n)
		return -1;
	for (uint64_t i = 0; i < extra; i++) {
		o->p[o->n++] = 0;
		o->p[o->n++] = (uint8_t)(delta > 0 ? 127 : -127);
	}
	int d = noline ? 0 : (int)(delta - (delta > 0 ? 1 : -1) * (int64_t)(extra * 127));
	do {
		uint32_t k = bytes < MT_RANGE_MAX ? bytes : MT_RANGE_MAX;
		o->p[o->n++] = (uint8_t)k;
		o->p[o->n++] = noline ? 0x80 : (uint8_t)(int8_t)d;
		d = 0; /* the rest of a long range: same line */
		bytes -= k;
	} while (bytes);
	return 0;
}

size_t mt_linetable_compact(uint8_t *dst, size_t cap, const uint8_t *t, size_t len)
{
	struct mt_lt_out o = { dst, 0, cap };
	int64_t line = 0, at = 0; /* lines relative to firstlineno: the table's, the output's */
	int64_t run_line = 0;     /* the pending range: its line, */
	int run_noline = 0;       /* whether it has none, */
	uint32_t run = 0;         /* and its bytes */
	size_t pos = 0;
	struct mt_loc_entry e;

	/* a corrupt or cut entry ends the table: the ones before it stand */
	while (mt_loc_next(t, len, &pos, &e) > 0) {
		line += e.delta;
		if (run && e.noline == run_noline && (e.noline || line == run_line)) {
			run += e.bytes; /* same line as the entry before: one range */
		} else {
			if (run && mt_lt_range(&o, run, run_line - at, run_noline) < 0)
				return o.n;
			if (run && !run_noline)
				at = run_line;
			run = e.bytes;
			run_noline = e.noline;
			run_line = line;
		}
	}
	if (run) /* the last range, if it fits */
		(void)mt_lt_range(&o, run, run_line - at, run_noline);
	/* A table with no whole entry gives no line for any offset, unlike
	 * an empty one (firstlineno): keep that with one empty range. */
	if (len && !o.n && o.cap >= 2) {
		o.p[o.n++] = 0;
		o.p[o.n++] = 0x80;
	}
	return o.n;
}

int mt_linetable_line_from(struct mt_linecursor *c, uint32_t python_hex, const uint8_t *table,
			   size_t len, int firstlineno, uint32_t offset)
{
	unsigned major = (python_hex >> 24) & 0xff;
	unsigned minor = (python_hex >> 16) & 0xff;

	/* A frame that has not run its first instruction reports a negative
	 * offset (f_lasti -1); CPython gives it the first line. */
	if ((int32_t)offset < 0)
		return firstlineno;
	if (table == NULL || len == 0 || major != 3)
		return firstlineno;
	if (c->table != table || c->len != len || c->firstlineno != firstlineno ||
	    c->python_hex != python_hex || offset < c->start)
		*c = (struct mt_linecursor){ table, len, 0, 0, firstlineno, firstlineno, python_hex };
	if (minor >= 11)
		return mt_loctable_line(c, table, len, offset);
	if (minor == 10)
		return mt_linetable310_line(c, table, len, offset);
	if (minor >= 6)
		return mt_lnotab_line(c, table, len, offset);
	return firstlineno;
}

int mt_linetable_line(uint32_t python_hex, const uint8_t *table, size_t len, int firstlineno,
		      uint32_t offset)
{
	struct mt_linecursor c = { 0 };
	return mt_linetable_line_from(&c, python_hex, table, len, firstlineno, offset);
}
