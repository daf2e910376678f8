/* SPDX-License-Identifier: MIT */
/*
 * Which frames the reports hide (reader/frames.h): names matched as
 * memray matches the import system's, and memtrace's package by the
 * names of its files under a directory named memtrace.
 */
#include "reader/frames.h"

#include <string.h> /* strlen */

static int ends_with(const char *s, size_t n, const char *tail)
{
	size_t t = strlen(tail);
	return n >= t && !memcmp(s + n - t, tail, t);
}

static const char *const import_files[] = {
	"/importlib/_bootstrap.py",
	"/importlib/_bootstrap_external.py",
};

static const char *const import_functions[] = { "import_name", "import_from", "import_all_from" };

static const char *const memtrace_files[] = {
	"/memtrace/__init__.py",      "/memtrace/__main__.py", "/memtrace/_native.py",
	"/memtrace/pytest_plugin.py", "/memtrace/reader.py",   "/memtrace/tracker.py",
	"/memtrace/_pytest_limits.py", "/memtrace/_records.py",
};

#define LEN(a) (sizeof(a) / sizeof((a)[0]))

enum mt_frame_kind mt_frame_kind(const char *function, const char *file, int native)
{
	if (!file || !function)
		return MT_FRAME_SHOWN;
	size_t n = strlen(file);
	if (native) {
		if (ends_with(file, n, "/Python/import.c"))
			return MT_FRAME_IMPORT;
		if (ends_with(file, n, "/ceval.c") || !strcmp(file, "ceval.c"))
			for (size_t i = 0; i < LEN(import_functions); i++)
				if (!strcmp(function, import_functions[i]))
					return MT_FRAME_IMPORT;
		return MT_FRAME_SHOWN;
	}
	if (!strncmp(file, "<frozen importlib.", 18))
		return MT_FRAME_IMPORT;
	for (size_t i = 0; i < LEN(import_files); i++)
		if (ends_with(file, n, import_files[i]))
			return MT_FRAME_IMPORT;
	for (size_t i = 0; i < LEN(memtrace_files); i++)
		if (ends_with(file, n, memtrace_files[i]))
			return MT_FRAME_MEMTRACE;
	return MT_FRAME_SHOWN;
}

enum mt_frame_kind mt_frame_page_kind(const char *function, const char *file, int native)
{
	enum mt_frame_kind k = mt_frame_kind(function, file, native);

	if (k != MT_FRAME_SHOWN || native || !file || !function)
		return k;
	if (!strcmp(file, "<frozen runpy>") || ends_with(file, strlen(file), "/runpy.py"))
		return MT_FRAME_RUNPY;
	return MT_FRAME_SHOWN;
}
