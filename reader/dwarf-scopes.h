/* SPDX-License-Identifier: MIT */
#ifndef MT_READER_DWARF_SCOPES_H
#define MT_READER_DWARF_SCOPES_H
/*
 * The concrete DWARF scopes around an address of one libdwfl module, for
 * the native symbolizer (reader/symbols.c): the DW_TAG_subprogram that
 * holds the address and, nested in it, the DW_TAG_inlined_subroutine and
 * DW_TAG_lexical_block DIEs that hold it too.
 *
 * The address ranges of a DIE's child scopes (for a unit: its functions,
 * in its namespaces too; one entry per range, so a function's .cold part
 * is found) are sorted once, when a lookup first goes through that DIE;
 * a lookup is then one binary search per level of nesting, which keeps
 * it cheap in functions with thousands of inlined calls (CPython's
 * _PyEval_EvalFrameDefault). This replaces dwarf_getscopes() +
 * dwarf_getscopes_die(): for
 * an address in an inlined instance, dwarf_getscopes() searches the
 * instance's unit for its abstract origin, twice over the whole unit,
 * and returns no scope when the origin is in another unit, which is
 * every inlined call of an LTO build (Debian's libpython3.11 and
 * python3.11; elfutils 0.188).
 *
 * The DIEs written out belong to the module's Dwarf: valid while its
 * libdwfl session lives. An mt_dwarf_scopes belongs to one module and is
 * used by one thread at a time. Nothing here prints.
 */
#include <stddef.h>           /* size_t */
#include <stdint.h>           /* uint32_t */
#include <elfutils/libdwfl.h> /* Dwfl_Module, Dwarf_Die, Dwarf_Addr */

struct mt_dwarf_scopes;

/* mt_dwarf_scopes_new() - an empty index for @mod. NULL on ENOMEM. */
struct mt_dwarf_scopes *mt_dwarf_scopes_new(Dwfl_Module *mod);

/* mt_dwarf_scopes_free() - NULL is a no-op. */
void mt_dwarf_scopes_free(struct mt_dwarf_scopes *d);

/* mt_dwarf_scopes_at() - the scopes holding libdwfl address @pc into
 * @out[0..max), outermost first: @out[0] is the DW_TAG_subprogram, each
 * next one is nested in the one before (a deeper chain is cut at @max).
 * Returns how many: 0 when no function of the module's DWARF holds @pc
 * (no DWARF, no unit, a unit without that function, or no memory to
 * index the unit). */
size_t mt_dwarf_scopes_at(struct mt_dwarf_scopes *d, Dwarf_Addr pc, Dwarf_Die *out, size_t max);

/* mt_dwarf_call_site() - where inlined instance @die was called from:
 * its DW_AT_call_file (NULL when unknown) and DW_AT_call_line (0). */
void mt_dwarf_call_site(Dwarf_Die *die, const char **file, uint32_t *line);

/* mt_dwarf_known_file() - @f, or NULL when it names no file ("???" is
 * libdw's name for a DWARF 4 file index 0). */
const char *mt_dwarf_known_file(const char *f);

#endif /* MT_READER_DWARF_SCOPES_H */
