/* SPDX-License-Identifier: MIT */
#ifndef MT_FORMAT_PACK_H
#define MT_FORMAT_PACK_H
/*
 * The coded form of a chunk's data (docs/format.md 2.3). Each column is
 * coded on its own: an LZ4 block that may refer back into the column's
 * history (its last 64 KiB in the chunks before), split into its literals,
 * sequence bytes and offsets, each a stream of format/huff.h. Alike bytes
 * of one kind then stay together across chunks: the control bytes of an
 * import meet those of the import before.
 * The history runs across chunks as the hot records' coding state does:
 * a chunk decodes only after every chunk before it. Pure functions over
 * byte buffers, no malloc.
 */
#include <stddef.h>    /* size_t */
#include <stdint.h>    /* uint8_t */
#include <sys/types.h> /* ssize_t */

#include "format/columns.h" /* MT_COLUMNS, mt_columns() */

#define MT_HISTORY (64u << 10) /* LZ4's window */

struct mt_history {
	uint32_t opts; /* the chunks' layout: MT_NODES_COLUMNS or 0 (format/nodes.h) */
	uint32_t len[MT_COLUMNS];
	uint8_t buf[MT_COLUMNS][MT_HISTORY];
};

/* mt_history_reset() - empty histories, as at the start of a file, of
 * chunks of six columns (versions 5 and 6), as zeroed ones are. */
void mt_history_reset(struct mt_history *h);

/* mt_history_layout() - the chunks coded against @h have mt_columns(@opts)
 * columns (format/columns.h): eight with MT_NODES_COLUMNS (version 7).
 * Set before the first chunk. */
void mt_history_layout(struct mt_history *h, unsigned opts);

/* The coded form of @len bytes of chunk data never takes more than this. */
#define MT_PACK_MAX(len) ((size_t)(len) + MT_COLUMNS)
/* The scratch space mt_chunk_pack() needs: an LZ4 block and its four
 * streams; and mt_chunk_unpack(): the streams and the block they make. */
#define MT_PACK_SCRATCH(len) (5 * ((size_t)(len) + (size_t)(len) / 255 + 16))
#define MT_UNPACK_SCRATCH(len) (2 * ((size_t)(len) + (size_t)(len) / 255 + 16))

/* mt_chunk_pack() - the coded form of the chunk data [@src, @src+@len)
 * into @dst (>= MT_PACK_MAX(@len) bytes), and the chunk's columns into the
 * history @h. @level: above 0, LZ4HC's level, with the history as its
 * dictionary; MT_PACK_FAST_HISTORY, LZ4's fast compressor with the history
 * as its dictionary; 0, LZ4's fast compressor alone (the quickest). @state
 * is LZ4_sizeofStateHC() bytes, 8-aligned, unless @level is 0. Returns the
 * coded length (a caller stores the chunk data as they are when that is
 * not shorter: @h is right either way), or -MT_ECORRUPT for a bad
 * directory. */
#define MT_PACK_FAST_HISTORY (-1)
ssize_t mt_chunk_pack(uint8_t *dst, const uint8_t *src, size_t len, struct mt_history *h,
		      int level, void *state, uint8_t *scratch);

/* mt_chunk_unpack() - the chunk data, exactly @len bytes, of the coded
 * form [@src, @src+@n) into @dst, and its columns into @h; @scratch is
 * MT_UNPACK_SCRATCH(@len) bytes. Returns 0, or
 * -MT_ECORRUPT if the coded form is malformed or does not decode to @len
 * bytes (@h is then undefined). */
int mt_chunk_unpack(uint8_t *dst, size_t len, const uint8_t *src, size_t n,
		    struct mt_history *h, uint8_t *scratch);

/* mt_history_add() - the columns of chunk data stored as they are into
 * @h. Returns 0, or -MT_ECORRUPT for a bad directory. */
int mt_history_add(struct mt_history *h, const uint8_t *data, size_t len);

#endif /* MT_FORMAT_PACK_H */
