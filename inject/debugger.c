/* SPDX-License-Identifier: MIT */
/*
 * The debugger fallback: run gdb (or lldb) with scripts/attach-*.py, which
 * waits for a Python-level safe point and calls dlopen and the payload's
 * memtrace_attach_entry_str("<flags> <interval> <path>"). Never killed
 * half-way: a debugger killed while it has breakpoints planted would leave
 * them behind, so the script bounds its own waits.
 */
#include "inject/inject.h"
#include "format/error.h"
#include "payload/memtrace-payload.h"
#include "util/error.h"

#include <errno.h>    /* errno */
#include <glob.h>     /* glob */
#include <limits.h>   /* PATH_MAX */
#include <stdio.h>    /* snprintf */
#include <stdlib.h>   /* setenv */
#include <string.h>   /* strrchr */
#include <sys/wait.h> /* waitpid */
#include <unistd.h>   /* fork, execvp */

#ifndef MT_SOURCE_SCRIPTS
#define MT_SOURCE_SCRIPTS ""
#endif

/* scripts/ of the source tree for a build tree, <prefix>/share/memtrace
 * for an installed memtrace, the payload's directory for a wheel (the
 * memtrace package in site-packages); MEMTRACE_SCRIPTS overrides them. */
static int find_script(const char *name, const char *payload, char *out, size_t cap)
{
	char self[PATH_MAX];
	const char *env = getenv("MEMTRACE_SCRIPTS");
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[n > 0 ? n : 0] = '\0';
	char *slash = strrchr(self, '/');
	if (slash)
		*slash = '\0';
	const char *dirs[4] = { env, NULL, NULL, MT_SOURCE_SCRIPTS };
	char share[PATH_MAX + 32], beside[PATH_MAX];
	snprintf(share, sizeof(share), "%s/../share/memtrace", self);
	dirs[1] = self[0] ? share : NULL;
	snprintf(beside, sizeof(beside), "%s", payload);
	slash = strrchr(beside, '/');
	if (slash) {
		*slash = '\0';
		dirs[2] = beside;
	}
	for (int i = 0; i < 4; i++) {
		if (!dirs[i] || !dirs[i][0])
			continue;
		int len = snprintf(out, cap, "%s/%s", dirs[i], name);
		if (len > 0 && (size_t)len < cap && access(out, R_OK) == 0)
			return 0;
	}
	return mt_error(-ENOENT, "cannot find %s (set MEMTRACE_SCRIPTS)", name);
}

static int on_path(const char *prog)
{
	const char *path = getenv("PATH");
	char buf[PATH_MAX];
	if (!path)
		path = "/usr/bin:/bin";
	while (*path) {
		size_t len = strcspn(path, ":");
		snprintf(buf, sizeof(buf), "%.*s/%s", (int)len, path, prog);
		if (len && access(buf, X_OK) == 0)
			return 1;
		path += len + (path[len] == ':');
	}
	return 0;
}

/* Debian's lldb-14 looks for its Python module in .../python3/dist-packages
 * while python3-lldb-14 installs it under .../python3.X/dist-packages, so
 * its script interpreter fails to start ("No module named
 * 'lldb.embedded_interpreter'"). Point PYTHONPATH at wherever it is. */
static void lldb_python_path(void)
{
	glob_t g;
	if (glob("/usr/lib/llvm-*/lib/python3*/dist-packages/lldb/embedded_interpreter.py", 0, NULL,
		 &g) != 0)
		return;
	char dir[PATH_MAX + 16];
	snprintf(dir, sizeof(dir), "%s", g.gl_pathv[g.gl_pathc - 1]);
	globfree(&g);
	char *cut = strstr(dir, "/lldb/embedded_interpreter.py");
	if (!cut)
		return;
	*cut = '\0';
	/* lldb's Python is the system's (/usr/lib/llvm-N/lib/python3.X):
	 * with another python3.X first on PATH (pyenv's, a venv's) it takes
	 * that one's prefix and cannot import its own modules. Its home is
	 * /usr, unless the user says otherwise. */
	const char *ver = strstr(dir, "/python3.");
	char stdlib[PATH_MAX + 32];
	if (ver && (size_t)snprintf(stdlib, sizeof(stdlib), "/usr/lib%.*s/os.py",
				    (int)strcspn(ver + 1, "/") + 1, ver) < sizeof(stdlib) &&
	    access(stdlib, R_OK) == 0)
		setenv("PYTHONHOME", "/usr", 0);
	const char *old = getenv("PYTHONPATH");
	char val[2 * PATH_MAX + 32];
	snprintf(val, sizeof(val), "%s%s%s", dir, old && *old ? ":" : "", old ? old : "");
	setenv("PYTHONPATH", val, 1);
}

int mt_inject_debugger(const struct mt_target *t, enum mt_inject_method method,
		       const char *payload, const char *payload_here,
		       const struct memtrace_config *cfg, int verbose)
{
	int gdb = method != MT_METHOD_LLDB;
	const char *prog = gdb ? "gdb" : "lldb";
	char script[PATH_MAX], spec[MEMTRACE_PATH_MAX + 64], pidstr[32], cmd[PATH_MAX + 64];
	char sysroot[64], exe[64];
	int out[2], status;

	if (!on_path(prog))
		return mt_error(-ENOENT, "%s is not installed (needed for --method %s)", prog, prog);
	if (find_script(gdb ? "attach-gdb.py" : "attach_lldb.py", payload_here, script,
			sizeof(script)) < 0)
		return -ENOENT;
	snprintf(spec, sizeof(spec), "%u %u %s", cfg->flags, cfg->interval_ms, cfg->path);
	snprintf(pidstr, sizeof(pidstr), "%d", (int)t->pid);
	snprintf(cmd, sizeof(cmd), "command script import %s", script);
	snprintf(sysroot, sizeof(sysroot), "set sysroot /proc/%d/root", (int)t->pid);
	snprintf(exe, sizeof(exe), "/proc/%d/exe", (int)t->pid);
	if (pipe(out) != 0)
		return mt_error(-errno, "cannot create a pipe");
	fflush(stderr);
	pid_t child = fork();
	if (child < 0)
		return mt_error(-errno, "cannot fork");
	if (child == 0) {
		dup2(out[1], 1);
		dup2(out[1], 2);
		close(out[0]);
		close(out[1]);
		setenv("MEMTRACE_PAYLOAD", payload, 1);
		setenv("MEMTRACE_SPEC", spec, 1);
		setenv("MEMTRACE_TIMEOUT", "10", 0);
		/* gdb's default sysroot "target:" opens the target's files
		 * in its mount namespace but from that namespace's root, not
		 * from the target's chroot: name them through /proc/PID/root,
		 * and the executable through /proc/PID/exe. */
		if (gdb && t->other_root)
			execlp("gdb", "gdb", "-batch", "-nx", "-q", "-iex", sysroot, "-iex",
			       "set auto-solib-add off", "-x", script, exe, "-p", pidstr, (char *)NULL);
		else if (gdb)
			execlp("gdb", "gdb", "-batch", "-nx", "-q", "-p", pidstr, "-iex",
			       "set auto-solib-add off", "-x", script, (char *)NULL);
		else {
			lldb_python_path();
			execlp("lldb", "lldb", "--batch", "-p", pidstr, "-o", cmd, (char *)NULL);
		}
		_exit(127);
	}
	close(out[1]);
	/* Keep the debugger's last words for the error message. */
	char buf[8192], last[1024] = "";
	size_t used = 0;
	ssize_t r;
	while ((r = read(out[0], buf + used, sizeof(buf) - 1 - used)) > 0 || (r < 0 && errno == EINTR)) {
		if (r < 0)
			continue;
		used += (size_t)r;
		buf[used] = '\0';
		char *nl;
		while ((nl = strchr(buf, '\n'))) {
			*nl = '\0';
			if (verbose)
				fprintf(stderr, "%s\n", buf);
			if (strstr(buf, "memtrace-"))
				snprintf(last, sizeof(last), "%.1000s", buf);
			memmove(buf, nl + 1, used - (size_t)(nl + 1 - buf) + 1);
			used -= (size_t)(nl + 1 - buf);
		}
		if (used == sizeof(buf) - 1)
			used = 0;
	}
	close(out[0]);
	while (waitpid(child, &status, 0) < 0)
		if (errno != EINTR)
			return mt_error(-errno, "cannot wait for %s", prog);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
		return mt_error(-ENOENT, "cannot run %s", prog);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 2)
		return MT_INJECT_NO_SAFE_POINT; /* the caller says so */
	mt_error(0, "%s could not attach to pid %d%s%s", prog, (int)t->pid, last[0] ? ": " : "",
		 last);
	return -MT_EPAYLOAD;
}
