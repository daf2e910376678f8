/* SPDX-License-Identifier: MIT */
/*
 * The writer's lifecycle (writer.h): the writer thread and its loop
 * (merging, RSS samples, diagnostics, periodic flushes), and the ends of a
 * capture: stop, a fatal signal's end, a crash of the writer, a fork.
 * The writer keeps the recursion guard set for life, so its own
 * allocations are never recorded.
 */
#include "payload/writer.h"
#include "format/columns.h" /* mt_header_columns */
#include "util/fd.h"        /* mt_fd_high */
#include "format/error.h"
#include "format/nodes.h"
#include "format/record.h"
#include "payload/fault.h"
#include "payload/fd-id.h"
#include "payload/aggregate.h"
#include "payload/allocstat.h"
#include "payload/merge.h"
#include "payload/sink.h"
#include "payload/tbuf.h"
#include "payload/track.h"
#include "payload/wait.h"

#include <errno.h>       /* errno */
#include <fcntl.h>       /* open */
#include <limits.h>      /* INT_MAX */
#include <pthread.h>     /* pthread_create */
#include <sched.h>       /* sched_setscheduler */
#include <setjmp.h>      /* sigsetjmp */
#include <signal.h>      /* sigaction */
#include <stdlib.h>      /* getenv */
#include <stdatomic.h>   /* atomic_* */
#include <stdio.h>       /* snprintf */
#include <string.h>      /* memcpy */
#include <sys/prctl.h>   /* PR_SET_NAME */
#include <sys/syscall.h> /* SYS_gettid */
#include <unistd.h>      /* close */

/* Producers wake the writer when their buffer is half full, or not at
 * all while it polls: a pass that took POLL_MIN bytes or more means busy
 * producers, and the writer then comes back every POLL_NS on its own
 * (a futex wake-up costs the hook a syscall; in churn's 0.43 s run ~480
 * of them made it 4% slower). */
#define FLUSH_NS (250ull * 1000 * 1000) /* bound on what a SIGKILL loses */
#define AGG_NS (1000ull * 1000 * 1000) /* an aggregated capture: figures this often */
#define POLL_NS (200ull * 1000)
#define POLL_MIN (MT_TBUF_SIZE / 16)

static struct {
	_Atomic int stop;
	pthread_t thread;
	struct mt_sink sink; /* the capture */
	int statm_fd;
	struct mt_fd_id statm_id; /* what statm_fd was opened on */
	uint32_t interval_ms;
	long page;
	uint64_t start_mono;
	int aggregate;     /* MT_HDR_AGGREGATED: figures, not events */
	_Atomic int final_count; /* the last sample may take the allocator's count */
	_Atomic uint32_t asked, given; /* mt_writer_sample_now(): asks, answers */
	int agg_said;      /* its running out of memory is in the capture */
	uint64_t next_agg; /* when the figures are written next */
	struct {
		uint8_t buf[512];
		_Atomic size_t len; /* 0: free, DIAG_BUSY: being filled */
	} diag[4];              /* messages waiting for the writer */
	_Atomic int crashed;  /* the signal that ended the writer thread */
	/* How the capture ends (mt_writer_end_now()): who ends it, which
	 * thread, and whether it has ended; the writer thread's id. */
	_Atomic int ending;       /* END_RUNNING, END_STOP or END_SIGNAL */
	_Atomic pid_t ender;      /* the thread that ends it */
	_Atomic uint32_t ended;   /* 1 once the capture is finished */
	_Atomic pid_t writer_tid; /* 0 until the writer thread runs */
	char end_diag[128];       /* END_SIGNAL: what the capture says */
	void (*_Atomic tick)(uint64_t now_ns);
} w = { .sink = { .fd = -1 }, .statm_fd = -1 };

enum { END_RUNNING, END_STOP, END_SIGNAL };

/* merge.c's first error: tracking turns itself off; the capture ends
 * here. */
static void on_error(int err)
{
	(void)err;
	mt_tracking = 0;
}

/* A producer's wait for the writer gave up (once a capture). */
static void on_stall(void)
{
	mt_writer_diag(MT_DIAG_INFO, "the capture could not be written for a "
				     "second: events were dropped until it could");
}

enum { SAMPLE_TICK, SAMPLE_ASKED, SAMPLE_LAST };

/* A memory sample: RSS, an aggregated capture's heap, and the C
 * allocator's count when its time has come, or whenever it may for one
 * asked for (mt_writer_sample_now()) and for the end's (unless the thread
 * ending the capture may hold the allocator's locks). Never while a
 * signal is ending the capture: its handler may have interrupted malloc
 * with an arena's lock held, and waits for this thread (allocstat.h). */
static void sample(int why)
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
	r.sample.time_us = (mt_mono_ns() - w.start_mono) / 1000;
	r.sample.rss = resident * (uint64_t)w.page;
	if (w.aggregate) {
		r.sample.heap = mt_agg_heap() + 1;
		mt_agg_sampled(r.sample.time_us);
	}
	uint64_t in_use;
	if (atomic_load(&w.ending) != END_SIGNAL &&
	    (why != SAMPLE_LAST || atomic_load(&w.final_count)) &&
	    mt_allocstat_take(mt_mono_ns(), why != SAMPLE_TICK, &in_use))
		r.sample.in_use = in_use + 1;
	mt_merge_append(&r);
}

static void append_diag(void);

/* An aggregated capture's figures so far, in chunks of their own: a
 * process killed after this leaves a capture that reads as of now. */
static void write_figures(void)
{
	if (mt_agg_failed() && !w.agg_said) {
		w.agg_said = 1;
		mt_writer_diag(MT_DIAG_TRACKING_DISABLED,
			       "out of memory for the aggregated figures: they end here");
		append_diag();
	}
	mt_agg_emit(mt_merge_append);
	mt_merge_flush();
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
		mt_merge_append(&r);
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
		mt_tbuf_wake();
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
	mt_futex_wake(&w.ended, INT_MAX);
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
	uint64_t t = mt_mono_ns();
	mt_tbuf_bell_wait(val, ns);
	mt_merge_idle(mt_mono_ns() - t);
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
	uint64_t next_sample = mt_mono_ns();

	int polling = 0;

	while (!atomic_load(&w.stop)) {
		uint64_t consumed = mt_tbuf_consumed();
		mt_merge_drain(0);
		append_diag();
		uint64_t now = mt_mono_ns();
		uint32_t asked = atomic_load(&w.asked);
		if (asked != atomic_load(&w.given)) {
			sample(SAMPLE_ASKED);
			atomic_store(&w.given, asked);
			mt_futex_wake(&w.given, INT_MAX);
		}
		if (now >= next_sample) {
			sample(SAMPLE_TICK);
			void (*tick)(uint64_t) = atomic_load(&w.tick);
			if (tick)
				tick(now);
			next_sample += interval;
			if (next_sample <= now)
				next_sample = now + interval;
		}
		if (w.aggregate && now >= w.next_agg) {
			write_figures();
			w.next_agg = now + AGG_NS;
		}
		mt_merge_flush_older(now, FLUSH_NS);
		uint64_t wait = next_sample - now;
		if (wait > FLUSH_NS)
			wait = FLUSH_NS;
		if (mt_tbuf_consumed() - consumed >= POLL_MIN) {
			/* Busy producers: come back soon on our own, and tell them
			 * not to wake us (a wake-up is a syscall in the hook). */
			if (!polling)
				mt_tbuf_bell_set(1);
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
			mt_tbuf_bell_set(0);
			continue;
		}
		if (!mt_tbuf_bell_swap(0))
			idle_wait(0, wait);
		mt_tbuf_bell_set(0);
	}
}

int mt_writer_start(int fd, const struct mt_header *h)
{
	uint8_t hdr[MT_HDR_FIXED + MT_CMDLINE_MAX];
	ssize_t n;
	int e;

	e = mt_merge_init();
	if (e < 0)
		return e;
	/* native nodes coded in the node column, unless a test wants the
	 * plain form (MEMTRACE_TEST_PLAIN_NODES=1) to compare with; with
	 * native stacks, in columns of their own (version 7), unless a test
	 * wants version 6's chunks (MEMTRACE_TEST_FORMAT6=1) */
	const char *plain = getenv("MEMTRACE_TEST_PLAIN_NODES");
	const char *v6 = getenv("MEMTRACE_TEST_FORMAT6");
	struct mt_header coded = *h;
	if (!plain || *plain != '1')
		coded.flags |= MT_HDR_NATIVE_NODES;
	if (v6 && *v6 == '1') {
		coded.version = MT_FORMAT_VERSION_COLUMNS - 1;
		coded.flags &= ~MT_HDR_LINES; /* entry.c wrote no lines then */
	}
	n = mt_header_encode(hdr, sizeof(hdr), &coded);
	if (n < 0)
		return (int)n;
	e = mt_sink_open(&w.sink, fd);
	if (e == 0)
		e = mt_sink_write(&w.sink, hdr, (size_t)n);
	if (e < 0) {
		w.sink = (struct mt_sink){ .fd = -1 }; /* the caller's to close */
		return e;
	}
	w.statm_fd = mt_fd_high(open("/proc/self/statm", O_RDONLY | O_CLOEXEC));
	if (mt_fd_id_take(w.statm_fd, &w.statm_id) < 0 && w.statm_fd >= 0) {
		close(w.statm_fd);
		w.statm_fd = -1;
	}
	w.page = sysconf(_SC_PAGESIZE);
	w.interval_ms = h->interval_ms ? h->interval_ms : 10;
	w.start_mono = mt_mono_ns();
	w.aggregate = (h->flags & MT_HDR_AGGREGATED) != 0;
	w.agg_said = 0;
	mt_allocstat_init();
	atomic_store(&w.final_count, 1);
	atomic_store(&w.asked, 0);
	atomic_store(&w.given, 0);
	w.next_agg = w.start_mono + AGG_NS;
	const char *crash = getenv("MEMTRACE_TEST_WRITER_CRASH");
	mt_merge_begin(&w.sink, on_error, crash && (*crash == '1' || *crash == '2') ? *crash - '0' : 0,
		       w.start_mono, w.aggregate, mt_header_columns(&coded));
	atomic_store(&w.stop, 0);
	diag_forget();
	atomic_store(&w.crashed, 0);
	atomic_store(&w.ending, END_RUNNING);
	atomic_store(&w.ender, 0);
	atomic_store(&w.ended, 0);
	atomic_store(&w.writer_tid, 0);
	const char *delay = getenv("MEMTRACE_TEST_TURN_DELAY");
	mt_tbuf_begin(on_stall, delay && *delay == '1');
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
		mt_fd_id_close(w.statm_fd, &w.statm_id);
		w.statm_fd = -1;
		return -e;
	}
	return 0;
}

/* The TRAILER, after the chunk that counts the last events. */
static void append_trailer(void)
{
	struct mt_record r = { .type = MT_REC_TRAILER };
	r.trailer.time_us = (mt_mono_ns() - w.start_mono) / 1000;
	r.trailer.n_dropped = mt_tbuf_dropped();
	mt_merge_flush();
	r.trailer.n_events = mt_merge_events();
	mt_merge_append(&r);
	mt_merge_flush();
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
	mt_merge_drain(1);
	append_diag();
	if (diag) {
		mt_writer_diag(MT_DIAG_TRACKING_DISABLED, diag);
		append_diag();
	}
	sample(SAMPLE_LAST);
	if (w.aggregate) {
		write_figures();
		mt_agg_release();
	}
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
	/* The fault may have come between coding a chunk and writing it: its
	 * columns are in the histories and not in the file, so the last
	 * chunks refer to nothing before them. */
	mt_merge_crashed();
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
	mt_tbuf_forget();
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
	mt_tbuf_kick();
	pthread_join(w.thread, NULL);
	if (!atomic_load(&w.crashed) && !by_signal)
		finish(diag);
	int crashed = atomic_load(&w.crashed) != 0;
	if (crashed)
		finish_crashed();
	mt_tbuf_give_back((size_t)w.page);
	mt_fault_release();
	int err = crashed ? -MT_ECRASH : mt_merge_err();
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
		mt_tbuf_kick();
	} else if (atomic_load(&w.ended)) {
		return atomic_load(&w.crashed) || mt_merge_err() ? -1 : 0;
	} else if (atomic_load(&w.ender) == self) {
		return -1; /* this thread was ending it: it cannot wait for itself */
	}
	/* the writer thread's answer, or the end of the time given */
	uint64_t deadline = mt_mono_ns() + timeout_ns;
	for (;;) {
		if (atomic_load(&w.ended))
			return atomic_load(&w.crashed) || mt_merge_err() ? -1 : 0;
		uint64_t now = mt_mono_ns();
		if (now >= deadline)
			return -1;
		mt_futex_wait(&w.ended, 0, deadline - now);
	}
}

int mt_writer_ok(void)
{
	return atomic_load(&mt_whot.running) && !mt_merge_err() && !atomic_load(&w.crashed);
}

uint64_t mt_writer_dropped(void)
{
	return mt_tbuf_dropped();
}

void mt_writer_sample_now(uint64_t timeout_ns)
{
	uint32_t want = atomic_fetch_add(&w.asked, 1) + 1;
	uint64_t deadline = mt_mono_ns() + timeout_ns;
	mt_tbuf_kick();
	for (;;) {
		uint32_t given = atomic_load(&w.given);
		uint64_t now = mt_mono_ns();
		if ((int32_t)(given - want) >= 0 || now >= deadline || !mt_writer_ok())
			return;
		mt_futex_wait(&w.given, given, deadline - now);
	}
}

void mt_writer_no_final_count(void)
{
	atomic_store(&w.final_count, 0);
}

void mt_writer_on_tick(void (*fn)(uint64_t now_ns))
{
	atomic_store(&w.tick, fn);
}
