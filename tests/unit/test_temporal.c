/* SPDX-License-Identifier: MIT */
/* reader/temporal.c against every block's life kept whole. */
#include "reader/temporal.h"

#include <check.h>
#include <stdlib.h> /* EXIT_SUCCESS */
#include <string.h> /* memset */

#define NBLOCKS 20000
#define NKEYS 7

struct block {
	uint32_t key;
	uint64_t bytes, a, f; /* fine sample counts; f = MT_TEMPORAL_LIVE while live */
	uint64_t handle;      /* what mt_temporal_alloc() returned */
	int live;
};

static struct block blocks[NBLOCKS];

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static int cmp(const void *pa, const void *pb)
{
	const struct mt_interval *a = pa, *b = pb;
	if (a->key != b->key)
		return a->key < b->key ? -1 : 1;
	if (a->a != b->a)
		return a->a < b->a ? -1 : 1;
	return (a->f > b->f) - (a->f < b->f);
}

/* @n blocks over about @samples samples, with a budget of @budget */
static void run(size_t n, unsigned samples, size_t budget)
{
	struct mt_temporal t = { .budget = budget };
	size_t made = 0;
	uint64_t k = 0;

	memset(blocks, 0, sizeof(blocks));
	while (made < n || k < samples) {
		uint64_t r = next() % 100;
		if (r < 45 && made < n) {
			struct block *b = &blocks[made++];
			b->key = (uint32_t)(next() % NKEYS) + 1;
			b->bytes = next() % 5000 + 1;
			b->a = k;
			b->f = MT_TEMPORAL_LIVE;
			b->live = 1;
			b->handle = mt_temporal_alloc(&t, b->key, b->bytes);
			ck_assert_uint_eq(b->handle, k);
		} else if (r < 90 && made) {
			struct block *b = &blocks[next() % made];
			if (!b->live)
				continue;
			b->live = 0;
			b->f = k;
			mt_temporal_free(&t, b->key, b->handle, b->bytes, 1);
		} else if (k < samples || made >= n) {
			if (k >= samples && made >= n)
				break;
			mt_temporal_sample(&t);
			k++;
		}
	}
	ck_assert(!t.oom);
	ck_assert_uint_eq(t.k, k);
	ck_assert_uint_le(mt_temporal_boundaries(&t), MT_TEMPORAL_BOUNDARIES + 1);
	if (k > MT_TEMPORAL_BOUNDARIES || (budget && budget < 1000))
		ck_assert_uint_gt(t.shift, 0); /* the grain grew */
	else
		ck_assert_uint_eq(t.shift, 0);
	ck_assert_uint_le(t.n, (budget ? budget : MT_TEMPORAL_BUDGET) + 1);

	/* every block at the final grain, summed per (key, a, f) */
	unsigned s = t.shift;
	struct mt_interval *want = calloc(n ? n : 1, sizeof(*want));
	size_t nw = 0;
	for (size_t i = 0; i < made; i++) {
		const struct block *b = &blocks[i];
		uint32_t a = (uint32_t)((b->a + (1ull << s) - 1) >> s);
		uint32_t f = b->f == MT_TEMPORAL_LIVE ? MT_TEMPORAL_LIVE
						      : (uint32_t)((b->f + (1ull << s) - 1) >> s);
		if (f != MT_TEMPORAL_LIVE && f <= a)
			continue; /* never live at a boundary */
		want[nw++] = (struct mt_interval){ b->key, a, f, 1, b->bytes, 1 };
	}
	qsort(want, nw, sizeof(*want), cmp);
	size_t m = 0;
	for (size_t i = 0; i < nw; i++) {
		if (m && !cmp(&want[m - 1], &want[i])) {
			want[m - 1].bytes += want[i].bytes;
			want[m - 1].count += want[i].count;
		} else {
			want[m++] = want[i];
		}
	}
	struct mt_interval *got;
	long ng = mt_temporal_intervals(&t, &got);
	ck_assert_int_ge(ng, 0);
	qsort(got, (size_t)ng, sizeof(*got), cmp);
	ck_assert_msg((size_t)ng == m, "%ld intervals, want %zu (shift %u)", ng, m, s);
	for (size_t i = 0; i < m; i++) {
		ck_assert_msg(!cmp(&got[i], &want[i]) && got[i].bytes == want[i].bytes &&
				      got[i].count == want[i].count,
			      "interval %zu: key %u [%u, %u) %llu bytes %llu, want key %u [%u, %u) "
			      "%llu bytes %llu",
			      i, got[i].key, got[i].a, got[i].f, (unsigned long long)got[i].bytes,
			      (unsigned long long)got[i].count, want[i].key, want[i].a, want[i].f,
			      (unsigned long long)want[i].bytes, (unsigned long long)want[i].count);
	}
	free(got);
	free(want);
	mt_temporal_release(&t);
}

START_TEST(test_temporal_fine)
{
	run(2000, 50, 0); /* no grain: every sample a boundary */
}
END_TEST

START_TEST(test_temporal_budget)
{
	/* a small budget makes the grain grow several times */
	run(NBLOCKS, 3000, 64);
	run(NBLOCKS, 300, 200);
}
END_TEST

START_TEST(test_temporal_boundaries)
{
	/* more samples than boundaries: the grain grows to keep them few */
	run(3000, 10000, 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("temporal");
	TCase *tc = tcase_create("temporal");
	tcase_add_test(tc, test_temporal_fine);
	tcase_add_test(tc, test_temporal_budget);
	tcase_add_test(tc, test_temporal_boundaries);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
