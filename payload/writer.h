/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_WRITER_H
#define MT_PAYLOAD_WRITER_H
/*
 * The writer: a capture's lifecycle and its writer thread.
 *
 * mt_writer_start() writes the capture's header to its sink (sink.h) and
 * starts the writer thread, which merges the per-thread buffers (tbuf.h)
 * into coded chunks (merge.h), writes them, samples RSS (and the C
 * allocator's own count, allocstat.h) every interval and
 * writes the diagnostics queued with mt_writer_diag(). A capture ends in
 * one of four ways: mt_writer_stop() (the trailer written, the sink
 * closed), mt_writer_end_now() (a fatal signal's handler has the writer
 * thread finish it), a fault of the writer (fault.h: tracking stops, and
 * the capture says so as far as it can), or mt_writer_forget() in a
 * forked child (the capture is the parent's).
 *
 * The first write error turns tracking off (mt_tracking = 0): the program
 * goes on untracked. Nothing here prints; the writer thread takes no
 * signal but the faults of its own code.
 */
#include <stdint.h> /* uint64_t */

struct mt_header;

/* mt_writer_start() - open state for a new capture on @fd (the header is
 * written here) and start the writer thread. Returns 0, or -errno or
 * -MT_E* with nothing started; @fd is then the caller's to close. */
int mt_writer_start(int fd, const struct mt_header *h);

/* mt_writer_stop() - drain the ring, write the trailer (and @diag, if not
 * NULL, as a DIAG record before it), flush, join the thread and close the
 * file. Producers must already be stopped (mt_tracking == 0); a record a
 * late producer still in a hook makes is after the capture's end: it is
 * neither written nor counted. Returns 0, -errno of the first write error
 * seen during the capture, or -MT_ECRASH if the writer faulted. */
int mt_writer_stop(const char *diag);

/* mt_writer_end_now() - async-signal-safe, for a signal that ends the
 * process: stop recording and have the writer thread finish the capture
 * (everything buffered, @diag as a TRACKING_DISABLED DIAG record, the
 * trailer), or, if another thread is already stopping it, let it; wait
 * for that at most @timeout_ns. Returns 0 once the capture is whole, -1 if
 * it is not (no capture runs, this is the writer thread or the thread
 * stopping it, a write error, a crash, or the time ran out). */
int mt_writer_end_now(const char *diag, uint64_t timeout_ns);

/* mt_writer_diag() - queue a DIAG record (any thread, hook-safe; a few
 * wait at a time: a message that finds every slot taken is lost). */
void mt_writer_diag(unsigned code, const char *msg);

/* mt_writer_forget() - in the child of a fork made while a capture ran:
 * the capture, its files and its writer thread are the parent's. Records
 * nothing more and closes the child's copies of the files; a new
 * mt_writer_start() may follow. */
void mt_writer_forget(void);

/* mt_writer_ok() - nonzero while the capture runs and can be written:
 * no write error, no crash of the writer, not stopped. */
int mt_writer_ok(void);

/* mt_writer_dropped() - events dropped in the running or the last
 * stopped capture. */
uint64_t mt_writer_dropped(void);

/* mt_writer_sample_now() - have the writer thread take a memory sample
 * with the C allocator's count now (allocstat.h), and wait until it is in
 * the capture's order, at most @timeout_ns: records made after it come
 * after it. For the moment tracking starts. Not in a hook, nor with a
 * lock the writer thread takes. */
void mt_writer_sample_now(uint64_t timeout_ns);

/* mt_writer_no_final_count() - the capture is about to be stopped by a
 * thread that may hold the C allocator's locks (the _exit and exec
 * hooks): its last sample leaves out the allocator's count (allocstat.h),
 * which would wait for them. */
void mt_writer_no_final_count(void);

/* mt_writer_on_tick() - have the writer thread call @fn (NULL: nothing)
 * at each RSS sample, with the monotonic time. Any thread. */
void mt_writer_on_tick(void (*fn)(uint64_t now_ns));

#endif /* MT_PAYLOAD_WRITER_H */
