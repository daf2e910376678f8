/* SPDX-License-Identifier: MIT */
#ifndef MT_UTIL_SPIN_H
#define MT_UTIL_SPIN_H
/*
 * A spinlock for sections of a few hundred nanoseconds that allocation
 * hooks may enter: no futex, no malloc, no errno change. A waiter spins a
 * little, then yields the CPU at every try (the holder may be descheduled
 * on a machine with fewer CPUs than running threads).
 *
 *	static atomic_flag lock = ATOMIC_FLAG_INIT;
 *	mt_spin_lock(&lock); ... mt_spin_unlock(&lock);
 *
 * A fork child whose parent had other threads unlocks what they may have
 * held: mt_spin_unlock() from its after-fork path.
 */
#include <sched.h>     /* sched_yield */
#include <stdatomic.h> /* atomic_flag */

static inline void mt_spin_lock(atomic_flag *f)
{
	unsigned spins = 0;
	while (atomic_flag_test_and_set_explicit(f, memory_order_acquire))
		if (++spins > 64)
			sched_yield();
}

static inline void mt_spin_unlock(atomic_flag *f)
{
	atomic_flag_clear_explicit(f, memory_order_release);
}

#endif /* MT_UTIL_SPIN_H */
