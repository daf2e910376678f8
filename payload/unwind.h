/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_UNWIND_H
#define MT_PAYLOAD_UNWIND_H
/*
 * The calling thread's return addresses from the DWARF call frame
 * information the loaded objects carry (.eh_frame, found through the
 * sorted table of .eh_frame_hdr), without libunwind. What a frame needs
 * to find its caller is cached process-wide, per return address, in one
 * 64-bit word: the CFA as rsp or rbp plus an offset, the return address
 * just below the CFA, and rbp kept or saved at a slot below the CFA. A
 * frame met before costs a probe of the cache and two loads. A thread may
 * keep a small cache of its own in front of it (struct mt_unwind_local),
 * which the frames of its hot paths stay in: a load from its first-level
 * data cache where the shared cache's sets are mostly further away.
 *
 * A frame of any other form (a signal frame, a CFA from an expression or
 * another register, a return address or rbp kept elsewhere, code with no
 * unwinding information, a CFA that does not move outwards) fails the
 * whole unwind: the caller unwinds with libunwind, which knows them all.
 * x86-64 only: elsewhere every unwind fails.
 *
 * mt_unwind() allocates nothing and takes no lock of ours, so it may run
 * in allocation hooks. A return address not cached yet is looked up
 * under the loader's lock (dl_iterate_phdr), as libunwind does.
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uintptr_t */

/* mt_unwind_init() - map the cache. Returns 0, -ENOMEM, or -ENOSYS where
 * the unwinder does not exist. Control path; idempotent. */
int mt_unwind_init(void);

/* Where mt_unwind() may stop before the stack ends: @past return
 * addresses after the @need-th one whose call (the address less one) is
 * in [lo[i], hi[i]) for an i. */
struct mt_unwind_stop {
	uintptr_t lo[2], hi[2];
	size_t need, past;
};

/* A thread's own cache of rules, direct-mapped by the return address's
 * low bits: zeroed, or as mt_unwind() left it. Emptied by mt_unwind()
 * when mt_unwind_forget() was called since it was last filled. */
#define MT_UNWIND_LOCAL_BITS 8
struct mt_unwind_local {
	unsigned long forgets; /* mt_unwind_forget() calls it has seen */
	uint64_t word[1u << MT_UNWIND_LOCAL_BITS];
};

/* mt_unwind() - the calling thread's return addresses, innermost first
 * (the first one in mt_unwind()'s caller), at most @max into @ips, as
 * libunwind's unw_backtrace() gives them; with @stop (NULL: none) no more
 * than it asks for. @local: the calling thread's own cache, or NULL.
 * Returns how many, or -1: a frame of a form not handled here was met
 * (nothing in @ips is valid), or -2: a fork under way kept the look-up of
 * a frame's rule from being made (mt_phdr_walk_if()): no stack now. */
long mt_unwind(uintptr_t *ips, size_t max, const struct mt_unwind_stop *stop,
	       struct mt_unwind_local *local);

/* mt_unwind_forget() - drop every cached rule: code may have been
 * unloaded and other code loaded at its addresses. Safe while other
 * threads unwind. */
void mt_unwind_forget(void);

/* mt_unwind_learned() - how many return addresses were looked up in the
 * unwinding tables since mt_unwind_init() (a measure of the cache). */
unsigned long mt_unwind_learned(void);

#endif /* MT_PAYLOAD_UNWIND_H */
