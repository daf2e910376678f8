/* SPDX-License-Identifier: MIT */
/*
 * The event recorder's thread states (threads.h): taken, registered,
 * given back and cooled down.
 */
#include "payload/threads.h"
#include "format/record.h"
#include "payload/intern.h"
#include "payload/tbuf.h"
#include "util/spin.h"

#include <errno.h>       /* errno */
#include <pthread.h>     /* pthread_key_create */
#include <string.h>      /* memcpy, memset */
#include <sys/mman.h>    /* mmap, madvise */
#include <sys/prctl.h>   /* PR_GET_NAME */
#include <sys/syscall.h> /* SYS_gettid */
#include <unistd.h>      /* syscall, sysconf */

_Atomic uint64_t mt_thread_session;
__thread struct mt_thread *mt_thread_self __attribute__((tls_model("initial-exec")));
__thread unsigned char mt_thread_ending __attribute__((tls_model("initial-exec")));
__thread unsigned char mt_thread_late_frees __attribute__((tls_model("initial-exec")));

/* The states of ended threads wait for the next threads with their pages
 * in: a service that starts a thread per request reuses a few. Past this
 * many (after a burst of threads), an ended thread's caches and frames go
 * back to the system, some 80 KB each that would otherwise stay in the
 * program's RSS for good; zero is their state at a thread's start. A new
 * thread takes a warm one while there is one. */
#define WARM_THREADS 8

static struct {
	atomic_flag free_lock;          /* the free lists */
	struct mt_thread *free_threads; /* ended threads' states, pages in */
	struct mt_thread *free_cold;    /* ... and those whose pages went back */
	unsigned n_free;                /* states on free_threads */
	atomic_flag late_lock;
	struct mt_thread *late;         /* the late state (mt_thread_late_begin()) */
	_Atomic uint32_t next_thread;
	_Atomic int lost; /* a CODE or STACK record was dropped: its id means nothing */
	pthread_key_t key;
	int key_ok;
} g = { .free_lock = ATOMIC_FLAG_INIT, .late_lock = ATOMIC_FLAG_INIT };

/* Frames checked by every thread's walks: a line of its own, as
 * mt_thread_session is read at every event. */
static struct {
	_Alignas(64) _Atomic uint64_t n;
	char pad[64 - sizeof(uint64_t)];
} checked;

void mt_threads_after_fork(void)
{
	mt_spin_unlock(&g.free_lock);
	mt_spin_unlock(&g.late_lock);
}

/* A thread's state: some megabytes of address space for the deepest
 * stacks, of which a thread touches what its stacks reach. */
static void *map(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

__attribute__((noinline)) void mt_thread_tell_checked(struct mt_thread *t)
{
	atomic_fetch_add_explicit(&checked.n, t->chain.checked - t->told, memory_order_relaxed);
	t->told = t->chain.checked;
}

uint64_t mt_threads_checked(void)
{
	return atomic_load_explicit(&checked.n, memory_order_relaxed);
}

static void cool_down(struct mt_thread *t)
{
	int saved = errno;
	mt_thread_tell_checked(t);
	/* the first page keeps what must last: buf, index, next_free */
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t len = (sizeof(*t) + page - 1) & ~(page - 1);
	if (page < len)
		(void)madvise((char *)t + page, len - page, MADV_DONTNEED);
	t->told = t->chain.checked;
	errno = saved;
}

/* The key's destructor: the state goes on a free list. */
static void thread_exit(void *arg)
{
	struct mt_thread *t = arg;
	mt_thread_self = NULL;
	mt_thread_ending = MT_ENDING;
	mt_spin_lock(&g.free_lock);
	int cool = g.n_free >= WARM_THREADS;
	mt_spin_unlock(&g.free_lock);
	if (cool)
		cool_down(t);
	mt_spin_lock(&g.free_lock);
	struct mt_thread **list = cool ? &g.free_cold : &g.free_threads;
	t->next_free = *list;
	*list = t;
	g.n_free += !cool;
	mt_spin_unlock(&g.free_lock);
}

/* The late state's THREAD record says tid 0, which no thread has: it is no
 * one thread's, whichever registered it (docs/format.md, THREAD). */
#define LATE_NAME "(ending threads)"
_Static_assert(sizeof(LATE_NAME) <= 17, "a thread's name");

static __thread unsigned char own __attribute__((tls_model("initial-exec")));

void mt_thread_own(void)
{
	own = 1;
}

/* Returns 0, or -1 if the record was not written. */
static int push_thread_record(struct mt_thread *t)
{
	char name[17] = { 0 };
	uint8_t buf[64];
	struct mt_record r = { .type = MT_REC_THREAD, .tidx = t->index };

	if (mt_thread_ending == MT_LATE) {
		memcpy(name, LATE_NAME, sizeof(LATE_NAME));
	} else {
		prctl(PR_GET_NAME, name, 0, 0, 0);
		if (!own)
			r.thread.tid = (uint64_t)syscall(SYS_gettid);
	}
	r.thread.name.p = (const uint8_t *)name;
	r.thread.name.len = (uint32_t)strlen(name);
	ssize_t n = mt_rec_encode(buf, sizeof(buf), &r, NULL);
	return n > 0 && mt_tbuf_push(t->buf, buf, (size_t)n) == 0 ? 0 : -1;
}

void mt_thread_lost_record(struct mt_thread *t)
{
	if (!atomic_load_explicit(&mt_whot.running, memory_order_relaxed))
		return;
	atomic_store_explicit(&g.lost, 1, memory_order_relaxed);
	mt_thread_resync(t);
}

/* Drop what @t remembers of stacks: its frame chain and its node caches
 * hold code objects by address, and an address may now be another's. */
static void forget_stacks(struct mt_thread *t)
{
	t->chain.n = t->chain.whole = t->chain.lazy = t->chain.top = t->chain.ttop = 0;
	t->chain.toknext |= 1; /* tokens are odd: never an object's address */
	memset(t->ncache, 0, sizeof(t->ncache));
	memset(t->pcache, 0, sizeof(t->pcache));
	mt_hybrid_forget(&t->native);
}

/* Forget every code object and stack node, so that they are described
 * again: one of their records was dropped. Ids go on from where they were
 * (a capture never reuses one), and every thread, whose caches hold the
 * old ids, registers again. Under the tables' lock. */
static void forget_ids(void)
{
	mt_intern_forget();
	atomic_store_explicit(&g.lost, 0, memory_order_relaxed);
	atomic_fetch_add(&mt_thread_session, 1);
}

/* A state from the free lists, a warm one first (a cold one faults its
 * pages in again), or a new one. */
static struct mt_thread *take(void)
{
	mt_spin_lock(&g.free_lock);
	struct mt_thread *t = g.free_threads;
	if (t) {
		g.free_threads = t->next_free;
		g.n_free--;
	} else if ((t = g.free_cold)) {
		g.free_cold = t->next_free;
	}
	mt_spin_unlock(&g.free_lock);
	if (t)
		return t;
	if (!(t = map(sizeof(*t))))
		return NULL;
	if (!(t->buf = mt_tbuf_new())) {
		munmap(t, sizeof(*t));
		return NULL;
	}
	return t;
}

static struct mt_thread *thread_setup(void)
{
	struct mt_thread *t = mt_thread_self;

	/* A new thread, a new capture, or records of this thread were
	 * dropped. Once the capture has ended, nothing is recorded. While the
	 * writer is stuck, events are dropped here, at no more cost than
	 * that; once it moves, what was lost is described again. */
	if (!atomic_load_explicit(&mt_whot.running, memory_order_relaxed))
		return NULL;
	if (mt_tbuf_stalled()) {
		mt_tbuf_count_dropped();
		return NULL;
	}
	if (atomic_load_explicit(&g.lost, memory_order_relaxed)) {
		mt_intern_lock();
		if (atomic_load_explicit(&g.lost, memory_order_relaxed))
			forget_ids();
		mt_intern_unlock();
	}
	uint64_t session = atomic_load_explicit(&mt_thread_session, memory_order_acquire);
	if (!t) {
		if (!(t = take()))
			return NULL;
		if (g.key_ok && mt_thread_ending == MT_RUNNING)
			pthread_setspecific(g.key, t);
		mt_thread_self = t;
	}
	t->session = session;
	t->index = atomic_fetch_add(&g.next_thread, 1);
	/* stack ids start again with the capture */
	forget_stacks(t);
	if (push_thread_record(t) < 0) {
		/* The writer codes a buffer's events under the index of its
		 * last THREAD record: none may go in before this one. The
		 * thread is announced again at its next event. */
		mt_thread_resync(t);
		mt_tbuf_count_dropped();
		return NULL;
	}
	return t;
}

/* Syscalls, so errno is kept here and the hooks' fast path need not. */
__attribute__((noinline)) struct mt_thread *mt_thread_register(void)
{
	if (mt_thread_ending == MT_ENDING)
		return NULL;
	int saved = errno;
	struct mt_thread *t = mt_thread_self;
	uint64_t now = atomic_load_explicit(&mt_thread_session, memory_order_acquire);
	if (t && (uint32_t)t->session == (uint32_t)now) {
		forget_stacks(t); /* only code objects died */
		t->session = now;
	} else {
		t = thread_setup();
	}
	errno = saved;
	return t;
}

unsigned char mt_thread_late_begin(void)
{
	unsigned char was = mt_thread_ending;
	mt_spin_lock(&g.late_lock);
	mt_thread_self = g.late;
	mt_thread_ending = MT_LATE;
	return was;
}

void mt_thread_late_end(unsigned char was)
{
	g.late = mt_thread_self;
	mt_thread_self = NULL;
	mt_thread_ending = was;
	mt_spin_unlock(&g.late_lock);
}

void mt_threads_init(void)
{
	if (!g.key_ok && pthread_key_create(&g.key, thread_exit) == 0)
		g.key_ok = 1;
}

void mt_threads_restart(void)
{
	atomic_store(&g.next_thread, 0);
	forget_ids();
}
