/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_WRITER_H
#define MT_PAYLOAD_WRITER_H
/*
 * Event buffers and the writer thread.
 *
 * Every thread that records has its own single-producer buffer (struct
 * mt_tbuf). Its records belong to epochs: a thread takes a new epoch from
 * one global counter when another thread recorded since its last event.
 * The writer thread merges the buffers in epoch order, so the capture is
 * in event order across threads with no lock and, while one thread
 * records, no shared cache line written on the producer's path. It packs
 * records into chunks, LZ4-compresses each and writes it to the capture;
 * it also samples RSS every interval.
 *
 * Events go into a buffer as they are (the raw events below); the writer
 * codes them into ALLOC and FREE records straight in the chunk's columns
 * (mt_cols_alloc(), with each buffer's coding state), off the program's
 * threads. Other records are pushed already coded.
 *
 * Both paths are hook-safe: no lock, no allocation. When its buffer is
 * full a producer waits for the writer as long as the writer makes
 * progress; a writer that takes nothing for a second (its file system
 * hangs) has records dropped instead, at once until it moves again.
 * Dropped events are counted (mt_tbuf_reserve); a dropped record pushed
 * with mt_tbuf_push is not an event and is the caller's to handle.
 */
#include "format/record.h" /* MT_REC_HOT_MAX */

#include <stdatomic.h> /* atomic_* */
#include <stddef.h>    /* size_t */
#include <stdint.h>    /* uint64_t */

struct mt_header;

/* Raw events take 9 to 21 bytes: churn's producer fills 512 KiB in about
 * a millisecond, five times the writer's polling interval. With 256 KiB
 * it waited for the writer, and ran 35% slower; 1 MiB ran no faster. */
#define MT_TBUF_SIZE (512u << 10)
#define MT_TBUF_MASK (MT_TBUF_SIZE - 1)
#define MT_TBUF_MARKS 1024 /* epoch changes a buffer holds unconsumed */

struct mt_tbuf_mark {
	uint64_t pos;   /* where the epoch's records start */
	uint64_t epoch;
};

/* One thread's buffer: its records back to back in a ring of MT_TBUF_SIZE
 * bytes (raw events and coded records), and a ring of marks saying where
 * each of its epochs starts. The producer owns head and mhead, the writer
 * tail and mtail; each group is on its own cache line. Everything else is
 * private to writer.c, which codes the buffer's events with its own
 * coding state under the thread index of the buffer's last THREAD record. */
struct mt_tbuf {
	_Alignas(64) _Atomic uint64_t head; /* end of the committed records */
	_Atomic uint64_t mhead;             /* marks published */
	uint64_t check_at;                  /* head beyond which to look at tail */
	uint64_t tail_seen, mtail_seen;     /* producer's copies */
	_Alignas(64) _Atomic uint64_t tail; /* consumed by the writer */
	_Atomic uint64_t mtail;
	uint64_t head_seen;                 /* writer's copy of head */
	uint64_t w_epoch;                   /* writer: epoch of the records at tail */
	uint32_t w_index;                   /* writer: thread index of the events */
	struct mt_tbuf *next;               /* registry, push-only */
	struct mt_delta w_delta;            /* writer: their coding state */
	_Alignas(64) struct mt_tbuf_mark marks[MT_TBUF_MARKS];
	_Alignas(64) uint8_t data[MT_TBUF_SIZE];
	uint8_t slack[MT_REC_HOT_MAX]; /* a record reserved at the end runs on here */
};

/* What the producers read: which buffer recorded last (the inline path's
 * check: a thread takes a new epoch when it is not this one; NULL while
 * no writer runs, so that every producer takes the slow path) and whether
 * the writer runs (the slow path's check). Read-mostly while one thread
 * records. */
struct mt_writer_hot {
	_Alignas(64) struct mt_tbuf *_Atomic last;
	_Atomic uint64_t epoch;
	_Atomic int running;
};
extern struct mt_writer_hot mt_whot;

/* mt_tbuf_new() - a new buffer, registered with the writer for good (it
 * is reused by later threads, never freed). NULL if out of memory. */
struct mt_tbuf *mt_tbuf_new(void);

/* Nonzero when the CPU has a prefetch-for-write instruction. */
extern int mt_has_prefetchw;

/* Ask for the buffer's line MT_TBUF_AHEAD bytes past @p in exclusive
 * state: the writer read it a lap ago on another core, and a store that
 * has to fetch it back stalls the hook for a full cross-core miss. Past
 * the end of the ring (the last bytes of a lap) it is a harmless miss: a
 * prefetch never faults. */
#define MT_TBUF_AHEAD 256
static inline void mt__tbuf_prefetch(const uint8_t *p)
{
#if defined(__x86_64__) || defined(__i386__)
	if (__builtin_expect(mt_has_prefetchw, 1))
		__asm__ volatile("prefetchw %0" : : "m"(p[MT_TBUF_AHEAD]));
#else
	__builtin_prefetch(p + MT_TBUF_AHEAD, 1, 3);
#endif
}

uint8_t *mt_tbuf_reserve_slow(struct mt_tbuf *b);

/* A raw event: a byte whose low four bits are 0 (a coded record's head
 * never is) and whose high four are the allocator kind, the address
 * (8 bytes, host order), then for an allocation its size (8) and stack
 * id (4), for a MUNMAP its length (8). At most MT_RAW_MAX bytes. */
#define MT_RAW_MAX 21

static inline size_t mt_raw_alloc(uint8_t *p, unsigned kind, uint64_t addr, uint64_t size,
				  uint32_t stack)
{
	p[0] = (uint8_t)(kind << 4);
	__builtin_memcpy(p + 1, &addr, 8);
	__builtin_memcpy(p + 9, &size, 8);
	__builtin_memcpy(p + 17, &stack, 4);
	return 21;
}

static inline size_t mt_raw_free(uint8_t *p, unsigned kind, uint64_t addr, uint64_t size)
{
	p[0] = (uint8_t)(kind << 4);
	__builtin_memcpy(p + 1, &addr, 8);
	if (kind != MT_ALLOC_MUNMAP)
		return 9;
	__builtin_memcpy(p + 9, &size, 8);
	return 17;
}

/* mt_tbuf_reserve() / mt_tbuf_commit() - the hot path: reserve room for
 * one record of at most MT_REC_HOT_MAX bytes in @b and get where to encode
 * it (NULL: dropped, counted), then commit its length. The reservation is
 * the event's place in the order (take it at the event). While the thread
 * keeps the turn and the buffer has room, this is a few loads and one
 * store. Hook-safe; errno is kept. */
static inline uint8_t *mt_tbuf_reserve(struct mt_tbuf *b)
{
	uint64_t head = atomic_load_explicit(&b->head, memory_order_relaxed);
	if (__builtin_expect(head > b->check_at ||
				     atomic_load_explicit(&mt_whot.last, memory_order_relaxed) != b,
			     0))
		return mt_tbuf_reserve_slow(b);
	uint8_t *p = b->data + (head & MT_TBUF_MASK);
	mt__tbuf_prefetch(p);
	return p;
}

static inline void mt_tbuf_commit(struct mt_tbuf *b, size_t len)
{
	uint64_t head = atomic_load_explicit(&b->head, memory_order_relaxed);
	size_t off = (size_t)(head & MT_TBUF_MASK);
	if (__builtin_expect(off + len > MT_TBUF_SIZE, 0))
		__builtin_memcpy(b->data, b->data + MT_TBUF_SIZE, off + len - MT_TBUF_SIZE);
	atomic_store_explicit(&b->head, head + len, memory_order_release);
}

/* mt_tbuf_push() - append one encoded record of at most MT_TBUF_PUSH_MAX
 * bytes to @b, which only the calling thread writes. Returns 0, or -1 if
 * the record was dropped (not counted). */
#define MT_TBUF_PUSH_MAX (MT_CHUNK_RAW_MAX / 2)
int mt_tbuf_push(struct mt_tbuf *b, const void *rec, size_t len);

/* mt_writer_stalled() - nonzero while the writer is stuck: a wait for it
 * gave up and it has taken nothing since. Hook-safe. */
int mt_writer_stalled(void);

/* mt_writer_count_dropped() - count an event lost before it reached a
 * buffer. */
void mt_writer_count_dropped(void);

/* mt_writer_start() - open state for a new capture on @fd (the header is
 * written here) and start the writer thread. Returns 0 or -errno. */
int mt_writer_start(int fd, const struct mt_header *h);

/* mt_writer_stop() - drain the ring, write the trailer (and @diag, if not
 * NULL, as a DIAG record before it), flush, join the thread and close the
 * file. Producers must already be stopped (mt_tracking == 0); a record a
 * late producer still in a hook makes is after the capture's end: it is
 * neither written nor counted. Returns 0, -errno of the first write error
 * seen during the capture, or -MT_ECRASH if the writer faulted. */
int mt_writer_stop(const char *diag);

/* mt_writer_end_now() - async-signal-safe, for a signal that ends the
 * process: stop recording and have the writer thread finish the capture
 * (everything buffered, @diag as a TRACKING_DISABLED DIAG record, the
 * trailer), or, if another thread is already stopping it, let it; wait
 * for that at most @timeout_ns. Returns 0 once the capture is whole, -1 if
 * it is not (no capture runs, this is the writer thread or the thread
 * stopping it, a write error, a crash, or the time ran out). */
int mt_writer_end_now(const char *diag, uint64_t timeout_ns);

/* mt_writer_diag() - queue a DIAG record (any thread; one at a time: a
 * message that finds another still queued is lost). */
void mt_writer_diag(unsigned code, const char *msg);

/* mt_writer_forget() - in the child of a fork made while a capture ran:
 * the capture, its files and its writer thread are the parent's. Records
 * nothing more and closes the child's copies of the files; a new
 * mt_writer_start() may follow. */
void mt_writer_forget(void);

/* mt_writer_ok() - nonzero while the capture runs and can be written:
 * no write error, no crash of the writer, not stopped. */
int mt_writer_ok(void);

/* mt_writer_dropped() - events dropped in the running or the last
 * stopped capture. */
uint64_t mt_writer_dropped(void);


#endif /* MT_PAYLOAD_WRITER_H */
