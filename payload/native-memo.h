/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_NATIVE_MEMO_H
#define MT_PAYLOAD_NATIVE_MEMO_H
/*
 * A native stack unwound only as deep as it changed since the thread's
 * last event, the rest taken from that event's return addresses: the
 * cost of a native event then does not grow with the depth of the stack
 * below the code that runs.
 *
 * Sound because of the Python walk's proof (struct mt_pychain, held): a
 * frame that has been neither suspended nor left since the last event
 * kept the activation of _PyEval_EvalFrameDefault that runs it (E) on the
 * C stack all along, so every native frame outer than E is as it was. E
 * is found among the new return addresses by counting the evaluation
 * loops (mt_native_is_eval()) the chain above the frame has (one per
 * frame before 3.11, per entry frame on 3.11, per C-stack shim from
 * 3.12), and in the last event's by counting from the outermost end, which
 * the chain below it fixes. Used only where both counts can be trusted:
 * the last event's stack had exactly as many loops as its chain (a return
 * address in code not known as the loop's, a chain cut short, a stack
 * unwound incompletely: not used next time), and the return addresses
 * unwound past E are the last event's at their places. Everything else
 * unwinds the whole stack, as does MEMTRACE_TEST_NATIVE_FULL=1; with
 * MEMTRACE_TEST_NATIVE_CHECK=1 a stack taken in part from the last one is
 * unwound whole as well, and compared (mt_memo_report()).
 *
 * Everything here runs in allocation hooks on the thread's own state.
 */
#include "payload/native.h" /* MT_NATIVE_MAX */
#include "payload/python.h" /* struct mt_pychain */
#include "payload/unwind.h" /* struct mt_unwind_local */

#include <stddef.h> /* size_t */
#include <stdint.h> /* uint32_t */

#define MT_MEMO_NO_WALK ((size_t)-1) /* the event did not read the chain */

struct mt_native_memo {
	uint32_t gen;     /* the generation (mt_memo_start()) the rest is of */
	uint32_t ok;      /* the last event's stack may be used */
	uint32_t pyn;     /* entries of pyev[] that hold for the chain */
	uint32_t nn;      /* entries of nev[] that hold for the last stack */
	uint32_t pyevals; /* the chain's loops at this event; 0: not known */
	uint32_t pyev[MT_CHAIN_MAX]; /* loops of chain frames 0..i */
	uint32_t nev[MT_NATIVE_MAX];  /* loops among return addresses 0..k (outermost first) */
	uint32_t evat[MT_NATIVE_MAX]; /* where the j-th loop from the outermost is */
	struct mt_unwind_local local; /* the unwinder's rules for this thread's frames */
};

/* mt_memo_start() - read MEMTRACE_TEST_NATIVE_FULL and start a new
 * generation: what threads remember from before is not used. Control
 * path, when native stacks are turned on. */
void mt_memo_start(void);

/* mt_memo_report() - with MEMTRACE_TEST_NATIVE_CHECK=1 (every stack taken
 * in part from the last event's is unwound whole too and compared), how
 * many were and how many differed, on stderr. Control path, when native
 * stacks are turned off. */
void mt_memo_report(void);

/* mt_memo_unwind() - the calling thread's return addresses, innermost
 * first, into @ips (room for MT_NATIVE_MAX + MT_NATIVE_SLACK) as
 * mt_native_unwind() has them, or only the newest of them: returns how
 * many the stack has, and in *@same how many outermost ones are @nips'
 * (the last event's, outermost first, @nn of them), which @ips then does
 * not hold. @c: the chain just read, of which @keep outermost frames were
 * unchanged (MT_MEMO_NO_WALK: not read). */
size_t mt_memo_unwind(struct mt_native_memo *m, const struct mt_pychain *c, size_t keep,
		      const uintptr_t *nips, size_t nn, uintptr_t *ips, size_t *same);

/* mt_memo_done() - the event's stack is @nips[0..@n), of which @from
 * outermost were the last event's. */
void mt_memo_done(struct mt_native_memo *m, const uintptr_t *nips, size_t from, size_t n);

/* mt_memo_forget() - the thread's stacks are forgotten. */
static inline void mt_memo_forget(struct mt_native_memo *m)
{
	m->ok = m->pyn = m->nn = 0;
}

#endif /* MT_PAYLOAD_NATIVE_MEMO_H */
