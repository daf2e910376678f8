/* SPDX-License-Identifier: MIT */
#ifndef MT_READER_PYAPI_H
#define MT_READER_PYAPI_H
/*
 * A small C interface to the reader for the Python package, which loads
 * libmemtrace-reader.so with ctypes. Plain structs of fixed-width fields
 * and functions that return counts, so that ctypes declarations stay
 * simple; no callbacks into Python except for mt_py_dump().
 *
 * One struct mt_py_reader holds an open capture and the snapshot built
 * from it (one pass at open), or follows a capture while it is written
 * (mt_py_follow(), for SocketReader): its snapshot is what the last
 * mt_py_refresh() read, and only the snapshot's queries answer (the
 * events, temporal views and other thresholds need the whole capture:
 * -EINVAL); its strings are valid until the next refresh, and after a
 * refresh that failed every query answers as for an empty capture. The record queries hand back a malloc'ed
 * array that the caller releases with mt_py_free(); the events are read
 * in a pass of their own, and so is a temporary view with another threshold
 * than the snapshot's. Strings are borrowed from the reader and valid until
 * mt_py_close(). Not thread-safe: one reader per thread, or a lock.
 *
 * Errors are negative (-errno, -MT_E*); functions that can fail for a
 * reason worth a sentence write one (no prefix, no newline) into @err.
 */
#include <stddef.h>    /* size_t */
#include <stdint.h>    /* uint64_t */
#include <sys/types.h> /* ssize_t */

struct mt_py_reader;

/* Layout version of the structs below; bump on any change. */
#define MT_PY_ABI 7

/* What a capture says about itself. Every field is 64 bits wide. */
struct mt_py_meta {
	uint64_t abi;          /* MT_PY_ABI */
	uint64_t pid;
	uint64_t python_hex;   /* PY_VERSION_HEX, 0 if unknown */
	uint64_t flags;        /* MT_HDR_* */
	uint64_t start_ns;     /* CLOCK_REALTIME at tracking start */
	uint64_t end_time_us;  /* since start: trailer, else the last sample */
	uint64_t interval_ms;
	uint64_t main_tid;
	uint64_t peak_heap;    /* bytes */
	uint64_t peak_event;   /* 1-based event number of the peak, 0 = none */
	uint64_t n_events;     /* allocation and free records */
	uint64_t n_allocs;
	uint64_t n_frees;
	uint64_t heap_end;     /* bytes live at the end */
	uint64_t leak_count;   /* allocations live at the end */
	uint64_t n_dropped;    /* events the payload lost */
	uint64_t have_trailer; /* 1 if the capture was finished */
	uint64_t truncated;    /* 1 if cut short or damaged */
	uint64_t peak_rss;
	uint64_t n_samples;
	uint64_t n_threads;
	uint64_t n_diags;
	uint64_t cmdline_len;  /* arguments separated by NUL bytes */
	const char *cmdline;   /* borrowed */
	uint64_t n_frames;     /* the largest stack id: memray's total_frames */
};

/* One event (mt_py_events()) or one group of allocations (the views). */
struct mt_py_record {
	uint64_t tid;           /* kernel thread id; 0 if unknown or merged */
	uint64_t address;       /* events: the address; groups: the first one's */
	uint64_t size;          /* events: bytes (0 for free); groups: total */
	uint64_t n_allocations; /* events: 1; groups: allocations counted */
	uint32_t allocator;     /* enum mt_allocator */
	uint32_t stack;         /* stack id; 0 = no Python frames */
	uint32_t thread;        /* thread index; UINT32_MAX for merged groups */
	uint32_t reserved;
};

/* One frame of a stack, innermost first (as struct mt_frame). */
struct mt_py_frame {
	const char *function;
	const char *file;
	int64_t line;
	int64_t native; /* 1: a native (C) frame */
};

/* One memory sample. */
struct mt_py_sample {
	uint64_t time_us; /* since tracking start */
	uint64_t rss;
	uint64_t heap;    /* tracked heap when the sample was read */
	uint64_t in_use;  /* the C allocator's own count, UINT64_MAX = unknown */
	uint64_t malloc_bytes, malloc_chunks; /* reader/snapshot.h */
};

enum mt_py_view {
	MT_PY_PEAK = 0,      /* live at the peak of the tracked heap */
	MT_PY_LEAKS = 1,     /* live at the end */
	MT_PY_TEMPORARY = 2, /* freed within threshold allocations, same thread */
};

/* mt_py_abi() - MT_PY_ABI of this library. */
int mt_py_abi(void);

/* mt_py_open() - open @path and build its snapshot. Returns 0 and sets
 * *@out (release with mt_py_close()), or a negative error with a
 * sentence in @err. Damage that still leaves records readable is not an
 * error: see mt_py_warnings(). */
int mt_py_open(const char *path, struct mt_py_reader **out, char *err, size_t errlen);
/* mt_py_follow() - a reader of the capture at @path while it is written,
 * which reads nothing until mt_py_refresh(). Returns 0 and sets *@out, or
 * -ENOMEM. */
int mt_py_follow(const char *path, struct mt_py_reader **out);
/* mt_py_refresh() - read what the followed capture gained and view it.
 * Returns 0, or a negative error with a sentence in @err: the header is
 * not there yet (-MT_EFORMAT, -MT_ETRUNC), the file is not a capture or
 * is corrupt: the snapshot read so far is gone then, and queries answer
 * as for an empty capture until a refresh returns 0 again. */
int mt_py_refresh(struct mt_py_reader *r, char *err, size_t errlen);
/* mt_py_close() - NULL is a no-op. */
void mt_py_close(struct mt_py_reader *r);

/* mt_py_meta() - fill @m. */
void mt_py_meta(const struct mt_py_reader *r, struct mt_py_meta *m);
/* mt_py_warnings() - damage found while reading, one line each, "" if
 * none. Borrowed. */
const char *mt_py_warnings(const struct mt_py_reader *r);
/* mt_py_python_allocator() - the interpreter's allocator as memray names
 * it, "unknown" if the capture does not say; borrowed. */
const char *mt_py_python_allocator(const struct mt_py_reader *r);

/* mt_py_diag() - diagnostic @i (< n_diags) from the payload; borrowed. */
const char *mt_py_diag(const struct mt_py_reader *r, size_t i, uint32_t *code);

/* Every allocation and free record in capture order, a chunk at a time,
 * so that memory stays bounded by a chunk's events however long the
 * capture: mt_py_events_open() starts a pass of its own (several may run
 * at once over one reader), mt_py_events_next() hands out the events of
 * the pass's next chunks that have any (0 once the pass has ended), and
 * mt_py_events_close() ends it. The array *@out is the pass's, valid
 * until its next call; a pass must be closed before its reader. */
struct mt_py_events;
int mt_py_events_open(const struct mt_py_reader *r, struct mt_py_events **out);
ssize_t mt_py_events_next(const struct mt_py_reader *r, struct mt_py_events *e,
			  const struct mt_py_record **out);
void mt_py_events_close(struct mt_py_events *e);

/* mt_py_view() - allocations grouped by stack, allocator and (unless
 * @merge_threads) thread for @view, as the snapshot counts them (its
 * sites): sizes summed, the address of the group's first allocation
 * (which need not be in the view), groups in order of that allocation.
 * @threshold is for MT_PY_TEMPORARY: an allocation of the malloc family
 * freed by its own thread with at most @threshold other allocations of
 * that thread in between is temporary. Returns the count and sets *@out (mt_py_free()),
 * -ENOMEM, or -EINVAL for an unknown view. */
ssize_t mt_py_view(struct mt_py_reader *r, int view, int merge_threads, uint64_t threshold,
		   struct mt_py_record **out);

/* mt_py_free() - release an array from mt_py_view(). */
void mt_py_free(void *p);

/* mt_py_stack() - frames of stack @id, innermost first, into
 * @out[0..max). Returns the full depth. Strings are borrowed. */
size_t mt_py_stack(const struct mt_py_reader *r, uint32_t id, struct mt_py_frame *out, size_t max);

/* mt_py_native_stack() - with native stacks, the native chain alone of
 * stack @id, innermost first, into @out[0..max) (returns the full depth),
 * its native stack id into *@leaf and its module map generation into
 * *@gen (0 when @id has none). */
size_t mt_py_native_stack(const struct mt_py_reader *r, uint32_t id, struct mt_py_frame *out,
			  size_t max, uint32_t *leaf, uint32_t *gen);

/* mt_py_hybrid_stack() - with native stacks, stack @id as memray's
 * hybrid_stack_trace() gives it (reader/native.h, mt_native_merged()),
 * innermost first, into @out[0..max). Returns the full depth, 0 when @id
 * has no native chain. */
size_t mt_py_hybrid_stack(const struct mt_py_reader *r, uint32_t id, struct mt_py_frame *out,
			  size_t max);

/* mt_py_path_key() - one key per call path as it prints (with native
 * stacks, and native chain) of stack @id, as the grouped records are keyed
 * (reader/groups.h): the path's key << 32 | the native leaf. */
uint64_t mt_py_path_key(struct mt_py_reader *r, uint32_t id);

/* mt_py_thread() - kernel tid and name (borrowed, "" if unnamed) of
 * thread index @index. Returns 0, or -ENOENT for an index never seen. */
int mt_py_thread(const struct mt_py_reader *r, uint32_t index, uint64_t *tid, const char **name);

/* One interval of a site's memory (reader/temporal.h): @rec says whose
 * (tid, first address, allocator, stack, thread as mt_py_view() without
 * merging; size and n_allocations the interval's), allocated after @a
 * memory samples and freed after @f (UINT64_MAX: never). */
struct mt_py_interval {
	struct mt_py_record rec;
	uint64_t a, f;
};

/* mt_py_temporal() - every interval of every site, at the grain of the
 * samples (one more pass over the capture), into a malloc'ed array *@out
 * (mt_py_free()). Returns how many, or a negative error. */
ssize_t mt_py_temporal(struct mt_py_reader *r, struct mt_py_interval **out);

/* One run of a site's share of the high-water marks (reader/hwmtime.h):
 * @rec says whose (as in struct mt_py_interval; size and n_allocations the
 * share), from stretch @as_of on. */
struct mt_py_hwm_run {
	struct mt_py_record rec;
	uint64_t as_of;
};

/* mt_py_temporal_hwm() - every site's runs, one memory sample in @stride
 * (> 0) a snapshot (one more pass over the capture), into *@out, and the
 * high-water mark of each stretch into *@marks (*@n_marks of them: the
 * snapshots + 1); both malloc'ed (mt_py_free()). Returns the runs' count,
 * or a negative error. */
ssize_t mt_py_temporal_hwm(struct mt_py_reader *r, uint64_t stride, struct mt_py_hwm_run **out,
			   uint64_t **marks, size_t *n_marks);

/* mt_py_samples() - the memory samples, borrowed; *@n is their count. */
const struct mt_py_sample *mt_py_samples(const struct mt_py_reader *r, size_t *n);

/* mt_py_dump() - `memtrace parse` of @path, written through @write
 * (which returns the bytes it took, or -1 to stop). Returns 0 or a
 * negative error with a sentence in @err. */
int mt_py_dump(const char *path, ssize_t (*write)(void *ctx, const char *buf, size_t len),
	       void *ctx, char *err, size_t errlen);

#endif /* MT_READER_PYAPI_H */
