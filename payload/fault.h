/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_FAULT_H
#define MT_PAYLOAD_FAULT_H
/*
 * Fault containment: a fault in memtrace's own code must not kill the
 * program.
 *
 * While the capture runs (mt_fault_catch() to mt_fault_release()) a
 * SIGSEGV or SIGBUS handler is first in the program's chain. A fault of a
 * thread that armed a jump (mt_fault_arm()) goes back to where it called
 * sigsetjmp(), with the signal's number: the writer thread, and the thread
 * that finishes a capture, stop there and tracking turns itself off.
 * Anywhere else, or for a signal another process sent, the program's own
 * disposition applies, as if memtrace's handler were not there.
 *
 * mt_store_guarded() is the one store memtrace makes into memory that may
 * not be writable (a GOT slot, a type's slot): -EFAULT instead of a crash.
 */
#include <setjmp.h> /* sigjmp_buf */

/* The armed jump of this thread, or NULL. Set it with mt_fault_arm() just
 * after sigsetjmp(*@j, 1) returned 0, in the same frame; clear it with
 * mt_fault_arm(NULL) before that frame returns. A fault disarms it before
 * jumping. */
extern __thread sigjmp_buf *mt_fault_jmp __attribute__((tls_model("initial-exec")));

static inline void mt_fault_arm(sigjmp_buf *j)
{
	mt_fault_jmp = j;
}

/* mt_fault_catch() - put memtrace's handler first in the chain, once (a
 * program handler installed after it may still call it; it never calls
 * that one back). Not async-signal-safe. */
void mt_fault_catch(void);

/* mt_fault_release() - give the program its dispositions back, unless it
 * has set others since (which may call ours: the handler then stays). */
void mt_fault_release(void);

/* mt_store_guarded() - *@slot = @value (release order); -EFAULT instead
 * of a crash if the page is not writable, while memtrace's fault handler
 * is in place (the capture runs); otherwise a plain store. */
int mt_store_guarded(void **slot, void *value);

#endif /* MT_PAYLOAD_FAULT_H */
