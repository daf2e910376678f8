/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_SPAWN_H
#define MT_PAYLOAD_SPAWN_H
/*
 * The payload's short-lived threads (control.c's start and stop, the
 * exit feed's switch in pyadapt.c): detached, with every signal blocked
 * but the faults (a GOT store the loader made read-only under us is
 * caught by the payload's handler and retried: a blocked fault kills the
 * process).
 */
#include <pthread.h> /* pthread_create */
#include <signal.h>  /* sigfillset */

/* mt_spawn() - run @fn(@arg) on a thread of its own. 0 or -errno. */
static inline int mt_spawn(void *(*fn)(void *), void *arg)
{
	pthread_t t;
	pthread_attr_t attr;
	sigset_t all, old;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	sigfillset(&all);
	sigdelset(&all, SIGSEGV);
	sigdelset(&all, SIGBUS);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = -pthread_create(&t, &attr, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	return rc;
}

#endif /* MT_PAYLOAD_SPAWN_H */
