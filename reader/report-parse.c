/* SPDX-License-Identifier: MIT */
/*
 * The parse report: the header and every record as one line of text,
 * "<type> key=value ...", for debugging captures and the format; an
 * aggregated capture's SITE and TOTALS records too. Not a stable
 * interface.
 */
#include "reader/report.h"
#include "util/strbuf.h"

#include <errno.h>    /* EIO */
#include <inttypes.h> /* PRIu64 */

struct parse_ctx {
	FILE *out;
	struct mt_strbuf sb;
	int lines; /* STACK records carry lines (mt_header_lines()) */
};

/* quoted; quotes, backslashes and non-printable bytes escaped */
static const char *q(struct parse_ctx *p, const struct mt_bytes *b)
{
	mt_strbuf_reset(&p->sb);
	mt_strbuf_addch(&p->sb, '"');
	for (uint32_t i = 0; i < b->len; i++) {
		uint8_t c = b->p[i];
		if (c == '"' || c == '\\')
			mt_strbuf_addf(&p->sb, "\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			mt_strbuf_addf(&p->sb, "\\x%02x", c);
		else
			mt_strbuf_addch(&p->sb, c);
	}
	mt_strbuf_addch(&p->sb, '"');
	return p->sb.err ? "\"?\"" : p->sb.buf;
}

static int on_alloc(void *ctx, const struct mt_record *r)
{
	struct parse_ctx *p = ctx;
	fprintf(p->out, "alloc thread=%u kind=%s addr=0x%" PRIx64 " size=%" PRIu64 " stack=%u\n", r->tidx,
		mt_allocator_name(r->alloc.kind), r->alloc.addr, r->alloc.size, r->alloc.stack);
	return 0;
}

static int on_free(void *ctx, const struct mt_record *r)
{
	struct parse_ctx *p = ctx;
	fprintf(p->out, "free thread=%u kind=%s addr=0x%" PRIx64, r->tidx, mt_allocator_name(r->free.kind),
		r->free.addr);
	if (r->free.kind == MT_ALLOC_MUNMAP)
		fprintf(p->out, " size=%" PRIu64, r->free.size);
	fputc('\n', p->out);
	return 0;
}

static int on_thread(void *ctx, const struct mt_record *r)
{
	struct parse_ctx *p = ctx;
	fprintf(p->out, "thread index=%u tid=%" PRIu64 " name=%s", r->tidx, r->thread.tid,
		q(p, &r->thread.name));
	if (r->thread.ended)
		fprintf(p->out, " ended=%" PRIu64, (uint64_t)r->tidx - r->thread.ended);
	fputc('\n', p->out);
	return 0;
}

static int on_name(void *ctx, const struct mt_record *r)
{
	struct parse_ctx *p = ctx;
	fprintf(p->out, "name tid=%" PRIu64 " name=%s\n", r->name.tid, q(p, &r->name.name));
	return 0;
}

static int on_code(void *ctx, const struct mt_record *r)
{
	struct parse_ctx *p = ctx;
	const struct mt_rec_code *c = &r->code;
	fprintf(p->out, "code id=%u firstlineno=%u file=%s", c->id, c->firstlineno, q(p, &c->filename));
	fprintf(p->out, " name=%s", q(p, &c->name));
	fprintf(p->out, " qualname=%s linetable=%u\n", q(p, &c->qualname), c->linetable.len);
	return 0;
}

static int on_stack(void *ctx, const struct mt_record *r)
{
	struct parse_ctx *p = ctx;
	if (p->lines)
		fprintf(p->out, "stack id=%u parent=%u code=%u line=%u entry=%u\n", r->stack.id,
			r->stack.parent, r->stack.code, r->stack.offset >> 1, r->stack.offset & 1);
	else
		fprintf(p->out, "stack id=%u parent=%u code=%u offset=%u\n", r->stack.id,
			r->stack.parent, r->stack.code, r->stack.offset);
	return 0;
}

static int on_native(void *ctx, const struct mt_record *r)
{
	struct parse_ctx *p = ctx;
	fprintf(p->out, "native id=%u parent=%u ip=0x%" PRIx64 "\n", r->native.id, r->native.parent,
		r->native.ip);
	return 0;
}

static int on_hybrid(void *ctx, const struct mt_record *r)
{
	struct parse_ctx *p = ctx;
	fprintf(p->out, "hybrid id=%u python=%u native=%u\n", r->hybrid.id, r->hybrid.python,
		r->hybrid.native);
	return 0;
}

static int on_module(void *ctx, const struct mt_record *r)
{
	struct parse_ctx *p = ctx;
	const struct mt_rec_module *m = &r->module;
	fprintf(p->out, "module gen=%u bias=0x%" PRIx64 " path=%s build_id=", m->gen, m->bias,
		q(p, &m->path));
	for (uint32_t i = 0; i < m->build_id.len; i++)
		fprintf(p->out, "%02x", m->build_id.p[i]);
	fprintf(p->out, " segments=[");
	for (uint32_t i = 0; i < m->nsegs; i++)
		fprintf(p->out, "%s0x%" PRIx64 "+0x%" PRIx64, i ? "," : "", m->seg_vaddr[i],
			m->seg_memsz[i]);
	fprintf(p->out, "]\n");
	return 0;
}

static int on_sample(void *ctx, const struct mt_record *r)
{
	struct parse_ctx *p = ctx;
	fprintf(p->out, "sample time_us=%" PRIu64 " rss=%" PRIu64, r->sample.time_us, r->sample.rss);
	if (r->sample.heap)
		fprintf(p->out, " heap=%" PRIu64, r->sample.heap - 1);
	if (r->sample.in_use)
		fprintf(p->out, " in_use=%" PRIu64, r->sample.in_use - 1);
	fputc('\n', p->out);
	return 0;
}

/* an allocator kind by name, or by number if it has none */
static void kind(FILE *out, unsigned k)
{
	const char *name = mt_allocator_name(k);

	if (name)
		fputs(name, out);
	else
		fprintf(out, "%u", k);
}

static int on_site(void *ctx, const struct mt_record *r)
{
	struct parse_ctx *p = ctx;
	const struct mt_rec_site *s = &r->site;
	fprintf(p->out, "site stack=%u thread=%u kind=", s->stack, s->thread);
	kind(p->out, s->allocator);
	fprintf(p->out, " peak_bytes=%" PRIu64 " peak_count=%" PRIu64 " leak_bytes=%" PRIu64
			" leak_count=%" PRIu64 " alloc_bytes=%" PRIu64 " alloc_count=%" PRIu64
			" first_addr=0x%" PRIx64 "\n",
		s->peak_bytes, s->peak_count, s->leak_bytes, s->leak_count, s->alloc_bytes,
		s->alloc_count, s->first_addr);
	return 0;
}

/* the kinds and the size classes with a count only: kinds=[malloc:N/BYTES,...]
 * sizes=[K:N,...], K the histogram's bucket (2^(K-1) <= size < 2^K) */
static int on_totals(void *ctx, const struct mt_record *r)
{
	struct parse_ctx *p = ctx;
	const struct mt_rec_totals *t = &r->totals;
	int n = 0;
	fprintf(p->out, "totals allocs=%" PRIu64 " frees=%" PRIu64 " unmatched_frees=%" PRIu64
			" bytes_allocated=%" PRIu64 " bytes_freed=%" PRIu64 " heap=%" PRIu64
			" peak_heap=%" PRIu64 " peak_time_us=%" PRIu64 " live_count=%" PRIu64 " kinds=[",
		t->n_allocs, t->n_frees, t->n_unmatched_frees, t->bytes_allocated, t->bytes_freed,
		t->heap, t->peak_heap, t->peak_time_us, t->live_count);
	for (unsigned k = 0; k < MT_TOTALS_KINDS; k++) {
		if (!t->kind_count[k] && !t->kind_bytes[k])
			continue;
		fputs(n++ ? "," : "", p->out);
		kind(p->out, k);
		fprintf(p->out, ":%" PRIu64 "/%" PRIu64, t->kind_count[k], t->kind_bytes[k]);
	}
	fputs("] sizes=[", p->out);
	n = 0;
	for (unsigned k = 0; k < MT_TOTALS_BUCKETS; k++)
		if (t->size_hist[k])
			fprintf(p->out, "%s%u:%" PRIu64, n++ ? "," : "", k, t->size_hist[k]);
	fputs("]\n", p->out);
	return 0;
}

static int on_diag(void *ctx, const struct mt_record *r)
{
	struct parse_ctx *p = ctx;
	fprintf(p->out, "diag code=%u msg=%s\n", r->diag.code, q(p, &r->diag.msg));
	return 0;
}

static int on_trailer(void *ctx, const struct mt_record *r)
{
	struct parse_ctx *p = ctx;
	fprintf(p->out, "trailer time_us=%" PRIu64 " events=%" PRIu64 " dropped=%" PRIu64 "\n",
		r->trailer.time_us, r->trailer.n_events, r->trailer.n_dropped);
	return 0;
}

static int on_unknown(void *ctx, const struct mt_record *r)
{
	struct parse_ctx *p = ctx;
	fprintf(p->out, "unknown type=%u\n", r->type);
	return 0;
}

static int on_chunk(void *ctx, uint64_t index, uint64_t offset, const struct mt_chunk *c)
{
	struct parse_ctx *p = ctx;
	fprintf(p->out, "chunk index=%" PRIu64 " offset=%" PRIu64 " raw=%u stored=%u%s\n", index, offset,
		c->raw_len, c->stored_len, c->raw_len == c->stored_len ? " (uncompressed)" : "");
	/* a broken pipe ends the walk instead of formatting the rest */
	return ferror(p->out) ? -EIO : 0;
}

int mt_report_parse(FILE *out, struct mt_capture *c)
{
	const struct mt_header *h = mt_capture_header(c);
	struct parse_ctx p = { out, MT_STRBUF_INIT, mt_header_lines(h) };
	struct mt_record_ops ops = {
		.alloc = on_alloc,
		.free = on_free,
		.thread = on_thread,
		.code = on_code,
		.stack = on_stack,
		.sample = on_sample,
		.diag = on_diag,
		.trailer = on_trailer,
		.native = on_native,
		.module = on_module,
		.hybrid = on_hybrid,
		.site = on_site,
		.totals = on_totals,
		.name = on_name,
		.unknown = on_unknown,
		.chunk = on_chunk,
	};

	fprintf(out, "header version=%u flags=0x%x%s%s%s%s%s%s%s pid=%u python=0x%08x start_ns=%" PRIu64
		     " interval_ms=%u page_size=%u main_tid=%" PRIu64,
		h->version, h->flags, h->flags & MT_HDR_ATTACHED ? ",attached" : "",
		h->flags & MT_HDR_PYALLOC ? ",pyalloc" : "", h->flags & MT_HDR_NATIVE ? ",native" : "",
		h->flags & MT_HDR_FOLLOW_FORK ? ",follow_fork" : "",
		h->flags & MT_HDR_FORKED ? ",forked" : "", mt_header_lines(h) ? ",lines" : "",
		h->flags & MT_HDR_TRACKER ? ",tracker" : "",
		h->pid, h->python_hex, h->start_ns, h->interval_ms, h->page_size, h->main_tid);
	/* arguments are NUL-separated: show them as a list */
	fprintf(out, " cmdline=[");
	for (uint32_t i = 0, start = 0; i <= h->cmdline.len; i++) {
		if (i < h->cmdline.len && h->cmdline.p[i])
			continue;
		if (i == h->cmdline.len && start == i)
			break;
		struct mt_bytes arg = { h->cmdline.p + start, i - start };
		fprintf(out, "%s%s", start ? "," : "", q(&p, &arg));
		start = i + 1;
	}
	fprintf(out, "]\n");
	int err = mt_capture_read(c, &ops, &p);
	mt_strbuf_release(&p.sb);
	if (err)
		return err;
	return ferror(out) ? -EIO : 0;
}
