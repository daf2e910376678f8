/* SPDX-License-Identifier: MIT */
/*
 * Walks of the loaded objects out of a fork's way (phdr.h). A count of the
 * walks under way and a flag set while a fork is made: a walker counts
 * itself in, then looks at the flag; the fork's prepare handler sets the
 * flag, then waits for the count to drop to 0 (both sequentially
 * consistent, so that one of the two always sees the other). The child
 * starts a new generation: a walk its thread was in at the fork leaves
 * without counting itself out of the new count.
 */
#include "payload/phdr.h"

#include <pthread.h> /* pthread_atfork */
#include <sched.h>   /* sched_yield */
#include <stdint.h>  /* int64_t */
#include <time.h>    /* clock_gettime, nanosleep */

#define WALK_WAIT_NS (200 * 1000000LL)
#define FORK_WAIT_NS (1000 * 1000000LL)

static int walkers;       /* walks under way */
static int forking;       /* a fork is being made, by forker */
static pthread_t forker;
static int generation = 1; /* one more in every fork child; tokens are it */
/* this thread's walks under way (a signal handler's nested in its own) */
static __thread __attribute__((tls_model("initial-exec"))) int depth;

static int64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* A short wait: a few yields first (a walk takes microseconds), then
 * naps of 0.1 ms. */
static void pause_a_little(unsigned *round)
{
	if ((*round)++ < 16) {
		sched_yield();
		return;
	}
	struct timespec t = { 0, 100000 };
	nanosleep(&t, NULL);
}

int mt_phdr_enter(int optional)
{
	int64_t give_up = 0;
	unsigned round = 0;

	for (;;) {
		if (__atomic_load_n(&forking, __ATOMIC_SEQ_CST) &&
		    pthread_equal(__atomic_load_n(&forker, __ATOMIC_RELAXED), pthread_self()))
			return 0; /* the fork's own handlers: it waits for no one */
		__atomic_add_fetch(&walkers, 1, __ATOMIC_SEQ_CST);
		/* in a walk already, this thread holds any fork off: no wait */
		if (depth > 0 || !__atomic_load_n(&forking, __ATOMIC_SEQ_CST)) {
			depth++;
			return __atomic_load_n(&generation, __ATOMIC_RELAXED);
		}
		__atomic_sub_fetch(&walkers, 1, __ATOMIC_SEQ_CST);
		int64_t now = now_ns();
		if (!give_up)
			give_up = now + WALK_WAIT_NS;
		else if (now >= give_up)
			return optional ? -1 : 0;
		pause_a_little(&round);
	}
}

void mt_phdr_leave(int token)
{
	if (token <= 0)
		return;
	depth--;
	if (token == __atomic_load_n(&generation, __ATOMIC_RELAXED))
		__atomic_sub_fetch(&walkers, 1, __ATOMIC_SEQ_CST);
}

int mt_phdr_walk(int (*cb)(struct dl_phdr_info *, size_t, void *), void *data)
{
	int token = mt_phdr_enter(0);
	int ret = dl_iterate_phdr(cb, data);
	mt_phdr_leave(token);
	return ret;
}

int mt_phdr_walk_if(int (*cb)(struct dl_phdr_info *, size_t, void *), void *data)
{
	int token = mt_phdr_enter(1);
	if (token < 0)
		return -1;
	int ret = dl_iterate_phdr(cb, data);
	mt_phdr_leave(token);
	return ret;
}

static void prepare(void)
{
	__atomic_store_n(&forker, pthread_self(), __ATOMIC_RELAXED);
	__atomic_store_n(&forking, 1, __ATOMIC_SEQ_CST);
	/* this thread's own walk, if a signal handler forks inside one,
	 * cannot end while it waits */
	int own = depth;
	int64_t give_up = now_ns() + FORK_WAIT_NS;
	unsigned round = 0;
	while (__atomic_load_n(&walkers, __ATOMIC_SEQ_CST) > own && now_ns() < give_up)
		pause_a_little(&round);
}

static void parent(void)
{
	__atomic_store_n(&forking, 0, __ATOMIC_SEQ_CST);
}

static void child(void)
{
	/* one thread: no walk is under way but perhaps its own, which the
	 * new generation does not count */
	__atomic_store_n(&walkers, 0, __ATOMIC_SEQ_CST);
	__atomic_add_fetch(&generation, 1, __ATOMIC_SEQ_CST);
	__atomic_store_n(&forking, 0, __ATOMIC_SEQ_CST);
}

static void guard_once(void)
{
	pthread_atfork(prepare, parent, child);
}

void mt_phdr_guard(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, guard_once);
}
