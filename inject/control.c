/* SPDX-License-Identifier: MIT */
/*
 * Client of the payload's control socket: the abstract unix stream socket
 * "\0memtrace-<pid>" (pid as the target sees itself). One line out, one
 * line back. The payload checks our uid with SO_PEERCRED.
 */
#include "inject/inject.h"

#include <errno.h>      /* errno */
#include <poll.h>       /* poll */
#include <stddef.h>     /* offsetof */
#include <stdio.h>      /* snprintf */
#include <string.h>     /* strlen */
#include <sys/socket.h> /* socket */
#include <sys/un.h>     /* sockaddr_un */
#include <time.h>       /* clock_gettime */
#include <unistd.h>     /* close */

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int mt_control_request(pid_t pid, pid_t nspid, const char *req, char *reply, size_t cap,
		       int timeout_ms)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t got = 0, len = strlen(req);
	long long deadline = now_ms() + timeout_ms;
	int fd, rc = 0;

	if (cap < 2)
		return -EINVAL;
	int n = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "memtrace-%d", (int)nspid);
	socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, salen) != 0) {
		rc = errno == ENOENT ? -ECONNREFUSED : -errno;
		goto out;
	}
	/* Anyone may bind an abstract name: make sure it is the target's. */
	struct ucred peer;
	socklen_t plen = sizeof(peer);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &plen) != 0 || peer.pid != pid) {
		rc = -EPERM;
		goto out;
	}
	while (got < len) {
		ssize_t w = send(fd, req + got, len - got, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			rc = w < 0 ? -errno : -EPIPE;
			goto out;
		}
		got += (size_t)w;
	}
	got = 0;
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		long long left = deadline - now_ms();
		if (left <= 0) {
			rc = -ETIMEDOUT;
			goto out;
		}
		int pr = poll(&p, 1, (int)left);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr < 0) {
			rc = -errno;
			goto out;
		}
		if (pr == 0)
			continue;
		ssize_t r = recv(fd, reply + got, cap - 1 - got, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = -errno;
			goto out;
		}
		got += (size_t)r;
		reply[got] = '\0';
		char *nl = memchr(reply, '\n', got);
		if (nl) {
			*nl = '\0';
			break;
		}
		if (r == 0 || got == cap - 1) {
			/* no newline: a reply cut short */
			rc = got ? 0 : -ECONNRESET;
			break;
		}
	}
out:
	close(fd);
	return rc;
}
