/* SPDX-License-Identifier: MIT */
#ifndef MT_READER_LOCATIONS_H
#define MT_READER_LOCATIONS_H
/*
 * A snapshot's memory by source location (function, file, line) rather
 * than by stack: the table the stats, summary and live reports rank. It
 * is made on demand from a built snapshot, through reader/snapshot.h's
 * queries alone (stack usage, frames and parents), in one depth-first
 * walk of the stack trie; the snapshot itself is not changed.
 * Locations compare by their strings' pointers (the snapshot interns
 * them), and the strings stay the snapshot's: valid until
 * mt_snapshot_release().
 */
#include <stddef.h>    /* size_t */
#include <stdint.h>    /* uint64_t */
#include <sys/types.h> /* ssize_t */

#include "reader/snapshot.h" /* enum mt_view */

/* A source location (function, file, line) with its memory in a view.
 * own: allocated directly at this location (innermost frame);
 * total: at it or in anything it called (each stack counted once even
 * if the location recurs in it). */
struct mt_location {
	const char *function; /* "<no Python frames>" for stack 0 */
	const char *file;
	int line;
	uint64_t own_bytes, own_count;
	uint64_t total_bytes, total_count;
	int native; /* a native (C) frame's location */
};

/* mt_snapshot_locations() - every location with memory in @view, in no
 * particular order. *@out is malloc'ed (caller frees; strings are
 * borrowed from @s). Returns the number of locations or -ENOMEM. */
ssize_t mt_snapshot_locations(const struct mt_snapshot *s, enum mt_view view,
			      struct mt_location **out);

/* mt_snapshot_locations_opt() - the same, with some frames left out
 * (@how): MT_LOC_HIDE, those that reader/frames.h hides (their memory
 * goes to their nearest shown caller, or to an MT_HIDDEN_FRAMES
 * location), the number of trie nodes left out into *@n_hidden (may be
 * NULL); MT_LOC_PYTHON, native frames (their memory goes to their
 * nearest Python caller, or to the "<no Python frames>" location), so
 * that a location's own memory is that of its innermost Python frame,
 * as memray's stats rank them. */
enum { MT_LOC_HIDE = 1, MT_LOC_PYTHON = 2 };
ssize_t mt_snapshot_locations_opt(const struct mt_snapshot *s, enum mt_view view, unsigned how,
				  size_t *n_hidden, struct mt_location **out);

/* mt_snapshot_thread_locations() - mt_snapshot_locations_opt() of one
 * thread's memory: the sites whose thread index (struct mt_site.thread)
 * is @thread; MT_ALL_THREADS, all of them. */
#define MT_ALL_THREADS UINT32_MAX
ssize_t mt_snapshot_thread_locations(const struct mt_snapshot *s, enum mt_view view,
				     unsigned how, uint32_t thread, size_t *n_hidden,
				     struct mt_location **out);

/* qsort comparators: descending, ties by function, file, line. */
int mt_location_cmp_total(const void *a, const void *b);
int mt_location_cmp_own(const void *a, const void *b);
int mt_location_cmp_own_count(const void *a, const void *b);
int mt_location_cmp_total_count(const void *a, const void *b);

#endif /* MT_READER_LOCATIONS_H */
