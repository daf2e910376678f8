/* SPDX-License-Identifier: MIT */
/*
 * The per-thread event buffers (tbuf.h): the producers' slow path (room,
 * the turn, waiting for the writer) and the writer's consuming end of
 * each ring. Producers run inside malloc hooks: nothing here takes a lock
 * or allocates, and a producer waits only, boundedly, for room in its own
 * buffer.
 */
#include "payload/tbuf.h"
#include "payload/wait.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h> /* __get_cpuid */
#endif
#include <errno.h>    /* errno */
#include <limits.h>   /* INT_MAX */
#include <sched.h>    /* sched_yield */
#include <string.h>   /* memcpy */
#include <sys/mman.h> /* mmap, madvise */

#define TBUF_SIZE MT_TBUF_SIZE
#define TBUF_MASK MT_TBUF_MASK
/* How long a producer waits on a writer that takes nothing at all (a
 * write(2) hung on its file system) before its events are dropped. */
#define STALL_NS (1000ull * 1000 * 1000)
_Static_assert(MT_RAW_MAX <= MT_REC_HOT_MAX, "a raw event fits where a record is reserved");

struct mt_writer_hot mt_whot;
int mt_has_prefetchw;

static struct {
	_Alignas(64) _Atomic(struct mt_tbuf *) bufs; /* the registry */
	_Atomic uint64_t dropped;
	/* read by producers on the slow path: not on the writer's lines */
	void (*on_stall)(void); /* said so, once a capture */
	int turn_delay;         /* MEMTRACE_TEST_TURN_DELAY: widen take_turn()'s race */
	_Alignas(64) _Atomic uint32_t wake; /* the doorbell */
	/* read by producers only while they wait */
	_Alignas(64) _Atomic uint32_t progress; /* bumped each time the writer takes records */
	_Atomic uint32_t waiters;               /* producers asleep on progress */
	_Atomic uint32_t stalled_at;            /* progress at which a wait gave up */
	_Atomic int stalled;                    /* a wait gave up (at stalled_at) */
	uint64_t consumed;                      /* writer: bytes taken from the buffers */
} t;

void mt_tbuf_wake(void)
{
	/* a plain load first: the exchange is a locked instruction */
	if (atomic_load_explicit(&t.wake, memory_order_relaxed) == 0 &&
	    atomic_exchange_explicit(&t.wake, 1, memory_order_acq_rel) == 0)
		mt_futex_wake(&t.wake, 1);
}

/* Wake the writer even while it polls (it then sleeps on the same word
 * with a timeout): for a producer that cannot go on without it. */
void mt_tbuf_kick(void)
{
	atomic_store(&t.wake, 1);
	mt_futex_wake(&t.wake, 1);
}

/* ------------------------------------------------------------------------
 * Producer side.
 * ---------------------------------------------------------------------- */
struct mt_tbuf *mt_tbuf_new(void)
{
	struct mt_tbuf *b = mmap(NULL, sizeof(*b), PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (b == MAP_FAILED)
		return NULL;
	struct mt_tbuf *old = atomic_load(&t.bufs);
	do
		b->next = old;
	while (!atomic_compare_exchange_weak(&t.bufs, &old, b));
	return b;
}

static void copy_in(struct mt_tbuf *b, uint64_t pos, const void *src, size_t len)
{
	size_t off = (size_t)(pos & TBUF_MASK);
	size_t first = len < TBUF_SIZE - off ? len : TBUF_SIZE - off;
	memcpy(b->data + off, src, first);
	if (first < len)
		memcpy(b->data, (const uint8_t *)src + first, len - first);
}

/* Wait until @cond(b) holds (the writer consumed enough), as long as the
 * writer makes progress: a busy or starved writer is waited for, but a
 * hook must never hang the program on one that takes nothing for
 * STALL_NS. After such a wait gives up, the next ones give up at once
 * until the writer moves again. Returns 0, or -1 when the writer is stuck
 * or tracking stops. */
static int wait_writer(struct mt_tbuf *b, int (*cond)(struct mt_tbuf *, uint64_t), uint64_t arg)
{
	uint64_t since = 0;
	uint32_t seen = 0;
	for (unsigned spins = 0;; spins++) {
		/* progress before the condition: the writer moves the tail,
		 * then progress, so a sleep on a progress that has not moved
		 * since is a sleep on a condition still false */
		uint32_t p = atomic_load(&t.progress);
		if (cond(b, arg))
			return 0;
		if (!atomic_load_explicit(&mt_whot.running, memory_order_relaxed) ||
		    mt_tbuf_stalled())
			return -1;
		uint64_t now = mt_mono_ns();
		if (!since || p != seen) {
			since = now;
			seen = p;
		} else if (now - since > STALL_NS) {
			atomic_store(&t.stalled_at, p);
			if (!atomic_exchange(&t.stalled, 1) && t.on_stall) /* once a capture */
				t.on_stall();
			return -1;
		}
		mt_tbuf_kick();
		if (spins < 8) {
			sched_yield();
			continue;
		}
		/* A slow writer (a slow disk): sleep until it takes records,
		 * rather than spin beside it. */
		atomic_fetch_add(&t.waiters, 1);
		mt_futex_wait(&t.progress, p, 1000 * 1000);
		atomic_fetch_sub(&t.waiters, 1);
	}
}

/* Room for @arg more bytes after head (reads the writer's tail). */
static int has_room(struct mt_tbuf *b, uint64_t total)
{
	b->tail_seen = atomic_load_explicit(&b->tail, memory_order_acquire);
	return atomic_load_explicit(&b->head, memory_order_relaxed) + total - b->tail_seen <=
	       TBUF_SIZE;
}

/* Make room for @total bytes at head, and set the next head at which to
 * look at the writer's progress again: reading the writer's tail costs a
 * cache miss, so it is done once per sixteenth of the buffer, not per
 * record. Returns 0 or -1 (full). */
static int make_room(struct mt_tbuf *b, uint64_t head, uint64_t total)
{
	if (!has_room(b, total) || head + total - b->tail_seen > TBUF_SIZE / 2)
		mt_tbuf_wake();
	if (wait_writer(b, has_room, total) < 0)
		return -1;
	uint64_t limit = b->tail_seen + TBUF_SIZE - MT_REC_HOT_MAX;
	uint64_t next = head + TBUF_SIZE / 16;
	b->check_at = next < limit ? next : limit;
	return 0;
}

static int has_mark_room(struct mt_tbuf *b, uint64_t unused)
{
	(void)unused;
	b->mtail_seen = atomic_load_explicit(&b->mtail, memory_order_acquire);
	return atomic_load_explicit(&b->mhead, memory_order_relaxed) - b->mtail_seen <
	       MT_TBUF_MARKS;
}

/* Order across threads. Taken at the event (a free before the real free,
 * an allocation after the real call) and after room is made, so that every
 * epoch taken holds at least one record. While one thread records, the
 * inline path only loads a line nobody writes; these locked operations
 * (which cost as much as the rest of the event) run only when the
 * recording thread changes. If this thread's event happens after another
 * thread's event, through whatever synchronisation ordered them, it sees
 * that thread in mt_whot.last and takes a later epoch.
 *
 * The turn is the pair (last = this buffer, a new epoch), and it holds
 * only if last still names this buffer once the epoch is taken. Otherwise
 * a thread B could store last and take its epoch between our store and our
 * add: last would say B while our epoch is the later one, and B's next
 * events, made after ours, would stay in B's earlier epoch on the inline
 * path. In the single order of these sequentially consistent operations,
 * a turn that holds took its epoch before any other thread's next store of
 * last, so every later turn takes a later epoch. The mark is published
 * before the records it covers, so a writer that sees them sees it. */
static int take_turn(struct mt_tbuf *b, uint64_t head)
{
	uint64_t m = atomic_load_explicit(&b->mhead, memory_order_relaxed);
	if (m - b->mtail_seen >= MT_TBUF_MARKS && wait_writer(b, has_mark_room, 0) < 0)
		return -1;
	uint64_t epoch;
	for (;;) {
		atomic_store_explicit(&mt_whot.last, b, memory_order_seq_cst);
		if (__builtin_expect(t.turn_delay, 0) && (head & 0x70) == 0)
			for (volatile int i = 0; i < 3000; i++)
				;
		epoch = atomic_fetch_add_explicit(&mt_whot.epoch, 1, memory_order_seq_cst) + 1;
		if (atomic_load_explicit(&mt_whot.last, memory_order_seq_cst) == b)
			break;
		if (!atomic_load_explicit(&mt_whot.running, memory_order_relaxed))
			return -1; /* the capture ended meanwhile */
	}
	b->marks[m % MT_TBUF_MARKS] = (struct mt_tbuf_mark){ head, epoch };
	atomic_store_explicit(&b->mhead, m + 1, memory_order_release);
	return 0;
}

/* Room for @total bytes and the turn, or -1: dropped (counted if @event)
 * or after the capture's end (not recorded, not counted). Keeps errno. */
static int prepare(struct mt_tbuf *b, uint64_t total, int event)
{
	int saved = errno, r = -1;
	uint64_t head = atomic_load_explicit(&b->head, memory_order_relaxed);
	if (atomic_load_explicit(&mt_whot.running, memory_order_relaxed) &&
	    (head + total <= b->check_at + MT_REC_HOT_MAX || make_room(b, head, total) == 0) &&
	    (atomic_load_explicit(&mt_whot.last, memory_order_relaxed) == b ||
	     take_turn(b, head) == 0))
		r = 0;
	else if (event)
		mt_tbuf_count_dropped();
	errno = saved;
	return r;
}

int mt_tbuf_stalled(void)
{
	return atomic_load_explicit(&t.stalled, memory_order_relaxed) &&
	       atomic_load_explicit(&t.stalled_at, memory_order_relaxed) ==
		       atomic_load_explicit(&t.progress, memory_order_relaxed);
}

/* Not once the capture has ended: such an event is after its end. */
void mt_tbuf_count_dropped(void)
{
	if (atomic_load_explicit(&mt_whot.running, memory_order_relaxed))
		atomic_fetch_add_explicit(&t.dropped, 1, memory_order_relaxed);
}

uint8_t *mt_tbuf_reserve_slow(struct mt_tbuf *b)
{
	if (prepare(b, MT_REC_HOT_MAX, 1) < 0)
		return NULL;
	return b->data + (atomic_load_explicit(&b->head, memory_order_relaxed) & TBUF_MASK);
}

int mt_tbuf_push(struct mt_tbuf *b, const void *rec, size_t len)
{
	if (len > MT_TBUF_PUSH_MAX || prepare(b, len, 0) < 0)
		return -1;
	uint64_t head = atomic_load_explicit(&b->head, memory_order_relaxed);
	copy_in(b, head, rec, len);
	atomic_store_explicit(&b->head, head + len, memory_order_release);
	return 0;
}

uint64_t mt_tbuf_dropped(void)
{
	return atomic_load(&t.dropped);
}

/* ------------------------------------------------------------------------
 * The writer's side.
 * ---------------------------------------------------------------------- */
/* PREFETCHW is CPUID 0x80000001 ECX bit 8 (AMD since K8, Intel since
 * Broadwell); elsewhere the opcode may fault, so it is used only if set. */
static int cpu_has_prefetchw(void)
{
#if defined(__x86_64__) || defined(__i386__)
	unsigned a, b, c, d;
	return __get_cpuid(0x80000001u, &a, &b, &c, &d) && (c & (1u << 8));
#else
	return 0;
#endif
}
void mt_tbuf_begin(void (*on_stall)(void), int turn_delay)
{
	mt_has_prefetchw = cpu_has_prefetchw();
	t.on_stall = on_stall;
	t.turn_delay = turn_delay;
	atomic_store(&t.dropped, 0);
	atomic_store(&t.stalled, 0);
	atomic_store(&t.waiters, 0);
	/* Whatever a late producer left from an earlier capture is void. */
	for (struct mt_tbuf *b = atomic_load(&t.bufs); b; b = b->next) {
		b->head_seen = atomic_load(&b->head);
		atomic_store(&b->tail, b->head_seen);
		atomic_store(&b->mtail, atomic_load(&b->mhead));
		b->w_epoch = 0;
	}
	atomic_store(&mt_whot.last, NULL);
	atomic_store(&mt_whot.epoch, 0);
}

void mt_tbuf_give_back(size_t page)
{
	for (struct mt_tbuf *b = atomic_load(&t.bufs); b; b = b->next) {
		uintptr_t lo = ((uintptr_t)b->data + page - 1) & ~(uintptr_t)(page - 1);
		uintptr_t hi = ((uintptr_t)b->data + MT_TBUF_SIZE) & ~(uintptr_t)(page - 1);
		/* a late producer's record, void anyway, only faults a page
		 * back in */
		if (hi > lo)
			(void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
	}
}

void mt_tbuf_forget(void)
{
	atomic_store_explicit(&mt_whot.running, 0, memory_order_relaxed);
	atomic_store_explicit(&mt_whot.last, NULL, memory_order_relaxed);
	atomic_store(&t.waiters, 0);
}

struct mt_tbuf *mt_tbuf_all(void)
{
	return atomic_load(&t.bufs);
}

int mt_tbuf_front(struct mt_tbuf *b, uint64_t *epoch, uint64_t *end)
{
	uint64_t tail = atomic_load_explicit(&b->tail, memory_order_relaxed);
	/* Reading head pulls the producer's busiest cache line over: only
	 * when the records seen so far are used up. Head first: a mark is
	 * published before the records after it, so every mark below the
	 * head read is visible below. */
	if (tail == b->head_seen)
		b->head_seen = atomic_load_explicit(&b->head, memory_order_acquire);
	uint64_t mt = atomic_load_explicit(&b->mtail, memory_order_relaxed);
	uint64_t mh = atomic_load_explicit(&b->mhead, memory_order_acquire);
	while (mt < mh && b->marks[mt % MT_TBUF_MARKS].pos <= tail) {
		b->w_epoch = b->marks[mt % MT_TBUF_MARKS].epoch;
		mt++;
	}
	atomic_store_explicit(&b->mtail, mt, memory_order_release);
	if (tail == b->head_seen)
		return 0;
	*epoch = b->w_epoch;
	*end = b->head_seen;
	if (mt < mh && b->marks[mt % MT_TBUF_MARKS].pos < *end)
		*end = b->marks[mt % MT_TBUF_MARKS].pos;
	return 1;
}

void mt_tbuf_release(struct mt_tbuf *b, uint64_t pos)
{
	uint64_t tail = atomic_load_explicit(&b->tail, memory_order_relaxed);
	if (pos == tail)
		return;
	atomic_store_explicit(&b->tail, pos, memory_order_release);
	atomic_fetch_add(&t.progress, 1);
	if (atomic_load(&t.waiters))
		mt_futex_wake(&t.progress, INT_MAX);
	t.consumed += pos - tail;
}

uint64_t mt_tbuf_consumed(void)
{
	return t.consumed;
}

void mt_tbuf_bell_set(uint32_t v)
{
	atomic_store(&t.wake, v);
}

uint32_t mt_tbuf_bell_swap(uint32_t v)
{
	return atomic_exchange(&t.wake, v);
}

void mt_tbuf_bell_wait(uint32_t val, uint64_t ns)
{
	mt_futex_wait(&t.wake, val, ns);
}
