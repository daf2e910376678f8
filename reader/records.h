/* SPDX-License-Identifier: MIT */
#ifndef MT_READER_RECORDS_H
#define MT_READER_RECORDS_H
/*
 * The record pass of reader/capture.c: the records of each chunk's data,
 * read from its columns in file order and handed to a struct
 * mt_record_ops. It keeps what runs from the first chunk to the last: the
 * hot records' coding state (per thread index and shared,
 * format/hotdec.h) and the count of ALLOC and FREE records that a
 * non-aggregated capture's TRAILER is checked against
 * (docs/format.md section 5). Never trusts the data: every length is
 * checked before it is used.
 *
 * Zero it, mt_records_start() at the start of each pass over a capture,
 * mt_records_read() each chunk's data, mt_records_release() at the end.
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint64_t */

#include "format/hotdec.h"
#include "reader/capture.h"

/* Thread indexes a capture may have: a snapshot's site key holds one
 * beside an allocator. */
#define MT_THREADS_MAX (1u << 27)

struct mt_records {
	struct mt_delta **deltas; /* by thread index, each made on first use and
				   * freed when a THREAD record says it ended */
	uint32_t n_deltas;
	struct mt_reuse reuse;    /* the coding state the threads share */
	uint8_t *row;             /* a record other than the usual hot one, as a row */
	size_t row_cap;
	unsigned opts;            /* the capture's columns (mt_header_columns()) */
	int aggregated;           /* MT_HDR_AGGREGATED: the TRAILER is not checked */
	int oom;                  /* memory ran out */
	int ended_used;           /* a hot record named a thread index that had ended */
	uint32_t far_thread;      /* ... or one far beyond those announced, or 0 */
	uint64_t thread_records;  /* THREAD records read */
	uint32_t announced;       /* 1 + the highest thread index they announced */
	/* the pass so far */
	uint64_t n_records;       /* records read */
	uint64_t events;          /* ALLOC and FREE records read */
	int trailer_seen;
	char why[160];            /* "" or why records that decode are corrupt (the
				   * TRAILER's count, a record of the other mode) */
};

/* mt_records_start() - a new pass over the capture of header @h: the
 * coding state and the counts start from zero. */
void mt_records_start(struct mt_records *p, const struct mt_header *h);

/* mt_records_read() - the records of chunk data [@data, @data+@len) to
 * @ops (a hot record of the chunk's current thread from its fields, any
 * other as a row). Returns 0, a callback's value (> 0 or < 0 as it
 * chose) via *@stop, or a negative error: -ENOMEM (p->oom set), a decode
 * error, or -MT_ECORRUPT with p->why saying why: the TRAILER's count
 * differs from the events read, or a record belongs to the other mode
 * (ALLOC or FREE in an aggregated capture, SITE or TOTALS in one of
 * events), or an ALLOC or FREE names a thread index that a THREAD record
 * said had ended (its coding state is freed then). *@misfit is set when the columns do not
 * fit together (the records before the misfit are read first, as
 * mt_chunk_join() would have joined them). */
int mt_records_read(struct mt_records *p, const uint8_t *data, size_t len,
		    const struct mt_record_ops *ops, void *ctx, int *stop, int *misfit);

void mt_records_release(struct mt_records *p);

#endif
