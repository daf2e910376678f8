/* SPDX-License-Identifier: MIT */
#ifndef MT_READER_SYMBOLS_H
#define MT_READER_SYMBOLS_H
/*
 * The native symbolizer: (module, module-relative offset) -> source
 * frames, innermost first, for the return addresses of native stacks.
 * Reader only: the target records addresses and its module map and never
 * symbolizes.
 *
 * Modules. A module is added as the capture recorded it (path, build-id,
 * load bias) and opened at its first resolve, never before. Its ELF is,
 * in order: the file at its path if its build-id is the recorded one (or
 * none was recorded); else <root>/.build-id/xx/rest.debug, then
 * <root>/.build-id/xx/rest, under each debug root (default
 * /usr/lib/debug; see mt_symbols_set_debug_roots()), if its build-id is
 * the recorded one; else, only when DEBUGINFOD_URLS is set and not empty,
 * what libdwfl's dwfl_build_id_find_elf() finds (its local lookups, then
 * debuginfod). A module with none of these is missing: all its addresses
 * give "<path basename>+0x<offset>", and it counts once in
 * modules_missing.
 *
 * Each opened module has a libdwfl session of its own, kept for the life
 * of the mt_symbols, with the file reported by dwfl_report_elf() at base
 * 0 with p_vaddr added, so that libdwfl's addresses are the ELF's own
 * virtual addresses: for both ET_DYN (load bias = dl_iterate_phdr's
 * dlpi_addr) and ET_EXEC (bias 0), address - load bias. Separate debug
 * info is found by dwfl_standard_find_debuginfo(): by build-id under the
 * debug roots, then .gnu_debuglink next to the file, in its .debug/ and
 * under the roots, then debuginfod. Without DEBUGINFOD_URLS that last
 * step would only load libdebuginfod and libcurl (about 20 ms, once per
 * process) to learn it has no servers, so then the standard search runs
 * only if the build-id lookup failed and a file of a name it tries
 * exists.
 *
 * Names. Each module's function symbols (.symtab, or .dynsym when the
 * file is stripped, as Debian's python3.11 is) are sorted once, at its
 * first resolve, and binary-searched; a symbol with a size covers only
 * its size, one without reaches the next symbol. With DWARF, the
 * physical function is named by its DW_TAG_subprogram (through abstract
 * origins and specifications), and the inlined functions around the
 * address come from the concrete DIE nesting (reader/dwarf-scopes.h),
 * each outer frame's line from the inner one's DW_AT_call_file and
 * DW_AT_call_line. C++ names are not demangled.
 *
 * Cache. Each distinct (module, offset) is resolved once: a second
 * resolve copies the stored frames and does not touch libdw. Strings
 * (function and file names) are interned: equal strings share a pointer,
 * valid until mt_symbols_free().
 *
 * Thread-safety: none; one thread at a time per mt_symbols (libdwfl
 * sessions are not thread-safe either). Different mt_symbols are
 * independent. Nothing here prints or exits.
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint8_t, uint32_t, uint64_t */

struct mt_symframe {
	const char *function; /* never NULL: the symbol name, or "<module basename>+0x<offset hex>" */
	const char *file;     /* source file, NULL when unknown */
	uint32_t line;        /* 0 when unknown */
	uint8_t inlined;      /* 1: this function was inlined into the next frame out */
};

struct mt_symbols; /* opaque */

struct mt_symbols_stats {
	uint64_t addresses;  /* distinct (module, offset) resolved */
	uint64_t unresolved; /* of those, named "<basename>+0x<offset>" */
	uint32_t modules;    /* added */
	uint32_t modules_missing; /* opened and found missing (see above) */
};

/* mt_symbols_new() - an empty symbolizer. Returns NULL on ENOMEM.
 * Free with mt_symbols_free(). */
struct mt_symbols *mt_symbols_new(void);

/* mt_symbols_free() - every module session, cached frame and string of
 * @s. NULL is a no-op. */
void mt_symbols_free(struct mt_symbols *s);

/* mt_symbols_set_debug_roots() - the directories that hold .build-id/
 * trees and debuglink copies, ':'-separated absolute paths (the
 * default: "/usr/lib/debug"). Call before the first resolve; the string
 * is copied. Returns 0, -EINVAL (a module is already open, or NULL) or
 * -ENOMEM. */
int mt_symbols_set_debug_roots(struct mt_symbols *s, const char *roots);

/* A module as the capture recorded it. Returns its handle (>= 0) or -1 (ENOMEM).
 * Nothing is opened until its first resolve. @build_id may be NULL/0 length. */
int mt_symbols_add_module(struct mt_symbols *s, const char *path, const uint8_t *build_id,
			  size_t build_id_len, uint64_t load_bias);

/* @offset is module-relative (ip - load_bias) and already points INTO the call instruction
 * (the caller passed return address - 1). Writes the frames for it innermost first: each
 * inlined function (inlined = 1), then the physical function last; at most @max (>= 1),
 * returns how many (>= 1). Strings are interned and live as long as @s. Results are cached
 * per (module, offset): a second call must not touch libdw.
 *
 * A chain deeper than @max is cut after its @max innermost frames. An
 * unknown @module gives "<unknown>+0x<offset>", neither cached nor
 * counted (the module may be added later). If memory runs out the one
 * frame is "<unknown>" (a static string) and nothing is cached.
 * @max == 0 writes nothing and returns 0. */
size_t mt_symbols_resolve(struct mt_symbols *s, int module, uint64_t offset,
			  struct mt_symframe *out, size_t max);

/* mt_symbols_stats() - @s's counters into *@st (zeros for NULL). */
void mt_symbols_stats(const struct mt_symbols *s, struct mt_symbols_stats *st);

#endif /* MT_READER_SYMBOLS_H */
