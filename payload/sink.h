/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_SINK_H
#define MT_PAYLOAD_SINK_H
/*
 * Where a capture's bytes go: a file (memtrace run, attach) or a socket
 * (a live view, memtrace run --live-remote), behind one interface.
 *
 * The sink is a descriptor the payload was given, living among the
 * program's: every write and the close first check that it still is the
 * file it was when opened (fd-id.h), and give -MT_EFDLOST otherwise, never
 * touching the program's file. A write is whole or an error; nothing is
 * buffered here, so there is nothing to flush. A socket never raises
 * SIGPIPE (a reader that went away gives -EPIPE), and a reader that reads
 * nothing for MT_SINK_STALL_S seconds gives -ETIMEDOUT, rather than
 * stalling the program (and its exit) for good.
 *
 * Not async-signal-safe in general (close); write is, as write(2) is.
 * One thread at a time per sink.
 */
#include "payload/fd-id.h"

#include <stddef.h> /* size_t */

#define MT_SINK_STALL_S 5 /* a live client that reads nothing for this long is gone */

struct mt_sink;

/* What a kind of sink does. */
struct mt_sink_ops {
	const char *kind; /* "file" or "socket" */
	/* Write all of [@p, @p + @len): 0 or -errno (-ENOSPC if nothing
	 * could be written). Called only on a descriptor still ours. */
	int (*write)(struct mt_sink *s, const void *p, size_t len);
	/* Close the descriptor, ours: 0 or -errno. */
	int (*close)(struct mt_sink *s);
};

struct mt_sink {
	const struct mt_sink_ops *ops; /* NULL: not open */
	int fd;
	struct mt_fd_id id; /* what fd was when opened */
};

/* mt_sink_open() - make @s the sink for @fd, a file or a socket (whose
 * send timeout is set to MT_SINK_STALL_S). Returns 0 or -errno. */
int mt_sink_open(struct mt_sink *s, int fd);

/* mt_sink_write() - write all of [@p, @p + @len) to @s: 0, -MT_EFDLOST if
 * its descriptor is no longer ours, or the kind's error. */
int mt_sink_write(struct mt_sink *s, const void *p, size_t len);

/* mt_sink_close() - close @s: 0, -MT_EFDLOST (its descriptor is no longer
 * ours, or @s is not open; the descriptor is left alone) or -errno. @s is
 * closed either way. */
int mt_sink_close(struct mt_sink *s);

/* mt_sink_forget() - in the child of a fork: close the child's copy of
 * the descriptor if it still is ours; the capture is the parent's. */
void mt_sink_forget(struct mt_sink *s);

#endif /* MT_PAYLOAD_SINK_H */
