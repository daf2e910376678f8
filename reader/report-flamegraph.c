/* SPDX-License-Identifier: MIT */
/*
 * The flamegraph report: the view's call tree, pruned to a node budget so
 * that the page stays small whatever the capture, as columns of numbers
 * in one JSON value, plus the memory samples (thinned to a bounded
 * number of points, keeping each stretch's highest values; RSS, the
 * tracked heap and the C allocator's own count) inside the
 * page template of reader/html/flamegraph.html, which draws it. Frames
 * that reader/frames.h hides are marked, not left out: the page leaves
 * them out unless its checkbox is ticked. Each frame of the pruned tree
 * carries the text of its source line (reader/srclines.h), for the
 * tooltip.
 */
#include "reader/calltree.h"
#include "reader/report.h"
#include "reader/srclines.h"
#include "reader/temporal.h"
#include "util/json.h"
#include "util/strbuf.h"

#include <errno.h>  /* ENOMEM */
#include <stdlib.h> /* malloc */

#define DEFAULT_MIN_FRACTION 0.0001 /* 0.01 % of the total */
#define DEFAULT_MAX_NODES 40000
#define MAX_POINTS 1500

/* The C allocator's own count by plot point, null where no sample of the
 * point's stretch has it; no array when none has. */
static void json_in_use(struct mt_json *j, const struct mt_snapshot *s, size_t step)
{
	size_t n = s->n_samples, i;

	for (i = 0; i < n && s->samples[i].in_use == MT_SAMPLE_UNKNOWN; i++)
		;
	if (i == n)
		return;
	mt_json_begin_array(j, "in_use");
	for (i = 0; i < n; i += step) {
		uint64_t v = MT_SAMPLE_UNKNOWN;
		for (size_t k = i; k < i + step && k < n; k++) {
			uint64_t x = s->samples[k].in_use;
			if (x != MT_SAMPLE_UNKNOWN && (v == MT_SAMPLE_UNKNOWN || x > v))
				v = x;
		}
		if (v == MT_SAMPLE_UNKNOWN)
			mt_json_null(j, NULL);
		else
			mt_json_u64(j, NULL, v);
	}
	mt_json_end(j);
}

static void json_memory(struct mt_json *j, const struct mt_snapshot *s, size_t max_points)
{
	size_t n = s->n_samples, step = (n + max_points - 1) / max_points;

	if (step < 1)
		step = 1;
	mt_json_begin_object(j, "memory");
	for (int col = 0; col < 3; col++) {
		mt_json_begin_array(j, col == 0 ? "time_us" : col == 1 ? "rss" : "heap");
		for (size_t i = 0; i < n; i += step) {
			uint64_t v = 0;
			for (size_t k = i; k < i + step && k < n; k++) {
				uint64_t x = col == 0 ? s->samples[i].time_us
					   : col == 1 ? s->samples[k].rss : s->samples[k].heap;
				if (x > v)
					v = x;
			}
			mt_json_u64(j, NULL, v);
		}
		mt_json_end(j);
	}
	json_in_use(j, s, step);
	mt_json_begin_object(j, "peak");
	mt_json_u64(j, "time_us", s->peak_time_us);
	mt_json_u64(j, "heap", s->peak_heap);
	mt_json_end(j);
	mt_json_end(j);
}

/* ------------------------------------------------------------------------
 * Temporal: the tree of the call paths with intervals (reader/temporal.h),
 * pruned by the bytes of their intervals, and the intervals by node, for
 * the page to sum over the range of time chosen on its memory plot.
 * ---------------------------------------------------------------------- */
struct temporal {
	struct mt_interval *iv;
	size_t n;
	uint32_t *node; /* by interval, then by entry of the peak */
	/* what was live at the heap's peak, by site: the page's highest
	 * point when the range holds the peak, which falls between samples */
	size_t n_peak;
	uint64_t *bytes, *counts; /* the peak's, by entry: from [n] on */
};

static int temporal_tree(struct mt_ctree *t, const struct mt_snapshot *s,
			 const struct mt_report_opts *o, struct temporal *tp)
{
	const struct mt_temporal *T = mt_snapshot_temporal(s);
	uint32_t *keys = NULL, *remap = NULL;
	uint64_t *bytes = NULL, *counts = NULL;
	int err = -ENOMEM;

	const struct mt_site *sites;
	size_t n_sites = mt_snapshot_sites(s, &sites), all;
	long n = mt_temporal_intervals(T, &tp->iv);
	if (n < 0)
		return (int)n;
	tp->n = (size_t)n;
	for (size_t i = 0; i < n_sites; i++)
		tp->n_peak += sites[i].usage.peak_bytes || sites[i].usage.peak_count;
	all = tp->n + tp->n_peak;
	keys = malloc((all + 1) * sizeof(*keys));
	bytes = malloc((all + 1) * sizeof(*bytes));
	counts = malloc((all + 1) * sizeof(*counts));
	tp->node = malloc((all + 1) * sizeof(*tp->node));
	if (!keys || !bytes || !counts || !tp->node)
		goto out;
	for (size_t i = 0; i < tp->n; i++) {
		keys[i] = tp->iv[i].key;
		bytes[i] = tp->iv[i].bytes;
		counts[i] = tp->iv[i].count;
	}
	for (size_t i = 0, k = tp->n; i < n_sites; i++) {
		if (!sites[i].usage.peak_bytes && !sites[i].usage.peak_count)
			continue;
		keys[k] = sites[i].stack;
		bytes[k] = sites[i].usage.peak_bytes;
		counts[k++] = sites[i].usage.peak_count;
	}
	err = mt_ctree_build_paths(t, s, keys, bytes, counts, all, tp->node);
	if (err < 0)
		goto out;
	err = -ENOMEM;
	if (!(remap = malloc(t->n * sizeof(*remap))))
		goto out;
	err = mt_ctree_prune_map(t, o->min_fraction > 0 ? o->min_fraction : DEFAULT_MIN_FRACTION,
				 o->max_nodes ? o->max_nodes : DEFAULT_MAX_NODES, remap);
	if (err < 0)
		goto out;
	for (size_t i = 0; i < all; i++)
		tp->node[i] = remap[tp->node[i]];
	tp->bytes = bytes;
	tp->counts = counts;
	bytes = counts = NULL;
	err = 0;
out:
	free(keys);
	free(bytes);
	free(counts);
	free(remap);
	return err;
}

/* Whether @u has anything in @view (of the temporal page: anything). */
/* What a thread holds in @view, or over the whole capture (@temporal:
 * any interval may be chosen). */
struct amount {
	uint64_t bytes, count;
};

static struct amount view_amount(const struct mt_usage *u, enum mt_view view, int temporal)
{
	if (temporal)
		return (struct amount){ u->alloc_bytes, u->alloc_count };
	switch (view) {
	case MT_VIEW_PEAK: return (struct amount){ u->peak_bytes, u->peak_count };
	case MT_VIEW_LEAKS: return (struct amount){ u->leak_bytes, u->leak_count };
	case MT_VIEW_TEMPORARY: return (struct amount){ u->temp_bytes, u->temp_count };
	default: return (struct amount){ u->alloc_bytes, u->alloc_count };
	}
}

/* Without split threads the page names the threads that hold something
 * in the view, at most this many (those holding the most): a service
 * that starts a thread per request has a million in a night. */
#define PAGE_THREADS_MAX 256

struct held {
	uint64_t bytes;
	uint32_t index;
};

static int by_bytes_desc(const void *a, const void *b)
{
	const struct held *x = a, *y = b;
	return x->bytes != y->bytes ? (x->bytes < y->bytes ? 1 : -1)
				    : (x->index > y->index) - (x->index < y->index);
}

/* @used (by thread index) down to the PAGE_THREADS_MAX threads of @s that
 * hold the most in the view; returns how many held something, or -ENOMEM. */
static int64_t keep_biggest(uint8_t *used, const struct mt_snapshot *s, enum mt_view view,
			    int temporal)
{
	size_t n = 0;
	for (size_t i = 0; i < s->n_threads; i++)
		n += used[s->threads[i].index];
	if (n <= PAGE_THREADS_MAX)
		return (int64_t)n;
	struct held *h = malloc(n * sizeof(*h));
	if (!h)
		return -ENOMEM;
	size_t k = 0;
	for (size_t i = 0; i < s->n_threads; i++)
		if (used[s->threads[i].index])
			h[k++] = (struct held){ view_amount(&s->threads[i].usage, view, temporal).bytes,
						s->threads[i].index };
	qsort(h, k, sizeof(*h), by_bytes_desc);
	for (size_t i = PAGE_THREADS_MAX; i < k; i++)
		used[h[i].index] = 0;
	free(h);
	return (int64_t)n;
}

/* the boundaries (their times and tracked heap) and the intervals */
static void json_temporal(struct mt_json *j, const struct mt_snapshot *s, const struct temporal *tp)
{
	const struct mt_temporal *T = mt_snapshot_temporal(s);
	uint32_t nb = mt_temporal_boundaries(T);

	mt_json_begin_object(j, "temporal");
	for (int col = 0; col < 2; col++) {
		mt_json_begin_array(j, col ? "heap" : "time_us");
		for (uint32_t b = 0; b < nb; b++) {
			uint64_t i = (uint64_t)b << T->shift;
			int end = b + 1 == nb || i >= s->n_samples;
			if (col)
				mt_json_u64(j, NULL, end ? s->heap_end : s->samples[i].heap);
			else
				mt_json_u64(j, NULL, end ? s->end_time_us : s->samples[i].time_us);
		}
		mt_json_end(j);
	}
	mt_json_u64(j, "samples_per_boundary", 1ull << T->shift);
	mt_json_begin_object(j, "intervals");
	for (int col = 0; col < 5; col++) {
		static const char *const names[] = { "node", "a", "f", "bytes", "count" };
		mt_json_begin_array(j, names[col]);
		for (size_t i = 0; i < tp->n; i++) {
			const struct mt_interval *e = &tp->iv[i];
			switch (col) {
			case 0: mt_json_u64(j, NULL, tp->node[i]); break;
			case 1: mt_json_u64(j, NULL, e->a); break;
			case 2: mt_json_i64(j, NULL, e->f == MT_TEMPORAL_LIVE ? -1 : (int64_t)e->f); break;
			case 3: mt_json_u64(j, NULL, e->bytes); break;
			default: mt_json_u64(j, NULL, e->count); break;
			}
		}
		mt_json_end(j);
	}
	mt_json_end(j);
	mt_json_begin_object(j, "peak");
	for (int col = 0; col < 3; col++) {
		static const char *const names[] = { "node", "bytes", "count" };
		mt_json_begin_array(j, names[col]);
		for (size_t i = 0; i < tp->n_peak; i++)
			mt_json_u64(j, NULL, col == 0 ? tp->node[tp->n + i]
					   : col == 1 ? tp->bytes[tp->n + i] : tp->counts[tp->n + i]);
		mt_json_end(j);
	}
	mt_json_end(j);
	mt_json_end(j);
}

int mt_report_flamegraph(FILE *out, const struct mt_snapshot *s, const struct mt_report_opts *o)
{
	struct temporal tp = { 0 };
	struct mt_strbuf sb = MT_STRBUF_INIT;
	struct mt__strtab strs = { 0 };
	struct mt_srclines src = { .confidential = o->confidential };
	struct mt_ctree t;
	struct mt_json j;
	int64_t *fn = NULL, *file = NULL, *text = NULL;
	uint8_t *used = NULL;
	int err;

	if (o->temporal && mt_snapshot_temporal(s)) {
		err = temporal_tree(&t, s, o, &tp);
		if (err < 0) {
			free(tp.iv);
			free(tp.node);
			return err;
		}
	} else {
		err = mt_ctree_build(&t, s, o->view, o->split_threads, 0);
		if (err < 0)
			return err;
		err = mt_ctree_prune(&t, o->min_fraction > 0 ? o->min_fraction : DEFAULT_MIN_FRACTION,
				     o->max_nodes ? o->max_nodes : DEFAULT_MAX_NODES);
		if (err < 0)
			goto out;
	}
	/* the temporal page's totals are the range's, computed in the page */
	uint64_t total_bytes = tp.iv ? s->heap_end : t.v[0].total_bytes;
	uint64_t total_count = tp.iv ? s->leak_count : t.v[0].total_count;
	err = -ENOMEM;
	fn = malloc(t.n * sizeof(*fn));
	file = malloc(t.n * sizeof(*file));
	text = malloc(t.n * sizeof(*text));
	if (!fn || !file || !text)
		goto out;
	for (size_t i = 0; i < t.n; i++) {
		fn[i] = file[i] = text[i] = -1;
		if (!t.v[i].function)
			continue;
		if ((fn[i] = mt__strtab_get(&strs, t.v[i].function)) < 0 ||
		    (file[i] = mt__strtab_get(&strs, t.v[i].file)) < 0)
			goto out;
		if (t.v[i].line > 0 && (text[i] = mt_srclines_add(&src, t.v[i].file, t.v[i].line)) < 0)
			goto out;
	}
	if (mt_srclines_read(&src) < 0)
		goto out;
	for (size_t i = 0; i < t.n; i++) {
		const char *line = mt_srclines_text(&src, (long)text[i]);
		if ((text[i] = line ? mt__strtab_get(&strs, line) : -1) < 0 && line)
			goto out;
	}

	/* the threads of the graph's nodes with split threads, else those
	 * that hold something in the view */
	size_t n_used = 0;
	for (size_t i = 0; i < s->n_threads; i++)
		if (s->threads[i].index + 1 > n_used)
			n_used = s->threads[i].index + 1;
	if (!(used = calloc(n_used ? n_used : 1, 1)))
		goto out;
	for (size_t i = 0; o->split_threads && i < t.n; i++)
		if (t.v[i].thread < n_used)
			used[t.v[i].thread] = 1;
	for (size_t i = 0; !o->split_threads && i < s->n_threads; i++)
		used[s->threads[i].index] =
			view_amount(&s->threads[i].usage, o->view, tp.iv != NULL).count != 0;
	int64_t holding = o->split_threads ? 0 : keep_biggest(used, s, o->view, tp.iv != NULL);
	if (holding < 0)
		goto out;

	mt_json_init(&j, &sb, 0);
	mt_json_begin_object(&j, NULL);
	mt_json_str(&j, "kind", "flamegraph");
	mt__html_describe(&j, s, o, total_bytes, total_count, used, n_used);
	mt_json_bool(&j, "inverted", o->inverted);
	mt_json_bool(&j, "split_threads", o->split_threads);
	if (!o->split_threads)
		mt_json_u64(&j, "threads_holding", (uint64_t)holding);
	mt_json_bool(&j, "show_hidden", o->show_hidden);
	mt_json_begin_object(&j, "merge");
	mt_json_u64(&j, "nodes", t.n_merged);
	mt_json_u64(&j, "below_bytes", t.merged_below);
	mt_json_end(&j);
	mt__strtab_json(&j, "strings", &strs);
	mt_json_begin_object(&j, "nodes");
	for (int col = 0; col < 10; col++) {
		static const char *const names[] = { "parent", "fn", "file", "line", "thread",
						     "bytes", "count", "native", "hidden", "src" };
		mt_json_begin_array(&j, names[col]);
		for (size_t i = 0; i < t.n; i++) {
			const struct mt_ctree_node *n = &t.v[i];
			switch (col) {
			case 0: mt_json_u64(&j, NULL, n->parent); break;
			case 1: mt_json_i64(&j, NULL, fn[i]); break;
			case 2: mt_json_i64(&j, NULL, file[i]); break;
			case 3: mt_json_i64(&j, NULL, n->line); break;
			case 4: mt_json_u64(&j, NULL, n->thread); break;
			case 5: mt_json_u64(&j, NULL, n->own_bytes); break;
			case 6: mt_json_u64(&j, NULL, n->own_count); break;
			case 7: mt_json_u64(&j, NULL, n->native); break;
			case 8: mt_json_u64(&j, NULL, n->kind); break; /* enum mt_frame_kind */
			default: mt_json_i64(&j, NULL, text[i]); break;
			}
		}
		mt_json_end(&j);
	}
	mt_json_begin_array(&j, "merged");
	for (size_t i = 0; i < t.n; i++) {
		if (!t.v[i].merged)
			continue;
		mt_json_begin_array(&j, NULL);
		mt_json_u64(&j, NULL, i);
		mt_json_u64(&j, NULL, t.v[i].merged);
		mt_json_end(&j);
	}
	mt_json_end(&j);
	mt_json_end(&j);
	json_memory(&j, s, o->max_points ? o->max_points : MAX_POINTS);
	if (tp.iv)
		json_temporal(&j, s, &tp);
	mt_json_end(&j);
	err = mt__html_write(out, MT__HTML_FLAMEGRAPH, &sb);
out:
	free(tp.iv);
	free(tp.node);
	free(tp.bytes);
	free(tp.counts);
	free(used);
	free(fn);
	free(file);
	free(text);
	mt_srclines_release(&src);
	mt__strtab_release(&strs);
	mt_strbuf_release(&sb);
	mt_ctree_release(&t);
	return err;
}
