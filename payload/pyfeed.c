/* SPDX-License-Identifier: MIT */
/*
 * The exit feed (pyfeed.h): sys.monitoring callbacks from 3.12, a C
 * profile function before.
 */
#include "payload/pyfeed.h"
#include "payload/pyapi.h"
#include "payload/python-layout.h"
#include "payload/python-walk.h"
#include "payload/python.h"
#include "payload/track.h"

#include <errno.h> /* errno */

#define PY_TRACE_RETURN 3 /* PyTrace_RETURN: a return, a yield or an unwind */

static struct {
	int on;
	uint32_t python_hex;
	uint32_t gen;       /* the last generation handed out */
	int tool;           /* 3.12+: the sys.monitoring tool id held */
	void *monitoring;   /* 3.12+: sys.monitoring, while on */
	void *bootstrap;    /* before 3.12: threading's profile hook, ours */
	int fork_hook;      /* the after-fork hook is registered (children inherit it) */
	uint64_t exits;     /* exits reported, ever (the GIL guards it) */
} fd;

static const struct mt_pylayout *layout(void)
{
	return &mt_pylayouts[mt_python_layout_row()];
}

/* ------------------------------------------------------------------------
 * The callbacks: the frame exiting is the thread's current one.
 * ---------------------------------------------------------------------- */
static int feed_profile(void *obj, void *frame, int what, void *arg)
{
	(void)obj;
	(void)frame;
	(void)arg;
	if (what == PY_TRACE_RETURN) {
		int saved = errno;
		fd.exits++;
		mt_track_frame_exit(mt_python_current_frame());
		errno = saved;
	}
	return 0;
}

static void *feed_monitor(void *self, void *args)
{
	(void)self;
	(void)args;
	int saved = errno;
	fd.exits++;
	mt_track_frame_exit(mt_python_current_frame());
	errno = saved;
	return mt_pyapi.none; /* immortal from 3.12: no reference to take */
}

static struct mt_pyapi_def monitor_def = { "memtrace_frame_exit", feed_monitor,
					   MT_PY_METH_FASTCALL, NULL };

/* A thread started by threading after the feed went on: its first
 * profile event (threading.setprofile()) puts the feed's function in its
 * place; or, the feed off, none. */
static void *feed_bootstrap(void *self, void *args)
{
	(void)self;
	(void)args;
	mt_pyapi.set_profile(fd.on ? (void *)feed_profile : NULL, NULL);
	return mt_pyapi_none();
}

static struct mt_pyapi_def bootstrap_def = { "memtrace_thread_profile", feed_bootstrap,
					     MT_PY_METH_VARARGS, NULL };

/* ------------------------------------------------------------------------
 * 3.8 to 3.11: the profile function of every thread that has none.
 * ---------------------------------------------------------------------- */

/* @ts's profile function to @fn (NULL: none). 3.8 lacks
 * _PyEval_SetProfile(): its fields are set as PyEval_SetProfile() sets
 * the calling thread's. */
static void set_profile_of(void *ts, void *fn)
{
	const struct mt_pylayout *lo = layout();
	if (mt_pyapi.set_profile_of) {
		if (mt_pyapi.set_profile_of(ts, fn, NULL) < 0)
			mt_pyapi.clear();
		return;
	}
	void **func = (void **)((char *)ts + lo->ts_profilefunc);
	int *use_tracing = (int *)((char *)ts + lo->ts_use_tracing);
	*func = fn;
	*use_tracing = fn != NULL || mt_ld_ptr(ts, lo->ts_tracefunc) != NULL;
}

/* Every thread state whose profile function is @from gets @to. */
static void profile_all(void *from, void *to)
{
	const struct mt_pylayout *lo = layout();
	for (void *interp = mt_pyapi.interp_head(); interp; interp = mt_pyapi.interp_next(interp))
		for (void *ts = mt_pyapi.thread_head(interp); ts; ts = mt_pyapi.thread_next(ts))
			if (mt_ld_ptr(ts, lo->ts_profilefunc) == from)
				set_profile_of(ts, to);
}

/* threading.setprofile(@fn) if threading's hook is @expect; nothing
 * without threading, which is not imported here (pyapi.h):
 * mt_pyfeed_threading() once the main thread has. */
static void threading_hook(void *expect, void *fn)
{
	void *mod = mt_pyapi_loaded("threading"), *cur = NULL, *res = NULL;
	if (!mod)
		return;
	if ((cur = mt_pyapi.getattr(mod, "_profile_hook")) && cur == expect)
		res = mt_pyapi.callm(mod, "setprofile", "(O)", fn);
	if (!cur || (cur == expect && !res))
		mt_pyapi.clear();
	void *refs[] = { res, cur };
	mt_pyapi_release(refs, 2);
}

static int profile_on(void)
{
	profile_all(NULL, (void *)feed_profile);
	if (!fd.bootstrap && !(fd.bootstrap = mt_pyapi.newcf(&bootstrap_def, NULL, NULL)))
		mt_pyapi.clear();
	if (fd.bootstrap)
		threading_hook(mt_pyapi.none, fd.bootstrap);
	return 0;
}

static void profile_off(void)
{
	profile_all((void *)feed_profile, NULL);
	if (fd.bootstrap)
		threading_hook(fd.bootstrap, mt_pyapi.none);
}

/* ------------------------------------------------------------------------
 * 3.12 and later: sys.monitoring.
 * ---------------------------------------------------------------------- */
static const char *const monitor_events[] = { "PY_RETURN", "PY_YIELD", "PY_UNWIND" };
#define NEVENTS (sizeof(monitor_events) / sizeof(monitor_events[0]))

static long event_bit(void *events, const char *name)
{
	void *v = mt_pyapi.getattr(events, name);
	long bit = v ? mt_pyapi.as_long(v) : -1;
	if (v)
		mt_pyapi.decref(v);
	if (bit <= 0) {
		mt_pyapi.clear();
		return -1;
	}
	return bit;
}

/* After a call of sys.monitoring's that returned @res: 0, or -1 with the
 * error cleared. */
static int done(void *res)
{
	if (!res) {
		mt_pyapi.clear();
		return -1;
	}
	mt_pyapi.decref(res);
	return 0;
}

static void monitor_off(void)
{
	if (fd.tool < 0)
		return;
	void *events = mt_pyapi.getattr(fd.monitoring, "events");
	(void)done(mt_pyapi.callm(fd.monitoring, "set_events", "(ii)", fd.tool, 0));
	for (size_t i = 0; events && i < NEVENTS; i++) {
		long bit = event_bit(events, monitor_events[i]);
		if (bit > 0)
			(void)done(mt_pyapi.callm(fd.monitoring, "register_callback", "(ilO)", fd.tool, bit,
						   mt_pyapi.none));
	}
	if (!events)
		mt_pyapi.clear();
	else
		mt_pyapi.decref(events);
	(void)done(mt_pyapi.callm(fd.monitoring, "free_tool_id", "(i)", fd.tool));
	fd.tool = -1;
}

static int monitor_on(void)
{
	void *sys = mt_pyapi.import("sys"), *events = NULL, *cb = NULL;
	int ok = sys && (fd.monitoring = mt_pyapi.getattr(sys, "monitoring")) &&
		 (events = mt_pyapi.getattr(fd.monitoring, "events")) &&
		 (cb = mt_pyapi.newcf(&monitor_def, NULL, NULL));
	if (!ok)
		mt_pyapi.clear();
	fd.tool = -1;
	/* 4, or 3: never the ids sys.monitoring names for debuggers,
	 * coverage and profilers (0 to 2), which their tools insist on */
	for (int id = 4; ok && id >= 3 && fd.tool < 0; id--)
		if (done(mt_pyapi.callm(fd.monitoring, "use_tool_id", "(is)", id, "memtrace")) == 0)
			fd.tool = id;
	ok = ok && fd.tool >= 0;
	long mask = 0;
	for (size_t i = 0; ok && i < NEVENTS; i++) {
		long bit = event_bit(events, monitor_events[i]);
		ok = bit > 0 && done(mt_pyapi.callm(fd.monitoring, "register_callback", "(ilO)", fd.tool, bit,
						     cb)) == 0;
		mask |= bit;
	}
	ok = ok && done(mt_pyapi.callm(fd.monitoring, "set_events", "(il)", fd.tool, mask)) == 0;
	void *refs[] = { cb, events, sys };
	mt_pyapi_release(refs, 3);
	if (!ok) {
		monitor_off();
		if (fd.monitoring)
			mt_pyapi.decref(fd.monitoring);
		fd.monitoring = NULL;
		return -1;
	}
	return 0;
}

/* A child of os.fork() starts with no capture: the feed comes out (a
 * child that follows with a capture of its own starts it again, from a
 * hook registered after this one). */
static void *feed_after_fork(void *self, void *unused)
{
	(void)self;
	(void)unused;
	mt_pyfeed_stop();
	return mt_pyapi_none();
}

static struct mt_pyapi_def after_fork_def = { "memtrace_feed_after_fork", feed_after_fork,
					      MT_PY_METH_NOARGS, NULL };

/* ------------------------------------------------------------------------
 * On and off.
 * ---------------------------------------------------------------------- */
int mt_pyfeed_start(uint32_t python_hex)
{
	/* 3.11: the reader needs no feed (its tokens, python-walk.h); a
	 * profile function there would slow every instruction down */
	if ((python_hex >> 16) == 0x030b)
		return 0;
	if (mt_pyapi_bind() < 0)
		return -1;
	int own = mt_guard_enter(); /* what is made here is memtrace's */
	static const char *const keys[] = { "after_in_child" };
	static struct mt_pyapi_def *const defs[] = { &after_fork_def };
	if (!fd.fork_hook)
		fd.fork_hook = mt_pyapi_register("os", "register_at_fork", keys, defs, 1) == 0;
	fd.python_hex = python_hex;
	/* on already (a capture that ended without the GIL left it in):
	 * threads made since get the profile function, and the marks of
	 * the last capture a new generation */
	int rc = python_hex >= 0x030c0000 ? (fd.on ? 0 : monitor_on()) : profile_on();
	if (rc == 0) {
		fd.on = 1;
		if (++fd.gen == MT_UNMARKED || fd.gen == 0)
			fd.gen = 1;
		/* hooks first: a frame marked is one whose exit is reported */
		mt_python_feed(fd.gen, python_hex >= 0x030c0000 ? NULL : (const void *)feed_profile);
	}
	if (own)
		mt_guard_leave();
	return rc;
}

void mt_pyfeed_stop(void)
{
	if (!fd.on)
		return;
	/* marks untrusted first: the hooks may stop reporting from here */
	mt_python_feed(0, NULL);
	fd.on = 0;
	int own = mt_guard_enter();
	if (fd.python_hex >= 0x030c0000) {
		monitor_off();
		if (fd.monitoring)
			mt_pyapi.decref(fd.monitoring);
		fd.monitoring = NULL;
	} else {
		profile_off();
	}
	if (own)
		mt_guard_leave();
}

void mt_pyfeed_threading(void)
{
	if (fd.on && fd.python_hex < 0x030c0000 && fd.bootstrap)
		threading_hook(mt_pyapi.none, fd.bootstrap);
}

int mt_pyfeed_on(void)
{
	return fd.on;
}

uint64_t mt_pyfeed_exits(void)
{
	return __atomic_load_n(&fd.exits, __ATOMIC_RELAXED);
}
