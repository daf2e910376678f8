/* SPDX-License-Identifier: MIT */
/*
 * Per-thread event buffers and the writer thread that merges them, in
 * epoch order, into LZ4 chunks on disk. Producers run inside
 * malloc hooks: mt_tbuf_push() takes no lock, never allocates and waits
 * only, boundedly, for room in its own buffer. The writer keeps the
 * recursion guard set for life, so its own allocations are never recorded.
 */
#include "payload/writer.h"
#include "format/error.h"
#include "format/pack.h"
#include "format/record.h"
#include "payload/fault.h"
#include "payload/fd-id.h"
#include "payload/sink.h"
#include "payload/track.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h> /* __get_cpuid */
#endif
#include <errno.h>       /* errno */
#include <fcntl.h>       /* open */
#include <linux/futex.h> /* FUTEX_WAIT */
#include <limits.h>      /* INT_MAX */
#include <lz4hc.h>       /* LZ4_sizeofStateHC */
#include <pthread.h>     /* pthread_create */
#include <sched.h>       /* sched_yield */
#include <setjmp.h>      /* sigsetjmp */
#include <signal.h>      /* sigaction */
#include <stdlib.h>      /* getenv */
#include <stdatomic.h>   /* atomic_* */
#include <stdio.h>       /* snprintf */
#include <string.h>      /* memcpy */
#include <sys/mman.h>    /* mmap */
#include <sys/prctl.h>   /* PR_SET_NAME */
#include <sys/syscall.h> /* SYS_futex */
#include <time.h>        /* clock_gettime */
#include <unistd.h>      /* write, close */

#define TBUF_SIZE MT_TBUF_SIZE
#define TBUF_MASK MT_TBUF_MASK
/* Producers wake the writer when their buffer is half full, or not at
 * all while it polls: a pass that took POLL_MIN bytes or more means busy
 * producers, and the writer then comes back every POLL_NS on its own
 * (a futex wake-up costs the hook a syscall; in churn's 0.43 s run ~480
 * of them made it 4% slower). The writer gives a buffer's records back
 * up to the one that fills a chunk before it compresses the chunk, so a
 * producer has most of its buffer (about a millisecond of churn's raw
 * events) to wait on a late writer; the rest of a long run stays until
 * the chunk is written. With 1 MiB chunks churn waited for the writer ~70 times
 * in a 0.6 s run and ran about 8% slower. */
#define CHUNK_MAX MT_CHUNK_RAW_MAX
#define FLUSH_NS (250ull * 1000 * 1000) /* bound on what a SIGKILL loses */
/* How long a producer waits on a writer that takes nothing at all (a
 * write(2) hung on its file system) before its events are dropped. */
#define STALL_NS (1000ull * 1000 * 1000)
#define POLL_NS (200ull * 1000)
#define POLL_MIN (TBUF_SIZE / 16)
_Static_assert(MT_RAW_MAX <= MT_REC_HOT_MAX, "a raw event fits where a record is reserved");
_Static_assert(MT_TBUF_PUSH_MAX + MT_REC_HOT_MAX <= CHUNK_MAX, "a pushed record fits in a chunk");

struct mt_writer_hot mt_whot;
int mt_has_prefetchw;

static struct {
	_Alignas(64) _Atomic(struct mt_tbuf *) bufs;
	_Atomic uint64_t dropped;
	_Alignas(64) _Atomic uint32_t wake;
	_Atomic int stop;
	_Atomic int err;
	/* read by producers only while they wait */
	_Alignas(64) _Atomic uint32_t progress; /* bumped each time the writer takes records */
	_Atomic uint32_t waiters;               /* producers asleep on progress */
	_Atomic uint32_t stalled_at;            /* progress at which a wait gave up */
	_Atomic int stalled;                    /* a wait gave up (at stalled_at) */
	pthread_t thread;
	struct mt_sink sink; /* the capture */
	int statm_fd;
	struct mt_fd_id statm_id; /* what statm_fd was opened on */
	uint32_t interval_ms;
	long page;
	uint64_t start_mono;
	uint64_t cur_epoch; /* writer: the epoch being written */
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
	uint64_t consumed; /* bytes taken from the buffers */
	uint64_t last_flush;
	struct {
		uint8_t buf[512];
		_Atomic size_t len; /* 0: free, DIAG_BUSY: being filled */
	} diag[4];              /* messages waiting for the writer */
	_Atomic int crashed;  /* the signal that ended the writer thread */
	int test_crash;       /* MEMTRACE_TEST_WRITER_CRASH: fault at the first chunk, */
	int test_crash_late;  /* ... after coding it (=2) rather than before (=1) */
	int test_turn_delay;  /* MEMTRACE_TEST_TURN_DELAY: widen take_turn()'s race */
	/* How the capture ends (mt_writer_end_now()): who ends it, which
	 * thread, and whether it has ended; the writer thread's id. */
	_Atomic int ending;       /* END_RUNNING, END_STOP or END_SIGNAL */
	_Atomic pid_t ender;      /* the thread that ends it */
	_Atomic uint32_t ended;   /* 1 once the capture is finished */
	_Atomic pid_t writer_tid; /* 0 until the writer thread runs */
	char end_diag[128];       /* END_SIGNAL: what the capture says */
} w = { .sink = { .fd = -1 }, .statm_fd = -1 };

enum { END_RUNNING, END_STOP, END_SIGNAL };

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void futex_wake(_Atomic uint32_t *addr, int n)
{
	syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

/* Sleep while *@addr holds @val, at most @ns nanoseconds. */
static void futex_wait(_Atomic uint32_t *addr, uint32_t val, uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull) };
	syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, val, &ts, NULL, 0);
}

static void wake_writer(void)
{
	/* a plain load first: the exchange is a locked instruction */
	if (atomic_load_explicit(&w.wake, memory_order_relaxed) == 0 &&
	    atomic_exchange_explicit(&w.wake, 1, memory_order_acq_rel) == 0)
		futex_wake(&w.wake, 1);
}

/* Wake the writer even while it polls (it then sleeps on the same word
 * with a timeout): for a producer that cannot go on without it. */
static void kick_writer(void)
{
	atomic_store(&w.wake, 1);
	futex_wake(&w.wake, 1);
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
	struct mt_tbuf *old = atomic_load(&w.bufs);
	do
		b->next = old;
	while (!atomic_compare_exchange_weak(&w.bufs, &old, b));
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
		uint32_t p = atomic_load(&w.progress);
		if (cond(b, arg))
			return 0;
		if (!atomic_load_explicit(&mt_whot.running, memory_order_relaxed) ||
		    mt_writer_stalled())
			return -1;
		uint64_t now = mono_ns();
		if (!since || p != seen) {
			since = now;
			seen = p;
		} else if (now - since > STALL_NS) {
			atomic_store(&w.stalled_at, p);
			if (!atomic_exchange(&w.stalled, 1)) /* said once a capture */
				mt_writer_diag(MT_DIAG_INFO, "the capture could not be written for a "
							     "second: events were dropped until it could");
			return -1;
		}
		kick_writer();
		if (spins < 8) {
			sched_yield();
			continue;
		}
		/* A slow writer (a slow disk): sleep until it takes records,
		 * rather than spin beside it. */
		atomic_fetch_add(&w.waiters, 1);
		futex_wait(&w.progress, p, 1000 * 1000);
		atomic_fetch_sub(&w.waiters, 1);
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
		wake_writer();
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
		if (__builtin_expect(w.test_turn_delay, 0) && (head & 0x70) == 0)
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
		mt_writer_count_dropped();
	errno = saved;
	return r;
}

int mt_writer_stalled(void)
{
	return atomic_load_explicit(&w.stalled, memory_order_relaxed) &&
	       atomic_load_explicit(&w.stalled_at, memory_order_relaxed) ==
		       atomic_load_explicit(&w.progress, memory_order_relaxed);
}

/* Not once the capture has ended: such an event is after its end. */
void mt_writer_count_dropped(void)
{
	if (atomic_load_explicit(&mt_whot.running, memory_order_relaxed))
		atomic_fetch_add_explicit(&w.dropped, 1, memory_order_relaxed);
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

/* ------------------------------------------------------------------------
 * Writer side.
 * ---------------------------------------------------------------------- */
static void fail(int err)
{
	int expected = 0;
	if (atomic_compare_exchange_strong(&w.err, &expected, err))
		mt_tracking = 0; /* tracking turns itself off; the capture ends here */
}

/* The chunk being built: no records. */
static void chunk_begin(void)
{
	mt_cols_begin(&w.chunk, w.cols, w.split, CHUNK_MAX);
	w.chunk_start = mono_ns();
	w.chunk_half = 0;
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
	uint64_t now = mono_ns();
	uint64_t fill = w.chunk_half ? 2 * (now - w.chunk_half) : now - w.chunk_start;
	uint64_t idle = w.chunk_half ? 2 * (w.idle_ns - w.half_idle) : w.idle_ns - w.chunk_idle;
	uint64_t spare = w.cpus > 1 ? idle / 2 : fill / 4;
	for (int i = 0; w.hc && !w.history_lost && i < 3; i++) {
		if (!w.level_ns_per_mib[i]) {
			w.level_ns_per_mib[i] = guess_ns_per_mib[i];
			w.level_when[i] = now;
		}
		if ((w.level_ns_per_mib[i] * len >> 20) > spare && now - w.level_when[i] < LEVEL_RETRY_NS)
			continue;
		ssize_t n = mt_chunk_pack(dst, src, len, w.hist, levels[i], w.hc, w.pack);
		uint64_t took = mono_ns() - now;
		if (len >= (64u << 10)) {
			took = took < 1000000000ull ? took : 1000000000ull;
			w.level_ns_per_mib[i] = (took << 20) / len;
			w.level_when[i] = now;
		}
		return n;
	}
	return mt_chunk_pack(dst, src, len, w.hist, 0, NULL, w.pack);
}

/* Write the records taken so far as one chunk; the next starts empty. */
static void flush_chunk(void)
{
	struct mt_chunk c;
	ssize_t stored;

	if (!w.chunk.len)
		return;
	w.last_flush = mono_ns();
	if (atomic_load(&w.err)) {
		chunk_begin();
		return;
	}
	if (w.test_crash && !w.test_crash_late) /* a read of an unmapped address, as a bug would */
		(void)*(volatile const int *)(uintptr_t)w.test_crash;
	size_t raw_len = mt_cols_finish(&w.chunk);
	w.events += w.chunk.events;
	stored = compress_chunk(w.cols, raw_len, w.out + MT_CHUNK_HEADER);
	if (w.test_crash) /* the histories now hold a chunk the file will not */
		(void)*(volatile const int *)(uintptr_t)w.test_crash;
	if (stored < 0) { /* our own columns: a bug */
		fail(-EINVAL);
		chunk_begin();
		return;
	}
	if ((size_t)stored >= raw_len) { /* the histories hold it either way */
		memcpy(w.out + MT_CHUNK_HEADER, w.cols, raw_len);
		stored = (ssize_t)raw_len;
	}
	c.raw_len = (uint32_t)raw_len;
	c.stored_len = (uint32_t)stored;
	c.checksum = mt_checksum(w.out + MT_CHUNK_HEADER, (size_t)stored);
	mt_chunk_header_encode(w.out, &c);
	int e = mt_sink_write(&w.sink, w.out, MT_CHUNK_HEADER + (size_t)stored);
	if (e < 0)
		fail(e);
	chunk_begin();
}

/* Put the coded record [@p, @p + @n) in the chunk, which has room. */
static void chunk_add(const uint8_t *p, size_t n)
{
	if (mt_cols_add(&w.chunk, p, n) != (ssize_t)n) /* our own records: a bug */
		fail(-EINVAL);
}

/* Append a record the writer itself produces (samples, trailer). */
static void append(const struct mt_record *r)
{
	uint8_t buf[600];
	ssize_t n = mt_rec_encode(buf, sizeof(buf), r, NULL);
	if (n <= 0)
		return;
	if (w.chunk.len + (size_t)n > CHUNK_MAX)
		flush_chunk();
	chunk_add(buf, (size_t)n);
}

static void copy_out(const struct mt_tbuf *b, uint64_t pos, void *dst, size_t len)
{
	size_t off = (size_t)(pos & TBUF_MASK);
	size_t first = len < TBUF_SIZE - off ? len : TBUF_SIZE - off;
	memcpy(dst, b->data + off, first);
	if (first < len)
		memcpy((uint8_t *)dst + first, b->data, len - first);
}

/* The run of records at @b's tail: its epoch and where it ends (the next
 * mark, or the records committed so far). Marks up to the tail are taken
 * in on the way. Returns 0 if @b has nothing to write. */
static int front(struct mt_tbuf *b, uint64_t *epoch, uint64_t *end)
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

/* Bytes [@pos, @pos + @len) of @b's ring in one piece: in place, or
 * copied into @tmp where they wrap around. */
static const uint8_t *ring_bytes(const struct mt_tbuf *b, uint64_t pos, size_t len, uint8_t *tmp)
{
	size_t off = (size_t)(pos & TBUF_MASK);
	if (off + len <= TBUF_SIZE)
		return b->data + off;
	copy_out(b, pos, tmp, len);
	return tmp;
}

/* Give @b's records before @pos back to its producer. */
static void release(struct mt_tbuf *b, uint64_t pos)
{
	uint64_t tail = atomic_load_explicit(&b->tail, memory_order_relaxed);
	if (pos == tail)
		return;
	atomic_store_explicit(&b->tail, pos, memory_order_release);
	atomic_fetch_add(&w.progress, 1);
	if (atomic_load(&w.waiters))
		futex_wake(&w.progress, INT_MAX);
	w.consumed += pos - tail;
}

/* The length of the coded record at @pos (before @end) of @b, and the
 * thread index its head names; 0 if it does not parse, which only a bug
 * in memtrace could cause. */
static size_t coded_len(const struct mt_tbuf *b, uint64_t pos, uint64_t end, uint32_t *thread)
{
	uint8_t tmp[24];
	size_t have = end - pos < sizeof(tmp) ? (size_t)(end - pos) : sizeof(tmp);
	const uint8_t *p = ring_bytes(b, pos, have, tmp), *q = p + 1, *lim = p + have;
	uint64_t v = p[0] >> 4, body;
	if (v == 15 && mt_varint_get(&q, lim, &v) < 0)
		return 0;
	if (mt_varint_get(&q, lim, &body) < 0 || body > MT_TBUF_PUSH_MAX ||
	    (size_t)(q - p) + body > MT_TBUF_PUSH_MAX)
		return 0;
	*thread = (uint32_t)v;
	return (size_t)(q - p) + (size_t)body;
}

/* Take @b's records up to @end into the chunk, coding its raw events
 * straight into the chunk's columns: whole records, as the producer
 * publishes its head only after a whole record. A chunk that fills up is
 * written out, and the producer has the records before it back before it
 * is compressed. */
static void consume(struct mt_tbuf *b, uint64_t end)
{
	uint64_t pos = atomic_load_explicit(&b->tail, memory_order_relaxed);
	uint8_t tmp[MT_RAW_MAX];

	if (!w.chunk.events) { /* a chunk's time runs from its first event */
		w.chunk_start = mono_ns();
		w.chunk_idle = w.idle_ns;
	}
	while (pos < end) {
		if (!w.chunk_half && w.chunk.len >= CHUNK_MAX / 2) {
			w.chunk_half = mono_ns();
			w.half_idle = w.idle_ns;
		}
		uint8_t head = b->data[pos & TBUF_MASK];
		size_t n;
		if ((head & 15) == 0) {
			if (w.chunk.len + MT_REC_HOT_MAX > CHUNK_MAX) {
				release(b, pos);
				flush_chunk();
			}
			unsigned kind = head >> 4;
			int is_free = MT_FREE_KINDS >> kind & 1;
			n = !is_free ? 21 : kind == MT_ALLOC_MUNMAP ? 17 : 9;
			if (n > end - pos) { /* cannot happen: the producer commits whole events */
				fail(-EINVAL);
				pos = end;
				break;
			}
			const uint8_t *p = ring_bytes(b, pos, n, tmp);
			uint64_t addr, size = 0;
			memcpy(&addr, p + 1, 8);
			if (n > 9)
				memcpy(&size, p + 9, 8);
			if (is_free) {
				mt_cols_free(&w.chunk, &b->w_delta, b->w_index, kind, addr, size);
			} else {
				uint32_t stack;
				memcpy(&stack, p + 17, 4);
				mt_cols_alloc(&w.chunk, &b->w_delta, b->w_index, kind, addr, size, stack);
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
		if ((head & 15) == MT_REC_THREAD) {
			/* the thread (re)registered: its events from here on are
			 * coded under this index, from a fresh state */
			b->w_index = thread;
			memset(&b->w_delta, 0, sizeof(b->w_delta));
			b->w_delta.reuse = &w.reuse;
		}
		if (w.chunk.len + n > CHUNK_MAX) {
			release(b, pos);
			flush_chunk();
		}
		chunk_add(ring_bytes(b, pos, n, w.raw), n);
		pos += n;
	}
	release(b, pos);
}

/* Write every record of an epoch older than the current one: a thread
 * that read mt_whot.last a moment before another thread took over, and
 * committed its record after the writer had moved on. @except: skip. */
static void drain_late(struct mt_tbuf *except)
{
	for (struct mt_tbuf *b = atomic_load(&w.bufs); b; b = b->next) {
		uint64_t epoch, end;
		while (b != except && front(b, &epoch, &end) && epoch < w.cur_epoch)
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
static void drain(int final)
{
	/* A few passes per wake-up: chasing the producer record by record
	 * would share the cache lines it is still writing. */
	for (int pass = 0; final || pass < 4; pass++) {
		struct mt_tbuf *owner = NULL;
		uint64_t lowest = UINT64_MAX;
		for (struct mt_tbuf *b = atomic_load(&w.bufs); b; b = b->next) {
			uint64_t epoch, end;
			if (!front(b, &epoch, &end))
				continue;
			if (epoch == w.cur_epoch)
				owner = b;
			else if (epoch > w.cur_epoch && epoch < lowest)
				lowest = epoch;
		}
		if (owner) {
			uint64_t head = atomic_load_explicit(&owner->head, memory_order_acquire);
			drain_late(owner);
			uint64_t epoch, end;
			while (atomic_load_explicit(&owner->tail, memory_order_relaxed) < head &&
			       front(owner, &epoch, &end) && epoch == w.cur_epoch)
				consume(owner, end < head ? end : head);
			continue;
		}
		drain_late(NULL);
		if (lowest == UINT64_MAX)
			return;
		w.cur_epoch = lowest;
	}
}

static void sample(void)
{
	char buf[128];
	ssize_t n = mt_fd_id_is(w.statm_fd, &w.statm_id)
			    ? pread(w.statm_fd, buf, sizeof(buf) - 1, 0)
			    : -1;
	if (n <= 0)
		return;
	buf[n] = '\0';
	/* statm: size resident shared ... (in pages) */
	const char *p = buf;
	while (*p && *p != ' ')
		p++;
	uint64_t resident = 0;
	for (p++; *p >= '0' && *p <= '9'; p++)
		resident = resident * 10 + (uint64_t)(*p - '0');
	struct mt_record r = { .type = MT_REC_SAMPLE };
	r.sample.time_us = (mono_ns() - w.start_mono) / 1000;
	r.sample.rss = resident * (uint64_t)w.page;
	append(&r);
}

#define DIAG_BUSY SIZE_MAX /* a message is being put in the slot */

static void append_diag(void)
{
	for (size_t i = 0; i < sizeof(w.diag) / sizeof(w.diag[0]); i++) {
		size_t len = atomic_load(&w.diag[i].len);
		if (!len || len == DIAG_BUSY)
			continue;
		struct mt_record r = { .type = MT_REC_DIAG };
		r.diag.code = w.diag[i].buf[0];
		r.diag.msg.p = w.diag[i].buf + 1;
		r.diag.msg.len = (uint32_t)(len - 1);
		append(&r);
		atomic_store(&w.diag[i].len, 0); /* the slot is free again */
	}
}

static void diag_forget(void)
{
	for (size_t i = 0; i < sizeof(w.diag) / sizeof(w.diag[0]); i++)
		atomic_store(&w.diag[i].len, 0);
}

void mt_writer_diag(unsigned code, const char *msg)
{
	/* A few messages at a time: one that finds every slot taken is lost. */
	for (size_t i = 0; i < sizeof(w.diag) / sizeof(w.diag[0]); i++) {
		size_t free_slot = 0;
		if (!atomic_compare_exchange_strong(&w.diag[i].len, &free_slot, DIAG_BUSY))
			continue;
		size_t n = strlen(msg);
		if (n > sizeof(w.diag[i].buf) - 1)
			n = sizeof(w.diag[i].buf) - 1;
		w.diag[i].buf[0] = (uint8_t)code;
		memcpy(w.diag[i].buf + 1, msg, n);
		atomic_store(&w.diag[i].len, n + 1);
		wake_writer();
		return;
	}
}

static void writer_loop(void);
static void finish(const char *diag);

static pid_t this_tid(void)
{
	return (pid_t)syscall(SYS_gettid);
}

/* The capture is finished: tell whoever waits in mt_writer_end_now(). */
static void say_ended(void)
{
	atomic_store(&w.ended, 1);
	futex_wake(&w.ended, INT_MAX);
}

static void *writer_main(void *arg)
{
	(void)arg;
	mt_in_hook = 1; /* this thread is memtrace: never recorded */
	atomic_store(&w.writer_tid, this_tid());
	sigjmp_buf jb;
	int sig = sigsetjmp(jb, 1);
	if (sig) {
		/* Whatever this thread was doing is void: the program goes on
		 * untracked, and the capture is finished without it. */
		atomic_store(&w.crashed, sig);
		mt_tracking = 0;
		atomic_store_explicit(&mt_whot.running, 0, memory_order_release);
		return NULL;
	}
	mt_fault_arm(&jb);
	/* faults only: every other signal stays the program's */
	sigset_t faults;
	sigemptyset(&faults);
	sigaddset(&faults, SIGSEGV);
	sigaddset(&faults, SIGBUS);
	pthread_sigmask(SIG_UNBLOCK, &faults, NULL);
	writer_loop();
	mt_fault_arm(NULL);
	/* a signal is ending the process: the capture is finished here, as
	 * the thread it came to may be anywhere (inside a hook, say) */
	if (atomic_load(&w.ending) == END_SIGNAL) {
		finish(w.end_diag);
		say_ended();
	}
	return NULL;
}

/* The writer waits for records: the time counts as idle. */
static void idle_wait(uint32_t val, uint64_t ns)
{
	uint64_t t = mono_ns();
	futex_wait(&w.wake, val, ns);
	w.idle_ns += mono_ns() - t;
}

static void writer_loop(void)
{
	prctl(PR_SET_NAME, "memtrace-write", 0, 0, 0);
	/* A batch thread gets its fair share of the CPU but never preempts
	 * the thread it wakes up next to: waking every POLL_NS, the writer
	 * would otherwise often displace the program's thread holding the
	 * GIL while the others wait for it (four threads allocating: 4%
	 * slower on two CPUs, 11% on one). Failing to switch is harmless. */
	struct sched_param sp = { 0 };
	sched_setscheduler(0, SCHED_BATCH, &sp);
	uint64_t interval = (uint64_t)w.interval_ms * 1000000ull;
	uint64_t next_sample = mono_ns();

	int polling = 0;

	while (!atomic_load(&w.stop)) {
		uint64_t consumed = w.consumed;
		drain(0);
		append_diag();
		uint64_t now = mono_ns();
		if (now >= next_sample) {
			sample();
			next_sample += interval;
			if (next_sample <= now)
				next_sample = now + interval;
		}
		if (w.chunk.len && now - w.last_flush >= FLUSH_NS)
			flush_chunk();
		uint64_t wait = next_sample - now;
		if (wait > FLUSH_NS)
			wait = FLUSH_NS;
		if (w.consumed - consumed >= POLL_MIN) {
			/* Busy producers: come back soon on our own, and tell them
			 * not to wake us (a wake-up is a syscall in the hook). */
			if (!polling)
				atomic_store(&w.wake, 1);
			polling = 1;
			if (wait > POLL_NS)
				wait = POLL_NS;
			idle_wait(1, wait);
			continue;
		}
		if (polling) {
			/* wake-ups are wanted again: one more pass first, for
			 * records committed while they were not */
			polling = 0;
			atomic_store(&w.wake, 0);
			continue;
		}
		if (!atomic_exchange(&w.wake, 0))
			idle_wait(0, wait);
		atomic_store(&w.wake, 0);
	}
}

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

int mt_writer_start(int fd, const struct mt_header *h)
{
	uint8_t hdr[MT_HDR_FIXED + MT_CMDLINE_MAX];
	ssize_t n;
	int e;

	mt_has_prefetchw = cpu_has_prefetchw();
	cpu_set_t cpus;
	w.cpus = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
	if (!w.raw) {
		w.raw = mmap(NULL, MT_TBUF_PUSH_MAX, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS,
			     -1, 0);
		w.out = mmap(NULL, MT_CHUNK_HEADER + MT_PACK_MAX(MT_SPLIT_MAX(CHUNK_MAX)),
			     PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		w.hist = mmap(NULL, sizeof(*w.hist), PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		w.pack = mmap(NULL, MT_PACK_SCRATCH(MT_SPLIT_MAX(CHUNK_MAX)),
			      PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		w.cols = mmap(NULL, MT_SPLIT_MAX(CHUNK_MAX), PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		w.split = mmap(NULL, MT_SPLIT_SCRATCH(CHUNK_MAX), PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (w.raw == MAP_FAILED || w.out == MAP_FAILED || w.cols == MAP_FAILED ||
		    w.split == MAP_FAILED || w.hist == MAP_FAILED || w.pack == MAP_FAILED) {
			w.raw = NULL;
			return -ENOMEM;
		}
		/* without it, chunks are coded by LZ4's fast compressor alone */
		w.hc = mmap(NULL, (size_t)LZ4_sizeofStateHC(), PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (w.hc == MAP_FAILED)
			w.hc = NULL;
		else /* its pages now, not in the first measurement */
			memset(w.hc, 0, (size_t)LZ4_sizeofStateHC());
	}
	n = mt_header_encode(hdr, sizeof(hdr), h);
	if (n < 0)
		return (int)n;
	e = mt_sink_open(&w.sink, fd);
	if (e == 0)
		e = mt_sink_write(&w.sink, hdr, (size_t)n);
	if (e < 0) {
		w.sink = (struct mt_sink){ .fd = -1 }; /* the caller's to close */
		return e;
	}
	w.statm_fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
	if (mt_fd_id_take(w.statm_fd, &w.statm_id) < 0 && w.statm_fd >= 0) {
		close(w.statm_fd);
		w.statm_fd = -1;
	}
	w.page = sysconf(_SC_PAGESIZE);
	w.interval_ms = h->interval_ms ? h->interval_ms : 10;
	w.start_mono = mono_ns();
	w.last_flush = w.start_mono;
	chunk_begin();
	atomic_store(&w.err, 0);
	atomic_store(&w.dropped, 0);
	atomic_store(&w.stalled, 0);
	atomic_store(&w.waiters, 0);
	atomic_store(&w.stop, 0);
	diag_forget();
	atomic_store(&w.crashed, 0);
	atomic_store(&w.ending, END_RUNNING);
	atomic_store(&w.ender, 0);
	atomic_store(&w.ended, 0);
	atomic_store(&w.writer_tid, 0);
	const char *crash = getenv("MEMTRACE_TEST_WRITER_CRASH");
	w.test_crash = crash && (*crash == '1' || *crash == '2');
	w.test_crash_late = w.test_crash && *crash == '2';
	w.history_lost = 0;
	const char *delay = getenv("MEMTRACE_TEST_TURN_DELAY");
	w.test_turn_delay = delay && *delay == '1';
	/* Whatever a late producer left from an earlier capture is void. */
	for (struct mt_tbuf *b = atomic_load(&w.bufs); b; b = b->next) {
		b->head_seen = atomic_load(&b->head);
		atomic_store(&b->tail, b->head_seen);
		atomic_store(&b->mtail, atomic_load(&b->mhead));
		b->w_epoch = 0;
	}
	w.events = 0;
	memset(&w.reuse, 0, sizeof(w.reuse));
	mt_history_reset(w.hist);
	atomic_store(&mt_whot.last, NULL);
	atomic_store(&mt_whot.epoch, 0);
	w.cur_epoch = 1;
	/* The writer must not take signals meant for the program; nor may a
	 * signal that ends the process come to this thread between the start
	 * and the writer thread's creation, which it would wait for. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	atomic_store_explicit(&mt_whot.running, 1, memory_order_release);
	mt_fault_catch();
	e = pthread_create(&w.thread, NULL, writer_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (e) {
		mt_fault_release();
		atomic_store(&mt_whot.running, 0);
		w.sink = (struct mt_sink){ .fd = -1 }; /* the caller's to close */
		return -e;
	}
	return 0;
}

/* The TRAILER, after the chunk that counts the last events. */
static void append_trailer(void)
{
	struct mt_record r = { .type = MT_REC_TRAILER };
	r.trailer.time_us = (mono_ns() - w.start_mono) / 1000;
	r.trailer.n_dropped = atomic_load(&w.dropped);
	flush_chunk();
	r.trailer.n_events = w.events;
	append(&r);
	flush_chunk();
}

/* The end of a capture: what the buffers hold, the diagnostics and the
 * trailer. Guarded like the writer, as this runs the same code on one of
 * the program's threads: a fault ends it as a crash of the writer. */
static void finish(const char *diag)
{
	sigjmp_buf jb;
	int sig = sigsetjmp(jb, 1);
	if (sig) {
		atomic_store(&w.crashed, sig);
		return;
	}
	mt_fault_arm(&jb);
	drain(1);
	append_diag();
	if (diag) {
		mt_writer_diag(MT_DIAG_TRACKING_DISABLED, diag);
		append_diag();
	}
	sample();
	append_trailer();
	mt_fault_arm(NULL);
}

/* The end of a capture whose writer crashed: what it held is lost, and
 * the capture says why, as far as it can. */
static void finish_crashed(void)
{
	sigjmp_buf jb;
	if (sigsetjmp(jb, 1))
		return;
	mt_fault_arm(&jb);
	chunk_begin();
	w.test_crash = 0;
	/* The fault may have come between coding a chunk and writing it: its
	 * columns are in the histories and not in the file, so the last
	 * chunks refer to nothing before them. */
	w.history_lost = 1;
	diag_forget();
	char msg[128];
	int sig = atomic_load(&w.crashed);
	snprintf(msg, sizeof(msg), "memtrace's writer thread crashed (signal %d, %s): tracking stopped",
		 sig, sig == SIGSEGV ? "SIGSEGV" : "SIGBUS");
	mt_writer_diag(MT_DIAG_TRACKING_DISABLED, msg);
	append_diag();
	append_trailer();
	mt_fault_arm(NULL);
}

void mt_writer_forget(void)
{
	atomic_store_explicit(&mt_whot.running, 0, memory_order_relaxed);
	atomic_store_explicit(&mt_whot.last, NULL, memory_order_relaxed);
	atomic_store(&w.waiters, 0);
	atomic_store(&w.writer_tid, 0); /* the parent's */
	mt_fd_id_close(w.statm_fd, &w.statm_id); /* the parent's statm */
	w.statm_fd = -1;
	mt_sink_forget(&w.sink);
}

int mt_writer_stop(const char *diag)
{
	/* The capture ends here: a producer still in a hook now takes the
	 * slow path, which sees running off, and neither records nor waits.
	 * It must not wait: it may hold a lock of the C library that joining
	 * the writer takes (a thread exiting frees its stack's TLS under the
	 * stack cache lock, which pthread_join needs too), and the writer it
	 * would wait for is leaving. A signal that is ending the process has
	 * the writer thread finish the capture (mt_writer_end_now()). */
	int expected = END_RUNNING;
	int by_signal = !atomic_compare_exchange_strong(&w.ending, &expected, END_STOP);
	if (!by_signal)
		atomic_store(&w.ender, this_tid());
	atomic_store_explicit(&mt_whot.running, 0, memory_order_release);
	atomic_store_explicit(&mt_whot.last, NULL, memory_order_release);
	atomic_store(&w.stop, 1);
	kick_writer();
	pthread_join(w.thread, NULL);
	if (!atomic_load(&w.crashed) && !by_signal)
		finish(diag);
	int crashed = atomic_load(&w.crashed) != 0;
	if (crashed)
		finish_crashed();
	mt_fault_release();
	int err = crashed ? -MT_ECRASH : atomic_load(&w.err);
	mt_fd_id_close(w.statm_fd, &w.statm_id);
	w.statm_fd = -1;
	int e = mt_sink_close(&w.sink);
	if (!err)
		err = e;
	say_ended();
	return err;
}

int mt_writer_end_now(const char *diag, uint64_t timeout_ns)
{
	pid_t self = this_tid();
	/* 0 while the writer thread, made, has not run yet */
	if (atomic_load(&w.writer_tid) == self)
		return -1; /* the writer thread is the one interrupted */
	int expected = END_RUNNING;
	if (atomic_compare_exchange_strong(&w.ending, &expected, END_SIGNAL)) {
		atomic_store(&w.ender, self);
		if (!atomic_load(&mt_whot.running) || atomic_load(&w.crashed))
			return -1;
		size_t n = strlen(diag);
		if (n > sizeof(w.end_diag) - 1)
			n = sizeof(w.end_diag) - 1;
		memcpy(w.end_diag, diag, n);
		w.end_diag[n] = '\0';
		mt_tracking = 0;
		atomic_store_explicit(&mt_whot.running, 0, memory_order_release);
		atomic_store_explicit(&mt_whot.last, NULL, memory_order_release);
		atomic_store(&w.stop, 1);
		kick_writer();
	} else if (atomic_load(&w.ended)) {
		return atomic_load(&w.crashed) || atomic_load(&w.err) ? -1 : 0;
	} else if (atomic_load(&w.ender) == self) {
		return -1; /* this thread was ending it: it cannot wait for itself */
	}
	/* the writer thread's answer, or the end of the time given */
	uint64_t deadline = mono_ns() + timeout_ns;
	for (;;) {
		if (atomic_load(&w.ended))
			return atomic_load(&w.crashed) || atomic_load(&w.err) ? -1 : 0;
		uint64_t now = mono_ns();
		if (now >= deadline)
			return -1;
		futex_wait(&w.ended, 0, deadline - now);
	}
}

int mt_writer_ok(void)
{
	return atomic_load(&mt_whot.running) && !atomic_load(&w.err) && !atomic_load(&w.crashed);
}

uint64_t mt_writer_dropped(void)
{
	return atomic_load(&w.dropped);
}

