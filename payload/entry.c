/* SPDX-License-Identifier: MIT */
/*
 * Starting and stopping tracking: the exported entry points, the
 * `memtrace run` preload path, the ends at exit, _exit and exec (the
 * hooks call back through hooks.h) and fork children. The top of the
 * payload: it calls the modules below it (pyhooks.c's Python-side hooks
 * call back through the ops given them) and none of them calls it by
 * name, but control.c's start and stop (entry.h). Runs on control
 * paths only (a constructor, the injector's call, an atexit handler),
 * never in an allocation hook. Prints nothing: what goes wrong is written
 * into the capture as a DIAG record.
 */
#include "memtrace-payload.h"
#include "format/error.h"
#include "format/record.h"
#include "format/runproto.h"
#include "payload/fatal.h"
#include "payload/dynsym.h"
#include "payload/entry.h"
#include "payload/got.h"
#include "payload/hooks.h"
#include "payload/native.h"
#include "payload/phdr.h"
#include "payload/pyadapt.h"
#include "payload/pyapi.h"
#include "payload/pyfeed.h"
#include "payload/pygate.h"
#include "payload/pyhooks.h"
#include "payload/pythreads.h"
#include "payload/pymem.h"
#include "payload/python.h"
#include "payload/status.h"
#include "payload/tbuf.h"
#include "payload/track.h"
#include "payload/writer.h"
#include "util/fd.h"

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
	int hooked;         /* the GOTs are patched: a fork child can follow */
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
	int main_queued;      /* python_setup_main() waits for the main thread */
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
	int fd = mt_fd_high(open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC));
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

static int stop_locked(const char *why, int in_python);
static void follow_fork_locked(void);

/* Python's atexit (pyhooks.h): tracking ends when the program ends, not
 * after the interpreter has torn everything down. */
static void py_at_exit(void)
{
	pthread_mutex_lock(&st.lock);
	if (st.active && st.pid == getpid())
		stop_locked(NULL, 1);
	pthread_mutex_unlock(&st.lock);
}

/* A child of os.fork(), its interpreter whole again: its own capture
 * starts here (follow_fork_locked()). */
static void py_fork_child(void)
{
	int own = mt_guard_enter();
	pthread_mutex_lock(&st.lock);
	int started = 0;
	if (st.follow_pending) {
		follow_fork_locked();
		started = st.active;
	}
	pthread_mutex_unlock(&st.lock);
	if (started) /* Python code: without st.lock (pythreads.h) */
		(void)mt_pythreads_name_self();
	if (own)
		mt_guard_leave();
}

static const struct mt_pyhooks_ops pyhooks_ops = {
	.at_exit = py_at_exit,
	.fork_child = py_fork_child,
	.own_threads = own_threads,
};

/* Python-side setup once the interpreter can run code: PyMem wrappers and
 * the atexit registration (once per process). Call with the GIL and
 * st.lock held. Nothing here may run Python code: the interpreter lets
 * the GIL go in the middle of it, to a thread that may then wait for
 * st.lock (the lock order is the GIL first); python_setup_unlocked()
 * does that part. Returns whether the capture is on. */
static int python_setup_locked(void)
{
	if (!st.active)
		return 0;
	/* before the PyMem wrappers go in */
	mt_writer_diag(MT_DIAG_PYTHON_ALLOCATOR, mt_pyhooks_allocator());
	if ((st.flags & MT_HDR_PYALLOC) && !st.pymem) {
		if (mt_python_pymem_install() == 0)
			st.pymem = 1;
		else
			mt_writer_diag(MT_DIAG_PYTHON_UNAVAILABLE,
				       "Python allocators could not be wrapped");
	}
	/* With Python allocators, events are dense: the exit feed keeps an
	 * event's stack at the same cost at any depth. */
	if ((st.flags & MT_HDR_PYALLOC) && mt_pyfeed_start(st.python_hex) < 0)
		mt_writer_diag(MT_DIAG_INFO, "the interpreter cannot report frame exits (no "
					     "sys.monitoring tool id free): deep stacks cost more");
	/* without, only where reading stacks costs more than the feed would */
	if (!(st.flags & MT_HDR_PYALLOC))
		mt_pyadapt_start(st.python_hex);
	mt_pyhooks_init(&pyhooks_ops);
	if (mt_pyhooks_atexit() < 0)
		mt_writer_diag(MT_DIAG_INFO, "could not register a Python atexit handler; "
					     "tracking ends at process exit");
	if ((st.flags & MT_HDR_FOLLOW_FORK) && mt_pyhooks_follow_fork() < 0)
		mt_writer_diag(MT_DIAG_INFO, "could not register a Python after-fork hook; "
					     "children of fork() are not followed");
	return 1;
}

/* What needs threading, on Python's main thread (Py_AddPendingCall()),
 * with the GIL: only there may threading be imported (pyapi.h), and under
 * the import gate (pygate.h), a thread of the program may fork. Pending
 * calls run between any two instructions, also while this thread, or
 * another that let the GIL go, holds st.lock: so not st.lock here, but
 * atomics (main_queued, and a benign look at active: the descriptor says
 * nothing once tracking has ended). A fork child forgets its parent's. */
static int python_setup_main(void *unused)
{
	(void)unused;
	if (!__atomic_exchange_n(&st.main_queued, 0, __ATOMIC_ACQ_REL) ||
	    !__atomic_load_n(&st.active, __ATOMIC_ACQUIRE))
		return 0;
	int own = mt_guard_enter();
	mt_pygate_enter_with_gil();
	if (mt_pythreads_install() == 0)
		mt_pyfeed_threading();
	mt_pygate_leave();
	if (own)
		mt_guard_leave();
	return 0;
}

/* The rest of it, with the GIL but not st.lock: the fork-warning filter
 * is made by warnings.filterwarnings(), Python code. Once per process. */
static void python_setup_unlocked(void)
{
	/* an attach's thread, and the program has no threading yet */
	if (mt_pythreads_install() > 0 && !__atomic_exchange_n(&st.main_queued, 1, __ATOMIC_ACQ_REL) &&
	    mt_pyapi.pending(python_setup_main, NULL) < 0) {
		__atomic_store_n(&st.main_queued, 0, __ATOMIC_RELEASE);
		pthread_mutex_lock(&st.lock);
		if (st.active)
			mt_writer_diag(MT_DIAG_INFO, "threading could not be set up on the main "
						     "thread: no thread names");
		pthread_mutex_unlock(&st.lock);
	}
	if (st.python_hex >= 0x030c0000 && mt_pyhooks_fork_warning(st.python_hex) < 0)
		mt_writer_diag(MT_DIAG_INFO, "could not register a Python fork hook: from "
					     "3.12, forks may warn of memtrace's threads");
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
	int set_up = 0;
	pthread_mutex_lock(&st.lock);
	if (st.active && st.pid == getpid() && (set_up = python_setup_locked())) {
		/* the program's first line is next, unless the capture has
		 * already failed (tracking then stays off) */
		if (mt_writer_ok()) {
			/* what the allocator holds as tracking starts: the
			 * interpreter's own, which the capture leaves out */
			mt_writer_sample_now(100ull * 1000 * 1000);
			mt_tracking = 1;
			/* after Python read the dispositions (signal.getsignal()) */
			mt_fatal_arm();
		}
	}
	pthread_mutex_unlock(&st.lock);
	if (set_up)
		python_setup_unlocked();
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
		mt_writer_no_final_count();
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
			 ? mt_fd_high(open(cfg.path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
					       0600))
			 : -1;
	if (fd < 0)
		goto untracked;
	cfg.size = sizeof(cfg);
	cfg.fd = fd;
	cfg.flags = (st.flags & ~MT_HDR_ATTACHED) | MT_HDR_FORKED;
	cfg.interval_ms = st.interval_ms;
	/* a walk may have been under way in the parent at the fork: the
	 * capture says so, and ends at once (phdr.h) */
	int unsafe = mt_phdr_unsafe();
	if (unsafe)
		cfg.flags &= ~(MT_HDR_NATIVE | MT_HDR_PYALLOC);
	if (start_locked(&cfg, 0) < 0) {
		unlink(cfg.path);
		goto untracked;
	}
	if (unsafe) {
		stop_locked("forked while another thread walked the loaded objects: this "
			    "process cannot be tracked safely",
			    1);
		goto untracked;
	}
	st.pymem = pymem;
	/* the feed came out in the child (pyfeed.c's after-fork hook, which
	 * runs before this one) */
	if (st.flags & MT_HDR_PYALLOC)
		(void)mt_pyfeed_start(st.python_hex);
	char msg[96];
	snprintf(msg, sizeof(msg), "forked from process %d: tracking starts at the fork",
		 (int)st.follow_parent);
	mt_writer_diag(MT_DIAG_INFO, msg);
	/* read by the parent's setup already: no walk of the loaded objects here */
	mt_writer_diag(MT_DIAG_PYTHON_ALLOCATOR, mt_pyhooks_allocator());
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
	int follow = st.active && st.hooked && (st.flags & MT_HDR_FOLLOW_FORK) && st.path[0];
	int pymem = st.pymem;
	mt_tracking = 0;
	mt_track_native(0);
	pthread_mutex_init(&st.lock, NULL);
	mt_track_after_fork();
	mt_native_after_fork();
	mt_got_after_fork();
	mt_pyadapt_stop();
	if (st.active)
		mt_writer_forget();
	st.active = 0;
	st.pymem = 0;
	mt_status_after_fork();
	/* Following, the capture starts in Python's after-fork hook
	 * (py_after_fork_cb()); the wrappers pass calls through until then. */
	st.follow_pending = follow;
	st.follow_parent = parent;
	st.main_queued = 0; /* the parent's pending call, if the child runs it */
	st.follow_pymem = pymem;
	/* the wrappers stay in the child's domains, quiet until a capture of
	 * its own with Python allocators switches them back on */
	if (!follow || !pymem)
		mt_python_pymem_quiet();
}

MT_EXPORT int memtrace_payload_tracking(void)
{
	return __atomic_load_n(&st.active, __ATOMIC_ACQUIRE) && st.pid == getpid();
}

static int tracks(uintptr_t fn, void *ctx)
{
	(void)ctx;
	return ((int (*)(void))fn)() == 1;
}

/* @deferred: everything is ready but events are not recorded until the
 * Python program starts (run mode: the audit hook turns tracking on). */
static int start_locked(const struct memtrace_config *cfg, int deferred)
{
	static uint8_t cmdline[MT_CMDLINE_MAX];
	static uint32_t cmdline_len;
	static int cmdline_given; /* by a Tracker (cfg->cmdline) */
	struct mt_header h = { .version = MT_FORMAT_VERSION };
	uint32_t python_hex = 0;
	int fd, e = 0;

	if (cfg->size < sizeof(*cfg))
		return -EINVAL; /* too old to tell a descriptor */
	/* a capture descriptor given is ours from here on, failing or not */
	/* another copy of the payload tracking (not asked in a fork child,
	 * which follows its parent's copy: walking the loaded objects there
	 * could wait forever for a loader lock held at the fork) */
	int other = !(cfg->flags & MT_HDR_FORKED) &&
		    mt_dynsym_each("memtrace_payload_tracking", tracks, NULL);
	if (st.active || other || (e = mt_hooks_resolve()) < 0) {
		if (cfg->fd >= 0)
			close(cfg->fd);
		return e < 0 ? e : -EBUSY;
	}
	st.python = mt_python_init(&python_hex) == 0;
	st.python_hex = python_hex;
	/* STACK records carry source lines and CODE records no line tables,
	 * unless a test wants the tables to compare with
	 * (MEMTRACE_TEST_LINETABLES=1) or version 6 (MEMTRACE_TEST_FORMAT6=1,
	 * writer.c), which has no lines */
	const char *tables = getenv("MEMTRACE_TEST_LINETABLES");
	const char *v6 = getenv("MEMTRACE_TEST_FORMAT6");
	int lines = !(tables && tables[0] == '1' && !tables[1]) && !(v6 && *v6 == '1');
	mt_track_init(st.python, lines);

	fd = cfg->fd;
	if (fd < 0) {
		/* memtrace attach made the file, and removes it when it gives up
		 * waiting for the start: tracking must not begin after that */
		int create = cfg->flags & MT_HDR_ATTACHED ? 0 : O_CREAT;
		fd = mt_fd_high(open(cfg->path, O_WRONLY | create | O_TRUNC | O_CLOEXEC, 0600));
		if (fd < 0)
			return -errno;
	}
	h.flags = (cfg->flags & ~MT_HDR_LINES) | (lines ? MT_HDR_LINES : 0);
	/* native stacks need libunwind: without it, the capture says why */
	int native_failed = (h.flags & MT_HDR_NATIVE) && mt_native_start() < 0;
	if (native_failed)
		h.flags &= ~MT_HDR_NATIVE;
	h.pid = (uint32_t)getpid();
	h.python_hex = python_hex;
	h.start_ns = realtime_ns();
	h.interval_ms = cfg->interval_ms ? cfg->interval_ms : 10;
	h.page_size = (uint32_t)sysconf(_SC_PAGESIZE);
	/* a Tracker's main thread is the one that entered it, as memray's
	 * is: its hybrid stacks end at its outermost Python frame */
	h.main_tid = (h.flags & MT_HDR_TRACKER) ? (uint64_t)syscall(SYS_gettid) : (uint64_t)getpid();
	if (cfg->cmdline) {
		cmdline_len = cfg->cmdline_len < sizeof(cmdline) ? (uint32_t)cfg->cmdline_len
								 : (uint32_t)sizeof(cmdline);
		memcpy(cmdline, cfg->cmdline, cmdline_len);
		cmdline_given = 1;
	} else if (!(cfg->flags & MT_HDR_FORKED) || !cmdline_given) {
		cmdline_len = read_cmdline(cmdline, sizeof(cmdline));
		cmdline_given = 0;
	} /* else a followed child's capture: its parent's Tracker's */
	h.cmdline.p = cmdline;
	h.cmdline.len = cmdline_len;
	e = mt_writer_start(fd, &h);
	if (e < 0) {
		close(fd);
		return e;
	}
	if (cfg->root[0] && memchr(cfg->root, '\0', sizeof(cfg->root)))
		mt_writer_diag(MT_DIAG_TRACKER_ROOT, cfg->root);
	st.flags = h.flags;
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

	if (native_failed)
		mt_writer_diag(MT_DIAG_INFO, mt_native_error());
	if (st.flags & MT_HDR_NATIVE) {
		int own = mt_guard_enter();
		(void)mt_native_skipped_take();
		mt_track_native(1);
		mt_track_modules(1);
		if (own)
			mt_guard_leave();
	}

	mt_tracking = !deferred;
	mt_writer_on_tick(mt_pyadapt_tick);
	/* a fork child's GOTs are its parent's: patched already */
	mt_hooks_on_end(finish_at_end);
	e = cfg->flags & MT_HDR_FORKED ? 0 : mt_hooks_install();
	if (e < 0) {
		stop_locked("GOT patching failed", 0);
		return e;
	}
	/* a child forked before this (the program of an attach forks at any
	 * time) has GOTs that are not patched: it does not follow, it runs
	 * untracked */
	st.hooked = 1;
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
	mt_track_native(0);
	/* a fork child's hooks stay, passing calls through, as they do in a
	 * child that is not followed: walking the loaded objects could wait
	 * forever for a loader lock a thread of the parent held at the fork */
	st.hooked = 0; /* a child forked from here on does not follow */
	if (!(st.flags & MT_HDR_FORKED))
		mt_hooks_uninstall();
	if (st.python)
		mt_python_code_watch(0);
	if (st.pymem && in_python)
		mt_python_pymem_uninstall();
	mt_pyadapt_stop();
	if (in_python)
		mt_pyfeed_stop();
	else
		mt_python_feed(0, NULL); /* hooks left in, reporting to no one */
	st.active = 0;
	unsigned long skipped = st.flags & MT_HDR_NATIVE ? mt_native_skipped_take() : 0;
	if (skipped) {
		char msg[128];
		snprintf(msg, sizeof(msg),
			 "%lu native stacks left empty: the program was forking and "
			 "libunwind could not be used",
			 skipped);
		mt_writer_diag(MT_DIAG_INFO, msg);
	}
	int rc = mt_writer_stop(why);
	report_status(rc, rc == -MT_ECRASH ? "tracking stopped" : "cannot write the capture");
	mt_fatal_release();
	mt_fatal_unblock(&mask);
	return rc;
}

MT_EXPORT int memtrace_payload_start(const struct memtrace_config *cfg)
{
	mt_phdr_guard(); /* before the walks, and before our other fork handlers */
	int own = mt_guard_enter(), gil_state = 0;
	uint32_t python_hex;
	/* mt_pyhooks_gil_take() needs the Python binding, which start_locked() sets up
	 * only later: bind first, or a first start from Python (a Tracker)
	 * would skip the PyMem wrappers. */
	(void)mt_python_init(&python_hex);
	int gil = mt_pyhooks_gil_take(&gil_state);
	pthread_mutex_lock(&st.lock);
	int rc = start_locked(cfg, 0);
	/* attached, or started from Python */
	int set_up = rc == 0 && gil && python_setup_locked();
	pthread_mutex_unlock(&st.lock);
	if (set_up)
		python_setup_unlocked();
	if (gil)
		mt_pyhooks_gil_give(gil_state);
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

int mt_entry_forked(void)
{
	pthread_mutex_lock(&st.lock);
	int forked = st.active && st.pid == getpid() && (st.flags & MT_HDR_FORKED);
	pthread_mutex_unlock(&st.lock);
	return forked;
}

int mt_start_attached_python(void)
{
	int own = mt_guard_enter(), gil_state = 0, done = 0;
	/* this thread imports what the program may not have (pygate.h) */
	mt_pygate_enter();
	if (mt_pyhooks_gil_take(&gil_state)) {
		int gated = mt_pygate_register() == 0;
		pthread_mutex_lock(&st.lock);
		if (st.active && st.pid == getpid())
			done = python_setup_locked();
		if (done && !gated)
			mt_writer_diag(MT_DIAG_INFO, "could not register a Python fork hook: a "
						     "fork while tracking starts may hang its child");
		pthread_mutex_unlock(&st.lock);
		if (done)
			python_setup_unlocked();
		mt_pyhooks_gil_give(gil_state);
	}
	mt_pygate_leave();
	if (own)
		mt_guard_leave();
	return done;
}

MT_EXPORT int memtrace_payload_stop(void)
{
	int own = mt_guard_enter(), gil_state = 0;
	/* the GIL only to put PyMem domains back and the exit feed out */
	int python = st.pymem || mt_pyfeed_on();
	int gil = python && mt_pyhooks_gil_take(&gil_state);
	pthread_mutex_lock(&st.lock);
	if ((st.pymem || mt_pyfeed_on()) && !gil) {
		/* put in meanwhile (mt_start_attached_python()); the lock order
		 * is the GIL first */
		pthread_mutex_unlock(&st.lock);
		gil = mt_pyhooks_gil_take(&gil_state);
		pthread_mutex_lock(&st.lock);
	}
	int rc = stop_locked(NULL, gil);
	pthread_mutex_unlock(&st.lock);
	if (gil)
		mt_pyhooks_gil_give(gil_state);
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

	if (env)
		mt_phdr_guard(); /* before the walks, and before our other fork handlers */
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
		cfg.fd = mt_fd_high(run.capture_fd);
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
