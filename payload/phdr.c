/* SPDX-License-Identifier: MIT */
/*
 * Walks of the loaded objects out of a fork's way (phdr.h): a read-write
 * lock, read by the walks and written by the fork's prepare handler, both
 * with a deadline.
 */
#include "payload/phdr.h"

#include <pthread.h> /* pthread_rwlock_t */
#include <time.h>    /* clock_gettime */

#define WALK_WAIT_MS 200
#define FORK_WAIT_MS 1000

static pthread_rwlock_t walks = PTHREAD_RWLOCK_INITIALIZER;
static pthread_t forker;  /* the thread between prepare and parent: */
static int forking;       /* ... while this is set */
static int fork_held;     /* prepare took the lock */

static struct timespec deadline(long ms)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	t.tv_sec += ms / 1000;
	t.tv_nsec += (ms % 1000) * 1000000L;
	if (t.tv_nsec >= 1000000000L) {
		t.tv_sec++;
		t.tv_nsec -= 1000000000L;
	}
	return t;
}

int mt_phdr_enter(void)
{
	if (__atomic_load_n(&forking, __ATOMIC_ACQUIRE) && pthread_equal(forker, pthread_self()))
		return 0;
	struct timespec t = deadline(WALK_WAIT_MS);
	return pthread_rwlock_timedrdlock(&walks, &t) == 0;
}

void mt_phdr_leave(int entered)
{
	if (entered)
		pthread_rwlock_unlock(&walks);
}

int mt_phdr_walk(int (*cb)(struct dl_phdr_info *, size_t, void *), void *data)
{
	int entered = mt_phdr_enter();
	int ret = dl_iterate_phdr(cb, data);
	mt_phdr_leave(entered);
	return ret;
}

static void prepare(void)
{
	struct timespec t = deadline(FORK_WAIT_MS);
	fork_held = pthread_rwlock_timedwrlock(&walks, &t) == 0;
	forker = pthread_self();
	__atomic_store_n(&forking, 1, __ATOMIC_RELEASE);
}

static void parent(void)
{
	__atomic_store_n(&forking, 0, __ATOMIC_RELEASE);
	if (fork_held)
		pthread_rwlock_unlock(&walks);
	fork_held = 0;
}

static void child(void)
{
	/* one thread, and the lock's owner was the parent's: a new lock */
	static const pthread_rwlock_t fresh = PTHREAD_RWLOCK_INITIALIZER;
	walks = fresh;
	forking = fork_held = 0;
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
