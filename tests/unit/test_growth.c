/* SPDX-License-Identifier: MIT */
/* reader/growth.c against the series kept whole and fitted directly. */
#include "reader/growth.h"

#include <check.h>
#include <math.h>   /* fabs, sqrt */
#include <stdlib.h> /* EXIT_SUCCESS */
#include <string.h> /* memset */

#define NSTACKS 6
#define MAXK 5000

static double series[NSTACKS][MAXK];
static int seen[NSTACKS];

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void close_to(double got, double want, const char *what, int stack)
{
	double tol = 1e-6 * (fabs(want) > 1 ? fabs(want) : 1);
	ck_assert_msg(fabs(got - want) <= tol, "stack %d: %s is %.9g, want %.9g", stack, what, got,
		      want);
}

/* The figures of stack @j fitted from its whole series of @k points over
 * @secs seconds, checked against @row. */
static void check_row(int j, uint64_t k, double secs, const struct mt_growth_row *row)
{
	double sy = 0, sxy = 0, sx = 0, sxx = 0, syy = 0, up = 0, down = 0, prev = 0, max = 0;
	for (uint64_t i = 0; i < k; i++) {
		double y = series[j][i], x = (double)i;
		sx += x, sy += y, sxx += x * x, sxy += x * y, syy += y * y;
		if (y > prev)
			up += y - prev;
		else
			down += prev - y;
		prev = y;
		max = y > max ? y : max;
	}
	double K = (double)k, varx = K * sxx - sx * sx, cov = K * sxy - sx * sy;
	double vary = K * syy - sy * sy;
	double rise = cov / varx * (K - 1);
	double r = vary > 0 ? cov / sqrt(varx * vary) : 0;
	double steady = up + down > 0 ? (up - down) / (up + down) : 0;
	close_to(row->rise, rise, "rise", j);
	close_to(row->slope, rise / secs, "slope", j);
	close_to(row->r, r, "r", j);
	close_to(row->steady, steady, "steady", j);
	close_to(row->score, rise * (r > 0 ? r : 0) * (steady > 0 ? steady : 0), "score", j);
	ck_assert_uint_eq(row->end_bytes, (uint64_t)series[j][k - 1]);
	ck_assert_uint_eq(row->max_bytes, (uint64_t)max);
	/* plot points: the highest value in each stretch of w points */
	uint64_t w = 1;
	while (k > (uint64_t)MT_GROWTH_POINTS * w)
		w *= 2;
	ck_assert_uint_eq(row->n_points, (k + w - 1) / w);
	for (unsigned p = 0; p < row->n_points; p++) {
		double m = 0;
		for (uint64_t i = p * w; i < (p + 1) * w && i < k; i++)
			m = series[j][i] > m ? series[j][i] : m;
		ck_assert_msg(fabs(row->points[p] - m) <= 1e-6 * m + 0.5,
			      "stack %d point %u: %g, want %g", j, p, (double)row->points[p], m);
	}
}

/* random changes and samples, each stack with a drift of its own */
static void run_stream(uint64_t k_want, int end_point)
{
	struct mt_growth g = { 0 };
	double val[NSTACKS] = { 0 };
	uint64_t k = 0, t = 1000000;
	static const int drift[NSTACKS] = { 3, 0, -1, 1, 8, 0 };

	memset(seen, 0, sizeof(seen));
	while (k < k_want) {
		unsigned n = (unsigned)(next() % 4);
		for (unsigned e = 0; e < n; e++) {
			int j = (int)(next() % NSTACKS);
			int64_t d = (int64_t)(next() % 1000) - 500 + 100 * drift[j];
			if (val[j] + (double)d < 0)
				d = -(int64_t)val[j]; /* live bytes never go below 0 */
			if (j == 5 && k < k_want / 2)
				continue; /* a stack that appears half way */
			ck_assert_int_eq(mt_growth_change(&g, (uint32_t)j, d), 0);
			val[j] += (double)d;
			seen[j] = 1;
		}
		t += 10000 + next() % 100;
		mt_growth_sample(&g, t);
		for (int j = 0; j < NSTACKS; j++)
			series[j][k] = val[j];
		k++;
	}
	if (end_point) {
		int64_t d = 12345;
		ck_assert_int_eq(mt_growth_change(&g, 0, d), 0);
		val[0] += (double)d;
		seen[0] = 1;
		t += 5000;
		for (int j = 0; j < NSTACKS; j++)
			series[j][k] = val[j];
		k++;
	}
	mt_growth_finish(&g, end_point ? t : t - 1);
	ck_assert_uint_eq(mt_growth_points(&g), k);
	double secs = (double)(g.last_us - g.first_us) / 1e6;
	ck_assert_uint_eq(g.last_us, t);
	for (int j = 0; j < NSTACKS; j++) {
		struct mt_growth_row row;
		mt_growth_row_of(&g, (uint32_t)j, &row);
		if (seen[j])
			check_row(j, k, secs, &row);
		else
			ck_assert(row.rise == 0 && row.end_bytes == 0);
	}
	/* the ranking: rising stacks only, by score */
	struct mt_growth_row *rows;
	long n = mt_growth_rank(&g, &rows);
	ck_assert_int_ge(n, k >= 64 ? 1 : 0); /* stacks 0 and 4 drift up */
	for (long i = 0; i < n; i++) {
		ck_assert(rows[i].rise > 0);
		if (i)
			ck_assert(rows[i - 1].score >= rows[i].score);
	}
	free(rows);
	/* no change is taken after the end */
	ck_assert_int_eq(mt_growth_change(&g, 1, 1000000), 0);
	struct mt_growth_row again;
	mt_growth_row_of(&g, 1, &again);
	ck_assert_uint_eq(again.end_bytes, (uint64_t)val[1]);
	mt_growth_release(&g);
}

START_TEST(test_growth_against_the_whole_series)
{
	static const uint64_t ks[] = { 2, 3, 31, 32, 33, 64, 65, 1000, 4999 };
	for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++) {
		run_stream(ks[i], 0);
		run_stream(ks[i], 1);
	}
}
END_TEST

/* The figures of every stack now, as if the capture ended at @end_us
 * with @k points: rows and ranking. */
static void check_now(const struct mt_growth *g, uint64_t end_us, uint64_t k, double secs)
{
	for (int j = 0; j < NSTACKS; j++) {
		struct mt_growth_row row;
		mt_growth_row_at(g, end_us, (uint32_t)j, &row);
		if (seen[j])
			check_row(j, k, secs, &row);
		else
			ck_assert(row.rise == 0 && row.end_bytes == 0);
	}
	struct mt_growth_row *rows;
	long n = mt_growth_rank_at(g, end_us, &rows);
	ck_assert_int_ge(n, 0);
	for (long i = 0; i < n; i++) {
		struct mt_growth_row row;
		mt_growth_row_at(g, end_us, rows[i].stack, &row);
		ck_assert(rows[i].rise > 0 && rows[i].score == row.score);
		if (i)
			ck_assert(rows[i - 1].score >= rows[i].score);
	}
	free(rows);
}

/* Ranked in the middle of the stream, at a sample and with an end after
 * it, as often as wanted: each time the figures of the points so far,
 * and the end of the stream as if it had never been asked. */
START_TEST(test_growth_ranked_as_it_goes)
{
	static const uint64_t at[] = { 2, 3, 17, 31, 32, 33, 63, 64, 65, 127, 128, 500, 1999 };
	struct mt_growth g = { 0 };
	double val[NSTACKS] = { 0 };
	uint64_t k = 0, t = 1000000, first = 0;
	size_t next_at = 0;

	memset(seen, 0, sizeof(seen));
	while (k < 2000) {
		unsigned n = (unsigned)(next() % 4);
		for (unsigned e = 0; e < n; e++) {
			int j = (int)(next() % NSTACKS);
			int64_t d = (int64_t)(next() % 1000) - 500 + 100 * (j - 2);
			if (val[j] + (double)d < 0)
				d = -(int64_t)val[j];
			if (j == 5 && k < 1000)
				continue;
			ck_assert_int_eq(mt_growth_change(&g, (uint32_t)j, d), 0);
			val[j] += (double)d;
			seen[j] = 1;
		}
		t += 10000 + next() % 100;
		if (!k)
			first = t;
		mt_growth_sample(&g, t);
		for (int j = 0; j < NSTACKS; j++)
			series[j][k] = val[j];
		k++;
		if (next_at < sizeof(at) / sizeof(at[0]) && k == at[next_at]) {
			next_at++;
			/* at the last sample: its points */
			check_now(&g, t, k, (double)(t - first) / 1e6);
			check_now(&g, t - 1, k, (double)(t - first) / 1e6);
			/* changed since: the end is a point more */
			ck_assert_int_eq(mt_growth_change(&g, 1, 777), 0);
			val[1] += 777;
			seen[1] = 1;
			for (int j = 0; j < NSTACKS; j++)
				series[j][k] = val[j];
			check_now(&g, t + 5000, k + 1, (double)(t + 5000 - first) / 1e6);
			ck_assert_uint_eq(mt_growth_points(&g), k);
		}
	}
	mt_growth_finish(&g, t);
	ck_assert_uint_eq(mt_growth_points(&g), k);
	check_now(&g, 0, k, (double)(t - first) / 1e6);
	for (int j = 0; j < NSTACKS; j++) {
		struct mt_growth_row row;
		mt_growth_row_of(&g, (uint32_t)j, &row);
		if (seen[j])
			check_row(j, k, (double)(t - first) / 1e6, &row);
	}
	mt_growth_release(&g);
}
END_TEST

/* A steady rise ranks above a bigger step at start-up and a sawtooth. */
START_TEST(test_growth_ranking)
{
	struct mt_growth g = { 0 };
	for (int i = 0; i < 1000; i++) {
		if (i == 10)
			mt_growth_change(&g, 1, 50 << 20); /* start-up: 50 MiB at once */
		mt_growth_change(&g, 2, 10 << 10);         /* a leak: 10 KiB a point */
		if (i % 100 == 99)
			mt_growth_change(&g, 3, -(int64_t)(99 * (40 << 10)));
		else
			mt_growth_change(&g, 3, 40 << 10); /* a cache cleared every 100 */
		mt_growth_sample(&g, 1000000 + (uint64_t)i * 10000);
	}
	mt_growth_finish(&g, 1000000 + 999 * 10000);
	struct mt_growth_row *rows;
	long n = mt_growth_rank(&g, &rows);
	ck_assert_int_ge(n, 2);
	ck_assert_uint_eq(rows[0].stack, 2);
	ck_assert(rows[0].r > 0.999 && rows[0].steady == 1.0);
	close_to(rows[0].slope, (double)(10 << 10) / 0.01, "slope", 2); /* points 10 ms apart */
	ck_assert_uint_eq(rows[1].stack, 1);
	free(rows);
	mt_growth_release(&g);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("growth");
	TCase *tc = tcase_create("growth");
	tcase_add_test(tc, test_growth_against_the_whole_series);
	tcase_add_test(tc, test_growth_ranking);
	tcase_add_test(tc, test_growth_ranked_as_it_goes);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
