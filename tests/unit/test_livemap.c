/* SPDX-License-Identifier: MIT */
/* The live map against a plain model: puts, gets and deletes of many
 * addresses in a random order, through every table's doubling; and the
 * tables double one at a time. The same with its tables made ahead on a
 * thread of their own (util/livemap-ahead.h). */
#include "util/livemap.h"
#include "util/livemap-ahead.h"

#include <check.h>
#include <stdint.h> /* uint64_t */
#include <stdlib.h> /* EXIT_SUCCESS, calloc, free */

#define N 200000

static uint64_t rnd(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static void model(int ahead)
{
	struct mt_livemap m = { 0 };
	struct mt_livemap_ahead *a = ahead ? mt_livemap_ahead_new(&m) : NULL;
	if (ahead)
		ck_assert_ptr_nonnull(a);
	/* addresses as allocators give them: runs of 16-byte steps in a few
	 * arenas, and some anywhere */
	uint64_t *addr = calloc(N, sizeof(*addr));
	unsigned char *in = calloc(N, 1);
	uint64_t x = 88172645463325252ull, live = 0;
	for (int i = 0; i < N; i++)
		addr[i] = i % 5 ? 0x7f0000000000ull + (uint64_t)(i % 3) * (1ull << 32) + 16u * (uint64_t)i
				: (rnd(&x) | 1);
	/* checked without ck_assert() in the loop: each one writes a mark */
	int bad = -1;
	for (int round = 0; round < 4 * N && bad < 0; round++) {
		int i = (int)(rnd(&x) % N), had;
		if (round < N || rnd(&x) % 3) {
			struct mt_live *e = mt_livemap_put(&m, addr[i], &had);
			if (!e || had != in[i] || e->addr != addr[i] || (had && e->size != (uint64_t)i)) {
				bad = round;
				break;
			}
			e->size = (uint64_t)i;
			e->site = (uint32_t)i * 7;
			live += !in[i];
			in[i] = 1;
		} else {
			struct mt_live *e = mt_livemap_get(&m, addr[i]);
			if ((e != NULL) != in[i] ||
			    (e && (e->size != (uint64_t)i || e->site != (uint32_t)i * 7))) {
				bad = round;
				break;
			}
			if (e) {
				mt_livemap_delete(&m, e);
				in[i] = 0;
				live--;
			}
		}
	}
	ck_assert_int_eq(bad, -1);
	ck_assert_uint_eq(mt_livemap_count(&m), live);
	for (int i = 0; i < N; i++) {
		struct mt_live *e = mt_livemap_get(&m, addr[i]);
		if ((e != NULL) != in[i] || (e && e->size != (uint64_t)i))
			bad = i;
	}
	ck_assert_int_eq(bad, -1);
	/* every table at most three quarters full, and none far larger than
	 * another: the map grows a table at a time */
	uint64_t least = UINT64_MAX, most = 0;
	for (unsigned k = 0; k < 1u << MT_LIVEMAP_SEG_BITS; k++) {
		const struct mt_liveseg *g = &m.seg[k];
		ck_assert_ptr_nonnull(g->v);
		ck_assert(g->n * 4 <= (g->mask + 1) * 3);
		least = g->mask + 1 < least ? g->mask + 1 : least;
		most = g->mask + 1 > most ? g->mask + 1 : most;
	}
	ck_assert_uint_le(most, 4 * least);
	mt_livemap_ahead_free(a);
	ck_assert_ptr_null(m.supply);
	mt_livemap_release(&m);
	ck_assert_uint_eq(mt_livemap_count(&m), 0);
	ck_assert_ptr_null(mt_livemap_get(&m, addr[0]));
	free(addr);
	free(in);
}

START_TEST(test_livemap_model)
{
	model(0);
}
END_TEST

START_TEST(test_livemap_model_ahead)
{
	model(1);
}
END_TEST

/* Old tables given back faster than the thread unmaps them: each is
 * freed once (a slot taken out after the lock was let go was the next
 * one's: freed twice, glibc aborts). */
START_TEST(test_livemap_ahead_gives)
{
	struct mt_livemap m = { 0 };
	struct mt_livemap_ahead *a = mt_livemap_ahead_new(&m);
	ck_assert_ptr_nonnull(a);
	const struct mt_livemap_supply *sup = m.supply;
	sup->soon(sup->ctx, 0, 12); /* the first table worth the thread: it starts */
	for (int i = 0; i < 5000; i++) {
		struct mt_live *t = mt_livemap_table(i % 2 ? 10 : 11);
		ck_assert_ptr_nonnull(t);
		t[0].addr = (uint64_t)i + 1;
		sup->give(sup->ctx, t, i % 2 ? 10 : 11);
	}
	struct mt_live *t = sup->take(sup->ctx, 0, 12);
	ck_assert_ptr_nonnull(t);
	ck_assert_uint_eq(t[0].addr, 0);
	mt_livemap_table_free(t, 12);
	mt_livemap_ahead_free(a);
}
END_TEST

static Suite *livemap_suite(void)
{
	Suite *s = suite_create("livemap");
	TCase *tc = tcase_create("livemap");

	tcase_add_test(tc, test_livemap_model);
	tcase_add_test(tc, test_livemap_model_ahead);
	tcase_add_test(tc, test_livemap_ahead_gives);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(livemap_suite());
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
