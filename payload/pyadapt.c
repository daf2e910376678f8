/* SPDX-License-Identifier: MIT */
/*
 * The exit feed where it pays (pyadapt.h).
 */
#include "payload/pyadapt.h"
#include "payload/pyfeed.h"
#include "payload/pyhooks.h"
#include "payload/spawn.h"
#include "payload/threads.h"
#include "payload/track.h"

#include <stdatomic.h> /* atomic_* */
#include <sys/prctl.h> /* PR_SET_NAME */

#define TICK_NS (250ull * 1000 * 1000)
#define SETTLE_NS (1000ull * 1000 * 1000) /* the feed on this long before it is judged */
#define BACKOFF_NS (30ull * 1000 * 1000 * 1000)
#define FRAME_PS 650  /* a frame checked, in picoseconds */
#define EXIT_PS 30000 /* an exit reported */
#define ON_PPM 10000  /* reading past 1% of a CPU: the feed is asked for */

static struct {
	_Atomic int active;
	_Atomic int want;    /* what the pending call is to make of the feed */
	_Atomic int pending; /* a pending call is queued */
	uint32_t python_hex;
	/* the writer thread's own */
	uint64_t last, checked, exits; /* at the last tick */
	uint64_t on_at, retry_at, backoff, read_ppm;
} ad;

/* On a thread of its own, which waits for the GIL (the writer thread
 * must not, and a pending call asked for from another thread than the
 * main one is not run until something else breaks into the eval loop). */
static void *apply(void *arg)
{
	(void)arg;
	mt_in_hook = 1; /* memtrace's own thread: never recorded */
	mt_thread_own();
	prctl(PR_SET_NAME, "memtrace-feed", 0, 0, 0);
	int state;
	if (atomic_load(&ad.active) && mt_pyhooks_gil_take(&state)) {
		int want = atomic_load(&ad.want);
		if (atomic_load(&ad.active)) {
			if (want && !mt_pyfeed_on())
				(void)mt_pyfeed_start(ad.python_hex);
			else if (!want && mt_pyfeed_on())
				mt_pyfeed_stop();
		}
		mt_pyhooks_gil_give(state);
	}
	atomic_store(&ad.pending, 0);
	return NULL;
}

static void request(int on)
{
	atomic_store(&ad.want, on);
	atomic_store(&ad.pending, 1);
	if (mt_spawn(apply, NULL) != 0)
		atomic_store(&ad.pending, 0); /* asked again at a later tick */
}

void mt_pyadapt_start(uint32_t python_hex)
{
	mt_pyadapt_stop();
	/* 3.11 reads stacks with tokens: no feed to adapt */
	if ((python_hex >> 16) == 0x030b)
		return;
	ad.python_hex = python_hex;
	ad.last = 0;
	ad.retry_at = ad.backoff = 0;
	atomic_store(&ad.active, 1);
}

void mt_pyadapt_stop(void)
{
	atomic_store(&ad.active, 0);
}

void mt_pyadapt_tick(uint64_t now)
{
	if (!atomic_load_explicit(&ad.active, memory_order_relaxed))
		return;
	uint64_t checked = mt_track_frames_checked(), exits = mt_pyfeed_exits();
	if (ad.last == 0 || now - ad.last < TICK_NS) {
		if (ad.last == 0)
			ad.last = now, ad.checked = checked, ad.exits = exits;
		return;
	}
	uint64_t dt = now - ad.last;
	uint64_t read_ppm = (checked - ad.checked) * FRAME_PS / (dt / 1000 + 1);
	uint64_t feed_ppm = (exits - ad.exits) * EXIT_PS / (dt / 1000 + 1);
	ad.last = now, ad.checked = checked, ad.exits = exits;
	if (atomic_load(&ad.pending))
		return;
	if (!mt_pyfeed_on()) {
		if (now >= ad.retry_at && read_ppm > ON_PPM) {
			ad.read_ppm = read_ppm;
			ad.on_at = now;
			request(1);
		}
	} else if (now - ad.on_at > SETTLE_NS && feed_ppm > ad.read_ppm) {
		ad.backoff = ad.backoff ? 2 * ad.backoff : BACKOFF_NS;
		ad.retry_at = now + ad.backoff;
		request(0);
	}
}
