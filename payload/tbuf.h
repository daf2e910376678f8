/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_TBUF_H
#define MT_PAYLOAD_TBUF_H
/*
 * The per-thread event buffers: the producers' side (the hot path) and
 * the primitives the writer thread consumes them with.
 *
 * Every thread that records has its own single-producer buffer (struct
 * mt_tbuf). Its records belong to epochs: a thread takes a new epoch from
 * one global counter when another thread recorded since its last event.
 * The writer merges the buffers in epoch order (merge.h), so the capture
 * is in event order across threads with no lock and, while one thread
 * records, no shared cache line written on the producer's path.
 *
 * Events go into a buffer as they are (the raw events below); the writer
 * codes them off the program's threads. Other records are pushed already
 * coded.
 *
 * Both paths are hook-safe: no lock, no allocation. When its buffer is
 * full a producer waits for the writer as long as the writer makes
 * progress; a writer that takes nothing for a second (its file system
 * hangs) has records dropped instead, at once until it moves again (the
 * first such wait of a capture calls the on_stall callback given to
 * mt_tbuf_begin()). Dropped events are counted (mt_tbuf_reserve); a
 * dropped record pushed with mt_tbuf_push is not an event and is the
 * caller's to handle.
 *
 * The writer sleeps on a doorbell (mt_tbuf_bell_*) that producers ring
 * when their buffer is half full, and that it rings itself while it polls
 * so that they do not.
 */
#include "format/record.h" /* MT_REC_HOT_MAX */

#include <stdatomic.h> /* atomic_* */
#include <stddef.h>    /* size_t */
#include <stdint.h>    /* uint64_t */

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
 * each of its epochs starts. The producer owns head and mhead (and its
 * copies check_at, tail_seen, mtail_seen), the writer tail and mtail;
 * each group is on its own cache line. head_seen and w_epoch are the
 * consuming end's (mt_tbuf_front()); w_index, w_indexed and w_delta are merge.c's,
 * which codes the buffer's events with that coding state under the
 * thread index of the buffer's last THREAD record. */
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
	uint32_t w_indexed;                 /* writer: w_index is this capture's */
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
extern struct mt_writer_hot mt_whot __attribute__((visibility("hidden")));

/* mt_tbuf_new() - a new buffer, registered for good (it is reused by
 * later threads, never freed). NULL if out of memory. */
struct mt_tbuf *mt_tbuf_new(void);

/* Nonzero when the CPU has a prefetch-for-write instruction. */
extern int mt_has_prefetchw __attribute__((visibility("hidden")));

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
 * id (4), for a MUNMAP its length (8). A kind past 15 (the PyMem RAW
 * domain's) has the low four bits MT_RAW_X (no record type) and the kind
 * - 16 in the high four, so that the writer meets it where it meets
 * coded records, not on the other events' way. At most MT_RAW_MAX bytes. */
#define MT_RAW_MAX 21
#define MT_RAW_X 15
_Static_assert(MT_REC__END <= MT_RAW_X, "no record type is MT_RAW_X");

/* mt_raw_alloc_x() / mt_raw_free_x() - an event of a kind past 15. */
static inline size_t mt_raw_alloc_x(uint8_t *p, unsigned kind, uint64_t addr, uint64_t size,
				    uint32_t stack)
{
	p[0] = (uint8_t)(MT_RAW_X | (kind - 16) << 4);
	__builtin_memcpy(p + 1, &addr, 8);
	__builtin_memcpy(p + 9, &size, 8);
	__builtin_memcpy(p + 17, &stack, 4);
	return 21;
}

static inline size_t mt_raw_free_x(uint8_t *p, unsigned kind, uint64_t addr)
{
	p[0] = (uint8_t)(MT_RAW_X | (kind - 16) << 4);
	__builtin_memcpy(p + 1, &addr, 8);
	return 9;
}

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

/* mt_tbuf_reserve_event() / mt_tbuf_commit_event() - the same for a raw
 * event (tbuf.h's own callers, the hooks), with the head kept between the
 * two: one that runs past the ring's end stays whole in the slack after
 * it, where the writer reads it (a raw event is read in one piece from
 * where it starts; mt_tbuf_bytes() is for the other records). */
static inline uint8_t *mt_tbuf_reserve_event(struct mt_tbuf *b, uint64_t *headp)
{
	uint64_t head = atomic_load_explicit(&b->head, memory_order_relaxed);
	if (__builtin_expect(head > b->check_at ||
				     atomic_load_explicit(&mt_whot.last, memory_order_relaxed) != b,
			     0)) {
		uint8_t *p = mt_tbuf_reserve_slow(b);
		*headp = atomic_load_explicit(&b->head, memory_order_relaxed);
		return p;
	}
	*headp = head;
	uint8_t *p = b->data + (head & MT_TBUF_MASK);
	mt__tbuf_prefetch(p);
	return p;
}

static inline void mt_tbuf_commit_event(struct mt_tbuf *b, uint64_t head, size_t len)
{
	atomic_store_explicit(&b->head, head + len, memory_order_release);
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

/* mt_tbuf_stalled() - nonzero while the writer is stuck: a wait for it
 * gave up and it has taken nothing since. Hook-safe. */
int mt_tbuf_stalled(void);

/* mt_tbuf_count_dropped() - count an event lost before it reached a
 * buffer (not once the capture has ended: such an event is after it). */
void mt_tbuf_count_dropped(void);

/* mt_tbuf_dropped() - events dropped in the running or the last
 * capture. */
uint64_t mt_tbuf_dropped(void);

/* ---- The writer's side. */

/* mt_tbuf_begin() - a new capture, before mt_whot.running is set:
 * whatever a late producer left in the buffers is void, no buffer has the
 * turn, epochs start again at 1, nothing is dropped, stalled or waiting.
 * @on_stall (hook-safe) is called once a capture, on the producer's
 * thread, when a wait for the writer gives up. @turn_delay: a test's
 * widening of the race in taking a turn (MEMTRACE_TEST_TURN_DELAY). */
void mt_tbuf_begin(void (*on_stall)(void), int turn_delay);

/* mt_tbuf_give_back() - once a capture has ended and its records are
 * merged: the pages of every buffer's ring go back to the system (a thread
 * that records again faults them in, zeroed). @page: the page size. A
 * buffer is kept for good, and each thread that recorded at the same time
 * as others has one: 100 such threads held 47 MB after a detach. */
void mt_tbuf_give_back(size_t page);

/* mt_tbuf_forget() - in the child of a fork: nothing is recorded, and no
 * producer waits (those that did are the parent's threads). */
void mt_tbuf_forget(void);

/* mt_tbuf_all() - the registry: every buffer, through ->next. */
struct mt_tbuf *mt_tbuf_all(void);

/* mt_tbuf_front() - the run of records at @b's tail: its epoch and where
 * it ends (the next mark, or the records committed so far). Marks up to
 * the tail are taken in on the way. Returns 0 if @b has nothing to
 * write. Writer thread only. */
int mt_tbuf_front(struct mt_tbuf *b, uint64_t *epoch, uint64_t *end);

/* mt_tbuf_release() - give @b's records before @pos back to its producer
 * (wakes a producer waiting for room). Writer thread only. */
void mt_tbuf_release(struct mt_tbuf *b, uint64_t pos);

/* mt_tbuf_consumed() - bytes the writer took from the buffers so far. */
uint64_t mt_tbuf_consumed(void);

/* Bytes [@pos, @pos + @len) of @b's ring in one piece: in place, or
 * copied into @tmp where they wrap around. */
static inline const uint8_t *mt_tbuf_bytes(const struct mt_tbuf *b, uint64_t pos, size_t len,
					   uint8_t *tmp)
{
	size_t off = (size_t)(pos & MT_TBUF_MASK);
	if (off + len <= MT_TBUF_SIZE)
		return b->data + off;
	size_t first = MT_TBUF_SIZE - off;
	__builtin_memcpy(tmp, b->data + off, first);
	__builtin_memcpy(tmp + first, b->data, len - first);
	return tmp;
}

/* The doorbell. mt_tbuf_wake(): ring it unless it is rung (a producer, a
 * diagnostic); mt_tbuf_kick(): ring it and wake the writer even while it
 * polls (for one that cannot go on without it, and to stop it). The
 * writer sets and swaps it (mt_tbuf_bell_set/swap) and sleeps while it
 * holds a value (mt_tbuf_bell_wait, at most @ns). */
void mt_tbuf_wake(void);
void mt_tbuf_kick(void);
void mt_tbuf_bell_set(uint32_t v);
uint32_t mt_tbuf_bell_swap(uint32_t v);
void mt_tbuf_bell_wait(uint32_t val, uint64_t ns);

#endif /* MT_PAYLOAD_TBUF_H */
