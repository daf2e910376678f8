/* SPDX-License-Identifier: MIT */
#ifndef MT_UTIL_FD_H
#define MT_UTIL_FD_H
/*
 * Descriptors kept clear of 0, 1 and 2. A program may run with its
 * standard descriptors closed (a daemon does); the lowest free number a
 * file of ours gets is then one of them, and the program's next write to
 * "stderr" lands in the capture. Every descriptor the payload keeps goes
 * through mt_fd_high(); what a library opens and keeps for itself
 * (libunwind's pipe) is opened between mt_fd_hold() and mt_fd_release().
 *
 *	int fd = mt_fd_high(open(path, O_RDONLY | O_CLOEXEC));
 *	if (fd < 0) ... errno says why, as open's would
 */
#include <errno.h> /* errno */
#include <fcntl.h> /* fcntl, F_DUPFD_CLOEXEC */
#include <unistd.h> /* close */

/* mt_fd_high() - @fd itself if it is not a standard descriptor, else a
 * close-on-exec copy of it numbered 3 or more, @fd closed. -1 for @fd
 * < 0, or when no copy can be made (@fd closed, errno set). */
static inline int mt_fd_high(int fd)
{
	if (fd < 0 || fd > 2)
		return fd;
	int high = fcntl(fd, F_DUPFD_CLOEXEC, 3), e = errno;
	close(fd);
	errno = e;
	return high;
}

/* mt_fd_hold() - the standard descriptors that are closed, each opened
 * on /dev/null (close-on-exec) until mt_fd_release(): files opened
 * meanwhile get other numbers. Returns the set of those held (bit n for
 * descriptor n), 0 when none was closed. errno is kept. */
static inline unsigned mt_fd_hold(void)
{
	unsigned held = 0;
	int e = errno;
	/* the lowest free number is @fd's: those below it are open */
	for (int fd = 0; fd < 3; fd++) {
		if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
			continue;
		int h = open("/dev/null", O_RDWR | O_CLOEXEC);
		if (h == fd)
			held |= 1u << fd;
		else if (h >= 0)
			close(h); /* another thread took @fd meanwhile */
	}
	errno = e;
	return held;
}

/* mt_fd_release() - the descriptors of @held closed again. */
static inline void mt_fd_release(unsigned held)
{
	int e = errno;
	for (int fd = 0; fd < 3; fd++)
		if (held & 1u << fd)
			close(fd);
	errno = e;
}

#endif /* MT_UTIL_FD_H */
