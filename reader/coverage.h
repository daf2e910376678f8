/* SPDX-License-Identifier: MIT */
#ifndef MT_READER_COVERAGE_H
#define MT_READER_COVERAGE_H
/*
 * How much of what the C allocator holds a capture accounts for. The
 * payload puts glibc's own count of the bytes in use (mallinfo2():
 * uordblks + hblkhd) in some memory samples; the snapshot keeps, at
 * every sample, the tracked blocks glibc's malloc holds (the malloc
 * family, pymalloc's large blocks) with their sizes as glibc's chunks
 * (snapshot.h). Compared at one sample, chunks with chunks, a fully
 * tracked program accounts for nearly all of it: what glibc holds
 * besides is its per-thread caches (a few hundred KiB a thread at most).
 * A large rest is memory the capture does not see: allocated before
 * tracking started, or through a path memtrace does not hook (a library
 * calling glibc's internal entry points, the C library's and the
 * loader's own allocations).
 *
 * What the allocator held as tracking started (the count of the last
 * sample before the first event; `memtrace run` takes one just then) is
 * the interpreter's own start-up, which a capture leaves out by design,
 * as memray's: up to that much of the rest is excused from the warning.
 * Not in an attached capture, where it is the program's memory from
 * before the attach, which the user is told of.
 *
 * An aggregated capture keeps no tracked blocks per sample: it is
 * compared at the end only, its live blocks of the malloc family by the
 * site figures, with 16 bytes of chunk overhead a block.
 */
#include <stdint.h> /* uint64_t */

struct mt_snapshot;

/* Warn when the rest, less what is excused, is more than this share of
 * the count and more than MT_COVERAGE_WARN_BYTES. */
#define MT_COVERAGE_WARN_SHARE 0.10
#define MT_COVERAGE_WARN_BYTES (1ull << 20)

struct mt_coverage {
	uint64_t time_us;     /* of the sample compared */
	uint64_t in_use;      /* the allocator's count then */
	uint64_t bytes;       /* tracked blocks of glibc's malloc then */
	uint64_t chunks;      /* the same as glibc's chunks (headers, rounding) */
	uint64_t accounted;   /* chunks, at most in_use */
	uint64_t unaccounted; /* in_use - accounted */
	double share;         /* accounted / in_use; 1 when in_use is 0 */
	uint64_t start;       /* the count as tracking started, MT_SAMPLE_UNKNOWN */
	uint64_t excused;     /* of the rest, put down to the start (at process start only) */
	int warn;             /* the rest less excused is large (MT_COVERAGE_WARN_*) */
};

enum mt_coverage_when {
	MT_COVERAGE_END,  /* the last sample with the allocator's count */
	MT_COVERAGE_PEAK, /* of those, the last of the highest tracked heap */
};

/* mt_coverage() - the comparison at the sample @when into *@c. Returns 1,
 * or 0 when the capture cannot say (no sample has the allocator's count:
 * a capture of an older memtrace, another malloc than glibc's, a glibc
 * before 2.33; or the peak of an aggregated capture). */
int mt_coverage(const struct mt_snapshot *s, enum mt_coverage_when when, struct mt_coverage *c);

#endif /* MT_READER_COVERAGE_H */
