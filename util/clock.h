/* SPDX-License-Identifier: MIT */
#ifndef MT_UTIL_CLOCK_H
#define MT_UTIL_CLOCK_H
/*
 * Milliseconds on the monotonic clock, for deadlines and pauses in the
 * reader, the injector and the CLI, and microseconds for timing a step
 * (the payload has its own clocks).
 * Async-signal-safe; no errors (CLOCK_MONOTONIC always exists on Linux).
 */
#include <stdint.h> /* int64_t */

/* mt_now_ms() - CLOCK_MONOTONIC in milliseconds. Signed, so that a
 * deadline minus now is negative once it has passed. */
int64_t mt_now_ms(void);
/* mt_now_us() - the same in microseconds. */
int64_t mt_now_us(void);

#endif /* MT_UTIL_CLOCK_H */
