/* SPDX-License-Identifier: MIT */
#ifndef MT_READER_FRAMES_H
#define MT_READER_FRAMES_H
/*
 * Frames the reports hide unless asked (--show-hidden-frames, or the
 * flamegraph page's checkbox): those of the import system and those of
 * memtrace's own Python package. A hidden frame leaves its call path and
 * what it called joins its caller, so that no memory is lost: memory
 * allocated in a hidden frame is its nearest shown caller's own, and a
 * path of hidden frames alone is shown as one MT_HIDDEN_FRAMES frame.
 *
 * The import system: CPython's frozen importlib ("<frozen
 * importlib._bootstrap>", "<frozen importlib._bootstrap_external>"), its
 * source files on an interpreter that runs them as files
 * (.../importlib/_bootstrap.py, _bootstrap_external.py), and the
 * evaluation loop's import_name(), import_from() and import_all_from()
 * (ceval.c) and Python/import.c in native stacks. memtrace's own: Python
 * frames of memtrace/{__init__,__main__,_native,pytest_plugin,reader,
 * tracker}.py wherever the package is installed (the Tracker's __enter__
 * and __exit__, the pytest plugin's wrapper).
 */

enum mt_frame_kind {
	MT_FRAME_SHOWN,
	MT_FRAME_IMPORT,   /* the import system */
	MT_FRAME_MEMTRACE, /* memtrace's own Python package */
	MT_FRAME_RUNPY,    /* runpy's, of "python -m": the flame graph's alone
			    * (mt_frame_page_kind()) */
};

/* the frame that stands for a path of hidden frames alone */
#define MT_HIDDEN_FRAMES "<hidden frames>"

/* mt_frame_kind() - which of the above a frame is. @file and @function
 * may be NULL (a frame without them is shown). */
enum mt_frame_kind mt_frame_kind(const char *function, const char *file, int native);

/* mt_frame_page_kind() - the kind of a frame in the flame graph page,
 * which also hides runpy's frames (<frozen runpy>, .../runpy.py) above a
 * "python -m" program's, as memray's flame graph hides them as irrelevant;
 * the text reports and the table show them, as memray's do. */
enum mt_frame_kind mt_frame_page_kind(const char *function, const char *file, int native);

#endif /* MT_READER_FRAMES_H */
