/* SPDX-License-Identifier: MIT */
/*
 * The event ring (lock-free, many producers, one consumer) and the writer
 * thread that turns it into LZ4 chunks on disk. Producers run inside
 * malloc hooks: mt_ring_push() takes no lock, never allocates and never
 * waits on anything but ring space. The writer keeps the recursion guard
 * set for life, so its own allocations are never recorded.
 */
#include "payload/writer.h"
#include "format/record.h"
#include "payload/track.h"

#include <errno.h>       /* errno */
#include <linux/futex.h> /* FUTEX_WAIT */
#include <lz4.h>         /* LZ4_compress_default */
#include <pthread.h>     /* pthread_create */
#include <sched.h>       /* sched_yield */
#include <signal.h>      /* sigfillset */
#include <stdatomic.h>   /* atomic_* */
#include <string.h>      /* memcpy */
#include <sys/mman.h>    /* mmap */
#include <sys/prctl.h>   /* PR_SET_NAME */
#include <sys/syscall.h> /* SYS_futex */
#include <time.h>        /* clock_gettime */
#include <unistd.h>      /* write, close */
#include <fcntl.h>       /* open */

#define RING_SIZE (2u << 20)
#define RING_MASK (RING_SIZE - 1)
#define CHUNK_MAX MT_CHUNK_RAW_MAX
#define FLUSH_NS (250ull * 1000 * 1000) /* bound on what a SIGKILL loses */
#define FULL_WAIT_NS (500ull * 1000 * 1000)

static struct {
	uint8_t *ring;
	_Atomic uint64_t head, tail;
	_Atomic int running;
	_Atomic int stop;
	_Atomic uint32_t wake;
	_Atomic uint64_t dropped;
	_Atomic int err;
	pthread_t thread;
	int fd, statm_fd;
	uint32_t interval_ms;
	long page;
	uint64_t start_mono;
	uint64_t n_events;
	uint8_t *raw, *out;
	size_t raw_len;
	uint64_t last_flush;
	uint8_t diag_buf[512];
	_Atomic size_t diag_len;
} w = { .fd = -1, .statm_fd = -1 };

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void futex_wake(_Atomic uint32_t *addr)
{
	syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void wake_writer(void)
{
	if (atomic_exchange_explicit(&w.wake, 1, memory_order_acq_rel) == 0)
		futex_wake(&w.wake);
}

/* ------------------------------------------------------------------------
 * Producer side.
 * ---------------------------------------------------------------------- */
int mt_ring_push(const void *rec, size_t len)
{
	uint64_t total = (4 + len + 3) & ~(uint64_t)3;
	uint64_t h, t, waited_since = 0;

	if (!atomic_load_explicit(&w.running, memory_order_acquire) || total > RING_SIZE / 4) {
		atomic_fetch_add_explicit(&w.dropped, 1, memory_order_relaxed);
		return -1;
	}
	h = atomic_load_explicit(&w.head, memory_order_relaxed);
	for (;;) {
		t = atomic_load_explicit(&w.tail, memory_order_acquire);
		if (h + total - t > RING_SIZE) {
			/* Full: the writer is behind. Wait for it, boundedly: a
			 * hook must never hang the program. */
			uint64_t now = mono_ns();
			if (!waited_since)
				waited_since = now;
			else if (now - waited_since > FULL_WAIT_NS ||
				 !atomic_load_explicit(&w.running, memory_order_relaxed)) {
				atomic_fetch_add_explicit(&w.dropped, 1, memory_order_relaxed);
				return -1;
			}
			wake_writer();
			sched_yield();
			h = atomic_load_explicit(&w.head, memory_order_relaxed);
			continue;
		}
		if (atomic_compare_exchange_weak_explicit(&w.head, &h, h + total,
							  memory_order_acq_rel,
							  memory_order_relaxed))
			break;
	}
	size_t off = (size_t)(h & RING_MASK);
	size_t data = (off + 4) & RING_MASK;
	size_t first = len < RING_SIZE - data ? len : RING_SIZE - data;
	memcpy(w.ring + data, rec, first);
	if (first < len)
		memcpy(w.ring, (const uint8_t *)rec + first, len - first);
	atomic_store_explicit((_Atomic uint32_t *)(w.ring + off), (uint32_t)len,
			      memory_order_release);
	if (h + total - t > RING_SIZE / 4)
		wake_writer();
	return 0;
}

/* ------------------------------------------------------------------------
 * Writer side.
 * ---------------------------------------------------------------------- */
static int write_full(int fd, const uint8_t *p, size_t len)
{
	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -ENOSPC;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static void fail(int err)
{
	int expected = 0;
	if (atomic_compare_exchange_strong(&w.err, &expected, err))
		mt_tracking = 0; /* tracking turns itself off; the capture ends here */
}

static void flush_chunk(void)
{
	struct mt_chunk c;
	int stored;

	if (!w.raw_len)
		return;
	w.last_flush = mono_ns();
	if (atomic_load(&w.err)) {
		w.raw_len = 0;
		return;
	}
	stored = LZ4_compress_default((const char *)w.raw, (char *)w.out + MT_CHUNK_HEADER,
				      (int)w.raw_len, LZ4_compressBound(CHUNK_MAX));
	if (stored <= 0 || (size_t)stored >= w.raw_len) {
		memcpy(w.out + MT_CHUNK_HEADER, w.raw, w.raw_len);
		stored = (int)w.raw_len;
	}
	c.raw_len = (uint32_t)w.raw_len;
	c.stored_len = (uint32_t)stored;
	c.checksum = mt_checksum(w.out + MT_CHUNK_HEADER, (size_t)stored);
	mt_chunk_header_encode(w.out, &c);
	int e = write_full(w.fd, w.out, MT_CHUNK_HEADER + (size_t)stored);
	if (e < 0)
		fail(e);
	w.raw_len = 0;
}

/* Append a record the writer itself produces (samples, trailer). */
static void append(const struct mt_record *r)
{
	uint8_t buf[600];
	ssize_t n = mt_rec_encode(buf, sizeof(buf), r, NULL);
	if (n <= 0)
		return;
	if (w.raw_len + (size_t)n > CHUNK_MAX)
		flush_chunk();
	memcpy(w.raw + w.raw_len, buf, (size_t)n);
	w.raw_len += (size_t)n;
}

static void drain(void)
{
	uint64_t t = atomic_load_explicit(&w.tail, memory_order_relaxed);
	uint64_t h = atomic_load_explicit(&w.head, memory_order_acquire);

	while (t != h) {
		size_t off = (size_t)(t & RING_MASK);
		uint32_t len = atomic_load_explicit((_Atomic uint32_t *)(w.ring + off),
						    memory_order_acquire);
		if (!len)
			break; /* reserved, not yet published */
		uint64_t total = (4 + (uint64_t)len + 3) & ~(uint64_t)3;
		if (w.raw_len + len > CHUNK_MAX)
			flush_chunk();
		size_t data = (off + 4) & RING_MASK;
		size_t first = len < RING_SIZE - data ? len : RING_SIZE - data;
		memcpy(w.raw + w.raw_len, w.ring + data, first);
		if (first < len)
			memcpy(w.raw + w.raw_len + first, w.ring, len - first);
		unsigned type = w.raw[w.raw_len] & 0x0f;
		if (type == MT_REC_ALLOC || type == MT_REC_FREE)
			w.n_events++;
		w.raw_len += len;
		/* Zero the whole record: a later record's length word may
		 * land anywhere in these bytes and must read as unpublished. */
		size_t zfirst = total < RING_SIZE - off ? total : RING_SIZE - off;
		memset(w.ring + off, 0, zfirst);
		if (zfirst < total)
			memset(w.ring, 0, total - zfirst);
		t += total;
		atomic_store_explicit(&w.tail, t, memory_order_release);
		if (t == h)
			h = atomic_load_explicit(&w.head, memory_order_acquire);
	}
}

static void sample(void)
{
	char buf[128];
	ssize_t n = pread(w.statm_fd, buf, sizeof(buf) - 1, 0);
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

static void append_diag(void)
{
	size_t len = atomic_exchange(&w.diag_len, 0);
	if (!len)
		return;
	struct mt_record r = { .type = MT_REC_DIAG };
	r.diag.code = w.diag_buf[0];
	r.diag.msg.p = w.diag_buf + 1;
	r.diag.msg.len = (uint32_t)(len - 1);
	append(&r);
}

void mt_writer_diag(unsigned code, const char *msg)
{
	size_t n = strlen(msg);
	if (n > sizeof(w.diag_buf) - 1)
		n = sizeof(w.diag_buf) - 1;
	w.diag_buf[0] = (uint8_t)code;
	memcpy(w.diag_buf + 1, msg, n);
	atomic_store(&w.diag_len, n + 1);
	wake_writer();
}

static void *writer_main(void *arg)
{
	(void)arg;
	mt_in_hook = 1; /* this thread is memtrace: never recorded */
	prctl(PR_SET_NAME, "memtrace-write", 0, 0, 0);
	uint64_t interval = (uint64_t)w.interval_ms * 1000000ull;
	uint64_t next_sample = mono_ns();

	while (!atomic_load(&w.stop)) {
		drain();
		append_diag();
		uint64_t now = mono_ns();
		if (now >= next_sample) {
			sample();
			next_sample += interval;
			if (next_sample <= now)
				next_sample = now + interval;
		}
		if (w.raw_len && now - w.last_flush >= FLUSH_NS)
			flush_chunk();
		uint64_t wait = next_sample - now;
		if (wait > FLUSH_NS)
			wait = FLUSH_NS;
		struct timespec ts = { (time_t)(wait / 1000000000ull), (long)(wait % 1000000000ull) };
		if (!atomic_exchange(&w.wake, 0))
			syscall(SYS_futex, &w.wake, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0);
		atomic_store(&w.wake, 0);
	}
	return NULL;
}

int mt_writer_start(int fd, const struct mt_header *h)
{
	uint8_t hdr[MT_HDR_FIXED + MT_CMDLINE_MAX];
	ssize_t n;
	int e;

	int fresh = !w.ring;
	if (!w.ring) {
		w.ring = mmap(NULL, RING_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			      -1, 0);
		w.raw = mmap(NULL, CHUNK_MAX, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			     -1, 0);
		w.out = mmap(NULL, MT_CHUNK_HEADER + (size_t)LZ4_compressBound(CHUNK_MAX),
			     PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (w.ring == MAP_FAILED || w.raw == MAP_FAILED || w.out == MAP_FAILED) {
			w.ring = NULL;
			return -ENOMEM;
		}
	}
	n = mt_header_encode(hdr, sizeof(hdr), h);
	if (n < 0)
		return (int)n;
	e = write_full(fd, hdr, (size_t)n);
	if (e < 0)
		return e;
	w.fd = fd;
	w.statm_fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
	w.page = sysconf(_SC_PAGESIZE);
	w.interval_ms = h->interval_ms ? h->interval_ms : 10;
	w.start_mono = mono_ns();
	w.last_flush = w.start_mono;
	w.n_events = 0;
	w.raw_len = 0;
	atomic_store(&w.err, 0);
	atomic_store(&w.dropped, 0);
	atomic_store(&w.stop, 0);
	atomic_store(&w.diag_len, 0);
	atomic_store(&w.head, 0);
	atomic_store(&w.tail, 0);
	if (!fresh)
		memset(w.ring, 0, RING_SIZE); /* a new mapping is already zero */
	atomic_store_explicit(&w.running, 1, memory_order_release);

	/* The writer must not take signals meant for the program. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	e = pthread_create(&w.thread, NULL, writer_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (e) {
		atomic_store(&w.running, 0);
		return -e;
	}
	return 0;
}

int mt_writer_stop(const char *diag)
{
	atomic_store(&w.stop, 1);
	wake_writer();
	pthread_join(w.thread, NULL);
	drain();
	atomic_store_explicit(&w.running, 0, memory_order_release);
	drain();
	append_diag();
	if (diag) {
		mt_writer_diag(MT_DIAG_TRACKING_DISABLED, diag);
		append_diag();
	}
	sample();
	struct mt_record r = { .type = MT_REC_TRAILER };
	r.trailer.time_us = (mono_ns() - w.start_mono) / 1000;
	r.trailer.n_events = w.n_events;
	r.trailer.n_dropped = atomic_load(&w.dropped);
	append(&r);
	flush_chunk();
	int err = atomic_load(&w.err);
	if (w.statm_fd >= 0)
		close(w.statm_fd);
	w.statm_fd = -1;
	if (close(w.fd) != 0 && !err)
		err = -errno;
	w.fd = -1;
	return err;
}

int mt_writer_error(void)
{
	return atomic_load(&w.err);
}
