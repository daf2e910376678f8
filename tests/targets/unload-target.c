/* SPDX-License-Identifier: MIT */
/*
 * A library for the test of a library unloaded while native stacks are
 * recorded (tests/integration/test_native.py): built twice, with names
 * of the same length, so that both copies have the same layout and the
 * second, loaded where the first was, has the first's return addresses.
 */
#include <stdlib.h> /* malloc */

#ifndef MT_UNLOAD_NAME
#error "MT_UNLOAD_NAME: the function's name"
#endif

void *MT_UNLOAD_NAME(size_t n);

__attribute__((noinline)) void *MT_UNLOAD_NAME(size_t n)
{
	void *p = malloc(n);
	__asm__ volatile("" : : "r"(p) : "memory"); /* no tail call */
	return p;
}
