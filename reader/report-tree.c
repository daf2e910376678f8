/* SPDX-License-Identifier: MIT */
/*
 * The tree report: the biggest call paths of a view (by memory allocated
 * at the path's innermost frame) and everything that called them, as an
 * indented tree. Each line shows the memory at that call path or below
 * it, and its share of the view's total. Past TREE_INDENT levels lines
 * are no longer indented but say their depth: a 10,000-deep recursion
 * would otherwise print lines of 50 kB each.
 */
#include "reader/calltree.h"
#include "reader/report.h"
#include "util/plural.h"
#include "util/strbuf.h"

#include <errno.h>  /* ENOMEM */
#include <stdlib.h> /* qsort */
#include <string.h> /* memset */

struct tree_ctx {
	FILE *out;
	const struct mt_ctree *t;
	uint32_t *first, *next; /* children of marked nodes, biggest first */
	uint64_t whole;
	struct mt_strbuf prefix, line;
};

#define TREE_INDENT 64

static const struct mt_ctree *sort_tree;

static int own_desc(const void *pa, const void *pb)
{
	const struct mt_ctree_node *a = &sort_tree->v[*(const uint32_t *)pa];
	const struct mt_ctree_node *b = &sort_tree->v[*(const uint32_t *)pb];
	if (a->own_bytes != b->own_bytes)
		return a->own_bytes < b->own_bytes ? 1 : -1;
	if (a->own_count != b->own_count)
		return a->own_count < b->own_count ? 1 : -1;
	return *(const uint32_t *)pa > *(const uint32_t *)pb ? 1 : -1;
}

/* biggest total first; equal ones in the order they were made */
static int total_desc(const void *pa, const void *pb)
{
	const struct mt_ctree_node *a = &sort_tree->v[*(const uint32_t *)pa];
	const struct mt_ctree_node *b = &sort_tree->v[*(const uint32_t *)pb];
	if (a->total_bytes != b->total_bytes)
		return a->total_bytes < b->total_bytes ? 1 : -1;
	return *(const uint32_t *)pa > *(const uint32_t *)pb ? 1 : -1;
}

/* @depth: said on the line when it is past the indented levels */
static void print_node(struct tree_ctx *c, uint32_t i, uint32_t depth)
{
	const struct mt_ctree_node *n = &c->t->v[i];
	char b[32], d[32] = "";

	mt_strbuf_reset(&c->line);
	if (n->native)
		mt_strbuf_addstr(&c->line, "[C] "); /* a native frame */
	mt__report_location(&c->line, n->function ? n->function : "all", n->file, n->line);
	if (depth > TREE_INDENT)
		snprintf(d, sizeof(d), "[depth %u] ", (unsigned)depth);
	fprintf(c->out, "%s%s%s %6.2f%%  %s\n", c->prefix.buf, d, mt__report_bytes(b, n->total_bytes),
		c->whole ? 100.0 * (double)n->total_bytes / (double)c->whole : 0.0, c->line.buf);
}

struct item {
	uint32_t node;
	uint32_t depth; /* 1 for the root's children */
	size_t plen;    /* prefix length of its parent's children */
	int last;       /* the last (smallest) of its siblings */
};

struct items {
	struct item *v;
	size_t n, cap;
};

/* Push the children of @p last-first, so that the biggest pops first. */
static int push_children(struct tree_ctx *c, struct items *s, uint32_t p, uint32_t depth,
			 size_t plen)
{
	size_t cnt = 0, pos = 0;

	for (uint32_t k = c->first[p]; k; k = c->next[k - 1])
		cnt++;
	if (s->n + cnt > s->cap) {
		size_t cap = s->cap ? s->cap : 64;
		while (s->n + cnt > cap)
			cap *= 2;
		struct item *nv = realloc(s->v, cap * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		s->v = nv;
		s->cap = cap;
	}
	for (uint32_t k = c->first[p]; k; k = c->next[k - 1], pos++)
		s->v[s->n + cnt - 1 - pos] = (struct item){ k - 1, depth, plen, pos + 1 == cnt };
	s->n += cnt;
	return 0;
}

static void prefix_cut(struct mt_strbuf *sb, size_t len)
{
	if (sb->alloc) {
		sb->len = len;
		sb->buf[len] = '\0';
	}
}

/* Depth-first without recursion: call paths can be thousands deep. */
static int print_tree(struct tree_ctx *c)
{
	struct items s = { NULL, 0, 0 };
	int err;

	print_node(c, 0, 0);
	err = push_children(c, &s, 0, 1, 0);
	while (!err && s.n) {
		struct item it = s.v[--s.n];
		prefix_cut(&c->prefix, it.plen);
		mt_strbuf_addstr(&c->prefix, it.last ? "\u2514\u2500 " : "\u251c\u2500 ");
		print_node(c, it.node, it.depth);
		size_t plen = it.plen; /* deeper: children at the same indent */
		if (it.depth < TREE_INDENT) {
			prefix_cut(&c->prefix, it.plen);
			mt_strbuf_addstr(&c->prefix, it.last ? "   " : "\u2502  ");
			plen = c->prefix.len;
		}
		err = c->prefix.err ? c->prefix.err
				    : push_children(c, &s, it.node, it.depth + 1, plen);
	}
	free(s.v);
	return err;
}

int mt_report_tree(FILE *out, const struct mt_snapshot *s, const struct mt_report_opts *o)
{
	struct tree_ctx c = { out, NULL, NULL, NULL, 0, MT_STRBUF_INIT, MT_STRBUF_INIT };
	struct mt_ctree t;
	uint32_t *idx = NULL, *marked = NULL;
	unsigned char *mark = NULL;
	char a[32], label[96];
	int err = mt_ctree_build(&t, s, o->view, 0, !o->show_hidden);

	if (err < 0)
		return err;
	c.t = &t;
	c.whole = t.v[0].total_bytes;
	err = -ENOMEM;
	idx = malloc(t.n * sizeof(*idx));
	marked = malloc(t.n * sizeof(*marked));
	mark = calloc(t.n, 1);
	c.first = calloc(t.n, sizeof(*c.first));
	c.next = calloc(t.n, sizeof(*c.next));
	if (!idx || !marked || !mark || !c.first || !c.next)
		goto out;
	size_t n_paths = 0;
	for (size_t i = 1; i < t.n; i++)
		if (t.v[i].own_bytes || t.v[i].own_count)
			idx[n_paths++] = (uint32_t)i;
	sort_tree = &t;
	qsort(idx, n_paths, sizeof(*idx), own_desc);
	size_t shown = o->top_n && o->top_n < n_paths ? o->top_n : n_paths;
	size_t n_marked = 0;
	mark[0] = 1;
	for (size_t k = 0; k < shown; k++)
		for (uint32_t i = idx[k]; i && !mark[i]; i = t.v[i].parent) {
			mark[i] = 1;
			marked[n_marked++] = i;
		}
	/* children lists, biggest first: link in ascending order, prepending */
	qsort(marked, n_marked, sizeof(*marked), total_desc);
	for (size_t k = n_marked; k-- > 0;) {
		uint32_t i = marked[k], p = t.v[i].parent;
		c.next[i] = c.first[p];
		c.first[p] = i + 1;
	}

	mt__view_label(label, sizeof(label), s, o->view);
	label[0] = (char)(label[0] - 'a' + 'A');
	fprintf(out, "%s: %s in %llu %s", label, mt__report_bytes(a, c.whole),
		(unsigned long long)t.v[0].total_count,
		mt_plural(t.v[0].total_count, "allocation", "allocations"));
	if (o->view == MT_VIEW_PEAK && s->n_samples) {
		char tm[64];
		fprintf(out, " %s", mt__report_peak_time(tm, sizeof(tm), s));
	}
	fprintf(out, "\n%s %zu biggest of %zu allocating call %s%s%s\n\n",
		shown == n_paths ? "All" : "The", shown, n_paths,
		mt_plural(n_paths, "path", "paths"),
		shown < n_paths ? " (-n 0 shows all)" : "",
		t.n_hidden ? "; import-system and memtrace frames hidden (--show-hidden-frames)" : "");
	if (n_paths == 0) {
		fprintf(out, "(nothing)\n");
		err = 0;
	} else {
		err = print_tree(&c);
	}
	if (!err && ferror(out))
		err = -EIO;
out:
	free(idx);
	free(marked);
	free(mark);
	free(c.first);
	free(c.next);
	mt_strbuf_release(&c.prefix);
	mt_strbuf_release(&c.line);
	mt_ctree_release(&t);
	return err;
}
