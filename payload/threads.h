/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_THREADS_H
#define MT_PAYLOAD_THREADS_H
/*
 * The event recorder's thread states (track.c's): each thread's event
 * buffer, its index in the capture and the caches of its stacks. A thread
 * takes one at its first event and its key destructor gives it back for
 * the next thread to take; after a burst of threads, the pages of those
 * given back go back to the system but a few. One shared state: the free
 * lists, the session word, and the late state that the events of ending
 * threads share.
 *
 * Hook-safe as track.h says: no malloc, no stdio; the slow path keeps
 * errno. mt_thread_get() is the hot path: one TLS load and one compare.
 *
 * Sessions: a thread's state is valid while its session equals
 * mt_thread_session. The low half counts captures and lost records (every
 * thread registers again: a new index, a THREAD record, its caches
 * forgotten); each code object that dies adds MT_SESSION_CODE_DIED (the
 * thread only forgets its cached stacks, which may name the dead object's
 * address).
 */
#include "payload/hybrid.h" /* struct mt_hybrid */
#include "payload/python-walk.h" /* struct mt_pychain */

#include <stdatomic.h> /* _Atomic */
#include <stdint.h>    /* uint32_t */

#define MT_NCACHE_BITS 10 /* per-thread (parent, code, offset) -> node, direct mapped */
#define MT_NCACHE (1u << MT_NCACHE_BITS)

struct mt_ncache_entry {
	const void *code;
	uint32_t parent, offset, id;
};

/* 3.11+: (parent, position) -> node, for the newest frame when only its
 * position moved; a position names code and offset at once. */
#define MT_PCACHE 256
struct mt_pcache_entry {
	const void *pos;
	uint32_t parent, id;
};

struct mt_thread {
	struct mt_tbuf *buf; /* this thread's event buffer */
	uint64_t session;    /* mt_thread_session when it last registered or forgot its stacks */
	uint32_t index;
	uint32_t walks;      /* stacks read */
	uint64_t told;       /* chain.checked as last added to the frames checked */
	struct mt_thread *next_free;
	struct mt_ncache_entry ncache[MT_NCACHE];
	struct mt_pcache_entry pcache[MT_PCACHE];
	struct mt_pychain chain; /* the frame chain at the last event, with stack ids */
	struct mt_hybrid native; /* native stacks, when recorded */
};

#define MT_SESSION_CODE_DIED (1ull << 32)

extern _Atomic uint64_t mt_thread_session __attribute__((visibility("hidden")));
extern __thread struct mt_thread *mt_thread_self
	__attribute__((tls_model("initial-exec"), visibility("hidden")));

/* How far the calling thread has come to its end: ENDING once its key
 * destructor ran (a state it took then would never be given back), LATE
 * while it records through the late state (mt_thread_late_begin()). */
enum { MT_RUNNING, MT_ENDING, MT_LATE };
extern __thread unsigned char mt_thread_ending
	__attribute__((tls_model("initial-exec"), visibility("hidden")));
/* mt_thread_own() - the calling thread is memtrace's own (a start's,
 * a stop's, the feed switch's): what it records is no thread's of the
 * program, and its THREAD record says tid 0, as the late state's does,
 * under its own name (readers list neither without allocations). */
void mt_thread_own(void);

/* frees recorded through the late state by a thread with no state */
extern __thread unsigned char mt_thread_late_frees
	__attribute__((tls_model("initial-exec"), visibility("hidden")));

/* Frees of a thread with no state go through the late state, up to this
 * many: a thread that never allocated may free others' blocks as it ends,
 * after its key destructors (none of ours: the key was never set for
 * it), and a state it took then would never be given back. A thread that
 * goes on freeing takes one. */
#define MT_LATE_FREES 64

/* mt_thread_register() - the slow path of mt_thread_get(): the calling
 * thread's state, registered again for this session (a THREAD record
 * under a new index) or taken from the free lists or mapped; NULL when
 * nothing may be recorded (the capture ended, the writer is stuck, the
 * thread is ending, out of memory). errno is kept. */
struct mt_thread *mt_thread_register(void);

/* mt_thread_get() - the calling thread's state for this session, or NULL
 * as mt_thread_register() says. */
static inline struct mt_thread *mt_thread_get(void)
{
	struct mt_thread *t = mt_thread_self;
	if (__builtin_expect(t && t->session == atomic_load_explicit(&mt_thread_session,
								      memory_order_relaxed), 1))
		return t;
	return mt_thread_register();
}

/* mt_thread_frees_late() - whether a free of the calling thread goes
 * through the late state (MT_LATE_FREES): it has no state and has not
 * freed that many. Counts it. */
static inline int mt_thread_frees_late(void)
{
	if (__builtin_expect(!mt_thread_self, 0) && mt_thread_ending == MT_RUNNING &&
	    mt_thread_late_frees < MT_LATE_FREES) {
		mt_thread_late_frees++;
		return 1;
	}
	return 0;
}

/* mt_thread_resync() - @t registers again at its next event, under a new
 * index: a record of it was dropped. */
static inline void mt_thread_resync(struct mt_thread *t)
{
	t->session = 0;
}

/* mt_threads_stacks_stale() - every thread forgets the stacks it cached
 * at its next event (a code object died, a library was unloaded), and
 * keeps its index. */
static inline void mt_threads_stacks_stale(void)
{
	atomic_fetch_add_explicit(&mt_thread_session, MT_SESSION_CODE_DIED, memory_order_release);
}

/* mt_thread_lost_record() - a CODE or STACK record of @t was not written.
 * While the capture runs, every id is described again (the next thread
 * to register makes the tables forget, under their lock) and @t starts
 * afresh; once the capture has ended, nothing is. */
void mt_thread_lost_record(struct mt_thread *t);

/* mt_thread_late_begin() / mt_thread_late_end() - the late state is the
 * calling thread's (mt_thread_self, mt_thread_ending LATE) between the
 * two, under its own lock; the key is not set for it. For the events of a
 * thread whose key destructor ran (glibc, as a thread ends after a burst,
 * frees the TLS of threads that ended before it, after the destructors)
 * and the first frees of one with no state: they share one state, a
 * thread index of their own in the capture (its THREAD record says tid
 * 0: no one thread's). No event of it has a stack a report reads by
 * thread: a free names a block, and a temporary is freed by the thread
 * that made it, which has a state of its own. Returns mt_thread_ending
 * as it was, for mt_thread_late_end(). */
unsigned char mt_thread_late_begin(void);
void mt_thread_late_end(unsigned char was);

/* mt_thread_tell_checked() - add the frames @t's walks checked since it
 * last told to mt_threads_checked(). */
void mt_thread_tell_checked(struct mt_thread *t);

/* mt_threads_checked() - frames checked by every thread's walks, roughly
 * (each tells every 256 walks, and as it ends). */
uint64_t mt_threads_checked(void);

/* mt_threads_init() - make the key whose destructor gives a thread's
 * state back, once. Control paths only. */
void mt_threads_init(void);

/* mt_threads_restart() - a new capture: thread indexes from 0, every id
 * forgotten, every thread registers again. Call with the tables' lock
 * (mt_intern_lock()) held; control paths only. */
void mt_threads_restart(void);

/* mt_threads_after_fork() - in a fork child, free the locks that threads
 * the child does not have may have held. */
void mt_threads_after_fork(void);

#endif
