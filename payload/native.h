/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_NATIVE_H
#define MT_PAYLOAD_NATIVE_H
/*
 * Native stacks in the target: the calling thread's return addresses,
 * unwound from DWARF call frame information (Debian's python3 keeps no
 * frame pointers) by unwind.h, or by libunwind where unwind.h cannot
 * (MEMTRACE_TEST_LIBUNWIND=1: always), and the process's module map,
 * which the reader resolves them against. Symbols are never looked up
 * here.
 *
 * libunwind is loaded with RTLD_LOCAL when native tracking first starts,
 * never linked: its _Unwind_* entry points must not take the place of
 * libgcc's for the program's C++ exceptions.
 *
 * mt_native_unwind() is hook-safe (libunwind's local unwinder takes no
 * lock of ours and allocates only through hooks that pass through while
 * the guard is held). mt_native_start() and mt_native_modules() run on
 * control paths or in the dlopen hook, never inside an allocation hook:
 * dl_iterate_phdr takes the loader's lock.
 */
#include "format/record.h" /* struct mt_rec_module */

#include <stddef.h> /* size_t */
#include <stdint.h> /* uintptr_t */

/* Return addresses kept per event: the innermost ones (a recursion of
 * thousands of Python frames through C is some tens of thousands); the
 * unwinder needs MT_NATIVE_SLACK more entries for memtrace's own frames. */
#define MT_NATIVE_MAX 65536
#define MT_NATIVE_SLACK 16

/* The evaluation loop's code (_PyEval_EvalFrameDefault), where each of its
 * activations on a native stack has its return address: its body and its
 * out-of-line part (cold_lo == cold_hi when none was found). All zero when
 * it was not found. Set by mt_native_start(), read-only after. */
struct mt_native_evals {
	uintptr_t lo, hi, cold_lo, cold_hi;
};
extern struct mt_native_evals mt_native_evals __attribute__((visibility("hidden")));

/* Return address @ip is in the loop: its call is (ip - 1). */
static inline int mt_native_is_eval(uintptr_t ip)
{
	const struct mt_native_evals *e = &mt_native_evals;
	return (ip - 1 - e->lo < e->hi - e->lo) | (ip - 1 - e->cold_lo < e->cold_hi - e->cold_lo);
}

/* mt_native_start() - load libunwind and warm it up on this thread.
 * Returns 0, or -ENOENT when libunwind cannot be loaded (the reason is
 * then in mt_native_error()). Idempotent. */
int mt_native_start(void);
const char *mt_native_error(void);

/* mt_native_unwind() - the calling thread's return addresses, innermost
 * first, memtrace's own frames left out: at most @max into @ips, which
 * has room for @max + MT_NATIVE_SLACK. Returns how many. Hook-safe; 0
 * before mt_native_start() succeeded. */
size_t mt_native_unwind(uintptr_t *ips, size_t max);

/* mt_native_report() - with MEMTRACE_TEST_UNWIND_CHECK=1 (every stack
 * unwound by unwind.h is unwound by libunwind too and compared), how
 * many were, how many differed and how many unwind.h left to libunwind,
 * on stderr. Control path. */
void mt_native_report(void);

/* mt_native_skipped_take() - how many stacks were left empty since the
 * last call because a fork under way kept them from being unwound
 * (phdr.h); the count starts again at 0. */
unsigned long mt_native_skipped_take(void);

/* mt_native_unloaded() - code may have been unloaded: what was learned
 * of the code at its addresses is forgotten. */
void mt_native_unloaded(void);

/* mt_native_unwind_to() - as mt_native_unwind(), but it may stop @past
 * return addresses after the @need-th one in the evaluation loop (from
 * the innermost; 0: none), which then ends @ips. Stacks left to libunwind
 * are unwound whole (as deep as @max). @local: the calling thread's own
 * cache of the unwinder's rules (payload/unwind.h), or NULL. */
struct mt_unwind_local;
size_t mt_native_unwind_to(uintptr_t *ips, size_t max, size_t need, size_t past,
			   struct mt_unwind_local *local);

/* mt_native_modules() - the loaded modules as MODULE records of a new
 * generation, one call of @fn each (path and build-id borrowed for the
 * call; the main program under its real path; the vDSO left out): @all
 * of them, at the start of a capture, else those the capture has not
 * had yet (the same file at the same place), or not since they were last
 * unloaded (another object may have taken their place). Calls @fn outside the
 * loader's lock. Returns the generation, or -ENOMEM. */
typedef void (*mt_native_module_fn)(void *ctx, const struct mt_rec_module *m);
int mt_native_modules(int all, mt_native_module_fn fn, void *ctx);

/* mt_native_after_fork() - in a fork child: free the lock a thread the
 * child does not have may have held. */
void mt_native_after_fork(void);

#endif /* MT_PAYLOAD_NATIVE_H */
