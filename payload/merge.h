/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_MERGE_H
#define MT_PAYLOAD_MERGE_H
/*
 * Merging and coding: the writer thread's work between the buffers
 * (tbuf.h) and the sink (sink.h).
 *
 * mt_merge_drain() takes the buffers' records in epoch order, coding raw
 * events into ALLOC and FREE records straight in the chunk's columns
 * (mt_cols_alloc(), with each buffer's coding state) and copying coded
 * records; a chunk that fills up is LZ4-compressed (at the best level the
 * writer has time for, format/pack.h) and written to the sink. Records
 * the writer makes itself go in with mt_merge_append().
 *
 * One thread at a time: the writer thread, or the thread that finishes
 * the capture once the writer thread is gone. No lock; the buffers are
 * mapped once (mt_merge_init()) and reused by every capture. The first
 * error (a write's, or -EINVAL for a record memtrace itself could not
 * code, a bug) is kept (mt_merge_err()), reported once through the
 * on_error callback, and every chunk after it is dropped, not written.
 */
#include <stdint.h> /* uint64_t */

struct mt_record;
struct mt_sink;

/* mt_merge_init() - map the buffers, once (a later call is a no-op once
 * one succeeded). Returns 0 or -ENOMEM, with nothing left mapped. */
int mt_merge_init(void);

/* mt_merge_begin() - a new capture, written to @sink (the caller's; it
 * must stay open until the capture is finished), started at @now
 * (mt_mono_ns()): empty chunk, no error, fresh coding state and
 * histories. @on_error(err) is called at the first error, on the thread
 * that met it. @test_crash (MEMTRACE_TEST_WRITER_CRASH): 0, or fault at
 * the first chunk before (1) or after (2) coding it. @aggregate: raw
 * events are counted (aggregate.h), not coded; the writer writes the
 * figures. @node_opts: the options of the chunks' node column
 * (format/nodes.h), as the capture's header says. */
void mt_merge_begin(struct mt_sink *sink, void (*on_error)(int err), int test_crash,
		    uint64_t now, int aggregate, unsigned node_opts);

/* mt_merge_drain() - take what the buffers hold into the chunk, in epoch
 * order: a few passes, or (@final) until they are empty. */
void mt_merge_drain(int final);

/* mt_merge_append() - add a record the writer makes itself (samples,
 * diagnostics, the trailer), flushing the chunk first if it is full. */
void mt_merge_append(const struct mt_record *r);

/* mt_merge_flush() - write the chunk, if it holds records; the next one
 * starts empty. mt_merge_flush_older(): only if the last flush was @ns
 * or more before @now. */
void mt_merge_flush(void);
void mt_merge_flush_older(uint64_t now, uint64_t ns);

/* mt_merge_idle() - the writer waited @ns for records: time it may spend
 * coding (the level chosen depends on it). */
void mt_merge_idle(uint64_t ns);

/* mt_merge_crashed() - the writer faulted: the chunk it built is void,
 * and the histories may hold columns the file lacks, so later chunks are
 * coded without them. No test crash again. */
void mt_merge_crashed(void);

/* mt_merge_events() - ALLOC and FREE records in the chunks so far. */
uint64_t mt_merge_events(void);

/* mt_merge_err() - the first error of the capture, or 0. */
int mt_merge_err(void);

#endif /* MT_PAYLOAD_MERGE_H */
