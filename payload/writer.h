/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_WRITER_H
#define MT_PAYLOAD_WRITER_H
/*
 * The event ring and the writer thread.
 *
 * Producers (any thread, inside hooks) append encoded records to one
 * shared ring: a compare-and-swap reserves space, the record is copied,
 * and its length word is published last. Reservation order is event order,
 * so the capture needs no merge. The writer thread drains committed
 * records into chunks, LZ4-compresses each chunk independently and writes
 * it to the capture; it also samples RSS every interval.
 *
 * mt_ring_push() is hook-safe. It never takes a lock; when the ring is full
 * it yields for a bounded time and then drops the record, counting it.
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint64_t */

struct mt_header;

/* mt_ring_push() - append one encoded record. Returns 0, or -1 if it was
 * dropped (ring full for too long, or the writer is not running). */
int mt_ring_push(const void *rec, size_t len);

/* mt_writer_start() - open state for a new capture on @fd (the header is
 * written here) and start the writer thread. Returns 0 or -errno. */
int mt_writer_start(int fd, const struct mt_header *h);

/* mt_writer_stop() - drain the ring, write the trailer (and @diag, if not
 * NULL, as a DIAG record before it), flush, join the thread and close the
 * file. Producers must already be stopped (mt_tracking == 0); a record a
 * late producer pushes after the final drain is counted as dropped.
 * Returns 0, or -errno of the first write error seen during the capture. */
int mt_writer_stop(const char *diag);

/* mt_writer_diag() - queue a DIAG record (control thread). */
void mt_writer_diag(unsigned code, const char *msg);

/* mt_writer_error() - first write error of the running capture (-errno),
 * 0 if none. Once set, tracking has turned itself off. */
int mt_writer_error(void);

#endif /* MT_PAYLOAD_WRITER_H */
