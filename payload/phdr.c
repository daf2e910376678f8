/* SPDX-License-Identifier: MIT */
/*
 * Walks of the loaded objects out of a fork's way (phdr.h). A count of the
 * walks under way and a count of the forks being made: a walker counts
 * itself in, then looks at the forks; a fork's prepare handler counts
 * itself in, then waits for the walks to drop to what its own thread
 * holds (both sequentially consistent, so that one of the two always sees
 * the other). The child starts a new generation: a walk its thread was in
 * at the fork leaves without counting itself out of the new count.
 *
 * What the waits cannot prevent, they say: a fork made while a walk may
 * have been under way (the fork gave up waiting, a needed walk gave up
 * waiting for the fork, or the forking thread interrupted a walk of its
 * own) marks the child unsafe, and the child's walks are skipped.
 */
#include "payload/phdr.h"
#include "payload/wait.h"

#include <errno.h>       /* errno */
#include <pthread.h>     /* pthread_atfork */
#include <sched.h>       /* sched_yield */
#include <stdint.h>      /* int64_t */
#include <sys/syscall.h> /* SYS_nanosleep */
#include <time.h>        /* struct timespec */
#include <unistd.h>      /* getpid, syscall */

#define WALK_WAIT_NS (200 * 1000000LL)    /* a needed walk */
#define OPTIONAL_WAIT_NS (10 * 1000000LL) /* an unwind's */
#define FORK_WAIT_NS (1000 * 1000000LL)

static int walkers;       /* walks under way */
static int forking;       /* forks being made */
static int tainted;       /* a fork under way may meet a walk */
static int unsafe;        /* a walk may have been under way at this process's fork */
static pid_t home;        /* the process the counts are of */
static int generation = 1; /* one more in every fork child; tokens are it */
/* this thread's walks under way (a signal handler's nested in its own) */
static __thread __attribute__((tls_model("initial-exec"))) int depth;
/* this thread is making a fork: between its prepare and parent or child */
static __thread __attribute__((tls_model("initial-exec"))) int in_fork;

/* A short wait: a few yields first (a walk takes microseconds), then
 * naps of 0.1 ms; not a cancellation point (a thread cancelled here could
 * leave a lock of its caller's held), and errno as it was. */
static void pause_a_little(unsigned *round)
{
	if ((*round)++ < 16) {
		sched_yield();
		return;
	}
	int e = errno;
	struct timespec t = { 0, 100000 };
	syscall(SYS_nanosleep, &t, NULL);
	errno = e;
}

static int count_in(void)
{
	/* depth first, walkers last: a fork from a signal handler in
	 * between takes the walk for its own (and marks its child unsafe) */
	depth++;
	__atomic_add_fetch(&walkers, 1, __ATOMIC_SEQ_CST);
	return __atomic_load_n(&generation, __ATOMIC_RELAXED);
}

int mt_phdr_enter(int optional)
{
	if (__atomic_load_n(&unsafe, __ATOMIC_RELAXED) && optional)
		return -1;
	/* the fork's own handlers wait for no one, but are counted: another
	 * thread's fork waits for them */
	if (in_fork)
		return count_in();
	int64_t give_up = 0;
	unsigned round = 0;
	for (;;) {
		int token = count_in();
		/* in a walk already, this thread holds any fork off: no wait */
		if (depth > 1 || !__atomic_load_n(&forking, __ATOMIC_SEQ_CST))
			return token;
		__atomic_sub_fetch(&walkers, 1, __ATOMIC_SEQ_CST);
		depth--;
		int64_t now = (int64_t)mt_mono_ns();
		if (!give_up) {
			give_up = now + (optional ? OPTIONAL_WAIT_NS : WALK_WAIT_NS);
		} else if (now >= give_up) {
			if (optional)
				return -1;
			/* a fork handler of the program's may wait for this
			 * thread: go on, counted (a fork still waiting waits
			 * for it), and say that the child may inherit it */
			int held = count_in();
			__atomic_store_n(&tainted, 1, __ATOMIC_SEQ_CST);
			/* unless the fork ended since it was seen: its parent
			 * handler cleared the mark already, and this one would
			 * mark the next fork's child, made without a walk */
			if (!__atomic_load_n(&forking, __ATOMIC_SEQ_CST))
				__atomic_store_n(&tainted, 0, __ATOMIC_SEQ_CST);
			return held;
		}
		pause_a_little(&round);
	}
}

void mt_phdr_leave(int token)
{
	if (token <= 0)
		return;
	if (token == __atomic_load_n(&generation, __ATOMIC_RELAXED))
		__atomic_sub_fetch(&walkers, 1, __ATOMIC_SEQ_CST);
	depth--;
}

int mt_phdr_walk(int (*cb)(struct dl_phdr_info *, size_t, void *), void *data)
{
	if (__atomic_load_n(&unsafe, __ATOMIC_RELAXED))
		return -1;
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

int mt_phdr_unsafe(void)
{
	return __atomic_load_n(&unsafe, __ATOMIC_RELAXED);
}

/* A fork child's counts: no walk is under way but perhaps its own thread's,
 * which the new generation does not count. */
static void start_afresh(void)
{
	__atomic_store_n(&walkers, 0, __ATOMIC_SEQ_CST);
	__atomic_add_fetch(&generation, 1, __ATOMIC_SEQ_CST);
	__atomic_store_n(&forking, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&home, getpid(), __ATOMIC_RELAXED);
}

static void prepare(void)
{
	int e = errno;
	/* a child made without the fork handlers (a raw clone) kept its
	 * parent's counts */
	if (__atomic_load_n(&home, __ATOMIC_RELAXED) != getpid())
		start_afresh();
	in_fork = 1;
	__atomic_add_fetch(&forking, 1, __ATOMIC_SEQ_CST);
	/* this thread's own walk, if a signal handler forks inside one,
	 * cannot end while it waits, and leaves the loader's lock held in
	 * the child whatever happens */
	int own = depth;
	if (own)
		__atomic_store_n(&tainted, 1, __ATOMIC_SEQ_CST);
	int64_t give_up = (int64_t)mt_mono_ns() + FORK_WAIT_NS;
	unsigned round = 0;
	while (__atomic_load_n(&walkers, __ATOMIC_SEQ_CST) > own) {
		if ((int64_t)mt_mono_ns() >= give_up) {
			__atomic_store_n(&tainted, 1, __ATOMIC_SEQ_CST);
			break;
		}
		pause_a_little(&round);
	}
	errno = e;
}

static void parent(void)
{
	in_fork = 0;
	if (__atomic_sub_fetch(&forking, 1, __ATOMIC_SEQ_CST) == 0)
		__atomic_store_n(&tainted, 0, __ATOMIC_SEQ_CST);
}

static void child(void)
{
	in_fork = 0;
	if (__atomic_exchange_n(&tainted, 0, __ATOMIC_SEQ_CST))
		__atomic_store_n(&unsafe, 1, __ATOMIC_SEQ_CST);
	start_afresh();
}

static void guard_once(void)
{
	__atomic_store_n(&home, getpid(), __ATOMIC_RELAXED);
	pthread_atfork(prepare, parent, child);
}

void mt_phdr_guard(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, guard_once);
}
