/* SPDX-License-Identifier: MIT */
/*
 * memtrace run's look at the script before anything is created: python
 * would refuse it (it cannot be opened, or it is no Python source, zip
 * archive or bytecode), so no capture is made for it. Reads the script
 * only when it is a regular file: a pipe (bash's <(...)) is left whole.
 */
#include "cli/cmd.h"
#include "util/error.h"
#include "util/io.h"

#include <dirent.h>   /* opendir */
#include <errno.h>    /* errno */
#include <fcntl.h>    /* open */
#include <string.h>   /* memchr */
#include <sys/stat.h> /* fstat */
#include <unistd.h>   /* pread */

/* A zip archive (python runs its __main__.py): the end of central
 * directory record's signature in the last 64 KiB + 22 bytes, where
 * zipimport looks for it. */
static int is_zip(int fd, off_t size)
{
	static unsigned char tail[65536 + 22];
	off_t from = size > (off_t)sizeof(tail) ? size - (off_t)sizeof(tail) : 0;
	ssize_t n = pread(fd, tail, (size_t)(size - from), from);
	for (ssize_t i = n - 22; i >= 0; i--)
		if (!memcmp(tail + i, "PK\x05\x06", 4))
			return 1;
	return 0;
}

/* A directory python can run: one with a __main__ module. */
static int has_main(int fd)
{
	int dup_fd = dup(fd);
	DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
	struct dirent *de;
	int found = 0;
	if (!d) {
		if (dup_fd >= 0)
			close(dup_fd);
		return 1; /* cannot tell: python will */
	}
	while (!found && (de = readdir(d)))
		found = !strncmp(de->d_name, "__main__.", 9);
	closedir(d);
	return found;
}

int mt_cli_check_script(const char *script)
{
	unsigned char head[4096];
	struct stat sb;

	if (!strcmp(script, "-"))
		return 0; /* python reads the program from its standard input */
	int fd = open(script, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		mt_error(-errno, "run: can't open file '%s'", script);
		return 2;
	}
	if (fstat(fd, &sb) != 0) {
		mt_error(-errno, "run: can't open file '%s'", script);
		close(fd);
		return 2;
	}
	const char *why = NULL;
	if (S_ISDIR(sb.st_mode)) {
		if (!has_main(fd))
			why = "a directory without a __main__ module";
	} else if (S_ISREG(sb.st_mode)) {
		ssize_t n = pread(fd, head, sizeof(head), 0);
		size_t len = strlen(script);
		if (n < 0) {
			mt_error(-errno, "run: can't read file '%s'", script);
			close(fd);
			return 2;
		}
		if (n >= 4 && !memcmp(head, "\x7f" "ELF", 4))
			why = "an executable (ELF), not a Python script";
		/* bytecode: python goes by the name, or by the "\r\n" that
		 * ends every version's magic number */
		else if (memchr(head, '\0', (size_t)n) &&
			 !(len > 4 && !strcmp(script + len - 4, ".pyc")) &&
			 !(n >= 4 && head[2] == '\r' && head[3] == '\n') && !is_zip(fd, sb.st_size))
			why = "not a Python script (it holds NUL bytes)";
	}
	close(fd);
	if (why) {
		mt_error(0, "run: '%s' is %s", script, why);
		return 2;
	}
	return 0;
}
