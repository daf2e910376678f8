/* SPDX-License-Identifier: MIT */
/*
 * Event recording: per-thread state, the stacks of events (Python, and
 * with native stacks on, native and hybrid) and the records pushed to the
 * ring. Everything here runs inside allocation hooks with the recursion
 * guard held: no malloc, no stdio, errno preserved by the callers. The
 * code and stack tables (intern.h) are shared and guarded by their lock,
 * taken only when a thread's stack differs from its last one and its own
 * caches (threads.h) miss.
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
#include "payload/threads.h"

#include <errno.h> /* errno */

__thread unsigned char mt_in_hook __attribute__((tls_model("initial-exec")));
volatile int mt_tracking;

static struct {
	int python; /* mt_python_init() succeeded */
	int native; /* native stacks recorded */
} g;

void mt_track_after_fork(void)
{
	/* threads the child does not have may have held them */
	mt_intern_after_fork();
	mt_threads_after_fork();
}

/* ------------------------------------------------------------------------
 * Code objects and the stack trie (intern.h, under its lock).
 * ---------------------------------------------------------------------- */
static uint32_t code_id(struct mt_thread *t, const void *code)
{
	int lost = 0;
	uint32_t id = mt_intern_code(code, t->buf, &lost);
	if (lost)
		mt_thread_lost_record(t);
	return id;
}

static uint32_t node_id(struct mt_thread *t, uint32_t parent, uint32_t code, uint32_t offset,
			const void *pycode)
{
	int lost = 0;
	uint32_t id = mt_intern_node(parent, code, offset, pycode, t->buf, &lost);
	if (lost)
		mt_thread_lost_record(t);
	return id;
}

static size_t ncache_slot(uint32_t parent, const void *code, uint32_t offset)
{
	uint64_t v = ((uint64_t)(uintptr_t)code ^ ((uint64_t)parent << 32)) + offset;
	v *= 0x9e3779b97f4a7c15ull;
	return (size_t)(v >> (64 - MT_NCACHE_BITS));
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
			struct mt_ncache_entry *e = &t->ncache[ncache_slot(parent, f.code, f.offset)];
			if (e->code == f.code && e->parent == parent && e->offset == f.offset) {
				parent = e->id;
			} else {
				if (!locked) {
					saved_errno = errno; /* interning may map memory */
					mt_intern_lock();
					locked = 1;
				}
				uint32_t cid = code_id(t, f.code);
				uint32_t id = cid ? node_id(t, parent, cid, f.offset, f.code) : parent;
				*e = (struct mt_ncache_entry){ f.code, parent, f.offset, id };
				parent = id;
			}
		}
		c->id[i] = parent;
	}
	if (locked) {
		mt_intern_unlock();
		errno = saved_errno;
	}
	return parent;
}

static size_t pcache_slot(uint32_t parent, const void *pos)
{
	uint64_t v = ((uint64_t)(uintptr_t)pos ^ ((uint64_t)parent << 32)) * 0x9e3779b97f4a7c15ull;
	return (size_t)(v >> 56) & (MT_PCACHE - 1);
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
				(struct mt_pcache_entry){ c->pos[i], parent, id };
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
		struct mt_pcache_entry *e = &t->pcache[pcache_slot(parent, c->pos[keep])];
		if (__builtin_expect(e->pos == c->pos[keep] && e->parent == parent, 1)) {
			c->kept[keep] = 1;
			return c->id[keep] = e->id;
		}
	} else if (many && keep < n) {
		uint32_t parent = keep ? c->id[keep - 1] : 0;
		for (; keep < n; keep++) {
			if (c->kept[keep]) {
				struct mt_pyframe f = c->fr[keep];
				struct mt_ncache_entry *e =
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
		struct mt_ncache_entry *e = &t->ncache[ncache_slot(parent, f.code, f.offset)];
		if (__builtin_expect(e->code == f.code && e->parent == parent &&
				     e->offset == f.offset, 1))
			return c->id[keep] = e->id;
	} else if (keep == n && n) {
		return c->id[n - 1];
	}
	return intern_slow(t, c, keep);
}

uint64_t mt_track_frames_checked(void)
{
	return mt_threads_checked();
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
		mt_thread_tell_checked(t);
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
		mt_intern_lock();
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
		mt_intern_unlock();
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
	struct mt_thread *t = mt_thread_get();
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
	struct mt_thread *t = mt_thread_get();
	if (!t) {
		if (__builtin_expect(mt_thread_ending == MT_ENDING, 0) && !lo)
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
		mt_thread_resync(t);
		return;
	}
	mt_tbuf_commit_event(b, head, x ? mt_raw_alloc_x(p, kind, (uintptr_t)ptr, size, stack)
				      : mt_raw_alloc(p, kind, (uintptr_t)ptr, size, stack));
}

static inline __attribute__((always_inline)) void track_free(unsigned kind, const void *ptr,
								   size_t size, int x)
{
	if (mt_thread_frees_late()) {
		late_event(kind, ptr, size, x, 1);
		return;
	}
	struct mt_thread *t = mt_thread_get();
	if (!t) {
		if (__builtin_expect(mt_thread_ending == MT_ENDING, 0))
			late_event(kind, ptr, size, x, 1);
		return;
	}
	struct mt_tbuf *b = t->buf;
	uint64_t head;
	uint8_t *p = mt_tbuf_reserve_event(b, &head);
	if (!p) {
		mt_thread_resync(t);
		return;
	}
	mt_tbuf_commit_event(b, head, x ? mt_raw_free_x(p, kind, (uintptr_t)ptr)
				      : mt_raw_free(p, kind, (uintptr_t)ptr, size));
}

/* An event of a thread whose key destructor ran, or one of the first
 * frees of a thread with no state: through the late state
 * (mt_thread_late_begin()). */
static __attribute__((noinline)) void late_event(unsigned kind, const void *ptr, size_t size,
						 int x, int is_free)
{
	unsigned char was = mt_thread_late_begin();
	if (is_free)
		track_free(kind, ptr, size, x);
	else
		track_alloc(kind, ptr, size, NULL, x);
	mt_thread_late_end(was);
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
	mt_threads_init();
	mt_intern_lock();
	/* A new capture: ids from the start; thread states re-register
	 * lazily. */
	mt_threads_restart();
	mt_intern_reset();
	mt_intern_lines(lines);
	g.python = python;
	mt_intern_unlock();
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
 * has it freed: unlike the C library's realloc (hooks.c), a pymalloc
 * block has no usable size to ask for and record it again at. PyMem
 * realloc(p, 0) returns a live block. */
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
	struct mt_thread *t = mt_thread_self;
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
	mt_intern_lock();
	/* the threads forget the native nodes they cached, as for a code
	 * object's death */
	if (mt_intern_forget_native() == 0)
		mt_threads_stacks_stale();
	mt_intern_unlock();
}

void mt_track_thread_name(uint64_t tid, const char *name, size_t len)
{
	if (!mt_tracking)
		return;
	int own = mt_guard_enter(); /* what is made here is memtrace's */
	struct mt_thread *t = mt_thread_get();
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
	mt_intern_lock();
	if (mt_intern_code_gone(code))
		mt_threads_stacks_stale();
	mt_intern_unlock();
}
