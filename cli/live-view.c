/* SPDX-License-Identifier: MIT */
/*
 * What the keys of `memtrace live` choose (live-view.h).
 */
#include "cli/live-view.h"
#include "cli/live-term.h"    /* MT_KEY_* */
#include "reader/locations.h" /* MT_ALL_THREADS */
#include "reader/report.h"    /* mt_live_base_new */

#include <stdlib.h> /* realloc */
#include <string.h> /* strchr */

struct mt_live_view_base {
	int split;
	uint32_t thread;
	struct mt_live_base *base;
};

void mt_live_view_keys(struct mt_live_view *v, const char *keys, size_t n, const char *sort_keys)
{
	size_t page = v->page ? v->page : 1;

	for (size_t i = 0; i < n; i++) {
		const char *sort = keys[i] ? strchr(sort_keys, keys[i]) : NULL;
		switch (keys[i]) {
		case 'm':
			/* other rows: from the top, and split from the first
			 * thread (mt_live_view_thread() finds no such one) */
			v->split = !v->split;
			v->step = 0;
			v->first = 0;
			v->thread = MT_ALL_THREADS;
			break;
		case '<':
		case '>':
			v->step += v->split ? (keys[i] == '<' ? -1 : 1) : 0;
			break;
		case ' ':
			v->paused = !v->paused;
			break;
		case MT_KEY_UP:
			v->first -= v->first > 0;
			break;
		case MT_KEY_DOWN:
			v->first++;
			break;
		case MT_KEY_PGUP:
			v->first = v->first > page ? v->first - page : 0;
			break;
		case MT_KEY_PGDN:
			v->first += page;
			break;
		case MT_KEY_HOME:
			v->first = 0;
			break;
		case MT_KEY_END:
			v->first = SIZE_MAX / 2;
			break;
		default:
			if (sort && v->sort != (int)(sort - sort_keys)) {
				v->sort = (int)(sort - sort_keys);
				v->first = 0;
			}
		}
	}
}

void mt_live_view_thread(struct mt_live_view *v, const struct mt_snapshot *s)
{
	size_t k = 0, n = s->n_threads;

	if (!v->split || !n) {
		v->step = 0;
		return;
	}
	while (k < n && s->threads[k].index != v->thread)
		k++;
	if (k == n) { /* just split: the first thread */
		k = 0;
		v->first = 0;
	}
	if (v->step) {
		long to = ((long)k + v->step) % (long)n;
		k = (size_t)(to < 0 ? to + (long)n : to);
		v->first = 0;
	}
	v->step = 0;
	v->thread = s->threads[k].index;
}

const struct mt_live_base *mt_live_view_base(struct mt_live_view *v, const struct mt_snapshot *s)
{
	for (size_t i = 0; i < v->n_bases; i++)
		if (v->bases[i].split == v->split && (!v->split || v->bases[i].thread == v->thread))
			return v->bases[i].base;
	struct mt_live_view_base *nv = realloc(v->bases, (v->n_bases + 1) * sizeof(*nv));
	if (!nv)
		return NULL;
	v->bases = nv;
	struct mt_live_base *b = mt_live_base_new(s, v->split ? v->thread : MT_ALL_THREADS);
	if (!b)
		return NULL;
	v->bases[v->n_bases++] = (struct mt_live_view_base){ v->split, v->thread, b };
	return b;
}

void mt_live_view_forget(struct mt_live_view *v)
{
	for (size_t i = 0; i < v->n_bases; i++)
		mt_live_base_free(v->bases[i].base);
	free(v->bases);
	v->bases = NULL;
	v->n_bases = 0;
}
