/* SPDX-License-Identifier: MIT */
#ifndef MT_UTIL_LIVEMAP_AHEAD_H
#define MT_UTIL_LIVEMAP_AHEAD_H
/*
 * A live map's next tables made ahead on a thread of its own (the
 * reader's, never the payload's: a profiled process gets no thread of
 * ours for this). A map of millions of blocks doubles each of its tables
 * a dozen times, and most of a doubling is the kernel's: mapping and
 * zeroing the new table's pages, and unmapping the old one's. With a
 * supply of its own, the map asks for a table when it is 5/8 full (5/6
 * of the way to doubling at 3/4), the thread makes it while the map goes
 * on, and the doubling then only moves the blocks; the old table goes
 * back to the thread to be unmapped. It makes them in the order they
 * were asked for (a map's tables fill up evenly, so in about that order)
 * and keeps at most 8 made and not yet taken: a map that stops growing
 * leaves that much memory unused, not a second map's worth.
 *
 * The thread starts with the first table of 64 KiB or more asked for
 * (a small map never has one); if it cannot, the map makes its own as
 * before. A table not yet started when the map needs it is the map's to
 * make; one being made is waited for.
 *
 * Ownership: mt_livemap_ahead_new() installs itself as @m's supply;
 * mt_livemap_ahead_free() joins the thread, frees the tables made and not
 * taken and leaves @m with its own tables again (the ones it has are
 * kept). @m must outlive it.
 */
#include "util/livemap.h"

struct mt_livemap_ahead;

/* mt_livemap_ahead_new() - a supply of tables for @m, installed; NULL
 * without memory (@m then makes its own). */
struct mt_livemap_ahead *mt_livemap_ahead_new(struct mt_livemap *m);

/* mt_livemap_ahead_free() - @a stopped and freed (NULL: nothing). */
void mt_livemap_ahead_free(struct mt_livemap_ahead *a);

#endif /* MT_UTIL_LIVEMAP_AHEAD_H */
