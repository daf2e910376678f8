/* SPDX-License-Identifier: MIT */
#ifndef MT_FORMAT_RECORD_H
#define MT_FORMAT_RECORD_H
/*
 * The capture format: file header, chunk framing and the record codec.
 * Pure functions over byte buffers: no I/O, no malloc, async-signal-safe,
 * so the payload calls them inside malloc hooks. docs/format.md is the
 * normative description; change it and MT_FORMAT_VERSION together.
 */
#include <stddef.h>    /* size_t */
#include <stdint.h>    /* uint64_t */
#include <string.h>    /* memcpy */
#include <sys/types.h> /* ssize_t */

#include "format/varint.h"

#define MT_MAGIC "MEMTRACE"
#define MT_MAGIC_LEN 8
#define MT_FORMAT_VERSION 8
#define MT_FORMAT_VERSION_MIN 5 /* the oldest version read: 5 has no raw kinds */
#define MT_FORMAT_VERSION_COLUMNS 7 /* the first with eight columns (MT_NODES_COLUMNS) */
#define MT_FORMAT_VERSION_LINES 8 /* the first with MT_HDR_LINES */

/* ------------------------------------------------------------------------
 * Allocators. Numbering follows memray's AllocatorType so that scripts
 * written against it keep their meaning; memray has no kinds for the
 * PyMem RAW domain, which come after its own (16 ..= 19). A hot record's
 * km has four bits for the kind: the raw kinds are coded as the pymalloc
 * kind of the same call with address mode MT_ADDR_EXT (docs/format.md
 * section 3.1).
 * X(NAME, value, "name", is_free)
 * ---------------------------------------------------------------------- */
#define MT_ALLOCATORS(X)                                  \
	X(MALLOC, 1, "malloc", 0)                         \
	X(FREE, 2, "free", 1)                             \
	X(CALLOC, 3, "calloc", 0)                         \
	X(REALLOC, 4, "realloc", 0)                       \
	X(POSIX_MEMALIGN, 5, "posix_memalign", 0)         \
	X(ALIGNED_ALLOC, 6, "aligned_alloc", 0)           \
	X(MEMALIGN, 7, "memalign", 0)                     \
	X(VALLOC, 8, "valloc", 0)                         \
	X(PVALLOC, 9, "pvalloc", 0)                       \
	X(MMAP, 10, "mmap", 0)                            \
	X(MUNMAP, 11, "munmap", 1)                        \
	X(PYMALLOC_MALLOC, 12, "pymalloc_malloc", 0)      \
	X(PYMALLOC_CALLOC, 13, "pymalloc_calloc", 0)      \
	X(PYMALLOC_REALLOC, 14, "pymalloc_realloc", 0)    \
	X(PYMALLOC_FREE, 15, "pymalloc_free", 1)          \
	X(PYMALLOC_RAW_MALLOC, 16, "pymalloc_raw_malloc", 0) \
	X(PYMALLOC_RAW_CALLOC, 17, "pymalloc_raw_calloc", 0) \
	X(PYMALLOC_RAW_REALLOC, 18, "pymalloc_raw_realloc", 0) \
	X(PYMALLOC_RAW_FREE, 19, "pymalloc_raw_free", 1)

enum mt_allocator {
#define MT_X(name, val, str, isfree) MT_ALLOC_##name = val,
	MT_ALLOCATORS(MT_X)
#undef MT_X
	MT_ALLOC__COUNT
};

/* mt_allocator_name() - "malloc", ... or NULL for an unknown value. */
const char *mt_allocator_name(unsigned kind);
/* mt_allocator_is_free() - 1 for FREE, MUNMAP, PYMALLOC_FREE and
 * PYMALLOC_RAW_FREE. */
int mt_allocator_is_free(unsigned kind);
/* The same as a mask of bits by kind, for the hot paths. */
#define MT_FREE_KINDS                                                                   \
	(1u << MT_ALLOC_FREE | 1u << MT_ALLOC_MUNMAP | 1u << MT_ALLOC_PYMALLOC_FREE |   \
	 1u << MT_ALLOC_PYMALLOC_RAW_FREE)
/* The raw kinds: PyMem_RawMalloc & co, the pymalloc kind's value + 4. */
#define MT_ALLOC_RAW_SHIFT 4
static inline int mt_allocator_is_raw(unsigned kind)
{
	return kind >= MT_ALLOC_PYMALLOC_RAW_MALLOC && kind <= MT_ALLOC_PYMALLOC_RAW_FREE;
}
/* mt_allocator_pymalloc() - the pymalloc kind of the same call for a raw
 * kind (memray's name for it), else @kind itself. */
static inline unsigned mt_allocator_pymalloc(unsigned kind)
{
	return mt_allocator_is_raw(kind) ? kind - MT_ALLOC_RAW_SHIFT : kind;
}

/* ------------------------------------------------------------------------
 * Record types. X(NAME, value, member)
 * ALLOC and FREE are the hot records: no length prefix, fields delta coded
 * against the writing thread's previous event. Every other type carries a
 * varint body length so that readers can skip types they do not know.
 * ---------------------------------------------------------------------- */
#define MT_RECORDS(X)            \
	X(ALLOC, 1, alloc)       \
	X(FREE, 2, free)         \
	X(THREAD, 3, thread)     \
	X(CODE, 4, code)         \
	X(STACK, 5, stack)       \
	X(SAMPLE, 6, sample)     \
	X(DIAG, 7, diag)         \
	X(TRAILER, 8, trailer)   \
	X(NATIVE, 9, native)     \
	X(MODULE, 10, module)    \
	X(HYBRID, 11, hybrid)    \
	X(SITE, 12, site)        \
	X(TOTALS, 13, totals)    \
	X(NAME, 14, name)

enum mt_rec_type {
#define MT_X(name, val, member) MT_REC_##name = val,
	MT_RECORDS(MT_X)
#undef MT_X
	MT_REC__END
};

/* mt_rec_name() - "alloc", "free", ... or NULL. */
const char *mt_rec_name(unsigned type);

struct mt_bytes {
	const uint8_t *p; /* borrowed: points into the buffer decoded from */
	uint32_t len;
};

struct mt_rec_alloc {
	uint8_t kind;   /* enum mt_allocator, not a free kind */
	uint64_t addr;
	uint64_t size;
	uint32_t stack; /* STACK record id; 0 = no Python frames */
};

struct mt_rec_free {
	uint8_t kind;   /* FREE, MUNMAP, PYMALLOC_FREE or PYMALLOC_RAW_FREE */
	uint64_t addr;
	uint64_t size;  /* MUNMAP only (length unmapped); 0 otherwise */
};

struct mt_rec_thread {
	uint64_t tid;   /* kernel thread id; record's thread index names it */
	struct mt_bytes name;
	uint64_t ended; /* 0, or the thread index `tidx - ended` has ended: no
			 * later record names it */
};

/* Code object metadata, sent once per code object. Without MT_HDR_LINES,
 * line numbers are computed by the reader from linetable (format given by
 * python_hex in the header: co_lnotab for 3.8/3.9, co_linetable from
 * 3.10); with it, linetable is empty and STACK records carry the line. */
struct mt_rec_code {
	uint32_t id;
	uint32_t firstlineno;
	struct mt_bytes filename, name, qualname, linetable;
};

/* A node of the stack trie: frame (code, offset) called from parent.
 * With MT_HDR_LINES, offset is the frame's source line (0 if it has none)
 * shifted left by one, the low bit telling an entry frame (always 1
 * before 3.11), in place of the bytecode offset (whose low bit tells the
 * same from 3.11 on). */
struct mt_rec_stack {
	uint32_t id;     /* >= 1 */
	uint32_t parent; /* 0 = outermost frame */
	uint32_t code;   /* CODE record id */
	uint32_t offset; /* bytes into the code object's bytecode, or the line */
};

/* A node of the native trie: return address @ip called from @parent (a
 * NATIVE id, 0 for the outermost frame). Ids are shared with STACK and
 * HYBRID records. */
struct mt_rec_native {
	uint32_t id;     /* >= 1 */
	uint32_t parent; /* < id */
	uint64_t ip;     /* a return address (the innermost frame's too) */
};

/* The stack of an allocation with native stacks on: the native chain
 * @native (a NATIVE id, 0 for none) running under the Python stack
 * @python (a STACK id, 0 for none). */
struct mt_rec_hybrid {
	uint32_t id;             /* >= 1 */
	uint32_t python, native; /* both < id */
};

/* A module loaded in the process, one record per module of a module map:
 * the records of one generation together are the map in force from the
 * first of them until a later generation starts. NATIVE records are
 * resolved against the map in force where they are read. */
#define MT_MODULE_SEGS_MAX 16
struct mt_rec_module {
	uint32_t gen;      /* >= 1, grows */
	uint64_t bias;     /* load bias: address = bias + ELF virtual address */
	struct mt_bytes path, build_id;
	uint32_t nsegs;    /* PT_LOAD segments, at most MT_MODULE_SEGS_MAX */
	uint64_t seg_vaddr[MT_MODULE_SEGS_MAX], seg_memsz[MT_MODULE_SEGS_MAX];
};

struct mt_rec_sample {
	uint64_t time_us; /* since header start time */
	uint64_t rss;     /* bytes */
	uint64_t heap;    /* tracked heap + 1 at that time, 0 = not given (only
			   * aggregated captures give it: a trailing field) */
	uint64_t in_use;  /* the C allocator's own count of the bytes it holds
			   * in use + 1 (glibc's mallinfo2(): uordblks + hblkhd),
			   * 0 = not taken; a trailing field after heap, which
			   * is then written as 0 if not given */
};

/* A thread's name in the program (Python's threading.Thread.name), given
 * when it is set: it names the thread of kernel id @tid registered last
 * (or registered next), in place of its THREAD record's OS name. */
#define MT_NAME_MAX 256
struct mt_rec_name {
	uint64_t tid;
	struct mt_bytes name;
};

/* Aggregated captures (MT_HDR_AGGREGATED) carry no ALLOC or FREE records:
 * the payload keeps the figures and writes them at every flush. A SITE
 * record gives one site's figures so far (a later one for the same
 * stack, thread and allocator replaces it); TOTALS the capture's. */
struct mt_rec_site {
	uint32_t stack;     /* STACK or HYBRID id, 0 = none */
	uint32_t thread;    /* thread index */
	uint32_t allocator; /* enum mt_allocator, not a free kind */
	uint64_t peak_bytes, peak_count;   /* live at the heap's peak */
	uint64_t leak_bytes, leak_count;   /* live now */
	uint64_t alloc_bytes, alloc_count; /* allocated so far */
	uint64_t first_addr;               /* its first allocation's address */
};

#define MT_TOTALS_KINDS 20 /* allocator kinds counted, by value (16 before version 6) */
#define MT_TOTALS_BUCKETS 65 /* size histogram: [0] size 0, [k] 2^(k-1) <= size < 2^k */
struct mt_rec_totals {
	uint64_t n_allocs, n_frees, n_unmatched_frees;
	uint64_t bytes_allocated, bytes_freed;
	uint64_t heap, peak_heap, peak_time_us, live_count;
	uint64_t kind_count[MT_TOTALS_KINDS], kind_bytes[MT_TOTALS_KINDS];
	uint64_t size_hist[MT_TOTALS_BUCKETS];
};

/* Diagnostics from the payload: why tracking stopped, what it skipped. */
#define MT_DIAGS(X)                         \
	X(INFO, 0)                          \
	X(TRACKING_DISABLED, 1)             \
	X(PYTHON_UNAVAILABLE, 2)            \
	X(WRITE_FAILED, 3)                  \
	X(PYTHON_ALLOCATOR, 4)              \
	X(TRACKER_ROOT, 5)
enum mt_diag_code {
#define MT_X(name, val) MT_DIAG_##name = val,
	MT_DIAGS(MT_X)
#undef MT_X
};

struct mt_rec_diag {
	uint32_t code;
	struct mt_bytes msg;
};

struct mt_rec_trailer {
	uint64_t time_us;   /* end, since header start time */
	uint64_t n_events;  /* alloc + free records written */
	uint64_t n_dropped; /* events lost (buffer full, write error) */
};

struct mt_record {
	uint8_t type;    /* enum mt_rec_type */
	uint32_t tidx;   /* thread index, ALLOC/FREE/THREAD only */
	union {
#define MT_X(name, val, member) struct mt_rec_##member member;
		MT_RECORDS(MT_X)
#undef MT_X
	};
};

/* Per-thread state of the hot records' coding. The decoder keeps one per
 * thread index, zero-initialised; the encoder one per run of a thread
 * index's records (the payload's writer: per buffer, from its THREAD
 * record on). Both update it identically (docs/format.md section 3.1).
 *
 * Allocators hand a just-freed block out again, and programs free what
 * they allocated last, so most addresses are coded as the age of an entry
 * in one of two rings: the last few addresses freed (for ALLOC) and
 * allocated (for FREE). pymalloc takes a small block from the pool it
 * used last: the block freed last there, or else the next one it has not
 * handed out yet, one block past the last; so an ALLOC of a small size
 * class is first tried against the block of that class freed last (a
 * state the threads of a capture share, struct mt_reuse) and against the
 * block after the class's last ALLOC. Any other ALLOC address is coded as
 * a delta from the last ALLOC of its size class; a FREE address that is
 * not in the ring as a delta from the last such FREE of its kind:
 * containers free their items in (reverse) order of allocation. */
#define MT_FREED_RING 8 /* ALLOC address modes 0 ..= 7: the age in it */
#define MT_LIVE_RING 12 /* FREE address modes 0 ..= 11 */
#define MT_ADDR_REUSED 8  /* ALLOC address mode: the block of its class freed last */
#define MT_ADDR_NEXT 9    /* ALLOC address mode: one block past its class's last */
#define MT_ADDR_SLOT 12   /* FREE address mode: a block in struct mt_reuse's table */
/* Not an address mode: the byte xm follows km, the kind's extension in
 * its high four bits (1: the raw kind of km's pymalloc kind) and the
 * address mode in its low four. */
#define MT_ADDR_EXT 13
#define MT_XM_RAW 1
/* Modes from MT_ADDR_SLOT up have a varint after them: the address column. */
#define MT_ADDR_ALIGNED 14  /* address mode: a zigzag delta / 16 follows */
#define MT_ADDR_EXPLICIT 15 /* address mode: a zigzag delta follows */
#define MT_SIZE_CLASSES 64
#define MT_SMALL_CLASSES 33 /* size classes 0 ..= 32: sizes up to 512 bytes */
#define MT_REUSE_DEPTH 8    /* freed blocks remembered per small size class */
#define MT_BLOCK_SLOTS 4096 /* allocated blocks whose size class is remembered */

/* The state the threads of a capture share: the small blocks freed last,
 * by size class, and the size class of recently allocated blocks (a FREE
 * carries no size), in a table with one slot per value of bits 4..15 of
 * the address. Zero-initialised. */
struct mt_reuse {
	uint64_t freed[MT_SMALL_CLASSES][MT_REUSE_DEPTH];
	uint8_t top[MT_SMALL_CLASSES], n[MT_SMALL_CLASSES];
	uint8_t block_class[MT_BLOCK_SLOTS];
	uint64_t block[MT_BLOCK_SLOTS];
};

struct mt_delta {
	/* The capture's shared state. A decoder without one reads mode
	 * MT_ADDR_REUSED as corrupt; an encoder without one does not use it. */
	struct mt_reuse *reuse;
	uint64_t free_addr[3]; /* the last FREE address coded as a delta, by kind */
	uint32_t stack;        /* the stack of the last ALLOC */
	uint8_t freed_pos, live_pos; /* the slots written next */
	uint16_t free_slot;          /* the table slot of the last FREE of mode 12 */
	uint64_t freed[MT_FREED_RING]; /* recently freed, to match allocations */
	uint64_t live[MT_LIVE_RING];   /* recently allocated, to match frees */
	/* Encoder only, not part of the format: a byte hash of each ring
	 * entry, so that a search is a few word operations (the decoder is
	 * told the slot and leaves these at 0). */
	uint8_t freed_tag[8], live_tag[16];
	uint64_t last[MT_SIZE_CLASSES]; /* the last ALLOC address of each size class */
};

#define MT_REC_HOT_MAX 40 /* longest ALLOC or FREE record (34 bytes) */

/* mt_size_class() - size class of an ALLOC of @size bytes: 16-byte steps
 * up to 512 (0 ..= 32), then one class per power of two (33 ..= 63). */
static inline unsigned mt_size_class(uint64_t size)
{
	if (size <= 512)
		return (unsigned)((size + 15) >> 4);
	unsigned bits = 64 - (unsigned)__builtin_clzll(size); /* 10 ..= 64 */
	return bits < 40 ? bits + 23 : MT_SIZE_CLASSES - 1;
}

/* ------------------------------------------------------------------------
 * Hot encoders, inline for the payload's hook path. The byte after the
 * record head is kind | address mode << 4: mode 0..7 is the age of the
 * matching ring entry (0 = the newest); MT_ADDR_ALIGNED and
 * MT_ADDR_EXPLICIT mean a delta from the predicted address follows, in
 * units of 16 bytes (allocators align blocks) or 1.
 * ---------------------------------------------------------------------- */
static inline size_t mt__rec_head(uint8_t *p, unsigned type, uint64_t thread)
{
	if (thread < 15) {
		p[0] = (uint8_t)(type | (thread << 4));
		return 1;
	}
	p[0] = (uint8_t)(type | 0xf0);
	return 1 + mt_varint_put(p + 1, thread);
}

/* The byte of @addr kept as its tag: bits 4..11, as blocks are 16-byte
 * aligned. (Page-aligned mappings all share one tag; they are rare.) */
static inline uint64_t mt__tag(uint64_t addr)
{
	return (uint8_t)(addr >> 4);
}

/* Take the entry of age @age out of @ring of @n entries written next at
 * *@pos (docs/format.md section 3.1): the entries newer than it move one
 * slot along, so that every entry older than it is one age younger, and
 * the ring has an empty slot (0) as its oldest. @tag8, if not NULL, moves
 * along. Taking the newest entry, the usual case, moves nothing. */
static inline void mt__ring_close(uint64_t *ring, uint8_t *tag8, unsigned n, uint8_t *pos,
				  unsigned age)
{
	unsigned s = (*pos + n - 1 - age) % n;
	for (; age > 0; age--) {
		unsigned t = s + 1 == n ? 0 : s + 1; /* the slot of the next younger entry */
		ring[s] = ring[t];
		if (tag8)
			tag8[s] = tag8[t];
		s = t;
	}
	ring[s] = 0;
	if (tag8)
		tag8[s] = 0;
	*pos = (uint8_t)s;
}

/* Find @addr in @ring of @n entries and take it out (a block is matched
 * once). Returns its age (0 = written last, just before *@pos), or
 * MT_ADDR_EXPLICIT. The newest entry is the usual match and is tried
 * first; otherwise the bytes of the ring's tags equal to @tag are found
 * eight at a time (the zero-byte test below may also flag a byte above a
 * real match; every candidate is checked against the ring), so that a
 * miss, the common case of new memory, costs a few operations and no
 * loop over entries. When an address is in the ring twice (a lost free),
 * the record names one of them and the decoder follows it. */
static inline unsigned mt__ring_take(uint64_t *ring, uint8_t *tag8, unsigned n, uint8_t *pos,
				     uint64_t addr, uint64_t tag)
{
	const uint64_t ones = 0x0101010101010101ull;
	unsigned newest = (*pos + n - 1) % n;
	if (!addr) /* a failed allocation; 0 marks an empty slot */
		return MT_ADDR_EXPLICIT;
	if (ring[newest] == addr) {
		mt__ring_close(ring, tag8, n, pos, 0);
		return 0;
	}
	for (unsigned w = 0; w < n; w += 8) {
		uint64_t tags;
		memcpy(&tags, tag8 + w, sizeof(tags)); /* byte order does not matter */
		uint64_t x = tags ^ (tag * ones);
		uint64_t m = (x - ones) & ~x & (ones << 7);
		if (n - w < 8)
			m &= (1ull << (8 * (n - w))) - 1;
		while (m) {
			unsigned i = w + ((unsigned)__builtin_ctzll(m) >> 3);
			if (ring[i] == addr) {
				unsigned age = (*pos + n - 1 - i) % n;
				mt__ring_close(ring, tag8, n, pos, age);
				return age;
			}
			m &= m - 1;
		}
	}
	return MT_ADDR_EXPLICIT;
}

/* Append @addr with its @tag to @ring of @n entries at *@pos. */
static inline void mt__ring_push(uint64_t *ring, uint8_t *tag8, unsigned n, uint8_t *pos,
				 uint64_t addr, uint64_t tag)
{
	unsigned i = *pos;
	ring[i] = addr;
	tag8[i] = (uint8_t)tag;
	*pos = (uint8_t)(i + 1 == n ? 0 : i + 1);
}

/* The final address mode for ring match @mode, and for a delta mode the
 * zigzag delta from @prev into *@zd. */
static inline unsigned mt__addr_mode(unsigned mode, uint64_t prev, uint64_t addr, uint64_t *zd)
{
	int64_t delta = (int64_t)(addr - prev);
	if (mode == MT_ADDR_EXPLICIT && (delta & 15) == 0) {
		mode = MT_ADDR_ALIGNED;
		delta >>= 4; /* exact; GCC and Clang shift signed values arithmetically */
	}
	*zd = mt_zigzag(delta);
	return mode;
}

/* The slot of FREE kind @kind's delta base (a raw free uses free's:
 * the RAW domain's blocks are malloc's; its coders pass MT_ALLOC_FREE). */
static inline unsigned mt__free_base(unsigned kind)
{
	return kind == MT_ALLOC_FREE ? 0 : kind == MT_ALLOC_MUNMAP ? 1 : 2;
}

/* The slot of @addr in struct mt_reuse's table: bits 4..15. */
static inline unsigned mt__block_slot(uint64_t addr)
{
	return (unsigned)(addr >> 4) % MT_BLOCK_SLOTS;
}

/* The block of small size class @c freed last, or 0. */
static inline uint64_t mt__reused(const struct mt_reuse *r, unsigned c)
{
	return r->n[c] ? r->freed[c][r->top[c]] : 0;
}

/* The shared state after an ALLOC of size class @c at @addr: the block is
 * no longer the one freed last of its class, and its class is noted. */
static inline void mt__reuse_alloc(struct mt_reuse *r, unsigned c, uint64_t addr)
{
	unsigned slot = mt__block_slot(addr);
	if (c < MT_SMALL_CLASSES && addr && mt__reused(r, c) == addr) {
		r->n[c]--;
		r->top[c] = (uint8_t)((r->top[c] + MT_REUSE_DEPTH - 1) % MT_REUSE_DEPTH);
	}
	r->block[slot] = addr;
	r->block_class[slot] = (uint8_t)c;
}

/* The shared state after a FREE of @addr: a block whose small size class
 * is known becomes the one freed last of its class. */
static inline void mt__reuse_free(struct mt_reuse *r, uint64_t addr)
{
	unsigned slot = mt__block_slot(addr);
	if (!addr || r->block[slot] != addr)
		return;
	unsigned c = r->block_class[slot];
	r->block[slot] = 0;
	if (c >= MT_SMALL_CLASSES)
		return;
	r->top[c] = (uint8_t)((r->top[c] + 1) % MT_REUSE_DEPTH);
	r->freed[c][r->top[c]] = addr;
	if (r->n[c] < MT_REUSE_DEPTH)
		r->n[c]++;
}

/* An ALLOC or FREE record's fields once coded, and the coding state moved
 * past it: what goes in each column (docs/format.md section 2.1). */
struct mt__hot {
	unsigned km;    /* kind | mode << 4 (a raw kind: its pymalloc kind | MT_ADDR_EXT << 4) */
	unsigned xm;    /* MT_XM_RAW << 4 | mode after a km of mode MT_ADDR_EXT, else 0 */
	uint64_t zaddr; /* the address varint, if mode >= MT_ADDR_SLOT */
	uint64_t zstack;
};

/* A record of raw kind @kind from one coded by mt__code_alloc() with its
 * pymalloc kind, or by mt__code_free() with MT_ALLOC_FREE (whose delta
 * base it shares): km names the pymalloc kind and mode MT_ADDR_EXT, xm
 * the address mode. The other kinds never come here, so that their
 * coding is what it was before the raw kinds. */
static inline void mt__hot_raw(struct mt__hot *h, unsigned kind)
{
	h->xm = MT_XM_RAW << 4 | h->km >> 4;
	h->km = (kind - MT_ALLOC_RAW_SHIFT) | MT_ADDR_EXT << 4;
}

/* The address mode of a coded record: km's, or xm's after MT_ADDR_EXT. */
static inline unsigned mt__hot_mode(struct mt__hot h)
{
	return h.xm ? h.xm & 15 : h.km >> 4;
}

static inline struct mt__hot mt__code_alloc(struct mt_delta *d, unsigned kind, uint64_t addr,
					    uint64_t size, uint32_t stack)
{
	struct mt__hot h;
	unsigned c = mt_size_class(size), mode;
	uint64_t *last = &d->last[c];
	uint64_t tag = mt__tag(addr);
	if (c < MT_SMALL_CLASSES && addr && d->reuse && mt__reused(d->reuse, c) == addr)
		mode = MT_ADDR_REUSED;
	else if (c < MT_SMALL_CLASSES && addr && *last + 16 * c == addr)
		mode = MT_ADDR_NEXT;
	else
		mode = mt__ring_take(d->freed, d->freed_tag, MT_FREED_RING, &d->freed_pos, addr, tag);
	h.zaddr = 0;
	if (mode >= MT_ADDR_ALIGNED)
		mode = mt__addr_mode(mode, *last, addr, &h.zaddr);
	h.km = kind | mode << 4;
	h.xm = 0;
	*last = addr;
	h.zstack = mt_zigzag((int64_t)stack - (int64_t)d->stack);
	d->stack = stack;
	mt__ring_push(d->live, d->live_tag, MT_LIVE_RING, &d->live_pos, addr, tag);
	if (d->reuse)
		mt__reuse_alloc(d->reuse, c, addr);
	return h;
}

static inline struct mt__hot mt__code_free(struct mt_delta *d, unsigned kind, uint64_t addr)
{
	struct mt__hot h;
	uint64_t tag = mt__tag(addr);
	uint64_t *base = &d->free_addr[mt__free_base(kind)];
	unsigned mode = mt__ring_take(d->live, d->live_tag, MT_LIVE_RING, &d->live_pos, addr, tag);
	unsigned slot = mt__block_slot(addr);
	h.zaddr = 0;
	if (mode == MT_ADDR_EXPLICIT && d->reuse && addr && d->reuse->block[slot] == addr) {
		/* a block allocated not long ago: its slot, as the distance
		 * from the last one named so, in -2048 ..= 2047 */
		int dv = (int)((slot - d->free_slot) % MT_BLOCK_SLOTS);
		mode = MT_ADDR_SLOT;
		h.zaddr = mt_zigzag(dv >= MT_BLOCK_SLOTS / 2 ? dv - MT_BLOCK_SLOTS : dv);
		d->free_slot = (uint16_t)slot;
	} else if (mode == MT_ADDR_EXPLICIT) {
		mode = mt__addr_mode(mode, *base, addr, &h.zaddr);
		*base = addr;
	}
	h.km = kind | mode << 4;
	h.xm = 0;
	h.zstack = 0;
	mt__ring_push(d->freed, d->freed_tag, MT_FREED_RING, &d->freed_pos, addr, tag);
	if (d->reuse)
		mt__reuse_free(d->reuse, addr);
	return h;
}

/* mt_enc_alloc() - ALLOC record into @p (>= MT_REC_HOT_MAX bytes). */
static inline size_t mt_enc_alloc(uint8_t *p, struct mt_delta *d, uint32_t thread,
				  unsigned kind, uint64_t addr, uint64_t size, uint32_t stack)
{
	size_t n = mt__rec_head(p, MT_REC_ALLOC, thread);
	int raw = mt_allocator_is_raw(kind);
	struct mt__hot h = mt__code_alloc(d, mt_allocator_pymalloc(kind), addr, size, stack);
	if (raw)
		mt__hot_raw(&h, kind);
	p[n++] = (uint8_t)h.km;
	if (h.xm)
		p[n++] = (uint8_t)h.xm;
	if (mt__hot_mode(h) >= MT_ADDR_SLOT)
		n += mt_varint_put(p + n, h.zaddr);
	n += mt_varint_put(p + n, size);
	n += mt_varint_put(p + n, h.zstack);
	return n;
}

/* mt_enc_free() - FREE record into @p (>= MT_REC_HOT_MAX bytes). @size is
 * written for MUNMAP only. */
static inline size_t mt_enc_free(uint8_t *p, struct mt_delta *d, uint32_t thread,
				 unsigned kind, uint64_t addr, uint64_t size)
{
	size_t n = mt__rec_head(p, MT_REC_FREE, thread);
	int raw = mt_allocator_is_raw(kind);
	struct mt__hot h = mt__code_free(d, raw ? MT_ALLOC_FREE : kind, addr);
	if (raw)
		mt__hot_raw(&h, kind);
	p[n++] = (uint8_t)h.km;
	if (h.xm)
		p[n++] = (uint8_t)h.xm;
	if (mt__hot_mode(h) >= MT_ADDR_SLOT)
		n += mt_varint_put(p + n, h.zaddr);
	if (kind == MT_ALLOC_MUNMAP)
		n += mt_varint_put(p + n, size);
	return n;
}

/* mt_rec_encode() - any record into @p. @d is the thread's delta state
 * (ALLOC/FREE only; may be NULL otherwise).
 * Returns bytes written, or -ENOSPC if @cap is too small (nothing useful
 * is left in @p then), or -EINVAL for an unknown type. */
ssize_t mt_rec_encode(uint8_t *p, size_t cap, const struct mt_record *r, struct mt_delta *d);

/* Returns the delta state of thread index @thread, or NULL if it cannot
 * be provided (the decode then fails with -ENOMEM). */
typedef struct mt_delta *(*mt_delta_fn)(void *ctx, uint32_t thread);

/* mt_rec_decode() - decode one record from [p, p+len).
 * Returns bytes consumed (> 0), -MT_ETRUNC if the record continues past
 * len, -MT_ECORRUPT if it is malformed, -ENOMEM if get_delta failed.
 * A record of a type this version does not know is skipped by its length:
 * r->type holds the unknown value and nothing else is filled in.
 * Byte strings in *r point into @p. */
ssize_t mt_rec_decode(const uint8_t *p, size_t len, struct mt_record *r,
		      mt_delta_fn get_delta, void *ctx);

/* ------------------------------------------------------------------------
 * File header.
 *   magic[8] "MEMTRACE", u16 version, u16 header_size, u32 flags, u32 pid,
 *   u32 python_hex, u64 start_ns, u32 interval_ms, u32 page_size,
 *   u64 main_tid, u32 cmdline_len, cmdline bytes (arguments NUL-separated)
 * ---------------------------------------------------------------------- */
/* Sizes past this many bits are more than any address space holds (x86-64
 * and arm64 user space are at most 2^57 bytes): an ALLOC that big is a
 * corrupt capture's, kept out of the reader's sums. (A munmap of any
 * length may be asked for: the kernel refuses it.) */
#define MT_SIZE_BITS 57

/* mt_size_possible() - whether @n bytes fit some address space. */
static inline int mt_size_possible(uint64_t n)
{
	return !(n >> MT_SIZE_BITS);
}

#define MT_HDR_ATTACHED (1u << 0)  /* started by attach, not at process start */
#define MT_HDR_PYALLOC (1u << 1)   /* PyMem OBJ, MEM (and from version 6 RAW) traced */
#define MT_HDR_NATIVE (1u << 2)    /* native stacks recorded */
#define MT_HDR_FOLLOW_FORK (1u << 3) /* children of fork() get captures of their own */
#define MT_HDR_FORKED (1u << 4)    /* started in the child of a fork, at the fork */
#define MT_HDR_AGGREGATED (1u << 5) /* SITE and TOTALS records, no ALLOC or FREE */
#define MT_HDR_NATIVE_NODES (1u << 6) /* NATIVE and HYBRID records in the node column */
#define MT_HDR_LINES (1u << 7)     /* from version 8: STACK records carry lines, CODE no tables */
#define MT_HDR_TRACKER (1u << 8)   /* started by the program (memtrace.Tracker), partway through */
#define MT_HDR_FIXED 52            /* bytes before the command line */
#define MT_CMDLINE_MAX 4096

struct mt_header {
	uint16_t version;
	uint32_t flags;
	uint32_t pid;
	uint32_t python_hex;  /* PY_VERSION_HEX of the target, 0 if unknown */
	uint64_t start_ns;    /* CLOCK_REALTIME at tracking start */
	uint32_t interval_ms; /* memory sample interval */
	uint32_t page_size;
	uint64_t main_tid;
	struct mt_bytes cmdline;
};

/* mt_header_encode() - Returns bytes written or -ENOSPC. */
ssize_t mt_header_encode(uint8_t *p, size_t cap, const struct mt_header *h);
/* mt_header_lines() - whether the STACK records of a capture of header @h
 * carry source lines rather than bytecode offsets. */
static inline int mt_header_lines(const struct mt_header *h)
{
	return h->version >= MT_FORMAT_VERSION_LINES && (h->flags & MT_HDR_LINES);
}

/* mt_header_decode() - Returns header size, -MT_EFORMAT (bad magic),
 * -MT_EVERSION (newer major version) or -MT_ETRUNC. */
ssize_t mt_header_decode(const uint8_t *p, size_t len, struct mt_header *h);

/* ------------------------------------------------------------------------
 * Chunks: after the header the file is a sequence of chunks, each
 *   magic[4] "MTCK", u32 raw_len, u32 stored_len, u32 checksum, data.
 * data is the coded form (format/pack.h) of raw_len bytes of chunk data
 * (the records as columns, format/columns.h), or the chunk data
 * themselves when stored_len == raw_len. checksum is mt_checksum() (MT32)
 * of the stored bytes. Records never span chunks, but a chunk does not
 * decode on its own: its columns' LZ4 blocks refer back into the columns
 * of the chunks before, and the hot records' delta state (struct
 * mt_delta) runs across chunks, so a chunk's records can only be decoded
 * after those of every chunk before.
 * ---------------------------------------------------------------------- */
#define MT_CHUNK_MAGIC "MTCK"
#define MT_CHUNK_HEADER 16
#define MT_CHUNK_RAW_MAX (256u << 10)  /* writer's chunk size */
#define MT_CHUNK_LIMIT (64u << 20)     /* reader's sanity bound */

struct mt_chunk {
	uint32_t raw_len;
	uint32_t stored_len;
	uint32_t checksum;
};

void mt_chunk_header_encode(uint8_t p[MT_CHUNK_HEADER], const struct mt_chunk *c);
/* Returns 0, or -MT_ECORRUPT for a bad magic or impossible sizes. */
int mt_chunk_header_decode(const uint8_t p[MT_CHUNK_HEADER], struct mt_chunk *c);

/* mt_checksum() - MT32 of @p: 64-bit multiply-rotate rounds over 8-byte
 * words in four lanes, the tail bytes one at a time, folded to 32 bits
 * (docs/format.md section 2 gives the exact steps). */
uint32_t mt_checksum(const uint8_t *p, size_t len);

#endif /* MT_FORMAT_RECORD_H */
