/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_PYTHON_WALK_H
#define MT_PAYLOAD_PYTHON_WALK_H
/*
 * The Python stack reader's inline part, for python.c and for the PyMem
 * wrappers in track.c, which instantiate it per layout row so that a
 * Python allocation walks the frame chain with no call in between.
 * Everything here is hook-safe.
 */
#include "payload/python-layout.h"
#include "payload/python.h"

#include <stddef.h> /* size_t */
#include <stdint.h> /* intptr_t */
#include <string.h> /* memcpy */

/* PyGILState_STATE is an enum: an int in every supported ABI. */
typedef int mt_gilstate;

struct mt_pyapi {
	int (*is_initialized)(void);
	int (*is_finalizing)(void);
	void *(*this_tstate)(void);
	void *(*gil_tstate)(void); /* the GIL holder's thread state */
	mt_gilstate (*gil_ensure)(void);
	void (*gil_release)(mt_gilstate);
	/* a thread state made out of a fork's way (mt_python_gil_take());
	 * tstate_new is NULL if any of the five is missing */
	void *(*tstate_new)(void *interp);
	void *(*interp_main)(void);
	void (*restore)(void *tstate);
	void (*tstate_clear)(void *tstate);
	void (*delete_current)(void);
	void (*mem_get)(int domain, struct mt_pymem_allocator *a);
	void (*mem_set)(int domain, struct mt_pymem_allocator *a);
	const char *(*allocator_name)(void); /* may be NULL */
	const void *code_type, *unicode_type, *bytes_type;
};

/* Set once by mt_python_init() on the control thread, then read-only;
 * mt_py_ready is stored last with release order so a hook that sees it
 * set also sees the table and API filled in. */
/* Hidden, as the payload's symbols all are, said here too so that the
 * hooks reach them without the GOT. */
extern struct mt_pyapi mt_api __attribute__((visibility("hidden")));
extern int mt_py_ready __attribute__((visibility("hidden")));
/* Py_IsInitialized() was seen true */
extern int mt_py_started __attribute__((visibility("hidden")));

static inline const void *mt_ld_ptr(const void *base, int off)
{
	const void *p;

	memcpy(&p, (const char *)base + off, sizeof(p));
	return p;
}

static inline int mt_ld_int(const void *base, int off)
{
	int v;

	memcpy(&v, (const char *)base + off, sizeof(v));
	return v;
}

/* Stacks are read by mt_update_version(), instantiated once per minor
 * version below with a constant layout row, so that every offset is an
 * immediate: this runs for every allocation. 3.8 to 3.10 chain
 * PyFrameObjects through f_back (position: f_code and f_lasti, which counts
 * bytes until 3.9, code units from 3.10); 3.11 to 3.13 chain
 * _PyInterpreterFrames through previous (position: the instruction
 * pointer, which lies inside the code object). */

#define MT_JOIN_WALK 16 /* newest frames tried as the join with the last chain */
#define MT_JOIN_SCAN 8  /* newest frames of the last chain each is looked for in */
#define MT_JOIN_PUSH 4  /* new frames tried above the last chain's newest */

static inline __attribute__((always_inline)) const void *
mt_first_frame(const struct mt_pylayout *lo, const void *tstate)
{
	if (lo->minor <= 10 || lo->ts_cframe < 0)
		return mt_ld_ptr(tstate, lo->ts_frame);
	const void *cframe = mt_ld_ptr(tstate, lo->ts_cframe);
	return cframe ? mt_ld_ptr(cframe, lo->cframe_current) : NULL;
}

/* Live frame @f's position. Before 3.11 its offset (f_lasti); from 3.11
 * its instruction pointer, which in the chain has the low bit
 * (instructions are two bytes apart, at even addresses) set for an entry
 * frame, the first one an evaluation loop runs: 3.11 reads the frame's
 * flag here; from 3.12 mt_chain_extend() sets it where the frame below
 * is a C-stack shim (or there is none). A frame run again at the same
 * instruction by another loop (a generator resumed by next() through C,
 * then inline by FOR_ITER, at the same address) is so at another
 * position: nothing keyed by positions (the chain, the threads' caches of
 * stack ids, track.c) takes the one for the other. */
static inline __attribute__((always_inline)) const void *
mt_frame_pos(const struct mt_pylayout *lo, const void *f)
{
	if (lo->minor <= 10)
		return (const void *)(intptr_t)mt_ld_int(f, lo->fr_instr);
	if (lo->minor == 11)
		return (const void *)((uintptr_t)mt_ld_ptr(f, lo->fr_instr) |
				      (*((const char *)f + lo->fr_entry) != 0));
	return mt_ld_ptr(f, lo->fr_instr);
}

/* Positions @a and @b of a frame (mt_frame_pos()'s or the chain's) are
 * the same; asked only where the frames below it are the same ones at the
 * same positions, or it is the same activation, not suspended since (a
 * marked frame). From 3.12 its entry bit then follows from the frame
 * below, a shim or not (shims live on the C stack, other frames never
 * do), and is left out. */
static inline __attribute__((always_inline)) int
mt_pos_same(const struct mt_pylayout *lo, const void *a, const void *b)
{
	return lo->minor <= 11 ? a == b : ((uintptr_t)a ^ (uintptr_t)b) <= 1;
}

/* Before 3.11 the position is an offset, so the code object is part of
 * it; from 3.11 the instruction pointer alone names the code object. */
static inline __attribute__((always_inline)) const void *
mt_frame_code(const struct mt_pylayout *lo, const void *f)
{
	return lo->minor <= 10 ? mt_ld_ptr(f, lo->fr_code) : NULL;
}

/* The chain's position for live frame @f, chain frame @i moved on to
 * another instruction (on the terms of mt_pos_same()): from 3.12 with the
 * entry bit the chain had. */
static inline __attribute__((always_inline)) const void *
mt_frame_pos_at(const struct mt_pylayout *lo, const void *f, const struct mt_pychain *c, size_t i)
{
	if (lo->minor <= 11)
		return mt_frame_pos(lo, f);
	return (const void *)((uintptr_t)mt_frame_pos(lo, f) | ((uintptr_t)c->pos[i] & 1));
}

/* Live frame @f is where frame @i of the last chain was, at the same
 * position (mt_pos_same()). */
static inline __attribute__((always_inline)) int
mt_frame_same(const struct mt_pylayout *lo, const void *f, const struct mt_pychain *c, size_t i)
{
	return mt_pos_same(lo, mt_frame_pos(lo, f), c->pos[i]) &&
	       (lo->minor > 10 || mt_frame_code(lo, f) == c->code[i]);
}

#define MT_UNMARKED 0xffffffffu /* a mark meaning: exits are not reported */

/* Frames 0..k-1 of the last chain are still, unchanged, the callers of its
 * frame k (live: the walk reached it). Each frame is read only once the
 * one above it was found to point to it, so nothing freed is touched; the
 * loads of consecutive frames still overlap, their addresses coming from
 * the array. A marked frame ends the check: its exit would have taken it
 * out of the chain, so it is the same activation, and its callers have
 * not run since the last event. */
/* 3.11 needs no feed: tokens written into the frames themselves say
 * which ones have not been suspended or left since. A frame's stack
 * pointer (stacktop) is saved whenever the eval loop suspends or leaves
 * it: for a call it makes inline, a yield, a return, an exception that
 * unwinds out of it, a trace or profile function; a new frame starts with
 * it set too. While the frame runs, itself or inside a call through C,
 * it reads -1, and nothing reads it but loops over the first stacktop
 * slots, which do nothing for any negative value (and the reload after
 * a failed MAKE_CELL, in a function's prologue). So:
 * - a running frame past its prologue gets a token in its stacktop, a
 *   negative value below -1: still there, the frame has not been
 *   suspended or left since, so its callers are the same, unchanged (its
 *   own position may have moved);
 * - a frame suspended in a call made inline (the frame above it is no
 *   entry frame) gets a token in the slot at its saved stack pointer,
 *   which the interpreter writes before it suspends the frame at that
 *   depth again (the call's first operand) or as it resumes it (the
 *   return value); an exception that unwinds into it leaves it, but the
 *   frame must then write it to be suspended there again, as must a new
 *   frame made at the same address. Still there with the stack pointer
 *   where it was, and the frame above still no entry frame, the frame has
 *   not run since: its callee is the same activation, and its callers are
 *   unchanged. Only in such a frame is the stack pointer known to be
 *   saved: 3.11.0 to 3.11.2 leave it set in a running frame whose entry
 *   was traced.
 * Never while a trace or profile function runs: the eval loop saves the
 * stack pointer to call them, without writing the slot. Chain frame @i
 * and the one above it are live. */
static inline __attribute__((always_inline)) int
mt_token_intact(const struct mt_pylayout *lo, const struct mt_pychain *c, size_t i)
{
	int top = mt_ld_int(c->frame[i], lo->fr_stacktop);
	uint64_t v;
	if (top != c->tokslot[i])
		return 0;
	if (top < 0)
		return 1;
	if (i + 1 >= c->n || *((const char *)c->frame[i + 1] + lo->fr_entry))
		return 0;
	memcpy(&v, (const char *)c->frame[i] + lo->fr_localsplus + 8 * (size_t)top, sizeof(v));
	return v == c->tok[i];
}

/* Tokens into chain frames @from..n-1 where they have none intact: those
 * suspended in calls made inline, and those running (in a call through
 * C, or the newest). Those above @from have none yet (mt_chain_extend()
 * dropped theirs); @from's is the newest. */
static __attribute__((noinline, unused)) void
mt_chain_tokens(const struct mt_pylayout *lo, struct mt_pychain *c, size_t from)
{
	for (size_t i = from; i < c->n; i++) {
		if (c->ttop == i + 1) {
			if (mt_token_intact(lo, c, i))
				continue;
			c->ttop = c->tbelow[i];
		}
		char *f = (char *)c->frame[i];
		int top = mt_ld_int(f, lo->fr_stacktop);
		c->toknext += 2;
		if (i + 1 < c->n && !*((const char *)c->frame[i + 1] + lo->fr_entry)) {
			if (top < 0)
				continue;
			uint64_t v = c->toknext;
			memcpy(f + lo->fr_localsplus + 8 * (size_t)top, &v, sizeof(v));
			c->tok[i] = v;
			c->tokslot[i] = top;
		} else {
			const char *code = mt_ld_ptr(f, lo->fr_code);
			const char *instr = mt_ld_ptr(f, lo->fr_instr);
			/* running: -1, or below it a token of a chain forgotten
			 * since (forget_stacks(): a code object died), which the
			 * frame keeps until it is suspended; a saved stack pointer
			 * (>= 0) is left alone */
			if (top >= 0 || instr < code + lo->co_code_adaptive +
							2 * mt_ld_int(code, lo->co_firsttraceable))
				continue;
			int32_t v = -2 - (int32_t)((c->toknext >> 1) & 0x3fffffff);
			memcpy(f + lo->fr_stacktop, &v, sizeof(v));
			c->tokslot[i] = v;
		}
		c->tbelow[i] = c->ttop;
		c->ttop = (uint32_t)(i + 1);
	}
}

/* 1 + the index of the newest marked frame of @c; 0: none. 3.11 has no
 * exit feed, so none is ever marked (mt_feed_gen()). */
static inline __attribute__((always_inline)) uint32_t
mt_chain_top(const struct mt_pylayout *lo, const struct mt_pychain *c)
{
	return lo->minor == 11 ? 0 : c->top;
}

/* Frames 0..k-1 of the last chain are still, unchanged, the callers of its
 * frame k (live: the walk reached it). Each frame is read only once the
 * one above it was found to point to it, so nothing freed is touched; the
 * loads of consecutive frames still overlap, their addresses coming from
 * the array. A marked frame ends the check: its exit would have taken it
 * out of the chain, so it is the same activation, and its callers have
 * not run since the last event. So does (3.11, @tokens) an intact token
 * in frame k or a caller. Returns 0 if they changed, 2 if every frame was
 * checked down to the outermost, 3 if frame k's own token says so, 1
 * otherwise. */
static inline __attribute__((always_inline)) int
mt_chain_verify(const struct mt_pylayout *lo, struct mt_pychain *c, size_t k, int tokens)
{
	/* the newest marked frame at or below k, and the newest frame with a
	 * token below k (1 + their indexes; 0: none) */
	uint32_t m = mt_chain_top(lo, c), t = 0;
	while (m > k + 1)
		m = c->below[m - 1];
	if (lo->minor == 11 && tokens) {
		for (t = c->ttop; t > k + 1;)
			t = c->tbelow[t - 1];
		if (t == k + 1) {
			/* frame k's own, if it is in its stacktop: not
			 * suspended or left since (a token in a slot would need
			 * the frame above, which the walk has not read) */
			int top = mt_ld_int(c->frame[k], lo->fr_stacktop);
			if (top < 0 && top == c->tokslot[k]) {
				c->held = (uint32_t)k + 1;
				return 3;
			}
			t = c->tbelow[k];
		}
	}
	/* plain checks down to the next frame where something else is
	 * done: a token's caller, the marked frame, the outermost */
	size_t i = k, floor = m ? m - 1 : 0;
	int same = 0;
	uint32_t held = 0;
	for (;;) {
		size_t lim = t > floor ? t : floor;
		while (i > lim) {
			const void *below = mt_ld_ptr(c->frame[i], lo->fr_back);
			if (below != c->frame[i - 1] || !mt_frame_same(lo, below, c, i - 1))
				goto out;
			i--;
		}
		if (i == floor) {
			same = m ? 1 : mt_ld_ptr(c->frame[0], lo->fr_back) == NULL ? 2 : 0;
			held = m;
			break;
		}
		/* i == t: the caller below has a token; intact, its callers
		 * are unchanged (a running frame's position may have moved) */
		if (mt_ld_ptr(c->frame[i], lo->fr_back) != c->frame[i - 1])
			break;
		int intact = mt_token_intact(lo, c, i - 1);
		t = c->tbelow[i - 1];
		if (!mt_frame_same(lo, c->frame[i - 1], c, i - 1))
			break;
		i--;
		if (intact) {
			same = 1;
			held = (uint32_t)i + 1;
			break;
		}
	}
out:
	c->held = same ? held : 0;
	c->checked += k - i;
	return same;
}

/* Frames 0..@upto of the chain were just found to be, all of them, the
 * live chain's, and the feed reports exits: the kept ones are marked, so
 * that frames older than the feed are checked once only. */
static __attribute__((noinline, unused)) void mt_chain_remark(struct mt_pychain *c, size_t upto)
{
	c->top = 0;
	for (size_t i = 0; i <= upto; i++) {
		if (c->kept[i]) {
			c->below[i] = c->top;
			c->top = (uint32_t)(i + 1);
		}
	}
}

/* Whether chain frame @i is a frame of the Python stack, and its code and
 * offset, by the rules CPython itself uses: 3.12+ C-stack shim frames and
 * frames still being set up (before their first traceable instruction)
 * are left out. */
static inline __attribute__((always_inline)) void
mt_frame_describe(const struct mt_pylayout *lo, struct mt_pychain *c, size_t i)
{
	c->kept[i] = 0;
	if (lo->minor <= 10) {
		const void *code = c->code[i];
		if (code == NULL || mt_ld_ptr(code, lo->ob_type) != mt_api.code_type)
			return;
		c->fr[i].code = code;
		c->fr[i].offset = (uint32_t)((intptr_t)c->pos[i] * (lo->minor >= 10 ? 2 : 1));
	} else {
		const void *f = c->frame[i];
		int owner = *((const signed char *)f + lo->fr_owner);
		if (lo->owned_by_cstack >= 0 && owner == lo->owned_by_cstack)
			return;
		const char *code = mt_ld_ptr(f, lo->fr_code);
		if (lo->minor >= 13 &&
		    (code == NULL || mt_ld_ptr(code, lo->ob_type) != mt_api.code_type))
			return;
		/* the position's low bit, kept as the offset's (always even):
		 * the frame is an entry frame (mt_frame_pos()); the reader
		 * pairs such frames with the loop's native frames */
		uintptr_t pos = (uintptr_t)c->pos[i];
		const char *first = code + lo->co_code_adaptive;
		const char *instr = (const char *)(pos & ~(uintptr_t)1);
		if (owner != lo->owned_by_generator &&
		    instr < first + 2 * mt_ld_int(code, lo->co_firsttraceable))
			return;
		c->fr[i].code = code;
		c->fr[i].offset = (uint32_t)(instr - first) | (uint32_t)(pos & 1);
	}
	c->kept[i] = 1;
}

/* The chain cut to its outermost @n frames: the marked frames and those
 * with tokens above are listed no more. */
static inline __attribute__((always_inline)) void mt_chain_cut(struct mt_pychain *c, size_t n)
{
	while (c->top > n)
		c->top = c->below[c->top - 1];
	while (c->ttop > n)
		c->ttop = c->tbelow[c->ttop - 1];
	c->n = (uint32_t)n;
}

/* The new frames in c->scratch[0..j) (innermost first) become chain frames
 * @keep.., described, and marked unless @mark is MT_UNMARKED, if their
 * exit will be reported: frames of the Python stack
 * (kept), as a 3.12+ shim or a frame still being set up exits unseen. */
static inline __attribute__((always_inline)) void
mt_chain_extend(const struct mt_pylayout *lo, struct mt_pychain *c, size_t keep, size_t j,
		uint32_t mark)
{
	mt_chain_cut(c, keep);
	for (size_t t = 0; t < j; t++) {
		size_t i = keep + t;
		const struct mt_pyraw *r = &c->scratch[j - 1 - t];
		uintptr_t pos = (uintptr_t)r->pos;
		if (lo->minor >= 12) /* the entry bit (mt_frame_pos()) */
			pos = (pos & ~(uintptr_t)1) |
			      (i == 0 || *((const signed char *)c->frame[i - 1] + lo->fr_owner) ==
						 lo->owned_by_cstack);
		c->frame[i] = r->frame;
		c->pos[i] = (const void *)pos;
		c->code[i] = r->code;
		mt_frame_describe(lo, c, i);
		if (mark != MT_UNMARKED && c->kept[i]) {
			c->below[i] = c->top;
			c->top = (uint32_t)(i + 1);
		}
	}
	c->n = (uint32_t)(keep + j);
}

/* A walk that kept @keep frames of the last chain ends: on 3.11, tokens
 * into the frames now suspended in calls. Returns @keep. */
static inline __attribute__((always_inline)) size_t
mt_chain_done(const struct mt_pylayout *lo, struct mt_pychain *c, size_t keep, int calm)
{
	if (lo->minor == 11 && calm)
		mt_chain_tokens(lo, c, keep ? keep - 1 : 0);
	c->checked += c->n - keep;
	return keep;
}

/* The walk met live frame @f, frame @k of the last chain, with the @j
 * frames above it in c->scratch, and mt_chain_verify() said @v: frames
 * 0..k-1 are kept, and frame k too if it has not moved. With @pushes, one
 * that moved with its own token intact (3.11, @v 3) keeps the token: it
 * is the same activation, only described again. Returns how many
 * outermost frames kept their id[]. */
static inline __attribute__((always_inline)) size_t
mt_chain_join(const struct mt_pylayout *lo, struct mt_pychain *c, const void *f, size_t k,
	      size_t j, int v, uint32_t mark, int calm, int pushes)
{
	if (v == 2 && mark != MT_UNMARKED)
		mt_chain_remark(c, k);
	size_t keep = k + 1;
	if (!mt_frame_same(lo, f, c, k)) {
		if (pushes && lo->minor == 11 && v == 3) {
			/* its token was just found intact: tokens from the
			 * frame above (mt_chain_done() would check it again) */
			c->pos[k] = mt_frame_pos(lo, f);
			mt_frame_describe(lo, c, k);
			mt_chain_extend(lo, c, k + 1, j, mark);
			if (calm)
				mt_chain_tokens(lo, c, k + 1);
			c->checked += c->n - k;
			return k;
		}
		keep = k;
		c->scratch[j++] = (struct mt_pyraw){ f, mt_frame_pos(lo, f), mt_frame_code(lo, f) };
	}
	mt_chain_extend(lo, c, keep, j, mark);
	return mt_chain_done(lo, c, keep, calm);
}

/* The generation of the exit feed for @tstate's frames: marks of it are
 * good; 0 when exits are not reported (the feed is off, or before 3.12
 * this thread's profile function is not the feed's). */
static inline __attribute__((always_inline)) uint32_t
mt_feed_gen(const struct mt_pylayout *lo, const void *tstate)
{
	if (lo->minor == 11) /* tokens instead (pyfeed.c never starts there) */
		return 0;
	uint32_t gen = __atomic_load_n(&mt_pyfeed_now.gen, __ATOMIC_RELAXED);
	if (gen && lo->minor <= 11 && mt_ld_ptr(tstate, lo->ts_profilefunc) != mt_pyfeed_now.profile)
		return 0;
	return gen;
}

/* The calling thread's chain into @c, matched against the chain there:
 * walk from the newest frame to the first one the last chain held (in a
 * loop: the same frame, or one or two calls above it), check that the
 * frames below it are still the same ones at the same positions, and
 * describe only the frames above. Anything else (a long return, a chain
 * that changed below) walks the whole chain and keeps its unchanged
 * outermost part. @pushes (the GOT hooks, whose events often come a call
 * or two deeper each time; the PyMem wrappers' mostly only move the newest
 * frame): look above the last chain's newest frame first when the last
 * walk joined there. Returns how many outermost frames kept their id[]. */
static inline __attribute__((always_inline)) size_t
mt_update_version(const struct mt_pylayout *lo, const void *tstate, struct mt_pychain *c,
		  int pushes)
{
	const void *f = mt_first_frame(lo, tstate);
	size_t nold = c->whole ? c->n : 0, j = 0, keep;
	uint32_t gen = mt_feed_gen(lo, tstate);
	if (lo->minor != 11 && c->gen != gen) {
		/* marks of another generation mean nothing: none is marked */
		c->gen = gen;
		c->top = 0;
	}
	/* Frames run inside a trace or profile function, or another tool's
	 * callback, exit unreported: not marked; nor are tokens used then. */
	int calm = mt_ld_int(tstate, lo->ts_tracing) == 0;
	uint32_t mark = gen && calm ? gen : MT_UNMARKED;
	/* a newest frame left undescribed last time is only ever matched by
	 * frame and position from now on, and described again if it moves:
	 * c->lazy is set on every way out */
	int join = nold > 0;

	c->held = 0;
	if (join && f == c->frame[nold - 1]) {
		/* The usual case: the same newest frame, its callers unchanged. */
		int v = mt_chain_verify(lo, c, nold - 1, calm);
		if (v == 2 && mark != MT_UNMARKED)
			mt_chain_remark(c, nold - 1);
		if (v && v != 3 && lo->minor == 11 && calm)
			mt_chain_tokens(lo, c, nold - 1);
		if (!v) {
			join = 0;
		} else if (mt_frame_same(lo, f, c, nold - 1)) {
			c->lazy = 0;
			return nold;
		} else {
			c->pos[nold - 1] = mt_frame_pos_at(lo, f, c, nold - 1);
			if (lo->minor > 10) { /* code[] stays NULL from 3.11 */
				c->lazy = 1;
			} else {
				c->lazy = 0;
				c->code[nold - 1] = mt_frame_code(lo, f);
				mt_frame_describe(lo, c, nold - 1);
			}
			return nold - 1;
		}
	}
	c->lazy = 0;
	size_t lowest = nold > MT_JOIN_SCAN ? nold - MT_JOIN_SCAN : 0;

	if (pushes && join && c->pushed) {
		/* The last event's frames joined the chain before at its newest
		 * frame, calls made since on top of it: the frames pushed since
		 * are looked for at that frame alone, a compare a step. Found
		 * and checked, that frame and those below it are live, so none
		 * of the frames above it can be in the last chain: the scan
		 * below would have joined there too. */
		const void *top = c->frame[nold - 1], *g = f;
		size_t i = 0;
		while (g != NULL && g != top && i < MT_JOIN_PUSH) {
			c->scratch[i++] = (struct mt_pyraw){ g, mt_frame_pos(lo, g),
							     mt_frame_code(lo, g) };
			g = mt_ld_ptr(g, lo->fr_back);
		}
		if (g == top && nold + i <= MT_CHAIN_MAX) {
			int v = mt_chain_verify(lo, c, nold - 1, calm);
			if (v)
				return mt_chain_join(lo, c, g, nold - 1, i, v, mark, calm, 1);
			/* the scan would have met the same frame first and
			 * given up joining there, as here */
			join = 0;
			c->pushed = 0;
			f = g;
			j = i;
		} else {
			c->pushed = 0;
		}
	}

	while (f != NULL && j < MT_CHAIN_MAX) {
		if (join && j < MT_JOIN_WALK) {
			for (size_t k = nold; k-- > lowest;) {
				if (c->frame[k] != f)
					continue;
				int v = mt_chain_verify(lo, c, k, calm);
				if (!v || k + j + 1 > MT_CHAIN_MAX) {
					join = c->held = 0;
					break;
				}
				if (pushes)
					c->pushed = j && k + 1 == nold;
				return mt_chain_join(lo, c, f, k, j, v, mark, calm, pushes);
			}
		}
		if (mt_chain_top(lo, c) && f == c->frame[c->top - 1] &&
		    c->top + j <= MT_CHAIN_MAX) {
			/* the newest marked frame: the same activation, its
			 * callers unchanged, whatever the depth */
			keep = c->held = c->top;
			if (!mt_frame_same(lo, f, c, keep - 1)) {
				keep--;
				c->scratch[j++] = (struct mt_pyraw){ f, mt_frame_pos(lo, f),
								     mt_frame_code(lo, f) };
			}
			mt_chain_extend(lo, c, keep, j, mark);
			return mt_chain_done(lo, c, keep, calm);
		}
		c->scratch[j++] = (struct mt_pyraw){ f, mt_frame_pos(lo, f), mt_frame_code(lo, f) };
		f = mt_ld_ptr(f, lo->fr_back);
	}

	if (f != NULL) {
		/* Deeper than we follow: the newest MT_CHAIN_MAX frames, of
		 * which the newest MT_STACK_MAX Python frames are kept; not
		 * matched next time, as frame 0 is not the outermost. */
		c->whole = 0;
		c->checked += j;
		mt_chain_extend(lo, c, 0, j, MT_UNMARKED);
		size_t py = 0;
		for (size_t i = j; i-- > 0;)
			if (c->kept[i] && ++py > MT_STACK_MAX)
				c->kept[i] = 0;
		return 0;
	}
	for (keep = 0; keep < j && keep < nold; keep++) {
		const struct mt_pyraw *r = &c->scratch[j - 1 - keep];
		if (r->frame != c->frame[keep] || !mt_pos_same(lo, r->pos, c->pos[keep]) ||
		    r->code != c->code[keep])
			break;
	}
	c->whole = 1;
	if (keep && mark != MT_UNMARKED)
		mt_chain_remark(c, keep - 1);
	mt_chain_extend(lo, c, keep, j - keep, mark);
	return mt_chain_done(lo, c, keep, calm);
}

/* Whether live chain frame @i has an evaluation loop of its own, one
 * activation of _PyEval_EvalFrameDefault on the C stack: before 3.11
 * every frame; 3.11 an entry frame; from 3.12 the C-stack shim that each
 * activation puts below its first frame (counted in its place, as it is
 * in the chain whatever the frames above it are). */
static inline __attribute__((always_inline)) int
mt_frame_starts_eval(const struct mt_pylayout *lo, const struct mt_pychain *c, size_t i)
{
	if (lo->minor <= 10)
		return 1;
	if (lo->minor == 11)
		return *((const char *)c->frame[i] + lo->fr_entry) != 0;
	return *((const signed char *)c->frame[i] + lo->fr_owner) == lo->owned_by_cstack;
}

/* The calling thread's state, or NULL while Python cannot be walked. */
static inline __attribute__((always_inline)) const void *mt_walk_tstate(int gil)
{
	/* A thread holding the GIL (the PyMem hooks) reads its own state,
	 * live while it runs: the current one, NULL once deleted. The hooks
	 * are put in place only once mt_python_init() succeeded and the
	 * interpreter was initialized (pymem.c), so neither is checked. */
	if (gil)
		return mt_api.gil_tstate();
	if (!__atomic_load_n(&mt_py_ready, __ATOMIC_ACQUIRE))
		return NULL;
	/* Initialization happens once; finalization is checked every time
	 * on threads that may not hold the GIL, as other threads' states are
	 * freed from then on. */
	if (!mt_py_started) {
		if (!mt_api.is_initialized())
			return NULL;
		mt_py_started = 1;
	}
	if (mt_api.is_finalizing())
		return NULL;
	return mt_api.this_tstate();
}

/* mt_python_update() for layout @lo; @gil: the caller holds the GIL. */
static inline __attribute__((always_inline)) size_t
mt_python_walk(const struct mt_pylayout *lo, int gil, struct mt_pychain *c)
{
	const void *tstate = mt_walk_tstate(gil);
	if (tstate == NULL) {
		c->n = c->lazy = c->held = 0;
		return 0;
	}
	return mt_update_version(lo, tstate, c, !gil);
}

#endif /* MT_PAYLOAD_PYTHON_WALK_H */
