/* SPDX-License-Identifier: MIT */
/* Snapshot: peak, leaks, mappings, threads and locations, checked against
 * hand-computed values and a brute-force model. */
#include "format/error.h"
#include "reader/locations.h"
#include "reader/snapshot.h"

#include "capture-writer.h"

#include <check.h>
#include <stdlib.h> /* EXIT_SUCCESS */
#include <string.h> /* strcmp */
#include <time.h>   /* clock_gettime */

#define KB 1024ull
#define MB (1024ull * 1024)
#define PAGE 4096ull

static struct mt_snapshot snap;
static struct cw w;

static void start(uint32_t flags)
{
	struct mt_header h = cw_header(flags);
	cw_init(&w, &h, 200, 1);
}

/* finish the capture and build the snapshot from it */
static void build(void)
{
	struct mt_capture *c;
	cw_finish(&w);
	ck_assert_int_eq(mt_capture_open_mem(w.buf, w.len, &c), 0);
	ck_assert_int_eq(mt_snapshot_build(&snap, c), 0);
	mt_capture_close(c);
}

static void done(void)
{
	mt_snapshot_release(&snap);
	cw_release(&w);
}

START_TEST(test_snapshot_peak_exact)
{
	start(0);
	cw_alloc(&w, 0, MT_ALLOC_MALLOC, 0x1000, 100, 1);  /* 100 */
	cw_alloc(&w, 0, MT_ALLOC_MALLOC, 0x2000, 200, 2);  /* 300 */
	cw_free(&w, 0, MT_ALLOC_FREE, 0x1000, 0);          /* 200 */
	cw_alloc(&w, 0, MT_ALLOC_CALLOC, 0x3000, 500, 3);  /* 700: peak */
	cw_free(&w, 0, MT_ALLOC_FREE, 0x3000, 0);          /* 200 */
	cw_alloc(&w, 0, MT_ALLOC_MALLOC, 0x1000, 300, 1);  /* 500 */
	cw_alloc(&w, 0, MT_ALLOC_MALLOC, 0x4000, 150, 2);  /* 650 */
	cw_free(&w, 0, MT_ALLOC_FREE, 0x2000, 0);          /* 450 */
	cw_trailer(&w, 1000, 8, 0);
	build();
	ck_assert_uint_eq(snap.peak_heap, 700);
	ck_assert_uint_eq(snap.peak_event, 4);
	struct mt_usage u1 = mt_snapshot_stack_usage(&snap, 1);
	struct mt_usage u2 = mt_snapshot_stack_usage(&snap, 2);
	struct mt_usage u3 = mt_snapshot_stack_usage(&snap, 3);
	ck_assert_uint_eq(u1.peak_bytes, 0);
	ck_assert_uint_eq(u1.peak_count, 0);
	ck_assert_uint_eq(u2.peak_bytes, 200);
	ck_assert_uint_eq(u2.peak_count, 1);
	ck_assert_uint_eq(u3.peak_bytes, 500);
	ck_assert_uint_eq(u3.peak_count, 1);
	ck_assert_uint_eq(u1.leak_bytes, 300);
	ck_assert_uint_eq(u2.leak_bytes, 150);
	ck_assert_uint_eq(u3.leak_bytes, 0);
	ck_assert_uint_eq(u1.alloc_bytes, 400);
	ck_assert_uint_eq(u1.alloc_count, 2);
	ck_assert_uint_eq(snap.heap_end, 450);
	ck_assert_uint_eq(snap.leak_count, 2);
	ck_assert_uint_eq(snap.n_allocs, 5);
	ck_assert_uint_eq(snap.n_frees, 3);
	ck_assert_uint_eq(snap.bytes_allocated, 1250);
	ck_assert_uint_eq(snap.by_allocator_count[MT_ALLOC_CALLOC], 1);
	ck_assert_uint_eq(snap.size_hist[7], 1); /* 100 in [64, 128) */
	ck_assert_uint_eq(snap.size_hist[8], 2); /* 150, 200 */
	ck_assert(snap.have_trailer);
	done();
}
END_TEST

/* Equal peaks: the later one wins (as memray does). */
START_TEST(test_snapshot_peak_latest_wins)
{
	start(0);
	cw_alloc(&w, 0, MT_ALLOC_MALLOC, 0x1000, 100, 1);
	cw_free(&w, 0, MT_ALLOC_FREE, 0x1000, 0);
	cw_alloc(&w, 0, MT_ALLOC_MALLOC, 0x2000, 100, 2);
	build();
	ck_assert_uint_eq(snap.peak_heap, 100);
	ck_assert_uint_eq(mt_snapshot_stack_usage(&snap, 1).peak_bytes, 0);
	ck_assert_uint_eq(mt_snapshot_stack_usage(&snap, 2).peak_bytes, 100);
	ck_assert(!snap.have_trailer && snap.status.truncated);
	done();
}
END_TEST

START_TEST(test_snapshot_realloc_and_unknown_frees)
{
	start(MT_HDR_ATTACHED);
	cw_free(&w, 0, MT_ALLOC_FREE, 0xdead0, 0); /* allocated before attach */
	cw_alloc(&w, 0, MT_ALLOC_MALLOC, 0x1000, 10, 1);
	/* realloc(0x1000, 1000) -> 0x8000 */
	cw_free(&w, 0, MT_ALLOC_FREE, 0x1000, 0);
	cw_alloc(&w, 0, MT_ALLOC_REALLOC, 0x8000, 1000, 2);
	/* realloc in place */
	cw_free(&w, 0, MT_ALLOC_FREE, 0x8000, 0);
	cw_alloc(&w, 0, MT_ALLOC_REALLOC, 0x8000, 2000, 2);
	/* a lost free: the same address allocated again replaces the block */
	cw_alloc(&w, 0, MT_ALLOC_MALLOC, 0x8000, 50, 3);
	cw_free(&w, 0, MT_ALLOC_MUNMAP, 0x100000, 4096); /* never mapped */
	build();
	ck_assert_uint_eq(snap.n_unmatched_frees, 2);
	ck_assert_uint_eq(snap.peak_heap, 2000);
	ck_assert_uint_eq(snap.heap_end, 50);
	ck_assert_uint_eq(snap.leak_count, 1);
	ck_assert_uint_eq(mt_snapshot_stack_usage(&snap, 2).leak_bytes, 0);
	ck_assert_uint_eq(mt_snapshot_stack_usage(&snap, 2).peak_bytes, 2000);
	ck_assert_uint_eq(mt_snapshot_stack_usage(&snap, 3).leak_count, 1);
	ck_assert_uint_eq(snap.by_allocator_count[MT_ALLOC_REALLOC], 2);
	done();
}
END_TEST

START_TEST(test_snapshot_munmap_ranges)
{
	const uint64_t A = 0x7f0000000000ull;
	start(0);
	cw_alloc(&w, 0, MT_ALLOC_MMAP, A, 4 * PAGE, 1);            /* [0,4) */
	cw_alloc(&w, 1, MT_ALLOC_MMAP, A + 8 * PAGE, 2 * PAGE, 2); /* [8,10) */
	cw_free(&w, 0, MT_ALLOC_MUNMAP, A + PAGE, PAGE);           /* split: [0,1) [2,4) */
	build();
	ck_assert_uint_eq(snap.heap_end, 5 * PAGE);
	ck_assert_uint_eq(snap.peak_heap, 6 * PAGE);
	ck_assert_uint_eq(mt_snapshot_stack_usage(&snap, 1).leak_bytes, 3 * PAGE);
	ck_assert_uint_eq(mt_snapshot_stack_usage(&snap, 1).leak_count, 1);
	done();

	start(0);
	cw_alloc(&w, 0, MT_ALLOC_MMAP, A, 4 * PAGE, 1);
	cw_alloc(&w, 1, MT_ALLOC_MMAP, A + 8 * PAGE, 2 * PAGE, 2);
	cw_free(&w, 0, MT_ALLOC_MUNMAP, A + PAGE, PAGE);
	/* one munmap over the tail of the first and all of the second;
	 * 100 bytes past a page boundary rounds up to the page */
	cw_free(&w, 0, MT_ALLOC_MUNMAP, A + 3 * PAGE, 6 * PAGE + 100);
	cw_free(&w, 0, MT_ALLOC_MUNMAP, A, 100);                   /* first piece */
	build();
	ck_assert_uint_eq(snap.heap_end, PAGE); /* [2,3) */
	ck_assert_uint_eq(mt_snapshot_stack_usage(&snap, 1).leak_bytes, PAGE);
	ck_assert_uint_eq(mt_snapshot_stack_usage(&snap, 1).leak_count, 1);
	ck_assert_uint_eq(mt_snapshot_stack_usage(&snap, 2).leak_bytes, 0);
	ck_assert_uint_eq(mt_snapshot_stack_usage(&snap, 2).leak_count, 0);
	ck_assert_uint_eq(snap.leak_count, 1);
	ck_assert_uint_eq(snap.bytes_freed, 5 * PAGE);
	done();

	/* a mapping over a live one (MAP_FIXED) replaces it */
	start(0);
	cw_alloc(&w, 0, MT_ALLOC_MMAP, A, 4 * PAGE, 1);
	cw_alloc(&w, 0, MT_ALLOC_MMAP, A + 2 * PAGE, 4 * PAGE, 2);
	build();
	ck_assert_uint_eq(snap.heap_end, 6 * PAGE);
	ck_assert_uint_eq(mt_snapshot_stack_usage(&snap, 1).leak_bytes, 2 * PAGE);
	ck_assert_uint_eq(mt_snapshot_stack_usage(&snap, 2).leak_bytes, 4 * PAGE);
	done();
}
END_TEST

/* The kernel reuses a dead thread's tid: a name given to the first thread
 * is not the second's, which keeps its OS name unless it gets one of its
 * own; a name given before any thread of the tid is seen is the first's
 * (an attach names the threads it finds before they allocate). */
START_TEST(test_snapshot_reused_tid)
{
	start(0);
	cw_name(&w, 300, "early");
	cw_thread(&w, 0, 300, "python3");
	cw_thread(&w, 1, 200, "python3");
	cw_name(&w, 200, "first");
	cw_alloc(&w, 1, MT_ALLOC_MALLOC, 0x1000, 10, 0);
	cw_thread(&w, 2, 200, "python3");
	cw_alloc(&w, 2, MT_ALLOC_MALLOC, 0x2000, 20, 0);
	cw_thread(&w, 3, 200, "python3");
	cw_name(&w, 200, "third");
	cw_alloc(&w, 3, MT_ALLOC_MALLOC, 0x3000, 30, 0);
	cw_alloc(&w, 0, MT_ALLOC_MALLOC, 0x4000, 40, 0);
	/* the first thread of tid 300 had the name given before it */
	cw_thread(&w, 4, 300, "worker-os");
	cw_alloc(&w, 4, MT_ALLOC_MALLOC, 0x5000, 50, 0);
	build();
	ck_assert_uint_eq(snap.n_threads, 5);
	ck_assert_str_eq(snap.threads[4].name, "worker-os");
	ck_assert_str_eq(snap.threads[0].name, "early");
	ck_assert_str_eq(snap.threads[1].name, "first");
	ck_assert_str_eq(snap.threads[2].name, "python3");
	ck_assert_str_eq(snap.threads[3].name, "third");
	done();
}
END_TEST

START_TEST(test_snapshot_threads)
{
	start(0);
	cw_thread(&w, 0, 100, "MainThread");
	cw_thread(&w, 20, 120, "worker-20");
	cw_alloc(&w, 0, MT_ALLOC_MALLOC, 0x1000, 10, 0);
	cw_alloc(&w, 20, MT_ALLOC_MALLOC, 0x2000, 20, 0);
	cw_alloc(&w, 20, MT_ALLOC_MALLOC, 0x3000, 30, 0);
	/* freed by another thread: still the allocating thread's memory */
	cw_free(&w, 0, MT_ALLOC_FREE, 0x2000, 0);
	build();
	ck_assert_uint_eq(snap.n_threads, 2);
	ck_assert_uint_eq(snap.threads[0].index, 0);
	ck_assert_str_eq(snap.threads[0].name, "MainThread");
	ck_assert_uint_eq(snap.threads[0].usage.leak_bytes, 10);
	ck_assert_uint_eq(snap.threads[1].index, 20);
	ck_assert_uint_eq(snap.threads[1].tid, 120);
	ck_assert_str_eq(snap.threads[1].name, "worker-20");
	ck_assert_uint_eq(snap.threads[1].usage.peak_bytes, 50);
	ck_assert_uint_eq(snap.threads[1].usage.leak_bytes, 30);
	ck_assert_uint_eq(snap.threads[1].usage.alloc_count, 2);
	done();
}
END_TEST

/* Past a million thread indexes (a thread-per-request service in a
 * night): each thread's allocations are its own, and the last thread's
 * name and figures come through. */
START_TEST(test_snapshot_million_threads)
{
	const uint32_t n = (1u << 20) + 4096;
	struct mt_header h = cw_header(0);
	cw_init(&w, &h, 1 << 16, 0);
	for (uint32_t i = 0; i < n; i++) {
		/* each takes over the buffer of the one before */
		cw_thread_next(&w, i, 1000 + i % 30000, i == n - 1 ? "last" : "worker", i > 0);
		cw_alloc(&w, i, MT_ALLOC_MALLOC, 0x100000 + 16ull * i, 16, 0);
		if (i & 1)
			cw_free(&w, i, MT_ALLOC_FREE, 0x100000 + 16ull * i, 0);
	}
	cw_alloc(&w, n - 1, MT_ALLOC_MALLOC, 0x10, 1000, 0);
	cw_trailer(&w, 1000, n + n / 2 + 1, 0);
	build();
	ck_assert_uint_eq(snap.n_allocs, n + 1);
	ck_assert_uint_eq(snap.n_frees, n / 2);
	ck_assert_uint_eq(snap.heap_end, 16ull * (n / 2) + 1000);
	ck_assert_uint_eq(snap.n_threads, n);
	const struct mt_thread_info *last = &snap.threads[n - 1];
	ck_assert_uint_eq(last->index, n - 1);
	ck_assert_str_eq(last->name, "last");
	ck_assert_uint_eq(last->usage.leak_bytes, 1000); /* its 16 bytes were freed */
	ck_assert_uint_eq(last->usage.alloc_count, 2);
	done();
}
END_TEST

static const struct mt_location *find_loc(const struct mt_location *v, ssize_t n, const char *fn,
					  int line)
{
	for (ssize_t i = 0; i < n; i++)
		if (!strcmp(v[i].function, fn) && v[i].line == line)
			return &v[i];
	ck_abort_msg("no location %s:%d", fn, line);
	return NULL;
}

/* Stacks 1 to 5: main (x.py:1), main > f (x.py:10), main > f > g
 * (x.py:20), main > f > f, main > f > f > g. */
static void main_f_g(void)
{
	cw_stack(&w, 1, 0, 1, 0); /* main */
	cw_stack(&w, 2, 1, 2, 0); /* main > f */
	cw_stack(&w, 3, 2, 3, 0); /* main > f > g */
	cw_stack(&w, 4, 2, 2, 0); /* main > f > f */
	cw_stack(&w, 5, 4, 3, 0); /* main > f > f > g */
	cw_code(&w, 1, "x.py", "main", 1);
	cw_code(&w, 2, "x.py", "f", 10);
	cw_code(&w, 3, "x.py", "g", 20);
}

/* One thread's locations: its sites only, own and total; a thread with
 * nothing, none. */
START_TEST(test_snapshot_thread_locations)
{
	start(0);
	cw_alloc(&w, 0, MT_ALLOC_MALLOC, 0x10000, 3 * MB, 3);
	cw_alloc(&w, 1, MT_ALLOC_MALLOC, 0x20000, 2 * MB, 2);
	cw_alloc(&w, 1, MT_ALLOC_MALLOC, 0x30000, 1 * MB, 3);
	cw_alloc(&w, 1, MT_ALLOC_MALLOC, 0x40000, 5, 3);
	cw_free(&w, 0, MT_ALLOC_FREE, 0x40000, 0); /* another thread's free */
	main_f_g();
	cw_trailer(&w, 1, 5, 0);
	build();

	struct mt_location *v;
	ssize_t n = mt_snapshot_thread_locations(&snap, MT_VIEW_LEAKS, 0, 0, NULL, &v);
	ck_assert_int_eq(n, 3);
	ck_assert_uint_eq(find_loc(v, n, "g", 20)->own_bytes, 3 * MB);
	ck_assert_uint_eq(find_loc(v, n, "f", 10)->own_bytes, 0);
	ck_assert_uint_eq(find_loc(v, n, "f", 10)->total_bytes, 3 * MB);
	ck_assert_uint_eq(find_loc(v, n, "main", 1)->total_count, 1);
	free(v);

	n = mt_snapshot_thread_locations(&snap, MT_VIEW_LEAKS, 0, 1, NULL, &v);
	ck_assert_int_eq(n, 3);
	ck_assert_uint_eq(find_loc(v, n, "g", 20)->own_bytes, 1 * MB);
	ck_assert_uint_eq(find_loc(v, n, "f", 10)->own_bytes, 2 * MB);
	ck_assert_uint_eq(find_loc(v, n, "main", 1)->total_bytes, 3 * MB);
	ck_assert_uint_eq(find_loc(v, n, "main", 1)->total_count, 2);
	free(v);

	/* what was allocated: thread 1's freed block too */
	n = mt_snapshot_thread_locations(&snap, MT_VIEW_ALLOCATED, 0, 1, NULL, &v);
	ck_assert_uint_eq(find_loc(v, n, "g", 20)->own_bytes, 1 * MB + 5);
	free(v);

	n = mt_snapshot_thread_locations(&snap, MT_VIEW_LEAKS, 0, 7, NULL, &v);
	ck_assert_int_eq(n, 0);
	free(v);

	n = mt_snapshot_thread_locations(&snap, MT_VIEW_LEAKS, 0, MT_ALL_THREADS, NULL, &v);
	ck_assert_uint_eq(find_loc(v, n, "g", 20)->own_bytes, 4 * MB);
	ck_assert_uint_eq(find_loc(v, n, "main", 1)->total_bytes, 6 * MB);
	free(v);
}
END_TEST

/*   main (x.py:1) -> f (x.py:10) -> g (x.py:20) allocates 3 MB, kept
 *   main -> f -> f (recursion) -> g allocates 1 MB, freed
 *   main allocates 100 bytes directly; no-frame allocation 7 bytes.
 * Stack and code records come after the allocations that use them. */
START_TEST(test_snapshot_locations)
{
	start(0);
	cw_alloc(&w, 0, MT_ALLOC_MALLOC, 0x10000, 3 * MB, 3);
	cw_alloc(&w, 0, MT_ALLOC_MALLOC, 0x20000, 1 * MB, 5);
	cw_alloc(&w, 0, MT_ALLOC_MALLOC, 0x30000, 100, 1);
	cw_alloc(&w, 0, MT_ALLOC_MALLOC, 0x40000, 7, 0);
	cw_free(&w, 0, MT_ALLOC_FREE, 0x20000, 0);
	main_f_g();
	cw_trailer(&w, 1, 5, 0);
	build();

	struct mt_location *v;
	ssize_t n = mt_snapshot_locations(&snap, MT_VIEW_PEAK, &v);
	ck_assert_int_eq(n, 4);
	const struct mt_location *g = find_loc(v, n, "g", 20);
	const struct mt_location *f = find_loc(v, n, "f", 10);
	const struct mt_location *m = find_loc(v, n, "main", 1);
	const struct mt_location *z = find_loc(v, n, "<no Python frames>", 0);
	ck_assert_uint_eq(g->own_bytes, 4 * MB);
	ck_assert_uint_eq(g->total_bytes, 4 * MB);
	ck_assert_uint_eq(f->own_bytes, 0);
	ck_assert_uint_eq(f->total_bytes, 4 * MB); /* the recursion counts once */
	ck_assert_uint_eq(f->total_count, 2);
	ck_assert_uint_eq(m->own_bytes, 100);
	ck_assert_uint_eq(m->total_bytes, 4 * MB + 100);
	ck_assert_uint_eq(z->own_bytes, 7);
	qsort(v, (size_t)n, sizeof(*v), mt_location_cmp_total);
	ck_assert_str_eq(v[0].function, "main");
	ck_assert_str_eq(v[1].function, "f");
	free(v);

	n = mt_snapshot_locations(&snap, MT_VIEW_LEAKS, &v);
	g = find_loc(v, n, "g", 20);
	ck_assert_uint_eq(g->own_bytes, 3 * MB);
	ck_assert_uint_eq(g->own_count, 1);
	ck_assert_str_eq(g->file, "x.py");
	free(v);

	struct mt_frame fr[8];
	ck_assert_uint_eq(mt_snapshot_stack(&snap, 5, fr, 8), 4);
	ck_assert_str_eq(fr[0].function, "g");
	ck_assert_str_eq(fr[1].function, "f");
	ck_assert_str_eq(fr[2].function, "f");
	ck_assert_str_eq(fr[3].function, "main");
	ck_assert_uint_eq(mt_snapshot_stack(&snap, 5, fr, 2), 4);
	ck_assert_uint_eq(mt_snapshot_stack(&snap, 0, fr, 8), 0);
	/* undefined stacks resolve to an unknown frame, never crash */
	ck_assert_uint_eq(mt_snapshot_stack(&snap, 99, fr, 8), 1);
	ck_assert_str_eq(fr[0].function, "<unknown>");
	done();
}
END_TEST

START_TEST(test_snapshot_cyclic_trie)
{
	start(0);
	cw_alloc(&w, 0, MT_ALLOC_MALLOC, 0x1000, 10, 1);
	cw_stack(&w, 1, 2, 1, 0);
	cw_stack(&w, 2, 1, 1, 0);
	cw_code(&w, 1, "x.py", "loop", 1);
	build();
	struct mt_location *v;
	ssize_t n = mt_snapshot_locations(&snap, MT_VIEW_LEAKS, &v);
	ck_assert_int_eq(n, 1);
	free(v);
	struct mt_frame fr[4];
	ck_assert_uint_gt(mt_snapshot_stack(&snap, 1, fr, 4), 0);
	done();
}
END_TEST

START_TEST(test_snapshot_samples_diags)
{
	start(0);
	cw_sample(&w, 10000, 5 * MB);
	cw_alloc(&w, 0, MT_ALLOC_MALLOC, 0x1000, MB, 0);
	cw_sample(&w, 20000, 9 * MB);
	cw_sample(&w, 30000, 7 * MB);
	cw_diag(&w, MT_DIAG_TRACKING_DISABLED, "write failed");
	cw_trailer(&w, 40000, 1, 12);
	build();
	ck_assert_uint_eq(snap.n_samples, 3);
	ck_assert_uint_eq(snap.samples[1].heap, MB);
	ck_assert_uint_eq(snap.peak_rss, 9 * MB);
	ck_assert_uint_eq(snap.peak_rss_time_us, 20000);
	ck_assert_uint_eq(snap.peak_time_us, 10000);
	ck_assert_uint_eq(snap.n_diags, 1);
	ck_assert_str_eq(snap.diags[0].msg, "write failed");
	ck_assert_uint_eq(snap.n_dropped, 12);
	ck_assert_uint_eq(snap.end_time_us, 40000);
	done();
}
END_TEST

/* Locations of a random trie (few functions, so that they recur along a
 * path) against the definition: each stack with memory adds to the total
 * of every distinct location on its path, once. */
#define LT_STACKS 400
#define LT_LOCS 7

START_TEST(test_snapshot_locations_random)
{
	uint32_t seed = 0x9e3779b9u * (uint32_t)(_i + 1), parent[LT_STACKS + 1];
	uint64_t own[LT_STACKS + 1] = { 0 };
	start(0);
	for (int c = 1; c <= 3; c++)
		cw_code(&w, (uint32_t)c, "r.py", c == 1 ? "a" : c == 2 ? "b" : "c", 10 * c);
	for (uint32_t id = 1; id <= LT_STACKS; id++) {
		seed = seed * 1103515245u + 12345u;
		parent[id] = id == 1 || (seed >> 16) % 5 == 0 ? 0 : 1 + (seed >> 8) % (id - 1);
		seed = seed * 1103515245u + 12345u;
		/* code 1..3, and 4 (undefined: an unknown frame) now and then */
		uint32_t code = 1 + (seed >> 16) % 4, off = 2 * ((seed >> 4) % 2);
		cw_stack(&w, id, parent[id], code, off);
	}
	for (int i = 0; i < 600; i++) {
		seed = seed * 1103515245u + 12345u;
		uint32_t id = (seed >> 12) % (LT_STACKS + 1);
		uint64_t size = 1 + (seed >> 4) % 1000;
		cw_alloc(&w, 0, MT_ALLOC_MALLOC, 0x100000 + 0x1000 * (uint64_t)i, size, id);
		own[id] += size;
	}
	cw_trailer(&w, 1, 600, 0);
	build();

	struct mt_location *v;
	ssize_t n = mt_snapshot_locations(&snap, MT_VIEW_PEAK, &v);
	ck_assert_int_gt(n, 0);
	uint64_t want_own[LT_STACKS + 1] = { 0 }, want_total[LT_STACKS + 1] = { 0 };
	for (uint32_t id = 1; id <= LT_STACKS; id++) {
		if (!own[id])
			continue;
		struct mt_frame fr[LT_STACKS + 1];
		size_t depth = mt_snapshot_stack(&snap, id, fr, LT_STACKS + 1);
		ssize_t seen[LT_STACKS + 1];
		for (size_t d = 0; d < depth; d++) {
			ssize_t k = -1;
			for (ssize_t j = 0; j < n; j++)
				if (v[j].function == fr[d].function && v[j].file == fr[d].file &&
				    v[j].line == fr[d].line)
					k = j;
			ck_assert_int_ge(k, 0);
			int dup = 0;
			for (size_t e = 0; e < d; e++)
				dup |= seen[e] == k;
			seen[d] = k;
			if (d == 0)
				want_own[k] += own[id];
			if (!dup)
				want_total[k] += own[id];
		}
	}
	for (ssize_t j = 0; j < n; j++) {
		if (!strcmp(v[j].function, "<no Python frames>")) {
			ck_assert_uint_eq(v[j].own_bytes, own[0]);
			ck_assert_uint_eq(v[j].total_bytes, own[0]);
			continue;
		}
		ck_assert_uint_eq(v[j].own_bytes, want_own[j]);
		ck_assert_uint_eq(v[j].total_bytes, want_total[j]);
	}
	ck_assert_int_le(n, LT_LOCS);
	free(v);
	done();
}
END_TEST

/* ------------------------------------------------------------------------
 * Brute force: replay random events into a direct model and copy its
 * per-stack state at every new peak.
 * ---------------------------------------------------------------------- */
#define SLOTS 64
#define PAGES 48
#define STACKS 6
#define THREADS 3

struct model {
	uint64_t size[SLOTS];
	int stack[SLOTS], thread[SLOTS], live[SLOTS];
	int pstack[PAGES], pthread[PAGES], porigin[PAGES]; /* porigin -1 = unmapped */
};

struct agg {
	uint64_t bytes[STACKS], count[STACKS], tbytes[THREADS];
	uint64_t heap;
};

static void model_agg(const struct model *m, struct agg *a)
{
	memset(a, 0, sizeof(*a));
	for (int i = 0; i < SLOTS; i++) {
		if (!m->live[i])
			continue;
		a->bytes[m->stack[i]] += m->size[i];
		a->count[m->stack[i]]++;
		a->tbytes[m->thread[i]] += m->size[i];
		a->heap += m->size[i];
	}
	for (int p = 0; p < PAGES; p++) {
		if (m->porigin[p] < 0)
			continue;
		a->bytes[m->pstack[p]] += PAGE;
		a->tbytes[m->pthread[p]] += PAGE;
		a->heap += PAGE;
		int first = 1; /* count each origin once */
		for (int q = 0; q < p; q++)
			if (m->porigin[q] == m->porigin[p])
				first = 0;
		if (first)
			a->count[m->pstack[p]]++;
	}
}

START_TEST(test_snapshot_brute_force)
{
	const uint64_t MBASE = 0x100000, PBASE = 0x7f0000000000ull;
	uint64_t seed = 0x9E3779B97F4A7C15ull * (uint64_t)(_i + 1);
	struct model m;
	struct agg peak = { 0 }, now;
	int origin = 0;

	memset(&m, 0, sizeof(m));
	for (int p = 0; p < PAGES; p++)
		m.porigin[p] = -1;
	start(0);
#define RND() (seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17, seed)
	for (int ev = 0; ev < 4000; ev++) {
		int what = (int)(RND() % 10);
		int st = (int)(RND() % STACKS), th = (int)(RND() % THREADS);
		int is_alloc = 0;
		if (what < 4) { /* malloc into a free slot */
			int s = (int)(RND() % SLOTS);
			if (m.live[s])
				continue;
			m.live[s] = 1;
			m.size[s] = RND() % 5000;
			m.stack[s] = st;
			m.thread[s] = th;
			cw_alloc(&w, (uint32_t)th, MT_ALLOC_MALLOC, MBASE + (uint64_t)s * 0x10000, m.size[s],
				 (uint32_t)st);
			is_alloc = 1;
		} else if (what < 6) { /* free, maybe of an unknown pointer */
			int s = (int)(RND() % SLOTS);
			cw_free(&w, (uint32_t)th, MT_ALLOC_FREE, MBASE + (uint64_t)s * 0x10000, 0);
			m.live[s] = 0;
		} else if (what < 7) { /* realloc of a live block */
			int s = (int)(RND() % SLOTS), d = (int)(RND() % SLOTS);
			if (!m.live[s] || (m.live[d] && d != s))
				continue;
			cw_free(&w, (uint32_t)th, MT_ALLOC_FREE, MBASE + (uint64_t)s * 0x10000, 0);
			m.live[s] = 0;
			m.live[d] = 1;
			m.size[d] = RND() % 9000;
			m.stack[d] = st;
			m.thread[d] = th;
			cw_alloc(&w, (uint32_t)th, MT_ALLOC_REALLOC, MBASE + (uint64_t)d * 0x10000,
				 m.size[d], (uint32_t)st);
			is_alloc = 1;
		} else if (what < 8) { /* mmap, possibly over live pages */
			int p = (int)(RND() % PAGES), l = 1 + (int)(RND() % 6);
			if (p + l > PAGES)
				l = PAGES - p;
			for (int q = p; q < p + l; q++) {
				m.porigin[q] = origin;
				m.pstack[q] = st;
				m.pthread[q] = th;
			}
			origin++;
			cw_alloc(&w, (uint32_t)th, MT_ALLOC_MMAP, PBASE + (uint64_t)p * PAGE,
				 (uint64_t)l * PAGE, (uint32_t)st);
			is_alloc = 1;
		} else { /* munmap of any range; lengths not page multiples round up */
			int p = (int)(RND() % PAGES), l = 1 + (int)(RND() % 12);
			if (p + l > PAGES)
				l = PAGES - p;
			uint64_t len = (uint64_t)l * PAGE - (RND() % 2 ? 1000 : 0);
			for (int q = p; q < p + l; q++)
				m.porigin[q] = -1;
			cw_free(&w, (uint32_t)th, MT_ALLOC_MUNMAP, PBASE + (uint64_t)p * PAGE, len);
		}
		if (is_alloc) {
			model_agg(&m, &now);
			if (now.heap >= peak.heap)
				peak = now;
		}
	}
	build();
	model_agg(&m, &now);
	ck_assert_uint_eq(snap.peak_heap, peak.heap);
	ck_assert_uint_eq(snap.heap_end, now.heap);
	for (uint32_t s = 0; s < STACKS; s++) {
		struct mt_usage u = mt_snapshot_stack_usage(&snap, s);
		ck_assert_uint_eq(u.peak_bytes, peak.bytes[s]);
		ck_assert_uint_eq(u.peak_count, peak.count[s]);
		ck_assert_uint_eq(u.leak_bytes, now.bytes[s]);
		ck_assert_uint_eq(u.leak_count, now.count[s]);
	}
	for (size_t t = 0; t < snap.n_threads; t++) {
		uint32_t i = snap.threads[t].index;
		ck_assert_uint_eq(snap.threads[t].usage.peak_bytes, peak.tbytes[i]);
		ck_assert_uint_eq(snap.threads[t].usage.leak_bytes, now.tbytes[i]);
	}
	done();
}
END_TEST

/* MT_BENCH_EVENTS=10000000 CK_FORK=no CK_RUN_CASE=bench ./test-snapshot */
START_TEST(test_snapshot_bench)
{
	const char *env = getenv("MT_BENCH_EVENTS");
	uint64_t n = env ? strtoull(env, NULL, 10) : 200000;
	uint64_t seed = 12345, live_n = 0;
	enum { LIVE = 1 << 17 };
	static uint64_t live[LIVE];
	struct timespec t0, t1;
	struct mt_header h = cw_header(0);

	cw_init(&w, &h, MT_CHUNK_RAW_MAX, 1);
	for (uint32_t i = 1; i <= 200; i++) {
		cw_code(&w, i, "/usr/lib/python3/some/module.py", "Class.method", i);
		cw_stack(&w, i, i / 2, i, i * 2);
	}
	uint64_t next = 0x55550000000ull;
	for (uint64_t ev = 0; ev < n; ev++) {
		uint64_t r = RND();
		uint32_t th = (uint32_t)(r >> 60) & 3;
		if (live_n == LIVE || (live_n > 1000 && (r & 1))) {
			uint64_t k = (r >> 8) % live_n;
			cw_free(&w, th, MT_ALLOC_FREE, live[k], 0);
			live[k] = live[--live_n];
		} else {
			next += 16 + ((r >> 20) & 0x3f0);
			live[live_n++] = next;
			cw_alloc(&w, th, MT_ALLOC_MALLOC, next, (r >> 32) & 0xfff, (uint32_t)(r >> 40) % 200);
		}
	}
	cw_trailer(&w, 1, n, 0);
	cw_finish(&w);
	struct mt_capture *c;
	struct mt_record_ops none = { 0 };
	ck_assert_int_eq(mt_capture_open_mem(w.buf, w.len, &c), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	ck_assert_int_eq(mt_capture_read(c, &none, NULL), 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double p = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	ck_assert_int_eq(mt_snapshot_build(&snap, c), 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	mt_capture_close(c);
	double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	ck_assert_uint_eq(snap.n_events, n);
	if (env)
		fprintf(stderr,
			"bench: %llu events, %.1f MB capture; parse only %.3f s (%.1f M events/s); "
			"parse+snapshot %.3f s (%.1f M events/s)\n",
			(unsigned long long)n, (double)w.len / 1e6, p, (double)n / p / 1e6, s,
			(double)n / s / 1e6);
	done();
}
END_TEST

static Suite *snapshot_suite(void)
{
	Suite *s = suite_create("snapshot");
	TCase *tc = tcase_create("snapshot");

	tcase_add_test(tc, test_snapshot_peak_exact);
	tcase_add_test(tc, test_snapshot_peak_latest_wins);
	tcase_add_test(tc, test_snapshot_realloc_and_unknown_frees);
	tcase_add_test(tc, test_snapshot_munmap_ranges);
	tcase_add_test(tc, test_snapshot_threads);
	tcase_add_test(tc, test_snapshot_reused_tid);
	tcase_add_test(tc, test_snapshot_locations);
	tcase_add_test(tc, test_snapshot_thread_locations);
	tcase_add_loop_test(tc, test_snapshot_locations_random, 0, 20);
	tcase_add_test(tc, test_snapshot_cyclic_trie);
	tcase_add_test(tc, test_snapshot_samples_diags);
	tcase_add_loop_test(tc, test_snapshot_brute_force, 0, 20);
	suite_add_tcase(s, tc);

	tc = tcase_create("many threads");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_snapshot_million_threads);
	suite_add_tcase(s, tc);

	tc = tcase_create("bench");
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_snapshot_bench);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(snapshot_suite());
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
