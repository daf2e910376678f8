/* SPDX-License-Identifier: MIT */
#include "util/io.h"

#include <errno.h>  /* EINTR */
#include <sys/stat.h> /* lstat */
#include <unistd.h>   /* read, write, unlink */

int mt_write_full(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		if (n == 0)
			return -ENOSPC;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

ssize_t mt_read_full(int fd, void *buf, size_t len)
{
	char *p = buf;
	size_t got = 0;
	while (got < len) {
		ssize_t n = read(fd, p + got, len - got);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

int mt_unlink_regular(const char *path)
{
	struct stat sb;
	if (lstat(path, &sb) != 0)
		return -errno;
	if (!S_ISREG(sb.st_mode))
		return -EPERM;
	return unlink(path) == 0 ? 0 : -errno;
}
