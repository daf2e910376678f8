/* SPDX-License-Identifier: MIT */
#ifndef MT_UTIL_STRBUF_H
#define MT_UTIL_STRBUF_H
/*
 * Growable byte strings for reports (CLI and reader; never the payload).
 * Invariants: buf is never NULL and always NUL-terminated at len, so it
 * can be printed at any time. Allocation failure is sticky: the first
 * failure sets err (-ENOMEM), later appends do nothing, and every append
 * returns err, so a caller may check once at the end.
 */
#include <stdarg.h> /* va_list */
#include <stdio.h>  /* FILE */
#include <stddef.h>  /* size_t */

struct mt_strbuf {
	char *buf;
	size_t len;
	size_t alloc; /* 0 while buf points at the shared empty string */
	int err;
};

extern char mt_strbuf_empty[];
#define MT_STRBUF_INIT { mt_strbuf_empty, 0, 0, 0 }

void mt_strbuf_init(struct mt_strbuf *sb);
/* mt_strbuf_release() - free the contents; @sb is empty again. */
void mt_strbuf_release(struct mt_strbuf *sb);
/* mt_strbuf_reset() - length 0, storage kept, error cleared. */
void mt_strbuf_reset(struct mt_strbuf *sb);
/* mt_strbuf_write_release() - write @sb to @out and release it. Returns 0,
 * the buffer's own error, or -errno of the write (-EIO if none is set). */
int mt_strbuf_write_release(struct mt_strbuf *sb, FILE *out);
/* mt_strbuf_grow() - room for @extra more bytes. Returns 0 or -ENOMEM. */
int mt_strbuf_grow(struct mt_strbuf *sb, size_t extra);

int mt_strbuf_add(struct mt_strbuf *sb, const void *p, size_t n);
int mt_strbuf_addstr(struct mt_strbuf *sb, const char *s);
int mt_strbuf_addch(struct mt_strbuf *sb, int c);
int mt_strbuf_addf(struct mt_strbuf *sb, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
int mt_strbuf_vaddf(struct mt_strbuf *sb, const char *fmt, va_list ap)
	__attribute__((format(printf, 2, 0)));
/* mt_strbuf_addbytes() - human-readable size: "512 B", "1.50 KiB"... */
int mt_strbuf_addbytes(struct mt_strbuf *sb, unsigned long long n);

/* mt_strbuf_detach() - hand over the string (caller frees; never NULL
 * unless out of memory); @sb is empty again. */
char *mt_strbuf_detach(struct mt_strbuf *sb, size_t *len);

#endif /* MT_UTIL_STRBUF_H */
