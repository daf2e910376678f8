/* SPDX-License-Identifier: MIT */
/*
 * What the HTML reports share: the page templates (generated from
 * reader/html/ by scripts/embed.py), filling a template's data slot, a
 * string table, and the description of the capture and view. All text
 * reaches a page only as JSON through util/json.c, whose escaping ('<',
 * '>' and '&' as \u escapes, invalid UTF-8 replaced) makes the data
 * inert inside its <script type="application/json"> element; the page's
 * code shows it with textContent and canvas text only.
 */
#include "reader/coverage.h"
#include "reader/report.h"
#include "util/json.h"
#include "util/slots.h"
#include "util/strbuf.h"

#include <errno.h>  /* EIO */
#include <stdlib.h> /* realloc */
#include <string.h> /* strstr */

extern const char mt_html_flamegraph[], mt_html_table[], mt_html_growth[], mt_html_diff[];
extern const unsigned long mt_html_flamegraph_len, mt_html_table_len, mt_html_growth_len,
	mt_html_diff_len;

#define DATA_SLOT "{{MT_DATA}}"

int mt__html_write(FILE *out, enum mt__html_page page, const struct mt_strbuf *json)
{
	static const struct {
		const char *text;
		const unsigned long *len;
	} pages[] = {
		[MT__HTML_FLAMEGRAPH] = { mt_html_flamegraph, &mt_html_flamegraph_len },
		[MT__HTML_TABLE] = { mt_html_table, &mt_html_table_len },
		[MT__HTML_GROWTH] = { mt_html_growth, &mt_html_growth_len },
		[MT__HTML_DIFF] = { mt_html_diff, &mt_html_diff_len },
	};
	const char *t = pages[page].text;
	size_t len = *pages[page].len;
	const char *slot = strstr(t, DATA_SLOT);

	if (json->err)
		return json->err;
	if (!slot)
		return -EINVAL;
	size_t head = (size_t)(slot - t), tail_off = head + strlen(DATA_SLOT);
	errno = 0;
	if (fwrite(t, 1, head, out) != head || fwrite(json->buf, 1, json->len, out) != json->len ||
	    fwrite(t + tail_off, 1, len - tail_off, out) != len - tail_off)
		return errno ? -errno : -EIO; /* a full disk says so */
	return ferror(out) ? -EIO : 0;
}

/* ------------------------------------------------------------------------
 * String table: interned strings (compared by pointer) to indexes.
 * ---------------------------------------------------------------------- */
static size_t ptr_hash(const char *p)
{
	uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull;
	return (size_t)(h >> 29);
}

static uint64_t strtab_hash(const void *ctx, size_t i)
{
	return ptr_hash(((const struct mt__strtab *)ctx)->v[i]);
}

int64_t mt__strtab_get(struct mt__strtab *t, const char *s)
{
	if (t->n * 2 >= t->nslots &&
	    mt_slots_grow(&t->slots, &t->nslots, 1024, 0, t->n, strtab_hash, t) < 0)
		return -1;
	size_t j = ptr_hash(s) & (t->nslots - 1);
	while (t->slots[j]) {
		if (t->v[t->slots[j] - 1] == s)
			return t->slots[j] - 1;
		j = (j + 1) & (t->nslots - 1);
	}
	if (t->n == t->cap) {
		size_t n = t->cap ? t->cap * 2 : 256;
		const char **nv = realloc(t->v, n * sizeof(*nv));
		if (!nv)
			return -1;
		t->v = nv;
		t->cap = n;
	}
	t->v[t->n] = s;
	t->slots[j] = (uint32_t)t->n + 1;
	return (int64_t)t->n++;
}

void mt__strtab_json(struct mt_json *j, const char *key, const struct mt__strtab *t)
{
	mt_json_begin_array(j, key);
	for (size_t i = 0; i < t->n; i++)
		mt_json_str(j, NULL, t->v[i]);
	mt_json_end(j);
}

void mt__strtab_release(struct mt__strtab *t)
{
	free(t->v);
	free(t->slots);
	memset(t, 0, sizeof(*t));
}

/* ------------------------------------------------------------------------
 * The capture and the view
 * ---------------------------------------------------------------------- */
const char *mt__view_name(enum mt_view v)
{
	switch (v) {
	case MT_VIEW_PEAK:
		return "peak";
	case MT_VIEW_LEAKS:
		return "leaks";
	case MT_VIEW_TEMPORARY:
		return "temporary";
	default:
		return "allocated";
	}
}

char *mt__view_label(char *buf, size_t len, const struct mt_snapshot *s, enum mt_view v)
{
	switch (v) {
	case MT_VIEW_PEAK:
		snprintf(buf, len, "memory at the peak");
		break;
	case MT_VIEW_LEAKS:
		snprintf(buf, len, "%s", s->header.flags & MT_HDR_ATTACHED ? "leaks (live at detach)"
									    : "leaks (live at the end)");
		break;
	case MT_VIEW_TEMPORARY:
		snprintf(buf, len, "temporary allocations (threshold %llu)",
			 (unsigned long long)s->temp_threshold);
		break;
	default:
		snprintf(buf, len, "all allocations");
		break;
	}
	return buf;
}

char *mt_report_leak_note(char *buf, size_t len, const struct mt_snapshot *s, enum mt_view v)
{
	if (v != MT_VIEW_LEAKS || !mt_snapshot_small_hidden(s))
		return NULL;
	snprintf(buf, len, "%s was Python's allocator: small objects (512 bytes or less) live in its "
			   "arenas, so a leak of them shows as an arena it took, or not at all; "
			   "PYTHONMALLOC=malloc or --trace-python-allocators shows each one",
		 s->python_allocator);
	return buf;
}

/* A note when much of what glibc's malloc holds at the end is not in the
 * capture (coverage.h): the page shows less than the program holds. */
static void coverage_note(struct mt_json *j, const struct mt_snapshot *s)
{
	struct mt_coverage c;
	char a[32], b[32], note[256];

	if (!mt_coverage(s, MT_COVERAGE_END, &c) || !c.warn)
		return;
	snprintf(note, sizeof(note),
		 "glibc's malloc holds %s in use at the end; the capture accounts for %s of it "
		 "(%.1f%%): the rest was allocated before tracking started, or by a path memtrace "
		 "does not see",
		 mt__report_bytes(a, c.in_use), mt__report_bytes(b, c.accounted), 100.0 * c.share);
	mt_json_str(j, NULL, note);
}

void mt__html_describe(struct mt_json *j, const struct mt_snapshot *s, const struct mt_report_opts *o,
		       uint64_t total_bytes, uint64_t total_count, const uint8_t *used,
		       size_t n_used)
{
	const struct mt_bytes *c = &s->header.cmdline;
	struct mt_strbuf cmd = MT_STRBUF_INIT;
	char label[96];

	for (uint32_t i = 0; i < c->len; i++)
		mt_strbuf_addch(&cmd, c->p[i] ? c->p[i] : (i + 1 < c->len ? ' ' : '\0'));
	mt_json_u64(j, "version", 1);
	mt_json_str(j, "capture", o->path ? o->path : "");
	mt_json_strn(j, "command", cmd.buf, strlen(cmd.buf));
	mt_json_str(j, "view", mt__view_name(o->view));
	mt_json_str(j, "view_label", mt__view_label(label, sizeof(label), s, o->view));
	mt_json_u64(j, "temp_threshold", s->temp_threshold);
	mt_json_u64(j, "total_bytes", total_bytes);
	mt_json_u64(j, "total_count", total_count);
	mt_json_u64(j, "peak_heap", s->peak_heap);
	mt_json_u64(j, "peak_time_us", s->peak_time_us);
	mt_json_u64(j, "peak_until_us", s->peak_until_us);
	mt_json_u64(j, "end_time_us", s->end_time_us);
	mt_json_bool(j, "truncated", s->status.truncated);
	mt_json_u64(j, "dropped", s->n_dropped);
	mt_json_begin_array(j, "diagnostics"); /* the tracker's own words */
	for (size_t i = 0; i < s->n_diags; i++)
		mt_json_str(j, NULL, s->diags[i].msg);
	char note[256];
	if (mt_report_leak_note(note, sizeof(note), s, o->view))
		mt_json_str(j, NULL, note);
	coverage_note(j, s);
	mt_json_end(j);
	mt_json_begin_array(j, "threads");
	for (size_t i = 0; i < s->n_threads; i++) {
		uint64_t index = s->threads[i].index;
		if (used && (index >= n_used || !used[index]))
			continue;
		mt_json_begin_object(j, NULL);
		mt_json_u64(j, "index", s->threads[i].index);
		mt_json_u64(j, "tid", s->threads[i].tid);
		mt_json_str(j, "name", s->threads[i].name);
		mt_json_end(j);
	}
	mt_json_end(j);
	mt_strbuf_release(&cmd);
}
