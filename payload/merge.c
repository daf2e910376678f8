/* SPDX-License-Identifier: MIT */
/*
 * Merging and coding (merge.h): the buffers' records in epoch order into
 * chunks, each coded with format/pack.c and written to the sink.
 */
#include "payload/merge.h"
#include "payload/aggregate.h"
#include "format/pack.h"
#include "format/record.h"
#include "payload/sink.h"
#include "payload/tbuf.h"
#include "payload/wait.h"

#include <errno.h>    /* EINVAL */
#include <lz4hc.h>    /* LZ4_sizeofStateHC */
#include <sched.h>    /* sched_getaffinity */
#include <stdatomic.h> /* atomic_* */
#include <string.h>   /* memcpy */
#include <sys/mman.h> /* mmap */
#include <sys/types.h> /* ssize_t */

/* The writer gives a buffer's records back up to the one that fills a
 * chunk before it compresses the chunk, so a producer has most of its
 * buffer (about a millisecond of churn's raw events) to wait on a late
 * writer; the rest of a long run stays until the chunk is written. With
 * 1 MiB chunks churn waited for the writer ~70 times in a 0.6 s run and
 * ran about 8% slower. */
#define CHUNK_MAX MT_CHUNK_RAW_MAX
_Static_assert(MT_TBUF_PUSH_MAX + MT_REC_HOT_MAX <= CHUNK_MAX, "a pushed record fits in a chunk");

static struct {
	_Atomic int err;    /* the first error */
	uint64_t cur_epoch; /* the epoch being written */
	uint8_t *raw; /* a coded record that wraps around its buffer's end, put together */
	uint8_t *out;
	uint8_t *cols;  /* the chunk data (the chunk's columns) */
	uint8_t *split; /* the columns while the chunk is built */
	struct mt_cols chunk; /* the chunk being built */
	uint64_t chunk_start; /* when its first event came (about) */
	uint64_t chunk_half;  /* when it was half full, or 0 */
	uint64_t idle_ns;     /* time the writer has waited for records */
	int cpus;             /* CPUs this process may run on */
	uint64_t chunk_idle, half_idle; /* idle_ns at chunk_start and chunk_half */
	void *hc;             /* LZ4's and LZ4HC's state, or NULL */
	struct mt_history *hist; /* the columns' histories */
	uint8_t *pack;           /* mt_chunk_pack()'s scratch space */
	uint64_t level_ns_per_mib[3], level_when[3]; /* levels' cost, and when measured */
	int history_lost; /* the histories may hold columns the file lacks */
	struct mt_reuse reuse; /* the coding state the threads share */
	uint64_t events; /* ALLOC and FREE records in the chunks so far */
	int aggregate;   /* events counted (aggregate.h), not coded */
	unsigned node_opts; /* the node column's options (format/nodes.h) */
	uint64_t agg_events;
	uint64_t last_flush;
	int test_crash;      /* MEMTRACE_TEST_WRITER_CRASH: fault at the first chunk, */
	int test_crash_late; /* ... after coding it (=2) rather than before (=1) */
	struct mt_sink *sink;
	void (*on_error)(int err);
} m;

/* The first error: tracking turns itself off (on_error), the capture
 * ends here. */
static void fail(int err)
{
	int expected = 0;
	if (atomic_compare_exchange_strong(&m.err, &expected, err) && m.on_error)
		m.on_error(err);
}

/* The chunk being built: no records. */
static void chunk_begin(void)
{
	mt_cols_begin(&m.chunk, m.cols, m.split, CHUNK_MAX, m.node_opts);
	m.chunk_start = mt_mono_ns();
	m.chunk_half = 0;
}

/* The levels the writer may code a chunk at, best first: LZ4HC's 9 and 4,
 * then LZ4's fast compressor, all three against the columns' histories
 * (format/pack.h); last, LZ4's fast compressor alone. A chunk is coded at
 * the best level whose expected cost fits the time the writer has spare:
 * with more than one CPU, half the time it spent waiting for records while
 * the chunk filled, and on one CPU, where that time is the program's, a
 * quarter of the fill time. Both are taken over the chunk's second half,
 * doubled, so that a burst after a quiet spell counts as the burst it is
 * (or since its first event, for a chunk flushed before it was half full).
 * A program that allocates at a moderate rate (importing modules, say)
 * gets captures a quarter smaller than LZ4HC alone would make, and one that
 * allocates as fast as it can gets LZ4's fast compressor against the
 * histories, so that the writer keeps up. The cost per byte is measured on chunks big enough to tell (it
 * depends on the data and the machine), from a guess at first; a level
 * found too slow is tried again only after LEVEL_RETRY_NS, so that a slow
 * measurement (the writer preempted, say) does not rule it out for good,
 * and a fast producer waits for it that rarely. After a fault in the
 * writer the histories cannot be trusted, and only the last is used. */
static const int levels[3] = { 9, 4, MT_PACK_FAST_HISTORY };
static const uint64_t guess_ns_per_mib[3] = { 50000000, 25000000, 9000000 }; /* 20, 40, 110 MiB/s */
#define LEVEL_RETRY_NS (10 * 1000000000ull)

/* The coded form of the chunk data [@src, @src+@len) into @dst. */
static ssize_t compress_chunk(const uint8_t *src, size_t len, uint8_t *dst)
{
	uint64_t now = mt_mono_ns();
	uint64_t fill = m.chunk_half ? 2 * (now - m.chunk_half) : now - m.chunk_start;
	uint64_t idle = m.chunk_half ? 2 * (m.idle_ns - m.half_idle) : m.idle_ns - m.chunk_idle;
	uint64_t spare = m.cpus > 1 ? idle / 2 : fill / 4;
	for (int i = 0; m.hc && !m.history_lost && i < 3; i++) {
		if (!m.level_ns_per_mib[i]) {
			m.level_ns_per_mib[i] = guess_ns_per_mib[i];
			m.level_when[i] = now;
		}
		if ((m.level_ns_per_mib[i] * len >> 20) > spare && now - m.level_when[i] < LEVEL_RETRY_NS)
			continue;
		ssize_t n = mt_chunk_pack(dst, src, len, m.hist, levels[i], m.hc, m.pack);
		uint64_t took = mt_mono_ns() - now;
		if (len >= (64u << 10)) {
			took = took < 1000000000ull ? took : 1000000000ull;
			m.level_ns_per_mib[i] = (took << 20) / len;
			m.level_when[i] = now;
		}
		return n;
	}
	return mt_chunk_pack(dst, src, len, m.hist, 0, NULL, m.pack);
}

/* Write the records taken so far as one chunk; the next starts empty. */
void mt_merge_flush(void)
{
	struct mt_chunk c;
	ssize_t stored;

	if (!m.chunk.len)
		return;
	m.last_flush = mt_mono_ns();
	if (atomic_load(&m.err)) {
		chunk_begin();
		return;
	}
	if (m.test_crash && !m.test_crash_late) /* a read of an unmapped address, as a bug would */
		(void)*(volatile const int *)(uintptr_t)m.test_crash;
	size_t raw_len = mt_cols_finish(&m.chunk);
	uint64_t events = m.chunk.events;
	stored = compress_chunk(m.cols, raw_len, m.out + MT_CHUNK_HEADER);
	if (m.test_crash) /* the histories now hold a chunk the file will not */
		(void)*(volatile const int *)(uintptr_t)m.test_crash;
	if (stored < 0) { /* our own columns: a bug */
		fail(-EINVAL);
		chunk_begin();
		return;
	}
	if ((size_t)stored >= raw_len) { /* the histories hold it either way */
		memcpy(m.out + MT_CHUNK_HEADER, m.cols, raw_len);
		stored = (ssize_t)raw_len;
	}
	c.raw_len = (uint32_t)raw_len;
	c.stored_len = (uint32_t)stored;
	c.checksum = mt_checksum(m.out + MT_CHUNK_HEADER, (size_t)stored);
	mt_chunk_header_encode(m.out, &c);
	int e = mt_sink_write(m.sink, m.out, MT_CHUNK_HEADER + (size_t)stored);
	if (e < 0)
		fail(e);
	else
		m.events += events; /* the TRAILER counts what the file holds */
	chunk_begin();
}

/* Put the coded record [@p, @p + @n) in the chunk, which has room. */
static void chunk_add(const uint8_t *p, size_t n)
{
	if (mt_cols_add(&m.chunk, p, n) != (ssize_t)n) /* our own records: a bug */
		fail(-EINVAL);
}

/* Append a record the writer itself produces (samples, trailer). */
void mt_merge_append(const struct mt_record *r)
{
	uint8_t buf[600];
	ssize_t n = mt_rec_encode(buf, sizeof(buf), r, NULL);
	if (n <= 0)
		return;
	if (m.chunk.len + (size_t)n > CHUNK_MAX)
		mt_merge_flush();
	chunk_add(buf, (size_t)n);
}

/* The length of the coded record at @pos (before @end) of @b, and the
 * thread index its head names; 0 if it does not parse, which only a bug
 * in memtrace could cause. */
static size_t coded_len(const struct mt_tbuf *b, uint64_t pos, uint64_t end, uint32_t *thread)
{
	uint8_t tmp[24];
	size_t have = end - pos < sizeof(tmp) ? (size_t)(end - pos) : sizeof(tmp);
	const uint8_t *p = mt_tbuf_bytes(b, pos, have, tmp), *q = p + 1, *lim = p + have;
	uint64_t v = p[0] >> 4, body;
	if (v == 15 && mt_varint_get(&q, lim, &v) < 0)
		return 0;
	if (mt_varint_get(&q, lim, &body) < 0 || body > MT_TBUF_PUSH_MAX ||
	    (size_t)(q - p) + body > MT_TBUF_PUSH_MAX)
		return 0;
	*thread = (uint32_t)v;
	return (size_t)(q - p) + (size_t)body;
}

/* The THREAD record [@rec, @rec + @n) again in @out, saying that thread
 * index @prev ended: no later record names it, and a reader can drop its
 * coding state. Returns its length, or 0 to keep the record as it is. */
#define MT_THREAD_REC_MAX 128 /* a THREAD record is some 30 bytes */
static size_t thread_ended(const uint8_t *rec, size_t n, uint32_t prev,
			   uint8_t out[MT_THREAD_REC_MAX])
{
	struct mt_record r;
	if (mt_rec_decode(rec, n, &r, NULL, NULL) != (ssize_t)n || prev >= r.tidx)
		return 0;
	r.thread.ended = r.tidx - prev; /* short: the buffer had it lately */
	ssize_t k = mt_rec_encode(out, MT_THREAD_REC_MAX, &r, NULL);
	return k > 0 ? (size_t)k : 0;
}

/* The event of a raw kind (tbuf.h: mt_raw_alloc_x()) at @pos of @b,
 * before @end, into the chunk, or counted. Returns its length, or 0 if it
 * is not whole, which only a bug in memtrace could cause. Out of the way
 * of the other events (their path has no test for it: the raw events
 * take the coded records' way in): the RAW domain's calls are few. */
static __attribute__((noinline)) size_t consume_raw(struct mt_tbuf *b, uint64_t pos,
						    uint64_t end)
{
	unsigned kind = MT_ALLOC_PYMALLOC_RAW_MALLOC + (b->data[pos & MT_TBUF_MASK] >> 4);
	int is_free = MT_FREE_KINDS >> kind & 1;
	size_t n = is_free ? 9 : 21;
	if (!mt_allocator_is_raw(kind) || n > end - pos)
		return 0;
	/* whole where it starts, as every raw event (mt_tbuf_commit_event()) */
	const uint8_t *p = b->data + (pos & MT_TBUF_MASK) + 1;
	uint64_t addr, size = 0;
	uint32_t stack = 0;
	memcpy(&addr, p, 8);
	if (!is_free) {
		memcpy(&size, p + 8, 8);
		memcpy(&stack, p + 16, 4);
	}
	if (m.aggregate) {
		if (is_free)
			mt_agg_free(b->w_index, kind, addr, 0);
		else
			mt_agg_alloc(b->w_index, kind, addr, size, stack);
		m.agg_events++;
	} else if (is_free) {
		mt_cols_free_raw(&m.chunk, &b->w_delta, b->w_index, kind, addr);
	} else {
		mt_cols_alloc_raw(&m.chunk, &b->w_delta, b->w_index, kind, addr, size, stack);
	}
	return n;
}

/* Take @b's records up to @end into the chunk, coding its raw events
 * straight into the chunk's columns: whole records, as the producer
 * publishes its head only after a whole record. A chunk that fills up is
 * written out, and the producer has the records before it back before it
 * is compressed. */
static void consume(struct mt_tbuf *b, uint64_t end)
{
	uint64_t pos = atomic_load_explicit(&b->tail, memory_order_relaxed);

	if (!m.chunk.events) { /* a chunk's time runs from its first event */
		m.chunk_start = mt_mono_ns();
		m.chunk_idle = m.idle_ns;
	}
	while (pos < end) {
		if (!m.chunk_half && m.chunk.len >= CHUNK_MAX / 2) {
			m.chunk_half = mt_mono_ns();
			m.half_idle = m.idle_ns;
		}
		uint8_t head = b->data[pos & MT_TBUF_MASK];
		size_t n;
		if ((head & 15) == 0) {
			if (m.chunk.len + MT_REC_HOT_MAX > CHUNK_MAX) {
				mt_tbuf_release(b, pos);
				mt_merge_flush();
			}
			unsigned kind = head >> 4;
			int is_free = MT_FREE_KINDS >> kind & 1;
			n = !is_free ? 21 : kind == MT_ALLOC_MUNMAP ? 17 : 9;
			if (n > end - pos) { /* cannot happen: the producer commits whole events */
				fail(-EINVAL);
				pos = end;
				break;
			}
			/* whole, past the ring's end into its slack if need be
			 * (mt_tbuf_commit_event()) */
			const uint8_t *p = b->data + (pos & MT_TBUF_MASK);
			uint64_t addr, size = 0;
			memcpy(&addr, p + 1, 8);
			if (n > 9)
				memcpy(&size, p + 9, 8);
			if (m.aggregate) {
				uint32_t stack;
				if (is_free) {
					mt_agg_free(b->w_index, kind, addr, size);
				} else {
					memcpy(&stack, p + 17, 4);
					mt_agg_alloc(b->w_index, kind, addr, size, stack);
				}
				m.agg_events++;
			} else if (is_free) {
				mt_cols_free(&m.chunk, &b->w_delta, b->w_index, kind, addr, size);
			} else {
				uint32_t stack;
				memcpy(&stack, p + 17, 4);
				mt_cols_alloc(&m.chunk, &b->w_delta, b->w_index, kind, addr, size, stack);
			}
			pos += n;
			continue;
		}
		if (__builtin_expect((head & 15) == MT_RAW_X, 0)) { /* a raw kind's event */
			if (m.chunk.len + MT_REC_HOT_MAX > CHUNK_MAX) {
				mt_tbuf_release(b, pos);
				mt_merge_flush();
			}
			n = consume_raw(b, pos, end);
			if (!n) { /* cannot happen: the producer commits whole events */
				fail(-EINVAL);
				pos = end;
				break;
			}
			pos += n;
			continue;
		}
		uint32_t thread;
		n = coded_len(b, pos, end, &thread);
		if (!n || n > end - pos) { /* cannot happen: the records are ours */
			fail(-EINVAL);
			pos = end;
			break;
		}
		uint8_t redone[MT_THREAD_REC_MAX];
		size_t len = 0;
		if ((head & 15) == MT_REC_THREAD) {
			/* the thread (re)registered, or another took over the
			 * buffer of one that ended: its events from here on are
			 * coded under this index, from a fresh state, and the
			 * index before it is over */
			if (b->w_indexed)
				len = thread_ended(mt_tbuf_bytes(b, pos, n, m.raw), n, b->w_index,
						   redone);
			b->w_index = thread;
			b->w_indexed = 1;
			memset(&b->w_delta, 0, sizeof(b->w_delta));
			b->w_delta.reuse = &m.reuse;
		}
		if (m.chunk.len + (len ? len : n) > CHUNK_MAX) {
			mt_tbuf_release(b, pos);
			mt_merge_flush();
		}
		if (len)
			chunk_add(redone, len);
		else
			chunk_add(mt_tbuf_bytes(b, pos, n, m.raw), n);
		pos += n;
	}
	mt_tbuf_release(b, pos);
}

/* Write every record of an epoch older than the current one: a thread
 * that read mt_whot.last a moment before another thread took over, and
 * committed its record after the writer had moved on. @except: skip. */
static void drain_late(struct mt_tbuf *except)
{
	for (struct mt_tbuf *b = mt_tbuf_all(); b; b = b->next) {
		uint64_t epoch, end;
		while (b != except && mt_tbuf_front(b, &epoch, &end) && epoch < m.cur_epoch)
			consume(b, end);
	}
}

/* Merge the buffers into the chunk in epoch order. Each epoch belongs to
 * one thread, whose records of it are consecutive in its buffer; epochs
 * not seen yet (a thread between taking its epoch and committing) are
 * passed over and their records written late, where they arrive. That
 * keeps every order that matters: if a record R of one thread happened
 * before a record S of another (a free before the reuse of its address),
 * R was committed before S, so it is visible once S is; late records are
 * written before the records of the current epoch up to a head read after
 * them. */
void mt_merge_drain(int final)
{
	/* Every epoch taken before this drain, then a few passes more:
	 * chasing the producer record by record would share the cache
	 * lines it is still writing. */
	uint64_t upto = atomic_load_explicit(&mt_whot.epoch, memory_order_acquire);
	for (int pass = 0; final || pass < 4 || m.cur_epoch < upto; pass++) {
		struct mt_tbuf *owner = NULL;
		uint64_t lowest = UINT64_MAX;
		for (struct mt_tbuf *b = mt_tbuf_all(); b; b = b->next) {
			uint64_t epoch, end;
			if (!mt_tbuf_front(b, &epoch, &end))
				continue;
			if (epoch == m.cur_epoch)
				owner = b;
			else if (epoch > m.cur_epoch && epoch < lowest)
				lowest = epoch;
		}
		if (owner) {
			uint64_t head = atomic_load_explicit(&owner->head, memory_order_acquire);
			drain_late(owner);
			uint64_t epoch, end;
			while (atomic_load_explicit(&owner->tail, memory_order_relaxed) < head &&
			       mt_tbuf_front(owner, &epoch, &end) && epoch == m.cur_epoch)
				consume(owner, end < head ? end : head);
			continue;
		}
		drain_late(NULL);
		if (lowest == UINT64_MAX)
			return;
		m.cur_epoch = lowest;
	}
}

static void *map(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

int mt_merge_init(void)
{
	if (m.raw)
		return 0;
	struct {
		void *p;
		size_t len;
	} maps[] = {
		{ NULL, MT_TBUF_PUSH_MAX },
		{ NULL, MT_CHUNK_HEADER + MT_PACK_MAX(MT_SPLIT_MAX(CHUNK_MAX)) },
		{ NULL, sizeof(*m.hist) },
		{ NULL, MT_PACK_SCRATCH(MT_SPLIT_MAX(CHUNK_MAX)) },
		{ NULL, MT_SPLIT_MAX(CHUNK_MAX) },
		{ NULL, MT_SPLIT_SCRATCH(CHUNK_MAX) },
	};
	size_t n = sizeof(maps) / sizeof(maps[0]);
	for (size_t i = 0; i < n; i++) {
		if ((maps[i].p = map(maps[i].len)))
			continue;
		while (i--) /* all or nothing */
			munmap(maps[i].p, maps[i].len);
		return -ENOMEM;
	}
	m.out = maps[1].p;
	m.hist = maps[2].p;
	m.pack = maps[3].p;
	m.cols = maps[4].p;
	m.split = maps[5].p;
	m.raw = maps[0].p; /* last: says the rest are there */
	/* without it, chunks are coded by LZ4's fast compressor alone */
	m.hc = map((size_t)LZ4_sizeofStateHC());
	if (m.hc) /* its pages now, not in the first measurement */
		memset(m.hc, 0, (size_t)LZ4_sizeofStateHC());
	return 0;
}

void mt_merge_begin(struct mt_sink *sink, void (*on_error)(int err), int test_crash, uint64_t now,
		    int aggregate, unsigned node_opts)
{
	m.aggregate = aggregate;
	m.node_opts = node_opts;
	m.agg_events = 0;
	if (aggregate)
		mt_agg_begin();
	cpu_set_t cpus;
	m.cpus = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
	m.sink = sink;
	m.on_error = on_error;
	m.last_flush = now;
	chunk_begin();
	atomic_store(&m.err, 0);
	m.test_crash = test_crash != 0;
	m.test_crash_late = test_crash == 2;
	m.history_lost = 0;
	m.events = 0;
	memset(&m.reuse, 0, sizeof(m.reuse));
	/* an index a buffer had in an earlier capture is not this one's */
	for (struct mt_tbuf *b = mt_tbuf_all(); b; b = b->next)
		b->w_indexed = 0;
	mt_history_reset(m.hist);
	mt_history_layout(m.hist, node_opts);
	m.cur_epoch = 1;
}

void mt_merge_flush_older(uint64_t now, uint64_t ns)
{
	if (m.chunk.len && now - m.last_flush >= ns)
		mt_merge_flush();
}

void mt_merge_idle(uint64_t ns)
{
	m.idle_ns += ns;
}

void mt_merge_crashed(void)
{
	chunk_begin();
	m.test_crash = 0;
	m.history_lost = 1;
}

uint64_t mt_merge_events(void)
{
	return m.aggregate ? m.agg_events : m.events;
}

int mt_merge_err(void)
{
	return atomic_load(&m.err);
}
