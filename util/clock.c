/* SPDX-License-Identifier: MIT */
/*
 * The monotonic clock in milliseconds and microseconds (util/clock.h).
 */
#include "util/clock.h"

#include <time.h> /* clock_gettime */

int64_t mt_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t mt_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
