/* SPDX-License-Identifier: MIT */
#ifndef MT_READER_CAPTURE_H
#define MT_READER_CAPTURE_H
/*
 * The one capture parser. mt_capture_open() checks the file header;
 * mt_capture_read() walks the chunks, verifies and decompresses each one
 * and hands every record, in file order, to a callback of a struct
 * mt_record_ops. Consumers (snapshot, parse) never decode bytes.
 *
 * Damage policy (docs/format.md section 5): a capture without a TRAILER
 * record was cut short (the process was killed); every complete chunk is
 * read and the status says truncated. A damaged last chunk (partial,
 * failed checksum or LZ4 data, zero fill) is truncation too. Damage with
 * more data after it is corruption: reading stops there, because the
 * delta state of the hot records runs across chunks and nothing after a
 * lost chunk decodes reliably; the status says stopped and
 * mt_capture_damage() says why. The records before it have been
 * delivered; the memtrace commands nonetheless treat corruption as an
 * error. Problems are reported through the status and the optional warn
 * callback; nothing here prints or exits.
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint64_t */

#include "format/record.h"

struct mt_capture;

/* Per-record callbacks. @r and every byte string in it are borrowed and
 * valid only during the call. A callback returning non-zero stops
 * mt_capture_read(), which then returns that value. NULL members are
 * filled with no-op stubs by mt_record_ops_init(). */
struct mt_record_ops {
	int (*alloc)(void *ctx, const struct mt_record *r);
	int (*free)(void *ctx, const struct mt_record *r);
	int (*thread)(void *ctx, const struct mt_record *r);
	int (*code)(void *ctx, const struct mt_record *r);
	int (*stack)(void *ctx, const struct mt_record *r);
	int (*sample)(void *ctx, const struct mt_record *r);
	int (*diag)(void *ctx, const struct mt_record *r);
	int (*trailer)(void *ctx, const struct mt_record *r);
	int (*native)(void *ctx, const struct mt_record *r);
	int (*module)(void *ctx, const struct mt_record *r);
	int (*hybrid)(void *ctx, const struct mt_record *r);
	/* aggregated captures (MT_HDR_AGGREGATED) */
	int (*site)(void *ctx, const struct mt_record *r);
	int (*totals)(void *ctx, const struct mt_record *r);
	int (*name)(void *ctx, const struct mt_record *r);
	/* a record type this version does not know (r->type only) */
	int (*unknown)(void *ctx, const struct mt_record *r);
	/* start of each chunk: @index counts from 0, @offset in the file */
	int (*chunk)(void *ctx, uint64_t index, uint64_t offset, const struct mt_chunk *c);
	/* after the last record of each chunk that was read: a callback that
	 * holds records back (a queue) is done with them here, and what it
	 * refuses is the chunk's damage */
	int (*chunk_end)(void *ctx);
	/* after a callback returned -MT_ECORRUPT: why the record does not
	 * fit the capture (a phrase, no prefix), or NULL; the pass then
	 * reports the damage with its chunk (mt_capture_damage()) */
	const char *(*why)(void *ctx);
};

/* mt_record_ops_init() - fill the NULL members of @ops with stubs. */
void mt_record_ops_init(struct mt_record_ops *ops);

/* What mt_capture_read() found. */
struct mt_capture_status {
	uint64_t file_size;
	uint64_t n_chunks;      /* chunks read */
	uint64_t n_records;
	uint64_t end_offset;    /* end of the last chunk read */
	uint64_t n_bad_chunks;  /* 0 or 1: the damaged chunk reading stopped at */
	uint64_t bad_offset;    /* its file offset */
	int trailer_seen;       /* clean end of capture */
	int truncated;          /* no trailer, or a damaged chunk at the end */
	int stopped;            /* damage before the end stopped reading */
	int shrunk;             /* with stopped: the file was cut short while it was read */
};

/* mt_capture_open() - open @path and decode its header, before anything
 * else is read. Only a regular file is opened (a FIFO, a device or a
 * socket is -MT_ENOTREG, a directory -EISDIR), and only the bytes it held
 * then are read: a capture still written is read up to that size. The
 * chunks are read from the file as mt_capture_read() goes (not mapped: a
 * file cut short while it is read is reported as damage, with the
 * status's shrunk flag, rather than raising SIGBUS).
 * Returns 0 and sets *@out (free with mt_capture_close()), or -errno,
 * -MT_ENOTREG, -MT_EFORMAT (not a capture, including an empty file),
 * -MT_EVERSION, -MT_ETRUNC (file ends inside the header) or
 * -MT_ECORRUPT. */
int mt_capture_open(const char *path, struct mt_capture **out);

/* mt_capture_open_flags() - mt_capture_open() with MT_CAPTURE_COPY: read
 * the whole file into memory at open (after its header), for a reader
 * that lives long or makes many passes while the file may be rewritten;
 * then mt_capture_bytes() has the bytes. */
#define MT_CAPTURE_COPY 1
int mt_capture_open_flags(const char *path, int flags, struct mt_capture **out);

/* mt_capture_open_mem() - the same over a buffer that the caller keeps
 * alive until mt_capture_close(). */
int mt_capture_open_mem(const void *buf, size_t len, struct mt_capture **out);

/* mt_capture_close() - release everything; NULL is a no-op. */
void mt_capture_close(struct mt_capture *c);

/* mt_capture_header() - borrowed, valid until mt_capture_close(). */
const struct mt_header *mt_capture_header(const struct mt_capture *c);

/* mt_capture_set_warn() - have mt_capture_read() describe damage (one
 * line each, no prefix, no newline) through @fn. */
void mt_capture_set_warn(struct mt_capture *c, void (*fn)(void *ctx, const char *msg),
			 void *ctx);

/* mt_capture_set_progress() - have every pass (mt_capture_read(),
 * mt_capture_step()) tell @fn how far it has read: @done bytes of the
 * @total the file held when it was opened. After its first chunk, then
 * after a chunk at most every MT_CAPTURE_PROGRESS_MS milliseconds, and once
 * more when the pass ends, however it ends, with @done == @total. @fn
 * gets @ctx, not the pass's; NULL @fn for none (the default). */
#define MT_CAPTURE_PROGRESS_MS 100
void mt_capture_set_progress(struct mt_capture *c,
			     void (*fn)(void *ctx, uint64_t done, uint64_t total), void *ctx);

/* mt_capture_read() - parse every chunk from the start, calling @ops.
 * May be called again to make another pass. Returns 0 (also for a
 * truncated or partly damaged capture: see mt_capture_status()), the
 * first non-zero callback value, -ENOMEM, or the -errno of a failed
 * read of the file. */
int mt_capture_read(struct mt_capture *c, const struct mt_record_ops *ops, void *ctx);

/* mt_capture_rewind() / mt_capture_step() - mt_capture_read() a chunk at
 * a time: rewind starts a pass, and each step reads the pass's next chunk.
 * A step returns 1 while the pass goes on, and 0 once it has ended (every
 * step after too), with *@rc then what mt_capture_read() returns: 0 at the
 * end of the capture (the status is final), or the value a callback
 * stopped the pass with, -ENOMEM, or the -errno of a failed read. */
void mt_capture_rewind(struct mt_capture *c);
int mt_capture_step(struct mt_capture *c, const struct mt_record_ops *ops, void *ctx, int *rc);

/* mt_capture_follow() - a capture read from its file (mt_capture_open(),
 * not a copy) that is still written: take in what was appended since it
 * was opened or last followed. Its size becomes the file's size now, and
 * a pass that ended at the end of what it had, cleanly or at a last chunk
 * not yet whole (truncation), goes on from its last whole chunk at the
 * next mt_capture_step(), with the delta state and the status's counts
 * of the chunks read so far; a pass stopped by corruption or by a
 * callback stays ended. Returns 1 if the file grew, 0 if not, or
 * -MT_EREPLACED when the file is no longer the capture read so far (it
 * is shorter, or its header changed: another capture was written over
 * it), -EINVAL for a capture in memory, or the -errno of fstat() or
 * pread(). */
int mt_capture_follow(struct mt_capture *c);

/* mt_capture_bytes() - the whole capture file of a capture in memory
 * (mt_capture_open_mem(), MT_CAPTURE_COPY), borrowed, valid until
 * mt_capture_close(): another struct mt_capture can read it on its own
 * with mt_capture_open_mem(). NULL and *@len 0 for one read from its file. */
const void *mt_capture_bytes(const struct mt_capture *c, size_t *len);

/* mt_capture_status() - borrowed; describes the last mt_capture_read(). */
const struct mt_capture_status *mt_capture_status(const struct mt_capture *c);

/* mt_capture_damage() - after a mt_capture_read() that stopped at
 * corruption, one line (no prefix, no newline) saying where and why;
 * NULL otherwise. Borrowed, valid until the next read or close. */
const char *mt_capture_damage(const struct mt_capture *c);

/* mt_capture_error() - what to say of a pass that returned @err: the
 * damage it found if @err is -MT_ECORRUPT and it found some, else
 * mt_strerror(@err). Borrowed, as mt_capture_damage(). */
const char *mt_capture_error(const struct mt_capture *c, int err);

#endif /* MT_READER_CAPTURE_H */
