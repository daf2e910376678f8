/* SPDX-License-Identifier: MIT */
/*
 * The table report: the view's memory by allocating location (innermost
 * frame), allocator and, with split threads, thread (merged across threads
 * otherwise, as memray's table), as an HTML page (reader/html/table.html)
 * that sorts and filters the rows; each row with the text of its source
 * line (reader/srclines.h).
 */
#include "reader/frames.h"
#include "reader/report.h"
#include "reader/srclines.h"
#include "util/json.h"
#include "util/strbuf.h"

#include <errno.h>  /* ENOMEM */
#include <stdlib.h> /* qsort */
#include <string.h> /* memset */

/* rows in the page at most (about 40 bytes of page each, and their
 * names): the page shows them 100 at a time, every one reachable, as
 * memray's table has every location's */
#define MAX_ROWS 200000

static const char no_frames[] = "<no Python frames>";
static const char hidden_frames[] = MT_HIDDEN_FRAMES;

struct row {
	const char *function, *file;
	int line;
	uint32_t thread, allocator;
	uint64_t bytes, count;
};

static uint64_t row_hash(const struct row *r)
{
	uint64_t h = (uint64_t)(uintptr_t)r->function * 0x9E3779B97F4A7C15ull;
	h ^= (uint64_t)(uintptr_t)r->file * 0xC2B2AE3D27D4EB4Full;
	h ^= ((uint64_t)(unsigned)r->line << 24 ^ (uint64_t)r->thread << 4 ^ r->allocator) *
	     0x165667B19E3779F9ull;
	return h ^ (h >> 29);
}

static int row_same(const struct row *a, const struct row *b)
{
	return a->function == b->function && a->file == b->file && a->line == b->line &&
	       a->thread == b->thread && a->allocator == b->allocator;
}

static int row_cmp(const void *pa, const void *pb)
{
	const struct row *a = pa, *b = pb;
	if (a->bytes != b->bytes)
		return a->bytes < b->bytes ? 1 : -1;
	if (a->count != b->count)
		return a->count < b->count ? 1 : -1;
	int c = strcmp(a->function, b->function);
	if (!c)
		c = strcmp(a->file, b->file);
	if (!c)
		c = (a->line > b->line) - (a->line < b->line);
	if (!c)
		c = (a->thread > b->thread) - (a->thread < b->thread);
	return c ? c : (a->allocator > b->allocator) - (a->allocator < b->allocator);
}

/* The innermost frame of stack @id (> 0) that is shown (@hide: the
 * innermost one that reader/frames.h does not hide) into @r; 1 if @hide
 * left a frame out. */
static int innermost(const struct mt_snapshot *s, uint32_t id, int hide, struct row *r)
{
	uint32_t max = mt_snapshot_max_stack(s);
	struct mt_frame f;
	int skipped = 0;

	for (uint32_t depth = 0; id && depth <= max; depth++) {
		mt_snapshot_stack_frame(s, id, &f);
		if (!hide || mt_frame_kind(f.function, f.file, f.native) == MT_FRAME_SHOWN) {
			r->function = f.function;
			r->file = f.file;
			r->line = f.line;
			return skipped;
		}
		skipped = 1;
		id = mt_snapshot_stack_parent(s, id);
	}
	r->function = hidden_frames;
	r->file = "";
	r->line = 0;
	return 1;
}

/* Rows of @view, merged by location, allocator and (@split) thread,
 * biggest first, and whether a frame was hidden (@hide) into *@hidden.
 * Without @split a row's thread is 0. Returns the number of rows (*@out
 * malloc'ed) or -ENOMEM. */
static ssize_t table_rows(const struct mt_snapshot *s, enum mt_view view, int split, int hide,
			  int *hidden, struct row **out)
{
	const struct mt_site *sites;
	size_t n_sites = mt_snapshot_sites(s, &sites), n = 0, nslots = 64;
	struct row *v = malloc((n_sites ? n_sites : 1) * sizeof(*v));
	uint32_t *slots;

	while (nslots < n_sites * 2)
		nslots *= 2;
	slots = calloc(nslots, sizeof(*slots));
	if (!v || !slots) {
		free(v);
		free(slots);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n_sites; i++) {
		struct row r = { no_frames, "", 0, split ? sites[i].thread : 0, sites[i].allocator, 0, 0 };
		mt_usage_view(&sites[i].usage, view, &r.bytes, &r.count);
		if (!r.bytes && !r.count)
			continue;
		if (sites[i].stack && innermost(s, sites[i].stack, hide, &r))
			*hidden = 1;
		size_t j = row_hash(&r) & (nslots - 1);
		while (slots[j] && !row_same(&v[slots[j] - 1], &r))
			j = (j + 1) & (nslots - 1);
		if (slots[j]) {
			v[slots[j] - 1].bytes += r.bytes;
			v[slots[j] - 1].count += r.count;
		} else {
			v[n] = r;
			slots[j] = (uint32_t)++n;
		}
	}
	free(slots);
	if (n > 1)
		qsort(v, n, sizeof(*v), row_cmp);
	*out = v;
	return (ssize_t)n;
}

int mt_report_table(FILE *out, const struct mt_snapshot *s, const struct mt_report_opts *o)
{
	struct mt_strbuf sb = MT_STRBUF_INIT;
	struct mt__strtab strs = { 0 };
	struct mt_srclines src = { .confidential = o->confidential };
	struct row *rows;
	struct mt_json j;
	uint64_t total_bytes = 0, total_count = 0, dropped_bytes = 0;
	int64_t *idx = NULL;
	uint8_t *used = NULL;
	int err = -ENOMEM, hidden = 0;
	ssize_t n = table_rows(s, o->view, o->split_threads, !o->show_hidden, &hidden, &rows);

	if (n < 0)
		return (int)n;
	size_t shown = (size_t)n < MAX_ROWS ? (size_t)n : MAX_ROWS;
	for (ssize_t i = 0; i < n; i++) {
		total_bytes += rows[i].bytes;
		total_count += rows[i].count;
		if ((size_t)i >= shown)
			dropped_bytes += rows[i].bytes;
	}
	idx = malloc((shown ? shown : 1) * 4 * sizeof(*idx));
	if (!idx)
		goto out;
	for (size_t i = 0; i < shown; i++) {
		const char *an = mt_allocator_name(rows[i].allocator);
		if ((idx[4 * i] = mt__strtab_get(&strs, rows[i].function)) < 0 ||
		    (idx[4 * i + 1] = mt__strtab_get(&strs, rows[i].file)) < 0 ||
		    (idx[4 * i + 2] = mt__strtab_get(&strs, an ? an : "?")) < 0)
			goto out;
		idx[4 * i + 3] = rows[i].line > 0 ? mt_srclines_add(&src, rows[i].file, rows[i].line) : -1;
		if (rows[i].line > 0 && idx[4 * i + 3] < 0)
			goto out;
	}
	if (mt_srclines_read(&src) < 0)
		goto out;
	for (size_t i = 0; i < shown; i++) {
		const char *line = mt_srclines_text(&src, (long)idx[4 * i + 3]);
		if ((idx[4 * i + 3] = line ? mt__strtab_get(&strs, line) : -1) < 0 && line)
			goto out;
	}
	/* the threads of the rows shown (none when they are merged) */
	size_t n_used = 0;
	for (size_t i = 0; o->split_threads && i < shown; i++)
		if (rows[i].thread + 1 > n_used)
			n_used = rows[i].thread + 1;
	if (!(used = calloc(n_used ? n_used : 1, 1)))
		goto out;
	for (size_t i = 0; o->split_threads && i < shown; i++)
		used[rows[i].thread] = 1;
	mt_json_init(&j, &sb, 0);
	mt_json_begin_object(&j, NULL);
	mt_json_str(&j, "kind", "table");
	mt__html_describe(&j, s, o, total_bytes, total_count, used, n_used);
	mt_json_bool(&j, "split_threads", o->split_threads);
	mt_json_u64(&j, "rows_dropped", (uint64_t)n - shown);
	mt_json_u64(&j, "bytes_dropped", dropped_bytes);
	mt_json_bool(&j, "frames_hidden", hidden);
	mt__strtab_json(&j, "strings", &strs);
	mt_json_begin_object(&j, "rows");
	for (int col = 0; col < 8; col++) {
		static const char *const names[] = { "fn", "file", "line", "thread",
						     "allocator", "bytes", "count", "src" };
		mt_json_begin_array(&j, names[col]);
		for (size_t i = 0; i < shown; i++) {
			switch (col) {
			case 0: mt_json_i64(&j, NULL, idx[4 * i]); break;
			case 1: mt_json_i64(&j, NULL, idx[4 * i + 1]); break;
			case 2: mt_json_i64(&j, NULL, rows[i].line); break;
			case 3: mt_json_u64(&j, NULL, rows[i].thread); break;
			case 4: mt_json_i64(&j, NULL, idx[4 * i + 2]); break;
			case 5: mt_json_u64(&j, NULL, rows[i].bytes); break;
			case 6: mt_json_u64(&j, NULL, rows[i].count); break;
			default: mt_json_i64(&j, NULL, idx[4 * i + 3]); break;
			}
		}
		mt_json_end(&j);
	}
	mt_json_end(&j);
	mt_json_end(&j);
	err = mt__html_write(out, MT__HTML_TABLE, &sb);
out:
	free(used);
	free(idx);
	free(rows);
	mt_srclines_release(&src);
	mt__strtab_release(&strs);
	mt_strbuf_release(&sb);
	return err;
}
