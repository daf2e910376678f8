/* SPDX-License-Identifier: MIT */
/* The payload's aggregation (payload/aggregate.c) against the reader's
 * snapshot: one random event stream written both ways, as events and as
 * the figures the aggregation writes (flushed at random points, as the
 * writer does every second), must give the same peak, leaks, totals and
 * per-site figures. */
#include "format/error.h"
#include "payload/aggregate.h"
#include "reader/snapshot.h"

#include "capture-writer.h"

#include <check.h>
#include <stdlib.h> /* EXIT_SUCCESS */

#define PAGE 4096ull
#define STACKS 12
#define THREADS 3

static struct cw full, agg;

static void append_agg(const struct mt_record *r)
{
	cw_rec(&agg, r);
}

static uint64_t rng_state;
static uint64_t rnd(uint64_t n)
{
	rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
	return (rng_state >> 33) % n;
}

/* definitions both captures share */
static void define(struct cw *w)
{
	for (uint32_t t = 0; t < THREADS; t++)
		cw_thread(w, t, 100 + t, t ? "worker" : "MainThread");
	cw_code(w, 1, "prog.py", "f", 1);
	for (uint32_t s = 1; s <= STACKS; s++)
		cw_stack(w, s, s > 1 ? s / 2 : 0, 1, 2 * s);
}

static void build(struct cw *w, struct mt_snapshot *s)
{
	struct mt_capture *c;
	cw_finish(w);
	ck_assert_int_eq(mt_capture_open_mem(w->buf, w->len, &c), 0);
	ck_assert_int_eq(mt_snapshot_build(s, c), 0);
	mt_capture_close(c);
}

static const struct mt_site *find_site(const struct mt_snapshot *s, const struct mt_site *k)
{
	const struct mt_site *v;
	size_t n = mt_snapshot_sites(s, &v);
	for (size_t i = 0; i < n; i++)
		if (v[i].stack == k->stack && v[i].thread == k->thread &&
		    v[i].allocator == k->allocator)
			return &v[i];
	return NULL;
}

static void events(unsigned n_events)
{
	uint64_t live[256] = { 0 }; /* malloc-family addresses handed out */
	uint64_t maps[16] = { 0 }, map_len[16] = { 0 };
	for (unsigned i = 0; i < n_events; i++) {
		uint32_t thread = (uint32_t)rnd(THREADS), stack = (uint32_t)rnd(STACKS + 1);
		unsigned what = (unsigned)rnd(100);
		if (what < 45) { /* malloc family, sometimes at a live address */
			unsigned slot = (unsigned)rnd(256);
			unsigned kind = rnd(4) ? MT_ALLOC_MALLOC : MT_ALLOC_CALLOC;
			uint64_t addr = 0x100000 + 16 * slot, size = 1 + rnd(5000);
			cw_alloc(&full, thread, kind, addr, size, stack);
			mt_agg_alloc(thread, kind, addr, size, stack);
			live[slot] = addr;
		} else if (what < 85) { /* free, of a live block or of one never seen */
			unsigned slot = (unsigned)rnd(256);
			uint64_t addr = live[slot] ? live[slot] : 0x900000 + 16 * slot;
			live[slot] = 0;
			cw_free(&full, thread, MT_ALLOC_FREE, addr, 0);
			mt_agg_free(thread, MT_ALLOC_FREE, addr, 0);
		} else if (what < 92) { /* a mapping, perhaps over a live one */
			unsigned slot = (unsigned)rnd(16);
			uint64_t addr = 0x7f0000000000ull + slot * 64 * PAGE + rnd(4) * PAGE;
			uint64_t len = (1 + rnd(16)) * PAGE;
			cw_alloc(&full, thread, MT_ALLOC_MMAP, addr, len, stack);
			mt_agg_alloc(thread, MT_ALLOC_MMAP, addr, len, stack);
			maps[slot] = addr, map_len[slot] = len;
		} else if (what < 98) { /* munmap of part of one, or of more */
			unsigned slot = (unsigned)rnd(16);
			uint64_t addr = maps[slot] ? maps[slot] + rnd(3) * PAGE : 0x7e0000000000ull;
			uint64_t len = 1 + rnd(map_len[slot] + 2 * PAGE);
			cw_free(&full, thread, MT_ALLOC_MUNMAP, addr, len);
			mt_agg_free(thread, MT_ALLOC_MUNMAP, addr, len);
		} else { /* the writer's flush */
			uint64_t t = i;
			cw_sample(&full, t, 1000 + i);
			mt_agg_sampled(t);
			struct mt_record r = { .type = MT_REC_SAMPLE };
			r.sample = (struct mt_rec_sample){ .time_us = t, .rss = 1000 + i,
							   .heap = mt_agg_heap() + 1 };
			cw_rec(&agg, &r);
			mt_agg_emit(append_agg);
		}
	}
}

START_TEST(test_aggregate_equals_snapshot)
{
	rng_state = 12345 + (uint64_t)_i;
	struct mt_header hf = cw_header(0), ha = cw_header(MT_HDR_AGGREGATED);
	cw_init(&full, &hf, 4096, 1);
	cw_init(&agg, &ha, 4096, 1);
	define(&full);
	define(&agg);
	mt_agg_begin();
	events(20000);
	mt_agg_emit(append_agg);
	mt_agg_release();

	struct mt_snapshot a, b;
	build(&full, &a);
	build(&agg, &b);
	ck_assert_uint_eq(a.peak_heap, b.peak_heap);
	ck_assert_uint_eq(a.heap_end, b.heap_end);
	ck_assert_uint_eq(a.leak_count, b.leak_count);
	ck_assert_uint_eq(a.n_allocs, b.n_allocs);
	ck_assert_uint_eq(a.n_frees, b.n_frees);
	ck_assert_uint_eq(a.n_unmatched_frees, b.n_unmatched_frees);
	ck_assert_uint_eq(a.bytes_allocated, b.bytes_allocated);
	ck_assert_uint_eq(a.bytes_freed, b.bytes_freed);
	ck_assert_uint_eq(a.peak_time_us, b.peak_time_us);
	ck_assert_mem_eq(a.by_allocator_count, b.by_allocator_count, sizeof(a.by_allocator_count));
	ck_assert_mem_eq(a.by_allocator_bytes, b.by_allocator_bytes, sizeof(a.by_allocator_bytes));
	ck_assert_mem_eq(a.size_hist, b.size_hist, sizeof(a.size_hist));
	ck_assert_uint_eq(a.n_samples, b.n_samples);
	for (size_t i = 0; i < a.n_samples; i++)
		ck_assert_uint_eq(a.samples[i].heap, b.samples[i].heap);
	const struct mt_site *sa;
	size_t n = mt_snapshot_sites(&a, &sa), nb = mt_snapshot_sites(&b, &(const struct mt_site *){ 0 });
	ck_assert_uint_eq(n, nb);
	ck_assert_uint_gt(n, 40);
	for (size_t i = 0; i < n; i++) {
		const struct mt_site *x = find_site(&b, &sa[i]);
		ck_assert_ptr_nonnull(x);
		ck_assert_uint_eq(sa[i].usage.peak_bytes, x->usage.peak_bytes);
		ck_assert_uint_eq(sa[i].usage.peak_count, x->usage.peak_count);
		ck_assert_uint_eq(sa[i].usage.leak_bytes, x->usage.leak_bytes);
		ck_assert_uint_eq(sa[i].usage.leak_count, x->usage.leak_count);
		ck_assert_uint_eq(sa[i].usage.alloc_bytes, x->usage.alloc_bytes);
		ck_assert_uint_eq(sa[i].usage.alloc_count, x->usage.alloc_count);
		ck_assert_uint_eq(sa[i].first_addr, x->first_addr);
	}
	for (uint32_t s = 0; s <= STACKS; s++) {
		struct mt_usage ua = mt_snapshot_stack_usage(&a, s), ub = mt_snapshot_stack_usage(&b, s);
		ck_assert_uint_eq(ua.peak_bytes, ub.peak_bytes);
		ck_assert_uint_eq(ua.leak_bytes, ub.leak_bytes);
	}
	mt_snapshot_release(&a);
	mt_snapshot_release(&b);
	cw_release(&full);
	cw_release(&agg);
}
END_TEST

/* A capture cut short reads as of its last figures. */
START_TEST(test_aggregate_last_figures_win)
{
	struct mt_header ha = cw_header(MT_HDR_AGGREGATED);
	cw_init(&agg, &ha, 4096, 1);
	define(&agg);
	mt_agg_begin();
	mt_agg_alloc(0, MT_ALLOC_MALLOC, 0x1000, 100, 1);
	mt_agg_alloc(0, MT_ALLOC_MALLOC, 0x2000, 300, 2);
	mt_agg_emit(append_agg);
	mt_agg_free(0, MT_ALLOC_FREE, 0x2000, 0);
	mt_agg_alloc(0, MT_ALLOC_MALLOC, 0x3000, 50, 1);
	mt_agg_emit(append_agg);
	mt_agg_release();
	struct mt_snapshot s;
	build(&agg, &s);
	ck_assert_uint_eq(s.peak_heap, 400);
	ck_assert_uint_eq(s.heap_end, 150);
	struct mt_usage u1 = mt_snapshot_stack_usage(&s, 1), u2 = mt_snapshot_stack_usage(&s, 2);
	ck_assert_uint_eq(u1.peak_bytes, 100);
	ck_assert_uint_eq(u2.peak_bytes, 300);
	ck_assert_uint_eq(u1.leak_bytes, 150);
	ck_assert_uint_eq(u1.leak_count, 2);
	ck_assert_uint_eq(u2.leak_bytes, 0);
	ck_assert(!s.have_trailer);
	mt_snapshot_release(&s);
	cw_release(&agg);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("aggregate");
	TCase *tc = tcase_create("aggregate");
	tcase_add_loop_test(tc, test_aggregate_equals_snapshot, 0, 8);
	tcase_add_test(tc, test_aggregate_last_figures_win);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
