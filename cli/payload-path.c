/* SPDX-License-Identifier: MIT */
/* Where the payload of this memtrace is: for run (preload) and attach. */
#include "cli/cmd.h"
#include "mt-config.h"
#include "util/error.h"

#include <errno.h>  /* errno */
#include <limits.h> /* PATH_MAX */
#include <stdio.h>  /* snprintf */
#include <stdlib.h> /* getenv, realpath */
#include <string.h> /* strlen */
#include <unistd.h> /* access */

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
		return 0;
	}
	for (size_t i = 0; dir && i < sizeof(rel) / sizeof(rel[0]); i++) {
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/%s/%s", dir, rel[i], MT_PAYLOAD_NAME);
		if (access(path, R_OK) == 0 && realpath(path, out) && strlen(out) < cap)
			return 0;
	}
	return mt_error(-ENOENT, "cannot find %s next to '%s'", MT_PAYLOAD_NAME, dir ? dir : "?");
}
