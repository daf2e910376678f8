/* SPDX-License-Identifier: MIT */
/*
 * The diff report: two captures of one program compared by location
 * (reader/diff.h), as a table of text or one JSON object; and the page
 * of reader/html/diff.html, AFTER's call paths coloured by their change
 * since BEFORE.
 */
#include "reader/diff.h"
#include "reader/report.h"
#include "util/json.h"
#include "util/strbuf.h"

#include <errno.h>  /* EIO */
#include <stdlib.h> /* malloc */
#include <string.h> /* strlen */

#define PAGE_MIN_FRACTION 0.0001 /* as the flame graph: 0.01 % of a view's total */
#define PAGE_MAX_NODES 40000     /* per capture and view */

static const char *const view_key[MT_DIFF__VIEWS] = { "peak", "leaks" };

char *mt__report_change(char *buf, int64_t change)
{
	uint64_t m = change < 0 ? -(uint64_t)change : (uint64_t)change;
	buf[0] = change > 0 ? '+' : change < 0 ? '-' : ' ';
	mt__report_bytes(buf + 1, m);
	return change ? buf : buf + 1;
}

static void json_fig(struct mt_json *j, const char *key, const struct mt_diff_fig *f)
{
	mt_json_begin_object(j, key);
	mt_json_u64(j, "before", f->bytes[MT_DIFF_BEFORE]);
	mt_json_u64(j, "after", f->bytes[MT_DIFF_AFTER]);
	mt_json_i64(j, "change", mt_diff_change(f));
	mt_json_u64(j, "before_allocations", f->count[MT_DIFF_BEFORE]);
	mt_json_u64(j, "after_allocations", f->count[MT_DIFF_AFTER]);
	mt_json_end(j);
}

static int diff_json(FILE *out, const struct mt_diff *d, const struct mt_diff_opts *o, size_t rows)
{
	struct mt_strbuf sb = MT_STRBUF_INIT;
	struct mt_json j;

	mt_json_init(&j, &sb, 1);
	mt_json_begin_object(&j, NULL);
	mt_json_str(&j, "before", o->before);
	mt_json_str(&j, "after", o->after);
	for (int v = 0; v < MT_DIFF__VIEWS; v++)
		json_fig(&j, view_key[v], &d->total[v]);
	mt_json_u64(&j, "locations_count", d->n);
	mt_json_begin_array(&j, "locations");
	for (size_t i = 0; i < rows; i++) {
		const struct mt_diff_row *r = &d->rows[i];
		mt_json_begin_object(&j, NULL);
		mt_json_str(&j, "function", r->function);
		mt_json_str(&j, "file", r->file);
		if (r->native)
			mt_json_bool(&j, "native", 1);
		for (int v = 0; v < MT_DIFF__VIEWS; v++)
			json_fig(&j, view_key[v], &r->fig[v]);
		mt_json_end(&j);
	}
	mt_json_end(&j);
	mt_json_end(&j);
	mt_strbuf_addch(&sb, '\n');
	return mt_strbuf_write_release(&sb, out);
}

/* "  12.00 MiB   15.00 MiB   +3.00 MiB" */
static void text_fig(FILE *out, const struct mt_diff_fig *f)
{
	char b[32], a[32], c[34];
	fprintf(out, " %12s %12s %12s", mt__report_bytes(b, f->bytes[MT_DIFF_BEFORE]),
		mt__report_bytes(a, f->bytes[MT_DIFF_AFTER]), mt__report_change(c, mt_diff_change(f)));
}

int mt_report_diff(FILE *out, const struct mt_diff *d, const struct mt_diff_opts *o)
{
	static const char *const what[MT_DIFF__VIEWS] = { "Peak tracked heap:", "Leaks (live at the end):" };
	struct mt_strbuf sb = MT_STRBUF_INIT;
	size_t rows = o->top_n && o->top_n < d->n ? o->top_n : d->n;

	if (o->json)
		return diff_json(out, d, o, rows);
	mt__report_text(&sb, o->before);
	fprintf(out, "Before: %s\n", sb.buf);
	mt_strbuf_reset(&sb);
	mt__report_text(&sb, o->after);
	fprintf(out, "After:  %s\n\n", sb.buf);
	for (int v = 0; v < MT_DIFF__VIEWS; v++) {
		const struct mt_diff_fig *f = &d->total[v];
		char b[32], a[32], c[34];
		fprintf(out, "%-25s %s -> %s (%s)\n", what[v], mt__report_bytes(b, f->bytes[MT_DIFF_BEFORE]),
			mt__report_bytes(a, f->bytes[MT_DIFF_AFTER]),
			mt__report_change(c, mt_diff_change(f)));
	}
	fprintf(out, "\n %12s %12s %12s %12s %12s %12s  %s\n", "Peak before", "Peak after", "Peak change",
		"Leaks before", "Leaks after", "Leaks change", "Location");
	for (size_t i = 0; i < rows; i++) {
		const struct mt_diff_row *r = &d->rows[i];
		for (int v = 0; v < MT_DIFF__VIEWS; v++)
			text_fig(out, &r->fig[v]);
		mt_strbuf_reset(&sb);
		if (r->native)
			mt_strbuf_addstr(&sb, "[C] ");
		mt__report_location(&sb, r->function, r->file, 0);
		fprintf(out, "  %s\n", sb.buf);
	}
	if (!rows)
		fprintf(out, " %12s\n", "(none)");
	else if (rows < d->n)
		fprintf(out, "(%zu more location%s; -n 0 shows all)\n", d->n - rows,
			d->n - rows == 1 ? "" : "s");
	mt_strbuf_release(&sb);
	return ferror(out) ? -EIO : 0;
}

/* ------------------------------------------------------------------------
 * The page
 * ---------------------------------------------------------------------- */
static void page_capture(struct mt_json *j, const char *key, const struct mt_snapshot *s,
			 const char *path)
{
	const struct mt_bytes *c = &s->header.cmdline;
	struct mt_strbuf cmd = MT_STRBUF_INIT;

	for (uint32_t i = 0; i < c->len; i++)
		mt_strbuf_addch(&cmd, c->p[i] ? c->p[i] : (i + 1 < c->len ? ' ' : '\0'));
	mt_json_begin_object(j, key);
	mt_json_str(j, "path", path);
	mt_json_strn(j, "command", cmd.buf, strlen(cmd.buf));
	mt_json_u64(j, "peak_heap", s->peak_heap);
	mt_json_u64(j, "leaks", s->heap_end);
	mt_json_u64(j, "dropped", s->n_dropped);
	mt_json_end(j);
	mt_strbuf_release(&cmd);
}

int mt_report_diff_html(FILE *out, const struct mt_snapshot *before,
			const struct mt_snapshot *after, const struct mt_diff_opts *o)
{
	static const char *const cols[] = { "parent", "fn", "file", "native",
					    "peak_before", "peak_after", "leaks_before", "leaks_after" };
	struct mt_strbuf sb = MT_STRBUF_INIT;
	struct mt__strtab strs = { 0 };
	struct mt_dtree t;
	struct mt_json j;
	int64_t *fn = NULL, *file = NULL;
	int err;

	err = mt_dtree_build(&t, before, after, PAGE_MIN_FRACTION, PAGE_MAX_NODES);
	if (err < 0)
		return err;
	err = -ENOMEM;
	fn = malloc(t.n * sizeof(*fn));
	file = malloc(t.n * sizeof(*file));
	if (!fn || !file)
		goto out;
	for (size_t i = 0; i < t.n; i++) {
		fn[i] = file[i] = -1;
		if (!t.v[i].function)
			continue;
		if ((fn[i] = mt__strtab_get(&strs, t.v[i].function)) < 0 ||
		    (file[i] = mt__strtab_get(&strs, t.v[i].file)) < 0)
			goto out;
	}
	mt_json_init(&j, &sb, 0);
	mt_json_begin_object(&j, NULL);
	mt_json_str(&j, "kind", "diff");
	mt_json_u64(&j, "version", 1);
	page_capture(&j, "before", before, o->before);
	page_capture(&j, "after", after, o->after);
	mt__strtab_json(&j, "strings", &strs);
	mt_json_begin_object(&j, "nodes");
	for (size_t col = 0; col < sizeof(cols) / sizeof(cols[0]); col++) {
		mt_json_begin_array(&j, cols[col]);
		for (size_t i = 0; i < t.n; i++) {
			const struct mt_dtree_node *n = &t.v[i];
			switch (col) {
			case 0: mt_json_u64(&j, NULL, n->parent); break;
			case 1: mt_json_i64(&j, NULL, fn[i]); break;
			case 2: mt_json_i64(&j, NULL, file[i]); break;
			case 3: mt_json_u64(&j, NULL, n->native); break;
			default: {
				int v = col < 6 ? MT_DIFF_PEAK : MT_DIFF_LEAKS;
				int side = col % 2 ? MT_DIFF_AFTER : MT_DIFF_BEFORE;
				mt_json_u64(&j, NULL, n->fig[v].bytes[side]);
			}
			}
		}
		mt_json_end(&j);
	}
	mt_json_end(&j);
	mt_json_end(&j);
	err = mt__html_write(out, MT__HTML_DIFF, &sb);
out:
	free(fn);
	free(file);
	mt__strtab_release(&strs);
	mt_strbuf_release(&sb);
	mt_dtree_release(&t);
	return err;
}
