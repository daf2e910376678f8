/* SPDX-License-Identifier: MIT */
/*
 * The capture's sinks (sink.h): a file, written with write(2), and a
 * socket, written with send(2). Each sink's state is its struct mt_sink.
 */
#include "payload/sink.h"
#include "format/error.h"

#include <errno.h>      /* errno */
#include <sys/socket.h> /* send, setsockopt */
#include <sys/stat.h>   /* fstat */
#include <sys/time.h>   /* struct timeval */
#include <unistd.h>     /* write, close */

/* Write all of [@p, @p + @len) with @put (write(2) or send(2)). */
static int write_all(int fd, const void *buf, size_t len,
		     ssize_t (*put)(int fd, const void *p, size_t len))
{
	const char *p = buf;
	while (len) {
		ssize_t n = put(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			/* SO_SNDTIMEO ran out: the reader stopped reading */
			return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
		}
		if (n == 0)
			return -ENOSPC;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static ssize_t put_file(int fd, const void *p, size_t len)
{
	return write(fd, p, len);
}

/* A reader that went away must give EPIPE, not a SIGPIPE that kills the
 * program. */
static ssize_t put_socket(int fd, const void *p, size_t len)
{
	return send(fd, p, len, MSG_NOSIGNAL);
}

static int file_write(struct mt_sink *s, const void *p, size_t len)
{
	return write_all(s->fd, p, len, put_file);
}

static int socket_write(struct mt_sink *s, const void *p, size_t len)
{
	return write_all(s->fd, p, len, put_socket);
}

static int fd_close(struct mt_sink *s)
{
	return close(s->fd) != 0 ? -errno : 0;
}

static const struct mt_sink_ops file_ops = { "file", file_write, fd_close };
static const struct mt_sink_ops socket_ops = { "socket", socket_write, fd_close };

int mt_sink_open(struct mt_sink *s, int fd)
{
	struct stat sb;
	int sock = fstat(fd, &sb) == 0 && S_ISSOCK(sb.st_mode);
	if (sock) {
		struct timeval tv = { .tv_sec = MT_SINK_STALL_S };
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	}
	if (mt_fd_id_take(fd, &s->id) < 0)
		return -errno;
	s->fd = fd;
	s->ops = sock ? &socket_ops : &file_ops;
	return 0;
}

int mt_sink_write(struct mt_sink *s, const void *p, size_t len)
{
	if (!s->ops || !mt_fd_id_is(s->fd, &s->id))
		return -MT_EFDLOST;
	return s->ops->write(s, p, len);
}

int mt_sink_close(struct mt_sink *s)
{
	int e = s->ops && mt_fd_id_is(s->fd, &s->id) ? s->ops->close(s) : -MT_EFDLOST;
	s->ops = NULL;
	s->fd = -1;
	return e;
}

void mt_sink_forget(struct mt_sink *s)
{
	if (s->ops)
		mt_fd_id_close(s->fd, &s->id);
	s->ops = NULL;
	s->fd = -1;
}
