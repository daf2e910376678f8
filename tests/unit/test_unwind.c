/* SPDX-License-Identifier: MIT */
/*
 * The unwinder of payload/unwind.c against libunwind's unw_backtrace(),
 * through stacks of frames of every shape the compiler makes: frames kept
 * by rsp, by rbp (alloca, frame pointers), big ones, threads', in random
 * orders; and the frames it leaves to libunwind (a signal frame, a CFA
 * too far or in another register) make it fail, not guess.
 */
#include "payload/unwind.h"

#if !defined(__x86_64__)
int main(void)
{
	return 77; /* skipped: the unwinder is x86-64's */
}
#else
#include <alloca.h>
#include <check.h>
#include <libunwind.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define DEPTH_MAX 512

struct both {
	uintptr_t own[DEPTH_MAX];
	void *lib[DEPTH_MAX];
	long nown;
	int nlib;
};

/* The thread's own cache of rules, in front of the shared one, as the
 * payload's threads have it: every test below reads through it. */
static __thread struct mt_unwind_local mine;

/* Both unwinders from the same frame: their first addresses are the two
 * calls here, the rest must be the same. */
void unwind_capture(struct both *b);
#define capture unwind_capture
__attribute__((noinline)) void unwind_capture(struct both *b)
{
	b->nown = mt_unwind(b->own, DEPTH_MAX, NULL, &mine);
	b->nlib = unw_backtrace(b->lib, DEPTH_MAX);
	__asm__ volatile("" ::: "memory");
}

static void assert_same(const struct both *b)
{
	ck_assert_int_ge(b->nown, 2);
	ck_assert_int_eq(b->nown, b->nlib);
	for (long i = 1; i < b->nown; i++)
		ck_assert_msg(b->own[i] == (uintptr_t)b->lib[i], "frame %ld of %ld: %#lx, libunwind %p",
			      i, b->nown, (unsigned long)b->own[i], b->lib[i]);
}

/* Frames of several shapes, calling one another in the order @seq gives. */
typedef int (*shape_fn)(struct both *b, const uint8_t *seq, int n);
static int next(struct both *b, const uint8_t *seq, int n);

static __attribute__((noinline)) int plain(struct both *b, const uint8_t *seq, int n)
{
	volatile int x = n;
	return next(b, seq + 1, n - 1) + x;
}

static __attribute__((noinline)) int with_alloca(struct both *b, const uint8_t *seq, int n)
{
	volatile char *p = alloca(16 + (size_t)(seq[0] & 0x70));
	p[0] = (char)n;
	return next(b, seq + 1, n - 1) + p[0];
}

static __attribute__((noinline, optimize("no-omit-frame-pointer"))) int
with_frame_pointer(struct both *b, const uint8_t *seq, int n)
{
	volatile int x = n;
	return next(b, seq + 1, n - 1) + x;
}

static __attribute__((noinline)) int big(struct both *b, const uint8_t *seq, int n)
{
	volatile char buf[20000];
	buf[n] = (char)n;
	return next(b, seq + 1, n - 1) + buf[n];
}

static __attribute__((noinline)) int many_saved(struct both *b, const uint8_t *seq, int n)
{
	/* enough live values across the call to save callee-saved registers */
	volatile int a0 = n, a1 = n + 1, a2 = n + 2;
	int r0 = a0 * 3, r1 = a1 * 5, r2 = a2 * 7, r3 = a0 ^ a1, r4 = a1 ^ a2;
	int v = next(b, seq + 1, n - 1);
	return v + r0 + r1 + r2 + r3 + r4;
}

static const shape_fn shapes[] = { plain, with_alloca, with_frame_pointer, big, many_saved };
#define NSHAPES (sizeof(shapes) / sizeof(shapes[0]))

static int next(struct both *b, const uint8_t *seq, int n)
{
	if (n == 0) {
		capture(b);
		return 0;
	}
	return shapes[seq[0] % NSHAPES](b, seq, n);
}

START_TEST(test_every_shape_as_libunwind)
{
	struct both *b = calloc(1, sizeof(*b));
	ck_assert_ptr_nonnull(b);
	ck_assert_int_eq(mt_unwind_init(), 0);
	for (unsigned s = 0; s < NSHAPES; s++) {
		uint8_t seq[8];
		memset(seq, (int)s, sizeof(seq));
		next(b, seq, 6);
		assert_same(b);
	}
	free(b);
}
END_TEST

START_TEST(test_random_stacks_as_libunwind)
{
	struct both *b = calloc(1, sizeof(*b));
	uint8_t seq[64];
	srand(7);
	ck_assert_int_eq(mt_unwind_init(), 0);
	for (int round = 0; round < 300; round++) {
		for (size_t i = 0; i < sizeof(seq); i++)
			seq[i] = (uint8_t)rand();
		next(b, seq, 1 + rand() % 48);
		assert_same(b);
	}
	free(b);
}
END_TEST

START_TEST(test_stops_where_libunwind_stops)
{
	struct both *b = calloc(1, sizeof(*b));
	ck_assert_int_eq(mt_unwind_init(), 0);
	/* as deep as room allows: both stop at the end of room */
	uint8_t seq[DEPTH_MAX + 8];
	memset(seq, 0, sizeof(seq));
	next(b, seq, DEPTH_MAX + 4);
	ck_assert_int_eq(b->nown, DEPTH_MAX);
	assert_same(b);
	/* a short room: the innermost ones */
	uintptr_t few[3];
	ck_assert_int_eq(mt_unwind(few, 3, NULL, NULL), 3);
	ck_assert_int_eq(mt_unwind(few, 0, NULL, NULL), 0);
	free(b);
}
END_TEST

static void *thread_main(void *arg)
{
	uint8_t seq[16] = { 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0 };
	next(arg, seq, 10);
	return NULL;
}

START_TEST(test_threads_stack_ends_as_libunwind)
{
	struct both *b = calloc(1, sizeof(*b));
	pthread_t t;
	ck_assert_int_eq(mt_unwind_init(), 0);
	ck_assert_int_eq(pthread_create(&t, NULL, thread_main, b), 0);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	assert_same(b);
	free(b);
}
END_TEST

static struct both *in_handler;

static void handler(int sig)
{
	(void)sig;
	uint8_t seq[4] = { 0, 1, 2, 3 };
	next(in_handler, seq, 3);
}

START_TEST(test_signal_frame_left_to_libunwind)
{
	in_handler = calloc(1, sizeof(*in_handler));
	ck_assert_int_eq(mt_unwind_init(), 0);
	signal(SIGUSR1, handler);
	raise(SIGUSR1);
	signal(SIGUSR1, SIG_DFL);
	/* libunwind goes through the kernel's frame; we do not */
	ck_assert_int_eq(in_handler->nown, -1);
	ck_assert_int_gt(in_handler->nlib, 6);
	free(in_handler);
}
END_TEST

/* Frames whose rules the cache has no room for, written out so that
 * every compiler makes them alike: a CFA too far above rsp, and a CFA
 * kept in r12; and one whose return address has no rule. Each calls
 * capture() (or unwind_capture_own()) with @b as it came. */
void odd_big(struct both *b);
void odd_reg(struct both *b);
void odd_no_ra(struct both *b);
void unwind_capture_own(struct both *b);

/* Ours only: libunwind reads what odd_no_ra's rules do not say. */
__attribute__((noinline)) void unwind_capture_own(struct both *b)
{
	b->nown = mt_unwind(b->own, DEPTH_MAX, NULL, &mine);
	__asm__ volatile("" ::: "memory");
}
__asm__(".text\n"
	".globl odd_big\n.type odd_big, @function\nodd_big:\n"
	".cfi_startproc\n"
	"sub $0x20008, %rsp\n.cfi_def_cfa_offset 0x20010\n"
	"call unwind_capture\n"
	"add $0x20008, %rsp\n.cfi_def_cfa_offset 8\n"
	"ret\n.cfi_endproc\n.size odd_big, .-odd_big\n"
	".globl odd_reg\n.type odd_reg, @function\nodd_reg:\n"
	".cfi_startproc\n"
	"push %r12\n.cfi_def_cfa_offset 16\n.cfi_offset r12, -16\n"
	"mov %rsp, %r12\n.cfi_def_cfa_register r12\n"
	"sub $16, %rsp\n"
	"call unwind_capture\n"
	"mov %r12, %rsp\n.cfi_def_cfa_register rsp\n"
	"pop %r12\n.cfi_def_cfa_offset 8\n"
	"ret\n.cfi_endproc\n.size odd_reg, .-odd_reg\n"
	/* a CIE with no rule for the return address: not the outermost frame */
	".globl odd_no_ra\n.type odd_no_ra, @function\nodd_no_ra:\n"
	".cfi_startproc simple\n.cfi_def_cfa rsp, 8\n"
	"sub $8, %rsp\n.cfi_def_cfa_offset 16\n"
	"call unwind_capture_own\n"
	"add $8, %rsp\n.cfi_def_cfa_offset 8\n"
	"ret\n.cfi_endproc\n.size odd_no_ra, .-odd_no_ra\n");

START_TEST(test_odd_frames_left_to_libunwind)
{
	struct both *b = calloc(1, sizeof(*b));
	ck_assert_int_eq(mt_unwind_init(), 0);
	odd_big(b);
	ck_assert_int_eq(b->nown, -1);
	ck_assert_int_gt(b->nlib, 2);
	odd_reg(b);
	ck_assert_int_eq(b->nown, -1);
	ck_assert_int_gt(b->nlib, 2);
	odd_no_ra(b);
	ck_assert_int_eq(b->nown, -1);
	/* the frames around them are unwound here still */
	uint8_t seq[4] = { 0, 1, 2, 3 };
	next(b, seq, 4);
	assert_same(b);
	free(b);
}
END_TEST

/* The same stack, but for the one return address of the call here. */
static __attribute__((noinline)) unsigned long one_round(struct both *b)
{
	uint8_t seq[8] = { 0, 1, 2, 3, 4, 0, 1, 2 };
	next(b, seq, 8);
	assert_same(b);
	return mt_unwind_learned();
}

START_TEST(test_forget_learns_again)
{
	struct both *b = calloc(1, sizeof(*b));
	ck_assert_int_eq(mt_unwind_init(), 0);
	unsigned long l0 = one_round(b);
	unsigned long l1 = one_round(b);
	ck_assert_uint_le(l1 - l0, 1); /* all cached but the call's site */
	mt_unwind_forget();
	unsigned long l2 = one_round(b);
	ck_assert_uint_ge(l2 - l1, 10); /* all learned again */
	free(b);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("unwind");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_every_shape_as_libunwind);
	tcase_add_test(tc, test_random_stacks_as_libunwind);
	tcase_add_test(tc, test_stops_where_libunwind_stops);
	tcase_add_test(tc, test_threads_stack_ends_as_libunwind);
	tcase_add_test(tc, test_signal_frame_left_to_libunwind);
	tcase_add_test(tc, test_odd_frames_left_to_libunwind);
	tcase_add_test(tc, test_forget_learns_again);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
#endif
