/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_FD_ID_H
#define MT_PAYLOAD_FD_ID_H
/*
 * The payload's own descriptors (the capture, /proc/self/statm, the
 * control socket) live among the program's. A program that closes every
 * descriptor it did not open (a daemon, os.closerange()) and opens others
 * may give our number to one of its files: before writing to, reading
 * from or closing one of ours, check it still is the file it was.
 */
#include <sys/stat.h> /* fstat */
#include <unistd.h>   /* close */

struct mt_fd_id {
	dev_t dev;
	ino_t ino;
};

/* Remember what @fd is. Returns 0 or -1 (errno set). */
static inline int mt_fd_id_take(int fd, struct mt_fd_id *id)
{
	struct stat sb;
	if (fd < 0 || fstat(fd, &sb) != 0)
		return -1;
	id->dev = sb.st_dev;
	id->ino = sb.st_ino;
	return 0;
}

/* Whether @fd still is the file @id was taken from. */
static inline int mt_fd_id_is(int fd, const struct mt_fd_id *id)
{
	struct stat sb;
	return fd >= 0 && fstat(fd, &sb) == 0 && sb.st_dev == id->dev && sb.st_ino == id->ino;
}

/* Close @fd if it still is ours; never the program's file. */
static inline void mt_fd_id_close(int fd, const struct mt_fd_id *id)
{
	if (mt_fd_id_is(fd, id))
		close(fd);
}

#endif /* MT_PAYLOAD_FD_ID_H */
