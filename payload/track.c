/* SPDX-License-Identifier: MIT */
/*
 * Event recording: per-thread state, the stacks of events (Python, and
 * with native stacks on, native and hybrid) and the records pushed to the
 * ring. Everything here runs inside allocation hooks with the recursion
 * guard held: no malloc, no stdio, errno preserved by the callers. The
 * code and stack tables (intern.h) are shared and guarded by one
 * spinlock, taken only when a thread's stack differs from its last one
 * and its own caches miss.
 */
#include "payload/track.h"
#include "format/record.h"
#include "payload/intern.h"
#include "payload/hybrid.h"
#include "payload/native-memo.h"
#include "payload/native.h"
#include "payload/python.h"
#include "payload/python-walk.h"
#include "payload/tbuf.h"

#include <errno.h>       /* errno */
#include <pthread.h>     /* pthread_key_create */
#include <sched.h>       /* sched_yield */
#include <stdatomic.h>   /* atomic_* */
#include <string.h>      /* memset */
#include <sys/mman.h>    /* mmap, madvise */
#include <sys/prctl.h>   /* PR_GET_NAME */
#include <sys/syscall.h> /* SYS_gettid */
#include <unistd.h>      /* syscall, sysconf */

__thread unsigned char mt_in_hook __attribute__((tls_model("initial-exec")));
volatile int mt_tracking;

#define NCACHE_BITS 10 /* per-thread (parent, code, offset) -> node, direct mapped */
#define NCACHE (1u << NCACHE_BITS)

struct ncache_entry {
	const void *code;
	uint32_t parent, offset, id;
};

/* 3.11+: (parent, position) -> node, for the newest frame when only its
 * position moved; a position names code and offset at once. */
#define PCACHE 256
struct pcache_entry {
	const void *pos;
	uint32_t parent, id;
};

struct mt_thread {
	struct mt_tbuf *buf; /* this thread's event buffer */
	uint64_t session;    /* g.session when it last registered or forgot its stacks */
	uint32_t index;
	uint32_t walks;      /* stacks read */
	uint64_t told;       /* chain.checked as last added to frames_checked */
	struct mt_thread *next_free;
	struct ncache_entry ncache[NCACHE];
	struct pcache_entry pcache[PCACHE];
	struct mt_pychain chain; /* the frame chain at the last event, with stack ids */
	struct mt_hybrid native; /* native stacks, when recorded */
};

static __thread struct mt_thread *self __attribute__((tls_model("initial-exec")));
/* ENDING once this thread's key destructor ran: a struct it took after
 * that would never be given back (late_event()) */
enum { RUNNING, ENDING, LATE };
static __thread unsigned char ending __attribute__((tls_model("initial-exec")));
/* Frees of a thread with no struct go through g.late, up to this many: a
 * thread that never allocated may free others' blocks as it ends, after
 * its key destructors (none of ours, the key was never set for it), and
 * a struct it took then would never be given back. A thread that goes
 * on freeing takes one. */
#define LATE_FREES 64
static __thread unsigned char late_frees __attribute__((tls_model("initial-exec")));

/* g.session: the capture's session in the low half, bumped when the
 * threads must register again; in the high half, how many code objects
 * the tables knew have died. A thread compares the whole word at every
 * event (thread_get), so that a code object's death costs nothing there:
 * a thread that sees only the high half move forgets its cached stacks,
 * which may name the dead object's address. */
#define SESSION_CODE_DIED (1ull << 32)

static struct {
	atomic_flag lock;
	_Atomic uint64_t session;
	_Atomic uint32_t next_thread;
	int python;                /* mt_python_init() succeeded */
	int native;                /* native stacks recorded */
	pthread_key_t key;
	int key_ok;
	struct mt_thread *free_threads; /* ended threads' structs, pages in */
	struct mt_thread *free_cold;    /* ... and those whose pages went back */
	unsigned n_free;                /* structs on free_threads */
	struct mt_thread *late;    /* the ending threads' events' (late_event()) */
	atomic_flag late_lock;
	_Atomic int lost; /* a CODE or STACK record was dropped: its id means nothing */
} g = { .lock = ATOMIC_FLAG_INIT, .late_lock = ATOMIC_FLAG_INIT };

static void lock(void)
{
	unsigned spins = 0;
	while (atomic_flag_test_and_set_explicit(&g.lock, memory_order_acquire))
		if (++spins > 64)
			sched_yield();
}

static void unlock(void)
{
	atomic_flag_clear_explicit(&g.lock, memory_order_release);
}

void mt_track_after_fork(void)
{
	unlock(); /* a thread the child does not have may have held it */
	atomic_flag_clear_explicit(&g.late_lock, memory_order_release);
}

/* A thread's state: some megabytes of address space for the deepest
 * stacks, of which a thread touches what its stacks reach. */
static void *map(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

/* ------------------------------------------------------------------------
 * Threads.
 * ---------------------------------------------------------------------- */
static void tell_checked(struct mt_thread *t);

/* The structs of ended threads wait for the next threads with their pages
 * in: a service that starts a thread per request reuses a few. Past this
 * many (after a burst of threads), an ended thread's caches and frames go
 * back to the system, some 80 KB each that would otherwise stay in the
 * program's RSS for good; zero is their state at a thread's start. A new
 * thread takes a warm one while there is one. */
#define WARM_THREADS 8

static void cool_down(struct mt_thread *t)
{
	int saved = errno;
	tell_checked(t);
	/* the first page keeps what must last: buf, index, next_free */
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t len = (sizeof(*t) + page - 1) & ~(page - 1);
	if (page < len)
		(void)madvise((char *)t + page, len - page, MADV_DONTNEED);
	t->told = t->chain.checked;
	errno = saved;
}

static void thread_exit(void *arg)
{
	struct mt_thread *t = arg;
	self = NULL;
	ending = ENDING;
	lock();
	int cool = g.n_free >= WARM_THREADS;
	unlock();
	if (cool)
		cool_down(t);
	lock();
	struct mt_thread **list = cool ? &g.free_cold : &g.free_threads;
	t->next_free = *list;
	*list = t;
	g.n_free += !cool;
	unlock();
}

/* A record was dropped. The thread registers again under a new index (a
 * THREAD record with the same tid): announced again if that record was the
 * one lost, and, while the writer is stuck, with its next events dropped
 * on the way in (thread_setup), at no more cost than that. */
static void resync(struct mt_thread *t)
{
	t->session = 0;
}

/* Returns 0, or -1 if the record was not written. */
static int push_thread_record(struct mt_thread *t)
{
	char name[17] = { 0 };
	uint8_t buf[64];
	struct mt_record r = { .type = MT_REC_THREAD, .tidx = t->index };

	prctl(PR_GET_NAME, name, 0, 0, 0);
	r.thread.tid = (uint64_t)syscall(SYS_gettid);
	r.thread.name.p = (const uint8_t *)name;
	r.thread.name.len = (uint32_t)strlen(name);
	ssize_t n = mt_rec_encode(buf, sizeof(buf), &r, NULL);
	return n > 0 && mt_tbuf_push(t->buf, buf, (size_t)n) == 0 ? 0 : -1;
}

/* A CODE or STACK record of @t was not written. While the capture runs,
 * its id must be described again (and @t, whose caches hold it, starts
 * afresh); once the capture has ended, nothing is. */
static void lost_record(struct mt_thread *t)
{
	if (!atomic_load_explicit(&mt_whot.running, memory_order_relaxed))
		return;
	atomic_store_explicit(&g.lost, 1, memory_order_relaxed);
	resync(t);
}

static struct mt_thread *thread_register(void);

static inline struct mt_thread *thread_get(void)
{
	struct mt_thread *t = self;
	if (__builtin_expect(t && t->session == atomic_load_explicit(&g.session,
								      memory_order_relaxed), 1))
		return t;
	return thread_register();
}

static struct mt_thread *thread_setup(void);

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

/* The slow path of thread_get(): syscalls, so errno is kept here and the
 * hooks' fast path need not. */
static __attribute__((noinline)) struct mt_thread *thread_register(void)
{
	if (ending == ENDING)
		return NULL;
	int saved = errno;
	struct mt_thread *t = self;
	uint64_t now = atomic_load_explicit(&g.session, memory_order_acquire);
	if (t && (uint32_t)t->session == (uint32_t)now) {
		forget_stacks(t); /* only code objects died */
		t->session = now;
	} else {
		t = thread_setup();
	}
	errno = saved;
	return t;
}

/* Forget every code object and stack node, so that they are described
 * again: one of their records was dropped. Ids go on from where they were
 * (a capture never reuses one), and every thread, whose caches hold the
 * old ids, registers again. Under the lock. */
static void forget_ids(void)
{
	mt_intern_forget();
	atomic_store_explicit(&g.lost, 0, memory_order_relaxed);
	atomic_fetch_add(&g.session, 1);
}

static struct mt_thread *thread_setup(void)
{
	struct mt_thread *t = self;

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
		lock();
		if (atomic_load_explicit(&g.lost, memory_order_relaxed))
			forget_ids();
		unlock();
	}
	uint64_t session = atomic_load_explicit(&g.session, memory_order_acquire);
	if (!t) {
		lock();
		/* a warm one first: a cold one faults its pages in again */
		if ((t = g.free_threads)) {
			g.free_threads = t->next_free;
			g.n_free--;
		} else if ((t = g.free_cold)) {
			g.free_cold = t->next_free;
		}
		unlock();
		if (!t) {
			if (!(t = map(sizeof(*t))))
				return NULL;
			if (!(t->buf = mt_tbuf_new())) {
				munmap(t, sizeof(*t));
				return NULL;
			}
		}
		if (g.key_ok && ending == RUNNING)
			pthread_setspecific(g.key, t);
		self = t;
	}
	t->session = session;
	t->index = atomic_fetch_add(&g.next_thread, 1);
	/* stack ids start again with the capture */
	forget_stacks(t);
	if (push_thread_record(t) < 0) {
		/* The writer codes a buffer's events under the index of its
		 * last THREAD record: none may go in before this one. The
		 * thread is announced again at its next event. */
		resync(t);
		mt_tbuf_count_dropped();
		return NULL;
	}
	return t;
}

/* ------------------------------------------------------------------------
 * Code objects and the stack trie (intern.h, under g.lock).
 * ---------------------------------------------------------------------- */
static uint32_t code_id(struct mt_thread *t, const void *code)
{
	int lost = 0;
	uint32_t id = mt_intern_code(code, t->buf, &lost);
	if (lost)
		lost_record(t);
	return id;
}

static uint32_t node_id(struct mt_thread *t, uint32_t parent, uint32_t code, uint32_t offset,
			const void *pycode)
{
	int lost = 0;
	uint32_t id = mt_intern_node(parent, code, offset, pycode, t->buf, &lost);
	if (lost)
		lost_record(t);
	return id;
}

static size_t ncache_slot(uint32_t parent, const void *code, uint32_t offset)
{
	uint64_t v = ((uint64_t)(uintptr_t)code ^ ((uint64_t)parent << 32)) + offset;
	v *= 0x9e3779b97f4a7c15ull;
	return (size_t)(v >> (64 - NCACHE_BITS));
}

/* The ids of chain frames @keep.. of @c: from the thread's node cache, or
 * interned under the shared lock on a miss. */
static uint32_t intern_frames(struct mt_thread *t, struct mt_pychain *c, size_t keep)
{
	uint32_t parent = keep ? c->id[keep - 1] : 0;
	int locked = 0, saved_errno = 0;

	for (size_t i = keep; i < c->n; i++) {
		if (c->kept[i]) {
			struct mt_pyframe f = c->fr[i];
			struct ncache_entry *e = &t->ncache[ncache_slot(parent, f.code, f.offset)];
			if (e->code == f.code && e->parent == parent && e->offset == f.offset) {
				parent = e->id;
			} else {
				if (!locked) {
					saved_errno = errno; /* interning may map memory */
					lock();
					locked = 1;
				}
				uint32_t cid = code_id(t, f.code);
				uint32_t id = cid ? node_id(t, parent, cid, f.offset, f.code) : parent;
				*e = (struct ncache_entry){ f.code, parent, f.offset, id };
				parent = id;
			}
		}
		c->id[i] = parent;
	}
	if (locked) {
		unlock();
		errno = saved_errno;
	}
	return parent;
}

static size_t pcache_slot(uint32_t parent, const void *pos)
{
	uint64_t v = ((uint64_t)(uintptr_t)pos ^ ((uint64_t)parent << 32)) * 0x9e3779b97f4a7c15ull;
	return (size_t)(v >> 56) & (PCACHE - 1);
}

static __attribute__((noinline)) uint32_t intern_slow(struct mt_thread *t, struct mt_pychain *c,
						      size_t keep)
{
	if (c->lazy) {
		/* only the newest frame moved, to a position not cached */
		size_t i = c->n - 1;
		mt_python_describe_newest(c);
		uint32_t id = intern_frames(t, c, keep);
		if (c->kept[i] && mt_python_complete(c, i)) {
			uint32_t parent = i ? c->id[i - 1] : 0;
			t->pcache[pcache_slot(parent, c->pos[i])] =
				(struct pcache_entry){ c->pos[i], parent, id };
		}
		return id;
	}
	return c->n ? intern_frames(t, c, keep) : 0;
}

/* The trie node of the calling thread's Python stack, once its frame
 * chain has been matched against the one at the thread's last event
 * (mt_python_update): the unchanged outermost @keep frames keep their trie
 * nodes, and only the frames above them are looked up, in the thread's
 * own caches here and under the shared lock on a miss. @many: not only a
 * single new frame here (the GOT hooks: in a chain of calls, the frames
 * pushed since and the caller that moved; the PyMem wrappers keep less). */
static inline __attribute__((always_inline)) uint32_t
stack_of(struct mt_thread *t, struct mt_pychain *c, size_t keep, int many)
{
	size_t n = c->n;
	if (__builtin_expect(c->lazy, 1)) {
		uint32_t parent = keep ? c->id[keep - 1] : 0;
		struct pcache_entry *e = &t->pcache[pcache_slot(parent, c->pos[keep])];
		if (__builtin_expect(e->pos == c->pos[keep] && e->parent == parent, 1)) {
			c->kept[keep] = 1;
			return c->id[keep] = e->id;
		}
	} else if (many && keep < n) {
		uint32_t parent = keep ? c->id[keep - 1] : 0;
		for (; keep < n; keep++) {
			if (c->kept[keep]) {
				struct mt_pyframe f = c->fr[keep];
				struct ncache_entry *e =
					&t->ncache[ncache_slot(parent, f.code, f.offset)];
				if (__builtin_expect(e->code != f.code || e->parent != parent ||
							     e->offset != f.offset, 0))
					break;
				parent = e->id;
			}
			c->id[keep] = parent;
		}
		if (__builtin_expect(keep == n, 1))
			return parent;
	} else if (!many && keep + 1 == n && c->kept[keep]) {
		uint32_t parent = keep ? c->id[keep - 1] : 0;
		struct mt_pyframe f = c->fr[keep];
		struct ncache_entry *e = &t->ncache[ncache_slot(parent, f.code, f.offset)];
		if (__builtin_expect(e->code == f.code && e->parent == parent &&
				     e->offset == f.offset, 1))
			return c->id[keep] = e->id;
	} else if (keep == n && n) {
		return c->id[n - 1];
	}
	return intern_slow(t, c, keep);
}

/* Frames checked by every thread's reader, roughly: a line of its own,
 * as g.session is read at every event. */
static struct {
	_Alignas(64) _Atomic uint64_t n;
	char pad[64 - sizeof(uint64_t)];
} frames_checked;

/* What this thread's reader checked since it last said, told to all. */
static __attribute__((noinline)) void tell_checked(struct mt_thread *t)
{
	atomic_fetch_add_explicit(&frames_checked.n, t->chain.checked - t->told, memory_order_relaxed);
	t->told = t->chain.checked;
}

uint64_t mt_track_frames_checked(void)
{
	return atomic_load_explicit(&frames_checked.n, memory_order_relaxed);
}

/* @lo: the layout whose walk is compiled in, for a thread holding the GIL
 * (the PyMem wrappers, one set per layout row); NULL: the running
 * version's walk, for any thread (the GOT hooks). A PyMem wrapper is put
 * in place only once mt_python_init() succeeded, so g.python is set for
 * every capture it records in; and it runs only with Python allocators
 * traced, where nothing reads frames_checked (pyadapt.c runs without):
 * the GOT hooks tell what both paths checked. */
static inline __attribute__((always_inline)) uint32_t
current_stack(struct mt_thread *t, const struct mt_pylayout *lo, size_t *keep)
{
	struct mt_pychain *c = &t->chain;
	if (lo)
		return stack_of(t, c, *keep = mt_python_walk(lo, 1, c), 0);
	if (!g.python) {
		*keep = MT_MEMO_NO_WALK;
		return 0;
	}
	uint32_t id = stack_of(t, c, *keep = mt_python_update(c), 1);
	if (__builtin_expect(!(++t->walks & 255), 0))
		tell_checked(t);
	return id;
}

/* mt_hybrid_stack()'s interning: under the shared lock, taken at the
 * first miss and released by native_stack(). */
struct node_ctx {
	struct mt_thread *t;
	int locked;
};

static uint32_t node_locked(void *arg, uint32_t parent, uint32_t code, uint32_t offset)
{
	struct node_ctx *x = arg;
	if (!x->locked) {
		lock();
		x->locked = 1;
	}
	return node_id(x->t, parent, code, offset, NULL);
}

/* A return address unwound costs about what this many frames checked by
 * the Python walk do (some 5 ns): counted with them, so that the exit
 * feed, whose marks let native-memo.h unwind less, is weighed against
 * unwinding too (pyadapt.h). */
#define NATIVE_FRAME_CHECKS 8

/* The hybrid node of the calling thread's native stack under its Python
 * stack @py (its chain kept @keep frames); errno is kept. */
static __attribute__((noinline)) uint32_t native_stack(struct mt_thread *t, uint32_t py,
						       size_t keep)
{
	int saved_errno = errno;
	struct node_ctx x = { t, 0 };
	uint64_t unwound = t->native.unwound;
	uint32_t id = mt_hybrid_stack(&t->native, &t->chain, py, keep, node_locked, &x);
	t->chain.checked += (t->native.unwound - unwound) * NATIVE_FRAME_CHECKS;
	if (x.locked)
		unlock();
	errno = saved_errno;
	return id;
}

static void push_module(void *ctx, const struct mt_rec_module *m)
{
	struct mt_thread *t = ctx;
	static uint8_t buf[8192]; /* under native.c's lock */
	struct mt_record r = { .type = MT_REC_MODULE };
	r.module = *m;
	ssize_t n = mt_rec_encode(buf, sizeof(buf), &r, NULL);
	if (n <= 0 || mt_tbuf_push(t->buf, buf, (size_t)n) < 0)
		mt_tbuf_count_dropped();
}

void mt_track_modules(int all)
{
	if (!g.native)
		return;
	struct mt_thread *t = thread_get();
	if (t)
		(void)mt_native_modules(all, push_module, t);
}

void mt_track_native(int on)
{
	if (on) {
		mt_native_unloaded(); /* what was unloaded while it was off */
		mt_memo_start();
	} else if (g.native) {
		mt_memo_report();
		mt_native_report();
	}
	g.native = on;
}

/* ------------------------------------------------------------------------
 * Public entry points.
 * ---------------------------------------------------------------------- */

static void late_event(unsigned kind, const void *ptr, size_t size, int x, int is_free);

/* @lo: the PyMem wrappers' layout row (they run with the GIL held), NULL
 * for the GOT hooks and the RAW domain's wrappers. @x: @kind is past 15
 * (a constant at each call, so that the other events' code stays as it
 * is). */
static inline __attribute__((always_inline)) void
track_alloc(unsigned kind, const void *ptr, size_t size, const struct mt_pylayout *lo, int x)
{
	struct mt_thread *t = thread_get();
	if (!t) {
		if (__builtin_expect(ending == ENDING, 0) && !lo)
			late_event(kind, ptr, size, x, 0);
		return;
	}
	size_t keep;
	uint32_t stack = current_stack(t, lo, &keep);
	if (__builtin_expect(g.native, 0))
		stack = native_stack(t, stack, keep);
	struct mt_tbuf *b = t->buf;
	uint64_t head;
	uint8_t *p = mt_tbuf_reserve_event(b, &head);
	if (!p) {
		resync(t);
		return;
	}
	mt_tbuf_commit_event(b, head, x ? mt_raw_alloc_x(p, kind, (uintptr_t)ptr, size, stack)
				      : mt_raw_alloc(p, kind, (uintptr_t)ptr, size, stack));
}

static inline __attribute__((always_inline)) void track_free(unsigned kind, const void *ptr,
								   size_t size, int x)
{
	if (__builtin_expect(!self, 0) && ending == RUNNING && late_frees < LATE_FREES) {
		late_frees++;
		late_event(kind, ptr, size, x, 1);
		return;
	}
	struct mt_thread *t = thread_get();
	if (!t) {
		if (__builtin_expect(ending == ENDING, 0))
			late_event(kind, ptr, size, x, 1);
		return;
	}
	struct mt_tbuf *b = t->buf;
	uint64_t head;
	uint8_t *p = mt_tbuf_reserve_event(b, &head);
	if (!p) {
		resync(t);
		return;
	}
	mt_tbuf_commit_event(b, head, x ? mt_raw_free_x(p, kind, (uintptr_t)ptr)
				      : mt_raw_free(p, kind, (uintptr_t)ptr, size));
}

/* An event of a thread whose key destructor ran, or a free of a thread
 * with no struct (LATE_FREES). glibc, as a thread ends, frees the TLS
 * blocks of threads that ended before it once its stack cache is full
 * (after a burst of threads), after the destructors: a struct the ending
 * thread took then was never given back, some 90 KB of the program's
 * memory lost for each. Such events share one struct, g.late, a thread
 * index of its own in the capture, under its own lock; the key is not set
 * for it (a destructor round still to come would give it away while
 * g.late holds it). No event of g.late has a stack a report reads by
 * thread: a free names a block, and a temporary is freed by the thread
 * that made it, which has a struct of its own. */
static __attribute__((noinline)) void late_event(unsigned kind, const void *ptr, size_t size,
						 int x, int is_free)
{
	unsigned char was = ending;
	while (atomic_flag_test_and_set_explicit(&g.late_lock, memory_order_acquire))
		sched_yield();
	self = g.late;
	ending = LATE;
	if (is_free)
		track_free(kind, ptr, size, x);
	else
		track_alloc(kind, ptr, size, NULL, x);
	g.late = self;
	self = NULL;
	ending = was;
	atomic_flag_clear_explicit(&g.late_lock, memory_order_release);
}

void mt_track_alloc(unsigned kind, const void *ptr, size_t size)
{
	track_alloc(kind, ptr, size, NULL, 0);
}

void mt_track_free(unsigned kind, const void *ptr, size_t size)
{
	track_free(kind, ptr, size, 0);
}

void mt_track_alloc_raw(unsigned kind, const void *ptr, size_t size)
{
	track_alloc(kind, ptr, size, NULL, 1);
}

void mt_track_free_raw(unsigned kind, const void *ptr)
{
	track_free(kind, ptr, 0, 1);
}

int mt_track_init(int python, int lines)
{
	if (!g.key_ok && pthread_key_create(&g.key, thread_exit) == 0)
		g.key_ok = 1;
	lock();
	/* A new capture: ids from the start; thread states re-register
	 * lazily. */
	atomic_store(&g.next_thread, 0);
	forget_ids();
	mt_intern_reset();
	mt_intern_lines(lines);
	g.python = python;
	unlock();
	return 0;
}

/* ------------------------------------------------------------------------
 * PyMem domain wrappers (track.h; pymem.c puts them in place)
 *
 * OBJ and MEM are only called with the GIL held, so swapping them under
 * the GIL cannot race a caller. The delegated call runs with the
 * recursion guard set: pymalloc falls back to malloc for large blocks,
 * and the GOT hook must not record that block a second time.
 * ---------------------------------------------------------------------- */

/* Whether this call records: the wrapper is active, tracking is on and
 * the thread is not inside memtrace already (the guard is then held). */
static inline int pymem_enter(const struct mt_pymem_domain *d)
{
	return d->active && mt_tracking && mt_guard_enter();
}

static inline __attribute__((always_inline)) void *pymem_malloc(const struct mt_pylayout *lo,
								  void *ctx, size_t size)
{
	struct mt_pymem_domain *d = ctx;
	struct mt_pymem_allocator *o = &d->orig;
	void *p;

	if (!pymem_enter(d))
		return o->malloc(o->ctx, size);
	p = o->malloc(o->ctx, size);
	if (p != NULL)
		track_alloc(MT_ALLOC_PYMALLOC_MALLOC, p, size, lo, 0); /* keeps errno */
	mt_guard_leave();
	return p;
}

static inline __attribute__((always_inline)) void *pymem_calloc(const struct mt_pylayout *lo,
								  void *ctx, size_t nelem,
								  size_t elsize)
{
	struct mt_pymem_domain *d = ctx;
	struct mt_pymem_allocator *o = &d->orig;
	void *p;

	if (!pymem_enter(d))
		return o->calloc(o->ctx, nelem, elsize);
	p = o->calloc(o->ctx, nelem, elsize);
	if (p != NULL) /* no overflow here: the allocator succeeded */
		track_alloc(MT_ALLOC_PYMALLOC_CALLOC, p, nelem * elsize, lo, 0);
	mt_guard_leave();
	return p;
}

/* As for every free, the old block is recorded freed before the call:
 * a block over 512 bytes goes back to the C library inside it, and a
 * thread without the GIL may have its address (and record that) before
 * the call returns. A failed realloc leaves @ptr live; the capture then
 * has it freed, as for the C library's realloc (its size is not known
 * here to record it again). PyMem realloc(p, 0) returns a live block. */
static inline __attribute__((always_inline)) void *pymem_realloc(const struct mt_pylayout *lo,
								   void *ctx, void *ptr,
								   size_t size)
{
	struct mt_pymem_domain *d = ctx;
	struct mt_pymem_allocator *o = &d->orig;
	void *p;

	if (!pymem_enter(d))
		return o->realloc(o->ctx, ptr, size);
	if (ptr != NULL)
		track_free(MT_ALLOC_PYMALLOC_FREE, ptr, 0, 0);
	p = o->realloc(o->ctx, ptr, size);
	if (p != NULL)
		track_alloc(MT_ALLOC_PYMALLOC_REALLOC, p, size, lo, 0);
	mt_guard_leave();
	return p;
}

/* Inline: a call and its saved registers cost more than the few more the
 * wrapper saves for it. */
static inline __attribute__((always_inline)) void pymem_record_free(void *ptr)
{
	track_free(MT_ALLOC_PYMALLOC_FREE, ptr, 0, 0);
}

void mt_pymem_free(void *ctx, void *ptr)
{
	struct mt_pymem_domain *d = ctx;
	struct mt_pymem_allocator *o = &d->orig;

	if (ptr == NULL || !pymem_enter(d)) {
		o->free(o->ctx, ptr);
		return;
	}
	/* before the real free, or another thread may reuse the address and
	 * record its allocation ahead of our free */
	pymem_record_free(ptr);
	o->free(o->ctx, ptr);
	mt_guard_leave();
}

#define MT_PYMEM_ROW(row)                                                                  \
	static void *pymem_malloc_##row(void *ctx, size_t size)                            \
	{                                                                                  \
		return pymem_malloc(&mt_pylayouts[row], ctx, size);                        \
	}                                                                                  \
	static void *pymem_calloc_##row(void *ctx, size_t nelem, size_t elsize)            \
	{                                                                                  \
		return pymem_calloc(&mt_pylayouts[row], ctx, nelem, elsize);               \
	}                                                                                  \
	static void *pymem_realloc_##row(void *ctx, void *ptr, size_t size)                \
	{                                                                                  \
		return pymem_realloc(&mt_pylayouts[row], ctx, ptr, size);                  \
	}
MT_PYMEM_ROW(0)
MT_PYMEM_ROW(1)
MT_PYMEM_ROW(2)
MT_PYMEM_ROW(3)
MT_PYMEM_ROW(4)
MT_PYMEM_ROW(5)
#undef MT_PYMEM_ROW

#define MT_PYMEM_ENTRY(row) \
	{ NULL, pymem_malloc_##row, pymem_calloc_##row, pymem_realloc_##row, mt_pymem_free }
static const struct mt_pymem_allocator pymem_rows[] = {
	MT_PYMEM_ENTRY(0), MT_PYMEM_ENTRY(1), MT_PYMEM_ENTRY(2),
	MT_PYMEM_ENTRY(3), MT_PYMEM_ENTRY(4), MT_PYMEM_ENTRY(5),
};
#undef MT_PYMEM_ENTRY
_Static_assert(sizeof(pymem_rows) / sizeof(pymem_rows[0]) == MT_PYLAYOUT_COUNT,
	       "one set of PyMem wrappers per layout row");

const struct mt_pymem_allocator *mt_pymem_wrappers(size_t row)
{
	return &pymem_rows[row];
}

void mt_track_frame_exit(const void *frame)
{
	struct mt_thread *t = self;
	if (t == NULL || !mt_guard_enter())
		return;
	mt_python_frame_exit(&t->chain, frame);
	mt_guard_leave();
}

void mt_track_unloaded(void)
{
	if (!g.native)
		return;
	mt_native_unloaded();
	lock();
	/* the threads forget the native nodes they cached, as for a code
	 * object's death */
	if (mt_intern_forget_native() == 0)
		atomic_fetch_add_explicit(&g.session, SESSION_CODE_DIED, memory_order_release);
	unlock();
}

void mt_track_thread_name(uint64_t tid, const char *name, size_t len)
{
	if (!mt_tracking)
		return;
	int own = mt_guard_enter(); /* what is made here is memtrace's */
	struct mt_thread *t = thread_get();
	if (t) {
		uint8_t buf[MT_NAME_MAX + 32];
		struct mt_record r = { .type = MT_REC_NAME };
		r.name.tid = tid;
		r.name.name.p = (const uint8_t *)name;
		r.name.name.len = (uint32_t)(len < MT_NAME_MAX ? len : MT_NAME_MAX);
		ssize_t n = mt_rec_encode(buf, sizeof(buf), &r, NULL);
		if (n > 0)
			(void)mt_tbuf_push(t->buf, buf, (size_t)n); /* a name lost is an OS name */
	}
	if (own)
		mt_guard_leave();
}

/* Out of the way of the hot path above: it runs once per code object
 * freed. */
void mt_track_code_gone(const void *code)
{
	lock();
	if (mt_intern_code_gone(code))
		atomic_fetch_add_explicit(&g.session, SESSION_CODE_DIED, memory_order_release);
	unlock();
}
