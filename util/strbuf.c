/* SPDX-License-Identifier: MIT */
/* Growable strings with a sticky allocation error. */
#include "util/strbuf.h"

#include <errno.h>  /* ENOMEM */
#include <stdint.h> /* SIZE_MAX */
#include <stdio.h>  /* vsnprintf */
#include <stdlib.h> /* realloc */
#include <string.h> /* memcpy */

char mt_strbuf_empty[1];

void mt_strbuf_init(struct mt_strbuf *sb)
{
	sb->buf = mt_strbuf_empty;
	sb->len = 0;
	sb->alloc = 0;
	sb->err = 0;
}

void mt_strbuf_release(struct mt_strbuf *sb)
{
	if (sb->alloc)
		free(sb->buf);
	mt_strbuf_init(sb);
}

void mt_strbuf_reset(struct mt_strbuf *sb)
{
	sb->len = 0;
	sb->err = 0;
	if (sb->alloc)
		sb->buf[0] = '\0';
}

int mt_strbuf_grow(struct mt_strbuf *sb, size_t extra)
{
	if (sb->err)
		return sb->err;
	if (sb->len + extra + 1 <= sb->alloc)
		return 0;
	if (extra > SIZE_MAX / 2 - sb->len) {
		sb->err = -ENOMEM;
		return sb->err;
	}
	size_t n = sb->alloc ? sb->alloc : 64;
	while (n < sb->len + extra + 1)
		n *= 2;
	char *nb = realloc(sb->alloc ? sb->buf : NULL, n);
	if (!nb) {
		sb->err = -ENOMEM;
		return sb->err;
	}
	if (!sb->alloc)
		nb[0] = '\0';
	sb->buf = nb;
	sb->alloc = n;
	return 0;
}

int mt_strbuf_add(struct mt_strbuf *sb, const void *p, size_t n)
{
	if (mt_strbuf_grow(sb, n) < 0)
		return sb->err;
	if (n)
		memcpy(sb->buf + sb->len, p, n);
	sb->len += n;
	sb->buf[sb->len] = '\0';
	return 0;
}

int mt_strbuf_addstr(struct mt_strbuf *sb, const char *s)
{
	return mt_strbuf_add(sb, s, strlen(s));
}

int mt_strbuf_addch(struct mt_strbuf *sb, int c)
{
	char ch = (char)c;
	return mt_strbuf_add(sb, &ch, 1);
}

int mt_strbuf_vaddf(struct mt_strbuf *sb, const char *fmt, va_list ap)
{
	va_list cp;
	int n;

	if (mt_strbuf_grow(sb, 64) < 0)
		return sb->err;
	va_copy(cp, ap);
	n = vsnprintf(sb->buf + sb->len, sb->alloc - sb->len, fmt, cp);
	va_end(cp);
	if (n < 0) {
		sb->buf[sb->len] = '\0';
		return -EINVAL;
	}
	if ((size_t)n >= sb->alloc - sb->len) {
		if (mt_strbuf_grow(sb, (size_t)n) < 0) {
			sb->buf[sb->len] = '\0';
			return sb->err;
		}
		vsnprintf(sb->buf + sb->len, sb->alloc - sb->len, fmt, ap);
	}
	sb->len += (size_t)n;
	return 0;
}

int mt_strbuf_addf(struct mt_strbuf *sb, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = mt_strbuf_vaddf(sb, fmt, ap);
	va_end(ap);
	return r;
}

int mt_strbuf_addbytes(struct mt_strbuf *sb, unsigned long long n)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double v = (double)n;
	int u = -1;

	if (n < 1024)
		return mt_strbuf_addf(sb, "%llu B", n);
	while (v >= 1024 && u < 5) {
		v /= 1024;
		u++;
	}
	return mt_strbuf_addf(sb, "%.2f %s", v, units[u]);
}

char *mt_strbuf_detach(struct mt_strbuf *sb, size_t *len)
{
	char *r;

	if (len)
		*len = sb->len;
	if (sb->alloc) {
		r = sb->buf;
	} else {
		r = malloc(1);
		if (r)
			r[0] = '\0';
	}
	mt_strbuf_init(sb);
	return r;
}

int mt_strbuf_write_release(struct mt_strbuf *sb, FILE *out)
{
	int err = sb->err;
	if (!err && fwrite(sb->buf, 1, sb->len, out) != sb->len)
		err = errno ? -errno : -EIO;
	mt_strbuf_release(sb);
	return err;
}
