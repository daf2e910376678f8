/* SPDX-License-Identifier: MIT */
/*
 * The Python-side hooks (see pyhooks.h): the C API found once, the
 * functions Python calls, and the fork-warning filter.
 */
#include "payload/pyhooks.h"
#include "payload/got.h"
#include "payload/python.h"
#include "payload/track.h"

#include <fcntl.h>  /* open */
#include <stdio.h>  /* sscanf */
#include <string.h> /* strrchr */
#include <unistd.h> /* getpid */

/* The C API, found once (py_bind()) in the parent with the GIL held: a
 * lookup walks the loaded objects under a loader lock that a fork child
 * may never get (another thread of the parent held it at the fork). */
struct py_method_def {
	const char *name;
	void *(*meth)(void *, void *);
	int flags;
	const char *doc;
};
#define PY_METH_NOARGS 0x0004

struct py_api {
	int bound;
	void *none;          /* Py_None */
	void **deprecation;  /* &PyExc_DeprecationWarning */
	void (*incref)(void *), (*decref)(void *), (*clear)(void);
	void *(*import)(const char *);
	void *(*getattr)(void *, const char *);
	void *(*newcf)(void *, void *, void *);
	void *(*call)(void *, void *, void *);
	void *(*callf)(void *, const char *, ...);
	void *(*callm)(void *, const char *, const char *, ...);
	void *(*item)(void *, long);
	void *(*dict_new)(void);
	int (*dict_set)(void *, const char *, void *);
	void *(*tuple_new)(long);
};

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
	struct py_api py;          /* the C API, found once */
	struct fork_filter fw;
} ph;

/* 0, or -1 if some function is missing. */
static int py_bind(void)
{
	if (ph.py.bound)
		return 0;
	ph.py.none = mt_got_find_definition("_Py_NoneStruct");
	ph.py.deprecation = (void **)mt_got_find_definition("PyExc_DeprecationWarning");
	ph.py.incref = (void (*)(void *))mt_got_find_definition("Py_IncRef");
	ph.py.decref = (void (*)(void *))mt_got_find_definition("Py_DecRef");
	ph.py.clear = (void (*)(void))mt_got_find_definition("PyErr_Clear");
	ph.py.import = (void *(*)(const char *))mt_got_find_definition("PyImport_ImportModule");
	ph.py.getattr = (void *(*)(void *, const char *))mt_got_find_definition(
		"PyObject_GetAttrString");
	ph.py.newcf = (void *(*)(void *, void *, void *))mt_got_find_definition("PyCFunction_NewEx");
	ph.py.call = (void *(*)(void *, void *, void *))mt_got_find_definition("PyObject_Call");
	ph.py.callf = (void *(*)(void *, const char *, ...))mt_got_find_definition(
		"PyObject_CallFunction");
	ph.py.callm = (void *(*)(void *, const char *, const char *, ...))mt_got_find_definition(
		"PyObject_CallMethod");
	ph.py.item = (void *(*)(void *, long))mt_got_find_definition("PySequence_GetItem");
	ph.py.dict_new = (void *(*)(void))mt_got_find_definition("PyDict_New");
	ph.py.dict_set = (int (*)(void *, const char *, void *))mt_got_find_definition(
		"PyDict_SetItemString");
	ph.py.tuple_new = (void *(*)(long))mt_got_find_definition("PyTuple_New");
	ph.py.bound = ph.py.none && ph.py.deprecation && ph.py.incref && ph.py.decref && ph.py.clear &&
		   ph.py.import && ph.py.getattr && ph.py.newcf && ph.py.call && ph.py.callf && ph.py.callm &&
		   ph.py.item && ph.py.dict_new && ph.py.dict_set && ph.py.tuple_new;
	return ph.py.bound ? 0 : -1;
}

/* What a hook returns: None. Hooks are registered only once bound. */
static void *py_none(void)
{
	ph.py.incref(ph.py.none);
	return ph.py.none;
}

/* The references in @refs[0..n) that are set, released. */
static void py_release(void *const *refs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (refs[i])
			ph.py.decref(refs[i]);
}

static void *py_atexit_cb(void *self, void *unused)
{
	(void)self;
	(void)unused;
	ph.ops.at_exit();
	return py_none();
}

static struct py_method_def atexit_def = { "memtrace_stop", py_atexit_cb, PY_METH_NOARGS,
					   NULL };

/* @module.@func(**{@keys[i]: @defs[i]}), or without @keys,
 * @module.@func(@defs[0]). Needs the GIL and py_bind(). 0 or -1. */
static int py_register(const char *module, const char *func, const char *const *keys,
		       struct py_method_def *const *defs, int n)
{
	void *mod = NULL, *reg = NULL, *fn = NULL, *kw = NULL, *args = NULL, *res = NULL;
	int ok = (mod = ph.py.import(module)) && (reg = ph.py.getattr(mod, func));

	if (!keys) {
		ok = ok && (fn = ph.py.newcf(defs[0], NULL, NULL)) && (res = ph.py.callf(reg, "(O)", fn));
	} else {
		ok = ok && (args = ph.py.tuple_new(0)) && (kw = ph.py.dict_new());
		for (int i = 0; ok && i < n; i++) {
			void *f = ph.py.newcf(defs[i], NULL, NULL);
			ok = f && ph.py.dict_set(kw, keys[i], f) == 0;
			if (f)
				ph.py.decref(f);
		}
		ok = ok && (res = ph.py.call(reg, args, kw));
	}
	if (!ok)
		ph.py.clear();
	void *refs[] = { res, args, kw, fn, reg, mod };
	py_release(refs, sizeof(refs) / sizeof(refs[0]));
	return ok ? 0 : -1;
}

/* A child of fork() made with Python's os.fork() (multiprocessing's fork
 * context too) runs Python's after-fork hooks once the interpreter is
 * whole again: the child's own capture starts there. A fork that is only
 * the way to exec another program (subprocess) runs none, and gets none. */
static void *py_after_fork_cb(void *self, void *unused)
{
	(void)self;
	(void)unused;
	ph.ops.fork_child();
	return py_none();
}

static struct py_method_def after_fork_def = { "memtrace_follow_fork", py_after_fork_cb,
					       PY_METH_NOARGS, NULL };

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
	char buf[1024];
	int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	long threads = -1;

	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	const char *p = strrchr(buf, ')'); /* the name may hold anything */
	if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d "
				"%*d %ld", &threads) != 1)
		return -1;
	return threads;
}
/* After a call that changed a filters list (@res its result, NULL if it
 * failed): tell the module, which caches what the filters decide. 0 or -1 */
static int filters_changed(void *res)
{
	if (!res) {
		ph.py.clear();
		return -1;
	}
	ph.py.decref(res);
	res = ph.py.callm(ph.fw.warnings, "_filters_mutated", NULL);
	if (res)
		ph.py.decref(res);
	else
		ph.py.clear();
	return 0;
}

/* The filter out of the list it went into, and of the current one
 * (warnings.catch_warnings() may have swapped them meanwhile). */
static void remove_fork_filter(void)
{
	if (!ph.fw.in_list)
		return;
	void *cur = ph.py.getattr(ph.fw.warnings, "filters");
	if (!cur)
		ph.py.clear();
	/* "(O)": the filter is a tuple, which "O" would spread as the arguments */
	filters_changed(ph.py.callm(ph.fw.in_list, "remove", "(O)", ph.fw.filter));
	if (cur && cur != ph.fw.in_list)
		filters_changed(ph.py.callm(cur, "remove", "(O)", ph.fw.filter));
	if (cur)
		ph.py.decref(cur);
	ph.py.decref(ph.fw.in_list);
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
		return py_none();
	void *list = ph.py.getattr(ph.fw.warnings, "filters");
	if (!list) {
		ph.py.clear();
		return py_none();
	}
	if (filters_changed(ph.py.callm(list, "insert", "(iO)", 0, ph.fw.filter)) == 0)
		ph.fw.in_list = list;
	else
		ph.py.decref(list);
	return py_none();
}

static void *py_after_fork_parent_cb(void *self, void *unused)
{
	(void)self;
	(void)unused;
	if (ph.python_hex < 0x030d0000)
		remove_fork_filter();
	return py_none();
}

static void *py_after_fork_child_cb(void *self, void *unused)
{
	(void)self;
	(void)unused;
	remove_fork_filter();
	return py_none();
}

/* Make the filter. Needs the GIL. 0 or -1. */
static int fork_filter_prepare(void)
{
	void *fwarn = NULL, *res = NULL, *list = NULL;

	if (ph.fw.ready)
		return 0;
	/* made by warnings.filterwarnings() itself, then taken out again */
	if (!(ph.fw.warnings = ph.py.import("warnings")) ||
	    !(fwarn = ph.py.getattr(ph.fw.warnings, "filterwarnings")) ||
	    !(res = ph.py.callf(fwarn, "ssO", "ignore",
			  "This process \\(pid=\\d+\\) is multi-threaded, use of fork(pty)?\\(\\) "
			  "may lead",
			  *ph.py.deprecation)) ||
	    !(list = ph.py.getattr(ph.fw.warnings, "filters")) || !(ph.fw.filter = ph.py.item(list, 0)) ||
	    filters_changed(ph.py.callm(list, "remove", "(O)", ph.fw.filter)) < 0) {
		ph.py.clear();
		if (ph.fw.filter)
			ph.py.decref(ph.fw.filter);
		if (ph.fw.warnings)
			ph.py.decref(ph.fw.warnings);
		ph.fw.filter = ph.fw.warnings = NULL;
	}
	void *refs[] = { list, res, fwarn };
	py_release(refs, 3);
	ph.fw.ready = ph.fw.filter != NULL;
	return ph.fw.ready ? 0 : -1;
}

static struct py_method_def before_fork_def = { "memtrace_before_fork", py_before_fork_cb,
						PY_METH_NOARGS, NULL };
static struct py_method_def after_fork_parent_def = { "memtrace_after_fork_parent",
						      py_after_fork_parent_cb, PY_METH_NOARGS,
						      NULL };
static struct py_method_def after_fork_child_def = { "memtrace_after_fork_child",
						     py_after_fork_child_cb, PY_METH_NOARGS,
						     NULL };

int mt_pyhooks_gil_take(int *state)
{
	/* resolved once: a lookup walks every loaded object */
	static int (*ensure)(void);
	if (!ensure)
		ensure = (int (*)(void))mt_got_find_definition("PyGILState_Ensure");
	if (!ensure || !mt_python_initialized())
		return 0;
	*state = ensure();
	return 1;
}

void mt_pyhooks_gil_give(int state)
{
	static void (*release)(int);
	if (!release)
		release = (void (*)(int))mt_got_find_definition("PyGILState_Release");
	if (release)
		release(state);
}

void mt_pyhooks_init(const struct mt_pyhooks_ops *ops)
{
	ph.ops = *ops;
}

int mt_pyhooks_atexit(void)
{
	static struct py_method_def *const defs[] = { &atexit_def };
	if (ph.atexit_registered == getpid())
		return 0;
	if (py_bind() < 0 || py_register("atexit", "register", NULL, defs, 1) < 0)
		return -1;
	ph.atexit_registered = getpid();
	return 0;
}

/* once: children inherit the registrations with the interpreter */
int mt_pyhooks_follow_fork(void)
{
	static const char *const keys[] = { "after_in_child" };
	static struct py_method_def *const defs[] = { &after_fork_def };
	if (!ph.after_fork_registered)
		ph.after_fork_registered =
			py_bind() == 0 && py_register("os", "register_at_fork", keys, defs, 1) == 0;
	return ph.after_fork_registered ? 0 : -1;
}

int mt_pyhooks_fork_warning(uint32_t python_hex)
{
	static const char *const keys[] = { "before", "after_in_parent", "after_in_child" };
	static struct py_method_def *const defs[] = { &before_fork_def, &after_fork_parent_def,
						      &after_fork_child_def };
	ph.python_hex = python_hex;
	if (ph.fork_warning_registered)
		return 0;
	int own = mt_guard_enter(); /* the filter and its pattern are memtrace's */
	ph.fork_warning_registered = py_bind() == 0 && fork_filter_prepare() == 0 &&
				     py_register("os", "register_at_fork", keys, defs, 3) == 0;
	if (own)
		mt_guard_leave();
	return ph.fork_warning_registered ? 0 : -1;
}
