/* SPDX-License-Identifier: MIT */
/*
 * A live map's tables made ahead (livemap-ahead.h).
 */
#include "util/livemap-ahead.h"

#include <pthread.h>
#include <signal.h> /* sigfillset, pthread_sigmask */
#include <stdlib.h> /* calloc, free */

#define NSEG (1u << MT_LIVEMAP_SEG_BITS)
#define START_BYTES ((size_t)64 << 10) /* the first table worth a thread */
#define GONE_MAX (2 * NSEG)            /* old tables waiting to be unmapped */
#define READY_MAX 8                    /* tables made and not yet taken, at most */
#define ASKS_MAX (2 * NSEG)            /* a table asked for twice: once called off */

struct mt_livemap_ahead {
	struct mt_livemap_supply supply;
	struct mt_livemap *map;
	pthread_mutex_t mu;
	pthread_cond_t work; /* the thread's: something asked for, taken or given back */
	pthread_cond_t made; /* the map's: the table being made is there */
	pthread_t thread;
	int started, failed, stop;
	int busy;                    /* the table being made now, -1: none */
	unsigned asked[NSEG];        /* bits asked for, 0: nothing (or called off) */
	unsigned asks[ASKS_MAX];     /* the tables asked for, in order: a ring */
	unsigned ask_head, n_asks;
	struct mt_live *ready[NSEG]; /* made, not yet taken ... */
	unsigned ready_bits[NSEG];   /* ... of this many bits */
	unsigned n_ready;
	struct mt_live *gone[GONE_MAX]; /* given back, to unmap */
	unsigned gone_bits[GONE_MAX];
	unsigned n_gone;
};

/* The table asked for first and not called off, out of the ring; -1 if
 * none. The tables fill up in about the order they were asked for (their
 * blocks come evenly), so the few made ahead are those needed next. */
static int wanted(struct mt_livemap_ahead *a)
{
	while (a->n_asks) {
		unsigned k = a->asks[a->ask_head];
		a->ask_head = (a->ask_head + 1) % ASKS_MAX;
		a->n_asks--;
		if (a->asked[k])
			return (int)k;
	}
	return -1;
}

static void *run(void *arg)
{
	struct mt_livemap_ahead *a = arg;

	pthread_mutex_lock(&a->mu);
	for (;;) {
		/* a few tables ahead, not one for every table: those made
		 * when the map stops growing are memory for nothing */
		int k = a->stop || a->n_ready >= READY_MAX ? -1 : wanted(a);
		if (k >= 0) {
			unsigned bits = a->asked[k];
			a->asked[k] = 0;
			a->busy = k;
			pthread_mutex_unlock(&a->mu);
			struct mt_live *t = mt_livemap_table(bits);
			pthread_mutex_lock(&a->mu);
			a->busy = -1;
			if (t) {
				a->ready[k] = t;
				a->ready_bits[k] = bits;
				a->n_ready++;
			}
			pthread_cond_broadcast(&a->made);
		} else if (a->n_gone) {
			/* taken out under the lock: the slot is the next table
			 * given back's as soon as it is unlocked */
			unsigned i = --a->n_gone, bits = a->gone_bits[i];
			struct mt_live *v = a->gone[i];
			pthread_mutex_unlock(&a->mu);
			mt_livemap_table_free(v, bits);
			pthread_mutex_lock(&a->mu);
		} else if (a->stop) {
			break;
		} else {
			pthread_cond_wait(&a->work, &a->mu);
		}
	}
	pthread_mutex_unlock(&a->mu);
	return NULL;
}

/* the thread, at the first table worth it; called with the lock held */
static int start(struct mt_livemap_ahead *a)
{
	sigset_t all, old;

	if (a->started || a->failed)
		return a->started;
	/* no signal of the program's is delivered to it */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	a->started = pthread_create(&a->thread, NULL, run, a) == 0;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	a->failed = !a->started;
	return a->started;
}

static void soon(void *ctx, unsigned seg, unsigned bits)
{
	struct mt_livemap_ahead *a = ctx;

	if (((size_t)1 << bits) * sizeof(struct mt_live) < START_BYTES)
		return;
	pthread_mutex_lock(&a->mu);
	if (start(a) && !a->asked[seg] && !a->ready[seg] && a->busy != (int)seg &&
	    a->n_asks < ASKS_MAX) {
		a->asked[seg] = bits;
		a->asks[(a->ask_head + a->n_asks++) % ASKS_MAX] = seg;
		pthread_cond_signal(&a->work);
	}
	pthread_mutex_unlock(&a->mu);
}

static struct mt_live *take(void *ctx, unsigned seg, unsigned bits)
{
	struct mt_livemap_ahead *a = ctx;
	struct mt_live *t = NULL, *stale = NULL;
	unsigned stale_bits = 0;

	pthread_mutex_lock(&a->mu);
	a->asked[seg] = 0; /* not started: called off, the map's to make */
	while (a->busy == (int)seg)
		pthread_cond_wait(&a->made, &a->mu);
	if (a->ready[seg]) {
		if (a->ready_bits[seg] == bits)
			t = a->ready[seg];
		else
			stale = a->ready[seg], stale_bits = a->ready_bits[seg];
		a->ready[seg] = NULL;
		a->n_ready--;
		pthread_cond_signal(&a->work); /* room for one more */
	}
	pthread_mutex_unlock(&a->mu);
	if (stale)
		mt_livemap_table_free(stale, stale_bits);
	return t;
}

static void give(void *ctx, struct mt_live *v, unsigned bits)
{
	struct mt_livemap_ahead *a = ctx;

	pthread_mutex_lock(&a->mu);
	if (a->started && a->n_gone < GONE_MAX) {
		a->gone[a->n_gone] = v;
		a->gone_bits[a->n_gone++] = bits;
		pthread_cond_signal(&a->work);
		v = NULL;
	}
	pthread_mutex_unlock(&a->mu);
	if (v)
		mt_livemap_table_free(v, bits);
}

struct mt_livemap_ahead *mt_livemap_ahead_new(struct mt_livemap *m)
{
	struct mt_livemap_ahead *a = calloc(1, sizeof(*a));

	if (!a)
		return NULL;
	if (pthread_mutex_init(&a->mu, NULL) != 0) {
		free(a);
		return NULL;
	}
	pthread_cond_init(&a->work, NULL);
	pthread_cond_init(&a->made, NULL);
	a->busy = -1;
	a->map = m;
	a->supply = (struct mt_livemap_supply){ take, soon, give, a };
	m->supply = &a->supply;
	return a;
}

void mt_livemap_ahead_free(struct mt_livemap_ahead *a)
{
	if (!a)
		return;
	if (a->map->supply == &a->supply)
		a->map->supply = NULL;
	if (a->started) {
		pthread_mutex_lock(&a->mu);
		a->stop = 1;
		pthread_cond_signal(&a->work);
		pthread_mutex_unlock(&a->mu);
		pthread_join(a->thread, NULL);
	}
	for (unsigned k = 0; k < NSEG; k++)
		if (a->ready[k])
			mt_livemap_table_free(a->ready[k], a->ready_bits[k]);
	for (unsigned i = 0; i < a->n_gone; i++)
		mt_livemap_table_free(a->gone[i], a->gone_bits[i]);
	pthread_cond_destroy(&a->work);
	pthread_cond_destroy(&a->made);
	pthread_mutex_destroy(&a->mu);
	free(a);
}
