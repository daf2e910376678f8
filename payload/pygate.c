/* SPDX-License-Identifier: MIT */
/*
 * The import gate (pygate.h).
 */
#include "payload/pygate.h"
#include "payload/pyapi.h"

#include <errno.h>   /* ETIMEDOUT */
#include <pthread.h> /* pthread_mutex_t, pthread_cond_t */
#include <time.h>    /* clock_gettime */

#define GATE_WAIT_S 5 /* the longest either side waits for the other */

static struct {
	pthread_mutex_t lock;
	pthread_cond_t changed;
	int importing; /* memtrace's threads between enter and leave */
	int forking;   /* forks between their before and after hooks */
	int registered;
} gate = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0 };

/* Wait, gate.lock held, until *@count is 0 or GATE_WAIT_S have passed. */
static void wait_for_zero(const int *count)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until); /* the condition's clock */
	until.tv_sec += GATE_WAIT_S;
	while (*count && pthread_cond_timedwait(&gate.changed, &gate.lock, &until) != ETIMEDOUT)
		;
}

/* Once *@other is 0 (or GATE_WAIT_S have passed), one more in *@mine. */
static void wait_then_count(const int *other, int *mine)
{
	pthread_mutex_lock(&gate.lock);
	wait_for_zero(other);
	++*mine;
	pthread_mutex_unlock(&gate.lock);
}

/* wait_then_count() with the GIL held: the thread that *@other counts
 * needs the GIL to be done, so it is let go while waiting (the lock order
 * is the GIL first, so it is taken again without gate.lock). */
static void wait_then_count_gil(const int *other, int *mine)
{
	pthread_mutex_lock(&gate.lock);
	int now = !*other;
	if (now)
		++*mine;
	pthread_mutex_unlock(&gate.lock);
	if (now)
		return;
	void *ts = mt_pyapi.save_thread();
	wait_then_count(other, mine);
	mt_pyapi.restore_thread(ts);
}

/* One fewer in *@n, and the waiters told. */
static void uncount(int *n)
{
	pthread_mutex_lock(&gate.lock);
	if (*n > 0)
		--*n;
	pthread_cond_broadcast(&gate.changed);
	pthread_mutex_unlock(&gate.lock);
}

/* os.fork()'s before hook, with the GIL: memtrace's imports end first. */
static void *py_before_fork_cb(void *self, void *unused)
{
	(void)self;
	(void)unused;
	wait_then_count_gil(&gate.importing, &gate.forking);
	return mt_pyapi_none();
}

/* In the parent, after the fork (or after it failed). */
static void *py_after_fork_parent_cb(void *self, void *unused)
{
	(void)self;
	(void)unused;
	uncount(&gate.forking);
	return mt_pyapi_none();
}

/* In the child: the threads that used the gate are the parent's. */
static void *py_after_fork_child_cb(void *self, void *unused)
{
	(void)self;
	(void)unused;
	pthread_mutex_init(&gate.lock, NULL);
	pthread_cond_init(&gate.changed, NULL);
	gate.importing = gate.forking = 0;
	return mt_pyapi_none();
}

static struct mt_pyapi_def before_def = { "memtrace_import_gate", py_before_fork_cb,
					   MT_PY_METH_NOARGS, NULL };
static struct mt_pyapi_def parent_def = { "memtrace_import_gate_parent",
					   py_after_fork_parent_cb, MT_PY_METH_NOARGS, NULL };
static struct mt_pyapi_def child_def = { "memtrace_import_gate_child", py_after_fork_child_cb,
					  MT_PY_METH_NOARGS, NULL };

int mt_pygate_register(void)
{
	static const char *const keys[] = { "before", "after_in_parent", "after_in_child" };
	static struct mt_pyapi_def *const defs[] = { &before_def, &parent_def, &child_def };
	/* posix, not os: the interpreter has it from its start, os not always
	 * (-S), and importing it here is what the gate is for */
	if (!gate.registered)
		gate.registered = mt_pyapi_bind() == 0 &&
				  mt_pyapi_register("posix", "register_at_fork", keys, defs, 3) == 0;
	return gate.registered ? 0 : -1;
}

void mt_pygate_enter(void)
{
	wait_then_count(&gate.forking, &gate.importing);
}

void mt_pygate_enter_with_gil(void)
{
	wait_then_count_gil(&gate.forking, &gate.importing);
}

void mt_pygate_leave(void)
{
	uncount(&gate.importing);
}
