/* SPDX-License-Identifier: MIT */
/*
 * The native symbolizer's fixture (tests/unit/test_symbols.c), built
 * -g -O2 and again stripped: a() calls the always-inline b(), which calls
 * the out-of-line leaf(), which returns its return address. That address
 * lies in a() inside the inlined copy of b(), so it resolves to two
 * frames: b at the line of the leaf() call, inlined into a at the line of
 * the b() call. The stores after each call, on the same line, keep the
 * calls from becoming tail calls and export those lines.
 */

unsigned symfixture_b_line, symfixture_leaf_line;

__attribute__((noinline)) static void *leaf(void)
{
	__asm__ volatile("" ::: "memory");
	return __builtin_return_address(0);
}

__attribute__((always_inline)) static inline void *b(void)
{
	void *r = leaf(); symfixture_leaf_line = __LINE__;
	return r;
}

__attribute__((noinline)) void *a(void);
__attribute__((noinline)) void *a(void)
{
	void *r = b(); symfixture_b_line = __LINE__;
	return r;
}
