/* SPDX-License-Identifier: MIT */
/*
 * The control protocol's encoders and parsers (format/ctlproto.h).
 */
#include "format/ctlproto.h"

#include <errno.h>  /* EINVAL, EPROTO */
#include <string.h> /* strlen */

static const struct {
	const char *words;
	int field; /* 0: none, 1: " TEXT", 2: " COUNT TEXT" */
} replies[] = {
#define X(kind, w, f) [MT_CTL_##kind] = { w, f },
	MT_CTL_REPLIES(X)
#undef X
};

static const char *const requests[] = {
	[MT_CTL_STATUS] = "status",
	[MT_CTL_START] = "start",
	[MT_CTL_STOP] = "stop",
	[MT_CTL_DETACH] = "detach",
	[MT_CTL_EXPIRE] = "expire",
};

/* A line being written into a caller's buffer; @len past @cap means it
 * did not fit. */
struct line {
	char *buf;
	size_t cap, len;
};

static void put(struct line *l, const char *s, size_t n)
{
	if (l->len + n < l->cap)
		memcpy(l->buf + l->len, s, n);
	l->len += n;
}

static void puts_(struct line *l, const char *s)
{
	put(l, s, strlen(s));
}

static void put_u64(struct line *l, uint64_t v)
{
	char d[24];
	size_t i = sizeof(d);
	do
		d[--i] = (char)('0' + v % 10);
	while ((v /= 10) != 0);
	put(l, d + i, sizeof(d) - i);
}

/* Ends the line: '\n' and a NUL. Its length, or -ENOSPC. */
static int finish(struct line *l)
{
	put(l, "\n", 1);
	if (l->len >= l->cap || l->len > 0x7fffffff)
		return -ENOSPC;
	l->buf[l->len] = '\0';
	return (int)l->len;
}

/* Decimal digits at @s (at most @max_digits, no sign, no space) into
 * *@v; the end in *@end. 0 or -EINVAL (none, too many, or over @max). */
static int parse_u64(const char *s, uint64_t max, const char **end, uint64_t *v)
{
	uint64_t x = 0;
	const char *p = s;
	for (; *p >= '0' && *p <= '9'; p++) {
		unsigned d = (unsigned)(*p - '0');
		if (x > (max - d) / 10)
			return -EINVAL;
		x = x * 10 + d;
	}
	if (p == s)
		return -EINVAL;
	*end = p;
	*v = x;
	return 0;
}

int mt_ctl_request_encode(char *buf, size_t cap, const struct mt_ctl_request *r)
{
	struct line l = { buf, cap, 0 };
	if ((unsigned)r->kind >= MT_CTL_REQ__COUNT)
		return -EINVAL;
	puts_(&l, requests[r->kind]);
	if (r->kind == MT_CTL_START) {
		if (!r->path || r->path[0] != '/' || strchr(r->path, '\n'))
			return -EINVAL;
		put(&l, " ", 1);
		put_u64(&l, r->flags);
		put(&l, " ", 1);
		put_u64(&l, r->interval_ms);
		put(&l, " ", 1);
		puts_(&l, r->path);
	} else if (r->kind == MT_CTL_EXPIRE) {
		put(&l, " ", 1);
		put_u64(&l, r->after_ms);
	}
	return finish(&l);
}

int mt_ctl_spec_parse(const char *spec, int path_optional, struct mt_ctl_request *r)
{
	uint64_t flags, interval;
	const char *p;
	if (parse_u64(spec, UINT32_MAX, &p, &flags) < 0 || *p != ' ' ||
	    parse_u64(p + 1, UINT32_MAX, &p, &interval) < 0)
		return -EINVAL;
	if (path_optional && (p[0] == '\0' || (p[0] == ' ' && p[1] == '\0')))
		p = "";
	else if (p[0] == ' ' && p[1] == '/' && !strchr(p, '\n'))
		p++;
	else
		return -EINVAL;
	r->kind = MT_CTL_START;
	r->flags = (uint32_t)flags;
	r->interval_ms = (uint32_t)interval;
	r->path = p;
	r->after_ms = 0;
	return 0;
}

int mt_ctl_request_parse(const char *line, struct mt_ctl_request *r)
{
	if (!strncmp(line, "start ", 6))
		return mt_ctl_spec_parse(line + 6, 0, r) == 0 ? 0 : -EPROTO;
	if (!strncmp(line, "expire ", 7)) {
		uint64_t ms;
		const char *end;
		if (parse_u64(line + 7, UINT64_MAX, &end, &ms) < 0 || *end)
			return -EINVAL;
		*r = (struct mt_ctl_request){ .kind = MT_CTL_EXPIRE, .after_ms = ms };
		return 0;
	}
	for (int k = 0; k < MT_CTL_REQ__COUNT; k++) {
		if (k != MT_CTL_START && k != MT_CTL_EXPIRE && !strcmp(line, requests[k])) {
			*r = (struct mt_ctl_request){ .kind = (enum mt_ctl_req)k };
			return 0;
		}
	}
	return -EINVAL;
}

int mt_ctl_reply_encode(char *buf, size_t cap, const struct mt_ctl_reply *r)
{
	struct line l = { buf, cap, 0 };
	if ((unsigned)r->kind >= MT_CTL_REPLY__COUNT)
		return -EINVAL;
	int field = replies[r->kind].field;
	const char *text = field && r->text ? r->text : "";
	if (strchr(text, '\n') || (r->kind == MT_CTL_ERROR && !text[0]))
		return -EINVAL;
	puts_(&l, replies[r->kind].words);
	if (field == 2) {
		put(&l, " ", 1);
		put_u64(&l, r->dropped);
	}
	if (field) {
		put(&l, " ", 1);
		puts_(&l, text);
	}
	return finish(&l);
}

/* Whether @line is @words then end (returns the end) or then " " (returns
 * what follows); NULL if not. */
static const char *after(const char *line, const char *words)
{
	size_t n = strlen(words);
	if (strncmp(line, words, n) != 0)
		return NULL;
	return line[n] == '\0' ? line + n : line[n] == ' ' ? line + n + 1 : NULL;
}

int mt_ctl_reply_parse(const char *line, struct mt_ctl_reply *r)
{
	struct mt_ctl_reply out = { .kind = MT_CTL_REPLY__COUNT };
	for (int k = 0; k < MT_CTL_ERROR && out.kind == MT_CTL_REPLY__COUNT; k++) {
		const char *words = replies[k].words, *p = after(line, words);
		size_t n = strlen(words);
		if (!p)
			continue;
		if (replies[k].field == 0) {
			/* an older payload's "ok starting" had a tail */
			if (line[n] == '\0' || k == MT_CTL_OK_STARTING)
				out.kind = (enum mt_ctl_reply_kind)k;
		} else if (line[n] == ' ' && replies[k].field == 1) {
			out.kind = (enum mt_ctl_reply_kind)k;
			out.text = p;
		} else if (line[n] == ' ') {
			uint64_t dropped;
			if (parse_u64(p, UINT64_MAX, &p, &dropped) == 0 && *p == ' ') {
				out.kind = (enum mt_ctl_reply_kind)k;
				out.dropped = dropped;
				out.text = p + 1;
			}
		}
	}
	if (out.kind == MT_CTL_REPLY__COUNT) {
		if (strncmp(line, "error ", 6) != 0 || !line[6])
			return -EINVAL;
		out.kind = MT_CTL_ERROR;
		out.text = line + 6;
	}
	if (!mt_ctl_reply_is_ok(out.kind))
		out.message = line + 6;
	*r = out;
	return 0;
}

int mt_ctl_reply_is_ok(enum mt_ctl_reply_kind kind)
{
	return kind <= MT_CTL_OK_EXPIRING;
}
