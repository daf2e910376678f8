/* SPDX-License-Identifier: MIT */
/*
 * The reader's interface for the Python package (ctypes): a snapshot for
 * metadata, stacks and the grouped records (its sites in a view, so that
 * the records follow the reports' rules), plus a pass over the record
 * stream for every event, which the snapshot does not keep. Never prints
 * or exits.
 */
#include "reader/pyapi.h"
#include "reader/groups.h"
#include "reader/hwmtime.h"
#include "reader/temporal.h"
#include "format/error.h"
#include "reader/capture.h"
#include "reader/follow.h"
#include "reader/report.h"
#include "reader/snapshot.h"
#include "reader/stackkeys.h"

#include <errno.h>  /* ENOMEM */
#include <stdio.h>  /* fopencookie, snprintf */
#include <stdlib.h> /* malloc */
#include <string.h> /* memset */

_Static_assert(sizeof(struct mt_py_sample) == sizeof(struct mt_sample),
	       "mt_py_sample mirrors mt_sample");

struct mt_py_reader {
	struct mt_capture *cap;     /* NULL for a followed capture */
	struct mt_snapshot snap;    /* a file's */
	struct mt_follow *follow;   /* or a followed capture's */
	const struct mt_snapshot *s; /* the one to query: &snap or follow's */
	char *warnings;
	size_t warnings_len;
	uint64_t *tid;      /* by thread index */
	const char **name;  /* by thread index */
	uint32_t n_index;
	struct mt_stackkeys keys; /* mt_py_path_key()'s */
};

int mt_py_abi(void)
{
	return MT_PY_ABI;
}

static void collect_warning(void *ctx, const char *msg)
{
	struct mt_py_reader *r = ctx;
	size_t len = strlen(msg);
	char *nv = realloc(r->warnings, r->warnings_len + len + 2);

	if (!nv)
		return; /* a warning lost to a failed allocation is not worth failing for */
	memcpy(nv + r->warnings_len, msg, len);
	r->warnings_len += len;
	nv[r->warnings_len++] = '\n';
	nv[r->warnings_len] = '\0';
	r->warnings = nv;
}

/* The kernel tid and name of each thread index of the snapshot. */
static int index_threads(struct mt_py_reader *r)
{
	const struct mt_snapshot *s = r->s;
	uint32_t n = 0;

	for (size_t i = 0; i < s->n_threads; i++)
		if (s->threads[i].index + 1 > n)
			n = s->threads[i].index + 1;
	free(r->tid);
	free(r->name);
	r->n_index = 0;
	r->tid = calloc(n ? n : 1, sizeof(*r->tid));
	r->name = calloc(n ? n : 1, sizeof(*r->name));
	if (!r->tid || !r->name)
		return -ENOMEM;
	r->n_index = n;
	for (size_t i = 0; i < s->n_threads; i++) {
		const struct mt_thread_info *t = &s->threads[i];
		r->tid[t->index] = t->tid;
		r->name[t->index] = t->name;
	}
	return 0;
}

int mt_py_open(const char *path, struct mt_py_reader **out, char *err, size_t errlen)
{
	struct mt_py_reader *r = calloc(1, sizeof(*r));
	int e;

	if (!r) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	/* a copy: the reader outlives the file's contents (a new capture may
	 * overwrite it), and a mapped file that shrinks kills with SIGBUS */
	e = mt_capture_open_flags(path, MT_CAPTURE_COPY, &r->cap);
	if (e < 0) {
		mt_report_describe_open_error(err, errlen, path, e);
		free(r);
		return e;
	}
	mt_capture_set_warn(r->cap, collect_warning, r);
	e = mt_snapshot_build(&r->snap, r->cap);
	if (e < 0) {
		snprintf(err, errlen, "cannot read '%s': %s", path, mt_capture_error(r->cap, e));
		mt_capture_close(r->cap);
		free(r->warnings);
		free(r);
		return e;
	}
	/* damage is reported once, by the snapshot's pass */
	mt_capture_set_warn(r->cap, NULL, NULL);
	r->s = &r->snap;
	if (index_threads(r) < 0) {
		snprintf(err, errlen, "out of memory");
		mt_py_close(r);
		return -ENOMEM;
	}
	*out = r;
	return 0;
}

int mt_py_follow(const char *path, struct mt_py_reader **out)
{
	struct mt_py_reader *r = calloc(1, sizeof(*r));
	struct mt_snapshot_opts o = { .temp_threshold = 1 };

	if (!r || !(r->follow = mt_follow_new(path, &o))) {
		free(r);
		return -ENOMEM;
	}
	*out = r;
	return 0;
}

int mt_py_refresh(struct mt_py_reader *r, char *err, size_t errlen)
{
	int e;

	if (!r->follow) {
		snprintf(err, errlen, "not a followed capture");
		return -EINVAL;
	}
	/* what was derived from the last view may not hold for this one;
	 * after a failure nothing is left to query (the follow dropped it) */
	mt_stackkeys_release(&r->keys);
	memset(&r->keys, 0, sizeof(r->keys));
	r->s = NULL;
	r->n_index = 0;
	e = mt_follow_refresh(r->follow, err, errlen);
	if (e < 0)
		return e;
	r->s = mt_follow_snapshot(r->follow);
	if (!r->s || index_threads(r) < 0) {
		r->s = NULL;
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

void mt_py_close(struct mt_py_reader *r)
{
	if (!r)
		return;
	mt_stackkeys_release(&r->keys);
	if (r->follow)
		mt_follow_free(r->follow);
	else
		mt_snapshot_release(&r->snap);
	mt_capture_close(r->cap);
	free(r->warnings);
	free(r->tid);
	free(r->name);
	free(r);
}

void mt_py_meta(const struct mt_py_reader *r, struct mt_py_meta *m)
{
	const struct mt_snapshot *s = r->s;

	memset(m, 0, sizeof(*m));
	m->abi = MT_PY_ABI;
	if (!s)
		return;
	m->pid = s->header.pid;
	m->python_hex = s->header.python_hex;
	m->flags = s->header.flags;
	m->start_ns = s->header.start_ns;
	m->end_time_us = s->end_time_us;
	m->interval_ms = s->header.interval_ms;
	m->main_tid = s->header.main_tid;
	m->peak_heap = s->peak_heap;
	m->peak_event = s->peak_event;
	m->n_events = s->n_events;
	m->n_allocs = s->n_allocs;
	m->n_frees = s->n_frees;
	m->heap_end = s->heap_end;
	m->leak_count = s->leak_count;
	m->n_dropped = s->n_dropped;
	m->have_trailer = (uint64_t)s->have_trailer;
	m->truncated = (uint64_t)s->status.truncated || s->status.stopped;
	m->peak_rss = s->peak_rss;
	m->n_samples = s->n_samples;
	m->n_threads = s->n_threads;
	m->n_diags = s->n_diags;
	m->cmdline_len = s->header.cmdline.len;
	m->n_frames = mt_snapshot_max_stack(s);
	m->cmdline = (const char *)s->header.cmdline.p;
}

const char *mt_py_warnings(const struct mt_py_reader *r)
{
	return r->warnings ? r->warnings : "";
}

const char *mt_py_python_allocator(const struct mt_py_reader *r)
{
	return r->s && r->s->python_allocator[0] ? r->s->python_allocator : "unknown";
}

const char *mt_py_diag(const struct mt_py_reader *r, size_t i, uint32_t *code)
{
	if (!r->s || i >= r->s->n_diags)
		return NULL;
	*code = r->s->diags[i].code;
	return r->s->diags[i].msg;
}

void mt_py_free(void *p)
{
	free(p);
}

size_t mt_py_native_stack(const struct mt_py_reader *r, uint32_t id, struct mt_py_frame *out,
			  size_t max, uint32_t *leaf, uint32_t *gen)
{
	if (!r->s) {
		*leaf = *gen = 0;
		return 0;
	}
	struct mt_frame *f = max ? malloc(max * sizeof(*f)) : NULL;
	size_t depth = mt_snapshot_native_stack(r->s, id, f, f ? max : 0, leaf, gen);
	for (size_t i = 0; f && i < depth && i < max; i++)
		out[i] = (struct mt_py_frame){ f[i].function, f[i].file, f[i].line, 1 };
	free(f);
	return depth;
}

size_t mt_py_hybrid_stack(const struct mt_py_reader *r, uint32_t id, struct mt_py_frame *out,
			  size_t max)
{
	if (!r->s)
		return 0;
	struct mt_frame *f = max ? malloc(max * sizeof(*f)) : NULL;
	size_t depth = mt_snapshot_merged_stack(r->s, id, f, f ? max : 0);
	for (size_t i = 0; f && i < depth && i < max; i++)
		out[i] = (struct mt_py_frame){ f[i].function, f[i].file, f[i].line, f[i].native };
	free(f);
	return depth;
}

uint64_t mt_py_path_key(struct mt_py_reader *r, uint32_t id)
{
	int oom = 0;
	return r->s ? mt_groups_path_key(r->s, &r->keys, id, &oom) : id;
}

size_t mt_py_stack(const struct mt_py_reader *r, uint32_t id, struct mt_py_frame *out, size_t max)
{
	struct mt_frame f[64];
	if (!r->s)
		return 0;
	size_t depth = mt_snapshot_stack(r->s, id, f, 64);

	if (depth > 64 && max > 64) {
		struct mt_frame *all = malloc(depth * sizeof(*all));
		if (!all)
			max = 64; /* the innermost frames are the ones that matter */
		else {
			mt_snapshot_stack(r->s, id, all, depth);
			for (size_t i = 0; i < depth && i < max; i++)
				out[i] = (struct mt_py_frame){ all[i].function, all[i].file, all[i].line,
							all[i].native };
			free(all);
			return depth;
		}
	}
	for (size_t i = 0; i < depth && i < max && i < 64; i++)
		out[i] = (struct mt_py_frame){ f[i].function, f[i].file, f[i].line, f[i].native };
	return depth;
}

int mt_py_thread(const struct mt_py_reader *r, uint32_t index, uint64_t *tid, const char **name)
{
	if (index >= r->n_index || !r->name[index])
		return -ENOENT;
	*tid = r->tid[index];
	*name = r->name[index];
	return 0;
}

const struct mt_py_sample *mt_py_samples(const struct mt_py_reader *r, size_t *n)
{
	*n = r->s ? r->s->n_samples : 0;
	return r->s ? (const struct mt_py_sample *)r->s->samples : NULL;
}

static uint64_t thread_tid(const struct mt_py_reader *r, uint32_t index)
{
	return index < r->n_index ? r->tid[index] : 0;
}

/* ------------------------------------------------------------------------
 * A growable record array.
 * ---------------------------------------------------------------------- */
struct recs {
	struct mt_py_record *v;
	size_t n, cap;
};

static struct mt_py_record *recs_push(struct recs *a)
{
	if (a->n == a->cap) {
		size_t n = a->cap ? a->cap * 2 : 256;
		struct mt_py_record *nv = realloc(a->v, n * sizeof(*nv));
		if (!nv)
			return NULL;
		a->v = nv;
		a->cap = n;
	}
	memset(&a->v[a->n], 0, sizeof(a->v[0]));
	return &a->v[a->n++];
}

/* ------------------------------------------------------------------------
 * Every event, a chunk at a time.
 * ---------------------------------------------------------------------- */
struct mt_py_events {
	struct mt_capture *cap; /* over the reader's bytes, with its own pass */
	const struct mt_py_reader *r; /* during mt_py_events_next() only */
	struct recs out;
};

static int ev_push(struct mt_py_events *e, const struct mt_record *rec, uint64_t addr,
		   uint64_t size, unsigned kind, uint32_t stack)
{
	struct mt_py_record *o = recs_push(&e->out);

	if (!o)
		return -ENOMEM;
	o->tid = thread_tid(e->r, rec->tidx);
	o->address = addr;
	o->size = size;
	o->n_allocations = 1;
	o->allocator = kind;
	o->stack = stack;
	o->thread = rec->tidx;
	return 0;
}

static int ev_alloc(void *ctx, const struct mt_record *rec)
{
	return ev_push(ctx, rec, rec->alloc.addr, rec->alloc.size, rec->alloc.kind, rec->alloc.stack);
}

static int ev_free(void *ctx, const struct mt_record *rec)
{
	return ev_push(ctx, rec, rec->free.addr, rec->free.size, rec->free.kind, 0);
}

int mt_py_events_open(const struct mt_py_reader *r, struct mt_py_events **out)
{
	struct mt_py_events *e = calloc(1, sizeof(*e));
	const void *bytes;
	size_t len;
	int rc;

	if (!r->cap) { /* a followed capture keeps no history */
		free(e);
		return -EINVAL;
	}
	if (!e)
		return -ENOMEM;
	bytes = mt_capture_bytes(r->cap, &len);
	rc = mt_capture_open_mem(bytes, len, &e->cap);
	if (rc < 0) {
		free(e);
		return rc;
	}
	/* damage was reported once, when the reader opened */
	mt_capture_rewind(e->cap);
	*out = e;
	return 0;
}

ssize_t mt_py_events_next(const struct mt_py_reader *r, struct mt_py_events *e,
			  const struct mt_py_record **out)
{
	struct mt_record_ops ops = { .alloc = ev_alloc, .free = ev_free };
	int rc;

	e->r = r;
	e->out.n = 0;
	while (mt_capture_step(e->cap, &ops, e, &rc) && e->out.n == 0)
		;
	e->r = NULL;
	if (rc < 0)
		return rc;
	*out = e->out.v;
	return (ssize_t)e->out.n;
}

void mt_py_events_close(struct mt_py_events *e)
{
	if (!e)
		return;
	mt_capture_close(e->cap);
	free(e->out.v);
	free(e);
}

/* ------------------------------------------------------------------------
 * Grouped records, as memray groups them (groups.h).
 * ---------------------------------------------------------------------- */
static ssize_t groups(const struct mt_py_reader *r, const struct mt_snapshot *s, enum mt_view view,
		      int merge, struct mt_py_record **out)
{
	const struct mt_site *sites;
	struct mt_groups g;
	int e = mt_groups_build(&g, s, view, merge);

	if (e < 0)
		return e;
	(void)mt_snapshot_sites(s, &sites);
	struct mt_py_record *v = malloc((g.n ? g.n : 1) * sizeof(*v));
	for (uint32_t k = 0; v && k < g.n; k++) {
		const struct mt_site *x = &sites[g.v[k].first];
		v[k] = (struct mt_py_record){ .tid = merge ? 0 : thread_tid(r, x->thread),
					      .address = x->first_addr,
					      .size = g.v[k].bytes,
					      .n_allocations = g.v[k].count,
					      .allocator = x->allocator,
					      .stack = x->stack,
					      .thread = merge ? UINT32_MAX : x->thread };
	}
	ssize_t n = v ? (ssize_t)g.n : -ENOMEM;
	mt_groups_release(&g);
	*out = v;
	return n;
}

ssize_t mt_py_view(struct mt_py_reader *r, int view, int merge_threads, uint64_t threshold,
		   struct mt_py_record **out)
{
	static const enum mt_view views[] = {
		[MT_PY_PEAK] = MT_VIEW_PEAK,
		[MT_PY_LEAKS] = MT_VIEW_LEAKS,
		[MT_PY_TEMPORARY] = MT_VIEW_TEMPORARY,
	};
	/* the snapshot's threshold counts the allocation itself: "fewer
	 * than N of its allocations in between" is at most N - 1 others */
	struct mt_snapshot_opts o = { .temp_threshold = threshold };
	struct mt_snapshot tmp;
	ssize_t ret;
	int e;

	if (view < MT_PY_PEAK || view > MT_PY_TEMPORARY || !r->s)
		return -EINVAL;
	if (view != MT_PY_TEMPORARY || o.temp_threshold == r->s->temp_threshold)
		return groups(r, r->s, views[view], merge_threads != 0, out);
	/* another threshold: one more pass */
	if (!r->cap)
		return -EINVAL;
	e = mt_snapshot_build_opts(&tmp, r->cap, &o);
	if (e < 0)
		return e;
	ret = groups(r, &tmp, views[view], merge_threads != 0, out);
	mt_snapshot_release(&tmp);
	return ret;
}

ssize_t mt_py_temporal(struct mt_py_reader *r, struct mt_py_interval **out)
{
	if (!r->cap)
		return -EINVAL;
	struct mt_snapshot_opts o = { .temp_threshold = r->s->temp_threshold, .temporal = 1,
				      .temporal_budget = SIZE_MAX, .temporal_by_site = 1 };
	const struct mt_site *sites;
	struct mt_interval *iv = NULL;
	struct mt_py_interval *v = NULL;
	struct mt_snapshot tmp;
	long n;
	int e = mt_snapshot_build_opts(&tmp, r->cap, &o);

	if (e < 0)
		return e;
	size_t n_sites = mt_snapshot_sites(&tmp, &sites);
	n = mt_temporal_intervals(mt_snapshot_temporal(&tmp), &iv);
	if (n < 0 || !(v = malloc(((size_t)n + 1) * sizeof(*v)))) {
		free(iv);
		mt_snapshot_release(&tmp);
		return n < 0 ? n : -ENOMEM;
	}
	size_t m = 0;
	for (long i = 0; i < n; i++) {
		const struct mt_interval *e2 = &iv[i];
		if (e2->key >= n_sites)
			continue;
		const struct mt_site *x = &sites[e2->key];
		v[m++] = (struct mt_py_interval){
			.rec = { .tid = thread_tid(r, x->thread),
				 .address = x->first_addr,
				 .size = e2->bytes,
				 .n_allocations = e2->count,
				 .allocator = x->allocator,
				 .stack = x->stack,
				 .thread = x->thread },
			.a = e2->a,
			.f = e2->f == MT_TEMPORAL_LIVE ? UINT64_MAX : e2->f,
		};
	}
	free(iv);
	mt_snapshot_release(&tmp);
	*out = v;
	return (ssize_t)m;
}

ssize_t mt_py_temporal_hwm(struct mt_py_reader *r, uint64_t stride, struct mt_py_hwm_run **out,
			   uint64_t **marks, size_t *n_marks)
{
	if (!r->cap)
		return -EINVAL;
	struct mt_snapshot_opts o = { .temp_threshold = r->s->temp_threshold,
				      .hwm_stride = stride ? stride : 1 };
	const struct mt_site *sites;
	struct mt_snapshot tmp;
	int e = mt_snapshot_build_opts(&tmp, r->cap, &o);

	if (e < 0)
		return e;
	const struct mt_hwmtime *h = mt_snapshot_hwmtime(&tmp);
	size_t n_sites = mt_snapshot_sites(&tmp, &sites), n = 0, k;
	for (size_t i = 0; i < n_sites; i++) {
		mt_hwmtime_runs(h, (uint32_t)i, &k);
		n += k;
	}
	struct mt_py_hwm_run *v = malloc((n + 1) * sizeof(*v));
	uint64_t *m = malloc(((size_t)h->k + 1) * sizeof(*m));
	if (!v || !m) {
		free(v);
		free(m);
		mt_snapshot_release(&tmp);
		return -ENOMEM;
	}
	n = 0;
	for (size_t i = 0; i < n_sites; i++) {
		const struct mt_site *x = &sites[i];
		const struct mt_hwm_run *runs = mt_hwmtime_runs(h, (uint32_t)i, &k);
		for (size_t j = 0; j < k; j++)
			v[n++] = (struct mt_py_hwm_run){
				.rec = { .tid = thread_tid(r, x->thread),
					 .address = x->first_addr,
					 .size = runs[j].bytes,
					 .n_allocations = runs[j].count,
					 .allocator = x->allocator,
					 .stack = x->stack,
					 .thread = x->thread },
				.as_of = runs[j].as_of,
			};
	}
	memcpy(m, h->final_heap, ((size_t)h->k + 1) * sizeof(*m));
	*n_marks = (size_t)h->k + 1;
	mt_snapshot_release(&tmp);
	*out = v;
	*marks = m;
	return (ssize_t)n;
}

/* ------------------------------------------------------------------------
 * The parse report through a caller's write function.
 * ---------------------------------------------------------------------- */
struct dump_cookie {
	ssize_t (*write)(void *ctx, const char *buf, size_t len);
	void *ctx;
};

static ssize_t cookie_write(void *c, const char *buf, size_t len)
{
	struct dump_cookie *d = c;
	size_t done = 0;

	while (done < len) {
		ssize_t n = d->write(d->ctx, buf + done, len - done);
		if (n <= 0) {
			errno = EIO;
			return done ? (ssize_t)done : -1;
		}
		done += (size_t)n;
	}
	return (ssize_t)len;
}

int mt_py_dump(const char *path, ssize_t (*write)(void *ctx, const char *buf, size_t len),
	       void *ctx, char *err, size_t errlen)
{
	struct dump_cookie d = { write, ctx };
	cookie_io_functions_t io = { .write = cookie_write };
	struct mt_capture *cap;
	FILE *f;
	int e = mt_capture_open(path, &cap);

	if (e < 0) {
		mt_report_describe_open_error(err, errlen, path, e);
		return e;
	}
	f = fopencookie(&d, "w", io);
	if (!f) {
		e = -errno;
		snprintf(err, errlen, "cannot write the records: %s", mt_strerror(e));
		mt_capture_close(cap);
		return e;
	}
	e = mt_report_parse(f, cap);
	if (fclose(f) != 0 && e == 0)
		e = -EIO;
	if (e < 0)
		snprintf(err, errlen, "cannot write the records of '%s': %s", path, mt_strerror(e));
	mt_capture_close(cap);
	return e;
}
