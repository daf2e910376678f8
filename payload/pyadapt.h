/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_PYADAPT_H
#define MT_PAYLOAD_PYADAPT_H
/*
 * The exit feed where it pays (pyfeed.h): in default mode, where events
 * are C allocations and usually far rarer than calls, the feed is not on
 * from the start. The writer thread's tick weighs what reading stacks
 * costs (frames checked, track.h, at about 0.65 ns each; a native return
 * address unwound counts as eight, as the feed's marks let native stacks
 * be unwound in part: native-memo.h): past 1% of a
 * CPU, the feed is asked for: a thread of its own takes the GIL and
 * turns it on (the writer thread never waits for the GIL). Once on, what the feed costs (exits
 * reported, about 30 ns each) is weighed against what reading cost
 * before; if the feed costs more, it goes off again and is not asked for
 * for 30 s, then 60, and so on. With Python allocators traced the feed is
 * on from the start, and on 3.11 none is needed: neither is adapted.
 */
#include <stdint.h> /* uint32_t, uint64_t */

/* mt_pyadapt_start() - a capture in default mode starts, in an interpreter
 * of @python_hex: adapt from now on. Control paths. */
void mt_pyadapt_start(uint32_t python_hex);

/* mt_pyadapt_stop() - no more adapting: the capture ends (the feed itself
 * is the caller's to stop). Any thread. */
void mt_pyadapt_stop(void);

/* mt_pyadapt_tick() - the writer thread's tick, at monotonic @now_ns. */
void mt_pyadapt_tick(uint64_t now_ns);

#endif /* MT_PAYLOAD_PYADAPT_H */
