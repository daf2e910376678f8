/* SPDX-License-Identifier: MIT */
/*
 * The stats as memray's `stats --json` writes them: totals, a size
 * histogram of ten bins on a log scale between the smallest and the
 * largest size allocated (computed from exact sizes, with Python's float
 * arithmetic, so that the bounds and counts are memray's), allocations
 * by allocator, the top locations (innermost Python frame,
 * "function:file:line") by bytes and by count, and the capture's metadata.
 * memray's top modules need the program's sys.path, which a capture does
 * not keep: those lists are written empty.
 */
#include "reader/report.h"
#include "reader/sizes.h"
#include "util/json.h"
#include "util/strbuf.h"

#include <ctype.h>  /* toupper */
#include <errno.h>  /* ENOMEM */
#include <math.h>   /* log, exp, fmod, floor */
#include <stdlib.h> /* qsort */
#include <string.h> /* strcmp */
#include <time.h>   /* localtime_r */

#define BINS 10 /* memray's num_bins */

/* ------------------------------------------------------------------------
 * The size histogram
 * ---------------------------------------------------------------------- */
/* a // b for floats as Python computes it (the quotient of a - fmod(a, b),
 * floored and rounded back when floor() lost a half) */
static double py_floordiv(double a, double b)
{
	double mod = fmod(a, b), div = (a - mod) / b, fl;

	if (mod != 0.0 && ((b < 0) != (mod < 0)))
		div -= 1.0;
	if (div == 0.0)
		return copysign(0.0, a / b);
	fl = floor(div);
	if (div - fl > 0.5)
		fl += 1.0;
	return fl;
}

struct hist {
	uint64_t min, max; /* smallest nonzero size, largest size */
	int any;           /* a nonzero size was seen */
	double low, step;
	uint64_t count[BINS];
};

static void find_range(void *ctx, uint64_t size, uint64_t count)
{
	struct hist *h = ctx;

	(void)count;
	if (!size)
		return;
	if (!h->any || size < h->min)
		h->min = size;
	if (!h->any || size > h->max)
		h->max = size;
	h->any = 1;
}

static void bin(void *ctx, uint64_t size, uint64_t count)
{
	struct hist *h = ctx;
	int b = 0;

	if (size && h->step > 0) {
		double q = py_floordiv(log((double)size) - h->low, h->step);
		b = q >= BINS - 1 ? BINS - 1 : q > 0 ? (int)q : 0;
	}
	h->count[b] += count;
}

/* memray's bins: ten steps of the log of the sizes between the smallest
 * nonzero one and the largest (half the log of that size when they are
 * equal), each bin up to the exponential of its upper log, truncated;
 * size 0 counts in the first. The last bin's upper bound is inclusive.
 * memray fails on a capture with no nonzero size, or only sizes of one
 * byte: the list is empty there, or every count in the first bin. */
static void json_histogram(struct mt_json *j, const struct mt_sizes *z)
{
	struct hist h = { 0 };

	mt_json_begin_array(j, "allocation_size_histogram");
	mt_sizes_each(z, find_range, &h);
	if (!h.any) {
		mt_json_end(j);
		return;
	}
	double high = log((double)h.max);
	h.low = log((double)h.min);
	if (h.low == high)
		h.low = h.low / 2;
	h.step = (high - h.low) / BINS;
	mt_sizes_each(z, bin, &h);
	uint64_t start = 0;
	for (int i = 0; i < BINS; i++) {
		uint64_t end = (uint64_t)exp(h.low + h.step * (i + 1));
		mt_json_begin_object(j, NULL);
		mt_json_u64(j, "min_bytes", start);
		mt_json_i64(j, "max_bytes", (int64_t)end - (i == BINS - 1 ? 0 : 1));
		mt_json_u64(j, "count", h.count[i]);
		mt_json_end(j);
		start = end;
	}
	mt_json_end(j);
}

/* ------------------------------------------------------------------------
 * Allocators and locations
 * ---------------------------------------------------------------------- */
struct kind {
	unsigned kind;
	uint64_t count;
};

static int cmp_kind(const void *a, const void *b)
{
	const struct kind *x = a, *y = b;

	return x->count != y->count ? (x->count < y->count) - (x->count > y->count)
				    : (x->kind > y->kind) - (x->kind < y->kind);
}

/* by count, the most first, as memray sorts them; ties by number */
static void json_allocators(struct mt_json *j, const struct mt_snapshot *s)
{
	struct kind kinds[MT_ALLOC__COUNT];
	unsigned n = 0;

	/* memray has no kinds for the PyMem RAW domain: a raw call counts
	 * under the pymalloc kind of the same call (PYMALLOC_RAW_MALLOC as
	 * PYMALLOC_MALLOC), as memray itself records it. */
	uint64_t count[MT_ALLOC__COUNT] = { 0 };
	for (unsigned k = 0; k < MT_ALLOC__COUNT; k++)
		count[mt_allocator_pymalloc(k)] += s->by_allocator_count[k];
	for (unsigned k = 0; k < MT_ALLOC__COUNT; k++)
		if (count[k] && mt_allocator_name(k))
			kinds[n++] = (struct kind){ k, count[k] };
	qsort(kinds, n, sizeof(kinds[0]), cmp_kind);
	mt_json_begin_object(j, "allocator_type_distribution");
	for (unsigned i = 0; i < n; i++) {
		char name[32];
		const char *lc = mt_allocator_name(kinds[i].kind);
		size_t k = 0;
		for (; lc[k] && k + 1 < sizeof(name); k++)
			name[k] = (char)toupper((unsigned char)lc[k]);
		name[k] = 0;
		mt_json_u64(j, name, kinds[i].count);
	}
	mt_json_end(j);
}

struct place {
	char *text; /* "function:file:line", or memray's word for no stack */
	uint64_t bytes, count;
};

static int cmp_text(const void *a, const void *b)
{
	return strcmp(((const struct place *)a)->text, ((const struct place *)b)->text);
}

static int cmp_bytes(const void *a, const void *b)
{
	const struct place *x = a, *y = b;

	return x->bytes != y->bytes ? (x->bytes < y->bytes) - (x->bytes > y->bytes)
				    : strcmp(x->text, y->text);
}

static int cmp_count(const void *a, const void *b)
{
	const struct place *x = a, *y = b;

	return x->count != y->count ? (x->count < y->count) - (x->count > y->count)
				    : strcmp(x->text, y->text);
}

/* Each innermost frame's allocations, as memray names the place: its
 * co_name, file and line, or "<stack trace unavailable>" for
 * allocations without Python frames or with an unknown one. Places that
 * read the same are one. Returns their number, or -ENOMEM. */
static ssize_t places_of(const struct mt_snapshot *s, struct place **out)
{
	struct mt_location *locs;
	ssize_t nl = mt_snapshot_locations(s, MT_VIEW_ALLOCATED, &locs);
	size_t n = 0;
	int err = 0;

	if (nl < 0)
		return nl;
	struct place *v = calloc(nl ? (size_t)nl : 1, sizeof(*v));
	if (!v) {
		free(locs);
		return -ENOMEM;
	}
	for (ssize_t i = 0; i < nl && !err; i++) {
		const struct mt_location *l = &locs[i];
		struct mt_strbuf sb = MT_STRBUF_INIT;
		if (!l->own_count)
			continue;
		const char *dot = l->native ? NULL : strrchr(l->function, '.');
		const char *fn = dot ? dot + 1 : l->function;
		if (!l->file || !strcmp(l->function, "<unknown>") ||
		    !strcmp(l->function, "<no Python frames>"))
			mt_strbuf_addstr(&sb, "<stack trace unavailable>");
		else
			mt_strbuf_addf(&sb, "%s:%s:%d", fn, l->file, l->line);
		if (sb.err) {
			err = sb.err;
			mt_strbuf_release(&sb);
			break;
		}
		v[n] = (struct place){ mt_strbuf_detach(&sb, NULL), l->own_bytes, l->own_count };
		if (!v[n++].text)
			err = -ENOMEM;
	}
	free(locs);
	if (err) {
		while (n)
			free(v[--n].text); /* free(NULL) for the last one, if it failed */
		free(v);
		return err;
	}
	/* merge those that read the same */
	qsort(v, n, sizeof(*v), cmp_text);
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		if (m && !strcmp(v[m - 1].text, v[i].text)) {
			v[m - 1].bytes += v[i].bytes;
			v[m - 1].count += v[i].count;
			free(v[i].text);
		} else {
			v[m++] = v[i];
		}
	}
	*out = v;
	return (ssize_t)m;
}

static void json_top(struct mt_json *j, const char *key, const char *what, struct place *v,
		     size_t n, unsigned top, int by_count)
{
	size_t rows = top && top < n ? top : n;

	qsort(v, n, sizeof(*v), by_count ? cmp_count : cmp_bytes);
	mt_json_begin_array(j, key);
	for (size_t i = 0; i < rows; i++) {
		mt_json_begin_object(j, NULL);
		mt_json_str(j, "location", v[i].text);
		mt_json_u64(j, what, by_count ? v[i].count : v[i].bytes);
		mt_json_end(j);
	}
	mt_json_end(j);
}

/* ------------------------------------------------------------------------
 * Metadata
 * ---------------------------------------------------------------------- */
void mt__report_cmdline(struct mt_strbuf *sb, const struct mt_bytes *c)
{
	/* each argument ended by a NUL (the last one may not be) */
	uint32_t len = c->len;

	if (len && !c->p[len - 1])
		len--;
	for (uint32_t i = 0; i < len; i++)
		mt_strbuf_addch(sb, c->p[i] ? c->p[i] : ' ');
}

/* A time in milliseconds since the epoch as memray's metadata shows one:
 * str() of a local datetime with its offset,
 * "2024-05-01 12:00:00.250000+02:00" (no fraction for a whole second). */
static void json_time(struct mt_json *j, const char *key, uint64_t ms)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;
	char buf[96], day[64];

	if (!localtime_r(&t, &tm)) {
		mt_json_null(j, key);
		return;
	}
	strftime(day, sizeof(day), "%Y-%m-%d %H:%M:%S", &tm);
	long off = tm.tm_gmtoff, a = off < 0 ? -off : off;
	char frac[16] = "";
	if (ms % 1000)
		snprintf(frac, sizeof(frac), ".%06u", (unsigned)(ms % 1000) * 1000);
	int n = snprintf(buf, sizeof(buf), "%s%s%c%02ld:%02ld", day, frac, off < 0 ? '-' : '+',
			 a / 3600, a / 60 % 60);
	if (a % 60 && n > 0 && (size_t)n < sizeof(buf))
		snprintf(buf + n, sizeof(buf) - (size_t)n, ":%02ld", a % 60);
	mt_json_str(j, key, buf);
}

static void json_metadata(struct mt_json *j, const struct mt_snapshot *s)
{
	const struct mt_header *h = &s->header;
	uint64_t start_ms = h->start_ns / 1000000;
	struct mt_strbuf cmd = MT_STRBUF_INIT;

	mt__report_cmdline(&cmd, &h->cmdline);
	mt_json_begin_object(j, "metadata");
	json_time(j, "start_time", start_ms);
	json_time(j, "end_time", start_ms + s->end_time_us / 1000);
	mt_json_u64(j, "total_allocations", s->n_events); /* memray's: records, frees too */
	mt_json_u64(j, "total_frames", mt_snapshot_max_stack(s));
	mt_json_u64(j, "peak_memory", s->peak_heap);
	mt_json_strn(j, "command_line", cmd.buf, cmd.len);
	mt_json_u64(j, "pid", h->pid);
	mt_json_u64(j, "main_thread_id", h->main_tid);
	mt_json_str(j, "python_allocator", s->python_allocator[0] ? s->python_allocator : "unknown");
	mt_json_bool(j, "has_native_traces", !!(h->flags & MT_HDR_NATIVE));
	mt_json_bool(j, "trace_python_allocators", !!(h->flags & MT_HDR_PYALLOC));
	mt_json_u64(j, "file_format", 0); /* FileFormat.ALL_ALLOCATIONS */
	mt_json_end(j);
	mt_strbuf_release(&cmd);
}

int mt_report_stats_memray(FILE *out, const struct mt_snapshot *s, const struct mt_report_opts *o)
{
	const struct mt_sizes *z = mt_snapshot_sizes(s);
	struct mt_strbuf sb = MT_STRBUF_INIT;
	struct place *places = NULL;
	struct mt_json j;

	if (!z)
		return -EINVAL;
	ssize_t np = places_of(s, &places);
	if (np < 0)
		return (int)np;
	mt_json_init(&j, &sb, 1);
	mt_json_begin_object(&j, NULL);
	mt_json_u64(&j, "total_num_allocations", s->n_allocs);
	mt_json_u64(&j, "total_bytes_allocated", s->bytes_allocated);
	json_histogram(&j, z);
	json_allocators(&j, s);
	json_top(&j, "top_allocations_by_size", "size", places, (size_t)np, o->top_n, 0);
	json_top(&j, "top_allocations_by_count", "count", places, (size_t)np, o->top_n, 1);
	mt_json_begin_array(&j, "top_modules_by_allocation_size");
	mt_json_end(&j);
	mt_json_begin_array(&j, "top_modules_by_allocation_count");
	mt_json_end(&j);
	json_metadata(&j, s);
	mt_json_end(&j);
	mt_strbuf_addch(&sb, '\n');
	for (ssize_t i = 0; i < np; i++)
		free(places[i].text);
	free(places);
	return mt_strbuf_write_release(&sb, out);
}
