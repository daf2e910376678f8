/* SPDX-License-Identifier: MIT */
/*
 * Capture parser: the file header, then chunk by chunk verification and
 * decompression, with the records of each chunk read by reader/records.c.
 * Never trusts the file: every length is checked before it is used.
 */
#include "reader/capture.h"
#include "format/columns.h"
#include "format/error.h"
#include "format/pack.h"
#include "reader/records.h"
#include "util/clock.h"
#include "util/grow.h"
#include "util/plural.h"

#include <errno.h>    /* ENOMEM */
#include <fcntl.h>    /* open, posix_fadvise */
#include <stdarg.h>   /* va_list */
#include <stdio.h>    /* vsnprintf */
#include <stdlib.h>   /* malloc */
#include <string.h>   /* memset */
#include <sys/stat.h> /* fstat */
#include <unistd.h>   /* close, pread */

/* A capture read from its file (not mapped: a file cut short under a
 * mapping kills the reader with SIGBUS) goes through a window of at least
 * this many bytes (a writer's chunk at most), refilled with pread() as
 * the chunks move on. */
#define WINDOW (256u << 10)

/* The header is at most this long (its size is a 16-bit field). */
#define HEADER_MAX 65535u

struct mt_capture {
	const uint8_t *data; /* the whole capture in memory, or NULL: read from fd */
	size_t size;    /* bytes to read: the file's size when it was opened */
	int fd;         /* the file, read by windows; -1 with data */
	uint8_t *win;   /* the window: win_len bytes from win_off */
	size_t win_cap, win_len, win_off;
	int io_err;     /* a read of the file failed with this -errno */
	void *owned;    /* read-in file, or NULL */
	uint8_t *hdr_bytes; /* a copy of the header, which hdr points into */
	size_t hdr_size;
	struct mt_header hdr;
	struct mt_capture_status st;

	uint8_t *raw;   /* decompression buffer */
	size_t raw_cap;
	uint8_t *pack;  /* mt_chunk_unpack()'s scratch space */
	size_t pack_cap;
	struct mt_history hist; /* the columns' histories */
	struct mt_records rec;  /* the records' pass */
	int oom;

	void (*warn)(void *ctx, const char *msg);
	void *warn_ctx;
	char damage[256]; /* why reading stopped early, "" if it did not */
	void (*progress)(void *ctx, uint64_t done, uint64_t total);
	void *progress_ctx;
	int64_t progress_ms; /* when it was last told */

	/* the pass under way (mt_capture_rewind, mt_capture_step) */
	size_t off;     /* the next chunk */
	uint64_t index; /* its index */
	int ended;
	int stop;       /* what stopped it: a callback's value, or -ENOMEM */
};

/* pread() until @len bytes or the end of the file. Returns the bytes
 * read, or -errno. */
static ssize_t pread_full(int fd, uint8_t *buf, size_t len, size_t off)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = pread(fd, buf + got, len - got, (off_t)(off + got));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

/* fetch() - the @want bytes at @off (@off + @want <= c->size), valid until
 * the next fetch. NULL if the file now ends before them (it shrank since
 * it was opened), if reading it failed (c->io_err) or if memory ran out
 * (c->oom). */
static const uint8_t *fetch(struct mt_capture *c, size_t off, size_t want)
{
	if (c->data)
		return c->data + off;
	if (off >= c->win_off && off + want <= c->win_off + c->win_len)
		return c->win + (off - c->win_off);
	size_t n = want > WINDOW ? want : WINDOW, keep = 0;
	if (n > c->size - off)
		n = c->size - off;
	if (mt_grow_buf(&c->win, &c->win_cap, n) < 0) {
		c->oom = 1;
		return NULL;
	}
	/* what the window holds already from @off on is kept */
	if (off >= c->win_off && off < c->win_off + c->win_len) {
		keep = c->win_off + c->win_len - off;
		memmove(c->win, c->win + (off - c->win_off), keep);
	}
	ssize_t got = pread_full(c->fd, c->win + keep, n - keep, off + keep);
	c->win_off = off;
	c->win_len = got < 0 ? 0 : keep + (size_t)got;
	if (got < 0) {
		c->io_err = (int)got;
		return NULL;
	}
	return c->win_len >= want ? c->win : NULL;
}

/* Decode the header from the first bytes of the capture. */
static int open_common(struct mt_capture *c)
{
	const uint8_t *p;
	size_t len = c->size < HEADER_MAX ? c->size : HEADER_MAX;
	ssize_t n;

	if (c->size == 0)
		return -MT_EFORMAT;
	if (c->data) {
		p = c->data;
	} else {
		/* the file may have shrunk already: what it holds is decoded */
		if (mt_grow_buf(&c->win, &c->win_cap, len) < 0)
			return -ENOMEM;
		n = pread_full(c->fd, c->win, len, 0);
		if (n < 0)
			return (int)n;
		if (n == 0)
			return -MT_EFORMAT;
		len = (size_t)n;
		p = c->win;
	}
	n = mt_header_decode(p, len, &c->hdr);
	if (n < 0)
		return (int)n;
	c->hdr_size = (size_t)n;
	/* a copy: the window moves on, and a caller's buffer may not be ours */
	c->hdr_bytes = malloc(c->hdr_size);
	if (!c->hdr_bytes)
		return -ENOMEM;
	memcpy(c->hdr_bytes, p, c->hdr_size);
	c->hdr.cmdline.p = c->hdr_bytes + (c->hdr.cmdline.p - p);
	c->win_len = 0;
	c->st.file_size = c->size;
	return 0;
}

int mt_capture_open_mem(const void *buf, size_t len, struct mt_capture **out)
{
	struct mt_capture *c = calloc(1, sizeof(*c));
	int err;

	if (!c)
		return -ENOMEM;
	c->fd = -1;
	c->data = buf;
	c->size = len;
	err = open_common(c);
	if (err < 0) {
		mt_capture_close(c);
		return err;
	}
	*out = c;
	return 0;
}

/* MT_CAPTURE_COPY: the file into memory, as much of it as there was at
 * open (a capture still written goes on growing) and is there still. */
static int read_all(struct mt_capture *c)
{
	uint8_t *buf = malloc(c->size);
	ssize_t n;

	if (!buf)
		return -ENOMEM;
	n = pread_full(c->fd, buf, c->size, 0);
	if (n < 0) {
		free(buf);
		return (int)n;
	}
	c->owned = buf;
	c->data = buf;
	c->size = (size_t)n;
	c->st.file_size = c->size;
	return 0;
}

int mt_capture_open(const char *path, struct mt_capture **out)
{
	return mt_capture_open_flags(path, 0, out);
}

/* Anything but a regular file is refused before it is opened: opening a
 * FIFO waits for a writer, and reading a device or a pipe may never end. */
static int regular_file(const struct stat *sb)
{
	if (S_ISDIR(sb->st_mode))
		return -EISDIR;
	return S_ISREG(sb->st_mode) ? 0 : -MT_ENOTREG;
}

int mt_capture_open_flags(const char *path, int flags, struct mt_capture **out)
{
	struct mt_capture *c;
	struct stat sb;
	int err;

	if (stat(path, &sb) < 0)
		return -errno;
	if ((err = regular_file(&sb)) < 0)
		return err;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	/* O_NONBLOCK: the file may have been replaced by a FIFO since */
	c->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (c->fd < 0) {
		err = -errno;
		goto out;
	}
	if (fstat(c->fd, &sb) < 0) {
		err = -errno;
		goto out;
	}
	if ((err = regular_file(&sb)) < 0)
		goto out;
	c->size = (size_t)sb.st_size;
	/* the header first: a file that is no capture is not read further */
	err = open_common(c);
	if (err < 0)
		goto out;
	if (flags & MT_CAPTURE_COPY) {
		err = read_all(c);
		close(c->fd);
		c->fd = -1;
		free(c->win);
		c->win = NULL;
		c->win_cap = 0;
	} else {
		(void)posix_fadvise(c->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	}
out:
	if (err < 0) {
		mt_capture_close(c);
		return err;
	}
	*out = c;
	return 0;
}

void mt_capture_close(struct mt_capture *c)
{
	if (!c)
		return;
	if (c->fd >= 0)
		close(c->fd);
	free(c->win);
	free(c->owned);
	free(c->hdr_bytes);
	free(c->raw);
	free(c->pack);
	mt_records_release(&c->rec);
	free(c);
}

const struct mt_header *mt_capture_header(const struct mt_capture *c)
{
	return &c->hdr;
}

const void *mt_capture_bytes(const struct mt_capture *c, size_t *len)
{
	*len = c->data ? c->size : 0;
	return c->data;
}

const struct mt_capture_status *mt_capture_status(const struct mt_capture *c)
{
	return &c->st;
}

void mt_capture_set_warn(struct mt_capture *c, void (*fn)(void *ctx, const char *msg), void *ctx)
{
	c->warn = fn;
	c->warn_ctx = ctx;
}

__attribute__((format(printf, 2, 3))) static void warn(struct mt_capture *c, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	if (!c->warn)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	c->warn(c->warn_ctx, msg);
}

/* Corruption before the end: reading stops; the message is kept for
 * mt_capture_damage() and also goes through the warn callback, which can
 * tell it from truncation by the status's stopped flag. */
__attribute__((format(printf, 2, 3))) static void corrupt(struct mt_capture *c, const char *fmt, ...)
{
	va_list ap;

	c->st.stopped = 1;
	va_start(ap, fmt);
	vsnprintf(c->damage, sizeof(c->damage), fmt, ap);
	va_end(ap);
	if (c->warn)
		c->warn(c->warn_ctx, c->damage);
}

const char *mt_capture_damage(const struct mt_capture *c)
{
	return c->st.stopped ? c->damage : NULL;
}

const char *mt_capture_error(const struct mt_capture *c, int err)
{
	return err == -MT_ECORRUPT && c->st.stopped ? c->damage : mt_strerror(err);
}

/* Are the bytes from @off to the end zeros? 1, 0, or -1 if they could
 * not be fetched. */
static int all_zero(struct mt_capture *c, size_t off)
{
	while (off < c->size) {
		size_t n = c->size - off < WINDOW ? c->size - off : WINDOW;
		const uint8_t *p = fetch(c, off, n);
		if (!p)
			return -1;
		for (size_t i = 0; i < n; i++)
			if (p[i])
				return 0;
		off += n;
	}
	return 1;
}

void mt_capture_rewind(struct mt_capture *c)
{
	memset(&c->st, 0, sizeof(c->st));
	c->damage[0] = '\0';
	c->st.file_size = c->size;
	c->st.end_offset = c->hdr_size;
	c->oom = 0;
	c->io_err = 0;
	c->off = c->hdr_size;
	c->index = 0;
	c->ended = 0;
	c->stop = 0;
	mt_history_reset(&c->hist);
	mt_history_layout(&c->hist, mt_header_columns(&c->hdr));
	mt_records_start(&c->rec, &c->hdr);
}

void mt_capture_set_progress(struct mt_capture *c,
			     void (*fn)(void *ctx, uint64_t done, uint64_t total), void *ctx)
{
	c->progress = fn;
	c->progress_ctx = ctx;
}

/* Tell the progress callback, if there is one, after a chunk (at most
 * every MT_CAPTURE_PROGRESS_MS) or, with @last, at the end of the pass. */
static void tell_progress(struct mt_capture *c, int last)
{
	if (!c->progress)
		return;
	int64_t now = mt_now_ms();
	if (last)
		c->progress(c->progress_ctx, c->size, c->size);
	else if (c->index == 1 || now - c->progress_ms >= MT_CAPTURE_PROGRESS_MS)
		c->progress(c->progress_ctx, c->off, c->size);
	else
		return;
	c->progress_ms = now;
}

/* The pass has read all it will: say how it ended. */
static int end_pass(struct mt_capture *c, int partial)
{
	c->ended = 1;
	if (partial || !c->st.trailer_seen) {
		c->st.truncated = 1;
		if (partial)
			warn(c, "capture is truncated: read %llu %s up to byte %llu of %llu",
			     (unsigned long long)c->st.n_chunks,
			     mt_plural(c->st.n_chunks, "chunk", "chunks"),
			     (unsigned long long)c->st.end_offset,
			     (unsigned long long)c->size);
		else if (!c->st.stopped)
			warn(c, "capture is truncated: read %llu %s up to byte %llu (no "
				"end-of-capture record: tracking has not ended, or the process "
				"ended without ending it)",
			     (unsigned long long)c->st.n_chunks,
			     mt_plural(c->st.n_chunks, "chunk", "chunks"),
			     (unsigned long long)c->st.end_offset);
	}
	tell_progress(c, 1);
	return 0;
}

/* A callback stopped the pass with @rc, or memory ran out (-ENOMEM). */
static int stop_pass(struct mt_capture *c, int rc)
{
	c->ended = 1;
	c->stop = rc;
	tell_progress(c, 1);
	return 0;
}

/* A callback stopped the pass with @rc; -MT_ECORRUPT, a record that
 * does not fit the ones before it (a stack defined twice, say), is
 * damage in chunk @index at @off, and said so with the callback's why. */
static int refused(struct mt_capture *c, const struct mt_record_ops *ops, void *ctx,
		   uint64_t index, uint64_t off, int rc)
{
	if (rc == -MT_ECORRUPT) {
		const char *why = ops->why(ctx);
		c->st.n_bad_chunks = 1;
		c->st.bad_offset = off;
		corrupt(c, "capture is corrupt: chunk %llu at byte %llu: %s; read %llu %s before it",
			(unsigned long long)index, (unsigned long long)off,
			why ? why : "a record contradicts the records before it",
			(unsigned long long)c->st.n_chunks,
			mt_plural(c->st.n_chunks, "chunk", "chunks"));
	}
	return stop_pass(c, rc);
}

/* fetch() failed: out of memory, a read error, or the file is shorter
 * now than it was when it was opened: someone cut it short (a new
 * capture over it, say) while it was read. What was read of it is no
 * whole capture, and is reported as damage. */
static int lost_pass(struct mt_capture *c)
{
	struct stat sb;

	if (c->oom)
		return stop_pass(c, -ENOMEM);
	if (c->io_err)
		return stop_pass(c, c->io_err);
	c->st.shrunk = 1;
	if (fstat(c->fd, &sb) == 0)
		corrupt(c, "capture was cut short while it was read: the file shrank from %llu "
			   "to %llu bytes; read %llu %s before byte %llu",
			(unsigned long long)c->size, (unsigned long long)sb.st_size,
			(unsigned long long)c->st.n_chunks, mt_plural(c->st.n_chunks, "chunk", "chunks"),
			(unsigned long long)c->off);
	else
		corrupt(c, "capture was cut short while it was read; read %llu %s before byte %llu",
			(unsigned long long)c->st.n_chunks, mt_plural(c->st.n_chunks, "chunk", "chunks"),
			(unsigned long long)c->off);
	return end_pass(c, 0);
}

/* Is there a whole chunk (a valid header, its data inside the file, its
 * checksum right) at or after @from? A write torn by the end of the
 * process leaves none after it, so one there means that the length of the
 * chunk before it was damaged. 1 with its offset in *@at, 0, or -1 if the
 * file could not be read (lost_pass()). */
static int whole_chunk_after(struct mt_capture *c, size_t from, size_t *at)
{
	size_t pos = from;
	unsigned tried = 0; /* headers that decoded: a torn write holds none, and
			     * each costs a checksum of up to the rest of the file */

	while (pos < c->size && c->size - pos >= MT_CHUNK_HEADER) {
		size_t n = c->size - pos < WINDOW ? c->size - pos : WINDOW, cand[16];
		const uint8_t *p = fetch(c, pos, n);
		unsigned nc = 0;
		if (!p)
			return -1;
		/* the magic's places first: checking one moves the window */
		for (size_t i = 0; nc < 16 && i + 4 <= n; i++) {
			const uint8_t *q = memchr(p + i, MT_CHUNK_MAGIC[0], n - i);
			if (!q)
				break;
			i = (size_t)(q - p);
			if (i + 4 <= n && !memcmp(q, MT_CHUNK_MAGIC, 4))
				cand[nc++] = pos + i;
		}
		for (unsigned k = 0; k < nc; k++) {
			struct mt_chunk ch;
			const uint8_t *h, *d;
			if (c->size - cand[k] < MT_CHUNK_HEADER)
				continue;
			if (!(h = fetch(c, cand[k], MT_CHUNK_HEADER)))
				return -1;
			if (mt_chunk_header_decode(h, &ch) < 0 ||
			    ch.stored_len > c->size - cand[k] - MT_CHUNK_HEADER)
				continue;
			if (++tried > 8)
				return 0;
			if (!(d = fetch(c, cand[k] + MT_CHUNK_HEADER, ch.stored_len)))
				return -1;
			if (mt_checksum(d, ch.stored_len) == ch.checksum) {
				*at = cand[k];
				return 1;
			}
		}
		/* on past the last place looked at; 3 bytes kept, for a magic
		 * across the window's end */
		pos = nc == 16 ? cand[15] + 1 : pos + n - 3;
	}
	return 0;
}

/* Read the pass's next chunk: 1, or 0 once the pass has ended. */
static int step(struct mt_capture *c, const struct mt_record_ops *ops_in, void *ctx)
{
	struct mt_record_ops ops = *ops_in;
	size_t off = c->off;
	uint64_t index = c->index;

	mt_record_ops_init(&ops);
	if (off >= c->size)
		return end_pass(c, 0);
	size_t left = c->size - off;
	struct mt_chunk ch;
	const uint8_t *data;
	uint32_t raw_len;

	if (left < MT_CHUNK_HEADER)
		return end_pass(c, 1);
	if (!(data = fetch(c, off, MT_CHUNK_HEADER)))
		return lost_pass(c);
	if (mt_chunk_header_decode(data, &ch) < 0) {
		/* A file extended but never written (crash during a
		 * flush) ends in zeros: that is truncation. */
		int zeros = all_zero(c, off);
		if (zeros < 0)
			return lost_pass(c);
		if (zeros)
			return end_pass(c, 1);
		corrupt(c, "capture is corrupt: bad chunk header at byte %llu; read %llu %s "
			   "before it", (unsigned long long)off, (unsigned long long)c->st.n_chunks,
			mt_plural(c->st.n_chunks, "chunk", "chunks"));
		return end_pass(c, 0);
	}
	if (ch.stored_len > left - MT_CHUNK_HEADER) {
		size_t at;
		int later = whole_chunk_after(c, off + MT_CHUNK_HEADER, &at);
		if (later < 0)
			return lost_pass(c);
		if (!later)
			return end_pass(c, 1);
		c->st.n_bad_chunks = 1;
		c->st.bad_offset = off;
		corrupt(c, "capture is corrupt: chunk %llu at byte %llu: its length runs past the "
			   "end of the file, but a whole chunk follows at byte %llu; read %llu %s "
			   "before it", (unsigned long long)index, (unsigned long long)off,
			(unsigned long long)at, (unsigned long long)c->st.n_chunks,
			mt_plural(c->st.n_chunks, "chunk", "chunks"));
		return end_pass(c, 0);
	}
	if (!(data = fetch(c, off + MT_CHUNK_HEADER, ch.stored_len)))
		return lost_pass(c);
	int last = off + MT_CHUNK_HEADER + ch.stored_len == c->size;
	const char *why = NULL;
	int torn = 0;
	if (mt_checksum(data, ch.stored_len) != ch.checksum) {
		why = "checksum mismatch";
		torn = 1;
	} else if (ch.stored_len != ch.raw_len) {
		if (mt_grow_buf(&c->raw, &c->raw_cap, ch.raw_len) < 0 ||
		    mt_grow_buf(&c->pack, &c->pack_cap, MT_UNPACK_SCRATCH(ch.raw_len)) < 0)
			return stop_pass(c, -ENOMEM);
		if (mt_chunk_unpack(c->raw, ch.raw_len, data, ch.stored_len, &c->hist, c->pack) < 0)
			why = "its coded columns do not decode";
		data = c->raw;
	} else if (mt_history_add(&c->hist, data, ch.raw_len) < 0) {
		why = "its column directory runs past its end";
	}
	raw_len = ch.raw_len;
	/* a last chunk cut while it was written fails its checksum; one that
	 * passes it was written whole, and what does not decode is damage */
	if (torn && last)
		return end_pass(c, 1);
	if (!why) {
		int rc = ops.chunk(ctx, index, off, &ch);
		if (rc)
			return refused(c, &ops, ctx, index, off, rc);
		/* the records of the columns that fit together are read
		 * before a misfit is reported */
		int stop = 0, misfit = 0;
		int err = mt_records_read(&c->rec, data, raw_len, &ops, ctx, &stop, &misfit);
		c->st.n_records = c->rec.n_records;
		c->st.trailer_seen = c->rec.trailer_seen;
		if (!stop)
			stop = ops.chunk_end(ctx);
		if (stop)
			return refused(c, &ops, ctx, index, off, stop);
		if (err == -ENOMEM && c->rec.oom)
			return stop_pass(c, -ENOMEM);
		if (c->rec.why[0])
			why = c->rec.why;
		else if (err < 0)
			why = err == -MT_ETRUNC ? "a record runs past the chunk end"
						: "malformed record";
		else if (misfit)
			why = "its record columns do not fit together";
	}
	if (why) {
		/* Delta state runs across chunks: nothing after a lost
		 * chunk can be decoded reliably. */
		c->st.n_bad_chunks = 1;
		c->st.bad_offset = off;
		corrupt(c, "capture is corrupt: chunk %llu at byte %llu: %s; read %llu %s "
			   "before it", (unsigned long long)index, (unsigned long long)off, why,
			(unsigned long long)c->st.n_chunks,
			mt_plural(c->st.n_chunks, "chunk", "chunks"));
		return end_pass(c, 0);
	}
	c->st.n_chunks++;
	c->index = index + 1;
	c->off = off + MT_CHUNK_HEADER + ch.stored_len;
	c->st.end_offset = c->off;
	tell_progress(c, 0);
	return 1;
}

int mt_capture_step(struct mt_capture *c, const struct mt_record_ops *ops, void *ctx, int *rc)
{
	int more = !c->ended && step(c, ops, ctx);
	*rc = c->stop;
	return more;
}

int mt_capture_follow(struct mt_capture *c)
{
	struct stat sb;

	if (c->data || c->fd < 0)
		return -EINVAL;
	if (fstat(c->fd, &sb) < 0)
		return -errno;
	if ((uint64_t)sb.st_size < c->size)
		return -MT_EREPLACED;
	/* the window is read afresh anyway: bytes past the old end may have
	 * been read as a zero fill */
	c->win_len = 0;
	if (mt_grow_buf(&c->win, &c->win_cap, c->hdr_size) < 0)
		return -ENOMEM;
	ssize_t n = pread_full(c->fd, c->win, c->hdr_size, 0);
	if (n < 0)
		return (int)n;
	if ((size_t)n != c->hdr_size || memcmp(c->win, c->hdr_bytes, c->hdr_size) != 0)
		return -MT_EREPLACED;
	int grew = (uint64_t)sb.st_size > c->size;
	c->size = (size_t)sb.st_size;
	c->st.file_size = c->size;
	if (c->ended && !c->stop && !c->st.stopped) {
		c->ended = 0;
		c->st.truncated = 0;
	}
	return grew;
}

int mt_capture_read(struct mt_capture *c, const struct mt_record_ops *ops, void *ctx)
{
	int rc;

	mt_capture_rewind(c);
	while (mt_capture_step(c, ops, ctx, &rc))
		;
	return rc;
}
