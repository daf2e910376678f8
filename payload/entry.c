/* SPDX-License-Identifier: MIT */
/*
 * Starting and stopping tracking: the exported entry points, the
 * `memtrace run` preload path and the exit handlers. Runs on control
 * paths only (a constructor, the injector's call, an atexit handler),
 * never in an allocation hook. Prints nothing: what goes wrong is written
 * into the capture as a DIAG record.
 */
#include "memtrace-payload.h"
#include "format/error.h"
#include "format/record.h"
#include "format/runproto.h"
#include "payload/fatal.h"
#include "payload/entry.h"
#include "payload/got.h"
#include "payload/hooks.h"
#include "payload/python.h"
#include "payload/status.h"
#include "payload/tbuf.h"
#include "payload/track.h"
#include "payload/writer.h"

#include <errno.h>       /* EBUSY */
#include <fcntl.h>       /* open */
#include <pthread.h>     /* pthread_mutex_t */
#include <stdio.h>       /* snprintf */
#include <stdlib.h>      /* getenv, atexit */
#include <string.h>      /* strlen */
#include <sys/syscall.h> /* SYS_gettid */
#include <time.h>        /* clock_gettime */
#include <unistd.h>      /* getpid */

static struct {
	pthread_mutex_t lock;
	int active;
	pid_t pid;          /* process that owns the capture */
	uint32_t flags;
	int python;         /* Python binding available */
	int pymem;          /* PyMem wrappers installed by us */
	int exit_hooks;     /* atexit handlers registered */
	int audit_done;     /* run mode: Python-side setup happened */
	uint32_t interval_ms;
	char path[MEMTRACE_PATH_MAX]; /* the capture's, or "" if it came as an fd alone */
	int follow_pending;   /* a fork child whose capture starts in Python's
			       * after-fork hook: the parent's pid, its PyMem state */
	pid_t follow_parent;
	int follow_pymem;
	uint32_t python_hex;  /* of the interpreter, once bound */
} st = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* How many threads the control channel has (mt_entry_count_threads()). */
static int (*control_threads)(void);

void mt_entry_count_threads(int (*count)(void))
{
	__atomic_store_n(&control_threads, count, __ATOMIC_RELEASE);
}

/* memtrace's own threads in this process: the writer's and the control
 * channel's. */
static int own_threads(void)
{
	int (*count)(void) = __atomic_load_n(&control_threads, __ATOMIC_ACQUIRE);
	return (atomic_load_explicit(&mt_whot.running, memory_order_relaxed) ? 1 : 0) +
	       (count ? count() : 0);
}

/* memtrace run learns how the capture ended through its status pipe
 * (status.h); "signal ..." for a capture a signal ended is fatal.c's. */
static void report_line(const char *error)
{
	struct mt_run_status s = { .end = MT_RUN_ERROR, .reason = error,
				   .reason_len = strlen(error) };
	mt_status_report(&s);
}

static void report_status(int err, const char *what)
{
	if (err) {
		char why[MT_RUN_STATUS_MAX];
		snprintf(why, sizeof(why), "%s: %s", what, mt_strerror(err));
		report_line(why);
	} else {
		struct mt_run_status s = { .end = MT_RUN_OK, .dropped = mt_writer_dropped() };
		mt_status_report(&s);
	}
}

static uint64_t realtime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint32_t read_cmdline(uint8_t *buf, uint32_t cap)
{
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	ssize_t n, got = 0;
	if (fd < 0)
		return 0;
	while (got < (ssize_t)cap && (n = read(fd, buf + got, cap - (size_t)got)) > 0)
		got += n;
	close(fd);
	while (got > 0 && buf[got - 1] == '\0')
		got--; /* the trailing NUL of the last argument */
	return (uint32_t)got;
}

/* ------------------------------------------------------------------------
 * Python-side hooks: C functions that Python calls (atexit, and the
 * os.register_at_fork hooks), so that tracking ends when the program ends
 * and not after the interpreter has torn everything down (leaks would be
 * meaningless), and follows forks.
 *
 * The C API functions they call are found once, in the parent with the
 * GIL held (py_bind()): finding one walks the loaded objects under a
 * loader lock that a fork child may never get (another thread of the
 * parent held it at the fork).
 * ---------------------------------------------------------------------- */
struct py_method_def {
	const char *name;
	void *(*meth)(void *, void *);
	int flags;
	const char *doc;
};
#define PY_METH_NOARGS 0x0004

static struct {
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
} py;

/* 0, or -1 if some function is missing. */
static int py_bind(void)
{
	if (py.bound)
		return 0;
	py.none = mt_got_find_definition("_Py_NoneStruct");
	py.deprecation = (void **)mt_got_find_definition("PyExc_DeprecationWarning");
	py.incref = (void (*)(void *))mt_got_find_definition("Py_IncRef");
	py.decref = (void (*)(void *))mt_got_find_definition("Py_DecRef");
	py.clear = (void (*)(void))mt_got_find_definition("PyErr_Clear");
	py.import = (void *(*)(const char *))mt_got_find_definition("PyImport_ImportModule");
	py.getattr = (void *(*)(void *, const char *))mt_got_find_definition(
		"PyObject_GetAttrString");
	py.newcf = (void *(*)(void *, void *, void *))mt_got_find_definition("PyCFunction_NewEx");
	py.call = (void *(*)(void *, void *, void *))mt_got_find_definition("PyObject_Call");
	py.callf = (void *(*)(void *, const char *, ...))mt_got_find_definition(
		"PyObject_CallFunction");
	py.callm = (void *(*)(void *, const char *, const char *, ...))mt_got_find_definition(
		"PyObject_CallMethod");
	py.item = (void *(*)(void *, long))mt_got_find_definition("PySequence_GetItem");
	py.dict_new = (void *(*)(void))mt_got_find_definition("PyDict_New");
	py.dict_set = (int (*)(void *, const char *, void *))mt_got_find_definition(
		"PyDict_SetItemString");
	py.tuple_new = (void *(*)(long))mt_got_find_definition("PyTuple_New");
	py.bound = py.none && py.deprecation && py.incref && py.decref && py.clear &&
		   py.import && py.getattr && py.newcf && py.call && py.callf && py.callm &&
		   py.item && py.dict_new && py.dict_set && py.tuple_new;
	return py.bound ? 0 : -1;
}

/* What a hook returns: None. Hooks are registered only once bound. */
static void *py_none(void)
{
	py.incref(py.none);
	return py.none;
}

/* The references in @refs[0..n) that are set, released. */
static void py_release(void *const *refs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (refs[i])
			py.decref(refs[i]);
}

static int stop_locked(const char *why, int in_python);

static void *py_atexit_cb(void *self, void *unused)
{
	(void)self;
	(void)unused;
	pthread_mutex_lock(&st.lock);
	if (st.active && st.pid == getpid())
		stop_locked(NULL, 1);
	pthread_mutex_unlock(&st.lock);
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
	int ok = (mod = py.import(module)) && (reg = py.getattr(mod, func));

	if (!keys) {
		ok = ok && (fn = py.newcf(defs[0], NULL, NULL)) && (res = py.callf(reg, "(O)", fn));
	} else {
		ok = ok && (args = py.tuple_new(0)) && (kw = py.dict_new());
		for (int i = 0; ok && i < n; i++) {
			void *f = py.newcf(defs[i], NULL, NULL);
			ok = f && py.dict_set(kw, keys[i], f) == 0;
			if (f)
				py.decref(f);
		}
		ok = ok && (res = py.call(reg, args, kw));
	}
	if (!ok)
		py.clear();
	void *refs[] = { res, args, kw, fn, reg, mod };
	py_release(refs, sizeof(refs) / sizeof(refs[0]));
	return ok ? 0 : -1;
}

static void follow_fork_locked(void);

/* A child of fork() made with Python's os.fork() (multiprocessing's fork
 * context too) runs Python's after-fork hooks once the interpreter is
 * whole again: the child's own capture starts there. A fork that is only
 * the way to exec another program (subprocess) runs none, and gets none. */
static void *py_after_fork_cb(void *self, void *unused)
{
	(void)self;
	(void)unused;
	int own = mt_guard_enter();
	pthread_mutex_lock(&st.lock);
	if (st.follow_pending)
		follow_fork_locked();
	pthread_mutex_unlock(&st.lock);
	if (own)
		mt_guard_leave();
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
static struct {
	int ready;
	void *filter;    /* ("ignore", re.compile(...), DeprecationWarning, None, 0) */
	void *warnings;  /* the module */
	void *in_list;   /* the list the filter was put in, while it is in */
} fw;

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
		py.clear();
		return -1;
	}
	py.decref(res);
	res = py.callm(fw.warnings, "_filters_mutated", NULL);
	if (res)
		py.decref(res);
	else
		py.clear();
	return 0;
}

/* The filter out of the list it went into, and of the current one
 * (warnings.catch_warnings() may have swapped them meanwhile). */
static void remove_fork_filter(void)
{
	if (!fw.in_list)
		return;
	void *cur = py.getattr(fw.warnings, "filters");
	if (!cur)
		py.clear();
	/* "(O)": the filter is a tuple, which "O" would spread as the arguments */
	filters_changed(py.callm(fw.in_list, "remove", "(O)", fw.filter));
	if (cur && cur != fw.in_list)
		filters_changed(py.callm(cur, "remove", "(O)", fw.filter));
	if (cur)
		py.decref(cur);
	py.decref(fw.in_list);
	fw.in_list = NULL;
}

static void *py_before_fork_cb(void *self, void *unused)
{
	(void)self;
	(void)unused;
	int ours = own_threads();
	long threads = process_threads();
	remove_fork_filter(); /* what an earlier fork left (3.13) */
	if (!ours || threads < 0 || threads - ours > 1)
		return py_none();
	void *list = py.getattr(fw.warnings, "filters");
	if (!list) {
		py.clear();
		return py_none();
	}
	if (filters_changed(py.callm(list, "insert", "(iO)", 0, fw.filter)) == 0)
		fw.in_list = list;
	else
		py.decref(list);
	return py_none();
}

static void *py_after_fork_parent_cb(void *self, void *unused)
{
	(void)self;
	(void)unused;
	if (st.python_hex < 0x030d0000)
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

	if (fw.ready)
		return 0;
	/* made by warnings.filterwarnings() itself, then taken out again */
	if (!(fw.warnings = py.import("warnings")) ||
	    !(fwarn = py.getattr(fw.warnings, "filterwarnings")) ||
	    !(res = py.callf(fwarn, "ssO", "ignore",
			  "This process \\(pid=\\d+\\) is multi-threaded, use of fork(pty)?\\(\\) "
			  "may lead",
			  *py.deprecation)) ||
	    !(list = py.getattr(fw.warnings, "filters")) || !(fw.filter = py.item(list, 0)) ||
	    filters_changed(py.callm(list, "remove", "(O)", fw.filter)) < 0) {
		py.clear();
		if (fw.filter)
			py.decref(fw.filter);
		if (fw.warnings)
			py.decref(fw.warnings);
		fw.filter = fw.warnings = NULL;
	}
	void *refs[] = { list, res, fwarn };
	py_release(refs, 3);
	fw.ready = fw.filter != NULL;
	return fw.ready ? 0 : -1;
}

static struct py_method_def before_fork_def = { "memtrace_before_fork", py_before_fork_cb,
						PY_METH_NOARGS, NULL };
static struct py_method_def after_fork_parent_def = { "memtrace_after_fork_parent",
						      py_after_fork_parent_cb, PY_METH_NOARGS,
						      NULL };
static struct py_method_def after_fork_child_def = { "memtrace_after_fork_child",
						     py_after_fork_child_cb, PY_METH_NOARGS,
						     NULL };

/* The GIL, for control paths. Lock order everywhere: the GIL first, then
 * st.lock (the main thread calls in with the GIL held). */
static int gil_take(int *state)
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

static void gil_give(int state)
{
	static void (*release)(int);
	if (!release)
		release = (void (*)(int))mt_got_find_definition("PyGILState_Release");
	if (release)
		release(state);
}

/* Python-side setup once the interpreter can run code: PyMem wrappers and
 * the atexit registration (once per process). Call with the GIL and
 * st.lock held. */
static void python_setup_locked(void)
{
	static pid_t atexit_registered;
	if (!st.active)
		return;
	if ((st.flags & MT_HDR_PYALLOC) && !st.pymem) {
		if (mt_python_pymem_install() == 0)
			st.pymem = 1;
		else
			mt_writer_diag(MT_DIAG_PYTHON_UNAVAILABLE,
				       "Python allocators could not be wrapped");
	}
	if (atexit_registered != getpid()) {
		static struct py_method_def *const defs[] = { &atexit_def };
		if (py_bind() == 0 && py_register("atexit", "register", NULL, defs, 1) == 0)
			atexit_registered = getpid();
		else
			mt_writer_diag(MT_DIAG_INFO, "could not register a Python atexit handler; "
						     "tracking ends at process exit");
	}
	/* once: children inherit the registrations with the interpreter */
	static int after_fork_registered, fork_warning_registered;
	if ((st.flags & MT_HDR_FOLLOW_FORK) && !after_fork_registered) {
		static const char *const keys[] = { "after_in_child" };
		static struct py_method_def *const defs[] = { &after_fork_def };
		if (py_bind() == 0 && py_register("os", "register_at_fork", keys, defs, 1) == 0)
			after_fork_registered = 1;
		else
			mt_writer_diag(MT_DIAG_INFO, "could not register a Python after-fork hook; "
						     "children of fork() are not followed");
	}
	if (st.python_hex >= 0x030c0000 && !fork_warning_registered) {
		static const char *const keys[] = { "before", "after_in_parent", "after_in_child" };
		static struct py_method_def *const defs[] = { &before_fork_def, &after_fork_parent_def,
							      &after_fork_child_def };
		int own = mt_guard_enter(); /* the filter and its pattern are memtrace's */
		fork_warning_registered = py_bind() == 0 && fork_filter_prepare() == 0 &&
					  py_register("os", "register_at_fork", keys, defs, 3) == 0;
		if (own)
			mt_guard_leave();
		if (!fork_warning_registered)
			mt_writer_diag(MT_DIAG_INFO, "could not register a Python fork hook: from "
						     "3.12, forks may warn of memtrace's threads");
	}
}

/* Audit hooks can be added before the interpreter starts and are called
 * with the GIL held. cpython.run_file, run_module, run_command and
 * run_stdin (3.8+) fire once the interpreter and site are initialized,
 * just before the program's first line: the moment tracking starts. */
static int audit_hook(const char *event, void *args, void *data)
{
	(void)args;
	(void)data;
	if (st.audit_done || strncmp(event, "cpython.run_", 12) != 0)
		return 0;
	st.audit_done = 1;
	pthread_mutex_lock(&st.lock);
	if (st.active && st.pid == getpid()) {
		python_setup_locked();
		/* the program's first line is next, unless the capture has
		 * already failed (tracking then stays off) */
		if (mt_writer_ok()) {
			mt_tracking = 1;
			/* after Python read the dispositions (signal.getsignal()) */
			mt_fatal_arm();
		}
	}
	pthread_mutex_unlock(&st.lock);
	return 0;
}

/* ------------------------------------------------------------------------
 * Start and stop.
 * ---------------------------------------------------------------------- */
static void on_exit_handler(void)
{
	pthread_mutex_lock(&st.lock);
	if (st.active && st.pid == getpid())
		stop_locked(NULL, 0);
	pthread_mutex_unlock(&st.lock);
}

/* The _exit and exec hooks' end (hooks.h): the capture ends before the
 * process does, or before exec replaces the program, writer thread and
 * all. */
static void finish_at_end(enum mt_hooks_end how)
{
	/* _exit() may be called with our lock held (a fork child, a signal
	 * handler): never wait for it there; nor touch the lock in the child
	 * of a vfork(), which shares it and all our memory with us. */
	if (st.pid != getpid() || pthread_mutex_trylock(&st.lock) != 0)
		return;
	if (st.active && st.pid == getpid()) {
		int own = mt_guard_enter();
		if (how == MT_HOOKS_END_EXEC)
			mt_writer_diag(MT_DIAG_INFO,
				       "the program called exec: the capture ends there");
		stop_locked(NULL, 0);
		if (own)
			mt_guard_leave();
	}
	pthread_mutex_unlock(&st.lock);
}

static int start_locked(const struct memtrace_config *cfg, int deferred);

/* With MT_HDR_FOLLOW_FORK, the child of a fork gets a capture of its own,
 * "<parent's capture>.<child's pid>" (a new file: never an existing one,
 * nor through a symbolic link), from the fork on: what the child
 * inherited is not in it, and its frees of those blocks are of addresses
 * the capture never saw (reports ignore them). The GOTs are still
 * patched and the PyMem wrappers still in place: only the writer is new.
 * A child whose capture cannot be made runs on untracked. */
static void follow_fork_locked(void)
{
	static struct memtrace_config cfg;
	int pymem = st.follow_pymem;

	st.follow_pending = 0;
	int n = snprintf(cfg.path, sizeof(cfg.path), "%s.%d", st.path, (int)getpid());
	int fd = n > 0 && (size_t)n < sizeof(cfg.path)
			 ? open(cfg.path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)
			 : -1;
	if (fd < 0)
		goto untracked;
	cfg.size = sizeof(cfg);
	cfg.fd = fd;
	cfg.flags = (st.flags & ~MT_HDR_ATTACHED) | MT_HDR_FORKED;
	cfg.interval_ms = st.interval_ms;
	if (start_locked(&cfg, 0) < 0) {
		unlink(cfg.path);
		goto untracked;
	}
	st.pymem = pymem;
	char msg[96];
	snprintf(msg, sizeof(msg), "forked from process %d: tracking starts at the fork",
		 (int)st.follow_parent);
	mt_writer_diag(MT_DIAG_INFO, msg);
	return;
untracked:
	mt_python_pymem_quiet();
}

static void on_fork_child(void)
{
	/* The child inherits patched GOTs and the capture fd but not the
	 * writer thread: its hooks pass through and it never writes; the
	 * capture is the parent's, so it can be attached to on its own (or,
	 * following forks, gets a capture of its own). Nor does it hold
	 * memtrace run's status pipe open. Locks held by other threads at the
	 * fork would never be released here. */
	pid_t parent = st.pid;
	int follow = st.active && (st.flags & MT_HDR_FOLLOW_FORK) && st.path[0];
	int pymem = st.pymem;
	mt_tracking = 0;
	pthread_mutex_init(&st.lock, NULL);
	mt_track_after_fork();
	mt_got_after_fork();
	if (st.active)
		mt_writer_forget();
	st.active = 0;
	st.pymem = 0;
	mt_status_after_fork();
	/* Following, the capture starts in Python's after-fork hook
	 * (py_after_fork_cb()); the wrappers pass calls through until then. */
	st.follow_pending = follow;
	st.follow_parent = parent;
	st.follow_pymem = pymem;
	/* the wrappers stay in the child's domains, quiet until a capture of
	 * its own with Python allocators switches them back on */
	if (!follow || !pymem)
		mt_python_pymem_quiet();
}

/* @deferred: everything is ready but events are not recorded until the
 * Python program starts (run mode: the audit hook turns tracking on). */
static int start_locked(const struct memtrace_config *cfg, int deferred)
{
	static uint8_t cmdline[MT_CMDLINE_MAX];
	struct mt_header h = { .version = MT_FORMAT_VERSION };
	uint32_t python_hex = 0;
	int fd, e = 0;

	if (cfg->size < sizeof(*cfg))
		return -EINVAL; /* too old to tell a descriptor */
	/* a capture descriptor given is ours from here on, failing or not */
	if (st.active || (e = mt_hooks_resolve()) < 0) {
		if (cfg->fd >= 0)
			close(cfg->fd);
		return st.active ? -EBUSY : e;
	}
	st.python = mt_python_init(&python_hex) == 0;
	st.python_hex = python_hex;
	mt_track_init(st.python);

	fd = cfg->fd;
	if (fd < 0) {
		/* memtrace attach made the file, and removes it when it gives up
		 * waiting for the start: tracking must not begin after that */
		int create = cfg->flags & MT_HDR_ATTACHED ? 0 : O_CREAT;
		fd = open(cfg->path, O_WRONLY | create | O_TRUNC | O_CLOEXEC, 0600);
		if (fd < 0)
			return -errno;
	}
	h.flags = cfg->flags;
	h.pid = (uint32_t)getpid();
	h.python_hex = python_hex;
	h.start_ns = realtime_ns();
	h.interval_ms = cfg->interval_ms ? cfg->interval_ms : 10;
	h.page_size = (uint32_t)sysconf(_SC_PAGESIZE);
	h.main_tid = (uint64_t)getpid();
	h.cmdline.p = cmdline;
	h.cmdline.len = read_cmdline(cmdline, sizeof(cmdline));
	e = mt_writer_start(fd, &h);
	if (e < 0) {
		close(fd);
		return e;
	}
	st.flags = cfg->flags;
	st.pid = getpid();
	st.active = 1;
	st.pymem = 0;
	st.interval_ms = h.interval_ms;
	/* a capture given as a descriptor may come with its path (run's,
	 * a Tracker's), which follow-fork names its children's after */
	size_t plen = strnlen(cfg->path, sizeof(st.path) - 1);
	memcpy(st.path, cfg->path, plen);
	st.path[plen] = '\0';
	if (!st.python)
		mt_writer_diag(MT_DIAG_PYTHON_UNAVAILABLE,
			       "no supported CPython in this process: no Python stacks");
	else if (mt_python_code_watch(1) < 0)
		mt_writer_diag(MT_DIAG_INFO, "code objects' deaths cannot be watched: a function "
					     "made where another died may be shown as that one");

	mt_tracking = !deferred;
	/* a fork child's GOTs are its parent's: patched already */
	mt_hooks_on_end(finish_at_end);
	e = cfg->flags & MT_HDR_FORKED ? 0 : mt_hooks_install();
	if (e < 0) {
		stop_locked("GOT patching failed", 0);
		return e;
	}
	if (!st.exit_hooks) {
		atexit(on_exit_handler);
		pthread_atfork(NULL, NULL, on_fork_child);
		st.exit_hooks = 1;
	}
	/* run mode: once Python has started (audit_hook()) */
	if (!deferred)
		mt_fatal_arm();
	return 0;
}

static int stop_locked(const char *why, int in_python)
{
	if (!st.active)
		return -EINVAL;
	/* A signal that would end the process waits until the capture is
	 * finished here (its handler cannot finish it on this thread, which
	 * is doing so), and then finds the default disposition back. */
	sigset_t mask;
	mt_fatal_block(&mask);
	mt_tracking = 0;
	/* a fork child's hooks stay, passing calls through, as they do in a
	 * child that is not followed: walking the loaded objects could wait
	 * forever for a loader lock a thread of the parent held at the fork */
	if (!(st.flags & MT_HDR_FORKED))
		mt_hooks_uninstall();
	if (st.python)
		mt_python_code_watch(0);
	if (st.pymem && in_python)
		mt_python_pymem_uninstall();
	st.active = 0;
	int rc = mt_writer_stop(why);
	report_status(rc, rc == -MT_ECRASH ? "tracking stopped" : "cannot write the capture");
	mt_fatal_release();
	mt_fatal_unblock(&mask);
	return rc;
}

MT_EXPORT int memtrace_payload_start(const struct memtrace_config *cfg)
{
	int own = mt_guard_enter(), gil_state = 0;
	uint32_t python_hex;
	/* gil_take() needs the Python binding, which start_locked() sets up
	 * only later: bind first, or a first start from Python (a Tracker)
	 * would skip the PyMem wrappers. */
	(void)mt_python_init(&python_hex);
	int gil = gil_take(&gil_state);
	pthread_mutex_lock(&st.lock);
	int rc = start_locked(cfg, 0);
	if (rc == 0 && gil)
		python_setup_locked(); /* attached, or started from Python */
	pthread_mutex_unlock(&st.lock);
	if (gil)
		gil_give(gil_state);
	if (own)
		mt_guard_leave();
	return rc;
}

int mt_start_attached(const struct memtrace_config *cfg)
{
	int own = mt_guard_enter();
	uint32_t python_hex;
	(void)mt_python_init(&python_hex);
	pthread_mutex_lock(&st.lock);
	int rc = start_locked(cfg, 0);
	pthread_mutex_unlock(&st.lock);
	if (own)
		mt_guard_leave();
	return rc;
}

int mt_start_attached_python(void)
{
	int own = mt_guard_enter(), gil_state = 0, done = 0;
	if (gil_take(&gil_state)) {
		pthread_mutex_lock(&st.lock);
		if (st.active && st.pid == getpid()) {
			python_setup_locked();
			done = 1;
		}
		pthread_mutex_unlock(&st.lock);
		gil_give(gil_state);
	}
	if (own)
		mt_guard_leave();
	return done;
}

MT_EXPORT int memtrace_payload_stop(void)
{
	int own = mt_guard_enter(), gil_state = 0;
	/* the GIL only to put PyMem domains back */
	int gil = st.pymem && gil_take(&gil_state);
	pthread_mutex_lock(&st.lock);
	if (st.pymem && !gil) {
		/* put in meanwhile (mt_start_attached_python()); the lock order
		 * is the GIL first */
		pthread_mutex_unlock(&st.lock);
		gil = gil_take(&gil_state);
		pthread_mutex_lock(&st.lock);
	}
	int rc = stop_locked(NULL, gil);
	pthread_mutex_unlock(&st.lock);
	if (gil)
		gil_give(gil_state);
	if (own)
		mt_guard_leave();
	return rc;
}

/* ------------------------------------------------------------------------
 * memtrace run: the payload is preloaded and configured by MEMTRACE_RUN.
 * ---------------------------------------------------------------------- */

/* Children (subprocess, os.system) must not load the payload again. */
static void scrub_environment(void)
{
	const char *pre = getenv("LD_PRELOAD");
	unsetenv("MEMTRACE_RUN");
	if (!pre)
		return;
	char buf[8192];
	size_t n = 0;
	const char *p = pre;
	while (*p) {
		const char *end = p + strcspn(p, ": ");
		size_t len = (size_t)(end - p);
		int ours = len >= 22 && memmem(p, len, "libmemtrace-payload.so", 22) != NULL;
		if (len && !ours && n + len + 1 < sizeof(buf)) {
			if (n)
				buf[n++] = ':';
			memcpy(buf + n, p, len);
			n += len;
		}
		p = *end ? end + 1 : end;
	}
	buf[n] = '\0';
	if (n)
		setenv("LD_PRELOAD", buf, 1);
	else
		unsetenv("LD_PRELOAD");
}

__attribute__((constructor)) static void preload_init(void)
{
	const char *env = getenv("MEMTRACE_RUN");
	struct memtrace_config cfg = { .size = sizeof(cfg), .fd = -1 };
	struct mt_run_env run;

	if (!env)
		return;
	/* Launchers on the way to the interpreter (a pyenv shim runs env and
	 * bash first) pass the environment on untouched. */
	const char *(*get_version)(void) =
		(const char *(*)(void))mt_got_find_definition("Py_GetVersion");
	if (!get_version)
		return;
	mt_in_hook = 1;
	/* format/runproto.h; a string run did not write tracks nothing */
	if (mt_run_env_parse(env, &run) < 0) {
		scrub_environment();
		mt_in_hook = 0;
		return;
	}
	(void)mt_status_set(run.status_fd); /* never inherited by the program's children */
	if (run.path && strlen(run.path) >= sizeof(cfg.path)) {
		scrub_environment();
		mt_in_hook = 0;
		return;
	}
	if (run.path)
		strcpy(cfg.path, run.path);
	if (run.has_fd) {
		/* "fd:N:PATH": the capture memtrace run made, open; "fd:N": with
		 * --live-remote, a connection to the live client. Never
		 * inherited by the program's children. */
		cfg.fd = run.capture_fd;
		if (cfg.fd < 0 || fcntl(cfg.fd, F_SETFD, FD_CLOEXEC) != 0) {
			report_line(cfg.path[0] ? "memtrace run gave no capture"
						: "memtrace run gave no connection to the live client");
			scrub_environment();
			mt_in_hook = 0;
			return;
		}
	}
	cfg.flags = run.flags & ~MT_HDR_ATTACHED;
	cfg.interval_ms = run.interval_ms;
	scrub_environment();

	uint32_t python_hex;
	if (mt_python_init(&python_hex) < 0) {
		/* an interpreter we cannot read: run it untracked, and say so */
		char why[160];
		const char *v = get_version();
		snprintf(why, sizeof(why), "cannot track Python %.*s (supported: 3.8 to 3.13)",
			 (int)strcspn(v, " "), v);
		report_line(why);
		if (cfg.fd >= 0)
			close(cfg.fd); /* the live client sees the end at once */
		mt_in_hook = 0;
		return;
	}

	/* Tracking starts with the program, not with the interpreter: what
	 * Python allocates for itself before the first line is not the
	 * program's (memray draws the same line). */
	int (*add_audit)(int (*)(const char *, void *, void *), void *) =
		(int (*)(int (*)(const char *, void *, void *), void *))mt_got_find_definition(
			"PySys_AddAuditHook");
	pthread_mutex_lock(&st.lock);
	int rc = start_locked(&cfg, add_audit != NULL);
	if (rc < 0)
		report_status(rc, "cannot start tracking");
	if (rc == 0 && add_audit && add_audit(audit_hook, NULL) != 0) {
		mt_writer_diag(MT_DIAG_INFO, "no audit hook: tracking from process start");
		mt_tracking = 1;
	}
	pthread_mutex_unlock(&st.lock);
	mt_in_hook = 0;
}
