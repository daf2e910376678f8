/* SPDX-License-Identifier: MIT */
#ifndef MT_READER_FOLLOW_H
#define MT_READER_FOLLOW_H
/*
 * A capture followed while it is written, for `memtrace live`: one
 * snapshot (snapshot.h) kept from refresh to refresh and fed only the
 * chunks the file gained since the last one (mt_capture_follow()), so
 * that a refresh costs the new events and a view of the figures, not a
 * read of the whole history. A last chunk not yet whole is left for the
 * next refresh; a refresh that reads nothing keeps the last figures.
 * A capture with native stacks too: each view resolves the hybrid
 * stacks of what was read (snapshot.h: the return addresses once, the
 * frame nodes again). The file is read again from its start when it was
 * replaced (another capture written over it, or another file at its
 * path).
 *
 * Nothing here prints. Ownership: the snapshot is borrowed, valid until
 * the next refresh or mt_follow_free().
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint64_t */

#include "reader/snapshot.h"

struct mt_follow;

/* What the last refresh read. */
struct mt_follow_read {
	uint64_t chunks;  /* chunks read */
	uint64_t events;  /* allocation and free events among them */
	int from_start;   /* the capture was read from its start */
};

/* mt_follow_new() - follow the capture at @path (which may not exist
 * yet: nothing is opened before the first refresh) with options @o.
 * Returns NULL without memory. */
struct mt_follow *mt_follow_new(const char *path, const struct mt_snapshot_opts *o);

/* mt_follow_refresh() - read what the capture gained and view it.
 * Returns 0, or a negative error with one line (no prefix, no newline)
 * in @msg, as mt_report_load() does: the file cannot be opened or is no
 * capture (-MT_EFORMAT, -MT_ETRUNC: the header may not be written yet),
 * or is corrupt (-MT_ECORRUPT). After an error the next refresh reads
 * the capture from its start. */
int mt_follow_refresh(struct mt_follow *f, char *msg, size_t len);

/* mt_follow_set_opts() - follow with options @o from now on: the next
 * refresh reads the capture again from its start. */
void mt_follow_set_opts(struct mt_follow *f, const struct mt_snapshot_opts *o);

/* mt_follow_snapshot() - the figures of everything read, after a refresh
 * that returned 0; NULL otherwise. */
const struct mt_snapshot *mt_follow_snapshot(const struct mt_follow *f);

/* mt_follow_last() - what the last refresh read. */
struct mt_follow_read mt_follow_last(const struct mt_follow *f);

/* mt_follow_free() - close the capture and release the snapshot; NULL
 * is a no-op. */
void mt_follow_free(struct mt_follow *f);

#endif /* MT_READER_FOLLOW_H */
