/* SPDX-License-Identifier: MIT */
/* The fork guard of the payload's walks (payload/phdr.h), in a process of
 * its own: forks made while other threads walk the loaded objects, some
 * of them from several threads at once, some while a fork handler of the
 * program's keeps the fork waiting, and one from a signal handler inside
 * a walk. A child either walks freely or knows it must not (unsafe);
 * none may inherit the loader's lock held and wait forever at its first
 * walk (an alarm kills it then, which the test counts). */
#include "payload/phdr.h"

#include <check.h>
#include <link.h>     /* dl_iterate_phdr */
#include <pthread.h>  /* pthread_create */
#include <signal.h>   /* raise, signal */
#include <stdlib.h>   /* EXIT_SUCCESS */
#include <sys/syscall.h> /* SYS_clock_gettime */
#include <sys/wait.h> /* waitpid */
#include <time.h>     /* clock_gettime */
#include <unistd.h>   /* fork, alarm, usleep */

enum { CHILD_OK = 0, CHILD_UNSAFE = 3 };

static volatile int stop;
static int walk_us = 30;       /* how long a walker's walk takes */
static int optional_walks;     /* the walker's walks may be skipped */
static int slow_prepare_us;    /* a fork handler of the program's */
static pthread_mutex_t count_lock = PTHREAD_MUTEX_INITIALIZER;
static long hung, ok, unsafe_children;

static void spin_us(int us)
{
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	do
		clock_gettime(CLOCK_MONOTONIC, &b);
	while ((b.tv_sec - a.tv_sec) * 1000000L + (b.tv_nsec - a.tv_nsec) / 1000 < us);
}

static int slow_cb(struct dl_phdr_info *i, size_t s, void *d)
{
	(void)i, (void)s, (void)d;
	spin_us(walk_us);
	return 1;
}

static int noop_cb(struct dl_phdr_info *i, size_t s, void *d)
{
	(void)i, (void)s, (void)d;
	return 1;
}

static void *walker(void *arg)
{
	(void)arg;
	while (!stop) {
		if (optional_walks)
			mt_phdr_walk_if(slow_cb, NULL);
		else
			mt_phdr_walk(slow_cb, NULL);
	}
	return NULL;
}

/* A child: unsafe, or its first walk ends (else the alarm kills it). */
static void child_walks(void)
{
	if (mt_phdr_unsafe())
		_exit(CHILD_UNSAFE);
	alarm(2);
	dl_iterate_phdr(noop_cb, NULL);
	_exit(CHILD_OK);
}

static void count_child(pid_t p)
{
	int st;
	ck_assert_int_eq(waitpid(p, &st, 0), p);
	pthread_mutex_lock(&count_lock);
	if (WIFSIGNALED(st))
		hung++;
	else if (WEXITSTATUS(st) == CHILD_UNSAFE)
		unsafe_children++;
	else
		ok++;
	pthread_mutex_unlock(&count_lock);
}

static void *forker(void *arg)
{
	long n = (long)arg;
	for (long i = 0; i < n; i++) {
		pid_t p = fork();
		if (p == 0)
			child_walks();
		ck_assert_int_gt(p, 0);
		count_child(p);
	}
	return NULL;
}

/* A fork handler of the program's registered before the guard, as an
 * attached program's are: its prepare runs inside the guarded window. */
static void program_prepare(void)
{
	if (slow_prepare_us)
		usleep((useconds_t)slow_prepare_us);
}

static void run(int forkers, long forks_each)
{
	pthread_atfork(program_prepare, NULL, NULL);
	mt_phdr_guard();
	pthread_t w, f[4];
	ck_assert_int_eq(pthread_create(&w, NULL, walker, NULL), 0);
	for (int i = 0; i < forkers; i++)
		ck_assert_int_eq(pthread_create(&f[i], NULL, forker, (void *)forks_each), 0);
	for (int i = 0; i < forkers; i++)
		pthread_join(f[i], NULL);
	stop = 1;
	pthread_join(w, NULL);
}

START_TEST(test_phdr_one_forker)
{
	run(1, 400);
	ck_assert_int_eq(hung, 0);
	ck_assert_int_eq(unsafe_children, 0);
	ck_assert_int_eq(ok, 400);
}
END_TEST

/* Two threads fork at once: each fork waits for the walks, and the first
 * to finish does not let walks start under the other. */
START_TEST(test_phdr_two_forkers)
{
	run(2, 1000);
	ck_assert_int_eq(hung, 0);
	ck_assert_int_eq(unsafe_children, 0);
	ck_assert_int_eq(ok, 2000);
}
END_TEST

/* Eight forks, each held by the program's handler (250 ms) longer than
 * a needed walk waits (200 ms), under walks of 20 ms, @optional or not. */
static void held_forks(int optional)
{
	slow_prepare_us = 250000;
	walk_us = 20000;
	optional_walks = optional;
	run(1, 8);
}

/* A needed walk goes on, and the child knows it may not walk. */
START_TEST(test_phdr_needed_walk_gives_up)
{
	held_forks(0);
	ck_assert_int_eq(hung, 0);
	ck_assert_int_gt(unsafe_children, 0);
}
END_TEST

/* The walker of test_phdr_mark_outlives_no_fork, and the moment its
 * fork is over: the walker's clock_gettime (the guard's mt_mono_ns())
 * is held, once its wait has run out, until the fork has ended, so that
 * it gives up after the fork it saw. */
static pthread_t late_walker;
static volatile int late_on, fork_over;
static long long late_first_ns;

int clock_gettime(clockid_t id, struct timespec *ts)
{
	int rc = (int)syscall(SYS_clock_gettime, id, ts);
	if (late_on && pthread_equal(pthread_self(), late_walker) && id == CLOCK_MONOTONIC) {
		long long ns = ts->tv_sec * 1000000000LL + ts->tv_nsec;
		if (!late_first_ns) {
			late_first_ns = ns;
		} else if (ns - late_first_ns >= 200000000LL && !fork_over) {
			while (!fork_over)
				usleep(1000);
			syscall(SYS_clock_gettime, id, ts);
		}
	}
	return rc;
}

static void held_prepare(void)
{
	usleep(300000);
}

static void note_fork_over(void)
{
	fork_over = 1;
}

static void *late_walk(void *arg)
{
	(void)arg;
	usleep(50000); /* the fork is under way */
	mt_phdr_walk(noop_cb, NULL);
	return NULL;
}

static int fork_is_unsafe(void)
{
	pid_t p = fork();
	if (p == 0)
		_exit(mt_phdr_unsafe() ? CHILD_UNSAFE : CHILD_OK);
	int st;
	ck_assert_int_eq(waitpid(p, &st, 0), p);
	return WIFEXITED(st) && WEXITSTATUS(st) == CHILD_UNSAFE;
}

/* A needed walk that gives up after the fork it waited for has ended
 * marks no later fork: the next child, forked with no walk anywhere, is
 * safe. */
START_TEST(test_phdr_mark_outlives_no_fork)
{
	pthread_atfork(held_prepare, NULL, NULL);
	mt_phdr_guard();
	pthread_atfork(NULL, note_fork_over, NULL);
	ck_assert_int_eq(pthread_create(&late_walker, NULL, late_walk, NULL), 0);
	late_on = 1;
	(void)fork_is_unsafe(); /* either way: the walk may have met it */
	pthread_join(late_walker, NULL);
	late_on = 0;
	ck_assert(!fork_is_unsafe());
}
END_TEST

/* Optional walks are skipped, and every child is fine. */
START_TEST(test_phdr_optional_walk_skipped)
{
	held_forks(1);
	ck_assert_int_eq(hung, 0);
	ck_assert_int_eq(unsafe_children, 0);
	ck_assert_int_eq(ok, 8);
}
END_TEST

static pid_t sig_child = -1;

static void fork_in_handler(int sig)
{
	(void)sig;
	sig_child = fork();
}

static int raise_cb(struct dl_phdr_info *i, size_t s, void *d)
{
	(void)i, (void)s, (void)d;
	raise(SIGUSR1);
	return 1;
}

/* A signal handler forks inside a walk of its own thread: no wait for
 * itself, and the child, whose lock cannot be let go, is unsafe. */
START_TEST(test_phdr_fork_in_own_walk)
{
	mt_phdr_guard();
	signal(SIGUSR1, fork_in_handler);
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	mt_phdr_walk(raise_cb, NULL);
	clock_gettime(CLOCK_MONOTONIC, &b);
	if (sig_child == 0)
		child_walks();
	ck_assert_int_gt(sig_child, 0);
	count_child(sig_child);
	ck_assert_int_eq(unsafe_children, 1);
	long ms = (b.tv_sec - a.tv_sec) * 1000L + (b.tv_nsec - a.tv_nsec) / 1000000L;
	ck_assert_msg(ms < 500, "the fork waited %ld ms for its own walk", ms);
	/* the parent walks on, and its next forks' children are fine */
	ck_assert_int_eq(mt_phdr_unsafe(), 0);
	ck_assert_int_eq(mt_phdr_walk(noop_cb, NULL), 1);
}
END_TEST

static Suite *phdr_suite(void)
{
	Suite *s = suite_create("phdr");
	TCase *tc = tcase_create("phdr");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_phdr_one_forker);
	tcase_add_test(tc, test_phdr_two_forkers);
	tcase_add_test(tc, test_phdr_needed_walk_gives_up);
	tcase_add_test(tc, test_phdr_optional_walk_skipped);
	tcase_add_test(tc, test_phdr_fork_in_own_walk);
	tcase_add_test(tc, test_phdr_mark_outlives_no_fork);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(phdr_suite());
	/* every test in a process of its own: the guard is once per process */
	srunner_set_fork_status(sr, CK_FORK);
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
