/* SPDX-License-Identifier: MIT */
/*
 * MEMTRACE_RUN and the status line (see runproto.h). Hand-written digits:
 * the status encoder runs in a signal handler.
 */
#include "format/runproto.h"

#include <errno.h>  /* EINVAL, ENOSPC */
#include <stdint.h> /* uint64_t */

/* A growing string in a fixed buffer; overflowed once it did not fit. */
struct out {
	char *buf;
	size_t cap, n;
	int overflowed;
};

static void put_bytes(struct out *o, const char *s, size_t len)
{
	if (len > o->cap - o->n) {
		o->overflowed = 1;
		len = o->cap - o->n;
	}
	for (size_t i = 0; i < len; i++)
		o->buf[o->n++] = s[i];
}

static void put_str(struct out *o, const char *s)
{
	size_t len = 0;
	while (s[len])
		len++;
	put_bytes(o, s, len);
}

static void put_u64(struct out *o, uint64_t v)
{
	char tmp[24];
	size_t n = sizeof(tmp);
	do
		tmp[--n] = (char)('0' + v % 10);
	while ((v /= 10) != 0);
	put_bytes(o, tmp + n, sizeof(tmp) - n);
}

static void put_fd(struct out *o, int fd)
{
	if (fd < 0)
		put_str(o, "-1");
	else
		put_u64(o, (uint64_t)fd);
}

/* A decimal at *@p, at most @max, its end at *@p after; 0 or -EINVAL. */
static int get_u64(const char **p, uint64_t max, uint64_t *v)
{
	const char *s = *p;
	uint64_t x = 0;
	if (*s < '0' || *s > '9' || (s[0] == '0' && s[1] >= '0' && s[1] <= '9'))
		return -EINVAL;
	for (; *s >= '0' && *s <= '9'; s++) {
		unsigned d = (unsigned)(*s - '0');
		if (x > (max - d) / 10)
			return -EINVAL;
		x = x * 10 + d;
	}
	*v = x;
	*p = s;
	return 0;
}

/* A descriptor: a non-negative int or -1. */
static int get_fd(const char **p, int *fd)
{
	uint64_t v;
	if ((*p)[0] == '-' && (*p)[1] == '1' && !((*p)[2] >= '0' && (*p)[2] <= '9')) {
		*p += 2;
		*fd = -1;
		return 0;
	}
	if (get_u64(p, 0x7fffffff, &v) < 0)
		return -EINVAL;
	*fd = (int)v;
	return 0;
}

/* The literal @lit at *@p, skipped. */
static int get_lit(const char **p, const char *lit)
{
	const char *s = *p;
	for (; *lit; lit++, s++)
		if (*s != *lit)
			return -EINVAL;
	*p = s;
	return 0;
}

int mt_run_env_encode(char *buf, size_t cap, const struct mt_run_env *e)
{
	struct out o = { buf, cap, 0, 0 };
	if (!e->has_fd && (!e->path || e->path[0] != '/'))
		return -EINVAL;
	if (!cap)
		return -ENOSPC;
	o.cap = cap - 1; /* the NUL */
	put_u64(&o, e->flags);
	put_str(&o, ":");
	put_u64(&o, e->interval_ms);
	put_str(&o, ":");
	put_fd(&o, e->status_fd);
	put_str(&o, ":");
	if (e->has_fd) {
		put_str(&o, "fd:");
		put_fd(&o, e->capture_fd);
		if (e->path)
			put_str(&o, ":");
	}
	if (e->path)
		put_str(&o, e->path);
	buf[o.n] = '\0';
	return o.overflowed ? -ENOSPC : (int)o.n;
}

int mt_run_env_parse(const char *s, struct mt_run_env *e)
{
	struct mt_run_env r = { .status_fd = -1, .capture_fd = -1 };
	uint64_t v;
	if (get_u64(&s, UINT32_MAX, &v) < 0 || get_lit(&s, ":") < 0)
		return -EINVAL;
	r.flags = (uint32_t)v;
	if (get_u64(&s, UINT32_MAX, &v) < 0 || get_lit(&s, ":") < 0)
		return -EINVAL;
	r.interval_ms = (uint32_t)v;
	if (get_fd(&s, &r.status_fd) < 0 || get_lit(&s, ":") < 0)
		return -EINVAL;
	if (get_lit(&s, "fd:") == 0) {
		r.has_fd = 1;
		if (get_fd(&s, &r.capture_fd) < 0)
			return -EINVAL;
		if (*s == ':')
			r.path = s + 1;
		else if (*s)
			return -EINVAL;
		if (r.path && !*r.path)
			return -EINVAL; /* "fd:N:" */
	} else if (*s == '/') {
		r.path = s;
	} else {
		return -EINVAL;
	}
	*e = r;
	return 0;
}

int mt_run_status_encode(char *buf, size_t cap, const struct mt_run_status *s)
{
	struct out o = { buf, cap, 0, 0 };
	switch (s->end) {
	case MT_RUN_OK:
		put_str(&o, "ok");
		if (s->dropped) {
			put_str(&o, " dropped ");
			put_u64(&o, s->dropped);
		}
		break;
	case MT_RUN_SIGNAL:
		if (s->sig < 1 || s->sig > 127)
			return -EINVAL;
		put_str(&o, "signal ");
		put_u64(&o, (uint64_t)s->sig);
		if (s->dropped) {
			put_str(&o, " dropped ");
			put_u64(&o, s->dropped);
		}
		break;
	case MT_RUN_ERROR: {
		size_t len = 0;
		while (len < s->reason_len && s->reason[len] != '\n')
			len++;
		if (!len)
			return -EINVAL;
		if (cap < sizeof("error x\n") - 1)
			return -ENOSPC;
		put_str(&o, "error ");
		if (len > cap - o.n - 1)
			len = cap - o.n - 1; /* the reason shortened, the newline kept */
		put_bytes(&o, s->reason, len);
		break;
	}
	default:
		return -EINVAL;
	}
	put_str(&o, "\n");
	return o.overflowed ? -ENOSPC : (int)o.n;
}

int mt_run_status_parse(const char *buf, size_t len, struct mt_run_status *s)
{
	struct mt_run_status r = { 0 };
	uint64_t v;
	if (!len || buf[len - 1] != '\n')
		return -EINVAL;
	for (size_t i = 0; i + 1 < len; i++)
		if (buf[i] == '\n' || buf[i] == '\0')
			return -EINVAL;
	/* one line, no NUL before its newline: the string functions below
	 * stop at the newline */
	const char *p = buf;
	if (get_lit(&p, "error ") == 0) {
		r.end = MT_RUN_ERROR;
		r.reason = p;
		r.reason_len = len - 1 - (size_t)(p - buf);
		if (!r.reason_len)
			return -EINVAL;
		*s = r;
		return 0;
	}
	if (get_lit(&p, "ok") == 0) {
		r.end = MT_RUN_OK;
	} else if (get_lit(&p, "signal ") == 0) {
		r.end = MT_RUN_SIGNAL;
		if (get_u64(&p, 127, &v) < 0 || v < 1)
			return -EINVAL;
		r.sig = (int)v;
	} else {
		return -EINVAL;
	}
	if (get_lit(&p, " dropped ") == 0 && (get_u64(&p, UINT64_MAX, &r.dropped) < 0 ||
					       !r.dropped))
		return -EINVAL;
	if (get_lit(&p, "\n") < 0 || (size_t)(p - buf) != len)
		return -EINVAL;
	*s = r;
	return 0;
}
