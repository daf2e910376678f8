/* SPDX-License-Identifier: MIT */
#include "format/huff.h"

#include <errno.h>  /* ENOSPC */
#include <string.h> /* memcpy */

#include "format/error.h"
#include "format/varint.h"

#define MAXB MT_HUFF_MAX_BITS
#define TABLE (1u << MAXB)
#define BITMAP 32

enum { FORM_RAW = 0, FORM_HUFF = 1 };

/* Code lengths of at most MAXB bits for the bytes counted in @cnt (more
 * than one of them): Huffman's, from a tree built with two queues over
 * the leaves in order of weight. A tree too deep is built again from
 * weights halved (rounding up, so none becomes 0) until it fits; with 256
 * symbols at most it always does, at the latest when all weigh 1. */
static void code_lengths(const uint32_t cnt[256], uint8_t len[256])
{
	uint64_t w[511];
	uint16_t sym[256], parent[511];
	unsigned m = 0;

	for (unsigned s = 0; s < 256; s++) {
		len[s] = 0;
		if (cnt[s]) {
			sym[m] = (uint16_t)s;
			w[m++] = cnt[s];
		}
	}
	for (;;) {
		/* leaves by weight (insertion sort: m <= 256, mostly sorted
		 * after the first round) */
		for (unsigned i = 1; i < m; i++) {
			uint64_t wi = w[i];
			uint16_t si = sym[i];
			unsigned j = i;
			for (; j > 0 && w[j - 1] > wi; j--)
				w[j] = w[j - 1], sym[j] = sym[j - 1];
			w[j] = wi, sym[j] = si;
		}
		/* internal nodes m .. 2m-2 are made in order of weight */
		unsigned leaf = 0, node = m, made = m;
		while (made < 2 * m - 1) {
			unsigned pick[2];
			for (int k = 0; k < 2; k++) {
				if (leaf < m && (node == made || w[leaf] <= w[node]))
					pick[k] = leaf++;
				else
					pick[k] = node++;
			}
			w[made] = w[pick[0]] + w[pick[1]];
			parent[pick[0]] = parent[pick[1]] = (uint16_t)made;
			made++;
		}
		/* depths, from the root down: a parent is made after its
		 * children */
		uint8_t depth[511];
		unsigned deepest = 0;
		depth[2 * m - 2] = 0;
		for (unsigned i = 2 * m - 2; i-- > 0;) {
			depth[i] = (uint8_t)(depth[parent[i]] + 1);
			if (i < m && depth[i] > deepest)
				deepest = depth[i];
		}
		if (deepest <= MAXB) {
			for (unsigned i = 0; i < m; i++)
				len[sym[i]] = depth[i];
			return;
		}
		for (unsigned i = 0; i < m; i++)
			w[i] = (w[i] + 1) >> 1;
	}
}

/* The canonical codes of the lengths @len, bit-reversed so that they are
 * read from the low bit up: code[s] for each s with len[s] > 0. Returns
 * -1 if the lengths over-subscribe the code space (Kraft sum above 1). */
static int canonical(const uint8_t len[256], uint16_t code[256])
{
	unsigned count[MAXB + 1] = { 0 }, next[MAXB + 1];
	unsigned kraft = 0;

	for (unsigned s = 0; s < 256; s++)
		if (len[s])
			count[len[s]]++, kraft += TABLE >> len[s];
	if (kraft > TABLE)
		return -1;
	unsigned c = 0;
	for (unsigned l = 1; l <= MAXB; l++) {
		c = (c + count[l - 1]) << 1;
		next[l] = c;
	}
	for (unsigned s = 0; s < 256; s++) {
		unsigned l = len[s];
		if (!l)
			continue;
		unsigned v = next[l]++, r = 0;
		for (unsigned b = 0; b < l; b++)
			r |= ((v >> b) & 1) << (l - 1 - b);
		code[s] = (uint16_t)r;
	}
	return 0;
}

ssize_t mt_stream_put(uint8_t *dst, size_t cap, const uint8_t *src, size_t n)
{
	uint8_t head[MT_VARINT_MAX];
	size_t h = mt_varint_put(head, n);
	uint32_t cnt[256] = { 0 };
	uint8_t len[256];
	uint16_t code[256];

	if (!n) {
		if (cap < h)
			return -ENOSPC;
		memcpy(dst, head, h);
		return (ssize_t)h;
	}
	for (size_t i = 0; i < n; i++)
		cnt[src[i]]++;
	unsigned m = 0;
	for (unsigned s = 0; s < 256; s++)
		m += cnt[s] != 0;
	uint64_t bits = 0;
	if (m == 1) {
		for (unsigned s = 0; s < 256; s++)
			len[s] = cnt[s] ? 1 : 0;
	} else {
		code_lengths(cnt, len);
	}
	for (unsigned s = 0; s < 256; s++)
		bits += (uint64_t)cnt[s] * len[s];
	uint64_t bytes = (bits + 7) / 8;
	uint64_t huff = 1 + BITMAP + (m + 1) / 2 + mt_varint_len(bytes) + bytes;

	if (huff >= 1 + n) { /* stored as they are */
		if (cap < h + 1 + n)
			return -ENOSPC;
		memcpy(dst, head, h);
		dst[h] = FORM_RAW;
		memcpy(dst + h + 1, src, n);
		return (ssize_t)(h + 1 + n);
	}
	if (cap < h + huff)
		return -ENOSPC;
	(void)canonical(len, code); /* our own lengths fit */
	uint8_t *p = dst;
	memcpy(p, head, h);
	p += h;
	*p++ = FORM_HUFF;
	memset(p, 0, BITMAP + (m + 1) / 2);
	unsigned k = 0;
	for (unsigned s = 0; s < 256; s++) {
		if (!len[s])
			continue;
		p[s >> 3] |= (uint8_t)(1u << (s & 7));
		p[BITMAP + k / 2] |= (uint8_t)(len[s] << (4 * (k & 1)));
		k++;
	}
	p += BITMAP + (m + 1) / 2;
	p += mt_varint_put(p, bytes);
	uint64_t acc = 0;
	unsigned nb = 0;
	for (size_t i = 0; i < n; i++) {
		acc |= (uint64_t)code[src[i]] << nb;
		nb += len[src[i]];
		while (nb >= 8) {
			*p++ = (uint8_t)acc;
			acc >>= 8;
			nb -= 8;
		}
	}
	if (nb)
		*p++ = (uint8_t)acc;
	return p - dst;
}

ssize_t mt_stream_get(uint8_t *dst, size_t cap, const uint8_t **pp, const uint8_t *end)
{
	const uint8_t *p = *pp;
	uint64_t n, blen;

	if (mt_varint_get(&p, end, &n) < 0 || n > cap)
		return -MT_ECORRUPT;
	if (!n) {
		*pp = p;
		return 0;
	}
	if (p == end)
		return -MT_ECORRUPT;
	uint8_t form = *p++;
	if (form == FORM_RAW) {
		if ((size_t)(end - p) < n)
			return -MT_ECORRUPT;
		memcpy(dst, p, n);
		*pp = p + n;
		return (ssize_t)n;
	}
	if (form != FORM_HUFF || end - p < BITMAP)
		return -MT_ECORRUPT;

	uint8_t len[256];
	uint16_t code[256];
	const uint8_t *map = p, *nib;
	unsigned m = 0;
	for (unsigned s = 0; s < 256; s++)
		m += (map[s >> 3] >> (s & 7)) & 1;
	p += BITMAP;
	if (!m || (size_t)(end - p) < (m + 1) / 2)
		return -MT_ECORRUPT;
	nib = p;
	p += (m + 1) / 2;
	if ((m & 1) && (nib[m / 2] >> 4)) /* the pad nibble is 0 */
		return -MT_ECORRUPT;
	unsigned k = 0;
	for (unsigned s = 0; s < 256; s++) {
		len[s] = 0;
		if (!((map[s >> 3] >> (s & 7)) & 1))
			continue;
		len[s] = (nib[k / 2] >> (4 * (k & 1))) & 15;
		if (!len[s] || len[s] > MAXB)
			return -MT_ECORRUPT;
		k++;
	}
	if (canonical(len, code) < 0)
		return -MT_ECORRUPT;
	/* entry = symbol << 4 | length, for every MAXB-bit window whose low
	 * bits are a code; 0 where no code is (an incomplete code) */
	uint16_t table[TABLE] = { 0 };
	for (unsigned s = 0; s < 256; s++)
		if (len[s])
			for (unsigned e = code[s]; e < TABLE; e += 1u << len[s])
				table[e] = (uint16_t)(s << 4 | len[s]);

	if (mt_varint_get(&p, end, &blen) < 0 || blen > (uint64_t)(end - p) ||
	    blen > n * MAXB / 8 + 1)
		return -MT_ECORRUPT;
	const uint8_t *q = p, *qe = p + blen;
	uint64_t acc = 0, used = 0;
	unsigned nb = 0;
	for (size_t i = 0; i < n; i++) {
		if (nb < MAXB) {
			if (qe - q >= 8) {
				acc |= mt_le64_get(q) << nb;
				q += (63 - nb) >> 3;
				nb |= 56;
			} else {
				while (nb <= 56) { /* past the end: zeros */
					acc |= (uint64_t)(q < qe ? *q++ : 0) << nb;
					nb += 8;
				}
			}
		}
		uint16_t e = table[acc & (TABLE - 1)];
		if (!e)
			return -MT_ECORRUPT;
		unsigned l = e & 15;
		dst[i] = (uint8_t)(e >> 4);
		acc >>= l;
		nb -= l;
		used += l;
	}
	if ((used + 7) / 8 != blen)
		return -MT_ECORRUPT;
	*pp = qe;
	return (ssize_t)n;
}
