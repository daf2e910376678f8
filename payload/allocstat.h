/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_ALLOCSTAT_H
#define MT_PAYLOAD_ALLOCSTAT_H
/*
 * The C allocator's own count of the bytes it holds in use, for the
 * memory samples: glibc's mallinfo2(), uordblks + hblkhd (the chunks in
 * use in its arenas, headers and rounding included, and its mmapped
 * chunks). Looked up with dlsym, so that a glibc before 2.33, which has
 * no mallinfo2(), gives no count; and only when the program's malloc is
 * glibc's own (another allocator preloaded, jemalloc say, leaves glibc's
 * arenas empty, and its figure would mean nothing).
 *
 * mallinfo2() takes every arena's lock in turn and walks its free lists
 * with the lock held, so it is taken on the writer thread only, never in
 * an allocation hook, and at most every MT_ALLOCSTAT_MIN_NS, or less
 * often when a call takes long: 100 times the last call's time apart, up
 * to MT_ALLOCSTAT_MAX_NS (13 us a call with four threads allocating; 4
 * ms, up to 20, on a heap of 200,000 free chunks, or when the writer
 * thread is preempted during the call). It waits for a thread inside
 * malloc: the caller must know that no thread that holds an arena's lock
 * waits for it (a signal handler that interrupted malloc and waits for
 * the writer; a thread stopping the capture from inside an _exit hook).
 * A fork waits for it, as glibc's fork takes every arena's lock.
 */
#include <stdint.h> /* uint64_t */

#define MT_ALLOCSTAT_MIN_NS (100ull * 1000 * 1000)
#define MT_ALLOCSTAT_MAX_NS (1000ull * 1000 * 1000)

/* mt_allocstat_init() - find mallinfo2() and check that the program's
 * malloc is glibc's. Control paths (it looks up symbols). Returns 1 if
 * the count can be taken, 0 if not. */
int mt_allocstat_init(void);

/* mt_allocstat_take() - the allocator's bytes in use into *@bytes, if the
 * count can be taken and, unless @force, its time has come at @now_ns
 * (monotonic). Returns 1 with *@bytes set, else 0. */
int mt_allocstat_take(uint64_t now_ns, int force, uint64_t *bytes);

#endif /* MT_PAYLOAD_ALLOCSTAT_H */
