/* SPDX-License-Identifier: MIT */
/*
 * memtrace run's status pipe (see status.h).
 */
#include "payload/status.h"
#include "format/runproto.h"
#include "payload/fd-id.h"

#include <fcntl.h>  /* FD_CLOEXEC */
#include <unistd.h> /* write */

static struct {
	int fd;              /* where the final status goes, or -1 */
	struct mt_fd_id id;  /* the pipe fd was */
} sp = { .fd = -1 };

int mt_status_set(int fd)
{
	if (fd < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) != 0 || mt_fd_id_take(fd, &sp.id) != 0)
		return -1;
	sp.fd = fd;
	return 0;
}

/* The pipe, taken: -1 if there is none or another took it. */
static int take(void)
{
	int fd = __atomic_exchange_n(&sp.fd, -1, __ATOMIC_ACQ_REL);
	/* fstat() is async-signal-safe */
	return mt_fd_id_is(fd, &sp.id) ? fd : -1;
}

void mt_status_report(const struct mt_run_status *s)
{
	char line[MT_RUN_STATUS_MAX];
	int fd = take();
	if (fd < 0)
		return;
	int n = mt_run_status_encode(line, sizeof(line), s);
	if (n > 0 && write(fd, line, (size_t)n) < 0) {
		/* nobody listening: nothing more to do */
	}
	close(fd);
}

void mt_status_after_fork(void)
{
	if (sp.fd >= 0) {
		mt_fd_id_close(sp.fd, &sp.id);
		sp.fd = -1;
	}
}
