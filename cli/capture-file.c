/* SPDX-License-Identifier: MIT */
/*
 * Creating memtrace's output files (captures, report pages, run --live's
 * .log): always a new regular file, never opened through a symbolic link
 * nor anything but a regular file, and never given to another user (an
 * attached process gets its capture open, over the control socket). With
 * -f an existing file (or link) is replaced by a new one renamed over it,
 * never written in place.
 */
#include "cli/cmd.h"
#include "util/error.h"
#include "util/io.h"

#include <errno.h>      /* EEXIST */
#include <fcntl.h>      /* openat */
#include <limits.h>     /* PATH_MAX */
#include <stdio.h>      /* fprintf */
#include <stdlib.h>     /* realpath */
#include <string.h>     /* strlen */
#include <sys/random.h> /* getrandom */
#include <sys/stat.h>   /* fstatat */
#include <unistd.h>     /* close */

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

/* The files this command reads (its captures, the script it runs): never
 * replaced by one it writes, -f or not. */
static struct input {
	dev_t dev;
	ino_t ino;
	const char *what;
} inputs[2];
static int n_inputs;

int mt_cli_reads(const char *path, const char *what)
{
	struct stat sb;
	if (stat(path, &sb) != 0)
		return 0;
	if (n_inputs < (int)(sizeof(inputs) / sizeof(inputs[0])) && S_ISREG(sb.st_mode))
		inputs[n_inputs++] = (struct input){ sb.st_dev, sb.st_ino, what };
	return 1;
}

/* @sb, of the name to be replaced (a link itself, not what it points to) */
static int read_here(const struct stat *sb, const char *path, const char *what)
{
	for (int i = 0; S_ISREG(sb->st_mode) && i < n_inputs; i++)
		if (inputs[i].dev == sb->st_dev && inputs[i].ino == sb->st_ino) {
			mt_error(0, "%s'%s' is %s: give it another name", what, path,
				 inputs[i].what);
			return -EINVAL;
		}
	return 0;
}

static const char *kind_of(mode_t m)
{
	return S_ISDIR(m)    ? "a directory"
	       : S_ISFIFO(m) ? "a FIFO"
	       : S_ISSOCK(m) ? "a socket"
	       : S_ISCHR(m)  ? "a character device"
	       : S_ISBLK(m)  ? "a block device"
			     : "not a regular file";
}

int mt_cli_is_null_device(const char *path)
{
	struct stat a, b;
	return stat(path, &a) == 0 && S_ISCHR(a.st_mode) && stat("/dev/null", &b) == 0 &&
	       a.st_rdev == b.st_rdev;
}

int mt_cli_std_stream(const char *path)
{
	struct stat l, a, b;
	if (lstat(path, &l) != 0 || !S_ISLNK(l.st_mode) || stat(path, &a) != 0)
		return 0;
	for (int fd = 1; fd <= 2; fd++)
		if (fstat(fd, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
			return fd;
	return 0;
}

/* @path links to our standard output or error (/dev/stdout, /dev/fd/2):
 * -errno after saying so. Never replaced, -f or not: it is the system's,
 * and a report meant for the stream (as memray writes it there) would
 * have been written into a new file of that name instead. */
static int std_stream_error(const char *path, const char *what)
{
	int fd = mt_cli_std_stream(path);
	if (!fd)
		return 0;
	mt_error(0, "%s'%s' is standard %s, not a file", what, path, fd == 1 ? "output" : "error");
	return -EINVAL;
}

/* Whether the existing name @path (@sb: the link itself, not what it
 * points to) may be replaced: 0 with @force when it is a regular file or
 * a link, and no file this command reads; else -errno after saying why. */
static int replaceable(const struct stat *sb, const char *path, const char *what, int force)
{
	if (!S_ISREG(sb->st_mode) && !S_ISLNK(sb->st_mode)) {
		mt_error(0, "%s'%s' is %s, not a regular file", what, path, kind_of(sb->st_mode));
		return -EINVAL;
	}
	int e = read_here(sb, path, what);
	if (e < 0)
		return e;
	if (!force) {
		mt_error(0, "%s'%s' exists (use -f to overwrite it)", what, path);
		return -EEXIST;
	}
	return 0;
}

/* Split @path into its directory (opened, following links as the user
 * wrote it) and last component (into @base). Returns the directory's fd,
 * or -errno. */
static int open_parent(const char *path, char *base, size_t cap, char *dir, size_t dcap)
{
	const char *slash = strrchr(path, '/');
	const char *name = slash ? slash + 1 : path;
	if (strlen(name) >= cap || (slash && (size_t)(slash - path) + 2 > dcap))
		return -ENAMETOOLONG;
	if (!*name || !strcmp(name, ".") || !strcmp(name, ".."))
		return -EISDIR;
	memcpy(base, name, strlen(name) + 1);
	if (!slash)
		snprintf(dir, dcap, ".");
	else if (slash == path)
		snprintf(dir, dcap, "/");
	else
		snprintf(dir, dcap, "%.*s", (int)(slash - path), path);
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return dfd < 0 ? -errno : dfd;
}

/* A new file in @dfd: @name itself, or (@name NULL) a temporary name put
 * in @tmp. Returns its fd or -errno. */
static int create_in(int dfd, const char *name, char *tmp, size_t cap, mode_t mode)
{
	const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
	if (name) {
		int fd = openat(dfd, name, flags, mode);
		return fd < 0 ? -errno : fd;
	}
	for (int tries = 0; tries < 64; tries++) {
		unsigned long long r = 0;
		if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r))
			r ^= (unsigned long long)getpid() << 32 ^ (unsigned long long)tries * 0x9e3779b9u;
		snprintf(tmp, cap, ".memtrace-%016llx.tmp", r);
		int fd = openat(dfd, tmp, flags, mode);
		if (fd >= 0 || errno != EEXIST)
			return fd < 0 ? -errno : fd;
	}
	return -EEXIST;
}

/* "x/", "." or "..": a directory's name, whatever is there */
static int directory_name(const char *path, const char *what)
{
	struct stat sb;
	if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
		mt_error(0, "%s'%s' is a directory, not a regular file", what, path);
	else
		mt_error(0, "%s'%s' names a directory (it ends with '/'), not a file", what, path);
	return -EISDIR;
}

int mt_cli_check_output(const char *path, const char *what, int force)
{
	char base[256], dir[PATH_MAX];
	struct stat sb;
	if (lstat(path, &sb) == 0) {
		if (mt_cli_is_null_device(path) || mt_cli_std_stream(path) == 1)
			return 0; /* mt_cli_open_output() writes to standard output */
		int e = std_stream_error(path, what);
		return e < 0 ? e : replaceable(&sb, path, what, force);
	}
	/* a name that cannot be made (no such directory, one we may not
	 * write, a read-only file system, a name too long) is said now,
	 * not once the capture is read */
	if (errno != ENOENT)
		return mt_error(-errno, "cannot create %s'%s'", what, path);
	int dfd = open_parent(path, base, sizeof(base), dir, sizeof(dir));
	if (dfd == -EISDIR)
		return directory_name(path, what);
	if (dfd < 0)
		return mt_error(dfd, "cannot create %s'%s'", what, path);
	int e = faccessat(dfd, ".", W_OK | X_OK, AT_EACCESS) != 0 ? -errno : 0;
	close(dfd);
	return e < 0 ? mt_error(e, "cannot create %s'%s'", what, path) : 0;
}

static int create_file(const char *path, int force, mode_t mode, const char *what, char *abs,
		       size_t cap, int allow_null)
{
	char base[256], dir[PATH_MAX], tmp[64];
	struct stat sb;
	int e;

	if ((e = std_stream_error(path, what)) < 0)
		return e;
	int dfd = open_parent(path, base, sizeof(base), dir, sizeof(dir));
	if (dfd == -EISDIR)
		return directory_name(path, what);
	if (dfd < 0)
		return mt_error(dfd, "cannot create %s'%s'", what, path);
	int fd = create_in(dfd, base, NULL, 0, mode);
	int replace = 0;
	if (fd == -EEXIST) {
		if (fstatat(dfd, base, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
			e = mt_error(-errno, "cannot create %s'%s'", what, path);
			goto fail;
		}
		/* a page or log thrown away (memray writes them there too) */
		if (allow_null && mt_cli_is_null_device(path)) {
			close(dfd);
			fd = open(path, O_WRONLY | O_CLOEXEC);
			if (fd < 0)
				return mt_error(-errno, "cannot open %s'%s'", what, path);
			if (abs)
				snprintf(abs, cap, "%s", path);
			return fd;
		}
		/* a link is replaced itself (with -f), never followed */
		if ((e = replaceable(&sb, path, what, force)) < 0)
			goto fail;
		replace = 1;
		fd = create_in(dfd, NULL, tmp, sizeof(tmp), mode);
	}
	if (fd < 0) {
		e = mt_error(fd, "cannot create %s'%s'", what, path);
		goto fail;
	}
	const char *made = replace ? tmp : base;
	/* a directory put there meanwhile makes this fail; a FIFO or device
	 * is replaced, never opened */
	if (replace && renameat(dfd, tmp, dfd, base) != 0) {
		e = mt_error(-errno, "cannot replace %s'%s'", what, path);
		goto unlink;
	}
	made = base;
	if (abs) {
		/* the directory as resolved now, and the name we made in it:
		 * not whatever the name may point to by now */
		char resolved[PATH_MAX];
		errno = ENAMETOOLONG;
		if (!realpath(dir, resolved) || strlen(resolved) + 1 + strlen(base) + 1 > cap) {
			e = mt_error(-errno, "cannot resolve %s'%s'", what, path);
			goto unlink;
		}
		snprintf(abs, cap, "%s%s%s", resolved, strcmp(resolved, "/") ? "/" : "", base);
	}
	close(dfd);
	return fd;
unlink:
	close(fd);
	unlinkat(dfd, made, 0);
fail:
	close(dfd);
	return e;
}

int mt_cli_create_file(const char *path, int force, mode_t mode, const char *what, char *abs,
		       size_t cap)
{
	return create_file(path, force, mode, what, abs, cap, 1);
}

/* a capture written to /dev/null is memtrace run's business (it hands
 * the payload the device itself); an attached process gets none */
int mt_cli_create_capture(const char *path, int force, char *abs, size_t cap)
{
	return create_file(path, force, 0600, "capture ", abs, cap, 0);
}
