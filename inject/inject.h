/* SPDX-License-Identifier: MIT */
#ifndef MT_INJECT_INJECT_H
#define MT_INJECT_INJECT_H
/*
 * The injector: loads the payload into a running CPython process and calls
 * its attach entry, then lets go. Runs in the memtrace CLI, never in the
 * target. Every function prints its own one-line error (util/error.h) where
 * the failure is understood and returns a negative code; none exits.
 *
 * Contract with the target: nothing is left stopped and no code byte is
 * left modified on any return path. The only lasting change is the mapped
 * payload and whatever its entry starts (its own thread).
 */
#include <errno.h>     /* EAGAIN */
#include <limits.h>    /* PATH_MAX */
#include <stddef.h>    /* size_t */
#include <sys/types.h> /* pid_t, uid_t */

struct memtrace_config;
struct mt_ctl_reply;
struct mt_ctl_request;

/* What pre-flight learned about the target. */
struct mt_target {
	pid_t pid;          /* as seen from here */
	pid_t nspid;        /* as seen by the target itself (its pid namespace) */
	uid_t uid;          /* real uid of the target */
	gid_t gid;
	int py_minor;       /* 3.<py_minor> */
	int other_mntns;    /* target lives in another mount namespace */
	int other_root;     /* its / is not ours (chroot, container): paths in
	                     * /proc/PID/maps then name files in another view */
	char python[PATH_MAX]; /* module that defines Py_GetVersion */
};

enum mt_inject_method {
	MT_METHOD_AUTO,
	MT_METHOD_PTRACE,
	MT_METHOD_GDB,
	MT_METHOD_LLDB,
};

/* Returned by mt_inject_ptrace() when no thread reached a safe point within
 * the retry budget (the target is untouched; a debugger may still work). */
#define MT_INJECT_NO_SAFE_POINT (-EAGAIN)

/* mt_inject_inspect() - pre-flight without stopping anything: the process
 * exists, is a CPython 3.8-3.13 we may ptrace, and is not stopped or
 * already traced. Fills @t. Returns 0 or a negative error (printed). */
int mt_inject_inspect(pid_t pid, struct mt_target *t);

/* mt_inject_payload_check() - 0 if @path is an ELF file that exports the
 * payload's entry (memtrace_attach_entry), -ENOEXEC if it is no 64-bit
 * ELF file, -ENOENT if it exports no such entry, or -errno from opening
 * it. Prints nothing. (inject/elf.c) */
int mt_inject_payload_check(const char *path);

/* mt_inject_not_a_process() - -EINVAL after saying so if @pid is a kernel
 * thread, or a thread other than its process's first (/proc answers for
 * those too: the message names the process); 0 for a process, or for a
 * pid that names nothing (the caller says so). */
int mt_inject_not_a_process(pid_t pid);

/* mt_inject_nspid() - @pid as the process sees itself (innermost pid
 * namespace), or @pid when /proc does not say; -ESRCH if there is no such
 * process. Prints nothing. */
pid_t mt_inject_nspid(pid_t pid);

/* mt_inject_state() - the state letter of /proc/@pid/status (R, S, T, t,
 * Z...), or 0 if there is no such process; R for a process whose main
 * thread ended before its others (its status says Z). Prints nothing. */
char mt_inject_state(pid_t pid);
/* mt_inject_gone() - whether @pid has exited (gone, or a zombie). */
int mt_inject_gone(pid_t pid);

/* mt_inject_visible_path() - the payload @path (absolute) as the target
 * sees it. Paths are resolved inside the target's root (/proc/PID/root)
 * component by component, its links read and resolved against that root,
 * never followed from ours. If the target sees the same file at @path,
 * that is @path itself; otherwise the file is copied to
 * memtrace-<uid>/ in the target's /tmp and that path is returned with the
 * target's links resolved, so that /proc/PID/root followed by it names the
 * copy here too. Writes to @out (@cap bytes). Returns 0 or a negative
 * error (printed). */
int mt_inject_visible_path(const struct mt_target *t, const char *path, char *out,
			   size_t cap);

/* mt_inject_ptrace() - dlopen @payload (a path valid in the target) in one
 * thread stopped at a safe point and call memtrace_attach_entry(@cfg).
 * @payload_here is the same file as reachable from this process, used to
 * look up the entry's offset. Returns 0 once the entry returned 0,
 * MT_INJECT_NO_SAFE_POINT (not printed), or another negative error
 * (printed; the entry's own -errno included). */
int mt_inject_ptrace(const struct mt_target *t, const char *payload, const char *payload_here,
		     const struct memtrace_config *cfg, int verbose);

/* mt_inject_debugger() - the same through gdb or lldb running
 * scripts/attach-gdb.py or scripts/attach_lldb.py (looked for beside
 * @payload_here too, the payload as this process found it). Returns 0,
 * MT_INJECT_NO_SAFE_POINT (not printed: the main thread ran no bytecode
 * within the script's time), or another negative error (printed). */
int mt_inject_debugger(const struct mt_target *t, enum mt_inject_method method,
		       const char *payload, const char *payload_here,
		       const struct memtrace_config *cfg, int verbose);

/* Returned by the control client when the target is in another network
 * namespace and we may not enter it (no CAP_SYS_ADMIN). */
#define MT_CONTROL_OTHER_NETNS (-ENETUNREACH)
/* Returned by the control client when the target was seen stopped (a
 * SIGSTOP, a debugger) while it waited: before the request was sent
 * (nothing was asked), or after (the payload carries it out once the
 * process is resumed). */
#define MT_CONTROL_STOPPED (-EHOSTDOWN)
#define MT_CONTROL_STOPPED_ASKED (-ESTRPIPE)

/* mt_control_find() - the name of the control socket of the payload in
 * process @pid (@nspid in its own pid namespace), without its leading NUL:
 * a listening socket the process itself holds. Returns 0, -ECONNREFUSED
 * when it has none (the payload is not loaded or not serving), -ESRCH, or
 * another negative error. Prints nothing. */
int mt_control_find(pid_t pid, pid_t nspid, char *name, size_t cap);

/* mt_control_ask() - one request/reply exchange on that socket, in the
 * protocol of format/ctlproto.h: @req is sent (with descriptor @pass_fd,
 * or none if -1), the reply line is stored in @line (without its newline)
 * and parsed into *@reply, whose text fields borrow @line. A reply that
 * does not parse has kind MT_CTL_REPLY__COUNT and no fields; @line holds
 * it. Every step (connecting included) ends by @timeout_ms. Returns 0,
 * -ECONNREFUSED when nothing listens, -EPERM when the listener is not the
 * target, MT_CONTROL_OTHER_NETNS, MT_CONTROL_STOPPED(_ASKED), -ESRCH when it
 * exited meanwhile, -ETIMEDOUT, -EINVAL or -ENOSPC when @req cannot be
 * encoded, or another negative error. Prints nothing. */
int mt_control_ask(pid_t pid, pid_t nspid, const struct mt_ctl_request *req, int pass_fd,
		   char *line, size_t cap, struct mt_ctl_reply *reply, int timeout_ms);

#endif /* MT_INJECT_INJECT_H */
