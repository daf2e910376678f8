/* SPDX-License-Identifier: MIT */
/*
 * Fault containment (fault.h): the SIGSEGV/SIGBUS handler, its place in
 * the program's chain, and the guarded store.
 */
#include "payload/fault.h"

#include <errno.h>  /* EFAULT */
#include <signal.h> /* sigaction */
#include <string.h> /* memset */
#include <unistd.h> /* getpid */

__thread sigjmp_buf *mt_fault_jmp __attribute__((tls_model("initial-exec")));

static struct {
	int ours; /* our handler is in the program's chain */
	struct sigaction old_segv, old_bus;
} f;

/* A fault of the guarded thread: raised by the kernel, or re-raised by
 * this process (Python's faulthandler, installed after us, reports the
 * fault and raises it again for the handler it replaced), not sent by
 * another process. */
static int own_fault(const siginfo_t *si)
{
	return si->si_code > 0 || (si->si_code == SI_TKILL && si->si_pid == getpid());
}

static void on_fault(int sig, siginfo_t *si, void *uc)
{
	sigjmp_buf *j = mt_fault_jmp;
	if (j && own_fault(si)) {
		mt_fault_jmp = NULL;
		siglongjmp(*j, sig);
	}
	const struct sigaction *old = sig == SIGSEGV ? &f.old_segv : &f.old_bus;
	if (old->sa_handler == SIG_IGN && si->si_code <= 0)
		return; /* sent, and ignored */
	if (old->sa_handler == SIG_DFL || old->sa_handler == SIG_IGN) {
		/* A fault happens again on return, now with the program's
		 * disposition (the kernel does not let a fault be ignored); a
		 * signal someone sent is sent again. */
		sigaction(sig, old, NULL);
		if (si->si_code <= 0)
			raise(sig);
	} else if (old->sa_flags & SA_SIGINFO) {
		old->sa_sigaction(sig, si, uc);
	} else {
		old->sa_handler(sig);
	}
}

int mt_store_guarded(void **slot, void *value)
{
	sigjmp_buf jb, *prev = mt_fault_jmp;
	if (!f.ours) {
		__atomic_store_n(slot, value, __ATOMIC_RELEASE);
		return 0;
	}
	if (sigsetjmp(jb, 1) != 0) {
		mt_fault_jmp = prev;
		return -EFAULT;
	}
	mt_fault_jmp = &jb;
	__atomic_store_n(slot, value, __ATOMIC_RELEASE);
	mt_fault_jmp = prev;
	return 0;
}

static int is_ours(int sig)
{
	struct sigaction cur;
	return sigaction(sig, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
	       cur.sa_sigaction == on_fault;
}

void mt_fault_catch(void)
{
	if (f.ours)
		return;
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_fault;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGSEGV, &sa, &f.old_segv);
	sigaction(SIGBUS, &sa, &f.old_bus);
	f.ours = 1;
}

void mt_fault_release(void)
{
	if (!is_ours(SIGSEGV) || !is_ours(SIGBUS))
		return;
	sigaction(SIGSEGV, &f.old_segv, NULL);
	sigaction(SIGBUS, &f.old_bus, NULL);
	f.ours = 0;
}
