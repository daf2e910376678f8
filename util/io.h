/* SPDX-License-Identifier: MIT */
#ifndef MT_UTIL_IO_H
#define MT_UTIL_IO_H
/* Full reads and writes with EINTR loops (CLI, reader, injector). */
#include <stddef.h>    /* size_t */
#include <sys/types.h> /* ssize_t */

/* mt_write_full() - write all of @buf. Returns 0 or -errno (a write of 0
 * bytes is -ENOSPC). */
int mt_write_full(int fd, const void *buf, size_t len);
/* mt_read_full() - read up to @len bytes, stopping early only at end of
 * file. Returns bytes read or -errno. */
ssize_t mt_read_full(int fd, void *buf, size_t len);

/* mt_unlink_regular() - remove @path if it is a regular file (a report or
 * capture we created); never a device such as /dev/full or a directory.
 * Returns 0 or -errno. */
int mt_unlink_regular(const char *path);

#endif /* MT_UTIL_IO_H */
