/* SPDX-License-Identifier: MIT */
/* A snapshot fed a growing capture a part at a time (mt_capture_follow(),
 * mt_snapshot_feed(), mt_snapshot_view()): after every part, each of its
 * figures equals those of a snapshot built at once from the same bytes,
 * for parts cut anywhere (inside a chunk too: the part of a chunk is
 * waited for), and at the end its growth series too; with native stacks
 * also, resolved at every view. */
#include "format/error.h"
#include "reader/growth.h"
#include "reader/snapshot.h"

#include "capture-writer.h"

#include <check.h>
#include <errno.h>  /* EBUSY */
#include <fcntl.h>  /* open */
#include <stdio.h>  /* snprintf */
#include <stdlib.h> /* EXIT_SUCCESS */
#include <string.h> /* strcmp */
#include <unistd.h> /* write */

#define N_STACKS 30
#define N_CODES 5
#define SLOTS 64
#define PAGE 4096ull

static struct cw w;
static char path[64];

/* zlib's CRC-32, as the Tracker's root hash takes it (stacks.h) */
static uint32_t crc32_of(const char *s)
{
	uint32_t c = 0xFFFFFFFFu;
	for (; *s; s++) {
		c ^= (uint8_t)*s;
		for (int b = 0; b < 8; b++)
			c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
	}
	return c ^ 0xFFFFFFFFu;
}

static const char *code_file(uint32_t code)
{
	static char f[N_CODES + 1][32];
	snprintf(f[code], sizeof(f[code]), "/app/mod%u.py", code);
	return f[code];
}

/* Native stacks: a module (a file that is not there: frames of module
 * and offset) and a trie of return addresses, some in no module. */
#define NATIVE_ID 100 /* the first NATIVE id */
#define N_NATIVE 60
#define HYBRID_ID 1000 /* the first HYBRID id */
#define N_HYBRID 80
#define MOD_BASE 0x400000ull

static void cw_module(struct cw *cw)
{
	struct mt_record r = { .type = MT_REC_MODULE };
	r.module.gen = 1;
	r.module.bias = MOD_BASE;
	r.module.path = cw_str("/nonexistent/libmt-feed.so");
	r.module.build_id = cw_str("");
	r.module.nsegs = 1;
	r.module.seg_vaddr[0] = 0;
	r.module.seg_memsz[0] = 0x100000;
	cw_rec(cw, &r);
}

static void cw_native(struct cw *cw, uint32_t id, uint32_t parent, uint64_t ip)
{
	struct mt_record r = { .type = MT_REC_NATIVE };
	r.native = (struct mt_rec_native){ id, parent, ip };
	cw_rec(cw, &r);
}

static void cw_hybrid(struct cw *cw, uint32_t id, uint32_t python, uint32_t native)
{
	struct mt_record r = { .type = MT_REC_HYBRID };
	r.hybrid = (struct mt_rec_hybrid){ id, python, native };
	cw_rec(cw, &r);
}

/* A capture of random events over a trie defined as it goes (some stacks
 * used before their definition), three threads, samples, and a Tracker
 * root at stack 1 (depth 1) whose children are cut from it; with
 * @native, native nodes and hybrid stacks defined as it goes too, which
 * half the allocations name. */
static void make_capture(uint64_t seed, int events, int native)
{
	struct mt_header h = cw_header(native ? MT_HDR_NATIVE : 0);
	uint64_t live[SLOTS] = { 0 };
	uint32_t n_native = 0, n_hybrid = 0;
	char root[64];

	cw_init(&w, &h, 300, 1);
	if (native)
		cw_module(&w);
	for (uint32_t t = 0; t < 3; t++)
		cw_thread(&w, t, 100 + t, t ? "worker" : "main");
	for (uint32_t c = 1; c <= N_CODES; c++)
		cw_code(&w, c, code_file(c), "f", 10 * c);
	/* stack 1: code 1, line 10, outermost */
	snprintf(root, sizeof(root), "1 %llx",
		 (unsigned long long)(crc32_of(code_file(1)) ^ (10ull * 0x9E3779B1u)));
	cw_diag(&w, MT_DIAG_TRACKER_ROOT, root);
	cw_stack(&w, 1, 0, 1, 0);
#define RND() (seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17, seed)
	uint32_t defined = 1;
	for (int ev = 0; ev < events; ev++) {
		if (ev % 37 == 0 && defined < N_STACKS) {
			defined++;
			uint32_t parent = defined <= 4 ? 1 : (uint32_t)(RND() % defined);
			cw_stack(&w, defined, parent, 1 + (uint32_t)(RND() % N_CODES), 0);
		}
		if (ev % 50 == 0)
			cw_sample(&w, 1000 + (uint64_t)ev * 10, (uint64_t)ev * PAGE);
		if (native && ev % 23 == 0 && n_native < N_NATIVE) {
			uint32_t parent = n_native ? NATIVE_ID + (uint32_t)(RND() % n_native) : 0;
			uint64_t ip = RND() % 8 ? MOD_BASE + 1 + RND() % 0x100000 : 0x1000 + RND() % 64;
			cw_native(&w, NATIVE_ID + n_native++, RND() % 4 ? parent : 0, ip);
		}
		if (native && ev % 29 == 0 && n_native && n_hybrid < N_HYBRID) {
			uint32_t py = RND() % 3 ? 0 : (uint32_t)(RND() % (defined + 1));
			cw_hybrid(&w, HYBRID_ID + n_hybrid++, py,
				  NATIVE_ID + (uint32_t)(RND() % n_native));
		}
		uint32_t th = (uint32_t)(RND() % 3), stack = (uint32_t)(RND() % (N_STACKS + 1));
		if (native && n_hybrid && RND() % 2)
			stack = HYBRID_ID + (uint32_t)(RND() % (n_hybrid + 2)); /* some not yet defined */
		int s = (int)(RND() % SLOTS), what = (int)(RND() % 10);
		uint64_t addr = 0x100000 + (uint64_t)s * 0x10000;
		if (what < 5 && !live[s]) {
			live[s] = 1 + RND() % 5000;
			cw_alloc(&w, th, MT_ALLOC_MALLOC, addr, live[s], stack);
		} else if (what < 8) {
			cw_free(&w, th, MT_ALLOC_FREE, addr, 0);
			live[s] = 0;
		} else if (what < 9) {
			cw_alloc(&w, th, MT_ALLOC_MMAP, 0x7f0000000000ull + (uint64_t)s * 4 * PAGE,
				 (1 + RND() % 3) * PAGE, stack);
		} else {
			cw_free(&w, th, MT_ALLOC_MUNMAP, 0x7f0000000000ull + (uint64_t)s * 4 * PAGE,
				PAGE);
		}
	}
	cw_trailer(&w, 1000 + (uint64_t)events * 10, (uint64_t)events, 0);
	cw_finish(&w);
}

static void same_usage(const struct mt_usage *a, const struct mt_usage *b)
{
	ck_assert_mem_eq(a, b, sizeof(*a));
}

/* every figure of @a (fed in parts) against @b (built at once) */
static void same_snapshot(const struct mt_snapshot *a, const struct mt_snapshot *b)
{
	ck_assert_uint_eq(a->n_events, b->n_events);
	ck_assert_uint_eq(a->n_allocs, b->n_allocs);
	ck_assert_uint_eq(a->n_frees, b->n_frees);
	ck_assert_uint_eq(a->n_unmatched_frees, b->n_unmatched_frees);
	ck_assert_uint_eq(a->bytes_allocated, b->bytes_allocated);
	ck_assert_uint_eq(a->bytes_freed, b->bytes_freed);
	ck_assert_mem_eq(a->by_allocator_count, b->by_allocator_count, sizeof(a->by_allocator_count));
	ck_assert_mem_eq(a->by_allocator_bytes, b->by_allocator_bytes, sizeof(a->by_allocator_bytes));
	ck_assert_mem_eq(a->size_hist, b->size_hist, sizeof(a->size_hist));
	ck_assert_uint_eq(a->heap_end, b->heap_end);
	ck_assert_uint_eq(a->peak_heap, b->peak_heap);
	ck_assert_uint_eq(a->peak_event, b->peak_event);
	ck_assert_uint_eq(a->peak_time_us, b->peak_time_us);
	ck_assert_uint_eq(a->leak_count, b->leak_count);
	ck_assert_uint_eq(a->peak_rss, b->peak_rss);
	ck_assert_uint_eq(a->n_samples, b->n_samples);
	if (a->n_samples)
		ck_assert_mem_eq(a->samples, b->samples, a->n_samples * sizeof(*a->samples));
	ck_assert_uint_eq(a->n_diags, b->n_diags);
	ck_assert_int_eq(a->have_trailer, b->have_trailer);
	ck_assert_uint_eq(a->end_time_us, b->end_time_us);
	ck_assert_uint_eq(a->temp_bytes, b->temp_bytes);
	ck_assert_uint_eq(a->temp_count, b->temp_count);
	ck_assert_uint_eq(a->status.n_chunks, b->status.n_chunks);
	ck_assert_uint_eq(a->status.n_records, b->status.n_records);
	ck_assert_uint_eq(a->status.end_offset, b->status.end_offset);
	ck_assert_int_eq(a->status.truncated, b->status.truncated);
	ck_assert_int_eq(a->status.stopped, b->status.stopped);
	ck_assert_uint_eq(a->n_threads, b->n_threads);
	for (size_t i = 0; i < a->n_threads; i++) {
		ck_assert_uint_eq(a->threads[i].index, b->threads[i].index);
		ck_assert_uint_eq(a->threads[i].tid, b->threads[i].tid);
		ck_assert_str_eq(a->threads[i].name, b->threads[i].name);
		same_usage(&a->threads[i].usage, &b->threads[i].usage);
	}
	const struct mt_site *sa, *sb;
	size_t na = mt_snapshot_sites(a, &sa), nb = mt_snapshot_sites(b, &sb);
	ck_assert_uint_eq(na, nb);
	for (size_t i = 0; i < na; i++) {
		ck_assert_uint_eq(sa[i].stack, sb[i].stack);
		ck_assert_uint_eq(sa[i].thread, sb[i].thread);
		ck_assert_uint_eq(sa[i].allocator, sb[i].allocator);
		ck_assert_uint_eq(sa[i].first_addr, sb[i].first_addr);
		same_usage(&sa[i].usage, &sb[i].usage);
	}
	ck_assert_uint_eq(mt_snapshot_max_stack(a), mt_snapshot_max_stack(b));
	for (uint32_t id = 0; id <= mt_snapshot_max_stack(a); id++) {
		struct mt_usage ua = mt_snapshot_stack_usage(a, id), ub = mt_snapshot_stack_usage(b, id);
		same_usage(&ua, &ub);
		struct mt_frame fa[64], fb[64];
		size_t da = mt_snapshot_stack(a, id, fa, 64), db = mt_snapshot_stack(b, id, fb, 64);
		ck_assert_uint_eq(da, db);
		for (size_t k = 0; k < da && k < 64; k++) {
			ck_assert_str_eq(fa[k].function, fb[k].function);
			ck_assert_str_eq(fa[k].file, fb[k].file);
			ck_assert_int_eq(fa[k].line, fb[k].line);
		}
	}
}

static void save_prefix(size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, w.buf, len), (ssize_t)len);
	close(fd);
}

/* append w.buf[from, to) to the file */
static void append(size_t from, size_t to)
{
	int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, w.buf + from, to - from), (ssize_t)(to - from));
	close(fd);
}

/* a snapshot built at once from the file as it is now */
static void build_now(struct mt_snapshot *s, int growth)
{
	struct mt_snapshot_opts o = { .temp_threshold = 1, .growth = growth };
	struct mt_capture *c;
	ck_assert_int_eq(mt_capture_open(path, &c), 0);
	ck_assert_int_eq(mt_snapshot_build_opts(s, c, &o), 0);
	mt_capture_close(c);
}

static const int parts[] = { 1, 2, 3, 7, 50 };

/* @k parts of a capture (@native: with native stacks) of seed @i */
static void feed_equals_build(int i, int k, int native)
{
	struct mt_snapshot_opts o = { .temp_threshold = 1, .growth = 1 };
	struct mt_snapshot inc, once;
	struct mt_capture *c;

	snprintf(path, sizeof(path), "/tmp/mt-feed-%d-%d.bin", (int)getpid(), i);
	make_capture(0x9E3779B97F4A7C15ull * (uint64_t)(i + 1), 3000, native);
	ck_assert_uint_gt(w.n_chunks, 60);
	size_t hdr = MT_HDR_FIXED + cw_header(0).cmdline.len, done = 0;
	for (int p = 1; p <= k; p++) {
		/* parts end anywhere, mostly inside a chunk */
		size_t to = p == k ? w.len : hdr + (w.len - hdr) * (size_t)p / (size_t)k + 7;
		if (p == 1) {
			save_prefix(to);
			ck_assert_int_eq(mt_capture_open(path, &c), 0);
			ck_assert_int_eq(mt_snapshot_begin(&inc, c, &o), 0);
		} else {
			append(done, to);
			ck_assert_int_eq(mt_capture_follow(c), 1);
		}
		done = to;
		uint64_t before = inc.status.n_chunks;
		ck_assert_int_eq(mt_snapshot_feed(&inc, c), 0);
		ck_assert_uint_gt(inc.status.n_chunks, before);
		ck_assert_int_eq(inc.status.stopped, 0);
		/* nothing new: nothing read */
		ck_assert_int_eq(mt_capture_follow(c), 0);
		ck_assert_int_eq(mt_snapshot_feed(&inc, c), 0);
		if (p == k) {
			ck_assert_int_eq(mt_snapshot_end(&inc), 0);
			ck_assert_int_eq(mt_snapshot_feed(&inc, c), -EBUSY);
		} else {
			ck_assert_int_eq(mt_snapshot_view(&inc), 0);
			ck_assert_int_eq(inc.status.truncated, 1);
			ck_assert_ptr_null(mt_snapshot_growth(&inc));
		}
		build_now(&once, p == k);
		same_snapshot(&inc, &once);
		if (p == k) {
			const struct mt_growth *ga = mt_snapshot_growth(&inc);
			const struct mt_growth *gb = mt_snapshot_growth(&once);
			ck_assert_ptr_nonnull(ga);
			ck_assert_ptr_nonnull(gb);
			ck_assert_uint_eq(mt_growth_points(ga), mt_growth_points(gb));
			for (uint32_t id = 0; id <= N_STACKS; id++) {
				struct mt_growth_row ra, rb;
				mt_growth_row_of(ga, id, &ra);
				mt_growth_row_of(gb, id, &rb);
				ck_assert_mem_eq(&ra, &rb, sizeof(ra));
			}
			ck_assert_int_eq(inc.have_trailer, 1);
			ck_assert_int_eq(inc.status.truncated, 0);
		}
		mt_snapshot_release(&once);
	}
	/* the Tracker's root was cut, also from the stacks defined after
	 * the first view: stack 2 (a child of 1) is one frame deep */
	struct mt_frame f[4];
	ck_assert_uint_eq(mt_snapshot_stack(&inc, 2, f, 4), 1);
	if (native) {
		/* hybrid stacks with native frames and none: defined by parts
		 * read after views, and by views (same_snapshot()) */
		int with = 0, without = 0;
		for (uint32_t id = HYBRID_ID; id < HYBRID_ID + N_HYBRID; id++) {
			struct mt_usage u = mt_snapshot_stack_usage(&inc, id);
			if (!u.alloc_count || !mt_snapshot_stack(&inc, id, f, 1))
				continue;
			with += f[0].native;
			without += !f[0].native;
		}
		ck_assert_int_gt(with, 5);
		ck_assert_int_gt(without, 5);
	}
	mt_snapshot_release(&inc);
	mt_capture_close(c);
	unlink(path);
	cw_release(&w);
}

START_TEST(test_feed_equals_build)
{
	feed_equals_build(_i, parts[_i % 5], 0);
}
END_TEST

/* Native stacks resolved at every view, the next feed reading more. */
START_TEST(test_native_feed_equals_build)
{
	feed_equals_build(_i, parts[_i % 5], 1);
}
END_TEST

/* A file that shrank, or whose header changed, is another capture. */
START_TEST(test_follow_replaced)
{
	struct mt_capture *c;

	snprintf(path, sizeof(path), "/tmp/mt-feed-%d-r.bin", (int)getpid());
	make_capture(7, 500, 0);
	save_prefix(w.len);
	ck_assert_int_eq(mt_capture_open(path, &c), 0);
	ck_assert_int_eq(mt_capture_follow(c), 0);
	save_prefix(w.len / 2);
	ck_assert_int_eq(mt_capture_follow(c), -MT_EREPLACED);
	mt_capture_close(c);

	ck_assert_int_eq(mt_capture_open(path, &c), 0);
	w.buf[16] ^= 1; /* the header's pid */
	save_prefix(w.len);
	ck_assert_int_eq(mt_capture_follow(c), -MT_EREPLACED);
	mt_capture_close(c);

	ck_assert_int_eq(mt_capture_open_mem(w.buf, w.len, &c), 0);
	ck_assert_int_eq(mt_capture_follow(c), -EINVAL);
	mt_capture_close(c);
	unlink(path);
	cw_release(&w);
}
END_TEST

static Suite *feed_suite(void)
{
	Suite *s = suite_create("snapshot_feed");
	TCase *tc = tcase_create("feed");

	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_feed_equals_build, 0, 10);
	tcase_add_loop_test(tc, test_native_feed_equals_build, 0, 10);
	tcase_add_test(tc, test_follow_replaced);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(feed_suite());
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
