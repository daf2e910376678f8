/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_WAIT_H
#define MT_PAYLOAD_WAIT_H
/*
 * The monotonic clock and futex waits the payload's modules share. No
 * state; every one is async-signal-safe and keeps no lock.
 */
#include <linux/futex.h> /* FUTEX_WAIT_PRIVATE */
#include <stdatomic.h>   /* _Atomic */
#include <stdint.h>      /* uint64_t */
#include <sys/syscall.h> /* SYS_futex */
#include <time.h>        /* clock_gettime */
#include <unistd.h>      /* syscall */

/* CLOCK_MONOTONIC in nanoseconds. */
static inline uint64_t mt_mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Wake up to @n threads asleep on @addr. */
static inline void mt_futex_wake(_Atomic uint32_t *addr, int n)
{
	syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

/* Sleep while *@addr holds @val, at most @ns nanoseconds. */
static inline void mt_futex_wait(_Atomic uint32_t *addr, uint32_t val, uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull) };
	syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, val, &ts, NULL, 0);
}

#endif /* MT_PAYLOAD_WAIT_H */
