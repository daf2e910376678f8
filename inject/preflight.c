/* SPDX-License-Identifier: MIT */
/*
 * Pre-flight checks before anything is stopped: the process exists, is a
 * supported CPython, may be traced by us; and paths as the target sees
 * them (mount namespaces). Reads /proc only.
 */
#include "inject/inject.h"
#include "inject/internal.h"
#include "format/error.h"
#include "util/error.h"

#include <ctype.h>    /* isdigit */
#include <errno.h>    /* errno */
#include <fcntl.h>    /* openat */
#include <limits.h>   /* PATH_MAX */
#include <signal.h>   /* kill */
#include <stdio.h>    /* fopen */
#include <stdlib.h>   /* strtol */
#include <string.h>   /* strncmp */
#include <sys/stat.h> /* stat */
#include <unistd.h>   /* readlink, geteuid */

struct proc_status {
	char name[64];
	char state;
	uid_t uid[4];
	gid_t gid[4];
	pid_t tracer;
	pid_t nspid;
	pid_t tgid;
	int kthread; /* 1 or 0 as "Kthread:" says (Linux 6.4+), -1 if unsaid */
	long threads;
	unsigned long long capeff;
};

static int read_status(pid_t pid, struct proc_status *st)
{
	char path[64], line[512];
	FILE *f;

	memset(st, 0, sizeof(*st));
	snprintf(path, sizeof(path), pid ? "/proc/%d/status" : "/proc/self/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	st->nspid = pid;
	st->tgid = pid;
	st->kthread = -1;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		if (!strncmp(line, "Name:", 5)) {
			snprintf(st->name, sizeof(st->name), "%s", line + 5 + strspn(line + 5, " \t"));
		} else if (!strncmp(line, "State:", 6)) {
			st->state = line[6 + strspn(line + 6, " \t")];
		} else if (!strncmp(line, "Uid:", 4)) {
			unsigned u[4] = { 0 };
			sscanf(line + 4, "%u %u %u %u", &u[0], &u[1], &u[2], &u[3]);
			for (int i = 0; i < 4; i++)
				st->uid[i] = u[i];
		} else if (!strncmp(line, "Gid:", 4)) {
			unsigned g[4] = { 0 };
			sscanf(line + 4, "%u %u %u %u", &g[0], &g[1], &g[2], &g[3]);
			for (int i = 0; i < 4; i++)
				st->gid[i] = g[i];
		} else if (!strncmp(line, "Tgid:", 5)) {
			st->tgid = (pid_t)strtol(line + 5, NULL, 10);
		} else if (!strncmp(line, "Threads:", 8)) {
			st->threads = strtol(line + 8, NULL, 10);
		} else if (!strncmp(line, "Kthread:", 8)) {
			st->kthread = (int)strtol(line + 8, NULL, 10);
		} else if (!strncmp(line, "TracerPid:", 10)) {
			st->tracer = (pid_t)strtol(line + 10, NULL, 10);
		} else if (!strncmp(line, "NSpid:", 6)) {
			/* the last field is the pid in the innermost namespace */
			char *p = line + 6, *last = NULL;
			for (char *tok = strtok(p, " \t"); tok; tok = strtok(NULL, " \t"))
				last = tok;
			if (last)
				st->nspid = (pid_t)strtol(last, NULL, 10);
		} else if (!strncmp(line, "CapEff:", 7)) {
			st->capeff = strtoull(line + 7, NULL, 16);
		}
	}
	fclose(f);
	return 0;
}

/* Whether @pid is a kernel thread: /proc/@pid/status says so (Kthread:),
 * or, on kernels before 6.4, the PF_KTHREAD flag of /proc/@pid/stat. */
static int kernel_thread(pid_t pid, const struct proc_status *st)
{
	char path[64], buf[1024];
	unsigned long flags = 0;
	FILE *f;

	if (st->kthread >= 0)
		return st->kthread;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* after "pid (comm) ", which may hold anything: state ppid pgrp
	 * session tty_nr tpgid flags */
	const char *p = strrchr(buf, ')');
	if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %lu", &flags) != 1)
		return 0;
	return (flags & 0x00200000) != 0; /* PF_KTHREAD, include/linux/sched.h */
}

int mt_inject_not_a_process(pid_t pid)
{
	struct proc_status st;

	if (pid <= 0 || read_status(pid, &st) < 0)
		return 0;
	if (kernel_thread(pid, &st))
		return mt_error(0, "pid %d (%s) is a kernel thread, not a Python process", (int)pid,
				st.name), -EINVAL;
	/* /proc/TID answers for a thread too, though ls does not show it */
	if (st.tgid > 0 && st.tgid != pid) {
		struct proc_status leader;
		if (read_status(st.tgid, &leader) < 0)
			snprintf(leader.name, sizeof(leader.name), "?");
		return mt_error(0, "pid %d is a thread of pid %d (%s): give the process's pid, %d",
				(int)pid, (int)st.tgid, leader.name, (int)st.tgid), -EINVAL;
	}
	return 0;
}

/* The reason ptrace is refused, as precisely as /proc tells us. */
static int permission_error(pid_t pid, const struct proc_status *tgt)
{
	struct proc_status self;
	char yama[16] = "";
	FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "re");
	if (f) {
		if (!fgets(yama, sizeof(yama), f))
			yama[0] = '\0';
		yama[strcspn(yama, "\n")] = '\0';
		fclose(f);
	}
	read_status(0, &self);
	int cap = (self.capeff >> 19) & 1; /* CAP_SYS_PTRACE */
	if (!cap && (tgt->uid[0] != self.uid[0] || tgt->uid[1] != self.uid[0] ||
		     tgt->uid[2] != self.uid[0]))
		return mt_error(0,
				"cannot trace pid %d: it runs as uid %u and we as uid %u without "
				"CAP_SYS_PTRACE (run memtrace as uid %u or as root)",
				(int)pid, (unsigned)tgt->uid[0], (unsigned)self.uid[0],
				(unsigned)tgt->uid[0]), -MT_EPTRACE;
	if (yama[0] && strcmp(yama, "0") != 0)
		return mt_error(0,
				"cannot trace pid %d: /proc/sys/kernel/yama/ptrace_scope is %s "
				"(set it to 0, or run memtrace with CAP_SYS_PTRACE)",
				(int)pid, yama), -MT_EPTRACE;
	return mt_error(0,
			"cannot trace pid %d: the kernel refused (not dumpable, or a security "
			"module forbids it; CAP_SYS_PTRACE may help)",
			(int)pid), -MT_EPTRACE;
}

static int read_python_version(const struct mt_maps *m, const struct mt_map *map,
			       struct mt_elf *e)
{
	uint64_t addr;
	uint32_t hex;

	/* 3.11+: the running interpreter's PY_VERSION_HEX */
	if (mt__elf_symbol(e, "Py_Version", &addr) == 0 &&
	    mt__mem_read(m->pid, e->bias + addr, &hex, sizeof(hex)) == 0 && (hex >> 24) == 3)
		return (int)((hex >> 16) & 0xff);
	/* libpython3.9.so.1.0, python3.9, python3.10d */
	const char *base = mt__basename(map->path), *p = strstr(base, "python3.");
	if (p && isdigit((unsigned char)p[8]))
		return (int)strtol(p + 8, NULL, 10);
	if (strstr(base, "python2"))
		return -2;
	return mt__elf_rodata_version(e);
}

/* The module that defines Py_GetVersion: the executable (Debian's
 * python3 links libpython statically) or a libpython3.X. */
static int find_python(pid_t pid, const struct mt_maps *m, struct mt_target *t)
{
	char exe[PATH_MAX + 1], link[64];
	ssize_t n;
	const struct mt_map *cands[8];
	size_t nc = 0;

	snprintf(link, sizeof(link), "/proc/%d/exe", (int)pid);
	n = readlink(link, exe, sizeof(exe) - 1);
	exe[n > 0 ? n : 0] = '\0';
	for (size_t i = 0; i < m->n && nc < 8; i++) {
		const struct mt_map *x = &m->v[i];
		if (x->offset != 0 || x->path[0] != '/')
			continue;
		const char *base = mt__basename(x->path);
		if (!strcmp(x->path, exe) || !strncmp(base, "libpython3", 10) ||
		    !strncmp(base, "python3", 7) || !strncmp(base, "libpython2", 10)) {
			int dup = 0;
			for (size_t j = 0; j < nc; j++)
				dup |= cands[j]->ino == x->ino && !strcmp(cands[j]->path, x->path);
			if (!dup)
				cands[nc++] = x;
		}
	}
	for (size_t i = 0; i < nc; i++) {
		struct mt_elf e;
		uint64_t v;
		if (mt__elf_open_map(&e, m, cands[i]) < 0)
			continue;
		if (mt__elf_symbol(&e, "Py_GetVersion", &v) == 0) {
			t->py_minor = read_python_version(m, cands[i], &e);
			snprintf(t->python, sizeof(t->python), "%s", cands[i]->path);
			mt__elf_close(&e);
			return 0;
		}
		mt__elf_close(&e);
	}
	return -MT_ENOPY;
}

static int same_mntns(pid_t pid)
{
	char a[64], b[64], pa[64], pb[64];
	ssize_t na, nb;
	snprintf(pa, sizeof(pa), "/proc/%d/ns/mnt", (int)pid);
	snprintf(pb, sizeof(pb), "/proc/self/ns/mnt");
	na = readlink(pa, a, sizeof(a) - 1);
	nb = readlink(pb, b, sizeof(b) - 1);
	if (na <= 0 || nb <= 0)
		return 1; /* unknown: assume shared, paths are checked anyway */
	a[na] = b[nb] = '\0';
	return strcmp(a, b) == 0;
}

static int same_root(pid_t pid)
{
	char path[64];
	struct stat a, b;
	snprintf(path, sizeof(path), "/proc/%d/root/", (int)pid);
	if (stat(path, &a) != 0 || stat("/", &b) != 0)
		return 1; /* unknown: paths are checked anyway */
	return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

pid_t mt_inject_nspid(pid_t pid)
{
	struct proc_status st;
	if (pid <= 0 || read_status(pid, &st) < 0)
		return -ESRCH;
	return st.nspid;
}

char mt_inject_state(pid_t pid)
{
	struct proc_status st;
	if (pid <= 0 || read_status(pid, &st) != 0)
		return 0;
	/* a main thread that ended before the others: the process runs on */
	if (st.state == 'Z' && st.threads > 1)
		return 'R';
	return st.state;
}

int mt_inject_gone(pid_t pid)
{
	char state = mt_inject_state(pid);
	/* a status not read (hidepid) is no sign: kill() says whether it is gone */
	return state == 'Z' || state == 'X' || (state == 0 && kill(pid, 0) != 0 && errno == ESRCH);
}

int mt_inject_inspect(pid_t pid, struct mt_target *t)
{
	struct proc_status st;
	struct mt_maps m;
	int rc;

	memset(t, 0, sizeof(*t));
	t->pid = pid;
	if (pid <= 0)
		return mt_error(-ESRCH, "invalid pid %d", (int)pid);
	rc = read_status(pid, &st);
	if (rc == -ENOENT || rc == -ESRCH)
		return mt_error(0, "no process with pid %d", (int)pid), -ESRCH;
	if (rc < 0)
		return mt_error(rc, "cannot read /proc/%d/status", (int)pid);
	t->nspid = st.nspid;
	t->uid = st.uid[0];
	t->gid = st.gid[0];
	if (st.state == 'Z' || st.state == 'X')
		return mt_error(0, "pid %d (%s) is exiting", (int)pid, st.name), -ESRCH;
	rc = mt_inject_not_a_process(pid);
	if (rc < 0)
		return rc;
	if (st.tracer)
		return mt__tracer_error(pid, pid);
	if (st.state == 'T' || st.state == 't')
		return mt_error(0, "pid %d (%s) is stopped; resume it first (kill -CONT %d)",
				(int)pid, st.name, (int)pid), -EINVAL;
	rc = mt__maps_read(pid, &m);
	if (rc == -EACCES || rc == -EPERM)
		return permission_error(pid, &st);
	if (rc < 0)
		return mt_error(rc, "cannot read /proc/%d/maps", (int)pid);
	rc = find_python(pid, &m, t);
	mt__maps_release(&m);
	if (rc < 0)
		return mt_error(0,
				"pid %d (%s) is not a CPython process: no python3.X executable or "
				"libpython3.X exports Py_GetVersion",
				(int)pid, st.name), -MT_ENOPY;
	if (t->py_minor < 8 || t->py_minor > 13) {
		if (t->py_minor == -2)
			return mt_error(0, "pid %d (%s) runs Python 2; supported: 3.8 to 3.13",
					(int)pid, st.name), -MT_ENOPY;
		if (t->py_minor < 0)
			return mt_error(0, "pid %d (%s): cannot tell the version of %s",
					(int)pid, st.name, t->python), -MT_ENOPY;
		return mt_error(0, "pid %d (%s) runs Python 3.%d; supported: 3.8 to 3.13",
				(int)pid, st.name, t->py_minor), -MT_ENOPY;
	}
	t->other_mntns = !same_mntns(pid);
	t->other_root = !same_root(pid);
	return 0;
}

/* Writes @src into @dirfd/@name through a temporary name, never following
 * links planted in a directory the target's users may control. */
static int copy_into(int dirfd, const char *name, const char *src)
{
	char tmp[NAME_MAX + 1], buf[65536];
	int in, out, rc = 0;
	ssize_t n;

	snprintf(tmp, sizeof(tmp), ".%s.%d", name, (int)getpid());
	in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -errno;
	unlinkat(dirfd, tmp, 0);
	out = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0755);
	if (out < 0) {
		rc = -errno;
		close(in);
		return rc;
	}
	while ((n = read(in, buf, sizeof(buf))) > 0) {
		if (write(out, buf, (size_t)n) != n) {
			rc = -EIO;
			break;
		}
	}
	if (n < 0)
		rc = -errno;
	if (fchmod(out, 0755) != 0 && !rc)
		rc = -errno;
	if (close(out) != 0 && !rc)
		rc = -errno;
	close(in);
	if (!rc && renameat(dirfd, tmp, dirfd, name) != 0)
		rc = -errno;
	if (rc)
		unlinkat(dirfd, tmp, 0);
	return rc;
}

/* Opens @path (absolute, as the target names it) inside the target's root
 * @rootfd the way the target would resolve it, one component at a time:
 * every component is opened with O_NOFOLLOW, a symbolic link is read and
 * its text resolved against the target's root (an absolute link starts
 * again there, ".." stops there), so nothing outside the root is ever
 * reached, whatever the target's users put there. The last component is
 * opened with @flags (O_PATH to look only). Stores the resolved path,
 * free of links and dots, in @canon. Returns the fd or -errno. */
static int open_in_root(int rootfd, const char *path, int flags, char *canon, size_t cap)
{
	enum { MAX_DEPTH = 64, MAX_LINKS = 40 };
	char rest[PATH_MAX + 1], comp[NAME_MAX + 1], link[PATH_MAX + 1];
	int fds[MAX_DEPTH + 1], depth = 0, links = 0, rc = -ENOENT;
	size_t clen = 0;

	if (snprintf(rest, sizeof(rest), "%s", path) >= (int)sizeof(rest))
		return -ENAMETOOLONG;
	fds[0] = rootfd;
	canon[0] = '\0';
	for (;;) {
		char *p = rest + strspn(rest, "/");
		size_t len = strcspn(p, "/");
		if (len == 0) {
			/* the path named the root itself, or ended in '/' */
			rc = openat(fds[depth], ".", (flags & ~O_NOFOLLOW) | O_CLOEXEC);
			rc = rc < 0 ? -errno : rc;
			break;
		}
		if (len > NAME_MAX) {
			rc = -ENAMETOOLONG;
			break;
		}
		memcpy(comp, p, len);
		comp[len] = '\0';
		memmove(rest, p + len, strlen(p + len) + 1);
		int last = rest[strspn(rest, "/")] == '\0';
		/* "." and ".." at the end leave len == 0 next round */
		if (!strcmp(comp, "."))
			continue;
		if (!strcmp(comp, "..")) {
			if (depth > 0) {
				close(fds[depth--]);
				while (clen > 0 && canon[clen - 1] != '/')
					clen--;
				clen -= clen > 0;
				canon[clen] = '\0';
			}
			continue;
		}
		struct stat sb;
		if (fstatat(fds[depth], comp, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
			rc = -errno;
			break;
		}
		if (S_ISLNK(sb.st_mode)) {
			ssize_t n = readlinkat(fds[depth], comp, link, sizeof(link) - 1);
			if (n <= 0 || n >= (ssize_t)sizeof(link) - 1) {
				rc = n < 0 ? -errno : -ENAMETOOLONG;
				break;
			}
			if (++links > MAX_LINKS) {
				rc = -ELOOP;
				break;
			}
			link[n] = '\0';
			if (strlen(link) + 1 + strlen(rest) >= sizeof(rest)) {
				rc = -ENAMETOOLONG;
				break;
			}
			/* the link's text, then what was left */
			memmove(rest + n + 1, rest, strlen(rest) + 1);
			memcpy(rest, link, (size_t)n);
			rest[n] = '/';
			if (link[0] == '/') {
				while (depth > 0)
					close(fds[depth--]);
				clen = 0;
				canon[0] = '\0';
			}
			continue;
		}
		if (clen + 1 + len >= cap) {
			rc = -ENAMETOOLONG;
			break;
		}
		canon[clen++] = '/';
		memcpy(canon + clen, comp, len + 1);
		clen += len;
		if (last) {
			rc = openat(fds[depth], comp, flags | O_NOFOLLOW | O_CLOEXEC);
			rc = rc < 0 ? -errno : rc;
			break;
		}
		if (depth == MAX_DEPTH) {
			rc = -ENAMETOOLONG;
			break;
		}
		int fd = openat(fds[depth], comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			rc = -errno; /* ELOOP/ENOTDIR: it changed into a link meanwhile */
			break;
		}
		fds[++depth] = fd;
	}
	while (depth > 0)
		close(fds[depth--]);
	if (rc >= 0 && clen == 0)
		snprintf(canon, cap, "/");
	return rc;
}

/* Opens /proc/@pid/root and resolves @path in it (open_in_root). */
static int open_in_target(pid_t pid, const char *path, int flags, char *canon, size_t cap)
{
	char root[64];
	snprintf(root, sizeof(root), "/proc/%d/root", (int)pid);
	int rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0)
		return -errno;
	int fd = open_in_root(rootfd, path, flags, canon, cap);
	close(rootfd);
	return fd;
}

/* Whether @dirfd/@name is a regular file of ours with @src's bytes. */
static int same_content(int dirfd, const char *name, const char *src)
{
	char a[65536], b[65536];
	struct stat sa, sb;
	if (fstatat(dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode))
		return 0;
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	int in = open(src, O_RDONLY | O_CLOEXEC), same = 0;
	if (fd < 0 || in < 0 || fstat(fd, &sb) != 0 || fstat(in, &sa) != 0 || !S_ISREG(sb.st_mode) ||
	    sb.st_uid != geteuid() || (sb.st_mode & 0022) || sb.st_size != sa.st_size)
		goto out;
	for (;;) {
		ssize_t na = read(in, a, sizeof(a)), nb = na > 0 ? read(fd, b, (size_t)na) : na;
		if (na < 0 || nb != na || memcmp(a, b, (size_t)(na > 0 ? na : 0)) != 0)
			goto out;
		if (na == 0)
			break;
	}
	same = 1;
out:
	if (fd >= 0)
		close(fd);
	if (in >= 0)
		close(in);
	return same;
}

int mt_inject_visible_path(const struct mt_target *t, const char *path, char *out,
			   size_t cap)
{
	char canon[PATH_MAX];
	struct stat here_sb, there_sb;

	if (stat(path, &here_sb) != 0)
		return mt_error(-errno, "cannot stat '%s'", path);
	if (path[0] != '/')
		return mt_error(-EINVAL, "'%s' is not an absolute path", path);
	int fd = open_in_target(t->pid, path, O_PATH, canon, sizeof(canon));
	if (fd >= 0) {
		int same = fstat(fd, &there_sb) == 0 && there_sb.st_dev == here_sb.st_dev &&
			   there_sb.st_ino == here_sb.st_ino;
		close(fd);
		if (same) {
			if (strlen(path) >= cap)
				return mt_error(-ENAMETOOLONG, "path '%s'", path);
			snprintf(out, cap, "%s", path);
			return 0;
		}
	}
	/* The target lives in another filesystem view: put a copy in its
	 * /tmp, where its uid can read it. Its /tmp is resolved in its own
	 * root: a link there (/tmp -> /var/tmp) means the target's /var/tmp,
	 * never ours. */
	int tmpfd = open_in_target(t->pid, "/tmp", O_RDONLY | O_DIRECTORY, canon, sizeof(canon));
	if (tmpfd < 0)
		return mt_error(tmpfd, "cannot open /tmp inside pid %d's root (/proc/%d/root) to "
				"copy the payload", (int)t->pid, (int)t->pid);
	char sub[64];
	snprintf(sub, sizeof(sub), "memtrace-%u", (unsigned)t->uid);
	if (mkdirat(tmpfd, sub, 0755) != 0 && errno != EEXIST) {
		int e = -errno;
		close(tmpfd);
		return mt_error(e, "cannot create %s/%s inside pid %d's root", canon, sub, (int)t->pid);
	}
	int subfd = openat(tmpfd, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	close(tmpfd);
	struct stat dsb;
	if (subfd < 0 || fstat(subfd, &dsb) != 0 ||
	    (dsb.st_uid != geteuid() && dsb.st_uid != t->uid) || (dsb.st_mode & 0022)) {
		if (subfd >= 0)
			close(subfd);
		return mt_error(-EPERM, "%s/%s inside pid %d's root is not a directory owned by us "
				"or the target", canon, sub, (int)t->pid);
	}
	const char *name = mt__basename(path);
	/* An identical copy stays: the target may have it mapped already
	 * (an earlier attach), and dlopen finds a loaded library by name. */
	int rc = same_content(subfd, name, path) ? 0 : copy_into(subfd, name, path);
	close(subfd);
	if (rc < 0)
		return mt_error(rc, "cannot copy the payload into %s/%s inside pid %d's root", canon,
				sub, (int)t->pid);
	if ((size_t)snprintf(out, cap, "%s/%s/%s", strcmp(canon, "/") ? canon : "", sub, name) >= cap)
		return mt_error(-ENAMETOOLONG, "payload path");
	return 0;
}

int mt__tracer_error(pid_t pid, pid_t tid)
{
	struct proc_status st;
	char path[64], comm[64] = "";
	if (read_status(tid, &st) == 0 && st.tracer) {
		snprintf(path, sizeof(path), "/proc/%d/comm", (int)st.tracer);
		FILE *f = fopen(path, "re");
		if (f) {
			if (fgets(comm, sizeof(comm), f))
				comm[strcspn(comm, "\n")] = '\0';
			fclose(f);
		}
		if (!strcmp(comm, "memtrace"))
			return mt_error(0, "pid %d is being attached by another memtrace (pid %d)",
					(int)pid, (int)st.tracer), -MT_EPTRACE;
		return mt_error(0, "pid %d is already traced by pid %d (%s: a debugger?)", (int)pid,
				(int)st.tracer, comm[0] ? comm : "?"), -MT_EPTRACE;
	}
	return mt_error(-MT_EPTRACE, "cannot trace pid %d (PTRACE_SEIZE)", (int)pid);
}
