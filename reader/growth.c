/* SPDX-License-Identifier: MIT */
/*
 * Each stack's live bytes across a capture, folded into running sums
 * (growth.h).
 */
#include "reader/growth.h"

#include <errno.h>  /* ENOMEM */
#include <math.h>   /* sqrt */
#include <stdlib.h> /* realloc */
#include <string.h> /* memset */

#define MAX_STACK (1u << 24)

struct mt_growth_stack {
	int64_t val;      /* live bytes now (they wrap as the heap total does) */
	int64_t last_y;   /* the value of point k_last - 1, 0 before any */
	uint64_t k_last;  /* points folded into the sums */
	double sy, sxy, syy; /* sums of y, x * y, y * y over those points (x: index) */
	double up, down;  /* increases and decreases between consecutive points */
	uint64_t max;     /* highest point */
	float pts[MT_GROWTH_POINTS];
	int seen;
};

static int room(struct mt_growth *g, uint32_t stack)
{
	if (stack < g->cap)
		return 0;
	if (stack >= MAX_STACK)
		return -ENOMEM;
	uint32_t n = g->cap ? g->cap : 256;
	while (n <= stack)
		n *= 2;
	struct mt_growth_stack *v = realloc(g->v, (size_t)n * sizeof(*v));
	if (!v)
		return -ENOMEM;
	memset(v + g->cap, 0, (size_t)(n - g->cap) * sizeof(*v));
	g->v = v;
	g->cap = n;
	return 0;
}

/* The points of every series, as they are or as mt_growth_finish() would
 * leave them. */
struct span {
	uint64_t k, width, first_us, last_us;
};

/* Points [s->k_last, @to) all held s->val: into the sums and the plot
 * (@width samples a plot point). */
static void fold(uint64_t width, struct mt_growth_stack *s, uint64_t to)
{
	uint64_t a = s->k_last, b = to;
	if (a >= b)
		return;
	double y = (double)s->val, n = (double)(b - a);
	double d = (double)(s->val - s->last_y);
	if (d > 0)
		s->up += d;
	else
		s->down -= d;
	double sx = ((double)a + (double)(b - 1)) * n / 2;
	s->sy += y * n;
	s->sxy += y * sx;
	s->syy += y * y * n;
	uint64_t v = s->val > 0 ? (uint64_t)s->val : 0;
	if (v > s->max)
		s->max = v;
	for (uint64_t i = a / width; i <= (b - 1) / width && i < MT_GROWTH_POINTS; i++)
		if ((float)v > s->pts[i])
			s->pts[i] = (float)v;
	s->last_y = s->val;
	s->k_last = b;
}

int mt_growth_change(struct mt_growth *g, uint32_t stack, int64_t dbytes)
{
	if (g->finished)
		return 0;
	if (stack >= g->cap && room(g, stack) < 0)
		return -ENOMEM;
	struct mt_growth_stack *s = &g->v[stack];
	fold(g->width, s, g->k);
	s->val = (int64_t)((uint64_t)s->val + (uint64_t)dbytes);
	s->seen = 1;
	return 0;
}

/* The plot's points in pairs, each the higher of two. */
static void halve(float *p)
{
	for (unsigned i = 0; i < MT_GROWTH_POINTS / 2; i++)
		p[i] = p[2 * i] > p[2 * i + 1] ? p[2 * i] : p[2 * i + 1];
	for (unsigned i = MT_GROWTH_POINTS / 2; i < MT_GROWTH_POINTS; i++)
		p[i] = 0;
}

void mt_growth_sample(struct mt_growth *g, uint64_t time_us)
{
	if (g->finished)
		return;
	if (!g->width)
		g->width = 1;
	if (g->k == (uint64_t)MT_GROWTH_POINTS * g->width) {
		/* every plot point now stands for twice the samples */
		for (uint32_t j = 0; j < g->cap; j++)
			halve(g->v[j].pts);
		g->width *= 2;
	}
	if (!g->k)
		g->first_us = time_us;
	g->last_us = time_us;
	g->k++;
}

void mt_growth_finish(struct mt_growth *g, uint64_t end_us)
{
	if (g->finished)
		return;
	if (!g->k || end_us > g->last_us)
		mt_growth_sample(g, end_us);
	for (uint32_t j = 0; j < g->cap; j++)
		fold(g->width, &g->v[j], g->k);
	g->finished = 1;
}

/* The points as mt_growth_finish(@end_us) leaves them; @g itself once
 * finished. */
static struct span span_at(const struct mt_growth *g, uint64_t end_us)
{
	struct span p = { g->k, g->width, g->first_us, g->last_us };

	if (g->finished || (g->k && end_us <= g->last_us))
		return p;
	/* the end is one more point (mt_growth_sample()) */
	if (!p.width)
		p.width = 1;
	if (p.k == (uint64_t)MT_GROWTH_POINTS * p.width)
		p.width *= 2;
	if (!p.k)
		p.first_us = end_us;
	p.last_us = end_us;
	p.k++;
	return p;
}

uint64_t mt_growth_points_at(const struct mt_growth *g, uint64_t end_us, uint64_t *span_us)
{
	struct span p = span_at(g, end_us);

	*span_us = p.last_us - p.first_us;
	return p.k;
}

/* Stack @stack's record with the run it holds folded up to the end of
 * @p, into @out: @g is left as it is. 0 for a stack never seen. */
static int stack_at(const struct mt_growth *g, const struct span *p, uint32_t stack,
		    struct mt_growth_stack *out)
{
	if (stack >= g->cap || !g->v[stack].seen)
		return 0;
	*out = g->v[stack];
	if (p->width != g->width && g->width)
		halve(out->pts);
	fold(p->width, out, p->k);
	return 1;
}

static void figures(const struct span *p, const struct mt_growth_stack *s, uint32_t stack,
		    struct mt_growth_row *row)
{
	memset(row, 0, sizeof(*row));
	row->stack = stack;
	if (!s)
		return;
	double K = (double)p->k;
	row->end_bytes = s->val > 0 ? (uint64_t)s->val : 0;
	row->max_bytes = s->max;
	uint64_t used = p->width ? (p->k + p->width - 1) / p->width : 0;
	row->n_points = (unsigned)(used < MT_GROWTH_POINTS ? used : MT_GROWTH_POINTS);
	memcpy(row->points, s->pts, sizeof(row->points));
	if (s->up + s->down > 0)
		row->steady = (s->up - s->down) / (s->up + s->down);
	if (p->k < 2)
		return;
	/* least squares over x = 0 .. K-1 */
	double sx = K * (K - 1) / 2, sxx = (K - 1) * K * (2 * K - 1) / 6;
	double varx = K * sxx - sx * sx, cov = K * s->sxy - sx * s->sy;
	double vary = K * s->syy - s->sy * s->sy;
	double per_point = cov / varx;
	double secs = (double)(p->last_us - p->first_us) / 1e6;
	row->rise = per_point * (K - 1);
	row->slope = secs > 0 ? row->rise / secs : 0;
	if (vary > 0) {
		row->r = cov / sqrt(varx * vary);
		row->r = row->r > 1 ? 1 : row->r < -1 ? -1 : row->r;
	}
	row->score = row->rise * (row->r > 0 ? row->r : 0) * (row->steady > 0 ? row->steady : 0);
}

void mt_growth_row_at(const struct mt_growth *g, uint64_t end_us, uint32_t stack,
		      struct mt_growth_row *row)
{
	struct span p = span_at(g, end_us);
	struct mt_growth_stack s;

	figures(&p, stack_at(g, &p, stack, &s) ? &s : NULL, stack, row);
}

void mt_growth_row_of(const struct mt_growth *g, uint32_t stack, struct mt_growth_row *row)
{
	mt_growth_row_at(g, g->last_us, stack, row);
}

static int row_cmp(const void *pa, const void *pb)
{
	const struct mt_growth_row *a = pa, *b = pb;
	if (a->score != b->score)
		return a->score < b->score ? 1 : -1;
	if (a->rise != b->rise)
		return a->rise < b->rise ? 1 : -1;
	return (a->stack > b->stack) - (a->stack < b->stack);
}

long mt_growth_rank_at(const struct mt_growth *g, uint64_t end_us, struct mt_growth_row **out)
{
	struct span p = span_at(g, end_us);
	struct mt_growth_stack s;
	size_t n = 0, cap = 0;
	struct mt_growth_row *v = NULL, row;

	for (uint32_t j = 0; j < g->cap; j++) {
		if (!stack_at(g, &p, j, &s))
			continue;
		figures(&p, &s, j, &row);
		if (!(row.rise > 0))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			struct mt_growth_row *nv = realloc(v, cap * sizeof(*nv));
			if (!nv) {
				free(v);
				return -ENOMEM;
			}
			v = nv;
		}
		v[n++] = row;
	}
	if (n)
		qsort(v, n, sizeof(*v), row_cmp);
	*out = v;
	return (long)n;
}

long mt_growth_rank(const struct mt_growth *g, struct mt_growth_row **out)
{
	return mt_growth_rank_at(g, g->last_us, out);
}

void mt_growth_release(struct mt_growth *g)
{
	free(g->v);
	memset(g, 0, sizeof(*g));
}
