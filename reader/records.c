/* SPDX-License-Identifier: MIT */
/*
 * The record pass (reader/records.h): each chunk's records read from its
 * columns against the coding state that runs across chunks, and handed
 * to the callbacks.
 */
#include "reader/records.h"
#include "format/columns.h"
#include "format/error.h"
#include "util/grow.h"

#include <errno.h>  /* ENOMEM */
#include <stdio.h>  /* snprintf */
#include <stdlib.h> /* realloc */
#include <string.h> /* memset */

/* The payload announces every thread index with a THREAD record in the
 * buffer its events go through, before them, and numbers them densely; a
 * thread-per-request service reaches millions in a night. An event of an
 * index beyond THREAD_SLACK past the highest announced is corrupt (one
 * such record would otherwise ask for a pointer per index up to it), and
 * so is a THREAD record beyond THREAD_SLACK + 2 x the THREAD records
 * before it (gaps: records a stuck writer lost); any index from
 * MT_THREADS_MAX on is. */
#define THREAD_SLACK (1u << 16)

/* The coding state of a thread index that a THREAD record said had ended:
 * its own was freed, and a record that names it is corrupt. */
static struct mt_delta ended_mark;

static int stub(void *ctx, const struct mt_record *r)
{
	(void)ctx;
	(void)r;
	return 0;
}

static const char *stub_why(void *ctx)
{
	(void)ctx;
	return NULL;
}

static int stub_chunk_end(void *ctx)
{
	(void)ctx;
	return 0;
}

static int stub_chunk(void *ctx, uint64_t index, uint64_t offset, const struct mt_chunk *c)
{
	(void)ctx;
	(void)index;
	(void)offset;
	(void)c;
	return 0;
}

void mt_record_ops_init(struct mt_record_ops *ops)
{
#define FILL(m)              \
	if (!ops->m)         \
		ops->m = stub;
	FILL(alloc);
	FILL(free);
	FILL(thread);
	FILL(code);
	FILL(stack);
	FILL(sample);
	FILL(diag);
	FILL(trailer);
	FILL(native);
	FILL(module);
	FILL(hybrid);
	FILL(site);
	FILL(totals);
	FILL(name);
	FILL(unknown);
#undef FILL
	if (!ops->chunk)
		ops->chunk = stub_chunk;
	if (!ops->chunk_end)
		ops->chunk_end = stub_chunk_end;
	if (!ops->why)
		ops->why = stub_why;
}

void mt_records_start(struct mt_records *p, const struct mt_header *h)
{
	p->opts = mt_header_columns(h);
	p->aggregated = !!(h->flags & MT_HDR_AGGREGATED);
	p->oom = 0;
	p->ended_used = 0;
	p->far_thread = 0;
	p->thread_records = 0;
	p->announced = 0;
	p->n_records = 0;
	p->events = 0;
	p->trailer_seen = 0;
	p->why[0] = '\0';
	/* the coding state runs from the first chunk to the last */
	memset(&p->reuse, 0, sizeof(p->reuse));
	for (uint32_t i = 0; i < p->n_deltas; i++)
		if (p->deltas[i] == &ended_mark) {
			p->deltas[i] = NULL;
		} else if (p->deltas[i]) {
			memset(p->deltas[i], 0, sizeof(*p->deltas[i]));
			p->deltas[i]->reuse = &p->reuse;
		}
}

void mt_records_release(struct mt_records *p)
{
	free(p->row);
	for (uint32_t i = 0; i < p->n_deltas; i++)
		if (p->deltas[i] != &ended_mark)
			free(p->deltas[i]);
	free(p->deltas);
	memset(p, 0, sizeof(*p));
}

static struct mt_delta *get_delta(void *ctx, uint32_t thread)
{
	struct mt_records *c = ctx;

	if (thread < c->n_deltas && c->deltas[thread]) {
		if (c->deltas[thread] != &ended_mark)
			return c->deltas[thread];
		c->ended_used = 1;
		return NULL;
	}
	if (thread >= MT_THREADS_MAX || thread >= THREAD_SLACK + c->announced) {
		c->far_thread = thread;
		return NULL;
	}
	/* A state is some 700 bytes: made only for the indexes in use, so
	 * that one record with a thread index near MT_THREADS_MAX costs a
	 * pointer per index, not 700 MB. */
	if (thread >= c->n_deltas) {
		uint32_t n = c->n_deltas ? c->n_deltas : 16;
		while (n <= thread)
			n *= 2;
		struct mt_delta **v = realloc(c->deltas, n * sizeof(*v));
		if (!v) {
			c->oom = 1;
			return NULL;
		}
		memset(v + c->n_deltas, 0, (n - c->n_deltas) * sizeof(*v));
		c->deltas = v;
		c->n_deltas = n;
	}
	struct mt_delta *d = calloc(1, sizeof(*d));
	if (!d) {
		c->oom = 1;
		return NULL;
	}
	d->reuse = &c->reuse;
	c->deltas[thread] = d;
	return d;
}

/* Thread index @thread ended (a thread-per-request service makes one for
 * every request): its coding state goes, some 700 bytes of it. */
static void ended(struct mt_records *c, uint32_t thread)
{
	if (thread < c->n_deltas) {
		if (c->deltas[thread] != &ended_mark)
			free(c->deltas[thread]);
		c->deltas[thread] = &ended_mark;
	}
	/* an index never seen has no state: a record naming it later is
	 * as corrupt, but that is not worth a slot for every index */
}

/* The error of get_delta() failing: memory, an index that ended or one
 * far beyond those announced. */
static int no_delta(struct mt_records *c)
{
	if (c->far_thread) {
		snprintf(c->why, sizeof(c->why),
			 "an allocation or free of thread index %u, far beyond the %u announced",
			 c->far_thread, c->announced);
		return -MT_ECORRUPT;
	}
	if (!c->ended_used)
		return -ENOMEM;
	snprintf(c->why, sizeof(c->why),
		 "an allocation or free of a thread that a THREAD record said had ended");
	return -MT_ECORRUPT;
}

/* A THREAD record announced index @thread. Returns 0, or -MT_ECORRUPT for
 * an index far beyond the records before it. */
static int announced(struct mt_records *c, uint32_t thread)
{
	if (thread >= MT_THREADS_MAX ||
	    (uint64_t)thread >= THREAD_SLACK + 2 * (uint64_t)c->thread_records) {
		snprintf(c->why, sizeof(c->why),
			 "a THREAD record of index %u after %llu such records", thread,
			 (unsigned long long)c->thread_records);
		return -MT_ECORRUPT;
	}
	c->thread_records++;
	if (thread >= c->announced)
		c->announced = thread + 1;
	return 0;
}

/* The TRAILER is the last record: what follows it (another capture's
 * chunks, appended; a chunk written twice) is not this capture's. */
static int after_trailer(struct mt_records *c)
{
	snprintf(c->why, sizeof(c->why), "records after the end-of-capture record");
	return -MT_ECORRUPT;
}

static int dispatch(const struct mt_record_ops *ops, void *ctx, const struct mt_record *r)
{
	switch (r->type) {
	case MT_REC_ALLOC:
		return ops->alloc(ctx, r);
	case MT_REC_FREE:
		return ops->free(ctx, r);
	case MT_REC_THREAD:
		return ops->thread(ctx, r);
	case MT_REC_CODE:
		return ops->code(ctx, r);
	case MT_REC_STACK:
		return ops->stack(ctx, r);
	case MT_REC_SAMPLE:
		return ops->sample(ctx, r);
	case MT_REC_DIAG:
		return ops->diag(ctx, r);
	case MT_REC_TRAILER:
		return ops->trailer(ctx, r);
	case MT_REC_NATIVE:
		return ops->native(ctx, r);
	case MT_REC_MODULE:
		return ops->module(ctx, r);
	case MT_REC_HYBRID:
		return ops->hybrid(ctx, r);
	case MT_REC_SITE:
		return ops->site(ctx, r);
	case MT_REC_TOTALS:
		return ops->totals(ctx, r);
	case MT_REC_NAME:
		return ops->name(ctx, r);
	default:
		return ops->unknown(ctx, r);
	}
}

static int is_event(unsigned type)
{
	return type == MT_REC_ALLOC || type == MT_REC_FREE;
}

/* A record of @type that the capture's mode has none of: its events
 * are either counted into SITE and TOTALS records or written one by one,
 * never both. Returns -MT_ECORRUPT. */
static int other_mode(struct mt_records *c, unsigned type)
{
	static const char *const names[] = { [MT_REC_ALLOC] = "an allocation",
					     [MT_REC_FREE] = "a free",
					     [MT_REC_SITE] = "a SITE",
					     [MT_REC_TOTALS] = "a TOTALS" };
	snprintf(c->why, sizeof(c->why), "%s record in %s capture", names[type],
		 c->aggregated ? "an aggregated" : "a non-aggregated");
	return -MT_ECORRUPT;
}

int mt_records_read(struct mt_records *c, const uint8_t *data, size_t len,
		    const struct mt_record_ops *ops, void *ctx, int *stop, int *misfit)
{
	struct mt_cols_in in;
	struct mt_record r;
	struct mt_delta *d = NULL; /* in.thread's */
	uint64_t n_records = c->n_records;
	int rc = 0, err = 0;

	if (mt_grow_buf(&c->row, &c->row_cap, len + MT_ROW_SLACK) < 0) {
		c->oom = 1;
		return -ENOMEM;
	}
	if (mt_cols_in_begin(&in, data, len, c->opts) < 0) {
		*misfit = 1;
		return 0;
	}
	if (c->trailer_seen && mt_cols_in_more(&in))
		return after_trailer(c);
	while (mt_cols_in_more(&in)) {
		struct mt_cols_hot h;
		int hot = mt_cols_in_hot(&in, &h);
		if (hot > 0) {
			if (c->aggregated) {
				err = other_mode(c, h.type);
				break;
			}
			if (!mt__hot_km_ok(h.type, h.kind, h.mode)) {
				err = -MT_ECORRUPT;
				break;
			}
			if (h.overflow) {
				err = -MT_ETRUNC;
				break;
			}
			if (!d && !(d = get_delta(c, (uint32_t)in.thread))) {
				err = no_delta(c);
				break;
			}
			r.type = (uint8_t)h.type;
			r.tidx = (uint32_t)in.thread;
			if ((err = mt__hot_decode(d, &r, h.type, h.kind, h.mode, h.zaddr, h.size,
						  h.zstack)) < 0)
				break;
			n_records++;
			c->events++;
			rc = h.type == MT_REC_ALLOC ? ops->alloc(ctx, &r) : ops->free(ctx, &r);
		} else {
			ssize_t n = hot < 0 ? hot : mt_cols_in_row(&in, c->row, c->row_cap);
			if (n < 0) {
				*misfit = 1;
				break;
			}
			ssize_t k = mt_rec_decode(c->row, (size_t)n, &r, get_delta, c);
			if (k < 0) {
				err = k == -ENOMEM ? no_delta(c) : (int)k;
				break;
			}
			if (r.type == MT_REC_THREAD) {
				if ((err = announced(c, r.tidx)) < 0)
					break;
				if (r.thread.ended)
					ended(c, r.tidx - (uint32_t)r.thread.ended);
			}
			d = NULL; /* a hot record with its head may change in.thread */
			if (c->aggregated ? is_event(r.type)
					  : r.type == MT_REC_SITE || r.type == MT_REC_TOTALS) {
				err = other_mode(c, r.type);
				break;
			}
			n_records++;
			c->events += is_event(r.type);
			/* every event written comes before the TRAILER: fewer
			 * read means chunks went missing (an aggregated capture's
			 * count is of the events it summed) */
			if (r.type == MT_REC_TRAILER && !c->aggregated &&
			    r.trailer.n_events != c->events) {
				snprintf(c->why, sizeof(c->why),
					 "its end-of-capture record counts %llu allocations and "
					 "frees where the chunks up to it hold %llu: chunks are "
					 "missing or out of place",
					 (unsigned long long)r.trailer.n_events,
					 (unsigned long long)c->events);
				err = -MT_ECORRUPT;
				break;
			}
			if (r.type == MT_REC_TRAILER)
				c->trailer_seen = 1;
			rc = dispatch(ops, ctx, &r);
			if (r.type == MT_REC_TRAILER && !rc && mt_cols_in_more(&in)) {
				err = after_trailer(c);
				break;
			}
		}
		if (rc) {
			*stop = rc;
			break;
		}
	}
	c->n_records = n_records;
	if (!err && !rc && !*misfit && !mt_cols_in_end(&in))
		*misfit = 1;
	return err;
}

