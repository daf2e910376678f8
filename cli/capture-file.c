/* SPDX-License-Identifier: MIT */
/* Creating the capture file for run and attach: 0600, never overwritten
 * without -f, handed to the target's user when it is someone else. */
#include "cli/cmd.h"
#include "util/error.h"
#include "util/io.h"

#include <errno.h>  /* EEXIST */
#include <fcntl.h>  /* open */
#include <limits.h> /* PATH_MAX */
#include <stdio.h>  /* fprintf */
#include <stdlib.h> /* realpath */
#include <string.h> /* strlen */
#include <unistd.h> /* fchown */

void mt_cli_say_written(const char *lead, const char *path, const char *dropped)
{
	if (dropped && strcmp(dropped, "0") != 0)
		fprintf(stderr,
			"memtrace: %scapture written to %s; %s %s dropped, as it could not "
			"be written fast enough\n",
			lead, path, dropped, strcmp(dropped, "1") ? "events were" : "event was");
	else
		fprintf(stderr, "memtrace: %scapture written to %s\n", lead, path);
}

int mt_cli_create_capture(const char *path, int force, uid_t owner, gid_t group, char *abs,
			  size_t cap)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (force ? O_TRUNC : O_EXCL), 0600);
	if (fd < 0) {
		if (errno == EEXIST)
			return mt_error(0, "capture '%s' exists (use -f to overwrite)", path), -EEXIST;
		return mt_error(-errno, "cannot create capture '%s'", path);
	}
	/* an attached target opens it by name, as its own user */
	if (owner != (uid_t)-1 && geteuid() == 0 && owner != 0 && fchown(fd, owner, group) != 0) {
		int e = -errno;
		close(fd);
		mt_unlink_regular(path);
		return mt_error(e, "cannot give capture '%s' to uid %u", path, (unsigned)owner);
	}
	close(fd);
	char resolved[PATH_MAX];
	if (!realpath(path, resolved) || strlen(resolved) >= cap) {
		int e = -errno;
		mt_unlink_regular(path);
		return mt_error(e ? e : -ENAMETOOLONG, "cannot resolve capture path '%s'", path);
	}
	memcpy(abs, resolved, strlen(resolved) + 1);
	return 0;
}
