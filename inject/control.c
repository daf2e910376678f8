/* SPDX-License-Identifier: MIT */
/*
 * Client of the payload's control socket (payload/control.c). The payload
 * listens on an abstract unix socket with an unguessable name,
 * "\0memtrace-<pid>-<random>" (an older payload: "\0memtrace-<pid>"):
 * we find it among the target's own descriptors, so that no other
 * process can pose as it, and check with SO_PEERCRED that the listener is
 * the target. An abstract name lives in a network namespace: for a
 * target in another one (a container), the socket is made in the
 * target's, which takes CAP_SYS_ADMIN. One line out (with a descriptor,
 * for a start), one line back, in the protocol of format/ctlproto.h;
 * every step has the caller's deadline.
 */
#include "inject/inject.h"
#include "format/ctlproto.h"
#include "payload/memtrace-payload.h"
#include "util/clock.h"

#include <dirent.h>     /* opendir */
#include <errno.h>      /* errno */
#include <fcntl.h>      /* open */
#include <poll.h>       /* poll */
#include <sched.h>      /* setns */
#include <stddef.h>     /* offsetof */
#include <stdio.h>      /* snprintf */
#include <stdlib.h>     /* qsort */
#include <string.h>     /* strlen */
#include <sys/socket.h> /* socket */
#include <sys/stat.h>   /* stat */
#include <sys/un.h>     /* sockaddr_un */
#include <time.h>       /* nanosleep */
#include <unistd.h>     /* close */

static int cmp_ino(const void *a, const void *b)
{
	unsigned long x = *(const unsigned long *)a, y = *(const unsigned long *)b;
	return x < y ? -1 : x > y;
}

/* The inodes of the sockets process @pid holds, sorted, in *@out (to
 * free). Returns how many, or a negative error. */
static long socket_inodes(pid_t pid, unsigned long **out)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return errno == ENOENT ? -ESRCH : -errno;
	unsigned long *v = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		char link[64], *end;
		if (e->d_name[0] == '.')
			continue;
		ssize_t len = readlinkat(dirfd(d), e->d_name, link, sizeof(link) - 1);
		if (len <= 8)
			continue;
		link[len] = '\0';
		if (strncmp(link, "socket:[", 8) != 0)
			continue;
		unsigned long ino = strtoul(link + 8, &end, 10);
		if (*end != ']')
			continue;
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 64;
			unsigned long *nv = realloc(v, ncap * sizeof(*v));
			if (!nv) {
				free(v);
				closedir(d);
				return -ENOMEM;
			}
			v = nv;
			cap = ncap;
		}
		v[n++] = ino;
	}
	closedir(d);
	if (n)
		qsort(v, n, sizeof(*v), cmp_ino);
	*out = v;
	return (long)n;
}

int mt_control_find(pid_t pid, pid_t nspid, char *name, size_t cap)
{
	unsigned long *inos = NULL;
	long n = socket_inodes(pid, &inos);
	if (n < 0)
		return (int)n;
	char path[64], line[512], want[32];
	int wlen = snprintf(want, sizeof(want), "@memtrace-%d", (int)nspid);
	snprintf(path, sizeof(path), "/proc/%d/net/unix", (int)pid);
	FILE *f = n > 0 ? fopen(path, "re") : NULL;
	int rc = -ECONNREFUSED;
	while (f && fgets(line, sizeof(line), f)) {
		unsigned long flags, ino;
		unsigned type, st;
		int at = 0;
		/* Num RefCount Protocol Flags Type St Inode Path */
		if (sscanf(line, "%*s %*s %*s %lx %x %x %lu %n", &flags, &type, &st, &ino, &at) != 4 ||
		    at == 0)
			continue;
		char *p = line + at;
		p[strcspn(p, "\n")] = '\0';
		if (type != SOCK_STREAM || !(flags & 0x10000 /* __SO_ACCEPTCON: listening */) ||
		    strncmp(p, want, (size_t)wlen) != 0 || (p[wlen] != '\0' && p[wlen] != '-'))
			continue;
		if (!bsearch(&ino, inos, (size_t)n, sizeof(*inos), cmp_ino))
			continue; /* someone else's: anyone may bind an abstract name */
		if (strlen(p) >= cap) {
			rc = -ENAMETOOLONG;
			continue;
		}
		memcpy(name, p + 1, strlen(p)); /* without the '@' */
		rc = 0;
		if (p[wlen] == '-')
			break; /* a current payload's; an older one's only if alone */
	}
	if (f)
		fclose(f);
	free(inos);
	return rc;
}

/* A socket in @pid's network namespace. */
static int socket_for(pid_t pid)
{
	char path[64];
	struct stat here, there;
	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
	if (stat(path, &there) != 0 || stat("/proc/thread-self/ns/net", &here) != 0 ||
	    (here.st_ino == there.st_ino && here.st_dev == there.st_dev)) {
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		return fd < 0 ? -errno : fd;
	}
	int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	int ns = open(path, O_RDONLY | O_CLOEXEC);
	int fd = -EIO;
	if (self < 0 || ns < 0) {
		fd = errno == ENOENT ? -ESRCH : -errno;
	} else if (setns(ns, CLONE_NEWNET) != 0) {
		fd = errno == EPERM ? MT_CONTROL_OTHER_NETNS : -errno;
	} else {
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0)
			fd = -errno;
		if (setns(self, CLONE_NEWNET) != 0) {
			/* cannot happen: we were there a moment ago */
			if (fd >= 0)
				close(fd);
			fd = -EIO;
		}
	}
	if (self >= 0)
		close(self);
	if (ns >= 0)
		close(ns);
	return fd;
}

/* An exchange's end, and the process that must answer by then. */
struct until {
	int64_t deadline;
	pid_t pid;
	int64_t traced_since; /* when a tracer's stop was first seen, 0: none seen */
};

/* A tracer's stop ('t') is taken for the process stopped only once it is
 * seen through this long: strace stops it for a moment at every system
 * call, a debugger at a breakpoint for good. */
#define TRACED_MS 500

/* How often a wait looks whether the process can still answer. */
#define STATE_EVERY_MS 100

/* 0 while @u's process can answer: MT_CONTROL_STOPPED once it is seen
 * stopped (its payload cannot answer until it is resumed), -ESRCH once
 * it has exited. */
static int cannot_answer(struct until *u)
{
	char state = mt_inject_state(u->pid);
	int64_t now = mt_now_ms();
	if (state != 't')
		u->traced_since = 0;
	else if (!u->traced_since)
		u->traced_since = now;
	if (state == 'T' || (u->traced_since && now - u->traced_since >= TRACED_MS))
		return MT_CONTROL_STOPPED;
	if (mt_inject_gone(u->pid))
		return -ESRCH;
	return 0;
}

/* Waits for @events on @fd until @u's deadline. 0, or -ETIMEDOUT, -errno,
 * or as soon as seen, why the process cannot answer (cannot_answer()). */
static int wait_for(int fd, short events, struct until *u)
{
	for (;;) {
		int64_t left = u->deadline - mt_now_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		struct pollfd p = { .fd = fd, .events = events };
		int pr = poll(&p, 1, left < STATE_EVERY_MS ? (int)left : STATE_EVERY_MS);
		if (pr > 0)
			return 0;
		if (pr < 0 && errno != EINTR)
			return -errno;
		int why = cannot_answer(u);
		if (why < 0)
			return why;
	}
}

/* Connects @fd to @name, retrying while the listener's backlog is full. */
static int connect_by(int fd, const char *name, struct until *u)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t n = strlen(name);
	if (n + 1 > sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path + 1, name, n);
	socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
	for (;;) {
		if (connect(fd, (struct sockaddr *)&sa, salen) == 0)
			return 0;
		if (errno == EINTR)
			continue;
		if (errno == EINPROGRESS)
			return wait_for(fd, POLLOUT, u);
		if (errno != EAGAIN)
			return errno == ENOENT ? -ECONNREFUSED : -errno;
		if (mt_now_ms() >= u->deadline)
			return -ETIMEDOUT;
		int why = cannot_answer(u);
		if (why < 0)
			return why;
		struct timespec ts = { 0, 5 * 1000000L }; /* the backlog drains */
		nanosleep(&ts, NULL);
	}
}

static int send_all(int fd, const char *req, int pass_fd, struct until *u)
{
	size_t len = strlen(req), sent = 0;
	while (sent < len) {
		char cbuf[CMSG_SPACE(sizeof(int))];
		struct iovec iov = { (char *)req + sent, len - sent };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
		if (pass_fd >= 0 && sent == 0) {
			memset(cbuf, 0, sizeof(cbuf));
			m.msg_control = cbuf;
			m.msg_controllen = sizeof(cbuf);
			struct cmsghdr *c = CMSG_FIRSTHDR(&m);
			c->cmsg_level = SOL_SOCKET;
			c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
		}
		ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL);
		if (w > 0) {
			sent += (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN) {
			int rc = wait_for(fd, POLLOUT, u);
			if (rc < 0)
				return rc;
			continue;
		}
		return w < 0 ? -errno : -EPIPE;
	}
	return 0;
}

static int recv_line(int fd, char *reply, size_t cap, struct until *u)
{
	size_t got = 0;
	for (;;) {
		int rc = wait_for(fd, POLLIN, u);
		if (rc < 0)
			return rc;
		ssize_t r = recv(fd, reply + got, cap - 1 - got, 0);
		if (r < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (r < 0)
			return -errno;
		got += (size_t)r;
		reply[got] = '\0';
		char *nl = memchr(reply, '\n', got);
		if (nl) {
			*nl = '\0';
			return 0;
		}
		if (r == 0 || got == cap - 1)
			return got ? 0 : -ECONNRESET; /* no newline: a reply cut short */
	}
}

/* Whether @pid has the payload's control thread ("memtrace-ctl"). */
static int has_control_thread(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return 0;
	int found = 0;
	struct dirent *e;
	while (!found && (e = readdir(d)) != NULL) {
		char comm[32];
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.16s/comm", (int)pid, e->d_name);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		ssize_t n = read(fd, comm, sizeof(comm) - 1);
		close(fd);
		found = n > 0 && strncmp(comm, "memtrace-ctl\n", 13) == 0;
	}
	closedir(d);
	return found;
}

/* The control socket's name, as mt_control_find(). A program may close
 * the socket (a daemon closing every descriptor): its control thread
 * makes a new one within a second (payload/control.c), which is waited
 * for, until @deadline, rather than taking the target for one that is
 * not attached. */
static int find_socket(pid_t pid, pid_t nspid, char *name, size_t cap, int64_t deadline)
{
	int64_t until = mt_now_ms() + 2000;
	if (until > deadline)
		until = deadline;
	int rc = mt_control_find(pid, nspid, name, cap);
	while (rc == -ECONNREFUSED && mt_now_ms() < until && has_control_thread(pid)) {
		struct timespec ts = { 0, 20 * 1000000L };
		nanosleep(&ts, NULL);
		rc = mt_control_find(pid, nspid, name, cap);
	}
	return rc;
}

/* One exchange: @req out (with @pass_fd if >= 0), a line back in @reply. */
static int exchange(pid_t pid, pid_t nspid, const char *req, int pass_fd, char *reply, size_t cap,
		    int timeout_ms)
{
	int64_t deadline = mt_now_ms() + timeout_ms;
	struct until u = { deadline, pid, 0 };
	char name[108];
	if (cap < 2)
		return -EINVAL;
	/* a stopped listener's socket takes a connection and a request: its
	 * stop is told apart from one that comes after the request */
	if (mt_inject_state(pid) == 'T')
		return MT_CONTROL_STOPPED;
	int rc = find_socket(pid, nspid, name, sizeof(name), deadline);
	if (rc < 0)
		return rc;
	int fd = socket_for(pid);
	if (fd < 0)
		return fd;
	rc = connect_by(fd, name, &u);
	if (rc == 0) {
		/* the listener is the target (it may have died and its pid
		 * gone to another process since we looked) */
		struct ucred peer;
		socklen_t plen = sizeof(peer);
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &plen) != 0 || peer.pid != pid)
			rc = -EPERM;
	}
	if (rc == 0)
		rc = send_all(fd, req, pass_fd, &u);
	if (rc == 0) {
		rc = recv_line(fd, reply, cap, &u);
		if (rc == MT_CONTROL_STOPPED)
			rc = MT_CONTROL_STOPPED_ASKED;
	}
	close(fd);
	return rc;
}

int mt_control_ask(pid_t pid, pid_t nspid, const struct mt_ctl_request *req, int pass_fd,
		   char *line, size_t cap, struct mt_ctl_reply *reply, int timeout_ms)
{
	char out[MEMTRACE_PATH_MAX + 64];
	int rc = mt_ctl_request_encode(out, sizeof(out), req);
	if (rc < 0)
		return rc;
	rc = exchange(pid, nspid, out, pass_fd, line, cap, timeout_ms);
	if (rc < 0)
		return rc;
	if (mt_ctl_reply_parse(line, reply) < 0)
		*reply = (struct mt_ctl_reply){ .kind = MT_CTL_REPLY__COUNT };
	return 0;
}
