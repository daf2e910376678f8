/* SPDX-License-Identifier: MIT */
/*
 * The flamegraph report: the view's call tree, pruned to a node budget so
 * that the page stays small whatever the capture, as columns of numbers
 * in one JSON value, plus the memory samples (thinned to a bounded
 * number of points, keeping each stretch's highest values; RSS, the
 * tracked heap and the C allocator's own count) inside the
 * page template of reader/html/flamegraph.html, which draws it.
 */
#include "reader/calltree.h"
#include "reader/report.h"
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

static void json_memory(struct mt_json *j, const struct mt_snapshot *s)
{
	size_t n = s->n_samples, step = (n + MAX_POINTS - 1) / MAX_POINTS;

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

int mt_report_flamegraph(FILE *out, const struct mt_snapshot *s, const struct mt_report_opts *o)
{
	struct mt_strbuf sb = MT_STRBUF_INIT;
	struct mt__strtab strs = { 0 };
	struct mt_ctree t;
	struct mt_json j;
	int64_t *fn = NULL, *file = NULL;
	int err;

	err = mt_ctree_build(&t, s, o->view, o->split_threads);
	if (err < 0)
		return err;
	uint64_t total_bytes = t.v[0].total_bytes, total_count = t.v[0].total_count;
	err = mt_ctree_prune(&t, o->min_fraction > 0 ? o->min_fraction : DEFAULT_MIN_FRACTION,
			     o->max_nodes ? o->max_nodes : DEFAULT_MAX_NODES);
	if (err < 0)
		goto out;
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
	mt_json_str(&j, "kind", "flamegraph");
	mt__html_describe(&j, s, o, total_bytes, total_count);
	mt_json_bool(&j, "inverted", o->inverted);
	mt_json_bool(&j, "split_threads", o->split_threads);
	mt_json_begin_object(&j, "merge");
	mt_json_u64(&j, "nodes", t.n_merged);
	mt_json_u64(&j, "below_bytes", t.merged_below);
	mt_json_end(&j);
	mt__strtab_json(&j, "strings", &strs);
	mt_json_begin_object(&j, "nodes");
	for (int col = 0; col < 8; col++) {
		static const char *const names[] = { "parent", "fn", "file", "line",
						     "thread", "bytes", "count", "native" };
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
			default: mt_json_u64(&j, NULL, n->native); break;
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
	json_memory(&j, s);
	mt_json_end(&j);
	err = mt__html_write(out, MT__HTML_FLAMEGRAPH, &sb);
out:
	free(fn);
	free(file);
	mt__strtab_release(&strs);
	mt_strbuf_release(&sb);
	mt_ctree_release(&t);
	return err;
}
