/* SPDX-License-Identifier: MIT */
#ifndef MEMTRACE_PAYLOAD_H
#define MEMTRACE_PAYLOAD_H
/*
 * The payload's exported interface: the only symbols it exports. Used by
 * `memtrace run` (through the environment, see below), by the injector
 * (remote calls) and by the Python package (ctypes).
 *
 * memtrace run: LD_PRELOAD the payload with MEMTRACE_RUN set to
 * "<flags>:<interval_ms>:<status fd>:fd:<capture fd>:<absolute capture
 * path>" (the capture memtrace made, open; the path names follow-fork
 * captures), "...:fd:<socket fd>" (a live client), or
 * "...:<absolute capture path>" (opened by the payload); tracking
 * starts with the program's first line and stops when it ends (Python-level
 * atexit) or, failing that, at exit(). One line goes to the status fd (-1:
 * none) when tracking ends: "ok", "error <reason>", or "signal <N>" when a
 * signal ended the process and the capture is whole up to it, with
 * " dropped <events>" after "ok" or "signal <N>" when events were dropped.
 * Both are defined, encoded and parsed by format/runproto.h.
 */
#include <stdint.h> /* uint32_t */

#define MEMTRACE_PATH_MAX 4096

/* Marks the payload's definitions of the functions below: it is built with
 * hidden visibility, and these are the only symbols it exports. */
#define MT_EXPORT __attribute__((visibility("default")))

struct memtrace_config {
	uint32_t size;        /* sizeof(struct memtrace_config) */
	uint32_t flags;       /* MT_HDR_* of format/record.h */
	uint32_t interval_ms; /* memory sample interval; 0 = 10 */
	int32_t fd;           /* capture fd to use (closed by the payload, also
			       * when starting fails), or -1 to open path */
	char path[MEMTRACE_PATH_MAX];
	/* "" or, from a Tracker, "<depth> <hash>" of the frames below the one
	 * that entered it (python/memtrace/tracker.py): written as a
	 * TRACKER_ROOT diagnostic, at which the reader cuts that thread's
	 * stacks, as memray does */
	char root[64];
	/* NULL or, from a Tracker, the command line to record instead of
	 * /proc/self/cmdline: sys.argv, a NUL between two arguments, as
	 * memray records " ".join(sys.argv); @cmdline_len bytes. A pointer
	 * in the caller's process: read during memtrace_payload_start() only
	 * (a followed fork child's capture keeps it) */
	const char *cmdline;
	uint64_t cmdline_len;
};

/* memtrace_payload_start() - start tracking into a new capture. Returns 0,
 * or a negative error (-errno, -MT_E*); -EBUSY if already tracking. */
int memtrace_payload_start(const struct memtrace_config *cfg);

/* memtrace_payload_stop() - stop tracking, restore every GOT slot and
 * PyMem domain still ours, finish and close the capture. Returns 0, -EINVAL
 * if not tracking, or the capture's first write error. */
int memtrace_payload_stop(void);

/* memtrace_payload_tracking() - 1 if this copy of the payload tracks this
 * process, else 0. Another copy (another build, loaded from another path:
 * a Tracker's, then an attach's) asks before it starts: one capture at a
 * time across them too. */
int memtrace_payload_tracking(void);

/* memtrace_attach_entry() - the injector's entry point: copy @cfg, start
 * the payload's control thread (which starts tracking and serves the
 * control socket, see payload/control.c) and return at once. Returns 0,
 * -EBUSY if already tracking, or -errno. */
int memtrace_attach_entry(const struct memtrace_config *cfg);

/* memtrace_attach_entry_str() - the same from "FLAGS INTERVAL PATH", for
 * debugger scripts that cannot build a struct. */
int memtrace_attach_entry_str(const char *spec);

#endif /* MEMTRACE_PAYLOAD_H */
