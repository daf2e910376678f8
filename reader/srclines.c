/* SPDX-License-Identifier: MIT */
/*
 * Source lines for the HTML reports (reader/srclines.h): the requests
 * sorted by file and line, then each file read whole once and walked
 * once, from one wanted line to the next.
 */
#include "reader/srclines.h"
#include "util/io.h"
#include "util/json.h"

#include <errno.h>    /* ENOMEM */
#include <fcntl.h>    /* open */
#include <stdlib.h>   /* malloc */
#include <string.h>   /* strcmp */
#include <sys/stat.h> /* fstat */
#include <unistd.h>   /* close */

long mt_srclines_add(struct mt_srclines *c, const char *file, int line)
{
	if (c->n == c->cap) {
		size_t n = c->cap ? c->cap * 2 : 256;
		struct mt_srcreq *nv = realloc(c->v, n * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		c->v = nv;
		c->cap = n;
	}
	c->v[c->n] = (struct mt_srcreq){ file, line, (uint32_t)c->n };
	return (long)c->n++;
}

static int req_cmp(const void *pa, const void *pb)
{
	const struct mt_srcreq *a = pa, *b = pb;
	int r = a->file == b->file ? 0 : strcmp(a->file, b->file);
	if (r)
		return r;
	if (a->line != b->line)
		return a->line < b->line ? -1 : 1;
	return a->id < b->id ? -1 : a->id > b->id;
}

static int ends_with(const char *s, const char *tail)
{
	size_t n = strlen(s), t = strlen(tail);
	return n >= t && !strcmp(s + n - t, tail);
}

/* @path's contents (malloc'ed, *@len bytes), or NULL if it is not to be
 * read (see the header) or cannot be. */
static char *slurp(const char *path, size_t budget, size_t *len, enum mt_confidential conf)
{
	struct stat st;
	char *buf = NULL;

	if (path[0] != '/')
		return NULL;
	/* O_NONBLOCK: a FIFO in a file's place must not stop the report */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
	    (unsigned long long)st.st_size > MT_SRCLINES_MAX_FILE || (size_t)st.st_size > budget)
		goto out;
	if (conf == MT_CONFIDENTIAL_DEFAULT && !ends_with(path, ".py") && !ends_with(path, ".pyw") &&
	    !(st.st_mode & (S_IXUSR | S_IXGRP | S_IXOTH | S_IROTH)))
		goto out;
	buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		goto out;
	ssize_t got = mt_read_full(fd, buf, (size_t)st.st_size);
	if (got <= 0) {
		free(buf);
		buf = NULL;
		goto out;
	}
	*len = (size_t)got;
out:
	close(fd);
	return buf;
}

static int is_space(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n' || ch == '\f' || ch == '\v';
}

/* The text of the line at @p (@n bytes, no newline), or NULL: blank,
 * not UTF-8 (*@oom on ENOMEM). */
static char *line_text(const char *p, size_t n, int *oom)
{
	static const char ellipsis[] = "\xe2\x80\xa6"; /* U+2026 */
	const unsigned char *s;
	size_t cut = 0, chars = 0, i;

	while (n && is_space(*p))
		p++, n--;
	while (n && is_space(p[n - 1]))
		n--;
	if (!n)
		return NULL;
	s = (const unsigned char *)p;
	for (i = 0; i < n;) {
		size_t l = s[i] < 0x80 ? 1 : mt_utf8_len(s + i, n - i);
		if (!l || (s[i] < 0x20 && s[i] != '\t') || s[i] == 0x7f)
			return NULL; /* not UTF-8, or a control character */
		if (chars++ == MT_SRCLINES_MAX_CHARS - 1)
			cut = i;
		i += l;
	}
	if (chars <= MT_SRCLINES_MAX_CHARS)
		cut = n;
	char *t = malloc(cut + sizeof(ellipsis));
	if (!t) {
		*oom = 1;
		return NULL;
	}
	memcpy(t, p, cut);
	if (cut < n)
		memcpy(t + cut, ellipsis, sizeof(ellipsis));
	else
		t[cut] = '\0';
	return t;
}

/* Requests @v[0..n) of one file: their texts from @buf. */
static int fill(struct mt_srclines *c, const struct mt_srcreq *v, size_t n, const char *buf,
		size_t len)
{
	const char *p = buf, *end = buf + len;
	int at = 1, oom = 0;

	for (size_t k = 0; k < n; k++) {
		if (v[k].line < 1)
			continue;
		if (k && v[k].line == v[k - 1].line) {
			c->text[v[k].id] = c->text[v[k - 1].id];
			continue;
		}
		while (at < v[k].line && p < end) {
			const char *nl = memchr(p, '\n', (size_t)(end - p));
			p = nl ? nl + 1 : end;
			at++;
		}
		if (at < v[k].line || p >= end)
			break; /* the file is shorter now */
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		char *t = line_text(p, (size_t)((nl ? nl : end) - p), &oom);
		if (oom)
			return -ENOMEM;
		if (t) {
			c->owned[c->n_owned++] = t;
			c->text[v[k].id] = t;
		}
	}
	return 0;
}

int mt_srclines_read(struct mt_srclines *c)
{
	size_t budget = MT_SRCLINES_MAX_TOTAL;

	if (!c->n || c->confidential == MT_CONFIDENTIAL_ALL)
		return 0;
	c->text = calloc(c->n, sizeof(*c->text));
	c->owned = malloc(c->n * sizeof(*c->owned));
	if (!c->text || !c->owned)
		return -ENOMEM;
	qsort(c->v, c->n, sizeof(*c->v), req_cmp);
	for (size_t i = 0, j; i < c->n; i = j) {
		for (j = i + 1; j < c->n && (c->v[j].file == c->v[i].file ||
					     !strcmp(c->v[j].file, c->v[i].file)); j++)
			;
		size_t len = 0;
		char *buf = slurp(c->v[i].file, budget, &len, c->confidential);
		if (!buf)
			continue;
		c->files_read++;
		budget -= len;
		int err = fill(c, c->v + i, j - i, buf, len);
		free(buf);
		if (err)
			return err;
	}
	return 0;
}

const char *mt_srclines_text(const struct mt_srclines *c, long id)
{
	return c->text && id >= 0 && (size_t)id < c->n ? c->text[id] : NULL;
}

void mt_srclines_release(struct mt_srclines *c)
{
	for (size_t i = 0; i < c->n_owned; i++)
		free(c->owned[i]);
	free(c->owned);
	free(c->text);
	free(c->v);
	memset(c, 0, sizeof(*c));
}
