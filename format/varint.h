/* SPDX-License-Identifier: MIT */
#ifndef MT_FORMAT_VARINT_H
#define MT_FORMAT_VARINT_H
/*
 * LEB128 varints, zigzag signed values and little-endian fixed fields.
 * Pure inline functions: no I/O, no allocation, safe inside a malloc hook.
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint64_t */

#define MT_VARINT_MAX 10 /* bytes for a 64-bit value */

/* mt_varint_put() - write @v at @p. Returns bytes written (1..10). */
static inline size_t mt_varint_put(uint8_t *p, uint64_t v)
{
	size_t n = 0;
	while (v >= 0x80) {
		p[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	p[n++] = (uint8_t)v;
	return n;
}

/* Bytes of the varint of @v. */
static inline size_t mt_varint_len(uint64_t v)
{
	size_t n = 1;
	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

/* mt_varint_get() - read a varint from [*p, end). Advances *p.
 * Returns 0 on success, -1 if the input ends first or the value overflows. */
static inline int mt_varint_get(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	const uint8_t *q = *p;
	uint64_t r = 0;
	unsigned shift = 0;
	while (q < end) {
		uint8_t b = *q++;
		if (shift == 63 && b > 1)
			return -1;
		r |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*v = r;
			*p = q;
			return 0;
		}
		shift += 7;
		if (shift > 63)
			return -1;
	}
	return -1;
}

static inline uint64_t mt_zigzag(int64_t v)
{
	return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static inline int64_t mt_unzigzag(uint64_t v)
{
	return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

static inline void mt_le16_put(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void mt_le32_put(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void mt_le64_put(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t mt_le16_get(const uint8_t *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t mt_le32_get(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 0; i < 4; i++)
		v |= (uint32_t)p[i] << (8 * i);
	return v;
}

static inline uint64_t mt_le64_get(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

#endif /* MT_FORMAT_VARINT_H */
