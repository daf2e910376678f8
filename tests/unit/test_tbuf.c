/* SPDX-License-Identifier: MIT */
/* The payload's per-thread buffers alone: producers push and reserve
 * records, the test is the writer (mt_tbuf_front/bytes/release). Records
 * here are the test's own, framed so that each can be checked byte for
 * byte: a 2-byte length (the whole record), a kind byte (pushed or
 * reserved), a 4-byte sequence number, then bytes made from the sequence.
 * What the writer does with the records (merge.c's coding) is not here. */
#include "payload/tbuf.h"

#include <check.h>
#include <pthread.h> /* pthread_create */
#include <stdlib.h>  /* EXIT_SUCCESS */
#include <string.h>  /* memcpy */
#include <time.h>    /* clock_gettime, nanosleep */

#define HDR 7
enum { K_PUSH = 1, K_RESERVE = 2, K_EVENT = 3 };

static uint8_t pat(uint32_t seq, size_t i)
{
	return (uint8_t)(seq * 31u + i * 7u + 1u);
}

static size_t make_rec(uint8_t *p, unsigned kind, uint32_t seq, size_t len)
{
	uint16_t l = (uint16_t)len;
	memcpy(p, &l, 2);
	p[2] = (uint8_t)kind;
	memcpy(p + 3, &seq, 4);
	for (size_t i = HDR; i < len; i++)
		p[i] = pat(seq, i);
	return len;
}

/* Lengths that do not divide the ring, so that records straddle its end. */
static size_t push_len(uint32_t seq)
{
	return HDR + (seq * 37u) % 500u;
}

static size_t reserve_len(uint32_t seq)
{
	return HDR + (seq * 13u) % (MT_REC_HOT_MAX - HDR + 1);
}

static void push_rec(struct mt_tbuf *b, uint32_t seq)
{
	uint8_t rec[512];
	size_t len = make_rec(rec, K_PUSH, seq, push_len(seq));
	ck_assert_int_eq(mt_tbuf_push(b, rec, len), 0);
}

static void reserve_rec(struct mt_tbuf *b, uint32_t seq)
{
	uint8_t *p = mt_tbuf_reserve(b);
	ck_assert_ptr_nonnull(p);
	mt_tbuf_commit(b, make_rec(p, K_RESERVE, seq, reserve_len(seq)));
}

/* As the hooks record a raw event: the head kept from reserve to commit,
 * and one that runs past the ring's end left whole in its slack. */
static void event_rec(struct mt_tbuf *b, uint32_t seq)
{
	uint64_t head;
	uint8_t *p = mt_tbuf_reserve_event(b, &head);
	ck_assert_ptr_nonnull(p);
	mt_tbuf_commit_event(b, head, make_rec(p, K_EVENT, seq, reserve_len(seq)));
}

/* The consuming end's state: what the test has read back so far. */
struct reader {
	uint32_t next_seq;
	uint64_t straddled[4]; /* records that wrapped around, by kind */
	int events;            /* records but every 7th and 8th are raw events (event_rec) */
	uint64_t epoch;        /* of the last run */
};

/* Take every run @b has now, check its records (in order, byte-exact),
 * give them back. Returns the number of records read. */
static unsigned consume(struct mt_tbuf *b, struct reader *r)
{
	unsigned n = 0;
	uint64_t epoch, end;
	uint8_t tmp[1024];
	while (mt_tbuf_front(b, &epoch, &end)) {
		uint64_t pos = atomic_load(&b->tail);
		r->epoch = epoch;
		while (pos < end) {
			/* Check's assertions are not cheap (each one marks its
			 * point through the forked test's pipe): one per record */
			if (end - pos < HDR)
				ck_abort_msg("a run ends inside a record at %lu", (unsigned long)pos);
			/* a raw event is read where it starts, in one piece
			 * (merge.c), the others through mt_tbuf_bytes */
			int ev = r->events && r->next_seq % 8 < 6;
			const uint8_t *h = ev ? b->data + (pos & MT_TBUF_MASK)
					      : mt_tbuf_bytes(b, pos, HDR, tmp);
			uint16_t len;
			uint32_t seq;
			memcpy(&len, h, 2);
			memcpy(&seq, h + 3, 4);
			unsigned kind = h[2];
			uint8_t want[1024];
			size_t want_len = kind == K_PUSH ? push_len(r->next_seq)
							 : reserve_len(r->next_seq);
			make_rec(want, kind, r->next_seq, want_len);
			int kind_ok = ev ? kind == K_EVENT : kind == K_PUSH || kind == K_RESERVE;
			if (seq != r->next_seq || !kind_ok ||
			    len != want_len || len > end - pos ||
			    memcmp(ev ? h : mt_tbuf_bytes(b, pos, len, tmp), want, len) != 0)
				ck_abort_msg("record %u (kind %u, %u bytes) at %lu: read back wrong",
					     r->next_seq, kind, (unsigned)len, (unsigned long)pos);
			if ((pos & MT_TBUF_MASK) + len > MT_TBUF_SIZE)
				r->straddled[kind]++;
			r->next_seq++;
			pos += len;
			n++;
		}
		ck_assert_uint_eq(pos, end);
		mt_tbuf_release(b, end);
	}
	return n;
}

static int stalls;
static void on_stall(void)
{
	stalls++;
}

/* A capture that runs, with a buffer of this thread's. */
static struct mt_tbuf *start(void)
{
	stalls = 0;
	mt_tbuf_begin(on_stall, 0);
	atomic_store(&mt_whot.running, 1);
	struct mt_tbuf *b = mt_tbuf_new();
	ck_assert_ptr_nonnull(b);
	return b;
}

/* The capture's end as the writer makes it: no buffer has the turn, so
 * every producer takes the slow path and sees it. */
static void stop(void)
{
	atomic_store(&mt_whot.running, 0);
	atomic_store(&mt_whot.last, NULL);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ------------------------------------------------------------------------
 * One producer
 * ---------------------------------------------------------------------- */
START_TEST(test_tbuf_in_order)
{
	struct mt_tbuf *b = start();
	struct reader r = { 0 };
	uint64_t epoch, end;
	ck_assert_int_eq(mt_tbuf_front(b, &epoch, &end), 0); /* nothing yet */
	uint32_t seq = 0;
	for (; seq < 300; seq++) {
		if (seq % 3)
			push_rec(b, seq);
		else
			reserve_rec(b, seq);
	}
	ck_assert_uint_eq(consume(b, &r), 300);
	ck_assert_uint_eq(r.epoch, 1); /* one thread: one epoch, the first */
	ck_assert_int_eq(mt_tbuf_front(b, &epoch, &end), 0);
	ck_assert_uint_eq(atomic_load(&b->tail), atomic_load(&b->head));
	/* More after a consumed run: they come out after it. */
	for (; seq < 310; seq++)
		push_rec(b, seq);
	ck_assert_uint_eq(consume(b, &r), 10);
	ck_assert_uint_eq(mt_tbuf_dropped(), 0);
	/* A record larger than a push may be is refused. */
	static uint8_t big[MT_TBUF_PUSH_MAX + 1];
	ck_assert_int_eq(mt_tbuf_push(b, big, sizeof(big)), -1);
	stop();
}
END_TEST

/* Raw events among the other records, for 16 laps: one that
 * straddles the ring's end reads back whole where it starts (the slack
 * past the end), and the records after it where they belong. */
START_TEST(test_tbuf_wraps_events)
{
	struct mt_tbuf *b = start();
	struct reader r = { .events = 1 };
	uint32_t seq = 0;
	while (atomic_load(&b->head) < 16ull * MT_TBUF_SIZE) {
		if (seq % 8 < 6)
			event_rec(b, seq);
		else if (seq % 8 == 6)
			push_rec(b, seq);
		else
			reserve_rec(b, seq);
		seq++;
		if (atomic_load(&b->head) - atomic_load(&b->tail) > MT_TBUF_SIZE / 2)
			consume(b, &r);
	}
	consume(b, &r);
	ck_assert_uint_eq(r.next_seq, seq);
	ck_assert_uint_gt(r.straddled[K_EVENT], 0);
	ck_assert_uint_gt(r.straddled[K_PUSH] + r.straddled[K_RESERVE], 0);
	ck_assert_uint_eq(mt_tbuf_dropped(), 0);
	stop();
}
END_TEST

/* Several laps of the ring, consumed as the writer would (whenever half
 * of it is used): records that straddle its end read back whole through
 * mt_tbuf_bytes, both pushed ones (copied in two pieces) and reserved ones
 * (written into the slack past the end, then moved to the front). */
START_TEST(test_tbuf_wraps)
{
	struct mt_tbuf *b = start();
	struct reader r = { 0 };
	uint32_t seq = 0;
	while (atomic_load(&b->head) < 5ull * MT_TBUF_SIZE) {
		if (seq % 2)
			push_rec(b, seq);
		else
			reserve_rec(b, seq);
		seq++;
		if (atomic_load(&b->head) - atomic_load(&b->tail) > MT_TBUF_SIZE / 2)
			consume(b, &r);
	}
	consume(b, &r);
	ck_assert_uint_eq(r.next_seq, seq);
	ck_assert_uint_gt(r.straddled[K_PUSH], 0);
	ck_assert_uint_gt(r.straddled[K_RESERVE], 0);
	ck_assert_uint_eq(mt_tbuf_consumed() >= 5ull * MT_TBUF_SIZE, 1);
	ck_assert_uint_eq(mt_tbuf_dropped(), 0);
	ck_assert_int_eq(stalls, 0);
	stop();
}
END_TEST

/* Nobody consumes: once the ring is full a producer waits for the writer
 * about a second (STALL_NS), then gives up; later ones give up at once
 * while the writer takes nothing. Reserved events dropped are counted,
 * pushed records are not (the caller's to handle). The writer taking
 * records again ends the stall. */
START_TEST(test_tbuf_full_drops)
{
	struct mt_tbuf *b = start();
	struct reader r = { 0 };
	uint32_t seq = 0;
	uint8_t rec[512];
	double t0 = now_s(), t_full = 0;
	for (;;) {
		size_t len = make_rec(rec, K_PUSH, seq, push_len(seq));
		double t = now_s();
		if (mt_tbuf_push(b, rec, len) < 0) {
			t_full = now_s() - t;
			break;
		}
		seq++;
		ck_assert(now_s() - t0 < 10);
	}
	/* It filled the ring, and waited about STALL_NS before dropping. */
	ck_assert_uint_gt(atomic_load(&b->head), MT_TBUF_SIZE - 512);
	ck_assert_uint_le(atomic_load(&b->head), MT_TBUF_SIZE);
	ck_assert(t_full >= 0.9);
	ck_assert(t_full < 5);
	ck_assert_int_eq(stalls, 1);
	ck_assert(mt_tbuf_stalled());
	ck_assert_uint_eq(mt_tbuf_dropped(), 0); /* a push is not counted */

	/* Reserved events fill the room a push left (their check costs
	 * nothing until the slot that may not hold one); then they give up
	 * at once, counted, as does a push, while the writer takes nothing. */
	uint64_t dropped = 0;
	double t = now_s();
	for (int i = 0; i < 100 && !dropped; i++) {
		uint8_t *p = mt_tbuf_reserve(b);
		if (p) {
			mt_tbuf_commit(b, make_rec(p, K_RESERVE, seq, reserve_len(seq)));
			seq++;
		} else {
			dropped++;
		}
	}
	ck_assert_uint_eq(dropped, 1);
	ck_assert_uint_gt(atomic_load(&b->head) + MT_REC_HOT_MAX, MT_TBUF_SIZE);
	for (int i = 0; i < 5; i++, dropped++)
		ck_assert_ptr_null(mt_tbuf_reserve(b));
	ck_assert_int_eq(mt_tbuf_push(b, rec, make_rec(rec, K_PUSH, seq, 500)), -1);
	ck_assert(now_s() - t < 0.5);
	ck_assert_uint_eq(mt_tbuf_dropped(), dropped);
	mt_tbuf_count_dropped();
	ck_assert_uint_eq(mt_tbuf_dropped(), ++dropped);
	ck_assert_int_eq(stalls, 1); /* said once a capture */

	/* What was in the ring is intact; taking it ends the stall. */
	ck_assert_uint_eq(consume(b, &r), seq);
	ck_assert(!mt_tbuf_stalled());
	push_rec(b, seq++);
	reserve_rec(b, seq++);
	ck_assert_uint_eq(consume(b, &r), 2);
	ck_assert_uint_eq(mt_tbuf_dropped(), dropped);

	/* After the capture's end nothing is recorded, nor counted. */
	stop();
	ck_assert_ptr_null(mt_tbuf_reserve(b));
	mt_tbuf_count_dropped();
	ck_assert_uint_eq(mt_tbuf_dropped(), dropped);

	/* A new capture starts with nothing dropped or stalled. */
	mt_tbuf_begin(NULL, 0);
	ck_assert_uint_eq(mt_tbuf_dropped(), 0);
	ck_assert(!mt_tbuf_stalled());
}
END_TEST

/* ------------------------------------------------------------------------
 * Two threads
 * ---------------------------------------------------------------------- */
struct producer {
	struct mt_tbuf *b;
	uint32_t first, n;
};

static void *produce(void *arg)
{
	struct producer *p = arg;
	if (!p->b)
		p->b = mt_tbuf_new();
	for (uint32_t s = p->first; s < p->first + p->n; s++) {
		uint8_t rec[512];
		size_t len = make_rec(rec, K_PUSH, s, push_len(s));
		if (mt_tbuf_push(p->b, rec, len) < 0)
			return (void *)1;
	}
	return NULL;
}

/* A second thread gets a buffer of its own; the registry lists both; the
 * turn passing between them gives each run its epoch in event order. */
START_TEST(test_tbuf_two_threads)
{
	struct mt_tbuf *a = start();
	struct reader rb = { 0 };
	uint64_t epoch, end;
	push_rec(a, 0);
	push_rec(a, 1);
	struct producer p = { NULL, 0, 5 };
	pthread_t th;
	void *ret;
	ck_assert_int_eq(pthread_create(&th, NULL, produce, &p), 0);
	ck_assert_int_eq(pthread_join(th, &ret), 0);
	ck_assert_ptr_null(ret);
	push_rec(a, 2);

	ck_assert_ptr_nonnull(p.b);
	ck_assert_ptr_ne(p.b, a);
	int seen_a = 0, seen_b = 0;
	for (struct mt_tbuf *x = mt_tbuf_all(); x; x = x->next) {
		seen_a += x == a;
		seen_b += x == p.b;
	}
	ck_assert_int_eq(seen_a, 1);
	ck_assert_int_eq(seen_b, 1);

	/* a: records 0, 1 in epoch 1, then (after b's turn) record 2 in a
	 * later epoch, as two runs. */
	ck_assert_int_eq(mt_tbuf_front(a, &epoch, &end), 1);
	ck_assert_uint_eq(epoch, 1);
	ck_assert_uint_eq(end, push_len(0) + push_len(1));
	mt_tbuf_release(a, end);
	ck_assert_int_eq(mt_tbuf_front(a, &epoch, &end), 1);
	ck_assert_uint_eq(epoch, 3);
	ck_assert_uint_eq(end, push_len(0) + push_len(1) + push_len(2));
	mt_tbuf_release(a, end);
	ck_assert_int_eq(mt_tbuf_front(a, &epoch, &end), 0);
	/* b: its five records, in epoch 2. */
	ck_assert_uint_eq(consume(p.b, &rb), 5);
	ck_assert_uint_eq(rb.epoch, 2);
	stop();
}
END_TEST

/* A producer thread that pushes four rings' worth while the writer (this
 * thread) takes records only now and then: the producer waits for room
 * while the writer makes progress, and nothing is lost. */
START_TEST(test_tbuf_producer_waits)
{
	struct mt_tbuf *b = start();
	struct reader r = { 0 };
	struct producer p = { b, 0, 0 };
	uint64_t total = 0;
	while (total < 4ull * MT_TBUF_SIZE)
		total += push_len(p.n++);
	pthread_t th;
	ck_assert_int_eq(pthread_create(&th, NULL, produce, &p), 0);
	struct timespec pause = { 0, 20 * 1000 * 1000 };
	double t0 = now_s();
	while (r.next_seq < p.n) {
		nanosleep(&pause, NULL);
		consume(b, &r);
		ck_assert(now_s() - t0 < 30);
	}
	void *ret;
	ck_assert_int_eq(pthread_join(th, &ret), 0);
	ck_assert_ptr_null(ret);
	ck_assert_uint_eq(r.next_seq, p.n);
	ck_assert_int_eq(stalls, 0);
	ck_assert(!mt_tbuf_stalled());
	stop();
}
END_TEST

/* ------------------------------------------------------------------------
 * Fork and the doorbell
 * ---------------------------------------------------------------------- */
START_TEST(test_tbuf_forget)
{
	struct mt_tbuf *b = start();
	push_rec(b, 0);
	mt_tbuf_forget();
	ck_assert_ptr_null(atomic_load(&mt_whot.last));
	ck_assert_int_eq(atomic_load(&mt_whot.running), 0);
	uint8_t rec[HDR];
	ck_assert_int_eq(mt_tbuf_push(b, rec, make_rec(rec, K_PUSH, 1, HDR)), -1);
	ck_assert_ptr_null(mt_tbuf_reserve(b));
	ck_assert_uint_eq(mt_tbuf_dropped(), 0);
}
END_TEST

/* A producer rings the bell once its buffer is half full, not before. */
START_TEST(test_tbuf_bell)
{
	struct mt_tbuf *b = start();
	mt_tbuf_bell_set(0);
	uint32_t seq = 0;
	while (atomic_load(&b->head) < MT_TBUF_SIZE / 4)
		push_rec(b, seq++);
	ck_assert_uint_eq(mt_tbuf_bell_swap(0), 0);
	while (atomic_load(&b->head) < MT_TBUF_SIZE * 5 / 8)
		push_rec(b, seq++);
	ck_assert_uint_eq(mt_tbuf_bell_swap(0), 1);
	/* wake rings it; bell_wait returns at once on a rung bell and after
	 * its timeout on one that stays as it is. */
	mt_tbuf_wake();
	ck_assert_uint_eq(mt_tbuf_bell_swap(1), 1);
	double t = now_s();
	mt_tbuf_bell_wait(0, 2000ull * 1000 * 1000);
	ck_assert(now_s() - t < 1);
	t = now_s();
	mt_tbuf_bell_wait(1, 50ull * 1000 * 1000);
	ck_assert(now_s() - t >= 0.04);
	mt_tbuf_kick();
	ck_assert_uint_eq(mt_tbuf_bell_swap(0), 1);
	stop();
}
END_TEST

static Suite *tbuf_suite(void)
{
	Suite *s = suite_create("tbuf");
	TCase *tc = tcase_create("tbuf");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_tbuf_in_order);
	tcase_add_test(tc, test_tbuf_wraps);
	tcase_add_test(tc, test_tbuf_wraps_events);
	tcase_add_test(tc, test_tbuf_full_drops);
	tcase_add_test(tc, test_tbuf_two_threads);
	tcase_add_test(tc, test_tbuf_producer_waits);
	tcase_add_test(tc, test_tbuf_forget);
	tcase_add_test(tc, test_tbuf_bell);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(tbuf_suite());
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
