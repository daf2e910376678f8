/* SPDX-License-Identifier: MIT */
/*
 * A C library for the native-stack tests (tests/integration/test_native.py),
 * built with debug information: a call chain with an inlined function in
 * it, and threads started from C with no Python frame at all. The tests
 * find the lines of the calls by the markers in the comments.
 */
#include <pthread.h> /* pthread_create */
#include <stdlib.h>  /* malloc, posix_memalign */
#include <string.h>  /* memset */

void *mt_native_a(size_t n);
void *mt_native_call(void *(*cb)(int), int d);
void mt_native_free(void *p);
int mt_native_threads(int nthreads, int each, size_t size);

/* b is inlined into a: the stack shows it as a frame of its own. */
static inline __attribute__((always_inline)) void *mt_native_b(size_t n)
{
	void *p = malloc(n); /* native-target: malloc call */
	if (p)
		memset(p, 1, n < 64 ? n : 64); /* no tail call: a stays on the stack */
	return p;
}

__attribute__((noinline)) void *mt_native_a(size_t n)
{
	void *p = mt_native_b(n); /* native-target: b call */
	__asm__ volatile("" : : "r"(p) : "memory");
	return p;
}

/* Python called from C: @cb is a Python function (a ctypes callback). */
__attribute__((noinline)) void *mt_native_call(void *(*cb)(int), int d)
{
	void *p = cb(d); /* native-target: callback call */
	__asm__ volatile("" : : "r"(p) : "memory");
	return p;
}

void mt_native_free(void *p)
{
	free(p);
}

struct worker {
	pthread_t tid;
	int each;
	size_t size;
};

static __attribute__((noinline)) void *mt_native_worker(void *arg)
{
	struct worker *w = arg;
	for (int i = 0; i < w->each; i++) {
		void *p = NULL;
		if (posix_memalign(&p, 64, w->size) == 0) /* native-target: posix_memalign call */
			free(p);
	}
	return NULL;
}

/* @nthreads threads, each @each posix_memalign and free of @size bytes.
 * Returns how many threads ran. */
int mt_native_threads(int nthreads, int each, size_t size)
{
	struct worker w[128];
	int started = 0;
	if (nthreads > 128)
		nthreads = 128;
	for (int i = 0; i < nthreads; i++) {
		w[i].each = each;
		w[i].size = size;
		if (pthread_create(&w[i].tid, NULL, mt_native_worker, &w[i]) == 0)
			started++;
		else
			break;
	}
	for (int i = 0; i < started; i++)
		pthread_join(w[i].tid, NULL);
	return started;
}
