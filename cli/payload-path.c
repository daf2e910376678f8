/* SPDX-License-Identifier: MIT */
/* Where the payload of this memtrace is: for run (preload) and attach. */
#include "cli/cmd.h"
#include "inject/inject.h"
#include "mt-config.h"
#include "util/error.h"

#include <dirent.h> /* opendir, readdir */
#include <errno.h>  /* errno */
#include <limits.h> /* PATH_MAX */
#include <stdio.h>  /* snprintf */
#include <stdlib.h> /* getenv, realpath */
#include <string.h> /* strlen, strncmp */
#include <unistd.h> /* access */

static int readable(const char *path, char *out, size_t cap)
{
	char real[PATH_MAX];
	if (access(path, R_OK) != 0 || !realpath(path, real) || strlen(real) >= cap)
		return 0;
	memcpy(out, real, strlen(real) + 1);
	return 1;
}

/* A wheel's layout (pip into a venv, --user or a prefix): the executable
 * in <prefix>/bin, the payload inside the memtrace package in
 * <prefix>/lib/python3.X/site-packages (dist-packages for Debian's pip
 * outside a venv). The wheel serves any Python 3, so X is looked for. */
static int in_site_packages(const char *dir, char *out, size_t cap)
{
	static const char *const sites[] = { "site-packages", "dist-packages" };
	char lib[PATH_MAX];
	snprintf(lib, sizeof(lib), "%s/../lib", dir);
	DIR *d = opendir(lib);
	if (!d)
		return 0;
	int found = 0;
	for (struct dirent *e; !found && (e = readdir(d));) {
		if (strncmp(e->d_name, "python3", 7) != 0)
			continue;
		for (size_t i = 0; !found && i < sizeof(sites) / sizeof(sites[0]); i++) {
			char path[PATH_MAX];
			int n = snprintf(path, sizeof(path), "%s/%s/%s/memtrace/%s", lib, e->d_name,
					 sites[i], MT_PAYLOAD_NAME);
			found = n > 0 && (size_t)n < sizeof(path) && readable(path, out, cap);
		}
	}
	closedir(d);
	return found;
}

int mt_find_payload(char *out, size_t cap)
{
	const char *env = getenv("MEMTRACE_PAYLOAD");
	const char *dir = mt_self_dir();
	const char *rel[] = { MT_PAYLOAD_RELDIR, "../payload" };

	if (env) {
		if (access(env, R_OK) != 0)
			return mt_error(-errno, "cannot read payload '%s' (MEMTRACE_PAYLOAD)", env);
		if (!realpath(env, out))
			return mt_error(-errno, "cannot resolve payload '%s'", env);
		/* another file would be preloaded (or dlopen'ed) in vain, and
		 * the run then said to have started no Python */
		int rc = mt_inject_payload_check(out);
		if (rc == -ENOEXEC || rc == -ENOENT)
			return mt_error(0, "payload '%s' (MEMTRACE_PAYLOAD) is not memtrace's: %s",
					env, rc == -ENOEXEC ? "not a 64-bit ELF file"
							    : "it exports no memtrace_attach_entry"),
			       rc;
		if (rc < 0)
			return mt_error(rc, "cannot read payload '%s' (MEMTRACE_PAYLOAD)", env);
		return 0;
	}
	for (size_t i = 0; dir && i < sizeof(rel) / sizeof(rel[0]); i++) {
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/%s/%s", dir, rel[i], MT_PAYLOAD_NAME);
		if (readable(path, out, cap))
			return 0;
	}
	if (dir && in_site_packages(dir, out, cap))
		return 0;
	return mt_error(-ENOENT, "cannot find %s next to '%s'", MT_PAYLOAD_NAME, dir ? dir : "?");
}
