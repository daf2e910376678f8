/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_WRITER_H
#define MT_PAYLOAD_WRITER_H
/*
 * Event buffers and the writer thread.
 *
 * Every thread that records has its own single-producer buffer (struct
 * mt_tbuf). Its records belong to epochs: a thread takes a new epoch from
 * one global counter when another thread recorded since its last event.
 * The writer thread merges the buffers in epoch order, so the capture is
 * in event order across threads with no lock and, while one thread
 * records, no shared cache line written on the producer's path. It packs
 * records into chunks, LZ4-compresses each and writes it to the capture;
 * it also samples RSS every interval.
 *
 * mt_tbuf_push() is hook-safe: no lock, no allocation; when its buffer is
 * full it waits a bounded time for the writer, then drops the record and
 * counts it.
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint64_t */

struct mt_header;
struct mt_tbuf;

/* mt_tbuf_new() - a new buffer, registered with the writer for good (it
 * is reused by later threads, never freed). NULL if out of memory. */
struct mt_tbuf *mt_tbuf_new(void);

/* mt_tbuf_reserve() / mt_tbuf_commit() - the hot path: reserve room for
 * one record of at most MT_REC_HOT_MAX bytes in @b and get where to encode
 * it (NULL: dropped, counted), then commit its length. The reservation is
 * the event's place in the order (take it at the event). Hook-safe; errno
 * is kept. */
uint8_t *mt_tbuf_reserve(struct mt_tbuf *b);
void mt_tbuf_commit(struct mt_tbuf *b, size_t len);

/* mt_tbuf_push() - append one encoded record to @b, which only the
 * calling thread writes. Returns 0, or -1 if the record was dropped. */
int mt_tbuf_push(struct mt_tbuf *b, const void *rec, size_t len);

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
