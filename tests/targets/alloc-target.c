/* SPDX-License-Identifier: MIT */
/*
 * A shared library that calls each allocator of the C library through its
 * own GOT, as a real extension module does. The Python API tests load it
 * with ctypes and check that each call is one record of the right kind.
 */
#include <malloc.h>  /* memalign, pvalloc */
#include <pthread.h> /* pthread_mutex_t, pthread_create */
#include <sys/prctl.h> /* PR_SET_NAME */
#include <stdint.h> /* uintptr_t */
#include <stdlib.h> /* malloc, posix_memalign */
#include <unistd.h> /* valloc */

#define ALIGN 64

void *mt_target_alloc(const char *kind, size_t size);
void mt_target_free(void *p);
size_t mt_target_churn(size_t n, size_t size, size_t keep, void **kept);
void mt_target_ordered(size_t n);
void *mt_target_named_thread(const char *name, size_t size);
int mt_target_idle_threads(int n);

/* mt_target_alloc() - @size bytes from the allocator named @kind (one of
 * malloc, calloc, realloc, valloc, pvalloc, memalign, posix_memalign,
 * aligned_alloc). Returns the block, or NULL for an unknown name or a
 * failed allocation. */
void *mt_target_alloc(const char *kind, size_t size)
{
	void *p = NULL;
	/* volatile: the compiler turns realloc(NULL, n) into malloc(n) */
	void *volatile none = NULL;

	switch (kind[0] | kind[1] << 8) {
	case 'm' | 'a' << 8:
		return malloc(size);
	case 'c' | 'a' << 8:
		return calloc(1, size);
	case 'r' | 'e' << 8:
		return realloc(none, size);
	case 'v' | 'a' << 8:
		return valloc(size);
	case 'p' | 'v' << 8:
		return pvalloc(size);
	case 'm' | 'e' << 8:
		return memalign(ALIGN, size);
	case 'p' | 'o' << 8:
		return posix_memalign(&p, ALIGN, size) == 0 ? p : NULL;
	case 'a' | 'l' << 8:
		return aligned_alloc(ALIGN, (size + ALIGN - 1) / ALIGN * ALIGN);
	default:
		return NULL;
	}
}

void mt_target_free(void *p)
{
	free(p);
}

/* mt_target_churn() - @n rounds of malloc(@size) and free, keeping every
 * @keep-th block in @kept (room for n / keep pointers) instead of freeing
 * it. ctypes calls it without the GIL, so threads running it at once
 * allocate truly concurrently. Returns the blocks kept. */
size_t mt_target_churn(size_t n, size_t size, size_t keep, void **kept)
{
	size_t k = 0;
	for (size_t i = 1; i <= n; i++) {
		void *p = malloc(size);
		if (p == NULL)
			continue;
		*(volatile char *)p = 1;
		if (keep && i % keep == 0)
			kept[k++] = p;
		else
			free(p);
	}
	return k;
}

static pthread_mutex_t ordered_lock = PTHREAD_MUTEX_INITIALIZER;
static size_t ordered_seq;

/* mt_target_ordered() - @n rounds of a few unordered small blocks, then,
 * under a lock shared by every thread running it, malloc(ORDERED_BASE +
 * seq % ORDERED_SPAN) with seq counting up: so the lock orders these
 * allocations across threads, and their sizes say in which order they
 * happened. Each is freed after the lock is released. Call it without the
 * GIL from several threads. */
#define ORDERED_BASE 50000
#define ORDERED_SPAN 40000
void mt_target_ordered(size_t n)
{
	for (size_t i = 0; i < n; i++) {
		for (int k = 0; k < 3; k++) {
			void *p = malloc(64);
			*(volatile char *)p = 1;
			free(p);
		}
		pthread_mutex_lock(&ordered_lock);
		void *q = malloc(ORDERED_BASE + ordered_seq++ % ORDERED_SPAN);
		pthread_mutex_unlock(&ordered_lock);
		if (q)
			*(volatile char *)q = 1;
		free(q);
	}
}

struct named {
	const char *name;
	size_t size;
	void *block;
};

static void *named_main(void *arg)
{
	struct named *n = arg;
	prctl(PR_SET_NAME, n->name, 0, 0, 0); /* before its first allocation */
	n->block = malloc(n->size);
	return NULL;
}

/* mt_target_named_thread() - a thread that names itself @name (the OS's
 * name: Python knows nothing of it) and then allocates @size bytes, kept:
 * the block, once the thread has ended, or NULL. */
void *mt_target_named_thread(const char *name, size_t size)
{
	struct named n = { name, size, NULL };
	pthread_t t;
	if (pthread_create(&t, NULL, named_main, &n) != 0)
		return NULL;
	pthread_join(t, NULL);
	return n.block;
}

static pthread_mutex_t idle_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle_go = PTHREAD_COND_INITIALIZER;
static unsigned idle_round;

static void *idle_main(void *arg)
{
	unsigned round = (unsigned)(uintptr_t)arg;
	pthread_mutex_lock(&idle_lock);
	while (idle_round == round)
		pthread_cond_wait(&idle_go, &idle_lock);
	pthread_mutex_unlock(&idle_lock);
	return NULL;
}

/* mt_target_idle_threads() - @n detached threads that allocate nothing
 * and end together once all have started (as they end, glibc frees the
 * TLS of those that ended before them). Returns how many started; the
 * caller learns from the kernel when they have ended. */
int mt_target_idle_threads(int n)
{
	pthread_attr_t attr;
	int started = 0;
	if (pthread_attr_init(&attr) != 0)
		return 0;
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_mutex_lock(&idle_lock);
	unsigned round = idle_round;
	pthread_mutex_unlock(&idle_lock);
	for (; started < n; started++) {
		pthread_t t;
		if (pthread_create(&t, &attr, idle_main, (void *)(uintptr_t)round) != 0)
			break;
	}
	pthread_attr_destroy(&attr);
	pthread_mutex_lock(&idle_lock);
	idle_round++;
	pthread_cond_broadcast(&idle_go);
	pthread_mutex_unlock(&idle_lock);
	return started;
}
