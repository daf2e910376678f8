/* SPDX-License-Identifier: MIT */
/*
 * The growth report: the stacks whose live bytes rose across a capture,
 * ranked by reader/growth.h (the steadiest and biggest rise first), as
 * text with a sparkline per stack, as JSON, or as an HTML page with a
 * plot per stack.
 */
#include "reader/growth.h"
#include "reader/report.h"
#include "util/json.h"
#include "util/strbuf.h"

#include <errno.h>  /* EINVAL */
#include <stdlib.h> /* free */

#define MAX_FRAMES 64  /* frames of a stack in the JSON and the page */
#define TEXT_FRAMES 8  /* ... and in the text */

static int64_t round_i64(double v)
{
	return (int64_t)(v < 0 ? v - 0.5 : v + 0.5);
}

static double mean_interval_us(const struct mt_growth *g)
{
	uint64_t k = mt_growth_points(g);
	return k > 1 ? (double)(g->last_us - g->first_us) / (double)(k - 1) : 0;
}

/* "+1.50 MiB" or "-12 B" for a signed amount of bytes */
static char *signed_bytes(char *buf, double v)
{
	char b[32];
	mt__report_bytes(b, (unsigned long long)round_i64(v < 0 ? -v : v));
	snprintf(buf, 40, "%s%s", v < 0 ? "-" : "+", b);
	return buf;
}

/* ▁▂▃▄▅▆▇█ for the row's plot, scaled to its highest point */
static void sparkline(struct mt_strbuf *sb, const struct mt_growth_row *r)
{
	static const char *const bars[8] = { "\u2581", "\u2582", "\u2583", "\u2584",
					     "\u2585", "\u2586", "\u2587", "\u2588" };
	float top = 0;
	for (unsigned i = 0; i < r->n_points; i++)
		top = r->points[i] > top ? r->points[i] : top;
	for (unsigned i = 0; i < r->n_points; i++) {
		int b = top > 0 ? (int)(r->points[i] / top * 7.0f + 0.5f) : 0;
		mt_strbuf_addstr(sb, bars[b < 0 ? 0 : b > 7 ? 7 : b]);
	}
}

static int growth_text(FILE *out, const struct mt_snapshot *s, const struct mt_report_opts *o,
		       const struct mt_growth *g, const struct mt_growth_row *rows, size_t n,
		       size_t shown)
{
	struct mt_strbuf sb = MT_STRBUF_INIT;
	struct mt_frame f[TEXT_FRAMES];
	char secs[32], a[40], b[40], c[32];

	mt__report_seconds(secs, sizeof(secs), g->last_us - g->first_us);
	mt_strbuf_addf(&sb, "Growth of live memory in ");
	mt__report_text(&sb, o->path ? o->path : "");
	mt_strbuf_addf(&sb, ": %llu points over %s (one every %.1f ms)%s\n",
		       (unsigned long long)mt_growth_points(g), secs, mean_interval_us(g) / 1000,
		       s->status.truncated ? ", capture truncated" : "");
	if (!n)
		mt_strbuf_addstr(&sb, "No stack's live bytes rose across the capture.\n");
	else
		mt_strbuf_addf(&sb, "%zu stack%s rose; the steadiest and biggest rise first%s:\n", n,
			       n == 1 ? "" : "s", shown < n ? " (the first shown)" : "");
	for (size_t i = 0; i < shown; i++) {
		const struct mt_growth_row *r = &rows[i];
		mt_strbuf_addf(&sb, "\n#%zu  %s over the run (%s/s), r %.2f, steady %.0f%%, %s live at "
				    "the end\n    ",
			       i + 1, signed_bytes(a, r->rise), signed_bytes(b, r->slope), r->r,
			       r->steady * 100, mt__report_bytes(c, r->end_bytes));
		sparkline(&sb, r);
		mt_strbuf_addch(&sb, '\n');
		size_t depth = mt_snapshot_stack(s, r->stack, f, TEXT_FRAMES);
		if (!depth)
			mt_strbuf_addstr(&sb, "    <no Python frames>\n");
		for (size_t k = 0; k < depth && k < TEXT_FRAMES; k++) {
			mt_strbuf_addstr(&sb, k ? "      <- " : "    ");
			if (f[k].native)
				mt_strbuf_addstr(&sb, "[C] ");
			mt__report_location(&sb, f[k].function, f[k].file, f[k].line);
			mt_strbuf_addch(&sb, '\n');
		}
		if (depth > TEXT_FRAMES)
			mt_strbuf_addf(&sb, "      <- ... %zu more\n", depth - TEXT_FRAMES);
	}
	return mt_strbuf_write_release(&sb, out);
}

/* the members shared by the JSON and the page */
static void growth_json_body(struct mt_json *j, const struct mt_snapshot *s,
			     const struct mt_growth *g, const struct mt_growth_row *rows, size_t n,
			     size_t shown)
{
	struct mt_frame f[MAX_FRAMES];

	mt_json_u64(j, "points", mt_growth_points(g));
	mt_json_u64(j, "first_time_us", g->first_us);
	mt_json_u64(j, "last_time_us", g->last_us);
	mt_json_double(j, "interval_us", mean_interval_us(g));
	mt_json_u64(j, "rising_stacks", n);
	mt_json_bool(j, "truncated", s->status.truncated);
	mt_json_begin_array(j, "rows");
	for (size_t i = 0; i < shown; i++) {
		const struct mt_growth_row *r = &rows[i];
		mt_json_begin_object(j, NULL);
		mt_json_u64(j, "rank", i + 1);
		mt_json_i64(j, "rise_bytes", round_i64(r->rise));
		mt_json_double(j, "bytes_per_second", r->slope);
		mt_json_double(j, "r", r->r);
		mt_json_double(j, "steady", r->steady);
		mt_json_double(j, "score", r->score);
		mt_json_u64(j, "end_bytes", r->end_bytes);
		mt_json_u64(j, "max_bytes", r->max_bytes);
		mt_json_begin_array(j, "plot");
		for (unsigned k = 0; k < r->n_points; k++)
			mt_json_u64(j, NULL, (uint64_t)r->points[k]);
		mt_json_end(j);
		size_t depth = mt_snapshot_stack(s, r->stack, f, MAX_FRAMES);
		mt_json_u64(j, "depth", depth);
		mt_json_begin_array(j, "stack"); /* innermost first */
		for (size_t k = 0; k < depth && k < MAX_FRAMES; k++) {
			mt_json_begin_object(j, NULL);
			mt_json_str(j, "function", f[k].function);
			mt_json_str(j, "file", f[k].file ? f[k].file : "");
			mt_json_i64(j, "line", f[k].line);
			if (f[k].native)
				mt_json_bool(j, "native", 1);
			mt_json_end(j);
		}
		mt_json_end(j);
		mt_json_end(j);
	}
	mt_json_end(j);
}

int mt_report_growth(FILE *out, const struct mt_snapshot *s, const struct mt_report_opts *o)
{
	const struct mt_growth *g = mt_snapshot_growth(s);
	struct mt_growth_row *rows;
	int err;

	if (!g)
		return -EINVAL;
	long n = mt_growth_rank(g, &rows);
	if (n < 0)
		return (int)n;
	size_t shown = o->top_n && (size_t)n > o->top_n ? o->top_n : (size_t)n;
	if (o->json || o->html) {
		struct mt_strbuf sb = MT_STRBUF_INIT;
		struct mt_json j;
		mt_json_init(&j, &sb, o->json);
		mt_json_begin_object(&j, NULL);
		/* the page's rows are call paths of every thread: it names
		 * none (a thread per request makes a million) */
		static const uint8_t no_threads[1];
		if (o->html)
			mt__html_describe(&j, s, o, s->heap_end, s->leak_count, no_threads, 0);
		else
			mt_json_str(&j, "capture", o->path ? o->path : "");
		growth_json_body(&j, s, g, rows, (size_t)n, shown);
		mt_json_end(&j);
		if (o->html) {
			err = mt__html_write(out, MT__HTML_GROWTH, &sb);
			mt_strbuf_release(&sb);
		} else {
			mt_strbuf_addch(&sb, '\n');
			err = mt_strbuf_write_release(&sb, out);
		}
	} else {
		err = growth_text(out, s, o, g, rows, (size_t)n, shown);
	}
	free(rows);
	return err;
}
