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

#endif /* MT_UTIL_IO_H */
