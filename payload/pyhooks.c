/* SPDX-License-Identifier: MIT */
/*
 * The Python-side hooks (see pyhooks.h): the C API found once, the
 * functions Python calls, and the fork-warning filter.
 */
#include "payload/pyhooks.h"
#include "payload/pyapi.h"
#include "payload/got.h"
#include "payload/python.h"
#include "payload/track.h"
#include "util/procstat.h"

#include <string.h> /* strcmp */
#include <unistd.h> /* getpid */

struct fork_filter {
	int ready;
	void *filter;    /* ("ignore", re.compile(...), DeprecationWarning, None, 0) */
	void *warnings;  /* the module */
	void *in_list;   /* the list the filter was put in, while it is in */
};

static struct {
	struct mt_pyhooks_ops ops; /* entry.c's */
	uint32_t python_hex;       /* of the interpreter (the fork hooks) */
	pid_t atexit_registered;   /* the process whose interpreter has it */
	int after_fork_registered, fork_warning_registered;
	struct fork_filter fw;
} ph;

static void *py_atexit_cb(void *self, void *unused)
{
	(void)self;
	(void)unused;
	ph.ops.at_exit();
	return mt_pyapi_none();
}

static struct mt_pyapi_def atexit_def = { "memtrace_stop", py_atexit_cb, MT_PY_METH_NOARGS,
					   NULL };

/* A child of fork() made with Python's os.fork() (multiprocessing's fork
 * context too) runs Python's after-fork hooks once the interpreter is
 * whole again: the child's own capture starts there. A fork that is only
 * the way to exec another program (subprocess) runs none, and gets none. */
static void *py_after_fork_cb(void *self, void *unused)
{
	(void)self;
	(void)unused;
	ph.ops.fork_child();
	return mt_pyapi_none();
}

static struct mt_pyapi_def after_fork_def = { "memtrace_follow_fork", py_after_fork_cb,
					       MT_PY_METH_NOARGS, NULL };

/* ------------------------------------------------------------------------
 * From 3.12, os.fork() and os.forkpty() warn (DeprecationWarning) when
 * the process has more than one thread; memtrace's own threads must not
 * make them do so in a program that has one. Before the fork, if the
 * program's threads alone are one, an "ignore" filter for that warning
 * goes first in warnings.filters. It comes out in the child after the
 * fork, and in the parent after the warning would have come: in 3.12
 * that is before Python's after-fork hooks run, from 3.13 after them, so
 * there the filter stays until the next fork's before hook.
 * ---------------------------------------------------------------------- */


/* Threads of this process (/proc/self/stat), or -1. */
static long process_threads(void)
{
	struct mt_procstat ps;
	return mt_procstat_read(0, &ps) == 0 ? ps.threads : -1;
}

/* After a call that changed a filters list (@res its result, NULL if it
 * failed): tell the module, which caches what the filters decide. 0 or -1 */
static int filters_changed(void *res)
{
	if (!res) {
		mt_pyapi.clear();
		return -1;
	}
	mt_pyapi.decref(res);
	res = mt_pyapi.callm(ph.fw.warnings, "_filters_mutated", NULL);
	if (res)
		mt_pyapi.decref(res);
	else
		mt_pyapi.clear();
	return 0;
}

/* The filter out of the list it went into, and of the current one
 * (warnings.catch_warnings() may have swapped them meanwhile). */
static void remove_fork_filter(void)
{
	if (!ph.fw.in_list)
		return;
	void *cur = mt_pyapi.getattr(ph.fw.warnings, "filters");
	if (!cur)
		mt_pyapi.clear();
	/* "(O)": the filter is a tuple, which "O" would spread as the arguments */
	filters_changed(mt_pyapi.callm(ph.fw.in_list, "remove", "(O)", ph.fw.filter));
	if (cur && cur != ph.fw.in_list)
		filters_changed(mt_pyapi.callm(cur, "remove", "(O)", ph.fw.filter));
	if (cur)
		mt_pyapi.decref(cur);
	mt_pyapi.decref(ph.fw.in_list);
	ph.fw.in_list = NULL;
}

static void *py_before_fork_cb(void *self, void *unused)
{
	(void)self;
	(void)unused;
	int ours = ph.ops.own_threads();
	long threads = process_threads();
	remove_fork_filter(); /* what an earlier fork left (3.13) */
	if (!ours || threads < 0 || threads - ours > 1)
		return mt_pyapi_none();
	void *list = mt_pyapi.getattr(ph.fw.warnings, "filters");
	if (!list) {
		mt_pyapi.clear();
		return mt_pyapi_none();
	}
	if (filters_changed(mt_pyapi.callm(list, "insert", "(iO)", 0, ph.fw.filter)) == 0)
		ph.fw.in_list = list;
	else
		mt_pyapi.decref(list);
	return mt_pyapi_none();
}

static void *py_after_fork_parent_cb(void *self, void *unused)
{
	(void)self;
	(void)unused;
	if (ph.python_hex < 0x030d0000)
		remove_fork_filter();
	return mt_pyapi_none();
}

static void *py_after_fork_child_cb(void *self, void *unused)
{
	(void)self;
	(void)unused;
	remove_fork_filter();
	return mt_pyapi_none();
}

/* Make the filter. Needs the GIL. 0 or -1. */
static int fork_filter_prepare(void)
{
	void *fwarn = NULL, *res = NULL, *list = NULL;

	if (ph.fw.ready)
		return 0;
	/* made by warnings.filterwarnings() itself, then taken out again */
	if (!(ph.fw.warnings = mt_pyapi.import("warnings")) ||
	    !(fwarn = mt_pyapi.getattr(ph.fw.warnings, "filterwarnings")) ||
	    !(res = mt_pyapi.callf(fwarn, "ssO", "ignore",
			  "This process \\(pid=\\d+\\) is multi-threaded, use of fork(pty)?\\(\\) "
			  "may lead",
			  *mt_pyapi.deprecation)) ||
	    !(list = mt_pyapi.getattr(ph.fw.warnings, "filters")) || !(ph.fw.filter = mt_pyapi.item(list, 0)) ||
	    filters_changed(mt_pyapi.callm(list, "remove", "(O)", ph.fw.filter)) < 0) {
		mt_pyapi.clear();
		if (ph.fw.filter)
			mt_pyapi.decref(ph.fw.filter);
		if (ph.fw.warnings)
			mt_pyapi.decref(ph.fw.warnings);
		ph.fw.filter = ph.fw.warnings = NULL;
	}
	void *refs[] = { list, res, fwarn };
	mt_pyapi_release(refs, 3);
	ph.fw.ready = ph.fw.filter != NULL;
	return ph.fw.ready ? 0 : -1;
}

static struct mt_pyapi_def before_fork_def = { "memtrace_before_fork", py_before_fork_cb,
						MT_PY_METH_NOARGS, NULL };
static struct mt_pyapi_def after_fork_parent_def = { "memtrace_after_fork_parent",
						      py_after_fork_parent_cb, MT_PY_METH_NOARGS,
						      NULL };
static struct mt_pyapi_def after_fork_child_def = { "memtrace_after_fork_child",
						     py_after_fork_child_cb, MT_PY_METH_NOARGS,
						     NULL };

const char *mt_pyhooks_allocator(void)
{
	static const char *known;
	static const struct {
		const char *python, *memray;
	} names[] = {
		{ "pymalloc", "pymalloc" },	  { "pymalloc_debug", "pymalloc debug" },
		{ "malloc", "malloc" },		  { "malloc_debug", "malloc" },
		{ "mimalloc", "mimalloc" },	  { "mimalloc_debug", "mimalloc debug" },
	};
	if (known)
		return known;
	/* 3.8+: which of its own allocators the interpreter's PyMem
	 * functions are (NULL for any other, memtrace's too) */
	const char *(*current)(void) =
		(const char *(*)(void))mt_got_find_definition("_PyMem_GetCurrentAllocatorName");
	const char *name = current ? current() : NULL;
	known = "unknown";
	for (size_t i = 0; name && i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(name, names[i].python) == 0)
			known = names[i].memray;
	return known;
}

int mt_pyhooks_gil_take(int *state)
{
	if (!mt_python_initialized())
		return 0;
	*state = mt_python_gil_take();
	return 1;
}

void mt_pyhooks_gil_give(int state)
{
	mt_python_gil_give(state);
}

void mt_pyhooks_init(const struct mt_pyhooks_ops *ops)
{
	ph.ops = *ops;
}

int mt_pyhooks_atexit(void)
{
	static struct mt_pyapi_def *const defs[] = { &atexit_def };
	if (ph.atexit_registered == getpid())
		return 0;
	if (mt_pyapi_bind() < 0 || mt_pyapi_register("atexit", "register", NULL, defs, 1) < 0)
		return -1;
	ph.atexit_registered = getpid();
	return 0;
}

/* once: children inherit the registrations with the interpreter */
int mt_pyhooks_follow_fork(void)
{
	static const char *const keys[] = { "after_in_child" };
	static struct mt_pyapi_def *const defs[] = { &after_fork_def };
	if (!ph.after_fork_registered)
		ph.after_fork_registered =
			mt_pyapi_bind() == 0 && mt_pyapi_register("os", "register_at_fork", keys, defs, 1) == 0;
	return ph.after_fork_registered ? 0 : -1;
}

int mt_pyhooks_fork_warning(uint32_t python_hex)
{
	static const char *const keys[] = { "before", "after_in_parent", "after_in_child" };
	static struct mt_pyapi_def *const defs[] = { &before_fork_def, &after_fork_parent_def,
						      &after_fork_child_def };
	ph.python_hex = python_hex;
	if (ph.fork_warning_registered)
		return 0;
	int own = mt_guard_enter(); /* the filter and its pattern are memtrace's */
	ph.fork_warning_registered = mt_pyapi_bind() == 0 && fork_filter_prepare() == 0 &&
				     mt_pyapi_register("os", "register_at_fork", keys, defs, 3) == 0;
	if (own)
		mt_guard_leave();
	return ph.fork_warning_registered ? 0 : -1;
}
