/* SPDX-License-Identifier: MIT */
/*
 * memtrace transform: a view's sites written for other tools, in the
 * layouts of memray's transform command. csv: one row per record as
 * FileReader groups them (groups.h: call path and thread, the allocator
 * its first site's) with memory in the view, its stack as memray joins
 * one ("function;file;line" frames, innermost first, between '|'), quoted
 * as Python's csv module quotes; gprof2dot: the JSON that gprof2dot's
 * "-f json" reads, a list of functions and one event per site with a
 * call chain (innermost first) into it and its bytes as the cost. Frames
 * are every frame of the stack, none hidden, Python ones named by their
 * code object's name (co_name) as memray names them; a native capture's
 * stacks are hybrid, native frames under the Python one that called them.
 * speedscope: speedscope's file format, two sampled profiles (bytes and
 * allocations) of the sites' stacks (root first), sites whose frames
 * read the same merged into one sample. In both, a site without frames (a
 * thread started from C, say) is under one frame named as the tree names
 * it, "<no Python frames>", so that the bytes are those of the other
 * reports (memray's transform leaves such allocations out).
 */
#include "mt-config.h" /* MT_VERSION */
#include "reader/groups.h"
#include "reader/report.h"
#include "util/json.h"
#include "util/slots.h"
#include "util/strbuf.h"

#include <ctype.h>  /* toupper */
#include <errno.h>  /* ENOMEM, EIO */
#include <stdlib.h> /* malloc */
#include <string.h> /* strrchr */

/* The frames of one stack, innermost first, in a buffer that grows. */
struct frames {
	struct mt_frame *v;
	size_t cap;
};

/* Stack @id into @f; returns its depth, or -ENOMEM. */
static ssize_t stack_of(const struct mt_snapshot *s, uint32_t id, struct frames *f)
{
	size_t n = mt_snapshot_stack(s, id, f->v, f->cap);

	if (n > f->cap) {
		struct mt_frame *v = realloc(f->v, n * sizeof(*v));
		if (!v)
			return -ENOMEM;
		f->v = v;
		f->cap = n;
		n = mt_snapshot_stack(s, id, f->v, f->cap);
	}
	return (ssize_t)n;
}

/* Stack @id into @f as a call chain: a stack without frames is the one
 * frame that says so. Its depth (1 at least), or -ENOMEM. */
static ssize_t chain_of(const struct mt_snapshot *s, uint32_t id, struct frames *f)
{
	static const struct mt_frame none = { "<no Python frames>", "", 0, 1 };
	ssize_t n = stack_of(s, id, f);

	if (n)
		return n;
	if (!f->cap) {
		if (!(f->v = malloc(sizeof(*f->v))))
			return -ENOMEM;
		f->cap = 1;
	}
	f->v[0] = none;
	return 1;
}

/* A frame's function as memray names it: co_name for a Python frame (the
 * last part of its qualified name), a native one's as it is. */
static const char *frame_name(const struct mt_frame *f)
{
	const char *dot = f->native ? NULL : strrchr(f->function, '.');

	return dot ? dot + 1 : f->function;
}

/* The threads by index (NULL where none was seen); malloc'ed. */
static const struct mt_thread_info **thread_index(const struct mt_snapshot *s, size_t *n)
{
	size_t max = 0;

	for (size_t i = 0; i < s->n_threads; i++)
		if (s->threads[i].index + 1 > max)
			max = s->threads[i].index + 1;
	const struct mt_thread_info **v = calloc(max ? max : 1, sizeof(*v));
	if (!v)
		return NULL;
	for (size_t i = 0; i < s->n_threads; i++)
		v[s->threads[i].index] = &s->threads[i];
	*n = max;
	return v;
}

/* ------------------------------------------------------------------------
 * csv
 * ---------------------------------------------------------------------- */
/* One field as Python's csv.writer writes it (QUOTE_MINIMAL): quoted when
 * it holds a comma, a quote, CR or LF, with its quotes doubled. */
static void csv_field(struct mt_strbuf *sb, const char *v, size_t len)
{
	int quote = 0;

	for (size_t i = 0; i < len && !quote; i++)
		quote = v[i] == ',' || v[i] == '"' || v[i] == '\r' || v[i] == '\n';
	if (!quote) {
		mt_strbuf_add(sb, v, len);
		return;
	}
	mt_strbuf_addch(sb, '"');
	for (size_t i = 0; i < len; i++) {
		if (v[i] == '"')
			mt_strbuf_addch(sb, '"');
		mt_strbuf_addch(sb, v[i]);
	}
	mt_strbuf_addch(sb, '"');
}

/* "MALLOC", "PYMALLOC_FREE": memray's AllocatorType names */
static void allocator_name(char *buf, size_t len, unsigned kind)
{
	const char *name = mt_allocator_name(kind);
	size_t i = 0;

	if (!name) {
		snprintf(buf, len, "%u", kind);
		return;
	}
	for (; name[i] && i + 1 < len; i++)
		buf[i] = (char)toupper((unsigned char)name[i]);
	buf[i] = 0;
}

int mt_report_transform_csv(FILE *out, const struct mt_snapshot *s, const struct mt_report_opts *o)
{
	struct mt_strbuf sb = MT_STRBUF_INIT, field = MT_STRBUF_INIT;
	struct frames fr = { NULL, 0 };
	const struct mt_site *sites;
	size_t nthreads = 0;
	const struct mt_thread_info **threads = thread_index(s, &nthreads);
	(void)mt_snapshot_sites(s, &sites);
	/* memray's rows are its FileReader's records (groups.h) */
	struct mt_groups g = { NULL, 0 };
	int err = threads ? mt_groups_build(&g, s, o->view, 0) : -ENOMEM;

	if (err) {
		free(threads);
		return err;
	}
	mt_strbuf_addstr(&sb, "allocator,num_allocations,size,tid,thread_name,stack_trace\r\n");
	for (uint32_t r = 0; r < g.n && !err; r++) {
		const struct mt_site *site = &sites[g.v[r].first];
		const struct mt_thread_info *t = site->thread < nthreads ? threads[site->thread] : NULL;
		uint64_t bytes = g.v[r].bytes, count = g.v[r].count, tid = t ? t->tid : 0;
		char alloc[32];

		if (!count)
			continue;
		ssize_t depth = stack_of(s, site->stack, &fr);
		if (depth < 0) {
			err = (int)depth;
			break;
		}
		allocator_name(alloc, sizeof(alloc), site->allocator);
		mt_strbuf_addf(&sb, "%s,%llu,%llu,%llu,", alloc, (unsigned long long)count,
			       (unsigned long long)bytes, (unsigned long long)tid);
		mt_strbuf_reset(&field);
		/* memray's format_thread_name(): "0x<tid> (name)", or "0x<tid>" */
		mt_strbuf_addf(&field, "0x%llx", (unsigned long long)tid);
		if (t && t->name[0])
			mt_strbuf_addf(&field, " (%s)", t->name);
		csv_field(&sb, field.buf, field.len);
		mt_strbuf_addch(&sb, ',');
		mt_strbuf_reset(&field);
		for (ssize_t k = 0; k < depth; k++)
			mt_strbuf_addf(&field, "%s%s;%s;%d", k ? "|" : "", frame_name(&fr.v[k]),
				       fr.v[k].file ? fr.v[k].file : "", fr.v[k].line);
		csv_field(&sb, field.buf, field.len);
		mt_strbuf_addstr(&sb, "\r\n");
		if (sb.err)
			err = sb.err;
		else if (sb.len >= 1 << 16) {
			if (fwrite(sb.buf, 1, sb.len, out) != sb.len)
				err = -EIO;
			mt_strbuf_reset(&sb);
		}
	}
	if (field.err && !err)
		err = field.err;
	free(fr.v);
	mt_groups_release(&g);
	free(threads);
	mt_strbuf_release(&field);
	if (err) {
		mt_strbuf_release(&sb);
		return err;
	}
	err = mt_strbuf_write_release(&sb, out);
	return err < 0 ? err : ferror(out) ? -EIO : 0;
}

/* ------------------------------------------------------------------------
 * gprof2dot
 * ---------------------------------------------------------------------- */
/* (function, file, line) -> index in a list of functions or frames, by
 * their text; gprof2dot's functions give line 0 to all */
struct fn_table {
	struct fn { const char *name, *file; int line; } *v;
	size_t n, cap;
	uint32_t *slots; /* index + 1; 0 = empty */
	size_t nslots;
};

static uint64_t fn_hash(const char *name, const char *file, int line)
{
	uint64_t h = (1469598103934665603ull ^ (unsigned)line) * 1099511628211ull;

	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 1099511628211ull;
	h = (h ^ 0xff) * 1099511628211ull;
	for (const unsigned char *p = (const unsigned char *)file; *p; p++)
		h = (h ^ *p) * 1099511628211ull;
	return h;
}

static uint64_t fn_hash_at(const void *ctx, size_t i)
{
	const struct fn *f = &((const struct fn_table *)ctx)->v[i];
	return fn_hash(f->name, f->file, f->line);
}

static int fn_grow(struct fn_table *t)
{
	return mt_slots_grow(&t->slots, &t->nslots, 256, 0, t->n, fn_hash_at, t);
}

/* The index of (@name, @file, @line), added if new; -ENOMEM. */
static int64_t fn_get(struct fn_table *t, const char *name, const char *file, int line)
{
	if ((t->n + 1) * 2 > t->nslots && fn_grow(t) < 0)
		return -ENOMEM;
	size_t k = fn_hash(name, file, line) & (t->nslots - 1);
	for (; t->slots[k]; k = (k + 1) & (t->nslots - 1)) {
		const struct fn *f = &t->v[t->slots[k] - 1];
		if (f->line == line && !strcmp(f->name, name) && !strcmp(f->file, file))
			return t->slots[k] - 1;
	}
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 256;
		struct fn *v = realloc(t->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		t->v = v;
		t->cap = cap;
	}
	t->v[t->n] = (struct fn){ name, file, line };
	t->slots[k] = (uint32_t)++t->n;
	return (int64_t)t->n - 1;
}

int mt_report_transform_gprof2dot(FILE *out, const struct mt_snapshot *s,
				  const struct mt_report_opts *o)
{
	struct mt_strbuf sb = MT_STRBUF_INIT;
	struct fn_table fns = { 0 };
	struct frames fr = { NULL, 0 };
	const struct mt_site *sites;
	struct mt_groups g; /* memray's records (groups.h) */
	struct mt_json j;
	int err;

	(void)mt_snapshot_sites(s, &sites);
	if ((err = mt_groups_build(&g, s, o->view, 0)) < 0)
		return err;
	mt_json_init(&j, &sb, 0);
	mt_json_begin_object(&j, NULL);
	mt_json_u64(&j, "version", 0);
	mt_json_begin_array(&j, "costs");
	mt_json_begin_object(&j, NULL);
	mt_json_str(&j, "description", "Memory");
	mt_json_str(&j, "unit", "bytes");
	mt_json_end(&j);
	mt_json_end(&j);
	mt_json_begin_array(&j, "events");
	for (uint32_t r = 0; r < g.n && !err; r++) {
		uint64_t bytes = g.v[r].bytes, count = g.v[r].count;

		if (!count)
			continue;
		ssize_t depth = chain_of(s, sites[g.v[r].first].stack, &fr);
		if (depth < 0) {
			err = (int)depth;
			break;
		}
		mt_json_begin_object(&j, NULL);
		mt_json_begin_array(&j, "callchain");
		for (ssize_t k = 0; k < depth; k++) {
			int64_t idx = fn_get(&fns, frame_name(&fr.v[k]),
					     fr.v[k].file ? fr.v[k].file : "", 0);
			if (idx < 0) {
				err = (int)idx;
				break;
			}
			mt_json_u64(&j, NULL, (uint64_t)idx);
		}
		mt_json_end(&j);
		mt_json_begin_array(&j, "cost");
		mt_json_u64(&j, NULL, bytes);
		mt_json_end(&j);
		mt_json_end(&j);
	}
	mt_json_end(&j);
	mt_json_begin_array(&j, "functions");
	for (size_t i = 0; i < fns.n; i++) {
		mt_json_begin_object(&j, NULL);
		mt_json_str(&j, "name", fns.v[i].name);
		mt_json_str(&j, "module", fns.v[i].file);
		mt_json_end(&j);
	}
	mt_json_end(&j);
	mt_json_end(&j);
	mt_strbuf_addch(&sb, '\n');
	free(fr.v);
	mt_groups_release(&g);
	free(fns.v);
	free(fns.slots);
	if (err) {
		mt_strbuf_release(&sb);
		return err;
	}
	return mt_strbuf_write_release(&sb, out);
}

/* ------------------------------------------------------------------------
 * speedscope
 * ---------------------------------------------------------------------- */
/* Samples: sequences of frame indexes (root first), each with the bytes
 * and allocations of the sites whose stacks read the same, in order of
 * first use. */
struct samples {
	uint32_t *idx; /* every sample's frames, one after the other */
	size_t nidx, capidx;
	struct sample {
		size_t off, len;
		uint64_t bytes, count, hash;
	} *v;
	size_t n, cap;
	uint32_t *slots; /* index + 1; 0 = empty */
	size_t nslots;
};

static uint64_t seq_hash(const uint32_t *v, size_t n)
{
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ v[i]) * 1099511628211ull;
	return h;
}

static uint64_t sample_hash_at(const void *ctx, size_t i)
{
	return ((const struct samples *)ctx)->v[i].hash;
}

static int samples_grow(struct samples *t)
{
	return mt_slots_grow(&t->slots, &t->nslots, 256, 0, t->n, sample_hash_at, t);
}

/* Add @bytes and @count to the sample of the @len frames at the end of
 * t->idx (taken back if the sample exists). Returns 0 or -ENOMEM. */
static int samples_add(struct samples *t, size_t len, uint64_t bytes, uint64_t count)
{
	const uint32_t *seq = t->idx + t->nidx - len;
	uint64_t h = seq_hash(seq, len);

	if ((t->n + 1) * 2 > t->nslots && samples_grow(t) < 0)
		return -ENOMEM;
	size_t k = h & (t->nslots - 1);
	for (; t->slots[k]; k = (k + 1) & (t->nslots - 1)) {
		struct sample *x = &t->v[t->slots[k] - 1];
		if (x->hash == h && x->len == len && !memcmp(t->idx + x->off, seq, len * sizeof(*seq))) {
			x->bytes += bytes;
			x->count += count;
			t->nidx -= len;
			return 0;
		}
	}
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 256;
		struct sample *v = realloc(t->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		t->v = v;
		t->cap = cap;
	}
	t->v[t->n] = (struct sample){ t->nidx - len, len, bytes, count, h };
	t->slots[k] = (uint32_t)++t->n;
	return 0;
}

static int samples_room(struct samples *t, size_t more)
{
	if (t->nidx + more <= t->capidx)
		return 0;
	size_t cap = t->capidx ? t->capidx : 1024;
	while (cap < t->nidx + more)
		cap *= 2;
	uint32_t *v = realloc(t->idx, cap * sizeof(*v));
	if (!v)
		return -ENOMEM;
	t->idx = v;
	t->capidx = cap;
	return 0;
}

/* One sampled profile: the samples whose weight (bytes, or allocations
 * with @by_count) is above 0, and their weights. */
static void speedscope_profile(struct mt_json *j, const struct samples *t, const char *name,
			       const char *unit, int by_count)
{
	uint64_t end = 0;

	for (size_t i = 0; i < t->n; i++)
		end += by_count ? t->v[i].count : t->v[i].bytes;
	mt_json_begin_object(j, NULL);
	mt_json_str(j, "type", "sampled");
	mt_json_str(j, "name", name);
	mt_json_str(j, "unit", unit);
	mt_json_u64(j, "startValue", 0);
	mt_json_u64(j, "endValue", end);
	mt_json_begin_array(j, "samples");
	for (size_t i = 0; i < t->n; i++) {
		if (!(by_count ? t->v[i].count : t->v[i].bytes))
			continue;
		mt_json_begin_array(j, NULL);
		for (size_t k = 0; k < t->v[i].len; k++)
			mt_json_u64(j, NULL, t->idx[t->v[i].off + k]);
		mt_json_end(j);
	}
	mt_json_end(j);
	mt_json_begin_array(j, "weights");
	for (size_t i = 0; i < t->n; i++)
		if (by_count ? t->v[i].count : t->v[i].bytes)
			mt_json_u64(j, NULL, by_count ? t->v[i].count : t->v[i].bytes);
	mt_json_end(j);
	mt_json_end(j);
}

int mt_report_transform_speedscope(FILE *out, const struct mt_snapshot *s,
				   const struct mt_report_opts *o)
{
	struct mt_strbuf sb = MT_STRBUF_INIT, name = MT_STRBUF_INIT;
	struct fn_table frames = { 0 };
	struct samples t = { 0 };
	struct frames fr = { NULL, 0 };
	const struct mt_site *sites;
	struct mt_groups g; /* memray's records (groups.h) */
	struct mt_json j;
	int err;

	(void)mt_snapshot_sites(s, &sites);
	if ((err = mt_groups_build(&g, s, o->view, 0)) < 0)
		return err;
	for (uint32_t r = 0; r < g.n && !err; r++) {
		uint64_t bytes = g.v[r].bytes, count = g.v[r].count;

		if (!count)
			continue;
		ssize_t depth = chain_of(s, sites[g.v[r].first].stack, &fr);
		if (depth < 0) {
			err = (int)depth;
			break;
		}
		if ((err = samples_room(&t, (size_t)depth)) < 0)
			break;
		for (ssize_t k = depth - 1; k >= 0 && !err; k--) {
			const struct mt_frame *f = &fr.v[k];
			int64_t idx = fn_get(&frames, frame_name(f), f->file ? f->file : "",
					     f->line);
			if (idx < 0)
				err = (int)idx;
			else
				t.idx[t.nidx++] = (uint32_t)idx;
		}
		if (!err)
			err = samples_add(&t, (size_t)depth, bytes, count);
	}
	mt_json_init(&j, &sb, 0);
	mt_json_begin_object(&j, NULL);
	mt_json_str(&j, "$schema", "https://www.speedscope.app/file-format-schema.json");
	mt_json_begin_object(&j, "shared");
	mt_json_begin_array(&j, "frames");
	for (size_t i = 0; i < frames.n; i++) {
		mt_json_begin_object(&j, NULL);
		mt_json_str(&j, "name", frames.v[i].name);
		if (frames.v[i].file[0])
			mt_json_str(&j, "file", frames.v[i].file);
		if (frames.v[i].line > 0)
			mt_json_i64(&j, "line", frames.v[i].line);
		mt_json_end(&j);
	}
	mt_json_end(&j);
	mt_json_end(&j);
	mt_json_begin_array(&j, "profiles");
	speedscope_profile(&j, &t, "Memory", "bytes", 0);
	speedscope_profile(&j, &t, "Allocations", "none", 1);
	mt_json_end(&j);
	mt__report_cmdline(&name, &s->header.cmdline);
	mt_json_strn(&j, "name", name.buf, name.len);
	mt_json_u64(&j, "activeProfileIndex", 0);
	mt_json_str(&j, "exporter", "memtrace@" MT_VERSION);
	mt_json_end(&j);
	mt_strbuf_addch(&sb, '\n');
	if (name.err && !err)
		err = name.err;
	mt_strbuf_release(&name);
	free(fr.v);
	mt_groups_release(&g);
	free(frames.v);
	free(frames.slots);
	free(t.idx);
	free(t.v);
	free(t.slots);
	if (err) {
		mt_strbuf_release(&sb);
		return err;
	}
	return mt_strbuf_write_release(&sb, out);
}
