/* SPDX-License-Identifier: MIT */
/*
 * The ptrace injector (x86_64): stop one thread at a time, accept it only
 * at a safe point, and make it call dlopen(payload) and the payload's
 * attach entry. The other threads keep running throughout, so locks they
 * hold get released. Never allocates in the target (dlopen itself does,
 * from a safe point), never leaves a thread stopped or a code byte changed.
 */
#include "inject/inject.h"
#include "inject/internal.h"
#include "inject/unwind.h"
#include "format/error.h"
#include "payload/memtrace-payload.h"
#include "util/clock.h"
#include "util/error.h"

#include <dirent.h>       /* opendir */
#include <elf.h>          /* NT_X86_XSTATE */
#include <errno.h>        /* errno */
#include <signal.h>       /* sigprocmask */
#include <stdio.h>        /* snprintf */
#include <stdlib.h>       /* strtol */
#include <string.h>       /* memcpy */
#include <sys/ptrace.h>   /* ptrace */
#include <sys/stat.h>     /* stat */
#include <sys/syscall.h>  /* SYS_tgkill */
#include <sys/sysmacros.h> /* major */
#include <sys/uio.h>      /* struct iovec */
#include <sys/user.h>     /* user_regs_struct */
#include <sys/wait.h>     /* waitpid */
#include <time.h>         /* nanosleep */
#include <unistd.h>       /* syscall */

#if !defined(__x86_64__)
#error "the ptrace injector supports x86_64 only"
#endif

#define SAFE_POINT_BUDGET_MS 2000
#define RETRY_PAUSE_MS 10
#define CALL_TIMEOUT_MS 30000
#define MAX_FRAMES 256
#define MAX_TIDS 4096
#define MAX_PENDING 16

enum module_class { MOD_UNKNOWN, MOD_LOADER, MOD_LIBC, MOD_PYTHON, MOD_OTHER };

struct injector {
	const struct mt_target *t;
	struct mt_maps maps;
	int verbose;
	/* in the target's libc (or libdl before glibc 2.34) */
	uint64_t dlopen_fn, dlerror_fn;
	int dlopen_flags;
	uint64_t stub;          /* libc's ELF entry: no thread ever runs there */
	uint8_t stub_saved[8];
	int stub_written;
	/* safe-point judgement */
	uint64_t libc_bias;
	uint64_t wait_fns[64];  /* exported futex-waiting entries of libc */
	size_t nwait;
	uint64_t call_fns[128]; /* exported blocking system call wrappers */
	size_t ncall;
	uint64_t exe_entry;     /* _start of the executable */
	dev_t payload_dev;
	ino_t payload_ino;
	struct mt_unwinder unw;
	/* signals that arrived while a thread was hijacked */
	int pending[MAX_PENDING];
	int npending;
};

static void pause_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static int is_libc_like(const char *base)
{
	static const char *const names[] = { "libc.so", "libc-2.", "libpthread.so", "libpthread-",
					     "libdl.so", "libdl-", "libjemalloc", "libtcmalloc",
					     "libmimalloc", "libhoard", NULL };
	for (const char *const *n = names; *n; n++)
		if (!strncmp(base, *n, strlen(*n)))
			return 1;
	return 0;
}

static enum module_class classify(const struct injector *in, uint64_t ip)
{
	const struct mt_map *m = mt__maps_at(&in->maps, ip);
	if (!m || !strchr(m->perms, 'x'))
		return MOD_UNKNOWN;
	if (m->path[0] != '/')
		return m->path[0] == '[' ? MOD_OTHER : MOD_UNKNOWN; /* [vdso] */
	const char *base = mt__basename(m->path);
	if (!strncmp(base, "ld-linux", 8) || !strncmp(base, "ld-musl", 7) || !strncmp(base, "ld-2.", 5) ||
	    !strncmp(base, "ld.so", 5))
		return MOD_LOADER;
	if (is_libc_like(base))
		return MOD_LIBC;
	if (!strcmp(m->path, in->t->python))
		return MOD_PYTHON;
	return MOD_OTHER;
}

/* Blocking system calls during which a thread holds no libc lock. futex
 * is judged separately: only inside an exported wait function. */
static int syscall_allowed(long nr)
{
	switch (nr) {
	case SYS_read: case SYS_readv: case SYS_recvfrom: case SYS_recvmsg:
	case SYS_accept: case SYS_accept4: case SYS_poll: case SYS_ppoll:
	case SYS_select: case SYS_pselect6: case SYS_epoll_wait: case SYS_epoll_pwait:
	case SYS_nanosleep: case SYS_clock_nanosleep: case SYS_wait4: case SYS_waitid:
	case SYS_pause: case SYS_rt_sigtimedwait: case SYS_restart_syscall:
#ifdef SYS_epoll_pwait2
	case SYS_epoll_pwait2:
#endif
		return 1;
	}
	return 0;
}

static int in_set(const uint64_t *set, size_t n, uint64_t start)
{
	for (size_t i = 0; i < n; i++)
		if (set[i] == start)
			return 1;
	return 0;
}

/* The safe-point rule. Unwinds @tid (stopped) and accepts it only if no
 * frame is a signal frame or in the loader; libc frames are allowed only
 * as the innermost group when that group is blocked in an allow-listed
 * system call, and as the outermost thread-entry frames. Names are never
 * trusted: ranges come from the unwind tables. Returns 1 (safe) or 0 with
 * *why set. */
static int judge(struct injector *in, pid_t tid, long orig_rax, const char **why)
{
	uint64_t start[MAX_FRAMES];
	enum module_class cls[MAX_FRAMES];
	unw_cursor_t c;
	int n = 0, complete = 0, python = 0;

	*why = "cannot unwind";
	if (mt__unwinder_begin(&in->unw, tid, &c) < 0)
		return 0;
	while (n < MAX_FRAMES) {
		unw_word_t w;
		unw_proc_info_t pi;
		if (unw_get_reg(&c, UNW_REG_IP, &w) < 0)
			goto unsafe;
		if (unw_is_signal_frame(&c) > 0) {
			*why = "in a signal handler";
			goto unsafe;
		}
		start[n] = unw_get_proc_info(&c, &pi) == 0 ? pi.start_ip : 0;
		/* a return address may sit just past its function's end */
		cls[n] = classify(in, n ? w - 1 : w);
		python |= cls[n] == MOD_PYTHON;
		n++;
		int r = unw_step(&c);
		if (r == 0) {
			complete = 1;
			break;
		}
		if (r < 0)
			break;
	}
	mt__unwinder_end(&in->unw);

	for (int i = 0; i < n; i++) {
		if (cls[i] == MOD_LOADER) {
			*why = "in the dynamic loader";
			return 0;
		}
	}
	if (!complete) {
		*why = "the stack does not unwind to its bottom";
		return 0;
	}
	if (!python) {
		*why = "no Python frame on the stack";
		return 0;
	}
	/* Innermost libc group: a blocking system call, entered through
	 * one of libc's exported wrappers straight from outside libc (read
	 * called by fread would hold the FILE lock). */
	int top = 0;
	while (top < n && cls[top] == MOD_LIBC)
		top++;
	if (top) {
		uint64_t entry = start[top - 1] ? start[top - 1] - in->libc_bias : 0;
		if (orig_rax < 0) {
			*why = "running inside libc";
			return 0;
		}
		if (orig_rax == SYS_futex) {
			if (!in_set(in->wait_fns, in->nwait, entry)) {
				*why = "waiting on a libc-internal lock";
				return 0;
			}
		} else if (!syscall_allowed(orig_rax)) {
			*why = "inside a libc system call that may hold a lock";
			return 0;
		} else if (!in_set(in->call_fns, in->ncall, entry)) {
			*why = "inside libc code that made a blocking system call";
			return 0;
		}
	}
	/* outermost: _start, then libc's start-up or thread-entry frames */
	int bottom = n - 1;
	if (bottom >= top && start[bottom] && start[bottom] == in->exe_entry)
		bottom--;
	while (bottom >= top && cls[bottom] == MOD_LIBC)
		bottom--;
	for (int i = top; i <= bottom; i++) {
		if (cls[i] == MOD_LIBC) {
			*why = "libc code further up the stack";
			return 0;
		}
		if (cls[i] == MOD_UNKNOWN) {
			*why = "unknown code on the stack";
			return 0;
		}
	}
	return 1;
unsafe:
	mt__unwinder_end(&in->unw);
	return 0;
}

/* Waits for @tid to stop (or end). SIGCHLD is blocked by the caller, so
 * sigtimedwait() sleeps until the kernel reports a change. Returns 0 with
 * *status set, or -ETIMEDOUT. */
static int wait_tid(pid_t tid, int *status, int timeout_ms, const char *progress)
{
	int64_t deadline = mt_now_ms() + timeout_ms, next_note = mt_now_ms() + 5000;
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	for (;;) {
		pid_t r = waitpid(tid, status, __WALL | WNOHANG);
		if (r == tid)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
		int64_t now = mt_now_ms();
		if (now >= deadline)
			return -ETIMEDOUT;
		if (progress && now >= next_note) {
			mt_warning("%s (still waiting)", progress);
			next_note = now + 5000;
		}
		int64_t left = deadline - now;
		if (left > 1000)
			left = 1000;
		struct timespec ts = { (time_t)(left / 1000), (long)(left % 1000) * 1000000L };
		sigtimedwait(&chld, NULL, &ts);
	}
}

static void queue_signal(struct injector *in, int sig)
{
	if (in->npending < MAX_PENDING)
		in->pending[in->npending++] = sig;
}

/* Seizes @tid and brings it to a ptrace-stop. Signals that arrive first
 * are delivered right away: nothing is hijacked yet. Returns 0 (stopped),
 * -ESRCH (thread gone), or -errno from PTRACE_SEIZE. */
static int seize_stop(pid_t tid)
{
	int status;
	if (ptrace(PTRACE_SEIZE, tid, NULL, NULL) != 0)
		return -errno;
	if (ptrace(PTRACE_INTERRUPT, tid, NULL, NULL) != 0) {
		int e = -errno;
		ptrace(PTRACE_DETACH, tid, NULL, NULL);
		return e;
	}
	for (;;) {
		int rc = wait_tid(tid, &status, CALL_TIMEOUT_MS, "a thread does not stop");
		if (rc < 0)
			return rc; /* cannot detach a running tracee; the kernel will */
		if (WIFEXITED(status) || WIFSIGNALED(status))
			return -ESRCH;
		if (!WIFSTOPPED(status))
			continue;
		if ((status >> 16) == PTRACE_EVENT_STOP)
			return 0;
		if ((status >> 16) != 0) { /* an event we did not ask for */
			ptrace(PTRACE_CONT, tid, NULL, NULL);
			continue;
		}
		ptrace(PTRACE_CONT, tid, NULL, (void *)(long)WSTOPSIG(status));
	}
}

static int list_tids(pid_t pid, pid_t *out, int cap)
{
	char path[64];
	int n = 0;
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return -errno;
	out[n++] = pid; /* the main thread first */
	struct dirent *de;
	while ((de = readdir(d)) && n < cap) {
		pid_t tid = (pid_t)strtol(de->d_name, NULL, 10);
		if (tid > 0 && tid != pid)
			out[n++] = tid;
	}
	closedir(d);
	return n;
}

/* Stops threads one at a time until one is at a safe point; returns its
 * tid, left stopped, or MT_INJECT_NO_SAFE_POINT. */
static int pick_thread(struct injector *in)
{
	static pid_t tids[MAX_TIDS];
	int64_t deadline = mt_now_ms() + SAFE_POINT_BUDGET_MS;
	const char *last_why = "no thread";
	int tries = 0;

	for (;;) {
		int n = list_tids(in->t->pid, tids, MAX_TIDS);
		if (n < 0)
			return mt_error(-ESRCH, "pid %d exited", (int)in->t->pid);
		for (int i = 0; i < n; i++) {
			struct user_regs_struct regs;
			const char *why;
			int rc = seize_stop(tids[i]);
			if (rc == -ESRCH)
				continue;
			if (rc == -EPERM && tries == 0 && i == 0)
				return mt__tracer_error(in->t->pid, tids[i]);
			if (rc < 0)
				continue;
			tries++;
			if (ptrace(PTRACE_GETREGS, tids[i], NULL, &regs) != 0) {
				ptrace(PTRACE_DETACH, tids[i], NULL, NULL);
				continue;
			}
			if (judge(in, tids[i], (long)regs.orig_rax, &why))
				return tids[i];
			last_why = why;
			if (in->verbose > 1)
				mt_note("thread %d not at a safe point: %s", (int)tids[i], why);
			ptrace(PTRACE_DETACH, tids[i], NULL, NULL);
		}
		if (mt_now_ms() >= deadline)
			break;
		pause_ms(RETRY_PAUSE_MS);
	}
	if (in->verbose)
		mt_warning("no thread of pid %d reached a safe point in %d tries (last: %s)",
			   (int)in->t->pid, tries, last_why);
	return MT_INJECT_NO_SAFE_POINT;
}

/* Runs fn(a0, a1) on stopped @tid from @saved's stack: the stub at
 * in->stub is "call *%rax; int3". Returns 0 with *ret set, or a negative
 * error (printed). The caller restores the registers. */
static int remote_call(struct injector *in, pid_t tid, const struct user_regs_struct *saved,
		       uint64_t sp, uint64_t fn, uint64_t a0, uint64_t a1, uint64_t *ret)
{
	struct user_regs_struct regs = *saved;
	int status;

	regs.rip = in->stub;
	regs.rax = fn;
	regs.rdi = a0;
	regs.rsi = a1;
	regs.rsp = sp;
	/* -1: the kernel must not restart an interrupted system call into
	 * our call; the saved registers keep their own restart state. */
	regs.orig_rax = (unsigned long long)-1;
	regs.eflags &= ~(0x400ull | 0x100ull); /* DF (ABI) and TF */
	if (ptrace(PTRACE_SETREGS, tid, NULL, &regs) != 0)
		return mt_error(-errno, "cannot set the registers of thread %d", (int)tid);
	if (ptrace(PTRACE_CONT, tid, NULL, NULL) != 0)
		return mt_error(-errno, "cannot resume thread %d", (int)tid);
	for (;;) {
		int rc = wait_tid(tid, &status, 24 * 3600 * 1000,
				  "the call into the target has not returned yet");
		if (rc < 0)
			return mt_error(rc, "waiting for thread %d", (int)tid);
		if (WIFEXITED(status) || WIFSIGNALED(status))
			return mt_error(-ESRCH, "pid %d exited during the call", (int)in->t->pid);
		if (!WIFSTOPPED(status))
			continue;
		int sig = WSTOPSIG(status), event = status >> 16;
		if (event) {
			/* a group-stop (someone sent SIGSTOP): finish the
			 * call, then stop again */
			if (event == PTRACE_EVENT_STOP &&
			    (sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU))
				queue_signal(in, sig);
			ptrace(PTRACE_CONT, tid, NULL, NULL);
			continue;
		}
		if (sig == SIGTRAP) {
			struct user_regs_struct now;
			if (ptrace(PTRACE_GETREGS, tid, NULL, &now) != 0)
				return mt_error(-errno, "cannot read the registers of thread %d", (int)tid);
			if (now.rip == in->stub + 3) {
				*ret = now.rax;
				return 0;
			}
		}
		if (sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE || sig == SIGSYS ||
		    sig == SIGABRT) {
			struct user_regs_struct now;
			siginfo_t si = { 0 };
			ptrace(PTRACE_GETREGS, tid, NULL, &now);
			ptrace(PTRACE_GETSIGINFO, tid, NULL, &si);
			return mt_error(-EFAULT, "the call into pid %d crashed (%s at pc 0x%llx, address %p)",
					(int)in->t->pid, strsignal(sig), now.rip, si.si_addr);
		}
		/* not now: a handler must not run in the middle of dlopen */
		queue_signal(in, sig);
		ptrace(PTRACE_CONT, tid, NULL, NULL);
	}
}

static int read_string(pid_t pid, uint64_t addr, char *buf, size_t cap)
{
	size_t got = 0;
	while (got + 1 < cap) {
		size_t chunk = 64;
		if (chunk > cap - 1 - got)
			chunk = cap - 1 - got;
		/* never cross a page in one read: the next may be unmapped */
		uint64_t page_left = 4096 - ((addr + got) & 4095);
		if (chunk > page_left)
			chunk = page_left;
		if (mt__mem_read(pid, addr + got, buf + got, chunk) < 0)
			break;
		void *nul = memchr(buf + got, '\0', chunk);
		got += chunk;
		if (nul)
			return 0;
	}
	buf[got] = '\0';
	return got ? 0 : -EFAULT;
}

/* Looks up dlopen (and dlerror) in the target's libc, or libdl / the
 * private __libc_dlopen_mode on glibc before 2.34, and the stub address. */
static int find_loader_functions(struct injector *in)
{
	static const char *const libc_names[] = { "libc", NULL };
	static const char *const libdl_names[] = { "libdl", NULL };
	static const char *const wait_names[] = {
		"sem_wait", "sem_timedwait", "sem_clockwait", "pthread_cond_wait",
		"pthread_cond_timedwait", "pthread_cond_clockwait", "pthread_join",
		"pthread_timedjoin_np", "pthread_clockjoin_np", NULL,
	};
	static const char *const call_names[] = {
		"read", "readv", "recv", "recvfrom", "recvmsg", "accept", "accept4", "poll",
		"ppoll", "select", "pselect", "epoll_wait", "epoll_pwait", "epoll_pwait2",
		"nanosleep", "clock_nanosleep", "usleep", "sleep", "wait", "wait3", "wait4",
		"waitpid", "waitid", "pause", "sigtimedwait", "sigwaitinfo", "sigwait",
		"__read", "__poll", "__select", "__nanosleep", "__wait", "__waitpid", NULL,
	};
	const struct mt_map *libc = mt__maps_find(&in->maps, libc_names);
	struct mt_elf e;
	uint64_t v;
	int rc;

	if (!libc)
		return mt_error(-ENOENT, "pid %d has no libc.so.6 mapped (static or musl?)",
				(int)in->t->pid);
	rc = mt__elf_open_map(&e, &in->maps, libc);
	if (rc < 0)
		return mt_error(rc, "cannot open the target's libc '%s'", libc->path);
	in->libc_bias = e.bias;
	in->stub = e.entry ? e.bias + e.entry : 0;
	in->dlopen_flags = 2; /* RTLD_NOW | RTLD_LOCAL */
	if (mt__elf_symbol(&e, "dlopen", &v) == 0) {
		in->dlopen_fn = e.bias + v;
		if (mt__elf_symbol(&e, "dlerror", &v) == 0)
			in->dlerror_fn = e.bias + v;
	}
	for (const char *const *w = wait_names; *w; w++)
		in->nwait += mt__elf_symbols(&e, *w, in->wait_fns + in->nwait,
					     sizeof(in->wait_fns) / sizeof(in->wait_fns[0]) - in->nwait);
	for (const char *const *w = call_names; *w; w++)
		in->ncall += mt__elf_symbols(&e, *w, in->call_fns + in->ncall,
					     sizeof(in->call_fns) / sizeof(in->call_fns[0]) - in->ncall);
	if (!in->dlopen_fn) {
		const struct mt_map *libdl = mt__maps_find(&in->maps, libdl_names);
		struct mt_elf d;
		if (libdl && mt__elf_open_map(&d, &in->maps, libdl) == 0) {
			if (mt__elf_symbol(&d, "dlopen", &v) == 0)
				in->dlopen_fn = d.bias + v;
			if (mt__elf_symbol(&d, "dlerror", &v) == 0)
				in->dlerror_fn = d.bias + v;
			mt__elf_close(&d);
		}
	}
	if (!in->dlopen_fn && mt__elf_symbol(&e, "__libc_dlopen_mode", &v) == 0) {
		in->dlopen_fn = e.bias + v;
		in->dlopen_flags = 2 | (int)0x80000000u; /* __RTLD_DLOPEN */
		in->dlerror_fn = 0;
	}
	mt__elf_close(&e);
	if (!in->dlopen_fn)
		return mt_error(-ENOENT, "no dlopen in the target's libc '%s'", libc->path);
	if (!in->stub)
		return mt_error(-ENOEXEC, "the target's libc '%s' has no entry point", libc->path);

	char exe[64];
	struct stat sb;
	snprintf(exe, sizeof(exe), "/proc/%d/exe", (int)in->t->pid);
	if (stat(exe, &sb) == 0) {
		for (size_t i = 0; i < in->maps.n; i++) {
			const struct mt_map *m = &in->maps.v[i];
			if (m->ino == (uint64_t)sb.st_ino && m->offset == 0 &&
			    mt__elf_open_map(&e, &in->maps, m) == 0) {
				in->exe_entry = e.bias + e.entry;
				mt__elf_close(&e);
				break;
			}
		}
	}
	return 0;
}

/* Address of the payload's attach entry in the target, from a fresh map
 * (dlopen just added it) and our own reading of the same file. */
static int find_entry(struct injector *in, const char *payload_here, uint64_t *addr)
{
	struct mt_maps m;
	struct mt_elf e;
	uint64_t v;
	int rc = mt__maps_read(in->t->pid, &m);
	if (rc < 0)
		return mt_error(rc, "cannot read /proc/%d/maps", (int)in->t->pid);
	const struct mt_map *base = NULL;
	for (size_t i = 0; i < m.n && !base; i++)
		if (m.v[i].ino == (uint64_t)in->payload_ino && m.v[i].offset == 0 &&
		    m.v[i].dev_major == major(in->payload_dev) &&
		    m.v[i].dev_minor == minor(in->payload_dev))
			base = &m.v[i];
	if (!base) {
		mt__maps_release(&m);
		return mt_error(-ENOENT, "the payload is not mapped in pid %d after dlopen",
				(int)in->t->pid);
	}
	rc = mt__elf_open_path(&e, payload_here);
	if (rc < 0) {
		mt__maps_release(&m);
		return mt_error(rc, "cannot read the payload '%s'", payload_here);
	}
	rc = mt__elf_symbol(&e, "memtrace_attach_entry", &v);
	*addr = base->start - e.vaddr0 + v;
	mt__elf_close(&e);
	mt__maps_release(&m);
	if (rc < 0)
		return mt_error(rc, "the payload '%s' does not export memtrace_attach_entry",
				payload_here);
	return 0;
}

/* Everything done in the hijacked thread; the caller restores it. */
static int hijacked(struct injector *in, pid_t tid, const struct user_regs_struct *saved,
		    const char *payload, const char *payload_here,
		    const struct memtrace_config *cfg, int *entry_rc)
{
	static const uint8_t code[3] = { 0xff, 0xd0, 0xcc }; /* call *%rax; int3 */
	uint64_t ret, entry = 0;
	size_t plen = strlen(payload) + 1;
	int rc;

	/* Data below the red zone, then room, then a 16-byte aligned rsp:
	 * after the call pushes its return address, rsp+8 is 16-aligned. */
	uint64_t cfg_addr = (saved->rsp - 128 - 256 - sizeof(*cfg)) & ~(uint64_t)15;
	uint64_t path_addr = (cfg_addr - plen) & ~(uint64_t)15;
	uint64_t sp = (path_addr - 256) & ~(uint64_t)15;
	const struct mt_map *stack = mt__maps_at(&in->maps, saved->rsp);
	if (!stack || path_addr < stack->start)
		return mt_error(-ENOSPC, "thread %d's stack has no room for the call", (int)tid);

	rc = mt__mem_read(in->t->pid, in->stub, in->stub_saved, sizeof(in->stub_saved));
	if (rc < 0)
		return mt_error(rc, "cannot read pid %d's memory", (int)in->t->pid);
	rc = mt__mem_write(in->t->pid, tid, in->stub, code, sizeof(code));
	if (rc < 0)
		return mt_error(rc, "cannot write pid %d's memory", (int)in->t->pid);
	in->stub_written = 1;
	if ((rc = mt__mem_write(in->t->pid, tid, path_addr, payload, plen)) < 0 ||
	    (rc = mt__mem_write(in->t->pid, tid, cfg_addr, cfg, sizeof(*cfg))) < 0)
		return mt_error(rc, "cannot write to thread %d's stack", (int)tid);

	rc = remote_call(in, tid, saved, sp, in->dlopen_fn, path_addr, (uint64_t)in->dlopen_flags,
			 &ret);
	if (rc < 0)
		return rc;
	if (!ret) {
		char msg[512] = "no message";
		uint64_t s;
		if (in->dlerror_fn && remote_call(in, tid, saved, sp, in->dlerror_fn, 0, 0, &s) == 0 && s)
			read_string(in->t->pid, s, msg, sizeof(msg));
		return mt_error(-MT_EPAYLOAD, "dlopen of '%s' failed in pid %d: %s", payload,
				(int)in->t->pid, msg);
	}
	rc = find_entry(in, payload_here, &entry);
	if (rc < 0)
		return rc;
	rc = remote_call(in, tid, saved, sp, entry, cfg_addr, 0, &ret);
	if (rc < 0)
		return rc;
	*entry_rc = (int)(int32_t)(uint32_t)ret;
	if (*entry_rc != 0)
		mt_error(*entry_rc < 0 ? *entry_rc : -EIO, "the payload's attach entry failed in pid %d",
			 (int)in->t->pid);
	return 0;
}

/* Puts the thread back exactly as it was and lets it go. */
static int release(struct injector *in, pid_t tid, const struct user_regs_struct *saved,
		   void *fp, size_t fplen, int fp_regset)
{
	int rc = 0;
	if (in->stub_written) {
		int e = mt__mem_write(in->t->pid, tid, in->stub, in->stub_saved,
				      sizeof(in->stub_saved));
		if (e < 0)
			rc = mt_error(e, "cannot restore pid %d's code at 0x%llx", (int)in->t->pid,
				      (unsigned long long)in->stub);
		in->stub_written = e < 0;
	}
	if (fp) {
		struct iovec iov = { fp, fplen };
		if (fp_regset ? ptrace(PTRACE_SETREGSET, tid, (void *)NT_X86_XSTATE, &iov)
			      : ptrace(PTRACE_SETFPREGS, tid, NULL, fp))
			rc = mt_error(-errno, "cannot restore the FPU state of thread %d", (int)tid);
	}
	if (ptrace(PTRACE_SETREGS, tid, NULL, saved) != 0)
		rc = mt_error(-errno, "cannot restore the registers of thread %d", (int)tid);
	if (ptrace(PTRACE_DETACH, tid, NULL, NULL) != 0 && errno != ESRCH)
		rc = mt_error(-errno, "cannot detach from thread %d", (int)tid);
	/* Re-raise what arrived meanwhile, now that handlers may run. */
	for (int i = 0; i < in->npending; i++)
		syscall(SYS_tgkill, in->t->pid, tid, in->pending[i]);
	in->npending = 0;
	return rc;
}

int mt_inject_ptrace(const struct mt_target *t, const char *payload, const char *payload_here,
		     const struct memtrace_config *cfg, int verbose)
{
	struct injector in = { .t = t, .verbose = verbose };
	struct user_regs_struct saved;
	static uint8_t fp[16384] __attribute__((aligned(64)));
	size_t fplen = sizeof(fp);
	int fp_regset = 1, have_fp = 0, entry_rc = 0, rc;
	sigset_t block, old;
	struct stat sb;

	if (strlen(payload) >= MEMTRACE_PATH_MAX)
		return mt_error(-ENAMETOOLONG, "payload path '%s'", payload);
	if (stat(payload_here, &sb) != 0)
		return mt_error(-errno, "cannot stat the payload '%s'", payload_here);
	in.payload_dev = sb.st_dev;
	in.payload_ino = sb.st_ino;
	rc = mt__maps_read(t->pid, &in.maps);
	if (rc < 0)
		return mt_error(rc, "cannot read /proc/%d/maps", (int)t->pid);
	rc = find_loader_functions(&in);
	if (rc < 0)
		goto out_maps;
	if (mt__unwinder_init(&in.unw, &in.maps) < 0) {
		rc = mt_error(-ENOMEM, "libunwind: cannot create an address space");
		goto out_maps;
	}

	/* While a thread is hijacked, dying would leave it to hit our int3:
	 * keep the usual terminating signals until it is released. SIGCHLD
	 * is blocked so that waits can sleep on it. */
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGHUP);
	sigaddset(&block, SIGQUIT);
	sigaddset(&block, SIGCHLD);
	sigprocmask(SIG_BLOCK, &block, &old);

	int tid = pick_thread(&in);
	if (tid < 0) {
		rc = tid;
		goto out_mask;
	}
	if (verbose)
		mt_note("calling into pid %d on thread %d", (int)t->pid, tid);
	if (ptrace(PTRACE_GETREGS, tid, NULL, &saved) != 0) {
		rc = mt_error(-errno, "cannot read the registers of thread %d", tid);
		ptrace(PTRACE_DETACH, tid, NULL, NULL);
		goto out_mask;
	}
	struct iovec iov = { fp, fplen };
	if (ptrace(PTRACE_GETREGSET, tid, (void *)NT_X86_XSTATE, &iov) == 0) {
		fplen = iov.iov_len;
		have_fp = 1;
	} else if (ptrace(PTRACE_GETFPREGS, tid, NULL, fp) == 0) {
		fp_regset = 0;
		fplen = sizeof(struct user_fpregs_struct);
		have_fp = 1;
	}
	if (!have_fp) {
		rc = mt_error(-errno, "cannot read the FPU state of thread %d", tid);
		ptrace(PTRACE_DETACH, tid, NULL, NULL);
		goto out_mask;
	}
	rc = hijacked(&in, tid, &saved, payload, payload_here, cfg, &entry_rc);
	int rrc = release(&in, tid, &saved, fp, fplen, fp_regset);
	if (rc == 0)
		rc = rrc < 0 ? rrc : entry_rc > 0 ? -EIO : entry_rc;
out_mask:
	sigprocmask(SIG_SETMASK, &old, NULL);
	mt__unwinder_release(&in.unw);
out_maps:
	mt__maps_release(&in.maps);
	return rc;
}
